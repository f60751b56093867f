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
#include "recipe/recipe_internal.h"

namespace qmx::gpu {
namespace {

using detail::DeviceBuffer;

std::string PlanSupport(const OperandPlan& p) {
  switch (p.kind) {
    case OperandKind::kBf16: return "";
    case OperandKind::kSpec:
      if (p.delayed) return "delayed scaling (per-tensor scales from an amax history) runs on the CPU";
      return EngineQuantizeSupport(p.spec);
    case OperandKind::kQuest: return "QuEST (quartet's forward quantizer) runs on the CPU";
    case OperandKind::kQuartetSr: return "quartet's backward quantizer runs on the CPU";
  }
  return "unknown operand kind";
}

// One operand made on the device: BF16 values, or codes with decoded block scales (B^T for the B side).
struct DevOperand {
  bool bf16 = false;
  size_t rows = 0, cols = 0;
  DeviceBuffer<float> work;  // the transposed or transformed source, then (BF16) the rounded values
  DeviceBuffer<uint8_t> codes, raw_scales;
  std::unique_ptr<DeviceMemory> scales;  // decoded block scales
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

// BuildOperand of recipe_step.cc on the device: src is the tensor (rows x cols before any transposition).
DevOperand Build(const OperandPlan& p, const float* src, size_t rows, size_t cols, uint64_t rht_seed, uint64_t sr_seed,
                 const std::string& what, cudaStream_t cs) {
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
    const std::vector<float> sign = HadamardSigns(h);
    const std::vector<double> signd(sign.begin(), sign.end());
    DeviceBuffer<double> dsign(signd.data(), signd.size());
    detail::LaunchHadamard(b.work.get(), rows * cols / h.block, h.block, dsign.get(),
                           1.0 / std::sqrt(static_cast<double>(h.block)), false, cs);
    detail::Check(cudaStreamSynchronize(cs), "engine Hadamard transform");  // before dsign is freed
  }
  if (p.kind == OperandKind::kBf16) {
    b.bf16 = true;
    if (!b.work.get()) b.work = DeviceBuffer<float>(rows * cols);
    detail::LaunchBf16Round(s, rows * cols, b.work.get(), cs);
    return b;
  }
  QuantSpec spec = p.spec;
  spec.seed = sr_seed;
  const BlockExtent be = ResolveBlock(spec, rows, cols);
  const size_t scale_count = ((rows + be.rows - 1) / be.rows) * ((cols + be.cols - 1) / be.cols);
  const size_t bytes = ScaleBytes(ScaleFormatOf(spec.rule));
  b.codes = DeviceBuffer<uint8_t>(rows * cols);
  b.raw_scales = DeviceBuffer<uint8_t>(scale_count * bytes);
  QuantizedTensor q = EngineQuantizeOnDevice(TensorView{DType::kF32, s, rows, cols}, spec, b.codes.get(),
                                             b.raw_scales.get(), cs);
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

// RunStepGemm of recipe_step.cc: GEMM gi's output (this GEMM's m x n) into out.
void RunGemm(const TrainingRecipe& recipe, size_t gi, const DevTensors& st, const RecipeOptions& opt, uint64_t step,
             float* out, cudaStream_t cs) {
  const RecipeGemm& g = recipe.gemms[gi];
  const std::string what = std::string(recipe.name) + " " + LinearGemmName(g.which);
  const uint64_t gseed = qmx::detail::Mix(opt.seed, step, gi + 1);
  const int ta = static_cast<int>(g.a.tensor), tb = static_cast<int>(g.b.tensor);
  DevOperand a = Build(g.a, st.src[ta], st.rows[ta], st.cols[ta], gseed, qmx::detail::Mix(gseed, 1), what, cs);
  DevOperand b = Build(g.b, st.src[tb], st.rows[tb], st.cols[tb], gseed, qmx::detail::Mix(gseed, 2), what, cs);
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
                              void* stream) {
  if (q.spec.row_scaled) throw Error("engine: dequantizing row-scaled NVFP4 runs on the CPU (q.cpu().dequantize())");
  const size_t n = q.rows * q.cols;
  if (n == 0) return;
  Require("the engine's dequantization");
  if (!codes || !raw_scales || !out) throw Error("engine: dequantization needs the codes, the scales and the output");
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  if (q.scale_rows != (q.rows + be.rows - 1) / be.rows || q.scale_cols != (q.cols + be.cols - 1) / be.cols)
    throw Error("engine: the quantized tensor's scale grid does not match its shape and block");
  // The tables of Dequantize (quantize.cc): each code's value, and each scale byte's decode scale in double.
  const std::vector<float> elem = DecodeTableF32(q.spec.elem);
  std::vector<float> code_table(256);
  for (unsigned c = 0; c < 256; ++c) code_table[c] = elem[c & q.spec.elem.CodeMask()];
  std::vector<double> scale_table(256, 0.0);
  for (unsigned b = 0; b < 256 && sf != ScaleFormat::kFp32; ++b)
    scale_table[b] = sf == ScaleFormat::kUe8m0
                         ? (b == 0xFF ? std::nan("") : std::ldexp(1.0, static_cast<int>(b) - 127))
                         : static_cast<double>(Nvfp4DecodeScale(static_cast<uint8_t>(b), q.tensor_amax, q.spec.rule));
  DeviceBuffer<float> dcodes(code_table.data(), 256);
  DeviceBuffer<double> dscales(scale_table.data(), 256);
  detail::LaunchDequantize(codes, q.rows, q.cols, raw_scales, be.rows, be.cols, q.scale_cols,
                           static_cast<int>(ScaleBytes(sf)), sf == ScaleFormat::kUe8m0, dcodes.get(), dscales.get(),
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
    if (g.quest_backward) return what + "quartet's backward (QuEST mask, inverse Hadamard) runs on the CPU";
    const AccumModel model = AccumModelByName(opt.accum == "auto" ? g.accum : opt.accum);
    if (model.kind == AccumKind::kExact || model.kind == AccumKind::kBlockExact)
      return what + "'" + model.name + "' (one exact rounding per dot product or scale block) runs on the CPU";
  }
  return "";
}

void EngineLinearForward(const TrainingRecipe& recipe, const float* x, const float* w, size_t m, size_t n, size_t k,
                         RecipeState& state, const RecipeOptions& opt, LinearSaved& saved, float* y, void* stream) {
  if (m == 0 || n == 0 || k == 0) throw Error("recipe: m, n and k must be positive");
  CheckRecipeShape(recipe, m, n, k, "linear layer");
  CheckSupport(recipe, opt);
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  saved = LinearSaved{};
  saved.amax = {AmaxChecked(x, m * k, "X", cs), AmaxChecked(w, n * k, "W", cs), 0.0f};
  qmx::detail::SetupDelayed(recipe, 0, 1, saved.amax, state, opt, saved.dscale);
  RunGemm(recipe, 0, MakeTensors(x, w, nullptr, m, n, k), opt, state.step, y, cs);
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
  const size_t m = saved.m, n = saved.n, k = saved.k;
  saved.amax[2] = AmaxChecked(dy, m * n, "dY", cs);
  qmx::detail::SetupDelayed(recipe, 1, 3, saved.amax, state, opt, saved.dscale);
  const DevTensors st = MakeTensors(x, w, dy, m, n, k);
  RunGemm(recipe, 1, st, opt, state.step, dx, cs);
  RunGemm(recipe, 2, st, opt, state.step, dw, cs);
  saved.valid = false;
  qmx::detail::EndStep(state, saved.dscale, saved.amax);
}

void EngineBiasGradient(const float* dy, size_t m, size_t n, float* db, void* stream) {
  Require("the engine's bias gradient");
  detail::LaunchColumnSums(dy, m, n, db, stream);
  detail::Check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "engine bias gradient");
}

}  // namespace qmx::gpu
