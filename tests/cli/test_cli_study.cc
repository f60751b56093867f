// test_cli_study.cc: `qmx-sim study` end to end: the quickstart's table and files (identical bytes on a
// rerun and on another thread count), CSV values against the library, tensor inputs, clear errors
// with nothing written, and an interrupted sweep leaving no file.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qmx/distributions.h"
#include "qmx/io.h"
#include "qmx/study.h"
#include "qmx/version.h"
#include "support/cli.h"

namespace qmx {
namespace {

using Catch::Matchers::Contains;
using namespace qmx::test;

TEST_CASE("cli: study quickstart prints its table and writes identical CSV/JSON/SVG on any thread count",
          "[cli][study]") {
  TempDir d;
  const std::string args = "study quickstart --rows 32 --cols 512 --quiet --out-dir ";
  const RunResult a = Run(args + Quote(d / "a") + " --threads 1");
  REQUIRE(a.status == 0);
  CHECK_THAT(a.out, Contains("MXFP8 round-down (OCP)"));
  CHECK_THAT(a.out, Contains("MXFP4 + Hadamard 32"));
  CHECK_THAT(a.out, Contains("NVFP4"));
  CHECK_THAT(a.out, Contains("student-t:3"));
  const RunResult b = Run(args + Quote(d / "b") + " --threads 2");
  REQUIRE(b.status == 0);
  for (const char* f : {"quickstart.csv", "quickstart.svg"}) {
    INFO(f);
    const std::string ta = ReadText(d / (std::string("a/") + f));
    CHECK(!ta.empty());
    CHECK(ta == ReadText(d / (std::string("b/") + f)));
  }
  // The JSON differs only in the command line it records.
  auto ja = nlohmann::json::parse(ReadText(d / "a/quickstart.json"));
  auto jb = nlohmann::json::parse(ReadText(d / "b/quickstart.json"));
  ja.erase("command");
  jb.erase("command");
  CHECK(ja == jb);
  // 8 quantizers x 4 inputs, one header line.
  CHECK(Lines(ReadText(d / "a/quickstart.csv")).size() == 33);
  CHECK(Listing(d.path / "a") == std::vector<std::string>{"quickstart.csv", "quickstart.json", "quickstart.svg"});
  const auto j = nlohmann::json::parse(ReadText(d / "a/quickstart.json"));
  CHECK(j["seed"] == 1);
  CHECK(j["version"] == QMX_VERSION);
  CHECK_THAT(j["command"].get<std::string>(), Contains("study quickstart"));
  CHECK(j["records"].size() == 32);
  CHECK(ReadText(d / "a/quickstart.svg").rfind("<svg", 0) == 0);
}

TEST_CASE("study quickstart: the main job writes exactly the committed notebooks-data/quickstart files",
          "[cli][study]") {
  // README's main job writes into notebooks-data/quickstart/; equal bytes keep the checkout clean.
  TempDir d;
  const RunResult r = Run("study quickstart --quiet --out-dir " + Quote(d / "q"));
  REQUIRE(r.status == 0);
  const std::string committed = std::string(QMX_SOURCE_DIR) + "/notebooks-data/quickstart/";
  for (const char* f : {"quickstart.csv", "quickstart.svg"}) {
    INFO(f << " differs from the committed file: regenerate it with `qmx-sim study quickstart` (README's main job)");
    CHECK(ReadText(d / (std::string("q/") + f)) == ReadText(committed + f));
  }
  auto fresh = nlohmann::json::parse(ReadText(d / "q/quickstart.json"));
  auto kept = nlohmann::json::parse(ReadText(committed + "quickstart.json"));
  CHECK(kept["command"] == "qmx-sim study quickstart");  // what the main job records
  fresh.erase("command");
  kept.erase("command");
  INFO("quickstart.json differs from the committed file: regenerate it with `qmx-sim study quickstart`");
  CHECK(fresh == kept);
}

TEST_CASE("study error: CSV values equal the library's study step on the same input", "[cli][study]") {
  TempDir d;
  const RunResult r = Run("study error --spec mxfp4 nvfp4 --transform none hadamard:32 --dist laplace --rows 16 "
                          "--cols 256 --seed 5 --quiet --csv " + Quote(d / "e.csv"));
  REQUIRE(r.status == 0);
  const std::vector<std::string> lines = Lines(ReadText(d / "e.csv"));
  REQUIRE(lines.size() == 5);
  const std::vector<std::string> head = CsvFields(lines[0]);
  const auto col = [&](const std::string& k) { return std::find(head.begin(), head.end(), k) - head.begin(); };
  std::vector<float> x(16 * 256);
  GenerateDist(ParseDist("laplace"), 5, x.data(), x.size());
  size_t row = 1;
  for (const char* spec : {"mxfp4", "nvfp4"})
    for (const char* t : {"none", "hadamard:32"}) {
      StudyMethod m;
      m.spec = QuantSpecByName(spec);
      SetStudyTransform(m, t);
      const StudyOutcome o = RunStudyMethod(x.data(), 16, 256, m);
      const std::vector<std::string> f = CsvFields(lines[row++]);
      INFO(spec << " " << t);
      CHECK(f[col("spec")] == spec);
      CHECK(f[col("transform")] == t);
      CHECK(std::stod(f[col("mse")]) == o.error.Mse());
      CHECK(std::stod(f[col("misalignment")]) == o.misalignment.Misalignment());
      CHECK(std::stoull(f[col("flushed_to_zero")]) == o.stats.flushed_to_zero);
    }
}

TEST_CASE("cli: study error reads .npy tensors; ranges and kurtosis print their tables", "[cli][study]") {
  TempDir d;
  NpyArray a;
  a.dtype = DType::kF32;
  a.shape = {2, 8, 64};
  std::vector<float> v(2 * 8 * 64);
  GenerateDist(ParseDist("student-t:3"), 1, v.data(), v.size());
  a.data.resize(v.size() * 4);
  std::memcpy(a.data.data(), v.data(), a.data.size());
  WriteNpy(d / "act.npy", a);
  RunResult r = Run("study error --spec mxfp8 --input " + Quote(d / "act.npy") + " --quiet --json " + Quote(d / "e.json"));
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(ReadText(d / "e.json"));
  CHECK(j["records"][0]["input"] == "act");
  CHECK(j["records"][0]["rows"] == 16);
  CHECK(j["records"][0]["cols"] == 64);
  CHECK(j["records"][0].contains("scale_histogram"));
  r = Run("study ranges");
  REQUIRE(r.status == 0);
  bool e4m3 = false;
  for (const auto& line : Lines(r.out)) {
    const auto w = Words(line);
    if (!w.empty() && w[0] == "e4m3") e4m3 = std::find(w.begin(), w.end(), "17.81") != w.end();
  }
  CHECK(e4m3);
  r = Run("study kurtosis --dist normal uniform --rows 8 --cols 1024 --spec mxfp8 fp8-tensor-current "
          "--outlier-sweep 10 1000 --quiet --csv " + Quote(d / "k.csv"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("Outlier sweep"));
  CHECK(Lines(ReadText(d / "k.csv")).size() == 5);
  CHECK(Lines(ReadText(d / "k-kurtosis.csv")).size() == 3);
}

TEST_CASE("cli: study errors name the problem, exit 1 and write nothing", "[cli][study]") {
  TempDir d;
  const std::string out = " --quiet --rows 4 --cols 64 --csv " + Quote(d / "x.csv");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"study error --spec mxfp9" + out, "mxfp9"},
      {"study error --dist cauchy" + out, "unknown distribution 'cauchy'"},
      {"study error --transform hadamard:24" + out, "unsupported block size 24"},
      {"study error --rule floorish" + out, "floorish"},
      {"study error --input " + Quote(d / "missing.npy") + out, "missing.npy"},
      {"study error --input " + Quote(d / "x.txt") + out, "not a .npy or .safetensors"},
      {"study error --spec fp8-tensor-current --transform quest" + out, "every combination of the sweep was invalid"},
      {"study error --transform hadamard:128 --cols 64 --rows 4 --quiet --csv " + Quote(d / "x.csv"), "does not divide"},
      {"study error --trials 0" + out, "--trials"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const RunResult r = Run(c.args);
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains(c.message));
  }
  CHECK(Listing(d.path).empty());
}

TEST_CASE("cli: an interrupted study exits with a message and leaves no file", "[cli][study]") {
  TempDir d;
  const std::string cmd = Quote(QMX_CLI_PATH) + " study hadamard --rows 4096 --cols 4096 --quiet --csv " +
                          Quote(d / "h.csv") + " --json " + Quote(d / "h.json") + " 2>" + Quote(d.path.string() + ".err") +
                          " & pid=$!; sleep 1; kill -TERM $pid; wait $pid; echo status=$?";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[128] = {0};
  std::string got;
  while (std::fgets(buf, sizeof buf, p)) got += buf;
  ::pclose(p);
  CHECK_THAT(got, Contains("status=1"));
  CHECK_THAT(ReadText(d.path.string() + ".err"), Contains("interrupted"));
  fs::remove(d.path.string() + ".err");
  CHECK(Listing(d.path).empty());
}

}  // namespace
}  // namespace qmx
