// mx_simd.cc: Highway kernels for MX block quantization (OCP MX v1.0 section 6.3: block amax -> UE8M0 scale ->
// elements, two passes per batch of blocks) and dequantization, compiled for every x86 target and chosen at
// run time; elements round through round/convert_tiers-inl.h. tests/quantize/test_mx.cc checks every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quantize/mx_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "hwy/highway.h"
#include "quantize/mx_blocks-inl.h"
#include "quantize/mx_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ------------------------------------------------------------------ MX and NVFP4 blocks, two passes

// The blocks of one MxLoop call that go through the general tiers: the NaN policies, NVFP4 blocks holding
// NaN or Inf, and formats or modes the fused path does not take. It keeps the last block's scale (exponent
// offset and lite tier, or FP32 multiplier), since neighbouring blocks often share one.
template <Rounding R, DType S>
class GeneralBlocks {
 public:
  static constexpr bool kSr = R == Rounding::kSrA || R == Rounding::kSrB || R == Rounding::kSrC;

  GeneralBlocks(const MxKernelArgs& a, const Consts& k, const void* in, uint8_t* codes, uint8_t* scales,
                RandomWords& rw)
      : a_(a), k_(k), in_(in), codes_(codes), scales_(scales), rw_(rw), exact_(a.scaling == ElementScaling::kExact),
        eoff_(hn::Zero(DI())), lite_(MakeLite(k, 0)), vmul_(hn::Set(DF(), 1.0f)) {}

  // Block b: elements [start, start + len), amax their |x| bits maximum.
  void Block(size_t b, size_t start, size_t len, uint32_t amax) {
    if (a_.nvfp4) return Nvfp4Block(b, start, len, amax);
    // 2. Scale byte; a block holding NaN or Inf follows the NaN policy.
    int scale;
    if (amax >= 0x7F800000u) {
      uint32_t fill = 0;
      scale = NonFiniteScale(start, len, amax, &fill);
      if (scale == 0xFF) return FillBlock(b, start, len, 0xFF, fill);
    } else {
      scale = ScaleOf(amax);
    }
    scales_[b] = static_cast<uint8_t>(scale);
    SetScale(scale);
    // 3. Elements: V_i / X exactly by moving the exponent, or fl32(x * multiplier) for the FP32 modes.
    ConvertElements(start, len);
  }

 private:
  int ScaleOf(uint32_t amax) const {
    return ScaleByteFromAmaxBits(amax, static_cast<int>(a_.rule), a_.destmax, a_.emax, a_.elem_man);
  }

  // The scale byte of a block holding NaN or Inf under the MX NaN policy; 0xFF with *fill its elements' code.
  int NonFiniteScale(size_t start, size_t len, uint32_t amax, uint32_t* fill) const {
    switch (a_.policy) {
      case NanPolicy::kBlockNan: *fill = a_.elem_nan; return 0xFF;
      case NanPolicy::kScaleNan: *fill = a_.p->nan_code[0]; return 0xFF;
      case NanPolicy::kTe:
        if (amax > 0x7F800000u) {
          *fill = a_.p->nan_code[0];
          return 0xFF;
        }
        return 0xFE;
      case NanPolicy::kIgnoreNan: {
        const uint32_t m = BlockAmaxBits<S>(k_, in_, start, len, 0x7F800001u);
        return m == 0x7F800000u ? 0xFE : ScaleOf(m);
      }
      case NanPolicy::kIgnore: return ScaleOf(BlockAmaxBits<S>(k_, in_, start, len, 0x7F800000u));
    }
    return -1;  // not reached: every policy is a case
  }

  // An NVFP4 block (quantize.cc's QuantizeStrip is the definition): block-nan marks a block holding NaN or
  // Inf; otherwise the amax is of the finite elements, or Inf where ignore-nan meets an Inf.
  void Nvfp4Block(size_t b, size_t start, size_t len, uint32_t amax) {
    if (amax >= 0x7F800000u) {
      if (a_.policy == NanPolicy::kBlockNan) return FillBlock(b, start, len, 0x7F, a_.elem_nan);
      amax = BlockAmaxBits<S>(k_, in_, start, len, a_.policy == NanPolicy::kIgnoreNan ? 0x7F800001u : 0x7F800000u);
    }
    const uint8_t s8 = Nvfp4BlockScale(hd::F32FromBits(amax), a_.s_enc, Nvfp4Rule(a_));
    scales_[b] = s8;
    vmul_ = hn::Set(DF(), a_.mult[s8 & 0x7F]);
    ConvertElements(start, len);
  }

  // A block whose scale byte marks it (NaN): every element `fill`; SR words skipped, so that the stream
  // stays aligned with the element indices.
  void FillBlock(size_t b, size_t start, size_t len, uint8_t byte, uint32_t fill) {
    scales_[b] = byte;
    std::memset(codes_ + start, static_cast<int>(fill), len);
    if constexpr (kSr) {
      const size_t lanes = hn::Lanes(DU());
      for (size_t j = 0; j < len; j += lanes) (void)rw_.Take(start + j, len - j < lanes ? len - j : lanes);
    }
  }

  // The element scaling of an MX scale byte, unchanged while neighbouring blocks share the byte.
  void SetScale(int scale) {
    if (scale == lite_scale_) return;
    lite_scale_ = scale;
    if (exact_) {
      eoff_ = hn::Set(DI(), 127 - static_cast<int32_t>(scale));
      lite_ = MakeLite(k_, 127 - static_cast<int32_t>(scale));
    } else {
      vmul_ = hn::Set(DF(), ScaleInverse(a_.scaling, static_cast<uint32_t>(scale)));
    }
  }

  // count (at most Lanes) elements from `at` as FP32 bits: as they are (exact: eoff_ moves the exponent in
  // the conversion), or fl32(x * vmul_).
  HWY_INLINE VU Load(size_t at, size_t count) const {
    const DU du;
    const DF df;
    const VU x = count == hn::Lanes(du) ? LoadBits<S>(in_, at) : LoadBitsPartial<S>(in_, at, count);
    if (exact_) return x;
    const auto y = hn::Mul(hn::BitCast(df, x), vmul_);
    // te-rcp: the GPU's FMUL gives the canonical +NaN (mx_ref.cc).
    if (a_.scaling == ElementScaling::kTeRcp)
      return hn::BitCast(du, hn::IfThenElse(hn::IsNaN(y), hn::Set(df, hd::F32FromBits(0x7FFFFFFFu)), y));
    return hn::BitCast(du, y);
  }

  // A block's elements through the general tiers under the current scaling.
  void ConvertElements(size_t start, size_t len) {
    const size_t lanes = hn::Lanes(DU());
    for (size_t j = 0; j < len; j += lanes) {
      const size_t c = len - j < lanes ? len - j : lanes;
      const VU rb = kSr ? rw_.Take(start + j, c) : hn::Zero(DU());
      const VU code = ConvertAny<R>(k_, lite_, Load(start + j, c), eoff_, rb);
      if (c == lanes) StoreCodes(code, codes_ + start + j);
      else StoreCodesPartial(code, codes_ + start + j, c);
    }
  }

  const MxKernelArgs& a_;
  const Consts& k_;
  const void* in_;
  uint8_t* codes_;
  uint8_t* scales_;
  RandomWords& rw_;
  const bool exact_;
  int lite_scale_ = -1;
  VI eoff_;
  Lite lite_;
  VF vmul_;
};

// What the two passes of one MxLoop call share.
struct MxPass {
  const MxKernelArgs& a;
  const Consts& k;
  const Consts& ke;       // the NVFP4 scale's E4M3 conversion (k for MX)
  const void* in;
  size_t n, block;
  const uint32_t* given;  // the caller's block maxima, of unflushed |x|, or null
  uint8_t* scales;
};

// Batches of blocks (MxLoop): one bit per block says "general tiers", so a batch is at most 64 blocks.
constexpr size_t kBatch = 64;
static_assert(kBatch % kMaxLanes == 0 && kBatch <= 64, "whole vectors of block maxima; one bit per block");

// Pass 1 over the batch's first whole vectors of Lanes blocks (each block whole vectors too): the maxima
// (given, or AmaxOfBlocks), scale bytes (stored) and multipliers; a block whose maximum or product with the
// multiplier is not finite gets multiplier 0 and its bit in *general. Returns the blocks done.
template <DType S>
HWY_INLINE size_t FirstPassVectors(const MxPass& m, size_t b0, size_t nb, uint32_t* amaxes, float* mults,
                                   uint64_t* general) {
  const DU du;
  const DF df;
  const size_t lanes = hn::Lanes(du);
  const VU inf_bits = hn::Set(du, 0x7F800000u);
  size_t done = 0;
  for (; done + lanes <= nb && (b0 + done + lanes) * m.block <= m.n; done += lanes) {
    const VU amax = m.given != nullptr ? hn::LoadU(du, m.given + b0 + done)
                                       : AmaxOfBlocks<S>(m.in, (b0 + done) * m.block, m.block);
    VU byte, mult;
    if (m.a.nvfp4) {
      byte = Nvfp4BytesOf(m.a, m.ke, amax, &mult);
    } else {
      byte = ScaleBytesOf(m.a, amax);
      mult = ScaleMultipliersOf(m.a.scaling, byte);
    }
    const auto prod = hn::BitCast(du, hn::Mul(hn::BitCast(df, amax), hn::BitCast(df, mult)));
    const auto ok = hn::And(hn::Lt(amax, inf_bits), hn::Lt(prod, inf_bits));
    hn::StoreU(amax, du, amaxes + done);
    hn::StoreU(hn::BitCast(df, hn::IfThenElseZero(ok, mult)), df, mults + done);
    uint8_t mask_bits[8] = {};
    hn::StoreMaskBits(du, hn::Not(ok), mask_bits);
    uint64_t bits;
    std::memcpy(&bits, mask_bits, 8);
    *general |= bits << done;
    StoreCodes(byte, m.scales + b0 + done);  // a NaN/Inf block's byte is rewritten by GeneralBlocks
  }
  return done;
}

// Pass 1 over blocks done..nb of the batch one at a time, as FirstPassVectors; `fused`: whether the fused
// path can take any block (else every block is general).
template <DType S>
HWY_INLINE void FirstPassBlocks(const MxPass& m, bool fused, size_t b0, size_t done, size_t nb, uint32_t* amaxes,
                                float* mults, uint64_t* general) {
  for (size_t i = done; i < nb; ++i) {
    const size_t start = (b0 + i) * m.block;
    const size_t len = start + m.block <= m.n ? m.block : m.n - start;
    const uint32_t amax = m.given != nullptr ? m.given[b0 + i] : BlockAmaxBits<S>(m.k, m.in, start, len, 0xFFFFFFFFu);
    amaxes[i] = amax;
    mults[i] = 0.0f;
    if (fused && amax < 0x7F800000u) {
      const float amax_f = hd::F32FromBits(amax);
      int scale;
      float mult;
      if (m.a.nvfp4) {
        scale = Nvfp4BlockScale(amax_f, m.a.s_enc, Nvfp4Rule(m.a));
        mult = m.a.mult[scale & 0x7F];
      } else {
        scale = ScaleByteFromAmaxBits(amax, static_cast<int>(m.a.rule), m.a.destmax, m.a.emax, m.a.elem_man);
        mult = ScaleInverse(m.a.scaling, static_cast<uint32_t>(scale));  // exact: 2^(127 - scale)
      }
      m.scales[b0 + i] = static_cast<uint8_t>(scale);
      if (amax_f * mult <= std::numeric_limits<float>::max()) mults[i] = mult;
    }
    if (mults[i] == 0.0f) *general |= uint64_t{1} << i;
  }
}

// FusedBlocks' instance for the format's common case (satfinite with -0) and the store kind.
template <Rounding R, DType S>
HWY_INLINE void FusedRun(const FusedK& f, bool common, bool stream, const void* in, size_t block, size_t n, size_t b,
                         size_t count, const float* mults, uint8_t* codes, RandomWords* words, size_t ahead) {
  if (common && stream) FusedBlocks<R, S, true, true>(f, in, block, n, b, count, mults, codes, words, ahead);
  else if (common) FusedBlocks<R, S, true, false>(f, in, block, n, b, count, mults, codes, words, ahead);
  else if (stream) FusedBlocks<R, S, false, true>(f, in, block, n, b, count, mults, codes, words, ahead);
  else FusedBlocks<R, S, false, false>(f, in, block, n, b, count, mults, codes, words, ahead);
}

// MX (or NVFP4) blocks of a.block elements of in (n elements; the last block may be partial). Blocks go in
// batches of two passes, so that no element waits on its block's scale: pass 1 takes every block's amax (|x|
// bits: integer order is value order, NaN and Inf compare highest) and, for a finite block, its scale byte
// and element multiplier; pass 2 converts. The fused path multiplies a block's elements by 2^(127 - scale),
// exact wherever the product is an FP32 normal (Consts::InitFused covers the rest), or by the FP32
// multiplier of the element-scaling modes, then rounds them in one branch-free pass. Multiplier 0 sends a
// block to the general tiers (GeneralBlocks).
template <Rounding R, DType S>
void MxLoop(const MxKernelArgs& a, const void* in, size_t n, uint8_t* codes, uint8_t* scales, uint64_t seed,
            uint64_t first_index, const uint32_t* rbits) {
  const size_t lanes = hn::Lanes(DU());
  const Consts k(*a.p);
  const Consts ke(a.nvfp4 ? *a.p_e4m3 : *a.p);
  constexpr bool kSr = R == Rounding::kSrA || R == Rounding::kSrB || R == Rounding::kSrC;
  constexpr bool kFusable = R == Rounding::kRne || R == Rounding::kSrA;
  RandomWords rw(seed, first_index, rbits, kSr);
  RandomWords* words = kSr ? &rw : nullptr;
  GeneralBlocks<R, S> general_blocks(a, k, in, codes, scales, rw);
  const size_t block = static_cast<size_t>(a.block);
  const size_t nblocks = (n + block - 1) / block;
  const MxPass m{a, k, ke, in, n, block, k.flush_in ? nullptr : a.block_amax, scales};
  const bool fused = kFusable && k.fused;
  const bool common = k.fused && k.f.sat && k.f.neg_zero;
  // Pass 2 prefetches the next batch's source: pass 1 then finds it in cache, and the memory system stays
  // busy while pass 2 works from L1.
  const size_t ahead = kBatch * block * SrcSize<S>();
  alignas(64) uint32_t amaxes[kBatch];
  alignas(64) float mults[kBatch];
  for (size_t b0 = 0; b0 < nblocks; b0 += kBatch) {
    const size_t nb = std::min(kBatch, nblocks - b0);
    uint64_t general = 0;  // bit i: block b0 + i goes through the general tiers
    const size_t done = fused && block % lanes == 0 ? FirstPassVectors<S>(m, b0, nb, amaxes, mults, &general) : 0;
    FirstPassBlocks<S>(m, fused, b0, done, nb, amaxes, mults, &general);
    // Pass 2: runs of fused blocks, each ended by the next general block.
    for (size_t i = 0; i < nb;) {
      const size_t start = (b0 + i) * block;
      if ((general >> i) & 1) {
        general_blocks.Block(b0 + i, start, start + block <= n ? block : n - start, amaxes[i]);
        ++i;
        continue;
      }
      const uint64_t rest = general >> i;
      const size_t e = rest == 0 ? nb : std::min(nb, i + static_cast<size_t>(__builtin_ctzll(rest)));
      if constexpr (kFusable)
        FusedRun<R, S>(k.f, common, a.stream, in, block, n, b0 + i, e - i, mults + i, codes, words, ahead);
      i = e;
    }
  }
  if (a.stream) StreamFence();
}

// Whether ConvertScaledBlocksT takes conversions under p.
bool FusedRunsTakeT(const ConvertParams& p) { return FusedRunsTake(p); }

// FP32-scaled blocks (ConvertScaledBlocks): the fused runs, cached stores.
void ConvertScaledBlocksT(const ConvertParams& p, DType src, const void* in, size_t n, size_t block, const float* mults,
                          const uint8_t* take, uint8_t* codes, uint64_t seed, uint64_t first_index) {
  const Consts k(p);
  ByRneSrSource(src, p.rounding == Rounding::kSrA, [&](auto r, auto s) {
    FusedTakenBlocks<decltype(r)::value, decltype(s)::value, false>(k, in, n, block, mults, take, codes, seed, first_index);
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

namespace qmx::simd {
HWY_EXPORT(QuantizeMxBlocksT);
HWY_EXPORT(FusedRunsTakeT);
HWY_EXPORT(ConvertScaledBlocksT);
HWY_EXPORT(DequantizeMxBlocksT);

void QuantizeMxBlocks(const MxKernelArgs& a, DType src, const void* in, size_t n, uint8_t* codes, uint8_t* scales,
                      uint64_t seed, uint64_t first_index, const uint32_t* rbits) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(QuantizeMxBlocksT)(a, src, in, n, codes, scales, seed, first_index, rbits);
}
bool ScaledBlocksTake(const ConvertParams& p) { return HWY_DYNAMIC_DISPATCH(FusedRunsTakeT)(p); }
void ConvertScaledBlocks(const ConvertParams& p, DType src, const void* in, size_t n, size_t block, const float* mults,
                         const uint8_t* take, uint8_t* codes, uint64_t seed, uint64_t first_index) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(ConvertScaledBlocksT)(p, src, in, n, block, mults, take, codes, seed, first_index);
}
void DequantizeMxBlocks(const float* table, int block, const uint8_t* codes, const uint8_t* scales, size_t n,
                        float* out) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(DequantizeMxBlocksT)(table, block, codes, scales, n, out);
}
}  // namespace qmx::simd
#endif  // HWY_ONCE
