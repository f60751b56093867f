// kernels.cu: conversions, MX and NVFP4 quantization on the GPU (PTX ISA cvt; cuda_fp8.h / cuda_fp6.h /
// cuda_fp4.h device functions; OCP MX v1.0 6.3 with the scale rules of qmx/host_device.h; Transformer
// Engine's NVFP4 order of operations, as qmx/scale.h writes it).
#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstring>
#include <string>

#include "gpu_internal.h"
#include "qmx/gpu.h"
#include "qmx/host_device.h"

// sm_100a / sm_103a family code: the FP4/FP6/UE8M0 conversions and cvt.rs.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 1000) && defined(__CUDA_ARCH_FAMILY_SPECIFIC__)
#define QMX_PTX_SM100 1
#else
#define QMX_PTX_SM100 0
#endif

namespace qmx::gpu {
namespace {

using detail::Blocks;
using detail::CheckLaunch;
using detail::DeviceBuffer;

enum DevFmt : int { kE4m3, kE5m2, kE2m1, kE2m3, kE3m2, kUe8m0 };

struct DevCvt {
  int fmt;
  int path;   // ConvertPath
  int round;  // 0 rne, 1 rz, 2 ru
  int sat;    // 1 satfinite, 0 nosat
};

int DevFmtOf(const Format& f) {  // by encoding: "float8_e4m3" (IEEE-style E4M3) is not OCP's e4m3
  if (f == fmt::kE4M3) return kE4m3;
  if (f == fmt::kE5M2) return kE5m2;
  if (f == fmt::kE2M1) return kE2m1;
  if (f == fmt::kE2M3) return kE2m3;
  if (f == fmt::kE3M2) return kE3m2;
  if (f == fmt::kUE8M0) return kUe8m0;
  return -1;
}

// Set by a kernel that reached an instruction this device's code does not hold (never, when the host
// checks support first).
__device__ int g_unsupported = 0;

__device__ inline uint8_t PtxCvt(float x, const DevCvt& c) {
  unsigned short r = 0;
  switch (c.fmt) {
    case kE4m3:
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
      return static_cast<uint8_t>(r & 0xFF);
    case kE5m2:
      asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
      return static_cast<uint8_t>(r & 0xFF);
#if QMX_PTX_SM100
    case kE2m1:
      asm("{ .reg .b8 t; cvt.rn.satfinite.e2m1x2.f32 t, %1, %2; mov.b16 %0, {t, 0}; }" : "=h"(r) : "f"(0.0f), "f"(x));
      return static_cast<uint8_t>(r & 0xF);
    case kE2m3:
      asm("cvt.rn.satfinite.e2m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
      return static_cast<uint8_t>(r & 0x3F);
    case kE3m2:
      asm("cvt.rn.satfinite.e3m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
      return static_cast<uint8_t>(r & 0x3F);
    case kUe8m0:
      if (c.round == 1) {
        if (c.sat) asm("cvt.rz.satfinite.ue8m0x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
        else asm("cvt.rz.ue8m0x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
      } else {
        if (c.sat) asm("cvt.rp.satfinite.ue8m0x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
        else asm("cvt.rp.ue8m0x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
      }
      return static_cast<uint8_t>(r & 0xFF);
#endif
    default:
      g_unsupported = 1;
      return 0;
  }
}

__device__ inline cudaRoundMode RoundMode(int round) {
  return round == 1 ? cudaRoundZero : (round == 2 ? cudaRoundPosInf : cudaRoundNearest);
}

__device__ inline uint8_t HeaderCvt(float x, const DevCvt& c) {
  const __nv_saturation_t sat = c.sat ? __NV_SATFINITE : __NV_NOSAT;
  switch (c.fmt) {
    case kE4m3: return __nv_cvt_float_to_fp8(x, sat, __NV_E4M3);
    case kE5m2: return __nv_cvt_float_to_fp8(x, sat, __NV_E5M2);
    case kE2m1: return __nv_cvt_float_to_fp4(x, __NV_E2M1, RoundMode(c.round)) & 0xF;
    case kE2m3: return __nv_cvt_float_to_fp6(x, __NV_E2M3, RoundMode(c.round)) & 0x3F;
    case kE3m2: return __nv_cvt_float_to_fp6(x, __NV_E3M2, RoundMode(c.round)) & 0x3F;
    case kUe8m0: return __nv_cvt_float_to_e8m0(x, sat, RoundMode(c.round));
    default: g_unsupported = 1; return 0;
  }
}

__device__ inline uint8_t Cvt(float x, const DevCvt& c) {
  return c.path == static_cast<int>(ConvertPath::kPtx) ? PtxCvt(x, c) : HeaderCvt(x, c);
}

__global__ void ConvertKernel(const float* x, size_t n, DevCvt c, uint8_t* out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = Cvt(x[i], c);
}

__global__ void ConvertRangeKernel(uint32_t first, uint64_t n, DevCvt c, uint8_t* out) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    out[i] = Cvt(hd::F32FromBits(first + static_cast<uint32_t>(i)), c);
}

__global__ void SrX4Kernel(const float* x, const uint32_t* rbits, size_t n4, int fmt, uint32_t* out) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n4) return;
#if QMX_PTX_SM100
  const float a = x[4 * i], b = x[4 * i + 1], e = x[4 * i + 2], f = x[4 * i + 3];
  const uint32_t rb = rbits[i];
  uint32_t d = 0;
  unsigned short h = 0;
  switch (fmt) {
    case kE4m3: asm("cvt.rs.satfinite.e4m3x4.f32 %0, {%1, %2, %3, %4}, %5;" : "=r"(d) : "f"(a), "f"(b), "f"(e), "f"(f), "r"(rb)); break;
    case kE5m2: asm("cvt.rs.satfinite.e5m2x4.f32 %0, {%1, %2, %3, %4}, %5;" : "=r"(d) : "f"(a), "f"(b), "f"(e), "f"(f), "r"(rb)); break;
    case kE2m3: asm("cvt.rs.satfinite.e2m3x4.f32 %0, {%1, %2, %3, %4}, %5;" : "=r"(d) : "f"(a), "f"(b), "f"(e), "f"(f), "r"(rb)); break;
    case kE3m2: asm("cvt.rs.satfinite.e3m2x4.f32 %0, {%1, %2, %3, %4}, %5;" : "=r"(d) : "f"(a), "f"(b), "f"(e), "f"(f), "r"(rb)); break;
    case kE2m1:
      asm("cvt.rs.satfinite.e2m1x4.f32 %0, {%1, %2, %3, %4}, %5;" : "=h"(h) : "f"(a), "f"(b), "f"(e), "f"(f), "r"(rb));
      d = h;
      break;
    default: g_unsupported = 1;
  }
  out[i] = d;
#else
  (void)x, (void)rbits, (void)fmt, (void)out;
  g_unsupported = 1;
#endif
}

// ------------------------------------------------------------------ MX
struct DevMx {
  DevCvt cvt;
  int block;
  int rule;       // ScaleRule (UE8M0)
  float destmax;
  int emax, elem_man;
  int policy;     // NanPolicy
  int te_rcp;     // ElementScaling::kTeRcp
  uint8_t block_nan_code;
  int hw_round_up;  // cvt.rp.satfinite.ue8m0x2 for the round-up rule (sm_100a)
};

__device__ inline uint8_t ScaleByte(uint32_t amax_bits, const DevMx& m) {
#if QMX_PTX_SM100
  if (m.hw_round_up && m.rule == static_cast<int>(ScaleRule::kRoundUp)) {
    unsigned short r;
    const float q = hd::F32FromBits(amax_bits) / m.destmax;
    asm("cvt.rp.satfinite.ue8m0x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(q));
    const uint8_t b = static_cast<uint8_t>(r & 0xFF);
    return b > 254 ? 254 : b;
  }
#endif
  return hd::ScaleByteFromAmaxBits(amax_bits, m.rule, m.destmax, m.emax, m.elem_man);
}

__global__ void MxKernel(const float* x, size_t n, DevMx m, uint8_t* codes, uint8_t* scales) {
  const size_t b = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t start = b * m.block;
  if (start >= n) return;
  const size_t end = start + m.block < n ? start + m.block : n;
  uint32_t amax = 0;
  bool has_nan = false, has_inf = false;
  for (size_t i = start; i < end; ++i) {
    const uint32_t a = hd::F32Bits(x[i]) & 0x7FFFFFFFu;
    if (a > 0x7F800000u) has_nan = true;
    else if (a == 0x7F800000u) has_inf = true;
    else if (a > amax) amax = a;
  }
  int scale, fill = -1;
  const uint8_t nan_code = Cvt(__int_as_float(0x7FC00000), m.cvt);
  if (has_nan || has_inf) {
    switch (static_cast<NanPolicy>(m.policy)) {
      case NanPolicy::kBlockNan: scale = 0xFF, fill = m.block_nan_code; break;
      case NanPolicy::kScaleNan: scale = 0xFF, fill = nan_code; break;
      case NanPolicy::kTe:
        if (has_nan) scale = 0xFF, fill = nan_code;
        else scale = 0xFE;
        break;
      case NanPolicy::kIgnoreNan: scale = has_inf ? 0xFE : ScaleByte(amax, m); break;
      default: scale = ScaleByte(amax, m); break;
    }
  } else {
    scale = ScaleByte(amax, m);
  }
  scales[b] = static_cast<uint8_t>(scale);
  const float mult = scale == 0xFF ? 1.0f : hd::ScaleMultiplier(static_cast<uint8_t>(scale), m.te_rcp != 0);
  for (size_t i = start; i < end; ++i) codes[i] = fill >= 0 ? static_cast<uint8_t>(fill) : Cvt(x[i] * mult, m.cvt);
}

// ------------------------------------------------------------------ NVFP4
__device__ inline float DecodeE4m3(uint8_t c) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(c, __NV_E4M3);
  return __half2float(__half(h));
}

struct DevNvfp4 {
  DevCvt cvt;      // e2m1
  DevCvt s8;       // e4m3, ptx
  int block;
  int div_order;   // ScaleRule::kNvfp4Div
  int policy;
  float s_enc;
};

__global__ void Nvfp4Kernel(const float* x, size_t n, DevNvfp4 p, uint8_t* codes, uint8_t* scales) {
  const size_t b = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t start = b * p.block;
  if (start >= n) return;
  const size_t end = start + p.block < n ? start + p.block : n;
  float amax = 0.0f;
  bool has_nan = false, has_inf = false;
  for (size_t i = start; i < end; ++i) {
    const float a = fabsf(x[i]);
    if (isnan(a)) has_nan = true;
    else if (isinf(a)) has_inf = true;
    else amax = fmaxf(amax, a);
  }
  if ((has_nan || has_inf) && p.policy == static_cast<int>(NanPolicy::kBlockNan)) {
    scales[b] = 0x7F;
    for (size_t i = start; i < end; ++i) codes[i] = 0;
    return;
  }
  if (has_inf && p.policy == static_cast<int>(NanPolicy::kIgnoreNan)) amax = __int_as_float(0x7F800000);
  float v;
  if (p.div_order) {
    v = __fmul_rn(__fdiv_rn(amax, 6.0f), p.s_enc);
  } else {
    v = __fmul_rn(amax, __fmul_rn(p.s_enc, __fdiv_rn(1.0f, 6.0f)));
  }
  const uint8_t s8 = Cvt(v, p.s8);
  const float sd = DecodeE4m3(s8);
  float mult;
  if (p.div_order) {
    mult = sd == 0.0f ? 0.0f : fminf(__fdiv_rn(p.s_enc, sd), FLT_MAX);
  } else {
    const float s_dec = __fdiv_rn(1.0f, p.s_enc);
    mult = fminf(__fdiv_rn(1.0f, __fmul_rn(sd, s_dec)), FLT_MAX);
  }
  scales[b] = s8;
  for (size_t i = start; i < end; ++i) codes[i] = Cvt(__fmul_rn(x[i], mult), p.cvt);
}

void CheckNoUnsupported() {
  int flag = 0;
  detail::Check(cudaMemcpyFromSymbol(&flag, g_unsupported, sizeof(int)), "read the kernel status");
  if (flag) {
    const int zero = 0;
    cudaMemcpyToSymbol(g_unsupported, &zero, sizeof(int));
    throw Error("a GPU kernel reached an instruction this device's code does not hold (internal error)");
  }
}

DevCvt MakeCvt(const Format& dst, const CastOptions& opt, ConvertPath path) {
  if (std::string why = ConvertSupport(dst, opt, path); !why.empty()) throw Error(why);
  DevCvt c{};
  c.fmt = DevFmtOf(dst);
  c.path = static_cast<int>(path);
  c.round = opt.rounding == Rounding::kRz ? 1 : (opt.rounding == Rounding::kRu ? 2 : 0);
  c.sat = opt.saturation == Saturation::kSatFinite ? 1 : 0;
  return c;
}

constexpr unsigned kThreads = 256;

}  // namespace

const char* ConvertPathName(ConvertPath p) { return p == ConvertPath::kPtx ? "ptx" : "header"; }

std::string ConvertSupport(const Format& dst, const CastOptions& opt, ConvertPath path) {
  const int f = DevFmtOf(dst);
  const std::string what = std::string("f32 -> ") + dst.name + " " + RoundingName(opt.rounding) + " " +
                           SaturationName(opt.saturation) + " (" + ConvertPathName(path) + ")";
  if (f < 0) return what + ": the GPU has no conversion to " + dst.name;
  if (opt.subnormals != Subnormals::kKeep) return what + ": GPU conversions keep subnormals";
  const Rounding r = opt.rounding;
  if (f == kUe8m0) {
    if (r != Rounding::kRz && r != Rounding::kRu) return what + ": ue8m0 conversions round toward zero or up (rz, ru)";
    if (opt.saturation == Saturation::kSatPropagate) return what + ": ue8m0 takes satfinite or nosat";
  } else if (f == kE4m3 || f == kE5m2) {
    if (r != Rounding::kRne) return what + ": FP8 conversions round to nearest even only";
    if (path == ConvertPath::kPtx && opt.saturation != Saturation::kSatFinite)
      return what + ": cvt.rn to FP8 from f32 exists with .satfinite only (the header path covers nosat)";
    if (opt.saturation == Saturation::kSatPropagate) return what + ": satpropagate is no CUDA mode";
  } else {
    if (opt.saturation != Saturation::kSatFinite) return what + ": FP6/FP4 conversions saturate to finite";
    if (path == ConvertPath::kPtx && r != Rounding::kRne) return what + ": cvt to FP6/FP4 rounds to nearest even";
    if (path == ConvertPath::kHeader && r != Rounding::kRne && r != Rounding::kRz)
      return what + ": the FP6/FP4 header functions are checked for rne and rz";
  }
  const bool needs_sm100a = path == ConvertPath::kPtx && f != kE4m3 && f != kE5m2;
  const DeviceInfo& d = Device();
  if (!d.available) return what + ": " + d.reason;
  if (needs_sm100a && !d.sm100a_code)
    return what + ": needs sm_100a (Blackwell); this device is sm_" + std::to_string(d.major * 10 + d.minor);
  if (d.major * 10 + d.minor < 89) return what + ": FP8 conversions need sm_89 or newer";
  return "";
}

void ConvertF32(const float* x, size_t n, const Format& dst, const CastOptions& opt, ConvertPath path,
                uint8_t* codes) {
  const DevCvt c = MakeCvt(dst, opt, path);
  if (n == 0) return;
  DeviceBuffer<float> dx(x, n);
  DeviceBuffer<uint8_t> dc(n);
  ConvertKernel<<<Blocks(n, kThreads) < 65535 ? Blocks(n, kThreads) : 65535, kThreads>>>(dx.get(), n, c, dc.get());
  CheckLaunch("convert kernel");
  CheckNoUnsupported();
  dc.Download(codes, n);
}

void ConvertF32Range(uint32_t first, uint64_t count, const Format& dst, const CastOptions& opt, ConvertPath path,
                     uint8_t* codes) {
  const DevCvt c = MakeCvt(dst, opt, path);
  if (count == 0) return;
  if (count > (uint64_t{1} << 32)) throw Error("ConvertF32Range: at most 2^32 inputs");
  DeviceBuffer<uint8_t> dc(count);
  ConvertRangeKernel<<<65535, kThreads>>>(first, count, c, dc.get());
  CheckLaunch("convert-range kernel");
  CheckNoUnsupported();
  dc.Download(codes, count);
}

void ConvertF32SrX4(const float* x, const uint32_t* rbits, size_t n4, const Format& dst, uint32_t* out) {
  const int f = DevFmtOf(dst);
  if (f < 0 || f == kUe8m0) throw Error(std::string("cvt.rs has no ") + dst.name + "x4 form");
  Require("cvt.rs stochastic rounding", true);
  if (n4 == 0) return;
  DeviceBuffer<float> dx(x, 4 * n4);
  DeviceBuffer<uint32_t> dr(rbits, n4), dout(n4);
  SrX4Kernel<<<Blocks(n4, kThreads), kThreads>>>(dx.get(), dr.get(), n4, f, dout.get());
  CheckLaunch("cvt.rs kernel");
  CheckNoUnsupported();
  dout.Download(out, n4);
}

std::string MxSupport(const MxSpec& spec) {
  const std::string what = std::string("mx-block ") + spec.elem.name + " " + ScaleRuleName(spec.rule);
  if (!IsPow2Rule(spec.rule)) return what + ": not a UE8M0 rule";
  if (!(spec.scale_format == fmt::kUE8M0))
    return what + ": the GPU kernel writes UE8M0 scales, not " + spec.scale_format.name;
  if (spec.cast.rounding != Rounding::kRne || spec.cast.saturation != Saturation::kSatFinite)
    return what + ": the GPU kernel converts elements with rne and satfinite only";
  if (spec.block < 1 || spec.block > 4096) return what + ": block must be 1..4096";
  const Format& e = spec.elem;
  const int f = DevFmtOf(e);
  if (f < 0 || f == kUe8m0) return what + ": no GPU conversion to " + e.name;
  return ConvertSupport(e, spec.cast, f == kE4m3 || f == kE5m2 ? ConvertPath::kPtx : ConvertPath::kHeader);
}

void QuantizeMx(const float* x, size_t n, const MxSpec& spec, uint8_t* codes, uint8_t* scales) {
  if (std::string why = MxSupport(spec); !why.empty()) throw Error(why);
  const int f = DevFmtOf(spec.elem);
  DevMx m{};
  m.cvt = MakeCvt(spec.elem, spec.cast, f == kE4m3 || f == kE5m2 ? ConvertPath::kPtx : ConvertPath::kHeader);
  m.block = spec.block;
  m.rule = static_cast<int>(spec.rule);
  const FormatLimits lim = Limits(spec.elem);
  m.destmax = static_cast<float>(lim.max_finite);
  m.emax = lim.emax;
  m.elem_man = spec.elem.man_bits;
  m.policy = static_cast<int>(spec.nan);
  m.te_rcp = spec.scaling == ElementScaling::kTeRcp ? 1 : 0;
  m.block_nan_code = spec.elem.HasNan() ? static_cast<uint8_t>(spec.elem.CanonicalNan()) : 0;
  m.hw_round_up = Device().sm100a_code ? 1 : 0;
  if (n == 0) return;
  const size_t nb = (n + spec.block - 1) / spec.block;
  DeviceBuffer<float> dx(x, n);
  DeviceBuffer<uint8_t> dc(n), ds(nb);
  MxKernel<<<Blocks(nb, 128), 128>>>(dx.get(), n, m, dc.get(), ds.get());
  CheckLaunch("MX kernel");
  CheckNoUnsupported();
  dc.Download(codes, n);
  ds.Download(scales, nb);
}

void QuantizeNvfp4(const float* x, size_t n, size_t block, float tensor_amax, ScaleRule rule, uint8_t* codes,
                   uint8_t* block_scales, float* tensor_decode) {
  if (rule != ScaleRule::kNvfp4 && rule != ScaleRule::kNvfp4Div) throw Error("the CUDA NVFP4 quantizer takes the nvfp4 or nvfp4-div rule (nvfp4-torchao runs on the CPU)");
  if (block < 1 || block > 4096) throw Error("NVFP4 block must be 1..4096");
  CastOptions rne{};
  DevNvfp4 p{};
  p.cvt = MakeCvt(fmt::kE2M1, rne, Device().sm100a_code ? ConvertPath::kPtx : ConvertPath::kHeader);
  p.s8 = MakeCvt(fmt::kE4M3, rne, ConvertPath::kPtx);
  p.block = static_cast<int>(block);
  p.div_order = rule == ScaleRule::kNvfp4Div ? 1 : 0;
  p.policy = static_cast<int>(NanPolicy::kBlockNan);
  // S_enc on the host, as the library computes it (qmx/scale.h); the blocks' arithmetic runs on the device.
  p.s_enc = Nvfp4TensorEncodeScale(tensor_amax);
  *tensor_decode = 1.0f / p.s_enc;
  if (n == 0) return;
  const size_t nb = (n + block - 1) / block;
  DeviceBuffer<float> dx(x, n);
  DeviceBuffer<uint8_t> dc(n), ds(nb);
  Nvfp4Kernel<<<Blocks(nb, 128), 128>>>(dx.get(), n, p, dc.get(), ds.get());
  CheckLaunch("NVFP4 kernel");
  CheckNoUnsupported();
  dc.Download(codes, n);
  ds.Download(block_scales, nb);
}

}  // namespace qmx::gpu
