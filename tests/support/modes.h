// modes.h: the rounding and saturation modes, the option sets a format accepts, the MX element formats
// and the SIMD-target guard, shared by the reference tests, the SIMD tests and the SIMD sweep.
#pragma once

#include <vector>

#include "qmx/cast_options.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/testing.h"

namespace qmx::test {

inline constexpr Rounding kAllModes[] = {Rounding::kRne, Rounding::kRna, Rounding::kRz,  Rounding::kRu, Rounding::kRd,
                                         Rounding::kRo,  Rounding::kSrA, Rounding::kSrB, Rounding::kSrC};
inline constexpr Saturation kAllSat[] = {Saturation::kSatFinite, Saturation::kNoSat, Saturation::kSatPropagate};

// The element formats of the MX block formats (OCP MX v1.0 5.3).
inline constexpr const char* kMxElems[] = {"e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8"};

// Restores automatic SIMD target selection when a test that forced a target ends (also on failure).
struct TargetGuard {
  ~TargetGuard() { ForceSimdTarget(""); }
};

// Every (saturation, rounding) pair f accepts; with `variants` each also with flushed subnormals and with
// positive NaNs / zero NaN fallback; with `sr_widths` each stochastic mode also with N = 1, 3, 13, 24, 31, 32.
inline std::vector<CastOptions> OptionSets(const Format& f, const std::vector<Rounding>& rounds,
                                           const std::vector<Saturation>& sats, bool variants, bool sr_widths) {
  std::vector<CastOptions> v;
  for (Saturation s : sats) {
    for (Rounding r : rounds) {
      CastOptions o;
      o.rounding = r;
      o.saturation = s;
      try {
        ValidateCastOptions(f, o);
      } catch (const Error&) {
        continue;  // not defined for this format (e.g. nosat into e2m1)
      }
      v.push_back(o);
      if (variants) {
        CastOptions flush = o;
        flush.subnormals = Subnormals::kFlush;
        v.push_back(flush);
        CastOptions pos_nan = o;
        pos_nan.nan_sign = NanSign::kPositive;
        pos_nan.nan_fallback = NanFallback::kZero;
        v.push_back(pos_nan);
      }
      if (sr_widths && IsStochastic(r)) {
        for (int n : {1, 3, 13, 24, 31, 32}) {
          CastOptions b = o;
          b.sr_bits = n;
          v.push_back(b);
        }
      }
    }
  }
  return v;
}

inline std::vector<CastOptions> OptionSets(const Format& f, bool variants, bool sr_widths) {
  return OptionSets(f, {std::begin(kAllModes), std::end(kAllModes)}, {std::begin(kAllSat), std::end(kAllSat)},
                    variants, sr_widths);
}

}  // namespace qmx::test
