// mx_blocks-inl.h: the per-target steps the MX, NVFP4-strip and amax kernels share: block maxima (|x| bits),
// scale bytes and multipliers from them (OCP MX v1.0 section 6.3; NVFP4's E4M3 scales), and the fused tier's
// runs over consecutive blocks. Included by quantize/mx_simd.cc, nvfp4_strip_simd.cc and amax_simd.cc.

// Per-target include guard: each target's pass through foreach_target.h compiles this file again.
#if defined(QMX_QUANTIZE_MX_BLOCKS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QMX_QUANTIZE_MX_BLOCKS_INL_H_
#undef QMX_QUANTIZE_MX_BLOCKS_INL_H_
#else
#define QMX_QUANTIZE_MX_BLOCKS_INL_H_
#endif

#include <cstring>
#include <type_traits>

#include "qmx/scale.h"
#include "quantize/mx_kernels.h"
#include "round/convert_io-inl.h"  // with the tiers and the Philox words
#include "round/convert_params.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ------------------------------------------------------------------ MX blocks

// amax bits over a block with lanes masked: keep = lanes whose |x| bits are below `limit` count (limit
// 0x7F800000 keeps finite lanes, 0x7F800001 also Inf, 0xFFFFFFFF every lane).
template <DType S>
HWY_INLINE uint32_t BlockAmaxBits(const Consts& k, const void* in, size_t start, size_t len, uint32_t limit) {
  const DU du;
  const size_t lanes = hn::Lanes(du);
  const VU lim = hn::Set(du, limit);
  VU vmax = hn::Zero(du);
  size_t j = 0;
  for (; j + lanes <= len; j += lanes) {
    const VU a = AbsBits(k, LoadBits<S>(in, start + j));
    vmax = hn::Max(vmax, hn::IfThenElseZero(hn::Lt(a, lim), a));
  }
  if (j < len) {
    const VU a = AbsBits(k, LoadBitsPartial<S>(in, start + j, len - j));
    vmax = hn::Max(vmax, hn::IfThenElseZero(hn::Lt(a, lim), a));
  }
  return hn::GetLane(hn::MaxOfLanes(du, vmax));
}

#if HWY_TARGET != HWY_SCALAR
// Lane i of the result: the maximum of lanes 2i and 2i + 1 of the concatenation (lo, hi).
HWY_INLINE VU PairMax(VU lo, VU hi) {
  const DU du;
  return hn::Max(hn::ConcatEven(du, hi, lo), hn::ConcatOdd(du, hi, lo));
}

// Lane i of the result: the maximum of v[i]'s lanes (Lanes vectors), by halving pairwise (PairMax keeps the
// lanes' order, so after log2(Lanes) rounds lane i holds v[i]'s maximum). v is overwritten.
HWY_INLINE VU PairMaxFold(VU (&v)[kMaxLanes]) {
  const size_t lanes = hn::Lanes(DU());
  for (size_t w = lanes; w > 1; w /= 2) {
    for (size_t i = 0; i < w / 2; ++i) v[i] = PairMax(v[2 * i], v[2 * i + 1]);
  }
  return v[0];
}

// |x| bits maxima of kCount blocks of kVecs vectors from element `start` (the usual MX block on AVX-512), lane
// i of the result for block i when kCount = Lanes: a depth-first PairMax tree, so that few vectors are live
// at once (a breadth-first reduction, as in the general loop below, spills them to the stack).
// kVecs vectors per block: 2 (MX's 32 on AVX-512) or 1 (NVFP4's 16 on AVX-512).
template <DType S, size_t kCount, size_t kVecs = 2>
HWY_INLINE VU AmaxTree2(const void* in, size_t start) {
  const DU du;
  const size_t lanes = hn::Lanes(du);
  if constexpr (kCount == 1) {
    const VU abs_mask = hn::Set(du, 0x7FFFFFFFu);
    if constexpr (kVecs == 1) return hn::And(LoadBits<S>(in, start), abs_mask);
    else return hn::Max(hn::And(LoadBits<S>(in, start), abs_mask), hn::And(LoadBits<S>(in, start + lanes), abs_mask));
  } else {
    return PairMax(AmaxTree2<S, kCount / 2, kVecs>(in, start),
                   AmaxTree2<S, kCount / 2, kVecs>(in, start + kCount / 2 * kVecs * lanes));
  }
}
#endif

// amax bits of Lanes consecutive whole blocks of len elements (a multiple of Lanes) from `start`, lane b for
// block b: each block's lanes are folded into one vector, then the vectors by PairMaxFold.
template <DType S>
HWY_INLINE VU AmaxOfBlocks(const void* in, size_t start, size_t len) {
  const DU du;
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFu);  // the fused path never flushes inputs
#if HWY_TARGET == HWY_SCALAR
  VU m = hn::Zero(du);
  for (size_t j = 0; j < len; ++j) m = hn::Max(m, hn::And(LoadBits<S>(in, start + j), abs_mask));
  return m;
#else
  constexpr size_t kL = kMaxLanes;
  const size_t lanes = hn::Lanes(du);
  if (len == 2 * lanes && lanes == kL) return AmaxTree2<S, kL>(in, start);
  if (len == lanes && lanes == kL) return AmaxTree2<S, kL, 1>(in, start);
  VU v[kL];
  for (size_t b = 0; b < kL && b < lanes; ++b) {
    VU m = hn::And(LoadBits<S>(in, start + b * len), abs_mask);
    for (size_t j = lanes; j < len; j += lanes) m = hn::Max(m, hn::And(LoadBits<S>(in, start + b * len + j), abs_mask));
    v[b] = m;
  }
  return PairMaxFold(v);
#endif
}

// hd::ScaleByteFromAmaxBits on every lane of amax bits (finite lanes; the others are never used).
HWY_INLINE VU ScaleBytesOf(const MxKernelArgs& a, VU amax) {
  const DU du;
  const DI di;
  const DF df;
  const VU one = hn::Set(du, 1u), zero = hn::Zero(du);
  if (a.rule == ScaleRule::kRoundUp) {  // round-up: X = fl32(amax / destmax) rounded up to a power of two
    // Without the division where every lane's quotient is a normal float: amax = (1 + f) 2^(E - 127),
    // destmax = (1 + g) 2^(D - 127). If f >= g the quotient lies in [1, 2) 2^(E - D), and it rounds above
    // 2^(E - D) iff f > g (the tie at 1 + 2^-24 goes to even); if f < g it lies in [1/2, 1) 2^(E - D),
    // above 2^(E - D - 1), and rounds up to at most 2^(E - D). So the byte is E - D + 127 + [f > g]. The
    // quotient is normal where E >= D - 125 (at least 2^-126) and E >= 1 (amax normal).
    uint32_t db;
    std::memcpy(&db, &a.destmax, 4);
    const uint32_t d_field = db >> 23;
    if (d_field >= 1 && d_field <= 254) {
      const uint32_t lo = d_field > 126 ? d_field - 125 : 1;
      if (hn::AllFalse(du, hn::Lt(amax, hn::Set(du, lo << 23)))) {
        const VU base = hn::Add(hn::ShiftRight<23>(amax), hn::Set(du, 127 - d_field));
        const VU up = hn::IfThenElseZero(hn::Gt(hn::And(amax, hn::Set(du, 0x7FFFFFu)), hn::Set(du, db & 0x7FFFFFu)), one);
        return hn::Min(hn::Add(base, up), hn::Set(du, 254u));
      }
    }
    const VU qb = hn::BitCast(du, hn::Div(hn::BitCast(df, amax), hn::Set(df, a.destmax)));
    const VU qe = hn::ShiftRight<23>(qb), qm = hn::And(qb, hn::Set(du, 0x7FFFFFu));
    const VU byte = hn::Min(hn::Add(qe, hn::IfThenElseZero(hn::Ne(qm, zero), one)), hn::Set(du, 254u));
    return hn::IfThenElse(hn::Eq(qe, zero), hn::IfThenElseZero(hn::Gt(qm, hn::Set(du, 0x400000u)), one), byte);
  }
  const VI e_field = hn::BitCast(di, hn::ShiftRight<23>(amax));
  const VI c127 = hn::Set(di, 127);
  VI lg;
  if (a.rule == ScaleRule::kCeil) {
    lg = hn::Add(hn::Sub(e_field, c127), hn::BitCast(di, hn::IfThenElseZero(hn::Ne(hn::And(amax, hn::Set(du, 0x7FFFFFu)), zero), one)));
  } else if (a.rule == ScaleRule::kEven) {
    const VU r = hn::And(hn::Add(amax, hn::Set(du, 1u << (22 - a.elem_man))), hn::Set(du, 0xFF800000u));
    lg = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(r)), c127);
  } else {  // floor; an FP32-subnormal amax's leading bit from float(amax), exact below 2^23
    const VI high = hn::Sub(hn::BitCast(di, hn::ShiftRight<23>(hn::BitCast(du, hn::ConvertTo(df, hn::BitCast(di, amax))))), c127);
    lg = hn::IfThenElse(hn::Eq(e_field, hn::Zero(di)), hn::Sub(high, hn::Set(di, 149)), hn::Sub(e_field, c127));
  }
  const VI kk = hn::Min(hn::Max(hn::Sub(lg, hn::Set(di, a.emax)), hn::Set(di, -127)), c127);
  return hn::IfThenZeroElse(hn::Eq(amax, zero), hn::BitCast(du, hn::Add(kk, c127)));
}

// hd::ScaleMultiplier of every lane's scale byte (< 255) as FP32 bits: 2^(127 - byte), or Transformer
// Engine's exp2f_rcp (scaling 2).
HWY_INLINE VU ScaleMultipliersOf(ElementScaling scaling, VU byte) {
  const DU du;
  const VU c254 = hn::Set(du, 254u);
  const VU pow2 = hn::ShiftLeft<23>(hn::Sub(c254, byte));
  if (scaling == ElementScaling::kTeRcp) return hn::IfThenElse(hn::Eq(byte, hn::Zero(du)), hn::Set(du, 0x3F800000u), pow2);
  return hn::IfThenElse(hn::Eq(byte, c254), hn::Set(du, 0x00400000u), pow2);
}

// The element multiplier of the FP32 element-scaling modes for scale byte s (< 255): host_device.h.
inline float ScaleInverse(ElementScaling scaling, uint32_t s) {
  return hd::ScaleMultiplier(static_cast<uint8_t>(s), scaling == ElementScaling::kTeRcp);
}

inline ScaleRule Nvfp4Rule(const MxKernelArgs& a) {
  return a.rule;
}

// table[i] of every lane's index i < 128, as FP32 bits. On AVX-512 four two-table permutes and three
// blends, instead of a gather (a gather of 16 lanes costs several times as much on the machines measured).
HWY_INLINE VU Lookup128(const float* table, VU idx) {
#if QMX_AVX512
  const __m512i i = idx.raw;
  const auto pair = [&](size_t t) {
    return _mm512_permutex2var_ps(_mm512_loadu_ps(table + 32 * t), i, _mm512_loadu_ps(table + 32 * t + 16));
  };
  const __mmask16 b5 = _mm512_test_epi32_mask(i, _mm512_set1_epi32(32));
  const __mmask16 b6 = _mm512_test_epi32_mask(i, _mm512_set1_epi32(64));
  const __m512 lo = _mm512_mask_blend_ps(b5, pair(0), pair(1)), hi = _mm512_mask_blend_ps(b5, pair(2), pair(3));
  return VU{_mm512_castps_si512(_mm512_mask_blend_ps(b6, lo, hi))};
#else
  const DU du;
  const DF df;
  const DI di;
  return hn::BitCast(du, hn::GatherIndex(df, table, hn::BitCast(di, idx)));
#endif
}

// Nvfp4BlockScale (scale/scale.cc) on every lane of finite amax bits, the same FP32 operations in the same
// order and the E4M3 rounding through the conversion tiers, and the multiplier of each byte from the
// caller's table of Nvfp4EncodeFactor. Lanes of non-finite amax get some byte below 128 and are never used.
HWY_INLINE VU Nvfp4BytesOf(const MxKernelArgs& a, const Consts& ke, VU amax, VU* mult) {
  const DU du;
  const DI di;
  const DF df;
  const auto am = hn::BitCast(df, amax);
  // The torchao rules: finite lanes only reach here, so the clamp sees no NaN (std::min/max and hn::Min/Max
  // agree); on CUDA its division by 6 is a multiply by fl(1/6).
  const auto by6 = a.rule == ScaleRule::kNvfp4TorchaoCuda ? hn::Mul(am, hn::Set(df, 1.0f / 6.0f)) : hn::Div(am, hn::Set(df, 6.0f));
  const auto tv = hn::Min(hn::Max(hn::Div(by6, hn::Set(df, a.s_enc)), hn::Set(df, 0.015625f)), hn::Set(df, 448.0f));
  const VU v = hn::BitCast(du, IsNvfp4Torchao(a.rule) ? tv
                               : a.rule == ScaleRule::kNvfp4Div     ? hn::Mul(hn::Div(am, hn::Set(df, 6.0f)), hn::Set(df, a.s_enc))
                                              : hn::Mul(am, hn::Set(df, a.s_m)));
  const VU code = ke.fused && ke.f.sat && ke.f.neg_zero ? FusedVec<Rounding::kRne, true>(ke.f, v, hn::Zero(du))
                                                        : ConvertVec<Rounding::kRne>(ke, v, hn::Zero(di), hn::Zero(du));
  const VU byte = hn::And(code, hn::Set(du, 0x7Fu));
  *mult = Lookup128(a.mult, byte);
  return byte;
}

// The fused path over `count` consecutive MX blocks from block b, block i's elements multiplied by mults[i]
// (see MxLoop); SR takes its words from rw.
template <Rounding R, DType S, bool kCommon, bool kStream>
HWY_NOINLINE void FusedBlocks(const FusedK& fk, const void* in, size_t block, size_t n, size_t b, size_t count,
                              const float* mults, uint8_t* codes, RandomWords* rw, size_t ahead) {
  const FusedK f = fk;
  const DU du;
  const DF df;
  const size_t lanes = hn::Lanes(du);
  const VU none = hn::Zero(du);
  const size_t vpb = block / lanes;  // vectors per block
  if (rw == nullptr && block % lanes == 0 && (vpb & (vpb - 1)) == 0 && (b + count) * block <= n) {
    // Whole blocks of a power-of-two number of vectors: four vectors at a time, across blocks.
    const int shift = __builtin_ctzll(vpb);
    const size_t nv = count * vpb;
    const uint8_t* src = static_cast<const uint8_t*>(in) + b * block * SrcSize<S>();
    uint8_t* dst = codes + b * block;
    size_t v = 0;
    const auto code = [&](size_t vi) {
      const VU x = LoadBits<S>(src, vi * lanes);
      return FusedVec<R, kCommon>(f, hn::BitCast(du, hn::Mul(hn::BitCast(df, x), hn::Set(df, mults[vi >> shift]))), none);
    };
#if QMX_AVX512
    if constexpr (R == Rounding::kRne && kCommon) {
      if (f.e2m1) {
        const auto scaled = [&](size_t vi) {
          return hn::BitCast(du, hn::Mul(hn::BitCast(df, LoadBits<S>(src, vi * lanes)), hn::Set(df, mults[vi >> shift])));
        };
        for (; v + 4 <= nv; v += 4) {
          PrefetchAhead<S>(src, v * lanes, 4 * lanes, ahead);
          StoreBytes64<kStream>(E2m1Codes4(f, scaled(v), scaled(v + 1), scaled(v + 2), scaled(v + 3)), dst + v * lanes);
        }
      }
    }
#endif
    for (; v + 4 <= nv; v += 4) {
      PrefetchAhead<S>(src, v * lanes, 4 * lanes, ahead);
      if constexpr (kStream) StreamCodes4(code(v), code(v + 1), code(v + 2), code(v + 3), dst + v * lanes);
      else StoreCodes4(code(v), code(v + 1), code(v + 2), code(v + 3), dst + v * lanes);
    }
    for (; v < nv; ++v) StoreCodes(code(v), dst + v * lanes);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    const size_t start = (b + i) * block;
    const size_t len = start + block <= n ? block : n - start;
    const auto vm = hn::Set(df, mults[i]);
    const auto scaled = [&](VU x) { return hn::BitCast(du, hn::Mul(hn::BitCast(df, x), vm)); };
    size_t j = 0;
    for (; j + lanes <= len; j += lanes) {
      PrefetchAhead<S>(in, start + j, lanes, ahead);
      const VU rb = rw != nullptr ? rw->Take(start + j, lanes) : none;
      StoreCodes(FusedVec<R, kCommon>(f, scaled(LoadBits<S>(in, start + j)), rb), codes + start + j);
    }
    if (j < len) {
      const size_t c = len - j;
      const VU rb = rw != nullptr ? rw->Take(start + j, c) : none;
      StoreCodesPartial(FusedVec<R, kCommon>(f, scaled(LoadBitsPartial<S>(in, start + j, c)), rb), codes + start + j, c);
    }
  }
}

// ------------------------------------------------------------------ runs of fused blocks

// Whether the fused runs below take conversions under p: the fused tier, RNE or SR-A.
HWY_INLINE bool FusedRunsTake(const ConvertParams& p) {
  const Consts k(p);
  return k.fused && (p.rounding == Rounding::kRne || p.rounding == Rounding::kSrA);
}

// Blocks of `block` elements of in (n elements; the last block may be partial): each run of consecutive
// blocks i with take[i] through FusedBlocks, block i's elements fl32(x * mults[i]) (the caller vouches that
// every such product is finite), SR words from the element indices first_index + j; other blocks are left
// to the caller.
template <Rounding R, DType S, bool kStream>
void FusedTakenBlocks(const Consts& k, const void* in, size_t n, size_t block, const float* mults, const uint8_t* take,
                      uint8_t* codes, uint64_t seed, uint64_t first_index) {
  constexpr bool kSr = R == Rounding::kSrA;
  const bool common = k.f.sat && k.f.neg_zero;
  const size_t nblocks = (n + block - 1) / block;
  for (size_t i = 0; i < nblocks;) {
    if (!take[i]) {
      ++i;
      continue;
    }
    size_t e = i + 1;
    while (e < nblocks && take[e]) ++e;
    RandomWords rw(seed, first_index + i * block, nullptr, kSr);
    RandomWords* words = kSr ? &rw : nullptr;
    if (common) FusedBlocks<R, S, true, kStream>(k.f, in, block, n, i, e - i, mults + i, codes, words, kPrefetchBytes);
    else FusedBlocks<R, S, false, kStream>(k.f, in, block, n, i, e - i, mults + i, codes, words, kPrefetchBytes);
    i = e;
  }
}

// f(R, S) as integral constants: the source type's and RNE's or SR-A's instantiation.
template <class F>
void ByRneSrSource(DType src, bool sr, F&& f) {
  const auto by_source = [&](auto r) {
    switch (src) {
      case DType::kBF16: return f(r, std::integral_constant<DType, DType::kBF16>{});
      case DType::kF16: return f(r, std::integral_constant<DType, DType::kF16>{});
      default: return f(r, std::integral_constant<DType, DType::kF32>{});
    }
  };
  if (sr) by_source(std::integral_constant<Rounding, Rounding::kSrA>{});
  else by_source(std::integral_constant<Rounding, Rounding::kRne>{});
}

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#endif  // QMX_QUANTIZE_MX_BLOCKS_INL_H_
