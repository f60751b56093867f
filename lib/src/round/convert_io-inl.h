// convert_io-inl.h: the sources and sinks of the Highway conversion and MX kernels: FP32/BF16/FP16 loads as
// FP32 bits, code stores, prefetch, and the fused tier's runs over whole vectors (FusedRun, FusedSrRun).

// Per-target include guard: each target's pass through foreach_target.h compiles this file again.
#if defined(QMX_ROUND_CONVERT_IO_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QMX_ROUND_CONVERT_IO_INL_H_
#undef QMX_ROUND_CONVERT_IO_INL_H_
#else
#define QMX_ROUND_CONVERT_IO_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#if HWY_ARCH_X86
#include <immintrin.h>  // _mm_sfence on every target
#endif
#include "rng/philox_simd-inl.h"
#include "round/convert_tiers-inl.h"
#include "simd_lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ------------------------------------------------------------------ sources

// Lanes of src elements starting at p, as FP32 bits (exact widening for bf16 and fp16).
template <DType S>
HWY_INLINE VU LoadBits(const void* src, size_t i) {
  const DU du;
  if constexpr (S == DType::kF32) {
    return hn::LoadU(du, static_cast<const uint32_t*>(src) + i);
  } else {
    const hn::Rebind<uint16_t, DU> d16;
    const VU w = hn::PromoteTo(du, hn::LoadU(d16, static_cast<const uint16_t*>(src) + i));
    if constexpr (S == DType::kBF16) {
      return hn::ShiftLeft<16>(w);
    } else {
      const DI di;
      const DF df;
      const VU sign = hn::ShiftLeft<16>(hn::And(w, hn::Set(du, 0x8000u)));
      const VU e = hn::And(hn::ShiftRight<10>(w), hn::Set(du, 31u));
      const VU m = hn::And(w, hn::Set(du, 0x3FFu));
      const VU normal = hn::Or(hn::ShiftLeft<23>(hn::Add(e, hn::Set(du, 112u))), hn::ShiftLeft<13>(m));
      const VU special = hn::Or(hn::Set(du, 0x7F800000u), hn::ShiftLeft<13>(m));
      // Subnormal fp16: m * 2^-24, exact in FP32 (and normal there).
      const VU sub = hn::BitCast(du, hn::Mul(hn::ConvertTo(df, hn::BitCast(di, m)), hn::Set(df, 5.9604644775390625e-8f)));
      VU r = hn::IfThenElse(hn::Eq(e, hn::Zero(du)), sub, normal);
      r = hn::IfThenElse(hn::Eq(e, hn::Set(du, 31u)), special, r);
      return hn::Or(sign, r);
    }
  }
}

template <DType S>
constexpr size_t SrcSize() {
  return S == DType::kF32 ? 4 : 2;
}

// Loads `count` (< Lanes) elements padded with +0.
template <DType S>
HWY_INLINE VU LoadBitsPartial(const void* src, size_t i, size_t count) {
  alignas(64) uint8_t buf[kMaxLanes * 4] = {};
  std::memcpy(buf, static_cast<const uint8_t*>(src) + i * SrcSize<S>(), count * SrcSize<S>());
  return LoadBits<S>(buf, 0);
}

HWY_INLINE void StoreCodes(VU code, uint8_t* out) {
  const DU du;
  const hn::Rebind<uint8_t, DU> d8;
  hn::StoreU(hn::U8FromU32(code), d8, out);
  (void)du;
}

HWY_INLINE void StoreCodesPartial(VU code, uint8_t* out, size_t count) {
  alignas(64) uint8_t buf[kMaxLanes];
  StoreCodes(code, buf);
  std::memcpy(out, buf, count);
}

// Four vectors of codes (each lane < 256) as 4 * Lanes bytes in order. On AVX-512 and AVX2 two packs with
// unsigned saturation leave, in each 128-bit block j, the four vectors' lanes 4j..4j+3; one dword permute
// puts the blocks in order: 4 shuffles and one store where StoreCodes takes 8 and four. (The zero-masking
// forms of the AVX-512 permute and extract: GCC 12 reports the plain forms' undefined pass-through source as
// maybe uninitialized.)
#if QMX_AVX512
HWY_INLINE __m512i PackCodes4(VU c0, VU c1, VU c2, VU c3) {
  const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(c0.raw, c1.raw), _mm512_packus_epi32(c2.raw, c3.raw));
  return _mm512_maskz_permutexvar_epi32(0xFFFF, _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), b);
}
#elif HWY_TARGET == HWY_AVX2
HWY_INLINE __m256i PackCodes4(VU c0, VU c1, VU c2, VU c3) {
  const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0.raw, c1.raw), _mm256_packus_epi32(c2.raw, c3.raw));
  return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

#if QMX_AVX512
// E2M1 codes (RNE, satfinite, -0 coded) of four vectors of finite FP32 bits, as 64 bytes in order, by table.
// A lane's key: its exponent field, the two mantissa bits below the point (the kept bit and the round
// bit: E2M1 keeps one) and a sticky bit for the 21 below them, from bits >> 20 with bit 0 set where any
// of bits 0..19 is. Binades below 2^-3 round to 0 and those from 2^3 saturate, as the lowest and highest
// tabled ones do: the key is clamped into the 56 of exponents 124..130 in 16-bit lanes, and looked up in
// the table FusedK holds (the codes that ConvertVec gives for those keys). The sign adds 8.
HWY_INLINE __m512i E2m1Codes4(const FusedK& f, VU x0, VU x1, VU x2, VU x3) {
  const __m512i low = _mm512_set1_epi32(0xFFFFF), one = _mm512_set1_epi32(1);
  const auto key = [&](VU x) {
    const __m512i t = _mm512_maskz_srli_epi32(0xFFFF, x.raw, 20);
    return _mm512_mask_or_epi32(t, _mm512_test_epi32_mask(x.raw, low), t, one);
  };
  const auto codes = [&](__m512i w) {  // 32 keys with their signs (bit 11) -> 32 codes
    const __mmask32 neg = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x800));
    const __m512i idx = _mm512_min_epu16(_mm512_subs_epu16(_mm512_and_si512(w, _mm512_set1_epi16(0x7FF)), _mm512_set1_epi16(992)),
                                         _mm512_set1_epi16(55));
    const __m512i c = _mm512_permutex2var_epi16(f.e2m1_lo.raw, idx, f.e2m1_hi.raw);
    return _mm512_mask_add_epi16(c, neg, c, _mm512_set1_epi16(8));
  };
  const __m512i w01 = codes(_mm512_packus_epi32(key(x0), key(x1))), w23 = codes(_mm512_packus_epi32(key(x2), key(x3)));
  return _mm512_maskz_permutexvar_epi32(0xFFFF, _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                        _mm512_packus_epi16(w01, w23));
}

#endif

HWY_INLINE void StoreCodes4(VU c0, VU c1, VU c2, VU c3, uint8_t* out) {
#if QMX_AVX512
  _mm512_storeu_si512(out, PackCodes4(c0, c1, c2, c3));
#elif HWY_TARGET == HWY_AVX2
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), PackCodes4(c0, c1, c2, c3));
#else
  const size_t lanes = hn::Lanes(DU());
  StoreCodes(c0, out);
  StoreCodes(c1, out + lanes);
  StoreCodes(c2, out + 2 * lanes);
  StoreCodes(c3, out + 3 * lanes);
#endif
}

// StoreCodes4 by non-temporal stores (MxKernelArgs::stream): the line is written without first being read
// from memory. One vector-wide store where `out` is that aligned, 16-byte ones where it is 16-byte aligned;
// elsewhere, and on targets below AVX2, StoreCodes4. Callers end the pass with StreamFence.
#if QMX_AVX512
// 64 packed bytes to out, by non-temporal stores as StreamCodes4 describes (kStream), else one store.
template <bool kStream = true>
HWY_INLINE void StoreBytes64(__m512i r, uint8_t* out) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(out);
  if (!kStream || (at & 15) != 0) {
    _mm512_storeu_si512(out, r);
  } else if ((at & 63) == 0) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), r);
  } else {
    __m128i* o = reinterpret_cast<__m128i*>(out);
    _mm_stream_si128(o, _mm512_maskz_extracti32x4_epi32(0xF, r, 0));
    _mm_stream_si128(o + 1, _mm512_maskz_extracti32x4_epi32(0xF, r, 1));
    _mm_stream_si128(o + 2, _mm512_maskz_extracti32x4_epi32(0xF, r, 2));
    _mm_stream_si128(o + 3, _mm512_maskz_extracti32x4_epi32(0xF, r, 3));
  }
}
#endif

HWY_INLINE void StreamCodes4(VU c0, VU c1, VU c2, VU c3, uint8_t* out) {
#if QMX_AVX512
  StoreBytes64(PackCodes4(c0, c1, c2, c3), out);
#else
#if HWY_TARGET == HWY_AVX2
  const uintptr_t at = reinterpret_cast<uintptr_t>(out);
  if ((at & 15) == 0) {
    const __m256i r = PackCodes4(c0, c1, c2, c3);
    if ((at & 31) == 0) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out), r);
    } else {
      __m128i* o = reinterpret_cast<__m128i*>(out);
      _mm_stream_si128(o, _mm256_castsi256_si128(r));
      _mm_stream_si128(o + 1, _mm256_extracti128_si256(r, 1));
    }
    return;
  }
#endif
  StoreCodes4(c0, c1, c2, c3, out);
#endif
}

// Orders the non-temporal stores of StreamCodes4 before whatever follows (another thread reading the codes).
HWY_INLINE void StreamFence() {
#if HWY_ARCH_X86
  _mm_sfence();
#endif
}

// Software prefetch of the source a fixed distance ahead of a streaming pass: the hardware prefetchers
// alone leave a single thread that streams from memory well short of its in-cache speed. A prefetch never
// faults, so reading past the end is harmless. MX quantization prefetches one batch ahead from its second
// pass (MxLoop).
constexpr size_t kPrefetchBytes = 4096;
template <DType S>
HWY_INLINE void PrefetchAhead(const void* in, size_t i, size_t count, size_t ahead = kPrefetchBytes) {
  const uint8_t* p = static_cast<const uint8_t*>(in) + i * SrcSize<S>() + ahead;
  for (size_t o = 0; o < count * SrcSize<S>(); o += 64) __builtin_prefetch(p + o);
}

// Four vectors of the source from element i into x, and whether every lane is finite (one compare).
template <DType S>
HWY_INLINE bool LoadFinite4(const void* in, size_t i, VU (&x)[4]) {
  const DU du;
  const size_t lanes = hn::Lanes(du);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFu);
  for (size_t v = 0; v < 4; ++v) x[v] = LoadBits<S>(in, i + v * lanes);
  const VU m = hn::Max(hn::Max(hn::And(x[0], abs_mask), hn::And(x[1], abs_mask)),
                       hn::Max(hn::And(x[2], abs_mask), hn::And(x[3], abs_mask)));
  return hn::AllTrue(du, hn::Lt(m, hn::Set(du, 0x7F800000u)));
}

// A run of the fused path over the elements of one call (RNE; SR has FusedSrRun): whole groups of four
// vectors from i while every lane is finite. Returns where it stopped: at the end of the whole groups, or
// at a group holding NaN or Inf, which the caller converts through the general tiers before calling again.
template <Rounding R, DType S, bool kCommon>
HWY_NOINLINE size_t FusedRun(const FusedK& fk, const void* in, size_t i, size_t n, uint8_t* out) {
  const FusedK f = fk;
  const DU du;
  const size_t lanes = hn::Lanes(du);
  const VU none = hn::Zero(du);
#if QMX_AVX512
  if (R == Rounding::kRne && kCommon && f.e2m1) {
    for (; i + 4 * lanes <= n; i += 4 * lanes) {
      PrefetchAhead<S>(in, i, 4 * lanes);
      VU x[4];
      if (!LoadFinite4<S>(in, i, x)) return i;
      StoreBytes64<false>(E2m1Codes4(f, x[0], x[1], x[2], x[3]), out + i);
    }
    return i;
  }
#endif
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    PrefetchAhead<S>(in, i, 4 * lanes);
    VU x[4];
    if (!LoadFinite4<S>(in, i, x)) return i;
    StoreCodes4(FusedVec<R, kCommon>(f, x[0], none), FusedVec<R, kCommon>(f, x[1], none), FusedVec<R, kCommon>(f, x[2], none),
                FusedVec<R, kCommon>(f, x[3], none), out + i);
  }
  return i;
}


// SR runs of the fused path: from element i, whose Philox counter starts a word group ((first_index + i)
// % 4 == 0), whole vectors in chunks of up to 8 vectors whose words are generated once per chunk straight
// into a local buffer (or read from the explicit bits), in groups of four vectors checked for NaN/Inf
// with one compare, then single vectors. Returns where it stopped: at the end of the whole vectors, or at
// a group or vector holding NaN or Inf, whose first vector the caller converts through the general tiers.
template <Rounding R, DType S, bool kCommon>
HWY_NOINLINE size_t FusedSrRun(const FusedK& fk, const void* in, size_t i, size_t n, uint8_t* out, uint64_t seed,
                               uint64_t first_index, const uint32_t* rbits) {
  const FusedK f = fk;
  const DU du;
  const size_t lanes = hn::Lanes(du);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFu), inf_bits = hn::Set(du, 0x7F800000u);
  alignas(64) uint32_t words[8 * kMaxLanes];
  const PhiloxKeys keys(seed);
  while (i + lanes <= n) {
    const size_t vectors = std::min<size_t>(8, (n - i) / lanes);
    if (vectors == 8) PrefetchAhead<S>(in, i, 8 * lanes);
    const uint32_t* w = rbits + i;
    if (rbits == nullptr) {
      PhiloxWords((first_index + i) >> 2, keys, words);
      w = words;
    }
    size_t v = 0;
    for (; v + 4 <= vectors; v += 4, i += 4 * lanes) {
      VU x[4];
      if (!LoadFinite4<S>(in, i, x)) return i;
      const uint32_t* wv = w + v * lanes;
      StoreCodes4(FusedVec<R, kCommon>(f, x[0], hn::LoadU(du, wv)), FusedVec<R, kCommon>(f, x[1], hn::LoadU(du, wv + lanes)),
                  FusedVec<R, kCommon>(f, x[2], hn::LoadU(du, wv + 2 * lanes)),
                  FusedVec<R, kCommon>(f, x[3], hn::LoadU(du, wv + 3 * lanes)), out + i);
    }
    for (; v < vectors; ++v, i += lanes) {
      const VU x = LoadBits<S>(in, i);
      if (!hn::AllTrue(du, hn::Lt(hn::And(x, abs_mask), inf_bits))) return i;
      StoreCodes(FusedVec<R, kCommon>(f, x, hn::LoadU(du, w + v * lanes)), out + i);
    }
  }
  return i;
}

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#endif  // QMX_ROUND_CONVERT_IO_INL_H_
