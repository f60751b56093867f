// qmx/scale.h: how a block's (or a tensor's) scale is chosen from its largest magnitude
// (docs/REFERENCES.md section 3: OCP MX v1.0 6.3, MXFP8 recipes algorithm 1 / appendix A.1, torchao CEIL/EVEN,
// P3109 max-finite, NVFP4's E4M3 block scale under an FP32 tensor scale, per-tensor FP8 scaling).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qmx/cast_options.h"
#include "qmx/format.h"

namespace qmx {

// The rule that turns amax into a scale. The rule fixes the scale's format (ScaleFormatOf).
enum class ScaleRule : uint8_t {
  // UE8M0 power-of-two scales X = 2^k; elements store V_i / X, taken exactly.
  kOcpFloor,   // "round-down": k = floor(log2 amax) - emax_elem (OCP MX v1.0 6.3, microxcaling, torchao FLOOR)
  kRoundUp,    // "rceil": X = amax / destmax (one FP32 division) rounded up to a power of two, k >= -127
               // (MXFP8 recipes algorithm 1; cvt.rp.satfinite.ue8m0x2.f32; torchao RCEIL; Transformer Engine)
  kCeil,       // torchao CEIL: the floor rule, plus one when amax's FP32 mantissa is nonzero
  kEven,       // torchao EVEN: amax rounded at the element's mantissa width (add half an element ulp
               // in FP32 bit space), then the floor rule
  kMaxFinite,  // P3109 ConvertToBlockMaxAbsFinite: the floor rule on the largest FINITE magnitude;
               // non-finite elements never set the scale (implies NanPolicy::kIgnore)
  // FP32 scales: the encode factor s = destmax / amax is applied by an FP32 multiply; the stored
  // (decode) scale is 1/s in FP32, as Transformer Engine stores scale_inv.
  kFp32,       // s exactly as computed
  kFp32Pow2,   // s floored to a power of two by clearing its mantissa bits (TE force_pow_2_scales)
  // NVFP4: E4M3 block scales under an FP32 tensor scale, Transformer Engine's order of operations.
  kNvfp4,     // "nvfp4": Transformer Engine's kernel order (below)
  kNvfp4Div,  // "nvfp4-div": the divide-first order of TE's older reference (below)
  kNvfp4Torchao,  // "nvfp4-torchao": torchao's nvfp4_quantize (below)
  kNvfp4TorchaoCuda,  // "nvfp4-torchao-cuda": the same on CUDA tensors (below)
  kNvfp4FourOverSix,     // "nvfp4-4over6": Transformer Engine's 4over6, MAE (below)
  kNvfp4FourOverSixMse,  // "nvfp4-4over6-mse": the same with MSE
  // Tenstorrent's block floating point ("bfp": BFP8_b, BFP4_b, BFP2_b as tt-metal's host packer makes them):
  // the scale byte is the block's largest FP32 exponent field (0 for zeros and subnormals, 255 for Inf and
  // NaN), the value 2^(byte - 127); each element a sign and a magnitude of w bits (e1m6 / e1m2 / e1m0, bias 1)
  // from its significand shifted by the exponent difference, then rounded (docs/numerics.md).
  kBfp,
};

// The block scales' storage. kCode: one code of another format of 8 bits or fewer (GEMM operands only:
// GemmOperand::scale_code names it; the quantizers store the first three).
enum class ScaleFormat : uint8_t { kUe8m0, kE4m3, kFp32, kCode };

// What a block holding a NaN or an Inf gets (docs/REFERENCES.md section 3: every library differs).
enum class NanPolicy : uint8_t {
  kBlockNan,  // "block-nan": scale NaN (0xFF / E4M3 NaN / FP32 NaN), every element the element NaN code
              // (0 where the element format has none): the whole block decodes to NaN (OCP MX, microxcaling)
  kScaleNan,  // "scale-nan": scale 0xFF; elements are converted as if the scale were 1 (torchao: the
              // block decodes to NaN through the scale whatever the codes hold)
  kTe,        // "te": Transformer Engine's float_to_e8m0 on a NaN-propagating amax: NaN -> scale 0xFF
              // (every element the NaN code), else Inf -> 0xFE with the elements converted against it
  kIgnoreNan, // "ignore-nan": NaN elements never set the scale (Transformer Engine's fmaxf amax), an Inf
              // gives 0xFE; every element converted against the scale
  kIgnore,    // "ignore": the scale comes from the finite elements only; each non-finite element is
              // converted on its own under the cast options (P3109)
};

const char* ScaleRuleName(ScaleRule r);  // "ocp-floor", "round-up", "ceil", "even", "max-finite", "fp32", "fp32-pow2", "nvfp4", "nvfp4-div"
ScaleRule ParseScaleRule(const std::string& s);  // also "floor", "round-down", "rceil"
std::vector<ScaleRule> AllScaleRules();
ScaleFormat ScaleFormatOf(ScaleRule r);
const char* ScaleFormatName(ScaleFormat f);  // "ue8m0", "e4m3", "fp32"
ScaleFormat ParseScaleFormat(const std::string& s);  // ScaleFormatName's names; qmx::Error listing them
size_t ScaleBytes(ScaleFormat f);            // 1, 1, 4
bool IsPow2Rule(ScaleRule r);                // the UE8M0 (MX) rules; not bfp, whose byte is an exponent too
const char* NanPolicyName(NanPolicy p);      // "block-nan", "scale-nan", "te", "ignore-nan", "ignore"
NanPolicy ParseNanPolicy(const std::string& s);

// How a block's amax is reduced when a kernel writes the max as a comparison instead of a NaN-propagating
// max or fmaxf (which drops NaN): `a > b ? a : b` and std::max keep or drop a NaN operand by its side, so
// whether the block's amax comes out NaN, and which elements it covers, depends on where the NaN sits. Over
// the block's magnitudes m_i in element order (row-major in a 2-D block; flushed subnormals are 0):
enum class AmaxOrder : uint8_t {
  kAny,        // "any": the NaN policy's own amax, which no order changes (the default)
  kFoldLast,   // "fold-last": r = 0, then r = r > m_i ? r : m_i (std::max(m_i, r)): a NaN is taken and the next
               // element replaces it; r is the max of the elements after the last NaN, NaN when the last is NaN
  kFoldFirst,  // "fold-first": r = m_0, then r = r < m_i ? m_i : r (std::max(r, m_i)): NaN exactly when m_0 is
               // NaN; a NaN elsewhere is dropped
  kTreeGt,     // "tree-gt": a halving tree over the block's length rounded up to a power of two (missing lanes
               // +0), v_i = v_i > v_(i+h) ? v_i : v_(i+h) for h = w/2 .. 1 (a warp's __shfl_xor_sync butterfly from
               // the top offset down, as lane 0 sees it): a NaN on the right survives its level, on the left it is
               // dropped
  kTreeLt,     // "tree-lt": the same tree with v_i = v_i < v_(i+h) ? v_(i+h) : v_i (std::max(v_i, v_(i+h))): a NaN on
               // the left survives its level, on the right it is dropped
};
const char* AmaxOrderName(AmaxOrder o);  // "any", "fold-last", "fold-first", "tree-gt", "tree-lt"
AmaxOrder ParseAmaxOrder(const std::string& s);
std::vector<AmaxOrder> AllAmaxOrders();
inline bool IsTreeOrder(AmaxOrder o) { return o == AmaxOrder::kTreeGt || o == AmaxOrder::kTreeLt; }
// The reduced amax r of n magnitudes m (NaN for a NaN element, +Inf for an infinite one) under a comparison
// order (not kAny), the tree over `width` lanes (at least n; rounded up to a power of two). The block then
// holds a NaN for its NaN policy exactly when r is NaN, an Inf when r is Inf, and its scale comes from r.
double OrderedAmax(const double* m, size_t n, size_t width, AmaxOrder order);

// How elements are divided by a UE8M0 scale X = 2^k.
enum class ElementScaling : uint8_t {
  kExact,  // "exact": V_i / X exactly (OCP MX 6.3), never rounded before the element conversion
  kFp32,   // "fp32": fl32(x * 2^-k) in FP32 (torchao's multiply by the exact reciprocal, microxcaling's
           // division by 2^k); differs from exact only when the product leaves FP32's normal range
  kTeRcp,  // "te-rcp": fl32(x * r) with Transformer Engine's exp2f_rcp r: byte 0 -> 1.0 (not 2^127),
           // otherwise the FP32 bits (254 - byte) << 23 (byte 254 -> +0.0); a NaN product is the GPU's
           // canonical +NaN 0x7FFFFFFF (Inf x 0, NaN elements), as the GPU kernel's FMUL gives it. This is
           // TE's exp2f_rcp before 2026-02-05 (commit 71971e33d); TE since gives 2^(127 - byte) for every
           // byte below 255, which is "fp32".
};
const char* ElementScalingName(ElementScaling e);  // "exact", "fp32", "te-rcp"
ElementScaling ParseElementScaling(const std::string& s);

// ----------------------------------------------------------------- UE8M0 block scales
// The scale byte (X = 2^(byte - 127)) for a finite amax >= 0 under a UE8M0 rule (the fast bit-level
// implementation; scale_ref.cc holds an independent one). amax = 0 gives 0x00 (2^-127) under every
// rule; exponents are clamped to [-127, 127], never producing an FP32-subnormal scale artefact.
uint8_t Ue8m0ScaleFromAmax(float amax, const Format& elem, ScaleRule rule);
uint8_t Ue8m0ScaleFromAmaxRef(double amax, const Format& elem, ScaleRule rule);

// ----------------------------------------------------------------- FP32 scales
struct Fp32Scale {
  float encode;  // the elements are rounded from fl32(x * encode)
  float decode;  // stored: fl32(1 / encode); dequantization multiplies by it
};
// Transformer Engine's compute_scale_from_amax: s = destmax / amax (then / 2^margin); amax = 0 or a
// non-finite amax keep `fallback` (1 for a fresh tensor, the previous scale in delayed scaling); an
// infinite s becomes FLT_MAX; pow2 clears s's mantissa bits.
Fp32Scale Fp32ScaleFromAmax(float amax, float destmax, bool pow2, int margin = 0, float fallback = 1.0f);
// out[i] = Fp32ScaleFromAmax(amax[i], destmax, pow2, margin) for n block maxima (fallback 1), in one call
// (the blockwise quantizers' scales, a piece of blocks at a time).
void Fp32ScalesFromAmaxes(const float* amax, size_t n, float destmax, bool pow2, int margin, Fp32Scale* out);

// ----------------------------------------------------------------- NVFP4
// Two named orders of operations (docs/REFERENCES.md section 3; both read from Transformer Engine).
// nvfp4 (TE's CUDA kernels, core_nvfp4.cuh, and its current Python reference):
//   S_enc = min(fl32(2688 / tensor_amax), FLT_MAX), 1 when tensor_amax is 0 or S_enc is 0 (amax = Inf);
//   S_dec = fl32(1 / S_enc);
//   block scale s8 = e4m3_rne_satfinite(fl32(block_amax * fl32(S_enc * fl32(1/6))));
//   element multiplier = min(fl32(1 / fl32(decode(s8) * S_dec)), FLT_MAX); element = e2m1(fl32(x * mult)).
// nvfp4-div (TE's older Python reference and its C++ 2D test):
//   s8 = e4m3_rne_satfinite(fl32(fl32(block_amax / 6) * S_enc));
//   element multiplier = s8 == 0 ? 0 : min(fl32(S_enc / decode(s8)), FLT_MAX).
// nvfp4-torchao (torchao/prototype/mx_formats/nvfp4_tensor.py nvfp4_quantize with a per-tensor scale, 0.17+):
//   tensor scale s_g = fl32(tensor_amax / 2688) (torchao's per_tensor_scale, a decode factor; 1 where the
//   amax is 0 or not finite, where torchao itself gives NaN scales);
//   s8 = e4m3_rne(clamp(fl32(fl32(block_amax / 6) / s_g), 2^-6, 448)) (never subnormal or zero);
//   element multiplier = fl32(fl32(1 / s_g) / decode(s8)); dequantization fl32(code * fl32(s_g * decode(s8))).
// nvfp4-torchao-cuda (the same code on CUDA tensors, where PyTorch divides a tensor by a Python scalar as a
// multiply by the scalar's FP32 reciprocal, div_true_kernel_cuda): s_g = fl32(tensor_amax * fl32(1/2688)),
//   s8 = e4m3_rne(clamp(fl32(fl32(block_amax * fl32(1/6)) / s_g), 2^-6, 448)); the rest as nvfp4-torchao.
// nvfp4-4over6 / nvfp4-4over6-mse (TE's NVTE_NVFP4_4OVER6 with its default E4M3 bound 256; reference_nvfp4.py
// _quantize_blockwise_4over6_reference, 1x16 blocks, the input-domain error):
//   S_enc = min(fl32(1536 / tensor_amax), FLT_MAX), 1 for amax 0; S_dec = fl32(1 / S_enc);
//   base = fl32(fl32(block_amax / 6) * S_enc); map-to-4 s4 = e4m3(fl32(base * 1.5)), map-to-6 s6 = e4m3(base);
//   each candidate's elements e2m1(fl32(x * min(fl32(1 / fl32(decode(s) * S_dec)), FLT_MAX))) and its error
//   in element order, err = fl32(err + |d|) (MSE: fl32(err + fl32(d * d))), d = fl32(fl32(fl32(fl32(q * s) *
//   tensor_amax) / 1536) - x); map-to-4 when its error is smaller (a tie keeps map-to-6). Dequantization
//   fl32(code * fl32(fl32(s8 * tensor_amax) * fl32(1/1536))), TE's with 6 * 256 for 6 * 448.
// fminf semantics are kept: a NaN operand yields the other operand.
float Nvfp4TensorEncodeScale(float tensor_amax);
bool IsNvfp4FourOverSix(ScaleRule rule);
// The order in which 4over6 sums a block's 16 error terms t_i (|d| or fl32(d * d)) in FP32. The reference
// sums in element order; a GPU kernel that gives each element a lane reduces across lanes, and where two
// candidates' errors are within a rounding of each other the order picks the block's scale.
enum class ErrorOrder : uint8_t {
  kSeq,     // "seq": err = fl32(err + t_i) for i = 0..15 (TE's Python reference)
  kSeqFma,  // "seq-fma": as seq, the MSE terms contracted: err = fmaf(d, d, err) (a compiler's FMA contraction)
  kXor16,   // "xor16": a warp butterfly over 16 lanes, t_i = fl32(t_i + t_(i xor o)) for o = 8, 4, 2, 1; lane 0's
            // sum, ((t0 + t8) + (t4 + t12)) + ((t2 + t10) + (t6 + t14)) + ... (__shfl_xor_sync from 8 down)
  kPairs16, // "pairs16": a pairwise tree of neighbours, o = 1, 2, 4, 8: ((t0 + t1) + (t2 + t3)) + ... (a shuffle-down
            // or shared-memory tree from stride 1 up)
};
const char* ErrorOrderName(ErrorOrder o);  // "seq", "seq-fma", "xor16", "pairs16"
ErrorOrder ParseErrorOrder(const std::string& s);
std::vector<ErrorOrder> AllErrorOrders();
// One 4over6 block of n <= 16 finite elements x: its E4M3 scale byte, and its element codes under `cast` into
// codes; the candidates' errors summed in `order` (missing lanes of a short block add +0).
uint8_t Nvfp4FourOverSixBlock(const float* x, size_t n, float block_amax, float s_enc, float tensor_amax, ScaleRule rule,
                              const CastOptions& cast, uint8_t* codes, ErrorOrder order = ErrorOrder::kSeq);
// The tensor-level factor the block functions take: S_enc for nvfp4 and nvfp4-div, s_g for the torchao rules.
bool IsNvfp4Torchao(ScaleRule rule);  // nvfp4-torchao or nvfp4-torchao-cuda
float Nvfp4TensorScale(float tensor_amax, ScaleRule rule);
// The second-level decode factor a QuantizedTensor keeps (tensor_decode): fl32(1 / S_enc), or s_g.
float Nvfp4TensorDecode(float tensor_scale, ScaleRule rule);
uint8_t Nvfp4BlockScale(float block_amax, float s_enc, ScaleRule rule);
float Nvfp4EncodeFactor(uint8_t block_scale, float s_enc, ScaleRule rule);
// out[b] = Nvfp4EncodeFactor(b, s_enc, rule) for the 128 block-scale bytes b < 128, in one call.
void Nvfp4EncodeFactors(float s_enc, ScaleRule rule, float* out);
// TE's dequantization (dequantize_nvfp4.cuh): value = fl32(decode(code) * fl32(fl32(decode(s8) * tensor_amax)
// * fl32(1/2688))); under the torchao rules fl32(s_g * decode(s8)).
float Nvfp4DecodeScale(uint8_t block_scale, float tensor_amax, ScaleRule rule = ScaleRule::kNvfp4);

// How a dequantizer meets NVFP4's two scales (peers differ; docs/quantize.md "Dequantization orders"), with
// s the E4M3 block scale in FP32, amax the tensor's (or line's) and D = 6 x the E4M3 bound (2688; 1536 for
// 4over6). Each form ends fl32(q x scale), exact but for that one rounding.
//  kByRule      the rule's own: kTe for the nvfp4 rules, torchao's g = amax / D (1 where not positive) for
//               nvfp4-torchao, fl32(amax * fl32(1 / D)) for nvfp4-torchao-cuda (Nvfp4DecodeScale);
//  kTe          fl32(fl32(s x amax) x fl32(1 / D)): Transformer Engine's dequantize_fp4_kernel;
//  kGlobalDiv   fl32(s x fl32(amax / D)): torchao on the CPU, TE's JAX dequantizer, vLLM's emulation (a
//               checkpoint's global decode scale);
//  kGlobalRecip fl32(s x fl32(amax x fl32(1 / D))): torchao on CUDA (PyTorch divides a tensor by a scalar as
//               a multiply by its reciprocal).
enum class DequantOrder : uint8_t { kByRule, kTe, kGlobalDiv, kGlobalRecip };
DequantOrder ParseDequantOrder(const std::string& s);  // "rule", "te", "global-div", "global-recip"
const char* DequantOrderName(DequantOrder o);
std::vector<std::string> DequantOrderNames();
float Nvfp4DecodeScale(uint8_t block_scale, float tensor_amax, ScaleRule rule, DequantOrder order);
// The same two with the block scales in another code format (QuantSpec::scale_format) and elements of another
// largest value elem_max (QuantSpec::elem): D = elem_max x the scale format's largest value for 2688 = 6 x 448,
// the format's values for E4M3's; with fmt::kE4M3 and 6 they are the functions above.
float Nvfp4TensorScale(float tensor_amax, ScaleRule rule, const Format& scale_format, float elem_max = 6.0f);
float Nvfp4DecodeScale(uint8_t block_scale, float tensor_amax, ScaleRule rule, DequantOrder order,
                       const Format& scale_format, float elem_max = 6.0f);

// ----------------------------------------------------------------- per-tensor delayed scaling
enum class AmaxAlgo : uint8_t { kMax, kMostRecent };
AmaxAlgo ParseAmaxAlgo(const std::string& s);  // "max", "most-recent"; throws qmx::Error naming --amax-algo
// Transformer Engine's delayed scaling as a training loop drives it: a tensor is quantized with the
// current scale, then its amax is pushed into the history (length `history_len`, newest first) and the
// scale is recomputed from max(history) (or the newest entry) with the margin. Before any history the
// scale is 1.
class DelayedScaling {
 public:
  DelayedScaling(const Format& elem, int history_len = 1024, int margin = 0, AmaxAlgo algo = AmaxAlgo::kMax,
                 bool pow2 = false);
  Fp32Scale scale() const { return scale_; }
  // Records the amax of the tensor just quantized and updates the scale for the next one.
  void Push(float amax);
  const std::vector<float>& history() const { return history_; }  // newest first
  const Format& elem() const { return elem_; }

 private:
  Format elem_;
  int margin_;
  AmaxAlgo algo_;
  bool pow2_;
  std::vector<float> history_;
  Fp32Scale scale_{1.0f, 1.0f};
};

}  // namespace qmx
