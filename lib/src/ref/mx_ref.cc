// mx_ref.cc: the scalar reference of MX block quantization (OCP MX v1.0 section 6.3; seed 000 appendix
// A.1 for the round-up scale), written independently of the fast path: amax in double, the scale by
// ilogb or by the reference rounding routine, elements by RoundExact on the exactly scaled value.
#include <cmath>

#include "qmx/error.h"
#include "qmx/mx.h"
#include "qmx/rng.h"
#include "qmx/round.h"

namespace qmx {
namespace {

// Scale exponent k (X = 2^k) for a finite amax.
int RefScaleExponent(double amax, const MxSpec& spec) {
  const FormatLimits lim = Limits(spec.elem);
  if (spec.rule == ScaleRule::kOcpFloor) {
    if (amax == 0) return -127;
    const int k = std::ilogb(amax) - lim.emax;
    return k < -127 ? -127 : (k > 127 ? 127 : k);
  }
  // 1. decode_scale = amax / destmax in FP32; 2. below 2^-127 -> 2^-127; 3. else round up to a power of 2.
  const float q = static_cast<float>(amax) / static_cast<float>(lim.max_finite);
  const CastOptions up{Rounding::kRu, Saturation::kSatFinite};
  return static_cast<int>(ConvertF32(q, fmt::kUE8M0, up)) - 127;
}

}  // namespace

void QuantizeMxRef(DType src_type, const void* src, size_t n, const MxSpec& spec, uint8_t* codes, uint8_t* scales,
                   const SrSource& sr) {
  ValidateMxSpec(spec);
  const Format& sf = FormatOfSource(src_type);
  const auto bits_at = [&](size_t i) -> uint64_t {
    return src_type == DType::kF32 ? static_cast<const uint32_t*>(src)[i] : static_cast<const uint16_t*>(src)[i];
  };
  const auto read = [&](size_t i) {
    ExactValue x = ReadExact(sf, bits_at(i));
    if (spec.cast.subnormals == Subnormals::kFlush && ClassifyCode(sf, bits_at(i)) == CodeClass::kSubnormal)
      x.kind = ExactValue::Kind::kZero;
    return x;
  };
  const size_t block = static_cast<size_t>(spec.block);
  for (size_t b = 0, start = 0; start < n; ++b, start += block) {
    const size_t end = std::min(n, start + block);
    double amax = 0;
    bool special = false;
    for (size_t i = start; i < end; ++i) {
      const ExactValue x = read(i);
      if (x.kind == ExactValue::Kind::kNan || x.kind == ExactValue::Kind::kInf) special = true;
      if (x.kind == ExactValue::Kind::kFinite) amax = std::max(amax, std::ldexp(static_cast<double>(x.sig), x.exp));
    }
    if (special) {
      scales[b] = 0xFF;
      for (size_t i = start; i < end; ++i) codes[i] = spec.elem.HasNan() ? static_cast<uint8_t>(spec.elem.CanonicalNan()) : 0;
      continue;
    }
    const int k = RefScaleExponent(amax, spec);
    scales[b] = static_cast<uint8_t>(k + 127);
    for (size_t i = start; i < end; ++i) {
      ExactValue x = read(i);
      x.exp -= k;  // V_i / X, exactly
      const uint32_t r = sr.bits != nullptr ? sr.bits[i] : RandomBitsForElement(sr.seed, sr.first_index + i);
      codes[i] = static_cast<uint8_t>(RoundExact(x, spec.elem, spec.cast, r).code);
    }
  }
}

void DequantizeMxRef(const uint8_t* codes, const uint8_t* scales, size_t n, const MxSpec& spec, float* out) {
  ValidateMxSpec(spec);
  const size_t block = static_cast<size_t>(spec.block);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t s = scales[i / block];
    out[i] = s == 0xFF ? std::nanf("")
                       : static_cast<float>(DecodeToDouble(spec.elem, codes[i]) * std::ldexp(1.0, s - 127));
  }
}

}  // namespace qmx
