// qmx/mx.h: MX block quantization (OCP MX v1.0 sections 5 and 6.3): blocks of consecutive elements share
// one UE8M0 power-of-two scale X chosen from the block's largest magnitude; element i stores
// Quantize(V_i / X), with V_i / X taken exactly (no intermediate FP32 rounding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "qmx/cast_options.h"
#include "qmx/convert.h"
#include "qmx/format.h"
#include "qmx/io.h"
#include "qmx/scale.h"

namespace qmx {

// An MX block format: element format + UE8M0 scale + block length, how elements are rounded, what a
// block holding NaN or Inf gets (NanPolicy; the default block-nan gives scale 0xFF and every element the
// element NaN code, code 0 where the format has none) and how elements are divided by the scale.
// Blocks are runs of `block` consecutive elements; the last block of a tensor may be shorter.
struct MxSpec {
  Format elem = fmt::kE4M3;
  ScaleRule rule = ScaleRule::kRoundUp;
  CastOptions cast{};
  int block = 32;
  NanPolicy nan = NanPolicy::kBlockNan;
  ElementScaling scaling = ElementScaling::kExact;
  // A comparison reduction's block amax (qmx/scale.h AmaxOrder): the block holds a NaN or an Inf for `nan`
  // (block-nan, scale-nan or te) exactly when the reduced amax is one. Runs on the scalar reference.
  AmaxOrder amax_order = AmaxOrder::kAny;
  // The scales' code format: UE8M0 (OCP MX), or any float format of 8 bits or fewer with a mantissa (E4M3, as
  // an NVFP4 tensor core reads its scales; AMD gfx1250's UE5M3; ...). The rule's power of two 2^k is clamped
  // to the powers of two the format holds, elements are divided by the clamped one, and the scale is stored as
  // that format's code of it (a NaN scale as the format's NaN code). Formats other than UE8M0 run on the
  // scalar reference.
  Format scale_format = fmt::kUE8M0;
};
// The powers of two 2^lo ... 2^hi that a scale format holds, within UE8M0's [2^-127, 2^127].
struct MxScaleRange {
  int lo = -127, hi = 127;
};
MxScaleRange MxScaleRangeOf(const Format& scale_format);
// A scale code of an MX spec's scale format as its value (UE8M0: 2^(code - 127), NaN for 0xFF; every NaN
// code as the same quiet NaN).
double MxScaleValue(const Format& scale_format, uint8_t code);
// Throws qmx::Error naming the problem (element format not fast-capable, a rule that is not a UE8M0
// rule, max-finite without the ignore policy, block length out of 1..2^30, flushing subnormals with
// FP32 element scaling, an amax order under a NaN-ignoring policy, cast options the element format cannot honour).
void ValidateMxSpec(const MxSpec& spec);
inline size_t MxScaleCount(size_t n, const MxSpec& spec) { return (n + spec.block - 1) / spec.block; }

// src (n elements) -> codes (n bytes) and scales (MxScaleCount bytes). Fast path (SIMD + OpenMP over
// blocks) and the scalar reference; they are equal bit for bit.
void QuantizeMx(DType src_type, const void* src, size_t n, const MxSpec& spec, uint8_t* codes, uint8_t* scales,
                const SrSource& sr = {}, Exec exec = Exec::kSequential);
void QuantizeMxRef(DType src_type, const void* src, size_t n, const MxSpec& spec, uint8_t* codes,
                   uint8_t* scales, const SrSource& sr = {});

// codes + scales -> FP32 values decode(code) * 2^(scale - 127), exact unless it overflows FP32; a NaN
// scale makes the whole block NaN.
void DequantizeMx(const uint8_t* codes, const uint8_t* scales, size_t n, const MxSpec& spec, float* out,
                  Exec exec = Exec::kSequential);
void DequantizeMxRef(const uint8_t* codes, const uint8_t* scales, size_t n, const MxSpec& spec, float* out);

}  // namespace qmx
