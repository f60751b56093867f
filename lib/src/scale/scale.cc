// scale.cc: the scale layer (qmx/scale.h): rule and policy names, the fast UE8M0 rules (shared with the
// SIMD kernels through round/convert_params.h), FP32 per-tensor/blockwise scales after Transformer
// Engine's compute_scale_from_amax, NVFP4's two-level scales and delayed scaling.
#include "qmx/scale.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "float_bits.h"
#include "qmx/error.h"
#include "qmx/round.h"
#include "round/convert_params.h"
#include "scale/scale_core.h"

namespace qmx {
namespace {

using detail::CapFltMaxCore;

// The value of every E4M3 byte, decoded once: the NVFP4 scale functions run per block (and per row of a
// row-scaled tensor, 128 times), where DecodeToDouble's general decoding would dominate.
const float* E4m3Values() {
  static const std::vector<float> table = DecodeTableF32(fmt::kE4M3);
  return table.data();
}
float E4m3Value(uint8_t byte) { return E4m3Values()[byte]; }
float E2m1Value(uint8_t code) {
  static const std::vector<float> table = DecodeTableF32(fmt::kE2M1);
  return table[code & 0xF];
}

struct RuleName {
  ScaleRule rule;
  const char* name;
};
constexpr RuleName kRuleNames[] = {
    {ScaleRule::kOcpFloor, "ocp-floor"}, {ScaleRule::kRoundUp, "round-up"}, {ScaleRule::kCeil, "ceil"},
    {ScaleRule::kEven, "even"},          {ScaleRule::kMaxFinite, "max-finite"}, {ScaleRule::kFp32, "fp32"},
    {ScaleRule::kFp32Pow2, "fp32-pow2"}, {ScaleRule::kNvfp4, "nvfp4"},         {ScaleRule::kNvfp4Div, "nvfp4-div"},
    {ScaleRule::kNvfp4Torchao, "nvfp4-torchao"}, {ScaleRule::kNvfp4TorchaoCuda, "nvfp4-torchao-cuda"},
    {ScaleRule::kNvfp4FourOverSix, "nvfp4-4over6"},
    {ScaleRule::kNvfp4FourOverSixMse, "nvfp4-4over6-mse"},
    {ScaleRule::kBfp, "bfp"},
};

}  // namespace

const char* ScaleRuleName(ScaleRule r) {
  for (const auto& n : kRuleNames)
    if (n.rule == r) return n.name;
  return "?";
}

ScaleRule ParseScaleRule(const std::string& s) {
  for (const auto& n : kRuleNames)
    if (s == n.name) return n.rule;
  if (s == "floor" || s == "round-down") return ScaleRule::kOcpFloor;
  if (s == "rceil") return ScaleRule::kRoundUp;
  std::string all;
  for (const auto& n : kRuleNames) all += std::string(all.empty() ? "" : ", ") + n.name;
  throw Error("unknown scale rule '" + s + "' (" + all + ")");
}

std::vector<ScaleRule> AllScaleRules() {
  std::vector<ScaleRule> v;
  for (const auto& n : kRuleNames) v.push_back(n.rule);
  return v;
}

bool IsPow2Rule(ScaleRule r) { return detail::ScaleFormatOfCore(r) == ScaleFormat::kUe8m0 && r != ScaleRule::kBfp; }

ScaleFormat ScaleFormatOf(ScaleRule r) { return detail::ScaleFormatOfCore(r); }

const char* ScaleFormatName(ScaleFormat f) {
  switch (f) {
    case ScaleFormat::kUe8m0: return "ue8m0";
    case ScaleFormat::kE4m3: return "e4m3";
    case ScaleFormat::kFp32: return "fp32";
    case ScaleFormat::kCode: return "code";
  }
  return "?";
}

ScaleFormat ParseScaleFormat(const std::string& s) {
  for (ScaleFormat f : {ScaleFormat::kUe8m0, ScaleFormat::kE4m3, ScaleFormat::kFp32})
    if (s == ScaleFormatName(f)) return f;
  throw Error("unknown scale format '" + s + "' (ue8m0, e4m3, fp32)");
}

size_t ScaleBytes(ScaleFormat f) { return f == ScaleFormat::kFp32 ? 4 : 1; }

const char* NanPolicyName(NanPolicy p) {
  switch (p) {
    case NanPolicy::kBlockNan: return "block-nan";
    case NanPolicy::kScaleNan: return "scale-nan";
    case NanPolicy::kTe: return "te";
    case NanPolicy::kIgnoreNan: return "ignore-nan";
    case NanPolicy::kIgnore: return "ignore";
  }
  return "?";
}

NanPolicy ParseNanPolicy(const std::string& s) {
  for (NanPolicy p : {NanPolicy::kBlockNan, NanPolicy::kScaleNan, NanPolicy::kTe, NanPolicy::kIgnoreNan, NanPolicy::kIgnore})
    if (s == NanPolicyName(p)) return p;
  throw Error("unknown NaN policy '" + s + "' (block-nan, scale-nan, te, ignore-nan, ignore)");
}

const char* ElementScalingName(ElementScaling e) {
  switch (e) {
    case ElementScaling::kExact: return "exact";
    case ElementScaling::kFp32: return "fp32";
    case ElementScaling::kTeRcp: return "te-rcp";
  }
  return "?";
}

ElementScaling ParseElementScaling(const std::string& s) {
  for (ElementScaling e : {ElementScaling::kExact, ElementScaling::kFp32, ElementScaling::kTeRcp})
    if (s == ElementScalingName(e)) return e;
  throw Error("unknown element scaling '" + s + "' (exact, fp32, te-rcp)");
}

uint8_t Ue8m0ScaleFromAmax(float amax, const Format& elem, ScaleRule rule) {
  if (!IsPow2Rule(rule)) throw Error(std::string("'") + ScaleRuleName(rule) + "' is not a UE8M0 scale rule");
  if (!(amax >= 0.0f) || std::isinf(amax)) throw Error("block amax must be finite and >= 0");
  const FormatLimits lim = Limits(elem);
  return simd::ScaleByteFromAmaxBits(detail::F32Bits(amax), static_cast<int>(rule), static_cast<float>(lim.max_finite), lim.emax,
                                     elem.man_bits);
}

namespace {
// Fp32ScaleFromAmax's operations (scale_core.h, which the GPU engine runs too), inlined into its batch form.
inline Fp32Scale Fp32ScaleOf(float amax, float destmax, bool pow2, int margin, float fallback) {
  return detail::Fp32ScaleCore(amax, destmax, pow2, margin, fallback);
}
}  // namespace

Fp32Scale Fp32ScaleFromAmax(float amax, float destmax, bool pow2, int margin, float fallback) {
  return Fp32ScaleOf(amax, destmax, pow2, margin, fallback);
}

void Fp32ScalesFromAmaxes(const float* amax, size_t n, float destmax, bool pow2, int margin, Fp32Scale* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp32ScaleOf(amax[i], destmax, pow2, margin, 1.0f);
}

namespace {
// TE's S_enc = min(fl32(6 * e4m3_bound / tensor_amax), FLT_MAX), 1 for amax 0 or an S_enc of 0: the bound
// is 448 (2688 = 6 * 448), or 256 under 4over6 (1536).
float TeEncodeScale(float tensor_amax, float six_times_bound) {
  float s = CapFltMaxCore(six_times_bound / tensor_amax);
  if (tensor_amax == 0.0f || s == 0.0f) s = 1.0f;
  return s;
}
}  // namespace

float Nvfp4TensorEncodeScale(float tensor_amax) { return TeEncodeScale(tensor_amax, 2688.0f); }

bool IsNvfp4Torchao(ScaleRule rule) { return rule == ScaleRule::kNvfp4Torchao || rule == ScaleRule::kNvfp4TorchaoCuda; }

bool IsNvfp4FourOverSix(ScaleRule rule) {
  return rule == ScaleRule::kNvfp4FourOverSix || rule == ScaleRule::kNvfp4FourOverSixMse;
}

const char* ErrorOrderName(ErrorOrder o) {
  switch (o) {
    case ErrorOrder::kSeq: return "seq";
    case ErrorOrder::kSeqFma: return "seq-fma";
    case ErrorOrder::kXor16: return "xor16";
    case ErrorOrder::kPairs16: return "pairs16";
  }
  return "?";
}

std::vector<ErrorOrder> AllErrorOrders() {
  return {ErrorOrder::kSeq, ErrorOrder::kSeqFma, ErrorOrder::kXor16, ErrorOrder::kPairs16};
}

ErrorOrder ParseErrorOrder(const std::string& s) {
  for (ErrorOrder o : AllErrorOrders())
    if (s == ErrorOrderName(o)) return o;
  throw Error("unknown 4over6 error order '" + s + "' (seq, seq-fma, xor16, pairs16)");
}

const char* AmaxOrderName(AmaxOrder o) {
  switch (o) {
    case AmaxOrder::kAny: return "any";
    case AmaxOrder::kFoldLast: return "fold-last";
    case AmaxOrder::kFoldFirst: return "fold-first";
    case AmaxOrder::kTreeGt: return "tree-gt";
    case AmaxOrder::kTreeLt: return "tree-lt";
  }
  return "?";
}

std::vector<AmaxOrder> AllAmaxOrders() {
  return {AmaxOrder::kAny, AmaxOrder::kFoldLast, AmaxOrder::kFoldFirst, AmaxOrder::kTreeGt, AmaxOrder::kTreeLt};
}

AmaxOrder ParseAmaxOrder(const std::string& s) {
  for (AmaxOrder o : AllAmaxOrders())
    if (s == AmaxOrderName(o)) return o;
  throw Error("unknown amax order '" + s + "' (any, fold-last, fold-first, tree-gt, tree-lt)");
}

double OrderedAmax(const double* m, size_t n, size_t width, AmaxOrder order) {
  switch (order) {
    case AmaxOrder::kAny: break;
    case AmaxOrder::kFoldLast: {
      double r = 0;
      for (size_t i = 0; i < n; ++i) r = r > m[i] ? r : m[i];
      return r;
    }
    case AmaxOrder::kFoldFirst: {
      double r = n ? m[0] : 0;
      for (size_t i = 1; i < n; ++i) r = r < m[i] ? m[i] : r;
      return r;
    }
    case AmaxOrder::kTreeGt:
    case AmaxOrder::kTreeLt: {
      size_t w = 1;
      while (w < std::max(width, n)) w *= 2;
      std::vector<double> v(w, 0.0);
      std::copy(m, m + n, v.begin());
      for (size_t h = w / 2; h >= 1; h /= 2)
        for (size_t i = 0; i < h; ++i)
          v[i] =
              order == AmaxOrder::kTreeGt ? (v[i] > v[i + h] ? v[i] : v[i + h]) : (v[i] < v[i + h] ? v[i + h] : v[i]);
      return v[0];
    }
  }
  throw Error("OrderedAmax: the order 'any' is the NaN policy's own amax, not a comparison order");
}

namespace {
// The FP32 sum of 16 lanes' terms t (missing lanes +0) in a cross-lane order: lane i adds lane i + o's
// partial (xor16: i xor o) for o = 8, 4, 2, 1 (xor16) or 1, 2, 4, 8 (pairs16); lane 0's result.
float LaneSum(const float (&t)[16], ErrorOrder order) {
  float v[16];
  std::copy(t, t + 16, v);
  if (order == ErrorOrder::kXor16) {
    for (int o = 8; o >= 1; o /= 2) {
      float next[16];
      for (int i = 0; i < 16; ++i) next[i] = v[i] + v[i ^ o];
      std::copy(next, next + 16, v);
    }
  } else {
    for (int o = 1; o < 16; o *= 2)
      for (int i = 0; i < 16; i += 2 * o) v[i] = v[i] + v[i + o];
  }
  return v[0];
}
}  // namespace

uint8_t Nvfp4FourOverSixBlock(const float* x, size_t n, float block_amax, float s_enc, float tensor_amax, ScaleRule rule,
                              const CastOptions& cast, uint8_t* codes, ErrorOrder order) {
  if (n > 16) throw Error("4over6: a block of " + std::to_string(n) + " elements (1x16 blocks only)");
  const CastOptions rne{};
  const bool mse = rule == ScaleRule::kNvfp4FourOverSixMse;
  const float base = (block_amax / 6.0f) * s_enc;
  // Map-to-4 and map-to-6, each quantized as the nvfp4 rule quantizes a block under its scale byte.
  const uint8_t scale[2] = {static_cast<uint8_t>(ConvertF32(base * 1.5f, fmt::kE4M3, rne)),
                            static_cast<uint8_t>(ConvertF32(base, fmt::kE4M3, rne))};
  uint8_t cand[2][16];
  float err[2] = {0.0f, 0.0f};
  for (int k = 0; k < 2; ++k) {
    const float s = E4m3Value(scale[k]);
    const float mult = Nvfp4EncodeFactor(scale[k], s_enc, ScaleRule::kNvfp4);
    float t[16] = {};
    for (size_t i = 0; i < n; ++i) {
      cand[k][i] = static_cast<uint8_t>(ConvertF32(x[i] * mult, fmt::kE2M1, cast));
      const float q = E2m1Value(cand[k][i]);
      const float d = (((q * s) * tensor_amax) / 1536.0f) - x[i];
      t[i] = mse ? d * d : std::fabs(d);
      if (order == ErrorOrder::kSeqFma && mse) err[k] = std::fmaf(d, d, err[k]);
      else if (order == ErrorOrder::kSeq || order == ErrorOrder::kSeqFma) err[k] = err[k] + t[i];
    }
    if (order == ErrorOrder::kXor16 || order == ErrorOrder::kPairs16) err[k] = LaneSum(t, order);
  }
  const int pick = err[0] < err[1] ? 0 : 1;  // a tie keeps map-to-6
  std::copy(cand[pick], cand[pick] + n, codes);
  return scale[pick];
}

namespace {
// The elements' largest value times the block scales' largest value: 2688 = 6 x 448 for NVFP4 (validated finite
// for the others; exact: two values of at most 9 significant bits).
float SixTimesBound(const Format& scale_format, float elem_max) {
  return scale_format == fmt::kE4M3 && elem_max == 6.0f
             ? 2688.0f
             : static_cast<float>(static_cast<double>(elem_max) * Limits(scale_format).max_finite);
}
}  // namespace

float Nvfp4TensorScale(float tensor_amax, ScaleRule rule) { return Nvfp4TensorScale(tensor_amax, rule, fmt::kE4M3); }

float Nvfp4TensorScale(float tensor_amax, ScaleRule rule, const Format& scale_format, float elem_max) {
  if (IsNvfp4FourOverSix(rule)) return TeEncodeScale(tensor_amax, 1536.0f);
  const float d = SixTimesBound(scale_format, elem_max);
  if (!IsNvfp4Torchao(rule)) return TeEncodeScale(tensor_amax, d);
  const float s = rule == ScaleRule::kNvfp4Torchao ? tensor_amax / d : tensor_amax * (1.0f / d);
  return std::isfinite(s) && s > 0.0f ? s : 1.0f;
}

float Nvfp4TensorDecode(float tensor_scale, ScaleRule rule) {
  return IsNvfp4Torchao(rule) ? tensor_scale : 1.0f / tensor_scale;
}

uint8_t Nvfp4BlockScale(float block_amax, float s_enc, ScaleRule rule) {
  return detail::Nvfp4BlockScaleCore(block_amax, s_enc, rule, fmt::kFP32, fmt::kE4M3);
}

namespace {
// Nvfp4EncodeFactor of the block scale's value sd (scale_core.h).
inline float Nvfp4EncodeFactorOf(float sd, float s_enc, ScaleRule rule) {
  return detail::Nvfp4EncodeFactorCore(sd, s_enc, rule);
}
}  // namespace

float Nvfp4EncodeFactor(uint8_t block_scale, float s_enc, ScaleRule rule) {
  return Nvfp4EncodeFactorOf(E4m3Value(block_scale), s_enc, rule);
}

void Nvfp4EncodeFactors(float s_enc, ScaleRule rule, float* out) {
  // The same function over the E4M3 values read once, one loop per rule (the rule a constant in each, so
  // that 1 / s_enc is formed once and the loop vectorizes).
  const float* sd = E4m3Values();
  const auto fill = [&](auto r) {
    for (int b = 0; b < 128; ++b) out[b] = Nvfp4EncodeFactorOf(sd[b], s_enc, decltype(r)::value);
  };
  if (IsNvfp4Torchao(rule)) fill(std::integral_constant<ScaleRule, ScaleRule::kNvfp4Torchao>{});  // one factor for both
  else if (rule == ScaleRule::kNvfp4Div) fill(std::integral_constant<ScaleRule, ScaleRule::kNvfp4Div>{});
  else fill(std::integral_constant<ScaleRule, ScaleRule::kNvfp4>{});
}

float Nvfp4DecodeScale(uint8_t block_scale, float tensor_amax, ScaleRule rule) {
  return Nvfp4DecodeScale(block_scale, tensor_amax, rule, DequantOrder::kByRule, fmt::kE4M3);
}

const char* DequantOrderName(DequantOrder o) {
  switch (o) {
    case DequantOrder::kByRule: return "rule";
    case DequantOrder::kTe: return "te";
    case DequantOrder::kGlobalDiv: return "global-div";
    case DequantOrder::kGlobalRecip: return "global-recip";
  }
  return "?";
}

std::vector<std::string> DequantOrderNames() { return {"rule", "te", "global-div", "global-recip"}; }

DequantOrder ParseDequantOrder(const std::string& s) {
  for (DequantOrder o : {DequantOrder::kByRule, DequantOrder::kTe, DequantOrder::kGlobalDiv, DequantOrder::kGlobalRecip})
    if (s == DequantOrderName(o)) return o;
  throw Error("dequantization order must be rule, te, global-div or global-recip, not '" + s + "'");
}

float Nvfp4DecodeScale(uint8_t block_scale, float tensor_amax, ScaleRule rule, DequantOrder order) {
  return Nvfp4DecodeScale(block_scale, tensor_amax, rule, order, fmt::kE4M3);
}

float Nvfp4DecodeScale(uint8_t block_scale, float tensor_amax, ScaleRule rule, DequantOrder order,
                       const Format& scale_format, float elem_max) {
  const bool e4m3 = scale_format == fmt::kE4M3;
  const float sd = e4m3 ? E4m3Value(block_scale) : DecodeToFloat(scale_format, block_scale);
  const float d = IsNvfp4FourOverSix(rule) ? 1536.0f : SixTimesBound(scale_format, elem_max);
  switch (order) {
    case DequantOrder::kByRule:
      if (IsNvfp4Torchao(rule)) return Nvfp4TensorScale(tensor_amax, rule, scale_format, elem_max) * sd;
      return Nvfp4DecodeScale(block_scale, tensor_amax, rule, DequantOrder::kTe, scale_format, elem_max);
    case DequantOrder::kTe: return (sd * tensor_amax) * (1.0f / d);
    case DequantOrder::kGlobalDiv: return sd * (tensor_amax / d);
    case DequantOrder::kGlobalRecip: return sd * (tensor_amax * (1.0f / d));
  }
  return 0.0f;
}

AmaxAlgo ParseAmaxAlgo(const std::string& s) {
  if (s == "max") return AmaxAlgo::kMax;
  if (s == "most-recent") return AmaxAlgo::kMostRecent;
  throw Error("--amax-algo is max or most-recent, not '" + s + "'");
}

DelayedScaling::DelayedScaling(const Format& elem, int history_len, int margin, AmaxAlgo algo, bool pow2)
    : elem_(elem), margin_(margin), algo_(algo), pow2_(pow2) {
  if (history_len < 1 || history_len > (1 << 20))
    throw Error("amax history length must be 1..1048576, not " + std::to_string(history_len));
  if (margin < -64 || margin > 64) throw Error("scaling margin must be -64..64, not " + std::to_string(margin));
  history_.reserve(static_cast<size_t>(history_len));
  history_.assign(static_cast<size_t>(history_len), 0.0f);
}

void DelayedScaling::Push(float amax) {
  // Newest first: the oldest entry drops off the end (TE rolls its history the same way).
  history_.insert(history_.begin(), amax);
  history_.pop_back();
  float a = history_.front();
  if (algo_ == AmaxAlgo::kMax)
    for (float h : history_) a = std::fmax(a, h);
  scale_ = Fp32ScaleFromAmax(a, static_cast<float>(Limits(elem_).max_finite), pow2_, margin_, scale_.encode);
}

}  // namespace qmx
