// transform_simd.cc: the Hadamard butterflies as a Highway kernel, compiled for every target and chosen
// at run time. Each lane performs exactly the scalar butterflies' operations (transform.cc,
// HadamardButterfliesRef) in the same order, in double, so the bits do not depend on the target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "transform/transform_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "simd_lanes-inl.h"
#include "transform/transform_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The stages of distance kH >= one vector and up, counted in vectors: vector j meets vector j + kH (j's
// bit kH clear), in the scalar butterflies' order.
template <size_t kNv, size_t kH, class VD>
HWY_INLINE void CrossStages(VD (&v)[kNv]) {
  if constexpr (kH < kNv) {
#pragma GCC unroll 128
    for (size_t p = 0; p < kNv / 2; ++p) {
      const size_t j = (p / kH) * 2 * kH + p % kH;
      const VD a = v[j], c = v[j + kH];
      v[j] = hn::Add(a, c);
      v[j + kH] = hn::Sub(a, c);
    }
    CrossStages<kNv, 2 * kH>(v);
  }
}

// The block size is a template argument and the vector count per block a constant, so the stages' loops
// unroll and the block stays in registers (the stages once went through a stack array; its stores and
// reloads were a third of the kernel's time).
template <int n>
HWY_NOINLINE void HadamardBlocksN(const float* in, float* out, size_t blocks, const double* sign, double norm,
                                  bool inverse) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dh;
  const hn::RebindToSigned<decltype(dd)> di;
  using VD = hn::Vec<decltype(dd)>;
  constexpr size_t N = HWY_LANES(double), nv = static_cast<size_t>(n) / N;
  static_assert(static_cast<size_t>(n) % N == 0, "whole vectors per block");
  HWY_ALIGN int64_t idx[HWY_MAX_BYTES / sizeof(double)];
  // Stages of distance h < N pair lanes inside a vector: lane j meets lane j ^ h; the lanes with bit h set
  // hold the differences.
  constexpr size_t kMaxInVector = 8;
  using Idx = decltype(hn::SetTableIndices(dd, idx));
  Idx swap[kMaxInVector];
  hn::Mask<decltype(dd)> high[kMaxInVector];
  size_t in_vector = 0;
  for (size_t h = 1; h < N && h < static_cast<size_t>(n); h *= 2, ++in_vector) {
    for (size_t j = 0; j < N; ++j) idx[j] = static_cast<int64_t>(j ^ h);
    swap[in_vector] = hn::SetTableIndices(dd, idx);
    high[in_vector] = hn::RebindMask(dd, hn::Ne(hn::And(hn::Iota(di, 0), hn::Set(di, static_cast<int64_t>(h))), hn::Zero(di)));
  }
  const VD vnorm = hn::Set(dd, norm);
  constexpr size_t kLine = 64 / sizeof(float);
  const size_t ahead = (4096 / sizeof(float) + n - 1) / static_cast<size_t>(n);  // blocks
  for (size_t b = 0; b < blocks; ++b) {
    const float* src = in + b * static_cast<size_t>(n);
    float* dst = out + b * static_cast<size_t>(n);
    // The butterflies leave the loads waiting on memory: fetch the lines 4 KB ahead.
    if (b + ahead < blocks)
      for (size_t j = 0; j < static_cast<size_t>(n); j += kLine) hwy::Prefetch(src + ahead * n + j);
    VD v[nv];
#pragma GCC unroll 64
    for (size_t i = 0; i < nv; ++i) {
      v[i] = hn::PromoteTo(dd, hn::LoadU(dh, src + i * N));
      if (!inverse) v[i] = hn::Mul(v[i], hn::Load(dd, sign + i * N));
    }
    for (size_t s = 0; s < in_vector; ++s) {
#pragma GCC unroll 64
      for (size_t i = 0; i < nv; ++i) {
        const VD y = hn::TableLookupLanes(v[i], swap[s]);
        v[i] = hn::IfThenElse(high[s], hn::Sub(y, v[i]), hn::Add(v[i], y));
      }
    }
    CrossStages<nv, 1>(v);
#pragma GCC unroll 64
    for (size_t i = 0; i < nv; ++i) {
      VD y = hn::Mul(v[i], vnorm);
      if (inverse) y = hn::Mul(y, hn::Load(dd, sign + i * N));
      hn::StoreU(DemoteToF32(dh, y), dh, dst + i * N);
    }
  }
}

void HadamardBlocksT(const float* in, float* out, size_t blocks, int n, const double* sign, double norm, bool inverse) {
  switch (n) {
    case 16: return HadamardBlocksN<16>(in, out, blocks, sign, norm, inverse);
    case 32: return HadamardBlocksN<32>(in, out, blocks, sign, norm, inverse);
    case 64: return HadamardBlocksN<64>(in, out, blocks, sign, norm, inverse);
    case 128: return HadamardBlocksN<128>(in, out, blocks, sign, norm, inverse);
    case 256: return HadamardBlocksN<256>(in, out, blocks, sign, norm, inverse);
    default: HWY_ASSERT(false);  // transform.cc checks the size first
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qmx::simd {
HWY_EXPORT(HadamardBlocksT);

void HadamardBlocks(const float* in, float* out, size_t blocks, int n, const double* sign, double norm, bool inverse) {
  HWY_DYNAMIC_DISPATCH(HadamardBlocksT)(in, out, blocks, n, sign, norm, inverse);
}
}  // namespace qmx::simd
#endif  // HWY_ONCE
