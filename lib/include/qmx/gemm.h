// qmx/gemm.h: block-scaled GEMM D = A * B (+ C) with FP32 output under a named accumulation model
// (docs/REFERENCES.md section 4: exact OCP/P3109 dot products, IEEE FP32, and the fused-sum models of
// Hopper and Blackwell tensor cores after MMA-Sim).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qmx/convert.h"
#include "qmx/format.h"
#include "qmx/quantize.h"
#include "qmx/scale.h"

namespace qmx {

// One operand: element codes (row-major) and the scales that multiply them. A is M x K, B is K x N.
// Element (r, c) has the value decode(code) * scales[(r / block_rows) * scale_cols + c / block_cols];
// for A the scale blocks run along K as block_cols, for B as block_rows. tensor_scale is a per-tensor
// FP32 factor applied after accumulation, as cuBLAS applies scaleA * scaleB (per-tensor FP8 scales,
// NVFP4's second-level scale).
struct GemmOperand {
  Format elem = fmt::kE4M3;
  size_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;
  ScaleFormat scale_format = ScaleFormat::kFp32;  // what the block scales are (UE8M0 scales are 2^k)
  Format scale_code = fmt::kUE8M0;                // kCode: the scales' format (e.g. ue5m3)
  size_t block_rows = 0, block_cols = 0;          // 0 = no block scales (all 1)
  size_t scale_rows = 0, scale_cols = 0;
  std::vector<float> scales;  // decoded block scales (UE8M0 0xFF -> NaN)
  float tensor_scale = 1.0f;
  // Row-scaled NVFP4: a second-level scale per row of A (M entries) or per column of B (N entries), each
  // applied after accumulation as tensor_scale is (and in its place: tensor_scale stays 1). Empty: none.
  std::vector<float> row_scales, col_scales;
  // NVFP4 operands: Transformer Engine's alpha inputs (AlphaRule::kTe, kTeRef), unused by other rules.
  struct TeAlphaInputs {
    float amax = -1.0f;                   // the tensor's second-level amax; negative = not known
    float bound = 448.0f;                 // the E4M3 bound of the NVFP4 rule: 448, or 256 under 4over6
    std::vector<float> row_amax, col_amax;  // row-scaled: each row's (A) or column's (B) amax, parallel
                                            // to row_scales / col_scales
  };
  TeAlphaInputs te_alpha;
  float ScaleOf(size_t r, size_t c) const {
    return block_rows == 0 ? 1.0f : scales[(r / block_rows) * scale_cols + c / block_cols];
  }
};

// An operand from a quantized tensor: its codes, its block scales wherever they lie (A quantized
// row-wise has its 1xK blocks along K; B (K x N) column-wise), per-tensor FP32 scales and NVFP4's tensor
// scale as tensor_scale, row-scaled NVFP4's line decode scales as row_scales (axis row) or col_scales (axis
// col), and NVFP4's amax and bound (te_alpha) for TE's alpha. Gemm checks that
// A's and B's blocks along K agree.
GemmOperand OperandFromQuantized(const QuantizedTensor& q);
// Plain codes with no scales (tensor_scale 1), checked against the format (codes beyond its width).
GemmOperand OperandFromCodes(Format elem, size_t rows, size_t cols, const uint8_t* codes);

// Sets an operand's block scales (br x bc blocks) from raw scale words, row-major over the scale grid:
// UE8M0 bytes (2^(b - 127), 0xFF NaN), E4M3 bytes read as UE4M3 (sign bit ignored, as cuBLAS reads
// NVFP4 scales) or FP32 bit patterns. raw holds ceil(rows / br) * ceil(cols / bc) words.
void SetBlockScales(GemmOperand& o, ScaleFormat f, size_t br, size_t bc, const uint32_t* raw);
// A block-scale format by name, as `qmx-sim gemm --scale-format`, the C ABI and golden dot files
// take it: "ue8m0", "e4m3" (read as UE4M3, as above), "fp32", or any other format of 8 bits or fewer that
// ParseFormat reads, one code a block decoded exactly (kCode: "ue4m3", NVFP4's scale without its sign, NaN
// 0x7F; "ue5m3", AMD gfx1250's E5M3: bias 15, subnormals, NaN 0xFF). qmx::Error for an unknown name or a
// wider format.
struct BlockScaleFormat {
  ScaleFormat kind = ScaleFormat::kFp32;
  Format code = fmt::kUE8M0;  // kCode's format
  std::string name;           // as given
};
BlockScaleFormat ParseBlockScaleFormat(const std::string& name);
// SetBlockScales for any BlockScaleFormat. kCode scales: each word one code of the format; a code beyond
// its width or of a negative value is refused (qmx::Error naming the block), a NaN code gives a NaN scale.
void SetBlockScales(GemmOperand& o, const BlockScaleFormat& f, size_t br, size_t bc, const uint32_t* raw);

// How products are summed (docs/gemm.md "GEMM accumulation models").
enum class AccumKind : uint8_t {
  kExact,       // exact products and sum, one RNE rounding to FP32 (OCP MX 6.4, P3109)
  kFp32Seq,     // IEEE FP32: acc = fmaf(a_k, b_k, acc) in K order, a_k and b_k the scaled values in FP32
  kBlockExact,  // exact within each scale block along K, then acc = RNE32(acc + block sum * scales)
  kFused,       // fused steps: MMA-Sim's model of tensor cores (FusedParams)
};

// Rounding of the aligned terms and of a fused step's result.
enum class FusedRound : uint8_t { kRz, kRne };

// A tensor core's fused multiply-add step, after MMA-Sim: each step takes `step` products (or exact
// group sums) and the running accumulator, aligns them to the largest exponent, keeps `frac_bits`
// fractional bits of each term (dropping the rest toward zero or rounding to nearest even), sums
// exactly, and rounds the sum to FP32 (`out_round`). The accumulator feeds the next step.
struct FusedParams {
  int step = 32;         // products per fused step (K per instruction)
  int frac_bits = 13;    // F: fractional bits kept below the largest term's leading bit
  FusedRound term_round = FusedRound::kRz;
  FusedRound out_round = FusedRound::kRz;
  int out_bits = 24;     // significant bits of a step's result (24 = FP32; 14 = re-truncated to F bits)
  int group = 1;         // products first summed exactly in groups of this many (Blackwell mxf4nvf4: 16)
  int zero_exp = -1000;  // exponent a zero term takes in the alignment (<= -1000: zeros never set it)
  // MMA-Sim's zero rule instead of zero_exp ("zero-exp=operands"; arXiv 2511.10909, microsoft/MMA-Sim
  // arithmetic.py): a zero element has exponent -126, so a zero product's exponent is -126 plus the other
  // element's plus the scales' (-252 for zero x zero), a zero accumulator's is -126, an all-zero group's is
  // its scales'; a step whose sum is cut to zero gives +0. Runs on the fused kernels without promotion (docs/gemm.md).
  bool zero_operands = false;
  // "split=hmma": how sm_90 runs mma.sync.m16n8k32 with FP8 operands (its SASS: F2FP.F16.E4M3.UNPACK_B,
  // then two HMMA.16816.F32): of each 32 K, the products with k % 4 in {0, 1} form one step of 16 and
  // those with k % 4 in {2, 3} the next. Needs step = 16 and K a multiple of 32.
  bool hmma_split = false;
  // The exponent below which operand values are subnormal in the alignment (0: each format's own). The
  // HMMA steps of split=hmma see FP16 conversions of the FP8 codes, so an E4M3 subnormal (2^-9) is an FP16
  // normal there: -14.
  int operand_emin = 0;
  // Every `promote` K elements (a multiple of step; 0 = never) the tensor-core accumulator, which
  // starts at zero, is added into an FP32 accumulator in IEEE arithmetic, scaled by the block scales
  // when they are applied at promotion (cuBLAS / CUTLASS FP8 without fast accumulation; blockwise
  // FP8 scaling on Hopper).
  int promote = 0;
  // Block scales: true = multiplied into each product (Blackwell block-scaled MMA: scale exponents are
  // added to product exponents); false = applied to the promoted partial sums (Hopper blockwise FP8),
  // which then requires promote to divide the K block.
  bool scale_in_products = false;
  // The accumulator and each step's result in FP16 ("acc=fp16"): the FP16-output mma and wgmma instructions.
  // A step's sum is rounded to `out_bits` (at most 11) with its exponent floored at FP16's -14 (subnormals
  // on FP16's grid) and Inf from 2^16; the accumulator's nominal exponent is floored at -14 too. C must hold
  // FP16 values; the result's values are FP16 values (returned as FP32). No promotion.
  bool acc_fp16 = false;
  // How a promoted partial sum p meets the block scales sa, sb (cuBLAS on H200, gpu/README.md): false:
  // acc = fmaf(p, fl32(sa * sb), acc) (1x128 x 128x128 scales); true: acc = fmaf(fl32(p * sa), sb, acc)
  // (1x128 scales on both sides).
  bool promote_scale_separately = false;
  // AMD CDNA3's FP8 MFMA step ("halves=cdna3"; MMA-Sim's amd_fused_dot_rd_add for FP8 and BF8, arXiv
  // 2511.10909): the step's products in two interleaved halves (even and odd k from the step's start), each
  // summed with its terms cut toward zero to F bits below the half's largest exponent; the two sums floored
  // to F bits below their common largest exponent E and added; that sum floored to 31 fractional bits and
  // C to 24 below max(E, C's exponent), C dropped when its exponent lies more than 25 below; the exact sum
  // rounded to FP32 (out_round). Zero elements take exponent -126 (zero_operands). Portable tiles (docs/gemm.md).
  bool cdna3_halves = false;
};

// How the factor applied after accumulation (alpha) is formed from the operands' second-level scales.
// This is the library's epilogue, not the tensor core's: the same MMA runs under every rule.
enum class AlphaRule : uint8_t {
  kDecode,  // fl32(tensor_scale_a * tensor_scale_b): the decode scales' product (torchao; qmx's default)
  // Transformer Engine's cuBLASLt path (common/recipe/nvfp4.cu, compute_nvfp4_per_tensor_scale_kernel):
  // fl32(fl32(amax_a * amax_b) * fl32(1 / fl32(36 * bound_a * bound_b))), from the operands' te_alpha.amax
  kTe,
  // TE's reference GEMM (pytorch/custom_recipes/reference_nvfp4.py, qgemm): fl32(fl32(amax_a * amax_b) /
  // (36 * bound_a * bound_b)), per row of A / column of B when row-scaled
  kTeRef,
};
const char* AlphaRuleName(AlphaRule r);
AlphaRule ParseAlphaRule(const std::string& s);  // decode, te, te-ref (qmx::Error otherwise)

struct AccumModel {
  std::string name = "exact";
  AccumKind kind = AccumKind::kExact;
  FusedParams fused;  // kFused only
  // kBlockExact: the K one rounding step spans (a multiple of the scale block; 0 = the scale block): each
  // step's products, every block's scales applied, are summed exactly with the accumulator and rounded once
  // to FP32 (RNE). AMD CDNA4's scaled MFMA as modelled from its ISA documentation: one instruction's K.
  size_t exact_step = 0;
  AlphaRule alpha = AlphaRule::kDecode;  // the epilogue's alpha (kTe/kTeRef need both operands' te_alpha.amax)
};

// Named models: exact, fp32-seq, block-exact; hopper-fp8 (fused: 32 products + C, F = 13, terms and
// output RZ to 14 bits, promoted to FP32 every 128 K, block scales at promotion as fma(p, sa * sb):
// cuBLAS without fast accumulation, per-tensor and 1x128 x 128x128 scales), hopper-fp8-fast (no
// promotion: cuBLAS fast accumulation), hopper-fp8-vec (1x128 scales on both sides: fma(p * sa, sb)),
// ada-fp8 (16 products per step), cdna4-mx / cdna4-mx-32x32 (AMD MI350 v_mfma_scale_f32_16x16x128 / 32x32x64
// _f8f6f4 from the ISA documentation alone: block-exact steps of one instruction, 128 / 64 K), cdna3-fp8 (AMD MI300
// v_mfma_f32_*_{fp8,bf8}_{fp8,bf8} on E4M3FNUZ / E5M2FNUZ operands: steps of 16 as FusedParams::cdna3_halves, F = 24,
// RNE to FP32), blackwell-mxf8f6f4 (32 products, F = 25, RZ to FP32, scale exponents added to the products),
// blackwell-mxf4nvf4 (exact groups of 16 scaled, 64 per step, F = 35). "fused:KEY=V,..." sets every FusedParams field
// (keys: step, F, term, out, group, zero-exp, promote, scale; e.g.
// "fused:step=32,F=13,term=rz,out=rz,promote=128,scale=promotion"). Throws qmx::Error listing them.
AccumModel AccumModelByName(const std::string& name);
std::vector<std::string> AccumModelNames();
std::string DescribeModel(const AccumModel& m);  // one line, every parameter
// Throws qmx::Error for inconsistent parameters (step < 1, frac_bits out of 0..60, promote not a
// multiple of step, group not dividing step).
void ValidateAccumModel(const AccumModel& m);

// D (M x N, row-major FP32) = A * B (+ C). c_in (M x N) may be null; it is the accumulator's starting
// value (the MMA's C operand), so it cannot be combined with a tensor_scale other than 1 (cuBLAS's
// epilogue order for that is not modelled: qmx::Error). Throws qmx::Error when K differs, the scale
// blocks along K of A and B differ (a per-tensor side adopts the other's), or the model does not fit
// (promotion at a block scale with a promote interval not dividing the K block). A NaN output is the
// model's canonical NaN, on every CPU: 0x7FFFFFFF under the fused models (NVIDIA's), 0x7FC00000 under exact,
// block-exact and fp32-seq.
std::vector<float> Gemm(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                        Exec exec = Exec::kParallel);
// Gemm into the caller's storage: d (M x N, row-major) receives D, bit for bit Gemm's, without the
// allocation of a result (whose first touch costs a page fault per 4 KiB on some hosts). d may overlap
// c_in (D = A B + C in place: then through a copy). Throws as Gemm does, and qmx::Error for a null d.
void GemmInto(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model, float* d,
              Exec exec = Exec::kParallel);
// The factor Gemm multiplies output (i, j) by after accumulation under `rule` (1 when none applies).
float GemmAlphaAt(const GemmOperand& a, const GemmOperand& b, AlphaRule rule, size_t i, size_t j);
// GemmFusedStepCounts (which path the fused kernel's steps took) is a test hook: qmx/testing.h.

// The scalar reference: one dot product at a time, written to follow the model's definition.
std::vector<float> GemmRef(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model);

}  // namespace qmx
