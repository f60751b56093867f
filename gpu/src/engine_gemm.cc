// engine_gemm.cc: the emulation engine's GEMM, host side. Plans with the CPU library (the same checks and
// errors as qmx::Gemm), proves per call that the kernel's double arithmetic is exact for these operands
// and this model, uploads, runs engine_kernels.cu and downloads.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine_internal.h"
#include "gemm/gemm_internal.h"
#include "gpu_internal.h"
#include "qmx/error.h"
#include "qmx/gpu.h"
#include "qmx/host_device.h"

namespace qmx::gpu {
namespace {

using detail::DeviceBuffer;

// What the exactness bounds need of an operand's element values and scales.
struct ValueBounds {
  int sig_bits = 1;       // the widest odd significand of a finite nonzero value
  int min_lsb = 0;        // the lowest bit any finite nonzero value has
  double max_abs = 0;     // the largest finite magnitude
};

ValueBounds ElementBounds(const Format& f) {
  ValueBounds v;
  bool any = false;
  const unsigned count = f.Bits() >= 8 ? 256u : 1u << f.Bits();
  for (unsigned c = 0; c < count; ++c) {
    const double x = DecodeToDouble(f, c);
    if (x == 0 || !std::isfinite(x)) continue;
    const qmx::detail::Exact e = qmx::detail::ExactOf(x);
    v.sig_bits = std::max(v.sig_bits, qmx::detail::Msb128(e.mag) + 1);
    v.min_lsb = any ? std::min(v.min_lsb, e.lsb) : e.lsb;
    v.max_abs = std::max(v.max_abs, std::fabs(x));
    any = true;
  }
  return v;
}

// The widest significand of the operand's block scales: read from them on the host; for an operand whose
// scales are in device memory (not here), the scale format's widest.
int ScaleSigBits(const GemmOperand& o) {
  if (o.scales.empty()) return o.scale_format == ScaleFormat::kUe8m0 ? 1 : o.scale_format == ScaleFormat::kE4m3 ? 4 : 24;
  int bits = 1;
  for (float s : o.scales)
    if (s != 0 && std::isfinite(s)) bits = std::max(bits, qmx::detail::SignificantBits(s));
  return bits;
}

int CeilLog2(double x) { return x <= 1 ? 0 : static_cast<int>(std::ceil(std::log2(x))); }

// The operand's 256 code values and nominal exponents (gemm_ref.cc: DecodeToDouble, NominalExp with the
// format's emin or the model's operand_emin; zero and non-finite codes: -126, the zero rule's exponent).
void CodeTables(const Format& f, int emin, std::vector<double>& values, std::vector<int>& nominal) {
  values.resize(256);
  nominal.resize(256);
  for (unsigned c = 0; c < 256; ++c) {
    values[c] = DecodeToDouble(f, c);
    const double v = values[c];
    nominal[c] = v == 0 || !std::isfinite(v) ? -126 : qmx::detail::NominalExp(v, emin);
  }
}

// The codes as m * 2^e with nominal exponents, for the tensor-core kernel's integer steps; false when a
// significand needs 15 bits or more (no format of 8 bits does).
bool CodePartsTable(const std::vector<double>& values, const std::vector<int>& nominal,
                    std::vector<detail::CodeParts>& parts) {
  parts.assign(256, detail::CodeParts{});
  for (unsigned c = 0; c < 256; ++c) {
    const double v = values[c];
    parts[c].nom = detail::kZeroNom;
    if (v == 0 || !std::isfinite(v)) continue;
    const qmx::detail::Exact e = qmx::detail::ExactOf(v);
    if (e.mag >= (1u << 15)) return false;
    parts[c].m = static_cast<int16_t>(e.neg ? -static_cast<int>(e.mag) : static_cast<int>(e.mag));
    parts[c].e = static_cast<int16_t>(e.lsb);
    parts[c].nom = static_cast<int16_t>(nominal[c]);
  }
  return true;
}

}  // namespace

std::string EngineGemmSupport(const GemmOperand& a, const GemmOperand& b, const AccumModel& model) {
  for (const GemmOperand* o : {&a, &b})
    if (o->scale_format == ScaleFormat::kCode)
      return std::string("block scales of format ") + o->scale_code.name + " run on the CPU (the engine takes UE8M0, E4M3 and FP32)";
  if (model.kind == AccumKind::kBlockExact && model.exact_step != 0)
    return "'" + model.name + "' (exact steps of " + std::to_string(model.exact_step) +
           " K across scale blocks) runs on the CPU";
  // fp32-seq, and exact and block-exact on the reference's own exact accumulator (engine_fused.cuh).
  if (model.kind != AccumKind::kFused) return "";
  const FusedParams& p = model.fused;
  if (p.acc_fp16)
    return "the engine's accumulators are FP32; '" + model.name + "' accumulates in FP16 and runs on the CPU";
  if (p.cdna3_halves)
    return "'" + model.name + "' (AMD CDNA3's interleaved half sums) runs on the CPU";
  const bool scales_in = (a.block_rows != 0 || b.block_rows != 0) && p.scale_in_products;
  const ValueBounds ea = ElementBounds(a.elem), eb = ElementBounds(b.elem);
  const int sa = scales_in && a.block_rows != 0 ? ScaleSigBits(a) : 1;
  const int sb = scales_in && b.block_rows != 0 ? ScaleSigBits(b) : 1;
  const std::string what = "'" + model.name + "' on " + a.elem.name + " x " + b.elem.name;
  int headroom;  // a term's magnitude stays below 2^(nominal + headroom)
  if (p.group == 1) {
    if (ea.sig_bits + eb.sig_bits + sa + sb > 53)
      return what + ": a product of elements and scales needs " + std::to_string(ea.sig_bits + eb.sig_bits + sa + sb) +
             " significant bits, more than the engine's 53";
    headroom = 2 + (scales_in ? 2 : 0);
  } else {
    const int group_bits = CeilLog2(p.group * ea.max_abs * eb.max_abs);
    const int span = group_bits - (ea.min_lsb + eb.min_lsb);
    if (span + sa + sb > 53)
      return what + ": a group of " + std::to_string(p.group) + " products spans " + std::to_string(span + sa + sb) +
             " bits with its scales, more than the engine's 53";
    headroom = group_bits + (scales_in ? 2 : 0);
  }
  const int terms = (p.step + p.group - 1) / p.group + 1;
  const int need = p.frac_bits + std::max(headroom, 1) + CeilLog2(terms);
  if (need > 53)
    return what + ": a step's " + std::to_string(terms) + " terms kept to F = " + std::to_string(p.frac_bits) +
           " bits need " + std::to_string(need) + " bits, more than the engine's 53";
  return "";
}

namespace {

// The GEMM on operands whose codes and block scales are already in device memory (ca, sa, cb, sb; a and b
// hold the rest and pass PlanGemm), C and out device buffers: the kernel chosen, run on `stream` and waited
// for. The plan and support checks are the caller's.
void RunEngineGemm(const GemmOperand& a, const uint8_t* ca, const float* sa, const GemmOperand& b, const uint8_t* cb,
                   const float* sb, const float* c, float* out, const qmx::detail::GemmPlan& plan,
                   const AccumModel& model, void* stream, EngineGemmStats* stats) {
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  detail::EngineGemmArgs g;
  g.m = plan.m;
  g.n = plan.n;
  g.k = plan.k;
  const FusedParams& f = model.fused;
  g.model.kind = model.kind == AccumKind::kFp32Seq      ? 1
                 : model.kind == AccumKind::kExact      ? 2
                 : model.kind == AccumKind::kBlockExact ? 3
                                                        : 0;
  g.model.kb = plan.kb;
  g.model.step = f.step;
  g.model.frac_bits = f.frac_bits;
  g.model.out_bits = f.out_bits;
  g.model.group = f.group;
  g.model.zero_exp = f.zero_exp;
  g.model.promote = f.promote;
  g.model.term_rne = f.term_round == FusedRound::kRne;
  g.model.out_rne = f.out_round == FusedRound::kRne;
  g.model.zero_operands = f.zero_operands;
  g.model.blocks = plan.a_blocks || plan.b_blocks;
  g.model.scales_in = g.model.blocks && f.scale_in_products;
  g.model.promote_separately = f.promote_scale_separately;
  const bool block_exact = model.kind == AccumKind::kBlockExact, exact = model.kind == AccumKind::kExact;
  if (block_exact || exact) {  // the tensor-core kernel's form: steps of one scale block, scales in the products
    // (exact's steps may be any length: 32, or 16 for blocks of 16)
    g.model.step = block_exact ? static_cast<int>(std::min<size_t>(plan.kb, 1u << 30)) : plan.kb % 32 == 0 ? 32 : 16;
    g.model.frac_bits = 0;
    g.model.scales_in = g.model.blocks;
  }

  std::vector<double> va, vb;
  std::vector<int> na, nb;
  CodeTables(a.elem, f.operand_emin != 0 ? f.operand_emin : qmx::detail::FormatEmin(a.elem), va, na);
  CodeTables(b.elem, f.operand_emin != 0 ? f.operand_emin : qmx::detail::FormatEmin(b.elem), vb, nb);
  DeviceBuffer<double> dva(va.data(), 256), dvb(vb.data(), 256);
  DeviceBuffer<int> dna(na.data(), 256), dnb(nb.data(), 256);
  auto operand = [](const GemmOperand& o, const uint8_t* codes, const DeviceBuffer<double>& v,
                    const DeviceBuffer<int>& nom, const float* s) {
    detail::EngineOperand e;
    e.codes = codes;
    e.rows = o.rows;
    e.cols = o.cols;
    e.values = v.get();
    e.nominal = nom.get();
    if (o.block_rows != 0) {
      e.scales = s;
      e.block_rows = o.block_rows;
      e.block_cols = o.block_cols;
      e.scale_cols = o.scale_cols;
    }
    e.scale_emin = qmx::detail::ScaleEmin(o.scale_format);
    return e;
  };
  g.a = operand(a, ca, dva, dna, sa);
  g.b = operand(b, cb, dvb, dnb, sb);
  g.c = c;
  g.out = out;

  auto upload = [](const float* p, size_t n) { return DeviceBuffer<float>(p, p ? n : 0); };
  DeviceBuffer<float> drows = upload(plan.alpha_rows, plan.m), dcols = upload(plan.alpha_cols, plan.n);
  DeviceBuffer<float> damax_rows = upload(plan.amax_rows, plan.m), damax_cols = upload(plan.amax_cols, plan.n);
  g.alpha.has = plan.has_alpha;
  g.alpha.rule = static_cast<int>(plan.rule);
  g.alpha.ta = plan.ta;
  g.alpha.tb = plan.tb;
  g.alpha.rows = plan.alpha_rows ? drows.get() : nullptr;
  g.alpha.cols = plan.alpha_cols ? dcols.get() : nullptr;
  g.alpha.amax_a = plan.amax_a;
  g.alpha.amax_b = plan.amax_b;
  g.alpha.amax_rows = plan.amax_rows ? damax_rows.get() : nullptr;
  g.alpha.amax_cols = plan.amax_cols ? damax_cols.get() : nullptr;
  g.alpha.te_factor = plan.te_factor;
  g.alpha.te_inv = plan.te_inv;

  // The FP4 kernel where it applies: E2M1 on both sides, groups of 16 in steps of 64, no promotion, scale
  // blocks along K whole groups, and a grid of at most 65,535 row tiles.
  auto whole_groups = [&](bool blocks, size_t along_k) { return !blocks || along_k % 16 == 0 || along_k >= plan.k; };
  const bool fp4 = model.kind == AccumKind::kFused && f.group == 16 && f.step == 64 && f.promote == 0 &&
                   a.elem == fmt::kE2M1 && b.elem == fmt::kE2M1 &&
                   whole_groups(plan.a_blocks, a.block_cols) && whole_groups(plan.b_blocks, b.block_rows) &&
                   (plan.m + 63) / 64 <= 65535 && plan.m < (1u << 31) && plan.n < (1u << 31) && plan.k < (1u << 31);
  // The FP64 tensor-core kernel where it applies (engine_internal.h): K > 0, single products in steps of 16 or
  // 32, no MMA-Sim zero rule, F + 8 <= 53, block scales in the products UE8M0 and whole steps along K, element
  // formats whose code 0 is zero (a partial last step's padding), a grid of at most 65,535 row tiles, and
  // mma.m16n8k4.f64 (sm_90 and later: every build's architectures, sm_90a and sm_100a).
  // block-exact takes it where its scale blocks are 16 or 32 long (MX), its steps those blocks, and exact
  // where they are whole steps.
  auto scales_fit = [&](const GemmOperand& o, bool blocks, size_t along_k) {
    return !blocks || !g.model.scales_in ||
           (o.scale_format == ScaleFormat::kUe8m0 &&
            (along_k % static_cast<size_t>(g.model.step) == 0 || along_k >= plan.k));
  };
  const bool fused_fit = model.kind == AccumKind::kFused && f.group == 1 && !f.zero_operands &&
                         (f.step == 16 || f.step == 32) && f.frac_bits + 8 <= 53;
  // exact there too, without second-level factors (its products would carry them).
  const bool block_exact_fit = (block_exact && (plan.kb == 16 || plan.kb == 32)) ||
                               (exact && !plan.has_alpha && (plan.kb % 16 == 0 || plan.kb >= plan.k));
  std::vector<detail::CodeParts> pa, pb;
  const bool dmma = !fp4 && plan.k > 0 && (fused_fit || block_exact_fit) &&
                    scales_fit(a, plan.a_blocks, a.block_cols) && scales_fit(b, plan.b_blocks, b.block_rows) &&
                    va[0] == 0 && vb[0] == 0 && (plan.m + 63) / 64 <= 65535 && Device().major >= 9 &&
                    CodePartsTable(va, na, pa) && CodePartsTable(vb, nb, pb);
  EngineGemmStats st;
  const detail::EventPair ev;  // the kernels' own time, operands already on the device
  const cudaEvent_t t0 = ev.start, t1 = ev.stop;
  const size_t step = static_cast<size_t>(std::max(1, g.model.step)), k_steps = (plan.k + step - 1) / step;
  st.steps = plan.m * plan.n * k_steps;
  // A kernel that counts its fallback steps on the device: launched between the events, the count read back.
  // counters[0]: fallback steps, [1]: outputs summed whole (exact on the tensor-core kernel).
  auto counted = [&](const char* what, auto launch) {
    DeviceBuffer<unsigned long long> counters(2);
    detail::Check(cudaMemsetAsync(counters.get(), 0, 2 * sizeof(unsigned long long), cs), "cudaMemsetAsync");
    detail::Check(cudaEventRecord(t0, cs), "cudaEventRecord");
    launch(counters.get());
    detail::Check(cudaEventRecord(t1, cs), "cudaEventRecord");
    detail::CheckLaunch(what);
    unsigned long long n[2] = {0, 0};
    counters.Download(n, 2);
    st.fallback_steps = n[0];
    st.whole_outputs = n[1];
  };
  if (fp4) {
    detail::EngineFp4Buffers fb;
    fb.steps = (plan.k + 63) / 64;
    fb.kp = fb.steps * 64;
    DeviceBuffer<uint16_t> ap(plan.m * fb.kp), bp(plan.n * fb.kp);
    DeviceBuffer<detail::Fp4StepInfo> ai(plan.m * fb.steps), bi(plan.n * fb.steps);
    fb.a_packed = ap.get();
    fb.b_packed = bp.get();
    fb.a_info = ai.get();
    fb.b_info = bi.get();
    counted("engine FP4 GEMM", [&](unsigned long long* n) {
      fb.fallback_steps = n;
      detail::LaunchEngineFp4Gemm(g, fb, stream);
    });
    st.kernel = "fp4";
  } else if (dmma) {
    detail::EngineDmmaBuffers db;
    db.steps = k_steps;
    DeviceBuffer<detail::StepInfo> ia(plan.m * db.steps), ib(plan.n * db.steps);
    DeviceBuffer<detail::CodeParts> dpa(pa.data(), 256), dpb(pb.data(), 256);
    db.a_info = ia.get();
    db.b_info = ib.get();
    db.a_parts = dpa.get();
    db.b_parts = dpb.get();
    // The hardware's FP8 -> FP16 conversion decodes E4M3 and E5M2 where the tables hold their plain values
    // (a model's own operand exponent floor changes only the nominal exponents, which the tables keep).
    auto fp8 = [](const Format& f) { return f == fmt::kE4M3 ? 1 : f == fmt::kE5M2 ? 2 : 0; };
    db.a_fp8 = fp8(a.elem);
    db.b_fp8 = fp8(b.elem);
    db.kp = k_steps * step;
    db.np = (plan.n + 63) / 64 * 64;
    // The certificate's weights for the fused models; exact's sums of squares and line bounds.
    const bool cert = !exact && !block_exact;
    DeviceBuffer<uint16_t> aw(cert ? plan.m * db.kp : 0), bw(cert ? db.kp * db.np : 0);
    DeviceBuffer<double> ass(exact ? plan.m * db.steps : 0), bss(exact ? plan.n * db.steps : 0);
    DeviceBuffer<detail::LineBound> abd(exact ? plan.m : 0), bbd(exact ? plan.n : 0);
    DeviceBuffer<uint8_t> marks(exact ? ((plan.m + 63) / 64) * ((plan.n + 63) / 64) : 0);
    db.per_step = exact ? marks.get() : nullptr;
    db.a_w = cert ? aw.get() : nullptr;
    db.b_w = cert ? bw.get() : nullptr;
    db.a_ss = exact ? ass.get() : nullptr;
    db.b_ss = exact ? bss.get() : nullptr;
    db.a_bound = exact ? abd.get() : nullptr;
    db.b_bound = exact ? bbd.get() : nullptr;
    // exact's whole sums on cuBLASLt's FP64 GEMM where the FP64 copies of A, B and D fit the device with 1 GiB to
    // spare; QMX_ENGINE_DGEMM=0 keeps them on this engine's own FP64 tensor-core kernel.
    const size_t dense_elems = plan.m * plan.k + plan.k * plan.n + plan.m * plan.n;
    const char* dgemm_env = std::getenv("QMX_ENGINE_DGEMM");
    const std::string dgemm = dgemm_env != nullptr ? dgemm_env : "1";
    if (dgemm != "0" && dgemm != "1")
      throw Error(
          "QMX_ENGINE_DGEMM is 0 (exact's whole sums on the engine's own kernel) or 1 (on cuBLASLt's FP64 "
          "GEMM where the device has room, the default), got '" +
          dgemm + "'");
    size_t free_bytes = 0, total_bytes = 0;
    const bool dense = exact && dgemm == "1" && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess &&
                       dense_elems * sizeof(double) + (size_t{1} << 30) <= free_bytes;
    DeviceBuffer<double> dense_a(dense ? plan.m * plan.k : 0), dense_b(dense ? plan.k * plan.n : 0),
        dense_d(dense ? plan.m * plan.n : 0);
    db.dense_a = dense ? dense_a.get() : nullptr;
    db.dense_b = dense ? dense_b.get() : nullptr;
    db.dense_d = dense ? dense_d.get() : nullptr;
    bool dense_used = false;
    db.dense_used = &dense_used;
    counted("engine FP64 tensor-core GEMM", [&](unsigned long long* n) {
      db.fallback_steps = n;
      db.whole_outputs = n + 1;
      detail::LaunchEngineDmmaGemm(g, db, stream);
    });
    st.kernel = dense_used ? "dgemm" : "dmma";
  } else if (model.kind == AccumKind::kFp32Seq) {
    // fp32-seq's chains on the register-tiled kernel (engine_seq.cu), from its x and y operands in FP32.
    DeviceBuffer<float> ax(plan.m * plan.k), by(plan.k * plan.n);
    detail::Check(cudaEventRecord(t0, cs), "cudaEventRecord");
    detail::LaunchEngineSeqGemm(g, ax.get(), by.get(), stream);
    detail::Check(cudaEventRecord(t1, cs), "cudaEventRecord");
    detail::CheckLaunch("engine fp32-seq GEMM");
    st.kernel = "seq";
  } else {
    detail::Check(cudaEventRecord(t0, cs), "cudaEventRecord");
    detail::LaunchEngineGemm(g, stream);
    detail::Check(cudaEventRecord(t1, cs), "cudaEventRecord");
    detail::CheckLaunch("engine GEMM");
    st.kernel = "generic";
  }
  st.kernel_seconds = ev.Seconds();
  if (stats) *stats = st;
}

}  // namespace

namespace {

// The cuBLASLt mode that is `model` on this GPU for these operands: hopper-fp8 and hopper-fp8-fast with
// per-tensor scales on a Hopper GPU, whose models were measured against cuBLASLt's own FP8 GEMM
// (CublasModeModel; gpu/README.md), run here in one pass over K (numSplitsK = 1), and the blockwise modes
// (hopper-fp8 with 1x128 by 128x128 scales, hopper-fp8-vec). QMX_ENGINE_CUBLASLT=tensorwise keeps the blockwise
// ones on the emulation kernels, =0 every one; unset (or blockwise) takes cuBLASLt for both. None elsewhere,
// or for shapes or formats cuBLASLt does not take (CublasSupport).
std::optional<CublasMode> HopperLtMode(const GemmOperand& a, const GemmOperand& b, const AccumModel& model) {
  const char* env = std::getenv("QMX_ENGINE_CUBLASLT");
  const std::string use = env != nullptr ? env : "";
  if (use != "" && use != "0" && use != "tensorwise" && use != "blockwise")
    throw Error("QMX_ENGINE_CUBLASLT is 0 (the emulation kernels only), tensorwise (cuBLASLt for per-tensor "
                "scales only) or blockwise (the default: per-tensor and blockwise), not '" + use + "'");
  if (use == "0") return std::nullopt;
  const DeviceInfo& d = Device();
  if (!d.available || d.major != 9) return std::nullopt;
  std::vector<CublasMode> modes = {CublasMode::kTensorwise, CublasMode::kTensorwiseFast};
  if (use != "tensorwise") modes.insert(modes.end(), {CublasMode::kBlockwise, CublasMode::kBlockwiseVec});
  for (CublasMode m : modes)
    if (CublasModeModel(m, d) == model.name && CublasSupport(m, a, b).empty()) return m;
  return std::nullopt;
}

// A device operand's block scales into `scales` on the host (none where it has none), queued on `stream`.
void ReadScales(const DeviceGemmOperand& d, std::vector<float>& scales, cudaStream_t stream) {
  const GemmOperand& m = d.meta;
  scales.resize(m.block_rows == 0 ? 0 : (m.rows + m.block_rows - 1) / m.block_rows * m.scale_cols);
  if (!scales.empty())
    detail::Check(cudaMemcpyAsync(scales.data(), d.scales, scales.size() * sizeof(float), cudaMemcpyDeviceToHost, stream),
                  "copy to host");
}

// The GEMM through cuBLASLt (HopperLtMode): B transposed to N x K on the device, the block scales read back to
// the host for cuBLASLt's layouts. False when cuBLASLt refuses the configuration (the caller then runs the
// emulation kernels).
bool RunHopperLt(const DeviceGemmOperand& a, const DeviceGemmOperand& b, CublasMode mode, size_t n, size_t k,
                 float* out, void* stream, EngineGemmStats* stats) {
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  GemmOperand ma = a.meta, mb = b.meta;
  ReadScales(a, ma.scales, cs);
  ReadScales(b, mb.scales, cs);
  detail::Check(cudaStreamSynchronize(cs), "engine: reading the block scales");  // cuBLASLt's layouts read them now
  DeviceBuffer<uint8_t> bt(n * k);
  detail::LaunchTransposeU8(b.codes, k, n, bt.get(), stream);
  const detail::EventPair ev;
  detail::Check(cudaEventRecord(ev.start, cs), "cudaEventRecord");
  try {
    detail::CublasLtMatmulOn(ma, mb, mode, a.codes, bt.get(), out, stream, nullptr, 1);
  } catch (const Error&) {
    detail::Check(cudaStreamSynchronize(cs), "engine cuBLASLt GEMM");
    return false;
  }
  detail::Check(cudaEventRecord(ev.stop, cs), "cudaEventRecord");
  if (stats != nullptr) {
    *stats = EngineGemmStats{};
    stats->kernel = "cublaslt";
    stats->kernel_seconds = ev.Seconds();
  }
  return true;
}

}  // namespace

std::vector<float> EngineGemm(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                              EngineGemmStats* stats) {
  {
    GemmOperand pa, pb;
    AccumModel pm;
    if (qmx::detail::SplitHmma(a, b, model, pa, pb, pm)) return EngineGemm(pa, pb, c_in, pm, stats);
  }
  const qmx::detail::GemmPlan plan = qmx::detail::PlanGemm(a, b, c_in, model);  // qmx::Gemm's checks and errors
  const std::string why = EngineGemmSupport(a, b, model);
  if (!why.empty()) throw Error("engine: " + why);
  Require("the emulation engine's GEMM");
  std::vector<float> out(plan.m * plan.n);
  if (out.empty()) return out;
  DeviceBuffer<uint8_t> da(a.codes.data(), a.codes.size()), db(b.codes.data(), b.codes.size());
  DeviceBuffer<float> dsa(a.scales.data(), a.block_rows ? a.scales.size() : 0);
  DeviceBuffer<float> dsb(b.scales.data(), b.block_rows ? b.scales.size() : 0);
  const size_t mn = plan.m * plan.n;
  DeviceBuffer<float> dc(c_in, c_in ? mn : 0), dout(mn);
  const std::optional<CublasMode> lt = c_in == nullptr ? HopperLtMode(a, b, model) : std::nullopt;
  if (lt) {
    DeviceGemmOperand oa, ob;
    oa.meta = a;
    ob.meta = b;
    for (GemmOperand* m : {&oa.meta, &ob.meta}) {
      m->codes.clear();
      m->scales.clear();
    }
    oa.codes = da.get();
    ob.codes = db.get();
    oa.scales = dsa.get();
    ob.scales = dsb.get();
    if (RunHopperLt(oa, ob, *lt, plan.n, plan.k, dout.get(), nullptr, stats)) {
      dout.Download(out.data(), mn);
      return out;
    }
  }
  RunEngineGemm(a, da.get(), dsa.get(), b, db.get(), dsb.get(), c_in ? dc.get() : nullptr, dout.get(), plan, model,
                nullptr, stats);
  dout.Download(out.data(), mn);
  return out;
}

namespace {

// QMX_ENGINE_CHECK=1: a device GEMM's operands and output copied to the host and compared with qmx::Gemm of
// the same operands, bit for bit; one line on stderr per GEMM that differs (the shape, the model, the kernel
// and the first differing output), or per GEMM with QMX_ENGINE_CHECK=all. Slow (the CPU model runs each
// product): for finding which GEMM of a model departs, not for training.
void CheckOnHost(const DeviceGemmOperand& a, const DeviceGemmOperand& b, const AccumModel& model, const float* out,
                 size_t m, size_t n, size_t k, const std::string& kernel, bool print_all, cudaStream_t stream) {
  detail::Check(cudaStreamSynchronize(stream), "engine check");
  const auto host = [](const DeviceGemmOperand& d) {
    GemmOperand h = d.meta;
    h.codes.resize(h.rows * h.cols);
    detail::Check(cudaMemcpy(h.codes.data(), d.codes, h.codes.size(), cudaMemcpyDeviceToHost), "engine check copy");
    ReadScales(d, h.scales, nullptr);
    detail::Check(cudaStreamSynchronize(nullptr), "engine check copy");
    return h;
  };
  const GemmOperand ha = host(a), hb = host(b);
  std::vector<float> got(m * n);
  detail::Check(cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost), "engine check copy");
  const std::vector<float> want = Gemm(ha, hb, nullptr, model);
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (hd::F32Bits(got[i]) != hd::F32Bits(want[i]) && differ++ == 0) first = i;
  if (differ == 0 && !print_all) return;
  std::fprintf(stderr, "qmx engine check: %zu x %zu x %zu %s %s x %s (%s): %zu of %zu outputs differ from qmx::Gemm", m, n, k,
               model.name.c_str(), ha.elem.name, hb.elem.name, kernel.c_str(), differ, got.size());
  if (differ != 0)
    std::fprintf(stderr, "; first (%zu, %zu): engine %08x (%.9g) cpu %08x (%.9g)", first / n, first % n,
                 hd::F32Bits(got[first]), static_cast<double>(got[first]), hd::F32Bits(want[first]),
                 static_cast<double>(want[first]));
  std::fprintf(stderr, "\n");
}

}  // namespace

void EngineGemmOnDevice(const DeviceGemmOperand& a, const DeviceGemmOperand& b, const AccumModel& model, float* out,
                        void* stream, EngineGemmStats* stats) {
  if (model.kind == AccumKind::kFused && model.fused.hmma_split)
    throw Error("engine: '" + model.name + "' (split=hmma) reorders K; on device operands it is not run");
  for (const DeviceGemmOperand* o : {&a, &b})
    if (!o->meta.codes.empty() || !o->meta.scales.empty())
      throw Error("engine: a device operand's meta holds no codes or scales (they are its device pointers)");
  const qmx::detail::GemmPlan plan = qmx::detail::PlanGemm(a.meta, b.meta, nullptr, model, false);
  const std::string why = EngineGemmSupport(a.meta, b.meta, model);
  if (!why.empty()) throw Error("engine: " + why);
  Require("the emulation engine's GEMM");
  if (plan.m * plan.n == 0) return;
  if (!a.codes || !b.codes || !out || (plan.a_blocks && !a.scales) || (plan.b_blocks && !b.scales))
    throw Error("engine: a device operand lacks its codes or block scales, or the output is null");
  const detail::StreamScope scope(static_cast<cudaStream_t>(stream));
  // QMX_ENGINE_TRACE=1: one line per GEMM on stderr (shape, model, kernel, its time, the exact steps).
  static const bool trace = [] {
    const char* t = std::getenv("QMX_ENGINE_TRACE");
    return t != nullptr && *t != '\0' && std::string(t) != "0";
  }();
  static const int check = [] {  // QMX_ENGINE_CHECK: 1 (print the GEMMs that differ), all (print every GEMM)
    const char* t = std::getenv("QMX_ENGINE_CHECK");
    if (t == nullptr || *t == '\0' || std::string(t) == "0") return 0;
    return std::string(t) == "all" ? 2 : 1;
  }();
  EngineGemmStats local;
  EngineGemmStats* st = stats != nullptr ? stats : trace || check ? &local : nullptr;
  bool ran = false;
  if (const std::optional<CublasMode> mode = HopperLtMode(a.meta, b.meta, model))
    ran = RunHopperLt(a, b, *mode, plan.n, plan.k, out, stream, st);
  if (!ran) RunEngineGemm(a.meta, a.codes, a.scales, b.meta, b.codes, b.scales, nullptr, out, plan, model, stream, st);
  if (trace)
    std::fprintf(stderr, "qmx engine: %zu x %zu x %zu %s %s x %s: %s %.3f ms, %llu of %llu steps exact\n", plan.m,
                 plan.n, plan.k, model.name.c_str(), a.meta.elem.name, b.meta.elem.name, st->kernel.c_str(),
                 st->kernel_seconds * 1e3, static_cast<unsigned long long>(st->fallback_steps),
                 static_cast<unsigned long long>(st->steps));
  if (check) CheckOnHost(a, b, model, out, plan.m, plan.n, plan.k, st->kernel, check == 2, static_cast<cudaStream_t>(stream));
}

}  // namespace qmx::gpu
