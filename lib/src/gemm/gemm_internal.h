// gemm_internal.h: pieces the GEMM reference and fast paths share: the validated plan, exact values as
// integer times power of two, the nominal exponents of MMA-Sim's fused sum, and its output rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "float_bits.h"
#include "gemm/exact_sum.h"
#include "qmx/gemm.h"

namespace qmx::detail {

using i128 = __int128;

struct GemmPlan {
  size_t m = 0, n = 0, k = 0;
  size_t kb = 0;             // scale block length along K (k when neither side has block scales along K)
  size_t xstep = 0;          // block-exact: the K of one rounding step (kb, or the model's exact_step)
  bool a_blocks = false, b_blocks = false;
  float alpha = 1.0f;        // the factor of every output when no side has per-line scales (AlphaAt(0, 0))
  bool has_alpha = false;    // either tensor scale differs from 1, a side has per-line scales, or a TE rule
  const float* alpha_rows = nullptr;  // A's row_scales (row-scaled NVFP4), replacing its tensor scale
  const float* alpha_cols = nullptr;  // B's col_scales
  float ta = 1.0f, tb = 1.0f;
  // AlphaRule::kTe / kTeRef: each side's amax (per row of A / column of B when row-scaled) and the factor
  // fl32(36 * bound_a * bound_b) with its FP32 reciprocal.
  AlphaRule rule = AlphaRule::kDecode;
  float amax_a = 0.0f, amax_b = 0.0f;
  const float* amax_rows = nullptr;
  const float* amax_cols = nullptr;
  float te_factor = 1.0f, te_inv = 1.0f;
  // The factor output (i, j) is multiplied by after accumulation: fl32(s_a(i) * s_b(j)) under kDecode;
  // fl32(fl32(amax_a(i) * amax_b(j)) * te_inv) under kTe, fl32(fl32(amax_a(i) * amax_b(j)) / te_factor)
  // under kTeRef.
  float AlphaAt(size_t i, size_t j) const {
    if (rule == AlphaRule::kDecode) return (alpha_rows ? alpha_rows[i] : ta) * (alpha_cols ? alpha_cols[j] : tb);
    const float p = (amax_rows ? amax_rows[i] : amax_a) * (amax_cols ? amax_cols[j] : amax_b);
    return rule == AlphaRule::kTe ? p * te_inv : p / te_factor;
  }
  bool PerLine() const { return alpha_rows || alpha_cols || amax_rows || amax_cols; }
};
// OperandFromQuantized without the codes and block scales: the shape, scale grid and second-level factors
// (a per-tensor FP32 scale is read from q.scales, the one scale q then needs to hold).
GemmOperand OperandShell(const QuantizedTensor& q);
// Checks shapes, scale blocks and the model against each other (qmx::Error naming the problem). With
// storage false the operands' codes and scales are not looked at (the GPU engine's operands keep them
// in device memory; their sizes are the caller's), every other check is made.
GemmPlan PlanGemm(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                  bool storage = true);

// The reference on output rows [i0, i1) (out is the whole M x N result).
void GemmRefRows(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                 const GemmPlan& plan, size_t i0, size_t i1, float* out);

// The fast kernels (gemm_fast*.cc): true when they computed `out`, false when the case needs the
// generic path (formats, scales or models they do not cover).
bool GemmFast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
              const GemmPlan& plan, Exec exec, float* out);

// IEEE FP32 accumulation on plain FP32 values (the training recipes' BF16 operands): out (m x n) =
// a (m x k) * b (k x n) with out[i][j] = fmaf(a[i][kk], b[kk][j], acc) for kk ascending, acc from +0.
// The fp32-seq kernel's tiles; rows in parallel, the same bits on any thread count.
void GemmF32SeqValues(const float* a, const float* b, size_t m, size_t n, size_t k, Exec exec, float* out);

// The bits of a double, and floor(log2 |x|) of a finite nonzero x from them: std::ilogb's value without
// the library call, which the reference GEMM makes for every operand (commit 11b051c has the profile).
inline uint64_t DoubleBits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
inline int IlogbD(double x) {
  const uint64_t bits = DoubleBits(x);
  const int field = static_cast<int>((bits >> 52) & 0x7FF);
  if (field != 0) return field - 1023;
  return 63 - __builtin_clzll(bits & ((uint64_t{1} << 52) - 1)) - 1074;
}

// The exponent MMA-Sim gives a value: floor(log2 |x|), but never below the format's emin (subnormals
// keep emin and a significand below 1). x finite and nonzero.
inline int NominalExp(double x, int emin) {
  const int e = IlogbD(x);
  return e < emin ? emin : e;
}
// The emin used for a format's nominal exponent (e4m3 -6, e5m2 -14, e2m1 0, int8: its quantum).
inline int FormatEmin(const Format& f) { return f.Emin(); }
inline int ScaleEmin(ScaleFormat s) { return s == ScaleFormat::kUe8m0 ? -127 : s == ScaleFormat::kE4m3 ? -6 : -126; }
// An operand's: its code format's where the scales are codes of another format (kCode).
inline int ScaleEmin(const GemmOperand& o) {
  return o.scale_format == ScaleFormat::kCode ? o.scale_code.Emin() : ScaleEmin(o.scale_format);
}
// The scales' fraction bits (their significands' width less one): 0 for UE8M0, 3 for E4M3, 23 for FP32.
inline int ScaleFractionBits(const GemmOperand& o) {
  switch (o.scale_format) {
    case ScaleFormat::kUe8m0: return 0;
    case ScaleFormat::kE4m3: return 3;
    case ScaleFormat::kFp32: return 23;
    case ScaleFormat::kCode: return o.scale_code.man_bits;
  }
  return 23;
}

inline int Msb128(u128 v) {  // v != 0
  const uint64_t hi = static_cast<uint64_t>(v >> 64);
  return hi ? 127 - __builtin_clzll(hi) : 63 - __builtin_clzll(static_cast<uint64_t>(v));
}
// The significant bits of a finite nonzero x: the width of its odd magnitude (ExactOf).
inline int SignificantBits(double x) { return Msb128(ExactOf(x).mag) + 1; }
// ilogb of a float, from its exponent field where it is a normal number.
inline int IlogbF(float v) {
  const int field = static_cast<int>((detail::F32Bits(v) >> 23) & 0xFF);
  return field != 0 && field != 0xFF ? field - 127 : std::ilogb(v);
}

// floor(mag * 2^shift) (shift may be negative), or rounded to nearest even when `rne`.
inline u128 ShiftRound(u128 mag, int shift, bool rne) {
  if (mag == 0) return 0;
  if (shift >= 0) return shift >= 127 ? 0 : mag << shift;  // callers keep the result in range
  const int s = -shift;
  if (s >= 128) return rne && s == 128 ? 0 : 0;
  u128 q = mag >> s;
  if (rne) {
    const u128 rem = mag & ((static_cast<u128>(1) << s) - 1);
    const u128 half = static_cast<u128>(1) << (s - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  return q;
}

inline float CanonicalNanF() {
  uint32_t b = 0x7FFFFFFFu;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// A NaN output is one canonical NaN per model, whatever FP32 operation made it and whatever the CPU's own
// NaN rules (x86 gives 0xFFC00000 for Inf - Inf and keeps an operand's payload; Arm gives 0x7FC00000):
// 0x7FFFFFFF for NVIDIA's fused tensor-core models, as NVIDIA's tensor cores and FP32 units give it, and
// 0x7FC00000, IEEE's default quiet NaN, for exact, block-exact, fp32-seq and AMD's cdna3-fp8.
inline float ModelNan(const AccumModel& m) {
  // cdna3-fp8: IEEE's default quiet NaN, as MMA-Sim's CDNA3 model converts its double NaN (not measured).
  const uint32_t b = m.kind == AccumKind::kFused && !m.fused.cdna3_halves ? 0x7FFFFFFFu : 0x7FC00000u;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline void CanonicalizeNans(const AccumModel& m, float* out, size_t n) {
  const float nan = ModelNan(m);
  for (size_t i = 0; i < n; ++i) {  // (a store in every lane, so that the loop vectorizes)
    const float v = out[i];
    out[i] = v != v ? nan : v;
  }
}

// +-S * 2^lsb rounded to an FP32 container holding `bits` significant bits, the exponent floored at
// -126 (so subnormal results are quantized at 2^(-126 - bits + 1)), RZ or RNE; a magnitude of 2^128 or
// more after rounding gives Inf (the tensor cores overflow to Inf also under RZ).
// emin and inf_exp: the output format's smallest normal exponent and the exponent from which it overflows to
// Inf (FP32: -126, 128; FP16: -14, 16).
inline float RoundFused(bool neg, u128 s, int lsb, int bits, bool rne, int emin = -126, int inf_exp = 128) {
  if (s == 0) return 0.0f;
  int e = Msb128(s) + lsb;
  if (e < emin) e = emin;
  const int q = e - (bits - 1);  // quantum exponent
  const u128 kept = ShiftRound(s, lsb - q, rne);
  const double v = std::ldexp(static_cast<double>(kept), q);  // kept <= 2^bits: exact in double
  if (v >= std::ldexp(1.0, inf_exp))
    return neg ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  const float f = static_cast<float>(v);
  return neg ? -f : f;
}

// split=hmma (FusedParams::hmma_split): pa, pb are a, b with K reordered inside each 32 so that the two
// HMMA steps are contiguous, pm the model without the split; false (nothing done) for other models.
bool SplitHmma(const GemmOperand& a, const GemmOperand& b, const AccumModel& model, GemmOperand& pa, GemmOperand& pb,
               AccumModel& pm);

}  // namespace qmx::detail
