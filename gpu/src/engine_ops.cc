// engine_ops.cc: the engine's tensor operations on device memory (qmx/gpu.h "Tensor operations"):
// torch._scaled_mm's model (qmx/scaled_mm.h) as the CPU plans it, and the error statistics of
// qmx/metrics.h. The kernels are in engine_ops.cu; the Hadamard transform is in engine_linear.cc.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "engine_internal.h"
#include "gpu_internal.h"
#include "metrics/metrics_internal.h"
#include "qmx/error.h"
#include "qmx/gpu.h"

namespace qmx::gpu {
namespace {

using detail::DeviceBuffer;

// A GEMM operand's description without its codes: rows x cols codes of `elem`, no scales.
GemmOperand Shell(const Format& elem, size_t rows, size_t cols) {
  GemmOperand o;
  o.elem = elem;
  o.rows = rows;
  o.cols = cols;
  return o;
}

// FP32 block scales (decoded: the scale is its own value) of br x bc blocks over the operand.
void SetFp32Blocks(GemmOperand& o, size_t br, size_t bc) {
  o.scale_format = ScaleFormat::kFp32;
  o.block_rows = br;
  o.block_cols = bc;
  o.scale_rows = (o.rows + br - 1) / br;
  o.scale_cols = (o.cols + bc - 1) / bc;
}

}  // namespace

ScaledMmResult EngineScaledMmOnDevice(const ScaledMmArgs& x, void* out, void* stream) {
  const ScaledMmPlan p = PlanScaledMm(x);
  ScaledMmResult r;
  r.model = p.model;
  r.scaling = p.scaling;
  r.split_k = p.split_k;
  Require("the emulation engine's scaled_mm");
  if (x.m * x.n == 0) return r;
  if ((x.k > 0 && (x.a == nullptr || x.b == nullptr)) || out == nullptr)  // K = 0: empty operands, no address
    throw Error("engine: scaled_mm's a, b and out must be device pointers");
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  const detail::StreamScope scope(cs);
  const AccumModel model = AccumModelByName(p.model);
  if (p.blockwise) {
    float* d = static_cast<float*>(out);
    if (x.k == 0) {
      detail::Check(cudaMemsetAsync(d, 0, x.m * x.n * 4, cs), "engine scaled_mm");  // +0, as Gemm gives
    } else {
      DeviceGemmOperand a{Shell(x.a_format, x.m, x.k), x.a, x.scale_a};
      DeviceGemmOperand b{Shell(x.b_format, x.k, x.n), x.b, x.scale_b};
      SetFp32Blocks(a.meta, 1, 128);
      SetFp32Blocks(b.meta, 128, p.b_block_cols);
      EngineGemmOnDevice(a, b, model, d, stream);
    }
    detail::Check(cudaStreamSynchronize(cs), "engine scaled_mm");
    return r;
  }
  // The FP32 accumulators: the first split's GEMM writes them, each later split's is added in split order.
  DeviceBuffer<float> acc(x.m * x.n), part;
  DeviceBuffer<uint8_t> slice;  // A's columns [k0, k1) when K is split
  if (p.splits.empty()) detail::Check(cudaMemsetAsync(acc.get(), 0, x.m * x.n * 4, cs), "engine scaled_mm");
  for (size_t s = 0; s < p.splits.size(); ++s) {
    const auto [k0, k1] = p.splits[s];
    const uint8_t* a_codes = x.a;
    if (k1 - k0 != x.k) {
      if (slice.get() == nullptr) slice = DeviceBuffer<uint8_t>(x.m * (k1 - k0));
      detail::Check(cudaMemcpy2DAsync(slice.get(), k1 - k0, x.a + k0, x.k, k1 - k0, x.m, cudaMemcpyDeviceToDevice, cs),
                    "engine scaled_mm: A's split of K");
      a_codes = slice.get();
    }
    const DeviceGemmOperand a{Shell(x.a_format, x.m, k1 - k0), a_codes, nullptr};
    const DeviceGemmOperand b{Shell(x.b_format, k1 - k0, x.n), x.b + k0 * x.n, nullptr};
    if (s == 0) {
      EngineGemmOnDevice(a, b, model, acc.get(), stream);
    } else {
      if (part.get() == nullptr) part = DeviceBuffer<float>(x.m * x.n);
      EngineGemmOnDevice(a, b, model, part.get(), stream);
      detail::LaunchAddF32(acc.get(), part.get(), x.m * x.n, stream);
    }
  }
  detail::LaunchScaledMmEpilogue(acc.get(), x.m, x.n, x.scale_a, x.scale_b, x.bias, qmx::detail::EpilogueOf(x, p), out,
                                 stream);
  detail::Check(cudaStreamSynchronize(cs), "engine scaled_mm");
  return r;
}

ErrorStats EngineErrorStatsOnDevice(const float* ref, const float* out, size_t n, void* stream) {
  ErrorStats total;
  if (n == 0) return total;
  Require("the emulation engine's error statistics");
  if (ref == nullptr || out == nullptr) throw Error("engine: error_stats' ref and out must be device pointers");
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  const detail::StreamScope scope(cs);
  const size_t lanes = qmx::detail::kErrorLanes, chunks = (n + kMetricsChunk - 1) / kMetricsChunk;
  DeviceBuffer<ErrorStats> dev(chunks * lanes);
  detail::LaunchErrorLanes(ref, out, n, kMetricsChunk, dev.get(), stream);
  std::vector<ErrorStats> host(chunks * lanes);
  detail::Check(cudaMemcpyAsync(host.data(), dev.get(), host.size() * sizeof(ErrorStats), cudaMemcpyDeviceToHost, cs),
                "engine error statistics");
  detail::Check(cudaStreamSynchronize(cs), "engine error statistics");
  for (size_t c = 0; c < chunks; ++c) {
    qmx::detail::FoldLanes(&host[c * lanes]);
    total.Merge(host[c * lanes]);
  }
  return total;
}

}  // namespace qmx::gpu
