// engine_convert.cu: the emulation engine's conversions. Each element goes through the library's own
// reference routine (lib/src/round/round_core.h, compiled here for the device), so every format of 8 bits or
// fewer and every CastOptions gives the CPU's bytes and flags; stochastic rounding reads the library's
// Philox stream (qmx/rng.h), one Philox block per thread. FP32 inputs under a deterministic rounding, without
// flags, take a step table built from the same routine on the host (below).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine_blocks.cuh"
#include "gpu_internal.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/gpu.h"
#include "qmx/host_device.h"
#include "qmx/mx.h"
#include "qmx/rng.h"
#include "quantize/mx_core.h"
#include "round/round_core.h"

namespace qmx::gpu {
namespace {

using detail::Fp32Fields;
using detail::LoadBits;
using detail::MxArgs;
using detail::MxBlockAt;
using detail::StepTable;
using detail::kBucketsPerSign;
using detail::kInfMag;
using detail::kMaxSteps;

// Thread t handles the four elements of Philox block (first >> 2) + t that fall inside [first, first + n):
// element k (0-based in the call) has stream index first + k. bits, when given, replaces the stream.
template <typename Word>
__device__ __forceinline__ void ConvertGroups(const Format& src_fmt, const void* src, uint64_t n, const Format& dst,
                                              const CastOptions& opt, uint64_t seed, uint64_t first,
                                              const uint32_t* bits, uint8_t* out, uint8_t* flags, uint64_t groups) {
  const bool stochastic = qmx::detail::IsStochasticCore(opt.rounding);
  for (uint64_t g = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t block = (first >> 2) + g;
    Philox4x32Counter words{};
    if (stochastic && bits == nullptr) words = RandomWordsForBlock(seed, block);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint64_t index = 4 * block + j;
      if (index < first || index - first >= n) continue;
      const uint64_t k = index - first;
      const uint64_t x = LoadBits<Word>(src, k);
      const uint32_t r = !stochastic ? 0u : bits != nullptr ? bits[k] : words[j];
      const RoundResult res = qmx::detail::ConvertCore(src_fmt, x, dst, opt, r);
      out[k] = static_cast<uint8_t>(res.code);
      if (flags != nullptr) flags[k] = static_cast<uint8_t>(res.flags);
    }
  }
}

// Any source and destination format, passed as kernel arguments.
template <typename Word>
__global__ void ConvertKernel(Format src_fmt, const void* src, uint64_t n, Format dst, CastOptions opt,
                              uint64_t seed, uint64_t first, const uint32_t* bits, uint8_t* out, uint8_t* flags,
                              uint64_t groups) {
  ConvertGroups<Word>(src_fmt, src, n, dst, opt, seed, first, bits, out, flags, groups);
}

// FP32 into one of the registry's element formats, given by its fields: the same routine with the formats
// compile-time constants, which the compiler folds into it (cli/bench/PERFORMANCE.md "Engine conversions").
template <int kExp, int kMan, int kBias, bool kSigned, Encoding kEnc>
__global__ void ConvertKernelF32Fixed(const void* src, uint64_t n, CastOptions opt, uint64_t seed, uint64_t first,
                                      const uint32_t* bits, uint8_t* out, uint8_t* flags, uint64_t groups) {
  constexpr Format kDst{"", kExp, kMan, kBias, kSigned, kEnc};
  ConvertGroups<uint32_t>(Fp32Fields(), src, n, kDst, opt, seed, first, bits, out, flags, groups);
}

// Deterministic roundings (every mode but stochastic rounding) map an FP32 input to a code that depends only
// on its sign and magnitude bits, and for each sign the code is a step function of the magnitude: rounding
// is monotone, overflow stays overflow, and NaN inputs (magnitudes above Inf's) are apart. The host walks
// the steps with the reference routine itself (a binary search for the end of each), at most a few hundred
// per sign, and the kernel finds an input's step by binary search in shared memory: the same function as
// the routine, at memory speed. xval --engine and the [gpu] tests compare it with the CPU on every format
// and option set (all 2^32 inputs with --exhaustive).
// false when a sign needs more than kMaxSteps steps.
bool BuildSteps(const Format& dst, const CastOptions& opt, StepTable* t) {
  const auto code = [&](uint32_t sign, uint32_t mag) {
    return static_cast<uint8_t>(qmx::detail::ConvertCore(fmt::kFP32, (sign << 31) | mag, dst, opt, 0).code);
  };
  for (uint32_t sign = 0; sign < 2; ++sign) {
    t->nan_code[sign] = code(sign, 0x7FC00000u);
    int n = 0;
    for (uint64_t lo = 0; lo <= kInfMag;) {
      if (n == kMaxSteps) return false;
      const uint8_t c = code(sign, static_cast<uint32_t>(lo));
      // The largest hi in [lo, kInfMag] with code(hi) == c: gallop, then bisect.
      uint64_t good = lo, step = 1;
      while (good + step <= kInfMag && code(sign, static_cast<uint32_t>(good + step)) == c) {
        good += step;
        step *= 2;
      }
      uint64_t bad = good + step > kInfMag ? kInfMag + 1 : good + step;
      while (bad - good > 1) {
        const uint64_t mid = good + (bad - good) / 2;
        if (code(sign, static_cast<uint32_t>(mid)) == c) good = mid;
        else bad = mid;
      }
      t->end[sign][n] = static_cast<uint32_t>(good);
      t->code[sign][n] = c;
      ++n;
      lo = good + 1;
    }
    t->count[sign] = n;
  }
  return true;
}

}  // namespace

namespace detail {
// The tables built so far, by destination fields and options: a call on the same conversion reuses its
// table instead of walking the steps again (about 30,000 runs of the routine for an FP8 format). nullptr:
// the conversion has too many steps for a table.
std::shared_ptr<const StepTable> StepsFor(const Format& dst, const CastOptions& opt) {
  using Key = std::array<int, 11>;
  const Key key{dst.exp_bits, dst.man_bits,   dst.bias, dst.is_signed, static_cast<int>(dst.encoding),
                static_cast<int>(opt.rounding), static_cast<int>(opt.saturation), static_cast<int>(opt.nan_sign),
                static_cast<int>(opt.nan_fallback), static_cast<int>(opt.subnormals), static_cast<int>(opt.negative_unsigned)};
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const StepTable>> cache;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto t = std::make_shared<StepTable>();
  std::shared_ptr<const StepTable> built = BuildSteps(dst, opt, t.get()) ? std::move(t) : nullptr;
  const std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= 256) cache.clear();  // a bound on memory for callers that sweep options
  return cache.emplace(key, std::move(built)).first->second;
}

namespace {

// The bucket table of a step table (engine_blocks.cuh): false when a bucket meets more than two steps.
bool BuildBuckets(const StepTable& t, std::vector<uint32_t>& out) {
  out.assign(2 * kBucketsPerSign, 0);
  const auto entry = [](uint32_t lo, uint32_t hi, uint32_t end_lo) { return lo | hi << 8 | end_lo << 16; };
  for (uint32_t s = 0; s < 2; ++s) {
    int i = 0;  // the first step whose end is at or above the bucket's first magnitude
    for (uint32_t b = 0; b < kBucketsPerSign; ++b) {
      const uint32_t first = b << 16, last = first | 0xFFFFu;
      uint32_t& e = out[s * kBucketsPerSign + b];
      if (first > kInfMag) {
        e = entry(t.nan_code[s], t.nan_code[s], 0xFFFFu);
        continue;
      }
      while (t.end[s][i] < first) ++i;
      const uint32_t end = t.end[s][i];
      if (end >= last) {
        e = entry(t.code[s][i], t.code[s][i], 0xFFFFu);
        continue;
      }
      // A second step from end + 1: NaN past Inf, else the next step, which must reach the bucket's end.
      if (end != kInfMag && (i + 1 >= t.count[s] || t.end[s][i + 1] < last)) return false;
      e = entry(t.code[s][i], end == kInfMag ? t.nan_code[s] : t.code[s][i + 1], end & 0xFFFFu);
    }
  }
  return true;
}

}  // namespace

// Uploaded once per conversion and device, kept for the process (a bounded number: past it, null, and the
// callers take the step-table or routine paths).
const uint32_t* DeviceBucketsFor(const Format& dst, const CastOptions& opt) {
  if (qmx::detail::IsStochasticCore(opt.rounding)) return nullptr;
  const std::shared_ptr<const StepTable> steps = StepsFor(dst, opt);
  if (steps == nullptr) return nullptr;
  int device = 0;
  Check(cudaGetDevice(&device), "cudaGetDevice");
  static std::mutex mutex;
  static std::map<std::pair<const StepTable*, int>, const uint32_t*> cache;  // StepsFor's tables stay alive here
  static std::vector<std::shared_ptr<const StepTable>> kept;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(steps.get(), device);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= 64) return nullptr;
  std::vector<uint32_t> host;
  uint32_t* dev = nullptr;
  if (BuildBuckets(*steps, host)) {
    Check(cudaMalloc(reinterpret_cast<void**>(&dev), host.size() * sizeof(uint32_t)), "cudaMalloc");
    Check(cudaMemcpy(dev, host.data(), host.size() * sizeof(uint32_t), cudaMemcpyHostToDevice), "copy to device");
  }
  kept.push_back(steps);
  cache.emplace(key, dev);
  return dev;
}

}  // namespace detail

namespace {

using detail::StepsFor;

__global__ void ConvertKernelSteps(const uint32_t* src, uint64_t n, const StepTable* table, uint8_t* out) {
  __shared__ uint32_t end[2][kMaxSteps];
  __shared__ uint8_t code[2][kMaxSteps];
  __shared__ int count[2];
  __shared__ uint8_t nan_code[2];
  for (int s = 0; s < 2; ++s)
    for (int i = threadIdx.x; i < table->count[s]; i += blockDim.x) {
      end[s][i] = table->end[s][i];
      code[s][i] = table->code[s][i];
    }
  if (threadIdx.x < 2) {
    count[threadIdx.x] = table->count[threadIdx.x];
    nan_code[threadIdx.x] = table->nan_code[threadIdx.x];
  }
  __syncthreads();
  for (uint64_t k = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint32_t x = src[k];
    const uint32_t sign = x >> 31, mag = x & 0x7FFFFFFFu;
    uint8_t c;
    if (mag > kInfMag) {
      c = nan_code[sign];
    } else {
      // The first step whose end is >= mag (the last step ends at kInfMag, so one exists).
      int lo = 0, len = count[sign];
      while (len > 0) {
        const int half = len >> 1;
        if (end[sign][lo + half] < mag) {
          lo += half + 1;
          len -= half + 1;
        } else {
          len = half;
        }
      }
      c = code[sign][lo];
    }
    out[k] = c;
  }
}

// The source's format: FormatOfSource's, and fp64 too.
const Format& SourceFields(DType t) {
  if (t == DType::kF64) return fmt::kFP64;
  if (!IsFastSource(t)) throw Error(std::string("engine: conversions read fp32, fp64, fp16 or bf16, not ") + DTypeName(t));
  return FormatOfSource(t);
}

// The step-table path where it applies (FP32 in memory, a deterministic rounding, no flags asked for): true
// when it ran.
bool LaunchSteps(DType t, const void* src, uint64_t n, const Format& dst, const CastOptions& opt, uint8_t* out,
                 uint8_t* flags, cudaStream_t stream) {
  if (t != DType::kF32 || flags != nullptr || qmx::detail::IsStochasticCore(opt.rounding)) return false;
  const std::shared_ptr<const StepTable> host = StepsFor(dst, opt);
  if (host == nullptr) return false;
  // The table travels with the stream's work: a device copy freed after the kernel (stream-ordered).
  StepTable* dev = nullptr;
  detail::Check(cudaMallocAsync(reinterpret_cast<void**>(&dev), sizeof(StepTable), stream), "cudaMallocAsync");
  detail::Check(cudaMemcpyAsync(dev, host.get(), sizeof(StepTable), cudaMemcpyHostToDevice, stream), "copy to device");
  // Grid-stride blocks, each loading the table into shared memory once: enough to fill today's largest GPUs
  // (132 SMs x 16 blocks), few enough that the loads stay small beside the data.
  constexpr int kThreads = 512;
  constexpr uint64_t kMaxBlocks = 2112;
  const uint64_t want = (n + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(want < kMaxBlocks ? want : kMaxBlocks);
  ConvertKernelSteps<<<grid, kThreads, 0, stream>>>(static_cast<const uint32_t*>(src), n, dev, out);
  detail::Check(cudaGetLastError(), "engine convert kernel launch");
  detail::Check(cudaFreeAsync(dev, stream), "cudaFreeAsync");
  // The pageable source of cudaMemcpyAsync is staged before it returns; the cache keeps it alive anyway.
  return true;
}

void Launch(DType t, const void* src, uint64_t n, const Format& dst, const CastOptions& opt, const SrSource& sr,
            uint8_t* out, uint8_t* flags, cudaStream_t stream) {
  if (n == 0) return;
  if (LaunchSteps(t, src, n, dst, opt, out, flags, stream)) return;
  const uint64_t groups = ((sr.first_index + n + 3) >> 2) - (sr.first_index >> 2);
  constexpr int kThreads = 256;
  const uint64_t want = (groups + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(want < 65535ull * 16 ? want : 65535ull * 16);
  const Format& sf = SourceFields(t);
  const auto fixed = [&](const Format& f) { return t == DType::kF32 && dst == f; };
#define QMX_ENGINE_FIXED(f)                                                                                             \
  ConvertKernelF32Fixed<f.exp_bits, f.man_bits, f.bias, f.is_signed, f.encoding>                                       \
      <<<grid, kThreads, 0, stream>>>(src, n, opt, sr.seed, sr.first_index, sr.bits, out, flags, groups)
  if (fixed(fmt::kE4M3)) QMX_ENGINE_FIXED(fmt::kE4M3);
  else if (fixed(fmt::kE5M2)) QMX_ENGINE_FIXED(fmt::kE5M2);
  else if (fixed(fmt::kE3M2)) QMX_ENGINE_FIXED(fmt::kE3M2);
  else if (fixed(fmt::kE2M3)) QMX_ENGINE_FIXED(fmt::kE2M3);
  else if (fixed(fmt::kE2M1)) QMX_ENGINE_FIXED(fmt::kE2M1);
  else if (fixed(fmt::kUE8M0)) QMX_ENGINE_FIXED(fmt::kUE8M0);
  else if (fixed(fmt::kInt8)) QMX_ENGINE_FIXED(fmt::kInt8);
#undef QMX_ENGINE_FIXED
  else switch (t) {
    case DType::kF32:
      ConvertKernel<uint32_t><<<grid, kThreads, 0, stream>>>(sf, src, n, dst, opt, sr.seed, sr.first_index, sr.bits,
                                                             out, flags, groups);
      break;
    case DType::kF64:
      ConvertKernel<uint64_t><<<grid, kThreads, 0, stream>>>(sf, src, n, dst, opt, sr.seed, sr.first_index, sr.bits,
                                                             out, flags, groups);
      break;
    default:
      ConvertKernel<uint16_t><<<grid, kThreads, 0, stream>>>(sf, src, n, dst, opt, sr.seed, sr.first_index, sr.bits,
                                                             out, flags, groups);
      break;
  }
  detail::Check(cudaGetLastError(), "engine convert kernel launch");
}

}  // namespace

void EngineConvertCheck(DType src_type, const Format& dst, const CastOptions& opt) {
  (void)SourceFields(src_type);
  if (!IsFastFormat(dst))
    throw Error(std::string("engine: format '") + dst.name + "' has " + std::to_string(dst.Bits()) +
                " bits; the engine writes codes of 8 bits or fewer, one byte each");
  ValidateCastOptions(dst, opt);
}

void EngineConvertOnDevice(DType src_type, const void* src, size_t n, const Format& dst, const CastOptions& opt,
                           uint8_t* out, uint8_t* flags, const SrSource& sr, void* stream) {
  EngineConvertCheck(src_type, dst, opt);
  Require("the engine's conversions");
  Launch(src_type, src, n, dst, opt, sr, out, flags, static_cast<cudaStream_t>(stream));
}

void EngineConvert(DType src_type, const void* src, size_t n, const Format& dst, const CastOptions& opt,
                   uint8_t* out, uint8_t* flags, const SrSource& sr, double* kernel_seconds) {
  EngineConvertCheck(src_type, dst, opt);
  Require("the engine's conversions");
  if (n == 0) return;
  const size_t esize = DTypeSize(src_type);
  detail::DeviceBuffer<uint8_t> d_src(static_cast<const uint8_t*>(src), n * esize);
  detail::DeviceBuffer<uint8_t> d_out(n), d_flags(flags != nullptr ? n : 0);
  detail::DeviceBuffer<uint32_t> d_bits(sr.bits != nullptr && IsStochastic(opt.rounding) ? n : 0);
  SrSource dsr = sr;
  if (d_bits.get() != nullptr) {
    d_bits.Upload(sr.bits, n);
    dsr.bits = d_bits.get();
  } else {
    dsr.bits = nullptr;
  }
  detail::EventPair ev;
  detail::Check(cudaEventRecord(ev.start), "cudaEventRecord");
  Launch(src_type, d_src.get(), n, dst, opt, dsr, d_out.get(), d_flags.get(), nullptr);
  detail::Check(cudaEventRecord(ev.stop), "cudaEventRecord");
  detail::Check(cudaEventSynchronize(ev.stop), "engine convert kernel");
  if (kernel_seconds != nullptr) *kernel_seconds = ev.Seconds();
  d_out.Download(out, n);
  if (flags != nullptr) d_flags.Download(flags, n);
}

// ------------------------------------------------------------------ MX block quantization
namespace {

// One warp per block of `a.block` consecutive elements (MxBlockAt, engine_blocks.cuh).
template <typename Word>
__device__ __forceinline__ void MxBlock(const void* src, uint64_t n, uint64_t blocks, const MxArgs& a, const Format& elem,
                                       uint8_t* codes, uint8_t* scales) {
  const uint64_t b = (blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x) / 32;
  if (b >= blocks) return;  // whole warps leave together: blockDim.x is a multiple of 32
  const uint64_t start = b * static_cast<uint64_t>(a.block);
  const uint64_t count = start + a.block < n ? a.block : n - start;
  MxBlockAt<Word>(src, count, [start](uint64_t t) { return start + t; }, a, elem, codes, scales + b);
}

template <typename Word>
__global__ void MxKernel(const void* src, uint64_t n, uint64_t blocks, MxArgs a, uint8_t* codes, uint8_t* scales) {
  MxBlock<Word>(src, n, blocks, a, a.elem, codes, scales);
}

// The element format a compile-time constant (the registry's element formats), as for the conversions.
template <typename Word, int kExp, int kMan, int kBias, bool kSigned, Encoding kEnc>
__global__ void MxKernelFixed(const void* src, uint64_t n, uint64_t blocks, MxArgs a, uint8_t* codes, uint8_t* scales) {
  constexpr Format kElem{"", kExp, kMan, kBias, kSigned, kEnc};
  MxBlock<Word>(src, n, blocks, a, kElem, codes, scales);
}

}  // namespace

void EngineQuantizeMx(DType src_type, const void* src, size_t n, const MxSpec& spec, uint8_t* codes, uint8_t* scales,
                      const SrSource& sr, double* kernel_seconds) {
  ValidateMxSpec(spec);
  if (!(spec.scale_format == fmt::kUE8M0))
    throw Error(std::string("engine: MX scales in ") + spec.scale_format.name +
                " run on the CPU's reference (qmx::QuantizeMx), not on the engine yet (it takes UE8M0)");
  const Format& sf = FormatOfSource(src_type);  // and QuantizeMx's refusal of other sources
  Require("the engine's MX quantization");
  if (n == 0) return;
  MxArgs a{sf, spec.elem, spec.cast, spec.block, spec.rule, spec.nan, spec.scaling, 0.0f, 0, sr.seed, sr.first_index,
           nullptr};
  const FormatLimits lim = Limits(spec.elem);
  a.destmax = static_cast<float>(lim.max_finite);
  a.emax = lim.emax;
  const size_t esize = DTypeSize(src_type), nb = MxScaleCount(n, spec);
  detail::DeviceBuffer<uint8_t> d_src(static_cast<const uint8_t*>(src), n * esize), d_codes(n), d_scales(nb);
  detail::DeviceBuffer<uint32_t> d_bits(sr.bits != nullptr && IsStochastic(spec.cast.rounding) ? n : 0);
  if (d_bits.get() != nullptr) {
    d_bits.Upload(sr.bits, n);
    a.bits = d_bits.get();
  }
  constexpr int kThreads = 256;  // 8 warps, one MX block each
  const unsigned grid = static_cast<unsigned>((nb * 32 + kThreads - 1) / kThreads);
  detail::EventPair ev;
  detail::Check(cudaEventRecord(ev.start), "cudaEventRecord");
  const void* x = d_src.get();
  uint8_t *c = d_codes.get(), *sc = d_scales.get();
#define QMX_ENGINE_MX(W, f) MxKernelFixed<W, f.exp_bits, f.man_bits, f.bias, f.is_signed, f.encoding><<<grid, kThreads>>>(x, n, nb, a, c, sc)
  if (src_type == DType::kF32 && spec.elem == fmt::kE4M3) QMX_ENGINE_MX(uint32_t, fmt::kE4M3);
  else if (src_type == DType::kF32 && spec.elem == fmt::kE5M2) QMX_ENGINE_MX(uint32_t, fmt::kE5M2);
  else if (src_type == DType::kF32 && spec.elem == fmt::kE2M1) QMX_ENGINE_MX(uint32_t, fmt::kE2M1);
  else if (src_type == DType::kBF16 && spec.elem == fmt::kE4M3) QMX_ENGINE_MX(uint16_t, fmt::kE4M3);
  else if (src_type == DType::kBF16 && spec.elem == fmt::kE2M1) QMX_ENGINE_MX(uint16_t, fmt::kE2M1);
  else if (src_type == DType::kF32) MxKernel<uint32_t><<<grid, kThreads>>>(x, n, nb, a, c, sc);
  else MxKernel<uint16_t><<<grid, kThreads>>>(x, n, nb, a, c, sc);
#undef QMX_ENGINE_MX
  detail::Check(cudaGetLastError(), "engine MX kernel launch");
  detail::Check(cudaEventRecord(ev.stop), "cudaEventRecord");
  detail::Check(cudaEventSynchronize(ev.stop), "engine MX kernel");
  if (kernel_seconds != nullptr) *kernel_seconds = ev.Seconds();
  d_codes.Download(codes, n);
  d_scales.Download(scales, nb);
}

EngineConvertTiming TimeEngineConvert(const float* x, size_t n, const Format& dst, const CastOptions& opt, uint64_t seed,
                                      int reps, uint8_t* codes) {
  EngineConvertCheck(DType::kF32, dst, opt);
  Require("the engine's conversions");
  if (n == 0 || reps < 1) throw Error("engine: the conversion bench needs n > 0 and reps >= 1");
  detail::DeviceBuffer<float> d_x(x, n), d_copy(n);
  detail::DeviceBuffer<uint8_t> d_out(n);
  const auto median = [&](const auto& run) {
    std::vector<double> t;
    for (int r = 0; r <= reps; ++r) {  // run 0 warms up
      detail::EventPair ev;
      detail::Check(cudaEventRecord(ev.start), "cudaEventRecord");
      run();
      detail::Check(cudaEventRecord(ev.stop), "cudaEventRecord");
      detail::Check(cudaEventSynchronize(ev.stop), "engine convert bench");
      if (r > 0) t.push_back(ev.Seconds());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  EngineConvertTiming timing;
  timing.kernel_s = median([&] {
    Launch(DType::kF32, d_x.get(), n, dst, opt, SrSource{seed, 0, nullptr}, d_out.get(), nullptr, nullptr);
  });
  timing.copy_s = median([&] {
    detail::Check(cudaMemcpyAsync(d_copy.get(), d_x.get(), n * sizeof(float), cudaMemcpyDeviceToDevice), "copy on device");
  });
  d_out.Download(codes, n);
  return timing;
}

}  // namespace qmx::gpu
