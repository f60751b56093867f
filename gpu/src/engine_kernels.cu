// engine_kernels.cu: the emulation engine's GEMM kernel. Each output is the dot product the CPU
// reference (lib/src/gemm/gemm_ref.cc) defines, computed the same way: MMA-Sim's fused steps (products or
// exact group sums aligned to the step's largest nominal exponent, F fractional bits kept, summed exactly,
// the sum rounded to the step's output), promotion into FP32, IEEE FP32 accumulation (fp32-seq), and the
// alpha epilogue.
//
// Exactness. The reference sums in 128-bit integers; here every value is a double, which is exact under
// bounds the host proves per call before launching (engine_gemm.cc, EngineGemmSupport): each product of
// element values and scales fits 53 bits of significand, each group's sum of products does, and a step's
// truncated terms, counted in units of 2^(emax - F), stay below 2^53 in total. Under those bounds the
// double arithmetic below performs the reference's integer arithmetic operation for operation.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine_internal.h"
#include "gpu_internal.h"

namespace qmx::gpu::detail {
namespace {

constexpr int kTileN = 32, kTileM = 4;  // threads per block: 32 columns x 4 rows, one output each

struct Specials {
  bool nan = false, pos_inf = false, neg_inf = false;
  __device__ void Add(double p) {
    if (isnan(p)) nan = true;
    else if (isinf(p)) (p > 0 ? pos_inf : neg_inf) = true;
  }
  __device__ bool Any() const { return nan || pos_inf || neg_inf; }
  __device__ float Result() const {
    if (nan || (pos_inf && neg_inf)) return __int_as_float(0x7FFFFFFF);  // the library's canonical NaN
    return pos_inf ? __int_as_float(0x7F800000) : __int_as_float(static_cast<int>(0xFF800000u));
  }
};

__device__ inline bool Finite(double v) { return isfinite(v); }

// MMA-Sim's exponent of a nonzero finite value, never below emin (qmx::detail::NominalExp).
__device__ inline int Nominal(double v, int emin) {
  const int e = ilogb(v);
  return e < emin ? emin : e;
}

// Nominal(c, -126) of a nonzero finite FP32 value, from its exponent field.
__device__ inline int NominalF32(float c) {
  const int e = (__float_as_int(c) >> 23) & 0xFF;
  return e == 0 ? -126 : e - 127;
}

// 2^e as a double for -1022 <= e <= 1023 (exact; no libm call).
__device__ inline double Pow2(int e) { return __hiloint2double((e + 1023) << 20, 0); }
// A term's magnitude in units of 2^unit, p2 = 2^-unit, truncated toward zero or rounded to nearest even
// (qmx::detail::ShiftRound on the exact value): the product is exact, or below 1 where it underflows.
__device__ inline double CutP(double v, double p2, bool rne) {
  const double t = v * p2;
  return rne ? rint(t) : trunc(t);
}

// qmx::detail::RoundFused on the exact integer sum s (|s| < 2^53) in units of 2^unit.
__device__ float RoundFused(double s, int unit, int bits, bool rne) {
  if (s == 0) return 0.0f;
  const bool neg = s < 0;
  const unsigned long long mag = static_cast<unsigned long long>(fabs(s));
  int e = 63 - __clzll(static_cast<long long>(mag)) + unit;
  if (e < -126) e = -126;
  const int q = e - (bits - 1);
  const int sh = unit - q;
  unsigned long long kept;
  if (sh >= 0) {
    kept = mag << sh;
  } else if (-sh >= 64) {
    kept = 0;
  } else {
    const int r = -sh;
    kept = mag >> r;
    if (rne) {
      const unsigned long long rem = mag & ((1ull << r) - 1), half = 1ull << (r - 1);
      if (rem > half || (rem == half && (kept & 1))) ++kept;
    }
  }
  const double v = static_cast<double>(kept) * Pow2(q);  // q >= -126 - 63: exact
  if (v >= 0x1p128) return neg ? __int_as_float(static_cast<int>(0xFF800000u)) : __int_as_float(0x7F800000);
  const float f = __double2float_rn(v);
  return neg ? -f : f;
}

// A block scale's exponent in a fused step: Nominal(v, emin) when nonzero and finite, -126 (the zero rule's)
// for zero.
__device__ inline int ScaleExponent(double v, int emin) { return Finite(v) && v != 0 ? Nominal(v, emin) : -126; }

// The block scale of one line along K, reloaded only where k crosses into the next block (k only grows):
// its value, and its exponent: Nominal(v, emin) when nonzero and finite, -126 (the zero rule's) for zero.
// Without block scales it stays 1.0 with exponent 0, as the reference's 1.0 gives.
struct ScaleCursor {
  const float* base;
  size_t block, stride;
  int emin;
  size_t next = 0;
  double v = 1.0;
  int e = 0;
  __device__ void At(size_t k) {
    if (base == nullptr || k < next) return;
    const size_t blk = k / block;
    next = (blk + 1) * block;
    v = static_cast<double>(base[blk * stride]);
    e = ScaleExponent(v, emin);
  }
};

// What one output (i, j) reads: row i of A, column j of B, their block scales.
struct Line {
  const uint8_t* a;
  const uint8_t* b;
  size_t n;
  const double* va;
  const double* vb;
  const int* na;
  const int* nb;
  const float* sa_row;  // A's scales of row block i / block_rows, or null
  size_t a_bc;
  const float* sb_col;  // B's scales at column block j / block_cols, stride b_sc per row block, or null
  size_t b_br, b_sc;
  int esa, esb;

  __device__ uint8_t CodeA(size_t k) const { return a[k]; }
  __device__ uint8_t CodeB(size_t k) const { return b[k * n]; }
  __device__ double SA(size_t k) const { return sa_row ? static_cast<double>(sa_row[k / a_bc]) : 1.0; }
  __device__ double SB(size_t k) const { return sb_col ? static_cast<double>(sb_col[(k / b_br) * b_sc]) : 1.0; }
  __device__ ScaleCursor CursorA() const { return ScaleCursor{sa_row, a_bc, 1, esa}; }
  __device__ ScaleCursor CursorB() const { return ScaleCursor{sb_col, b_br, b_sc, esb}; }
};

// Output (i, j)'s line, with the code tables (in shared memory) of the kernel that asks.
__device__ Line LineOf(const EngineGemmArgs& g, const double* va, const double* vb, const int* na, const int* nb, size_t i,
                       size_t j) {
  Line L;
  L.a = g.a.codes + i * g.k;
  L.b = g.b.codes + j;
  L.n = g.n;
  L.va = va;
  L.vb = vb;
  L.na = na;
  L.nb = nb;
  L.sa_row = g.a.scales ? g.a.scales + (i / g.a.block_rows) * g.a.scale_cols : nullptr;
  L.a_bc = g.a.block_cols;
  L.sb_col = g.b.scales ? g.b.scales + j / g.b.block_cols : nullptr;
  L.b_br = g.b.block_rows;
  L.b_sc = g.b.scale_cols;
  L.esa = g.a.scale_emin;
  L.esb = g.b.scale_emin;
  return L;
}

// One fused step over products k0..k1 with accumulator c (gemm_ref.cc FusedStep).
__device__ __noinline__ float FusedStep(const Line& L, const EngineModel& p, size_t k0, size_t k1, float c, bool scales_in) {
  Specials sp;
  sp.Add(c);
  int emax = c == 0 ? (p.zero_operands ? -126 : p.zero_exp) : Nominal(c, -126);
  const size_t g = static_cast<size_t>(p.group);
  // Pass 1: specials and the largest nominal exponent.
  ScaleCursor ka = L.CursorA(), kb = L.CursorB();
  for (size_t q0 = k0; q0 < k1; q0 += g) {
    const size_t q1 = q0 + g < k1 ? q0 + g : k1;
    double sa = 1.0, sb = 1.0;
    int es = 0;  // the scales' exponents (zero rule included), when they enter the products
    if (scales_in) {
      ka.At(q0);
      kb.At(q0);
      sa = ka.v, sb = kb.v, es = ka.e + kb.e;
    }
    if (g == 1) {
      const uint8_t ca = L.CodeA(q0), cb = L.CodeB(q0);
      const double x = L.va[ca], y = L.vb[cb];
      if (!Finite(x) || !Finite(y) || !Finite(sa) || !Finite(sb)) {
        sp.Add(x * y * sa * sb);
        continue;
      }
      const bool zero = x == 0 || y == 0 || sa == 0 || sb == 0;
      const int nom = zero && !p.zero_operands ? p.zero_exp : L.na[ca] + L.nb[cb] + es;
      emax = nom > emax ? nom : emax;
      continue;
    }
    bool all_zero = true, special = false;
    for (size_t k = q0; k < q1; ++k) {
      const double x = L.va[L.CodeA(k)], y = L.vb[L.CodeB(k)];
      if (!Finite(x) || !Finite(y) || !Finite(sa) || !Finite(sb)) {
        sp.Add(x * y * sa * sb);
        special = true;
        continue;
      }
      if (x != 0 && y != 0) all_zero = false;
    }
    if (special) continue;
    const bool zero = all_zero || sa == 0 || sb == 0;
    const int nom = zero && !p.zero_operands ? p.zero_exp : es;
    emax = nom > emax ? nom : emax;
  }
  if (sp.Any()) return sp.Result();
  // Pass 2: every term cut at the unit, summed exactly (no specials remain). A unit below -1023 means every
  // term is zero (a nonzero term's nominal exponent is above -300).
  const int unit = emax - p.frac_bits;
  double s = 0;
  if (-unit <= 1023) {
    const double p2 = Pow2(-unit);
    s = CutP(static_cast<double>(c), p2, p.term_rne);
    ScaleCursor pa = L.CursorA(), pb = L.CursorB();
    for (size_t q0 = k0; q0 < k1; q0 += g) {
      const size_t q1 = q0 + g < k1 ? q0 + g : k1;
      double sab = 1.0;
      if (scales_in) {
        pa.At(q0);
        pb.At(q0);
        sab = pa.v * pb.v;  // exact: the host bounds the scales' significands
      }
      double sum = 0;  // the group's exact sum of products (one product when g == 1)
      for (size_t k = q0; k < q1; ++k) sum += L.va[L.CodeA(k)] * L.vb[L.CodeB(k)];
      s += CutP(sum * sab, p2, p.term_rne);
    }
  }
  const float r = RoundFused(s, unit, p.out_bits, p.out_rne);
  return p.zero_operands && r == 0 ? 0.0f : r;  // MMA-Sim: a sum cut to zero is +0
}

__device__ float AlphaAt(const EngineAlpha& al, size_t i, size_t j) {
  if (al.rule == 0) return __fmul_rn(al.rows ? al.rows[i] : al.ta, al.cols ? al.cols[j] : al.tb);
  const float p = __fmul_rn(al.amax_rows ? al.amax_rows[i] : al.amax_a, al.amax_cols ? al.amax_cols[j] : al.amax_b);
  return al.rule == 1 ? __fmul_rn(p, al.te_inv) : __fdiv_rn(p, al.te_factor);
}

__device__ float Dot(const EngineGemmArgs& g, const Line& L, size_t i, size_t j) {
  const EngineModel& p = g.model;
  float acc = g.c ? g.c[i * g.n + j] : 0.0f;
  if (p.kind == 1) {  // fp32-seq: acc = fmaf(a_k * sa_k, b_k * sb_k, acc) in K order
    ScaleCursor ka = L.CursorA(), kb = L.CursorB();
    for (size_t k = 0; k < g.k; ++k) {
      ka.At(k);
      kb.At(k);
      const float x = __fmul_rn(static_cast<float>(L.va[L.CodeA(k)]), static_cast<float>(ka.v));
      const float y = __fmul_rn(static_cast<float>(L.vb[L.CodeB(k)]), static_cast<float>(kb.v));
      acc = __fmaf_rn(x, y, acc);
    }
  } else {
    const size_t step = static_cast<size_t>(p.step);
    if (p.promote == 0) {
      for (size_t k0 = 0; k0 < g.k; k0 += step) acc = FusedStep(L, p, k0, k0 + step < g.k ? k0 + step : g.k, acc, p.scales_in);
    } else {
      const size_t window = static_cast<size_t>(p.promote);
      for (size_t w0 = 0; w0 < g.k; w0 += window) {
        const size_t w1 = w0 + window < g.k ? w0 + window : g.k;
        float part = 0.0f;
        for (size_t k0 = w0; k0 < w1; k0 += step) part = FusedStep(L, p, k0, k0 + step < w1 ? k0 + step : w1, part, p.scales_in);
        if (p.blocks && !p.scales_in) {
          const float sa = static_cast<float>(L.SA(w0)), sb = static_cast<float>(L.SB(w0));
          acc = p.promote_separately ? __fmaf_rn(__fmul_rn(part, sa), sb, acc) : __fmaf_rn(part, __fmul_rn(sa, sb), acc);
        } else {
          acc = __fadd_rn(acc, part);
        }
      }
    }
  }
  const float r = g.alpha.has ? __fmul_rn(AlphaAt(g.alpha, i, j), acc) : acc;
  // The model's canonical NaN (qmx::detail::ModelNan): 0x7FFFFFFF fused, 0x7FC00000 fp32-seq.
  return isnan(r) ? __int_as_float(p.kind == 1 ? 0x7FC00000 : 0x7FFFFFFF) : r;
}

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
      const float r = g.alpha.has ? __fmul_rn(AlphaAt(g.alpha, i, j), acc[a][b]) : acc[a][b];
      g.out[i * g.n + j] = isnan(r) ? __int_as_float(0x7FFFFFFF) : r;
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
