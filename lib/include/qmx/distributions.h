// qmx/distributions.h: seeded synthetic inputs for studies: normal, Laplace, Student-t, lognormal and
// uniform, each scaled to unit RMS where it is finite, optionally with injected tau-outliers (FOG).
// Element i draws only from Philox4x32-10 counters keyed by (seed, i), so any thread count, split or
// SIMD target produces the same values (libm's log/exp/cos/pow are the only other ingredient).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qmx/convert.h"

namespace qmx {

enum class DistKind : uint8_t { kNormal, kLaplace, kStudentT, kLogNormal, kUniform };

struct DistSpec {
  DistKind kind = DistKind::kNormal;
  double param = 0;          // Student-t: degrees of freedom nu (> 0); lognormal: sigma (> 0)
  double outlier_tau = 0;    // 0: none; else outliers of magnitude tau (in units of the nominal RMS, 1)
  double outlier_rate = 0;   // fraction of elements replaced by an outlier (default 1/1024 when tau > 0)
};

// Spellings: "normal", "laplace", "student-t:NU", "lognormal:SIGMA", "uniform", each optionally followed
// by "+tauT" or "+tauT:RATE" (e.g. "normal+tau20", "laplace+tau50:0.001"). Throws qmx::Error naming the
// problem and listing the accepted forms.
DistSpec ParseDist(const std::string& s);
std::string DescribeDist(const DistSpec& d);  // the canonical spelling, parseable again
std::vector<std::string> DistSyntax();        // one line per form, for help text

// Scaling to unit RMS: normal sigma 1; Laplace b = 1/sqrt(2); uniform on [-sqrt(3), sqrt(3)]; Student-t
// times sqrt((nu - 2) / nu) when nu > 2 (unscaled otherwise: its variance is infinite); lognormal
// exp(sigma g) / exp(sigma^2) (positive, E[x^2] = 1). An outlier replaces element i with probability
// outlier_rate, keeping the element's sign, with magnitude outlier_tau.
// Writes n values for elements first .. first + n - 1 of the stream.
void GenerateDist(const DistSpec& d, uint64_t seed, float* out, size_t n, uint64_t first = 0,
                  Exec exec = Exec::kParallel);

}  // namespace qmx
