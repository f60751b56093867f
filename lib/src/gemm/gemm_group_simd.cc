// gemm_group_simd.cc: the Highway kernel of the fused models with exact groups (MMA-Sim's GST-FDPA:
// blackwell-mxf4nvf4, fused:...,group=G; see gemm_simd.h), compiled for every target and chosen at run
// time. The operands are packed times their block scales, so each group sum, an exact FP32 GEMM (the
// caller's bounds), is the group's term. Where a step provably truncates no term its result is the exact
// FP64 sum rounded once; elsewhere the terms are aligned, truncated and summed in FP64 as the reference
// does. Packing and loop nest: gemm_pack-inl.h.
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

// Whether no term of the step is truncated in any of N outputs (every term then is a multiple of
// 2^(emax - F), the step's sum is exact in FP64 and its result is that sum rounded once): emax is at most
// E = max(the accumulator's exponent, the step's largest scale exponents hi_a + hi_b, zero_exp); a group
// term's LSB is at least 2^(lo_a + lo_b - lsb_drop), a nonzero accumulator's at least 2^(exponent - 23).
template <class DF>
HWY_INLINE bool NoTruncation(DF df, const GroupGemmArgs& g, const float* at, int32_t hi_a, const int32_t* hi_b,
                             int32_t lo_a, const int32_t* lo_b) {
  const hn::RebindToSigned<DF> di;
  const auto part = hn::LoadU(df, at);
  const auto field = hn::And(hn::ShiftRight<23>(hn::BitCast(di, part)), hn::Set(di, 0xFF));
  const auto pzero = hn::RebindMask(di, hn::Eq(part, hn::Zero(df)));
  const auto ec = hn::IfThenElse(pzero, hn::Set(di, g.zero_exp), hn::Max(hn::Sub(field, hn::Set(di, 127)), hn::Set(di, -126)));
  const auto top = hn::Max(hn::Add(hn::Set(di, hi_a), hn::LoadU(di, hi_b)), hn::Set(di, g.zero_exp));
  const auto lo = hn::Add(hn::Set(di, lo_a), hn::LoadU(di, lo_b));
  const auto slack_terms = hn::Sub(hn::Set(di, g.frac_bits - g.lsb_drop), hn::Sub(hn::Max(ec, top), lo));
  const auto slack_acc = hn::IfThenZeroElse(pzero, hn::Sub(hn::Set(di, g.frac_bits - 23), hn::Sub(top, ec)));
  return hn::AllTrue(di, hn::Gt(hn::Min(slack_terms, slack_acc), hn::Set(di, -1)));
}

// H outputs of a step without truncation: the accumulator plus the group terms, exact in FP64, rounded
// once to FP32 (toward zero, or to nearest even) into at; false, writing nothing, where a result falls
// outside FP32's normal range (the exact path handles those).
template <bool kOutRne, class DD, class DH>
HWY_INLINE bool WholeStep(DD dd, DH dh, float* at, const float* const* terms, size_t groups) {
  auto sum = hn::PromoteTo(dd, hn::LoadU(dh, at));
  for (size_t gi = 0; gi < groups; ++gi) sum = hn::Add(sum, hn::PromoteTo(dd, hn::Load(dh, terms[gi])));
  if (!hn::AllTrue(dd, WholeInRange(dd, sum))) return false;
  hn::StoreU(WholeToF32<kOutRne>(dd, sum), dh, at);
  return true;
}

// WholeStep for one FP32 vector of outputs (two FP64 halves) of a four-group step (blackwell-mxf4nvf4's
// 64 = 4 x 16), terms[g * stride] the group terms: no loop over a run-time group count, the sum as a
// tree (exact in any order), both halves decided together.
template <bool kOutRne, class DF>
HWY_INLINE bool WholeStep4(DF df, float* at, const float* terms, size_t stride) {
  const hn::Repartition<double, DF> dd;
  const hn::Rebind<float, decltype(dd)> dh;
  using VD = hn::Vec<decltype(dd)>;
  const size_t H = hn::Lanes(dd);
  VD sum[2];
  for (size_t half = 0; half < 2; ++half) {
    const size_t o = half * H;
    const auto term = [&](size_t gi) { return hn::PromoteTo(dd, hn::Load(dh, terms + gi * stride + o)); };
    const VD c = hn::PromoteTo(dd, hn::LoadU(dh, at + o));
    sum[half] = hn::Add(hn::Add(c, term(0)), hn::Add(hn::Add(term(1), term(2)), term(3)));
  }
  if (!hn::AllTrue(dd, hn::And(WholeInRange(dd, sum[0]), WholeInRange(dd, sum[1])))) return false;
  // One store of the whole vector: the next step's 16-lane load of it is then forwarded from the store.
  hn::StoreU(hn::Combine(df, WholeToF32<kOutRne>(dd, sum[1]), WholeToF32<kOutRne>(dd, sum[0])), df, at);
  return true;
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
  const size_t kc = ChunkFor(step);
  const size_t mp = (g.m + R - 1) / R, np = (g.n + nr - 1) / nr;
  const size_t ng = (g.k + G - 1) / G, nb = (g.k + g.kb - 1) / g.kb, ns = (g.k + step - 1) / step;
  // Bit t of za[i][q] is set when a[i][q*G + t] is nonzero and its block scale too; zb likewise for B.
  // A group has a nonzero product exactly when the two masks meet.
  std::vector<int32_t> za(g.m * ng, 0), zb(ng * g.n, 0);
  bool nonzero[256];
  for (int v = 0; v < 256; ++v) nonzero[v] = g.a.table[v] != 0;
#pragma omp parallel for schedule(static) if (par)
  for (long i = 0; i < static_cast<long>(g.m); ++i) {
    const uint8_t* row = g.a.codes + i * g.k;
    for (size_t q0 = 0, gi = 0; q0 < g.k; q0 += G, ++gi) {
      if (g.sa[i * nb + q0 / g.kb] == 0) continue;
      int32_t mask = 0;
      for (size_t t = 0; t < std::min(G, g.k - q0); ++t) mask |= static_cast<int32_t>(nonzero[row[q0 + t]]) << t;
      za[i * ng + gi] = mask;
    }
  }
  bool nonzero_b[256];
  for (int v = 0; v < 256; ++v) nonzero_b[v] = g.b.table[v] != 0;
#pragma omp parallel for schedule(static) if (par)
  for (long gi = 0; gi < static_cast<long>(ng); ++gi) {
    int32_t* z = zb.data() + gi * g.n;
    const size_t q0 = static_cast<size_t>(gi) * G;
    const float* sbrow = g.sb + (q0 / g.kb) * g.n;
    for (size_t t = 0; t < std::min(G, g.k - q0); ++t) {
      const uint8_t* codes = g.b.codes + (q0 + t) * g.n;
      for (size_t j = 0; j < g.n; ++j) z[j] |= static_cast<int32_t>(nonzero_b[codes[j]]) << t;
    }
    for (size_t j = 0; j < g.n; ++j)
      if (sbrow[j] == 0) z[j] = 0;
  }
  // The largest and smallest scale exponent of each row (column) over each step's blocks.
  std::vector<int32_t> hia(g.m * ns), loa(g.m * ns), hib(ns * g.n), lob(ns * g.n);
  for (size_t si = 0; si < ns; ++si) {
    const size_t b0 = si * step / g.kb, b1 = std::min(nb, (std::min(g.k, (si + 1) * step) + g.kb - 1) / g.kb);
    for (size_t i = 0; i < g.m; ++i) {
      int32_t hi = -100000, lo = 100000;
      for (size_t blk = b0; blk < b1; ++blk) hi = std::max(hi, g.xa[i * nb + blk]), lo = std::min(lo, g.xa[i * nb + blk]);
      hia[i * ns + si] = hi;
      loa[i * ns + si] = lo;
    }
    for (size_t j = 0; j < g.n; ++j) {
      int32_t hi = -100000, lo = 100000;
      for (size_t blk = b0; blk < b1; ++blk) hi = std::max(hi, g.xb[blk * g.n + j]), lo = std::min(lo, g.xb[blk * g.n + j]);
      hib[si * g.n + j] = hi;
      lob[si * g.n + j] = lo;
    }
  }
  // The operands times their block scales (exact in FP32 by the caller's bounds): a group sum is then the
  // group's term P * sa * sb.
  CodeMatrix<float> sa = g.a, sb = g.b;
  sa.scales = g.sa;
  sa.block_rows = 1;
  sa.block_cols = g.kb;
  sa.scale_cols = nb;
  sb.scales = g.sb;
  sb.block_rows = g.kb;
  sb.block_cols = 1;
  sb.scale_cols = g.n;
  const Buf<float> pa = PackRows(sa, R, par), pb = PackCols(sb, nr, par);
  const Buf<int32_t> pza = PackRows(za.data(), g.m, ng, R), pzb = PackCols(zb.data(), ng, g.n, nr);
  const Buf<int32_t> pxa = PackRows(g.xa, g.m, nb, R), pxb = PackCols(g.xb, nb, g.n, nr);
  const Buf<int32_t> phia = PackRows(hia.data(), g.m, ns, R), ploa = PackRows(loa.data(), g.m, ns, R);
  const Buf<int32_t> phib = PackCols(hib.data(), ns, g.n, nr), plob = PackCols(lob.data(), ns, g.n, nr);
  const CTiles tiles{c, g.m, g.n, R, nr};
  const auto zero_exp = hn::Set(dih, g.zero_exp);
  const auto exp_mask = hn::Set(dih, 0xFF), bias = hn::Set(dih, 127), emin = hn::Set(dih, -126);
  const auto fbits = hn::Set(di64, g.frac_bits);
  const VD nan = hn::Set(dd, std::numeric_limits<double>::quiet_NaN());
  const bool whole_steps = g.out_bits == 24;

  Drive(mp, np, g.k, kc, g.parallel, [&](size_t p, size_t q, size_t k0c, size_t len) {
    tiles.With(p, q, [&](float* ct, size_t ldc) {
      for (size_t s0 = k0c; s0 < k0c + len; s0 += step) {
        const size_t s1 = std::min(k0c + len, s0 + step), si = s0 / step;
        const size_t groups = (s1 - s0 + G - 1) / G;
        // The step's group terms, exact in FP32, for the tile's R x nr outputs.
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
        const size_t g0 = s0 / G;
        // The exact step for H outputs: the terms aligned at the largest nominal exponent, truncated (or
        // rounded) at 2^(emax - F) and summed in FP64; the sum rounded to out_bits.
        const auto exact = [&](size_t r, size_t o) HWY_ATTR {
          float* at = ct + r * ldc + o;
          const auto part = hn::LoadU(dh, at);
          const auto field = hn::And(hn::ShiftRight<23>(hn::BitCast(dih, part)), exp_mask);
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
            const VD t = hn::PromoteTo(dd, hn::Load(dh, sums[gi][r] + o));
            sum = hn::Add(sum, RoundIntD<kTermRne>(hn::Mul(t, f)));
          }
          const auto out = GroupOut<kOutRne>(dd, sum, hn::Sub(emax64, fbits), g.out_bits);
          // A part that left the finite range marks the output (NaN) for the reference; NaN stays NaN.
          const auto bad = hn::Or(hn::Not(hn::IsFinite(out)), hn::Not(hn::IsFinite(part)));
          hn::StoreU(hn::IfThenElse(bad, DemoteToF32(dh, nan), out), dh, at);
        };
        for (size_t r = 0; r < R; ++r) {
          for (size_t v = 0; v < nr; v += N) {
            if (whole_steps && NoTruncation(df, g, ct + r * ldc + v, phia[(p * ns + si) * R + r],
                                            phib.get() + (q * ns + si) * nr + v, ploa[(p * ns + si) * R + r],
                                            plob.get() + (q * ns + si) * nr + v)) {
              // blackwell-mxf4nvf4's steps: 4 groups
              if (groups == 4 && WholeStep4<kOutRne>(df, ct + r * ldc + v, sums[0][r] + v, sizeof(sums[0]) / sizeof(float)))
                continue;
              for (size_t o = v; o < v + N; o += H) {
                const float* terms[kMaxGroupsPerStep];
                for (size_t gi = 0; gi < groups; ++gi) terms[gi] = sums[gi][r] + o;
                if (!WholeStep<kOutRne>(dd, dh, ct + r * ldc + o, terms, groups)) exact(r, o);
              }
            } else {
              for (size_t o = v; o < v + N; o += H) exact(r, o);
            }
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
