// engine_quantize.cu: qmx::Quantize on the device, block by block as the reference quantizer
// (lib/src/quantize/quantize_ref.cc) defines it: the tensor amax (and each line's, row-scaled), then one warp
// per block of the scale grid. UE8M0 blocks run QuantizeMxRef's steps (engine_blocks.cuh); FP32 and NVFP4
// (E4M3) blocks take their scale from the library's own scale functions (lib/src/scale/scale_core.h) and
// round fl32(x * multiplier) by the reference routine (lib/src/round/round_core.h).
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "engine_blocks.cuh"
#include "engine_internal.h"
#include "gpu_internal.h"
#include "qmx/error.h"
#include "qmx/gpu.h"
#include "qmx/quantize.h"
#include "quantize/quantize_internal.h"
#include "scale/scale_core.h"

namespace qmx::gpu {
namespace {

using detail::Fp32Fields;
using detail::LoadBits;
using detail::MxArgs;
using detail::MxBlockAt;
using detail::BucketCode;
using detail::StepCode;
using detail::StepTable;

// E4M3's fields, a compile-time constant in device code (NVFP4's block scales).
__host__ __device__ constexpr Format E4m3Fields() { return {"e4m3", 4, 3, 7, true, Encoding::kFnNan}; }
static_assert(E4m3Fields() == fmt::kE4M3, "E4M3's fields");

// |x| as FP32 bits of source element i (fp32, bf16 or fp16: every value exact in FP32).
template <typename Word>
__device__ __forceinline__ uint32_t MagnitudeBits(const Format& src_fmt, const void* src, uint64_t i) {
  const uint64_t bits = LoadBits<Word>(src, i);
  if (sizeof(Word) == 4) return static_cast<uint32_t>(bits) & 0x7FFFFFFFu;
  if (src_fmt.man_bits == 7) return (static_cast<uint32_t>(bits) << 16) & 0x7FFFFFFFu;  // bf16
  const ExactValue x = qmx::detail::ReadExactCore(src_fmt, bits);                        // fp16
  if (x.kind == ExactValue::Kind::kNan) return 0x7FC00000u;
  if (x.kind == ExactValue::Kind::kInf) return 0x7F800000u;
  if (x.kind == ExactValue::Kind::kZero) return 0;
  return hd::F32Bits(ldexpf(static_cast<float>(x.sig), x.exp));
}

// The signed FP32 value of source element i.
template <typename Word>
__device__ __forceinline__ float SourceValue(const Format& src_fmt, const void* src, uint64_t i) {
  const uint64_t bits = LoadBits<Word>(src, i);
  if (sizeof(Word) == 4) return hd::F32FromBits(static_cast<uint32_t>(bits));
  if (src_fmt.man_bits == 7) return hd::F32FromBits(static_cast<uint32_t>(bits) << 16);
  const uint32_t mag = MagnitudeBits<Word>(src_fmt, src, i);
  return hd::F32FromBits(mag | ((static_cast<uint32_t>(bits) & 0x8000u) << 16));
}

// Line l of `lines` (rows, or columns with by_col) of a rows x cols tensor: out[l] = the maximum of its |x|
// bits below `limit` (TensorAmax: NaN skipped, Inf kept where limit is above Inf's bits). lines = 1 with
// len = rows * cols gives the tensor's. One thread block per line.
template <typename Word>
__global__ void LineAmaxKernel(Format src_fmt, const void* src, uint64_t cols, uint64_t len, bool by_col, uint32_t limit,
                               unsigned int* out) {
  const uint64_t l = blockIdx.y;
  uint32_t m = 0;
  for (uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; t < len;
       t += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t i = by_col ? t * cols + l : l * len + t;
    const uint32_t a = MagnitudeBits<Word>(src_fmt, src, i);
    if (a < limit && a > m) m = a;
  }
  m = __reduce_max_sync(0xFFFFFFFFu, m);
  if (threadIdx.x % 32 == 0 && m > 0) atomicMax(out + l, m);
}

// The tensor's amax as LineAmaxKernel takes it (lines = 1), FP32 or BF16 at 16-byte alignment: 16-byte
// loads, so that enough bytes are in flight to reach the GPU's bandwidth; the tail past the last whole load
// by thread 0 of block 0.
template <typename Word>
__global__ void TensorAmaxKernel(const void* src, uint64_t n, uint32_t limit, unsigned int* out) {
  constexpr uint64_t kPer = 16 / sizeof(Word);
  const uint64_t vecs = n / kPer;
  uint32_t m = 0;
  const auto take = [&](uint32_t bits) {  // FP32 bits of an element
    const uint32_t a = bits & 0x7FFFFFFFu;
    if (a < limit && a > m) m = a;
  };
  for (uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; t < vecs;
       t += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint4 p = __ldg(static_cast<const uint4*>(src) + t);
    for (uint32_t w : {p.x, p.y, p.z, p.w}) {
      if (sizeof(Word) == 4) {
        take(w);
      } else {
        take(w << 16);
        take(w & 0xFFFF0000u);
      }
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0)
    for (uint64_t i = vecs * kPer; i < n; ++i) take(sizeof(Word) == 4 ? static_cast<uint32_t>(LoadBits<Word>(src, i))
                                                                    : static_cast<uint32_t>(LoadBits<Word>(src, i)) << 16);
  m = __reduce_max_sync(0xFFFFFFFFu, m);
  if (threadIdx.x % 32 == 0 && m > 0) atomicMax(out, m);
}

struct BlockArgs {
  Format src_fmt, elem;
  CastOptions cast;
  uint64_t rows, cols, block_rows, block_cols, scale_cols, blocks;
  ScaleRule rule;
  NanPolicy nan;
  int margin;
  float destmax;
  ScaleFormat scale_format;
  bool row_scaled, by_col;
  float s_enc;               // the tensor's NVFP4 S_enc (not row-scaled)
  const float* line_enc;     // row-scaled: each line's S_enc
  uint8_t block_nan_code;    // BlockNanCode(elem)
  const StepTable* steps;    // deterministic roundings: the FP32 -> elem table (engine_blocks.cuh), else null
  const StepTable* scale_steps;  // NVFP4: the FP32 -> E4M3 RNE table of the block scales
  const uint32_t* buckets;       // the element conversion's bucket table (engine_blocks.cuh), or null
  const uint32_t* scale_buckets;  // NVFP4: the block scales' bucket table, or null
  uint8_t mx_nan_code, mx_block_nan_code;  // UE8M0 blocks: MxBlockAt's nan_code and block_nan_code
  uint64_t seed;
  MxArgs mx;                 // UE8M0 blocks
  int hw_fp8;                // 1 E4M3, 2 E5M2 where the element conversion is cvt.rn.satfinite's (HwFp8Kind), else 0
  bool hw_scale;             // NVFP4's E4M3 block scales by the hardware's conversions (sm_89 and later)
};

// The maximum (any) over the kGroup lanes of the calling lane's group (aligned groups of 16 or 32 lanes); every
// lane of the warp calls it.
template <int kGroup>
__device__ __forceinline__ uint32_t GroupMax(uint32_t v) {
  if constexpr (kGroup == 32) {
    return __reduce_max_sync(0xFFFFFFFFu, v);
  } else {
    for (int o = kGroup / 2; o > 0; o >>= 1) {
      const uint32_t u = __shfl_xor_sync(0xFFFFFFFFu, v, o);
      v = u > v ? u : v;
    }
    return v;
  }
}
template <int kGroup>
__device__ __forceinline__ bool GroupAny(bool v) {
  return GroupMax<kGroup>(v ? 1u : 0u) != 0;
}

// An FP8 code by the hardware's conversion (cvt.rn.satfinite.{e4m3,e5m2}x2.f32 on sm_89 and later): kind 1
// E4M3, 2 E5M2. For finite inputs it is ConvertToCodes under RNE with saturation to the largest finite value
// (all 2^32 FP32 inputs, xval --conversions --exhaustive), so the row kernel takes it wherever the element
// conversion is exactly that (HwFp8Kind) instead of the bucket table's dependent load.
__device__ __forceinline__ uint8_t HwFp8(float y, int kind) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(y, __NV_SATFINITE, kind == 1 ? __NV_E4M3 : __NV_E5M2));
}

// E4m3ValueCore by the hardware's exact E4M3 -> FP16 conversion (NaN bytes: the quiet +NaN, as it gives).
__device__ __forceinline__ float HwE4m3Value(uint8_t byte) {
  if ((byte & 0x7F) == 0x7F) return __int_as_float(0x7FC00000);
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(byte, __NV_E4M3)));
}

// Block b's scale (FP32 or NVFP4's E4M3) from its finite elements' amax bits and whether it holds NaN or Inf.
__device__ __forceinline__ qmx::detail::MultiplyScale BlockScale(const BlockArgs& a, uint64_t b, uint32_t amax,
                                                                 bool has_nan, bool has_inf) {
  float block_amax = hd::F32FromBits(amax);
  if (has_inf && a.nan == NanPolicy::kIgnoreNan) block_amax = HUGE_VALF;
  const float s_enc = a.row_scaled ? a.line_enc[a.by_col ? b % a.scale_cols : b / a.scale_cols] : a.s_enc;
  if (a.hw_scale && !((has_nan || has_inf) && a.nan == NanPolicy::kBlockNan)) {
    // BlockMultiplyScaleWith's E4M3 steps with both conversions by the hardware (HwFp8: the default
    // CastOptions' RNE with saturation, which the table holds; HwE4m3Value: E4m3ValueCore).
    const uint8_t s8 = HwFp8(qmx::detail::Nvfp4BlockScaleValueCore(block_amax, s_enc, a.rule), 1);
    return {s8, qmx::detail::Nvfp4EncodeFactorCore(HwE4m3Value(s8), s_enc, a.rule), false};
  }
  // NVFP4's E4M3 scale byte from the RNE step table where there is one (the same function as the routine).
  const StepTable* scale_steps = a.scale_steps;
  const uint32_t* scale_buckets = a.scale_buckets;
  const auto to_e4m3 = [scale_steps, scale_buckets](float v) {
    return scale_buckets != nullptr ? BucketCode(scale_buckets, hd::F32Bits(v))
           : scale_steps != nullptr ? StepCode(scale_steps, hd::F32Bits(v))
                                    : qmx::detail::ToE4m3ByRoutine{Fp32Fields(), E4m3Fields()}(v);
  };
  return qmx::detail::BlockMultiplyScaleWith(a.rule, a.nan, a.margin, a.destmax, block_amax, has_nan, has_inf, s_enc,
                                             E4m3Fields(), to_e4m3);
}

// Element i's code in a block of scale ms.
template <typename Word>
__device__ __forceinline__ uint8_t ElementCode(const void* src, const BlockArgs& a, const Format& elem,
                                               const qmx::detail::MultiplyScale& ms, uint64_t i) {
  if (ms.nan_block) return a.block_nan_code;
  // fl32(x * multiplier): the double product of two FP32 values is exact, one rounding to FP32. NaNs as the
  // CPU's multiply makes them (the GPU's would be its canonical +NaN): a NaN operand propagates, quieted;
  // Inf x 0 gives x86's default NaN, negative.
  const float xv = SourceValue<Word>(a.src_fmt, src, i);
  uint32_t y;
  if (xv != xv) {
    y = hd::F32Bits(xv) | 0x00400000u;
  } else {
    const double p = static_cast<double>(xv) * static_cast<double>(ms.multiplier);
    y = p != p ? 0xFFC00000u : hd::F32Bits(static_cast<float>(p));
  }
  if (a.buckets != nullptr) return BucketCode(a.buckets, y);
  if (a.steps != nullptr) return StepCode(a.steps, y);
  const uint32_t r = qmx::detail::IsStochasticCore(a.cast.rounding) ? RandomBitsForElement(a.seed, i) : 0u;
  constexpr Format kF32 = Fp32Fields();
  return static_cast<uint8_t>(qmx::detail::ConvertCore(kF32, y, elem, a.cast, r).code);
}

// Large blocks (FP8 per-tensor, 128 x 128) in three passes instead of one warp per block: each block's amax and
// NaN / Inf flags by many thread blocks (a maximum and an or: any order gives the same), its scale by one thread,
// then every element by its own thread. The same functions as the warp path, so the same bits.
__device__ __forceinline__ uint64_t BlockElementIndex(const BlockArgs& a, uint64_t b, uint64_t t, uint64_t& count) {
  const uint64_t br = b / a.scale_cols, bc = b - br * a.scale_cols;
  const uint64_t r0 = br * a.block_rows, c0 = bc * a.block_cols;
  const uint64_t h = r0 + a.block_rows < a.rows ? a.block_rows : a.rows - r0;
  const uint64_t w = c0 + a.block_cols < a.cols ? a.block_cols : a.cols - c0;
  count = h * w;
  return (r0 + t / w) * a.cols + c0 + t % w;
}
template <typename Word>
__global__ void BlockStatsKernel(const void* src, BlockArgs a, unsigned int* amax, unsigned int* flags) {
  for (uint64_t b = blockIdx.y; b < a.blocks; b += gridDim.y) {
    uint64_t count = 0;
    BlockElementIndex(a, b, 0, count);
    uint32_t m = 0, f = 0;
    for (uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; t < count;
         t += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
      uint64_t unused;
      const uint32_t v = MagnitudeBits<Word>(a.src_fmt, src, BlockElementIndex(a, b, t, unused));
      f |= v > 0x7F800000u ? 1u : v == 0x7F800000u ? 2u : 0u;
      if (v < 0x7F800000u && v > m) m = v;
    }
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    f = __reduce_or_sync(0xFFFFFFFFu, f);
    if (threadIdx.x % 32 == 0 && m > 0) atomicMax(amax + b, m);
    if (threadIdx.x % 32 == 0 && f != 0) atomicOr(flags + b, f);
  }
}
__global__ void BlockScalesKernel(BlockArgs a, const unsigned int* amax, const unsigned int* flags,
                                  qmx::detail::MultiplyScale* ms, uint8_t* scales) {
  for (uint64_t b = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; b < a.blocks;
       b += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    ms[b] = BlockScale(a, b, amax[b], (flags[b] & 1u) != 0, (flags[b] & 2u) != 0);
    qmx::detail::StoreScaleCore(a.scale_format, scales, b, ms[b].stored, ms[b].nan_block);
  }
}
template <typename Word>
__global__ void __launch_bounds__(256, 4) BlockElementsKernel(const void* src, BlockArgs a, Format elem,
                                                              const qmx::detail::MultiplyScale* ms, uint8_t* codes) {
  const uint64_t n = a.rows * a.cols;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = i / a.cols, c = i - r * a.cols;
    codes[i] =
        ElementCode<Word>(src, a, elem, ms[detail::ScaleIndex(r, c, a.block_rows, a.block_cols, a.scale_cols)], i);
  }
}

// Block b of `count` elements, the t-th at flat index at(t), on kGroup lanes (every lane of the warp calls it;
// a lane group past the last block comes with count 0).
template <int kGroup, typename Word, typename At>
__device__ __forceinline__ void QuantizeBlockAt(const void* src, const BlockArgs& a, const Format& elem, uint64_t b,
                                                uint64_t count, At at, uint8_t* codes, uint8_t* scales) {
  if (kGroup == 32 && a.scale_format == ScaleFormat::kUe8m0) {
    MxBlockAt<Word>(src, count, at, a.mx, elem, codes, scales + b);
    return;
  }
  const int lane = threadIdx.x % kGroup;
  // FP32 / NVFP4: the finite elements' amax (a maximum of FP32 values: exact, in any order), NaN and Inf seen.
  uint32_t amax = 0;
  bool has_nan = false, has_inf = false;
  for (uint64_t t = lane; t < count; t += kGroup) {
    const uint32_t m = MagnitudeBits<Word>(a.src_fmt, src, at(t));
    has_nan |= m > 0x7F800000u;
    has_inf |= m == 0x7F800000u;
    if (m < 0x7F800000u && m > amax) amax = m;
  }
  amax = GroupMax<kGroup>(amax);
  has_nan = GroupAny<kGroup>(has_nan);
  has_inf = GroupAny<kGroup>(has_inf);
  if (count == 0) return;
  const qmx::detail::MultiplyScale ms = BlockScale(a, b, amax, has_nan, has_inf);
  if (lane == 0) qmx::detail::StoreScaleCore(a.scale_format, scales, b, ms.stored, ms.nan_block);
  for (uint64_t t = lane; t < count; t += kGroup) {
    const uint64_t i = at(t);
    codes[i] = ElementCode<Word>(src, a, elem, ms, i);
  }
}

// Block (br, bc) of the scale grid on kGroup lanes: its elements row-major, t-th at (r0 + t / w, c0 + t % w)
// (a block's extents are at most 65536, so t fits 32 bits); a block of one row reads consecutive elements.
// Grid-stride over the blocks, a warp taking 32 / kGroup consecutive blocks at a time; its lanes stay
// together (blockDim.x is a multiple of 32), those past the last block with an empty block.
template <int kGroup, typename Word>
__device__ __forceinline__ void QuantizeBlocksOf(const void* src, const BlockArgs& a, const Format& elem,
                                                 uint8_t* codes, uint8_t* scales) {
  constexpr uint64_t kPerWarp = 32 / kGroup;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * blockDim.x / 32;
  const uint64_t sub = (threadIdx.x % 32) / kGroup;
  for (uint64_t w0 = (blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x) / 32 * kPerWarp; w0 < a.blocks;
       w0 += warps * kPerWarp) {
    const uint64_t b = w0 + sub;
    if (b >= a.blocks) {
      QuantizeBlockAt<kGroup, Word>(src, a, elem, a.blocks, 0, [](uint64_t t) { return t; }, codes, scales);
      continue;
    }
    const uint64_t br = b / a.scale_cols, bc = b - br * a.scale_cols;
    const uint64_t r0 = br * a.block_rows, c0 = bc * a.block_cols;
    const uint64_t h = r0 + a.block_rows < a.rows ? a.block_rows : a.rows - r0;
    const uint32_t w = static_cast<uint32_t>(c0 + a.block_cols < a.cols ? a.block_cols : a.cols - c0);
    const uint64_t first = r0 * a.cols + c0, cols = a.cols;
    if (h == 1) {
      QuantizeBlockAt<kGroup, Word>(src, a, elem, b, w, [=](uint64_t t) { return first + t; }, codes, scales);
      continue;
    }
    QuantizeBlockAt<kGroup, Word>(src, a, elem, b, h * w, [=](uint64_t t) {
      const uint32_t q = static_cast<uint32_t>(t) / w;
      return first + q * cols + (static_cast<uint32_t>(t) - q * w);
    }, codes, scales);
  }
}

// Blocks of 16 elements or fewer under FP32 or E4M3 scales (NVFP4's 1x16) take half a warp each.
template <typename Word>
__device__ __forceinline__ void QuantizeBlock(const void* src, const BlockArgs& a, const Format& elem, uint8_t* codes,
                                              uint8_t* scales) {
  if (a.scale_format != ScaleFormat::kUe8m0 && a.block_rows * a.block_cols <= 16) QuantizeBlocksOf<16, Word>(src, a, elem, codes, scales);
  else QuantizeBlocksOf<32, Word>(src, a, elem, codes, scales);
}

// Row blocks of 8 * kLanes elements (1 x 16 ... 1 x 128) in a tensor whose rows are whole blocks, FP32 or BF16
// at 16-byte alignment, under a deterministic rounding with a bucket table: the tensor is a flat run of
// blocks, and each lane takes 8 consecutive elements in 16-byte loads, kLanes lanes a block (a warp reads
// 1 KiB of FP32 at once: the single-element warp path keeps too few bytes in flight to reach the GPU's
// bandwidth). Every value is the warp path's: the same amax (a maximum), the same scale functions, and each
// element's code from the bucket table (or HwFp8) where the FP32 input of the conversion is formed exactly as
// the reference forms it (V_i / X when the FP32 multiply by 2^-k is exact; fl32(x * multiplier), one FP32
// multiply being one rounding of the exact product); NaN and Inf inputs, and inexact V_i / X, take the
// reference routine itself (RowChunkSlow).

// 2^e as FP32 for e in [-149, 128] (2^128: Inf), from its bits.
__device__ __forceinline__ float Pow2f(int e) {
  if (e >= 128) return HUGE_VALF;
  return hd::F32FromBits(e >= -126 ? static_cast<uint32_t>(e + 127) << 23 : 1u << (e + 149));
}

template <typename Word>
__device__ __forceinline__ void LoadChunk(const void* src, uint64_t c, uint32_t (&v)[8]) {
  if constexpr (sizeof(Word) == 4) {
    const uint4 p = __ldg(static_cast<const uint4*>(src) + 2 * c), q = __ldg(static_cast<const uint4*>(src) + 2 * c + 1);
    v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w, v[4] = q.x, v[5] = q.y, v[6] = q.z, v[7] = q.w;
  } else {
    const uint4 p = __ldg(static_cast<const uint4*>(src) + c);
    const uint32_t w[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = w[j] << 16;
      v[2 * j + 1] = w[j] & 0xFFFF0000u;
    }
  }
}

// A chunk's codes element by element, for blocks the fast path of RowChunk does not take (NaN or Inf
// elements, fills, inexact V_i / X): out of line, so that the reference routine's calls do not spill the fast
// path's registers.
template <typename Word>
__device__ __noinline__ uint2 RowChunkSlow(const void* src, const BlockArgs& a, uint64_t first, uint4 lo, uint4 hi,
                                           int scale, int fill, float mult, float up,
                                           qmx::detail::MultiplyScale ms) {
  const uint32_t v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const int hw = a.hw_fp8;
  uint8_t out[8];
  if (a.scale_format == ScaleFormat::kUe8m0) {
    const bool exact = a.mx.scaling == ElementScaling::kExact;
    for (int j = 0; j < 8; ++j) {
      const float x = hd::F32FromBits(v[j]);
      const float y = x * mult;
      if (fill >= 0) out[j] = static_cast<uint8_t>(fill);
      else if (isfinite(x) && (!exact || y * up == x)) out[j] = hw ? HwFp8(y, hw) : BucketCode(a.mx.buckets, hd::F32Bits(y));
      else out[j] = detail::MxElementCode<Word>(src, first + j, a.mx, a.elem, scale);
    }
  } else {
    for (int j = 0; j < 8; ++j) {
      const float x = hd::F32FromBits(v[j]);
      const float y = x * ms.multiplier;
      if (ms.nan_block) out[j] = a.block_nan_code;
      else if (isfinite(x) && isfinite(y) && hw) out[j] = HwFp8(y, hw);
      else if (isfinite(x) && y == y) out[j] = BucketCode(a.buckets, hd::F32Bits(y));
      else out[j] = ElementCode<Word>(src, a, a.elem, ms, first + j);
    }
  }
  return make_uint2(out[0] | out[1] << 8 | out[2] << 16 | static_cast<uint32_t>(out[3]) << 24,
                    out[4] | out[5] << 8 | out[6] << 16 | static_cast<uint32_t>(out[7]) << 24);
}

// Two codes by HwFp8 in one conversion (cvt ...x2), y0 in the low byte.
__device__ __forceinline__ uint32_t HwFp8x2(float y0, float y1, int kind) {
  return __nv_cvt_float2_to_fp8x2(make_float2(y0, y1), __NV_SATFINITE, kind == 1 ? __NV_E4M3 : __NV_E5M2);
}

// One chunk of the row-block kernel: 8 elements of lane `lane`, chunk c (in says whether it is in the tensor;
// the reductions run on every lane). A block of finite elements whose scaled values are formed exactly takes
// the fast path: HwFp8 two at a time, or the bucket table; any other block RowChunkSlow.
template <typename Word, int kLanes>
__device__ __forceinline__ void RowChunk(const void* src, const BlockArgs& a, uint64_t c, bool in, const uint32_t (&v)[8],
                                         int lane, uint8_t* codes, uint8_t* scales) {
  uint32_t amax = 0, flags = 0;  // flags: 1 NaN, 2 Inf
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t m = v[j] & 0x7FFFFFFFu;
    flags |= m > 0x7F800000u ? 1u : m == 0x7F800000u ? 2u : 0u;
    if (m < 0x7F800000u && m > amax) amax = m;
  }
#pragma unroll
  for (int o = 1; o < kLanes; o <<= 1) {
    amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    flags |= __shfl_xor_sync(0xFFFFFFFFu, flags, o);
  }
  if (!in) return;
  const uint64_t b = c / kLanes, first = 8 * c;
  const bool has_nan = (flags & 1u) != 0, has_inf = (flags & 2u) != 0;
  const int hw = a.hw_fp8;
  float y[8];
  bool fast = !has_nan && !has_inf;  // every x finite
  int scale = 0, fill = -1;
  float mult = 0.0f, up = 0.0f;
  qmx::detail::MultiplyScale ms{0, 0.0f, false};
  if (a.scale_format == ScaleFormat::kUe8m0) {
    const MxArgs& m = a.mx;
    qmx::detail::MxPolicyScale(m.policy, has_nan, has_inf,
                               hd::ScaleByteFromAmaxBits(amax, static_cast<int>(m.rule), m.destmax, m.emax,
                                                         a.elem.man_bits),
                               a.mx_nan_code, a.mx_block_nan_code, &scale, &fill);
    if (lane % kLanes == 0) scales[b] = static_cast<uint8_t>(scale);
    const int k = scale - 127;
    const bool te = m.scaling == ElementScaling::kTeRcp, exact = m.scaling == ElementScaling::kExact;
    up = Pow2f(k);
    mult = te && scale == 0 ? 1.0f : te && scale == 254 ? 0.0f : Pow2f(-k);
    fast = fast && fill < 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float x = hd::F32FromBits(v[j]);
      y[j] = x * mult;
      if (exact) fast = fast && y[j] * up == x;  // V_i / X is exact unless it is an FP32 subnormal with bits lost
    }
  } else {
    ms = BlockScale(a, b, amax, has_nan, has_inf);
    if (lane % kLanes == 0) qmx::detail::StoreScaleCore(a.scale_format, scales, b, ms.stored, ms.nan_block);
    fast = fast && !ms.nan_block;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      y[j] = hd::F32FromBits(v[j]) * ms.multiplier;
      fast = fast && isfinite(y[j]);  // HwFp8 and the table alike; an overflow or 0 x Inf goes the slow way
    }
  }
  uint2 packed;
  if (!fast) {
    packed = RowChunkSlow<Word>(src, a, first, make_uint4(v[0], v[1], v[2], v[3]), make_uint4(v[4], v[5], v[6], v[7]),
                                scale, fill, mult, up, ms);
  } else if (hw) {
    packed.x = HwFp8x2(y[0], y[1], hw) | HwFp8x2(y[2], y[3], hw) << 16;
    packed.y = HwFp8x2(y[4], y[5], hw) | HwFp8x2(y[6], y[7], hw) << 16;
  } else {
    const uint32_t* buckets = a.scale_format == ScaleFormat::kUe8m0 ? a.mx.buckets : a.buckets;
    uint8_t out[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = BucketCode(buckets, hd::F32Bits(y[j]));
    packed.x = out[0] | out[1] << 8 | out[2] << 16 | static_cast<uint32_t>(out[3]) << 24;
    packed.y = out[4] | out[5] << 8 | out[6] << 16 | static_cast<uint32_t>(out[7]) << 24;
  }
  reinterpret_cast<uint2*>(codes)[c] = packed;
}

// Two chunks a lane per pass, both loaded before either is converted: 64 bytes of FP32 in flight per thread
// (one chunk alone left the kernel short of the GPU's bandwidth).
template <typename Word, int kLanes>
__global__ void __launch_bounds__(256) QuantizeRowBlocksKernel(const void* src, BlockArgs a, uint64_t chunks,
                                                               uint8_t* codes, uint8_t* scales) {
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * blockDim.x / 32;
  const int lane = threadIdx.x % 32;
  // chunks is a multiple of kLanes: a block's lanes are all in or all out.
  for (uint64_t w = (blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x) / 32; w * 32 < chunks; w += 2 * warps) {
    const uint64_t c0 = w * 32 + lane, c1 = (w + warps) * 32 + lane;
    const bool in0 = c0 < chunks, in1 = c1 < chunks;
    uint32_t v0[8] = {}, v1[8] = {};
    if (in0) LoadChunk<Word>(src, c0, v0);
    if (in1) LoadChunk<Word>(src, c1, v1);
    RowChunk<Word, kLanes>(src, a, c0, in0, v0, lane, codes, scales);
    RowChunk<Word, kLanes>(src, a, c1, in1, v1, lane, codes, scales);
  }
}

// MX blocks (UE8M0 scales) of E4M3 or E5M2 elements converted by the hardware (HwFp8Kind: RNE, saturating,
// subnormals kept): the row kernel's layout with less work an element, for the MXFP8 recipes.
// - One maximum an element: the amax of the elements' magnitude bits, NaN and Inf included (their bits lie
//   above every finite one). A block holds NaN or Inf exactly where that amax is 0x7F800000 or more; a warp
//   meeting such a block runs RowChunk on both of its chunks (MxHwPair), every other block is finite.
// - No check that V_i / X is exact: fl32(x * 2^-k) differs from the exact quotient only where that quotient
//   is below 2^-126 in magnitude (a product with a power of two loses bits only as an FP32 subnormal). There
//   both lie far below half E5M2's smallest subnormal (2^-17), and RNE gives each the zero of x's sign.
// - The hardware kind is a template parameter, and no branch serves other scale formats.
template <int kLanes>
__device__ __forceinline__ uint32_t MagnitudeAmax(const uint32_t (&v)[8]) {
  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) m = max(m, v[j] & 0x7FFFFFFFu);
  return GroupMax<kLanes>(m);
}

template <int kLanes, int kHw>
__device__ __forceinline__ void MxHwChunk(const BlockArgs& a, uint64_t c, const uint32_t (&v)[8], uint32_t amax,
                                          int lane, uint8_t* codes, uint8_t* scales) {
  const MxArgs& m = a.mx;
  const int scale = hd::ScaleByteFromAmaxBits(amax, static_cast<int>(m.rule), m.destmax, m.emax, a.elem.man_bits);
  if (lane % kLanes == 0) scales[c / kLanes] = static_cast<uint8_t>(scale);
  // (the block's amax is finite here, so the rule's byte is at most 254)
  const float mult = hd::ScaleMultiplier(static_cast<uint8_t>(scale), m.scaling == ElementScaling::kTeRcp);
  float y[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) y[j] = hd::F32FromBits(v[j]) * mult;
  uint2 packed;
  packed.x = HwFp8x2(y[0], y[1], kHw) | HwFp8x2(y[2], y[3], kHw) << 16;
  packed.y = HwFp8x2(y[4], y[5], kHw) | HwFp8x2(y[6], y[7], kHw) << 16;
  reinterpret_cast<uint2*>(codes)[c] = packed;
}

// Both chunks of a warp that met NaN or Inf, on the general path; out of line, so that its registers are not
// the lean path's.
template <typename Word, int kLanes>
__device__ __noinline__ void MxHwPair(const void* src, const BlockArgs& a, uint64_t c0, bool in0, uint64_t c1, bool in1,
                                      uint4 v0lo, uint4 v0hi, uint4 v1lo, uint4 v1hi, int lane, uint8_t* codes,
                                      uint8_t* scales) {
  const uint32_t v0[8] = {v0lo.x, v0lo.y, v0lo.z, v0lo.w, v0hi.x, v0hi.y, v0hi.z, v0hi.w};
  const uint32_t v1[8] = {v1lo.x, v1lo.y, v1lo.z, v1lo.w, v1hi.x, v1hi.y, v1hi.z, v1hi.w};
  RowChunk<Word, kLanes>(src, a, c0, in0, v0, lane, codes, scales);
  RowChunk<Word, kLanes>(src, a, c1, in1, v1, lane, codes, scales);
}

// Six blocks an SM (40 registers; the out-of-line general path spills around its call only).
template <typename Word, int kLanes, int kHw>
__global__ void __launch_bounds__(256, 6)
    MxHwRowBlocksKernel(const void* src, BlockArgs a, uint64_t chunks, uint8_t* codes, uint8_t* scales) {
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * blockDim.x / 32;
  const int lane = threadIdx.x % 32;
  for (uint64_t w = (blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x) / 32; w * 32 < chunks;
       w += 2 * warps) {
    const uint64_t c0 = w * 32 + lane, c1 = (w + warps) * 32 + lane;
    const bool in0 = c0 < chunks, in1 = c1 < chunks;
    uint32_t v0[8] = {}, v1[8] = {};
    if (in0) LoadChunk<Word>(src, c0, v0);
    if (in1) LoadChunk<Word>(src, c1, v1);
    const uint32_t m0 = MagnitudeAmax<kLanes>(v0), m1 = MagnitudeAmax<kLanes>(v1);
    if (__any_sync(0xFFFFFFFFu, max(m0, m1) >= 0x7F800000u)) {
      MxHwPair<Word, kLanes>(src, a, c0, in0, c1, in1, make_uint4(v0[0], v0[1], v0[2], v0[3]),
                             make_uint4(v0[4], v0[5], v0[6], v0[7]), make_uint4(v1[0], v1[1], v1[2], v1[3]),
                             make_uint4(v1[4], v1[5], v1[6], v1[7]), lane, codes, scales);
      continue;
    }
    if (in0) MxHwChunk<kLanes, kHw>(a, c0, v0, m0, lane, codes, scales);
    if (in1) MxHwChunk<kLanes, kHw>(a, c1, v1, m1, lane, codes, scales);
  }
}

// HwFp8's kind for an element conversion, or 0: E4M3 or E5M2 under RNE, saturating finite values, keeping
// subnormals (the options of the exhaustive check), on a GPU with the instruction (sm_89 and later).
int HwFp8Kind(const Format& elem, const CastOptions& cast) {
  if (cast.rounding != Rounding::kRne || cast.saturation != Saturation::kSatFinite || cast.subnormals != Subnormals::kKeep)
    return 0;
  const DeviceInfo& d = Device();
  if (d.major * 10 + d.minor < 89) return 0;
  return elem == fmt::kE4M3 ? 1 : elem == fmt::kE5M2 ? 2 : 0;
}

// The row-block kernel when it applies (above): true when it ran.
bool LaunchRowBlocks(const TensorView& x, const BlockArgs& a, uint8_t* codes, uint8_t* scales, cudaStream_t stream) {
  const bool word4 = x.dtype == DType::kF32, bf16 = x.dtype == DType::kBF16;
  const uint64_t block = a.block_cols;
  if (!(word4 || bf16) || a.block_rows != 1 || (block != 16 && block != 32 && block != 64 && block != 128) ||
      a.cols % block != 0 || a.cast.subnormals == Subnormals::kFlush)
    return false;
  const bool mx = a.scale_format == ScaleFormat::kUe8m0;
  if (mx ? a.mx.buckets == nullptr || a.mx.bits != nullptr : a.buckets == nullptr) return false;
  if (reinterpret_cast<uintptr_t>(x.data) % 16 != 0 || reinterpret_cast<uintptr_t>(codes) % 8 != 0) return false;
  const uint64_t chunks = a.rows * a.cols / 8;
  constexpr int kThreads = 256;
  const uint64_t want = (chunks + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(want < 132 * 16 ? want : 132 * 16);
  const auto launch = [&](auto word, auto lanes) {
    using Word = decltype(word);
    constexpr int kLanes = decltype(lanes)::value;
    if (mx && a.hw_fp8 == 1)
      MxHwRowBlocksKernel<Word, kLanes, 1><<<grid, kThreads, 0, stream>>>(x.data, a, chunks, codes, scales);
    else if (mx && a.hw_fp8 == 2)
      MxHwRowBlocksKernel<Word, kLanes, 2><<<grid, kThreads, 0, stream>>>(x.data, a, chunks, codes, scales);
    else QuantizeRowBlocksKernel<Word, kLanes><<<grid, kThreads, 0, stream>>>(x.data, a, chunks, codes, scales);
  };
  using L2 = std::integral_constant<int, 2>;
  using L4 = std::integral_constant<int, 4>;
  using L8 = std::integral_constant<int, 8>;
  using L16 = std::integral_constant<int, 16>;
  if (word4) {
    if (block == 16) launch(uint32_t{}, L2{});
    else if (block == 32) launch(uint32_t{}, L4{});
    else if (block == 64) launch(uint32_t{}, L8{});
    else launch(uint32_t{}, L16{});
  } else {
    if (block == 16) launch(uint16_t{}, L2{});
    else if (block == 32) launch(uint16_t{}, L4{});
    else if (block == 64) launch(uint16_t{}, L8{});
    else launch(uint16_t{}, L16{});
  }
  return true;
}

// 256 threads and at least four blocks per SM: the routine's rarely taken branches (stochastic rounding,
// NaN fills) would otherwise hold 137 registers per thread and one block per SM (ncu, H200), a latency-bound
// kernel at 12.5% occupancy.
constexpr int kQuantizeThreads = 256;
// FP32-scaled blocks of this many elements or more take the three-pass path (BlockStatsKernel ...).
constexpr uint64_t kLargeBlock = 2048;
template <typename Word>
__global__ void __launch_bounds__(kQuantizeThreads, 4) QuantizeBlocksKernel(const void* src, BlockArgs a, uint8_t* codes,
                                                                            uint8_t* scales) {
  QuantizeBlock<Word>(src, a, a.elem, codes, scales);
}

// The element format a compile-time constant (E4M3, E2M1 from FP32: the usual recipes), as for MX.
template <int kExp, int kMan, int kBias, bool kSigned, Encoding kEnc>
__global__ void __launch_bounds__(kQuantizeThreads, 4) QuantizeBlocksKernelFixed(const void* src, BlockArgs a,
                                                                                 uint8_t* codes, uint8_t* scales) {
  constexpr Format kElem{"", kExp, kMan, kBias, kSigned, kEnc};
  QuantizeBlock<uint32_t>(src, a, kElem, codes, scales);
}
template <typename Word>
void LaunchLineAmax(const Format& sf, const void* src, uint64_t lines, uint64_t cols, uint64_t len, bool by_col,
                    uint32_t limit, unsigned int* out, cudaStream_t stream) {
  detail::Check(cudaMemsetAsync(out, 0, lines * sizeof(unsigned int), stream), "cudaMemsetAsync");
  if (len == 0 || lines == 0) return;
  constexpr int kThreads = 256;
  const bool fp16 = sizeof(Word) == 2 && sf.man_bits != 7;
  if (lines == 1 && !fp16 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
    const uint64_t vecs = len / (16 / sizeof(Word)), want = (vecs + kThreads - 1) / kThreads;
    const unsigned grid = static_cast<unsigned>(std::max<uint64_t>(1, want < 132 * 8 ? want : 132 * 8));
    TensorAmaxKernel<Word><<<grid, kThreads, 0, stream>>>(src, len, limit, out);
    detail::Check(cudaGetLastError(), "engine amax kernel launch");
    return;
  }
  const uint64_t want = (len + kThreads - 1) / kThreads;
  const unsigned gx = static_cast<unsigned>(want < 4096 ? want : 4096);
  LineAmaxKernel<Word><<<dim3(gx, static_cast<unsigned>(lines)), kThreads, 0, stream>>>(sf, src, cols, len, by_col,
                                                                                         limit, out);
  detail::Check(cudaGetLastError(), "engine amax kernel launch");
}

void LineAmax(DType t, const Format& sf, const void* src, uint64_t lines, uint64_t cols, uint64_t len, bool by_col,
              uint32_t limit, unsigned int* out, cudaStream_t stream) {
  if (t == DType::kF32) LaunchLineAmax<uint32_t>(sf, src, lines, cols, len, by_col, limit, out, stream);
  else LaunchLineAmax<uint16_t>(sf, src, lines, cols, len, by_col, limit, out, stream);
}

}  // namespace

std::string EngineQuantizeSupport(const QuantSpec& spec) {
  if (spec.delayed) return "delayed scaling (fp8-delayed) keeps its state on the host";
  if (IsNvfp4FourOverSix(spec.rule)) return std::string("the rule '") + ScaleRuleName(spec.rule) + "' is not on the engine yet";
  if (spec.rule == ScaleRule::kBfp) return "Tenstorrent's bfp blocks run on the CPU (qmx::Quantize), not on the engine yet";
  if (spec.amax_order != AmaxOrder::kAny)
    return std::string("the amax order '") + AmaxOrderName(spec.amax_order) +
           "' runs on the CPU's reference, not on the engine yet";
  if (IsPow2Rule(spec.rule) && !(MxScaleFormat(spec) == fmt::kUE8M0))
    return std::string("MX rules with ") + MxScaleFormat(spec).name +
           " scales run on the CPU's reference, not on the engine yet (it takes UE8M0)";
  if (ScaleFormatOf(spec.rule) == ScaleFormat::kE4m3 && !Nvfp4OwnFormats(spec))
    return std::string("NVFP4 rules on ") + spec.elem.name + " elements and " + Nvfp4ScaleFormat(spec).name +
           " block scales run on the CPU's reference, not on the engine yet (it takes E2M1 and E4M3)";
  return "";
}

namespace {

// The amax passes and the block kernel on `stream`, x.data, codes and scales on the device; q is the shell
// (MakeShell's sizes), whose tensor_amax, tensor_decode and line_amax this fills in. Inside a StreamScope it
// returns once the kernels are queued (the buffers they read are freed in stream order), otherwise when they
// are done; the NVFP4 and per-tensor amax is waited for either way, since it decides S_enc on the host.
void RunQuantize(const TensorView& x, const QuantSpec& spec, QuantizedTensor& q, uint8_t* codes, uint8_t* scales,
                 cudaStream_t stream, const Fp32Scale* fixed = nullptr) {
  const Format& sf = FormatOfSource(x.dtype);
  const BlockExtent be = ResolveBlock(spec, x.rows, x.cols);
  const ScaleFormat scale_format = ScaleFormatOf(spec.rule);
  const size_t n = x.rows * x.cols, nb = q.scale_rows * q.scale_cols;
  const auto download = [&](void* host, const void* dev, size_t bytes) {
    detail::Check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream), "copy to host");
    detail::Check(cudaStreamSynchronize(stream), "engine amax");
  };
  const auto upload = [&](void* dev, const void* host, size_t bytes) {
    detail::Check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream), "copy to device");
  };
  const auto finish = [&] {
    detail::Check(cudaGetLastError(), "engine quantize kernel launch");
    if (!detail::StreamScope::Active(nullptr)) detail::Check(cudaStreamSynchronize(stream), "engine quantize kernel");
  };
  // The tensor amax (NVFP4, per-tensor FP32), and each line's (row-scaled), as TensorAmax takes them.
  const uint32_t limit = qmx::detail::TensorAmaxKeepsInf(spec.nan) ? 0x7F800001u : 0x7F800000u;
  float s_enc = 1.0f;
  std::vector<float> line_enc;
  detail::DeviceBuffer<float> d_line_enc(spec.row_scaled ? q.line_amax.size() : 0);
  const bool need_amax = scale_format == ScaleFormat::kE4m3 || (scale_format == ScaleFormat::kFp32 && nb == 1);
  if (need_amax) {
    detail::DeviceBuffer<unsigned int> d_amax(1);
    LineAmax(x.dtype, sf, x.data, 1, x.cols, n, false, limit, d_amax.get(), stream);
    unsigned int bits = 0;
    download(&bits, d_amax.get(), sizeof bits);
    q.tensor_amax = hd::F32FromBits(bits);
  }
  if (scale_format == ScaleFormat::kE4m3 && !spec.row_scaled) {
    s_enc = Nvfp4TensorScale(q.tensor_amax, spec.rule);
    q.tensor_decode = Nvfp4TensorDecode(s_enc, spec.rule);
  }
  if (spec.row_scaled) {
    const bool by_col = spec.axis == Axis::kCol;
    const size_t lines = q.line_amax.size(), len = by_col ? x.rows : x.cols;
    detail::DeviceBuffer<unsigned int> d_lines(lines);
    LineAmax(x.dtype, sf, x.data, lines, x.cols, len, by_col, limit, d_lines.get(), stream);
    std::vector<unsigned int> bits(lines);
    download(bits.data(), d_lines.get(), lines * sizeof(unsigned int));
    for (size_t l = 0; l < lines; ++l) {
      q.line_amax[l] = hd::F32FromBits(bits[l]);
      line_enc.push_back(Nvfp4TensorScale(q.line_amax[l], spec.rule));
    }
    upload(d_line_enc.get(), line_enc.data(), lines * sizeof(float));
  }
  BlockArgs a{};
  a.src_fmt = sf;
  a.elem = spec.elem;
  a.cast = spec.cast;
  a.rows = x.rows;
  a.cols = x.cols;
  a.block_rows = be.rows;
  a.block_cols = be.cols;
  a.scale_cols = q.scale_cols;
  a.blocks = nb;
  a.rule = spec.rule;
  a.nan = spec.nan;
  a.margin = spec.margin;
  const FormatLimits lim = Limits(spec.elem);
  a.destmax = static_cast<float>(lim.max_finite);
  a.scale_format = scale_format;
  a.row_scaled = spec.row_scaled;
  a.by_col = spec.axis == Axis::kCol;
  a.s_enc = s_enc;
  a.line_enc = d_line_enc.get();
  a.block_nan_code = qmx::detail::BlockNanCode(spec.elem);
  a.seed = spec.seed;
  a.mx = MxArgs{sf, spec.elem, spec.cast, 0, spec.rule, spec.nan, spec.scaling, a.destmax, lim.emax, spec.seed, 0,
                nullptr};
  // Deterministic roundings take the conversion's step table (built once per format and options, kept), and
  // NVFP4's block scales the E4M3 RNE table; each on the device until the kernel is done.
  detail::DeviceBuffer<detail::StepTable> d_tables(2);
  const auto put = [&](const std::shared_ptr<const detail::StepTable>& table, size_t slot) -> const detail::StepTable* {
    if (!table) return nullptr;
    upload(d_tables.get() + slot, table.get(), sizeof(detail::StepTable));
    return d_tables.get() + slot;
  };
  a.steps = put(IsStochastic(spec.cast.rounding) ? nullptr : detail::StepsFor(spec.elem, spec.cast), 0);
  a.scale_steps = put(scale_format == ScaleFormat::kE4m3 ? detail::StepsFor(fmt::kE4M3, CastOptions{}) : nullptr, 1);
  a.buckets = detail::DeviceBucketsFor(spec.elem, spec.cast);
  a.scale_buckets = scale_format == ScaleFormat::kE4m3 ? detail::DeviceBucketsFor(fmt::kE4M3, CastOptions{}) : nullptr;
  a.mx.buckets = a.buckets;
  a.mx_nan_code = static_cast<uint8_t>(qmx::detail::ConvertCore(fmt::kFP32, 0x7FC00000u, spec.elem, spec.cast, 0).code);
  a.mx_block_nan_code = spec.elem.HasNan() ? static_cast<uint8_t>(spec.elem.CanonicalNan()) : uint8_t{0};
  a.hw_fp8 = HwFp8Kind(spec.elem, spec.cast);
  a.hw_scale = scale_format == ScaleFormat::kE4m3 && HwFp8Kind(fmt::kE4M3, CastOptions{}) == 1;
  if (scale_format == ScaleFormat::kFp32 && (be.rows * be.cols >= kLargeBlock || fixed != nullptr)) {
    // One warp per block would leave a per-tensor scale to a single warp (0.25 s for 4096 x 512 on an H200).
    detail::DeviceBuffer<unsigned int> amax(nb), flags(nb);
    detail::DeviceBuffer<qmx::detail::MultiplyScale> ms(nb);
    const uint64_t elems = (n + 255) / 256;
    const unsigned elem_grid = static_cast<unsigned>(elems < 132 * 64 ? elems : 132 * 64);
    if (fixed != nullptr) {  // QuantizeWithScale: every block takes the given scale (Fp32BlockScale of quantize.cc)
      const qmx::detail::MultiplyScale given{hd::F32Bits(fixed->decode), fixed->encode, false};
      const std::vector<qmx::detail::MultiplyScale> host_ms(nb, given);
      std::vector<uint8_t> host_scales(nb * 4);
      for (size_t b = 0; b < nb; ++b) qmx::detail::StoreScaleCore(ScaleFormat::kFp32, host_scales.data(), b, given.stored, false);
      upload(ms.get(), host_ms.data(), nb * sizeof(given));
      upload(scales, host_scales.data(), host_scales.size());
    } else {
      detail::Check(cudaMemsetAsync(amax.get(), 0, nb * sizeof(unsigned int), stream), "cudaMemsetAsync");
      detail::Check(cudaMemsetAsync(flags.get(), 0, nb * sizeof(unsigned int), stream), "cudaMemsetAsync");
      const uint64_t per_block = (be.rows * be.cols + 255) / 256, gy = nb < 65535 ? nb : 65535;
      const uint64_t gx = std::max<uint64_t>(1, std::min<uint64_t>(per_block, (2048 + gy - 1) / gy));
      const dim3 stats_grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
      const unsigned scale_grid = static_cast<unsigned>((nb + 127) / 128 < 1024 ? (nb + 127) / 128 : 1024);
      if (x.dtype == DType::kF32) BlockStatsKernel<uint32_t><<<stats_grid, 256, 0, stream>>>(x.data, a, amax.get(), flags.get());
      else BlockStatsKernel<uint16_t><<<stats_grid, 256, 0, stream>>>(x.data, a, amax.get(), flags.get());
      BlockScalesKernel<<<scale_grid, 128, 0, stream>>>(a, amax.get(), flags.get(), ms.get(), scales);
    }
    if (x.dtype == DType::kF32) BlockElementsKernel<uint32_t><<<elem_grid, 256, 0, stream>>>(x.data, a, spec.elem, ms.get(), codes);
    else BlockElementsKernel<uint16_t><<<elem_grid, 256, 0, stream>>>(x.data, a, spec.elem, ms.get(), codes);
    finish();
    return;
  }
  if (LaunchRowBlocks(x, a, codes, scales, stream)) {
    finish();
    return;
  }
  constexpr int kThreads = kQuantizeThreads;  // 8 warps
  constexpr uint64_t kMaxGrid = 132 * 64;  // enough warps to fill the largest GPUs; each loops over blocks
  const uint64_t want = (nb * 32 + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(want < kMaxGrid ? want : kMaxGrid);
#define QMX_ENGINE_Q(f) \
  QuantizeBlocksKernelFixed<f.exp_bits, f.man_bits, f.bias, f.is_signed, f.encoding><<<grid, kThreads, 0, stream>>>(x.data, a, codes, scales)
  if (x.dtype == DType::kF32 && spec.elem == fmt::kE4M3) QMX_ENGINE_Q(fmt::kE4M3);
  else if (x.dtype == DType::kF32 && spec.elem == fmt::kE2M1) QMX_ENGINE_Q(fmt::kE2M1);
  else if (x.dtype == DType::kF32) QuantizeBlocksKernel<uint32_t><<<grid, kThreads, 0, stream>>>(x.data, a, codes, scales);
  else QuantizeBlocksKernel<uint16_t><<<grid, kThreads, 0, stream>>>(x.data, a, codes, scales);
#undef QMX_ENGINE_Q
  finish();
}

// The checks both entry points make, and the tensor's shell (MakeShell: the spec and the source type
// validated, the outputs sized); the device's presence is required unless the tensor is empty.
QuantizedTensor Shell(const TensorView& x, const QuantSpec& spec, bool zero_codes, const Fp32Scale* fixed = nullptr,
                      bool host_buffers = true) {
  if (fixed != nullptr) {  // QuantizeWithScale's check; a delayed spec is quantized this way
    if (ScaleFormatOf(spec.rule) != ScaleFormat::kFp32 || spec.block_rows != 0 || spec.block_cols != 0)
      throw Error("a given scale needs a per-tensor spec with an FP32 scale rule, not '" + spec.name + "'");
  } else if (const std::string why = EngineQuantizeSupport(spec); !why.empty()) {
    throw Error("engine: " + why);
  }
  QuantizedTensor q = qmx::detail::MakeShell(x, spec, zero_codes, host_buffers);
  if (x.rows != 0 && x.cols != 0) Require("the engine's quantization");
  return q;
}

}  // namespace

QuantizedTensor EngineQuantizeOnDevice(const TensorView& x, const QuantSpec& spec, uint8_t* codes, uint8_t* scales,
                                       void* stream, const Fp32Scale* fixed) {
  QuantizedTensor q = Shell(x, spec, false, fixed, false);  // the codes and scales are the caller's device buffers
  if (x.rows == 0 || x.cols == 0) return q;
  const detail::StreamScope scope(static_cast<cudaStream_t>(stream));
  RunQuantize(x, spec, q, codes, scales, static_cast<cudaStream_t>(stream), fixed);
  return q;
}

QuantizedTensor EngineQuantize(const TensorView& x, const QuantSpec& spec, double* kernel_seconds) {
  QuantizedTensor q = Shell(x, spec, true);
  if (kernel_seconds != nullptr) *kernel_seconds = 0;
  if (x.rows == 0 || x.cols == 0) return q;
  const size_t n = x.rows * x.cols;
  detail::DeviceBuffer<uint8_t> d_src(static_cast<const uint8_t*>(x.data), n * DTypeSize(x.dtype)), d_codes(n),
      d_scales(q.scales.size());
  TensorView xd = x;
  xd.data = d_src.get();
  detail::EventPair ev;
  detail::Check(cudaEventRecord(ev.start), "cudaEventRecord");
  RunQuantize(xd, spec, q, d_codes.get(), d_scales.get(), nullptr);
  detail::Check(cudaEventRecord(ev.stop), "cudaEventRecord");
  detail::Check(cudaEventSynchronize(ev.stop), "engine quantize kernel");
  if (kernel_seconds != nullptr) *kernel_seconds = ev.Seconds();
  d_codes.Download(q.codes.data(), n);
  d_scales.Download(q.scales.data(), q.scales.size());
  return q;
}

}  // namespace qmx::gpu
