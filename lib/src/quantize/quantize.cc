// quantize.cc: the quantize layer (qmx/quantize.h): recipe names and profiles, spec validation, block
// geometry, the fast tensor quantizer (MX kernels for UE8M0 rules, FP32 scaling then the conversion
// kernel for FP32 and NVFP4 rules, OpenMP over strips of blocks), dequantization, statistics, packing and
// cuBLASLt scale layouts. The reference lives in quantize_ref.cc.
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

// ------------------------------------------------------------------ names

const char* AxisName(Axis a) { return a == Axis::kRow ? "row" : "col"; }

Axis ParseAxis(const std::string& s) {
  if (s == "row" || s == "rowwise" || s == "row-wise") return Axis::kRow;
  if (s == "col" || s == "colwise" || s == "column-wise" || s == "column") return Axis::kCol;
  throw Error("--axis must be row or col, not '" + s + "'");
}

namespace {

struct Recipe {
  const char* name;
  const Format* elem;
  ScaleRule rule;
  int br, bc;
  bool delayed;
};
const Recipe kRecipes[] = {
    {"mxfp8", &fmt::kE4M3, ScaleRule::kRoundUp, 1, 32, false},
    {"mxfp8-ocp", &fmt::kE4M3, ScaleRule::kOcpFloor, 1, 32, false},
    {"mxfp8_e5m2", &fmt::kE5M2, ScaleRule::kRoundUp, 1, 32, false},
    {"mxfp6_e2m3", &fmt::kE2M3, ScaleRule::kRoundUp, 1, 32, false},
    {"mxfp6_e3m2", &fmt::kE3M2, ScaleRule::kRoundUp, 1, 32, false},
    {"mxfp4", &fmt::kE2M1, ScaleRule::kRoundUp, 1, 32, false},
    {"mxfp4-ocp", &fmt::kE2M1, ScaleRule::kOcpFloor, 1, 32, false},
    {"mxint8", &fmt::kInt8, ScaleRule::kOcpFloor, 1, 32, false},
    {"nvfp4", &fmt::kE2M1, ScaleRule::kNvfp4, 1, 16, false},
    {"nvfp4-2d", &fmt::kE2M1, ScaleRule::kNvfp4, 16, 16, false},
    {"fp8-tensor-current", &fmt::kE4M3, ScaleRule::kFp32, 0, 0, false},
    {"fp8-delayed", &fmt::kE4M3, ScaleRule::kFp32, 0, 0, true},
    {"fp8-rowwise", &fmt::kE4M3, ScaleRule::kFp32, 1, 0, false},
    {"fp8-block1x128", &fmt::kE4M3, ScaleRule::kFp32, 1, 128, false},
    {"fp8-block128x128", &fmt::kE4M3, ScaleRule::kFp32, 128, 128, false},
};

struct Profile {
  const char* name;
  ScaleRule rule;
  NanPolicy nan;
  ElementScaling scaling;
  Rounding rounding;
};
const Profile kProfiles[] = {
    {"ocp", ScaleRule::kOcpFloor, NanPolicy::kBlockNan, ElementScaling::kExact, Rounding::kRne},
    {"microxcaling", ScaleRule::kOcpFloor, NanPolicy::kBlockNan, ElementScaling::kFp32, Rounding::kRna},
    {"torchao-floor", ScaleRule::kOcpFloor, NanPolicy::kScaleNan, ElementScaling::kFp32, Rounding::kRne},
    {"torchao-rceil", ScaleRule::kRoundUp, NanPolicy::kScaleNan, ElementScaling::kFp32, Rounding::kRne},
    {"transformer-engine", ScaleRule::kRoundUp, NanPolicy::kIgnoreNan, ElementScaling::kTeRcp, Rounding::kRne},
    {"cuda-host", ScaleRule::kRoundUp, NanPolicy::kTe, ElementScaling::kFp32, Rounding::kRne},
};

std::string JoinNames(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& n : v) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

std::vector<std::string> QuantSpecNames() {
  std::vector<std::string> v;
  for (const auto& r : kRecipes) v.push_back(r.name);
  return v;
}

QuantSpec QuantSpecByName(const std::string& name) {
  for (const auto& r : kRecipes) {
    if (name != r.name) continue;
    QuantSpec s;
    s.name = r.name;
    s.elem = *r.elem;
    s.rule = r.rule;
    s.block_rows = r.br;
    s.block_cols = r.bc;
    s.delayed = r.delayed;
    return s;
  }
  throw Error("unknown quantization spec '" + name + "' (" + JoinNames(QuantSpecNames()) + ")");
}

std::vector<std::string> ProfileNames() {
  std::vector<std::string> v;
  for (const auto& p : kProfiles) v.push_back(p.name);
  return v;
}

void ApplyProfile(QuantSpec& spec, const std::string& profile) {
  for (const auto& p : kProfiles) {
    if (profile != p.name) continue;
    if (!IsPow2Rule(spec.rule)) {
      if (profile == "transformer-engine") {  // TE's NVFP4 and FP32 orders are the defaults of those rules
        spec.nan = NanPolicy::kIgnoreNan;
        spec.cast.rounding = Rounding::kRne;
        return;
      }
      throw Error("profile '" + profile + "' describes MX (UE8M0) block scaling; spec '" + spec.name + "' uses " +
                  ScaleFormatName(ScaleFormatOf(spec.rule)) + " scales");
    }
    spec.rule = p.rule;
    spec.nan = p.nan;
    spec.scaling = p.scaling;
    spec.cast.rounding = p.rounding;
    spec.cast.saturation = Saturation::kSatFinite;
    return;
  }
  throw Error("unknown profile '" + profile + "' (" + JoinNames(ProfileNames()) + ")");
}

std::string DescribeBlock(const QuantSpec& spec) {
  if (spec.block_rows == 0 && spec.block_cols == 0) return "per-tensor";
  if (spec.block_rows == 1 && spec.block_cols == 0) return spec.axis == Axis::kRow ? "per-row" : "per-col";
  const auto d = [](int v) { return v == 0 ? std::string("all") : std::to_string(v); };
  return d(spec.block_rows) + "x" + d(spec.block_cols);
}

void SetBlockShape(QuantSpec& spec, const std::string& s) {
  const std::string form = "a block must look like 1x32, 16x16, 1xall, per-row or per-tensor, not '" + s + "'";
  if (s == "per-tensor") { spec.block_rows = spec.block_cols = 0; return; }
  if (s == "per-row") { spec.block_rows = 1; spec.block_cols = 0; return; }
  const size_t x = s.find('x');
  if (x == std::string::npos) throw Error(form);
  const auto num = [&](const std::string& t) {
    if (t == "all") return 0;
    if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos) throw Error(form);
    return std::stoi(t);
  };
  spec.block_rows = num(s.substr(0, x));
  spec.block_cols = num(s.substr(x + 1));
}

std::string DescribeSpec(const QuantSpec& spec) {
  std::string s = spec.name + ": " + spec.elem.name + ", " + DescribeBlock(spec) + " blocks, " + AxisName(spec.axis) +
                  "-wise, " + ScaleFormatName(ScaleFormatOf(spec.rule)) + " scales (" + ScaleRuleName(spec.rule) +
                  (spec.delayed ? ", delayed" : "") + "), " + RoundingName(spec.cast.rounding) + "/" +
                  SaturationName(spec.cast.saturation) + ", NaN policy " + NanPolicyName(spec.nan);
  if (IsPow2Rule(spec.rule)) s += std::string(", element scaling ") + ElementScalingName(spec.scaling);
  if (spec.margin != 0) s += ", margin " + std::to_string(spec.margin);
  return s;
}

void ValidateQuantSpec(const QuantSpec& spec) {
  if (!IsFastFormat(spec.elem) || spec.elem.encoding == Encoding::kExponentOnly)
    throw Error(std::string("'") + spec.elem.name + "' cannot be a quantized element format (it needs 8 bits or fewer and a zero)");
  if (spec.block_rows < 0 || spec.block_rows > 65536 || spec.block_cols < 0 || spec.block_cols > 65536)
    throw Error("block extents must be 0 (whole dimension) or 1..65536, not " + std::to_string(spec.block_rows) + "x" +
                std::to_string(spec.block_cols));
  const ScaleFormat sf = ScaleFormatOf(spec.rule);
  if (sf == ScaleFormat::kE4m3 && spec.elem.Bits() != 4)
    throw Error(std::string("the ") + ScaleRuleName(spec.rule) + " rule (E4M3 block scales under an FP32 tensor scale) is NVFP4's: " +
                "its elements are e2m1, not " + spec.elem.name);
  if (sf == ScaleFormat::kUe8m0) {
    if (spec.rule == ScaleRule::kMaxFinite && spec.nan != NanPolicy::kIgnore)
      throw Error("the max-finite rule ignores non-finite elements: it needs the NaN policy 'ignore', not '" +
                  std::string(NanPolicyName(spec.nan)) + "'");
    if (static_cast<size_t>(spec.block_rows == 0 ? 1 : spec.block_rows) * static_cast<size_t>(spec.block_cols == 0 ? 1 : spec.block_cols) > 0 &&
        spec.scaling != ElementScaling::kExact && spec.cast.subnormals == Subnormals::kFlush)
      throw Error("flushing subnormals needs exact element scaling");
  } else {
    if (spec.nan == NanPolicy::kScaleNan || spec.nan == NanPolicy::kTe)
      throw Error(std::string("NaN policy '") + NanPolicyName(spec.nan) + "' sets UE8M0 scale bytes; " + ScaleFormatName(sf) +
                  " scales take block-nan, ignore-nan or ignore");
    if (spec.cast.subnormals == Subnormals::kFlush)
      throw Error(std::string(ScaleFormatName(sf)) + " scales multiply in FP32 before rounding; subnormal flushing is only offered with UE8M0 scales");
    if (spec.scaling != ElementScaling::kExact)
      throw Error("element scaling modes apply to UE8M0 scales; FP32 and NVFP4 scales always multiply in FP32");
  }
  if (spec.delayed && (sf != ScaleFormat::kFp32 || spec.block_rows != 0 || spec.block_cols != 0))
    throw Error("delayed scaling is per-tensor with an FP32 scale rule");
  if (spec.margin < -64 || spec.margin > 64) throw Error("margin must be -64..64, not " + std::to_string(spec.margin));
  ValidateCastOptions(spec.elem, spec.cast);
}

BlockExtent ResolveBlock(const QuantSpec& spec, size_t rows, size_t cols) {
  size_t br = static_cast<size_t>(spec.block_rows), bc = static_cast<size_t>(spec.block_cols);
  if (spec.axis == Axis::kCol) std::swap(br, bc);
  if (br == 0) br = std::max<size_t>(rows, 1);
  if (bc == 0) bc = std::max<size_t>(cols, 1);
  return {br, bc};
}

float QuantizedTensor::ScaleAt(size_t sr, size_t sc) const {
  const size_t i = sr * scale_cols + sc;
  switch (ScaleFormatOf(spec.rule)) {
    case ScaleFormat::kUe8m0:
      return scales[i] == 0xFF ? std::nanf("") : std::ldexp(1.0f, static_cast<int>(scales[i]) - 127);
    case ScaleFormat::kE4m3:
      return static_cast<float>(DecodeToDouble(fmt::kE4M3, scales[i]));
    case ScaleFormat::kFp32: {
      float f;
      std::memcpy(&f, &scales[i * 4], 4);
      return f;
    }
  }
  return 0;
}

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

// ------------------------------------------------------------------ packing

size_t PackedSize(size_t n, int bits) {
  if (bits == 4) return (n + 1) / 2;
  if (bits == 6) return (n * 6 + 7) / 8;
  if (bits == 8) return n;
  throw Error("packing takes 4-, 6- or 8-bit codes, not " + std::to_string(bits));
}

std::vector<uint8_t> PackCodes(const uint8_t* codes, size_t n, int bits) {
  std::vector<uint8_t> out(PackedSize(n, bits), 0);
  if (bits == 8) {
    if (n) std::memcpy(out.data(), codes, n);
  } else if (bits == 4) {
    for (size_t i = 0; i < n; ++i) out[i / 2] |= static_cast<uint8_t>((codes[i] & 0xF) << (4 * (i & 1)));
  } else {
    for (size_t i = 0; i < n; ++i) {
      const size_t bit = 6 * i;
      const uint32_t v = static_cast<uint32_t>(codes[i] & 0x3F) << (bit % 8);
      out[bit / 8] |= static_cast<uint8_t>(v);
      if ((bit % 8) > 2) out[bit / 8 + 1] |= static_cast<uint8_t>(v >> 8);
    }
  }
  return out;
}

std::vector<uint8_t> UnpackCodes(const uint8_t* packed, size_t packed_size, size_t n, int bits) {
  if (packed_size < PackedSize(n, bits))
    throw Error("packed buffer of " + std::to_string(packed_size) + " bytes is too small for " + std::to_string(n) + " " +
                std::to_string(bits) + "-bit codes");
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (bits == 8) out[i] = packed[i];
    else if (bits == 4) out[i] = (packed[i / 2] >> (4 * (i & 1))) & 0xF;
    else {
      const size_t bit = 6 * i;
      uint32_t v = packed[bit / 8];
      if (bit / 8 + 1 < packed_size) v |= static_cast<uint32_t>(packed[bit / 8 + 1]) << 8;
      out[i] = static_cast<uint8_t>((v >> (bit % 8)) & 0x3F);
    }
  }
  return out;
}

// ------------------------------------------------------------------ cuBLASLt layouts

std::vector<uint8_t> ScalesToCublasTiled(const QuantizedTensor& q) {
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  if (sf == ScaleFormat::kFp32 || be.rows != 1 || q.spec.axis != Axis::kRow)
    throw Error("the 128x4 tiled layout holds 1-D row-wise UE8M0 or E4M3 block scales (quantize the transposed operand "
                "row-wise for the other GEMM side), not '" + DescribeSpec(q.spec) + "'");
  const size_t kt = (q.scale_cols + 3) / 4, rt = (q.rows + 127) / 128;
  std::vector<uint8_t> out(rt * 128 * kt * 4, 0);
  for (size_t r = 0; r < q.rows; ++r)
    for (size_t c = 0; c < q.scale_cols; ++c)
      out[((r / 128) * kt + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4] = q.scales[r * q.scale_cols + c];
  return out;
}

std::vector<float> ScalesToCublasBlockwise(const QuantizedTensor& q) {
  const BlockExtent be = ResolveBlock(q.spec, q.rows, q.cols);
  if (ScaleFormatOf(q.spec.rule) != ScaleFormat::kFp32 || q.spec.axis != Axis::kRow)
    throw Error("blockwise cuBLASLt scales are FP32 1x128 or 128x128 row-wise scales, not '" + DescribeSpec(q.spec) + "'");
  if (be.rows == 1 && be.cols == 128) {  // VEC128_32F: ceil(K/128) x roundup(M, 4), M contiguous
    const size_t ld = (q.rows + 3) / 4 * 4;
    std::vector<float> out(q.scale_cols * ld, 0.0f);
    for (size_t r = 0; r < q.rows; ++r)
      for (size_t c = 0; c < q.scale_cols; ++c) out[c * ld + r] = q.ScaleAt(r, c);
    return out;
  }
  if (be.rows == 128 && be.cols == 128) {  // BLK128x128_32F: K-major, each block row padded to 4
    const size_t ld = (q.scale_cols + 3) / 4 * 4;
    std::vector<float> out(q.scale_rows * ld, 0.0f);
    for (size_t r = 0; r < q.scale_rows; ++r)
      for (size_t c = 0; c < q.scale_cols; ++c) out[r * ld + c] = q.ScaleAt(r, c);
    return out;
  }
  throw Error("blockwise cuBLASLt scales are 1x128 or 128x128 blocks, not " + DescribeBlock(q.spec));
}

}  // namespace qmx
