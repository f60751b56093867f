// test_rng.cc: Philox4x32-10 against the Random123 known-answer vectors, and the element stream.
#include <catch2/catch.hpp>
#include <vector>

#include "qmx/rng.h"

using qmx::Philox4x32_10;

TEST_CASE("rng: Philox4x32-10 matches the Random123 known-answer vectors", "[rng]") {
  using C = qmx::Philox4x32Counter;
  CHECK(Philox4x32_10({0, 0, 0, 0}, {0, 0}) == C{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(Philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        C{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(Philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        C{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("rng: Element stream: word i%4 of the block i/4, any order of evaluation", "[rng]") {
  const uint64_t seed = 0x123456789ABCDEFull;
  for (uint64_t i : {0ull, 1ull, 2ull, 3ull, 4ull, 1000001ull, (1ull << 34) + 7}) {
    const uint64_t block = i / 4;
    const auto words = Philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0},
                                     {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    CHECK(qmx::RandomBitsForElement(seed, i) == words[i % 4]);
    CHECK(qmx::RandomWordsForBlock(seed, block) == words);
  }
  // Reverse order gives the same values as forward order (no hidden state).
  std::vector<uint32_t> fwd(64), rev(64);
  for (uint64_t i = 0; i < 64; ++i) fwd[i] = qmx::RandomBitsForElement(9, i);
  for (uint64_t i = 64; i-- > 0;) rev[i] = qmx::RandomBitsForElement(9, i);
  CHECK(fwd == rev);
  CHECK(qmx::RandomBitsForElement(9, 5) != qmx::RandomBitsForElement(10, 5));
}

TEST_CASE("rng: element stream bits are roughly uniform", "[rng]") {
  // Each of the 32 bit positions is set in about half of 2^16 draws (5 sigma = 640).
  int ones[32] = {};
  const int n = 1 << 16;
  for (int i = 0; i < n; ++i) {
    const uint32_t r = qmx::RandomBitsForElement(42, static_cast<uint64_t>(i));
    for (int b = 0; b < 32; ++b) ones[b] += (r >> b) & 1;
  }
  for (int b = 0; b < 32; ++b) {
    INFO("bit " << b);
    CHECK(std::abs(ones[b] - n / 2) < 640);
  }
}
