// transform_simd.h: the Highway Hadamard kernel behind transform.cc.
#pragma once

#include <cstddef>

namespace qmx::simd {

// The butterflies of HadamardButterfliesRef on `blocks` consecutive blocks of n floats (n a power of two,
// 16..256): forward, x * sign in double, the butterflies, times norm, rounded to FP32; inverse, the
// butterflies on x, times norm, times sign, rounded. sign: n doubles, aligned to the vector size. in and
// out may alias.
void HadamardBlocks(const float* in, float* out, size_t blocks, int n, const double* sign, double norm, bool inverse);

}  // namespace qmx::simd
