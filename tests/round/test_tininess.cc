// test_tininess.cc: the underflow flag under CastOptions::tininess. Before rounding, a result is tiny when
// |x| is below the smallest normal magnitude; after rounding (IEEE 754-2019 7.5), when x rounded to the
// format's precision with an unbounded exponent range is. Two independent oracles: the x86 hardware's own
// FP64 -> FP32 conversion (SSE detects tininess after rounding), and MPFR, whose exponent range is
// effectively unbounded, rounding to the 8-bit formats' precisions.
#include <mpfr.h>

#include <catch2/catch.hpp>
#include <cfenv>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "qmx/format.h"
#include "qmx/round.h"
#include "support/hex.h"

using namespace qmx;

namespace {

uint64_t DoubleBits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

CastOptions Options(Rounding r, Tininess t) {
  CastOptions o;
  o.rounding = r;
  o.tininess = t;
  return o;
}

// Doubles around FP32's smallest normal 2^-126 and the binades below it, both signs: every offset of up to
// 2^12 units of 2^-150 .. 2^-160 below and above it (the rounding boundaries of every mode), and random
// doubles in 2^-130 .. 2^-124.
std::vector<double> NearMinNormal() {
  std::vector<double> xs;
  for (int unit : {-150, -151, -152, -160})
    for (int k = -4096; k <= 4096; ++k) xs.push_back(0x1p-126 + std::ldexp(static_cast<double>(k), unit));
  std::mt19937_64 g(7);
  std::uniform_real_distribution<double> frac(1.0, 2.0);
  for (int i = 0; i < 20000; ++i) xs.push_back(std::ldexp(frac(g), -130 + static_cast<int>(g() % 7)));
  const size_t n = xs.size();
  for (size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
  return xs;
}

// The precision-p rounding of x under qmx rounding r (not stochastic), with MPFR's unbounded exponent:
// RNA and round-to-odd from MPFR's toward-zero and away results and its ternary value.
double RoundUnbounded(double x, int p, Rounding r) {
  mpfr_t v, z, a;
  mpfr_inits2(p, v, z, a, static_cast<mpfr_ptr>(nullptr));
  double out = 0;
  const auto done = [&](mpfr_t w) { out = mpfr_get_d(w, MPFR_RNDN); };  // exact: p <= 24 bits
  switch (r) {
    case Rounding::kRne:
      mpfr_set_d(v, x, MPFR_RNDN);
      done(v);
      break;
    case Rounding::kRz:
      mpfr_set_d(v, x, MPFR_RNDZ);
      done(v);
      break;
    case Rounding::kRu:
      mpfr_set_d(v, x, MPFR_RNDU);
      done(v);
      break;
    case Rounding::kRd:
      mpfr_set_d(v, x, MPFR_RNDD);
      done(v);
      break;
    case Rounding::kRna:
    case Rounding::kRo: {
      const int tz = mpfr_set_d(z, x, MPFR_RNDZ);
      mpfr_set_d(a, x, MPFR_RNDA);
      if (tz == 0) {
        done(z);
      } else if (r == Rounding::kRo) {
        // The odd one of the two neighbours: z's last bit at precision p.
        mpfr_t two;
        mpfr_init2(two, p + 2);
        mpfr_set(two, z, MPFR_RNDN);
        const long e = mpfr_get_exp(z);  // z = 0.1xxx * 2^e
        mpfr_mul_2si(two, two, p - e, MPFR_RNDN);  // the integer significand
        const bool odd = mpfr_integer_p(two) && std::fmod(mpfr_get_d(two, MPFR_RNDN), 2.0) != 0.0;
        mpfr_clear(two);
        done(odd ? z : a);
      } else {
        // Nearest, ties away: z or a by the exact midpoint.
        const double zd = mpfr_get_d(z, MPFR_RNDN), ad = mpfr_get_d(a, MPFR_RNDN);
        const double mid = zd / 2 + ad / 2;  // exact: both are short binary fractions of one binade or two
        out = std::fabs(x) >= std::fabs(mid) ? ad : zd;
      }
      break;
    }
    default:
      FAIL("not a deterministic rounding");
  }
  mpfr_clears(v, z, a, static_cast<mpfr_ptr>(nullptr));
  return out;
}

}  // namespace

TEST_CASE("tininess: FP64 -> FP32 flags equal the x86 hardware's conversion (tininess after rounding)", "[round]") {
  const std::pair<Rounding, int> modes[] = {
      {Rounding::kRne, FE_TONEAREST}, {Rounding::kRz, FE_TOWARDZERO}, {Rounding::kRu, FE_UPWARD}, {Rounding::kRd, FE_DOWNWARD}};
  const std::vector<double> xs = NearMinNormal();
  size_t underflows_after = 0, underflows_before = 0, differ = 0;
  for (const auto& [r, fe] : modes) {
    for (const double x : xs) {
      const int old = std::fegetround();
      std::fesetround(fe);
      std::feclearexcept(FE_ALL_EXCEPT);
      volatile double vd = x;
      volatile float vf = static_cast<float>(vd);
      const bool hw_under = std::fetestexcept(FE_UNDERFLOW) != 0, hw_inexact = std::fetestexcept(FE_INEXACT) != 0;
      std::fesetround(old);
      float f = vf;
      uint32_t fb;
      std::memcpy(&fb, &f, 4);
      const RoundResult after = Convert(fmt::kFP64, DoubleBits(x), fmt::kFP32, Options(r, Tininess::kAfterRounding));
      const RoundResult before = Convert(fmt::kFP64, DoubleBits(x), fmt::kFP32, Options(r, Tininess::kBeforeRounding));
      INFO(RoundingName(r) << " x = " << std::hexfloat << x);
      REQUIRE(after.code == fb);
      REQUIRE(before.code == fb);
      REQUIRE(((after.flags & kFlagInexact) != 0) == hw_inexact);
      REQUIRE(((after.flags & kFlagUnderflow) != 0) == hw_under);
      // Before rounding: tiny is |x| < 2^-126, whatever the rounding gives.
      REQUIRE(((before.flags & kFlagUnderflow) != 0) == (hw_inexact && std::fabs(x) < 0x1p-126));
      underflows_after += hw_under;
      underflows_before += (before.flags & kFlagUnderflow) != 0;
      differ += (after.flags != before.flags);
    }
  }
  INFO(underflows_after << " underflows after rounding, " << underflows_before << " before; " << differ << " differ");
  CHECK(differ > 100);  // the cases that tell the two apart are there
  CHECK(underflows_after > 1000);
}

TEST_CASE("tininess: the 8-bit formats' underflow flag equals MPFR's unbounded rounding, every deterministic mode",
          "[round]") {
  const char* formats[] = {"e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "e4m3fnuz", "e5m2fnuz", "e4m3:special=ieee"};
  const Rounding modes[] = {Rounding::kRne, Rounding::kRna, Rounding::kRz, Rounding::kRu, Rounding::kRd, Rounding::kRo};
  size_t checked = 0, differ = 0;
  for (const char* name : formats) {
    const Format f = ParseFormat(name);
    const int p = f.man_bits + 1;
    const double min_normal = std::ldexp(1.0, f.Emin());
    // FP32 inputs around the smallest normal: every FP32 value within 2^14 ulps of it and of each of the
    // binade's p-bit rounding boundaries below it, and the FP32 values of the two binades below on a stride.
    std::vector<float> xs;
    const auto around = [&](double v, int span) {
      const float c = static_cast<float>(v);
      float lo = c, hi = c;
      for (int k = 0; k < span; ++k) {
        lo = std::nextafter(lo, 0.0f);
        hi = std::nextafter(hi, 1.0f);
        xs.push_back(lo);
        xs.push_back(hi);
      }
      xs.push_back(c);
    };
    around(min_normal, 1 << 14);
    for (int j = 1; j < (1 << p); ++j) around(min_normal - std::ldexp(static_cast<double>(j), f.Emin() - p), 64);
    for (int e = f.Emin() - 3; e < f.Emin(); ++e)
      for (int k = 0; k < 4096; ++k) xs.push_back(static_cast<float>(std::ldexp(1.0 + k / 4096.0, e)));
    const size_t n = xs.size();
    for (size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
    for (Rounding r : modes) {
      for (const float x : xs) {
        uint32_t xb;
        std::memcpy(&xb, &x, 4);
        const RoundResult after = Convert(fmt::kFP32, xb, f, Options(r, Tininess::kAfterRounding));
        const RoundResult before = Convert(fmt::kFP32, xb, f, Options(r, Tininess::kBeforeRounding));
        INFO(name << " " << RoundingName(r) << " x = " << std::hexfloat << x);
        REQUIRE(after.code == before.code);
        const bool inexact = (before.flags & kFlagInexact) != 0;
        // Inexactness itself from the decoded code, independently of the routine's flag.
        if ((before.flags & (kFlagOverflow | kFlagInvalid)) == 0)
          REQUIRE(inexact == (DecodeToDouble(f, before.code) != static_cast<double>(x)));
        const bool tiny_before = x != 0 && std::fabs(x) < min_normal;
        const bool tiny_after = x != 0 && std::fabs(RoundUnbounded(x, p, r)) < min_normal;
        REQUIRE(((before.flags & kFlagUnderflow) != 0) == (tiny_before && inexact));
        REQUIRE(((after.flags & kFlagUnderflow) != 0) == (tiny_after && inexact));
        REQUIRE((after.flags & ~kFlagUnderflow) == (before.flags & ~kFlagUnderflow));
        ++checked;
        differ += after.flags != before.flags;
      }
    }
  }
  INFO(checked << " conversions, " << differ << " with different flags");
  CHECK(differ > 1000);
}

TEST_CASE("tininess: stochastic rounding decides tininess after rounding with the same random bits", "[round][sr]") {
  // E4M3: smallest normal 2^-6, p = 4. x = (2^-6)(1 - 2^-5) = 1.1111 * 2^-7 in binary: at the unbounded
  // precision (quantum 2^-10) its significand is all ones (1.111) with the discarded fraction 1/2.
  const float x = 0x1p-6f * (1.0f - 0x1p-5f);
  uint32_t xb;
  std::memcpy(&xb, &x, 4);
  CastOptions o = Options(Rounding::kSrA, Tininess::kAfterRounding);
  o.sr_bits = 8;
  for (uint32_t r = 0; r < 256; ++r) {
    const RoundResult res = Convert(fmt::kFP32, xb, fmt::kE4M3, o, r);
    // SR-A away iff floor(nu * 2^8) + r >= 2^8: nu = 1/2 at the unbounded quantum, so r >= 128 reaches 2^-6.
    INFO("r = " << r);
    CHECK(((res.flags & kFlagUnderflow) != 0) == (r < 128));
    CHECK((res.flags & kFlagInexact) != 0);
  }
}

TEST_CASE("tininess: names and errors", "[round]") {
  CHECK(ParseTininess("before") == Tininess::kBeforeRounding);
  CHECK(ParseTininess("after") == Tininess::kAfterRounding);
  CHECK(std::string(TininessName(Tininess::kAfterRounding)) == "after");
  CHECK_THROWS_WITH(ParseTininess("late"), "--tininess must be before or after, not 'late'");
  CHECK(CastOptions{}.tininess == Tininess::kBeforeRounding);
}
