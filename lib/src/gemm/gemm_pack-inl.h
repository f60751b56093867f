// gemm_pack-inl.h: the packed operands, C tiles and thread loop nest that the Highway GEMM kernels share
// (gemm_simd.cc, gemm_fused_simd.cc, gemm_group_simd.cc, gemm_scaled_simd.cc), compiled once per target,
// and the FP64 step helpers of the fused kernels.
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

#include <algorithm>
#include <cstring>
#include <limits>

#include "fp_env.h"
#include "simd_lanes-inl.h"
#include "gemm/gemm_simd.h"
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

constexpr size_t kMr = 6;       // rows of a micro-tile (FMA and block kernels)
constexpr size_t kFusedMr = 4;  // rows of a micro-tile with more state per output (fused)
constexpr size_t kKc = 256;     // K per chunk (rounded to a multiple of the kernel's block)
constexpr size_t kMcPanels = 8;   // A panels per thread's block

template <typename T>
using Buf = hwy::AlignedFreeUniquePtr<T[]>;

// A rows x cols matrix as panels of w rows: panel p holds, for each column c, value(p*w + r, c) side by
// side for r < w (zero beyond the last row). fill(row, d) writes row `row`'s values to d[0], d[w], ...
template <typename T, class Fill>
Buf<T> PanelRows(size_t rows, size_t cols, size_t w, bool parallel, const Fill& fill) {
  const long panels = static_cast<long>((rows + w - 1) / w);
  Buf<T> dst = hwy::AllocateAligned<T>(std::max<size_t>(1, panels * cols * w));
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
  Buf<T> dst = hwy::AllocateAligned<T>(std::max<size_t>(1, panels * rows * w));
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
// one tile in order and on one thread.
template <class TileFn>
void Drive(size_t m_panels, size_t n_panels, size_t k, size_t kc, bool parallel, const TileFn& tile) {
  const long blocks = static_cast<long>((m_panels + kMcPanels - 1) / kMcPanels);
#pragma omp parallel for schedule(dynamic) if (parallel && blocks > 1)
  for (long bi = 0; bi < blocks; ++bi) {
    const qmx::detail::ScopedDefaultFpEnv fp_env;
    const size_t p0 = static_cast<size_t>(bi) * kMcPanels, p1 = std::min(m_panels, p0 + kMcPanels);
    for (size_t pc = 0; pc < k; pc += kc) {
      const size_t len = std::min(kc, k - pc);
      for (size_t q = 0; q < n_panels; ++q)
        for (size_t p = p0; p < p1; ++p) tile(p, q, pc, len);
    }
  }
}

inline size_t ChunkFor(size_t unit) { return unit >= kKc ? unit : unit * (kKc / unit); }

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

#endif  // HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#endif  // QMX_GEMM_PACK_INL_H_
