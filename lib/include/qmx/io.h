// qmx/io.h: reading and writing NumPy .npy arrays, plus the atomic-write helper
// shared by every qmx-sim output writer (npy, CSV, JSON).
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <memory>
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

// Writes `contents` to `path` so that readers see either the old or the new file, never a partial one: the
// bytes go to a temporary "<path>.tmp.<pid>.<12 hex digits>" created exclusively (O_EXCL | O_NOFOLLOW) in the
// same directory, which is fsynced, closed and std::rename()d onto path. On any failure the temporary is
// removed and IoError thrown; a signal whose default action ends the process removes it too, and temporaries
// of processes that no longer run (a SIGKILL) are removed before the first write into their directory. A
// character device or a FIFO at `path` (/dev/null, /dev/stdout, a shell's <(...)) is written through, without
// a temporary; a directory, a block device or a socket is refused.
void WriteFileAtomic(const std::string& path, const std::string& contents);
// The same for a byte buffer.
void WriteBytesAtomic(const std::string& path, const uint8_t* data, size_t size);

// A multi-file output written all or nothing: Add writes each file's temporary at once (as WriteFileAtomic
// does, so memory holds one file at a time), Commit renames them all into place, and a set destroyed without
// Commit (an error in a later file, an exception) removes every temporary, leaving the old files as they
// were. A character device or FIFO member is kept in memory and written through after the renames; a path
// added twice is refused.
class AtomicFileSet {
 public:
  AtomicFileSet();
  ~AtomicFileSet();
  AtomicFileSet(const AtomicFileSet&) = delete;
  AtomicFileSet& operator=(const AtomicFileSet&) = delete;
  void Add(const std::string& path, const uint8_t* data, size_t size);
  void Add(const std::string& path, const std::string& contents);
  void Commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A tensor's name as a file name, reversibly: bytes outside [A-Za-z0-9_.-] and a leading '.' become %XX
// (upper-case hex), so "model.layers.0.w" stays as it is, "../x" becomes "%2E.%2Fx" and "../../x" "%2E.%2F..%2Fx" and "a/b" "a%2Fb"; no
// name can reach another directory, a hidden file, "." or "..". An empty name throws IoError.
std::string TensorFileName(const std::string& tensor_name);
// The inverse (IoError for a string TensorFileName never makes).
std::string TensorNameOfFile(const std::string& file_name);

// The directory `dir` and its missing parents (an output given as DIR/); IoError when a component is a
// file or cannot be created.
void CreateOutputDir(const std::string& dir);

// Opens `path` for reading when it is a regular file: a FIFO is not waited on and a device or a directory
// is refused (IoError naming the path). The caller fcloses the result.
std::FILE* OpenRegularFile(const std::string& path);
// The whole of a regular file (OpenRegularFile), its size times `copies` (what the caller will hold at once)
// checked against the memory ceiling first. IoError naming the path otherwise.
std::vector<uint8_t> ReadRegularFile(const std::string& path, uint64_t copies = 1);

// The memory ceiling: QMX_MAX_MEMORY (bytes, or with a K/M/G/T binary suffix) when set, else 80% of
// physical memory. CheckMemoryCeiling throws qmx::Error naming `what` when `bytes` exceeds it; readers and
// commands call it with a declared or requested size before allocating.
uint64_t MemoryCeiling();
void CheckMemoryCeiling(uint64_t bytes, const std::string& what);
// "4096", "512M", "8G", "1T" (binary units) as bytes; qmx::Error otherwise.
uint64_t ParseByteSize(const std::string& text);

}  // namespace qmx
