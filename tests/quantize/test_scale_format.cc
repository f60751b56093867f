// test_scale_format.cc: NVFP4's rules with block scales in another code format (QuantSpec::scale_format:
// UE4M3, AMD gfx1250's UE5M3, E3M4, E5M2, E4M3FNUZ, E2M3), and FP8 and FP6 elements, against an oracle
// written from the rules' definitions (docs/numerics.md "Block-scale formats"): every FP32 operation as one correctly
// rounded call (support/fl32.h) and every rounding to the scale and element formats by the naive table (support/
// naive_round.h); explicit e4m3 and ue4m3 equal NVFP4's own bit for bit; the specs' JSON form, refusals,
// dequantization and the GEMM operand a quantized tensor gives.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/gemm.h"
#include "qmx/quantize.h"
#include "support/fl32.h"
#include "support/hex.h"
#include "support/naive_round.h"

using namespace qmx;
using qmx::test::Fl32Div;
using qmx::test::Fl32Mul;
using qmx::test::FloatBits;
using qmx::test::NaiveRounder;

namespace {

// fl32(p / f) for a positive finite p and f, FLT_MAX where the quotient passes it (fminf(fl32(p / f), FLT_MAX)).
float CappedDiv(float p, float f) {
  const double q = static_cast<double>(p) / f;
  return q > FLT_MAX ? FLT_MAX : Fl32Div(p, f);
}

struct Oracle {
  std::vector<uint8_t> codes, scales;
  float tensor_decode = 1;
};

// The rule's definition on a rows x cols FP32 tensor (finite), row-major blocks of br x bc, scale format sf.
Oracle Expected(const std::vector<float>& x, size_t rows, size_t cols, size_t br, size_t bc, ScaleRule rule,
                const Format& sf, const Format& ef = fmt::kE2M1) {
  const NaiveRounder to_scale(sf), to_elem(ef);
  const float em = static_cast<float>(Limits(ef).max_finite);  // E2M1's 6 in the rules
  const FormatLimits lim = Limits(sf);
  const float d = static_cast<float>(em * lim.max_finite), lo = static_cast<float>(lim.min_normal),
              hi = static_cast<float>(lim.max_finite);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const bool torchao = rule == ScaleRule::kNvfp4Torchao || rule == ScaleRule::kNvfp4TorchaoCuda;
  float s_enc = 1, s_g = 1;
  if (torchao) {
    const float g = rule == ScaleRule::kNvfp4Torchao ? Fl32Div(amax, d) : Fl32Mul(amax, Fl32Div(1, d));
    s_g = g > 0 ? g : 1.0f;
  } else if (amax > 0) {
    s_enc = CappedDiv(d, amax);
  }
  Oracle o;
  o.tensor_decode = torchao ? s_g : Fl32Div(1, s_enc);
  o.codes.resize(x.size());
  const size_t srows = (rows + br - 1) / br, scols = (cols + bc - 1) / bc;
  for (size_t sr = 0; sr < srows; ++sr)
    for (size_t sc = 0; sc < scols; ++sc) {
      float bam = 0;
      for (size_t r = sr * br; r < std::min(rows, (sr + 1) * br); ++r)
        for (size_t c = sc * bc; c < std::min(cols, (sc + 1) * bc); ++c)
          bam = std::max(bam, std::fabs(x[r * cols + c]));
      float v;
      if (rule == ScaleRule::kNvfp4) v = Fl32Mul(bam, Fl32Mul(s_enc, Fl32Div(1, em)));
      else if (rule == ScaleRule::kNvfp4Div) v = Fl32Mul(Fl32Div(bam, em), s_enc);
      else
        v = std::min(
            std::max(Fl32Div(rule == ScaleRule::kNvfp4Torchao ? Fl32Div(bam, em) : Fl32Mul(bam, Fl32Div(1, em)), s_g),
                     lo),
            hi);
      const uint8_t s8 = static_cast<uint8_t>(to_scale.Round(v, CastOptions{}, 0));
      o.scales.push_back(s8);
      const float sd = DecodeToFloat(sf, s8);
      float mult;
      if (rule == ScaleRule::kNvfp4) {
        const float den = Fl32Mul(sd, Fl32Div(1, s_enc));
        mult = den == 0 ? FLT_MAX : CappedDiv(1, den);
      } else if (rule == ScaleRule::kNvfp4Div) {
        mult = sd == 0 ? 0.0f : CappedDiv(s_enc, sd);
      } else {
        mult = Fl32Div(Fl32Div(1, s_g), sd);
      }
      for (size_t r = sr * br; r < std::min(rows, (sr + 1) * br); ++r)
        for (size_t c = sc * bc; c < std::min(cols, (sc + 1) * bc); ++c)
          o.codes[r * cols + c] = static_cast<uint8_t>(to_elem.Round(Fl32Mul(x[r * cols + c], mult), CastOptions{}, 0));
    }
  return o;
}

// Blocks of 16 (along rows) of mixed kinds: Gaussian times 2^e over 60 binades, zeros, amaxes at 6 x the
// midpoints of the scale format's neighbouring values (ties of its rounding, once S_enc is a power of two),
// and the block that holds the tensor amax.
std::vector<float> Data(size_t rows, size_t cols, const Format& sf, std::mt19937& rng, float tensor_amax) {
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> ex(-40, 20), kind(0, 3);
  const std::vector<double> table = DecodeTable(sf);
  std::vector<double> vals;
  for (double v : table)
    if (std::isfinite(v) && v > 0) vals.push_back(v);
  std::sort(vals.begin(), vals.end());
  std::vector<float> x(rows * cols);
  for (size_t b = 0; b < x.size() / 16; ++b) {
    float* v = &x[b * 16];
    const int k = kind(rng);
    const float s = std::ldexp(1.0f, ex(rng));
    for (int i = 0; i < 16; ++i) v[i] = k == 1 ? 0.0f : nd(rng) * s;
    if (k == 2) {  // amax = 6 * a midpoint, in units where the tensor amax maps to 6 * the largest value
      const size_t at = 1 + rng() % (vals.size() - 1);
      const double mid = (vals[at - 1] + vals[at]) / 2;
      v[rng() % 16] = static_cast<float>(mid / vals.back() * tensor_amax);
    }
  }
  x[x.size() / 2] = tensor_amax;
  return x;
}

}  // namespace

TEST_CASE(
    "scale format: NVFP4 rules with UE5M3, E3M4, E5M2, FNUZ and E2M3 block scales, FP8 and FP6 elements, match "
    "their definition",
    "[quantize]") {
  std::mt19937 rng(58);
  // (element format, scale format): E2M1 under six scale formats, then FP8 and FP6 elements under E4M3 and UE5M3.
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"e2m1", "ue5m3"},    {"e2m1", "ue4m3"}, {"e2m1", "e3m4"}, {"e2m1", "e5m2"},
      {"e2m1", "e4m3fnuz"}, {"e2m1", "e2m3"},  {"e4m3", "e4m3"}, {"e4m3", "ue5m3"},
      {"e5m2", "e4m3"},     {"e5m2", "ue5m3"}, {"e2m3", "e4m3"}, {"e3m2", "ue5m3"}};
  for (const auto& [elem_name, name] : cases) {
    const Format sf = ParseFormat(name), ef = GetFormat(elem_name);
    for (const ScaleRule rule :
         {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div, ScaleRule::kNvfp4Torchao, ScaleRule::kNvfp4TorchaoCuda})
      for (const auto& [br, bc] : {std::pair<int, int>{1, 16}, {16, 16}, {1, 32}})
        for (const float tensor_amax : {1.0f, 3.0e4f, 7.0e-20f}) {  // a power of two (exact S_enc), large, tiny
          const size_t rows = 32, cols = 96;
          const std::vector<float> x = Data(rows, cols, sf, rng, tensor_amax);
          QuantSpec spec = QuantSpecByName("nvfp4");
          spec.rule = rule;
          spec.block_rows = br;
          spec.block_cols = bc;
          spec.elem = ef;
          spec.scale_format = ParseFormat(name).name;
          if (!sf.HasNan()) spec.nan = NanPolicy::kIgnore;  // (block-nan needs a NaN code; the data is finite)
          ValidateQuantSpec(spec);
          INFO(elem_name << " elements, " << name << " scales, " << ScaleRuleName(rule) << " " << br << "x" << bc
                         << " amax " << tensor_amax);
          const Oracle want = Expected(x, rows, cols, br, bc, rule, sf, ef);
          const TensorView v{DType::kF32, x.data(), rows, cols};
          for (const bool ref : {false, true}) {
            const QuantizedTensor q = ref ? QuantizeRef(v, spec) : Quantize(v, spec);
            REQUIRE(q.scales.size() == want.scales.size());
            size_t bad_scales = 0, bad_codes = 0;
            for (size_t i = 0; i < want.scales.size(); ++i) bad_scales += q.scales[i] != want.scales[i];
            for (size_t i = 0; i < want.codes.size(); ++i) bad_codes += q.codes[i] != want.codes[i];
            CHECK(bad_scales == 0);
            CHECK(bad_codes == 0);
            CHECK(FloatBits(q.tensor_decode) == FloatBits(want.tensor_decode));
            // Dequantization by the rule: code x fl32(fl32(sd x amax) x fl32(1 / D)) (TE's), or fl32(s_g x sd).
            std::vector<float> dq(x.size());
            Dequantize(q, dq.data());
            const float d = static_cast<float>(Limits(ef).max_finite * Limits(sf).max_finite);
            size_t bad_dq = 0;
            for (size_t r = 0; r < rows; ++r)
              for (size_t c = 0; c < cols; ++c) {
                const float sd = DecodeToFloat(sf, want.scales[(r / br) * (cols / bc) + c / bc]);
                const float scale = rule == ScaleRule::kNvfp4Torchao || rule == ScaleRule::kNvfp4TorchaoCuda
                                        ? Fl32Mul(want.tensor_decode, sd)
                                        : Fl32Mul(Fl32Mul(sd, q.tensor_amax), Fl32Div(1, d));
                const float e = Fl32Mul(DecodeToFloat(ef, want.codes[r * cols + c]), scale);
                bad_dq += FloatBits(dq[r * cols + c]) != FloatBits(e);
              }
            CHECK(bad_dq == 0);
          }
        }
  }
}

TEST_CASE("scale format: e4m3 and ue4m3 are NVFP4's own scales, bit for bit, on the fast path", "[quantize]") {
  std::mt19937 rng(59);
  std::vector<float> x(64 * 128);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
  x[5] = NAN;  // a NaN block: the scale's NaN code
  const TensorView v{DType::kF32, x.data(), 64, 128};
  for (const char* spec_name : {"nvfp4", "nvfp4-2d", "nvfp4-row"}) {
    const QuantizedTensor base = Quantize(v, QuantSpecByName(spec_name));
    for (const char* sf : {"e4m3", "ue4m3"}) {
      QuantSpec s = QuantSpecByName(spec_name);
      s.scale_format = ParseFormat(sf).name;
      CHECK(E4m3BlockScales(s));
      const QuantizedTensor q = Quantize(v, s);
      INFO(spec_name << " " << sf);
      CHECK(q.scales == base.scales);
      CHECK((q.codes.size() == base.codes.size() && std::equal(q.codes.begin(), q.codes.end(), base.codes.begin())));
    }
  }
  // Another format's NaN block takes that format's NaN code (UE5M3's 0xFF, not E4M3's 0x7F).
  QuantSpec s = QuantSpecByName("nvfp4");
  s.scale_format = ParseFormat("ue5m3").name;
  CHECK(!E4m3BlockScales(s));
  CHECK(Quantize(v, s).scales[0] == 0xFF);
  CHECK(QuantizeRef(v, s).scales[0] == 0xFF);
}

TEST_CASE("scale format: the spec's JSON form, its description and the formats and rules it refuses", "[quantize]") {
  SpecOverrides o;
  o.scale_format = "ue5m3";
  const QuantSpec s = BuildQuantSpec("nvfp4", o);
  CHECK(s.scale_format == "e5m3:unsigned:special=fn");
  CHECK(DescribeSpec(s).find("e5m3:unsigned:special=fn scales") != std::string::npos);
  const QuantSpec back = QuantSpecFromJson(QuantSpecToJson(s));
  CHECK(back.scale_format == s.scale_format);
  CHECK(QuantSpecToJson(back) == QuantSpecToJson(s));
  // A spec without one writes the rule's own name, and reads back without one.
  CHECK(QuantSpecFromJson(QuantSpecToJson(QuantSpecByName("nvfp4"))).scale_format.empty());
  CHECK(QuantSpecFromJson(QuantSpecToJson(QuantSpecByName("mxfp8"))).scale_format.empty());
  const auto refused = [](const std::string& spec, const std::string& sf, const std::string& what) {
    SpecOverrides x;
    x.scale_format = sf;
    INFO(spec << " " << sf);
    CHECK_THROWS_WITH(BuildQuantSpec(spec, x), Catch::Matchers::Contains(what));
  };
  refused("fp8-block1x128", "e4m3", "applies to the NVFP4 rules");
  refused("mxfp8", "int8", "cannot hold MX scales");  // the MX rules' own checks: test_mx_scale_format.cc
  refused("bfp8_b", "e4m3", "shared exponent byte");
  refused("nvfp4", "ue8m0", "cannot hold NVFP4's block scales");
  refused("nvfp4", "e5m3", "cannot hold NVFP4's block scales");  // 9 bits
  refused("nvfp4", "int8", "cannot hold NVFP4's block scales");
  refused("nvfp4", "e2m3", "has no NaN code");  // FP6 scales under block-nan
  refused("nvfp4", "e8m3", "");  // 12 bits: refused while parsing or after
  SpecOverrides four;
  four.rule = "nvfp4-4over6";
  four.scale_format = "ue5m3";
  CHECK_THROWS_WITH(BuildQuantSpec("nvfp4", four), Catch::Matchers::Contains("applies to the NVFP4 rules"));
}

TEST_CASE("scale format: a quantized tensor's GEMM operand carries its scales as codes of their format",
          "[quantize][gemm]") {
  std::mt19937 rng(60);
  std::normal_distribution<float> nd;
  std::vector<float> xa(16 * 64), xb(64 * 24);
  for (float& v : xa) v = nd(rng);
  for (float& v : xb) v = nd(rng) * 1e3f;
  QuantSpec s = QuantSpecByName("nvfp4");
  s.scale_format = ParseFormat("ue5m3").name;
  const QuantizedTensor qa = Quantize({DType::kF32, xa.data(), 16, 64}, s);
  QuantSpec sc = s;
  sc.axis = Axis::kCol;
  const QuantizedTensor qb = Quantize({DType::kF32, xb.data(), 64, 24}, sc);
  const GemmOperand a = OperandFromQuantized(qa), b = OperandFromQuantized(qb);
  CHECK(a.scale_format == ScaleFormat::kCode);
  CHECK(a.scale_code == ParseFormat("ue5m3"));
  for (size_t i = 0; i < a.scales.size(); ++i) CHECK(a.scales[i] == DecodeToFloat(a.scale_code, qa.scales[i]));
  CHECK(FloatBits(a.tensor_scale) == FloatBits(qa.tensor_decode));
  for (const char* model : {"exact", "blackwell-mxf4nvf4"}) {
    const AccumModel m = AccumModelByName(model);
    INFO(model);
    const std::vector<float> fast = Gemm(a, b, nullptr, m), ref = GemmRef(a, b, nullptr, m);
    size_t bad = 0;
    for (size_t i = 0; i < fast.size(); ++i) bad += FloatBits(fast[i]) != FloatBits(ref[i]);
    CHECK(bad == 0);
  }
}
