// cmd_bench.cc: `qmx-sim bench` times the fast kernels beside in-process baselines on the same data in
// one run, and reports medians and ratios, so results hold on a noisy machine. The suites live beside
// this file (bench_convert.cc, bench_gemm.cc); PERFORMANCE.md holds the measured tables.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/bench.h"
#include "commands.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/io.h"
#include "qmx/testing.h"
#include "qmx/version.h"

namespace qmx::cli {
namespace {

using namespace bench;

void RunBench(const BenchArgs& a) {
  if (a.suite != "all" && a.suite != "convert" && a.suite != "gemm" && a.suite != "recipe" && a.suite != "engine")
    throw Error("--suite is all, convert, gemm, recipe or engine, not '" + a.suite + "'");
  for (int t : a.threads)
    if (t < 1 || t > 1024) throw Error("--threads values must be 1..1024, not " + std::to_string(t));
  if (!a.target.empty()) ForceSimdTarget(a.target);
  nlohmann::json j;
  j["version"] = QMX_VERSION;
  j["cpu"] = CpuModel();
  j["simd_target"] = SimdTargetName();
  j["simd_targets_available"] = SimdTargets();
  if (a.suite == "all" || a.suite == "convert") RunConvertBench(a, j);
  if (a.suite == "gemm" || a.suite == "recipe" || a.suite == "engine")
    std::printf("qmx-sim bench %s: %s; SIMD target %s\n", QMX_VERSION, CpuModel().c_str(), SimdTargetName().c_str());
  if (a.suite == "all" || a.suite == "gemm") RunGemmBench(a, j);
  if (a.suite == "all" || a.suite == "recipe") RunRecipeBench(a, j);
  if (a.suite == "engine") RunEngineBench(a, j);  // not in "all": it needs a GPU
  if (!a.json.empty()) WriteFileAtomic(a.json, j.dump(2) + "\n");
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  static BenchArgs a;
  CLI::App* cmd = app.add_subcommand("bench", "Time the fast kernels beside in-process baselines (memcpy, the scalar reference, Eigen GEMM), in one run");
  cmd->add_option("--log2n", a.log2n, "Elements per kernel call, as a power of two")->capture_default_str();
  cmd->add_option("--reps", a.reps, "Timed runs per kernel (the median is reported)")->capture_default_str();
  cmd->add_option("--ref-reps", a.ref_reps, "Timed runs of the (slow) scalar reference")->capture_default_str();
  cmd->add_option("--threads", a.threads, "Thread counts to run, e.g. --threads 1 2")->capture_default_str();
  cmd->add_option("--simd-target,--target", a.target,
                  "(--target: the older spelling) Force a SIMD target (AVX3_FP16 where the CPU has AVX512-FP16, else "
                  "AVX3_VNNI where it has AVX512-VNNI, AVX3, AVX2, SSE4, SSSE3, SCALAR; default: the best)");
  cmd->add_option("--json", a.json, "Also write the results as JSON to this file");
  cmd->add_flag("--no-ref", a.no_ref, "Skip the scalar reference timings");
  cmd->add_option("--suite", a.suite,
                  "What to time: all, convert (conversion and MX quantization), gemm, recipe (one training step), or engine "
                  "(the GPU emulation engine's GEMMs beside BF16 cuBLASLt and the CPU; not part of all)")
      ->capture_default_str();
  cmd->add_option("--gemm-sizes", a.gemm_sizes, "GEMM sizes M = N = K to time")->capture_default_str();
  cmd->add_option("--gemm-reps", a.gemm_reps, "Timed runs per GEMM kernel (the median is reported)")->capture_default_str();
  cmd->add_option("--recipe-shape", a.recipe_shape, "Training recipes: m n k of the linear layer")
      ->capture_default_str();
  cmd->callback([] { RunBench(a); });
}

}  // namespace qmx::cli
