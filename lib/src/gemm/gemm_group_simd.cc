// gemm_group_simd.cc: the Highway kernel of the fused models with exact groups (MMA-Sim's GST-FDPA:
// blackwell-mxf4nvf4, fused:...,group=G; see gemm_simd.h), compiled for every target and chosen at run
// time. The group sums are an FP32 GEMM (exact: the caller bounds them below 2^24 quanta); each step's
// terms are aligned, truncated and summed in FP64 as the reference does. Packing: gemm_pack-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gemm/gemm_group_simd.cc"
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

// 2^e as a double, for e within double's normal exponent range (the caller's bounds keep it there).
template <class DD, class VI64>
HWY_INLINE hn::Vec<DD> Pow2D(DD dd, VI64 e) {
  const hn::RebindToSigned<DD> di;
  return hn::BitCast(dd, hn::ShiftLeft<52>(hn::Add(e, hn::Set(di, 1023))));
}

template <bool kRne, class V>
HWY_INLINE V RoundIntD(V v) {
  if constexpr (kRne) return hn::Round(v);
  else return hn::Trunc(v);
}

// S (an integer below 2^53 held in a double) * 2^unit rounded to `bits` (<= 24) significant bits, the
// exponent floored at -126, as FP32: +0 for S = 0, a signed zero when the kept bits vanish. Results of
// 2^128 and beyond come back as Inf (the caller marks them for the reference). FusedOut's rule.
template <bool kRne, class DD, class VI64>
HWY_INLINE hn::Vec<hn::Rebind<float, DD>> GroupOut(DD dd, hn::Vec<DD> s, VI64 unit, int bits) {
  const hn::RebindToSigned<DD> di;
  const hn::RebindToUnsigned<DD> du;
  const hn::Rebind<float, DD> df;
  const auto a = hn::Abs(s);
  const auto msb = hn::Sub(hn::BitCast(di, hn::ShiftRight<52>(hn::BitCast(du, a))), hn::Set(di, 1023));
  const auto e = hn::Max(hn::Add(msb, unit), hn::Set(di, -126));
  const auto q = hn::Sub(e, hn::Set(di, bits - 1));
  const auto kept = RoundIntD<kRne>(hn::Mul(a, Pow2D(dd, hn::Sub(unit, q))));
  const auto v = hn::Mul(kept, Pow2D(dd, q));
  const auto big = hn::Ge(v, hn::Set(dd, 0x1p128));
  const auto mag = hn::IfThenElse(big, hn::Set(dd, std::numeric_limits<double>::infinity()), v);
  return hn::DemoteTo(df, hn::IfThenZeroElse(hn::Eq(s, hn::Zero(dd)), hn::CopySign(mag, s)));
}

template <bool kTermRne, bool kOutRne>
bool GemmGroupImpl(const GroupGemmArgs& g, float* c) {
  const bool par = g.parallel;
  const hn::ScalableTag<float> df;
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dh;     // FP32 lanes beside FP64 lanes
  const hn::Rebind<int32_t, decltype(dd)> dih;  // int32 lanes beside FP64 lanes
  const hn::RebindToSigned<decltype(dd)> di64;
  using VF = hn::Vec<decltype(df)>;
  using VD = hn::Vec<decltype(dd)>;
  constexpr size_t R = kMr;
  const size_t N = hn::Lanes(df), H = hn::Lanes(dd), nr = 2 * N;
  const size_t G = static_cast<size_t>(g.group), step = static_cast<size_t>(g.step);
  const size_t gps = step / G;  // groups per step
  const size_t kc = ChunkFor(step);
  const size_t mp = (g.m + R - 1) / R, np = (g.n + nr - 1) / nr;
  const size_t ng = (g.k + G - 1) / G, nb = (g.k + g.kb - 1) / g.kb;
  // Bit t of za[i][q] is set when a[i][q*G + t] is nonzero and its block scale too; zb likewise for B.
  // A group has a nonzero product exactly when the two masks meet.
  std::vector<int32_t> za(g.m * ng, 0), zb(ng * g.n, 0);
  for (size_t i = 0; i < g.m; ++i)
    for (size_t kk = 0; kk < g.k; ++kk)
      if (g.a.At(i, kk) != 0 && g.sa[i * nb + kk / g.kb] != 0) za[i * ng + kk / G] |= int32_t(1) << (kk % G);
  for (size_t kk = 0; kk < g.k; ++kk)
    for (size_t j = 0; j < g.n; ++j)
      if (g.b.At(kk, j) != 0 && g.sb[(kk / g.kb) * g.n + j] != 0) zb[(kk / G) * g.n + j] |= int32_t(1) << (kk % G);
  const Buf<float> pa = PackRows(g.a, R, par), pb = PackCols(g.b, nr, par);
  const Buf<int32_t> pza = PackRows(za.data(), g.m, ng, R), pzb = PackCols(zb.data(), ng, g.n, nr);
  const Buf<float> psa = PackRows(g.sa, g.m, nb, R), psb = PackCols(g.sb, nb, g.n, nr);
  const Buf<int32_t> pxa = PackRows(g.xa, g.m, nb, R), pxb = PackCols(g.xb, nb, g.n, nr);
  const CTiles tiles{c, g.m, g.n, R, nr};
  const auto zero_exp = hn::Set(dih, g.zero_exp);
  const auto exp_mask = hn::Set(dih, 0xFF), bias = hn::Set(dih, 127), emin = hn::Set(dih, -126);
  const auto fbits = hn::Set(di64, g.frac_bits);
  const VD nan = hn::Set(dd, std::numeric_limits<double>::quiet_NaN());

  Drive(mp, np, g.k, kc, g.parallel, [&](size_t p, size_t q, size_t k0c, size_t len) {
    tiles.With(p, q, [&](float* ct, size_t ldc) {
      for (size_t s0 = k0c; s0 < k0c + len; s0 += step) {
        const size_t s1 = std::min(k0c + len, s0 + step);
        const size_t groups = (s1 - s0 + G - 1) / G;
        // The step's group sums, exact in FP32, for the tile's R x nr outputs.
        HWY_ALIGN float sums[kMaxGroupsPerStep][R][2 * HWY_MAX_BYTES / sizeof(float)];
        for (size_t gi = 0; gi < groups; ++gi) {
          const size_t q0 = s0 + gi * G;
          VF s[R][2];
          const float* ap = pa.get() + (p * g.k + q0) * R;
          const float* bp = pb.get() + (q * g.k + q0) * nr;
          for (size_t r = 0; r < R; ++r) s[r][0] = s[r][1] = hn::Zero(df);
          for (size_t kk = 0; kk < std::min(G, s1 - q0); ++kk) {
            const VF b0 = hn::LoadU(df, bp + kk * nr), b1 = hn::LoadU(df, bp + kk * nr + N);
            HWY_UNROLL(6)
            for (size_t r = 0; r < R; ++r) {
              const VF x = hn::Set(df, ap[kk * R + r]);
              s[r][0] = hn::MulAdd(x, b0, s[r][0]);
              s[r][1] = hn::MulAdd(x, b1, s[r][1]);
            }
          }
          for (size_t r = 0; r < R; ++r) {
            hn::Store(s[r][0], df, sums[gi][r]);
            hn::Store(s[r][1], df, sums[gi][r] + N);
          }
        }
        // Per output: the accumulator's term and one term per group, aligned at the largest nominal
        // exponent, truncated at 2^(emax - F) and summed exactly in FP64; the sum rounded to out_bits.
        const size_t g0 = s0 / G;
        for (size_t r = 0; r < R; ++r) {
          for (size_t o = 0; o < nr; o += H) {
            float* at = ct + r * ldc + o;
            const auto part = hn::LoadU(dh, at);
            const auto bits = hn::BitCast(dih, part);
            const auto field = hn::And(hn::ShiftRight<23>(bits), exp_mask);
            const auto pzero = hn::RebindMask(dih, hn::Eq(part, hn::Zero(dh)));
            auto emax = hn::IfThenElse(pzero, zero_exp, hn::Max(hn::Sub(field, bias), emin));
            for (size_t gi = 0; gi < groups; ++gi) {
              const size_t blk = (s0 + gi * G) / g.kb;
              const auto mask_a = hn::Set(dih, pza[(p * ng + g0 + gi) * R + r]);
              const auto mask_b = hn::LoadU(dih, pzb.get() + (q * ng + g0 + gi) * nr + o);
              const auto nz = hn::Ne(hn::And(mask_a, mask_b), hn::Zero(dih));
              const auto nom = hn::Add(hn::Set(dih, pxa[(p * nb + blk) * R + r]), hn::LoadU(dih, pxb.get() + (q * nb + blk) * nr + o));
              emax = hn::Max(emax, hn::IfThenElse(nz, nom, zero_exp));
            }
            const auto emax64 = hn::PromoteTo(di64, emax);
            const VD f = Pow2D(dd, hn::Sub(fbits, emax64));
            VD sum = RoundIntD<kTermRne>(hn::Mul(hn::PromoteTo(dd, part), f));
            for (size_t gi = 0; gi < groups; ++gi) {
              const size_t blk = (s0 + gi * G) / g.kb;
              const VD sa = hn::Set(dd, static_cast<double>(psa[(p * nb + blk) * R + r]));
              const VD sb = hn::PromoteTo(dd, hn::LoadU(dh, psb.get() + (q * nb + blk) * nr + o));
              const VD P = hn::PromoteTo(dd, hn::Load(dh, sums[gi][r] + o));
              sum = hn::Add(sum, RoundIntD<kTermRne>(hn::Mul(hn::Mul(P, hn::Mul(sa, sb)), f)));
            }
            const auto out = GroupOut<kOutRne>(dd, sum, hn::Sub(emax64, fbits), g.out_bits);
            // A part that left the finite range marks the output (NaN) for the reference; NaN stays NaN.
            const auto bad = hn::Or(hn::Not(hn::IsFinite(out)), hn::Not(hn::IsFinite(part)));
            hn::StoreU(hn::IfThenElse(bad, hn::DemoteTo(dh, nan), out), dh, at);
          }
        }
      }
    });
  });
  return true;
}

bool GemmGroupT(const GroupGemmArgs& g, float* c) {
  if (g.step % g.group != 0 || g.kb % g.group != 0 || g.group > 32 ||
      static_cast<size_t>(g.step / g.group) > kMaxGroupsPerStep)
    return false;
  if (g.rne_terms) return g.rne_out ? GemmGroupImpl<true, true>(g, c) : GemmGroupImpl<true, false>(g, c);
  return g.rne_out ? GemmGroupImpl<false, true>(g, c) : GemmGroupImpl<false, false>(g, c);
}

#else  // no FMA or a scalable target: the caller's portable path

bool GemmGroupT(const GroupGemmArgs&, float*) { return false; }

#endif

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qmx::simd {
HWY_EXPORT(GemmGroupT);

bool GemmGroupF32(const GroupGemmArgs& g, float* c) { return HWY_DYNAMIC_DISPATCH(GemmGroupT)(g, c); }
}  // namespace qmx::simd
#endif  // HWY_ONCE
