// cmd_bench.cc: `qmx-sim bench` times the fast kernels beside in-process baselines on the same data in
// one run (a memcpy of the kernel's input bytes, and the scalar reference path), and reports medians,
// effective bandwidth (bytes read + bytes written per second) and ratios, so results hold on a noisy machine.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/io.h"
#include "qmx/mx.h"

namespace qmx::cli {
namespace {

struct BenchArgs {
  int log2n = 24;
  int reps = 9;
  int ref_reps = 3;
  std::vector<int> threads = {1, 2};
  std::string target;
  std::string json;
  bool no_ref = false;
};

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      if (c != std::string::npos) return line.substr(c + 2);
    }
  }
  return "unknown";
}

double MedianSeconds(int reps, const std::function<void()>& fn) {
  fn();  // warm-up: page faults, caches, thread pool
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    const auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// memcpy of `bytes` split into fixed pieces over the OpenMP threads.
void ParallelCopy(uint8_t* dst, const uint8_t* src, size_t bytes) {
  const size_t piece = size_t{1} << 20;
  const int64_t pieces = static_cast<int64_t>((bytes + piece - 1) / piece);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < pieces; ++p) {
    const size_t off = static_cast<size_t>(p) * piece;
    std::memcpy(dst + off, src + off, std::min(piece, bytes - off));
  }
}

struct Kernel {
  std::string name;
  size_t bytes_in, bytes_out;
  std::function<void(Exec)> fast;
  std::function<void()> ref;  // one thread; empty when there is none
};

struct Row {
  std::string kernel;
  int threads;
  double seconds, memcpy_seconds, ref_seconds;
  size_t n, bytes, copy_bytes;
  double GElems() const { return n / seconds / 1e9; }
  double GBs() const { return bytes / seconds / 1e9; }
};

void RunBench(const BenchArgs& a) {
  if (a.log2n < 10 || a.log2n > 30) throw Error("--log2n must be 10..30, not " + std::to_string(a.log2n));
  if (a.reps < 1 || a.ref_reps < 1) throw Error("--reps and --ref-reps must be at least 1");
  for (int t : a.threads)
    if (t < 1 || t > 1024) throw Error("--threads values must be 1..1024, not " + std::to_string(t));
  if (!a.target.empty()) ForceSimdTarget(a.target);
  const size_t n = size_t{1} << a.log2n;

  // Data: Gaussian values with a few outliers, the shape of activations.
  std::vector<float> x(n);
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) x[i] = nd(rng) * ((i % 997) == 0 ? 50.0f : 1.0f);
  std::vector<uint16_t> xb(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    xb[i] = static_cast<uint16_t>(u >> 16);
  }
  std::vector<uint8_t> codes(n), scales(n / 16 + 1), copy_dst(4 * n);
  std::vector<float> decoded(n);

  CastOptions rne;
  CastOptions sr;
  sr.rounding = Rounding::kSrA;
  MxSpec mxfp8;  // e4m3, round-up, block 32, rne
  MxSpec mxfp4;
  mxfp4.elem = fmt::kE2M1;
  const SrSource stream{1234, 0, nullptr};
  const size_t nb = n / 32;

  std::vector<Kernel> kernels = {
      {"f32->e4m3 rne satfinite", 4 * n, n,
       [&](Exec e) { ConvertToCodes(DType::kF32, x.data(), n, fmt::kE4M3, rne, codes.data(), {}, e); },
       [&] { ConvertToCodesRef(DType::kF32, x.data(), n, fmt::kE4M3, rne, codes.data()); }},
      {"f32->e4m3 sr (philox)", 4 * n, n,
       [&](Exec e) { ConvertToCodes(DType::kF32, x.data(), n, fmt::kE4M3, sr, codes.data(), stream, e); },
       [&] { ConvertToCodesRef(DType::kF32, x.data(), n, fmt::kE4M3, sr, codes.data(), stream); }},
      {"bf16->e4m3 rne satfinite", 2 * n, n,
       [&](Exec e) { ConvertToCodes(DType::kBF16, xb.data(), n, fmt::kE4M3, rne, codes.data(), {}, e); },
       [&] { ConvertToCodesRef(DType::kBF16, xb.data(), n, fmt::kE4M3, rne, codes.data()); }},
      {"f32->e2m1 rne satfinite", 4 * n, n,
       [&](Exec e) { ConvertToCodes(DType::kF32, x.data(), n, fmt::kE2M1, rne, codes.data(), {}, e); },
       [&] { ConvertToCodesRef(DType::kF32, x.data(), n, fmt::kE2M1, rne, codes.data()); }},
      {"mxfp8 e4m3 round-up quantize", 4 * n, n + nb,
       [&](Exec e) { QuantizeMx(DType::kF32, x.data(), n, mxfp8, codes.data(), scales.data(), {}, e); },
       [&] { QuantizeMxRef(DType::kF32, x.data(), n, mxfp8, codes.data(), scales.data()); }},
      {"mxfp4 e2m1 round-up quantize", 4 * n, n + nb,
       [&](Exec e) { QuantizeMx(DType::kF32, x.data(), n, mxfp4, codes.data(), scales.data(), {}, e); },
       [&] { QuantizeMxRef(DType::kF32, x.data(), n, mxfp4, codes.data(), scales.data()); }},
      {"e4m3->f32 decode", n, 4 * n,
       [&](Exec e) { DecodeToF32(codes.data(), n, fmt::kE4M3, decoded.data(), e); }, nullptr},
  };

  const int saved_threads = omp_get_max_threads();
  std::vector<Row> rows;
  std::vector<double> ref_seconds(kernels.size(), 0.0);
  if (!a.no_ref) {
    omp_set_num_threads(1);
    for (size_t k = 0; k < kernels.size(); ++k)
      if (kernels[k].ref) ref_seconds[k] = MedianSeconds(a.ref_reps, kernels[k].ref);
  }
  for (int t : a.threads) {
    omp_set_num_threads(t);
    for (size_t k = 0; k < kernels.size(); ++k) {
      const Kernel& kn = kernels[k];
      // The baseline copies the kernel's input bytes, in the same run and thread count.
      const double mc = MedianSeconds(a.reps, [&] { ParallelCopy(copy_dst.data(), reinterpret_cast<const uint8_t*>(x.data()), kn.bytes_in); });
      const double s = MedianSeconds(a.reps, [&] { kn.fast(Exec::kParallel); });
      rows.push_back({kn.name, t, s, mc, ref_seconds[k], n, kn.bytes_in + kn.bytes_out, kn.bytes_in});
    }
  }
  omp_set_num_threads(saved_threads);

  auto find = [&](const std::string& kernel, int t) -> const Row* {
    for (const Row& r : rows)
      if (r.kernel == kernel && r.threads == t) return &r;
    return nullptr;
  };

  std::printf("qmx-sim bench %s: %s; SIMD target %s; n = 2^%d elements; median of %d runs (reference: %d)\n",
              QMX_VERSION, CpuModel().c_str(), SimdTargetName().c_str(), a.log2n, a.reps, a.ref_reps);
  std::printf("%-30s %3s %9s %8s %9s %10s %8s %9s %8s\n", "kernel", "thr", "ms", "Gelem/s", "eff GB/s", "memcpy GB/s",
              "vs memcpy", "vs ref", "vs 1thr");
  nlohmann::json j;
  j["version"] = QMX_VERSION;
  j["cpu"] = CpuModel();
  j["simd_target"] = SimdTargetName();
  j["simd_targets_available"] = SimdTargets();
  j["n"] = n;
  j["reps"] = a.reps;
  j["ref_reps"] = a.ref_reps;
  j["threads"] = a.threads;
  j["rows"] = nlohmann::json::array();
  for (const Row& r : rows) {
    const double memcpy_gbs = 2.0 * static_cast<double>(r.copy_bytes) / r.memcpy_seconds / 1e9;
    const double vs_memcpy = r.GBs() / memcpy_gbs;
    const Row* one = find(r.kernel, 1);
    // The reference ran on one thread; compare it with the fast kernel on one thread.
    const double vs_ref = (one != nullptr && r.ref_seconds > 0) ? r.ref_seconds / one->seconds : 0.0;
    const double vs_one = one != nullptr ? one->seconds / r.seconds : 0.0;
    char ref_txt[16] = "-", one_txt[16] = "-";
    if (vs_ref > 0 && r.threads == 1) std::snprintf(ref_txt, sizeof ref_txt, "%.0fx", vs_ref);
    if (one != nullptr && r.threads != 1) std::snprintf(one_txt, sizeof one_txt, "%.2fx", vs_one);
    std::printf("%-30s %3d %9.3f %8.3f %9.2f %10.2f %8.2f %9s %8s\n", r.kernel.c_str(), r.threads, r.seconds * 1e3,
                r.GElems(), r.GBs(), memcpy_gbs, vs_memcpy, ref_txt, one_txt);
    j["rows"].push_back({{"kernel", r.kernel},
                         {"threads", r.threads},
                         {"median_s", r.seconds},
                         {"gelem_per_s", r.GElems()},
                         {"effective_gb_per_s", r.GBs()},
                         {"memcpy_gb_per_s", memcpy_gbs},
                         {"ratio_vs_memcpy", vs_memcpy},
                         {"reference_1thread_s", r.ref_seconds},
                         {"speedup_vs_reference_1thread", vs_ref},
                         {"speedup_vs_1thread", vs_one}});
  }
  if (!a.json.empty()) WriteFileAtomic(a.json, j.dump(2) + "\n");
  std::printf("(effective bandwidth = bytes read + bytes written per second; memcpy copies the kernel's input bytes; "
              "'vs ref' = scalar reference on 1 thread / fast kernel on 1 thread)\n");
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  static BenchArgs a;
  CLI::App* cmd = app.add_subcommand("bench", "Time the fast kernels beside memcpy and the scalar reference, in one run");
  cmd->add_option("--log2n", a.log2n, "Elements per kernel call, as a power of two")->capture_default_str();
  cmd->add_option("--reps", a.reps, "Timed runs per kernel (the median is reported)")->capture_default_str();
  cmd->add_option("--ref-reps", a.ref_reps, "Timed runs of the (slow) scalar reference")->capture_default_str();
  cmd->add_option("--threads", a.threads, "Thread counts to run, e.g. --threads 1 2")->capture_default_str();
  cmd->add_option("--target", a.target, "Force a SIMD target (AVX3, AVX2, SSE4, SSSE3, SCALAR; default: the best)");
  cmd->add_option("--json", a.json, "Also write the results as JSON to this file");
  cmd->add_flag("--no-ref", a.no_ref, "Skip the scalar reference timings");
  cmd->callback([] { RunBench(a); });
}

}  // namespace qmx::cli
