// convert_tiers-inl.h: the rounding tiers (general, lite, normal, fused) of the Highway conversion and MX kernels:
// one vector of FP32 bits to codes of a format of 8 bits or fewer, equal bit for bit to round/round_pack_ref.cc
// (OFP8 rev 1.0 section 5.2.1, OCP MX v1.0 section 5, IEEE 754-2019 section 4.3, P3109 section 4.7.4).
//
// The arithmetic, per lane, for an input |x| = sig * 2^(Ee - 150) scaled by 2^eoff (MX) :
//   Ee  = max(E, 1), the FP32 exponent field; sig has the implicit bit for normal inputs;
//   En  = the exponent of x's leading bit, biased like FP32 (for FP32 subnormals from float(mant));
//   Eh  = max(En + eoff, emin127), the binade that sets the quantum (subnormals share the lowest one);
//   s   = Eh - (Ee + eoff) + 23 - man_bits, the number of significand bits discarded (>= -man_bits);
//   pre = ((Eh - emin127) << man_bits) + (sig >> s), the magnitude code rounded toward zero; adding 1
//         carries into the exponent field exactly as the reference's step 9 does.
// The discarded part rem = sig mod 2^s decides the rounding; the code is then checked for overflow,
// flushed, given its sign, and the specials (NaN, Inf, negative into unsigned) override it.
// That general kernel (ConvertVec) serves every case; two shorter tiers take the vectors they can
// (NormalVec: every lane in dst's normal binades; LiteVec: every lane finite), see ConvertAny. Float
// formats under RNE and SR-A take the fused tier first (FusedVec: branch-free over the whole finite
// range, the lanes below the normal binades rounded in the FPU), and MX blocks run in two passes per
// batch (MxLoop).

// Per-target include guard: each target's pass through foreach_target.h compiles this file again.
#if defined(QMX_ROUND_CONVERT_TIERS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QMX_ROUND_CONVERT_TIERS_INL_H_
#undef QMX_ROUND_CONVERT_TIERS_INL_H_
#else
#define QMX_ROUND_CONVERT_TIERS_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "round/convert_params.h"
#include "simd_lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// FP32 bits of a float format's largest finite value (code max_code), for the lite path's range test.
inline uint32_t MaxFiniteBits(const ConvertParams& p) {
  if (p.kind != Kind::kFloat || p.man_bits < 1 || p.emin127 < 1) return 0;
  const uint32_t field = p.max_code >> p.man_bits, mant = p.max_code & ((1u << p.man_bits) - 1);
  if (field == 0) return 0;
  const int64_t e = static_cast<int64_t>(field) - 1 + p.emin127;  // FP32 exponent field
  if (e < 1 || e > 254) return 0;
  return static_cast<uint32_t>(e) << 23 | mant << (23 - p.man_bits);
}

// A shift count that is the same in every lane. AVX2 and AVX-512 shift each lane by its own count in one
// uop; the shift by an xmm count (ShiftRightSame with a runtime count) takes two on Intel cores. Targets
// without per-lane shifts use the xmm form.
struct SameShift {
  int n = 0;
  VU v;
  SameShift() : v(hn::Zero(DU())) {}
  explicit SameShift(int count) : n(count), v(hn::Set(DU(), static_cast<uint32_t>(count))) {}
};
HWY_INLINE VU ShrS(VU x, const SameShift& s) {
#if HWY_TARGET <= HWY_AVX2
  return hn::Shr(x, s.v);
#else
  return hn::ShiftRightSame(x, s.n);
#endif
}
HWY_INLINE VU ShlS(VU x, const SameShift& s) {
#if HWY_TARGET <= HWY_AVX2
  return hn::Shl(x, s.v);
#else
  return hn::ShiftLeftSame(x, s.n);
#endif
}

// The fused path's constants (see FusedVec). Loops copy them into a local first: the code stores through
// uint8_t* may alias any object whose address escaped, which would force a reload of every constant.
struct FusedK {
  VU thr, kn, magic_bits, max_code, ovf, sign_bit, sr_mask, nz_all;
  VU lsb;       // AVX-512: 2^s0 (RNE)
  VF magic, half_min;  // half_min, AVX-512: 2^(emin - 1) (SR)
  SameShift s0, sign_shift, sr_n, sr_up;  // sr_up = s0 - sr_n
  bool sat = false, neg_zero = false;
  // OCP E2M1 under RNE with satfinite (kCommon) on AVX-512: the table of E2m1Codes4 (convert_io-inl.h),
  // the 64 codes of its keys as 16-bit lanes, 0-31 in e2m1_lo and 32-63 in e2m1_hi.
  bool e2m1 = false;
  VU e2m1_lo, e2m1_hi;
};

// Broadcast constants of one call.
struct Consts {
  explicit Consts(const ConvertParams& p)
      : emin127(hn::Set(DI(), p.emin127)),
        sbase(hn::Set(DI(), p.sbase)),
        big_e(hn::Set(DI(), p.big_e)),
        sr_bits(hn::Set(DI(), static_cast<int32_t>(p.sr_bits))),
        adj(hn::Set(DU(), p.adj)),
        max_code(hn::Set(DU(), p.max_code)),
        sign_bit(hn::Set(DU(), p.sign_bit)),
        min_normal(hn::Set(DU(), p.min_normal_mag)),
        flush_below(hn::Set(DU(), p.flush_below)),
        int_mask(hn::Set(DU(), p.int_mask)),
        sr_mask(hn::Set(DU(), p.sr_mask)),
        nan_pos(hn::Set(DU(), p.nan_code[0])),
        nan_neg(hn::Set(DU(), p.nan_code[1])),
        inf_pos(hn::Set(DU(), p.inf_code[0])),
        inf_neg(hn::Set(DU(), p.inf_code[1])),
        ovf_pos(hn::Set(DU(), p.ovf_code[0])),
        ovf_neg(hn::Set(DU(), p.ovf_code[1])),
        invalid(hn::Set(DU(), p.invalid_code)),
        s0(hn::Set(DU(), static_cast<uint32_t>(p.sbase))),
        c_norm(hn::Set(DU(), static_cast<uint32_t>(p.emin127 - 1) << (p.man_bits & 31))),
        man_bits(p.man_bits),
        sign_shift(p.sign_bit != 0 ? 31 - __builtin_ctz(p.sign_bit) : 0),
        max_bits(MaxFiniteBits(p)),
        emin127_s(p.emin127),
        sbase_s(p.sbase),
        sr_n(static_cast<int>(p.sr_bits)),
        lite(p.kind == Kind::kFloat && p.is_unsigned == 0 && p.adj == 0 && p.man_bits >= 1 && p.emin127 >= 1 && p.flush_below == 0 &&
             p.flush_out == 0 &&
             (p.rounding == Rounding::kRne || p.rounding == Rounding::kRna || p.rounding == Rounding::kRz ||
              p.rounding == Rounding::kRu || p.rounding == Rounding::kRd ||
              (p.rounding == Rounding::kSrA && p.sr_bits <= 8 && static_cast<int>(p.sr_bits) <= p.sbase))),
        is_int(p.kind == Kind::kInt),
        has_adj(p.adj != 0),
        flush_in(p.flush_below != 0),
        flush_out(p.flush_out != 0),
        neg_zero(p.has_neg_zero != 0),
        is_unsigned(p.is_unsigned != 0),
        neg_to_zero(p.neg_to_zero != 0) {
    InitFused(p);
    InitE2m1Table(p);
  }
  VI emin127, sbase, big_e, sr_bits;
  VU adj, max_code, sign_bit, min_normal, flush_below, int_mask, sr_mask;
  VU nan_pos, nan_neg, inf_pos, inf_neg, ovf_pos, ovf_neg, invalid;
  VU s0, c_norm;  // lite path: discarded bits in the normal binades, and the exponent rebias in code units
  int man_bits, sign_shift;
  uint32_t max_bits;  // FP32 bits of the largest finite value (lite formats)
  int emin127_s, sbase_s, sr_n;
  bool lite;  // the lite path may serve this call (float format with mantissa bits, simple mode)
  bool is_int, has_adj, flush_in, flush_out, neg_zero, is_unsigned, neg_to_zero;
  // Fused path (FusedVec): whether this call may take it at all, and its constants.
  bool fused = false;
  FusedK f;

 private:
  void InitFused(const ConvertParams& p);
  void InitE2m1Table(const ConvertParams& p);
};

inline void Consts::InitFused(const ConvertParams& p) {
  const bool rne = p.rounding == Rounding::kRne;
  const bool sra = p.rounding == Rounding::kSrA;
  const int m = p.man_bits, n = static_cast<int>(p.sr_bits);
  // Float formats whose half subnormal quantum q/2 = 2^(emin - m - 1) lies above FP32's subnormals, so that
  // an FP32 intermediate that underflowed rounds to the same code as the exact value.
  if (p.kind != Kind::kFloat || p.is_unsigned != 0 || p.adj != 0 || m < 1 || p.sbase != 23 - m ||
      p.flush_below != 0 || p.flush_out != 0 || max_bits == 0 || p.emin127 - m - 1 < 2 || p.emin127 - m + 23 > 254)
    return;
  if (!rne && !(sra && n >= 1 && n <= p.sbase && n + m <= 29)) return;
  // SR's multiplier 2^(N + m - emin) as an FP32 exponent field: at least 1.0, finite.
  const int sr_exp = 254 + n + m - p.emin127;
  if (sra && (sr_exp < 127 || sr_exp > 254)) return;
  if (p.ovf_code[1] != (p.ovf_code[0] | p.sign_bit)) return;
  const DU du;
  const DF df;
  const uint32_t rebias = static_cast<uint32_t>(p.emin127 - 1) << 23;
  f.thr = hn::Set(du, static_cast<uint32_t>(p.emin127) << 23);
  f.kn = hn::Set(du, (rne ? (1u << (p.sbase - 1)) - 1 : 0u) - rebias);
  f.lsb = hn::Set(du, 1u << p.sbase);
  f.half_min = hn::BitCast(df, hn::Set(du, static_cast<uint32_t>(p.emin127 - 1) << 23));
  const uint32_t magic_bits = rne ? static_cast<uint32_t>(p.emin127 - m + 23) << 23 : static_cast<uint32_t>(sr_exp) << 23;
  float magic;
  std::memcpy(&magic, &magic_bits, 4);
  f.magic_bits = hn::Set(du, magic_bits);
  f.magic = hn::Set(df, magic);
  f.max_code = max_code;
  f.ovf = hn::Set(du, p.ovf_code[0]);
  f.sign_bit = sign_bit;
  f.sr_mask = sr_mask;
  f.s0 = SameShift(p.sbase);
  f.sign_shift = SameShift(sign_shift);
  f.sr_n = SameShift(sr_n);
  f.sr_up = SameShift(p.sbase - sr_n);
  f.sat = p.ovf_code[0] == p.max_code;
  f.neg_zero = neg_zero;
  f.nz_all = hn::Set(du, neg_zero ? 0xFFFFFFFFu : 0u);
  fused = true;
}

// |x| bits with input subnormals read as zero when flushing.
HWY_INLINE VU AbsBits(const Consts& k, VU bits) {
  const DU du;
  VU a = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
  if (k.flush_in) a = hn::IfThenZeroElse(hn::Lt(a, k.flush_below), a);
  return a;
}

// One vector of FP32 bits -> codes (in 32-bit lanes). eoff is added to the exponent (MX: -log2 X).
template <Rounding R>
HWY_INLINE VU ConvertVec(const Consts& k, VU bits, VI eoff, VU rbits) {
  const DU du;
  const DI di;
  const DF df;
  const VU one = hn::Set(du, 1u);
  const VU zero = hn::Zero(du);
  const VI zero_i = hn::Zero(di);
  const VI c31 = hn::Set(di, 31);

  const auto neg = hn::Ne(hn::And(bits, hn::Set(du, 0x80000000u)), zero);
  const VU a = AbsBits(k, bits);
  const VU e_field = hn::ShiftRight<23>(a);
  const VU mant = hn::And(a, hn::Set(du, 0x7FFFFFu));
  const auto is_norm = hn::Ne(e_field, zero);
  const VU sig = hn::IfThenElse(is_norm, hn::Or(mant, hn::Set(du, 0x800000u)), mant);
  const VI ee = hn::BitCast(di, hn::Max(e_field, one));
  // float(mant) is exact (mant < 2^23); its exponent locates the leading bit of a subnormal input.
  const VI en_sub = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(hn::BitCast(du, hn::ConvertTo(df, hn::BitCast(di, mant))))),
                            hn::Set(di, 149));
  const VI en = hn::IfThenElse(hn::RebindMask(di, is_norm), ee, en_sub);
  const VI es = hn::Add(ee, eoff);
  const VI eh = hn::Max(hn::Add(en, eoff), k.emin127);
  const VI s = hn::Add(hn::Sub(eh, es), k.sbase);
  const VU sr = hn::BitCast(du, hn::Min(hn::Max(s, zero_i), c31));
  // A left shift past 31 gives 0, as x86's variable vector shifts do; spelled out, because the scalar
  // and EMU128 targets shift with C++'s <<, undefined there (UBSan).
  const VI nsl = hn::Max(hn::Neg(s), zero_i);
  const VU sigl = hn::IfThenZeroElse(hn::RebindMask(du, hn::Gt(nsl, c31)), hn::Shl(sig, hn::BitCast(du, hn::Min(nsl, c31))));
  const VU trunc = hn::Shr(sigl, sr);
  const VU rem = hn::Sub(sigl, hn::Shl(trunc, sr));
  const VU pre = hn::Add(hn::ShiftLeftSame(hn::BitCast(du, hn::Sub(eh, k.emin127)), k.man_bits), trunc);
  const VU mag_t = k.has_adj ? hn::Sub(hn::Max(pre, k.adj), k.adj) : pre;
  const auto odd = hn::Ne(hn::And(mag_t, one), zero);
  const auto inexact = hn::Ne(rem, zero);

  hn::Mask<DU> away;
  if constexpr (R == Rounding::kRne || R == Rounding::kRna) {
    const VU twice = hn::ShiftLeft<1>(rem);
    const VU full = hn::Shl(one, sr);
    if constexpr (R == Rounding::kRne) {
      away = hn::Or(hn::Gt(twice, full), hn::And(hn::Eq(twice, full), odd));
    } else {
      away = hn::Or(hn::Gt(twice, full), hn::Eq(twice, full));
    }
  } else if constexpr (R == Rounding::kRz) {
    away = hn::Lt(one, zero);  // never
  } else if constexpr (R == Rounding::kRu) {
    away = hn::AndNot(neg, inexact);
  } else if constexpr (R == Rounding::kRd) {
    away = hn::And(neg, inexact);
  } else if constexpr (R == Rounding::kRo) {
    away = hn::AndNot(odd, inexact);
  } else {
    // Stochastic: t = floor(nu * 2^N); away iff R > (2^N - 1 - t), or R equals it and the variant's
    // extra unit (B: the bit below t; C: RNE's carry) is set. See docs/numerics.md "Stochastic rounding".
    const VI d = hn::Sub(s, k.sr_bits);
    const VU dpos = hn::BitCast(du, hn::Min(hn::Max(d, zero_i), c31));
    const VU dneg = hn::BitCast(du, hn::Min(hn::Max(hn::Neg(d), zero_i), c31));
    const VU t = hn::IfThenElse(hn::RebindMask(du, hn::Not(hn::Lt(d, zero_i))), hn::Shr(rem, dpos), hn::Shl(rem, dneg));
    const VU dd = hn::Sub(k.sr_mask, t);
    const VU r = hn::And(rbits, k.sr_mask);
    away = hn::Gt(r, dd);
    if constexpr (R != Rounding::kSrA) {
      const VU d1 = hn::BitCast(du, hn::Min(hn::Max(hn::Sub(d, hn::Set(di, 1)), zero_i), c31));
      const auto has_b = hn::RebindMask(du, hn::Gt(d, zero_i));
      const VU high = hn::Shr(rem, d1);
      auto extra = hn::And(has_b, hn::Ne(hn::And(high, one), zero));
      if constexpr (R == Rounding::kSrC) {
        const auto sticky = hn::Ne(hn::Sub(rem, hn::Shl(high, d1)), zero);
        const auto t_odd = hn::Ne(hn::And(t, one), zero);
        extra = hn::And(extra, hn::Or(sticky, t_odd));
      }
      away = hn::Or(away, hn::And(extra, hn::Eq(r, dd)));
    }
  }

  VU mag = hn::Add(pre, hn::IfThenElseZero(away, one));
  if (k.has_adj) mag = hn::Sub(hn::Max(mag, k.adj), k.adj);
  if (k.is_int) mag = hn::IfThenElse(hn::RebindMask(du, hn::Not(hn::Lt(es, k.big_e))), hn::Add(k.max_code, one), mag);
  const auto ovf = hn::Gt(mag, k.max_code);
  const auto rounds_to_zero = hn::Eq(mag, zero);  // before flushing: a flushed result was not rounded to 0
  if (k.flush_out) mag = hn::IfThenZeroElse(hn::And(hn::Ne(mag, zero), hn::Lt(mag, k.min_normal)), mag);

  VU code;
  if (k.is_int) {
    code = hn::IfThenElse(neg, hn::And(hn::Sub(zero, mag), k.int_mask), mag);
  } else {
    const auto put_sign = k.neg_zero ? neg : hn::And(neg, hn::Ne(mag, zero));
    code = hn::Or(mag, hn::IfThenElseZero(put_sign, k.sign_bit));
  }
  code = hn::IfThenElse(ovf, hn::IfThenElse(neg, k.ovf_neg, k.ovf_pos), code);
  const VU inf_bits = hn::Set(du, 0x7F800000u);
  code = hn::IfThenElse(hn::Eq(a, inf_bits), hn::IfThenElse(neg, k.inf_neg, k.inf_pos), code);
  if (k.is_unsigned) {
    auto bad = hn::And(neg, hn::Ne(a, zero));
    // P3109: a finite negative that rounds to 0 is 0 (code 0 already: no -0 code), and -Inf keeps the
    // reference's code for it (set above).
    if (k.neg_to_zero) bad = hn::AndNot(hn::Or(rounds_to_zero, hn::Eq(a, inf_bits)), bad);
    code = hn::IfThenElse(bad, k.invalid, code);
  }
  code = hn::IfThenElse(hn::Gt(a, inf_bits), hn::IfThenElse(neg, k.nan_neg, k.nan_pos), code);
  return code;
}

// ------------------------------------------------------------------ lite path
// For vectors whose lanes are all finite, the common float formats and the simple modes need far less:
// lanes in dst's normal binades round the FP32 bits themselves (constant shift s0, exponent rebiased by
// c_norm, the carry moving into the exponent field), the others round the significand by a variable
// shift; rounding is one addition before the shift (RNE adds half - 1 plus the kept LSB; SR-A adds the N
// random bits at the top of the discarded bits, as cvt.rs does). Equal to ConvertVec; tests check both.
struct Lite {
  bool ok;   // this block (scale) can take the lite path
  VU thr;    // |x| bits >= thr: the scaled value lies in dst's normal binades
  VI sub_base;
  VU eoffs;  // eoff << 23, the scale applied to the FP32 exponent field
  VU span;   // |x| bits - thr < span: normal and at most the largest finite value (the normal path)
  VU c_norm_eoff;  // exponent rebias in code units, scale included
};

HWY_INLINE Lite MakeLite(const Consts& k, int32_t eoff) {
  Lite l;
  const int32_t lo = k.emin127_s - eoff;  // FP32 exponent field where dst's normal binades start
  l.ok = k.lite && lo >= 1 && lo <= 255;
  l.thr = hn::Set(DU(), static_cast<uint32_t>(lo > 255 ? 255 : (lo < 1 ? 1 : lo)) << 23);
  l.sub_base = hn::Set(DI(), lo + k.sbase_s);
  l.eoffs = hn::Set(DU(), static_cast<uint32_t>(eoff) << 23);
  // Largest |x| whose scaled value is at most max: max_bits - eoff << 23, capped at FP32's max.
  // eoff * 2^23 as a product: eoff is negative for scales above 1, and shifting a negative value left is
  // undefined before C++20 (UBSan flags it).
  const int64_t hi = std::min<int64_t>(static_cast<int64_t>(k.max_bits) - static_cast<int64_t>(eoff) * (int64_t{1} << 23), 0x7F7FFFFF);
  const int64_t thr = static_cast<int64_t>(lo) * (int64_t{1} << 23);
  l.span = hn::Set(DU(), static_cast<uint32_t>(l.ok && k.max_bits != 0 && hi >= thr ? hi - thr + 1 : 0));
  l.c_norm_eoff = hn::Set(DU(), static_cast<uint32_t>(((k.emin127_s - 1) - eoff)) << k.man_bits);
  return l;
}

template <Rounding R>
HWY_INLINE VU LiteVec(const Consts& k, const Lite& l, VU bits, VU rbits) {
  const DU du;
  const DI di;
  const VU one = hn::Set(du, 1u);
  const VU zero = hn::Zero(du);
  const auto neg = hn::Ne(hn::And(bits, hn::Set(du, 0x80000000u)), zero);
  const VU a = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
  const auto low = hn::Lt(a, l.thr);
  const VU sig = hn::Or(hn::And(a, hn::Set(du, 0x7FFFFFu)), hn::Min(a, hn::Set(du, 0x800000u)));
  const VI s_sub = hn::Sub(l.sub_base, hn::BitCast(di, hn::Max(hn::ShiftRight<23>(a), one)));
  const VU sh = hn::IfThenElse(low, hn::BitCast(du, hn::Min(s_sub, hn::Set(di, 31))), k.s0);
  VU y = hn::IfThenElse(low, sig, hn::Add(a, l.eoffs));
  VU inc;
  if constexpr (R == Rounding::kRne) {
    inc = hn::Add(hn::Sub(hn::ShiftRight<1>(hn::Shl(one, sh)), one), hn::And(hn::Shr(y, sh), one));
  } else if constexpr (R == Rounding::kRna) {
    inc = hn::ShiftRight<1>(hn::Shl(one, sh));
  } else if constexpr (R == Rounding::kRz) {
    inc = zero;
  } else if constexpr (R == Rounding::kRu) {
    inc = hn::IfThenZeroElse(neg, hn::Sub(hn::Shl(one, sh), one));
  } else if constexpr (R == Rounding::kRd) {
    inc = hn::IfThenElseZero(neg, hn::Sub(hn::Shl(one, sh), one));
  } else {
    // SR-A, N <= 8: a lane discarding 32 or more bits has nu < 2^-8, so floor(nu * 2^N) = 0: drop it.
    y = hn::IfThenZeroElse(hn::RebindMask(du, hn::Gt(s_sub, hn::Set(di, 31))), y);
    inc = hn::Shl(hn::And(rbits, k.sr_mask), hn::Sub(sh, hn::Set(du, static_cast<uint32_t>(k.sr_n))));
  }
  const VU r = hn::Shr(hn::Add(y, inc), sh);
  const VU pre = hn::IfThenElse(low, r, hn::Sub(r, k.c_norm));
  const auto put_sign = k.neg_zero ? neg : hn::And(neg, hn::Ne(pre, zero));
  const VU code = hn::Or(pre, hn::IfThenElseZero(put_sign, k.sign_bit));
  return hn::IfThenElse(hn::Gt(pre, k.max_code), hn::IfThenElse(neg, k.ovf_neg, k.ovf_pos), code);
}

// E2m1Codes4's table: key i stands for the FP32 bits with exponent field 124 + i / 8, mantissa bits 22 and
// 21 from bits 2 and 1 of i, and bit 0 set where bit 0 of i is (the sticky bit); its code is the general
// tier's for those bits. Keys 56-63 are never looked up (they stand for [16, 32): code 7).
inline void Consts::InitE2m1Table(const ConvertParams& p) {
#if QMX_AVX512
  if (!fused || p.rounding != Rounding::kRne || !f.sat || !f.neg_zero || p.man_bits != 1 || p.max_code != 7 ||
      p.sign_bit != 8 || p.emin127 != 127)
    return;
  const DU du;
  alignas(64) uint32_t rep[64];
  alignas(64) uint16_t word[64];
  for (uint32_t i = 0; i < 64; ++i) rep[i] = ((124u + (i >> 3)) << 23) | (((i >> 1) & 3u) << 21) | (i & 1u);
  for (size_t v = 0; v < 64; v += 16) {
    alignas(64) uint32_t c[16];
    hn::Store(ConvertVec<Rounding::kRne>(*this, hn::Load(du, rep + v), hn::Zero(DI()), hn::Zero(du)), du, c);
    for (size_t j = 0; j < 16; ++j) word[v + j] = static_cast<uint16_t>(c[j]);
  }
  f.e2m1_lo = VU{_mm512_load_si512(word)};
  f.e2m1_hi = VU{_mm512_load_si512(word + 32)};
  f.e2m1 = true;
#else
  (void)p;
#endif
}

// Every lane in dst's normal binades and at most max: round the FP32 bits with uniform shifts.
template <Rounding R>
HWY_INLINE VU NormalVec(const Consts& k, const Lite& l, VU bits, VU a, VU rbits) {
  const DU du;
  const VU one = hn::Set(du, 1u);
  const int s0 = k.sbase_s;
  VU r;
  if constexpr (R == Rounding::kRne) {
    const VU half_m1 = hn::Set(du, (1u << (s0 - 1)) - 1);
    r = hn::ShiftRightSame(hn::Add(hn::Add(a, half_m1), hn::And(hn::ShiftRightSame(a, s0), one)), s0);
  } else if constexpr (R == Rounding::kRna) {
    r = hn::ShiftRightSame(hn::Add(a, hn::Set(du, 1u << (s0 - 1))), s0);
  } else if constexpr (R == Rounding::kRz) {
    r = hn::ShiftRightSame(a, s0);
  } else if constexpr (R == Rounding::kRu || R == Rounding::kRd) {
    const auto neg = hn::Ne(hn::And(bits, hn::Set(du, 0x80000000u)), hn::Zero(du));
    const VU full_m1 = hn::Set(du, (1u << s0) - 1);
    const VU inc = R == Rounding::kRu ? hn::IfThenZeroElse(neg, full_m1) : hn::IfThenElseZero(neg, full_m1);
    r = hn::ShiftRightSame(hn::Add(a, inc), s0);
  } else {
    r = hn::ShiftRightSame(hn::Add(a, hn::ShiftLeftSame(hn::And(rbits, k.sr_mask), s0 - k.sr_n)), s0);
  }
  const VU pre = hn::Sub(r, l.c_norm_eoff);
  return hn::Or(pre, hn::And(hn::ShiftRightSame(bits, k.sign_shift), k.sign_bit));
}

// Truncation of FP32 lanes known to lie in [0, 2^31) to integers: the x86 instruction alone, without the
// out-of-range fix-up that hn::ConvertTo adds.
HWY_INLINE VI TruncateInRange(VF v) {
#if QMX_AVX512
  return VI{_mm512_cvttps_epi32(v.raw)};
#elif HWY_TARGET == HWY_AVX2
  return VI{_mm256_cvttps_epi32(v.raw)};
#elif HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
  return VI{_mm_cvttps_epi32(v.raw)};
#else
  return hn::ConvertTo(DI(), v);
#endif
}

// ------------------------------------------------------------------ fused path
// Every lane finite, a float format, RNE or SR-A (Consts::fused): one branch-free sequence for the whole
// range. Lanes in dst's normal binades round their FP32 bits as NormalVec does (the carry moving into the
// exponent field, the rebias folded into f_kn). Lanes below, where the quantum q = 2^(emin - m) is fixed,
// round in the FPU: RNE adds 2^(emin - m + 23), whose ulp is q, so the FPU's round to nearest even of
// |x| + 2^(...) leaves round(|x| / q) (the carry into the lowest normal binade included) in the low bits;
// SR-A multiplies by 2^(N + m - emin), exactly, truncates to the integer u = floor(|x| 2^N / q) and takes
// (u + R) >> N, which carries iff R + floor(nu 2^N) >= 2^N (on AVX-512 a truncating fma instead puts these
// lanes into the normal lanes' form, so one add and shift serves both). Equal to ConvertVec; tests check
// both. The FPU steps rely on round to nearest even without FTZ/DAZ: the dispatch wrappers set that
// (fp_env.h; convert_simd.cc, quantize/mx_simd.cc).
// kCommon: overflow saturates to max and -0 has a code (the OCP formats under satfinite); otherwise the
// overflow code and the sign of a zero result are chosen per lane.
template <Rounding R, bool kCommon>
HWY_INLINE VU FusedVec(const FusedK& f, VU bits, VU rbits) {
  const DU du;
  const DF df;
  const VU one = hn::Set(du, 1u);
  const VU a = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
  VU mag;
  if constexpr (R == Rounding::kRne) {
#if QMX_AVX512
    const VU b = hn::Add(a, f.kn);  // plus the kept LSB (bit s0 of |x|; rebias is a multiple of 2^23), masked
    const VU rn = ShrS(VU{_mm512_mask_add_epi32(b.raw, _mm512_test_epi32_mask(a.raw, f.lsb.raw), b.raw, one.raw)}, f.s0);
#else
    const VU rn = ShrS(hn::Add(hn::Add(a, f.kn), hn::And(ShrS(a, f.s0), one)), f.s0);
#endif
    const VU rs = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, a), f.magic)), f.magic_bits);
    mag = hn::IfThenElse(hn::Lt(a, f.thr), rs, rn);
  } else {
    const VU r = hn::And(rbits, f.sr_mask);
#if QMX_AVX512
    // One shift for both ranges. Below 2^emin, h = RZ(|x| / 2 + 2^(emin - 1)) (one fma, the product exact)
    // lies in [2^(emin - 1), 2^emin), truncated to its ulp q 2^-s0 / 2: its bits are the FP32 pattern that
    // the normal lanes' arithmetic turns into floor(|x| 2^s0 / q), the code with s0 fraction bits. Adding R
    // at bit s0 - N and shifting gives (floor(|x| 2^N / q) + R) >> N, as on the other targets. h >= |x| there
    // (equal only for the float just below 2^emin, where both forms agree) and h <= |x| at and above 2^emin,
    // so a max of the bits picks each lane's form without a compare.
    const __m512 h = _mm512_fmadd_round_ps(hn::BitCast(df, a).raw, _mm512_set1_ps(0.5f), f.half_min.raw,
                                           _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const VU pre = hn::Add(hn::Max(a, VU{_mm512_castps_si512(h)}), f.kn);
    mag = ShrS(hn::Add(pre, ShlS(r, f.sr_up)), f.s0);
#else
    const VU rn = ShrS(hn::Add(hn::Add(a, f.kn), ShlS(r, f.sr_up)), f.s0);
    const VU u = hn::BitCast(du, TruncateInRange(hn::Mul(hn::BitCast(df, a), f.magic)));
    mag = hn::IfThenElse(hn::Lt(a, f.thr), ShrS(hn::Add(u, r), f.sr_n), rn);
#endif
  }
  VU sgn = ShrS(bits, f.sign_shift);
  if constexpr (kCommon) {
    mag = hn::Min(mag, f.max_code);
  } else {
    mag = hn::IfThenElse(hn::Gt(mag, f.max_code), f.ovf, mag);
    sgn = hn::IfThenElseZero(hn::Ne(hn::Or(mag, f.nz_all), hn::Zero(du)), sgn);
  }
  return hn::OrAnd(mag, sgn, f.sign_bit);
}

// The normal path or the lite path where they apply, else the general one.
template <Rounding R>
HWY_INLINE VU ConvertAny(const Consts& k, const Lite& l, VU bits, VI eoff, VU rbits) {
  const DU du;
  if (l.ok) {
    const VU a = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
    if (hn::AllTrue(du, hn::Lt(hn::Sub(a, l.thr), l.span))) return NormalVec<R>(k, l, bits, a, rbits);
    if (hn::AllTrue(du, hn::Lt(a, hn::Set(du, 0x7F800000u)))) return LiteVec<R>(k, l, bits, rbits);
  }
  return ConvertVec<R>(k, bits, eoff, rbits);
}

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#endif  // QMX_ROUND_CONVERT_TIERS_INL_H_
