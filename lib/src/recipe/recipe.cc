// recipe.cc: the training recipes of qmx/recipe.h: their tables (which tensor each GEMM operand comes
// from, along which axis it is quantized, how), one step of a linear layer under a recipe, the FP64
// references, and the synthetic layer sequences. Compiled with -ffp-contract=off (lib/CMakeLists.txt) so
// the FP64 reference keeps its order of operations under any -march.
#include "qmx/recipe.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "gemm/exact_sum.h"
#include "gemm/gemm_internal.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/rng.h"
#include "quantize/quantize_internal.h"

namespace qmx {
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
  s.cast.sr_bits = 8;  // cvt.rs: 8 random bits per FP4 element (REFERENCES.md section 2)
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
    r.source = "seed 004 (figure 6)";
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
                   te + (delayed ? " DelayedScaling(HYBRID); seeds 002, 004" : " Float8CurrentScaling(HYBRID); seeds 002, 004"),
                   e4, e4, WithElem(e4, fmt::kE5M2), "hopper-fp8-fast", "hopper-fp8", "hopper-fp8", delayed);
  }
  if (name == "fp8-blockwise") {
    // TE Float8BlockScaling: E4M3 everywhere, FP32 scales constrained to powers of two by default.
    QuantSpec a = Spec("fp8-block1x128", "transformer-engine"), w = Spec("fp8-block128x128", "transformer-engine");
    a.rule = w.rule = ScaleRule::kFp32Pow2;
    return Uniform(name, "E4M3, 1x128 activations and gradients, 128x128 weights, power-of-two FP32 scales",
                   te + " Float8BlockScaling (DeepSeek-V3 style); seed 004", a, w, a, "hopper-fp8", "hopper-fp8",
                   "hopper-fp8-vec");
  }
  if (name == "mxfp8" || name == "mxfp8-ocp" || name == "mxfp8-e5m2-grads") {
    const bool ocp = name == "mxfp8-ocp";
    const QuantSpec s = Spec(ocp ? "mxfp8-ocp" : "mxfp8", ocp ? "ocp" : "transformer-engine");
    const QuantSpec g = name == "mxfp8-e5m2-grads" ? Spec("mxfp8_e5m2", "transformer-engine") : s;
    const std::string m = "blackwell-mxf8f6f4";
    if (ocp)
      return Uniform(name, "E4M3 1x32 along K for every GEMM, OCP round-down (floor) UE8M0 scales",
                     "OCP MX v1.0 6.3; seed 000 (figure 5)", s, s, g, m, m, m);
    if (g.elem.name != s.elem.name)
      return Uniform(name, "MXFP8 with E5M2 gradients (round-up scales)", "seed 000 (figure 4)", s, s, g, m, m, m);
    return Uniform(name, "E4M3 1x32 along K for every GEMM, round-up UE8M0 scales, row- and column-wise copies",
                   te + " MXFP8BlockScaling; seeds 000, 002, 004", s, s, g, m, m, m);
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
    r.source = "Quartet (seed 003), algorithm 1; quartet mxfp4_triton.py";
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

// ------------------------------------------------------------------ helpers

uint64_t Mix(uint64_t a, uint64_t b) {  // splitmix64 of a combination: independent streams per (seed, step, use)
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t Mix(uint64_t a, uint64_t b, uint64_t c, uint64_t d = 0) { return Mix(Mix(Mix(a, b), c), d); }

std::vector<float> Transpose(const float* src, size_t rows, size_t cols) {
  std::vector<float> t(rows * cols);
  constexpr size_t kT = 32;
  for (size_t r0 = 0; r0 < rows; r0 += kT)
    for (size_t c0 = 0; c0 < cols; c0 += kT)
      for (size_t r = r0; r < std::min(rows, r0 + kT); ++r)
        for (size_t c = c0; c < std::min(cols, c0 + kT); ++c) t[c * rows + r] = src[r * cols + c];
  return t;
}

// The tensors are checked finite, so any NaN policy gives the plain max |x|.
float AmaxOf(const float* x, size_t rows, size_t cols) {
  return detail::TensorAmax(TensorView{DType::kF32, x, rows, cols}, NanPolicy::kIgnoreNan);
}

float Bf16Round(float x) {  // RNE to BF16 for a finite x (overflow rounds to Inf as IEEE does)
  uint32_t b;
  std::memcpy(&b, &x, 4);
  b = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
  float r;
  std::memcpy(&r, &b, 4);
  return r;
}

// The operand after transposition of B^T (N x K) into the GEMM's B (K x N).
GemmOperand TransposeOperand(const GemmOperand& o) {
  GemmOperand t = o;
  t.rows = o.cols;
  t.cols = o.rows;
  for (size_t r = 0; r < o.rows; ++r)
    for (size_t c = 0; c < o.cols; ++c) t.codes[c * o.rows + r] = o.codes[r * o.cols + c];
  if (o.block_rows != 0) {
    t.block_rows = o.block_cols;
    t.block_cols = o.block_rows;
    t.scale_rows = o.scale_cols;
    t.scale_cols = o.scale_rows;
    for (size_t r = 0; r < o.scale_rows; ++r)
      for (size_t c = 0; c < o.scale_cols; ++c) t.scales[c * o.scale_rows + r] = o.scales[r * o.scale_cols + c];
  }
  return t;
}

// decode(code) * block scale for every element (exact in double: <= 11 + 24 significant bits).
std::vector<double> OperandValues(const GemmOperand& o) {
  std::array<double, 256> table{};
  for (uint32_t c = 0; c <= o.elem.CodeMask() && c < 256; ++c) table[c] = DecodeToFloat(o.elem, c);
  std::vector<double> v(o.rows * o.cols);
  for (size_t r = 0; r < o.rows; ++r)
    for (size_t c = 0; c < o.cols; ++c) v[r * o.cols + c] = table[o.codes[r * o.cols + c]] * static_cast<double>(o.ScaleOf(r, c));
  return v;
}

// One operand, built: the GEMM operand (codes and scales) or, for BF16, the rounded values.
struct Built {
  bool bf16 = false;
  GemmOperand op;            // rows x K (B^T for the B side, transposed before the GEMM)
  std::vector<float> vals;   // BF16 values, rows x K
  std::vector<double> exact;  // decoded values (block scales applied), rows x K
  OperandReport report;
};

std::string OperandName(const OperandPlan& p) {
  std::string s = LinearTensorName(p.tensor);
  if (p.from_forward) s += "_q";
  if (p.transposed) s += "^T";
  return s;
}

// Quartet's backward quantizer (see OperandKind::kQuartetSr), with its saturation and flush counts.
GemmOperand QuartetSr(const float* x, size_t rows, size_t cols, const QuantSpec& spec, uint64_t& saturated,
                      uint64_t& flushed, Exec exec) {
  const size_t g = 32;
  if (cols % g != 0)
    throw Error("quartet: K = " + std::to_string(cols) + " is not a multiple of the MXFP4 group of 32");
  const float four_thirds = static_cast<float>(4.0 / 3.0);
  GemmOperand o;
  o.elem = fmt::kE2M1;
  o.rows = rows;
  o.cols = cols;
  o.codes.assign(rows * cols, 0);
  o.scale_format = ScaleFormat::kUe8m0;
  o.block_rows = 1;
  o.block_cols = g;
  o.scale_rows = rows;
  o.scale_cols = cols / g;
  o.scales.assign(rows * (cols / g), 0.0f);
  o.tensor_scale = four_thirds;
  CastOptions cast = spec.cast;
  cast.saturation = Saturation::kSatFinite;
  std::vector<uint64_t> sat(rows, 0), fl(rows, 0);
#pragma omp parallel for schedule(static) if (exec == Exec::kParallel)
  for (size_t r = 0; r < rows; ++r) {
    std::vector<float> v(cols);
    for (size_t c0 = 0; c0 < cols; c0 += g) {
      const float amax = AmaxOf(x + r * cols + c0, 1, g);
      const uint8_t byte = Ue8m0ScaleFromAmax(amax, fmt::kE2M1, ScaleRule::kOcpFloor);
      const float X = DecodeToFloat(fmt::kUE8M0, byte);
      o.scales[r * o.scale_cols + c0 / g] = X;
      const float s = X * four_thirds;  // exact unless X * 4/3 is FP32-subnormal (amax below 2^-124)
      for (size_t i = 0; i < g; ++i) {
        v[c0 + i] = x[r * cols + c0 + i] / s;
        sat[r] += std::fabs(v[c0 + i]) > 6.0f;
      }
    }
    SrSource sr;
    sr.seed = spec.seed;
    sr.first_index = r * cols;
    ConvertToCodes(DType::kF32, v.data(), cols, fmt::kE2M1, cast, o.codes.data() + r * cols, sr);
    for (size_t c = 0; c < cols; ++c) fl[r] += x[r * cols + c] != 0 && (o.codes[r * cols + c] & 0x7) == 0;
  }
  for (size_t r = 0; r < rows; ++r) {
    saturated += sat[r];
    flushed += fl[r];
  }
  return o;
}

// rht_seed: the random Hadamard's signs (the same on both sides of a GEMM, so H D cancels in the product);
// sr_seed: the stochastic-rounding stream (different on each side: equal bits would correlate the errors).
Built BuildOperand(const OperandPlan& p, std::vector<float> src, size_t rows, size_t cols, uint64_t rht_seed,
                   uint64_t sr_seed, const std::optional<Fp32Scale>& delayed_scale, const std::string& what, Exec exec,
                   QuestResult* quest_out) {
  Built b;
  b.report.name = OperandName(p);
  if (p.hadamard) {
    HadamardSpec h = *p.hadamard;
    if (h.randomized) h.seed = rht_seed;
    if (cols % static_cast<size_t>(h.block) != 0)
      throw Error(what + ": K = " + std::to_string(cols) + " (" + b.report.name +
                  ") is not a multiple of the Hadamard block " + std::to_string(h.block));
    HadamardForward(h, src.data(), src.data(), rows, cols, exec);
  }
  QuantSpec spec = p.spec;
  spec.seed = sr_seed;
  const TensorView view{DType::kF32, src.data(), rows, cols};
  switch (p.kind) {
    case OperandKind::kBf16: {
      b.bf16 = true;
      b.vals.resize(src.size());
      for (size_t i = 0; i < src.size(); ++i) b.vals[i] = Bf16Round(src[i]);
      b.exact.assign(b.vals.begin(), b.vals.end());
      b.report.quant_error = CompareTensors(src.data(), b.vals.data(), src.size(), exec);
      return b;
    }
    case OperandKind::kSpec: {
      QuantizedTensor q = delayed_scale ? QuantizeWithScale(view, spec, *delayed_scale, exec) : Quantize(view, spec, exec);
      const QuantStats st = ComputeStats(view, q);
      b.report.saturated = st.saturated;
      b.report.flushed = st.flushed_to_zero;
      b.op = OperandFromQuantized(q);
      break;
    }
    case OperandKind::kQuest: {
      QuestResult r = QuestQuantize(src.data(), rows, cols, spec, {}, exec);
      b.op.elem = spec.elem;
      b.op.rows = rows;
      b.op.cols = cols;
      b.op.codes = r.codes;
      b.op.scale_format = ScaleFormat::kUe8m0;  // QuEST's scales are floored to powers of two
      const BlockExtent be = ResolveBlock(spec, rows, cols);
      b.op.block_rows = 1;
      b.op.block_cols = be.cols;
      b.op.scale_rows = rows;
      b.op.scale_cols = cols / be.cols;
      b.op.scales = r.scales;
      b.report.saturated = r.clipped;
      for (size_t i = 0; i < src.size(); ++i) b.report.flushed += src[i] != 0 && r.dequant[i] == 0;
      if (quest_out) *quest_out = std::move(r);
      break;
    }
    case OperandKind::kQuartetSr:
      b.op = QuartetSr(src.data(), rows, cols, spec, b.report.saturated, b.report.flushed, exec);
      break;
  }
  b.report.tensor_scale = b.op.tensor_scale;
  b.exact = OperandValues(b.op);
  std::vector<float> deq(b.exact.size());
  for (size_t i = 0; i < deq.size(); ++i) deq[i] = static_cast<float>(b.exact[i] * b.op.tensor_scale);
  b.report.quant_error = CompareTensors(src.data(), deq.data(), src.size(), exec);
  return b;
}

// BF16 operands: fp32-seq through the GEMM layer's FP32 kernel, exact through an exact accumulator.
std::vector<float> GemmBf16(const Built& a, const Built& bt, size_t m, size_t n, size_t k, const AccumModel& model,
                            Exec exec) {
  std::vector<float> out(m * n);
  if (model.kind == AccumKind::kFp32Seq) {
    const std::vector<float> b = Transpose(bt.vals.data(), n, k);
    internal::GemmF32SeqValues(a.vals.data(), b.data(), m, n, k, exec, out.data());
    return out;
  }
  if (model.kind != AccumKind::kExact)
    throw Error("the bf16 recipe runs under exact or fp32-seq accumulation; '" + model.name +
                "' models a tensor core's 8-bit (or narrower) element path");
#pragma omp parallel for schedule(dynamic) if (exec == Exec::kParallel)
  for (size_t i = 0; i < m; ++i) {
    internal::ExactSum sum;
    for (size_t j = 0; j < n; ++j) {
      sum.Clear();
      bool all_neg_zero = true;
      for (size_t kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(a.vals[i * k + kk]) * bt.vals[j * k + kk];  // exact: 8 x 8 bits
        all_neg_zero = all_neg_zero && p == 0 && std::signbit(p);
        sum.AddDouble(p);
      }
      out[i * n + j] = sum.RoundToFloat(k > 0 && all_neg_zero);
    }
  }
  return out;
}

void CheckFinite(const float* x, size_t n, const char* name) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      throw Error(std::string("recipe: ") + name + " holds " + (std::isnan(x[i]) ? "NaN" : "Inf") + " at element " +
                  std::to_string(i) + "; the recipes model finite training tensors");
}

}  // namespace

GemmOperand QuantizeQuartetBackward(const float* x, size_t rows, size_t cols, uint64_t seed, Exec exec) {
  QuantSpec spec = QuantSpecByName("mxfp4-ocp");
  spec.cast.rounding = Rounding::kSrA;
  spec.seed = seed;
  uint64_t sat = 0, fl = 0;
  return QuartetSr(x, rows, cols, spec, sat, fl, exec);
}

// ------------------------------------------------------------------ names

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

// ------------------------------------------------------------------ FP64 references

std::vector<double> GemmF64(const float* a, const float* bt, size_t rows, size_t cols, size_t k, Exec exec) {
  const std::vector<float> b = Transpose(bt, cols, k);  // k x cols
  std::vector<double> out(rows * cols, 0.0);
  constexpr size_t kR = 8;
  const long blocks = static_cast<long>((rows + kR - 1) / kR);
#pragma omp parallel for schedule(dynamic) if (exec == Exec::kParallel)
  for (long blk = 0; blk < blocks; ++blk) {
    const size_t i0 = static_cast<size_t>(blk) * kR, i1 = std::min(rows, i0 + kR);
    for (size_t kk = 0; kk < k; ++kk) {
      const float* brow = b.data() + kk * cols;
      for (size_t i = i0; i < i1; ++i) {
        const double av = a[i * k + kk];
        double* o = out.data() + i * cols;
        for (size_t j = 0; j < cols; ++j) o[j] += av * static_cast<double>(brow[j]);  // exact product, k ascending
      }
    }
  }
  return out;
}

LinearReference ComputeLinearReference(const LinearInputs& in, Exec exec) {
  LinearReference r;
  const std::vector<float> wt = Transpose(in.w, in.n, in.k), dyt = Transpose(in.dy, in.m, in.n),
                           xt = Transpose(in.x, in.m, in.k);
  r.y = GemmF64(in.x, in.w, in.m, in.n, in.k, exec);
  r.dx = GemmF64(in.dy, wt.data(), in.m, in.k, in.n, exec);
  r.dw = GemmF64(dyt.data(), xt.data(), in.n, in.k, in.m, exec);
  return r;
}

// ------------------------------------------------------------------ one step

RecipeStepResult RunRecipeStep(const TrainingRecipe& recipe, const LinearInputs& in, const LinearReference& ref,
                               RecipeState& state, const RecipeOptions& opt) {
  if (in.m == 0 || in.n == 0 || in.k == 0) throw Error("recipe: m, n and k must be positive");
  if (ref.y.size() != in.m * in.n || ref.dx.size() != in.m * in.k || ref.dw.size() != in.n * in.k)
    throw Error("recipe: the FP64 reference does not match the tensors' shapes");
  CheckFinite(in.x, in.m * in.k, "X");
  CheckFinite(in.w, in.n * in.k, "W");
  CheckFinite(in.dy, in.m * in.n, "dY");
  const float* src[3] = {in.x, in.w, in.dy};
  const size_t rows[3] = {in.m, in.n, in.m}, cols[3] = {in.k, in.k, in.n};
  const std::array<float, 3> amax = {AmaxOf(in.x, in.m, in.k), AmaxOf(in.w, in.n, in.k), AmaxOf(in.dy, in.m, in.n)};
  std::optional<DelayedScaling>* hist[3] = {&state.x, &state.w, &state.dy};

  // Delayed scaling: one scale per tensor per step, shared by its row- and column-wise copies.
  std::optional<Fp32Scale> dscale[3];
  for (const RecipeGemm& g : recipe.gemms)
    for (const OperandPlan* p : {&g.a, &g.b}) {
      if (!p->delayed) continue;
      const int t = static_cast<int>(p->tensor);
      if (!*hist[t]) *hist[t] = DelayedScaling(p->spec.elem, opt.amax_history, opt.margin, opt.amax_algo);
      if (opt.prime_history && state.step == 0) (*hist[t])->Push(amax[t]);
      dscale[t] = (*hist[t])->scale();
    }

  RecipeStepResult res;
  res.amax = amax;
  res.delayed_decode_x = dscale[0] ? dscale[0]->decode : 0;
  res.delayed_decode_w = dscale[1] ? dscale[1]->decode : 0;
  res.delayed_decode_dy = dscale[2] ? dscale[2]->decode : 0;

  QuestResult fwd_q[3];  // Quartet: the forward's QuEST output of X and W
  for (size_t gi = 0; gi < 3; ++gi) {
    const RecipeGemm& g = recipe.gemms[gi];
    const std::string what = std::string(recipe.name) + " " + LinearGemmName(g.which);
    const uint64_t gseed = Mix(opt.seed, state.step, gi + 1);
    auto source = [&](const OperandPlan& p, size_t& r, size_t& c) {
      const int t = static_cast<int>(p.tensor);
      const float* s = src[t];
      r = rows[t];
      c = cols[t];
      if (p.from_forward) {
        if (fwd_q[t].dequant.empty())
          throw Error(what + ": " + OperandName(p) + " needs the forward's QuEST output of " + LinearTensorName(p.tensor));
        s = fwd_q[t].dequant.data();
      }
      if (!p.transposed) return std::vector<float>(s, s + r * c);
      std::swap(r, c);
      return Transpose(s, c, r);
    };
    size_t ar, ac, br, bc;
    std::vector<float> asrc = source(g.a, ar, ac), bsrc = source(g.b, br, bc);
    if (ac != bc) throw Error(what + ": the operands' K differ");
    const bool quest_fwd = g.which == LinearGemm::kFprop;
    auto qout = [&](const OperandPlan& p) {
      return quest_fwd && p.kind == OperandKind::kQuest ? &fwd_q[static_cast<int>(p.tensor)] : nullptr;
    };
    const Built a = BuildOperand(g.a, std::move(asrc), ar, ac, gseed, Mix(gseed, 1), dscale[static_cast<int>(g.a.tensor)],
                                 what, opt.exec, qout(g.a));
    const Built b = BuildOperand(g.b, std::move(bsrc), br, bc, gseed, Mix(gseed, 2), dscale[static_cast<int>(g.b.tensor)],
                                 what, opt.exec, qout(g.b));
    RecipeGemmResult& out = res.gemms[gi];
    out.which = g.which;
    const AccumModel model = AccumModelByName(opt.accum == "auto" ? g.accum : opt.accum);
    out.accum = model.name;
    const size_t m = ar, n = br, k = ac;
    if (a.bf16) {
      out.out = GemmBf16(a, b, m, n, k, model, opt.exec);
    } else {
      out.out = Gemm(a.op, TransposeOperand(b.op), nullptr, model, opt.exec);
      out.alpha = a.op.tensor_scale * b.op.tensor_scale;
    }
    if (g.quest_backward) {
      // The output lives in the forward Hadamard domain of X (DGRAD, m x k) or W (WGRAD, n x k).
      const QuestResult& fq = fwd_q[g.which == LinearGemm::kDgrad ? 0 : 1];
      const HadamardSpec h = *recipe.gemms[0].a.hadamard;
      if (fq.mask.size() != out.out.size()) throw Error(what + ": the QuEST mask does not match the output");
      for (size_t i = 0; i < out.out.size(); ++i)
        if (!fq.mask[i]) out.out[i] = 0.0f;
      HadamardInverse(h, out.out.data(), out.out.data(), m, n, opt.exec);
    }
    const std::vector<double>& r = gi == 0 ? ref.y : gi == 1 ? ref.dx : ref.dw;
    if (r.size() != out.out.size()) throw Error(what + ": output shape differs from the reference");
    out.error = CompareTensors(r.data(), out.out.data(), r.size(), opt.exec);
    out.a = a.report;
    out.b = b.report;
    if (opt.keep_values) {
      out.a_values = a.exact;
      out.bt_values = b.exact;
    } else {
      out.out.clear();
      out.out.shrink_to_fit();
    }
  }
  for (int t = 0; t < 3; ++t)
    if (dscale[t]) (*hist[t])->Push(amax[t]);
  ++state.step;
  return res;
}

// ------------------------------------------------------------------ synthetic layers

LayerGen DefaultLayerGen() {
  LayerGen g;
  g.x.dist = ParseDist("student-t:5");
  g.x.channel_rate = 1.0 / 128;
  g.x.channel_gain = 32;
  g.w.dist = ParseDist("normal");
  g.w.scale = 0.02;
  g.dy.dist = ParseDist("laplace");
  g.dy.scale = 1e-3;
  g.dy.row_sigma = 1.0;
  return g;
}

void GenerateTensor(const TensorGen& g, uint64_t seed, size_t rows, size_t cols, float* out, Exec exec) {
  GenerateTensor(g, seed, seed, rows, cols, out, exec);
}

void GenerateTensor(const TensorGen& g, uint64_t seed, uint64_t structure_seed, size_t rows, size_t cols, float* out,
                    Exec exec) {
  const size_t n = rows * cols;
  GenerateDist(g.dist, seed, out, n, 0, exec);
  std::vector<float> col(cols, static_cast<float>(g.scale)), row(rows, 1.0f);
  if (g.channel_rate > 0) {
    const uint64_t s = Mix(structure_seed, 0xC4A);
    const double thr = g.channel_rate * 4294967296.0;
    for (size_t c = 0; c < cols; ++c)
      if (static_cast<double>(RandomBitsForElement(s, c)) < thr) col[c] = static_cast<float>(g.scale * g.channel_gain);
  }
  if (g.row_sigma > 0) {
    std::vector<float> z(rows);
    GenerateDist(DistSpec{}, Mix(structure_seed, 0x70E), z.data(), rows, 0, Exec::kSequential);
    for (size_t r = 0; r < rows; ++r)
      row[r] = static_cast<float>(std::exp(g.row_sigma * z[r] - g.row_sigma * g.row_sigma / 2));
  }
#pragma omp parallel for schedule(static) if (exec == Exec::kParallel && n >= (1u << 16))
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) out[r * cols + c] = out[r * cols + c] * col[c] * row[r];
}

LayerSequence::LayerSequence(const LayerGen& gen, const SequenceGen& seq, uint64_t seed, size_t m, size_t n, size_t k)
    : gen_(gen), seq_(seq), seed_(seed), m_(m), n_(n), k_(k) {
  if (m == 0 || n == 0 || k == 0) throw Error("sequence: m, n and k must be positive");
  if (!(seq.drift >= 0 && seq.drift <= 1) || !(seq.weight_drift >= 0 && seq.weight_drift <= 1))
    throw Error("sequence: the drifts must lie in [0, 1]");
  if (!(seq.spike_rate >= 0 && seq.spike_rate <= 1)) throw Error("sequence: the spike rate must lie in [0, 1]");
  if (!(seq.grad_decay > 0) || !std::isfinite(seq.grad_decay) || !(seq.spike_gain > 0) || !std::isfinite(seq.spike_gain))
    throw Error("sequence: the gradient decay and the spike gain must be positive and finite");
  if (seq.spike_rows > m) throw Error("sequence: more spike rows than tokens (m)");
}

LinearInputs LayerSequence::Next() {
  const std::array<size_t, 3> rows = {m_, n_, m_}, cols = {k_, k_, n_};
  std::vector<float>* base[3] = {&base_x_, &base_w_, &base_dy_};
  const TensorGen* gens[3] = {&gen_.x, &gen_.w, &gen_.dy};
  if (!started_) {
    started_ = true;
    step_ = 0;
    for (int t = 0; t < 3; ++t) {
      base[t]->resize(rows[t] * cols[t]);
      GenerateTensor(*gens[t], Mix(seed_, 0, t + 1), Mix(seed_, 0, t + 1), rows[t], cols[t], base[t]->data());
    }
  } else {
    ++step_;
    std::vector<float> z;
    for (int t = 0; t < 3; ++t) {
      const double d = t == 1 ? seq_.weight_drift : seq_.drift;
      if (d == 0) continue;
      z.resize(base[t]->size());
      GenerateTensor(*gens[t], Mix(seed_, step_, t + 1), Mix(seed_, 0, t + 1), rows[t], cols[t], z.data());
      const uint64_t pick = Mix(seed_, step_, t + 1, 0xD81F7);
      const double thr = d * 4294967296.0;
      std::vector<float>& v = *base[t];
      for (size_t i = 0; i < v.size(); ++i)
        if (static_cast<double>(RandomBitsForElement(pick, i)) < thr) v[i] = z[i];
    }
  }
  x_ = base_x_;
  w_ = base_w_;
  dy_ = base_dy_;
  if (seq_.grad_decay != 1.0) {
    const float f = static_cast<float>(std::pow(seq_.grad_decay, static_cast<double>(step_)));
    for (float& v : dy_) v *= f;
  }
  const uint64_t ss = Mix(seed_, step_, 0x591CE);
  spiked_ = seq_.spike_rows > 0 && static_cast<double>(RandomBitsForElement(ss, 0)) < seq_.spike_rate * 4294967296.0;
  if (spiked_) {
    const float gain = static_cast<float>(seq_.spike_gain);
    for (size_t i = 0; i < seq_.spike_rows; ++i) {
      const size_t r = RandomBitsForElement(ss, 1 + i) % m_;
      for (size_t c = 0; c < k_; ++c) x_[r * k_ + c] *= gain;
      for (size_t c = 0; c < n_; ++c) dy_[r * n_ + c] *= gain;
    }
  }
  LinearInputs in;
  in.x = x_.data();
  in.w = w_.data();
  in.dy = dy_.data();
  in.m = m_;
  in.n = n_;
  in.k = k_;
  return in;
}

}  // namespace qmx
