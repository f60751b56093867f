// simd_lanes-inl.h: the 32-bit lane types and the AVX-512 switch of the Highway conversion, MX and Philox
// kernels (round/convert_tiers-inl.h, round/convert_io-inl.h, rng/philox_simd-inl.h), and the double-to-float
// demotion of the GEMM and Hadamard kernels, compiled once per target.

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

// hn::DemoteTo from double to float with IEEE semantics on every target: a finite value beyond the float
// range becomes Inf and an Inf stays Inf, as the x86 and Arm instructions do. (Highway's SCALAR and EMU128
// DemoteTo clamp both to the largest float; the EMU128 fallback is what clang builds dispatch to when no
// x86 target is present.)
template <class DH, class VD>
HWY_INLINE hn::Vec<DH> DemoteToF32(DH dh, VD v) {
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  const hn::Rebind<double, DH> dd;
  constexpr size_t kMax = HWY_MAX_BYTES / sizeof(double) > 0 ? HWY_MAX_BYTES / sizeof(double) : 1;
  double in[kMax];
  float out[kMax];
  hn::StoreU(v, dd, in);
  for (size_t i = 0; i < hn::Lanes(dd); ++i) out[i] = static_cast<float>(in[i]);
  return hn::LoadU(dh, out);
#else
  return hn::DemoteTo(dh, v);
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#endif  // QMX_SIMD_LANES_INL_H_
