// test_gemm_acc16.cc: the models that accumulate in FP16 (FusedParams::acc_fp16: Ada's and RTX Blackwell's
// FP16-output mma, Hopper's FP16 wgmma) and the other new instruction models. The FP16 rounding is checked
// against a deliberately naive oracle: with F wide enough that no term is cut, each step is the exact sum
// of C and its products (exact in double for these elements), rounded to the nearest of all finite FP16 values by a
// search of their sorted table (ties to the even pattern), Inf from 65520. MMA-Sim's own outputs for the
// named instructions are in test_gemm_mmasim.cc.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <random>
#include <string>
#include <vector>

#include "gemm/gemm_cases.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/round.h"

using namespace qmx;

namespace {

// Every finite nonnegative FP16 value with its pattern, ascending (patterns 0x0000..0x7BFF ascend).
struct Fp16Table {
  std::vector<double> v;
  Fp16Table() {
    for (int h = 0; h <= 0x7BFF; ++h) {
      const int e = h >> 10, m = h & 0x3FF;
      v.push_back(e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
    }
  }
  // x rounded to FP16 to nearest, ties to the even pattern; Inf from 65520 (65504 + half its ulp).
  double Round(double x) const {
    if (std::isnan(x)) return x;
    const double a = std::fabs(x);
    double r;
    if (a >= 65520.0) {
      r = std::numeric_limits<double>::infinity();
    } else {
      const size_t hi = static_cast<size_t>(std::lower_bound(v.begin(), v.end(), a) - v.begin());
      if (v[hi] == a) {
        r = a;
      } else {
        const size_t lo = hi - 1;  // a > 0 = v[0], a < 65520 <= v.back() + ulp/2
        const double dl = a - v[lo], dh = hi < v.size() ? v[hi] - a : std::numeric_limits<double>::infinity();
        r = dl < dh ? v[lo] : dh < dl ? v[hi] : (lo % 2 == 0 ? v[lo] : v[hi]);
      }
    }
    return x < 0 ? -r : r;
  }
};

const Fp16Table& Table() {
  static const Fp16Table t;
  return t;
}

// The oracle for a model whose steps cut nothing: per step of `step` products, c = RNE16(c + exact sum).
std::vector<float> Oracle(const GemmOperand& a, const GemmOperand& b, const std::vector<float>& c, size_t step) {
  const size_t m = a.rows, n = b.cols, k = a.cols;
  std::vector<float> d(m * n);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) {
      double acc = c.empty() ? 0.0 : c[i * n + j];
      for (size_t k0 = 0; k0 < k; k0 += step) {
        double s = acc;  // products and FP16 values within 53 bits of each other: every partial sum exact
        for (size_t kk = k0; kk < std::min(k, k0 + step); ++kk)
          s += DecodeToDouble(a.elem, a.codes[i * k + kk]) * DecodeToDouble(b.elem, b.codes[kk * n + j]);
        acc = Table().Round(s);
        if (acc == 0) acc = 0.0;  // a step's zero is +0
      }
      d[i * n + j] = static_cast<float>(acc);
    }
  return d;
}

// Random codes of E4M3 or E5M2 (no NaN or Inf) with the exponent field at most `field` (0: any).
GemmOperand RandomCodes8(const Format& f, size_t rows, size_t cols, std::mt19937& rng, int field) {
  const bool e5 = f.name == std::string("e5m2");
  const int shift = e5 ? 2 : 3, mask = e5 ? 0x7C : 0x78;
  std::vector<uint8_t> codes(rows * cols);
  std::uniform_int_distribution<int> any(0, 255);
  for (uint8_t& c : codes) {
    c = static_cast<uint8_t>(any(rng));
    if ((c & mask) == mask) c = static_cast<uint8_t>(c & ~(1 << shift));  // below the top binade: finite
    if (field && ((c & mask) >> shift) > field) c = static_cast<uint8_t>((c & ~mask) | (field << shift));
  }
  return OperandFromCodes(f, rows, cols, codes.data());
}

GemmOperand RandomE4m3(size_t rows, size_t cols, std::mt19937& rng, int field) {
  return RandomCodes8(fmt::kE4M3, rows, cols, rng, field);
}

}  // namespace

TEST_CASE("gemm: acc=fp16 rounds every step to FP16, subnormals and overflow included, as a naive oracle does",
          "[gemm]") {
  std::mt19937 rng(16);
  // F = 50 cuts no term of a step of 16 E4M3 products (their exponents span at most 36 binades), so the
  // step is the exact sum, rounded once to FP16.
  const AccumModel m = AccumModelByName("fused:step=16,F=50,bits=11,out=rne,acc=fp16");
  // Element magnitudes capped per case: E4M3 large (sums past 65504) and middling, E5M2 below 2^-10 (products
  // below 2^-20: steps in FP16's subnormals, 2^-24 apart).
  for (int shift : {0, 9, 3}) {
    const Format& f = shift == 3 ? fmt::kE5M2 : fmt::kE4M3;
    const GemmOperand a = RandomCodes8(f, 7, 64, rng, shift == 3 ? 4 : shift), b = RandomCodes8(f, 64, 5, rng, shift == 3 ? 4 : shift);
    std::vector<float> c(7 * 5);
    std::uniform_int_distribution<int> pat(0, 0x7BFF);
    for (float& x : c) x = static_cast<float>(Table().v[static_cast<size_t>(pat(rng)) >> (shift == 3 ? 6 : 0)]);
    for (size_t i = 0; i < c.size(); i += 3) c[i] = -c[i];
    c[0] = 65504.0f;  // at the top: large products push it to Inf or back
    c[1] = -std::ldexp(1.0f, -24);
    for (const bool with_c : {false, true}) {
      const std::vector<float> want = Oracle(a, b, with_c ? c : std::vector<float>{}, 16);
      const std::vector<float> got = Gemm(a, b, with_c ? c.data() : nullptr, m);
      INFO("shift " << shift << (with_c ? " with C" : ""));
      CHECK(test::BitsDiffer(got, want) == 0);
    }
  }
  // C = 65504 (FP16's largest) plus products of 16 is the tie 65520, which rounds to the even pattern: Inf;
  // plus 15 it rounds back to 65504.
  const float top = 65504.0f;
  uint8_t ra[2] = {0x48, 0x48}, rb[2] = {0x40, 0x40};  // E4M3 4, 4 and 2, 2: 16
  CHECK(std::isinf(Gemm(OperandFromCodes(fmt::kE4M3, 1, 2, ra), OperandFromCodes(fmt::kE4M3, 2, 1, rb), &top, m)[0]));
  ra[1] = 0x46;  // 3.5: 8 + 7 = 15
  CHECK(Gemm(OperandFromCodes(fmt::kE4M3, 1, 2, ra), OperandFromCodes(fmt::kE4M3, 2, 1, rb), &top, m)[0] == 65504.0f);
}

TEST_CASE("gemm: FP16-accumulating models' fast tiles equal the reference, FP16 subnormals and overflow included",
          "[gemm]") {
  std::mt19937 rng(61);
  const std::vector<AccumModel> models = {AccumModelByName("ada-mma-fp8-f16"), AccumModelByName("hopper-wgmma-fp8-f16"),
                                          AccumModelByName("rtx-blackwell-f8f6f4-f16"),
                                          AccumModelByName("fused:step=16,F=50,bits=11,out=rne,acc=fp16"),
                                          AccumModelByName("fused:step=32,F=13,bits=9,term=rne,acc=fp16")};
  // 9 rows and 131 columns cross the row tiles and the 128-column tiles; K = 32 * 3 + 5 ends in a short step.
  // Element magnitudes per case: any (sums past 65504: Inf, recomputed), middling, and small E5M2 (steps among
  // FP16's subnormals); C from FP16's patterns, subnormals, 65504 and zeros of both signs among them.
  for (const size_t k : {size_t{101}, size_t{16}})
    for (int shift : {0, 9, 3}) {
      const Format& f = shift == 3 ? fmt::kE5M2 : fmt::kE4M3;
      const int field = shift == 3 ? 4 : shift;
      GemmOperand a = RandomCodes8(f, 9, k, rng, field), b = RandomCodes8(f, k, 131, rng, field);
      for (size_t kk = 0; kk < k; ++kk) a.codes[2 * k + kk] = 0;  // a zero row
      std::vector<float> c(9 * 131);
      std::uniform_int_distribution<int> pat(0, 0x7BFF);
      for (size_t i = 0; i < c.size(); ++i) {
        c[i] = static_cast<float>(Table().v[static_cast<size_t>(pat(rng)) >> (shift == 3 ? 6 : 0)]);
        if (i % 3 == 0) c[i] = -c[i];
        if (i % 17 == 0) c[i] = i % 2 ? -0.0f : 0.0f;
        if (i % 19 == 0) c[i] = 65504.0f;
      }
      const std::string what = std::string(f.name) + " field " + std::to_string(field) + " K=" + std::to_string(k);
      for (const AccumModel& m : models) {
        test::CheckEverywhere(a, b, {}, m, what);
        test::CheckEverywhere(a, b, c, m, what + " with C");
      }
    }
}

// An FP16 accumulator's exponent is floored at FP16's -14 (MMA-Sim reads C as an FP16 value), which sets the
// step's unit when a subnormal C is its largest term: C = 2^-20 beside 16 products of 1.53 * 2^-27 (E5M2
// 1.75 * 2^-14 squared). With emax -14 and F = 13 each product is cut to 2^-27: 2^-20 + 16 * 2^-27 =
// 18 * 2^-24, an FP16 subnormal. Flooring at FP32's -126 instead would keep them whole: 19.06 * 2^-24,
// rounded to 19 * 2^-24.
TEST_CASE("gemm: an FP16 accumulator's exponent floors at -14 when it sets the unit", "[gemm]") {
  std::vector<uint8_t> ra(16, 0x07), rb(16, 0x07);  // E5M2 1.75 * 2^-14
  const GemmOperand a = OperandFromCodes(fmt::kE5M2, 1, 16, ra.data()), b = OperandFromCodes(fmt::kE5M2, 16, 1, rb.data());
  const float c = std::ldexp(1.0f, -20);
  CHECK(Gemm(a, b, &c, AccumModelByName("ada-mma-fp8-f16"))[0] == std::ldexp(18.0f, -24));
  // The same step in FP32 (ada-mma-fp8: C's exponent -20 is its own) keeps the products: 2^-20 + 16 * 49 * 2^-32.
  CHECK(Gemm(a, b, &c, AccumModelByName("ada-mma-fp8"))[0] == std::ldexp(1.0f, -20) + std::ldexp(784.0f, -32));
}

TEST_CASE("gemm: models that accumulate in FP16 take C as FP16 values and say so otherwise", "[gemm]") {
  std::mt19937 rng(17);
  const GemmOperand a = RandomE4m3(2, 32, rng, 0), b = RandomE4m3(32, 3, rng, 0);
  std::vector<float> c(6, 1.0f);
  for (const char* name : {"ada-mma-fp8-f16", "hopper-wgmma-fp8-f16", "rtx-blackwell-f8f6f4-f16"}) {
    const AccumModel m = AccumModelByName(name);
    CHECK(m.fused.acc_fp16);
    CHECK_NOTHROW(Gemm(a, b, c.data(), m));
    c[4] = 1.0f + std::ldexp(1.0f, -11);  // between two FP16 values
    CHECK_THROWS_WITH(Gemm(a, b, c.data(), m), Catch::Contains("accumulates in FP16") && Catch::Contains("C[1, 1]"));
    c[4] = 70000.0f;  // past FP16's largest
    CHECK_THROWS_WITH(Gemm(a, b, c.data(), m), Catch::Contains("is not one"));
    c[4] = std::numeric_limits<float>::quiet_NaN();
    CHECK_NOTHROW(Gemm(a, b, c.data(), m));
    c[4] = 1.0f;
    // Every output is an FP16 value.
    for (const float v : Gemm(a, b, c.data(), m)) CHECK((std::isnan(v) || std::isinf(v) || std::fabs(v) <= 65504.0f));
  }
  CHECK_THROWS_WITH(AccumModelByName("fused:step=16,acc=fp16,bits=14"), Catch::Contains("acc=fp16 keeps at most 11 bits"));
  CHECK_THROWS_WITH(AccumModelByName("fused:step=16,acc=fp16,bits=11,promote=32"), Catch::Contains("never promotes"));
  CHECK_THROWS_WITH(AccumModelByName("fused:acc=fp8"), Catch::Contains("'acc' is fp32 or fp16"));
}

TEST_CASE("gemm: the RTX Blackwell block-scaled and Ada k16 models are their documented equivalents", "[gemm]") {
  std::mt19937 rng(18);
  const GemmOperand a = RandomE4m3(5, 96, rng, 0), b = RandomE4m3(96, 4, rng, 0);
  // Ada's m16n8k32 runs as two steps of 16 (MMA-Sim's split), so chained over K it is the k16 instruction.
  CHECK(test::BitsDiffer(Gemm(a, b, nullptr, AccumModelByName("ada-mma-fp8")),
                         Gemm(a, b, nullptr, AccumModelByName("ada-mma-fp8-k16"))) == 0);
  const AccumModel rtx = AccumModelByName("rtx-blackwell-mxf8f6f4"), bw = AccumModelByName("blackwell-mxf8f6f4-mmasim");
  CHECK(rtx.name == "rtx-blackwell-mxf8f6f4");
  CHECK(DescribeModel(rtx).substr(rtx.name.size()) == DescribeModel(bw).substr(bw.name.size()));
  const AccumModel rtx4 = AccumModelByName("rtx-blackwell-mxf4nvf4"), bw4 = AccumModelByName("blackwell-mxf4nvf4-mmasim");
  CHECK(DescribeModel(rtx4).substr(rtx4.name.size()) == DescribeModel(bw4).substr(bw4.name.size()));
  // The FP32 form: one step of 32, F = 25, RZ to 24 bits, MMA-Sim's zero rule.
  const AccumModel f = AccumModelByName("rtx-blackwell-f8f6f4");
  CHECK((f.fused.step == 32 && f.fused.frac_bits == 25 && f.fused.out_bits == 24 && f.fused.zero_operands && !f.fused.acc_fp16));
}

// The H200's FP8 wgmma with an FP16 accumulator (golden/gemm-hopper/wgmma_f16_acc_h200.txt, from
// gpu/probes/wgmma_f16_acc.cu): every tile uniform, D = C + 32 a b per output, 1,824 cases.
TEST_CASE("gemm: hopper-wgmma-fp8-f16 reproduces the H200's FP16-accumulating wgmma probes", "[gemm]") {
  std::ifstream in(std::string(QMX_SOURCE_DIR) + "/golden/gemm-hopper/wgmma_f16_acc_h200.txt");
  REQUIRE(in.good());
  const AccumModel m = AccumModelByName("hopper-wgmma-fp8-f16");
  CastOptions exact;
  exact.saturation = Saturation::kNoSat;
  size_t cases = 0, bad = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tag, arrow;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!(ls >> tag >> std::hex >> a >> b >> c >> arrow >> d) || tag != "f16" || arrow != "->") continue;
    const std::vector<uint8_t> ra(32, static_cast<uint8_t>(a)), rb(32, static_cast<uint8_t>(b));
    const uint16_t ch = static_cast<uint16_t>(c);
    const float cf = SourceValueF32(DType::kF16, &ch, 0);
    const float got = Gemm(OperandFromCodes(fmt::kE4M3, 1, 32, ra.data()), OperandFromCodes(fmt::kE4M3, 32, 1, rb.data()),
                           &cf, m)[0];
    const uint16_t gh = static_cast<uint16_t>(ConvertF32(got, fmt::kFP16, exact));
    const bool nan = std::isnan(got) && (d & 0x7C00) == 0x7C00 && (d & 0x3FF) != 0;
    if (gh != d && !nan && bad++ < 5) UNSCOPED_INFO("a " << a << " b " << b << " c " << c << ": H200 " << d << ", model " << gh);
    ++cases;
  }
  CHECK(cases == 1824);
  CHECK(bad == 0);
}
