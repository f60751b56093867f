// test_gemm_alpha.cc: how NVFP4's factor after accumulation (alpha) is formed (qmx/gemm.h AlphaRule):
// the decode scales' product, Transformer Engine's cuBLASLt alpha (te) and TE's reference GEMM's (te-ref).
// The formulas against exact arithmetic on random amax pairs (the three rules and the plausible other
// orders must disagree on them), the GEMM output against TE's own reference GEMM (golden/nvfp4-te gemm_*,
// NVFP4QuantizerRef.qgemm of TE d0067d0d run on the GPU host), per-tensor, 4over6, mixed bounds and
// row-scaled, the fast paths against the reference, the recipe option and the errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/recipe.h"
#include "gemm/gemm_cases.h"
#include "support/fl32.h"
#include "support/hex.h"

using namespace qmx;
using qmx::test::Fl32Div;
using qmx::test::Fl32Mul;
using qmx::test::FloatBits;
using qmx::test::FloatsOf;
using qmx::test::BitsDiffer;
using qmx::test::RequireSame;
using qmx::test::CheckEverywhere;

namespace {

// The float nearest 1 / f, by the same neighbour check.
float Fl32Recip(float f) { return Fl32Div(1.0f, f); }

// A 1 x 16 NVFP4 operand A (or 16 x 1 B) with the given amax and bound; the codes and scales do not enter alpha.
GemmOperand Nvfp4Operand(bool is_a, float amax, float bound) {
  const std::vector<uint8_t> codes(16, 0x2);  // 1.0
  GemmOperand o = OperandFromCodes(fmt::kE2M1, is_a ? 1 : 16, is_a ? 16 : 1, codes.data());
  const uint32_t scale = 0x38;  // E4M3 1.0
  SetBlockScales(o, ScaleFormat::kE4m3, is_a ? 1 : 16, is_a ? 16 : 1, &scale);
  o.tensor_scale = 1.0f / Nvfp4TensorEncodeScale(amax);
  o.te_alpha.amax = amax;
  o.te_alpha.bound = bound;
  return o;
}

NpyArray Golden(const std::string& name) { return ReadNpy(std::string(QMX_SOURCE_DIR) + "/golden/nvfp4-te/" + name + ".npy"); }

std::vector<float> Transposed(const std::vector<float>& x, size_t rows, size_t cols) {
  std::vector<float> t(x.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

AccumModel Model(const std::string& name, AlphaRule rule) {
  AccumModel m = AccumModelByName(name);
  m.alpha = rule;
  return m;
}

}  // namespace

TEST_CASE("alpha rules: te and te-ref against exact arithmetic; decode, te, te-ref and other orders disagree",
          "[gemm][alpha]") {
  std::mt19937 rng(20261126);
  std::uniform_real_distribution<double> e(-30.0, 30.0), u(1.0, 2.0);
  size_t te_vs_ref = 0, te_vs_decode = 0, te_vs_reassoc = 0, ref_vs_mul = 0;
  for (int t = 0; t < 20000; ++t) {
    const float amax_a = static_cast<float>(std::ldexp(u(rng), static_cast<int>(e(rng))));
    const float amax_b = static_cast<float>(std::ldexp(u(rng), static_cast<int>(e(rng))));
    const float ba = t % 3 == 1 ? 256.0f : 448.0f, bb = t % 3 == 2 ? 256.0f : 448.0f;
    const GemmOperand a = Nvfp4Operand(true, amax_a, ba), b = Nvfp4Operand(false, amax_b, bb);
    const float f = 36.0f * ba * bb;  // exact: 7225344, 4128768 or 2359296
    const float p = Fl32Mul(amax_a, amax_b);
    const float te = GemmAlphaAt(a, b, AlphaRule::kTe, 0, 0), ref = GemmAlphaAt(a, b, AlphaRule::kTeRef, 0, 0);
    const float decode = GemmAlphaAt(a, b, AlphaRule::kDecode, 0, 0);
    INFO("amax " << amax_a << " x " << amax_b << ", bounds " << ba << ", " << bb);
    REQUIRE(FloatBits(te) == FloatBits(Fl32Mul(p, Fl32Recip(f))));
    REQUIRE(FloatBits(ref) == FloatBits(Fl32Div(p, f)));
    REQUIRE(FloatBits(decode) == FloatBits(Fl32Mul(a.tensor_scale, b.tensor_scale)));
    te_vs_ref += FloatBits(te) != FloatBits(ref);
    te_vs_decode += FloatBits(te) != FloatBits(decode);
    te_vs_reassoc += FloatBits(te) != FloatBits(Fl32Mul(amax_a, Fl32Mul(amax_b, Fl32Recip(f))));  // amax_a * (amax_b * inv)
    ref_vs_mul += FloatBits(ref) != FloatBits(Fl32Div(Fl32Div(p, 36.0f * ba), bb));             // (p / (36 ba)) / bb
  }
  // Each alternative order gives other bits on some of these pairs, so a test on them pins the order.
  CHECK(te_vs_ref > 100);
  CHECK(te_vs_decode > 100);
  CHECK(te_vs_reassoc > 100);
  CHECK(ref_vs_mul > 100);
  // The reciprocal TE multiplies by, for E4M3 bound 448 on both sides: fl32(1 / 7225344).
  CHECK(FloatBits(Fl32Recip(7225344.0f)) == FloatBits(1.0f / 7225344.0f));
}

TEST_CASE("gemm: alpha=te-ref reproduces Transformer Engine's reference NVFP4 GEMM bit for bit", "[gemm][alpha][te]") {
  struct Mode {
    const char* name;
    ScaleRule x_rule, w_rule;
    bool row;
  };
  const Mode modes[] = {{"default", ScaleRule::kNvfp4, ScaleRule::kNvfp4, false},
                        {"4over6-mae", ScaleRule::kNvfp4FourOverSix, ScaleRule::kNvfp4FourOverSix, false},
                        {"mixed", ScaleRule::kNvfp4, ScaleRule::kNvfp4FourOverSix, false},
                        {"row-default", ScaleRule::kNvfp4, ScaleRule::kNvfp4, true},
                        {"row-4over6-mae", ScaleRule::kNvfp4FourOverSix, ScaleRule::kNvfp4FourOverSix, true}};
  size_t decode_differs = 0, te_differs = 0, outputs = 0;
  for (const char* name : {"normal", "logmag", "rowmag"}) {
    const NpyArray xa = Golden(std::string("gemm_") + name + "_x"), wa = Golden(std::string("gemm_") + name + "_w");
    const size_t m = xa.shape[0], k = xa.shape[1], n = wa.shape[0];
    const std::vector<float> x = FloatsOf(xa), wt = Transposed(FloatsOf(wa), n, k);  // B = W^T, K x N
    for (const Mode& md : modes) {
      const std::string file = std::string("gemm_") + name + "_" + md.name;
      INFO(file);
      const std::vector<float> y = FloatsOf(Golden(file + "_y")), te_alpha = FloatsOf(Golden(file + "_alpha"));
      QuantSpec xs = QuantSpecByName(md.row ? "nvfp4-row" : "nvfp4"), ws = QuantSpecByName("nvfp4");
      xs.rule = md.x_rule;
      ws.rule = md.w_rule;
      ws.axis = Axis::kCol;  // W's rows are B's columns: blocks of 16 along K
      const GemmOperand a = OperandFromQuantized(Quantize(TensorView{DType::kF32, x.data(), m, k}, xs));
      const GemmOperand b = OperandFromQuantized(Quantize(TensorView{DType::kF32, wt.data(), k, n}, ws));
      REQUIRE(y.size() == m * n);
      REQUIRE(te_alpha.size() == (md.row ? m : 1));
      for (size_t i = 0; i < te_alpha.size(); ++i) {
        INFO("alpha of row " << i);
        CHECK(FloatBits(GemmAlphaAt(a, b, AlphaRule::kTeRef, i, 0)) == FloatBits(te_alpha[i]));
      }
      // TE's reference: exact 16-element block sums times fl32(sx * sw), added in FP32: block-exact.
      const std::vector<float> got = Gemm(a, b, nullptr, Model("block-exact", AlphaRule::kTeRef));
      const std::vector<float> ref = GemmRef(a, b, nullptr, Model("block-exact", AlphaRule::kTeRef));
      const std::vector<float> dec = Gemm(a, b, nullptr, Model("block-exact", AlphaRule::kDecode));
      RequireSame(got, y, file + " against TE");
      RequireSame(ref, got, file + " reference against fast");
      decode_differs += BitsDiffer(dec, y);
      outputs += y.size();
      if (!md.row) te_differs += BitsDiffer(Gemm(a, b, nullptr, Model("block-exact", AlphaRule::kTe)), y);
    }
  }
  // The decode rule misses TE's outputs here; the te rule (TE's CUDA path) may or may not (it multiplies by
  // the rounded reciprocal where the reference divides).
  INFO("of " << outputs << " outputs, the decode rule differs from TE in " << decode_differs << ", te in " << te_differs);
  CHECK(decode_differs > 100);
}

TEST_CASE("alpha rules in every model: the fast path equals the reference, alpha scales the accumulated sum",
          "[gemm][alpha]") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const size_t m = 24, k = 128, n = 20;
  std::vector<float> x(m * k), w(k * n);
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng) * std::ldexp(1.0f, static_cast<int>(i / k) % 9 - 4);
  for (float& v : w) v = nd(rng) * 3.0f;
  const char* const spec = GENERATE(values<const char*>({"nvfp4", "nvfp4-row"}));
  CAPTURE(spec);
  QuantSpec ws = QuantSpecByName("nvfp4");
  ws.axis = Axis::kCol;
  const GemmOperand a = OperandFromQuantized(Quantize(TensorView{DType::kF32, x.data(), m, k}, QuantSpecByName(spec)));
  const GemmOperand b = OperandFromQuantized(Quantize(TensorView{DType::kF32, w.data(), k, n}, ws));
  const bool row = std::string(spec) == "nvfp4-row";
  CHECK(a.te_alpha.row_amax.size() == (row ? m : 0));
  GemmOperand a1 = a, b1 = b;  // no second-level scales: the accumulated sums alone
  a1.tensor_scale = b1.tensor_scale = 1.0f;
  a1.row_scales.clear();
  a1.te_alpha.row_amax.clear();
  for (const char* model : {"exact", "fp32-seq", "block-exact", "blackwell-mxf4nvf4", "blackwell-mxf4nvf4-mmasim"}) {
    for (AlphaRule rule : {AlphaRule::kDecode, AlphaRule::kTe, AlphaRule::kTeRef}) {
      if (row && rule == AlphaRule::kTe) continue;
      INFO(spec << " " << model << " alpha=" << AlphaRuleName(rule));
      const AccumModel am = Model(model, rule);
      CheckEverywhere(a, b, {}, am, std::string(spec) + " alpha=" + AlphaRuleName(rule));
      if (std::string(model) == "exact") continue;  // the exact model folds alpha into each product instead
      std::vector<float> want = GemmRef(a1, b1, nullptr, Model(model, AlphaRule::kDecode));
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < n; ++j) want[i * n + j] = GemmAlphaAt(a, b, rule, i, j) * want[i * n + j];
      RequireSame(GemmRef(a, b, nullptr, am), want, "alpha times the accumulated sum");
    }
  }
  // The exact model under a TE rule: one rounding of the exact sum times TE's FP32 alpha.
  const std::vector<float> ex = GemmRef(a, b, nullptr, Model("exact", AlphaRule::kTeRef));
  for (size_t i = 0; i < m; ++i) {
    GemmOperand ai = a1, ones = b1;
    ai.rows = 1;
    ai.codes.assign(a1.codes.begin() + i * k, a1.codes.begin() + (i + 1) * k);
    ai.scale_rows = 1;
    ai.scales.assign(a1.scales.begin() + i * a1.scale_cols, a1.scales.begin() + (i + 1) * a1.scale_cols);
    ai.tensor_scale = GemmAlphaAt(a, b, AlphaRule::kTeRef, i, 0);  // one FP32 factor folded exactly
    RequireSame(std::vector<float>(ex.begin() + i * n, ex.begin() + (i + 1) * n),
                GemmRef(ai, ones, nullptr, Model("exact", AlphaRule::kDecode)),
                std::string(spec) + " exact row " + std::to_string(i));
  }
}

TEST_CASE("alpha rules: what they refuse", "[gemm][alpha]") {
  const GemmOperand a = Nvfp4Operand(true, 3.0f, 448.0f), b = Nvfp4Operand(false, 5.0f, 448.0f);
  GemmOperand no_amax = b;
  no_amax.te_alpha.amax = -1.0f;
  CHECK_THROWS_WITH(Gemm(a, no_amax, nullptr, Model("exact", AlphaRule::kTe)),
                    Catch::Contains("B has none"));
  CHECK_NOTHROW(Gemm(a, no_amax, nullptr, Model("exact", AlphaRule::kDecode)));
  GemmOperand bad_bound = b;
  bad_bound.te_alpha.bound = 300.0f;
  CHECK_THROWS_WITH(Gemm(a, bad_bound, nullptr, Model("exact", AlphaRule::kTeRef)), Catch::Contains("448 (or 256"));
  GemmOperand rows = a;
  rows.row_scales = {rows.tensor_scale};
  rows.te_alpha.row_amax = {3.0f};
  rows.tensor_scale = 1.0f;
  CHECK_THROWS_WITH(Gemm(rows, b, nullptr, Model("exact", AlphaRule::kTe)), Catch::Contains("alpha=te-ref"));
  CHECK_NOTHROW(Gemm(rows, b, nullptr, Model("exact", AlphaRule::kTeRef)));
  rows.te_alpha.row_amax.clear();
  CHECK_THROWS_WITH(Gemm(rows, b, nullptr, Model("exact", AlphaRule::kTeRef)), Catch::Contains("per-line amax"));
  const std::vector<float> c(1, 0.0f);
  CHECK_THROWS_WITH(Gemm(a, b, c.data(), Model("exact", AlphaRule::kTe)), Catch::Contains("alpha=te"));
  CHECK_THROWS_WITH(ParseAlphaRule("cuda"), Catch::Contains("decode, te, te-ref"));
  CHECK(ParseAlphaRule("te-ref") == AlphaRule::kTeRef);
  CHECK_THAT(DescribeModel(Model("blackwell-mxf4nvf4", AlphaRule::kTe)), Catch::Contains("alpha te"));
}

TEST_CASE("recipes: --alpha reaches the NVFP4 GEMMs and no other", "[gemm][alpha][recipe]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const size_t m = 32, n = 32, k = 64;
  std::vector<float> x(m * k), w(n * k), dy(m * n);
  for (float& v : x) v = nd(rng);
  for (float& v : w) v = nd(rng) * 0.02f;
  for (float& v : dy) v = nd(rng) * 1e-3f;
  const LinearInputs in{x.data(), w.data(), dy.data(), m, n, k};
  const LinearReference lref = ComputeLinearReference(in);
  auto step = [&](const char* recipe, AlphaRule rule) {
    RecipeState st;
    RecipeOptions o;
    o.alpha = rule;
    o.keep_values = true;
    return RunRecipeStep(TrainingRecipeByName(recipe), in, lref, st, o);
  };
  const RecipeStepResult dec = step("nvfp4", AlphaRule::kDecode), te = step("nvfp4", AlphaRule::kTe);
  // FPROP: X and W per-tensor NVFP4 (bound 448): alpha = fl32(fl32(amax_x * amax_w) * fl32(1 / 7225344)).
  float amax_x = 0, amax_w = 0;
  for (float v : x) amax_x = std::max(amax_x, std::fabs(v));
  for (float v : w) amax_w = std::max(amax_w, std::fabs(v));
  CHECK(FloatBits(te.gemms[0].alpha) == FloatBits(Fl32Mul(Fl32Mul(amax_x, amax_w), 1.0f / 7225344.0f)));
  CHECK(FloatBits(dec.gemms[0].alpha) == FloatBits(dec.gemms[0].a.tensor_scale * dec.gemms[0].b.tensor_scale));
  size_t differ = 0;
  for (int g = 0; g < 3; ++g)
    for (size_t i = 0; i < te.gemms[g].out.size(); ++i) differ += FloatBits(te.gemms[g].out[i]) != FloatBits(dec.gemms[g].out[i]);
  CHECK(differ > 0);
  const RecipeStepResult mx_dec = step("mxfp8", AlphaRule::kDecode), mx_te = step("mxfp8", AlphaRule::kTe);
  for (int g = 0; g < 3; ++g) CHECK(mx_te.gemms[g].out == mx_dec.gemms[g].out);
}
