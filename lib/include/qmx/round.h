// qmx/round.h: the scalar reference conversion. Rounds an exact input value into any format under
// CastOptions. Written for clarity; every fast path in the project is tested bit for bit against it.
#pragma once

#include <cstdint>

#include "qmx/cast_options.h"
#include "qmx/format.h"

namespace qmx {

// An exactly represented input: |x| = sig * 2^exp.
struct ExactValue {
  enum class Kind : uint8_t { kZero, kFinite, kInf, kNan } kind;
  bool negative;
  uint64_t sig;
  int exp;
  // A signaling NaN of an IEEE 754 interchange format (fp16, bf16, fp32, fp64: a NaN whose trailing
  // significand's top bit, the quiet bit, is 0). Converting one signals invalid (IEEE 754-2019 7.2(a));
  // the result is the destination's quiet NaN as for any NaN.
  bool signaling = false;
};

// Reads a code of any format (fp32, fp64, bf16, fp16, or any registry format) as an exact value; a NaN of
// fp16, bf16, fp32 or fp64 with its quiet bit clear is marked signaling (OCP's FP8/FP6/FP4 and P3109 formats
// have no signaling NaNs).
ExactValue ReadExact(const Format& src, uint64_t bits);

struct RoundResult {
  uint64_t code;
  uint32_t flags;  // Flag bits
};

// The reference rounding routine. random_bits (only read for stochastic rounding) holds R in its low
// opt.sr_bits bits. The options must be valid for dst (ValidateCastOptions); invalid ones throw.
RoundResult RoundExact(const ExactValue& x, const Format& dst, const CastOptions& opt, uint32_t random_bits = 0);

// Convenience: convert a code of src into dst.
RoundResult Convert(const Format& src, uint64_t bits, const Format& dst, const CastOptions& opt,
                    uint32_t random_bits = 0);
uint64_t ConvertF32(float x, const Format& dst, const CastOptions& opt, uint32_t random_bits = 0);

}  // namespace qmx
