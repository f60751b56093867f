// engine_kernels.cu: the emulation engine's generic GEMM kernel (one output per thread, every fused model and
// fp32-seq, the steps of engine_fused.cuh) and the FP4 kernel (E2M1 groups of 16 summed exactly on the INT8
// tensor core).
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

constexpr int kF4Warps = 4;                 // 2 x 2 warps of 32 x 16 outputs: a block's 64 x 32
constexpr int kF4Threads = 32 * kF4Warps;
constexpr int kF4TileM = 64, kF4TileN = 32;
constexpr int kF4K = 64, kF4Groups = 4;     // one step: 64 products, 4 groups of 16
constexpr int kF4Pitch = kF4K + 16;         // shared rows padded by 16 bytes (a fragment load's 8 rows x 4 lanes
                                            // then fall on 32 different banks)

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

// One group's exact sum on the INT8 tensor core: D (16 x 8, int32) = A (16 x 16, int8) B (16 x 8, int8), C = 0.
// Lane l holds g = l / 4, t = l % 4: A registers (g, 4t..4t+3) and (g + 8, 4t..4t+3), B's (k = 4t..4t+3, column
// g), D's (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1). Products of E2M1 values times two are at most
// 144 in magnitude, sums of 16 at most 2304: exact in int32.
__device__ inline void Imma16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
               : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

// The thread's 16 outputs: m tile mi, n tile ni, fragment element h: row wr + 16 mi + g + 8 (h / 2), column
// wc + 8 ni + 2 t + h % 2; unrolled so that the per-output arrays stay in registers.
template <typename F>
__device__ __forceinline__ void ForF4Outputs(F f) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 2; ++ni)
#pragma unroll
      for (int h = 0; h < 4; ++h) f(mi, ni, h, (mi * 2 + ni) * 4 + h);
}

// Each step of 64 products in two passes over its 4 groups: the magnitudes' sums (zero exactly when every
// product is) give each group's nominal exponent and so the step's largest, emax; then the values' sums,
// each times its two scales, are cut at 2^(emax - F) and summed in FP64 (exact: the support check keeps F,
// the terms' headroom and their count within FP64's 53 bits) and the sum rounded, as FusedStep does.
__global__ void __launch_bounds__(kF4Threads, 2) EngineFp4Kernel(EngineGemmArgs g, EngineFp4Buffers f) {
  __shared__ __align__(16) int8_t sav[kF4TileM][kF4Pitch], saa[kF4TileM][kF4Pitch], sbv[kF4TileN][kF4Pitch],
      sba[kF4TileN][kF4Pitch];
  __shared__ GroupScale ssa[kF4TileM][kF4Groups], ssb[kF4TileN][kF4Groups];
  __shared__ double va[256], vb[256];
  __shared__ int na[256], nb[256];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, gq = lane / 4, tq = lane % 4;
  for (int t = tid; t < 256; t += kF4Threads) {
    va[t] = g.a.values[t];
    vb[t] = g.b.values[t];
    na[t] = g.a.nominal[t];
    nb[t] = g.b.nominal[t];
  }
  const EngineModel& p = g.model;
  const int wr = (warp / 2) * 32, wc = (warp % 2) * 16;
  const size_t row0 = static_cast<size_t>(blockIdx.y) * kF4TileM, col0 = static_cast<size_t>(blockIdx.x) * kF4TileN;
  const auto row_of = [&](int mi, int h) { return wr + 16 * mi + gq + 8 * (h / 2); };
  const auto col_of = [&](int ni, int h) { return wc + 8 * ni + 2 * tq + h % 2; };
  float acc[16];
  ForF4Outputs([&](int mi, int ni, int h, int o) {
    const size_t i = row0 + row_of(mi, h), j = col0 + col_of(ni, h);
    acc[o] = g.c && i < g.m && j < g.n ? g.c[i * g.n + j] : 0.0f;
  });
  unsigned long long fallbacks = 0;
  const size_t groups = (g.k + 15) / 16;
  for (size_t k0 = 0; k0 < g.k; k0 += kF4K) {
    const int ng = static_cast<int>(groups - k0 / 16 < kF4Groups ? groups - k0 / 16 : kF4Groups);
    __syncthreads();
    // The step's tiles: 64 rows of A and 32 columns of B, 64 bytes each per array, 16 bytes a load; then
    // the group scales.
    const int4 zero4 = make_int4(0, 0, 0, 0);
    for (int t = tid; t < kF4TileM * (kF4K / 16); t += kF4Threads) {
      const int line = t / (kF4K / 16), q = t % (kF4K / 16);
      const size_t kb = k0 + 16 * q, i = row0 + line;
      const bool in = i < g.m && kb < f.kp;
      *reinterpret_cast<int4*>(&sav[line][16 * q]) = in ? *reinterpret_cast<const int4*>(f.a_val + i * f.kp + kb) : zero4;
      *reinterpret_cast<int4*>(&saa[line][16 * q]) = in ? *reinterpret_cast<const int4*>(f.a_abs + i * f.kp + kb) : zero4;
      ssa[line][q] = in ? ScaleOfGroup(g.a, true, i, kb, p.scales_in) : GroupScale{1.0, 0};
    }
    for (int t = tid; t < kF4TileN * (kF4K / 16); t += kF4Threads) {
      const int line = t / (kF4K / 16), q = t % (kF4K / 16);
      const size_t kb = k0 + 16 * q, j = col0 + line;
      const bool in = j < g.n && kb < f.kp;
      *reinterpret_cast<int4*>(&sbv[line][16 * q]) = in ? *reinterpret_cast<const int4*>(f.b_val + j * f.kp + kb) : zero4;
      *reinterpret_cast<int4*>(&sba[line][16 * q]) = in ? *reinterpret_cast<const int4*>(f.b_abs + j * f.kp + kb) : zero4;
      ssb[line][q] = in ? ScaleOfGroup(g.b, false, j, kb, p.scales_in) : GroupScale{1.0, 0};
    }
    __syncthreads();
    // Pass 1: emax (the accumulator's nominal exponent, or the zero rule's, and each group's), and whether a
    // scale or the accumulator is NaN or Inf.
    int emax[16];
    bool special[16];
    ForF4Outputs([&](int, int, int, int o) {
      special[o] = !isfinite(acc[o]);
      emax[o] = acc[o] == 0 ? (p.zero_operands ? -126 : p.zero_exp) : NominalF32(acc[o]);
    });
    const auto frag = [&](const int8_t (*tile)[kF4Pitch], int line, int q) {
      return *reinterpret_cast<const uint32_t*>(&tile[line][16 * q + 4 * tq]);
    };
#pragma unroll
    for (int q = 0; q < kF4Groups; ++q) {
      if (q >= ng) break;
      int mags[2][2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 2; ++ni)
          Imma16(mags[mi][ni], frag(saa, wr + 16 * mi + gq, q), frag(saa, wr + 16 * mi + gq + 8, q),
                 frag(sba, wc + 8 * ni + gq, q));
      ForF4Outputs([&](int mi, int ni, int h, int o) {
        const GroupScale sa = ssa[row_of(mi, h)][q], sb = ssb[col_of(ni, h)][q];
        special[o] |= !Finite(sa.v) || !Finite(sb.v);
        const bool zero = mags[mi][ni][h] == 0 || sa.v == 0 || sb.v == 0;
        const int nom = zero && !p.zero_operands ? p.zero_exp : sa.e + sb.e;
        emax[o] = nom > emax[o] ? nom : emax[o];
      });
    }
    // Pass 2: the cut terms' sum, from the accumulator's.
    double sum[16];
    ForF4Outputs([&](int, int, int, int o) {
      const int unit = emax[o] - p.frac_bits;
      sum[o] = -unit <= 1023 ? CutP(static_cast<double>(acc[o]), Pow2(-unit), p.term_rne) : 0.0;
    });
#pragma unroll
    for (int q = 0; q < kF4Groups; ++q) {
      if (q >= ng) break;
      int vals[2][2][4], mags[2][2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) {
          const uint32_t b0 = frag(sbv, wc + 8 * ni + gq, q), bm = frag(sba, wc + 8 * ni + gq, q);
          Imma16(vals[mi][ni], frag(sav, wr + 16 * mi + gq, q), frag(sav, wr + 16 * mi + gq + 8, q), b0);
          Imma16(mags[mi][ni], frag(saa, wr + 16 * mi + gq, q), frag(saa, wr + 16 * mi + gq + 8, q), bm);
        }
      ForF4Outputs([&](int mi, int ni, int h, int o) {
        const int unit = emax[o] - p.frac_bits;
        const double sa = ssa[row_of(mi, h)][q].v, sb = ssb[col_of(ni, h)][q].v;
        if (-unit <= 1023 && !(mags[mi][ni][h] == 0 || sa == 0 || sb == 0))
          sum[o] += CutP(static_cast<double>(vals[mi][ni][h]) * (sa * sb * 0.25), Pow2(-unit), p.term_rne);
      });
    }
    ForF4Outputs([&](int mi, int ni, int h, int o) {
      const size_t i = row0 + row_of(mi, h), j = col0 + col_of(ni, h);
      if (i >= g.m || j >= g.n) return;
      if (special[o]) {  // a NaN or Inf scale or accumulator: the generic step on the codes themselves
        acc[o] = FusedStep(LineOf(g, va, vb, na, nb, i, j), p, k0, k0 + kF4K < g.k ? k0 + kF4K : g.k, acc[o],
                           p.scales_in);
        ++fallbacks;
        return;
      }
      const float res = RoundFused(sum[o], emax[o] - p.frac_bits, p.out_bits, p.out_rne);
      acc[o] = p.zero_operands && res == 0 ? 0.0f : res;
    });
  }
  ForF4Outputs([&](int mi, int ni, int h, int o) {
    const size_t i = row0 + row_of(mi, h), j = col0 + col_of(ni, h);
    if (i < g.m && j < g.n) g.out[i * g.n + j] = Finish(g, i, j, acc[o]);
  });
  if (fallbacks && f.fallback_steps) atomicAdd(f.fallback_steps, fallbacks);
}

}  // namespace

void LaunchEngineFp4Gemm(const EngineGemmArgs& args, const EngineFp4Buffers& f, void* stream) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (args.m == 0 || args.n == 0) return;
  PackFp4Rows<<<1024, 256, 0, st>>>(args.a.codes, args.m, args.k, f.kp, f.a_val, f.a_abs);
  PackFp4Cols<<<1024, 256, 0, st>>>(args.b.codes, args.k, args.n, f.kp, f.b_val, f.b_abs);
  const dim3 grid(static_cast<unsigned>((args.n + kF4TileN - 1) / kF4TileN),
                  static_cast<unsigned>((args.m + kF4TileM - 1) / kF4TileM));
  EngineFp4Kernel<<<grid, kF4Threads, 0, st>>>(args, f);
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
