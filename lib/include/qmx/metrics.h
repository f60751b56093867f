// qmx/metrics.h: error statistics between a reference tensor and its quantized image (MSE, SQNR, cosine,
// bias, max errors), the Quartet projection-magnitude misalignment (docs/REFERENCES.md section 7),
// kurtosis and tau-outliers (FOG). Every sum runs in double over fixed chunks of the element index,
// combined in chunk order, so results are the same bits for any thread count, SIMD target or call split.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qmx/convert.h"

namespace qmx {

// Elements are summed in chunks of this many consecutive indices; each chunk's partial sums are added to
// the totals in index order. Inside a chunk, element i adds to partial sum i % 8 (eight FP64 lanes), and
// the eight are folded as l + 4, then + 2, then + 1.
inline constexpr size_t kMetricsChunk = 65536;

// Error of `out` against `ref`, over the elements where both are finite. Elements where either is not
// finite are counted (nonfinite) and left out of every sum; a finite ref with a non-finite out is also
// counted in out_nonfinite, which a study reports as an error of the quantizer.
struct ErrorStats {
  uint64_t count = 0;          // elements compared (both finite)
  uint64_t nonfinite = 0;      // elements skipped because ref or out is NaN or Inf
  uint64_t out_nonfinite = 0;  // of those, ref finite but out NaN or Inf
  double sum_sq_err = 0;       // sum (out - ref)^2
  double sum_err = 0;          // sum (out - ref)
  double sum_sq_ref = 0;       // sum ref^2
  double sum_sq_out = 0;       // sum out^2
  double sum_dot = 0;          // sum ref * out
  double max_abs_err = 0;      // max |out - ref|
  double max_rel_err = 0;      // max |out - ref| / |ref| over ref != 0
  uint64_t zero_ref_err = 0;   // elements with ref == 0 and out != 0 (no relative error exists)
  double sum_rel_err = 0;      // sum |out - ref| / |ref| over ref != 0
  uint64_t rel_count = 0;      // elements with ref != 0

  double Mse() const;         // sum_sq_err / count (0 when count is 0)
  double Rmse() const;
  double Nmse() const;        // sum_sq_err / sum_sq_ref: MSE relative to the signal power
  double SqnrDb() const;      // 10 log10(sum_sq_ref / sum_sq_err); +Inf when the error is zero
  double Bias() const;        // sum_err / count: the mean error
  double MeanRelErr() const;  // sum_rel_err / rel_count: what wide-range data (gradients) loses per element
  double Cosine() const;      // sum_dot / sqrt(sum_sq_ref * sum_sq_out); 1 when both are all zero
  void Merge(const ErrorStats& later);  // appends `later`'s elements after this one's
};
// The derived metrics by name, in the one order the CLI's study rows and JSON and Python's error_stats give
// them: mse, rmse, nmse, sqnr_db, max_abs_err, max_rel_err, mean_rel_err, bias, cosine.
std::vector<std::pair<std::string, double>> ErrorMetrics(const ErrorStats& e);

// The statistics of out against ref, n elements. kParallel computes chunks on OpenMP threads; the result
// equals the sequential one bit for bit.
ErrorStats CompareTensors(const float* ref, const float* out, size_t n, Exec exec = Exec::kParallel);
// Against a double reference (the training recipes' FP64 GEMMs): each difference is rounded once to double.
ErrorStats CompareTensors(const double* ref, const float* out, size_t n, Exec exec = Exec::kParallel);
// The deliberately simple reference: one element at a time, the same chunked order, no OpenMP.
ErrorStats CompareTensorsRef(const float* ref, const float* out, size_t n);

// Streaming form: Add() any split of a long stream; the result equals CompareTensors over the whole
// stream, because chunk boundaries follow the element index, not the calls.
class ErrorAccumulator {
 public:
  void Add(const float* ref, const float* out, size_t n);
  ErrorStats Result() const;  // totals plus the open chunk

 private:
  ErrorStats total_;
  ErrorStats lanes_[8];  // the open chunk's lanes: element i of a chunk adds to lane i % 8
  size_t in_chunk_ = 0;
};

// Quartet's projection-magnitude misalignment (Castro et al. 2025, section 4.3). For a group x
// (in the domain the quantizer sees, i.e. after the Hadamard transform, which preserves <x, x>) and its
// quantized image q, 1/S = <x, q> / <x, x>. The estimator is the mean of 1/S over every group of `group`
// consecutive elements along each row (and over however many trials are Added), and the misalignment is
// 1 - that mean. Groups with <x, x> = 0 or a non-finite element are skipped and counted.
struct MisalignmentStats {
  uint64_t groups = 0, skipped = 0;
  double sum_inv_s = 0;     // sum of 1/S over the groups, in group order
  double sum_inv_s_sq = 0;  // sum of (1/S)^2, for the standard error
  double MeanInvS() const;
  double Misalignment() const;  // 1 - MeanInvS()
  double StdErr() const;        // standard error of the mean of 1/S
  void Merge(const MisalignmentStats& later);
};
// x and q are rows x cols, row-major; cols must be a multiple of group (throws qmx::Error otherwise).
MisalignmentStats ProjectionMisalignment(const float* x, const float* q, size_t rows, size_t cols, size_t group,
                                         Exec exec = Exec::kParallel);

// FOG's kurtosis: kurt(x) = mean(x^4) / mean(x^2)^2 per row, without centering (3 for a
// Gaussian, 1.8 for a uniform); rows that are all zero or hold a non-finite value are skipped.
// tau-outliers: elements with |x_j| >= tau * rms(row).
struct KurtosisStats {
  uint64_t rows = 0, skipped_rows = 0;
  double mean_kurtosis = 0;  // averaged over the rows not skipped
  double max_kurtosis = 0;
  std::vector<double> taus;          // the thresholds asked for
  std::vector<uint64_t> outliers;    // per tau: elements at or above tau * rms of their row
};
KurtosisStats RowKurtosis(const float* x, size_t rows, size_t cols, const std::vector<double>& taus = {},
                          Exec exec = Exec::kParallel);

}  // namespace qmx
