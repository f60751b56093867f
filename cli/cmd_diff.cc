// cmd_diff.cc: `qmx-sim diff --profile A --profile B`: where two stacks disagree, counted by input class
// and shown in hex. Element casts (--to FORMAT: the cast profiles of qmx/cast_profiles.h) or whole
// quantizers (--spec NAME: library profiles, or rule=NAME, codes and block scales compared).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common/tensor_inputs.h"
#include "qmx/cast_profiles.h"
#include "qmx/distributions.h"
#include "qmx/error.h"
#include "qmx/host_device.h"
#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/version.h"

namespace qmx::cli {
namespace {

using nlohmann::ordered_json;

struct DiffArgs {
  std::vector<std::string> profiles;
  std::string to, spec, in, dist, json;
  size_t rows = 64, cols = 4096;
  uint64_t seed = 1;
  bool sweep = false;
  int examples = 10;
};

std::string Hex(uint32_t v, int digits) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%0*X", digits, v);
  return b;
}

// What kind of input a difference is on: the classes the libraries' rules are written in.
std::string InputClass(float x, double max_finite) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return "inf";
  if (x == 0) return "zero";
  if (std::fpclassify(x) == FP_SUBNORMAL) return "fp32-subnormal";
  if (std::fabs(x) > max_finite) return "above-max";
  return x < 0 ? "negative" : "positive";
}

struct Inputs {
  std::string what;
  std::vector<float> x;
  size_t rows = 0, cols = 0;
};

Inputs LoadInputs(const DiffArgs& a) {
  Inputs in;
  const int given = (a.in.empty() ? 0 : 1) + (a.dist.empty() ? 0 : 1) + (a.sweep ? 1 : 0);
  if (given != 1) throw Error("give exactly one input: --in FILE, --dist D or --sweep");
  if (a.sweep) {
    // golden/casts' input set qmx-casts-v1: every FP32 top half with six low halves.
    const uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
    in.what = "sweep qmx-casts-v1 (every fp32 top half x 6 low halves)";
    in.x.resize(65536 * 6);
    for (size_t i = 0; i < in.x.size(); ++i) {
      const uint32_t b = static_cast<uint32_t>(i / 6) << 16 | lows[i % 6];
      std::memcpy(&in.x[i], &b, 4);
    }
    in.rows = 1;
    in.cols = in.x.size();
  } else if (!a.dist.empty()) {
    if (a.rows == 0 || a.cols == 0 || a.rows > (1u << 20) || a.cols > (1u << 24) || a.rows * a.cols > (size_t{1} << 28))
      throw Error("--rows and --cols must be positive with at most 2^28 elements");
    const DistSpec d = ParseDist(a.dist);
    in.what = DescribeDist(d) + " (" + std::to_string(a.rows) + " x " + std::to_string(a.cols) + ", seed " + std::to_string(a.seed) + ")";
    in.x.resize(a.rows * a.cols);
    GenerateDist(d, a.seed, in.x.data(), in.x.size());
    in.rows = a.rows;
    in.cols = a.cols;
  } else {
    std::vector<Input> t = LoadTensorFile(a.in, "--in");
    if (t.size() != 1) throw Error("--in '" + a.in + "' holds " + std::to_string(t.size()) + " tensors; name one as FILE.safetensors:NAME");
    in.what = a.in;
    in.x = std::move(t[0].data);
    in.rows = t[0].rows;
    in.cols = t[0].cols;
  }
  return in;
}

void Report(const DiffArgs& a, const ordered_json& j) {
  if (!a.json.empty()) WriteFileAtomic(a.json, j.dump(2) + "\n");
}

void DiffCasts(const DiffArgs& a, const Inputs& in) {
  const Format dst = ParseFormat(a.to);
  const CastProfile pa(a.profiles[0], dst), pb(a.profiles[1], dst);
  const double maxv = Limits(dst).max_finite;
  std::map<std::string, uint64_t> by_class;
  uint64_t differ = 0;
  ordered_json examples = ordered_json::array();
  std::printf("%s vs %s, fp32 -> %s, %zu inputs: %s\n", pa.name().c_str(), pb.name().c_str(), dst.name, in.x.size(), in.what.c_str());
  std::printf("  %-10s %-12s %-16s %-14s %-10s %-10s\n", "index", "input bits", "input", "class", pa.name().c_str(), pb.name().c_str());
  for (size_t i = 0; i < in.x.size(); ++i) {
    const uint8_t ca = pa(in.x[i]), cb = pb(in.x[i]);
    if (ca == cb) continue;
    const std::string cls = InputClass(in.x[i], maxv);
    ++by_class[cls];
    if (differ++ < static_cast<uint64_t>(a.examples)) {
      std::printf("  %-10zu %-12s %-16.9g %-14s %-10s %-10s\n", i, Hex(hd::F32Bits(in.x[i]), 8).c_str(), in.x[i], cls.c_str(), Hex(ca, 2).c_str(),
                  Hex(cb, 2).c_str());
      examples.push_back({{"index", i}, {"input", Hex(hd::F32Bits(in.x[i]), 8)}, {"class", cls}, {"a", Hex(ca, 2)}, {"b", Hex(cb, 2)},
                          {"a_value", DecodeToDouble(dst, ca)}, {"b_value", DecodeToDouble(dst, cb)}});
    }
  }
  std::printf("%llu of %zu differ (%.4f%%)", static_cast<unsigned long long>(differ), in.x.size(),
              in.x.empty() ? 0.0 : 100.0 * static_cast<double>(differ) / static_cast<double>(in.x.size()));
  for (const auto& [c, n] : by_class) std::printf("; %s %llu", c.c_str(), static_cast<unsigned long long>(n));
  std::printf("\n");
  ordered_json j;
  j["generator"] = "qmx-sim " QMX_VERSION;
  j["mode"] = "cast";
  j["a"] = pa.name();
  j["b"] = pb.name();
  j["format"] = dst.name;
  j["inputs"] = in.what;
  j["elements"] = in.x.size();
  j["differ"] = differ;
  j["by_class"] = by_class;
  j["examples"] = examples;
  Report(a, j);
}

// A side of a quantizer diff: a library profile, "rule=NAME", or "spec" (the recipe as named).
QuantSpec SideSpec(const std::string& base, const std::string& side) {
  QuantSpec s = QuantSpecByName(base);
  if (side == "spec") return s;
  if (side.rfind("rule=", 0) == 0) {
    s.rule = ParseScaleRule(side.substr(5));
    if (s.rule == ScaleRule::kMaxFinite) s.nan = NanPolicy::kIgnore;
  } else {
    ApplyProfile(s, side);
  }
  ValidateQuantSpec(s);
  return s;
}

void DiffSpecs(const DiffArgs& a, const Inputs& in) {
  const QuantSpec sa = SideSpec(a.spec, a.profiles[0]), sb = SideSpec(a.spec, a.profiles[1]);
  TensorView v;
  v.data = in.x.data();
  v.rows = in.rows;
  v.cols = in.cols;
  const QuantizedTensor qa = Quantize(v, sa), qb = Quantize(v, sb);
  const size_t sbytes = ScaleBytes(ScaleFormatOf(sa.rule));
  if (ScaleFormatOf(sb.rule) != ScaleFormatOf(sa.rule) || qa.scales.size() != qb.scales.size())
    throw Error("the two sides store different scale formats or grids: compare them with dequantize instead");
  const BlockExtent be = ResolveBlock(sa, in.rows, in.cols);
  uint64_t scale_differ = 0, code_differ = 0, code_differ_same_scale = 0;
  std::vector<bool> block_differs(qa.scale_rows * qa.scale_cols);
  for (size_t b = 0; b < block_differs.size(); ++b) {
    block_differs[b] = std::memcmp(&qa.scales[b * sbytes], &qb.scales[b * sbytes], sbytes) != 0;
    scale_differ += block_differs[b];
  }
  std::printf("%s vs %s on %s, %zu x %zu: %s\n  A: %s\n  B: %s\n", a.profiles[0].c_str(), a.profiles[1].c_str(), a.spec.c_str(), in.rows,
              in.cols, in.what.c_str(), DescribeSpec(sa).c_str(), DescribeSpec(sb).c_str());
  std::printf("  %-10s %-10s %-12s %-16s %-12s %-12s %-6s %-6s\n", "row", "col", "input bits", "input", "scale A", "scale B", "A", "B");
  ordered_json examples = ordered_json::array();
  for (size_t r = 0; r < in.rows; ++r)
    for (size_t c = 0; c < in.cols; ++c) {
      const size_t i = r * in.cols + c;
      if (qa.codes[i] == qb.codes[i]) continue;
      const size_t blk = (r / be.rows) * qa.scale_cols + c / be.cols;
      ++code_differ;
      code_differ_same_scale += !block_differs[blk];
      if (code_differ > static_cast<uint64_t>(a.examples)) continue;
      uint32_t sa_bits = 0, sb_bits = 0;
      std::memcpy(&sa_bits, &qa.scales[blk * sbytes], sbytes);
      std::memcpy(&sb_bits, &qb.scales[blk * sbytes], sbytes);
      std::printf("  %-10zu %-10zu %-12s %-16.9g %-12s %-12s %-6s %-6s\n", r, c, Hex(hd::F32Bits(in.x[i]), 8).c_str(), in.x[i],
                  Hex(sa_bits, static_cast<int>(2 * sbytes)).c_str(), Hex(sb_bits, static_cast<int>(2 * sbytes)).c_str(),
                  Hex(qa.codes[i], 2).c_str(), Hex(qb.codes[i], 2).c_str());
      examples.push_back({{"row", r}, {"col", c}, {"input", Hex(hd::F32Bits(in.x[i]), 8)}, {"scale_a", Hex(sa_bits, static_cast<int>(2 * sbytes))},
                          {"scale_b", Hex(sb_bits, static_cast<int>(2 * sbytes))}, {"a", Hex(qa.codes[i], 2)}, {"b", Hex(qb.codes[i], 2)}});
    }
  std::printf("scales: %llu of %zu blocks differ; codes: %llu of %zu elements differ (%llu of them in blocks whose scales agree)\n",
              static_cast<unsigned long long>(scale_differ), block_differs.size(), static_cast<unsigned long long>(code_differ),
              in.x.size(), static_cast<unsigned long long>(code_differ_same_scale));
  ordered_json j;
  j["generator"] = "qmx-sim " QMX_VERSION;
  j["mode"] = "quantize";
  j["a"] = a.profiles[0];
  j["b"] = a.profiles[1];
  j["spec_a"] = DescribeSpec(sa);
  j["spec_b"] = DescribeSpec(sb);
  j["inputs"] = in.what;
  j["elements"] = in.x.size();
  j["blocks"] = block_differs.size();
  j["scales_differ"] = scale_differ;
  j["codes_differ"] = code_differ;
  j["codes_differ_where_scales_agree"] = code_differ_same_scale;
  j["examples"] = examples;
  Report(a, j);
}

}  // namespace

void AddDiffCommand(CLI::App& app) {
  auto a = std::make_shared<DiffArgs>();
  std::string casts, mx;
  for (const auto& n : CastProfileNames()) casts += (casts.empty() ? "" : ", ") + n;
  for (const auto& n : ProfileNames()) mx += (mx.empty() ? "" : ", ") + n;
  CLI::App* cmd = app.add_subcommand("diff", "Where two stacks disagree: two cast profiles on a format, or two quantizer profiles on a spec");
  cmd->add_option("--profile", a->profiles,
                  "Two sides. With --to: cast profiles (" + casts + "). With --spec: quantizer profiles (" + mx +
                      "), rule=NAME, or spec (the recipe as named)")
      ->required()
      ->expected(2);
  cmd->add_option("--to", a->to, "Element format of a cast diff (e4m3, e5m2, ue8m0, e2m1, e2m3, e3m2)");
  cmd->add_option("--spec", a->spec, "Recipe of a quantizer diff (mxfp8, mxfp4, nvfp4, ...)");
  cmd->add_option("--in", a->in, "Inputs: .npy, FILE.safetensors:NAME (a checkpoint's quantized tensor is decoded)");
  cmd->add_option("--dist", a->dist, "Synthetic inputs (normal, laplace, student-t:NU, ...)");
  cmd->add_option("--rows", a->rows, "Rows of --dist inputs")->capture_default_str();
  cmd->add_option("--cols", a->cols, "Columns of --dist inputs")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of --dist inputs")->capture_default_str();
  cmd->add_flag("--sweep", a->sweep, "Cast diffs: golden/casts' 393,216 FP32 inputs (every top half x 6 low halves)");
  cmd->add_option("--examples", a->examples, "Differences shown (and kept in --json)")->capture_default_str()->check(CLI::Range(0, 1000000));
  cmd->add_option("--json", a->json, "Write the counts and examples here");
  cmd->callback([a] {
    if (a->to.empty() == a->spec.empty()) throw Error("give --to FORMAT (a cast diff) or --spec NAME (a quantizer diff)");
    if (a->sweep && !a->spec.empty()) throw Error("--sweep is an input set of cast diffs (--to)");
    CheckOutputs({{"--json", a->json}}, {a->in});
    const Inputs in = LoadInputs(*a);
    if (!a->to.empty()) DiffCasts(*a, in);
    else DiffSpecs(*a, in);
  });
}

}  // namespace qmx::cli
