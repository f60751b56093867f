// philox_simd-inl.h: Philox4x32-10 (qmx/rng.h, Salmon et al. 2011) vectorized for the Highway kernels:
// the random words of stochastic rounding, element i taking word i % 4 of counter i / 4, as the scalar path.

// Per-target include guard: each target's pass through foreach_target.h compiles this file again.
#if defined(QMX_RNG_PHILOX_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QMX_RNG_PHILOX_SIMD_INL_H_
#undef QMX_RNG_PHILOX_SIMD_INL_H_
#else
#define QMX_RNG_PHILOX_SIMD_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"
#include "qmx/rng.h"
#include "simd_lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ------------------------------------------------------------------ random bits

// The round keys of Philox4x32-10 for one seed (key k0 + r * 0x9E3779B9, k1 + r * 0xBB67AE85 in round r),
// computed once per call and kept in memory, so that each round broadcasts them from a load.
struct PhiloxKeys {
  explicit PhiloxKeys(uint64_t s) : seed(s) {
    uint32_t a = static_cast<uint32_t>(s), b = static_cast<uint32_t>(s >> 32);
    for (int r = 0; r < 10; ++r, a += 0x9E3779B9u, b += 0xBB67AE85u) {
      k0[r] = a;
      k1[r] = b;
    }
  }
  uint64_t seed;
  uint64_t k0[10], k1[10];  // 64-bit lanes with the key in the low half
};

// Philox4x32-10 (qmx/rng.h) for counters ctr .. ctr + 2 * Lanes(u32) - 1; 8 * Lanes words stored in
// element order. Each counter's state sits in the low half of a 64-bit lane, so one MulEven gives a
// whole 32x32 -> 64 product (low half = lo; a half swap brings hi down) and the garbage above the low
// halves is never read. Four independent batches hide the multiplier's latency. Lane j of a batch holds
// counter (j % 2) * half / 2 + j / 2 of it, so that InterleaveLower/Upper of the packed word pairs
// (x0 | x1 << 32, x2 | x3 << 32) are the words in element order with no lane-crossing shuffle. Round 0
// starts from x2 = x3 = 0 and needs one multiply.
HWY_INLINE void PhiloxWords(uint64_t ctr, const PhiloxKeys& keys, uint32_t* out) {
  const DU du;
#if HWY_TARGET == HWY_SCALAR
  for (uint64_t j = 0; j < 2; ++j) {
    const uint64_t c = ctr + j;
    const Philox4x32Counter w = Philox4x32_10({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u},
                                              {static_cast<uint32_t>(keys.seed), static_cast<uint32_t>(keys.seed >> 32)});
    std::memcpy(out + 4 * j, w.data(), 16);
  }
  (void)du;
#else
  const hn::Repartition<uint64_t, DU> d64;
  using V64 = hn::Vec<decltype(d64)>;
  constexpr int kBatches = 4;
  const size_t half = hn::Lanes(d64);
  const VU m0 = hn::Set(du, 0xD2511F53u), m1 = hn::Set(du, 0xCD9E8D57u);
  const V64 lane = hn::Iota(d64, 0);
  const V64 one64 = hn::Set(d64, 1);
  const V64 perm = hn::Add(hn::ShiftRight<1>(lane), hn::IfThenElseZero(hn::Eq(hn::And(lane, one64), one64), hn::Set(d64, half / 2)));
  V64 c0[kBatches], c1[kBatches], c2[kBatches], c3[kBatches];
  for (int b = 0; b < kBatches; ++b) {
    const V64 c = hn::Add(hn::Set(d64, ctr + b * half), perm);
    // Round 0: the product of x2 = 0 is 0.
    const V64 p0 = hn::MulEven(hn::BitCast(du, c), m0);
    c0[b] = hn::Xor(hn::ShiftRight<32>(c), hn::Set(d64, keys.k0[0]));
    c1[b] = hn::Zero(d64);
    c2[b] = hn::Xor(hn::BitCast(d64, hn::Shuffle2301(hn::BitCast(du, p0))), hn::Set(d64, keys.k1[0]));
    c3[b] = p0;
  }
  HWY_UNROLL(1)  // unrolled, the rounds' state no longer fits in registers (GCC 12 spills it)
  for (int round = 1; round < 9; ++round) {
    const V64 key0 = hn::Set(d64, keys.k0[round]), key1 = hn::Set(d64, keys.k1[round]);
    for (int b = 0; b < kBatches; ++b) {
      const V64 p0 = hn::MulEven(hn::BitCast(du, c0[b]), m0);
      const V64 p1 = hn::MulEven(hn::BitCast(du, c2[b]), m1);
      c0[b] = hn::Xor(hn::Xor(hn::BitCast(d64, hn::Shuffle2301(hn::BitCast(du, p1))), c1[b]), key0);
      c1[b] = p1;
      c2[b] = hn::Xor(hn::Xor(hn::BitCast(d64, hn::Shuffle2301(hn::BitCast(du, p0))), c3[b]), key1);
      c3[b] = p0;
    }
  }
  // Round 9 leaves the word pairs whole: the half-swapped product already holds the new x1 (x3) above, so
  // only its low half takes the XOR (a merge-masked ternary logic op on AVX-512).
  const V64 key0 = hn::Set(d64, keys.k0[9]), key1 = hn::Set(d64, keys.k1[9]);
  for (int b = 0; b < kBatches; ++b) {
    const VU s1 = hn::Shuffle2301(hn::BitCast(du, hn::MulEven(hn::BitCast(du, c2[b]), m1)));
    const VU s0 = hn::Shuffle2301(hn::BitCast(du, hn::MulEven(hn::BitCast(du, c0[b]), m0)));
#if QMX_AVX512
    const V64 w01{_mm512_mask_ternarylogic_epi32(s1.raw, 0x5555, c1[b].raw, key0.raw, 0x96)};
    const V64 w23{_mm512_mask_ternarylogic_epi32(s0.raw, 0x5555, c3[b].raw, key1.raw, 0x96)};
#else
    const V64 w01 = hn::BitCast(d64, hn::OddEven(s1, hn::Xor3(s1, hn::BitCast(du, c1[b]), hn::BitCast(du, key0))));
    const V64 w23 = hn::BitCast(d64, hn::OddEven(s0, hn::Xor3(s0, hn::BitCast(du, c3[b]), hn::BitCast(du, key1))));
#endif
    uint64_t* o = reinterpret_cast<uint64_t*>(out) + 2 * b * half;
    hn::StoreU(hn::InterleaveLower(d64, w01, w23), d64, o);
    hn::StoreU(hn::InterleaveUpper(d64, w01, w23), d64, o + half);
  }
#endif
}

// Random words for consecutive elements: explicit bits, or the Philox stream through a ring buffer.
class RandomWords {
 public:
  // An inactive stream (a deterministic mode) generates nothing.
  RandomWords(uint64_t seed, uint64_t first_index, const uint32_t* bits, bool active = true)
      : keys_(seed), bits_(bits) {
    if (!active || bits_ != nullptr) return;
    const size_t lanes = hn::Lanes(DU());
    ctr_ = first_index >> 2;
    pos_ = first_index & 3;
    PhiloxWords(ctr_, keys_, buf_);
    PhiloxWords(ctr_ + 2 * lanes, keys_, buf_ + 8 * lanes);
    ctr_ += 4 * lanes;
  }
  // Words for elements i .. i + count - 1 of the call (count <= Lanes) in the low lanes.
  HWY_INLINE VU Take(size_t i, size_t count) {
    const DU du;
    const size_t lanes = hn::Lanes(du);
    if (bits_ != nullptr) {
      if (count == lanes) return hn::LoadU(du, bits_ + i);
      alignas(64) uint32_t tmp[kMaxLanes] = {};
      std::memcpy(tmp, bits_ + i, (count < kMaxLanes ? count : kMaxLanes) * sizeof(uint32_t));
      return hn::LoadU(du, tmp);
    }
    if (pos_ + lanes > 16 * lanes) {
      std::memcpy(buf_, buf_ + 8 * lanes, 8 * lanes * sizeof(uint32_t));
      pos_ -= 8 * lanes;
      PhiloxWords(ctr_, keys_, buf_ + 8 * lanes);
      ctr_ += 2 * lanes;
    }
    const VU v = hn::LoadU(du, buf_ + pos_);
    pos_ += count;
    return v;
  }

 private:
  PhiloxKeys keys_;
  const uint32_t* bits_;
  uint64_t ctr_ = 0;
  size_t pos_ = 0;
  alignas(64) uint32_t buf_[16 * kMaxLanes];
};

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#endif  // QMX_RNG_PHILOX_SIMD_INL_H_
