// bfp.cc: Tenstorrent's shared-exponent block formats (BFP8_b, BFP4_b, BFP2_b) as quantizer specs
// (ScaleRule::kBfp; docs/numerics.md "Tenstorrent block floating point"), as tt-metal's host packer and
// unpacker compute them (tt_metal/impl/data_format/blockfloat_common.cpp and bfloat8/4/2.cpp, read at
// 6f2b15d0 and 511dd7ed; docs/REFERENCES.md section 11). Every step works on FP32 bit patterns.
#include <algorithm>

#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/quantize.h"
#include "float_bits.h"
#include "quantize/quantize_internal.h"

namespace qmx {

using detail::F32Bits;
using detail::F32FromBits;

int detail::BfpMagnitudeBits(const Format& elem) { return elem.man_bits + 1; }

uint8_t detail::BfpElementCode(uint32_t bits, uint32_t shared_exp, int w, bool truncate) {
  const uint32_t exp = (bits >> 23) & 0xFFu;
  if (exp == 0) return 0;  // zero and FP32 subnormals: code 0
  const uint32_t sig = (1u << 23) | (bits & 0x7FFFFFu);
  const uint32_t d = shared_exp - exp;  // the shared exponent is the block's largest: d >= 0
  uint32_t m = d >= 32 ? 0u : sig >> d;  // the alignment shift truncates: no sticky bit
  const int shift = 24 - w;
  const uint32_t rest = m & ((1u << shift) - 1u), tie = 1u << (shift - 1);
  m >>= shift;
  if (!truncate && (rest > tie || (rest == tie && (m & 1u) != 0))) ++m;  // ties to even on what is left
  const uint32_t max = (1u << w) - 1u;
  if (m > max) m = max;  // a rounding past the top saturates (the exponent is not bumped)
  const uint32_t sign = m == 0 ? 0u : bits >> 31;  // a zero magnitude drops its sign
  return static_cast<uint8_t>((sign << w) | m);
}

float detail::BfpDecode(uint8_t code, uint32_t shared_exp, int w) {
  const uint32_t sign = (code >> w) & 1u, max = (1u << w) - 1u;
  uint32_t man = code & max;
  if (man == 0) return F32FromBits(sign << 31);
  // Normalise: shift until the top magnitude bit is set, counting the shifts; then drop that bit.
  int shift_cnt = 0;
  while ((man & (1u << (w - 1))) == 0) {
    man <<= 1;
    ++shift_cnt;
  }
  man = (man << 1) & max;
  if (static_cast<uint32_t>(shift_cnt) > shared_exp) return 0.0f;  // below the exponent field: +0, sign dropped
  // The exponent field shared_exp - shift_cnt as written: 0 reads as an FP32 subnormal, 255 as Inf or NaN.
  return F32FromBits((sign << 31) | ((shared_exp - static_cast<uint32_t>(shift_cnt)) << 23) | (man << (23 - w)));
}

QuantizedTensor detail::QuantizeBfp(const TensorView& x, const QuantSpec& spec) {
  QuantizedTensor q = MakeShell(x, spec);
  if (x.rows == 0 || x.cols == 0) return q;
  const BlockExtent be = ResolveBlock(spec, x.rows, x.cols);
  const int w = BfpMagnitudeBits(spec.elem);
  const bool truncate = spec.cast.rounding == Rounding::kRz;
  for (size_t br = 0; br < q.scale_rows; ++br)
    for (size_t bc = 0; bc < q.scale_cols; ++bc) {
      const size_t r1 = std::min(x.rows, (br + 1) * be.rows), c1 = std::min(x.cols, (bc + 1) * be.cols);
      uint32_t shared = 0;  // the largest FP32 exponent field: 0 for zeros and subnormals, 255 for Inf / NaN
      for (size_t r = br * be.rows; r < r1; ++r)
        for (size_t c = bc * be.cols; c < c1; ++c)
          shared = std::max(shared, (F32Bits(SourceValueF32(x.dtype, x.data, r * x.cols + c)) >> 23) & 0xFFu);
      q.scales[br * q.scale_cols + bc] = static_cast<uint8_t>(shared);
      for (size_t r = br * be.rows; r < r1; ++r)
        for (size_t c = bc * be.cols; c < c1; ++c)
          q.codes[r * x.cols + c] =
              BfpElementCode(F32Bits(SourceValueF32(x.dtype, x.data, r * x.cols + c)), shared, w, truncate);
    }
  return q;
}

}  // namespace qmx
