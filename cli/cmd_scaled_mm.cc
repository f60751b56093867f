// cmd_scaled_mm.cc: `qmx-sim scaled-mm`: torch._scaled_mm as an H100/H200 computes it (qmx/scaled_mm.h), from
// FP8 codes and FP32 scales in .npy files, with an optional bias and a BF16/FP16/FP32 output, and a bit-for-bit
// check against outputs collected on the GPU.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common/outputs.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/io.h"
#include "qmx/scaled_mm.h"

namespace qmx::cli {
namespace {

struct ScaledMmCliArgs {
  std::string a, b, a_format = "e4m3", b_format = "e4m3", scale_a = "1", scale_b = "1", bias, out_dtype = "float32";
  std::string out, expect, json;
  bool fast_accum = false, reference = false, quiet = false;
  int split_k = 0, max_errors = 10, threads = 0;
};

NpyArray LoadCodes(const std::string& path, const char* what) {
  NpyArray arr = ReadNpy(path);
  if (arr.shape.size() != 2 || arr.dtype != DType::kU8)
    throw Error(std::string(what) + " (" + path + ") must be a 2-D uint8 array of FP8 codes, not " +
                std::to_string(arr.shape.size()) + "-D " + DTypeName(arr.dtype));
  return arr;
}

// A scale: a number ("0.5"), or a float32 .npy of torch's shape (1 x 1, M x 1 / 1 x N, blockwise).
std::vector<float> LoadScale(const std::string& s, const char* what, size_t& rows, size_t& cols) {
  char* end = nullptr;
  const float v = std::strtof(s.c_str(), &end);
  if (!s.empty() && end == s.c_str() + s.size()) {
    rows = cols = 1;
    return {v};
  }
  NpyArray arr = ReadNpy(s);
  if (arr.dtype != DType::kF32 || arr.shape.size() > 2)
    throw Error(std::string(what) + " (" + s + ") must be a number or a float32 array of at most 2 dimensions, not " +
                std::to_string(arr.shape.size()) + "-D " + DTypeName(arr.dtype));
  rows = arr.shape.size() == 2 ? arr.shape[0] : 1;
  cols = arr.shape.empty() ? 1 : arr.shape.back();
  std::vector<float> out(arr.count());
  std::memcpy(out.data(), arr.data.data(), out.size() * 4);
  return out;
}

// The bias as bits of the output type: uint16 bits, bf16 (|V2) or float16 arrays of that type.
std::vector<uint16_t> LoadBias(const std::string& path, ScaledMmOut out, size_t n) {
  NpyArray arr = ReadNpy(path);
  const bool bits = arr.dtype == DType::kU16 || (arr.dtype == DType::kBF16 && out == ScaledMmOut::kBF16) ||
                    (arr.dtype == DType::kF16 && out == ScaledMmOut::kF16);
  if (!bits)
    throw Error("--bias (" + path + ") must hold " + ScaledMmOutName(out) + " values (the output's type, as torch "
                "requires): " + (out == ScaledMmOut::kBF16 ? "bf16 (|V2)" : "float16") + " or uint16 bits, not " +
                DTypeName(arr.dtype));
  if (arr.count() != n || arr.shape.size() != 1)
    throw Error("--bias (" + path + ") must be a 1-D array of N = " + std::to_string(n) + " values");
  std::vector<uint16_t> v(n);
  std::memcpy(v.data(), arr.data.data(), n * 2);
  return v;
}

void Run(const ScaledMmCliArgs& g) {
  CheckOutputs({{"--out", g.out}, {"--json", g.json}}, {g.a, g.b, g.scale_a, g.scale_b, g.bias, g.expect});
  if (g.threads > 0) omp_set_num_threads(g.threads);
  const NpyArray a = LoadCodes(g.a, "A"), b = LoadCodes(g.b, "B");
  ScaledMmArgs x;
  x.a_format = GetFormat(g.a_format);
  x.b_format = GetFormat(g.b_format);
  x.m = a.shape[0];
  x.k = a.shape[1];
  x.n = b.shape[1];
  if (b.shape[0] != x.k)
    throw Error("A (" + g.a + ") is " + std::to_string(x.m) + "x" + std::to_string(x.k) + " but B (" + g.b + ") has " +
                std::to_string(b.shape[0]) + " rows");
  if (x.k == 0) throw Error("K is 0: a product over an empty K is refused");
  x.a = a.data.data();
  x.b = b.data.data();
  const std::vector<float> sa = LoadScale(g.scale_a, "--scale-a", x.scale_a_rows, x.scale_a_cols);
  const std::vector<float> sb = LoadScale(g.scale_b, "--scale-b", x.scale_b_rows, x.scale_b_cols);
  x.scale_a = sa.data();
  x.scale_b = sb.data();
  x.out = ParseScaledMmOut(g.out_dtype);
  std::vector<uint16_t> bias;
  if (!g.bias.empty()) {
    if (x.out == ScaledMmOut::kF32)
      throw Error("--bias needs --out-dtype bfloat16 or float16 (torch: bias is not supported with float32 output)");
    bias = LoadBias(g.bias, x.out, x.n);
    x.bias = bias.data();
  }
  x.fast_accum = g.fast_accum;
  x.split_k = g.split_k;
  x.reference = g.reference;
  const auto t0 = std::chrono::steady_clock::now();
  const ScaledMmResult r = ScaledMm(x);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const DType out_type = x.out == ScaledMmOut::kF32 ? DType::kF32 : x.out == ScaledMmOut::kBF16 ? DType::kBF16 : DType::kF16;
  const size_t width = DTypeSize(out_type);
  if (!g.quiet)
    std::printf("D = scaled_mm(A %zux%zu %s, B %zux%zu %s), %s scales, %s, split-K %d, %s output%s\n  %.3f s\n", x.m,
                x.k, x.a_format.name, x.k, x.n, x.b_format.name, r.scaling.c_str(), r.model.c_str(), r.split_k,
                ScaledMmOutName(x.out), x.bias ? " + bias" : "", secs);
  nlohmann::ordered_json js;
  js["m"] = x.m;
  js["n"] = x.n;
  js["k"] = x.k;
  js["scaling"] = r.scaling;
  js["model"] = r.model;
  js["split_k"] = r.split_k;
  js["out_dtype"] = ScaledMmOutName(x.out);
  js["seconds"] = secs;
  AtomicFileSet outputs;  // D and the JSON, both or neither
  if (!g.out.empty()) {
    NpyArray o;
    o.dtype = out_type;
    o.shape = {x.m, x.n};
    o.data.resize(r.bits.size() * width);
    for (size_t i = 0; i < r.bits.size(); ++i) std::memcpy(o.data.data() + i * width, &r.bits[i], width);
    const std::vector<uint8_t> bytes = SerializeNpy(o);
    outputs.Add(g.out, bytes.data(), bytes.size());
  }
  size_t mismatches = 0;
  if (!g.expect.empty()) {
    NpyArray e = ReadNpy(g.expect);
    const bool same_type = e.dtype == out_type || (e.dtype == DType::kU16 && width == 2);
    if (!same_type || e.shape.size() != 2 || e.shape[0] != x.m || e.shape[1] != x.n)
      throw Error("expected D (" + g.expect + ") must be " + ScaledMmOutName(x.out) + (width == 2 ? " (or uint16 bits) " : " ") +
                  std::to_string(x.m) + "x" + std::to_string(x.n));
    for (size_t i = 0; i < r.bits.size(); ++i) {
      uint32_t want = 0;
      std::memcpy(&want, e.data.data() + i * width, width);
      if (want == r.bits[i]) continue;
      if (mismatches < static_cast<size_t>(g.max_errors))
        std::printf("  mismatch at (%zu, %zu): model %0*x, expected %0*x\n", i / x.n, i % x.n, static_cast<int>(2 * width),
                    r.bits[i], static_cast<int>(2 * width), want);
      ++mismatches;
    }
    std::printf("  expected %s: %zu of %zu outputs differ\n", g.expect.c_str(), mismatches, r.bits.size());
    js["expected"] = g.expect;
    js["mismatches"] = mismatches;
  }
  if (!g.json.empty()) outputs.Add(g.json, js.dump(2) + "\n");
  outputs.Commit();
  if (mismatches) throw Error("scaled_mm does not reproduce " + g.expect);
}

}  // namespace

void AddScaledMmCommand(CLI::App& app) {
  auto g = std::make_shared<ScaledMmCliArgs>();
  CLI::App* cmd = app.add_subcommand("scaled-mm", "torch._scaled_mm as an H100/H200 computes it (cuBLASLt on sm_90)");
  cmd->add_option("--a", g->a, "A: M x K uint8 FP8 codes (.npy)")->required();
  cmd->add_option("--b", g->b, "B: K x N uint8 FP8 codes (.npy)")->required();
  cmd->add_option("--a-format", g->a_format, "A's format: e4m3 (default) or e5m2");
  cmd->add_option("--b-format", g->b_format, "B's format: e4m3 (default) or e5m2");
  cmd->add_option("--scale-a", g->scale_a, "A's FP32 scale: a number (per tensor, default 1) or a float32 .npy, "
                                           "M x 1 (row-wise) or M x ceil(K/128) (1x128 blocks)");
  cmd->add_option("--scale-b", g->scale_b, "B's FP32 scale: a number or a float32 .npy, 1 x N (row-wise), "
                                           "ceil(K/128) x ceil(N/128) or ceil(K/128) x N (blockwise)");
  cmd->add_option("--bias", g->bias, "N bias values (.npy) in the output's type: bf16 (|V2) / float16, or uint16 bits");
  cmd->add_option("--out-dtype", g->out_dtype, "float32 (default), bfloat16 or float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16", "f32", "fp32", "bf16", "f16", "fp16", "half"}));
  cmd->add_flag("--fast-accum", g->fast_accum, "use_fast_accum=True (hopper-fp8-fast)");
  cmd->add_option("--split-k", g->split_k, "cuBLASLt's numSplitsK (default: the H200's measured choice for the shape)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--out", g->out, "write D (.npy: float32, float16, or bf16 as |V2)");
  cmd->add_option("--expect", g->expect, "compare D bit for bit with this .npy (exit 1 on a mismatch)");
  cmd->add_option("--max-errors", g->max_errors, "mismatches printed (default 10)")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--json", g->json, "write a JSON summary");
  cmd->add_option("--threads", g->threads, "OpenMP threads (default: all)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--reference", g->reference, "accumulate with the scalar reference path");
  cmd->add_flag("--quiet", g->quiet, "print only mismatches");
  cmd->callback([g] { Run(*g); });
}

}  // namespace qmx::cli
