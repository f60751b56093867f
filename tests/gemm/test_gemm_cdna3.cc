// test_gemm_cdna3.cc: cdna3-fp8, AMD MI300's FP8 MFMA (v_mfma_f32_16x16x32 / 32x32x16 on E4M3FNUZ and
// E5M2FNUZ, every mix), against MMA-Sim's CDNA3 model (golden/gemm-mmasim/cdna3, its README says how the
// outputs were made) bit for bit, NaN outputs by class; and the step's rules on hand-made rows whose results
// follow from the definition (the half sums' floor, the in-half cut toward zero, C's drop below 25 binades);
// the fast tiles against the reference.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gemm/gemm_cases.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/testing.h"
#include "support/hex.h"

namespace cdna3_test {

using namespace qmx;

const std::string kDir = std::string(QMX_SOURCE_DIR) + "/golden/gemm-mmasim/cdna3/";

TEST_CASE("gemm cdna3: cdna3-fp8 reproduces MMA-Sim's CDNA3 FP8 MFMA outputs bit for bit", "[gemm][mmasim]") {
  std::ifstream in(kDir + "cases.json");
  REQUIRE(in.good());
  const nlohmann::json js = nlohmann::json::parse(in);
  const AccumModel model = AccumModelByName("cdna3-fp8");
  size_t cases = 0, outputs = 0, nans = 0;
  for (const auto& cj : js["cases"]) {
    const std::string name = cj["name"];
    INFO(name);
    const NpyArray a = ReadNpy(kDir + name + "_a.npy"), b = ReadNpy(kDir + name + "_b.npy");
    const GemmOperand ga = OperandFromCodes(GetFormat(cj["a_format"].get<std::string>()), a.shape[0], a.shape[1], a.data.data());
    const GemmOperand gb = OperandFromCodes(GetFormat(cj["b_format"].get<std::string>()), b.shape[0], b.shape[1], b.data.data());
    const std::vector<float> c = test::FloatsOf(ReadNpy(kDir + name + "_c.npy"));
    const std::vector<float> d = test::FloatsOf(ReadNpy(kDir + name + "_d.npy"));
    const std::vector<float> got = Gemm(ga, gb, c.data(), model);
    // NaN outputs by class: MMA-Sim's is the host's double NaN narrowed, the model's 0x7FC00000.
    test::RequireSame(got, d, "Gemm");
    test::RequireSame(GemmRef(ga, gb, c.data(), model), d, "GemmRef");
    for (float x : got) nans += std::isnan(x);
    outputs += d.size();
    ++cases;
  }
  CHECK(cases == 29);  // 4 format pairs x 7 sets, and the rules' probe
  CHECK(outputs == 4 * (6 * 256 + 1024) + 256);  // 16 x 16 outputs, and the 32 x 32 set of each pair
  CHECK(nans > 0);     // the special sets' NaN codes and NaN C reach the outputs
}

// A 1 x K by K x 2 product of E5M2FNUZ values under cdna3-fp8, C given.
std::vector<float> Row(const std::vector<std::pair<size_t, double>>& a, const std::vector<std::pair<size_t, double>>& b0,
                       const std::vector<std::pair<size_t, double>>& b1, float c0, float c1) {
  const Format& f = fmt::kE5M2Fnuz;
  auto code = [&](double v) {
    for (uint32_t c = 0; c < 256; ++c)
      if (c != 0x80 && DecodeToDouble(f, c) == v) return static_cast<uint8_t>(c);
    FAIL("no E5M2FNUZ code for " << v);
    return uint8_t{0};
  };
  std::vector<uint8_t> ac(32, 0), bc(64, 0);
  for (const auto& [k, v] : a) ac[k] = code(v);
  for (const auto& [k, v] : b0) bc[k * 2] = code(v);
  for (const auto& [k, v] : b1) bc[k * 2 + 1] = code(v);
  const float c[2] = {c0, c1};
  return Gemm(OperandFromCodes(f, 1, 32, ac.data()), OperandFromCodes(f, 32, 2, bc.data()), c, AccumModelByName("cdna3-fp8"));
}

TEST_CASE("gemm cdna3: the halves floor across, cut within, and C is dropped more than 25 binades down", "[gemm]") {
  const float big = std::ldexp(1.0f, 26);
  // Column 0: 2^26 (k = 0) + 8 (k = 2, the same half): the exact value 2^26 + 8. C = -2^-10 lies 36 binades
  // below: dropped, so 2^26 + 8 (exact arithmetic would round 2^26 + 8 - 2^-10 to 2^26 + 8 as well; floored
  // at 24 bits it would be -4 and give the tie 2^26 + 4 -> 2^26). C = -2, exponent 1 = 26 - 25: kept and
  // floored to -4 -> 2^26 + 4 -> RNE 2^26.
  const std::vector<float> r0 = Row({{0, 8192}, {2, 2}}, {{0, 8192}, {2, 4}}, {{0, 8192}, {2, 4}}, -std::ldexp(1.0f, -10), -2.0f);
  CHECK(r0[0] == big + 8);
  CHECK(r0[1] == big);
  // Column 0: -1 at k = 1 (the other half) is floored to -4 at the halves' common exponent: 2^26 - 4 (exact:
  // 2^26 - 1 -> 2^26). Column 1: -1 at k = 2 (the same half as 2^26) is cut toward zero: 2^26.
  const std::vector<float> r1 = Row({{0, 8192}, {1, -1}, {2, -1}}, {{0, 8192}, {1, 1}}, {{0, 8192}, {2, 1}}, 0.0f, 0.0f);
  CHECK(r1[0] == big - 4);
  CHECK(r1[1] == big);
  // A zero sum is +0, even from -0 parts; a NaN code gives IEEE's default NaN.
  const std::vector<float> r2 = Row({{0, 2}}, {{0, -2}}, {}, 4.0f, -0.0f);
  CHECK(test::FloatBits(r2[0]) == 0);
  CHECK(test::FloatBits(r2[1]) == 0);
  std::vector<uint8_t> ac(32, 0x40), bc(32, 0x40);
  ac[5] = 0x80;
  const std::vector<float> n = Gemm(OperandFromCodes(fmt::kE4M3Fnuz, 1, 32, ac.data()), OperandFromCodes(fmt::kE4M3Fnuz, 32, 1, bc.data()),
                                    nullptr, AccumModelByName("cdna3-fp8"));
  CHECK(test::FloatBits(n[0]) == 0x7FC00000u);
}

// Codes of rows x cols in which each (line, step of 16) takes one of five shapes by its indices: random, all zero,
// the largest magnitudes at even k beside the smallest at odd k (the halves' tops far apart: the lower half
// floored away), largest and smallest in one half (the small ones cut), or one binade.
GemmOperand Shaped(const Format& f, size_t rows, size_t cols, bool is_a, std::mt19937& rng) {
  std::vector<uint8_t> c = test::RandomCodes(f, rows * cols, rng, false);
  const uint8_t top = static_cast<uint8_t>(ConvertF32(static_cast<float>(Limits(f).max_finite), f, CastOptions{}));
  for (size_t r = 0; r < rows; ++r)
    for (size_t q = 0; q < cols; ++q) {
      const size_t kk = is_a ? q : r, other = is_a ? r : q;
      uint8_t& v = c[r * cols + q];
      const uint8_t sign = (rng() & 1) ? 0x80 : 0;
      switch ((other + kk / 16) % 5) {
        case 1: v = 0; break;
        case 2: v = static_cast<uint8_t>((kk % 2 ? 1 : top) | sign); break;
        case 3: v = static_cast<uint8_t>((kk % 3 ? 1 + rng() % 3 : top - rng() % 4) | sign); break;
        case 4: v = static_cast<uint8_t>((top - 8 + rng() % 8) | sign); break;
        default: break;
      }
      if (v == 0x80) v = 0;  // FNUZ's NaN
    }
  return OperandFromCodes(f, rows, cols, c.data());
}

// The fast tiles take a step's exact FP64 sum only where no product has a bit below 2^(E - F): here E = 7 (128 x 1),
// F = 24. Column 0 adds 2^-17 in the even half and 2^-18 in the odd one: the odd half's sum is floored to 2^-17,
// leaving 128 + 2^-17, a tie that rounds to 128, where the exact sum would round up; column 1 adds 2^-17 and 2^-16
// (nothing below 2^-17): 128 + 1.5 2^-16 rounds to 128 + 2^-16. The result of qmx::Gemm (fast tiles) is checked
// against these values and the reference.
TEST_CASE("gemm cdna3: the fast tiles' exact sums stop at a product below the step's unit", "[gemm]") {
  const double u = std::ldexp(1.0, -8), v = std::ldexp(1.0, -9);
  const std::vector<float> d =
      Row({{0, 128.0}, {2, u}, {1, v}}, {{0, 1.0}, {2, v}, {1, v}}, {{0, 1.0}, {2, v}, {1, u}}, 0.0f, 0.0f);
  CHECK(d[0] == 128.0f);
  CHECK(d[1] == 128.0f + std::ldexp(1.0f, -16));
}

TEST_CASE("gemm cdna3: the fast tiles equal the reference where halves, zero steps and C's drop decide", "[gemm]") {
  std::mt19937 rng(93);
  // cdna3-fp8, and its step with the output cut toward zero (the tiles' other rounding branch).
  const AccumModel models[] = {AccumModelByName("cdna3-fp8"),
                               AccumModelByName("fused:step=16,F=24,out=rz,zero-exp=operands,halves=cdna3")};
  std::normal_distribution<float> nd;
  // 19 rows and 133 columns cross the row tiles and the 128-column tiles; K = 16 * 6 + 7 ends in a short
  // step whose odd half is shorter, K = 1 in a step with an empty half.
  for (const size_t k : {size_t{103}, size_t{1}}) {
    std::vector<float> c(19 * 133);
    for (size_t i = 0; i < c.size(); ++i) {
      c[i] = i % 7 == 0 ? 0.0f : nd(rng) * std::ldexp(1.0f, static_cast<int>(i % 90) - 45);  // kept, floored, dropped
      if (i % 23 == 0) c[i] = std::ldexp(1.0f, -140);                                        // subnormal
      if (i % 29 == 0) c[i] = -0x1.fffffep127f;                                              // overflows
    }
    for (const Format* fa : {&fmt::kE4M3Fnuz, &fmt::kE5M2Fnuz})
      for (const Format* fb : {&fmt::kE4M3Fnuz, &fmt::kE5M2Fnuz}) {
        const GemmOperand a = Shaped(*fa, 19, k, true, rng), b = Shaped(*fb, k, 133, false, rng);
        for (const AccumModel& m : models) {
          const std::string what = m.name + ": " + fa->name + " x " + fb->name + " K=" + std::to_string(k);
          test::CheckEverywhere(a, b, {}, m, what);
          test::CheckEverywhere(a, b, c, m, what + " with C");
        }
      }
  }
}

// N(0, sigma) codes of f, rows x cols; in every 9th line (a row of A, a column of B) each step of 16 also holds
// one element of magnitude 2^-t (t by the step), so that its spread needs the 2^8 h + l split (A or B), passes
// the int32 bound (the int64 sum again) or exceeds even the split (the exact step); every 13th line is zero in
// every third step.
GemmOperand Spread(const Format& f, size_t rows, size_t cols, bool is_a, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> x(rows * cols);
  for (size_t r = 0; r < rows; ++r)
    for (size_t q = 0; q < cols; ++q) {
      const size_t kk = is_a ? q : r, line = is_a ? r : q;
      float v = nd(rng);
      if (line % 9 == 4 && kk % 16 == (line / 9) % 16) v = std::ldexp(1.0f, -static_cast<int>(4 + 3 * (kk / 16 % 6)));
      if (line % 13 == 6 && kk / 16 % 3 == 0) v = 0;
      x[r * cols + q] = v;
    }
  std::vector<uint8_t> codes(x.size());
  ConvertToCodes(DType::kF32, x.data(), x.size(), f, CastOptions{}, codes.data());  // satfinite
  return OperandFromCodes(f, rows, cols, codes.data());
}

// The Highway kernel (gemm_cdna3_simd.cc) against the reference on every SIMD target, on operands whose steps
// take each of its paths (qmx::GemmCdna3StepCounts says which): sums of int16 elements and of the split on
// either side, outputs that its checks send to the FP64 tail (the bound on L, C far above the products, a sum
// that is no FP32 number), to the int64 sum and to the exact step; C kept, floored, dropped, zero, subnormal and
// overflowing.
TEST_CASE("gemm cdna3: the Highway kernel equals the reference on each of its paths", "[gemm]") {
  std::mt19937 rng(2026);
  const size_t m = 37, k = 16 * 9 + 7, n = 70;  // row tiles, a short last step, B's panels of 32 and a part
  std::normal_distribution<float> nd;
  std::vector<float> c(m * n);
  for (size_t i = 0; i < c.size(); ++i) {
    c[i] = nd(rng) * std::ldexp(1.0f, static_cast<int>(i % 60) - 30);
    if (i % 11 == 0) c[i] = 0.0f;
    if (i % 17 == 0) c[i] = std::ldexp(1.0f, -135);  // subnormal
    if (i % 19 == 0) c[i] = std::ldexp(1.0f, 60);    // far above every product
    if (i % 31 == 0) c[i] = 0x1.fffffep127f;         // overflows
  }
  const Cdna3StepCounts before = GemmCdna3StepCounts();
  const AccumModel model = AccumModelByName("cdna3-fp8");
  for (const Format* fa : {&fmt::kE4M3Fnuz, &fmt::kE5M2Fnuz})
    for (const Format* fb : {&fmt::kE4M3Fnuz, &fmt::kE5M2Fnuz}) {
      const GemmOperand a = Spread(*fa, m, k, true, 64.0f, rng), b = Spread(*fb, k, n, false, 16.0f, rng);
      const std::string what = std::string(fa->name) + " x " + fb->name;
      test::CheckEverywhere(a, b, {}, model, what);
      test::CheckEverywhere(a, b, c, model, what + " with C");
    }
  const Cdna3StepCounts after = GemmCdna3StepCounts();
  INFO("split a " << after.split_a - before.split_a << ", split b " << after.split_b - before.split_b << ", fp64 "
                  << after.fp64 - before.fp64 << ", int64 " << after.int64 - before.int64 << ", exact "
                  << after.exact - before.exact);
  CHECK(after.split_a > before.split_a);
  CHECK(after.split_b > before.split_b);
  CHECK(after.fp64 > before.fp64);
  CHECK(after.int64 > before.int64);
  CHECK(after.exact > before.exact);
}

TEST_CASE("gemm cdna3: the model's parameters, name and refusals", "[gemm]") {
  const AccumModel m = AccumModelByName("cdna3-fp8");
  CHECK(m.fused.step == 16);
  CHECK(m.fused.frac_bits == 24);
  CHECK(m.fused.cdna3_halves);
  CHECK_THAT(DescribeModel(m), Catch::Contains("CDNA3 halves"));
  CHECK(AccumModelByName("fused:step=16,F=24,out=rne,zero-exp=operands,halves=cdna3").fused.cdna3_halves);
  CHECK_THROWS_WITH(AccumModelByName("fused:halves=cdna3,group=16,step=32"), Catch::Contains("halves=cdna3 sums single products"));
  CHECK_THROWS_WITH(AccumModelByName("fused:halves=amd"), Catch::Contains("'halves' is cdna3 or none"));
  // Block scales are not part of the instruction: refused; a tensor scale is alpha after accumulation.
  std::vector<uint8_t> codes(64, 0x40);
  GemmOperand a = OperandFromCodes(fmt::kE4M3Fnuz, 2, 32, codes.data()), b = OperandFromCodes(fmt::kE4M3Fnuz, 32, 2, codes.data());
  a.tensor_scale = 0.5f;
  const std::vector<float> d = Gemm(a, b, nullptr, m);
  CHECK(d[0] == 16.0f);  // 32 products of 1, times 0.5
  const std::vector<uint32_t> raw(2, 127);
  SetBlockScales(a, ScaleFormat::kUe8m0, 1, 32, raw.data());
  a.tensor_scale = 1.0f;
  CHECK_THROWS_WITH(Gemm(a, b, nullptr, m), Catch::Contains("block scales are not modelled"));
}

}  // namespace cdna3_test
