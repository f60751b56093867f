// qmx/gpu.h: the optional CUDA backend. The same operations as the CPU library (convert.h, mx.h,
// quantize.h, gemm.h) run on an NVIDIA GPU through its own conversion instructions, NVIDIA's header
// functions and cuBLASLt, so `qmx-sim xval` can compare them bit for bit (gpu/README.md).
// Every call throws qmx::Error with a message naming what is missing (no device, an architecture the
// GPU lacks, a cuBLASLt configuration it refuses); nothing here includes a CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qmx/cast_options.h"
#include "qmx/convert.h"
#include "qmx/format.h"
#include "qmx/gemm.h"
#include "qmx/metrics.h"
#include "qmx/mx.h"
#include "qmx/quantize.h"
#include "qmx/recipe.h"
#include "qmx/scale.h"
#include "qmx/scaled_mm.h"
#include "qmx/transform.h"

namespace qmx::gpu {

struct DeviceInfo {
  bool available = false;  // a CUDA device could be opened
  std::string reason;      // why not, when !available
  std::string name;        // "NVIDIA H200"
  int major = 0, minor = 0;
  int driver_version = 0, runtime_version = 0, cublaslt_version = 0;
  size_t memory_bytes = 0;
  bool sm100a_code = false;  // this build holds sm_100a kernels and the device runs them (compute 10.0)
  std::string Describe() const;  // "NVIDIA H200 (sm_90), driver 13.0, runtime 13.0, cuBLASLt 130000"
};
// Opens device 0 on first use; never throws.
const DeviceInfo& Device();
// Throws qmx::Error naming `what` when there is no device, or when need_sm100a and the device cannot run
// the sm_100a kernels.
void Require(const char* what, bool need_sm100a = false);

// Device memory for callers that include no CUDA header (tests, tools): `bytes` bytes allocated on device 0
// and freed on destruction; copies wait for the device. Made inside one of the engine's calls, it comes from
// the engine's memory pool in the order of the call's stream. Throws qmx::Error naming the failure.
class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }
  void Upload(const void* host, size_t bytes);
  void Download(void* host, size_t bytes) const;

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
  bool pooled_ = false;     // made inside an engine call: the engine's pool, in its stream's order
  void* stream_ = nullptr;  // that stream (a cudaStream_t)
};

// How a conversion is computed on the device.
enum class ConvertPath : uint8_t {
  kPtx,     // "ptx": the cvt instruction itself: cvt.rn.satfinite.{e4m3,e5m2}x2.f32 (sm_89+);
            // cvt.rn.satfinite.{e2m1,e2m3,e3m2}x2.f32 and cvt.{rz,rp}.satfinite.ue8m0x2.f32 (sm_100a)
  kHeader,  // "header": the device functions of cuda_fp8.h / cuda_fp6.h / cuda_fp4.h
            // (__nv_cvt_float_to_fp8 etc.), which lower to cvt where the architecture has it
};
const char* ConvertPathName(ConvertPath p);
// Whether this (format, options, path) exists on the device, "" if so, else the reason.
std::string ConvertSupport(const Format& dst, const CastOptions& opt, ConvertPath path);

// FP32 values -> codes, one byte each (as ConvertToCodes). Only what ConvertSupport accepts.
void ConvertF32(const float* x, size_t n, const Format& dst, const CastOptions& opt, ConvertPath path,
                uint8_t* codes);
// Every FP32 bit pattern first, first + 1, ..., first + count - 1 (generated on the device) -> codes.
void ConvertF32Range(uint32_t first, uint64_t count, const Format& dst, const CastOptions& opt,
                     ConvertPath path, uint8_t* codes);
// cvt.rs.satfinite.{e4m3,e5m2,e2m3,e3m2}x4.f32 / e2m1x4 (sm_100a): x holds 4 values per instruction
// {a, b, e, f}, rbits one word each; out receives d (the packed result, a in the top byte or nibble).
void ConvertF32SrX4(const float* x, const uint32_t* rbits, size_t n4, const Format& dst, uint32_t* out);

// MX block quantization on the device (as QuantizeMx on FP32 sources): one thread per block, amax over the
// block, the scale by the spec's rule (host_device.h; cvt.rp.satfinite.ue8m0x2 for round-up on sm_100a),
// elements by the conversion instruction (e4m3/e5m2) or the header functions (FP6/FP4) on fl32(x * 2^-k).
// Requires round=rne, sat=satfinite and no subnormal flushing (MxSupport says why not).
std::string MxSupport(const MxSpec& spec);
void QuantizeMx(const float* x, size_t n, const MxSpec& spec, uint8_t* codes, uint8_t* scales);

// NVFP4 with a given tensor amax (as QuantizeNvfp4WithAmax, Transformer Engine's orders of operations,
// rule nvfp4 or nvfp4-div), 1 x block blocks along rows of length n: codes (one e2m1 code per byte),
// E4M3 block scales, and the tensor decode scale fl32(1 / S_enc).
void QuantizeNvfp4(const float* x, size_t n, size_t block, float tensor_amax, ScaleRule rule, uint8_t* codes,
                   uint8_t* block_scales, float* tensor_decode);

// GEMMs through cuBLASLt, D = A * B with FP32 output (A is M x K, B is K x N, row-major codes as in gemm.h).
enum class CublasMode : uint8_t {
  kTensorwise,      // "tensorwise": FP8 with per-tensor FP32 scales (tensor_scale), fast accumulation off
  kTensorwiseFast,  // "tensorwise-fast": the same with CUBLASLT_MATMUL_DESC_FAST_ACCUM
  kBlockwise,       // "blockwise": A 1x128 (VEC128_32F), B 128x128 (BLK128x128_32F) FP32 scales (sm_90)
  kBlockwiseVec,    // "blockwise-vec": 1x128 scales on both sides (VEC128_32F)
  kMx,              // "mx": VEC32_UE8M0 scales, 128x4 layout (MXFP8, MXFP6, MXFP4; sm_100a)
  kNvfp4,           // "nvfp4": VEC16_UE4M3 scales, 128x4 layout, E2M1 elements (sm_100a)
};
const char* CublasModeName(CublasMode m);
CublasMode ParseCublasMode(const std::string& s);
// The accumulation model (gemm.h) that reproduces the mode on this device, or "" when none is known.
std::string CublasModeModel(CublasMode m, const DeviceInfo& dev);
// Whether the device can run the mode on these operands: "" or the reason.
std::string CublasSupport(CublasMode m, const GemmOperand& a, const GemmOperand& b);
// The kernel configuration cuBLASLt ran (cublasLtMatmulAlgoConfigGetAttribute on the algorithm used).
struct CublasAlgo {
  int32_t id = 0;          // CUBLASLT_ALGO_CONFIG_ID
  uint32_t tile = 0;       // CUBLASLT_ALGO_CONFIG_TILE_ID
  uint32_t stages = 0;     // CUBLASLT_ALGO_CONFIG_STAGES_ID
  int32_t split_k = 1;     // CUBLASLT_ALGO_CONFIG_SPLITK_NUM: numSplitsK
  uint32_t reduction = 0;  // CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME: 0 none, 1 in place, 2 compute type, 4 output type
  static constexpr uint32_t kReduceInComputeType = 2;  // CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
};
// split_k > 0 runs the heuristic's algorithm with numSplitsK = split_k instead of its own choice (for
// split_k > 1 with the partial sums reduced in the compute type, FP32); Error where the algorithm cannot.
// algo, when given, receives the configuration that ran.
std::vector<float> GemmCublasLt(const GemmOperand& a, const GemmOperand& b, CublasMode mode, CublasAlgo* algo = nullptr,
                                int split_k = 0);

// A raw tensor-core kernel: mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32 (sm_89+), one
// warp per 16 x 8 tile of D, the accumulator carried in registers from k-step to k-step with no promotion
// and no scales: D = A * B (+ C). M a multiple of 16, N of 8, K of 32.
std::vector<float> GemmMmaSync(const GemmOperand& a, const GemmOperand& b, const float* c_in);

// The bench's baseline: the median time of `reps` BF16 GEMMs (m x k by k x n, FP32 accumulation, BF16 out)
// through cuBLASLt, as torch.matmul runs them, after one warm-up.
double Bf16GemmSeconds(size_t m, size_t n, size_t k, int reps);

// ------------------------------------------------------------------ the emulation engine
// The library's own GEMM models as CUDA kernels (gpu/README.md "The emulation engine"): every output
// equals qmx::Gemm's bit for bit, on any CUDA GPU. It runs the fused models (hopper-fp8*, hopper-mma-sync,
// ada-fp8, blackwell-*, their -mmasim forms, fused: strings) and fp32-seq, in double arithmetic that the
// host proves exact per call for the operands' formats and scales and the model's F, step and group.
// "" when the engine runs this GEMM, else why not (exact and block-exact, and bounds past 53 bits).
std::string EngineGemmSupport(const GemmOperand& a, const GemmOperand& b, const AccumModel& model);
// Which kernel ran and how its steps went: "fp4" (E2M1 x E2M1 under a model of groups of 16 in steps of 64
// without promotion, blackwell-mxf4nvf4: each step's sum on the BF16 tensor core with the scales folded
// into the operands), "dmma" (models of single products in steps of 16 or 32: hopper-fp8*, ada-fp8,
// hopper-mma-sync, blackwell-mxf8f6f4 and fused: strings like them; each step's products summed by the
// FP64 tensor core) or "generic"; the steps (one per output per step) that took an exact step instead:
// fp4 steps not proven by their bounds (computed from the groups' sums) or that met a non-finite scale or
// accumulator, dmma steps whose exponent bounds do not prove that no term is cut, or that meet NaN or Inf.
struct EngineGemmStats {
  std::string kernel;
  uint64_t steps = 0, fallback_steps = 0;
  // exact on the tensor-core kernel: outputs whose FP64 sum over all of K its line bounds proved exact, summed
  // with no per-step check (every step of their 64 x 64 blocks).
  uint64_t whole_outputs = 0;
  double kernel_seconds = 0;  // the kernels alone (FP4: with packing the operands), without the copies
};
// qmx::Gemm on the device: the same checks and errors, then qmx::Error "engine: <reason>" where
// EngineGemmSupport refuses, or naming the missing device.
std::vector<float> EngineGemm(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                              EngineGemmStats* stats = nullptr);

// A GEMM operand in device memory: meta is the GemmOperand without its codes and block scales (left empty:
// shape, element and scale formats, block geometry, tensor scale, per-line factors, TE amax); codes holds its
// rows x cols codes and scales (null without block scales) its scale_rows x scale_cols decoded block scales.
struct DeviceGemmOperand {
  GemmOperand meta;
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
};
// EngineGemm on device operands (no C): the same checks and errors (block scales bounded by their format's
// widest significand, not read), out (M x N FP32, device memory) written on `stream` (a cudaStream_t; null:
// the default stream), waited for. split=hmma models are refused.
void EngineGemmOnDevice(const DeviceGemmOperand& a, const DeviceGemmOperand& b, const AccumModel& model, float* out,
                        void* stream, EngineGemmStats* stats = nullptr);

// The library's conversion on the device (qmx::Convert element by element, which ConvertToCodes equals):
// the reference routine's own source (lib/src/round/round_core.h) runs per element, so every format of 8
// bits or fewer and every CastOptions (each rounding, stochastic rounding from sr's bits or the library's
// Philox stream, saturation, NaN, subnormal and negative-value rules) gives the CPU's codes and flags.
// src holds n values of src_type (fp32, fp16, bf16 or fp64); out receives n codes, one byte each, and flags
// (optional) each element's RoundResult flags. Throws qmx::Error "engine: ..." for other sources or wider
// formats, and ValidateCastOptions' errors. kernel_seconds (optional): the kernel alone, without the copies.
void EngineConvertCheck(DType src_type, const Format& dst, const CastOptions& opt);
void EngineConvert(DType src_type, const void* src, size_t n, const Format& dst, const CastOptions& opt, uint8_t* out,
                   uint8_t* flags = nullptr, const SrSource& sr = {}, double* kernel_seconds = nullptr);
// The same on device memory (src, out, flags and sr.bits are device pointers), queued on `stream` (a
// cudaStream_t; null: the default stream) without waiting: for callers whose tensors live on the GPU.
void EngineConvertOnDevice(DType src_type, const void* src, size_t n, const Format& dst, const CastOptions& opt,
                           uint8_t* out, uint8_t* flags, const SrSource& sr, void* stream);
// qmx::QuantizeMx on the device, the steps of QuantizeMxRef per block (one warp each): every UE8M0 rule,
// NaN policy and element scaling and every CastOptions of the element format (the elements by the reference
// routine's own source), from fp32, fp16 or bf16; codes one byte per element, MxScaleCount scales. The same
// checks and errors as QuantizeMx (ValidateMxSpec). kernel_seconds (optional): the kernel alone.
void EngineQuantizeMx(DType src_type, const void* src, size_t n, const MxSpec& spec, uint8_t* codes, uint8_t* scales,
                      const SrSource& sr = {}, double* kernel_seconds = nullptr);
// qmx::Quantize on the device, block by block as QuantizeRef defines it (one warp per block of the scale
// grid; gpu/README.md "The emulation engine"): every recipe and rule, UE8M0, FP32 and NVFP4 scales, 1-D and
// 2-D blocks along either axis, row-scaled NVFP4, every NaN policy, element scaling and CastOptions, from
// fp32, fp16 or bf16. The same checks and errors as Quantize; "engine: ..." where EngineQuantizeSupport
// refuses (delayed scaling, the 4over6 rules). kernel_seconds (optional): amax passes and kernel, no copies.
std::string EngineQuantizeSupport(const QuantSpec& spec);
QuantizedTensor EngineQuantize(const TensorView& x, const QuantSpec& spec, double* kernel_seconds = nullptr);
// The same on device memory: x.data a device pointer; codes (rows * cols bytes) and scales (scale_rows *
// scale_cols * ScaleBytes bytes) device buffers; the work queued on `stream` (a cudaStream_t; null: the
// default stream), and waited for, since the tensor amax decides S_enc on the host. Returns the tensor's
// description (spec, shape, scale grid, tensor_amax, tensor_decode, line_amax) with codes and scales empty:
// they are in the caller's buffers. `fixed`: qmx::QuantizeWithScale's given FP32 scale (a per-tensor FP32
// spec; delayed scaling's scale from its amax history), else null.
QuantizedTensor EngineQuantizeOnDevice(const TensorView& x, const QuantSpec& spec, uint8_t* codes, uint8_t* scales,
                                       void* stream, const Fp32Scale* fixed = nullptr);
// The GEMM operand of a tensor EngineQuantizeOnDevice made: q its description (codes and scales empty),
// codes and raw_scales its device buffers. meta is OperandFromQuantized's without codes and scales (a
// per-tensor FP32 scale is read from raw_scales); the block scales are decoded on `stream` into `scales`,
// device memory allocated here that must outlive the operand.
DeviceGemmOperand DeviceOperandFromQuantized(QuantizedTensor q, const uint8_t* codes, const uint8_t* raw_scales,
                                             std::unique_ptr<DeviceMemory>& scales, void* stream);
// qmx::Dequantize on the device, for a tensor EngineQuantizeOnDevice made (q its description; codes and
// raw_scales its device buffers): out (rows x cols FP32, device memory) equal bit for bit to
// Dequantize(q, out, order, ftz), on `stream`, waited for. Row-scaled NVFP4, MX scales in a format other than
// UE8M0 and NVFP4 rules on other formats than their own are refused (they dequantize on the CPU).
void EngineDequantizeOnDevice(const QuantizedTensor& q, const uint8_t* codes, const uint8_t* raw_scales, float* out,
                              void* stream, DequantOrder order = DequantOrder::kByRule, bool ftz = false);
// A training recipe's linear layer on the device (qmx::LinearForward and LinearBackward, qmx/recipe.h): X (m x
// k), W (n x k), dY (m x n), Y, dX and dW FP32 row-major in device memory, on `stream`, waited for. Every
// operand is made on the device as the CPU makes it (transposed copies, Hadamard transforms with the same
// seeds, EngineQuantizeOnDevice with the same stochastic-rounding streams) and multiplied by
// EngineGemmOnDevice under the same model, so Y, dX and dW equal the CPU's bit for bit and the state (step,
// delayed-scaling histories) advances as the CPU's does. EngineLinearSupport: "" or why the engine does not
// run the recipe under these options (quartet's QuEST and its backward quantizer, delayed scaling and the
// exact models run on the CPU); the calls throw qmx::Error "engine: <that reason>".
std::string EngineLinearSupport(const TrainingRecipe& recipe, const RecipeOptions& opt);
void EngineLinearForward(const TrainingRecipe& recipe, const float* x, const float* w, size_t m, size_t n, size_t k,
                         RecipeState& state, const RecipeOptions& opt, LinearSaved& saved, float* y, void* stream);
void EngineLinearBackward(const TrainingRecipe& recipe, const float* x, const float* w, const float* dy,
                          RecipeState& state, const RecipeOptions& opt, LinearSaved& saved, float* dx, float* dw,
                          void* stream);
// qmx::BiasGradient on device memory (dY m x n, db n), on `stream`, waited for.
void EngineBiasGradient(const float* dy, size_t m, size_t n, float* db, void* stream);

// Tensor operations on device memory, for callers whose tensors live on the GPU (qmx's Python functions on
// CUDA tensors). Each runs on `stream` (a cudaStream_t; null: the default stream) and waits for it.
// qmx::ScaledMm: args' a, b, scale_a, scale_b and bias are device pointers (`reference` is ignored); out
// receives M x N FP32 values, or BF16 / FP16 codes (2 bytes each). The same plan, checks and errors
// (PlanScaledMm); each split of K is EngineGemmOnDevice under the plan's Hopper model (cuBLASLt itself on a
// Hopper GPU, the engine's kernels elsewhere), the partial sums are added and the epilogue applied by the
// CPU's own source (lib/src/gemm/scaled_mm_core.h). Returns the plan's model, scaling and splits (bits empty).
ScaledMmResult EngineScaledMmOnDevice(const ScaledMmArgs& args, void* out, void* stream);
// qmx::CompareTensors of n device floats: the same chunks, lanes and element step on the device (one thread
// per chunk and lane), the lanes folded and the chunks merged on the host by the library's own code.
ErrorStats EngineErrorStatsOnDevice(const float* ref, const float* out, size_t n, void* stream);
// qmx::HadamardForward (HadamardInverse when inverse) in place on rows x cols device floats, with
// ValidateHadamard's checks and errors.
void EngineHadamardOnDevice(const HadamardSpec& h, float* x, size_t rows, size_t cols, bool inverse, void* stream);

// The bench's measurement: x uploaded once, then `reps` conversions of it on the device (sr = {seed, 0}) and
// as many device-to-device copies of its n * 4 bytes, each timed by CUDA events after one warm-up: the
// medians. codes receives the conversion.
struct EngineConvertTiming {
  double kernel_s = 0, copy_s = 0;
};
EngineConvertTiming TimeEngineConvert(const float* x, size_t n, const Format& dst, const CastOptions& opt, uint64_t seed,
                                      int reps, uint8_t* codes);

}  // namespace qmx::gpu

// ------------------------------------------------------------------ cross-validation (qmx-sim xval)
#include <functional>

#include "qmx/golden.h"

namespace qmx::gpu {

// The CUDA backend for golden::Verify: runs op=convert (f32 sources), ue8m0, mx-block, nvfp4-block and sr
// (cvt.rs x4 layout, sm_100a) files on the device; other files, and options the device's instructions do
// not implement, come back as skipped with the reason.
golden::ExternalRunner GoldenRunner();

struct XvalOptions {
  std::string golden_dir;    // "" = no golden replay
  bool exhaustive = false;   // all 2^32 FP32 inputs per conversion (else 2^26 spread over the space)
  bool conversions = true, quantize = true, gemm = true;
  bool engine = true;        // the emulation engine's GEMMs against the CPU library, model by model
  bool quick = false;        // fewer and smaller GEMM cases (for tests)
  uint64_t seed = 1;
  size_t max_show = 5;       // first mismatches kept per row
  std::string only;          // the engine's conversion rows whose operation lacks this text are not run
};

struct XvalRow {
  std::string group;      // "golden", "convert", "quantize", "gemm", "engine"
  std::string op;         // e.g. "f32->e4m3 rne satfinite (ptx)", "cuBLASLt tensorwise e4m3 x e4m3"
  std::string reference;  // what the device is compared with: "golden file", "cpu-simd", a GEMM model
  uint64_t cases = 0, mismatches = 0;
  std::string skipped;    // reason, when not run
  bool informational = false;  // an observation (the raw mma.sync kernel against candidate models): its
                               // mismatches are reported but fail nothing
  std::vector<std::string> first;  // first mismatches, in hex
  std::vector<std::string> notes;  // what the device chose (e.g. cuBLASLt's kernel and numSplitsK per shape)
  double seconds = 0;
};

// Runs the selected comparisons (device vs CPU emulator), calling progress after each row.
std::vector<XvalRow> Xval(const XvalOptions& opt, const std::function<void(const XvalRow&)>& progress = {});

}  // namespace qmx::gpu
