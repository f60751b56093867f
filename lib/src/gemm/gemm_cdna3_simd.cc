// gemm_cdna3_simd.cc: the Highway kernel of cdna3-fp8 (AMD MI300's FP8 MFMA, gemm_ref.cc's Cdna3Step; see
// gemm_simd.h), compiled for every target and chosen at run time.
//
// A step's products are summed exactly in int32 lanes: each row of A and each column of B is scaled, per
// step, to its own lowest set bit lo, so that every element is an integer x (an int16, or the split 2^8 h + l
// where it is not), and pairs of K multiply and add in one widening multiply-add (PMADDWD; VPDPWSSD with
// AVX512-VNNI). Beside the sums the kernel keeps each output's largest product exponent E (int16 max-plus).
// Cdna3Step cuts nothing where (a) sum |x| max |y| < 2^31, so the int32 sum is exact; (b) every product's LSB
// (at least lo_a + lo_b) lies at or above 2^(E - F), so no half cuts a term and no half sum is floored; (c)
// that LSB lies at or above 2^(ec - 31), ec C's exponent, so the products' sum is not floored at
// max(E, ec) - 31; (d) the sum is an FP32 number. C is kept whole where ec >= E - 1 (its LSB, at least
// 2^(ec - 23), then lies at or above the cut 2^(max(E, ec) - 24)) and otherwise floored to a multiple of
// 2^(E - 24) or dropped below E - 25, as the reference does. The step's result is then the exact sum plus C
// rounded once: one FP32 addition (IEEE's rounding is FusedOut's rule to 24 bits with -126 and 2^128). Where a
// check fails, (b) is tried again with the products' own lowest set bit, and FixLane takes the rest: the
// reference's tail in FP64 on the exact sum (formed again in int64 where (a) failed), or the caller's exact
// step (Cdna3StepOne) where a product lies below the cut or a line does not even split. On N(0, 64) E4M3FNUZ
// operands 0.2 % of the output steps leave the vector path.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "gemm/gemm_cdna3_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "fp_env.h"
#include "gemm/gemm_simd.h"
#include "hwy/highway.h"

#ifndef QMX_GEMM_CDNA3_SIMD_ONCE
#define QMX_GEMM_CDNA3_SIMD_ONCE
namespace qmx::simd::cdna3 {

constexpr size_t kCols = 32;  // B's panels: 32 columns
constexpr size_t kRows = 4;   // a tile: 4 rows of A by one panel
constexpr int16_t kZeroExp = -126;
constexpr int16_t kNoLsb = 8000;  // a zero's lowest set bit: a product with a zero lies above every bound

// The packs. Each line (a row of A or a column of B) of each step holds its elements as integers x at the
// line's lowest set bit lo (x = value / 2^lo), paired along K as words (x_k, x_k+1) of two int16, and where x
// does not fit an int16 as the split x = 2^8 h + l (h = x >> 8, 0 <= l < 2^8; lines whose h does not fit either
// take the exact step). Hot records, read every step:
// - A's row i, step s, at (i * steps + s) * ra words: `pairs` words of x pairs, then `step` words of the
//   elements' nominal exponents (the int16 twice, so that one 32-bit broadcast reads it); beside it RowMeta;
// - B's panel p, step s, at (p * steps + s) * rb words: `pairs` x 32 words of x pairs (32 columns), `step` x 32
//   int16 nominal exponents plus 127, `step` x 32 int16 lowest set bits (kNoLsb for zero), then per column the
//   bits of max |y| (int32; 1000 where y does not split), its lo (int32) and 2^lo (float).
// Cold ones: each line's h pairs then l pairs (as, bs: split ones, bsplit: some column of the panel's step
// needs the split), and A's lowest set bits (al, int16 per element).
struct RowMeta {
  int32_t thr = 0;    // 31 - bits of sum |x|: B's column keeps the int32 sum exact where bits of max |y| <= thr
  int32_t x = 0;      // lo + F + 127: with B's lo, the biased exponent of the cut 2^(E - F) that (b) allows
  float pa = 1;       // 2^lo
  int32_t split = 0;  // x needs the split
};

struct Packs {
  size_t steps = 0, pairs = 0, mp = 0, panels = 0, ra = 0, rb = 0;
  // From the packing pool (AllocateBuf): 64-byte aligned, every word written by Pack.
  Buf<uint32_t> a, b, as, bs;  // the hot records; the split's h and l pairs
  Buf<int16_t> al;             // A's elements' lowest set bits (kNoLsb for zero)
  Buf<RowMeta> am;
  Buf<uint8_t> bsplit;
  Buf<int32_t> bmax;  // per panel and step: the largest bits of max |y| among its columns
};

// The packs' sizes and buffers, which the caller's PackA and PackB fill (every word).
Packs Pack(const Cdna3GemmArgs& g);

// Per code of an operand (index 256: past K, past the last row or column): its odd significand (0 for zero),
// nominal exponent and lowest set bit (kNoLsb for zero), as int32 for the packs' gathers.
struct CodeTables32 {
  alignas(64) int32_t sig[264], nom[264], lsb[264];
  CodeTables32(const int32_t* s, const int16_t* n, const int16_t* l);
};

// Output (i, column jj of panel p), step s, where the kernel's checks failed: sum32 its int32 sum (at lo_a +
// lo_b), eb its E + 127, low its products' lowest set bit, c its accumulator. Returns the step's result.
float FixLane(const Cdna3GemmArgs& g, const Packs& pk, size_t i, size_t p, size_t jj, size_t s, int32_t sum32, int eb,
              int low, float c, uint64_t (&counts)[5]);

// The path counts (Cdna3Counts): split_a, split_b, fp64, int64, exact.
void AddCounts(const uint64_t (&n)[5]);

}  // namespace qmx::simd::cdna3
#endif

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if !HWY_HAVE_SCALABLE && HWY_TARGET != HWY_SCALAR

// The int32 lanes of f truncated toward zero; any value where f lies outside int32's range, which only has to
// differ from every int32 sum (x86's 0x80000000: the sums lie strictly inside the range).
template <class DI, class VF>
HWY_INLINE hn::Vec<DI> TruncInt(DI di, VF f) {
#if HWY_TARGET <= HWY_AVX3
  return hn::Vec<DI>{_mm512_cvttps_epi32(f.raw)};
#elif HWY_TARGET == HWY_AVX2
  return hn::Vec<DI>{_mm256_cvttps_epi32(f.raw)};
#elif HWY_TARGET <= HWY_SSSE3 && HWY_ARCH_X86
  return hn::Vec<DI>{_mm_cvttps_epi32(f.raw)};
#else
  return hn::ConvertTo(di, f);
#endif
}

// C floored to a multiple of 2^(M - 24) (C itself unless ec < E - 1, whose LSB lies below it) and dropped below
// M - 25: C 2^(24 - M), below 2^25, floored, times 2^(M - 24); a C 2^(24 - M) below 1/2 in magnitude is a
// dropped C. mb = M + 127, cabs C's bits without the sign. Returns a number that is positive in
// lanes this cannot compute (none with AVX-512's VSCALEFPS; elsewhere, M below -100 with C nonzero, where
// 2^(24 - M) is no FP32 number: M is taken at least -100, which changes nothing for C = 0).
#if HWY_TARGET <= HWY_AVX3
constexpr bool kCutLimited = false;
#else
constexpr bool kCutLimited = true;
#endif
template <class DI, class VF, class VI>
HWY_INLINE VI CutC(DI di, VF c, VI cabs, VI mb, VF& cq) {
  const hn::Rebind<float, DI> df;
#if HWY_TARGET <= HWY_AVX3
  const auto n = hn::ConvertTo(df, hn::Sub(hn::Set(di, 151), mb));  // 24 - M
  const auto x = VF{_mm512_scalef_ps(c.raw, n.raw)};
  cq =
      hn::IfThenZeroElse(hn::Lt(hn::Abs(x), hn::Set(df, 0.5f)), VF{_mm512_scalef_ps(hn::Floor(x).raw, hn::Neg(n).raw)});
  (void)cabs;
  return hn::Set(di, -1);
#else
  const auto mc = hn::Max(mb, hn::Set(di, 27));
  const auto up = hn::BitCast(df, hn::ShiftLeft<23>(hn::Sub(hn::Set(di, 278), mc)));
  const auto down = hn::BitCast(df, hn::ShiftLeft<23>(hn::Sub(mc, hn::Set(di, 24))));
  const auto x = hn::Mul(c, up);
  cq = hn::IfThenZeroElse(hn::Lt(hn::Abs(x), hn::Set(df, 0.5f)), hn::Mul(hn::Floor(x), down));
  return hn::Min(hn::Sub(hn::Set(di, 27), mb), cabs);
#endif
}

// A tile's step: the int32 sums of rows i0 .. i0 + 3 (A padded) by B's panel (record br) and the largest
// product exponents + 127 (as int32), to memory (so that the sums' registers are free for the tail). kPA and kPB:
// 1 for x itself, 2 for its split (h then l); the split's partial sums combine as 2^16 hh + 2^8 (hl + lh) + ll,
// exact in int32 arithmetic (wrapping) wherever the whole sum lies in int32's range, which (a) checks.
template <class DI, size_t kPA, size_t kPB>
HWY_NOINLINE void Cdna3Sums(const cdna3::Packs& pk, const uint32_t* const (&ar)[cdna3::kRows],
                            const uint32_t* const (&as)[cdna3::kRows], const uint32_t* br, const uint32_t* bs,
                            int32_t (&sums)[cdna3::kRows][cdna3::kCols], int32_t (&exps)[cdna3::kRows][cdna3::kCols]) {
  using namespace cdna3;
  const DI di;
  const hn::Repartition<int16_t, DI> d16;
  constexpr size_t N = hn::MaxLanes(DI()), NS = kCols / N, NE = NS / 2;
  const size_t pairs = pk.pairs;
  const int32_t* by = reinterpret_cast<const int32_t*>(kPB == 1 ? br : bs);  // B's parts
  const int16_t* be = reinterpret_cast<const int16_t*>(br + pairs * kCols);
  hn::Vec<DI> s0[kRows][NS][kPA][kPB], s1[kRows][NS][kPA][kPB];
  hn::Vec<decltype(d16)> e[kRows][NE];
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t v = 0; v < NS; ++v)
      for (size_t x = 0; x < kPA; ++x)
        for (size_t y = 0; y < kPB; ++y) s0[r][v][x][y] = s1[r][v][x][y] = hn::Zero(di);
    for (size_t w = 0; w < NE; ++w) e[r][w] = hn::Set(d16, -32000);
  }
  for (size_t q = 0; q < pairs; ++q) {
    hn::Vec<decltype(d16)> bv[kPB][NS], e0[NE], e1[NE];
    for (size_t y = 0; y < kPB; ++y)
      for (size_t v = 0; v < NS; ++v)
        bv[y][v] = hn::BitCast(d16, hn::Load(di, by + y * pairs * kCols + q * kCols + v * N));
    for (size_t w = 0; w < NE; ++w) {
      e0[w] = hn::Load(d16, be + (2 * q) * kCols + w * 2 * N);
      e1[w] = hn::Load(d16, be + (2 * q + 1) * kCols + w * 2 * N);
    }
    for (size_t r = 0; r < kRows; ++r) {
      for (size_t x = 0; x < kPA; ++x) {
        const uint32_t word = kPA == 1 ? ar[r][q] : as[r][x * pairs + q];
        const auto av = hn::BitCast(d16, hn::Set(di, static_cast<int32_t>(word)));
        for (size_t y = 0; y < kPB; ++y)
          for (size_t v = 0; v < NS; ++v)
            s0[r][v][x][y] = hn::ReorderWidenMulAccumulate(di, av, bv[y][v], s0[r][v][x][y], s1[r][v][x][y]);
      }
      const auto ea0 = hn::BitCast(d16, hn::Set(di, static_cast<int32_t>(ar[r][pairs + 2 * q])));
      const auto ea1 = hn::BitCast(d16, hn::Set(di, static_cast<int32_t>(ar[r][pairs + 2 * q + 1])));
      for (size_t w = 0; w < NE; ++w) e[r][w] = hn::Max(e[r][w], hn::Max(hn::Add(e0[w], ea0), hn::Add(e1[w], ea1)));
    }
  }
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t v = 0; v < NS; ++v) {
      auto sum = hn::Zero(di);
      for (size_t x = 0; x < kPA; ++x)
        for (size_t y = 0; y < kPB; ++y) {
          const auto part = hn::RearrangeToOddPlusEven(s0[r][v][x][y], s1[r][v][x][y]);
          const int shift = 8 * static_cast<int>((kPA == 2 && x == 0) + (kPB == 2 && y == 0));
          sum = hn::Add(sum, hn::BitCast(di, hn::ShiftLeftSame(hn::BitCast(hn::RebindToUnsigned<DI>(), part), shift)));
        }
      hn::Store(sum, di, sums[r] + v * N);
    }
    for (size_t w = 0; w < NE; ++w) {
      const hn::Rebind<int16_t, DI> dh;
      hn::Store(hn::PromoteTo(di, hn::LowerHalf(dh, e[r][w])), di, exps[r] + 2 * w * N);
      hn::Store(hn::PromoteTo(di, hn::UpperHalf(dh, e[r][w])), di, exps[r] + (2 * w + 1) * N);
    }
  }
}

#if HWY_TARGET <= HWY_AVX3 && HWY_ARCH_X86_64 && defined(__GNUC__)
#define QMX_CDNA3_VNNI 1
// Cdna3Sums with AVX512-VNNI's VPDPWSSD (the pair products and their sum added in one instruction: the same
// int32 arithmetic), where simd::VnniSums() says the CPU has it and no target without "_VNNI" or "_FP16" was
// forced (so that forcing "AVX3" tests the PMADDWD path on the same CPU).
template <size_t kPA, size_t kPB, size_t kPairs>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) HWY_NOINLINE void Cdna3SumsVnni(
    const cdna3::Packs& pk, const uint32_t* const (&ar)[cdna3::kRows], const uint32_t* const (&as)[cdna3::kRows],
    const uint32_t* br, const uint32_t* bs, int32_t (&sums)[cdna3::kRows][cdna3::kCols],
    int32_t (&exps)[cdna3::kRows][cdna3::kCols]) {
  using namespace cdna3;
  static_assert(kCols == 32, "two vectors of 16 int32, one of 32 int16");
  const size_t pairs = kPairs != 0 ? kPairs : pk.pairs;  // (a constant: the loop unrolls, the sums stay put)
  const uint32_t* by = kPB == 1 ? br : bs;
  const int16_t* be = reinterpret_cast<const int16_t*>(br + pairs * kCols);
  __m512i acc[kRows][2][kPA][kPB], e[kRows];
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t v = 0; v < 2; ++v)
      for (size_t x = 0; x < kPA; ++x)
        for (size_t y = 0; y < kPB; ++y) acc[r][v][x][y] = _mm512_setzero_si512();
    e[r] = _mm512_set1_epi16(-32000);
  }
#pragma GCC unroll 8
  for (size_t q = 0; q < pairs; ++q) {
    __m512i b[kPB][2];
    for (size_t y = 0; y < kPB; ++y)
      for (size_t v = 0; v < 2; ++v) b[y][v] = _mm512_load_si512(by + y * pairs * kCols + q * kCols + v * 16);
    const __m512i e0 = _mm512_load_si512(be + 2 * q * kCols), e1 = _mm512_load_si512(be + (2 * q + 1) * kCols);
    for (size_t r = 0; r < kRows; ++r) {
      for (size_t x = 0; x < kPA; ++x) {
        const __m512i a = _mm512_set1_epi32(static_cast<int>(kPA == 1 ? ar[r][q] : as[r][x * pairs + q]));
        for (size_t y = 0; y < kPB; ++y)
          for (size_t v = 0; v < 2; ++v) acc[r][v][x][y] = _mm512_dpwssd_epi32(acc[r][v][x][y], a, b[y][v]);
      }
      const __m512i ea0 = _mm512_set1_epi32(static_cast<int>(ar[r][pairs + 2 * q]));
      const __m512i ea1 = _mm512_set1_epi32(static_cast<int>(ar[r][pairs + 2 * q + 1]));
      e[r] = _mm512_max_epi16(e[r], _mm512_max_epi16(_mm512_add_epi16(e0, ea0), _mm512_add_epi16(e1, ea1)));
    }
  }
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t v = 0; v < 2; ++v) {
      __m512i sum = _mm512_setzero_si512();
      for (size_t x = 0; x < kPA; ++x)
        for (size_t y = 0; y < kPB; ++y) {
          const unsigned shift = 8 * ((kPA == 2 && x == 0) + (kPB == 2 && y == 0));
          sum = _mm512_add_epi32(sum, _mm512_slli_epi32(acc[r][v][x][y], shift));
        }
      _mm512_store_si512(sums[r] + 16 * v, sum);
    }
    _mm512_store_si512(exps[r], _mm512_cvtepi16_epi32(_mm512_castsi512_si256(e[r])));
    _mm512_store_si512(exps[r] + 16, _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(e[r], 1)));
  }
}
#endif

// One tile: rows i0 .. i0 + 3 (A padded) by B's panel p, every step; acc holds the tile's accumulators.
template <class DI>
HWY_INLINE void Cdna3Tile(const Cdna3GemmArgs& g, const cdna3::Packs& pk, size_t i0, size_t p,
                          float (&acc)[cdna3::kRows][cdna3::kCols], uint64_t (&counts)[5]) {
  using namespace cdna3;
  const DI di;
  const hn::Rebind<int16_t, DI> dh;
  const hn::Rebind<float, DI> df;
  constexpr size_t N = hn::MaxLanes(DI()), NS = kCols / N;
  static_assert(NS >= 2 && NS % 2 == 0, "a panel of 32 columns is an even number of int32 vectors");
  const size_t step = static_cast<size_t>(g.step);
  const int F = g.frac_bits;
#ifdef QMX_CDNA3_VNNI
  const bool vnni = N == 16 && VnniSums();
#endif
  for (size_t s = 0; s < pk.steps; ++s) {
    const size_t k0 = s * step, k1 = std::min(g.k, k0 + step);
    const uint32_t* br = &pk.b[(p * pk.steps + s) * pk.rb];
    const uint32_t* bs = &pk.bs[(p * pk.steps + s) * 2 * pk.pairs * kCols];
    const int16_t* bl = reinterpret_cast<const int16_t*>(br + pk.pairs * kCols) + step * kCols;  // B's LSBs
    const int32_t* bsp = reinterpret_cast<const int32_t*>(br + pk.pairs * kCols + step * kCols);
    const int32_t* blo = bsp + kCols;
    const float* bpb = reinterpret_cast<const float*>(blo + kCols);
    const uint32_t* ar[kRows];
    const uint32_t* as[kRows];
    for (size_t r = 0; r < kRows; ++r) {
      ar[r] = &pk.a[((i0 + r) * pk.steps + s) * pk.ra];
      as[r] = &pk.as[((i0 + r) * pk.steps + s) * 2 * pk.pairs];
    }
    HWY_ALIGN int32_t sums[kRows][kCols];
    HWY_ALIGN int32_t exps[kRows][kCols];
    // A's lowest set bits two steps ahead, for the tail's recheck: a tile that needs them finds them in L1
    // (they are cold otherwise: the blocks' hot records fill L2).
    if (s + 2 < pk.steps)
      for (size_t r = 0; r < kRows; ++r) __builtin_prefetch(&pk.al[((i0 + r) * pk.steps + s + 2) * step]);
    bool split_a = false;
    for (size_t r = 0; r < kRows; ++r) split_a = split_a || pk.am[(i0 + r) * pk.steps + s].split != 0;
    const bool split_b = pk.bsplit[p * pk.steps + s] != 0;
    counts[0] += split_a;
    counts[1] += split_b;
#ifdef QMX_CDNA3_VNNI
    if (vnni) {
      if (HWY_LIKELY(!split_a && !split_b)) {
        if (pk.pairs == 8) Cdna3SumsVnni<1, 1, 8>(pk, ar, as, br, bs, sums, exps);
        else Cdna3SumsVnni<1, 1, 0>(pk, ar, as, br, bs, sums, exps);
      } else if (!split_b) {
        Cdna3SumsVnni<2, 1, 0>(pk, ar, as, br, bs, sums, exps);
      } else if (!split_a) {
        if (pk.pairs == 8) Cdna3SumsVnni<1, 2, 8>(pk, ar, as, br, bs, sums, exps);
        else Cdna3SumsVnni<1, 2, 0>(pk, ar, as, br, bs, sums, exps);
      } else {
        Cdna3SumsVnni<2, 2, 0>(pk, ar, as, br, bs, sums, exps);
      }
    } else  // NOLINT(readability/braces)
#endif
    {
      if (HWY_LIKELY(!split_a && !split_b)) Cdna3Sums<DI, 1, 1>(pk, ar, as, br, bs, sums, exps);
      else if (!split_b) Cdna3Sums<DI, 2, 1>(pk, ar, as, br, bs, sums, exps);
      else if (!split_a) Cdna3Sums<DI, 1, 2>(pk, ar, as, br, bs, sums, exps);
      else Cdna3Sums<DI, 2, 2>(pk, ar, as, br, bs, sums, exps);
    }
    // One row's vectors; check_a: whether some column's max |y| may break the row's int32 bound (a) (else the
    // bound holds for the whole panel step: B's largest bits of max |y| at most the row's thr).
    const int32_t bmax = pk.bmax[p * pk.steps + s];
    const auto tail_row = [&](size_t r, auto check_a) {
      const RowMeta& am = pk.am[(i0 + r) * pk.steps + s];
      for (size_t v = 0; v < NS; ++v) {
        const auto sum = hn::Load(di, sums[r] + v * N);
        const auto eb = hn::Load(di, exps[r] + v * N);
        float* cp = acc[r] + v * N;
        const auto c = hn::Load(df, cp);
        const auto cabs = hn::And(hn::BitCast(di, c), hn::Set(di, 0x7FFFFFFF));
        const auto ecb = hn::Max(hn::ShiftRight<23>(cabs), hn::Set(di, 1));      // C's exponent + 127, -126 for 0
        const auto llx = hn::Add(hn::Load(di, blo + v * N), hn::Set(di, am.x));  // lo_a + lo_b + F + 127
        const auto mb = hn::Max(eb, ecb);                                        // M + 127
        // Each condition as a number that is positive where it fails: (a) bits of max |y| above thr (the sum
        // not proven within int32); (b) E - F above lo_a + lo_b and (c) ec - 31 above it, at once; M below -100
        // with C nonzero (CutC's 2^(24 - M) no FP32 number, AVX-512 aside). One compare for all; (d) the sum
        // no FP32 number.
        hn::Vec<decltype(df)> cq;
        const auto t_m = CutC(di, c, cabs, mb, cq);
        auto t = hn::Sub(hn::Max(eb, hn::Sub(ecb, hn::Set(di, 31 - F))), llx);
        if constexpr (decltype(check_a)::value) t = hn::Max(t, hn::Sub(hn::Load(di, bsp + v * N), hn::Set(di, am.thr)));
        if constexpr (kCutLimited) t = hn::Max(t, t_m);
        const auto f = hn::ConvertTo(df, sum);
        const auto inexact = hn::Ne(TruncInt(di, f), sum);
        const auto check = hn::Or(hn::Gt(t, hn::Zero(di)), inexact);
        const auto prod = hn::Mul(hn::Mul(f, hn::Load(df, bpb + v * N)), hn::Set(df, am.pa));
        hn::Store(hn::Add(prod, cq), df, cp);
        if (HWY_UNLIKELY(!hn::AllFalse(di, hn::RebindMask(di, check)))) {
          // (b) again with the products' own lowest set bits L (kNoLsb and more where all are zero): the
          // lanes where only the bound lo_a + lo_b failed keep their result; the others take FixLane.
          const int16_t* al = &pk.al[((i0 + r) * pk.steps + s) * step];
          auto low = hn::Set(di, 1 << 20);
          for (size_t kk = 0; kk < step; ++kk)
            low = hn::Min(low, hn::Add(hn::PromoteTo(di, hn::Load(dh, bl + kk * kCols + v * N)), hn::Set(di, al[kk])));
          const auto t_ac = hn::Max(hn::Max(hn::Sub(hn::Load(di, bsp + v * N), hn::Set(di, am.thr)), t_m),
                                    hn::Sub(ecb, hn::Add(llx, hn::Set(di, 31 - F))));
          const auto t_b = hn::Sub(eb, hn::Add(low, hn::Set(di, F + 127)));
          const auto bad_lanes = hn::Or(hn::Gt(hn::Max(t_ac, t_b), hn::Zero(di)), inexact);
          uint8_t bits[8] = {};
          hn::StoreMaskBits(di, bad_lanes, bits);
          uint64_t lanes;
          std::memcpy(&lanes, bits, 8);
          if (lanes == 0) continue;
          HWY_ALIGN float cs[N];
          HWY_ALIGN int32_t ss[N], es[N], lows[N];
          hn::Store(c, df, cs);
          hn::Store(sum, di, ss);
          hn::Store(eb, di, es);
          hn::Store(low, di, lows);
          for (; lanes != 0; lanes &= lanes - 1) {  // the bad lanes, lowest first
            const size_t l = static_cast<size_t>(__builtin_ctzll(lanes)), i = i0 + r, jj = v * N + l;
            if (i < g.m && p * kCols + jj < g.n)
              cp[l] = FixLane(g, pk, i, p, jj, s, ss[l], es[l], lows[l], cs[l], counts);
          }
        }
      }
    };
    for (size_t r = 0; r < kRows; ++r) {
      if (HWY_LIKELY(pk.am[(i0 + r) * pk.steps + s].thr >= bmax)) tail_row(r, std::false_type{});
      else tail_row(r, std::true_type{});
    }
  }
}

// The bits of v (the least b with v < 2^b) for 0 <= v < 2^31: FP32's exponent of v, exact where v < 2^24
// and of v without its low byte above (which keeps its top bit and leaves at most 23 significant bits).
template <class DI>
HWY_INLINE hn::Vec<DI> BitsOf(DI di, hn::Vec<DI> v) {
  const hn::Rebind<float, DI> df;
  const auto w = hn::IfThenElse(hn::Lt(v, hn::Set(di, 1 << 24)), v, hn::And(v, hn::Set(di, ~0xFF)));
  const auto e = hn::Sub(hn::ShiftRight<23>(hn::BitCast(di, hn::ConvertTo(df, w))), hn::Set(di, 126));
  return hn::Max(e, hn::Zero(di));  // 0 for v = 0 (+0.0's exponent field 0)
}

// Elements (odd significands sig at lowest set bits lsb) as integers at their line's lowest set bit lo: sig
// shifted left by lsb - lo, 0 where that passes 24 bits (those lanes of wide become all ones: the line does not
// fit the packs).
template <class DI>
HWY_INLINE hn::Vec<DI> AtLowestBit(DI di, hn::Vec<DI> sig, hn::Vec<DI> lsb, hn::Vec<DI> lo, hn::Vec<DI>& wide) {
  const auto shift = hn::IfThenZeroElse(hn::Eq(sig, hn::Zero(di)), hn::Sub(lsb, lo));
  const auto far = hn::Gt(shift, hn::Set(di, 24));
  wide = hn::Or(wide, hn::VecFromMask(di, far));
  return hn::IfThenZeroElse(far, hn::Shl(sig, hn::Min(shift, hn::Set(di, 24))));
}

// A's records (Pack's layout) from its codes, a row and step at a time in vectors along K (lanes past the step
// or past K read as code 256, a zero that changes nothing): the line's lowest set bit lo, its integers
// x = value / 2^lo (the split h = x >> 8, l = x & 0xFF), its nominal exponents and lowest set bits, and its
// RowMeta (thr from the bits of sum |x|, -969 where a shift passes 24 bits or max |x| 2^23: the line does not
// fit the packs).
template <class DI>
HWY_NOINLINE void PackA(const Cdna3GemmArgs& g, const cdna3::CodeTables32& t, cdna3::Packs& pk) {
  using namespace cdna3;
  const DI di;
  const hn::Rebind<uint8_t, DI> d8;
  const hn::Rebind<int16_t, DI> d16;
  constexpr size_t N = hn::MaxLanes(DI());
  const size_t step = static_cast<size_t>(g.step), chunks = (step + N - 1) / N;
#pragma omp parallel for schedule(static) if (g.parallel)
  for (long il = 0; il < static_cast<long>(pk.mp); ++il) {
    const size_t i = static_cast<size_t>(il);
    for (size_t s = 0; s < pk.steps; ++s) {
      const size_t k0 = s * step, k1 = i < g.m ? std::min(g.k, k0 + step) : k0;  // the row's codes in the step
      HWY_ALIGN int32_t sig[64 + N], lsb[64 + N], epair[64 + N];
      HWY_ALIGN int16_t x16[64 + N], h16[64 + N], l16[64 + N], lsb16[64 + N];
      auto lo = hn::Set(di, kNoLsb);
      for (size_t c = 0; c < chunks; ++c) {
        const size_t kc = k0 + c * N;
        hn::Vec<DI> code;
        if (kc + N <= k1) {
          code = hn::PromoteTo(di, hn::LoadU(d8, g.a_codes + i * g.k + kc));
        } else {
          HWY_ALIGN int32_t cs[N];
          for (size_t l = 0; l < N; ++l) cs[l] = kc + l < k1 && c * N + l < step ? g.a_codes[i * g.k + kc + l] : 256;
          code = hn::Load(di, cs);
        }
        const auto lb = hn::GatherIndex(di, t.lsb, code), e = hn::GatherIndex(di, t.nom, code);
        hn::Store(hn::GatherIndex(di, t.sig, code), di, sig + c * N);
        hn::Store(lb, di, lsb + c * N);
        hn::Store(hn::DemoteTo(d16, lb), d16, lsb16 + c * N);
        hn::Store(hn::Or(hn::And(e, hn::Set(di, 0xFFFF)), hn::ShiftLeft<16>(e)), di, epair + c * N);
        lo = hn::Min(lo, lb);
      }
      int32_t lo1 = hn::GetLane(hn::MinOfLanes(di, lo));
      if (lo1 == kNoLsb) lo1 = 0;  // a step of zeros
      const auto vlo = hn::Set(di, lo1);
      auto sum = hn::Zero(di), top = hn::Zero(di), wide = hn::Zero(di);
      for (size_t c = 0; c < chunks; ++c) {
        const auto x = AtLowestBit(di, hn::Load(di, sig + c * N), hn::Load(di, lsb + c * N), vlo, wide);
        hn::Store(x, di, sig + c * N);
        sum = hn::Add(sum, hn::Abs(x));  // (wraps only where some |x| passes 2^23: a line that does not fit)
        top = hn::Max(top, hn::Abs(x));
      }
      const int32_t bits_max = hn::GetLane(BitsOf(di, hn::MaxOfLanes(di, top)));
      const bool split = bits_max > 15;  // x is no int16
      const bool fits = hn::AllTrue(di, hn::Eq(wide, hn::Zero(di))) && bits_max <= 23;
      const int32_t bits1 = fits ? hn::GetLane(BitsOf(di, hn::SumOfLanes(di, sum))) : 1000;
      for (size_t c = 0; c < chunks; ++c) {
        const auto x = fits ? hn::Load(di, sig + c * N) : hn::Zero(di);
        hn::Store(hn::DemoteTo(d16, split ? hn::Zero(di) : x), d16, x16 + c * N);
        hn::Store(hn::DemoteTo(d16, hn::ShiftRight<8>(x)), d16, h16 + c * N);
        hn::Store(hn::DemoteTo(d16, hn::And(x, hn::Set(di, 0xFF))), d16, l16 + c * N);
      }
      const size_t at = i * pk.steps + s;
      uint32_t* w = &pk.a[at * pk.ra];
      uint32_t* ws = &pk.as[at * 2 * pk.pairs];
      std::memcpy(w, x16, step * 2);  // the pairs (x_2q, x_2q+1) as words: int16 in K order
      std::memcpy(w + pk.pairs, epair, step * 4);
      std::memcpy(ws, h16, step * 2);
      std::memcpy(ws + pk.pairs, l16, step * 2);
      std::memcpy(&pk.al[at * step], lsb16, step * 2);
      RowMeta& m = pk.am[at];
      m.thr = 31 - bits1;
      m.x = lo1 + g.frac_bits + 127;
      const uint32_t pa_bits = static_cast<uint32_t>(lo1 + 127) << 23;  // 2^lo (-126 <= lo <= 127)
      std::memcpy(&m.pa, &pa_bits, 4);
      m.split = split;
    }
  }
}

// B's records (Pack's layout) from its codes, a vector of columns at a time: per column of the panel step the
// line's lowest set bit lo, its integers x = value / 2^lo (the split h = x >> 8, l = x & 0xFF), the bits of
// max |x| (1000 where a shift passes 24 bits or max |x| 2^23: the line does not fit the packs), the nominal
// exponents plus 127 and the lowest set bits; per panel step whether some column splits and its largest bits.
template <class DI>
HWY_NOINLINE void PackB(const Cdna3GemmArgs& g, const cdna3::CodeTables32& t, cdna3::Packs& pk) {
  using namespace cdna3;
  const DI di;
  const hn::Rebind<uint8_t, DI> d8;
  const hn::Rebind<int16_t, DI> d16;
  const hn::Rebind<float, DI> df;
  constexpr size_t N = hn::MaxLanes(DI());
  const size_t step = static_cast<size_t>(g.step);
#pragma omp parallel for schedule(static) if (g.parallel)
  for (long pl = 0; pl < static_cast<long>(pk.panels * pk.steps); ++pl) {
    const size_t p = static_cast<size_t>(pl) / pk.steps, s = static_cast<size_t>(pl) % pk.steps;
    uint32_t* w = &pk.b[pl * pk.rb];
    uint32_t* ws = &pk.bs[pl * 2 * pk.pairs * kCols];
    int16_t* we = reinterpret_cast<int16_t*>(w + pk.pairs * kCols);
    int16_t* wl = we + step * kCols;
    int32_t* wbits = reinterpret_cast<int32_t*>(w + pk.pairs * kCols + step * kCols);
    int32_t* wlo = wbits + kCols;
    float* wpb = reinterpret_cast<float*>(wlo + kCols);
    auto split_any = hn::Zero(di), top_bits = hn::Zero(di);
    for (size_t v = 0; v < kCols / N; ++v) {
      const size_t j = p * kCols + v * N;
      HWY_ALIGN int32_t sig[64 * N], lsb[64 * N];
      auto lo = hn::Set(di, kNoLsb);
      for (size_t kk = 0; kk < step; ++kk) {
        const size_t k = s * step + kk;
        hn::Vec<DI> code;
        if (k < g.k && j + N <= g.n) {
          code = hn::PromoteTo(di, hn::LoadU(d8, g.b_codes + k * g.n + j));
        } else {
          HWY_ALIGN int32_t c[N];
          for (size_t l = 0; l < N; ++l) c[l] = k < g.k && j + l < g.n ? g.b_codes[k * g.n + j + l] : 256;
          code = hn::Load(di, c);
        }
        const auto sg = hn::GatherIndex(di, t.sig, code), lb = hn::GatherIndex(di, t.lsb, code);
        hn::Store(hn::DemoteTo(d16, hn::Add(hn::GatherIndex(di, t.nom, code), hn::Set(di, 127))), d16,
                  we + kk * kCols + v * N);
        hn::Store(hn::DemoteTo(d16, lb), d16, wl + kk * kCols + v * N);
        hn::Store(sg, di, sig + kk * N);
        hn::Store(lb, di, lsb + kk * N);
        lo = hn::Min(lo, lb);
      }
      lo = hn::IfThenZeroElse(hn::Eq(lo, hn::Set(di, kNoLsb)), lo);  // a line of zeros: lo 0
      auto top = hn::Zero(di), wide = hn::Zero(di);
      for (size_t kk = 0; kk < step; ++kk) {
        const auto x = AtLowestBit(di, hn::Load(di, sig + kk * N), hn::Load(di, lsb + kk * N), lo, wide);
        hn::Store(x, di, sig + kk * N);
        top = hn::Max(top, hn::Abs(x));
      }
      const auto bits_max = BitsOf(di, top);
      const auto split = hn::Gt(bits_max, hn::Set(di, 15));  // x is no int16
      const auto fits = hn::And(hn::Eq(wide, hn::Zero(di)), hn::Lt(bits_max, hn::Set(di, 24)));
      const auto pair = [&](hn::Vec<DI> a, hn::Vec<DI> b) {
        return hn::Or(hn::And(a, hn::Set(di, 0xFFFF)), hn::ShiftLeft<16>(b));
      };
      for (size_t q = 0; q < pk.pairs; ++q) {
        const auto x0 = hn::IfThenElseZero(fits, hn::Load(di, sig + 2 * q * N));
        const auto x1 = hn::IfThenElseZero(fits, hn::Load(di, sig + (2 * q + 1) * N));
        hn::Store(hn::IfThenZeroElse(split, pair(x0, x1)), di, reinterpret_cast<int32_t*>(w) + q * kCols + v * N);
        hn::Store(pair(hn::ShiftRight<8>(x0), hn::ShiftRight<8>(x1)), di,
                  reinterpret_cast<int32_t*>(ws) + q * kCols + v * N);
        hn::Store(pair(hn::And(x0, hn::Set(di, 0xFF)), hn::And(x1, hn::Set(di, 0xFF))), di,
                  reinterpret_cast<int32_t*>(ws) + (pk.pairs + q) * kCols + v * N);
      }
      const auto bmax = hn::IfThenElse(fits, bits_max, hn::Set(di, 1000));
      hn::Store(bmax, di, wbits + v * N);
      hn::Store(lo, di, wlo + v * N);
      hn::Store(hn::BitCast(df, hn::ShiftLeft<23>(hn::Add(lo, hn::Set(di, 127)))), df, wpb + v * N);
      split_any = hn::Or(split_any, hn::VecFromMask(di, split));
      top_bits = hn::Max(top_bits, bmax);
    }
    pk.bsplit[pl] = !hn::AllTrue(di, hn::Eq(split_any, hn::Zero(di)));
    pk.bmax[pl] = hn::GetLane(hn::MaxOfLanes(di, top_bits));
  }
}

bool GemmCdna3T(const Cdna3GemmArgs& g, float* out) {
  using namespace cdna3;
  using DI = hn::ScalableTag<int32_t>;
  if (kCols % (2 * hn::MaxLanes(DI())) != 0) return false;
  Packs pk = Pack(g);
  PackA<DI>(g, CodeTables32(g.a_sig, g.a_nom, g.a_lsb), pk);
  PackB<DI>(g, CodeTables32(g.b_sig, g.b_nom, g.b_lsb), pk);
  // Tiles of one panel by up to 128 rows, panel-major: a thread's consecutive row tiles reuse the panel's hot
  // records (about 3.4 KB a step) from its cache, and a block's A records (about 0.75 MB at K = 1024) stay in
  // L2 beside them.
  constexpr size_t kBlockRows = 128;
  const size_t blocks = (g.m + kBlockRows - 1) / kBlockRows;
  const long tiles = static_cast<long>(pk.panels * blocks);
#pragma omp parallel for schedule(dynamic) if (g.parallel)
  for (long t = 0; t < tiles; ++t) {
    const detail::ScopedDefaultFpEnv fp_env;
    uint64_t counts[5] = {0, 0, 0, 0, 0};
    const size_t p = static_cast<size_t>(t) / blocks, r0 = static_cast<size_t>(t) % blocks * kBlockRows;
    const size_t j0 = p * kCols, nc = std::min(kCols, g.n - j0);
    for (size_t i0 = r0; i0 < std::min(g.m, r0 + kBlockRows); i0 += kRows) {
      HWY_ALIGN float acc[kRows][kCols];
      const size_t rows = std::min(kRows, g.m - i0);
      for (size_t r = 0; r < kRows; ++r)
        for (size_t j = 0; j < kCols; ++j) acc[r][j] = g.c && r < rows && j < nc ? g.c[(i0 + r) * g.n + j0 + j] : 0.0f;
      Cdna3Tile<DI>(g, pk, i0, p, acc, counts);
      for (size_t r = 0; r < rows; ++r)
        for (size_t j = 0; j < nc; ++j) {
          const float x = acc[r][j];
          out[(i0 + r) * g.n + j0 + j] = std::fabs(x) <= 3.40282347e38f ? x : std::numeric_limits<float>::quiet_NaN();
        }
    }
    AddCounts(counts);
  }
  return true;
}

#else  // a scalable or scalar target: the caller's portable tiles

bool GemmCdna3T(const Cdna3GemmArgs&, float*) { return false; }

#endif

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qmx::simd {
namespace cdna3 {

Packs Pack(const Cdna3GemmArgs& g) {
  Packs pk;
  const size_t step = static_cast<size_t>(g.step);
  pk.steps = (g.k + step - 1) / step;
  pk.pairs = step / 2;
  pk.mp = (g.m + kRows - 1) / kRows * kRows;
  pk.panels = (g.n + kCols - 1) / kCols;
  pk.ra = pk.pairs + step;
  pk.rb = pk.pairs * kCols + step * kCols + 3 * kCols;
  pk.a = AllocateBuf<uint32_t>(pk.mp * pk.steps * pk.ra);
  pk.as = AllocateBuf<uint32_t>(pk.mp * pk.steps * 2 * pk.pairs);
  pk.al = AllocateBuf<int16_t>(pk.mp * pk.steps * step);
  pk.am = AllocateBuf<RowMeta>(pk.mp * pk.steps);
  pk.b = AllocateBuf<uint32_t>(pk.panels * pk.steps * pk.rb);
  pk.bs = AllocateBuf<uint32_t>(pk.panels * pk.steps * 2 * pk.pairs * kCols);
  pk.bsplit = AllocateBuf<uint8_t>(pk.panels * pk.steps);
  pk.bmax = AllocateBuf<int32_t>(pk.panels * pk.steps);
  return pk;
}

CodeTables32::CodeTables32(const int32_t* s, const int16_t* n, const int16_t* l) {
  for (int c = 0; c < 264; ++c) {
    const bool code = c < 256, nonzero = code && s[c] != 0;
    sig[c] = code ? s[c] : 0;
    nom[c] = code ? n[c] : kZeroExp;
    lsb[c] = nonzero ? l[c] : kNoLsb;
  }
}

// (b) again with the products' own lowest set bit L (at least lo_a + lo_b): where a product's lies below
// 2^(E - F), the exact step (Cdna3StepOne, on values rebuilt from the packs, or from the codes where a line
// does not fit them); (a): where the int32 sum may have wrapped, the sum again in int64 from the split (the
// exact step where a line does not split); then the reference's tail in FP64 on the exact
// sum, any C: t = floor(S 2^(31 - M)), C floored into units of 2^(M - 24) unless dropped, their sum (below
// 2^40 in units of 2^(M - 31)) rounded once.
float FixLane(const Cdna3GemmArgs& g, const Packs& pk, size_t i, size_t p, size_t jj, size_t s, int32_t sum32, int eb,
              int low, float c, uint64_t (&counts)[5]) {
  const size_t step = static_cast<size_t>(g.step), k0 = s * step, k1 = std::min(g.k, k0 + step);
  if (!std::isfinite(c)) return c;  // an accumulator that left the finite range stays there
  const int F = g.frac_bits, e = eb - 127;
  const size_t at = i * pk.steps + s, pat = p * pk.steps + s;
  const RowMeta& am = pk.am[at];
  const uint32_t* br = &pk.b[pat * pk.rb];
  const int32_t* bbits = reinterpret_cast<const int32_t*>(br + pk.pairs * kCols + step * kCols);
  const int32_t* blo = bbits + kCols;
  const int lo_a = am.x - F - 127, ll = lo_a + blo[jj];
  const size_t j = p * kCols + jj;
  const bool fits = am.thr > -900 && bbits[jj] < 1000;  // both lines in the packs (as x or as the split)
  // The step's integers x (A) and y (B) at the lines' lowest set bits: from the hot records where they are int16
  // (the split's arrays are seldom in cache).
  const uint32_t* ax = &pk.a[at * pk.ra];
  const uint32_t* as = &pk.as[at * 2 * pk.pairs];
  const uint32_t* bs = &pk.bs[pat * 2 * pk.pairs * kCols];
  const bool a_split = am.split != 0, b_split = bbits[jj] > 15;
  const auto half = [](uint32_t w, size_t kk) {
    return static_cast<int64_t>(static_cast<int16_t>(w >> (16 * (kk & 1))));
  };
  const auto x_of = [&](size_t kk) {
    const size_t q = kk / 2;
    return a_split ? half(as[q], kk) * 256 + half(as[pk.pairs + q], kk) : half(ax[q], kk);
  };
  const auto y_of = [&](size_t kk) {
    const size_t q = kk / 2;
    return b_split ? half(bs[q * kCols + jj], kk) * 256 + half(bs[(pk.pairs + q) * kCols + jj], kk)
                   : half(br[q * kCols + jj], kk);
  };
  const auto pow2 = [](int x) {  // 2^x for -1022 <= x <= 1023 (here within -300 .. 300)
    const uint64_t bits = static_cast<uint64_t>(x + 1023) << 52;
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  };
  if (e - F > low) {
    ++counts[4];
    if (!fits) return g.slow(g, i, j, k0, k1, c);
    // The elements' values x 2^lo and nominal exponents from the packs (A's as the int16 pair of its record,
    // B's plus 127), rather than from the codes, whose B column spans a cache line per element.
    double xv[64], yv[64];
    int16_t ex[64], ey[64];
    const double pa = pow2(lo_a), pb = pow2(blo[jj]);
    const int16_t* be = reinterpret_cast<const int16_t*>(br + pk.pairs * kCols);
    for (size_t kk = 0; kk < k1 - k0; ++kk) {
      xv[kk] = static_cast<double>(x_of(kk)) * pa;
      yv[kk] = static_cast<double>(y_of(kk)) * pb;
      ex[kk] = static_cast<int16_t>(ax[pk.pairs + kk] & 0xFFFF);
      ey[kk] = static_cast<int16_t>(be[kk * kCols + jj] - 127);
    }
    return g.exact(F, xv, ex, yv, ey, k1 - k0, c);
  }
  double sd = sum32;
  if (bbits[jj] > am.thr) {
    if (!fits) {
      ++counts[4];
      return g.slow(g, i, j, k0, k1, c);
    }
    ++counts[3];
    int64_t sum = 0;
    for (size_t kk = 0; kk < step; ++kk) sum += x_of(kk) * y_of(kk);
    sd = static_cast<double>(sum);  // below 2^(23 + 23 + 6)
  }
  ++counts[2];
  uint32_t cb;
  std::memcpy(&cb, &c, 4);
  const int ec = std::max(static_cast<int>((cb >> 23) & 0xFF) - 127, -126);
  const int mx = std::max(e, ec);
  const double t = std::floor(sd * pow2(ll + 31 - mx));
  const double cq = c != 0 && ec >= mx - 25 ? std::floor(static_cast<double>(c) * pow2(24 - mx)) : 0.0;
  return static_cast<float>((t + cq * 128.0) * pow2(mx - 31));
}

std::atomic<uint64_t> g_counts[5];

void AddCounts(const uint64_t (&n)[5]) {
  for (int q = 0; q < 5; ++q)
    if (n[q] != 0) g_counts[q].fetch_add(n[q], std::memory_order_relaxed);
}

}  // namespace cdna3

void Cdna3Counts(uint64_t (&counts)[5]) {
  for (int q = 0; q < 5; ++q) counts[q] = cdna3::g_counts[q].load(std::memory_order_relaxed);
}

HWY_EXPORT(GemmCdna3T);

bool GemmCdna3(const Cdna3GemmArgs& g, float* out) {
  if (g.step < 2 || g.step > 64 || g.step % 2 != 0 || g.m == 0 || g.n == 0 || g.k == 0) return false;
  return HWY_DYNAMIC_DISPATCH(GemmCdna3T)(g, out);
}

}  // namespace qmx::simd
#endif  // HWY_ONCE
