// test_round.cc: the reference rounding routine on every midpoint +-1 ulp, every boundary, every
// special and every mode, against hand-derived expectations and the naive table oracle; stochastic
// rounding's N-bit carry rule on enumerated bit patterns and its expected value.
#include <catch2/catch.hpp>
#include <cfenv>
#include <cmath>
#include <cstring>
#include <vector>

#include "qmx/error.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "support/grid.h"
#include "support/hex.h"
#include "support/modes.h"
#include "support/naive_round.h"

using namespace qmx;
using qmx::test::Case;
using qmx::test::GridInputs;
using qmx::test::Hex;
using qmx::test::kAllModes;
using qmx::test::kAllSat;

namespace {

const char* kSmallFormats[] = {"e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8", "ue8m0", "binary8p3se", "binary8p4sf",
                               "e3m4", "e2m2:special=finite"};

CastOptions Opt(Rounding r, Saturation s = Saturation::kSatFinite) {
  CastOptions o;
  o.rounding = r;
  o.saturation = s;
  return o;
}
uint64_t Cvt(const Format& f, float x, Rounding r = Rounding::kRne, Saturation s = Saturation::kSatFinite) {
  return ConvertF32(x, f, Opt(r, s));
}
uint32_t Flags(const Format& f, float x, Rounding r = Rounding::kRne, Saturation s = Saturation::kSatFinite) {
  return Convert(fmt::kFP32, qmx::test::FloatBits(x), f, Opt(r, s)).flags;
}

}  // namespace

TEST_CASE("round: every midpoint +-1 ulp, every code, every mode: reference equals the naive oracle", "[round]") {
  const char* const name = GENERATE(from_range(std::begin(kSmallFormats), std::end(kSmallFormats)));
  CAPTURE(name);
  const Format f = ParseFormat(name);
  const qmx::test::NaiveRounder naive(f);
  const std::vector<float> inputs = GridInputs(f);
  for (Saturation s : kAllSat) {
    for (Rounding r : kAllModes) {
      CastOptions o = Opt(r, s);
      try {
        ValidateCastOptions(f, o);
      } catch (const qmx::Error&) {
        continue;
      }
      for (int variant = 0; variant < 2; ++variant) {
        o.nan_sign = variant ? NanSign::kPositive : NanSign::kKeep;
        o.nan_fallback = variant ? NanFallback::kZero : NanFallback::kMaxPositive;
        uint64_t idx = 0;
        for (float x : inputs) {
          const uint32_t rb = RandomBitsForElement(77, idx++);
          const uint64_t got = Convert(fmt::kFP32, qmx::test::FloatBits(x), f, o, rb).code;
          const uint64_t want = naive.Round(static_cast<double>(x), o, rb);
          if (got != want) {
            INFO(name << " " << RoundingName(r) << " " << SaturationName(s) << " " << Case(x, got, want));
            CHECK(got == want);
          }
        }
      }
    }
  }
}

TEST_CASE("round: Round to nearest: below a midpoint, at it (tie to the even code), above it", "[round]") {
  const char* const name = GENERATE(values<const char*>({"e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8", "ue8m0"}));
  CAPTURE(name);
  const Format f = ParseFormat(name);
  for (uint64_t c = f.MinPositiveCode(); c < f.MaxFiniteCode(); ++c) {
    const float a = DecodeToFloat(f, c), b = DecodeToFloat(f, c + 1);
    const float m = (a + b) / 2;
    INFO(name << " between " << Hex(c) << " and " << Hex(c + 1));
    CHECK(Cvt(f, std::nextafter(m, 0.0f)) == c);
    CHECK(Cvt(f, std::nextafter(m, HUGE_VALF)) == c + 1);
    CHECK(Cvt(f, m) == ((c & 1) ? c + 1 : c));
    CHECK(Cvt(f, m, Rounding::kRna) == c + 1);
    CHECK(Cvt(f, std::nextafter(b, 0.0f), Rounding::kRz) == c);
    CHECK(Cvt(f, std::nextafter(a, HUGE_VALF), Rounding::kRu) == c + 1);
  }
}

TEST_CASE("round: Boundaries: overflow thresholds, max, min subnormal / 2", "[round]") {
  const Format& e4 = fmt::kE4M3;
  const Format& e5 = fmt::kE5M2;
  // E4M3: 464 is the tie between 448 (0x7E, even) and the NaN pattern's 480; anything above overflows.
  CHECK(Cvt(e4, 464) == 0x7E);
  CHECK(Cvt(e4, 464, Rounding::kRne, Saturation::kNoSat) == 0x7E);
  CHECK(Cvt(e4, std::nextafter(464.0f, 1e9f), Rounding::kRne, Saturation::kNoSat) == 0x7F);
  CHECK(Cvt(e4, -std::nextafter(464.0f, 1e9f), Rounding::kRne, Saturation::kNoSat) == 0xFF);
  CHECK(Cvt(e4, std::nextafter(464.0f, 1e9f)) == 0x7E);
  CHECK(Cvt(e4, 1e6f, Rounding::kRz, Saturation::kNoSat) == 0x7E);  // toward zero never overflows to NaN
  CHECK(Cvt(e4, 1e6f, Rounding::kRu, Saturation::kNoSat) == 0x7F);
  CHECK(Cvt(e4, -1e6f, Rounding::kRu, Saturation::kNoSat) == 0xFE);
  CHECK(Cvt(e4, 0x1p-10f) == 0x00);                              // min subnormal / 2: tie to even zero
  CHECK(Cvt(e4, std::nextafter(0x1p-10f, 1.0f)) == 0x01);
  CHECK(Cvt(e4, -0x1p-10f) == 0x80);                             // sign kept
  CHECK(Cvt(e4, 0x1p-10f, Rounding::kRna) == 0x01);
  // E5M2: 61440 is the tie between 57344 (0x7B, odd) and 65536 (the Inf pattern, even): it overflows.
  CHECK(Cvt(e5, 61440, Rounding::kRne, Saturation::kNoSat) == 0x7C);
  CHECK(Cvt(e5, std::nextafter(61440.0f, 0.0f), Rounding::kRne, Saturation::kNoSat) == 0x7B);
  CHECK(Cvt(e5, 61440) == 0x7B);
  CHECK(Cvt(e5, 0x1p-17f) == 0x00);
  // FP6/FP4: clamp (OCP MX), ties to even.
  CHECK(Cvt(fmt::kE2M1, 5) == 0x6);   // 4 (0x6) and 6 (0x7): even
  CHECK(Cvt(fmt::kE2M1, 7) == 0x7);
  CHECK(Cvt(fmt::kE2M1, -100) == 0xF);
  CHECK(Cvt(fmt::kE2M1, 0.75f) == 0x2);
  CHECK(Cvt(fmt::kE2M1, 0.25f) == 0x0);
  CHECK(Cvt(fmt::kE2M3, 7.75f) == 0x1F);
  CHECK(Cvt(fmt::kE3M2, 30) == 0x1F);
  CHECK(Cvt(fmt::kE3M2, 0x1p-5f) == 0x00);
  // INT8: symmetric clamp to +-127/64; -2 (0x80) decodes but is never produced.
  CHECK(Cvt(fmt::kInt8, 2.0f) == 0x7F);
  CHECK(Cvt(fmt::kInt8, -2.0f) == 0x81);
  CHECK(Cvt(fmt::kInt8, 1.0f / 128) == 0x00);       // tie between 0 and 1/64: even
  CHECK(Cvt(fmt::kInt8, 3.0f / 128) == 0x02);       // tie between 1/64 and 2/64: even
  CHECK(Cvt(fmt::kInt8, -1.0f / 64) == 0xFF);
  // UE8M0: power-of-two scales; ties go to the even exponent field.
  CHECK(Cvt(fmt::kUE8M0, 1.5f) == 0x80);
  CHECK(Cvt(fmt::kUE8M0, 3.0f) == 0x80);            // 2 (0x80) and 4 (0x81): even
  CHECK(Cvt(fmt::kUE8M0, 1.5f, Rounding::kRz) == 0x7F);
  CHECK(Cvt(fmt::kUE8M0, 1.5f, Rounding::kRu) == 0x80);
  CHECK(Cvt(fmt::kUE8M0, 0.0f) == 0x00);            // no zero: the smallest scale
  CHECK(Cvt(fmt::kUE8M0, 0x1p-140f, Rounding::kRu) == 0x00);
  CHECK(Cvt(fmt::kUE8M0, 3e38f, Rounding::kRu, Saturation::kNoSat) == 0xFF);
  CHECK(Cvt(fmt::kUE8M0, 3e38f, Rounding::kRu) == 0xFE);
  CHECK(Cvt(fmt::kUE8M0, -1.0f) == 0xFF);           // negative into unsigned: NaN
}

TEST_CASE("round: directed and odd rounding on both signs", "[round]") {
  const Format& e4 = fmt::kE4M3;
  const float tie = 1.0f + 0x1p-4f;  // between 1 (0x38) and 1.125 (0x39)
  CHECK(Cvt(e4, tie, Rounding::kRne) == 0x38);
  CHECK(Cvt(e4, tie, Rounding::kRna) == 0x39);
  CHECK(Cvt(e4, tie, Rounding::kRz) == 0x38);
  CHECK(Cvt(e4, tie, Rounding::kRu) == 0x39);
  CHECK(Cvt(e4, tie, Rounding::kRd) == 0x38);
  CHECK(Cvt(e4, tie, Rounding::kRo) == 0x39);
  CHECK(Cvt(e4, -tie, Rounding::kRu) == 0xB8);
  CHECK(Cvt(e4, -tie, Rounding::kRd) == 0xB9);
  CHECK(Cvt(e4, 1.0f + 0x1p-5f, Rounding::kRo) == 0x39);
  CHECK(Cvt(e4, 1.125f + 0x1p-5f, Rounding::kRo) == 0x39);  // lower candidate already odd
  CHECK(Cvt(e4, 1.0f, Rounding::kRo) == 0x38);              // exact stays
}

TEST_CASE("round: specials under each saturation mode and NaN policy", "[round]") {
  const float nan = std::nanf(""), inf = HUGE_VALF;
  CastOptions o;
  CHECK(ConvertF32(-nan, fmt::kE4M3, o) == 0xFF);
  o.nan_sign = NanSign::kPositive;
  CHECK(ConvertF32(-nan, fmt::kE4M3, o) == 0x7F);
  CHECK(Cvt(fmt::kE4M3, inf) == 0x7E);
  CHECK(Cvt(fmt::kE4M3, -inf) == 0xFE);
  CHECK(Cvt(fmt::kE4M3, inf, Rounding::kRne, Saturation::kNoSat) == 0x7F);
  CHECK(Cvt(fmt::kE4M3, inf, Rounding::kRne, Saturation::kSatPropagate) == 0x7F);
  CHECK(Cvt(fmt::kE4M3, 1000, Rounding::kRne, Saturation::kSatPropagate) == 0x7E);
  CHECK(Cvt(fmt::kE5M2, inf, Rounding::kRne, Saturation::kNoSat) == 0x7C);
  CHECK(Cvt(fmt::kE5M2, -inf, Rounding::kRne, Saturation::kSatPropagate) == 0xFC);
  CHECK(Cvt(fmt::kE5M2, 1e6f, Rounding::kRne, Saturation::kSatPropagate) == 0x7B);
  CHECK(Cvt(fmt::kE5M2, -0.0f) == 0x80);
  CHECK(Cvt(fmt::kE2M1, nan) == 0x7);  // PTX/CUDA: NaN -> +max
  o = CastOptions{};
  o.nan_fallback = NanFallback::kZero;
  CHECK(ConvertF32(nan, fmt::kE2M1, o) == 0x0);
  CHECK(Cvt(fmt::kE2M1, -0.0f) == 0x8);
  const Format p3 = ParseFormat("binary8p3se");
  CHECK(Cvt(p3, -0.0f) == 0x00);  // P3109 has no -0
  CHECK(Cvt(p3, -1e-30f) == 0x00);
  CHECK(Cvt(p3, nan) == 0x80);
  CHECK(Cvt(p3, inf, Rounding::kRne, Saturation::kNoSat) == 0x7F);
  CHECK(Cvt(p3, -inf, Rounding::kRne, Saturation::kNoSat) == 0xFF);
  CHECK(Cvt(p3, inf) == 0x7E);
  CHECK_THROWS_AS(Cvt(fmt::kE2M1, 1.0f, Rounding::kRne, Saturation::kNoSat), qmx::Error);
  CHECK_THROWS_WITH(Cvt(fmt::kE3M2, 1.0f, Rounding::kRne, Saturation::kSatPropagate), Catch::Contains("satfinite"));
}

TEST_CASE("round: flags", "[round]") {
  CHECK(Flags(fmt::kE4M3, 1.0f) == 0);
  CHECK(Flags(fmt::kE4M3, 464) == kFlagInexact);
  CHECK(Flags(fmt::kE4M3, 1000) == (kFlagInexact | kFlagOverflow | kFlagSaturated));
  CHECK(Flags(fmt::kE4M3, 1000, Rounding::kRne, Saturation::kNoSat) == (kFlagInexact | kFlagOverflow));
  CHECK(Flags(fmt::kE4M3, 0x1p-12f) == (kFlagInexact | kFlagUnderflow));
  CHECK(Flags(fmt::kE4M3, 0x1p-8f) == 0);  // exact subnormal: no underflow
  CHECK(Flags(fmt::kE4M3, HUGE_VALF) == kFlagSaturated);
  CHECK(Flags(fmt::kE2M1, std::nanf("")) == kFlagInvalid);
  CHECK(Flags(fmt::kUE8M0, -2.0f) == kFlagInvalid);
}

// Whether the CPU raises invalid converting the FP32 bits `u` to double (IEEE 754-2019 7.2(a): a signaling
// NaN operand): the hardware as an independent classifier of signaling NaNs.
bool HardwareSignals(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  std::feclearexcept(FE_ALL_EXCEPT);
  volatile float vf = f;
  volatile double d = vf;
  (void)d;
  return std::fetestexcept(FE_INVALID) != 0;
}

TEST_CASE("round: signaling NaNs signal invalid in every conversion, quiet NaNs do not (IEEE 754-2019 7.2(a))",
          "[round]") {
  // TestFloat 3e's f32_to_f16 case: FF8000FD -> FE00 with the invalid flag.
  const RoundResult t = Convert(fmt::kFP32, 0xFF8000FDu, fmt::kFP16, CastOptions{});
  CHECK(t.code == 0xFE00);
  CHECK(t.flags == kFlagInvalid);
  const Format dsts[] = {fmt::kFP16, fmt::kBF16, fmt::kFP32, fmt::kFP64, fmt::kE4M3, fmt::kE5M2, fmt::kE2M1};
  auto check = [&](const Format& src, uint64_t bits, bool signaling) {
    for (const Format& dst : dsts) {
      const RoundResult r = Convert(src, bits, dst, CastOptions{});
      INFO(src.name << " " << Hex(bits, src.Bits() / 4) << " -> " << dst.name << " flags " << Hex(r.flags, 2));
      // A format without NaN gets the fallback and invalid for any NaN.
      CHECK(((r.flags & kFlagInvalid) != 0) == (signaling || !dst.HasNan()));
      if (dst.HasNan()) CHECK(ClassifyCode(dst, r.code) == CodeClass::kNan);
    }
  };
  // FP32: every NaN payload of a sampled set of high bits, classified by the CPU.
  for (uint32_t p = 1; p < (1u << 23); p = p * 3 + 1)
    for (uint32_t sign : {0u, 0x80000000u}) {
      const uint32_t u = sign | 0x7F800000u | p;
      check(fmt::kFP32, u, HardwareSignals(u));
    }
  // bf16: every NaN code; its FP32 extension (bits << 16) is the same NaN, classified by the CPU.
  for (uint32_t c = 0; c < 0x10000; ++c)
    if (ClassifyCode(fmt::kBF16, c) == CodeClass::kNan) check(fmt::kBF16, c, HardwareSignals(c << 16));
  // fp16: every NaN code; the quiet bit is the significand's top bit (bit 9).
  for (uint32_t c = 0; c < 0x10000; ++c)
    if (ClassifyCode(fmt::kFP16, c) == CodeClass::kNan) check(fmt::kFP16, c, (c & 0x200) == 0);
  // fp64: quiet and signaling patterns at both ends of the payload.
  for (uint64_t p : {1ull, 2ull, 0x7FFFFFFFFFFFFull, 0x8000000000000ull, 0x8000000000001ull, 0xFFFFFFFFFFFFFull})
    check(fmt::kFP64, 0x7FF0000000000000ull | p, (p >> 51) == 0);
  // OCP's FP8 NaNs have no signaling kind: e5m2 -> fp16 raises nothing.
  for (uint64_t c : {0x7Dull, 0x7Eull, 0x7Full, 0xFDull})
    CHECK(Convert(fmt::kE5M2, c, fmt::kFP16, CastOptions{}).flags == 0);
}

TEST_CASE("round: Subnormal flushing: inputs read as zero, results become zero", "[round]") {
  CastOptions o;
  o.subnormals = Subnormals::kFlush;
  CHECK(ConvertF32(0x1p-8f, fmt::kE4M3, o) == 0x00);   // a subnormal e4m3 result
  CHECK(ConvertF32(-0x1p-8f, fmt::kE4M3, o) == 0x80);
  CHECK(ConvertF32(0x1p-6f, fmt::kE4M3, o) == 0x08);   // min normal stays
  // 2^-130 is a subnormal FP32 input and a bf16 subnormal (8 * 2^-133): kept, or read as zero.
  CHECK(Convert(fmt::kFP32, qmx::test::FloatBits(0x1p-130f), fmt::kBF16, CastOptions{}).code == 0x0008);
  CHECK(Convert(fmt::kFP32, qmx::test::FloatBits(0x1p-130f), fmt::kBF16, o).code == 0x0000);
}

TEST_CASE("round: FP32 -> bf16 and fp16 agree with independent conversions", "[round]") {
  // bf16: the classic bit trick (RNE by adding 0x7FFF plus the kept LSB); fp16: the compiler's binary16 conversion (qmx::test::Half).
  for (uint64_t k = 0; k < (1ull << 32); k += 65521) {
    const uint32_t u = static_cast<uint32_t>(k);
    const float x = qmx::test::BitsFloat(u);
    CastOptions o;
    o.saturation = Saturation::kNoSat;
    o.nan_sign = NanSign::kKeep;
    const uint64_t bf = Convert(fmt::kFP32, u, fmt::kBF16, o).code;
    const uint64_t h = Convert(fmt::kFP32, u, fmt::kFP16, o).code;
    if (std::isnan(x)) {
      CHECK(ClassifyCode(fmt::kBF16, bf) == CodeClass::kNan);
      CHECK(ClassifyCode(fmt::kFP16, h) == CodeClass::kNan);
      continue;
    }
    const uint32_t want_bf = (u + 0x7FFFu + ((u >> 16) & 1)) >> 16;
    INFO(Hex(u, 8));
    CHECK(bf == want_bf);
    const qmx::test::Half hf = static_cast<qmx::test::Half>(x);
    uint16_t hb;
    std::memcpy(&hb, &hf, 2);
    CHECK(h == hb);
  }
}

TEST_CASE("round: SR: the N-bit carry rule on every discarded pattern and every R", "[round][sr]") {
  // x = 1 + k/256 * 2^-3 lies between 1 (0x38) and 1.125 (0x39) with discarded fraction nu = k/256.
  for (int n_bits : {8, 4, 1}) {
    CastOptions o;
    o.sr_bits = n_bits;
    const uint32_t two_n = 1u << n_bits;
    for (uint32_t k = 0; k < 256; ++k) {
      const float x = 1.0f + static_cast<float>(k) * 0x1p-11f;
      const uint32_t fl = (k * two_n) >> 8;                       // floor(nu * 2^N)
      const uint32_t fl2 = (k * 2 * two_n) >> 8;                  // floor(nu * 2^(N+1))
      const uint32_t rem = (k * two_n) & 255;                     // nu * 2^N - floor, in 1/256
      const uint32_t rne = fl + ((rem > 128 || (rem == 128 && (fl & 1))) ? 1 : 0);
      for (uint32_t r = 0; r < two_n; ++r) {
        INFO("N=" << n_bits << " k=" << k << " R=" << r);
        o.rounding = Rounding::kSrA;
        CHECK(ConvertF32(x, fmt::kE4M3, o, r) == (fl + r >= two_n ? 0x39u : 0x38u));
        o.rounding = Rounding::kSrB;
        CHECK(ConvertF32(x, fmt::kE4M3, o, r) == (fl2 + 2 * r + 1 >= 2 * two_n ? 0x39u : 0x38u));
        o.rounding = Rounding::kSrC;
        CHECK(ConvertF32(x, fmt::kE4M3, o, r) == (rne + r >= two_n ? 0x39u : 0x38u));
        // Bits above N are ignored.
        o.rounding = Rounding::kSrA;
        CHECK(ConvertF32(x, fmt::kE4M3, o, r | (0xABCD0000u << 0 & ~(two_n - 1))) ==
              ConvertF32(x, fmt::kE4M3, o, r));
      }
    }
  }
  // Subnormal results (Blackwell cvt.rs adds the bits at the top of the discarded bits there too):
  // x = k/256 * 2^-9 lies between 0 and the smallest subnormal 0x01.
  CastOptions o;
  o.rounding = Rounding::kSrA;
  for (uint32_t k = 1; k < 256; ++k)
    for (uint32_t r = 0; r < 256; r += 17) {
      const float x = static_cast<float>(k) * 0x1p-17f;
      CHECK(ConvertF32(x, fmt::kE4M3, o, r) == (k + r >= 256 ? 0x01u : 0x00u));
      CHECK(ConvertF32(-x, fmt::kE4M3, o, r) == (k + r >= 256 ? 0x81u : 0x80u));
    }
}

TEST_CASE("round: SR: the expected value of the rounded result equals the input", "[round][sr]") {
  // With nu a multiple of 2^-N, SR-A is exactly unbiased: E[result] = x. Tolerance: 5 standard errors
  // of the mean of n Bernoulli draws scaled by the gap between the two candidates.
  struct Case { const char* fmt; double x; };
  const Case cases[] = {{"e4m3", 1.0 + 77.0 / 256 * 0.125}, {"e2m1", 3.0 + 0.5 * 2 * 201.0 / 256},
                        {"e2m1", -(0.5 * 13.0 / 256)},        {"e5m2", -(40960.0 + 8192.0 * 3 / 256)},
                        {"int8", 0.3125 + 1.0 / 64 * 100 / 256}};
  const int n = 1 << 20;
  for (const Case& c : cases) {
    const Format f = ParseFormat(c.fmt);
    CastOptions o;
    o.rounding = Rounding::kSrA;
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const uint64_t code = ConvertF32(static_cast<float>(c.x), f, o, RandomBitsForElement(2024, static_cast<uint64_t>(i)));
      sum += DecodeToDouble(f, code);
    }
    const double mean = sum / n;
    const double lo = DecodeToDouble(f, ConvertF32(static_cast<float>(c.x), f, Opt(Rounding::kRz)));
    const double hi = DecodeToDouble(f, ConvertF32(static_cast<float>(c.x), f, Opt(c.x > 0 ? Rounding::kRu : Rounding::kRd)));
    const double p = (c.x - lo) / (hi - lo);
    const double tol = 5 * std::fabs(hi - lo) * std::sqrt(p * (1 - p) / n);
    INFO(c.fmt << " x=" << c.x << " mean=" << mean << " tol=" << tol);
    CHECK(std::fabs(mean - c.x) < tol);
  }
}
