// test_cli_checkpoint.cc: the CLI on quantized checkpoints: `quantize` writing native safetensors dtypes
// (and U8 on request), `dequantize` decoding every layout bit for bit as the library does, `audit` naming
// the rule that made a tensor, `study` reading a checkpoint's quantized tensor, and the errors.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "qmx/checkpoint.h"
#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/safetensors.h"
#include "support/arrays.h"
#include "support/cli.h"

namespace qmx {
namespace {

using Catch::Matchers::Contains;
using namespace qmx::test;

std::string DtypeOf(const std::string& path, const std::string& name) { return SafetensorsReader(path).Get(name).dtype; }

TEST_CASE("cli: quantize writes native safetensors dtypes; --codes-dtype u8 and --pack keep U8", "[cli][checkpoint]") {
  TempDir d;
  WriteNpy(d / "x.npy", RandomF32({8, 64}, 1));
  struct Case {
    const char* spec;
    const char* codes;
    const char* scales;
  };
  for (const Case& c : {Case{"mxfp8", "F8_E4M3", "F8_E8M0"}, Case{"mxfp8_e5m2", "F8_E5M2", "F8_E8M0"}, Case{"mxfp4", "F4", "F8_E8M0"},
                        Case{"mxfp6_e3m2", "F6_E3M2", "F8_E8M0"}, Case{"mxint8", "I8", "F8_E8M0"}, Case{"nvfp4", "F4", "F8_E4M3"},
                        Case{"fp8-block1x128", "F8_E4M3", "F32"}}) {
    INFO(c.spec);
    const std::string out = d / (std::string(c.spec) + ".safetensors");
    REQUIRE(Run(std::string("quantize --spec ") + c.spec + " --in " + Quote(d / "x.npy") + " --out " + Quote(out) + " --quiet").status == 0);
    CHECK(DtypeOf(out, "x.codes") == c.codes);
    CHECK(DtypeOf(out, "x.scales") == c.scales);
    // dequantize reads the native file back to the values quantize wrote beside it.
    REQUIRE(Run("dequantize --in " + Quote(out) + " --out " + Quote(d / "back.npy")).status == 0);
    const SafetensorsReader r(out);
    CHECK(ReadNpy(d / "back.npy").data == r.Read("x.dequant").data);
    const std::string u8 = d / (std::string(c.spec) + "-u8.safetensors");
    REQUIRE(Run(std::string("quantize --spec ") + c.spec + " --codes-dtype u8 --in " + Quote(d / "x.npy") + " --out " + Quote(u8) + " --quiet").status == 0);
    CHECK(DtypeOf(u8, "x.codes") == "U8");
    CHECK(SafetensorsReader(u8).Read("x.codes").data == r.Read("x.codes").data);
  }
  RunResult bad = Run("quantize --spec mxfp8 --codes-dtype f8 --in " + Quote(d / "x.npy") + " --out " + Quote(d / "y.safetensors"));
  CHECK(bad.status == 1);
  CHECK_THAT(bad.err, Contains("--codes-dtype is native or u8"));
  // 6 x 7 FP6 codes are not whole bytes of F6: the message says how to write them.
  WriteNpy(d / "odd.npy", RandomF32({6, 7}, 2));
  bad = Run("quantize --spec mxfp6_e2m3 --in " + Quote(d / "odd.npy") + " --out " + Quote(d / "odd.safetensors"));
  CHECK(bad.status == 1);
  CHECK_THAT(bad.err, Contains("--codes-dtype u8"));
  CHECK_FALSE(fs::exists(d / "odd.safetensors"));
}

TEST_CASE("cli: quantize --row-scaled writes each row's amax; dequantize, audit and the .npy directory read it back",
          "[cli][checkpoint]") {
  TempDir d;
  // Rows 2^-16 .. 2^12 apart: row scaling keeps the small rows.
  std::vector<float> x(12 * 64);
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(nd(rng), static_cast<int>(i / 64) * 3 - 16);
  WriteNpy(d / "x.npy", F32Array({12, 64}, x));
  const std::string out = d / "row.safetensors";
  RunResult r = Run("quantize --spec nvfp4 --row-scaled --in " + Quote(d / "x.npy") + " --out " + Quote(out) + " --json " + Quote(d / "s.json"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("row-scaled"));
  const SafetensorsReader f(out);
  const QuantizedTensor want = Quantize({DType::kF32, x.data(), 12, 64}, QuantSpecByName("nvfp4-row"));
  const NpyArray la = f.Read("x.line_amax");
  REQUIRE(la.shape == std::vector<size_t>{12});
  CHECK(std::memcmp(la.data.data(), want.line_amax.data(), 48) == 0);
  CHECK(nlohmann::json::parse(ReadText(d / "s.json"))["tensors"][0].contains("line_amax_range"));
  REQUIRE(Run("dequantize --in " + Quote(out) + " --out " + Quote(d / "back.npy")).status == 0);
  std::vector<float> dq(x.size());
  Dequantize(want, dq.data());
  CHECK(std::memcmp(ReadNpy(d / "back.npy").data.data(), dq.data(), dq.size() * 4) == 0);
  CHECK(ReadNpy(d / "back.npy").data == f.Read("x.dequant").data);
  // audit finds that nvfp4 (row-scaled, as stored) reproduces the tensor from its source.
  WriteSafetensors(d / "src.safetensors", {{"x", F32Array({12, 64}, x)}});
  r = Run("audit " + Quote(out) + " --source " + Quote(d / "src.safetensors") + " --json " + Quote(d / "a.json"));
  REQUIRE(r.status == 0);
  CHECK(r.out.find("rule=nvfp4,") != std::string::npos);
  // The .npy directory output holds x.line_amax.npy; refusals name the problem.
  REQUIRE(Run("quantize --spec nvfp4-row --in " + Quote(d / "x.npy") + " --out " + Quote(d / "dir/") + " --quiet").status == 0);
  CHECK(ReadNpy(d / "dir/x.line_amax.npy").data == la.data);
  r = Run("quantize --spec mxfp8 --row-scaled --in " + Quote(d / "x.npy") + " --out " + Quote(d / "bad.safetensors"));
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("row-scaled NVFP4 takes an NVFP4 rule"));
  CHECK_FALSE(fs::exists(d / "bad.safetensors"));
}

TEST_CASE("cli: dequantize decodes a gpt-oss MXFP4 checkpoint; audit names the rule that made it",
          "[cli][checkpoint]") {
  TempDir d;
  const NpyArray src = RandomF32({2, 16, 128}, 3);
  TensorView v;
  v.data = src.data.data();
  v.rows = 32;
  v.cols = 128;
  QuantSpec spec = QuantSpecByName("mxfp4");
  spec.rule = ScaleRule::kOcpFloor;
  const QuantizedTensor q = Quantize(v, spec);
  std::vector<uint8_t> blocks(q.codes.size() / 2);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<uint8_t>(q.codes[2 * i] | (q.codes[2 * i + 1] << 4));
  NpyArray b, s;
  b.dtype = s.dtype = DType::kU8;
  b.shape = {2, 16, 4, 16};
  b.data = blocks;
  s.shape = {2, 16, 4};
  s.data = q.scales;
  const std::string name = "model.layers.0.mlp.experts.down_proj";
  WriteSafetensors(d / "ckpt.safetensors", {{name + "_blocks", b}, {name + "_scales", s}});
  WriteSafetensors(d / "src.safetensors", {{name, src}});

  RunResult r = Run("dequantize --in " + Quote(d / "ckpt.safetensors") + " --out " + Quote(d / "out/"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("gpt-oss-mxfp4"));
  const NpyArray got = ReadNpy(d / ("out/" + name + ".npy"));
  CHECK(got.shape == std::vector<size_t>{2, 16, 128});
  std::vector<float> want(q.codes.size());
  Dequantize(q, want.data());
  CHECK(std::memcmp(got.data.data(), want.data(), got.data.size()) == 0);

  r = Run("audit " + Quote(d / "ckpt.safetensors") + " --source " + Quote(d / "src.safetensors") + " --json " + Quote(d / "a.json"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("rule=ocp-floor"));
  const auto j = nlohmann::json::parse(ReadText(d / "a.json"));
  const auto& t = j["tensors"][0];
  CHECK(t["layout"] == "gpt-oss-mxfp4");
  CHECK(t["source"] == d / "src.safetensors:" + name);
  bool ocp = false, ceil_differs = false;
  for (const auto& c : t["candidates"]) {
    if (c["name"] == "rule=ocp-floor") ocp = c["reproduces"].get<bool>();
    if (c["name"] == "rule=ceil") ceil_differs = !c["reproduces"].get<bool>() && c.contains("first_difference");
  }
  CHECK(ocp);
  CHECK(ceil_differs);
  CHECK(t["stats"]["elements"] == 4096);

  // study reads the checkpoint's quantized tensor by its logical name, decoded.
  r = Run("study error --spec mxfp8 --input " + Quote(d / ("ckpt.safetensors:" + name)) + " --quiet --json " + Quote(d / "e.json"));
  REQUIRE(r.status == 0);
  CHECK(nlohmann::json::parse(ReadText(d / "e.json"))["records"][0]["rows"] == 32);
}

TEST_CASE("cli: dequantize and audit refuse files without quantized tensors and names they do not hold",
          "[cli][checkpoint]") {
  TempDir d;
  WriteSafetensors(d / "plain.safetensors", {{"w", RandomF32({4, 4}, 4)}});
  RunResult r = Run("dequantize --in " + Quote(d / "plain.safetensors") + " --out " + Quote(d / "o/"));
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("holds no quantized tensor in a known layout"));
  r = Run("audit " + Quote(d / "plain.safetensors"));
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("holds no quantized tensor"));
  WriteNpy(d / "x.npy", RandomF32({4, 32}, 5));
  REQUIRE(Run("quantize --spec mxfp8 --in " + Quote(d / "x.npy") + " --out " + Quote(d / "q.safetensors") + " --quiet").status == 0);
  r = Run("dequantize --in " + Quote(d / "q.safetensors") + " --tensor nope --out " + Quote(d / "n.npy"));
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("no quantized tensor 'nope'"));
  r = Run("audit " + Quote(d / "q.safetensors") + " --json " + Quote(d / "q.safetensors"));
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("is the input file"));
}

TEST_CASE("cli: audit --convert says which tensors convert exactly and writes them only then", "[cli][checkpoint]") {
  TempDir d;
  // A gpt-oss MXFP4 tensor and an FP8 per-tensor one in one file.
  const NpyArray src = RandomF32({32, 128}, 7);
  TensorView v;
  v.data = src.data.data();
  v.rows = 32;
  v.cols = 128;
  const QuantizedTensor q = Quantize(v, QuantSpecByName("mxfp4"));
  std::vector<uint8_t> blocks(q.codes.size() / 2);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<uint8_t>(q.codes[2 * i] | (q.codes[2 * i + 1] << 4));
  NpyArray b, s, w8;
  b.dtype = s.dtype = w8.dtype = DType::kU8;
  b.shape = {32, 4, 16};
  b.data = blocks;
  s.shape = {32, 4};
  s.data = q.scales;
  w8.shape = {16, 64};
  for (int i = 0; i < 16 * 64; ++i) w8.data.push_back(static_cast<uint8_t>((i * 37) % 256 == 0x7F ? 0x01 : (i * 37) % 256));
  WriteSafetensorsTyped((d / "ckpt.safetensors").c_str(),
                        {{"moe.w_blocks", b, ""}, {"moe.w_scales", s, ""}, {"lin.weight", w8, "F8_E4M3"},
                         {"lin.weight_scale", F32Array({}, {0.25f}), ""}},
                        {});
  const std::string ck = Quote(d / "ckpt.safetensors");

  RunResult r = Run("audit " + ck + " --convert 'mxfp4->mxfp8' --converted " + Quote(d / "mx8.safetensors") + " --json " +
                    Quote(d / "c.json"));
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("moe.w") && Contains("yes") && !Contains("lin.weight"));
  const auto j = nlohmann::json::parse(ReadText(d / "c.json"));
  CHECK(j["exact"] == true);
  CHECK(j["tensors"].size() == 1);
  CHECK(j["tensors"][0]["inexact_elements"] == 0);
  // The converted file decodes to the same values, bit for bit.
  r = Run("dequantize --in " + Quote(d / "mx8.safetensors") + " --out " + Quote(d / "mx8/"));
  REQUIRE(r.status == 0);
  std::vector<float> want(q.codes.size());
  Dequantize(q, want.data());
  const NpyArray got = ReadNpy(d / "mx8/moe.w.npy");
  REQUIRE(got.data.size() == want.size() * 4);
  CHECK(std::memcmp(got.data.data(), want.data(), got.data.size()) == 0);

  // E4M3 into E4M3FNUZ: exact with the factor 2, written; without it the values move and nothing is written.
  r = Run("audit " + ck + " --convert 'e4m3->e4m3fnuz' --factor 2 --converted " + Quote(d / "fnuz.safetensors"));
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Contains("wrote"));
  CHECK(SafetensorsReader((d / "fnuz.safetensors").c_str()).Get("lin.weight.codes").shape == std::vector<size_t>{16, 64});
  r = Run("audit " + ck + " --convert 'e4m3->e4m3fnuz' --converted " + Quote(d / "bad.safetensors") + " --json " + Quote(d / "b.json"));
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("not written, the conversion changes values of lin.weight"));
  CHECK(!std::filesystem::exists(d / "bad.safetensors"));
  CHECK(nlohmann::json::parse(ReadText(d / "b.json"))["tensors"][0]["inexact_elements"].get<uint64_t>() > 0);

  // What it refuses.
  r = Run("audit " + ck + " --convert mxfp4");
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("expected FROM->TO"));
  r = Run("audit " + ck + " --convert 'nvfp4->mxfp8'");
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("no quantized tensor of"));
  r = Run("audit " + ck + " --factor 2");
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("go with --convert"));
  r = Run("audit " + ck + " --convert 'mxfp4->mxfp8' --factor 2");
  CHECK(r.status == 1);
  CHECK_THAT(r.err, Contains("one FP32 scale"));
}

}  // namespace
}  // namespace qmx
