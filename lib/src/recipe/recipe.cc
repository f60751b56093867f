// recipe.cc: the training recipes of qmx/recipe.h: their tables (which tensor each GEMM operand comes
// from, along which axis it is quantized, how), their names and descriptions. One step of a layer lives in
// recipe_step.cc, the FP64 references in recipe_reference.cc, the synthetic layers in recipe_sequence.cc.
#include "qmx/recipe.h"

#include <sstream>

#include "qmx/error.h"
#include "recipe/recipe_internal.h"

namespace qmx {

using detail::OperandName;

namespace {

// ------------------------------------------------------------------ recipe tables

OperandPlan Op(LinearTensor t, bool transposed, OperandKind kind, const QuantSpec& spec = {}) {
  OperandPlan p;
  p.tensor = t;
  p.transposed = transposed;
  p.kind = kind;
  p.spec = spec;
  p.stochastic = IsStochastic(spec.cast.rounding);
  return p;
}

QuantSpec Spec(const std::string& name, const std::string& profile = "") {
  QuantSpec s = QuantSpecByName(name);
  if (!profile.empty()) ApplyProfile(s, profile);
  return s;
}

QuantSpec WithElem(QuantSpec s, const Format& f) {
  s.elem = f;
  s.name += std::string("/") + f.name;
  return s;
}

QuantSpec Stochastic(QuantSpec s) {
  s.cast.rounding = Rounding::kSrA;
  s.cast.sr_bits = 8;  // cvt.rs: 8 random bits per FP4 element (docs/REFERENCES.md section 2)
  return s;
}

// A recipe whose three GEMMs quantize X, W and dY the same way in both orientations.
TrainingRecipe Uniform(const std::string& name, const std::string& summary, const std::string& source,
                       const QuantSpec& x, const QuantSpec& w, const QuantSpec& dy, const std::string& accum_fwd,
                       const std::string& accum_bwd, const std::string& accum_wgrad, bool delayed = false) {
  TrainingRecipe r;
  r.name = name;
  r.summary = summary;
  r.source = source;
  auto op = [&](LinearTensor t, bool tr) {
    const QuantSpec& s = t == LinearTensor::kX ? x : t == LinearTensor::kW ? w : dy;
    OperandPlan p = Op(t, tr, OperandKind::kSpec, s);
    p.delayed = delayed;
    return p;
  };
  r.gemms[0] = {LinearGemm::kFprop, op(LinearTensor::kX, false), op(LinearTensor::kW, false), accum_fwd, false};
  r.gemms[1] = {LinearGemm::kDgrad, op(LinearTensor::kDy, false), op(LinearTensor::kW, true), accum_bwd, false};
  r.gemms[2] = {LinearGemm::kWgrad, op(LinearTensor::kDy, true), op(LinearTensor::kX, true), accum_wgrad, false};
  return r;
}

TrainingRecipe MakeRecipe(const std::string& name) {
  const std::string te = "Transformer Engine";
  if (name == "bf16") {
    TrainingRecipe r;
    r.name = name;
    r.summary = "BF16 operands (RNE), FP32 accumulation: the baseline";
    r.source = "NVIDIA FP8 talk (figure 6)";
    r.gemms[0] = {LinearGemm::kFprop, Op(LinearTensor::kX, false, OperandKind::kBf16),
                  Op(LinearTensor::kW, false, OperandKind::kBf16), "fp32-seq", false};
    r.gemms[1] = {LinearGemm::kDgrad, Op(LinearTensor::kDy, false, OperandKind::kBf16),
                  Op(LinearTensor::kW, true, OperandKind::kBf16), "fp32-seq", false};
    r.gemms[2] = {LinearGemm::kWgrad, Op(LinearTensor::kDy, true, OperandKind::kBf16),
                  Op(LinearTensor::kX, true, OperandKind::kBf16), "fp32-seq", false};
    return r;
  }
  if (name == "fp8-delayed" || name == "fp8-current") {
    const bool delayed = name == "fp8-delayed";
    const QuantSpec e4 = Spec(delayed ? "fp8-delayed" : "fp8-tensor-current", "transformer-engine");
    // TE's split accumulator (_2X_ACC_*): off for FPROP (cuBLAS fast accumulation), on for DGRAD and WGRAD.
    return Uniform(name,
                   delayed ? "hybrid E4M3 forward / E5M2 gradients, per-tensor FP32 scales from an amax history"
                           : "hybrid E4M3 forward / E5M2 gradients, per-tensor FP32 scales from the current amax",
                   te + (delayed ? " DelayedScaling(HYBRID)" : " Float8CurrentScaling(HYBRID)") +
                       "; NVIDIA scaling blog, NVIDIA FP8 talk",
                   e4, e4, WithElem(e4, fmt::kE5M2), "hopper-fp8-fast", "hopper-fp8", "hopper-fp8", delayed);
  }
  if (name == "fp8-blockwise") {
    // TE Float8BlockScaling: E4M3 everywhere, FP32 scales constrained to powers of two by default.
    QuantSpec a = Spec("fp8-block1x128", "transformer-engine"), w = Spec("fp8-block128x128", "transformer-engine");
    a.rule = w.rule = ScaleRule::kFp32Pow2;
    return Uniform(name, "E4M3, 1x128 activations and gradients, 128x128 weights, power-of-two FP32 scales",
                   te + " Float8BlockScaling (DeepSeek-V3 style); NVIDIA FP8 talk", a, w, a, "hopper-fp8", "hopper-fp8",
                   "hopper-fp8-vec");
  }
  if (name == "mxfp8" || name == "mxfp8-ocp" || name == "mxfp8-e5m2-grads") {
    const bool ocp = name == "mxfp8-ocp";
    const QuantSpec s = Spec(ocp ? "mxfp8-ocp" : "mxfp8", ocp ? "ocp" : "transformer-engine");
    const QuantSpec g = name == "mxfp8-e5m2-grads" ? Spec("mxfp8_e5m2", "transformer-engine") : s;
    const std::string m = "blackwell-mxf8f6f4";
    if (ocp)
      return Uniform(name, "E4M3 1x32 along K for every GEMM, OCP round-down (floor) UE8M0 scales",
                     "OCP MX v1.0 6.3; MXFP8 recipes (figure 5)", s, s, g, m, m, m);
    if (g.elem.name != s.elem.name)
      return Uniform(name, "MXFP8 with E5M2 gradients (round-up scales)", "MXFP8 recipes (figure 4)", s, s, g, m, m, m);
    return Uniform(name, "E4M3 1x32 along K for every GEMM, round-up UE8M0 scales, row- and column-wise copies",
                   te + " MXFP8BlockScaling; MXFP8 recipes, NVIDIA scaling blog, NVIDIA FP8 talk", s, s, g, m, m, m);
  }
  if (name == "nvfp4") {
    const QuantSpec x = Spec("nvfp4", "transformer-engine"), w = Spec("nvfp4-2d", "transformer-engine");
    const QuantSpec g = Stochastic(x);
    const std::string m = "blackwell-mxf4nvf4";
    TrainingRecipe r = Uniform(name,
                               "E2M1 1x16 with E4M3 scales and an FP32 tensor scale, 16x16 weights, RHT-16 on the "
                               "WGRAD inputs, SR on gradients",
                               te + " NVFP4BlockScaling (arXiv 2509.25149)", x, w, g, m, m, m);
    HadamardSpec rht;
    rht.block = 16;
    rht.randomized = true;
    r.gemms[2].a.hadamard = rht;
    r.gemms[2].b.hadamard = rht;
    return r;
  }
  if (name == "quartet") {
    TrainingRecipe r;
    r.name = name;
    r.summary = "MXFP4: Hadamard-32 + QuEST forward, random Hadamard-32 + SR (3/4 range) backward";
    r.source = "Quartet, algorithm 1; quartet mxfp4_triton.py";
    const QuantSpec q = Spec("mxfp4-ocp");
    HadamardSpec h;
    h.block = 32;
    HadamardSpec rh = h;
    rh.randomized = true;
    const std::string m = "blackwell-mxf4nvf4";
    auto fwd = [&](LinearTensor t) {
      OperandPlan p = Op(t, false, OperandKind::kQuest, q);
      p.hadamard = h;
      return p;
    };
    auto bwd = [&](LinearTensor t, bool tr, bool from_fwd) {
      QuantSpec s = q;
      s.cast.rounding = Rounding::kSrA;
      OperandPlan p = Op(t, tr, OperandKind::kQuartetSr, s);
      p.hadamard = rh;
      p.from_forward = from_fwd;
      return p;
    };
    r.gemms[0] = {LinearGemm::kFprop, fwd(LinearTensor::kX), fwd(LinearTensor::kW), m, false};
    r.gemms[1] = {LinearGemm::kDgrad, bwd(LinearTensor::kDy, false, false), bwd(LinearTensor::kW, true, true), m, true};
    r.gemms[2] = {LinearGemm::kWgrad, bwd(LinearTensor::kDy, true, false), bwd(LinearTensor::kX, true, true), m, true};
    return r;
  }
  std::string known;
  for (const std::string& n : TrainingRecipeNames()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown training recipe '" + name + "' (known: " + known + ")");
}

}  // namespace

// ------------------------------------------------------------------ names

namespace detail {

std::string OperandName(const OperandPlan& p) {
  std::string s = LinearTensorName(p.tensor);
  if (p.from_forward) s += "_q";
  if (p.transposed) s += "^T";
  return s;
}

}  // namespace detail

std::vector<RecipeGemmField> RecipeGemmFields(const RecipeGemmResult& g) {
  const auto n = [](uint64_t v) { return static_cast<double>(v); };
  return {{"sqnr_db", g.error.SqnrDb(), false},
          {"nmse", g.error.Nmse(), false},
          {"cosine", g.error.Cosine(), false},
          {"mean_rel_err", g.error.MeanRelErr(), false},
          {"max_abs_err", g.error.max_abs_err, false},
          {"bias", g.error.Bias(), false},
          {"out_nonfinite", n(g.error.out_nonfinite), true},
          {"a_sqnr_db", g.a.quant_error.SqnrDb(), false},
          {"b_sqnr_db", g.b.quant_error.SqnrDb(), false},
          {"a_saturated", n(g.a.saturated), true},
          {"b_saturated", n(g.b.saturated), true},
          {"a_flushed", n(g.a.flushed), true},
          {"b_flushed", n(g.b.flushed), true}};
}

const char* LinearGemmName(LinearGemm g) {
  switch (g) {
    case LinearGemm::kFprop: return "fprop";
    case LinearGemm::kDgrad: return "dgrad";
    case LinearGemm::kWgrad: return "wgrad";
  }
  return "?";
}
const char* LinearTensorName(LinearTensor t) {
  switch (t) {
    case LinearTensor::kX: return "X";
    case LinearTensor::kW: return "W";
    case LinearTensor::kDy: return "dY";
  }
  return "?";
}
const char* OperandKindName(OperandKind k) {
  switch (k) {
    case OperandKind::kBf16: return "bf16";
    case OperandKind::kSpec: return "spec";
    case OperandKind::kQuest: return "quest";
    case OperandKind::kQuartetSr: return "quartet-sr";
  }
  return "?";
}

std::vector<std::string> TrainingRecipeNames() {
  return {"bf16", "fp8-delayed", "fp8-current", "fp8-blockwise", "mxfp8", "mxfp8-ocp", "mxfp8-e5m2-grads", "nvfp4",
          "quartet"};
}

TrainingRecipe TrainingRecipeByName(const std::string& name) { return MakeRecipe(name); }

std::string DescribeOperand(const OperandPlan& p) {
  std::ostringstream os;
  os << OperandName(p) << ": ";
  if (p.hadamard) os << DescribeHadamard(*p.hadamard) << (p.hadamard->randomized ? " (new signs each step)" : "") << ", ";
  switch (p.kind) {
    case OperandKind::kBf16: os << "bf16 rne"; break;
    case OperandKind::kSpec:
      os << p.spec.elem.name << " " << DescribeBlock(p.spec) << " " << ScaleRuleName(p.spec.rule);
      if (p.delayed) os << " delayed (amax history)";
      os << ", " << RoundingName(p.spec.cast.rounding);
      if (IsPow2Rule(p.spec.rule)) os << ", nan " << NanPolicyName(p.spec.nan) << ", elements " << ElementScalingName(p.spec.scaling);
      break;
    case OperandKind::kQuest: os << "QuEST " << p.spec.elem.name << " 1x" << p.spec.block_cols << " (std scale, floored to 2^k), rne"; break;
    case OperandKind::kQuartetSr: os << "e2m1 1x32, X = 2^(floor(log2 amax) - 2), elements sr(x / (X * 4/3))"; break;
  }
  return os.str();
}

std::vector<RecipeShapeRule> RecipeShapeRules(const TrainingRecipe& r) {
  std::vector<RecipeShapeRule> rules;
  for (const RecipeGemm& g : r.gemms) {
    const char dim = g.which == LinearGemm::kFprop ? 'k' : (g.which == LinearGemm::kDgrad ? 'n' : 'm');
    for (const OperandPlan* p : {&g.a, &g.b}) {
      size_t multiple = 0;
      std::string why;
      if (p->hadamard) {
        multiple = static_cast<size_t>(p->hadamard->block);
        why = "the Hadamard block of " + OperandName(*p);
      } else if (p->kind == OperandKind::kQuartetSr) {
        multiple = 32;
        why = "the 32-element blocks of Quartet's backward quantizer on " + OperandName(*p);
      }
      if (multiple <= 1) continue;
      why = std::string(LinearGemmName(g.which)) + ": " + why;
      bool merged = false;
      for (RecipeShapeRule& q : rules)
        if (q.dim == dim && q.multiple == multiple) q.why += ", " + why, merged = true;
      if (!merged) rules.push_back({dim, multiple, why});
    }
  }
  return rules;
}

void CheckRecipeShape(const TrainingRecipe& r, size_t m, size_t n, size_t k, const std::string& what) {
  for (const RecipeShapeRule& q : RecipeShapeRules(r)) {
    const size_t size = q.dim == 'k' ? k : (q.dim == 'n' ? n : m);
    if (size % q.multiple == 0) continue;  // 0, a size not known yet, passes
    const char* name = q.dim == 'k' ? "in_features (k)" : (q.dim == 'n' ? "out_features (n)" : "the tokens (m, rows of X)");
    throw Error(what + " under recipe " + r.name + ": " + name + " = " + std::to_string(size) + " is not a multiple of " +
                std::to_string(q.multiple) + " (" + q.why + ")");
  }
}

std::string DescribeTrainingRecipe(const TrainingRecipe& r) {
  std::ostringstream os;
  os << r.name << ": " << r.summary << "\n  source: " << r.source << "\n";
  for (const RecipeGemm& g : r.gemms) {
    os << "  " << LinearGemmName(g.which) << " (" << g.accum << "):\n    A " << DescribeOperand(g.a) << "\n    B "
       << DescribeOperand(g.b) << "\n";
    if (g.quest_backward) os << "    then x QuEST trust mask, inverse Hadamard along k\n";
  }
  return os.str();
}

}  // namespace qmx
