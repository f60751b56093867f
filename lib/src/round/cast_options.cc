// cast_options.cc: the names of qmx/cast_options.h's enums and their parsers (the CLI's, the golden files'
// and Python's spellings); each parser's error lists the valid names. The reference routine that reads
// the options is round_pack_ref.cc.
#include <string>

#include "qmx/cast_options.h"
#include "qmx/error.h"

namespace qmx {

const char* RoundingName(Rounding r) {
  switch (r) {
    case Rounding::kRne: return "rne";
    case Rounding::kRna: return "rna";
    case Rounding::kRz: return "rz";
    case Rounding::kRu: return "ru";
    case Rounding::kRd: return "rd";
    case Rounding::kRo: return "ro";
    case Rounding::kSrA: return "sr";
    case Rounding::kSrB: return "sr-b";
    case Rounding::kSrC: return "sr-c";
  }
  return "?";
}

const char* SaturationName(Saturation s) {
  switch (s) {
    case Saturation::kSatFinite: return "satfinite";
    case Saturation::kNoSat: return "nosat";
    case Saturation::kSatPropagate: return "satpropagate";
  }
  return "?";
}

Rounding ParseRounding(const std::string& s) {
  static const struct { const char* name; Rounding r; } kNames[] = {
      {"rne", Rounding::kRne}, {"rna", Rounding::kRna}, {"rz", Rounding::kRz},   {"ru", Rounding::kRu},
      {"rd", Rounding::kRd},   {"ro", Rounding::kRo},   {"sr", Rounding::kSrA},  {"sr-a", Rounding::kSrA},
      {"sr-b", Rounding::kSrB}, {"sr-c", Rounding::kSrC}};
  for (const auto& n : kNames)
    if (s == n.name) return n.r;
  throw Error("unknown rounding mode '" + s + "' (rne, rna, rz, ru, rd, ro, sr, sr-a, sr-b, sr-c)");
}

Saturation ParseSaturation(const std::string& s) {
  if (s == "satfinite") return Saturation::kSatFinite;
  if (s == "nosat") return Saturation::kNoSat;
  if (s == "satpropagate") return Saturation::kSatPropagate;
  throw Error("unknown saturation mode '" + s + "' (satfinite, nosat, satpropagate)");
}

const char* NanSignName(NanSign v) { return v == NanSign::kPositive ? "positive" : "keep"; }
const char* NanFallbackName(NanFallback v) { return v == NanFallback::kZero ? "zero" : "max"; }
const char* SubnormalsName(Subnormals v) { return v == Subnormals::kFlush ? "flush" : "keep"; }

NanSign ParseNanSign(const std::string& s, const std::string& option) {
  if (s == "keep") return NanSign::kKeep;
  if (s == "positive") return NanSign::kPositive;
  throw Error(option + " must be keep or positive, not '" + s + "'");
}

NanFallback ParseNanFallback(const std::string& s, const std::string& option) {
  if (s == "max") return NanFallback::kMaxPositive;
  if (s == "zero") return NanFallback::kZero;
  throw Error(option + " must be max or zero, not '" + s + "'");
}

const char* NegativeUnsignedName(NegativeUnsigned v) { return v == NegativeUnsigned::kMagnitude ? "magnitude" : "invalid"; }

NegativeUnsigned ParseNegativeUnsigned(const std::string& s, const std::string& option) {
  if (s == "invalid") return NegativeUnsigned::kInvalid;
  if (s == "magnitude") return NegativeUnsigned::kMagnitude;
  throw Error(option + " must be invalid or magnitude, not '" + s + "'");
}

const char* TininessName(Tininess v) { return v == Tininess::kAfterRounding ? "after" : "before"; }

Tininess ParseTininess(const std::string& s, const std::string& option) {
  if (s == "before") return Tininess::kBeforeRounding;
  if (s == "after") return Tininess::kAfterRounding;
  throw Error(option + " must be before or after, not '" + s + "'");
}

const char* NanPayloadName(NanPayload v) {
  return v == NanPayload::kQuiet ? "quiet" : v == NanPayload::kAllOnes ? "all-ones" : "default";
}

NanPayload ParseNanPayload(const std::string& s, const std::string& option) {
  if (s == "default") return NanPayload::kDefault;
  if (s == "quiet") return NanPayload::kQuiet;
  if (s == "all-ones") return NanPayload::kAllOnes;
  throw Error(option + " must be default, quiet or all-ones, not '" + s + "'");
}

Subnormals ParseSubnormals(const std::string& s, const std::string& option) {
  if (s == "keep") return Subnormals::kKeep;
  if (s == "flush") return Subnormals::kFlush;
  throw Error(option + " must be keep or flush, not '" + s + "'");
}

}  // namespace qmx
