// cmd_quantize.cc: `qmx-sim quantize` and `qmx-sim dequantize`: tensors from .npy or .safetensors through a
// QuantSpec (recipe name, overrides, library profile) into codes, scales and dequantized values that numpy
// reads without qmx-sim, plus a JSON summary; and back from our .safetensors output.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "qmx/error.h"
#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/safetensors.h"
#include "qmx/version.h"
#include "common/tensor_inputs.h"

namespace qmx::cli {
namespace {

using nlohmann::ordered_json;

struct QuantizeArgs {
  std::string spec = "mxfp8";
  std::string elem, rule, block, axis, round, sat, nan_policy, scaling, profile, subnormals, nan_fallback;
  int sr_bits = 8;
  uint64_t seed = 0;
  int margin = 0;
  std::string in, out, json;
  std::vector<std::string> tensors;
  std::vector<float> amax_history;
  int history_len = 1024;
  bool reference = false, no_dequant = false, pack = false, quiet = false;
  int threads = 0;
};

QuantSpec BuildSpec(const QuantizeArgs& a) {
  if (!a.block.empty()) {
    try {
      QuantSpec probe;
      SetBlockShape(probe, a.block);
    } catch (const Error& e) {
      throw Error(std::string("--block: ") + e.what());
    }
  }
  SpecOverrides o;
  o.profile = a.profile;
  o.elem = a.elem;
  o.rule = a.rule;
  o.block = a.block;
  o.axis = a.axis;
  o.round = a.round;
  o.sat = a.sat;
  o.nan_policy = a.nan_policy;
  o.scaling = a.scaling;
  o.subnormals = a.subnormals;
  o.nan_fallback = a.nan_fallback;
  o.sr_bits = a.sr_bits;
  o.seed = a.seed;
  o.margin = a.margin;
  return BuildQuantSpec(a.spec, o);
}

ordered_json SpecJson(const QuantSpec& s) { return ordered_json::parse(QuantSpecToJson(s)); }

// rows x cols view of an N-d array: the last dimension is cols.
TensorView ViewOf(const NpyArray& a) {
  TensorView v;
  v.dtype = a.dtype;
  v.data = a.data.data();
  v.cols = a.shape.empty() ? 1 : a.shape.back();
  v.rows = v.cols == 0 ? 0 : a.count() / v.cols;
  if (a.shape.size() >= 1 && a.count() == 0) v.rows = 0;
  return v;
}

NpyArray U8Array(std::vector<size_t> shape, std::vector<uint8_t> bytes) {
  NpyArray a;
  a.dtype = DType::kU8;
  a.shape = std::move(shape);
  a.data = std::move(bytes);
  return a;
}

NpyArray F32Array(std::vector<size_t> shape, const std::vector<float>& v) {
  NpyArray a;
  a.dtype = DType::kF32;
  a.shape = std::move(shape);
  a.data.resize(v.size() * 4);
  if (!v.empty()) std::memcpy(a.data.data(), v.data(), a.data.size());
  return a;
}

ordered_json ErrorJson(const TensorView& x, const std::vector<float>& dq) {
  const DequantError e = ComputeDequantError(x, dq.data());
  ordered_json j;
  j["finite_elements"] = e.finite_elements;
  j["mse"] = e.mse;
  j["max_abs_error"] = e.max_abs_error;
  if (e.has_sqnr) j["sqnr_db"] = e.sqnr_db;
  return j;
}

void RunQuantize(const QuantizeArgs& a) {
  if (a.threads < 0 || a.threads > 1024) throw Error("--threads must be 1..1024");
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const QuantSpec spec = BuildSpec(a);
  if (a.in.empty()) throw Error("--in is required (.npy or .safetensors)");
  if (a.out.empty()) throw Error("--out is required (.safetensors, or a directory prefix for .npy files ending in /)");
  // Inputs: (name, array) pairs.
  std::vector<std::pair<std::string, NpyArray>> inputs;
  if (EndsWith(a.in, ".safetensors")) {
    const bool all = a.tensors.size() == 1 && a.tensors[0] == "all";
    inputs = ReadSafetensorsInputs(a.in, all ? std::vector<std::string>{} : a.tensors);
  } else if (EndsWith(a.in, ".npy")) {
    if (!a.tensors.empty()) throw Error("--tensor selects tensors of a .safetensors input; a .npy holds one");
    inputs.push_back(ReadNpyInput(a.in));
  } else {
    throw Error("--in must be a .npy or .safetensors file, not '" + a.in + "'");
  }
  const bool st_out = EndsWith(a.out, ".safetensors");
  RefuseToOverwriteInput(a.out, {a.in});
  RefuseToOverwriteInput(a.json, {a.in}, "--json");
  if (!st_out && (a.out.empty() || a.out.back() != '/'))
    throw Error("--out must end in .safetensors, or in / for a directory of .npy files");
  if (!spec.delayed && !a.amax_history.empty()) throw Error("--amax-history needs a delayed-scaling spec (fp8-delayed)");
  DelayedScaling state(spec.elem, spec.delayed ? a.history_len : 1, spec.margin);
  for (float h : a.amax_history) state.Push(h);
  std::vector<std::pair<std::string, NpyArray>> outputs;
  std::map<std::string, std::string> meta;
  ordered_json summary;
  summary["spec"] = SpecJson(spec);
  summary["spec_text"] = DescribeSpec(spec);
  summary["input"] = a.in;
  ordered_json jt = ordered_json::array();
  for (auto& [name, arr] : inputs) {
    if (arr.dtype != DType::kF32 && arr.dtype != DType::kBF16 && arr.dtype != DType::kF16)
      throw Error("tensor '" + name + "' is " + DTypeName(arr.dtype) + "; quantize reads f32, bf16 or f16");
    const TensorView x = ViewOf(arr);
    QuantizedTensor q = spec.delayed ? QuantizeDelayed(x, spec, state)
                        : a.reference ? QuantizeRef(x, spec) : Quantize(x, spec);
    q.shape = arr.shape;
    std::vector<float> dq(q.rows * q.cols);
    Dequantize(q, dq.data());
    const QuantStats st = ComputeStats(x, q);
    ordered_json t;
    t["name"] = name;
    t["shape"] = arr.shape;
    t["dtype"] = DTypeName(arr.dtype);
    t["scale_grid"] = {q.scale_rows, q.scale_cols};
    t["tensor_amax"] = q.tensor_amax;
    if (ScaleFormatOf(spec.rule) == ScaleFormat::kE4m3) t["tensor_decode_scale"] = q.tensor_decode;
    t["counts"] = {{"elements", st.elements}, {"nan_inputs", st.nan_inputs}, {"inf_inputs", st.inf_inputs},
                   {"saturated", st.saturated}, {"flushed_to_zero", st.flushed_to_zero}, {"nan_blocks", st.nan_blocks}};
    ordered_json hist = ordered_json::object();
    for (size_t b = 0; b < st.scale_histogram.size(); ++b)
      if (st.scale_histogram[b] != 0) hist[std::to_string(b)] = st.scale_histogram[b];
    t["scale_histogram"] = hist;
    t["scale_histogram_key"] = ScaleFormatOf(spec.rule) == ScaleFormat::kFp32 ? "biased exponent of the FP32 decode scale"
                                                                               : "scale byte";
    t["error"] = ErrorJson(x, dq);
    jt.push_back(t);
    const int bits = spec.elem.Bits();
    std::vector<uint8_t> codes = a.pack ? PackCodes(q.codes.data(), q.codes.size(), bits == 8 ? 8 : bits) : q.codes;
    std::vector<size_t> code_shape = a.pack ? std::vector<size_t>{codes.size()} : arr.shape;
    if (code_shape.empty()) code_shape = {1};
    outputs.emplace_back(name + ".codes", U8Array(code_shape, std::move(codes)));
    if (ScaleFormatOf(spec.rule) == ScaleFormat::kFp32) {
      std::vector<float> s(q.scale_rows * q.scale_cols);
      if (!s.empty()) std::memcpy(s.data(), q.scales.data(), s.size() * 4);
      outputs.emplace_back(name + ".scales", F32Array({q.scale_rows, q.scale_cols}, s));
    } else {
      outputs.emplace_back(name + ".scales", U8Array({q.scale_rows, q.scale_cols}, q.scales));
    }
    if (!a.no_dequant) outputs.emplace_back(name + ".dequant", F32Array(arr.shape.empty() ? std::vector<size_t>{1} : arr.shape, dq));
    meta["qmx.tensor_amax." + name] = nlohmann::json(q.tensor_amax).dump();
    meta["qmx.packed." + name] = a.pack ? "1" : "0";
    if (!a.quiet)
      std::printf("%-40s %-14s scales %zux%zu  saturated %llu  flushed %llu  NaN blocks %llu  SQNR %s dB\n", name.c_str(),
                  [&] { std::string s; for (size_t i = 0; i < arr.shape.size(); ++i) s += (i ? "x" : "") + std::to_string(arr.shape[i]); return s.empty() ? std::string("scalar") : s; }().c_str(),
                  q.scale_rows, q.scale_cols, static_cast<unsigned long long>(st.saturated),
                  static_cast<unsigned long long>(st.flushed_to_zero), static_cast<unsigned long long>(st.nan_blocks),
                  t["error"].contains("sqnr_db") ? std::to_string(t["error"]["sqnr_db"].get<double>()).c_str() : "-");
  }
  summary["tensors"] = jt;
  if (spec.delayed) summary["amax_history_after"] = state.history();
  meta["qmx.spec"] = SpecJson(spec).dump();
  meta["qmx.generator"] = "qmx-sim " QMX_VERSION;
  if (st_out) {
    WriteSafetensors(a.out, outputs, meta);
  } else {
    CreateOutputDir(a.out);
    for (const auto& [n, arr] : outputs) WriteNpy(a.out + n + ".npy", arr);
    WriteFileAtomic(a.out + "spec.json", summary["spec"].dump(2) + "\n");
  }
  if (!a.json.empty()) WriteFileAtomic(a.json, summary.dump(2) + "\n");
  if (!a.quiet) std::printf("%s\nwrote %s%s\n", DescribeSpec(spec).c_str(), a.out.c_str(), a.json.empty() ? "" : (" and " + a.json).c_str());
}

struct DequantizeArgs {
  std::string in, out;
  std::vector<std::string> tensors;
};

void RunDequantize(const DequantizeArgs& a) {
  if (!EndsWith(a.in, ".safetensors")) throw Error("--in must be a .safetensors file written by qmx-sim quantize");
  SafetensorsReader r(a.in);
  const auto& meta = r.index().metadata;
  const auto spec_it = meta.find("qmx.spec");
  if (spec_it == meta.end()) throw Error("'" + a.in + "' has no qmx.spec metadata: it was not written by qmx-sim quantize");
  QuantSpec spec;
  try {
    spec = QuantSpecFromJson(spec_it->second);
  } catch (const Error& e) {
    throw Error("'" + a.in + "': " + e.what());
  }
  std::vector<std::string> names = a.tensors;
  if (names.empty())
    for (const auto& t : r.index().tensors)
      if (EndsWith(t.name, ".codes")) names.push_back(t.name.substr(0, t.name.size() - 6));
  if (a.out.empty() || (names.size() > 1 && a.out.back() != '/') || (names.size() == 1 && a.out.back() != '/' && !EndsWith(a.out, ".npy")))
    throw Error("--out must be a .npy file (one tensor) or a directory ending in /");
  RefuseToOverwriteInput(a.out, {a.in});
  if (a.out.back() == '/') CreateOutputDir(a.out);
  for (const auto& name : names) {
    const NpyArray codes = r.Read(name + ".codes"), scales = r.Read(name + ".scales");
    const auto packed_it = meta.find("qmx.packed." + name);
    if (packed_it != meta.end() && packed_it->second == "1")
      throw Error("tensor '" + name + "' was written with --pack; dequantize reads unpacked codes");
    const auto amax_it = meta.find("qmx.tensor_amax." + name);
    const float amax = amax_it == meta.end() ? 0.0f : nlohmann::json::parse(amax_it->second, nullptr, false).get<float>();
    QuantizedTensor q;
    try {
      q = AssembleQuantized(spec, codes.shape, codes.data, scales.data, amax);
    } catch (const Error& e) {
      throw Error("tensor '" + name + "': " + e.what());
    }
    std::vector<float> out(q.rows * q.cols);
    Dequantize(q, out.data());
    const std::string path = a.out.back() == '/' ? a.out + name + ".npy" : a.out;
    WriteNpy(path, F32Array(codes.shape, out));
    std::printf("%s -> %s\n", name.c_str(), path.c_str());
  }
}

}  // namespace

void AddQuantizeCommand(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand("quantize", "Quantize tensors (.npy / .safetensors) under an MX, NVFP4 or FP8 recipe");
  std::string names;
  for (const auto& n : QuantSpecNames()) names += (names.empty() ? "" : ", ") + n;
  std::string profiles;
  for (const auto& n : ProfileNames()) profiles += (profiles.empty() ? "" : ", ") + n;
  cmd->add_option("--spec", a->spec, "Recipe: " + names)->capture_default_str();
  cmd->add_option("--profile", a->profile, "Library behaviour: " + profiles);
  cmd->add_option("--elem", a->elem, "Override the element format (e4m3, e5m2, e3m2, e2m3, e2m1, int8, ...)");
  cmd->add_option("--scale-rule", a->rule, "Override the scale rule: ocp-floor, round-up, ceil, even, max-finite, fp32, fp32-pow2, nvfp4, nvfp4-div");
  cmd->add_option("--block", a->block, "Override the block: 1x32, 1x16, 1x128, 16x16, 32x32, 128x128, per-row, per-tensor");
  cmd->add_option("--axis", a->axis, "row (blocks along the last dimension) or col (down the columns)");
  cmd->add_option("--round", a->round, "Element rounding: rne, rna, rz, ru, rd, ro, sr (= sr-a), sr-b, sr-c");
  cmd->add_option("--sat", a->sat, "satfinite, nosat, satpropagate");
  cmd->add_option("--nan-policy", a->nan_policy, "block-nan, scale-nan, te, ignore-nan, ignore");
  cmd->add_option("--element-scaling", a->scaling, "UE8M0 scales: exact, fp32, te-rcp");
  cmd->add_option("--subnormals", a->subnormals, "keep or flush");
  cmd->add_option("--nan-fallback", a->nan_fallback, "NaN into FP6/FP4/INT8: max or zero");
  cmd->add_option("--sr-bits", a->sr_bits, "Random bits per element for stochastic rounding (1..32)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Philox seed (element (r, c) uses stream index r * cols + c)")->capture_default_str();
  cmd->add_option("--margin", a->margin, "FP32 scales: s = destmax / amax / 2^margin")->capture_default_str();
  cmd->add_option("--amax-history", a->amax_history, "fp8-delayed: earlier amaxes, oldest first, pushed before this tensor");
  cmd->add_option("--history-len", a->history_len, "fp8-delayed: amax history length")->capture_default_str();
  cmd->add_option("--in", a->in, "Input .npy or .safetensors")->required();
  cmd->add_option("--tensor", a->tensors, "Tensor names of a .safetensors input (default: every F32/BF16/F16 tensor)");
  cmd->add_option("--out", a->out, "Output .safetensors (NAME.codes, NAME.scales, NAME.dequant) or a directory/ of .npy files")->required();
  cmd->add_option("--json", a->json, "Write a JSON summary (counts, scale histogram, error) here");
  cmd->add_option("--threads", a->threads, "OpenMP threads (default: all)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--reference", a->reference, "Use the scalar reference quantizer (slow; equal bit for bit)");
  cmd->add_flag("--no-dequant", a->no_dequant, "Do not write the dequantized values");
  cmd->add_flag("--pack", a->pack, "Pack FP4 two per byte and FP6 four per three bytes (lib/README.md: Packing)");
  cmd->add_flag("--quiet", a->quiet, "No table on stdout");
  cmd->callback([a] { RunQuantize(*a); });

  auto d = std::make_shared<DequantizeArgs>();
  CLI::App* dq = app.add_subcommand("dequantize", "Decode the codes and scales of a qmx-sim quantize .safetensors to FP32 .npy");
  dq->add_option("--in", d->in, "A .safetensors written by qmx-sim quantize")->required();
  dq->add_option("--tensor", d->tensors, "Tensor names (default: all)");
  dq->add_option("--out", d->out, "Output .npy (one tensor) or directory/")->required();
  dq->callback([d] { RunDequantize(*d); });
}

}  // namespace qmx::cli
