// gemm_pack-inl.h: the packed operands, C tiles and thread loop nest that the Highway GEMM kernels share
// (gemm_simd.cc, gemm_fused_simd.cc, gemm_group_simd.cc, gemm_scaled_simd.cc), compiled once per target,
// and the steps they share: the six-row multiply-add (MulAddRows), the choice of rounding modes
// (DispatchRounding), and the fused kernels' exponent, term and rounding steps in FP32 and FP64 lanes.
//
// Each kernel is a short driver over the same skeleton of named steps: pack the operands (Pack*), then per
// tile and K chunk (Drive, CTiles) each step's exponents, its terms, and the step's rounding, then the
// epilogue (a promotion, the tile stored back); an output whose value leaves the finite range is stored as
// NaN, which escapes it to the scalar reference.
//
// Layout (GotoBLAS): A is packed into panels of kMr rows (for each k, the kMr values side by side), B
// into panels of NR = 2 vectors of columns (for each k, NR values), C into a padded buffer. Threads take
// blocks of A panels; for each block the K range is walked in chunks of kc (B's chunk of one panel stays
// in L1 across the block's A panels), and a micro-kernel updates one kMr x NR tile of C in registers.
// Every output is owned by one thread and sees its K terms in order, whatever the thread count, and all
// arithmetic is either exact (block sums, fused terms) or IEEE FMA in K order, so the vector width does
// not change a bit either.

// Per-target include guard: each target's pass through foreach_target.h compiles this file again.
#if defined(QMX_GEMM_PACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QMX_GEMM_PACK_INL_H_
#undef QMX_GEMM_PACK_INL_H_
#else
#define QMX_GEMM_PACK_INL_H_
#endif

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "fp_env.h"
#include "simd_lanes-inl.h"
#include "gemm/gemm_simd.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

constexpr size_t kMr = 6;       // rows of a micro-tile (FMA and block kernels)
constexpr size_t kFusedMr = 4;  // rows of a micro-tile with more state per output (fused)
constexpr size_t kKc = 256;     // K per chunk (rounded to a multiple of the kernel's block)
constexpr size_t kMcPanels = 16;  // A panels per thread's block, at most (Drive)

// A rows x cols matrix as panels of w rows: panel p holds, for each column c, value(p*w + r, c) side by
// side for r < w (zero beyond the last row). fill(row, d) writes row `row`'s values to d[0], d[w], ...
template <typename T, class Fill>
Buf<T> PanelRows(size_t rows, size_t cols, size_t w, bool parallel, const Fill& fill) {
  const long panels = static_cast<long>((rows + w - 1) / w);
  Buf<T> dst = AllocateBuf<T>(std::max<size_t>(1, panels * cols * w));
#pragma omp parallel for schedule(static) if (parallel)
  for (long p = 0; p < panels; ++p) {
    const qmx::detail::ScopedDefaultFpEnv fp_env;
    for (size_t r = 0; r < w; ++r) {
      T* d = dst.get() + p * cols * w + r;
      if (p * w + r < rows) {
        fill(p * w + r, d);
      } else {
        for (size_t c = 0; c < cols; ++c) d[c * w] = T(0);
      }
    }
  }
  return dst;
}
// The same matrix as panels of w columns: panel q holds, for each row r, value(r, q*w + j) side by side.
// fill(r, c0, valid, d) writes row r's values at columns c0 .. c0 + valid - 1 to d[0 .. valid - 1].
template <typename T, class Fill>
Buf<T> PanelCols(size_t rows, size_t cols, size_t w, bool parallel, const Fill& fill) {
  const long panels = static_cast<long>((cols + w - 1) / w);
  Buf<T> dst = AllocateBuf<T>(std::max<size_t>(1, panels * rows * w));
#pragma omp parallel for schedule(static) if (parallel)
  for (long q = 0; q < panels; ++q) {
    const qmx::detail::ScopedDefaultFpEnv fp_env;
    const size_t c0 = q * w, valid = std::min(w, cols - c0);
    for (size_t r = 0; r < rows; ++r) {
      T* d = dst.get() + (q * rows + r) * w;
      fill(r, c0, valid, d);
      for (size_t j = valid; j < w; ++j) d[j] = T(0);
    }
  }
  return dst;
}

// An operand packed from its codes; a scaled operand takes one scale per block of a row or column
// (the product At forms, without a division per value).
template <typename T>
Buf<T> PackRows(const CodeMatrix<T>& src, size_t w, bool parallel) {
  return PanelRows<T>(src.rows, src.cols, w, parallel, [&](size_t row, T* d) {
    const uint8_t* codes = src.codes + row * src.cols;
    if (!src.scales) {
      for (size_t c = 0; c < src.cols; ++c) d[c * w] = src.table[codes[c]];
      return;
    }
    const float* srow = src.scales + (row / src.block_rows) * src.scale_cols;
    for (size_t c0 = 0, b = 0; c0 < src.cols; c0 += src.block_cols, ++b)
      for (size_t c = c0; c < std::min(src.cols, c0 + src.block_cols); ++c)
        d[c * w] = static_cast<T>(static_cast<float>(src.table[codes[c]]) * srow[b]);
  });
}
template <typename T>
Buf<T> PackCols(const CodeMatrix<T>& src, size_t w, bool parallel) {
  return PanelCols<T>(src.rows, src.cols, w, parallel, [&](size_t r, size_t c0, size_t valid, T* d) {
    const uint8_t* codes = src.codes + r * src.cols + c0;
    if (!src.scales) {
      for (size_t j = 0; j < valid; ++j) d[j] = src.table[codes[j]];
      return;
    }
    const float* srow = src.scales + (r / src.block_rows) * src.scale_cols;
    size_t b = c0 / src.block_cols, left = src.block_cols - c0 % src.block_cols;  // columns left in block b
    for (size_t j = 0; j < valid; ++j) {
      d[j] = static_cast<T>(static_cast<float>(src.table[codes[j]]) * srow[b]);
      if (--left == 0) {
        ++b;
        left = src.block_cols;
      }
    }
  });
}
// Small plain tables (block scales, zero flags) packed the same two ways, on the calling thread.
template <typename T>
Buf<T> PackRows(const T* src, size_t rows, size_t cols, size_t w) {
  return PanelRows<T>(rows, cols, w, false, [&](size_t row, T* d) {
    for (size_t c = 0; c < cols; ++c) d[c * w] = src[row * cols + c];
  });
}
template <typename T>
Buf<T> PackCols(const T* src, size_t rows, size_t cols, size_t w) {
  return PanelCols<T>(rows, cols, w, false, [&](size_t r, size_t c0, size_t valid, T* d) {
    std::copy(src + r * cols + c0, src + r * cols + c0 + valid, d);
  });
}
// The largest and smallest exponent (hi, lo) that bounds each step's terms, per (row, step) of A (rows x ns:
// hia, loa) and (step, column) of B (ns x cols: hib, lob), in panels of w rows and nr columns.
struct StepBoundPanels {
  Buf<int32_t> hia, loa, hib, lob;
};
inline StepBoundPanels PackStepBounds(const std::vector<int32_t>& hia, const std::vector<int32_t>& loa, size_t rows,
                                      const std::vector<int32_t>& hib, const std::vector<int32_t>& lob, size_t cols,
                                      size_t ns, size_t w, size_t nr) {
  return {PackRows(hia.data(), rows, ns, w), PackRows(loa.data(), rows, ns, w), PackCols(hib.data(), ns, cols, nr),
          PackCols(lob.data(), ns, cols, nr)};
}
// C (m x n) in tiles of rows x cols: a whole tile is updated in place, an edge tile through a local
// zero-padded copy (the packed operands are zero beyond the edges too).
struct CTiles {
  float* c;
  size_t m, n, rows, cols;
  template <class Fn>
  void With(size_t p, size_t q, const Fn& fn) const {
    const size_t r0 = p * rows, c0 = q * cols;
    if (r0 + rows <= m && c0 + cols <= n) {
      fn(c + r0 * n + c0, n);
      return;
    }
    alignas(64) float t[kMr * 2 * (HWY_MAX_BYTES / sizeof(float))] = {};
    const size_t vr = std::min(rows, m - r0), vc = std::min(cols, n - c0);
    for (size_t r = 0; r < vr; ++r) std::memcpy(t + r * cols, c + (r0 + r) * n + c0, vc * sizeof(float));
    fn(t, cols);
    for (size_t r = 0; r < vr; ++r) std::memcpy(c + (r0 + r) * n + c0, t + r * cols, vc * sizeof(float));
  }
};

// Runs tile(p, q, pc, len) for every A panel p, B panel q and K chunk [pc, pc + len), the chunks of
// one tile in order and on one thread; which thread runs a tile changes no bit. Threads take blocks of
// A panels. Each K chunk of B (all its panels) streams through the cache once per block, so larger
// blocks read it fewer times (16 panels of A's chunk, at most 16 x 6 rows x 256 K doubles, 196 KB, stay
// in L2), while at least four blocks per thread keep the dynamic schedule balanced: blocks of 8 to
// kMcPanels panels, as many as fill whole rounds of the threads: one or two threads take blocks of 16,
// more threads smaller ones, so that no thread is left a block short (cli/bench/PERFORMANCE.md "GEMM
// thread blocks").
template <class TileFn>
void Drive(size_t m_panels, size_t n_panels, size_t k, size_t kc, bool parallel, const TileFn& tile) {
  if (m_panels == 0) return;
  const size_t threads = parallel ? static_cast<size_t>(std::max(1, omp_get_max_threads())) : 1;
  const size_t cap = std::clamp((m_panels + 4 * threads - 1) / (4 * threads), size_t{8}, kMcPanels);
  const size_t rounds = (m_panels + threads * cap - 1) / (threads * cap);
  const size_t per = (m_panels + threads * rounds - 1) / (threads * rounds);  // at most cap
  const long blocks = static_cast<long>((m_panels + per - 1) / per);
#pragma omp parallel for schedule(dynamic) if (parallel && blocks > 1)
  for (long bi = 0; bi < blocks; ++bi) {
    const qmx::detail::ScopedDefaultFpEnv fp_env;
    const size_t p0 = static_cast<size_t>(bi) * per, p1 = std::min(m_panels, p0 + per);
    for (size_t pc = 0; pc < k; pc += kc) {
      const size_t len = std::min(kc, k - pc);
      for (size_t q = 0; q < n_panels; ++q)
        for (size_t p = p0; p < p1; ++p) tile(p, q, pc, len);
    }
  }
}

inline size_t ChunkFor(size_t unit) { return unit >= kKc ? unit : unit * (kKc / unit); }

// One tile of a fused kernel's call whose steps work in lanes D, what its steps read: the call's arguments g
// and packs pk, the tile's A and B panels (p, q), zero_exp in int32 lanes beside D's, F in D's integer lanes.
template <class Args, class Packs, class D>
struct KernelTile {
  const Args& g;
  const Packs& pk;
  size_t p, q;
  hn::Vec<hn::Rebind<int32_t, D>> zero_exp;
  hn::Vec<hn::RebindToSigned<D>> fbits;
};
// A call's KernelTile, before ForEachTile gives it each tile's panels.
template <class D, class Args, class Packs>
HWY_INLINE KernelTile<Args, Packs, D> CallTile(D, const Args& g, const Packs& pk) {
  return {g, pk, 0, 0, hn::Set(hn::Rebind<int32_t, D>(), g.zero_exp), hn::Set(hn::RebindToSigned<D>(), g.frac_bits)};
}

// The fused kernels' loop nest: chunk(t, k0c, len, ct, ldc) for every R x nr tile of C (g.m x g.n, CTiles)
// and K chunk [k0c, k0c + len) of kc (Drive), t a copy of `tile` (a KernelTile) with the tile's panels.
template <size_t R, class Tile, class Chunk>
HWY_INLINE void ForEachTile(const Tile& tile, float* c, size_t nr, size_t kc, const Chunk& chunk) {
  const auto& g = tile.g;
  const CTiles tiles{c, g.m, g.n, R, nr};
  Drive((g.m + R - 1) / R, (g.n + nr - 1) / nr, g.k, kc, g.parallel, [&](size_t p, size_t q, size_t k0c, size_t len) {
    Tile t = tile;
    t.p = p, t.q = q;
    tiles.With(p, q, [&](float* ct, size_t ldc) { chunk(t, k0c, len, ct, ldc); });
  });
}

// fn(term_rne, out_rne) with a call's two rounding modes (terms, output) as std::bool_constant arguments:
// the four instantiations <kTermRne, kOutRne> of a fused kernel behind one run-time choice.
template <class Fn>
HWY_INLINE bool DispatchRounding(bool rne_terms, bool rne_out, const Fn& fn) {
  using Rne = std::true_type;
  using Rz = std::false_type;
  if (rne_terms) return rne_out ? fn(Rne(), Rne()) : fn(Rne(), Rz());
  return rne_out ? fn(Rz(), Rne()) : fn(Rz(), Rz());
}

// The six-row multiply-add of the micro-kernels: acc[r][v] += a(r, k) * b(k, v) for len k in K order (one
// FMA each), ap an A panel (R values per k), bp a B panel (V vectors per k). The B vectors of a k are
// loaded once and each A value broadcast once, for R x V independent FMA chains.
template <size_t R, size_t V, class D, typename T>
HWY_INLINE void MulAddRows(D d, const T* HWY_RESTRICT ap, const T* HWY_RESTRICT bp, size_t len,
                           hn::Vec<D> (&acc)[R][V]) {
  const size_t N = hn::Lanes(d);
  for (size_t kk = 0; kk < len; ++kk) {
    hn::Vec<D> b[V];
    for (size_t v = 0; v < V; ++v) b[v] = hn::LoadU(d, bp + (kk * V + v) * N);
    HWY_UNROLL(6)
    for (size_t r = 0; r < R; ++r) {
      const hn::Vec<D> x = hn::Set(d, ap[kk * R + r]);
      for (size_t v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(x, b[v], acc[r][v]);
    }
  }
}

// 2^e for -126 <= e <= 127, 0 where e < -126, and 2^127 where e > 127.
template <class DF, class VI>
HWY_INLINE hn::Vec<DF> Pow2OrZero(DF df, VI e) {
  const hn::RebindToSigned<DF> di;
  const auto biased = hn::Min(hn::Max(hn::Add(e, hn::Set(di, 127)), hn::Zero(di)), hn::Set(di, 254));
  return hn::BitCast(df, hn::ShiftLeft<23>(biased));  // biased 0: +0
}
// A step's product factor 2^e: 2^127 above 127; below -126 a subnormal or 0 (one VSCALEFPS on AVX-512),
// else Pow2OrZero's 0. The callers' bounds leave every term below 1/2 where e < -126 (no product keeps a
// bit) and every product zero where e > 127, so the terms are the same either way.
template <class DF, class VI>
HWY_INLINE hn::Vec<DF> Pow2Scale(DF df, VI e) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (std::is_same_v<hn::Vec<DF>, hn::Vec512<float>>)
    return hn::Vec512<float>{
        _mm512_scalef_ps(_mm512_set1_ps(1.0f), _mm512_cvtepi32_ps(_mm512_min_epi32(e.raw, _mm512_set1_epi32(127))))};
#endif
  return Pow2OrZero(df, e);
}

// v (integer-valued after rounding, far inside int32's range) as int32: toward zero, or to nearest even
// (the default FP environment every kernel runs in). On x86 one instruction, without the fix-up that
// Highway's ConvertTo and NearestInt add for out-of-range lanes.
template <bool kRne, class DI, class VF>
HWY_INLINE hn::Vec<DI> ToI32InRange(DI di, VF v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (std::is_same_v<VF, hn::Vec512<float>>)
    return hn::Vec<DI>{kRne ? _mm512_cvtps_epi32(v.raw) : _mm512_cvttps_epi32(v.raw)};
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if constexpr (std::is_same_v<VF, hn::Vec256<float>>)
    return hn::Vec<DI>{kRne ? _mm256_cvtps_epi32(v.raw) : _mm256_cvttps_epi32(v.raw)};
#endif
  if constexpr (kRne) return hn::NearestInt(v);
  else return hn::ConvertTo(di, v);
}

// ---- The accumulator's term in a fused step (FP32 lanes) ----------------------------------------------

// The accumulator's nominal exponent: FP32's exponent, -126 for subnormals, zero_code for zero (`zero`).
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> AccExp(DF df, hn::Vec<DF> part, int32_t zero_code,
                                                  hn::Mask<hn::RebindToSigned<DF>>& zero) {
  const hn::RebindToSigned<DF> di;
  zero = hn::RebindMask(di, hn::Eq(part, hn::Zero(df)));
  const auto field = hn::And(hn::ShiftRight<23>(hn::BitCast(di, part)), hn::Set(di, 0xFF));
  return hn::IfThenElse(zero, hn::Set(di, zero_code), hn::Max(hn::Sub(field, hn::Set(di, 127)), hn::Set(di, -126)));
}
// max(e, the accumulator's nominal exponent): FP32's exponent, -126 for subnormals, nothing for zero (e
// unchanged). On AVX-512 VGETEXPPS gives the exponent (-Inf for zero, which converts to INT_MIN) and one
// masked max lifts the nonzero lanes to -126.
template <class DF, class VI>
HWY_INLINE VI MaxAccExp(DF df, hn::Vec<DF> part, VI e) {
  const hn::RebindToSigned<DF> di;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (std::is_same_v<hn::Vec<DF>, hn::Vec512<float>>) {
    const __m512i x = _mm512_max_epi32(e.raw, _mm512_cvttps_epi32(_mm512_getexp_ps(part.raw)));
    const __mmask16 nonzero = _mm512_cmp_ps_mask(part.raw, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    return VI{_mm512_mask_max_epi32(x, nonzero, x, _mm512_set1_epi32(-126))};
  }
#endif
  const auto nonzero = hn::RebindMask(di, hn::Ne(part, hn::Zero(df)));
  const auto field = hn::And(hn::ShiftRight<23>(hn::BitCast(di, part)), hn::Set(di, 0xFF));
  return hn::IfThenElse(nonzero, hn::Max(e, hn::Max(hn::Sub(field, hn::Set(di, 127)), hn::Set(di, -126))), e);
}
// The exponents that bound a step's terms in H outputs at `at` (the fused kernels' tests for a step that cuts
// no term): the accumulator's exponent ec (zero_exp for 0; pzero its zero lanes), top = max(hi_a + hi_b,
// zero_exp) and lo = lo_a + lo_b, hi and lo from StepBoundPanels at A's index row and B's index col.
template <class DF>
struct StepExpBounds {
  hn::Vec<hn::RebindToSigned<DF>> ec, top, lo;
  hn::Mask<hn::RebindToSigned<DF>> pzero;
};
template <class DF>
HWY_INLINE StepExpBounds<DF> BoundStepExps(DF df, const float* at, int32_t zero_exp, const StepBoundPanels& b,
                                           size_t row, size_t col) {
  const hn::RebindToSigned<DF> di;
  StepExpBounds<DF> x;
  x.ec = AccExp(df, hn::LoadU(df, at), zero_exp, x.pzero);
  x.top = hn::Max(hn::Add(hn::Set(di, b.hia[row]), hn::LoadU(di, b.hib.get() + col)), hn::Set(di, zero_exp));
  x.lo = hn::Add(hn::Set(di, b.loa[row]), hn::LoadU(di, b.lob.get() + col));
  return x;
}
// The zero-term rule: emax raised to zero_exp in the lanes where the step has a zero product (the row's flag
// za, the columns' flags at zb: -1 where some element of the step is zero) or the accumulator is zero.
template <class DI>
HWY_INLINE hn::Vec<DI> LiftZeroTerms(DI di, hn::Vec<DI> emax, int32_t za, const int32_t* zb, hn::Mask<DI> pzero,
                                     hn::Vec<DI> zero_exp) {
  const hn::Vec<DI> z = hn::Or(hn::Set(di, za), hn::LoadU(di, zb));
  return hn::IfThenElse(hn::Or(hn::MaskFromVec(z), pzero), hn::Max(emax, zero_exp), emax);
}
// A fused step's emax in FP32 lanes: the largest of the accumulator's exponent and ep (the products', with
// their scales) under the zero-term rule. zb non-null: zero_exp where the step's flags (the row's za, the
// columns' at zb) or a zero accumulator say a product or the accumulator is zero; else, with floor (zero_exp
// <= -126), zero_exp in every lane (a zero accumulator applies it anyway, a nonzero one already puts emax at
// -126 or above); else no rule.
template <class DF, class VI>
HWY_INLINE VI StepEmax(DF df, hn::Vec<DF> part, VI ep, int32_t zero_code, bool floor, int32_t za, const int32_t* zb,
                       VI zero_exp) {
  if (zb == nullptr) return MaxAccExp(df, part, floor ? hn::Max(ep, zero_exp) : ep);
  hn::Mask<hn::RebindToSigned<DF>> pzero;
  const VI ec = AccExp(df, part, zero_code, pzero);
  return LiftZeroTerms(hn::RebindToSigned<DF>(), hn::Max(ec, ep), za, zb, pzero, zero_exp);
}
// The accumulator truncated (or rounded) at 2^(emax - F), as an int32 count of that unit (below
// 2^(F + 1)): its significand scaled by 2^(ec - emax + F), ec its nominal exponent (-126 for subnormals
// and zero, whose significand is 0), so no power of two leaves FP32's range.
template <bool kRne, class DF, class VI>
HWY_INLINE VI AccTermI32(DF df, hn::Vec<DF> part, VI emax, VI fbits) {
  const hn::RebindToSigned<DF> di;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // One scaling, part * 2^(F - emax) (VSCALEFPS): below 2^(F + 1) as emax >= ec, exact where it is a
  // normal number; below 2^-126 it is rounded, but stays below 1/2, whose term is 0 either way.
  if constexpr (std::is_same_v<hn::Vec<DF>, hn::Vec512<float>>)
    return ToI32InRange<kRne>(di, hn::Vec512<float>{_mm512_scalef_ps(part.raw, _mm512_cvtepi32_ps(hn::Sub(fbits, emax).raw))});
#endif
  const VI bits = hn::BitCast(di, part);
  const VI field = hn::And(hn::ShiftRight<23>(bits), hn::Set(di, 0xFF));
  const auto subnormal = hn::RebindMask(df, hn::Eq(field, hn::Zero(di)));
  const auto sig = hn::IfThenElse(subnormal, hn::Mul(part, hn::Set(df, 0x1p126f)),
                                  hn::BitCast(df, hn::Or(hn::And(bits, hn::Set(di, static_cast<int32_t>(0x807FFFFFu))),
                                                         hn::Set(di, 127 << 23))));
  const VI ec = hn::Max(hn::Sub(field, hn::Set(di, 127)), hn::Set(di, -126));
  const VI dacc = hn::Add(hn::Sub(ec, emax), fbits);
  return ToI32InRange<kRne>(di, hn::Mul(sig, Pow2OrZero(df, dacc)));
}

// f * 2^unit for f an integer-valued FP32 number already rounded to the step's bits (a step's sum, or
// 0), by adding unit to f's exponent field (one VSCALEFPS on AVX-512): exact, and the fused rule's
// result, where the product is a normal FP32 number; `ok` is false in the lanes where it is not (the
// caller's general rounding then decides them: subnormal and overflowing results). f = 0 gives +0.
template <class DF>
HWY_INLINE hn::Vec<DF> ScaleStepSum(DF df, hn::Vec<DF> f, hn::Vec<hn::RebindToSigned<DF>> unit, hn::Mask<DF>& ok) {
  const hn::RebindToSigned<DF> di;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // One scaling (VSCALEFPS), exact where the result is normal. Not ok: NaN, Inf (overflow), subnormal,
  // and +-2^-126, which a result just below FP32's normal range rounds to.
  if constexpr (std::is_same_v<hn::Vec<DF>, hn::Vec512<float>>) {
    const __m512 r = _mm512_scalef_ps(f.raw, _mm512_cvtepi32_ps(unit.raw));
    const __mmask16 edge = _mm512_cmp_ps_mask(_mm512_abs_ps(r), _mm512_set1_ps(0x1p-126f), _CMP_EQ_OQ);
    ok = hn::Mask512<float>{static_cast<__mmask16>(~(_mm512_fpclass_ps_mask(r, 0xB9) | edge))};  // QNaN SNaN +-Inf subnormal
    return hn::Vec512<float>{r};
  }
#endif
  const auto fb = hn::BitCast(di, f);
  const auto eo = hn::Add(hn::ShiftRight<23>(hn::And(fb, hn::Set(di, 0x7F800000))), unit);  // biased
  const auto zero = hn::Eq(f, hn::Zero(df));
  ok = hn::Or(zero, hn::RebindMask(df, hn::And(hn::Gt(eo, hn::Zero(di)), hn::Lt(eo, hn::Set(di, 255)))));
  return hn::IfThenZeroElse(zero, hn::BitCast(df, hn::Add(fb, hn::ShiftLeft<23>(unit))));
}

// Whether every lane of a tile's emax (R rows x 2 vectors) lies within lo .. hi: the lean steps' one test a
// step that their scaled sums are normal numbers.
template <size_t R, class DI>
HWY_INLINE bool EmaxWithin(DI di, const hn::Vec<DI> (&emax)[R][2], int32_t lo, int32_t hi) {
  hn::Vec<DI> mn = emax[0][0], mx = emax[0][0];
  HWY_UNROLL(8)
  for (size_t x = 0; x < 2 * R; ++x) mn = hn::Min(mn, emax[x / 2][x % 2]), mx = hn::Max(mx, emax[x / 2][x % 2]);
  return hn::AllFalse(di, hn::Or(hn::Lt(mn, hn::Set(di, lo)), hn::Gt(mx, hn::Set(di, hi))));
}

// ---- The FP32-lane fused kernels' tile (gemm_fused_simd.cc, gemm_scaled_simd.cc) ---------------------

// An R-row tile of 2 vectors per row of C in registers, with the lanes that are already non-finite
// (bad: stored back as NaN, which sends the output to the reference).
template <size_t R, class DF>
HWY_INLINE void LoadTile(DF df, const float* ct, size_t ldc, hn::Vec<DF> (&acc)[R][2], hn::Mask<DF> (&bad)[R][2]) {
  const size_t N = hn::Lanes(df);
  for (size_t r = 0; r < R; ++r)
    for (size_t h = 0; h < 2; ++h) {
      acc[r][h] = hn::LoadU(df, ct + r * ldc + h * N);
      bad[r][h] = hn::Not(hn::IsFinite(acc[r][h]));
    }
}
template <size_t R, class DF>
HWY_INLINE void StoreTile(DF df, const hn::Vec<DF> (&acc)[R][2], const hn::Mask<DF> (&bad)[R][2], float* ct, size_t ldc) {
  const size_t N = hn::Lanes(df);
  const auto nan = hn::Set(df, std::numeric_limits<float>::quiet_NaN());
  for (size_t r = 0; r < R; ++r)
    for (size_t h = 0; h < 2; ++h) hn::StoreU(hn::IfThenElse(bad[r][h], nan, acc[r][h]), df, ct + r * ldc + h * N);
}
// Products k0 .. k1 - 1 of a step into the int32 term sums: a (R per k) and b (2 vectors per k) packed
// values; scale(a * b, r, h) takes each product to its units of 2^(emax - F), and one conversion truncates
// (or rounds) it.
template <bool kRne, size_t R, class DF, class Scale>
HWY_INLINE void AddTermsWith(DF df, const float* ap, const float* bp, size_t k0, size_t k1, const Scale& scale,
                             hn::Vec<hn::RebindToSigned<DF>> (&sum)[R][2]) {
  const hn::RebindToSigned<DF> di;
  const size_t N = hn::Lanes(df), nr = 2 * N;
  hn::Vec<decltype(di)> acc[R][2];
  for (size_t r = 0; r < R; ++r) acc[r][0] = sum[r][0], acc[r][1] = sum[r][1];
  for (size_t kk = k0; kk < k1; ++kk) {
    const auto b0 = hn::LoadU(df, bp + kk * nr), b1 = hn::LoadU(df, bp + kk * nr + N);
    HWY_UNROLL(4)
    for (size_t r = 0; r < R; ++r) {
      const auto x = hn::Set(df, ap[kk * R + r]);
      acc[r][0] = hn::Add(ToI32InRange<kRne>(di, scale(hn::Mul(x, b0), r, 0)), acc[r][0]);
      acc[r][1] = hn::Add(ToI32InRange<kRne>(di, scale(hn::Mul(x, b1), r, 1)), acc[r][1]);
    }
  }
  for (size_t r = 0; r < R; ++r) sum[r][0] = acc[r][0], sum[r][1] = acc[r][1];
}
// The factor as a multiply: f[r][h], each output's power of two 2^(F - emax) (with scales where they apply).
template <bool kRne, size_t R, class DF>
HWY_INLINE void AddTermsI32(DF df, const float* ap, const float* bp, size_t k0, size_t k1, const hn::Vec<DF> (&f)[R][2],
                            hn::Vec<hn::RebindToSigned<DF>> (&sum)[R][2]) {
  AddTermsWith<kRne, R>(
      df, ap, bp, k0, k1, [&](hn::Vec<DF> p, size_t r, size_t h) { return hn::Mul(p, f[r][h]); }, sum);
}
// The factor as an exponent add: sh[r][h] holds each output's power of two shifted into FP32's exponent
// field, added to the product's bits (the caller keeps every nonzero product times 2^sh a normal number and
// every zero product's bits plus sh below 1/2; gemm_fused_simd.cc's ShiftPlan).
template <bool kRne, size_t R, class DF>
HWY_INLINE void AddTermsShiftI32(DF df, const float* ap, const float* bp, size_t len,
                                 const hn::Vec<hn::RebindToSigned<DF>> (&sh)[R][2],
                                 hn::Vec<hn::RebindToSigned<DF>> (&sum)[R][2]) {
  const hn::RebindToSigned<DF> di;
  AddTermsWith<kRne, R>(
      df, ap, bp, 0, len,
      [&](hn::Vec<DF> p, size_t r, size_t h) { return hn::BitCast(df, hn::Add(hn::BitCast(di, p), sh[r][h])); }, sum);
}

// ---- The largest nominal exponent of a step's products, two rows per int8 vector --------------------
//
// The fused kernels need, per output and step, emax_p = max over k of ea(i, k) + eb(k, j) over the
// nonzero products. As int8 lanes (every nominal exponent within +-kExp8Limit, zeros as kZeroExp8) one
// vector holds two rows of a tile: B's exponents are packed with each column twice (lanes 2j and
// 2j + 1), A's two rows as one 16-bit broadcast (row r in the even lanes, row r + 1 in the odd), so
// each k costs one add and one max per pair of rows. A sum with a zero (at most kZeroExp8 + kExp8Limit)
// stays below every sum of two nonzero exponents (at least -2 kExp8Limit), and no sum leaves int8.
constexpr int kExp8Limit = 20;
constexpr int8_t kZeroExp8 = -64;
constexpr int32_t kNoProduct = -(1 << 20);  // emax_p of a step without a nonzero product
static_assert(kZeroExp8 + kExp8Limit < -2 * kExp8Limit && 2 * kZeroExp8 >= -128, "int8 max-plus bounds");

// True when every exponent in the table (zeros as zero_code) fits the int8 lanes.
inline bool FitsExp8(const int32_t* table, int32_t zero_code) {
  for (int c = 0; c < 256; ++c)
    if (table[c] != zero_code && (table[c] < -kExp8Limit || table[c] > kExp8Limit)) return false;
  return true;
}
inline int8_t Exp8(int32_t e, int32_t zero_code) { return e == zero_code ? kZeroExp8 : static_cast<int8_t>(e); }
// A's exponents in panels of w rows, 2 w bytes per k: each pair of rows twice (r, r + 1, r, r + 1), so
// that a pair's broadcast is a 32-bit one (a load, where a 16-bit broadcast also takes a shuffle); B's in
// panels of nr columns, each column twice.
inline Buf<int8_t> PackRowsExp8Pairs(const CodeMatrix<int32_t>& e, size_t w, int32_t zero_code, bool parallel) {
  const size_t panels = (e.rows + w - 1) / w;
  Buf<int8_t> dst = AllocateBuf<int8_t>(std::max<size_t>(1, panels * e.cols * 2 * w));
#pragma omp parallel for schedule(static) if (parallel)
  for (long p = 0; p < static_cast<long>(panels); ++p)
    for (size_t r = 0; r < w; ++r) {
      const size_t row = p * w + r;
      int8_t* d = dst.get() + p * e.cols * 2 * w + (r / 2) * 4 + r % 2;
      for (size_t c = 0; c < e.cols; ++c)
        d[c * 2 * w] = d[c * 2 * w + 2] = row < e.rows ? Exp8(e.table[e.codes[row * e.cols + c]], zero_code) : kZeroExp8;
    }
  return dst;
}
inline Buf<int8_t> PackColsExp8Twice(const CodeMatrix<int32_t>& e, size_t nr, int32_t zero_code, bool parallel) {
  return PanelCols<int8_t>(e.rows, 2 * e.cols, 2 * nr, parallel, [&](size_t r, size_t c0, size_t valid, int8_t* d) {
    const uint8_t* codes = e.codes + r * e.cols + c0 / 2;
    for (size_t j = 0; j < valid / 2; ++j) d[2 * j] = d[2 * j + 1] = Exp8(e.table[codes[j]], zero_code);
  });
}

// Zero flags per (row, step) of A and (step, column) of B (-1: some element of the step is zero, so some
// product is): za is m x steps, zb steps x n.
inline void StepZeroFlags(const CodeMatrix<int32_t>& ea, const CodeMatrix<int32_t>& eb, int32_t zero_code, size_t step,
                          bool parallel, std::vector<int32_t>& za, std::vector<int32_t>& zb) {
  const size_t m = ea.rows, k = ea.cols, n = eb.cols, ns = (k + step - 1) / step;
  za.assign(m * ns, 0);
  zb.assign(ns * n, 0);
  bool zero_a[256], zero_b[256];
  for (int c = 0; c < 256; ++c) zero_a[c] = ea.table[c] == zero_code, zero_b[c] = eb.table[c] == zero_code;
#pragma omp parallel for schedule(static) if (parallel)
  for (long i = 0; i < static_cast<long>(m); ++i)
    for (size_t kk = 0; kk < k; ++kk)
      if (zero_a[ea.codes[i * k + kk]]) za[i * ns + kk / step] = -1;
#pragma omp parallel for schedule(static) if (parallel)
  for (long si = 0; si < static_cast<long>(ns); ++si)
    for (size_t kk = si * step; kk < std::min(k, (si + 1) * step); ++kk)
      for (size_t j = 0; j < n; ++j) zb[si * n + j] |= zero_b[eb.codes[kk * n + j]] ? -1 : 0;
}

// emax_p of R rows (R even) x 2 vectors of int32 columns over `len` k: eap points at the step's first k
// of A's int8 panel (2 R per k, PackRowsExp8Pairs), ebp at B's (2 nr per k). out[r][h] gets kNoProduct
// where every product is zero.
template <size_t R, class DI32>
HWY_INLINE void MaxProductExps(DI32 di, const int8_t* eap, const int8_t* ebp, size_t len, hn::Vec<DI32> (&out)[R][2]) {
  static_assert(R % 2 == 0, "rows in pairs");
  const hn::Repartition<int8_t, DI32> d8;
  const hn::Repartition<int16_t, DI32> d16;
  const hn::Half<decltype(d16)> dh16;
  const size_t nr = hn::Lanes(d16);
  hn::Vec<decltype(d8)> mx[R / 2];
  for (size_t pr = 0; pr < R / 2; ++pr) mx[pr] = hn::Set(d8, -128);
  for (size_t kk = 0; kk < len; ++kk) {
    auto eb = hn::LoadU(d8, ebp + kk * 2 * nr);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    __asm__("" : "+x"(eb.raw));  // one load per k, not one per pair of rows (GCC folds it into each add)
#endif
    HWY_UNROLL(3)
    for (size_t pr = 0; pr < R / 2; ++pr) {
      int32_t four;
      std::memcpy(&four, eap + kk * 2 * R + 4 * pr, sizeof(four));
      // (the running max second: GCC then keeps it in place instead of copying it back each k)
      mx[pr] = hn::Max(hn::Add(hn::BitCast(d8, hn::Set(di, four)), eb), mx[pr]);
    }
  }
  const auto none = hn::Set(di, kNoProduct), floor = hn::Set(di, -2 * kExp8Limit);
  const auto widen = [&](hn::Vec<decltype(d16)> v, hn::Vec<DI32>(&o)[2]) {
    o[0] = hn::PromoteTo(di, hn::LowerHalf(dh16, v));
    o[1] = hn::PromoteTo(di, hn::UpperHalf(dh16, v));
    for (auto& x : o) x = hn::IfThenElse(hn::Lt(x, floor), none, x);
  };
  for (size_t pr = 0; pr < R / 2; ++pr) {
    const auto v = hn::BitCast(d16, mx[pr]);
    widen(hn::ShiftRight<8>(hn::ShiftLeft<8>(v)), out[2 * pr]);  // row 2 pr: the low bytes
    widen(hn::ShiftRight<8>(v), out[2 * pr + 1]);
  }
}

// ---- FP64 steps of the fused kernels (gemm_group_simd.cc, gemm_scaled_simd.cc) ----------------------

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

// v with its bits below FP32's 24 cleared: rounded toward zero to 24 bits, so narrowing it is exact.
template <class DD>
HWY_INLINE hn::Vec<DD> ClearBelowF32(DD dd, hn::Vec<DD> v) {
  const hn::RebindToUnsigned<DD> du64;
  return hn::BitCast(dd, hn::And(hn::BitCast(du64, v), hn::Set(du64, ~uint64_t{0x1FFFFFFF})));
}
// A step whose sum is exact in FP64 (no term truncated): the lanes whose result is that sum rounded once
// to FP32, zero or a normal number (WholeInRange; elsewhere the exact step rounds it), and that result,
// toward zero or to nearest even, +0 for a zero sum (WholeToF32).
template <class DD>
HWY_INLINE hn::Mask<DD> WholeInRange(DD dd, hn::Vec<DD> sum) {
  const auto a = hn::Abs(sum);
  return hn::Or(hn::Eq(sum, hn::Zero(dd)), hn::And(hn::Ge(a, hn::Set(dd, 0x1p-126)), hn::Lt(a, hn::Set(dd, 0x1p127))));
}
template <bool kRne, class DD>
HWY_INLINE hn::Vec<hn::Rebind<float, DD>> WholeToF32(DD dd, hn::Vec<DD> sum) {
  const hn::Rebind<float, DD> dh;
  return DemoteToF32(dh, hn::IfThenZeroElse(hn::Eq(sum, hn::Zero(dd)), kRne ? sum : ClearBelowF32(dd, sum)));
}

// H outputs of a step whose exact FP64 sum `sum` is rounded once (WholeInRange, WholeToF32) into at; false,
// writing nothing, where some result falls outside FP32's normal range (the exact step rounds those).
template <bool kOutRne, class DD>
HWY_INLINE bool StoreWholeStep(DD dd, hn::Vec<DD> sum, float* at) {
  if (!hn::AllTrue(dd, WholeInRange(dd, sum))) return false;
  hn::StoreU(WholeToF32<kOutRne>(dd, sum), hn::Rebind<float, DD>(), at);
  return true;
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
  return DemoteToF32(df, hn::IfThenZeroElse(hn::Eq(s, hn::Zero(dd)), hn::CopySign(mag, s)));
}

// H outputs of an exact step: the term sum (units of 2^unit) rounded to out_bits by GroupOut into at. A
// part (the outputs' value before the step) or a result that left the finite range marks the output NaN,
// which sends it to the reference; NaN stays NaN.
template <bool kOutRne, class DD, class VI64>
HWY_INLINE void StoreExactStep(DD dd, hn::Vec<DD> sum, VI64 unit, int out_bits, hn::Vec<hn::Rebind<float, DD>> part,
                               float* at) {
  const hn::Rebind<float, DD> dh;
  const auto out = GroupOut<kOutRne>(dd, sum, unit, out_bits);
  const auto bad = hn::Or(hn::Not(hn::IsFinite(out)), hn::Not(hn::IsFinite(part)));
  hn::StoreU(hn::IfThenElse(bad, DemoteToF32(dh, hn::Set(dd, std::numeric_limits<double>::quiet_NaN())), out), dh, at);
}

#endif  // HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#endif  // QMX_GEMM_PACK_INL_H_
