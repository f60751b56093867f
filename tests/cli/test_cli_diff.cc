// test_cli_diff.cc: `convert --profile` and `diff` on the command line against the library: the codes a
// profile gives, the counts of a cast diff and of a quantizer diff, and their errors.
#include <catch2/catch.hpp>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "qmx/cast_profiles.h"
#include "qmx/distributions.h"
#include "qmx/io.h"
#include "qmx/quantize.h"
#include "support/cli.h"

namespace qmx {
namespace {

using Catch::Matchers::Contains;
using namespace qmx::test;

// The code column of `convert` output lines whose first word is `input`.
std::string CodeOf(const std::string& out, const std::string& input) {
  for (const auto& line : Lines(out)) {
    const auto w = Words(line);
    if (w.size() >= 3 && w[0] == input) return w[2];
  }
  return "";
}

TEST_CASE("cli: convert --profile gives each library's codes; the cast options are refused beside it",
          "[cli][profiles]") {
  RunResult r = Run("convert --to ue8m0 --profile pytorch 0 -1 3 0x00400001");
  REQUIRE(r.status == 0);
  CHECK(CodeOf(r.out, "0") == "0x00");
  CHECK(CodeOf(r.out, "-1") == "0x7F");
  CHECK(CodeOf(r.out, "3") == "0x81");
  CHECK(CodeOf(r.out, "0x00400001") == "0x01");
  r = Run("convert --to ue8m0 --profile ml-dtypes 0 -1 3");
  REQUIRE(r.status == 0);
  CHECK(CodeOf(r.out, "0") == "0xFF");
  CHECK(CodeOf(r.out, "-1") == "0xFF");
  r = Run("convert --to e4m3 --profile onnx inf 500 nan");
  REQUIRE(r.status == 0);
  CHECK(CodeOf(r.out, "inf") == "0x7E");
  CHECK(CodeOf(r.out, "500") == "0x7E");
  CHECK(CodeOf(r.out, "nan") == "0x7F");

  TempDir d;
  NpyArray a;
  a.dtype = DType::kF32;
  a.shape = {3, 100};
  std::vector<float> x(300);
  GenerateDist(ParseDist("student-t:2"), 7, x.data(), x.size());
  for (float& v : x) v *= 1e4f;
  a.data.resize(1200);
  std::memcpy(a.data.data(), x.data(), 1200);
  WriteNpy(d / "x.npy", a);
  REQUIRE(Run("convert --to e5m2 --profile pytorch --in " + Quote(d / "x.npy") + " --out " + Quote(d / "c.npy")).status == 0);
  std::vector<uint8_t> want(300);
  CastWithProfile(CastProfile("pytorch", fmt::kE5M2), x.data(), x.size(), want.data());
  const NpyArray got = ReadNpy(d / "c.npy");
  CHECK(got.shape == a.shape);
  CHECK(got.data == want);

  r = Run("convert --to e4m3 --profile ml-dtypes --sat satfinite 1");
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("--profile sets the whole cast; drop --sat"));
  r = Run("convert --to e2m1 --profile pytorch 1");
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("casts to e4m3 e5m2 ue8m0 e4m3fnuz e5m2fnuz, not e2m1"));
}

TEST_CASE("cli: diff counts where two cast profiles or two quantizers disagree", "[cli][profiles]") {
  TempDir d;
  RunResult r = Run("diff --profile ml-dtypes --profile pytorch --to e5m2 --sweep --json " + Quote(d / "c.json"));
  REQUIRE(r.status == 0);
  auto j = nlohmann::json::parse(ReadText(d / "c.json"));
  CHECK(j["elements"] == 393216);
  CHECK(j["differ"] == 2 * (127 * 6 + 5));  // every NaN input: 0x7E against 0x7F
  CHECK(j["by_class"]["nan"] == j["differ"]);
  CHECK(j["examples"][0]["a"] == "0x7E");
  CHECK(j["examples"][0]["b"] == "0x7F");

  r = Run("diff --profile rule=ocp-floor --profile rule=round-up --spec mxfp8 --dist normal --rows 16 --cols 256 --seed 3 --json " +
          Quote(d / "q.json"));
  REQUIRE(r.status == 0);
  j = nlohmann::json::parse(ReadText(d / "q.json"));
  std::vector<float> x(16 * 256);
  GenerateDist(ParseDist("normal"), 3, x.data(), x.size());
  TensorView v;
  v.data = x.data();
  v.rows = 16;
  v.cols = 256;
  QuantSpec a = QuantSpecByName("mxfp8"), b = a;
  a.rule = ScaleRule::kOcpFloor;
  b.rule = ScaleRule::kRoundUp;
  const QuantizedTensor qa = Quantize(v, a), qb = Quantize(v, b);
  uint64_t scales = 0, codes = 0;
  for (size_t i = 0; i < qa.scales.size(); ++i) scales += qa.scales[i] != qb.scales[i];
  for (size_t i = 0; i < qa.codes.size(); ++i) codes += qa.codes[i] != qb.codes[i];
  CHECK(scales > 0);
  CHECK(j["scales_differ"] == scales);
  CHECK(j["codes_differ"] == codes);

  r = Run("diff --profile ml-dtypes --to e4m3 --sweep");
  CHECK(r.status != 0);
  r = Run("diff --profile ml-dtypes --profile pytorch --to e4m3 --spec mxfp8 --sweep");
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("give --to FORMAT"));
  r = Run("diff --profile ocp --profile cuda-host --spec mxfp8 --sweep");
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("--sweep is an input set of cast diffs"));
  r = Run("diff --profile ml-dtypes --profile jax --to e4m3 --sweep");
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("unknown cast profile 'jax'"));
}

}  // namespace
}  // namespace qmx
