// simd_lanes-inl.h: the 32-bit lane types and the AVX-512 switch of the Highway conversion, MX and Philox
// kernels (round/convert_tiers-inl.h, round/convert_io-inl.h, rng/philox_simd-inl.h), compiled once per target.

// Per-target include guard: each target's pass through foreach_target.h compiles this file again.
#if defined(QMX_SIMD_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QMX_SIMD_LANES_INL_H_
#undef QMX_SIMD_LANES_INL_H_
#else
#define QMX_SIMD_LANES_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The AVX-512 targets, where a few kernels use masked, merge-masked and per-instruction-rounding
// intrinsics that Highway does not expose.
#undef QMX_AVX512
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define QMX_AVX512 1
#else
#define QMX_AVX512 0
#endif

using DU = hn::ScalableTag<uint32_t>;
using DI = hn::RebindToSigned<DU>;
using DF = hn::RebindToFloat<DU>;
using VU = hn::Vec<DU>;
using VI = hn::Vec<DI>;
using VF = hn::Vec<DF>;
constexpr size_t kMaxLanes = HWY_LANES(uint32_t);

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#endif  // QMX_SIMD_LANES_INL_H_
