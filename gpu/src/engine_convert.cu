// engine_convert.cu: the emulation engine's conversions. Each element goes through the library's own
// reference routine (lib/src/round/round_core.h, compiled here for the device), so every format of 8 bits or
// fewer and every CastOptions gives the CPU's bytes and flags; stochastic rounding reads the library's
// Philox stream (qmx/rng.h), one Philox block per thread. FP32 inputs under a deterministic rounding, without
// flags, take a step table built from the same routine on the host (below).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_internal.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/gpu.h"
#include "qmx/rng.h"
#include "round/round_core.h"

namespace qmx::gpu {
namespace {

// The source formats by their fields (the host's fmt:: constants are not visible to device code).
constexpr Format kSrcF32{"fp32", 8, 23, 127, true, Encoding::kIeee};
constexpr Format kSrcF64{"fp64", 11, 52, 1023, true, Encoding::kIeee};
constexpr Format kSrcF16{"fp16", 5, 10, 15, true, Encoding::kIeee};
constexpr Format kSrcBF16{"bf16", 8, 7, 127, true, Encoding::kIeee};

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
  constexpr Format kSrc{"fp32", 8, 23, 127, true, Encoding::kIeee};
  constexpr Format kDst{"", kExp, kMan, kBias, kSigned, kEnc};
  ConvertGroups<uint32_t>(kSrc, src, n, kDst, opt, seed, first, bits, out, flags, groups);
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
    return static_cast<uint8_t>(internal::ConvertCore(kSrcF32, (sign << 31) | mag, dst, opt, 0).code);
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

const Format& SourceFields(DType t) {
  switch (t) {
    case DType::kF32: return kSrcF32;
    case DType::kF64: return kSrcF64;
    case DType::kF16: return kSrcF16;
    case DType::kBF16: return kSrcBF16;
    default: throw Error(std::string("engine: conversions read fp32, fp64, fp16 or bf16, not ") + DTypeName(t));
  }
}

// The step-table path where it applies (FP32 in memory, a deterministic rounding, no flags asked for): true
// when it ran.
bool LaunchSteps(DType t, const void* src, uint64_t n, const Format& dst, const CastOptions& opt, uint8_t* out,
                 uint8_t* flags, cudaStream_t stream) {
  if (t != DType::kF32 || flags != nullptr || internal::IsStochasticCore(opt.rounding)) return false;
  StepTable host{};
  if (!BuildSteps(dst, opt, &host)) return false;
  // The table travels with the stream's work: a device copy freed after the kernel (stream-ordered).
  StepTable* dev = nullptr;
  detail::Check(cudaMallocAsync(reinterpret_cast<void**>(&dev), sizeof(StepTable), stream), "cudaMallocAsync");
  detail::Check(cudaMemcpyAsync(dev, &host, sizeof(StepTable), cudaMemcpyHostToDevice, stream), "copy to device");
  constexpr int kThreads = 512;
  const uint64_t want = (n + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(want < 132ull * 16 ? want : 132ull * 16);
  ConvertKernelSteps<<<grid, kThreads, 0, stream>>>(static_cast<const uint32_t*>(src), n, dev, out);
  detail::Check(cudaGetLastError(), "engine convert kernel launch");
  detail::Check(cudaFreeAsync(dev, stream), "cudaFreeAsync");
  // The pageable source of cudaMemcpyAsync is read before it returns, so `host` may go out of scope.
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
