// hex.h: helpers that make a failing test print its input, result and expectation in hex.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace qmx::test {

// IEEE binary16 as the compiler converts to it (round to nearest even): the FP16 oracle of the tests.
#if defined(__aarch64__) || defined(__arm__)
using Half = __fp16;
#else
using Half = _Float16;
#endif

inline std::string Hex(uint64_t v, int digits = 2) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llX", digits, static_cast<unsigned long long>(v));
  return buf;
}
inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// "input 0x3F800000 (1) -> got 0x38 want 0x38" for INFO() lines.
inline std::string Case(float x, uint64_t got, uint64_t want) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "input 0x%08X (%.9g) -> got %s want %s", FloatBits(x), x, Hex(got).c_str(),
                Hex(want).c_str());
  return buf;
}

}  // namespace qmx::test
