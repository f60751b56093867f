// test_golden_cuda.cc: the checked-in conversion and ue8m0 golden files against NVIDIA's host conversion
// functions (cuda_fp8.h, cuda_fp6.h, cuda_fp4.h; docs/REFERENCES.md section 5), wherever they define the same
// operation. The files are read here with a parser of their own, so the check does not go through the
// library's golden reader. Built only where the CUDA headers are found (QMX_HAVE_CUDA_HEADERS).
#ifdef QMX_HAVE_CUDA_HEADERS
#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdlib>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "qmx/format.h"
#include "support/cli.h"
#include "support/hex.h"

namespace qmx {
namespace {

namespace fs = std::filesystem;
using namespace qmx::test;

// The checked-in level 1 set, or the directory QMX_GOLDEN_CUDA_DIR names (e.g. an --exhaustive set).
fs::path GoldenDir() {
  const char* env = std::getenv("QMX_GOLDEN_CUDA_DIR");
  return env && *env ? fs::path(env) : fs::path(QMX_SOURCE_DIR) / "golden" / "level1";
}

// key=value pairs of a "# op=..." header line.
std::map<std::string, std::string> HeaderKeys(const std::string& line) {
  std::map<std::string, std::string> kv;
  std::istringstream in(line.substr(2));
  std::string tok;
  while (in >> tok) {
    const size_t eq = tok.find('=');
    if (eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return kv;
}

using Oracle = std::function<uint32_t(uint32_t input_bits)>;

// NVIDIA's conversions by source type (float, __half_raw, __nv_bfloat16_raw).
uint32_t ToFp8(float x, __nv_saturation_t s, __nv_fp8_interpretation_t k) { return __nv_cvt_float_to_fp8(x, s, k); }
uint32_t ToFp8(__half_raw x, __nv_saturation_t s, __nv_fp8_interpretation_t k) { return __nv_cvt_halfraw_to_fp8(x, s, k); }
uint32_t ToFp8(__nv_bfloat16_raw x, __nv_saturation_t s, __nv_fp8_interpretation_t k) {
  return __nv_cvt_bfloat16raw_to_fp8(x, s, k);
}
uint32_t ToFp6(float x, __nv_fp6_interpretation_t k, cudaRoundMode m) { return __nv_cvt_float_to_fp6(x, k, m); }
uint32_t ToFp6(__half_raw x, __nv_fp6_interpretation_t k, cudaRoundMode m) { return __nv_cvt_halfraw_to_fp6(x, k, m); }
uint32_t ToFp6(__nv_bfloat16_raw x, __nv_fp6_interpretation_t k, cudaRoundMode m) {
  return __nv_cvt_bfloat16raw_to_fp6(x, k, m);
}
uint32_t ToFp4(float x, cudaRoundMode m) { return __nv_cvt_float_to_fp4(x, __NV_E2M1, m); }
uint32_t ToFp4(__half_raw x, cudaRoundMode m) { return __nv_cvt_halfraw_to_fp4(x, __NV_E2M1, m); }
uint32_t ToFp4(__nv_bfloat16_raw x, cudaRoundMode m) { return __nv_cvt_bfloat16raw_to_fp4(x, __NV_E2M1, m); }

// An oracle that hands the input bits to fn as the source type.
template <class Fn>
Oracle BySource(const std::string& src, Fn fn) {
  if (src == "f32") return [=](uint32_t b) { return fn(BitsFloat(b)); };
  if (src == "f16")
    return [=](uint32_t b) {
      __half_raw h;
      h.x = static_cast<unsigned short>(b);
      return fn(h);
    };
  return [=](uint32_t b) {
    __nv_bfloat16_raw h;
    h.x = static_cast<unsigned short>(b);
    return fn(h);
  };
}

// NVIDIA's function for a convert file, or an empty function where CUDA defines no such operation.
Oracle ConvertOracle(const std::map<std::string, std::string>& h) {
  if (h.at("nan-fallback") != "max" || h.at("subnormals") != "keep") return {};
  if (h.count("nan-payload") != 0 && h.at("nan-payload") != "default") return {};  // RISC-V's NaN, not CUDA's
  const std::string src = h.at("src"), dst = h.at("dst"), r = h.at("round"), s = h.at("sat");
  const bool sat = s == "satfinite", nosat = s == "nosat";
  if (dst == "e4m3" || dst == "e5m2") {
    if (r != "rne" || !(sat || nosat)) return {};
    const __nv_fp8_interpretation_t k = dst == "e4m3" ? __NV_E4M3 : __NV_E5M2;
    const __nv_saturation_t st = sat ? __NV_SATFINITE : __NV_NOSAT;
    return BySource(src, [=](auto x) { return ToFp8(x, st, k); });
  }
  if (dst == "e2m3" || dst == "e3m2" || dst == "e2m1") {
    if (!sat || (r != "rne" && r != "rz")) return {};
    const cudaRoundMode mode = r == "rne" ? cudaRoundNearest : cudaRoundZero;
    if (dst == "e2m1") return BySource(src, [=](auto x) { return ToFp4(x, mode); });
    const __nv_fp6_interpretation_t k = dst == "e2m3" ? __NV_E2M3 : __NV_E3M2;
    return BySource(src, [=](auto x) { return ToFp6(x, k, mode); });
  }
  if (dst == "ue8m0" && src == "f32" && (sat || nosat) && (r == "rz" || r == "ru")) {
    const __nv_saturation_t st = sat ? __NV_SATFINITE : __NV_NOSAT;
    const cudaRoundMode mode = r == "rz" ? cudaRoundZero : cudaRoundPosInf;
    // CUDA's e8m0 conversion ignores the sign (UE8M0 has none); ours treats negative inputs as invalid,
    // so the comparison covers inputs >= 0 and NaN (see lib/README.md "Conversion semantics").
    return [=](uint32_t b) { return (b >> 31) && !std::isnan(BitsFloat(b)) ? 0xFFFFFFFFu : uint32_t{__nv_cvt_float_to_e8m0(BitsFloat(b), st, mode)}; };
  }
  return {};
}

// The ue8m0 suite: round-up is cvt.rp.satfinite.ue8m0 of fl32(amax / destmax); the floor rule is RZ
// of amax (2^floor(log2 amax)), less emax, clamped at 2^-127.
Oracle Ue8m0Oracle(const std::map<std::string, std::string>& h) {
  const Format& elem = GetFormat(h.at("elem"));
  const FormatLimits lim = Limits(elem);
  if (h.at("rule") == "round-up")
    return [=](uint32_t b) {
      return uint32_t{__nv_cvt_float_to_e8m0(BitsFloat(b) / static_cast<float>(lim.max_finite), __NV_SATFINITE, cudaRoundPosInf)};
    };
  if (h.at("rule") == "ocp-floor" || h.at("rule") == "max-finite")
    return [=](uint32_t b) {
      if (BitsFloat(b) == 0) return 0u;
      const int rz = __nv_cvt_float_to_e8m0(BitsFloat(b), __NV_SATFINITE, cudaRoundZero);
      return static_cast<uint32_t>(std::max(0, rz - lim.emax));
    };
  return {};
}

TEST_CASE("golden: golden conversion and ue8m0 files agree with NVIDIA's host functions", "[golden][cuda]") {
  uint64_t files = 0, cases = 0, mismatches = 0, skipped_files = 0, nan_sign_only = 0;
  for (const auto& p : fs::recursive_directory_iterator(GoldenDir())) {
    if (!p.is_regular_file() || p.path().extension() != ".txt") continue;
    const std::vector<std::string> lines = Lines(ReadText(p.path().string()));
    REQUIRE(lines.size() >= 3);
    const auto h = HeaderKeys(lines[1]);
    Oracle oracle;
    if (h.at("op") == "convert") oracle = ConvertOracle(h);
    else if (h.at("op") == "ue8m0") oracle = Ue8m0Oracle(h);
    else continue;
    if (!oracle) {
      ++skipped_files;
      continue;
    }
    ++files;
    for (size_t i = 3; i < lines.size(); ++i) {
      const std::vector<std::string> w = Words(lines[i]);
      REQUIRE(w.size() == 3);
      const uint32_t in = static_cast<uint32_t>(std::stoul(w[0], nullptr, 16));
      const uint32_t want = static_cast<uint32_t>(std::stoul(w[1], nullptr, 16));
      uint32_t cuda = oracle(in);
      if (cuda == 0xFFFFFFFFu) continue;  // an input outside the operation CUDA defines
      ++cases;
      // CUDA's FP8 conversions return +NaN for every NaN input; the sign of a NaN result is the
      // implementation's choice (OFP8 5.2.1). Files with nan-sign=keep keep the input's sign, so there
      // the sign is left out of the comparison; files with nan-sign=positive must match exactly.
      const bool fp8 = h.at("op") == "convert" && (h.at("dst") == "e4m3" || h.at("dst") == "e5m2");
      if (fp8 && h.at("nan-sign") == "keep" && ClassifyCode(GetFormat(h.at("dst")), want) == CodeClass::kNan &&
          cuda == (want & 0x7Fu)) {
        ++nan_sign_only;
        cuda = want;
      }
      if (cuda != want) {
        ++mismatches;
        INFO(p.path().filename().string() << ":" << i + 1 << " input " << w[0] << " golden " << w[1] << " cuda " << cuda);
        CHECK(cuda == want);
      }
    }
  }
  std::printf("golden vs CUDA host functions: %llu files, %llu cases, %llu mismatches (%llu negative-NaN cases compared "
              "without the NaN's sign; %llu files with no CUDA counterpart)\n",
              static_cast<unsigned long long>(files), static_cast<unsigned long long>(cases),
              static_cast<unsigned long long>(mismatches), static_cast<unsigned long long>(nan_sign_only),
              static_cast<unsigned long long>(skipped_files));
  CHECK(files >= 40);
  CHECK(cases > 10000);
  CHECK(mismatches == 0);
}

}  // namespace
}  // namespace qmx
#endif
