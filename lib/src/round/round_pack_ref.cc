// round_pack_ref.cc: the scalar reference rounding routine (one routine owns all rounding, as SoftFloat's
// roundPack): the options' validation here, the routine's body in round_core.h (host-device, so the GPU
// engine runs the same source).
#include "qmx/error.h"
#include "qmx/round.h"
#include "round/round_core.h"

namespace qmx {

bool IsStochastic(Rounding r) { return detail::IsStochasticCore(r); }

void ValidateCastOptions(const Format& dst, const CastOptions& opt) {
  if (IsStochastic(opt.rounding) && (opt.sr_bits < 1 || opt.sr_bits > 32))
    throw Error("stochastic rounding needs 1..32 random bits per element, not " + std::to_string(opt.sr_bits));
  if (opt.saturation != Saturation::kSatFinite && !dst.HasInf() && !dst.HasNan())
    throw Error(std::string("format '") + dst.name + "' has no Inf or NaN encoding, so " +
                SaturationName(opt.saturation) + " is undefined; use satfinite (OCP MX requires clamping)");
  if (opt.nan_payload != NanPayload::kDefault && (dst.encoding != Encoding::kIeee || dst.man_bits < 1))
    throw Error(std::string("format '") + dst.name + "' has one NaN code (or none), so a NaN payload (" +
                NanPayloadName(opt.nan_payload) + ") applies only to IEEE-style formats such as e5m2, fp16 and bf16");
}

ExactValue ReadExact(const Format& src, uint64_t bits) { return detail::ReadExactCore(src, bits); }

RoundResult RoundExact(const ExactValue& x, const Format& dst, const CastOptions& opt, uint32_t random_bits) {
  ValidateCastOptions(dst, opt);
  return detail::RoundExactCore(x, dst, opt, random_bits);
}

RoundResult Convert(const Format& src, uint64_t bits, const Format& dst, const CastOptions& opt,
                    uint32_t random_bits) {
  ValidateCastOptions(dst, opt);
  return detail::ConvertCore(src, bits, dst, opt, random_bits);
}

uint64_t ConvertF32(float x, const Format& dst, const CastOptions& opt, uint32_t random_bits) {
  uint32_t bits;
  __builtin_memcpy(&bits, &x, 4);
  return Convert(fmt::kFP32, bits, dst, opt, random_bits).code;
}

}  // namespace qmx
