// recipe_step.cc: one step of a linear layer under a training recipe (RunRecipeStep): each GEMM's operands
// built as the recipe says (Hadamard, quantization, QuEST, Quartet's backward quantizer, BF16), multiplied
// under the accumulation model and compared with the FP64 reference. Compiled with -ffp-contract=off.
#include "qmx/recipe.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "gemm/exact_sum.h"
#include "gemm/gemm_internal.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/rng.h"
#include "quantize/quantize_internal.h"
#include "recipe/recipe_internal.h"

namespace qmx {

using detail::Mix;
using detail::OperandName;
using detail::EndStep;
using detail::SetupDelayed;
using detail::Transpose;

namespace detail {

std::vector<float> Transpose(const float* src, size_t rows, size_t cols) {
  std::vector<float> t(rows * cols);
  constexpr size_t kT = 32;
  for (size_t r0 = 0; r0 < rows; r0 += kT)
    for (size_t c0 = 0; c0 < cols; c0 += kT)
      for (size_t r = r0; r < std::min(rows, r0 + kT); ++r)
        for (size_t c = c0; c < std::min(cols, c0 + kT); ++c) t[c * rows + r] = src[r * cols + c];
  return t;
}

void SetupDelayed(const TrainingRecipe& recipe, size_t g0, size_t g1, const std::array<float, 3>& amax,
                  RecipeState& state, const RecipeOptions& opt, std::optional<Fp32Scale> (&dscale)[3]) {
  std::optional<DelayedScaling>* hist[3] = {&state.x, &state.w, &state.dy};
  for (size_t gi = g0; gi < g1; ++gi)
    for (const OperandPlan* p : {&recipe.gemms[gi].a, &recipe.gemms[gi].b}) {
      if (!p->delayed) continue;
      const int t = static_cast<int>(p->tensor);
      if (!*hist[t]) *hist[t] = DelayedScaling(p->spec.elem, opt.amax_history, opt.margin, opt.amax_algo);
      if (opt.prime_history && state.step == 0) (*hist[t])->Push(amax[t]);
      dscale[t] = (*hist[t])->scale();
    }
}

Error NonFiniteTensor(const char* name, size_t index, float value) {
  return Error(std::string("recipe: ") + name + " holds " + (std::isnan(value) ? "NaN" : "Inf") + " at element " +
               std::to_string(index) + "; the recipes model finite training tensors");
}

void EndStep(RecipeState& state, const std::optional<Fp32Scale> (&dscale)[3], const std::array<float, 3>& amax) {
  std::optional<DelayedScaling>* hist[3] = {&state.x, &state.w, &state.dy};
  for (int t = 0; t < 3; ++t)
    if (dscale[t]) (*hist[t])->Push(amax[t]);
  ++state.step;
}

}  // namespace detail

namespace {

// ------------------------------------------------------------------ helpers

// The tensors are checked finite, so any NaN policy gives the plain max |x|.
float AmaxOf(const float* x, size_t rows, size_t cols) {
  return detail::TensorAmaxFast(TensorView{DType::kF32, x, rows, cols}, NanPolicy::kIgnoreNan, Exec::kParallel);
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
  std::swap(t.row_scales, t.col_scales);  // per-row second-level scales become per-column ones
  std::swap(t.te_alpha.row_amax, t.te_alpha.col_amax);
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
    detail::GemmF32SeqValues(a.vals.data(), b.data(), m, n, k, exec, out.data());
    return out;
  }
  if (model.kind != AccumKind::kExact)
    throw Error("the bf16 recipe runs under exact or fp32-seq accumulation; '" + model.name +
                "' models a tensor core's 8-bit (or narrower) element path");
#pragma omp parallel for schedule(dynamic) if (exec == Exec::kParallel)
  for (size_t i = 0; i < m; ++i) {
    detail::ExactSum sum;
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
    if (!std::isfinite(x[i])) throw detail::NonFiniteTensor(name, i, x[i]);
}

}  // namespace

GemmOperand QuantizeQuartetBackward(const float* x, size_t rows, size_t cols, uint64_t seed, Exec exec) {
  QuantSpec spec = QuantSpecByName("mxfp4-ocp");
  spec.cast.rounding = Rounding::kSrA;
  spec.seed = seed;
  uint64_t sat = 0, fl = 0;
  return QuartetSr(x, rows, cols, spec, sat, fl, exec);
}

// ------------------------------------------------------------------ one step

namespace {

// What one step's GEMMs read: the three tensors (a null dY before the backward), their shapes, the delayed
// scales of this step and Quartet's forward QuEST outputs of X and W.
struct StepTensors {
  const float* src[3] = {nullptr, nullptr, nullptr};
  size_t rows[3] = {0, 0, 0}, cols[3] = {0, 0, 0};
};

StepTensors MakeStepTensors(const float* x, const float* w, const float* dy, size_t m, size_t n, size_t k) {
  StepTensors t;
  t.src[0] = x;
  t.src[1] = w;
  t.src[2] = dy;
  t.rows[0] = m;
  t.cols[0] = k;
  t.rows[1] = n;
  t.cols[1] = k;
  t.rows[2] = m;
  t.cols[2] = n;
  return t;
}

// GEMM gi of the step: its operands built from the tensors as the recipe's plan says, multiplied under the
// model. out.out holds the output (m x n of this GEMM); the error against a reference is the caller's.
RecipeGemmResult RunStepGemm(const TrainingRecipe& recipe, size_t gi, const StepTensors& st,
                             const std::optional<Fp32Scale> (&dscale)[3], QuestResult (&fwd_q)[3],
                             const RecipeOptions& opt, uint64_t step) {
  const RecipeGemm& g = recipe.gemms[gi];
  const std::string what = std::string(recipe.name) + " " + LinearGemmName(g.which);
  const uint64_t gseed = Mix(opt.seed, step, gi + 1);
  auto source = [&](const OperandPlan& p, size_t& r, size_t& c) {
    const int t = static_cast<int>(p.tensor);
    const float* s = st.src[t];
    r = st.rows[t];
    c = st.cols[t];
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
  RecipeGemmResult out;
  out.which = g.which;
  AccumModel model = AccumModelByName(opt.accum == "auto" ? g.accum : opt.accum);
  out.accum = model.name;
  const size_t m = ar, n = br;
  if (a.bf16) {
    out.out = GemmBf16(a, b, m, n, ac, model, opt.exec);
  } else {
    const GemmOperand bt = TransposeOperand(b.op);
    // TE's alpha where both operands are NVFP4 (they carry their amax); every other GEMM keeps the decode rule.
    const auto nvfp4 = [](const GemmOperand& o) { return o.scale_format == ScaleFormat::kE4m3 && o.te_alpha.amax >= 0; };
    if (nvfp4(a.op) && nvfp4(bt)) model.alpha = opt.alpha;
    out.out = Gemm(a.op, bt, nullptr, model, opt.exec);
    out.alpha = GemmAlphaAt(a.op, bt, model.alpha, 0, 0);
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
  out.a = a.report;
  out.b = b.report;
  if (opt.keep_values) {
    out.a_values = a.exact;
    out.bt_values = b.exact;
  }
  return out;
}

}  // namespace

RecipeStepResult RunRecipeStep(const TrainingRecipe& recipe, const LinearInputs& in, const LinearReference& ref,
                               RecipeState& state, const RecipeOptions& opt) {
  if (in.m == 0 || in.n == 0 || in.k == 0) throw Error("recipe: m, n and k must be positive");
  CheckRecipeShape(recipe, in.m, in.n, in.k, "recipe step");
  if (ref.y.size() != in.m * in.n || ref.dx.size() != in.m * in.k || ref.dw.size() != in.n * in.k)
    throw Error("recipe: the FP64 reference does not match the tensors' shapes");
  CheckFinite(in.x, in.m * in.k, "X");
  CheckFinite(in.w, in.n * in.k, "W");
  CheckFinite(in.dy, in.m * in.n, "dY");
  const StepTensors st = MakeStepTensors(in.x, in.w, in.dy, in.m, in.n, in.k);
  const std::array<float, 3> amax = {AmaxOf(in.x, in.m, in.k), AmaxOf(in.w, in.n, in.k), AmaxOf(in.dy, in.m, in.n)};
  std::optional<Fp32Scale> dscale[3];
  SetupDelayed(recipe, 0, 3, amax, state, opt, dscale);

  RecipeStepResult res;
  res.amax = amax;
  res.delayed_decode_x = dscale[0] ? dscale[0]->decode : 0;
  res.delayed_decode_w = dscale[1] ? dscale[1]->decode : 0;
  res.delayed_decode_dy = dscale[2] ? dscale[2]->decode : 0;

  QuestResult fwd_q[3];  // Quartet: the forward's QuEST output of X and W
  for (size_t gi = 0; gi < 3; ++gi) {
    RecipeGemmResult& out = res.gemms[gi];
    out = RunStepGemm(recipe, gi, st, dscale, fwd_q, opt, state.step);
    const std::vector<double>& r = gi == 0 ? ref.y : gi == 1 ? ref.dx : ref.dw;
    if (r.size() != out.out.size())
      throw Error(std::string(recipe.name) + " " + LinearGemmName(out.which) + ": output shape differs from the reference");
    out.error = CompareTensors(r.data(), out.out.data(), r.size(), opt.exec);
    if (!opt.keep_values) {
      out.out.clear();
      out.out.shrink_to_fit();
    }
  }
  EndStep(state, dscale, amax);
  return res;
}

std::vector<float> LinearForward(const TrainingRecipe& recipe, const float* x, const float* w, size_t m, size_t n,
                                 size_t k, RecipeState& state, const RecipeOptions& opt, LinearSaved& saved) {
  if (m == 0 || n == 0 || k == 0) throw Error("recipe: m, n and k must be positive");
  CheckRecipeShape(recipe, m, n, k, "linear layer");  // the backward's sizes too, before the forward runs
  CheckFinite(x, m * k, "X");
  CheckFinite(w, n * k, "W");
  const StepTensors st = MakeStepTensors(x, w, nullptr, m, n, k);
  saved = LinearSaved{};
  saved.amax = {AmaxOf(x, m, k), AmaxOf(w, n, k), 0.0f};
  SetupDelayed(recipe, 0, 1, saved.amax, state, opt, saved.dscale);
  QuestResult fwd_q[3];
  RecipeGemmResult out = RunStepGemm(recipe, 0, st, saved.dscale, fwd_q, opt, state.step);
  saved.quest_x = std::move(fwd_q[0]);
  saved.quest_w = std::move(fwd_q[1]);
  saved.m = m;
  saved.n = n;
  saved.k = k;
  saved.step = state.step;
  saved.valid = true;
  return std::move(out.out);
}

void LinearBackward(const TrainingRecipe& recipe, const float* x, const float* w, const float* dy, RecipeState& state,
                    const RecipeOptions& opt, LinearSaved& saved, float* dx, float* dw) {
  if (!saved.valid || saved.step != state.step)
    throw Error("recipe: LinearBackward needs the LinearForward of the same step (one backward per forward)");
  const size_t m = saved.m, n = saved.n, k = saved.k;
  CheckFinite(dy, m * n, "dY");
  const StepTensors st = MakeStepTensors(x, w, dy, m, n, k);
  saved.amax[2] = AmaxOf(dy, m, n);
  SetupDelayed(recipe, 1, 3, saved.amax, state, opt, saved.dscale);
  QuestResult fwd_q[3];
  fwd_q[0] = std::move(saved.quest_x);
  fwd_q[1] = std::move(saved.quest_w);
  const RecipeGemmResult d = RunStepGemm(recipe, 1, st, saved.dscale, fwd_q, opt, state.step);
  const RecipeGemmResult g = RunStepGemm(recipe, 2, st, saved.dscale, fwd_q, opt, state.step);
  std::copy(d.out.begin(), d.out.end(), dx);
  std::copy(g.out.begin(), g.out.end(), dw);
  saved.valid = false;
  EndStep(state, saved.dscale, saved.amax);
}

void BiasGradient(const float* dy, size_t m, size_t n, float* db) {
  std::fill(db, db + n, 0.0f);
  for (size_t i = 0; i < m; ++i)
    for (size_t j = 0; j < n; ++j) db[j] += dy[i * n + j];
}

}  // namespace qmx
