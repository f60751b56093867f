// format.cc: format registry, user format parsing, decoding of codes and derived limits.
// Spec tables: OCP OFP8 rev 1.0 table 1, OCP MX v1.0 tables 2-4, IEEE P3109 interim report section 3.
#include "qmx/format.h"

#include <cmath>
#include <deque>
#include <mutex>
#include <cctype>

#include "qmx/error.h"
#include "qmx/threads.h"
#include "round/round_core.h"  // ClassifyCode and DecodeCode: host-device bodies shared with the GPU engine

namespace qmx {
namespace {

// Every program that uses the library uses its formats, so the fork handler (qmx/threads.h) is installed
// from here at start-up, before any parallel call can run.
const bool kForkHandlerInstalled = (InstallForkHandler(), true);

// True when sig * 2^e equals num * 2^e2 (integers only, so it works in static_assert).
constexpr bool SameValue(int64_t sig, int e, int64_t num, int e2) {
  while (e > e2) { sig *= 2; --e; }
  while (e2 > e) { num *= 2; --e2; }
  return sig == num;
}
constexpr bool MaxIs(const Format& f, int64_t num, int e2) {
  return SameValue(CodeSig(f, f.MaxFiniteCode()), CodeExp(f, f.MaxFiniteCode()), num, e2);
}
constexpr bool MinSubIs(const Format& f, int64_t num, int e2) {
  return SameValue(CodeSig(f, f.MinPositiveCode()), CodeExp(f, f.MinPositiveCode()), num, e2);
}

// The OCP tables of docs/REFERENCES.md section 1, checked against the derived limits.
static_assert(fmt::kE4M3.Bits() == 8 && MaxIs(fmt::kE4M3, 448, 0) && MinSubIs(fmt::kE4M3, 1, -9), "e4m3");
static_assert(fmt::kE4M3.Emin() == -6 && fmt::kE4M3.MaxFiniteCode() == 0x7E && fmt::kE4M3.CanonicalNan() == 0x7F,
              "e4m3 codes");
static_assert(fmt::kE5M2.Bits() == 8 && MaxIs(fmt::kE5M2, 57344, 0) && MinSubIs(fmt::kE5M2, 1, -16), "e5m2");
static_assert(fmt::kE5M2.Emin() == -14 && fmt::kE5M2.PositiveInfCode() == 0x7C, "e5m2 codes");
static_assert(fmt::kE3M2.Bits() == 6 && MaxIs(fmt::kE3M2, 28, 0) && MinSubIs(fmt::kE3M2, 1, -4) &&
                  fmt::kE3M2.Emin() == -2,
              "e3m2");
static_assert(fmt::kE2M3.Bits() == 6 && MaxIs(fmt::kE2M3, 15, -1) && MinSubIs(fmt::kE2M3, 1, -3) &&
                  fmt::kE2M3.Emin() == 0,
              "e2m3");
static_assert(fmt::kE2M1.Bits() == 4 && MaxIs(fmt::kE2M1, 6, 0) && MinSubIs(fmt::kE2M1, 1, -1) &&
                  fmt::kE2M1.Emin() == 0,
              "e2m1");
static_assert(fmt::kInt8.Bits() == 8 && MaxIs(fmt::kInt8, 127, -6) && MinSubIs(fmt::kInt8, 1, -6), "int8");
static_assert(fmt::kUE8M0.Bits() == 8 && MaxIs(fmt::kUE8M0, 1, 127) && MinSubIs(fmt::kUE8M0, 1, -127) &&
                  fmt::kUE8M0.CanonicalNan() == 0xFF,
              "ue8m0");
// The FNUZ formats (ml_dtypes' float8_*fnuz documentation, AMD's CDNA3 ISA guide): 0x80 is their only NaN,
// no code is Inf or -0.
static_assert(fmt::kE4M3Fnuz.Bits() == 8 && MaxIs(fmt::kE4M3Fnuz, 240, 0) && MinSubIs(fmt::kE4M3Fnuz, 1, -10) &&
                  fmt::kE4M3Fnuz.Emin() == -7 && fmt::kE4M3Fnuz.CanonicalNan() == 0x80 && !fmt::kE4M3Fnuz.HasInf() &&
                  !fmt::kE4M3Fnuz.HasNegativeZero(),
              "e4m3fnuz");
static_assert(fmt::kE5M2Fnuz.Bits() == 8 && MaxIs(fmt::kE5M2Fnuz, 57344, 0) && MinSubIs(fmt::kE5M2Fnuz, 1, -17) &&
                  fmt::kE5M2Fnuz.Emin() == -15 && fmt::kE5M2Fnuz.CanonicalNan() == 0x80 && !fmt::kE5M2Fnuz.HasInf(),
              "e5m2fnuz");
static_assert(fmt::kE4M3B11Fnuz.Bits() == 8 && MaxIs(fmt::kE4M3B11Fnuz, 30, 0) &&
                  MinSubIs(fmt::kE4M3B11Fnuz, 1, -13) && fmt::kE4M3B11Fnuz.Emin() == -10 &&
                  fmt::kE4M3B11Fnuz.CanonicalNan() == 0x80,
              "e4m3b11fnuz");
static_assert(fmt::kBF16.Bits() == 16 && fmt::kFP16.Bits() == 16 && fmt::kFP32.Bits() == 32 &&
                  fmt::kFP64.Bits() == 64 && MaxIs(fmt::kFP16, 65504, 0),
              "ieee");

const std::vector<RegistryEntry> kRegistry = {
    {fmt::kE4M3, "OCP OFP8 E4M3: bias 7, no Inf, NaN S.1111.111, max 448"},
    {fmt::kE5M2, "OCP OFP8 E5M2: bias 15, IEEE Inf/NaN, max 57344"},
    {fmt::kE3M2, "OCP MX FP6 E3M2: bias 3, no Inf/NaN, max 28"},
    {fmt::kE2M3, "OCP MX FP6 E2M3: bias 1, no Inf/NaN, max 7.5"},
    {fmt::kE2M1, "OCP MX FP4 E2M1: bias 1, no Inf/NaN, max 6"},
    {fmt::kInt8, "OCP MX INT8: two's complement, implicit scale 2^-6, max 127/64"},
    {fmt::kUE8M0, "OCP MX scale UE8M0: unsigned 2^(code-127), no zero, NaN 0xFF"},
    {fmt::kE4M3Fnuz, "FP8 E4M3 FNUZ (AMD CDNA3 FP8): bias 8, no Inf, no -0, NaN 0x80, max 240"},
    {fmt::kE5M2Fnuz, "FP8 E5M2 FNUZ (AMD CDNA3 BF8): bias 16, no Inf, no -0, NaN 0x80, max 57344"},
    {fmt::kE4M3B11Fnuz, "FP8 E4M3 B11 FNUZ (ml_dtypes): bias 11, no Inf, no -0, NaN 0x80, max 30"},
    {fmt::kBF16, "bfloat16: 1-8-7, bias 127, IEEE Inf/NaN"},
    {fmt::kFP16, "IEEE 754 binary16: 1-5-10, bias 15"},
    {fmt::kFP32, "IEEE 754 binary32: 1-8-23, bias 127"},
};

// User-described formats keep their names here so Format::name stays valid.
std::deque<std::string>& InternedNames() {
  static std::deque<std::string> names;
  return names;
}
const char* Intern(const std::string& s) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& n : InternedNames())
    if (n == s) return n.c_str();
  InternedNames().push_back(s);
  return InternedNames().back().c_str();
}

// Reads a run of decimal digits at s[*pos] (at most 4, so no overflow); -1 when there is none.
int ReadNumber(const std::string& s, size_t* pos) {
  size_t end = *pos;
  while (end < s.size() && end - *pos < 4 && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
  if (end == *pos || (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])))) return -1;
  const int v = std::stoi(s.substr(*pos, end - *pos));
  *pos = end;
  return v;
}

void CheckUsable(const Format& f, const std::string& spec) {
  auto fail = [&](const std::string& why) { throw Error("format '" + spec + "': " + why); };
  if (f.exp_bits < 1) fail("needs at least 1 exponent bit");
  if (f.exp_bits > 11) fail("at most 11 exponent bits are supported (values must fit in FP64)");
  if (f.man_bits < 0 || f.man_bits > 52) fail("mantissa bits must be in 0..52");
  if (f.Bits() > 64) fail("more than 64 bits");
  if (f.Bits() < 2) fail("fewer than 2 bits");
  if (f.encoding == Encoding::kIeee && f.exp_bits < 2)
    fail("IEEE-style specials need at least 2 exponent bits (the all-ones exponent is reserved)");
  if (f.encoding == Encoding::kFnNan && f.MaxFiniteCode() == 0) fail("fn-style NaN leaves no finite nonzero value");
  if (f.encoding == Encoding::kFnuz && !f.is_signed) fail("an fnuz format is signed (its NaN is the -0 code)");
  // Emin and Emax must keep every value a normal double.
  const int emax = static_cast<int>((f.MaxFiniteCode() & f.MagMask()) >> f.man_bits) - f.bias;
  if (f.Emin() - f.man_bits < -1074 || emax > 1023) fail("bias " + std::to_string(f.bias) + " puts values outside FP64");
  if (f.MaxFiniteCode() < f.MinPositiveCode()) fail("no finite nonzero value");
}

}  // namespace

const std::vector<RegistryEntry>& Registry() { return kRegistry; }

// ml_dtypes' and PyTorch's names (and torch's "torch." spelling) for the formats of the registry and for
// ml_dtypes' IEEE-like 8-bit types; and the unsigned block-scale formats by their vendors' names: ue4m3
// (NVFP4's scale, E4M3 without its sign: 7 bits, NaN 0x7F) and ue5m3 (AMD gfx1250's "E5M3" scale: 8 bits,
// bias 15, subnormals, NaN 0xFF). numpy's "int8" is a plain integer, not OCP's scaled INT8: no alias.
std::string CanonicalFormatName(const std::string& name) {
  static const struct { const char* alias; const char* name; } kAliases[] = {
      {"float8_e4m3fn", "e4m3"},      {"float8_e5m2", "e5m2"},   {"float8_e8m0fnu", "ue8m0"},
      {"float6_e2m3fn", "e2m3"},      {"float6_e3m2fn", "e3m2"}, {"float4_e2m1fn", "e2m1"},
      {"float8_e4m3", "e4m3:special=ieee"}, {"float8_e3m4", "e3m4:special=ieee"},
      {"float8_e4m3fnuz", "e4m3fnuz"}, {"float8_e5m2fnuz", "e5m2fnuz"}, {"float8_e4m3b11fnuz", "e4m3b11fnuz"},
      {"bfloat16", "bf16"},           {"float16", "fp16"},       {"float32", "fp32"},
      {"float64", "fp64"},
      {"ue4m3", "e4m3:unsigned:special=fn"}, {"ue5m3", "e5m3:unsigned:special=fn"},
  };
  const std::string bare = name.rfind("torch.", 0) == 0 ? name.substr(6) : name;
  for (const auto& a : kAliases)
    if (bare == a.alias) return a.name;
  return name;
}

const Format& GetFormat(const std::string& given) {
  const std::string name = CanonicalFormatName(given);
  for (const auto& e : kRegistry)
    if (name == e.format.name) return e.format;
  if (name == "fp64") return fmt::kFP64;
  throw Error("unknown format '" + given + "'");
}

Format ParseFormat(const std::string& given) {
  const std::string spec = CanonicalFormatName(given);
  for (const auto& e : kRegistry)
    if (spec == e.format.name) return e.format;
  if (spec == "fp64") return fmt::kFP64;

  const std::string kUsage =
      "' (use a registry name, eXmY[:bias=B][:special=ieee|fn|finite|fnuz][:unsigned], binaryKpP{s,u}{e,f}, or an "
      "ml_dtypes / torch name such as float8_e4m3fn)";
  size_t pos = 0;
  // P3109 binaryKpP{s,u}{e,f}: K bits, precision P (P-1 mantissa bits).
  if (spec.rfind("binary", 0) == 0) {
    pos = 6;
    const int k = ReadNumber(spec, &pos);
    const bool has_p = k >= 0 && pos < spec.size() && spec[pos] == 'p';
    if (has_p) ++pos;
    const int p = has_p ? ReadNumber(spec, &pos) : -1;
    if (p < 0 || pos + 2 != spec.size() || (spec[pos] != 's' && spec[pos] != 'u') ||
        (spec[pos + 1] != 'e' && spec[pos + 1] != 'f'))
      throw Error("unknown format '" + spec + kUsage);
    const bool is_signed = spec[pos] == 's';
    if (k < 2 || k > 16) throw Error("format '" + spec + "': P3109 bit width K must be in 2..16");
    if (p < 1 || p > k - (is_signed ? 1 : 0))
      throw Error("format '" + spec + "': precision P must be in 1..K" + std::string(is_signed ? "-1" : ""));
    Format f{};
    f.man_bits = p - 1;
    f.exp_bits = k - p + (is_signed ? 0 : 1);
    // Signed: bias 2^(K-P-1) (binary8p4 has bias 8); unsigned: bias 2^(K-P), the same range (as we read the
    // interim report; see docs/numerics.md "Formats").
    f.bias = 1 << (f.exp_bits - 1);
    f.is_signed = is_signed;
    f.encoding = spec[pos + 1] == 'e' ? Encoding::kP3109Extended : Encoding::kP3109Finite;
    f.name = Intern(spec);
    CheckUsable(f, spec);
    return f;
  }

  // eXmY followed by ":key" or ":key=value" options.
  int x = -1, y = -1;
  if (!spec.empty() && spec[0] == 'e') {
    pos = 1;
    x = ReadNumber(spec, &pos);
    if (x >= 0 && pos < spec.size() && spec[pos] == 'm') {
      ++pos;
      y = ReadNumber(spec, &pos);
    }
  }
  if (x < 0 || y < 0 || (pos < spec.size() && spec[pos] != ':')) throw Error("unknown format '" + spec + kUsage);
  Format f{};
  f.exp_bits = x;
  f.man_bits = y;
  if (f.exp_bits > 11 || f.man_bits > 52) throw Error("format '" + spec + "': exponent bits must be <= 11 and mantissa bits <= 52");
  f.bias = f.exp_bits >= 1 ? (1 << (f.exp_bits - 1)) - 1 : 0;
  f.is_signed = true;
  // 8-bit and wider user formats default to IEEE specials (as ml_dtypes' float8_e3m4); narrower ones
  // follow OCP FP6/FP4 and are all finite.
  const int bits = 1 + f.exp_bits + f.man_bits;
  f.encoding = bits >= 8 ? Encoding::kIeee : Encoding::kFinite;
  while (pos < spec.size()) {
    // spec[pos] == ':' here.
    const size_t next = spec.find(':', pos + 1);
    const std::string item = spec.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
    pos = next == std::string::npos ? spec.size() : next;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string val = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "bias") {
      if (val.empty()) throw Error("format '" + spec + "': bias needs a value, e.g. :bias=8");
      size_t vpos = val[0] == '-' ? 1 : 0;
      const int mag = ReadNumber(val, &vpos);
      if (mag < 0 || vpos != val.size()) throw Error("format '" + spec + "': bias '" + val + "' is not an integer");
      f.bias = val[0] == '-' ? -mag : mag;
    } else if (key == "special") {
      if (val == "ieee") f.encoding = Encoding::kIeee;
      else if (val == "fn") f.encoding = Encoding::kFnNan;
      else if (val == "finite") f.encoding = Encoding::kFinite;
      else if (val == "fnuz") f.encoding = Encoding::kFnuz;
      else throw Error("format '" + spec + "': special must be ieee, fn, finite or fnuz, not '" + val + "'");
    } else if (key == "unsigned") {
      f.is_signed = false;
    } else {
      throw Error("format '" + spec + "': unknown option '" + key + "' (bias, special, unsigned)");
    }
  }
  f.name = Intern(spec);
  CheckUsable(f, spec);
  return f;
}

CodeClass ClassifyCode(const Format& f, uint64_t code) { return detail::ClassifyCodeCore(f, code); }

DecodedCode DecodeCode(const Format& f, uint64_t code) { return detail::DecodeCodeCore(f, code); }

double DecodeToDouble(const Format& f, uint64_t code) {
  const DecodedCode d = DecodeCode(f, code);
  switch (d.cls) {
    case CodeClass::kNan:
      return d.negative ? -std::nan("") : std::nan("");
    case CodeClass::kInf:
      return d.negative ? -HUGE_VAL : HUGE_VAL;
    case CodeClass::kZero:
      return d.negative ? -0.0 : 0.0;
    default:
      // sig < 2^53 for every format we accept, so the product is exact.
      return (d.negative ? -1.0 : 1.0) * std::ldexp(static_cast<double>(d.sig), d.exp);
  }
}

float DecodeToFloat(const Format& f, uint64_t code) { return static_cast<float>(DecodeToDouble(f, code)); }

FormatLimits Limits(const Format& f) {
  FormatLimits l{};
  l.max_finite = DecodeToDouble(f, f.MaxFiniteCode());
  l.min_subnormal = DecodeToDouble(f, f.MinPositiveCode());
  l.min_normal = f.IsInt() ? l.min_subnormal : std::ldexp(1.0, f.Emin());
  l.binades = std::log2(l.max_finite / l.min_subnormal);
  l.emax = static_cast<int>(std::floor(std::log2(l.max_finite)));
  l.normal_binades = std::log2(l.max_finite / l.min_normal);
  l.decimal_digits = f.IsInt() ? std::log10(std::ldexp(1.0, f.man_bits + 1)) : (f.man_bits + 1) * std::log10(2.0);
  return l;
}

uint64_t FiniteCodeCount(const Format& f) {
  uint64_t finite = 0;
  for (double v : DecodeTable(f)) finite += std::isfinite(v);
  return finite;
}

std::vector<uint64_t> AllCodes(const Format& f) {
  if (f.Bits() > 8) throw Error(std::string("format '") + f.name + "' has more than 8 bits; no code table");
  std::vector<uint64_t> codes(1ull << f.Bits());
  for (uint64_t c = 0; c < codes.size(); ++c) codes[c] = c;
  return codes;
}

std::vector<double> DecodeTable(const Format& f) {
  std::vector<double> t;
  for (uint64_t c : AllCodes(f)) t.push_back(DecodeToDouble(f, c));
  return t;
}

std::vector<float> DecodeTableF32(const Format& f) {
  std::vector<float> t;
  for (uint64_t c : AllCodes(f)) t.push_back(DecodeToFloat(f, c));
  return t;
}

}  // namespace qmx
