// bench.h: the pieces of `qmx-sim bench` its suites share: the options, the timers (medians of repeated
// runs, alternating with a baseline where the two must see the same machine) and the memcpy baseline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace qmx::cli::bench {

struct BenchArgs {
  int log2n = 24;
  int reps = 9;
  int ref_reps = 3;
  std::vector<int> threads = {1, 2};
  std::string target;
  std::string json;
  bool no_ref = false;
  std::string suite = "all";
  std::vector<int> gemm_sizes = {1024, 2048};
  int gemm_reps = 3;
  std::vector<int> recipe_shape = {128, 128, 256};  // m n k
};

std::string CpuModel();
// The median of `reps` timed runs of fn after one untimed warm-up run.
double MedianSeconds(int reps, const std::function<void()>& fn);
// Medians of two functions timed in alternation (a, b, a, b, ...), so that both see the same machine:
// on a shared VM the memory bandwidth and clock drift over seconds, and a baseline timed in its own
// block of runs moved the ratio with it.
std::pair<double, double> MedianSecondsPaired(int reps, const std::function<void()>& fa, const std::function<void()>& fb);
// memcpy of `bytes` split into fixed pieces over the OpenMP threads.
void ParallelCopy(uint8_t* dst, const uint8_t* src, size_t bytes);

// The suites; each prints its table and adds its rows to j.
void RunConvertBench(const BenchArgs& a, nlohmann::json& j);  // conversion, MX, Hadamard, metrics
void RunGemmBench(const BenchArgs& a, nlohmann::json& j);     // GEMM models beside Eigen SGEMM/DGEMM
void RunRecipeBench(const BenchArgs& a, nlohmann::json& j);   // one training step per recipe
void RunEngineBench(const BenchArgs& a, nlohmann::json& j);   // the GPU emulation engine (bench_engine.cc)

}  // namespace qmx::cli::bench
