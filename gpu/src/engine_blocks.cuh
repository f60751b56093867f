// engine_blocks.cuh: device steps the engine's conversion and quantization kernels share (engine_convert.cu,
// engine_quantize.cu): source loads, FP32's fields, and one MX block by the steps of QuantizeMxRef.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <memory>

#include "qmx/cast_options.h"
#include "qmx/format.h"
#include "qmx/host_device.h"
#include "qmx/rng.h"
#include "qmx/scale.h"
#include "quantize/mx_core.h"
#include "round/round_core.h"

namespace qmx::gpu::detail {

// FP32's fields, for device code (which cannot read the host's fmt::kFP32; kernels receive the host's
// formats by value instead).
__host__ __device__ constexpr Format Fp32Fields() { return {"fp32", 8, 23, 127, true, Encoding::kIeee}; }

template <typename Word>
__device__ __forceinline__ uint64_t LoadBits(const void* src, uint64_t k) {
  return static_cast<const Word*>(src)[k];
}

struct MxArgs {
  Format src_fmt, elem;
  CastOptions cast;
  int block;
  ScaleRule rule;
  NanPolicy policy;
  ElementScaling scaling;
  float destmax;
  int emax;
  uint64_t seed, first;
  const uint32_t* bits;
  const uint32_t* buckets = nullptr;  // FP32 -> elem under cast (BucketCode), deterministic roundings; or null
};

// Element i of an MX block of scale byte `scale` (not a NaN fill) by the reference routine: V_i / X exactly, or
// fl32(x * 2^-k) (te-rcp: Transformer Engine's multiplier).
template <typename Word>
__device__ __noinline__ uint8_t MxElementCode(const void* src, uint64_t i, const MxArgs& a, const Format& elem, int scale) {
  constexpr Format kF32 = Fp32Fields();
  const int k = scale - 127;
  const bool stochastic = qmx::detail::IsStochasticCore(a.cast.rounding);
  const uint32_t r = !stochastic ? 0u : a.bits != nullptr ? a.bits[i] : RandomBitsForElement(a.seed, a.first + i);
  const uint64_t bits = LoadBits<Word>(src, i);
  ExactValue x = qmx::detail::ReadExactCore(a.src_fmt, bits);
  if (a.cast.subnormals == Subnormals::kFlush && qmx::detail::ClassifyCodeCore(a.src_fmt, bits) == CodeClass::kSubnormal)
    x.kind = ExactValue::Kind::kZero;
  if (a.scaling == ElementScaling::kExact) {
    x.exp -= k;  // V_i / X, exactly
    return static_cast<uint8_t>(qmx::detail::RoundExactCore(x, elem, a.cast, r).code);
  }
  // FP32 element scaling: fl32(x * mult), the product in double as the CPU forms it. A NaN keeps its sign
  // (x86 propagates the operand; the GPU's multiply would give its canonical NaN); te-rcp's NaN products
  // are the GPU kernel's canonical +NaN, as the CPU models them.
  const bool te = a.scaling == ElementScaling::kTeRcp;
  const double mult = te && scale == 0 ? 1.0 : te && scale == 254 ? 0.0 : ldexp(1.0, -k);
  uint32_t y;
  if (x.kind == ExactValue::Kind::kNan) {
    y = te ? 0x7FFFFFFFu : (x.negative ? 0xFFC00000u : 0x7FC00000u);
  } else {
    const double v = x.kind == ExactValue::Kind::kInf ? (x.negative ? -HUGE_VAL : HUGE_VAL)
                     : x.kind == ExactValue::Kind::kZero ? (x.negative ? -0.0 : 0.0)
                                                         : (x.negative ? -1.0 : 1.0) * ldexp(static_cast<double>(x.sig), x.exp);
    const float f = static_cast<float>(v * mult);
    y = f != f ? 0x7FFFFFFFu : hd::F32Bits(f);  // only te-rcp's Inf x 0 makes a NaN here
  }
  return static_cast<uint8_t>(qmx::detail::ConvertCore(kF32, y, elem, a.cast, r).code);
}

// One warp per block, the steps of QuantizeMxRef (lib/src/quantize/mx_ref.cc) in its order: the exact amax
// over the finite elements (an FP32 value, since every input is; a maximum, so the lanes' order does not
// matter), the scale byte by the rule on its bits (qmx/host_device.h, which the CPU's fast path uses too) or
// the NaN policy's fill, then each element by the reference routine: V_i / X exactly, or fl32(x * 2^-k)
// (te-rcp: Transformer Engine's multiplier). Lane j takes elements j, j + 32, ... of the block, so a warp
// reads its block's contiguous bytes at once.
// The block's elements are count elements of the tensor, the t-th at flat index at(t) (its code's index, and
// SR stream index a.first + at(t)); its scale byte goes to *scale_out. The calling warp's 32 lanes all take part.
template <typename Word, typename At>
__device__ __forceinline__ void MxBlockAt(const void* src, uint64_t count, At at, const MxArgs& a, const Format& elem,
                                         uint8_t* codes, uint8_t* scale_out) {
  const int lane = threadIdx.x % 32;
  constexpr Format kF32 = Fp32Fields();
  const auto read = [&](uint64_t i) {
    const uint64_t bits = LoadBits<Word>(src, i);
    ExactValue x = qmx::detail::ReadExactCore(a.src_fmt, bits);
    if (a.cast.subnormals == Subnormals::kFlush && qmx::detail::ClassifyCodeCore(a.src_fmt, bits) == CodeClass::kSubnormal)
      x.kind = ExactValue::Kind::kZero;
    return x;
  };
  uint32_t amax = 0;  // FP32 bits of the largest finite magnitude
  bool has_nan = false, has_inf = false;
  const bool flush = a.cast.subnormals == Subnormals::kFlush;
  for (uint64_t t = lane; t < count; t += 32) {
    const uint64_t i = at(t);
    if (sizeof(Word) == 2 && a.src_fmt.man_bits == 10) {  // fp16: through the exact value
      const ExactValue x = read(i);
      has_nan |= x.kind == ExactValue::Kind::kNan;
      has_inf |= x.kind == ExactValue::Kind::kInf;
      if (x.kind == ExactValue::Kind::kFinite) {
        const uint32_t m = hd::F32Bits(static_cast<float>(ldexp(static_cast<double>(x.sig), x.exp)));
        amax = m > amax ? m : amax;
      }
      continue;
    }
    // fp32 and bf16: the magnitude's FP32 bits are the exact value's (a flushed subnormal counts as 0).
    const uint64_t bits = LoadBits<Word>(src, i);
    const uint32_t m = (sizeof(Word) == 2 ? static_cast<uint32_t>(bits) << 16 : static_cast<uint32_t>(bits)) & 0x7FFFFFFFu;
    has_nan |= m > 0x7F800000u;
    has_inf |= m == 0x7F800000u;
    if (m < 0x7F800000u && !(flush && m < 0x00800000u)) amax = m > amax ? m : amax;
  }
  amax = __reduce_max_sync(0xFFFFFFFFu, amax);
  has_nan = __any_sync(0xFFFFFFFFu, has_nan);
  has_inf = __any_sync(0xFFFFFFFFu, has_inf);
  const uint8_t nan_code = static_cast<uint8_t>(qmx::detail::ConvertCore(kF32, 0x7FC00000u, elem, a.cast, 0).code);
  const uint8_t block_nan_code = elem.HasNan() ? static_cast<uint8_t>(elem.CanonicalNan()) : 0;
  int scale, fill;
  qmx::detail::MxPolicyScale(a.policy, has_nan, has_inf,
                             hd::ScaleByteFromAmaxBits(amax, static_cast<int>(a.rule), a.destmax, a.emax, elem.man_bits),
                             nan_code,
                          block_nan_code, &scale, &fill);
  if (lane == 0) *scale_out = static_cast<uint8_t>(scale);
  for (uint64_t t = lane; t < count; t += 32) {
    const uint64_t i = at(t);
    codes[i] = fill >= 0 ? static_cast<uint8_t>(fill) : MxElementCode<Word>(src, i, a, elem, scale);
  }
}

// ------------------------------------------------------------------ step tables
// Deterministic roundings map an FP32 input to a code that depends only on its sign and magnitude bits, a
// step function of the magnitude for each sign (engine_convert.cu says why and how it is built).
constexpr int kMaxSteps = 1024;  // per sign; more steps than this would break the assumption: refuse the path
constexpr uint32_t kInfMag = 0x7F800000u;

struct StepTable {
  uint32_t end[2][kMaxSteps];  // the last magnitude of each step, ascending, the last one kInfMag
  uint8_t code[2][kMaxSteps];
  int count[2];
  uint8_t nan_code[2];
};

// The table of the conversion FP32 -> dst under opt, built on the host by the reference routine and kept;
// nullptr where it would need more than kMaxSteps steps per sign (engine_convert.cu).
std::shared_ptr<const StepTable> StepsFor(const Format& dst, const CastOptions& opt);

// The code of FP32 bits x: the first step whose end is >= |x| (NaN: the sign's NaN code).
__device__ __forceinline__ uint8_t StepCode(const StepTable* t, uint32_t x) {
  const uint32_t sign = x >> 31, mag = x & 0x7FFFFFFFu;
  if (mag > kInfMag) return t->nan_code[sign];
  int lo = 0, len = t->count[sign];
  while (len > 0) {
    const int half = len >> 1;
    if (t->end[sign][lo + half] < mag) {
      lo += half + 1;
      len -= half + 1;
    } else {
      len = half;
    }
  }
  return t->code[sign][lo];
}

// ------------------------------------------------------------------ bucket tables
// A step table flattened for one load per input: FP32 magnitudes fall into buckets of 2^16 (mag >> 16: the
// exponent and 7 fraction bits), and where every bucket meets at most two steps (the registry's formats of
// up to 6 fraction bits: their steps end at values of at most 7 fraction bits, or one past such a value, the
// ties), entry sign * 2^15 + bucket holds the first step's code, the second's, and the low 16 bits of the
// first step's end: code_lo | code_hi << 8 | end_lo << 16. NaN magnitudes are buckets of their own sign's NaN
// code (Inf's bucket ends its first step at Inf). Built from the step table on the host (engine_convert.cu),
// so the same function of the input as the routine.
constexpr uint32_t kBucketsPerSign = 1u << 15;

// The bucket table of FP32 -> dst under opt on the current device (built and uploaded once, then kept), or
// null where there is no step table or a bucket meets three steps.
const uint32_t* DeviceBucketsFor(const Format& dst, const CastOptions& opt);

// The code of FP32 bits x by the bucket table b.
__device__ __forceinline__ uint8_t BucketCode(const uint32_t* b, uint32_t x) {
  const uint32_t e = __ldg(b + (x >> 31) * kBucketsPerSign + ((x >> 16) & 0x7FFFu));
  return static_cast<uint8_t>((x & 0xFFFFu) <= (e >> 16) ? e : e >> 8);
}

}  // namespace qmx::gpu::detail
