// libFuzzer target for the .safetensors parser (qmx::ParseSafetensors). Any input must either parse
// into an index whose byte ranges tile the data section inside the file, or throw qmx::IoError; never
// crash or read out of bounds (the build adds ASan and UBSan). A parsed file whose dtypes qmx-sim
// reads must survive SerializeSafetensorsTyped -> ParseSafetensors with the same names, dtypes, shapes and
// bytes (code dtypes unpacked to one code per byte and packed again: F4 and F6 repack exactly). Every name
// is found by the index, and its file name (TensorFileName, what `--out DIR/` writes) is one path component,
// not hidden, and decodes back to the name.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  qmx::SafetensorsIndex index;
  try {
    index = qmx::ParseSafetensors(bytes, "fuzz.safetensors");
  } catch (const qmx::IoError&) {
    return 0;
  }
  uint64_t next = 0;
  bool all_supported = true;
  std::vector<qmx::SafetensorsEntry> arrays;
  for (const qmx::SafetensorsTensor& t : index.tensors) {
    if (t.begin != next || t.end < t.begin || index.data_start + t.end > size) std::abort();
    next = t.end;
    if (index.Find(t.name) != &t) std::abort();
    if (!t.name.empty()) {
      const std::string file = qmx::TensorFileName(t.name);
      if (file.find('/') != std::string::npos || file[0] == '.' || file == ".." || qmx::TensorNameOfFile(file) != t.name)
        std::abort();
    }
    if (!t.supported) {
      all_supported = false;
      continue;
    }
    qmx::NpyArray a;
    a.dtype = t.qmx_dtype;
    a.shape = t.shape;
    a.data.assign(data + index.data_start + t.begin, data + index.data_start + t.end);
    if (t.bits < 8) a.data = qmx::UnpackCodes(a.data.data(), a.data.size(), t.count(), t.bits);
    if (a.data.size() != a.count() * qmx::DTypeSize(a.dtype)) std::abort();
    arrays.push_back({t.name, std::move(a), t.codes ? t.dtype : ""});
  }
  if (index.data_start + next != size) std::abort();
  if (!all_supported) return 0;
  // Serialization writes tensors in the given order; the parser reports them in data order, which
  // for our own files is the same.
  std::vector<uint8_t> image = qmx::SerializeSafetensorsTyped(arrays, index.metadata);
  qmx::SafetensorsIndex again = qmx::ParseSafetensors(image, "roundtrip.safetensors");
  if (again.tensors.size() != arrays.size() || again.metadata != index.metadata) std::abort();
  for (size_t i = 0; i < arrays.size(); ++i) {
    const qmx::SafetensorsTensor& t = again.tensors[i];
    const qmx::SafetensorsTensor& orig = index.tensors[i];
    if (t.name != arrays[i].name || t.shape != arrays[i].array.shape || t.dtype != orig.dtype) std::abort();
    if (t.end - t.begin != orig.end - orig.begin ||
        !std::equal(image.begin() + again.data_start + t.begin, image.begin() + again.data_start + t.end,
                    data + index.data_start + orig.begin))
      std::abort();
  }
  return 0;
}
