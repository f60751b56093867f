// gemm/scaled_mm_core.h: the epilogue of torch._scaled_mm's model (qmx/scaled_mm.h) for one output, as
// host-device functions (QMX_HOST_DEVICE), so that the CPU library (scaled_mm.cc) and the CUDA engine
// (gpu/src/engine_ops.cu) compile one source. Each step is one FP32 rounding (RN), as measured on the
// H200. NaN results follow x86 SSE's rules on both sides: a NaN operand comes out quieted (the first one
// when both are), an invalid operation (Inf - Inf, 0 x Inf) gives the default NaN 0xFFC00000; a GPU's own
// arithmetic would give 0x7FFFFFFF.
#pragma once

#include <cstdint>

#include "qmx/host_device.h"
#include "qmx/scaled_mm.h"
#include "round/round_core.h"

namespace qmx::detail {

QMX_HOST_DEVICE inline float NanAsX86(float a, float b, float r) {
  if (a != a) return hd::F32FromBits(hd::F32Bits(a) | 0x00400000u);
  if (b != b) return hd::F32FromBits(hd::F32Bits(b) | 0x00400000u);
  if (r != r) return hd::F32FromBits(0xFFC00000u);
  return r;
}
QMX_HOST_DEVICE inline float MulF32(float a, float b) { return NanAsX86(a, b, a * b); }
QMX_HOST_DEVICE inline float AddF32(float a, float b) { return NanAsX86(a, b, a + b); }

// A BF16 (bf16 true) or FP16 code's value, exactly; a NaN keeps its sign and payload.
QMX_HOST_DEVICE inline float Half16ToF32(uint16_t h, bool bf16) {
  if (bf16) return hd::F32FromBits(static_cast<uint32_t>(h) << 16);
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return hd::F32FromBits(sign | 0x7F800000u | (m << 13));
  if (e == 0) {  // zero or subnormal: m 2^-24, exact
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return hd::F32FromBits(sign | ((e + 112u) << 23) | (m << 13));
}

// How the epilogue treats every output of one call.
struct ScaledMmEpilogue {
  bool rowwise = false;   // D = (acc * sb[j]) * sa[i]; else D = acc * fl32(sa * sb)
  bool has_bias = false;  // + bias[j], a code of the output's type
  int out = 0;            // 0 FP32 bits, 1 BF16, 2 FP16 (ScaledMmOut)
  Format out_fmt{};       // BF16 or FP16: the output's format
  CastOptions rne{};      // round to nearest even, overflow to Inf (the GPU's cvt.rn)
};

// One output's bits (FP32, or a BF16 / FP16 code in the low 16 bits) from its FP32 accumulator; sa and sb
// are the scales that apply to it (row i's and column j's, or the per-tensor ones).
QMX_HOST_DEVICE inline uint32_t ScaledMmOutput(const ScaledMmEpilogue& e, float acc, float sa, float sb,
                                               uint16_t bias) {
  float v = e.rowwise ? MulF32(MulF32(acc, sb), sa) : MulF32(acc, MulF32(sa, sb));
  if (e.has_bias) v = AddF32(v, Half16ToF32(bias, e.out == 1));
  if (e.out == 0) return hd::F32Bits(v);
  return static_cast<uint32_t>(
      ConvertCore(Format{"fp32", 8, 23, 127, true, Encoding::kIeee}, hd::F32Bits(v), e.out_fmt, e.rne, 0).code);
}

// The epilogue of a call ScaledMm planned (host only).
inline ScaledMmEpilogue EpilogueOf(const ScaledMmArgs& x, const ScaledMmPlan& p) {
  ScaledMmEpilogue e;
  e.rowwise = p.rowwise;
  e.has_bias = x.bias != nullptr;
  e.out = static_cast<int>(x.out);
  e.out_fmt = x.out == ScaledMmOut::kBF16 ? fmt::kBF16 : fmt::kFP16;
  e.rne.saturation = Saturation::kNoSat;  // overflow to Inf, as the GPU's cvt.rn does
  return e;
}

}  // namespace qmx::detail
