// convert_params.h (internal): a format and its CastOptions flattened into the constants the SIMD
// conversion kernel broadcasts. Built once per call by MakeConvertParams (convert.cc), read by
// convert_simd.cc and quantize/mx_simd.cc. The kernel's arithmetic is described in convert_tiers-inl.h.
#pragma once

#include <cstdint>

#include "qmx/cast_options.h"
#include "qmx/format.h"
#include "qmx/host_device.h"
#include "qmx/io.h"

namespace qmx::simd {

enum class Kind : uint32_t { kFloat = 0, kInt = 1 };

struct ConvertParams {
  Kind kind;
  Rounding rounding;
  int32_t emin127;   // FP32-biased exponent of dst's smallest normal binade (kInt: 1 << 20, never reached)
  int32_t sbase;     // discarded bits s = max(En, emin127) - Ee + sbase (En/Ee: scaled biased exponents)
  int32_t man_bits;  // dst mantissa bits (kInt: 0, the magnitude is the count of quanta)
  uint32_t adj;      // 1 where the first normal binade has exponent field 0 (ue8m0), else 0
  int32_t big_e;     // scaled biased exponents at or above this surely overflow (kInt only)
  uint32_t max_code;       // largest positive finite code
  uint32_t sign_bit;       // 0 for unsigned and kInt formats
  uint32_t has_neg_zero;   // all-ones when -0 has a code
  uint32_t flush_out;      // all-ones when subnormal results become zero
  uint32_t min_normal_mag; // 1 << man_bits
  uint32_t flush_below;    // |x| bits below this read as zero (0: no input flushing)
  uint32_t is_unsigned;    // all-ones for unsigned formats: negative nonzero inputs are invalid
  uint32_t neg_to_zero;    // all-ones for P3109 unsigned formats: a finite negative that rounds to 0 gives 0,
                           // -Inf its inf_code
  uint32_t int_mask;       // kInt: code mask for two's complement
  uint32_t nan_code[2];    // NaN input -> code, [positive, negative]
  uint32_t inf_code[2];    // Inf input -> code
  uint32_t ovf_code[2];    // finite overflow -> code
  uint32_t invalid_code;   // negative nonzero into an unsigned format
  uint32_t sr_bits;        // N
  uint32_t sr_mask;        // 2^N - 1
};

ConvertParams MakeConvertParams(const Format& dst, const CastOptions& opt, DType src);

// Kernels (dynamic dispatch; round/convert_simd.cc, MX blocks in quantize/mx_simd.cc).
void ConvertCodes(const ConvertParams& p, DType src, const void* in, size_t n, uint8_t* out, uint64_t seed,
                  uint64_t first_index, const uint32_t* rbits);
void DecodeCodes(const float* table, const uint8_t* codes, size_t n, float* out);
// MX: per block amax -> scale byte (by the scalar rule function) -> elements.
struct MxKernelArgs {
  const ConvertParams* p;
  int block;
  int rule;          // ScaleRule (a UE8M0 rule)
  float destmax;     // largest finite element value
  int emax;          // exponent of the largest element binade
  int elem_man;      // element mantissa bits (the EVEN rule rounds amax there)
  int policy;        // NanPolicy
  int scaling;       // ElementScaling: 0 exact V/X, 1 fl32(x * 2^-k), 2 Transformer Engine's exp2f_rcp
  uint32_t elem_nan; // element code written in a NaN block (block-nan)
  // NVFP4 blocks instead of UE8M0 (0: MX; 1: the nvfp4 rule, 2: nvfp4-div; qmx/scale.h): the scale byte is
  // Nvfp4BlockScale's, e4m3(fl32(amax * s_m)) or e4m3(fl32(fl32(amax / 6) * s_enc)), and the element
  // multiplier the caller's Nvfp4EncodeFactor of that byte, mult[byte]. Elements are fl32(x * multiplier)
  // (scaling must be 1); NaN policies block-nan, ignore-nan or ignore.
  int nvfp4;
  float s_enc, s_m;
  const ConvertParams* p_e4m3;  // FP32 -> E4M3, RNE, satfinite (the scale's conversion)
  const float* mult;            // 128 entries
  // The caller's |x| bit maxima of this call's blocks (every lane, NaN highest: what the kernel's own first
  // pass takes), or nullptr for the kernel to take them. Used where the source is not flushed.
  const uint32_t* block_amax = nullptr;
  // Codes by non-temporal stores where whole lines allow: for outputs too large for the caches, whose lines
  // would otherwise be read from memory before being written over.
  bool stream = false;
};
void QuantizeMxBlocks(const MxKernelArgs& a, DType src, const void* in, size_t n, uint8_t* codes,
                      uint8_t* scales, uint64_t seed, uint64_t first_index, const uint32_t* rbits);
// NVFP4 blocks of h rows by a.block columns: one strip of them across `cols` columns (a multiple of
// a.block), row-major with row stride cols, codes likewise and scales one per block, equal to quantizing
// the gathered blocks with QuantizeMxBlocks (block h * a.block); first_index is the element index of the
// strip's first element (SR words). Only where Nvfp4StripTakes(a): the fused tier under RNE or SR-A, and
// block rows of whole vectors on the target that runs.
bool Nvfp4StripTakes(const MxKernelArgs& a);
// FP32-scaled blocks: blocks of `block` elements of in (n elements, the last block may be partial); where
// take[i], block i's elements fl32(x * mults[i]) converted under p (a kF32 source's parameters), equal to
// ConvertCodes of those products with SR words of indices first_index + j; the caller vouches that every
// product of a taken block is finite, and converts the other blocks itself. Only where
// ScaledBlocksTake(p): the fused tier under RNE or SR-A.
bool ScaledBlocksTake(const ConvertParams& p);
void ConvertScaledBlocks(const ConvertParams& p, DType src, const void* in, size_t n, size_t block, const float* mults,
                         const uint8_t* take, uint8_t* codes, uint64_t seed, uint64_t first_index);
void QuantizeNvfp4Strip(const MxKernelArgs& a, DType src, const void* in, size_t h, size_t cols, uint8_t* codes,
                        uint8_t* scales, uint64_t seed, uint64_t first_index);
// max over the n elements of |x| bits below `limit` (0x7F800000: finite elements; 0x7F800001: Inf too).
uint32_t AmaxBits(DType src, const void* in, size_t n, uint32_t limit);
// The |x| bit maxima of the n / block whole blocks of `in` (n a multiple of block) into out, every lane
// counted (MxKernelArgs::block_amax), and the return value AmaxBits(src, in, n, limit), from the same read.
uint32_t AmaxBitsOfBlocks(DType src, const void* in, size_t n, size_t block, uint32_t* out, uint32_t limit);
void DequantizeMxBlocks(const float* table, int block, const uint8_t* codes, const uint8_t* scales, size_t n,
                        float* out);

}  // namespace qmx::simd

namespace qmx::simd {

// The UE8M0 scale rules on the bits of amax, shared by every target, the scalar entry point and the CUDA
// backend (scale_ref.cc computes them independently, in double).
using hd::ScaleByteFromAmaxBits;

}  // namespace qmx::simd
