// metrics_simd.h: the Highway kernel of the error statistics behind metrics.cc.
#pragma once

#include <cstddef>

#include "qmx/metrics.h"

namespace qmx::simd {

// Adds n elements (a multiple of detail::kErrorLanes) to lanes[0..7], element i to lane i % 8, each
// lane exactly as detail::AddElement does, so the bits do not depend on the target.
void ErrorLanes(const float* ref, const float* out, size_t n, ErrorStats* lanes);
void ErrorLanes(const double* ref, const float* out, size_t n, ErrorStats* lanes);

}  // namespace qmx::simd
