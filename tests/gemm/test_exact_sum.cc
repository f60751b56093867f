// test_exact_sum.cc: the exact accumulator's three-factor product (ExactSum::AddProduct3, which the exact
// model's fast path uses for E4M3, FP32 and second-level scales) against MPFR's exact product.
#include <mpfr.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>

#include "gemm/exact_sum.h"

namespace {

// A double with a random significand of `bits` bits (top bit set) times 2^exp.
double RandomSig(std::mt19937_64& rng, int bits, int exp) {
  const uint64_t m = (rng() >> (64 - bits)) | (uint64_t{1} << (bits - 1));
  return std::ldexp(static_cast<double>(m), exp - bits + 1);
}

}  // namespace

TEST_CASE("exact sum: AddProduct3 adds s * w * u exactly (MPFR's product subtracted leaves 0)", "[gemm]") {
  std::mt19937_64 rng(5);
  mpfr_t p, part;
  mpfr_init2(p, 256);
  mpfr_init2(part, 256);
  for (int trial = 0; trial < 20000; ++trial) {
    // A block sum of up to 53 bits, a product of two FP32 scales (48 bits) and a second-level factor (48 bits),
    // near 2^100 so that any lost part (down to 2^-59 of the product's 2^100) would survive FP32 rounding.
    const double s = RandomSig(rng, 1 + static_cast<int>(rng() % 53), 30 + static_cast<int>(rng() % 20)) * (rng() & 1 ? -1 : 1);
    const double w = RandomSig(rng, 1 + static_cast<int>(rng() % 48), 20 + static_cast<int>(rng() % 20));
    const double u = RandomSig(rng, 1 + static_cast<int>(rng() % 48), 20 + static_cast<int>(rng() % 20));
    qmx::detail::ExactSum sum;
    sum.AddProduct3(s, w, u);
    mpfr_set_d(p, s, MPFR_RNDN);
    mpfr_mul_d(p, p, w, MPFR_RNDN);  // exact: 256 bits hold 53 + 48 + 48
    mpfr_mul_d(p, p, u, MPFR_RNDN);
    const float want = mpfr_get_flt(p, MPFR_RNDN);
    // Subtract the exact product, double by double (four doubles hold its 149 bits).
    int parts = 0;
    while (!mpfr_zero_p(p) && parts < 8) {
      const double d = mpfr_get_d(p, MPFR_RNDN);
      sum.AddDouble(-d);
      mpfr_sub_d(p, p, d, MPFR_RNDN);
      ++parts;
    }
    REQUIRE(mpfr_zero_p(p));
    INFO("trial " << trial << ": s " << s << " w " << w << " u " << u);
    CHECK(sum.RoundToFloat() == 0.0f);
    // And on its own the product rounds as MPFR's does.
    qmx::detail::ExactSum alone;
    alone.AddProduct3(s, w, u);
    CHECK(alone.RoundToFloat() == want);
  }
  mpfr_clear(p);
  mpfr_clear(part);
}
