// io.cc: .safetensors files (qmx/safetensors.h) for Python, which NumPy cannot read or write: the index,
// tensors as arrays (BF16 as its uint16 bits, code dtypes as uint8 codes), writing arrays atomically (code
// dtypes from uint8 codes), and quantized checkpoints (qmx/checkpoint.h) found and decoded.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>

#include "arrays.h"
#include "bindings.h"
#include "qmx/checkpoint.h"
#include "qmx/error.h"
#include "qmx/io.h"
#include "qmx/safetensors.h"

namespace qmx::py {

namespace {

pyb::dtype NumpyDtype(DType t) {
  switch (t) {
    case DType::kF32: return pyb::dtype::of<float>();
    case DType::kF64: return pyb::dtype::of<double>();
    case DType::kF16: return pyb::dtype("float16");
    case DType::kBF16:
    case DType::kU16: return pyb::dtype::of<uint16_t>();
    case DType::kU8: return pyb::dtype::of<uint8_t>();
  }
  return pyb::dtype::of<uint8_t>();
}

// `as`: "BF16" for 2-byte arrays, or a code dtype (F8_E4M3, F4, ...) for uint8 codes, one per element.
DType DtypeOf(const pyb::array& a, const std::string& as) {
  if (!as.empty()) {
    if (as == "BF16" && IsTwoByteDtype(pyb::str(a.dtype()).cast<std::string>())) return DType::kBF16;
    if (as != "BF16" && a.dtype().is(pyb::dtype::of<uint8_t>())) return DType::kU8;  // the writer checks the name
    throw pyb::value_error("dtype override '" + as + "': BF16 applies to 2-byte arrays, code dtypes (F8_E4M3, F8_E5M2, "
                           "F8_E8M0, F6_E2M3, F6_E3M2, F4, I8) to uint8 codes");
  }
  const pyb::dtype d = a.dtype();
  if (d.is(pyb::dtype::of<float>())) return DType::kF32;
  if (d.is(pyb::dtype::of<double>())) return DType::kF64;
  if (d.is(pyb::dtype::of<uint8_t>())) return DType::kU8;
  if (d.is(pyb::dtype::of<uint16_t>())) return DType::kU16;
  const std::string name = pyb::str(pyb::handle(d)).cast<std::string>();
  if (name == "float16") return DType::kF16;
  if (name == "bfloat16") return DType::kBF16;
  throw pyb::type_error("safetensors: arrays of " + pyb::str(pyb::handle(d)).cast<std::string>() +
                        " are not written (F32, F64, F16, BF16, U8, U16)");
}

}  // namespace

void BindCheckpoint(pyb::module_& m);

void BindIo(pyb::module_& m) {
  BindCheckpoint(m);
  m.def("safetensors_index", [](const std::string& path) {
    const SafetensorsReader r(path);
    pyb::list tensors;
    for (const SafetensorsTensor& t : r.index().tensors) {
      pyb::dict d;
      d["name"] = t.name;
      d["dtype"] = t.dtype;
      d["shape"] = pyb::tuple(pyb::cast(t.shape));
      d["readable"] = t.supported;
      if (t.codes) d["format"] = std::string(t.format.name);
      tensors.append(d);
    }
    return pyb::make_tuple(tensors, r.index().metadata);
  }, pyb::arg("path"));
  m.def("safetensors_read", [](const std::string& path, const std::vector<std::string>& names) {
    const SafetensorsReader r(path);
    pyb::dict out;
    for (const std::string& name : names) {
      NpyArray a = r.Read(name);
      const pyb::dtype dt = NumpyDtype(a.dtype);
      auto* heap = new std::vector<uint8_t>(std::move(a.data));
      pyb::capsule owner(heap, [](void* p) { delete static_cast<std::vector<uint8_t>*>(p); });
      std::vector<pyb::ssize_t> shape(a.shape.begin(), a.shape.end());
      out[pyb::str(name)] = pyb::array(dt, shape, {}, heap->data(), owner);
    }
    return out;
  }, pyb::arg("path"), pyb::arg("names"));
  m.def("safetensors_write", [](const std::string& path, const std::vector<pyb::tuple>& items,
                                const std::map<std::string, std::string>& metadata) {
    std::vector<SafetensorsEntry> tensors;
    for (const pyb::tuple& it : items) {
      const std::string name = it[0].cast<std::string>();
      const pyb::array a = it[1].cast<pyb::array>();
      const std::string as = it[2].cast<std::string>();
      if (!(a.flags() & pyb::array::c_style)) throw pyb::type_error("tensor '" + name + "' must be C-contiguous");
      NpyArray n;
      n.dtype = DtypeOf(a, as);
      for (pyb::ssize_t i = 0; i < a.ndim(); ++i) n.shape.push_back(static_cast<size_t>(a.shape(i)));
      const auto* p = static_cast<const uint8_t*>(a.data());
      n.data.assign(p, p + a.nbytes());
      tensors.push_back({name, std::move(n), as == "BF16" ? "" : as});
    }
    pyb::gil_scoped_release nogil;
    WriteSafetensorsTyped(path, tensors, metadata);
  }, pyb::arg("path"), pyb::arg("items"), pyb::arg("metadata"));
}

// Quantized checkpoints (qmx/checkpoint.h): the tensors found, and each decoded to FP32 by its layout.
void BindCheckpoint(pyb::module_& m) {
  m.def("checkpoint_scan", [](const std::string& path) {
    const SafetensorsReader r(path);
    pyb::list out;
    for (const CheckpointTensorInfo& i : ScanCheckpoint(r)) {
      pyb::dict d;
      d["name"] = i.name;
      d["layout"] = CheckpointLayoutName(i.layout);
      d["parts"] = i.parts;
      out.append(d);
    }
    return out;
  }, pyb::arg("path"));
  m.def("checkpoint_decode", [](const std::string& path, const std::vector<std::string>& names) {
    const SafetensorsReader r(path);
    const std::vector<CheckpointTensorInfo> found = ScanCheckpoint(r);
    pyb::dict out;
    for (const std::string& name : names) {
      const CheckpointTensorInfo* info = FindCheckpointTensor(found, name);
      if (info == nullptr) throw pyb::key_error("'" + path + "' has no quantized tensor '" + name + "'");
      std::vector<float> v;
      std::vector<size_t> shape;
      {
        pyb::gil_scoped_release nogil;
        const CheckpointTensor t = LoadCheckpointTensor(r, *info);
        v = DecodeCheckpointTensor(t);
        shape = t.q.shape;
      }
      pyb::array_t<float> a(std::vector<pyb::ssize_t>(shape.begin(), shape.end()));
      if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * 4);
      out[pyb::str(name)] = a;
    }
    return out;
  }, pyb::arg("path"), pyb::arg("names"));
}

}  // namespace qmx::py
