// test_transform.cc: block Hadamard transforms against an explicit Eigen matrix product and the popcount
// reference, orthogonality, inverse round trips, seeded signs; QuEST's clip constant against the
// published value, and the QuEST quantizer against a one-element-at-a-time reimplementation.
#include <Eigen/Dense>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <random>
#include <vector>

#include "qmx/distributions.h"
#include "qmx/error.h"
#include "qmx/round.h"
#include "qmx/testing.h"
#include "qmx/transform.h"
#include "support/hex.h"
#include "support/modes.h"

using namespace qmx;
using qmx::test::FloatBits;
using qmx::test::Hex;

namespace {

// The Sylvester matrix built by Kronecker products (independent of the popcount rule and the butterflies).
Eigen::MatrixXd Sylvester(int n) {
  Eigen::MatrixXd h(1, 1);
  h(0, 0) = 1;
  while (h.rows() < n) {
    const int m = static_cast<int>(h.rows());
    Eigen::MatrixXd k(2 * m, 2 * m);
    k << h, h, h, -h;
    h = k;
  }
  return h / std::sqrt(static_cast<double>(n));
}

}  // namespace

TEST_CASE("transform: Hadamard forward equals H D x as an Eigen matrix product, for every size", "[transform]") {
  for (int n : {16, 32, 64, 128, 256}) {
    for (bool randomized : {false, true}) {
      HadamardSpec h;
      h.block = n;
      h.randomized = randomized;
      h.seed = 99;
      const size_t rows = 3, cols = static_cast<size_t>(n) * 2;
      std::vector<float> x(rows * cols), y(rows * cols), yref(rows * cols);
      GenerateDist(ParseDist("laplace+tau30:0.01"), 7, x.data(), x.size());
      HadamardForward(h, x.data(), y.data(), rows, cols);
      HadamardForwardRef(h, x.data(), yref.data(), rows, cols);
      const Eigen::MatrixXd H = Sylvester(n);
      const std::vector<float> sign = HadamardSigns(h);
      Eigen::VectorXd d(n);
      for (int j = 0; j < n; ++j) d[j] = sign[j];
      for (size_t b = 0; b < rows * cols / n; ++b) {
        Eigen::VectorXd v(n);
        for (int j = 0; j < n; ++j) v[j] = x[b * n + j];
        const Eigen::VectorXd want = H * d.cwiseProduct(v);
        for (int j = 0; j < n; ++j) {
          INFO("n " << n << " randomized " << randomized << " block " << b << " j " << j);
          CHECK(std::fabs(y[b * n + j] - want[j]) <= 1e-6 * (std::fabs(want[j]) + 1e-3));
          // Laplace data spans few binades: the sums are exact, so the butterflies equal the reference.
          CHECK(FloatBits(y[b * n + j]) == FloatBits(yref[b * n + j]));
        }
      }
    }
  }
}

TEST_CASE("transform: Hadamard is orthogonal: unit vectors map to rows of H, and the inverse round-trips",
          "[transform]") {
  for (int n : {16, 32, 64, 128, 256}) {
    HadamardSpec h;
    h.block = n;
    h.randomized = true;
    h.seed = 5;
    // Transform each unit vector: the n outputs form H D; (H D)(H D)^T must be the identity.
    std::vector<float> e(static_cast<size_t>(n) * n, 0.0f), y(e.size());
    for (int i = 0; i < n; ++i) e[i * n + i] = 1.0f;
    HadamardForward(h, e.data(), y.data(), n, n);
    Eigen::MatrixXd m(n, n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) m(i, j) = y[i * n + j];
    CHECK((m * m.transpose() - Eigen::MatrixXd::Identity(n, n)).cwiseAbs().maxCoeff() < 1e-6);
    // Round trip on data: within a few FP32 ulps.
    const size_t rows = 8, cols = static_cast<size_t>(n) * 4;
    std::vector<float> x(rows * cols), t(rows * cols), back(rows * cols);
    GenerateDist(ParseDist("normal"), 1, x.data(), x.size());
    HadamardForward(h, x.data(), t.data(), rows, cols);
    HadamardInverse(h, t.data(), back.data(), rows, cols);
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(double(back[i]) - x[i]));
    CHECK(worst < 1e-5);
    // In place equals out of place.
    std::vector<float> in_place = x;
    HadamardForward(h, in_place.data(), in_place.data(), rows, cols);
    CHECK(std::memcmp(in_place.data(), t.data(), t.size() * 4) == 0);
  }
}

TEST_CASE("transform: the Hadamard kernel equals the scalar butterflies bit for bit on every SIMD target",
          "[transform]") {
  // +-2^40 (which cancel exactly in the sums) among values near 2^-20 (which vanish beside 2^40 in
  // double): whether a small value survives depends on the order of the butterflies, and shows after
  // rounding to FP32. Plus values spanning 2^-140 .. 2^100, zeros, a subnormal, Inf, NaN and sums that overflow.
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> e(-140, 100);
  std::normal_distribution<float> nd;
  const size_t rows = 7;
  qmx::test::TargetGuard guard;
  for (int n : {16, 32, 64, 128, 256}) {
    const size_t cols = static_cast<size_t>(n) * 3;
    std::vector<float> x(rows * cols);
    for (size_t i = 0; i < x.size(); ++i) {
      const unsigned kind = rng() % 10;
      x[i] = kind < 3 ? ((rng() & 1) ? 0x1p40f : -0x1p40f) : std::ldexp(nd(rng), kind == 9 ? e(rng) : -20);
      if (i % 23 == 0) x[i] = 0.0f;
    }
    x[5] = 1e-45f;
    x[cols + 3] = std::numeric_limits<float>::infinity();
    x[2 * cols + 1] = std::numeric_limits<float>::quiet_NaN();
    // Row 3's first block: sums beyond the FP32 range, which round to +-Inf (Highway's SCALAR and EMU128
    // DemoteTo would clamp them to the largest float).
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) x[3 * cols + i] = (i % 3 == 2) ? -3.0e38f : 3.0e38f;
    // Specials meeting inside one block: +Inf against -Inf (a new NaN), and a NaN with a payload beside an
    // Inf, whose NaN every output must carry. (Where two NaNs of different payloads meet, which one a sum
    // passes on follows the compiler's operand order, in the reference as in the kernel: not pinned.)
    uint32_t payload = 0x7FC00003u;
    float nan_payload;
    std::memcpy(&nan_payload, &payload, 4);
    x[5 * cols + 2] = std::numeric_limits<float>::infinity();
    x[5 * cols + 7] = -std::numeric_limits<float>::infinity();
    x[6 * cols + 1] = nan_payload;
    x[6 * cols + 4] = -std::numeric_limits<float>::infinity();
    for (bool randomized : {false, true})
      for (bool inverse : {false, true}) {
        HadamardSpec h;
        h.block = n;
        h.randomized = randomized;
        h.seed = 17;
        std::vector<float> want(x.size()), got(x.size());
        HadamardButterfliesRef(h, x.data(), want.data(), rows, cols, inverse);
        for (const std::string& target : SimdTargets()) {
          ForceSimdTarget(target);
          std::vector<float> io = x;
          if (inverse) HadamardInverse(h, io.data(), io.data(), rows, cols);
          else HadamardForward(h, io.data(), io.data(), rows, cols);
          size_t bad = 0;
          for (size_t i = 0; i < x.size(); ++i) bad += FloatBits(io[i]) != FloatBits(want[i]);
          INFO("n " << n << " randomized " << randomized << " inverse " << inverse << " target " << target);
          CHECK(bad == 0);
        }
        ForceSimdTarget("");
      }
  }
}

TEST_CASE("transform: randomized Hadamard signs come from the seed; parsing names its problems", "[transform]") {
  const HadamardSpec a = ParseHadamard("rht:32:7"), b = ParseHadamard("rht:32:8");
  CHECK(a.randomized);
  CHECK(a.seed == 7);
  CHECK(HadamardSigns(a) != HadamardSigns(b));
  const std::vector<float> s = HadamardSigns(a);
  int neg = 0;
  for (float v : s) neg += v < 0;
  CHECK(neg > 4);
  CHECK(neg < 28);
  CHECK(DescribeHadamard(a) == "rht:32:7");
  CHECK(HadamardSigns(ParseHadamard("hadamard:16")) == std::vector<float>(16, 1.0f));
  CHECK_THROWS_WITH(ParseHadamard("hadamard:24"), Catch::Contains("unsupported block size 24"));
  CHECK_THROWS_WITH(ParseHadamard("hadamard:32:1"), Catch::Contains("takes no seed"));
  CHECK_THROWS_WITH(ParseHadamard("walsh:32"), Catch::Contains("unknown kind"));
  std::vector<float> x(48);
  CHECK_THROWS_WITH(HadamardForward(ParseHadamard("hadamard:32"), x.data(), x.data(), 1, 48),
                    Catch::Contains("does not divide the row length 48"));
}

TEST_CASE("transform: QuEST clip ratio: the Gaussian MSE minimum reproduces QuEST's E2M1 constant", "[transform]") {
  // IST-DASLab/Quartet notebooks/mse_fitting.ipynb: optimal scale a = 0.487079483934662 for the E2M1 grid
  // (alpha = 6a = 2.92247690), minimum MSE 0.012684904; the code's constant is 2.92247856.
  const double alpha = QuestOptimalClip(fmt::kE2M1);
  CHECK(alpha == Approx(6 * 0.487079483934662).epsilon(2e-6));
  CHECK(QuestGaussianMse(fmt::kE2M1, alpha) == Approx(0.012684904).epsilon(1e-6));
  CHECK(QuestDefaultClip(fmt::kE2M1) == 2.92247856);
  // The MSE formula against a Monte Carlo estimate with exact-scale RNE quantization.
  std::vector<float> g(1 << 20);
  GenerateDist(ParseDist("normal"), 2, g.data(), g.size());
  const double s = alpha / 6.0;
  CastOptions rne;
  double se = 0;
  for (float v : g) {
    const double q = DecodeToDouble(fmt::kE2M1, ConvertF32(static_cast<float>(v / s), fmt::kE2M1, rne)) * s;
    se += (v - q) * (v - q);
  }
  CHECK(se / g.size() == Approx(QuestGaussianMse(fmt::kE2M1, alpha)).epsilon(0.01));
  // Wider grids clip further out.
  CHECK(QuestOptimalClip(fmt::kE4M3) > QuestOptimalClip(fmt::kE2M3));
  CHECK(QuestOptimalClip(fmt::kE2M3) > alpha);
}

TEST_CASE("transform: QuEST quantizer equals a one-group-at-a-time reimplementation", "[transform]") {
  const size_t rows = 5, cols = 128;
  std::vector<float> x(rows * cols);
  GenerateDist(ParseDist("student-t:4"), 9, x.data(), x.size());
  x[40] = 0;  // a zero and a whole zero group
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);
  QuantSpec spec = QuantSpecByName("mxfp4");
  for (QuestStat stat : {QuestStat::kStd, QuestStat::kRms}) {
    for (QuestScaleRounding sr : {QuestScaleRounding::kFloor, QuestScaleRounding::kNearest, QuestScaleRounding::kExact}) {
      QuestOptions opt;
      opt.stat = stat;
      opt.scale_rounding = sr;
      const QuestResult r = QuestQuantize(x.data(), rows, cols, spec, opt);
      for (size_t g0 = 0; g0 < x.size(); g0 += 32) {
        double mean = 0, sq = 0;
        for (size_t i = 0; i < 32; ++i) mean += x[g0 + i], sq += double(x[g0 + i]) * x[g0 + i];
        mean /= 32;
        double var = 0;
        for (size_t i = 0; i < 32; ++i) var += (x[g0 + i] - mean) * (x[g0 + i] - mean);
        const double st = stat == QuestStat::kStd ? std::sqrt(var / 32) : std::sqrt(sq / 32);
        const float s0 = static_cast<float>(st * (2.92247856 / 6.0) + 1e-8);
        int e;
        const double m = std::frexp(s0, &e);  // s0 = m 2^e, m in [0.5, 1)
        float scale = s0;
        if (sr == QuestScaleRounding::kFloor) scale = std::ldexp(1.0f, e - 1);
        if (sr == QuestScaleRounding::kNearest) scale = std::ldexp(1.0f, m * 2 >= std::sqrt(2.0) ? e : e - 1);
        INFO("stat " << QuestStatName(stat) << " rounding " << QuestScaleRoundingName(sr) << " group " << g0 / 32);
        REQUIRE(FloatBits(r.scales[g0 / 32]) == FloatBits(scale));
        for (size_t i = 0; i < 32; ++i) {
          const float v = x[g0 + i] / scale;
          const float want = DecodeToFloat(fmt::kE2M1, ConvertF32(v, fmt::kE2M1, spec.cast)) * scale;
          INFO("x " << Hex(FloatBits(x[g0 + i])) << " got " << Hex(FloatBits(r.dequant[g0 + i])) << " want " << Hex(FloatBits(want)));
          CHECK(FloatBits(r.dequant[g0 + i]) == FloatBits(want));
          CHECK(r.mask[g0 + i] == (std::fabs(v) < 6.0f));
        }
      }
    }
  }
  // Column-wise or 2-D specs are refused with the reason.
  CHECK_THROWS_WITH(QuestQuantize(x.data(), rows, cols, QuantSpecByName("nvfp4-2d")), Catch::Contains("row-wise 1xK"));
}
