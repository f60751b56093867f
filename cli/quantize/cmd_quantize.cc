// cmd_quantize.cc: `qmx-sim quantize` and `qmx-sim dequantize`: tensors from .npy or .safetensors through a
// QuantSpec (recipe name, overrides, library profile) into codes, scales and dequantized values that numpy
// reads without qmx-sim, plus a JSON summary; and back from our .safetensors output.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "qmx/checkpoint.h"
#include "qmx/error.h"
#if defined(QMX_HAVE_CUDA)
#include "qmx/gpu.h"
#endif
#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/safetensors.h"
#include "qmx/version.h"
#include "common/file_jobs.h"
#include "common/outputs.h"
#include "common/ranks.h"
#include "common/tensor_inputs.h"

namespace qmx::cli {
namespace {

using nlohmann::ordered_json;

struct QuantizeArgs {
  std::string spec = "mxfp8";
  SpecOverrides o;  // the text overrides (SpecOverrideFields), --sr-bits, --seed, --margin, --row-scaled
  std::string in, out, json, codes_dtype = "native", device = "cpu", shard, shard_dir;
  std::vector<std::string> tensors;
  std::vector<float> amax_history;
  int history_len = 1024;
  bool reference = false, no_dequant = false, pack = false, quiet = false, row_scaled = false;
  int threads = 0;
};

QuantSpec BuildSpec(const QuantizeArgs& a) {
  if (!a.o.block.empty()) {
    try {
      QuantSpec probe;
      SetBlockShape(probe, a.o.block);
    } catch (const Error& e) {
      throw Error(std::string("--block: ") + e.what());
    }
  }
  return BuildQuantSpec(a.spec, a.o);
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

ordered_json ErrorJson(const TensorView& x, const std::vector<float>& dq) {
  const DequantError e = ComputeDequantError(x, dq.data());
  ordered_json j;
  j["finite_elements"] = e.finite_elements;
  j["mse"] = e.mse;
  j["max_abs_error"] = e.max_abs_error;
  if (e.has_sqnr) j["sqnr_db"] = e.sqnr_db;
  return j;
}

// The emulation engine's quantizer (gpu/README.md "The emulation engine"): the same bits as Quantize.
QuantizedTensor QuantizeOnDevice(const TensorView& x, const QuantSpec& spec) {
#if defined(QMX_HAVE_CUDA)
  return gpu::EngineQuantize(x, spec);
#else
  (void)x;
  (void)spec;
  throw Error("--device cuda: this qmx-sim was built without the CUDA backend (gpu/README.md)");
#endif
}

// How a .safetensors output stores codes and scales: native code dtypes (F8_E4M3 / F8_E5M2 / F6_* / F4 / I8,
// UE8M0 scales as F8_E8M0, NVFP4's as F8_E4M3), or U8 (nullptr: the array's own dtype).
struct OutputDtypes {
  const char* codes = nullptr;
  const char* scales = nullptr;
};

// One tensor's quantization: its output entries (NAME.codes, NAME.scales, ...), its metadata, its summary and
// its table line.
struct QuantizedOutput {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> meta;
  ordered_json summary;
  std::string line;
};

QuantizedOutput QuantizeOne(const QuantizeArgs& a, const QuantSpec& spec, const OutputDtypes& dt, const std::string& name,
                            const NpyArray& arr, DelayedScaling& state) {
  if (arr.dtype != DType::kF32 && arr.dtype != DType::kBF16 && arr.dtype != DType::kF16)
    throw Error("tensor '" + name + "' is " + DTypeName(arr.dtype) + "; quantize reads f32, bf16 or f16");
  const TensorView x = ViewOf(arr);
  QuantizedTensor q = a.device == "cuda" ? QuantizeOnDevice(x, spec)
                      : spec.delayed       ? QuantizeDelayed(x, spec, state)
                      : a.reference        ? QuantizeRef(x, spec)
                                           : Quantize(x, spec);
  q.shape = arr.shape;
  std::vector<float> dq(q.rows * q.cols);
  Dequantize(q, dq.data());
  const QuantStats st = ComputeStats(x, q);
  QuantizedOutput o;
  ordered_json& t = o.summary;
  t["name"] = name;
  t["shape"] = arr.shape;
  t["dtype"] = DTypeName(arr.dtype);
  t["scale_grid"] = {q.scale_rows, q.scale_cols};
  t["tensor_amax"] = q.tensor_amax;
  if (ScaleFormatOf(spec.rule) == ScaleFormat::kE4m3 && !spec.row_scaled) t["tensor_decode_scale"] = q.tensor_decode;
  if (spec.row_scaled && !q.line_amax.empty())
    t["line_amax_range"] = {*std::min_element(q.line_amax.begin(), q.line_amax.end()),
                            *std::max_element(q.line_amax.begin(), q.line_amax.end())};
  ordered_json counts;
  for (const auto& [count_name, count] : QuantStatsCounts(st)) counts[count_name] = count;
  t["counts"] = counts;
  ordered_json hist = ordered_json::object();
  for (size_t b = 0; b < st.scale_histogram.size(); ++b)
    if (st.scale_histogram[b] != 0) hist[std::to_string(b)] = st.scale_histogram[b];
  t["scale_histogram"] = hist;
  t["scale_histogram_key"] = ScaleFormatOf(spec.rule) == ScaleFormat::kFp32 ? "biased exponent of the FP32 decode scale"
                                                                             : "scale byte";
  t["error"] = ErrorJson(x, dq);
  const int bits = spec.elem.Bits();
  std::vector<uint8_t> codes = a.pack ? PackCodes(q.codes.data(), q.codes.size(), bits == 8 ? 8 : bits)
                                      : std::vector<uint8_t>(q.codes.begin(), q.codes.end());
  std::vector<size_t> code_shape = a.pack ? std::vector<size_t>{codes.size()} : arr.shape;
  if (code_shape.empty()) code_shape = {1};
  if (dt.codes != nullptr && spec.elem.Bits() < 8 && codes.size() * static_cast<size_t>(spec.elem.Bits()) % 8 != 0)
    throw Error("tensor '" + name + "': " + std::to_string(codes.size()) + " " + dt.codes +
                " codes are not whole bytes (F4 needs an even count, F6 a multiple of 4); write them with --codes-dtype u8");
  o.entries.push_back({name + ".codes", U8Array(code_shape, std::move(codes)), dt.codes ? dt.codes : ""});
  if (ScaleFormatOf(spec.rule) == ScaleFormat::kFp32) {
    std::vector<float> sc(q.scale_rows * q.scale_cols);
    if (!sc.empty()) std::memcpy(sc.data(), q.scales.data(), sc.size() * 4);
    o.entries.push_back({name + ".scales", F32Array({q.scale_rows, q.scale_cols}, sc), ""});
  } else {
    o.entries.push_back({name + ".scales", U8Array({q.scale_rows, q.scale_cols}, q.scales), dt.scales ? dt.scales : ""});
  }
  if (spec.row_scaled) o.entries.push_back({name + ".line_amax", F32Array({q.line_amax.size()}, q.line_amax), ""});
  if (!a.no_dequant)
    o.entries.push_back({name + ".dequant", F32Array(arr.shape.empty() ? std::vector<size_t>{1} : arr.shape, dq), ""});
  o.meta["qmx.tensor_amax." + name] = nlohmann::json(q.tensor_amax).dump();
  o.meta["qmx.packed." + name] = a.pack ? "1" : "0";
  std::string shape;
  for (size_t i = 0; i < arr.shape.size(); ++i) shape += (i ? "x" : "") + std::to_string(arr.shape[i]);
  char line[512];
  std::snprintf(line, sizeof line, "%-40s %-14s scales %zux%zu  saturated %llu  flushed %llu  NaN blocks %llu  SQNR %s dB\n",
                name.c_str(), shape.empty() ? "scalar" : shape.c_str(), q.scale_rows, q.scale_cols,
                static_cast<unsigned long long>(st.saturated), static_cast<unsigned long long>(st.flushed_to_zero),
                static_cast<unsigned long long>(st.nan_blocks),
                t["error"].contains("sqnr_db") ? std::to_string(t["error"]["sqnr_db"].get<double>()).c_str() : "-");
  o.line = line;
  return o;
}

ordered_json SummaryHead(const QuantSpec& spec, const std::string& in) {
  ordered_json summary;
  summary["spec"] = SpecJson(spec);
  summary["spec_text"] = DescribeSpec(spec);
  summary["input"] = in;
  return summary;
}

std::map<std::string, std::string> FileMeta(const QuantSpec& spec) {
  return {{"qmx.spec", SpecJson(spec).dump()}, {"qmx.generator", "qmx-sim " QMX_VERSION}};
}

void RunQuantizeFiles(const QuantizeArgs& a, const QuantSpec& spec, const OutputDtypes& dt);

void RunQuantize(const QuantizeArgs& a) {
  if (a.threads < 0 || a.threads > 1024) throw Error("--threads must be 1..1024");
  if (a.device != "cpu" && a.device != "cuda") throw Error("--device must be cpu or cuda, not '" + a.device + "'");
  if (a.device == "cuda" && a.reference) throw Error("--reference runs on the CPU; drop --device cuda");
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const QuantSpec spec = BuildSpec(a);
  if (a.in.empty()) throw Error("--in is required (.npy or .safetensors)");
  if (a.out.empty()) throw Error("--out is required (.safetensors, or a directory prefix for .npy files ending in /)");
  if (a.codes_dtype != "native" && a.codes_dtype != "u8") throw Error("--codes-dtype is native or u8, not '" + a.codes_dtype + "'");
  if (!spec.delayed && !a.amax_history.empty()) throw Error("--amax-history needs a delayed-scaling spec (fp8-delayed)");
  const bool files = SafetensorsReader::IsSharded(a.in);
  const bool st_out = EndsWith(a.out, ".safetensors") || files;
  const bool native = st_out && a.codes_dtype == "native" && !a.pack;
  OutputDtypes dt;
  dt.codes = native ? SafetensorsCodeDtype(spec.elem) : nullptr;
  dt.scales = !native                                                                        ? nullptr
              : ScaleFormatOf(spec.rule) == ScaleFormat::kUe8m0 && spec.scale_format.empty() ? "F8_E8M0"
              : ScaleFormatOf(spec.rule) == ScaleFormat::kE4m3 && spec.scale_format.empty()  ? "F8_E4M3"
                                                                                             : nullptr;
  if (files) return RunQuantizeFiles(a, spec, dt);
  if (!a.shard.empty() || !a.shard_dir.empty() || CurrentRanks().size > 1)
    throw Error("quantize splits a multi-file checkpoint (a directory or a model.safetensors.index.json) by file; '" +
                a.in + "' is one file: run it as one process");
  // Inputs: (name, array) pairs.
  std::vector<std::pair<std::string, NpyArray>> inputs;
  if (EndsWith(a.in, ".safetensors")) {
    const bool all = a.tensors.size() == 1 && a.tensors[0] == "all";
    inputs = ReadSafetensorsInputs(a.in, all ? std::vector<std::string>{} : a.tensors);
  } else if (EndsWith(a.in, ".npy")) {
    if (!a.tensors.empty()) throw Error("--tensor selects tensors of a .safetensors input; a .npy holds one");
    inputs.push_back(ReadNpyInput(a.in));
  } else {
    throw Error("--in must be a .npy or .safetensors file, a directory of them or a model.safetensors.index.json, not '" +
                a.in + "'");
  }
  CheckOutputs({{"--out", a.out}, {"--json", a.json}}, {a.in});
  if (!st_out && (a.out.empty() || a.out.back() != '/'))
    throw Error("--out must end in .safetensors, or in / for a directory of .npy files");
  DelayedScaling state(spec.elem, spec.delayed ? a.history_len : 1, spec.margin);
  for (float h : a.amax_history) state.Push(h);
  std::vector<SafetensorsEntry> outputs;
  std::map<std::string, std::string> meta;
  ordered_json summary = SummaryHead(spec, a.in);
  ordered_json jt = ordered_json::array();
  for (auto& [name, arr] : inputs) {
    QuantizedOutput o = QuantizeOne(a, spec, dt, name, arr, state);
    for (SafetensorsEntry& e : o.entries) outputs.push_back(std::move(e));
    meta.insert(o.meta.begin(), o.meta.end());
    jt.push_back(o.summary);
    if (!a.quiet) std::fputs(o.line.c_str(), stdout);
  }
  summary["tensors"] = jt;
  if (spec.delayed) summary["amax_history_after"] = state.history();
  for (const auto& [k, v] : FileMeta(spec)) meta[k] = v;
  if (st_out) {
    WriteSafetensorsTyped(a.out, outputs, meta);
    if (!a.json.empty()) WriteFileAtomic(a.json, summary.dump(2) + "\n");
  } else {
    // All or nothing: a failure in a later file leaves none of the set behind. Tensor names are mapped to
    // file names (TensorFileName: "a/b" -> "a%2Fb"), so no name leaves the directory.
    std::vector<std::string> paths;
    for (const auto& o : outputs) {
      const size_t dot = o.name.rfind('.');  // NAME.codes -> TensorFileName(NAME) + ".codes.npy"
      paths.push_back(a.out + TensorFileName(o.name.substr(0, dot)) + o.name.substr(dot) + ".npy");
    }
    CheckFileNameLengths(paths);
    std::vector<OutputPath> all{{"--json", a.json}, {"--out", a.out + "spec.json"}};
    for (const std::string& p : paths) all.push_back({"--out", p});
    CheckOutputs(all, {a.in});
    CreateOutputDir(a.out);
    AtomicFileSet set;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::vector<uint8_t> bytes = SerializeNpy(outputs[i].array);
      set.Add(paths[i], bytes.data(), bytes.size());
    }
    set.Add(a.out + "spec.json", summary["spec"].dump(2) + "\n");
    if (!a.json.empty()) set.Add(a.json, summary.dump(2) + "\n");
    set.Commit();
  }
  if (!a.quiet) std::printf("%s\nwrote %s%s\n", DescribeSpec(spec).c_str(), a.out.c_str(), a.json.empty() ? "" : (" and " + a.json).c_str());
}

// ------------------------------------------------------------------ multi-file checkpoints

// The file of a quantized tensor in a multi-file reader: its parts must all be in one (the job reads file by file).
uint32_t FileOfTensor(const SafetensorsReader& r, const CheckpointTensorInfo& q) {
  const uint32_t f = r.Get(q.parts.at(0)).file;
  for (const std::string& part : q.parts)
    if (r.Get(part).file != f)
      throw Error("quantized tensor '" + q.name + "' has parts in " + r.files()[f] + " and " + r.files()[r.Get(part).file] +
                  "; a multi-file checkpoint is read file by file");
  return f;
}

// A multi-file checkpoint (file_jobs.h): file f's tensors to --out DIR/<f's name>.
void RunQuantizeFiles(const QuantizeArgs& a, const QuantSpec& spec, const OutputDtypes& dt) {
  const bool split = !a.shard.empty() || CurrentRanks().size > 1;
  if (spec.delayed && split)
    throw Error("fp8-delayed carries its amax history from tensor to tensor: quantize a multi-file checkpoint under it "
                "as one process");
  const SafetensorsReader r(a.in);
  const std::vector<CheckpointTensorInfo> quantized = ScanCheckpoint(r);
  for (const CheckpointTensorInfo& q : quantized) FileOfTensor(r, q);
  FileJob job = MakeFileJob("quantize", a.in, r.files(), a.out, a.json, a.shard, a.shard_dir, a.quiet);
  // The tensors of each file: those named (--tensor), or every one.
  std::vector<std::vector<std::string>> names(job.files.size());
  job.used.assign(job.files.size(), a.tensors.empty());
  for (const std::string& n : a.tensors) {
    const CheckpointTensorInfo* q = FindCheckpointTensor(quantized, n);
    const uint32_t f = q != nullptr ? FileOfTensor(r, *q) : r.Get(n).file;
    names[f].push_back(n);
    job.used[f] = true;
  }
  job.head["summary"] = SummaryHead(spec, a.in);
  job.head["tensors_selected"] = a.tensors;
  job.head["options"] = {{"no_dequant", a.no_dequant}, {"pack", a.pack}, {"codes_dtype", a.codes_dtype},
                         {"device", a.device}, {"reference", a.reference}};
  auto state = std::make_shared<DelayedScaling>(spec.elem, spec.delayed ? a.history_len : 1, spec.margin);
  for (float h : a.amax_history) state->Push(h);
  job.run = [&, state](size_t f) {
    FilePart p;
    const std::string base = std::filesystem::path(job.files[f]).filename().string();
    for (const auto& [name, arr] : ReadSafetensorsInputs(job.files[f], names[f], true)) {
      QuantizedOutput o = QuantizeOne(a, spec, dt, name, arr, *state);
      for (SafetensorsEntry& e : o.entries) p.entries.push_back(std::move(e));
      p.meta.insert(o.meta.begin(), o.meta.end());
      o.summary["file"] = base;
      p.tensors.push_back(o.summary);
      p.lines += o.line;
    }
    if (!p.entries.empty())
      for (const auto& [k, v] : FileMeta(spec)) p.meta[k] = v;
    return p;
  };
  RunFileJob(job);
  if (!a.quiet && CurrentRanks().rank == 0 && a.shard.empty()) std::printf("%s\n", DescribeSpec(spec).c_str());
}

}  // namespace

void MergeQuantize(const std::string& kind, const std::vector<std::string>& texts, const std::string& dir,
                   const std::string& json, bool quiet) {
  MergeFileJob(kind, texts, dir, json, quiet);
}

namespace {

struct DequantizeArgs {
  std::string in, out, json, shard, shard_dir, order = "rule";
  std::vector<std::string> tensors;
  bool quiet = false, ftz = false;
};

// A multi-file quantized checkpoint (file_jobs.h): file f's quantized tensors decoded to --out DIR/<f's name>.
void RunDequantizeFiles(const DequantizeArgs& a, const SafetensorsReader& r, const std::vector<CheckpointTensorInfo>& picked) {
  FileJob job = MakeFileJob("dequantize", a.in, r.files(), a.out, a.json, a.shard, a.shard_dir, a.quiet);
  std::vector<std::vector<const CheckpointTensorInfo*>> of_file(job.files.size());
  for (const CheckpointTensorInfo& info : picked) {
    const uint32_t f = FileOfTensor(r, info);
    of_file[f].push_back(&info);
    job.used[f] = true;
  }
  job.head["summary"] = {{"input", a.in}};
  job.head["tensors_selected"] = a.tensors;
  job.run = [&](size_t f) {
    FilePart p;
    const std::string base = std::filesystem::path(job.files[f]).filename().string();
    for (const CheckpointTensorInfo* info : of_file[f]) {
      const CheckpointTensor t = LoadCheckpointTensor(r, *info);
      p.entries.push_back({info->name, F32Array(t.q.shape.empty() ? std::vector<size_t>{1} : t.q.shape,
                                                DecodeCheckpointTensor(t, ParseDequantOrder(a.order), a.ftz)), ""});
      p.tensors.push_back({{"name", info->name}, {"layout", CheckpointLayoutName(info->layout)},
                           {"block", DescribeBlock(t.q.spec)}, {"shape", t.q.shape}, {"file", base}});
      p.lines += info->name + " (" + CheckpointLayoutName(info->layout) + ", " + DescribeBlock(t.q.spec) + ") -> " +
                 a.out + base + "\n";
    }
    p.meta["qmx.generator"] = "qmx-sim " QMX_VERSION " dequantize";
    return p;
  };
  RunFileJob(job);
}

// Every quantized tensor of the file (or those named), in any layout of qmx/checkpoint.h, decoded to FP32.
void RunDequantize(const DequantizeArgs& a) {
  ParseDequantOrder(a.order);  // a bad --order fails before any file is read
  const bool files = SafetensorsReader::IsSharded(a.in);
  if (!EndsWith(a.in, ".safetensors") && !files)
    throw Error("--in must be a .safetensors file (qmx-sim quantize's, or a quantized checkpoint), a directory of them "
                "or a model.safetensors.index.json");
  if (!files && (!a.shard.empty() || !a.shard_dir.empty() || !a.json.empty() || CurrentRanks().size > 1))
    throw Error("--shard, --json and MPI ranks split a multi-file checkpoint (a directory or an index.json) by file; '" +
                a.in + "' is one file: run it as one process");
  SafetensorsReader r(a.in);
  const std::vector<CheckpointTensorInfo> found = ScanCheckpoint(r);
  std::vector<CheckpointTensorInfo> picked;
  for (const std::string& n : a.tensors) {
    const CheckpointTensorInfo* it = FindCheckpointTensor(found, n);
    if (it == nullptr) {
      std::string known;
      for (size_t i = 0; i < found.size() && i < 5; ++i) known += (i ? ", " : "") + found[i].name;
      throw Error("'" + a.in + "' has no quantized tensor '" + n + "'" + (known.empty() ? "" : " (it has " + known + (found.size() > 5 ? ", ..." : "") + ")"));
    }
    picked.push_back(*it);
  }
  if (a.tensors.empty()) picked = found;
  if (picked.empty())
    throw Error("'" + a.in + "' holds no quantized tensor in a known layout (qmx, gpt-oss-mxfp4, modelopt-nvfp4, "
                "compressed-tensors-nvfp4/-mxfp4, torchao, deepseek-fp8, fp8-scaled: cli/README.md)");
  if (files) return RunDequantizeFiles(a, r, picked);
  const bool dir = !a.out.empty() && a.out.back() == '/', st_out = EndsWith(a.out, ".safetensors");
  if (a.out.empty() || (!dir && !st_out && (picked.size() > 1 || !EndsWith(a.out, ".npy"))))
    throw Error("--out must be a .npy file (one tensor), a .safetensors file or a directory ending in /");
  CheckOutputs({{"--out", a.out}}, {a.in});
  std::vector<std::string> paths;
  for (const CheckpointTensorInfo& info : picked) paths.push_back(dir ? a.out + TensorFileName(info.name) + ".npy" : a.out);
  if (dir) {
    CheckFileNameLengths(paths);
    CreateOutputDir(a.out);
  }
  // A directory's files are written all or nothing (AtomicFileSet), one tensor in memory at a time.
  AtomicFileSet set;
  std::vector<std::pair<std::string, NpyArray>> outputs;
  for (size_t i = 0; i < picked.size(); ++i) {
    const CheckpointTensorInfo& info = picked[i];
    const CheckpointTensor t = LoadCheckpointTensor(r, info);
    const std::vector<float> values = DecodeCheckpointTensor(t, ParseDequantOrder(a.order), a.ftz);
    NpyArray arr = F32Array(t.q.shape.empty() ? std::vector<size_t>{1} : t.q.shape, values);
    if (st_out) {
      outputs.emplace_back(info.name, std::move(arr));
    } else if (dir) {
      const std::vector<uint8_t> bytes = SerializeNpy(arr);
      set.Add(paths[i], bytes.data(), bytes.size());
    } else {
      WriteNpy(a.out, arr);
    }
    std::printf("%s (%s, %s) -> %s\n", info.name.c_str(), CheckpointLayoutName(info.layout), DescribeBlock(t.q.spec).c_str(),
                paths[i].c_str());
  }
  if (dir) set.Commit();
  if (st_out) WriteSafetensors(a.out, outputs, {{"qmx.generator", "qmx-sim " QMX_VERSION " dequantize"}});
}

}  // namespace

void AddQuantizeCommand(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand("quantize", "Quantize tensors (.npy / .safetensors) under an MX, NVFP4 or FP8 recipe");
  std::string names;
  for (const auto& n : QuantSpecNames()) names += (names.empty() ? "" : ", ") + n;
  cmd->add_option("--spec", a->spec, "Recipe: " + names)->capture_default_str();
  for (const auto& f : SpecOverrideFields()) cmd->add_option(f.option, a->o.*f.field, f.help);
  cmd->add_option("--sr-bits", a->o.sr_bits, "Random bits per element for stochastic rounding (1..32)")->capture_default_str();
  cmd->add_option("--seed", a->o.seed, "Philox seed (element (r, c) uses stream index r * cols + c)")->capture_default_str();
  cmd->add_option("--margin", a->o.margin, "FP32 scales: s = destmax / amax / 2^margin")->capture_default_str();
  cmd->add_option("--amax-history", a->amax_history, "fp8-delayed: earlier amaxes, oldest first, pushed before this tensor");
  cmd->add_option("--history-len", a->history_len, "fp8-delayed: amax history length")->capture_default_str();
  cmd->add_option("--in", a->in, "Input .npy or .safetensors, or a multi-file checkpoint (a directory of .safetensors or a "
                               "model.safetensors.index.json: --out DIR/ then receives one file per input file)")->required();
  cmd->add_option("--tensor", a->tensors, "Tensor names of a .safetensors input (default: every F32/BF16/F16 tensor)");
  cmd->add_option("--out", a->out, "Output .safetensors (NAME.codes, NAME.scales, NAME.dequant) or a directory/ of .npy files")->required();
  cmd->add_option("--json", a->json, "Write a JSON summary (counts, scale histogram, error) here");
  cmd->add_option("--threads", a->threads, "OpenMP threads (default: all)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--row-scaled", a->o.row_scaled,
                "NVFP4: a second-level scale per row (per column with --axis col) from that line's amax, as Transformer "
                "Engine's row-scaled NVFP4; writes NAME.line_amax (the nvfp4-row spec sets it)");
  cmd->add_option("--device", a->device,
                  "cpu, or cuda: the GPU emulation engine, the same bits (not fp8-delayed or the 4over6 rules)")
      ->capture_default_str();
  cmd->add_flag("--reference", a->reference, "Use the scalar reference quantizer (slow; equal bit for bit)");
  cmd->add_flag("--no-dequant", a->no_dequant, "Do not write the dequantized values");
  cmd->add_option("--codes-dtype", a->codes_dtype,
                  "native: a .safetensors output stores codes as F8_E4M3/F8_E5M2/F6_E2M3/F6_E3M2/F4/I8 and scales as "
                  "F8_E8M0/F8_E4M3/F32; u8: codes and scale bytes as U8")
      ->capture_default_str();
  cmd->add_flag("--pack", a->pack, "U8 codes packed: FP4 two per byte, FP6 four per three bytes (docs/numerics.md: Packing)");
  cmd->add_flag("--quiet", a->quiet, "No table on stdout");
  cmd->add_option("--shard", a->shard, "I/N: a multi-file checkpoint's files k with k mod N = I only (job arrays), "
                                       "its record into --shard-dir");
  cmd->add_option("--shard-dir", a->shard_dir, "Where --shard writes quantize-shard-I-of-N.json (qmx-sim merge joins them)");
  cmd->callback([a] { RunQuantize(*a); });

  auto d = std::make_shared<DequantizeArgs>();
  CLI::App* dq = app.add_subcommand("dequantize", "Decode quantized tensors (qmx-sim quantize's, or a checkpoint's: gpt-oss MXFP4, "
                                                   "ModelOpt / compressed-tensors NVFP4, torchao, DeepSeek FP8, scaled FP8) to FP32");
  dq->add_option("--in", d->in, "A .safetensors written by qmx-sim quantize, or a quantized checkpoint")->required();
  dq->add_option("--tensor", d->tensors, "Logical tensor names (default: every quantized tensor)");
  dq->add_option("--out", d->out, "Output .npy (one tensor), .safetensors (F32 tensors) or directory/ of .npy; for a "
                                  "multi-file checkpoint DIR/: one F32 .safetensors per input file and its index")->required();
  dq->add_option("--order", d->order, "How qmx-sim NVFP4 tensors' block and tensor scales meet: rule (the scale rule's own), te "
                                     "(Transformer Engine's kernel), global-div (torchao on the CPU, TE's JAX, vLLM), global-recip "
                                     "(torchao on CUDA); docs/numerics.md")
      ->capture_default_str();
  dq->add_flag("--ftz", d->ftz, "Decode as a kernel built with flush-to-zero does (-ftz=true, --use_fast_math): a decode scale "
                                "or a value below 2^-126 in magnitude becomes a zero of its sign");
  dq->add_option("--json", d->json, "A multi-file checkpoint: the list of decoded tensors (name, layout, block, shape, file)");
  dq->add_option("--shard", d->shard, "I/N: a multi-file checkpoint's files k with k mod N = I only (job arrays)");
  dq->add_option("--shard-dir", d->shard_dir, "Where --shard writes dequantize-shard-I-of-N.json (qmx-sim merge joins them)");
  dq->add_flag("--quiet", d->quiet, "No table on stdout");
  dq->callback([d] { RunDequantize(*d); });
}

}  // namespace qmx::cli
