// sweeps.cc: the study loops built on RunStudyMethod: repeated trials merged in order, and FOG's
// theorem-1 outlier sweep (the error an injected outlier causes in the rest of its block).
#include <algorithm>

#include "qmx/error.h"
#include "qmx/study.h"

namespace qmx {

void MergeStudyOutcome(StudyOutcome& total, const StudyOutcome& o) {
  total.error.Merge(o.error);
  total.misalignment.Merge(o.misalignment);
  total.stats.elements += o.stats.elements;
  total.stats.saturated += o.stats.saturated;
  total.stats.flushed_to_zero += o.stats.flushed_to_zero;
  total.stats.nan_inputs += o.stats.nan_inputs;
  total.stats.inf_inputs += o.stats.inf_inputs;
  total.stats.nan_blocks += o.stats.nan_blocks;
  for (size_t b = 0; b < total.stats.scale_histogram.size() && b < o.stats.scale_histogram.size(); ++b)
    total.stats.scale_histogram[b] += o.stats.scale_histogram[b];
}

StudyOutcome RunStudyTrials(const float* x, size_t rows, size_t cols, const StudyMethod& m, int trials,
                            const std::function<void()>& after_trial) {
  if (trials < 1) throw Error("a study needs at least one trial, not " + std::to_string(trials));
  StudyOutcome total;
  for (int t = 0; t < trials; ++t) {
    StudyMethod mt = m;
    mt.spec.seed += static_cast<uint64_t>(t);
    if (mt.hadamard && mt.hadamard->randomized) mt.hadamard->seed += static_cast<uint64_t>(t);
    StudyOutcome o = RunStudyMethod(x, rows, cols, mt);
    if (after_trial) after_trial();
    if (t == 0) {
      total = std::move(o);
    } else {
      MergeStudyOutcome(total, o);
    }
  }
  return total;
}

std::vector<OutlierSweepPoint> OutlierSweep(const float* base, size_t rows, size_t cols, const QuantSpec& spec,
                                            size_t period, const std::vector<double>& taus,
                                            const std::function<void()>& after_point) {
  const size_t n = rows * cols;
  if (period < 2 || period > n) throw Error("the outlier period must lie in 2.." + std::to_string(n));
  for (double t : taus)
    if (!(t > 0)) throw Error("outlier magnitudes must be positive");
  std::vector<float> x(n), deq(n);
  std::vector<OutlierSweepPoint> out;
  double clean_mse = 0;
  // Point 0 is the clean tensor, the reference of every later point's MSE.
  for (size_t k = 0; k <= taus.size(); ++k) {
    const double tau = k == 0 ? 0.0 : taus[k - 1];
    std::copy(base, base + n, x.begin());
    if (tau > 0)
      for (size_t i = 0; i < n; i += period) x[i] = static_cast<float>(tau);
    FakeQuantize(TensorView{DType::kF32, x.data(), rows, cols}, spec, deq.data());
    // The outliers themselves are left out of the comparison.
    ErrorAccumulator acc;
    for (size_t i = 0; i < n; i += period) {
      const size_t end = std::min(n, i + period);
      acc.Add(x.data() + i + 1, deq.data() + i + 1, end - i - 1);
    }
    const ErrorStats e = acc.Result();
    if (after_point) after_point();
    if (k == 0) {
      clean_mse = e.Mse();
      continue;
    }
    OutlierSweepPoint p;
    p.tau = tau;
    p.others = e;
    p.clean_mse = clean_mse;
    uint64_t zeroed = 0, others = 0;
    for (size_t i = 0; i < n; ++i)
      if (i % period != 0) ++others, zeroed += (x[i] != 0 && deq[i] == 0);
    p.zeroed_fraction = static_cast<double>(zeroed) / static_cast<double>(others);
    out.push_back(p);
  }
  return out;
}

}  // namespace qmx
