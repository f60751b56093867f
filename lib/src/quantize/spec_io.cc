// spec_io.cc: a QuantSpec from a recipe name and option overrides, its JSON form (the `qmx.spec` metadata
// of quantized files), stored codes and scales reassembled into a QuantizedTensor, and the dequantization
// error the `quantize` summary reports. Shared by the CLI and the Python package.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "json_int.h"
#include "qmx/error.h"
#include "qmx/quantize.h"
#include "quantize/quantize_internal.h"

namespace qmx {

using detail::JoinNames;

const std::vector<SpecOverrideField>& SpecOverrideFields() {
  static const std::vector<SpecOverrideField> fields = {
      {"profile", "--profile", "Library behaviour: " + JoinNames(ProfileNames()), &SpecOverrides::profile},
      {"elem", "--elem", "Override the element format (e4m3, e5m2, e3m2, e2m3, e2m1, int8, ...)", &SpecOverrides::elem},
      {"rule", "--rule,--scale-rule",
       "Override the scale rule (--scale-rule: the older spelling): ocp-floor, round-up, ceil, even, max-finite, "
       "fp32, fp32-pow2, nvfp4, nvfp4-div, nvfp4-torchao, nvfp4-torchao-cuda, nvfp4-4over6, nvfp4-4over6-mse",
       &SpecOverrides::rule},
      {"block", "--block", "Override the block: 1x32, 1x16, 1x128, 16x16, 32x32, 128x128, per-row, per-tensor",
       &SpecOverrides::block},
      {"axis", "--axis", "row (blocks along the last dimension) or col (down the columns)", &SpecOverrides::axis},
      {"rounding", "--round", "Element rounding: rne, rna, rz, ru, rd, ro, sr (= sr-a), sr-b, sr-c",
       &SpecOverrides::round},
      {"saturation", "--sat", "satfinite, nosat, satpropagate", &SpecOverrides::sat},
      {"nan_policy", "--nan-policy", "block-nan, scale-nan, te, ignore-nan, ignore", &SpecOverrides::nan_policy},
      {"element_scaling", "--element-scaling", "UE8M0 scales: exact, fp32, te-rcp", &SpecOverrides::scaling},
      {"subnormals", "--subnormals", "keep or flush", &SpecOverrides::subnormals},
      {"nan_fallback", "--nan-fallback", "NaN into FP6/FP4/INT8: max or zero", &SpecOverrides::nan_fallback},
      {"error_order", "--error-order", "4over6 rules: the order of the error sums: seq, seq-fma, xor16, pairs16",
       &SpecOverrides::error_order},
      {"amax_order", "--amax-order",
       "A block amax reduced by comparisons, which keep or drop a NaN by its position: any (the NaN policy's own), "
       "fold-last, fold-first, tree-gt, tree-lt",
       &SpecOverrides::amax_order},
      {"scale_format", "--scale-format",
       "NVFP4 rules: the block scales' format (e4m3, NVFP4's own; ue4m3; ue5m3, AMD gfx1250's E5M3; any float format "
       "of 8 bits or fewer); with --elem, FP8 or FP6 elements under two-level scales. UE8M0 (MX) rules: the format "
       "their powers of two are stored in (ue8m0, the default; e4m3, ue5m3, ...), clamped to its powers of two",
       &SpecOverrides::scale_format},
  };
  return fields;
}

void SetSpecOverride(SpecOverrides& o, const std::string& name, const std::string& value) {
  std::vector<std::string> known;
  for (const auto& f : SpecOverrideFields()) {
    if (f.name == name) {
      o.*f.field = value;
      return;
    }
    known.push_back(f.name);
  }
  throw Error("unknown spec option '" + name + "' (known: " + JoinNames(known) + ")");
}

QuantSpec BuildQuantSpec(const std::string& name, const SpecOverrides& o) {
  QuantSpec spec = QuantSpecByName(name);
  if (!o.profile.empty()) ApplyProfile(spec, o.profile);
  if (!o.elem.empty()) spec.elem = GetFormat(o.elem);
  if (!o.rule.empty()) {
    spec.rule = ParseScaleRule(o.rule);
    if (spec.rule == ScaleRule::kMaxFinite && o.nan_policy.empty()) spec.nan = NanPolicy::kIgnore;
  }
  if (!o.block.empty()) SetBlockShape(spec, o.block);
  if (!o.axis.empty()) spec.axis = ParseAxis(o.axis);
  if (!o.round.empty()) spec.cast.rounding = ParseRounding(o.round);
  if (!o.sat.empty()) spec.cast.saturation = ParseSaturation(o.sat);
  if (!o.nan_policy.empty()) spec.nan = ParseNanPolicy(o.nan_policy);
  if (!o.scaling.empty()) spec.scaling = ParseElementScaling(o.scaling);
  if (!o.subnormals.empty()) spec.cast.subnormals = ParseSubnormals(o.subnormals);
  if (!o.nan_fallback.empty()) spec.cast.nan_fallback = ParseNanFallback(o.nan_fallback);
  if (!o.error_order.empty()) spec.error_order = ParseErrorOrder(o.error_order);
  if (!o.amax_order.empty()) spec.amax_order = ParseAmaxOrder(o.amax_order);
  if (!o.scale_format.empty()) spec.scale_format = ParseFormat(o.scale_format).name;
  spec.cast.sr_bits = o.sr_bits;
  spec.seed = o.seed;
  spec.margin = o.margin;
  if (o.row_scaled) spec.row_scaled = true;
  if (spec.name != "custom" && (!o.elem.empty() || !o.rule.empty() || !o.block.empty() || o.row_scaled)) spec.name += "+";
  ValidateQuantSpec(spec);
  return spec;
}

std::string QuantSpecToJson(const QuantSpec& s, int indent) {
  nlohmann::ordered_json j = {
      {"name", s.name},
      {"elem", s.elem.name},
      {"rule", ScaleRuleName(s.rule)},
      {"scale_format", s.scale_format.empty() ? ScaleFormatName(ScaleFormatOf(s.rule)) : s.scale_format.c_str()},
      {"block", {s.block_rows, s.block_cols}},
      {"axis", AxisName(s.axis)},
      {"round", RoundingName(s.cast.rounding)},
      {"sat", SaturationName(s.cast.saturation)},
      {"subnormals", SubnormalsName(s.cast.subnormals)},
      {"nan_fallback", NanFallbackName(s.cast.nan_fallback)},
      {"nan_sign", NanSignName(s.cast.nan_sign)},
      {"sr_bits", s.cast.sr_bits},
      {"nan_policy", NanPolicyName(s.nan)},
      {"element_scaling", ElementScalingName(s.scaling)},
      {"seed", s.seed},
      {"margin", s.margin},
      {"delayed", s.delayed}};
  if (s.row_scaled) j["row_scaled"] = true;  // only when set: earlier files stay byte-identical
  if (s.error_order != ErrorOrder::kSeq) j["error_order"] = ErrorOrderName(s.error_order);  // likewise
  if (s.amax_order != AmaxOrder::kAny) j["amax_order"] = AmaxOrderName(s.amax_order);       // likewise
  return j.dump(indent);
}

QuantSpec QuantSpecFromJson(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) throw Error("qmx.spec metadata is not valid JSON");
  QuantSpec s;
  try {
    s.name = j.at("name").get<std::string>();
    s.rule = ParseScaleRule(j.at("rule").get<std::string>());
    // The registry's formats; bfp's sign-magnitude elements are user formats (e1m6:special=finite:bias=1).
    const std::string elem = j.at("elem").get<std::string>();
    s.elem = s.rule == ScaleRule::kBfp ? ParseFormat(elem) : GetFormat(elem);
    s.block_rows = detail::JsonInteger<int>(j.at("block").at(0), "qmx.spec block[0]");
    s.block_cols = detail::JsonInteger<int>(j.at("block").at(1), "qmx.spec block[1]");
    s.axis = ParseAxis(j.at("axis").get<std::string>());
    s.cast.rounding = ParseRounding(j.at("round").get<std::string>());
    s.cast.saturation = ParseSaturation(j.at("sat").get<std::string>());
    s.cast.subnormals = ParseSubnormals(j.at("subnormals").get<std::string>(), "qmx.spec subnormals");
    s.cast.nan_fallback = ParseNanFallback(j.at("nan_fallback").get<std::string>(), "qmx.spec nan_fallback");
    s.cast.nan_sign = ParseNanSign(j.at("nan_sign").get<std::string>(), "qmx.spec nan_sign");
    s.cast.sr_bits = detail::JsonInteger<int>(j.at("sr_bits"), "qmx.spec sr_bits");
    s.nan = ParseNanPolicy(j.at("nan_policy").get<std::string>());
    s.scaling = ParseElementScaling(j.at("element_scaling").get<std::string>());
    s.seed = detail::JsonInteger<uint64_t>(j.at("seed"), "qmx.spec seed");
    s.margin = detail::JsonInteger<int>(j.at("margin"), "qmx.spec margin");
    s.delayed = j.at("delayed").get<bool>();
    if (j.contains("row_scaled")) s.row_scaled = j.at("row_scaled").get<bool>();
    if (j.contains("error_order")) s.error_order = ParseErrorOrder(j.at("error_order").get<std::string>());
    if (j.contains("amax_order")) s.amax_order = ParseAmaxOrder(j.at("amax_order").get<std::string>());
    // The block scales' format: the rule's own name (ue8m0, e4m3, fp32), or a code format an NVFP4 rule was
    // given (QuantSpec::scale_format).
    if (j.contains("scale_format")) {
      const std::string sf = j.at("scale_format").get<std::string>();
      if (sf != ScaleFormatName(ScaleFormatOf(s.rule))) s.scale_format = ParseFormat(sf).name;
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("qmx.spec metadata is incomplete (") + e.what() + ")");
  }
  ValidateQuantSpec(s);
  return s;
}

QuantizedTensor AssembleQuantized(const QuantSpec& spec, std::vector<size_t> shape, std::vector<uint8_t> codes,
                                  std::vector<uint8_t> scales, float tensor_amax, std::vector<float> line_amax) {
  size_t count = 1;
  for (size_t d : shape) count *= d;
  if (codes.size() != count)
    throw Error(std::to_string(codes.size()) + " codes for a tensor of " + std::to_string(count) + " elements");
  QuantizedTensor q;
  q.spec = spec;
  q.cols = shape.empty() ? 1 : shape.back();
  q.rows = q.cols == 0 ? 0 : count / q.cols;
  q.shape = std::move(shape);
  const BlockExtent be = ResolveBlock(spec, q.rows, q.cols);
  q.scale_rows = q.rows == 0 ? 0 : (q.rows + be.rows - 1) / be.rows;
  q.scale_cols = q.cols == 0 ? 0 : (q.cols + be.cols - 1) / be.cols;
  q.codes.assign(codes.begin(), codes.end());
  q.scales = std::move(scales);
  const size_t want = q.scale_rows * q.scale_cols * ScaleBytes(ScaleFormatOf(spec.rule));
  if (q.scales.size() != want)
    throw Error(std::to_string(q.scales.size()) + " scale bytes, the spec needs " + std::to_string(want));
  q.tensor_amax = tensor_amax;
  if (ScaleFormatOf(spec.rule) == ScaleFormat::kE4m3 && !spec.row_scaled)
    q.tensor_decode = Nvfp4TensorDecode(Nvfp4TensorScale(tensor_amax, spec), spec.rule);
  q.line_amax = std::move(line_amax);
  detail::CheckLineAmax(q);
  return q;
}

DequantError ComputeDequantError(const TensorView& x, const float* dq) {
  double se = 0, ss = 0, max_abs = 0;
  uint64_t n = 0;
  const size_t count = x.rows * x.cols;
  for (size_t i = 0; i < count; ++i) {
    const float v = SourceValueF32(x.dtype, x.data, i);
    if (!std::isfinite(v) || !std::isfinite(dq[i])) continue;
    const double e = static_cast<double>(dq[i]) - v;
    se += e * e;
    ss += static_cast<double>(v) * v;
    max_abs = std::max(max_abs, std::fabs(e));
    ++n;
  }
  DequantError r;
  r.finite_elements = n;
  r.mse = n ? se / static_cast<double>(n) : 0.0;
  r.max_abs_error = max_abs;
  r.has_sqnr = se > 0 && ss > 0;
  if (r.has_sqnr) r.sqnr_db = 10.0 * std::log10(ss / se);
  return r;
}

}  // namespace qmx
