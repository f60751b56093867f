// scale/scale_core.h: the FP32 and NVFP4 (E4M3) block scales of qmx/scale.h as host-device functions
// (QMX_HOST_DEVICE), so that the CPU library (scale.cc, quantize.cc) and the GPU engine
// (gpu/src/engine_quantize.cu) run one source: Transformer Engine's compute_scale_from_amax for FP32 scales,
// and the three NVFP4 orders (docs/numerics.md "NVFP4"). Each line is one IEEE FP32 multiply or divide
// (nvcc divides with IEEE rounding unless -prec-div=false, and a lone product is never contracted into an
// FMA), so host and device give the same bits.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qmx/cast_options.h"
#include "qmx/format.h"
#include "qmx/host_device.h"
#include "qmx/scale.h"
#include "round/round_core.h"

namespace qmx::detail {

inline constexpr float kFltMaxCore = 3.40282346638528859812e+38F;

// fminf(v, FLT_MAX) for every v (a NaN gives FLT_MAX: fminf returns the other operand), as a compare.
QMX_HOST_DEVICE inline float CapFltMaxCore(float v) { return v < kFltMaxCore ? v : kFltMaxCore; }

QMX_HOST_DEVICE inline bool IsFiniteCore(float v) { return (hd::F32Bits(v) & 0x7F800000u) != 0x7F800000u; }

// Fp32ScaleFromAmax: s = destmax / amax (then / 2^margin); amax = 0 or a non-finite amax keep `fallback`; an
// infinite s becomes FLT_MAX; pow2 clears s's mantissa bits. ldexpf by -margin is exact or rounds once.
QMX_HOST_DEVICE inline Fp32Scale Fp32ScaleCore(float amax, float destmax, bool pow2, int margin, float fallback) {
  float s = fallback;
  if (IsFiniteCore(amax) && amax > 0.0f) {
    const float scaled_max = margin == 0 ? destmax : ldexpf(destmax, -margin);
    s = scaled_max / amax;
    if (!IsFiniteCore(s)) s = kFltMaxCore;
  }
  if (pow2) s = hd::F32FromBits(hd::F32Bits(s) & 0xFF800000u);
  return {s, 1.0f / s};
}

// The FP32 value NVFP4's block scale rounds to E4M3 (RNE): amax * fl(S_enc * fl(1/6)) (nvfp4), fl(amax / 6)
// * S_enc (nvfp4-div), or torchao's clamp(fl(amax / 6) / s, 2^-6, 448) (on CUDA fl(amax * fl(1/6)) / s). With
// another block-scale format (QuantSpec::scale_format) torchao's clamp is to that format's smallest normal
// and largest finite values, lo and hi; em is the elements' largest value, E2M1's 6 (QuantSpec::elem may be
// another format under these rules).
QMX_HOST_DEVICE inline float Nvfp4BlockScaleValueCore(float block_amax, float s_enc, ScaleRule rule,
                                                      float lo = 0.015625f, float hi = 448.0f, float em = 6.0f) {
  if (rule == ScaleRule::kNvfp4Torchao || rule == ScaleRule::kNvfp4TorchaoCuda) {
    float v = (rule == ScaleRule::kNvfp4Torchao ? block_amax / em : block_amax * (1.0f / em)) / s_enc;
    v = v < lo ? lo : v;  // std::max(v, lo), std::min(v, hi): a NaN stays NaN
    v = hi < v ? hi : v;
    return v;
  }
  if (rule == ScaleRule::kNvfp4Div) return (block_amax / em) * s_enc;
  const float m = s_enc * (1.0f / em);
  return block_amax * m;
}

// The E4M3 byte of that value (RNE, the default CastOptions) by the reference routine; f32, e4m3: the formats'
// fields (the device receives them by value). The GPU engine reads the same conversion from a step table.
struct ToE4m3ByRoutine {
  const Format& f32;
  const Format& e4m3;
  QMX_HOST_DEVICE uint8_t operator()(float v) const {
    return static_cast<uint8_t>(ConvertCore(f32, hd::F32Bits(v), e4m3, CastOptions{}, 0).code);
  }
};
QMX_HOST_DEVICE inline uint8_t Nvfp4BlockScaleCore(float block_amax, float s_enc, ScaleRule rule, const Format& f32,
                                                   const Format& e4m3) {
  return ToE4m3ByRoutine{f32, e4m3}(Nvfp4BlockScaleValueCore(block_amax, s_enc, rule));
}

// Nvfp4EncodeFactor of the block scale's value sd.
QMX_HOST_DEVICE inline float Nvfp4EncodeFactorCore(float sd, float s_enc, ScaleRule rule) {
  if (rule == ScaleRule::kNvfp4Torchao || rule == ScaleRule::kNvfp4TorchaoCuda) return (1.0f / s_enc) / sd;
  if (rule == ScaleRule::kNvfp4Div) {
    if (sd == 0.0f) return 0.0f;
    return CapFltMaxCore(s_enc / sd);
  }
  const float s_dec = 1.0f / s_enc;
  return CapFltMaxCore(1.0f / (sd * s_dec));
}

// The format of a rule's block scales: UE8M0 for the power-of-two (MX) rules, E4M3 for the NVFP4 rules, FP32
// for the rest (qmx/scale.h ScaleFormatOf, which calls this).
QMX_HOST_DEVICE inline ScaleFormat ScaleFormatOfCore(ScaleRule r) {
  switch (r) {
    case ScaleRule::kOcpFloor:
    case ScaleRule::kRoundUp:
    case ScaleRule::kCeil:
    case ScaleRule::kEven:
    case ScaleRule::kMaxFinite:
    case ScaleRule::kBfp: return ScaleFormat::kUe8m0;  // BFP: the byte is an exponent, 2^(b - 127)
    case ScaleRule::kNvfp4:
    case ScaleRule::kNvfp4Div:
    case ScaleRule::kNvfp4Torchao:
    case ScaleRule::kNvfp4TorchaoCuda:
    case ScaleRule::kNvfp4FourOverSix:
    case ScaleRule::kNvfp4FourOverSixMse: return ScaleFormat::kE4m3;
    default: return ScaleFormat::kFp32;
  }
}

// The value of an E4M3 scale byte as a float (exact), NaN for 0x7F/0xFF.
QMX_HOST_DEVICE inline float E4m3ValueCore(const Format& e4m3, uint8_t byte) {
  const ExactValue x = detail::ReadExactCore(e4m3, byte);
  if (x.kind == ExactValue::Kind::kNan) return hd::F32FromBits(0x7FC00000u);
  const float m = x.kind == ExactValue::Kind::kZero ? 0.0f : ldexpf(static_cast<float>(x.sig), x.exp);
  return x.negative ? -m : m;
}

// A block's FP32 or NVFP4 scale from its amax (quantize.cc's BlockMultiplyScale, which calls BlockMultiplyScaleCore).
struct MultiplyScale {
  uint32_t stored;   // E4M3 byte or FP32 bits of the decode scale
  float multiplier;  // elements are fl32(x * multiplier)
  bool nan_block;    // block-nan: scale NaN, every element the element NaN code
};
// block_amax: of the finite elements (ignore, block-nan) or with Inf as HUGE_VALF (ignore-nan); e4m3: the
// block scales' format's fields (E4M3, or the spec's scale_format), lo and hi its smallest normal and largest
// finite values; to_e4m3(v): v's code under RNE (ToE4m3ByRoutine, or a table of it).
template <class ToE4m3>
QMX_HOST_DEVICE inline MultiplyScale BlockMultiplyScaleWith(ScaleRule rule, NanPolicy nan, int margin, float destmax,
                                                            float block_amax, bool has_nan, bool has_inf, float s_enc,
                                                            const Format& e4m3, ToE4m3 to_e4m3, float lo = 0.015625f,
                                                            float hi = 448.0f, float em = 6.0f) {
  MultiplyScale r{0, 0.0f, false};
  if ((has_nan || has_inf) && nan == NanPolicy::kBlockNan) {
    r.nan_block = true;
    return r;
  }
  if (ScaleFormatOfCore(rule) == ScaleFormat::kE4m3) {
    const uint8_t s8 = to_e4m3(Nvfp4BlockScaleValueCore(block_amax, s_enc, rule, lo, hi, em));
    r.stored = s8;
    r.multiplier = Nvfp4EncodeFactorCore(E4m3ValueCore(e4m3, s8), s_enc, rule);
    return r;
  }
  const Fp32Scale s = Fp32ScaleCore(block_amax, destmax, rule == ScaleRule::kFp32Pow2, margin, 1.0f);
  r.stored = hd::F32Bits(s.decode);
  r.multiplier = s.encode;
  return r;
}
QMX_HOST_DEVICE inline MultiplyScale BlockMultiplyScaleCore(ScaleRule rule, NanPolicy nan, int margin, float destmax,
                                                            float block_amax, bool has_nan, bool has_inf, float s_enc,
                                                            const Format& f32, const Format& e4m3, float lo = 0.015625f,
                                                            float hi = 448.0f, float em = 6.0f) {
  return BlockMultiplyScaleWith(rule, nan, margin, destmax, block_amax, has_nan, has_inf, s_enc, e4m3,
                                ToE4m3ByRoutine{f32, e4m3}, lo, hi, em);
}

// Stores a block's scale at `index` of a scale grid of format sf: FP32 bits (4 bytes, little-endian; the
// quiet NaN for a NaN block), an E4M3 byte (0x7F for a NaN block, or the spec's scale format's NaN code,
// nan_code) or a UE8M0 byte.
QMX_HOST_DEVICE inline void StoreScaleCore(ScaleFormat sf, uint8_t* scales, size_t index, uint32_t stored,
                                           bool nan_block, uint8_t nan_code = 0x7F) {
  if (sf == ScaleFormat::kFp32) {
    const uint32_t b = nan_block ? 0x7FC00000u : stored;
    memcpy(scales + 4 * index, &b, 4);
  } else if (sf == ScaleFormat::kE4m3) {
    scales[index] = nan_block ? nan_code : static_cast<uint8_t>(stored);
  } else {
    scales[index] = static_cast<uint8_t>(stored);
  }
}

}  // namespace qmx::detail
