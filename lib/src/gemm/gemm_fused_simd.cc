// gemm_fused_simd.cc: the Highway kernel of the fused models (MMA-Sim's fused dot product with FP32 terms,
// see gemm_simd.h), compiled for every target and chosen at run time; packing and loop nest: gemm_pack-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gemm/gemm_fused_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <limits>
#include <vector>

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
  StepZeroFlags(g.ea, g.eb, g.zero_code, step, par, za, zb);
  const Buf<float> pa = PackRows(g.a, R, par), pb = PackCols(g.b, nr, par);
  const Buf<int8_t> pea = PackRowsExp8(g.ea, R, g.zero_code, par), peb = PackColsExp8Twice(g.eb, nr, g.zero_code, par);
  const Buf<int32_t> pza = PackRows(za.data(), g.m, nsteps, R), pzb = PackCols(zb.data(), nsteps, g.n, nr);
  const size_t nb = g.sa ? (g.k + g.kb - 1) / g.kb : 0;
  Buf<float> psa, psb;
  if (g.sa) {
    psa = PackRows(g.sa, g.m, nb, R);
    psb = PackCols(g.sb, nb, g.n, nr);
  }
  const CTiles tiles{c, g.m, g.n, R, nr};
  const VI zero_exp = hn::Set(di, g.zero_exp), fbits = hn::Set(di, g.frac_bits);
  const VI keep = hn::Set(di, static_cast<int32_t>(~((1u << (24 - g.out_bits)) - 1)));  // sign, exponent, out_bits - 1

  Drive(mp, np, g.k, kc, g.parallel, [&](size_t p, size_t q, size_t k0c, size_t len) {
    tiles.With(p, q, [&](float* ct, size_t ldc) {
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
        MaxProductExps<R>(di, pea.get() + (p * g.k + s0) * R, peb.get() + (q * g.k + s0) * 2 * nr, s1 - s0, emax_p);
        for (size_t r = 0; r < R; ++r)
          for (size_t h = 0; h < 2; ++h) emax[r][h] = hn::Max(emax[r][h], emax_p[r][h]);
        VF g2[R][2];
        VI sum[R][2];  // in units of 2^(emax - F), below 2^24 (the caller's bound)
        const int32_t* zbp = pzb.get() + (q * nsteps + si) * nr;
        for (size_t r = 0; r < R; ++r)
          for (size_t h = 0; h < 2; ++h) {
            if (g.track_zero) {
              const VI z = hn::Or(hn::Set(di, pza[(p * nsteps + si) * R + r]), hn::LoadU(di, zbp + h * N));
              const auto m = hn::Or(hn::MaskFromVec(z), pzero[r][h]);
              emax[r][h] = hn::IfThenElse(m, hn::Max(emax[r][h], zero_exp), emax[r][h]);
            }
            // Products scale by 2^(F - emax) (clamped: out of range only when every product is zero or
            // too small to leave a bit); the accumulator's significand by 2^(ec - emax + F).
            g2[r][h] = Pow2OrZero(df, hn::Sub(fbits, emax[r][h]));
            sum[r][h] = AccTermI32<kTermRne>(df, part[r][h], ec[r][h], emax[r][h], fbits);
          }
        AddTermsI32<kTermRne, R>(df, pa.get() + (p * g.k + s0) * R, pb.get() + (q * g.k + s0) * nr, 0, s1 - s0, g2, sum);
        for (size_t r = 0; r < R; ++r)
          for (size_t h = 0; h < 2; ++h) {
            const VF s = hn::ConvertTo(df, sum[r][h]);  // exact: below 2^24
            const VI unit = hn::Sub(emax[r][h], fbits);
            hn::Mask<decltype(df)> ok = hn::FirstN(df, 0);
            // Toward zero, a normal result: clear the bits below out_bits, then scale.
            if (!kOutRne) part[r][h] = ScaleStepSum(df, hn::BitCast(df, hn::And(hn::BitCast(di, s), keep)), unit, ok);
            if (!hn::AllTrue(df, ok)) part[r][h] = FusedOutV<kOutRne>(df, s, unit, g.out_bits);
            badm[r][h] = hn::Or(badm[r][h], hn::Not(hn::IsFinite(part[r][h])));
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

bool GemmFusedF32(const FusedGemmArgs& g, float* c) { return HWY_DYNAMIC_DISPATCH(GemmFusedF32T)(g, c); }
}  // namespace qmx::simd
#endif  // HWY_ONCE
