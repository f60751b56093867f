// quantize_ref.cc: the reference tensor quantizer (qmx/quantize.h), written independently of the fast
// path: it walks the blocks of the scale grid one by one, reads elements straight from the source by
// (row, col), sets UE8M0 blocks through the MX reference on a copy of the block and rounds FP32/NVFP4
// elements one at a time with the reference routine.
#include <cmath>
#include <cstring>
#include <vector>

#include "qmx/error.h"
#include "qmx/mx.h"
#include "qmx/quantize.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "quantize/quantize_internal.h"

namespace qmx {

namespace {

QuantizedTensor QuantizeRefImpl(const TensorView& x, const QuantSpec& spec, const float* given_amax) {
  if (spec.delayed) throw Error("spec '" + spec.name + "' uses delayed scaling");
  if (spec.rule == ScaleRule::kBfp) return detail::QuantizeBfp(x, spec);  // one definition: tt-metal's packer
  QuantizedTensor q = detail::MakeShell(x, spec);
  if (x.rows == 0 || x.cols == 0) return q;
  const BlockExtent be = ResolveBlock(spec, x.rows, x.cols);
  const ScaleFormat sf = ScaleFormatOf(spec.rule);
  const size_t esize = DTypeSize(x.dtype);
  const bool sr = IsStochastic(spec.cast.rounding);
  const float destmax = static_cast<float>(Limits(spec.elem).max_finite);
  float s_enc = 1.0f;
  if (sf == ScaleFormat::kE4m3 || (sf == ScaleFormat::kFp32 && q.scale_rows * q.scale_cols == 1))
    q.tensor_amax = detail::TensorAmax(x, spec.nan);
  if (given_amax) q.tensor_amax = *given_amax;
  if (sf == ScaleFormat::kE4m3 && !spec.row_scaled) {
    s_enc = Nvfp4TensorScale(q.tensor_amax, spec);
    q.tensor_decode = Nvfp4TensorDecode(s_enc, spec.rule);
  }
  // Row-scaled: each line's amax, gathered into its own 1 x n tensor, by the same TensorAmax.
  std::vector<float> line_enc;
  if (spec.row_scaled) {
    const bool by_col = spec.axis == Axis::kCol;
    const size_t lines = by_col ? x.cols : x.rows, len = by_col ? x.rows : x.cols;
    std::vector<uint8_t> line(len * esize);
    for (size_t l = 0; l < lines; ++l) {
      for (size_t t = 0; t < len; ++t)
        std::memcpy(&line[t * esize], static_cast<const uint8_t*>(x.data) + (by_col ? t * x.cols + l : l * x.cols + t) * esize,
                    esize);
      q.line_amax[l] = detail::TensorAmax({x.dtype, line.data(), 1, len}, spec.nan);
      line_enc.push_back(Nvfp4TensorScale(q.line_amax[l], spec));
    }
  }
  for (size_t br = 0; br < q.scale_rows; ++br) {
    for (size_t bc = 0; bc < q.scale_cols; ++bc) {
      // Row-scaled: a 1-D block lies in one line, whose S_enc and amax replace the tensor's.
      const size_t line = spec.axis == Axis::kCol ? bc : br;
      if (spec.row_scaled) s_enc = line_enc[line];
      const float second_amax = spec.row_scaled ? q.line_amax[line] : q.tensor_amax;
      // The block's elements in row-major order, their flat indices and random bits; lane[t], element t's place
      // in the whole block (row-major over be.rows x be.cols: a block cut short by the tensor's edge keeps its
      // elements' places, which an amax order's tree reads).
      std::vector<size_t> idx, lane;
      for (size_t r = br * be.rows; r < std::min(x.rows, (br + 1) * be.rows); ++r)
        for (size_t c = bc * be.cols; c < std::min(x.cols, (bc + 1) * be.cols); ++c) {
          idx.push_back(r * x.cols + c);
          lane.push_back((r - br * be.rows) * be.cols + (c - bc * be.cols));
        }
      std::vector<uint32_t> bits(idx.size());
      for (size_t t = 0; t < idx.size(); ++t) bits[t] = sr ? RandomBitsForElement(spec.seed, idx[t]) : 0;
      const size_t si = br * q.scale_cols + bc;
      if (sf == ScaleFormat::kUe8m0) {
        // Under a tree order the block is laid out on all its lanes, a missing element a +0 (whose code is
        // dropped), so that the tree compares what a kernel's lanes hold; otherwise packed (a fold walks the
        // elements there are).
        const bool lanes = IsTreeOrder(spec.amax_order);
        const size_t len = lanes ? be.rows * be.cols : idx.size();
        std::vector<uint8_t> copy(len * esize, 0), codes(len);
        std::vector<uint32_t> lane_bits(len, 0);
        for (size_t t = 0; t < idx.size(); ++t) {
          const size_t at = lanes ? lane[t] : t;
          std::memcpy(&copy[at * esize], static_cast<const uint8_t*>(x.data) + idx[t] * esize, esize);
          lane_bits[at] = bits[t];
        }
        QuantizeMxRef(x.dtype, copy.data(), len, detail::MxSpecOf(spec, len), codes.data(), &q.scales[si],
                      {0, 0, lane_bits.data()});
        for (size_t t = 0; t < idx.size(); ++t) q.codes[idx[t]] = codes[lanes ? lane[t] : t];
        continue;
      }
      // FP32 / NVFP4: amax in double over the block per the NaN policy, the scale, then each element.
      double amax = 0;
      bool has_nan = false, has_inf = false;
      for (size_t t : idx) {
        const double v = SourceValueF32(x.dtype, x.data, t);
        if (std::isnan(v)) has_nan = true;
        else if (std::isinf(v)) has_inf = true;
        else amax = std::max(amax, std::fabs(v));
      }
      if (spec.amax_order != AmaxOrder::kAny) {  // a comparison reduction (qmx/scale.h AmaxOrder)
        // A tree on the block's lanes (a missing element +0), a fold over the elements there are.
        const bool lanes = IsTreeOrder(spec.amax_order);
        std::vector<double> mags(lanes ? be.rows * be.cols : idx.size(), 0.0);
        for (size_t t = 0; t < idx.size(); ++t)
          mags[lanes ? lane[t] : t] = std::fabs(SourceValueF32(x.dtype, x.data, idx[t]));
        const double r = OrderedAmax(mags.data(), mags.size(), mags.size(), spec.amax_order);
        has_nan = std::isnan(r);
        has_inf = std::isinf(r);
        amax = has_nan || has_inf ? 0.0 : r;
      }
      float a = static_cast<float>(amax);  // exact: the max of FP32 values
      if (has_inf && spec.nan == NanPolicy::kIgnoreNan) a = HUGE_VALF;
      if (IsNvfp4FourOverSix(spec.rule) && !has_nan && !has_inf) {  // two candidates per block: no single multiplier
        std::vector<float> xb(idx.size());
        std::vector<uint8_t> codes(idx.size());
        for (size_t t = 0; t < idx.size(); ++t) xb[t] = SourceValueF32(x.dtype, x.data, idx[t]);
        q.scales[si] = Nvfp4FourOverSixBlock(xb.data(), xb.size(), a, s_enc, second_amax, spec.rule, spec.cast, codes.data(),
                                             spec.error_order);
        for (size_t t = 0; t < idx.size(); ++t) q.codes[idx[t]] = codes[t];
        continue;
      }
      const detail::MultiplyScale ms = detail::BlockMultiplyScale(spec, destmax, a, has_nan, has_inf, s_enc);
      detail::StoreScale(spec, q.scales.data(), si, ms.stored, ms.nan_block);
      for (size_t t = 0; t < idx.size(); ++t) {
        if (ms.nan_block) {
          q.codes[idx[t]] = detail::BlockNanCode(spec.elem);
          continue;
        }
        // fl32(x * multiplier): the double product of two FP32 values is exact, one rounding to FP32.
        const float y = static_cast<float>(static_cast<double>(SourceValueF32(x.dtype, x.data, idx[t])) *
                                           static_cast<double>(ms.multiplier));
        q.codes[idx[t]] = static_cast<uint8_t>(ConvertF32(y, spec.elem, spec.cast, bits[t]));
      }
    }
  }
  return q;
}

}  // namespace

QuantizedTensor QuantizeRef(const TensorView& x, const QuantSpec& spec) { return QuantizeRefImpl(x, spec, nullptr); }

QuantizedTensor QuantizeNvfp4WithAmaxRef(const TensorView& x, const QuantSpec& spec, float tensor_amax) {
  CheckNvfp4Spec(spec);
  if (spec.row_scaled) throw Error("a row-scaled NVFP4 spec takes each line's amax from the data, not a given tensor amax");
  return QuantizeRefImpl(x, spec, &tensor_amax);
}

void DequantizeRef(const QuantizedTensor& q, float* out) { DequantizeRef(q, out, DequantOrder::kByRule); }

void DequantizeRef(const QuantizedTensor& q, float* out, DequantOrder order) { DequantizeRef(q, out, order, false); }

void DequantizeRef(const QuantizedTensor& q, float* out, DequantOrder order, bool ftz) {
  const auto flush = [ftz](double x) { return detail::FlushSubnormal(x, ftz); };
  detail::CheckLineAmax(q);
  detail::CheckDequantOrder(q, order);
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  for (size_t r = 0; r < q.rows; ++r) {
    for (size_t c = 0; c < q.cols; ++c) {
      const size_t i = r * q.cols + c, sr = r / be.rows, sc = c / be.cols;
      if (q.spec.rule == ScaleRule::kBfp) {  // tt-metal's unpacker on the shared exponent
        out[i] = static_cast<float>(flush(detail::BfpDecode(q.codes[i], q.scales[sr * q.scale_cols + sc],
                                                            detail::BfpMagnitudeBits(q.spec.elem))));
        continue;
      }
      const double v = DecodeToDouble(q.spec.elem, q.codes[i]);
      double scale;
      if (sf == ScaleFormat::kUe8m0) {  // UE8M0, or the spec's scale_format
        scale = MxScaleValue(MxScaleFormat(q.spec), q.scales[sr * q.scale_cols + sc]);
      } else if (sf == ScaleFormat::kE4m3) {
        scale = Nvfp4DecodeScale(q.scales[sr * q.scale_cols + sc], q.SecondLevelAmax(r, c), q.spec, order);
      } else {
        scale = q.ScaleAt(sr, sc);
      }
      out[i] = static_cast<float>(flush(static_cast<float>(v * flush(scale))));
    }
  }
}

}  // namespace qmx
