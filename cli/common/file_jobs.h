// file_jobs.h: a command over a multi-file checkpoint (a directory of .safetensors, or a
// model.safetensors.index.json), file by file: input file f gives output file DIR/<f's name>, made by part
// f mod N (MPI ranks, or --shard I/N of a job array), one file's tensors in memory at a time per process;
// then the output's model.safetensors.index.json and the --json summary, byte-identical for any N
// (cli/README.md "Running on many machines"). `quantize` and `dequantize` run on it.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qmx/safetensors.h"

namespace qmx::cli {

// One input file's output: its tensors (none: the file is skipped), metadata, summary rows and table lines.
struct FilePart {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> meta;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  std::string lines;
};

struct FileJob {
  std::string kind;               // the shard records' name: KIND-shard-I-of-N.json
  std::string out, json, shard, shard_dir;
  std::vector<std::string> inputs;  // paths no output may be (the checkpoint)
  bool quiet = false;
  // What identifies the job (a rerun of a shard must match it); head["summary"] starts the --json summary.
  nlohmann::ordered_json head;
  std::vector<std::string> files;  // the input files, in the reader's order
  std::vector<bool> used;          // which of them the job reads
  std::function<FilePart(size_t file)> run;
};

// A job of `kind` over `in` (its files), with the paths and options set, no file used yet, and the head's
// out, files_total and generator; the command adds the rest of the head, `used` and `run`.
FileJob MakeFileJob(const std::string& kind, const std::string& in, const std::vector<std::string>& files,
                    const std::string& out, const std::string& json, const std::string& shard,
                    const std::string& shard_dir, bool quiet);

// Runs the job as this process's part; rank 0 (or the one process) writes the index and the summary, a
// --shard writes its record for `qmx-sim merge`. Errors name the input file.
void RunFileJob(const FileJob& job);
// qmx-sim merge of a file job's shard records (in shard order): checks each file a shard wrote against its
// SHA-256, then writes the index and `json`.
void MergeFileJob(const std::string& kind, const std::vector<std::string>& texts, const std::string& dir,
                  const std::string& json, bool quiet);

}  // namespace qmx::cli
