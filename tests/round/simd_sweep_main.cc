// simd_sweep_main.cc: every compiled SIMD target against the scalar reference over FP32 inputs, all
// 2^32 or the sampled set (every 1009th input plus every input whose low 12 bits are zero, which holds
// all codes, midpoints and thresholds of the formats of 8 bits or fewer), in chunks.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/round.h"
#include "support/modes.h"

namespace {

using namespace qmx;

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "qmx_simd_sweep: %s\nusage: qmx_simd_sweep --format NAME --round MODE|all --sat MODE|all "
               "[--sample] [--variants]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string format, round = "rne", sat = "satfinite";
    bool sample = false, variants = false;
    for (int i = 1; i < argc; ++i) {
      const std::string k = argv[i];
      auto val = [&]() -> std::string {
        if (i + 1 >= argc) Usage(("missing value after " + k).c_str());
        return argv[++i];
      };
      if (k == "--format") format = val();
      else if (k == "--round") round = val();
      else if (k == "--sat") sat = val();
      else if (k == "--sample") sample = true;
      else if (k == "--variants") variants = true;
      else Usage(("unknown argument " + k).c_str());
    }
    if (format.empty()) Usage("--format is required");
    const Format f = ParseFormat(format);
    std::vector<Rounding> rounds(std::begin(test::kAllModes), std::end(test::kAllModes));
    if (round != "all") rounds = {ParseRounding(round)};
    std::vector<Saturation> sats(std::begin(test::kAllSat), std::end(test::kAllSat));
    if (sat != "all") sats = {ParseSaturation(sat)};
    const std::vector<CastOptions> opts = test::OptionSets(f, rounds, sats, variants, false);
    const std::vector<std::string> targets = SimdTargets();
    const uint64_t n_strided = sample ? (1ull << 32) / 1009 + 1 : (1ull << 32);
    const uint64_t n_total = sample ? n_strided + (1ull << 20) : n_strided;
    const uint64_t chunk = 1ull << 22;
    std::vector<uint32_t> in(chunk);
    std::vector<uint8_t> want(chunk), got(chunk);
    uint64_t total_bad = 0;
    for (const CastOptions& o : opts) {
      const auto t0 = std::chrono::steady_clock::now();
      uint64_t bad = 0;
      for (uint64_t start = 0; start < n_total; start += chunk) {
        const size_t len = static_cast<size_t>(std::min(chunk, n_total - start));
        for (size_t j = 0; j < len; ++j) {
          const uint64_t k = start + j;
          in[j] = !sample ? static_cast<uint32_t>(k)
                  : k < n_strided ? static_cast<uint32_t>(k * 1009)
                                  : static_cast<uint32_t>((k - n_strided) << 12);
        }
        const SrSource sr{0x5EED5EEDull, start, nullptr};
        ConvertToCodesRef(DType::kF32, in.data(), len, f, o, want.data(), sr, Exec::kParallel);
        for (const std::string& t : targets) {
          ForceSimdTarget(t);
          ConvertToCodes(DType::kF32, in.data(), len, f, o, got.data(), sr, Exec::kParallel);
          for (size_t j = 0; j < len; ++j) {
            if (got[j] == want[j]) continue;
            if (++bad <= 10)
              std::printf("  MISMATCH %s %s %s %s: input 0x%08x (element %llu) simd 0x%02x reference 0x%02x\n",
                          t.c_str(), f.name, RoundingName(o.rounding), SaturationName(o.saturation), in[j],
                          static_cast<unsigned long long>(start + j), got[j], want[j]);
          }
        }
        ForceSimdTarget("");
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%-6s %-5s %-12s%s%s %11llu inputs x %zu targets  %llu mismatches  %.1f s\n", f.name,
                  RoundingName(o.rounding), SaturationName(o.saturation),
                  o.subnormals == Subnormals::kFlush ? " flush" : "", o.nan_sign == NanSign::kPositive ? " nan+" : "",
                  static_cast<unsigned long long>(n_total), targets.size(), static_cast<unsigned long long>(bad), secs);
      std::fflush(stdout);
      total_bad += bad;
    }
    std::printf("%s: %llu mismatches in total (targets:", total_bad ? "FAIL" : "PASS",
                static_cast<unsigned long long>(total_bad));
    for (const std::string& t : targets) std::printf(" %s", t.c_str());
    std::printf(")\n");
    return total_bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qmx_simd_sweep: %s\n", e.what());
    return 2;
  }
}
