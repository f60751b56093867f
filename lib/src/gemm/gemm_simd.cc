// gemm_simd.cc: Highway GEMM kernels (see gemm_simd.h) for FP32 FMA in K order (fp32-seq), block-exact and
// exact, compiled for every target and chosen at run time. The fused models' kernel is in gemm_fused_simd.cc,
// the packing and loop nest they share in gemm_pack-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gemm/gemm_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gemm/gemm_pack-inl.h"
#include "gemm/gemm_simd.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA && !HWY_HAVE_SCALABLE

// ---- FMA in K order -----------------------------------------------------------------------------

// A kMr x NR tile of C plus len K of products, FMA in K order.
template <class D>
HWY_INLINE void SeqTile(D d, const float* HWY_RESTRICT ap, const float* HWY_RESTRICT bp, size_t len, float* c, size_t ldc) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V acc[kMr][2];
  for (size_t r = 0; r < kMr; ++r) {
    acc[r][0] = hn::LoadU(d, c + r * ldc);
    acc[r][1] = hn::LoadU(d, c + r * ldc + N);
  }
  MulAddRows<kMr, 2>(d, ap, bp, len, acc);
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
  for (size_t r = 0; r < MR; ++r) s[r][0] = s[r][1] = hn::Set(d, T(-0.0));
  MulAddRows<MR, 2>(d, ap, bp, len, s);
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
    return DemoteToF32(dh, odd);
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
  return DemoteToF32(dh, odd);
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

// What the exact kernel's tiles read (PackExact): the operands and the block scales (as doubles, and their
// exponents) in panels, and the window [lo, ...) of every term's bits in `limbs` limbs.
struct ExactPacks {
  BlockPacks bp;
  int lsb = 0, lo = 0, limbs = 0;
  bool has_c = false;
  Buf<int> pxa, pxb;
  Buf<double> pa, pb, psa, psb;
};

// The packs, or limbs = 0 where the window needs more than kMaxLimbs limbs.
ExactPacks PackExact(const BlockGemmArgs& g, const CodeMatrix<double>& a, const CodeMatrix<double>& b, int lsb,
                     bool has_c, size_t nr) {
  const bool par = g.parallel;
  ExactPacks pk;
  BlockPacks& bp = pk.bp = PlanBlocks(g, nr);
  pk.lsb = lsb;
  pk.has_c = has_c;
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
  if (limbs > kMaxLimbs) return pk;
  pk.lo = lo;
  pk.limbs = limbs;
  pk.pxa = PackRows(xa.data(), g.m, bp.nb, kMr), pk.pxb = PackCols(xb.data(), bp.nb, g.n, nr);
  pk.pa = PackRows(a, kMr, par), pk.pb = PackCols(b, nr, par);
  // The block scales as doubles (powers of two, exact), for the one-double path below.
  std::vector<double> dsa(g.sa, g.sa + g.m * bp.nb), dsb(g.sb, g.sb + bp.nb * g.n);
  pk.psa = PackRows(dsa.data(), g.m, bp.nb, kMr), pk.psb = PackCols(dsb.data(), bp.nb, g.n, nr);
  // The panels' padding rows and columns get scale 1 (packing pads with 0, which would make their quantum 0
  // and fail the bound of every edge tile; their outputs are discarded).
  for (size_t i = 0; i < bp.mp * bp.nb * kMr; ++i) pk.psa[i] = pk.psa[i] == 0 ? 1.0 : pk.psa[i];
  for (size_t i = 0; i < bp.np * bp.nb * nr; ++i) pk.psb[i] = pk.psb[i] == 0 ? 1.0 : pk.psb[i];
  bp.kc = g.k;  // one chunk: the accumulators live for the whole tile
  return pk;
}

// The one-double sums' start from C (or -0): sum, bound (the sum of |terms|) and quant (the smallest term
// quantum: C's own LSB, HUGE_VAL for a zero C).
template <class D>
HWY_INLINE void StartDoubleSums(D d, const ExactPacks& pk, const float* ct, size_t ldc, hn::Vec<D> (&sum)[kMr][2],
                                hn::Vec<D> (&bound)[kMr][2], hn::Vec<D> (&quant)[kMr][2]) {
  const size_t N = hn::Lanes(d), nr = 2 * N;
  alignas(64) double cinit[kMr * 2 * (HWY_MAX_BYTES / sizeof(double))];
  alignas(64) double cunit[kMr * 2 * (HWY_MAX_BYTES / sizeof(double))];
  for (size_t r = 0; r < kMr; ++r)
    for (size_t j = 0; j < nr; ++j) {
      const float cv = pk.has_c ? ct[r * ldc + j] : -0.0f;
      cinit[r * nr + j] = cv;
      int e = 0;
      if (cv != 0) std::frexp(cv, &e);
      cunit[r * nr + j] = cv != 0 ? std::ldexp(1.0, std::max(e - 24, -149)) : HUGE_VAL;
    }
  for (size_t r = 0; r < kMr; ++r)
    for (size_t h = 0; h < 2; ++h) {
      sum[r][h] = hn::Load(d, cinit + r * nr + h * N);
      bound[r][h] = hn::Abs(sum[r][h]);
      quant[r][h] = hn::Load(d, cunit + r * nr + h * N);
    }
}

// First the whole tile in one double per output: every term (a block sum times its two scales, and C) is
// a multiple of the output's smallest term quantum u, so while the sum of |terms| stays below 2^52 u every
// partial sum is a multiple of u below 2^53 u: representable, so each double addition is exact, and one
// conversion rounds the exact sum to FP32. The sum of |terms| is itself rounded; the margin of 2^-30
// covers that for up to 2^20 blocks. Starting from -0 (or C) keeps the reference's signed zeros: -0 only
// when every product is -0 (and C is -0 or absent). False, storing nothing, where some output of the tile
// is outside the bound (the limb path, ExactTileInLimbs, takes the tile).
template <class D>
HWY_INLINE bool ExactTileInDoubles(D d, const BlockGemmArgs& g, const ExactPacks& pk, size_t p, size_t q, float* ct,
                                   size_t ldc) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d), nr = 2 * N, nb = pk.bp.nb;
  const V quantum = hn::Set(d, std::ldexp(1.0, pk.lsb)), room = hn::Set(d, std::ldexp(1.0 - 0x1p-30, 52));
  V sum[kMr][2], bound[kMr][2], quant[kMr][2];
  StartDoubleSums(d, pk, ct, ldc, sum, bound, quant);
  for (size_t blk = 0; blk < nb; ++blk) {
    const size_t k0 = blk * g.kb, blen = std::min(g.kb, g.k - k0);
    V s[kMr][2];
    BlockSums(d, pk.pa.get() + (p * g.k + k0) * kMr, pk.pb.get() + (q * g.k + k0) * nr, blen, s);
    const double* sbv = pk.psb.get() + (q * nb + blk) * nr;
    const V sb[2] = {hn::LoadU(d, sbv), hn::LoadU(d, sbv + N)};
    for (size_t r = 0; r < kMr; ++r) {
      const V sa = hn::Set(d, pk.psa[(p * nb + blk) * kMr + r]);
      for (size_t h = 0; h < 2; ++h) {
        const V sc = hn::Mul(sa, sb[h]);
        const V term = hn::Mul(s[r][h], sc);
        sum[r][h] = hn::Add(sum[r][h], term);
        bound[r][h] = hn::Add(bound[r][h], hn::Abs(term));
        quant[r][h] = hn::Min(quant[r][h], hn::Mul(sc, quantum));
      }
    }
  }
  bool fits = true;
  for (size_t r = 0; r < kMr; ++r)
    for (size_t h = 0; h < 2; ++h) fits = fits && hn::AllTrue(d, hn::Lt(bound[r][h], hn::Mul(quant[r][h], room)));
  if (!fits) return false;
  alignas(64) double out[kMr * 2 * (HWY_MAX_BYTES / sizeof(double))];
  for (size_t r = 0; r < kMr; ++r)
    for (size_t h = 0; h < 2; ++h) hn::Store(sum[r][h], d, out + r * nr + h * N);
  for (size_t r = 0; r < kMr; ++r)
    for (size_t j = 0; j < nr; ++j) ct[r * ldc + j] = static_cast<float>(out[r * nr + j]);
  return true;
}

// The limb path's start: each output's limbs (L, zeroed) hold C, and nz whether the result may be -0 (C is -0
// or absent).
inline void StartLimbs(const ExactPacks& pk, size_t nr, const float* ct, size_t ldc, int64_t* L, char* nz) {
  std::fill(L, L + kMr * nr * pk.limbs, 0);
  for (size_t r = 0; r < kMr; ++r)
    for (size_t j = 0; j < nr; ++j) {
      const float cv = ct[r * ldc + j];
      nz[r * nr + j] = pk.has_c ? (cv == 0 && std::signbit(cv)) : 1;
      if (pk.has_c && cv != 0) {
        uint32_t bits;
        std::memcpy(&bits, &cv, 4);
        const int field = (bits >> 23) & 0xFF;
        const int64_t mag = field ? ((bits & 0x7FFFFF) | 0x800000) : (bits & 0x7FFFFF);
        LazyAdd(L + (r * nr + j) * pk.limbs, (bits >> 31) ? -mag : mag, (field ? field - 150 : -149) - pk.lo);
      }
    }
}

// The tile in exact fixed-point accumulators (LazyAdd, L and nz this thread's): C, then each block sum (an
// integer count of quanta 2^lsb) at its scales' exponents, each output rounded once at the end (LazyRound).
template <class D>
HWY_INLINE void ExactTileInLimbs(D d, const BlockGemmArgs& g, const ExactPacks& pk, size_t p, size_t q, int64_t* L,
                                 char* nz, float* ct, size_t ldc) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d), nr = 2 * N, nb = pk.bp.nb;
  const int limbs = pk.limbs;
  const double unit = std::ldexp(1.0, -pk.lsb);
  StartLimbs(pk, nr, ct, ldc, L, nz);
  alignas(64) double sums[kMr * 2 * (HWY_MAX_BYTES / sizeof(double))];
  for (size_t blk = 0; blk < nb; ++blk) {
    const size_t k0 = blk * g.kb, blen = std::min(g.kb, g.k - k0);
    V s[kMr][2];
    BlockSums(d, pk.pa.get() + (p * g.k + k0) * kMr, pk.pb.get() + (q * g.k + k0) * nr, blen, s);
    for (size_t r = 0; r < kMr; ++r) {
      hn::Store(s[r][0], d, sums + r * nr);
      hn::Store(s[r][1], d, sums + r * nr + N);
    }
    const int* xav = pk.pxa.get() + (p * nb + blk) * kMr;
    const int* xbv = pk.pxb.get() + (q * nb + blk) * nr;
    for (size_t r = 0; r < kMr; ++r)
      for (size_t j = 0; j < nr; ++j) {
        const double sv = sums[r * nr + j];
        const size_t o = r * nr + j;
        nz[o] = nz[o] && sv == 0 && std::signbit(sv);
        if (sv != 0) LazyAdd(L + o * limbs, static_cast<int64_t>(sv * unit), pk.lsb + xav[r] + xbv[j] - pk.lo);
      }
  }
  for (size_t r = 0; r < kMr; ++r)
    for (size_t j = 0; j < nr; ++j) ct[r * ldc + j] = LazyRound(L + (r * nr + j) * limbs, limbs, pk.lo, nz[r * nr + j]);
}

// The exact kernel: the packs, then each tile whole (one K chunk) in doubles or, where that bound fails, in
// limbs (this thread's accumulators); false where the window needs more than kMaxLimbs limbs.
bool GemmExactF64T(const BlockGemmArgs& g, const CodeMatrix<double>& a, const CodeMatrix<double>& b, int lsb,
                   bool has_c, float* c) {
  const hn::ScalableTag<double> d;
  const size_t nr = 2 * hn::Lanes(d);
  const ExactPacks pk = PackExact(g, a, b, lsb, has_c, nr);
  if (pk.limbs == 0) return false;
  const CTiles tiles{c, g.m, g.n, kMr, nr};
  const int threads = omp_get_max_threads();
  std::vector<std::vector<int64_t>> acc(threads, std::vector<int64_t>(kMr * nr * pk.limbs));
  std::vector<std::vector<char>> negz(threads, std::vector<char>(kMr * nr));
  Drive(pk.bp.mp, pk.bp.np, g.k, pk.bp.kc, g.parallel, [&](size_t p, size_t q, size_t, size_t) {
    const int t = omp_get_thread_num();
    tiles.With(p, q, [&](float* ct, size_t ldc) {
      if (!ExactTileInDoubles(d, g, pk, p, q, ct, ldc))
        ExactTileInLimbs(d, g, pk, p, q, acc[t].data(), negz[t].data(), ct, ldc);
    });
  });
  return true;
}

#else  // no FMA or a scalable target: the caller's portable path

bool GemmF32SeqT(const CodeMatrix<float>&, const CodeMatrix<float>&, float*, bool) { return false; }
bool GemmBlockF32T(const BlockGemmArgs&, const CodeMatrix<float>&, const CodeMatrix<float>&, float*) { return false; }
bool GemmBlockF64T(const BlockGemmArgs&, const CodeMatrix<double>&, const CodeMatrix<double>&, float*) { return false; }
bool GemmExactF64T(const BlockGemmArgs&, const CodeMatrix<double>&, const CodeMatrix<double>&, int, bool, float*) {
  return false;
}

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
}  // namespace qmx::simd
#endif  // HWY_ONCE
