// cmd_gemm.cc: `qmx-sim gemm`: D = A * B (+ C) under an accumulation model, from element codes and scales
// in .npy files (or FP32 matrices quantized with a recipe), with a bit-for-bit check against expected
// outputs (hardware results) and error statistics against another model.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common/tensor_inputs.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/host_device.h"
#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/round.h"
#if defined(QMX_HAVE_CUDA)
#include "qmx/gpu.h"
#endif

namespace qmx::cli {
namespace {

struct GemmArgs {
  std::string a, b, a_format = "e4m3", b_format = "e4m3", a_scales, b_scales, scale_format, a_block, b_block;
  int block = 0;
  float a_tensor_scale = 1, b_tensor_scale = 1;
  float a_amax = -1, b_amax = -1, nvfp4_bound = 448;
  std::string alpha = "decode";
  std::string c, model = "exact", out, expect, compare, quantize, json;
  int promote = -1;
  int max_errors = 10;
  bool reference = false, quiet = false;
  std::string device = "cpu";
  int repeat = 1;
  int threads = 0;
};

NpyArray Load(const std::string& path, const char* what) {
  NpyArray arr = ReadNpy(path);
  if (arr.shape.size() != 2)
    throw Error(std::string(what) + " (" + path + ") must be a 2-D array, it has " + std::to_string(arr.shape.size()) +
                " dimensions");
  return arr;
}

// "1x32", "128x128".
void ParseExtent(const std::string& s, const char* opt, size_t& r, size_t& c) {
  const size_t x = s.find('x');
  auto num = [&](const std::string& t) -> size_t {
    if (t.empty() || t.size() > 7 || t.find_first_not_of("0123456789") != std::string::npos || std::stoul(t) == 0)
      throw Error(std::string(opt) + " must look like 1x32 or 128x128, not '" + s + "'");
    return std::stoul(t);
  };
  if (x == std::string::npos) throw Error(std::string(opt) + " must look like 1x32 or 128x128, not '" + s + "'");
  r = num(s.substr(0, x));
  c = num(s.substr(x + 1));
}

// Scales from .npy: uint8 codes (UE8M0, or with --scale-format e4m3 or any format of 8 bits or fewer) or
// float32 values.
void AttachScales(GemmOperand& o, const std::string& path, const std::string& fmt, size_t br, size_t bc, const char* side) {
  NpyArray s = Load(path, side);
  const size_t sr = (o.rows + br - 1) / br, sc = (o.cols + bc - 1) / bc;
  if (s.shape[0] != sr || s.shape[1] != sc)
    throw Error(std::string(side) + " scales (" + path + ") are " + std::to_string(s.shape[0]) + "x" + std::to_string(s.shape[1]) +
                "; a " + std::to_string(o.rows) + "x" + std::to_string(o.cols) + " operand with " + std::to_string(br) + "x" +
                std::to_string(bc) + " blocks needs " + std::to_string(sr) + "x" + std::to_string(sc));
  std::vector<uint32_t> raw(sr * sc);
  BlockScaleFormat sf;
  if (s.dtype == DType::kF32) {
    if (!fmt.empty() && fmt != "fp32") throw Error(std::string(side) + " scales are float32 but --scale-format is " + fmt);
    sf = ParseBlockScaleFormat("fp32");
    std::memcpy(raw.data(), s.data.data(), raw.size() * 4);
  } else if (s.dtype == DType::kU8) {
    sf = ParseBlockScaleFormat(fmt.empty() ? "ue8m0" : fmt);
    if (sf.kind == ScaleFormat::kFp32)
      throw Error(std::string(side) + " scales are uint8 codes: --scale-format must be a format of 8 bits or fewer, not fp32");
    for (size_t i = 0; i < raw.size(); ++i) raw[i] = s.data[i];
  } else {
    throw Error(std::string(side) + " scales (" + path + ") must be uint8 codes or float32, not " + DTypeName(s.dtype));
  }
  SetBlockScales(o, sf, br, bc, raw.data());
}

GemmOperand LoadOperand(const GemmArgs& g, bool is_a) {
  const std::string& path = is_a ? g.a : g.b;
  const char* side = is_a ? "A" : "B";
  NpyArray arr = Load(path, side);
  // K = 0 makes D equal C (or zeros) under every model: nothing is modelled, and two empty files would
  // otherwise ask for an M x N output of any size.
  if (arr.shape[is_a ? 1 : 0] == 0)
    throw Error(std::string(side) + " (" + path + ") is " + std::to_string(arr.shape[0]) + "x" + std::to_string(arr.shape[1]) +
                ": K is 0, and a product over an empty K is refused (D would be C or zeros under every model)");
  if (!g.quantize.empty()) {
    if (arr.dtype != DType::kF32) throw Error(std::string(side) + " must be float32 with --quantize, it is " + DTypeName(arr.dtype));
    QuantSpec spec = QuantSpecByName(g.quantize);
    // A is quantized along its rows (K), B along its columns (K), as training frameworks do.
    if (!is_a) spec.axis = spec.axis == Axis::kRow ? Axis::kCol : Axis::kRow;
    TensorView v{DType::kF32, arr.data.data(), arr.shape[0], arr.shape[1]};
    const QuantizedTensor q = Quantize(v, spec);
    return OperandFromQuantized(q);
  }
  if (arr.dtype != DType::kU8)
    throw Error(std::string(side) + " (" + path + ") must hold uint8 element codes (or float32 with --quantize), not " +
                DTypeName(arr.dtype));
  GemmOperand o = OperandFromCodes(GetFormat(is_a ? g.a_format : g.b_format), arr.shape[0], arr.shape[1], arr.data.data());
  const std::string& scales = is_a ? g.a_scales : g.b_scales;
  if (!scales.empty()) {
    size_t br = 0, bc = 0;
    const std::string& ext = is_a ? g.a_block : g.b_block;
    if (!ext.empty()) ParseExtent(ext, is_a ? "--a-block" : "--b-block", br, bc);
    else if (g.block > 0) { br = is_a ? 1 : g.block; bc = is_a ? g.block : 1; }
    else throw Error(std::string("--") + (is_a ? "a" : "b") + "-scales needs --block N or --" + (is_a ? "a" : "b") + "-block RxC");
    AttachScales(o, scales, g.scale_format, br, bc, side);
  }
  o.tensor_scale = is_a ? g.a_tensor_scale : g.b_tensor_scale;
  o.te_alpha.amax = is_a ? g.a_amax : g.b_amax;
  o.te_alpha.bound = g.nvfp4_bound;
  return o;
}

// D's FP16 pattern for the models that accumulate in FP16 (D holds FP16 values, so the conversion is exact;
// the models' canonical NaN becomes CUDA's and MMA-Sim's 0x7FFF).
uint16_t Fp16Bits(float v) {
  CastOptions o;
  o.saturation = Saturation::kNoSat;
  o.nan_payload = NanPayload::kAllOnes;
  return static_cast<uint16_t>(ConvertF32(v, fmt::kFP16, o));
}

void Run(const GemmArgs& g) {
  if (g.threads < 0 || g.threads > 1024) throw Error("--threads must be 1..1024");
  CheckOutputs({{"--out", g.out}, {"--json", g.json}}, {g.a, g.b, g.a_scales, g.b_scales, g.c, g.expect});
  if (g.block > 0 && g.a_scales.empty() && g.b_scales.empty())
    throw Error("--block sets the block of --a-scales / --b-scales, and neither is given (--quantize takes its recipe's blocks)");
  if (g.threads > 0) omp_set_num_threads(g.threads);
  AccumModel model = AccumModelByName(g.model);
  model.alpha = ParseAlphaRule(g.alpha);
  const bool amax_given = g.a_amax >= 0 || g.b_amax >= 0;
  if (amax_given && !g.quantize.empty())
    throw Error("--a-amax / --b-amax give raw codes their NVFP4 amax; --quantize measures it");
  if (amax_given && model.alpha == AlphaRule::kDecode)
    throw Error("--a-amax / --b-amax serve --alpha te or te-ref (the decode rule multiplies the tensor scales)");
  if (g.nvfp4_bound != 448 && !amax_given) throw Error("--nvfp4-bound goes with --a-amax / --b-amax");
  if (g.promote >= 0) {
    if (model.kind != AccumKind::kFused) throw Error("--promote applies to fused models, not " + model.name);
    model.fused.promote = g.promote;
    model.name += "/promote=" + std::to_string(g.promote);
    ValidateAccumModel(model);
  }
  const GemmOperand A = LoadOperand(g, true), B = LoadOperand(g, false);
  const bool acc16 = model.kind == AccumKind::kFused && model.fused.acc_fp16;  // C and D in FP16
  std::vector<float> c;
  if (!g.c.empty()) {
    NpyArray arr = Load(g.c, "C");
    const bool f16 = arr.dtype == DType::kF16;
    if ((arr.dtype != DType::kF32 && !f16) || arr.shape.size() != 2 || arr.shape[0] != A.rows || arr.shape[1] != B.cols)
      throw Error("C (" + g.c + ") must be float32" + std::string(acc16 ? " or float16 " : " ") + std::to_string(A.rows) +
                  "x" + std::to_string(B.cols));
    if (f16 && !acc16)
      throw Error("C (" + g.c + ") is float16; model " + model.name + " accumulates in FP32 and takes float32 C");
    c.resize(A.rows * B.cols);
    if (f16) {
      for (size_t i = 0; i < c.size(); ++i) c[i] = SourceValueF32(DType::kF16, arr.data.data(), i);
    } else {
      std::memcpy(c.data(), arr.data.data(), c.size() * 4);
    }
  }
  const float* cp = c.empty() ? nullptr : c.data();
  std::vector<float> d;
  std::string engine_kernel;  // --device cuda: which engine kernel ran, and its time without the copies
  double kernel_secs = 0;
  double secs = 0;  // the fastest of --repeat runs (each from host operands to host output)
  for (int run = 0; run < g.repeat; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    if (g.device == "cuda") {
#if defined(QMX_HAVE_CUDA)
      if (g.reference) throw Error("--reference is the CPU's scalar path; it does not go with --device cuda");
      gpu::EngineGemmStats stats;
      d = gpu::EngineGemm(A, B, cp, model, &stats);
      engine_kernel = stats.kernel;
      kernel_secs = run == 0 ? stats.kernel_seconds : std::min(kernel_secs, stats.kernel_seconds);
#else
      throw Error("--device cuda: this qmx-sim was built without the CUDA backend (gpu/README.md)");
#endif
    } else {
      d = g.reference ? GemmRef(A, B, cp, model) : Gemm(A, B, cp, model);
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    secs = run == 0 ? t : std::min(secs, t);
  }
  nlohmann::ordered_json js;
  js["model"] = DescribeModel(model);
  js["m"] = A.rows;
  js["n"] = B.cols;
  js["k"] = A.cols;
  js["device"] = g.device;
  if (!engine_kernel.empty()) {
    js["engine_kernel"] = engine_kernel;
    js["kernel_seconds"] = kernel_secs;
  }
  js["seconds"] = secs;
  if (!g.quiet)
    std::printf("D = A (%zux%zu %s) * B (%zux%zu %s)%s under %s\n  %.3f s, %.2f GFLOP/s (%s)\n", A.rows, A.cols, A.elem.name,
                B.rows, B.cols, B.elem.name, cp ? " + C" : "", DescribeModel(model).c_str(), secs,
                2.0 * A.rows * B.cols * A.cols / secs / 1e9,
                engine_kernel.empty() ? g.device.c_str()
                                      : ("cuda, " + engine_kernel + " kernel " + std::to_string(kernel_secs) + " s, " +
                                         std::to_string(2.0 * A.rows * B.cols * A.cols / kernel_secs / 1e12) + " TFLOP/s")
                                            .c_str());
  AtomicFileSet outputs;  // D and the JSON, both or neither
  if (!g.out.empty()) {
    NpyArray o;
    o.dtype = acc16 ? DType::kF16 : DType::kF32;
    o.shape = {A.rows, B.cols};
    if (acc16) {
      o.data.resize(d.size() * 2);
      for (size_t i = 0; i < d.size(); ++i) {
        const uint16_t h = Fp16Bits(d[i]);
        std::memcpy(o.data.data() + 2 * i, &h, 2);
      }
    } else {
      o.data.resize(d.size() * 4);
      std::memcpy(o.data.data(), d.data(), o.data.size());
    }
    const std::vector<uint8_t> bytes = SerializeNpy(o);
    outputs.Add(g.out, bytes.data(), bytes.size());
  }
  int rc = 0;
  if (!g.expect.empty()) {
    NpyArray e = Load(g.expect, "expected D");
    const DType want = acc16 ? DType::kF16 : DType::kF32;
    if (e.dtype != want || e.shape.size() != 2 || e.shape[0] != A.rows || e.shape[1] != B.cols)
      throw Error("expected D (" + g.expect + ") must be " + (acc16 ? "float16 " : "float32 ") + std::to_string(A.rows) +
                  "x" + std::to_string(B.cols) + (acc16 ? " (model " + model.name + " accumulates in FP16)" : ""));
    size_t mismatches = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      float x;
      if (acc16) x = SourceValueF32(DType::kF16, e.data.data(), i);
      else std::memcpy(&x, e.data.data() + 4 * i, 4);
      const bool same = hd::F32Bits(x) == hd::F32Bits(d[i]) || (std::isnan(x) && std::isnan(d[i]));
      if (!same) {
        if (mismatches < static_cast<size_t>(g.max_errors))
          std::printf("  mismatch at (%zu, %zu): model %08x (%.9g), expected %08x (%.9g)\n", i / B.cols, i % B.cols,
                      hd::F32Bits(d[i]), d[i], hd::F32Bits(x), x);
        ++mismatches;
      }
    }
    std::printf("  expected %s: %zu of %zu outputs differ\n", g.expect.c_str(), mismatches, d.size());
    js["expected"] = g.expect;
    js["mismatches"] = mismatches;
    js["outputs"] = d.size();
    if (mismatches) rc = 1;
  }
  if (!g.compare.empty()) {
    AccumModel other = AccumModelByName(g.compare);
    other.alpha = model.alpha;
    const std::vector<float> r = Gemm(A, B, cp, other);
    double max_abs = 0, max_rel = 0, sum_sq = 0, sum_ref_sq = 0;
    size_t differ = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      const double diff = static_cast<double>(d[i]) - r[i];
      if (hd::F32Bits(d[i]) != hd::F32Bits(r[i])) ++differ;
      if (!std::isfinite(diff)) continue;
      max_abs = std::max(max_abs, std::fabs(diff));
      if (r[i] != 0) max_rel = std::max(max_rel, std::fabs(diff / r[i]));
      sum_sq += diff * diff;
      sum_ref_sq += static_cast<double>(r[i]) * r[i];
    }
    const double rmse = std::sqrt(sum_sq / std::max<size_t>(1, d.size()));
    std::printf("  against %s: %zu of %zu outputs differ; max abs %.3g, max rel %.3g, RMSE %.3g, relative RMS %.3g\n",
                other.name.c_str(), differ, d.size(), max_abs, max_rel, rmse,
                sum_ref_sq > 0 ? std::sqrt(sum_sq / sum_ref_sq) : 0.0);
    js["compare"] = {{"model", other.name}, {"differ", differ}, {"max_abs", max_abs}, {"max_rel", max_rel}, {"rmse", rmse}};
  }
  if (!g.json.empty()) outputs.Add(g.json, js.dump(2) + "\n");
  outputs.Commit();
  if (rc) throw Error("model " + model.name + " does not reproduce " + g.expect);
}

}  // namespace

void AddGemmCommand(CLI::App& app) {
  auto g = std::make_shared<GemmArgs>();
  CLI::App* cmd = app.add_subcommand("gemm", "D = A * B (+ C) under a tensor-core accumulation model");
  cmd->add_option("--a", g->a, "A: M x K uint8 element codes (.npy), or float32 with --quantize")->required();
  cmd->add_option("--b", g->b, "B: K x N uint8 element codes (.npy), or float32 with --quantize")->required();
  cmd->add_option("--a-format", g->a_format, "A's element format (default e4m3)");
  cmd->add_option("--b-format", g->b_format, "B's element format (default e4m3)");
  cmd->add_option("--a-scales", g->a_scales, "A's block scales (.npy): uint8 codes or float32, (M/br) x (K/bc)");
  cmd->add_option("--b-scales", g->b_scales, "B's block scales (.npy): (K/br) x (N/bc)");
  cmd->add_option("--scale-format", g->scale_format,
                  "uint8 scales are ue8m0 (default), e4m3 (read as UE4M3) or codes of any format of 8 bits or fewer "
                  "(ue4m3, ue5m3 for AMD gfx1250's E5M3, ...)");
  cmd->add_option("--block", g->block, "scale block length along K: A 1xN, B Nx1")->check(CLI::Range(1, 65536));
  cmd->add_option("--a-block", g->a_block, "A's scale block RxC (e.g. 1x128)");
  cmd->add_option("--b-block", g->b_block, "B's scale block RxC (e.g. 128x128)");
  cmd->add_option("--a-tensor-scale", g->a_tensor_scale, "per-tensor FP32 factor of A, applied after accumulation");
  cmd->add_option("--b-tensor-scale", g->b_tensor_scale, "per-tensor FP32 factor of B");
  cmd->add_option("--alpha", g->alpha,
                  "how alpha (the factor after accumulation) is formed: decode (tensor_scale_a * tensor_scale_b, "
                  "default), te (Transformer Engine's cuBLASLt NVFP4 alpha from the amax), te-ref (TE's reference GEMM)")
      ->check(CLI::IsMember({"decode", "te", "te-ref"}));
  cmd->add_option("--a-amax", g->a_amax, "A's NVFP4 tensor amax, for --alpha te/te-ref with raw codes")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--b-amax", g->b_amax, "B's NVFP4 tensor amax")->check(CLI::NonNegativeNumber);
  cmd->add_option("--nvfp4-bound", g->nvfp4_bound, "the E4M3 bound of the raw operands' NVFP4 rule: 448 (default) "
                  "or 256 (TE's 4over6)")->check(CLI::IsMember({448.0f, 256.0f}));
  cmd->add_option("--quantize", g->quantize, "quantize float32 A (row-wise) and B (column-wise) with this recipe");
  cmd->add_option("--c", g->c, "C: M x N float32, the accumulator's starting value (float16 for models that accumulate in FP16)");
  cmd->add_option("--model", g->model,
                  "accumulation model: exact, fp32-seq, block-exact, hopper-fp8, hopper-fp8-fast, "
                  "ada-fp8, blackwell-mxf8f6f4, blackwell-mxf4nvf4, ada-mma-fp8(-f16), hopper-wgmma-fp8-f16, "
                  "rtx-blackwell-f8f6f4(-f16), rtx-blackwell-mxf8f6f4, rtx-blackwell-mxf4nvf4, cdna3-fp8, "
                  "cdna4-mx(-32x32), fused:KEY=V,... "
                  "(docs/gemm.md lists them all)");
  cmd->add_option("--promote", g->promote, "override the model's FP32 promotion interval (K elements; 0 = never)")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--out", g->out, "write D (float32 .npy; float16 for models that accumulate in FP16)");
  cmd->add_option("--expect", g->expect, "compare D bit for bit with this float32 .npy (float16 for models that accumulate in FP16; exit 1 on a mismatch)");
  cmd->add_option("--max-errors", g->max_errors, "mismatches printed (default 10)");
  cmd->add_option("--compare", g->compare, "print error statistics against another model");
  cmd->add_option("--json", g->json, "write a JSON summary");
  cmd->add_option("--threads", g->threads, "OpenMP threads (default: all)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--reference", g->reference, "use the scalar reference path");
  cmd->add_option("--repeat", g->repeat, "run the product this many times and report the fastest (default 1)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--device", g->device, "cpu (default) or cuda: the emulation engine's kernels on the GPU, the same bits "
                  "(fused models and fp32-seq)")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--quiet", g->quiet, "print only mismatches and comparisons");
  cmd->callback([g] { Run(*g); });
}

}  // namespace qmx::cli
