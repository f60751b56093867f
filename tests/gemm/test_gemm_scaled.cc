// test_gemm_scaled.cc: the fused models whose UE8M0 block scales enter each product's exponent (MMA-Sim's
// T-FDPA with scales in the products: blackwell-mxf8f6f4, fused:...,scale=products) and fused models with
// no scales and F too wide for FP32 terms: the FP64 kernel (gemm/gemm_scaled_simd.cc) against the
// reference where a step's decision matters: steps whose product exponents span more than F bits (small
// products truncated), rows and columns with all-zero steps (zero_exp), scales from 2^-127 to 2^127 (C
// truncated away, results outside FP32's range), C from subnormal to near FLT_MAX, ragged K, RNE variants,
// FP8 / FP6 / FP4 elements, and MMA-Sim's zero rule (zero terms at their operands' exponents, a step cut to
// zero +0); on every SIMD target, 1 and 2 threads.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gemm/gemm_cases.h"
#include "qmx/convert.h"
#include "qmx/gemm.h"
#include "qmx/round.h"
#include "support/modes.h"

using namespace qmx;
using qmx::test::CheckEverywhere;
using qmx::test::FloatBits;
using qmx::test::RequireSame;

namespace {

// Codes of m x k (A) or k x n (B) in which each (row, step of 32) or (step, column) pair takes one of
// four shapes: random, all zero, the largest magnitudes beside the smallest (a span of more than F
// bits: the small products are truncated), one binade only (no truncation).
GemmOperand Shaped(const Format& f, size_t rows, size_t cols, bool is_a, std::mt19937& rng) {
  std::vector<uint8_t> c = qmx::test::RandomCodes(f, rows * cols, rng, false);
  const uint8_t max_code = static_cast<uint8_t>(ConvertF32(static_cast<float>(Limits(f).max_finite), f, CastOptions{})), min_code = 1;
  const uint8_t sign = static_cast<uint8_t>(1u << (f.Bits() - 1));
  for (size_t r = 0; r < rows; ++r)
    for (size_t q = 0; q < cols; ++q) {
      const size_t kk = is_a ? q : r, other = is_a ? r : q;
      uint8_t& v = c[r * cols + q];
      switch ((other + kk / 32) % 5) {
        case 1: v = 0; break;
        case 2: v = kk % 7 == 0 ? max_code : min_code; break;
        case 3: v = static_cast<uint8_t>((max_code - (rng() % 3)) | ((rng() & 1) ? sign : 0)); break;
        default: break;
      }
    }
  return OperandFromCodes(f, rows, cols, c.data());
}

void WideScales(GemmOperand& o, bool is_a, std::mt19937& rng) {
  qmx::test::AddUe8m0(o, is_a, 32, rng, -3, 3);
  for (size_t i = 0; i < o.scales.size(); ++i) {
    if (i % 11 == 0) o.scales[i] = std::ldexp(1.0f, 30 + static_cast<int>(rng() % 11));
    if (i % 13 == 0) o.scales[i] = std::ldexp(1.0f, -127);
    if (i % 17 == 0) o.scales[i] = std::ldexp(1.0f, 127);
  }
}

}  // namespace

TEST_CASE("gemm: scales-in-products models equal the reference where truncation, zero steps and wide scales decide",
          "[gemm]") {
  std::mt19937 rng(47);
  const std::vector<AccumModel> scaled = {
      AccumModelByName("blackwell-mxf8f6f4"),
      AccumModelByName("fused:step=32,F=25,term=rne,out=rne,zero-exp=-133,scale=products"),
      AccumModelByName("fused:step=16,F=30,bits=18,zero-exp=-120,scale=products"),
      // MMA-Sim's zero rule (a zero term at its operands' exponents) on the kernels with the outputs it may
      // change left to the reference: tcgen05 under MMA-Sim, and one with RNE and steps of 16.
      AccumModelByName("rtx-blackwell-mxf8f6f4"),
      AccumModelByName("fused:step=16,F=30,term=rne,out=rne,bits=20,zero-exp=operands,scale=products")};
  // Models without scales in the products, under both zero rules, on the unscaled operands.
  const std::vector<AccumModel> unscaled = {AccumModelByName("rtx-blackwell-f8f6f4"), AccumModelByName("ada-mma-fp8"),
                                            AccumModelByName("ada-mma-fp8-k16"),
                                            AccumModelByName("fused:step=32,F=25,zero-exp=-133")};
  // (step 16 under blocks of 32: two steps per scale pair)
  const std::pair<const Format*, const Format*> formats[] = {
      {&fmt::kE4M3, &fmt::kE4M3}, {&fmt::kE5M2, &fmt::kE4M3}, {&fmt::kE2M3, &fmt::kE3M2}, {&fmt::kE2M1, &fmt::kE2M1}};
  std::normal_distribution<float> nd;
  // 26 rows and 70 columns cross the 6-row panels and every vector width's edge; K = 32 * 9 + 16 leaves a
  // short last step and block.
  for (const size_t k : {size_t{304}, size_t{32}}) {
    std::vector<float> c(26 * 70);
    for (size_t i = 0; i < c.size(); ++i) {
      c[i] = i % 9 == 0 ? 0.0f : nd(rng) * std::ldexp(1.0f, static_cast<int>(i % 60) - 30);
      if (i % 23 == 0) c[i] = std::ldexp(1.0f, -140);      // subnormal
      if (i % 29 == 0) c[i] = 0x1.fffffep127f;             // overflows with any product added
    }
    const std::string ks = " K=" + std::to_string(k);
    for (const auto& [fa, fb] : formats) {
      const GemmOperand a = Shaped(*fa, 26, k, true, rng), b = Shaped(*fb, k, 70, false, rng);
      const std::string what = std::string(fa->name) + " x " + fb->name + ks;
      GemmOperand sa = a, sb = b;
      qmx::test::AddUe8m0(sa, true, 32, rng, -4, 4);
      qmx::test::AddUe8m0(sb, false, 32, rng, -4, 4);
      GemmOperand wa = a, wb = b;
      WideScales(wa, true, rng);
      WideScales(wb, false, rng);
      // Scales near 2^-75 each: products from 2^-178 to 2^-123, where the accumulator's floor (-126) and
      // zero_exp (-133, -120) decide emax.
      GemmOperand ta = a, tb = b;
      qmx::test::AddUe8m0(ta, true, 32, rng, -80, -70);
      qmx::test::AddUe8m0(tb, false, 32, rng, -80, -70);
      for (const AccumModel& m : unscaled) {
        CheckEverywhere(a, b, {}, m, "no scales " + what);
        CheckEverywhere(a, b, c, m, "no scales with C " + what);
      }
      for (const AccumModel& m : scaled) {
        CheckEverywhere(ta, tb, c, m, "tiny scales with C " + what);
        if (m.fused.step == 16) {
          CheckEverywhere(a, b, c, m, "no scales " + what);
          continue;
        }
        CheckEverywhere(sa, sb, {}, m, "mx " + what);
        CheckEverywhere(sa, sb, c, m, "mx with C " + what);
        CheckEverywhere(wa, wb, c, m, "wide scales with C " + what);
      }
    }
  }
}

TEST_CASE("gemm: blackwell-mxf8f6f4 truncates products below 2^(emax - 25) where the exact sum would keep them",
          "[gemm]") {
  // One step of 32: 256 * 256 = 2^16 beside 31 products 2^-5 * 2^-5 = 2^-10. emax = 16 puts the cut at
  // 2^-9, so each 2^-10 is truncated away and the result is 65536; the exact sum 65536 + 31 * 2^-10
  // rounded toward zero to FP32 would be 65536 + 3 * 2^-7.
  const AccumModel m = AccumModelByName("blackwell-mxf8f6f4");
  const uint8_t big = static_cast<uint8_t>(ConvertF32(256.0f, fmt::kE4M3, CastOptions{}));
  const uint8_t small = static_cast<uint8_t>(ConvertF32(0x1p-5f, fmt::kE4M3, CastOptions{}));
  std::vector<uint8_t> av(32, small), bv(32, small);
  av[0] = bv[0] = big;
  GemmOperand a = OperandFromCodes(fmt::kE4M3, 1, 32, av.data()), b = OperandFromCodes(fmt::kE4M3, 32, 1, bv.data());
  std::mt19937 rng(1);
  qmx::test::AddUe8m0(a, true, 32, rng, 0, 0);
  qmx::test::AddUe8m0(b, false, 32, rng, 0, 0);
  CHECK(GemmRef(a, b, nullptr, m)[0] == 65536.0f);
  CHECK(Gemm(a, b, nullptr, m)[0] == 65536.0f);
  // Without the large product nothing is cut: 31 * 2^-10 exactly.
  GemmOperand a2 = a, b2 = b;
  a2.codes[0] = b2.codes[0] = small;
  CHECK(GemmRef(a2, b2, nullptr, m)[0] == 32 * 0x1p-10f);
  CHECK(Gemm(a2, b2, nullptr, m)[0] == 32 * 0x1p-10f);
}

TEST_CASE("gemm: a step result just below 2^-126, which a rounding scale-by-2^unit lifts to 2^-126, is rounded by the model",
          "[gemm]") {
  // E5M2 with block scales 2^-63: 1 * 1 = 2^-126 (emax = -126, units of 2^-151) beside -1.5 2^-9 * 2^-16
  // = -1.5 units, truncated to -1: the total 2^25 - 1 units is cut to 24 bits, (2^24 - 1) 2^-150, just
  // below FP32's normal range. The model keeps its exponent at -126 and truncates there: (2^23 - 1)
  // 2^-149. Scaling 2^24 - 1 by 2^-150 with rounding to nearest would give 2^-126 itself; the kernels
  // must send such a lane to their general rounding. 4 x 32 outputs: a whole tile on every vector width.
  const size_t m = 4, k = 32, n = 32;
  std::vector<uint8_t> av(m * k, 0), bv(k * n, 0);
  for (size_t i = 0; i < m; ++i) av[i * k] = 0x3C, av[i * k + 1] = 0x9A;  // 1.0, -1.5 * 2^-9
  for (size_t j = 0; j < n; ++j) bv[j] = 0x3C, bv[n + j] = 0x01;          // 1.0, 2^-16
  GemmOperand a = OperandFromCodes(fmt::kE5M2, m, k, av.data()), b = OperandFromCodes(fmt::kE5M2, k, n, bv.data());
  std::mt19937 rng(1);
  qmx::test::AddUe8m0(a, true, 32, rng, -63, -63);
  qmx::test::AddUe8m0(b, false, 32, rng, -63, -63);
  const AccumModel model = AccumModelByName("blackwell-mxf8f6f4");
  CHECK(GemmRef(a, b, nullptr, model)[0] == std::ldexp(float((1 << 23) - 1), -149));
  CheckEverywhere(a, b, {}, model, "just below 2^-126");
}

TEST_CASE("gemm: scales-in-products steps whose term sum passes 2^31 units (the FP32 kernel's wrapped int32 total)",
          "[gemm]") {
  // 32 products of 448 * 448 of one sign: each term is 3.0625 * 2^25 units of 2^(emax - 25), their sum
  // 2^31.6 units, beyond int32. Rows alternate the sign of their first half so both signs wrap, and one
  // row mixes signs (no wrap) beside them.
  std::mt19937 rng(3);
  const uint8_t max = static_cast<uint8_t>(ConvertF32(448.0f, fmt::kE4M3, CastOptions{}));
  const uint8_t neg = static_cast<uint8_t>(max | 0x80);
  const size_t m = 9, k = 96, n = 37;
  std::vector<uint8_t> av(m * k, max), bv(k * n, max);
  for (size_t i = 0; i < m; ++i)
    for (size_t kk = 0; kk < k; ++kk) {
      if (i % 2 == 1) av[i * k + kk] = neg;
      if (i == 4 && kk % 2 == 0) av[i * k + kk] = neg;
    }
  GemmOperand a = OperandFromCodes(fmt::kE4M3, m, k, av.data()), b = OperandFromCodes(fmt::kE4M3, k, n, bv.data());
  qmx::test::AddUe8m0(a, true, 32, rng, -2, 2);
  qmx::test::AddUe8m0(b, false, 32, rng, -2, 2);
  std::vector<float> c(m * n);
  for (size_t i = 0; i < c.size(); ++i) c[i] = (i % 3 == 0 ? -1.0f : 1.0f) * std::ldexp(1.0f, static_cast<int>(i % 40));
  const char* const name = GENERATE(values<const char*>({"blackwell-mxf8f6f4", "fused:step=32,F=25,term=rne,out=rne,zero-exp=-133,scale=products"}));
  CAPTURE(name);
  const AccumModel model = AccumModelByName(name);
  CheckEverywhere(a, b, {}, model, std::string("same-sign maxima ") + name);
  CheckEverywhere(a, b, c, model, std::string("same-sign maxima with C ") + name);
}

TEST_CASE("gemm: FP32-lane fused kernels on the bench's data, where many steps cut small products", "[gemm]") {
  // Gaussian values (sigma 64) as E4M3 or E5M2 codes with UE8M0 scales 2^-4..2^4 per block: as the
  // accumulator grows past the step's products, products 25 bits below emax are truncated in about a
  // quarter of the (output, step) pairs, and the mixed scales move emax between the accumulator and the
  // products from step to step. K = 320 + 17 leaves a ragged last step.
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 64.0f);
  const size_t m = 29, n = 75, k = 337;
  const Format* const f = GENERATE(values<const Format*>({&fmt::kE4M3, &fmt::kE5M2}));
  CAPTURE(f->name);
  std::vector<float> xa(m * k), xb(k * n);
  for (float& v : xa) v = nd(rng);
  for (float& v : xb) v = nd(rng);
  std::vector<uint8_t> ca(xa.size()), cb(xb.size());
  ConvertToCodes(DType::kF32, xa.data(), xa.size(), *f, CastOptions{}, ca.data());
  ConvertToCodes(DType::kF32, xb.data(), xb.size(), *f, CastOptions{}, cb.data());
  GemmOperand a = OperandFromCodes(*f, m, k, ca.data()), b = OperandFromCodes(*f, k, n, cb.data());
  GemmOperand sa = a, sb = b;
  qmx::test::AddUe8m0(sa, true, 32, rng, -4, 4);
  qmx::test::AddUe8m0(sb, false, 32, rng, -4, 4);
  std::vector<float> c(m * n);
  for (float& v : c) v = nd(rng) * 1000.0f;
  const std::string what = std::string("bench-like ") + f->name;
  for (const char* name : {"blackwell-mxf8f6f4", "fused:step=32,F=25,term=rne,out=rz,zero-exp=-133,scale=products"}) {
    CheckEverywhere(sa, sb, {}, AccumModelByName(name), what);
    CheckEverywhere(sa, sb, c, AccumModelByName(name), what + " with C");
  }
  // The same codes under the Hopper models (FP32 terms, F = 13, promotion every 128): with C, and with
  // per-tensor scales (which take no C).
  GemmOperand ta = a, tb = b;
  ta.tensor_scale = 0.5f;
  tb.tensor_scale = 3.0f;
  for (const char* name : {"hopper-fp8", "hopper-fp8-fast", "ada-fp8"}) {
    CheckEverywhere(a, b, c, AccumModelByName(name), what + " with C");
    CheckEverywhere(ta, tb, {}, AccumModelByName(name), what + " per-tensor scales");
  }
}

TEST_CASE("gemm: block scales as codes of any narrow format (UE4M3, AMD's E5M3) give their values' results", "[gemm]") {
  std::mt19937 rng(31);
  const size_t m = 9, k = 128, n = 7, block = 16;
  const GemmOperand a0 = Shaped(fmt::kE2M1, m, k, true, rng), b0 = Shaped(fmt::kE2M1, k, n, false, rng);
  const size_t na = m * (k / block), nb = (k / block) * n;
  const char* models[] = {"exact", "fp32-seq", "block-exact", "blackwell-mxf4nvf4", "blackwell-mxf8f6f4",
                          "fused:step=64,F=25,bits=24,out=rz,scale=products"};
  SECTION("E4M3 scale codes read as UE4M3 (the sign ignored) equal ue4m3 codes, NaN and zero scales included") {
    std::vector<uint32_t> sa(na), sb(nb);
    for (auto& s : sa) s = 1 + rng() % 0x7E;
    for (auto& s : sb) s = 1 + rng() % 0x7E;
    sa[3] = 0;     // a zero scale
    sb[5] = 0x7F;  // a NaN scale
    sa[7] = 1;     // the smallest subnormal, 2^-9
    GemmOperand a = a0, b = b0, ua = a0, ub = b0;
    SetBlockScales(a, ScaleFormat::kE4m3, 1, block, sa.data());
    SetBlockScales(b, ScaleFormat::kE4m3, block, 1, sb.data());
    const BlockScaleFormat ue4m3 = ParseBlockScaleFormat("ue4m3");
    REQUIRE(ue4m3.kind == ScaleFormat::kCode);
    SetBlockScales(ua, ue4m3, 1, block, sa.data());
    SetBlockScales(ub, ue4m3, block, 1, sb.data());
    for (const char* name : models) {
      const AccumModel model = AccumModelByName(name);
      RequireSame(Gemm(ua, ub, nullptr, model), Gemm(a, b, nullptr, model), std::string("ue4m3 / ") + name);
      CheckEverywhere(ua, ub, {}, model, "ue4m3 codes");
    }
  }
  SECTION("E5M3 (bias 15, NaN 0xFF): normal codes equal FP32 scales of the same values; subnormal ones the reference") {
    const BlockScaleFormat e5m3 = ParseBlockScaleFormat("ue5m3");
    REQUIRE(e5m3.kind == ScaleFormat::kCode);
    CHECK(DecodeToFloat(e5m3.code, 0xFE) == 114688.0f);  // 2^16 * 1.75
    CHECK(DecodeToFloat(e5m3.code, 0x01) == std::ldexp(1.0f, -17));
    CHECK(std::isnan(DecodeToFloat(e5m3.code, 0xFF)));
    std::vector<uint32_t> sa(na), sb(nb), fa(na), fb(nb);
    for (auto& s : sa) s = 8 + rng() % (0xF8 - 8);  // exponent fields 1 .. 30: normal, finite
    for (auto& s : sb) s = 8 + rng() % (0xF8 - 8);
    for (size_t i = 0; i < na; ++i) fa[i] = FloatBits(DecodeToFloat(e5m3.code, sa[i]));
    for (size_t i = 0; i < nb; ++i) fb[i] = FloatBits(DecodeToFloat(e5m3.code, sb[i]));
    GemmOperand a = a0, b = b0, fa_op = a0, fb_op = b0;
    SetBlockScales(a, e5m3, 1, block, sa.data());
    SetBlockScales(b, e5m3, block, 1, sb.data());
    SetBlockScales(fa_op, ScaleFormat::kFp32, 1, block, fa.data());
    SetBlockScales(fb_op, ScaleFormat::kFp32, block, 1, fb.data());
    for (const char* name : models) {
      const AccumModel model = AccumModelByName(name);
      RequireSame(Gemm(a, b, nullptr, model), Gemm(fa_op, fb_op, nullptr, model), std::string("e5m3 normal / ") + name);
    }
    // Subnormal E5M3 scales (2^-17 .. 2^-14 * 7/8): their nominal exponent is the format's emin (-14), so the
    // fused models differ from FP32 scales there; the fast kernels equal the reference.
    for (size_t i = 0; i < na; i += 3) sa[i] = 1 + rng() % 7;
    for (size_t i = 0; i < nb; i += 4) sb[i] = 1 + rng() % 7;
    SetBlockScales(a, e5m3, 1, block, sa.data());
    SetBlockScales(b, e5m3, block, 1, sb.data());
    for (const char* name : models) CheckEverywhere(a, b, {}, AccumModelByName(name), "e5m3 with subnormal scales");
  }
  SECTION("bad scale codes and names are refused with the reason") {
    GemmOperand a = a0;
    std::vector<uint32_t> s(na, 0x38);
    s[2] = 0x81;  // the sign bit set: a negative value in a signed format
    CHECK_THROWS_WITH(SetBlockScales(a, ParseBlockScaleFormat("e4m3fnuz"), 1, block, s.data()),
                      Catch::Contains("block scale 2 (0x81) is negative in e4m3fnuz"));
    s[2] = 0x80;  // ue4m3 is 7 bits
    CHECK_THROWS_WITH(SetBlockScales(a, ParseBlockScaleFormat("ue4m3"), 1, block, s.data()),
                      Catch::Contains("does not fit ue4m3's 7 bits"));
    CHECK_THROWS_WITH(ParseBlockScaleFormat("e4m4x"), Catch::Contains("unknown block-scale format 'e4m4x'"));
    CHECK_THROWS_WITH(ParseBlockScaleFormat("e9m9"), Catch::Contains("not a floating-point format of 8 bits or fewer"));
    CHECK_THROWS_WITH(ParseBlockScaleFormat("bf16"), Catch::Contains("not a floating-point format of 8 bits or fewer"));
    CHECK_THROWS_WITH(ParseBlockScaleFormat("int8"), Catch::Contains("not a floating-point format of 8 bits or fewer"));
  }
}
