// float_bits.h: an FP32 value's bit pattern and back, for the library's sources.
#pragma once

#include <cstdint>
#include <cstring>

namespace qmx::detail {

inline uint32_t F32Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline float F32FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

}  // namespace qmx::detail
