// quantize_internal.h (internal): pieces shared by the fast quantizer (quantize.cc) and its reference
// (quantize_ref.cc) that are definitions rather than fast paths: reading a source element, the
// tensor amax, the FP32 / NVFP4 block scale of a block amax, and where a scale is stored.
#pragma once

#include <cstdint>

#include "qmx/mx.h"
#include "qmx/quantize.h"

namespace qmx::detail {

QuantizedTensor MakeShell(const TensorView& x, const QuantSpec& spec);  // validated, sized, zeroed
float TensorAmax(const TensorView& x, NanPolicy policy);

struct MultiplyScale {
  uint32_t stored;   // E4M3 byte or FP32 bits of the decode scale
  float multiplier;  // elements are fl32(x * multiplier)
  bool nan_block;    // block-nan: scale NaN, every element the element NaN code
};
// block_amax: of the finite elements (ignore, block-nan) or with Inf as HUGE_VALF (ignore-nan).
MultiplyScale BlockMultiplyScale(const QuantSpec& spec, float block_amax, bool has_nan, bool has_inf, float s_enc);
void StoreScale(const QuantSpec& spec, uint8_t* scales, size_t index, uint32_t stored, bool nan_block);
uint8_t BlockNanCode(const Format& elem);
MxSpec MxSpecOf(const QuantSpec& spec, size_t block);  // the MX kernel's view of a UE8M0 spec

}  // namespace qmx::detail
