// cmd_audit.cc: `qmx-sim audit CHECKPOINT [--source SRC]`: for each quantized tensor of a checkpoint (any
// layout of qmx/checkpoint.h), which scale rules and library profiles reproduce its codes and scales bit
// for bit when re-quantizing the source (or the decoded values), with range, saturation and flush counts.
#include <omp.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "common/tensor_inputs.h"
#include "qmx/checkpoint.h"
#include "qmx/error.h"
#include "qmx/golden.h"
#include "qmx/io.h"
#include "qmx/version.h"

namespace qmx::cli {
namespace {

using nlohmann::ordered_json;

struct AuditArgs {
  std::string in, source, json;
  std::vector<std::string> tensors;
  int threads = 0;
  bool quiet = false;
};

ordered_json ToJson(const AuditResult& a, size_t scale_bytes) {
  ordered_json j;
  j["name"] = a.info.name;
  j["layout"] = CheckpointLayoutName(a.info.layout);
  j["parts"] = a.info.parts;
  j["scheme"] = a.scheme;
  j["source"] = a.source;
  const AuditStats& s = a.stats;
  ordered_json st;
  st["elements"] = s.elements;
  st["zero_codes"] = s.zero_codes;
  st["max_magnitude_codes"] = s.max_codes;
  st["nan_codes"] = s.nan_codes;
  st["blocks"] = s.blocks;
  st["nan_scales"] = s.nan_scales;
  st["min_block_scale"] = s.min_scale;
  st["max_block_scale"] = s.max_scale;
  st["decoded_amax"] = s.decoded_amax;
  if (s.has_source) {
    st["source_amax"] = s.source_amax;
    st["saturated"] = s.saturated;
    st["flushed_to_zero"] = s.flushed_to_zero;
  }
  j["stats"] = st;
  ordered_json reproduced = ordered_json::array(), cands = ordered_json::array();
  for (const AuditCandidate& c : a.candidates) {
    if (c.reproduces) reproduced.push_back(c.name);
    ordered_json cj;
    cj["name"] = c.name;
    cj["spec"] = c.spec;
    cj["reproduces"] = c.reproduces;
    cj["code_mismatches"] = c.code_mismatches;
    cj["scale_mismatches"] = c.scale_mismatches;
    if (c.has_first) {
      const int w = c.first_what == "code" ? 1 : static_cast<int>(scale_bytes);
      cj["first_difference"] = {{"what", c.first_what}, {"index", c.first_index}, {"stored", "0x" + golden::Hex(c.first_stored, 2 * w)},
                                {"requantized", "0x" + golden::Hex(c.first_requantized, 2 * w)}};
    }
    cands.push_back(cj);
  }
  j["reproduced_by"] = reproduced;
  j["candidates"] = cands;
  return j;
}

void RunAudit(const AuditArgs& a) {
  if (a.threads > 0) omp_set_num_threads(a.threads);
  if (!EndsWith(a.in, ".safetensors")) throw Error("audit reads a .safetensors checkpoint, not '" + a.in + "'");
  CheckOutputs({{"--json", a.json}}, {a.in, a.source});
  const SafetensorsReader r(a.in);
  std::unique_ptr<SafetensorsReader> src;
  if (!a.source.empty()) {
    if (!EndsWith(a.source, ".safetensors")) throw Error("--source must be a .safetensors file, not '" + a.source + "'");
    src = std::make_unique<SafetensorsReader>(a.source);
  }
  std::vector<CheckpointTensorInfo> found = ScanCheckpoint(r);
  if (!a.tensors.empty()) {
    std::vector<CheckpointTensorInfo> keep;
    for (const std::string& n : a.tensors) {
      const CheckpointTensorInfo* f = FindCheckpointTensor(found, n);
      if (f == nullptr) throw Error("'" + a.in + "' has no quantized tensor '" + n + "'");
      keep.push_back(*f);
    }
    found = keep;
  }
  if (found.empty()) throw Error("'" + a.in + "' holds no quantized tensor in a known layout (cli/README.md: dequantize)");
  ordered_json out;
  out["checkpoint"] = a.in;
  out["source"] = a.source.empty() ? "decoded" : a.source;
  out["generator"] = "qmx-sim " QMX_VERSION;
  ordered_json tensors = ordered_json::array();
  if (!a.quiet)
    std::printf("%-44s %-26s %-10s %-9s %9s %9s %9s  %s\n", "tensor", "layout", "scheme", "source", "zero", "max", "saturated",
                "reproduced by (bit for bit)");
  for (const CheckpointTensorInfo& info : found) {
    const CheckpointTensor t = LoadCheckpointTensor(r, info);
    NpyArray source;
    const bool have_source = src && src->index().Find(info.name) != nullptr;
    if (have_source) source = src->Read(info.name);
    const AuditResult res = AuditCheckpointTensor(t, have_source ? &source : nullptr, have_source ? a.source + ":" + info.name : "");
    tensors.push_back(ToJson(res, ScaleBytes(ScaleFormatOf(t.q.spec.rule))));
    if (a.quiet) continue;
    std::string who;
    for (const AuditCandidate& c : res.candidates)
      if (c.reproduces) who += (who.empty() ? "" : ", ") + c.name;
    if (who.empty()) {  // the closest candidate and where it first differs
      const AuditCandidate* best = nullptr;
      for (const AuditCandidate& c : res.candidates)
        if (!best || c.code_mismatches + c.scale_mismatches < best->code_mismatches + best->scale_mismatches) best = &c;
      who = "none";
      if (best)
        who += "; closest " + best->name + ": " + std::to_string(best->scale_mismatches) + " scales, " +
               std::to_string(best->code_mismatches) + " codes differ";
    }
    std::printf("%-44s %-26s %-10s %-9s %9llu %9llu %9s  %s\n", info.name.c_str(), CheckpointLayoutName(info.layout),
                res.scheme.c_str(), have_source ? "given" : "decoded", static_cast<unsigned long long>(res.stats.zero_codes),
                static_cast<unsigned long long>(res.stats.max_codes),
                have_source ? std::to_string(res.stats.saturated).c_str() : "-", who.c_str());
  }
  out["tensors"] = tensors;
  if (!a.json.empty()) WriteFileAtomic(a.json, out.dump(2) + "\n");
}

}  // namespace

void AddAuditCommand(CLI::App& app) {
  auto a = std::make_shared<AuditArgs>();
  CLI::App* cmd = app.add_subcommand(
      "audit", "Which scale rules and library profiles reproduce a quantized checkpoint's codes and scales bit for bit");
  cmd->add_option("checkpoint", a->in, "A .safetensors checkpoint (layouts: qmx-sim dequantize --help)")->required();
  cmd->add_option("--source", a->source,
                  "The high-precision .safetensors it was quantized from (same tensor names; default: re-quantize the "
                  "decoded values)");
  cmd->add_option("--tensor", a->tensors, "Logical tensor names (default: every quantized tensor)");
  cmd->add_option("--json", a->json, "Write the full report (every candidate, first differences in hex) here");
  cmd->add_option("--threads", a->threads, "OpenMP threads (default: all)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--quiet", a->quiet, "No table on stdout");
  cmd->callback([a] { RunAudit(*a); });
}

}  // namespace qmx::cli
