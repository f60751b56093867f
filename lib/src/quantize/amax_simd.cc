// amax_simd.cc: Highway kernels for the |x| maxima the scale rules start from (a tensor's, and each block's
// in the same read), over FP32, BF16 and FP16 sources. tests/quantize/test_mx.cc checks every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quantize/amax_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "quantize/mx_blocks-inl.h"
#include "quantize/mx_kernels.h"

namespace qmx::simd {
// Whether the plain streaming loops (AmaxLoop) prefetch 4 KB ahead: they do except on AMD processors, where
// the hardware prefetcher alone was faster (cli/bench/PERFORMANCE.md "Prefetch in the streaming loops").
// Speed only: no bit depends on it. Defined below, once.
bool PrefetchPlainStreams();
}  // namespace qmx::simd

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The |x| bits maximum below `limit`: one stream, four accumulators; kPrefetch: the lines 4 KB ahead too
// (PrefetchPlainStreams says where that pays).
template <DType S, bool kPrefetch = false>
uint32_t AmaxLoop(const void* in, size_t n, uint32_t limit) {
  const DU du;
  const size_t lanes = hn::Lanes(du);
  const VU lim = hn::Set(du, limit), abs_mask = hn::Set(du, 0x7FFFFFFFu);
  const auto kept = [&](VU x) {
    const VU a = hn::And(x, abs_mask);
    return hn::IfThenElseZero(hn::Lt(a, lim), a);
  };
  VU m0 = hn::Zero(du), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    if constexpr (kPrefetch) PrefetchAhead<S>(in, i, 4 * lanes);
    m0 = hn::Max(m0, kept(LoadBits<S>(in, i)));
    m1 = hn::Max(m1, kept(LoadBits<S>(in, i + lanes)));
    m2 = hn::Max(m2, kept(LoadBits<S>(in, i + 2 * lanes)));
    m3 = hn::Max(m3, kept(LoadBits<S>(in, i + 3 * lanes)));
  }
  for (; i + lanes <= n; i += lanes) m0 = hn::Max(m0, kept(LoadBits<S>(in, i)));
  if (i < n) m1 = hn::Max(m1, kept(LoadBitsPartial<S>(in, i, n - i)));
  return hn::GetLane(hn::MaxOfLanes(du, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3))));
}

template <DType S>
uint32_t AmaxStream(const void* in, size_t n, uint32_t limit) {
  return PrefetchPlainStreams() ? AmaxLoop<S, true>(in, n, limit) : AmaxLoop<S, false>(in, n, limit);
}

uint32_t AmaxBitsT(DType src, const void* in, size_t n, uint32_t limit) {
  switch (src) {
    case DType::kBF16: return AmaxStream<DType::kBF16>(in, n, limit);
    case DType::kF16: return AmaxStream<DType::kF16>(in, n, limit);
    default: return AmaxStream<DType::kF32>(in, n, limit);
  }
}

// AmaxBitsOfBlocks: per chunk of about kPrefetchBytes, the tensor's maximum below `limit` by AmaxStream, then
// each block's maximum as MxLoop's first pass takes it (AmaxOfBlocks, Lanes blocks at a time), from L1.
// Two steps, because the streaming loop keeps many more loads in flight than the maxima's shuffle tree
// does: on the machine measured, the tree alone over data in memory took 1.7 times as long as the plain
// loop, the two steps no longer.
template <DType S>
uint32_t BlockAmaxLoop(const void* in, size_t n, size_t block, uint32_t* out, uint32_t limit) {
  const DU du;
  const size_t lanes = hn::Lanes(du);
  const size_t nblocks = n / block;
  const uint8_t* src = static_cast<const uint8_t*>(in);
  constexpr size_t kSize = SrcSize<S>();
  uint32_t m = 0;
  size_t b = 0;
  if (block % lanes == 0) {
    const size_t group = lanes * block;  // the elements of one vector of maxima
    const size_t per = std::max<size_t>(1, kPrefetchBytes / (group * kSize));  // groups per chunk
    for (; b + per * lanes <= nblocks; b += per * lanes) {
      m = std::max(m, AmaxStream<S>(src + b * block * kSize, per * group, limit));
      for (size_t g = 0; g < per; ++g) hn::StoreU(AmaxOfBlocks<S>(in, (b + g * lanes) * block, block), du, out + b + g * lanes);
    }
  }
  if (b < nblocks) m = std::max(m, AmaxStream<S>(src + b * block * kSize, (nblocks - b) * block, limit));
  for (; b < nblocks; ++b) out[b] = AmaxLoop<S>(src + b * block * kSize, block, 0xFFFFFFFFu);
  return m;
}

uint32_t AmaxBitsOfBlocksT(DType src, const void* in, size_t n, size_t block, uint32_t* out, uint32_t limit) {
  switch (src) {
    case DType::kBF16: return BlockAmaxLoop<DType::kBF16>(in, n, block, out, limit);
    case DType::kF16: return BlockAmaxLoop<DType::kF16>(in, n, block, out, limit);
    default: return BlockAmaxLoop<DType::kF32>(in, n, block, out, limit);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if HWY_ARCH_X86
#include <cpuid.h>
#endif

namespace qmx::simd {
HWY_EXPORT(AmaxBitsT);
HWY_EXPORT(AmaxBitsOfBlocksT);

bool PrefetchPlainStreams() {
  static const bool prefetch = [] {
#if HWY_ARCH_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d) != 0 && b == 0x68747541u && d == 0x69746E65u && c == 0x444D4163u)
      return false;  // "AuthenticAMD"
#endif
    return true;
  }();
  return prefetch;
}

uint32_t AmaxBitsOfBlocks(DType src, const void* in, size_t n, size_t block, uint32_t* out, uint32_t limit) {
  return HWY_DYNAMIC_DISPATCH(AmaxBitsOfBlocksT)(src, in, n, block, out, limit);
}

uint32_t AmaxBits(DType src, const void* in, size_t n, uint32_t limit) {
  return HWY_DYNAMIC_DISPATCH(AmaxBitsT)(src, in, n, limit);
}

}  // namespace qmx::simd
#endif  // HWY_ONCE
