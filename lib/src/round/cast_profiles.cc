// cast_profiles.cc: other libraries' scalar casts (qmx/cast_profiles.h), each written as its library's
// steps (lib/research/library-casts.md quotes them): the finite rounding is the reference routine's RNE,
// the special cases and E8M0 bit rules are the library's own.
#include "qmx/cast_profiles.h"

#include <cmath>
#include <cstring>

#include "qmx/error.h"
#include "qmx/round.h"

namespace qmx {
namespace {

enum Kind {
  kOcpSat,
  kOcpNoSat,
  kMlDtypes,
  kPytorch,
  kOnnxSat,
  kOnnxNoSat,
  kOnnxNearest,
  kOnnxDown,
  kOnnxUp,
};

struct Def {
  const char* name;
  int kind;
  std::vector<Format> formats;
};
const std::vector<Def>& Defs() {
  static const std::vector<Def> defs = {
      {"ocp-sat", kOcpSat,
       {fmt::kE4M3, fmt::kE5M2, fmt::kUE8M0, fmt::kE2M1, fmt::kE2M3, fmt::kE3M2, fmt::kE4M3Fnuz, fmt::kE5M2Fnuz,
        fmt::kE4M3B11Fnuz}},
      {"ocp-nosat", kOcpNoSat, {fmt::kE4M3, fmt::kE5M2, fmt::kE4M3Fnuz, fmt::kE5M2Fnuz, fmt::kE4M3B11Fnuz}},
      {"ml-dtypes", kMlDtypes,
       {fmt::kE4M3, fmt::kE5M2, fmt::kUE8M0, fmt::kE2M1, fmt::kE2M3, fmt::kE3M2, fmt::kE4M3Fnuz, fmt::kE5M2Fnuz,
        fmt::kE4M3B11Fnuz, ParseFormat("e4m3:special=ieee"), ParseFormat("e3m4:special=ieee")}},
      {"pytorch", kPytorch, {fmt::kE4M3, fmt::kE5M2, fmt::kUE8M0, fmt::kE4M3Fnuz, fmt::kE5M2Fnuz}},
      {"onnx", kOnnxSat, {fmt::kE4M3, fmt::kE5M2, fmt::kUE8M0, fmt::kE2M1}},
      {"onnx-nosat", kOnnxNoSat, {fmt::kE4M3, fmt::kE5M2, fmt::kE2M1}},
      {"onnx-nearest", kOnnxNearest, {fmt::kUE8M0}},
      {"onnx-down", kOnnxDown, {fmt::kUE8M0}},
  };
  return defs;
}

// The profile's definition; qmx::Error listing the names for an unknown one.
const Def& DefOf(const std::string& profile) {
  for (const Def& d : Defs())
    if (profile == d.name) return d;
  std::string names;
  for (const Def& d : Defs()) names += (names.empty() ? "" : ", ") + std::string(d.name);
  throw Error("unknown cast profile '" + profile + "' (" + names + ")");
}

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// RNE into dst by the reference routine, saturating or not.
uint8_t Rne(float x, const Format& dst, bool saturate) {
  CastOptions o;
  o.rounding = Rounding::kRne;
  o.saturation = saturate ? Saturation::kSatFinite : Saturation::kNoSat;
  return static_cast<uint8_t>(ConvertF32(x, dst, o));
}

// c10's fp8e8m0fnu_from_fp32_value and ONNX's to_float8e8m0 "nearest": the sign ignored, round up when
// the guard bit (22) is set and any lower bit or the implied bit (exponent > 0) is: ties go up for
// normals, and FP32 subnormals round as a linear field (above 2^-127 -> 2^-126).
bool E8m0NearestUp(uint32_t bits) {
  const uint32_t e = (bits >> 23) & 0xFF;
  const bool g = bits & 0x400000, r = bits & 0x200000, s = bits & 0x1FFFFF;
  return g && (r || s || e > 0);
}

uint8_t E8m0(int kind, float x) {
  const uint32_t bits = Bits(x);
  const uint32_t e = (bits >> 23) & 0xFF;
  switch (kind) {
    case kMlDtypes: {
      // ml_dtypes' ConvertImpl: zero (kToHasZero false), any negative (unsigned target), Inf, NaN -> NaN;
      // then RNE of the value with the implied bit as the kept bit (ties up), overflow to NaN.
      if ((bits & 0x7FFFFFFF) == 0 || (bits >> 31) || e == 0xFF) return 0xFF;
      const uint32_t out = e + (E8m0NearestUp(bits) ? 1 : 0);
      return out >= 0xFF ? 0xFF : static_cast<uint8_t>(out);
    }
    case kPytorch: {
      if (e == 0xFF) return 0xFF;
      return static_cast<uint8_t>(e + (E8m0NearestUp(bits) ? 1 : 0));  // 0xFE + 1 is 0xFF, NaN
    }
    case kOnnxNearest:
    case kOnnxUp:
    case kOnnxDown: {
      if (e == 0xFF) return 0xFF;  // Inf and NaN, even with saturate
      bool up = kind == kOnnxNearest ? E8m0NearestUp(bits) : kind == kOnnxUp ? (bits & 0x7FFFFF) != 0 : false;
      if (e == 0xFE) up = false;  // saturate=1: stays at 2^127
      return static_cast<uint8_t>(e + (up ? 1 : 0));
    }
    default:
      break;
  }
  CastOptions o;  // ocp-sat: the reference routine (RNE on the value, NaN for zero and negatives)
  return static_cast<uint8_t>(ConvertF32(x, fmt::kUE8M0, o));
}

}  // namespace

std::vector<std::string> CastProfileNames() {
  std::vector<std::string> v;
  for (const Def& d : Defs()) v.push_back(d.name);
  return v;
}

std::vector<Format> CastProfileFormats(const std::string& profile) { return DefOf(profile).formats; }

CastProfile::CastProfile(const std::string& name, const Format& dst) : name_(name), dst_(dst), kind_(0) {
  const Def& def = DefOf(name);
  bool ok = false;
  std::string list;
  for (const Format& f : def.formats) {
    ok = ok || f == dst;
    list += (list.empty() ? "" : " ") + std::string(f.name);
  }
  if (!ok) throw Error("cast profile '" + name + "' casts to " + list + ", not " + dst.name);
  kind_ = def.kind == kOnnxSat && dst == fmt::kUE8M0 ? kOnnxUp : def.kind;  // Cast's round_mode default
}

uint8_t CastProfile::operator()(float x) const {
  if (dst_ == fmt::kUE8M0) return E8m0(kind_, x);
  const bool fp8 = dst_.Bits() == 8;
  const uint8_t sign = std::signbit(x) ? static_cast<uint8_t>(dst_.SignBit()) : 0;
  switch (kind_) {
    case kOcpSat: return Rne(x, dst_, true);
    case kOcpNoSat: return Rne(x, dst_, false);
    case kMlDtypes:
    case kOnnxNoSat:
    case kPytorch:
    case kOnnxSat:
      if (dst_.encoding == Encoding::kFnuz) return Rne(x, dst_, false);  // FNUZ: NaN, Inf, overflow -> 0x80
      if (std::isnan(x)) {
        if (!fp8) return sign ? 0 : static_cast<uint8_t>(dst_.SignBit());  // ml_dtypes: -quiet_NaN() is +0
        if (dst_ == fmt::kE5M2) return sign | (kind_ == kPytorch ? 0x7F : 0x7E);
        // ml_dtypes' IEEE-like float8_e4m3 and float8_e3m4: the quiet NaN, all-ones exponent and the top
        // mantissa bit (0x7C, 0x78), with the sign.
        if (dst_.encoding == Encoding::kIeee)
          return sign | static_cast<uint8_t>(dst_.PositiveInfCode() | (1u << (dst_.man_bits - 1)));
        return sign | 0x7F;
      }
      // FP6/FP4 saturate in every library (their infinity() is the max); FP8 only under ONNX saturate=1,
      // which clips x to +-max before the cast.
      return Rne(x, dst_, !fp8 || kind_ == kOnnxSat);
    default:
      break;
  }
  throw Error("cast profile '" + name_ + "': no rule for " + dst_.name);
}

void CastWithProfile(const CastProfile& profile, const float* x, size_t n, uint8_t* out) {
  const ptrdiff_t m = static_cast<ptrdiff_t>(n);
#pragma omp parallel for schedule(static, 65536)
  for (ptrdiff_t i = 0; i < m; ++i) out[i] = profile(x[i]);
}

}  // namespace qmx
