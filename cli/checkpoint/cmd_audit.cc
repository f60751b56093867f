// cmd_audit.cc: `qmx-sim audit CHECKPOINT [--source SRC]`: for each quantized tensor of a checkpoint (any
// layout of qmx/checkpoint.h), which scale rules and library profiles reproduce its codes and scales bit
// for bit when re-quantizing the source (or the decoded values), with range, saturation and flush counts.
#include <omp.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/audit_report.h"
#include "commands.h"
#include "common/ranks.h"
#include "common/tensor_inputs.h"
#include "qmx/checkpoint.h"
#include "qmx/error.h"
#include "qmx/golden.h"
#include "qmx/io.h"
#include "qmx/quantize.h"
#include "qmx/safetensors.h"
#include "qmx/version.h"

namespace qmx::cli {
namespace {

using nlohmann::ordered_json;

struct AuditArgs {
  std::string in, source, json, convert, converted, shard, shard_dir;
  double factor = 0;
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

// --convert FROM->TO split at the arrow (qmx::Error for anything else).
std::pair<std::string, std::string> ConvertPair(const std::string& convert) {
  const size_t arrow = convert.find("->");
  if (arrow == std::string::npos || arrow == 0 || arrow + 2 >= convert.size())
    throw Error("--convert '" + convert + "': expected FROM->TO, e.g. e4m3->e4m3fnuz, mxfp4->mxfp8, mxfp4->nvfp4");
  return {convert.substr(0, arrow), convert.substr(arrow + 2)};
}

// The --convert report's head: what its JSON holds besides the tensors.
ordered_json ConvertHead(const AuditArgs& a) {
  const auto [from, to] = ConvertPair(a.convert);
  ordered_json out;
  out["checkpoint"] = a.in;
  out["convert"] = {{"from", from}, {"to", to}, {"factor", a.factor}};
  out["generator"] = "qmx-sim " QMX_VERSION;
  return out;
}

// One tensor under --convert: nothing when it is not a FROM tensor, else its entry (index, table line, JSON
// record) and, when `keep` is given, the conversion itself.
std::optional<ordered_json> ConvertOne(const AuditArgs& a, const SafetensorsReader& r, const CheckpointTensorInfo& info,
                                       size_t index, ConvertAudit* keep) {
  const auto [from, to] = ConvertPair(a.convert);
  const CheckpointTensor t = LoadCheckpointTensor(r, info);
  if (!ConvertMatches(t, from)) return std::nullopt;
  const QuantSpec target = ConvertTarget(t, to);
  ConvertAudit c = ConvertCheckpointTensor(t, target, a.factor);
  ordered_json tj;
  tj["name"] = info.name;
  tj["layout"] = CheckpointLayoutName(info.layout);
  tj["from"] = DescribeSpec(t.q.spec);
  tj["to"] = DescribeSpec(target);
  tj["elements"] = c.elements;
  tj["inexact_elements"] = c.inexact;
  tj["blocks"] = c.blocks;
  tj["inexact_blocks"] = c.inexact_blocks;
  tj["exact"] = c.Exact();
  ordered_json diffs = ordered_json::array();
  for (const ConvertDiff& d : c.first) diffs.push_back({{"index", d.index}, {"from", d.from}, {"to", d.to}});
  tj["first_inexact"] = diffs;
  char line[1024];
  std::snprintf(line, sizeof line, "%-44s %-18s %-30s %12llu %12s  %s\n", info.name.c_str(), from.c_str(), target.name.c_str(),
                static_cast<unsigned long long>(c.inexact),
                (std::to_string(c.inexact_blocks) + "/" + std::to_string(c.blocks)).c_str(), c.Exact() ? "yes" : "no");
  if (keep != nullptr) *keep = std::move(c);
  return ordered_json{{"index", index}, {"line", line}, {"tensor", tj}};
}

// --converted: the converted tensors in the qmx layout `quantize` writes, one file, when every one is exact.
void WriteConverted(const AuditArgs& a, const std::vector<std::pair<std::string, ConvertAudit>>& done) {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> meta;
  std::string spec_json, inexact_names;
  for (const auto& [name, c] : done) {
    if (!c.Exact()) inexact_names += (inexact_names.empty() ? "" : ", ") + name;
    const QuantizedTensor& q = c.converted;
    const std::string js = QuantSpecToJson(q.spec);
    if (!spec_json.empty() && js != spec_json)
      throw Error("--converted: the converted tensors have different specs; convert them one --tensor at a time");
    spec_json = js;
    entries.push_back({name + ".codes", U8Array({q.rows, q.cols}, std::vector<uint8_t>(q.codes.begin(), q.codes.end())), ""});
    if (ScaleFormatOf(q.spec.rule) == ScaleFormat::kFp32) {
      std::vector<float> sc(q.scale_rows * q.scale_cols);
      if (!sc.empty()) std::memcpy(sc.data(), q.scales.data(), sc.size() * 4);
      entries.push_back({name + ".scales", F32Array({q.scale_rows, q.scale_cols}, sc), ""});
    } else {
      entries.push_back({name + ".scales", U8Array({q.scale_rows, q.scale_cols}, q.scales), ""});
    }
    meta["qmx.tensor_amax." + name] = nlohmann::json(q.tensor_amax).dump();
    meta["qmx.packed." + name] = "0";
  }
  if (!inexact_names.empty())
    throw Error("--converted: not written, the conversion changes values of " + inexact_names +
                " (the table and --json say where)");
  meta["qmx.spec"] = spec_json;
  meta["qmx.generator"] = "qmx-sim " QMX_VERSION;
  WriteSafetensorsTyped(a.converted, entries, meta);
  if (!a.quiet) std::printf("wrote %s: %zu tensors, every value kept\n", a.converted.c_str(), done.size());
}

// One tensor's audit: its JSON record and its table line.
std::pair<ordered_json, std::string> AuditOne(const AuditArgs& a, const SafetensorsReader& r, const SafetensorsReader* src,
                                              const CheckpointTensorInfo& info) {
  const CheckpointTensor t = LoadCheckpointTensor(r, info);
  NpyArray source;
  const bool have_source = src && src->index().Find(info.name) != nullptr;
  if (have_source) source = src->Read(info.name);
  const AuditResult res = AuditCheckpointTensor(t, have_source ? &source : nullptr, have_source ? a.source + ":" + info.name : "");
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
  char line[1024];
  std::snprintf(line, sizeof line, "%-44s %-26s %-10s %-9s %9llu %9llu %9s  ", info.name.c_str(),
                CheckpointLayoutName(info.layout), res.scheme.c_str(), have_source ? "given" : "decoded",
                static_cast<unsigned long long>(res.stats.zero_codes), static_cast<unsigned long long>(res.stats.max_codes),
                have_source ? std::to_string(res.stats.saturated).c_str() : "-");
  return {ToJson(res, ScaleBytes(ScaleFormatOf(t.q.spec.rule))), std::string(line) + who + "\n"};
}

// The report's head: what `--json` holds besides the tensors.
ordered_json ReportHead(const AuditArgs& a) {
  ordered_json out;
  out["checkpoint"] = a.in;
  out["source"] = a.source.empty() ? "decoded" : a.source;
  out["generator"] = "qmx-sim " QMX_VERSION;
  return out;
}

void PrintTableHead() {
  std::printf("%-44s %-26s %-10s %-9s %9s %9s %9s  %s\n", "tensor", "layout", "scheme", "source", "zero", "max", "saturated",
              "reproduced by (bit for bit)");
}

void RunAudit(const AuditArgs& a) {
  if (a.threads > 0) omp_set_num_threads(a.threads);
  if (!EndsWith(a.in, ".safetensors") && !SafetensorsReader::IsSharded(a.in))
    throw Error("audit reads a .safetensors checkpoint, a directory of them or a model.safetensors.index.json, not '" + a.in + "'");
  CheckOutputs({{"--json", a.json}, {"--converted", a.converted}}, {a.in, a.source});
  if (a.convert.empty() && (!a.converted.empty() || a.factor != 0))
    throw Error("--converted and --factor go with --convert FROM->TO");
  if (!a.convert.empty() && !a.source.empty()) throw Error("--convert converts the stored values; it takes no --source");
  if (!a.converted.empty() && !EndsWith(a.converted, ".safetensors"))
    throw Error("--converted writes a .safetensors file, not '" + a.converted + "'");
  if (a.factor < 0) throw Error("--factor must be positive");
  const WorkPart wp = ResolveWorkPart("audit", a.shard, a.shard_dir, "tensors");
  const Shard& shard = wp.shard;
  const Ranks& ranks = CurrentRanks();
  if (!a.converted.empty() && (shard.given || ranks.size > 1))
    throw Error("audit --converted writes one file from one process; split the report alone (--json) over ranks or shards");
  if (!a.convert.empty()) ConvertPair(a.convert);  // a malformed FROM->TO fails before any reading
  if (shard.given && !a.json.empty()) throw Error("audit: a shard writes its part into --shard-dir; qmx-sim merge writes --json");
  const SafetensorsReader r(a.in);
  std::unique_ptr<SafetensorsReader> src;
  if (!a.source.empty()) {
    if (!EndsWith(a.source, ".safetensors") && !SafetensorsReader::IsSharded(a.source))
      throw Error("--source must be a .safetensors file, a directory of them or an index.json, not '" + a.source + "'");
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
  // Tensor k goes to part k mod N (one tensor in memory at a time per process); --convert's parts hold only
  // the FROM tensors, and --converted (one process) keeps their conversions.
  const uint64_t parts = wp.count, me = wp.index;
  const bool convert = !a.convert.empty();
  std::vector<std::pair<std::string, ConvertAudit>> converted;
  const auto work = [&] {
    ordered_json part = ordered_json::array();
    for (size_t k = me; k < found.size(); k += parts) {
      if (convert) {
        ConvertAudit c;
        std::optional<ordered_json> e = ConvertOne(a, r, found[k], k, a.converted.empty() ? nullptr : &c);
        if (!e) continue;
        part.push_back(std::move(*e));
        if (!a.converted.empty()) converted.emplace_back(found[k].name, std::move(c));
        continue;
      }
      auto [json, line] = AuditOne(a, r, src.get(), found[k]);
      part.push_back({{"index", k}, {"line", line}, {"tensor", json}});
    }
    return part.dump() + "\n";
  };
  const std::string kind = convert ? "audit-convert" : "audit";
  if (shard.given) {
    ordered_json head = convert ? ConvertHead(a) : ReportHead(a);
    head["tensors_total"] = found.size();
    RunRecordShard(kind, shard, a.shard_dir, head, [&] { return ordered_json::parse(work()); });
    return;
  }
  const std::vector<std::string> all = RunOnRanks(work);
  if (ranks.rank != 0) return;
  std::vector<std::optional<ordered_json>> by_index(found.size());
  for (const std::string& p : all)
    for (auto& e : ordered_json::parse(p)) by_index.at(e["index"].get<size_t>()) = e;
  std::vector<ordered_json> merged;
  for (auto& e : by_index)
    if (e) merged.push_back(std::move(*e));
  if (convert) {
    const ordered_json out = ConvertReport(ConvertHead(a), merged, a.quiet);
    if (!a.json.empty()) WriteFileAtomic(a.json, out.dump(2) + "\n");
    if (!a.converted.empty()) WriteConverted(a, converted);
    return;
  }
  if (!a.quiet) PrintTableHead();
  const ordered_json out = AuditReport(ReportHead(a), merged, a.quiet);
  if (!a.json.empty()) WriteFileAtomic(a.json, out.dump(2) + "\n");
}

}  // namespace

ordered_json AuditReport(ordered_json head, const std::vector<ordered_json>& entries, bool quiet) {
  ordered_json tensors = ordered_json::array();
  for (const ordered_json& e : entries) {
    if (!quiet) std::fputs(e["line"].get<std::string>().c_str(), stdout);
    tensors.push_back(e["tensor"]);
  }
  head["tensors"] = tensors;
  return head;
}

ordered_json ConvertReport(ordered_json head, const std::vector<ordered_json>& entries, bool quiet) {
  const std::string from = head.at("convert").at("from").get<std::string>();
  if (entries.empty()) throw Error("--convert: no quantized tensor of '" + head.at("checkpoint").get<std::string>() + "' is " + from);
  if (!quiet) std::printf("%-44s %-18s %-30s %12s %12s  %s\n", "tensor", "from", "to", "inexact", "blocks", "exact");
  ordered_json tensors = ordered_json::array();
  bool exact = true;
  for (const ordered_json& e : entries) {
    if (!quiet) std::fputs(e["line"].get<std::string>().c_str(), stdout);
    tensors.push_back(e["tensor"]);
    exact = exact && e["tensor"]["exact"].get<bool>();
  }
  head["tensors"] = tensors;
  head["exact"] = exact;
  return head;
}

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
  cmd->add_option("--convert", a->convert,
                  "FROM->TO: whether each FROM tensor (a scheme, element format or spec name) converts to TO (a spec "
                  "name, or an element format keeping the block and scales) without changing a value");
  cmd->add_option("--factor", a->factor,
                  "With --convert into a per-tensor FP32 target: its decode scale is the source's times this "
                  "(e4m3->e4m3fnuz: 2)");
  cmd->add_option("--converted", a->converted, "With --convert: write the converted tensors here when all are exact");
  cmd->add_option("--shard", a->shard, "I/N: audit only tensors k with k mod N = I (job arrays), into --shard-dir");
  cmd->add_option("--shard-dir", a->shard_dir,
                  "Where --shard writes audit-shard-I-of-N.json (audit-convert-... with --convert; qmx-sim merge joins them)");
  cmd->add_option("--threads", a->threads, "OpenMP threads (default: all)")->check(CLI::Range(1, 1024));
  cmd->add_flag("--quiet", a->quiet, "No table on stdout");
  cmd->callback([a] { RunAudit(*a); });
}

}  // namespace qmx::cli
