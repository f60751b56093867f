// ranks.h: the processes one qmx-sim command runs as: one (the default), the ranks of an MPI job (a build
// with MPI, QMX_MPI, started by mpirun or srun), or one shard of a job array (--shard I/N, merged later by
// `qmx-sim merge`). Commands split their work by rank, rank 0 gathers and writes (cli/README.md "Running
// on many machines").
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace qmx::cli {

struct Ranks {
  int rank = 0, size = 1;
  bool mpi = false;  // MPI was initialized (this build has MPI and a launcher started the process)
};

// MPI_Init when this build has MPI and the environment names a launcher (Open MPI's mpirun, a PMI or PMIx
// launcher such as srun); otherwise one process, and MPI is never touched. EndRanks finalizes.
void StartRanks(int* argc, char*** argv);
void EndRanks();
const Ranks& CurrentRanks();
// "MPI (Open MPI 4.1.4)" or "" in a build without MPI.
std::string MpiDescription();

// Every rank's text at rank 0, in rank order (the other ranks get an empty list); {text} in one process.
std::vector<std::string> GatherText(const std::string& text);
// Rank 0's value at every rank (the value itself in one process).
int BroadcastInt(int value);

// Runs work() on every rank and gathers its text at rank 0 (in rank order; empty elsewhere). A rank whose
// work throws sends its message instead; then every rank throws qmx::Error, rank 0's naming the first rank
// that failed ("rank 2 failed: ..."), so the job stops together and no rank waits on another.
std::vector<std::string> RunOnRanks(const std::function<std::string()>& work);

// --shard I/N: shard I (0-based, as Slurm's SLURM_ARRAY_TASK_ID with --array=0-(N-1)) of N.
struct Shard {
  uint64_t index = 0, count = 1;
  bool given = false;
};
// Throws qmx::Error naming the option for anything but two integers I/N with 0 <= I < N <= 2^20.
Shard ParseShard(const std::string& s);

// This process's part of a command split k mod N: a job-array shard (--shard I/N with --shard-dir), or its MPI
// rank (one process: part 0 of 1). Throws qmx::Error "COMMAND: --shard I/N and --shard-dir go together" and
// "COMMAND: --shard is for job arrays; under MPI the ranks split the UNITS".
struct WorkPart {
  Shard shard;
  uint64_t index = 0, count = 1;
};
WorkPart ResolveWorkPart(const std::string& command, const std::string& shard, const std::string& shard_dir,
                         const std::string& units);

// A job-array shard's record: KIND-shard-I-of-N.json in the shard directory, written atomically and followed
// by its SHA-256 in PATH.sha256 (a record without one was interrupted and is redone). ShardRecord gives the
// record's text when both files exist and agree, else nothing (absent, interrupted or damaged).
std::string ShardFileName(const std::string& kind, const Shard& s);
void WriteShardRecord(const std::string& path, const std::string& text);
std::optional<std::string> ShardRecord(const std::string& path);
// The same record parsed as JSON; nothing also when it is not JSON.
std::optional<nlohmann::ordered_json> ShardRecordJson(const std::string& path);

// A job-array task whose whole result is one JSON record: head's fields, "part" (part()) and, where extra is
// given, "extra" (extra()). Writes KIND-shard-I-of-N.json into dir (created) unless a finished record of the
// same head is there already; prints which, naming the task ("shard 1/4: ... wrote" or "... skipped").
void RunRecordShard(const std::string& kind, const Shard& shard, const std::string& dir, const nlohmann::ordered_json& head,
                    const std::function<nlohmann::ordered_json()>& part,
                    const std::function<nlohmann::ordered_json()>& extra = {});

// A whole file as text (qmx::Error "cannot read PATH"): shard records and their checksums.
std::string ReadText(const std::string& path);

// Rank/shard prefix for messages and progress lines: "rank 2/4: " (MPI), "shard 3/8: ", or "".
std::string WorkerPrefix(const Shard& shard);

}  // namespace qmx::cli
