// nvfp4_strip_simd.cc: Highway kernel for NVFP4 blocks of several rows (16x16 and other 2-D blocks: one E4M3
// scale per block, under the FP32 tensor scale), each row's blocks in one fused stream; blocks holding NaN, Inf
// or an overflowing product go through QuantizeMxBlocks. tests/quantize/test_mx.cc checks every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quantize/nvfp4_strip_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "quantize/mx_blocks-inl.h"
#include "quantize/mx_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace qmx::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ------------------------------------------------------------------ NVFP4 blocks of several rows

// Whether Nvfp4StripLoop takes these arguments: the fused runs' tier, and whole vectors per block row.
bool Nvfp4StripTakesT(const MxKernelArgs& a) {
  return a.nvfp4 && FusedRunsTake(*a.p) && a.block > 0 && static_cast<size_t>(a.block) % hn::Lanes(DU()) == 0;
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
    QuantizeMxBlocks(one, S, x.data(), len, out.data(), scales + j, seed, 0, kSr ? rb.data() : nullptr);
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

}  // namespace HWY_NAMESPACE
}  // namespace qmx::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "fp_env.h"

namespace qmx::simd {
HWY_EXPORT(Nvfp4StripTakesT);
HWY_EXPORT(QuantizeNvfp4StripT);

bool Nvfp4StripTakes(const MxKernelArgs& a) { return HWY_DYNAMIC_DISPATCH(Nvfp4StripTakesT)(a); }
void QuantizeNvfp4Strip(const MxKernelArgs& a, DType src, const void* in, size_t h, size_t cols, uint8_t* codes,
                        uint8_t* scales, uint64_t seed, uint64_t first_index) {
  const detail::ScopedDefaultFpEnv fp_env;
  HWY_DYNAMIC_DISPATCH(QuantizeNvfp4StripT)(a, src, in, h, cols, codes, scales, seed, first_index);
}
}  // namespace qmx::simd
#endif  // HWY_ONCE
