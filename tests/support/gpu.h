// gpu.h: whether the [gpu] tests have a device; without one they say why and check only what needs none.
#pragma once

#include <catch2/catch.hpp>

#include "qmx/gpu.h"

namespace qmx::test {

inline bool GpuPresent() {
  const gpu::DeviceInfo& d = gpu::Device();
  if (!d.available) WARN("GPU test skipped: no CUDA device (" << d.reason << ")");
  return d.available;
}

}  // namespace qmx::test
