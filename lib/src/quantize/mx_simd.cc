// mx_simd.cc: Highway kernels for MX block quantization (OCP MX v1.0 section 6.3: block amax -> UE8M0 scale ->
// elements, two passes per batch of blocks) and dequantization, compiled for every x86 target and chosen at
// run time; elements round through round/convert_tiers-inl.h. tests/quantize/test_mx.cc checks every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quantize/mx_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "hwy/highway.h"
#include "qmx/rng.h"
#include "qmx/scale.h"
#include "rng/philox_simd-inl.h"
#include "round/convert_io-inl.h"
#include "quantize/mx_kernels.h"
#include "round/convert_params.h"
#include "round/convert_tiers-inl.h"

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
  // nvfp4-torchao: finite lanes only reach here, so the clamp sees no NaN (std::min/max and hn::Min/Max agree).
  const auto tv = hn::Min(hn::Max(hn::Div(hn::Div(am, hn::Set(df, 6.0f)), hn::Set(df, a.s_enc)), hn::Set(df, 0.015625f)),
                          hn::Set(df, 448.0f));
  const VU v = hn::BitCast(du, a.rule == ScaleRule::kNvfp4Torchao ? tv
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

template <Rounding R, DType S>
void MxLoop(const MxKernelArgs& a, const void* in, size_t n, uint8_t* codes, uint8_t* scales, uint64_t seed,
            uint64_t first_index, const uint32_t* rbits) {
  const DU du;
  const DI di;
  const DF df;
  const size_t lanes = hn::Lanes(du);
  const Consts k(*a.p);
  const Consts ke(a.nvfp4 ? *a.p_e4m3 : *a.p);  // the NVFP4 scale's conversion
  constexpr bool kSr = R == Rounding::kSrA || R == Rounding::kSrB || R == Rounding::kSrC;
  constexpr bool kFusable = R == Rounding::kRne || R == Rounding::kSrA;
  RandomWords rw(seed, first_index, rbits, kSr);
  const VU none = hn::Zero(du);
  const size_t block = static_cast<size_t>(a.block);
  const size_t nblocks = (n + block - 1) / block;
  const bool exact = a.scaling == ElementScaling::kExact;
  int lite_scale = -1;
  VI eoff = hn::Zero(di);
  Lite lite = MakeLite(k, 0);
  auto vmul = hn::Set(df, 1.0f);
  const float gpu_nan = hd::F32FromBits(0x7FFFFFFFu);

  // A block's elements through the general tiers, under the current eoff/lite (exact) or vmul.
  const auto convert_elements = [&](size_t start, size_t len) {
    const auto load = [&](size_t at, size_t count) {
      const VU x = count == lanes ? LoadBits<S>(in, at) : LoadBitsPartial<S>(in, at, count);
      if (exact) return x;
      const auto y = hn::Mul(hn::BitCast(df, x), vmul);
      // te-rcp: the GPU's FMUL gives the canonical +NaN (mx_ref.cc).
      if (a.scaling == ElementScaling::kTeRcp) return hn::BitCast(du, hn::IfThenElse(hn::IsNaN(y), hn::Set(df, gpu_nan), y));
      return hn::BitCast(du, y);
    };
    for (size_t j = 0; j < len; j += lanes) {
      const size_t c = len - j < lanes ? len - j : lanes;
      const VU rb = kSr ? rw.Take(start + j, c) : none;
      const VU code = ConvertAny<R>(k, lite, load(start + j, c), eoff, rb);
      if (c == lanes) StoreCodes(code, codes + start + j);
      else StoreCodesPartial(code, codes + start + j, c);
    }
  };
  const auto skip_random_words = [&](size_t start, size_t len) {  // keep the stream aligned with element indices
    if constexpr (kSr) {
      for (size_t jj = 0; jj < len; jj += lanes) (void)rw.Take(start + jj, len - jj < lanes ? len - jj : lanes);
    }
  };

  // An NVFP4 block through the general tiers (quantize.cc's QuantizeStrip is the definition): block-nan
  // marks a block holding NaN or Inf; otherwise the amax is of the finite elements, or Inf where
  // ignore-nan meets an Inf.
  const auto nvfp4_block = [&](size_t b, size_t start, size_t len, uint32_t amax) {
    if (amax >= 0x7F800000u) {
      if (a.policy == NanPolicy::kBlockNan) {
        scales[b] = 0x7F;
        std::memset(codes + start, static_cast<int>(a.elem_nan), len);
        skip_random_words(start, len);
        return;
      }
      amax = BlockAmaxBits<S>(k, in, start, len, a.policy == NanPolicy::kIgnoreNan ? 0x7F800001u : 0x7F800000u);
    }
    float amax_f;
    std::memcpy(&amax_f, &amax, 4);
    const uint8_t s8 = Nvfp4BlockScale(amax_f, a.s_enc, Nvfp4Rule(a));
    scales[b] = s8;
    vmul = hn::Set(df, a.mult[s8 & 0x7F]);
    convert_elements(start, len);
  };

  // One block through the general tiers: the NaN policies, and formats or modes the fused path does not take.
  const auto general_block = [&](size_t b, size_t start, size_t len, uint32_t amax) {
    if (a.nvfp4) return nvfp4_block(b, start, len, amax);
    // 2. Scale byte; a block holding NaN or Inf follows the NaN policy.
    int scale = -1;
    uint32_t fill = 0;
    if (amax >= 0x7F800000u) {
      switch (a.policy) {
        case NanPolicy::kBlockNan: scale = 0xFF, fill = a.elem_nan; break;
        case NanPolicy::kScaleNan: scale = 0xFF, fill = a.p->nan_code[0]; break;
        case NanPolicy::kTe:
          if (amax > 0x7F800000u) scale = 0xFF, fill = a.p->nan_code[0];
          else scale = 0xFE;
          break;
        case NanPolicy::kIgnoreNan: {
          const uint32_t m = BlockAmaxBits<S>(k, in, start, len, 0x7F800001u);
          scale = m == 0x7F800000u ? 0xFE : ScaleByteFromAmaxBits(m, static_cast<int>(a.rule), a.destmax, a.emax, a.elem_man);
          break;
        }
        case NanPolicy::kIgnore:
          scale = ScaleByteFromAmaxBits(BlockAmaxBits<S>(k, in, start, len, 0x7F800000u), static_cast<int>(a.rule), a.destmax, a.emax,
                                        a.elem_man);
          break;
      }
      if (scale == 0xFF) {
        scales[b] = 0xFF;
        std::memset(codes + start, static_cast<int>(fill), len);
        skip_random_words(start, len);
        return;
      }
    } else {
      scale = ScaleByteFromAmaxBits(amax, static_cast<int>(a.rule), a.destmax, a.emax, a.elem_man);
    }
    scales[b] = static_cast<uint8_t>(scale);
    if (scale != lite_scale) {  // neighbouring blocks often share a scale
      lite_scale = scale;
      if (exact) {
        eoff = hn::Set(di, 127 - static_cast<int32_t>(scale));
        lite = MakeLite(k, 127 - static_cast<int32_t>(scale));
      } else {
        vmul = hn::Set(df, ScaleInverse(a.scaling, static_cast<uint32_t>(scale)));
      }
    }
    // 3. Elements: V_i / X exactly by moving the exponent, or fl32(x * multiplier) for the FP32 modes.
    convert_elements(start, len);
  };

  // Blocks go in batches of two passes, so that no element waits on its block's scale: pass 1 takes every
  // block's amax (|x| bits: integer order is value order, NaN and Inf compare highest) and, for a finite
  // block, its scale byte and element multiplier; pass 2 converts. The fused path multiplies a block's
  // elements by 2^(127 - scale), exact wherever the product is an FP32 normal (Consts::InitFused covers
  // the rest), or by the FP32 multiplier of the element-scaling modes, then rounds them in one
  // branch-free pass. Multiplier 0 sends a block to the general tiers.
  const bool common = k.fused && k.f.sat && k.f.neg_zero;
  constexpr size_t kBatch = 64;
  static_assert(kBatch % kMaxLanes == 0 && kBatch <= 64, "whole vectors of block maxima; one bit per block");
  // Pass 2 prefetches the next batch's source: pass 1 then finds it in cache, and the memory system
  // stays busy while pass 2 works from L1.
  const size_t ahead = kBatch * block * SrcSize<S>();
  alignas(64) uint32_t amaxes[kBatch];
  alignas(64) float mults[kBatch];
  const uint32_t* given = k.flush_in ? nullptr : a.block_amax;  // the caller's maxima, of unflushed |x|
  for (size_t b0 = 0; b0 < nblocks; b0 += kBatch) {
    const size_t nb = std::min(kBatch, nblocks - b0);
    uint64_t general = 0;  // bit i: block b0 + i goes through the general tiers
    size_t done = 0;       // blocks done a vector of Lanes blocks at a time
    if (kFusable && k.fused && block % lanes == 0) {
      const VU inf_bits = hn::Set(du, 0x7F800000u);
      for (; done + lanes <= nb && (b0 + done + lanes) * block <= n; done += lanes) {
        const VU amax = given != nullptr ? hn::LoadU(du, given + b0 + done) : AmaxOfBlocks<S>(in, (b0 + done) * block, block);
        VU byte, mult;
        if (a.nvfp4) {
          byte = Nvfp4BytesOf(a, ke, amax, &mult);
        } else {
          byte = ScaleBytesOf(a, amax);
          mult = ScaleMultipliersOf(a.scaling, byte);
        }
        const auto prod = hn::BitCast(du, hn::Mul(hn::BitCast(df, amax), hn::BitCast(df, mult)));
        const auto ok = hn::And(hn::Lt(amax, inf_bits), hn::Lt(prod, inf_bits));
        hn::StoreU(amax, du, amaxes + done);
        hn::StoreU(hn::BitCast(df, hn::IfThenElseZero(ok, mult)), df, mults + done);
        uint8_t mask_bits[8] = {};
        hn::StoreMaskBits(du, hn::Not(ok), mask_bits);
        uint64_t m;
        std::memcpy(&m, mask_bits, 8);
        general |= m << done;
        StoreCodes(byte, scales + b0 + done);  // a NaN/Inf block's byte is rewritten by general_block
      }
    }
    for (size_t i = done; i < nb; ++i) {
      const size_t start = (b0 + i) * block;
      const size_t len = start + block <= n ? block : n - start;
      const uint32_t amax = given != nullptr ? given[b0 + i] : BlockAmaxBits<S>(k, in, start, len, 0xFFFFFFFFu);
      amaxes[i] = amax;
      mults[i] = 0.0f;
      if (kFusable && k.fused && amax < 0x7F800000u) {
        float amax_f;
        std::memcpy(&amax_f, &amax, 4);
        int scale;
        float mult;
        if (a.nvfp4) {
          scale = Nvfp4BlockScale(amax_f, a.s_enc, Nvfp4Rule(a));
          mult = a.mult[scale & 0x7F];
        } else {
          scale = ScaleByteFromAmaxBits(amax, static_cast<int>(a.rule), a.destmax, a.emax, a.elem_man);
          mult = ScaleInverse(a.scaling, static_cast<uint32_t>(scale));  // exact: 2^(127 - scale)
        }
        scales[b0 + i] = static_cast<uint8_t>(scale);
        if (amax_f * mult <= std::numeric_limits<float>::max()) mults[i] = mult;
      }
      if (mults[i] == 0.0f) general |= uint64_t{1} << i;
    }
    for (size_t i = 0; i < nb;) {
      if ((general >> i) & 1) {
        const size_t b = b0 + i, start = b * block;
        general_block(b, start, start + block <= n ? block : n - start, amaxes[i]);
        ++i;
        continue;
      }
      const uint64_t rest = general >> i;  // the next general block ends this fused run
      const size_t e = rest == 0 ? nb : std::min(nb, i + static_cast<size_t>(__builtin_ctzll(rest)));
      if constexpr (kFusable) {
        RandomWords* words = kSr ? &rw : nullptr;
        if (common && a.stream) FusedBlocks<R, S, true, true>(k.f, in, block, n, b0 + i, e - i, mults + i, codes, words, ahead);
        else if (common) FusedBlocks<R, S, true, false>(k.f, in, block, n, b0 + i, e - i, mults + i, codes, words, ahead);
        else if (a.stream) FusedBlocks<R, S, false, true>(k.f, in, block, n, b0 + i, e - i, mults + i, codes, words, ahead);
        else FusedBlocks<R, S, false, false>(k.f, in, block, n, b0 + i, e - i, mults + i, codes, words, ahead);
      }
      i = e;
    }
  }
  if (a.stream) StreamFence();
}

// ------------------------------------------------------------------ runs of fused blocks

// Whether the fused runs below take conversions under p: the fused tier, RNE or SR-A.
bool FusedRunsTakeT(const ConvertParams& p) {
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

// FP32-scaled blocks (ConvertScaledBlocks): the fused runs, cached stores.
void ConvertScaledBlocksT(const ConvertParams& p, DType src, const void* in, size_t n, size_t block, const float* mults,
                          const uint8_t* take, uint8_t* codes, uint64_t seed, uint64_t first_index) {
  const Consts k(p);
  ByRneSrSource(src, p.rounding == Rounding::kSrA, [&](auto r, auto s) {
    FusedTakenBlocks<decltype(r)::value, decltype(s)::value, false>(k, in, n, block, mults, take, codes, seed, first_index);
  });
}

// ------------------------------------------------------------------ NVFP4 blocks of several rows

// Whether Nvfp4StripLoop takes these arguments: the fused runs' tier, and whole vectors per block row.
bool Nvfp4StripTakesT(const MxKernelArgs& a) {
  return a.nvfp4 && FusedRunsTakeT(*a.p) && a.block > 0 && static_cast<size_t>(a.block) % hn::Lanes(DU()) == 0;
}

// One strip of NVFP4 blocks of h rows by a.block columns, across `cols` columns (a multiple of a.block),
// row-major with row stride cols; codes likewise, scales one per block; first_index: the element index of
// the strip's first element (SR words). First every block's scale byte and multiplier, Lanes blocks at a
// time as MxLoop's first pass: the block's |x| bits maximum is the maximum of its row pieces' where
// a.block_amax holds them (the strip's pieces of a.block elements, row-major), else its rows' vectors
// folded and then PairMaxFold (as AmaxOfBlocks); then each row's runs of fused blocks in one stream
// (FusedTakenBlocks: the rows of the strip are long runs in memory, which the hardware prefetchers follow;
// a group's rows one after another are not). A block the fused tier cannot take (NaN, Inf, a product that
// overflows) is gathered, with its SR words, and goes through MxLoop as one block of h x a.block
// elements: what the general strip path (quantize.cc's QuantizeStrip) does with every block.
template <Rounding R, DType S>
void Nvfp4StripLoop(const MxKernelArgs& a, const void* in, size_t h, size_t cols, uint8_t* codes, uint8_t* scales,
                    uint64_t seed, uint64_t first_index) {
  constexpr bool kSr = R == Rounding::kSrA;
  constexpr size_t kSize = SrcSize<S>();
  const DU du;
  const DF df;
  const size_t lanes = hn::Lanes(du);
  const Consts k(*a.p);
  const Consts ke(*a.p_e4m3);
  const size_t bc = static_cast<size_t>(a.block), vpb = bc / lanes, nb = cols / bc;
  const uint8_t* src = static_cast<const uint8_t*>(in);
  const VU abs_mask = hn::Set(du, 0x7FFFFFFFu), inf_bits = hn::Set(du, 0x7F800000u);
  const auto row_of = [&](size_t r, size_t c) { return src + (r * cols + c) * kSize; };
  // 1. Scale bytes, multipliers, and whether the fused tier takes the block.
  std::vector<float> mults(nb + lanes);
  std::vector<uint8_t> fused(nb + lanes);
  for (size_t g0 = 0; g0 < nb; g0 += lanes) {
    const size_t gn = std::min(lanes, nb - g0), c0 = g0 * bc;
    VU v[kMaxLanes];  // lane j: block g0 + j
    if (a.block_amax != nullptr) {
      v[0] = hn::Zero(du);
      for (size_t r = 0; r < h; ++r) {
        const uint32_t* piece = a.block_amax + r * nb + g0;
        if (gn == lanes) {
          v[0] = hn::Max(v[0], hn::LoadU(du, piece));
        } else {
          alignas(64) uint32_t tail[kMaxLanes] = {};
          std::memcpy(tail, piece, gn * sizeof(uint32_t));
          v[0] = hn::Max(v[0], hn::Load(du, tail));
        }
      }
    } else {
      for (size_t j = 0; j < lanes; ++j) {
        VU m = hn::Zero(du);
        for (size_t r = 0; j < gn && r < h; ++r)
          for (size_t q = 0; q < vpb; ++q) m = hn::Max(m, hn::And(LoadBits<S>(row_of(r, c0 + j * bc), q * lanes), abs_mask));
        v[j] = m;
      }
#if HWY_TARGET != HWY_SCALAR
      PairMaxFold(v);
#endif
    }
    const VU amax = v[0];
    VU mult;
    const VU byte = Nvfp4BytesOf(a, ke, amax, &mult);
    const VU prod = hn::BitCast(du, hn::Mul(hn::BitCast(df, amax), hn::BitCast(df, mult)));
    const auto ok = hn::And(hn::Lt(amax, inf_bits), hn::Lt(prod, inf_bits));
    hn::StoreU(hn::BitCast(df, hn::IfThenElseZero(ok, mult)), df, mults.data() + g0);
    StoreCodes(hn::IfThenElseZero(ok, hn::Set(du, 1u)), fused.data() + g0);
    if (gn == lanes) StoreCodes(byte, scales + g0);
    else StoreCodesPartial(byte, scales + g0, gn);
  }
  // 2. Each row's runs of fused blocks.
  for (size_t r = 0; r < h; ++r) {
    if (a.stream) FusedTakenBlocks<R, S, true>(k, row_of(r, 0), cols, bc, mults.data(), fused.data(), codes + r * cols, seed, first_index + r * cols);
    else FusedTakenBlocks<R, S, false>(k, row_of(r, 0), cols, bc, mults.data(), fused.data(), codes + r * cols, seed, first_index + r * cols);
  }
  // 3. The other blocks.
  for (size_t j = 0; j < nb; ++j) {
    if (fused[j]) continue;
    const size_t len = h * bc;
    std::vector<uint8_t> x(len * kSize), out(len);
    std::vector<uint32_t> rb(kSr ? len : 0);
    for (size_t r = 0; r < h; ++r) {
      std::memcpy(x.data() + r * bc * kSize, row_of(r, j * bc), bc * kSize);
      if constexpr (kSr)
        for (size_t t = 0; t < bc; ++t) rb[r * bc + t] = RandomBitsForElement(seed, first_index + r * cols + j * bc + t);
    }
    MxKernelArgs one = a;
    one.block = static_cast<int>(len);
    one.block_amax = nullptr;
    one.stream = false;
    MxLoop<R, S>(one, x.data(), len, out.data(), scales + j, seed, 0, kSr ? rb.data() : nullptr);
    for (size_t r = 0; r < h; ++r) std::memcpy(codes + r * cols + j * bc, out.data() + r * bc, bc);
  }
  if (a.stream) StreamFence();
}

void QuantizeNvfp4StripT(const MxKernelArgs& a, DType src, const void* in, size_t h, size_t cols, uint8_t* codes,
                         uint8_t* scales, uint64_t seed, uint64_t first_index) {
  ByRneSrSource(src, a.p->rounding == Rounding::kSrA, [&](auto r, auto s) {
    Nvfp4StripLoop<decltype(r)::value, decltype(s)::value>(a, in, h, cols, codes, scales, seed, first_index);
  });
}

template <Rounding R>
void MxBySource(const MxKernelArgs& a, DType src, const void* in, size_t n, uint8_t* codes, uint8_t* scales,
                uint64_t seed, uint64_t first_index, const uint32_t* rbits) {
  switch (src) {
    case DType::kBF16: return MxLoop<R, DType::kBF16>(a, in, n, codes, scales, seed, first_index, rbits);
    case DType::kF16: return MxLoop<R, DType::kF16>(a, in, n, codes, scales, seed, first_index, rbits);
    default: return MxLoop<R, DType::kF32>(a, in, n, codes, scales, seed, first_index, rbits);
  }
}

void QuantizeMxBlocksT(const MxKernelArgs& a, DType src, const void* in, size_t n, uint8_t* codes, uint8_t* scales,
                       uint64_t seed, uint64_t first_index, const uint32_t* rbits) {
  switch (a.p->rounding) {
    case Rounding::kRne: return MxBySource<Rounding::kRne>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kRna: return MxBySource<Rounding::kRna>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kRz: return MxBySource<Rounding::kRz>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kRu: return MxBySource<Rounding::kRu>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kRd: return MxBySource<Rounding::kRd>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kRo: return MxBySource<Rounding::kRo>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kSrA: return MxBySource<Rounding::kSrA>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kSrB: return MxBySource<Rounding::kSrB>(a, src, in, n, codes, scales, seed, first_index, rbits);
    case Rounding::kSrC: return MxBySource<Rounding::kSrC>(a, src, in, n, codes, scales, seed, first_index, rbits);
  }
}

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

void DequantizeMxBlocksT(const float* table, int block_len, const uint8_t* codes, const uint8_t* scales, size_t n,
                         float* out) {
  const DF df;
  const DI di;
  const hn::Rebind<uint8_t, DI> d8;
  const size_t lanes = hn::Lanes(df);
  const size_t block = static_cast<size_t>(block_len);
  for (size_t b = 0, start = 0; start < n; ++b, start += block) {
    const size_t len = start + block <= n ? block : n - start;
    const uint8_t s = scales[b];
    const uint32_t fbits = s == 0xFF ? 0x7FC00000u : (s == 0 ? 0x00400000u : static_cast<uint32_t>(s) << 23);
    float f;
    std::memcpy(&f, &fbits, 4);
    const auto vf = hn::Set(df, f);
    size_t j = 0;
    for (; j + lanes <= len; j += lanes) {
      const auto v = hn::GatherIndex(df, table, hn::PromoteTo(di, hn::LoadU(d8, codes + start + j)));
      hn::StoreU(hn::Mul(v, vf), df, out + start + j);
    }
    for (; j < len; ++j) out[start + j] = table[codes[start + j]] * f;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "fp_env.h"
#if HWY_ARCH_X86
#include <cpuid.h>
#endif

namespace qmx::simd {
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

HWY_EXPORT(QuantizeMxBlocksT);
HWY_EXPORT(Nvfp4StripTakesT);
HWY_EXPORT(FusedRunsTakeT);
HWY_EXPORT(ConvertScaledBlocksT);
HWY_EXPORT(QuantizeNvfp4StripT);
HWY_EXPORT(DequantizeMxBlocksT);
HWY_EXPORT(AmaxBitsT);
HWY_EXPORT(AmaxBitsOfBlocksT);

uint32_t AmaxBitsOfBlocks(DType src, const void* in, size_t n, size_t block, uint32_t* out, uint32_t limit) {
  return HWY_DYNAMIC_DISPATCH(AmaxBitsOfBlocksT)(src, in, n, block, out, limit);
}

uint32_t AmaxBits(DType src, const void* in, size_t n, uint32_t limit) {
  return HWY_DYNAMIC_DISPATCH(AmaxBitsT)(src, in, n, limit);
}

void QuantizeMxBlocks(const MxKernelArgs& a, DType src, const void* in, size_t n, uint8_t* codes, uint8_t* scales,
                      uint64_t seed, uint64_t first_index, const uint32_t* rbits) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(QuantizeMxBlocksT)(a, src, in, n, codes, scales, seed, first_index, rbits);
}
bool Nvfp4StripTakes(const MxKernelArgs& a) { return HWY_DYNAMIC_DISPATCH(Nvfp4StripTakesT)(a); }
bool ScaledBlocksTake(const ConvertParams& p) { return HWY_DYNAMIC_DISPATCH(FusedRunsTakeT)(p); }
void ConvertScaledBlocks(const ConvertParams& p, DType src, const void* in, size_t n, size_t block, const float* mults,
                         const uint8_t* take, uint8_t* codes, uint64_t seed, uint64_t first_index) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(ConvertScaledBlocksT)(p, src, in, n, block, mults, take, codes, seed, first_index);
}
void QuantizeNvfp4Strip(const MxKernelArgs& a, DType src, const void* in, size_t h, size_t cols, uint8_t* codes,
                        uint8_t* scales, uint64_t seed, uint64_t first_index) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(QuantizeNvfp4StripT)(a, src, in, h, cols, codes, scales, seed, first_index);
}
void DequantizeMxBlocks(const float* table, int block, const uint8_t* codes, const uint8_t* scales, size_t n,
                        float* out) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(DequantizeMxBlocksT)(table, block, codes, scales, n, out);
}
}  // namespace qmx::simd
#endif  // HWY_ONCE
