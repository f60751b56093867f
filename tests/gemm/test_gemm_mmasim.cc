// test_gemm_mmasim.cc: the Blackwell and Hopper models against MMA-Sim (microsoft/MMA-Sim, arXiv
// 2511.10909; outputs in golden/gemm-mmasim, written by gpu/scripts/collect_mmasim.py on the GPU host's
// Python). Under MMA-Sim's zero rule (the "-mmasim" models, FusedParams::zero_operands) every output
// MMA-Sim gives is reproduced bit for bit; the default models differ only on the cases built around zero
// terms (zero rows beside large scales, all-zero groups beside C, zero C), which are the documented
// difference of the two rules. The Ada, Hopper FP16 and RTX Blackwell models (ada-mma-fp8*, hopper-wgmma-fp8-f16,
// rtx-blackwell-*) take MMA-Sim's zero rule themselves and reproduce every output; those with FP16 C and D
// (c_dtype "f16" in cases.json) are compared as FP16 bit patterns.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "qmx/convert.h"
#include "qmx/format.h"
#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/round.h"
#include "gemm/gemm_cases.h"
#include "support/hex.h"

namespace qmx {
namespace {

// The models of the first collection (tcgen05 block-scaled and wgmma FP8 with FP32 D), replayed under their
// "-mmasim" variants and against the default rule; the others are replayed as named.
const std::set<std::string> kBaseModels = {"blackwell-mxf8f6f4", "blackwell-mxf4nvf4", "hopper-fp8-fast"};
const std::set<std::string> kOwnRuleModels = {
    "ada-mma-fp8",          "ada-mma-fp8-k16",          "ada-mma-fp8-f16",        "hopper-wgmma-fp8-f16",
    "rtx-blackwell-f8f6f4", "rtx-blackwell-f8f6f4-f16", "rtx-blackwell-mxf8f6f4", "rtx-blackwell-mxf4nvf4"};

// The folder of the MMA-Sim outputs: QMX_MMASIM_DIR (a fresh collection, before it is copied into the
// source tree) or golden/gemm-mmasim.
std::string MmaSimDir() {
  const char* env = std::getenv("QMX_MMASIM_DIR");
  if (env != nullptr && *env != '\0') return std::string(env) + "/";
  return std::string(QMX_SOURCE_DIR) + "/golden/gemm-mmasim/";
}

struct Case {
  GemmOperand a, b;
  std::vector<float> c, d;    // FP32 cases: C and D; FP16 cases: C's values (FP16 values as floats)
  std::vector<uint16_t> d16;  // FP16 cases: D's FP16 bit patterns
  std::vector<uint8_t> ok;    // 0 where MMA-Sim raised instead of giving D
};

bool IsF16Case(const nlohmann::json& js) { return js.contains("c_dtype") && js["c_dtype"] == "f16"; }

// A 2-byte .npy ('<f2' or '<u2') as FP16 bit patterns.
std::vector<uint16_t> HalfBitsOf(const NpyArray& x) {
  REQUIRE((x.dtype == DType::kF16 || x.dtype == DType::kU16));
  std::vector<uint16_t> v(x.data.size() / 2);
  std::memcpy(v.data(), x.data.data(), v.size() * 2);
  return v;
}

// A model's output as FP16 bits: the conversion is exact for an FP16 value (RNE never rounds, Inf stays Inf,
// NaN becomes CUDA's and MMA-Sim's 0x7FFF with its sign); `exact` is false when the float is not an FP16
// value at all (which no FP16-accumulating model may return).
uint16_t Fp16BitsOf(float x, bool* exact) {
  CastOptions opt;
  opt.saturation = Saturation::kNoSat;
  opt.nan_payload = NanPayload::kAllOnes;
  const uint16_t h = static_cast<uint16_t>(ConvertF32(x, fmt::kFP16, opt));
  *exact = std::isnan(x) || test::FloatBits(SourceValueF32(DType::kF16, &h, 0)) == test::FloatBits(x);
  return h;
}

Case Load(const std::string& dir, const nlohmann::json& js) {
  const std::string name = js["name"];
  Case c;
  const NpyArray a = ReadNpy(dir + name + "_a.npy"), b = ReadNpy(dir + name + "_b.npy");
  c.a = OperandFromCodes(GetFormat(js["a_format"].get<std::string>()), a.shape[0], a.shape[1], a.data.data());
  c.b = OperandFromCodes(GetFormat(js["b_format"].get<std::string>()), b.shape[0], b.shape[1], b.data.data());
  if (js.contains("scale_format") && !js["scale_format"].is_null()) {
    const ScaleFormat sf = js["scale_format"] == "ue8m0" ? ScaleFormat::kUe8m0 : ScaleFormat::kE4m3;
    const size_t block = js["block"];
    for (bool is_a : {true, false}) {
      const NpyArray s = ReadNpy(dir + name + (is_a ? "_sa.npy" : "_sb.npy"));
      const std::vector<uint32_t> raw(s.data.begin(), s.data.end());
      if (is_a) SetBlockScales(c.a, sf, 1, block, raw.data());
      else SetBlockScales(c.b, sf, block, 1, raw.data());
    }
  }
  if (IsF16Case(js)) {
    const std::vector<uint16_t> c16 = HalfBitsOf(ReadNpy(dir + name + "_c.npy"));
    for (size_t i = 0; i < c16.size(); ++i) c.c.push_back(SourceValueF32(DType::kF16, c16.data(), i));
    c.d16 = HalfBitsOf(ReadNpy(dir + name + "_d.npy"));
  } else {
    c.c = test::FloatsOf(ReadNpy(dir + name + "_c.npy"));
    c.d = test::FloatsOf(ReadNpy(dir + name + "_d.npy"));
  }
  std::ifstream ok(dir + name + "_ok.npy");
  if (ok.good()) c.ok = ReadNpy(dir + name + "_ok.npy").data;
  return c;
}

size_t Mismatches(const Case& c, const std::vector<float>& got) { return test::BitsDiffer(got, c.d, &c.ok); }

// FP16 cases: how many outputs differ from MMA-Sim's FP16 bits (or are no FP16 value), skipping those where
// MMA-Sim raised; the first few are reported.
size_t Mismatches16(const Case& c, const std::vector<float>& got, size_t cols) {
  REQUIRE(got.size() == c.d16.size());
  size_t n = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!c.ok.empty() && c.ok[i] == 0) continue;
    bool exact = false;
    const uint16_t h = Fp16BitsOf(got[i], &exact);
    if (h == c.d16[i] && exact) continue;
    if (n++ < 3)
      UNSCOPED_INFO("output (" << i / cols << ", " << i % cols << "): model " << test::Hex(test::FloatBits(got[i]), 8)
                               << (exact ? " = FP16 " + test::Hex(h, 4) : std::string(" (no FP16 value)"))
                               << ", MMA-Sim FP16 " << test::Hex(c.d16[i], 4));
  }
  return n;
}

}  // namespace

TEST_CASE("gemm: the -mmasim models reproduce MMA-Sim; the default models differ only where zero terms decide",
          "[gemm][mmasim]") {
  const std::string dir = MmaSimDir();
  std::ifstream in(dir + "cases.json");
  REQUIRE(in.good());
  const nlohmann::json js = nlohmann::json::parse(in);
  size_t outputs = 0, zero_rule_cases = 0, default_differs = 0;
  for (const auto& cj : js["cases"]) {
    const std::string name = cj["name"], model = cj["qmx_model"];
    if (kBaseModels.count(model) == 0) continue;  // the models of the next test case
    const Case c = Load(dir, cj);
    INFO(name << " under " << model);
    const std::vector<float> mms = Gemm(c.a, c.b, c.c.data(), AccumModelByName(model + "-mmasim"));
    CHECK(Mismatches(c, mms) == 0);
    const size_t base = Mismatches(c, Gemm(c.a, c.b, c.c.data(), AccumModelByName(model)));
    // The random, wide-range, every-code and special sets hold no zero term that MMA-Sim's rule would
    // lift above the others; the adversarial and probe sets are built around them.
    const bool zero_terms = name.find("_adv") != std::string::npos || name.find("_probe") != std::string::npos;
    if (zero_terms) {
      ++zero_rule_cases;
      default_differs += base > 0;
    } else {
      CHECK(base == 0);
    }
    outputs += c.d.size();
  }
  CHECK(outputs > 30000);
  CHECK(zero_rule_cases >= 10);
  // Every case built around zero terms separates the two rules (so the zero rule is pinned both ways).
  CHECK(default_differs == zero_rule_cases);
}

TEST_CASE("gemm: the Ada, Hopper FP16 and RTX Blackwell models reproduce MMA-Sim", "[gemm][mmasim]") {
  const std::string dir = MmaSimDir();
  std::ifstream in(dir + "cases.json");
  REQUIRE(in.good());
  const nlohmann::json js = nlohmann::json::parse(in);
  std::map<std::string, size_t> cases_of;  // model -> cases replayed
  size_t outputs = 0, f16_outputs = 0;
  for (const auto& cj : js["cases"]) {
    const std::string name = cj["name"], model = cj["qmx_model"];
    if (kBaseModels.count(model) != 0) continue;  // the previous test case's
    INFO(name << " under " << model << (cj.value("extension", false) ? " (MMA-Sim extension)" : ""));
    REQUIRE(kOwnRuleModels.count(model) == 1);  // a model this test knows
    const Case c = Load(dir, cj);
    const std::vector<float> got = Gemm(c.a, c.b, c.c.data(), AccumModelByName(model));
    if (IsF16Case(cj)) {
      CHECK(Mismatches16(c, got, c.b.cols) == 0);
      f16_outputs += got.size();
    } else {
      CHECK(Mismatches(c, got) == 0);
    }
    outputs += got.size();
    ++cases_of[model];
  }
  // golden/gemm-mmasim holds every model's sets (a fresh collection in QMX_MMASIM_DIR must too).
  // The collector writes every model's sets together: each model is replayed on some cases.
  for (const std::string& m : kOwnRuleModels) {
    INFO(m);
    CHECK(cases_of[m] > 0);
  }
  CHECK(f16_outputs > 0);
  CHECK(outputs > f16_outputs);
}

}  // namespace qmx
