// metrics_internal.h: the per-element step of the error statistics, shared by the scalar reference and
// the Highway kernel (metrics_simd.cc), and the fixed lane order both follow. AddElement is also compiled for
// the device (QMX_HOST_DEVICE): the CUDA engine's error statistics (gpu/src/engine_ops.cu) run it per lane.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "qmx/host_device.h"
#include "qmx/metrics.h"

namespace qmx::detail {

// Inside a chunk, element i adds to lane i % kErrorLanes; a chunk's lanes are then folded by FoldLanes.
// Eight is the widest FP64 vector (AVX-512); narrower targets hold the eight lanes in several vectors.
inline constexpr size_t kErrorLanes = 8;

// One element into a lane's partial sums. A float reference gives exact differences; a double one (the
// recipes' FP64 GEMMs) one rounding.
template <typename Ref>
QMX_HOST_DEVICE inline void AddElement(ErrorStats& s, Ref r, float o) {
  if (!std::isfinite(r) || !std::isfinite(o)) {
    ++s.nonfinite;
    if (std::isfinite(r)) ++s.out_nonfinite;
    return;
  }
  const double rd = r, od = o, e = od - rd;
  ++s.count;
  s.sum_sq_err += e * e;
  s.sum_err += e;
  s.sum_sq_ref += rd * rd;
  s.sum_sq_out += od * od;
  s.sum_dot += rd * od;
  const double ae = std::fabs(e);
  s.max_abs_err = std::max(s.max_abs_err, ae);
  if (rd != 0) {
    const double rel = ae / std::fabs(rd);
    s.max_rel_err = std::max(s.max_rel_err, rel);
    s.sum_rel_err += rel;
    ++s.rel_count;
  } else if (od != 0) {
    ++s.zero_ref_err;
  }
}

// The lanes' sums in a fixed tree, lane l with lane l + 4, then + 2, then + 1 (the halving a vector
// reduction does); the chunk's statistics end in lanes[0].
inline void FoldLanes(ErrorStats* lanes) {
  for (size_t half = kErrorLanes / 2; half > 0; half /= 2)
    for (size_t l = 0; l < half; ++l) lanes[l].Merge(lanes[l + half]);
}

}  // namespace qmx::detail
