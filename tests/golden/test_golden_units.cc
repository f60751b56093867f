// test_golden_units.cc: golden vectors for a design's own dot-product unit (golden gen --unit). The unit
// files replay with 0 mismatches; their alignment cases reach every shift 0 .. F + 3 and equal a fused
// step written out here in doubles (two products cut at the unit, summed, rounded to the unit's width);
// an FP16-accumulating unit gets FP16 C values; a changed expected output fails verify; bad unit
// descriptions are refused before anything is written; the CLI and the manifest carry the units.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/round.h"
#include "qmx/golden.h"
#include "qmx/host_device.h"
#include "qmx/sha256.h"
#include "qmx/testing.h"
#include "support/cli.h"

namespace qmx {
namespace {

using Catch::Matchers::Contains;
using namespace qmx::test;
namespace fs = std::filesystem;

// The case lines of a golden file: its fields, split at spaces.
std::vector<std::vector<std::string>> CaseFields(const std::string& path) {
  std::vector<std::vector<std::string>> out;
  for (const std::string& line : Lines(ReadText(path))) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    size_t p = 0;
    while (p < line.size()) {
      const size_t q = line.find(' ', p);
      f.push_back(line.substr(p, q == std::string::npos ? std::string::npos : q - p));
      if (q == std::string::npos) break;
      p = q + 1;
    }
    out.push_back(f);
  }
  return out;
}

// An element's exponent in the alignment: its own binade, or the format's smallest normal one below it.
int NominalExp(const Format& f, double v) { return std::max(std::ilogb(v), f.Emin()); }

// The step of `fused:step=S,F=f,term=rz,out=rne,bits=w` on two nonzero products, written out: each product
// cut toward zero at 2^(emax - F), emax the larger of their nominal exponents, the cut terms summed exactly
// (doubles hold them), the sum rounded to w significant bits, ties to even; an exact zero is +0.
double TwoTermStep(double p0, int n0, double p1, int n1, int frac_bits, int width) {
  const double unit = std::ldexp(1.0, std::max(n0, n1) - frac_bits);
  const double s = std::trunc(p0 / unit) * unit + std::trunc(p1 / unit) * unit;
  if (s == 0) return 0.0;
  const double q = std::ldexp(1.0, std::ilogb(s) - width + 1);
  return std::nearbyint(s / q) * q;
}

uint8_t Code(const std::string& hex, size_t i) { return static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16)); }

TEST_CASE("golden units: a design's own fused unit, every alignment shift, against the step written out", "[golden]") {
  TempDir d;
  const std::string dir = (d.path / "u").string();
  golden::GenOptions o;
  o.units = {"name=bf16-out a=e4m3 b=e4m3 k=32 scale=ue8m0 block=32 model=fused:step=32,F=12,term=rz,out=rne,bits=8,scale=products",
             "name=wide a=e5m2 b=e4m3 k=64 model=fused:step=16,F=30"};
  const auto entries = golden::Generate(o, dir);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].path == "unit/bf16-out.txt");
  CHECK(entries[1].path == "unit/wide.txt");
  // Only the unit suite, and the manifest records the units.
  CHECK(!fs::exists(fs::path(dir) / "conversions"));
  const nlohmann::json m = nlohmann::json::parse(ReadText(dir + "/manifest.json"));
  CHECK(m.at("units") == nlohmann::json(o.units));
  CHECK(m.at("suites") == nlohmann::json({"unit"}));
  for (golden::Backend b : {golden::Backend::kCpuRef, golden::Backend::kCpuSimd}) {
    golden::VerifyOptions vo;
    vo.backend = b;
    for (const auto& r : golden::Verify(dir, vo)) {
      INFO(r.path);
      CHECK(r.ok());
      CHECK(r.cases > 40);
    }
  }
  // The alignment cases: two nonzero products, C absent, against the step written out.
  const std::string header = Lines(ReadText(dir + "/unit/bf16-out.txt"))[1];
  CHECK_THAT(header, Contains("op=dot") && Contains("unit=bf16-out") && Contains("model=fused:step=32,F=12"));
  std::set<int> shifts;
  size_t checked = 0;
  for (const auto& f : CaseFields(dir + "/unit/bf16-out.txt")) {
    if (f[4] != "-") continue;
    std::vector<std::pair<double, int>> products;
    for (size_t i = 0; i < 32; ++i) {
      const double a = DecodeToDouble(fmt::kE4M3, Code(f[0], i)), b = DecodeToDouble(fmt::kE4M3, Code(f[1], i));
      if (a != 0 && b != 0 && std::isfinite(a) && std::isfinite(b))
        products.emplace_back(a * b, NominalExp(fmt::kE4M3, std::fabs(a)) + NominalExp(fmt::kE4M3, std::fabs(b)));
    }
    if (products.size() != 2 || f[2] != "7f" || f[3] != "7f") continue;  // scales of 1: an alignment case
    const double want = TwoTermStep(products[0].first, products[0].second, products[1].first, products[1].second, 12, 8);
    const uint32_t got = static_cast<uint32_t>(std::stoul(f[5], nullptr, 16));
    INFO(f[0] << " " << f[1] << " d " << f[5]);
    CHECK(got == hd::F32Bits(static_cast<float>(want)));
    shifts.insert(std::ilogb(std::fabs(products[0].first)) - std::ilogb(std::fabs(products[1].first)));
    ++checked;
  }
  CHECK(checked >= 30);
  for (int s = 0; s <= 15; ++s) CHECK(shifts.count(s) == 1);
  // The coverage model finds every class of both units' files hit (its shift classes among them).
  for (const auto& r : golden::Coverage({dir})) {
    CHECK(r.modelled);
    for (const auto& c : r.classes) {
      INFO(r.file << ": " << c.name);
      CHECK(c.hits > 0);
    }
  }
}

TEST_CASE("golden units: an FP16-accumulating unit gets FP16 C values; a changed output fails", "[golden]") {
  TempDir d;
  const std::string dir = (d.path / "u").string();
  golden::GenOptions o;
  o.units = {"name=f16 a=e4m3 b=e4m3 k=64 model=hopper-wgmma-fp8-f16"};
  o.memh = true;
  golden::Generate(o, dir);
  golden::VerifyOptions vo;
  vo.backend = golden::Backend::kCpuRef;
  for (const auto& r : golden::Verify(dir, vo)) CHECK(r.ok());
  size_t with_c = 0;
  for (const auto& f : CaseFields(dir + "/unit/f16.txt")) {
    if (f[4] == "-") continue;
    const float c = hd::F32FromBits(static_cast<uint32_t>(std::stoul(f[4], nullptr, 16)));
    CastOptions co;
    co.saturation = Saturation::kNoSat;
    const uint16_t h = static_cast<uint16_t>(ConvertF32(c, fmt::kFP16, co));
    CHECK(hd::F32Bits(SourceValueF32(DType::kF16, &h, 0)) == hd::F32Bits(c));
    ++with_c;
  }
  CHECK(with_c > 20);
  CHECK(fs::exists(fs::path(dir) / "unit" / "f16.memh"));
  // One expected output's last bit changed (and the manifest's hash with it): verify names the line.
  std::vector<std::string> lines = Lines(ReadText(dir + "/unit/f16.txt"));
  REQUIRE(lines.size() > 10);
  std::string& line = lines[10];
  const size_t d_end = line.rfind(' ');  // ... d flags: d's last digit sits just before the last space
  line[d_end - 1] = "0123456789abcdef"[std::stoi(line.substr(d_end - 1, 1), nullptr, 16) ^ 1];
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  WriteText(dir + "/unit/f16.txt", text);
  nlohmann::json m = nlohmann::json::parse(ReadText(dir + "/manifest.json"));
  for (auto& f : m["files"])
    if (f["path"] == "unit/f16.txt") f["sha256"] = Sha256Hex(text);
  WriteText(dir + "/manifest.json", m.dump(1));
  uint64_t bad = 0;
  for (const auto& r : golden::Verify(dir, vo)) {
    bad += r.mismatches;
    if (r.mismatches) CHECK(r.first.at(0).line == 11);
  }
  CHECK(bad == 1);
}

TEST_CASE("golden units: block scales of other narrow formats (AMD gfx1250's E5M3, UE4M3)", "[golden]") {
  TempDir d;
  const std::string dir = (d.path / "u").string();
  golden::GenOptions o;
  o.units = {"name=gfx a=e2m1 b=e2m1 k=64 scale=ue5m3 block=16 model=blackwell-mxf4nvf4",
             "name=ue4 a=e4m3 b=e4m3 k=64 scale=ue4m3 block=32 model=blackwell-mxf8f6f4"};
  golden::Generate(o, dir);
  golden::VerifyOptions vo;
  vo.backend = golden::Backend::kCpuRef;
  for (const auto& r : golden::Verify(dir, vo)) {
    INFO(r.path);
    CHECK(r.ok());
    CHECK(r.cases > 100);
  }
  for (const auto& r : golden::Coverage({dir})) {
    INFO(r.file);
    for (const auto& c : r.classes) {
      INFO(c.name);
      CHECK(c.hits > 0);
    }
  }
  // Every scale code is one of the format's: positive (ue5m3's are 0x01 .. 0xFE), zero or its NaN, and the
  // extremes are there.
  const Format ue5m3 = ParseFormat("ue5m3");
  std::set<uint32_t> seen;
  for (const auto& f : CaseFields(dir + "/unit/gfx.txt"))
    for (int side = 2; side < 4; ++side) {
      REQUIRE(f[side].size() == 8);  // 4 blocks of 16, 2 hex digits each
      for (size_t i = 0; i < 4; ++i) {
        const uint32_t code = static_cast<uint32_t>(std::stoul(f[side].substr(2 * i, 2), nullptr, 16));
        CHECK(!std::signbit(DecodeToDouble(ue5m3, code)));
        seen.insert(code);
      }
    }
  CHECK(seen.count(0x00) == 1);  // a zero scale
  CHECK(seen.count(0xFE) == 1);  // the largest, 114688
  CHECK(seen.count(0xFF) == 1);  // NaN
  CHECK(seen.count(0x78) == 1);  // 1.0
}

TEST_CASE("golden units: bad unit descriptions are refused before anything is written", "[golden][cli]") {
  TempDir d;
  const std::string out = (d.path / "u").string();
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"name=x a=e4m3 b=e4m3 k=64", "'model' is missing"},
      {"name=x a=e4m3 b=e4m3 k=64 model=nope", "nope"},
      {"name=x a=e4m3 b=e4m3 k=64 model=fused:step=32,F=99", "F"},
      {"name=x a=e4m3 b=e4m3 k=64 scale=ue8m0 block=32 model=fused:step=32,F=12", "never promotes"},
      {"name=x a=fp16 b=e4m3 k=64 model=exact", "8 bits or fewer"},
      {"name=x a=e9m9 b=e4m3 k=64 model=exact", "e9m9"},
      {"name=x a=e4m3 b=e4m3 k=0 model=exact", "k must be 1..1048576"},
      {"name=x a=e4m3 b=e4m3 k=64 scale=ue8m0 block=48 model=exact", "block must be a length that divides k=64"},
      {"name=x a=e4m3 b=e4m3 k=64 scale=ue8m0 model=exact", "block must be"},
      {"name=x a=e4m3 b=e4m3 k=64 block=32 model=exact", "scale=none has none"},
      {"name=x a=e4m3 b=e4m3 k=64 scale=e8m0 block=32 model=exact", "scale must be none, ue8m0, e4m3, fp32 or a format"},
      {"name=x a=e4m3 b=e4m3 k=64 scale=e2m1:unsigned:bias=4 block=32 model=exact", "holds 1.0"},  // largest 0.75
      {"name=../x a=e4m3 b=e4m3 k=64 model=exact", "a file name"},
      {"name=x a=e4m3 b=e4m3 k=64 model=exact colour=red", "unknown key 'colour'"},
      {"name=x a=e4m3 a=e5m2 b=e4m3 k=64 model=exact", "'a' is given twice"},
      {"name=x a=e4m3 b=e4m3 k=64 model=exact junk", "KEY=VALUE"},
  };
  for (const auto& [unit, why] : bad) {
    INFO(unit);
    golden::GenOptions o;
    o.units = {unit};
    CHECK_THROWS_WITH(golden::Generate(o, out), Contains(why));
    const RunResult r = Run("golden gen --out " + Quote(out) + " --unit " + Quote(unit));
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains(why));
    CHECK(!fs::exists(out));
  }
  golden::GenOptions twice;
  twice.units = {"name=x a=e4m3 b=e4m3 k=32 model=exact", "name=x a=e5m2 b=e5m2 k=32 model=exact"};
  CHECK_THROWS_WITH(golden::Generate(twice, out), Contains("given twice"));
  // The CLI: two units, their files and nothing else; beside a named suite, both.
  RunResult r = Run("golden gen --out " + Quote(out) + " --unit 'name=u1 a=e2m1 b=e2m1 k=64 scale=e4m3 block=16 model=blackwell-mxf4nvf4'" +
                    " --unit 'name=u2 a=e4m3 b=e4m3 k=32 model=fused:step=32,F=25,out=rz' --layout memh");
  CHECK(r.status == 0);
  CHECK_THAT(r.out, Contains("unit/u1.txt") && Contains("unit/u2.txt") && Contains("wrote 2 files"));
  CHECK(fs::exists(fs::path(out) / "unit" / "u2.memh"));
  r = Run("golden verify " + Quote(out) + " --backend cpu-ref");
  CHECK(r.status == 0);
  const std::string both = (d.path / "both").string();
  r = Run("golden gen --suite sr --out " + Quote(both) + " --unit 'name=u1 a=e4m3 b=e4m3 k=32 model=exact'");
  CHECK(r.status == 0);
  CHECK(fs::exists(fs::path(both) / "unit" / "u1.txt"));
  CHECK(fs::exists(fs::path(both) / "sr"));
}

}  // namespace
}  // namespace qmx
