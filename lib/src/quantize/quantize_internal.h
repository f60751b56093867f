// quantize_internal.h (internal): pieces shared by the fast quantizer (quantize.cc) and its reference
// (quantize_ref.cc) that are definitions rather than fast paths: reading a source element, the
// tensor amax, the FP32 / NVFP4 block scale of a block amax, and where a scale is stored.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "qmx/mx.h"
#include "qmx/quantize.h"
#include "quantize/mx_kernels.h"
#include "scale/scale_core.h"  // MultiplyScale

namespace qmx::detail {

// "a, b, c": the names a message lists (unknown recipe, profile or spec option).
std::string JoinNames(const std::vector<std::string>& names);

// Validated and sized; the scales zeroed, the codes zeroed too unless `zero_codes` is false (the fast path,
// whose every route writes each code: see CodeVector in qmx/quantize.h). host_buffers false leaves codes and
// scales empty (the sizes still set): the GPU engine's callers hold them in device memory, and zeroing a
// host copy of the scales took as long as the quantization kernel itself.
QuantizedTensor MakeShell(const TensorView& x, const QuantSpec& spec, bool zero_codes = true, bool host_buffers = true);
// Validates the spec and that a row-scaled tensor holds one amax per line (and no other tensor any).
void CheckLineAmax(const QuantizedTensor& q);
// Refuses a comparison amax order (not AmaxOrder::kAny) under a NaN policy that never sees a NaN amax
// (ignore-nan, ignore): those policies drop NaN elements before any order could keep one.
void CheckAmaxOrder(AmaxOrder order, NanPolicy nan);
// Refuses an NVFP4 dequantization order (DequantOrder other than kByRule) for tensors of other scale rules.
void CheckDequantOrder(const QuantizedTensor& q, DequantOrder order);
// Dequantize's flush-to-zero (ftz): a magnitude below FP32's smallest normal, 2^-126, read or written as a
// zero of its sign; x itself otherwise (and always when ftz is false).
inline double FlushSubnormal(double x, bool ftz) {
  return ftz && x != 0 && std::fabs(x) < 0x1p-126 ? std::copysign(0.0, x) : x;
}
// Each of the 256 byte values' element value in FP32 (DecodeTableF32 of the code the byte's low bits hold).
std::vector<float> CodeTable(const Format& elem);
// Tenstorrent's block floating point (ScaleRule::kBfp, bfp.cc). w: the element's magnitude bits (7, 3 or 1:
// BFP8_b, BFP4_b, BFP2_b; elem e1m6 / e1m2 / e1m0 bias 1, sign-magnitude fixed point m / 2^(w-1)).
int BfpMagnitudeBits(const Format& elem);
// tt-metal's host packer on one FP32 pattern under the block's shared exponent field (the largest of the
// block's): the significand with its hidden bit shifted right by the exponent difference (truncating), then
// rounded to w bits to nearest even on the bits left (truncate: toward zero), saturated, the sign dropped
// from a zero magnitude; FP32 zeros and subnormals give 0.
uint8_t BfpElementCode(uint32_t bits, uint32_t shared_exp, int w, bool truncate);
// tt-metal's host unpacker: sign, the magnitude normalised (its shift count s), the exponent field
// shared_exp - s written as it is (0: read as an FP32 subnormal; 255: Inf or NaN), +0 where s > shared_exp.
float BfpDecode(uint8_t code, uint32_t shared_exp, int w);
QuantizedTensor QuantizeBfp(const TensorView& x, const QuantSpec& spec);
float TensorAmax(const TensorView& x, NanPolicy policy);  // one element at a time (the reference's)
float TensorAmaxFast(const TensorView& x, NanPolicy policy, Exec exec);  // the same value, SIMD and threads
bool TensorAmaxKeepsInf(NanPolicy policy);  // whether TensorAmax counts Inf (it always skips NaN)

// block_amax: of the finite elements (ignore, block-nan) or with Inf as HUGE_VALF (ignore-nan).
// destmax: Limits(spec.elem).max_finite as a float (callers compute it once).
MultiplyScale BlockMultiplyScale(const QuantSpec& spec, float destmax, float block_amax, bool has_nan, bool has_inf, float s_enc);
void StoreScale(const QuantSpec& spec, uint8_t* scales, size_t index, uint32_t stored, bool nan_block);
uint8_t BlockNanCode(const Format& elem);
MxSpec MxSpecOf(const QuantSpec& spec, size_t block);  // the MX kernel's view of a UE8M0 spec
// The block kernel (quantize/mx_simd.cc) over n elements in blocks of args.block, OpenMP over runs of
// kBlocksPerRun whole blocks under Exec::kParallel (mx.cc).
constexpr size_t kBlocksPerRun = 2048;
// Outputs of at least this many codes (bytes) are stored non-temporally (MxKernelArgs::stream): their
// source is two (BF16, FP16) or four (FP32) times as large, beyond any cache, and every line of codes is
// written whole.
constexpr size_t kStreamCodes = size_t{8} << 20;
void RunBlockKernel(const simd::MxKernelArgs& args, DType src_type, const void* src, size_t n, uint8_t* codes,
                    uint8_t* scales, const SrSource& sr, Exec exec);

}  // namespace qmx::detail
