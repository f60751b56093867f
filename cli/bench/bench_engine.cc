// bench_engine.cc: `qmx-sim bench --suite engine`: the emulation engine's GEMMs on the GPU (gpu/), each
// beside BF16 cuBLASLt (torch.matmul's GEMM) of the same size and the same model on this machine's CPU
// threads, in one run. Every engine output is checked against the CPU's bits before its time counts.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "qmx/convert.h"
#include "qmx/distributions.h"
#include "qmx/error.h"
#include "qmx/gemm.h"
#include "qmx/mx.h"
#include "qmx/quantize.h"
#if defined(QMX_HAVE_CUDA)
#include "qmx/gpu.h"
#endif

namespace qmx::cli::bench {

#if defined(QMX_HAVE_CUDA)
namespace {

// An operand as training quantizes it: N(0, 1) values under a recipe (qmx::Quantize, A along its rows, B
// along its columns), so the exponent spreads within steps are those a model's GEMMs meet.
GemmOperand EngineBenchOperand(const std::string& spec, size_t rows, size_t cols, bool is_b, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(rows * cols);
  for (float& v : x) v = nd(rng);
  QuantSpec s = QuantSpecByName(spec);
  if (is_b) s.axis = Axis::kCol;
  return OperandFromQuantized(Quantize(TensorView{DType::kF32, x.data(), rows, cols}, s));
}

struct EngineCase {
  std::string model, operands;
  double target_bf16;  // the floor against BF16 cuBLAS (0: none)
};

// The engine's conversions on 2^28 FP32 values (normal, with outliers) already on the device, beside a
// device-to-device copy of the input (the memory-bound floor; the target is 0.5x its speed) and the
// CPU's fast path on this machine's threads. The codes are checked against the CPU's before a time counts.
void EngineConvertBench(const BenchArgs& a, nlohmann::json& j) {
  const size_t n = size_t{1} << 28;
  std::vector<float> x(n);
  GenerateDist(ParseDist("normal+tau20:0.01"), 7, x.data(), n);
  std::vector<uint8_t> got(n), want(n);
  std::printf("%-34s %10s %10s %9s %8s %10s %8s\n", "conversion, 2^28 FP32", "kernel ms", "copy ms", "x copy", "target",
              "cpu ms", "x cpu");
  struct Conv {
    const char* name;
    const Format* dst;
    Rounding round;
  };
  const Conv convs[] = {{"f32->e4m3 rne satfinite", &fmt::kE4M3, Rounding::kRne},
                        {"f32->e2m1 rne satfinite", &fmt::kE2M1, Rounding::kRne},
                        {"f32->e2m1 sr satfinite", &fmt::kE2M1, Rounding::kSrA},
                        {"f32->e5m2 rz satfinite", &fmt::kE5M2, Rounding::kRz}};
  double copy_s = 0;  // the last conversion's copy: the MX rows' baseline
  for (const Conv& c : convs) {
    CastOptions opt;
    opt.rounding = c.round;
    const gpu::EngineConvertTiming t = gpu::TimeEngineConvert(x.data(), n, *c.dst, opt, 5, std::max(3, a.gemm_reps), got.data());
    const double cpu = MedianSeconds(std::max(3, a.gemm_reps), [&] {
      ConvertToCodes(DType::kF32, x.data(), n, *c.dst, opt, want.data(), {5, 0, nullptr}, Exec::kParallel);
    });
    if (got != want) throw Error(std::string("engine bench: ") + c.name + " differs from the CPU's codes");
    copy_s = t.copy_s;
    const double x_copy = t.copy_s / t.kernel_s;
    std::printf("%-34s %10.3f %10.3f %9.2f %8s %10.2f %8.1f\n", c.name, t.kernel_s * 1e3, t.copy_s * 1e3, x_copy,
                x_copy >= 0.5 ? ">=0.5 met" : ">=0.5 SHORT", cpu * 1e3, cpu / t.kernel_s);
    j["engine"]["rows"].push_back({{"kernel", std::string("convert ") + c.name},
                                   {"elements", n},
                                   {"kernel_s", t.kernel_s},
                                   {"copy_s", t.copy_s},
                                   {"ratio_vs_copy", x_copy},
                                   {"cpu_s", cpu},
                                   {"ratio_vs_cpu", cpu / t.kernel_s},
                                   {"outputs_checked", n}});
  }
  // One quantizer row: the engine's median kernel time against the copy, and the CPU's.
  const auto row = [&](const std::string& name, double ksec, double cpu) {
    const double x_copy = copy_s / ksec;
    std::printf("%-34s %10.3f %10.3f %9.2f %8s %10.2f %8.1f\n", name.c_str(), ksec * 1e3, copy_s * 1e3, x_copy,
                x_copy >= 0.5 ? ">=0.5 met" : ">=0.5 SHORT", cpu * 1e3, cpu / ksec);
    j["engine"]["rows"].push_back({{"kernel", "quantize " + name},
                                   {"elements", n},
                                   {"kernel_s", ksec},
                                   {"copy_s", copy_s},
                                   {"ratio_vs_copy", x_copy},
                                   {"cpu_s", cpu},
                                   {"ratio_vs_cpu", cpu / ksec},
                                   {"outputs_checked", n}});
  };
  const auto median_of = [&](const auto& run) {
    std::vector<double> ks;
    for (int r = 0; r <= std::max(3, a.gemm_reps); ++r) {
      const double k = run();
      if (r > 0) ks.push_back(k);  // run 0 warms up
    }
    std::sort(ks.begin(), ks.end());
    return ks[ks.size() / 2];
  };
  // MX quantization (the engine's kernel time; the copy as above), checked against QuantizeMx.
  struct Mx {
    const char* name;
    const Format* elem;
  };
  for (const Mx& m : {Mx{"mxfp8 e4m3 round-up exact", &fmt::kE4M3}, Mx{"mxfp4 e2m1 round-up exact", &fmt::kE2M1}}) {
    MxSpec spec;
    spec.elem = *m.elem;
    std::vector<uint8_t> gs(MxScaleCount(n, spec)), ws(gs.size());
    const double ksec = median_of([&] {
      double k = 0;
      gpu::EngineQuantizeMx(DType::kF32, x.data(), n, spec, got.data(), gs.data(), {}, &k);
      return k;
    });
    const double cpu = MedianSeconds(std::max(3, a.gemm_reps), [&] {
      QuantizeMx(DType::kF32, x.data(), n, spec, want.data(), ws.data(), {}, Exec::kParallel);
    });
    if (got != want || gs != ws) throw Error(std::string("engine bench: ") + m.name + " differs from the CPU's");
    row(m.name, ksec, cpu);
  }
  // Tensor quantizers (EngineQuantize: the amax pass, the host's S_enc, the blocks), 2^14 x 2^14.
  for (const char* name : {"nvfp4", "fp8-block128x128", "mxfp8"}) {
    const QuantSpec spec = QuantSpecByName(name);
    const TensorView v{DType::kF32, x.data(), size_t{1} << 14, n >> 14};
    QuantizedTensor gq;
    const double ksec = median_of([&] {
      double k = 0;
      gq = gpu::EngineQuantize(v, spec, &k);
      return k;
    });
    QuantizedTensor cq;
    const double cpu = MedianSeconds(std::max(3, a.gemm_reps), [&] { cq = Quantize(v, spec); });
    if (gq.codes != cq.codes || gq.scales != cq.scales) throw Error(std::string("engine bench: ") + name + " differs from the CPU's");
    row(std::string("tensor ") + name, ksec, cpu);
  }
}

}  // namespace

void RunEngineBench(const BenchArgs& a, nlohmann::json& j) {
  const gpu::DeviceInfo& dev = gpu::Device();
  if (!dev.available) {
    std::printf("engine: no CUDA device (%s); nothing timed\n", dev.reason.c_str());
    return;
  }
  const int threads = omp_get_max_threads();
  std::printf("\nEmulation engine on %s: kernel time (operands on the device) against BF16 cuBLASLt of the same size,\n"
              "and end-to-end time (copies included) against the same model on %d CPU threads; medians of %d\n",
              dev.Describe().c_str(), threads, a.gemm_reps);
  j["engine"]["device"] = dev.Describe();
  j["engine"]["cpu_threads"] = threads;
  j["engine"]["rows"] = nlohmann::json::array();
  EngineConvertBench(a, j);
  std::printf("%-20s %-6s %5s %10s %9s %8s %8s %10s %10s %8s %8s %7s %9s\n", "model", "ops", "size", "kernel ms",
              "TFLOP/s", "x bf16", "target", "e2e ms", "cpu ms", "k x cpu", "e2e xcpu", "kernel", "fallback");
  // The GEMM models with their floors against BF16 cuBLAS (0: none); "k x cpu" (the CPU's time over the
  // kernel's) is the 100x, "e2e xcpu" the same with the copies from and to pageable host memory.
  const EngineCase cases[] = {{"blackwell-mxf4nvf4", "nvfp4", 0.1},
                              {"blackwell-mxf4nvf4", "mxfp4", 0.1},
                              {"blackwell-mxf8f6f4", "mxfp8", 0.03},
                              {"block-exact", "mxfp8", 0.05},
                              {"exact", "mxfp8", 0.05},
                              {"hopper-fp8", "fp8-tensor-current", 0},
                              {"hopper-fp8-fast", "fp8-tensor-current", 0},
                              {"fp32-seq", "fp8-tensor-current", 0}};
  for (int size : a.gemm_sizes) {
    const size_t s = static_cast<size_t>(size);
    const double bf16 = gpu::Bf16GemmSeconds(s, s, s, std::max(3, a.gemm_reps));
    const double flop = 2.0 * s * s * s;
    std::printf("%-20s %-6s %5d %10.3f %9.1f\n", "bf16 cuBLASLt", "bf16", size, bf16 * 1e3, flop / bf16 / 1e12);
    j["engine"]["rows"].push_back({{"kernel", "bf16 cuBLASLt"}, {"size", size}, {"median_s", bf16}});
    for (const EngineCase& c : cases) {
      const GemmOperand A = EngineBenchOperand(c.operands, s, s, false, 1), B = EngineBenchOperand(c.operands, s, s, true, 2);
      const AccumModel m = AccumModelByName(c.model);
      std::vector<double> kernel, e2e;
      std::vector<float> got;
      gpu::EngineGemmStats st;
      for (int r = 0; r < a.gemm_reps + 1; ++r) {  // the first run warms up
        const auto t0 = std::chrono::steady_clock::now();
        got = gpu::EngineGemm(A, B, nullptr, m, &st);
        const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r == 0) continue;
        e2e.push_back(t);
        kernel.push_back(st.kernel_seconds);
      }
      std::vector<float> want;
      const double cpu = MedianSeconds(a.gemm_reps, [&] { want = Gemm(A, B, nullptr, m); });
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &want[i], 4) != 0;
      if (differ) throw Error("engine bench: " + c.model + " differs from the CPU in " + std::to_string(differ) + " outputs");
      std::sort(kernel.begin(), kernel.end());
      std::sort(e2e.begin(), e2e.end());
      const double ks = kernel[kernel.size() / 2], es = e2e[e2e.size() / 2];
      const double x_bf16 = bf16 / ks, x_cpu = cpu / es, kx_cpu = cpu / ks;
      char target[24] = "-";
      if (c.target_bf16 > 0) std::snprintf(target, sizeof target, ">=%.2f %s", c.target_bf16, x_bf16 >= c.target_bf16 ? "met" : "SHORT");
      const double fallback = st.steps ? static_cast<double>(st.fallback_steps) / st.steps : 0;
      std::printf("%-20s %-6s %5d %10.3f %9.2f %8.4f %8s %10.2f %10.2f %8.1f %8.1f %7s %8.3f%%\n", c.model.c_str(),
                  c.operands.substr(0, 6).c_str(), size, ks * 1e3, flop / ks / 1e12, x_bf16, target, es * 1e3,
                  cpu * 1e3, kx_cpu, x_cpu, st.kernel.c_str(), 100 * fallback);
      j["engine"]["rows"].push_back({{"kernel", c.model},
                                     {"operands", c.operands},
                                     {"size", size},
                                     {"engine_kernel", st.kernel},
                                     {"steps", st.steps},
                                     {"fallback_steps", st.fallback_steps},
                                     {"whole_outputs", st.whole_outputs},
                                     {"kernel_s", ks},
                                     {"end_to_end_s", es},
                                     {"cpu_s", cpu},
                                     {"ratio_vs_bf16", x_bf16},
                                     {"ratio_vs_cpu", x_cpu},
                                     {"kernel_ratio_vs_cpu", kx_cpu},
                                     {"target_vs_bf16", c.target_bf16},
                                     {"outputs_checked", got.size()}});
    }
  }
}
#else
void RunEngineBench(const BenchArgs&, nlohmann::json&) {
  std::printf("engine: this qmx-sim was built without the CUDA backend (gpu/README.md); nothing timed\n");
}
#endif

}  // namespace qmx::cli::bench
