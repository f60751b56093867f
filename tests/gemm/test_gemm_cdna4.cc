// test_gemm_cdna4.cc: cdna4-mx and cdna4-mx-32x32, AMD MI350's scaled MFMA as modelled from its ISA
// documentation (exact within one instruction's K, C included, one RNE rounding per instruction). One
// instruction must equal the `exact` model with its C (exact is held to MPFR in test_gemm.cc); a longer K
// must equal that instruction chained over K, each slice's result the next slice's C; every OCP element
// pair, UE8M0 scales across the range, NaN and Inf codes.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "gemm/gemm_cases.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/gemm.h"

namespace cdna4_test {

using namespace qmx;

// A (M x K) and B (K x N) codes with one UE8M0 scale exponent per 32 K of each row of A and column of B.
struct Operands {
  Format fa, fb;
  size_t m, n, k;
  std::vector<uint8_t> a, b;
  std::vector<int> ea, eb;  // ea[i * (k / 32) + blk], eb[blk * n + j]
  // The operands of K slice [k0, k1) (k0, k1 multiples of 32), scales included.
  std::pair<GemmOperand, GemmOperand> Slice(size_t k0, size_t k1) const {
    const size_t ks = k1 - k0, nb = k / 32;
    std::vector<uint8_t> sa(m * ks), sb(ks * n);
    for (size_t i = 0; i < m; ++i)
      for (size_t t = 0; t < ks; ++t) sa[i * ks + t] = a[i * k + k0 + t];
    for (size_t t = 0; t < ks; ++t)
      for (size_t j = 0; j < n; ++j) sb[t * n + j] = b[(k0 + t) * n + j];
    GemmOperand ga = OperandFromCodes(fa, m, ks, sa.data()), gb = OperandFromCodes(fb, ks, n, sb.data());
    std::vector<uint32_t> ra, rb;
    for (size_t i = 0; i < m; ++i)
      for (size_t blk = k0 / 32; blk < k1 / 32; ++blk) ra.push_back(static_cast<uint32_t>(ea[i * nb + blk]));
    for (size_t blk = k0 / 32; blk < k1 / 32; ++blk)
      for (size_t j = 0; j < n; ++j) rb.push_back(static_cast<uint32_t>(eb[blk * n + j]));
    SetBlockScales(ga, ScaleFormat::kUe8m0, 1, 32, ra.data());
    SetBlockScales(gb, ScaleFormat::kUe8m0, 32, 1, rb.data());
    return {ga, gb};
  }
};

Operands Random(const Format& fa, const Format& fb, size_t m, size_t n, size_t k, std::mt19937& rng, bool specials,
                int lo, int hi) {
  Operands o{fa, fb, m, n, k, test::RandomCodes(fa, m * k, rng, specials), test::RandomCodes(fb, k * n, rng, specials),
             {}, {}};
  std::uniform_int_distribution<int> e(lo, hi);
  o.ea.resize(m * (k / 32));
  o.eb.resize((k / 32) * n);
  for (int& v : o.ea) v = e(rng);
  for (int& v : o.eb) v = e(rng);
  if (specials) o.ea[0] = 0xFF;  // a NaN scale
  return o;
}

TEST_CASE("gemm cdna4: one instruction is the exact sum with C, longer K its chain", "[gemm][cdna4]") {
  const std::vector<Format> formats = {fmt::kE4M3, fmt::kE5M2, fmt::kE2M3, fmt::kE3M2, fmt::kE2M1};
  std::mt19937 rng(77);
  const AccumModel exact = AccumModelByName("exact");
  size_t outputs = 0, apart_from_block_exact = 0;
  for (const char* name : {"cdna4-mx", "cdna4-mx-32x32"}) {
    const AccumModel model = AccumModelByName(name);
    const size_t step = model.exact_step;
    for (const Format& fa : formats)
      for (const Format& fb : formats)
        for (int variant = 0; variant < 3; ++variant) {
          // Scales near 1, scales far apart (blocks of one instruction 2^40 apart), and NaN / Inf codes.
          const bool specials = variant == 2;
          const Operands o =
              Random(fa, fb, 5, 7, 4 * step, rng, specials, variant == 1 ? 87 : 120, variant == 1 ? 167 : 134);
          std::vector<float> c(o.m * o.n);
          for (float& v : c)
            v = std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000),
                           static_cast<int>(rng() % 20) - 12);
          c[3] = -0.0f;
          INFO(name << " " << fa.name << " x " << fb.name << " variant " << variant);
          const auto [ga, gb] = o.Slice(0, o.k);
          const std::vector<float> got = Gemm(ga, gb, c.data(), model);
          test::RequireSame(got, GemmRef(ga, gb, c.data(), model), "fast path vs reference");
          std::vector<float> chain = c;
          for (size_t k0 = 0; k0 < o.k; k0 += step) {
            const auto [sa, sb] = o.Slice(k0, k0 + step);
            chain = Gemm(sa, sb, chain.data(), exact);
          }
          test::RequireSame(got, chain, "the exact instruction chained over K");
          outputs += got.size();
          const std::vector<float> per_block = Gemm(ga, gb, c.data(), AccumModelByName("block-exact"));
          apart_from_block_exact += test::BitsDiffer(got, per_block);
        }
  }
  CHECK(outputs == 2 * 25 * 3 * 35);
  CHECK(apart_from_block_exact > 50);  // one rounding per instruction is not one per scale block
}

TEST_CASE("gemm cdna4: operands without block scales along K step by the instruction too", "[gemm][cdna4]") {
  // K longer than the instruction with no scale blocks (per-tensor scales, or plain codes): the step lies
  // inside the one "block" of K. Once a division by zero (SIGFPE) in the fast path's blocks per step.
  std::mt19937 rng(5);
  const GemmOperand a = test::Codes(fmt::kE4M3, 6, 320, rng), b = test::Codes(fmt::kE5M2, 320, 5, rng);
  for (const char* name : {"cdna4-mx", "cdna4-mx-32x32"}) {
    const AccumModel model = AccumModelByName(name);
    std::vector<float> c(30, 0.25f), chain = c;
    const std::vector<float> got = Gemm(a, b, c.data(), model);
    test::RequireSame(got, GemmRef(a, b, c.data(), model), name);
    for (size_t k0 = 0; k0 < 320; k0 += model.exact_step) {
      const size_t k1 = std::min<size_t>(320, k0 + model.exact_step);
      std::vector<uint8_t> sa, sb;
      for (size_t i = 0; i < 6; ++i)
        for (size_t k = k0; k < k1; ++k) sa.push_back(a.codes[i * 320 + k]);
      for (size_t k = k0; k < k1; ++k)
        for (size_t j = 0; j < 5; ++j) sb.push_back(b.codes[k * 5 + j]);
      chain = Gemm(OperandFromCodes(fmt::kE4M3, 6, k1 - k0, sa.data()),
                   OperandFromCodes(fmt::kE5M2, k1 - k0, 5, sb.data()), chain.data(), AccumModelByName("exact"));
    }
    test::RequireSame(got, chain, std::string(name) + " chained");
  }
}

TEST_CASE("gemm cdna4: parameters, the description and the refusals", "[gemm][cdna4]") {
  CHECK(AccumModelByName("cdna4-mx").exact_step == 128);
  CHECK(AccumModelByName("cdna4-mx-32x32").exact_step == 64);
  CHECK(DescribeModel(AccumModelByName("cdna4-mx")).find("exact over each 128 K") != std::string::npos);
  // A scale block that does not divide the instruction's K is refused with both numbers.
  std::mt19937 rng(3);
  GemmOperand a = test::Codes(fmt::kE4M3, 2, 96, rng), b = test::Codes(fmt::kE4M3, 96, 2, rng);
  test::AddUe8m0(a, true, 48, rng, 120, 130);
  test::AddUe8m0(b, false, 48, rng, 120, 130);
  CHECK_THROWS_WITH(Gemm(a, b, nullptr, AccumModelByName("cdna4-mx")),
                    Catch::Contains("rounds every 128 K") && Catch::Contains("scale block of 48"));
}

}  // namespace cdna4_test
