// test_gemm_mmasim.cc: the Blackwell and Hopper models against MMA-Sim (microsoft/MMA-Sim, arXiv
// 2511.10909; outputs in golden/gemm-mmasim, written by gpu/scripts/collect_mmasim.py on the GPU host's
// Python). Under MMA-Sim's zero rule (the "-mmasim" models, FusedParams::zero_operands) every output
// MMA-Sim gives is reproduced bit for bit; the default models differ only on the cases built around zero
// terms (zero rows beside large scales, all-zero groups beside C, zero C), which are the documented
// difference of the two rules.
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/round.h"
#include "gemm/gemm_cases.h"

namespace qmx {
namespace {

struct Case {
  GemmOperand a, b;
  std::vector<float> c, d;
  std::vector<uint8_t> ok;  // 0 where MMA-Sim raised instead of giving D
};

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
  c.c = test::FloatsOf(ReadNpy(dir + name + "_c.npy"));
  c.d = test::FloatsOf(ReadNpy(dir + name + "_d.npy"));
  std::ifstream ok(dir + name + "_ok.npy");
  if (ok.good()) c.ok = ReadNpy(dir + name + "_ok.npy").data;
  return c;
}

size_t Mismatches(const Case& c, const std::vector<float>& got) { return test::BitsDiffer(got, c.d, &c.ok); }

}  // namespace

TEST_CASE("gemm: the -mmasim models reproduce MMA-Sim; the default models differ only where zero terms decide",
          "[gemm][mmasim]") {
  const std::string dir = std::string(QMX_SOURCE_DIR) + "/golden/gemm-mmasim/";
  std::ifstream in(dir + "cases.json");
  REQUIRE(in.good());
  const nlohmann::json js = nlohmann::json::parse(in);
  size_t outputs = 0, zero_rule_cases = 0, default_differs = 0;
  for (const auto& cj : js["cases"]) {
    const std::string name = cj["name"], model = cj["qmx_model"];
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

}  // namespace qmx
