// engine_seq.cu: fp32-seq on the GPU's FP32 pipes as a register-tiled GEMM. Each output is the library's
// sequential chain acc = fmaf(x_k, y_k, acc) over k ascending (gemm_ref.cc Fp32SeqDot), so only the outputs are
// spread over threads, never K: a block of 256 threads holds 128 x 128 outputs, 8 x 8 a thread, and walks K in
// slices of 8 through double-buffered shared tiles. Used by the codes GEMM (EngineGemm with fp32-seq: a pre-pass
// writes x = fl(value * scale) of A and y of B, B transposed) and by the bf16 recipe's linear layer.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine_fused.cuh"
#include "engine_internal.h"
#include "gpu_internal.h"

namespace qmx::gpu::detail {
namespace {

constexpr int kSeqTile = 128, kSeqK = 8, kSeqThreads = 256;

// A thread's rows (and columns) in the tile: 4 from 4 t and 4 from 64 + 4 t, t = ty (tx), so that the fragments'
// 16-byte shared loads of a warp fall on distinct banks.
__device__ inline int SeqLine(int t, int q) { return q < 4 ? 4 * t + q : 64 + 4 * t + (q - 4); }

// out(i, j) by epi(i, j, acc) for i < m, j < n: acc from init(i, j) (C or +0), then fmaf(a[i][k], bt[j][k], acc)
// for k = 0 .. K-1 in order (a m x k, bt n x k, row-major). Rows, columns and k past the operands load as zeros
// and never enter a chain (the last slice's loop stops at K: a zero product would turn a -0 accumulator into +0).
template <class Init, class Epi>
__global__ void __launch_bounds__(kSeqThreads, 2)
    SeqGemmKernel(const float* __restrict__ a, const float* __restrict__ bt, size_t m, size_t n, size_t k, Init init,
                  Epi epi) {
  __shared__ __align__(16) float as[2][kSeqK][kSeqTile];
  __shared__ __align__(16) float bs[2][kSeqK][kSeqTile];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const size_t i0 = static_cast<size_t>(blockIdx.y) * kSeqTile, j0 = static_cast<size_t>(blockIdx.x) * kSeqTile;
  // The loader: thread tid takes line tid / 2 of each tile and 4 of the slice's 8 k (tid % 2).
  const int ll = tid >> 1, lk = 4 * (tid & 1);
  const size_t ai = i0 + ll, bj = j0 + ll;
  float ra[4], rb[4];
  auto fetch = [&](size_t k0) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const size_t kk = k0 + lk + u;
      ra[u] = ai < m && kk < k ? a[ai * k + kk] : 0.0f;
      rb[u] = bj < n && kk < k ? bt[bj * k + kk] : 0.0f;
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      as[buf][lk + u][ll] = ra[u];
      bs[buf][lk + u][ll] = rb[u];
    }
  };
  float acc[8][8];
#pragma unroll
  for (int p = 0; p < 8; ++p)
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const size_t i = i0 + SeqLine(ty, p), j = j0 + SeqLine(tx, q);
      acc[p][q] = i < m && j < n ? init(i, j) : 0.0f;
    }
  fetch(0);
  stash(0);
  __syncthreads();
  int buf = 0;
  for (size_t k0 = 0; k0 < k; k0 += kSeqK) {
    const bool more = k0 + kSeqK < k;
    if (more) fetch(k0 + kSeqK);  // the next slice's loads in flight during this one's products
    auto slice = [&](int kk) {
      const float4 a0 = *reinterpret_cast<const float4*>(&as[buf][kk][4 * ty]);
      const float4 a1 = *reinterpret_cast<const float4*>(&as[buf][kk][64 + 4 * ty]);
      const float4 b0 = *reinterpret_cast<const float4*>(&bs[buf][kk][4 * tx]);
      const float4 b1 = *reinterpret_cast<const float4*>(&bs[buf][kk][64 + 4 * tx]);
      const float x[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float y[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int p = 0; p < 8; ++p)
#pragma unroll
        for (int q = 0; q < 8; ++q) acc[p][q] = __fmaf_rn(x[p], y[q], acc[p][q]);
    };
    if (more || k - k0 == kSeqK) {
#pragma unroll
      for (int kk = 0; kk < kSeqK; ++kk) slice(kk);
    } else {
      for (int kk = 0; kk < static_cast<int>(k - k0); ++kk) slice(kk);
    }
    if (more) {
      stash(buf ^ 1);
      __syncthreads();  // the next slice is in; every warp is done with this one before it is overwritten next
      buf ^= 1;
    }
  }
#pragma unroll
  for (int p = 0; p < 8; ++p)
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const size_t i = i0 + SeqLine(ty, p), j = j0 + SeqLine(tx, q);
      if (i < m && j < n) epi(i, j, acc[p][q]);
    }
}

template <class Init, class Epi>
void LaunchSeq(const float* a, const float* bt, size_t m, size_t n, size_t k, Init init, Epi epi, cudaStream_t st,
               const char* what) {
  if (m == 0 || n == 0) return;
  if (Blocks(m, kSeqTile) > 65535) throw Error(std::string(what) + ": more than 8,388,480 rows");
  const dim3 grid(Blocks(n, kSeqTile), Blocks(m, kSeqTile));
  SeqGemmKernel<<<grid, kSeqThreads, 0, st>>>(a, bt, m, n, k, init, epi);
  Check(cudaGetLastError(), what);
}

// fp32-seq's operands: x = fl(fl32(value) * fl32(scale)) of each element of A (row-major M x K) and y of B,
// transposed to N x K, as Fp32SeqDot forms them.
__global__ void SeqValuesKernel(EngineOperand o, bool is_a, size_t k, float* out) {
  const size_t total = o.rows * o.cols;
  for (size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = t / o.cols, c = t % o.cols;  // A: (row, k); B: (k, column)
    float s = 1.0f;
    if (o.scales != nullptr) s = o.ScaleAt(r, c);
    const float v = __fmul_rn(static_cast<float>(o.values[o.codes[t]]), s);
    out[is_a ? t : c * k + r] = v;
  }
}

struct ZeroInit {
  __device__ float operator()(size_t, size_t) const { return 0.0f; }
};
struct StoreOut {
  float* out;
  size_t n;
  __device__ void operator()(size_t i, size_t j, float v) const { out[i * n + j] = v; }
};
struct CInit {
  const float* c;
  size_t n;
  __device__ float operator()(size_t i, size_t j) const { return c ? c[i * n + j] : 0.0f; }
};
struct FinishOut {
  EngineGemmArgs g;
  __device__ void operator()(size_t i, size_t j, float v) const { g.out[i * g.n + j] = fused::Finish(g, i, j, v); }
};

}  // namespace

void LaunchGemmF32Seq(const float* a, const float* bt, size_t m, size_t n, size_t k, float* out, void* stream) {
  LaunchSeq(a, bt, m, n, k, ZeroInit{}, StoreOut{out, n}, static_cast<cudaStream_t>(stream), "engine fp32-seq GEMM");
}

void LaunchEngineSeqGemm(const EngineGemmArgs& g, float* a_work, float* bt_work, void* stream) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (g.m == 0 || g.n == 0) return;
  if (g.k > 0) {
    SeqValuesKernel<<<GridFor(g.m * g.k, 256), 256, 0, st>>>(g.a, true, g.k, a_work);
    SeqValuesKernel<<<GridFor(g.k * g.n, 256), 256, 0, st>>>(g.b, false, g.k, bt_work);
    Check(cudaGetLastError(), "engine fp32-seq operands");
  }
  LaunchSeq(a_work, bt_work, g.m, g.n, g.k, CInit{g.c, g.n}, FinishOut{g}, st, "engine fp32-seq GEMM");
}

}  // namespace qmx::gpu::detail
