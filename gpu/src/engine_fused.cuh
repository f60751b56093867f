// engine_fused.cuh: one output's dot product under a fused model or fp32-seq, as the CPU reference
// (lib/src/gemm/gemm_ref.cc) defines it, for the engine's GEMM kernels (engine_kernels.cu: the generic and FP4
// kernels; engine_dmma.cu: the FP64 tensor-core kernel, whose steps fall back to FusedStep here).
//
// Exactness. The reference sums in 128-bit integers; here every value is a double, which is exact under
// bounds the host proves per call before launching (engine_gemm.cc, EngineGemmSupport): each product of
// element values and scales fits 53 bits of significand, each group's sum of products does, and a step's
// truncated terms, counted in units of 2^(emax - F), stay below 2^53 in total. Under those bounds the
// double arithmetic below performs the reference's integer arithmetic operation for operation.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine_internal.h"
#include "gemm/exact_sum.h"

namespace qmx::gpu::detail {
namespace fused {

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
__device__ inline float RoundFused(double s, int unit, int bits, bool rne) {
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
__device__ inline Line LineOf(const EngineGemmArgs& g, const double* va, const double* vb, const int* na, const int* nb, size_t i,
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
static __device__ __noinline__ float FusedStep(const Line& L, const EngineModel& p, size_t k0, size_t k1, float c, bool scales_in) {
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

__device__ inline float AlphaAt(const EngineAlpha& al, size_t i, size_t j) {
  if (al.rule == 0) return __fmul_rn(al.rows ? al.rows[i] : al.ta, al.cols ? al.cols[j] : al.tb);
  const float p = __fmul_rn(al.amax_rows ? al.amax_rows[i] : al.amax_a, al.amax_cols ? al.amax_cols[j] : al.amax_b);
  return al.rule == 1 ? __fmul_rn(p, al.te_inv) : __fdiv_rn(p, al.te_factor);
}

// The end of a promotion window: the tensor core's partial sum into the FP32 accumulator, times the block
// scales at w0 when they are applied at promotion (cuBLAS's two orders), else added.
__device__ inline float Promote(const EngineGemmArgs& g, const Line& L, size_t w0, float part, float acc) {
  const EngineModel& p = g.model;
  if (p.blocks && !p.scales_in) {
    const float sa = static_cast<float>(L.SA(w0)), sb = static_cast<float>(L.SB(w0));
    return p.promote_separately ? __fmaf_rn(__fmul_rn(part, sa), sb, acc) : __fmaf_rn(part, __fmul_rn(sa, sb), acc);
  }
  return __fadd_rn(acc, part);
}

// The epilogue: alpha (exact takes it into every product instead), then the model's canonical NaN
// (qmx::detail::ModelNan): 0x7FFFFFFF fused, 0x7FC00000 fp32-seq, exact and block-exact.
__device__ inline float Finish(const EngineGemmArgs& g, size_t i, size_t j, float acc) {
  const float r = g.alpha.has && g.model.kind != 2 ? __fmul_rn(AlphaAt(g.alpha, i, j), acc) : acc;
  return isnan(r) ? __int_as_float(g.model.kind != 0 ? 0x7FC00000 : 0x7FFFFFFF) : r;
}

// One block of block-exact (gemm_ref.cc BlockExactDot): RNE32 of acc plus the products k0..k1 times their
// scales, exactly, on the reference's accumulator (exact_sum.h; in local memory).
static __device__ __noinline__ float BlockExactStep(const Line& L, size_t k0, size_t k1, float acc) {
  qmx::detail::ExactSum sum;
  sum.AddDouble(acc);
  bool all_neg_zero = acc == 0 && signbit(acc);
  for (size_t k = k0; k < k1; ++k) {
    const double f[4] = {L.va[L.CodeA(k)], L.vb[L.CodeB(k)], L.SA(k), L.SB(k)};
    qmx::detail::AddExactFactors(sum, all_neg_zero, f, 4);
  }
  return sum.RoundToFloat(all_neg_zero);
}

// exact and block-exact (gemm_ref.cc ExactDot, BlockExactDot) on the reference's own accumulator and product
// (exact_sum.h), from C or +0: exact sums every product times its scales and second-level factors (TE's alpha
// under its rules) with C and rounds once; block-exact rounds C plus each scale block's products into the FP32
// accumulator. The accumulator lives in local memory (1,344 bits each side): the slow, general path.
static __device__ __noinline__ float ExactFamilyDot(const EngineGemmArgs& g, const Line& L, size_t i, size_t j) {
  const float* c = g.c ? g.c + i * g.n + j : nullptr;
  if (g.model.kind == 2) {
    qmx::detail::ExactSum sum;
    bool all_neg_zero = true;
    if (c) {
      sum.AddDouble(*c);
      all_neg_zero = *c == 0 && signbit(*c);
    }
    const EngineAlpha& al = g.alpha;
    const bool te = al.rule != 0;
    const double ta = te ? AlphaAt(al, i, j) : al.rows ? al.rows[i] : al.ta;
    const double tb = te ? 1.0 : al.cols ? al.cols[j] : al.tb;
    for (size_t k = 0; k < g.k; ++k) {
      const double f[6] = {L.va[L.CodeA(k)], L.vb[L.CodeB(k)], L.SA(k), L.SB(k), ta, tb};
      qmx::detail::AddExactFactors(sum, all_neg_zero, f, 6);
    }
    return sum.RoundToFloat((c || g.k > 0) && all_neg_zero);
  }
  float acc = c ? *c : 0.0f;
  for (size_t k0 = 0; k0 < g.k; k0 += g.model.kb)
    acc = BlockExactStep(L, k0, k0 + g.model.kb < g.k ? k0 + g.model.kb : g.k, acc);
  return acc;
}

__device__ inline float Dot(const EngineGemmArgs& g, const Line& L, size_t i, size_t j) {
  const EngineModel& p = g.model;
  if (p.kind >= 2) return Finish(g, i, j, ExactFamilyDot(g, L, i, j));
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
        acc = Promote(g, L, w0, part, acc);
      }
    }
  }
  return Finish(g, i, j, acc);
}

}  // namespace fused
}  // namespace qmx::gpu::detail
