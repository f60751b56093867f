// qmx/rng.h: counter-based Philox4x32-10 (Salmon et al., SC'11, "Parallel random numbers: as easy
// as 1, 2, 3"), so element i of a stream has the same random bits whatever the thread count, SIMD
// target or device. Header-only and host/device so the CUDA backend shares it.
#pragma once

#include <array>
#include <cstdint>

#include "qmx/host_device.h"  // QMX_HOST_DEVICE

namespace qmx {

using Philox4x32Counter = std::array<uint32_t, 4>;
using Philox4x32Key = std::array<uint32_t, 2>;

// Philox4x32 with 10 rounds: the multipliers and Weyl constants of Random123.
QMX_HOST_DEVICE inline Philox4x32Counter Philox4x32_10(Philox4x32Counter ctr, Philox4x32Key key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

// The stream qmx-sim uses for stochastic rounding: element i takes 32-bit word (i % 4) of
// Philox4x32_10(counter = {i / 4 (low, high 32 bits), 0, 0}, key = {seed low, seed high}); an element
// that needs N < 32 random bits uses the low N bits of its word. Any thread can compute any element.
// RandomWordsForBlock(seed, b) gives the words of elements 4b .. 4b + 3 at once.
QMX_HOST_DEVICE inline Philox4x32Counter RandomWordsForBlock(uint64_t seed, uint64_t block) {
  return Philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}
QMX_HOST_DEVICE inline uint32_t RandomBitsForElement(uint64_t seed, uint64_t index) {
  return RandomWordsForBlock(seed, index >> 2)[index & 3];
}

}  // namespace qmx
