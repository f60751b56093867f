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
// hi and lo come from StepBoundPanels at A's index row and B's index col (BoundStepExps).
template <class DF>
HWY_INLINE bool NoTruncation(DF df, const GroupGemmArgs& g, const float* at, const StepBoundPanels& bounds, size_t row,
                             size_t col) {
  const hn::RebindToSigned<DF> di;
  const StepExpBounds<DF> x = BoundStepExps(df, at, g.zero_exp, bounds, row, col);
  const auto slack_terms = hn::Sub(hn::Set(di, g.frac_bits - g.lsb_drop), hn::Sub(hn::Max(x.ec, x.top), x.lo));
  // The step keeps frac_bits below the larger of the accumulator's and the terms' exponents; the
  // accumulator's 24 bits must all lie above that cut.
  const auto slack_acc =
      hn::IfThenZeroElse(x.pzero, hn::Sub(hn::Set(di, g.frac_bits - 23), hn::Sub(hn::Max(x.ec, x.top), x.ec)));
  return hn::AllTrue(di, hn::Gt(hn::Min(slack_terms, slack_acc), hn::Set(di, -1)));
}

// H outputs of a step without truncation: the accumulator plus the group terms, exact in FP64, rounded
// once to FP32 (toward zero, or to nearest even) into at; false, writing nothing, where a result falls
// outside FP32's normal range (the exact path handles those).
template <bool kOutRne, class DD, class DH>
HWY_INLINE bool WholeStep(DD dd, DH dh, float* at, const float* const* terms, size_t groups) {
  auto sum = hn::PromoteTo(dd, hn::LoadU(dh, at));
  for (size_t gi = 0; gi < groups; ++gi) sum = hn::Add(sum, hn::PromoteTo(dd, hn::Load(dh, terms[gi])));
  return StoreWholeStep<kOutRne>(dd, sum, at);
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

// Bit t of za[i][q] is set when a[i][q*G + t] is nonzero and its block scale too; zb likewise for B. A group
// has a nonzero product exactly when the two masks meet.
void GroupNonzeroMasks(const GroupGemmArgs& g, size_t ng, size_t nb, std::vector<int32_t>& za,
                       std::vector<int32_t>& zb) {
  const size_t G = static_cast<size_t>(g.group);
  za.assign(g.m * ng, 0);
  zb.assign(ng * g.n, 0);
  bool nonzero[256];
  for (int v = 0; v < 256; ++v) nonzero[v] = g.a.table[v] != 0;
#pragma omp parallel for schedule(static) if (g.parallel)
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
#pragma omp parallel for schedule(static) if (g.parallel)
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
}

// What the group kernel's tiles read (PackGroup): the operands times their block scales, the nonzero masks,
// the scale exponents and each step's largest and smallest scale exponents, in panels.
struct GroupPacks {
  size_t group = 0, step = 0, ng = 0, nb = 0, ns = 0;
  Buf<float> pa, pb;
  Buf<int32_t> pza, pzb, pxa, pxb;
  StepBoundPanels bounds;  // the largest and smallest scale exponent of each row (column) over each step
};

// The group kernel's packs, for B panels of nr columns.
GroupPacks PackGroup(const GroupGemmArgs& g, size_t nr) {
  constexpr size_t R = kMr;
  const bool par = g.parallel;
  GroupPacks pk;
  pk.group = static_cast<size_t>(g.group), pk.step = static_cast<size_t>(g.step);
  const size_t ng = pk.ng = (g.k + pk.group - 1) / pk.group, nb = pk.nb = (g.k + g.kb - 1) / g.kb;
  const size_t step = pk.step, ns = pk.ns = (g.k + step - 1) / step;
  std::vector<int32_t> za, zb;
  GroupNonzeroMasks(g, ng, nb, za, zb);
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
  pk.pa = PackRows(sa, R, par), pk.pb = PackCols(sb, nr, par);
  pk.pza = PackRows(za.data(), g.m, ng, R), pk.pzb = PackCols(zb.data(), ng, g.n, nr);
  pk.pxa = PackRows(g.xa, g.m, nb, R), pk.pxb = PackCols(g.xb, nb, g.n, nr);
  pk.bounds = PackStepBounds(hia, loa, g.m, hib, lob, g.n, ns, R, nr);
  return pk;
}

// One tile of a group kernel call (DF its FP32 lanes): zero_exp in int32 lanes beside FP64 lanes, F in int64.
template <class DF>
using GroupTile = KernelTile<GroupGemmArgs, GroupPacks, hn::Repartition<double, DF>>;
// A step's group terms for a tile's R x nr outputs: [group][row][column].
using GroupSums = float[kMaxGroupsPerStep][kMr][2 * HWY_MAX_BYTES / sizeof(float)];

// The step's group terms [s0, s1), each group's sum exact in FP32 (MulAddRows from zero).
template <class DF>
HWY_INLINE void GroupTerms(DF df, const GroupTile<DF>& t, size_t s0, size_t s1, GroupSums& sums) {
  const size_t N = hn::Lanes(df), nr = 2 * N, G = t.pk.group;
  for (size_t gi = 0; gi < (s1 - s0 + G - 1) / G; ++gi) {
    const size_t q0 = s0 + gi * G;
    hn::Vec<DF> s[kMr][2];
    for (size_t r = 0; r < kMr; ++r) s[r][0] = s[r][1] = hn::Zero(df);
    MulAddRows<kMr, 2>(df, t.pk.pa.get() + (t.p * t.g.k + q0) * kMr, t.pk.pb.get() + (t.q * t.g.k + q0) * nr,
                       std::min(G, s1 - q0), s);
    for (size_t r = 0; r < kMr; ++r) {
      hn::Store(s[r][0], df, sums[gi][r]);
      hn::Store(s[r][1], df, sums[gi][r] + N);
    }
  }
}

// The exact step for H outputs of row r at column o (at): the terms aligned at the largest nominal
// exponent, truncated (or rounded) at 2^(emax - F) and summed in FP64; the sum rounded to out_bits.
template <bool kTermRne, bool kOutRne, class DF>
HWY_INLINE void GroupExactStep(DF df, const GroupTile<DF>& t, size_t s0, size_t groups, const GroupSums& sums, size_t r,
                               size_t o, float* at) {
  using DD = hn::Repartition<double, DF>;
  const DD dd;
  const hn::Rebind<float, DD> dh;
  const hn::Rebind<int32_t, DD> dih;
  const hn::RebindToSigned<DD> di64;
  const GroupGemmArgs& g = t.g;
  const GroupPacks& pk = t.pk;
  const size_t nr = 2 * hn::Lanes(df), G = pk.group, g0 = s0 / G;
  const auto part = hn::LoadU(dh, at);
  hn::Mask<decltype(dih)> pzero;
  auto emax = AccExp(dh, part, g.zero_exp, pzero);
  for (size_t gi = 0; gi < groups; ++gi) {
    const size_t blk = (s0 + gi * G) / g.kb;
    const auto mask_a = hn::Set(dih, pk.pza[(t.p * pk.ng + g0 + gi) * kMr + r]);
    const auto mask_b = hn::LoadU(dih, pk.pzb.get() + (t.q * pk.ng + g0 + gi) * nr + o);
    const auto nz = hn::Ne(hn::And(mask_a, mask_b), hn::Zero(dih));
    const auto nom = hn::Add(hn::Set(dih, pk.pxa[(t.p * pk.nb + blk) * kMr + r]),
                             hn::LoadU(dih, pk.pxb.get() + (t.q * pk.nb + blk) * nr + o));
    emax = hn::Max(emax, hn::IfThenElse(nz, nom, t.zero_exp));
  }
  const auto emax64 = hn::PromoteTo(di64, emax);
  const hn::Vec<DD> f = Pow2D(dd, hn::Sub(t.fbits, emax64));
  hn::Vec<DD> sum = RoundIntD<kTermRne>(hn::Mul(hn::PromoteTo(dd, part), f));
  for (size_t gi = 0; gi < groups; ++gi) {
    const hn::Vec<DD> term = hn::PromoteTo(dd, hn::Load(dh, sums[gi][r] + o));
    sum = hn::Add(sum, RoundIntD<kTermRne>(hn::Mul(term, f)));
  }
  StoreExactStep<kOutRne>(dd, sum, hn::Sub(emax64, t.fbits), g.out_bits, part, at);
}

// One step's result for the FP32 vector of row r at column v: whole where no term is truncated
// (NoTruncation, then WholeStep4 or WholeStep per H outputs), else, or where a whole result leaves FP32's
// normal range, exact (GroupExactStep).
template <bool kTermRne, bool kOutRne, class DF>
HWY_INLINE void GroupStepVector(DF df, const GroupTile<DF>& t, size_t s0, size_t groups, const GroupSums& sums,
                                size_t r, size_t v, float* ct, size_t ldc) {
  using DD = hn::Repartition<double, DF>;
  const GroupPacks& pk = t.pk;
  const size_t N = hn::Lanes(df), H = hn::Lanes(DD()), nr = 2 * N, si = s0 / pk.step;
  float* at = ct + r * ldc + v;
  if (t.g.out_bits == 24 &&
      NoTruncation(df, t.g, at, pk.bounds, (t.p * pk.ns + si) * kMr + r, (t.q * pk.ns + si) * nr + v)) {
    // blackwell-mxf4nvf4's steps: 4 groups
    if (groups == 4 && WholeStep4<kOutRne>(df, at, sums[0][r] + v, sizeof(sums[0]) / sizeof(float))) return;
    for (size_t o = v; o < v + N; o += H) {
      const float* terms[kMaxGroupsPerStep];
      for (size_t gi = 0; gi < groups; ++gi) terms[gi] = sums[gi][r] + o;
      if (!WholeStep<kOutRne>(DD(), hn::Rebind<float, DD>(), ct + r * ldc + o, terms, groups))
        GroupExactStep<kTermRne, kOutRne>(df, t, s0, groups, sums, r, o, ct + r * ldc + o);
    }
  } else {
    for (size_t o = v; o < v + N; o += H)
      GroupExactStep<kTermRne, kOutRne>(df, t, s0, groups, sums, r, o, ct + r * ldc + o);
  }
}

// A tile's K chunk [k0c, k0c + len), step by step: the step's group terms (GroupTerms), then each output
// vector's result (GroupStepVector).
template <bool kTermRne, bool kOutRne, class DF>
HWY_INLINE void GroupChunk(DF df, const GroupTile<DF>& t, size_t k0c, size_t len, float* ct, size_t ldc) {
  const size_t N = hn::Lanes(df), nr = 2 * N, step = t.pk.step, G = t.pk.group;
  for (size_t s0 = k0c; s0 < k0c + len; s0 += step) {
    const size_t s1 = std::min(k0c + len, s0 + step), groups = (s1 - s0 + G - 1) / G;
    HWY_ALIGN GroupSums sums;
    GroupTerms(df, t, s0, s1, sums);
    for (size_t r = 0; r < kMr; ++r)
      for (size_t v = 0; v < nr; v += N) GroupStepVector<kTermRne, kOutRne>(df, t, s0, groups, sums, r, v, ct, ldc);
  }
}

// The group kernel: the packs, then each tile's K chunks (GroupChunk) on Drive's threads (ForEachTile).
template <bool kTermRne, bool kOutRne>
bool GemmGroupImpl(const GroupGemmArgs& g, float* c) {
  using DF = hn::ScalableTag<float>;
  using DD = hn::Repartition<double, DF>;
  const DF df;
  const size_t nr = 2 * hn::Lanes(df);
  const GroupPacks pk = PackGroup(g, nr);
  const auto run_chunk = [&](const GroupTile<DF>& t, size_t k0c, size_t len, float* ct, size_t ldc) {
    GroupChunk<kTermRne, kOutRne>(df, t, k0c, len, ct, ldc);
  };
  ForEachTile<kMr>(CallTile(DD(), g, pk), c, nr, ChunkFor(pk.step), run_chunk);
  return true;
}

bool GemmGroupT(const GroupGemmArgs& g, float* c) {
  if (g.step % g.group != 0 || g.kb % g.group != 0 || g.group > 32 ||
      static_cast<size_t>(g.step / g.group) > kMaxGroupsPerStep)
    return false;
  return DispatchRounding(g.rne_terms, g.rne_out, [&](auto term_rne, auto out_rne) {
    return GemmGroupImpl<decltype(term_rne)::value, decltype(out_rne)::value>(g, c);
  });
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
