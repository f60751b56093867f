// mx.cc: MX block quantization entry points (qmx/mx.h): spec validation, scale rule names, and the fast
// path (SIMD kernels of quantize/mx_simd.cc, OpenMP over fixed runs of blocks).
#include "qmx/mx.h"

#include <algorithm>
#include <cmath>

#include "qmx/error.h"
#include "quantize/quantize_internal.h"
#include "quantize/mx_kernels.h"

namespace qmx {

void ValidateMxSpec(const MxSpec& spec) {
  if (!IsFastFormat(spec.elem) || spec.elem.encoding == Encoding::kExponentOnly)
    throw Error(std::string("'") + spec.elem.name + "' cannot be an MX element format (it needs 8 bits or fewer and a zero)");
  if (!IsPow2Rule(spec.rule))
    throw Error(std::string("MX blocks take a UE8M0 scale rule (ocp-floor, round-up, ceil, even, max-finite), not '") +
                ScaleRuleName(spec.rule) + "'");
  if (spec.rule == ScaleRule::kMaxFinite && spec.nan != NanPolicy::kIgnore)
    throw Error("the max-finite rule ignores non-finite elements: it needs the NaN policy 'ignore', not '" +
                std::string(NanPolicyName(spec.nan)) + "'");
  if (spec.scaling != ElementScaling::kExact && spec.cast.subnormals == Subnormals::kFlush)
    throw Error("flushing subnormals needs exact element scaling (the FP32 modes would flush the scaled product)");
  if (spec.block < 1 || spec.block > (1 << 30))
    throw Error("MX block length must be 1..2^30, not " + std::to_string(spec.block));
  detail::CheckAmaxOrder(spec.amax_order, spec.nan);
  ValidateCastOptions(spec.elem, spec.cast);
  const Format& f = spec.scale_format;
  if (f == fmt::kUE8M0) return;
  if (!IsFastFormat(f) || f.IsInt() || f.encoding == Encoding::kExponentOnly)
    throw Error(std::string("'") + f.name +
                "' cannot hold MX scales: they need UE8M0 or a float format of 8 bits or fewer with a mantissa");
  if (!f.HasNan() &&
      (spec.nan == NanPolicy::kBlockNan || spec.nan == NanPolicy::kScaleNan || spec.nan == NanPolicy::kTe))
    throw Error(std::string("'") + f.name + "' has no NaN code for a block holding a NaN or an Inf (NaN policy " +
                NanPolicyName(spec.nan) + "): take nan_policy ignore-nan or ignore, or a scale format with a NaN");
}

MxScaleRange MxScaleRangeOf(const Format& scale_format) {
  if (scale_format == fmt::kUE8M0) return {};
  // A float format holds every power of two from its smallest positive value (a power of two, subnormal or
  // normal) to the bottom of its largest binade.
  const FormatLimits lim = Limits(scale_format);
  const MxScaleRange r{std::max(std::ilogb(lim.min_subnormal), -127), std::min(lim.emax, 127)};
  if (r.lo > r.hi) throw Error(std::string("'") + scale_format.name + "' holds no power of two for an MX scale");
  return r;
}

double MxScaleValue(const Format& scale_format, uint8_t code) {
  if (scale_format == fmt::kUE8M0) return code == 0xFF ? std::nan("") : std::ldexp(1.0, static_cast<int>(code) - 127);
  const double v = DecodeToDouble(scale_format, code & scale_format.CodeMask());
  return std::isnan(v) ? std::nan("") : v;  // one NaN, as UE8M0's 0xFF reads
}

namespace {

constexpr size_t kBlocksPerChunk = detail::kBlocksPerRun;

simd::MxKernelArgs MakeArgs(const MxSpec& spec, const simd::ConvertParams& p) {
  const FormatLimits lim = Limits(spec.elem);
  simd::MxKernelArgs a{};
  a.p = &p;
  a.block = spec.block;
  a.rule = spec.rule;
  a.destmax = static_cast<float>(lim.max_finite);
  a.emax = lim.emax;
  a.elem_man = spec.elem.man_bits;
  a.policy = spec.nan;
  a.scaling = spec.scaling;
  a.elem_nan = spec.elem.HasNan() ? static_cast<uint32_t>(spec.elem.CanonicalNan()) : 0u;
  return a;
}

}  // namespace

namespace detail {

void RunBlockKernel(const simd::MxKernelArgs& kernel_args, DType src_type, const void* src, size_t n, uint8_t* codes,
                    uint8_t* scales, const SrSource& sr, Exec exec) {
  simd::MxKernelArgs args = kernel_args;
  args.stream = n >= kStreamCodes;
  const size_t esize = src_type == DType::kF32 ? 4 : 2;
  const size_t chunk = kBlocksPerChunk * static_cast<size_t>(args.block);
  if (exec == Exec::kSequential || n <= chunk) {
    simd::QuantizeMxBlocks(args, src_type, src, n, codes, scales, sr.seed, sr.first_index, sr.bits);
    return;
  }
  const int64_t chunks = static_cast<int64_t>((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t start = static_cast<size_t>(c) * chunk;
    simd::QuantizeMxBlocks(args, src_type, static_cast<const uint8_t*>(src) + start * esize, std::min(chunk, n - start),
                           codes + start, scales + static_cast<size_t>(c) * kBlocksPerChunk, sr.seed,
                           sr.first_index + start, sr.bits != nullptr ? sr.bits + start : nullptr);
  }
}

}  // namespace detail

void QuantizeMx(DType src_type, const void* src, size_t n, const MxSpec& spec, uint8_t* codes, uint8_t* scales,
                const SrSource& sr, Exec exec) {
  ValidateMxSpec(spec);
  if (!IsFastSource(src_type)) throw Error(std::string("MX quantization reads fp32, bf16 or fp16, not ") + DTypeName(src_type));
  // A comparison-ordered amax, and scales in a format other than UE8M0, have no block kernel: each block on the
  // reference (no thread changes a bit).
  if (spec.amax_order != AmaxOrder::kAny || !(spec.scale_format == fmt::kUE8M0))
    return QuantizeMxRef(src_type, src, n, spec, codes, scales, sr);
  const simd::ConvertParams p = simd::MakeConvertParams(spec.elem, spec.cast, src_type);
  detail::RunBlockKernel(MakeArgs(spec, p), src_type, src, n, codes, scales, sr, exec);
}

void DequantizeMx(const uint8_t* codes, const uint8_t* scales, size_t n, const MxSpec& spec, float* out, Exec exec) {
  ValidateMxSpec(spec);
  if (!(spec.scale_format == fmt::kUE8M0)) return DequantizeMxRef(codes, scales, n, spec, out);
  const std::vector<float> t = DecodeTableF32(spec.elem);
  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = t[static_cast<size_t>(c) & spec.elem.CodeMask()];
  const size_t chunk = kBlocksPerChunk * static_cast<size_t>(spec.block);
  if (exec == Exec::kSequential || n <= chunk) {
    simd::DequantizeMxBlocks(table, spec.block, codes, scales, n, out);
    return;
  }
  const int64_t chunks = static_cast<int64_t>((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t start = static_cast<size_t>(c) * chunk;
    simd::DequantizeMxBlocks(table, spec.block, codes + start, scales + static_cast<size_t>(c) * kBlocksPerChunk,
                             std::min(chunk, n - start), out + start);
  }
}

}  // namespace qmx
