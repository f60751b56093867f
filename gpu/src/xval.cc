// xval.cc: cross-validation of the CUDA backend against the CPU emulator (issue: CUDA backend and xval):
// golden files replayed on the device, conversions over ranges of FP32 inputs (all 2^32 with
// exhaustive), MX and NVFP4 quantization of random tensors, cuBLASLt and mma.sync GEMMs against the
// accumulation models (gemm.h). Inputs are generated here; every expected value comes from lib/.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu_internal.h"
#include "qmx/convert.h"
#include "qmx/distributions.h"
#include "qmx/error.h"
#include "qmx/gpu.h"
#include "qmx/host_device.h"
#include "qmx/quantize.h"
#include "qmx/recipe.h"
#include "qmx/scaled_mm.h"

namespace qmx::gpu {
namespace {

using detail::IsFp8;
using Keys = golden::HeaderKeys;
using Fields = std::vector<std::string>;
using golden::CastOptionsOf;
using golden::Hex;
using golden::JoinCodes;

const std::string& Get(const Keys& k, const std::string& name) { return golden::KeyValue(k, name); }

uint32_t HexWord(const std::string& s) { return static_cast<uint32_t>(std::stoul(s, nullptr, 16)); }

bool IsSubByte(const Format& f) { return f == fmt::kE2M1 || f == fmt::kE2M3 || f == fmt::kE3M2; }  // by encoding

// The device path a conversion takes: the instruction where this device has it, else the header functions.
ConvertPath PathFor(const Format& f, const CastOptions& c) {
  if (IsFp8(f)) return c.saturation == Saturation::kSatFinite ? ConvertPath::kPtx : ConvertPath::kHeader;
  if (IsSubByte(f)) return Device().sm100a_code && c.rounding == Rounding::kRne ? ConvertPath::kPtx : ConvertPath::kHeader;
  return Device().sm100a_code ? ConvertPath::kPtx : ConvertPath::kHeader;  // ue8m0
}

std::string RunConvert(const Keys& k, const std::vector<Fields>& ins, std::vector<Fields>& outs) {
  if (Get(k, "src") != "f32") return "the GPU backend converts f32 sources only";
  const Format dst = ParseFormat(Get(k, "dst"));  // a user format or an alias (float8_e4m3) too
  const CastOptions c = CastOptionsOf(k);
  if (IsSubByte(dst) && c.nan_fallback != NanFallback::kMaxPositive)
    return "cvt and the header functions turn NaN into the largest code (nan-fallback=max), not what this file says";
  if (dst.HasNan() && c.nan_sign != NanSign::kPositive)
    return "cvt and the header functions give the positive NaN code for every NaN (measured on sm_90): the "
           "nan-sign=positive file describes the device";
  if (c.nan_payload != NanPayload::kDefault)
    return std::string("cvt and the header functions give the library's default NaN code (0x7F for e5m2), not the ") +
           NanPayloadName(c.nan_payload) + " payload this file names (RISC-V's canonical NaN)";
  if (std::string(dst.name) == "ue8m0")
    return "the CUDA header's ue8m0 conversion takes |x| for a negative input (0x01 for -2^-126, measured on sm_90) "
           "where this file has the invalid-input NaN (negative=invalid); xval's conversion rows compare every input "
           "under negative=magnitude";
  const ConvertPath p = PathFor(dst, c);
  if (std::string why = ConvertSupport(dst, c, p); !why.empty()) return why;
  std::vector<float> x(ins.size());
  for (size_t i = 0; i < ins.size(); ++i) x[i] = hd::F32FromBits(HexWord(ins[i][0]));
  std::vector<uint8_t> codes(x.size());
  ConvertF32(x.data(), x.size(), dst, c, p, codes.data());
  outs.assign(ins.size(), Fields{});
  for (size_t i = 0; i < ins.size(); ++i) outs[i] = {Hex(codes[i], 2), "--"};
  return "";
}

std::string RunMx(const Keys& k, const std::vector<Fields>& ins, std::vector<Fields>& outs) {
  const MxSpec s = golden::MxSpecOf(k);
  if (std::string why = MxSupport(s); !why.empty()) return why;
  // Policies that convert a NaN element on its own put the device's positive NaN code where a nan-sign=keep
  // file keeps the sign; te-rcp models the device's FMUL, whose NaN products are already positive.
  const bool own_nans = (s.nan == NanPolicy::kIgnore || s.nan == NanPolicy::kIgnoreNan) && s.scaling != ElementScaling::kTeRcp;
  if (own_nans && s.elem.HasNan() && s.cast.nan_sign != NanSign::kPositive)
    return std::string("NaN elements converted under the ") + NanPolicyName(s.nan) + " policy" +
           " get the device's positive NaN code; this file keeps the sign (nan-sign=keep)";
  const size_t bl = static_cast<size_t>(s.block), n = ins.size();
  std::vector<float> x(n * bl);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < bl; ++j) x[i * bl + j] = hd::F32FromBits(HexWord(ins[i][j]));
  std::vector<uint8_t> codes(n * bl), scales(n);
  QuantizeMx(x.data(), x.size(), s, codes.data(), scales.data());
  outs.assign(n, Fields{});
  for (size_t i = 0; i < n; ++i) outs[i] = {Hex(scales[i], 2), JoinCodes(&codes[i * bl], bl, 2), "--"};
  return "";
}

std::string RunUe8m0(const Keys& k, const std::vector<Fields>& ins, std::vector<Fields>& outs) {
  MxSpec s;
  s.elem = ParseFormat(Get(k, "elem"));
  s.rule = ParseScaleRule(Get(k, "rule"));
  s.block = 1;
  s.nan = s.rule == ScaleRule::kMaxFinite ? NanPolicy::kIgnore : NanPolicy::kBlockNan;
  if (std::string why = MxSupport(s); !why.empty()) return why;
  std::vector<float> x(ins.size());
  for (size_t i = 0; i < ins.size(); ++i) x[i] = hd::F32FromBits(HexWord(ins[i][0]));
  std::vector<uint8_t> codes(x.size()), scales(x.size());
  QuantizeMx(x.data(), x.size(), s, codes.data(), scales.data());
  outs.assign(ins.size(), Fields{});
  for (size_t i = 0; i < ins.size(); ++i) outs[i] = {Hex(scales[i], 2), "--"};
  return "";
}

std::string RunNvfp4(const Keys& k, const std::vector<Fields>& ins, std::vector<Fields>& outs) {
  const ScaleRule rule = ParseScaleRule(Get(k, "rule"));
  const CastOptions c = CastOptionsOf(k);
  if (c.rounding != Rounding::kRne || c.saturation != Saturation::kSatFinite)
    return "the NVFP4 kernel rounds to nearest even with satfinite only";
  if (!Device().available) return Device().reason;
  const size_t bl = std::stoul(Get(k, "block"));
  outs.assign(ins.size(), Fields{});
  std::vector<float> x(bl);
  std::vector<uint8_t> codes(bl), s8(1);
  for (size_t i = 0; i < ins.size(); ++i) {
    const float amax = hd::F32FromBits(HexWord(ins[i][0]));
    for (size_t j = 0; j < bl; ++j) x[j] = hd::F32FromBits(HexWord(ins[i][1 + j]));
    float dec = 0;
    QuantizeNvfp4(x.data(), bl, bl, amax, rule, codes.data(), s8.data(), &dec);
    outs[i] = {Hex(hd::F32Bits(dec), 8), Hex(s8[0], 2), JoinCodes(codes.data(), bl, 1), "--"};
  }
  return "";
}

std::string RunSr(const Keys& k, const std::vector<Fields>& ins, std::vector<Fields>& outs) {
  if (Get(k, "layout") != "ptx-cvt-rs-x4") return "only the cvt.rs x4 layout is an instruction";
  const Format dst = ParseFormat(Get(k, "dst"));
  const CastOptions c = CastOptionsOf(k);
  if (c.rounding != Rounding::kSrA || c.sr_bits != 8) return "cvt.rs is SR-A with 8 random bits per element";
  const DeviceInfo& d = Device();
  if (!d.available) return d.reason;
  if (!d.sm100a_code) return "cvt.rs needs sm_100a (Blackwell); this device is sm_" + std::to_string(d.major * 10 + d.minor);
  const size_t n = ins.size();
  std::vector<float> x(4 * n);
  std::vector<uint32_t> rb(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < 4; ++j) x[4 * i + j] = hd::F32FromBits(HexWord(ins[i][j]));
    rb[i] = HexWord(ins[i][4]);
  }
  ConvertF32SrX4(x.data(), rb.data(), n, dst, out.data());
  outs.assign(n, Fields{});
  for (size_t i = 0; i < n; ++i) outs[i] = {Hex(out[i], dst.Bits() == 4 ? 4 : 8), "--"};
  return "";
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Note(XvalRow& r, size_t max_show, const std::string& text) {
  ++r.mismatches;
  if (r.first.size() < max_show) r.first.push_back(text);
}

// ------------------------------------------------------------------ conversions over FP32 ranges
// The emulator's options for what the device computes: NaN inputs give the positive NaN code (PTX cvt and
// the header functions drop the sign), FP6/FP4 take NaN to +max.
CastOptions DeviceCast(Rounding r, Saturation s) {
  CastOptions c;
  c.rounding = r;
  c.saturation = s;
  c.nan_sign = NanSign::kPositive;
  return c;
}

void ConvertRows(const XvalOptions& opt, const std::function<void(XvalRow&&)>& emit) {
  struct Conv {
    const char* dst;
    Rounding round;
    Saturation sat;
  };
  const Conv convs[] = {
      {"e4m3", Rounding::kRne, Saturation::kSatFinite}, {"e5m2", Rounding::kRne, Saturation::kSatFinite},
      {"e4m3", Rounding::kRne, Saturation::kNoSat},     {"e5m2", Rounding::kRne, Saturation::kNoSat},
      {"e2m1", Rounding::kRne, Saturation::kSatFinite}, {"e2m3", Rounding::kRne, Saturation::kSatFinite},
      {"e3m2", Rounding::kRne, Saturation::kSatFinite}, {"e2m1", Rounding::kRz, Saturation::kSatFinite},
      {"ue8m0", Rounding::kRz, Saturation::kSatFinite}, {"ue8m0", Rounding::kRu, Saturation::kSatFinite},
  };
  // Ranges of input bit patterns: everything, or 64 slices of 2^20 spread over the space plus the
  // boundaries of the infinities and NaNs.
  std::vector<std::pair<uint32_t, uint64_t>> ranges;
  if (opt.exhaustive) {
    for (uint64_t s = 0; s < (uint64_t{1} << 32); s += uint64_t{1} << 26) ranges.push_back({static_cast<uint32_t>(s), uint64_t{1} << 26});
  } else {
    for (uint32_t c = 0; c < 64; ++c) ranges.push_back({c << 26 | ((c * 0x9E3779B9u) & 0x3F00000u), uint64_t{1} << 20});
    ranges.push_back({0x7F780000u, uint64_t{1} << 20});
    ranges.push_back({0xFF780000u, uint64_t{1} << 20});
  }
  for (const Conv& cv : convs) {
    const Format& dst = GetFormat(cv.dst);
    const bool unsigned_dst = std::string(cv.dst) == "ue8m0";
    for (ConvertPath p : {ConvertPath::kPtx, ConvertPath::kHeader}) {
      // ue8m0: the header function takes |x| for a negative input, which the emulator models with
      // negative=magnitude, so every input is compared; what sm_100a's cvt does with one is not measured
      // (x >= +0 only there).
      CastOptions c = DeviceCast(cv.round, cv.sat);
      const bool nonneg_only = unsigned_dst && p == ConvertPath::kPtx;
      if (unsigned_dst && p == ConvertPath::kHeader) c.negative_unsigned = NegativeUnsigned::kMagnitude;
      XvalRow r;
      r.group = "convert";
      r.op = std::string("f32->") + cv.dst + " " + RoundingName(cv.round) + " " + SaturationName(cv.sat) + " (" +
             ConvertPathName(p) + ")" + (nonneg_only ? " x >= +0" : "");
      r.reference = std::string("cpu-simd, nan-sign=positive") + (unsigned_dst && !nonneg_only ? ", negative=magnitude" : "");
      r.skipped = ConvertSupport(dst, c, p);
      const auto t0 = std::chrono::steady_clock::now();
      if (r.skipped.empty()) {
        std::vector<uint8_t> gpu, cpu;
        std::vector<uint32_t> x;
        for (const auto& [first, count] : ranges) {
          if (nonneg_only && first >= 0x80000000u) continue;
          gpu.resize(count);
          cpu.resize(count);
          x.resize(count);
          ConvertF32Range(first, count, dst, c, p, gpu.data());
#pragma omp parallel for schedule(static)
          for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) x[static_cast<size_t>(i)] = first + static_cast<uint32_t>(i);
          ConvertToCodes(DType::kF32, x.data(), count, dst, c, cpu.data(), {}, Exec::kParallel);
          r.cases += count;
          if (std::memcmp(gpu.data(), cpu.data(), count) == 0) continue;
          for (size_t i = 0; i < count; ++i)
            if (gpu[i] != cpu[i])
              Note(r, opt.max_show, Hex(x[i], 8) + ": gpu " + Hex(gpu[i], 2) + " cpu " + Hex(cpu[i], 2));
        }
      }
      r.seconds = Seconds(t0);
      emit(std::move(r));
    }
  }
}

// ------------------------------------------------------------------ MX and NVFP4 quantization
// Blocks of normal data with outliers, each scaled by its own power of two over FP32's whole range, with
// zero blocks, subnormal blocks and blocks holding an Inf or a NaN.
std::vector<float> QuantInputs(size_t n, size_t block, uint64_t seed) {
  std::vector<float> x(n);
  GenerateDist(ParseDist("normal+tau20:0.01"), seed, x.data(), n);
  std::mt19937_64 g(seed);
  for (size_t b = 0; b * block < n; ++b) {
    const size_t s = b * block, e = std::min(n, s + block);
    const int kind = static_cast<int>(g() % 64);
    const int sh = static_cast<int>(g() % 250) - 140;
    for (size_t i = s; i < e; ++i) x[i] = std::ldexp(x[i], sh);
    if (kind == 0) std::fill(x.begin() + s, x.begin() + e, 0.0f);
    if (kind == 1) x[s + g() % (e - s)] = (g() & 1) ? INFINITY : -INFINITY;
    if (kind == 2) x[s + g() % (e - s)] = hd::F32FromBits((g() & 1 ? 0xFFC00000u : 0x7FC00000u) | (g() & 0x3FFFFF));
    if (kind == 3)
      for (size_t i = s; i < e; ++i) x[i] = std::ldexp(x[i], -sh - 140);
  }
  return x;
}

void QuantRows(const XvalOptions& opt, const std::function<void(XvalRow&&)>& emit) {
  const size_t n = opt.quick ? (size_t{1} << 14) : (size_t{1} << 22);
  const std::vector<float> x = QuantInputs(n, 32, opt.seed);
  struct Cfg {
    ScaleRule rule;
    NanPolicy nan;
    ElementScaling scaling;
  };
  const Cfg cfgs[] = {{ScaleRule::kOcpFloor, NanPolicy::kBlockNan, ElementScaling::kExact},
                      {ScaleRule::kRoundUp, NanPolicy::kBlockNan, ElementScaling::kExact},
                      {ScaleRule::kRoundUp, NanPolicy::kTe, ElementScaling::kTeRcp},
                      {ScaleRule::kCeil, NanPolicy::kScaleNan, ElementScaling::kFp32},
                      {ScaleRule::kEven, NanPolicy::kIgnoreNan, ElementScaling::kExact},
                      {ScaleRule::kMaxFinite, NanPolicy::kIgnore, ElementScaling::kExact}};
  for (const char* e : {"e4m3", "e5m2", "e2m1", "e2m3", "e3m2"}) {
    for (const Cfg& cf : cfgs) {
      MxSpec s;
      s.elem = GetFormat(e);
      s.rule = cf.rule;
      s.nan = cf.nan;
      s.scaling = cf.scaling;
      s.cast = DeviceCast(Rounding::kRne, Saturation::kSatFinite);
      XvalRow r;
      r.group = "quantize";
      r.op = std::string("mx ") + e + " " + ScaleRuleName(cf.rule) + " " + NanPolicyName(cf.nan) + " " +
             ElementScalingName(cf.scaling);
      r.reference = "QuantizeMx (cpu-simd), nan-sign=positive";
      r.skipped = MxSupport(s);
      const auto t0 = std::chrono::steady_clock::now();
      if (r.skipped.empty()) {
        const size_t nb = n / 32;
        std::vector<uint8_t> gc(n), gs(nb), cc(n), cs(nb);
        QuantizeMx(x.data(), n, s, gc.data(), gs.data());
        qmx::QuantizeMx(DType::kF32, x.data(), n, s, cc.data(), cs.data(), {}, Exec::kParallel);
        r.cases = nb;
        for (size_t b = 0; b < nb; ++b) {
          const bool same = gs[b] == cs[b] && std::memcmp(&gc[b * 32], &cc[b * 32], 32) == 0;
          if (!same)
            Note(r, opt.max_show, "block " + std::to_string(b) + ": gpu " + Hex(gs[b], 2) + " " + JoinCodes(&gc[b * 32], 32, 2) +
                                      " cpu " + Hex(cs[b], 2) + " " + JoinCodes(&cc[b * 32], 32, 2));
        }
      }
      r.seconds = Seconds(t0);
      emit(std::move(r));
    }
  }
  // NVFP4: the measured amax, and a quarter of it (blocks beyond saturate), in both orders.
  float amax = 0;
  for (float v : x)
    if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = std::isfinite(x[i]) ? std::ldexp(x[i], -110) : x[i];  // near unit
  float ay = 0;
  for (float v : y)
    if (std::isfinite(v)) ay = std::max(ay, std::fabs(v));
  for (ScaleRule rule : {ScaleRule::kNvfp4, ScaleRule::kNvfp4Div}) {
    for (float ta : {ay, ay / 4, 0.0f}) {
      XvalRow r;
      r.group = "quantize";
      r.op = std::string("nvfp4 ") + ScaleRuleName(rule) + " tensor amax " + Hex(hd::F32Bits(ta), 8);
      r.reference = "QuantizeNvfp4WithAmax (cpu-simd)";
      const auto t0 = std::chrono::steady_clock::now();
      if (!Device().available) {
        r.skipped = Device().reason;
      } else {
        const size_t nb = n / 16;
        std::vector<uint8_t> gc(n), gs(nb);
        float gdec = 0;
        QuantizeNvfp4(y.data(), n, 16, ta, rule, gc.data(), gs.data(), &gdec);
        QuantSpec q = QuantSpecByName("nvfp4");
        q.rule = rule;
        const QuantizedTensor c = QuantizeNvfp4WithAmax(TensorView{DType::kF32, y.data(), n / 16, 16}, q, ta);
        r.cases = nb;
        if (hd::F32Bits(gdec) != hd::F32Bits(c.tensor_decode))
          Note(r, opt.max_show, "tensor decode: gpu " + Hex(hd::F32Bits(gdec), 8) + " cpu " + Hex(hd::F32Bits(c.tensor_decode), 8));
        for (size_t b = 0; b < nb; ++b)
          if (gs[b] != c.scales[b] || std::memcmp(&gc[b * 16], &c.codes[b * 16], 16) != 0)
            Note(r, opt.max_show, "block " + std::to_string(b) + ": gpu " + Hex(gs[b], 2) + " " + JoinCodes(&gc[b * 16], 16, 1) +
                                      " cpu " + Hex(c.scales[b], 2) + " " + JoinCodes(&c.codes[b * 16], 16, 1));
      }
      r.seconds = Seconds(t0);
      emit(std::move(r));
    }
  }
}

// ------------------------------------------------------------------ GEMMs
// FP8 codes of values drawn as gpu/scripts/collect_scaled_mm.py draws them: normal, every finite code
// ("bits"), log-uniform magnitudes ("wide"), or adversarial rows (one large product among tiny ones,
// exact cancellation, powers of two, equal values, subnormals).
std::vector<uint8_t> Codes(std::mt19937_64& g, size_t rows, size_t cols, const Format& f, const std::string& kind) {
  std::vector<float> v(rows * cols);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  const bool e4 = std::string(f.name) == "e4m3";
  std::vector<uint8_t> c(rows * cols);
  if (kind == "bits") {
    for (auto& b : c) {
      b = static_cast<uint8_t>(g());
      if (e4 && (b & 0x7F) == 0x7F) b ^= 1;
      if (!e4 && (b & 0x7C) == 0x7C) b &= 0xFB;
    }
    return c;
  }
  for (size_t r = 0; r < rows; ++r) {
    float* row = &v[r * cols];
    const int t = static_cast<int>(r % 6);
    const float sc = std::ldexp(1.0f, static_cast<int>(g() % 12) - 8);
    for (size_t j = 0; j < cols; ++j) {
      if (kind == "normal") {
        row[j] = nd(g);
      } else if (kind == "wide") {
        const float lo = e4 ? -12.0f : -18.0f, hi = e4 ? 8.7f : 15.8f;
        row[j] = ((g() & 1) ? 1.0f : -1.0f) * std::exp2(lo + (hi - lo) * ud(g));
      } else {  // adversarial
        if (t == 0) row[j] = nd(g) * std::ldexp(1.0f, -7);
        else if (t == 1) row[j] = j < cols / 2 ? nd(g) * 16 : 0.0f;
        else if (t == 2) row[j] = ((g() & 1) ? 1.0f : -1.0f) * std::ldexp(1.0f, static_cast<int>(g() % 17) - 9);
        else if (t == 3) row[j] = 1.875f * std::ldexp(1.0f, static_cast<int>(r % 6) - 3);
        else if (t == 4) row[j] = j % 17 == 0 ? nd(g) * 4 : nd(g) * std::ldexp(1.0f, -8);
        else row[j] = nd(g) * sc;
      }
    }
    if (kind == "adv" && t == 0) row[g() % cols] = (g() & 1) ? 240.0f : -240.0f;
    if (kind == "adv" && t == 1) {
      for (size_t j = cols / 2; j < 2 * (cols / 2); ++j) row[j] = -row[j - cols / 2];
      for (int q = 0; q < 3; ++q) row[g() % cols] = nd(g) * std::ldexp(1.0f, -6);
    }
  }
  ConvertToCodes(DType::kF32, v.data(), v.size(), f, CastOptions{}, c.data(), {}, Exec::kParallel);
  return c;
}

// A's codes laid out for B (K x N) when the adversarial rows were drawn along K.
std::vector<uint8_t> Transposed(const std::vector<uint8_t>& c, size_t rows, size_t cols) {
  std::vector<uint8_t> t(c.size());
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < cols; ++j) t[j * rows + r] = c[r * cols + j];
  return t;
}

void CompareD(XvalRow& r, size_t max_show, const std::vector<float>& gpu, const std::vector<float>& cpu, size_t n,
              const std::string& name) {
  r.cases += gpu.size();
  for (size_t i = 0; i < gpu.size(); ++i) {
    const uint32_t a = hd::F32Bits(gpu[i]), b = hd::F32Bits(cpu[i]);
    if (a == b || (std::isnan(gpu[i]) && std::isnan(cpu[i]))) continue;
    Note(r, max_show, name + " D[" + std::to_string(i / n) + "," + std::to_string(i % n) + "]: gpu " + Hex(a, 8) + " model " + Hex(b, 8));
  }
}

struct GemmCase {
  std::string name;
  size_t m, n, k;
  const char* fa;
  const char* fb;
  const char* kind_a;
  const char* kind_b;
};

void SetRandomBlockScales(GemmOperand& o, size_t br, size_t bc, std::mt19937_64& g) {
  std::vector<uint32_t> raw(((o.rows + br - 1) / br) * ((o.cols + bc - 1) / bc));
  std::uniform_real_distribution<float> ud(1.0f, 2.0f);
  for (auto& w : raw) w = hd::F32Bits(std::ldexp(ud(g), static_cast<int>(g() % 7) - 3));
  SetBlockScales(o, ScaleFormat::kFp32, br, bc, raw.data());
}

// torch._scaled_mm's model (qmx/scaled_mm.h) for per-tensor operands with numSplitsK = splits: FP32 output.
std::vector<float> ScaledMmModel(const GemmOperand& a, const GemmOperand& b, bool fast, int splits) {
  ScaledMmArgs x;
  x.a_format = a.elem;
  x.b_format = b.elem;
  x.m = a.rows;
  x.n = b.cols;
  x.k = a.cols;
  x.a = a.codes.data();
  x.b = b.codes.data();
  x.scale_a = &a.tensor_scale;
  x.scale_b = &b.tensor_scale;
  x.fast_accum = fast;
  x.split_k = splits;
  const ScaledMmResult r = ScaledMm(x);
  std::vector<float> d(r.bits.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = hd::F32FromBits(r.bits[i]);
  return d;
}

std::string AlgoText(const CublasAlgo& al) {
  return "algo " + std::to_string(al.id) + " tile " + std::to_string(al.tile) + " stages " + std::to_string(al.stages) +
         " numSplitsK " + std::to_string(al.split_k) + " reduction " + std::to_string(al.reduction);
}

// Per-tensor FP8 GEMMs at large K and skinny shapes, where cuBLASLt's heuristic picks split-K kernels: the
// device against scaled_mm's model with the numSplitsK the device ran (read from the algorithm; only the
// FP32 reduction, scheme 2, is modelled), then one kernel forced to split counts the heuristic does not
// choose (the model's partition of K into 128-element tiles at uneven counts, and a K with a part tile).
void SplitKRows(const XvalOptions& opt, const DeviceInfo& dev, std::mt19937_64& g, const std::function<void(XvalRow&&)>& emit) {
  struct Shape {
    size_t m, n, k;
    const char* fb;
  };
  std::vector<Shape> shapes = {{16, 64, 16384, "e4m3"}, {64, 128, 8192, "e4m3"}, {16, 256, 12288, "e5m2"}};
  if (!opt.quick)
    shapes.insert(shapes.end(), {{16, 1024, 65536, "e4m3"}, {16, 64, 131072, "e4m3"}, {256, 256, 16384, "e4m3"},
                                 {48, 2048, 24576, "e4m3"}, {16, 8192, 28672, "e4m3"}, {128, 1024, 28672, "e5m2"},
                                 {32, 4096, 8192, "e4m3"}, {4096, 16, 4096, "e4m3"}});
  for (CublasMode mode : {CublasMode::kTensorwise, CublasMode::kTensorwiseFast}) {
    const bool fast = mode == CublasMode::kTensorwiseFast;
    for (const bool forced : {false, true}) {
      XvalRow r;
      r.group = "gemm";
      r.op = std::string("cuBLASLt ") + CublasModeName(mode) + (forced ? " FP8, forced numSplitsK" : " FP8, large K / skinny");
      r.reference = CublasModeModel(mode, dev).empty() ? "(no model for this device)" : "scaled_mm (" + CublasModeModel(mode, dev) + ", split-K)";
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<Shape> todo = forced ? std::vector<Shape>{{64, 256, 8192, "e4m3"}, {32, 128, 8224, "e4m3"}} : shapes;
      const std::vector<int> counts = forced ? std::vector<int>{2, 3, 5, 7, 16} : std::vector<int>{0};
      for (size_t si = 0; si < todo.size() && r.skipped.empty(); ++si) {
        const Shape& sh = todo[si];
        const Format& fb = GetFormat(sh.fb);
        const std::vector<uint8_t> ac = Codes(g, sh.m, sh.k, fmt::kE4M3, si % 2 ? "wide" : "normal");
        const std::vector<uint8_t> bc = Codes(g, sh.k, sh.n, fb, si % 3 == 2 ? "bits" : "normal");
        GemmOperand a = OperandFromCodes(fmt::kE4M3, sh.m, sh.k, ac.data()), b = OperandFromCodes(fb, sh.k, sh.n, bc.data());
        if (si == 1) {  // scales other than 1: where the split's partial sums meet the scale
          a.tensor_scale = 0.37109375f / 3;
          b.tensor_scale = 5.3f;
        }
        r.skipped = CublasSupport(mode, a, b);
        if (r.skipped.empty() && r.reference.front() == '(') r.skipped = "no accumulation model is known for this mode on " + dev.name;
        if (!r.skipped.empty()) break;
        const std::string shape = std::to_string(sh.m) + "x" + std::to_string(sh.n) + "x" + std::to_string(sh.k) + " " + sh.fb;
        for (const int want : counts) {
          CublasAlgo al;
          std::vector<float> d;
          try {
            d = GemmCublasLt(a, b, mode, &al, want);
          } catch (const Error& e) {
            r.notes.push_back(shape + ": " + e.what());
            continue;
          }
          r.notes.push_back(shape + ": " + AlgoText(al));
          if (al.split_k > 1 && al.reduction != CublasAlgo::kReduceInComputeType) {
            Note(r, opt.max_show, shape + ": reduction scheme " + std::to_string(al.reduction) + " is not modelled");
            continue;
          }
          CompareD(r, opt.max_show, d, ScaledMmModel(a, b, fast, al.split_k), sh.n, shape + " split " + std::to_string(al.split_k));
        }
      }
      if (r.skipped.empty() && r.cases == 0) r.skipped = "cuBLASLt ran none of these shapes or split counts (see the notes)";
      r.seconds = Seconds(t0);
      emit(std::move(r));
    }
  }
}

void GemmRows(const XvalOptions& opt, const std::function<void(XvalRow&&)>& emit) {
  const DeviceInfo& dev = Device();
  const size_t big = opt.quick ? 128 : 512;
  std::vector<GemmCase> cases = {
      {"normal", big, big, 512, "e4m3", "e4m3", "normal", "normal"},
      {"wide", big, big, 1024, "e4m3", "e4m3", "wide", "wide"},
      {"adversarial", big, big, size_t{opt.quick ? 512u : 2048u}, "e4m3", "e4m3", "adv", "adv"},
      {"bits", big, big, 256, "e4m3", "e4m3", "bits", "bits"},
      {"mixed", big, big, 1024, "e4m3", "e5m2", "normal", "wide"},
      {"mixed-bits", big, big, 256, "e5m2", "e4m3", "bits", "bits"},
  };
  std::mt19937_64 g(opt.seed * 0x9E3779B97F4A7C15ull + 7);
  struct Prepared {
    GemmCase c;
    GemmOperand a, b;
  };
  std::vector<Prepared> ops;
  for (const auto& c : cases) {
    const std::vector<uint8_t> ac = Codes(g, c.m, c.k, GetFormat(c.fa), c.kind_a);
    const std::vector<uint8_t> bc = Transposed(Codes(g, c.n, c.k, GetFormat(c.fb), c.kind_b), c.n, c.k);
    ops.push_back({c, OperandFromCodes(GetFormat(c.fa), c.m, c.k, ac.data()), OperandFromCodes(GetFormat(c.fb), c.k, c.n, bc.data())});
  }
  const auto model_for = [&](CublasMode m) { return CublasModeModel(m, dev); };
  // Per-tensor, fast accumulation off and on; one set with scales other than 1.
  for (CublasMode mode : {CublasMode::kTensorwise, CublasMode::kTensorwiseFast}) {
    XvalRow r;
    r.group = "gemm";
    r.op = std::string("cuBLASLt ") + CublasModeName(mode) + " FP8 (" + std::to_string(ops.size() + 1) + " cases)";
    r.reference = model_for(mode).empty() ? "(no model for this device)" : model_for(mode);
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& p : ops) {
      const std::string why = CublasSupport(mode, p.a, p.b);
      if (!why.empty()) {
        r.skipped = why;
        break;
      }
      if (r.reference.front() == '(') {
        r.skipped = "no accumulation model is known for this mode on " + dev.name;
        break;
      }
      CompareD(r, opt.max_show, GemmCublasLt(p.a, p.b, mode), Gemm(p.a, p.b, nullptr, AccumModelByName(r.reference)),
               p.c.n, p.c.name);
    }
    if (r.skipped.empty()) {
      GemmOperand a = ops[0].a, b = ops[0].b;
      a.tensor_scale = 0.37109375f / 3;
      b.tensor_scale = 5.3f;
      CompareD(r, opt.max_show, GemmCublasLt(a, b, mode), Gemm(a, b, nullptr, AccumModelByName(r.reference)), b.cols,
               "tensor-scaled");
    }
    r.seconds = Seconds(t0);
    emit(std::move(r));
  }
  SplitKRows(opt, dev, g, emit);
  // Hopper blockwise FP32 scales: A 1x128 with B 128x128 or 1x128 (along K).
  for (CublasMode mode : {CublasMode::kBlockwise, CublasMode::kBlockwiseVec}) {
    XvalRow r;
    r.group = "gemm";
    r.op = std::string("cuBLASLt ") + CublasModeName(mode) + " FP8";
    r.reference = model_for(mode).empty() ? "(no model for this device)" : model_for(mode);
    const auto t0 = std::chrono::steady_clock::now();
    const int reps = opt.quick ? 1 : 4;
    for (int rep = 0; rep < reps && r.skipped.empty(); ++rep) {
      const size_t m = big, n = big, k = opt.quick ? 512 : 1024;
      const std::vector<uint8_t> ac = Codes(g, m, k, fmt::kE4M3, rep == 1 ? "adv" : "normal");
      const std::vector<uint8_t> bc = Codes(g, k, n, fmt::kE4M3, rep == 2 ? "wide" : "normal");
      GemmOperand a = OperandFromCodes(fmt::kE4M3, m, k, ac.data()), b = OperandFromCodes(fmt::kE4M3, k, n, bc.data());
      SetRandomBlockScales(a, 1, 128, g);
      SetRandomBlockScales(b, 128, mode == CublasMode::kBlockwise ? 128 : 1, g);
      r.skipped = CublasSupport(mode, a, b);
      if (r.skipped.empty() && r.reference.front() == '(') r.skipped = "no accumulation model is known for this mode on " + dev.name;
      if (!r.skipped.empty()) break;
      CompareD(r, opt.max_show, GemmCublasLt(a, b, mode), Gemm(a, b, nullptr, AccumModelByName(r.reference)), n,
               "rep" + std::to_string(rep));
    }
    r.seconds = Seconds(t0);
    emit(std::move(r));
  }
  // Blackwell block-scaled modes (compiled; run where the device is sm_100).
  for (CublasMode mode : {CublasMode::kMx, CublasMode::kNvfp4}) {
    XvalRow r;
    r.group = "gemm";
    r.op = std::string("cuBLASLt ") + CublasModeName(mode) + (mode == CublasMode::kMx ? " MXFP8 e4m3" : " NVFP4");
    r.reference = CublasModeModel(mode, dev).empty() ? (mode == CublasMode::kMx ? "blackwell-mxf8f6f4" : "blackwell-mxf4nvf4")
                                                     : CublasModeModel(mode, dev);
    const auto t0 = std::chrono::steady_clock::now();
    const size_t m = 256, n = 256, k = 1024, blk = mode == CublasMode::kMx ? 32 : 16;
    const Format& f = mode == CublasMode::kMx ? fmt::kE4M3 : fmt::kE2M1;
    std::vector<uint8_t> ac(m * k), bc(k * n);
    for (auto& c : ac) c = static_cast<uint8_t>(g() % (mode == CublasMode::kMx ? 0x7E : 16));
    for (auto& c : bc) c = static_cast<uint8_t>(g() % (mode == CublasMode::kMx ? 0x7E : 16));
    GemmOperand a = OperandFromCodes(f, m, k, ac.data()), b = OperandFromCodes(f, k, n, bc.data());
    std::vector<uint32_t> sa(m * (k / blk)), sb((k / blk) * n);
    for (auto& w : sa) w = mode == CublasMode::kMx ? 120 + g() % 14 : 0x30 + g() % 0x20;
    for (auto& w : sb) w = mode == CublasMode::kMx ? 120 + g() % 14 : 0x30 + g() % 0x20;
    const ScaleFormat sf = mode == CublasMode::kMx ? ScaleFormat::kUe8m0 : ScaleFormat::kE4m3;
    SetBlockScales(a, sf, 1, blk, sa.data());
    SetBlockScales(b, sf, blk, 1, sb.data());
    r.skipped = CublasSupport(mode, a, b);
    if (r.skipped.empty())
      CompareD(r, opt.max_show, GemmCublasLt(a, b, mode), Gemm(a, b, nullptr, AccumModelByName(r.reference)), n, "random");
    r.seconds = Seconds(t0);
    emit(std::move(r));
  }
  // The raw mma.sync kernel: on sm_90 it is two HMMA.16816.F32 on FP16 conversions (hopper-mma-sync); the
  // Hopper wgmma models follow as informational rows (they model another instruction).
  std::vector<std::string> mma_models = {"hopper-mma-sync"};
  if (!opt.quick) mma_models.insert(mma_models.end(), {"hopper-fp8-fast", "fp32-seq", "exact"});
  for (const std::string& model : mma_models) {
    XvalRow r;
    r.group = "gemm";
    r.op = "mma.sync m16n8k32 FP8 (raw kernel)";
    r.informational = model != "hopper-mma-sync";
    r.reference = model;
    const auto t0 = std::chrono::steady_clock::now();
    if (!dev.available) r.skipped = dev.reason;
    if (model.rfind("fused:", 0) == 0 && r.skipped.empty()) r.op += " [search]";
    else if (dev.major * 10 + dev.minor < 89) r.skipped = "mma.sync with FP8 operands needs sm_89 or newer";
    for (auto& p : ops) {
      if (!r.skipped.empty()) break;
      std::vector<float> c(p.c.m * p.c.n);
      for (size_t i = 0; i < c.size(); ++i) c[i] = (i % 3 == 0) ? std::ldexp(static_cast<float>(g() % 1000) - 500.0f, -6) : 0.0f;
      CompareD(r, opt.max_show, GemmMmaSync(p.a, p.b, c.data()), Gemm(p.a, p.b, c.data(), AccumModelByName(model)), p.c.n, p.c.name);
    }
    r.seconds = Seconds(t0);
    emit(std::move(r));
  }
}

// The emulation engine against the CPU library, model by model, on recipe-shaped operands whose shapes
// are not multiples of any tile (gpu/README.md "The emulation engine").
void EngineRows(const XvalOptions& opt, const std::function<void(XvalRow&&)>& emit) {
  const size_t m = opt.quick ? 67 : 509, n = opt.quick ? 45 : 515, k = opt.quick ? 256 : 1056;
  std::mt19937_64 g(opt.seed * 0x9E3779B97F4A7C15ull + 11);
  const auto operand = [&](const char* fmt, bool is_a, const char* kind) {
    const Format f = GetFormat(fmt);
    if (is_a) {
      const std::vector<uint8_t> c = Codes(g, m, k, f, kind);
      return OperandFromCodes(f, m, k, c.data());
    }
    const std::vector<uint8_t> c = Transposed(Codes(g, n, k, f, kind), n, k);
    return OperandFromCodes(f, k, n, c.data());
  };
  // Block scales along K (A 1 x block, B block x 1): UE8M0 bytes over 2^-9..2^8 with one NaN (0xFF), E4M3
  // codes, or FP32 values in [0.5, 3) x 2^-4..2^4.
  const auto scales = [&](GemmOperand& o, bool is_a, ScaleFormat sf, size_t block) {
    const size_t lines = is_a ? o.rows : o.cols, along = is_a ? o.cols : o.rows;
    std::vector<uint32_t> raw(lines * ((along + block - 1) / block));
    std::uniform_real_distribution<float> u(0.5f, 3.0f);
    for (uint32_t& v : raw) {
      if (sf == ScaleFormat::kUe8m0) v = 118 + static_cast<uint32_t>(g() % 18);
      else if (sf == ScaleFormat::kE4m3) v = 0x18 + static_cast<uint32_t>(g() % 0x50);
      else v = hd::F32Bits(u(g) * std::ldexp(1.0f, static_cast<int>(g() % 9) - 4));
    }
    if (sf == ScaleFormat::kUe8m0) raw[raw.size() / 3] = 0xFF;
    SetBlockScales(o, sf, is_a ? 1 : block, is_a ? block : 1, raw.data());
  };
  struct EngineCase {
    const char* model;
    const char* what;
    const char* fa;
    const char* fb;
    const char* kind;
    ScaleFormat sf;
    size_t block;  // 0: per-tensor
  };
  const EngineCase cases[] = {
      {"blackwell-mxf4nvf4", "NVFP4 (E4M3 1x16, tensor scales)", "e2m1", "e2m1", "adv", ScaleFormat::kE4m3, 16},
      {"blackwell-mxf4nvf4", "MXFP4 (UE8M0 1x32)", "e2m1", "e2m1", "normal", ScaleFormat::kUe8m0, 32},
      {"blackwell-mxf4nvf4-mmasim", "NVFP4 (E4M3 1x16)", "e2m1", "e2m1", "adv", ScaleFormat::kE4m3, 16},
      {"blackwell-mxf8f6f4", "MXFP8 e4m3", "e4m3", "e4m3", "adv", ScaleFormat::kUe8m0, 32},
      {"blackwell-mxf8f6f4", "MXFP8 e5m2 x e4m3", "e5m2", "e4m3", "wide", ScaleFormat::kUe8m0, 32},
      {"blackwell-mxf8f6f4", "MXFP6 e3m2 x e2m3", "e3m2", "e2m3", "normal", ScaleFormat::kUe8m0, 32},
      {"blackwell-mxf8f6f4-mmasim", "MXFP8 e4m3", "e4m3", "e4m3", "adv", ScaleFormat::kUe8m0, 32},
      {"hopper-fp8", "FP8 per-tensor", "e4m3", "e4m3", "adv", ScaleFormat::kFp32, 0},
      {"hopper-fp8-fast", "FP8 per-tensor", "e4m3", "e5m2", "wide", ScaleFormat::kFp32, 0},
      {"hopper-fp8", "FP8 1x128 FP32 scales", "e4m3", "e4m3", "normal", ScaleFormat::kFp32, 128},
      {"hopper-fp8-vec", "FP8 1x128 FP32 scales", "e4m3", "e4m3", "adv", ScaleFormat::kFp32, 128},
      {"hopper-mma-sync", "FP8 per-tensor", "e4m3", "e4m3", "bits", ScaleFormat::kFp32, 0},
      {"ada-fp8", "FP8 per-tensor", "e5m2", "e5m2", "wide", ScaleFormat::kFp32, 0},
      {"fp32-seq", "MXFP8 e4m3", "e4m3", "e4m3", "normal", ScaleFormat::kUe8m0, 32},
  };
  for (const EngineCase& c : cases) {
    XvalRow r;
    r.group = "engine";
    r.op = std::string(c.model) + " on " + c.what;
    r.reference = "qmx::Gemm (CPU)";
    const auto t0 = std::chrono::steady_clock::now();
    GemmOperand a = operand(c.fa, true, c.kind), b = operand(c.fb, false, c.kind);
    if (c.block) {
      scales(a, true, c.sf, c.block);
      scales(b, false, c.sf, c.block);
    }
    if (c.sf == ScaleFormat::kE4m3 || c.block == 0) {
      a.tensor_scale = 0.37f;
      b.tensor_scale = 2.5f;
    }
    const AccumModel model = AccumModelByName(c.model);
    const std::string why = EngineGemmSupport(a, b, model);
    if (!why.empty()) {
      r.skipped = why;
      emit(std::move(r));
      continue;
    }
    EngineGemmStats st;
    const std::vector<float> got = EngineGemm(a, b, nullptr, model, &st), want = Gemm(a, b, nullptr, model);
    r.cases = got.size();
    for (size_t i = 0; i < got.size(); ++i)
      if (hd::F32Bits(got[i]) != hd::F32Bits(want[i]) && r.mismatches++ < opt.max_show)
        r.first.push_back("(" + std::to_string(i / n) + ", " + std::to_string(i % n) + "): engine " +
                          Hex(hd::F32Bits(got[i]), 8) + ", cpu " + Hex(hd::F32Bits(want[i]), 8));
    r.notes.push_back(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + ", " + st.kernel + " kernel, " +
                      std::to_string(st.fallback_steps) + " of " + std::to_string(st.steps) + " steps by the generic step");
    r.seconds = Seconds(t0);
    emit(std::move(r));
  }
}

// The engine's conversions against the CPU's fast path: every registry format of 8 bits or fewer, every
// rounding, each valid saturation with the library's default options and three variants (subnormals
// flushed; NaN results positive with zero for NaN where the format has none; negative inputs by magnitude
// into an unsigned format; stochastic rounding also with 3 and 32 random bits). Inputs: 16 slices of 2^20
// FP32 patterns spread over the space plus the Inf/NaN boundaries (--quick: 4 slices of 2^16), or all 2^32
// with --exhaustive (the default options only). One row per format and rounding.
void EngineConvertRows(const XvalOptions& opt, const std::function<void(XvalRow&&)>& emit) {
  std::vector<std::pair<uint32_t, uint64_t>> ranges;
  if (opt.exhaustive) {
    for (uint64_t s = 0; s < (uint64_t{1} << 32); s += uint64_t{1} << 27) ranges.push_back({static_cast<uint32_t>(s), uint64_t{1} << 27});
  } else {
    const uint32_t slices = opt.quick ? 4 : 16;
    const uint64_t len = opt.quick ? uint64_t{1} << 16 : uint64_t{1} << 20;
    for (uint32_t c = 0; c < slices; ++c)
      ranges.push_back({c * (0xFFFFFFFFu / slices) + ((c * 0x9E3779B9u) & 0x3F00000u), len});
    ranges.push_back({0x7F800000u - static_cast<uint32_t>(len / 2), len});
    ranges.push_back({0xFF800000u - static_cast<uint32_t>(len / 2), len});
  }
  const Rounding roundings[] = {Rounding::kRne, Rounding::kRna, Rounding::kRz,  Rounding::kRu, Rounding::kRd,
                                Rounding::kRo,  Rounding::kSrA, Rounding::kSrB, Rounding::kSrC};
  std::vector<uint8_t> gpu, cpu;
  std::vector<uint32_t> x;
  for (const RegistryEntry& e : Registry()) {
    const Format& dst = e.format;
    if (!IsFastFormat(dst)) continue;
    for (Rounding rd : roundings) {
      XvalRow r;
      r.group = "engine";
      r.op = std::string("convert f32->") + dst.name + " " + RoundingName(rd) +
             (opt.exhaustive ? " (every saturation)" : " (every saturation and variant)");
      if (!opt.only.empty() && r.op.find(opt.only) == std::string::npos) continue;
      r.reference = "ConvertToCodes (CPU)";
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<CastOptions> sets;
      for (Saturation sat : {Saturation::kSatFinite, Saturation::kNoSat, Saturation::kSatPropagate}) {
        CastOptions base;
        base.rounding = rd;
        base.saturation = sat;
        try {
          ValidateCastOptions(dst, base);
        } catch (const Error&) {
          continue;  // not defined for this format (e.g. nosat into e2m1)
        }
        sets.push_back(base);
        if (opt.exhaustive) continue;
        CastOptions v = base;
        v.subnormals = Subnormals::kFlush;
        sets.push_back(v);
        v = base;
        v.nan_sign = NanSign::kPositive;
        v.nan_fallback = NanFallback::kZero;
        sets.push_back(v);
        if (!dst.is_signed) {
          v = base;
          v.negative_unsigned = NegativeUnsigned::kMagnitude;
          sets.push_back(v);
        }
        if (IsStochastic(rd))
          for (int bits : {3, 32}) {
            v = base;
            v.sr_bits = bits;
            sets.push_back(v);
          }
      }
      if (!Device().available) r.skipped = Device().reason;
      for (const CastOptions& c : sets) {
        if (!r.skipped.empty()) break;
        for (const auto& [first, count] : ranges) {
          const uint64_t seed = opt.seed + first;
          gpu.resize(count);
          cpu.resize(count);
          x.resize(count);
#pragma omp parallel for schedule(static)
          for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) x[static_cast<size_t>(i)] = first + static_cast<uint32_t>(i);
          EngineConvert(DType::kF32, x.data(), count, dst, c, gpu.data(), nullptr, {seed, first, nullptr});
          ConvertToCodes(DType::kF32, x.data(), count, dst, c, cpu.data(), {seed, first, nullptr}, Exec::kParallel);
          r.cases += count;
          if (std::memcmp(gpu.data(), cpu.data(), count) == 0) continue;
          for (size_t i = 0; i < count; ++i)
            if (gpu[i] != cpu[i])
              Note(r, opt.max_show, std::string(SaturationName(c.saturation)) + " " + Hex(x[i], 8) + ": engine " + Hex(gpu[i], 2) +
                                        " cpu " + Hex(cpu[i], 2));
        }
      }
      r.notes.push_back(std::to_string(sets.size()) + " option sets");
      r.seconds = Seconds(t0);
      emit(std::move(r));
    }
  }
}

// The engine's tensor quantizer against the CPU's Quantize: every recipe the engine runs, along rows and
// columns, under RNE and SR, from FP32 and BF16, on a 257 x 600 tensor (--quick: 67 x 200) of rows at
// powers of two across FP32's range with zero rows, NaN, Inf and a value near FP32's max: one row per recipe.
// Each row also dequantizes the CPU's tensor on the device (every NVFP4 order, with and without
// flush-to-zero: the rows near FP32's bottom have subnormal scales and results) against Dequantize.
void EngineQuantizeRows(const XvalOptions& opt, const std::function<void(XvalRow&&)>& emit) {
  const size_t rows = opt.quick ? 67 : 257, cols = opt.quick ? 200 : 600;
  std::mt19937_64 g(opt.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(rows * cols);
  for (size_t r = 0; r < rows; ++r) {
    const int e = static_cast<int>(g() % 200) - 110;
    for (size_t c = 0; c < cols; ++c) x[r * cols + c] = r % 31 == 5 ? 0.0f : std::ldexp(nd(g), e);
  }
  x[2 * cols + 7] = std::nanf("");
  x[9 * cols + 100] = -INFINITY;
  x[15 * cols + 3] = 3e38f;
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = static_cast<uint16_t>(hd::F32Bits(x[i]) >> 16);
  for (const std::string& name : QuantSpecNames()) {
    XvalRow r;
    r.group = "engine";
    r.op = "quantize " + name + " (rows and columns, rne and sr, f32 and bf16)";
    if (!opt.only.empty() && r.op.find(opt.only) == std::string::npos) continue;
    r.reference = "Quantize (CPU)";
    const QuantSpec base = QuantSpecByName(name);
    if (const std::string why = EngineQuantizeSupport(base); !why.empty()) r.skipped = why;
    else if (!Device().available) r.skipped = Device().reason;
    const auto t0 = std::chrono::steady_clock::now();
    for (Axis axis : {Axis::kRow, Axis::kCol})
      for (Rounding rd : {Rounding::kRne, Rounding::kSrA})
        for (DType t : {DType::kF32, DType::kBF16}) {
          if (!r.skipped.empty()) break;
          QuantSpec s = base;
          s.axis = axis;
          s.cast.rounding = rd;
          s.seed = opt.seed;
          const TensorView v{t, t == DType::kF32 ? static_cast<const void*>(x.data()) : xb.data(), rows, cols};
          const QuantizedTensor want = Quantize(v, s);
          const QuantizedTensor got = EngineQuantize(v, s);
          r.cases += want.codes.size() + want.scale_rows * want.scale_cols;
          const std::string what = std::string(axis == Axis::kCol ? "col " : "row ") + RoundingName(rd) + " " + DTypeName(t);
          for (size_t i = 0; i < want.codes.size(); ++i)
            if (got.codes[i] != want.codes[i])
              Note(r, opt.max_show, what + " code " + std::to_string(i) + ": engine " + Hex(got.codes[i], 2) + " cpu " +
                                        Hex(want.codes[i], 2));
          for (size_t i = 0; i < want.scales.size(); ++i)
            if (got.scales[i] != want.scales[i])
              Note(r, opt.max_show, what + " scale byte " + std::to_string(i) + ": engine " + Hex(got.scales[i], 2) +
                                        " cpu " + Hex(want.scales[i], 2));
          if (hd::F32Bits(got.tensor_amax) != hd::F32Bits(want.tensor_amax) || got.line_amax != want.line_amax)
            Note(r, opt.max_show, what + ": the tensor or line amax differs");
          if (s.row_scaled) continue;  // the engine refuses to dequantize it (the CPU does)
          // The engine's dequantization of the CPU's tensor: every NVFP4 order, with and without flush-to-zero.
          DeviceMemory codes(want.codes.size()), scales(want.scales.size() + 4), out(want.codes.size() * 4 + 4);
          codes.Upload(want.codes.data(), want.codes.size());
          scales.Upload(want.scales.data(), want.scales.size());
          std::vector<DequantOrder> orders{DequantOrder::kByRule};
          if (ScaleFormatOf(s.rule) == ScaleFormat::kE4m3)
            orders = {DequantOrder::kByRule, DequantOrder::kTe, DequantOrder::kGlobalDiv, DequantOrder::kGlobalRecip};
          for (DequantOrder order : orders)
            for (bool ftz : {false, true}) {
              std::vector<float> dw(want.codes.size()), dg(want.codes.size());
              Dequantize(want, dw.data(), order, ftz);
              EngineDequantizeOnDevice(want, static_cast<const uint8_t*>(codes.get()),
                                       static_cast<const uint8_t*>(scales.get()), static_cast<float*>(out.get()), nullptr,
                                       order, ftz);
              out.Download(dg.data(), dg.size() * 4);
              r.cases += dw.size();
              for (size_t i = 0; i < dw.size(); ++i)
                if (hd::F32Bits(dg[i]) != hd::F32Bits(dw[i]))
                  Note(r, opt.max_show, what + " dequantize order=" + DequantOrderName(order) + (ftz ? " ftz" : "") +
                                            " element " + std::to_string(i) + ": engine " + Hex(hd::F32Bits(dg[i]), 8) +
                                            " cpu " + Hex(hd::F32Bits(dw[i]), 8));
            }
        }
    r.seconds = Seconds(t0);
    emit(std::move(r));
  }
}

// The engine's linear layer against LinearForward / LinearBackward: every training recipe the engine runs
// (and NVFP4 under TE's alpha), two steps each of Y, dX and dW on a 96 x 160 x 256 layer with outlier
// channels (ragged 128 x 128 weight blocks): one row per recipe.
void EngineLinearRows(const XvalOptions& opt, const std::function<void(XvalRow&&)>& emit) {
  const size_t m = 96, n = 160, k = 256;
  const LinearTensors t = GenerateLinearLayer(DefaultLayerGen(), opt.seed, m, n, k);
  for (const std::string& name : TrainingRecipeNames())
    for (const char* alpha : {"decode", "te"}) {
      if (std::string(alpha) == "te" && name != "nvfp4") continue;
      XvalRow r;
      r.group = "engine";
      r.op = "linear " + name + (std::string(alpha) == "te" ? " alpha=te" : "") + " (Y, dX, dW over 2 steps)";
      if (!opt.only.empty() && r.op.find(opt.only) == std::string::npos) continue;
      r.reference = "LinearForward / LinearBackward (CPU)";
      const TrainingRecipe recipe = TrainingRecipeByName(name);
      RecipeOptions ro;
      ro.seed = opt.seed;
      ro.prime_history = false;
      ro.alpha = ParseAlphaRule(alpha);
      if (const std::string why = EngineLinearSupport(recipe, ro); !why.empty()) r.skipped = why;
      else if (!Device().available) r.skipped = Device().reason;
      const auto t0 = std::chrono::steady_clock::now();
      if (r.skipped.empty()) {
        DeviceMemory x(m * k * 4), w(n * k * 4), dy(m * n * 4), y(m * n * 4), dx(m * k * 4), dw(n * k * 4);
        x.Upload(t.x.data(), m * k * 4);
        w.Upload(t.w.data(), n * k * 4);
        dy.Upload(t.dy.data(), m * n * 4);
        const auto f = [](const DeviceMemory& d) { return static_cast<float*>(d.get()); };
        RecipeState cpu_state, gpu_state;
        for (int step = 0; step < 2; ++step) {
          LinearSaved cs, gs;
          const std::vector<float> want_y = LinearForward(recipe, t.x.data(), t.w.data(), m, n, k, cpu_state, ro, cs);
          EngineLinearForward(recipe, f(x), f(w), m, n, k, gpu_state, ro, gs, f(y), nullptr);
          std::vector<float> want_dx(m * k), want_dw(n * k);
          LinearBackward(recipe, t.x.data(), t.w.data(), t.dy.data(), cpu_state, ro, cs, want_dx.data(), want_dw.data());
          EngineLinearBackward(recipe, f(x), f(w), f(dy), gpu_state, ro, gs, f(dx), f(dw), nullptr);
          const std::pair<const char*, std::pair<const DeviceMemory*, const std::vector<float>*>> outs[] = {
              {"Y", {&y, &want_y}}, {"dX", {&dx, &want_dx}}, {"dW", {&dw, &want_dw}}};
          for (const auto& [what, pair] : outs) {
            const std::vector<float>& want = *pair.second;
            std::vector<float> got(want.size());
            pair.first->Download(got.data(), got.size() * 4);
            r.cases += want.size();
            for (size_t i = 0; i < want.size(); ++i)
              if (hd::F32Bits(got[i]) != hd::F32Bits(want[i]))
                Note(r, opt.max_show, "step " + std::to_string(step) + " " + what + " element " + std::to_string(i) +
                                          ": engine " + Hex(hd::F32Bits(got[i]), 8) + " cpu " + Hex(hd::F32Bits(want[i]), 8));
          }
        }
      }
      r.seconds = Seconds(t0);
      emit(std::move(r));
    }
}

}  // namespace

golden::ExternalRunner GoldenRunner() {
  return [](const std::string& op, const Keys& keys, const std::vector<Fields>& ins, std::vector<Fields>& outs) -> std::string {
    if (!Device().available) return Device().reason;
    if (op == "convert") return RunConvert(keys, ins, outs);
    if (op == "mx-block") return RunMx(keys, ins, outs);
    if (op == "ue8m0") return RunUe8m0(keys, ins, outs);
    if (op == "nvfp4-block") return RunNvfp4(keys, ins, outs);
    if (op == "sr") return RunSr(keys, ins, outs);
    if (op == "dot") return "block dot products are cross-validated by xval's cuBLASLt and mma.sync GEMMs";
    return "op=" + op + " has no GPU operation";
  };
}

std::vector<XvalRow> Xval(const XvalOptions& opt, const std::function<void(const XvalRow&)>& progress) {
  std::vector<XvalRow> rows;
  const auto emit = [&](XvalRow&& r) {
    rows.push_back(std::move(r));
    if (progress) progress(rows.back());
  };
  if (!opt.golden_dir.empty()) {
    golden::VerifyOptions vo;
    vo.external = GoldenRunner();
    vo.max_errors = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& f : golden::Verify(opt.golden_dir, vo)) {
      XvalRow r;
      r.group = "golden";
      r.op = f.path;
      r.reference = "golden file";
      r.cases = f.cases;
      r.mismatches = f.mismatches;
      r.skipped = f.skipped;
      for (const auto& e : f.errors) r.first.push_back("error: " + e);
      if (!f.errors.empty() && r.mismatches == 0) r.mismatches = 1;  // a file-level problem fails the row
      for (const auto& m : f.first)
        if (r.first.size() < opt.max_show) r.first.push_back("line " + std::to_string(m.line) + ": " + m.text);
      r.seconds = Seconds(t0);
      emit(std::move(r));
    }
  }
  if (opt.conversions) ConvertRows(opt, emit);
  if (opt.quantize) QuantRows(opt, emit);
  if (opt.gemm) GemmRows(opt, emit);
  if (opt.engine) {
    EngineConvertRows(opt, emit);
    EngineQuantizeRows(opt, emit);
    EngineLinearRows(opt, emit);
    EngineRows(opt, emit);
  }
  return rows;
}

}  // namespace qmx::gpu
