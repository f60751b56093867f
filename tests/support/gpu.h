// gpu.h: whether the [gpu] tests have a device (without one they say why and check only what needs none), and
// host vectors copied to device memory and back.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "qmx/gpu.h"

namespace qmx::test {

inline bool GpuPresent() {
  const gpu::DeviceInfo& d = gpu::Device();
  if (!d.available) WARN("GPU test skipped: no CUDA device (" << d.reason << ")");
  return d.available;
}

// n elements of T in device memory (one spare byte, so that an empty one still allocates), or a host vector's
// copy; Host(n) copies the first n back.
template <typename T>
struct DeviceArray {
  gpu::DeviceMemory mem;
  explicit DeviceArray(size_t n) : mem(n * sizeof(T) + 1) {}
  explicit DeviceArray(const std::vector<T>& v) : mem(v.size() * sizeof(T) + 1) {
    if (!v.empty()) mem.Upload(v.data(), v.size() * sizeof(T));
  }
  T* get() const { return static_cast<T*>(mem.get()); }
  std::vector<T> Host(size_t n) const {
    std::vector<T> v(n);
    if (n > 0) mem.Download(v.data(), n * sizeof(T));
    return v;
  }
};

}  // namespace qmx::test
