// round/round_core.h: the body of the reference rounding routine (qmx/round.h) and of the code decoder it
// reads with, as host-device functions (QMX_HOST_DEVICE), so that the CPU library and the GPU engine
// (gpu/src/engine_convert.cu) compile one source. The library's RoundExact validates the options and calls
// RoundExactCore; the engine validates on the host before a kernel runs. OFP8 rev 1.0 section 5.2.1
// (saturation), OCP MX v1.0 section 5 (FP6/FP4/INT8 clamp), IEEE 754-2019 section 4.3 (rounding
// attributes), P3109 section 4.7.4 (stochastic rounding A/B/C).
#pragma once

#include <cstdint>

#include "qmx/host_device.h"
#include "qmx/round.h"

namespace qmx::detail {

QMX_HOST_DEVICE inline bool IsStochasticCore(Rounding r) {
  return r == Rounding::kSrA || r == Rounding::kSrB || r == Rounding::kSrC;
}

// Number of significant bits of a nonzero word.
QMX_HOST_DEVICE inline int BitLength(uint64_t v) {
#if defined(__CUDA_ARCH__)
  return 64 - __clzll(static_cast<long long>(v));
#else
  return 64 - __builtin_clzll(v);
#endif
}

QMX_HOST_DEVICE inline CodeClass ClassifyCodeCore(const Format& f, uint64_t code) {
  code &= f.CodeMask();
  const uint64_t mag = code & f.MagMask();
  switch (f.encoding) {
    case Encoding::kInt:
      return code == 0 ? CodeClass::kZero : CodeClass::kNormal;
    case Encoding::kExponentOnly:
      return code == f.CanonicalNan() ? CodeClass::kNan : CodeClass::kNormal;
    case Encoding::kIeee: {
      const uint64_t field = mag >> f.man_bits;
      if (field == (1ull << f.exp_bits) - 1) return (mag & ((1ull << f.man_bits) - 1)) ? CodeClass::kNan : CodeClass::kInf;
      break;
    }
    case Encoding::kFnNan:
      if (mag == f.MagMask()) return CodeClass::kNan;
      break;
    case Encoding::kFinite:
      break;
    case Encoding::kP3109Extended:
    case Encoding::kP3109Finite:
    case Encoding::kFnuz:
      if (code == f.CanonicalNan()) return CodeClass::kNan;
      if (f.encoding == Encoding::kP3109Extended && mag == f.PositiveInfCode()) return CodeClass::kInf;
      if (!f.is_signed && mag > f.MaxFiniteCode()) return CodeClass::kNan;  // unreachable: NaN is the top code
      break;
  }
  if (mag == 0) return CodeClass::kZero;
  return (mag >> f.man_bits) == 0 ? CodeClass::kSubnormal : CodeClass::kNormal;
}

QMX_HOST_DEVICE inline DecodedCode DecodeCodeCore(const Format& f, uint64_t code) {
  code &= f.CodeMask();
  DecodedCode d{ClassifyCodeCore(f, code), false, 0, 0};
  if (f.IsInt()) {
    const uint64_t half = 1ull << (f.Bits() - 1);
    d.negative = (code & half) != 0;
    d.sig = d.negative ? ((1ull << f.Bits()) - code) : code;
    d.exp = -f.man_bits;
    return d;
  }
  d.negative = (code & f.SignBit()) != 0;
  if (d.cls == CodeClass::kNan || d.cls == CodeClass::kInf || d.cls == CodeClass::kZero) return d;
  d.sig = static_cast<uint64_t>(CodeSig(f, code));
  d.exp = CodeExp(f, code);
  return d;
}

// fp16, bf16, fp32 or fp64 (the fields fmt::kFP16 .. kFP64 compare equal on; spelled out because device
// code cannot read the host's format constants).
QMX_HOST_DEVICE inline bool IsInterchange(const Format& f) {
  if (f.encoding != Encoding::kIeee || !f.is_signed) return false;
  return (f.exp_bits == 5 && f.man_bits == 10 && f.bias == 15) || (f.exp_bits == 8 && f.man_bits == 7 && f.bias == 127) ||
         (f.exp_bits == 8 && f.man_bits == 23 && f.bias == 127) || (f.exp_bits == 11 && f.man_bits == 52 && f.bias == 1023);
}

QMX_HOST_DEVICE inline ExactValue ReadExactCore(const Format& src, uint64_t bits) {
  const DecodedCode d = DecodeCodeCore(src, bits);
  ExactValue x{ExactValue::Kind::kFinite, d.negative, d.sig, d.exp};
  if (d.cls == CodeClass::kNan) {
    x.kind = ExactValue::Kind::kNan;
    x.signaling = IsInterchange(src) && ((bits >> (src.man_bits - 1)) & 1) == 0;
  }
  if (d.cls == CodeClass::kInf) x.kind = ExactValue::Kind::kInf;
  if (d.cls == CodeClass::kZero) x.kind = ExactValue::Kind::kZero;
  return x;
}

// The discarded part nu of |x| / 2^qe, in [0, 1): the low `shift` bits of sig, over 2^shift.
struct Fraction {
  uint64_t sig;
  int shift;  // <= 0: nothing discarded

  QMX_HOST_DEVICE uint64_t Rem() const {
    if (shift <= 0) return 0;
    return shift >= 64 ? sig : sig & ((1ull << shift) - 1);
  }
  QMX_HOST_DEVICE bool IsZero() const { return Rem() == 0; }
  // floor(nu * 2^k), k <= 34.
  QMX_HOST_DEVICE uint64_t FloorScaled(int k) const {
    const uint64_t rem = Rem();
    if (shift <= 0) return 0;
    if (shift >= k) return shift - k >= 64 ? 0 : rem >> (shift - k);
    return rem << (k - shift);
  }
  // True when nu * 2^k is an integer.
  QMX_HOST_DEVICE bool ExactScaled(int k) const {
    const uint64_t rem = Rem();
    if (shift <= k) return true;
    const int drop = shift - k;
    return drop >= 64 ? rem == 0 : (rem & ((1ull << drop) - 1)) == 0;
  }
};

// A NaN with a sign where the format's NaN has one, and in an IEEE-style format the payload opt.nan_payload
// names. NaN inputs follow opt.nan_sign; a NaN made from an overflow or an Inf always carries the value's sign
// (as NVIDIA's cvt does: -500 -> e4m3 nosat is 0xFF).
QMX_HOST_DEVICE inline uint64_t SignedNan(const Format& dst, bool negative, NanPayload payload = NanPayload::kDefault) {
  const bool signed_nan = dst.encoding == Encoding::kIeee || dst.encoding == Encoding::kFnNan;
  uint64_t nan = dst.CanonicalNan();
  if (dst.encoding == Encoding::kIeee && payload != NanPayload::kDefault) {
    const uint64_t man = payload == NanPayload::kQuiet ? 1ull << (dst.man_bits - 1) : (1ull << dst.man_bits) - 1;
    nan = (((1ull << dst.exp_bits) - 1) << dst.man_bits) | man;
  }
  return nan | (signed_nan && negative ? dst.SignBit() : 0);
}

// Attach the sign to a magnitude code.
QMX_HOST_DEVICE inline uint64_t ApplySign(const Format& dst, uint64_t mag, bool negative) {
  if (!negative || (mag == 0 && !dst.HasNegativeZero())) return mag;
  if (dst.IsInt()) return ((1ull << dst.Bits()) - mag) & dst.CodeMask();
  return mag | dst.SignBit();
}

// Ties-to-even and round-to-odd look at the code of the lower candidate: with mantissa bits its
// parity is the parity of the integer significand; with none (ue8m0, P3109 p1) it is the parity of
// the exponent field.
QMX_HOST_DEVICE inline bool LowerCandidateIsEven(const Format& dst, uint64_t i, int e) {
  if (dst.IsInt() || dst.man_bits > 0 || i == 0) return (i & 1) == 0;
  const int field = e - dst.Emin() + dst.FirstNormalField();
  return (field & 1) == 0;
}

// Does this mode round a positive (negative=false) overflow toward zero, i.e. to the largest finite?
QMX_HOST_DEVICE inline bool OverflowGoesToMax(Rounding r, bool negative) {
  switch (r) {
    case Rounding::kRz:
    case Rounding::kRo:
      return true;
    case Rounding::kRu:
      return negative;
    case Rounding::kRd:
      return !negative;
    default:
      return false;
  }
}

// RoundExact without the validation of opt (the caller has called ValidateCastOptions(dst, opt)).
// One function of about 160 lines on purpose, as SoftFloat's roundPack is: its numbered steps are the
// definition every fast path and the GPU engine are checked against, read top to bottom in one place.
QMX_HOST_DEVICE inline RoundResult RoundExactCore(const ExactValue& x, const Format& dst, const CastOptions& opt,
                                                  uint32_t random_bits) {
  const uint64_t max_code = dst.MaxFiniteCode();
  // An unsigned destination under negative=magnitude converts |x|.
  const bool neg = x.negative && (dst.is_signed || opt.negative_unsigned == NegativeUnsigned::kInvalid);
  // P3109 formats follow the interim report's Saturate table (v4.0 section 4.7.5; v3.2.1 section 4.9.2 agrees
  // on SatFinite and SatPropagate) where it differs from OFP8's rules, which keep ruling the OCP formats
  // (docs/numerics.md "P3109 saturation" lists the rows and where the report's versions differ).
  const bool p3109 = dst.encoding == Encoding::kP3109Extended || dst.encoding == Encoding::kP3109Finite;
  const bool unsigned_clamps = p3109 && !dst.is_signed && opt.saturation != Saturation::kNoSat;

  // 1. NaN: the format's NaN, or the named fallback where the format has none. A signaling NaN signals
  //    invalid either way (IEEE 754-2019 7.2(a)).
  if (x.kind == ExactValue::Kind::kNan) {
    if (dst.HasNan())
      return {SignedNan(dst, neg && opt.nan_sign == NanSign::kKeep, opt.nan_payload), x.signaling ? uint32_t{kFlagInvalid} : 0u};
    return {opt.nan_fallback == NanFallback::kMaxPositive ? max_code : 0, kFlagInvalid};
  }

  // 2. Negative values have no place in an unsigned format (-0 reads as +0 below). P3109: SatFinite and
  //    SatPropagate clamp them to the format's lowest value, 0 (the report's M_lo); under SatNone -Inf is NaN
  //    (row 2), and a finite negative is decided after rounding (step 8).
  const bool is_zero = x.kind == ExactValue::Kind::kZero || (x.kind == ExactValue::Kind::kFinite && x.sig == 0);
  if (!dst.is_signed && neg && !is_zero) {
    if (unsigned_clamps) return {0, (x.kind == ExactValue::Kind::kInf ? 0u : uint32_t{kFlagInexact}) | kFlagSaturated};
    if (!p3109 || x.kind == ExactValue::Kind::kInf) return {dst.CanonicalNan(), kFlagInvalid};
  }

  // 3. Infinity: clamped under satfinite, kept (or NaN where there is no Inf) otherwise. P3109 formats
  //    without Inf take their largest finite value under every mode (the report's Saturate rows 1-2).
  if (x.kind == ExactValue::Kind::kInf) {
    if (opt.saturation == Saturation::kSatFinite) return {ApplySign(dst, max_code, neg), kFlagSaturated};
    if (dst.HasInf()) return {ApplySign(dst, dst.PositiveInfCode(), neg), 0};
    if (p3109) return {ApplySign(dst, max_code, neg), kFlagSaturated};
    return {SignedNan(dst, neg, opt.nan_payload), kFlagInvalid};
  }

  // 4. Zero keeps its sign where the format has -0; a format without zero gives its smallest value.
  if (is_zero) {
    if (!dst.HasZero()) return {dst.MinPositiveCode(), kFlagInexact | kFlagUnderflow};
    return {ApplySign(dst, 0, neg), 0};
  }

  // 5. Place |x| = sig * 2^exp on the destination grid: the binade e of its leading bit (no lower
  //    than the smallest normal binade, where subnormals share its quantum), and the quantum 2^qe.
  const int lead = x.exp + BitLength(x.sig) - 1;  // floor(log2 |x|)
  int e = lead > dst.Emin() ? lead : dst.Emin();
  int qe = dst.IsInt() ? dst.Emin() : e - dst.man_bits;

  // 6. Split |x| / 2^qe into an integer I and a discarded fraction nu in [0, 1).
  uint64_t i;
  const int shift = qe - x.exp;
  if (shift <= 0) {
    // Nothing is discarded (a narrow input into a wide format, or a large value into fixed point).
    // Fixed-point magnitudes too large for 62 bits are clamped to one that is certain to overflow.
    i = -shift >= 62 - BitLength(x.sig) ? (1ull << 62) : x.sig << -shift;
  } else {
    i = shift >= 64 ? 0 : x.sig >> shift;
  }
  const Fraction nu{x.sig, shift};
  const bool inexact = !nu.IsZero();

  // 7. Decide whether to round away from zero (to I + 1), from the discarded fraction f and whether the
  //    lower candidate's code is even.
  // sr_bits is checked (1..32) by ValidateCastOptions where the rounding is stochastic; any other rounding
  // ignores it.
  const int sr_bits = IsStochasticCore(opt.rounding) ? opt.sr_bits : 8;
  const uint64_t n_mask = sr_bits >= 32 ? 0xFFFFFFFFull : (1ull << sr_bits) - 1;
  const uint64_t r = random_bits & n_mask;
  const uint64_t two_n = 1ull << sr_bits;
  const auto round_away = [&](const Fraction& f, bool lower_even) {
    const bool f_inexact = !f.IsZero();
    const bool half_or_more = f.FloorScaled(1) == 1;
    const bool above_half = half_or_more && !f.ExactScaled(1);
    switch (opt.rounding) {
      case Rounding::kRne:
        return above_half || (half_or_more && !lower_even);
      case Rounding::kRna:
        return half_or_more;
      case Rounding::kRz:
        return false;
      case Rounding::kRu:
        return f_inexact && !neg;
      case Rounding::kRd:
        return f_inexact && neg;
      case Rounding::kRo:
        return f_inexact && lower_even;
      case Rounding::kSrA:
        return f.FloorScaled(opt.sr_bits) + r >= two_n;
      case Rounding::kSrB:
        return f.FloorScaled(opt.sr_bits + 1) + 2 * r + 1 >= 2 * two_n;
      case Rounding::kSrC: {
        const uint64_t fl = f.FloorScaled(opt.sr_bits);
        const bool half = (f.FloorScaled(opt.sr_bits + 1) & 1) != 0;
        const bool sticky = !f.ExactScaled(opt.sr_bits + 1);
        const uint64_t rne = fl + ((half && (sticky || (fl & 1))) ? 1 : 0);
        return rne + r >= two_n;
      }
    }
    return false;
  };
  if (round_away(nu, LowerCandidateIsEven(dst, i, e))) ++i;

  // Tiny: |x| below the smallest normal magnitude (before rounding); after rounding (IEEE 754-2019 7.5),
  // unless |x| rounded to the format's precision with an unbounded exponent reaches it, which only a value
  // of the binade just below can: its significand all ones at that precision, rounded away (the same rule
  // and random bits at the finer quantum; the lower candidate, all ones, is odd).
  uint32_t flags = inexact ? static_cast<uint32_t>(kFlagInexact) : 0u;
  bool tiny = !dst.IsInt() && lead < dst.Emin();
  if (tiny && opt.tininess == Tininess::kAfterRounding && lead == dst.Emin() - 1) {
    const int shift_u = lead - dst.man_bits - x.exp;
    const uint64_t iu = shift_u <= 0 ? x.sig << -shift_u : x.sig >> shift_u;
    const Fraction nu_u{x.sig, shift_u};
    if (iu == (1ull << (dst.man_bits + 1)) - 1 && !nu_u.IsZero() && round_away(nu_u, false)) tiny = false;
  }
  if (tiny && inexact) flags |= kFlagUnderflow;

  // 8. Rounded to zero: +-0, or the smallest value of a format without zero. A P3109 unsigned format's
  //    negative input that rounds to 0 is 0 (no -0); under SatNone one that does not is 0 for RZ and RU
  //    (row 5) and NaN otherwise (row 6).
  if (i != 0 && p3109 && !dst.is_signed && neg) {
    if (opt.rounding == Rounding::kRz || opt.rounding == Rounding::kRu) return {0, kFlagInexact | kFlagSaturated};
    return {dst.CanonicalNan(), kFlagInvalid};
  }
  if (i == 0) {
    if (tiny || dst.IsInt()) flags |= kFlagUnderflow;
    if (!dst.HasZero()) return {dst.MinPositiveCode(), flags};
    return {ApplySign(dst, 0, neg), flags};
  }

  // 9. Encode the magnitude. A carry out of the significand moves to the next binade.
  uint64_t mag;
  if (dst.IsInt()) {
    mag = i;
  } else {
    if (i >> (dst.man_bits + 1)) {
      i >>= 1;
      ++e;
    }
    const bool normal = (i >> dst.man_bits) != 0;
    const uint64_t field = normal ? static_cast<uint64_t>(e - dst.Emin() + dst.FirstNormalField()) : 0;
    mag = (field << dst.man_bits) | (i & ((1ull << dst.man_bits) - 1));
  }

  // 10. Overflow: past the largest finite code (codes of one sign are ordered like their values). P3109
  //     under SatNone: RZ, RU (negative) and RD (positive) clamp (rows 4-5); round-to-odd clamps only in an
  //     unsigned extended format, whose Inf code is even (row 3), and gives Inf otherwise (row 7); a format
  //     without Inf takes its largest value in every mode (rows 6-7).
  if (mag > max_code) {
    flags |= kFlagOverflow | kFlagInexact;
    if (opt.saturation != Saturation::kNoSat) return {ApplySign(dst, max_code, neg), flags | kFlagSaturated};
    const bool odd_clamps = !p3109 || (!dst.is_signed && dst.HasInf());
    const bool to_max = opt.rounding == Rounding::kRo ? odd_clamps : OverflowGoesToMax(opt.rounding, neg);
    if (to_max) return {ApplySign(dst, max_code, neg), flags};
    if (dst.HasInf()) return {ApplySign(dst, dst.PositiveInfCode(), neg), flags};
    if (p3109) return {ApplySign(dst, max_code, neg), flags | kFlagSaturated};
    return {SignedNan(dst, neg, opt.nan_payload), flags};
  }

  // 11. Flush a subnormal result when asked.
  if (opt.subnormals == Subnormals::kFlush && dst.HasSubnormals() && (mag >> dst.man_bits) == 0) {
    return {ApplySign(dst, 0, neg), flags | kFlagUnderflow | kFlagInexact};
  }

  // 12. Attach the sign.
  return {ApplySign(dst, mag, neg), flags};
}

// Convert without the validation: a code of src into dst, a subnormal input read as zero when the
// options flush subnormals.
QMX_HOST_DEVICE inline RoundResult ConvertCore(const Format& src, uint64_t bits, const Format& dst, const CastOptions& opt,
                                               uint32_t random_bits) {
  ExactValue x = ReadExactCore(src, bits);
  if (opt.subnormals == Subnormals::kFlush && ClassifyCodeCore(src, bits) == CodeClass::kSubnormal)
    x.kind = ExactValue::Kind::kZero;
  return RoundExactCore(x, dst, opt, random_bits);
}

}  // namespace qmx::detail
