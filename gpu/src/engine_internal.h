// engine_internal.h: the emulation engine's kernel arguments, plain data shared by the host side
// (engine_gemm.cc, which plans and checks with the CPU library) and the kernels (engine_kernels.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gemm/scaled_mm_core.h"
#include "qmx/host_device.h"
#include "qmx/cast_options.h"
#include "qmx/format.h"
#include "qmx/metrics.h"

namespace qmx::gpu::detail {

// The index of element (r, c)'s block scale in a row-major grid of scale_cols blocks a row, each block
// block_rows x block_cols elements.
QMX_HOST_DEVICE inline size_t ScaleIndex(size_t r, size_t c, size_t block_rows, size_t block_cols, size_t scale_cols) {
  return (r / block_rows) * scale_cols + c / block_cols;
}

// One GEMM operand on the device: codes, the value and nominal exponent of each of the 256 codes, block
// scales (decoded, with the scale grid's geometry) and the second-level factors.
struct EngineOperand {
  const uint8_t* codes = nullptr;  // row-major, rows x cols
  size_t rows = 0, cols = 0;
  const double* values = nullptr;  // [256] DecodeToDouble of each code
  const int* nominal = nullptr;    // [256] the code's nominal exponent (MMA-Sim; zero: -126), operand emin applied
  const float* scales = nullptr;   // null: no block scales (all 1)
  size_t block_rows = 0, block_cols = 0, scale_cols = 0;
  int scale_emin = -126;           // the scale format's emin for nominal exponents (UE8M0 -127, E4M3 -6)

  // The block scale of element (r, c) (scales given), and of A's (line, k) or B's (k, line).
  QMX_HOST_DEVICE float ScaleAt(size_t r, size_t c) const {
    return scales[ScaleIndex(r, c, block_rows, block_cols, scale_cols)];
  }
  QMX_HOST_DEVICE float ScaleOf(bool is_a, size_t line, size_t k) const {
    return is_a ? ScaleAt(line, k) : ScaleAt(k, line);
  }
};

// The model, as FusedParams and AccumKind say it (qmx/gemm.h).
struct EngineModel {
  int kind = 0;   // 0 fused, 1 fp32-seq, 2 exact, 3 block-exact
  size_t kb = 0;  // block-exact: the scale block's length along K (GemmPlan::kb)
  int step = 32, frac_bits = 13, out_bits = 24, group = 1, zero_exp = -1000, promote = 0;
  bool term_rne = false, out_rne = false, zero_operands = false, scales_in = false, blocks = false,
       promote_separately = false;
};

// The epilogue's alpha, as qmx::detail::GemmPlan::AlphaAt forms it.
struct EngineAlpha {
  bool has = false;
  int rule = 0;  // AlphaRule
  float ta = 1.0f, tb = 1.0f;
  const float* rows = nullptr;  // per row of A (row-scaled NVFP4), else ta
  const float* cols = nullptr;  // per column of B, else tb
  float amax_a = 0.0f, amax_b = 0.0f;
  const float* amax_rows = nullptr;
  const float* amax_cols = nullptr;
  float te_factor = 1.0f, te_inv = 1.0f;
};

struct EngineGemmArgs {
  EngineOperand a, b;
  size_t m = 0, n = 0, k = 0;
  const float* c = nullptr;  // M x N, or null
  float* out = nullptr;      // M x N
  EngineModel model;
  EngineAlpha alpha;
};

// Runs the GEMM kernel on `stream` (a cudaStream_t; null: the default stream) and returns at once.
void LaunchEngineGemm(const EngineGemmArgs& args, void* stream);

// The FP4 kernel (engine_fp4.cu: E2M1 x E2M1, groups of 16, steps of 64, no promotion: blackwell-mxf4nvf4 and
// its -mmasim form). A pre-pass writes each line's elements times their block scales as BF16 integers relative
// to the line's step (A row-major M x kp, B transposed N x kp; kp = K rounded up to 64, zero-padded) and one
// Fp4StepInfo per line and step. The kernel sums each step on the BF16 tensor core and takes that sum where the
// step info proves that no term is cut and the sum exact; other steps run exactly from the tensor core's
// per-group sums, or through FusedStep (NaN or Inf, scales the packed values cannot hold); both counted in
// *fallback_steps.
struct alignas(16) Fp4StepInfo {
  int16_t lsb;   // an element's value is its packed value times 2^lsb; kFp4GenericLsb: FusedStep's line
  int16_t maxe;  // the largest scale exponent of the step's groups (a zero scale's: -126)
  int8_t e[4];   // each group's scale exponent
  float l1, maxabs;  // the sum and the largest of the packed magnitudes, rounded up
};
inline constexpr int16_t kFp4GenericLsb = -30000;
struct EngineFp4Buffers {
  uint16_t* a_packed = nullptr;  // M x kp BF16
  uint16_t* b_packed = nullptr;  // N x kp BF16 (B transposed)
  Fp4StepInfo* a_info = nullptr;  // M x steps
  Fp4StepInfo* b_info = nullptr;  // N x steps
  size_t kp = 0, steps = 0;
  unsigned long long* fallback_steps = nullptr;  // device counter
};
// Packs args.a / args.b (E2M1 codes and their scales) into the buffers, then runs the FP4 kernel.
void LaunchEngineFp4Gemm(const EngineGemmArgs& args, const EngineFp4Buffers& f, void* stream);

// The FP64 tensor-core kernel (engine_dmma.cu) for fused models of single products (group 1) in steps of 16 or
// 32, without MMA-Sim's zero rule, with F + 8 <= 53, and block scales in the products only as powers of two
// (UE8M0) whole steps along K. Per step, mma.m16n8k4.f64 sums a 64 x 64 tile's products, and a BF16 tensor-core
// product of the elements' lowest-bit weights certifies, output by output, that no term is cut at the step's
// unit: then that exact sum is the step's, rounded as the model rounds it. Every other step runs exactly: from
// the FP64 tiles by one lane where the accumulator sets the step's exponent (AccStep), else in integers from
// the tile's codes (WarpTileStep), and a step that meets NaN or Inf runs FusedStep; all counted in
// *fallback_steps. `exact` and `block-exact` need no certificate (their steps cut nothing); `exact` sums every
// step of a block onto one FP64 accumulator where the blocks' line bounds (LineBound) prove the whole sum exact.
struct alignas(16) StepInfo {
  int32_t maxnom = 0;  // the largest nominal exponent of a nonzero element, scale's exponent added; kNoTerm: none
  int32_t minlsb = 0;  // the lowest bit of a nonzero element, scale's exponent added; kNoLsb: none
  float scale = 1.0f;  // the block scale when scales enter the products, else 1 (16 bytes in all: one cp.async)
  int16_t scale_exp = 0;  // that scale's exponent (a power of two), else 0
  int16_t zero_scale = 0;  // that scale is zero
};
// maxnom = kSpecialStep: the step meets NaN or Inf. A row's maxnom plus a column's is above kSpecialSum exactly
// when one of them is special (finite nominal exponents lie within FP64's range, +-1,100).
inline constexpr int32_t kNoTerm = -20000, kNoLsb = 32000, kSpecialStep = 30000, kSpecialSum = 5000;
// A code's finite value as m * 2^e (m signed, |m| < 2^15) and its nominal exponent (operand emin applied);
// zero: m = 0, nom = kZeroNom.
struct CodeParts {
  int16_t m = 0, e = 0, nom = 0, pad = 0;
};
inline constexpr int16_t kZeroNom = -16000;
// `exact`'s bound of one whole line (a row of A or a column of B, over all of K): every nonzero element's lowest
// bit (scale's exponent added) is at or above 2^minlsb (kNoLsb: none), and the line's Euclidean norm is below
// 2^top (kNoTerm: an all-zero line; kSpecialStep: NaN or Inf in the line or its scales). By Cauchy-Schwarz a
// row's and a column's products sum in magnitude below 2^(top(row) + top(column)).
struct LineBound {
  int32_t minlsb = kNoLsb, top = kNoTerm;
};
struct EngineDmmaBuffers {
  StepInfo* a_info = nullptr;  // M x steps
  StepInfo* b_info = nullptr;  // N x steps
  size_t steps = 0;
  const CodeParts* a_parts = nullptr;  // [256]
  const CodeParts* b_parts = nullptr;
  unsigned long long* fallback_steps = nullptr;  // device counter
  // How the kernel decodes each operand's codes into its tiles: 0 its 256-entry table, 1 E4M3 and 2 E5M2 by
  // the hardware's FP8 -> FP16 conversion (exact; no random table reads).
  int a_fp8 = 0, b_fp8 = 0;
  // The certificate's BF16 weights of every element, written by the step-bounds pass: A's M x kp (row-major),
  // B's kp x np (k-major), kp = steps x step, np = N rounded up to 64; b_w zeroed first where np > N.
  uint16_t* a_w = nullptr;
  uint16_t* b_w = nullptr;
  size_t kp = 0, np = 0;
  // exact only (null otherwise): each (line, step)'s sum of squared values (elements times scales), each line's
  // bound, and the count of outputs whose whole sum the line bounds proved exact in FP64 (their blocks sum every
  // step straight onto the FP64 accumulator, with no per-step check).
  double* a_ss = nullptr;
  double* b_ss = nullptr;
  LineBound* a_bound = nullptr;
  LineBound* b_bound = nullptr;
  unsigned long long* whole_outputs = nullptr;
  // exact only: one byte per 64 x 64 block of outputs (row-major over the grid), set where the line bounds do not
  // prove the whole sum exact and the block runs step by step.
  uint8_t* per_step = nullptr;
  // exact only, where the device has room for them (else null, and the blocks summed whole run on this engine's
  // own FP64 tensor-core kernel): A's values times their scales (M x K, row-major), B's (K x N) and the FP64
  // product (M x N), which cuBLASLt's FP64 GEMM (DenseDgemm) forms. Where WholeSumExact holds, every order and
  // grouping of that sum is exact, cuBLASLt's included.
  double* dense_a = nullptr;
  double* dense_b = nullptr;
  double* dense_d = nullptr;
  bool* dense_used = nullptr;  // (host) set to whether cuBLASLt ran the whole sums
};
// D (M x N) = A (M x K) B (K x N) (+ D where accumulate), row-major FP64, by cuBLASLt with CUBLAS_COMPUTE_64F
// (the FP64 tensor core; no emulated FP64) on `stream`; false where cuBLASLt offers no algorithm (gemm_cublaslt.cu).
bool DenseDgemm(size_t m, size_t n, size_t k, const double* a, const double* b, double* d, bool accumulate,
                void* stream);
// Fills the step bounds from args' codes and scales, then runs the kernel (args.model.step 16 or 32).
void LaunchEngineDmmaGemm(const EngineGemmArgs& args, const EngineDmmaBuffers& f, void* stream);

// The linear layer's helpers (engine_linear.cu), each queued on `stream` (a cudaStream_t) without waiting.
// dst (cols x rows) = src (rows x cols) transposed.
void LaunchTransposeF32(const float* src, size_t rows, size_t cols, float* dst, void* stream);
void LaunchTransposeU8(const uint8_t* src, size_t rows, size_t cols, uint8_t* dst, void* stream);
// count block scales of `bytes` bytes each (1: table[byte], 256 floats in device memory; 4: FP32 little-endian).
void LaunchDecodeScales(const uint8_t* raw, size_t count, int bytes, const float* table, float* out, void* stream);
// In place on `blocks` runs of n floats (qmx::HadamardForward, or HadamardInverse when inverse): sign[n] and
// norm = 1 / sqrt(n) as the library computes them.
void LaunchHadamard(float* x, size_t blocks, int n, const double* sign, double norm, bool inverse, void* stream);
// *amax_bits = the FP32 bits of max |x| over the finite elements; *first_bad = the first NaN or Inf's index,
// or all ones.
void LaunchAmaxFinite(const float* x, size_t count, unsigned* amax_bits, unsigned long long* first_bad, void* stream);
// dst = src rounded to BF16 (RNE), as FP32 values.
void LaunchBf16Round(const float* src, size_t count, float* dst, void* stream);
// out (m x n) = a (m x k) bt (n x k)^T, each output a sequential fmaf chain over k from +0 (fp32-seq;
// engine_seq.cu's register-tiled kernel).
void LaunchGemmF32Seq(const float* a, const float* bt, size_t m, size_t n, size_t k, float* out, void* stream);
// fp32-seq on the codes GEMM's arguments: x of A (M x K) into a_work and y of B transposed (N x K) into bt_work,
// then each output's chain from C (or +0) and the epilogue (alpha, the canonical NaN), on the same kernel.
void LaunchEngineSeqGemm(const EngineGemmArgs& g, float* a_work, float* bt_work, void* stream);
// out[j] = sum over i of x[i][j] (x m x n), FP32, i ascending from +0: qmx::BiasGradient.
void LaunchColumnSums(const float* x, size_t m, size_t n, float* out, void* stream);
// out (rows x cols) = fl32(code_table[code] * S) per element, S of the element's block (scale grid of
// scale_cols columns, blocks block_rows x block_cols): scale_table[byte] for 1-byte scales, the FP32 scale for 4;
// NaNs with the host's payloads (ue8m0: the NaN scale byte gives +NaN whatever the code). ftz: an FP32 scale
// and each result below 2^-126 become zeros of their sign (detail::FlushSubnormal; the table is flushed already).
void LaunchDequantize(const uint8_t* codes, size_t rows, size_t cols, const uint8_t* scales, size_t block_rows,
                      size_t block_cols, size_t scale_cols, int bytes, bool ue8m0, bool ftz, const float* code_table,
                      const double* scale_table, float* out, void* stream);

// Quartet's forward quantizer (qmx::QuestQuantize) on rows x cols FP32 values already in the Hadamard domain,
// groups of `group` along the rows (cols a multiple of it): codes, each group's decoded scale, the values
// decode(code) * scale and the trust mask (1: the gradient passes), each as the CPU computes them.
struct QuestArgs {
  Format elem;
  CastOptions cast;     // saturating to the element's largest finite value
  uint64_t seed = 0;    // stochastic rounding: element i of the tensor draws RandomBitsForElement(seed, i)
  double ratio = 0;     // alpha / elem max, in double as QuestQuantize forms it
  float emax = 0;       // the element format's largest finite value
  int group = 32;
  bool rms = false;     // QuestStat::kRms, else kStd
  int scale_rounding = 0;  // QuestScaleRounding: 0 floor, 1 nearest, 2 exact
  const float* decode = nullptr;  // [256] each code's FP32 value (device memory)
};
void LaunchQuest(const float* x, size_t rows, size_t cols, const QuestArgs& a, uint8_t* codes, float* scales,
                 float* dequant, uint8_t* mask, void* stream);
// Quartet's backward quantizer (qmx::QuantizeQuartetBackward) on rows x cols (cols a multiple of 32): E2M1
// codes and each block's X; the GEMM operand's tensor scale is four_thirds.
struct QuartetSrArgs {
  CastOptions cast;  // E2M1, stochastic, saturating
  uint64_t seed = 0;
  int rule = 0;      // the UE8M0 rule (ScaleRule) and E2M1's limits, as Ue8m0ScaleFromAmax takes them
  float destmax = 6.0f;
  int emax = 2, man_bits = 1;
  float four_thirds = 0;
};
void LaunchQuartetSr(const float* x, size_t rows, size_t cols, const QuartetSrArgs& a, uint8_t* codes, float* scales,
                     void* stream);
// x[i] = 0 where mask[i] is 0 (Quartet's backward: the QuEST trust mask on the GEMM output).
void LaunchMask(float* x, const uint8_t* mask, size_t count, void* stream);

// Tensor operations (engine_ops.cu), each queued on `stream` without waiting.
// acc[i] = acc[i] + part[i] in FP32 (scaled_mm_core.h's AddF32): the split-K partial sums in split order.
void LaunchAddF32(float* acc, const float* part, size_t count, void* stream);
// out (m x n: FP32 bits, or BF16 / FP16 codes as uint16) = ScaledMmOutput of each accumulator, with row i's and
// column j's scales (sa[0] and sb[0] when e.rowwise is false) and bias[j].
void LaunchScaledMmEpilogue(const float* acc, size_t m, size_t n, const float* sa, const float* sb,
                            const uint16_t* bias, const qmx::detail::ScaledMmEpilogue& e, void* out, void* stream);
// lanes[c * 8 + l] = lane l of chunk c (chunks of `chunk` elements): element i of a chunk into lane i % 8, in order
// (qmx::detail::AddElement, kErrorLanes lanes).
void LaunchErrorLanes(const float* ref, const float* out, size_t n, size_t chunk, ErrorStats* lanes, void* stream);

}  // namespace qmx::gpu::detail
