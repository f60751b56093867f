// bench_gemm.cc: `qmx-sim bench --suite gemm|recipe`: the GEMM models beside Eigen SGEMM and DGEMM
// (compiled for the best x86 level the CPU has) on the same sizes and thread counts, in GFLOP/s
// (2 M N K per call); one step of each training recipe beside Eigen GEMMs of the same three shapes.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/baseline/eigen_gemm.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/recipe.h"

namespace qmx::cli::bench {
namespace {

// ---- GEMM ---------------------------------------------------------------------------------------

enum class BenchScales { kTensor, kMx, kNvfp4 };

// An operand of `rows` x `cols` E4M3 or E2M1 codes from Gaussian values (round to nearest), with
// UE8M0 scales 2^-4..2^4 on blocks of 32 along K (MX: A 1x32, B 32x1), E4M3 scales 0.5..448 on blocks
// of 16 (NVFP4: A 1x16, B 16x1) or a per-tensor scale.
GemmOperand BenchOperand(const Format& f, size_t rows, size_t cols, bool a_side, BenchScales kind, std::mt19937& rng,
                         float sigma = 0) {
  std::vector<float> x(rows * cols);
  std::normal_distribution<float> nd(0.0f, sigma > 0 ? sigma : f.name == std::string("e2m1") ? 2.0f : 64.0f);
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> codes(x.size());
  ConvertToCodes(DType::kF32, x.data(), x.size(), f, CastOptions{}, codes.data());
  GemmOperand o = OperandFromCodes(f, rows, cols, codes.data());
  if (kind == BenchScales::kTensor) {
    o.tensor_scale = a_side ? 0.5f : 3.0f;
    return o;
  }
  const size_t block = kind == BenchScales::kMx ? 32 : 16;
  o.scale_format = kind == BenchScales::kMx ? ScaleFormat::kUe8m0 : ScaleFormat::kE4m3;
  o.block_rows = a_side ? 1 : block;
  o.block_cols = a_side ? block : 1;
  o.scale_rows = (rows + o.block_rows - 1) / o.block_rows;
  o.scale_cols = (cols + o.block_cols - 1) / o.block_cols;
  o.scales.resize(o.scale_rows * o.scale_cols);
  for (float& s : o.scales)
    s = kind == BenchScales::kMx ? std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4)
                                 : DecodeToFloat(fmt::kE4M3, static_cast<uint8_t>(0x30 + rng() % 0x4E));  // 0.5 .. 448
  return o;
}

struct GemmCase {
  std::string name;      // what runs
  std::string model;     // accumulation model, empty for an Eigen baseline
  std::string baseline;  // "sgemm" or "dgemm": what the target compares with
  double target;         // required ratio to the baseline (0: a baseline itself)
  const Format* elem;
  BenchScales scales;
  float sigma = 0;  // the elements' spread before conversion (0: 2 for E2M1, 64 otherwise)
};

struct GemmRow {
  std::string name, baseline;
  int size, threads;
  double seconds, target;
  double Gflops() const { return 2.0 * size * static_cast<double>(size) * size / seconds / 1e9; }
};

}  // namespace

void RunGemmBench(const BenchArgs& a, nlohmann::json& j) {
  for (int s : a.gemm_sizes)
    if (s < 1 || s > 16384) throw Error("--gemm-sizes values must be 1..16384, not " + std::to_string(s));
  if (a.gemm_reps < 1) throw Error("--gemm-reps must be at least 1");
  // Per size: FP32 and FP64 copies of A, B and C (36 n^2 bytes), each case's two code matrices (2 n^2 per
  // case, 18 n^2), one FP32 output (4 n^2) and packing buffers and Eigen's blocks (a bound of 22 n^2).
  for (int s : a.gemm_sizes)
    CheckMemoryCeiling(uint64_t{80} * static_cast<uint64_t>(s) * static_cast<uint64_t>(s),
                       "bench --gemm-sizes " + std::to_string(s));
  const EigenGemm eigen = BestEigenGemm();
  const std::vector<GemmCase> cases = {
      {"eigen sgemm (" + eigen.level + ")", "", "sgemm", 0, nullptr, BenchScales::kTensor},
      {"eigen dgemm (" + eigen.level + ")", "", "dgemm", 0, nullptr, BenchScales::kTensor},
      {"fp32-seq mxfp8", "fp32-seq", "sgemm", 0.5, &fmt::kE4M3, BenchScales::kMx},
      {"block-exact mxfp8", "block-exact", "dgemm", 0.5, &fmt::kE4M3, BenchScales::kMx},
      {"block-exact mxfp4", "block-exact", "sgemm", 0.5, &fmt::kE2M1, BenchScales::kMx},
      {"hopper-fp8 e4m3 tensor", "hopper-fp8", "sgemm", 0.2, &fmt::kE4M3, BenchScales::kTensor},
      {"exact mxfp8", "exact", "dgemm", 0.3, &fmt::kE4M3, BenchScales::kMx},
      // exact with scales that are not powers of two (E4M3 blocks and an FP32 tensor scale; one FP32 tensor
      // scale per side): the split-product path, once 500x slower than the UE8M0 one. No target yet.
      {"exact nvfp4", "exact", "dgemm", -1, &fmt::kE2M1, BenchScales::kNvfp4},
      {"exact e4m3 tensor", "exact", "dgemm", -1, &fmt::kE4M3, BenchScales::kTensor},
      {"blackwell-mxf8f6f4 mxfp8", "blackwell-mxf8f6f4", "sgemm", 0.2, &fmt::kE4M3, BenchScales::kMx},
      {"blackwell-mxf4nvf4 mxfp4", "blackwell-mxf4nvf4", "sgemm", 0.3, &fmt::kE2M1, BenchScales::kMx},
      {"blackwell-mxf4nvf4 nvfp4", "blackwell-mxf4nvf4", "sgemm", 0.3, &fmt::kE2M1, BenchScales::kNvfp4},
      // AMD CDNA4's scaled MFMA (exact over 128 K, several scale blocks): the portable exact tiles with a TwoSum
      // certificate per step, not the SIMD kernels. No target yet.
      {"cdna4-mx mxfp8", "cdna4-mx", "dgemm", -1, &fmt::kE4M3, BenchScales::kMx},
      // Instructions modelled from MMA-Sim under its zero rule (zero terms at their operands' exponents): the
      // fused kernels with the outputs the rule may change left to the reference.
      {"ada-mma-fp8 e4m3 tensor", "ada-mma-fp8", "sgemm", 0.2, &fmt::kE4M3, BenchScales::kTensor},
      {"rtx-blackwell-f8f6f4 e4m3 tensor", "rtx-blackwell-f8f6f4", "sgemm", 0.2, &fmt::kE4M3, BenchScales::kTensor},
      {"rtx-blackwell-mxf8f6f4 mxfp8", "rtx-blackwell-mxf8f6f4", "sgemm", 0.2, &fmt::kE4M3, BenchScales::kMx},
      {"rtx-blackwell-mxf4nvf4 nvfp4", "rtx-blackwell-mxf4nvf4", "sgemm", 0.2, &fmt::kE2M1, BenchScales::kNvfp4},
      // AMD MI300's FP8 MFMA on FNUZ operands: the CDNA3 Highway kernel (exact int32 step sums, one FP32
      // addition a step where the halves cut nothing).
      {"cdna3-fp8 e4m3fnuz tensor", "cdna3-fp8", "sgemm", 0.2, &fmt::kE4M3Fnuz, BenchScales::kTensor},
      // An FP16 accumulator (elements of spread 1/8, so that sums stay within FP16's range): the portable
      // fused tiles. No target (issue 46 sets the FP32-accumulating ones').
      {"hopper-wgmma-fp8-f16 e4m3 tensor", "hopper-wgmma-fp8-f16", "sgemm", -1, &fmt::kE4M3, BenchScales::kTensor,
       0.125f},
  };
  const int saved_threads = omp_get_max_threads();
  std::vector<GemmRow> rows;
  for (int n : a.gemm_sizes) {
    const size_t sz = static_cast<size_t>(n);
    std::mt19937 rng(7);
    std::vector<float> fa(sz * sz), fb(sz * sz), fc(sz * sz), fd(sz * sz);
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
      ops.emplace_back(c.elem ? std::make_pair(BenchOperand(*c.elem, sz, sz, true, c.scales, rng, c.sigma),
                                               BenchOperand(*c.elem, sz, sz, false, c.scales, rng, c.sigma))
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
          // (into a buffer of the caller's, as Eigen's rows write into fc: GemmInto, Gemm's bits)
          fn = [&, m] { GemmInto(ops[ci].first, ops[ci].second, nullptr, m, fd.data()); };
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
  // FP32 inputs, transposes and FP64 copies (36 bytes per element of each of the three shapes), the FP64
  // reference and each recipe's quantized copies: 64 bytes per element bounds it.
  CheckMemoryCeiling(uint64_t{64} * (m * n + m * k + n * k), "bench --recipe-shape");
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

}  // namespace qmx::cli::bench
