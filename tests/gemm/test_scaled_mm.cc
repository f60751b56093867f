// test_scaled_mm.cc: qmx::ScaledMm (torch._scaled_mm on Hopper). Its fast path (Gemm under the Hopper models)
// against its reference path (GemmRef) in every mode; split-K against its definition written out here
// (independent Gemm calls on the K ranges, FP32 sums in split order); the epilogue against scalar FP32
// arithmetic; errors. The H200's own outputs are replayed by tests/python/test_scaled_mm.py.
#include <array>
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/round.h"
#include "qmx/scaled_mm.h"
#include "support/hex.h"

using namespace qmx;
using qmx::test::BitsFloat;
using qmx::test::FloatBits;

namespace {

std::vector<uint8_t> Fp8Codes(std::mt19937& rng, size_t n, const Format& f) {
  std::vector<uint8_t> c(n);
  for (auto& x : c) {
    x = static_cast<uint8_t>(rng());
    if (f == fmt::kE4M3 && (x & 0x7F) == 0x7F) x ^= 1;              // no NaN
    if (f == fmt::kE5M2 && ((x >> 2) & 0x1F) == 0x1F) x &= 0xFB;     // no Inf / NaN
  }
  return c;
}

std::vector<float> Scales(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> u(0.01f, 40.0f);
  std::vector<float> s(n);
  for (auto& x : s) x = u(rng);
  return s;
}

}  // namespace

TEST_CASE("scaled_mm: the fast path equals the reference in every mode", "[gemm][scaled_mm]") {
  std::mt19937 rng(7);
  for (const auto& [m, n, k] : std::vector<std::array<size_t, 3>>{{5, 7, 300}, {17, 33, 1000}, {3, 4, 4097}}) {
    for (const Format* fa : {&fmt::kE4M3, &fmt::kE5M2}) {
      const std::vector<uint8_t> a = Fp8Codes(rng, m * k, *fa), b = Fp8Codes(rng, k * n, fmt::kE4M3);
      const std::vector<float> sa = Scales(rng, m), sb = Scales(rng, n);
      std::vector<uint16_t> bias(n);
      for (auto& x : bias) x = static_cast<uint16_t>(ConvertF32(Scales(rng, 1)[0] - 20.0f, fmt::kBF16, {}));
      for (const bool rowwise : {false, true}) {
        for (const bool fast : {false, true}) {
          for (const int splits : {1, 3}) {
            if (rowwise && splits > 1) continue;
            ScaledMmArgs x;
            x.a_format = *fa;
            x.m = m, x.n = n, x.k = k, x.a = a.data(), x.b = b.data();
            x.scale_a = sa.data(), x.scale_b = sb.data();
            if (rowwise) x.scale_a_rows = m, x.scale_b_cols = n;
            x.fast_accum = fast;
            x.split_k = splits;
            x.out = splits == 3 ? ScaledMmOut::kBF16 : ScaledMmOut::kF32;
            if (splits == 3) x.bias = bias.data();
            const ScaledMmResult fast_path = ScaledMm(x);
            x.reference = true;
            const ScaledMmResult ref = ScaledMm(x);
            INFO("m " << m << " n " << n << " k " << k << " " << fa->name << " rowwise " << rowwise << " fast " << fast
                      << " splits " << splits);
            REQUIRE(fast_path.bits == ref.bits);
            REQUIRE(fast_path.model == (fast ? "hopper-fp8-fast" : "hopper-fp8"));
          }
        }
      }
    }
  }
}

TEST_CASE("scaled_mm: split-K is its definition: ceil(tiles / splits) tiles each, FP32 sums in order",
          "[gemm][scaled_mm]") {
  std::mt19937 rng(11);
  const size_t m = 4, n = 6, k = 128 * 10 + 50;  // 11 tiles, the last partial
  const std::vector<uint8_t> a = Fp8Codes(rng, m * k, fmt::kE4M3), b = Fp8Codes(rng, k * n, fmt::kE4M3);
  const float sa = 0.75f, sb = 3.3f;
  for (const int splits : {2, 3, 4, 7, 11, 13}) {
    ScaledMmArgs x;
    x.m = m, x.n = n, x.k = k, x.a = a.data(), x.b = b.data(), x.scale_a = &sa, x.scale_b = &sb;
    x.split_k = splits;
    const ScaledMmResult r = ScaledMm(x);
    // The definition: split s covers tiles [s q, (s + 1) q) with q = ceil(11 / splits), clipped to K.
    const size_t q = (11 + splits - 1) / splits;
    std::vector<float> acc;
    for (int s = 0; s < splits; ++s) {
      const size_t k0 = std::min(k, s * q * 128), k1 = std::min(k, (s + 1) * q * 128);
      if (k0 >= k1) continue;
      std::vector<uint8_t> as(m * (k1 - k0));
      for (size_t i = 0; i < m; ++i)
        for (size_t kk = k0; kk < k1; ++kk) as[i * (k1 - k0) + kk - k0] = a[i * k + kk];
      const std::vector<float> part =
          GemmRef(OperandFromCodes(fmt::kE4M3, m, k1 - k0, as.data()),
                  OperandFromCodes(fmt::kE4M3, k1 - k0, n, b.data() + k0 * n), nullptr, AccumModelByName("hopper-fp8"));
      if (acc.empty()) acc = part;
      else for (size_t i = 0; i < acc.size(); ++i) acc[i] += part[i];
    }
    const float alpha = sa * sb;
    for (size_t i = 0; i < m * n; ++i) {
      INFO("splits " << splits << " output " << i);
      REQUIRE(r.bits[i] == FloatBits(acc[i] * alpha));
    }
    REQUIRE(r.split_k == splits);
  }
  // One split is the plain model.
  ScaledMmArgs x;
  x.m = m, x.n = n, x.k = k, x.a = a.data(), x.b = b.data(), x.scale_a = &sa, x.scale_b = &sb, x.split_k = 1;
  const std::vector<float> plain = Gemm(OperandFromCodes(fmt::kE4M3, m, k, a.data()),
                                        OperandFromCodes(fmt::kE4M3, k, n, b.data()), nullptr, AccumModelByName("hopper-fp8"));
  const ScaledMmResult r = ScaledMm(x);
  for (size_t i = 0; i < m * n; ++i) REQUIRE(r.bits[i] == FloatBits(plain[i] * (sa * sb)));
}

TEST_CASE("scaled_mm: the measured split-K choices and the refusals", "[gemm][scaled_mm]") {
  CHECK(CublasLtSplitK(16, 1024, 65536, ScaledMmOut::kF32) == 8);
  CHECK(CublasLtSplitK(16, 256, 8192, ScaledMmOut::kF32) == 3);
  CHECK(CublasLtSplitK(4096, 16, 8192, ScaledMmOut::kF32) == 1);
  CHECK(CublasLtSplitK(3, 5, 4096, ScaledMmOut::kF16) == 1);   // K <= 4096: unsplit
  CHECK(CublasLtSplitK(16, 256, 8192, ScaledMmOut::kF16) == 0);  // FP16 output above 4096: not measured
  CHECK(CublasLtSplitK(48, 2048, 24576, ScaledMmOut::kF32) == 0);  // off the grid
  std::vector<uint8_t> a(2 * 8192, 0x38), b(8192 * 3, 0x38);
  const float one = 1.0f;
  ScaledMmArgs x;
  x.m = 2, x.n = 3, x.k = 8192, x.a = a.data(), x.b = b.data(), x.scale_a = &one, x.scale_b = &one;
  REQUIRE_THROWS_WITH(ScaledMm(x), Catch::Contains("split_k") && Catch::Contains("numSplitsK"));
  x.split_k = 2;
  const ScaledMmResult r = ScaledMm(x);
  CHECK(BitsFloat(r.bits[0]) == 8192.0f);
  const uint16_t bias[3] = {0, 0, 0};
  x.bias = bias;
  REQUIRE_THROWS_WITH(ScaledMm(x), Catch::Contains("BF16 or FP16 output"));
  x.bias = nullptr;
  x.split_k = -1;
  REQUIRE_THROWS_WITH(ScaledMm(x), Catch::Contains("split_k"));
  x.split_k = 1;
  x.a_format = fmt::kE2M1;
  REQUIRE_THROWS_WITH(ScaledMm(x), Catch::Contains("FP8"));
  CHECK(ParseScaledMmOut("bf16") == ScaledMmOut::kBF16);
  REQUIRE_THROWS_WITH(ParseScaledMmOut("int8"), Catch::Contains("float32, bfloat16, float16"));
}
