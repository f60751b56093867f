// grid.h: the inputs worth checking around a format's value grid (every code, every midpoint, one FP32
// ulp either side, both signs, and the specials), shared by the reference and SIMD tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "qmx/format.h"

namespace qmx::test {

// Every input worth checking around the value grid of f: each code, each midpoint between neighbours
// (including the virtual value past max and zero), one FP32 ulp either side, with both signs.
inline std::vector<float> GridInputs(const Format& f) {
  std::vector<double> v;
  for (uint64_t c : AllCodes(f)) {
    const double d = DecodeToDouble(f, c);
    if (std::isfinite(d) && d >= 0) v.push_back(d);
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  const double top = v.back(), below = v[v.size() - 2];
  v.push_back((f.man_bits == 0 && !f.IsInt()) ? 2 * top : 2 * top - below);
  std::vector<float> out;
  for (size_t i = 0; i < v.size(); ++i) {
    std::vector<double> pts = {v[i]};
    if (i + 1 < v.size()) pts.push_back((v[i] + v[i + 1]) / 2);
    if (i == 0) pts.push_back(v[0] / 2);
    for (double p : pts) {
      const float x = static_cast<float>(p);
      if (static_cast<double>(x) != p) continue;  // only ue8m0's virtual 2^128 is not an FP32 number
      for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, HUGE_VALF)}) {
        out.push_back(y);
        out.push_back(-y);
      }
    }
  }
  for (float s : {0.0f, HUGE_VALF, std::nanf(""), 0x1p-149f, 3.0e38f}) {
    out.push_back(s);
    out.push_back(-s);
  }
  return out;
}

}  // namespace qmx::test
