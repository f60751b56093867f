// exact_sum.h: an exact (Kulisch-style) accumulator for sums of dyadic rationals m * 2^e, rounded once
// to FP32 at the end. Serves the `exact` GEMM model and the exact block sums of the other models.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace qmx::detail {

// Holds sum m_i * 2^e_i exactly for |m_i| < 2^64 and kLowExp <= e_i, e_i + 64 <= kHighExp, as two
// unsigned fixed-point magnitudes (positive and negative parts) so adding never propagates a borrow.
// Non-finite terms are tracked as flags. Window 2^-640 .. 2^640: products of two FP32 scales, two
// element values and K up to 2^32 stay far inside it.
class ExactSum {
 public:
  static constexpr int kLimbs = 21;  // 1344 bits
  static constexpr int kLowExp = -640;
  static constexpr int kHighExp = kLowExp + 64 * kLimbs;

  void Clear() { *this = ExactSum(); }

  // Adds (negative ? -1 : 1) * mag * 2^exp.
  void Add(bool negative, uint64_t mag, int exp) {
    if (mag == 0) return;
    uint64_t* limbs = negative ? neg_ : pos_;
    const int bit = exp - kLowExp;
    const int limb = bit >> 6, shift = bit & 63;
    AddAt(limbs, limb, mag << shift);
    if (shift) AddAt(limbs, limb + 1, mag >> (64 - shift));
  }
  // The same for a magnitude of up to 128 bits.
  void Add(bool negative, unsigned __int128 mag, int exp) {
    Add(negative, static_cast<uint64_t>(mag), exp);
    Add(negative, static_cast<uint64_t>(mag >> 64), exp + 64);
  }
  // Adds a double exactly: its significand (with the hidden bit where normal) at its exponent, read from
  // the bits (no frexp / ldexp: the exact model's scaled path adds four doubles per block).
  void AddDouble(double x) {
    uint64_t b;
    std::memcpy(&b, &x, 8);
    const int field = static_cast<int>((b >> 52) & 0x7FF);
    const uint64_t frac = b & ((uint64_t{1} << 52) - 1);
    if (field == 0x7FF) {
      AddSpecial(x);
    } else if (field == 0) {
      Add(b >> 63, frac, -1074);  // zero or subnormal
    } else {
      Add(b >> 63, frac | (uint64_t{1} << 52), field - 1075);
    }
  }
  // Adds s * w * u exactly: s * w splits into two doubles by an FMA (TwoProduct), each of them times u into
  // two more, and the four parts are added. Exact when no part underflows or overflows a double and every
  // part lies inside the window (the caller bounds the exponents).
  void AddProduct3(double s, double w, double u) {
    const double h1 = s * w, l1 = std::fma(s, w, -h1);
    const double h2 = h1 * u, l2 = std::fma(h1, u, -h2);
    const double h3 = l1 * u, l3 = std::fma(l1, u, -h3);
    AddDouble(h2);
    AddDouble(l2);
    AddDouble(h3);
    AddDouble(l3);
  }
  void AddSpecial(double x) {
    if (std::isnan(x)) nan_ = true;
    else if (x > 0) pos_inf_ = true;
    else neg_inf_ = true;
  }
  void AddNan() { nan_ = true; }
  void AddAll(const ExactSum& o) {
    for (int i = 0; i < kLimbs; ++i) {
      AddAt(pos_, i, o.pos_[i]);
      AddAt(neg_, i, o.neg_[i]);
    }
    nan_ |= o.nan_;
    pos_inf_ |= o.pos_inf_;
    neg_inf_ |= o.neg_inf_;
  }

  // The sum rounded to FP32 to nearest, ties to even (IEEE: overflow gives Inf, subnormal results are
  // rounded at 2^-149, an exact zero is +0 unless `negative_zero`, the sign IEEE gives a sum of zeros).
  float RoundToFloat(bool negative_zero = false) const {
    if (nan_ || (pos_inf_ && neg_inf_)) return std::numeric_limits<float>::quiet_NaN();
    if (pos_inf_) return std::numeric_limits<float>::infinity();
    if (neg_inf_) return -std::numeric_limits<float>::infinity();
    uint64_t d[kLimbs];
    bool negative = false;
    if (Compare(pos_, neg_) >= 0) {
      Sub(pos_, neg_, d);
    } else {
      Sub(neg_, pos_, d);
      negative = true;
    }
    int top = kLimbs - 1;
    while (top >= 0 && d[top] == 0) --top;
    if (top < 0) return negative_zero ? -0.0f : 0.0f;
    const int msb = top * 64 + 63 - __builtin_clzll(d[top]);  // bit index of the leading one
    const int exp = msb + kLowExp;                              // value in [2^exp, 2^(exp+1))
    // The LSB kept: 23 bits below the leading one, or 2^-149 for subnormal results.
    int lsb_exp = exp - 23;
    if (lsb_exp < -149) lsb_exp = -149;
    const int lsb = lsb_exp - kLowExp;  // bit index of the kept LSB
    // Kept bits (at most 24), the round bit and the sticky bits below it.
    uint64_t kept = ExtractBits(d, lsb, msb - lsb + 1);
    const bool round = lsb > 0 && Bit(d, lsb - 1);
    const bool sticky = lsb > 1 && AnyBelow(d, lsb - 1);
    if (round && (sticky || (kept & 1))) ++kept;
    // kept * 2^lsb_exp, exactly representable unless it overflows.
    const double v = std::ldexp(static_cast<double>(kept), lsb_exp);
    if (v >= 0x1p128) return negative ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    const float f = static_cast<float>(v);
    return negative ? -f : f;
  }

 private:
  static void AddAt(uint64_t* limbs, int i, uint64_t v) {
    while (v && i < kLimbs) {
      const uint64_t s = limbs[i] + v;
      v = s < v ? 1 : 0;
      limbs[i] = s;
      ++i;
    }
  }
  static int Compare(const uint64_t* a, const uint64_t* b) {
    for (int i = kLimbs - 1; i >= 0; --i)
      if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
  }
  static void Sub(const uint64_t* a, const uint64_t* b, uint64_t* d) {  // a >= b
    uint64_t borrow = 0;
    for (int i = 0; i < kLimbs; ++i) {
      const uint64_t t = a[i] - b[i];
      const uint64_t r = t - borrow;
      borrow = (a[i] < b[i] || t < borrow) ? 1 : 0;
      d[i] = r;
    }
  }
  static bool Bit(const uint64_t* d, int i) { return (d[i >> 6] >> (i & 63)) & 1; }
  static bool AnyBelow(const uint64_t* d, int i) {  // any bit of index < i
    const int limb = i >> 6, shift = i & 63;
    for (int k = 0; k < limb; ++k)
      if (d[k]) return true;
    return shift && (d[limb] & ((1ull << shift) - 1));
  }
  static uint64_t ExtractBits(const uint64_t* d, int lo, int n) {  // n <= 24, lo may be negative
    uint64_t r = 0;
    for (int k = n - 1; k >= 0; --k) r = (r << 1) | ((lo + k >= 0 && Bit(d, lo + k)) ? 1 : 0);
    return r;
  }

  uint64_t pos_[kLimbs] = {};
  uint64_t neg_[kLimbs] = {};
  bool nan_ = false, pos_inf_ = false, neg_inf_ = false;
};

}  // namespace qmx::detail
