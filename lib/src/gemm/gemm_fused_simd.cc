// gemm_fused_simd.cc: the Highway kernel of the fused models (MMA-Sim's fused dot product with FP32 terms,
// see gemm_simd.h), compiled for every target and chosen at run time; packing and loop nest: gemm_pack-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gemm/gemm_fused_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
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
  struct Side {
    double sig = 0;                 // largest significand at the nominal exponent
    int bits = 0, lsb = 1000, top = -1000;  // most significant bits, lowest LSB exponent, top nominal exponent
  };
  const auto measure = [&](const CodeMatrix<float>& v, const CodeMatrix<int32_t>& e, Side& s) {
    for (int code = 0; code < 256; ++code) {
      const double x = std::fabs(static_cast<double>(v.table[code]));
      if (e.table[code] == g.zero_code || x == 0 || !std::isfinite(x)) continue;
      const double sig = std::ldexp(x, -e.table[code]);
      if (sig >= 2) return false;
      s.sig = std::max(s.sig, sig);
      s.bits = std::max(s.bits, internal::SignificantBits(x));
      s.lsb = std::min(s.lsb, internal::ExactOf(x).lsb);
      s.top = std::max(s.top, e.table[code]);
    }
    return true;
  };
  Side a, b;
  if (!measure(g.a, g.ea, a) || !measure(g.b, g.eb, b)) return f;
  if (a.bits + b.bits > 11 || a.sig * b.sig * std::ldexp(1.0, g.frac_bits) > 32766) return f;
  // a' LSB >= 2^-24: ca >= top_a - lsb_a - 24; b' likewise with 13 - ca; both shifts within -1 .. 14.
  const int lo = std::max(-1, a.top - a.lsb - 24), hi = std::min(14, 13 - (b.top - b.lsb - 24));
  if (lo > hi) return f;
  f.ok = true;
  f.ca = std::clamp(7, lo, hi);
  f.gmax = std::min(15, 23 - (a.bits + b.bits));  // and 2^G an FP16 number
  return f;
}

// The products of `pairs` pairs of K into the int32 term sums (R rows x 2 vectors of 16 columns): ap holds
// per pair and row (a'_k, a'_k+1) as FP16 bits, bp per pair 2 vectors of (b'_k, b'_k+1) per column, gbits
// per row and vector 2^G twice per column, sums the int32 sums, read and written.
template <bool kRne>
HWY_NOINLINE QMX_FP16_TARGET void AddTermsF16(const uint32_t* ap, const uint32_t* bp, size_t pairs, const uint32_t* gbits,
                                              int32_t* sums) {
  constexpr size_t R = kFusedMr;
  __m512i s[R][2];
  __m512h gv[R][2];
  for (size_t r = 0; r < R; ++r)
    for (size_t h = 0; h < 2; ++h) {
      s[r][h] = _mm512_loadu_si512(sums + (2 * r + h) * 16);
      gv[r][h] = _mm512_castsi512_ph(_mm512_loadu_si512(gbits + (2 * r + h) * 16));
    }
  const __m512i ones = _mm512_set1_epi16(1);
  const auto term = [&](__m512h v) {
    if constexpr (kRne) return _mm512_cvt_roundph_epi16(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    else return _mm512_cvttph_epi16(v);
  };
  for (size_t kp = 0; kp < pairs; ++kp) {
    const __m512h b0 = _mm512_castsi512_ph(_mm512_loadu_si512(bp + kp * 32));
    const __m512h b1 = _mm512_castsi512_ph(_mm512_loadu_si512(bp + kp * 32 + 16));
    HWY_UNROLL(4)
    for (size_t r = 0; r < R; ++r) {
      const __m512h a = _mm512_castsi512_ph(_mm512_set1_epi32(static_cast<int>(ap[kp * R + r])));
      s[r][0] = _mm512_dpwssd_epi32(s[r][0], term(_mm512_mul_ph(_mm512_mul_ph(a, b0), gv[r][0])), ones);
      s[r][1] = _mm512_dpwssd_epi32(s[r][1], term(_mm512_mul_ph(_mm512_mul_ph(a, b1), gv[r][1])), ones);
    }
  }
  for (size_t r = 0; r < R; ++r)
    for (size_t h = 0; h < 2; ++h) _mm512_storeu_si512(sums + (2 * r + h) * 16, s[r][h]);
}
#endif

template <bool kTermRne, bool kOutRne>
bool GemmFusedF32Impl(const FusedGemmArgs& g, float* c) {
  if (!FitsExp8(g.ea.table, g.zero_code) || !FitsExp8(g.eb.table, g.zero_code) || g.out_bits < 1 || g.out_bits > 24)
    return false;
  const bool par = g.parallel;
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  using VF = hn::Vec<decltype(df)>;
  using VI = hn::Vec<decltype(di)>;
  constexpr size_t R = kFusedMr;
  const size_t N = hn::Lanes(df), nr = 2 * N;
  const size_t step = static_cast<size_t>(g.step);
  const size_t window = g.promote ? static_cast<size_t>(g.promote) : step;
  const size_t kc = ChunkFor(window);
  const size_t mp = (g.m + R - 1) / R, np = (g.n + nr - 1) / nr;
  const size_t nsteps = (g.k + step - 1) / step;
  std::vector<int32_t> za, zb;  // some product of the step is zero
  // With zero_exp at or below -126 the zero-term rule is emax = max(emax, zero_exp) in every lane: a zero
  // accumulator applies it anyway, and a nonzero one has put emax at -126 or above already. No flags.
  const bool zero_floor = g.track_zero && g.zero_exp <= -126;
  if (g.track_zero && !zero_floor) StepZeroFlags(g.ea, g.eb, g.zero_code, step, par, za, zb);
  const Buf<float> pa = PackRows(g.a, R, par), pb = PackCols(g.b, nr, par);
#if QMX_AVX512
  // FP16 products: per (row, step) and (step, column) the top nominal exponent of a nonzero element
  // (kNoExp: none), and both operands scaled by it and packed as FP16 pairs of K.
  const Fp16Plan f16 = N == 16 ? Fp16PlanFor(g) : Fp16Plan{};
  constexpr int32_t kNoExp = -1000;
  const size_t kpairs = (g.k + 1) / 2;
  Buf<int32_t> ptop_a, ptop_b;
  Buf<uint32_t> pa16, pb16;
  if (f16.ok) {
    std::vector<int32_t> top_a(g.m * nsteps, kNoExp), top_b(nsteps * g.n, kNoExp);
#pragma omp parallel for schedule(static) if (par)
    for (long i = 0; i < static_cast<long>(g.m); ++i)
      for (size_t si = 0; si < nsteps; ++si) {
        int32_t t = kNoExp;
        for (size_t kk = si * step; kk < std::min(g.k, (si + 1) * step); ++kk) {
          const int32_t e = g.ea.table[g.ea.codes[i * g.k + kk]];
          if (e != g.zero_code) t = std::max(t, e);
        }
        top_a[i * nsteps + si] = t;
      }
#pragma omp parallel for schedule(static) if (par)
    for (long si = 0; si < static_cast<long>(nsteps); ++si)
      for (size_t kk = si * step; kk < std::min(g.k, (si + 1) * step); ++kk)
        for (size_t j = 0; j < g.n; ++j) {
          const int32_t e = g.eb.table[g.eb.codes[kk * g.n + j]];
          int32_t& t = top_b[si * g.n + j];
          if (e != g.zero_code) t = std::max(t, e);
        }
    // Each code's FP16 bits scaled by 2^(shift - top), per top exponent of the format: a table lookup per element.
    const auto half_table = [&](const CodeMatrix<float>& v, const CodeMatrix<int32_t>& e, int shift, int32_t& top0) {
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
    };
    int32_t top0_a = 0, top0_b = 0;
    const std::vector<uint16_t> ha = half_table(g.a, g.ea, f16.ca, top0_a), hb = half_table(g.b, g.eb, 13 - f16.ca, top0_b);
    // (a step whose elements are all zero has top kNoExp: its codes give 0)
    const auto half = [](const std::vector<uint16_t>& t, int32_t top0, int32_t top, uint8_t code) -> uint32_t {
      return top == kNoExp ? 0u : t[static_cast<size_t>(top - top0) * 256 + code];
    };
    pa16 = PanelRows<uint32_t>(g.m, kpairs, R, par, [&](size_t row, uint32_t* d) {
      const uint8_t* codes = g.a.codes + row * g.k;
      for (size_t si = 0; si < nsteps; ++si) {  // steps are even: no pair straddles two
        const int32_t top = top_a[row * nsteps + si];
        for (size_t kk = si * step; kk < std::min(g.k, (si + 1) * step); kk += 2) {
          const uint32_t lo = half(ha, top0_a, top, codes[kk]);
          d[kk / 2 * R] = kk + 1 < g.k ? lo | half(ha, top0_a, top, codes[kk + 1]) << 16 : lo;
        }
      }
    });
    pb16 = PanelCols<uint32_t>(kpairs, g.n, nr, par, [&](size_t kp, size_t c0, size_t valid, uint32_t* d) {
      std::fill(d, d + valid, 0u);
      for (size_t kk = 2 * kp, t = 0; t < 2 && kk < g.k; ++kk, ++t) {
        const uint8_t* codes = g.b.codes + kk * g.n + c0;
        const int32_t* top = top_b.data() + (kk / step) * g.n + c0;
        for (size_t j = 0; j < valid; ++j) d[j] |= half(hb, top0_b, top[j], codes[j]) << (16 * t);
      }
    });
    ptop_a = PackRows(top_a.data(), g.m, nsteps, R);
    ptop_b = PackCols(top_b.data(), nsteps, g.n, nr);
  }
  // FP16 bits of 2^G, twice per int32 lane, for G = -16 + i (i < 32): 2^-15 is FP16's subnormal 0x0200;
  // below -15 every term is under 1/2 (a' b' < 2^15) and truncates and rounds to 0: the power is 0.
  alignas(64) uint32_t pow2[32];
  for (int i = 0; i < 32; ++i) {
    const int gexp = i - 16;
    const uint32_t half_bits = gexp >= -14 ? static_cast<uint32_t>(gexp + 15) << 10 : gexp == -15 ? 0x0200u : 0u;
    pow2[i] = half_bits | half_bits << 16;
  }
  const __m512i pow2_lo = _mm512_load_si512(pow2), pow2_hi = _mm512_load_si512(pow2 + 16);
#endif
  const Buf<int8_t> pea = PackRowsExp8Pairs(g.ea, R, g.zero_code, par), peb = PackColsExp8Twice(g.eb, nr, g.zero_code, par);
  Buf<int32_t> pza, pzb;
  if (!za.empty()) pza = PackRows(za.data(), g.m, nsteps, R), pzb = PackCols(zb.data(), nsteps, g.n, nr);
  const size_t nb = g.sa ? (g.k + g.kb - 1) / g.kb : 0;
  Buf<float> psa, psb;
  if (g.sa) {
    psa = PackRows(g.sa, g.m, nb, R);
    psb = PackCols(g.sb, nb, g.n, nr);
  }
  const CTiles tiles{c, g.m, g.n, R, nr};
  const VI zero_exp = hn::Set(di, g.zero_exp), fbits = hn::Set(di, g.frac_bits);
  const VI keep = hn::Set(di, static_cast<int32_t>(~((1u << (24 - g.out_bits)) - 1)));  // sign, exponent, out_bits - 1

#if QMX_AVX512
  // Steps that took the FP16 products and steps that declined them, per thread (a line apart), for
  // Fp16StepCounts.
  std::vector<uint64_t> f16_count(f16.ok ? static_cast<size_t>(omp_get_max_threads()) * 16 : 0, 0);
#endif
  Drive(mp, np, g.k, kc, g.parallel, [&](size_t p, size_t q, size_t k0c, size_t len) {
    tiles.With(p, q, [&](float* ct, size_t ldc) {
#if QMX_AVX512
    uint64_t* counts = f16.ok ? f16_count.data() + static_cast<size_t>(omp_get_thread_num()) * 16 : nullptr;
#endif
    VF acc[R][2];
    hn::Mask<decltype(df)> badm[R][2];  // lanes whose accumulation left the finite range
    LoadTile<R>(df, ct, ldc, acc, badm);
    for (size_t w0 = k0c; w0 < k0c + len; w0 += window) {
      const size_t w1 = std::min(k0c + len, w0 + window);
      VF part[R][2];
      for (size_t r = 0; r < R; ++r)
        for (size_t h = 0; h < 2; ++h) part[r][h] = g.promote ? hn::Zero(df) : acc[r][h];
      for (size_t s0 = w0; s0 < w1; s0 += step) {
        const size_t s1 = std::min(w1, s0 + step), si = s0 / step;
        VI emax[R][2], ec[R][2];
        hn::Mask<decltype(di)> pzero[R][2];
        for (size_t r = 0; r < R; ++r)
          for (size_t h = 0; h < 2; ++h) {
            ec[r][h] = AccExp(df, part[r][h], g.zero_code, pzero[r][h]);
            emax[r][h] = ec[r][h];
          }
        VI emax_p[R][2];
        MaxProductExps<R>(di, pea.get() + (p * g.k + s0) * 2 * R, peb.get() + (q * g.k + s0) * 2 * nr, s1 - s0, emax_p);
        for (size_t r = 0; r < R; ++r)
          for (size_t h = 0; h < 2; ++h) emax[r][h] = hn::Max(emax[r][h], emax_p[r][h]);
        VI sum[R][2];  // in units of 2^(emax - F), below 2^24 (the caller's bound)
        const int32_t* zbp = pzb ? pzb.get() + (q * nsteps + si) * nr : nullptr;
        for (size_t r = 0; r < R; ++r)
          for (size_t h = 0; h < 2; ++h) {
            if (zero_floor) {
              emax[r][h] = hn::Max(emax[r][h], zero_exp);
            } else if (g.track_zero) {
              const VI z = hn::Or(hn::Set(di, pza[(p * nsteps + si) * R + r]), hn::LoadU(di, zbp + h * N));
              const auto m = hn::Or(hn::MaskFromVec(z), pzero[r][h]);
              emax[r][h] = hn::IfThenElse(m, hn::Max(emax[r][h], zero_exp), emax[r][h]);
            }
            // The accumulator's significand scales by 2^(ec - emax + F).
            sum[r][h] = AccTermI32<kTermRne>(df, part[r][h], ec[r][h], emax[r][h], fbits);
          }
        bool fp16_done = false;
#if QMX_AVX512
        if (f16.ok) {
          // G = F - 13 + EA + EB - emax per output (none where the step has no nonzero product): FP16
          // products where every G <= gmax, the int32 sums through memory.
          alignas(64) uint32_t gbits[R * 2 * 16];
          alignas(64) int32_t sums[R * 2 * 16];
          const int32_t* tb = ptop_b.get() + (q * nsteps + si) * nr;
          bool fits = true;
          for (size_t r = 0; r < R; ++r)
            for (size_t h = 0; h < 2; ++h) {
              const VI gexp = hn::IfThenElse(hn::Eq(emax_p[r][h], hn::Set(di, kNoProduct)), hn::Set(di, 2 * kNoExp),
                                             hn::Sub(hn::Add(hn::Set(di, ptop_a[(p * nsteps + si) * R + r] + g.frac_bits - 13),
                                                             hn::LoadU(di, tb + h * N)),
                                                     emax[r][h]));
              fits = fits && hn::AllFalse(di, hn::Gt(gexp, hn::Set(di, f16.gmax)));
              const VI idx = hn::Min(hn::Max(hn::Add(gexp, hn::Set(di, 16)), hn::Zero(di)), hn::Set(di, 31));
              hn::Store(VI{_mm512_permutex2var_epi32(pow2_lo, idx.raw, pow2_hi)}, di,
                        reinterpret_cast<int32_t*>(gbits) + (2 * r + h) * N);
              hn::Store(sum[r][h], di, sums + (2 * r + h) * N);
            }
          if (fits) {
            AddTermsF16<kTermRne>(pa16.get() + (p * kpairs + s0 / 2) * R, pb16.get() + (q * kpairs + s0 / 2) * nr,
                                  (s1 - s0 + 1) / 2, gbits, sums);
            for (size_t r = 0; r < R; ++r)
              for (size_t h = 0; h < 2; ++h) sum[r][h] = hn::Load(di, sums + (2 * r + h) * N);
            fp16_done = true;
          }
          ++counts[fits ? 0 : 1];
        }
#endif
        if (!fp16_done) {
          // Products scale by 2^(F - emax) (clamped: out of range only when every product is zero or too
          // small to leave a bit).
          VF g2[R][2];
          for (size_t r = 0; r < R; ++r)
            for (size_t h = 0; h < 2; ++h) g2[r][h] = Pow2OrZero(df, hn::Sub(fbits, emax[r][h]));
          AddTermsI32<kTermRne, R>(df, pa.get() + (p * g.k + s0) * R, pb.get() + (q * g.k + s0) * nr, 0, s1 - s0, g2, sum);
        }
        for (size_t r = 0; r < R; ++r)
          for (size_t h = 0; h < 2; ++h) {
            const VF s = hn::ConvertTo(df, sum[r][h]);  // exact: below 2^24
            const VI unit = hn::Sub(emax[r][h], fbits);
            hn::Mask<decltype(df)> ok = hn::FirstN(df, 0);
            // Toward zero, a normal result: clear the bits below out_bits, then scale.
            if (!kOutRne) part[r][h] = ScaleStepSum(df, hn::BitCast(df, hn::And(hn::BitCast(di, s), keep)), unit, ok);
            if (!hn::AllTrue(df, ok)) {  // (ok lanes are normal numbers: only the general rounding can overflow)
              part[r][h] = FusedOutV<kOutRne>(df, s, unit, g.out_bits);
              badm[r][h] = hn::Or(badm[r][h], hn::Not(hn::IsFinite(part[r][h])));
            }
          }
      }
      for (size_t r = 0; r < R; ++r)
        for (size_t h = 0; h < 2; ++h) {
          if (!g.promote) {
            acc[r][h] = part[r][h];
          } else if (g.sa) {
            const size_t blk = w0 / g.kb;
            const VF sa = hn::Set(df, psa[(p * nb + blk) * R + r]);
            const VF sb = hn::LoadU(df, psb.get() + (q * nb + blk) * nr + h * N);
            acc[r][h] = g.separate ? hn::MulAdd(hn::Mul(part[r][h], sa), sb, acc[r][h])
                                   : hn::MulAdd(part[r][h], hn::Mul(sa, sb), acc[r][h]);
          } else {
            acc[r][h] = hn::Add(acc[r][h], part[r][h]);
          }
          badm[r][h] = hn::Or(badm[r][h], hn::Not(hn::IsFinite(acc[r][h])));
        }
    }
    StoreTile<R>(df, acc, badm, ct, ldc);
    });
  });
#if QMX_AVX512
  uint64_t taken = 0, declined = 0;
  for (size_t t = 0; t < f16_count.size(); t += 16) taken += f16_count[t], declined += f16_count[t + 1];
  if (taken + declined > 0) CountFp16Steps(taken, declined);
#endif
  return true;
}

bool GemmFusedF32T(const FusedGemmArgs& g, float* c) {
  if (g.rne_terms) return g.rne_out ? GemmFusedF32Impl<true, true>(g, c) : GemmFusedF32Impl<true, false>(g, c);
  return g.rne_out ? GemmFusedF32Impl<false, true>(g, c) : GemmFusedF32Impl<false, false>(g, c);
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
