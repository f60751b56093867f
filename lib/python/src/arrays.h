// arrays.h: how the bindings take NumPy arrays in (in place, never a silent copy) and hand results out
// (arrays that own their memory, filled without an extra pass).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "qmx/io.h"

namespace qmx::py {

namespace pyb = pybind11;

// A C-contiguous array read in place: its element type for the library and its shape.
// Whether the byte ranges [a, a + a_bytes) and [b, b + b_bytes) share a byte.
inline bool MemoryOverlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes != 0 && b_bytes != 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

struct InArray {
  DType dtype = DType::kF32;
  const void* data = nullptr;
  size_t count = 0;
  std::vector<size_t> shape;
};

// Whether a dtype name (str(dtype)) is a 2-byte type: float16, bfloat16 (ml_dtypes), uint16, int16, |V2.
// Dtypes are told apart by name or by dtype::is, never by pybind11's itemsize() or kind(): pybind11 2.10 reads
// those from NumPy 1's struct layout, which NumPy 2 changed (a GPU machine's pip NumPy is 2.x).
bool IsTwoByteDtype(const std::string& name);

// Reads `a` in place. `src` names how to read 2-byte elements ("bf16" or "fp16"; "" takes float16 as
// fp16 and refuses uint16) and may confirm the others ("fp32"). Raises TypeError for a non-contiguous
// array or a dtype the caller does not take; `what` names the argument in the message.
InArray FloatInput(const pyb::array& a, const std::string& src, const char* what);
// uint8 codes, read in place (TypeError otherwise).
InArray CodesInput(const pyb::array& a, const char* what);
// float32, read in place (TypeError otherwise).
InArray F32Input(const pyb::array& a, const char* what);

// A new C-contiguous array of the given shape whose memory the caller fills.
template <typename T>
pyb::array_t<T> NewArray(const std::vector<size_t>& shape) {
  std::vector<pyb::ssize_t> s(shape.begin(), shape.end());
  return pyb::array_t<T>(s);
}

// A vector's memory handed to NumPy without a copy: the array owns it through a capsule.
template <typename T>
pyb::array_t<T> ToArray(std::vector<T>&& v, const std::vector<size_t>& shape) {
  auto* heap = new std::vector<T>(std::move(v));
  pyb::capsule owner(heap, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  std::vector<pyb::ssize_t> s(shape.begin(), shape.end());
  return pyb::array_t<T>(s, heap->data(), owner);
}

// rows x cols of a shape: the last dimension is cols, the others fold into rows (TensorView's rule).
void RowsCols(const std::vector<size_t>& shape, size_t& rows, size_t& cols);

}  // namespace qmx::py
