// studies.cc: the fixed studies of `qmx-sim study`: kurtosis (per-row kurtosis, tau-outliers and FOG's
// theorem-1 outlier sweep), ranges (the registry's dynamic ranges) and quickstart (the README's main job).
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qmx/distributions.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/io.h"
#include "qmx/metrics.h"
#include "qmx/study.h"
#include "study/study_cli.h"

namespace qmx::cli::study {
// ---------------------------------------------------------------------------------------------------
// kurtosis: per-row kurtosis and tau-outliers of the inputs; then FOG's theorem 1 effect.

// Two tables of different columns: the CSV holds the outlier sweep; the kurtosis table goes to
// FILE-kurtosis.csv beside it.
std::string KurtosisTablePath(const std::string& csv) {
  return (EndsWith(csv, ".csv") ? csv.substr(0, csv.size() - 4) : csv) + "-kurtosis.csv";
}

namespace {

ordered_json KurtosisRecord(const Input& in, const std::vector<double>& taus) {
  const KurtosisStats k = RowKurtosis(in.data.data(), in.rows, in.cols, taus);
  ordered_json r;
  r["table"] = "kurtosis";
  r["input"] = in.name;
  r["rows"] = in.rows;
  r["cols"] = in.cols;
  r["mean_kurtosis"] = k.mean_kurtosis;
  r["max_kurtosis"] = k.max_kurtosis;
  r["skipped_rows"] = k.skipped_rows;
  for (size_t t = 0; t < taus.size(); ++t) {
    char key[48];
    std::snprintf(key, sizeof key, "outliers_tau%g", taus[t]);
    r[key] = k.outliers[t];
  }
  return r;
}

// Theorem 1: a Gaussian tensor with one outlier of tau x RMS every `period` elements; the MSE of the other
// elements, relative to the same tensor without outliers, per spec.
ordered_json OutlierSweepRecords(const KurtosisArgs& a) {
  const size_t rows = a.in.rows, cols = a.in.cols, n = rows * cols;
  std::vector<float> base(n);
  GenerateDist(ParseDist("normal"), a.in.seed, base.data(), n);
  ordered_json sweep = ordered_json::array();
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
  return sweep;
}

// The kurtosis tables and files from the head (with taus, rows, cols, period), the inputs' records and the
// outlier sweep's.
void FinishKurtosis(const ordered_json& head, const std::vector<ordered_json>& recs, const ordered_json& sweep_json) {
  std::vector<TableColumn> kc = {{"input", "input", "%s"}, {"rows", "rows", "%s"}, {"cols", "cols", "%s"},
                                 {"mean_kurtosis", "mean kurt", "%.3f"}, {"max_kurtosis", "max kurt", "%.3f"}};
  for (const auto& tj : head.at("taus")) {
    const double t = tj.get<double>();
    char key[48], label[48];
    std::snprintf(key, sizeof key, "outliers_tau%g", t);
    std::snprintf(label, sizeof label, ">=%gxRMS", t);
    kc.push_back({key, label, "%s"});
  }
  std::printf("Per-row kurtosis mean(x^4)/mean(x^2)^2 (FOG) and tau-outliers |x| >= tau x RMS(row)\n");
  PrintTable(kc, recs);
  const std::vector<ordered_json> sweep(sweep_json.begin(), sweep_json.end());
  std::printf("\nOutlier sweep (FOG theorem 1): N(0,1) %zux%zu with x[i] = tau every %zu elements; error of the "
              "other elements\n", head.at("rows").get<size_t>(), head.at("cols").get<size_t>(), head.at("period").get<size_t>());
  PrintTable({{"spec", "spec", "%s"}, {"block", "block", "%s"}, {"tau", "tau", "%g"}, {"mse_others", "MSE others", "%.3e"},
              {"mse_ratio", "x clean", "%.2f"}, {"sqnr_db_others", "SQNR dB", "%.2f"},
              {"zeroed_fraction", "zeroed", "%.4f"}},
             sweep);
  std::vector<ordered_json> all = recs;
  all.insert(all.end(), sweep.begin(), sweep.end());
  const std::string csv = head.at("csv").get<std::string>(), json = head.at("json").get<std::string>();
  AtomicFileSet set;
  if (!csv.empty()) {
    set.Add(KurtosisTablePath(csv), ToCsv(recs));
    set.Add(csv, ToCsv(sweep));
  }
  if (!json.empty())
    set.Add(json, StudyJson("kurtosis", head.at("seed").get<uint64_t>(), all, head.at("command").get<std::string>()).dump(1) + "\n");
  set.Commit();
}

}  // namespace

void RunKurtosis(const KurtosisArgs& a) {
  InterruptGuard guard;
  CheckOutputs({{"--csv", a.csv}, {"--csv (its kurtosis table)", a.csv.empty() ? "" : KurtosisTablePath(a.csv)},
                {"--json", a.json}},
               a.in.files);
  if (a.threads > 0) omp_set_num_threads(a.threads);
  for (double t : a.taus)
    if (!(t > 0)) throw Error("--tau values must be > 0");
  for (double t : a.sweep)
    if (!(t > 0) || !std::isfinite(t)) throw Error("--outlier-sweep values must be positive");
  if (a.period < 2 || a.period > a.in.cols) throw Error("--period must be 2..cols");
  const std::vector<InputRef> refs = ListInputs(a.in);
  ordered_json head = StudyHead("kurtosis", a.in, a.csv, a.json);
  head["taus"] = a.taus;
  head["rows"] = a.in.rows;
  head["cols"] = a.in.cols;
  head["period"] = a.period;
  // The inputs' records split over the parts; the outlier sweep (synthetic, the same for every part) is
  // computed once: by rank 0 after the gathering, or by shard 0 into its record.
  const std::optional<std::vector<ordered_json>> recs = RunInputParts(
      "kurtosis", a.in, refs, head, [&](const Input& in) { return KurtosisRecord(in, a.taus); },
      [&] { return OutlierSweepRecords(a); });
  if (!recs) return;
  FinishKurtosis(head, *recs, OutlierSweepRecords(a));
}

void FinishStudy(const ordered_json& head, const std::vector<ordered_json>& entries, const ordered_json& extra) {
  if (head.at("study").get<std::string>() == "kurtosis") return FinishKurtosis(head, entries, extra);
  FinishSweep(head, entries);
}

// ---------------------------------------------------------------------------------------------------
// ranges: binades and limits of every registry format.

void RunRanges(const std::string& csv, const std::string& json) {
  CheckOutputs({{"--csv", csv}, {"--json", json}}, {});
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
  std::printf("Dynamic range of each format: binades = log2(max / min subnormal) (E4M3: 17.8, MXFP8 recipes)\n");
  PrintTable({{"format", "format", "%s"}, {"bits", "bits", "%s"}, {"max", "max", "%.6g"},
              {"min_normal", "min normal", "%.6g"}, {"min_subnormal", "min subnormal", "%.6g"},
              {"binades", "binades", "%.2f"}, {"normal_binades", "normal binades", "%.2f"},
              {"decimal_digits", "digits", "%.2f"}, {"finite_codes", "finite codes", "%s"}, {"inf", "inf", "%s"},
              {"nan", "nan", "%s"}},
             recs);
  AtomicFileSet set;
  if (!csv.empty()) set.Add(csv, ToCsv(recs));
  if (!json.empty()) set.Add(json, StudyJson("ranges", 0, recs).dump(1) + "\n");
  set.Commit();
}

// ---------------------------------------------------------------------------------------------------
// quickstart: the README's main job.

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
  CreateOutputDir(q.out_dir);
  const std::string base = q.out_dir + "/quickstart";
  WriteOutputs("quickstart", q.seed, base + ".csv", base + ".json", out, CommandLine());
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

}  // namespace qmx::cli::study
