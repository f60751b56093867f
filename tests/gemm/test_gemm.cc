// test_gemm.cc: the GEMM layer. The fast paths against the scalar reference for every model on random,
// structured and adversarial operands (MX, NVFP4, blockwise and per-tensor scales, ragged K, specials);
// the Highway kernels on every SIMD target with shapes that cross their tiles, chunks and thread blocks;
// `exact` against MPFR; the Hopper models against H200 tensor-core outputs (golden/gemm-hopper); hand-worked
// fused-step cases; clear errors.
#include <mpfr.h>
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/testing.h"
#include "support/hex.h"
#include "support/modes.h"
#include "gemm/gemm_cases.h"

using namespace qmx;
using qmx::test::FloatBits;
using qmx::test::Hex;
using qmx::test::AddFp32;
using qmx::test::AddUe8m0;
using qmx::test::CheckEverywhere;
using qmx::test::Codes;
using qmx::test::FloatsOf;
using qmx::test::ModelsUnderTest;
using qmx::test::RandomCodes;
using qmx::test::RequireSame;

namespace {

// Runs every model that accepts the operands, fast (1 and 2 threads) against the reference.
void CheckAllModels(const GemmOperand& a, const GemmOperand& b, const float* c, const std::string& what) {
  for (const AccumModel& m : ModelsUnderTest()) {
    std::vector<float> ref;
    try {
      ref = GemmRef(a, b, c, m);
    } catch (const Error&) {
      continue;  // the model does not fit these scales (e.g. scales at promotion without promotion)
    }
    omp_set_num_threads(1);
    const std::vector<float> one = Gemm(a, b, c, m);
    omp_set_num_threads(2);
    const std::vector<float> two = Gemm(a, b, c, m);
    RequireSame(one, ref, what + " / " + m.name + " (1 thread)");
    RequireSame(two, ref, what + " / " + m.name + " (2 threads)");
  }
}

}  // namespace

TEST_CASE("gemm: fast paths equal the reference for every model, plain codes", "[gemm]") {
  std::mt19937 rng(11);
  const Format fmts[] = {fmt::kE4M3, fmt::kE5M2, fmt::kE2M1, fmt::kE3M2, fmt::kE2M3};
  const size_t shapes[][3] = {{5, 7, 96}, {9, 130, 64}, {3, 3, 300}, {1, 1, 1}, {4, 17, 33}};
  for (const Format& fa : fmts)
    for (const Format& fb : {fmt::kE4M3, fmt::kE5M2, fmt::kE2M1}) {
      for (const auto& s : shapes) {
        const GemmOperand a = Codes(fa, s[0], s[2], rng), b = Codes(fb, s[2], s[1], rng);
        CheckAllModels(a, b, nullptr, std::string(fa.name) + "x" + fb.name);
      }
    }
  // With C, including FP32 subnormals and values that the fused step truncates.
  const GemmOperand a = Codes(fmt::kE4M3, 6, 64, rng), b = Codes(fmt::kE4M3, 64, 10, rng);
  std::vector<float> c(60);
  std::normal_distribution<float> nd;
  for (size_t i = 0; i < c.size(); ++i) c[i] = i % 7 == 0 ? std::ldexp(1.0f, -140) : nd(rng) * std::ldexp(1.0f, int(i % 20) - 10);
  CheckAllModels(a, b, c.data(), "e4m3 with C");
  // Steps whose groups are all zero (rows of A zero over whole steps, row 2 entirely), with C below 1:
  // the zero terms' exponent decides where C's term is truncated.
  std::vector<uint8_t> sparse = RandomCodes(fmt::kE2M1, 6 * 64, rng, false);
  for (size_t i = 0; i < sparse.size(); ++i)
    if ((i / 8) % 3 != 0 || i / 64 == 2) sparse[i] = 0;
  const GemmOperand z = OperandFromCodes(fmt::kE2M1, 6, 64, sparse.data()), zb = Codes(fmt::kE2M1, 64, 10, rng);
  CheckAllModels(z, zb, c.data(), "e2m1, sparse A, with C");
}

// K = 0 (an empty product): every model gives C, or +0 without C. The fused models' scaled kernel divided by
// zero here (SIGFPE) before GemmFast left K = 0 to the reference.
TEST_CASE("gemm: K = 0 gives C under every model, with and without block scales", "[gemm]") {
  std::vector<float> c(6 * 5);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(i) - 12.5f;  // FP16 values too
  c[3] = -0.0f;
  for (int scaled = 0; scaled < 2; ++scaled) {
    GemmOperand a = OperandFromCodes(fmt::kE4M3, 6, 0, nullptr), b = OperandFromCodes(fmt::kE4M3, 0, 5, nullptr);
    if (scaled) {
      a.scale_format = b.scale_format = ScaleFormat::kUe8m0;
      a.block_rows = 1, a.block_cols = 32, a.scale_rows = 6, a.scale_cols = 0;
      b.block_rows = 32, b.block_cols = 1, b.scale_rows = 0, b.scale_cols = 5;
    }
    for (const AccumModel& m : ModelsUnderTest()) {
      for (const float* cc : {static_cast<const float*>(nullptr), static_cast<const float*>(c.data())}) {
        std::vector<float> want(c.size(), 0.0f);
        if (cc != nullptr) want = c;
        std::vector<float> got;
        try {
          got = Gemm(a, b, cc, m);
        } catch (const Error&) {
          continue;  // scales at promotion without promotion, and the like: refused, not crashed
        }
        INFO(m.name << (scaled ? " scaled" : "") << (cc ? " with C" : ""));
        RequireSame(got, want, "K = 0");
        RequireSame(GemmRef(a, b, cc, m), want, "K = 0, reference");
      }
    }
  }
}

TEST_CASE("gemm: fast paths equal the reference with MX, NVFP4, blockwise and per-tensor scales", "[gemm]") {
  std::mt19937 rng(12);
  // MXFP8 / MXFP4: 1x32 UE8M0 along K, ordinary and extreme scale exponents (products near 2^+-254).
  for (const Format& f : {fmt::kE4M3, fmt::kE2M1, fmt::kE5M2}) {
    for (const auto& range : {std::pair<int, int>{-8, 8}, std::pair<int, int>{-127, -100}, std::pair<int, int>{100, 127}}) {
      GemmOperand a = Codes(f, 7, 96, rng), b = Codes(f, 96, 9, rng);
      AddUe8m0(a, true, 32, rng, range.first, range.second);
      AddUe8m0(b, false, 32, rng, range.first, range.second);
      CheckAllModels(a, b, nullptr, std::string("mx ") + f.name);
    }
  }
  // NVFP4: 1x16 E4M3 scales (some zero) with tensor scales.
  {
    GemmOperand a = Codes(fmt::kE2M1, 5, 64, rng), b = Codes(fmt::kE2M1, 64, 6, rng);
    AddFp32(a, 1, 16, rng, ScaleFormat::kE4m3);
    AddFp32(b, 16, 1, rng, ScaleFormat::kE4m3);
    a.tensor_scale = 0.0123f;
    b.tensor_scale = 3.5f;
    CheckAllModels(a, b, nullptr, "nvfp4");
  }
  // Blockwise FP8: 1x128 for A, 128x128 for B, FP32 scales; and 1x128 on both sides.
  {
    GemmOperand a = Codes(fmt::kE4M3, 6, 384, rng), b = Codes(fmt::kE4M3, 384, 130, rng);
    AddFp32(a, 1, 128, rng);
    AddFp32(b, 128, 128, rng);
    CheckAllModels(a, b, nullptr, "block 1x128 x 128x128");
    GemmOperand b2 = Codes(fmt::kE4M3, 384, 5, rng);
    AddFp32(b2, 128, 1, rng);
    CheckAllModels(a, b2, nullptr, "block 1x128 x 128x1");
  }
  // Per-tensor FP32 scales.
  {
    GemmOperand a = Codes(fmt::kE4M3, 4, 200, rng), b = Codes(fmt::kE5M2, 200, 4, rng);
    a.tensor_scale = 1.5f / 448;
    b.tensor_scale = 7.0f;
    CheckAllModels(a, b, nullptr, "per-tensor");
  }
}

TEST_CASE("gemm: the Highway kernels equal the reference on every SIMD target, across tiles and chunks", "[gemm]") {
  // 50 rows: several 6- and 4-row panels and two thread blocks; 70 columns: edge panels on every
  // vector width; K = 600: chunks of 256 and a partial last scale block.
  std::mt19937 rng(21);
  struct Case {
    std::string what;
    GemmOperand a, b;
    std::vector<float> c;
  };
  std::vector<Case> cases;
  {
    Case k{"mxfp8", Codes(fmt::kE4M3, 50, 600, rng), Codes(fmt::kE4M3, 600, 70, rng), {}};
    AddUe8m0(k.a, true, 32, rng, -6, 6);
    AddUe8m0(k.b, false, 32, rng, -6, 6);
    cases.push_back(k);
    Case f4{"mxfp4 with C", Codes(fmt::kE2M1, 50, 600, rng), Codes(fmt::kE2M1, 600, 70, rng), {}};
    AddUe8m0(f4.a, true, 32, rng, -3, 3);
    AddUe8m0(f4.b, false, 32, rng, -3, 3);
    std::normal_distribution<float> nd;
    for (int i = 0; i < 50 * 70; ++i) f4.c.push_back(i % 11 == 0 ? 0x1p-140f : nd(rng) * 100);
    cases.push_back(f4);
    Case mixed{"e5m2 x e4m3 tensor-scaled", Codes(fmt::kE5M2, 50, 600, rng), Codes(fmt::kE4M3, 600, 70, rng), {}};
    mixed.a.tensor_scale = 0.75f;
    mixed.b.tensor_scale = 1.0f / 448;
    cases.push_back(mixed);
    Case blk{"blockwise 1x128", Codes(fmt::kE4M3, 50, 600, rng), Codes(fmt::kE4M3, 600, 70, rng), {}};
    AddFp32(blk.a, 1, 128, rng);
    AddFp32(blk.b, 128, 1, rng);
    cases.push_back(blk);
  }
  // Adversarial: one large product among many tiny ones per row, and exact cancellation in pairs.
  {
    std::vector<uint8_t> ca(50 * 600, 0x01), cb(600 * 70, 0x01);  // e4m3 2^-9, the smallest subnormal
    for (size_t i = 0; i < 50; ++i) ca[i * 600 + (i * 37) % 600] = 0x7E;  // 448
    for (size_t kk = 0; kk < 600; ++kk)
      for (size_t j = 0; j < 70; ++j) cb[kk * 70 + j] = (kk + j) % 97 == 0 ? 0x7E : ((kk & 1) ? 0x81 : 0x01);
    cases.push_back({"one large product, tiny ones, cancellation", OperandFromCodes(fmt::kE4M3, 50, 600, ca.data()),
                     OperandFromCodes(fmt::kE4M3, 600, 70, cb.data()), {}});
    std::vector<uint8_t> xa(50 * 600), xb(600 * 70);
    for (size_t i = 0; i < xa.size(); ++i) xa[i] = static_cast<uint8_t>(rng() % 0x7E);
    for (size_t kk = 0; kk < 600; ++kk)  // column pairs k, k+1 of B cancel exactly against equal A entries
      for (size_t j = 0; j < 70; ++j) xb[kk * 70 + j] = static_cast<uint8_t>((kk & 1) ? (xb[(kk - 1) * 70 + j] ^ 0x80) : rng() % 0x7E);
    for (size_t i = 0; i < 50; ++i)
      for (size_t kk = 1; kk < 600; kk += 2) xa[i * 600 + kk] = xa[i * 600 + kk - 1];
    cases.push_back({"exact cancellation", OperandFromCodes(fmt::kE4M3, 50, 600, xa.data()),
                     OperandFromCodes(fmt::kE4M3, 600, 70, xb.data()), {}});
  }
  // Overflow inside the accumulation: the kernels hand those rows to the reference.
  {
    Case big{"overflow mid-sum", Codes(fmt::kE4M3, 12, 600, rng), Codes(fmt::kE4M3, 600, 40, rng), {}};
    AddUe8m0(big.a, true, 32, rng, 100, 127);
    AddUe8m0(big.b, false, 32, rng, 0, 20);
    big.c.assign(12 * 40, 3.0e38f);
    big.c[5] = -3.0e38f;
    cases.push_back(big);
  }
  qmx::test::TargetGuard guard;
  for (const Case& k : cases) {
    const float* c = k.c.empty() ? nullptr : k.c.data();
    for (const AccumModel& m : ModelsUnderTest()) {
      std::vector<float> ref;
      try {
        ref = GemmRef(k.a, k.b, c, m);
      } catch (const Error&) {
        continue;
      }
      for (const std::string& target : SimdTargets()) {
        ForceSimdTarget(target);
        omp_set_num_threads(2);
        RequireSame(Gemm(k.a, k.b, c, m), ref, k.what + " / " + m.name + " / " + target);
      }
      ForceSimdTarget("");
      omp_set_num_threads(1);
      RequireSame(Gemm(k.a, k.b, c, m), ref, k.what + " / " + m.name + " / 1 thread");
    }
  }
}

TEST_CASE("gemm: the fused kernels' lean steps and exponent-add terms equal the reference at C's extremes", "[gemm]") {
  // The exponent-add terms clamp each output's shift at 0 where C dwarfs every product (2^60, 2^100: emax
  // past F + c) and at 125 where a step has no nonzero product and C is tiny or zero (emax at the -126
  // floor); the lean steps' one range test sends units below -126 or above 103 to the general rounding
  // (C near 2^-126, subnormal, and near FP32's top, where some outputs overflow to the reference).
  // Row 0 of A is zero, row 1 holds only the smallest subnormal; E4M3 and E5M2 give different shifts c.
  // C's values below the zero rule's reach (2^-118) and near 2^128 send their whole rows to the reference
  // (ZeroRuleRisks, overflow), so they stay in rows 7 and 8; the kernel decides every other row. F = 25
  // (rtx-blackwell-f8f6f4, blackwell-mxf8f6f4, the fused: string) runs the scaled kernel's lean steps.
  std::mt19937 rng(46);
  const float extremes[] = {0.0f, -0.0f, 0x1p60f, -0x1p100f, 1.0f, 0x1p110f, -0x1p-110f, 0x1.8p-117f};
  const float referred[] = {0x1p-140f, -0x1p-149f, 0x1p-126f, -0x1.8p-120f, 0x1.fffffep127f, -0x1p127f};
  const char* models[] = {"ada-mma-fp8",          "ada-mma-fp8-k16",    "hopper-fp8-fast",
                          "rtx-blackwell-f8f6f4", "blackwell-mxf8f6f4", "fused:step=32,F=25,zero-exp=-126",
                          "fused:step=16,F=13,term=rne,out=rz"};
  // K = 40 as well: two and a half steps, before a wrong term's garbage could grow into an overflow that the
  // reference would then redo.
  for (const size_t k : {96, 40}) {
    for (const Format* fa : {&fmt::kE4M3, &fmt::kE5M2}) {
      const size_t m = 9, n = 37;
      std::vector<uint8_t> ca = RandomCodes(*fa, m * k, rng, false), cb = RandomCodes(fmt::kE4M3, k * n, rng, false);
      std::fill(ca.begin(), ca.begin() + k, uint8_t{0});
      std::fill(ca.begin() + k, ca.begin() + 2 * k, uint8_t{0x01});
      const GemmOperand a = OperandFromCodes(*fa, m, k, ca.data()), b = OperandFromCodes(fmt::kE4M3, k, n, cb.data());
      std::vector<float> c(m * n);
      std::normal_distribution<float> nd;
      for (size_t i = 0; i < c.size(); ++i) {
        if (i / n >= 7) c[i] = referred[rng() % std::size(referred)];
        else c[i] = i % 3 == 0 ? nd(rng) : extremes[rng() % std::size(extremes)];
      }
      for (const char* name : models)
        CheckEverywhere(a, b, c, AccumModelByName(name), std::string(fa->name) + " x e4m3, K " + std::to_string(k));
    }
  }
}

TEST_CASE("gemm: GemmInto writes Gemm's bits into the caller's storage, C itself included", "[gemm]") {
  std::mt19937 rng(47);
  const GemmOperand a = Codes(fmt::kE4M3, 13, 70, rng), b = Codes(fmt::kE5M2, 70, 21, rng);
  std::vector<float> c(13 * 21);
  std::normal_distribution<float> nd;
  for (float& v : c) v = nd(rng) * 64;
  for (const char* name : {"ada-mma-fp8", "exact", "fp32-seq", "hopper-fp8"}) {
    const AccumModel m = AccumModelByName(name);
    const std::vector<float> want = Gemm(a, b, c.data(), m), plain = Gemm(a, b, nullptr, m);
    std::vector<float> d(c.size(), std::numeric_limits<float>::quiet_NaN());  // stale contents are overwritten
    GemmInto(a, b, c.data(), m, d.data());
    RequireSame(d, want, std::string(name) + " into a buffer");
    GemmInto(a, b, nullptr, m, d.data());
    RequireSame(d, plain, std::string(name) + " without C into a used buffer");
    std::vector<float> inplace = c;  // D = A B + C over C
    GemmInto(a, b, inplace.data(), m, inplace.data());
    RequireSame(inplace, want, std::string(name) + " in place");
  }
  CHECK_THROWS_WITH(GemmInto(a, b, nullptr, AccumModelByName("exact"), nullptr), Catch::Contains("D is null"));
  const GemmOperand wrong = Codes(fmt::kE4M3, 71, 5, rng);
  std::vector<float> d(13 * 5, 7.0f);
  CHECK_THROWS_AS(GemmInto(a, wrong, nullptr, AccumModelByName("exact"), d.data()), Error);
  CHECK(d == std::vector<float>(13 * 5, 7.0f));  // a rejected call leaves D alone
}

TEST_CASE("gemm: block-exact rounds each block once into FP32 where a double sum would round twice", "[gemm]") {
  // Block 2's sum 256*256 + 2^-9*2^-9 = 2^16 + 2^-18 is exact in FP64; scaled, it meets the FP32
  // accumulator of block 1 at a distance the double sum cannot hold, just past an FP32 midpoint:
  //   1 + (2^-24 + 2^-58)          -> 1 + 2^-23 (a double sum first would give the tie, then 1)
  //   2^-127 + (2^-150 + 2^-184)   -> 2^-127 + 2^-149, in FP32's subnormal range
  // and just short of one, from an odd accumulator (block 1: 256*256 + 2^-6*0.5 = 2^16 + 2^-7, scaled by
  // 2^-16; block 2: 256*256 - 2^-9*2^-9, scaled by 2^-40), where rounding the double sum up gives the tie
  // and then the even neighbour:
  //   (1 + 2^-23) + (2^-24 - 2^-58) -> 1 + 2^-23, not 1 + 2^-22; and the same negated.
  // Each is a 1 x 1 product of K = 64, so no other output shares its vector lanes.
  const auto run = [](const std::vector<uint8_t>& ca, const std::vector<uint8_t>& cb, float sa1, float sa2, float sb1,
                      float sb2, float want) {
    GemmOperand a = OperandFromCodes(fmt::kE4M3, 1, 64, ca.data());
    GemmOperand b = OperandFromCodes(fmt::kE4M3, 64, 1, cb.data());
    std::mt19937 rng(1);
    AddUe8m0(a, true, 32, rng, 0, 0);
    AddUe8m0(b, false, 32, rng, 0, 0);
    a.scales = {sa1, sa2};
    b.scales = {sb1, sb2};
    const AccumModel m = AccumModelByName("block-exact");
    const std::vector<float> ref = GemmRef(a, b, nullptr, m);
    CHECK(FloatBits(ref[0]) == FloatBits(want));
    qmx::test::TargetGuard guard;
    for (const std::string& target : SimdTargets()) {
      ForceSimdTarget(target);
      RequireSame(Gemm(a, b, nullptr, m), ref, "block-exact double rounding / " + target);
    }
  };
  std::vector<uint8_t> past(64, 0);
  past[0] = 0x38;   // 1.0
  past[32] = 0x78;  // 256
  past[33] = 0x01;  // 2^-9
  run(past, past, 1.0f, 0x1p-20f, 1.0f, 0x1p-20f, 1.0f + 0x1p-23f);
  run(past, past, 0x1p-64f, 0x1p-83f, 0x1p-63f, 0x1p-83f, 0x1p-127f + 0x1p-149f);
  std::vector<uint8_t> sa(64, 0), sb(64, 0);
  sa[0] = sb[0] = sa[32] = sb[32] = 0x78;  // 256
  sa[1] = 0x08;                            // 2^-6
  sb[1] = 0x30;                            // 0.5
  sa[33] = 0x01;                           // 2^-9
  sb[33] = 0x81;                           // -2^-9
  run(sa, sb, 0x1p-8f, 0x1p-20f, 0x1p-8f, 0x1p-20f, 1.0f + 0x1p-23f);
  std::vector<uint8_t> na = sa;
  for (uint8_t& c : na) c = c != 0 ? static_cast<uint8_t>(c ^ 0x80) : c;
  run(na, sb, 0x1p-8f, 0x1p-20f, 0x1p-8f, 0x1p-20f, -(1.0f + 0x1p-23f));
}

#if defined(__x86_64__) || defined(__i386__)  // (MXCSR; the library sets only x86's modes, fp_env.h)
TEST_CASE("gemm: every model gives the reference's bits under a caller's FTZ, DAZ and directed rounding", "[gemm]") {
  // The kernels add and multiply in the FPU (FMA sums, FP64 block sums, the scale products); the products
  // here reach FP32's subnormal range (scales 2^-75 .. 2^-60 on each side). The modes are set on every
  // OpenMP thread, as a framework that sets FTZ at start-up would leave them.
  std::mt19937 rng(21);
  GemmOperand a8 = Codes(fmt::kE4M3, 101, 96, rng), b8 = Codes(fmt::kE4M3, 96, 17, rng);  // 101 rows: several tile blocks
  GemmOperand a4 = Codes(fmt::kE2M1, 101, 96, rng), b4 = Codes(fmt::kE2M1, 96, 17, rng);
  AddUe8m0(a8, true, 32, rng, -75, -60);
  AddUe8m0(b8, false, 32, rng, -75, -60);
  AddUe8m0(a4, true, 32, rng, -75, -60);
  AddUe8m0(b4, false, 32, rng, -75, -60);
  struct Case {
    const GemmOperand *a, *b;
    AccumModel m;
    std::vector<float> want;
  };
  std::vector<Case> cases;
  for (const AccumModel& m : ModelsUnderTest())
    for (const auto& [a, b] : {std::pair{&a8, &b8}, std::pair{&a4, &b4}}) {
      try {
        cases.push_back({a, b, m, GemmRef(*a, *b, nullptr, m)});
      } catch (const Error&) {
      }
    }
  REQUIRE(cases.size() >= 8);
  const auto set_all = [](unsigned csr) {
    _mm_setcsr(csr);
#pragma omp parallel num_threads(2)
    _mm_setcsr(csr);
  };
  const unsigned saved = _mm_getcsr();
  qmx::test::TargetGuard guard;
  for (unsigned mode : {0x6000u | 0x8000u | 0x0040u, 0x4000u}) {  // toward zero + FTZ + DAZ; upward
    for (const std::string& target : SimdTargets()) {
      ForceSimdTarget(target);
      std::vector<std::vector<float>> got;
      set_all((saved & ~0xE040u) | mode);
      for (const Case& c : cases)
        for (Exec e : {Exec::kSequential, Exec::kParallel}) got.push_back(Gemm(*c.a, *c.b, nullptr, c.m, e));
      const unsigned after = _mm_getcsr();
      set_all(saved);
      CHECK(after == ((saved & ~0xE040u) | mode));  // the caller's modes come back
      for (size_t i = 0; i < got.size(); ++i) {
        const Case& c = cases[i / 2];
        RequireSame(got[i], c.want, target + " " + c.m.name + " " + c.a->elem.name + (i % 2 ? " parallel" : " sequential") +
                                        " MXCSR modes " + Hex(mode, 4));
      }
    }
  }
}
#endif

TEST_CASE("gemm: specials follow the models (NaN, Inf, NaN scales, overflow)", "[gemm]") {
  std::mt19937 rng(13);
  GemmOperand a = Codes(fmt::kE5M2, 6, 64, rng, true), b = Codes(fmt::kE5M2, 64, 7, rng, true);
  CheckAllModels(a, b, nullptr, "e5m2 with Inf and NaN");
  GemmOperand c = Codes(fmt::kE4M3, 4, 64, rng, true), d = Codes(fmt::kE4M3, 64, 4, rng, true);
  AddUe8m0(c, true, 32, rng, -3, 3);
  AddUe8m0(d, false, 32, rng, -3, 3);
  c.scales[1] = NAN;  // a UE8M0 0xFF scale
  CheckAllModels(c, d, nullptr, "mx with a NaN scale");
  // Overflow: scales 2^127 x 2^127 make the products overflow FP32. exact (RNE) and the fused models
  // give Inf (the tensor cores overflow to Inf even under RZ).
  const uint8_t one[32] = {0x38, 0x38, 0x38, 0x38};  // e4m3 1.0 in the first four lanes
  GemmOperand x = OperandFromCodes(fmt::kE4M3, 1, 32, one), y = OperandFromCodes(fmt::kE4M3, 32, 1, one);
  AddUe8m0(x, true, 32, rng, 127, 127);
  AddUe8m0(y, false, 32, rng, 127, 127);
  qmx::test::TargetGuard guard;
  for (const char* m : {"exact", "block-exact", "blackwell-mxf8f6f4", "fp32-seq", "hopper-fp8", "blackwell-mxf4nvf4"}) {
    INFO(m);
    CHECK(std::isinf(GemmRef(x, y, nullptr, AccumModelByName(m))[0]));
    for (const std::string& target : SimdTargets()) {  // (Highway's SCALAR and EMU128 DemoteTo clamp Inf)
      INFO(target);
      ForceSimdTarget(target);
      CHECK(std::isinf(Gemm(x, y, nullptr, AccumModelByName(m))[0]));
    }
    ForceSimdTarget("");
  }
}

TEST_CASE("gemm: a lone special code (E5M2 +-Inf, E4M3 NaN) among finite ones sends the product to the reference",
          "[gemm]") {
  // The operands' scan for specials must find the lowest special magnitude itself (E5M2's Inf 0x7C /
  // 0xFC; E4M3's NaN 0x7F / 0xFF, its only special): the fast kernels do not handle them. MX scales, so
  // that the scaled and group kernels run too.
  std::mt19937 rng(29);
  for (const auto& [f, code] : {std::pair{&fmt::kE5M2, uint8_t{0x7C}}, std::pair{&fmt::kE5M2, uint8_t{0xFC}},
                                std::pair{&fmt::kE4M3, uint8_t{0x7F}}, std::pair{&fmt::kE4M3, uint8_t{0xFF}}}) {
    GemmOperand a = Codes(*f, 9, 64, rng), b = Codes(*f, 64, 11, rng);
    AddUe8m0(a, true, 32, rng, -2, 2);
    AddUe8m0(b, false, 32, rng, -2, 2);
    GemmOperand a1 = a, b1 = b;
    a1.codes[5 * 64 + 40] = code;  // one special in A (row 5), then one in B (column 7)
    b1.codes[20 * 11 + 7] = code;
    CheckAllModels(a1, b, nullptr, std::string(f->name) + " special in A " + Hex(code, 2));
    CheckAllModels(a, b1, nullptr, std::string(f->name) + " special in B " + Hex(code, 2));
  }
}

TEST_CASE("gemm: calls from several threads at once, which share the packing-buffer pool, equal the reference",
          "[gemm]") {
  // Four caller threads, each with its own shapes (so the pool hands blocks of many sizes back and forth)
  // and models whose kernels pack differently; each result is checked after all threads are done.
  const char* models[] = {"blackwell-mxf8f6f4", "blackwell-mxf4nvf4", "hopper-fp8", "exact"};
  struct Job {
    GemmOperand a, b;
    AccumModel m;
    std::vector<float> want;
    std::vector<std::vector<float>> got;
  };
  std::vector<Job> jobs;
  std::mt19937 rng(31);
  for (size_t t = 0; t < 4; ++t) {
    const Format& f = t == 1 ? fmt::kE2M1 : fmt::kE4M3;
    Job j{Codes(f, 40 + 13 * t, 96, rng), Codes(f, 96, 50 + 7 * t, rng), AccumModelByName(models[t]), {}, {}};
    if (t != 2) {  // (hopper-fp8 promotes every 128 K: plain codes)
      AddUe8m0(j.a, true, 32, rng, -2, 2);
      AddUe8m0(j.b, false, 32, rng, -2, 2);
    }
    j.want = GemmRef(j.a, j.b, nullptr, j.m);
    jobs.push_back(std::move(j));
  }
  std::vector<std::thread> threads;
  for (Job& j : jobs)
    threads.emplace_back([&j] {
      for (int rep = 0; rep < 6; ++rep) j.got.push_back(Gemm(j.a, j.b, nullptr, j.m, rep % 2 ? Exec::kParallel : Exec::kSequential));
    });
  for (std::thread& t : threads) t.join();
  for (const Job& j : jobs)
    for (const std::vector<float>& g : j.got) RequireSame(g, j.want, "concurrent " + j.m.name);
}

TEST_CASE("gemm: signs of zero results follow IEEE sums", "[gemm]") {
  uint8_t neg[64], pos[64];
  std::memset(neg, 0x80, sizeof neg);  // e4m3 -0
  std::memset(pos, 0x00, sizeof pos);
  const GemmOperand a = OperandFromCodes(fmt::kE4M3, 1, 64, neg), b = OperandFromCodes(fmt::kE4M3, 64, 1, pos);
  const char* const m = GENERATE(values<const char*>({"exact", "block-exact", "fp32-seq"}));
  CAPTURE(m);
  for (float c : {-0.0f, 0.0f}) {
    INFO(m << " with C = " << c);
    const AccumModel model = AccumModelByName(m);
    CHECK(std::signbit(Gemm(a, b, &c, model)[0]) == std::signbit(c));
    CHECK(std::signbit(GemmRef(a, b, &c, model)[0]) == std::signbit(c));
  }
}

TEST_CASE("gemm: exact's one-double path holds only under its bound (ties decided 58 and 173 bits down)", "[gemm]") {
  // The exact kernel sums a tile in one double per output when the sum of |terms| stays below 2^52 of the
  // smallest term quantum (gemm_simd.cc). Here C = 2^40 and the products 256 * 256 = 2^16 (half an FP32 ulp
  // of C: a tie) and +-2^-9 * 2^-9 = +-2^-18 (quantum 2^-18): the exact sum needs 58 bits, one double would
  // drop the 2^-18 and round the tie to even (2^40); the exact answer is 2^40 + 2^17 for +2^-18 and 2^40 for
  // -2^-18. With C = 2^20 everything fits (38 bits) and the one-double path gives the answer.
  qmx::test::TargetGuard guard;
  const AccumModel m = AccumModelByName("exact");
  auto check = [&](const GemmOperand& a, const GemmOperand& b, float c, float want) {
    CHECK(GemmRef(a, b, &c, m)[0] == want);
    for (const std::string& target : SimdTargets()) {
      ForceSimdTarget(target);
      INFO(target);
      CHECK(Gemm(a, b, &c, m)[0] == want);
    }
    ForceSimdTarget("");
  };
  for (const bool up : {true, false})
    for (const float c : {0x1p40f, 0x1p20f}) {
      uint8_t ca[32] = {0x78, 0x01}, cb[32] = {0x78, static_cast<uint8_t>(up ? 0x01 : 0x81)};
      INFO("C " << c << (up ? " + 2^-18" : " - 2^-18"));
      check(OperandFromCodes(fmt::kE4M3, 1, 32, ca), OperandFromCodes(fmt::kE4M3, 32, 1, cb), c,
            c == 0x1p40f ? (up ? 0x1p40f + 0x1p17f : 0x1p40f) : 0x1p20f + 0x1p16f);
    }
  // C's own quantum counts: products 256 * 256 * 2^8 (block 1, scale 2^8) and 1 * 1 (block 2) sum to 2^24 + 1,
  // a tie; C = +-2^-149 decides it (2^24 + 2, or 2^24), 173 bits below.
  for (const float c : {0x1p-149f, -0x1p-149f}) {
    uint8_t ca[64] = {}, cb[64] = {};
    ca[0] = cb[0] = 0x78;   // 256
    ca[32] = cb[32] = 0x38;  // 1
    GemmOperand a = OperandFromCodes(fmt::kE4M3, 1, 64, ca), b = OperandFromCodes(fmt::kE4M3, 64, 1, cb);
    const uint32_t sa[2] = {127 + 8, 127}, sb[2] = {127, 127};
    SetBlockScales(a, ScaleFormat::kUe8m0, 1, 32, sa);
    SetBlockScales(b, ScaleFormat::kUe8m0, 32, 1, sb);
    INFO("C " << c);
    check(a, b, c, c > 0 ? 0x1p24f + 2.0f : 0x1p24f);
  }
}

TEST_CASE("gemm: exact on random small shapes, scale spreads and C: every SIMD target equals the reference",
          "[gemm]") {
  // Shapes around the kernel's tiles (edge panels), UE8M0 scales from one binade to 80 apart (the one-double
  // path's bound holds for some tiles and not others), and C among -0, +0, tiny, huge and ordinary values.
  std::mt19937 rng(2611);
  const AccumModel m = AccumModelByName("exact");
  const Format formats[] = {fmt::kE4M3, fmt::kE5M2, fmt::kE2M1, fmt::kE3M2};
  size_t outputs = 0;
  for (int t = 0; t < 60; ++t) {
    const Format f = formats[t % 4];
    const size_t rows = 1 + rng() % 14, cols = 1 + rng() % 20, k = 32 * (1 + rng() % 5) - (t % 3 == 0 ? 7 : 0);
    GemmOperand a = Codes(f, rows, k, rng), b = Codes(f, k, cols, rng);
    const int spread = t % 4 == 0 ? 1 : t % 4 == 1 ? 8 : t % 4 == 2 ? 30 : 80;
    AddUe8m0(a, true, 32, rng, -spread / 2, spread / 2);
    AddUe8m0(b, false, 32, rng, -spread / 2, spread / 2);
    std::vector<float> c(rows * cols);
    std::normal_distribution<float> nd;
    for (float& v : c) {
      const unsigned kind = rng() % 8;
      v = kind == 0 ? -0.0f : kind == 1 ? 0.0f : kind == 2 ? 0x1p-140f * (1 + rng() % 7)
        : kind == 3 ? std::ldexp(nd(rng), 60) : nd(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 20) - 10);
    }
    for (const bool with_c : {false, true}) {
      CheckEverywhere(a, b, with_c ? c : std::vector<float>{}, m,
                      std::string(f.name) + " case " + std::to_string(t) + (with_c ? " with C" : ""));
      outputs += c.size();
    }
  }
  CHECK(outputs > 1000);
}

TEST_CASE("gemm: exact with E4M3, FP32 and second-level scales: the fast path equals the reference", "[gemm]") {
  // Scales that are not powers of two (full 24-bit FP32 significands, E4M3 codes) and tensor / per-line
  // scales split each block's contribution into four doubles; spreads near the accumulator's range, zero and
  // negative scales (which go to the reference) and C check every branch of that path.
  std::mt19937 rng(41);
  auto full_significand = [&](int lo, int hi) {
    const uint32_t bits = static_cast<uint32_t>((static_cast<int>(rng() % (hi - lo + 1)) + lo + 127) << 23) | (rng() & 0x7FFFFF);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  const AccumModel exact = AccumModelByName("exact");
  for (const auto& spread : {std::pair<int, int>{-3, 3}, std::pair<int, int>{-120, -90}, std::pair<int, int>{90, 120},
                             std::pair<int, int>{-126, 127}}) {
    for (const Format& f : {fmt::kE4M3, fmt::kE5M2, fmt::kE2M1}) {
      INFO(f.name << " scale exponents " << spread.first << ".." << spread.second);
      GemmOperand a = Codes(f, 9, 160, rng), b = Codes(f, 160, 11, rng);
      AddFp32(a, 1, 32, rng);
      AddFp32(b, 32, 1, rng);
      for (float& s : a.scales) s = full_significand(spread.first, spread.second);
      for (float& s : b.scales) s = full_significand(spread.first, spread.second);
      CheckEverywhere(a, b, {}, exact, std::string("fp32 blocks ") + f.name);
      a.tensor_scale = full_significand(-20, 20);
      b.tensor_scale = full_significand(-20, 20);
      CheckEverywhere(a, b, {}, exact, std::string("fp32 blocks and tensor scales ") + f.name);
      a.tensor_scale = b.tensor_scale = 1.0f;
      std::vector<float> c(9 * 11);
      for (float& v : c) v = full_significand(spread.first, spread.second) * (rng() & 1 ? -1.0f : 1.0f);
      CheckEverywhere(a, b, c, exact, std::string("fp32 blocks, C ") + f.name);
    }
  }
  // NVFP4-style E4M3 block scales, none zero, with row and column second-level scales.
  {
    GemmOperand a = Codes(fmt::kE2M1, 12, 64, rng), b = Codes(fmt::kE2M1, 64, 7, rng);
    AddFp32(a, 1, 16, rng, ScaleFormat::kE4m3);
    AddFp32(b, 16, 1, rng, ScaleFormat::kE4m3);
    for (float& s : a.scales) s = s == 0 ? 0.5f : s;
    for (float& s : b.scales) s = s == 0 ? 448.0f : s;
    CheckEverywhere(a, b, {}, exact, "e4m3 blocks");
    for (size_t i = 0; i < 12; ++i) a.row_scales.push_back(full_significand(-30, 10));
    for (size_t j = 0; j < 7; ++j) b.col_scales.push_back(full_significand(-10, 30));
    CheckEverywhere(a, b, {}, exact, "e4m3 blocks, row and column scales");
  }
  // Cancelling blocks: block 2 repeats block 1's products negated under a neighbouring scale, so the result
  // is the small difference of two large contributions and every low part of their splits decides its bits.
  for (int trial = 0; trial < 4; ++trial) {
    const size_t m = 8, n = 8, kb = 32;
    GemmOperand a = Codes(fmt::kE4M3, m, 2 * kb, rng), b = Codes(fmt::kE4M3, 2 * kb, n, rng);
    for (size_t i = 0; i < m; ++i)
      for (size_t k = 0; k < kb; ++k) a.codes[i * 2 * kb + kb + k] = a.codes[i * 2 * kb + k];
    for (size_t k = 0; k < kb; ++k)
      for (size_t j = 0; j < n; ++j) b.codes[(kb + k) * n + j] = b.codes[k * n + j] ^ 0x80;
    AddFp32(a, 1, kb, rng);
    AddFp32(b, kb, 1, rng);
    for (size_t i = 0; i < m; ++i) {
      a.scales[i * 2] = full_significand(-2, 2);
      a.scales[i * 2 + 1] = std::nextafter(a.scales[i * 2], trial % 2 ? 0.0f : 100.0f);
    }
    for (size_t j = 0; j < n; ++j) b.scales[n + j] = b.scales[j] = full_significand(-2, 2);
    a.tensor_scale = full_significand(-5, 5);
    b.tensor_scale = full_significand(-5, 5);
    CheckEverywhere(a, b, {}, exact, "cancelling blocks, trial " + std::to_string(trial));
  }
  // Zero, negative and subnormal block scales, and all-negative-zero blocks: the signs of zero results.
  {
    GemmOperand a = Codes(fmt::kE4M3, 6, 96, rng), b = Codes(fmt::kE4M3, 96, 5, rng);
    for (size_t k = 0; k < 32; ++k) a.codes[k] = 0x80;  // -0 in the first block of row 0
    AddFp32(a, 1, 32, rng);
    AddFp32(b, 32, 1, rng);
    a.tensor_scale = 0.375f;
    CheckEverywhere(a, b, {}, exact, "-0 block");
    for (float bad : {0.0f, -1.5f, 1e-45f}) {
      GemmOperand a2 = a;
      a2.scales[3] = bad;
      CheckEverywhere(a2, b, {}, exact, "block scale " + std::to_string(bad));
    }
  }
}

TEST_CASE("gemm: exact equals MPFR's exact sum rounded once", "[gemm]") {
  std::mt19937 rng(14);
  mpfr_t acc, term, f;
  mpfr_inits2(4096, acc, term, f, static_cast<mpfr_ptr>(nullptr));
  size_t checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const Format fa = trial % 3 == 0 ? fmt::kE5M2 : fmt::kE4M3, fb = trial % 2 ? fmt::kE5M2 : fmt::kE2M1;
    const size_t k = 1 + rng() % 300;
    GemmOperand a = Codes(fa, 3, k, rng), b = Codes(fb, k, 4, rng);
    if (trial % 4 == 1) {  // one large product among tiny ones; cancellation
      a.codes[0] = static_cast<uint8_t>(fa.MaxFiniteCode());
      for (size_t i = 1; i < k; ++i) a.codes[i] = static_cast<uint8_t>(1 + rng() % 3);
      for (size_t i = 0; i < k / 2; ++i) a.codes[k + i] = a.codes[k + k / 2 + i] = static_cast<uint8_t>(rng() % 0x70);
      for (size_t i = 0; i < k / 2; ++i) a.codes[k + k / 2 + i] ^= 0x80;
    }
    if (trial % 5 == 2) {  // scales that push results into FP32's subnormal range
      AddUe8m0(a, true, 32, rng, -127, -110);
      AddUe8m0(b, false, 32, rng, -60, -20);
    } else if (trial % 5 == 3) {
      AddFp32(a, 1, 32, rng);
      AddFp32(b, 32, 1, rng);
      a.tensor_scale = 0.3f;
    }
    std::vector<float> c(12);
    const bool with_c = trial % 3 == 1 && a.tensor_scale == 1.0f;
    for (float& v : c) v = std::ldexp(static_cast<float>(rng() % 1000) - 500.0f, static_cast<int>(rng() % 20) - 10);
    const std::vector<float> got = Gemm(a, b, with_c ? c.data() : nullptr, AccumModelByName("exact"));
    for (size_t i = 0; i < 3; ++i)
      for (size_t j = 0; j < 4; ++j) {
        mpfr_set_flt(acc, with_c ? c[i * 4 + j] : 0.0f, MPFR_RNDN);
        for (size_t kk = 0; kk < k; ++kk) {
          mpfr_set_d(term, DecodeToDouble(a.elem, a.codes[i * k + kk]), MPFR_RNDN);
          mpfr_mul_d(term, term, DecodeToDouble(b.elem, b.codes[kk * 4 + j]), MPFR_RNDN);
          mpfr_mul_d(term, term, a.ScaleOf(i, kk), MPFR_RNDN);
          mpfr_mul_d(term, term, b.ScaleOf(kk, j), MPFR_RNDN);
          mpfr_mul_d(term, term, a.tensor_scale, MPFR_RNDN);
          mpfr_add(acc, acc, term, MPFR_RNDN);  // 4096 bits: every step exact
        }
        const float want = mpfr_get_flt(acc, MPFR_RNDN);
        const float g = got[i * 4 + j];
        INFO("trial " << trial << " (" << i << "," << j << ") got " << Hex(FloatBits(g)) << " want " << Hex(FloatBits(want)));
        CHECK(FloatBits(g) == FloatBits(want));
        ++checked;
      }
  }
  mpfr_clears(acc, term, f, static_cast<mpfr_ptr>(nullptr));
  CHECK(checked == 480);
}

TEST_CASE("gemm: hand-worked fused steps", "[gemm]") {
  const AccumModel hopper = AccumModelByName("hopper-fp8-fast");
  const uint8_t zeros[32] = {};
  const GemmOperand z = OperandFromCodes(fmt::kE4M3, 1, 32, zeros), zb = OperandFromCodes(fmt::kE4M3, 32, 1, zeros);
  // An FP32 C passed through one step with all products zero keeps 13 fractional bits: 1 + 2^-20 -> 1,
  // 1 + 2^-13 stays, -(1 + 2^-13 + 2^-14) -> -(1 + 2^-13) (toward zero).
  for (auto [c, want] : {std::pair<float, float>{1.0f + 0x1p-20f, 1.0f}, {1.0f + 0x1p-13f, 1.0f + 0x1p-13f},
                         {-(1.0f + 0x1p-13f + 0x1p-14f), -(1.0f + 0x1p-13f)}, {0x1p-149f, 0.0f}}) {
    CHECK(FloatBits(Gemm(z, zb, &c, hopper)[0]) == FloatBits(want));
    CHECK(FloatBits(GemmRef(z, zb, &c, hopper)[0]) == FloatBits(want));
  }
  // Products are aligned at their un-normalized exponent: 1.5 * 1.5 has exponent 0 (significand 2.25);
  // with 2^-6 * 2^-7 (exponent -12, significand 0.5 -> one unit of 2^-13) the sum 2.25 + 2^-13 is cut to 14
  // bits (2^-12 at exponent 1): 2.25.
  uint8_t av[32] = {0x3C, 0x08}, bv[32] = {0x3C, 0x02};  // e4m3: 1.5, 2^-6 ; 1.5, 2^-8 (subnormal 0x02)
  GemmOperand a = OperandFromCodes(fmt::kE4M3, 1, 32, av), b = OperandFromCodes(fmt::kE4M3, 32, 1, bv);
  CHECK(Gemm(a, b, nullptr, hopper)[0] == 2.25f);
  CHECK(Gemm(a, b, nullptr, AccumModelByName("exact"))[0] == 2.25f + 0x1p-14f);
  // Sixteen products of 1 then sixteen of 2^-14: the small ones fall below F=13 and vanish in one step,
  // while fp32-seq and exact keep them.
  uint8_t ones[32], bones[32];
  for (int i = 0; i < 32; ++i) ones[i] = i < 16 ? 0x38 : 0x10;  // 1.0 ; 2^-5 (0x10: exponent field 2)
  for (int i = 0; i < 32; ++i) bones[i] = i < 16 ? 0x38 : 0x28;  // 1.0 ; 2^-2 ... product 2^-7
  GemmOperand o = OperandFromCodes(fmt::kE4M3, 1, 32, ones), ob = OperandFromCodes(fmt::kE4M3, 32, 1, bones);
  const float exact = Gemm(o, ob, nullptr, AccumModelByName("exact"))[0];
  CHECK(exact == 16.0f + 16 * 0x1p-7f);
  // emax = 0: unit 2^-13, each 2^-7 product is 64 units and kept; the sum 16.125 has 14 significant bits.
  CHECK(Gemm(o, ob, nullptr, hopper)[0] == 16.125f);
}

TEST_CASE("gemm: a group step whose accumulator outweighs its terms truncates the accumulator (F < 23)", "[gemm]") {
  // F = 13 keeps 13 bits below the larger of the accumulator's and the terms' exponents: with C in [2^10,
  // 2^12) and E2M1 products below 2^6, the step cuts C's low bits. The group kernel's whole-step check
  // once bounded the cut by the terms' exponent alone and kept those bits.
  std::mt19937 rng(83);
  GemmOperand a = Codes(fmt::kE2M1, 64, 128, rng), b = Codes(fmt::kE2M1, 128, 64, rng);
  AddUe8m0(a, true, 16, rng, 0, 0);
  AddUe8m0(b, false, 16, rng, 0, 0);
  std::uniform_real_distribution<float> u(1024.0f, 4096.0f);
  std::vector<float> c(64 * 64);
  for (float& v : c) v = u(rng);
  const AccumModel m = AccumModelByName("fused:step=64,F=13,group=16,bits=24,zero-exp=-139,scale=products");
  qmx::test::CheckEverywhere(a, b, c, m, "C above the terms");
  // And the reference truncates C itself: some outputs differ from C plus the exact products.
  const std::vector<float> ref = GemmRef(a, b, c.data(), m), exact = GemmRef(a, b, c.data(), AccumModelByName("exact"));
  CHECK(qmx::test::BitsDiffer(ref, exact) > 0);
}

TEST_CASE("gemm: a fused step that rounds up to Inf hands its output to the reference", "[gemm]") {
  // No promotion, output rounded to nearest at 11 bits: C = FLT_MAX is cut at 13 fractional bits to
  // (2 - 2^-13) 2^127, which rounds up to 2^128: Inf after the first step of 8, then a step of negative
  // products. The kernels mark such outputs for the reference. 4 x 32 outputs (a whole tile on every
  // vector width), C lanes FLT_MAX, -FLT_MAX and ordinary.
  const AccumModel model = AccumModelByName("fused:step=8,F=13,term=rz,out=rne,bits=11");
  const size_t m = 4, n = 32, k = 16;
  std::vector<uint8_t> ca(m * k), cb(k * n);
  for (size_t i = 0; i < m; ++i)
    for (size_t kk = 0; kk < k; ++kk) ca[i * k + kk] = kk < 8 ? 0x30 : 0x7E;  // 0.5, then 448
  for (size_t kk = 0; kk < k; ++kk)
    for (size_t j = 0; j < n; ++j) cb[kk * n + j] = kk < 8 ? 0x30 : 0xFE;  // 0.5, then -448
  const GemmOperand a = OperandFromCodes(fmt::kE4M3, m, k, ca.data()), b = OperandFromCodes(fmt::kE4M3, k, n, cb.data());
  std::vector<float> c(m * n);
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = i % 3 == 0 ? std::numeric_limits<float>::max() : i % 3 == 1 ? -std::numeric_limits<float>::max() : 1000.0f;
  const std::vector<float> ref = GemmRef(a, b, c.data(), model);
  CHECK(std::isinf(ref[0]));
  CHECK(std::isinf(ref[1]));
  qmx::test::CheckEverywhere(a, b, c, model, "step overflow");
}

TEST_CASE("gemm: the Hopper models reproduce H200 tensor-core outputs (golden/gemm-hopper)", "[gemm]") {
  const std::string dir = std::string(QMX_SOURCE_DIR) + "/golden/gemm-hopper/";
  std::ifstream in(dir + "cases.json");
  REQUIRE(in.good());
  const nlohmann::json js = nlohmann::json::parse(in);
  size_t outputs = 0;
  for (const auto& c : js["cases"]) {
    const std::string name = c["name"];
    const NpyArray a = ReadNpy(dir + name + "_a.npy"), b = ReadNpy(dir + name + "_b.npy");
    GemmOperand A = OperandFromCodes(GetFormat(c["a_format"]), a.shape[0], a.shape[1], a.data.data());
    GemmOperand B = OperandFromCodes(GetFormat(c["b_format"]), b.shape[0], b.shape[1], b.data.data());
    A.tensor_scale = c.value("a_tensor_scale", 1.0f);
    B.tensor_scale = c.value("b_tensor_scale", 1.0f);
    if (c.contains("a_block")) {  // FP32 block scales: A 1xK, B given as RxC
      for (GemmOperand* o : {&A, &B}) {
        const bool is_a = o == &A;
        const NpyArray s = ReadNpy(dir + name + (is_a ? "_sa.npy" : "_sb.npy"));
        const std::string blk = c[is_a ? "a_block" : "b_block"];
        o->scale_format = ScaleFormat::kFp32;
        o->block_rows = std::stoul(blk.substr(0, blk.find('x')));
        o->block_cols = std::stoul(blk.substr(blk.find('x') + 1));
        o->scale_rows = s.shape[0];
        o->scale_cols = s.shape[1];
        o->scales = FloatsOf(s);
      }
    }
    const nlohmann::json models = c.value("models", nlohmann::json{{"d_slow", "hopper-fp8"}, {"d_fast", "hopper-fp8-fast"}});
    for (const auto& [key, model] : models.items()) {
      const NpyArray d = ReadNpy(dir + name + "_" + key + ".npy");
      const std::vector<float> want = FloatsOf(d);
      const AccumModel m = AccumModelByName(model.get<std::string>());
      RequireSame(Gemm(A, B, nullptr, m), want, name + " " + key);
      if (A.cols <= 256) RequireSame(GemmRef(A, B, nullptr, m), want, name + " " + key + " (reference)");
      outputs += want.size();
    }
  }
  CHECK(outputs > 50000);
}

TEST_CASE("gemm: operands from quantized tensors", "[gemm]") {
  std::mt19937 rng(15);
  std::normal_distribution<float> nd;
  std::vector<float> x(8 * 96), w(96 * 5);
  for (float& v : x) v = nd(rng);
  for (float& v : w) v = nd(rng) * 0.01f;
  const char* const recipe = GENERATE(values<const char*>({"mxfp8", "mxfp4", "nvfp4", "fp8-block1x128", "fp8-tensor-current"}));
  CAPTURE(recipe);
  INFO(recipe);
  QuantSpec sa = QuantSpecByName(recipe), sb = QuantSpecByName(recipe);
  sb.axis = sb.axis == Axis::kRow ? Axis::kCol : Axis::kRow;
  if (std::string(recipe) == "fp8-block1x128") sb = QuantSpecByName("fp8-block128x128");
  const QuantizedTensor qa = Quantize(TensorView{DType::kF32, x.data(), 8, 96}, sa);
  const QuantizedTensor qb = Quantize(TensorView{DType::kF32, w.data(), 96, 5}, sb);
  const GemmOperand A = OperandFromQuantized(qa), B = OperandFromQuantized(qb);
  // exact = RNE of the exact sum of the dequantized products when the dequantized values are exact
  // (UE8M0); for the other recipes, the fast path against the reference.
  CheckAllModels(A, B, nullptr, recipe);
  if (std::string(recipe).rfind("mx", 0) == 0) {
    std::vector<float> da(8 * 96), db(96 * 5);
    Dequantize(qa, da.data());
    Dequantize(qb, db.data());
    const std::vector<float> e = Gemm(A, B, nullptr, AccumModelByName("exact"));
    for (size_t i = 0; i < 8; ++i)
      for (size_t j = 0; j < 5; ++j) {
        long double s = 0;  // 64-bit significand: exact for these sums of MX products
        for (size_t k = 0; k < 96; ++k) s += static_cast<long double>(da[i * 96 + k]) * db[k * 5 + j];
        CHECK(e[i * 5 + j] == static_cast<float>(static_cast<double>(s)));
      }
  }
}

TEST_CASE("gemm: errors name the problem", "[gemm]") {
  std::mt19937 rng(16);
  const GemmOperand a = Codes(fmt::kE4M3, 2, 64, rng), b = Codes(fmt::kE4M3, 32, 2, rng);
  CHECK_THROWS_WITH(Gemm(a, b, nullptr, AccumModelByName("exact")), Catch::Contains("(K) differ") && !Catch::Contains("N x K"));
  // B held as N x K (nn.Linear's weight): the message names the transpose.
  const GemmOperand w = Codes(fmt::kE4M3, 5, 64, rng);
  CHECK_THROWS_WITH(Gemm(a, w, nullptr, AccumModelByName("exact")),
                    Catch::Contains("B looks like N x K") && Catch::Contains("transpose"));
  GemmOperand x = Codes(fmt::kE4M3, 2, 64, rng), y = Codes(fmt::kE4M3, 64, 2, rng);
  AddUe8m0(x, true, 32, rng, 0, 0);
  AddUe8m0(y, false, 16, rng, 0, 0);
  CHECK_THROWS_WITH(Gemm(x, y, nullptr, AccumModelByName("exact")), Catch::Contains("must be equal"));
  AddUe8m0(y, false, 32, rng, 0, 0);
  CHECK_THROWS_WITH(Gemm(x, y, nullptr, AccumModelByName("hopper-fp8-fast")), Catch::Contains("never promotes"));
  GemmOperand t = Codes(fmt::kE4M3, 2, 64, rng);
  t.tensor_scale = 2;
  const float c[4] = {};
  CHECK_THROWS_WITH(Gemm(t, y, c, AccumModelByName("exact")), Catch::Contains("not modelled"));
  CHECK_THROWS_WITH(AccumModelByName("hopper"), Catch::Contains("unknown accumulation model"));
  CHECK_THROWS_WITH(AccumModelByName("fused:step=32,promote=48"), Catch::Contains("multiple of step"));
  CHECK_THROWS_WITH(AccumModelByName("fused:steps=32"), Catch::Contains("unknown key"));
  CHECK_THROWS_WITH(AccumModelByName("fused:F=x"), Catch::Contains("integer"));
  const uint8_t bad[2] = {0x3F, 0x10};
  CHECK_THROWS_WITH(OperandFromCodes(fmt::kE2M1, 1, 2, bad), Catch::Contains("does not fit"));
}
