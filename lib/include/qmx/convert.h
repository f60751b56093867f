// qmx/convert.h: the fast conversions (Highway SIMD with dynamic dispatch, optional OpenMP). Each equals
// the reference routine of round.h bit for bit, on every SIMD target and for any thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qmx/cast_options.h"
#include "qmx/format.h"
#include "qmx/io.h"

namespace qmx {

// Where stochastic rounding takes its random bits. Element i of a call (0-based) uses bits[i] when bits
// is given, else RandomBitsForElement(seed, first_index + i) (qmx/rng.h); the low opt.sr_bits bits count.
// Splitting a tensor into calls with the matching first_index gives the same bits as one call.
struct SrSource {
  uint64_t seed = 0;
  uint64_t first_index = 0;
  const uint32_t* bits = nullptr;
};

// kParallel splits the work into fixed chunks over OpenMP threads; results never depend on the count.
enum class Exec : uint8_t { kSequential, kParallel };

// Inputs the fast paths read: fp32, bf16 and fp16 (raw little-endian bits).
bool IsFastSource(DType src);
// The format of such an input; throws qmx::Error for any other type.
const Format& FormatOfSource(DType src);
// Element i of an fp32, bf16 or fp16 array as an FP32 value (exact widening; a NaN keeps its sign).
float SourceValueF32(DType src, const void* data, size_t i);
// The fast paths handle every format of 8 bits or fewer whose smallest normal binade lies within
// 2^-127 .. 2^127 of FP32's (every registry format; user formats with extreme biases are refused).
bool IsFastFormat(const Format& f);

// src (n elements of type src_type) -> codes of dst, one byte per code. Throws qmx::Error for invalid
// options, an unsupported source type or a format IsFastFormat rejects.
void ConvertToCodes(DType src_type, const void* src, size_t n, const Format& dst, const CastOptions& opt,
                    uint8_t* out, const SrSource& sr = {}, Exec exec = Exec::kSequential);
// The same through the scalar reference routine, element by element (for tests and baselines); with flags
// (n bytes, or null), each element's exception flags too (the fast paths compute none).
void ConvertToCodesRef(DType src_type, const void* src, size_t n, const Format& dst, const CastOptions& opt,
                       uint8_t* out, const SrSource& sr = {}, Exec exec = Exec::kSequential, uint8_t* flags = nullptr);

// codes -> exact FP32 values (NaN codes give a quiet NaN with the code's sign, as DecodeToFloat).
void DecodeToF32(const uint8_t* codes, size_t n, const Format& f, float* out, Exec exec = Exec::kSequential);

// Name of the SIMD target the dispatcher runs on this machine ("AVX3", "AVX2", "SSE4", ...).
std::string SimdTargetName();
// SimdTargets and ForceSimdTarget, which compare the targets, are test hooks: qmx/testing.h.

}  // namespace qmx
