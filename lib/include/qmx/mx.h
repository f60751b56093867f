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

namespace qmx {

// How a block's UE8M0 scale is chosen from amax = max |V_i| (REFERENCES.md section 3).
enum class ScaleRule : uint8_t {
  kOcpFloor,  // "round-down": X = 2^(floor(log2 amax) - emax_elem), OCP MX v1.0 section 6.3
  kRoundUp,   // X = amax / destmax in FP32, rounded up to a power of two, at least 2^-127 (seed 000
              // algorithm 1 and appendix A.1; what cvt.rp.satfinite.ue8m0x2.f32 does to the quotient)
};
const char* ScaleRuleName(ScaleRule r);  // "ocp-floor", "round-up"
ScaleRule ParseScaleRule(const std::string& s);  // also accepts "floor", "round-down", "rceil"

// UE8M0 scale byte (X = 2^(byte - 127)) for a block whose largest magnitude is amax (finite, >= 0).
// amax = 0 gives 0x00 (2^-127) under both rules. Exponents are clamped to [-127, 127].
uint8_t Ue8m0ScaleFromAmax(float amax, const Format& elem, ScaleRule rule);

// An MX block format: element format + UE8M0 scale + block length, and how elements are rounded.
// Blocks are runs of `block` consecutive elements; the last block of a tensor may be shorter.
// A block holding a NaN or an Inf gets scale 0xFF (NaN) and every element the element format's NaN
// code (code 0 where the format has none): the whole block decodes to NaN (OCP MX, microxcaling).
struct MxSpec {
  Format elem = fmt::kE4M3;
  ScaleRule rule = ScaleRule::kRoundUp;
  CastOptions cast{};
  int block = 32;
};
// Throws qmx::Error naming the problem (element format not fast-capable, block length out of 1..4096,
// cast options the element format cannot honour).
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
