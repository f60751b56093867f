// qmx/safetensors.h: reading and writing .safetensors files (the Hugging Face format: an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range, then
// the tensor bytes), so studies run on real checkpoints and our outputs load without qmx-sim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qmx/io.h"

namespace qmx {

// One entry of a safetensors header. Every dtype the format names is listed; only those qmx-sim
// exchanges (F32 F64 F16 BF16 U8 U16) can be read as arrays.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;          // as spelled in the file: "F32", "BF16", "F8_E4M3", ...
  bool supported = false;     // dtype maps to a qmx::DType
  DType qmx_dtype = DType::kU8;
  std::vector<size_t> shape;
  uint64_t begin = 0, end = 0;  // byte range relative to the start of the data section
};

struct SafetensorsIndex {
  std::vector<SafetensorsTensor> tensors;  // in the order of their data (ascending begin)
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" string map
  uint64_t data_start = 0;                      // 8 + header length
  const SafetensorsTensor* Find(const std::string& name) const;  // nullptr when absent
};

// Parses and validates a header the way the reference implementation does: the length fits the
// file and is at most 100 MB, the header is a JSON object, each entry has a known dtype, a shape and
// data_offsets whose size is product(shape) * itemsize, the ranges tile the data section from 0 to
// its end without gaps or overlaps, names are unique. `file_size` is the whole file's size. Throws
// IoError naming `name_for_errors` and the problem. Never reads outside `header`.
SafetensorsIndex ParseSafetensorsHeader(const uint8_t* header, size_t header_size, uint64_t file_size,
                                        const std::string& name_for_errors);
// The same on a whole file image (what the fuzzer drives).
SafetensorsIndex ParseSafetensors(const std::vector<uint8_t>& bytes, const std::string& name_for_errors);

// A file opened for reading tensors one at a time (checkpoints can be larger than memory wants).
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);  // reads and validates the header
  const SafetensorsIndex& index() const { return index_; }
  const std::string& path() const { return path_; }
  // The tensor's bytes as an array; throws IoError for an unknown name (listing a few valid ones) or
  // a dtype qmx-sim cannot read.
  NpyArray Read(const std::string& name) const;

 private:
  std::string path_;
  SafetensorsIndex index_;
};

// Builds a file image: tensors in the given order, header padded with spaces to a multiple of 8.
// Names must be unique and not "__metadata__".
std::vector<uint8_t> SerializeSafetensors(const std::vector<std::pair<std::string, NpyArray>>& tensors,
                                          const std::map<std::string, std::string>& metadata = {});
// Writes atomically (WriteFileAtomic's rules).
void WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, NpyArray>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The safetensors dtype string of a qmx::DType ("F32", "BF16", ...).
const char* SafetensorsDtypeName(DType dtype);

}  // namespace qmx
