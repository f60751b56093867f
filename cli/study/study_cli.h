// study_cli.h: the pieces of `qmx-sim study` its files share: the input and sweep options, the sweep's
// methods and records (sweep.cc), and the fixed studies kurtosis, ranges and quickstart (studies.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/study_output.h"
#include "common/tensor_inputs.h"
#include "qmx/study.h"

namespace qmx::cli::study {

// Inputs (Input and LoadTensorFile: common/tensor_inputs.h): seeded distributions and tensor files.
struct InputArgs {
  std::vector<std::string> dists, files;
  size_t rows = 1024, cols = 4096;
  uint64_t seed = 1;
  std::string shard, shard_dir;  // --shard I/N and --shard-dir: this job-array task's inputs
};
// Every input read at once (quickstart's few generated ones).
std::vector<Input> LoadInputs(const InputArgs& a);
// One input, not yet read: distribution `dist` of --dist, or `file` (a .npy, or FILE.safetensors:NAME).
struct InputRef {
  std::string name;  // a distribution's name ("" for files: the tensor's own, on reading)
  int dist = -1;
  std::string file;
};
// The inputs in the order the studies take them (distributions, then each file's tensors), from the files'
// headers alone; LoadInput reads one.
std::vector<InputRef> ListInputs(const InputArgs& a);
Input LoadInput(const InputArgs& a, const InputRef& r);

// A study over inputs split k mod N: over MPI ranks, or a --shard I/N job-array task. This process reads its
// inputs one at a time and turns each into an entry (per_input). Returns every entry in input order at rank
// 0 of the job (one process: rank 0 of 1), nothing at other ranks; a shard writes its record
// (study-shard-I-of-N.json: head, inputs_total, its part, and for shard 0 first_part_extra()) into
// --shard-dir, skipping a finished one, and returns nothing. `qmx-sim merge` then calls FinishStudy.
std::optional<std::vector<ordered_json>> RunInputParts(const std::string& study, const InputArgs& a,
                                                       const std::vector<InputRef>& refs, const ordered_json& head,
                                                       const std::function<ordered_json(const Input&)>& per_input,
                                                       const std::function<ordered_json()>& first_part_extra = {});
// A study's head: study, seed, the command without --shard and --shard-dir, and the --csv and --json paths.
ordered_json StudyHead(const std::string& study, const InputArgs& a, const std::string& csv, const std::string& json);
// Prints and writes a split study from its head, its entries in input order and shard 0's extra (merge).
void FinishStudy(const ordered_json& head, const std::vector<ordered_json>& entries, const ordered_json& extra);

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

// The records of a sweep and, beside each, its scale histogram (which only the JSON holds).
struct SweepRecords {
  std::vector<ordered_json> records, histograms;
};

// Checks the sweep's options and builds its methods, before any input is read, so a misspelled name
// fails at once.
std::vector<Method> PrepareSweep(const SweepArgs& a);
// One method on one input; trials > 1 merge seeds seed + t. The progress bar advances once per trial.
void RunOne(const Method& me, const Input& in, int trials, Progress& progress, SweepRecords& out);
// Every method on one input (an entry of RunInputParts: its records and their scale histograms).
ordered_json SweepInput(const std::vector<Method>& methods, const Input& in, int trials, Progress& progress);
// command: the JSON's "command" (the process's own, or a shard's without --shard).
void WriteOutputs(const std::string& study, uint64_t seed, const std::string& csv, const std::string& json,
                  const SweepRecords& r, const std::string& command);
// A sweep's table and files from its head (with "columns") and entries.
void FinishSweep(const ordered_json& head, const std::vector<ordered_json>& entries);
const std::vector<TableColumn>& ErrorColumns();

// kurtosis: per-row kurtosis and tau-outliers of the inputs; then FOG's theorem 1 effect.
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
void RunKurtosis(const KurtosisArgs& a);
// ranges: binades and limits of every registry format.
void RunRanges(const std::string& csv, const std::string& json);
// quickstart: the README's main job.
struct QuickstartArgs {
  std::string out_dir = "notebooks-data/quickstart";
  size_t rows = 2048, cols = 4096;
  uint64_t seed = 1;
  int threads = 0;
  bool quiet = false;
};
void RunQuickstart(const QuickstartArgs& q);

}  // namespace qmx::cli::study
