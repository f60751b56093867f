// qmx/cast_options.h: everything that decides how a value is rounded into a format, passed explicitly
// (OFP8 rev 1.0 section 5.2.1 saturation, P3109 projections, IEEE 754 rounding attributes).
#pragma once

#include <cstdint>
#include <string>

#include "qmx/format.h"

namespace qmx {

enum class Rounding : uint8_t {
  kRne,  // nearest, ties to the even code
  kRna,  // nearest, ties away from zero
  kRz,   // toward zero
  kRu,   // toward +Inf
  kRd,   // toward -Inf
  kRo,   // to odd: truncate, then pick the odd code when inexact
  kSrA,  // stochastic, P3109 SR-A: away iff floor(nu*2^N) + R >= 2^N (Blackwell cvt.rs for N = 8)
  kSrB,  // stochastic, P3109 SR-B: away iff floor(nu*2^(N+1)) + 2R + 1 >= 2^(N+1)
  kSrC,  // stochastic, P3109 SR-C: away iff RNE(nu*2^N) + R >= 2^N
};

enum class Saturation : uint8_t {
  kSatFinite,     // finite overflow and +-Inf go to +-max (OFP8 SAT, P3109 SatFinite)
  kNoSat,         // overflow goes to Inf, or NaN where there is no Inf (OFP8 NONSAT, P3109 SatNone)
  kSatPropagate,  // finite overflow goes to +-max, Inf stays Inf (or NaN where there is no Inf)
};

// Sign of a NaN result in formats that have NaN.
enum class NanSign : uint8_t { kKeep, kPositive };
// The payload of a NaN result in an IEEE-style format (e5m2, fp16, bf16, fp32, user IEEE formats; the others
// have one NaN code): "default" is the library's (8 bits or fewer: every mantissa bit set, 0x7F for e5m2;
// wider: the quiet bit alone, 0x7E00 for fp16), "quiet" the quiet bit alone (RISC-V's canonical NaN with
// nan-sign positive: 0x7E for e5m2), "all-ones" every mantissa bit (CUDA's 0x7FFF for fp16 and bf16).
enum class NanPayload : uint8_t { kDefault, kQuiet, kAllOnes };
// What a NaN input becomes in a format without a NaN code (FP6, FP4, INT8).
enum class NanFallback : uint8_t { kMaxPositive, kZero };
// A negative nonzero input into an unsigned format (ue8m0, eXmY:unsigned): invalid (the format's NaN and
// the invalid flag), or its magnitude, as CUDA's __nv_cvt_float_to_e8m0 converts |x| (cuda_fp8.hpp).
enum class NegativeUnsigned : uint8_t { kInvalid, kMagnitude };
enum class Subnormals : uint8_t {
  kKeep,
  kFlush,  // subnormal inputs read as zero, subnormal results become zero (sign kept)
};

// When a result is tiny, for the underflow flag (IEEE 754-2019 7.5): before rounding (|x| below the smallest
// normal magnitude: qmx's default, which its golden files use unless their header says tininess=after), or
// after rounding (x rounded to the format's precision with an unbounded exponent range lies below it: what
// x86's SSE conversions do, the tests' hardware oracle, and RISC-V). Codes never depend on it; only the
// underflow flag does.
enum class Tininess : uint8_t { kBeforeRounding, kAfterRounding };

struct CastOptions {
  Rounding rounding = Rounding::kRne;
  Saturation saturation = Saturation::kSatFinite;
  NanSign nan_sign = NanSign::kKeep;
  NanFallback nan_fallback = NanFallback::kMaxPositive;  // what PTX and cuda_fp6.h/cuda_fp4.h do
  Subnormals subnormals = Subnormals::kKeep;
  int sr_bits = 8;  // N, random bits per element for stochastic rounding (1..32)
  NegativeUnsigned negative_unsigned = NegativeUnsigned::kInvalid;
  Tininess tininess = Tininess::kBeforeRounding;
  NanPayload nan_payload = NanPayload::kDefault;
};

// Exception flags, TestFloat numbering (bits 0..4) plus a saturation bit.
enum Flag : uint32_t {
  kFlagInexact = 1u << 0,
  kFlagUnderflow = 1u << 1,  // tiny (CastOptions::tininess: before or after rounding) and inexact
  kFlagOverflow = 1u << 2,   // the rounded magnitude exceeded the largest finite value
  kFlagInfinite = 1u << 3,   // reserved for TestFloat compatibility (division by zero)
  kFlagInvalid = 1u << 4,    // NaN into a format without NaN, negative into unsigned, Inf with nowhere to go
  kFlagSaturated = 1u << 5,  // the result was clamped to +-max
};

bool IsStochastic(Rounding r);
const char* RoundingName(Rounding r);
const char* SaturationName(Saturation s);
// Parse the CLI/golden spellings; throw qmx::Error listing the valid names.
Rounding ParseRounding(const std::string& s);   // rne rna rz ru rd ro sr (= sr-a) sr-a sr-b sr-c
Saturation ParseSaturation(const std::string& s);  // satfinite nosat satpropagate
// The CLI spellings of the other options, both ways; Parse* throw qmx::Error naming `option` and the
// valid values.
const char* NanSignName(NanSign v);            // keep positive
const char* NanFallbackName(NanFallback v);    // max zero
const char* SubnormalsName(Subnormals v);      // keep flush
const char* NegativeUnsignedName(NegativeUnsigned v);  // invalid magnitude
const char* TininessName(Tininess v);                  // before after
const char* NanPayloadName(NanPayload v);              // default quiet all-ones
NanPayload ParseNanPayload(const std::string& s, const std::string& option = "--nan-payload");
Tininess ParseTininess(const std::string& s, const std::string& option = "--tininess");
NegativeUnsigned ParseNegativeUnsigned(const std::string& s, const std::string& option = "--negative");
NanSign ParseNanSign(const std::string& s, const std::string& option = "--nan-sign");
NanFallback ParseNanFallback(const std::string& s, const std::string& option = "--nan-fallback");
Subnormals ParseSubnormals(const std::string& s, const std::string& option = "--subnormals");
// Rejects option sets the destination cannot honour (e.g. nosat into e2m1, which has no Inf or NaN, or a
// NaN payload for a format with one NaN code).
void ValidateCastOptions(const Format& dst, const CastOptions& opt);

}  // namespace qmx
