// qmx/recipe.h: training recipes on one linear layer. Y = X W^T (FPROP), dX = dY W (DGRAD) and
// dW = dY^T X (WGRAD), each GEMM's operands quantized exactly as a recipe does it (which tensor, along
// which axis, in which format, under which scale rule, with which transform and rounding), multiplied
// under an accumulation model and measured against FP64 GEMMs of the unquantized tensors
// (docs/REFERENCES.md section 3: the MXFP8 recipes paper, NVIDIA's scaling blog and FP8 talk, Quartet).
// A sequence of steps with drifting tensors and
// outlier spikes drives the delayed-scaling amax histories (FOG's kurtosis alongside).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qmx/distributions.h"
#include "qmx/gemm.h"
#include "qmx/metrics.h"
#include "qmx/quantize.h"
#include "qmx/scale.h"
#include "qmx/transform.h"

namespace qmx {

enum class LinearGemm : uint8_t { kFprop, kDgrad, kWgrad };
const char* LinearGemmName(LinearGemm g);  // "fprop", "dgrad", "wgrad"
inline constexpr std::array<LinearGemm, 3> kLinearGemms = {LinearGemm::kFprop, LinearGemm::kDgrad, LinearGemm::kWgrad};

// The three tensors of a linear layer, FP32 row-major: X is m x k (tokens x input features), W is n x k
// (output x input features), dY is m x n.
enum class LinearTensor : uint8_t { kX, kW, kDy };
const char* LinearTensorName(LinearTensor t);  // "X", "W", "dY"

// How one GEMM operand is made. Every operand is quantized along its GEMM's K from a K-contiguous
// high-precision copy: FPROP takes X (K = k) and W (K = k); DGRAD dY (K = n) and W^T, i.e. W column-wise;
// WGRAD dY^T (K = m) and X^T, i.e. dY and X column-wise. So a "column-wise copy" is a fresh quantization of
// the high-precision source along the other axis, never a transposed quantized tensor (MXFP8 recipes).
enum class OperandKind : uint8_t {
  kBf16,       // RNE to BF16, no scales
  kSpec,       // qmx::Quantize under `spec` (its blocks run along K; 2-D blocks are the same either way)
  kQuest,      // QuEST (Hadamard, std-based power-of-two scale, RNE with clipping) under `spec`: Quartet's forward
  kQuartetSr,  // Quartet's backward quantizer (mxfp4_triton.py with stochastic_round): per 1x32 block X =
               // 2^(floor(log2 amax) - 2), s = fl32(X * fl32(4/3)), element = SR(fl32(x / s)) to E2M1, value = e * s
};
const char* OperandKindName(OperandKind k);  // "bf16", "spec", "quest", "quartet-sr"

struct OperandPlan {
  LinearTensor tensor = LinearTensor::kX;
  bool transposed = false;  // the copy quantized along the tensor's first dimension (column-wise)
  // Quartet's backward GEMMs re-quantize the forward's QuEST output (in the forward Hadamard domain),
  // not the high-precision tensor.
  bool from_forward = false;
  OperandKind kind = OperandKind::kSpec;
  QuantSpec spec;                         // row-wise along K (kSpec, kQuest: block and element)
  std::optional<HadamardSpec> hadamard;   // along K before quantizing; randomized ones draw new signs each step
  bool delayed = false;                   // per-tensor FP32 scale from the tensor's amax history
  bool stochastic = false;                // the spec rounds stochastically (seeded per step and operand)
};

// Quartet's backward quantizer on a rows x cols matrix, blocks of 32 along the rows (cols % 32 == 0, else
// qmx::Error): E2M1 codes, the block scales X (UE8M0) and tensor_scale fl32(4/3), so an element's value is
// decode(code) * X * fl32(4/3). Stochastic rounding (SR-A, 8 bits) with element (r, c) drawing
// RandomBitsForElement(seed, r * cols + c).
GemmOperand QuantizeQuartetBackward(const float* x, size_t rows, size_t cols, uint64_t seed,
                                    Exec exec = Exec::kParallel);

struct RecipeGemm {
  LinearGemm which = LinearGemm::kFprop;
  OperandPlan a, b;   // A = M x K, B^T = N x K
  std::string accum;  // the accumulation model of the hardware the recipe targets ("auto" picks it)
  // Quartet: the GEMM output is in the forward Hadamard domain of X (DGRAD) or W (WGRAD); multiply it by
  // that tensor's QuEST trust mask and invert the Hadamard along k.
  bool quest_backward = false;
};

struct TrainingRecipe {
  std::string name, summary, source;
  std::array<RecipeGemm, 3> gemms;  // FPROP, DGRAD, WGRAD
};

// bf16, fp8-delayed, fp8-current, fp8-blockwise, mxfp8, mxfp8-ocp, mxfp8-e5m2-grads, nvfp4, quartet.
// Throws qmx::Error listing them.
TrainingRecipe TrainingRecipeByName(const std::string& name);
std::vector<std::string> TrainingRecipeNames();
// The recipes named, in order; "all" stands for every recipe. Throws qmx::Error for an unknown name.
std::vector<TrainingRecipe> TrainingRecipesByNames(const std::vector<std::string>& names);
// A size a linear layer must be a multiple of under a recipe: an operand transformed along its GEMM's K (a
// Hadamard block) or quantized by Quartet's backward quantizer (blocks of 32 along K) needs that K to be a
// whole number of blocks. FPROP's K is in_features ('k'), DGRAD's out_features ('n'), WGRAD's the tokens
// ('m', the rows of X and dY). Rules with the same dimension and multiple are merged.
struct RecipeShapeRule {
  char dim = 'k';
  size_t multiple = 1;
  std::string why;  // "fprop: the Hadamard block of X, fprop: the Hadamard block of W"
};
std::vector<RecipeShapeRule> RecipeShapeRules(const TrainingRecipe& r);
// qmx::Error for the first rule these sizes break, naming `what` (the layer), the dimension, its size, the
// multiple and why: "layer fc1 under recipe nvfp4: in_features (k) = 40 is not a multiple of 16 (...)".
// A size of 0 stands for one not known yet (a layer's tokens before its first call) and is not checked.
void CheckRecipeShape(const TrainingRecipe& r, size_t m, size_t n, size_t k, const std::string& what);
// One line per operand: "fprop A: X e4m3 1x32 row-wise round-up (transformer-engine) ...".
std::string DescribeOperand(const OperandPlan& p);
std::string DescribeTrainingRecipe(const TrainingRecipe& r);

struct RecipeOptions {
  std::string accum = "auto";  // "auto": each GEMM's model from the recipe; else one model for all three
  // NVFP4 GEMMs' alpha (qmx/gemm.h AlphaRule): the decode scales' product, or Transformer Engine's from the
  // amax (te: its cuBLASLt path; te-ref: its reference GEMM). GEMMs without two NVFP4 operands keep kDecode.
  AlphaRule alpha = AlphaRule::kDecode;
  uint64_t seed = 0;           // stochastic rounding bits and random Hadamard signs (mixed with the step)
  int amax_history = 1024;     // delayed scaling (Transformer Engine's DelayedScaling defaults)
  int margin = 0;
  AmaxAlgo amax_algo = AmaxAlgo::kMax;
  // Before a state's first step, push the tensors' own amax into the fresh histories, so a lone step shows
  // the steady state rather than the scale of 1 a fresh history starts with (sequences turn this off).
  bool prime_history = true;
  bool keep_values = false;  // keep each GEMM's output and operand values (tests, golden checks)
  Exec exec = Exec::kParallel;
};

// Delayed-scaling histories (X, W, dY) carried across the steps of a sequence.
struct RecipeState {
  std::optional<DelayedScaling> x, w, dy;
  uint64_t step = 0;
};

struct LinearInputs {
  const float* x = nullptr;
  const float* w = nullptr;
  const float* dy = nullptr;
  size_t m = 0, n = 0, k = 0;
};

// FP64 references of the three GEMMs from the FP32 tensors: each output a sum over K in ascending order in
// double (products exact), fixed order, so the same bits on any thread count.
struct LinearReference {
  std::vector<double> y, dx, dw;  // m x n, m x k, n x k
};
LinearReference ComputeLinearReference(const LinearInputs& in, Exec exec = Exec::kParallel);
// out (rows x cols) = A (rows x K) times Bt^T (Bt cols x K), in that order. Exposed for the tests.
std::vector<double> GemmF64(const float* a, const float* bt, size_t rows, size_t cols, size_t k,
                            Exec exec = Exec::kParallel);

struct OperandReport {
  std::string name;        // "X", "W^T", "dY" ...
  ErrorStats quant_error;  // dequantized operand against the quantizer's input (after any transform)
  uint64_t saturated = 0, flushed = 0;
  float tensor_scale = 1;  // per-tensor FP32 decode scale (or NVFP4's second level), 1 otherwise
};

struct RecipeGemmResult {
  LinearGemm which = LinearGemm::kFprop;
  std::string accum;   // the model used
  ErrorStats error;    // output against the FP64 reference of the unquantized GEMM
  OperandReport a, b;
  // keep_values only: the output, the exact values the GEMM multiplied (A: M x K, B^T: N x K, block scales
  // applied), and the factor applied after accumulation (per-tensor scales, Quartet's 16/9; output (0, 0)'s
  // when it varies per row or column).
  std::vector<float> out;
  std::vector<double> a_values, bt_values;
  float alpha = 1;
};

// What the CLI's recipe rows and Python's recipe_step report of one GEMM, by name, in one order: the error
// metrics of the output (sqnr_db, nmse, cosine, mean_rel_err, max_abs_err, bias), out_nonfinite, each
// operand's quantization SQNR and its saturated and flushed counts. `count` marks the integer fields; an
// SQNR is +Inf where the error is zero.
struct RecipeGemmField {
  std::string name;
  double value;
  bool count;
};
std::vector<RecipeGemmField> RecipeGemmFields(const RecipeGemmResult& g);

struct RecipeStepResult {
  std::array<RecipeGemmResult, 3> gemms;
  std::array<float, 3> amax{};  // max |x| of X, W and dY this step
  // Per-tensor delayed scaling: the decode scales this step used (X, W, dY), 0 when not delayed.
  float delayed_decode_x = 0, delayed_decode_w = 0, delayed_decode_dy = 0;
};

// Runs the three GEMMs of one step. Throws qmx::Error when a shape does not fit the recipe (a Hadamard or
// block that must divide K), when the model does not fit the operands (the GEMM layer's message), or when
// a tensor holds NaN or Inf.
RecipeStepResult RunRecipeStep(const TrainingRecipe& recipe, const LinearInputs& in, const LinearReference& ref,
                               RecipeState& state, const RecipeOptions& opt);

// The same step split where a training loop needs it: the forward (FPROP) when X and W exist, the backward
// (DGRAD, WGRAD) once dY does. A LinearForward then a LinearBackward on the same state give the outputs
// RunRecipeStep gives, bit for bit (SR bits and random Hadamard signs seeded per step, delayed scaling
// histories updated at the end of the backward, Quartet's backward from the forward's QuEST outputs).
struct LinearSaved {
  std::array<float, 3> amax{};
  std::optional<Fp32Scale> dscale[3];
  QuestResult quest_x, quest_w;  // Quartet: the forward's QuEST outputs
  std::shared_ptr<void> device;  // the GPU engine's counterpart of quest_x and quest_w (device buffers)
  size_t m = 0, n = 0, k = 0;
  uint64_t step = 0;
  bool valid = false;
};
// Y (m x n) = FPROP of X (m x k) and W (n x k) under the recipe; fills `saved` for the backward.
std::vector<float> LinearForward(const TrainingRecipe& recipe, const float* x, const float* w, size_t m, size_t n,
                                 size_t k, RecipeState& state, const RecipeOptions& opt, LinearSaved& saved);
// dX (m x k) and dW (n x k) from dY (m x n) and the step's X and W; ends the step (delayed-scaling pushes,
// state.step + 1). Throws qmx::Error without the matching LinearForward.
void LinearBackward(const TrainingRecipe& recipe, const float* x, const float* w, const float* dy, RecipeState& state,
                    const RecipeOptions& opt, LinearSaved& saved, float* dx, float* dw);

// The bias gradient of a linear layer as qmx.torch.Linear forms it: db[j] = the sum over the rows of dY (m x
// n) of dY[i][j], in FP32, rows in ascending order from +0 (one order, so the GPU engine's equals it).
void BiasGradient(const float* dy, size_t m, size_t n, float* db);

// ---------------------------------------------------------------- synthetic layers
// A tensor's distribution: DistSpec draws (unit RMS) times `scale`; `channel_rate` of the columns times
// `channel_gain` (LLM activations' outlier features); each row times exp(row_sigma * g_r - row_sigma^2 / 2),
// g_r ~ N(0, 1) (per-token gradient norms). Which columns and the row factors come from `structure_seed`,
// the values from `seed`, so a sequence keeps its outlier channels while its values change.
struct TensorGen {
  DistSpec dist;
  double scale = 1;
  double channel_rate = 0, channel_gain = 1;
  double row_sigma = 0;
};
struct LayerGen {
  TensorGen x, w, dy;
};
// X: Student-t(5) with 1/128 of the channels x 32; W: normal x 0.02; dY: Laplace x 1e-3 with row sigma 1.
LayerGen DefaultLayerGen();
void GenerateTensor(const TensorGen& g, uint64_t seed, size_t rows, size_t cols, float* out,
                    Exec exec = Exec::kParallel);
void GenerateTensor(const TensorGen& g, uint64_t seed, uint64_t structure_seed, size_t rows, size_t cols, float* out,
                    Exec exec = Exec::kParallel);

// g with its distribution replaced by `dist` (a DistSpec spelling) and no outlier channels or row factors;
// g itself when dist is empty.
TensorGen WithDistribution(TensorGen g, const std::string& dist);
// One step's tensors, generated: X (m x k) from seed * 3, W (n x k) from seed * 3 + 1, dY (m x n) from
// seed * 3 + 2 (the single-step mode of `qmx-sim recipe`).
struct LinearTensors {
  std::vector<float> x, w, dy;
  size_t m = 0, n = 0, k = 0;
  LinearInputs View() const { return {x.data(), w.data(), dy.data(), m, n, k}; }
};
LinearTensors GenerateLinearLayer(const LayerGen& g, uint64_t seed, size_t m, size_t n, size_t k);

// The sequence mode's tensors. Step 0 is GenerateTensor of each tensor; at each later step every element
// is replaced, with probability `drift` (W: weight_drift), by a fresh draw of the same distribution and
// structure (the same outlier channels and row factors), so the tensors change slowly while their
// distribution stays stationary. dY is scaled by grad_decay^t, and with probability spike_rate a step
// multiplies spike_rows random rows (tokens) of X and dY by spike_gain, for that step only.
struct SequenceGen {
  double drift = 0.05, weight_drift = 0.005, grad_decay = 1.0;
  double spike_rate = 0.05, spike_gain = 64;
  size_t spike_rows = 1;
};
class LayerSequence {
 public:
  LayerSequence(const LayerGen& gen, const SequenceGen& seq, uint64_t seed, size_t m, size_t n, size_t k);
  // Advances to the next step (the first call gives step 0) and returns its tensors.
  LinearInputs Next();
  bool spiked() const { return spiked_; }  // whether the step just returned carries a spike
  uint64_t step() const { return step_; }

 private:
  LayerGen gen_;
  SequenceGen seq_;
  uint64_t seed_, step_ = 0;
  size_t m_, n_, k_;
  std::vector<float> base_x_, base_w_, base_dy_, x_, w_, dy_;
  bool spiked_ = false, started_ = false;
};

}  // namespace qmx
