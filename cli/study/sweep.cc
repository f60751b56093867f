// sweep.cc: the sweeps of `qmx-sim study error|misalignment|hadamard`: every combination of specs, scale
// rules, roundings, SR bits, transforms and QuEST scale roundings on every input, one record each.
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qmx/distributions.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/io.h"
#include "qmx/metrics.h"
#include "common/ranks.h"
#include "qmx/study.h"
#include "study/study_cli.h"

namespace qmx::cli::study {
// ---------------------------------------------------------------------------------------------------
// Inputs

namespace {
void CheckShape(const InputArgs& a) {
  if (a.rows == 0 || a.cols == 0 || a.rows > (1u << 24) || a.cols > (1u << 24) || a.rows * a.cols > (size_t{1} << 30))
    throw Error("--rows and --cols must be positive with rows x cols at most 2^30");
}
}  // namespace

std::vector<InputRef> ListInputs(const InputArgs& a) {
  CheckShape(a);
  std::vector<InputRef> out;
  for (size_t i = 0; i < a.dists.size(); ++i) {
    InputRef r;
    r.name = DescribeDist(ParseDist(a.dists[i]));
    r.dist = static_cast<int>(i);
    out.push_back(r);
  }
  for (const auto& spec : a.files) {
    const TensorFileSpec f = ParseTensorFileSpec(spec);
    if (!f.safetensors || !f.name.empty()) {
      out.push_back({"", -1, spec});
      continue;
    }
    for (const std::string& n : SafetensorsInputNames(f.path)) out.push_back({n, -1, f.path + ":" + n});
  }
  if (out.empty()) throw Error("no input: give --dist and/or --in");
  return out;
}

Input LoadInput(const InputArgs& a, const InputRef& r) {
  if (r.dist < 0) {
    std::vector<Input> one = LoadTensorFile(r.file);
    return std::move(one.at(0));
  }
  Input in;
  in.name = r.name;
  in.rows = a.rows;
  in.cols = a.cols;
  in.data.resize(a.rows * a.cols);
  // Each distribution draws from its own stream, so adding one does not change the others' data.
  GenerateDist(ParseDist(a.dists[r.dist]), a.seed + 0x100000000ull * static_cast<uint64_t>(r.dist), in.data.data(),
               in.data.size());
  return in;
}

std::vector<Input> LoadInputs(const InputArgs& a) {
  CheckShape(a);
  // Every generated input is held at once; one at a time is transformed, quantized and compared (about
  // five more FP32 copies).
  CheckMemoryCeiling(uint64_t{4} * a.rows * a.cols * (a.dists.size() + 5),
                     "--rows x --cols over " + std::to_string(a.dists.size()) + " distribution(s)");
  std::vector<Input> out;
  for (const InputRef& r : ListInputs(a)) {
    if (r.dist >= 0) {
      out.push_back(LoadInput(a, r));
      continue;
    }
    for (Input& in : LoadTensorFile(r.file)) out.push_back(std::move(in));
  }
  return out;
}

std::optional<std::vector<ordered_json>> RunInputParts(const std::string& study, const InputArgs& a,
                                                       const std::vector<InputRef>& refs, const ordered_json& head,
                                                       const std::function<ordered_json(const Input&)>& per_input,
                                                       const std::function<ordered_json()>& first_part_extra) {
  const WorkPart wp = ResolveWorkPart("study " + study, a.shard, a.shard_dir, "inputs");
  if (!wp.shard.given) {  // one input's data in memory at a time (about five more FP32 copies while it runs)
    CheckMemoryCeiling(uint64_t{4} * a.rows * a.cols * 6, "--rows x --cols");
  }
  const auto work = [&] {
    ordered_json part = ordered_json::array();
    for (size_t k = wp.index; k < refs.size(); k += wp.count) {
      ThrowIfInterrupted();
      part.push_back({{"index", k}, {"entry", per_input(LoadInput(a, refs[k]))}});
    }
    return part.dump() + "\n";
  };
  if (wp.shard.given) {
    ordered_json rec = head;
    rec["inputs_total"] = refs.size();
    RunRecordShard("study", wp.shard, a.shard_dir, rec, [&] { return ordered_json::parse(work()); },
                   wp.index == 0 ? first_part_extra : std::function<ordered_json()>{});
    return std::nullopt;
  }
  const std::vector<std::string> all = RunOnRanks(work);
  if (CurrentRanks().rank != 0) return std::nullopt;
  std::vector<ordered_json> entries(refs.size());
  for (const std::string& p : all)
    for (auto& e : ordered_json::parse(p)) entries.at(e["index"].get<size_t>()) = std::move(e["entry"]);
  return entries;
}

ordered_json StudyHead(const std::string& study, const InputArgs& a, const std::string& csv, const std::string& json) {
  ordered_json h;
  h["study"] = study;
  h["seed"] = a.seed;
  h["command"] = CommandLineWithout({"--shard", "--shard-dir"});
  h["csv"] = csv;
  h["json"] = json;
  return h;
}

// ---------------------------------------------------------------------------------------------------
// The sweep: specs x rules x roundings x transforms x QuEST scale roundings x inputs.

namespace {

std::vector<Method> BuildMethods(const SweepArgs& a, std::vector<std::string>& skipped) {
  const auto or_default = [](const std::vector<std::string>& v) { return v.empty() ? std::vector<std::string>{""} : v; };
  const std::vector<std::string> elems = or_default(a.elems), blocks = or_default(a.blocks),
                                 rules = or_default(a.rules), rounds = or_default(a.rounds);
  const std::vector<std::string> qs = a.quest_scales.empty() ? std::vector<std::string>{"floor"} : a.quest_scales;
  // Misspelled names are the user's error and stop the study; only combinations that do not fit
  // together (an FP32 rule with NVFP4, QuEST on a per-tensor spec) are skipped.
  QuantSpec probe;
  for (const auto& e : a.elems) GetFormat(e);
  for (const auto& b : a.blocks) SetBlockShape(probe, b);
  for (const auto& r : a.rules) ParseScaleRule(r);
  for (const auto& r : a.rounds) ParseRounding(r);
  for (const auto& q : qs) ParseQuestScaleRounding(q);
  for (const auto& t : a.transforms) {
    StudyMethod m;
    m.spec = QuantSpecByName("mxfp4");
    SetStudyTransform(m, t);
  }
  if (a.specs.empty()) throw Error("--spec needs at least one recipe");
  if (a.sr_bits.empty()) throw Error("--sr-bits needs at least one value");
  for (int b : a.sr_bits)
    if (b < 1 || b > 32) throw Error("--sr-bits values must be 1..32, not " + std::to_string(b));
  // One method per combination; the empty string stands for "the spec's own" on the axes left unset.
  struct Combo {
    std::string elem, block, rule, round, transform, quest_scale;
    int sr_bits;
  };
  std::vector<Combo> combos;
  for (const auto& elem : elems)
    for (const auto& block : blocks)
      for (const auto& rule : rules)
        for (const auto& round : rounds)
          for (const auto& t : a.transforms)
            for (const auto& q : qs)
              for (int bits : a.sr_bits) combos.push_back({elem, block, rule, round, t, q, bits});
  std::vector<Method> out;
  for (const auto& sname : a.specs) {
    const QuantSpec base = QuantSpecByName(sname);
    for (const Combo& c : combos) {
      Method me;
      me.spec_label = sname;
      me.m.spec = base;
      try {
        if (!a.profile.empty()) ApplyProfile(me.m.spec, a.profile);
        if (!c.elem.empty()) me.m.spec.elem = GetFormat(c.elem);
        if (!c.block.empty()) SetBlockShape(me.m.spec, c.block);
        if (!c.rule.empty()) {
          me.m.spec.rule = ParseScaleRule(c.rule);
          if (me.m.spec.rule == ScaleRule::kMaxFinite) me.m.spec.nan = NanPolicy::kIgnore;
        }
        if (!c.round.empty()) me.m.spec.cast.rounding = ParseRounding(c.round);
        me.m.spec.cast.sr_bits = c.sr_bits;
        ValidateQuantSpec(me.m.spec);
        SetStudyTransform(me.m, c.transform);
        me.m.quest_opt.scale_rounding = ParseQuestScaleRounding(c.quest_scale);
      } catch (const Error& e) {
        skipped.push_back(sname + (c.elem.empty() ? "" : " elem " + c.elem) + (c.block.empty() ? "" : " block " + c.block) +
                          (c.rule.empty() ? "" : " rule " + c.rule) + (c.round.empty() ? "" : " round " + c.round) +
                          " transform " + c.transform + ": " + e.what());
        continue;
      }
      // The QuEST scale only matters for QuEST, the SR bits only for stochastic rounding.
      if (!me.m.quest && c.quest_scale != qs.front()) continue;
      if (!IsStochastic(me.m.spec.cast.rounding) && c.sr_bits != a.sr_bits.front()) continue;
      out.push_back(std::move(me));
    }
  }
  return out;
}

ordered_json Record(const Method& me, const Input& in, const StudyOutcome& o, int trials) {
  const QuantSpec& s = me.m.spec;
  const ErrorStats& e = o.error;
  ordered_json r;
  r["spec"] = me.spec_label;
  r["elem"] = s.elem.name;
  r["block"] = DescribeBlock(s);
  r["rule"] = ScaleRuleName(s.rule);
  r["round"] = RoundingName(s.cast.rounding);
  r["sr_bits"] = IsStochastic(s.cast.rounding) ? s.cast.sr_bits : 0;
  r["transform"] = DescribeStudyTransform(me.m);
  r["quest_scale"] = me.m.quest ? QuestScaleRoundingName(me.m.quest_opt.scale_rounding) : "";
  r["input"] = in.name;
  r["rows"] = in.rows;
  r["cols"] = in.cols;
  r["trials"] = trials;
  for (const auto& [name, value] : ErrorMetrics(e)) r[name] = value;
  r["misalignment"] = o.misalignment.Misalignment();
  r["misalignment_stderr"] = o.misalignment.StdErr();
  r["misalignment_group"] = o.misalignment_group;
  r["saturated"] = o.stats.saturated;
  r["flushed_to_zero"] = o.stats.flushed_to_zero;
  r["nan_inputs"] = o.stats.nan_inputs;
  r["inf_inputs"] = o.stats.inf_inputs;
  r["nonfinite_outputs"] = e.out_nonfinite;
  r["nan_blocks"] = o.stats.nan_blocks;
  return r;
}

// The records of a sweep and, beside each, its scale histogram (which only the JSON holds).

ordered_json HistogramJson(const QuantStats& st) {
  ordered_json h = ordered_json::object();
  for (size_t b = 0; b < st.scale_histogram.size(); ++b)
    if (st.scale_histogram[b]) h[std::to_string(b)] = st.scale_histogram[b];
  return h;
}

}  // namespace

// One method on one input. trials > 1 repeat with seeds seed + t (SR bits and RHT signs) and merge the
// statistics; the progress bar advances once per trial.
void RunOne(const Method& me, const Input& in, int trials, Progress& progress, SweepRecords& out) {
  ThrowIfInterrupted();
  const StudyOutcome total = RunStudyTrials(in.data.data(), in.rows, in.cols, me.m, trials, [&] {
    progress.Step(me.spec_label + " " + DescribeStudyTransform(me.m) + " " + in.name);
    ThrowIfInterrupted();
  });
  out.records.push_back(Record(me, in, total, trials));
  out.histograms.push_back(HistogramJson(total.stats));
}

// Checks the sweep's options and builds its methods, before any input is read, so a misspelled name
// fails at once.
std::vector<Method> PrepareSweep(const SweepArgs& a) {
  if (a.threads < 0 || a.threads > 1024) throw Error("--threads must be 1..1024");
  if (a.trials < 1 || a.trials > 10000) throw Error("--trials must be 1..10000");
  if (a.transforms.empty()) throw Error("--transform needs at least one value (none for no transform)");
  std::vector<std::string> skipped;
  std::vector<Method> methods = BuildMethods(a, skipped);
  for (const auto& s : skipped) std::fprintf(stderr, "qmx-sim: skipped %s\n", s.c_str());
  if (methods.empty()) throw Error("every combination of the sweep was invalid (see the skipped lines above)");
  if (a.threads > 0) omp_set_num_threads(a.threads);
  return methods;
}

ordered_json SweepInput(const std::vector<Method>& methods, const Input& in, int trials, Progress& progress) {
  SweepRecords r;
  for (const Method& me : methods) RunOne(me, in, trials, progress, r);
  return {{"records", r.records}, {"histograms", r.histograms}};
}

void WriteOutputs(const std::string& study, uint64_t seed, const std::string& csv, const std::string& json,
                  const SweepRecords& r, const std::string& command) {
  AtomicFileSet set;  // both files or neither
  if (!csv.empty()) set.Add(csv, ToCsv(r.records));
  if (!json.empty()) {
    std::vector<ordered_json> full = r.records;
    for (size_t i = 0; i < r.histograms.size() && i < full.size(); ++i) full[i]["scale_histogram"] = r.histograms[i];
    set.Add(json, StudyJson(study, seed, full, command).dump(1) + "\n");
  }
  set.Commit();
}

void FinishSweep(const ordered_json& head, const std::vector<ordered_json>& entries) {
  SweepRecords r;
  for (const ordered_json& e : entries) {
    for (const auto& rec : e.at("records")) r.records.push_back(rec);
    for (const auto& h : e.at("histograms")) r.histograms.push_back(h);
  }
  std::vector<TableColumn> cols;
  for (const auto& c : head.at("columns")) cols.push_back({c.at(0).get<std::string>(), c.at(1).get<std::string>(), c.at(2).get<std::string>()});
  PrintTable(cols, r.records);
  WriteOutputs(head.at("study").get<std::string>(), head.at("seed").get<uint64_t>(), head.at("csv").get<std::string>(),
               head.at("json").get<std::string>(), r, head.at("command").get<std::string>());
}

const std::vector<TableColumn>& ErrorColumns() {
  static const std::vector<TableColumn> c = {
      {"spec", "spec", "%s"},         {"rule", "rule", "%s"},           {"round", "round", "%s"},
      {"transform", "transform", "%s"}, {"input", "input", "%s"},       {"mse", "MSE", "%.3e"},
      {"sqnr_db", "SQNR dB", "%.2f"}, {"mean_rel_err", "mean rel", "%.3g"}, {"bias", "bias", "%.1e"},
      {"cosine", "cosine", "%.6f"},   {"misalignment", "1-E[1/S]", "%.2e"}, {"saturated", "sat", "%s"},
      {"flushed_to_zero", "ftz", "%s"}};
  return c;
}

}  // namespace qmx::cli::study
