// audit.cc: which scale rule or library profile reproduces a checkpoint's stored codes and scales bit for
// bit (qmx/checkpoint.h AuditCheckpointTensor), plus its range, saturation and flush counts.
#include <algorithm>
#include <array>
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
      if (stored.block_rows == 1 && stored.block_cols == 16 && stored.cast.rounding == Rounding::kRne &&
          stored.scale_format.empty())  // (4over6 keeps E4M3 scales)
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

// Each byte value's element value (its code bits' DecodeToDouble): decoded once per tensor, not per element.
std::array<double, 256> CodeValues(const Format& elem) {
  std::array<double, 256> value{};
  for (uint32_t c = 0; c < 256; ++c) value[c] = DecodeToDouble(elem, c & elem.CodeMask());
  return value;
}

// The codes decoding to zero, NaN and the largest finite magnitude, counted by byte value.
void CountCodes(const QuantizedTensor& q, const std::array<double, 256>& value, AuditStats& st) {
  std::array<uint64_t, 256> count{};
  for (uint8_t c : q.codes) ++count[c];
  const double maxv = Limits(q.spec.elem).max_finite;
  for (size_t c = 0; c < 256; ++c) {
    st.zero_codes += value[c] == 0 ? count[c] : 0;
    st.nan_codes += std::isnan(value[c]) ? count[c] : 0;
    st.max_codes += std::fabs(value[c]) == maxv ? count[c] : 0;
  }
}

// max |x| over the finite values (0 when there are none). The float maximum widened once equals the
// maximum of the widened values.
double FiniteAmax(const std::vector<float>& x) {
  float amax = 0;
  for (float v : x)
    if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
  return amax;
}

// The source's amax, its saturated elements (|x| above the largest code times a positive block scale) and
// its nonzero elements stored as zero codes. The loop walks each row one block at a time, so the block's
// limit is looked up once per block rather than found by two divisions per element.
void CompareSource(const QuantizedTensor& q, const std::array<double, 256>& value, const std::vector<double>& scale,
                   const float* src, AuditStats& st) {
  const double maxv = Limits(q.spec.elem).max_finite;
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  for (size_t r = 0; r < q.rows; ++r) {
    const double* row_scale = scale.data() + (r / be.rows) * q.scale_cols;
    for (size_t c0 = 0; c0 < q.cols; c0 += be.cols) {
      const double s = row_scale[c0 / be.cols];
      // No finite |x| exceeds HUGE_VAL: a block whose scale is not finite and positive saturates nothing.
      const double limit = std::isfinite(s) && s > 0 ? maxv * s : HUGE_VAL;
      const size_t end = r * q.cols + std::min(q.cols, c0 + be.cols);
      for (size_t i = r * q.cols + c0; i < end; ++i) {
        if (!std::isfinite(src[i])) continue;
        const double x = std::fabs(static_cast<double>(src[i]));
        st.source_amax = std::max(st.source_amax, x);
        st.saturated += x > limit;
        st.flushed_to_zero += x != 0 && value[q.codes[i]] == 0;
      }
    }
  }
}

// Block i's scale of 1 or 4 bytes as one number. Each memcpy has a constant size, so it compiles to a load
// rather than a library call per block and candidate.
uint32_t ScaleBits(const std::vector<uint8_t>& scales, size_t i, size_t bytes) {
  uint32_t v = 0;
  if (bytes == 4) std::memcpy(&v, &scales[4 * i], 4);
  else if (bytes == 1) v = scales[i];
  else std::memcpy(&v, &scales[bytes * i], bytes);
  return v;
}

// How many of the n positions a and b differ at. Counted without a branch, so that the loop vectorizes:
// with one per element, comparing each candidate's codes took half of the audit's time.
uint64_t CountDifferences(const uint8_t* a, const uint8_t* b, size_t n) {
  uint64_t count = 0;
  for (size_t i = 0; i < n; ++i) count += a[i] != b[i];
  return count;
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
    res.source = "decoded";
  }
  // Statistics of the stored tensor.
  AuditStats& st = res.stats;
  st.elements = q.codes.size();
  st.blocks = q.scale_rows * q.scale_cols;
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
  const std::array<double, 256> value = CodeValues(q.spec.elem);
  CountCodes(q, value, st);
  st.decoded_amax = FiniteAmax(decoded);
  st.has_source = source != nullptr;
  if (source != nullptr) CompareSource(q, value, scale, src.data(), st);
  // Re-quantize under every candidate and compare.
  TensorView view;
  view.dtype = DType::kF32;
  view.data = source != nullptr ? src.data() : decoded.data();  // without a source, the decoded values
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
        const uint32_t want = ScaleBits(q.scales, i, scale_bytes), got = ScaleBits(r.scales, i, scale_bytes);
        if (want == got) continue;
        note("scale", i, want, got);
        ++a.scale_mismatches;
      }
    }
    a.code_mismatches = CountDifferences(q.codes.data(), r.codes.data(), q.codes.size());
    if (a.code_mismatches != 0) {
      const size_t i = std::mismatch(q.codes.begin(), q.codes.end(), r.codes.begin()).first - q.codes.begin();
      note("code", i, q.codes[i], r.codes[i]);
    }
    a.reproduces = a.code_mismatches == 0 && a.scale_mismatches == 0;
    res.candidates.push_back(a);
  }
  return res;
}

}  // namespace qmx
