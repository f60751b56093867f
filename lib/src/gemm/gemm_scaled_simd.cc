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

// ---- the FP64 kernel (GemmScaledImpl) --------------------------------------------------------------

constexpr size_t kV = 4;  // FP64 vectors per row of the FP64 kernel's tile: nr = 2 FP32 vectors of columns
constexpr int32_t kNone = 100000;

// Per (row, step) of A and (step, column) of B (ScaledStepBounds): the largest and smallest nominal exponent of
// a nonzero element, block scale included (-kNone / kNone when there is none), and whether some element is
// zero (-1).
struct StepBounds {
  std::vector<int32_t> hia, loa, za, hib, lob, zb;
};
StepBounds ScaledStepBounds(const ScaledFusedArgs& g, size_t step, size_t ns, size_t nb) {
  StepBounds s{std::vector<int32_t>(g.m * ns, -kNone), std::vector<int32_t>(g.m * ns, kNone),
               std::vector<int32_t>(g.m * ns, 0),      std::vector<int32_t>(ns * g.n, -kNone),
               std::vector<int32_t>(ns * g.n, kNone),  std::vector<int32_t>(ns * g.n, 0)};
#pragma omp parallel for schedule(static) if (g.parallel)
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
      s.hia[i * ns + si] = hi, s.loa[i * ns + si] = lo, s.za[i * ns + si] = z;
    }
  }
#pragma omp parallel for schedule(static) if (g.parallel)
  for (long si = 0; si < static_cast<long>(ns); ++si) {
    const size_t s0 = static_cast<size_t>(si) * step, s1 = std::min(g.k, s0 + step);
    int32_t* hi = s.hib.data() + si * g.n;
    int32_t* lo = s.lob.data() + si * g.n;
    int32_t* z = s.zb.data() + si * g.n;
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
  return s;
}

// What the FP64 kernel's tiles read (PackScaledF64): the operands times their block scales, exact in FP64,
// their nominal exponents, the block scales' exponents and the StepBounds, in panels.
struct ScaledF64Packs {
  size_t step = 0, nb = 0, ns = 0;
  Buf<double> pa, pb;
  Buf<int32_t> pea, peb, pxa, pxb;
  StepBoundPanels bounds;  // StepBounds' hi and lo
  Buf<int32_t> pza, pzb;   // and its zero flags
};

// The FP64 kernel's packs, for B panels of nr columns.
ScaledF64Packs PackScaledF64(const ScaledFusedArgs& g, size_t nr) {
  constexpr size_t R = kMr;
  const bool par = g.parallel;
  ScaledF64Packs pk;
  pk.step = static_cast<size_t>(g.step);
  pk.nb = (g.k + g.kb - 1) / g.kb;
  pk.ns = (g.k + pk.step - 1) / pk.step;
  const StepBounds s = ScaledStepBounds(g, pk.step, pk.ns, pk.nb);
  const size_t nb = pk.nb, ns = pk.ns;
  pk.pa = PanelRows<double>(g.m, g.k, R, par, [&](size_t row, double* d) {
    const uint8_t* codes = g.a.codes + row * g.k;
    for (size_t c0 = 0, b = 0; c0 < g.k; c0 += g.kb, ++b) {
      const double sc = std::ldexp(1.0, g.xa[row * nb + b]);
      for (size_t cc = c0; cc < std::min(g.k, c0 + g.kb); ++cc) d[cc * R] = g.a.table[codes[cc]] * sc;
    }
  });
  pk.pb = PanelCols<double>(g.k, g.n, nr, par, [&](size_t r, size_t c0, size_t valid, double* d) {
    const uint8_t* codes = g.b.codes + r * g.n + c0;
    const int32_t* x = g.xb + (r / g.kb) * g.n + c0;
    for (size_t j = 0; j < valid; ++j) d[j] = g.b.table[codes[j]] * std::ldexp(1.0, x[j]);
  });
  pk.pea = PackRows(g.ea, R, par), pk.peb = PackCols(g.eb, nr, par);
  pk.pxa = PackRows(g.xa, g.m, nb, R), pk.pxb = PackCols(g.xb, nb, g.n, nr);
  pk.bounds = PackStepBounds(s.hia, s.loa, g.m, s.hib, s.lob, g.n, ns, R, nr);
  pk.pza = PackRows(s.za.data(), g.m, ns, R), pk.pzb = PackCols(s.zb.data(), ns, g.n, nr);
  return pk;
}

// One tile of an FP64 kernel call (DD its FP64 lanes): zero_exp in int32 lanes beside them, F in int64 lanes.
template <class DD>
using ScaledF64Tile = KernelTile<ScaledFusedArgs, ScaledF64Packs, DD>;

// Whether no term of the step is cut in H outputs at `at`: emax is at most E = max(the accumulator's
// exponent (zero_exp for 0), the largest product exponent hi_a + hi_b, zero_exp); every nonzero product's
// LSB is at least 2^(lo_a + lo_b - man_bits), a nonzero accumulator's 2^(exponent - 23). Both at or above
// 2^(E - F): every term is a multiple of 2^(emax - F), the step's sum is exact in FP64 (below 2^(F + 8)
// units) and its result is that sum rounded once. hi and lo come from StepBoundPanels at A's index row and
// B's index col (BoundStepExps).
template <class DH>
HWY_INLINE bool NoTermCut(DH dh, const ScaledFusedArgs& g, const float* at, const StepBoundPanels& bounds, size_t row,
                          size_t col) {
  const hn::RebindToSigned<DH> di;
  const StepExpBounds<DH> x = BoundStepExps(dh, at, g.zero_exp, bounds, row, col);
  const auto lo = hn::Sub(x.lo, hn::Set(di, g.man_bits));
  const auto cut = hn::Sub(hn::Max(x.ec, x.top), hn::Set(di, g.frac_bits));
  const auto ok_acc = hn::Or(x.pzero, hn::Not(hn::Lt(hn::Sub(x.ec, hn::Set(di, 23)), cut)));
  return hn::AllTrue(di, hn::And(ok_acc, hn::Not(hn::Lt(lo, cut))));
}

// Which of the tile's R x kV output vectors take the step whole (NoTermCut; none unless the output keeps
// FP32's 24 bits); true where any does.
template <class DD>
HWY_INLINE bool WholeLanes(DD dd, const ScaledF64Tile<DD>& t, size_t si, const float* ct, size_t ldc,
                           bool (&fast)[kMr][kV]) {
  const ScaledF64Packs& pk = t.pk;
  const size_t H = hn::Lanes(dd), nr = kV * H;
  const bool whole_steps = t.g.out_bits == 24;
  bool any_fast = false;
  for (size_t r = 0; r < kMr; ++r)
    for (size_t v = 0; v < kV; ++v) {
      fast[r][v] = whole_steps && NoTermCut(hn::Rebind<float, DD>(), t.g, ct + r * ldc + v * H, pk.bounds,
                                            (t.p * pk.ns + si) * kMr + r, (t.q * pk.ns + si) * nr + v * H);
      any_fast = any_fast || fast[r][v];
    }
  return any_fast;
}

// The step whole for the `fast` output vectors: C plus the products, FMA in K order in FP64 (exact), rounded
// once (StoreWholeStep); a vector whose result falls outside FP32's normal range is left to the exact step
// (fast cleared).
template <bool kOutRne, class DD>
HWY_INLINE void ScaledWholeStep(DD dd, const ScaledF64Tile<DD>& t, size_t s0, size_t s1, float* ct, size_t ldc,
                                bool (&fast)[kMr][kV]) {
  const hn::Rebind<float, DD> dh;
  const size_t H = hn::Lanes(dd), nr = kV * H;
  hn::Vec<DD> acc[kMr][kV];
  for (size_t r = 0; r < kMr; ++r)
    for (size_t v = 0; v < kV; ++v) acc[r][v] = hn::PromoteTo(dd, hn::LoadU(dh, ct + r * ldc + v * H));
  MulAddRows<kMr, kV>(dd, t.pk.pa.get() + (t.p * t.g.k + s0) * kMr, t.pk.pb.get() + (t.q * t.g.k + s0) * nr, s1 - s0,
                      acc);
  for (size_t r = 0; r < kMr; ++r)
    for (size_t v = 0; v < kV; ++v)
      if (fast[r][v]) fast[r][v] = StoreWholeStep<kOutRne>(dd, acc[r][v], ct + r * ldc + v * H);
}

// The exact step for one row's output vectors that are not `fast`: the terms aligned at the largest nominal
// exponent, truncated (or rounded) at 2^(emax - F) and summed in FP64; the sum rounded to out_bits. The row's
// kV vectors at a time: independent chains for the emax maxima and the term sums.
template <bool kTermRne, bool kOutRne, class DD>
HWY_INLINE void ScaledExactRow(DD dd, const ScaledF64Tile<DD>& t, size_t s0, size_t s1, size_t r, float* row,
                               const bool (&fast)[kV]) {
  using VD = hn::Vec<DD>;
  const hn::Rebind<float, DD> dh;
  const hn::Rebind<int32_t, DD> dih;
  const hn::RebindToSigned<DD> di64;
  const ScaledFusedArgs& g = t.g;
  const ScaledF64Packs& pk = t.pk;
  const size_t H = hn::Lanes(dd), nr = kV * H, si = s0 / pk.step, blk = s0 / g.kb;
  const int32_t* eap = pk.pea.get() + (t.p * g.k + s0) * kMr;
  const int32_t* ebp = pk.peb.get() + (t.q * g.k + s0) * nr;
  hn::Vec<decltype(dih)> emax[kV], emax_p[kV];
  hn::Mask<decltype(dih)> pzero[kV];
  hn::Vec<decltype(dh)> part[kV];
  hn::Vec<decltype(di64)> emax64[kV];
  VD f[kV], sum[kV];
  for (size_t v = 0; v < kV; ++v) {
    part[v] = hn::LoadU(dh, row + v * H);
    emax[v] = AccExp(dh, part[v], g.zero_exp, pzero[v]);
    emax_p[v] = hn::Set(dih, -2 * kNone);
  }
  for (size_t kk = 0; kk < s1 - s0; ++kk) {
    const auto ea = hn::Set(dih, eap[kk * kMr + r]);
    for (size_t v = 0; v < kV; ++v) emax_p[v] = hn::Max(emax_p[v], hn::Add(ea, hn::LoadU(dih, ebp + kk * nr + v * H)));
  }
  const auto xa = hn::Set(dih, pk.pxa[(t.p * pk.nb + blk) * kMr + r]);
  for (size_t v = 0; v < kV; ++v) {
    const size_t o = v * H;
    emax[v] =
        hn::Max(emax[v], hn::Add(emax_p[v], hn::Add(xa, hn::LoadU(dih, pk.pxb.get() + (t.q * pk.nb + blk) * nr + o))));
    emax[v] = LiftZeroTerms(dih, emax[v], pk.pza[(t.p * pk.ns + si) * kMr + r],
                            pk.pzb.get() + (t.q * pk.ns + si) * nr + o, pzero[v], t.zero_exp);
    emax64[v] = hn::PromoteTo(di64, emax[v]);
    f[v] = Pow2D(dd, hn::Min(hn::Max(hn::Sub(t.fbits, emax64[v]), hn::Set(di64, -1022)), hn::Set(di64, 1023)));
    sum[v] = RoundIntD<kTermRne>(hn::Mul(hn::PromoteTo(dd, part[v]), f[v]));
  }
  const double* ap = pk.pa.get() + (t.p * g.k + s0) * kMr;
  const double* bp = pk.pb.get() + (t.q * g.k + s0) * nr;
  for (size_t kk = 0; kk < s1 - s0; ++kk) {
    const VD x = hn::Set(dd, ap[kk * kMr + r]);
    for (size_t v = 0; v < kV; ++v) {
      const VD term = hn::Mul(x, hn::LoadU(dd, bp + kk * nr + v * H));
      sum[v] = hn::Add(sum[v], RoundIntD<kTermRne>(hn::Mul(term, f[v])));
    }
  }
  for (size_t v = 0; v < kV; ++v)
    if (!fast[v]) StoreExactStep<kOutRne>(dd, sum[v], hn::Sub(emax64[v], t.fbits), g.out_bits, part[v], row + v * H);
}

// A tile's K chunk [k0c, k0c + len), step by step: the outputs that provably cut no term whole
// (ScaledWholeStep), the others exactly (ScaledExactRow).
template <bool kTermRne, bool kOutRne, class DD>
HWY_INLINE void ScaledF64Chunk(DD dd, const ScaledF64Tile<DD>& t, size_t k0c, size_t len, float* ct, size_t ldc) {
  const size_t step = t.pk.step;
  for (size_t s0 = k0c; s0 < k0c + len; s0 += step) {
    const size_t s1 = std::min(k0c + len, s0 + step);
    bool fast[kMr][kV];
    if (WholeLanes(dd, t, s0 / step, ct, ldc, fast)) ScaledWholeStep<kOutRne>(dd, t, s0, s1, ct, ldc, fast);
    for (size_t r = 0; r < kMr; ++r) {
      bool all_fast = true;
      for (size_t v = 0; v < kV; ++v) all_fast = all_fast && fast[r][v];
      if (!all_fast) ScaledExactRow<kTermRne, kOutRne>(dd, t, s0, s1, r, ct + r * ldc, fast[r]);
    }
  }
}

// The FP64 kernel: the packs, then each tile's K chunks (ScaledF64Chunk) on Drive's threads (ForEachTile).
template <bool kTermRne, bool kOutRne>
bool GemmScaledImpl(const ScaledFusedArgs& g, float* c) {
  using DD = hn::ScalableTag<double>;
  const DD dd;
  const size_t nr = kV * hn::Lanes(dd);
  if (nr != 2 * hn::Lanes(hn::ScalableTag<float>())) return false;
  const ScaledF64Packs pk = PackScaledF64(g, nr);
  const auto run_chunk = [&](const ScaledF64Tile<DD>& t, size_t k0c, size_t len, float* ct, size_t ldc) {
    ScaledF64Chunk<kTermRne, kOutRne>(dd, t, k0c, len, ct, ldc);
  };
  ForEachTile<kMr>(CallTile(dd, g, pk), c, nr, ChunkFor(pk.step), run_chunk);
  return true;
}

// ---- the FP32-lane kernel (GemmScaledI32Impl) ------------------------------------------------------
//
// The FP64 kernel's steps in FP32 lanes, for element formats whose products are exact FP32 numbers (the
// dispatcher's check): each product a * b of the unscaled elements, times 2^(F - emax + xa + xb), is its
// term in units of 2^(emax - F), truncated (or rounded) to an int32 by one conversion. Two int32 sums
// of at most `chunk` terms each (the first with the accumulator's) stay within int32's range; their
// total, exact in int32 where it does not wrap and else in FP64, is rounded once. emax comes from
// MaxProductExps (int8 lanes).

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

// What the FP32-lane kernel's tiles read (PackScaledI32): the unscaled elements in FP32, their int8
// exponents, the block scales' exponents and the per-step zero flags, in panels.
struct ScaledI32Packs {
  size_t step = 0, nb = 0, ns = 0, chunk = 0;
  // With zero_exp at or below -126 the zero-term rule is emax = max(emax, zero_exp) in every lane (as in
  // FusedPacks): no flags.
  bool zero_floor = false;
  Buf<float> pa, pb;
  Buf<int8_t> pea, peb;   // PackRowsExp8Pairs, PackColsExp8Twice
  Buf<int32_t> pxa, pxb;  // block scale exponents
  Buf<int32_t> pza, pzb;  // some product of the step is zero (StepZeroFlags), where the rule needs flags
};

// The FP32-lane kernel's packs, for B panels of nr columns and `chunk` terms per int32 sum.
ScaledI32Packs PackScaledI32(const ScaledFusedArgs& g, size_t nr, size_t chunk) {
  constexpr size_t R = kFusedMr;
  const bool par = g.parallel;
  ScaledI32Packs pk;
  pk.step = static_cast<size_t>(g.step);
  const size_t nb = pk.nb = (g.k + g.kb - 1) / g.kb, ns = pk.ns = (g.k + pk.step - 1) / pk.step;
  pk.chunk = chunk;
  pk.zero_floor = g.zero_exp <= -126;
  std::vector<int32_t> za, zb;
  if (!pk.zero_floor) StepZeroFlags(g.ea, g.eb, g.zero_code, pk.step, par, za, zb);
  pk.pa = PanelRows<float>(g.m, g.k, R, par, [&](size_t row, float* d) {
    const uint8_t* codes = g.a.codes + row * g.k;
    for (size_t cc = 0; cc < g.k; ++cc) d[cc * R] = static_cast<float>(g.a.table[codes[cc]]);
  });
  pk.pb = PanelCols<float>(g.k, g.n, nr, par, [&](size_t r, size_t c0, size_t valid, float* d) {
    const uint8_t* codes = g.b.codes + r * g.n + c0;
    for (size_t j = 0; j < valid; ++j) d[j] = static_cast<float>(g.b.table[codes[j]]);
  });
  pk.pea = PackRowsExp8Pairs(g.ea, R, g.zero_code, par), pk.peb = PackColsExp8Twice(g.eb, nr, g.zero_code, par);
  pk.pxa = PackRows(g.xa, g.m, nb, R), pk.pxb = PackCols(g.xb, nb, g.n, nr);
  if (!pk.zero_floor) pk.pza = PackRows(za.data(), g.m, ns, R), pk.pzb = PackCols(zb.data(), ns, g.n, nr);
  return pk;
}

// One tile of an FP32-lane kernel call (DF its FP32 lanes): zero_exp and F in int32 lanes.
template <class DF>
using ScaledI32Tile = KernelTile<ScaledFusedArgs, ScaledI32Packs, DF>;

// A step's emax per output (the largest of the accumulator's exponent, the products' with their block
// scales xa + xb, and by the zero-term rule zero_exp), gp = 2^(F - emax + xa + xb), which takes a product of
// unscaled elements to its units, and the step's sum started with the accumulator's term.
template <bool kTermRne, class DF, class VI>
HWY_INLINE void ScaledI32StepExps(DF df, const ScaledI32Tile<DF>& t, size_t s0, size_t s1,
                                  const hn::Vec<DF> (&part)[kFusedMr][2], VI (&emax)[kFusedMr][2],
                                  hn::Vec<DF> (&gp)[kFusedMr][2], VI (&sum)[kFusedMr][2]) {
  constexpr size_t R = kFusedMr;
  const hn::RebindToSigned<DF> di;
  const ScaledFusedArgs& g = t.g;
  const ScaledI32Packs& pk = t.pk;
  const size_t N = hn::Lanes(df), nr = 2 * N, si = s0 / pk.step, blk = s0 / g.kb;
  VI emax_p[R][2];
  MaxProductExps<R>(di, pk.pea.get() + (t.p * g.k + s0) * 2 * R, pk.peb.get() + (t.q * g.k + s0) * 2 * nr, s1 - s0,
                    emax_p);
  const int32_t* xbp = pk.pxb.get() + (t.q * pk.nb + blk) * nr;
  const int32_t* zbp = pk.zero_floor ? nullptr : pk.pzb.get() + (t.q * pk.ns + si) * nr;
  for (size_t r = 0; r < R; ++r)
    for (size_t h = 0; h < 2; ++h) {
      const VI xs = hn::Add(hn::Set(di, pk.pxa[(t.p * pk.nb + blk) * R + r]), hn::LoadU(di, xbp + h * N));
      // (kNoProduct + xs stays far below every exponent and zero_code)
      emax[r][h] = StepEmax(df, part[r][h], hn::Add(emax_p[r][h], xs), g.zero_code, pk.zero_floor,
                            pk.zero_floor ? 0 : pk.pza[(t.p * pk.ns + si) * R + r],
                            pk.zero_floor ? nullptr : zbp + h * N, t.zero_exp);
      // Out of FP32's range only where no product leaves a bit (below) or every product is zero.
      gp[r][h] = Pow2Scale(df, hn::Add(hn::Sub(t.fbits, emax[r][h]), xs));
      sum[r][h] = AccTermI32<kTermRne>(df, part[r][h], emax[r][h], t.fbits);
    }
}

// The step's terms in two int32 sums: the accumulator's and the first `chunk` products' (first), and the
// rest's (sum) (the dispatcher's bound keeps each below 2^31).
template <bool kTermRne, class DF, class VI>
HWY_INLINE void ScaledI32Terms(DF df, const ScaledI32Tile<DF>& t, size_t s0, size_t s1,
                               const hn::Vec<DF> (&gp)[kFusedMr][2], VI (&first)[kFusedMr][2], VI (&sum)[kFusedMr][2]) {
  constexpr size_t R = kFusedMr;
  const size_t nr = 2 * hn::Lanes(df), chunk = t.pk.chunk;
  const float* ap = t.pk.pa.get() + (t.p * t.g.k + s0) * R;
  const float* bp = t.pk.pb.get() + (t.q * t.g.k + s0) * nr;
  for (size_t c0 = 0; c0 < 2 * chunk; c0 += chunk) {
    AddTermsI32<kTermRne, R>(df, ap, bp, std::min(s1 - s0, c0), std::min(s1 - s0, c0 + chunk), gp, sum);
    if (c0 == 0)
      for (size_t r = 0; r < R; ++r)
        for (size_t h = 0; h < 2; ++h) first[r][h] = sum[r][h], sum[r][h] = hn::Zero(hn::RebindToSigned<DF>());
  }
}

// The exact total first + sum (units of 2^unit) in FP64, rounded by the fused rule (GroupOut) to FP32.
template <bool kOutRne, class DF, class VI>
HWY_INLINE hn::Vec<DF> TotalOut(DF df, VI first, VI sum, VI unit, int out_bits) {
  const hn::Half<hn::RebindToSigned<DF>> dih;
  const hn::Repartition<double, DF> dd;
  const hn::RebindToSigned<decltype(dd)> di64;
  const auto t0 = hn::Add(hn::PromoteTo(dd, hn::LowerHalf(dih, first)), hn::PromoteTo(dd, hn::LowerHalf(dih, sum)));
  const auto t1 = hn::Add(hn::PromoteTo(dd, hn::UpperHalf(dih, first)), hn::PromoteTo(dd, hn::UpperHalf(dih, sum)));
  const auto lo = GroupOut<kOutRne>(dd, t0, hn::PromoteTo(di64, hn::LowerHalf(dih, unit)), out_bits);
  const auto hi = GroupOut<kOutRne>(dd, t1, hn::PromoteTo(di64, hn::UpperHalf(dih, unit)), out_bits);
  return hn::Combine(df, hi, lo);
}

// The step's two sums rounded to out_bits into part; `bad` gains the lanes whose result left the finite
// range.
template <bool kOutRne, class DF, class VI>
HWY_INLINE void RoundScaledI32Step(DF df, const ScaledI32Tile<DF>& t, const VI (&emax)[kFusedMr][2],
                                   const VI (&first)[kFusedMr][2], const VI (&sum)[kFusedMr][2],
                                   hn::Vec<DF> (&part)[kFusedMr][2], hn::Mask<DF> (&bad)[kFusedMr][2]) {
  const hn::RebindToSigned<DF> di;
  for (size_t r = 0; r < kFusedMr; ++r)
    for (size_t h = 0; h < 2; ++h) {
      const VI unit = hn::Sub(emax[r][h], t.fbits);
      hn::Mask<DF> ok = hn::FirstN(df, 0);
      if (t.g.out_bits == 24) {
        // Where the int32 total does not wrap and the result is a normal number: the total rounded
        // to 24 bits (I32ToF32), then scaled by 2^unit (exact).
        const VI total = hn::Add(first[r][h], sum[r][h]);
        const auto wrapped = hn::Lt(hn::And(hn::Xor(first[r][h], total), hn::Xor(sum[r][h], total)), hn::Zero(di));
        part[r][h] = ScaleStepSum(df, I32ToF32<kOutRne>(df, total), unit, ok);
        ok = hn::AndNot(hn::RebindMask(df, wrapped), ok);
      }
      if (!hn::AllTrue(df, ok)) {  // the exact total in FP64, rounded by the fused rule
        part[r][h] = TotalOut<kOutRne>(df, first[r][h], sum[r][h], unit, t.g.out_bits);
        bad[r][h] = hn::Or(bad[r][h], hn::Not(hn::IsFinite(part[r][h])));  // (ok lanes are finite)
      }
    }
}

// One step where the zero-term rule is the floor zero_exp <= -126 (no flags), written for registers as the
// fused kernel's LeanFusedStep: the exponents and accumulator terms unrolled over the tile, and with 24-bit
// output one test a step that no int32 total wraps and every unit 2^(emax - F) keeps the rounded total
// (below 2^31) a normal number (-126 <= emax - F <= 96), where the scaling alone is the rounding's result;
// else RoundScaledI32Step decides.
template <bool kTermRne, bool kOutRne, class DF>
HWY_INLINE void LeanScaledI32Step(DF df, const ScaledI32Tile<DF>& t, size_t s0, size_t s1,
                                  hn::Vec<DF> (&part)[kFusedMr][2], hn::Mask<DF> (&bad)[kFusedMr][2]) {
  constexpr size_t R = kFusedMr;
  using VI = hn::Vec<hn::RebindToSigned<DF>>;
  const hn::RebindToSigned<DF> di;
  const ScaledFusedArgs& g = t.g;
  const ScaledI32Packs& pk = t.pk;
  const size_t N = hn::Lanes(df), nr = 2 * N, blk = s0 / g.kb;
  VI emax[R][2], first[R][2], sum[R][2];
  hn::Vec<DF> gp[R][2];
  MaxProductExps<R>(di, pk.pea.get() + (t.p * g.k + s0) * 2 * R, pk.peb.get() + (t.q * g.k + s0) * 2 * nr, s1 - s0,
                    emax);
  const int32_t* xap = pk.pxa.get() + (t.p * pk.nb + blk) * R;
  const int32_t* xbp = pk.pxb.get() + (t.q * pk.nb + blk) * nr;
  HWY_UNROLL(8)
  for (size_t x = 0; x < 2 * R; ++x) {  // (one loop over the tile's vectors: GCC unrolls it whole)
    const size_t r = x / 2, h = x % 2;
    const VI xs = hn::Add(hn::Set(di, xap[r]), hn::LoadU(di, xbp + h * N));
    // (kNoProduct + xs stays far below every exponent: the floor takes those lanes)
    emax[r][h] = MaxAccExp(df, part[r][h], hn::Max(hn::Add(emax[r][h], xs), t.zero_exp));
    gp[r][h] = Pow2Scale(df, hn::Add(hn::Sub(t.fbits, emax[r][h]), xs));
    sum[r][h] = AccTermI32<kTermRne>(df, part[r][h], emax[r][h], t.fbits);
  }
  ScaledI32Terms<kTermRne>(df, t, s0, s1, gp, first, sum);
  if (g.out_bits == 24) {
    VI total[R][2];
    auto wrapped = hn::Zero(di);
    HWY_UNROLL(8)
    for (size_t x = 0; x < 2 * R; ++x) {
      const size_t r = x / 2, h = x % 2;
      total[r][h] = hn::Add(first[r][h], sum[r][h]);
      // (a total wraps where both sums' signs differ from its own)
      wrapped = hn::Or(wrapped, hn::And(hn::Xor(first[r][h], total[r][h]), hn::Xor(sum[r][h], total[r][h])));
    }
    if (hn::AllFalse(di, hn::Lt(wrapped, hn::Zero(di))) &&
        EmaxWithin<R>(di, emax, g.frac_bits - 126, g.frac_bits + 96)) {
      HWY_UNROLL(8)
      for (size_t x = 0; x < 2 * R; ++x) {
        const size_t r = x / 2, h = x % 2;
        hn::Mask<DF> ok;
        part[r][h] = ScaleStepSum(df, I32ToF32<kOutRne>(df, total[r][h]), hn::Sub(emax[r][h], t.fbits), ok);
      }
      return;
    }
  }
  RoundScaledI32Step<kOutRne>(df, t, emax, first, sum, part, bad);
}

// A tile's K chunk [k0c, k0c + len): C's outputs loaded with their non-finite lanes (bad), each step's
// result (exponents, terms, rounding), and C stored back with the bad lanes as NaN for the reference.
template <bool kTermRne, bool kOutRne, bool kLean, class DF>
HWY_INLINE void ScaledI32Chunk(DF df, const ScaledI32Tile<DF>& t, size_t k0c, size_t len, float* ct, size_t ldc) {
  using VI = hn::Vec<hn::RebindToSigned<DF>>;
  constexpr size_t R = kFusedMr;
  const size_t step = t.pk.step;
  hn::Vec<DF> part[R][2];
  hn::Mask<DF> bad[R][2];  // lanes whose accumulation left the finite range
  LoadTile<R>(df, ct, ldc, part, bad);
  for (size_t s0 = k0c; s0 < k0c + len; s0 += step) {
    const size_t s1 = std::min(k0c + len, s0 + step);
    if constexpr (kLean) {
      LeanScaledI32Step<kTermRne, kOutRne>(df, t, s0, s1, part, bad);
      continue;
    }
    VI emax[R][2], first[R][2], sum[R][2];
    hn::Vec<DF> gp[R][2];
    ScaledI32StepExps<kTermRne>(df, t, s0, s1, part, emax, gp, sum);
    ScaledI32Terms<kTermRne>(df, t, s0, s1, gp, first, sum);
    RoundScaledI32Step<kOutRne>(df, t, emax, first, sum, part, bad);
  }
  StoreTile<R>(df, part, bad, ct, ldc);
}

// The FP32-lane kernel: the packs, then each tile's K chunks (ScaledI32Chunk) on Drive's threads (ForEachTile).
template <bool kTermRne, bool kOutRne>
bool GemmScaledI32Impl(const ScaledFusedArgs& g, float* c, size_t chunk) {
  using DF = hn::ScalableTag<float>;
  const DF df;
  const hn::RebindToSigned<DF> di;
  const size_t N = hn::Lanes(df), nr = 2 * N;
  if (2 * hn::Lanes(hn::ScalableTag<double>()) != N) return false;
  const ScaledI32Packs pk = PackScaledI32(g, nr, chunk);
  // The lean steps (LeanScaledI32Step) where the zero rule is a floor, else the general ones.
  const auto run = [&](auto lean) {
    ForEachTile<kFusedMr>(CallTile(df, g, pk), c, nr, ChunkFor(pk.step),
                          [&](const ScaledI32Tile<DF>& t, size_t k0c, size_t len, float* ct, size_t ldc) {
                            ScaledI32Chunk<kTermRne, kOutRne, decltype(lean)::value>(df, t, k0c, len, ct, ldc);
                          });
  };
  if (pk.zero_floor) run(std::true_type());
  else run(std::false_type());
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
      bits[s] = std::max(bits[s], detail::SignificantBits(x));
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
  const size_t chunk = I32Chunk(g);
  return DispatchRounding(g.rne_terms, g.rne_out, [&](auto term_rne, auto out_rne) {
    constexpr bool kTermRne = decltype(term_rne)::value, kOutRne = decltype(out_rne)::value;
    return chunk ? GemmScaledI32Impl<kTermRne, kOutRne>(g, c, chunk) : GemmScaledImpl<kTermRne, kOutRne>(g, c);
  });
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
