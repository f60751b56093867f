// engine_ops.cu: the engine's tensor operations beside the GEMM and the quantizers (qmx/gpu.h "tensor
// operations"): torch._scaled_mm's split-K sum and epilogue (lib/src/gemm/scaled_mm_core.h, one source with
// the CPU) and the error statistics' chunked sums (qmx/metrics.h: chunks of kMetricsChunk elements, eight
// FP64 lanes each, the CPU's element step).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "engine_internal.h"
#include "gemm/scaled_mm_core.h"
#include "gpu_internal.h"
#include "metrics/metrics_internal.h"

namespace qmx::gpu::detail {
namespace {

using qmx::detail::kErrorLanes;

__global__ void AddF32Kernel(float* __restrict__ acc, const float* __restrict__ part, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    acc[i] = qmx::detail::AddF32(acc[i], part[i]);
}

__global__ void ScaledMmEpilogueKernel(const float* __restrict__ acc, size_t m, size_t n, const float* __restrict__ sa,
                                       const float* __restrict__ sb, const uint16_t* __restrict__ bias,
                                       qmx::detail::ScaledMmEpilogue e, void* out) {
  const size_t count = m * n;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / n, c = i % n;
    const uint32_t bits =
        qmx::detail::ScaledMmOutput(e, acc[i], sa[e.rowwise ? r : 0], sb[e.rowwise ? c : 0], e.has_bias ? bias[c] : 0);
    if (e.out == 0) {
      static_cast<uint32_t*>(out)[i] = bits;
    } else {
      static_cast<uint16_t*>(out)[i] = static_cast<uint16_t>(bits);
    }
  }
}

// Thread (chunk, lane): the chunk's elements lane, lane + 8, ... in order into that lane's sums.
__global__ void ErrorLanesKernel(const float* __restrict__ ref, const float* __restrict__ out, size_t n, size_t chunk,
                                 ErrorStats* __restrict__ lanes, size_t threads) {
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (t >= threads) return;
  const size_t c = t / kErrorLanes, lane = t % kErrorLanes;
  const size_t lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
  ErrorStats s;
#pragma unroll 4
  for (size_t i = lo + lane; i < hi; i += kErrorLanes) qmx::detail::AddElement(s, __ldg(ref + i), __ldg(out + i));
  lanes[t] = s;
}

}  // namespace

void LaunchAddF32(float* acc, const float* part, size_t count, void* stream) {
  if (count == 0) return;
  AddF32Kernel<<<GridFor(count, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(acc, part, count);
  Check(cudaGetLastError(), "engine scaled_mm split-K sum");
}

void LaunchScaledMmEpilogue(const float* acc, size_t m, size_t n, const float* sa, const float* sb,
                            const uint16_t* bias, const qmx::detail::ScaledMmEpilogue& e, void* out, void* stream) {
  if (m * n == 0) return;
  ScaledMmEpilogueKernel<<<GridFor(m * n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(acc, m, n, sa, sb, bias, e,
                                                                                             out);
  Check(cudaGetLastError(), "engine scaled_mm epilogue");
}

void LaunchErrorLanes(const float* ref, const float* out, size_t n, size_t chunk, ErrorStats* lanes, void* stream) {
  const size_t threads = (n + chunk - 1) / chunk * kErrorLanes;
  if (threads == 0) return;
  ErrorLanesKernel<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      ref, out, n, chunk, lanes, threads);
  Check(cudaGetLastError(), "engine error statistics");
}

}  // namespace qmx::gpu::detail
