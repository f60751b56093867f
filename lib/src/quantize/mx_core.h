// quantize/mx_core.h: what an MX block's NaN policy makes of its scale (qmx/scale.h NanPolicy), host-device
// so that the reference (mx_ref.cc) and the GPU engine (gpu/src/engine_convert.cu) share one source.
#pragma once

#include "qmx/host_device.h"
#include "qmx/scale.h"

namespace qmx::detail {

// The block's scale byte, and the code every element takes (fill >= 0) or -1 where the elements are
// converted against the scale. rule_scale: the rule's byte from the finite elements' amax.
QMX_HOST_DEVICE inline void MxPolicyScale(NanPolicy policy, bool has_nan, bool has_inf, int rule_scale, int nan_code,
                                          int block_nan_code, int* scale, int* fill) {
  *fill = -1;
  *scale = rule_scale;
  if (!has_nan && !has_inf) return;
  switch (policy) {
    case NanPolicy::kBlockNan: *scale = 0xFF, *fill = block_nan_code; break;
    case NanPolicy::kScaleNan: *scale = 0xFF, *fill = nan_code; break;
    case NanPolicy::kTe:
      if (has_nan) *scale = 0xFF, *fill = nan_code;
      else *scale = 0xFE;
      break;
    case NanPolicy::kIgnoreNan: *scale = has_inf ? 0xFE : rule_scale; break;
    case NanPolicy::kIgnore: break;
  }
}

}  // namespace qmx::detail
