// cmd_bench.cc: `qmx-sim bench` times the fast kernels beside in-process baselines on the same data in
// one run, and reports medians and ratios, so results hold on a noisy machine:
//   conversion / MX quantization / Hadamard transforms / error metrics: a memcpy of the kernel's input
//     bytes and the scalar reference path,
//     with effective bandwidth (bytes read + bytes written per second);
//   GEMM models: Eigen SGEMM and DGEMM (compiled for the best x86 level the CPU has) on the same sizes
//     and thread counts, in GFLOP/s (2 M N K per call), with the speed targets;
//   training recipes: one step of each beside Eigen SGEMM/DGEMM of the same three GEMMs.
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
#include <utility>
#include <vector>

#include "bench/baseline/eigen_gemm.h"
#include "commands.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/metrics.h"
#include "qmx/mx.h"
#include "qmx/recipe.h"
#include "qmx/transform.h"
#include "qmx/version.h"

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
  std::string suite = "all";
  std::vector<int> gemm_sizes = {1024, 2048};
  int gemm_reps = 3;
  std::vector<int> recipe_shape = {128, 128, 256};  // m n k
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

// Medians of two functions timed in alternation (a, b, a, b, ...), so that both see the same machine:
// on a shared VM the memory bandwidth and clock drift over seconds, and a baseline timed in its own
// block of runs moved the ratio with it.
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

// ---- GEMM ---------------------------------------------------------------------------------------

// An operand of `rows` x `cols` E4M3 or E2M1 codes from Gaussian values (round to nearest), with
// UE8M0 scales 2^-4..2^4 on blocks of 32 along K when `mx` (A: 1x32, B: 32x1).
GemmOperand BenchOperand(const Format& f, size_t rows, size_t cols, bool a_side, bool mx, std::mt19937& rng) {
  std::vector<float> x(rows * cols);
  std::normal_distribution<float> nd(0.0f, f.name == std::string("e2m1") ? 2.0f : 64.0f);
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> codes(x.size());
  ConvertToCodes(DType::kF32, x.data(), x.size(), f, CastOptions{}, codes.data());
  GemmOperand o = OperandFromCodes(f, rows, cols, codes.data());
  if (mx) {
    o.scale_format = ScaleFormat::kUe8m0;
    o.block_rows = a_side ? 1 : 32;
    o.block_cols = a_side ? 32 : 1;
    o.scale_rows = (rows + o.block_rows - 1) / o.block_rows;
    o.scale_cols = (cols + o.block_cols - 1) / o.block_cols;
    o.scales.resize(o.scale_rows * o.scale_cols);
    for (float& s : o.scales) s = std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);
  } else {
    o.tensor_scale = a_side ? 0.5f : 3.0f;
  }
  return o;
}

struct GemmCase {
  std::string name;      // what runs
  std::string model;     // accumulation model, empty for an Eigen baseline
  std::string baseline;  // "sgemm" or "dgemm": what the target compares with
  double target;         // required ratio to the baseline (0: a baseline itself)
  const Format* elem;
  bool mx;
};

struct GemmRow {
  std::string name, baseline;
  int size, threads;
  double seconds, target;
  double Gflops() const { return 2.0 * size * static_cast<double>(size) * size / seconds / 1e9; }
};

void RunGemmBench(const BenchArgs& a, nlohmann::json& j) {
  for (int s : a.gemm_sizes)
    if (s < 1 || s > 16384) throw Error("--gemm-sizes values must be 1..16384, not " + std::to_string(s));
  if (a.gemm_reps < 1) throw Error("--gemm-reps must be at least 1");
  const EigenGemm eigen = BestEigenGemm();
  const std::vector<GemmCase> cases = {
      {"eigen sgemm (" + eigen.level + ")", "", "sgemm", 0, nullptr, false},
      {"eigen dgemm (" + eigen.level + ")", "", "dgemm", 0, nullptr, false},
      {"fp32-seq mxfp8", "fp32-seq", "sgemm", 0.5, &fmt::kE4M3, true},
      {"block-exact mxfp8", "block-exact", "dgemm", 0.5, &fmt::kE4M3, true},
      {"block-exact mxfp4", "block-exact", "sgemm", 0.5, &fmt::kE2M1, true},
      {"hopper-fp8 e4m3 tensor", "hopper-fp8", "sgemm", 0.1, &fmt::kE4M3, false},
      {"exact mxfp8", "exact", "dgemm", 0.1, &fmt::kE4M3, true},
      // No target: the exact-group model (group 16) on MXFP4 operands, its ratio shown for scale.
      {"blackwell-mxf4nvf4 mxfp4", "blackwell-mxf4nvf4", "sgemm", -1, &fmt::kE2M1, true},
  };
  const int saved_threads = omp_get_max_threads();
  std::vector<GemmRow> rows;
  for (int n : a.gemm_sizes) {
    const size_t sz = static_cast<size_t>(n);
    std::mt19937 rng(7);
    std::vector<float> fa(sz * sz), fb(sz * sz), fc(sz * sz);
    std::vector<double> da(sz * sz), db(sz * sz), dc(sz * sz);
    std::normal_distribution<float> nd;
    for (size_t i = 0; i < fa.size(); ++i) {
      fa[i] = nd(rng);
      fb[i] = nd(rng);
      da[i] = fa[i];
      db[i] = fb[i];
    }
    std::vector<std::pair<GemmOperand, GemmOperand>> ops;
    for (const GemmCase& c : cases)
      ops.emplace_back(c.elem ? std::make_pair(BenchOperand(*c.elem, sz, sz, true, c.mx, rng), BenchOperand(*c.elem, sz, sz, false, c.mx, rng))
                              : std::make_pair(GemmOperand{}, GemmOperand{}));
    for (int t : a.threads) {
      omp_set_num_threads(t);
      for (size_t ci = 0; ci < cases.size(); ++ci) {
        const GemmCase& c = cases[ci];
        std::function<void()> fn;
        if (c.model.empty() && c.baseline == "sgemm") {
          fn = [&] { eigen.sgemm(fa.data(), fb.data(), fc.data(), n, n, n); };
        } else if (c.model.empty()) {
          fn = [&] { eigen.dgemm(da.data(), db.data(), dc.data(), n, n, n); };
        } else {
          const AccumModel m = AccumModelByName(c.model);
          fn = [&, m] { (void)Gemm(ops[ci].first, ops[ci].second, nullptr, m); };
        }
        rows.push_back({c.name, c.baseline, n, t, MedianSeconds(a.gemm_reps, fn), c.target});
      }
    }
  }
  omp_set_num_threads(saved_threads);

  auto base = [&](const GemmRow& r) -> double {
    for (const GemmRow& b : rows)
      if (b.target == 0 && b.baseline == r.baseline && b.size == r.size && b.threads == r.threads) return b.Gflops();
    return 0;
  };
  std::printf("\nGEMM (M = N = K; median of %d runs; Eigen %s; ratios against Eigen on the same size and threads)\n",
              a.gemm_reps, eigen.level.c_str());
  std::printf("%-34s %5s %3s %9s %8s %7s %7s %6s\n", "kernel", "size", "thr", "ms", "GFLOP/s", "ratio", "target", "");
  j["gemm"]["eigen_level"] = eigen.level;
  j["gemm"]["reps"] = a.gemm_reps;
  j["gemm"]["rows"] = nlohmann::json::array();
  int short_of = 0;
  for (const GemmRow& r : rows) {
    const double ratio = r.target != 0 ? r.Gflops() / base(r) : 0;  // target < 0: a ratio without a target
    const bool met = r.target <= 0 || ratio >= r.target;
    if (!met) ++short_of;
    char ratio_txt[32] = "-", target_txt[32] = "-";
    if (r.target != 0) std::snprintf(ratio_txt, sizeof ratio_txt, "%.2f", ratio);
    if (r.target > 0) {
      std::snprintf(target_txt, sizeof target_txt, ">=%.1f %s", r.target, r.baseline.c_str());
    }
    std::printf("%-34s %5d %3d %9.2f %8.2f %7s %7s %6s\n", r.name.c_str(), r.size, r.threads, r.seconds * 1e3, r.Gflops(),
                ratio_txt, target_txt, r.target <= 0 ? "" : (met ? "met" : "SHORT"));
    j["gemm"]["rows"].push_back({{"kernel", r.name},
                                 {"size", r.size},
                                 {"threads", r.threads},
                                 {"median_s", r.seconds},
                                 {"gflops", r.Gflops()},
                                 {"baseline", r.baseline},
                                 {"ratio", ratio},
                                 {"target", std::max(r.target, 0.0)},
                                 {"met", met}});
  }
  std::printf("(%d of the GEMM targets short)\n", short_of);
}

// One step of each training recipe (its three quantizations and GEMMs, the FP64 reference precomputed)
// beside Eigen SGEMM and DGEMM of the same three shapes, and the FP64 reference beside Eigen DGEMM.
void RunRecipeBench(const BenchArgs& a, nlohmann::json& j) {
  if (a.recipe_shape.size() != 3) throw Error("--recipe-shape takes three sizes: m n k");
  for (int v : a.recipe_shape)
    if (v < 16 || v > 8192) throw Error("--recipe-shape values must be 16..8192, not " + std::to_string(v));
  const size_t m = a.recipe_shape[0], n = a.recipe_shape[1], k = a.recipe_shape[2];
  const LayerGen gen = DefaultLayerGen();
  std::vector<float> x(m * k), w(n * k), dy(m * n);
  GenerateTensor(gen.x, 1, m, k, x.data());
  GenerateTensor(gen.w, 2, n, k, w.data());
  GenerateTensor(gen.dy, 3, m, n, dy.data());
  const LinearInputs in{x.data(), w.data(), dy.data(), m, n, k};
  const LinearReference ref = ComputeLinearReference(in);
  const EigenGemm eigen = BestEigenGemm();
  // The three GEMMs as row-major C = A * B for Eigen: Y = X W^T, dX = dY W, dW = dY^T X.
  std::vector<float> wt(k * n), dyt(n * m), c(std::max({m * n, m * k, n * k}));
  for (size_t r = 0; r < n; ++r)
    for (size_t q = 0; q < k; ++q) wt[q * n + r] = w[r * k + q];
  for (size_t r = 0; r < m; ++r)
    for (size_t q = 0; q < n; ++q) dyt[q * m + r] = dy[r * n + q];
  std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), dyd(dy.begin(), dy.end()),
      wtd(wt.begin(), wt.end()), dytd(dyt.begin(), dyt.end()), cd(c.size());
  const long M = static_cast<long>(m), N = static_cast<long>(n), K = static_cast<long>(k);
  const auto sgemm3 = [&] {
    eigen.sgemm(x.data(), wt.data(), c.data(), M, N, K);
    eigen.sgemm(dy.data(), w.data(), c.data(), M, K, N);
    eigen.sgemm(dyt.data(), x.data(), c.data(), N, K, M);
  };
  const auto dgemm3 = [&] {
    eigen.dgemm(xd.data(), wtd.data(), cd.data(), M, N, K);
    eigen.dgemm(dyd.data(), wd.data(), cd.data(), M, K, N);
    eigen.dgemm(dytd.data(), xd.data(), cd.data(), N, K, M);
  };
  const int saved_threads = omp_get_max_threads();
  std::printf("\nTraining recipes: one step (quantize X, W, dY in every orientation, FPROP + DGRAD + WGRAD) at m=%zu "
              "n=%zu k=%zu, median of %d; ratio = step time / Eigen SGEMM of the same three GEMMs (Eigen %s)\n",
              m, n, k, a.gemm_reps, eigen.level.c_str());
  std::printf("%-34s %3s %10s %10s\n", "kernel", "thr", "ms", "x sgemm");
  j["recipe"]["shape"] = {m, n, k};
  j["recipe"]["rows"] = nlohmann::json::array();
  for (int t : a.threads) {
    omp_set_num_threads(t);
    const double s_base = MedianSeconds(a.gemm_reps, sgemm3), d_base = MedianSeconds(a.gemm_reps, dgemm3);
    const double ref_s = MedianSeconds(a.gemm_reps, [&] { (void)ComputeLinearReference(in); });
    struct Entry {
      std::string name;
      double seconds;
    };
    std::vector<Entry> rows = {{"eigen sgemm x3", s_base}, {"eigen dgemm x3", d_base}, {"fp64 reference x3", ref_s}};
    for (const std::string& name : TrainingRecipeNames()) {
      const TrainingRecipe r = TrainingRecipeByName(name);
      RecipeOptions o;
      rows.push_back({"recipe " + name, MedianSeconds(a.gemm_reps, [&] {
                        RecipeState st;
                        (void)RunRecipeStep(r, in, ref, st, o);
                      })});
    }
    for (const Entry& e : rows) {
      std::printf("%-34s %3d %10.2f %10.2f\n", e.name.c_str(), t, e.seconds * 1e3, e.seconds / s_base);
      j["recipe"]["rows"].push_back({{"kernel", e.name},
                                     {"threads", t},
                                     {"median_s", e.seconds},
                                     {"ratio_vs_sgemm", e.seconds / s_base},
                                     {"ratio_vs_dgemm", e.seconds / d_base}});
    }
  }
  omp_set_num_threads(saved_threads);
}

void RunConvertBench(const BenchArgs& a, nlohmann::json& j) {
  if (a.log2n < 10 || a.log2n > 30) throw Error("--log2n must be 10..30, not " + std::to_string(a.log2n));
  if (a.reps < 1 || a.ref_reps < 1) throw Error("--reps and --ref-reps must be at least 1");
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
  std::vector<uint8_t> codes(n), scales(n / 16 + 1);
  std::vector<float> decoded(n);

  CastOptions rne;
  CastOptions sr;
  sr.rounding = Rounding::kSrA;
  MxSpec mxfp8;  // e4m3, round-up, block 32, rne
  MxSpec mxfp4;
  mxfp4.elem = fmt::kE2M1;
  const SrSource stream{1234, 0, nullptr};
  const size_t nb = n / 32;
  const size_t hcols = std::min<size_t>(n, 4096);
  const HadamardSpec h32 = ParseHadamard("hadamard:32"), h128 = ParseHadamard("hadamard:128");
  std::vector<float> x2(x);
  for (size_t i = 0; i < n; i += 3) x2[i] *= 1.0009765625f;
  volatile double sink = 0;
  // The memcpy baseline's source and destination: as many bytes as the largest kernel input (8n).
  std::vector<uint8_t> copy_src(8 * n), copy_dst(8 * n);
  std::memcpy(copy_src.data(), x.data(), 4 * n);
  std::memcpy(copy_src.data() + 4 * n, x2.data(), 4 * n);

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
      // Study kernels: transforms and metrics over the same data viewed as rows of hcols.
      {"hadamard:32 forward (f32)", 4 * n, 4 * n,
       [&](Exec e) { HadamardForward(h32, x.data(), decoded.data(), n / hcols, hcols, e); },
       [&] { HadamardForwardRef(h32, x.data(), decoded.data(), n / hcols, hcols); }},
      {"hadamard:128 forward (f32)", 4 * n, 4 * n,
       [&](Exec e) { HadamardForward(h128, x.data(), decoded.data(), n / hcols, hcols, e); },
       [&] { HadamardForwardRef(h128, x.data(), decoded.data(), n / hcols, hcols); }},
      {"error metrics (2 x f32)", 8 * n, 0,
       [&](Exec e) { sink += CompareTensors(x.data(), x2.data(), n, e).sum_sq_err; },
       [&] { sink += CompareTensorsRef(x.data(), x2.data(), n).sum_sq_err; }},
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
      // The baseline copies the kernel's input bytes, in the same run and thread count, its runs alternating
      // with the kernel's.
      const auto [mc, s] = MedianSecondsPaired(
          a.reps, [&] { ParallelCopy(copy_dst.data(), copy_src.data(), kn.bytes_in); }, [&] { kn.fast(Exec::kParallel); });
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
  std::printf("(effective bandwidth = bytes read + bytes written per second; memcpy copies the kernel's input bytes; "
              "'vs ref' = scalar reference on 1 thread / fast kernel on 1 thread)\n");
}

void RunBench(const BenchArgs& a) {
  if (a.suite != "all" && a.suite != "convert" && a.suite != "gemm" && a.suite != "recipe")
    throw Error("--suite is all, convert, gemm or recipe, not '" + a.suite + "'");
  for (int t : a.threads)
    if (t < 1 || t > 1024) throw Error("--threads values must be 1..1024, not " + std::to_string(t));
  if (!a.target.empty()) ForceSimdTarget(a.target);
  nlohmann::json j;
  j["version"] = QMX_VERSION;
  j["cpu"] = CpuModel();
  j["simd_target"] = SimdTargetName();
  j["simd_targets_available"] = SimdTargets();
  if (a.suite == "all" || a.suite == "convert") RunConvertBench(a, j);
  if (a.suite == "gemm" || a.suite == "recipe")
    std::printf("qmx-sim bench %s: %s; SIMD target %s\n", QMX_VERSION, CpuModel().c_str(), SimdTargetName().c_str());
  if (a.suite == "all" || a.suite == "gemm") RunGemmBench(a, j);
  if (a.suite == "all" || a.suite == "recipe") RunRecipeBench(a, j);
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
  cmd->add_option("--target", a.target, "Force a SIMD target (AVX3, AVX2, SSE4, SSSE3, SCALAR; default: the best)");
  cmd->add_option("--json", a.json, "Also write the results as JSON to this file");
  cmd->add_flag("--no-ref", a.no_ref, "Skip the scalar reference timings");
  cmd->add_option("--suite", a.suite,
                  "What to time: all, convert (conversion and MX quantization), gemm or recipe (one training step)")
      ->capture_default_str();
  cmd->add_option("--gemm-sizes", a.gemm_sizes, "GEMM sizes M = N = K to time")->capture_default_str();
  cmd->add_option("--gemm-reps", a.gemm_reps, "Timed runs per GEMM kernel (the median is reported)")->capture_default_str();
  cmd->add_option("--recipe-shape", a.recipe_shape, "Training recipes: m n k of the linear layer")
      ->capture_default_str();
  cmd->callback([] { RunBench(a); });
}

}  // namespace qmx::cli
