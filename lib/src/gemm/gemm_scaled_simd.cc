// gemm_scaled_simd.cc: the Highway kernels of the fused models whose block scales enter each product's
// exponent (MMA-Sim's T-FDPA with UE8M0 scales in the products, group 1: blackwell-mxf8f6f4; see
// gemm_simd.h), compiled for every target and chosen at run time. For FP8/FP6/FP4 elements the FP32
// kernel: each product of unscaled elements times 2^(F - emax + xa + xb) becomes its term's int32 count
// by one conversion, truncated exactly as the reference truncates it. Otherwise the FP64 kernel: the
// operands packed times their block scales as doubles; where bounds on the step's exponents prove that
// no term is truncated, the step's result is the exact FP64 sum (FMA in K order) rounded once; elsewhere
// the exact step aligns, truncates and sums the terms as the reference does. Packing and loop nest:
// gemm_pack-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gemm/gemm_scaled_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
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

template <bool kTermRne, bool kOutRne>
bool GemmScaledImpl(const ScaledFusedArgs& g, float* c) {
  const bool par = g.parallel;
  const hn::ScalableTag<float> df;
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dh;     // FP32 lanes beside FP64 lanes
  const hn::Rebind<int32_t, decltype(dd)> dih;  // int32 lanes beside FP64 lanes
  const hn::RebindToSigned<decltype(dd)> di64;
  using VD = hn::Vec<decltype(dd)>;
  constexpr size_t R = kMr;
  constexpr size_t kV = 4;  // FP64 vectors per row of a tile: nr = 2 FP32 vectors of columns
  const size_t N = hn::Lanes(df), H = hn::Lanes(dd), nr = 2 * N;
  if (kV * H != nr) return false;
  const size_t step = static_cast<size_t>(g.step);
  const size_t kc = ChunkFor(step);
  const size_t mp = (g.m + R - 1) / R, np = (g.n + nr - 1) / nr;
  const size_t nb = (g.k + g.kb - 1) / g.kb, ns = (g.k + step - 1) / step;
  constexpr int32_t kNone = 100000;
  // Per (row, step) and (step, column): the largest and smallest nominal exponent of a nonzero element,
  // block scale included (-kNone / kNone when there is none), and whether some element is zero.
  std::vector<int32_t> hia(g.m * ns, -kNone), loa(g.m * ns, kNone), za(g.m * ns, 0);
  std::vector<int32_t> hib(ns * g.n, -kNone), lob(ns * g.n, kNone), zb(ns * g.n, 0);
#pragma omp parallel for schedule(static) if (par)
  for (long i = 0; i < static_cast<long>(g.m); ++i) {
    const uint8_t* row = g.ea.codes + i * g.k;
    for (size_t si = 0; si < ns; ++si) {
      const size_t s0 = si * step, s1 = std::min(g.k, s0 + step);
      const int32_t x = g.xa[i * nb + s0 / g.kb];
      int32_t hi = -kNone, lo = kNone, z = 0;
      for (size_t kk = s0; kk < s1; ++kk) {
        const int32_t e = g.ea.table[row[kk]];
        if (e == g.zero_code) z = -1;
        else hi = std::max(hi, e + x), lo = std::min(lo, e + x);
      }
      hia[i * ns + si] = hi, loa[i * ns + si] = lo, za[i * ns + si] = z;
    }
  }
#pragma omp parallel for schedule(static) if (par)
  for (long si = 0; si < static_cast<long>(ns); ++si) {
    const size_t s0 = static_cast<size_t>(si) * step, s1 = std::min(g.k, s0 + step);
    int32_t* hi = hib.data() + si * g.n;
    int32_t* lo = lob.data() + si * g.n;
    int32_t* z = zb.data() + si * g.n;
    const int32_t* x = g.xb + (s0 / g.kb) * g.n;
    for (size_t kk = s0; kk < s1; ++kk) {
      const uint8_t* codes = g.eb.codes + kk * g.n;
      for (size_t j = 0; j < g.n; ++j) {
        const int32_t e = g.eb.table[codes[j]];
        const bool zero = e == g.zero_code;
        z[j] |= zero ? -1 : 0;
        hi[j] = zero ? hi[j] : std::max(hi[j], e + x[j]);
        lo[j] = zero ? lo[j] : std::min(lo[j], e + x[j]);
      }
    }
  }
  // The operands times their block scales, exact in FP64.
  const Buf<double> pa = PanelRows<double>(g.m, g.k, R, par, [&](size_t row, double* d) {
    const uint8_t* codes = g.a.codes + row * g.k;
    for (size_t c0 = 0, b = 0; c0 < g.k; c0 += g.kb, ++b) {
      const double s = std::ldexp(1.0, g.xa[row * nb + b]);
      for (size_t cc = c0; cc < std::min(g.k, c0 + g.kb); ++cc) d[cc * R] = g.a.table[codes[cc]] * s;
    }
  });
  const Buf<double> pb = PanelCols<double>(g.k, g.n, nr, par, [&](size_t r, size_t c0, size_t valid, double* d) {
    const uint8_t* codes = g.b.codes + r * g.n + c0;
    const int32_t* x = g.xb + (r / g.kb) * g.n + c0;
    for (size_t j = 0; j < valid; ++j) d[j] = g.b.table[codes[j]] * std::ldexp(1.0, x[j]);
  });
  const Buf<int32_t> pea = PackRows(g.ea, R, par), peb = PackCols(g.eb, nr, par);
  const Buf<int32_t> pxa = PackRows(g.xa, g.m, nb, R), pxb = PackCols(g.xb, nb, g.n, nr);
  const Buf<int32_t> phia = PackRows(hia.data(), g.m, ns, R), ploa = PackRows(loa.data(), g.m, ns, R);
  const Buf<int32_t> pza = PackRows(za.data(), g.m, ns, R);
  const Buf<int32_t> phib = PackCols(hib.data(), ns, g.n, nr), plob = PackCols(lob.data(), ns, g.n, nr);
  const Buf<int32_t> pzb = PackCols(zb.data(), ns, g.n, nr);
  const CTiles tiles{c, g.m, g.n, R, nr};
  const auto zero_exp = hn::Set(dih, g.zero_exp);
  const auto exp_mask = hn::Set(dih, 0xFF), bias = hn::Set(dih, 127), emin = hn::Set(dih, -126);
  const auto fbits = hn::Set(di64, g.frac_bits);
  const VD nan = hn::Set(dd, std::numeric_limits<double>::quiet_NaN());
  const bool whole_steps = g.out_bits == 24;

  Drive(mp, np, g.k, kc, g.parallel, [&](size_t p, size_t q, size_t k0c, size_t len) {
    tiles.With(p, q, [&](float* ct, size_t ldc) {
      for (size_t s0 = k0c; s0 < k0c + len; s0 += step) {
        const size_t s1 = std::min(k0c + len, s0 + step), si = s0 / step, blk = s0 / g.kb;
        const double* ap = pa.get() + (p * g.k + s0) * R;
        const double* bp = pb.get() + (q * g.k + s0) * nr;
        // Where no term is cut: emax is at most E = max(the accumulator's exponent (zero_exp for 0), the
        // largest product exponent hi_a + hi_b, zero_exp); every nonzero product's LSB is at least
        // 2^(lo_a + lo_b - man_bits), a nonzero accumulator's 2^(exponent - 23). Both at or above
        // 2^(E - F): every term is a multiple of 2^(emax - F), the step's sum is exact in FP64 (below
        // 2^(F + 8) units) and its result is that sum rounded once.
        bool fast[R][kV];
        bool any_fast = false;
        for (size_t r = 0; r < R; ++r) {
          const int32_t hi_a = phia[(p * ns + si) * R + r], lo_a = ploa[(p * ns + si) * R + r];
          for (size_t v = 0; v < kV; ++v) {
            fast[r][v] = false;
            if (!whole_steps) continue;
            const size_t o = v * H;
            const auto part = hn::LoadU(dh, ct + r * ldc + o);
            const auto field = hn::And(hn::ShiftRight<23>(hn::BitCast(dih, part)), exp_mask);
            const auto pzero = hn::RebindMask(dih, hn::Eq(part, hn::Zero(dh)));
            const auto ec = hn::IfThenElse(pzero, zero_exp, hn::Max(hn::Sub(field, bias), emin));
            const auto top = hn::Max(hn::Add(hn::Set(dih, hi_a), hn::LoadU(dih, phib.get() + (q * ns + si) * nr + o)), zero_exp);
            const auto e_ub = hn::Max(ec, top);
            const auto lo = hn::Sub(hn::Add(hn::Set(dih, lo_a), hn::LoadU(dih, plob.get() + (q * ns + si) * nr + o)),
                                    hn::Set(dih, g.man_bits));
            const auto cut = hn::Sub(e_ub, hn::Set(dih, g.frac_bits));
            const auto ok_acc = hn::Or(pzero, hn::Not(hn::Lt(hn::Sub(ec, hn::Set(dih, 23)), cut)));
            const auto ok = hn::And(ok_acc, hn::Not(hn::Lt(lo, cut)));
            fast[r][v] = hn::AllTrue(dih, ok);
            any_fast = any_fast || fast[r][v];
          }
        }
        if (any_fast) {
          VD acc[R][kV];
          for (size_t r = 0; r < R; ++r)
            for (size_t v = 0; v < kV; ++v) acc[r][v] = hn::PromoteTo(dd, hn::LoadU(dh, ct + r * ldc + v * H));
          for (size_t kk = 0; kk < s1 - s0; ++kk) {
            VD b[kV];
            for (size_t v = 0; v < kV; ++v) b[v] = hn::LoadU(dd, bp + kk * nr + v * H);
            HWY_UNROLL(6)
            for (size_t r = 0; r < R; ++r) {
              const VD x = hn::Set(dd, ap[kk * R + r]);
              for (size_t v = 0; v < kV; ++v) acc[r][v] = hn::MulAdd(x, b[v], acc[r][v]);
            }
          }
          for (size_t r = 0; r < R; ++r)
            for (size_t v = 0; v < kV; ++v) {
              if (!fast[r][v]) continue;
              if (!hn::AllTrue(dd, WholeInRange(dd, acc[r][v]))) {
                fast[r][v] = false;  // below or near FP32's range: the exact step rounds it
                continue;
              }
              hn::StoreU(WholeToF32<kOutRne>(dd, acc[r][v]), dh, ct + r * ldc + v * H);
            }
        }
        // The exact step for H outputs: the terms aligned at the largest nominal exponent, truncated (or
        // rounded) at 2^(emax - F) and summed in FP64; the sum rounded to out_bits.
        const int32_t* eap = pea.get() + (p * g.k + s0) * R;
        const int32_t* ebp = peb.get() + (q * g.k + s0) * nr;
        // One row's kV vectors at a time: independent chains for the emax maxima and the term sums.
        for (size_t r = 0; r < R; ++r) {
          bool any = false;
          for (size_t v = 0; v < kV; ++v) any = any || !fast[r][v];
          if (!any) continue;
          hn::Vec<decltype(dih)> emax[kV];
          hn::Vec<decltype(dh)> part[kV];
          hn::Vec<decltype(di64)> emax64[kV];
          VD f[kV], sum[kV];
          for (size_t v = 0; v < kV; ++v) {
            const size_t o = v * H;
            part[v] = hn::LoadU(dh, ct + r * ldc + o);
            const auto field = hn::And(hn::ShiftRight<23>(hn::BitCast(dih, part[v])), exp_mask);
            const auto pzero = hn::RebindMask(dih, hn::Eq(part[v], hn::Zero(dh)));
            emax[v] = hn::IfThenElse(pzero, zero_exp, hn::Max(hn::Sub(field, bias), emin));
          }
          hn::Vec<decltype(dih)> emax_p[kV];
          for (size_t v = 0; v < kV; ++v) emax_p[v] = hn::Set(dih, -2 * kNone);
          for (size_t kk = 0; kk < s1 - s0; ++kk) {
            const auto ea = hn::Set(dih, eap[kk * R + r]);
            for (size_t v = 0; v < kV; ++v) emax_p[v] = hn::Max(emax_p[v], hn::Add(ea, hn::LoadU(dih, ebp + kk * nr + v * H)));
          }
          const auto xa = hn::Set(dih, pxa[(p * nb + blk) * R + r]);
          const auto za_r = hn::Set(dih, pza[(p * ns + si) * R + r]);
          for (size_t v = 0; v < kV; ++v) {
            const size_t o = v * H;
            emax[v] = hn::Max(emax[v], hn::Add(emax_p[v], hn::Add(xa, hn::LoadU(dih, pxb.get() + (q * nb + blk) * nr + o))));
            const auto some_zero = hn::Or(za_r, hn::LoadU(dih, pzb.get() + (q * ns + si) * nr + o));
            emax[v] = hn::IfThenElse(hn::MaskFromVec(some_zero), hn::Max(emax[v], zero_exp), emax[v]);
            emax64[v] = hn::PromoteTo(di64, emax[v]);
            f[v] = Pow2D(dd, hn::Min(hn::Max(hn::Sub(fbits, emax64[v]), hn::Set(di64, -1022)), hn::Set(di64, 1023)));
            sum[v] = RoundIntD<kTermRne>(hn::Mul(hn::PromoteTo(dd, part[v]), f[v]));
          }
          for (size_t kk = 0; kk < s1 - s0; ++kk) {
            const VD x = hn::Set(dd, ap[kk * R + r]);
            for (size_t v = 0; v < kV; ++v) {
              const VD t = hn::Mul(x, hn::LoadU(dd, bp + kk * nr + v * H));
              sum[v] = hn::Add(sum[v], RoundIntD<kTermRne>(hn::Mul(t, f[v])));
            }
          }
          for (size_t v = 0; v < kV; ++v) {
            if (fast[r][v]) continue;
            const auto out = GroupOut<kOutRne>(dd, sum[v], hn::Sub(emax64[v], fbits), g.out_bits);
            // A part that left the finite range marks the output (NaN) for the reference; NaN stays NaN.
            const auto bad = hn::Or(hn::Not(hn::IsFinite(out)), hn::Not(hn::IsFinite(part[v])));
            hn::StoreU(hn::IfThenElse(bad, DemoteToF32(dh, nan), out), dh, ct + r * ldc + v * H);
          }
        }
      }
    });
  });
  return true;
}

// An int32 rounded to FP32's 24 bits toward zero or to nearest even: one conversion with its rounding
// mode on AVX-512, else through FP64 (exact), the bits below FP32's 24 cleared for toward zero.
template <bool kRne, class DF>
HWY_INLINE hn::Vec<DF> I32ToF32(DF df, hn::Vec<hn::RebindToSigned<DF>> v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (std::is_same_v<hn::Vec<DF>, hn::Vec512<float>>)
    return hn::Vec512<float>{kRne ? _mm512_cvtepi32_ps(v.raw) : _mm512_cvt_roundepi32_ps(v.raw, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)};
#endif
  const hn::Half<hn::RebindToSigned<DF>> dih;
  const hn::Rebind<double, decltype(dih)> dd;
  const hn::Rebind<float, decltype(dd)> dfh;
  auto lo = hn::PromoteTo(dd, hn::LowerHalf(dih, v)), hi = hn::PromoteTo(dd, hn::UpperHalf(dih, v));
  if (!kRne) lo = ClearBelowF32(dd, lo), hi = ClearBelowF32(dd, hi);
  return hn::Combine(df, DemoteToF32(dfh, hi), DemoteToF32(dfh, lo));
}

// The same steps in FP32 lanes, for element formats whose products are exact FP32 numbers (the
// dispatcher's check): each product a * b of the unscaled elements, times 2^(F - emax + xa + xb), is its
// term in units of 2^(emax - F), truncated (or rounded) to an int32 by one conversion. Two int32 sums
// of at most `chunk` terms each (the first with the accumulator's) stay within int32's range; their
// total, exact in int32 where it does not wrap and else in FP64, is rounded once. emax comes from
// MaxProductExps (int8 lanes).
template <bool kTermRne, bool kOutRne>
bool GemmScaledI32Impl(const ScaledFusedArgs& g, float* c, size_t chunk) {
  const bool par = g.parallel;
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Half<decltype(di)> dih;
  const hn::ScalableTag<double> dd;
  const hn::RebindToSigned<decltype(dd)> di64;
  using VF = hn::Vec<decltype(df)>;
  using VI = hn::Vec<decltype(di)>;
  using VD = hn::Vec<decltype(dd)>;
  constexpr size_t R = kFusedMr;
  const size_t N = hn::Lanes(df), nr = 2 * N;
  if (2 * hn::Lanes(dd) != N) return false;
  const size_t step = static_cast<size_t>(g.step);
  const size_t kc = ChunkFor(step);
  const size_t mp = (g.m + R - 1) / R, np = (g.n + nr - 1) / nr;
  const size_t nb = (g.k + g.kb - 1) / g.kb, ns = (g.k + step - 1) / step;
  std::vector<int32_t> za, zb;  // some product of the step is zero
  StepZeroFlags(g.ea, g.eb, g.zero_code, step, par, za, zb);
  const Buf<float> pa = PanelRows<float>(g.m, g.k, R, par, [&](size_t row, float* d) {
    const uint8_t* codes = g.a.codes + row * g.k;
    for (size_t cc = 0; cc < g.k; ++cc) d[cc * R] = static_cast<float>(g.a.table[codes[cc]]);
  });
  const Buf<float> pb = PanelCols<float>(g.k, g.n, nr, par, [&](size_t r, size_t c0, size_t valid, float* d) {
    const uint8_t* codes = g.b.codes + r * g.n + c0;
    for (size_t j = 0; j < valid; ++j) d[j] = static_cast<float>(g.b.table[codes[j]]);
  });
  const Buf<int8_t> pea = PackRowsExp8Pairs(g.ea, R, g.zero_code, par), peb = PackColsExp8Twice(g.eb, nr, g.zero_code, par);
  const Buf<int32_t> pxa = PackRows(g.xa, g.m, nb, R), pxb = PackCols(g.xb, nb, g.n, nr);
  const Buf<int32_t> pza = PackRows(za.data(), g.m, ns, R), pzb = PackCols(zb.data(), ns, g.n, nr);
  const CTiles tiles{c, g.m, g.n, R, nr};
  const VI zero_exp = hn::Set(di, g.zero_exp), fbits = hn::Set(di, g.frac_bits);

  Drive(mp, np, g.k, kc, par, [&](size_t p, size_t q, size_t k0c, size_t len) {
    tiles.With(p, q, [&](float* ct, size_t ldc) {
      VF part[R][2];
      hn::Mask<decltype(df)> bad[R][2];  // lanes whose accumulation left the finite range
      LoadTile<R>(df, ct, ldc, part, bad);
      for (size_t s0 = k0c; s0 < k0c + len; s0 += step) {
        const size_t s1 = std::min(k0c + len, s0 + step), si = s0 / step, blk = s0 / g.kb;
        VI emax[R][2], ec[R][2], emax_p[R][2], sum[R][2];
        VF gp[R][2];  // 2^(F - emax + xa + xb): a product of unscaled elements to its units
        MaxProductExps<R>(di, pea.get() + (p * g.k + s0) * 2 * R, peb.get() + (q * g.k + s0) * 2 * nr, s1 - s0, emax_p);
        const int32_t* xbp = pxb.get() + (q * nb + blk) * nr;
        const int32_t* zbp = pzb.get() + (q * ns + si) * nr;
        for (size_t r = 0; r < R; ++r)
          for (size_t h = 0; h < 2; ++h) {
            hn::Mask<decltype(di)> pzero;
            ec[r][h] = AccExp(df, part[r][h], g.zero_code, pzero);
            const VI xs = hn::Add(hn::Set(di, pxa[(p * nb + blk) * R + r]), hn::LoadU(di, xbp + h * N));
            // (kNoProduct + xs stays far below every exponent and zero_code)
            const VI z = hn::Or(hn::Set(di, pza[(p * ns + si) * R + r]), hn::LoadU(di, zbp + h * N));
            const VI e = hn::Max(ec[r][h], hn::Add(emax_p[r][h], xs));
            emax[r][h] = hn::IfThenElse(hn::Or(hn::MaskFromVec(z), pzero), hn::Max(e, zero_exp), e);
            // Out of FP32's range only where no product leaves a bit (below) or every product is zero.
            gp[r][h] = Pow2OrZero(df, hn::Add(hn::Sub(fbits, emax[r][h]), xs));
            sum[r][h] = AccTermI32<kTermRne>(df, part[r][h], ec[r][h], emax[r][h], fbits);
          }
        // The step's terms in two int32 sums: the accumulator's and the first `chunk` products', and the
        // rest's (the dispatcher's bound keeps each below 2^31).
        VI first[R][2];
        const float* ap = pa.get() + (p * g.k + s0) * R;
        const float* bp = pb.get() + (q * g.k + s0) * nr;
        for (size_t c0 = 0; c0 < 2 * chunk; c0 += chunk) {
          AddTermsI32<kTermRne, R>(df, ap, bp, std::min(s1 - s0, c0), std::min(s1 - s0, c0 + chunk), gp, sum);
          if (c0 == 0)
            for (size_t r = 0; r < R; ++r)
              for (size_t h = 0; h < 2; ++h) first[r][h] = sum[r][h], sum[r][h] = hn::Zero(di);
        }
        for (size_t r = 0; r < R; ++r)
          for (size_t h = 0; h < 2; ++h) {
            const VI unit = hn::Sub(emax[r][h], fbits);
            hn::Mask<decltype(df)> ok = hn::FirstN(df, 0);
            if (g.out_bits == 24) {
              // Where the int32 total does not wrap and the result is a normal number: the total rounded
              // to 24 bits (I32ToF32), then scaled by 2^unit (exact).
              const VI total = hn::Add(first[r][h], sum[r][h]);
              const auto wrapped = hn::Lt(hn::And(hn::Xor(first[r][h], total), hn::Xor(sum[r][h], total)), hn::Zero(di));
              part[r][h] = ScaleStepSum(df, I32ToF32<kOutRne>(df, total), unit, ok);
              ok = hn::AndNot(hn::RebindMask(df, wrapped), ok);
            }
            if (!hn::AllTrue(df, ok)) {  // the exact total in FP64, rounded by the fused rule
              VD t[2];
              t[0] = hn::Add(hn::PromoteTo(dd, hn::LowerHalf(dih, first[r][h])), hn::PromoteTo(dd, hn::LowerHalf(dih, sum[r][h])));
              t[1] = hn::Add(hn::PromoteTo(dd, hn::UpperHalf(dih, first[r][h])), hn::PromoteTo(dd, hn::UpperHalf(dih, sum[r][h])));
              const auto lo = GroupOut<kOutRne>(dd, t[0], hn::PromoteTo(di64, hn::LowerHalf(dih, unit)), g.out_bits);
              const auto hi = GroupOut<kOutRne>(dd, t[1], hn::PromoteTo(di64, hn::UpperHalf(dih, unit)), g.out_bits);
              part[r][h] = hn::Combine(df, hi, lo);
              bad[r][h] = hn::Or(bad[r][h], hn::Not(hn::IsFinite(part[r][h])));  // (ok lanes are finite)
            }
          }
      }
      StoreTile<R>(df, part, bad, ct, ldc);
    });
  });
  return true;
}

// Terms per int32 sum in GemmScaledI32Impl, or 0 where that kernel does not apply: every element value
// must be an FP32 number whose products with the other side's are exact, normal FP32 numbers, the
// exponents must fit MaxProductExps' int8 lanes, and half a step's terms (or all of them) plus the
// accumulator's must stay below 2^31 (a term is below (largest significand product) * 2^F, plus 1 for
// rounding; the accumulator's below 2^(F + 1) + 1).
size_t I32Chunk(const ScaledFusedArgs& g) {
  if (!FitsExp8(g.ea.table, g.zero_code) || !FitsExp8(g.eb.table, g.zero_code) || g.frac_bits > 28) return 0;
  double sig[2] = {0, 0}, lo[2] = {HUGE_VAL, HUGE_VAL}, hi[2] = {0, 0};
  int bits[2] = {0, 0};
  const CodeMatrix<double>* v[2] = {&g.a, &g.b};
  const CodeMatrix<int32_t>* e[2] = {&g.ea, &g.eb};
  for (int s = 0; s < 2; ++s)
    for (int code = 0; code < 256; ++code) {
      const double x = std::fabs(v[s]->table[code]);
      if (e[s]->table[code] == g.zero_code || x == 0 || !std::isfinite(x)) continue;
      if (static_cast<double>(static_cast<float>(x)) != x) return 0;
      bits[s] = std::max(bits[s], internal::SignificantBits(x));
      sig[s] = std::max(sig[s], std::ldexp(x, -e[s]->table[code]));  // significand at the nominal exponent
      lo[s] = std::min(lo[s], x), hi[s] = std::max(hi[s], x);
    }
  if (bits[0] + bits[1] > 24 || lo[0] * lo[1] < 0x1p-126 || hi[0] * hi[1] >= 0x1p127) return 0;
  const double term = sig[0] * sig[1] * std::ldexp(1.0, g.frac_bits) + 1, acc = std::ldexp(1.0, g.frac_bits + 1) + 1;
  const size_t step = static_cast<size_t>(g.step), chunk = (step + 1) / 2;  // two sums per step
  return step * term + acc < 0x1p31 ? step : chunk * term + acc < 0x1p31 ? chunk : 0;
}

bool GemmScaledT(const ScaledFusedArgs& g, float* c) {
  if (g.kb % g.step != 0 || g.out_bits > 24 || g.out_bits < 1) return false;
  if (const size_t chunk = I32Chunk(g)) {
    if (g.rne_terms)
      return g.rne_out ? GemmScaledI32Impl<true, true>(g, c, chunk) : GemmScaledI32Impl<true, false>(g, c, chunk);
    return g.rne_out ? GemmScaledI32Impl<false, true>(g, c, chunk) : GemmScaledI32Impl<false, false>(g, c, chunk);
  }
  if (g.rne_terms) return g.rne_out ? GemmScaledImpl<true, true>(g, c) : GemmScaledImpl<true, false>(g, c);
  return g.rne_out ? GemmScaledImpl<false, true>(g, c) : GemmScaledImpl<false, false>(g, c);
}

#else  // no FMA or a scalable target: the caller's portable path

bool GemmScaledT(const ScaledFusedArgs&, float*) { return false; }

#endif

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qmx::simd {
HWY_EXPORT(GemmScaledT);

bool GemmScaledF64(const ScaledFusedArgs& g, float* c) { return HWY_DYNAMIC_DISPATCH(GemmScaledT)(g, c); }
}  // namespace qmx::simd
#endif  // HWY_ONCE
