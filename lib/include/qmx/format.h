// qmx/format.h: the one descriptor for every element format (OCP OFP8 rev 1.0 section 5, OCP MX v1.0
// section 5, IEEE 754, IEEE P3109 interim report) and the registry of named and user-described formats.
// Limits are derived from the descriptor by constexpr code, never typed by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qmx {

// How the special values of a format are encoded.
enum class Encoding : uint8_t {
  kIeee,           // all-ones exponent: Inf (mantissa 0) and NaN (mantissa != 0); e5m2, fp16, bf16, fp32
  kFnNan,          // no Inf; only the all-ones magnitude code is NaN (OCP e4m3, "fn")
  kFinite,         // every code is a finite number (OCP FP6 and FP4)
  kP3109Extended,  // P3109: one NaN (signed: the -0 code; unsigned: all ones), top codes are Inf
  kP3109Finite,    // P3109: one NaN as above, no Inf
  // FNUZ (AMD's FP8, ml_dtypes' float8_*fnuz): signed, one NaN at the -0 code, no Inf, no -0; OFP8's
  // saturation rules (non-saturating overflow and Inf give NaN), where P3109's finite formats clamp.
  kFnuz,
  kExponentOnly,   // UE8M0: unsigned, no zero, no sign, all ones is NaN, 2^(code - bias)
  kInt,            // two's complement fixed point with an implicit scale 2^-frac_bits (MXINT8)
};

// A binary format. For kInt, man_bits holds the fractional bits and exp_bits is 0.
struct Format {
  const char* name;  // spec spelling, e.g. "e4m3"; stable for the life of the process
  int exp_bits;
  int man_bits;
  int bias;
  bool is_signed;
  Encoding encoding;

  // The same encoding (the name aside): a user format "e4m3:..." with OCP's fields equals fmt::kE4M3.
  constexpr bool operator==(const Format& o) const {
    return exp_bits == o.exp_bits && man_bits == o.man_bits && bias == o.bias && is_signed == o.is_signed &&
           encoding == o.encoding;
  }
  constexpr bool operator!=(const Format& o) const { return !(*this == o); }

  constexpr int Bits() const { return (is_signed ? 1 : 0) + exp_bits + man_bits + (encoding == Encoding::kInt ? 1 : 0); }
  constexpr bool IsInt() const { return encoding == Encoding::kInt; }
  constexpr uint64_t CodeMask() const { return Bits() >= 64 ? ~0ull : (1ull << Bits()) - 1; }
  constexpr uint64_t SignBit() const { return is_signed && !IsInt() ? 1ull << (Bits() - 1) : 0; }
  // Mask of the bits below the sign bit (exponent and mantissa fields).
  constexpr uint64_t MagMask() const { return IsInt() ? CodeMask() : (1ull << (exp_bits + man_bits)) - 1; }
  constexpr bool HasZero() const { return encoding != Encoding::kExponentOnly; }
  constexpr bool HasSubnormals() const { return encoding != Encoding::kExponentOnly && !IsInt() && man_bits > 0; }
  constexpr bool HasNegativeZero() const {
    return is_signed && !IsInt() && encoding != Encoding::kP3109Extended && encoding != Encoding::kP3109Finite &&
           encoding != Encoding::kFnuz;
  }
  constexpr bool HasInf() const { return encoding == Encoding::kIeee || encoding == Encoding::kP3109Extended; }
  constexpr bool HasNan() const {
    return encoding != Encoding::kFinite && encoding != Encoding::kInt;
  }
  // Exponent field of the lowest normal binade: 1 when field 0 holds zero and subnormals.
  constexpr int FirstNormalField() const { return encoding == Encoding::kExponentOnly ? 0 : 1; }
  // Unbiased exponent of the smallest normal number (for kInt: the exponent of the quantum).
  constexpr int Emin() const { return IsInt() ? -man_bits : FirstNormalField() - bias; }

  // Largest positive finite code.
  constexpr uint64_t MaxFiniteCode() const {
    switch (encoding) {
      case Encoding::kIeee:
        return ((((1ull << exp_bits) - 2) << man_bits) | ((1ull << man_bits) - 1));
      case Encoding::kFnNan:
        return MagMask() - 1;
      case Encoding::kFinite:
        return MagMask();
      case Encoding::kP3109Extended:
        return is_signed ? MagMask() - 1 : MagMask() - 2;
      case Encoding::kP3109Finite:
        return is_signed ? MagMask() : MagMask() - 1;
      case Encoding::kFnuz:
        return MagMask();
      case Encoding::kExponentOnly:
        return MagMask() - 1;
      case Encoding::kInt:
        return (1ull << (Bits() - 1)) - 1;
    }
    return 0;
  }
  // Smallest positive nonzero code (the smallest subnormal, or the smallest normal without subnormals).
  constexpr uint64_t MinPositiveCode() const {
    if (encoding == Encoding::kExponentOnly) return 0;
    return 1;
  }
  // The NaN code this library produces (sign bit clear where the format has a sign).
  constexpr uint64_t CanonicalNan() const {
    switch (encoding) {
      case Encoding::kIeee:
        // <= 8 bits: all-ones mantissa (what CUDA and the OCP tables use); wider: the quiet bit only.
        return (((1ull << exp_bits) - 1) << man_bits) |
               (Bits() <= 8 ? (1ull << man_bits) - 1 : 1ull << (man_bits - 1));
      case Encoding::kFnNan:
        return MagMask();
      case Encoding::kP3109Extended:
      case Encoding::kP3109Finite:
        return is_signed ? SignBit() | 0 : CodeMask();
      case Encoding::kFnuz:
        return SignBit();
      case Encoding::kExponentOnly:
        return CodeMask();
      default:
        return 0;  // no NaN
    }
  }
  // +Inf code, where the format has one.
  constexpr uint64_t PositiveInfCode() const {
    if (encoding == Encoding::kIeee) return ((1ull << exp_bits) - 1) << man_bits;
    if (encoding == Encoding::kP3109Extended) return is_signed ? MagMask() : MagMask() - 1;
    return 0;
  }
};

// Classification of one code.
enum class CodeClass : uint8_t { kZero, kSubnormal, kNormal, kInf, kNan };
CodeClass ClassifyCode(const Format& f, uint64_t code);

// Exact value of a code: value = (-1)^negative * sig * 2^exp (sig = 0 for zero). Inf and NaN set cls.
struct DecodedCode {
  CodeClass cls;
  bool negative;
  uint64_t sig;
  int exp;
};
DecodedCode DecodeCode(const Format& f, uint64_t code);
double DecodeToDouble(const Format& f, uint64_t code);
float DecodeToFloat(const Format& f, uint64_t code);  // exact for every format of 8 bits or fewer

// Limits derived from the descriptor (computed, not typed).
struct FormatLimits {
  double max_finite;
  double min_normal;     // smallest positive normal (kInt: the quantum 2^-frac)
  double min_subnormal;  // smallest positive nonzero value
  double binades;        // log2(max_finite / min_subnormal)
  int emax;              // exponent of the largest binade (OCP MX emax_elem)
  double normal_binades;  // log2(max_finite / min_normal)
  double decimal_digits;  // precision in decimal digits: (man_bits + 1) log10 2 (kInt: log10 2^(man_bits+1))
};
FormatLimits Limits(const Format& f);
// How many codes decode to a finite value (formats of 8 bits or fewer; throws qmx::Error for wider ones).
uint64_t FiniteCodeCount(const Format& f);

// Registry: named formats, in a fixed order the CLI, tests and generators iterate.
struct RegistryEntry {
  Format format;
  const char* comment;  // one line of spec
};
const std::vector<RegistryEntry>& Registry();
// Looks up a registry name or parses a user description:
//   "e3m4", "e6m1", "e4m3:bias=8", "e5m2:special=fn|ieee|finite|fnuz", "e4m3:unsigned",
//   P3109 "binary8p3se" / "binary8p4sf" / "binary8p3ue" / "binary8p3uf" (K bits, precision P,
//   s/u signedness, e extended with Inf / f finite only).
// Throws qmx::Error naming the problem for impossible or malformed descriptions.
Format ParseFormat(const std::string& spec);
// Named registry formats, for code that needs a specific one.
const Format& GetFormat(const std::string& name);
// The registry name or spec an ml_dtypes / torch name stands for ("float8_e4m3fn" and "torch.float8_e4m3fn"
// -> "e4m3", "float8_e8m0fnu" -> "ue8m0", "float4_e2m1fn" -> "e2m1", "float8_e4m3fnuz" -> "e4m3fnuz",
// "float8_e4m3" -> "e4m3:special=ieee", "bfloat16" -> "bf16", ...; and the scale formats "ue4m3" ->
// "e4m3:unsigned:special=fn", "ue5m3" -> "e5m3:unsigned:special=fn"); any other name unchanged. GetFormat and
// ParseFormat accept them.
std::string CanonicalFormatName(const std::string& name);
// Every code of a format of 8 bits or fewer, in code order.
std::vector<uint64_t> AllCodes(const Format& f);
// Decode tables indexed by code (formats of 8 bits or fewer), generated from the descriptor.
std::vector<double> DecodeTable(const Format& f);
std::vector<float> DecodeTableF32(const Format& f);

namespace fmt {
// Registry formats as constexpr values so limits can be static_asserted against the spec tables.
// e4m3: OCP OFP8 E4M3, bias 7, no Inf, NaN S.1111.111, max 448, min subnormal 2^-9.
inline constexpr Format kE4M3{"e4m3", 4, 3, 7, true, Encoding::kFnNan};
// e5m2: OCP OFP8 E5M2, bias 15, IEEE Inf/NaN, max 57344, min subnormal 2^-16.
inline constexpr Format kE5M2{"e5m2", 5, 2, 15, true, Encoding::kIeee};
// e3m2: OCP MX FP6 E3M2, bias 3, no Inf/NaN, max 28, min subnormal 2^-4.
inline constexpr Format kE3M2{"e3m2", 3, 2, 3, true, Encoding::kFinite};
// e2m3: OCP MX FP6 E2M3, bias 1, no Inf/NaN, max 7.5, min subnormal 2^-3.
inline constexpr Format kE2M3{"e2m3", 2, 3, 1, true, Encoding::kFinite};
// e2m1: OCP MX FP4 E2M1, bias 1, no Inf/NaN, max 6, min subnormal 0.5.
inline constexpr Format kE2M1{"e2m1", 2, 1, 1, true, Encoding::kFinite};
// int8: OCP MX INT8, two's complement with implicit scale 2^-6, max 127/64.
inline constexpr Format kInt8{"int8", 0, 6, 0, true, Encoding::kInt};
// ue8m0: OCP MX scale, unsigned, bias 127, 2^-127..2^127, no zero, NaN 0xFF.
inline constexpr Format kUE8M0{"ue8m0", 8, 0, 127, false, Encoding::kExponentOnly};
// The FNUZ FP8 formats (AMD CDNA3's FP8 and BF8; ml_dtypes and PyTorch float8_e4m3fnuz, float8_e5m2fnuz,
// and ml_dtypes' float8_e4m3b11fnuz): no Inf, no negative zero, one NaN, the code 0x80 (the -0 code). Their
// codes are those of P3109's signed finite formats (binary8p4sf is e4m3fnuz's, binary8p3sf e5m2fnuz's); their
// overflow is OFP8's (NaN when not saturating), as those libraries and the hardware convert.
// e4m3fnuz: bias 8, max 240, min normal 2^-7, min subnormal 2^-10.
inline constexpr Format kE4M3Fnuz{"e4m3fnuz", 4, 3, 8, true, Encoding::kFnuz};
// e5m2fnuz: bias 16, max 57344, min normal 2^-15, min subnormal 2^-17.
inline constexpr Format kE5M2Fnuz{"e5m2fnuz", 5, 2, 16, true, Encoding::kFnuz};
// e4m3b11fnuz: bias 11, max 30, min normal 2^-10, min subnormal 2^-13.
inline constexpr Format kE4M3B11Fnuz{"e4m3b11fnuz", 4, 3, 11, true, Encoding::kFnuz};
// bf16: bfloat16, IEEE-style 1-8-7, bias 127.
inline constexpr Format kBF16{"bf16", 8, 7, 127, true, Encoding::kIeee};
// fp16: IEEE 754 binary16, bias 15.
inline constexpr Format kFP16{"fp16", 5, 10, 15, true, Encoding::kIeee};
// fp32: IEEE 754 binary32, bias 127.
inline constexpr Format kFP32{"fp32", 8, 23, 127, true, Encoding::kIeee};
// fp64: IEEE 754 binary64, bias 1023 (an input format; not a quantization target of interest).
inline constexpr Format kFP64{"fp64", 11, 52, 1023, true, Encoding::kIeee};
}  // namespace fmt

// Exponent-and-mantissa helpers used by constexpr checks: value of a positive finite code as
// sig * 2^exp with integer sig (no floating point, so usable in static_assert).
constexpr int64_t CodeSig(const Format& f, uint64_t code) {
  if (f.IsInt()) return static_cast<int64_t>(code);
  const uint64_t field = (code & f.MagMask()) >> f.man_bits;
  const uint64_t mant = code & ((1ull << f.man_bits) - 1);
  return static_cast<int64_t>(field < static_cast<uint64_t>(f.FirstNormalField()) ? mant
                                                                                  : (1ull << f.man_bits) | mant);
}
constexpr int CodeExp(const Format& f, uint64_t code) {
  if (f.IsInt()) return -f.man_bits;
  const int field = static_cast<int>((code & f.MagMask()) >> f.man_bits);
  return (field < f.FirstNormalField() ? f.Emin() : field - f.bias) - f.man_bits;
}

}  // namespace qmx
