// scale_ref.cc: the reference UE8M0 scale rules (qmx/scale.h), written on the real value of amax in
// double, independently of the bit-level versions the fast paths use (round/convert_params.h).
#include <cmath>

#include "qmx/error.h"
#include "qmx/round.h"
#include "qmx/scale.h"

namespace qmx {
namespace {

constexpr double kMinNormalF32 = 0x1p-126;

int Clamp127(int k) { return k < -127 ? -127 : (k > 127 ? 127 : k); }

}  // namespace

uint8_t Ue8m0ScaleFromAmaxRef(double amax, const Format& elem, ScaleRule rule) {
  if (!IsPow2Rule(rule)) throw Error(std::string("'") + ScaleRuleName(rule) + "' is not a UE8M0 scale rule");
  if (!(amax >= 0) || std::isinf(amax)) throw Error("block amax must be finite and >= 0");
  const FormatLimits lim = Limits(elem);
  if (rule == ScaleRule::kRoundUp) {
    // 1. decode_scale = amax / destmax, one FP32 division; 2. below 2^-127 -> 2^-127; 3. else round up to a
    // power of two (MXFP8 recipes algorithm 1): the reference rounding routine into ue8m0 toward +Inf does both.
    const float q = static_cast<float>(amax) / static_cast<float>(lim.max_finite);
    const CastOptions up{Rounding::kRu, Saturation::kSatFinite};
    return static_cast<uint8_t>(ConvertF32(q, fmt::kUE8M0, up));
  }
  if (amax == 0) return 0;
  const int e = std::ilogb(amax);  // floor(log2 amax), exact for FP32 subnormals too
  int k = e;
  switch (rule) {
    case ScaleRule::kCeil:
      // torchao reads the exponent field: an FP32-subnormal amax counts as exponent -127, and any amax that
      // is not a normal power of two adds one.
      if (amax < kMinNormalF32) k = -127 + 1;
      else k = e + (amax != std::ldexp(1.0, e) ? 1 : 0);
      break;
    case ScaleRule::kEven: {
      // amax rounded half-up to elem_man + 1 significant bits (FP32-subnormal amax: on the fixed quantum of
      // the exponent-field-0 binade, counted as exponent -127), then floored.
      const int m = elem.man_bits;
      if (amax < kMinNormalF32) k = amax + std::ldexp(1.0, -127 - m) >= kMinNormalF32 ? -126 : -127;
      else k = amax >= std::ldexp(2.0 - std::ldexp(1.0, -(m + 1)), e) ? e + 1 : e;
      break;
    }
    default:
      break;  // ocp-floor, max-finite
  }
  return static_cast<uint8_t>(Clamp127(k - lim.emax) + 127);
}

}  // namespace qmx
