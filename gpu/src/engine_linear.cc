// engine_linear.cc: a training recipe's linear layer on the device (qmx/gpu.h EngineLinearForward and
// EngineLinearBackward), step for step as lib/src/recipe/recipe_step.cc runs it on the CPU: each GEMM's
// operands made from the device tensors as the recipe's plan says (a transposed copy, a Hadamard transform
// with the step's signs, EngineQuantizeOnDevice with the step's stochastic-rounding seed, or RNE to BF16),
// B transposed into K x N, then EngineGemmOnDevice (or the fp32-seq kernel for BF16) under the GEMM's model.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine_internal.h"
#include "gemm/gemm_internal.h"
#include "gpu_internal.h"
#include "qmx/error.h"
#include "qmx/gpu.h"
#include "qmx/transform.h"
#include "quantize/quantize_internal.h"
#include "recipe/recipe_internal.h"

namespace qmx::gpu {
namespace {

using detail::DeviceBuffer;

std::string PlanSupport(const OperandPlan& p) {
  if (p.kind != OperandKind::kSpec) return "";
  QuantSpec spec = p.spec;
  spec.delayed = false;  // delayed scaling quantizes with the scale its history gives (EngineQuantizeOnDevice's fixed)
  return EngineQuantizeSupport(spec);
}

// Quartet's forward QuEST outputs of X and W on the device, kept from the forward for the backward: the values
// (in the forward Hadamard domain) the backward re-quantizes, and the trust masks applied to its outputs.
struct DevQuest {
  DeviceBuffer<float> dequant[2];
  DeviceBuffer<uint8_t> mask[2];
};

// One operand made on the device: BF16 values, or codes with decoded block scales (B^T for the B side).
struct DevOperand {
  bool bf16 = false;
  size_t rows = 0, cols = 0;
  DeviceBuffer<float> work;  // the transposed or transformed source, then (BF16) the rounded values
  DeviceBuffer<uint8_t> codes, raw_scales;
  std::unique_ptr<DeviceMemory> scales;  // decoded block scales
  DeviceBuffer<float> group_scales;      // QuEST's and Quartet's backward quantizer's decoded scales
  DeviceGemmOperand op;
};

// The 256 decoded values of a one-byte scale format as QuantizedTensor::ScaleAt gives them.
std::vector<float> ScaleTable(const QuantSpec& spec) {
  QuantizedTensor t;
  t.spec = spec;
  t.scale_rows = t.scale_cols = 1;
  t.scales.assign(1, 0);
  std::vector<float> table(256);
  for (unsigned c = 0; c < 256; ++c) {
    t.scales[0] = static_cast<uint8_t>(c);
    table[c] = t.ScaleAt(0, 0);
  }
  return table;
}

// qmx::HadamardForward (or HadamardInverse) in place on `count` device floats, runs of h.block along the rows,
// with h's signs and the library's norm.
void HadamardOnDevice(const HadamardSpec& h, float* x, size_t count, bool inverse, cudaStream_t cs) {
  const std::vector<float> sign = HadamardSigns(h);
  const std::vector<double> signd(sign.begin(), sign.end());
  DeviceBuffer<double> dsign(signd.data(), signd.size());
  detail::LaunchHadamard(x, count / h.block, h.block, dsign.get(), 1.0 / std::sqrt(static_cast<double>(h.block)),
                         inverse, cs);
  detail::Check(cudaStreamSynchronize(cs), "engine Hadamard transform");  // before dsign is freed
}

// The operand shell of codes in row-wise 1 x g blocks of decoded UE8M0-valued scales (QuEST, Quartet's SR).
GemmOperand GroupOperand(const Format& elem, size_t rows, size_t cols, size_t g, float tensor_scale) {
  GemmOperand o;
  o.elem = elem;
  o.rows = rows;
  o.cols = cols;
  o.scale_format = ScaleFormat::kUe8m0;
  o.block_rows = 1;
  o.block_cols = g;
  o.scale_rows = rows;
  o.scale_cols = cols / g;
  o.tensor_scale = tensor_scale;
  return o;
}

// recipe_step.cc's QuestQuantize call (QuestOptions{}: the std statistic, the floored scale, Quartet's alpha)
// on the device: the operand, and the values and trust mask into `quest` when it is given (the FPROP's).
void BuildQuest(DevOperand& b, const QuantSpec& spec, const float* s, DeviceBuffer<float>* dequant,
                DeviceBuffer<uint8_t>* mask, cudaStream_t cs) {
  const size_t rows = b.rows, cols = b.cols, n = rows * cols;
  if (spec.axis != Axis::kRow || spec.block_rows != 1 || spec.block_cols <= 0)
    throw Error("QuEST needs a row-wise 1xK spec; " + spec.name + " is " + DescribeBlock(spec) + " along " + AxisName(spec.axis));
  const size_t g = ResolveBlock(spec, rows, cols).cols;
  if (cols % g != 0)
    throw Error("QuEST: the row length " + std::to_string(cols) + " is not a multiple of the group size " + std::to_string(g));
  const QuestOptions qo;
  detail::QuestArgs a;
  a.elem = spec.elem;
  a.cast = spec.cast;
  a.cast.saturation = Saturation::kSatFinite;  // clipping is part of QuEST
  ValidateCastOptions(spec.elem, a.cast);
  a.seed = spec.seed;
  const double emax = Limits(spec.elem).max_finite;
  a.ratio = QuestDefaultClip(spec.elem) / emax;
  a.emax = static_cast<float>(emax);
  a.group = static_cast<int>(g);
  a.rms = qo.stat == QuestStat::kRms;
  a.scale_rounding = static_cast<int>(qo.scale_rounding);
  const std::vector<float> table = qmx::detail::CodeTable(spec.elem);
  DeviceBuffer<float> dtable(table.data(), table.size());
  a.decode = dtable.get();
  DeviceBuffer<float> own_dequant;
  DeviceBuffer<uint8_t> own_mask;
  if (dequant == nullptr) dequant = &own_dequant, mask = &own_mask;
  *dequant = DeviceBuffer<float>(n);
  *mask = DeviceBuffer<uint8_t>(n);
  b.codes = DeviceBuffer<uint8_t>(n);
  b.group_scales = DeviceBuffer<float>(n / g);
  detail::LaunchQuest(s, rows, cols, a, b.codes.get(), b.group_scales.get(), dequant->get(), mask->get(), cs);
  detail::Check(cudaStreamSynchronize(cs), "engine QuEST quantizer");  // before the table is freed
  b.op.meta = GroupOperand(spec.elem, rows, cols, g, 1.0f);
  b.op.codes = b.codes.get();
  b.op.scales = b.group_scales.get();
}

// recipe_step.cc's QuartetSr on the device.
void BuildQuartetSr(DevOperand& b, const QuantSpec& spec, const float* s, cudaStream_t cs) {
  const size_t rows = b.rows, cols = b.cols;
  if (cols % 32 != 0) throw Error("quartet: K = " + std::to_string(cols) + " is not a multiple of the MXFP4 group of 32");
  detail::QuartetSrArgs a;
  a.cast = spec.cast;
  a.cast.saturation = Saturation::kSatFinite;
  a.seed = spec.seed;
  a.rule = static_cast<int>(ScaleRule::kOcpFloor);
  const FormatLimits lim = Limits(fmt::kE2M1);
  a.destmax = static_cast<float>(lim.max_finite);
  a.emax = lim.emax;
  a.man_bits = fmt::kE2M1.man_bits;
  a.four_thirds = static_cast<float>(4.0 / 3.0);
  b.codes = DeviceBuffer<uint8_t>(rows * cols);
  b.group_scales = DeviceBuffer<float>(rows * cols / 32);
  detail::LaunchQuartetSr(s, rows, cols, a, b.codes.get(), b.group_scales.get(), cs);
  b.op.meta = GroupOperand(fmt::kE2M1, rows, cols, 32, a.four_thirds);
  b.op.codes = b.codes.get();
  b.op.scales = b.group_scales.get();
}

// BuildOperand of recipe_step.cc on the device: src is the tensor (rows x cols before any transposition);
// `delayed` the tensor's scale from its amax history; quest_dequant/quest_mask (FPROP's QuEST operands) keep
// QuEST's values and mask for the backward.
DevOperand Build(const OperandPlan& p, const float* src, size_t rows, size_t cols, uint64_t rht_seed, uint64_t sr_seed,
                 const std::optional<Fp32Scale>& delayed, DeviceBuffer<float>* quest_dequant,
                 DeviceBuffer<uint8_t>* quest_mask, const std::string& what, cudaStream_t cs) {
  DevOperand b;
  const float* s = src;
  if (p.transposed) {
    b.work = DeviceBuffer<float>(rows * cols);
    detail::LaunchTransposeF32(src, rows, cols, b.work.get(), cs);
    std::swap(rows, cols);
    s = b.work.get();
  }
  b.rows = rows;
  b.cols = cols;
  if (p.hadamard) {
    HadamardSpec h = *p.hadamard;
    if (h.randomized) h.seed = rht_seed;
    if (cols % static_cast<size_t>(h.block) != 0)
      throw Error(what + ": K = " + std::to_string(cols) + " (" + qmx::detail::OperandName(p) + ") is not a multiple of the Hadamard block " +
                  std::to_string(h.block));
    if (!b.work.get()) {
      b.work = DeviceBuffer<float>(rows * cols);
      detail::Check(cudaMemcpyAsync(b.work.get(), src, rows * cols * sizeof(float), cudaMemcpyDeviceToDevice, cs),
                    "copy on device");
      s = b.work.get();
    }
    HadamardOnDevice(h, b.work.get(), rows * cols, false, cs);
  }
  QuantSpec spec = p.spec;
  spec.seed = sr_seed;
  switch (p.kind) {
    case OperandKind::kBf16:
      b.bf16 = true;
      if (!b.work.get()) b.work = DeviceBuffer<float>(rows * cols);
      detail::LaunchBf16Round(s, rows * cols, b.work.get(), cs);
      return b;
    case OperandKind::kQuest:
      BuildQuest(b, spec, s, quest_dequant, quest_mask, cs);
      return b;
    case OperandKind::kQuartetSr:
      BuildQuartetSr(b, spec, s, cs);
      return b;
    case OperandKind::kSpec: break;
  }
  const BlockExtent be = ResolveBlock(spec, rows, cols);
  const size_t scale_count = ((rows + be.rows - 1) / be.rows) * ((cols + be.cols - 1) / be.cols);
  const size_t bytes = ScaleBytes(ScaleFormatOf(spec.rule));
  b.codes = DeviceBuffer<uint8_t>(rows * cols);
  b.raw_scales = DeviceBuffer<uint8_t>(scale_count * bytes);
  const Fp32Scale* fixed = p.delayed && delayed ? &*delayed : nullptr;
  if (p.delayed && !fixed) throw Error(what + ": " + qmx::detail::OperandName(p) + " has no delayed scale for this step");
  QuantizedTensor q = EngineQuantizeOnDevice(TensorView{DType::kF32, s, rows, cols}, spec, b.codes.get(),
                                             b.raw_scales.get(), cs, fixed);
  if (q.scale_rows * q.scale_cols != scale_count) throw Error(what + ": the engine's scale grid differs from the plan's");
  b.op = DeviceOperandFromQuantized(std::move(q), b.codes.get(), b.raw_scales.get(), b.scales, cs);
  return b;
}

// recipe_step.cc's TransposeOperand on the device: B^T (N x K) into the GEMM's B (K x N).
DeviceGemmOperand TransposeB(const DevOperand& bt, DeviceBuffer<uint8_t>& codes, DeviceBuffer<float>& scales,
                             cudaStream_t cs) {
  const GemmOperand& o = bt.op.meta;
  DeviceGemmOperand t;
  t.meta = o;
  t.meta.rows = o.cols;
  t.meta.cols = o.rows;
  codes = DeviceBuffer<uint8_t>(o.rows * o.cols);
  detail::LaunchTransposeU8(bt.op.codes, o.rows, o.cols, codes.get(), cs);
  t.codes = codes.get();
  if (o.block_rows != 0) {
    t.meta.block_rows = o.block_cols;
    t.meta.block_cols = o.block_rows;
    t.meta.scale_rows = o.scale_cols;
    t.meta.scale_cols = o.scale_rows;
    scales = DeviceBuffer<float>(o.scale_rows * o.scale_cols);
    detail::LaunchTransposeF32(bt.op.scales, o.scale_rows, o.scale_cols, scales.get(), cs);
    t.scales = scales.get();
  }
  std::swap(t.meta.row_scales, t.meta.col_scales);
  std::swap(t.meta.te_alpha.row_amax, t.meta.te_alpha.col_amax);
  return t;
}

// The tensors of a step on the device (X, W, dY), as recipe_step.cc's StepTensors.
struct DevTensors {
  const float* src[3] = {nullptr, nullptr, nullptr};
  size_t rows[3] = {0, 0, 0}, cols[3] = {0, 0, 0};
};

DevTensors MakeTensors(const float* x, const float* w, const float* dy, size_t m, size_t n, size_t k) {
  DevTensors t;
  t.src[0] = x, t.rows[0] = m, t.cols[0] = k;
  t.src[1] = w, t.rows[1] = n, t.cols[1] = k;
  t.src[2] = dy, t.rows[2] = m, t.cols[2] = n;
  return t;
}

// RunStepGemm of recipe_step.cc: GEMM gi's output (this GEMM's m x n) into out. dscale: the step's delayed
// scales; quest: Quartet's forward QuEST outputs (filled by FPROP, read by DGRAD and WGRAD), or null.
void RunGemm(const TrainingRecipe& recipe, size_t gi, const DevTensors& st, const std::optional<Fp32Scale> (&dscale)[3],
             DevQuest* quest, const RecipeOptions& opt, uint64_t step, float* out, cudaStream_t cs) {
  const RecipeGemm& g = recipe.gemms[gi];
  const std::string what = std::string(recipe.name) + " " + LinearGemmName(g.which);
  const uint64_t gseed = qmx::detail::Mix(opt.seed, step, gi + 1);
  const bool fprop = g.which == LinearGemm::kFprop;
  auto make = [&](const OperandPlan& p, uint64_t sr_seed) {
    const int t = static_cast<int>(p.tensor);
    const float* src = st.src[t];
    if (p.from_forward) {
      if (quest == nullptr || t > 1 || !quest->dequant[t].get())
        throw Error(what + ": " + qmx::detail::OperandName(p) + " needs the forward's QuEST output of " + LinearTensorName(p.tensor));
      src = quest->dequant[t].get();
    }
    const bool keep = fprop && p.kind == OperandKind::kQuest && quest != nullptr && t <= 1;
    return Build(p, src, st.rows[t], st.cols[t], gseed, sr_seed, dscale[t], keep ? &quest->dequant[t] : nullptr,
                 keep ? &quest->mask[t] : nullptr, what, cs);
  };
  DevOperand a = make(g.a, qmx::detail::Mix(gseed, 1));
  DevOperand b = make(g.b, qmx::detail::Mix(gseed, 2));
  if (a.cols != b.cols) throw Error(what + ": the operands' K differ");
  AccumModel model = AccumModelByName(opt.accum == "auto" ? g.accum : opt.accum);
  if (a.bf16 || b.bf16) {
    if (model.kind != AccumKind::kFp32Seq)
      throw Error("engine: the bf16 recipe runs under fp32-seq on the device; '" + model.name + "' runs on the CPU");
    detail::LaunchGemmF32Seq(a.work.get(), b.work.get(), a.rows, b.rows, a.cols, out, cs);
    detail::Check(cudaStreamSynchronize(cs), "engine fp32-seq GEMM");
    return;
  }
  DeviceBuffer<uint8_t> bcodes;
  DeviceBuffer<float> bscales;
  const DeviceGemmOperand bt = TransposeB(b, bcodes, bscales, cs);
  const auto nvfp4 = [](const GemmOperand& o) { return o.scale_format == ScaleFormat::kE4m3 && o.te_alpha.amax >= 0; };
  if (nvfp4(a.op.meta) && nvfp4(bt.meta)) model.alpha = opt.alpha;
  EngineGemmOnDevice(a.op, bt, model, out, cs);
  if (g.quest_backward) {
    // The output lives in the forward Hadamard domain of X (DGRAD, m x k) or W (WGRAD, n x k): QuEST's trust
    // mask of that tensor, then the inverse of the forward's Hadamard transform along k.
    const int t = g.which == LinearGemm::kDgrad ? 0 : 1;
    const size_t count = a.rows * b.rows;
    if (quest == nullptr || !quest->mask[t].get() || st.rows[t] * st.cols[t] != count)
      throw Error(what + ": the QuEST mask does not match the output");
    const HadamardSpec h = *recipe.gemms[0].a.hadamard;
    detail::LaunchMask(out, quest->mask[t].get(), count, cs);
    HadamardOnDevice(h, out, count, true, cs);
  }
}

// recipe_step.cc's AmaxOf and CheckFinite on a device tensor: max |x|, or qmx::Error naming the first NaN or Inf.
float AmaxChecked(const float* x, size_t count, const char* name, cudaStream_t cs) {
  DeviceBuffer<unsigned> amax(1);
  DeviceBuffer<unsigned long long> bad(1);
  detail::LaunchAmaxFinite(x, count, amax.get(), bad.get(), cs);
  unsigned bits = 0;
  unsigned long long first = 0;
  detail::Check(cudaMemcpyAsync(&bits, amax.get(), sizeof bits, cudaMemcpyDeviceToHost, cs), "copy to host");
  detail::Check(cudaMemcpyAsync(&first, bad.get(), sizeof first, cudaMemcpyDeviceToHost, cs), "copy to host");
  detail::Check(cudaStreamSynchronize(cs), "engine amax");
  if (first != ~0ull) {
    float v = 0;
    detail::Check(cudaMemcpy(&v, x + first, sizeof v, cudaMemcpyDeviceToHost), "copy to host");
    throw qmx::detail::NonFiniteTensor(name, first, v);
  }
  float a;
  std::memcpy(&a, &bits, 4);
  return a;
}

void CheckSupport(const TrainingRecipe& recipe, const RecipeOptions& opt) {
  const std::string why = EngineLinearSupport(recipe, opt);
  if (!why.empty()) throw Error("engine: " + why);
  Require("the engine's linear layer");
}

}  // namespace

DeviceGemmOperand DeviceOperandFromQuantized(QuantizedTensor q, const uint8_t* codes, const uint8_t* raw_scales,
                                             std::unique_ptr<DeviceMemory>& scales, void* stream) {
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  const size_t count = q.scale_rows * q.scale_cols, bytes = ScaleBytes(sf);
  if (q.rows * q.cols != 0 && (!codes || !raw_scales)) throw Error("engine: a quantized device tensor without codes or scales");
  if (be.rows >= q.rows && be.cols >= q.cols && sf == ScaleFormat::kFp32 && count == 1) {  // OperandShell reads it
    q.scales.resize(4);
    detail::Check(cudaMemcpyAsync(q.scales.data(), raw_scales, 4, cudaMemcpyDeviceToHost, cs), "copy to host");
    detail::Check(cudaStreamSynchronize(cs), "copy to host");
  }
  DeviceGemmOperand d;
  d.meta = qmx::detail::OperandShell(q);
  d.codes = codes;
  if (d.meta.block_rows != 0 && count != 0) {
    scales = std::make_unique<DeviceMemory>(count * sizeof(float));
    const std::vector<float> table = ScaleTable(q.spec);
    DeviceBuffer<float> dtable(table.data(), table.size());
    detail::LaunchDecodeScales(raw_scales, count, static_cast<int>(bytes), dtable.get(),
                               static_cast<float*>(scales->get()), cs);
    detail::Check(cudaStreamSynchronize(cs), "engine scale decoding");  // before dtable is freed
    d.scales = static_cast<const float*>(scales->get());
  }
  return d;
}

void EngineDequantizeOnDevice(const QuantizedTensor& q, const uint8_t* codes, const uint8_t* raw_scales, float* out,
                              void* stream, DequantOrder order, bool ftz) {
  qmx::detail::CheckDequantOrder(q, order);
  if (q.spec.row_scaled) throw Error("engine: dequantizing row-scaled NVFP4 runs on the CPU (q.cpu().dequantize())");
  // The scale table below holds UE8M0's values and NVFP4's own formats' (E4M3 scales, a largest element of 6).
  if (IsPow2Rule(q.spec.rule) && !(MxScaleFormat(q.spec) == fmt::kUE8M0))
    throw Error(std::string("engine: MX scales in ") + MxScaleFormat(q.spec).name +
                " dequantize on the CPU (q.cpu().dequantize())");
  if (ScaleFormatOf(q.spec.rule) == ScaleFormat::kE4m3 && !Nvfp4OwnFormats(q.spec))
    throw Error(std::string("engine: NVFP4 rules on ") + q.spec.elem.name + " elements and " +
                Nvfp4ScaleFormat(q.spec).name + " scales dequantize on the CPU (q.cpu().dequantize())");
  const size_t n = q.rows * q.cols;
  if (n == 0) return;
  Require("the engine's dequantization");
  if (!codes || !raw_scales || !out) throw Error("engine: dequantization needs the codes, the scales and the output");
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  const detail::StreamScope scope(cs);
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  if (q.scale_rows != (q.rows + be.rows - 1) / be.rows || q.scale_cols != (q.cols + be.cols - 1) / be.cols)
    throw Error("engine: the quantized tensor's scale grid does not match its shape and block");
  // The tables of Dequantize (quantize.cc): each code's value, and each scale byte's decode scale in double
  // (NVFP4's in the given order), flushed under ftz as DequantizeRows flushes it.
  const std::vector<float> code_table = qmx::detail::CodeTable(q.spec.elem);
  std::vector<double> scale_table(256, 0.0);
  for (unsigned b = 0; b < 256 && sf != ScaleFormat::kFp32; ++b)
    scale_table[b] = qmx::detail::FlushSubnormal(
        sf == ScaleFormat::kUe8m0
            ? MxScaleValue(fmt::kUE8M0, static_cast<uint8_t>(b))
            : static_cast<double>(Nvfp4DecodeScale(static_cast<uint8_t>(b), q.tensor_amax, q.spec.rule, order)),
        ftz);
  DeviceBuffer<float> dcodes(code_table.data(), 256);
  DeviceBuffer<double> dscales(scale_table.data(), 256);
  detail::LaunchDequantize(codes, q.rows, q.cols, raw_scales, be.rows, be.cols, q.scale_cols,
                           static_cast<int>(ScaleBytes(sf)), sf == ScaleFormat::kUe8m0, ftz, dcodes.get(), dscales.get(),
                           out, cs);
  detail::Check(cudaStreamSynchronize(cs), "engine dequantization");  // before the tables are freed
}

std::string EngineLinearSupport(const TrainingRecipe& recipe, const RecipeOptions& opt) {
  for (const RecipeGemm& g : recipe.gemms) {
    const std::string what = std::string(recipe.name) + " " + LinearGemmName(g.which) + ": ";
    for (const OperandPlan* p : {&g.a, &g.b}) {
      const std::string why = PlanSupport(*p);
      if (!why.empty()) return what + why;
    }
    const AccumModel model = AccumModelByName(opt.accum == "auto" ? g.accum : opt.accum);
    if (model.kind == AccumKind::kFused && (model.fused.acc_fp16 || model.fused.cdna3_halves))
      return what + "'" + model.name + "' (FP16 accumulation or CDNA3's half sums) runs on the CPU";
  }
  return "";
}

void EngineLinearForward(const TrainingRecipe& recipe, const float* x, const float* w, size_t m, size_t n, size_t k,
                         RecipeState& state, const RecipeOptions& opt, LinearSaved& saved, float* y, void* stream) {
  if (m == 0 || n == 0 || k == 0) throw Error("recipe: m, n and k must be positive");
  CheckRecipeShape(recipe, m, n, k, "linear layer");
  CheckSupport(recipe, opt);
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  const detail::StreamScope scope(cs);
  saved = LinearSaved{};
  saved.amax = {AmaxChecked(x, m * k, "X", cs), AmaxChecked(w, n * k, "W", cs), 0.0f};
  qmx::detail::SetupDelayed(recipe, 0, 1, saved.amax, state, opt, saved.dscale);
  auto quest = std::make_shared<DevQuest>();
  RunGemm(recipe, 0, MakeTensors(x, w, nullptr, m, n, k), saved.dscale, quest.get(), opt, state.step, y, cs);
  if (quest->mask[0].get() || quest->mask[1].get()) saved.device = std::move(quest);
  saved.m = m;
  saved.n = n;
  saved.k = k;
  saved.step = state.step;
  saved.valid = true;
}

void EngineLinearBackward(const TrainingRecipe& recipe, const float* x, const float* w, const float* dy,
                          RecipeState& state, const RecipeOptions& opt, LinearSaved& saved, float* dx, float* dw,
                          void* stream) {
  if (!saved.valid || saved.step != state.step)
    throw Error("recipe: LinearBackward needs the LinearForward of the same step (one backward per forward)");
  CheckSupport(recipe, opt);
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  const detail::StreamScope scope(cs);
  const size_t m = saved.m, n = saved.n, k = saved.k;
  saved.amax[2] = AmaxChecked(dy, m * n, "dY", cs);
  qmx::detail::SetupDelayed(recipe, 1, 3, saved.amax, state, opt, saved.dscale);
  const DevTensors st = MakeTensors(x, w, dy, m, n, k);
  DevQuest* quest = static_cast<DevQuest*>(saved.device.get());
  RunGemm(recipe, 1, st, saved.dscale, quest, opt, state.step, dx, cs);
  RunGemm(recipe, 2, st, saved.dscale, quest, opt, state.step, dw, cs);
  detail::Check(cudaStreamSynchronize(cs), "engine linear backward");  // the forward's buffers are freed after
  saved.device.reset();
  saved.valid = false;
  qmx::detail::EndStep(state, saved.dscale, saved.amax);
}

void EngineBiasGradient(const float* dy, size_t m, size_t n, float* db, void* stream) {
  Require("the engine's bias gradient");
  detail::LaunchColumnSums(dy, m, n, db, stream);
  detail::Check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "engine bias gradient");
}

void EngineHadamardOnDevice(const HadamardSpec& h, float* x, size_t rows, size_t cols, bool inverse, void* stream) {
  ValidateHadamard(h, cols);
  if (rows * cols == 0) return;
  Require("the engine's Hadamard transform");
  if (x == nullptr) throw Error("engine: the Hadamard transform's x must be a device pointer");
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  const detail::StreamScope scope(cs);
  HadamardOnDevice(h, x, rows * cols, inverse, cs);
}

}  // namespace qmx::gpu
