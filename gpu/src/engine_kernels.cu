// engine_kernels.cu: the emulation engine's generic GEMM kernel (one output per thread, every fused model and
// fp32-seq, the steps of engine_fused.cuh).
#include <cuda_runtime.h>

#include <cstdint>

#include "engine_fused.cuh"
#include "engine_internal.h"
#include "gpu_internal.h"

namespace qmx::gpu::detail {
namespace {

using namespace fused;

constexpr int kTileN = 32, kTileM = 4;  // threads per block: 32 columns x 4 rows, one output each

__global__ void __launch_bounds__(kTileN* kTileM) EngineGemmKernel(EngineGemmArgs g) {
  __shared__ double va[256], vb[256];
  __shared__ int na[256], nb[256];
  const int tid = threadIdx.y * kTileN + threadIdx.x;
  for (int t = tid; t < 256; t += kTileN * kTileM) {
    va[t] = g.a.values[t];
    vb[t] = g.b.values[t];
    na[t] = g.a.nominal[t];
    nb[t] = g.b.nominal[t];
  }
  __syncthreads();
  const size_t j = static_cast<size_t>(blockIdx.x) * kTileN + threadIdx.x;
  if (j >= g.n) return;
  const size_t tiles_m = (g.m + kTileM - 1) / kTileM;
  for (size_t tile = blockIdx.y; tile < tiles_m; tile += gridDim.y) {
    const size_t i = tile * kTileM + threadIdx.y;
    if (i >= g.m) continue;
    g.out[i * g.n + j] = Dot(g, LineOf(g, va, vb, na, nb, i, j), i, j);
  }
}

}  // namespace

void LaunchEngineGemm(const EngineGemmArgs& args, void* stream) {
  if (args.m == 0 || args.n == 0) return;
  const dim3 threads(kTileN, kTileM);
  const size_t tiles_m = (args.m + kTileM - 1) / kTileM;
  const dim3 grid(static_cast<unsigned>((args.n + kTileN - 1) / kTileN),
                  static_cast<unsigned>(tiles_m < 65535 ? tiles_m : 65535));
  EngineGemmKernel<<<grid, threads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  Check(cudaGetLastError(), "engine GEMM launch");
}

}  // namespace qmx::gpu::detail
