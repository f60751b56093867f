// cmd_study.cc: `qmx-sim study error|misalignment|hadamard|kurtosis|ranges|quickstart`: quantization
// studies over specs x scale rules x roundings x transforms x inputs (seeded distributions or tensors
// from .npy / .safetensors), printed as tables and written as CSV / JSON (and SVG for quickstart). The sweeps
// and kurtosis split their inputs over MPI ranks or --shard job arrays (cli/README.md).
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "common/ranks.h"
#include "qmx/distributions.h"
#include "qmx/error.h"
#include "qmx/quantize.h"
#include "study/study_cli.h"

namespace qmx::cli {
namespace {

using namespace study;

// ---------------------------------------------------------------------------------------------------
// Options shared by the sweep subcommands.

void AddInputOptions(CLI::App* cmd, InputArgs& in) {
  cmd->add_option("--dist", in.dists, "Synthetic inputs: normal, laplace, student-t:NU, lognormal:SIGMA, uniform, "
                                      "each optionally +tauT[:RATE] (outliers of T x RMS)");
  cmd->add_option("--in,--input", in.files, "(--input: the older spelling) Tensors: FILE.npy, FILE.safetensors (every float tensor) or "
                                       "FILE.safetensors:NAME; rows = all but the last dimension");
  cmd->add_option("--rows", in.rows, "Rows of each synthetic input")->capture_default_str();
  cmd->add_option("--cols", in.cols, "Columns of each synthetic input (the quantized dimension)")->capture_default_str();
  cmd->add_option("--seed", in.seed, "Seed of the synthetic inputs, SR bits and RHT signs")->capture_default_str();
  cmd->add_option("--shard", in.shard, "I/N: study only inputs k with k mod N = I (job arrays), into --shard-dir");
  cmd->add_option("--shard-dir", in.shard_dir, "Where --shard writes study-shard-I-of-N.json (qmx-sim merge joins them)");
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
  cmd->add_option("--threads", a.threads, "OpenMP threads (default: all; results do not depend on it)")->check(CLI::Range(1, 1024));
  cmd->add_option("--csv", a.csv, "Write the records as CSV");
  cmd->add_option("--json", a.json, "Write the records as JSON, with the command, version, seed and scale histograms");
  cmd->add_flag("--quiet", a.quiet, "No progress bar");
}

void RunSweepCommand(const std::string& study, const SweepArgs& a, const std::vector<TableColumn>& cols) {
  InterruptGuard guard;
  CheckOutputs({{"--csv", a.csv}, {"--json", a.json}}, a.in.files);
  const std::vector<Method> methods = PrepareSweep(a);
  const std::vector<InputRef> refs = ListInputs(a.in);
  ordered_json head = StudyHead(study, a.in, a.csv, a.json);
  ordered_json columns = ordered_json::array();
  for (const TableColumn& c : cols) columns.push_back({c.key, c.header, c.fmt});
  head["columns"] = columns;
  const Ranks& ranks = CurrentRanks();
  const size_t parts = ranks.size > 1 ? static_cast<size_t>(ranks.size) : a.in.shard.empty() ? 1 : ParseShard(a.in.shard).count;
  const size_t mine = (refs.size() + parts - 1) / parts;
  Progress progress(methods.size() * mine * static_cast<size_t>(a.trials), a.quiet || ranks.rank != 0);
  const std::optional<std::vector<ordered_json>> entries = RunInputParts(
      study, a.in, refs, head, [&](const Input& in) { return SweepInput(methods, in, a.trials, progress); });
  ThrowIfInterrupted();
  if (entries) FinishSweep(head, *entries);
}

// Registers a sweep subcommand with its defaults and the shared options; default_dists are the inputs
// when neither --dist nor --in is given.
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
  AddSweepSubcommand(study, "misalignment", "Quartet's MSE and projection misalignment 1 - E[1/S]", mis,
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
  auto* k = study->add_subcommand("kurtosis", "Per-row kurtosis and tau-outliers of tensors; the outlier effect (FOG)");
  AddInputOptions(k, ku->in);
  k->add_option("--tau", ku->taus, "Outlier thresholds in units of the row's RMS")->capture_default_str();
  k->add_option("--outlier-sweep", ku->sweep, "Outlier magnitudes (x RMS) for the theorem-1 sweep")->capture_default_str();
  k->add_option("--spec", ku->specs, "Recipes of the outlier sweep")->capture_default_str();
  k->add_option("--period", ku->period, "One outlier every PERIOD elements in the sweep")->capture_default_str();
  k->add_option("--threads", ku->threads, "OpenMP threads")->check(CLI::Range(1, 1024));
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
  q->add_option("--threads", qs->threads, "OpenMP threads (results do not depend on it)")->check(CLI::Range(1, 1024));
  q->add_flag("--quiet", qs->quiet, "No progress bar");
  q->callback([qs] { RunQuickstart(*qs); });
}

}  // namespace qmx::cli
