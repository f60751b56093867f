// convert_audit.cc: `audit --convert` (qmx/checkpoint.h ConvertCheckpointTensor): a checkpoint tensor's decoded
// values re-quantized under a target spec and compared with their own dequantization, element by element
// and per target block.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "qmx/checkpoint.h"
#include "qmx/convert.h"
#include "qmx/error.h"

namespace qmx {
namespace {

bool SameValue(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

}  // namespace

bool ConvertMatches(const CheckpointTensor& t, const std::string& from) {
  const QuantizedTensor& q = t.q;
  if (from == q.spec.elem.name) return true;
  if (from == CheckpointScheme(q)) return true;
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  try {
    const QuantSpec s = QuantSpecByName(from);
    return std::string(s.elem.name) == q.spec.elem.name && ScaleFormatOf(s.rule) == sf;
  } catch (const Error&) {
    return false;
  }
}

QuantSpec ConvertTarget(const CheckpointTensor& t, const std::string& to) {
  try {
    return QuantSpecByName(to);
  } catch (const Error&) {
  }
  Format f;
  try {
    f = ParseFormat(to);
  } catch (const Error&) {
    throw Error("--convert: '" + to + "' is neither a quantization spec (qmx-sim quantize --help) nor an element format");
  }
  if (f.Bits() > 8) throw Error("--convert: " + to + " is " + std::to_string(f.Bits()) + " bits; quantized elements are 8 bits or fewer");
  QuantSpec s = t.q.spec;
  s.elem = f;
  s.name = t.q.spec.name + "+" + f.name;
  return s;
}

ConvertAudit ConvertCheckpointTensor(const CheckpointTensor& t, const QuantSpec& to, double factor) {
  const QuantizedTensor& q = t.q;
  const std::vector<float> from = DecodeCheckpointTensor(t);
  const TensorView view{DType::kF32, from.data(), q.rows, q.cols};
  ConvertAudit a;
  if (factor > 0) {
    const BlockExtent src = ResolveBlock(q.spec, q.rows, q.cols), dst = ResolveBlock(to, q.rows, q.cols);
    if (ScaleFormatOf(q.spec.rule) != ScaleFormat::kFp32 || src.rows < q.rows || src.cols < q.cols)
      throw Error("--factor applies to a tensor with one FP32 scale; this one is " + DescribeSpec(q.spec));
    if (ScaleFormatOf(to.rule) != ScaleFormat::kFp32 || dst.rows < q.rows || dst.cols < q.cols)
      throw Error("--factor needs a per-tensor FP32 target (the source's scale times the factor); " + DescribeSpec(to) +
                  " is not");
    if (!std::isfinite(factor)) throw Error("--factor must be finite and positive");
    const float scale = static_cast<float>(static_cast<double>(CheckpointBlockScale(t, 0)) * factor);
    if (!(scale > 0) || !std::isfinite(scale))
      throw Error("--factor: the source's scale times " + std::to_string(factor) + " is not a positive FP32 number");
    // Element by element: the code's own value divided by the factor, into the target format (RNE, its
    // saturation and NaN rules), under the source's scale times the factor.
    std::vector<float> elems(q.codes.size());
    for (size_t i = 0; i < elems.size(); ++i)
      elems[i] = static_cast<float>(DecodeToDouble(q.spec.elem, q.codes[i]) / factor);
    QuantizedTensor c;
    c.spec = to;
    c.rows = q.rows;
    c.cols = q.cols;
    c.shape = q.shape;
    c.scale_rows = c.scale_cols = 1;
    c.codes.resize(elems.size());
    ConvertToCodes(DType::kF32, elems.data(), elems.size(), to.elem, to.cast, c.codes.data());
    c.scales.resize(4);
    std::memcpy(c.scales.data(), &scale, 4);
    c.tensor_amax = q.tensor_amax;
    a.converted = std::move(c);
  } else {
    a.converted = Quantize(view, to);
  }
  std::vector<float> back(from.size());
  Dequantize(a.converted, back.data());
  const BlockExtent be = ResolveBlock(to, q.rows, q.cols);
  const QuantizedTensor& c = a.converted;
  std::vector<uint8_t> bad_block(c.scale_rows * c.scale_cols, 0);
  a.elements = from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (SameValue(from[i], back[i])) continue;
    ++a.inexact;
    if (a.first.size() < 10) a.first.push_back({i, from[i], back[i]});
    const size_t r = i / q.cols, col = i % q.cols;
    bad_block[(r / be.rows) * c.scale_cols + col / be.cols] = 1;
  }
  a.blocks = bad_block.size();
  for (uint8_t b : bad_block) a.inexact_blocks += b;
  return a;
}

}  // namespace qmx
