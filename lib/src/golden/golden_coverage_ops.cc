// golden_coverage_ops.cc: the coverage models of the scale, block, stochastic-rounding and dot-product
// golden files (golden_internal.h MeasureOperation). As for conversions (golden_coverage.cc), a case's
// classes come from its inputs and from what the reference computes of them (the operation's own cpu-ref
// run, golden_ops.cc), so a simulator's log of inputs is measured the same way as a file.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "golden_internal.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/gemm.h"
#include "qmx/round.h"
#include "qmx/scale.h"

namespace qmx::golden::detail {
namespace {

uint32_t Bits32(const std::string& field) { return static_cast<uint32_t>(std::stoull(field, nullptr, 16)); }

// The outputs of the cases by the operation's reference backend.
std::vector<Fields> Reference(const Header& h, const std::vector<Fields>& cases) {
  std::vector<Fields> outs;
  MakeOp(h)->Run(Backend::kCpuRef, cases, outs);
  return outs;
}

// Where |v| lies among f's non-negative values (ascending): true when it is exactly halfway between two
// adjacent ones (below the largest).
bool IsTie(const std::vector<double>& values, double v) {
  const double a = std::fabs(v);
  if (!(a < values.back())) return false;
  const auto it = std::upper_bound(values.begin(), values.end(), a);
  return it != values.begin() && a == *(it - 1) / 2 + *it / 2;
}

// ------------------------------------------------------------------ ue8m0: amax -> scale byte
// Classes: the kinds of amax, and the rule's steps (the smallest amax of a scale, and one ulp below it), the
// smallest scale a nonzero amax gets and the largest any amax gets.
void Ue8m0Classes(const Header& h, const std::vector<Fields>& cases, CoverageClasses& cls) {
  const Format elem = ParseFormat(h.Get("elem"));
  const ScaleRule rule = ParseScaleRule(h.Get("rule"));
  const auto byte = [&](uint32_t bits) { return Ue8m0ScaleFromAmaxRef(F32FromBits(bits), elem, rule); };
  const uint8_t lowest = byte(1), highest = byte(0x7F7FFFFFu);
  cls.Add("in:zero", "amax 0");
  cls.Add("in:subnormal", "a subnormal amax");
  cls.Add("in:normal", "a normal amax");
  cls.Add("in:pow2", "an amax that is a power of two");
  cls.Add("in:max", "the largest finite amax");
  cls.Add("step", "the smallest amax of its scale (one ulp less gives a smaller scale)");
  cls.Add("below-step", "one ulp below such an amax");
  cls.Add("out:min-from-nonzero", "the smallest scale a nonzero amax gets");
  cls.Add("out:max", "the largest scale the rule gives");
  for (const Fields& c : cases) {
    const uint32_t a = Bits32(c[0]);
    const uint8_t s = byte(a);
    if (a == 0) cls.Hit("in:zero");
    else cls.Hit(a < 0x00800000u ? "in:subnormal" : "in:normal");
    if (a != 0 && (a < 0x00800000u ? (a & (a - 1)) == 0 : (a & 0x7FFFFFu) == 0)) cls.Hit("in:pow2");
    if (a == 0x7F7FFFFFu) cls.Hit("in:max");
    if (a != 0 && byte(a - 1) != s) cls.Hit("step");
    if (a < 0x7F7FFFFFu && byte(a + 1) != s) cls.Hit("below-step");
    if (a != 0 && s == lowest) cls.Hit("out:min-from-nonzero");
    if (s == highest) cls.Hit("out:max");
  }
}

// ------------------------------------------------------------------ mx-block
// Classes: the blocks (all zero, all equal, NaN, Inf, subnormal and -0 elements), the scale's extremes and
// NaN, and each element's rounding of V_i / X (exact, rounded, halfway, saturated, flushed, subnormal, the
// largest magnitude).
void MxBlockClasses(const Header& h, const std::vector<Fields>& cases, CoverageClasses& cls) {
  const MxSpec spec = MxSpecOf(h.keys);
  const std::vector<double> values = PositiveValues(spec.elem);
  const size_t bl = spec.block;
  // The scale bytes of probe blocks: the smallest subnormal, the largest finite, a NaN.
  const auto probe = [&](const std::string& x) {
    std::vector<Fields> in(1, Fields(bl, "00000000"));
    in[0][0] = x;
    return Bits32(Reference(h, in)[0][0]);
  };
  const uint32_t lowest = probe("00000001"), highest = probe("7f7fffff"), nan_scale = probe("7fc00000");
  cls.Add("block:all-zero", "every element +0 or -0");
  cls.Add("block:all-equal", "every element the same nonzero finite value");
  cls.Add("block:nan", "a NaN element");
  cls.Add("block:inf", "an infinite element");
  cls.Add("in:subnormal", "a subnormal element");
  cls.Add("in:neg-zero", "a -0 element");
  cls.Add("scale:min", "the smallest scale a nonzero block gets");
  cls.Add("scale:max", "the largest scale (that of FP32's largest finite value)");
  if (nan_scale == 0xFF) cls.Add("scale:nan", "the NaN scale (0xFF)");
  cls.Add("elem:exact", "a nonzero element whose V_i / X is a value of the element format");
  cls.Add("elem:rounded", "an element whose V_i / X is rounded");
  if (!spec.elem.IsInt()) cls.Add("elem:tie", "an element whose V_i / X lies halfway between two element values");
  // Whether the rule can code an element at the largest magnitude, or above it (saturated), from probe blocks
  // whose amax runs over 256 significands of one binade (the scale depends on the amax's place in its binade).
  bool can_max = false, can_saturate = false;
  {
    std::vector<Fields> in(256, Fields(bl, "00000000"));
    for (int m = 0; m < 256; ++m) in[m][0] = Hex(0x3F800000u | (static_cast<uint32_t>(m) << 15), 8);
    const std::vector<Fields> out = Reference(h, in);
    for (int m = 0; m < 256; ++m) {
      const uint32_t scale = Bits32(out[m][0]);
      if (scale == 0xFF) continue;
      const double v = std::ldexp(static_cast<double>(F32FromBits(Bits32(in[m][0]))), 127 - static_cast<int>(scale));
      can_saturate |= v > values.back();
      can_max |= std::fabs(DecodeToDouble(spec.elem, std::stoull(out[m][1].substr(0, 2), nullptr, 16))) == values.back();
    }
  }
  if (can_max) cls.Add("elem:max", "an element coded at the largest finite magnitude");
  if (can_saturate) cls.Add("elem:saturated", "an element whose V_i / X lies past the largest finite magnitude");
  cls.Add("elem:zero-from-nonzero", "a nonzero finite element coded as zero");
  if (spec.elem.HasSubnormals()) cls.Add("elem:subnormal", "a nonzero element coded as a subnormal");
  const std::vector<Fields> outs = Reference(h, cases);
  const double max = values.back();
  for (size_t i = 0; i < cases.size(); ++i) {
    const uint32_t scale = Bits32(outs[i][0]);
    bool all_zero = true, all_equal = true;
    const uint32_t first = Bits32(cases[i][0]);
    for (size_t j = 0; j < bl; ++j) {
      const uint32_t x = Bits32(cases[i][j]), m = x & 0x7FFFFFFFu;
      all_zero &= m == 0;
      all_equal &= x == first;
      if (m > 0x7F800000u) cls.Hit("block:nan");
      if (m == 0x7F800000u) cls.Hit("block:inf");
      if (m != 0 && m < 0x00800000u) cls.Hit("in:subnormal");
      if (x == 0x80000000u) cls.Hit("in:neg-zero");
      if (scale == 0xFF || m == 0 || m >= 0x7F800000u) continue;
      // V_i / X exactly (a double holds every FP32 value times a power of two in UE8M0's range).
      const double v = std::ldexp(std::fabs(static_cast<double>(F32FromBits(x))), 127 - static_cast<int>(scale));
      const uint64_t code = std::stoull(outs[i][1].substr(2 * j, 2), nullptr, 16);
      const double got = std::fabs(DecodeToDouble(spec.elem, code));
      uint64_t unused = 0;
      cls.Hit(v <= max && ExactCodeOf(spec.elem, v, &unused) ? "elem:exact" : "elem:rounded");
      if (IsTie(values, v)) cls.Hit("elem:tie");
      if (got == max) cls.Hit("elem:max");
      if (v > max) cls.Hit("elem:saturated");
      if (got == 0) cls.Hit("elem:zero-from-nonzero");
      else if (spec.elem.HasSubnormals() && ClassifyCode(spec.elem, code) == CodeClass::kSubnormal) cls.Hit("elem:subnormal");
    }
    if (all_zero) cls.Hit("block:all-zero");
    else if (all_equal && (first & 0x7FFFFFFFu) < 0x7F800000u) cls.Hit("block:all-equal");
    if (scale == 0xFF) cls.Hit("scale:nan");
    else if (!all_zero && scale == lowest) cls.Hit("scale:min");
    if (scale == highest) cls.Hit("scale:max");
  }
}

// ------------------------------------------------------------------ nvfp4-block
// Classes: the tensor amax (zero; the block holding it), the block (all zero, NaN, Inf, subnormal
// elements), its E4M3 scale (zero from a nonzero block, subnormal, the largest) and each element's rounding
// of fl32(x * multiplier) (halfway, the largest magnitude 6, flushed).
void Nvfp4BlockClasses(const Header& h, const std::vector<Fields>& cases, CoverageClasses& cls) {
  const ScaleRule rule = ParseScaleRule(h.Get("rule"));
  const int block = std::stoi(h.Get("block"));
  const std::vector<double> values = PositiveValues(fmt::kE2M1);
  cls.Add("tensor:zero-amax", "a tensor amax of 0");
  cls.Add("block:holds-tensor-amax", "a block whose largest magnitude is the tensor amax");
  cls.Add("block:all-zero", "every element +0 or -0");
  cls.Add("block:nan", "a NaN element");
  cls.Add("block:inf", "an infinite element");
  cls.Add("in:subnormal", "a subnormal element");
  cls.Add("scale:zero-from-nonzero", "a block scale of 0 for a block with a nonzero element");
  cls.Add("scale:subnormal", "a subnormal E4M3 block scale");
  cls.Add("scale:max", "the block scale 448 (0x7e)");
  cls.Add("elem:tie", "an element whose scaled value lies halfway between two E2M1 values");
  cls.Add("elem:max", "an element coded +-6");
  cls.Add("elem:zero-from-nonzero", "a nonzero finite element coded as zero");
  const std::vector<Fields> outs = Reference(h, cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    const uint32_t amax = Bits32(cases[i][0]);
    const uint8_t s8 = static_cast<uint8_t>(Bits32(outs[i][1]));
    const float mult = Nvfp4EncodeFactor(s8, Nvfp4TensorEncodeScale(F32FromBits(amax)), rule);
    if (amax == 0) cls.Hit("tensor:zero-amax");
    uint32_t block_max = 0;
    bool nonzero = false;
    for (int j = 0; j < block; ++j) {
      const uint32_t x = Bits32(cases[i][1 + j]), m = x & 0x7FFFFFFFu;
      if (m > 0x7F800000u) cls.Hit("block:nan");
      if (m == 0x7F800000u) cls.Hit("block:inf");
      if (m != 0 && m < 0x00800000u) cls.Hit("in:subnormal");
      if (m >= 0x7F800000u) continue;
      block_max = std::max(block_max, m);
      if (m == 0) continue;
      nonzero = true;
      const uint64_t code = std::stoull(outs[i][2].substr(j, 1), nullptr, 16);
      const double y = static_cast<double>(static_cast<float>(static_cast<double>(F32FromBits(x)) * mult));
      if (IsTie(values, y)) cls.Hit("elem:tie");
      if ((code & 7) == 7) cls.Hit("elem:max");
      if ((code & 7) == 0) cls.Hit("elem:zero-from-nonzero");
    }
    if (!nonzero) cls.Hit("block:all-zero");
    if (amax != 0 && block_max == amax) cls.Hit("block:holds-tensor-amax");
    if (nonzero && (s8 & 0x7F) == 0) cls.Hit("scale:zero-from-nonzero");
    if ((s8 & 0x7F) != 0 && (s8 & 0x78) == 0) cls.Hit("scale:subnormal");
    if (s8 == 0x7E) cls.Hit("scale:max");
  }
}

// ------------------------------------------------------------------ sr: stochastic rounding, given bits
// Classes per element: the random bits (all zero, all one, the threshold where the result steps up and the
// value below it), the direction taken, and the inputs and results that bypass the draw.
void SrClasses(const Header& h, const std::vector<Fields>& cases, CoverageClasses& cls) {
  const Format dst = ParseFormat(h.Get("dst"));
  const CastOptions opt = CastOptionsOf(h.keys);
  const bool x4 = h.Get("layout") == "ptx-cvt-rs-x4";
  const size_t lanes = x4 ? 4 : 1;
  const uint32_t rmax = opt.sr_bits >= 32 ? 0xFFFFFFFFu : (1u << opt.sr_bits) - 1;
  cls.Add("r:zero", "random bits all zero on an element that is rounded");
  cls.Add("r:max", "random bits all one on an element that is rounded");
  cls.Add("r:threshold", "the smallest random bits that round the element up");
  cls.Add("r:below-threshold", "one less: the largest that round it down");
  cls.Add("up", "a rounded element taking the larger magnitude");
  cls.Add("down", "a rounded element taking the smaller magnitude");
  cls.Add("exact", "a finite nonzero element that needs no rounding");
  cls.Add("in:zero", "a zero element");
  cls.Add("in:nan", "a NaN element");
  if (opt.saturation != Saturation::kNoSat || dst.HasInf()) cls.Add("in:inf", "an infinite element");
  cls.Add("out:max", "an element rounded to the largest finite magnitude");
  cls.Add("out:zero-from-nonzero", "a nonzero element rounded to zero");
  for (const Fields& c : cases) {
    const uint32_t rb = Bits32(c[lanes]);
    for (size_t j = 0; j < lanes; ++j) {
      const uint32_t x = Bits32(c[j]), m = x & 0x7FFFFFFFu;
      const uint32_t r = x4 ? (rb >> SrRbitsShift(dst.Bits(), j)) & 0xFF : rb & rmax;
      if (m > 0x7F800000u) cls.Hit("in:nan");
      if (m == 0x7F800000u) cls.Hit("in:inf");
      if (m == 0) cls.Hit("in:zero");
      if (m == 0 || m >= 0x7F800000u) continue;
      const auto code = [&](uint32_t bits) { return Convert(fmt::kFP32, x, dst, opt, bits).code; };
      const uint64_t got = code(r), lo = code(0), hi = code(rmax);
      const double mag = std::fabs(DecodeToDouble(dst, got));
      if (mag == DecodeToDouble(dst, dst.MaxFiniteCode())) cls.Hit("out:max");
      if (mag == 0) cls.Hit("out:zero-from-nonzero");
      if (lo == hi) {
        if (!(Convert(fmt::kFP32, x, dst, opt, r).flags & kFlagInexact)) cls.Hit("exact");
        continue;
      }
      if (r == 0) cls.Hit("r:zero");
      if (r == rmax) cls.Hit("r:max");
      cls.Hit(got == hi ? "up" : "down");
      const uint32_t at = SrThreshold(x, dst, opt, rmax);  // > 0 here: lo and hi differ
      if (r == at) cls.Hit("r:threshold");
      if (r == at - 1) cls.Hit("r:below-threshold");
    }
  }
}

// ------------------------------------------------------------------ dot
// Classes: C (absent, zero, finite, NaN or Inf), special and zero operands and scales, the result (zero
// from nonzero terms, subnormal, NaN, infinite from finite inputs), and for a fused model each alignment
// shift a product can take below its step's largest product, 0 .. F + 3 binades, and beyond.
double ScaleOf(const BlockScaleFormat& sf, uint32_t v) {
  if (sf.kind == ScaleFormat::kUe8m0) return v == 0xFF ? NAN : std::ldexp(1.0, static_cast<int>(v) - 127);
  if (sf.kind == ScaleFormat::kE4m3) return DecodeToDouble(fmt::kE4M3, v);
  if (sf.kind == ScaleFormat::kCode) return DecodeToDouble(sf.code, v);
  return F32FromBits(v);
}

// The code of a non-negative value of f.
uint64_t CodeOf(const Format& f, double v) {
  uint64_t c = 0;
  ExactCodeOf(f, v, &c);
  return c;
}

double SmallestPositive(const Format& f) {
  const std::vector<double> v = PositiveValues(f);
  return v.size() > 1 && v[0] == 0 ? v[1] : v[0];
}

// The largest exponent difference two nonzero finite products of a step can have, from the formats' extremes
// (scales equal within the step).
int ProductSpan(const Format& a, const Format& b) {
  int hi = 0, lo = 0;
  for (const Format* f : {&a, &b}) {
    int e = 0;
    std::frexp(DecodeToDouble(*f, f->MaxFiniteCode()), &e);
    hi += e;
    std::frexp(SmallestPositive(*f), &e);
    lo += e;
  }
  return hi - lo + 1;  // products of significands in [1/4, 1) move the exponent by one more
}

void DotClasses(const Header& h, const std::vector<Fields>& cases, CoverageClasses& cls) {
  const Format fa = ParseFormat(h.Get("a")), fb = ParseFormat(h.Get("b"));
  const AccumModel model = AccumModelByName(h.Get("model"));
  const size_t k = std::stoul(h.Get("k"));
  const bool scaled = h.Get("scale") != "none";
  const BlockScaleFormat bsf = ParseBlockScaleFormat(scaled ? h.Get("scale") : "fp32");
  const ScaleFormat sf = bsf.kind;
  // A block scale of value v as the file writes it; "" where the scale format does not hold v exactly.
  const auto scale_text = [&](double v) -> std::string {
    if (sf == ScaleFormat::kFp32) return Hex(F32Bits(static_cast<float>(v)), 8);
    const int e = std::ilogb(v);
    if (sf == ScaleFormat::kUe8m0) return v == std::ldexp(1.0, e) && e >= -127 && e <= 127 ? Hex(127 + e, 2) : "";
    const Format& code = sf == ScaleFormat::kE4m3 ? fmt::kE4M3 : bsf.code;
    uint64_t c = 0;
    return ExactCodeOf(code, v, &c) ? Hex(c, 2) : "";
  };
  const size_t block = scaled ? std::stoul(h.Get("block")) : k;
  const bool tensor = h.Has("tensor-a") || h.Has("tensor-b");
  const bool fused = model.kind == AccumKind::kFused;
  const size_t step = fused ? static_cast<size_t>(model.fused.step) : k;
  const int f = fused ? model.fused.frac_bits : 0;
  int span = ProductSpan(fa, fb);
  if (scaled && block < std::min(step, k)) {
    // Block scales that differ within a step widen it by the scales' own range on each side.
    const int range = sf == ScaleFormat::kUe8m0 ? 254 : sf == ScaleFormat::kE4m3 ? 17 : sf == ScaleFormat::kFp32 ? 276
                    : static_cast<int>(std::ceil(Limits(bsf.code).binades));
    span += 2 * range;
  }
  if (tensor) {
    cls.Add("c:absent", "no C operand");
  } else {
    cls.Add("c:absent", "no C operand");
    cls.Add("c:zero", "C = +-0");
    cls.Add("c:finite", "a nonzero finite C");
    cls.Add("c:special", "C NaN or infinite");
  }
  const bool special_codes = fa.HasNan() || fa.HasInf() || fb.HasNan() || fb.HasInf();
  if (special_codes) cls.Add("in:special", "a NaN or infinite element code");
  const bool code_zero = sf != ScaleFormat::kCode || bsf.code.HasZero();
  const bool code_special = sf != ScaleFormat::kCode || bsf.code.HasNan() || bsf.code.HasInf();
  if (scaled && sf != ScaleFormat::kUe8m0 && code_zero) cls.Add("scale:zero", "a zero block scale");
  if (scaled && code_special) cls.Add("scale:special", "a NaN or infinite block scale");
  cls.Add("out:zero-from-nonzero", "D = 0 from a nonzero product or C (cancellation, or terms cut away)");
  if (special_codes || scaled || !tensor) cls.Add("out:nan", "a NaN result");
  {
    // Whether finite inputs can overflow at all: the largest codes under the largest scales, without C.
    const std::string sc = sf == ScaleFormat::kUe8m0 ? "fe" : sf == ScaleFormat::kE4m3 ? "7e" : sf == ScaleFormat::kFp32 ? "7f7fffff"
                         : Hex(bsf.code.MaxFiniteCode(), 2);
    std::string ca, cb, sa, sb;
    for (size_t kk = 0; kk < k; ++kk) ca += Hex(fa.MaxFiniteCode(), 2), cb += Hex(fb.MaxFiniteCode(), 2);
    for (size_t s = 0; scaled && s < k / block; ++s) sa += sc;
    if (!scaled) sa = "-";
    const std::vector<Fields> probe = Reference(h, {{ca, cb, sa, sa, "-"}});
    if ((Bits32(probe[0][0]) & 0x7FFFFFFFu) == 0x7F800000u)
      cls.Add("out:inf-from-finite", "an infinite result from finite inputs");
  }
  {
    // Whether the model gives subnormal results at all: the smallest codes under scales that put their
    // product near 2^-140 where the scale format holds such a power of two (UE8M0, FP32), else under the
    // scale 1 (E4M3 and other narrow scales, and unscaled 8-bit products, stay normal there).
    const double p = SmallestPositive(fa) * SmallestPositive(fb);
    const std::string near = scaled ? scale_text(std::ldexp(1.0, (-140 - std::ilogb(p)) / 2)) : "";
    const std::string one = scaled ? scale_text(1.0) : "-";
    if (p < FLT_MIN || !near.empty()) {
      std::string ca(2 * k, '0'), cb(2 * k, '0'), sc = scaled ? "" : "-";
      ca.replace(0, 2, Hex(CodeOf(fa, SmallestPositive(fa)), 2));
      cb.replace(0, 2, Hex(CodeOf(fb, SmallestPositive(fb)), 2));
      for (size_t s = 0; scaled && s < k / block; ++s) sc += near.empty() ? one : near;
      const uint32_t d = Bits32(Reference(h, {{ca, cb, sc, sc, "-"}})[0][0]) & 0x7FFFFFFFu;
      if (d != 0 && d < 0x00800000u) cls.Add("out:subnormal", "a subnormal result");
    }
  }
  const int shifts = fused ? std::min(f + 3, span) : -1;
  for (int s = 0; s <= shifts; ++s)
    cls.Add("shift:" + std::to_string(s), "a product " + std::to_string(s) + " binades below its step's largest");
  if (fused && span > f + 3)
    cls.Add("shift:far", "a product more than F + 3 binades below its step's largest");
  const std::vector<Fields> outs = Reference(h, cases);
  const size_t nscale = scaled ? k / block : 0;
  const int digits = sf == ScaleFormat::kFp32 ? 8 : 2;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Fields& c = cases[i];
    std::vector<double> sa(nscale, 1.0), sb(nscale, 1.0);
    for (size_t s = 0; s < nscale; ++s) {
      sa[s] = ScaleOf(bsf, static_cast<uint32_t>(std::stoull(c[2].substr(s * digits, digits), nullptr, 16)));
      sb[s] = ScaleOf(bsf, static_cast<uint32_t>(std::stoull(c[3].substr(s * digits, digits), nullptr, 16)));
      if (sa[s] == 0 || sb[s] == 0) cls.Hit("scale:zero");
      if (!std::isfinite(sa[s]) || !std::isfinite(sb[s])) cls.Hit("scale:special");
    }
    bool nonzero = false;
    int emax = 0;
    std::vector<int> exps;
    std::vector<bool> present;
    const auto flush_step = [&] {
      for (size_t t = 0; t < exps.size(); ++t) {
        if (!present[t]) continue;
        const int s = emax - exps[t];
        cls.Hit(s <= f + 3 ? "shift:" + std::to_string(s) : std::string("shift:far"));
      }
      exps.clear();
      present.clear();
      emax = INT32_MIN;
    };
    emax = INT32_MIN;
    for (size_t kk = 0; kk < k; ++kk) {
      const double x = DecodeToDouble(fa, std::stoull(c[0].substr(2 * kk, 2), nullptr, 16));
      const double y = DecodeToDouble(fb, std::stoull(c[1].substr(2 * kk, 2), nullptr, 16));
      if (!std::isfinite(x) || !std::isfinite(y)) cls.Hit("in:special");
      // The product's exponent from its factors' (long double holds the product of 8-bit codes and two FP32
      // scales exactly).
      const long double p = static_cast<long double>(x) * y * (scaled ? sa[kk / block] * static_cast<long double>(sb[kk / block]) : 1.0L);
      const bool term = std::isfinite(static_cast<double>(p)) && p != 0;
      nonzero |= term;
      int e = 0;
      if (term) {
        std::frexp(p, &e);
        emax = std::max(emax, e);
      }
      exps.push_back(e);
      present.push_back(term);
      if (fused && ((kk + 1) % step == 0 || kk + 1 == k)) flush_step();
    }
    if (c[4] == "-") {
      cls.Hit("c:absent");
    } else {
      const float cv = F32FromBits(Bits32(c[4]));
      cls.Hit(cv == 0 ? "c:zero" : std::isfinite(cv) ? "c:finite" : "c:special");
      nonzero |= cv != 0 && std::isfinite(cv);
    }
    const uint32_t d = Bits32(outs[i][0]), flags = Bits32(outs[i][1]);
    const uint32_t dm = d & 0x7FFFFFFFu;
    if (dm == 0 && nonzero) cls.Hit("out:zero-from-nonzero");
    if (dm != 0 && dm < 0x00800000u) cls.Hit("out:subnormal");
    if (dm > 0x7F800000u) cls.Hit("out:nan");
    if (flags & kFlagOverflow) cls.Hit("out:inf-from-finite");
  }
}

}  // namespace

uint32_t SrThreshold(uint32_t x_bits, const Format& dst, const CastOptions& cast, uint32_t top) {
  const auto code = [&](uint32_t r) { return Convert(fmt::kFP32, x_bits, dst, cast, r).code; };
  const uint64_t lo = code(0);
  if (lo == code(top)) return 0;
  uint32_t below = 0, at = top;  // code(below) is lo, code(at) the other
  while (at - below > 1) {
    const uint32_t mid = below + (at - below) / 2;
    (code(mid) == lo ? below : at) = mid;
  }
  return at;
}

bool MeasureOperation(const Header& h, const std::vector<Fields>& cases, std::vector<CoverageClass>& classes) {
  CoverageClasses cls;
  if (h.op == "ue8m0") Ue8m0Classes(h, cases, cls);
  else if (h.op == "mx-block") MxBlockClasses(h, cases, cls);
  else if (h.op == "nvfp4-block") Nvfp4BlockClasses(h, cases, cls);
  else if (h.op == "sr") SrClasses(h, cases, cls);
  else if (h.op == "dot") DotClasses(h, cases, cls);
  else return false;
  classes = cls.Take();
  return true;
}

}  // namespace qmx::golden::detail
