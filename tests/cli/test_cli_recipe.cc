// test_cli_recipe.cc: `qmx-sim recipe` end to end: the table and files (identical bytes on another thread
// count), CSV values equal to the library's on tensors from .npy files, the sequence mode's per-step CSV,
// the recipe plans, and clear errors with nothing written.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qmx/io.h"
#include "qmx/recipe.h"
#include "support/cli.h"

namespace qmx {
namespace {

using Catch::Matchers::Contains;
using namespace qmx::test;

// The CSV as one map per row.
std::vector<std::map<std::string, std::string>> Csv(const std::string& text) {
  const std::vector<std::string> lines = Lines(text);
  std::vector<std::map<std::string, std::string>> rows;
  if (lines.empty()) return rows;
  const std::vector<std::string> head = CsvFields(lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> f = CsvFields(lines[i]);
    std::map<std::string, std::string> row;
    for (size_t j = 0; j < head.size() && j < f.size(); ++j) row[head[j]] = f[j];
    rows.push_back(row);
  }
  return rows;
}

void SaveNpy(const std::string& path, const std::vector<float>& v, size_t rows, size_t cols) {
  NpyArray a;
  a.dtype = DType::kF32;
  a.shape = {rows, cols};
  a.data.resize(v.size() * 4);
  std::memcpy(a.data.data(), v.data(), a.data.size());
  WriteNpy(path, a);
}

TEST_CASE("cli: recipe prints its table and writes identical CSV/JSON on any thread count", "[cli][recipe]") {
  TempDir d;
  const std::string args = "recipe --m 32 --n 32 --k 64 --quiet";
  const RunResult a = Run(args + " --threads 1 --csv " + Quote(d / "a.csv") + " --json " + Quote(d / "a.json"));
  REQUIRE(a.status == 0);
  CHECK_THAT(a.out, Contains("m=32 n=32 k=64"));
  for (const std::string& r : TrainingRecipeNames()) CHECK_THAT(a.out, Contains(r));
  const RunResult b = Run(args + " --threads 2 --csv " + Quote(d / "b.csv") + " --json " + Quote(d / "b.json"));
  REQUIRE(b.status == 0);
  CHECK(a.out == b.out);
  CHECK(ReadText(d / "a.csv") == ReadText(d / "b.csv"));
  const auto rows = Csv(ReadText(d / "a.csv"));
  CHECK(rows.size() == 3 * TrainingRecipeNames().size());
  CHECK(rows[0].at("recipe") == "bf16");
  CHECK(rows[0].at("gemm") == "fprop");
  CHECK(std::stod(rows[0].at("sqnr_db")) > 40);  // BF16: about 2^-9 relative per operand
  auto ja = nlohmann::json::parse(ReadText(d / "a.json"));
  auto jb = nlohmann::json::parse(ReadText(d / "b.json"));
  CHECK(ja["recipes"].size() == TrainingRecipeNames().size());
  CHECK(ja["recipes"][0]["fprop"]["a"] == "X: bf16 rne");
  CHECK(ja["shape"]["k"] == 64);
  ja.erase("command");
  jb.erase("command");
  CHECK(ja == jb);
}

TEST_CASE("cli: recipe on .npy tensors reports what the library computes", "[cli][recipe]") {
  TempDir d;
  const size_t m = 32, n = 48, k = 64;
  std::vector<float> x(m * k), w(n * k), dy(m * n);
  const LayerGen g = DefaultLayerGen();
  GenerateTensor(g.x, 1, m, k, x.data());
  GenerateTensor(g.w, 2, n, k, w.data());
  GenerateTensor(g.dy, 3, m, n, dy.data());
  SaveNpy(d / "x.npy", x, m, k);
  SaveNpy(d / "w.npy", w, n, k);
  SaveNpy(d / "dy.npy", dy, m, n);
  const LinearInputs in{x.data(), w.data(), dy.data(), m, n, k};
  const LinearReference ref = ComputeLinearReference(in);
  std::string nvfp4_nmse[2];
  for (const char* alpha : {"decode", "te"}) {
    const RunResult r = Run("recipe --recipe mxfp8 nvfp4 --seed 4 --quiet --alpha " + std::string(alpha) + " --x " +
                            Quote(d / "x.npy") + " --w " + Quote(d / "w.npy") + " --dy " + Quote(d / "dy.npy") + " --csv " +
                            Quote(d / "r.csv") + " --json " + Quote(d / "r.json"));
    REQUIRE(r.status == 0);
    const auto rows = Csv(ReadText(d / "r.csv"));
    REQUIRE(rows.size() == 6);
    CHECK(nlohmann::json::parse(ReadText(d / "r.json")).value("alpha", "decode") == alpha);
    RecipeOptions o;
    o.seed = 4;
    o.alpha = ParseAlphaRule(alpha);
    size_t row = 0;
    for (const char* name : {"mxfp8", "nvfp4"}) {
      RecipeState st;
      const RecipeStepResult res = RunRecipeStep(TrainingRecipeByName(name), in, ref, st, o);
      for (const RecipeGemmResult& gr : res.gemms) {
        INFO(name << " " << LinearGemmName(gr.which) << " --alpha " << alpha);
        CHECK(rows[row].at("recipe") == name);
        CHECK(std::stod(rows[row].at("sqnr_db")) == gr.error.SqnrDb());
        CHECK(std::stod(rows[row].at("nmse")) == gr.error.Nmse());
        CHECK(std::stoull(rows[row].at("a_saturated")) == gr.a.saturated);
        if (row == 3) nvfp4_nmse[std::string(alpha) == "te"] = rows[row].at("nmse");
        ++row;
      }
    }
  }
  CHECK(nvfp4_nmse[0] != nvfp4_nmse[1]);  // TE's alpha moves nvfp4's FPROP output
}

TEST_CASE("cli: recipe --steps writes one row per step, recipe and GEMM", "[cli][recipe]") {
  TempDir d;
  const RunResult r = Run("recipe --steps 4 --m 32 --n 32 --k 64 --recipe fp8-delayed mxfp8 --spike-rate 1 "
                          "--spike-gain 16 --amax-history 2 --quiet --csv " + Quote(d / "s.csv"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("sequence of 4 steps"));
  CHECK_THAT(r.out, Contains("4 spike step(s)"));
  CHECK_THAT(r.out, Contains("worst SQNR dB"));
  const auto rows = Csv(ReadText(d / "s.csv"));
  REQUIRE(rows.size() == 4 * 2 * 3);
  for (const auto& row : rows) {
    CHECK(row.at("spike") == "1");
    CHECK(std::stod(row.at("kurt_x")) > 1);
    if (row.at("recipe") == "mxfp8") CHECK(std::stod(row.at("delayed_scale_x")) == 0);
  }
  // Step 0 of fp8-delayed starts from a fresh history: scale 1.
  CHECK(rows[0].at("recipe") == "fp8-delayed");
  CHECK(std::stod(rows[0].at("delayed_scale_x")) == 1);
  CHECK(rows[6].at("step") == "1");
  CHECK(std::stod(rows[6].at("delayed_scale_x")) < 1);
}

TEST_CASE("cli: recipe --list prints each recipe's plan", "[cli][recipe]") {
  const RunResult r = Run("recipe --list --recipe nvfp4 fp8-blockwise");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("rht:16"));
  CHECK_THAT(r.out, Contains("16x16"));
  CHECK_THAT(r.out, Contains("128x128 fp32-pow2"));
  CHECK_THAT(r.out, Contains("hopper-fp8-vec"));
}

TEST_CASE("cli: recipe errors name the problem, exit 1 and write nothing", "[cli][recipe]") {
  TempDir d;
  std::vector<float> x(8 * 16, 1.0f), w(4 * 16, 1.0f), dy(8 * 5, 1.0f);
  SaveNpy(d / "x.npy", x, 8, 16);
  SaveNpy(d / "w.npy", w, 4, 16);
  SaveNpy(d / "dy.npy", dy, 8, 5);
  TempDir out;
  const std::string o = " --quiet --m 32 --n 32 --k 64 --csv " + Quote(out / "r.csv");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"recipe --recipe fp9" + o, "unknown training recipe 'fp9'"},
      {"recipe --accum hopper-fp9" + o, "unknown accumulation model 'hopper-fp9'"},
      {"recipe --x " + Quote(d / "x.npy") + o, "give all three of --x, --w and --dy"},
      {"recipe --x " + Quote(d / "x.npy") + " --w " + Quote(d / "w.npy") + " --dy " + Quote(d / "dy.npy") + o,
       "--dy is 8 x 5 but must be m x n = 8 x 4"},
      {"recipe --steps 3 --x " + Quote(d / "x.npy") + " --w " + Quote(d / "w.npy") + " --dy " + Quote(d / "x.npy") + o,
       "--steps generates its tensors"},
      {"recipe --recipe quartet --k 48 --quiet --csv " + Quote(out / "r.csv"), "in_features (k) = 48 is not a multiple of 32 (fprop: the Hadamard block of X"},
      {"recipe --amax-algo newest" + o, "--amax-algo is max or most-recent"},
      {"recipe --m 0 --quiet --csv " + Quote(out / "r.csv"), "--m, --n and --k must lie in 1..65536"},
      {"recipe --recipe bf16 --accum hopper-fp8" + o, "bf16 recipe runs under exact or fp32-seq"},
      {"recipe --x-dist cauchy" + o, "unknown distribution 'cauchy'"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const RunResult r = Run(c.args);
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains(c.message));
  }
  CHECK(Listing(out.path).empty());
}

}  // namespace
}  // namespace qmx

namespace qmx {
namespace {

TEST_CASE("cli: bench --suite recipe times a step of every recipe beside Eigen", "[cli][recipe]") {
  using namespace qmx::test;
  const RunResult r = Run("bench --suite recipe --recipe-shape 32 32 64 --gemm-reps 1 --threads 1");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("eigen sgemm x3"));
  CHECK_THAT(r.out, Catch::Matchers::Contains("fp64 reference x3"));
  for (const std::string& name : TrainingRecipeNames()) CHECK_THAT(r.out, Catch::Matchers::Contains("recipe " + name));
  const RunResult bad = Run("bench --suite recipe --recipe-shape 32 32");
  CHECK(bad.status == 1);
  CHECK_THAT(bad.err, Catch::Matchers::Contains("--recipe-shape takes three sizes"));
}

}  // namespace
}  // namespace qmx
