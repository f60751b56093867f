// test_nan_payload.cc: CastOptions::nan_payload, the NaN code of an IEEE-style destination: "default" (the
// library's: every mantissa bit in 8 bits or fewer, the quiet bit alone wider), "quiet" (RISC-V's canonical
// NaN with nan-sign positive) and "all-ones" (CUDA's 0x7FFF for fp16 and bf16). The expected codes are built
// here from the formats' fields; every NaN input of FP32, FP16 and BF16 (each payload, quiet and signalling,
// both signs) goes through the reference routine and, for the 8-bit destination, the SIMD path; every other
// FP16 input keeps its code under every payload; the option is refused where a format has one NaN code.
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/round.h"
#include "support/hex.h"

using namespace qmx;

namespace {

// The NaN code of an IEEE-style format from its fields: sign, an all-ones exponent, and the mantissa field.
uint64_t ExpectedNan(const Format& f, bool negative, NanPayload p) {
  const uint64_t man_all = (uint64_t{1} << f.man_bits) - 1, quiet = uint64_t{1} << (f.man_bits - 1);
  uint64_t man = p == NanPayload::kQuiet ? quiet : p == NanPayload::kAllOnes ? man_all : (f.Bits() <= 8 ? man_all : quiet);
  const uint64_t exp_ones = ((uint64_t{1} << f.exp_bits) - 1) << f.man_bits;
  return (negative ? uint64_t{1} << (f.Bits() - 1) : 0) | exp_ones | man;
}

// Every NaN bit pattern of a 16-bit source, and a spread of FP32 ones (every payload bit alone, all ones,
// quiet and signalling), both signs.
std::vector<uint64_t> NanInputs(const Format& src) {
  std::vector<uint64_t> xs;
  const uint64_t exp_ones = ((uint64_t{1} << src.exp_bits) - 1) << src.man_bits, man_all = (uint64_t{1} << src.man_bits) - 1;
  const uint64_t sign = uint64_t{1} << (src.Bits() - 1);
  if (src.Bits() == 16) {
    for (uint64_t m = 1; m <= man_all; ++m) xs.push_back(exp_ones | m);
  } else {
    for (int b = 0; b < src.man_bits; ++b) xs.push_back(exp_ones | (uint64_t{1} << b));
    xs.push_back(exp_ones | man_all);
    xs.push_back(exp_ones | (man_all >> 1));  // signalling, every payload bit
  }
  const size_t n = xs.size();
  for (size_t i = 0; i < n; ++i) xs.push_back(xs[i] | sign);
  return xs;
}

}  // namespace

TEST_CASE("round: NaN payload options give the NaN code built from the format's fields", "[round][nan]") {
  const Format e4m3_ieee = ParseFormat("e4m3:special=ieee");  // FPnew's FP8ALT: bias 7, Inf, max 240
  REQUIRE(e4m3_ieee.encoding == Encoding::kIeee);
  for (const Format& dst : {fmt::kE5M2, e4m3_ieee, fmt::kFP16, fmt::kBF16}) {
    for (const Format& src : {fmt::kFP32, fmt::kFP16, fmt::kBF16}) {
      for (NanPayload p : {NanPayload::kDefault, NanPayload::kQuiet, NanPayload::kAllOnes}) {
        for (NanSign sign : {NanSign::kKeep, NanSign::kPositive}) {
          CastOptions o;
          o.nan_payload = p;
          o.nan_sign = sign;
          size_t bad = 0, n = 0;
          for (uint64_t x : NanInputs(src)) {
            const bool negative = (x >> (src.Bits() - 1)) & 1;
            const bool signalling = !((x >> (src.man_bits - 1)) & 1);
            const uint64_t want = ExpectedNan(dst, negative && sign == NanSign::kKeep, p);
            const RoundResult r = Convert(src, x, dst, o);
            ++n;
            if ((r.code != want || r.flags != (signalling ? uint32_t{kFlagInvalid} : 0u)) && ++bad <= 3)
              UNSCOPED_INFO(src.name << " " << test::Hex(x, src.Bits() / 4) << " -> " << dst.name << " " << NanPayloadName(p)
                                     << ": " << test::Hex(r.code, 4) << " flags " << r.flags << ", want " << test::Hex(want, 4));
          }
          INFO(src.name << " -> " << dst.name << ", " << NanPayloadName(p) << ", " << NanSignName(sign) << ": " << n << " NaNs");
          CHECK(bad == 0);
        }
      }
    }
  }
  // The named targets: RISC-V's canonical E5M2 NaN, CUDA's FP16 and BF16 ones.
  CastOptions rv;
  rv.nan_payload = NanPayload::kQuiet;
  rv.nan_sign = NanSign::kPositive;
  CHECK(ConvertF32(-std::numeric_limits<float>::quiet_NaN(), fmt::kE5M2, rv) == 0x7E);
  CHECK(ConvertF32(std::numeric_limits<float>::quiet_NaN(), e4m3_ieee, rv) == 0x7C);
  CastOptions cuda;
  cuda.nan_payload = NanPayload::kAllOnes;
  cuda.nan_sign = NanSign::kPositive;
  CHECK(ConvertF32(std::numeric_limits<float>::quiet_NaN(), fmt::kFP16, cuda) == 0x7FFF);
  CHECK(ConvertF32(std::numeric_limits<float>::quiet_NaN(), fmt::kBF16, cuda) == 0x7FFF);
  CHECK(ConvertF32(std::numeric_limits<float>::quiet_NaN(), fmt::kE5M2, CastOptions{}) == 0x7F);  // the default stays
}

TEST_CASE("round: the SIMD path takes the NaN payload, and no other code moves", "[round][nan]") {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<uint8_t> plain(all.size());
  ConvertToCodes(DType::kF16, all.data(), all.size(), fmt::kE5M2, CastOptions{}, plain.data());
  for (NanPayload p : {NanPayload::kQuiet, NanPayload::kAllOnes}) {
    CastOptions o;
    o.nan_payload = p;
    std::vector<uint8_t> fast(all.size()), ref(all.size());
    ConvertToCodes(DType::kF16, all.data(), all.size(), fmt::kE5M2, o, fast.data());
    ConvertToCodesRef(DType::kF16, all.data(), all.size(), fmt::kE5M2, o, ref.data());
    size_t differ = 0, moved = 0, nans = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      differ += fast[i] != ref[i];
      const bool nan = (all[i] & 0x7C00) == 0x7C00 && (all[i] & 0x3FF) != 0;
      nans += nan;
      if (nan) {
        const uint8_t want = static_cast<uint8_t>(ExpectedNan(fmt::kE5M2, all[i] >> 15, p));
        moved += fast[i] != want;
      } else {
        moved += fast[i] != plain[i];
      }
    }
    INFO(NanPayloadName(p) << ": " << nans << " NaN inputs");
    CHECK(nans == 2046);
    CHECK(differ == 0);
    CHECK(moved == 0);
  }
}

TEST_CASE("round: a NaN payload is refused for formats with one NaN code, and parsed by name", "[round][nan]") {
  CastOptions o;
  o.nan_payload = NanPayload::kQuiet;
  for (const Format& f : {fmt::kE4M3, fmt::kE2M1, fmt::kUE8M0, fmt::kE4M3Fnuz}) {
    INFO(f.name);
    CHECK_THROWS_WITH(Convert(fmt::kFP32, 0x7FC00000, f, o), Catch::Matchers::Contains("applies only to IEEE-style formats"));
  }
  CHECK(ParseNanPayload("all-ones") == NanPayload::kAllOnes);
  CHECK(std::string(NanPayloadName(NanPayload::kQuiet)) == "quiet");
  CHECK_THROWS_WITH(ParseNanPayload("canonical"), Catch::Matchers::Contains("default, quiet or all-ones"));
}
