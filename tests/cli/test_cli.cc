// test_cli.cc: end-to-end tests of the qmx-sim binary (QMX_CLI_PATH): the format listing, command-line
// conversions, .npy round trips checked bit for bit against the library, clean failures on bad
// input files (exit status, message, no output or temp file left behind) and thread-count
// independence of stochastic rounding.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "qmx/cast_options.h"
#include "qmx/format.h"
#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/safetensors.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "support/arrays.h"
#include "support/cli.h"
#include "support/hex.h"
#if defined(QMX_HAVE_CUDA)
#include "support/gpu.h"
#endif

namespace qmx {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using namespace qmx::test;

NpyArray U16Array(DType dtype, const std::vector<uint16_t>& bits) {
  NpyArray a;
  a.dtype = dtype;
  a.shape = {bits.size()};
  a.data.resize(bits.size() * 2);
  std::memcpy(a.data.data(), bits.data(), a.data.size());
  return a;
}

uint16_t U16At(const NpyArray& a, size_t i) {
  uint16_t v;
  std::memcpy(&v, a.data.data() + 2 * i, 2);
  return v;
}

float F32At(const NpyArray& a, size_t i) {
  float v;
  std::memcpy(&v, a.data.data() + 4 * i, 4);
  return v;
}

// Special values, boundaries of the small formats and a spread of pseudo-random magnitudes.
std::vector<float> TestInputs() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,    -0.0f,   1.0f,     -1.0f,   3.3f,    -7.0f,    0.1f,     448.0f,
                          464.0f,  465.0f,  480.0f,   -500.0f, 57344.0f, 61440.0f, 1e6f,    -1e6f,
                          1e-3f,   -1e-3f,  1e-9f,    2.5f,    0.25f,   0.75f,    5.0f,     -5.0f,
                          6.0f,    7.0f,    7.5f,     28.0f,   30.0f,   1.984375f, 2.0f,    -0.0625f,
                          std::numeric_limits<float>::denorm_min(),   std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),         inf,
                          -inf,    BitsFloat(0x7FC00000u), BitsFloat(0xFFC00000u),
                          BitsFloat(0x7F800001u)};
  uint32_t s = 12345;
  while (v.size() < 64) {
    s = s * 1664525u + 1013904223u;
    // Exponents 2^-20..2^20 with random mantissas and signs.
    const float mant = 1.0f + static_cast<float>(s >> 9) / 8388608.0f;
    const int e = static_cast<int>((s >> 3) % 41) - 20;
    v.push_back(std::ldexp(s & 1 ? -mant : mant, e));
  }
  return v;
}

CastOptions Options(const std::string& round, const std::string& sat = "satfinite", int sr_bits = 8) {
  CastOptions o;
  o.rounding = ParseRounding(round);
  o.saturation = ParseSaturation(sat);
  o.sr_bits = sr_bits;
  return o;
}

// Runs a conversion that must fail with a qmx error naming `name`, leaving out_dir as it was.
void ExpectCleanFailure(const std::string& args, const std::string& name, const fs::path& out_dir) {
  const std::vector<std::string> before = Listing(out_dir);
  const RunResult r = Run(args);
  INFO("qmx-sim " << args << "\n" << r.all());
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("qmx-sim: error:") && Contains(name));
  CHECK(Listing(out_dir) == before);
  for (const std::string& f : Listing(out_dir)) CHECK(f.find(".tmp.") == std::string::npos);
}

TEST_CASE("cli: the binary exists and prints its version", "[cli]") {
  REQUIRE(fs::exists(QMX_CLI_PATH));
  const RunResult r = Run("--version");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains("qmx-sim"));
  // No subcommand is a usage error, not a silent success.
  CHECK(Run("").status != 0);
}

TEST_CASE("cli: an unknown option or subcommand names the closest known one", "[cli]") {
  struct Case {
    std::string args, suggestion;
  };
  const std::vector<Case> cases = {
      {"convert --tp e4m3 1", "'--tp': did you mean '--to'?"},
      {"study error --rul ocp-floor --quiet", "'--rul': did you mean '--rule'?"},
      {"quantize --spec mxfp8 --in x.npy --out y.safetensors --scale-rul ocp-floor", "'--scale-rul': did you mean '--scale-rule'?"},
      {"golden verfy golden/level1", "'verfy': did you mean 'verify'?"},
      {"formts", "'formts': did you mean 'formats'?"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const RunResult r = Run(c.args);
    CHECK(r.status != 0);
    CHECK_THAT(r.err, Contains(c.suggestion));
  }
  // Nothing close: CLI11's message alone.
  const RunResult r = Run("convert --zzzzzzzz e4m3 1");
  CHECK(r.status != 0);
  CHECK_THAT(r.err, !Contains("did you mean"));
}

TEST_CASE("cli: the older spellings of renamed options still work", "[cli]") {
  TempDir d;
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(1.0f + static_cast<float>(i % 7) / 8, static_cast<int>(i % 9) - 4);
  WriteNpy(d / "x.npy", F32Array({2, 32}, x));
  for (const char* rule : {"--rule", "--scale-rule"}) {
    INFO(rule);
    const RunResult r = Run(std::string("quantize --spec mxfp8 ") + rule + " round-up --in " + Quote(d / "x.npy") + " --out " +
                            Quote(d / (std::string(rule + 2) + ".safetensors")));
    CHECK(r.status == 0);
  }
  CHECK(ReadText(d / "rule.safetensors") == ReadText(d / "scale-rule.safetensors"));
  for (const char* in : {"--in", "--input"}) {
    INFO(in);
    const RunResult r = Run(std::string("study error --spec mxfp8 --quiet ") + in + " " + Quote(d / "x.npy") + " --csv " +
                            Quote(d / (std::string(in + 2) + ".csv")));
    CHECK(r.status == 0);
  }
  CHECK(ReadText(d / "in.csv") == ReadText(d / "input.csv"));
}

TEST_CASE("cli: formats lists the registry with derived limits", "[cli]") {
  const RunResult r = Run("formats");
  INFO(r.all());
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : Lines(r.out)) rows.push_back(Words(line));
  for (const char* name : {"e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8", "ue8m0", "bf16", "fp16", "fp32"}) {
    INFO(name);
    int found = 0;
    for (const auto& w : rows) found += !w.empty() && w[0] == name;
    CHECK(found == 1);
  }
  bool e4m3_seen = false;
  for (const auto& w : rows) {
    if (w.empty() || w[0] != "e4m3") continue;
    e4m3_seen = true;
    CHECK(std::find(w.begin(), w.end(), "448") != w.end());
    CHECK(std::find(w.begin(), w.end(), "17.81") != w.end());
  }
  CHECK(e4m3_seen);
}

TEST_CASE("cli: formats show e2m1 prints all 16 codes", "[cli]") {
  const RunResult r = Run("formats show e2m1");
  INFO(r.all());
  REQUIRE(r.status == 0);
  const char* kValues[16] = {"0",  "0.5",  "1",  "1.5",  "2",  "3",  "4",  "6",
                             "-0", "-0.5", "-1", "-1.5", "-2", "-3", "-4", "-6"};
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : Lines(r.out)) {
    std::vector<std::string> w = Words(line);
    if (!w.empty() && w[0].rfind("0x", 0) == 0) rows.push_back(w);
  }
  REQUIRE(rows.size() == 16);
  for (size_t c = 0; c < 16; ++c) {
    INFO("code " << c);
    REQUIRE(rows[c].size() >= 4);
    CHECK(std::strtoul(rows[c][0].c_str(), nullptr, 16) == c);
    CHECK(rows[c][3] == kValues[c]);
  }
}

TEST_CASE("cli: formats show rejects wide and unknown formats", "[cli]") {
  {
    const RunResult r = Run("formats show fp32");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("fp32") && Contains("8 bits or fewer"));
    CHECK(r.out.empty());
  }
  {
    const RunResult r = Run("formats show e9m9x");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("unknown format") && Contains("e9m9x"));
  }
}

// Rows of a values conversion: input -> code.
std::vector<std::pair<std::string, std::string>> Codes(const RunResult& r) {
  std::vector<std::pair<std::string, std::string>> codes;
  for (const std::string& line : Lines(r.out)) {
    const std::vector<std::string> w = Words(line);
    if (w.size() >= 3 && w[0] != "input") codes.emplace_back(w[0], w[2]);
  }
  return codes;
}

TEST_CASE("cli: convert values", "[cli]") {
  SECTION("e2m1 rounds, saturates and maps NaN to +max") {
    const RunResult r = Run("convert --to e2m1 3.3 -7 nan");
    INFO(r.all());
    REQUIRE(r.status == 0);
    const auto codes = Codes(r);
    REQUIRE(codes.size() == 3);
    CHECK(codes[0] == std::make_pair(std::string("3.3"), std::string("0x5")));
    CHECK(codes[1] == std::make_pair(std::string("-7"), std::string("0xF")));
    CHECK(codes[2] == std::make_pair(std::string("nan"), std::string("0x7")));
    CHECK_THAT(Lines(r.out).at(2), Contains("saturated"));
    CHECK_THAT(Lines(r.out).at(3), Contains("invalid"));
  }
  SECTION("e4m3 satfinite and nosat") {
    RunResult r = Run("convert --to e4m3 464");
    INFO(r.all());
    REQUIRE(r.status == 0);
    REQUIRE(Codes(r).size() == 1);
    CHECK(Codes(r)[0].second == "0x7E");
    r = Run("convert --to e4m3 --sat nosat 465");
    INFO(r.all());
    REQUIRE(r.status == 0);
    REQUIRE(Codes(r).size() == 1);
    CHECK(Codes(r)[0].second == "0x7F");
  }
  SECTION("hex input is an fp32 bit pattern") {
    const RunResult r = Run("convert --to e4m3 0x43E00000 0xC3E00000");
    INFO(r.all());
    REQUIRE(r.status == 0);
    const auto codes = Codes(r);
    REQUIRE(codes.size() == 2);
    CHECK(codes[0].second == "0x7E");
    CHECK(codes[1].second == "0xFE");
  }
  SECTION("nosat into e2m1 is rejected") {
    const RunResult r = Run("convert --to e2m1 --sat nosat 1");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("nosat") && Contains("e2m1"));
  }
  SECTION("an unknown rounding mode names the valid ones") {
    const RunResult r = Run("convert --to e4m3 --round nearest 1");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("nearest"));
    for (const char* m : {"rne", "rna", "rz", "ru", "rd", "ro", "sr", "sr-b", "sr-c"}) CHECK_THAT(r.err, Contains(m));
  }
  SECTION("a value that is not a number") {
    const RunResult r = Run("convert --to e4m3 1 abc");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("'abc' is not a number"));
  }
  SECTION("no values and no file") {
    const RunResult r = Run("convert --to e4m3");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("nothing to convert"));
  }
  SECTION("--device: cpu or cuda; cuda converts files of 8-bit-or-narrower formats, without --profile") {
    RunResult r = Run("convert --to e4m3 --device tpu 1");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("--device must be cpu or cuda, not 'tpu'"));
    r = Run("convert --to e4m3 --device cuda 1");
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("--device cuda converts files"));
    r = Run("convert --to e4m3 --device cuda --profile torch 1");
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("--profile casts on the CPU"));
    TempDir dir;
    WriteNpy(dir / "x.npy", NpyArray{DType::kF32, {2}, std::vector<uint8_t>(8, 0)});
    r = Run("convert --to fp16 --device cuda --in " + Quote(dir / "x.npy") + " --out " + Quote(dir / "y.npy"));
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("--device cuda writes codes of 8 bits or fewer; 'fp16' has 16"));
    CHECK(!std::filesystem::exists(dir / "y.npy"));
  }
  SECTION("--out without --in is an error, not silently ignored") {
    TempDir dir;
    const RunResult r = Run("convert --to e4m3 --out " + Quote(dir / "y.npy") + " 1 2");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("--out"));
    CHECK(Listing(dir.path).empty());
  }
}

TEST_CASE("cli: quantize --device cuda writes the CPU's bytes, or says why it cannot", "[cli]") {
  TempDir dir;
  const std::vector<float> x = TestInputs();
  const std::string in = Quote(dir / "x.npy");
  WriteNpy(dir / "x.npy", F32Array({2, x.size() / 2}, x));
  RunResult r = Run("quantize --spec mxfp8 --device tpu --in " + in + " --out " + Quote(dir / "t.safetensors"));
  INFO(r.all());
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("--device must be cpu or cuda, not 'tpu'"));
  r = Run("quantize --spec mxfp8 --device cuda --reference --in " + in + " --out " + Quote(dir / "r.safetensors"));
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("--reference runs on the CPU"));
  bool device = false;
#if defined(QMX_HAVE_CUDA)
  device = qmx::test::GpuPresent();
#endif
  for (const char* spec : {"mxfp8", "nvfp4", "fp8-block128x128"}) {
    const std::string cpu = dir / (std::string(spec) + "-cpu.safetensors");
    const std::string gpu = dir / (std::string(spec) + "-gpu.safetensors");
    REQUIRE(Run(std::string("quantize --quiet --spec ") + spec + " --in " + in + " --out " + Quote(cpu)).status == 0);
    r = Run(std::string("quantize --quiet --device cuda --spec ") + spec + " --in " + in + " --out " + Quote(gpu));
    INFO(spec << ": " << r.all());
    if (device) {
      REQUIRE(r.status == 0);
      CHECK(ReadText(gpu) == ReadText(cpu));
    } else {
      CHECK(r.status == 1);
      CHECK_THAT(r.err, Contains("CUDA") || Contains("device"));
      CHECK(!std::filesystem::exists(gpu));
    }
  }
}

struct Mode {
  std::string round, sat;
  uint64_t seed;
  int sr_bits;
};

TEST_CASE("cli: npy round trip matches the library bit for bit", "[cli]") {
  TempDir dir;
  const std::vector<float> x = TestInputs();
  const std::string in = dir / "x.npy";
  WriteNpy(in, F32Array({8, 8}, x));
  const std::vector<Mode> modes = {{"rne", "satfinite", 0, 8}, {"rna", "satfinite", 0, 8}, {"rz", "satfinite", 0, 8},
                                   {"ru", "satfinite", 0, 8},  {"rd", "satfinite", 0, 8},  {"ro", "satfinite", 0, 8},
                                   {"sr", "satfinite", 7, 8},  {"sr-b", "satfinite", 7, 8}, {"sr-c", "satfinite", 7, 8},
                                   {"sr", "satfinite", 12345, 3}, {"rne", "nosat", 0, 8}, {"sr", "satpropagate", 7, 8}};
  for (const Format& dst : {fmt::kE4M3, fmt::kE5M2, fmt::kE3M2, fmt::kE2M3, fmt::kE2M1, fmt::kInt8, fmt::kUE8M0}) {
    for (const Mode& m : modes) {
      const bool has_special = dst.HasInf() || dst.HasNan();
      if (m.sat != "satfinite" && !has_special) continue;
      const std::string out = dir / "y.npy";
      const std::string args = "convert --to " + std::string(dst.name) + " --round " + m.round + " --sat " + m.sat +
                               " --seed " + std::to_string(m.seed) + " --sr-bits " + std::to_string(m.sr_bits) +
                               " --in " + Quote(in) + " --out " + Quote(out);
      const RunResult r = Run(args);
      INFO("qmx-sim " << args << "\n" << r.all());
      REQUIRE(r.status == 0);
      CHECK_THAT(r.out, Contains("64 elements"));
      const NpyArray y = ReadNpy(out);
      REQUIRE(y.dtype == DType::kU8);
      REQUIRE(y.shape == std::vector<size_t>{8, 8});
      const CastOptions opt = Options(m.round, m.sat, m.sr_bits);
      for (size_t i = 0; i < x.size(); ++i) {
        const uint64_t want = ConvertF32(x[i], dst, opt, RandomBitsForElement(m.seed, i));
        INFO("element " << i << " = " << x[i]);
        CHECK(y.data[i] == want);
      }
    }
  }
  // No temp files left behind by the successful writes either.
  CHECK(Listing(dir.path) == std::vector<std::string>{"x.npy", "y.npy"});
}

TEST_CASE("cli: --nan-payload names the NaN code of an IEEE-style format, and is refused elsewhere", "[cli]") {
  TempDir dir;
  const std::vector<float> x = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(), 1.5f,
                                -0.0f};
  const std::string in = dir / "x.npy", out = dir / "y.npy";
  WriteNpy(in, F32Array({x.size()}, x));
  const RunResult r = Run("convert --to e5m2 --nan-payload quiet --nan-sign positive --in " + Quote(in) + " --out " + Quote(out));
  INFO(r.all());
  REQUIRE(r.status == 0);
  const NpyArray y = ReadNpy(out);
  CHECK(std::vector<uint8_t>(y.data.begin(), y.data.end()) == std::vector<uint8_t>{0x7E, 0x7E, 0x3E, 0x80});
  RunResult bad = Run("convert --to e4m3 --nan-payload quiet nan");
  CHECK(bad.status != 0);
  CHECK_THAT(bad.err, Contains("applies only to IEEE-style formats"));
  bad = Run("convert --to e5m2 --nan-payload canonical nan");
  CHECK(bad.status != 0);
  CHECK_THAT(bad.err, Contains("--nan-payload must be default, quiet or all-ones"));
}

TEST_CASE("cli: --flags-out writes each element's flags, --tininess decides underflow", "[cli]") {
  TempDir dir;
  std::vector<float> x = TestInputs();
  x.push_back(0x1p-6f * (1.0f - 0x1p-5f));  // E4M3: tiny before rounding, not after (RNE reaches 2^-6)
  x.push_back(std::ldexp(1.0f, -12));       // tiny and inexact either way
  const std::string in = dir / "x.npy";
  WriteNpy(in, F32Array({x.size()}, x));
  for (const char* tininess : {"before", "after"}) {
    const std::string out = dir / "y.npy", flags = dir / "f.npy";
    const std::string args = std::string("convert --to e4m3 --tininess ") + tininess + " --in " + Quote(in) + " --out " +
                             Quote(out) + " --flags-out " + Quote(flags);
    const RunResult r = Run(args);
    INFO("qmx-sim " << args << "\n" << r.all());
    REQUIRE(r.status == 0);
    const NpyArray y = ReadNpy(out), f = ReadNpy(flags);
    REQUIRE(f.dtype == DType::kU8);
    REQUIRE(f.shape == std::vector<size_t>{x.size()});
    CastOptions opt;
    opt.tininess = ParseTininess(tininess);
    for (size_t i = 0; i < x.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &x[i], 4);
      const RoundResult want = Convert(fmt::kFP32, bits, fmt::kE4M3, opt);
      INFO("element " << i << " = " << x[i]);
      CHECK(y.data[i] == want.code);
      CHECK(f.data[i] == want.flags);
    }
    const uint8_t tiny_flags = f.data[x.size() - 2];
    CHECK(tiny_flags == (std::string(tininess) == "after" ? kFlagInexact : (kFlagInexact | kFlagUnderflow)));
    CHECK(f.data[x.size() - 1] == (kFlagInexact | kFlagUnderflow));
  }
  // Bad uses: a wrong name, flags without a file, and flags over the input.
  RunResult r = Run("convert --to e4m3 --tininess late 1");
  CHECK(r.status != 0);
  CHECK_THAT(r.err, Contains("--tininess must be before or after, not 'late'"));
  r = Run("convert --to e4m3 --flags-out " + Quote(dir / "f2.npy") + " 1");
  CHECK(r.status != 0);
  CHECK_THAT(r.err, Contains("--flags-out needs --in FILE"));
  r = Run("convert --to e4m3 --in " + Quote(in) + " --out " + Quote(dir / "y2.npy") + " --flags-out " + Quote(in));
  CHECK(r.status != 0);
  CHECK(ReadNpy(in).data.size() == x.size() * 4);  // the input is intact
}

TEST_CASE("cli: golden coverage reports classes hit and missed, and --require-all fails on a miss", "[cli]") {
  TempDir dir;
  const std::string level1 = std::string(QMX_SOURCE_DIR) + "/golden/level1";
  RunResult r = Run("golden coverage " + Quote(level1 + "/conversions") + " --require-all --misses-only --json " +
                    Quote(dir / "cov.json"));
  INFO(r.all());
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("0 missed"));
  const nlohmann::json j = nlohmann::json::parse(ReadText(dir / "cov.json"));
  CHECK(j["missed"] == 0);
  CHECK(j["files"].size() > 400);
  // A file of two cases misses most classes: listed, and --require-all exits 1.
  const std::string f = dir / "two.txt";
  {
    std::ofstream o(f);
    o << "# qmx-golden v1\n# op=convert src=f32 dst=e2m1 round=rne sat=satfinite nan-sign=keep nan-fallback=max "
         "subnormals=keep spec=OCP-MX-1.0 level=1 seed=1 generator=qmx-sim 0.1.0\n3f800000 02 00\n3fa00000 02 01\n";
  }
  r = Run("golden coverage " + Quote(f));
  INFO(r.all());
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("2 cases") && Contains("missed: ") && Contains("in:snan"));
  r = Run("golden coverage " + Quote(f) + " --require-all");
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("--require-all") && Contains("classes missed"));
  // A simulator's log under the file's header.
  {
    std::ofstream o(dir / "sim.log");
    o << "3f800000\n7fc00000\n";
  }
  r = Run("golden coverage --log " + Quote(dir / "sim.log") + " --like " + Quote(f));
  INFO(r.all());
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("sim.log: 2 cases"));
  // Bad uses.
  r = Run("golden coverage --log " + Quote(dir / "sim.log"));
  CHECK(r.status != 0);
  CHECK_THAT(r.err, Contains("--log needs --like"));
  r = Run("golden coverage " + Quote(f) + " --json " + Quote(f));
  CHECK(r.status != 0);
  CHECK_THAT(ReadText(f), Contains("3fa00000 02 01"));  // the input is intact
}

TEST_CASE("cli: --decode writes the FP32 value of each code", "[cli]") {
  TempDir dir;
  const std::vector<float> x = TestInputs();
  const std::string in = dir / "x.npy", out = dir / "d.npy";
  WriteNpy(in, F32Array({64}, x));
  const Format dst = GENERATE(values<Format>({fmt::kE4M3, fmt::kE5M2, fmt::kE2M1, fmt::kInt8, fmt::kUE8M0, fmt::kBF16}));
  CAPTURE(dst.name);
  const std::string args =
      "convert --to " + std::string(dst.name) + " --round sr --seed 7 --decode --in " + Quote(in) + " --out " + Quote(out);
  const RunResult r = Run(args);
  INFO("qmx-sim " << args << "\n" << r.all());
  REQUIRE(r.status == 0);
  const NpyArray y = ReadNpy(out);
  REQUIRE(y.dtype == DType::kF32);
  REQUIRE(y.shape == std::vector<size_t>{64});
  const CastOptions opt = Options("sr");
  for (size_t i = 0; i < x.size(); ++i) {
    const uint64_t code = ConvertF32(x[i], dst, opt, RandomBitsForElement(7, i));
    INFO("element " << i << " = " << x[i] << ", code " << code);
    CHECK(FloatBits(F32At(y, i)) == FloatBits(DecodeToFloat(dst, code)));
  }
}

TEST_CASE("cli: 16-bit destinations keep their .npy dtype", "[cli]") {
  TempDir dir;
  const std::vector<float> x = TestInputs();
  const std::string in = dir / "x.npy", out = dir / "h.npy";
  WriteNpy(in, F32Array({64}, x));
  for (const auto& [dst, dtype] : {std::make_pair(fmt::kFP16, DType::kF16), std::make_pair(fmt::kBF16, DType::kBF16)}) {
    const RunResult r = Run("convert --to " + std::string(dst.name) + " --round rne --in " + Quote(in) + " --out " + Quote(out));
    INFO(r.all());
    REQUIRE(r.status == 0);
    const NpyArray y = ReadNpy(out);
    REQUIRE(y.dtype == dtype);
    for (size_t i = 0; i < x.size(); ++i) {
      INFO("element " << i << " = " << x[i]);
      CHECK(U16At(y, i) == ConvertF32(x[i], dst, Options("rne")));
    }
  }
}

TEST_CASE("cli: fp16 and bf16 inputs", "[cli]") {
  TempDir dir;
  // Every 16-bit pattern, so every class (zeros, subnormals, normals, Inf, NaN) of both formats.
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  const std::string out = dir / "y.npy";
  struct Case {
    const char* file;
    DType dtype;
    const Format& src;
    const char* from;
  };
  const Case cases[] = {{"h.npy", DType::kF16, fmt::kFP16, ""},
                        {"b.npy", DType::kBF16, fmt::kBF16, ""},
                        {"u.npy", DType::kU16, fmt::kBF16, "--from bf16"},
                        {"v.npy", DType::kU16, fmt::kFP16, "--from fp16"}};
  for (const Case& c : cases) {
    const std::string in = dir / c.file;
    WriteNpy(in, U16Array(c.dtype, all));
    for (const char* round : {"rne", "sr"}) {
      const std::string args = std::string("convert --to e4m3 ") + c.from + " --round " + round + " --seed 7 --in " +
                               Quote(in) + " --out " + Quote(out);
      const RunResult r = Run(args);
      INFO("qmx-sim " << args << "\n" << r.all());
      REQUIRE(r.status == 0);
      const NpyArray y = ReadNpy(out);
      REQUIRE(y.dtype == DType::kU8);
      REQUIRE(y.count() == all.size());
      const CastOptions opt = Options(round);
      size_t mismatches = 0, float_mismatches = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        const uint32_t rbits = RandomBitsForElement(7, i);
        mismatches += y.data[i] != Convert(c.src, all[i], fmt::kE4M3, opt, rbits).code;
        // The same value read as FP32 (exact: both formats widen exactly; NaNs differ only in payload).
        const float as_f32 = c.src.name == std::string("bf16") ? BitsFloat(static_cast<uint32_t>(all[i]) << 16)
                                                               : DecodeToFloat(fmt::kFP16, all[i]);
        if (!std::isnan(as_f32)) float_mismatches += y.data[i] != ConvertF32(as_f32, fmt::kE4M3, opt, rbits);
      }
      CHECK(mismatches == 0);
      CHECK(float_mismatches == 0);
    }
  }
  // Raw <u2 bits without --from are ambiguous and refused.
  const RunResult r = Run("convert --to e4m3 --in " + Quote(dir / "u.npy") + " --out " + Quote(dir / "z.npy"));
  INFO(r.all());
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("u.npy") && Contains("--from"));
  CHECK(!fs::exists(dir / "z.npy"));
}

TEST_CASE("cli: bad input files fail cleanly", "[cli]") {
  TempDir dir;
  const fs::path out_dir = dir.path / "out";
  fs::create_directory(out_dir);
  const std::string out = (out_dir / "y.npy").string();
  const std::vector<float> x = TestInputs();
  const std::vector<uint8_t> good = SerializeNpy(F32Array({64}, x));
  auto write_bytes = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = dir / name;
    WriteText(path, std::string(bytes.begin(), bytes.end()));
    return path;
  };

  SECTION("missing file") {
    const std::string in = dir / "missing.npy";
    ExpectCleanFailure("convert --to e4m3 --in " + Quote(in) + " --out " + Quote(out), in, out_dir);
  }
  SECTION("truncated data") {
    const std::string in = write_bytes("trunc.npy", std::vector<uint8_t>(good.begin(), good.end() - 5));
    ExpectCleanFailure("convert --to e4m3 --in " + Quote(in) + " --out " + Quote(out), in, out_dir);
  }
  SECTION("truncated header") {
    const std::string in = write_bytes("trunc_hdr.npy", std::vector<uint8_t>(good.begin(), good.begin() + 30));
    ExpectCleanFailure("convert --to e4m3 --in " + Quote(in) + " --out " + Quote(out), in, out_dir);
  }
  SECTION("text file") {
    const std::string in = dir / "values.txt";
    WriteText(in, "1.0, 2.0, 3.0\n");
    ExpectCleanFailure("convert --to e4m3 --in " + Quote(in) + " --out " + Quote(out), in, out_dir);
  }
  SECTION("big-endian >f4") {
    std::vector<uint8_t> bytes = good;
    const std::string image(bytes.begin(), bytes.end());
    const size_t at = image.find("'<f4'");
    REQUIRE(at != std::string::npos);
    bytes[at + 1] = '>';
    const std::string in = write_bytes("big.npy", bytes);
    ExpectCleanFailure("convert --to e4m3 --in " + Quote(in) + " --out " + Quote(out), in, out_dir);
  }
  SECTION("u8 input") {
    NpyArray a;
    a.dtype = DType::kU8;
    a.shape = {4};
    a.data = {1, 2, 3, 4};
    const std::string in = dir / "u8.npy";
    WriteNpy(in, a);
    ExpectCleanFailure("convert --to e4m3 --in " + Quote(in) + " --out " + Quote(out), in, out_dir);
  }
  SECTION("a failed conversion leaves an existing output file as it was") {
    WriteText(out, "old contents");
    const std::string in = write_bytes("trunc.npy", std::vector<uint8_t>(good.begin(), good.end() - 1));
    ExpectCleanFailure("convert --to e4m3 --in " + Quote(in) + " --out " + Quote(out), in, out_dir);
    CHECK(ReadText(out) == "old contents");
  }
  SECTION("output directory does not exist") {
    const std::string in = write_bytes("x.npy", good);
    const std::string bad_out = (out_dir / "nowhere" / "y.npy").string();
    ExpectCleanFailure("convert --to e4m3 --in " + Quote(in) + " --out " + Quote(bad_out), bad_out, out_dir);
    CHECK(!fs::exists(out_dir / "nowhere"));
  }
  SECTION("--in without --out") {
    const std::string in = write_bytes("x.npy", good);
    const RunResult r = Run("convert --to e4m3 --in " + Quote(in));
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("--out"));
  }
}

TEST_CASE("cli: stochastic rounding output does not depend on the thread count", "[cli]") {
  TempDir dir;
  const size_t n = 100000;
  std::vector<float> x(n);
  uint32_t s = 2024;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = std::ldexp(1.0f + static_cast<float>(s >> 9) / 8388608.0f, static_cast<int>((s >> 3) % 24) - 12) *
           (s & 1 ? -1.0f : 1.0f);
  }
  const std::string in = dir / "x.npy", out1 = dir / "t1.npy", out2 = dir / "t2.npy";
  WriteNpy(in, F32Array({n}, x));
  const std::string args = "convert --to e4m3 --round sr --seed 7 --in " + Quote(in) + " --out ";
  const RunResult r1 = Run(args + Quote(out1), "OMP_NUM_THREADS=1");
  INFO(r1.all());
  REQUIRE(r1.status == 0);
  const RunResult r2 = Run(args + Quote(out2), "OMP_NUM_THREADS=2");
  INFO(r2.all());
  REQUIRE(r2.status == 0);
  const std::string bytes1 = ReadText(out1), bytes2 = ReadText(out2);
  REQUIRE(!bytes1.empty());
  CHECK(bytes1 == bytes2);
  // Same element and flag counts too (the lines differ only in the output name).
  const size_t at1 = r1.out.find(" elements"), at2 = r2.out.find(" elements");
  REQUIRE(at1 != std::string::npos);
  REQUIRE(at2 != std::string::npos);
  CHECK(r1.out.substr(at1 - 6) == r2.out.substr(at2 - 6));
  const NpyArray y = ReadNpy(out2);
  REQUIRE(y.count() == n);
  const CastOptions opt = Options("sr");
  size_t mismatches = 0;
  for (size_t i = 0; i < n; ++i) mismatches += y.data[i] != ConvertF32(x[i], fmt::kE4M3, opt, RandomBitsForElement(7, i));
  CHECK(mismatches == 0);
}


TEST_CASE("cli: quantize a .safetensors checkpoint, dequantize it back, bit for bit with the library",
          "[cli][quantize]") {
  TempDir dir;
  std::vector<float> w(48 * 40), b(40);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * (i % 13 == 0 ? 30.0f : 1.0f);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.01f * static_cast<float>(i) - 0.2f;
  NpyArray tok;
  tok.dtype = DType::kU16;
  tok.shape = {2};
  tok.data = {1, 0, 2, 0};
  WriteSafetensors(dir / "model.safetensors", {{"layer.w", F32Array({48, 40}, w)}, {"layer.b", F32Array({40}, b)}, {"ids", tok}});
  for (const char* spec : {"mxfp8", "nvfp4", "fp8-block1x128", "mxfp4"}) {
    for (const char* axis : {"row", "col"}) {
      const std::string out = dir / (std::string(spec) + axis + ".safetensors");
      const RunResult r = Run("quantize --spec " + std::string(spec) + " --axis " + axis + " --in " + Quote(dir / "model.safetensors") +
                              " --out " + Quote(out) + " --json " + Quote(dir / "s.json") + " --seed 5 --round sr --quiet");
      INFO(spec << " " << axis << "\n" << r.all());
      REQUIRE(r.status == 0);
      SafetensorsReader st(out);
      // Every F32 tensor was quantized; the u16 one was left alone.
      CHECK(st.index().Find("layer.w.codes") != nullptr);
      CHECK(st.index().Find("layer.b.scales") != nullptr);
      CHECK(st.index().Find("ids.codes") == nullptr);
      QuantSpec qs = QuantSpecByName(spec);
      qs.axis = ParseAxis(axis);
      qs.cast.rounding = Rounding::kSrA;
      qs.seed = 5;
      const QuantizedTensor q = Quantize({DType::kF32, w.data(), 48, 40}, qs);
      CHECK(st.Read("layer.w.codes").data == q.codes);
      CHECK(st.Read("layer.w.scales").data == q.scales);
      std::vector<float> dq(w.size());
      Dequantize(q, dq.data());
      const NpyArray written = st.Read("layer.w.dequant");
      CHECK(std::memcmp(written.data.data(), dq.data(), dq.size() * 4) == 0);
      // dequantize reproduces the written dequantized values from codes + scales + metadata.
      const RunResult d = Run("dequantize --in " + Quote(out) + " --tensor layer.w --out " + Quote(dir / "dq.npy"));
      INFO(d.all());
      REQUIRE(d.status == 0);
      CHECK(ReadNpy(dir / "dq.npy").data == written.data);
    }
  }
  CHECK_THAT(ReadText(dir / "s.json"), Contains("scale_histogram") && Contains("saturated") && Contains("sqnr_db"));
}

TEST_CASE("cli: quantize refuses inconsistent specs and bad inputs cleanly", "[cli][quantize]") {
  TempDir dir;
  WriteNpy(dir / "x.npy", F32Array({2, 2}, {1.0f, 2.0f, 3.0f, 4.0f}));
  const fs::path out_dir = dir.path;
  ExpectCleanFailure(
      "quantize --spec nvfp4 --elem int8 --in " + Quote(dir / "x.npy") + " --out " + Quote(dir / "o.safetensors"),
      "float elements", out_dir);
  ExpectCleanFailure("quantize --spec nvfp4 --scale-format ue8m0 --in " + Quote(dir / "x.npy") + " --out " +
                         Quote(dir / "o.safetensors"),
                     "cannot hold NVFP4's block scales", out_dir);
  ExpectCleanFailure("quantize --spec fp8-block1x128 --nan-policy te --in " + Quote(dir / "x.npy") + " --out " + Quote(dir / "o.safetensors"), "UE8M0", out_dir);
  ExpectCleanFailure("quantize --spec mxfp9 --in " + Quote(dir / "x.npy") + " --out " + Quote(dir / "o.safetensors"), "mxfp8", out_dir);
  ExpectCleanFailure("quantize --spec mxfp8 --block 1y32 --in " + Quote(dir / "x.npy") + " --out " + Quote(dir / "o.safetensors"), "--block", out_dir);
  ExpectCleanFailure("quantize --spec mxfp8 --profile pytorch --in " + Quote(dir / "x.npy") + " --out " + Quote(dir / "o.safetensors"), "profile", out_dir);
  ExpectCleanFailure("quantize --spec fp8-delayed --amax-history 1 --history-len 0 --in " + Quote(dir / "x.npy") + " --out " + Quote(dir / "o.safetensors"), "history length", out_dir);
  WriteText(dir / "bad.safetensors", std::string("\x10\0\0\0\0\0\0\0{\"a\":3}", 16));
  const std::vector<std::string> before = Listing(out_dir);
  const RunResult r = Run("quantize --spec mxfp8 --in " + Quote(dir / "bad.safetensors") + " --out " + Quote(dir / "o.safetensors"));
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("bad.safetensors"));
  CHECK(Listing(out_dir) == before);
  const RunResult d = Run("dequantize --in " + Quote(dir / "bad.safetensors") + " --out " + Quote(dir / "d.npy"));
  CHECK(d.status == 1);
}

}  // namespace
}  // namespace qmx
