// bench_convert.cc: `qmx-sim bench --suite convert`: conversion, MX quantization, Hadamard transforms and
// error metrics, each beside a memcpy of the kernel's input bytes and the scalar reference on the same
// data, with effective bandwidth (bytes read + bytes written per second).
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
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/io.h"
#include "qmx/metrics.h"
#include "qmx/quantize.h"
#include "qmx/mx.h"
#include "qmx/transform.h"
#include "qmx/version.h"

namespace qmx::cli::bench {
namespace {

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

}  // namespace

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
  const QuantSpec nvfp4 = QuantSpecByName("nvfp4"), nvfp4_2d = QuantSpecByName("nvfp4-2d"), nvfp4_row = QuantSpecByName("nvfp4-row");
  const QuantSpec fp8_1x128 = QuantSpecByName("fp8-block1x128"), fp8_tensor = QuantSpecByName("fp8-tensor-current");
  const TensorView rows_view{DType::kF32, x.data(), n / hcols, hcols};
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
      // AMD's FNUZ FP8 (issue: at the OCP formats' speed): the same fast path, other limits and specials.
      {"f32->e4m3fnuz rne satfinite", 4 * n, n,
       [&](Exec e) { ConvertToCodes(DType::kF32, x.data(), n, fmt::kE4M3Fnuz, rne, codes.data(), {}, e); },
       [&] { ConvertToCodesRef(DType::kF32, x.data(), n, fmt::kE4M3Fnuz, rne, codes.data()); }},
      {"f32->e5m2fnuz rne satfinite", 4 * n, n,
       [&](Exec e) { ConvertToCodes(DType::kF32, x.data(), n, fmt::kE5M2Fnuz, rne, codes.data(), {}, e); },
       [&] { ConvertToCodesRef(DType::kF32, x.data(), n, fmt::kE5M2Fnuz, rne, codes.data()); }},
      {"f32->e5m2 rne satfinite", 4 * n, n,
       [&](Exec e) { ConvertToCodes(DType::kF32, x.data(), n, fmt::kE5M2, rne, codes.data(), {}, e); },
       [&] { ConvertToCodesRef(DType::kF32, x.data(), n, fmt::kE5M2, rne, codes.data()); }},
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
      {"nvfp4 quantize (1x16, e4m3 scales)", 4 * n, n + n / 16,
       [&](Exec e) { sink += Quantize(rows_view, nvfp4, e).tensor_amax; },
       [&] { sink += QuantizeRef(rows_view, nvfp4).tensor_amax; }},
      // Not a quantizer: the two passes any per-tensor NVFP4 quantizer makes (the tensor amax, then a
      // conversion that reads the input again and writes a code per element), with the least work in each,
      // counted as the row above: its ratio to memcpy is the ceiling of that row's.
      {"nvfp4 floor: tensor amax + f32->e2m1", 4 * n, n + n / 16,
       [&](Exec e) {
         sink += TensorAmax(rows_view, nvfp4.nan, e);
         ConvertToCodes(DType::kF32, x.data(), n, fmt::kE2M1, rne, codes.data(), {}, e);
       },
       [&] {
         sink += TensorAmaxRef(rows_view, nvfp4.nan);
         ConvertToCodesRef(DType::kF32, x.data(), n, fmt::kE2M1, rne, codes.data());
       }},
      {"nvfp4 quantize, tensor amax given", 4 * n, n + n / 16,
       [&](Exec e) { sink += QuantizeNvfp4WithAmax(rows_view, nvfp4, 5.0f, e).tensor_amax; },
       [&] { sink += QuantizeNvfp4WithAmaxRef(rows_view, nvfp4, 5.0f).tensor_amax; }},
      {"nvfp4-row quantize (1x16, an amax per row)", 4 * n, n + n / 16,
       [&](Exec e) { sink += Quantize(rows_view, nvfp4_row, e).tensor_amax; },
       [&] { sink += QuantizeRef(rows_view, nvfp4_row).tensor_amax; }},
      {"nvfp4-2d quantize (16x16)", 4 * n, n + n / 256,
       [&](Exec e) { sink += Quantize(rows_view, nvfp4_2d, e).tensor_amax; },
       [&] { sink += QuantizeRef(rows_view, nvfp4_2d).tensor_amax; }},
      {"fp8 1x128 blockwise quantize", 4 * n, n + n / 32,
       [&](Exec e) { sink += Quantize(rows_view, fp8_1x128, e).scales[0]; },
       [&] { sink += QuantizeRef(rows_view, fp8_1x128).scales[0]; }},
      {"fp8 per-tensor current quantize", 4 * n, n,
       [&](Exec e) { sink += Quantize(rows_view, fp8_tensor, e).tensor_amax; },
       [&] { sink += QuantizeRef(rows_view, fp8_tensor).tensor_amax; }},
      {"e4m3->f32 decode", n, 4 * n,
       [&](Exec e) { DecodeToF32(codes.data(), n, fmt::kE4M3, decoded.data(), e); }, nullptr},
      // Study kernels: transforms and metrics over the same data viewed as rows of hcols.
      {"hadamard:32 forward (f32)", 4 * n, 4 * n,
       [&](Exec e) { HadamardForward(h32, x.data(), decoded.data(), n / hcols, hcols, e); },
       [&] { HadamardButterfliesRef(h32, x.data(), decoded.data(), n / hcols, hcols); }},
      {"hadamard:128 forward (f32)", 4 * n, 4 * n,
       [&](Exec e) { HadamardForward(h128, x.data(), decoded.data(), n / hcols, hcols, e); },
       [&] { HadamardButterfliesRef(h128, x.data(), decoded.data(), n / hcols, hcols); }},
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

}  // namespace qmx::cli::bench
