// test_gemm_fp16.cc: the fused kernel's FP16 products (gemm/gemm_fused_simd.cc, CPUs with AVX512-FP16:
// the SIMD pseudo-target "AVX3_FP16") against the reference where its bound decides: each step's gap G
// between the row's and the column's largest elements and its largest product (G up to 15 takes FP16 lanes,
// past it the step falls back to FP32 lanes), accumulators far above the products (2^G an FP16 subnormal,
// or zero), E5M2 elements whose products fall below FP16's smallest subnormal, RNE terms, ragged and odd K,
// edge tiles; on every SIMD target, 1 and 2 threads. Where the CPU has no AVX512-FP16 the same cases run
// on the other targets and the step counts are not checked.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gemm/gemm_cases.h"
#include "qmx/convert.h"
#include "qmx/gemm.h"
#include "qmx/round.h"
#include "qmx/testing.h"

using namespace qmx;
using qmx::test::CheckEverywhere;

namespace {

// rows x cols codes of f in which each line (a row of A, a column of B) holds, in every step of 32 along
// K, one element of f's top binade at a random k and the rest zero (one in three) or within w binades of
// f's smallest value, w = line % 8. Where the large elements of a row and a column meet, the step's gap
// G (F = 13) is 0; where each meets a small element of the other, at most the nominal exponent span of a
// format less w (14 for E4M3: under the bound); where each meets a zero, up to the two spans together
// (28): past the bound of 15. One line in 7 is all zero in some step.
GemmOperand Gapped(const Format& f, size_t rows, size_t cols, bool is_a, std::mt19937& rng) {
  const double top = std::floor(std::log2(Limits(f).max_finite));
  const double low = std::log2(Limits(f).min_subnormal);
  std::uniform_real_distribution<double> frac(1.0, 2.0);
  std::vector<uint8_t> codes(rows * cols);
  const size_t klen = is_a ? cols : rows, lines = is_a ? rows : cols;
  for (size_t line = 0; line < lines; ++line)
    for (size_t s0 = 0; s0 < klen; s0 += 32) {
      const size_t s1 = std::min(klen, s0 + 32), big = s0 + rng() % (s1 - s0);
      const bool zero = (line + s0 / 32) % 7 == 3;
      for (size_t kk = s0; kk < s1; ++kk) {
        const double e = kk == big ? top : low + static_cast<double>(rng() % (line % 8 + 1));
        const double v = kk != big && rng() % 3 == 0 ? 0.0 : std::ldexp(frac(rng), static_cast<int>(e)) * ((rng() & 1) ? -1.0 : 1.0);
        const double clamped = std::copysign(std::min(std::fabs(v), Limits(f).max_finite), v);
        codes[is_a ? line * cols + kk : kk * cols + line] =
            zero ? 0 : static_cast<uint8_t>(ConvertF32(static_cast<float>(clamped), f, CastOptions{}));
      }
    }
  return OperandFromCodes(f, rows, cols, codes.data());
}

// C from zero and an FP32 subnormal to 2^40: accumulators that set emax far above the products.
std::vector<float> WideC(size_t n, std::mt19937& rng) {
  std::vector<float> c(n);
  std::uniform_real_distribution<float> frac(1.0f, 2.0f);
  for (size_t i = 0; i < n; ++i) {
    const int u = static_cast<int>(rng() % 71) - 30;
    c[i] = i % 13 == 0 ? 0.0f : i % 17 == 0 ? 0x1p-140f : std::ldexp(frac(rng), u) * ((rng() & 1) ? -1.0f : 1.0f);
  }
  return c;
}

}  // namespace

TEST_CASE("gemm: the fused kernel's FP16 products equal the reference across their bound", "[gemm]") {
  std::mt19937 rng(29);
  const std::vector<std::string> targets = SimdTargets();
  const bool fp16 = std::find(targets.begin(), targets.end(), "AVX3_FP16") != targets.end();
  const FusedStepCounts before = GemmFusedStepCounts();
  // 21 rows (edge panels of 4 and 6), 45 columns (edge panels), K = 201: a ragged last step and an odd
  // number of K, so the last pair of K holds one element.
  const size_t m = 21, n = 45, k = 201;
  struct Pair {
    const Format* a;
    const Format* b;
  };
  for (const Pair& pr : {Pair{&fmt::kE4M3, &fmt::kE4M3}, Pair{&fmt::kE5M2, &fmt::kE4M3}, Pair{&fmt::kE4M3, &fmt::kE2M1}}) {
    const GemmOperand a = Gapped(*pr.a, m, k, true, rng), b = Gapped(*pr.b, k, n, false, rng);
    const std::vector<float> c = WideC(m * n, rng);
    const std::string what = std::string("gapped ") + pr.a->name + " x " + pr.b->name;
    for (const char* name : {"hopper-fp8", "hopper-fp8-fast", "ada-fp8", "fused:step=32,F=13,term=rne,out=rne,bits=24,zero-exp=-133",
                             "fused:step=16,F=9,term=rz,out=rne,bits=12", "fused:step=8,F=6,term=rne,out=rz,bits=11,zero-exp=-20"}) {
      const AccumModel model = AccumModelByName(name);
      CheckEverywhere(a, b, {}, model, what);
      CheckEverywhere(a, b, c, model, what + " with C");
    }
  }
  const FusedStepCounts after = GemmFusedStepCounts();
  if (!fp16) {
    WARN("this CPU has no AVX512-FP16: the FP16 products were not run");
    return;
  }
  // Both sides of the bound were taken.
  CHECK(after.fp16 > before.fp16);
  CHECK(after.fp32_fallback > before.fp32_fallback);
}

TEST_CASE("gemm: on the bench's data most fused steps take the FP16 products", "[gemm]") {
  // Gaussian values (sigma 64) as E4M3 codes under hopper-fp8: the gap rarely passes 15, so nearly every
  // step forms its products in FP16 lanes where the CPU has AVX512-FP16 (the bench's speed rests on it).
  const std::vector<std::string> targets = SimdTargets();
  if (std::find(targets.begin(), targets.end(), "AVX3_FP16") == targets.end()) {
    WARN("this CPU has no AVX512-FP16: nothing to count");
    return;
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 64.0f);
  const size_t m = 64, n = 64, k = 512;
  std::vector<float> xa(m * k), xb(k * n);
  for (float& v : xa) v = nd(rng);
  for (float& v : xb) v = nd(rng);
  std::vector<uint8_t> ca(xa.size()), cb(xb.size());
  ConvertToCodes(DType::kF32, xa.data(), xa.size(), fmt::kE4M3, CastOptions{}, ca.data());
  ConvertToCodes(DType::kF32, xb.data(), xb.size(), fmt::kE4M3, CastOptions{}, cb.data());
  const GemmOperand a = OperandFromCodes(fmt::kE4M3, m, k, ca.data()), b = OperandFromCodes(fmt::kE4M3, k, n, cb.data());
  const AccumModel model = AccumModelByName("hopper-fp8");
  const FusedStepCounts before = GemmFusedStepCounts();
  const std::vector<float> fast = Gemm(a, b, nullptr, model);
  const FusedStepCounts after = GemmFusedStepCounts();
  qmx::test::RequireSame(fast, GemmRef(a, b, nullptr, model), "bench-like hopper-fp8");
  const double taken = static_cast<double>(after.fp16 - before.fp16), declined = static_cast<double>(after.fp32_fallback - before.fp32_fallback);
  INFO("FP16 steps " << taken << ", FP32 fallbacks " << declined);
  CHECK(taken > 0);
  CHECK(declined <= 0.01 * (taken + declined));
}
