// test_mx.cc: MX block quantization. The UE8M0 scale rules against independent computations and
// hand-worked edges; the fast path (every SIMD target, sequential and parallel) against the scalar
// reference on random, edge and special blocks, ragged lengths and every element format and mode.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/mx.h"
#include "qmx/round.h"
#include "qmx/testing.h"
#include "support/hex.h"
#include "support/modes.h"

using namespace qmx;
using qmx::test::BitsFloat;
using qmx::test::FloatBits;
using qmx::test::Hex;
using qmx::test::TargetGuard;

namespace {


// Independent statements of the two rules (docs/REFERENCES.md section 3).
int FloorByte(float amax, const Format& elem) {
  if (amax == 0) return 0;
  const int k = std::ilogb(amax) - Limits(elem).emax;
  return std::min(127, std::max(-127, k)) + 127;
}
int RoundUpByte(float amax, const Format& elem) {
  const float q = amax / static_cast<float>(Limits(elem).max_finite);
  return static_cast<int>(ConvertF32(q, fmt::kUE8M0, CastOptions{Rounding::kRu, Saturation::kSatFinite}));
}

// Test tensors: blocks of many kinds, laid end to end.
std::vector<float> MakeTensor(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::student_t_distribution<float> td(2.0f);
  std::uniform_int_distribution<int> kind(0, 9), ex(-140, 120);
  std::vector<float> x(n);
  for (size_t b = 0; b < n; b += 32) {
    const int k = kind(rng);
    const float scale = std::ldexp(1.0f, ex(rng));
    for (size_t i = b; i < std::min(n, b + 32); ++i) {
      switch (k) {
        case 0: x[i] = nd(rng); break;
        case 1: x[i] = td(rng) * scale; break;
        case 2: x[i] = 0.0f; break;
        case 3: x[i] = nd(rng) * 1e-40f; break;  // FP32 subnormals
        case 4: x[i] = (i % 7 == 0) ? 448.0f * (1 + (i % 3)) : nd(rng); break;
        case 5: x[i] = std::ldexp(1.0f, static_cast<int>(i % 9)) * ((i & 1) ? -1.0f : 1.0f); break;
        case 6: x[i] = BitsFloat(static_cast<uint32_t>(rng()) & 0xFF7FFFFFu); break;  // random finite bits
        case 7: x[i] = (i == b + 5) ? std::nanf("") : nd(rng); break;
        case 8: x[i] = (i == b + 3) ? -HUGE_VALF : nd(rng) * scale; break;
        default: x[i] = nd(rng) * 3.4e38f * 0.25f; break;
      }
    }
  }
  return x;
}

}  // namespace

TEST_CASE("quantize: UE8M0 scale rules agree with independent computations over all exponents",
          "[quantize][mx][scale]") {
  const char* const name = GENERATE(from_range(std::begin(qmx::test::kMxElems), std::end(qmx::test::kMxElems)));
  CAPTURE(name);
  const Format& elem = GetFormat(name);
  for (uint32_t e = 0; e < 255; ++e) {
    for (uint32_t m : {0u, 1u, 0x400000u, 0x400001u, 0x7FFFFFu, 0x3FFFFFu, 0x600000u, 0x12345u}) {
      const float amax = BitsFloat(e << 23 | m);
      INFO(name << " amax " << Hex(FloatBits(amax), 8));
      CHECK(Ue8m0ScaleFromAmax(amax, elem, ScaleRule::kOcpFloor) == FloorByte(amax, elem));
      CHECK(Ue8m0ScaleFromAmax(amax, elem, ScaleRule::kRoundUp) == RoundUpByte(amax, elem));
    }
  }
}

TEST_CASE("quantize: UE8M0 scale rules at the hand-worked edges", "[quantize][mx][scale]") {
  const Format& e4m3 = fmt::kE4M3;
  const auto floor_rule = ScaleRule::kOcpFloor;
  const auto up = ScaleRule::kRoundUp;
  // amax = destmax: both give X = 1.
  CHECK(Ue8m0ScaleFromAmax(448.0f, e4m3, floor_rule) == 127);
  CHECK(Ue8m0ScaleFromAmax(448.0f, e4m3, up) == 127);
  // Just above destmax: round-up doubles X; floor keeps X = 1 and the element saturates.
  CHECK(Ue8m0ScaleFromAmax(std::nextafter(448.0f, 1e9f), e4m3, up) == 128);
  CHECK(Ue8m0ScaleFromAmax(480.0f, e4m3, floor_rule) == 127);
  // A power of two: floor gives 2^(8 - 8) = 1; round-up 256/448 < 1 -> 2^0.
  CHECK(Ue8m0ScaleFromAmax(256.0f, e4m3, floor_rule) == 127);
  CHECK(Ue8m0ScaleFromAmax(256.0f, e4m3, up) == 127);
  CHECK(Ue8m0ScaleFromAmax(224.0f, e4m3, up) == 126);  // 224/448 = 0.5 exactly
  // amax = 0 and tiny amax: clamped to 2^-127 (byte 0), never an FP32 subnormal artefact.
  CHECK(Ue8m0ScaleFromAmax(0.0f, e4m3, floor_rule) == 0);
  CHECK(Ue8m0ScaleFromAmax(0.0f, e4m3, up) == 0);
  CHECK(Ue8m0ScaleFromAmax(0x1p-149f, e4m3, floor_rule) == 0);
  CHECK(Ue8m0ScaleFromAmax(0x1p-149f, e4m3, up) == 0);
  CHECK(Ue8m0ScaleFromAmax(0x1p-118f * 448.0f, e4m3, up) == 9);  // q = 2^-118 exactly
  // FP32 max: floor 127 - 8 = 119; round-up ceil(log2(FLT_MAX / 448)) = 120.
  CHECK(Ue8m0ScaleFromAmax(3.4028234663852886e38f, e4m3, floor_rule) == 119 + 127);
  CHECK(Ue8m0ScaleFromAmax(3.4028234663852886e38f, e4m3, up) == 120 + 127);
  // e2m1 (emax 2, destmax 6): amax 6 -> X = 1 both; amax 7 -> floor 2^0 (7 saturates to 6), round-up 2^1.
  CHECK(Ue8m0ScaleFromAmax(6.0f, fmt::kE2M1, floor_rule) == 127);
  CHECK(Ue8m0ScaleFromAmax(7.0f, fmt::kE2M1, floor_rule) == 127);
  CHECK(Ue8m0ScaleFromAmax(7.0f, fmt::kE2M1, up) == 128);
  CHECK_THROWS_WITH(Ue8m0ScaleFromAmax(std::nanf(""), e4m3, up), Catch::Contains("finite"));
}

TEST_CASE("quantize: MX block that separates round-down from round-up", "[quantize][mx]") {
  // amax 480 in e4m3: floor keeps X = 1 and 480 saturates to 448 (0x7E); round-up takes X = 2, 480/2 = 240.
  std::vector<float> x(32, 1.0f);
  x[0] = 480.0f;
  std::vector<uint8_t> codes(32), scales(1);
  MxSpec spec;
  spec.rule = ScaleRule::kOcpFloor;
  QuantizeMx(DType::kF32, x.data(), 32, spec, codes.data(), scales.data());
  CHECK(scales[0] == 127);
  CHECK(codes[0] == 0x7E);
  spec.rule = ScaleRule::kRoundUp;
  QuantizeMx(DType::kF32, x.data(), 32, spec, codes.data(), scales.data());
  CHECK(scales[0] == 128);
  CHECK(codes[0] == ConvertF32(240.0f, fmt::kE4M3, CastOptions{}));
  CHECK(codes[1] == ConvertF32(0.5f, fmt::kE4M3, CastOptions{}));
}

TEST_CASE("quantize: MX fast path equals the reference on every target, element format, rule and mode",
          "[quantize][mx][simd]") {
  TargetGuard guard;
  const size_t n = 32 * 97 + 19;  // a ragged last block
  const std::vector<float> x = MakeTensor(n, 2024);
  std::vector<uint16_t> xb(n);
  for (size_t i = 0; i < n; ++i) xb[i] = static_cast<uint16_t>(FloatBits(x[i]) >> 16);
  const char* const name = GENERATE(from_range(std::begin(qmx::test::kMxElems), std::end(qmx::test::kMxElems)));
  CAPTURE(name);
  for (ScaleRule rule : {ScaleRule::kOcpFloor, ScaleRule::kRoundUp, ScaleRule::kCeil, ScaleRule::kEven,
                         ScaleRule::kMaxFinite}) {
    for (Rounding r : qmx::test::kAllModes) {
      for (int variant = 0; variant < 5; ++variant) {
        MxSpec spec;
        spec.elem = GetFormat(name);
        spec.rule = rule;
        spec.cast.rounding = r;
        if (rule == ScaleRule::kMaxFinite) spec.nan = NanPolicy::kIgnore;
        if (variant == 1) spec.cast.subnormals = Subnormals::kFlush;
        if (variant == 2) spec.block = (r == Rounding::kRne) ? 16 : 20;
        // The other NaN policies and the FP32 element-scaling modes (torchao, microxcaling, TE).
        const NanPolicy policies[] = {NanPolicy::kScaleNan, NanPolicy::kTe, NanPolicy::kIgnoreNan, NanPolicy::kIgnore};
        if (variant >= 3 && rule != ScaleRule::kMaxFinite) spec.nan = policies[static_cast<int>(r) % 4];
        if (variant == 3) spec.scaling = ElementScaling::kFp32;
        if (variant == 4) spec.scaling = ElementScaling::kTeRcp;
        for (DType src : {DType::kF32, DType::kBF16}) {
          const void* in = src == DType::kF32 ? static_cast<const void*>(x.data()) : xb.data();
          const SrSource sr{77, 5, nullptr};
          std::vector<uint8_t> want_c(n), want_s(MxScaleCount(n, spec));
          QuantizeMxRef(src, in, n, spec, want_c.data(), want_s.data(), sr);
          std::vector<float> want_dq(n);
          DequantizeMxRef(want_c.data(), want_s.data(), n, spec, want_dq.data());
          for (const std::string& t : SimdTargets()) {
            ForceSimdTarget(t);
            std::vector<uint8_t> c(n, 0xAA), s(want_s.size(), 0xAA);
            QuantizeMx(src, in, n, spec, c.data(), s.data(), sr);
            const std::string what = t + " " + name + " " + ScaleRuleName(rule) + " " + RoundingName(r) +
                                     " variant " + std::to_string(variant) + " " + DTypeName(src) + " " +
                                     NanPolicyName(spec.nan) + " " + ElementScalingName(spec.scaling);
            size_t bad = 0;
            for (size_t i = 0; i < n; ++i) {
              const bool ok = c[i] == want_c[i] && s[i / spec.block] == want_s[i / spec.block];
              if (!ok && ++bad <= 3) {
                INFO(what << ": element " << i << " x " << Hex(FloatBits(x[i]), 8) << " code " << Hex(c[i]) << " want "
                          << Hex(want_c[i]) << " scale " << Hex(s[i / spec.block]) << " want "
                          << Hex(want_s[i / spec.block]));
                CHECK(ok);
              }
            }
            INFO(what << ": " << bad << " mismatches");
            CHECK(bad == 0);
            std::vector<float> dq(n);
            DequantizeMx(c.data(), s.data(), n, spec, dq.data());
            CHECK(std::memcmp(dq.data(), want_dq.data(), n * 4) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("quantize: MX fast path scale bytes over every amax exponent and the mantissas around destmax's",
          "[quantize][mx][simd]") {
  // One block per amax: every FP32 exponent field, each with the mantissas just below, at and above
  // destmax's (where the round-up rule's quotient crosses a power of two) and the binade's ends. The
  // block's other elements are fractions of amax, so amax sets the scale.
  TargetGuard guard;
  const char* const name = GENERATE(from_range(std::begin(qmx::test::kMxElems), std::end(qmx::test::kMxElems)));
  CAPTURE(name);
  const Format& elem = GetFormat(name);
  const uint32_t g = FloatBits(static_cast<float>(Limits(elem).max_finite)) & 0x7FFFFFu;
  std::vector<float> x;
  for (uint32_t e = 0; e < 255; ++e) {
    for (uint32_t m : {0u, 1u, g - 1, g, g + 1, g + 2, 0x400000u, 0x7FFFFFu}) {
      const float amax = BitsFloat(e << 23 | (m & 0x7FFFFFu));
      for (int i = 0; i < 32; ++i) x.push_back(i == 0 ? ((e & 1) ? -amax : amax) : amax * (0.5f / static_cast<float>(i + 1)));
    }
  }
  const size_t n = x.size();
  for (ScaleRule rule : {ScaleRule::kOcpFloor, ScaleRule::kRoundUp, ScaleRule::kCeil, ScaleRule::kEven}) {
    MxSpec spec;
    spec.elem = elem;
    spec.rule = rule;
    std::vector<uint8_t> want_c(n), want_s(MxScaleCount(n, spec));
    QuantizeMxRef(DType::kF32, x.data(), n, spec, want_c.data(), want_s.data());
    for (const std::string& t : SimdTargets()) {
      ForceSimdTarget(t);
      std::vector<uint8_t> c(n, 0xAA), s(want_s.size(), 0xAA);
      QuantizeMx(DType::kF32, x.data(), n, spec, c.data(), s.data());
      size_t bad = 0;
      for (size_t b = 0; b < want_s.size(); ++b) {
        if (s[b] != want_s[b] && ++bad <= 3) {
          INFO(t << " " << name << " " << ScaleRuleName(rule) << " amax " << Hex(FloatBits(x[b * 32]), 8) << " scale "
                 << Hex(s[b]) << " want " << Hex(want_s[b]));
          CHECK(s[b] == want_s[b]);
        }
      }
      INFO(t << " " << name << " " << ScaleRuleName(rule) << ": " << bad << " scale mismatches");
      CHECK(bad == 0);
      CHECK(c == want_c);
    }
  }
}

TEST_CASE("quantize: MX NaN and Inf blocks: scale 0xFF, element NaN codes, dequantized NaN", "[quantize][mx]") {
  std::vector<float> x(64, 1.0f);
  x[3] = std::nanf("");
  x[40] = HUGE_VALF;
  const char* const name = GENERATE(from_range(std::begin(qmx::test::kMxElems), std::end(qmx::test::kMxElems)));
  CAPTURE(name);
  MxSpec spec;
  spec.elem = GetFormat(name);
  std::vector<uint8_t> c(64), s(2);
  QuantizeMx(DType::kF32, x.data(), 64, spec, c.data(), s.data());
  CHECK(s[0] == 0xFF);
  CHECK(s[1] == 0xFF);
  const uint8_t nan_code = spec.elem.HasNan() ? static_cast<uint8_t>(spec.elem.CanonicalNan()) : 0;
  for (uint8_t v : c) CHECK(v == nan_code);
  std::vector<float> dq(64);
  DequantizeMx(c.data(), s.data(), 64, spec, dq.data());
  for (float v : dq) CHECK(std::isnan(v));
}

TEST_CASE("te-rcp: a NaN product is the GPU's positive NaN (Inf x 0 at scale 254, NaN elements)", "[quantize][mx]") {
  // Block 0: an Inf under the te policy (scale 0xFE, multiplier +0): Inf x 0 is NaN; x86 makes it its
  // negative default NaN, the GPU's FMUL 0x7FFFFFFF. Block 1: a negative NaN under ignore. Under te-rcp
  // both convert to the positive NaN code 0x7F with nan-sign=keep; under fp32 scaling the negative NaN
  // keeps its sign (0xFF).
  std::vector<float> x(64, 1.0f);
  x[5] = -HUGE_VALF;
  x[40] = -std::nanf("");
  qmx::test::TargetGuard guard;
  for (ElementScaling scaling : {ElementScaling::kTeRcp, ElementScaling::kFp32}) {
    for (NanPolicy nan : {NanPolicy::kTe, NanPolicy::kIgnore}) {
      MxSpec spec;
      spec.nan = nan;
      spec.scaling = scaling;
      std::vector<uint8_t> want(64), ws(2);
      QuantizeMxRef(DType::kF32, x.data(), 64, spec, want.data(), ws.data());
      INFO(ElementScalingName(scaling) << " " << NanPolicyName(nan));
      if (nan == NanPolicy::kTe && scaling == ElementScaling::kTeRcp) {
        CHECK(ws[0] == 0xFE);
        CHECK(want[5] == 0x7F);
      }
      if (nan == NanPolicy::kIgnore) CHECK(want[40] == (scaling == ElementScaling::kTeRcp ? 0x7F : 0xFF));
      for (const std::string& target : SimdTargets()) {
        ForceSimdTarget(target);
        std::vector<uint8_t> c(64), s(2);
        QuantizeMx(DType::kF32, x.data(), 64, spec, c.data(), s.data());
        CHECK(c == want);
        CHECK(s == ws);
      }
      ForceSimdTarget("");
    }
  }
}

TEST_CASE("quantize: MX parallel quantization is independent of the thread count", "[quantize][mx]") {
  const size_t n = 32 * 70001 + 3;
  const std::vector<float> x = MakeTensor(n, 99);
  MxSpec spec;
  spec.elem = fmt::kE2M1;
  spec.cast.rounding = Rounding::kSrA;
  std::vector<uint8_t> c0(n), s0(MxScaleCount(n, spec));
  QuantizeMx(DType::kF32, x.data(), n, spec, c0.data(), s0.data(), SrSource{3, 0, nullptr});
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<uint8_t> c(n), s(s0.size());
    QuantizeMx(DType::kF32, x.data(), n, spec, c.data(), s.data(), SrSource{3, 0, nullptr}, Exec::kParallel);
    CHECK(c == c0);
    CHECK(s == s0);
  }
  omp_set_num_threads(saved);
}

// Outputs of at least 2^23 codes take non-temporal stores (kStreamCodes, quantize/quantize_internal.h):
// whole 64-byte stores where the codes are 64-byte aligned, four 16-byte ones where they are 16-byte aligned,
// the cached store otherwise. Quarters of the tensor stay below the threshold: the codes and scales of the
// whole must equal theirs, at each alignment, on every target and both thread counts.
TEST_CASE("quantize: MX quantization past the non-temporal threshold equals the cached path at every code alignment",
          "[quantize][mx][simd]") {
  TargetGuard guard;
  const size_t n = (size_t{1} << 23) + 32 * 3, quarter = n / 4 / 32 * 32;
  const std::vector<float> x = MakeTensor(n, 7);
  const int saved = omp_get_max_threads();
  for (const char* elem : {"e4m3", "e2m1"}) {
    MxSpec spec;
    spec.elem = GetFormat(elem);
    for (Rounding r : {Rounding::kRne, Rounding::kSrA}) {
      spec.cast.rounding = r;
      std::vector<uint8_t> want(n), want_s(MxScaleCount(n, spec));
      for (size_t start = 0; start < n; start += quarter) {
        const size_t len = std::min(quarter, n - start);
        QuantizeMx(DType::kF32, x.data() + start, len, spec, want.data() + start, want_s.data() + start / 32, SrSource{5, start, nullptr},
                   Exec::kSequential);
      }
      std::vector<uint8_t> buf(n + 128), s(want_s.size());
      const size_t aligned = (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
      for (const std::string& target : SimdTargets()) {
        ForceSimdTarget(target);
        for (size_t offset : {aligned, aligned + 16, aligned + 1}) {
          for (int threads : {1, 2}) {
            omp_set_num_threads(threads);
            INFO(elem << " " << RoundingName(r) << " " << target << " code offset " << offset - aligned << " from a 64-byte line, threads " << threads);
            uint8_t* codes = buf.data() + offset;
            QuantizeMx(DType::kF32, x.data(), n, spec, codes, s.data(), SrSource{5, 0, nullptr}, Exec::kParallel);
            CHECK(std::memcmp(codes, want.data(), n) == 0);
            CHECK(s == want_s);
          }
        }
      }
      ForceSimdTarget("");
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("quantize: MX specs are validated with clear messages", "[quantize][mx]") {
  MxSpec spec;
  spec.elem = fmt::kUE8M0;
  CHECK_THROWS_WITH(ValidateMxSpec(spec), Catch::Contains("cannot be an MX element format"));
  spec.elem = fmt::kBF16;
  CHECK_THROWS_WITH(ValidateMxSpec(spec), Catch::Contains("cannot be an MX element format"));
  spec.elem = fmt::kE2M1;
  spec.block = 0;
  CHECK_THROWS_WITH(ValidateMxSpec(spec), Catch::Contains("block length"));
  spec.block = 32;
  spec.cast.saturation = Saturation::kNoSat;
  CHECK_THROWS_WITH(ValidateMxSpec(spec), Catch::Contains("no Inf or NaN"));
  CHECK_THROWS_WITH(ParseScaleRule("nearest"), Catch::Contains("ocp-floor, round-up"));
}
