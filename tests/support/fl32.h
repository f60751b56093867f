// fl32.h: correctly rounded FP32 products and quotients from exact double arithmetic, the independent oracle
// of the op-order tests (each FP32 operation of a documented order written out as one call).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace qmx::test {

// fl32(x * y): the double product of two floats is exact, so one conversion rounds it correctly.
inline float Fl32Mul(float x, float y) { return static_cast<float>(static_cast<double>(x) * static_cast<double>(y)); }

// fl32(p / f), ties to even: the float nearest p / f among a candidate and its neighbours, compared with exact
// double arithmetic (q * f holds at most 48 significant bits; p and q * f lie within a factor 2 of each
// other, so their difference is exact). p, f finite, f nonzero, the quotient finite.
inline float Fl32Div(float p, float f) {
  const float q0 = static_cast<float>(static_cast<double>(p) / f);
  float best = q0;
  double best_err = -1;
  for (float q : {std::nextafter(q0, -INFINITY), q0, std::nextafter(q0, INFINITY)}) {
    const double err = std::fabs(static_cast<double>(q) * f - p);
    uint32_t bits;
    std::memcpy(&bits, &q, 4);
    if (best_err < 0 || err < best_err || (err == best_err && (bits & 1) == 0)) best = q, best_err = err;
  }
  return best;
}

}  // namespace qmx::test
