// libFuzzer target for the .safetensors parser (qmx::ParseSafetensors). Any input must either parse
// into an index whose byte ranges tile the data section inside the file, or throw qmx::IoError; never
// crash or read out of bounds (the build adds ASan and UBSan). A parsed file whose dtypes qmx-sim
// reads must survive SerializeSafetensors -> ParseSafetensors with the same names, shapes and bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

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
  std::vector<std::pair<std::string, qmx::NpyArray>> arrays;
  for (const qmx::SafetensorsTensor& t : index.tensors) {
    if (t.begin != next || t.end < t.begin || index.data_start + t.end > size) std::abort();
    next = t.end;
    if (index.Find(t.name) != &t) std::abort();
    if (!t.supported) {
      all_supported = false;
      continue;
    }
    qmx::NpyArray a;
    a.dtype = t.qmx_dtype;
    a.shape = t.shape;
    a.data.assign(data + index.data_start + t.begin, data + index.data_start + t.end);
    if (a.data.size() != a.count() * qmx::DTypeSize(a.dtype)) std::abort();
    arrays.emplace_back(t.name, std::move(a));
  }
  if (index.data_start + next != size) std::abort();
  if (!all_supported) return 0;
  // Serialization writes tensors in the given order; the parser reports them in data order, which
  // for our own files is the same.
  std::vector<uint8_t> image = qmx::SerializeSafetensors(arrays, index.metadata);
  qmx::SafetensorsIndex again = qmx::ParseSafetensors(image, "roundtrip.safetensors");
  if (again.tensors.size() != arrays.size() || again.metadata != index.metadata) std::abort();
  for (size_t i = 0; i < arrays.size(); ++i) {
    const qmx::SafetensorsTensor& t = again.tensors[i];
    if (t.name != arrays[i].first || t.shape != arrays[i].second.shape || t.qmx_dtype != arrays[i].second.dtype)
      std::abort();
    if (!std::equal(image.begin() + again.data_start + t.begin, image.begin() + again.data_start + t.end,
                    arrays[i].second.data.begin()))
      std::abort();
  }
  return 0;
}
