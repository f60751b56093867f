// engine_kernels.cu: the emulation engine's CUDA-core GEMM kernels: the generic kernel (one output per
// thread, every fused model and fp32-seq, the steps of engine_fused.cuh) and the FP4 kernel (E2M1 groups of 16
// summed exactly by dp4a).
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

// ------------------------------------------------------------------ the FP4 kernel
// E2M1 codes as int8 values times two ({0, 1, 2, 3, 4, 6, 8, 12} with the sign), and their magnitudes.
__device__ inline int8_t Fp4Twice(uint8_t code) {
  const int8_t mag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  const int8_t m = mag[code & 7];
  return (code & 8) ? static_cast<int8_t>(-m) : m;
}

// A (M x K) row-major -> val/abs (M x kp); B (K x N) -> val/abs transposed (N x kp); zero past K.
__global__ void PackFp4Rows(const uint8_t* codes, size_t rows, size_t k, size_t kp, int8_t* val, int8_t* mag) {
  const size_t total = rows * kp;
  for (size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = t / kp, c = t % kp;
    const int8_t v = c < k ? Fp4Twice(codes[r * k + c]) : 0;
    val[t] = v;
    mag[t] = v < 0 ? static_cast<int8_t>(-v) : v;
  }
}
__global__ void PackFp4Cols(const uint8_t* codes, size_t k, size_t n, size_t kp, int8_t* val, int8_t* mag) {
  const size_t total = n * kp;
  for (size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t kk = t / n, j = t % n;  // consecutive threads read consecutive codes of one row of B
    const int8_t v = kk < k ? Fp4Twice(codes[kk * n + j]) : 0;
    val[j * kp + kk] = v;
    mag[j * kp + kk] = v < 0 ? static_cast<int8_t>(-v) : v;
  }
}

constexpr int kF4Threads = 16;              // 16 x 16 threads
constexpr int kF4Tile = 2 * kF4Threads;     // 32 x 32 outputs per block, 2 x 2 per thread
constexpr int kF4K = 64, kF4Groups = 4;     // one step: 64 products, 4 groups of 16
constexpr int kF4Pitch = kF4K + 16;         // shared rows padded by 16 bytes

// A scale of group q for one line: its value, and its exponent under the zero rule (-126 for zero): the
// sum of two such is the group's nominal exponent when nonzero and the zero rule's when a scale is zero.
struct GroupScale {
  double v;
  int e;
};

__device__ GroupScale ScaleOfGroup(const EngineOperand& o, bool is_a, size_t line, size_t kidx, bool scales_in) {
  if (!scales_in || o.scales == nullptr) return {1.0, 0};
  // 32-bit divisions: the host takes this kernel only for M, N and K below 2^31.
  const unsigned l = static_cast<unsigned>(line), kk = static_cast<unsigned>(kidx);
  const unsigned br = static_cast<unsigned>(o.block_rows), bc = static_cast<unsigned>(o.block_cols);
  const float s = is_a ? o.scales[static_cast<size_t>(l / br) * o.scale_cols + kk / bc]
                       : o.scales[static_cast<size_t>(kk / br) * o.scale_cols + l / bc];
  const double v = static_cast<double>(s);
  return {v, ScaleExponent(v, o.scale_emin)};
}

__global__ void __launch_bounds__(kF4Threads* kF4Threads, 2) EngineFp4Kernel(EngineGemmArgs g, EngineFp4Buffers f) {
  __shared__ __align__(16) int8_t sav[kF4Tile][kF4Pitch], saa[kF4Tile][kF4Pitch], sbv[kF4Tile][kF4Pitch],
      sba[kF4Tile][kF4Pitch];
  __shared__ GroupScale ssa[kF4Tile][kF4Groups], ssb[kF4Tile][kF4Groups];
  __shared__ double va[256], vb[256];
  __shared__ int na[256], nb[256];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kF4Threads + tx;
  for (int t = tid; t < 256; t += kF4Threads * kF4Threads) {
    va[t] = g.a.values[t];
    vb[t] = g.b.values[t];
    na[t] = g.a.nominal[t];
    nb[t] = g.b.nominal[t];
  }
  const EngineModel& p = g.model;
  const size_t row0 = static_cast<size_t>(blockIdx.y) * kF4Tile, col0 = static_cast<size_t>(blockIdx.x) * kF4Tile;
  float acc[2][2];
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const size_t i = row0 + ty + 16 * a, j = col0 + tx + 16 * b;
      acc[a][b] = g.c && i < g.m && j < g.n ? g.c[i * g.n + j] : 0.0f;
    }
  unsigned long long fallbacks = 0;
  const size_t groups = (g.k + 15) / 16;
  for (size_t k0 = 0; k0 < g.k; k0 += kF4K) {
    const int ng = static_cast<int>(groups - k0 / 16 < kF4Groups ? groups - k0 / 16 : kF4Groups);
    __syncthreads();
    // The step's tiles: 32 lines x 64 bytes per array, 16 bytes a load; then the group scales.
    for (int t = tid; t < kF4Tile * (kF4K / 16); t += kF4Threads * kF4Threads) {
      const int line = t / (kF4K / 16), q = t % (kF4K / 16);
      const size_t kb = k0 + 16 * q;
      const size_t i = row0 + line, j = col0 + line;
      const int4 zero = make_int4(0, 0, 0, 0);
      const bool ina = i < g.m && kb < f.kp, inb = j < g.n && kb < f.kp;
      *reinterpret_cast<int4*>(&sav[line][16 * q]) = ina ? *reinterpret_cast<const int4*>(f.a_val + i * f.kp + kb) : zero;
      *reinterpret_cast<int4*>(&saa[line][16 * q]) = ina ? *reinterpret_cast<const int4*>(f.a_abs + i * f.kp + kb) : zero;
      *reinterpret_cast<int4*>(&sbv[line][16 * q]) = inb ? *reinterpret_cast<const int4*>(f.b_val + j * f.kp + kb) : zero;
      *reinterpret_cast<int4*>(&sba[line][16 * q]) = inb ? *reinterpret_cast<const int4*>(f.b_abs + j * f.kp + kb) : zero;
      ssa[line][q] = ina ? ScaleOfGroup(g.a, true, i, kb, p.scales_in) : GroupScale{1.0, 0};
      ssb[line][q] = inb ? ScaleOfGroup(g.b, false, j, kb, p.scales_in) : GroupScale{1.0, 0};
    }
    __syncthreads();
    // Each group's exact sums for the thread's 2 x 2 outputs: A's two rows and B's two columns are read once.
    int sum[2][2][kF4Groups], nom[2][2][kF4Groups];
    bool zero[2][2][kF4Groups], special[2][2];
    int emax[2][2];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const float cacc = acc[a][b];
        special[a][b] = !isfinite(cacc);
        emax[a][b] = cacc == 0 ? (p.zero_operands ? -126 : p.zero_exp) : NominalF32(cacc);
      }
#pragma unroll
    for (int q = 0; q < kF4Groups; ++q) {
      if (q >= ng) break;
      int4 x[2], xm[2], y[2], ym[2];
      GroupScale sa[2], sb[2];
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        x[a] = *reinterpret_cast<const int4*>(&sav[ty + 16 * a][16 * q]);
        xm[a] = *reinterpret_cast<const int4*>(&saa[ty + 16 * a][16 * q]);
        sa[a] = ssa[ty + 16 * a][q];
        y[a] = *reinterpret_cast<const int4*>(&sbv[tx + 16 * a][16 * q]);
        ym[a] = *reinterpret_cast<const int4*>(&sba[tx + 16 * a][16 * q]);
        sb[a] = ssb[tx + 16 * a][q];
      }
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          sum[a][b][q] = __dp4a(x[a].x, y[b].x, __dp4a(x[a].y, y[b].y, __dp4a(x[a].z, y[b].z, __dp4a(x[a].w, y[b].w, 0))));
          const int mags =
              __dp4a(xm[a].x, ym[b].x, __dp4a(xm[a].y, ym[b].y, __dp4a(xm[a].z, ym[b].z, __dp4a(xm[a].w, ym[b].w, 0))));
          special[a][b] |= !Finite(sa[a].v) || !Finite(sb[b].v);
          zero[a][b][q] = mags == 0 || sa[a].v == 0 || sb[b].v == 0;
          nom[a][b][q] = zero[a][b][q] && !p.zero_operands ? p.zero_exp : sa[a].e + sb[b].e;
          emax[a][b] = nom[a][b][q] > emax[a][b] ? nom[a][b][q] : emax[a][b];
        }
    }
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int r = ty + 16 * a, c = tx + 16 * b;
        const size_t i = row0 + r, j = col0 + c;
        if (i >= g.m || j >= g.n) continue;
        const float cacc = acc[a][b];
        if (special[a][b]) {  // a NaN or Inf scale or accumulator: the generic step on the codes themselves
          const Line L = LineOf(g, va, vb, na, nb, i, j);
          acc[a][b] = FusedStep(L, p, k0, k0 + kF4K < g.k ? k0 + kF4K : g.k, cacc, p.scales_in);
          ++fallbacks;
          continue;
        }
        const int unit = emax[a][b] - p.frac_bits;
        double s = 0;
        if (-unit <= 1023) {
          const double p2 = Pow2(-unit);
          s = CutP(static_cast<double>(cacc), p2, p.term_rne);
#pragma unroll
          for (int q = 0; q < kF4Groups; ++q)
            if (q < ng && !zero[a][b][q])
              s += CutP(static_cast<double>(sum[a][b][q]) * (ssa[r][q].v * ssb[c][q].v * 0.25), p2, p.term_rne);
        }
        const float res = RoundFused(s, unit, p.out_bits, p.out_rne);
        acc[a][b] = p.zero_operands && res == 0 ? 0.0f : res;
      }
  }
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const size_t i = row0 + ty + 16 * a, j = col0 + tx + 16 * b;
      if (i >= g.m || j >= g.n) continue;
      g.out[i * g.n + j] = Finish(g, i, j, acc[a][b]);
    }
  if (fallbacks && f.fallback_steps) atomicAdd(f.fallback_steps, fallbacks);
}

}  // namespace

void LaunchEngineFp4Gemm(const EngineGemmArgs& args, const EngineFp4Buffers& f, void* stream) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (args.m == 0 || args.n == 0) return;
  PackFp4Rows<<<1024, 256, 0, st>>>(args.a.codes, args.m, args.k, f.kp, f.a_val, f.a_abs);
  PackFp4Cols<<<1024, 256, 0, st>>>(args.b.codes, args.k, args.n, f.kp, f.b_val, f.b_abs);
  const dim3 threads(kF4Threads, kF4Threads);
  const dim3 grid(static_cast<unsigned>((args.n + kF4Tile - 1) / kF4Tile), static_cast<unsigned>((args.m + kF4Tile - 1) / kF4Tile));
  EngineFp4Kernel<<<grid, threads, 0, st>>>(args, f);
  Check(cudaGetLastError(), "engine FP4 GEMM launch");
}

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
