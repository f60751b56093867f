// qmx/io.h: reading and writing NumPy .npy arrays, plus the atomic-write helper
// shared by every qmx-sim output writer (npy, CSV, JSON).
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

#include "qmx/error.h"

namespace qmx {

// Element types qmx-sim exchanges with NumPy. All are little-endian on disk.
//
// .npy descr mapping (read / written):
//   kF32  '<f4'          kF64 '<f8'          kF16 '<f2'
//   kU8   '|u1' ('<u1' also read)            kU16 '<u2'
//   kBF16 '|V2' ('<V2' and 'bfloat16' also read)
// NumPy has no native bfloat16 descr: ml_dtypes-style bf16 arrays are stored
// as raw 2-byte bit patterns (void dtype 'V2'). Reading such a file in Python
// gives dtype 'V2'; view it with `.view(ml_dtypes.bfloat16)` or `.view('<u2')`.
enum class DType { kF32, kF64, kF16, kBF16, kU8, kU16 };

// Short name: "f32", "f64", "f16", "bf16", "u8", "u16".
const char* DTypeName(DType dtype);
// Bytes per element.
size_t DTypeSize(DType dtype);

struct NpyArray {
  DType dtype = DType::kF32;
  std::vector<size_t> shape;  // C order; empty shape = scalar (1 element)
  std::vector<uint8_t> data;  // raw little-endian element bytes, count()*DTypeSize(dtype)
  size_t count() const;       // product of shape (1 for scalar); no overflow check
};

// Reads a .npy file (format versions 1.0, 2.0, 3.0). Throws IoError naming the
// file and the problem (unsupported dtype, fortran order, truncation, ...).
NpyArray ReadNpy(const std::string& path);

// Writes a .npy file byte-identical to what numpy.save produces for the same
// array (version 1.0, or 2.0 when the header needs it). Atomic: see
// WriteFileAtomic. Throws IoError, e.g. when data.size() does not match shape.
void WriteNpy(const std::string& path, const NpyArray& array);

// The core of ReadNpy, on an in-memory file image. name_for_errors prefixes
// every error message. Never reads out of bounds, whatever the input.
NpyArray ParseNpy(const std::vector<uint8_t>& bytes, const std::string& name_for_errors);

// The core of WriteNpy: the complete file image.
std::vector<uint8_t> SerializeNpy(const NpyArray& array);

// Writes to path + ".tmp.<pid>" in the same directory, fsyncs and closes it,
// then std::rename()s it onto path, so readers see either the old or the new
// file, never a partial one. On any failure removes the temp file and throws
// IoError. Concurrent writers to the same path within one process race on the
// temp name and are not supported.
void WriteFileAtomic(const std::string& path, const std::string& contents);
// The same for a byte buffer.
void WriteBytesAtomic(const std::string& path, const uint8_t* data, size_t size);
// The directory `dir` and its missing parents (an output given as DIR/); IoError when a component is a
// file or cannot be created.
void CreateOutputDir(const std::string& dir);

// Opens `path` for reading when it is a regular file: a FIFO is not waited on and a device or a directory
// is refused (IoError naming the path). The caller fcloses the result.
std::FILE* OpenRegularFile(const std::string& path);

// The memory ceiling: QMX_MAX_MEMORY (bytes, or with a K/M/G/T binary suffix) when set, else 80% of
// physical memory. CheckMemoryCeiling throws qmx::Error naming `what` when `bytes` exceeds it; readers and
// commands call it with a declared or requested size before allocating.
uint64_t MemoryCeiling();
void CheckMemoryCeiling(uint64_t bytes, const std::string& what);
// "4096", "512M", "8G", "1T" (binary units) as bytes; qmx::Error otherwise.
uint64_t ParseByteSize(const std::string& text);

}  // namespace qmx
