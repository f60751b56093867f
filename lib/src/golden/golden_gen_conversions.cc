// golden_gen_conversions.cc: the generators of the conversions suite (every source into every format of 8
// bits or fewer under every rounding and saturation, and decoding) and the ue8m0 suite (amax -> UE8M0 scale
// byte under each OCP MX scale rule), from the boundary tables of golden_gen.cc.
#include "golden/golden_gen.h"

#include <cmath>
#include <limits>

#include "qmx/cast_options.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/scale.h"

namespace qmx::golden::detail {
namespace {

std::string SpecRevision(const Format& d) {
  const std::string n = d.name;
  if (d.encoding == Encoding::kFnuz) return "FNUZ-ml_dtypes-0.6";  // no written spec: ml_dtypes, AMD CDNA3
  // IEEE 754's rules at 8 bits (ml_dtypes' float8_e4m3, FPnew's FP8ALT): no standard names the format.
  if (d.encoding == Encoding::kIeee && d.Bits() == 8 && n != "e5m2") return "IEEE-754-2019-style";
  return n == "e4m3" || n == "e5m2" ? "OFP8-1.0" : "OCP-MX-1.0";
}

std::vector<Fields> OneField(const std::vector<uint64_t>& codes, int digits) {
  std::vector<Fields> v;
  for (uint64_t c : codes) v.push_back({Hex(c, digits)});
  return v;
}

const std::vector<std::string>& SmallFormats() {
  // float8_e4m3: ml_dtypes' IEEE-like E4M3 (bias 7, Inf and NaNs at the top exponent, largest finite 240),
  // FPnew's FP8ALT.
  static const std::vector<std::string> k = {"e4m3",     "e5m2",     "e3m2",       "e2m3", "e2m1", "int8",
                                             "ue8m0",    "e4m3fnuz", "e5m2fnuz",   "e4m3b11fnuz", "float8_e4m3"};
  return k;
}

}  // namespace

// ------------------------------------------------------------------ conversions
void GenConversions(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  static const char* kRound[] = {"rne", "rna", "rz", "ru", "rd", "ro"};
  static const char* kSat[] = {"satfinite", "nosat", "satpropagate"};
  for (const std::string src : {"f32", "f16", "bf16"}) {
    const Src s = SrcByName(src);
    for (const auto& dn : SmallFormats()) {
      const Format d = ParseFormat(dn);
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
        const char* key2 = nullptr;  // a second option, where the variant sets two
        const char* value2 = nullptr;
      };
      std::vector<Variant> variants = {{"", nullptr, nullptr}};
      if (src == "f32") {
        if (d.HasNan()) variants.push_back({"_nanpos", "nan-sign", "positive"});
        if (d.HasSubnormals()) variants.push_back({"_flush", "subnormals", "flush"});
        if (!d.HasNan()) variants.push_back({"_nan0", "nan-fallback", "zero"});
        if (d.HasSubnormals()) variants.push_back({"_tinyafter", "tininess", "after"});
        // RISC-V's canonical NaN (positive, the quiet bit alone) in the IEEE-style formats.
        if (d.encoding == Encoding::kIeee) variants.push_back({"_nanriscv", "nan-sign", "positive", "nan-payload", "quiet"});
      }
      for (const char* r : kRound) {
        for (const char* sat : kSat) {
          for (const Variant& v : variants) {
            if (v.key && (std::string(r) != "rne" || std::string(sat) != "satfinite")) continue;
            CastOptions c;
            c.rounding = ParseRounding(r);
            c.saturation = ParseSaturation(sat);
            for (const auto& [key, value] : {std::pair{v.key, v.value}, std::pair{v.key2, v.value2}}) {
              if (key == nullptr) continue;
              if (std::string(key) == "nan-sign") c.nan_sign = ParseNanSign(value);
              if (std::string(key) == "subnormals") c.subnormals = ParseSubnormals(value);
              if (std::string(key) == "nan-fallback") c.nan_fallback = ParseNanFallback(value);
              if (std::string(key) == "tininess") c.tininess = ParseTininess(value);
              if (std::string(key) == "nan-payload") c.nan_payload = ParseNanPayload(value);
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
            f.header.Set("subnormals", SubnormalsName(c.subnormals));
            if (c.tininess != Tininess::kBeforeRounding) f.header.Set("tininess", TininessName(c.tininess));
            if (c.nan_payload != NanPayload::kDefault) f.header.Set("nan-payload", NanPayloadName(c.nan_payload));
            f.header.Set("spec", SpecRevision(d));
            f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
            if (opt.min_per_class > 0) {
              std::vector<uint64_t> more = inputs;
              for (uint64_t x : TopUpConversion(s.f, d, c, inputs, opt.min_per_class)) more.push_back(x);
              f.inputs = OneField(more, s.Digits());
            } else {
              f.inputs = OneField(inputs, s.Digits());
            }
            emit(std::move(f));
          }
        }
      }
    }
  }
  for (const auto& dn : SmallFormats()) {
    const Format d = ParseFormat(dn);
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
      // The rule's steps: in each binade, the smallest amax whose scale is above that of the binade's first
      // value, and one ulp below it (the even rule steps inside a binade, the others at its edges).
      const auto byte = [&](uint32_t b) { return Ue8m0ScaleFromAmaxRef(F32FromBits(b), el, rule); };
      for (int e = -149; e <= 127; ++e) {
        if (!in_range(e)) continue;
        const uint32_t lo = F32Bits(std::ldexp(1.0f, e)), hi = e == 127 ? 0x7F7FFFFFu : F32Bits(std::ldexp(1.0f, e + 1));
        if (byte(hi) == byte(lo)) continue;
        uint32_t below = lo, at = hi;  // byte(below) is the binade's, byte(at) above it
        while (at - below > 1) {
          const uint32_t mid = below + (at - below) / 2;
          (byte(mid) == byte(lo) ? below : at) = mid;
        }
        out.Add(at);
        out.Add(below);
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

}  // namespace qmx::golden::detail
