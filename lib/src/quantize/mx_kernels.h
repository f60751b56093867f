// mx_kernels.h (internal): the block quantizers' kernels (dynamic dispatch; quantize/mx_simd.cc,
// nvfp4_strip_simd.cc, amax_simd.cc, their shared steps in mx_blocks-inl.h): MX and NVFP4 blocks, NVFP4
// strips of several rows, FP32-scaled blocks, amax passes and MX dequantization. Their elements convert
// through round/convert_params.h's parameters, as ConvertCodes does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qmx/io.h"
#include "qmx/scale.h"
#include "round/convert_params.h"

namespace qmx::simd {

// MX: per block amax -> scale byte (by the scalar rule function) -> elements.
struct MxKernelArgs {
  const ConvertParams* p;
  int block;
  ScaleRule rule;    // a UE8M0 rule; NVFP4 blocks (nvfp4): kNvfp4, kNvfp4Div or a torchao rule
  float destmax;     // largest finite element value
  int emax;          // exponent of the largest element binade
  int elem_man;      // element mantissa bits (the EVEN rule rounds amax there)
  NanPolicy policy;
  ElementScaling scaling;  // exact V/X, fl32(x * 2^-k), or Transformer Engine's exp2f_rcp
  uint32_t elem_nan; // element code written in a NaN block (block-nan)
  // NVFP4 blocks instead of UE8M0 (rule: which NVFP4 rule; qmx/scale.h): the scale byte is
  // Nvfp4BlockScale's, e4m3(fl32(amax * s_m)) or e4m3(fl32(fl32(amax / 6) * s_enc)), and the element
  // multiplier the caller's Nvfp4EncodeFactor of that byte, mult[byte]. Elements are fl32(x * multiplier)
  // (scaling must be kFp32); NaN policies block-nan, ignore-nan or ignore.
  bool nvfp4;
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
