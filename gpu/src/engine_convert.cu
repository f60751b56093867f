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

// FP32's fields, for device code (which cannot read the host's fmt::kFP32; kernels receive the host's
// formats by value instead).
__device__ constexpr Format Fp32Fields() { return {"fp32", 8, 23, 127, true, Encoding::kIeee}; }

template <typename Word>
__device__ __forceinline__ uint64_t LoadBits(const void* src, uint64_t k) {
  return static_cast<const Word*>(src)[k];
}

// Thread t handles the four elements of Philox block (first >> 2) + t that fall inside [first, first + n):
// element k (0-based in the call) has stream index first + k. bits, when given, replaces the stream.
template <typename Word>
__device__ __forceinline__ void ConvertGroups(const Format& src_fmt, const void* src, uint64_t n, const Format& dst,
                                              const CastOptions& opt, uint64_t seed, uint64_t first,
                                              const uint32_t* bits, uint8_t* out, uint8_t* flags, uint64_t groups) {
  const bool stochastic = internal::IsStochasticCore(opt.rounding);
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
      const RoundResult res = internal::ConvertCore(src_fmt, x, dst, opt, r);
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
constexpr int kMaxSteps = 1024;  // per sign; more steps than this would break the assumption: refuse the path
constexpr uint32_t kInfMag = 0x7F800000u;

struct StepTable {
  uint32_t end[2][kMaxSteps];  // the last magnitude of each step, ascending, the last one kInfMag
  uint8_t code[2][kMaxSteps];
  int count[2];
  uint8_t nan_code[2];
};

// false when a sign needs more than kMaxSteps steps.
bool BuildSteps(const Format& dst, const CastOptions& opt, StepTable* t) {
  const auto code = [&](uint32_t sign, uint32_t mag) {
    return static_cast<uint8_t>(internal::ConvertCore(fmt::kFP32, (sign << 31) | mag, dst, opt, 0).code);
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
  if (t != DType::kF32 || flags != nullptr || internal::IsStochasticCore(opt.rounding)) return false;
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

struct MxArgs {
  Format src_fmt, elem;
  CastOptions cast;
  int block, rule, policy, scaling;  // ScaleRule, NanPolicy, ElementScaling
  float destmax;
  int emax;
  uint64_t seed, first;
  const uint32_t* bits;
};

// One warp per block, the steps of QuantizeMxRef (lib/src/quantize/mx_ref.cc) in its order: the exact amax
// over the finite elements (an FP32 value, since every input is; a maximum, so the lanes' order does not
// matter), the scale byte by the rule on its bits (qmx/host_device.h, which the CPU's fast path uses too) or
// the NaN policy's fill, then each element by the reference routine: V_i / X exactly, or fl32(x * 2^-k)
// (te-rcp: Transformer Engine's multiplier). Lane j takes elements j, j + 32, ... of the block, so a warp
// reads its block's contiguous bytes at once.
template <typename Word>
__device__ __forceinline__ void MxBlock(const void* src, uint64_t n, uint64_t blocks, const MxArgs& a, const Format& elem,
                                       uint8_t* codes, uint8_t* scales) {
  const uint64_t b = (blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (b >= blocks) return;  // whole warps leave together: blockDim.x is a multiple of 32
  constexpr Format kF32 = Fp32Fields();
  const uint64_t start = b * static_cast<uint64_t>(a.block);
  const uint64_t end = start + a.block < n ? start + a.block : n;
  const auto read = [&](uint64_t i) {
    const uint64_t bits = LoadBits<Word>(src, i);
    ExactValue x = internal::ReadExactCore(a.src_fmt, bits);
    if (a.cast.subnormals == Subnormals::kFlush && internal::ClassifyCodeCore(a.src_fmt, bits) == CodeClass::kSubnormal)
      x.kind = ExactValue::Kind::kZero;
    return x;
  };
  uint32_t amax = 0;  // FP32 bits of the largest finite magnitude
  bool has_nan = false, has_inf = false;
  const bool flush = a.cast.subnormals == Subnormals::kFlush;
  for (uint64_t i = start + lane; i < end; i += 32) {
    if (sizeof(Word) == 2 && a.src_fmt.man_bits == 10) {  // fp16: through the exact value
      const ExactValue x = read(i);
      has_nan |= x.kind == ExactValue::Kind::kNan;
      has_inf |= x.kind == ExactValue::Kind::kInf;
      if (x.kind == ExactValue::Kind::kFinite) {
        const uint32_t m = hd::F32Bits(static_cast<float>(ldexp(static_cast<double>(x.sig), x.exp)));
        amax = m > amax ? m : amax;
      }
      continue;
    }
    // fp32 and bf16: the magnitude's FP32 bits are the exact value's (a flushed subnormal counts as 0).
    const uint64_t bits = LoadBits<Word>(src, i);
    const uint32_t m = (sizeof(Word) == 2 ? static_cast<uint32_t>(bits) << 16 : static_cast<uint32_t>(bits)) & 0x7FFFFFFFu;
    has_nan |= m > 0x7F800000u;
    has_inf |= m == 0x7F800000u;
    if (m < 0x7F800000u && !(flush && m < 0x00800000u)) amax = m > amax ? m : amax;
  }
  amax = __reduce_max_sync(0xFFFFFFFFu, amax);
  has_nan = __any_sync(0xFFFFFFFFu, has_nan);
  has_inf = __any_sync(0xFFFFFFFFu, has_inf);
  const uint8_t nan_code = static_cast<uint8_t>(internal::ConvertCore(kF32, 0x7FC00000u, elem, a.cast, 0).code);
  const uint8_t block_nan_code = elem.HasNan() ? static_cast<uint8_t>(elem.CanonicalNan()) : 0;
  int scale, fill;
  internal::MxPolicyScale(static_cast<NanPolicy>(a.policy), has_nan, has_inf,
                          hd::ScaleByteFromAmaxBits(amax, a.rule, a.destmax, a.emax, elem.man_bits), nan_code,
                          block_nan_code, &scale, &fill);
  if (lane == 0) scales[b] = static_cast<uint8_t>(scale);
  const int k = scale - 127;
  const bool stochastic = internal::IsStochasticCore(a.cast.rounding);
  for (uint64_t i = start + lane; i < end; i += 32) {
    if (fill >= 0) {
      codes[i] = static_cast<uint8_t>(fill);
      continue;
    }
    const uint32_t r = !stochastic ? 0u : a.bits != nullptr ? a.bits[i] : RandomBitsForElement(a.seed, a.first + i);
    ExactValue x = read(i);
    if (static_cast<ElementScaling>(a.scaling) == ElementScaling::kExact) {
      x.exp -= k;  // V_i / X, exactly
      codes[i] = static_cast<uint8_t>(internal::RoundExactCore(x, elem, a.cast, r).code);
      continue;
    }
    // FP32 element scaling: fl32(x * mult), the product in double as the CPU forms it. A NaN keeps its sign
    // (x86 propagates the operand; the GPU's multiply would give its canonical NaN); te-rcp's NaN products
    // are the GPU kernel's canonical +NaN, as the CPU models them.
    const bool te = static_cast<ElementScaling>(a.scaling) == ElementScaling::kTeRcp;
    const double mult = te && scale == 0 ? 1.0 : te && scale == 254 ? 0.0 : ldexp(1.0, -k);
    uint32_t y;
    if (x.kind == ExactValue::Kind::kNan) {
      y = te ? 0x7FFFFFFFu : (x.negative ? 0xFFC00000u : 0x7FC00000u);
    } else {
      const double v = x.kind == ExactValue::Kind::kInf ? (x.negative ? -HUGE_VAL : HUGE_VAL)
                       : x.kind == ExactValue::Kind::kZero ? (x.negative ? -0.0 : 0.0)
                                                           : (x.negative ? -1.0 : 1.0) * ldexp(static_cast<double>(x.sig), x.exp);
      const float f = static_cast<float>(v * mult);
      y = f != f ? 0x7FFFFFFFu : hd::F32Bits(f);  // only te-rcp's Inf x 0 makes a NaN here
    }
    codes[i] = static_cast<uint8_t>(internal::ConvertCore(kF32, y, elem, a.cast, r).code);
  }
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
  const Format& sf = FormatOfSource(src_type);  // and QuantizeMx's refusal of other sources
  Require("the engine's MX quantization");
  if (n == 0) return;
  MxArgs a{sf, spec.elem, spec.cast, spec.block, static_cast<int>(spec.rule), static_cast<int>(spec.nan),
           static_cast<int>(spec.scaling), 0.0f, 0, sr.seed, sr.first_index, nullptr};
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
