// convert_simd.cc: Highway kernels for FP32/BF16/FP16 -> any format of 8 bits or fewer, decoding, and MX
// block quantization, compiled for every x86 target and chosen at run time. They reproduce the reference
// routine (round/round_pack_ref.cc) in integer arithmetic on 32-bit lanes; tests/round/test_convert_simd.cc checks every target.
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
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "round/convert_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "hwy/highway.h"
#include "qmx/rng.h"
#include "qmx/scale.h"
#include "round/convert_params.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The AVX-512 targets, where a few kernels use masked, merge-masked and per-instruction-rounding
// intrinsics that Highway does not expose.
#undef QMX_AVX512
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define QMX_AVX512 1
#else
#define QMX_AVX512 0
#endif

using DU = hn::ScalableTag<uint32_t>;
using DI = hn::RebindToSigned<DU>;
using DF = hn::RebindToFloat<DU>;
using VU = hn::Vec<DU>;
using VI = hn::Vec<DI>;
using VF = hn::Vec<DF>;
constexpr size_t kMaxLanes = HWY_LANES(uint32_t);

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
        is_unsigned(p.is_unsigned != 0) {
    InitFused(p);
  }
  VI emin127, sbase, big_e, sr_bits;
  VU adj, max_code, sign_bit, min_normal, flush_below, int_mask, sr_mask;
  VU nan_pos, nan_neg, inf_pos, inf_neg, ovf_pos, ovf_neg, invalid;
  VU s0, c_norm;  // lite path: discarded bits in the normal binades, and the exponent rebias in code units
  int man_bits, sign_shift;
  uint32_t max_bits;  // FP32 bits of the largest finite value (lite formats)
  int emin127_s, sbase_s, sr_n;
  bool lite;  // the lite path may serve this call (float format with mantissa bits, simple mode)
  bool is_int, has_adj, flush_in, flush_out, neg_zero, is_unsigned;
  // Fused path (FusedVec): whether this call may take it at all, and its constants.
  bool fused = false;
  FusedK f;

 private:
  void InitFused(const ConvertParams& p);
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
  const VU sl = hn::BitCast(du, hn::Max(hn::Neg(s), zero_i));
  const VU sigl = hn::Shl(sig, sl);
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
    // extra unit (B: the bit below t; C: RNE's carry) is set. See lib/README.md "Stochastic rounding".
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
  if (k.is_unsigned) code = hn::IfThenElse(hn::And(neg, hn::Ne(a, zero)), k.invalid, code);
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
  const int64_t hi = std::min<int64_t>(static_cast<int64_t>(k.max_bits) - (static_cast<int64_t>(eoff) << 23), 0x7F7FFFFF);
  const int64_t thr = static_cast<int64_t>(lo) << 23;
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
// both. The FPU steps rely on round to nearest even without FTZ/DAZ: the dispatch wrappers below set that
// (fp_env.h).
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

// ------------------------------------------------------------------ sources

// Lanes of src elements starting at p, as FP32 bits (exact widening for bf16 and fp16).
template <DType S>
HWY_INLINE VU LoadBits(const void* src, size_t i) {
  const DU du;
  if constexpr (S == DType::kF32) {
    return hn::LoadU(du, static_cast<const uint32_t*>(src) + i);
  } else {
    const hn::Rebind<uint16_t, DU> d16;
    const VU w = hn::PromoteTo(du, hn::LoadU(d16, static_cast<const uint16_t*>(src) + i));
    if constexpr (S == DType::kBF16) {
      return hn::ShiftLeft<16>(w);
    } else {
      const DI di;
      const DF df;
      const VU sign = hn::ShiftLeft<16>(hn::And(w, hn::Set(du, 0x8000u)));
      const VU e = hn::And(hn::ShiftRight<10>(w), hn::Set(du, 31u));
      const VU m = hn::And(w, hn::Set(du, 0x3FFu));
      const VU normal = hn::Or(hn::ShiftLeft<23>(hn::Add(e, hn::Set(du, 112u))), hn::ShiftLeft<13>(m));
      const VU special = hn::Or(hn::Set(du, 0x7F800000u), hn::ShiftLeft<13>(m));
      // Subnormal fp16: m * 2^-24, exact in FP32 (and normal there).
      const VU sub = hn::BitCast(du, hn::Mul(hn::ConvertTo(df, hn::BitCast(di, m)), hn::Set(df, 5.9604644775390625e-8f)));
      VU r = hn::IfThenElse(hn::Eq(e, hn::Zero(du)), sub, normal);
      r = hn::IfThenElse(hn::Eq(e, hn::Set(du, 31u)), special, r);
      return hn::Or(sign, r);
    }
  }
}

template <DType S>
constexpr size_t SrcSize() {
  return S == DType::kF32 ? 4 : 2;
}

// Loads `count` (< Lanes) elements padded with +0.
template <DType S>
HWY_INLINE VU LoadBitsPartial(const void* src, size_t i, size_t count) {
  alignas(64) uint8_t buf[kMaxLanes * 4] = {};
  std::memcpy(buf, static_cast<const uint8_t*>(src) + i * SrcSize<S>(), count * SrcSize<S>());
  return LoadBits<S>(buf, 0);
}

HWY_INLINE void StoreCodes(VU code, uint8_t* out) {
  const DU du;
  const hn::Rebind<uint8_t, DU> d8;
  hn::StoreU(hn::U8FromU32(code), d8, out);
  (void)du;
}

HWY_INLINE void StoreCodesPartial(VU code, uint8_t* out, size_t count) {
  alignas(64) uint8_t buf[kMaxLanes];
  StoreCodes(code, buf);
  std::memcpy(out, buf, count);
}

// Four vectors of codes (each lane < 256) as 4 * Lanes bytes in order. On AVX-512 and AVX2 two packs with
// unsigned saturation leave, in each 128-bit block j, the four vectors' lanes 4j..4j+3; one dword permute
// puts the blocks in order: 4 shuffles and one store where StoreCodes takes 8 and four.
HWY_INLINE void StoreCodes4(VU c0, VU c1, VU c2, VU c3, uint8_t* out) {
#if QMX_AVX512
  const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(c0.raw, c1.raw), _mm512_packus_epi32(c2.raw, c3.raw));
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_si512(out, _mm512_permutexvar_epi32(idx, b));
#elif HWY_TARGET == HWY_AVX2
  const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0.raw, c1.raw), _mm256_packus_epi32(c2.raw, c3.raw));
  const __m256i idx = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(b, idx));
#else
  const size_t lanes = hn::Lanes(DU());
  StoreCodes(c0, out);
  StoreCodes(c1, out + lanes);
  StoreCodes(c2, out + 2 * lanes);
  StoreCodes(c3, out + 3 * lanes);
#endif
}

// Software prefetch of the source a fixed distance ahead of a streaming pass. Without it a single thread
// streaming from memory ran at 55-70% of its in-cache speed on the 2-core Xeon VM (`bench`); with it,
// within noise of in-cache. A prefetch never faults, so reading past the end is harmless. MX quantization
// prefetches one batch ahead from its second pass (MxLoop).
constexpr size_t kPrefetchBytes = 4096;
template <DType S>
HWY_INLINE void PrefetchAhead(const void* in, size_t i, size_t count, size_t ahead = kPrefetchBytes) {
  const uint8_t* p = static_cast<const uint8_t*>(in) + i * SrcSize<S>() + ahead;
  for (size_t o = 0; o < count * SrcSize<S>(); o += 64) __builtin_prefetch(p + o);
}

// Four vectors of the source from element i into x, and whether every lane is finite (one compare).
template <DType S>
HWY_INLINE bool LoadFinite4(const void* in, size_t i, VU (&x)[4]) {
  const DU du;
  const size_t lanes = hn::Lanes(du);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFu);
  for (size_t v = 0; v < 4; ++v) x[v] = LoadBits<S>(in, i + v * lanes);
  const VU m = hn::Max(hn::Max(hn::And(x[0], abs_mask), hn::And(x[1], abs_mask)),
                       hn::Max(hn::And(x[2], abs_mask), hn::And(x[3], abs_mask)));
  return hn::AllTrue(du, hn::Lt(m, hn::Set(du, 0x7F800000u)));
}

// A run of the fused path over the elements of one call (RNE; SR has FusedSrRun): whole groups of four
// vectors from i while every lane is finite. Returns where it stopped: at the end of the whole groups, or
// at a group holding NaN or Inf, which the caller converts through the general tiers before calling again.
template <Rounding R, DType S, bool kCommon>
HWY_NOINLINE size_t FusedRun(const FusedK& fk, const void* in, size_t i, size_t n, uint8_t* out) {
  const FusedK f = fk;
  const DU du;
  const size_t lanes = hn::Lanes(du);
  const VU none = hn::Zero(du);
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    PrefetchAhead<S>(in, i, 4 * lanes);
    VU x[4];
    if (!LoadFinite4<S>(in, i, x)) return i;
    StoreCodes4(FusedVec<R, kCommon>(f, x[0], none), FusedVec<R, kCommon>(f, x[1], none), FusedVec<R, kCommon>(f, x[2], none),
                FusedVec<R, kCommon>(f, x[3], none), out + i);
  }
  return i;
}

// ------------------------------------------------------------------ random bits

// The round keys of Philox4x32-10 for one seed (key k0 + r * 0x9E3779B9, k1 + r * 0xBB67AE85 in round r),
// computed once per call and kept in memory, so that each round broadcasts them from a load.
struct PhiloxKeys {
  explicit PhiloxKeys(uint64_t s) : seed(s) {
    uint32_t a = static_cast<uint32_t>(s), b = static_cast<uint32_t>(s >> 32);
    for (int r = 0; r < 10; ++r, a += 0x9E3779B9u, b += 0xBB67AE85u) {
      k0[r] = a;
      k1[r] = b;
    }
  }
  uint64_t seed;
  uint64_t k0[10], k1[10];  // 64-bit lanes with the key in the low half
};

// Philox4x32-10 (qmx/rng.h) for counters ctr .. ctr + 2 * Lanes(u32) - 1; 8 * Lanes words stored in
// element order. Each counter's state sits in the low half of a 64-bit lane, so one MulEven gives a
// whole 32x32 -> 64 product (low half = lo; a half swap brings hi down) and the garbage above the low
// halves is never read. Four independent batches hide the multiplier's latency. Lane j of a batch holds
// counter (j % 2) * half / 2 + j / 2 of it, so that InterleaveLower/Upper of the packed word pairs
// (x0 | x1 << 32, x2 | x3 << 32) are the words in element order with no lane-crossing shuffle. Round 0
// starts from x2 = x3 = 0 and needs one multiply.
HWY_INLINE void PhiloxWords(uint64_t ctr, const PhiloxKeys& keys, uint32_t* out) {
  const DU du;
#if HWY_TARGET == HWY_SCALAR
  for (uint64_t j = 0; j < 2; ++j) {
    const uint64_t c = ctr + j;
    const Philox4x32Counter w = Philox4x32_10({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u},
                                              {static_cast<uint32_t>(keys.seed), static_cast<uint32_t>(keys.seed >> 32)});
    std::memcpy(out + 4 * j, w.data(), 16);
  }
  (void)du;
#else
  const hn::Repartition<uint64_t, DU> d64;
  using V64 = hn::Vec<decltype(d64)>;
  constexpr int kBatches = 4;
  const size_t half = hn::Lanes(d64);
  const VU m0 = hn::Set(du, 0xD2511F53u), m1 = hn::Set(du, 0xCD9E8D57u);
  const V64 lane = hn::Iota(d64, 0);
  const V64 one64 = hn::Set(d64, 1);
  const V64 perm = hn::Add(hn::ShiftRight<1>(lane), hn::IfThenElseZero(hn::Eq(hn::And(lane, one64), one64), hn::Set(d64, half / 2)));
  V64 c0[kBatches], c1[kBatches], c2[kBatches], c3[kBatches];
  for (int b = 0; b < kBatches; ++b) {
    const V64 c = hn::Add(hn::Set(d64, ctr + b * half), perm);
    // Round 0: the product of x2 = 0 is 0.
    const V64 p0 = hn::MulEven(hn::BitCast(du, c), m0);
    c0[b] = hn::Xor(hn::ShiftRight<32>(c), hn::Set(d64, keys.k0[0]));
    c1[b] = hn::Zero(d64);
    c2[b] = hn::Xor(hn::BitCast(d64, hn::Shuffle2301(hn::BitCast(du, p0))), hn::Set(d64, keys.k1[0]));
    c3[b] = p0;
  }
  HWY_UNROLL(1)  // GCC 12 spills the unrolled rounds (measured slower)
  for (int round = 1; round < 9; ++round) {
    const V64 key0 = hn::Set(d64, keys.k0[round]), key1 = hn::Set(d64, keys.k1[round]);
    for (int b = 0; b < kBatches; ++b) {
      const V64 p0 = hn::MulEven(hn::BitCast(du, c0[b]), m0);
      const V64 p1 = hn::MulEven(hn::BitCast(du, c2[b]), m1);
      c0[b] = hn::Xor(hn::Xor(hn::BitCast(d64, hn::Shuffle2301(hn::BitCast(du, p1))), c1[b]), key0);
      c1[b] = p1;
      c2[b] = hn::Xor(hn::Xor(hn::BitCast(d64, hn::Shuffle2301(hn::BitCast(du, p0))), c3[b]), key1);
      c3[b] = p0;
    }
  }
  // Round 9 leaves the word pairs whole: the half-swapped product already holds the new x1 (x3) above, so
  // only its low half takes the XOR (a merge-masked ternary logic op on AVX-512).
  const V64 key0 = hn::Set(d64, keys.k0[9]), key1 = hn::Set(d64, keys.k1[9]);
  for (int b = 0; b < kBatches; ++b) {
    const VU s1 = hn::Shuffle2301(hn::BitCast(du, hn::MulEven(hn::BitCast(du, c2[b]), m1)));
    const VU s0 = hn::Shuffle2301(hn::BitCast(du, hn::MulEven(hn::BitCast(du, c0[b]), m0)));
#if QMX_AVX512
    const V64 w01{_mm512_mask_ternarylogic_epi32(s1.raw, 0x5555, c1[b].raw, key0.raw, 0x96)};
    const V64 w23{_mm512_mask_ternarylogic_epi32(s0.raw, 0x5555, c3[b].raw, key1.raw, 0x96)};
#else
    const V64 w01 = hn::BitCast(d64, hn::OddEven(s1, hn::Xor3(s1, hn::BitCast(du, c1[b]), hn::BitCast(du, key0))));
    const V64 w23 = hn::BitCast(d64, hn::OddEven(s0, hn::Xor3(s0, hn::BitCast(du, c3[b]), hn::BitCast(du, key1))));
#endif
    uint64_t* o = reinterpret_cast<uint64_t*>(out) + 2 * b * half;
    hn::StoreU(hn::InterleaveLower(d64, w01, w23), d64, o);
    hn::StoreU(hn::InterleaveUpper(d64, w01, w23), d64, o + half);
  }
#endif
}

// Random words for consecutive elements: explicit bits, or the Philox stream through a ring buffer.
class RandomWords {
 public:
  // An inactive stream (a deterministic mode) generates nothing.
  RandomWords(uint64_t seed, uint64_t first_index, const uint32_t* bits, bool active = true)
      : keys_(seed), bits_(bits) {
    if (!active || bits_ != nullptr) return;
    const size_t lanes = hn::Lanes(DU());
    ctr_ = first_index >> 2;
    pos_ = first_index & 3;
    PhiloxWords(ctr_, keys_, buf_);
    PhiloxWords(ctr_ + 2 * lanes, keys_, buf_ + 8 * lanes);
    ctr_ += 4 * lanes;
  }
  // Words for elements i .. i + count - 1 of the call (count <= Lanes) in the low lanes.
  HWY_INLINE VU Take(size_t i, size_t count) {
    const DU du;
    const size_t lanes = hn::Lanes(du);
    if (bits_ != nullptr) {
      if (count == lanes) return hn::LoadU(du, bits_ + i);
      alignas(64) uint32_t tmp[kMaxLanes] = {};
      std::memcpy(tmp, bits_ + i, count * sizeof(uint32_t));
      return hn::LoadU(du, tmp);
    }
    if (pos_ + lanes > 16 * lanes) {
      std::memcpy(buf_, buf_ + 8 * lanes, 8 * lanes * sizeof(uint32_t));
      pos_ -= 8 * lanes;
      PhiloxWords(ctr_, keys_, buf_ + 8 * lanes);
      ctr_ += 2 * lanes;
    }
    const VU v = hn::LoadU(du, buf_ + pos_);
    pos_ += count;
    return v;
  }

 private:
  PhiloxKeys keys_;
  const uint32_t* bits_;
  uint64_t ctr_ = 0;
  size_t pos_ = 0;
  alignas(64) uint32_t buf_[16 * kMaxLanes];
};

// SR runs of the fused path: from element i, whose Philox counter starts a word group ((first_index + i)
// % 4 == 0), whole vectors in chunks of up to 8 vectors whose words are generated once per chunk straight
// into a local buffer (or read from the explicit bits), in groups of four vectors checked for NaN/Inf
// with one compare, then single vectors. Returns where it stopped: at the end of the whole vectors, or at
// a group or vector holding NaN or Inf, whose first vector the caller converts through the general tiers.
template <Rounding R, DType S, bool kCommon>
HWY_NOINLINE size_t FusedSrRun(const FusedK& fk, const void* in, size_t i, size_t n, uint8_t* out, uint64_t seed,
                               uint64_t first_index, const uint32_t* rbits) {
  const FusedK f = fk;
  const DU du;
  const size_t lanes = hn::Lanes(du);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFu), inf_bits = hn::Set(du, 0x7F800000u);
  alignas(64) uint32_t words[8 * kMaxLanes];
  const PhiloxKeys keys(seed);
  while (i + lanes <= n) {
    const size_t vectors = std::min<size_t>(8, (n - i) / lanes);
    if (vectors == 8) PrefetchAhead<S>(in, i, 8 * lanes);
    const uint32_t* w = rbits + i;
    if (rbits == nullptr) {
      PhiloxWords((first_index + i) >> 2, keys, words);
      w = words;
    }
    size_t v = 0;
    for (; v + 4 <= vectors; v += 4, i += 4 * lanes) {
      VU x[4];
      if (!LoadFinite4<S>(in, i, x)) return i;
      const uint32_t* wv = w + v * lanes;
      StoreCodes4(FusedVec<R, kCommon>(f, x[0], hn::LoadU(du, wv)), FusedVec<R, kCommon>(f, x[1], hn::LoadU(du, wv + lanes)),
                  FusedVec<R, kCommon>(f, x[2], hn::LoadU(du, wv + 2 * lanes)),
                  FusedVec<R, kCommon>(f, x[3], hn::LoadU(du, wv + 3 * lanes)), out + i);
    }
    for (; v < vectors; ++v, i += lanes) {
      const VU x = LoadBits<S>(in, i);
      if (!hn::AllTrue(du, hn::Lt(hn::And(x, abs_mask), inf_bits))) return i;
      StoreCodes(FusedVec<R, kCommon>(f, x, hn::LoadU(du, w + v * lanes)), out + i);
    }
  }
  return i;
}

// ------------------------------------------------------------------ conversion

template <Rounding R, DType S>
void ConvertLoop(const ConvertParams& p, const void* in, size_t n, uint8_t* out, uint64_t seed, uint64_t first_index,
                 const uint32_t* rbits) {
  const DU du;
  const DI di;
  const size_t lanes = hn::Lanes(du);
  const Consts k(p);
  const VI eoff = hn::Zero(di);
  const Lite lite = MakeLite(k, 0);
  constexpr bool kSr = R == Rounding::kSrA || R == Rounding::kSrB || R == Rounding::kSrC;
  constexpr bool kFusable = R == Rounding::kRne || R == Rounding::kSrA;
  const bool common = k.fused && k.f.sat && k.f.neg_zero;
  if constexpr (kSr) {
    size_t i = 0;
    if constexpr (kFusable) {
      if (k.fused && lanes % 4 == 0) {
        // Elements before the first whole group of four Philox words, then fused runs; a vector holding NaN
        // or Inf, and the tail, go through the general tiers with the words of their own indices.
        const size_t head = std::min<size_t>(rbits != nullptr ? 0 : (4 - (first_index & 3)) & 3, n);
        if (head > 0) {
          RandomWords rw(seed, first_index, rbits);
          StoreCodesPartial(ConvertAny<R>(k, lite, LoadBitsPartial<S>(in, 0, head), eoff, rw.Take(0, head)), out, head);
        }
        i = head;
        while (i + lanes <= n) {
          i = common ? FusedSrRun<R, S, true>(k.f, in, i, n, out, seed, first_index, rbits)
                     : FusedSrRun<R, S, false>(k.f, in, i, n, out, seed, first_index, rbits);
          if (i + lanes > n) break;
          RandomWords rw(seed, first_index + i, rbits);
          StoreCodes(ConvertAny<R>(k, lite, LoadBits<S>(in, i), eoff, rw.Take(i, lanes)), out + i);
          i += lanes;
        }
      }
    }
    RandomWords rw(seed, first_index + i, rbits);
    for (; i + lanes <= n; i += lanes) StoreCodes(ConvertAny<R>(k, lite, LoadBits<S>(in, i), eoff, rw.Take(i, lanes)), out + i);
    if (i < n) {
      const size_t c = n - i;
      StoreCodesPartial(ConvertAny<R>(k, lite, LoadBitsPartial<S>(in, i, c), eoff, rw.Take(i, c)), out + i, c);
    }
  } else {
    const VU none = hn::Zero(du);
    size_t i = 0;
    while (i + 4 * lanes <= n) {
      if constexpr (kFusable) {
        if (k.fused) i = common ? FusedRun<R, S, true>(k.f, in, i, n, out) : FusedRun<R, S, false>(k.f, in, i, n, out);
        if (i + 4 * lanes > n) break;
      }
      const VU c0 = ConvertAny<R>(k, lite, LoadBits<S>(in, i), eoff, none);
      const VU c1 = ConvertAny<R>(k, lite, LoadBits<S>(in, i + lanes), eoff, none);
      const VU c2 = ConvertAny<R>(k, lite, LoadBits<S>(in, i + 2 * lanes), eoff, none);
      const VU c3 = ConvertAny<R>(k, lite, LoadBits<S>(in, i + 3 * lanes), eoff, none);
      StoreCodes(c0, out + i);
      StoreCodes(c1, out + i + lanes);
      StoreCodes(c2, out + i + 2 * lanes);
      StoreCodes(c3, out + i + 3 * lanes);
      i += 4 * lanes;
    }
    for (; i + lanes <= n; i += lanes) StoreCodes(ConvertAny<R>(k, lite, LoadBits<S>(in, i), eoff, none), out + i);
    if (i < n) StoreCodesPartial(ConvertAny<R>(k, lite, LoadBitsPartial<S>(in, i, n - i), eoff, none), out + i, n - i);
  }
}

template <Rounding R>
void ConvertBySource(const ConvertParams& p, DType src, const void* in, size_t n, uint8_t* out, uint64_t seed,
                     uint64_t first_index, const uint32_t* rbits) {
  switch (src) {
    case DType::kBF16: return ConvertLoop<R, DType::kBF16>(p, in, n, out, seed, first_index, rbits);
    case DType::kF16: return ConvertLoop<R, DType::kF16>(p, in, n, out, seed, first_index, rbits);
    default: return ConvertLoop<R, DType::kF32>(p, in, n, out, seed, first_index, rbits);
  }
}

void ConvertCodesT(const ConvertParams& p, DType src, const void* in, size_t n, uint8_t* out, uint64_t seed,
                   uint64_t first_index, const uint32_t* rbits) {
  switch (p.rounding) {
    case Rounding::kRne: return ConvertBySource<Rounding::kRne>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kRna: return ConvertBySource<Rounding::kRna>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kRz: return ConvertBySource<Rounding::kRz>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kRu: return ConvertBySource<Rounding::kRu>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kRd: return ConvertBySource<Rounding::kRd>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kRo: return ConvertBySource<Rounding::kRo>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kSrA: return ConvertBySource<Rounding::kSrA>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kSrB: return ConvertBySource<Rounding::kSrB>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kSrC: return ConvertBySource<Rounding::kSrC>(p, src, in, n, out, seed, first_index, rbits);
  }
}

// ------------------------------------------------------------------ decoding

void DecodeCodesT(const float* table, const uint8_t* codes, size_t n, float* out) {
  const DF df;
  const DI di;
  const hn::Rebind<uint8_t, DI> d8;
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::GatherIndex(df, table, hn::PromoteTo(di, hn::LoadU(d8, codes + i))), df, out + i);
  }
  for (; i < n; ++i) out[i] = table[codes[i]];
}

// ------------------------------------------------------------------ MX blocks

// amax bits over a block with lanes masked: keep = lanes whose |x| bits are below `limit` count (limit
// 0x7F800000 keeps finite lanes, 0x7F800001 also Inf, 0xFFFFFFFF every lane).
template <DType S>
HWY_INLINE uint32_t BlockAmaxBits(const Consts& k, const void* in, size_t start, size_t len, uint32_t limit) {
  const DU du;
  const size_t lanes = hn::Lanes(du);
  const VU lim = hn::Set(du, limit);
  VU vmax = hn::Zero(du);
  size_t j = 0;
  for (; j + lanes <= len; j += lanes) {
    const VU a = AbsBits(k, LoadBits<S>(in, start + j));
    vmax = hn::Max(vmax, hn::IfThenElseZero(hn::Lt(a, lim), a));
  }
  if (j < len) {
    const VU a = AbsBits(k, LoadBitsPartial<S>(in, start + j, len - j));
    vmax = hn::Max(vmax, hn::IfThenElseZero(hn::Lt(a, lim), a));
  }
  return hn::GetLane(hn::MaxOfLanes(du, vmax));
}

#if HWY_TARGET != HWY_SCALAR
// Lane i of the result: the maximum of lanes 2i and 2i + 1 of the concatenation (lo, hi).
HWY_INLINE VU PairMax(VU lo, VU hi) {
  const DU du;
  return hn::Max(hn::ConcatEven(du, hi, lo), hn::ConcatOdd(du, hi, lo));
}

// |x| bits maxima of kCount blocks of two vectors from element `start` (the usual MX block on AVX-512), lane
// i of the result for block i when kCount = Lanes: a depth-first PairMax tree, so that few vectors are live
// at once (the breadth-first loop below spilled them to the stack).
template <DType S, size_t kCount>
HWY_INLINE VU AmaxTree2(const void* in, size_t start) {
  const DU du;
  const size_t lanes = hn::Lanes(du);
  if constexpr (kCount == 1) {
    const VU abs_mask = hn::Set(du, 0x7FFFFFFFu);
    return hn::Max(hn::And(LoadBits<S>(in, start), abs_mask), hn::And(LoadBits<S>(in, start + lanes), abs_mask));
  } else {
    return PairMax(AmaxTree2<S, kCount / 2>(in, start), AmaxTree2<S, kCount / 2>(in, start + kCount / 2 * 2 * lanes));
  }
}
#endif

// amax bits of Lanes consecutive whole blocks of len elements (a multiple of Lanes) from `start`, lane b for
// block b: each block's lanes are folded into one vector, then the vectors are halved pairwise (PairMax
// keeps the lanes' order, so after log2(Lanes) rounds lane b holds block b's maximum).
template <DType S>
HWY_INLINE VU AmaxOfBlocks(const void* in, size_t start, size_t len) {
  const DU du;
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFu);  // the fused path never flushes inputs
#if HWY_TARGET == HWY_SCALAR
  VU m = hn::Zero(du);
  for (size_t j = 0; j < len; ++j) m = hn::Max(m, hn::And(LoadBits<S>(in, start + j), abs_mask));
  return m;
#else
  constexpr size_t kL = kMaxLanes;
  const size_t lanes = hn::Lanes(du);
  if (len == 2 * lanes && lanes == kL) return AmaxTree2<S, kL>(in, start);
  VU v[kL];
  for (size_t b = 0; b < kL && b < lanes; ++b) {
    VU m = hn::And(LoadBits<S>(in, start + b * len), abs_mask);
    for (size_t j = lanes; j < len; j += lanes) m = hn::Max(m, hn::And(LoadBits<S>(in, start + b * len + j), abs_mask));
    v[b] = m;
  }
  for (size_t w = lanes; w > 1; w /= 2) {
    for (size_t i = 0; i < w / 2; ++i) v[i] = PairMax(v[2 * i], v[2 * i + 1]);
  }
  return v[0];
#endif
}

// hd::ScaleByteFromAmaxBits on every lane of amax bits (finite lanes; the others are never used).
HWY_INLINE VU ScaleBytesOf(const MxKernelArgs& a, VU amax) {
  const DU du;
  const DI di;
  const DF df;
  const VU one = hn::Set(du, 1u), zero = hn::Zero(du);
  if (a.rule == 1) {  // round-up: X = fl32(amax / destmax) rounded up to a power of two
    // Without the division where every lane's quotient is a normal float: amax = (1 + f) 2^(E - 127),
    // destmax = (1 + g) 2^(D - 127). If f >= g the quotient lies in [1, 2) 2^(E - D), and it rounds above
    // 2^(E - D) iff f > g (the tie at 1 + 2^-24 goes to even); if f < g it lies in [1/2, 1) 2^(E - D),
    // above 2^(E - D - 1), and rounds up to at most 2^(E - D). So the byte is E - D + 127 + [f > g]. The
    // quotient is normal where E >= D - 125 (at least 2^-126) and E >= 1 (amax normal).
    uint32_t db;
    std::memcpy(&db, &a.destmax, 4);
    const uint32_t d_field = db >> 23;
    if (d_field >= 1 && d_field <= 254) {
      const uint32_t lo = d_field > 126 ? d_field - 125 : 1;
      if (hn::AllFalse(du, hn::Lt(amax, hn::Set(du, lo << 23)))) {
        const VU base = hn::Add(hn::ShiftRight<23>(amax), hn::Set(du, 127 - d_field));
        const VU up = hn::IfThenElseZero(hn::Gt(hn::And(amax, hn::Set(du, 0x7FFFFFu)), hn::Set(du, db & 0x7FFFFFu)), one);
        return hn::Min(hn::Add(base, up), hn::Set(du, 254u));
      }
    }
    const VU qb = hn::BitCast(du, hn::Div(hn::BitCast(df, amax), hn::Set(df, a.destmax)));
    const VU qe = hn::ShiftRight<23>(qb), qm = hn::And(qb, hn::Set(du, 0x7FFFFFu));
    const VU byte = hn::Min(hn::Add(qe, hn::IfThenElseZero(hn::Ne(qm, zero), one)), hn::Set(du, 254u));
    return hn::IfThenElse(hn::Eq(qe, zero), hn::IfThenElseZero(hn::Gt(qm, hn::Set(du, 0x400000u)), one), byte);
  }
  const VI e_field = hn::BitCast(di, hn::ShiftRight<23>(amax));
  const VI c127 = hn::Set(di, 127);
  VI lg;
  if (a.rule == 2) {  // ceil
    lg = hn::Add(hn::Sub(e_field, c127), hn::BitCast(di, hn::IfThenElseZero(hn::Ne(hn::And(amax, hn::Set(du, 0x7FFFFFu)), zero), one)));
  } else if (a.rule == 3) {  // even
    const VU r = hn::And(hn::Add(amax, hn::Set(du, 1u << (22 - a.elem_man))), hn::Set(du, 0xFF800000u));
    lg = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(r)), c127);
  } else {  // floor; an FP32-subnormal amax's leading bit from float(amax), exact below 2^23
    const VI high = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(hn::BitCast(du, hn::ConvertTo(df, hn::BitCast(di, amax))))), c127);
    lg = hn::IfThenElse(hn::Eq(e_field, hn::Zero(di)), hn::Sub(high, hn::Set(di, 149)), hn::Sub(e_field, c127));
  }
  const VI kk = hn::Min(hn::Max(hn::Sub(lg, hn::Set(di, a.emax)), hn::Set(di, -127)), c127);
  return hn::IfThenZeroElse(hn::Eq(amax, zero), hn::BitCast(du, hn::Add(kk, c127)));
}

// hd::ScaleMultiplier of every lane's scale byte (< 255) as FP32 bits: 2^(127 - byte), or Transformer
// Engine's exp2f_rcp (scaling 2).
HWY_INLINE VU ScaleMultipliersOf(int scaling, VU byte) {
  const DU du;
  const VU c254 = hn::Set(du, 254u);
  const VU pow2 = hn::ShiftLeft<23>(hn::Sub(c254, byte));
  if (scaling == 2) return hn::IfThenElse(hn::Eq(byte, hn::Zero(du)), hn::Set(du, 0x3F800000u), pow2);
  return hn::IfThenElse(hn::Eq(byte, c254), hn::Set(du, 0x00400000u), pow2);
}

// The element multiplier of the FP32 element-scaling modes for scale byte s (< 255): host_device.h.
inline float ScaleInverse(int scaling, uint32_t s) { return hd::ScaleMultiplier(static_cast<uint8_t>(s), scaling == 2); }

// The fused path over `count` consecutive MX blocks from block b, block i's elements multiplied by mults[i]
// (see MxLoop); SR takes its words from rw.
template <Rounding R, DType S, bool kCommon>
HWY_NOINLINE void FusedBlocks(const FusedK& fk, const void* in, size_t block, size_t n, size_t b, size_t count,
                              const float* mults, uint8_t* codes, RandomWords* rw, size_t ahead) {
  const FusedK f = fk;
  const DU du;
  const DF df;
  const size_t lanes = hn::Lanes(du);
  const VU none = hn::Zero(du);
  const size_t vpb = block / lanes;  // vectors per block
  if (rw == nullptr && block % lanes == 0 && (vpb & (vpb - 1)) == 0 && (b + count) * block <= n) {
    // Whole blocks of a power-of-two number of vectors: four vectors at a time, across blocks.
    const int shift = __builtin_ctzll(vpb);
    const size_t nv = count * vpb;
    const uint8_t* src = static_cast<const uint8_t*>(in) + b * block * SrcSize<S>();
    uint8_t* dst = codes + b * block;
    size_t v = 0;
    const auto code = [&](size_t vi) {
      const VU x = LoadBits<S>(src, vi * lanes);
      return FusedVec<R, kCommon>(f, hn::BitCast(du, hn::Mul(hn::BitCast(df, x), hn::Set(df, mults[vi >> shift]))), none);
    };
    for (; v + 4 <= nv; v += 4) {
      PrefetchAhead<S>(src, v * lanes, 4 * lanes, ahead);
      StoreCodes4(code(v), code(v + 1), code(v + 2), code(v + 3), dst + v * lanes);
    }
    for (; v < nv; ++v) StoreCodes(code(v), dst + v * lanes);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    const size_t start = (b + i) * block;
    const size_t len = start + block <= n ? block : n - start;
    const auto vm = hn::Set(df, mults[i]);
    const auto scaled = [&](VU x) { return hn::BitCast(du, hn::Mul(hn::BitCast(df, x), vm)); };
    size_t j = 0;
    for (; j + lanes <= len; j += lanes) {
      PrefetchAhead<S>(in, start + j, lanes, ahead);
      const VU rb = rw != nullptr ? rw->Take(start + j, lanes) : none;
      StoreCodes(FusedVec<R, kCommon>(f, scaled(LoadBits<S>(in, start + j)), rb), codes + start + j);
    }
    if (j < len) {
      const size_t c = len - j;
      const VU rb = rw != nullptr ? rw->Take(start + j, c) : none;
      StoreCodesPartial(FusedVec<R, kCommon>(f, scaled(LoadBitsPartial<S>(in, start + j, c)), rb), codes + start + j, c);
    }
  }
}

template <Rounding R, DType S>
void MxLoop(const MxKernelArgs& a, const void* in, size_t n, uint8_t* codes, uint8_t* scales, uint64_t seed,
            uint64_t first_index, const uint32_t* rbits) {
  const DU du;
  const DI di;
  const DF df;
  const size_t lanes = hn::Lanes(du);
  const Consts k(*a.p);
  constexpr bool kSr = R == Rounding::kSrA || R == Rounding::kSrB || R == Rounding::kSrC;
  constexpr bool kFusable = R == Rounding::kRne || R == Rounding::kSrA;
  RandomWords rw(seed, first_index, rbits, kSr);
  const VU none = hn::Zero(du);
  const size_t block = static_cast<size_t>(a.block);
  const size_t nblocks = (n + block - 1) / block;
  const bool exact = a.scaling == 0;
  int lite_scale = -1;
  VI eoff = hn::Zero(di);
  Lite lite = MakeLite(k, 0);
  auto vmul = hn::Set(df, 1.0f);

  // One block through the general tiers: the NaN policies, and formats or modes the fused path does not take.
  const auto general_block = [&](size_t b, size_t start, size_t len, uint32_t amax) {
    // 2. Scale byte; a block holding NaN or Inf follows the NaN policy.
    int scale = -1;
    uint32_t fill = 0;
    if (amax >= 0x7F800000u) {
      switch (static_cast<NanPolicy>(a.policy)) {
        case NanPolicy::kBlockNan: scale = 0xFF, fill = a.elem_nan; break;
        case NanPolicy::kScaleNan: scale = 0xFF, fill = a.p->nan_code[0]; break;
        case NanPolicy::kTe:
          if (amax > 0x7F800000u) scale = 0xFF, fill = a.p->nan_code[0];
          else scale = 0xFE;
          break;
        case NanPolicy::kIgnoreNan: {
          const uint32_t m = BlockAmaxBits<S>(k, in, start, len, 0x7F800001u);
          scale = m == 0x7F800000u ? 0xFE : ScaleByteFromAmaxBits(m, a.rule, a.destmax, a.emax, a.elem_man);
          break;
        }
        case NanPolicy::kIgnore:
          scale = ScaleByteFromAmaxBits(BlockAmaxBits<S>(k, in, start, len, 0x7F800000u), a.rule, a.destmax, a.emax,
                                        a.elem_man);
          break;
      }
      if (scale == 0xFF) {
        scales[b] = 0xFF;
        std::memset(codes + start, static_cast<int>(fill), len);
        if constexpr (kSr) {  // keep the random stream aligned with element indices
          for (size_t jj = 0; jj < len; jj += lanes) (void)rw.Take(start + jj, len - jj < lanes ? len - jj : lanes);
        }
        return;
      }
    } else {
      scale = ScaleByteFromAmaxBits(amax, a.rule, a.destmax, a.emax, a.elem_man);
    }
    scales[b] = static_cast<uint8_t>(scale);
    if (scale != lite_scale) {  // neighbouring blocks often share a scale
      lite_scale = scale;
      if (exact) {
        eoff = hn::Set(di, 127 - static_cast<int32_t>(scale));
        lite = MakeLite(k, 127 - static_cast<int32_t>(scale));
      } else {
        vmul = hn::Set(df, ScaleInverse(a.scaling, static_cast<uint32_t>(scale)));
      }
    }
    // 3. Elements: V_i / X exactly by moving the exponent, or fl32(x * multiplier) for the FP32 modes.
    const auto load = [&](size_t at, size_t count) {
      const VU x = count == lanes ? LoadBits<S>(in, at) : LoadBitsPartial<S>(in, at, count);
      return exact ? x : hn::BitCast(du, hn::Mul(hn::BitCast(df, x), vmul));
    };
    for (size_t j = 0; j < len; j += lanes) {
      const size_t c = len - j < lanes ? len - j : lanes;
      const VU rb = kSr ? rw.Take(start + j, c) : none;
      const VU code = ConvertAny<R>(k, lite, load(start + j, c), eoff, rb);
      if (c == lanes) StoreCodes(code, codes + start + j);
      else StoreCodesPartial(code, codes + start + j, c);
    }
  };

  // Blocks go in batches of two passes, so that no element waits on its block's scale: pass 1 takes every
  // block's amax (|x| bits: integer order is value order, NaN and Inf compare highest) and, for a finite
  // block, its scale byte and element multiplier; pass 2 converts. The fused path multiplies a block's
  // elements by 2^(127 - scale), exact wherever the product is an FP32 normal (Consts::InitFused covers
  // the rest), or by the FP32 multiplier of the element-scaling modes, then rounds them in one
  // branch-free pass. Multiplier 0 sends a block to the general tiers.
  const bool common = k.fused && k.f.sat && k.f.neg_zero;
  constexpr size_t kBatch = 64;
  static_assert(kBatch % kMaxLanes == 0 && kBatch <= 64, "whole vectors of block maxima; one bit per block");
  // Pass 2 prefetches the next batch's source: pass 1 then finds it in cache, and the memory system
  // stays busy while pass 2 works from L1.
  const size_t ahead = kBatch * block * SrcSize<S>();
  alignas(64) uint32_t amaxes[kBatch];
  alignas(64) float mults[kBatch];
  for (size_t b0 = 0; b0 < nblocks; b0 += kBatch) {
    const size_t nb = std::min(kBatch, nblocks - b0);
    uint64_t general = 0;  // bit i: block b0 + i goes through the general tiers
    size_t done = 0;       // blocks done a vector of Lanes blocks at a time
    if (kFusable && k.fused && block % lanes == 0) {
      const VU inf_bits = hn::Set(du, 0x7F800000u);
      for (; done + lanes <= nb && (b0 + done + lanes) * block <= n; done += lanes) {
        const VU amax = AmaxOfBlocks<S>(in, (b0 + done) * block, block);
        const VU byte = ScaleBytesOf(a, amax);
        const VU mult = ScaleMultipliersOf(a.scaling, byte);
        const auto prod = hn::BitCast(du, hn::Mul(hn::BitCast(df, amax), hn::BitCast(df, mult)));
        const auto ok = hn::And(hn::Lt(amax, inf_bits), hn::Lt(prod, inf_bits));
        hn::StoreU(amax, du, amaxes + done);
        hn::StoreU(hn::BitCast(df, hn::IfThenElseZero(ok, mult)), df, mults + done);
        uint8_t mask_bits[8] = {};
        hn::StoreMaskBits(du, hn::Not(ok), mask_bits);
        uint64_t m;
        std::memcpy(&m, mask_bits, 8);
        general |= m << done;
        StoreCodes(byte, scales + b0 + done);  // a NaN/Inf block's byte is rewritten by general_block
      }
    }
    for (size_t i = done; i < nb; ++i) {
      const size_t start = (b0 + i) * block;
      const size_t len = start + block <= n ? block : n - start;
      const uint32_t amax = BlockAmaxBits<S>(k, in, start, len, 0xFFFFFFFFu);
      amaxes[i] = amax;
      mults[i] = 0.0f;
      if (kFusable && k.fused && amax < 0x7F800000u) {
        const int scale = ScaleByteFromAmaxBits(amax, a.rule, a.destmax, a.emax, a.elem_man);
        const float mult = ScaleInverse(a.scaling, static_cast<uint32_t>(scale));  // exact: 2^(127 - scale)
        float amax_f;
        std::memcpy(&amax_f, &amax, 4);
        scales[b0 + i] = static_cast<uint8_t>(scale);
        if (amax_f * mult <= std::numeric_limits<float>::max()) mults[i] = mult;
      }
      if (mults[i] == 0.0f) general |= uint64_t{1} << i;
    }
    for (size_t i = 0; i < nb;) {
      if ((general >> i) & 1) {
        const size_t b = b0 + i, start = b * block;
        general_block(b, start, start + block <= n ? block : n - start, amaxes[i]);
        ++i;
        continue;
      }
      const uint64_t rest = general >> i;  // the next general block ends this fused run
      const size_t e = rest == 0 ? nb : std::min(nb, i + static_cast<size_t>(__builtin_ctzll(rest)));
      if constexpr (kFusable) {
        if (common) FusedBlocks<R, S, true>(k.f, in, block, n, b0 + i, e - i, mults + i, codes, kSr ? &rw : nullptr, ahead);
        else FusedBlocks<R, S, false>(k.f, in, block, n, b0 + i, e - i, mults + i, codes, kSr ? &rw : nullptr, ahead);
      }
      i = e;
    }
  }
}

template <Rounding R>
void MxBySource(const MxKernelArgs& a, DType src, const void* in, size_t n, uint8_t* codes, uint8_t* scales,
                uint64_t seed, uint64_t first_index, const uint32_t* rbits) {
  switch (src) {
    case DType::kBF16: return MxLoop<R, DType::kBF16>(a, in, n, codes, scales, seed, first_index, rbits);
    case DType::kF16: return MxLoop<R, DType::kF16>(a, in, n, codes, scales, seed, first_index, rbits);
    default: return MxLoop<R, DType::kF32>(a, in, n, codes, scales, seed, first_index, rbits);
  }
}

void QuantizeMxBlocksT(const MxKernelArgs& a, DType src, const void* in, size_t n, uint8_t* codes, uint8_t* scales,
                       uint64_t seed, uint64_t first_index, const uint32_t* rbits) {
  switch (a.p->rounding) {
    case Rounding::kRne: return MxBySource<Rounding::kRne>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kRna: return MxBySource<Rounding::kRna>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kRz: return MxBySource<Rounding::kRz>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kRu: return MxBySource<Rounding::kRu>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kRd: return MxBySource<Rounding::kRd>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kRo: return MxBySource<Rounding::kRo>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kSrA: return MxBySource<Rounding::kSrA>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kSrB: return MxBySource<Rounding::kSrB>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kSrC: return MxBySource<Rounding::kSrC>(a, src, in, n, codes, scales, seed, first_index, rbits);
  }
}

void DequantizeMxBlocksT(const float* table, int block_len, const uint8_t* codes, const uint8_t* scales, size_t n,
                         float* out) {
  const DF df;
  const DI di;
  const hn::Rebind<uint8_t, DI> d8;
  const size_t lanes = hn::Lanes(df);
  const size_t block = static_cast<size_t>(block_len);
  for (size_t b = 0, start = 0; start < n; ++b, start += block) {
    const size_t len = start + block <= n ? block : n - start;
    const uint8_t s = scales[b];
    const uint32_t fbits = s == 0xFF ? 0x7FC00000u : (s == 0 ? 0x00400000u : static_cast<uint32_t>(s) << 23);
    float f;
    std::memcpy(&f, &fbits, 4);
    const auto vf = hn::Set(df, f);
    size_t j = 0;
    for (; j + lanes <= len; j += lanes) {
      const auto v = hn::GatherIndex(df, table, hn::PromoteTo(di, hn::LoadU(d8, codes + start + j)));
      hn::StoreU(hn::Mul(v, vf), df, out + start + j);
    }
    for (; j < len; ++j) out[start + j] = table[codes[start + j]] * f;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "fp_env.h"

namespace qmx::simd {
HWY_EXPORT(ConvertCodesT);
HWY_EXPORT(DecodeCodesT);
HWY_EXPORT(QuantizeMxBlocksT);
HWY_EXPORT(DequantizeMxBlocksT);

void ConvertCodes(const ConvertParams& p, DType src, const void* in, size_t n, uint8_t* out, uint64_t seed,
                  uint64_t first_index, const uint32_t* rbits) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(ConvertCodesT)(p, src, in, n, out, seed, first_index, rbits);
}
void DecodeCodes(const float* table, const uint8_t* codes, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeCodesT)(table, codes, n, out);
}
void QuantizeMxBlocks(const MxKernelArgs& a, DType src, const void* in, size_t n, uint8_t* codes, uint8_t* scales,
                      uint64_t seed, uint64_t first_index, const uint32_t* rbits) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(QuantizeMxBlocksT)(a, src, in, n, codes, scales, seed, first_index, rbits);
}
void DequantizeMxBlocks(const float* table, int block, const uint8_t* codes, const uint8_t* scales, size_t n,
                        float* out) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(DequantizeMxBlocksT)(table, block, codes, scales, n, out);
}
}  // namespace qmx::simd
#endif  // HWY_ONCE
