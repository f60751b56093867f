// audit.cc: which scale rule or library profile reproduces a checkpoint's stored codes and scales bit for
// bit (qmx/checkpoint.h AuditCheckpointTensor), plus its range, saturation and flush counts.
#include <cmath>
#include <cstring>

#include "qmx/checkpoint.h"
#include "qmx/convert.h"
#include "qmx/error.h"

namespace qmx {
namespace {

struct Candidate {
  std::string name;
  QuantSpec spec;
};

// Every rule and profile that applies to the stored tensor's scheme, on its element format and block.
std::vector<Candidate> CandidatesFor(const QuantSpec& stored) {
  std::vector<Candidate> out;
  auto with_rule = [&](ScaleRule rule) {
    QuantSpec s = stored;
    s.rule = rule;
    s.nan = rule == ScaleRule::kMaxFinite ? NanPolicy::kIgnore : NanPolicy::kBlockNan;
    out.push_back({std::string("rule=") + ScaleRuleName(rule), s});
  };
  switch (ScaleFormatOf(stored.rule)) {
    case ScaleFormat::kUe8m0:
      for (ScaleRule r : {ScaleRule::kOcpFloor, ScaleRule::kRoundUp, ScaleRule::kCeil, ScaleRule::kEven}) with_rule(r);
      for (const std::string& p : ProfileNames()) {
        QuantSpec s = stored;
        ApplyProfile(s, p);
        out.push_back({"profile=" + p, s});
      }
      break;
    case ScaleFormat::kE4m3:
      for (ScaleRule r : {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div, ScaleRule::kNvfp4Torchao, ScaleRule::kNvfp4TorchaoCuda})
        with_rule(r);
      if (stored.block_rows == 1 && stored.block_cols == 16 && stored.cast.rounding == Rounding::kRne)
        for (ScaleRule r : {ScaleRule::kNvfp4FourOverSix, ScaleRule::kNvfp4FourOverSixMse}) with_rule(r);
      break;
    case ScaleFormat::kFp32:
      for (ScaleRule r : {ScaleRule::kFp32, ScaleRule::kFp32Pow2}) with_rule(r);
      break;
    case ScaleFormat::kCode:  // GEMM operands' scales only: no rule stores it
      break;
  }
  return out;
}

}  // namespace

std::string CheckpointScheme(const QuantizedTensor& q) {
  switch (ScaleFormatOf(q.spec.rule)) {
    case ScaleFormat::kE4m3: return "nvfp4";
    case ScaleFormat::kUe8m0: return std::string("mx-") + q.spec.elem.name;
    case ScaleFormat::kFp32: return q.spec.name + "-" + q.spec.elem.name;
    case ScaleFormat::kCode:  // GEMM operands' scales only: no rule stores it
      break;
  }
  return "?";
}

AuditResult AuditCheckpointTensor(const CheckpointTensor& t, const NpyArray* source, const std::string& source_name) {
  const QuantizedTensor& q = t.q;
  AuditResult res;
  res.info = t.info;
  res.scheme = CheckpointScheme(q);
  const std::vector<float> decoded = DecodeCheckpointTensor(t);
  // The source as rows x cols FP32 in the stored orientation.
  std::vector<float> src;
  if (source != nullptr) {
    if (source->dtype != DType::kF32 && source->dtype != DType::kBF16 && source->dtype != DType::kF16)
      throw Error("source '" + source_name + "' is " + DTypeName(source->dtype) + "; audit reads F32, BF16 or F16");
    std::vector<size_t> swapped = source->shape;
    if (swapped.size() >= 2) std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
    const bool same = source->shape == q.shape, transposed = !same && swapped == q.shape;
    if (!same && !transposed)
      throw Error("source '" + source_name + "' has a shape unlike the quantized tensor '" + t.info.name + "'s");
    src.resize(q.rows * q.cols);
    const size_t n = src.size();
    for (size_t i = 0; i < n; ++i) src[i] = SourceValueF32(source->dtype, source->data.data(), i);
    if (transposed) {  // source [..., cols, rows] -> [..., rows, cols], per leading index
      const size_t rr = q.shape[q.shape.size() - 2], cc = q.shape.back(), mat = rr * cc;
      std::vector<float> tmp(n);
      for (size_t b = 0; b < n / mat; ++b)
        for (size_t i = 0; i < rr; ++i)
          for (size_t j = 0; j < cc; ++j) tmp[b * mat + i * cc + j] = src[b * mat + j * rr + i];
      src.swap(tmp);
    }
    res.source = source_name;
  } else {
    src = decoded;
    res.source = "decoded";
  }
  // Statistics of the stored tensor.
  AuditStats& st = res.stats;
  st.elements = q.codes.size();
  st.blocks = q.scale_rows * q.scale_cols;
  const double maxv = Limits(q.spec.elem).max_finite;
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  std::vector<double> scale(st.blocks);
  bool first_scale = true;
  for (size_t i = 0; i < st.blocks; ++i) {
    scale[i] = CheckpointBlockScale(t, i);
    if (std::isnan(scale[i])) {
      ++st.nan_scales;
    } else if (std::isfinite(scale[i])) {
      st.min_scale = first_scale ? scale[i] : std::min(st.min_scale, scale[i]);
      st.max_scale = first_scale ? scale[i] : std::max(st.max_scale, scale[i]);
      first_scale = false;
    }
  }
  st.has_source = source != nullptr;
  for (size_t r = 0; r < q.rows; ++r)
    for (size_t c = 0; c < q.cols; ++c) {
      const size_t i = r * q.cols + c;
      const double v = DecodeToDouble(q.spec.elem, q.codes[i] & q.spec.elem.CodeMask());
      st.zero_codes += v == 0;
      st.nan_codes += std::isnan(v);
      st.max_codes += std::fabs(v) == maxv;
      if (std::isfinite(decoded[i])) st.decoded_amax = std::max(st.decoded_amax, std::fabs(static_cast<double>(decoded[i])));
      if (source == nullptr || !std::isfinite(src[i])) continue;
      const double x = std::fabs(static_cast<double>(src[i]));
      st.source_amax = std::max(st.source_amax, x);
      const double s = scale[(r / be.rows) * q.scale_cols + c / be.cols];
      st.saturated += std::isfinite(s) && s > 0 && x > maxv * s;
      st.flushed_to_zero += x != 0 && v == 0;
    }
  // Re-quantize under every candidate and compare.
  TensorView view;
  view.dtype = DType::kF32;
  view.data = src.data();
  view.rows = q.rows;
  view.cols = q.cols;
  const size_t scale_bytes = ScaleBytes(ScaleFormatOf(q.spec.rule));
  for (const Candidate& c : CandidatesFor(q.spec)) {
    AuditCandidate a;
    a.name = c.name;
    a.spec = DescribeSpec(c.spec);
    const QuantizedTensor r = Quantize(view, c.spec);
    // The first differing scale is reported before the first differing code: a scale explains its block.
    auto note = [&a](const char* what, uint64_t i, uint32_t stored, uint32_t got) {
      if (a.has_first) return;
      a.has_first = true;
      a.first_what = what;
      a.first_index = i;
      a.first_stored = stored;
      a.first_requantized = got;
    };
    if (r.scales.size() != q.scales.size()) {
      a.scale_mismatches = st.blocks;
    } else {
      for (size_t i = 0; i < st.blocks; ++i) {
        uint32_t want = 0, got = 0;
        std::memcpy(&want, &q.scales[i * scale_bytes], scale_bytes);
        std::memcpy(&got, &r.scales[i * scale_bytes], scale_bytes);
        if (want == got) continue;
        note("scale", i, want, got);
        ++a.scale_mismatches;
      }
    }
    for (size_t i = 0; i < q.codes.size(); ++i) {
      if (r.codes[i] == q.codes[i]) continue;
      note("code", i, q.codes[i], r.codes[i]);
      ++a.code_mismatches;
    }
    a.reproduces = a.code_mismatches == 0 && a.scale_mismatches == 0;
    res.candidates.push_back(a);
  }
  return res;
}

}  // namespace qmx
