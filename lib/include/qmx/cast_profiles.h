// qmx/cast_profiles.h: other libraries' FP32 -> FP8 / FP6 / FP4 / E8M0 casts, bit for bit, beside the OCP
// casts of the reference routine, so `convert --profile` and `diff` show where stacks disagree. Each
// profile is replayed against its library's own output in golden/casts (ml_dtypes 0.6.0, torch 2.11 on
// CPU and CUDA, onnx 1.23.1's reference Cast); lib/research/library-casts.md quotes the code of each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qmx/format.h"

namespace qmx {

// The profiles and the formats each casts to:
//   ocp-sat      the reference routine, RNE, OFP8 SAT (e4m3 e5m2 ue8m0 e2m1 e2m3 e3m2, and the FNUZ formats
//                e4m3fnuz e5m2fnuz e4m3b11fnuz: +-max, the usable maximum 240 of e4m3fnuz)
//   ocp-nosat    the reference routine, RNE, OFP8 NONSAT (e4m3 e5m2 e4m3fnuz e5m2fnuz e4m3b11fnuz)
//   ml-dtypes    np.astype(ml_dtypes.float8_e4m3fn, ...) (e4m3 e5m2 ue8m0 e2m1 e2m3 e3m2 e4m3fnuz e5m2fnuz
//                e4m3b11fnuz e4m3:special=ieee e3m4:special=ieee): RNE, never saturating FP8 (e4m3 overflow
//                and Inf -> NaN, e5m2 -> Inf), NaN -> 0x7F / 0x7E with its sign; the FNUZ formats: NaN,
//                Inf and overflow -> 0x80, -0 and negatives rounding to zero -> 0x00; the IEEE-like
//                float8_e4m3 and float8_e3m4: overflow -> Inf, NaN -> the quiet NaN (0x7C, 0x78) with its
//                sign; FP6/FP4 saturate (Inf too) and take NaN to the zero of the opposite sign; E8M0:
//                zero, negatives, Inf and NaN -> 0xFF, ties up, FP32 subnormals rounded as a linear field
//                (above 2^-127 -> 2^-126)
//   pytorch      tensor.to(torch.float8_e4m3fn / float8_e5m2 / float8_e8m0fnu / float8_e4m3fnuz /
//                float8_e5m2fnuz) (e4m3 e5m2 ue8m0 e4m3fnuz e5m2fnuz), CPU and CUDA alike: as ml-dtypes
//                except e5m2 NaN -> 0x7F with its sign, and E8M0 (c10's fp8e8m0fnu_from_fp32_value) takes
//                |x|, gives zero 0x00 and overflow 0xFF
//   onnx         Cast with saturate=1, round_mode="up" (e4m3 e5m2 ue8m0 e2m1): FP8 clipped to +-max
//                before rounding (Inf -> +-max), NaN as ml-dtypes; E8M0 rounds the exponent up on any
//                fraction bit, |x|, zero 0x00, saturating at 2^127 (Inf and NaN still 0xFF); FP4 as
//                ml-dtypes
//   onnx-nosat   Cast with saturate=0 (e4m3 e5m2 e2m1): as ml-dtypes
//   onnx-nearest Cast to FLOAT8E8M0 with round_mode="nearest" (ue8m0): c10's rounding, saturating at 2^127
//   onnx-down    Cast to FLOAT8E8M0 with round_mode="down" (ue8m0): the exponent field truncated
std::vector<std::string> CastProfileNames();

class CastProfile {
 public:
  // Throws qmx::Error for an unknown profile (listing them) or a format it does not cast to (listing those).
  CastProfile(const std::string& name, const Format& dst);
  uint8_t operator()(float x) const;  // the code, as the library writes it
  const std::string& name() const { return name_; }
  const Format& format() const { return dst_; }

 private:
  std::string name_;
  Format dst_;
  int kind_;
};
std::vector<Format> CastProfileFormats(const std::string& profile);

// x[0..n) under `profile` into dst (OpenMP over chunks; the same codes on any thread count).
void CastWithProfile(const CastProfile& profile, const float* x, size_t n, uint8_t* out);

}  // namespace qmx
