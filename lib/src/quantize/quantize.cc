// quantize.cc: the fast tensor quantizer of qmx/quantize.h (MX kernels for UE8M0 rules; FP32 scaling, then the
// conversion kernel, for FP32 and NVFP4 rules; OpenMP over strips of blocks), dequantization and statistics.
// Specs: quantize_spec.cc; packing and layouts: quantize_pack.cc; the reference: quantize_ref.cc.
#include "qmx/quantize.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include <omp.h>

#include "qmx/error.h"
#include "qmx/mx.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "quantize/quantize_internal.h"
#include "scale/scale_core.h"

namespace qmx {

// ------------------------------------------------------------------ shared helpers (quantize_internal.h)

namespace detail {

QuantizedTensor MakeShell(const TensorView& x, const QuantSpec& spec, bool zero_codes, bool host_buffers) {
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
  if (host_buffers) {
    if (zero_codes) q.codes.assign(x.rows * x.cols, 0);
    else q.codes.resize(x.rows * x.cols);
    q.scales.assign(q.scale_rows * q.scale_cols * ScaleBytes(ScaleFormatOf(spec.rule)), 0);
  }
  if (spec.row_scaled) q.line_amax.assign(spec.axis == Axis::kCol ? x.cols : x.rows, 0.0f);
  return q;
}

void CheckLineAmax(const QuantizedTensor& q) {
  ValidateQuantSpec(q.spec);
  const size_t lines = q.spec.axis == Axis::kCol ? q.cols : q.rows;
  if (q.spec.row_scaled && q.line_amax.size() != lines)
    throw Error("row-scaled NVFP4 needs one amax per " + std::string(q.spec.axis == Axis::kCol ? "column" : "row") + " (" +
                std::to_string(lines) + "), this tensor has " + std::to_string(q.line_amax.size()) + " line amaxes");
  if (!q.spec.row_scaled && !q.line_amax.empty())
    throw Error(std::to_string(q.line_amax.size()) + " line amaxes are given but the spec is not row-scaled");
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

// The |x| bits TensorAmax counts: below Inf (block-nan, ignore) or up to Inf, NaN skipped (the others).
bool TensorAmaxKeepsInf(NanPolicy policy) { return policy != NanPolicy::kBlockNan && policy != NanPolicy::kIgnore; }

float TensorAmaxFast(const TensorView& x, NanPolicy policy, Exec exec) {
  // The maximum of bit patterns is the maximum of the values, in any order and any split among threads.
  const uint32_t limit = TensorAmaxKeepsInf(policy) ? 0x7F800001u : 0x7F800000u;
  const size_t n = x.rows * x.cols, esize = DTypeSize(x.dtype);
  constexpr size_t kChunk = size_t{1} << 18;
  uint32_t m = 0;
  if (exec == Exec::kParallel && n > kChunk) {
    const int64_t chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) reduction(max : m)
    for (int64_t c = 0; c < chunks; ++c) {
      const size_t start = static_cast<size_t>(c) * kChunk;
      m = std::max(m, simd::AmaxBits(x.dtype, static_cast<const uint8_t*>(x.data) + start * esize, std::min(kChunk, n - start), limit));
    }
  } else {
    m = simd::AmaxBits(x.dtype, x.data, n, limit);
  }
  float f;
  std::memcpy(&f, &m, 4);
  return f;
}

MultiplyScale BlockMultiplyScale(const QuantSpec& spec, float destmax, float block_amax, bool has_nan, bool has_inf, float s_enc) {
  // block_amax: ignore -> finite only; ignore-nan -> Inf included (passed in by the caller).
  // FP32 rules, and NVFP4 on its own formats: the core's E4M3 and E2M1 constants (this runs once a block).
  if (ScaleFormatOf(spec.rule) != ScaleFormat::kE4m3 || (spec.scale_format.empty() && spec.elem == fmt::kE2M1))
    return BlockMultiplyScaleCore(spec.rule, spec.nan, spec.margin, destmax, block_amax, has_nan, has_inf, s_enc,
                                  fmt::kFP32, fmt::kE4M3);
  // Another block-scale format (QuantSpec::scale_format) with its smallest normal and largest values for torchao's
  // clamp, and the elements' largest value for E2M1's 6.
  const Format sf = Nvfp4ScaleFormat(spec);
  const FormatLimits lim = Limits(sf);
  return BlockMultiplyScaleCore(spec.rule, spec.nan, spec.margin, destmax, block_amax, has_nan, has_inf, s_enc,
                                fmt::kFP32, sf, static_cast<float>(lim.min_normal), static_cast<float>(lim.max_finite),
                                Nvfp4ElemMax(spec));
}

void StoreScale(const QuantSpec& spec, uint8_t* scales, size_t index, uint32_t stored, bool nan_block) {
  const ScaleFormat sf = ScaleFormatOf(spec.rule);
  StoreScaleCore(
      sf, scales, index, stored, nan_block,
      sf == ScaleFormat::kE4m3 ? static_cast<uint8_t>(Nvfp4ScaleFormat(spec).CanonicalNan()) : uint8_t{0x7F});
}

uint8_t BlockNanCode(const Format& elem) { return elem.HasNan() ? static_cast<uint8_t>(elem.CanonicalNan()) : 0; }

MxSpec MxSpecOf(const QuantSpec& spec, size_t block) {
  MxSpec ms;
  ms.elem = spec.elem;
  ms.rule = spec.rule;
  ms.cast = spec.cast;
  ms.nan = spec.nan;
  ms.scaling = spec.scaling;
  ms.amax_order = spec.amax_order;
  ms.block = static_cast<int>(block);
  ms.scale_format = MxScaleFormat(spec);
  return ms;
}

}  // namespace detail

// ------------------------------------------------------------------ fast quantization

namespace {

using detail::MultiplyScale;

// The block kernel's arguments for an NVFP4 spec under tensor encode scale s_enc (the kernel repeats
// Nvfp4BlockScale lane by lane and looks each byte's Nvfp4EncodeFactor up in `mult`); the parameters they
// point to live here.
struct Nvfp4Kernel {
  Nvfp4Kernel(const QuantSpec& spec, DType src, float s_enc)
      : p(simd::MakeConvertParams(spec.elem, spec.cast, src)),
        p_e4m3(simd::MakeConvertParams(fmt::kE4M3, CastOptions{}, DType::kF32)),
        mult(128),
        rule(spec.rule) {
    args.p = &p;
    args.policy = spec.nan;
    args.scaling = ElementScaling::kFp32;  // fl32(x * multiplier)
    args.elem_nan = detail::BlockNanCode(spec.elem);
    args.nvfp4 = true;  // the kernel's own NVFP4 scale: the plain rule's unless -div or -torchao
    args.rule = spec.rule == ScaleRule::kNvfp4Div || IsNvfp4Torchao(spec.rule) ? spec.rule : ScaleRule::kNvfp4;
    args.p_e4m3 = &p_e4m3;
    args.mult = mult.data();
    SetEncodeScale(s_enc);
  }
  // A new tensor encode scale (row-scaled NVFP4 sets one per row); the conversion parameters stay.
  void SetEncodeScale(float s_enc) {
    Nvfp4EncodeFactors(s_enc, rule, mult.data());
    args.s_enc = s_enc;
    args.s_m = s_enc * (1.0f / 6.0f);
  }
  Nvfp4Kernel(const Nvfp4Kernel&) = delete;
  Nvfp4Kernel& operator=(const Nvfp4Kernel&) = delete;
  simd::MxKernelArgs For(size_t block) const {
    simd::MxKernelArgs a = args;
    a.block = static_cast<int>(block);
    return a;
  }

 private:
  simd::ConvertParams p, p_e4m3;
  std::vector<float> mult;
  ScaleRule rule;
  simd::MxKernelArgs args{};
};

struct Ctx {
  const TensorView* x;
  const QuantSpec* spec;
  BlockExtent be;
  size_t scale_cols;
  float s_enc;             // NVFP4 tensor encode scale
  bool have_fixed;         // QuantizeWithScale: one given FP32 scale
  Fp32Scale fixed;
  const Nvfp4Kernel* nvfp4;  // NVFP4 specs: the block kernel
  float destmax;             // the element format's largest finite value
};

size_t ElemSize(DType t) { return t == DType::kF32 ? 4 : 2; }

// FP32 values of n source elements times m: fl32(x * m), the product of two FP32 values rounded once.
void ScaleElements(DType t, const uint8_t* src, size_t n, float m, float* y) {
  if (t == DType::kF32) {
    const float* x = reinterpret_cast<const float*>(src);
    for (size_t i = 0; i < n; ++i) y[i] = x[i] * m;
  } else {
    for (size_t i = 0; i < n; ++i) y[i] = SourceValueF32(t, src, i) * m;
  }
}

// |x| bits maxima of a block (integer order is value order, NaN above Inf above every finite value): over
// all elements, the finite ones, and up to Inf (NaN skipped). Pieces of a block combine by max.
struct Maxima {
  uint32_t all = 0, finite = 0, with_inf = 0;
  void Add(const Maxima& o) { all = std::max(all, o.all), finite = std::max(finite, o.finite), with_inf = std::max(with_inf, o.with_inf); }
};

Maxima MaximaOf(DType t, const uint8_t* p, size_t len) {
  Maxima m;
  m.all = simd::AmaxBits(t, p, len, 0xFFFFFFFFu);
  m.finite = m.all < 0x7F800000u ? m.all : simd::AmaxBits(t, p, len, 0x7F800000u);
  m.with_inf = m.all <= 0x7F800000u ? m.all : simd::AmaxBits(t, p, len, 0x7F800001u);
  return m;
}

// The FP32 block scale of a block's maxima under the spec's NaN policy, or the given fixed scale.
MultiplyScale Fp32BlockScale(const Ctx& c, const Maxima& m) {
  if (c.have_fixed) {
    uint32_t bits;
    std::memcpy(&bits, &c.fixed.decode, 4);
    return MultiplyScale{bits, c.fixed.encode, false};
  }
  const bool has_nan = m.all > 0x7F800000u, has_inf = m.with_inf == 0x7F800000u;
  float amax;
  std::memcpy(&amax, &m.finite, 4);
  if (has_inf && c.spec->nan == NanPolicy::kIgnoreNan) amax = HUGE_VALF;
  return detail::BlockMultiplyScale(*c.spec, c.destmax, amax, has_nan, has_inf, c.s_enc);
}

// One strip of block rows [r0, r0 + h): codes (row-major, the strip's rows) and its scale row.
void QuantizeStrip(const Ctx& c, size_t strip, uint8_t* codes, uint8_t* scales) {
  const TensorView& x = *c.x;
  const QuantSpec& spec = *c.spec;
  const size_t r0 = strip * c.be.rows, h = std::min(c.be.rows, x.rows - r0);
  const size_t cols = x.cols, nb = c.scale_cols;
  const bool sr = IsStochastic(spec.cast.rounding);
  const size_t esize = ElemSize(x.dtype);
  const uint8_t* src = static_cast<const uint8_t*>(x.data) + r0 * cols * esize;
  // Block order: block j holds rows r0..r0+h, cols j*bc..; elements row-major inside the block. `runs`
  // visits each row piece of each block in that order (gathered index g, strip offset off, width w).
  const auto runs = [&](auto&& f) {
    size_t g = 0;
    for (size_t j = 0; j < nb; ++j) {
      const size_t c0 = j * c.be.cols, w = std::min(c.be.cols, cols - c0);
      for (size_t r = 0; r < h; ++r, g += w) f(g, r * cols + c0, w);
    }
  };
  std::vector<uint8_t> gathered(h * cols * esize);
  std::vector<uint32_t> rbits(sr ? h * cols : 0);
  runs([&](size_t g, size_t off, size_t w) {
    std::memcpy(&gathered[g * esize], src + off * esize, w * esize);
    if (sr)
      for (size_t t = 0; t < w; ++t) rbits[g + t] = RandomBitsForElement(spec.seed, r0 * cols + off + t);
  });
  std::vector<uint8_t> out(h * cols);
  if (IsPow2Rule(spec.rule) || c.nvfp4 != nullptr) {
    // The gathered blocks through the block kernel: MX's for UE8M0 rules, NVFP4's for E4M3 scales.
    const auto blocks = [&](size_t at, size_t count, size_t block, uint8_t* block_scales) {
      const SrSource bits{0, 0, sr ? rbits.data() + at : nullptr};
      if (c.nvfp4 != nullptr)
        detail::RunBlockKernel(c.nvfp4->For(block), x.dtype, gathered.data() + at * esize, count, out.data() + at,
                               block_scales, bits, Exec::kSequential);
      else
        QuantizeMx(x.dtype, gathered.data() + at * esize, count, detail::MxSpecOf(spec, block), out.data() + at, block_scales, bits);
    };
    const size_t full_w = c.be.cols;
    const size_t nfull = cols / full_w, last_w = cols - nfull * full_w;
    if (nfull > 0) blocks(0, nfull * h * full_w, h * full_w, scales);
    if (last_w > 0) blocks(nfull * h * full_w, h * last_w, h * last_w, scales + nfull);
  } else {
    // FP32 scales: per block amax -> scale -> fl32(x * multiplier), then one conversion call.
    std::vector<float> y(h * cols);
    std::vector<uint8_t> nan_block(nb, 0);
    size_t at = 0;
    for (size_t j = 0; j < nb; ++j) {
      const size_t len = h * std::min(c.be.cols, cols - j * c.be.cols);
      const uint8_t* blk = gathered.data() + at * esize;
      const MultiplyScale ms = Fp32BlockScale(c, MaximaOf(x.dtype, blk, len));
      detail::StoreScale(spec, scales, j, ms.stored, ms.nan_block);
      nan_block[j] = ms.nan_block;
      ScaleElements(x.dtype, blk, len, ms.multiplier, y.data() + at);
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
  runs([&](size_t g, size_t off, size_t w) { std::memcpy(codes + off, out.data() + g, w); });
}

// FP32 scales on blocks that lie contiguously in memory (1 x bc blocks tiling each row, or blocks spanning
// whole rows: per-tensor, row-wise, br x all), block b holding elements [b L, (b + 1) L). Work goes in
// pieces of at most kPiece elements that never straddle a block: the maxima per piece (any order gives
// the same maximum), the scales per block, then fl32(x * multiplier) and the conversion per piece, with SR
// words from the element indices.
class Fp32Contiguous {
 public:
  Fp32Contiguous(const Ctx& c, size_t block_len, QuantizedTensor& q)
      : c_(c), x_(*c.x), spec_(*c.spec), q_(q), block_len_(block_len), n_(x_.rows * x_.cols),
        esize_(ElemSize(x_.dtype)), blocks_((n_ + block_len - 1) / block_len),
        src_(static_cast<const uint8_t*>(x_.data)), maxima_of_(blocks_), mult_(blocks_), nan_block_(blocks_),
        fill_(detail::BlockNanCode(spec_.elem)),
        batch_scales_(blocks_ > 1 && !c.have_fixed && ScaleFormatOf(spec_.rule) == ScaleFormat::kFp32),
        params_(simd::MakeConvertParams(spec_.elem, spec_.cast, DType::kF32)),
        fused_(simd::ScaledBlocksTake(params_)) {
    CutPieces();
  }

  // 1. Maxima per block; 2. scales; 3. elements. Small blocks: each piece on its own, read once while it is
  // in cache. Blocks of a piece or more: each step over every piece before the next step.
  void Run(Exec exec) {
    const int64_t np = static_cast<int64_t>(pieces_.size());
    const bool parallel = exec == Exec::kParallel && np > 1;
    if (whole_blocks_) {
      if (parallel) {
#pragma omp parallel
        {
          std::vector<float> y;  // sized on first use: most pieces never need it
#pragma omp for schedule(static)
          for (int64_t p = 0; p < np; ++p) WholePiece(p, y);
        }
      } else {
        std::vector<float> y;
        for (int64_t p = 0; p < np; ++p) WholePiece(p, y);
      }
      return;
    }
    if (parallel) {
#pragma omp parallel
      {
#pragma omp for schedule(static)
        for (int64_t p = 0; p < np; ++p) MaximaStep(p);
#pragma omp for schedule(static)
        for (int64_t b = 0; b < static_cast<int64_t>(blocks_); ++b) Scale(static_cast<size_t>(b));
        std::vector<float> y;
#pragma omp for schedule(static)
        for (int64_t p = 0; p < np; ++p) Elements(p, y);
      }
    } else {
      for (int64_t p = 0; p < np; ++p) MaximaStep(p);
      for (size_t b = 0; b < blocks_; ++b) Scale(b);
      std::vector<float> y;
      for (int64_t p = 0; p < np; ++p) Elements(p, y);
    }
  }

 private:
  static constexpr size_t kPiece = size_t{1} << 16;
  struct Piece {
    size_t block, start, len;
  };

  // Blocks of kPiece or more: each block in pieces of kPiece; smaller blocks: runs of whole blocks.
  void CutPieces() {
    if (block_len_ >= kPiece) {
      for (size_t b = 0; b < blocks_; ++b)
        for (size_t s = b * block_len_; s < std::min(n_, (b + 1) * block_len_); s += kPiece)
          pieces_.push_back({b, s, std::min({kPiece, n_ - s, (b + 1) * block_len_ - s})});
    }
    whole_blocks_ = pieces_.empty();
    per_piece_ = whole_blocks_ ? std::max<size_t>(1, kPiece / block_len_) : 1;
    if (whole_blocks_)
      for (size_t b = 0; b < blocks_; b += per_piece_)
        pieces_.push_back({b, b * block_len_, std::min(n_, (b + per_piece_) * block_len_) - b * block_len_});
  }

  // A piece of whole blocks, all three steps.
  void WholePiece(int64_t p, std::vector<float>& y) {
    MaximaStep(p);
    const Piece& pc = pieces_[static_cast<size_t>(p)];
    ScaleRange(pc.block, std::min(blocks_, pc.block + per_piece_));
    Elements(p, y);
  }

  // Step 1 for piece p.
  void MaximaStep(int64_t p) {
    const Piece& pc = pieces_[static_cast<size_t>(p)];
    if (whole_blocks_) {
      // The piece's whole blocks in one call, every lane counted; a block holding NaN or Inf, and a
      // partial last block, then take MaximaOf's three maxima.
      const size_t full = pc.len / block_len_;
      std::vector<uint32_t> all(full);
      if (full > 0)
        simd::AmaxBitsOfBlocks(x_.dtype, src_ + pc.start * esize_, full * block_len_, block_len_, all.data(), 0x7F800000u);
      for (size_t i = 0; i < full; ++i) {
        const size_t b = pc.block + i;
        maxima_of_[b] = all[i] < 0x7F800000u ? Maxima{all[i], all[i], all[i]}
                                             : MaximaOf(x_.dtype, src_ + b * block_len_ * esize_, block_len_);
      }
      if (full * block_len_ < pc.len) {
        const size_t b = pc.block + full;
        maxima_of_[b] = MaximaOf(x_.dtype, src_ + b * block_len_ * esize_, pc.len - full * block_len_);
      }
      return;
    }
    for (size_t b = pc.block; b * block_len_ < pc.start + pc.len; ++b) {
      const size_t s = std::max(pc.start, b * block_len_), e = std::min(pc.start + pc.len, (b + 1) * block_len_);
      const Maxima m = MaximaOf(x_.dtype, src_ + s * esize_, e - s);
#pragma omp critical(qmx_fp32_maxima)
      maxima_of_[b].Add(m);
    }
  }

  // Step 2 for block b alone.
  void Scale(size_t b) {
    if (blocks_ == 1) {  // per tensor: the tensor amax is the block's maximum under TensorAmax's policy
      const uint32_t m = detail::TensorAmaxKeepsInf(spec_.nan) ? maxima_of_[0].with_inf : maxima_of_[0].finite;
      std::memcpy(&q_.tensor_amax, &m, 4);
    }
    const MultiplyScale ms = Fp32BlockScale(c_, maxima_of_[b]);
    detail::StoreScale(spec_, q_.scales.data(), b, ms.stored, ms.nan_block);
    mult_[b] = ms.multiplier;
    nan_block_[b] = ms.nan_block;
  }

  // Step 2 for blocks [b0, b1) of a piece. Under an FP32 rule from the maxima (not per tensor, not a fixed
  // scale), a block without NaN or Inf takes its scale from one Fp32ScalesFromAmaxes call over the range
  // (Fp32ScaleFromAmax in a loop, so BlockMultiplyScale's bits); the others go one at a time.
  void ScaleRange(size_t b0, size_t b1) {
    if (!batch_scales_) {
      for (size_t b = b0; b < b1; ++b) Scale(b);
      return;
    }
    std::vector<float> amax(b1 - b0);
    for (size_t b = b0; b < b1; ++b) std::memcpy(&amax[b - b0], &maxima_of_[b].finite, 4);
    std::vector<Fp32Scale> fs(b1 - b0);
    Fp32ScalesFromAmaxes(amax.data(), amax.size(), c_.destmax, spec_.rule == ScaleRule::kFp32Pow2, spec_.margin,
                         fs.data());
    for (size_t b = b0; b < b1; ++b) {
      if (maxima_of_[b].all >= 0x7F800000u) {
        Scale(b);
        continue;
      }
      uint32_t stored;
      std::memcpy(&stored, &fs[b - b0].decode, 4);
      detail::StoreScale(spec_, q_.scales.data(), b, stored, false);
      mult_[b] = fs[b - b0].encode;
    }
  }

  // Step 3 for piece p. Where the fused tier takes the conversion, a block whose products are all finite
  // (no NaN or Inf, amax x multiplier finite) goes straight from the source in registers; each run of the
  // other blocks is multiplied into y and converted in one call, and NaN blocks are filled after.
  void Elements(int64_t p, std::vector<float>& y) {
    const Piece& pc = pieces_[static_cast<size_t>(p)];
    const size_t b0 = pc.block, len = whole_blocks_ ? block_len_ : pc.len, nb = (pc.len + len - 1) / len;
    const auto start_of = [&](size_t i) { return pc.start + std::min(pc.len, i * len); };  // block b0 + i's
    std::vector<uint8_t> take(nb, 0);
    if (fused_) {
      for (size_t i = 0; i < nb; ++i) {
        const Maxima& m = maxima_of_[b0 + i];
        float amax;
        std::memcpy(&amax, &m.all, 4);
        take[i] = !nan_block_[b0 + i] && m.all < 0x7F800000u && std::isfinite(mult_[b0 + i]) &&
                  std::isfinite(amax * mult_[b0 + i]);
      }
      simd::ConvertScaledBlocks(params_, x_.dtype, src_ + pc.start * esize_, pc.len, len, mult_.data() + b0,
                                take.data(), q_.codes.data() + pc.start, spec_.seed, pc.start);
    }
    for (size_t i = 0; i < nb;) {
      if (take[i]) {
        ++i;
        continue;
      }
      if (y.empty()) y.resize(std::min(n_, kPiece));
      size_t e = i;
      for (; e < nb && !take[e]; ++e)
        ScaleElements(x_.dtype, src_ + start_of(e) * esize_, start_of(e + 1) - start_of(e), mult_[b0 + e],
                      y.data() + (start_of(e) - start_of(i)));
      ConvertToCodes(DType::kF32, y.data(), start_of(e) - start_of(i), spec_.elem, spec_.cast,
                     q_.codes.data() + start_of(i), {spec_.seed, start_of(i), nullptr}, Exec::kSequential);
      for (; i < e; ++i)
        if (nan_block_[b0 + i]) std::memset(q_.codes.data() + start_of(i), fill_, start_of(i + 1) - start_of(i));
    }
  }

  const Ctx& c_;
  const TensorView& x_;
  const QuantSpec& spec_;
  QuantizedTensor& q_;
  const size_t block_len_, n_, esize_, blocks_;
  const uint8_t* src_;
  std::vector<Piece> pieces_;
  bool whole_blocks_ = false;  // small blocks: each piece a run of whole blocks
  size_t per_piece_ = 1;
  std::vector<Maxima> maxima_of_;
  std::vector<float> mult_;
  std::vector<uint8_t> nan_block_;
  const uint8_t fill_;
  const bool batch_scales_;
  const simd::ConvertParams params_;
  const bool fused_;
};

void QuantizeFp32Contiguous(const Ctx& c, size_t block_len, QuantizedTensor& q, Exec exec) {
  Fp32Contiguous(c, block_len, q).Run(exec);
}

// f(s) for every strip s of block rows, over OpenMP threads a strip at a time (a strip whose blocks go
// through the general tiers costs more than its neighbours) or in order. No bit depends on which.
template <class F>
void ForEachStrip(int64_t strips, Exec exec, F&& f) {
  if (exec == Exec::kParallel && strips > 1) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t s = 0; s < strips; ++s) f(s);
  } else {
    for (int64_t s = 0; s < strips; ++s) f(s);
  }
}

// Threads for work in runs of kBlocksPerRun blocks of `block` elements over n elements, and a thread's
// share [lo, hi) of the runs: the same split in every pass over a tensor.
struct RunSplit {
  size_t runs, run;
  int threads;
  RunSplit(size_t n, size_t block, Exec exec)
      : runs((n + detail::kBlocksPerRun * block - 1) / (detail::kBlocksPerRun * block)),
        run(detail::kBlocksPerRun * block),
        threads(exec == Exec::kParallel ? static_cast<int>(std::min<size_t>(runs, static_cast<size_t>(omp_get_max_threads()))) : 1) {}
  std::pair<size_t, size_t> Share(int t, int nt) const {
    return {runs * static_cast<size_t>(t) / static_cast<size_t>(nt), runs * static_cast<size_t>(t + 1) / static_cast<size_t>(nt)};
  }
};

// NVFP4's tensor amax pass, which also keeps the |x| bits maximum of every piece of `block` elements (n a
// multiple of block) in pieces: AmaxBitsOfBlocks over each thread's share of the runs. Returns the tensor
// amax bits under the spec's NaN policy (TensorAmax's).
uint32_t AmaxAndPieceMaxima(const TensorView& x, const QuantSpec& spec, size_t block, Exec exec, uint32_t* pieces) {
  const size_t n = x.rows * x.cols, esize = DTypeSize(x.dtype);
  const RunSplit split(n, block, exec);
  const uint32_t limit = detail::TensorAmaxKeepsInf(spec.nan) ? 0x7F800001u : 0x7F800000u;
  const uint8_t* src = static_cast<const uint8_t*>(x.data);
  std::vector<uint32_t> part(static_cast<size_t>(split.threads), 0);
#pragma omp parallel num_threads(split.threads)
  {
    const int t = omp_get_thread_num();
    const auto [lo, hi] = split.Share(t, omp_get_num_threads());
    uint32_t m = 0;
    for (size_t r = lo; r < hi; ++r)
      m = std::max(m, simd::AmaxBitsOfBlocks(x.dtype, src + r * split.run * esize, std::min(split.run, n - r * split.run), block,
                                             pieces + r * detail::kBlocksPerRun, limit));
    part[static_cast<size_t>(t)] = m;
  }
  return *std::max_element(part.begin(), part.end());
}

// The tensor amax (given, or from the pass's bits), S_enc and the decode scale into q; returns S_enc.
float SetNvfp4TensorScale(const QuantSpec& spec, const float* given_amax, uint32_t amax_bits, QuantizedTensor& q) {
  if (given_amax != nullptr) q.tensor_amax = *given_amax;
  else std::memcpy(&q.tensor_amax, &amax_bits, 4);
  const float s_enc = Nvfp4TensorScale(q.tensor_amax, spec.rule);
  q.tensor_decode = Nvfp4TensorDecode(s_enc, spec.rule);
  return s_enc;
}

// NVFP4 blocks that tile each row: the tensor amax (unless given) with every block's maximum, then the
// block kernel, both over the same runs of kBlocksPerRun blocks, each thread on its own share; the kernel
// then only scales and converts. The second pass walks a thread's runs in reverse, so that it starts on the
// data the first pass read last, still in cache (cli/bench/PERFORMANCE.md "NVFP4 rows: the second pass in
// reverse"). Runs are independent (SR words come from element indices), so neither the order nor
// the split changes a bit.
void QuantizeNvfp4Rows(const TensorView& x, const QuantSpec& spec, size_t block, const float* given_amax, Exec exec,
                       QuantizedTensor& q) {
  const size_t n = x.rows * x.cols, esize = DTypeSize(x.dtype);
  const RunSplit split(n, block, exec);
  const uint8_t* src = static_cast<const uint8_t*>(x.data);
  // Every block's maximum from the amax pass (not zeroed: the pass writes each entry before it is read).
  const std::unique_ptr<uint32_t[]> block_max(given_amax == nullptr ? new uint32_t[n / block] : nullptr);
  const uint32_t amax = given_amax == nullptr ? AmaxAndPieceMaxima(x, spec, block, exec, block_max.get()) : 0;
  const Nvfp4Kernel kernel(spec, x.dtype, SetNvfp4TensorScale(spec, given_amax, amax, q));
#pragma omp parallel num_threads(split.threads)
  {
    const auto [lo, hi] = split.Share(omp_get_thread_num(), omp_get_num_threads());
    simd::MxKernelArgs args = kernel.For(block);
    args.stream = n >= detail::kStreamCodes;
    for (size_t r = hi; r-- > lo;) {
      const size_t start = r * split.run;
      if (block_max) args.block_amax = block_max.get() + r * detail::kBlocksPerRun;
      simd::QuantizeMxBlocks(args, x.dtype, src + start * esize, std::min(split.run, n - start), q.codes.data() + start,
                             q.scales.data() + r * detail::kBlocksPerRun, spec.seed, start, nullptr);
    }
  }
}

// NVFP4 blocks of several rows that tile each row, through the strip kernel where it takes the spec
// (returns false otherwise, for the gathered strips): the tensor amax (unless given) with the maximum of
// every row piece of a block's width, as QuantizeNvfp4Rows's first pass, then each strip in place, its
// blocks' maxima folded from their row pieces'. Strips are independent: the split changes no bit.
bool QuantizeNvfp4Strips(const TensorView& x, const QuantSpec& spec, const BlockExtent& be, const float* given_amax, Exec exec,
                         QuantizedTensor& q) {
  Nvfp4Kernel kernel(spec, x.dtype, 1.0f);
  if (!simd::Nvfp4StripTakes(kernel.For(be.cols))) return false;
  const size_t n = x.rows * x.cols, esize = DTypeSize(x.dtype), pieces_per_row = x.cols / be.cols;
  const std::unique_ptr<uint32_t[]> piece_max(given_amax == nullptr ? new uint32_t[n / be.cols] : nullptr);
  const uint32_t amax = given_amax == nullptr ? AmaxAndPieceMaxima(x, spec, be.cols, exec, piece_max.get()) : 0;
  kernel.SetEncodeScale(SetNvfp4TensorScale(spec, given_amax, amax, q));
  const int64_t strips = static_cast<int64_t>(q.scale_rows);
  const auto strip = [&](int64_t si) {
    const size_t s = static_cast<size_t>(si), r0 = s * be.rows;
    simd::MxKernelArgs args = kernel.For(be.cols);
    args.stream = n >= detail::kStreamCodes;
    if (piece_max) args.block_amax = piece_max.get() + r0 * pieces_per_row;
    simd::QuantizeNvfp4Strip(args, x.dtype, static_cast<const uint8_t*>(x.data) + r0 * x.cols * esize, std::min(be.rows, x.rows - r0),
                             x.cols, q.codes.data() + r0 * x.cols, q.scales.data() + s * q.scale_cols, spec.seed, r0 * x.cols);
  };
  ForEachStrip(strips, exec, strip);
  return true;
}

// Row-scaled NVFP4 on row-wise blocks that tile each row: per row its amax (the AmaxBits of the per-tensor
// path), its S_enc and its blocks through the block kernel, each thread with its own kernel on a contiguous
// share of the rows. Rows are independent and SR words come from element indices: no bit depends on the split.
void QuantizeNvfp4LineRows(const TensorView& x, const QuantSpec& spec, size_t block, Exec exec, QuantizedTensor& q) {
  const size_t esize = DTypeSize(x.dtype);
  const uint32_t limit = detail::TensorAmaxKeepsInf(spec.nan) ? 0x7F800001u : 0x7F800000u;
  const uint8_t* src = static_cast<const uint8_t*>(x.data);
  const int64_t rows = static_cast<int64_t>(x.rows);
  const int threads = exec == Exec::kParallel ? static_cast<int>(std::min<size_t>(x.rows, static_cast<size_t>(omp_get_max_threads()))) : 1;
#pragma omp parallel num_threads(threads)
  {
    Nvfp4Kernel kernel(spec, x.dtype, 1.0f);
#pragma omp for schedule(static)
    for (int64_t ri = 0; ri < rows; ++ri) {
      const size_t r = static_cast<size_t>(ri), start = r * x.cols;
      const uint32_t m = simd::AmaxBits(x.dtype, src + start * esize, x.cols, limit);
      std::memcpy(&q.line_amax[r], &m, 4);
      kernel.SetEncodeScale(Nvfp4TensorScale(q.line_amax[r], spec.rule));
      simd::QuantizeMxBlocks(kernel.For(block), x.dtype, src + start * esize, x.cols, q.codes.data() + start,
                             q.scales.data() + r * q.scale_cols, spec.seed, start, nullptr);
    }
  }
  q.tensor_amax = *std::max_element(q.line_amax.begin(), q.line_amax.end());  // no NaN: AmaxBits skips them
}

QuantizedTensor QuantizeImpl(const TensorView& x, const QuantSpec& spec, Exec exec, const Fp32Scale* fixed,
                             const float* given_amax = nullptr) {
  if (spec.row_scaled && given_amax != nullptr)
    throw Error("a row-scaled NVFP4 spec takes each line's amax from the data, not a given tensor amax");
  // 4over6 picks between two candidate blocks by their error: it has no block kernel, and its fast path
  // is the reference (each block is independent; the thread count cannot change a bit).
  // A comparison-ordered block amax (AmaxOrder) likewise runs on the reference, and so do the NVFP4 rules on
  // formats other than NVFP4's own (QuantSpec::scale_format, elements other than E2M1), which the kernels hold.
  // MX rules writing their scales in another format than UE8M0 (QuantSpec::scale_format) too.
  const bool other_nvfp4 = ScaleFormatOf(spec.rule) == ScaleFormat::kE4m3 && !Nvfp4OwnFormats(spec);
  const bool other_mx = IsPow2Rule(spec.rule) && !spec.scale_format.empty();
  if ((IsNvfp4FourOverSix(spec.rule) || spec.amax_order != AmaxOrder::kAny || other_nvfp4 || other_mx) &&
      fixed == nullptr)
    return given_amax ? QuantizeNvfp4WithAmaxRef(x, spec, *given_amax) : QuantizeRef(x, spec);
  if (spec.rule == ScaleRule::kBfp) return detail::QuantizeBfp(x, spec);  // tt-metal's packer, one definition
  QuantizedTensor q = detail::MakeShell(x, spec, false);  // every route below writes each code
  if (x.rows == 0 || x.cols == 0) return q;
  Ctx c{&x, &spec, ResolveBlock(spec, x.rows, x.cols), q.scale_cols, 1.0f, fixed != nullptr, fixed ? *fixed : Fp32Scale{}, nullptr,
        static_cast<float>(Limits(spec.elem).max_finite)};
  const bool nvfp4 = ScaleFormatOf(spec.rule) == ScaleFormat::kE4m3;
  if (spec.row_scaled) {  // row-wise lines that the blocks tile take the kernel; other shapes the reference
    if (spec.axis == Axis::kRow && x.cols % c.be.cols == 0) {
      QuantizeNvfp4LineRows(x, spec, c.be.cols, exec, q);
      return q;
    }
    return QuantizeRef(x, spec);
  }
  if (nvfp4 && c.be.rows == 1 && x.cols % c.be.cols == 0) {
    QuantizeNvfp4Rows(x, spec, c.be.cols, given_amax, exec, q);
    return q;
  }
  if (nvfp4 && fixed == nullptr && x.cols % c.be.cols == 0 && QuantizeNvfp4Strips(x, spec, c.be, given_amax, exec, q)) return q;
  // (A per-tensor FP32 spec takes the contiguous path below, which sets the tensor amax from its maxima.)
  if (given_amax) q.tensor_amax = *given_amax;
  else if (nvfp4) q.tensor_amax = detail::TensorAmaxFast(x, spec.nan, exec);
  std::unique_ptr<Nvfp4Kernel> nvfp4_kernel;
  if (nvfp4) {
    c.s_enc = Nvfp4TensorScale(q.tensor_amax, spec.rule);
    q.tensor_decode = Nvfp4TensorDecode(c.s_enc, spec.rule);
    nvfp4_kernel = std::make_unique<Nvfp4Kernel>(spec, x.dtype, c.s_enc);
    c.nvfp4 = nvfp4_kernel.get();
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
  if (ScaleFormatOf(spec.rule) == ScaleFormat::kFp32 && ((c.be.rows == 1 && x.cols % c.be.cols == 0) || c.be.cols >= x.cols)) {
    QuantizeFp32Contiguous(c, c.be.rows == 1 && x.cols % c.be.cols == 0 ? c.be.cols : c.be.rows * x.cols, q, exec);
    return q;
  }
  const int64_t strips = static_cast<int64_t>(q.scale_rows);
  const size_t strip_elems = c.be.rows * x.cols;
  ForEachStrip(strips, exec, [&](int64_t si) {
    const size_t s = static_cast<size_t>(si);
    QuantizeStrip(c, s, q.codes.data() + s * strip_elems, q.scales.data() + s * q.scale_cols * sbytes);
  });
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
    throw Error("a given tensor amax needs an NVFP4 scale rule (nvfp4, nvfp4-div, nvfp4-torchao[-cuda], nvfp4-4over6[-mse]), not '" +
                std::string(ScaleRuleName(spec.rule)) + "'");
}

float TensorAmax(const TensorView& x, NanPolicy policy, Exec exec) { return detail::TensorAmaxFast(x, policy, exec); }
float TensorAmaxRef(const TensorView& x, NanPolicy policy) { return detail::TensorAmax(x, policy); }

void CheckGivenAmax(const TensorView& x, const QuantSpec& spec, float tensor_amax) {
  CheckNvfp4Spec(spec);
  if (!std::isfinite(tensor_amax) || tensor_amax < 0.0f)
    throw Error("a given NVFP4 tensor amax must be finite and 0 or more, not " + std::to_string(tensor_amax));
  // A smaller amax than the data's is a calibrated one (the larger values saturate); 0 on nonzero data would
  // turn every block scale to 0 and every value with it.
  if (tensor_amax == 0.0f && detail::TensorAmaxFast(x, NanPolicy::kIgnoreNan, Exec::kSequential) != 0.0f)
    throw Error("a given NVFP4 tensor amax of 0 quantizes nonzero data to zeros: give the data's amax (tensor_amax)");
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

// n elements' values times their block's decode factor, in double, rounded to FP32 and flushed.
void ScaleSpan(const uint8_t* codes, size_t n, const float* table, double factor, bool ftz, float* out) {
  // A NaN factor is every element's value, NaN codes included, as the per-element product this replaces
  // gave it: compiled with the factor as the multiply's first operand, whose NaN x86 returns when both
  // operands are NaN. Written out, it no longer depends on the order the compiler gives the operands.
  if (std::isnan(factor)) {
    std::fill(out, out + n, static_cast<float>(factor));
    return;
  }
  if (!ftz) {  // FlushSubnormal is then the identity: the same arithmetic without its test per element
    for (size_t k = 0; k < n; ++k) out[k] = static_cast<float>(table[codes[k]] * factor);
    return;
  }
  for (size_t k = 0; k < n; ++k) {
    const double v = table[codes[k]];
    out[k] = static_cast<float>(detail::FlushSubnormal(static_cast<float>(v * factor), ftz));
  }
}

// Row r's elements [c0, c1), all in block (sr, sc). The decode factor (the flushed block scale) is a pure
// function of the block's scale and, for NVFP4, of (r, c0)'s second-level amax, which the caller keeps
// constant over the span: it is found once per span, not per element (ldexp per element was a seventh of
// a checkpoint audit's time).
void DequantizeSpan(const QuantizedTensor& q, size_t r, size_t c0, size_t c1, size_t sr, size_t sc, const float* table,
                    DequantOrder order, bool ftz, float* out) {
  const size_t i0 = r * q.cols + c0, n = c1 - c0;
  const uint8_t* codes = q.codes.data() + i0;
  const size_t si = sr * q.scale_cols + sc;
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  out += i0;
  if (q.spec.rule == ScaleRule::kBfp) {  // tt-metal's unpacker on the shared exponent
    const int w = detail::BfpMagnitudeBits(q.spec.elem);
    for (size_t k = 0; k < n; ++k)
      out[k] = static_cast<float>(detail::FlushSubnormal(detail::BfpDecode(codes[k], q.scales[si], w), ftz));
  } else if (sf == ScaleFormat::kUe8m0) {  // UE8M0, or the spec's scale_format (a NaN scale: every element NaN)
    const double scale = MxScaleValue(MxScaleFormat(q.spec), q.scales[si]);
    if (std::isnan(scale)) std::fill(out, out + n, static_cast<float>(detail::FlushSubnormal(std::nanf(""), ftz)));
    else ScaleSpan(codes, n, table, detail::FlushSubnormal(scale, ftz), ftz, out);
  } else if (sf == ScaleFormat::kE4m3) {
    const float scale = Nvfp4DecodeScale(q.scales[si], q.SecondLevelAmax(r, c0), q.spec, order);
    ScaleSpan(codes, n, table, detail::FlushSubnormal(scale, ftz), ftz, out);
  } else {
    ScaleSpan(codes, n, table, detail::FlushSubnormal(q.ScaleAt(sr, sc), ftz), ftz, out);
  }
}

void DequantizeRows(const QuantizedTensor& q, size_t r_begin, size_t r_end, const float* table, DequantOrder order,
                    bool ftz, float* out) {
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  // One span per block and row. Its second-level amax is constant: row-scaled blocks are 1xN (the spec was
  // validated by CheckLineAmax), so along columns a block, and with it a span, is one column wide.
  for (size_t r = r_begin; r < r_end; ++r)
    for (size_t c0 = 0; c0 < q.cols; c0 += be.cols)
      DequantizeSpan(q, r, c0, std::min(q.cols, c0 + be.cols), r / be.rows, c0 / be.cols, table, order, ftz, out);
}

}  // namespace

std::vector<float> detail::CodeTable(const Format& elem) {
  const std::vector<float> t = DecodeTableF32(elem);
  std::vector<float> table(256);
  for (int c = 0; c < 256; ++c) table[static_cast<size_t>(c)] = t[static_cast<size_t>(c) & elem.CodeMask()];
  return table;
}

void Dequantize(const QuantizedTensor& q, float* out, Exec exec) { Dequantize(q, out, DequantOrder::kByRule, exec); }

void detail::CheckDequantOrder(const QuantizedTensor& q, DequantOrder order) {
  if (order != DequantOrder::kByRule && ScaleFormatOf(q.spec.rule) != ScaleFormat::kE4m3)
    throw Error(std::string("dequantization order '") + DequantOrderName(order) +
                "' is how NVFP4's block and tensor scales meet; this tensor's scale rule " + ScaleRuleName(q.spec.rule) +
                " has one scale per element (order rule)");
}

void Dequantize(const QuantizedTensor& q, float* out, DequantOrder order, Exec exec) {
  Dequantize(q, out, order, false, exec);
}

void Dequantize(const QuantizedTensor& q, float* out, DequantOrder order, bool ftz, Exec exec) {
  detail::CheckLineAmax(q);
  detail::CheckDequantOrder(q, order);
  const std::vector<float> table = detail::CodeTable(q.spec.elem);
  const int64_t rows = static_cast<int64_t>(q.rows);
  if (exec == Exec::kParallel) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      DequantizeRows(q, static_cast<size_t>(r), static_cast<size_t>(r) + 1, table.data(), order, ftz, out);
  } else {
    DequantizeRows(q, 0, q.rows, table.data(), order, ftz, out);
  }
}

void FakeQuantize(const TensorView& x, const QuantSpec& spec, float* out, Exec exec) {
  const QuantizedTensor q = Quantize(x, spec, exec);
  Dequantize(q, out, exec);
}

// ------------------------------------------------------------------ statistics

std::vector<std::pair<std::string, uint64_t>> QuantStatsCounts(const QuantStats& s) {
  return {{"elements", s.elements},   {"nan_inputs", s.nan_inputs},           {"inf_inputs", s.inf_inputs},
          {"saturated", s.saturated}, {"flushed_to_zero", s.flushed_to_zero}, {"nan_blocks", s.nan_blocks}};
}

QuantStats ComputeStats(const TensorView& x, const QuantizedTensor& q) {
  detail::CheckLineAmax(q);
  QuantStats st;
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  st.elements = q.rows * q.cols;
  st.scale_histogram.assign(256, 0);
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  const double maxv = Limits(q.spec.elem).max_finite;
  // Per block: the histogram bin, and the magnitude above which an input saturated: maxv times the decode
  // scale (NVFP4: the E4M3 scale times the tensor decode scale), none where that scale is not positive.
  const size_t nblocks = q.scale_rows * q.scale_cols;
  std::vector<double> threshold(nblocks, HUGE_VAL);
  for (size_t i = 0; i < nblocks; ++i) {
    uint32_t bin;
    bool nan_scale;
    if (sf == ScaleFormat::kFp32) {
      uint32_t b;
      std::memcpy(&b, &q.scales[4 * i], 4);
      bin = (b >> 23) & 0xFF;
      nan_scale = bin == 0xFF;
    } else {
      bin = q.scales[i];
      nan_scale = sf == ScaleFormat::kUe8m0 ? std::isnan(MxScaleValue(MxScaleFormat(q.spec), static_cast<uint8_t>(bin)))
                                            : std::isnan(DecodeToFloat(Nvfp4ScaleFormat(q.spec), bin));
    }
    ++st.scale_histogram[bin];
    st.nan_blocks += nan_scale;
    const size_t sr = i / q.scale_cols, sc = i % q.scale_cols;
    // (Row-scaled blocks are 1-D: block row sr is row sr for axis row, block column sc is column sc for axis col.)
    const double scale = sf == ScaleFormat::kE4m3
                             ? Nvfp4DecodeScale(q.scales[i], q.SecondLevelAmax(sr, sc), q.spec, DequantOrder::kByRule)
                             : q.ScaleAt(sr, sc);
    if (std::isfinite(scale) && scale > 0) threshold[i] = maxv * scale;
  }
  // Codes that decode to zero (an input that became one was flushed).
  std::array<bool, 256> zero{};
  for (uint32_t c = 0; c < 256; ++c) zero[c] = DecodeToDouble(q.spec.elem, c & q.spec.elem.CodeMask()) == 0;
  const float* xf = x.dtype == DType::kF32 ? static_cast<const float*>(x.data) : nullptr;
  for (size_t r = 0; r < q.rows; ++r) {
    const double* thr = threshold.data() + (r / be.rows) * q.scale_cols;
    for (size_t c0 = 0, j = 0; c0 < q.cols; c0 += be.cols, ++j) {
      const double t = thr[j];
      for (size_t c = c0; c < std::min(q.cols, c0 + be.cols); ++c) {
        const size_t i = r * q.cols + c;
        const float v = xf != nullptr ? xf[i] : SourceValueF32(x.dtype, x.data, i);
        if (std::isnan(v)) { ++st.nan_inputs; continue; }
        if (std::isinf(v)) { ++st.inf_inputs; continue; }
        st.flushed_to_zero += v != 0 && zero[q.codes[i]];
        st.saturated += std::fabs(static_cast<double>(v)) > t;
      }
    }
  }
  return st;
}

}  // namespace qmx
