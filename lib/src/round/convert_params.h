// convert_params.h (internal): a format and its CastOptions flattened into the constants the SIMD
// conversion kernel broadcasts. Built once per call by MakeConvertParams (convert.cc), read by
// convert_simd.cc and the block quantizers (quantize/mx_kernels.h). The kernel's arithmetic is described in convert_tiers-inl.h.
#pragma once

#include <cstdint>

#include "qmx/cast_options.h"
#include "qmx/format.h"
#include "qmx/host_device.h"
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
  uint32_t neg_to_zero;    // all-ones for P3109 unsigned formats: a finite negative that rounds to 0 gives 0,
                           // -Inf its inf_code
  uint32_t int_mask;       // kInt: code mask for two's complement
  uint32_t nan_code[2];    // NaN input -> code, [positive, negative]
  uint32_t inf_code[2];    // Inf input -> code
  uint32_t ovf_code[2];    // finite overflow -> code
  uint32_t invalid_code;   // negative nonzero into an unsigned format
  uint32_t sr_bits;        // N
  uint32_t sr_mask;        // 2^N - 1
};

ConvertParams MakeConvertParams(const Format& dst, const CastOptions& opt, DType src);

// Kernels (dynamic dispatch; round/convert_simd.cc). The block quantizers built on the same parameters are
// quantize/mx_kernels.h's.
void ConvertCodes(const ConvertParams& p, DType src, const void* in, size_t n, uint8_t* out, uint64_t seed,
                  uint64_t first_index, const uint32_t* rbits);
void DecodeCodes(const float* table, const uint8_t* codes, size_t n, float* out);
}  // namespace qmx::simd

namespace qmx::simd {

// The UE8M0 scale rules on the bits of amax, shared by every target, the scalar entry point and the CUDA
// backend (scale_ref.cc computes them independently, in double).
using hd::ScaleByteFromAmaxBits;

}  // namespace qmx::simd
