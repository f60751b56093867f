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

#include "qmx/format.h"
#include "qmx/io.h"

namespace qmx {

// One entry of a safetensors header. Every dtype the format names is listed (huggingface/safetensors
// 0.6+: the F8_*, F6_* and F4 dtypes of OCP MX v1.0, shapes counting logical elements). Readable:
//   value dtypes F32 F64 F16 BF16 U8 U16, as arrays of that dtype;
//   code dtypes F8_E4M3 F8_E5M2 F8_E4M3FNUZ F8_E5M2FNUZ F8_E8M0 F6_E2M3 F6_E3M2 F4 I8, as U8 arrays of one
//   code per element (the element format's code: e4m3, e5m2, e4m3fnuz, e5m2fnuz, ue8m0, e2m3, e3m2, e2m1,
//   int8 in two's complement).
// The sub-byte packings: F4 two per byte, element 2i in the low nibble (PyTorch's float4_e2m1fn_x2, which
// the safetensors Python binding writes as F4 with the logical shape); F6 is not defined by the format
// (nor by PyTorch or DLPack): qmx-sim reads and writes it as PackCodes' little-endian bit stream, four
// codes in three bytes. The wide integer dtypes are recognised, not read.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;          // as spelled in the file: "F32", "BF16", "F8_E4M3", ...
  bool supported = false;     // readable: a value dtype or a code dtype
  DType qmx_dtype = DType::kU8;  // what Read returns (kU8 for code dtypes)
  bool codes = false;         // a code dtype: Read gives codes of `format`
  Format format = fmt::kE4M3; // the element format of a code dtype
  int bits = 8;               // bits per element in the file
  std::vector<size_t> shape;
  uint64_t begin = 0, end = 0;  // byte range relative to the start of the data section
  uint32_t file = 0;            // which file of a multi-file reader holds it (SafetensorsReader::files())
  size_t count() const;         // product of shape (1 for a scalar)
};

// The code dtype that stores codes of `f` natively ("F8_E4M3" for e4m3, "F4" for e2m1, "F8_E8M0" for
// ue8m0, "I8" for int8, ...), or nullptr when the format has none (user formats: U8).
const char* SafetensorsCodeDtype(const Format& f);

struct SafetensorsIndex {
  std::vector<SafetensorsTensor> tensors;  // in the order of their data (ascending begin)
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" string map
  uint64_t data_start = 0;                      // 8 + header length
  // Indices of `tensors` in name order, filled by the parser so that Find is a binary search (a header of
  // 100 k names looked up once per name must not take n^2 string compares); an index built by hand may
  // leave it empty, and Find then scans.
  std::vector<uint32_t> by_name;
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
//
// A sharded checkpoint reads as one: `path` may be a directory (every *.safetensors in it, in name order) or
// a model.safetensors.index.json (the files its weight_map names; every tensor it maps must be in its file).
// The index is then the union of the files' tensors (a name in two files, or a metadata key with two
// values, is an IoError naming both files); each tensor's `file` says where it is read from.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);  // reads and validates the header(s)
  const SafetensorsIndex& index() const { return index_; }
  const std::string& path() const { return path_; }
  const std::vector<std::string>& files() const { return files_; }  // the file paths (one for a plain file)
  // Whether `path` names a sharded checkpoint (a directory or a *.index.json) rather than one file.
  static bool IsSharded(const std::string& path);
  // The tensor as an array (code dtypes: U8, one code per element, unpacked); throws IoError for an
  // unknown name (listing a few valid ones) or a dtype qmx-sim cannot read.
  NpyArray Read(const std::string& name) const;
  // The tensor as values: F32, F16 and BF16 as stored; code dtypes decoded exactly to F32 (I8 as
  // integers); IoError for other dtypes.
  NpyArray ReadValues(const std::string& name) const;
  const SafetensorsTensor& Get(const std::string& name) const;  // IoError for an unknown name

 private:
  std::string path_;
  SafetensorsIndex index_;
  std::vector<std::string> files_;
  std::vector<uint64_t> data_starts_;  // per file
};

// One tensor to write: `dtype` empty writes the array's own dtype; a code dtype ("F8_E4M3", "F4", ...)
// takes a U8 array of one code per element and packs F4/F6 (IoError when a code does not fit the dtype's
// bits or the count is not whole bytes: F4 needs an even count, F6 a multiple of 4).
struct SafetensorsEntry {
  std::string name;
  NpyArray array;
  std::string dtype;
};
// Builds a file image (Typed: each entry with its dtype): tensors in the given order, header padded with spaces to a multiple of 8.
// Names must be unique and not "__metadata__".
std::vector<uint8_t> SerializeSafetensorsTyped(const std::vector<SafetensorsEntry>& tensors,
                                          const std::map<std::string, std::string>& metadata = {});
std::vector<uint8_t> SerializeSafetensors(const std::vector<std::pair<std::string, NpyArray>>& tensors,
                                          const std::map<std::string, std::string>& metadata = {});
// Writes atomically (WriteFileAtomic's rules).
void WriteSafetensorsTyped(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
void WriteSafetensors(const std::string& path, const std::vector<std::pair<std::string, NpyArray>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The safetensors dtype string of a qmx::DType ("F32", "BF16", ...).
const char* SafetensorsDtypeName(DType dtype);

}  // namespace qmx
