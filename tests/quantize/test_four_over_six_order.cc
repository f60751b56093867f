// test_four_over_six_order.cc: the 4over6 rules' error-sum orders (ErrorOrder: seq, seq-fma, xor16, pairs16)
// against a reference written here from their definitions (each order's sum of the 16 terms spelled out as one
// expression, the candidates formed by TE's formulas), on blocks built to sit on the edge between map-to-4 and
// map-to-6: one element of each random block is moved to where the two candidates' exact errors are equal, so
// that the FP32 rounding of the sums decides the pick. Every block's scale and codes equal the reference under
// every order, and every pair of orders that can differ is separated by some block.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/quantize.h"
#include "qmx/round.h"
#include "qmx/scale.h"

using namespace qmx;

namespace {

float E4m3(float v) { return DecodeToFloat(fmt::kE4M3, ConvertF32(v, fmt::kE4M3, CastOptions{})); }

// One candidate of TE's 4over6 on a block: the scale byte's value s, each element's dequantized value in the
// input domain c_i = fl(fl(fl(q_i s) T) / 1536) and its code.
struct Candidate {
  float s;
  float c[16];
  uint8_t code[16];
  uint8_t byte;
};

Candidate Make(const float* x, float s_enc, float tensor_amax, float scale_input) {
  Candidate k{};
  k.byte = static_cast<uint8_t>(ConvertF32(scale_input, fmt::kE4M3, CastOptions{}));
  k.s = E4m3(scale_input);
  const float s_dec = 1.0f / s_enc;
  const float mult = std::fmin(1.0f / (k.s * s_dec), FLT_MAX);
  for (int i = 0; i < 16; ++i) {
    k.code[i] = static_cast<uint8_t>(ConvertF32(x[i] * mult, fmt::kE2M1, CastOptions{}));
    const float q = DecodeToFloat(fmt::kE2M1, k.code[i]);
    k.c[i] = ((q * k.s) * tensor_amax) / 1536.0f;
  }
  return k;
}

// A candidate's error under `order`, each order's sum written out.
float CandidateError(const Candidate& k, const float* x, bool mse, ErrorOrder order) {
  float t[16], d[16];
  for (int i = 0; i < 16; ++i) {
    d[i] = k.c[i] - x[i];
    t[i] = mse ? d[i] * d[i] : std::fabs(d[i]);
  }
  float e = 0.0f;
  switch (order) {
    case ErrorOrder::kSeq:
      for (int i = 0; i < 16; ++i) e = e + t[i];
      return e;
    case ErrorOrder::kSeqFma:
      for (int i = 0; i < 16; ++i) e = mse ? std::fmaf(d[i], d[i], e) : e + t[i];
      return e;
    case ErrorOrder::kXor16:
      return (((t[0] + t[8]) + (t[4] + t[12])) + ((t[2] + t[10]) + (t[6] + t[14]))) +
             (((t[1] + t[9]) + (t[5] + t[13])) + ((t[3] + t[11]) + (t[7] + t[15])));
    case ErrorOrder::kPairs16:
      return (((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]))) +
             (((t[8] + t[9]) + (t[10] + t[11])) + ((t[12] + t[13]) + (t[14] + t[15])));
  }
  return e;
}

struct Pick {
  uint8_t byte;
  uint8_t code[16];
  bool four;  // map-to-4 picked
};

Pick Reference(const float* x, float tensor_amax, bool mse, ErrorOrder order) {
  float amax = 0.0f;
  for (int i = 0; i < 16; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  float s_enc = std::fmin(1536.0f / tensor_amax, FLT_MAX);
  if (tensor_amax == 0.0f || s_enc == 0.0f) s_enc = 1.0f;
  const float base = (amax / 6.0f) * s_enc;
  const Candidate four = Make(x, s_enc, tensor_amax, base * 1.5f), six = Make(x, s_enc, tensor_amax, base);
  const bool pick4 = CandidateError(four, x, mse, order) < CandidateError(six, x, mse, order);  // a tie keeps six
  const Candidate& k = pick4 ? four : six;
  Pick p{k.byte, {}, pick4};
  for (int i = 0; i < 16; ++i) p.code[i] = k.code[i];
  return p;
}

// Random blocks, each with one element (not its largest) moved to where the two candidates' exact errors
// (in double) are equal, when that keeps every code of both candidates.
std::vector<float> EdgeBlocks(size_t blocks, bool mse, uint32_t seed, float& tensor_amax) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(blocks * 16);
  for (float& v : x) v = nd(rng);
  tensor_amax = 0.0f;
  for (float v : x) tensor_amax = std::fmax(tensor_amax, std::fabs(v));
  float s_enc = std::fmin(1536.0f / tensor_amax, FLT_MAX);
  for (size_t b = 0; b < blocks; ++b) {
    float* xb = &x[b * 16];
    int top = 0;
    for (int i = 1; i < 16; ++i)
      if (std::fabs(xb[i]) > std::fabs(xb[top])) top = i;
    const int j = (top + 1 + static_cast<int>(rng() % 15)) % 16;
    const float base = (std::fabs(xb[top]) / 6.0f) * s_enc;
    const Candidate four = Make(xb, s_enc, tensor_amax, base * 1.5f), six = Make(xb, s_enc, tensor_amax, base);
    double rest = 0;  // sum over i != j of the map-to-4 term minus the map-to-6 term
    for (int i = 0; i < 16; ++i) {
      if (i == j) continue;
      const double a = static_cast<double>(four.c[i]) - xb[i], c = static_cast<double>(six.c[i]) - xb[i];
      rest += mse ? a * a - c * c : std::fabs(a) - std::fabs(c);
    }
    const double c4 = four.c[j], c6 = six.c[j];
    if (c4 == c6) continue;
    // MSE: rest + (c4 - x)^2 - (c6 - x)^2 = 0 is linear in x. MAE with x between c4 and c6:
    // rest + |c4 - x| - |c6 - x| = 0.
    double target = mse ? (rest + c4 * c4 - c6 * c6) / (2 * (c4 - c6))
                        : (c4 < c6 ? (c4 + c6 - rest) / 2 : (c4 + c6 + rest) / 2);
    if (!std::isfinite(target) || std::fabs(target) >= std::fabs(xb[top])) continue;
    const float old = xb[j];
    xb[j] = static_cast<float>(target);
    const Candidate f2 = Make(xb, s_enc, tensor_amax, base * 1.5f), s2 = Make(xb, s_enc, tensor_amax, base);
    if (f2.code[j] != four.code[j] || s2.code[j] != six.code[j]) xb[j] = old;
  }
  return x;
}

}  // namespace

TEST_CASE("quantize: 4over6 error orders equal their definitions and pick apart on the map-to-4/6 edge",
          "[quantize][nvfp4][4over6]") {
  const size_t blocks = 4000;
  const std::vector<ErrorOrder> orders = AllErrorOrders();
  for (bool mse : {false, true}) {
    float tensor_amax = 0.0f;
    const std::vector<float> x = EdgeBlocks(blocks, mse, mse ? 11u : 7u, tensor_amax);
    std::vector<std::vector<uint8_t>> scales;
    for (ErrorOrder order : orders) {
      QuantSpec spec = QuantSpecByName("nvfp4");
      spec.rule = mse ? ScaleRule::kNvfp4FourOverSixMse : ScaleRule::kNvfp4FourOverSix;
      spec.error_order = order;
      const QuantizedTensor q = Quantize(TensorView{DType::kF32, x.data(), blocks, 16}, spec);
      REQUIRE(q.tensor_amax == tensor_amax);
      size_t bad = 0, fours = 0;
      for (size_t b = 0; b < blocks; ++b) {
        const Pick want = Reference(&x[b * 16], tensor_amax, mse, order);
        bool same = q.scales[b] == want.byte;
        for (int i = 0; i < 16; ++i) same = same && q.codes[b * 16 + i] == want.code[i];
        if (!same && ++bad <= 3) UNSCOPED_INFO("block " << b << ": scale " << int(q.scales[b]) << ", reference " << int(want.byte));
        fours += want.four;
      }
      INFO((mse ? "mse " : "mae ") << ErrorOrderName(order) << ": " << bad << " blocks differ from the definition");
      CHECK(bad == 0);
      CHECK(fours > 0);
      CHECK(fours < blocks);
      scales.push_back(q.scales);
    }
    // Which pairs of orders some block separates (MAE terms are not products: seq-fma is seq there).
    for (size_t a = 0; a < orders.size(); ++a)
      for (size_t b = a + 1; b < orders.size(); ++b) {
        size_t apart = 0;
        for (size_t i = 0; i < blocks; ++i) apart += scales[a][i] != scales[b][i];
        INFO((mse ? "mse " : "mae ") << ErrorOrderName(orders[a]) << " vs " << ErrorOrderName(orders[b]) << ": " << apart
                                     << " of " << blocks << " blocks pick differently");
        const bool same_by_definition = !mse && (orders[a] == ErrorOrder::kSeqFma || orders[b] == ErrorOrder::kSeqFma) &&
                                        (orders[a] == ErrorOrder::kSeq || orders[b] == ErrorOrder::kSeq);
        if (same_by_definition) CHECK(apart == 0);
        else CHECK(apart > 0);
      }
  }
}

TEST_CASE("quantize: an error order is refused outside the 4over6 rules, and named in the spec", "[quantize][4over6]") {
  SpecOverrides o;
  o.error_order = "xor16";
  CHECK_THROWS_WITH(BuildQuantSpec("nvfp4", o), Catch::Matchers::Contains("applies to the 4over6 rules"));
  o.error_order = "tree";
  o.rule = "nvfp4-4over6";
  CHECK_THROWS_WITH(BuildQuantSpec("nvfp4", o), Catch::Matchers::Contains("unknown 4over6 error order 'tree'"));
  o.error_order = "pairs16";
  const QuantSpec s = BuildQuantSpec("nvfp4", o);
  CHECK(s.error_order == ErrorOrder::kPairs16);
  CHECK(DescribeSpec(s).find("error sums pairs16") != std::string::npos);
  const QuantSpec back = QuantSpecFromJson(QuantSpecToJson(s));
  CHECK(back.error_order == ErrorOrder::kPairs16);
  CHECK(QuantSpecToJson(BuildQuantSpec("nvfp4", SpecOverrides{})).find("error_order") == std::string::npos);
}
