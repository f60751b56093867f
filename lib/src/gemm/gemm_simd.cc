// gemm_simd.cc: Highway GEMM kernels (see gemm_simd.h), compiled for every target and chosen at run time.
//
// Layout (GotoBLAS): A is packed into panels of kMr rows (for each k, the kMr values side by side), B
// into panels of NR = 2 vectors of columns (for each k, NR values), C into a padded buffer. Threads take
// blocks of A panels; for each block the K range is walked in chunks of kc (B's chunk of one panel stays
// in L1 across the block's A panels), and a micro-kernel updates one kMr x NR tile of C in registers.
// Every output is owned by one thread and sees its K terms in order, whatever the thread count, and all
// arithmetic is either exact (block sums, fused terms) or IEEE FMA in K order, so the vector width does
// not change a bit either.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gemm/gemm_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "fp_env.h"
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "gemm/gemm_simd.h"

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

size_t ChunkFor(size_t unit) { return unit >= kKc ? unit : unit * (kKc / unit); }

// ---- FMA in K order -----------------------------------------------------------------------------

template <class D>
HWY_INLINE void SeqTile(D d, const float* HWY_RESTRICT ap, const float* HWY_RESTRICT bp, size_t len, float* c, size_t ldc) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V acc[kMr][2];
  for (size_t r = 0; r < kMr; ++r) {
    acc[r][0] = hn::LoadU(d, c + r * ldc);
    acc[r][1] = hn::LoadU(d, c + r * ldc + N);
  }
  for (size_t kk = 0; kk < len; ++kk) {
    const V b0 = hn::LoadU(d, bp + kk * 2 * N), b1 = hn::LoadU(d, bp + kk * 2 * N + N);
    HWY_UNROLL(6)
    for (size_t r = 0; r < kMr; ++r) {
      const V x = hn::Set(d, ap[kk * kMr + r]);
      acc[r][0] = hn::MulAdd(x, b0, acc[r][0]);
      acc[r][1] = hn::MulAdd(x, b1, acc[r][1]);
    }
  }
  for (size_t r = 0; r < kMr; ++r) {
    hn::StoreU(acc[r][0], d, c + r * ldc);
    hn::StoreU(acc[r][1], d, c + r * ldc + N);
  }
}

bool GemmF32SeqT(const CodeMatrix<float>& a, const CodeMatrix<float>& b, float* c, bool parallel) {
  const bool par = parallel;
  const size_t m = a.rows, n = b.cols, k = a.cols;
  const hn::ScalableTag<float> d;
  const size_t nr = 2 * hn::Lanes(d);
  const size_t mp = (m + kMr - 1) / kMr, np = (n + nr - 1) / nr;
  const Buf<float> ap = PackRows(a, kMr, par), bp = PackCols(b, nr, par);
  const CTiles tiles{c, m, n, kMr, nr};
  Drive(mp, np, k, kKc, parallel, [&](size_t p, size_t q, size_t k0, size_t len) {
    tiles.With(p, q, [&](float* ct, size_t ldc) {
      SeqTile(d, ap.get() + (p * k + k0) * kMr, bp.get() + (q * k + k0) * nr, len, ct, ldc);
    });
  });
  return true;
}

// ---- exact block sums ----------------------------------------------------------------------------

// Sums of one K block for a kMr x NR tile, exact by the caller's bound, each starting from -0.
template <size_t MR = kMr, class D, typename T>
HWY_INLINE void BlockSums(D d, const T* HWY_RESTRICT ap, const T* HWY_RESTRICT bp, size_t len, hn::Vec<D> (&s)[MR][2]) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  for (size_t r = 0; r < MR; ++r) s[r][0] = s[r][1] = hn::Set(d, T(-0.0));
  for (size_t kk = 0; kk < len; ++kk) {
    const V b0 = hn::LoadU(d, bp + kk * 2 * N), b1 = hn::LoadU(d, bp + kk * 2 * N + N);
    HWY_UNROLL(6)
    for (size_t r = 0; r < MR; ++r) {
      const V x = hn::Set(d, ap[kk * MR + r]);
      s[r][0] = hn::MulAdd(x, b0, s[r][0]);
      s[r][1] = hn::MulAdd(x, b1, s[r][1]);
    }
  }
}

struct BlockPacks {
  size_t nb, mp, np, nr, kc;
};
BlockPacks PlanBlocks(const BlockGemmArgs& g, size_t nr) {
  BlockPacks b;
  b.nb = (g.k + g.kb - 1) / g.kb;
  b.mp = (g.m + kMr - 1) / kMr;
  b.np = (g.n + nr - 1) / nr;
  b.nr = nr;
  b.kc = ChunkFor(g.kb);
  return b;
}

bool GemmBlockF32T(const BlockGemmArgs& g, const CodeMatrix<float>& a, const CodeMatrix<float>& b, float* c) {
  const bool par = g.parallel;
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  const BlockPacks bp = PlanBlocks(g, 2 * N);
  const Buf<float> pa = PackRows(a, kMr, par), pb = PackCols(b, bp.nr, par);
  const Buf<float> psa = PackRows(g.sa, g.m, bp.nb, kMr), psb = PackCols(g.sb, bp.nb, g.n, bp.nr);
  const CTiles tiles{c, g.m, g.n, kMr, bp.nr};
  Drive(bp.mp, bp.np, g.k, bp.kc, g.parallel, [&](size_t p, size_t q, size_t k0, size_t len) {
    tiles.With(p, q, [&](float* ct, size_t ldc) {
    for (size_t off = 0; off < len; off += g.kb) {
      const size_t blen = std::min(g.kb, len - off), blk = (k0 + off) / g.kb;
      V s[kMr][2];
      BlockSums(d, pa.get() + (p * g.k + k0 + off) * kMr, pb.get() + (q * g.k + k0 + off) * bp.nr, blen, s);
      const float* sbv = psb.get() + (q * bp.nb + blk) * bp.nr;
      const V sb0 = hn::LoadU(d, sbv), sb1 = hn::LoadU(d, sbv + N);
      for (size_t r = 0; r < kMr; ++r) {
        const V sa = hn::Set(d, psa[(p * bp.nb + blk) * kMr + r]);
        float* row = ct + r * ldc;
        hn::StoreU(hn::MulAdd(s[r][0], hn::Mul(sa, sb0), hn::LoadU(d, row)), d, row);
        hn::StoreU(hn::MulAdd(s[r][1], hn::Mul(sa, sb1), hn::LoadU(d, row + N)), d, row + N);
      }
    }
    });
  });
  return true;
}

// x + v rounded once to FP32 (x an FP32 value held in a double, v a double, both finite): the double
// sum rounded to odd, then to FP32 (correct since 53 >= 24 + 2). Without AVX-512 the round-to-odd takes
// TwoSum's error term, and an x that overflowed to Inf earlier gives NaN: the caller recomputes those
// outputs.
template <class DD>
HWY_INLINE hn::Vec<hn::Rebind<float, DD>> AddRoundOnceF32(DD dd, hn::Vec<DD> x, hn::Vec<DD> v) {
  const hn::RebindToSigned<DD> di;
  const hn::Rebind<float, DD> dh;
#if HWY_TARGET <= HWY_AVX3
  if constexpr (std::is_same_v<hn::Vec<DD>, hn::Vec512<double>>) {
    // AVX-512's per-instruction rounding: RD(x + v) and RU(x + v) are equal when the sum is exact and are
    // neighbours otherwise, of which exactly one has an odd significand, the round-to-odd result. (An
    // Inf x stays Inf here, as fl32(Inf + v) does.)
    const __m512d down = _mm512_add_round_pd(x.raw, v.raw, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512d up = _mm512_add_round_pd(x.raw, v.raw, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
    const __mmask8 down_odd = _mm512_test_epi64_mask(_mm512_castpd_si512(down), _mm512_set1_epi64(1));
    const hn::Vec<DD> odd{_mm512_mask_blend_pd(down_odd, up, down)};
    return hn::DemoteTo(dh, odd);
  }
#endif
  const auto s = hn::Add(x, v);
  const auto bb = hn::Sub(s, x);
  const auto err = hn::Add(hn::Sub(x, hn::Sub(s, bb)), hn::Sub(v, bb));
  const auto bits = hn::BitCast(di, s);
  const auto even = hn::Eq(hn::And(bits, hn::Set(di, 1)), hn::Zero(di));
  const auto inexact = hn::RebindMask(di, hn::Ne(err, hn::Zero(dd)));
  // Truncate toward zero, then make the last bit odd: the magnitude steps up when err has s's sign
  // (the true sum lies beyond s), down otherwise: step = +1 or -1 from the sign of err xor s.
  const auto step = hn::Or(hn::ShiftRight<63>(hn::BitCast(di, hn::Xor(err, s))), hn::Set(di, 1));
  const auto odd = hn::BitCast(dd, hn::IfThenElse(hn::And(even, inexact), hn::Add(bits, step), bits));
  return hn::DemoteTo(dh, odd);
}

bool GemmBlockF64T(const BlockGemmArgs& g, const CodeMatrix<double>& a, const CodeMatrix<double>& b, float* c) {
  const bool par = g.parallel;
  const hn::ScalableTag<double> d;
  const hn::Rebind<float, decltype(d)> dh;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  // Six rows: twelve independent block sums cover the FMA latency; the FP32 accumulators stay in C's
  // tile, read and written once per block.
  constexpr size_t R = kMr;
  const BlockPacks bp = PlanBlocks(g, 2 * N);
  const Buf<double> pa = PackRows(a, R, par), pb = PackCols(b, bp.nr, par);
  const Buf<float> psa = PackRows(g.sa, g.m, bp.nb, R), psb = PackCols(g.sb, bp.nb, g.n, bp.nr);
  const CTiles tiles{c, g.m, g.n, R, bp.nr};
  Drive(bp.mp, bp.np, g.k, bp.kc, g.parallel, [&](size_t p, size_t q, size_t k0, size_t len) {
    tiles.With(p, q, [&](float* ct, size_t ldc) {
      for (size_t off = 0; off < len; off += g.kb) {
        const size_t blen = std::min(g.kb, len - off), blk = (k0 + off) / g.kb;
        V s[R][2];
        BlockSums<R>(d, pa.get() + (p * g.k + k0 + off) * R, pb.get() + (q * g.k + k0 + off) * bp.nr, blen, s);
        const float* sbv = psb.get() + (q * bp.nb + blk) * bp.nr;
        const V sb[2] = {hn::PromoteTo(d, hn::LoadU(dh, sbv)), hn::PromoteTo(d, hn::LoadU(dh, sbv + N))};
        for (size_t r = 0; r < R; ++r) {
          const V sa = hn::Set(d, static_cast<double>(psa[(p * bp.nb + blk) * R + r]));
          for (size_t h = 0; h < 2; ++h) {  // S * sa * sb: powers of two, exact
            float* at = ct + r * ldc + h * N;
            hn::StoreU(AddRoundOnceF32(d, hn::PromoteTo(d, hn::LoadU(dh, at)), hn::Mul(s[r][h], hn::Mul(sa, sb[h]))), dh, at);
          }
        }
      }
    });
  });
  return true;
}

// ---- exact: an exact accumulator per output --------------------------------------------------------

// A lazily carried fixed-point accumulator: limb i holds signed multiples of 2^(lo + 32 i); each term
// adds less than 2^32 to each of three limbs, so 2^31 terms cannot overflow a limb.
constexpr int kMaxLimbs = 48;

inline void LazyAdd(int64_t* limbs, int64_t v, int pos) {  // v * 2^(lo + pos), |v| < 2^53, pos >= 0
  const int64_t sign = v < 0 ? -1 : 1;
  const unsigned __int128 t = static_cast<unsigned __int128>(static_cast<uint64_t>(v < 0 ? -v : v)) << (pos & 31);
  int64_t* l = limbs + (pos >> 5);
  l[0] += sign * static_cast<int64_t>(static_cast<uint32_t>(t));
  l[1] += sign * static_cast<int64_t>(static_cast<uint32_t>(t >> 32));
  l[2] += sign * static_cast<int64_t>(t >> 64);
}

// The accumulator's value rounded once to FP32 (RNE; overflow to Inf; an exact zero is -0 when
// `negative_zero`).
inline float LazyRound(const int64_t* limbs, int n, int lo, bool negative_zero) {
  uint32_t dig[kMaxLimbs];
  int64_t carry = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t v = limbs[i] + carry;
    dig[i] = static_cast<uint32_t>(v);
    carry = v >> 32;  // arithmetic shift: floor division
  }
  const bool negative = carry < 0;
  if (negative) {  // magnitude of the two's complement value
    uint64_t cy = 1;
    for (int i = 0; i < n; ++i) {
      const uint64_t t = static_cast<uint64_t>(static_cast<uint32_t>(~dig[i])) + cy;
      dig[i] = static_cast<uint32_t>(t);
      cy = t >> 32;
    }
  }
  int top = n - 1;
  while (top >= 0 && dig[top] == 0) --top;
  if (top < 0) return negative_zero ? -0.0f : 0.0f;
  using u128 = unsigned __int128;
  const u128 x = (static_cast<u128>(dig[top]) << 64) | (static_cast<u128>(top >= 1 ? dig[top - 1] : 0) << 32) |
                 (top >= 2 ? dig[top - 2] : 0);
  bool sticky = false;
  for (int i = 0; i < top - 2; ++i) sticky = sticky || dig[i] != 0;
  const int msb = 127 - __builtin_clzll(static_cast<uint64_t>(x >> 64));  // >= 64
  const int sh = msb - 52;
  uint64_t r = static_cast<uint64_t>(x >> sh);
  if (sticky || (x & ((static_cast<u128>(1) << sh) - 1)) != 0) r |= 1;  // round to odd at 53 bits
  const float f = static_cast<float>(std::ldexp(static_cast<double>(r), lo + 32 * (top - 2) + sh));
  return negative ? -f : f;
}

bool GemmExactF64T(const BlockGemmArgs& g, const CodeMatrix<double>& a, const CodeMatrix<double>& b, int lsb, bool has_c,
                   float* c) {
  const bool par = g.parallel;
  const hn::ScalableTag<double> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d), nr = 2 * N;
  BlockPacks bp = PlanBlocks(g, nr);
  // Scale exponents, and the window of every term's bits.
  std::vector<int> xa(g.m * bp.nb), xb(bp.nb * g.n);
  for (size_t i = 0; i < xa.size(); ++i) xa[i] = std::ilogb(g.sa[i]);
  for (size_t i = 0; i < xb.size(); ++i) xb[i] = std::ilogb(g.sb[i]);
  const auto [xa_lo, xa_hi] = std::minmax_element(xa.begin(), xa.end());
  const auto [xb_lo, xb_hi] = std::minmax_element(xb.begin(), xb.end());
  int lo = lsb + *xa_lo + *xb_lo;
  int hi = lsb + 53 + *xa_hi + *xb_hi;  // block terms are below 2^53 quanta
  if (has_c) {
    lo = std::min(lo, -149);
    hi = std::max(hi, 128);
  }
  hi += 2 + static_cast<int>(std::ceil(std::log2(static_cast<double>(bp.nb) + 2)));
  const int limbs = (hi - lo + 31) / 32 + 3;
  if (limbs > kMaxLimbs) return false;
  const Buf<int> pxa = PackRows(xa.data(), g.m, bp.nb, kMr), pxb = PackCols(xb.data(), bp.nb, g.n, nr);
  const Buf<double> pa = PackRows(a, kMr, par), pb = PackCols(b, nr, par);
  const CTiles tiles{c, g.m, g.n, kMr, nr};
  const double unit = std::ldexp(1.0, -lsb);
  const int threads = omp_get_max_threads();
  std::vector<std::vector<int64_t>> acc(threads, std::vector<int64_t>(kMr * nr * limbs));
  std::vector<std::vector<char>> negz(threads, std::vector<char>(kMr * nr));
  bp.kc = g.k;  // one chunk: the accumulators live for the whole tile
  Drive(bp.mp, bp.np, g.k, bp.kc, g.parallel, [&](size_t p, size_t q, size_t, size_t) {
    const int t = omp_get_thread_num();
    int64_t* L = acc[t].data();
    char* nz = negz[t].data();
    tiles.With(p, q, [&](float* ct, size_t ldc) {
    std::fill(acc[t].begin(), acc[t].end(), 0);
    for (size_t r = 0; r < kMr; ++r)
      for (size_t j = 0; j < nr; ++j) {
        const float cv = ct[r * ldc + j];
        nz[r * nr + j] = has_c ? (cv == 0 && std::signbit(cv)) : 1;
        if (has_c && cv != 0) {
          uint32_t bits;
          std::memcpy(&bits, &cv, 4);
          const int field = (bits >> 23) & 0xFF;
          const int64_t mag = field ? ((bits & 0x7FFFFF) | 0x800000) : (bits & 0x7FFFFF);
          LazyAdd(L + (r * nr + j) * limbs, (bits >> 31) ? -mag : mag, (field ? field - 150 : -149) - lo);
        }
      }
    alignas(64) double sums[kMr * 2 * (HWY_MAX_BYTES / sizeof(double))];
    for (size_t blk = 0; blk < bp.nb; ++blk) {
      const size_t k0 = blk * g.kb, blen = std::min(g.kb, g.k - k0);
      V s[kMr][2];
      BlockSums(d, pa.get() + (p * g.k + k0) * kMr, pb.get() + (q * g.k + k0) * nr, blen, s);
      for (size_t r = 0; r < kMr; ++r) {
        hn::Store(s[r][0], d, sums + r * nr);
        hn::Store(s[r][1], d, sums + r * nr + N);
      }
      const int* xav = pxa.get() + (p * bp.nb + blk) * kMr;
      const int* xbv = pxb.get() + (q * bp.nb + blk) * nr;
      for (size_t r = 0; r < kMr; ++r)
        for (size_t j = 0; j < nr; ++j) {
          const double sv = sums[r * nr + j];
          const size_t o = r * nr + j;
          nz[o] = nz[o] && sv == 0 && std::signbit(sv);
          if (sv != 0) LazyAdd(L + o * limbs, static_cast<int64_t>(sv * unit), lsb + xav[r] + xbv[j] - lo);
        }
    }
    for (size_t r = 0; r < kMr; ++r)
      for (size_t j = 0; j < nr; ++j) ct[r * ldc + j] = LazyRound(L + (r * nr + j) * limbs, limbs, lo, nz[r * nr + j]);
    });
  });
  return true;
}

// ---- fused (MMA-Sim) -----------------------------------------------------------------------------

// 2^e for -126 <= e <= 127, and 0 where e < -126.
template <class DF, class VI>
HWY_INLINE hn::Vec<DF> Pow2OrZero(DF df, VI e) {
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::ShiftLeft<23>(hn::Add(e, hn::Set(di, 127)));
  return hn::IfThenZeroElse(hn::RebindMask(df, hn::Lt(e, hn::Set(di, -126))), hn::BitCast(df, bits));
}

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
  // Zero flags per (row, step) and (step, column): some product of the step is zero.
  std::vector<int32_t> za(g.m * nsteps, 0), zb(nsteps * g.n, 0);
  for (size_t i = 0; i < g.m; ++i)
    for (size_t kk = 0; kk < g.k; ++kk)
      if (g.ea.At(i, kk) == g.zero_code) za[i * nsteps + kk / step] = -1;
  for (size_t kk = 0; kk < g.k; ++kk)
    for (size_t j = 0; j < g.n; ++j)
      if (g.eb.At(kk, j) == g.zero_code) zb[(kk / step) * g.n + j] = -1;
  const Buf<float> pa = PackRows(g.a, R, par), pb = PackCols(g.b, nr, par);
  const Buf<int32_t> pea = PackRows(g.ea, R, par), peb = PackCols(g.eb, nr, par);
  const Buf<int32_t> pza = PackRows(za.data(), g.m, nsteps, R), pzb = PackCols(zb.data(), nsteps, g.n, nr);
  const size_t nb = g.sa ? (g.k + g.kb - 1) / g.kb : 0;
  Buf<float> psa, psb;
  if (g.sa) {
    psa = PackRows(g.sa, g.m, nb, R);
    psb = PackCols(g.sb, nb, g.n, nr);
  }
  const CTiles tiles{c, g.m, g.n, R, nr};
  const VI zero_code = hn::Set(di, g.zero_code), zero_exp = hn::Set(di, g.zero_exp), fbits = hn::Set(di, g.frac_bits);
  const VI exp_mask = hn::Set(di, 0xFF), bias = hn::Set(di, 127), emin = hn::Set(di, -126);
  const VI sig_mask = hn::Set(di, static_cast<int32_t>(0x807FFFFFu)), one_exp = hn::Set(di, 127 << 23);
  const VF sub_scale = hn::Set(df, 0x1p126f);
  const VF nan = hn::Set(df, std::numeric_limits<float>::quiet_NaN());

  Drive(mp, np, g.k, kc, g.parallel, [&](size_t p, size_t q, size_t k0c, size_t len) {
    tiles.With(p, q, [&](float* ct, size_t ldc) {
    VF acc[R][2];
    hn::Mask<decltype(df)> badm[R][2];  // lanes whose accumulation left the finite range
    for (size_t r = 0; r < R; ++r)
      for (size_t h = 0; h < 2; ++h) {
        acc[r][h] = hn::LoadU(df, ct + r * ldc + h * N);
        badm[r][h] = hn::Not(hn::IsFinite(acc[r][h]));
      }
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
            const VI bits = hn::BitCast(di, part[r][h]);
            pzero[r][h] = hn::RebindMask(di, hn::Eq(part[r][h], hn::Zero(df)));
            const VI field = hn::And(hn::ShiftRight<23>(bits), exp_mask);
            ec[r][h] = hn::IfThenElse(pzero[r][h], zero_code, hn::Max(hn::Sub(field, bias), emin));
            emax[r][h] = ec[r][h];
          }
        const int32_t* eap = pea.get() + (p * g.k + s0) * R;
        const int32_t* ebp = peb.get() + (q * g.k + s0) * nr;
        for (size_t kk = 0; kk < s1 - s0; ++kk) {
          const VI e0 = hn::LoadU(di, ebp + kk * nr), e1 = hn::LoadU(di, ebp + kk * nr + N);
          HWY_UNROLL(4)
          for (size_t r = 0; r < R; ++r) {
            const VI x = hn::Set(di, eap[kk * R + r]);
            emax[r][0] = hn::Max(emax[r][0], hn::Add(x, e0));
            emax[r][1] = hn::Max(emax[r][1], hn::Add(x, e1));
          }
        }
        VF g2[R][2], sum[R][2];
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
            const VI ge = hn::Min(hn::Sub(fbits, emax[r][h]), hn::Set(di, 127));
            g2[r][h] = Pow2OrZero(df, ge);
            const VI bits = hn::BitCast(di, part[r][h]);
            const auto subnormal = hn::RebindMask(df, hn::Eq(hn::And(bits, hn::Set(di, 0x7F800000)), hn::Zero(di)));
            const VF sig = hn::IfThenElse(subnormal, hn::Mul(part[r][h], sub_scale),
                                          hn::BitCast(df, hn::Or(hn::And(bits, sig_mask), one_exp)));
            const VI dacc = hn::Add(hn::Sub(ec[r][h], emax[r][h]), fbits);
            sum[r][h] = RoundInt<kTermRne>(hn::Mul(sig, Pow2OrZero(df, hn::Min(dacc, hn::Set(di, 127)))));
          }
        const float* ap = pa.get() + (p * g.k + s0) * R;
        const float* bpp = pb.get() + (q * g.k + s0) * nr;
        for (size_t kk = 0; kk < s1 - s0; ++kk) {
          const VF b0 = hn::LoadU(df, bpp + kk * nr), b1 = hn::LoadU(df, bpp + kk * nr + N);
          HWY_UNROLL(4)
          for (size_t r = 0; r < R; ++r) {
            const VF x = hn::Set(df, ap[kk * R + r]);
            sum[r][0] = hn::Add(sum[r][0], RoundInt<kTermRne>(hn::Mul(hn::Mul(x, b0), g2[r][0])));
            sum[r][1] = hn::Add(sum[r][1], RoundInt<kTermRne>(hn::Mul(hn::Mul(x, b1), g2[r][1])));
          }
        }
        for (size_t r = 0; r < R; ++r)
          for (size_t h = 0; h < 2; ++h) {
            part[r][h] = FusedOutV<kOutRne>(df, sum[r][h], hn::Sub(emax[r][h], fbits), g.out_bits);
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
    for (size_t r = 0; r < R; ++r)
      for (size_t h = 0; h < 2; ++h) hn::StoreU(hn::IfThenElse(badm[r][h], nan, acc[r][h]), df, ct + r * ldc + h * N);
    });
  });
  return true;
}

bool GemmFusedF32T(const FusedGemmArgs& g, float* c) {
  if (g.rne_terms) return g.rne_out ? GemmFusedF32Impl<true, true>(g, c) : GemmFusedF32Impl<true, false>(g, c);
  return g.rne_out ? GemmFusedF32Impl<false, true>(g, c) : GemmFusedF32Impl<false, false>(g, c);
}

#else  // no FMA or a scalable target: the caller's portable path

bool GemmF32SeqT(const CodeMatrix<float>&, const CodeMatrix<float>&, float*, bool) { return false; }
bool GemmBlockF32T(const BlockGemmArgs&, const CodeMatrix<float>&, const CodeMatrix<float>&, float*) { return false; }
bool GemmBlockF64T(const BlockGemmArgs&, const CodeMatrix<double>&, const CodeMatrix<double>&, float*) { return false; }
bool GemmExactF64T(const BlockGemmArgs&, const CodeMatrix<double>&, const CodeMatrix<double>&, int, bool, float*) {
  return false;
}
bool GemmFusedF32T(const FusedGemmArgs&, float*) { return false; }

#endif

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qmx::simd {
HWY_EXPORT(GemmF32SeqT);
HWY_EXPORT(GemmBlockF32T);
HWY_EXPORT(GemmBlockF64T);
HWY_EXPORT(GemmExactF64T);
HWY_EXPORT(GemmFusedF32T);

bool GemmF32Seq(const CodeMatrix<float>& a, const CodeMatrix<float>& b, float* c, bool parallel) {
  return HWY_DYNAMIC_DISPATCH(GemmF32SeqT)(a, b, c, parallel);
}
bool GemmBlockF32(const BlockGemmArgs& g, const CodeMatrix<float>& a, const CodeMatrix<float>& b, float* c) {
  return HWY_DYNAMIC_DISPATCH(GemmBlockF32T)(g, a, b, c);
}
bool GemmBlockF64(const BlockGemmArgs& g, const CodeMatrix<double>& a, const CodeMatrix<double>& b, float* c) {
  return HWY_DYNAMIC_DISPATCH(GemmBlockF64T)(g, a, b, c);
}
bool GemmExactF64(const BlockGemmArgs& g, const CodeMatrix<double>& a, const CodeMatrix<double>& b, int lsb, bool has_c,
                  float* c) {
  return HWY_DYNAMIC_DISPATCH(GemmExactF64T)(g, a, b, lsb, has_c, c);
}
bool GemmFusedF32(const FusedGemmArgs& g, float* c) { return HWY_DYNAMIC_DISPATCH(GemmFusedF32T)(g, c); }
}  // namespace qmx::simd
#endif  // HWY_ONCE
