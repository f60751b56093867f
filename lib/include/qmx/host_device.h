// qmx/host_device.h: bit-level helpers shared by the CPU library and the CUDA backend (gpu/), compiled by
// g++ and nvcc alike (STYLE.md rule 6): FP32 bit patterns, the UE8M0 scale rules on amax's bits (OCP MX
// v1.0 6.3, MXFP8 recipes algorithm 1, torchao CEIL/EVEN), Transformer Engine's exp2f_rcp multiplier.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define QMX_HOST_DEVICE __host__ __device__
#else
#define QMX_HOST_DEVICE
#endif

namespace qmx::hd {

QMX_HOST_DEVICE inline uint32_t F32Bits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

QMX_HOST_DEVICE inline float F32FromBits(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

// Index of the highest set bit of a nonzero word.
QMX_HOST_DEVICE inline int HighBit(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return 31 - __clz(v);
#else
  return 31 - __builtin_clz(v);
#endif
}

// The UE8M0 scale byte (X = 2^(byte - 127)) from the bits of a finite amax >= 0. rule is a ScaleRule value:
// 0 (ocp-floor) and 4 (max-finite): 2^(floor(log2 amax) - emax); a zero or FP32-subnormal amax uses its true
//   exponent, so it clamps to 2^-127.
// 1 (round-up): q = fl32(amax / destmax) rounded up to a power of two (FP32 subnormal q included), at least
//   2^-127, at most 2^127 (cvt.rp.satfinite.ue8m0x2.f32).
// 2 (ceil, torchao): the exponent field of amax, plus one when its mantissa field is nonzero, minus emax.
// 3 (even, torchao): amax's bits plus 2^(22 - elem_man), mantissa cleared, then the floor rule; a carry out
//   of FP32's largest binade counts as exponent 128 (torchao would produce a NaN scale there).
// Exponents are clamped to [-127, 127].
QMX_HOST_DEVICE inline uint8_t ClampScaleByte(int k) {
  return static_cast<uint8_t>((k < -127 ? -127 : (k > 127 ? 127 : k)) + 127);
}

QMX_HOST_DEVICE inline uint8_t ScaleByteFromAmaxBits(uint32_t amax_bits, int rule, float destmax, int emax,
                                                     int elem_man) {
  if (rule == 1) {
    const uint32_t qb = F32Bits(F32FromBits(amax_bits) / destmax);
    const uint32_t e_field = qb >> 23, mant = qb & 0x7FFFFFu;
    if (e_field == 0) return mant > 0x400000u ? 1 : 0;  // FP32 subnormal q: 2^-127 or 2^-126
    const uint32_t byte = e_field + (mant != 0 ? 1u : 0u);
    return static_cast<uint8_t>(byte > 254 ? 254 : byte);
  }
  if (amax_bits == 0) return 0;
  if (rule == 2) {
    const int e_field = static_cast<int>(amax_bits >> 23);
    return ClampScaleByte(e_field - 127 + ((amax_bits & 0x7FFFFFu) != 0 ? 1 : 0) - emax);
  }
  if (rule == 3) {
    const uint32_t r = (amax_bits + (1u << (22 - elem_man))) & 0xFF800000u;
    return ClampScaleByte(static_cast<int>(r >> 23) - 127 - emax);
  }
  const int e_field = static_cast<int>(amax_bits >> 23);
  const int lg = e_field != 0 ? e_field - 127 : HighBit(amax_bits) - 149;
  return ClampScaleByte(lg - emax);
}

// The FP32 multiplier that divides elements by the scale X = 2^(byte - 127): 2^(127 - byte), exact (byte 254
// gives the subnormal 2^-127). te_rcp: Transformer Engine's exp2f_rcp instead: byte 0 -> 1.0, otherwise the
// bits (254 - byte) << 23 (byte 254 -> +0.0).
QMX_HOST_DEVICE inline float ScaleMultiplier(uint8_t byte, bool te_rcp) {
  if (te_rcp) return byte == 0 ? 1.0f : F32FromBits(static_cast<uint32_t>(254 - byte) << 23);
  return byte == 254 ? F32FromBits(0x00400000u) : F32FromBits(static_cast<uint32_t>(254 - byte) << 23);
}

}  // namespace qmx::hd
