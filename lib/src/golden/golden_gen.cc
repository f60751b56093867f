// golden_gen.cc: the case generators of every suite. TestFloat's recipe (REFERENCES.md section 6):
// boundary exponent tables around the destination's range crossed with significand patterns (zero,
// one, all ones, walking ones, runs, and the destination's midpoints), specials, and seeded random
// cases. Level 1 takes a small, seeded selection; level 2 the full cross products.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "golden/golden_internal.h"
#include "qmx/cast_options.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/mx.h"
#include "qmx/scale.h"

namespace qmx::golden {

const std::vector<SuiteInfo>& Suites() {
  static const std::vector<SuiteInfo> kSuites = {
      {"conversions",
       "FP32, FP16 and BF16 to every registry format of 8 bits or fewer (e4m3 e5m2 e3m2 e2m3 e2m1 int8 ue8m0) under "
       "every rounding (rne rna rz ru rd ro) and saturation mode the format takes: conversions/SRC_DST_ROUND_SAT.txt; "
       "f32 variants with nan-sign=positive, subnormals=flush and nan-fallback=zero (..._nanpos, _flush, _nan0); "
       "decoding of every code: conversions/decode_FMT.txt. --exhaustive: every FP16/BF16 input."},
      {"ue8m0",
       "amax (FP32) -> UE8M0 scale byte under each scale rule (ocp-floor round-up ceil even max-finite) for each MX "
       "element format: ue8m0/ELEM_RULE.txt. Exponents around 2^-127 and 2^127, destmax * 2^k and its neighbours, "
       "the elements' rounding midpoints."},
      {"mx-block",
       "32 FP32 values -> UE8M0 scale + 32 element codes for each MX element format, UE8M0 scale rule and NaN policy "
       "(exact element scaling): mx-block/ELEM_RULE_POLICY.txt; and microxcaling's, torchao RCEIL's and Transformer "
       "Engine's FP32 element scalings: mx-block/ELEM_RULE_POLICY_SCALING.txt. Edge blocks: zeros, amax a power of two, amax at and around destmax * 2^k, the "
       "block that separates round-down from round-up, amax below 2^-127 * destmax, FLT_MAX, NaN and Inf inside, "
       "element midpoints; then random blocks."},
      {"nvfp4-block",
       "FP32 tensor amax + 16 FP32 values -> tensor decode scale, E4M3 block scale and 16 E2M1 codes in Transformer "
       "Engine's order of operations (nvfp4) and its older divide-first order (nvfp4-div): nvfp4-block/e2m1_RULE.txt."},
      {"sr",
       "Stochastic rounding with explicit random bits, N = 8, as PTX cvt.rs.satfinite.{e4m3x4,e5m2x4,e2m3x4,e3m2x4,"
       "e2m1x4}.f32 consumes them: four FP32 inputs, the 32-bit rbits operand, the packed result, sr/DST_sr-a.txt "
       "(golden/README.md documents the byte order); and one input with its R per line for SR-A with N = 4 and 16, "
       "SR-B and SR-C with N = 8: sr/DST_MODE_nN.txt."},
      {"gemm",
       "Block dot products (codes, block scales, C) -> D under each accumulation model: MXFP8, MXFP6, MXFP4, NVFP4, "
       "plain FP8 and Hopper blockwise FP8, gemm/CONFIG_MODEL.txt; and the Hopper outputs observed on an H200 "
       "(golden/gemm-hopper), gemm/hopper_CASE_slow|fast.txt."},
  };
  return kSuites;
}

namespace detail {
namespace {

// ------------------------------------------------------------------ significands and exponents

// A source format (f32, f16, bf16) and its encoding of sign * 2^e * (1 + p / 2^m).
struct Src {
  std::string name;
  Format f;
  int m() const { return f.man_bits; }
  int EmaxField() const { return (1 << f.exp_bits) - 2; }
  int Emax() const { return EmaxField() - f.bias; }
  int Emin() const { return 1 - f.bias; }
  int Digits() const { return f.Bits() / 4; }
  // The code of (-1)^neg * 2^e * (1 + p / 2^m); below the normal range the subnormal code keeps the
  // pattern's top bits (shifted right by the distance to Emin).
  uint64_t Code(bool neg, int e, uint64_t p) const {
    const uint64_t sign = neg ? uint64_t{1} << (f.Bits() - 1) : 0;
    if (e >= Emin()) return sign | (static_cast<uint64_t>(e + f.bias) << m()) | p;
    const int shift = Emin() - e;
    return sign | (((uint64_t{1} << m()) | p) >> shift);
  }
  uint64_t Inf(bool neg) const { return (neg ? uint64_t{1} << (f.Bits() - 1) : 0) | (uint64_t(EmaxField() + 1) << m()); }
};

Src SrcByName(const std::string& n) {
  if (n == "f32") return {n, fmt::kFP32};
  if (n == "f16") return {n, fmt::kFP16};
  return {"bf16", fmt::kBF16};
}

// Exponent of the smallest nonzero magnitude of a destination format.
int LowestExp(const Format& d) {
  if (d.IsInt()) return -d.man_bits;
  if (d.encoding == Encoding::kExponentOnly) return d.Emin();
  return d.Emin() - d.man_bits;
}
int HighestExp(const Format& d) { return Limits(d).emax; }

// Fraction bits the destination keeps at binade 2^e (negative: below half its smallest quantum).
int KeptBits(const Format& d, int e) {
  if (d.encoding == Encoding::kExponentOnly) return 0;
  if (d.IsInt()) return e + d.man_bits;
  return e - std::max(e - d.man_bits, d.Emin() - d.man_bits);
}

// Significand patterns over m bits: TestFloat's (zero, one, all ones, walking ones, runs) and the
// destination's rounding points at binade e (the midpoint, its neighbours, the odd-code tie).
std::vector<uint64_t> Patterns(int m, int kept, bool full, CaseRng& rng) {
  const uint64_t all = (uint64_t{1} << m) - 1;
  std::vector<uint64_t> p = {0, 1, all};
  const int pos = m - kept - 1;  // the bit worth half a destination ulp
  if (pos >= 0 && pos < m) {
    const uint64_t half = uint64_t{1} << pos;
    p.insert(p.end(), {half, half - 1, half + 1});
    if (pos + 1 < m) p.insert(p.end(), {(half << 1) | half, (half << 1) | (half - 1), (half << 1) | (half + 1)});
  }
  if (full) {
    for (int j = 0; j < m; ++j) {
      p.push_back(uint64_t{1} << j);          // walking one
      p.push_back(all ^ ((uint64_t{1} << j) - 1));  // run of ones from the top
      p.push_back((uint64_t{1} << j) - 1);    // run of ones from the bottom
    }
  } else {
    p.push_back(uint64_t{1} << rng.Below(m));
    p.push_back(all ^ ((uint64_t{1} << rng.Below(m)) - 1));
    p.push_back(rng.Below(uint64_t{1} << m));
  }
  return p;
}

// Deduplicating list of codes in first-seen order.
class CodeList {
 public:
  void Add(uint64_t c) {
    if (seen_.insert(c).second) codes_.push_back(c);
  }
  const std::vector<uint64_t>& codes() const { return codes_; }

 private:
  std::set<uint64_t> seen_;
  std::vector<uint64_t> codes_;
};

// Source codes that exercise conversion into d: specials, the boundary table, random values.
std::vector<uint64_t> ConversionInputs(const Src& s, const Format& d, int level, CaseRng& rng) {
  CodeList out;
  const int m = s.m();
  const uint64_t sign = uint64_t{1} << (s.f.Bits() - 1), all = (uint64_t{1} << m) - 1;
  for (bool neg : {false, true}) {
    const uint64_t sg = neg ? sign : 0;
    out.Add(sg);                                       // zero
    out.Add(s.Inf(neg));                               // infinity
    out.Add(s.Inf(neg) | (uint64_t{1} << (m - 1)));    // quiet NaN
    out.Add(s.Inf(neg) | 1);                           // signalling NaN
    out.Add(s.Inf(neg) | all);                         // NaN, every payload bit
    out.Add(s.Code(neg, s.Emax(), all));               // largest finite
    out.Add(s.Code(neg, s.Emin(), 0));                 // smallest normal
    out.Add(sg | 1);                                   // smallest subnormal
    out.Add(sg | all);                                 // largest subnormal
  }
  const int lo = std::max(LowestExp(d) - 3, s.Emin() - m), hi = std::min(HighestExp(d) + 2, s.Emax());
  for (int e = lo; e <= hi; ++e) {
    for (uint64_t p : Patterns(m, KeptBits(d, e), level >= 2, rng)) {
      if (e < s.Emin() && p != 0 && level < 2) continue;  // below the source's normals: patterns collapse
      if (level >= 2) {
        out.Add(s.Code(false, e, p));
        out.Add(s.Code(true, e, p));
      } else {
        out.Add(s.Code(rng.Below(2) == 1, e, p));
      }
    }
  }
  const int n_range = level >= 2 ? 4000 : 24, n_any = level >= 2 ? 1000 : 8;
  for (int i = 0; i < n_range; ++i)
    out.Add(s.Code(rng.Below(2) == 1, lo + static_cast<int>(rng.Below(hi - lo + 1)), rng.Below(uint64_t{1} << m)));
  for (int i = 0; i < n_any; ++i) out.Add(rng.Below(uint64_t{1} << s.f.Bits()));
  return out.codes();
}

std::string SpecRevision(const Format& d) {
  const std::string n = d.name;
  return n == "e4m3" || n == "e5m2" ? "OFP8-1.0" : "OCP-MX-1.0";
}

std::vector<Fields> OneField(const std::vector<uint64_t>& codes, int digits) {
  std::vector<Fields> v;
  for (uint64_t c : codes) v.push_back({Hex(c, digits)});
  return v;
}

const std::vector<std::string>& SmallFormats() {
  static const std::vector<std::string> k = {"e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8", "ue8m0"};
  return k;
}
const std::vector<std::string>& MxElements() {
  static const std::vector<std::string> k = {"e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8"};
  return k;
}

// ------------------------------------------------------------------ conversions
void GenConversions(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  static const char* kRound[] = {"rne", "rna", "rz", "ru", "rd", "ro"};
  static const char* kSat[] = {"satfinite", "nosat", "satpropagate"};
  for (const std::string src : {"f32", "f16", "bf16"}) {
    const Src s = SrcByName(src);
    for (const auto& dn : SmallFormats()) {
      const Format& d = GetFormat(dn);
      std::vector<uint64_t> inputs;
      {
        CaseRng rng(opt.seed, "conversions/" + src + "_" + dn);
        if (opt.exhaustive && s.f.Bits() == 16) {
          for (uint64_t c = 0; c < 65536; ++c) inputs.push_back(c);
        } else {
          inputs = ConversionInputs(s, d, opt.level, rng);
        }
      }
      struct Variant {
        const char* suffix;
        const char* key;
        const char* value;
      };
      std::vector<Variant> variants = {{"", nullptr, nullptr}};
      if (src == "f32") {
        if (d.HasNan()) variants.push_back({"_nanpos", "nan-sign", "positive"});
        if (d.HasSubnormals()) variants.push_back({"_flush", "subnormals", "flush"});
        if (!d.HasNan()) variants.push_back({"_nan0", "nan-fallback", "zero"});
      }
      for (const char* r : kRound) {
        for (const char* sat : kSat) {
          for (const Variant& v : variants) {
            if (v.key && (std::string(r) != "rne" || std::string(sat) != "satfinite")) continue;
            CastOptions c;
            c.rounding = ParseRounding(r);
            c.saturation = ParseSaturation(sat);
            if (v.key) {
              if (std::string(v.key) == "nan-sign") c.nan_sign = ParseNanSign(v.value);
              if (std::string(v.key) == "subnormals") c.subnormals = ParseSubnormals(v.value);
              if (std::string(v.key) == "nan-fallback") c.nan_fallback = ParseNanFallback(v.value);
            }
            try {
              ValidateCastOptions(d, c);
            } catch (const Error&) {
              continue;  // the format cannot take this mode (e.g. nosat into e2m1)
            }
            PlannedFile f;
            f.path = "conversions/" + src + "_" + dn + "_" + r + "_" + sat + v.suffix + ".txt";
            f.header.op = "convert";
            f.header.Set("src", src).Set("dst", dn).Set("round", r).Set("sat", sat);
            f.header.Set("nan-sign", NanSignName(c.nan_sign)).Set("nan-fallback", NanFallbackName(c.nan_fallback));
            f.header.Set("subnormals", SubnormalsName(c.subnormals)).Set("spec", SpecRevision(d));
            f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
            f.inputs = OneField(inputs, s.Digits());
            emit(std::move(f));
          }
        }
      }
    }
  }
  for (const auto& dn : SmallFormats()) {
    const Format& d = GetFormat(dn);
    PlannedFile f;
    f.path = "conversions/decode_" + dn + ".txt";
    f.header.op = "decode";
    f.header.Set("fmt", dn).Set("spec", SpecRevision(d));
    f.inputs = OneField(AllCodes(d), 2);
    emit(std::move(f));
  }
}

// ------------------------------------------------------------------ ue8m0
void GenUe8m0(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  for (const auto& en : MxElements()) {
    const Format& el = GetFormat(en);
    const double destmax = Limits(el).max_finite;
    for (ScaleRule rule : {ScaleRule::kOcpFloor, ScaleRule::kRoundUp, ScaleRule::kCeil, ScaleRule::kEven, ScaleRule::kMaxFinite}) {
      CaseRng rng(opt.seed, std::string("ue8m0/") + en + "_" + ScaleRuleName(rule));
      const Src s = SrcByName("f32");
      CodeList out;
      for (uint32_t b : {0u, 1u, F32Bits(1.0f), F32Bits(std::numeric_limits<float>::max()), 0x007FFFFFu, 0x00800000u})
        out.Add(b);
      auto in_range = [&](int e) {
        return opt.level >= 2 || e <= -140 || (e >= -130 && e <= -122) || (e >= -4 && e <= 4) || e >= 120;
      };
      for (int e = -149; e <= 127; ++e) {
        if (!in_range(e)) continue;
        for (uint64_t p : Patterns(23, el.IsInt() ? 6 : el.man_bits, opt.level >= 2, rng)) out.Add(static_cast<uint32_t>(s.Code(false, e, p)));
        // destmax * 2^e and its neighbours: where round-up and the floor rule change their answer.
        const double v = std::ldexp(destmax, e);
        if (v >= std::ldexp(1.0, -149) && v <= std::numeric_limits<float>::max()) {
          const float f = static_cast<float>(v);
          out.Add(F32Bits(f));
          out.Add(F32Bits(std::nextafter(f, 0.0f)));
          if (std::isfinite(std::nextafter(f, INFINITY))) out.Add(F32Bits(std::nextafter(f, INFINITY)));
        }
      }
      for (int i = 0, n = opt.level >= 2 ? 4000 : 32; i < n; ++i) {
        const uint32_t b = static_cast<uint32_t>(rng.Below(0x7F800000u));  // every finite value >= 0
        out.Add(b);
      }
      PlannedFile f;
      f.path = "ue8m0/" + en + "_" + ScaleRuleName(rule) + ".txt";
      f.header.op = "ue8m0";
      f.header.Set("elem", en).Set("rule", ScaleRuleName(rule)).Set("spec", "OCP-MX-1.0");
      f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
      f.inputs = OneField(out.codes(), 8);
      emit(std::move(f));
    }
  }
}

// ------------------------------------------------------------------ blocks
// A random FP32 value with magnitude in [2^lo, 2^hi), random sign and significand.
float RandomValue(CaseRng& rng, int lo, int hi) {
  const int e = lo + static_cast<int>(rng.Below(hi - lo));
  const float sig = 1.0f + static_cast<float>(rng.Below(1u << 23)) / 8388608.0f;
  const float v = std::ldexp(sig, e);
  return rng.Below(2) ? -v : v;
}

// Blocks of n FP32 values at the edges of the element format el (issue list of the scaling work),
// followed by `random` random blocks.
std::vector<std::vector<float>> EdgeBlocks(const Format& el, size_t n, int random, CaseRng& rng) {
  const double destmax = Limits(el).max_finite;
  std::vector<std::vector<float>> blocks;
  auto filled = [&](int lo, int hi) {
    std::vector<float> b(n);
    for (auto& v : b) v = RandomValue(rng, lo, hi);
    return b;
  };
  auto with_amax = [&](float amax) {
    std::vector<float> b = filled(-6, 0);  // magnitudes below 1: the others stay below amax
    for (auto& v : b) v = static_cast<float>(v * (static_cast<double>(amax) / 2.0));
    b[rng.Below(n)] = rng.Below(2) ? -amax : amax;
    return b;
  };
  std::vector<float> zeros(n, 0.0f);
  for (size_t i = 0; i < n; i += 2) zeros[i] = -0.0f;
  blocks.push_back(zeros);                                              // amax = 0
  blocks.push_back(with_amax(1.0f));                                    // amax a power of two
  const float dm8 = static_cast<float>(std::ldexp(destmax, 3));
  blocks.push_back(with_amax(dm8));                                     // amax = destmax * 2^3
  blocks.push_back(with_amax(std::nextafter(dm8, INFINITY)));           // just above
  blocks.push_back(with_amax(std::nextafter(dm8, 0.0f)));               // just below
  blocks.push_back(with_amax(F32FromBits(0x41FC0000u)));                          // 31.5: floor's scaled amax overflows destmax
  blocks.push_back(with_amax(F32FromBits(0x00012345u)));                          // amax below 2^-127 * destmax (FP32 subnormal)
  blocks.push_back(with_amax(std::numeric_limits<float>::max()));      // FLT_MAX
  std::vector<float> b = filled(-3, 3);
  b[rng.Below(n)] = std::numeric_limits<float>::quiet_NaN();
  blocks.push_back(b);                                                  // a NaN inside
  b = filled(-3, 3);
  b[rng.Below(n)] = INFINITY;
  blocks.push_back(b);                                                  // an Inf inside
  b = filled(-3, 3);
  b[0] = -INFINITY;
  b[n - 1] = -std::numeric_limits<float>::quiet_NaN();
  blocks.push_back(b);                                                  // -Inf and a NaN
  b = filled(-40, 0);
  b[0] = 1.0f;
  blocks.push_back(b);                                                  // elements underflowing the element format
  // Element midpoints against the scale destmax gives (X = 1 under the floor and round-up rules).
  const std::vector<float> table = DecodeTableF32(el);
  b.assign(n, 0.0f);
  b[0] = static_cast<float>(destmax);
  for (size_t i = 1; i < n; ++i) {
    const uint64_t c = rng.Below(el.MaxFiniteCode());
    const float lo = table[c], hi = table[c + 1];
    b[i] = std::isfinite(lo) && std::isfinite(hi) && lo >= 0 && hi > lo ? (lo + hi) / 2 : lo;
    if (rng.Below(2)) b[i] = -b[i];
  }
  blocks.push_back(b);
  blocks.push_back(std::vector<float>(n, static_cast<float>(-destmax)));  // every element -destmax
  for (int i = 0; i < random; ++i) {
    const int base = -130 + static_cast<int>(rng.Below(250)), spread = 1 + static_cast<int>(rng.Below(12));
    blocks.push_back(filled(base - spread, std::min(base, 127) + 1));
  }
  return blocks;
}

Fields FloatFields(const std::vector<float>& v) {
  Fields f;
  for (float x : v) f.push_back(Hex(F32Bits(x), 8));
  return f;
}

void GenMxBlock(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  struct Combo {
    ScaleRule rule;
    NanPolicy nan;
    ElementScaling scaling;
  };
  // Every rule x NaN policy with exact element scaling (OCP MX 6.3), then the libraries' FP32 element
  // scalings with the rule and policy each library pairs them with: microxcaling (floor, block NaN),
  // torchao RCEIL (round-up, NaN scale) and Transformer Engine (round-up, te, exp2f_rcp).
  std::vector<Combo> combos;
  for (ScaleRule rule : {ScaleRule::kOcpFloor, ScaleRule::kRoundUp, ScaleRule::kCeil, ScaleRule::kEven, ScaleRule::kMaxFinite})
    for (NanPolicy pol : {NanPolicy::kBlockNan, NanPolicy::kScaleNan, NanPolicy::kTe, NanPolicy::kIgnoreNan, NanPolicy::kIgnore})
      combos.push_back({rule, pol, ElementScaling::kExact});
  combos.push_back({ScaleRule::kOcpFloor, NanPolicy::kBlockNan, ElementScaling::kFp32});
  combos.push_back({ScaleRule::kRoundUp, NanPolicy::kScaleNan, ElementScaling::kFp32});
  combos.push_back({ScaleRule::kRoundUp, NanPolicy::kTe, ElementScaling::kTeRcp});
  for (const auto& en : MxElements()) {
    for (const Combo& c : combos) {
      MxSpec spec;
      spec.elem = GetFormat(en);
      spec.rule = c.rule;
      spec.nan = c.nan;
      spec.scaling = c.scaling;
      try {
        ValidateMxSpec(spec);
      } catch (const Error&) {
        continue;  // max-finite takes only the ignore policy
      }
      std::string name = en + "_" + ScaleRuleName(c.rule) + "_" + NanPolicyName(c.nan);
      if (c.scaling != ElementScaling::kExact) name += std::string("_") + ElementScalingName(c.scaling);
      CaseRng rng(opt.seed, "mx-block/" + name);
      PlannedFile f;
      f.path = "mx-block/" + name + ".txt";
      f.header.op = "mx-block";
      f.header.Set("elem", en).Set("rule", ScaleRuleName(c.rule)).Set("nan", NanPolicyName(c.nan));
      f.header.Set("scaling", ElementScalingName(spec.scaling)).Set("round", RoundingName(spec.cast.rounding));
      f.header.Set("sat", SaturationName(spec.cast.saturation)).Set("block", "32").Set("spec", "OCP-MX-1.0");
      f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
      for (const auto& b : EdgeBlocks(spec.elem, 32, opt.level >= 2 ? 400 : 3, rng)) f.inputs.push_back(FloatFields(b));
      emit(std::move(f));
    }
  }
}

void GenNvfp4Block(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  for (ScaleRule rule : {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div}) {
    const std::string name = std::string("e2m1_") + ScaleRuleName(rule);
    CaseRng rng(opt.seed, "nvfp4-block/" + name);
    PlannedFile f;
    f.path = "nvfp4-block/" + name + ".txt";
    f.header.op = "nvfp4-block";
    f.header.Set("rule", ScaleRuleName(rule)).Set("round", "rne").Set("sat", "satfinite").Set("block", "16");
    f.header.Set("spec", "TransformerEngine-NVFP4");
    f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
    for (const auto& b : EdgeBlocks(fmt::kE2M1, 16, opt.level >= 2 ? 400 : 6, rng)) {
      float amax = 0;
      for (float v : b)
        if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
      // The tensor amax: the block's own, a larger one from elsewhere in the tensor, and a smaller one.
      const float larger = static_cast<float>(std::min<double>(std::ldexp(amax, 1 + static_cast<int>(rng.Below(20))),
                                                               std::numeric_limits<float>::max()));
      for (float t : {amax, larger, amax / 3}) {
        Fields fl = {Hex(F32Bits(t), 8)};
        for (const auto& x : FloatFields(b)) fl.push_back(x);
        f.inputs.push_back(std::move(fl));
      }
    }
    // Tensor amax at its own edges: 0, FLT_MAX, Inf, NaN.
    for (float t : {0.0f, std::numeric_limits<float>::max(), INFINITY, std::numeric_limits<float>::quiet_NaN()}) {
      Fields fl = {Hex(F32Bits(t), 8)};
      for (int j = 0; j < 16; ++j) fl.push_back(Hex(F32Bits(RandomValue(rng, -4, 3)), 8));
      f.inputs.push_back(std::move(fl));
    }
    emit(std::move(f));
  }
}

// ------------------------------------------------------------------ sr
void GenSr(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  for (const std::string dn : {"e4m3", "e5m2", "e2m3", "e3m2", "e2m1"}) {
    const Format& d = GetFormat(dn);
    CaseRng rng(opt.seed, "sr/" + dn);
    std::vector<uint64_t> values = ConversionInputs(SrcByName("f32"), d, opt.level, rng);
    // Exact midpoints between neighbouring codes: the random bits alone decide.
    const std::vector<float> table = DecodeTableF32(d);
    for (uint64_t c = 0; c + 1 <= d.MaxFiniteCode(); ++c)
      if (std::isfinite(table[c]) && std::isfinite(table[c + 1]) && table[c + 1] > table[c])
        values.push_back(F32Bits((table[c] + table[c + 1]) / 2));
    PlannedFile f;
    f.path = "sr/" + dn + "_sr-a.txt";
    f.header.op = "sr";
    f.header.Set("dst", dn).Set("round", "sr-a").Set("sr-bits", "8").Set("sat", "satfinite");
    f.header.Set("layout", "ptx-cvt-rs-x4").Set("spec", "PTX-ISA-8.7");
    f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
    const int repeats = opt.level >= 2 ? 8 : 2;
    static const uint32_t kEdges[] = {0x00000000u, 0xFFFFFFFFu, 0x7F7F7F7Fu, 0x80808080u, 0x01FE7F80u};
    for (size_t i = 0; i < values.size(); i += 4) {
      for (int r = 0; r < repeats + 1; ++r) {
        Fields fl;
        for (size_t j = 0; j < 4; ++j) fl.push_back(Hex(values[(i + j) % values.size()], 8));
        const uint32_t rb = r == 0 ? kEdges[(i / 4) % 5] : rng.Next();
        fl.push_back(Hex(rb, 8));
        f.inputs.push_back(std::move(fl));
      }
    }
    emit(std::move(f));
    // Element layout: the other SR variants and bit counts, one input and one R per line.
    for (const auto& [mode, nbits] : std::vector<std::pair<std::string, int>>{{"sr-a", 4}, {"sr-a", 16}, {"sr-b", 8}, {"sr-c", 8}}) {
      PlannedFile e;
      e.path = "sr/" + dn + "_" + mode + "_n" + std::to_string(nbits) + ".txt";
      e.header.op = "sr";
      e.header.Set("dst", dn).Set("round", mode).Set("sr-bits", std::to_string(nbits)).Set("sat", "satfinite");
      e.header.Set("layout", "element").Set("spec", "P3109-4.7.4");
      e.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
      CaseRng erng(opt.seed, e.path);
      const uint32_t top = nbits == 32 ? 0xFFFFFFFFu : (1u << nbits) - 1;
      for (uint64_t v : values) {
        // R at its edges (0, all ones, the half point; level 2 also just below it) and a random draw.
        std::vector<uint32_t> rs = {0u, top, (top >> 1) + 1, erng.Next() & top};
        if (opt.level >= 2) rs.push_back(top >> 1);
        for (uint32_t r : rs) e.inputs.push_back({Hex(v, 8), Hex(r, 8)});
      }
      emit(std::move(e));
    }
  }
}

// ------------------------------------------------------------------ gemm
struct DotConfig {
  std::string name, a, b, scale;
  size_t k, block;
  std::vector<std::string> models;
};

std::string CodesHex(const std::vector<uint8_t>& c) {
  std::string s;
  for (uint8_t v : c) s += Hex(v, 2);
  return s;
}

// Random dot-product cases for a configuration, adversarial ones first.
std::vector<Fields> DotCases(const DotConfig& cfg, int level, CaseRng& rng) {
  const Format& fa = GetFormat(cfg.a);
  const Format& fb = GetFormat(cfg.b);
  const size_t nscales = cfg.scale == "none" ? 0 : cfg.k / cfg.block;
  auto finite_code = [&](const Format& f) {
    for (;;) {
      const uint8_t c = static_cast<uint8_t>(rng.Below(f.CodeMask() + 1));
      if (std::isfinite(DecodeToFloat(f, c))) return c;
    }
  };
  auto scales = [&](int lo, int hi) -> std::string {
    if (nscales == 0) return "-";
    std::string s;
    for (size_t i = 0; i < nscales; ++i) {
      if (cfg.scale == "ue8m0") s += Hex(127 + lo + rng.Below(hi - lo + 1), 2);
      else if (cfg.scale == "e4m3") s += Hex(1 + rng.Below(0x7E), 2);
      else s += Hex(F32Bits(std::ldexp(1.0f + static_cast<float>(rng.Below(1 << 23)) / 8388608.0f, lo + static_cast<int>(rng.Below(hi - lo + 1)))), 8);
    }
    return s;
  };
  auto c_field = [&](float c) { return Hex(F32Bits(c), 8); };
  std::vector<Fields> out;
  const int n_random = level >= 2 ? 2000 : 16;
  // Cancellation: pairs of equal products with opposite signs plus one small term.
  {
    std::vector<uint8_t> a(cfg.k), b(cfg.k);
    for (size_t i = 0; i + 1 < cfg.k; i += 2) {
      a[i] = a[i + 1] = finite_code(fa);
      b[i] = finite_code(fb);
      b[i + 1] = static_cast<uint8_t>(b[i] ^ (uint8_t{1} << (fb.Bits() - 1)));
    }
    a[cfg.k - 1] = 1;
    b[cfg.k - 1] = 1;
    const std::string s = scales(0, 0);
    out.push_back({CodesHex(a), CodesHex(b), s, s, "-"});
    out.push_back({CodesHex(a), CodesHex(b), s, s, c_field(1.0f)});
  }
  // All zeros with C = -0 and without C.
  {
    const std::string z(2 * cfg.k, '0');
    const std::string s = scales(0, 0);
    out.push_back({z, z, s, s, c_field(-0.0f)});
    out.push_back({z, z, s, s, "-"});
  }
  // Largest codes under large scales: overflow to Inf where the model allows.
  {
    std::vector<uint8_t> a(cfg.k, static_cast<uint8_t>(fa.MaxFiniteCode())), b(cfg.k, static_cast<uint8_t>(fb.MaxFiniteCode()));
    std::string sa = nscales ? "" : "-";
    for (size_t i = 0; i < nscales; ++i)
      sa += cfg.scale == "ue8m0" ? Hex(254, 2) : cfg.scale == "e4m3" ? Hex(0x7E, 2) : Hex(F32Bits(1e30f), 8);
    out.push_back({CodesHex(a), CodesHex(b), sa, sa, "-"});
  }
  // A NaN element, where the format has one; a NaN scale where the scale format has one.
  if (fa.HasNan()) {
    std::vector<uint8_t> a(cfg.k), b(cfg.k);
    for (size_t i = 0; i < cfg.k; ++i) a[i] = finite_code(fa), b[i] = finite_code(fb);
    a[rng.Below(cfg.k)] = static_cast<uint8_t>(fa.CanonicalNan());
    const std::string s = scales(-2, 2);
    out.push_back({CodesHex(a), CodesHex(b), s, s, c_field(0.5f)});
  }
  if (cfg.scale == "ue8m0") {
    std::vector<uint8_t> a(cfg.k), b(cfg.k);
    for (size_t i = 0; i < cfg.k; ++i) a[i] = finite_code(fa), b[i] = finite_code(fb);
    std::string sa = scales(-2, 2), sb = scales(-2, 2);
    sa.replace(0, 2, "ff");
    out.push_back({CodesHex(a), CodesHex(b), sa, sb, "-"});
  }
  // A large C against a small sum, and the reverse.
  for (float c : {1e20f, -3.0e-30f}) {
    std::vector<uint8_t> a(cfg.k), b(cfg.k);
    for (size_t i = 0; i < cfg.k; ++i) a[i] = finite_code(fa), b[i] = finite_code(fb);
    const std::string s = scales(-4, 4);
    out.push_back({CodesHex(a), CodesHex(b), s, scales(-4, 4), c_field(c)});
  }
  for (int i = 0; i < n_random; ++i) {
    std::vector<uint8_t> a(cfg.k), b(cfg.k);
    for (size_t j = 0; j < cfg.k; ++j) a[j] = finite_code(fa), b[j] = finite_code(fb);
    const std::string c = rng.Below(4) == 0 ? "-" : c_field(RandomValue(rng, -10, 10));
    out.push_back({CodesHex(a), CodesHex(b), scales(-8, 8), scales(-8, 8), c});
  }
  return out;
}

// Element i of a float32 array, as its bit pattern.
uint32_t F32At(const NpyArray& a, size_t i) {
  uint32_t v;
  std::memcpy(&v, &a.data[i * 4], 4);
  return v;
}

void GenHopperObserved(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  namespace fs = std::filesystem;
  const fs::path dir = opt.hopper_dir;
  const fs::path cases_path = dir / "cases.json";
  std::ifstream in(cases_path);
  if (!in) throw Error("cannot read " + cases_path.string() + " (the --hopper-dir of hardware-observed GEMM outputs)");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& ex) {
    throw Error(cases_path.string() + " is not valid JSON: " + ex.what());
  }
  const std::string device = j.value("device", "unknown device");
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name");
    const size_t m = c.at("m"), k = c.at("k"), n = c.at("n");
    const NpyArray a = ReadNpy((dir / (name + "_a.npy")).string()), b = ReadNpy((dir / (name + "_b.npy")).string());
    if (a.count() != m * k || b.count() != k * n) throw Error(name + ": A or B does not have the shape cases.json gives");
    const bool blockwise = c.contains("a_block");
    NpyArray sa, sb;
    if (blockwise) {
      sa = ReadNpy((dir / (name + "_sa.npy")).string());
      sb = ReadNpy((dir / (name + "_sb.npy")).string());
      if (sa.dtype != DType::kF32 || sb.dtype != DType::kF32 || sa.shape.size() != 2 || sb.shape.size() != 2 ||
          sa.count() != m * (k / 128) || sb.shape[0] != k / 128 || sb.shape[1] == 0 || n % sb.shape[1] != 0)
        throw Error(name + ": the block scales are not float32 (M x K/128) and (K/128 x N/per) arrays");
    }
    std::vector<std::pair<std::string, std::string>> outputs;  // (file suffix, model)
    if (c.contains("models")) {
      for (auto it = c["models"].begin(); it != c["models"].end(); ++it) outputs.emplace_back(it.key(), it.value());
    } else {
      for (auto it = j["models"].begin(); it != j["models"].end(); ++it) outputs.emplace_back(it.key(), it.value());
    }
    for (const auto& [key, model] : outputs) {
      const NpyArray d = ReadNpy((dir / (name + "_" + key + ".npy")).string());
      if (d.count() != m * n || d.dtype != DType::kF32) throw Error(name + "_" + key + ".npy is not an M x N float32 array");
      const std::string mode = key == "d_fast" ? "fast" : "slow";
      CaseRng rng(opt.seed, "gemm/hopper_" + name + "_" + mode);
      PlannedFile f;
      f.path = "gemm/hopper_" + name + "_" + mode + ".txt";
      f.header.op = "dot";
      f.header.Set("a", c.at("a_format").get<std::string>()).Set("b", c.at("b_format").get<std::string>());
      f.header.Set("k", std::to_string(k)).Set("scale", blockwise ? "fp32" : "none");
      if (blockwise) f.header.Set("block", "128");
      if (c.contains("a_tensor_scale")) {
        f.header.Set("tensor-a", Hex(F32Bits(c["a_tensor_scale"].get<float>()), 8));
        f.header.Set("tensor-b", Hex(F32Bits(c["b_tensor_scale"].get<float>()), 8));
      }
      f.header.Set("model", model).Set("observed", "hardware");
      std::string dev = device;
      for (char& ch : dev)
        if (ch == ' ') ch = '_';
      f.header.Set("device", dev);
      std::vector<size_t> picks;
      if (opt.level >= 2) {
        for (size_t i = 0; i < m * n; ++i) picks.push_back(i);
      } else {
        std::set<size_t> chosen;
        while (chosen.size() < std::min<size_t>(8, m * n)) chosen.insert(rng.Below(m * n));
        picks.assign(chosen.begin(), chosen.end());
      }
      const size_t kb = k / 128;
      for (size_t p : picks) {
        const size_t r = p / n, col = p % n;
        std::string ah, bh, sah = "-", sbh = "-";
        for (size_t t = 0; t < k; ++t) {
          ah += Hex(a.data[r * k + t], 2);
          bh += Hex(b.data[t * n + col], 2);
        }
        if (blockwise) {
          const size_t sb_cols = sb.shape[1], per = n / sb_cols;  // 128x128 blocks or 128x1 (per = 1)
          sah.clear();
          sbh.clear();
          for (size_t t = 0; t < kb; ++t) {
            sah += Hex(F32At(sa, r * kb + t), 8);
            sbh += Hex(F32At(sb, t * sb_cols + col / per), 8);
          }
        }
        f.inputs.push_back({ah, bh, sah, sbh, "-"});
        f.observed.push_back(Hex(F32At(d, p), 8));
      }
      emit(std::move(f));
    }
  }
}

void GenGemm(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  const std::vector<DotConfig> configs = {
      {"mxfp8", "e4m3", "e4m3", "ue8m0", 64, 32, {"exact", "fp32-seq", "block-exact", "blackwell-mxf8f6f4"}},
      {"mxfp8-e5m2", "e5m2", "e5m2", "ue8m0", 64, 32, {"exact", "block-exact", "blackwell-mxf8f6f4"}},
      {"mxfp6", "e2m3", "e3m2", "ue8m0", 64, 32, {"exact", "blackwell-mxf8f6f4"}},
      {"mxfp4", "e2m1", "e2m1", "ue8m0", 64, 32,
       {"exact", "fp32-seq", "block-exact", "blackwell-mxf8f6f4", "blackwell-mxf4nvf4"}},
      {"nvfp4", "e2m1", "e2m1", "e4m3", 64, 16, {"exact", "fp32-seq", "block-exact", "blackwell-mxf4nvf4"}},
      {"fp8", "e4m3", "e4m3", "none", 256, 0, {"exact", "fp32-seq", "hopper-fp8", "hopper-fp8-fast", "ada-fp8"}},
      {"fp8-blockwise", "e4m3", "e4m3", "fp32", 256, 128, {"exact", "block-exact", "hopper-fp8", "hopper-fp8-vec"}},
  };
  for (const auto& cfg : configs) {
    CaseRng rng(opt.seed, "gemm/" + cfg.name);
    const std::vector<Fields> cases = DotCases(cfg, opt.level, rng);
    for (const auto& model : cfg.models) {
      PlannedFile f;
      f.path = "gemm/" + cfg.name + "_" + model + ".txt";
      f.header.op = "dot";
      f.header.Set("a", cfg.a).Set("b", cfg.b).Set("k", std::to_string(cfg.k)).Set("scale", cfg.scale);
      if (cfg.scale != "none") f.header.Set("block", std::to_string(cfg.block));
      f.header.Set("model", model).Set("spec", "MMA-Sim");
      f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
      f.inputs = cases;
      emit(std::move(f));
    }
  }
  if (!opt.hopper_dir.empty()) GenHopperObserved(opt, emit);
}

}  // namespace

void GenerateSuite(const std::string& suite, const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  if (suite == "conversions") return GenConversions(opt, emit);
  if (suite == "ue8m0") return GenUe8m0(opt, emit);
  if (suite == "mx-block") return GenMxBlock(opt, emit);
  if (suite == "nvfp4-block") return GenNvfp4Block(opt, emit);
  if (suite == "sr") return GenSr(opt, emit);
  if (suite == "gemm") return GenGemm(opt, emit);
  throw Error("unknown suite '" + suite + "'");
}

}  // namespace detail
}  // namespace qmx::golden
