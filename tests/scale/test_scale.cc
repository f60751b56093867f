// test_scale.cc: the scale layer. Every UE8M0 rule, fast (bit level) against the reference (real value in
// double) over every FP32 exponent and the mantissa bits that decide; round-up and floor against NVIDIA's
// host conversions __nv_cvt_float_to_e8m0 (RP / RZ); hand-worked edges of each rule; FP32 and NVFP4
// scales after Transformer Engine; delayed scaling as a training loop drives it.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/round.h"
#include "qmx/scale.h"
#include "qmx/testing.h"
#include "support/fl32.h"
#include "support/hex.h"
#include "support/modes.h"

#ifdef QMX_HAVE_CUDA_HEADERS
#include <cuda_fp8.h>
#endif

using namespace qmx;
using qmx::test::BitsFloat;
using qmx::test::Fl32Div;
using qmx::test::FloatBits;
using qmx::test::Hex;

namespace {

const ScaleRule kPow2Rules[] = {ScaleRule::kOcpFloor, ScaleRule::kRoundUp, ScaleRule::kCeil, ScaleRule::kEven,
                                ScaleRule::kMaxFinite};

// The mantissa patterns that decide every rule: 0 and 1 (powers of two and just above), the round-up and
// round-down edges of EVEN at every element width (all ones from the top, +-1), the subnormal 2^-127
// threshold of round-up, and a few arbitrary ones.
std::vector<uint32_t> DecidingMantissas() {
  std::vector<uint32_t> m = {0, 1, 2, 0x400000, 0x400001, 0x3FFFFF, 0x7FFFFF, 0x7FFFFE, 0x12345, 0x555555, 0x2AAAAA};
  for (int w = 0; w <= 8; ++w) {
    const uint32_t edge = 0x7FFFFFu & ~((1u << (22 - w)) - 1);  // 1.11..1 (w+1 ones) followed by zeros
    for (int d = -2; d <= 2; ++d) m.push_back(static_cast<uint32_t>(static_cast<int>(edge) + d) & 0x7FFFFFu);
  }
  return m;
}

}  // namespace

TEST_CASE("scale: scale format names read back, and an unknown one is refused naming them", "[scale]") {
  for (ScaleFormat f : {ScaleFormat::kUe8m0, ScaleFormat::kE4m3, ScaleFormat::kFp32})
    CHECK(ParseScaleFormat(ScaleFormatName(f)) == f);
  CHECK_THROWS_WITH(ParseScaleFormat("ue4m3"), Catch::Contains("unknown scale format 'ue4m3' (ue8m0, e4m3, fp32)"));
}

TEST_CASE("scale: UE8M0 rules: bit-level fast path equals the double reference on every exponent", "[scale]") {
  const std::vector<uint32_t> mants = DecidingMantissas();
  const char* const name = GENERATE(from_range(std::begin(qmx::test::kMxElems), std::end(qmx::test::kMxElems)));
  CAPTURE(name);
  const Format& elem = GetFormat(name);
  for (ScaleRule rule : kPow2Rules) {
    size_t bad = 0;
    for (uint32_t e = 0; e < 255; ++e) {
      for (uint32_t m : mants) {
        const float amax = BitsFloat(e << 23 | m);
        const int fast = Ue8m0ScaleFromAmax(amax, elem, rule), ref = Ue8m0ScaleFromAmaxRef(amax, elem, rule);
        if (fast != ref && ++bad <= 3) {
          INFO(name << " " << ScaleRuleName(rule) << " amax " << Hex(FloatBits(amax), 8) << " fast " << Hex(fast)
                    << " ref " << Hex(ref));
          CHECK(fast == ref);
        }
      }
    }
    INFO(name << " " << ScaleRuleName(rule));
    CHECK(bad == 0);
  }
}

#ifdef QMX_HAVE_CUDA_HEADERS
TEST_CASE("scale: UE8M0 round-up and floor agree with __nv_cvt_float_to_e8m0 (RP, RZ) on every exponent",
          "[scale][cuda]") {
  const std::vector<uint32_t> mants = DecidingMantissas();
  const char* const name = GENERATE(from_range(std::begin(qmx::test::kMxElems), std::end(qmx::test::kMxElems)));
  CAPTURE(name);
  const Format& elem = GetFormat(name);
  const FormatLimits lim = Limits(elem);
  for (uint32_t e = 0; e < 255; ++e) {
    for (uint32_t m : mants) {
      const float amax = BitsFloat(e << 23 | m);
      INFO(name << " amax " << Hex(FloatBits(amax), 8));
      // round-up: cvt.rp.satfinite of amax / destmax.
      const float q = amax / static_cast<float>(lim.max_finite);
      CHECK(Ue8m0ScaleFromAmax(amax, elem, ScaleRule::kRoundUp) ==
            __nv_cvt_float_to_e8m0(q, __NV_SATFINITE, cudaRoundPosInf));
      // floor: RZ of amax is 2^floor(log2 amax) (2^-127 below), less emax, clamped at 2^-127.
      const int rz = __nv_cvt_float_to_e8m0(amax, __NV_SATFINITE, cudaRoundZero);
      const int want = amax == 0 ? 0 : std::max(0, rz - lim.emax);
      CHECK(Ue8m0ScaleFromAmax(amax, elem, ScaleRule::kOcpFloor) == want);
    }
  }
}

TEST_CASE("scale: ue8m0 with negative=magnitude equals __nv_cvt_float_to_e8m0 on negative inputs, every mode and target",
          "[scale][cuda][simd]") {
  // The header function converts |x| (bf16 on the way, cuda_fp8.hpp); negative=magnitude models it. Both
  // signs of every exponent with the deciding mantissas, zeros, Inf and NaN, in RZ and RP, with and without
  // satfinite, through the SIMD tier on every target and the reference.
  const std::vector<uint32_t> mants = DecidingMantissas();
  std::vector<float> x;
  for (uint32_t sign : {0u, 1u})
    for (uint32_t e = 0; e < 256; ++e)
      for (uint32_t m : e == 255 ? std::vector<uint32_t>{0, 1, 0x400000} : mants) x.push_back(BitsFloat(sign << 31 | e << 23 | m));
  const Format& ue8m0 = GetFormat("ue8m0");
  qmx::test::TargetGuard guard;
  for (Rounding r : {Rounding::kRz, Rounding::kRu})
    for (Saturation sat : {Saturation::kSatFinite, Saturation::kNoSat}) {
      CastOptions o;
      o.rounding = r;
      o.saturation = sat;
      o.negative_unsigned = NegativeUnsigned::kMagnitude;
      std::vector<uint8_t> want(x.size()), ref(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        want[i] = __nv_cvt_float_to_e8m0(x[i], sat == Saturation::kSatFinite ? __NV_SATFINITE : __NV_NOSAT,
                                         r == Rounding::kRz ? cudaRoundZero : cudaRoundPosInf);
      ConvertToCodesRef(DType::kF32, x.data(), x.size(), ue8m0, o, ref.data());
      size_t bad = 0;
      for (size_t i = 0; i < x.size(); ++i) bad += ref[i] != want[i];
      INFO(RoundingName(r) << " " << SaturationName(sat));
      CHECK(bad == 0);
      for (const std::string& target : SimdTargets()) {
        ForceSimdTarget(target);
        std::vector<uint8_t> fast(x.size());
        ConvertToCodes(DType::kF32, x.data(), x.size(), ue8m0, o, fast.data());
        INFO("target " << target);
        CHECK(fast == want);
      }
      ForceSimdTarget("");
      // The default calls a negative input invalid: the NaN code.
      o.negative_unsigned = NegativeUnsigned::kInvalid;
      ConvertToCodesRef(DType::kF32, x.data(), x.size(), ue8m0, o, ref.data());
      size_t not_nan = 0;
      for (size_t i = 0; i < x.size(); ++i) not_nan += std::signbit(x[i]) && x[i] != 0 && !std::isnan(x[i]) && ref[i] != 0xFF;
      CHECK(not_nan == 0);
    }
}
#endif

TEST_CASE("scale: UE8M0 rules at the hand-worked edges", "[scale]") {
  const Format& e4m3 = fmt::kE4M3;
  // amax 448 = 1.75 * 2^8: floor 2^0; ceil 2^(9-8); even at 3 mantissa bits 1.75 stays -> 2^0;
  // round-up 448/448 = 1 -> 2^0.
  CHECK(Ue8m0ScaleFromAmax(448.0f, e4m3, ScaleRule::kOcpFloor) == 127);
  CHECK(Ue8m0ScaleFromAmax(448.0f, e4m3, ScaleRule::kCeil) == 128);
  CHECK(Ue8m0ScaleFromAmax(448.0f, e4m3, ScaleRule::kEven) == 127);
  CHECK(Ue8m0ScaleFromAmax(448.0f, e4m3, ScaleRule::kRoundUp) == 127);
  // EVEN rounds amax half-up at 3 mantissa bits: 480 = 1.875 * 2^8 is exact there and keeps X = 1;
  // 496 = 1.9375 * 2^8 is the midpoint to 2^9 and takes X = 2; just below it keeps X = 1.
  CHECK(Ue8m0ScaleFromAmax(480.0f, e4m3, ScaleRule::kEven) == 127);
  CHECK(Ue8m0ScaleFromAmax(496.0f, e4m3, ScaleRule::kEven) == 128);
  CHECK(Ue8m0ScaleFromAmax(std::nextafter(496.0f, 0.0f), e4m3, ScaleRule::kEven) == 127);
  // A power of two: ceil adds nothing.
  CHECK(Ue8m0ScaleFromAmax(256.0f, e4m3, ScaleRule::kCeil) == 127);
  CHECK(Ue8m0ScaleFromAmax(std::nextafter(256.0f, 1e9f), e4m3, ScaleRule::kCeil) == 128);
  // e2m1 (1 mantissa bit, emax 2): EVEN rounds 1.75 * 2^2 = 7 up to 8 -> 2^1; 6.5 = 1.625 * 4 stays -> 2^0.
  CHECK(Ue8m0ScaleFromAmax(7.0f, fmt::kE2M1, ScaleRule::kEven) == 128);
  CHECK(Ue8m0ScaleFromAmax(6.5f, fmt::kE2M1, ScaleRule::kEven) == 127);
  // amax = 0 and amax below 2^-127 * destmax: 2^-127 under every rule.
  for (ScaleRule r : kPow2Rules) {
    CHECK(Ue8m0ScaleFromAmax(0.0f, e4m3, r) == 0);
    CHECK(Ue8m0ScaleFromAmax(0x1p-149f, e4m3, r) == 0);
    CHECK(Ue8m0ScaleFromAmax(0x1p-127f * 448.0f, e4m3, r) <= 1);
  }
  // FP32 max: floor 127 - 8; ceil and even 128 - 8 (the carry never yields a NaN scale); round-up 120.
  const float big = std::numeric_limits<float>::max();
  CHECK(Ue8m0ScaleFromAmax(big, e4m3, ScaleRule::kOcpFloor) == 119 + 127);
  CHECK(Ue8m0ScaleFromAmax(big, e4m3, ScaleRule::kCeil) == 120 + 127);
  CHECK(Ue8m0ScaleFromAmax(big, e4m3, ScaleRule::kEven) == 120 + 127);
  CHECK(Ue8m0ScaleFromAmax(big, e4m3, ScaleRule::kRoundUp) == 120 + 127);
  CHECK_THROWS_WITH(Ue8m0ScaleFromAmax(1.0f, e4m3, ScaleRule::kFp32), Catch::Contains("not a UE8M0"));
}

TEST_CASE("scale: rule, policy and element-scaling names round-trip", "[scale]") {
  for (ScaleRule r : AllScaleRules()) CHECK(ParseScaleRule(ScaleRuleName(r)) == r);
  CHECK(ParseScaleRule("rceil") == ScaleRule::kRoundUp);
  CHECK(ParseScaleRule("round-down") == ScaleRule::kOcpFloor);
  CHECK_THROWS_WITH(ParseScaleRule("nearest"), Catch::Contains("ocp-floor") && Catch::Contains("nvfp4-div"));
  for (NanPolicy p : {NanPolicy::kBlockNan, NanPolicy::kScaleNan, NanPolicy::kTe, NanPolicy::kIgnoreNan, NanPolicy::kIgnore})
    CHECK(ParseNanPolicy(NanPolicyName(p)) == p);
  CHECK_THROWS_WITH(ParseNanPolicy("zero"), Catch::Contains("block-nan"));
  for (ElementScaling e : {ElementScaling::kExact, ElementScaling::kFp32, ElementScaling::kTeRcp})
    CHECK(ParseElementScaling(ElementScalingName(e)) == e);
  CHECK(ScaleFormatOf(ScaleRule::kNvfp4) == ScaleFormat::kE4m3);
  CHECK(ScaleFormatOf(ScaleRule::kFp32Pow2) == ScaleFormat::kFp32);
  CHECK(ScaleFormatOf(ScaleRule::kEven) == ScaleFormat::kUe8m0);
}

TEST_CASE("scale: FP32 scales follow Transformer Engine's compute_scale_from_amax", "[scale]") {
  // s = 448 / amax by one FP32 division; decode = 1/s.
  Fp32Scale s = Fp32ScaleFromAmax(3.0f, 448.0f, false);
  CHECK(s.encode == 448.0f / 3.0f);
  CHECK(s.decode == 1.0f / (448.0f / 3.0f));
  // amax 0, Inf or NaN keep the fallback (1 for a fresh tensor).
  CHECK(Fp32ScaleFromAmax(0.0f, 448.0f, false).encode == 1.0f);
  CHECK(Fp32ScaleFromAmax(HUGE_VALF, 448.0f, false).encode == 1.0f);
  CHECK(Fp32ScaleFromAmax(std::nanf(""), 448.0f, false, 0, 4.0f).encode == 4.0f);
  // An infinite quotient becomes FLT_MAX.
  CHECK(Fp32ScaleFromAmax(0x1p-149f, 448.0f, false).encode == std::numeric_limits<float>::max());
  // pow2 clears the mantissa: 448/3 = 149.33 -> 128.
  CHECK(Fp32ScaleFromAmax(3.0f, 448.0f, true).encode == 128.0f);
  CHECK(Fp32ScaleFromAmax(3.0f, 448.0f, true).decode == 1.0f / 128.0f);
  // margin 1 halves the scaled max.
  CHECK(Fp32ScaleFromAmax(3.0f, 448.0f, false, 1).encode == 224.0f / 3.0f);
}

TEST_CASE("scale: FP32 scale op orders: scale = fl(fl(max * 2^-margin) / amax), decode = fl(1 / scale), against exact "
          "arithmetic; the other orders differ on these amax", "[scale][orders]") {
  // TE: recipe_common.cuh compute_scale_from_amax (__fdiv_rn(max_fp8, amax)), delayed_scaling.cu
  // (scaled_max = fp8_max * 2^-margin, then the division), vectorized_pointwise.h (scale_inv = reciprocal(s)).
  // The alternatives: decode fl(amax / scaled_max) (one division instead of the reciprocal), and the margin
  // applied after the division (a second rounding where the scale is subnormal).
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  size_t decode_alt = 0, margin_alt = 0, subnormal = 0;
  for (int t = 0; t < 20000; ++t) {
    const int margin = t % 4 == 0 ? 0 : static_cast<int>(next() % 41) - 10;
    // amax from 2^-100 to 2^127 (the top gives subnormal scales with a margin), random significand.
    const float amax = std::ldexp(1.0f + static_cast<float>(next() >> 9) * 0x1p-23f, static_cast<int>(next() % 228) - 100);
    const float dest = t % 2 ? 448.0f : 57344.0f;
    const Fp32Scale s = Fp32ScaleFromAmax(amax, dest, false, margin);
    const float scaled_max = std::ldexp(dest, -margin);
    const float q = Fl32Div(scaled_max, amax);
    if (std::isinf(static_cast<double>(scaled_max) / amax) || !std::isfinite(q) || q == 0.0f) continue;
    INFO("amax " << Hex(FloatBits(amax), 8) << " margin " << margin << " max " << dest);
    REQUIRE(FloatBits(s.encode) == FloatBits(q));
    if (std::isinf(static_cast<float>(1.0 / q))) {  // a subnormal scale's reciprocal overflows to Inf
      REQUIRE(std::isinf(s.decode));
      continue;
    }
    REQUIRE(FloatBits(s.decode) == FloatBits(Fl32Div(1.0f, q)));
    decode_alt += FloatBits(Fl32Div(amax, scaled_max)) != FloatBits(s.decode);
    const float late = std::ldexp(Fl32Div(dest, amax), -margin);  // fl32 of an exact power-of-two multiple
    margin_alt += FloatBits(late) != FloatBits(s.encode);
    subnormal += std::fpclassify(s.encode) == FP_SUBNORMAL;
  }
  CHECK(subnormal > 20);
  CHECK(decode_alt > 100);
  CHECK(margin_alt > 0);
}

TEST_CASE("scale: NVFP4 scales in Transformer Engine's kernel order and the divide-first order", "[scale]") {
  // Tensor scale: 2688 / amax; 1 for amax 0 and Inf; FLT_MAX when the quotient overflows; NaN -> FLT_MAX (fminf).
  CHECK(Nvfp4TensorEncodeScale(2688.0f) == 1.0f);
  CHECK(Nvfp4TensorEncodeScale(10.0f) == 268.8f);
  CHECK(Nvfp4TensorEncodeScale(0.0f) == 1.0f);
  CHECK(Nvfp4TensorEncodeScale(HUGE_VALF) == 1.0f);
  CHECK(Nvfp4TensorEncodeScale(0x1p-140f) == std::numeric_limits<float>::max());
  CHECK(Nvfp4TensorEncodeScale(std::nanf("")) == std::numeric_limits<float>::max());
  // A block whose amax equals the tensor amax gets block scale 448 (0x7E) under both orders, and elements are
  // multiplied by ~6/amax.
  const float amax = 10.0f, s_enc = Nvfp4TensorEncodeScale(amax);
  for (ScaleRule r : {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div}) {
    CHECK(Nvfp4BlockScale(amax, s_enc, r) == 0x7E);
    CHECK(Nvfp4BlockScale(0.0f, s_enc, r) == 0x00);
  }
  // The kernel's multiplier 1/(448 * fl32(1/268.8)) and the divide-first 268.8/448 differ in FP32.
  const float k = Nvfp4EncodeFactor(0x7E, s_enc, ScaleRule::kNvfp4);
  const float d = Nvfp4EncodeFactor(0x7E, s_enc, ScaleRule::kNvfp4Div);
  CHECK(k == 1.0f / (448.0f * (1.0f / 268.8f)));
  CHECK(d == 268.8f / 448.0f);
  // An all-zero block: multiplier FLT_MAX (kernel) or 0 (divide-first); elements stay 0 either way.
  CHECK(Nvfp4EncodeFactor(0x00, s_enc, ScaleRule::kNvfp4) == std::numeric_limits<float>::max());
  CHECK(Nvfp4EncodeFactor(0x00, s_enc, ScaleRule::kNvfp4Div) == 0.0f);
  // Dequantization uses the tensor amax: 448 * 10 / 2688.
  CHECK(Nvfp4DecodeScale(0x7E, amax) == (448.0f * 10.0f) * (1.0f / 2688.0f));
}

TEST_CASE("scale: Nvfp4EncodeFactors equals Nvfp4EncodeFactor on every byte, rule and kind of S_enc",
          "[scale][nvfp4]") {
  // The table form (row-scaled NVFP4 builds one per row) against the function, bit for bit: S_enc from
  // zero, subnormal, tiny, ordinary, FLT_MAX, Inf and NaN, and random FP32 bits of both signs.
  std::vector<float> s_encs = {0.0f, -0.0f, 1e-45f, 1e-40f, 1e-30f, 0.001f, 1.0f, 268.8f, 2688.0f, 1e30f,
                               std::numeric_limits<float>::max(), HUGE_VALF, std::nanf("")};
  uint32_t state = 12345;
  for (int i = 0; i < 3000; ++i) {
    state = state * 1664525u + 1013904223u;
    s_encs.push_back(BitsFloat(state));
  }
  size_t checked = 0, mismatches = 0;
  for (ScaleRule rule : {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div, ScaleRule::kNvfp4Torchao, ScaleRule::kNvfp4TorchaoCuda,
                         ScaleRule::kNvfp4FourOverSix}) {
    for (float s_enc : s_encs) {
      float table[128];
      Nvfp4EncodeFactors(s_enc, rule, table);
      for (int b = 0; b < 128; ++b, ++checked) {
        const float want = Nvfp4EncodeFactor(static_cast<uint8_t>(b), s_enc, rule);
        if (FloatBits(table[b]) != FloatBits(want) && !(std::isnan(table[b]) && std::isnan(want)) && mismatches++ < 5) {
          INFO("rule " << ScaleRuleName(rule) << " s_enc bits " << Hex(FloatBits(s_enc), 8) << " byte " << b);
          CHECK(Hex(FloatBits(table[b]), 8) == Hex(FloatBits(want), 8));
        }
      }
    }
  }
  CHECK(checked == 5 * s_encs.size() * 128);
  CHECK(mismatches == 0);
}

TEST_CASE("scale: Delayed scaling: quantize with the current scale, then push the amax", "[scale]") {
  DelayedScaling ds(fmt::kE4M3, 3, 0, AmaxAlgo::kMax);
  CHECK(ds.scale().encode == 1.0f);  // no history yet
  ds.Push(2.0f);
  CHECK(ds.scale().encode == 224.0f);
  ds.Push(1.0f);  // max(1, 2) = 2
  CHECK(ds.scale().encode == 224.0f);
  ds.Push(0.5f);
  CHECK(ds.scale().encode == 224.0f);
  ds.Push(0.25f);  // 2 has left the 3-entry history: max(0.25, 0.5, 1) = 1
  CHECK(ds.scale().encode == 448.0f);
  CHECK(ds.history() == std::vector<float>{0.25f, 0.5f, 1.0f});
  ds.Push(0.0f);  // max still 0.5 -> 896
  CHECK(ds.scale().encode == 896.0f);
  DelayedScaling recent(fmt::kE4M3, 4, 1, AmaxAlgo::kMostRecent);
  recent.Push(7.0f);
  CHECK(recent.scale().encode == 32.0f);  // (448 / 2) / 7
  recent.Push(0.0f);  // amax 0 keeps the previous scale
  CHECK(recent.scale().encode == 32.0f);
  recent.Push(std::nanf(""));  // so does NaN
  CHECK(recent.scale().encode == 32.0f);
  CHECK_THROWS_WITH(DelayedScaling(fmt::kE4M3, 0), Catch::Contains("history length"));
}
