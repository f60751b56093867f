// quantize_spec.cc: the quantize layer's recipe names and profiles (qmx/quantize.h), spec validation and
// block geometry: what a QuantSpec means before any tensor is quantized.
#include "qmx/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "qmx/error.h"
#include "qmx/mx.h"
#include "qmx/round.h"
#include "quantize/quantize_internal.h"

namespace qmx {

// ------------------------------------------------------------------ names

const char* AxisName(Axis a) { return a == Axis::kRow ? "row" : "col"; }

Axis ParseAxis(const std::string& s) {
  if (s == "row" || s == "rowwise" || s == "row-wise") return Axis::kRow;
  if (s == "col" || s == "colwise" || s == "column-wise" || s == "column") return Axis::kCol;
  throw Error("--axis must be row or col, not '" + s + "'");
}

namespace {

struct Recipe {
  const char* name;
  const Format* elem;  // null: elem_spec, a user format
  ScaleRule rule;
  int br, bc;
  bool delayed;
  bool row_scaled = false;
  const char* elem_spec = nullptr;
};
const Recipe kRecipes[] = {
    {"mxfp8", &fmt::kE4M3, ScaleRule::kRoundUp, 1, 32, false},
    {"mxfp8-ocp", &fmt::kE4M3, ScaleRule::kOcpFloor, 1, 32, false},
    {"mxfp8_e5m2", &fmt::kE5M2, ScaleRule::kRoundUp, 1, 32, false},
    {"mxfp6_e2m3", &fmt::kE2M3, ScaleRule::kRoundUp, 1, 32, false},
    {"mxfp6_e3m2", &fmt::kE3M2, ScaleRule::kRoundUp, 1, 32, false},
    {"mxfp4", &fmt::kE2M1, ScaleRule::kRoundUp, 1, 32, false},
    {"mxfp4-ocp", &fmt::kE2M1, ScaleRule::kOcpFloor, 1, 32, false},
    {"mxint8", &fmt::kInt8, ScaleRule::kOcpFloor, 1, 32, false},
    {"nvfp4", &fmt::kE2M1, ScaleRule::kNvfp4, 1, 16, false},
    {"nvfp4-2d", &fmt::kE2M1, ScaleRule::kNvfp4, 16, 16, false},
    {"nvfp4-row", &fmt::kE2M1, ScaleRule::kNvfp4, 1, 16, false, true},
    {"fp8-tensor-current", &fmt::kE4M3, ScaleRule::kFp32, 0, 0, false},
    {"fp8-delayed", &fmt::kE4M3, ScaleRule::kFp32, 0, 0, true},
    {"fp8-rowwise", &fmt::kE4M3, ScaleRule::kFp32, 1, 0, false},
    {"fp8-block1x128", &fmt::kE4M3, ScaleRule::kFp32, 1, 128, false},
    {"fp8-block128x128", &fmt::kE4M3, ScaleRule::kFp32, 128, 128, false},
    // Tenstorrent's BFP8_b, BFP4_b, BFP2_b: 16 values along a row share an exponent; sign-magnitude elements.
    {"bfp8_b", nullptr, ScaleRule::kBfp, 1, 16, false, false, "e1m6:special=finite:bias=1"},
    {"bfp4_b", nullptr, ScaleRule::kBfp, 1, 16, false, false, "e1m2:special=finite:bias=1"},
    {"bfp2_b", nullptr, ScaleRule::kBfp, 1, 16, false, false, "e1m0:special=finite:bias=1"},
};

struct Profile {
  const char* name;
  ScaleRule rule;
  NanPolicy nan;
  ElementScaling scaling;
  Rounding rounding;
};
const Profile kProfiles[] = {
    {"ocp", ScaleRule::kOcpFloor, NanPolicy::kBlockNan, ElementScaling::kExact, Rounding::kRne},
    {"microxcaling", ScaleRule::kOcpFloor, NanPolicy::kBlockNan, ElementScaling::kFp32, Rounding::kRna},
    {"torchao-floor", ScaleRule::kOcpFloor, NanPolicy::kScaleNan, ElementScaling::kFp32, Rounding::kRne},
    {"torchao-rceil", ScaleRule::kRoundUp, NanPolicy::kScaleNan, ElementScaling::kFp32, Rounding::kRne},
    {"transformer-engine", ScaleRule::kRoundUp, NanPolicy::kIgnoreNan, ElementScaling::kTeRcp, Rounding::kRne},
    {"cuda-host", ScaleRule::kRoundUp, NanPolicy::kTe, ElementScaling::kFp32, Rounding::kRne},
};

}  // namespace

std::string detail::JoinNames(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& n : v) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::vector<std::string> QuantSpecNames() {
  std::vector<std::string> v;
  for (const auto& r : kRecipes) v.push_back(r.name);
  return v;
}

QuantSpec QuantSpecByName(const std::string& name) {
  for (const auto& r : kRecipes) {
    if (name != r.name) continue;
    QuantSpec s;
    s.name = r.name;
    s.elem = r.elem != nullptr ? *r.elem : ParseFormat(r.elem_spec);
    s.rule = r.rule;
    s.block_rows = r.br;
    s.block_cols = r.bc;
    s.delayed = r.delayed;
    s.row_scaled = r.row_scaled;
    return s;
  }
  throw Error("unknown quantization spec '" + name + "' (" + detail::JoinNames(QuantSpecNames()) + ")");
}

std::vector<std::string> ProfileNames() {
  std::vector<std::string> v;
  for (const auto& p : kProfiles) v.push_back(p.name);
  return v;
}

void ApplyProfile(QuantSpec& spec, const std::string& profile) {
  for (const auto& p : kProfiles) {
    if (profile != p.name) continue;
    if (!IsPow2Rule(spec.rule)) {
      if (profile == "transformer-engine") {  // TE's NVFP4 and FP32 orders are the defaults of those rules
        spec.nan = NanPolicy::kIgnoreNan;
        spec.cast.rounding = Rounding::kRne;
        return;
      }
      throw Error("profile '" + profile + "' describes MX (UE8M0) block scaling; spec '" + spec.name + "' uses " +
                  ScaleFormatName(ScaleFormatOf(spec.rule)) + " scales");
    }
    spec.rule = p.rule;
    spec.nan = p.nan;
    spec.scaling = p.scaling;
    spec.cast.rounding = p.rounding;
    spec.cast.saturation = Saturation::kSatFinite;
    return;
  }
  throw Error("unknown profile '" + profile + "' (" + detail::JoinNames(ProfileNames()) + ")");
}

std::string DescribeBlock(const QuantSpec& spec) {
  if (spec.block_rows == 0 && spec.block_cols == 0) return "per-tensor";
  if (spec.block_rows == 1 && spec.block_cols == 0) return spec.axis == Axis::kRow ? "per-row" : "per-col";
  const auto d = [](int v) { return v == 0 ? std::string("all") : std::to_string(v); };
  return d(spec.block_rows) + "x" + d(spec.block_cols);
}

void SetBlockShape(QuantSpec& spec, const std::string& s) {
  const std::string form = "a block must look like 1x32, 16x16, 1xall, per-row or per-tensor, not '" + s + "'";
  if (s == "per-tensor") { spec.block_rows = spec.block_cols = 0; return; }
  if (s == "per-row") { spec.block_rows = 1; spec.block_cols = 0; return; }
  const size_t x = s.find('x');
  if (x == std::string::npos) throw Error(form);
  const auto num = [&](const std::string& t) {
    if (t == "all") return 0;
    if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos) throw Error(form);
    const int v = std::stoi(t);
    if (v == 0) throw Error(form + " (a block extent is 1 or more; 'all' spans the dimension)");
    return v;
  };
  spec.block_rows = num(s.substr(0, x));
  spec.block_cols = num(s.substr(x + 1));
}

namespace {

// The format a spec's scale_format names, or `fallback` where it is empty. The reference asks once per block:
// the last name's parse is kept (per thread).
Format ScaleFormatNamed(const QuantSpec& spec, const Format& fallback) {
  if (spec.scale_format.empty()) return fallback;
  thread_local std::string name;
  thread_local Format parsed = fmt::kE4M3;
  if (name != spec.scale_format) {
    parsed = ParseFormat(spec.scale_format);
    name = spec.scale_format;
  }
  return parsed;
}

}  // namespace

Format Nvfp4ScaleFormat(const QuantSpec& spec) { return ScaleFormatNamed(spec, fmt::kE4M3); }

Format MxScaleFormat(const QuantSpec& spec) { return ScaleFormatNamed(spec, fmt::kUE8M0); }

float Nvfp4ElemMax(const QuantSpec& spec) {  // (asked once a block or span: E2M1's without decoding)
  return spec.elem == fmt::kE2M1 ? 6.0f : DecodeToFloat(spec.elem, spec.elem.MaxFiniteCode());
}

bool Nvfp4OwnFormats(const QuantSpec& spec) { return E4m3BlockScales(spec) && Nvfp4ElemMax(spec) == 6.0f; }

float Nvfp4TensorScale(float tensor_amax, const QuantSpec& spec) {
  return Nvfp4TensorScale(tensor_amax, spec.rule, Nvfp4ScaleFormat(spec), Nvfp4ElemMax(spec));
}

float Nvfp4DecodeScale(uint8_t block_scale, float tensor_amax, const QuantSpec& spec, DequantOrder order) {
  return Nvfp4DecodeScale(block_scale, tensor_amax, spec.rule, order, Nvfp4ScaleFormat(spec), Nvfp4ElemMax(spec));
}

bool E4m3BlockScales(const QuantSpec& spec) {
  if (spec.scale_format.empty()) return true;
  const Format f = Nvfp4ScaleFormat(spec);
  return f == fmt::kE4M3 || f == ParseFormat("ue4m3");
}

std::string DescribeSpec(const QuantSpec& spec) {
  const std::string scales = spec.scale_format.empty() ? ScaleFormatName(ScaleFormatOf(spec.rule)) : spec.scale_format;
  std::string s = spec.name + ": " + spec.elem.name + ", " + DescribeBlock(spec) + " blocks, " + AxisName(spec.axis) +
                  "-wise, " + scales + " scales (" + ScaleRuleName(spec.rule) + (spec.delayed ? ", delayed" : "") +
                  "), " + RoundingName(spec.cast.rounding) + "/" + SaturationName(spec.cast.saturation) +
                  ", NaN policy " + NanPolicyName(spec.nan);
  if (IsPow2Rule(spec.rule)) s += std::string(", element scaling ") + ElementScalingName(spec.scaling);
  if (spec.margin != 0) s += ", margin " + std::to_string(spec.margin);
  if (spec.row_scaled) s += spec.axis == Axis::kCol ? ", row-scaled (a second-level scale per column)" : ", row-scaled (a second-level scale per row)";
  if (spec.error_order != ErrorOrder::kSeq) s += std::string(", error sums ") + ErrorOrderName(spec.error_order);
  if (spec.amax_order != AmaxOrder::kAny) s += std::string(", block amax ") + AmaxOrderName(spec.amax_order);
  return s;
}

void ValidateQuantSpec(const QuantSpec& spec) {
  if (!IsFastFormat(spec.elem) || spec.elem.encoding == Encoding::kExponentOnly)
    throw Error(std::string("'") + spec.elem.name + "' cannot be a quantized element format (it needs 8 bits or fewer and a zero)");
  if (spec.block_rows < 0 || spec.block_rows > 65536 || spec.block_cols < 0 || spec.block_cols > 65536)
    throw Error("block extents must be 0 (whole dimension) or 1..65536, not " + std::to_string(spec.block_rows) + "x" +
                std::to_string(spec.block_cols));
  const ScaleFormat sf = ScaleFormatOf(spec.rule);
  if (spec.rule == ScaleRule::kBfp) {
    const Format& e = spec.elem;
    if (e.exp_bits != 1 || e.bias != 1 || e.encoding != Encoding::kFinite || !e.is_signed || e.man_bits > 6)
      throw Error(std::string("the bfp rule (Tenstorrent's shared exponent) takes sign-magnitude elements of 1 to 7 magnitude ") +
                  "bits, e1mY:special=finite:bias=1 with Y <= 6 (bfp8_b e1m6, bfp4_b e1m2, bfp2_b e1m0), not " + e.name);
    if (spec.cast.rounding != Rounding::kRne && spec.cast.rounding != Rounding::kRz)
      throw Error(std::string("bfp elements round as tt-metal's packer does: rne (its default) or rz (truncate_bfp_mantissa), not ") +
                  RoundingName(spec.cast.rounding));
    if (spec.nan != NanPolicy::kBlockNan || spec.scaling != ElementScaling::kExact || spec.margin != 0 ||
        spec.row_scaled || spec.delayed || spec.cast.subnormals == Subnormals::kFlush ||
        spec.amax_order != AmaxOrder::kAny)
      throw Error(
          "bfp blocks follow tt-metal's packer alone (Inf and NaN give the shared exponent 255, subnormal inputs "
          "code 0): NaN policies, element scaling, margins, row scaling, delayed scaling, subnormal flushing and amax "
          "orders do not apply");
    ValidateCastOptions(spec.elem, spec.cast);
    if (!spec.scale_format.empty())
      throw Error(std::string("bfp blocks store tt-metal's shared exponent byte, not scales in '") + spec.scale_format +
                  "'");
    return;
  }
  if (!spec.scale_format.empty() && sf == ScaleFormat::kUe8m0) {
    // The MX rules' power-of-two scales in another format: MxSpec's checks (ValidateMxSpec).
    const MxSpec ms = detail::MxSpecOf(spec, 1);
    ValidateMxSpec(ms);
    MxScaleRangeOf(ms.scale_format);  // it holds a power of two
  } else if (!spec.scale_format.empty()) {
    if (sf != ScaleFormat::kE4m3 || IsNvfp4FourOverSix(spec.rule))
      throw Error(std::string("a block-scale format (") + spec.scale_format +
                  ") applies to the NVFP4 rules nvfp4, nvfp4-div, nvfp4-torchao and nvfp4-torchao-cuda and to the "
                  "UE8M0 (MX) rules; the " +
                  ScaleRuleName(spec.rule) + " rule fixes its own scales (" + ScaleFormatName(sf) + ")");
    const Format f = ParseFormat(spec.scale_format);
    if (!IsFastFormat(f) || f.IsInt() || f.encoding == Encoding::kExponentOnly)
      throw Error(std::string("'") + spec.scale_format +
                  "' cannot hold NVFP4's block scales: they need a float format of 8 bits or fewer with a mantissa "
                  "(not ue8m0 or an integer)");
    if (!f.HasNan() && spec.nan == NanPolicy::kBlockNan)
      throw Error(std::string("'") + spec.scale_format +
                  "' has no NaN code for a block holding a NaN or an Inf (NaN policy block-nan): take nan_policy "
                  "ignore-nan or ignore, or a scale format with a NaN");
  }
  if (sf == ScaleFormat::kE4m3) {
    // D = the elements' largest value x the scales': 2688 for NVFP4; it must be a finite FP32.
    const double d = Limits(spec.elem).max_finite * Limits(Nvfp4ScaleFormat(spec)).max_finite;
    if (spec.elem.IsInt() || !(d < 3.4028234663852886e38))
      throw Error(std::string("the ") + ScaleRuleName(spec.rule) +
                  " rule needs float elements whose largest value times the " + "block scales' is a finite FP32, not " +
                  spec.elem.name + " under " + Nvfp4ScaleFormat(spec).name + " scales");
    if (IsNvfp4FourOverSix(spec.rule) && !(spec.elem == fmt::kE2M1))
      throw Error(std::string("the ") + ScaleRuleName(spec.rule) +
                  " rule is TE's 4over6 on NVFP4's E2M1 elements, not " + spec.elem.name);
  }
  if (sf == ScaleFormat::kUe8m0) {
    if (spec.rule == ScaleRule::kMaxFinite && spec.nan != NanPolicy::kIgnore)
      throw Error("the max-finite rule ignores non-finite elements: it needs the NaN policy 'ignore', not '" +
                  std::string(NanPolicyName(spec.nan)) + "'");
    if (static_cast<size_t>(spec.block_rows == 0 ? 1 : spec.block_rows) * static_cast<size_t>(spec.block_cols == 0 ? 1 : spec.block_cols) > 0 &&
        spec.scaling != ElementScaling::kExact && spec.cast.subnormals == Subnormals::kFlush)
      throw Error("flushing subnormals needs exact element scaling");
  } else {
    if (spec.nan == NanPolicy::kScaleNan || spec.nan == NanPolicy::kTe)
      throw Error(std::string("NaN policy '") + NanPolicyName(spec.nan) + "' sets UE8M0 scale bytes; " + ScaleFormatName(sf) +
                  " scales take block-nan, ignore-nan or ignore");
    if (spec.cast.subnormals == Subnormals::kFlush)
      throw Error(std::string(ScaleFormatName(sf)) + " scales multiply in FP32 before rounding; subnormal flushing is only offered with UE8M0 scales");
    if (spec.scaling != ElementScaling::kExact)
      throw Error("element scaling modes apply to UE8M0 scales; FP32 and NVFP4 scales always multiply in FP32");
  }
  if (IsNvfp4FourOverSix(spec.rule) && (spec.block_rows != 1 || spec.block_cols != 16 || spec.cast.rounding != Rounding::kRne))
    throw Error(std::string("the ") + ScaleRuleName(spec.rule) + " rule is TE's 4over6 on 1x16 blocks with RNE elements, not " +
                std::to_string(spec.block_rows) + "x" + std::to_string(spec.block_cols) + " / " + RoundingName(spec.cast.rounding));
  if (spec.error_order != ErrorOrder::kSeq && !IsNvfp4FourOverSix(spec.rule))
    throw Error(std::string("an error order (") + ErrorOrderName(spec.error_order) +
                ") applies to the 4over6 rules' error sums (nvfp4-4over6, nvfp4-4over6-mse), not to " + ScaleRuleName(spec.rule));
  if (spec.amax_order != AmaxOrder::kAny) {
    detail::CheckAmaxOrder(spec.amax_order, spec.nan);
    if (IsNvfp4FourOverSix(spec.rule) || spec.delayed)
      throw Error(std::string("an amax order (") + AmaxOrderName(spec.amax_order) + ") sets a block's amax; " +
                  (spec.delayed ? "delayed scaling takes its scale from a history"
                                : "the 4over6 rules take finite blocks only"));
  }
  if (spec.row_scaled && (sf != ScaleFormat::kE4m3 || spec.block_rows != 1 || spec.block_cols < 1))
    throw Error("row-scaled NVFP4 takes an NVFP4 rule (E4M3 block scales) and 1xN blocks (TE: 1x16), not " +
                std::string(ScaleRuleName(spec.rule)) + " on " + DescribeBlock(spec) + " blocks");
  if (spec.delayed && (sf != ScaleFormat::kFp32 || spec.block_rows != 0 || spec.block_cols != 0))
    throw Error("delayed scaling is per-tensor with an FP32 scale rule");
  if (spec.margin < -64 || spec.margin > 64) throw Error("margin must be -64..64, not " + std::to_string(spec.margin));
  ValidateCastOptions(spec.elem, spec.cast);
}

BlockExtent ResolveBlock(const QuantSpec& spec, size_t rows, size_t cols) {
  size_t br = static_cast<size_t>(spec.block_rows), bc = static_cast<size_t>(spec.block_cols);
  if (spec.axis == Axis::kCol) std::swap(br, bc);
  if (br == 0) br = std::max<size_t>(rows, 1);
  if (bc == 0) bc = std::max<size_t>(cols, 1);
  return {br, bc};
}

float QuantizedTensor::ScaleAt(size_t sr, size_t sc) const {
  const size_t i = sr * scale_cols + sc;
  switch (ScaleFormatOf(spec.rule)) {
    case ScaleFormat::kUe8m0:  // or the spec's scale_format
      return static_cast<float>(MxScaleValue(MxScaleFormat(spec), scales[i]));
    case ScaleFormat::kE4m3:  // or the spec's scale_format
      return static_cast<float>(DecodeToDouble(Nvfp4ScaleFormat(spec), scales[i]));
    case ScaleFormat::kFp32: {
      float f;
      std::memcpy(&f, &scales[i * 4], 4);
      return f;
    }
    case ScaleFormat::kCode:  // GEMM operands' scales only: no rule stores it
      break;
  }
  return 0;
}

namespace detail {

void CheckAmaxOrder(AmaxOrder order, NanPolicy nan) {
  if (order != AmaxOrder::kAny && (nan == NanPolicy::kIgnoreNan || nan == NanPolicy::kIgnore))
    throw Error(std::string("the amax order '") + AmaxOrderName(order) +
                "' decides whether a NaN reaches the block amax; " + "the NaN policy '" + NanPolicyName(nan) +
                "' drops NaN elements first (take block-nan, scale-nan or te)");
}

}  // namespace detail

}  // namespace qmx
