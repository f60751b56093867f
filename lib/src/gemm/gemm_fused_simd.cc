// gemm_fused_simd.cc: the Highway kernel of the fused models (MMA-Sim's fused dot product with FP32 terms,
// see gemm_simd.h), compiled for every target and chosen at run time; packing and loop nest: gemm_pack-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gemm/gemm_fused_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "gemm/gemm_internal.h"
#include "gemm/gemm_pack-inl.h"
#include "gemm/gemm_simd.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

// ---- fused (MMA-Sim) -----------------------------------------------------------------------------

template <bool kRne, class V>
HWY_INLINE V RoundInt(V v) {
  if constexpr (kRne) return hn::Round(v);
  else return hn::Trunc(v);
}

// S (an integer in FP32) * 2^unit rounded to `bits` significant bits, the exponent floored at -126;
// +0 for S = 0, signed zero when the kept bits vanish, Inf from 2^128 up (FusedOut's rule).
template <bool kRne, class DF, class VI>
HWY_INLINE hn::Vec<DF> FusedOutV(DF df, hn::Vec<DF> s, VI unit, int bits) {
  const hn::RebindToSigned<DF> di;
  const auto a = hn::Abs(s);
  const auto msb = hn::Sub(hn::ShiftRight<23>(hn::BitCast(di, a)), hn::Set(di, 127));
  const auto e = hn::Max(hn::Add(msb, unit), hn::Set(di, -126));
  const auto q = hn::Sub(e, hn::Set(di, bits - 1));
  const auto kept = RoundInt<kRne>(hn::Mul(a, Pow2OrZero(df, hn::Sub(unit, q))));
  const auto q1 = hn::ShiftRight<1>(q);
  const auto v = hn::Mul(hn::Mul(kept, Pow2OrZero(df, q1)), Pow2OrZero(df, hn::Sub(q, q1)));
  return hn::IfThenZeroElse(hn::Eq(s, hn::Zero(df)), hn::CopySign(v, s));
}

// What the plans of the FP32 and FP16 terms (ShiftPlanFor, Fp16PlanFor) read of an operand's codes: over
// its nonzero finite codes (the others are not in the data: the dispatcher checks), the largest significand
// at the nominal exponent, the smallest magnitude, the most significant bits, the lowest LSB exponent and the
// range of nominal exponents. False where some significand is 2 or more.
struct CodeSide {
  double sig = 0, vmin = HUGE_VAL;
  int bits = 0, lsb = 1000, emin = 1000, top = -1000;
};
inline bool MeasureCodes(const FusedGemmArgs& g, const CodeMatrix<float>& v, const CodeMatrix<int32_t>& e,
                         CodeSide& s) {
  for (int code = 0; code < 256; ++code) {
    const double x = std::fabs(static_cast<double>(v.table[code]));
    if (e.table[code] == g.zero_code || x == 0 || !std::isfinite(x)) continue;
    const double sig = std::ldexp(x, -e.table[code]);
    if (sig >= 2) return false;
    s.sig = std::max(s.sig, sig);
    s.vmin = std::min(s.vmin, x);
    s.bits = std::max(s.bits, detail::SignificantBits(x));
    s.lsb = std::min(s.lsb, detail::ExactOf(x).lsb);
    s.emin = std::min(s.emin, e.table[code]);
    s.top = std::max(s.top, e.table[code]);
  }
  return true;
}

// ---- FP16 products (AVX512-FP16) ----------------------------------------------------------------
//
// Where the CPU has AVX512-FP16 (simd::Fp16Products), each step's products can be formed 32 to a vector
// in FP16 lanes, two K per column: a' = a 2^(ca - EA) and b' = b 2^(13 - ca - EB), EA and EB the largest
// nominal exponent among the nonzero elements of the row's and the column's step, so that a' < 2^(ca + 1),
// b' < 2^(14 - ca) and a' b' < 2^15, each an FP16 number (Fp16PlanFor checks every code). A product's term
// in units of 2^(emax - F) is a b 2^(F - emax) = a' b' 2^G, G = F - 13 + EA + EB - emax, and one
// conversion truncates (rounds) it to an int16: exact where a' b' is an FP16 number; where it is not (its
// LSB below 2^-24, so a' b' < 2^(SB - 24), SB the product's significant bits), FP16 rounds it to at most
// 2^(SB - 24) and the term is 0 either way when G <= 23 - SB (a step takes this path only then, and only
// with G <= 15, so that 2^G is an FP16 number). Below G = -15 no term reaches 1/2 and 2^G is taken as 0;
// 2^-15 is an FP16 subnormal. VNNI's pair sum adds the two K of a column into its int32 sum.
#if QMX_AVX512
#define QMX_FP16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512fp16")))

struct Fp16Plan {
  bool ok = false;
  int ca = 0;    // A's shift (B's is 13 - ca)
  int gmax = 0;  // the largest G a step may have: 23 - SB, at most 15
};

// FP16 bits of v, an FP32 normal number or zero that FP16 holds exactly (Fp16PlanFor's bounds).
inline uint32_t HalfBits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  const uint32_t sign = (b >> 16) & 0x8000u;
  if (v == 0) return sign;
  const int e = static_cast<int>((b >> 23) & 0xFF) - 127;
  if (e >= -14) return sign | static_cast<uint32_t>(e + 15) << 10 | ((b >> 13) & 0x3FFu);
  return sign | static_cast<uint32_t>(std::ldexp(std::fabs(v), 24));  // subnormal: a multiple of 2^-24
}

Fp16Plan Fp16PlanFor(const FusedGemmArgs& g) {
  Fp16Plan f;
  if (!Fp16Products() || g.step % 2 != 0 || g.a.scales != nullptr || g.b.scales != nullptr) return f;
  CodeSide a, b;
  if (!MeasureCodes(g, g.a, g.ea, a) || !MeasureCodes(g, g.b, g.eb, b)) return f;
  if (a.bits + b.bits > 11 || a.sig * b.sig * std::ldexp(1.0, g.frac_bits) > 32766) return f;
  // a' LSB >= 2^-24: ca >= top_a - lsb_a - 24; b' likewise with 13 - ca; both shifts within -1 .. 14.
  const int lo = std::max(-1, a.top - a.lsb - 24), hi = std::min(14, 13 - (b.top - b.lsb - 24));
  if (lo > hi) return f;
  f.ok = true;
  f.ca = std::clamp(7, lo, hi);
  f.gmax = std::min(15, 23 - (a.bits + b.bits));  // and 2^G an FP16 number
  return f;
}

// The int32 term sums of R rows x 2 vectors of 16 columns and their factors (raw vectors), from memory, and
// the sums back.
QMX_FP16_TARGET inline void LoadSums(const int32_t* sums, const void* factors, __m512i (&s)[kFusedMr][2],
                                     __m512i (&f)[kFusedMr][2]) {
  for (size_t r = 0; r < kFusedMr; ++r)
    for (size_t h = 0; h < 2; ++h) {
      s[r][h] = _mm512_loadu_si512(sums + (2 * r + h) * 16);
      f[r][h] = _mm512_loadu_si512(static_cast<const uint32_t*>(factors) + (2 * r + h) * 16);
    }
}
QMX_FP16_TARGET inline void StoreSums(const __m512i (&s)[kFusedMr][2], int32_t* sums) {
  for (size_t r = 0; r < kFusedMr; ++r)
    for (size_t h = 0; h < 2; ++h) _mm512_storeu_si512(sums + (2 * r + h) * 16, s[r][h]);
}

// The products of `pairs` pairs of K into the int32 term sums (R rows x 2 vectors of 16 columns): ap holds
// per pair and row (a'_k, a'_k+1) as FP16 bits, bp per pair 2 vectors of (b'_k, b'_k+1) per column, gbits
// per row and vector 2^G twice per column, sums the int32 sums, read and written. kPairs: `pairs` as a constant
// (0: not), so that the loop unrolls and GCC keeps each VPDPWSSD accumulator in one register (with a run-time
// count it carried them through a register copy each, 16 a pair).
template <bool kRne, size_t kPairs>
HWY_NOINLINE QMX_FP16_TARGET void AddTermsF16(const uint32_t* ap, const uint32_t* bp, size_t n_pairs,
                                              const uint32_t* gbits, int32_t* sums) {
  constexpr size_t R = kFusedMr;
  const size_t pairs = kPairs != 0 ? kPairs : n_pairs;
  __m512i s[R][2], gv[R][2];
  LoadSums(sums, gbits, s, gv);
  const __m512i ones = _mm512_set1_epi16(1);
  const auto term = [&](__m512h v) {
    if constexpr (kRne) return _mm512_cvt_roundph_epi16(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    else return _mm512_cvttph_epi16(v);
  };
#pragma GCC unroll 16
  for (size_t kp = 0; kp < pairs; ++kp) {
    const __m512h b0 = _mm512_castsi512_ph(_mm512_loadu_si512(bp + kp * 32));
    const __m512h b1 = _mm512_castsi512_ph(_mm512_loadu_si512(bp + kp * 32 + 16));
    HWY_UNROLL(4)
    for (size_t r = 0; r < R; ++r) {
      const __m512h a = _mm512_castsi512_ph(_mm512_set1_epi32(static_cast<int>(ap[kp * R + r])));
      s[r][0] =
          _mm512_dpwssd_epi32(s[r][0], term(_mm512_mul_ph(_mm512_mul_ph(a, b0), _mm512_castsi512_ph(gv[r][0]))), ones);
      s[r][1] =
          _mm512_dpwssd_epi32(s[r][1], term(_mm512_mul_ph(_mm512_mul_ph(a, b1), _mm512_castsi512_ph(gv[r][1]))), ones);
    }
  }
  StoreSums(s, sums);
}

// AddTermsF16's products where some G passed gmax (the step declined the FP16 terms), from the same FP16
// packs in FP32 lanes: a' b' is exact in FP32 (at most 11 + 11 significant bits, above 2^-48), and a' b'
// 2^G is the term before its one conversion, as AddTermsI32 forms it. g2 per row and vector: 2^G per column
// (Pow2OrZero: 0 below 2^-126, where every term is below 1/2), formed by the caller for declined steps only.
template <bool kRne>
HWY_NOINLINE QMX_FP16_TARGET void AddTermsF16Wide(const uint32_t* ap, const uint32_t* bp, size_t pairs, const float* g2,
                                                  int32_t* sums) {
  constexpr size_t R = kFusedMr;
  __m512i s[R][2], gv[R][2];
  LoadSums(sums, g2, s, gv);
  const auto term = [&](__m512 v) {
    if constexpr (kRne) return _mm512_cvtps_epi32(v);
    else return _mm512_cvttps_epi32(v);
  };
  for (size_t kp = 0; kp < pairs; ++kp) {
    __m512 b[2][2];  // [k of the pair][vector]
    for (size_t h = 0; h < 2; ++h) {
      const __m512i v = _mm512_loadu_si512(bp + kp * 32 + h * 16);
      b[0][h] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
      b[1][h] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
    }
    for (size_t r = 0; r < R; ++r) {
      const uint32_t pair = ap[kp * R + r];
      for (size_t t = 0; t < 2; ++t) {
        const __m512 a = _mm512_set1_ps(_cvtsh_ss(static_cast<unsigned short>(pair >> (16 * t))));
        for (size_t h = 0; h < 2; ++h)
          s[r][h] =
              _mm512_add_epi32(s[r][h], term(_mm512_mul_ps(_mm512_mul_ps(a, b[t][h]), _mm512_castsi512_ps(gv[r][h]))));
      }
    }
  }
  StoreSums(s, sums);
}

// The FP16 products' packs (PackFp16): per (row, step) and (step, column) the top nominal exponent of a
// nonzero element (kNoExp: none), and both operands scaled by it and packed as FP16 pairs of K.
constexpr int32_t kNoExp = -1000;
struct Fp16Packs {
  Fp16Plan plan;
  size_t kpairs = 0;  // pairs of K
  Buf<int32_t> ptop_a, ptop_b;
  Buf<uint32_t> pa16, pb16;
  // FP16 bits of 2^G, twice per int32 lane, for G = -16 + i (i < 32): 2^-15 is FP16's subnormal 0x0200;
  // below -15 every term is under 1/2 (a' b' < 2^15) and truncates and rounds to 0: the power is 0.
  alignas(64) uint32_t pow2[32];
};

// The top nominal exponent of a nonzero element per (row, step) of A (m x nsteps) and (step, column) of B
// (nsteps x n), kNoExp where the step has none.
void StepTops(const FusedGemmArgs& g, size_t nsteps, std::vector<int32_t>& top_a, std::vector<int32_t>& top_b) {
  const size_t step = static_cast<size_t>(g.step);
  top_a.assign(g.m * nsteps, kNoExp);
  top_b.assign(nsteps * g.n, kNoExp);
#pragma omp parallel for schedule(static) if (g.parallel)
  for (long i = 0; i < static_cast<long>(g.m); ++i)
    for (size_t si = 0; si < nsteps; ++si) {
      int32_t t = kNoExp;
      for (size_t kk = si * step; kk < std::min(g.k, (si + 1) * step); ++kk) {
        const int32_t e = g.ea.table[g.ea.codes[i * g.k + kk]];
        if (e != g.zero_code) t = std::max(t, e);
      }
      top_a[i * nsteps + si] = t;
    }
#pragma omp parallel for schedule(static) if (g.parallel)
  for (long si = 0; si < static_cast<long>(nsteps); ++si)
    for (size_t kk = si * step; kk < std::min(g.k, (si + 1) * step); ++kk)
      for (size_t j = 0; j < g.n; ++j) {
        const int32_t e = g.eb.table[g.eb.codes[kk * g.n + j]];
        int32_t& t = top_b[si * g.n + j];
        if (e != g.zero_code) t = std::max(t, e);
      }
}

// Each code's FP16 bits scaled by 2^(shift - top), per top exponent of the format from top0 up: a table
// lookup per element.
std::vector<uint16_t> HalfTable(const FusedGemmArgs& g, const CodeMatrix<float>& v, const CodeMatrix<int32_t>& e,
                                int shift, int32_t& top0) {
  int32_t lo = 1000, hi = -1000;
  for (int code = 0; code < 256; ++code)
    if (e.table[code] != g.zero_code) lo = std::min(lo, e.table[code]), hi = std::max(hi, e.table[code]);
  top0 = std::min(lo, hi);
  std::vector<uint16_t> t(static_cast<size_t>(std::max(0, hi - top0 + 1)) * 256, 0);
  for (int32_t top = top0; top <= hi; ++top)
    for (int code = 0; code < 256; ++code) {
      const float x = v.table[code];
      if (e.table[code] != g.zero_code && e.table[code] <= top)
        t[static_cast<size_t>(top - top0) * 256 + code] = static_cast<uint16_t>(HalfBits(std::ldexp(x, shift - top)));
    }
  return t;
}
// A code's FP16 bits in a step with top exponent `top` (a step whose elements are all zero has top kNoExp:
// its codes give 0).
inline uint32_t HalfOf(const std::vector<uint16_t>& t, int32_t top0, int32_t top, uint8_t code) {
  return top == kNoExp ? 0u : t[static_cast<size_t>(top - top0) * 256 + code];
}

// The FP16 products' packs where Fp16PlanFor allows them (16 FP32 lanes), else only the plan (not ok).
Fp16Packs PackFp16(const FusedGemmArgs& g, size_t lanes, size_t nsteps, size_t nr) {
  constexpr size_t R = kFusedMr;
  const size_t step = static_cast<size_t>(g.step);
  Fp16Packs f;
  f.plan = lanes == 16 ? Fp16PlanFor(g) : Fp16Plan{};
  f.kpairs = (g.k + 1) / 2;
  for (int i = 0; i < 32; ++i) {
    const int gexp = i - 16;
    const uint32_t half_bits = gexp >= -14 ? static_cast<uint32_t>(gexp + 15) << 10 : gexp == -15 ? 0x0200u : 0u;
    f.pow2[i] = half_bits | half_bits << 16;
  }
  if (!f.plan.ok) return f;
  std::vector<int32_t> top_a, top_b;
  StepTops(g, nsteps, top_a, top_b);
  int32_t top0_a = 0, top0_b = 0;
  const std::vector<uint16_t> ha = HalfTable(g, g.a, g.ea, f.plan.ca, top0_a);
  const std::vector<uint16_t> hb = HalfTable(g, g.b, g.eb, 13 - f.plan.ca, top0_b);
  f.pa16 = PanelRows<uint32_t>(g.m, f.kpairs, R, g.parallel, [&](size_t row, uint32_t* d) {
    const uint8_t* codes = g.a.codes + row * g.k;
    for (size_t si = 0; si < nsteps; ++si) {  // steps are even: no pair straddles two
      const int32_t top = top_a[row * nsteps + si];
      for (size_t kk = si * step; kk < std::min(g.k, (si + 1) * step); kk += 2) {
        const uint32_t lo = HalfOf(ha, top0_a, top, codes[kk]);
        d[kk / 2 * R] = kk + 1 < g.k ? lo | HalfOf(ha, top0_a, top, codes[kk + 1]) << 16 : lo;
      }
    }
  });
  f.pb16 = PanelCols<uint32_t>(f.kpairs, g.n, nr, g.parallel, [&](size_t kp, size_t c0, size_t valid, uint32_t* d) {
    std::fill(d, d + valid, 0u);
    for (size_t kk = 2 * kp, t = 0; t < 2 && kk < g.k; ++kk, ++t) {
      const uint8_t* codes = g.b.codes + kk * g.n + c0;
      const int32_t* top = top_b.data() + (kk / step) * g.n + c0;
      for (size_t j = 0; j < valid; ++j) d[j] |= HalfOf(hb, top0_b, top[j], codes[j]) << (16 * t);
    }
  });
  f.ptop_a = PackRows(top_a.data(), g.m, nsteps, R);
  f.ptop_b = PackCols(top_b.data(), nsteps, g.n, nr);
  return f;
}

// The steps that took the FP16 products and the steps that declined them, summed over the threads' counters
// (a line apart), for Fp16StepCounts.
inline void ReportFp16Steps(const std::vector<uint64_t>& counts) {
  uint64_t taken = 0, declined = 0;
  for (size_t t = 0; t < counts.size(); t += 16) taken += counts[t], declined += counts[t + 1];
  if (taken + declined > 0) CountFp16Steps(taken, declined);
}
#endif

// Terms by exponent adds (ShiftPlanFor): where the formats allow, A is packed times 2^-c, so that every
// nonzero product a' b = a b 2^-c is a normal FP32 number and each output's factor 2^(F - emax) becomes
// 2^sh, sh = F + c - emax, added to the product's exponent field (an integer add, where a second FP32
// multiply took a multiplier port). sh is clamped to 0 .. 125: at 125 a zero product's bits (+-0) give
// +-2^-2, whose term is 0; at 0 (emax > F + c) the true terms are all below 1/2 (c >= EPmax + 3, EPmax
// the largest sum of two nominal exponents) and so is a' b < 2^(EPmax + 2 - c); sh = 125 clamps only
// where emax < F + c - 125 <= EPmin, the smallest sum, so every product of the step is zero.
struct ShiftPlan {
  bool ok = false;
  int c = 0;
};

ShiftPlan ShiftPlanFor(const FusedGemmArgs& g) {
  ShiftPlan s;
  if (g.a.scales != nullptr || g.b.scales != nullptr) return s;
  CodeSide a, b;
  if (!MeasureCodes(g, g.a, g.ea, a) || !MeasureCodes(g, g.b, g.eb, b) || a.emin > a.top || b.emin > b.top) return s;
  const int c = std::max(0, a.top + b.top + 3);
  // a 2^-c and a b 2^-c normal (at least 2^-126), and the upper clamp only where every product is zero.
  const int lo_a = std::ilogb(a.vmin), lo_p = std::ilogb(a.vmin * b.vmin);
  if (c > 126 + std::min(lo_a, lo_p) || c > 125 + a.emin + b.emin - g.frac_bits || g.frac_bits + 2 > 127) return s;
  s.ok = true;
  s.c = c;
  return s;
}

// What the fused kernel's tiles read (PackFused): the operands' values, their int8 exponents, the zero flags
// and the promotion's block scales in panels, and the call's K sizes.
struct FusedPacks {
  size_t step = 0, window = 0, nsteps = 0, nb = 0;  // window: K per promotion (the step without one)
  // With zero_exp at or below -126 the zero-term rule is emax = max(emax, zero_exp) in every lane: a zero
  // accumulator applies it anyway, and a nonzero one has put emax at -126 or above already. No flags.
  bool zero_floor = false;
  Buf<float> pa, pb;      // the elements in FP32 (F32Terms), where the FP16 products do not apply
  ShiftPlan shift;        // pa holds A times 2^-shift.c where shift.ok
  Buf<int8_t> pea, peb;   // PackRowsExp8Pairs, PackColsExp8Twice
  Buf<int32_t> pza, pzb;  // some product of the step is zero (StepZeroFlags), where the rule needs flags
  Buf<float> psa, psb;    // the promotion's block scales, where g.sa is given
#if QMX_AVX512
  Fp16Packs f16;
#endif
};

// The fused kernel's packs, for B panels of nr columns and `lanes` FP32 lanes.
FusedPacks PackFused(const FusedGemmArgs& g, size_t lanes, size_t nr) {
  constexpr size_t R = kFusedMr;
  const bool par = g.parallel;
  FusedPacks pk;
  pk.step = static_cast<size_t>(g.step);
  pk.window = g.promote ? static_cast<size_t>(g.promote) : pk.step;
  pk.nsteps = (g.k + pk.step - 1) / pk.step;
  std::vector<int32_t> za, zb;
  pk.zero_floor = g.track_zero && g.zero_exp <= -126;
  if (g.track_zero && !pk.zero_floor) StepZeroFlags(g.ea, g.eb, g.zero_code, pk.step, par, za, zb);
#if QMX_AVX512
  pk.f16 = PackFp16(g, lanes, pk.nsteps, nr);
  const bool f32_terms = !pk.f16.plan.ok;  // (the FP16 packs serve every step where the plan holds)
#else
  (void)lanes;
  const bool f32_terms = true;
#endif
  if (f32_terms) {
    pk.shift = ShiftPlanFor(g);
    std::array<float, 256> scaled{};
    CodeMatrix<float> a = g.a;
    if (pk.shift.ok) {
      for (int code = 0; code < 256; ++code) scaled[code] = std::ldexp(g.a.table[code], -pk.shift.c);
      a.table = scaled.data();
    }
    pk.pa = PackRows(a, R, par);
    pk.pb = PackCols(g.b, nr, par);
  }
  pk.pea = PackRowsExp8Pairs(g.ea, R, g.zero_code, par);
  pk.peb = PackColsExp8Twice(g.eb, nr, g.zero_code, par);
  if (!za.empty()) pk.pza = PackRows(za.data(), g.m, pk.nsteps, R), pk.pzb = PackCols(zb.data(), pk.nsteps, g.n, nr);
  pk.nb = g.sa ? (g.k + g.kb - 1) / g.kb : 0;
  if (g.sa) {
    pk.psa = PackRows(g.sa, g.m, pk.nb, R);
    pk.psb = PackCols(g.sb, pk.nb, g.n, nr);
  }
  return pk;
}

// One tile of a fused call (DF its FP32 lanes): zero_exp and F in int32 lanes, and beside them the rounding's
// mask and the FP16 step counters.
template <class DF>
struct FusedTile : KernelTile<FusedGemmArgs, FusedPacks, DF> {
  hn::Vec<hn::RebindToSigned<DF>> keep;  // FP32's sign, exponent and top out_bits - 1 significand bits
  uint64_t* counts;  // FP16 steps taken and declined, a line of 16 per thread (FP16 products), else null
};

// A step's emax per output, the largest of the accumulator's exponent, the products' (emax_p, from
// MaxProductExps) and by the zero-term rule zero_exp, and the step's sum started with the accumulator's
// term in units of 2^(emax - F).
template <bool kTermRne, class DF, class VI>
HWY_INLINE void FusedStepExps(DF df, const FusedTile<DF>& t, size_t s0, size_t s1,
                              const hn::Vec<DF> (&part)[kFusedMr][2], VI (&emax_p)[kFusedMr][2],
                              VI (&emax)[kFusedMr][2], VI (&sum)[kFusedMr][2]) {
  constexpr size_t R = kFusedMr;
  const hn::RebindToSigned<DF> di;
  const FusedGemmArgs& g = t.g;
  const FusedPacks& pk = t.pk;
  const size_t N = hn::Lanes(df), nr = 2 * N, si = s0 / pk.step;
  MaxProductExps<R>(di, pk.pea.get() + (t.p * g.k + s0) * 2 * R, pk.peb.get() + (t.q * g.k + s0) * 2 * nr, s1 - s0,
                    emax_p);
  const int32_t* zbp = pk.pzb ? pk.pzb.get() + (t.q * pk.nsteps + si) * nr : nullptr;
  for (size_t r = 0; r < R; ++r)
    for (size_t h = 0; h < 2; ++h) {
      const bool flags = g.track_zero && !pk.zero_floor;  // (then the flag panels exist)
      emax[r][h] =
          StepEmax(df, part[r][h], emax_p[r][h], g.zero_code, pk.zero_floor,
                   flags ? pk.pza[(t.p * pk.nsteps + si) * R + r] : 0, flags ? zbp + h * N : nullptr, t.zero_exp);
      sum[r][h] = AccTermI32<kTermRne>(df, part[r][h], emax[r][h], t.fbits);
    }
}

#if QMX_AVX512
// The step's product terms from the FP16 packs added to sum, the int32 sums through memory: by FP16 products
// (AddTermsF16) where every output's G = F - 13 + EA + EB - emax (none where the step has no nonzero
// product) is at most gmax, else in FP32 lanes (AddTermsF16Wide, a declined step); false, leaving sum,
// where the plan is off. Counts the steps of either kind.
template <bool kTermRne, class DF, class VI>
HWY_INLINE bool Fp16Terms(DF df, const FusedTile<DF>& t, size_t s0, size_t s1, uint64_t* counts,
                          const VI (&emax_p)[kFusedMr][2], const VI (&emax)[kFusedMr][2], VI (&sum)[kFusedMr][2]) {
  constexpr size_t R = kFusedMr;
  const hn::RebindToSigned<DF> di;
  const FusedPacks& pk = t.pk;
  const Fp16Packs& f16 = pk.f16;
  if (!f16.plan.ok) return false;
  const size_t N = hn::Lanes(df), nr = 2 * N, si = s0 / pk.step;
  const __m512i pow2_lo = _mm512_load_si512(f16.pow2), pow2_hi = _mm512_load_si512(f16.pow2 + 16);
  alignas(64) uint32_t gbits[R * 2 * 16];
  alignas(64) int32_t sums[R * 2 * 16];
  VI gexps[R][2];  // G itself, whose powers a declined step forms in FP32
  const int32_t* tb = f16.ptop_b.get() + (t.q * pk.nsteps + si) * nr;
  bool fits = true;
  for (size_t r = 0; r < R; ++r)
    for (size_t h = 0; h < 2; ++h) {
      const VI gexp =
          hn::IfThenElse(hn::Eq(emax_p[r][h], hn::Set(di, kNoProduct)), hn::Set(di, 2 * kNoExp),
                         hn::Sub(hn::Add(hn::Set(di, f16.ptop_a[(t.p * pk.nsteps + si) * R + r] + t.g.frac_bits - 13),
                                         hn::LoadU(di, tb + h * N)),
                                 emax[r][h]));
      fits = fits && hn::AllFalse(di, hn::Gt(gexp, hn::Set(di, f16.plan.gmax)));
      gexps[r][h] = gexp;
      const VI idx = hn::Min(hn::Max(hn::Add(gexp, hn::Set(di, 16)), hn::Zero(di)), hn::Set(di, 31));
      hn::Store(VI{_mm512_permutex2var_epi32(pow2_lo, idx.raw, pow2_hi)}, di,
                reinterpret_cast<int32_t*>(gbits) + (2 * r + h) * N);
      hn::Store(sum[r][h], di, sums + (2 * r + h) * N);
    }
  ++counts[fits ? 0 : 1];
  const uint32_t* ap = f16.pa16.get() + (t.p * f16.kpairs + s0 / 2) * R;
  const uint32_t* bp = f16.pb16.get() + (t.q * f16.kpairs + s0 / 2) * nr;
  if (fits) {
    const size_t pairs = (s1 - s0 + 1) / 2;
    if (pairs == 8) AddTermsF16<kTermRne, 8>(ap, bp, pairs, gbits, sums);
    else if (pairs == 16) AddTermsF16<kTermRne, 16>(ap, bp, pairs, gbits, sums);
    else AddTermsF16<kTermRne, 0>(ap, bp, pairs, gbits, sums);
  } else {
    alignas(64) float g2[R * 2 * 16];
    for (size_t r = 0; r < R; ++r)
      for (size_t h = 0; h < 2; ++h) hn::Store(Pow2OrZero(df, gexps[r][h]), df, g2 + (2 * r + h) * N);
    AddTermsF16Wide<kTermRne>(ap, bp, (s1 - s0 + 1) / 2, g2, sums);
  }
  for (size_t r = 0; r < R; ++r)
    for (size_t h = 0; h < 2; ++h) sum[r][h] = hn::Load(di, sums + (2 * r + h) * N);
  return true;
}
#endif

// The step's product terms by FP32 products added to sum: by exponent adds where the plan allows
// (AddTermsShiftI32), else by a second multiply (AddTermsI32).
template <bool kTermRne, class DF, class VI>
HWY_INLINE void F32Terms(DF df, const FusedTile<DF>& t, size_t s0, size_t s1, const VI (&emax)[kFusedMr][2],
                         VI (&sum)[kFusedMr][2]) {
  constexpr size_t R = kFusedMr;
  const hn::RebindToSigned<DF> di;
  const size_t nr = 2 * hn::Lanes(df);
  const float* ap = t.pk.pa.get() + (t.p * t.g.k + s0) * R;
  const float* bp = t.pk.pb.get() + (t.q * t.g.k + s0) * nr;
  if (t.pk.shift.ok) {
    VI sh[R][2];
    const VI top = hn::Set(di, t.g.frac_bits + t.pk.shift.c);
    for (size_t r = 0; r < R; ++r)
      for (size_t h = 0; h < 2; ++h)
        sh[r][h] = hn::ShiftLeft<23>(hn::Min(hn::Max(hn::Sub(top, emax[r][h]), hn::Zero(di)), hn::Set(di, 125)));
    AddTermsShiftI32<kTermRne, R>(df, ap, bp, s1 - s0, sh, sum);
    return;
  }
  // Products scale by 2^(F - emax) (clamped: out of range only when every product is zero or too small to
  // leave a bit).
  hn::Vec<DF> g2[R][2];
  for (size_t r = 0; r < R; ++r)
    for (size_t h = 0; h < 2; ++h) g2[r][h] = Pow2OrZero(df, hn::Sub(t.fbits, emax[r][h]));
  AddTermsI32<kTermRne, R>(df, ap, bp, 0, s1 - s0, g2, sum);
}

// The step's sum (units of 2^(emax - F), below 2^24: exact in FP32) rounded to out_bits into part; `bad` gains
// the lanes whose result left the finite range.
template <bool kOutRne, class DF, class VI>
HWY_INLINE void RoundFusedStep(DF df, const FusedTile<DF>& t, const VI (&emax)[kFusedMr][2],
                               const VI (&sum)[kFusedMr][2], hn::Vec<DF> (&part)[kFusedMr][2],
                               hn::Mask<DF> (&bad)[kFusedMr][2]) {
  const hn::RebindToSigned<DF> di;
  for (size_t r = 0; r < kFusedMr; ++r)
    for (size_t h = 0; h < 2; ++h) {
      const hn::Vec<DF> s = hn::ConvertTo(df, sum[r][h]);  // exact: below 2^24
      const VI unit = hn::Sub(emax[r][h], t.fbits);
      hn::Mask<DF> ok = hn::FirstN(df, 0);
      // Toward zero, a normal result: clear the bits below out_bits, then scale.
      if (!kOutRne) part[r][h] = ScaleStepSum(df, hn::BitCast(df, hn::And(hn::BitCast(di, s), t.keep)), unit, ok);
      if (!hn::AllTrue(df, ok)) {  // (ok lanes are normal numbers: only the general rounding can overflow)
        part[r][h] = FusedOutV<kOutRne>(df, s, unit, t.g.out_bits);
        bad[r][h] = hn::Or(bad[r][h], hn::Not(hn::IsFinite(part[r][h])));
      }
    }
}

// One step [s0, s1) of a tile: part, the accumulator's value, becomes the step's result, the accumulator's
// term plus the products' terms rounded once (counts: this thread's FP16 step counters, or null).
template <bool kTermRne, bool kOutRne, class DF>
HWY_INLINE void FusedStep(DF df, const FusedTile<DF>& t, size_t s0, size_t s1, [[maybe_unused]] uint64_t* counts,
                          hn::Vec<DF> (&part)[kFusedMr][2], hn::Mask<DF> (&bad)[kFusedMr][2]) {
  using VI = hn::Vec<hn::RebindToSigned<DF>>;
  VI emax_p[kFusedMr][2], emax[kFusedMr][2];
  VI sum[kFusedMr][2];  // in units of 2^(emax - F), below 2^24 (the caller's bound)
  FusedStepExps<kTermRne>(df, t, s0, s1, part, emax_p, emax, sum);
  bool fp16_done = false;
#if QMX_AVX512
  fp16_done = Fp16Terms<kTermRne>(df, t, s0, s1, counts, emax_p, emax, sum);
#endif
  if (!fp16_done) F32Terms<kTermRne>(df, t, s0, s1, emax, sum);
  RoundFusedStep<kOutRne>(df, t, emax, sum, part, bad);
}

// FusedStep where neither the FP16 products nor the zero flags apply (kFloor: the zero-term rule as the floor
// zero_exp <= -126 in every lane; else no rule), written for registers: each step's exponents, accumulator
// terms and rounding unrolled over the tile, and, toward zero, one test per step that every output's unit
// 2^(emax - F) leaves its rounded sum (below 2^24) a normal number (-126 <= emax - F <= 103), where the
// scaling alone is the rounding's result (ScaleStepSum's rule); else RoundFusedStep decides.
template <bool kTermRne, bool kOutRne, bool kFloor, class DF>
HWY_INLINE void LeanFusedStep(DF df, const FusedTile<DF>& t, size_t s0, size_t s1, hn::Vec<DF> (&part)[kFusedMr][2],
                              hn::Mask<DF> (&bad)[kFusedMr][2]) {
  constexpr size_t R = kFusedMr;
  using VI = hn::Vec<hn::RebindToSigned<DF>>;
  const hn::RebindToSigned<DF> di;
  const FusedPacks& pk = t.pk;
  const size_t nr = 2 * hn::Lanes(df);
  VI emax[R][2], sum[R][2];
  MaxProductExps<R>(di, pk.pea.get() + (t.p * t.g.k + s0) * 2 * R, pk.peb.get() + (t.q * t.g.k + s0) * 2 * nr, s1 - s0,
                    emax);
  HWY_UNROLL(8)
  for (size_t x = 0; x < 2 * R; ++x) {  // (one loop over the tile's vectors: GCC unrolls it whole)
    const size_t r = x / 2, h = x % 2;
    const VI ep = kFloor ? hn::Max(emax[r][h], t.zero_exp) : emax[r][h];
    emax[r][h] = MaxAccExp(df, part[r][h], ep);
    sum[r][h] = AccTermI32<kTermRne>(df, part[r][h], emax[r][h], t.fbits);
  }
  F32Terms<kTermRne>(df, t, s0, s1, emax, sum);
  if constexpr (!kOutRne) {
    if (EmaxWithin<R>(di, emax, t.g.frac_bits - 126, t.g.frac_bits + 103)) {
      HWY_UNROLL(8)
      for (size_t x = 0; x < 2 * R; ++x) {
        const size_t r = x / 2, h = x % 2;
        hn::Mask<DF> ok;
        const hn::Vec<DF> kept = hn::BitCast(df, hn::And(hn::BitCast(di, hn::ConvertTo(df, sum[r][h])), t.keep));
        part[r][h] = ScaleStepSum(df, kept, hn::Sub(emax[r][h], t.fbits), ok);  // (ok in every lane)
      }
      return;
    }
  }
  RoundFusedStep<kOutRne>(df, t, emax, sum, part, bad);
}

// The end of a promotion window [w0, ...): its result part added to the FP32 accumulator, times the K block's
// scales sa * sb where they are given ((part * sa) * sb where they apply separately); without promotion the
// part is the accumulator. `bad` gains the lanes that left the finite range.
template <class DF>
HWY_INLINE void PromoteWindow(DF df, const FusedTile<DF>& t, size_t w0, const hn::Vec<DF> (&part)[kFusedMr][2],
                              hn::Vec<DF> (&acc)[kFusedMr][2], hn::Mask<DF> (&bad)[kFusedMr][2]) {
  using VF = hn::Vec<DF>;
  constexpr size_t R = kFusedMr;
  const FusedGemmArgs& g = t.g;
  const FusedPacks& pk = t.pk;
  const size_t N = hn::Lanes(df), nr = 2 * N;
  for (size_t r = 0; r < R; ++r)
    for (size_t h = 0; h < 2; ++h) {
      if (!g.promote) {
        acc[r][h] = part[r][h];
      } else if (g.sa) {
        const size_t blk = w0 / g.kb;
        const VF sa = hn::Set(df, pk.psa[(t.p * pk.nb + blk) * R + r]);
        const VF sb = hn::LoadU(df, pk.psb.get() + (t.q * pk.nb + blk) * nr + h * N);
        acc[r][h] = g.separate ? hn::MulAdd(hn::Mul(part[r][h], sa), sb, acc[r][h])
                               : hn::MulAdd(part[r][h], hn::Mul(sa, sb), acc[r][h]);
      } else {
        acc[r][h] = hn::Add(acc[r][h], part[r][h]);
      }
      bad[r][h] = hn::Or(bad[r][h], hn::Not(hn::IsFinite(acc[r][h])));
    }
}

// A tile's K chunk [k0c, k0c + len): C's outputs loaded into registers with their non-finite lanes (bad),
// each promotion window's steps (FusedStep) and its promotion, and C stored back with the bad lanes as NaN,
// which sends those outputs to the reference.
template <bool kTermRne, bool kOutRne, int kLean, class DF>
HWY_INLINE void FusedChunk(DF df, const FusedTile<DF>& t, size_t k0c, size_t len, float* ct, size_t ldc) {
  constexpr size_t R = kFusedMr;
  // Without promotion the chunk is one window: PromoteWindow would only copy the part and test it, and every
  // step that leaves the finite range has marked its lanes already (RoundFusedStep).
  const size_t step = t.pk.step, window = t.g.promote ? t.pk.window : len;
  hn::Vec<DF> acc[R][2];
  hn::Mask<DF> bad[R][2];  // lanes whose accumulation left the finite range
  LoadTile<R>(df, ct, ldc, acc, bad);
  uint64_t* counts = t.counts ? t.counts + static_cast<size_t>(omp_get_thread_num()) * 16 : nullptr;
  for (size_t w0 = k0c; w0 < k0c + len; w0 += window) {
    const size_t w1 = std::min(k0c + len, w0 + window);
    hn::Vec<DF> part[R][2];
    for (size_t r = 0; r < R; ++r)
      for (size_t h = 0; h < 2; ++h) part[r][h] = t.g.promote ? hn::Zero(df) : acc[r][h];
    for (size_t s0 = w0; s0 < w1; s0 += step) {
      const size_t s1 = std::min(w1, s0 + step);
      if constexpr (kLean == 0) FusedStep<kTermRne, kOutRne>(df, t, s0, s1, counts, part, bad);
      else LeanFusedStep<kTermRne, kOutRne, kLean == 1>(df, t, s0, s1, part, bad);
    }
    PromoteWindow(df, t, w0, part, acc, bad);
  }
  StoreTile<R>(df, acc, bad, ct, ldc);
}

// The fused kernel: the packs, then each tile's K chunks (FusedChunk) on Drive's threads (ForEachTile); false
// where the exponents or out_bits do not fit it.
template <bool kTermRne, bool kOutRne>
bool GemmFusedF32Impl(const FusedGemmArgs& g, float* c) {
  if (!FitsExp8(g.ea.table, g.zero_code) || !FitsExp8(g.eb.table, g.zero_code) || g.out_bits < 1 || g.out_bits > 24)
    return false;
  using DF = hn::ScalableTag<float>;
  const DF df;
  const hn::RebindToSigned<DF> di;
  const size_t nr = 2 * hn::Lanes(df);
  const FusedPacks pk = PackFused(g, hn::Lanes(df), nr);
  uint64_t* counts = nullptr;
#if QMX_AVX512
  // Steps that took the FP16 products and steps that declined them, per thread (a line apart).
  std::vector<uint64_t> f16_count(pk.f16.plan.ok ? static_cast<size_t>(omp_get_max_threads()) * 16 : 0, 0);
  if (pk.f16.plan.ok) counts = f16_count.data();
#endif
  const auto keep = hn::Set(di, static_cast<int32_t>(~((1u << (24 - g.out_bits)) - 1)));
  const FusedTile<DF> tile{CallTile(df, g, pk), keep, counts};
  // The lean steps (LeanFusedStep) where no FP16 products and no zero flags apply: 1 with the zero rule's
  // floor, 2 without a rule.
  const bool lean = counts == nullptr && (!g.track_zero || pk.zero_floor);
  const auto run = [&](auto lean_kind) {
    ForEachTile<kFusedMr>(tile, c, nr, ChunkFor(pk.window),
                          [&](const FusedTile<DF>& t, size_t k0c, size_t len, float* ct, size_t ldc) {
                            FusedChunk<kTermRne, kOutRne, decltype(lean_kind)::value>(df, t, k0c, len, ct, ldc);
                          });
  };
  if (!lean) run(std::integral_constant<int, 0>());
  else if (pk.zero_floor) run(std::integral_constant<int, 1>());
  else run(std::integral_constant<int, 2>());
#if QMX_AVX512
  ReportFp16Steps(f16_count);
#endif
  return true;
}

bool GemmFusedF32T(const FusedGemmArgs& g, float* c) {
  return DispatchRounding(g.rne_terms, g.rne_out, [&](auto term_rne, auto out_rne) {
    return GemmFusedF32Impl<decltype(term_rne)::value, decltype(out_rne)::value>(g, c);
  });
}

#else  // no FMA or a scalable target: the caller's portable path

bool GemmFusedF32T(const FusedGemmArgs&, float*) { return false; }

#endif

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qmx::simd {
HWY_EXPORT(GemmFusedF32T);

namespace {
std::atomic<uint64_t> fp16_taken{0}, fp16_declined{0};
}  // namespace
void CountFp16Steps(uint64_t taken, uint64_t declined) {
  fp16_taken += taken;
  fp16_declined += declined;
}
void Fp16StepCounts(uint64_t* taken, uint64_t* declined) {
  *taken = fp16_taken.load();
  *declined = fp16_declined.load();
}

bool GemmFusedF32(const FusedGemmArgs& g, float* c) { return HWY_DYNAMIC_DISPATCH(GemmFusedF32T)(g, c); }
}  // namespace qmx::simd
#endif  // HWY_ONCE
