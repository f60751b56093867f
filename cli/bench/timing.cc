// timing.cc: the timers and the memcpy baseline of `qmx-sim bench` (bench.h).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>

#include "bench/bench.h"

namespace qmx::cli::bench {

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

std::pair<double, double> MedianSecondsPaired(int reps, const std::function<void()>& fa, const std::function<void()>& fb) {
  fa();  // warm-up, as in MedianSeconds
  fb();
  std::vector<double> ta, tb;
  const auto time = [](const std::function<void()>& fn) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  };
  for (int r = 0; r < reps; ++r) {
    ta.push_back(time(fa));
    tb.push_back(time(fb));
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

void ParallelCopy(uint8_t* dst, const uint8_t* src, size_t bytes) {
  const size_t piece = size_t{1} << 20;
  const int64_t pieces = static_cast<int64_t>((bytes + piece - 1) / piece);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < pieces; ++p) {
    const size_t off = static_cast<size_t>(p) * piece;
    std::memcpy(dst + off, src + off, std::min(piece, bytes - off));
  }
}

}  // namespace qmx::cli::bench
