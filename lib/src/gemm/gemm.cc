// gemm.cc: the GEMM layer's models, operands and checks, and the fast paths (gemm_fast.cc holds the
// kernels). docs/gemm.md "GEMM accumulation models" documents each model and where its parameters come from.
#include "qmx/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

#include "fp_env.h"
#include "gemm/gemm_internal.h"
#include "gemm/gemm_simd.h"
#include "qmx/mx.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/io.h"
#include "qmx/round.h"
#include "qmx/testing.h"

namespace qmx {
namespace {

FusedParams HopperFp8(int promote) {
  FusedParams p;
  p.step = 32;
  p.frac_bits = 13;
  p.out_bits = 14;
  p.zero_exp = -133;
  p.promote = promote;
  return p;
}

AccumModel Named(const std::string& name, AccumKind kind, FusedParams f = {}) {
  AccumModel m;
  m.name = name;
  m.kind = kind;
  m.fused = f;
  return m;
}

int ParseInt(const std::string& key, const std::string& v) {
  try {
    size_t pos = 0;
    const long x = std::stol(v, &pos);
    if (pos != v.size() || x < -100000 || x > 100000) throw std::invalid_argument(v);
    return static_cast<int>(x);
  } catch (const std::exception&) {
    throw Error("fused model: '" + key + "' needs an integer, got '" + v + "'");
  }
}

FusedRound ParseRound(const std::string& key, const std::string& v) {
  if (v == "rz") return FusedRound::kRz;
  if (v == "rne") return FusedRound::kRne;
  throw Error("fused model: '" + key + "' is rz or rne, got '" + v + "'");
}

AccumModel ParseFused(const std::string& name) {
  AccumModel m = Named(name, AccumKind::kFused);
  std::string rest = name.substr(name.find(':') + 1);
  std::stringstream ss(rest);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw Error("fused model: '" + item + "' is not KEY=VALUE");
    const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    FusedParams& f = m.fused;
    if (key == "step") f.step = ParseInt(key, v);
    else if (key == "F") f.frac_bits = ParseInt(key, v);
    else if (key == "bits") f.out_bits = ParseInt(key, v);
    else if (key == "term") f.term_round = ParseRound(key, v);
    else if (key == "out") f.out_round = ParseRound(key, v);
    else if (key == "group") f.group = ParseInt(key, v);
    else if (key == "zero-exp" && v == "operands") f.zero_operands = true;
    else if (key == "zero-exp") f.zero_exp = ParseInt(key, v);
    else if (key == "promote") f.promote = ParseInt(key, v);
    else if (key == "acc") {
      if (v == "fp16") f.acc_fp16 = true;
      else if (v == "fp32") f.acc_fp16 = false;
      else throw Error("fused model: 'acc' is fp32 or fp16, got '" + v + "'");
    }
    else if (key == "halves") {
      if (v == "cdna3") f.cdna3_halves = true;
      else if (v == "none") f.cdna3_halves = false;
      else throw Error("fused model: 'halves' is cdna3 or none, got '" + v + "'");
    }
    else if (key == "split") {
      if (v == "hmma") f.hmma_split = true;
      else if (v == "none") f.hmma_split = false;
      else throw Error("fused model: 'split' is hmma or none, got '" + v + "'");
    }
    else if (key == "scale") {
      if (v == "products") f.scale_in_products = true;
      else if (v == "promotion") f.scale_in_products = false;
      else throw Error("fused model: 'scale' is products or promotion, got '" + v + "'");
    } else if (key == "promote-scale") {
      if (v == "product") f.promote_scale_separately = false;
      else if (v == "separate") f.promote_scale_separately = true;
      else throw Error("fused model: 'promote-scale' is product or separate, got '" + v + "'");
    } else {
      throw Error("fused model: unknown key '" + key +
                  "' (keys: step, F, bits, term, out, group, zero-exp, promote, scale, promote-scale, split, acc, halves)");
    }
  }
  ValidateAccumModel(m);
  return m;
}

}  // namespace

const char* AlphaRuleName(AlphaRule r) {
  switch (r) {
    case AlphaRule::kDecode: return "decode";
    case AlphaRule::kTe: return "te";
    case AlphaRule::kTeRef: return "te-ref";
  }
  return "?";
}

AlphaRule ParseAlphaRule(const std::string& s) {
  for (AlphaRule r : {AlphaRule::kDecode, AlphaRule::kTe, AlphaRule::kTeRef})
    if (s == AlphaRuleName(r)) return r;
  throw Error("unknown alpha rule '" + s + "' (decode, te, te-ref)");
}

std::vector<std::string> AccumModelNames() {
  return {"exact",
          "fp32-seq",
          "block-exact",
          "hopper-fp8",
          "hopper-fp8-fast",
          "hopper-fp8-vec",
          "hopper-mma-sync",
          "ada-fp8",
          "blackwell-mxf8f6f4",
          "blackwell-mxf4nvf4",
          "blackwell-mxf8f6f4-mmasim",
          "blackwell-mxf4nvf4-mmasim",
          "hopper-fp8-mmasim",
          "hopper-fp8-fast-mmasim",
          "ada-mma-fp8",
          "ada-mma-fp8-k16",
          "ada-mma-fp8-f16",
          "hopper-wgmma-fp8-f16",
          "rtx-blackwell-f8f6f4",
          "rtx-blackwell-f8f6f4-f16",
          "rtx-blackwell-mxf8f6f4",
          "rtx-blackwell-mxf4nvf4",
          "cdna3-fp8",
          "cdna4-mx",
          "cdna4-mx-32x32"};
}

AccumModel AccumModelByName(const std::string& name) {
  if (name == "exact") return Named("exact", AccumKind::kExact);
  if (name == "fp32-seq") return Named("fp32-seq", AccumKind::kFp32Seq);
  if (name == "block-exact") return Named("block-exact", AccumKind::kBlockExact);
  if (name == "hopper-fp8") return Named("hopper-fp8", AccumKind::kFused, HopperFp8(128));
  if (name == "hopper-fp8-fast") return Named("hopper-fp8-fast", AccumKind::kFused, HopperFp8(0));
  if (name == "hopper-fp8-vec") {
    FusedParams p = HopperFp8(128);
    p.promote_scale_separately = true;
    return Named("hopper-fp8-vec", AccumKind::kFused, p);
  }
  if (name == "hopper-mma-sync") {
    // mma.sync.m16n8k32 with FP8 operands on sm_90 (SASS: F2FP.F16.E4M3.UNPACK_B, two HMMA.16816.F32, the
    // first from zero, then FADD of C): each 32 K is two HMMA steps of 16 (split=hmma) with F = 25, RZ,
    // and the instruction's sum is added to C in FP32 (promote=32). Measured on an H100 (gpu/README.md).
    FusedParams p;
    p.step = 16;
    p.frac_bits = 25;
    p.out_bits = 24;
    p.promote = 32;
    p.hmma_split = true;
    return Named("hopper-mma-sync", AccumKind::kFused, p);
  }
  if (name == "ada-fp8") {
    FusedParams p = HopperFp8(0);
    p.step = 16;
    p.zero_exp = -132;
    return Named("ada-fp8", AccumKind::kFused, p);
  }
  if (name == "blackwell-mxf8f6f4" || name == "blackwell-mxf4nvf4") {
    FusedParams p;
    p.step = 32;
    p.frac_bits = 25;
    p.out_bits = 24;
    p.zero_exp = -133;
    p.scale_in_products = true;
    if (name == "blackwell-mxf4nvf4") {
      p.step = 64;
      p.group = 16;
      p.frac_bits = 35;
      p.zero_exp = -139;
    }
    return Named(name, AccumKind::kFused, p);
  }
  // The same models under MMA-Sim's zero rule (FusedParams::zero_operands), for replaying its outputs.
  for (const char* base : {"blackwell-mxf8f6f4", "blackwell-mxf4nvf4", "hopper-fp8", "hopper-fp8-fast"})
    if (name == std::string(base) + "-mmasim") {
      AccumModel m = AccumModelByName(base);
      m.name = name;
      m.fused.zero_operands = true;
      return m;
    }
  // Instructions of GPUs not at hand, from MMA-Sim's parameters and its zero rule (arXiv 2511.10909; docs/gemm.md
  // "The hardware models and their evidence"): Ada's FP8 mma (sm_89: m16n8k32 runs as two fused steps of 16,
  // F = 13, the result cut to 14 bits or rounded to FP16), Hopper's FP8 wgmma with an FP16 accumulator, and RTX
  // Blackwell's mma kind::f8f6f4 and mma.block_scale (sm_120a: one step of 32, F = 25; block-scaled as
  // tcgen05's).
  if (name == "ada-mma-fp8" || name == "ada-mma-fp8-k16" || name == "ada-mma-fp8-f16" || name == "hopper-wgmma-fp8-f16" ||
      name == "rtx-blackwell-f8f6f4" || name == "rtx-blackwell-f8f6f4-f16") {
    FusedParams p;
    const bool ada = name.rfind("ada-", 0) == 0, hopper = name.rfind("hopper-", 0) == 0;
    p.step = ada ? 16 : 32;
    p.frac_bits = ada || hopper ? 13 : 25;
    p.out_bits = ada ? 14 : 24;
    p.zero_operands = true;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, "-f16") == 0) {
      p.acc_fp16 = true;
      p.out_bits = 11;
      p.out_round = FusedRound::kRne;
    }
    return Named(name, AccumKind::kFused, p);
  }
  if (name == "cdna3-fp8") {
    // AMD MI300's v_mfma_f32_16x16x32 / 32x32x16 with FP8 (E4M3FNUZ) and BF8 (E5M2FNUZ) operands, after MMA-Sim's
    // CDNA3 model (its simulator/amd.py: groups of 16, amd_fused_dot_rd_add with 24 fractional bits, the
    // accumulator rounded to FP32 after each group). Not measured on hardware here.
    FusedParams p;
    p.step = 16;
    p.frac_bits = 24;
    p.out_bits = 24;
    p.out_round = FusedRound::kRne;
    p.zero_operands = true;
    p.cdna3_halves = true;
    return Named(name, AccumKind::kFused, p);
  }
  if (name == "cdna4-mx" || name == "cdna4-mx-32x32") {
    // AMD MI350 / MI355X (gfx950) v_mfma_scale_f32_16x16x128_f8f6f4 and _32x32x64_f8f6f4: OCP FP8 / FP6 / FP4
    // A and B, each in its own format, with an E8M0 scale per 32 K, "applied after the normal dot product
    // prior to output/accumulation", RNE output whatever MODE says, denormals kept (AMD CDNA4 ISA, sections
    // 7.1.5, 7.2 and 7.4). The internal precision is not documented: modelled as exact within one instruction
    // (128 or 64 K), C included, then one RNE rounding to FP32. Not measured on hardware (docs/gemm.md).
    AccumModel m = Named(name, AccumKind::kBlockExact);
    m.exact_step = name == "cdna4-mx" ? 128 : 64;
    return m;
  }
  if (name == "rtx-blackwell-mxf8f6f4" || name == "rtx-blackwell-mxf4nvf4") {
    AccumModel m = AccumModelByName(name.substr(4) + "-mmasim");
    m.name = name;
    return m;
  }
  if (name.rfind("fused:", 0) == 0 || name == "fused") return ParseFused(name);
  std::string known;
  for (const std::string& n : AccumModelNames()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown accumulation model '" + name + "' (known: " + known + ", fused:KEY=V,...)");
}

std::string DescribeModel(const AccumModel& m) {
  std::ostringstream os;
  os << m.name << ": ";
  switch (m.kind) {
    case AccumKind::kExact: os << "exact products and sum, one RNE rounding to FP32"; break;
    case AccumKind::kFp32Seq: os << "IEEE FP32 fma in K order"; break;
    case AccumKind::kBlockExact:
      if (m.exact_step != 0)
        os << "exact over each " << m.exact_step << " K (every scale block's scale applied) with the accumulator, "
           << "one RNE rounding to FP32 per step";
      else os << "exact per scale block, RNE into an FP32 accumulator across blocks";
      break;
    case AccumKind::kFused: {
      const FusedParams& f = m.fused;
      os << "fused steps of " << f.step << " products + accumulator";
      if (f.group > 1) os << " (exact groups of " << f.group << ")";
      os << ", F=" << f.frac_bits << ", terms " << (f.term_round == FusedRound::kRz ? "rz" : "rne") << ", output "
         << (f.out_round == FusedRound::kRz ? "rz" : "rne") << " to " << f.out_bits << " bits, zero exponent ";
      if (f.zero_operands) os << "from the operands (MMA-Sim: zero element -126)";
      else if (f.zero_exp <= -1000) os << "none";
      else os << f.zero_exp;
      if (f.hmma_split) os << ", each 32 K split as two HMMA k16 steps (k % 4 in {0,1}, then {2,3})";
      if (f.cdna3_halves)
        os << ", CDNA3 halves (even and odd k summed apart, floored to F bits at their common exponent; the sum "
              "floored to 31 and C to 24 fractional bits, C dropped more than 25 binades below)";
      if (f.acc_fp16) os << ", accumulator and output FP16 (exponent floored at -14, Inf from 2^16)";
      if (f.promote) os << ", FP32 promotion every " << f.promote << " K";
      else os << ", no promotion";
      if (f.cdna3_halves) {
        os << ", no block scales";
        break;
      }
      os << ", block scales " << (f.scale_in_products ? "in products" : "at promotion");
      if (!f.scale_in_products) os << (f.promote_scale_separately ? " (fma(p*sa, sb))" : " (fma(p, sa*sb))");
      break;
    }
  }
  if (m.alpha != AlphaRule::kDecode) os << "; alpha " << AlphaRuleName(m.alpha) << " (Transformer Engine's, from the amax)";
  return os.str();
}

void ValidateAccumModel(const AccumModel& m) {
  if (m.kind != AccumKind::kFused) return;
  const FusedParams& f = m.fused;
  if (f.step < 1 || f.step > 4096) throw Error("fused model: step must be 1..4096, got " + std::to_string(f.step));
  if (f.hmma_split && (f.step != 16 || f.group != 1))
    throw Error("fused model: split=hmma runs steps of 16 single products (step=16), got step " + std::to_string(f.step));
  if (f.frac_bits < 0 || f.frac_bits > 60) throw Error("fused model: F must be 0..60, got " + std::to_string(f.frac_bits));
  if (f.out_bits < 1 || f.out_bits > 24) throw Error("fused model: bits must be 1..24, got " + std::to_string(f.out_bits));
  if (f.group < 1 || f.step % f.group != 0)
    throw Error("fused model: group (" + std::to_string(f.group) + ") must divide step (" + std::to_string(f.step) + ")");
  if (f.acc_fp16 && (f.out_bits > 11 || f.promote != 0))
    throw Error("fused model: acc=fp16 keeps at most 11 bits (bits <= 11) and never promotes, got bits=" +
                std::to_string(f.out_bits) + ", promote=" + std::to_string(f.promote));
  if (f.cdna3_halves && (f.group != 1 || f.promote != 0 || f.acc_fp16 || f.hmma_split || f.out_bits != 24))
    throw Error("fused model: halves=cdna3 sums single products (group=1) into an FP32 accumulator (bits=24), "
                "without promotion, split or acc=fp16");
  if (f.promote < 0 || f.promote % f.step != 0)
    throw Error("fused model: promote (" + std::to_string(f.promote) + ") must be 0 or a multiple of step (" +
                std::to_string(f.step) + ")");
}

namespace detail {
namespace {

// Whether an FP32 value is an FP16 value (NaN counts): it survives the library's conversion to FP16 and back
// bit for bit (no saturation, so anything past 65504 becomes Inf and fails).
bool IsFp16Value(float v) {
  if (std::isnan(v)) return true;
  CastOptions o;
  o.saturation = Saturation::kNoSat;
  const uint16_t h = static_cast<uint16_t>(ConvertF32(v, fmt::kFP16, o));
  const float back = SourceValueF32(DType::kF16, &h, 0);
  uint32_t a, b;
  std::memcpy(&a, &v, 4);
  std::memcpy(&b, &back, 4);
  return a == b;
}

std::string FloatText(float v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

// Transformer Engine's alpha from the two operands' amax (AlphaRule::kTe, kTeRef).
void PlanTeAlpha(const GemmOperand& a, const GemmOperand& b, GemmPlan& p) {
  const std::string rule = std::string("alpha=") + AlphaRuleName(p.rule);
  for (const GemmOperand* o : {&a, &b}) {
    const char* side = o == &a ? "A" : "B";
    const std::vector<float>& scales = o == &a ? o->row_scales : o->col_scales;
    const std::vector<float>& amax = o == &a ? o->te_alpha.row_amax : o->te_alpha.col_amax;
    const char* line = o == &a ? "row of A" : "column of B";
    if (!(o == &a ? o->te_alpha.col_amax : o->te_alpha.row_amax).empty())
      throw Error(std::string("gemm: ") + side + "'s per-line amax must be one per " + line);
    if (amax.size() != scales.size())
      throw Error(std::string("gemm: ") + side + " has " + std::to_string(scales.size()) +
                  " per-line second-level scales and " + std::to_string(amax.size()) + " per-line amax (one each per " +
                  line + ")");
    if (scales.empty() && !(o->te_alpha.amax >= 0.0f) && !std::isnan(o->te_alpha.amax))
      throw Error("gemm: " + rule + " forms alpha from both operands' NVFP4 amax, and " + side +
                  " has none: quantized NVFP4 tensors carry theirs, raw codes need one given (qmx-sim gemm --" +
                  (o == &a ? "a" : "b") + "-amax)");
    if (o->te_alpha.bound != 448.0f && o->te_alpha.bound != 256.0f)
      throw Error(std::string("gemm: ") + side + "'s NVFP4 E4M3 bound is 448 (or 256 under 4over6), not " +
                  std::to_string(o->te_alpha.bound));
  }
  if (p.rule == AlphaRule::kTe && (!a.te_alpha.row_amax.empty() || !b.te_alpha.col_amax.empty()))
    throw Error("gemm: alpha=te is TE's cuBLASLt alpha, one scalar from two tensor amax; row-scaled operands "
                "have one amax per line (TE's reference GEMM takes them: alpha=te-ref)");
  p.has_alpha = true;
  p.amax_a = a.te_alpha.amax;
  p.amax_b = b.te_alpha.amax;
  p.amax_rows = a.te_alpha.row_amax.empty() ? nullptr : a.te_alpha.row_amax.data();
  p.amax_cols = b.te_alpha.col_amax.empty() ? nullptr : b.te_alpha.col_amax.data();
  // TE: fp4_max * fp4_max * fp8_max_A * fp8_max_B in FP32, left to right (exact for bounds 448 and 256).
  p.te_factor = 6.0f * 6.0f * a.te_alpha.bound * b.te_alpha.bound;
  p.te_inv = 1.0f / p.te_factor;
}

}  // namespace

GemmPlan PlanGemm(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model, bool storage) {
  ValidateAccumModel(model);
  auto shape = [](const GemmOperand& o) { return std::to_string(o.rows) + "x" + std::to_string(o.cols); };
  if (a.cols != b.rows) {
    // A weight as nn.Linear and torch._scaled_mm's callers hold it is N x K: name the fix for that case.
    const std::string hint = a.cols == b.cols && b.rows != 0
                                 ? " (B looks like N x K, a weight as nn.Linear holds it: pass its transpose, K x N, quantized "
                                   "along K, i.e. with axis col)"
                                 : "";
    throw Error("gemm: A is " + shape(a) + " and B is " + shape(b) + ": A's columns and B's rows (K) differ" + hint);
  }
  // Sizes are checked as products before anything is allocated: a (2^32 x 0) x (0 x 2^32) product has no
  // operand bytes but an output of 2^64 elements, which size_t arithmetic would wrap to 0.
  uint64_t mn = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(a.rows), static_cast<uint64_t>(b.cols), &mn) ||
      mn > std::numeric_limits<size_t>::max() / sizeof(float))
    throw Error("gemm: the output of a " + shape(a) + " by " + shape(b) + " product has more elements than memory can address");
  CheckMemoryCeiling(mn * sizeof(float), "gemm: the " + std::to_string(a.rows) + "x" + std::to_string(b.cols) + " FP32 output");
  for (const GemmOperand* o : {&a, &b}) {
    const char* side = o == &a ? "A" : "B";
    if (o->elem.Bits() > 8) throw Error(std::string("gemm: ") + side + "'s element format " + o->elem.name + " has more than 8 bits");
    uint64_t count = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(o->rows), static_cast<uint64_t>(o->cols), &count))
      throw Error(std::string("gemm: ") + side + " is " + shape(*o) + ": its element count overflows");
    if (storage && o->codes.size() != count)
      throw Error(std::string("gemm: ") + side + " holds " + std::to_string(o->codes.size()) + " codes for a " + shape(*o) + " matrix");
    if (o->block_rows != 0) {
      if (o->block_cols == 0 || o->scale_rows != (o->rows + o->block_rows - 1) / o->block_rows ||
          o->scale_cols != (o->cols + o->block_cols - 1) / o->block_cols ||
          (storage && o->scales.size() != o->scale_rows * o->scale_cols))
        throw Error(std::string("gemm: ") + side + "'s block scales do not match its shape and block");
    }
  }
  GemmPlan p;
  p.m = a.rows;
  p.n = b.cols;
  p.k = a.cols;
  p.a_blocks = a.block_rows != 0;
  p.b_blocks = b.block_rows != 0;
  const size_t ka = p.a_blocks && a.block_cols < p.k ? a.block_cols : p.k;
  const size_t kbb = p.b_blocks && b.block_rows < p.k ? b.block_rows : p.k;
  if (ka != p.k && kbb != p.k && ka != kbb)
    throw Error("gemm: A's scale blocks span " + std::to_string(ka) + " along K and B's " + std::to_string(kbb) +
                ": they must be equal");
  p.kb = std::min(ka, kbb);
  if (p.k == 0) p.kb = 1;
  p.xstep = p.kb;
  if (model.kind == AccumKind::kBlockExact && model.exact_step != 0) {
    if (p.kb != p.k && model.exact_step % p.kb != 0)
      throw Error("gemm: model '" + model.name + "' rounds every " + std::to_string(model.exact_step) +
                  " K, which is not a multiple of the scale block of " + std::to_string(p.kb));
    p.xstep = model.exact_step;
  }
  if (model.name == "cdna4-mx" || model.name == "cdna4-mx-32x32") {
    // The instruction's operands (CDNA4 ISA 7.1.5, 7.2): OCP FP8 / FP6 / FP4 elements, E8M0 scales on 32 K (or
    // none: the unscaled v_mfma_f32_*_f8f6f4, scales 1.0).
    for (const GemmOperand* o : {&a, &b}) {
      const std::string& e = o->elem.name;
      if (e != "e4m3" && e != "e5m2" && e != "e2m3" && e != "e3m2" && e != "e2m1")
        throw Error("gemm: model '" + model.name +
                    "' takes OCP e4m3, e5m2, e2m3, e3m2 or e2m1 elements (CBSZ / BLGP), not " + e);
    }
    if ((p.a_blocks && a.scale_format != ScaleFormat::kUe8m0) ||
        (p.b_blocks && b.scale_format != ScaleFormat::kUe8m0) ||
        ((p.a_blocks || p.b_blocks) && p.kb != 32 && p.kb != p.k))
      throw Error("gemm: model '" + model.name +
                  "' takes E8M0 (UE8M0) block scales on 32 K, as the instruction does; "
                  "these operands have " +
                  std::to_string(p.kb) + "-K blocks or another scale format");
  }
  if (model.kind == AccumKind::kFused && model.fused.cdna3_halves && (p.a_blocks || p.b_blocks))
    throw Error("gemm: model '" + model.name + "' is CDNA3's unscaled FP8 MFMA: block scales are not modelled (per-tensor "
                "scales are, as alpha after accumulation)");
  if (!a.col_scales.empty() || (!a.row_scales.empty() && a.row_scales.size() != a.rows))
    throw Error("gemm: A's second-level scales must be one per row (" + std::to_string(a.rows) + "), as row-wise "
                "row-scaled NVFP4 gives; it has " + std::to_string(a.row_scales.size()) + " per row and " +
                std::to_string(a.col_scales.size()) + " per column");
  if (!b.row_scales.empty() || (!b.col_scales.empty() && b.col_scales.size() != b.cols))
    throw Error("gemm: B's second-level scales must be one per column (" + std::to_string(b.cols) + "), as column-wise "
                "row-scaled NVFP4 gives; it has " + std::to_string(b.col_scales.size()) + " per column and " +
                std::to_string(b.row_scales.size()) + " per row");
  if ((!a.row_scales.empty() && a.tensor_scale != 1.0f) || (!b.col_scales.empty() && b.tensor_scale != 1.0f))
    throw Error("gemm: an operand with per-line second-level scales has tensor_scale 1 (they replace it)");
  p.ta = a.tensor_scale;
  p.tb = b.tensor_scale;
  p.alpha_rows = a.row_scales.empty() ? nullptr : a.row_scales.data();
  p.alpha_cols = b.col_scales.empty() ? nullptr : b.col_scales.data();
  p.has_alpha = a.tensor_scale != 1.0f || b.tensor_scale != 1.0f || p.alpha_rows || p.alpha_cols;
  p.rule = model.alpha;
  if (p.rule != AlphaRule::kDecode) PlanTeAlpha(a, b, p);
  p.alpha = p.AlphaAt(0, 0);
  if (c_in && p.has_alpha)
    throw Error("gemm: an input C with per-tensor scales (" + std::to_string(a.tensor_scale) + ", " +
                std::to_string(b.tensor_scale) + (p.rule == AlphaRule::kDecode ? "" : ", alpha=" + std::string(AlphaRuleName(p.rule))) +
                ") is not modelled: cuBLAS's epilogue order for beta*C is unverified");
  if (model.kind == AccumKind::kFused && model.fused.acc_fp16 && c_in) {
    for (size_t i = 0; i < mn; ++i)
      if (!IsFp16Value(c_in[i]))
        throw Error("gemm: model '" + model.name + "' accumulates in FP16: C must hold FP16 values, and C[" +
                    std::to_string(i / p.n) + ", " + std::to_string(i % p.n) + "] = " + FloatText(c_in[i]) +
                    " is not one (round C to FP16 first)");
  }
  if (model.kind == AccumKind::kFused) {
    const FusedParams& f = model.fused;
    const bool blocks = p.a_blocks || p.b_blocks;
    if (blocks && !f.scale_in_products) {
      if (f.promote == 0)
        throw Error("gemm: model '" + model.name +
                    "' applies block scales at promotion but never promotes: give it promote=N or scale=products");
      if (p.kb != p.k && p.kb % static_cast<size_t>(f.promote) != 0)
        throw Error("gemm: model '" + model.name + "' promotes every " + std::to_string(f.promote) +
                    " K, which does not divide the scale block of " + std::to_string(p.kb));
    }
    if (blocks && f.scale_in_products && f.group > 1 && p.kb != p.k && p.kb % static_cast<size_t>(f.group) != 0)
      throw Error("gemm: model '" + model.name + "' sums groups of " + std::to_string(f.group) +
                  ", which does not divide the scale block of " + std::to_string(p.kb));
  }
  return p;
}

}  // namespace detail

BlockScaleFormat ParseBlockScaleFormat(const std::string& name) {
  BlockScaleFormat f;
  f.name = name;
  for (ScaleFormat k : {ScaleFormat::kUe8m0, ScaleFormat::kE4m3, ScaleFormat::kFp32})
    if (name == ScaleFormatName(k)) {
      f.kind = k;
      return f;
    }
  Format code;
  try {
    code = ParseFormat(name);
  } catch (const Error& e) {
    throw Error("unknown block-scale format '" + name + "' (ue8m0, e4m3, fp32, or a format of 8 bits or fewer: " +
                e.what() + ")");
  }
  if (code.Bits() > 8 || code.IsInt())
    throw Error("block-scale format '" + name + "' is not a floating-point format of 8 bits or fewer");
  f.kind = ScaleFormat::kCode;
  f.code = code;
  return f;
}

void SetBlockScales(GemmOperand& o, const BlockScaleFormat& f, size_t br, size_t bc, const uint32_t* raw) {
  if (f.kind != ScaleFormat::kCode) return SetBlockScales(o, f.kind, br, bc, raw);
  const auto word = [&](size_t i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%X", raw[i]);
    return "block scale " + std::to_string(i) + " (" + buf + ")";
  };
  if (br == 0 || bc == 0) throw Error("block scales need blocks of at least 1x1");
  const size_t sr = (o.rows + br - 1) / br, sc = (o.cols + bc - 1) / bc;
  std::vector<float> s(sr * sc);
  for (size_t i = 0; i < s.size(); ++i) {
    if (raw[i] > f.code.CodeMask())
      throw Error(word(i) + " does not fit " + f.name + "'s " + std::to_string(f.code.Bits()) + " bits");
    s[i] = DecodeToFloat(f.code, raw[i]);
    if (s[i] < 0 || (s[i] == 0 && std::signbit(s[i])))
      throw Error(word(i) + " is negative in " + f.name + ": block scales are positive");
  }
  o.scale_format = ScaleFormat::kCode;
  o.scale_code = f.code;
  o.block_rows = br;
  o.block_cols = bc;
  o.scale_rows = sr;
  o.scale_cols = sc;
  o.scales = std::move(s);
}

void SetBlockScales(GemmOperand& o, ScaleFormat f, size_t br, size_t bc, const uint32_t* raw) {
  if (br == 0 || bc == 0) throw Error("block scales need blocks of at least 1x1");
  if (f == ScaleFormat::kCode) throw Error("SetBlockScales: a code scale format needs its format (BlockScaleFormat)");
  o.scale_format = f;
  o.block_rows = br;
  o.block_cols = bc;
  o.scale_rows = (o.rows + br - 1) / br;
  o.scale_cols = (o.cols + bc - 1) / bc;
  o.scales.resize(o.scale_rows * o.scale_cols);
  for (size_t i = 0; i < o.scales.size(); ++i) {
    if (f == ScaleFormat::kFp32) {
      std::memcpy(&o.scales[i], &raw[i], 4);
    } else {
      if (raw[i] > 0xFF) throw Error("a UE8M0 or E4M3 block scale is one byte, not " + std::to_string(raw[i]));
      o.scales[i] = f == ScaleFormat::kUe8m0 ? DecodeToFloat(fmt::kUE8M0, raw[i]) : DecodeToFloat(fmt::kE4M3, raw[i] & 0x7F);
    }
  }
}

GemmOperand OperandFromCodes(Format elem, size_t rows, size_t cols, const uint8_t* codes) {
  if (elem.Bits() > 8) throw Error(std::string("gemm: element format ") + elem.name + " has more than 8 bits");
  GemmOperand o;
  o.elem = elem;
  o.rows = rows;
  o.cols = cols;
  uint64_t count = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), &count))
    throw Error("gemm: a " + std::to_string(rows) + "x" + std::to_string(cols) + " operand's element count overflows");
  o.codes.assign(codes, codes + count);
  const uint64_t mask = elem.CodeMask();
  for (size_t i = 0; i < o.codes.size(); ++i)
    if (o.codes[i] & ~mask)
      throw Error("gemm: code " + std::to_string(o.codes[i]) + " at element " + std::to_string(i) + " does not fit " +
                  elem.name + " (" + std::to_string(elem.Bits()) + " bits)");
  return o;
}

namespace detail {

GemmOperand OperandShell(const QuantizedTensor& q) {
  GemmOperand o;
  o.elem = q.spec.elem;
  o.rows = q.rows;
  o.cols = q.cols;
  const BlockExtent ext = ResolveBlock(q.spec, q.rows, q.cols);
  const ScaleFormat sf = ScaleFormatOf(q.spec.rule);
  o.scale_format = sf;
  const bool per_tensor = ext.rows >= q.rows && ext.cols >= q.cols;
  if (per_tensor && sf == ScaleFormat::kFp32) {
    o.tensor_scale = q.ScaleAt(0, 0);
    return o;
  }
  o.block_rows = ext.rows;
  o.block_cols = ext.cols;
  o.scale_rows = q.scale_rows;
  o.scale_cols = q.scale_cols;
  if (sf == ScaleFormat::kUe8m0 && !q.spec.scale_format.empty()) {
    // MX scales in another format (QuantSpec::scale_format): a UE8M0 operand where each is a power of two in
    // UE8M0's range or a NaN, as the quantizer writes them; codes of their format otherwise (a file's scales).
    const Format f = MxScaleFormat(q.spec);
    for (uint8_t c : q.scales) {
      const double v = MxScaleValue(f, c);
      int e = 0;
      if (!std::isnan(v) && !(v > 0 && std::frexp(v, &e) == 0.5 && e - 1 >= -127 && e - 1 <= 127)) {
        o.scale_format = ScaleFormat::kCode;
        o.scale_code = f;
        break;
      }
    }
  }
  if (sf == ScaleFormat::kE4m3) {
    o.tensor_scale = q.tensor_decode;
    // TE's alpha (36 = 6 x 6) is NVFP4's: other elements leave it unknown, which the TE alpha rules refuse.
    if (Nvfp4ElemMax(q.spec) == 6.0f) o.te_alpha.amax = q.tensor_amax;
    o.te_alpha.bound =
        IsNvfp4FourOverSix(q.spec.rule) ? 256.0f : static_cast<float>(Limits(Nvfp4ScaleFormat(q.spec)).max_finite);
    if (!E4m3BlockScales(q.spec)) {  // another code format's scales (QuantSpec::scale_format), as GEMM codes
      o.scale_format = ScaleFormat::kCode;
      o.scale_code = Nvfp4ScaleFormat(q.spec);
    }
  }
  if (q.spec.row_scaled) {  // each line's decode scale, as the tensor's would be: fl32(1 / S_enc(line amax))
    std::vector<float>& lines = q.spec.axis == Axis::kCol ? o.col_scales : o.row_scales;
    for (float amax : q.line_amax) lines.push_back(Nvfp4TensorDecode(Nvfp4TensorScale(amax, q.spec), q.spec.rule));
    (q.spec.axis == Axis::kCol ? o.te_alpha.col_amax : o.te_alpha.row_amax) = q.line_amax;
    o.tensor_scale = 1.0f;
  }
  return o;
}

}  // namespace detail

GemmOperand OperandFromQuantized(const QuantizedTensor& q) {
  GemmOperand o = detail::OperandShell(q);
  o.codes.assign(q.codes.begin(), q.codes.end());
  if (o.block_rows == 0) return o;
  o.scales.resize(q.scale_rows * q.scale_cols);
  for (size_t r = 0; r < q.scale_rows; ++r)
    for (size_t c = 0; c < q.scale_cols; ++c) o.scales[r * q.scale_cols + c] = q.ScaleAt(r, c);
  return o;
}

namespace detail {
bool SplitHmma(const GemmOperand& a, const GemmOperand& b, const AccumModel& model, GemmOperand& pa, GemmOperand& pb,
               AccumModel& pm) {
  if (model.kind != AccumKind::kFused || !model.fused.hmma_split) return false;
  if (a.cols % 32 != 0) throw Error("gemm: split=hmma needs K to be a multiple of 32, got " + std::to_string(a.cols));
  if ((a.block_rows != 0 && a.block_cols % 32 != 0) || (b.block_rows != 0 && b.block_rows % 32 != 0))
    throw Error("gemm: split=hmma needs scale blocks along K to be whole multiples of 32");
  // K reordered inside each 32 so that the two HMMA steps are contiguous runs of 16: 0 1 4 5 ... 29, 2 3 6 7
  // ... 31. A step's sum does not depend on the order of its products, only on which products share it.
  size_t perm[32];
  for (size_t i = 0; i < 16; ++i) perm[i] = 4 * (i / 2) + i % 2, perm[16 + i] = 4 * (i / 2) + 2 + i % 2;
  pa = a;
  pb = b;
  for (size_t r = 0; r < a.rows; ++r)
    for (size_t k = 0; k < a.cols; ++k) pa.codes[r * a.cols + k] = a.codes[r * a.cols + k / 32 * 32 + perm[k % 32]];
  for (size_t k = 0; k < b.rows; ++k)
    for (size_t c = 0; c < b.cols; ++c) pb.codes[k * b.cols + c] = b.codes[(k / 32 * 32 + perm[k % 32]) * b.cols + c];
  pm = model;
  pm.fused.hmma_split = false;
  pm.fused.operand_emin = -14;  // the HMMA steps see FP16 values
  return true;
}
}  // namespace detail

FusedStepCounts GemmFusedStepCounts() {
  FusedStepCounts c;
  simd::Fp16StepCounts(&c.fp16, &c.fp32_fallback);
  return c;
}

Cdna3StepCounts GemmCdna3StepCounts() {
  uint64_t n[5];
  simd::Cdna3Counts(n);
  return {n[0], n[1], n[2], n[3], n[4]};
}

float GemmAlphaAt(const GemmOperand& a, const GemmOperand& b, AlphaRule rule, size_t i, size_t j) {
  AccumModel m;
  m.alpha = rule;
  const detail::GemmPlan plan = detail::PlanGemm(a, b, nullptr, m);
  if (i >= plan.m || j >= plan.n) throw Error("gemm: alpha of output (" + std::to_string(i) + ", " + std::to_string(j) + ") outside the result");
  return plan.has_alpha ? plan.AlphaAt(i, j) : 1.0f;
}

namespace {

// D into out (plan.m x plan.n, zeroed) for operands and a model past SplitHmma.
void GemmPlanned(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                 const detail::GemmPlan& plan, Exec exec, float* out) {
  if (detail::GemmFast(a, b, c_in, model, plan, exec, out)) {
    detail::CanonicalizeNans(model, out, plan.m * plan.n);
    return;
  }
  // Generic path: the reference, rows in parallel (each output is computed alone, so the result does
  // not depend on the thread count).
  const size_t rows_per = 4;
  const long chunks = static_cast<long>((plan.m + rows_per - 1) / rows_per);
#pragma omp parallel for schedule(dynamic) if (exec == Exec::kParallel)
  for (long c = 0; c < chunks; ++c) {
    const size_t i0 = static_cast<size_t>(c) * rows_per;
    detail::GemmRefRows(a, b, c_in, model, plan, i0, std::min(plan.m, i0 + rows_per), out);
  }
}

}  // namespace

std::vector<float> Gemm(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                        Exec exec) {
  {
    GemmOperand pa, pb;
    AccumModel pm;
    if (detail::SplitHmma(a, b, model, pa, pb, pm)) return Gemm(pa, pb, c_in, pm, exec);
  }
  const detail::ScopedDefaultFpEnv fp_env;  // the OpenMP loops below take their own
  const detail::GemmPlan plan = detail::PlanGemm(a, b, c_in, model);
  std::vector<float> out(plan.m * plan.n);
  GemmPlanned(a, b, c_in, model, plan, exec, out.data());
  return out;
}

void GemmInto(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model, float* d,
              Exec exec) {
  if (d == nullptr) throw Error("GemmInto: D is null");
  {
    GemmOperand pa, pb;
    AccumModel pm;
    if (detail::SplitHmma(a, b, model, pa, pb, pm)) return GemmInto(pa, pb, c_in, pm, d, exec);
  }
  const detail::ScopedDefaultFpEnv fp_env;
  const detail::GemmPlan plan = detail::PlanGemm(a, b, c_in, model);
  const size_t total = plan.m * plan.n;
  const auto at = [](const float* p) { return reinterpret_cast<std::uintptr_t>(p); };
  if (c_in != nullptr && at(c_in) < at(d + total) && at(d) < at(c_in + total)) {  // D over C: through a copy
    const std::vector<float> out = Gemm(a, b, c_in, model, exec);
    std::copy(out.begin(), out.end(), d);
    return;
  }
  std::fill(d, d + total, 0.0f);
  GemmPlanned(a, b, c_in, model, plan, exec, d);
}

}  // namespace qmx
