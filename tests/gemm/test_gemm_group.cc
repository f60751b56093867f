// test_gemm_group.cc: the fused models with exact groups (MMA-Sim's GST-FDPA: blackwell-mxf4nvf4 and
// fused:...,group=G), fast paths against the reference on the cases that decide a step's terms: groups
// whose products cancel to zero (a nonzero group: its scales still set the step's exponent), groups whose
// operands are nonzero only where the other's are zero (a zero group), zero E4M3 scales, large scales
// that truncate C and the other groups away, ragged K, and RNE variants; on every SIMD target, 1 and 2
// threads.
#include <omp.h>

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "gemm/gemm_cases.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "support/modes.h"

using namespace qmx;
using qmx::test::CheckEverywhere;
using qmx::test::RequireSame;

namespace {

constexpr uint8_t kOne = 0x2, kNegOne = 0xA;  // E2M1 1.0 and -1.0

// E2M1 operands of m x k and k x n in which every (row, group) and (group, column) pair takes one of
// five shapes chosen from its indices: random, all zero, pairs that cancel (a[2t] = a[2t+1] against
// b[2t+1] = -b[2t]), A nonzero on even K only, B nonzero on odd K only.
std::pair<GemmOperand, GemmOperand> Structured(size_t m, size_t k, size_t n, std::mt19937& rng) {
  std::vector<uint8_t> a = qmx::test::RandomCodes(fmt::kE2M1, m * k, rng, false);
  std::vector<uint8_t> b = qmx::test::RandomCodes(fmt::kE2M1, k * n, rng, false);
  for (size_t i = 0; i < m; ++i)
    for (size_t kk = 0; kk < k; ++kk) {
      uint8_t& v = a[i * k + kk];
      switch ((i + kk / 16) % 5) {
        case 1: v = 0; break;
        case 2: v = (kk % 2) ? a[i * k + kk - 1] : (v == 0 ? kOne : v); break;
        case 3: v = (kk % 2) ? 0 : kOne; break;
        default: break;
      }
    }
  for (size_t kk = 0; kk < k; ++kk)
    for (size_t j = 0; j < n; ++j) {
      uint8_t& v = b[kk * n + j];
      switch ((j + kk / 16) % 4) {
        case 0: v = (kk % 2) ? static_cast<uint8_t>(b[(kk - 1) * n + j] ^ 0x8) : (v == 0 ? kNegOne : v); break;
        case 1: v = (kk % 2) ? kOne : 0; break;
        default: break;
      }
    }
  return {OperandFromCodes(fmt::kE2M1, m, k, a.data()), OperandFromCodes(fmt::kE2M1, k, n, b.data())};
}

// UE8M0 scales with exponents mostly near 0 and some 30-40 above: a large scale on a cancelling or a zero
// group decides whether the step's other terms are truncated.
void BigSmallUe8m0(GemmOperand& o, bool is_a, std::mt19937& rng) {
  qmx::test::AddUe8m0(o, is_a, 32, rng, -2, 2);
  for (float& s : o.scales)
    if (rng() % 4 == 0) s = std::ldexp(1.0f, 30 + static_cast<int>(rng() % 11));
}

void E4m3Scales(GemmOperand& o, bool is_a, std::mt19937& rng) {
  qmx::test::AddFp32(o, is_a ? 1 : 16, is_a ? 16 : 1, rng, ScaleFormat::kE4m3);
  for (size_t i = 0; i < o.scales.size(); ++i) {
    if (i % 13 == 0) o.scales[i] = 0.0f;
    if (i % 17 == 0) o.scales[i] = 448.0f;
  }
}

}  // namespace

TEST_CASE("gemm: exact-group models equal the reference where cancelling, zero and large-scale groups decide a step",
          "[gemm]") {
  std::mt19937 rng(31);
  const std::vector<AccumModel> models = {
      AccumModelByName("blackwell-mxf4nvf4"),
      AccumModelByName("fused:step=64,F=20,group=16,term=rne,out=rne,bits=18,zero-exp=-139,scale=products"),
      AccumModelByName("fused:step=128,F=30,group=32,bits=24,zero-exp=-100,scale=products"),
      // MMA-Sim's zero rule: an all-zero group at its scales' exponents
      AccumModelByName("rtx-blackwell-mxf4nvf4"),
      AccumModelByName("fused:step=64,F=20,group=16,term=rne,out=rne,bits=18,zero-exp=operands,scale=products")};
  // 26 rows and 70 columns cross the 6-row panels and every vector width's edge; K = 16 * 37 leaves a
  // short last step (and, under block 32, a short last block).
  for (const size_t k : {size_t{592}, size_t{64}}) {
    auto [a, b] = Structured(26, k, 70, rng);
    std::normal_distribution<float> nd;
    std::vector<float> c(26 * 70);
    // (some far below the groups, which an all-zero group's exponent cuts under MMA-Sim's zero rule)
    for (size_t i = 0; i < c.size(); ++i)
      c[i] = i % 9 == 0 ? 0.0f : nd(rng) * std::ldexp(1.0f, static_cast<int>(i % 40) - (i % 7 == 3 ? 60 : 10));
    const std::string ks = " K=" + std::to_string(k);
    for (const AccumModel& m : models) {
      CheckEverywhere(a, b, {}, m, "plain" + ks);
      CheckEverywhere(a, b, c, m, "plain with C" + ks);
    }
    GemmOperand ma = a, mb = b;
    BigSmallUe8m0(ma, true, rng);
    BigSmallUe8m0(mb, false, rng);
    GemmOperand na = a, nb = b;
    E4m3Scales(na, true, rng);
    E4m3Scales(nb, false, rng);
    GemmOperand ta = na, tb = nb;  // with tensor scales (C with tensor scales is refused)
    ta.tensor_scale = 0.375f;
    tb.tensor_scale = 1.0f / 3;
    for (const AccumModel& m : models) {
      if (m.fused.group > 16) continue;  // block 16 (NVFP4) holds no group of 32
      CheckEverywhere(ta, tb, {}, m, "nvfp4" + ks);
      CheckEverywhere(na, nb, c, m, "nvfp4 with C" + ks);
    }
    for (const AccumModel& m : models) {
      CheckEverywhere(ma, mb, {}, m, "mxfp4" + ks);
      CheckEverywhere(ma, mb, c, m, "mxfp4 with C" + ks);
    }
  }
}

TEST_CASE("gemm: a group whose products cancel sets the step's exponent; one without a nonzero product does not",
          "[gemm]") {
  // One step of 64: group 0 holds 1 * 1 (P = 1, scales 2^0); group 1 holds 1 * 1 + 1 * -1 (P = 0 but two
  // nonzero products) under scales 2^20 * 2^20. Its exponent 40 is the step's largest, so the F = 35
  // window starts at 2^5 and the 1 of group 0 is truncated away: the result is 0. Without the
  // cancelling products (a zero group, exponent -139) the result is 1.
  const AccumModel m = AccumModelByName("blackwell-mxf4nvf4");
  std::vector<uint8_t> av(64, 0), bv(64, 0);
  av[0] = kOne;
  bv[0] = kOne;
  av[32] = av[33] = kOne;
  bv[32] = kOne;
  bv[33] = kNegOne;
  GemmOperand a = OperandFromCodes(fmt::kE2M1, 1, 64, av.data()), b = OperandFromCodes(fmt::kE2M1, 64, 1, bv.data());
  std::mt19937 rng(1);
  qmx::test::AddUe8m0(a, true, 32, rng, 0, 0);
  qmx::test::AddUe8m0(b, false, 32, rng, 0, 0);
  a.scales[1] = b.scales[1] = 0x1p20f;
  CHECK(Gemm(a, b, nullptr, m)[0] == 0.0f);
  CHECK(GemmRef(a, b, nullptr, m)[0] == 0.0f);
  // Disjoint supports: A nonzero at K = 32, B at K = 33 only: no nonzero product, a zero group.
  GemmOperand a2 = a, b2 = b;
  a2.codes[33] = 0;
  b2.codes[32] = 0;
  CHECK(Gemm(a2, b2, nullptr, m)[0] == 1.0f);
  CHECK(GemmRef(a2, b2, nullptr, m)[0] == 1.0f);
}
