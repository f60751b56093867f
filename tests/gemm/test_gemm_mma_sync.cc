// test_gemm_mma_sync.cc: hopper-mma-sync against the raw mma.sync m16n8k32 FP8 instruction measured on an
// H100 (golden/gemm-mma-sync): random cases over K = 32..256, both FP8 formats, and the zero-row probes;
// and the split=hmma grouping against its neighbours (contiguous halves, other F), which must differ.
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
using test::BitsDiffer;
using test::FloatsOf;

TEST_CASE("gemm: hopper-mma-sync reproduces mma.sync m16n8k32 FP8 measured on an H100", "[gemm][mma-sync]") {
  const std::string dir = std::string(QMX_SOURCE_DIR) + "/golden/gemm-mma-sync/";
  std::ifstream in(dir + "cases.json");
  REQUIRE(in.good());
  const nlohmann::json js = nlohmann::json::parse(in);
  size_t outputs = 0, neighbours_differ = 0;
  for (const auto& c : js["cases"]) {
    const std::string name = c["name"];
    INFO(name);
    const NpyArray a = ReadNpy(dir + name + "_a.npy"), b = ReadNpy(dir + name + "_b.npy");
    const GemmOperand A = OperandFromCodes(GetFormat(c["a_format"].get<std::string>()), a.shape[0], a.shape[1], a.data.data());
    const GemmOperand B = OperandFromCodes(GetFormat(c["b_format"].get<std::string>()), b.shape[0], b.shape[1], b.data.data());
    const std::vector<float> cin = FloatsOf(ReadNpy(dir + name + "_c.npy")), want = FloatsOf(ReadNpy(dir + name + "_d.npy"));
    const AccumModel m = AccumModelByName("hopper-mma-sync");
    CHECK(BitsDiffer(Gemm(A, B, cin.data(), m), want) == 0);
    CHECK(BitsDiffer(GemmRef(A, B, cin.data(), m), want) == 0);
    // Neighbouring models: contiguous halves of 16, F = 24 or 26, RNE output.
    size_t worst = 0;
    for (const char* alt : {"fused:step=16,F=25,term=rz,out=rz,promote=32", "fused:step=16,F=24,term=rz,out=rz,promote=32,split=hmma",
                            "fused:step=16,F=26,term=rz,out=rz,promote=32,split=hmma",
                            "fused:step=16,F=25,term=rz,out=rne,promote=32,split=hmma"})
      worst = std::max(worst, BitsDiffer(Gemm(A, B, cin.data(), AccumModelByName(alt)), want));
    neighbours_differ += worst > 0;
    outputs += want.size();
  }
  CHECK(outputs == 12 * 64 * 32);
  CHECK(neighbours_differ >= 6);
  // Measured on the H100 (gpu/probes/mma_zero_rule.cu, "sub"): E4M3 2^-9 x E5M2 57344 = 112 is the step's
  // largest product; the HMMA sees FP16 values, where 2^-9 is normal, so it aligns at 2^6 and keeps
  // 2^-9 x 2^-8 = 2^-17: D = 0x42e00001. Aligning at E4M3's clamped emin (2^9) would give 0x42e00000.
  {
    std::vector<uint8_t> av(16 * 32, 0), bv(32 * 8, 0);
    for (size_t r = 0; r < 16; ++r) av[r * 32] = av[r * 32 + 1] = 0x01;
    for (size_t j = 0; j < 8; ++j) bv[j] = 0x7B, bv[8 + j] = 0x1C;
    const std::vector<float> d = Gemm(OperandFromCodes(fmt::kE4M3, 16, 32, av.data()), OperandFromCodes(fmt::kE5M2, 32, 8, bv.data()),
                                      nullptr, AccumModelByName("hopper-mma-sync"));
    uint32_t got;
    std::memcpy(&got, &d[0], 4);
    CHECK(got == 0x42e00001u);
  }
  // Zero rows beside a tiny C: D = C (C enters by an FADD after the HMMAs; -0 + 0 = +0).
  for (const auto& z : js["zero_probes"]) {
    const auto code = [](const nlohmann::json& h) { return static_cast<uint8_t>(std::stoul(h.get<std::string>(), nullptr, 16)); };
    const std::vector<uint8_t> av(16 * 32, code(z["a"])), bv(32 * 8, code(z["b"]));
    const uint32_t cb = static_cast<uint32_t>(std::stoul(z["c"].get<std::string>(), nullptr, 16));
    float cf;
    std::memcpy(&cf, &cb, 4);
    const std::vector<float> cin(16 * 8, cf);
    const std::vector<float> d = Gemm(OperandFromCodes(fmt::kE4M3, 16, 32, av.data()), OperandFromCodes(fmt::kE4M3, 32, 8, bv.data()),
                                      cin.data(), AccumModelByName("hopper-mma-sync"));
    uint32_t got;
    std::memcpy(&got, &d[0], 4);
    INFO("a " << z["a"] << " b " << z["b"] << " c " << z["c"]);
    CHECK(got == static_cast<uint32_t>(std::stoul(z["d"].get<std::string>(), nullptr, 16)));
  }
}

TEST_CASE("gemm: Hopper's FP8 wgmma keeps a tiny C beside zero products (measured on an H100); MMA-Sim's rule "
          "would cut it", "[gemm][mma-sync]") {
  // gpu/probes/wgmma_zero_rule.cu: one wgmma.m64n8k32 e4m3 with every A code a, every B code b and the
  // accumulator registers preset to c. hopper-fp8-fast (one step of 32 here) reproduces every probe; the
  // -mmasim variant, whose zero products sit at -126 + the other operand's exponent, cuts
  // C = 2^-126 + 2^-139 beside 0 x 448 to 2^-126, which the device does not. Any fixed zero exponent at or
  // below -126 fits (a zero term then never exceeds a nonzero C, whose subnormals align at -126, nor an
  // FP8 product of at least 2^-18), so the measurement pins the rule, not the value -133.
  const std::string dir = std::string(QMX_SOURCE_DIR) + "/golden/gemm-mma-sync/";
  std::ifstream in(dir + "cases.json");
  REQUIRE(in.good());
  const nlohmann::json js = nlohmann::json::parse(in);
  const auto hex = [](const nlohmann::json& h) { return static_cast<uint32_t>(std::stoul(h.get<std::string>(), nullptr, 16)); };
  size_t mmasim_differs = 0, probes = 0;
  for (const auto& z : js["wgmma_zero_probes"]) {
    const std::vector<uint8_t> av(32, static_cast<uint8_t>(hex(z["a"]))), bv(32, static_cast<uint8_t>(hex(z["b"])));
    const uint32_t cb = hex(z["c"]);
    float cf;
    std::memcpy(&cf, &cb, 4);
    const GemmOperand A = OperandFromCodes(fmt::kE4M3, 1, 32, av.data()), B = OperandFromCodes(fmt::kE4M3, 32, 1, bv.data());
    uint32_t got, mms;
    const float d = Gemm(A, B, &cf, AccumModelByName("hopper-fp8-fast"))[0];
    const float m = Gemm(A, B, &cf, AccumModelByName("hopper-fp8-fast-mmasim"))[0];
    std::memcpy(&got, &d, 4);
    std::memcpy(&mms, &m, 4);
    INFO("a " << z["a"] << " b " << z["b"] << " c " << z["c"]);
    CHECK(got == hex(z["d"]));
    mmasim_differs += mms != hex(z["d"]);
    ++probes;
  }
  CHECK(probes == 132);
  CHECK(mmasim_differs > 0);
}

}  // namespace qmx
