// engine_convert.cu: the emulation engine's conversions. Each element goes through the library's own
// reference routine (lib/src/round/round_core.h, compiled here for the device), so every format of 8 bits or
// fewer and every CastOptions gives the CPU's bytes and flags; stochastic rounding reads the library's
// Philox stream (qmx/rng.h), one Philox block per thread.
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
__global__ void ConvertKernel(Format src_fmt, const void* src, uint64_t n, Format dst, CastOptions opt,
                              uint64_t seed, uint64_t first, const uint32_t* bits, uint8_t* out, uint8_t* flags,
                              uint64_t groups, bool range) {
  const bool stochastic = internal::IsStochasticCore(opt.rounding);
  for (uint64_t g = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t block = (first >> 2) + g;
    Philox4x32Counter words{};
    if (stochastic && bits == nullptr) words = RandomWordsForBlock(seed, block);
    for (int j = 0; j < 4; ++j) {
      const uint64_t index = 4 * block + j;
      if (index < first || index - first >= n) continue;
      const uint64_t k = index - first;
      // range: the input is the FP32 bit pattern `index` itself (every pattern, generated here).
      const uint64_t x = range ? index : LoadBits<Word>(src, k);
      const uint32_t r = !stochastic ? 0u : bits != nullptr ? bits[k] : words[j];
      const RoundResult res = internal::ConvertCore(src_fmt, x, dst, opt, r);
      out[k] = static_cast<uint8_t>(res.code);
      if (flags != nullptr) flags[k] = static_cast<uint8_t>(res.flags);
    }
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

void Launch(DType t, const void* src, uint64_t n, const Format& dst, const CastOptions& opt, const SrSource& sr,
            uint8_t* out, uint8_t* flags, bool range, cudaStream_t stream) {
  if (n == 0) return;
  const uint64_t groups = ((sr.first_index + n + 3) >> 2) - (sr.first_index >> 2);
  constexpr int kThreads = 256;
  const uint64_t want = (groups + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(want < 65535ull * 16 ? want : 65535ull * 16);
  const Format& sf = SourceFields(t);
  switch (t) {
    case DType::kF32:
      ConvertKernel<uint32_t><<<grid, kThreads, 0, stream>>>(sf, src, n, dst, opt, sr.seed, sr.first_index, sr.bits,
                                                             out, flags, groups, range);
      break;
    case DType::kF64:
      ConvertKernel<uint64_t><<<grid, kThreads, 0, stream>>>(sf, src, n, dst, opt, sr.seed, sr.first_index, sr.bits,
                                                             out, flags, groups, range);
      break;
    default:
      ConvertKernel<uint16_t><<<grid, kThreads, 0, stream>>>(sf, src, n, dst, opt, sr.seed, sr.first_index, sr.bits,
                                                             out, flags, groups, range);
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
  Launch(src_type, src, n, dst, opt, sr, out, flags, false, static_cast<cudaStream_t>(stream));
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
  Launch(src_type, d_src.get(), n, dst, opt, dsr, d_out.get(), d_flags.get(), false, nullptr);
  detail::Check(cudaEventRecord(ev.stop), "cudaEventRecord");
  detail::Check(cudaEventSynchronize(ev.stop), "engine convert kernel");
  if (kernel_seconds != nullptr) *kernel_seconds = ev.Seconds();
  d_out.Download(out, n);
  if (flags != nullptr) d_flags.Download(flags, n);
}

void EngineConvertF32Range(uint32_t first, uint64_t count, const Format& dst, const CastOptions& opt, uint64_t seed,
                           uint8_t* out) {
  EngineConvertCheck(DType::kF32, dst, opt);
  Require("the engine's conversions");
  if (count == 0) return;
  if (count > (1ull << 32) - first) throw Error("engine: the FP32 range runs past 0xFFFFFFFF");
  detail::DeviceBuffer<uint8_t> d_out(count);
  Launch(DType::kF32, nullptr, count, dst, opt, SrSource{seed, first, nullptr}, d_out.get(), nullptr, true, nullptr);
  detail::Check(cudaDeviceSynchronize(), "engine convert kernel");
  d_out.Download(out, count);
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
    Launch(DType::kF32, d_x.get(), n, dst, opt, SrSource{seed, 0, nullptr}, d_out.get(), nullptr, false, nullptr);
  });
  timing.copy_s = median([&] {
    detail::Check(cudaMemcpyAsync(d_copy.get(), d_x.get(), n * sizeof(float), cudaMemcpyDeviceToDevice), "copy on device");
  });
  d_out.Download(codes, n);
  return timing;
}

}  // namespace qmx::gpu
