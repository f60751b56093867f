// quantize.cc: the fast tensor quantizer of qmx/quantize.h (MX kernels for UE8M0 rules; FP32 scaling, then the
// conversion kernel, for FP32 and NVFP4 rules; OpenMP over strips of blocks), dequantization and statistics.
// Specs: quantize_spec.cc; packing and layouts: quantize_pack.cc; the reference: quantize_ref.cc.
#include "qmx/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "qmx/error.h"
#include "qmx/mx.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "quantize/quantize_internal.h"

namespace qmx {

// ------------------------------------------------------------------ shared helpers (quantize_internal.h)

namespace detail {

QuantizedTensor MakeShell(const TensorView& x, const QuantSpec& spec) {
  ValidateQuantSpec(spec);
  if (!IsFastSource(x.dtype))
    throw Error(std::string("quantization reads fp32, bf16 or fp16 tensors, not ") + DTypeName(x.dtype) +
                " (convert FP64 data to FP32 first: that rounding is outside the emulated recipe)");
  QuantizedTensor q;
  q.spec = spec;
  q.rows = x.rows;
  q.cols = x.cols;
  q.shape = {x.rows, x.cols};
  const BlockExtent be = ResolveBlock(spec, x.rows, x.cols);
  q.scale_rows = (x.rows + be.rows - 1) / be.rows;
  q.scale_cols = (x.cols + be.cols - 1) / be.cols;
  q.codes.assign(x.rows * x.cols, 0);
  q.scales.assign(q.scale_rows * q.scale_cols * ScaleBytes(ScaleFormatOf(spec.rule)), 0);
  return q;
}

float TensorAmax(const TensorView& x, NanPolicy policy) {
  // block-nan and ignore: finite elements only (non-finite blocks are marked on their own); te and
  // ignore-nan: fmaxf, which skips NaN and keeps Inf.
  const size_t n = x.rows * x.cols;
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(SourceValueF32(x.dtype, x.data, i));
    if (std::isnan(a)) continue;
    if (std::isinf(a) && (policy == NanPolicy::kBlockNan || policy == NanPolicy::kIgnore)) continue;
    m = std::max(m, a);
  }
  return m;
}

MultiplyScale BlockMultiplyScale(const QuantSpec& spec, float block_amax, bool has_nan, bool has_inf, float s_enc) {
  MultiplyScale r{};
  const bool special = has_nan || has_inf;
  if (special && spec.nan == NanPolicy::kBlockNan) {
    r.nan_block = true;
    return r;
  }
  // block_amax: ignore -> finite only; ignore-nan -> Inf included (passed in by the caller).
  const float destmax = static_cast<float>(Limits(spec.elem).max_finite);
  if (ScaleFormatOf(spec.rule) == ScaleFormat::kE4m3) {
    const uint8_t s8 = Nvfp4BlockScale(block_amax, s_enc, spec.rule);
    r.stored = s8;
    r.multiplier = Nvfp4EncodeFactor(s8, s_enc, spec.rule);
    return r;
  }
  const Fp32Scale s = Fp32ScaleFromAmax(block_amax, destmax, spec.rule == ScaleRule::kFp32Pow2, spec.margin);
  uint32_t bits;
  std::memcpy(&bits, &s.decode, 4);
  r.stored = bits;
  r.multiplier = s.encode;
  return r;
}

void StoreScale(const QuantSpec& spec, uint8_t* scales, size_t index, uint32_t stored, bool nan_block) {
  if (ScaleFormatOf(spec.rule) == ScaleFormat::kFp32) {
    const uint32_t b = nan_block ? 0x7FC00000u : stored;
    std::memcpy(scales + 4 * index, &b, 4);
  } else if (ScaleFormatOf(spec.rule) == ScaleFormat::kE4m3) {
    scales[index] = nan_block ? 0x7F : static_cast<uint8_t>(stored);
  } else {
    scales[index] = static_cast<uint8_t>(stored);
  }
}

uint8_t BlockNanCode(const Format& elem) { return elem.HasNan() ? static_cast<uint8_t>(elem.CanonicalNan()) : 0; }

MxSpec MxSpecOf(const QuantSpec& spec, size_t block) {
  MxSpec ms;
  ms.elem = spec.elem;
  ms.rule = spec.rule;
  ms.cast = spec.cast;
  ms.nan = spec.nan;
  ms.scaling = spec.scaling;
  ms.block = static_cast<int>(block);
  return ms;
}

}  // namespace detail

// ------------------------------------------------------------------ fast quantization

namespace {

using detail::MultiplyScale;

struct Ctx {
  const TensorView* x;
  const QuantSpec* spec;
  BlockExtent be;
  size_t scale_cols;
  float s_enc;             // NVFP4 tensor encode scale
  bool have_fixed;         // QuantizeWithScale: one given FP32 scale
  Fp32Scale fixed;
};

size_t ElemSize(DType t) { return t == DType::kF32 ? 4 : 2; }

// One strip of block rows [r0, r0 + h): codes (row-major, the strip's rows) and its scale row.
void QuantizeStrip(const Ctx& c, size_t strip, uint8_t* codes, uint8_t* scales) {
  const TensorView& x = *c.x;
  const QuantSpec& spec = *c.spec;
  const size_t r0 = strip * c.be.rows, h = std::min(c.be.rows, x.rows - r0);
  const size_t cols = x.cols, nb = c.scale_cols;
  const bool sr = IsStochastic(spec.cast.rounding);
  const size_t esize = ElemSize(x.dtype);
  const uint8_t* src = static_cast<const uint8_t*>(x.data);
  // Gather in block order: block j holds rows r0..r0+h, cols j*bc..; elements row-major inside the block.
  std::vector<uint8_t> gathered(h * cols * esize);
  std::vector<uint32_t> rbits(sr ? h * cols : 0);
  std::vector<size_t> pos(h * cols);  // gathered index -> offset within the strip (row-major)
  size_t g = 0;
  for (size_t j = 0; j < nb; ++j) {
    const size_t c0 = j * c.be.cols, w = std::min(c.be.cols, cols - c0);
    for (size_t r = 0; r < h; ++r) {
      const size_t off = r * cols + c0;
      std::memcpy(&gathered[g * esize], src + ((r0 * cols) + off) * esize, w * esize);
      for (size_t t = 0; t < w; ++t) {
        pos[g + t] = off + t;
        if (sr) rbits[g + t] = RandomBitsForElement(spec.seed, r0 * cols + off + t);
      }
      g += w;
    }
  }
  std::vector<uint8_t> out(h * cols);
  if (IsPow2Rule(spec.rule)) {
    MxSpec ms = detail::MxSpecOf(spec, 1);
    const size_t full_w = c.be.cols;
    const size_t nfull = cols / full_w, last_w = cols - nfull * full_w;
    if (nfull > 0) {
      ms.block = static_cast<int>(h * full_w);
      QuantizeMx(x.dtype, gathered.data(), nfull * h * full_w, ms, out.data(), scales, {0, 0, sr ? rbits.data() : nullptr});
    }
    if (last_w > 0) {
      const size_t at = nfull * h * full_w;
      ms.block = static_cast<int>(h * last_w);
      QuantizeMx(x.dtype, gathered.data() + at * esize, h * last_w, ms, out.data() + at, scales + nfull,
                 {0, 0, sr ? rbits.data() + at : nullptr});
    }
  } else {
    // FP32 / NVFP4: per block amax -> scale -> fl32(x * multiplier), then one conversion call.
    std::vector<float> y(h * cols);
    std::vector<uint8_t> nan_block(nb, 0);
    size_t at = 0;
    for (size_t j = 0; j < nb; ++j) {
      const size_t len = h * std::min(c.be.cols, cols - j * c.be.cols);
      float amax = 0.0f;
      bool has_nan = false, has_inf = false;
      for (size_t t = 0; t < len; ++t) {
        const float a = std::fabs(SourceValueF32(x.dtype, gathered.data(), at + t));
        if (std::isnan(a)) has_nan = true;
        else if (std::isinf(a)) has_inf = true;
        else amax = std::max(amax, a);
      }
      if (has_inf && spec.nan == NanPolicy::kIgnoreNan) amax = HUGE_VALF;
      MultiplyScale ms;
      if (c.have_fixed) {
        uint32_t b;
        std::memcpy(&b, &c.fixed.decode, 4);
        ms = MultiplyScale{b, c.fixed.encode, false};
      } else {
        ms = detail::BlockMultiplyScale(spec, amax, has_nan, has_inf, c.s_enc);
      }
      detail::StoreScale(spec, scales, j, ms.stored, ms.nan_block);
      nan_block[j] = ms.nan_block;
      for (size_t t = 0; t < len; ++t) y[at + t] = SourceValueF32(x.dtype, gathered.data(), at + t) * ms.multiplier;
      at += len;
    }
    ConvertToCodes(DType::kF32, y.data(), y.size(), spec.elem, spec.cast, out.data(), {0, 0, sr ? rbits.data() : nullptr});
    const uint8_t fill = detail::BlockNanCode(spec.elem);
    at = 0;
    for (size_t j = 0; j < nb; ++j) {
      const size_t len = h * std::min(c.be.cols, cols - j * c.be.cols);
      if (nan_block[j]) std::memset(out.data() + at, fill, len);
      at += len;
    }
  }
  for (size_t t = 0; t < out.size(); ++t) codes[pos[t]] = out[t];
}

QuantizedTensor QuantizeImpl(const TensorView& x, const QuantSpec& spec, Exec exec, const Fp32Scale* fixed,
                             const float* given_amax = nullptr) {
  QuantizedTensor q = detail::MakeShell(x, spec);
  if (x.rows == 0 || x.cols == 0) return q;
  Ctx c{&x, &spec, ResolveBlock(spec, x.rows, x.cols), q.scale_cols, 1.0f, fixed != nullptr, fixed ? *fixed : Fp32Scale{}};
  if (ScaleFormatOf(spec.rule) == ScaleFormat::kE4m3 || (ScaleFormatOf(spec.rule) == ScaleFormat::kFp32 && q.scale_rows * q.scale_cols == 1))
    q.tensor_amax = detail::TensorAmax(x, spec.nan);
  if (given_amax) q.tensor_amax = *given_amax;
  if (ScaleFormatOf(spec.rule) == ScaleFormat::kE4m3) {
    c.s_enc = Nvfp4TensorEncodeScale(q.tensor_amax);
    q.tensor_decode = 1.0f / c.s_enc;
  }
  const size_t sbytes = ScaleBytes(ScaleFormatOf(spec.rule));
  if (IsPow2Rule(spec.rule) && c.be.rows * c.be.cols > (size_t{1} << 30))
    throw Error("UE8M0 blocks hold at most 2^30 elements; this tensor's " + DescribeBlock(spec) + " block holds " +
                std::to_string(c.be.rows * c.be.cols));
  // Row-wise UE8M0 blocks that tile each row exactly: the MX kernel runs over the whole tensor at once.
  if (IsPow2Rule(spec.rule) && c.be.rows == 1 && x.cols % c.be.cols == 0) {
    const MxSpec ms = detail::MxSpecOf(spec, c.be.cols);
    QuantizeMx(x.dtype, x.data, x.rows * x.cols, ms, q.codes.data(), q.scales.data(), {spec.seed, 0, nullptr}, exec);
    return q;
  }
  const int64_t strips = static_cast<int64_t>(q.scale_rows);
  const size_t strip_elems = c.be.rows * x.cols;
  if (exec == Exec::kParallel && strips > 1) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t s = 0; s < strips; ++s)
      QuantizeStrip(c, static_cast<size_t>(s), q.codes.data() + static_cast<size_t>(s) * strip_elems,
                    q.scales.data() + static_cast<size_t>(s) * q.scale_cols * sbytes);
  } else {
    for (int64_t s = 0; s < strips; ++s)
      QuantizeStrip(c, static_cast<size_t>(s), q.codes.data() + static_cast<size_t>(s) * strip_elems,
                    q.scales.data() + static_cast<size_t>(s) * q.scale_cols * sbytes);
  }
  return q;
}

}  // namespace

QuantizedTensor Quantize(const TensorView& x, const QuantSpec& spec, Exec exec) {
  if (spec.delayed) throw Error("spec '" + spec.name + "' uses delayed scaling: quantize through a DelayedScaling state (CLI: --amax-history)");
  return QuantizeImpl(x, spec, exec, nullptr);
}

QuantizedTensor QuantizeWithScale(const TensorView& x, const QuantSpec& spec, Fp32Scale scale, Exec exec) {
  if (ScaleFormatOf(spec.rule) != ScaleFormat::kFp32 || spec.block_rows != 0 || spec.block_cols != 0)
    throw Error("a given scale needs a per-tensor spec with an FP32 scale rule, not '" + spec.name + "'");
  return QuantizeImpl(x, spec, exec, &scale);
}

void CheckNvfp4Spec(const QuantSpec& spec) {
  if (ScaleFormatOf(spec.rule) != ScaleFormat::kE4m3)
    throw Error("a given tensor amax needs an NVFP4 scale rule (nvfp4, nvfp4-div), not '" +
                std::string(ScaleRuleName(spec.rule)) + "'");
}

QuantizedTensor QuantizeNvfp4WithAmax(const TensorView& x, const QuantSpec& spec, float tensor_amax, Exec exec) {
  CheckNvfp4Spec(spec);
  return QuantizeImpl(x, spec, exec, nullptr, &tensor_amax);
}

QuantizedTensor QuantizeDelayed(const TensorView& x, const QuantSpec& spec, DelayedScaling& state, Exec exec) {
  QuantizedTensor q = QuantizeWithScale(x, spec, state.scale(), exec);
  state.Push(q.tensor_amax);
  return q;
}

// ------------------------------------------------------------------ dequantization

namespace {

void DequantizeRows(const QuantizedTensor& q, size_t r_begin, size_t r_end, const float* table, float* out) {
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  for (size_t r = r_begin; r < r_end; ++r) {
    const size_t sr = r / be.rows;
    for (size_t c = 0; c < q.cols; ++c) {
      const size_t sc = c / be.cols, i = r * q.cols + c;
      const double v = table[q.codes[i]];
      float f;
      if (sf == ScaleFormat::kUe8m0) {
        const uint8_t s = q.scales[sr * q.scale_cols + sc];
        f = s == 0xFF ? std::nanf("") : static_cast<float>(v * std::ldexp(1.0, static_cast<int>(s) - 127));
      } else if (sf == ScaleFormat::kE4m3) {
        f = static_cast<float>(v * Nvfp4DecodeScale(q.scales[sr * q.scale_cols + sc], q.tensor_amax));
      } else {
        f = static_cast<float>(v * q.ScaleAt(sr, sc));
      }
      out[i] = f;
    }
  }
}

std::vector<float> CodeTable(const Format& elem) {
  const std::vector<float> t = DecodeTableF32(elem);
  std::vector<float> table(256);
  for (int c = 0; c < 256; ++c) table[static_cast<size_t>(c)] = t[static_cast<size_t>(c) & elem.CodeMask()];
  return table;
}

}  // namespace

void Dequantize(const QuantizedTensor& q, float* out, Exec exec) {
  ValidateQuantSpec(q.spec);
  const std::vector<float> table = CodeTable(q.spec.elem);
  const int64_t rows = static_cast<int64_t>(q.rows);
  if (exec == Exec::kParallel) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) DequantizeRows(q, static_cast<size_t>(r), static_cast<size_t>(r) + 1, table.data(), out);
  } else {
    DequantizeRows(q, 0, q.rows, table.data(), out);
  }
}

void FakeQuantize(const TensorView& x, const QuantSpec& spec, float* out, Exec exec) {
  const QuantizedTensor q = Quantize(x, spec, exec);
  Dequantize(q, out, exec);
}

// ------------------------------------------------------------------ statistics

QuantStats ComputeStats(const TensorView& x, const QuantizedTensor& q) {
  QuantStats st;
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  st.elements = q.rows * q.cols;
  st.scale_histogram.assign(256, 0);
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  const double maxv = Limits(q.spec.elem).max_finite;
  for (size_t sr = 0; sr < q.scale_rows; ++sr) {
    for (size_t sc = 0; sc < q.scale_cols; ++sc) {
      const size_t i = sr * q.scale_cols + sc;
      uint32_t bin;
      bool nan_scale;
      if (sf == ScaleFormat::kFp32) {
        uint32_t b;
        std::memcpy(&b, &q.scales[4 * i], 4);
        bin = (b >> 23) & 0xFF;
        nan_scale = bin == 0xFF;
      } else {
        bin = q.scales[i];
        nan_scale = sf == ScaleFormat::kUe8m0 ? (bin == 0xFF) : ((bin & 0x7F) == 0x7F);
      }
      ++st.scale_histogram[bin];
      st.nan_blocks += nan_scale;
    }
  }
  for (size_t r = 0; r < q.rows; ++r) {
    for (size_t c = 0; c < q.cols; ++c) {
      const size_t i = r * q.cols + c;
      const float v = SourceValueF32(x.dtype, x.data, i);
      if (std::isnan(v)) { ++st.nan_inputs; continue; }
      if (std::isinf(v)) { ++st.inf_inputs; continue; }
      const float s = q.ScaleAt(r / be.rows, c / be.cols);
      const double dec = DecodeToDouble(q.spec.elem, q.codes[i]);
      if (v != 0 && dec == 0) ++st.flushed_to_zero;
      // Saturated: the scaled magnitude exceeds the element's max (checked against the decode scale).
      const double scale = sf == ScaleFormat::kE4m3 ? Nvfp4DecodeScale(q.scales[(r / be.rows) * q.scale_cols + c / be.cols], q.tensor_amax) : s;
      if (std::isfinite(scale) && scale > 0 && std::fabs(static_cast<double>(v)) > maxv * scale) ++st.saturated;
    }
  }
  return st;
}

}  // namespace qmx
