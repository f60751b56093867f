// checkpoint.cc: the quantized-checkpoint layouts of qmx/checkpoint.h (gpt-oss MXFP4, ModelOpt and
// compressed-tensors NVFP4, torchao MX/NVFP4, DeepSeek-V3 blockwise FP8, scaled FP8, qmx's own): finding
// them by name, reading codes and scales into a QuantizedTensor, decoding by each producer's formula.
#include "qmx/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "qmx/convert.h"
#include "qmx/error.h"
#include "quantize/quantize_internal.h"

namespace qmx {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
std::string Stem(const std::string& s, const std::string& suffix) { return s.substr(0, s.size() - suffix.size()); }

std::string ShapeText(const std::vector<size_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

[[noreturn]] void Bad(const SafetensorsReader& r, const std::string& what) { throw IoError(r.path() + ": " + what); }

const SafetensorsTensor* Part(const SafetensorsReader& r, const std::string& name) { return r.index().Find(name); }

void WantDtype(const SafetensorsReader& r, const SafetensorsTensor& t, std::initializer_list<const char*> dtypes,
               const std::string& layout) {
  std::string list;
  for (const char* d : dtypes) {
    if (t.dtype == d) return;
    list += (list.empty() ? "" : " or ") + std::string(d);
  }
  Bad(r, "tensor '" + t.name + "' is " + t.dtype + "; the " + layout + " layout stores it as " + list);
}

const char* const kLayoutNames[] = {"qmx",           "gpt-oss-mxfp4", "modelopt-nvfp4", "compressed-tensors-nvfp4",
                                    "compressed-tensors-mxfp4", "torchao", "deepseek-fp8", "fp8-scaled"};

// Codes of element format `elem` with logical shape [..., cols]: an F4/F8/F6 code dtype as stored, or
// U8 bytes packing two E2M1 per byte ([..., cols / 2], element 2i in the low nibble).
std::vector<uint8_t> ReadCodes(const SafetensorsReader& r, const SafetensorsTensor& t, const Format& elem,
                               std::vector<size_t>* shape) {
  if (t.codes) {
    if (t.format != elem) Bad(r, "tensor '" + t.name + "' holds " + t.format.name + " codes, expected " + elem.name);
    *shape = t.shape;
    return r.Read(t.name).data;
  }
  if (t.dtype != "U8") Bad(r, "tensor '" + t.name + "' is " + t.dtype + "; expected " + elem.name + " codes");
  if (elem.Bits() != 4) {
    *shape = t.shape;
    return r.Read(t.name).data;  // one code per byte
  }
  if (t.shape.empty()) Bad(r, "tensor '" + t.name + "' of packed FP4 codes has no dimensions");
  const NpyArray packed = r.Read(t.name);
  *shape = t.shape;
  shape->back() *= 2;
  return UnpackCodes(packed.data.data(), packed.data.size(), packed.data.size() * 2, 4);
}

size_t Count(const std::vector<size_t>& shape) {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

// Scales [rows, cols] of one byte each, linear or swizzled (told apart by their element count).
std::vector<uint8_t> ReadByteScales(const SafetensorsReader& r, const SafetensorsTensor& t, size_t rows, size_t cols) {
  const NpyArray a = r.Read(t.name);
  if (a.data.size() == rows * cols) return a.data;
  const size_t padded = ((rows + 127) / 128) * 128 * ((cols + 3) / 4) * 4;
  if (a.data.size() != padded)
    Bad(r, "tensor '" + t.name + "' of shape " + ShapeText(t.shape) + " is neither the " + std::to_string(rows) + " x " +
               std::to_string(cols) + " block scales nor their swizzled 128x4-tile layout (" + std::to_string(padded) + " bytes)");
  std::vector<uint8_t> out(rows * cols);
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j) out[i * cols + j] = a.data[CublasTiledIndex(i, j, cols)];
  return out;
}

float ReadScalar(const SafetensorsReader& r, const SafetensorsTensor& t) {
  if (t.dtype != "F32" || t.count() != 1)
    Bad(r, "tensor '" + t.name + "' must be one F32 value, not " + t.dtype + " " + ShapeText(t.shape));
  const NpyArray a = r.Read(t.name);
  float v;
  std::memcpy(&v, a.data.data(), 4);
  return v;
}

QuantSpec SpecFor(const std::string& name, const Format& elem) {
  QuantSpec s = QuantSpecByName(name);
  s.elem = elem;
  return s;
}

// MX specs by element format (the rule is a placeholder: the producer's rule is what audit finds).
std::string MxSpecName(const Format& elem) {
  if (elem == fmt::kE2M1) return "mxfp4";
  if (elem == fmt::kE4M3) return "mxfp8";
  if (elem == fmt::kE5M2) return "mxfp8_e5m2";
  if (elem == fmt::kE2M3) return "mxfp6_e2m3";
  if (elem == fmt::kE3M2) return "mxfp6_e3m2";
  if (elem == fmt::kInt8) return "mxint8";
  throw Error(std::string("no MX recipe has element format ") + elem.name);
}

QuantizedTensor Assemble(const SafetensorsReader& r, const std::string& what, const QuantSpec& spec,
                         std::vector<size_t> shape, std::vector<uint8_t> codes, std::vector<uint8_t> scales,
                         float tensor_amax = 0.0f, std::vector<float> line_amax = {}) {
  try {
    return AssembleQuantized(spec, std::move(shape), std::move(codes), std::move(scales), tensor_amax, std::move(line_amax));
  } catch (const Error& e) {
    Bad(r, what + ": " + e.what());
  }
}

// The block grid of a spec on a tensor of this shape.
std::pair<size_t, size_t> Grid(const QuantSpec& spec, const std::vector<size_t>& shape) {
  const size_t cols = shape.empty() ? 1 : shape.back();
  const size_t rows = cols == 0 ? 0 : Count(shape) / cols;
  const BlockExtent be = ResolveBlock(spec, rows, cols);
  return {rows == 0 ? 0 : (rows + be.rows - 1) / be.rows, cols == 0 ? 0 : (cols + be.cols - 1) / be.cols};
}

std::vector<uint8_t> F32Bytes(const SafetensorsReader& r, const SafetensorsTensor& t) {
  if (t.dtype != "F32") Bad(r, "tensor '" + t.name + "' is " + t.dtype + "; FP32 scales are stored as F32");
  return r.Read(t.name).data;
}

}  // namespace

const char* CheckpointLayoutName(CheckpointLayout layout) { return kLayoutNames[static_cast<int>(layout)]; }

std::vector<CheckpointTensorInfo> ScanCheckpoint(const SafetensorsReader& r) {
  std::vector<CheckpointTensorInfo> out;
  const auto& meta = r.index().metadata;
  const bool qmx_file = meta.count("qmx.spec") != 0;
  for (const SafetensorsTensor& t : r.index().tensors) {
    const std::string& n = t.name;
    auto has = [&](const std::string& name) { return Part(r, name) != nullptr; };
    if (qmx_file && EndsWith(n, ".codes") && has(Stem(n, ".codes") + ".scales")) {
      const std::string x = Stem(n, ".codes");
      out.push_back({x, CheckpointLayout::kQmx, {n, x + ".scales"}});
    } else if ((EndsWith(n, ".blocks") && has(Stem(n, ".blocks") + ".scales")) ||
               (EndsWith(n, "_blocks") && has(Stem(n, "_blocks") + "_scales"))) {
      const char sep = n[n.size() - 7];
      const std::string x = n.substr(0, n.size() - 7);
      out.push_back({x, CheckpointLayout::kGptOssMxfp4, {n, x + sep + "scales"}});
    } else if (EndsWith(n, "weight_scale_2")) {
      const std::string p = Stem(n, "weight_scale_2");
      if (!has(p + "weight") || !has(p + "weight_scale"))
        Bad(r, "tensor '" + n + "' (ModelOpt NVFP4) needs '" + p + "weight' and '" + p + "weight_scale' beside it");
      std::vector<std::string> parts{p + "weight", p + "weight_scale", n};
      if (has(p + "input_scale")) parts.push_back(p + "input_scale");
      out.push_back({p + "weight", CheckpointLayout::kModelOptNvfp4, parts});
    } else if (EndsWith(n, "weight_packed")) {
      const std::string p = Stem(n, "weight_packed");
      if (!has(p + "weight_scale")) Bad(r, "tensor '" + n + "' (compressed-tensors) needs '" + p + "weight_scale' beside it");
      if (has(p + "weight_global_scale")) {
        std::vector<std::string> parts{n, p + "weight_scale", p + "weight_global_scale"};
        if (has(p + "input_global_scale")) parts.push_back(p + "input_global_scale");
        out.push_back({p + "weight", CheckpointLayout::kCompressedTensorsNvfp4, parts});
      } else {
        out.push_back({p + "weight", CheckpointLayout::kCompressedTensorsMxfp4, {n, p + "weight_scale"}});
      }
    } else if (EndsWith(n, "_qdata")) {
      const std::string x = Stem(n, "_qdata");
      if (!has(x + "_scale")) Bad(r, "tensor '" + n + "' (torchao) needs '" + x + "_scale' beside it");
      std::vector<std::string> parts{n, x + "_scale"};
      if (has(x + "_per_tensor_scale")) parts.push_back(x + "_per_tensor_scale");
      // "layer._weight" -> "layer.weight"
      const size_t dot = x.rfind("._");
      const std::string logical = dot == std::string::npos ? x : x.substr(0, dot + 1) + x.substr(dot + 2);
      out.push_back({logical, CheckpointLayout::kTorchao, parts});
    } else if (EndsWith(n, "weight_scale_inv")) {
      const std::string p = Stem(n, "weight_scale_inv");
      if (!has(p + "weight")) Bad(r, "tensor '" + n + "' (DeepSeek FP8) needs '" + p + "weight' beside it");
      out.push_back({p + "weight", CheckpointLayout::kDeepSeekFp8, {p + "weight", n}});
    } else if (EndsWith(n, "weight_scale") && t.dtype == "F32") {
      const std::string p = Stem(n, "weight_scale");
      const SafetensorsTensor* w = Part(r, p + "weight");
      if (w == nullptr || (w->dtype != "F8_E4M3" && w->dtype != "F8_E5M2") || has(p + "weight_scale_2") ||
          has(p + "weight_packed"))
        continue;
      std::vector<std::string> parts{p + "weight", n};
      if (has(p + "input_scale")) parts.push_back(p + "input_scale");
      out.push_back({p + "weight", CheckpointLayout::kFp8Scaled, parts});
    }
  }
  return out;
}

const CheckpointTensorInfo* FindCheckpointTensor(const std::vector<CheckpointTensorInfo>& found, const std::string& name) {
  for (const CheckpointTensorInfo& f : found)
    if (f.name == name) return &f;
  return nullptr;
}

namespace {

// A file qmx-sim quantize wrote: the qmx.spec metadata, codes, scales, the tensor amax and (row-scaled)
// each line's amax.
CheckpointTensor LoadQmx(const SafetensorsReader& r, const CheckpointTensorInfo& info,
                        const std::vector<const SafetensorsTensor*>& p, const std::string& what) {
  CheckpointTensor ct;
  ct.info = info;
  QuantSpec spec;
  try {
    spec = QuantSpecFromJson(r.index().metadata.at("qmx.spec"));
  } catch (const Error& e) {
    Bad(r, std::string("qmx.spec metadata: ") + e.what());
  }
  const auto& meta = r.index().metadata;
  const auto packed = meta.find("qmx.packed." + info.name);
  if (packed != meta.end() && packed->second == "1")
    Bad(r, "tensor '" + info.name + "' was written with --pack; unpacked or native codes are read");
  const NpyArray codes = r.Read(p[0]->name), scales = r.Read(p[1]->name);
  // Native dtypes must be the spec's formats (a file edited by hand could mix them).
  if (p[0]->codes && p[0]->format != spec.elem)
    Bad(r, "tensor '" + p[0]->name + "' is " + p[0]->dtype + " but the spec's element format is " + spec.elem.name);
  const ScaleFormat sf = ScaleFormatOf(spec.rule);
  if (p[1]->codes && !((sf == ScaleFormat::kUe8m0 && p[1]->format == MxScaleFormat(spec)) ||
                       (sf == ScaleFormat::kE4m3 && p[1]->format == fmt::kE4M3)))
    Bad(r, "tensor '" + p[1]->name + "' is " + p[1]->dtype + ", not the scale format of rule " + ScaleRuleName(spec.rule));
  const auto amax = meta.find("qmx.tensor_amax." + info.name);
  float a = 0;
  if (amax != meta.end()) {
    const auto j = nlohmann::json::parse(amax->second, nullptr, false);
    if (!j.is_number()) Bad(r, "metadata qmx.tensor_amax." + info.name + " is not a number");
    a = j.get<float>();
  }
  // Row-scaled NVFP4: NAME.line_amax, one F32 amax per line (qmx-sim quantize writes it).
  std::vector<float> lines;
  if (spec.row_scaled) {
    const std::string ln = info.name + ".line_amax";
    if (!r.index().Find(ln)) Bad(r, what + ": the spec is row-scaled but the file has no tensor '" + ln + "'");
    const NpyArray la = r.Read(ln);
    if (la.dtype != DType::kF32 || la.shape.size() != 1) Bad(r, "tensor '" + ln + "' must be a 1-D F32 array");
    lines.resize(la.shape[0]);
    if (!lines.empty()) std::memcpy(lines.data(), la.data.data(), lines.size() * 4);
  }
  ct.q = Assemble(r, what, spec, codes.shape, codes.data, scales.data, a, std::move(lines));
  return ct;
}

// gpt-oss MXFP4: U8 blocks [..., G, 16] of packed E2M1 pairs beside U8 UE8M0 scales [..., G].
CheckpointTensor LoadGptOss(const SafetensorsReader& r, const CheckpointTensorInfo& info,
                           const std::vector<const SafetensorsTensor*>& p, const std::string& what) {
  CheckpointTensor ct;
  ct.info = info;
  std::vector<size_t> shape;
  if (p[0]->dtype != "U8" || p[1]->dtype != "U8")
    Bad(r, what + ": blocks and scales are U8, not " + p[0]->dtype + " and " + p[1]->dtype);
  const std::vector<size_t>& bs = p[0]->shape;
  if (bs.size() < 2 || bs.back() != 16 || std::vector<size_t>(bs.begin(), bs.end() - 1) != p[1]->shape)
    Bad(r, what + ": blocks " + ShapeText(bs) + " must be [..., G, 16] beside scales [..., G], not " + ShapeText(p[1]->shape));
  const NpyArray blocks = r.Read(p[0]->name), scales = r.Read(p[1]->name);
  shape.assign(bs.begin(), bs.end() - 2);
  shape.push_back(bs[bs.size() - 2] * 32);
  ct.q = Assemble(r, what, QuantSpecByName("mxfp4"), shape,
                  UnpackCodes(blocks.data.data(), blocks.data.size(), blocks.data.size() * 2, 4), scales.data);
  return ct;
}

// ModelOpt and compressed-tensors NVFP4: packed E2M1, E4M3 block scales and the global scale
// (compressed-tensors divides by it, ModelOpt multiplies).
CheckpointTensor LoadNvfp4Pair(const SafetensorsReader& r, const CheckpointTensorInfo& info,
                              const std::vector<const SafetensorsTensor*>& p, const std::string& what) {
  CheckpointTensor ct;
  ct.info = info;
  std::vector<size_t> shape;
  const bool ct_layout = info.layout == CheckpointLayout::kCompressedTensorsNvfp4;
  const QuantSpec spec = QuantSpecByName("nvfp4");
  std::vector<uint8_t> codes = ReadCodes(r, *p[0], fmt::kE2M1, &shape);
  WantDtype(r, *p[1], {"F8_E4M3"}, CheckpointLayoutName(info.layout));
  const auto [gr, gc] = Grid(spec, shape);
  if (p[1]->count() != gr * gc)
    Bad(r, what + ": weight_scale " + ShapeText(p[1]->shape) + " does not hold the " + std::to_string(gr) + " x " +
               std::to_string(gc) + " scales of 1x16 blocks of " + ShapeText(shape));
  ct.q = Assemble(r, what, spec, shape, std::move(codes), r.Read(p[1]->name).data);
  ct.global = ReadScalar(r, *p[2]);
  ct.global_divides = ct_layout;
  // Informational: the tensor amax the second-level scale was made from (2688 = 448 * 6).
  ct.q.tensor_amax = ct_layout ? 2688.0f / ct.global : ct.global * 2688.0f;
  return ct;
}

// compressed-tensors MXFP4: packed E2M1 and UE8M0 scales.
CheckpointTensor LoadCtMxfp4(const SafetensorsReader& r, const CheckpointTensorInfo& info,
                            const std::vector<const SafetensorsTensor*>& p, const std::string& what) {
  CheckpointTensor ct;
  ct.info = info;
  std::vector<size_t> shape;
  const QuantSpec spec = QuantSpecByName("mxfp4");
  std::vector<uint8_t> codes = ReadCodes(r, *p[0], fmt::kE2M1, &shape);
  WantDtype(r, *p[1], {"U8", "F8_E8M0"}, CheckpointLayoutName(info.layout));
  ct.q = Assemble(r, what, spec, shape, std::move(codes), r.Read(p[1]->name).data);
  return ct;
}

// torchao's MX and NVFP4 tensors: the scale dtype names the scheme, the qdata dtype the element.
CheckpointTensor LoadTorchao(const SafetensorsReader& r, const CheckpointTensorInfo& info,
                            const std::vector<const SafetensorsTensor*>& p, const std::string& what) {
  CheckpointTensor ct;
  ct.info = info;
  std::vector<size_t> shape;
  // The scale dtype names the scheme; FP8 qdata names the element, U8 qdata is packed FP4.
  const bool nvfp4 = p[1]->dtype == "F8_E4M3";
  if (!nvfp4 && p[1]->dtype != "F8_E8M0")
    Bad(r, what + ": scale '" + p[1]->name + "' is " + p[1]->dtype + "; torchao stores F8_E8M0 (MX) or F8_E4M3 (NVFP4)");
  Format elem = fmt::kE2M1;
  if (p[0]->dtype == "F8_E4M3") elem = fmt::kE4M3;
  else if (p[0]->dtype == "F8_E5M2") elem = fmt::kE5M2;
  else if (p[0]->dtype != "U8" && p[0]->dtype != "F4")
    Bad(r, what + ": qdata is " + p[0]->dtype + "; read are F8_E4M3, F8_E5M2 and U8/F4 packed FP4 (unpacked FP6 "
                  "needs its element format, which only the torchao metadata names)");
  if (nvfp4 && elem != fmt::kE2M1) Bad(r, what + ": NVFP4 qdata must be FP4, not " + p[0]->dtype);
  const QuantSpec spec = nvfp4 ? QuantSpecByName("nvfp4") : SpecFor(MxSpecName(elem), elem);
  std::vector<uint8_t> codes = ReadCodes(r, *p[0], elem, &shape);
  const auto [gr, gc] = Grid(spec, shape);
  ct.q = Assemble(r, what, spec, shape, std::move(codes), ReadByteScales(r, *p[1], gr, gc));
  if (nvfp4 && p.size() > 2) {
    ct.global = ReadScalar(r, *p[2]);
    ct.q.tensor_amax = ct.global * 2688.0f;
  }
  return ct;
}

// DeepSeek-V3's 128x128 FP8 and scaled FP8 (per tensor or per row).
CheckpointTensor LoadFp8(const SafetensorsReader& r, const CheckpointTensorInfo& info,
                        const std::vector<const SafetensorsTensor*>& p, const std::string& what) {
  CheckpointTensor ct;
  ct.info = info;
  std::vector<size_t> shape;
  const bool deepseek = info.layout == CheckpointLayout::kDeepSeekFp8;
  WantDtype(r, *p[0], deepseek ? std::initializer_list<const char*>{"F8_E4M3"}
                               : std::initializer_list<const char*>{"F8_E4M3", "F8_E5M2"},
            CheckpointLayoutName(info.layout));
  std::vector<uint8_t> codes = ReadCodes(r, *p[0], p[0]->format, &shape);
  std::string name = "fp8-block128x128";
  if (!deepseek) {
    const size_t rows = shape.size() < 2 ? 1 : Count(shape) / shape.back();
    const size_t n = p[1]->count();
    if (n == 1) name = "fp8-tensor-current";
    else if (n == rows && (p[1]->shape.size() == 1 || (p[1]->shape.size() == 2 && p[1]->shape[1] == 1))) name = "fp8-rowwise";
    else Bad(r, what + ": weight_scale " + ShapeText(p[1]->shape) + " is neither per tensor nor per row of " + ShapeText(shape));
  }
  ct.q = Assemble(r, what, SpecFor(name, p[0]->format), shape, std::move(codes), F32Bytes(r, *p[1]));
  return ct;
}

}  // namespace

// One function per layout (below), each reading its parts and checking their dtypes and shapes.
CheckpointTensor LoadCheckpointTensor(const SafetensorsReader& r, const CheckpointTensorInfo& info) {
  std::vector<const SafetensorsTensor*> p;
  for (const auto& name : info.parts) p.push_back(&r.Get(name));
  const std::string what = "'" + info.name + "' (" + CheckpointLayoutName(info.layout) + ")";
  switch (info.layout) {
    case CheckpointLayout::kQmx: return LoadQmx(r, info, p, what);
    case CheckpointLayout::kGptOssMxfp4: return LoadGptOss(r, info, p, what);
    case CheckpointLayout::kModelOptNvfp4:
    case CheckpointLayout::kCompressedTensorsNvfp4: return LoadNvfp4Pair(r, info, p, what);
    case CheckpointLayout::kCompressedTensorsMxfp4: return LoadCtMxfp4(r, info, p, what);
    case CheckpointLayout::kTorchao: return LoadTorchao(r, info, p, what);
    case CheckpointLayout::kDeepSeekFp8:
    case CheckpointLayout::kFp8Scaled: return LoadFp8(r, info, p, what);
  }
  Bad(r, what + ": unknown layout");
}

std::vector<float> DecodeCheckpointTensor(const CheckpointTensor& t) { return DecodeCheckpointTensor(t, DequantOrder::kByRule); }

std::vector<float> DecodeCheckpointTensor(const CheckpointTensor& t, DequantOrder order) {
  return DecodeCheckpointTensor(t, order, false);
}

std::vector<float> DecodeCheckpointTensor(const CheckpointTensor& t, DequantOrder order, bool ftz) {
  const QuantizedTensor& q = t.q;
  std::vector<float> out(q.rows * q.cols);
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  if (sf != ScaleFormat::kE4m3 || t.info.layout == CheckpointLayout::kQmx) {
    Dequantize(q, out.data(), order, ftz);
    return out;
  }
  if (order != DequantOrder::kByRule)
    throw Error("tensor '" + t.info.name + "' (" + CheckpointLayoutName(t.info.layout) +
                "): the checkpoint's NVFP4 scales carry their producer's decode order; dequantization order '" +
                DequantOrderName(order) + "' applies to qmx-sim's own NVFP4 tensors");
  // NVFP4 with a stored second-level scale: the producer's order.
  const std::vector<float> table = detail::CodeTable(q.spec.elem);
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  const auto flush = [ftz](float x) { return static_cast<float>(detail::FlushSubnormal(x, ftz)); };
  std::vector<float> scale(q.scale_rows * q.scale_cols);
  for (size_t i = 0; i < scale.size(); ++i) scale[i] = flush(CheckpointBlockScale(t, i));
  // Each row one block at a time: the block's scale is looked up once, not found by two divisions per element.
  for (size_t r = 0; r < q.rows; ++r) {
    const float* row_scale = scale.data() + (r / be.rows) * q.scale_cols;
    for (size_t c0 = 0; c0 < q.cols; c0 += be.cols) {
      const float s = row_scale[c0 / be.cols];
      const size_t end = r * q.cols + std::min(q.cols, c0 + be.cols);
      for (size_t i = r * q.cols + c0; i < end; ++i) out[i] = flush(table[q.codes[i]] * s);
    }
  }
  return out;
}

float CheckpointBlockScale(const CheckpointTensor& t, size_t i) {
  const QuantizedTensor& q = t.q;
  switch (ScaleFormatOf(q.spec.rule)) {
    case ScaleFormat::kUe8m0: return q.ScaleAt(i / q.scale_cols, i % q.scale_cols);  // UE8M0 or the spec's format
    case ScaleFormat::kE4m3: {
      // (Row-scaled blocks are 1-D, so block (sr, sc) lies in row sr for axis row and column sc for axis col.)
      if (t.info.layout == CheckpointLayout::kQmx)
        return Nvfp4DecodeScale(q.scales[i], q.SecondLevelAmax(i / q.scale_cols, i % q.scale_cols), q.spec,
                                DequantOrder::kByRule);
      const float s8 = DecodeToFloat(fmt::kE4M3, q.scales[i]);
      return t.global_divides ? s8 / t.global : s8 * t.global;
    }
    case ScaleFormat::kFp32: {
      float f;
      std::memcpy(&f, &q.scales[4 * i], 4);
      return f;
    }
    case ScaleFormat::kCode:  // GEMM operands' scales only: no rule stores it
      break;
  }
  return NAN;
}

}  // namespace qmx
