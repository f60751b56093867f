// test_cast_profiles.cc: the cast profiles (qmx/cast_profiles.h) against their libraries' own output,
// golden/casts/*.txt (gpu/scripts/collect_casts.py run on the GPU host: ml_dtypes 0.6.0, torch 2.11 CPU
// and CUDA, onnx 1.23.1's reference Cast), over the 393,216 inputs of the set "qmx-casts-v1" (every FP32
// top half with low halves 0000 0001 7fff 8000 8001 ffff: each narrow format's midpoints and one FP32
// ulp either side, the FP32 subnormals, Inf, NaN payloads). Each pair must agree on every input; the
// profiles that differ must differ on the other's data.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "qmx/cast_profiles.h"
#include "qmx/error.h"

using namespace qmx;

namespace {

constexpr uint32_t kLows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
constexpr size_t kCount = 65536 * 6;

float Input(size_t i) {
  const uint32_t bits = static_cast<uint32_t>(i / 6) << 16 | kLows[i % 6];
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The codes of a golden/casts file, expanded from its runs.
std::vector<uint8_t> Load(const std::string& name) {
  const std::string path = std::string(QMX_SOURCE_DIR) + "/golden/casts/" + name + ".txt";
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<uint8_t> codes;
  std::string line;
  size_t count = 0;
  while (std::getline(in, line)) {
    if (line.rfind("# count=", 0) == 0) count = std::stoul(line.substr(8));
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    size_t start = 0, run = 0;
    std::string hex;
    ls >> start >> run >> hex;
    REQUIRE(start == codes.size());
    codes.insert(codes.end(), run, static_cast<uint8_t>(std::stoul(hex, nullptr, 16)));
  }
  REQUIRE(count == kCount);
  REQUIRE(codes.size() == kCount);
  return codes;
}

// Mismatches of the profile on the file's inputs; the first few are printed in hex.
size_t Mismatches(const std::string& profile, const Format& f, const std::vector<uint8_t>& want, bool print) {
  const CastProfile p(profile, f);
  size_t bad = 0;
  for (size_t i = 0; i < kCount; ++i) {
    const uint8_t got = p(Input(i));
    if (got == want[i]) continue;
    if (print && bad < 8) {
      uint32_t b;
      const float x = Input(i);
      std::memcpy(&b, &x, 4);
      char msg[160];
      std::snprintf(msg, sizeof msg, "%s -> %s: input 0x%08x (%g): got 0x%02x, want 0x%02x", profile.c_str(), f.name, b, x,
                    got, want[i]);
      UNSCOPED_INFO(msg);
    }
    ++bad;
  }
  return bad;
}

struct Pair {
  const char* file;
  const char* profile;
  Format format;
};

}  // namespace

TEST_CASE("round: cast profiles reproduce ml_dtypes, PyTorch (CPU and CUDA) and ONNX on every input",
          "[round][profiles]") {
  const Pair pairs[] = {
      {"ml-dtypes-e4m3", "ml-dtypes", fmt::kE4M3},      {"ml-dtypes-e5m2", "ml-dtypes", fmt::kE5M2},
      {"ml-dtypes-ue8m0", "ml-dtypes", fmt::kUE8M0},    {"ml-dtypes-e2m1", "ml-dtypes", fmt::kE2M1},
      {"ml-dtypes-e2m3", "ml-dtypes", fmt::kE2M3},      {"ml-dtypes-e3m2", "ml-dtypes", fmt::kE3M2},
      {"pytorch-cpu-e4m3", "pytorch", fmt::kE4M3},      {"pytorch-cpu-e5m2", "pytorch", fmt::kE5M2},
      {"pytorch-cpu-ue8m0", "pytorch", fmt::kUE8M0},    {"pytorch-cuda-e4m3", "pytorch", fmt::kE4M3},
      {"pytorch-cuda-e5m2", "pytorch", fmt::kE5M2},     {"pytorch-cuda-ue8m0", "pytorch", fmt::kUE8M0},
      {"onnx-e4m3-sat", "onnx", fmt::kE4M3},            {"onnx-e4m3-nosat", "onnx-nosat", fmt::kE4M3},
      {"onnx-e5m2-sat", "onnx", fmt::kE5M2},            {"onnx-e5m2-nosat", "onnx-nosat", fmt::kE5M2},
      {"onnx-ue8m0-up", "onnx", fmt::kUE8M0},           {"onnx-ue8m0-nearest", "onnx-nearest", fmt::kUE8M0},
      {"onnx-ue8m0-down", "onnx-down", fmt::kUE8M0},    {"onnx-e2m1", "onnx", fmt::kE2M1},
      {"onnx-e2m1", "onnx-nosat", fmt::kE2M1},
      // The FNUZ formats (AMD's FP8) and ml_dtypes' IEEE-like float8_e4m3 and float8_e3m4.
      {"ml-dtypes-e4m3fnuz", "ml-dtypes", fmt::kE4M3Fnuz},  {"ml-dtypes-e5m2fnuz", "ml-dtypes", fmt::kE5M2Fnuz},
      {"ml-dtypes-e4m3b11fnuz", "ml-dtypes", fmt::kE4M3B11Fnuz},
      {"ml-dtypes-e4m3-ieee", "ml-dtypes", ParseFormat("float8_e4m3")},
      {"ml-dtypes-e3m4-ieee", "ml-dtypes", ParseFormat("float8_e3m4")},
      {"pytorch-cpu-e4m3fnuz", "pytorch", fmt::kE4M3Fnuz},  {"pytorch-cpu-e5m2fnuz", "pytorch", fmt::kE5M2Fnuz},
      {"pytorch-cuda-e4m3fnuz", "pytorch", fmt::kE4M3Fnuz}, {"pytorch-cuda-e5m2fnuz", "pytorch", fmt::kE5M2Fnuz},
      // The FNUZ casts of both libraries are the reference routine's RNE without saturation.
      {"ml-dtypes-e4m3fnuz", "ocp-nosat", fmt::kE4M3Fnuz},  {"pytorch-cuda-e5m2fnuz", "ocp-nosat", fmt::kE5M2Fnuz},
  };
  for (const Pair& p : pairs) {
    INFO(p.file << " under " << p.profile);
    CHECK(Mismatches(p.profile, p.format, Load(p.file), true) == 0);
  }
}

TEST_CASE("cast profiles: the libraries' differences are real on their data", "[round][profiles]") {
  // e5m2 NaN: ml_dtypes 0x7E, PyTorch 0x7F; E8M0 zero and negatives: ml_dtypes NaN, PyTorch |x|; ONNX's
  // saturate=1 clips; the OCP reference rounds E8M0 subnormals by value and ties to even.
  // Every NaN input: per sign, 127 tops of a nonzero top mantissa x 6 lows, and the Inf top with 5 nonzero lows.
  CHECK(Mismatches("ml-dtypes", fmt::kE5M2, Load("pytorch-cpu-e5m2"), false) == 2 * (127 * 6 + 5));
  CHECK(Mismatches("ml-dtypes", fmt::kUE8M0, Load("pytorch-cpu-ue8m0"), false) > 0);
  CHECK(Mismatches("onnx-nosat", fmt::kE4M3, Load("onnx-e4m3-sat"), false) > 0);
  CHECK(Mismatches("onnx-nearest", fmt::kUE8M0, Load("onnx-ue8m0-up"), false) > 0);
  CHECK(Mismatches("ocp-sat", fmt::kUE8M0, Load("ml-dtypes-ue8m0"), false) > 0);
  CHECK(Mismatches("ocp-nosat", fmt::kE4M3, Load("ml-dtypes-e4m3"), false) == 0);
  CHECK_THROWS_WITH(CastProfile("pytorch", fmt::kE2M1), Catch::Matchers::Contains("casts to e4m3 e5m2 ue8m0 e4m3fnuz e5m2fnuz, not e2m1"));
  CHECK_THROWS_WITH(CastProfile("numpy", fmt::kE4M3), Catch::Matchers::Contains("unknown cast profile 'numpy'"));
}
