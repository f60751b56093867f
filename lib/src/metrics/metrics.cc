// metrics.cc: the error, misalignment and kurtosis statistics of qmx/metrics.h. Sums run in double over
// fixed chunks of kMetricsChunk element indices (rows for the per-row statistics), combined in order;
// inside a chunk the error sums run in eight lanes (metrics_internal.h), through the Highway kernel.
#include "qmx/metrics.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "metrics/metrics_internal.h"
#include "metrics/metrics_simd.h"
#include "qmx/error.h"

namespace qmx {
namespace {

using detail::AddElement;
using detail::kErrorLanes;

// Elements pos .. pos + n - 1 of a chunk into its lanes, one at a time: the reference order.
template <typename Ref>
void AddScalar(ErrorStats* lanes, size_t pos, const Ref* ref, const float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) AddElement(lanes[(pos + i) % kErrorLanes], ref[i], out[i]);
}

// The same through the Highway kernel, which takes whole groups of eight starting at lane 0.
template <typename Ref>
void AddFast(ErrorStats* lanes, size_t pos, const Ref* ref, const float* out, size_t n) {
  const size_t head = std::min(n, (kErrorLanes - pos % kErrorLanes) % kErrorLanes);
  AddScalar(lanes, pos, ref, out, head);
  const size_t body = (n - head) / kErrorLanes * kErrorLanes;
  simd::ErrorLanes(ref + head, out + head, body, lanes);
  AddScalar(lanes, pos + head + body, ref + head + body, out + head + body, n - head - body);
}

template <typename Ref>
ErrorStats ChunkStats(const Ref* ref, const float* out, size_t n) {
  ErrorStats lanes[kErrorLanes];
  AddFast(lanes, 0, ref, out, n);
  detail::FoldLanes(lanes);
  return lanes[0];
}

}  // namespace

double ErrorStats::Mse() const { return count ? sum_sq_err / static_cast<double>(count) : 0.0; }
double ErrorStats::Rmse() const { return std::sqrt(Mse()); }
double ErrorStats::Nmse() const {
  if (sum_sq_ref == 0) return sum_sq_err == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return sum_sq_err / sum_sq_ref;
}
double ErrorStats::SqnrDb() const {
  if (sum_sq_err == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(sum_sq_ref / sum_sq_err);
}
double ErrorStats::Bias() const { return count ? sum_err / static_cast<double>(count) : 0.0; }
double ErrorStats::MeanRelErr() const { return rel_count ? sum_rel_err / static_cast<double>(rel_count) : 0.0; }
double ErrorStats::Cosine() const {
  if (sum_sq_ref == 0 && sum_sq_out == 0) return 1.0;
  if (sum_sq_ref == 0 || sum_sq_out == 0) return 0.0;
  return sum_dot / std::sqrt(sum_sq_ref * sum_sq_out);
}
std::vector<std::pair<std::string, double>> ErrorMetrics(const ErrorStats& e) {
  return {{"mse", e.Mse()},
          {"rmse", e.Rmse()},
          {"nmse", e.Nmse()},
          {"sqnr_db", e.SqnrDb()},
          {"max_abs_err", e.max_abs_err},
          {"max_rel_err", e.max_rel_err},
          {"mean_rel_err", e.MeanRelErr()},
          {"bias", e.Bias()},
          {"cosine", e.Cosine()}};
}
void ErrorStats::Merge(const ErrorStats& b) {
  count += b.count;
  nonfinite += b.nonfinite;
  out_nonfinite += b.out_nonfinite;
  sum_sq_err += b.sum_sq_err;
  sum_err += b.sum_err;
  sum_sq_ref += b.sum_sq_ref;
  sum_sq_out += b.sum_sq_out;
  sum_dot += b.sum_dot;
  max_abs_err = std::max(max_abs_err, b.max_abs_err);
  max_rel_err = std::max(max_rel_err, b.max_rel_err);
  zero_ref_err += b.zero_ref_err;
  sum_rel_err += b.sum_rel_err;
  rel_count += b.rel_count;
}

namespace {

template <typename Ref>
ErrorStats CompareChunked(const Ref* ref, const float* out, size_t n, Exec exec) {
  const size_t chunks = (n + kMetricsChunk - 1) / kMetricsChunk;
  std::vector<ErrorStats> part(chunks);
  const bool par = exec == Exec::kParallel && chunks > 1;
#pragma omp parallel for schedule(static) if (par)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t lo = c * kMetricsChunk, len = std::min(kMetricsChunk, n - lo);
    part[c] = ChunkStats(ref + lo, out + lo, len);
  }
  ErrorStats s;
  for (const ErrorStats& p : part) s.Merge(p);
  return s;
}

}  // namespace

ErrorStats CompareTensors(const float* ref, const float* out, size_t n, Exec exec) {
  return CompareChunked(ref, out, n, exec);
}
ErrorStats CompareTensors(const double* ref, const float* out, size_t n, Exec exec) {
  return CompareChunked(ref, out, n, exec);
}

ErrorStats CompareTensorsRef(const float* ref, const float* out, size_t n) {
  // One element at a time into its chunk's lane, lanes folded per chunk, chunks in order; no SIMD, no
  // OpenMP.
  ErrorStats total;
  for (size_t lo = 0; lo < n; lo += kMetricsChunk) {
    ErrorStats lanes[kErrorLanes];
    AddScalar(lanes, 0, ref + lo, out + lo, std::min(kMetricsChunk, n - lo));
    detail::FoldLanes(lanes);
    total.Merge(lanes[0]);
  }
  return total;
}

void ErrorAccumulator::Add(const float* ref, const float* out, size_t n) {
  static_assert(sizeof lanes_ / sizeof lanes_[0] == kErrorLanes, "one partial sum per lane");
  while (n > 0) {
    const size_t take = std::min(n, kMetricsChunk - in_chunk_);
    AddFast(lanes_, in_chunk_, ref, out, take);
    in_chunk_ += take;
    ref += take;
    out += take;
    n -= take;
    if (in_chunk_ == kMetricsChunk) {
      detail::FoldLanes(lanes_);
      total_.Merge(lanes_[0]);
      for (ErrorStats& l : lanes_) l = ErrorStats{};
      in_chunk_ = 0;
    }
  }
}

ErrorStats ErrorAccumulator::Result() const {
  ErrorStats s = total_;
  if (in_chunk_ > 0) {
    ErrorStats lanes[kErrorLanes];
    std::copy(lanes_, lanes_ + kErrorLanes, lanes);
    detail::FoldLanes(lanes);
    s.Merge(lanes[0]);
  }
  return s;
}

double MisalignmentStats::MeanInvS() const { return groups ? sum_inv_s / static_cast<double>(groups) : 1.0; }
double MisalignmentStats::Misalignment() const { return 1.0 - MeanInvS(); }
double MisalignmentStats::StdErr() const {
  if (groups < 2) return 0.0;
  const double n = static_cast<double>(groups), m = sum_inv_s / n;
  const double var = std::max(0.0, (sum_inv_s_sq - n * m * m) / (n - 1));
  return std::sqrt(var / n);
}
void MisalignmentStats::Merge(const MisalignmentStats& b) {
  groups += b.groups;
  skipped += b.skipped;
  sum_inv_s += b.sum_inv_s;
  sum_inv_s_sq += b.sum_inv_s_sq;
}

MisalignmentStats ProjectionMisalignment(const float* x, const float* q, size_t rows, size_t cols, size_t group,
                                         Exec exec) {
  if (group == 0 || cols % group != 0)
    throw Error("misalignment: the row length " + std::to_string(cols) + " is not a multiple of the group size " +
                std::to_string(group));
  // Rows are the chunks: each row's groups in order, rows combined in order.
  std::vector<MisalignmentStats> part(rows);
  const bool par = exec == Exec::kParallel && rows * cols >= kMetricsChunk;
#pragma omp parallel for schedule(static) if (par)
  for (size_t r = 0; r < rows; ++r) {
    MisalignmentStats s;
    for (size_t g = 0; g < cols; g += group) {
      const float* xg = x + r * cols + g;
      const float* qg = q + r * cols + g;
      double xx = 0, xq = 0;
      bool finite = true;
      for (size_t i = 0; i < group; ++i) {
        finite = finite && std::isfinite(xg[i]) && std::isfinite(qg[i]);
        xx += static_cast<double>(xg[i]) * xg[i];
        xq += static_cast<double>(xg[i]) * qg[i];
      }
      if (!finite || xx == 0) {
        ++s.skipped;
        continue;
      }
      const double inv_s = xq / xx;
      ++s.groups;
      s.sum_inv_s += inv_s;
      s.sum_inv_s_sq += inv_s * inv_s;
    }
    part[r] = s;
  }
  MisalignmentStats total;
  for (const MisalignmentStats& p : part) total.Merge(p);
  return total;
}

KurtosisStats RowKurtosis(const float* x, size_t rows, size_t cols, const std::vector<double>& taus, Exec exec) {
  KurtosisStats out;
  out.rows = rows;
  out.taus = taus;
  out.outliers.assign(taus.size(), 0);
  std::vector<double> kurt(rows, std::numeric_limits<double>::quiet_NaN());
  std::vector<uint64_t> counts(rows * taus.size(), 0);
  const bool par = exec == Exec::kParallel && rows * cols >= kMetricsChunk;
#pragma omp parallel for schedule(static) if (par)
  for (size_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    double m2 = 0, m4 = 0;
    bool finite = true;
    for (size_t c = 0; c < cols; ++c) {
      const double v = row[c];
      finite = finite && std::isfinite(row[c]);
      const double v2 = v * v;
      m2 += v2;
      m4 += v2 * v2;
    }
    if (!finite || m2 == 0 || cols == 0) continue;
    m2 /= static_cast<double>(cols);
    m4 /= static_cast<double>(cols);
    kurt[r] = m4 / (m2 * m2);
    const double rms = std::sqrt(m2);
    for (size_t t = 0; t < taus.size(); ++t) {
      const double thr = taus[t] * rms;
      uint64_t n = 0;
      for (size_t c = 0; c < cols; ++c) n += std::fabs(static_cast<double>(row[c])) >= thr;
      counts[r * taus.size() + t] = n;
    }
  }
  double sum = 0;
  uint64_t used = 0;
  for (size_t r = 0; r < rows; ++r) {
    if (std::isnan(kurt[r])) {
      ++out.skipped_rows;
      continue;
    }
    ++used;
    sum += kurt[r];
    out.max_kurtosis = std::max(out.max_kurtosis, kurt[r]);
    for (size_t t = 0; t < taus.size(); ++t) out.outliers[t] += counts[r * taus.size() + t];
  }
  out.mean_kurtosis = used ? sum / static_cast<double>(used) : 0.0;
  return out;
}

}  // namespace qmx
