// ranks.cc: MPI when built with it (QMX_HAVE_MPI) and launched by mpirun / srun; one process otherwise.
#include "common/ranks.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "qmx/error.h"
#include "qmx/io.h"
#include "qmx/sha256.h"

#if defined(QMX_HAVE_MPI)
// The C interface only: the deprecated C++ bindings add nothing here but compile time and warnings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace qmx::cli {
namespace {

Ranks g_ranks;

#if defined(QMX_HAVE_MPI)
// Whether a launcher started this process as part of an MPI job: Open MPI's mpirun, or a PMI / PMIx
// launcher (srun --mpi=pmi2|pmix, MPICH's hydra).
bool Launched() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}
#endif

}  // namespace

void StartRanks(int* argc, char*** argv) {
#if defined(QMX_HAVE_MPI)
  if (!Launched()) return;
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return;
  g_ranks.mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_ranks.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_ranks.size);
#else
  (void)argc, (void)argv;
#endif
}

void EndRanks() {
#if defined(QMX_HAVE_MPI)
  if (g_ranks.mpi) MPI_Finalize();
  g_ranks.mpi = false;
#endif
}

const Ranks& CurrentRanks() { return g_ranks; }

std::string MpiDescription() {
#if defined(QMX_HAVE_MPI)
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string s(version, static_cast<size_t>(len));
  const size_t comma = s.find(',');
  return "MPI (" + s.substr(0, comma) + ")";
#else
  return "";
#endif
}

std::vector<std::string> GatherText(const std::string& text) {
  if (g_ranks.size == 1) return {text};
#if defined(QMX_HAVE_MPI)
  const int len = static_cast<int>(text.size());
  std::vector<int> lens(static_cast<size_t>(g_ranks.size)), offsets(static_cast<size_t>(g_ranks.size));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (g_ranks.rank == 0) {
    size_t total = 0;
    for (int r = 0; r < g_ranks.size; ++r) {
      offsets[static_cast<size_t>(r)] = static_cast<int>(total);
      total += static_cast<size_t>(lens[static_cast<size_t>(r)]);
    }
    all.resize(total);
  }
  MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  if (g_ranks.rank == 0)
    for (int r = 0; r < g_ranks.size; ++r)
      out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]), static_cast<size_t>(lens[static_cast<size_t>(r)])));
  return out;
#else
  return {text};
#endif
}

int BroadcastInt(int value) {
#if defined(QMX_HAVE_MPI)
  if (g_ranks.size > 1) MPI_Bcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD);
#endif
  return value;
}

std::vector<std::string> RunOnRanks(const std::function<std::string()>& work) {
  std::string text, error;
  try {
    text = work();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "unknown error";
  }
  const std::vector<std::string> all = GatherText(error.empty() ? "ok\n" + text : "error\n" + error);
  std::string failed;
  if (g_ranks.rank == 0)
    for (size_t r = 0; r < all.size() && failed.empty(); ++r)
      if (all[r].compare(0, 3, "ok\n") != 0)
        failed = (g_ranks.size > 1 ? "rank " + std::to_string(r) + " failed: " : std::string()) + all[r].substr(6);
  if (BroadcastInt(failed.empty() ? 0 : 1) != 0) {
    if (g_ranks.rank == 0) throw Error(failed);
    throw Error("rank " + std::to_string(g_ranks.rank) + ": the job failed (rank 0 names the rank and the reason)");
  }
  std::vector<std::string> out;
  for (const std::string& s : all) out.push_back(s.substr(3));
  return out;
}

Shard ParseShard(const std::string& s) {
  const auto fail = [&]() -> Shard {
    throw Error("--shard '" + s + "': expected I/N, shard I (0 .. N-1) of N shards, N at most 1048576");
  };
  const size_t slash = s.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == s.size()) return fail();
  const std::string a = s.substr(0, slash), b = s.substr(slash + 1);
  if (a.size() > 7 || b.size() > 7 || a.find_first_not_of("0123456789") != std::string::npos ||
      b.find_first_not_of("0123456789") != std::string::npos)
    return fail();
  Shard sh;
  sh.index = std::stoull(a);
  sh.count = std::stoull(b);
  sh.given = true;
  if (sh.count == 0 || sh.count > (1u << 20) || sh.index >= sh.count) return fail();
  return sh;
}

WorkPart ResolveWorkPart(const std::string& command, const std::string& shard, const std::string& shard_dir,
                         const std::string& units) {
  WorkPart p;
  p.shard = shard.empty() ? Shard{} : ParseShard(shard);
  const Ranks& ranks = CurrentRanks();
  if (p.shard.given != !shard_dir.empty()) throw Error(command + ": --shard I/N and --shard-dir go together");
  if (p.shard.given && ranks.size > 1)
    throw Error(command + ": --shard is for job arrays; under MPI the ranks split the " + units);
  p.index = p.shard.given ? p.shard.index : static_cast<uint64_t>(ranks.rank);
  p.count = p.shard.given ? p.shard.count : static_cast<uint64_t>(ranks.size);
  return p;
}

void RunRecordShard(const std::string& kind, const Shard& shard, const std::string& dir, const nlohmann::ordered_json& head,
                    const std::function<nlohmann::ordered_json()>& part,
                    const std::function<nlohmann::ordered_json()>& extra) {
  std::filesystem::create_directories(dir);
  const std::string file = (std::filesystem::path(dir) / ShardFileName(kind, shard)).string();
  // A finished shard of this job (its checksum and head match) is not redone.
  if (std::optional<nlohmann::ordered_json> old = ShardRecordJson(file); old && old->is_object()) {
    old->erase("part");
    old->erase("extra");
    if (*old == head) {
      std::printf("%s%s is done (its checksum and job match): skipped\n", WorkerPrefix(shard).c_str(), file.c_str());
      return;
    }
  }
  nlohmann::ordered_json rec = head;
  rec["part"] = part();
  if (extra) rec["extra"] = extra();
  WriteShardRecord(file, rec.dump() + "\n");
  std::printf("%swrote %s\n", WorkerPrefix(shard).c_str(), file.c_str());
}

std::string ShardFileName(const std::string& kind, const Shard& s) {
  return kind + "-shard-" + std::to_string(s.index) + "-of-" + std::to_string(s.count) + ".json";
}

void WriteShardRecord(const std::string& path, const std::string& text) {
  WriteFileAtomic(path, text);
  WriteFileAtomic(path + ".sha256", Sha256Hex(text) + "\n");
}

std::optional<std::string> ShardRecord(const std::string& path) {
  try {
    std::string text = ReadText(path);
    if (Sha256Hex(text) + "\n" != ReadText(path + ".sha256")) return std::nullopt;
    return text;
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::optional<nlohmann::ordered_json> ShardRecordJson(const std::string& path) {
  const std::optional<std::string> text = ShardRecord(path);
  if (!text) return std::nullopt;
  try {
    return nlohmann::ordered_json::parse(*text);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot read " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string WorkerPrefix(const Shard& shard) {
  if (g_ranks.size > 1) return "rank " + std::to_string(g_ranks.rank) + "/" + std::to_string(g_ranks.size) + ": ";
  if (shard.given) return "shard " + std::to_string(shard.index) + "/" + std::to_string(shard.count) + ": ";
  return "";
}

}  // namespace qmx::cli
