// cmd_study.cc: `qmx-sim study error|misalignment|hadamard|kurtosis|ranges|quickstart`: quantization
// studies over specs x scale rules x roundings x transforms x inputs (seeded distributions or tensors
// from .npy / .safetensors), printed as tables and written as CSV / JSON (and SVG for quickstart).
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "qmx/distributions.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/io.h"
#include "qmx/metrics.h"
#include "qmx/study.h"
#include "common/study_output.h"
#include "common/tensor_inputs.h"

namespace qmx::cli {
namespace {

// ---------------------------------------------------------------------------------------------------
// Inputs (Input and LoadTensorFile: tensor_inputs.h)

struct InputArgs {
  std::vector<std::string> dists, files;
  size_t rows = 1024, cols = 4096;
  uint64_t seed = 1;
};

std::vector<Input> LoadInputs(const InputArgs& a) {
  if (a.rows == 0 || a.cols == 0 || a.rows > (1u << 24) || a.cols > (1u << 24) || a.rows * a.cols > (size_t{1} << 30))
    throw Error("--rows and --cols must be positive with rows x cols at most 2^30");
  std::vector<Input> out;
  for (size_t i = 0; i < a.dists.size(); ++i) {
    const DistSpec d = ParseDist(a.dists[i]);
    Input in;
    in.name = DescribeDist(d);
    in.rows = a.rows;
    in.cols = a.cols;
    in.data.resize(a.rows * a.cols);
    // Each distribution draws from its own stream, so adding one does not change the others' data.
    GenerateDist(d, a.seed + 0x100000000ull * i, in.data.data(), in.data.size());
    out.push_back(std::move(in));
  }
  for (const auto& f : a.files)
    for (Input& in : LoadTensorFile(f)) out.push_back(std::move(in));
  if (out.empty()) throw Error("no input: give --dist and/or --input");
  return out;
}

// ---------------------------------------------------------------------------------------------------
// The sweep: specs x rules x roundings x transforms x QuEST scale roundings x inputs.

struct SweepArgs {
  InputArgs in;
  std::vector<std::string> specs, elems, blocks, rules, rounds, transforms, quest_scales;
  std::string profile;
  int trials = 1;
  std::vector<int> sr_bits = {8};
  int threads = 0;
  bool quiet = false;
  std::string csv, json;
};

struct Method {
  std::string spec_label;  // the recipe name as given
  StudyMethod m;
};

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
  r["mse"] = e.Mse();
  r["rmse"] = e.Rmse();
  r["nmse"] = e.Nmse();
  r["sqnr_db"] = e.SqnrDb();
  r["max_abs_err"] = e.max_abs_err;
  r["max_rel_err"] = e.max_rel_err;
  r["mean_rel_err"] = e.MeanRelErr();
  r["bias"] = e.Bias();
  r["cosine"] = e.Cosine();
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
struct SweepRecords {
  std::vector<ordered_json> records, histograms;
};

ordered_json HistogramJson(const QuantStats& st) {
  ordered_json h = ordered_json::object();
  for (size_t b = 0; b < st.scale_histogram.size(); ++b)
    if (st.scale_histogram[b]) h[std::to_string(b)] = st.scale_histogram[b];
  return h;
}

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

// Every method on every input, inputs outermost.
SweepRecords RunSweep(const SweepArgs& a, const std::vector<Method>& methods, const std::vector<Input>& inputs) {
  SweepRecords out;
  Progress progress(methods.size() * inputs.size() * a.trials, a.quiet);
  for (const Input& in : inputs)
    for (const Method& me : methods) RunOne(me, in, a.trials, progress, out);
  return out;
}

void WriteOutputs(const std::string& study, uint64_t seed, const std::string& csv, const std::string& json,
                  const SweepRecords& r) {
  if (!csv.empty()) WriteFileAtomic(csv, ToCsv(r.records));
  if (!json.empty()) {
    std::vector<ordered_json> full = r.records;
    for (size_t i = 0; i < r.histograms.size() && i < full.size(); ++i) full[i]["scale_histogram"] = r.histograms[i];
    WriteFileAtomic(json, StudyJson(study, seed, full).dump(1) + "\n");
  }
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

// ---------------------------------------------------------------------------------------------------
// Options shared by the sweep subcommands.

void AddInputOptions(CLI::App* cmd, InputArgs& in) {
  cmd->add_option("--dist", in.dists, "Synthetic inputs: normal, laplace, student-t:NU, lognormal:SIGMA, uniform, "
                                      "each optionally +tauT[:RATE] (outliers of T x RMS)");
  cmd->add_option("--input", in.files, "Tensors: FILE.npy, FILE.safetensors (every float tensor) or "
                                       "FILE.safetensors:NAME; rows = all but the last dimension");
  cmd->add_option("--rows", in.rows, "Rows of each synthetic input")->capture_default_str();
  cmd->add_option("--cols", in.cols, "Columns of each synthetic input (the quantized dimension)")->capture_default_str();
  cmd->add_option("--seed", in.seed, "Seed of the synthetic inputs, SR bits and RHT signs")->capture_default_str();
}

void AddSweepOptions(CLI::App* cmd, SweepArgs& a) {
  AddInputOptions(cmd, a.in);
  cmd->add_option("--spec", a.specs, "Recipes (qmx-sim quantize --help lists them)")->capture_default_str();
  cmd->add_option("--elem", a.elems, "Element formats to sweep (default: each spec's own)");
  cmd->add_option("--block", a.blocks, "Block shapes to sweep: 1x32, 1x128, 16x16, per-row, per-tensor (default: each spec's own)");
  cmd->add_option("--rule", a.rules, "Scale rules to sweep (default: each spec's own)");
  cmd->add_option("--round", a.rounds, "Roundings to sweep: rne, sr, rz, ... (default: each spec's own)");
  cmd->add_option("--transform", a.transforms, "none, hadamard:N, rht:N[:SEED], quest, quest:N, quest-rht:N[:SEED]")
      ->capture_default_str();
  cmd->add_option("--quest-scale", a.quest_scales, "QuEST scale rounding: floor (Quartet's kernels), nearest, exact")
      ->capture_default_str();
  cmd->add_option("--sr-bits", a.sr_bits, "Random bits per element for stochastic rounding to sweep (1..32; 8 as Blackwell's cvt.rs)")
      ->capture_default_str();
  cmd->add_option("--profile", a.profile, "Library profile applied to every spec (ocp, microxcaling, ...)");
  cmd->add_option("--trials", a.trials, "Repeat with seeds seed+t and merge (SR and RHT randomness)")
      ->capture_default_str();
  cmd->add_option("--threads", a.threads, "OpenMP threads (default: all; results do not depend on it)");
  cmd->add_option("--csv", a.csv, "Write the records as CSV");
  cmd->add_option("--json", a.json, "Write the records as JSON, with the command, version, seed and scale histograms");
  cmd->add_flag("--quiet", a.quiet, "No progress bar");
}

void RunSweepCommand(const std::string& study, const SweepArgs& a, const std::vector<TableColumn>& cols) {
  InterruptGuard guard;
  const std::vector<Method> methods = PrepareSweep(a);
  const std::vector<Input> inputs = LoadInputs(a.in);
  const SweepRecords r = RunSweep(a, methods, inputs);
  ThrowIfInterrupted();
  PrintTable(cols, r.records);
  WriteOutputs(study, a.in.seed, a.csv, a.json, r);
}

// Registers a sweep subcommand with its defaults and the shared options; default_dists are the inputs
// when neither --dist nor --input is given.
void AddSweepSubcommand(CLI::App* parent, const std::string& name, const std::string& help, const SweepArgs& defaults,
                        const std::vector<std::string>& default_dists, const std::vector<TableColumn>& cols) {
  auto args = std::make_shared<SweepArgs>(defaults);
  CLI::App* cmd = parent->add_subcommand(name, help);
  AddSweepOptions(cmd, *args);
  cmd->callback([args, name, default_dists, cols] {
    SweepArgs a = *args;
    if (a.in.dists.empty() && a.in.files.empty()) a.in.dists = default_dists;
    RunSweepCommand(name, a, cols);
  });
}

// ---------------------------------------------------------------------------------------------------
// kurtosis: per-row kurtosis and tau-outliers of the inputs; then seed 001's theorem 1 effect.

struct KurtosisArgs {
  InputArgs in;
  std::vector<double> taus = {3, 5, 10, 20};
  std::vector<double> sweep = {1, 4, 16, 64, 256, 1024};
  std::vector<std::string> specs = {"fp8-tensor-current", "fp8-rowwise", "fp8-block1x128", "mxfp8", "mxfp4", "nvfp4"};
  size_t period = 256;
  int threads = 0;
  bool quiet = false;
  std::string csv, json;
};

void RunKurtosis(const KurtosisArgs& a) {
  InterruptGuard guard;
  if (a.threads > 0) omp_set_num_threads(a.threads);
  for (double t : a.taus)
    if (!(t > 0)) throw Error("--tau values must be > 0");
  for (double t : a.sweep)
    if (!(t > 0) || !std::isfinite(t)) throw Error("--outlier-sweep values must be positive");
  if (a.period < 2 || a.period > a.in.cols) throw Error("--period must be 2..cols");
  const std::vector<Input> inputs = LoadInputs(a.in);
  std::vector<ordered_json> recs;
  for (const Input& in : inputs) {
    ThrowIfInterrupted();
    const KurtosisStats k = RowKurtosis(in.data.data(), in.rows, in.cols, a.taus);
    ordered_json r;
    r["table"] = "kurtosis";
    r["input"] = in.name;
    r["rows"] = in.rows;
    r["cols"] = in.cols;
    r["mean_kurtosis"] = k.mean_kurtosis;
    r["max_kurtosis"] = k.max_kurtosis;
    r["skipped_rows"] = k.skipped_rows;
    for (size_t t = 0; t < a.taus.size(); ++t) {
      char key[48];
      std::snprintf(key, sizeof key, "outliers_tau%g", a.taus[t]);
      r[key] = k.outliers[t];
    }
    recs.push_back(r);
  }
  std::vector<TableColumn> kc = {{"input", "input", "%s"}, {"rows", "rows", "%s"}, {"cols", "cols", "%s"},
                                 {"mean_kurtosis", "mean kurt", "%.3f"}, {"max_kurtosis", "max kurt", "%.3f"}};
  for (double t : a.taus) {
    char key[48], head[48];
    std::snprintf(key, sizeof key, "outliers_tau%g", t);
    std::snprintf(head, sizeof head, ">=%gxRMS", t);
    kc.push_back({key, head, "%s"});
  }
  std::printf("Per-row kurtosis mean(x^4)/mean(x^2)^2 (FOG, seed 001) and tau-outliers |x| >= tau x RMS(row)\n");
  PrintTable(kc, recs);

  // Theorem 1: a Gaussian tensor with one outlier of tau x RMS every `period` elements; the MSE of the other
  // elements, relative to the same tensor without outliers, per spec.
  const size_t rows = a.in.rows, cols = a.in.cols, n = rows * cols;
  std::vector<float> base(n);
  GenerateDist(ParseDist("normal"), a.in.seed, base.data(), n);
  std::vector<ordered_json> sweep;
  Progress progress(a.specs.size() * (a.sweep.size() + 1), a.quiet);
  for (const auto& sname : a.specs) {
    const QuantSpec spec = QuantSpecByName(sname);
    ThrowIfInterrupted();
    const std::vector<OutlierSweepPoint> points = OutlierSweep(base.data(), rows, cols, spec, a.period, a.sweep, [&] {
      progress.Step(sname);
      ThrowIfInterrupted();
    });
    for (const OutlierSweepPoint& p : points) {
      ordered_json r;
      r["table"] = "outlier_sweep";
      r["spec"] = sname;
      r["block"] = DescribeBlock(spec);
      r["tau"] = p.tau;
      r["period"] = a.period;
      r["mse_others"] = p.others.Mse();
      r["mse_others_clean"] = p.clean_mse;
      r["mse_ratio"] = p.clean_mse > 0 ? p.others.Mse() / p.clean_mse : 0.0;
      r["sqnr_db_others"] = p.others.SqnrDb();
      r["zeroed_fraction"] = p.zeroed_fraction;
      sweep.push_back(r);
    }
  }
  std::printf("\nOutlier sweep (seed 001 theorem 1): N(0,1) %zux%zu with x[i] = tau every %zu elements; error of the "
              "other elements\n", rows, cols, a.period);
  PrintTable({{"spec", "spec", "%s"}, {"block", "block", "%s"}, {"tau", "tau", "%g"}, {"mse_others", "MSE others", "%.3e"},
              {"mse_ratio", "x clean", "%.2f"}, {"sqnr_db_others", "SQNR dB", "%.2f"},
              {"zeroed_fraction", "zeroed", "%.4f"}},
             sweep);
  std::vector<ordered_json> all = recs;
  all.insert(all.end(), sweep.begin(), sweep.end());
  if (!a.csv.empty()) {
    // Two tables of different columns: the CSV holds the outlier sweep; the kurtosis table goes to
    // FILE-kurtosis.csv beside it.
    std::string kpath = a.csv;
    if (EndsWith(kpath, ".csv")) kpath = kpath.substr(0, kpath.size() - 4);
    WriteFileAtomic(kpath + "-kurtosis.csv", ToCsv(recs));
    WriteFileAtomic(a.csv, ToCsv(sweep));
  }
  if (!a.json.empty()) WriteFileAtomic(a.json, StudyJson("kurtosis", a.in.seed, all).dump(1) + "\n");
}

// ---------------------------------------------------------------------------------------------------
// ranges: binades and limits of every registry format.

void RunRanges(const std::string& csv, const std::string& json) {
  std::vector<ordered_json> recs;
  for (const auto& e : Registry()) {
    const Format& f = e.format;
    const FormatLimits l = Limits(f);
    ordered_json r;
    r["format"] = f.name;
    r["bits"] = f.Bits();
    r["max"] = l.max_finite;
    r["min_normal"] = l.min_normal;
    r["min_subnormal"] = l.min_subnormal;
    r["binades"] = l.binades;
    r["normal_binades"] = l.normal_binades;
    r["decimal_digits"] = l.decimal_digits;
    r["inf"] = f.HasInf();
    r["nan"] = f.HasNan();
    if (f.Bits() <= 8) {
      r["finite_codes"] = FiniteCodeCount(f);
    } else {
      r["finite_codes"] = nullptr;
    }
    recs.push_back(r);
  }
  std::printf("Dynamic range of each format: binades = log2(max / min subnormal) (E4M3: 17.8, seed 000)\n");
  PrintTable({{"format", "format", "%s"}, {"bits", "bits", "%s"}, {"max", "max", "%.6g"},
              {"min_normal", "min normal", "%.6g"}, {"min_subnormal", "min subnormal", "%.6g"},
              {"binades", "binades", "%.2f"}, {"normal_binades", "normal binades", "%.2f"},
              {"decimal_digits", "digits", "%.2f"}, {"finite_codes", "finite codes", "%s"}, {"inf", "inf", "%s"},
              {"nan", "nan", "%s"}},
             recs);
  if (!csv.empty()) WriteFileAtomic(csv, ToCsv(recs));
  if (!json.empty()) WriteFileAtomic(json, StudyJson("ranges", 0, recs).dump(1) + "\n");
}

// ---------------------------------------------------------------------------------------------------
// quickstart: the README's main job.

struct QuickstartArgs {
  std::string out_dir = "notebooks-data/quickstart";
  size_t rows = 2048, cols = 4096;
  uint64_t seed = 1;
  int threads = 0;
  bool quiet = false;
};

void RunQuickstart(const QuickstartArgs& q) {
  InterruptGuard guard;
  const auto t0 = std::chrono::steady_clock::now();
  InputArgs in_args;
  in_args.dists = {"normal", "laplace", "student-t:3", "normal+tau100:0.001"};
  in_args.rows = q.rows;
  in_args.cols = q.cols;
  in_args.seed = q.seed;
  struct Entry {
    const char* spec;
    const char* rule;
    const char* transform;
    const char* label;
  };
  const std::vector<Entry> entries = {
      {"fp8-tensor-current", "", "none", "FP8 E4M3 per-tensor"},
      {"fp8-block1x128", "", "none", "FP8 E4M3 blockwise 1x128"},
      {"mxfp8", "ocp-floor", "none", "MXFP8 round-down (OCP)"},
      {"mxfp8", "round-up", "none", "MXFP8 round-up (NVIDIA)"},
      {"mxfp6_e2m3", "", "none", "MXFP6 E2M3"},
      {"mxfp4", "", "none", "MXFP4"},
      {"mxfp4", "", "hadamard:32", "MXFP4 + Hadamard 32"},
      {"nvfp4", "", "none", "NVFP4"},
  };
  const std::vector<Input> inputs = LoadInputs(in_args);
  SweepRecords out;
  Progress progress(entries.size() * inputs.size(), q.quiet);
  if (q.threads > 0) omp_set_num_threads(q.threads);
  // Quantizer-major order: the table, the CSV and the chart's rows group by quantizer.
  for (const Entry& e : entries) {
    Method me;
    me.m.spec = QuantSpecByName(e.spec);
    if (*e.rule) me.m.spec.rule = ParseScaleRule(e.rule);
    SetStudyTransform(me.m, e.transform);
    me.spec_label = e.spec;
    for (const Input& in : inputs) {
      RunOne(me, in, 1, progress, out);
      out.records.back()["label"] = e.label;
    }
  }
  ThrowIfInterrupted();
  const std::vector<ordered_json>& records = out.records;
  std::printf("qmx-sim study quickstart: %zu x %zu FP32 inputs, seed %llu; error of dequantize(quantize(x)) against x\n",
              q.rows, q.cols, static_cast<unsigned long long>(q.seed));
  PrintTable({{"label", "quantizer", "%s"}, {"input", "input", "%s"}, {"sqnr_db", "SQNR dB", "%.2f"},
              {"mse", "MSE", "%.3e"}, {"mean_rel_err", "mean rel", "%.3g"}, {"cosine", "cosine", "%.6f"},
              {"saturated", "saturated", "%s"}, {"flushed_to_zero", "flushed", "%s"}},
             records);
  std::filesystem::create_directories(q.out_dir);
  const std::string base = q.out_dir + "/quickstart";
  WriteOutputs("quickstart", q.seed, base + ".csv", base + ".json", out);
  std::vector<std::string> cats, series;
  for (const Entry& e : entries) cats.push_back(e.label);
  for (const Input& in : inputs) series.push_back(in.name);
  std::vector<std::vector<double>> vals(entries.size(), std::vector<double>(inputs.size()));
  for (size_t i = 0; i < entries.size(); ++i)
    for (size_t k = 0; k < inputs.size(); ++k) vals[i][k] = records[i * inputs.size() + k]["sqnr_db"].get<double>();
  WriteFileAtomic(base + ".svg", BarChartSvg("qmx-sim quickstart: SQNR of each quantizer (higher is better)",
                                             "SQNR (dB)", cats, series, vals));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nwrote %s.csv, %s.json, %s.svg (%.1f s on %d threads)\n", base.c_str(), base.c_str(), base.c_str(), secs,
              omp_get_max_threads());
}

}  // namespace

void AddStudyCommand(CLI::App& app) {
  auto* study = app.add_subcommand("study", "Quantization studies: error, misalignment, hadamard, kurtosis, ranges, quickstart");
  study->require_subcommand(1);

  SweepArgs err;
  err.specs = {"mxfp8", "mxfp6_e2m3", "mxfp4", "nvfp4"};
  err.transforms = {"none"};
  AddSweepSubcommand(study, "error", "Quantization error: specs x rules x roundings x transforms x inputs", err,
                     {"normal", "laplace", "student-t:3"}, ErrorColumns());

  // misalignment: Quartet's Table 2 analogue by default.
  SweepArgs mis;
  mis.specs = {"mxfp4"};
  mis.rounds = {"sr", "rne"};
  mis.transforms = {"hadamard:32", "quest"};
  mis.trials = 4;
  AddSweepSubcommand(study, "misalignment", "Quartet's MSE and projection misalignment 1 - E[1/S] (seed 003)", mis,
                     {"normal"},
                     {{"spec", "spec", "%s"}, {"rule", "rule", "%s"}, {"round", "round", "%s"},
                      {"sr_bits", "SR bits", "%s"}, {"transform", "transform", "%s"},
                      {"quest_scale", "QuEST scale", "%s"}, {"input", "input", "%s"}, {"mse", "MSE", "%.3e"},
                      {"misalignment", "1-E[1/S]", "%.3e"}, {"misalignment_stderr", "+-", "%.1e"},
                      {"cosine", "cosine", "%.6f"}, {"bias", "bias", "%.1e"}, {"trials", "trials", "%s"}});

  SweepArgs had;
  had.specs = {"mxfp4", "nvfp4", "mxfp8"};
  had.transforms = {"none", "hadamard:16", "hadamard:32", "hadamard:64", "hadamard:128", "hadamard:256", "rht:32"};
  AddSweepSubcommand(study, "hadamard", "Error with and without block (randomized) Hadamard transforms", had,
                     {"normal", "student-t:3", "normal+tau50:0.001"}, ErrorColumns());

  // kurtosis
  auto ku = std::make_shared<KurtosisArgs>();
  auto* k = study->add_subcommand("kurtosis", "Per-row kurtosis and tau-outliers of tensors; the outlier effect (seed 001)");
  AddInputOptions(k, ku->in);
  k->add_option("--tau", ku->taus, "Outlier thresholds in units of the row's RMS")->capture_default_str();
  k->add_option("--outlier-sweep", ku->sweep, "Outlier magnitudes (x RMS) for the theorem-1 sweep")->capture_default_str();
  k->add_option("--spec", ku->specs, "Recipes of the outlier sweep")->capture_default_str();
  k->add_option("--period", ku->period, "One outlier every PERIOD elements in the sweep")->capture_default_str();
  k->add_option("--threads", ku->threads, "OpenMP threads");
  k->add_option("--csv", ku->csv, "Outlier sweep as CSV (the kurtosis table goes to FILE-kurtosis.csv)");
  k->add_option("--json", ku->json, "Both tables as JSON");
  k->add_flag("--quiet", ku->quiet, "No progress bar");
  k->callback([ku] {
    KurtosisArgs a = *ku;
    if (a.in.dists.empty() && a.in.files.empty()) a.in.dists = {"normal", "laplace", "student-t:3", "normal+tau20"};
    RunKurtosis(a);
  });

  // ranges
  auto rcsv = std::make_shared<std::string>(), rjson = std::make_shared<std::string>();
  auto* r = study->add_subcommand("ranges", "Binades and limits of every registry format");
  r->add_option("--csv", *rcsv, "Write the table as CSV");
  r->add_option("--json", *rjson, "Write the table as JSON");
  r->callback([rcsv, rjson] { RunRanges(*rcsv, *rjson); });

  // quickstart
  auto qs = std::make_shared<QuickstartArgs>();
  auto* q = study->add_subcommand("quickstart", "The default study: FP8, MXFP8 (round-down / round-up), MXFP6, MXFP4 "
                                                "(+Hadamard), NVFP4 on Gaussian and heavy-tailed inputs");
  q->add_option("--out-dir", qs->out_dir, "Directory for quickstart.csv/.json/.svg")->capture_default_str();
  q->add_option("--rows", qs->rows, "Rows of each input")->capture_default_str();
  q->add_option("--cols", qs->cols, "Columns of each input")->capture_default_str();
  q->add_option("--seed", qs->seed, "Seed")->capture_default_str();
  q->add_option("--threads", qs->threads, "OpenMP threads (results do not depend on it)");
  q->add_flag("--quiet", qs->quiet, "No progress bar");
  q->callback([qs] { RunQuickstart(*qs); });
}

}  // namespace qmx::cli
