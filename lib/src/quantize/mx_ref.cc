// mx_ref.cc: the scalar reference of MX block quantization (OCP MX v1.0 section 6.3; MXFP8 recipes appendix
// A.1 for the round-up scale), written independently of the fast path: amax in double, the scale by
// ilogb or by the reference rounding routine, elements by RoundExact on the exactly scaled value.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "fp_env.h"
#include "qmx/error.h"
#include "qmx/host_device.h"
#include "qmx/mx.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "quantize/mx_core.h"

namespace qmx {

void QuantizeMxRef(DType src_type, const void* src, size_t n, const MxSpec& spec, uint8_t* codes, uint8_t* scales,
                   const SrSource& sr) {
  ValidateMxSpec(spec);
  const detail::ScopedDefaultFpEnv fp_env;
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
  const uint8_t nan_code = static_cast<uint8_t>(ConvertF32(std::nanf(""), spec.elem, spec.cast));
  const uint8_t block_nan_code = spec.elem.HasNan() ? static_cast<uint8_t>(spec.elem.CanonicalNan()) : 0;
  const size_t block = static_cast<size_t>(spec.block);
  // Another scale format: its powers of two, and each one's code (by the reference rounding: exact).
  const bool ue8m0 = spec.scale_format == fmt::kUE8M0;
  const MxScaleRange range = MxScaleRangeOf(spec.scale_format);
  const auto stored = [&](int scale) -> uint8_t {
    if (ue8m0) return static_cast<uint8_t>(scale);
    if (scale == 0xFF) return static_cast<uint8_t>(spec.scale_format.CanonicalNan());
    return static_cast<uint8_t>(ConvertF32(std::ldexp(1.0f, scale - 127), spec.scale_format, CastOptions{}));
  };
  std::vector<double> mags;
  for (size_t b = 0, start = 0; start < n; ++b, start += block) {
    const size_t end = std::min(n, start + block);
    double amax = 0;  // over the finite elements
    bool has_nan = false, has_inf = false;
    for (size_t i = start; i < end; ++i) {
      const ExactValue x = read(i);
      has_nan |= x.kind == ExactValue::Kind::kNan;
      has_inf |= x.kind == ExactValue::Kind::kInf;
      if (x.kind == ExactValue::Kind::kFinite) amax = std::max(amax, std::ldexp(static_cast<double>(x.sig), x.exp));
    }
    if (spec.amax_order != AmaxOrder::kAny) {
      // A comparison reduction over the block's lanes: it holds a NaN or an Inf for the policy exactly when
      // its amax is one.
      mags.clear();
      for (size_t i = start; i < end; ++i) {
        const ExactValue x = read(i);
        mags.push_back(x.kind == ExactValue::Kind::kNan      ? std::nan("")
                       : x.kind == ExactValue::Kind::kInf    ? HUGE_VAL
                       : x.kind == ExactValue::Kind::kFinite ? std::ldexp(static_cast<double>(x.sig), x.exp)
                                                             : 0.0);
      }
      const double r = OrderedAmax(mags.data(), mags.size(), block, spec.amax_order);
      has_nan = std::isnan(r);
      has_inf = std::isinf(r);
      amax = has_nan || has_inf ? 0.0 : r;
    }
    // The scale byte, or a fill code for the whole block (NanPolicy).
    int scale, fill;
    detail::MxPolicyScale(spec.nan, has_nan, has_inf, Ue8m0ScaleFromAmaxRef(amax, spec.elem, spec.rule), nan_code,
                            block_nan_code, &scale, &fill);
    if (scale != 0xFF) scale = std::clamp(scale, 127 + range.lo, 127 + range.hi);  // the scale format's powers of two
    scales[b] = stored(scale);
    const int k = scale - 127;
    for (size_t i = start; i < end; ++i) {
      if (fill >= 0) {
        codes[i] = static_cast<uint8_t>(fill);
        continue;
      }
      const uint32_t r = sr.bits != nullptr ? sr.bits[i] : RandomBitsForElement(sr.seed, sr.first_index + i);
      if (spec.scaling == ElementScaling::kExact) {
        ExactValue x = read(i);
        x.exp -= k;  // V_i / X, exactly
        codes[i] = static_cast<uint8_t>(RoundExact(x, spec.elem, spec.cast, r).code);
        continue;
      }
      // FP32 element scaling: the product of the FP32 value and the multiplier, rounded once to FP32.
      double mult = std::ldexp(1.0, -k);
      if (spec.scaling == ElementScaling::kTeRcp) mult = scale == 0 ? 1.0 : (scale == 254 ? 0.0 : std::ldexp(1.0, -k));
      float y = static_cast<float>(static_cast<double>(SourceValueF32(src_type, src, i)) * mult);
      // te-rcp models the GPU kernel, whose FMUL returns the canonical +NaN (0x7FFFFFFF) for Inf x 0 and
      // for a NaN operand, where x86 gives its negative default NaN or keeps the operand's sign.
      if (spec.scaling == ElementScaling::kTeRcp && std::isnan(y)) y = hd::F32FromBits(0x7FFFFFFFu);
      codes[i] = static_cast<uint8_t>(ConvertF32(y, spec.elem, spec.cast, r));
    }
  }
}

void DequantizeMxRef(const uint8_t* codes, const uint8_t* scales, size_t n, const MxSpec& spec, float* out) {
  ValidateMxSpec(spec);
  const detail::ScopedDefaultFpEnv fp_env;
  const size_t block = static_cast<size_t>(spec.block);
  for (size_t i = 0; i < n; ++i) {
    const double s = MxScaleValue(spec.scale_format, scales[i / block]);
    out[i] = std::isnan(s) ? std::nanf("") : static_cast<float>(DecodeToDouble(spec.elem, codes[i]) * s);
  }
}

}  // namespace qmx
