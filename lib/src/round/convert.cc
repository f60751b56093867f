// convert.cc: the public fast conversion entry points (qmx/convert.h): options flattened for the SIMD
// kernels, OpenMP over fixed chunks, the scalar reference loop, and SIMD target selection.
#include "qmx/convert.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "gemm/gemm_simd.h"
#include "hwy/targets.h"
#include "qmx/error.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "qmx/testing.h"
#include "round/convert_params.h"

namespace qmx {
namespace {

// Work split for Exec::kParallel: fixed chunks, so each element sees the same computation whatever the
// thread count (the random stream is indexed by element, not by thread).
constexpr size_t kChunk = size_t{1} << 16;

size_t SourceSize(DType src) { return src == DType::kF32 ? 4 : 2; }

uint32_t ReadSourceBits(DType src, const void* p, size_t i) {
  if (src == DType::kF32) return static_cast<const uint32_t*>(p)[i];
  return static_cast<const uint16_t*>(p)[i];
}

void CheckFast(DType src, const Format& dst, const CastOptions& opt) {
  (void)FormatOfSource(src);
  if (!IsFastFormat(dst))
    throw Error(std::string("format '") + dst.name + "' has " + std::to_string(dst.Bits()) +
                " bits; the fast paths handle formats of 8 bits or fewer");
  ValidateCastOptions(dst, opt);
}

// The test hooks' state (qmx/testing.h): written under target_mutex; fp16_allowed and vnni_allowed are also
// read by the kernels, hence atomic.
std::mutex target_mutex;
std::string forced_target;             // "" = the dispatcher's own choice
std::atomic<bool> fp16_allowed{true};  // false: a target without "_FP16" was forced
std::atomic<bool> vnni_allowed{true};  // false: a target without "_FP16" or "_VNNI" was forced

}  // namespace

namespace simd {

ConvertParams MakeConvertParams(const Format& dst, const CastOptions& opt, DType src) {
  ConvertParams p{};
  p.rounding = opt.rounding;
  if (dst.IsInt()) {
    p.kind = Kind::kInt;
    p.emin127 = 1 << 20;  // never exceeded: the quantum is fixed at 2^-frac
    p.sbase = 150 - dst.man_bits - (1 << 20);
    p.man_bits = 0;
    p.big_e = 127 + Limits(dst).emax + 2;  // |x| >= 2^(emax+2) overflows whatever the rounding
    p.int_mask = static_cast<uint32_t>(dst.CodeMask());
  } else {
    p.kind = Kind::kFloat;
    p.emin127 = dst.Emin() + 127;
    p.sbase = 23 - dst.man_bits;
    p.man_bits = dst.man_bits;
    p.adj = dst.FirstNormalField() == 0 ? 1 : 0;
    p.big_e = 1 << 30;
  }
  p.max_code = static_cast<uint32_t>(dst.MaxFiniteCode());
  p.sign_bit = static_cast<uint32_t>(dst.SignBit());
  p.has_neg_zero = dst.HasNegativeZero() ? ~0u : 0u;
  p.flush_out = opt.subnormals == Subnormals::kFlush && dst.HasSubnormals() ? ~0u : 0u;
  p.min_normal_mag = 1u << dst.man_bits;
  if (opt.subnormals == Subnormals::kFlush) p.flush_below = src == DType::kF16 ? 0x38800000u : 0x00800000u;
  p.is_unsigned = dst.is_signed ? 0u : ~0u;
  p.neg_to_zero = !dst.is_signed && (dst.encoding == Encoding::kP3109Extended || dst.encoding == Encoding::kP3109Finite) ? ~0u : 0u;
  // The codes of the special cases come from the reference routine itself.
  for (int negative = 0; negative < 2; ++negative) {
    const bool neg = negative != 0;
    p.nan_code[negative] = static_cast<uint32_t>(RoundExact({ExactValue::Kind::kNan, neg, 0, 0}, dst, opt).code);
    p.inf_code[negative] = static_cast<uint32_t>(RoundExact({ExactValue::Kind::kInf, neg, 0, 0}, dst, opt).code);
    p.ovf_code[negative] = static_cast<uint32_t>(RoundExact({ExactValue::Kind::kFinite, neg, 1, 4000}, dst, opt).code);
  }
  p.invalid_code = static_cast<uint32_t>(RoundExact({ExactValue::Kind::kFinite, true, 1, 0}, dst, opt).code);
  // sr_bits is checked (1..32) only where the rounding is stochastic; any other rounding ignores it.
  const int sr_bits = IsStochastic(opt.rounding) ? opt.sr_bits : 8;
  p.sr_bits = static_cast<uint32_t>(sr_bits);
  p.sr_mask = sr_bits >= 32 ? 0xFFFFFFFFu : (1u << sr_bits) - 1;
  return p;
}

}  // namespace simd

float SourceValueF32(DType t, const void* data, size_t i) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, static_cast<const uint8_t*>(data) + 4 * i, 4);
    return f;
  }
  const uint16_t b = static_cast<const uint16_t*>(data)[i];
  if (t == DType::kBF16) {
    const uint32_t w = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &w, 4);
    return f;
  }
  if ((b & 0x7C00u) == 0x7C00u && (b & 0x3FFu) != 0) return (b & 0x8000u) ? -std::nanf("") : std::nanf("");
  return static_cast<float>(DecodeToDouble(fmt::kFP16, b));
}

const Format& FormatOfSource(DType src) {
  switch (src) {
    case DType::kF32: return fmt::kFP32;
    case DType::kBF16: return fmt::kBF16;
    case DType::kF16: return fmt::kFP16;
    default: throw Error(std::string("conversions read fp32, bf16 or fp16, not ") + DTypeName(src));
  }
}

bool IsFastSource(DType src) { return src == DType::kF32 || src == DType::kBF16 || src == DType::kF16; }

bool IsFastFormat(const Format& f) { return f.Bits() <= 8; }

void ConvertToCodes(DType src_type, const void* src, size_t n, const Format& dst, const CastOptions& opt,
                    uint8_t* out, const SrSource& sr, Exec exec) {
  CheckFast(src_type, dst, opt);
  const simd::ConvertParams p = simd::MakeConvertParams(dst, opt, src_type);
  const size_t esize = SourceSize(src_type);
  // |x| into an unsigned format (negative=magnitude): each piece reaches the kernel as a copy with its sign
  // bits cleared (RoundExact does the same to one value).
  const bool magnitude = !dst.is_signed && opt.negative_unsigned == NegativeUnsigned::kMagnitude;
  if (!magnitude && (exec == Exec::kSequential || n <= kChunk)) {
    simd::ConvertCodes(p, src_type, src, n, out, sr.seed, sr.first_index, sr.bits);
    return;
  }
  const bool parallel = exec == Exec::kParallel && n > kChunk;
  const int64_t chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t start = static_cast<size_t>(c) * kChunk;
    const size_t len = std::min(kChunk, n - start);
    const uint8_t* piece = static_cast<const uint8_t*>(src) + start * esize;
    std::vector<uint8_t> abs;
    if (magnitude) {
      abs.assign(piece, piece + len * esize);
      for (size_t i = 0; i < len; ++i) abs[i * esize + esize - 1] &= 0x7F;  // little-endian: the top byte
      piece = abs.data();
    }
    simd::ConvertCodes(p, src_type, piece, len, out + start, sr.seed, sr.first_index + start,
                       sr.bits != nullptr ? sr.bits + start : nullptr);
  }
}

void ConvertToCodesRef(DType src_type, const void* src, size_t n, const Format& dst, const CastOptions& opt,
                       uint8_t* out, const SrSource& sr, Exec exec, uint8_t* flags) {
  const Format& sf = FormatOfSource(src_type);
  ValidateCastOptions(dst, opt);
  const bool parallel = exec == Exec::kParallel;
  const bool stochastic = IsStochastic(opt.rounding);
  // Element-wise and independent: any thread count gives the same bytes.
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
    const size_t k = static_cast<size_t>(i);
    const uint32_t r = !stochastic ? 0u : sr.bits != nullptr ? sr.bits[k] : RandomBitsForElement(sr.seed, sr.first_index + k);
    const RoundResult res = Convert(sf, ReadSourceBits(src_type, src, k), dst, opt, r);
    out[k] = static_cast<uint8_t>(res.code);
    if (flags != nullptr) flags[k] = static_cast<uint8_t>(res.flags);
  }
}

void DecodeToF32(const uint8_t* codes, size_t n, const Format& f, float* out, Exec exec) {
  if (!IsFastFormat(f)) throw Error(std::string("cannot decode '") + f.name + "' from bytes: it has more than 8 bits");
  // Bytes beyond the format's width are masked, as DecodeCode does.
  const std::vector<float> t = DecodeTableF32(f);
  float table[256];
  for (int c = 0; c < 256; ++c) table[c] = t[static_cast<size_t>(c) & f.CodeMask()];
  if (exec == Exec::kSequential || n <= kChunk) {
    simd::DecodeCodes(table, codes, n, out);
    return;
  }
  const int64_t chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t start = static_cast<size_t>(c) * kChunk;
    simd::DecodeCodes(table, codes + start, std::min(kChunk, n - start), out + start);
  }
}

namespace {

// Highway's targets, best first, with a pseudo-target before an AVX-512 target T: "<T>_FP16" where the CPU
// has AVX512-FP16 (T with the GEMM kernels' FP16 products, simd::Fp16Products, and VNNI's sums), else
// "<T>_VNNI" where it has AVX512-VNNI (T with the CDNA3 kernel's VPDPWSSD sums, simd::VnniSums).
std::vector<std::string> TargetNames() {
  std::vector<std::string> names;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    const std::string name = hwy::TargetName(t);
    if (t == HWY_AVX3 || t == HWY_AVX3_DL) {
      if (simd::CpuHasFp16Products()) names.push_back(name + "_FP16");
      else if (simd::CpuHasVnni()) names.push_back(name + "_VNNI");
    }
    names.push_back(name);
  }
  return names;
}

}  // namespace

namespace simd {
namespace {
// CPUID leaf 7's feature words (ebx, ecx, edx), zero where the CPU has no such leaf or is not x86.
struct Leaf7 {
  unsigned b = 0, c = 0, d = 0;
};
Leaf7 CpuLeaf7() {
  Leaf7 l;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0;
  if (__get_cpuid_count(7, 0, &a, &l.b, &l.c, &l.d) == 0) return Leaf7{};
#endif
  return l;
}
}  // namespace
bool CpuHasVnni() {
  static const bool has = [] {
    const Leaf7 l = CpuLeaf7();
    return (l.c >> 11 & 1) != 0 && (l.b >> 30 & 1) != 0;  // AVX512-VNNI, -BW
  }();
  return has;
}
bool CpuHasFp16Products() {
  static const bool has = CpuHasVnni() && (CpuLeaf7().d >> 23 & 1) != 0;  // and AVX512-FP16
  return has;
}
bool Fp16Products() { return fp16_allowed && CpuHasFp16Products(); }
bool VnniSums() { return vnni_allowed && CpuHasVnni(); }
}  // namespace simd

namespace {
void ForceSimdTargetLocked(const std::string& name) {
  hwy::SetSupportedTargetsForTest(0);
  fp16_allowed = true;
  vnni_allowed = true;
  if (name.empty()) {
    forced_target.clear();
    return;
  }
  const std::vector<std::string> names = TargetNames();
  const auto ends = [&](const char* suffix) {
    return name.size() > 5 && name.compare(name.size() - 5, 5, suffix) == 0;
  };
  const bool fp16 = ends("_FP16"), vnni = fp16 || ends("_VNNI");
  const std::string base = vnni ? name.substr(0, name.size() - 5) : name;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (base == hwy::TargetName(t) && std::find(names.begin(), names.end(), name) != names.end()) {
      hwy::SetSupportedTargetsForTest(t);
      fp16_allowed = fp16;
      vnni_allowed = vnni;
      forced_target = name;
      return;
    }
  }
  std::string known;
  for (const std::string& n : names) known += std::string(known.empty() ? "" : ", ") + n;
  throw Error("SIMD target '" + name + "' is not compiled in or not supported by this CPU (available: " + known + ")");
}
}  // namespace

std::vector<std::string> SimdTargets() {
  std::lock_guard<std::mutex> lock(target_mutex);
  hwy::SetSupportedTargetsForTest(0);
  const std::vector<std::string> names = TargetNames();
  if (!forced_target.empty()) ForceSimdTargetLocked(forced_target);
  return names;
}

std::string SimdTargetName() {
  std::lock_guard<std::mutex> lock(target_mutex);
  if (!forced_target.empty()) return forced_target;
  const std::vector<std::string> names = TargetNames();
  return names.empty() ? "none" : names.front();
}

void ForceSimdTarget(const std::string& name) {
  std::lock_guard<std::mutex> lock(target_mutex);
  ForceSimdTargetLocked(name);
}

}  // namespace qmx
