// convert_simd.cc: Highway kernels for FP32/BF16/FP16 -> any format of 8 bits or fewer, and decoding,
// compiled for every x86 target and chosen at run time. They reproduce the reference routine
// (round/round_pack_ref.cc) in integer arithmetic on 32-bit lanes; tests/round/test_convert_simd.cc checks every target.
//
// The per-lane arithmetic and its tiers are in convert_tiers-inl.h; loads, stores and the fused runs in
// convert_io-inl.h; the Philox words of stochastic rounding in rng/philox_simd-inl.h. MX blocks run in
// quantize/mx_simd.cc. Declarations: convert_params.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "round/convert_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "rng/philox_simd-inl.h"
#include "round/convert_io-inl.h"
#include "round/convert_params.h"
#include "round/convert_tiers-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ------------------------------------------------------------------ conversion

template <Rounding R, DType S>
void ConvertLoop(const ConvertParams& p, const void* in, size_t n, uint8_t* out, uint64_t seed, uint64_t first_index,
                 const uint32_t* rbits) {
  const DU du;
  const DI di;
  const size_t lanes = hn::Lanes(du);
  const Consts k(p);
  const VI eoff = hn::Zero(di);
  const Lite lite = MakeLite(k, 0);
  constexpr bool kSr = R == Rounding::kSrA || R == Rounding::kSrB || R == Rounding::kSrC;
  constexpr bool kFusable = R == Rounding::kRne || R == Rounding::kSrA;
  const bool common = k.fused && k.f.sat && k.f.neg_zero;
  if constexpr (kSr) {
    size_t i = 0;
    if constexpr (kFusable) {
      if (k.fused && lanes % 4 == 0) {
        // Elements before the first whole group of four Philox words, then fused runs; a vector holding NaN
        // or Inf, and the tail, go through the general tiers with the words of their own indices.
        const size_t head = std::min<size_t>(rbits != nullptr ? 0 : (4 - (first_index & 3)) & 3, n);
        if (head > 0) {
          RandomWords rw(seed, first_index, rbits);
          StoreCodesPartial(ConvertAny<R>(k, lite, LoadBitsPartial<S>(in, 0, head), eoff, rw.Take(0, head)), out, head);
        }
        i = head;
        while (i + lanes <= n) {
          i = common ? FusedSrRun<R, S, true>(k.f, in, i, n, out, seed, first_index, rbits)
                     : FusedSrRun<R, S, false>(k.f, in, i, n, out, seed, first_index, rbits);
          if (i + lanes > n) break;
          RandomWords rw(seed, first_index + i, rbits);
          StoreCodes(ConvertAny<R>(k, lite, LoadBits<S>(in, i), eoff, rw.Take(i, lanes)), out + i);
          i += lanes;
        }
      }
    }
    RandomWords rw(seed, first_index + i, rbits);
    for (; i + lanes <= n; i += lanes) StoreCodes(ConvertAny<R>(k, lite, LoadBits<S>(in, i), eoff, rw.Take(i, lanes)), out + i);
    if (i < n) {
      const size_t c = n - i;
      StoreCodesPartial(ConvertAny<R>(k, lite, LoadBitsPartial<S>(in, i, c), eoff, rw.Take(i, c)), out + i, c);
    }
  } else {
    const VU none = hn::Zero(du);
    size_t i = 0;
    while (i + 4 * lanes <= n) {
      if constexpr (kFusable) {
        if (k.fused) i = common ? FusedRun<R, S, true>(k.f, in, i, n, out) : FusedRun<R, S, false>(k.f, in, i, n, out);
        if (i + 4 * lanes > n) break;
      }
      const VU c0 = ConvertAny<R>(k, lite, LoadBits<S>(in, i), eoff, none);
      const VU c1 = ConvertAny<R>(k, lite, LoadBits<S>(in, i + lanes), eoff, none);
      const VU c2 = ConvertAny<R>(k, lite, LoadBits<S>(in, i + 2 * lanes), eoff, none);
      const VU c3 = ConvertAny<R>(k, lite, LoadBits<S>(in, i + 3 * lanes), eoff, none);
      StoreCodes(c0, out + i);
      StoreCodes(c1, out + i + lanes);
      StoreCodes(c2, out + i + 2 * lanes);
      StoreCodes(c3, out + i + 3 * lanes);
      i += 4 * lanes;
    }
    for (; i + lanes <= n; i += lanes) StoreCodes(ConvertAny<R>(k, lite, LoadBits<S>(in, i), eoff, none), out + i);
    if (i < n) StoreCodesPartial(ConvertAny<R>(k, lite, LoadBitsPartial<S>(in, i, n - i), eoff, none), out + i, n - i);
  }
}

template <Rounding R>
void ConvertBySource(const ConvertParams& p, DType src, const void* in, size_t n, uint8_t* out, uint64_t seed,
                     uint64_t first_index, const uint32_t* rbits) {
  switch (src) {
    case DType::kBF16: return ConvertLoop<R, DType::kBF16>(p, in, n, out, seed, first_index, rbits);
    case DType::kF16: return ConvertLoop<R, DType::kF16>(p, in, n, out, seed, first_index, rbits);
    default: return ConvertLoop<R, DType::kF32>(p, in, n, out, seed, first_index, rbits);
  }
}

void ConvertCodesT(const ConvertParams& p, DType src, const void* in, size_t n, uint8_t* out, uint64_t seed,
                   uint64_t first_index, const uint32_t* rbits) {
  switch (p.rounding) {
    case Rounding::kRne: return ConvertBySource<Rounding::kRne>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kRna: return ConvertBySource<Rounding::kRna>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kRz: return ConvertBySource<Rounding::kRz>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kRu: return ConvertBySource<Rounding::kRu>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kRd: return ConvertBySource<Rounding::kRd>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kRo: return ConvertBySource<Rounding::kRo>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kSrA: return ConvertBySource<Rounding::kSrA>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kSrB: return ConvertBySource<Rounding::kSrB>(p, src, in, n, out, seed, first_index, rbits);
    case Rounding::kSrC: return ConvertBySource<Rounding::kSrC>(p, src, in, n, out, seed, first_index, rbits);
  }
}

// ------------------------------------------------------------------ decoding

void DecodeCodesT(const float* table, const uint8_t* codes, size_t n, float* out) {
  const DF df;
  const DI di;
  const hn::Rebind<uint8_t, DI> d8;
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::GatherIndex(df, table, hn::PromoteTo(di, hn::LoadU(d8, codes + i))), df, out + i);
  }
  for (; i < n; ++i) out[i] = table[codes[i]];
}

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "fp_env.h"

namespace qmx::simd {
HWY_EXPORT(ConvertCodesT);
HWY_EXPORT(DecodeCodesT);

void ConvertCodes(const ConvertParams& p, DType src, const void* in, size_t n, uint8_t* out, uint64_t seed,
                  uint64_t first_index, const uint32_t* rbits) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(ConvertCodesT)(p, src, in, n, out, seed, first_index, rbits);
}
void DecodeCodes(const float* table, const uint8_t* codes, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeCodesT)(table, codes, n, out);
}
}  // namespace qmx::simd
#endif  // HWY_ONCE
