// sweep_main.cc: FP32 -> format conversion sweeps of the reference routine against independent oracles:
// NVIDIA's host conversion functions from the CUDA headers (where they define the same operation) and
// the naive table oracle (tests/support/naive_round.h). Full 2^32 or sampled; OpenMP over inputs.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "qmx/error.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "support/naive_round.h"

#ifdef QMX_HAVE_CUDA_HEADERS
#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>
#endif

namespace {

using qmx::CastOptions;
using qmx::Format;
using qmx::Rounding;
using qmx::Saturation;

constexpr uint64_t kSweepSeed = 0x5EED5EEDull;

float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The CUDA host function for (format, options), or nullptr where NVIDIA defines no such operation.
using OracleFn = uint64_t (*)(float);
OracleFn CudaOracle(const Format& f, const CastOptions& o) {
#ifdef QMX_HAVE_CUDA_HEADERS
  const std::string n = f.name;
  const bool rne = o.rounding == Rounding::kRne, rz = o.rounding == Rounding::kRz;
  const bool sat = o.saturation == Saturation::kSatFinite, nosat = o.saturation == Saturation::kNoSat;
  if (n == "e4m3" && rne && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); };
  if (n == "e4m3" && rne && nosat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3); };
  if (n == "e5m2" && rne && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2); };
  if (n == "e5m2" && rne && nosat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2); };
  if (n == "e2m3" && rne && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp6(x, __NV_E2M3, cudaRoundNearest); };
  if (n == "e2m3" && rz && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp6(x, __NV_E2M3, cudaRoundZero); };
  if (n == "e3m2" && rne && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp6(x, __NV_E3M2, cudaRoundNearest); };
  if (n == "e3m2" && rz && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp6(x, __NV_E3M2, cudaRoundZero); };
  if (n == "e2m1" && rne && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest); };
  if (n == "e2m1" && rz && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundZero); };
  // ue8m0: CUDA reads |x| (the sign is ignored); qmx-sim rejects negative inputs, so only x >= 0 is compared.
  if (n == "ue8m0" && rz && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero); };
  if (n == "ue8m0" && rz && nosat) return [](float x) -> uint64_t { return __nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundZero); };
  if (n == "ue8m0" && o.rounding == Rounding::kRu && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf); };
  if (n == "ue8m0" && o.rounding == Rounding::kRu && nosat) return [](float x) -> uint64_t { return __nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundPosInf); };
#else
  (void)f;
  (void)o;
#endif
  return nullptr;
}

struct Args {
  std::string format;
  std::vector<Rounding> roundings;
  std::vector<Saturation> saturations;
  bool sample = false;
  std::string oracle = "auto";  // auto: cuda where defined, else naive; both; naive; cuda
  int max_print = 10;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "qmx_sweep: %s\nusage: qmx_sweep --format NAME --round MODE|all --sat MODE|all [--sample] "
               "[--oracle auto|cuda|naive|both]\n",
               why);
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  std::string round = "rne", sat = "satfinite";
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value after " + k).c_str());
      return argv[++i];
    };
    if (k == "--format") a.format = val();
    else if (k == "--round") round = val();
    else if (k == "--sat") sat = val();
    else if (k == "--sample") a.sample = true;
    else if (k == "--oracle") a.oracle = val();
    else Usage(("unknown argument " + k).c_str());
  }
  if (a.format.empty()) Usage("--format is required");
  if (round == "all") {
    a.roundings = {Rounding::kRne, Rounding::kRna, Rounding::kRz,  Rounding::kRu, Rounding::kRd,
                   Rounding::kRo,  Rounding::kSrA, Rounding::kSrB, Rounding::kSrC};
  } else {
    a.roundings = {qmx::ParseRounding(round)};
  }
  if (sat == "all") {
    a.saturations = {Saturation::kSatFinite, Saturation::kNoSat, Saturation::kSatPropagate};
  } else {
    a.saturations = {qmx::ParseSaturation(sat)};
  }
  return a;
}

// Runs one (format, options) sweep; returns the mismatch count.
uint64_t Sweep(const Format& f, const CastOptions& opt, const Args& args, bool* any_compared) {
  const OracleFn cuda = CudaOracle(f, opt);
  const bool use_cuda = (args.oracle == "auto" || args.oracle == "cuda" || args.oracle == "both") && cuda;
  const bool use_naive = args.oracle == "naive" || args.oracle == "both" || (args.oracle == "auto" && !cuda);
  if (!use_cuda && !use_naive) return 0;
  *any_compared = true;
  const qmx::test::NaiveRounder naive(f);

  // Inputs: all 2^32, or every 1009th plus every input whose low 12 bits are zero (these hold all
  // codes, midpoints and overflow thresholds of the formats of 8 bits or fewer).
  const uint64_t n_strided = args.sample ? (1ull << 32) / 1009 + 1 : (1ull << 32);
  const uint64_t n_total = args.sample ? n_strided + (1ull << 20) : n_strided;
  uint64_t mismatches = 0;
  int printed = 0;
  const bool stochastic = qmx::IsStochastic(opt.rounding);
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static, 65536) reduction(+ : mismatches)
  for (uint64_t k = 0; k < n_total; ++k) {
    const uint32_t u = !args.sample ? static_cast<uint32_t>(k)
                       : k < n_strided ? static_cast<uint32_t>(k * 1009)
                                       : static_cast<uint32_t>((k - n_strided) << 12);
    const float x = BitsToFloat(u);
    const uint32_t r = stochastic ? qmx::RandomBitsForElement(kSweepSeed, u) : 0;  // Philox only where read
    const uint64_t got = qmx::Convert(qmx::fmt::kFP32, u, f, opt, r).code;
    uint64_t want_cuda = got, want_naive = got;
    if (use_cuda && !(f.encoding == qmx::Encoding::kExponentOnly && (u >> 31))) want_cuda = cuda(x);
    if (use_naive) want_naive = naive.Round(static_cast<double>(x), opt, r);
    if (got != want_cuda || got != want_naive) {
      ++mismatches;
#pragma omp critical
      if (printed < args.max_print) {
        ++printed;
        std::printf("  MISMATCH %s %s %s: input 0x%08x (%.9g) qmx 0x%02llx cuda 0x%02llx naive 0x%02llx\n", f.name,
                    qmx::RoundingName(opt.rounding), qmx::SaturationName(opt.saturation), u, x,
                    static_cast<unsigned long long>(got), static_cast<unsigned long long>(want_cuda),
                    static_cast<unsigned long long>(want_naive));
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%-6s %-5s %-12s %11llu inputs  %llu mismatches  oracle %s%s%s  %.1f s\n", f.name,
              qmx::RoundingName(opt.rounding), qmx::SaturationName(opt.saturation),
              static_cast<unsigned long long>(n_total), static_cast<unsigned long long>(mismatches),
              use_cuda ? "cuda" : "", use_cuda && use_naive ? "+" : "", use_naive ? "naive" : "", secs);
  std::fflush(stdout);
  return mismatches;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = Parse(argc, argv);
    const Format f = qmx::ParseFormat(args.format);
#ifndef QMX_HAVE_CUDA_HEADERS
    if (args.oracle == "cuda") {
      std::printf("SKIP: the CUDA headers (cuda_fp8.h, cuda_fp6.h, cuda_fp4.h) were not found at configure time\n");
      return 77;
    }
    std::printf("note: CUDA headers not found; comparing with the naive oracle only\n");
#endif
    uint64_t total = 0;
    bool any = false;
    for (Saturation s : args.saturations) {
      for (Rounding r : args.roundings) {
        CastOptions opt;
        opt.rounding = r;
        opt.saturation = s;
        opt.nan_sign = qmx::NanSign::kPositive;  // CUDA returns the positive NaN 0x7F
        try {
          qmx::ValidateCastOptions(f, opt);
        } catch (const qmx::Error&) {
          continue;  // not defined for this format (e.g. nosat into e2m1)
        }
        total += Sweep(f, opt, args, &any);
      }
    }
    if (!any) {
      std::printf("SKIP: no oracle defines this operation\n");
      return 77;
    }
    std::printf("%s: %llu mismatches in total\n", total ? "FAIL" : "PASS", static_cast<unsigned long long>(total));
    return total ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qmx_sweep: %s\n", e.what());
    return 2;
  }
}
