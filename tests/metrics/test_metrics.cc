// test_metrics.cc: the metrics layer against direct formulas (MPFR-free: sums of small integers are
// exact in double), chunk and thread-count independence, streaming splits, misalignment and kurtosis on
// cases with known answers.
#include <omp.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "qmx/distributions.h"
#include "qmx/error.h"
#include "qmx/metrics.h"
#include "qmx/testing.h"
#include "support/hex.h"
#include "support/modes.h"

using namespace qmx;

namespace {

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void RequireSame(const ErrorStats& a, const ErrorStats& b) {
  CHECK(a.count == b.count);
  CHECK(a.nonfinite == b.nonfinite);
  CHECK(a.out_nonfinite == b.out_nonfinite);
  CHECK(a.zero_ref_err == b.zero_ref_err);
  CHECK(SameBits(a.sum_sq_err, b.sum_sq_err));
  CHECK(SameBits(a.sum_err, b.sum_err));
  CHECK(SameBits(a.sum_sq_ref, b.sum_sq_ref));
  CHECK(SameBits(a.sum_sq_out, b.sum_sq_out));
  CHECK(SameBits(a.sum_dot, b.sum_dot));
  CHECK(SameBits(a.max_abs_err, b.max_abs_err));
  CHECK(SameBits(a.max_rel_err, b.max_rel_err));
  CHECK(SameBits(a.sum_rel_err, b.sum_rel_err));
  CHECK(a.rel_count == b.rel_count);
}

}  // namespace

TEST_CASE("metrics: error statistics equal the formulas on integer data, where every sum is exact", "[metrics]") {
  // ref = i % 7 - 3, out = ref + (i % 3 - 1): errors -1, 0, 1.
  const size_t n = 1000;
  std::vector<float> ref(n), out(n);
  double se = 0, e1 = 0, sr = 0, so = 0, dot = 0;
  for (size_t i = 0; i < n; ++i) {
    ref[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
    out[i] = ref[i] + static_cast<float>(static_cast<int>(i % 3) - 1);
    const double e = out[i] - ref[i];
    se += e * e, e1 += e, sr += ref[i] * ref[i], so += out[i] * out[i], dot += ref[i] * out[i];
  }
  const ErrorStats s = CompareTensors(ref.data(), out.data(), n);
  CHECK(s.count == n);
  CHECK(s.sum_sq_err == se);
  CHECK(s.Mse() == se / n);
  CHECK(s.Bias() == e1 / n);
  CHECK(s.SqnrDb() == Approx(10 * std::log10(sr / se)).epsilon(1e-15));
  CHECK(s.Cosine() == Approx(dot / std::sqrt(sr * so)).epsilon(1e-15));
  CHECK(s.max_abs_err == 1.0);
  CHECK(s.max_rel_err == 1.0);  // ref = +-1 with error 1
  double rel = 0;
  uint64_t nz = 0;
  for (size_t i = 0; i < n; ++i)
    if (ref[i] != 0) rel += std::fabs(double(out[i]) - ref[i]) / std::fabs(double(ref[i])), ++nz;
  CHECK(s.rel_count == nz);
  CHECK(s.MeanRelErr() == Approx(rel / nz).epsilon(1e-14));
  CHECK(s.zero_ref_err > 0);    // ref = 0 with error +-1
  // The named metrics the CLI and Python report: the methods' values, in the documented order.
  const auto named = ErrorMetrics(s);
  const std::vector<std::pair<std::string, double>> want = {
      {"mse", s.Mse()},          {"rmse", s.Rmse()},
      {"nmse", s.Nmse()},        {"sqnr_db", s.SqnrDb()},
      {"max_abs_err", 1.0},      {"max_rel_err", 1.0},
      {"mean_rel_err", s.MeanRelErr()}, {"bias", s.Bias()},
      {"cosine", s.Cosine()}};
  CHECK(named == want);
}

TEST_CASE("metrics: error statistics skip and count non-finite elements", "[metrics]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> ref = {1, 2, nan, 4, inf, 6};
  const std::vector<float> out = {1, 2, 3, nan, inf, 7};
  const ErrorStats s = CompareTensors(ref.data(), out.data(), ref.size());
  CHECK(s.count == 3);
  CHECK(s.nonfinite == 3);
  CHECK(s.out_nonfinite == 1);  // ref 4, out NaN
  CHECK(s.sum_sq_err == 1.0);
  const ErrorStats z = CompareTensors(ref.data(), ref.data(), 2);
  CHECK(std::isinf(z.SqnrDb()));
  CHECK(z.Cosine() == 1.0);
}

TEST_CASE("metrics: error statistics are the same bits for any thread count, chunking or stream split", "[metrics]") {
  const size_t n = 3 * kMetricsChunk + 12345;
  std::vector<float> ref(n), out(n);
  GenerateDist(ParseDist("student-t:3+tau40"), 11, ref.data(), n);
  GenerateDist(ParseDist("normal"), 12, out.data(), n);
  for (size_t i = 0; i < n; ++i) out[i] = ref[i] + 0.01f * out[i];
  const ErrorStats want = CompareTensorsRef(ref.data(), out.data(), n);
  for (int t : {1, 2, 3, 7}) {
    omp_set_num_threads(t);
    INFO("threads " << t);
    RequireSame(CompareTensors(ref.data(), out.data(), n), want);
  }
  omp_set_num_threads(2);
  RequireSame(CompareTensors(ref.data(), out.data(), n, Exec::kSequential), want);
  std::mt19937 rng(5);
  ErrorAccumulator acc;
  size_t at = 0;
  while (at < n) {
    const size_t len = std::min<size_t>(n - at, rng() % 100000);
    acc.Add(ref.data() + at, out.data() + at, len);
    at += len;
  }
  RequireSame(acc.Result(), want);
}

namespace {

// The documented summation order, written out on its own: element i of a chunk goes to lane i % 8, the
// lanes fold as l + 4, + 2, + 1, the chunks add in order.
struct OracleSums {
  double sq = 0, err = 0, sq_ref = 0, sq_out = 0, dot = 0, rel = 0, max_abs = 0, max_rel = 0;
  uint64_t count = 0, skipped = 0, rel_count = 0, zero_ref = 0;
  void Add(const OracleSums& b) {
    sq += b.sq, err += b.err, sq_ref += b.sq_ref, sq_out += b.sq_out, dot += b.dot, rel += b.rel;
    max_abs = std::max(max_abs, b.max_abs), max_rel = std::max(max_rel, b.max_rel);
    count += b.count, skipped += b.skipped, rel_count += b.rel_count, zero_ref += b.zero_ref;
  }
};

template <typename Ref>
OracleSums LaneOracle(const Ref* ref, const float* out, size_t n) {
  OracleSums total;
  for (size_t lo = 0; lo < n; lo += kMetricsChunk) {
    OracleSums lane[8];
    for (size_t i = lo; i < std::min(n, lo + kMetricsChunk); ++i) {
      OracleSums& l = lane[(i - lo) % 8];
      if (!std::isfinite(ref[i]) || !std::isfinite(out[i])) {
        ++l.skipped;
        continue;
      }
      const double r = ref[i], o = out[i], e = o - r;
      l.sq += e * e, l.err += e, l.sq_ref += r * r, l.sq_out += o * o, l.dot += r * o;
      l.max_abs = std::max(l.max_abs, std::fabs(e));
      ++l.count;
      if (r != 0) {
        l.rel += std::fabs(e) / std::fabs(r);
        l.max_rel = std::max(l.max_rel, std::fabs(e) / std::fabs(r));
        ++l.rel_count;
      } else if (o != 0) {
        ++l.zero_ref;
      }
    }
    for (size_t half = 4; half > 0; half /= 2)
      for (size_t j = 0; j < half; ++j) lane[j].Add(lane[j + half]);
    total.Add(lane[0]);
  }
  return total;
}

void RequireSums(const ErrorStats& s, const OracleSums& o) {
  CHECK(SameBits(s.sum_sq_err, o.sq));
  CHECK(SameBits(s.sum_err, o.err));
  CHECK(SameBits(s.sum_sq_ref, o.sq_ref));
  CHECK(SameBits(s.sum_sq_out, o.sq_out));
  CHECK(SameBits(s.sum_dot, o.dot));
  CHECK(SameBits(s.sum_rel_err, o.rel));
  CHECK(SameBits(s.max_abs_err, o.max_abs));
  CHECK(SameBits(s.max_rel_err, o.max_rel));
  CHECK(s.count == o.count);
  CHECK(s.nonfinite == o.skipped);
  CHECK(s.rel_count == o.rel_count);
  CHECK(s.zero_ref_err == o.zero_ref);
}

// Magnitudes from 2^-60 to 2^60 in runs, so that every sum depends on its order; zeros in ref (no
// relative error) and in out; NaN and Inf scattered at every position of a group of eight.
template <typename Ref>
void HostileData(size_t n, std::vector<Ref>& ref, std::vector<float>& out, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> e(-60, 60);
  ref.resize(n), out.resize(n);
  int scale = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i % 37 == 0) scale = e(rng);
    const float x = std::ldexp(nd(rng), scale);
    ref[i] = static_cast<Ref>(x) + (sizeof(Ref) == 8 ? static_cast<Ref>(std::ldexp(nd(rng), scale - 40)) : 0);
    out[i] = x * (1.0f + 0x1p-8f * nd(rng));
    const unsigned k = rng() % 1000;
    if (k < 20) ref[i] = 0;
    else if (k < 30) out[i] = 0;
    else if (k == 30) out[i] = std::numeric_limits<float>::quiet_NaN();
    else if (k == 31) ref[i] = -std::numeric_limits<Ref>::infinity();
    else if (k == 32) out[i] = std::numeric_limits<float>::infinity();
  }
}

}  // namespace

TEST_CASE("metrics: the error sums follow the documented lane order on every SIMD target, float and double refs",
          "[metrics]") {
  const size_t n = 2 * kMetricsChunk + 1237;
  std::vector<float> ref32, out32;
  std::vector<double> ref64;
  std::vector<float> out64;
  HostileData(n, ref32, out32, 21);
  HostileData(n, ref64, out64, 22);
  const OracleSums want32 = LaneOracle(ref32.data(), out32.data(), n);
  const OracleSums want64 = LaneOracle(ref64.data(), out64.data(), n);
  const ErrorStats ref_path = CompareTensorsRef(ref32.data(), out32.data(), n);
  RequireSums(ref_path, want32);
  // A sequential sum gives other bits on this data: the order is what the test pins.
  double seq = 0;
  for (size_t i = 0; i < kMetricsChunk; ++i)
    if (std::isfinite(ref32[i]) && std::isfinite(out32[i])) seq += double(out32[i]) - ref32[i];
  CHECK_FALSE(SameBits(seq, LaneOracle(ref32.data(), out32.data(), kMetricsChunk).err));
  qmx::test::TargetGuard guard;
  for (const std::string& target : SimdTargets()) {
    ForceSimdTarget(target);
    for (int t : {1, 3}) {
      omp_set_num_threads(t);
      INFO("target " << target << " threads " << t);
      const ErrorStats s32 = CompareTensors(ref32.data(), out32.data(), n);
      RequireSame(s32, ref_path);
      RequireSums(CompareTensors(ref64.data(), out64.data(), n), want64);
      // Streaming in pieces that start at every lane.
      ErrorAccumulator acc;
      size_t at = 0, len = 1;
      while (at < n) {
        const size_t take = std::min(n - at, len);
        acc.Add(ref32.data() + at, out32.data() + at, take);
        at += take;
        len = len * 3 % 9973 + 1;
      }
      RequireSame(acc.Result(), ref_path);
    }
  }
  omp_set_num_threads(2);
  // Double refs with 53 significant bits: the products round, so a fused multiply-add in any sum
  // (which the lanes must not use) gives other bits. Terms of one magnitude, few per lane.
  std::mt19937_64 rng(9);
  std::vector<double> r(4096);
  std::vector<float> o(r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    r[i] = 1.0 + static_cast<double>(rng() >> 11) * 0x1p-53;
    o[i] = static_cast<float>(r[i] * (1.0 + 0x1p-10 * static_cast<double>(rng() % 64)));
  }
  for (size_t len : {size_t{64}, r.size()}) {
    const OracleSums want = LaneOracle(r.data(), o.data(), len);
    for (const std::string& target : SimdTargets()) {
      ForceSimdTarget(target);
      INFO("target " << target << " length " << len);
      RequireSums(CompareTensors(r.data(), o.data(), len), want);
    }
  }
}

TEST_CASE("projection misalignment: identity gives 0, a uniform shrink gives the shrink", "[metrics]") {
  const size_t rows = 3, cols = 64;
  std::vector<float> x(rows * cols), q(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 9) - 4);
  MisalignmentStats m = ProjectionMisalignment(x.data(), x.data(), rows, cols, 32);
  CHECK(m.groups == 6);
  CHECK(m.Misalignment() == 0.0);
  for (size_t i = 0; i < x.size(); ++i) q[i] = 0.75f * x[i];
  m = ProjectionMisalignment(x.data(), q.data(), rows, cols, 32);
  CHECK(m.Misalignment() == 0.25);
  CHECK(m.StdErr() == 0.0);
  // A zero group is skipped, not divided by.
  std::fill(x.begin(), x.begin() + 32, 0.0f);
  m = ProjectionMisalignment(x.data(), q.data(), rows, cols, 32);
  CHECK(m.groups == 5);
  CHECK(m.skipped == 1);
  CHECK_THROWS_WITH(ProjectionMisalignment(x.data(), q.data(), 1, 60, 32),
                    Catch::Contains("not a multiple of the group size 32"));
}

TEST_CASE("kurtosis: known values for constant, two-level and Gaussian rows; tau-outliers", "[metrics]") {
  // Row 0 constant (kurtosis 1); row 1 +-1 with one 8 among 64 (m2 = (63 + 64) / 64, m4 = (63 + 4096) / 64).
  std::vector<float> x(2 * 64, 1.0f);
  for (size_t c = 0; c < 64; ++c) x[64 + c] = (c % 2) ? -1.0f : 1.0f;
  x[64 + 5] = 8.0f;
  const KurtosisStats k = RowKurtosis(x.data(), 2, 64, {4.0, 10.0});
  const double m2 = 127.0 / 64, m4 = 4159.0 / 64;
  CHECK(k.max_kurtosis == Approx(m4 / (m2 * m2)).epsilon(1e-14));
  CHECK(k.mean_kurtosis == Approx((1.0 + m4 / (m2 * m2)) / 2).epsilon(1e-14));
  CHECK(k.outliers[0] == 1);  // 8 >= 4 * sqrt(127/64) = 5.63
  CHECK(k.outliers[1] == 0);
  // Gaussian rows: about 3; uniform: about 1.8; Laplace: about 6.
  const size_t rows = 64, cols = 4096;
  std::vector<float> g(rows * cols);
  for (const auto& [name, want] : std::vector<std::pair<const char*, double>>{{"normal", 3.0}, {"uniform", 1.8}, {"laplace", 6.0}}) {
    GenerateDist(ParseDist(name), 3, g.data(), g.size());
    INFO(name);
    CHECK(RowKurtosis(g.data(), rows, cols).mean_kurtosis == Approx(want).epsilon(0.03));
  }
}
