// exact_sum.h: an exact (Kulisch-style) accumulator for sums of dyadic rationals m * 2^e, rounded once
// to FP32 at the end, and exact products of doubles. Serves the `exact` GEMM model and the exact block sums
// of the other models. Host-device functions (QMX_HOST_DEVICE): the CUDA engine's exact and block-exact
// GEMMs (gpu/src/engine_fused.cuh) run this same source per output.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "qmx/host_device.h"

namespace qmx::detail {

using u128 = unsigned __int128;

QMX_HOST_DEVICE inline int Clz64(uint64_t v) {  // v != 0
#if defined(__CUDA_ARCH__)
  return __clzll(static_cast<long long>(v));
#else
  return __builtin_clzll(v);
#endif
}
QMX_HOST_DEVICE inline int Ctz64(uint64_t v) {  // v != 0
#if defined(__CUDA_ARCH__)
  return __ffsll(static_cast<long long>(v)) - 1;
#else
  return __builtin_ctzll(v);
#endif
}
QMX_HOST_DEVICE inline uint64_t DoubleBitsHd(double x) {
  uint64_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}
QMX_HOST_DEVICE inline bool FiniteHd(double x) { return x - x == 0; }  // false for Inf and NaN

// TwoSum (Knuth): t = fl64(a + b) and e, the exact a + b - t, for finite a, b whose sum does not overflow
// (otherwise e is NaN or t is Inf). Additions only, so no FMA contraction can change it.
QMX_HOST_DEVICE inline double TwoSum(double a, double b, double& e) {
  const double t = a + b, bb = t - a;
  e = (a - (t - bb)) + (b - bb);
  return t;
}

// An exact value +-mag * 2^lsb.
struct Exact {
  bool neg = false;
  u128 mag = 0;
  int lsb = 0;
};
// A finite double as an exact value with an odd (or zero) magnitude; Inf and NaN give zero (their
// callers take specials apart first and never use the value, but converting them is undefined).
QMX_HOST_DEVICE inline Exact ExactOf(double x) {
  Exact r;
  if (x == 0 || !FiniteHd(x)) return r;
  const uint64_t bits = DoubleBitsHd(x);
  const int field = static_cast<int>((bits >> 52) & 0x7FF);
  uint64_t m = bits & ((uint64_t{1} << 52) - 1);  // subnormal: frac * 2^-1074; normal: 1.frac * 2^(field-1023)
  int lsb = -1074;
  if (field != 0) {
    m |= uint64_t{1} << 52;
    lsb = field - 1075;
  }
  const int tz = Ctz64(m);
  m >>= tz;
  lsb += tz;
  r.neg = x < 0;
  r.mag = m;
  r.lsb = lsb;
  return r;
}
// Product of exact values; the caller keeps the total width within 128 bits (elements <= 11 bits,
// FP32 factors 24 bits).
QMX_HOST_DEVICE inline Exact Mul(const Exact& x, const Exact& y) {
  Exact r;
  r.neg = x.neg != y.neg;
  r.mag = x.mag * y.mag;
  r.lsb = x.lsb + y.lsb;
  return r;
}

// Holds sum m_i * 2^e_i exactly for |m_i| < 2^64 and kLowExp <= e_i, e_i + 64 <= kHighExp, as two
// unsigned fixed-point magnitudes (positive and negative parts) so adding never propagates a borrow.
// Non-finite terms are tracked as flags. Window 2^-640 .. 2^640: products of two FP32 scales, two
// element values and K up to 2^32 stay far inside it.
class ExactSum {
 public:
  static constexpr int kLimbs = 21;  // 1344 bits
  static constexpr int kLowExp = -640;
  static constexpr int kHighExp = kLowExp + 64 * kLimbs;

  QMX_HOST_DEVICE void Clear() { *this = ExactSum(); }

  // Adds (negative ? -1 : 1) * mag * 2^exp.
  QMX_HOST_DEVICE void Add(bool negative, uint64_t mag, int exp) {
    if (mag == 0) return;
    uint64_t* limbs = negative ? neg_ : pos_;
    const int bit = exp - kLowExp;
    const int limb = bit >> 6, shift = bit & 63;
    AddAt(limbs, limb, mag << shift);
    if (shift) AddAt(limbs, limb + 1, mag >> (64 - shift));
  }
  // The same for a magnitude of up to 128 bits.
  QMX_HOST_DEVICE void Add(bool negative, u128 mag, int exp) {
    Add(negative, static_cast<uint64_t>(mag), exp);
    Add(negative, static_cast<uint64_t>(mag >> 64), exp + 64);
  }
  // Adds a double exactly: its significand (with the hidden bit where normal) at its exponent, read from
  // the bits (no frexp / ldexp: the exact model's scaled path adds four doubles per block).
  QMX_HOST_DEVICE void AddDouble(double x) {
    const uint64_t b = DoubleBitsHd(x);
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
  void AddProduct3(double s, double w, double u) {  // host only (the CPU's scaled exact path)
    const double h1 = s * w, l1 = std::fma(s, w, -h1);
    const double h2 = h1 * u, l2 = std::fma(h1, u, -h2);
    const double h3 = l1 * u, l3 = std::fma(l1, u, -h3);
    AddDouble(h2);
    AddDouble(l2);
    AddDouble(h3);
    AddDouble(l3);
  }
  QMX_HOST_DEVICE void AddSpecial(double x) {
    if (x != x) nan_ = true;
    else if (x > 0) pos_inf_ = true;
    else neg_inf_ = true;
  }
  QMX_HOST_DEVICE void AddNan() { nan_ = true; }
  QMX_HOST_DEVICE void AddAll(const ExactSum& o) {
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
  QMX_HOST_DEVICE float RoundToFloat(bool negative_zero = false) const {
    const float inf = hd::F32FromBits(0x7F800000u);
    if (nan_ || (pos_inf_ && neg_inf_)) return hd::F32FromBits(0x7FC00000u);
    if (pos_inf_) return inf;
    if (neg_inf_) return -inf;
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
    const int msb = top * 64 + 63 - Clz64(d[top]);              // bit index of the leading one
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
    // kept * 2^lsb_exp, exactly representable unless it overflows (a power of two from its bits: lsb_exp is
    // within -149 .. kHighExp, inside a double's normal range).
    const double v = static_cast<double>(kept) * Pow2(lsb_exp);
    if (v >= 0x1p128) return negative ? -inf : inf;
    const float f = static_cast<float>(v);
    return negative ? -f : f;
  }

 private:
  QMX_HOST_DEVICE static double Pow2(int e) {
    const uint64_t b = static_cast<uint64_t>(e + 1023) << 52;
    double v;
    memcpy(&v, &b, 8);
    return v;
  }
  QMX_HOST_DEVICE static void AddAt(uint64_t* limbs, int i, uint64_t v) {
    while (v && i < kLimbs) {
      const uint64_t s = limbs[i] + v;
      v = s < v ? 1 : 0;
      limbs[i] = s;
      ++i;
    }
  }
  QMX_HOST_DEVICE static int Compare(const uint64_t* a, const uint64_t* b) {
    for (int i = kLimbs - 1; i >= 0; --i)
      if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
  }
  QMX_HOST_DEVICE static void Sub(const uint64_t* a, const uint64_t* b, uint64_t* d) {  // a >= b
    uint64_t borrow = 0;
    for (int i = 0; i < kLimbs; ++i) {
      const uint64_t t = a[i] - b[i];
      const uint64_t r = t - borrow;
      borrow = (a[i] < b[i] || t < borrow) ? 1 : 0;
      d[i] = r;
    }
  }
  QMX_HOST_DEVICE static bool Bit(const uint64_t* d, int i) { return (d[i >> 6] >> (i & 63)) & 1; }
  QMX_HOST_DEVICE static bool AnyBelow(const uint64_t* d, int i) {  // any bit of index < i
    const int limb = i >> 6, shift = i & 63;
    for (int k = 0; k < limb; ++k)
      if (d[k]) return true;
    return shift && (d[limb] & ((1ull << shift) - 1));
  }
  QMX_HOST_DEVICE static uint64_t ExtractBits(const uint64_t* d, int lo, int n) {  // n <= 24, lo may be negative
    uint64_t r = 0;
    for (int k = n - 1; k >= 0; --k) r = (r << 1) | ((lo + k >= 0 && Bit(d, lo + k)) ? 1 : 0);
    return r;
  }

  uint64_t pos_[kLimbs] = {};
  uint64_t neg_[kLimbs] = {};
  bool nan_ = false, pos_inf_ = false, neg_inf_ = false;
};

// Adds the product of n factors (element values and scales) to `sum` exactly. Non-finite factors give the
// double product's NaN or signed Inf; a zero product keeps `all_neg_zero` only when it is -0. The caller keeps
// the product's width within 128 bits (qmx::detail::Mul).
QMX_HOST_DEVICE inline void AddExactFactors(ExactSum& sum, bool& all_neg_zero, const double* factors, int n) {
  double dp = 1.0;  // the double product: exact enough for its class and sign
  bool finite = true;
  Exact p;
  p.mag = 1;
  for (int i = 0; i < n; ++i) {
    const double f = factors[i];
    dp *= f;
    finite = finite && FiniteHd(f);
    if (finite) p = Mul(p, ExactOf(f));
  }
  if (!finite) {
    sum.AddSpecial(dp);
    all_neg_zero = false;
  } else if (p.mag == 0) {
    all_neg_zero = all_neg_zero && DoubleBitsHd(dp) >> 63;
  } else {
    all_neg_zero = false;
    sum.Add(p.neg, p.mag, p.lsb);
  }
}

}  // namespace qmx::detail
