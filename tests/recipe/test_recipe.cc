// test_recipe.cc: the training recipes. Each recipe's quantization choices against its source (the
// tables) and against hand-worked small layers (row- vs column-wise copies, round-up vs round-down,
// hybrid E5M2 gradients, 2-D weight blocks, NVFP4's SR and RHT, Quartet's backward quantizer, delayed
// scaling's history); the exact and BF16 paths against Eigen FP64 GEMMs within their rounding bounds;
// thread-count independence; clear errors.
#include <omp.h>

#include <Eigen/Dense>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "qmx/error.h"
#include "qmx/recipe.h"

using namespace qmx;
using Catch::Matchers::Contains;

namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Layer {
  std::vector<float> x, w, dy;
  size_t m, n, k;
  LinearInputs in() const { return {x.data(), w.data(), dy.data(), m, n, k}; }
};

Layer RandomLayer(size_t m, size_t n, size_t k, uint64_t seed) {
  Layer l{std::vector<float>(m * k), std::vector<float>(n * k), std::vector<float>(m * n), m, n, k};
  const LayerGen g = DefaultLayerGen();
  GenerateTensor(g.x, seed, m, k, l.x.data());
  GenerateTensor(g.w, seed + 1, n, k, l.w.data());
  GenerateTensor(g.dy, seed + 2, m, n, l.dy.data());
  return l;
}

RecipeStepResult Step(const std::string& recipe, const Layer& l, const std::string& accum = "auto", uint64_t seed = 0) {
  RecipeOptions o;
  o.accum = accum;
  o.seed = seed;
  o.keep_values = true;
  RecipeState st;
  const LinearReference ref = ComputeLinearReference(l.in());
  return RunRecipeStep(TrainingRecipeByName(recipe), l.in(), ref, st, o);
}

const RecipeGemmResult& G(const RecipeStepResult& r, LinearGemm g) { return r.gemms[static_cast<int>(g)]; }

}  // namespace

TEST_CASE("recipe: every recipe's table says what its source says", "[recipe]") {
  for (const std::string& name : TrainingRecipeNames()) {
    const TrainingRecipe r = TrainingRecipeByName(name);
    INFO(name);
    CHECK(r.name == name);
    // The three GEMMs take their operands along K from the right tensors in the right orientation.
    CHECK((r.gemms[0].a.tensor == LinearTensor::kX && !r.gemms[0].a.transposed));
    CHECK((r.gemms[0].b.tensor == LinearTensor::kW && !r.gemms[0].b.transposed));
    CHECK((r.gemms[1].a.tensor == LinearTensor::kDy && !r.gemms[1].a.transposed));
    CHECK((r.gemms[1].b.tensor == LinearTensor::kW && r.gemms[1].b.transposed));
    CHECK((r.gemms[2].a.tensor == LinearTensor::kDy && r.gemms[2].a.transposed));
    CHECK((r.gemms[2].b.tensor == LinearTensor::kX && r.gemms[2].b.transposed));
    CHECK(!DescribeTrainingRecipe(r).empty());
  }
  const TrainingRecipe bf = TrainingRecipeByName("bf16");
  for (const RecipeGemm& g : bf.gemms) CHECK((g.a.kind == OperandKind::kBf16 && g.b.kind == OperandKind::kBf16));

  for (const char* n : {"fp8-delayed", "fp8-current"}) {  // hybrid: E4M3 X and W, E5M2 dY, per tensor, FP32 scales
    const TrainingRecipe r = TrainingRecipeByName(n);
    for (const RecipeGemm& g : r.gemms)
      for (const OperandPlan* p : {&g.a, &g.b}) {
        CHECK(std::string(p->spec.elem.name) == (p->tensor == LinearTensor::kDy ? "e5m2" : "e4m3"));
        CHECK(DescribeBlock(p->spec) == "per-tensor");
        CHECK(p->spec.rule == ScaleRule::kFp32);
        CHECK(p->delayed == (std::string(n) == "fp8-delayed"));
      }
    CHECK(r.gemms[0].accum == "hopper-fp8-fast");  // TE: no split accumulator for FPROP
    CHECK(r.gemms[1].accum == "hopper-fp8");
    CHECK(r.gemms[2].accum == "hopper-fp8");
  }
  {
    const TrainingRecipe r = TrainingRecipeByName("fp8-blockwise");
    for (const RecipeGemm& g : r.gemms)
      for (const OperandPlan* p : {&g.a, &g.b}) {
        CHECK(std::string(p->spec.elem.name) == "e4m3");
        CHECK(p->spec.rule == ScaleRule::kFp32Pow2);
        CHECK(DescribeBlock(p->spec) == (p->tensor == LinearTensor::kW ? "128x128" : "1x128"));
      }
    CHECK(r.gemms[2].accum == "hopper-fp8-vec");  // 1x128 x 1x128
  }
  for (const char* n : {"mxfp8", "mxfp8-ocp", "mxfp8-e5m2-grads"}) {
    const TrainingRecipe r = TrainingRecipeByName(n);
    for (const RecipeGemm& g : r.gemms)
      for (const OperandPlan* p : {&g.a, &g.b}) {
        INFO(n << " " << DescribeOperand(*p));
        CHECK(DescribeBlock(p->spec) == "1x32");
        CHECK(p->spec.rule == (std::string(n) == "mxfp8-ocp" ? ScaleRule::kOcpFloor : ScaleRule::kRoundUp));
        const bool e5 = std::string(n) == "mxfp8-e5m2-grads" && p->tensor == LinearTensor::kDy;
        CHECK(std::string(p->spec.elem.name) == (e5 ? "e5m2" : "e4m3"));
        CHECK(!p->hadamard);
        CHECK(g.accum == "blackwell-mxf8f6f4");
      }
  }
  {
    const TrainingRecipe r = TrainingRecipeByName("nvfp4");
    for (const RecipeGemm& g : r.gemms)
      for (const OperandPlan* p : {&g.a, &g.b}) {
        INFO(DescribeOperand(*p));
        CHECK(std::string(p->spec.elem.name) == "e2m1");
        CHECK(p->spec.rule == ScaleRule::kNvfp4);
        CHECK(DescribeBlock(p->spec) == (p->tensor == LinearTensor::kW ? "16x16" : "1x16"));
        CHECK(p->stochastic == (p->tensor == LinearTensor::kDy));                   // SR on gradients only
        CHECK(p->hadamard.has_value() == (g.which == LinearGemm::kWgrad));           // RHT on WGRAD inputs only
        if (p->hadamard) CHECK((p->hadamard->block == 16 && p->hadamard->randomized));
      }
  }
  {
    const TrainingRecipe r = TrainingRecipeByName("quartet");
    CHECK(r.gemms[0].a.kind == OperandKind::kQuest);
    CHECK(r.gemms[0].b.kind == OperandKind::kQuest);
    CHECK((r.gemms[0].a.hadamard && !r.gemms[0].a.hadamard->randomized && r.gemms[0].a.hadamard->block == 32));
    for (int i = 1; i < 3; ++i) {
      const RecipeGemm& g = r.gemms[i];
      CHECK(g.quest_backward);
      CHECK(g.a.kind == OperandKind::kQuartetSr);
      CHECK(g.b.kind == OperandKind::kQuartetSr);
      CHECK((!g.a.from_forward && g.b.from_forward));  // the backward re-quantizes W_q and X_q
      CHECK((g.a.hadamard && g.a.hadamard->randomized && g.b.hadamard && g.b.hadamard->randomized));
    }
  }
  CHECK_THROWS_WITH(TrainingRecipeByName("fp8"), Contains("unknown training recipe 'fp8'") && Contains("quartet"));
}

TEST_CASE("mxfp8: FPROP and WGRAD quantize X along different axes from the FP32 source", "[recipe]") {
  // Worked by hand (Transformer Engine's round-up rule, te-rcp element scaling, RNE):
  //   X = [[448, 1.5 * 2^-9], [0, 1]].
  //   FPROP, X row-wise: row 0 amax 448 -> X = 2^0; 1.5 * 2^-9 is an E4M3 subnormal midpoint (1.5 quanta of
  //   2^-9) -> ties to even -> 2 * 2^-9. Row 1 amax 1 -> 1/448 rounded up to 2^-8; 1 -> 256 exactly.
  //   WGRAD, X column-wise: column 1 = [1.5 * 2^-9, 1], amax 1 -> 2^-8; 1.5 * 2^-9 / 2^-8 = 0.75, exact.
  Layer l{{448.0f, 0.0029296875f, 0.0f, 1.0f}, {1, 0, 0, 1}, {1, 0, 0, 1}, 2, 2, 2};
  for (const char* r : {"mxfp8", "mxfp8-ocp"}) {  // amax 448 and 1 give the same scales under both rules
    INFO(r);
    const RecipeStepResult res = Step(r, l);
    CHECK(G(res, LinearGemm::kFprop).a_values == std::vector<double>{448, 0.00390625, 0, 1});
    CHECK(G(res, LinearGemm::kWgrad).bt_values == std::vector<double>{448, 0, 0.0029296875, 1});
  }
}

TEST_CASE("recipe: mxfp8 rounds the scale up where mxfp8-ocp saturates", "[recipe]") {
  // amax 480: OCP floor(log2 480) - 8 = 0 -> X = 1, 480 clamps to 448; round-up: 480 / 448 -> 2^1, 240 exact.
  Layer l{{480.0f, 1.0f, 1.0f, 1.0f}, {1, 0, 0, 1}, {1, 0, 0, 1}, 2, 2, 2};
  const RecipeStepResult up = Step("mxfp8", l), ocp = Step("mxfp8-ocp", l);
  CHECK(G(up, LinearGemm::kFprop).a_values[0] == 480);
  CHECK(G(up, LinearGemm::kFprop).a.saturated == 0);
  CHECK(G(ocp, LinearGemm::kFprop).a_values[0] == 448);
  CHECK(G(ocp, LinearGemm::kFprop).a.saturated == 1);
}

TEST_CASE("fp8-current: E4M3 activations, E5M2 gradients, one FP32 scale per tensor", "[recipe]") {
  // dY amax 0.5 -> s = 57344 / 0.5 = 114688. 0.3 * s = 34406.4 -> E5M2 step 8192 in [32768, 65536) -> 32768;
  // 0.1 * s = 11468.8 -> step 2048 in [8192, 16384): 12288 is nearer than 10240.
  // X amax 1 -> s = 448. 0.3 * 448 = 134.4 -> E4M3 step 16 -> 128; 0.1 * 448 = 44.8 -> step 4 -> 44.
  Layer l{{1.0f, 0.3f, 0.0f, 0.1f}, {1, 0, 0, 1}, {0.5f, 0.3f, 0.1f, 0.0f}, 2, 2, 2};
  const RecipeStepResult r = Step("fp8-current", l);
  CHECK(G(r, LinearGemm::kFprop).a_values == std::vector<double>{448, 128, 0, 44});
  CHECK(G(r, LinearGemm::kDgrad).a_values == std::vector<double>{57344, 32768, 12288, 0});
  CHECK(G(r, LinearGemm::kDgrad).a.tensor_scale == 1.0f / 114688.0f);
  CHECK(G(r, LinearGemm::kFprop).a.tensor_scale == 1.0f / 448.0f);
  // WGRAD's dY^T is the same per-tensor quantization, transposed.
  CHECK(G(r, LinearGemm::kWgrad).a_values == std::vector<double>{57344, 12288, 32768, 0});
  CHECK(G(r, LinearGemm::kDgrad).alpha == G(r, LinearGemm::kDgrad).a.tensor_scale * G(r, LinearGemm::kDgrad).b.tensor_scale);
}

TEST_CASE("fp8-blockwise: 128x128 weight blocks make the column-wise copy the transpose", "[recipe]") {
  // One 128x128 block with amax 1000: s = 448 / 1000 = 0.448, floored to 0.25 (TE's power-of-two scales).
  // 1000 * 0.25 = 250 -> E4M3 step 16 in [128, 256) -> 256 -> 1024; 1 -> 0.25 and 3 -> 0.75 exact.
  Layer l = RandomLayer(4, 128, 128, 3);
  std::fill(l.w.begin(), l.w.end(), 0.0f);
  l.w[0] = 1000;
  l.w[1 * 128 + 1] = 1;
  l.w[2 * 128 + 3] = 3;
  const RecipeStepResult r = Step("fp8-blockwise", l);
  // A single block is the whole tensor: its scale travels as the operand's tensor scale.
  const std::vector<double>& wf = G(r, LinearGemm::kFprop).bt_values;  // W, n x k
  const std::vector<double>& wd = G(r, LinearGemm::kDgrad).bt_values;  // W^T, k x n
  const double sf = G(r, LinearGemm::kFprop).b.tensor_scale, sd = G(r, LinearGemm::kDgrad).b.tensor_scale;
  CHECK(sf == 4);
  CHECK(wf[0] * sf == 1024);
  CHECK(wf[1 * 128 + 1] * sf == 1);
  CHECK(wf[2 * 128 + 3] * sf == 3);
  CHECK(wd[3 * 128 + 2] * sd == 3);
  // On random weights too: 2-D blocks quantize W and W^T identically; MXFP8's 1x32 copies differ.
  const Layer rl = RandomLayer(32, 256, 256, 5);
  for (const char* name : {"fp8-blockwise", "mxfp8"}) {
    const RecipeStepResult rr = Step(name, rl);
    const std::vector<double>& a = G(rr, LinearGemm::kFprop).bt_values;
    const std::vector<double>& b = G(rr, LinearGemm::kDgrad).bt_values;
    size_t differ = 0;
    for (size_t i = 0; i < 256; ++i)
      for (size_t j = 0; j < 256; ++j) differ += a[i * 256 + j] != b[j * 256 + i];
    INFO(name);
    if (std::string(name) == "fp8-blockwise") CHECK(differ == 0);
    else CHECK(differ > 0);
  }
}

TEST_CASE("nvfp4: RNE on X, stochastic rounding on dY, 16x16 weights, shared RHT signs on WGRAD", "[recipe]") {
  // Every row of X and dY: [6, 1.25 x 15]. Tensor amax 6 -> S_enc = 2688 / 6 = 448; block amax 6 -> E4M3
  // block scale 448, element factor 1 (to within an ulp): 6 -> 6 and 1.25 -> 1 (RNE: a tie, or just below it).
  // Under SR, 1.25 becomes 1 or 1.5 with probability 1/2 each.
  const size_t m = 16, n = 16, k = 16;
  Layer l{std::vector<float>(m * k, 1.25f), std::vector<float>(n * k, 0.5f), std::vector<float>(m * n, 1.25f), m, n, k};
  for (size_t r = 0; r < m; ++r) l.x[r * k] = l.dy[r * n] = 6.0f;
  const RecipeStepResult res = Step("nvfp4", l, "auto", 7);
  const std::vector<double>& xa = G(res, LinearGemm::kFprop).a_values;
  const std::vector<double>& da = G(res, LinearGemm::kDgrad).a_values;
  size_t up = 0;
  for (size_t r = 0; r < m; ++r) {
    CHECK(xa[r * k] == 6 * 448);
    CHECK(da[r * n] == 6 * 448);
    for (size_t c = 1; c < k; ++c) {
      CHECK(xa[r * k + c] == 448);
      const double v = da[r * n + c];
      CHECK((v == 448 || v == 1.5 * 448));
      up += v == 1.5 * 448;
    }
  }
  CHECK(up > 80);  // 240 draws at p = 1/2: mean 120, sd 7.7
  CHECK(up < 160);
  CHECK(G(res, LinearGemm::kFprop).a.tensor_scale == 1.0f / 448.0f);

  // The random Hadamard cancels in WGRAD only when both operands share its signs: with exact accumulation
  // the output stays close to dY^T X (a sign mismatch would leave it uncorrelated).
  const Layer rl = RandomLayer(64, 64, 64, 11);
  const RecipeStepResult e = Step("nvfp4", rl, "exact", 3);
  CHECK(G(e, LinearGemm::kWgrad).error.SqnrDb() > 10);
  CHECK(G(e, LinearGemm::kWgrad).error.Cosine() > 0.95);
}

TEST_CASE("quartet: the backward quantizer's scale, 4/3 range and unbiased SR", "[recipe]") {
  // Block amax 1 -> X = 2^(0 - 2) = 0.25, s = fl32(0.25 * fl32(4/3)). Elements at 2s and 0.5s land on the
  // E2M1 grid exactly (2 and 0.5); 1.25s rounds to 1 or 1.5 with probability 1/2.
  const float four_thirds = static_cast<float>(4.0 / 3.0);
  const float s = 0.25f * four_thirds;
  std::vector<float> x(64 * 32, 1.25f * s);
  for (size_t r = 0; r < 64; ++r) {
    x[r * 32] = 1.0f;
    x[r * 32 + 1] = 2 * s;
    x[r * 32 + 2] = 0.5f * s;
    x[r * 32 + 3] = -2 * s;
  }
  const GemmOperand q = QuantizeQuartetBackward(x.data(), 64, 32, 9);
  CHECK(q.tensor_scale == four_thirds);
  size_t up = 0;
  for (size_t r = 0; r < 64; ++r) {
    CHECK(q.scales[r] == 0.25f);
    CHECK(DecodeToFloat(fmt::kE2M1, q.codes[r * 32 + 1]) == 2.0f);
    CHECK(DecodeToFloat(fmt::kE2M1, q.codes[r * 32 + 2]) == 0.5f);
    CHECK(DecodeToFloat(fmt::kE2M1, q.codes[r * 32 + 3]) == -2.0f);
    const float v0 = DecodeToFloat(fmt::kE2M1, q.codes[r * 32]);  // 1 / s = 2.9999998: 2 or 3
    CHECK((v0 == 3.0f || v0 == 2.0f));
    for (size_t c = 4; c < 32; ++c) {
      const float v = DecodeToFloat(fmt::kE2M1, q.codes[r * 32 + c]);
      CHECK((v == 1.0f || v == 1.5f));
      up += v == 1.5f;
    }
  }
  // 64 x 28 = 1792 draws at p = 1/2: mean 896, sd 21.
  CHECK(up > 790);
  CHECK(up < 1002);
  CHECK_THROWS_WITH(QuantizeQuartetBackward(x.data(), 32, 64 - 16, 1), Contains("multiple of the MXFP4 group of 32"));

  // The recipe end to end: forward QuEST, backward on the forward's quantized tensors, masked and inverted.
  const Layer l = RandomLayer(64, 64, 128, 2);
  const RecipeStepResult r = Step("quartet", l);
  CHECK(G(r, LinearGemm::kDgrad).b.name == "W_q^T");
  CHECK(G(r, LinearGemm::kWgrad).b.name == "X_q^T");
  for (const RecipeGemmResult& g : r.gemms) {
    INFO(LinearGemmName(g.which));
    CHECK(g.error.Cosine() > 0.9);
  }
}

TEST_CASE("fp8-delayed: each step uses the amax history of the steps before it", "[recipe]") {
  // X = a * I. History length 2, no priming: step 0 uses scale 1; step t uses 448 / max(history).
  const size_t d = 2;
  const float amax[5] = {1, 8, 1, 1, 1};
  const float want[5] = {1.0f, 1.0f / 448.0f, 1.0f / 56.0f, 1.0f / 56.0f, 1.0f / 448.0f};
  RecipeOptions o;
  o.amax_history = 2;
  o.prime_history = false;
  RecipeState st;
  const TrainingRecipe r = TrainingRecipeByName("fp8-delayed");
  for (int s = 0; s < 5; ++s) {
    Layer l{{amax[s], 0, 0, amax[s]}, {1, 0, 0, 1}, {1, 0, 0, 1}, d, d, d};
    const LinearReference ref = ComputeLinearReference(l.in());
    const RecipeStepResult res = RunRecipeStep(r, l.in(), ref, st, o);
    INFO("step " << s);
    CHECK(res.delayed_decode_x == want[s]);
    CHECK(res.delayed_decode_w == (s == 0 ? 1.0f : 1.0f / 448.0f));
    // The spike (step 1) meets the scale of amax 1: 8 * 448 saturates.
    CHECK(G(res, LinearGemm::kFprop).a.saturated == (s == 1 ? 2u : 0u));
    // The fields the CLI and Python report: the same numbers, the counts as counts.
    const RecipeGemmResult& g = G(res, LinearGemm::kFprop);
    const std::vector<RecipeGemmField> f = RecipeGemmFields(g);
    REQUIRE(f.size() == 13);
    CHECK((f[0].name == "sqnr_db" && f[2].name == "cosine" && f[9].name == "a_saturated" && f[9].count));
    CHECK(f[9].value == static_cast<double>(g.a.saturated));
    CHECK(f[2].value == g.error.Cosine());
    CHECK(!f[7].count);
  }
  CHECK(st.x->history() == std::vector<float>{1, 1});  // newest first, length 2
  // A single step primes the history with the tensor's own amax: the steady state, equal to current scaling.
  const Layer l = RandomLayer(32, 32, 64, 4);
  const RecipeStepResult dl = Step("fp8-delayed", l), cur = Step("fp8-current", l);
  for (int g = 0; g < 3; ++g) CHECK(dl.gemms[g].out == cur.gemms[g].out);
}

TEST_CASE("recipe: the exact and BF16 paths agree with Eigen FP64 GEMMs within their rounding bounds", "[recipe]") {
  const Layer l = RandomLayer(64, 64, 128, 21);
  const double u = std::ldexp(1.0, -24);
  const std::string name = GENERATE(from_range(TrainingRecipeNames()));
  CAPTURE(name);
  for (const char* accum : {"exact", "fp32-seq"}) {
    if (std::string(accum) == "fp32-seq" && name != "bf16") continue;
    const RecipeStepResult r = Step(name, l, accum, 5);
    for (const RecipeGemmResult& g : r.gemms) {
      if (name == "quartet" && g.which != LinearGemm::kFprop) continue;  // masked and rotated after the GEMM
      INFO(name << " " << accum << " " << LinearGemmName(g.which));
      const size_t k = g.which == LinearGemm::kFprop ? l.k : g.which == LinearGemm::kDgrad ? l.n : l.m;
      const size_t rows = g.a_values.size() / k, cols = g.bt_values.size() / k;
      REQUIRE(g.out.size() == rows * cols);
      const Eigen::Map<const MatD> a(g.a_values.data(), rows, k), bt(g.bt_values.data(), cols, k);
      const MatD ref = a * bt.transpose();
      const MatD mag = a.cwiseAbs() * bt.cwiseAbs().transpose();
      const double alpha = g.alpha;
      size_t bad = 0;
      for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < cols; ++j) {
          const double want = ref(i, j) * alpha, got = g.out[i * cols + j];
          // exact: one rounding of the exact sum, one of alpha (a product of two FP32 scales) and one of the
          // product by alpha; fp32-seq: gamma_K of the magnitudes. Eigen's own error: K * 2^-52 of them.
          const double fp64 = static_cast<double>(k) * std::ldexp(1.0, -52) * mag(i, j) * std::fabs(alpha);
          const double bound = std::string(accum) == "exact"
                                   ? 3.01 * u * std::fabs(want) + fp64 + std::ldexp(1.0, -148)
                                   : (k * u / (1 - k * u)) * mag(i, j) * std::fabs(alpha) + fp64 + std::ldexp(1.0, -148);
          bad += !(std::fabs(got - want) <= bound);
        }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("recipe: the FP64 reference agrees with Eigen's double GEMM", "[recipe]") {
  const Layer l = RandomLayer(48, 40, 72, 8);
  const LinearReference ref = ComputeLinearReference(l.in());
  const Eigen::Map<const MatF> x(l.x.data(), l.m, l.k), w(l.w.data(), l.n, l.k), dy(l.dy.data(), l.m, l.n);
  const MatD xd = x.cast<double>(), wd = w.cast<double>(), dyd = dy.cast<double>();
  const MatD want[3] = {xd * wd.transpose(), dyd * wd, dyd.transpose() * xd};
  const MatD mag[3] = {xd.cwiseAbs() * wd.cwiseAbs().transpose(), dyd.cwiseAbs() * wd.cwiseAbs(),
                       dyd.cwiseAbs().transpose() * xd.cwiseAbs()};
  const std::vector<double>* got[3] = {&ref.y, &ref.dx, &ref.dw};
  const size_t ks[3] = {l.k, l.n, l.m};
  for (int g = 0; g < 3; ++g) {
    REQUIRE(got[g]->size() == static_cast<size_t>(want[g].size()));
    size_t bad = 0;
    for (Eigen::Index i = 0; i < want[g].rows(); ++i)
      for (Eigen::Index j = 0; j < want[g].cols(); ++j) {
        const double d = std::fabs((*got[g])[i * want[g].cols() + j] - want[g](i, j));
        bad += !(d <= 2.0 * ks[g] * std::ldexp(1.0, -53) * mag[g](i, j));
      }
    CHECK(bad == 0);
  }
}

TEST_CASE("recipe: a recipe step gives the same bits on 1 and 2 threads", "[recipe]") {
  const Layer l = RandomLayer(64, 64, 128, 13);
  for (const std::string& name : TrainingRecipeNames()) {
    omp_set_num_threads(1);
    const RecipeStepResult a = Step(name, l, "auto", 2);
    omp_set_num_threads(2);
    const RecipeStepResult b = Step(name, l, "auto", 2);
    INFO(name);
    for (int g = 0; g < 3; ++g) {
      REQUIRE(a.gemms[g].out.size() == b.gemms[g].out.size());
      CHECK(std::memcmp(a.gemms[g].out.data(), b.gemms[g].out.data(), 4 * a.gemms[g].out.size()) == 0);
      CHECK(std::memcmp(&a.gemms[g].error.sum_sq_err, &b.gemms[g].error.sum_sq_err, 8) == 0);
    }
  }
  // Another seed changes the stochastic recipes and nothing else.
  CHECK(Step("nvfp4", l, "auto", 2).gemms[1].out != Step("nvfp4", l, "auto", 3).gemms[1].out);
  CHECK(Step("mxfp8", l, "auto", 2).gemms[1].out == Step("mxfp8", l, "auto", 3).gemms[1].out);
}

TEST_CASE("recipe shape rules: each Hadamard block and Quartet block names its dimension", "[recipe]") {
  const auto rules = [](const char* name) {
    std::string s;
    for (const RecipeShapeRule& r : RecipeShapeRules(TrainingRecipeByName(name)))
      s += std::string(1, r.dim) + "%" + std::to_string(r.multiple) + " ";
    return s;
  };
  CHECK(rules("mxfp8").empty());
  CHECK(rules("fp8-blockwise").empty());
  CHECK(rules("nvfp4") == "m%16 ");     // the random Hadamard of WGRAD's operands, along the tokens
  CHECK(rules("quartet") == "k%32 n%32 m%32 ");
  const TrainingRecipe q = TrainingRecipeByName("quartet");
  CHECK_NOTHROW(CheckRecipeShape(q, 64, 96, 128, "layer"));
  CHECK_NOTHROW(CheckRecipeShape(q, 0, 96, 128, "layer"));  // tokens not known yet (a layer being built)
  CHECK_THROWS_WITH(CheckRecipeShape(q, 64, 40, 128, "layer fc2"),
                    Contains("layer fc2 under recipe quartet: out_features (n) = 40 is not a multiple of 32 (dgrad: "));
  CHECK_THROWS_WITH(CheckRecipeShape(TrainingRecipeByName("nvfp4"), 3, 24, 40, "layer"),
                    Contains("the tokens (m, rows of X) = 3 is not a multiple of 16 (wgrad: the Hadamard block of"));
  // The forward refuses a size the backward could not take, before it runs.
  RecipeState st;
  LinearSaved saved;
  const std::vector<float> x(3 * 32, 0.5f), w(16 * 32, 0.25f);
  CHECK_THROWS_WITH(LinearForward(TrainingRecipeByName("nvfp4"), x.data(), w.data(), 3, 16, 32, st, RecipeOptions{}, saved),
                    Contains("linear layer under recipe nvfp4: the tokens (m, rows of X) = 3"));
}

TEST_CASE("recipe: recipes refuse what they cannot model, naming the problem", "[recipe]") {
  Layer l = RandomLayer(32, 32, 48, 1);
  CHECK_THROWS_WITH(Step("quartet", l), Contains("recipe step under recipe quartet: in_features (k) = 48 is not a multiple of 32") &&
                                          Contains("fprop: the Hadamard block of X"));
  CHECK_THROWS_WITH(Step("bf16", l, "hopper-fp8"), Contains("bf16 recipe runs under exact or fp32-seq"));
  const Layer l2 = RandomLayer(32, 32, 64, 1);
  CHECK_THROWS_WITH(Step("mxfp8", l2, "hopper-fp8"), Contains("does not divide the scale block of 32"));
  CHECK_THROWS_WITH(Step("mxfp8", l2, "nonsense"), Contains("unknown accumulation model"));
  Layer nan = l2;
  nan.dy[5] = NAN;
  CHECK_THROWS_WITH(Step("mxfp8", nan), Contains("dY holds NaN at element 5"));
}

TEST_CASE("recipe: layer sequences are seeded, drift, decay and spike as configured", "[recipe]") {
  SequenceGen calm;
  calm.spike_rate = 0;
  calm.drift = 0;
  calm.weight_drift = 0;
  calm.grad_decay = 0.5;
  SequenceGen spiky = calm;
  spiky.spike_rate = 1;
  spiky.spike_gain = 64;
  LayerSequence a(DefaultLayerGen(), calm, 5, 16, 8, 32), b(DefaultLayerGen(), spiky, 5, 16, 8, 32);
  const LinearInputs a0 = a.Next();
  const std::vector<float> x0(a0.x, a0.x + 16 * 32), dy0(a0.dy, a0.dy + 16 * 8);
  const LinearInputs a1 = a.Next(), b1 = (b.Next(), b.Next());
  CHECK(!a.spiked());
  CHECK(b.spiked());
  CHECK(std::vector<float>(a1.x, a1.x + 16 * 32) == x0);  // no drift: the same X
  for (size_t i = 0; i < dy0.size(); ++i) CHECK(a1.dy[i] == dy0[i] * 0.5f);
  size_t spiked_rows = 0;
  for (size_t r = 0; r < 16; ++r) {
    bool all = true;
    for (size_t c = 0; c < 32; ++c) all = all && b1.x[r * 32 + c] == a1.x[r * 32 + c] * 64.0f;
    spiked_rows += all && a1.x[r * 32] != 0;
  }
  CHECK(spiked_rows == 1);
  // Drift replaces about `drift` of the elements per step; the same seed repeats the bits.
  SequenceGen drift;
  drift.drift = 0.25;
  drift.spike_rate = 0;
  LayerSequence c(DefaultLayerGen(), drift, 9, 64, 8, 32), d(DefaultLayerGen(), drift, 9, 64, 8, 32);
  std::vector<float> prev;
  for (int s = 0; s < 3; ++s) {
    const LinearInputs ci = c.Next(), di = d.Next();
    CHECK(std::memcmp(ci.x, di.x, 4 * 64 * 32) == 0);
    CHECK(std::memcmp(ci.dy, di.dy, 4 * 64 * 8) == 0);
    if (s > 0) {
      size_t changed = 0;
      for (size_t i = 0; i < prev.size(); ++i) changed += ci.x[i] != prev[i];
      CHECK(changed > 400);  // 2048 elements at 1/4: mean 512, sd 20
      CHECK(changed < 624);
    }
    prev.assign(ci.x, ci.x + 64 * 32);
  }
  CHECK_THROWS_WITH(LayerSequence(DefaultLayerGen(), drift, 1, 0, 8, 8), Contains("must be positive"));
}

TEST_CASE("recipe: linearForward then LinearBackward give RunRecipeStep's outputs, step after step", "[recipe]") {
  // Three steps on drifting tensors with carried state: SR seeds, RHT signs and delayed histories all depend
  // on the step, and Quartet's backward on the forward's QuEST outputs.
  for (const std::string& name : TrainingRecipeNames()) {
    const TrainingRecipe r = TrainingRecipeByName(name);
    for (const bool prime : {true, false}) {
      RecipeOptions o;
      o.keep_values = true;
      o.seed = 5;
      o.amax_history = 4;
      o.prime_history = prime;
      RecipeState whole, split;
      for (uint64_t s = 0; s < 3; ++s) {
        const Layer l = RandomLayer(32, 64, 128, 100 + 3 * s);
        const RecipeStepResult ref = RunRecipeStep(r, l.in(), ComputeLinearReference(l.in()), whole, o);
        LinearSaved saved;
        const std::vector<float> y = LinearForward(r, l.x.data(), l.w.data(), l.m, l.n, l.k, split, o, saved);
        std::vector<float> dx(l.m * l.k), dw(l.n * l.k);
        LinearBackward(r, l.x.data(), l.w.data(), l.dy.data(), split, o, saved, dx.data(), dw.data());
        INFO(name << " prime " << prime << " step " << s);
        CHECK(std::memcmp(y.data(), ref.gemms[0].out.data(), y.size() * 4) == 0);
        CHECK(std::memcmp(dx.data(), ref.gemms[1].out.data(), dx.size() * 4) == 0);
        CHECK(std::memcmp(dw.data(), ref.gemms[2].out.data(), dw.size() * 4) == 0);
        CHECK(split.step == whole.step);
        if (whole.x) CHECK(split.x->history() == whole.x->history());
        if (whole.dy) CHECK(split.dy->history() == whole.dy->history());
      }
    }
  }
  // A backward needs its forward.
  const TrainingRecipe r = TrainingRecipeByName("mxfp8");
  const Layer l = RandomLayer(32, 64, 128, 1);
  RecipeState st;
  LinearSaved saved;
  std::vector<float> dx(l.m * l.k), dw(l.n * l.k);
  CHECK_THROWS_WITH(LinearBackward(r, l.x.data(), l.w.data(), l.dy.data(), st, RecipeOptions{}, saved, dx.data(), dw.data()),
                    Contains("LinearForward"));
}
