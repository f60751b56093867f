// tensor_inputs.cc: float tensors from .npy and .safetensors files for the CLI commands.
#include "common/tensor_inputs.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "qmx/checkpoint.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/safetensors.h"

namespace qmx::cli {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

namespace {

// What a .safetensors file offers as inputs: its quantized tensors (a layout of qmx/checkpoint.h) by logical
// name, then every float or code tensor that is not part of one, in the file's order.
struct InputListing {
  std::vector<CheckpointTensorInfo> quantized;
  std::vector<std::string> plain;
};
InputListing ListSafetensors(const SafetensorsReader& r) {
  InputListing l;
  l.quantized = ScanCheckpoint(r);
  std::set<std::string> parts;
  for (const auto& q : l.quantized) parts.insert(q.parts.begin(), q.parts.end());
  for (const auto& t : r.index().tensors)
    if (parts.count(t.name) == 0 &&
        (t.codes || t.qmx_dtype == DType::kF32 || t.qmx_dtype == DType::kBF16 || t.qmx_dtype == DType::kF16) && t.supported)
      l.plain.push_back(t.name);
  return l;
}

}  // namespace

std::vector<std::string> SafetensorsInputNames(const std::string& path) {
  const SafetensorsReader r(path);
  const InputListing l = ListSafetensors(r);
  std::vector<std::string> names;
  for (const auto& q : l.quantized) names.push_back(q.name);
  names.insert(names.end(), l.plain.begin(), l.plain.end());
  if (names.empty()) throw Error("'" + path + "' holds no F32, BF16, F16, FP8/FP6/FP4 or quantized tensor");
  return names;
}

std::vector<std::pair<std::string, NpyArray>> ReadSafetensorsInputs(const std::string& path,
                                                                    const std::vector<std::string>& names,
                                                                    bool allow_none) {
  SafetensorsReader r(path);
  const InputListing l = ListSafetensors(r);
  auto decoded = [&](const CheckpointTensorInfo& info) {
    const CheckpointTensor t = LoadCheckpointTensor(r, info);
    const std::vector<float> v = DecodeCheckpointTensor(t);
    NpyArray a;
    a.dtype = DType::kF32;
    a.shape = t.q.shape;
    a.data.resize(v.size() * 4);
    if (!v.empty()) std::memcpy(a.data.data(), v.data(), a.data.size());
    return a;
  };
  std::vector<std::pair<std::string, NpyArray>> out;
  if (names.empty()) {
    // Every quantized tensor decoded, then every float or code tensor that is not part of one.
    for (const auto& q : l.quantized) out.emplace_back(q.name, decoded(q));
    for (const auto& n : l.plain) out.emplace_back(n, r.ReadValues(n));
    if (out.empty() && !allow_none) throw Error("'" + path + "' holds no F32, BF16, F16, FP8/FP6/FP4 or quantized tensor");
    return out;
  }
  for (const auto& n : names) {
    // A quantized tensor's logical name comes first: ModelOpt's P.weight is also the name of its packed codes.
    const CheckpointTensorInfo* q = FindCheckpointTensor(l.quantized, n);
    if (q != nullptr) out.emplace_back(n, decoded(*q));
    else out.emplace_back(n, r.Get(n).codes ? r.ReadValues(n) : r.Read(n));
  }
  return out;
}

std::pair<std::string, NpyArray> ReadNpyInput(const std::string& path) {
  const std::string base = path.substr(path.find_last_of('/') + 1);
  return {base.substr(0, base.size() - 4), ReadNpy(path)};
}


Input FromArray(const std::string& name, const NpyArray& arr) {
  if (arr.dtype != DType::kF32 && arr.dtype != DType::kBF16 && arr.dtype != DType::kF16)
    throw Error("tensor '" + name + "' is " + DTypeName(arr.dtype) + "; qmx-sim reads f32, bf16 or f16 tensors");
  Input in;
  in.name = name;
  in.cols = arr.shape.empty() ? 1 : arr.shape.back();
  in.rows = in.cols ? arr.count() / in.cols : 0;
  if (in.rows * in.cols == 0) throw Error("tensor '" + name + "' is empty");
  in.data.resize(in.rows * in.cols);
  for (size_t i = 0; i < in.data.size(); ++i) in.data[i] = SourceValueF32(arr.dtype, arr.data.data(), i);
  return in;
}

TensorFileSpec ParseTensorFileSpec(const std::string& spec, const std::string& option) {
  const size_t st = spec.find(".safetensors");
  if (st != std::string::npos) {
    if (spec.size() > st + 12 && spec[st + 12] != ':')
      throw Error(option + " '" + spec + "': write a tensor of a .safetensors file as FILE.safetensors:NAME");
    return {spec.substr(0, st + 12), spec.size() > st + 12 ? spec.substr(st + 13) : "", true};
  }
  if (EndsWith(spec, ".npy")) return {spec, "", false};
  throw Error(option + " '" + spec + "' is not a .npy or .safetensors file");
}

std::vector<Input> LoadTensorFile(const std::string& spec, const std::string& option) {
  const TensorFileSpec f = ParseTensorFileSpec(spec, option);
  std::vector<Input> out;
  if (f.safetensors) {
    for (auto& [n, arr] : ReadSafetensorsInputs(f.path, f.name.empty() ? std::vector<std::string>{} : std::vector<std::string>{f.name}))
      out.push_back(FromArray(n, arr));
  } else {
    const auto [n, arr] = ReadNpyInput(f.path);
    out.push_back(FromArray(n, arr));
  }
  return out;
}

NpyArray U8Array(std::vector<size_t> shape, std::vector<uint8_t> bytes) {
  NpyArray a;
  a.dtype = DType::kU8;
  a.shape = std::move(shape);
  a.data = std::move(bytes);
  return a;
}

NpyArray F32Array(std::vector<size_t> shape, const std::vector<float>& v) {
  NpyArray a;
  a.dtype = DType::kF32;
  a.shape = std::move(shape);
  a.data.resize(v.size() * 4);
  if (!v.empty()) std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}

}  // namespace qmx::cli
