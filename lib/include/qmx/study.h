// qmx/study.h: one step of a quantization study: an input tensor through an optional transform, a
// quantizer (a QuantSpec, or QuEST clipping) and the inverse transform, measured against the input
// (ErrorStats), with the quantizer's counts (QuantStats) and Quartet's misalignment in the transformed
// domain. The CLI's `qmx-sim study` sweeps are loops over this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qmx/metrics.h"
#include "qmx/quantize.h"
#include "qmx/transform.h"

namespace qmx {

struct StudyMethod {
  QuantSpec spec;
  std::optional<HadamardSpec> hadamard;  // applied to rows before quantizing, inverted after
  bool quest = false;                    // QuEST RMS clipping instead of the spec's absmax scale rule
  QuestOptions quest_opt;
};

// Transform spellings: "none"; "hadamard:N"; "rht:N" or "rht:N:SEED"; "quest" (QuEST on a Hadamard of
// the spec's block size, as Quartet's forward pass); "quest:N" (Hadamard of size N); "quest-rht:N[:SEED]".
// Sets m.hadamard and m.quest; throws qmx::Error naming the problem.
void SetStudyTransform(StudyMethod& m, const std::string& transform);
std::string DescribeStudyTransform(const StudyMethod& m);  // the canonical spelling
std::vector<std::string> StudyTransformSyntax();

struct StudyOutcome {
  ErrorStats error;              // dequantized (and inverse-transformed) output against the input
  QuantStats stats;              // the quantizer's counts, in the transformed domain
  MisalignmentStats misalignment;  // 1 - E[1/S] over groups of misalignment_group
  size_t misalignment_group = 0;
};

// The group Quartet's estimator uses for m: the Hadamard block when there is one, else the spec's row-wise
// block length (1xK), else the whole row.
size_t MisalignmentGroup(const StudyMethod& m, size_t cols);

// x: rows x cols FP32, row-major. Throws qmx::Error when the transform does not fit the shape or QuEST is
// asked of a spec it cannot serve. Deterministic: the same bits for any thread count and SIMD target.
StudyOutcome RunStudyMethod(const float* x, size_t rows, size_t cols, const StudyMethod& m,
                            Exec exec = Exec::kParallel);

// Adds o's statistics and counts to total (the per-trial merge of RunStudyTrials).
void MergeStudyOutcome(StudyOutcome& total, const StudyOutcome& o);
// `trials` runs of m on x, trial t with the spec's seed + t (the SR bits) and, for a randomized Hadamard,
// its seed + t (the signs), merged in trial order. after_trial, when given, is called after each trial
// (a progress bar; it may throw to stop the study).
StudyOutcome RunStudyTrials(const float* x, size_t rows, size_t cols, const StudyMethod& m, int trials,
                            const std::function<void()>& after_trial = {});

// FOG's theorem 1: a tensor with one outlier of value tau every `period` elements (at index 0, period,
// 2 period, ...); the error of the other elements after FakeQuantize under spec, against the same tensor
// with no outliers. One point per tau, in the order given; taus must be positive.
struct OutlierSweepPoint {
  double tau = 0;
  ErrorStats others;         // the non-outlier elements, with the outliers injected
  double clean_mse = 0;      // their MSE without outliers
  double zeroed_fraction = 0;  // non-outlier elements, nonzero in x, that dequantize to zero
};
std::vector<OutlierSweepPoint> OutlierSweep(const float* base, size_t rows, size_t cols, const QuantSpec& spec,
                                            size_t period, const std::vector<double>& taus,
                                            const std::function<void()>& after_point = {});

}  // namespace qmx
