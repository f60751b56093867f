// convert_params.h (internal): a format and its CastOptions flattened into the constants the SIMD
// conversion kernel broadcasts. Built once per call by MakeConvertParams (convert.cc), read by
// convert_simd.cc. The kernel's arithmetic is described there.
#pragma once

#include <cstdint>

#include "qmx/cast_options.h"
#include "qmx/format.h"
#include "qmx/io.h"

namespace qmx::simd {

enum class Kind : uint32_t { kFloat = 0, kInt = 1 };

struct ConvertParams {
  Kind kind;
  Rounding rounding;
  int32_t emin127;   // FP32-biased exponent of dst's smallest normal binade (kInt: 1 << 20, never reached)
  int32_t sbase;     // discarded bits s = max(En, emin127) - Ee + sbase (En/Ee: scaled biased exponents)
  int32_t man_bits;  // dst mantissa bits (kInt: 0, the magnitude is the count of quanta)
  uint32_t adj;      // 1 where the first normal binade has exponent field 0 (ue8m0), else 0
  int32_t big_e;     // scaled biased exponents at or above this surely overflow (kInt only)
  uint32_t max_code;       // largest positive finite code
  uint32_t sign_bit;       // 0 for unsigned and kInt formats
  uint32_t has_neg_zero;   // all-ones when -0 has a code
  uint32_t flush_out;      // all-ones when subnormal results become zero
  uint32_t min_normal_mag; // 1 << man_bits
  uint32_t flush_below;    // |x| bits below this read as zero (0: no input flushing)
  uint32_t is_unsigned;    // all-ones for unsigned formats: negative nonzero inputs are invalid
  uint32_t int_mask;       // kInt: code mask for two's complement
  uint32_t nan_code[2];    // NaN input -> code, [positive, negative]
  uint32_t inf_code[2];    // Inf input -> code
  uint32_t ovf_code[2];    // finite overflow -> code
  uint32_t invalid_code;   // negative nonzero into an unsigned format
  uint32_t sr_bits;        // N
  uint32_t sr_mask;        // 2^N - 1
};

ConvertParams MakeConvertParams(const Format& dst, const CastOptions& opt, DType src);

// Kernels (dynamic dispatch; simd/convert_simd.cc).
void ConvertCodes(const ConvertParams& p, DType src, const void* in, size_t n, uint8_t* out, uint64_t seed,
                  uint64_t first_index, const uint32_t* rbits);
void DecodeCodes(const float* table, const uint8_t* codes, size_t n, float* out);
// MX: per block amax -> scale byte (by the scalar rule function) -> elements.
struct MxKernelArgs {
  const ConvertParams* p;
  int block;
  int rule;          // ScaleRule (a UE8M0 rule)
  float destmax;     // largest finite element value
  int emax;          // exponent of the largest element binade
  int elem_man;      // element mantissa bits (the EVEN rule rounds amax there)
  int policy;        // NanPolicy
  int scaling;       // ElementScaling: 0 exact V/X, 1 fl32(x * 2^-k), 2 Transformer Engine's exp2f_rcp
  uint32_t elem_nan; // element code written in a NaN block (block-nan)
};
void QuantizeMxBlocks(const MxKernelArgs& a, DType src, const void* in, size_t n, uint8_t* codes,
                      uint8_t* scales, uint64_t seed, uint64_t first_index, const uint32_t* rbits);
void DequantizeMxBlocks(const float* table, int block, const uint8_t* codes, const uint8_t* scales, size_t n,
                        float* out);

}  // namespace qmx::simd

namespace qmx::simd {

// The UE8M0 scale rules on the bits of amax (finite, >= 0), as one inline function shared by every target
// and the scalar entry point (scale_ref.cc computes them independently, in double).
// rule 0 (ocp-floor) and 4 (max-finite): 2^(floor(log2 amax) - emax); a zero or FP32-subnormal amax uses
//   its true exponent, so it clamps to 2^-127.
// rule 1 (round-up): q = amax / destmax rounded by FP32 division, then the smallest power of two >= q,
//   at least 2^-127, at most 2^127 (cvt.rp.satfinite.ue8m0).
// rule 2 (ceil, torchao): the exponent field of amax, plus one when its mantissa field is nonzero, minus emax.
// rule 3 (even, torchao): amax's bits plus 2^(22 - elem_man), mantissa cleared, then the floor rule; a carry
//   out of FP32's largest binade counts as exponent 128 (torchao would produce a NaN scale there).
// Exponents are clamped to [-127, 127].
inline uint8_t ScaleByteFromAmaxBits(uint32_t amax_bits, int rule, float destmax, int emax, int elem_man) {
  const auto clamp_byte = [](int k) { return static_cast<uint8_t>((k < -127 ? -127 : (k > 127 ? 127 : k)) + 127); };
  if (rule == 1) {
    float amax;
    __builtin_memcpy(&amax, &amax_bits, 4);
    const float q = amax / destmax;
    uint32_t qb;
    __builtin_memcpy(&qb, &q, 4);
    const uint32_t e_field = qb >> 23, mant = qb & 0x7FFFFFu;
    if (e_field == 0) return mant > 0x400000u ? 1 : 0;  // FP32 subnormal q: 2^-127 or 2^-126
    const uint32_t byte = e_field + (mant != 0 ? 1u : 0u);
    return static_cast<uint8_t>(byte > 254 ? 254 : byte);
  }
  if (amax_bits == 0) return 0;
  if (rule == 2) {
    const int e_field = static_cast<int>(amax_bits >> 23);
    return clamp_byte(e_field - 127 + ((amax_bits & 0x7FFFFFu) != 0 ? 1 : 0) - emax);
  }
  if (rule == 3) {
    const uint32_t r = (amax_bits + (1u << (22 - elem_man))) & 0xFF800000u;
    return clamp_byte(static_cast<int>(r >> 23) - 127 - emax);
  }
  const int e_field = static_cast<int>(amax_bits >> 23);
  const int lg = e_field != 0 ? e_field - 127 : (31 - __builtin_clz(amax_bits)) - 149;
  return clamp_byte(lg - emax);
}

}  // namespace qmx::simd
