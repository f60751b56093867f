// file_jobs.cc: multi-file checkpoint jobs split by file (file_jobs.h).
#include "common/file_jobs.h"

#include <cstdio>
#include <filesystem>
#include <optional>

#include "common/outputs.h"
#include "common/ranks.h"
#include "qmx/error.h"
#include "qmx/io.h"
#include "qmx/sha256.h"
#include "qmx/version.h"

namespace qmx::cli {
namespace {

using nlohmann::ordered_json;

const char* const kIndexName = "model.safetensors.index.json";

// Whether `path` holds a file whose SHA-256 is `sha256` (false when it cannot be read).
bool FileMatches(const std::string& path, const std::string& sha256) {
  try {
    return Sha256Hex(ReadText(path)) == sha256;
  } catch (const Error&) {
    return false;
  }
}

// The index and the summary from every written file's part (in file order): rank 0's, or qmx-sim merge's, last
// step.
void Finish(const ordered_json& head, const std::vector<ordered_json>& parts, const std::string& json, bool quiet) {
  std::map<std::string, std::string> weight_map;
  uint64_t total = 0;
  ordered_json tensors = ordered_json::array(), written = ordered_json::array();
  for (const ordered_json& p : parts) {
    if (!quiet) std::fputs(p.at("lines").get<std::string>().c_str(), stdout);
    const std::string file = p.at("file").get<std::string>();
    for (const auto& n : p.at("names")) weight_map[n.get<std::string>()] = file;
    total += p.at("data_bytes").get<uint64_t>();
    for (const auto& t : p.at("tensors")) tensors.push_back(t);
    written.push_back(file);
  }
  const std::string out = head.at("out").get<std::string>();
  ordered_json index;
  index["metadata"] = {{"total_size", total}, {"qmx.generator", head.at("generator")}};
  index["weight_map"] = weight_map;
  WriteFileAtomic(out + kIndexName, index.dump(2) + "\n");
  if (!json.empty()) {
    ordered_json summary = head.at("summary");
    summary["files"] = written;
    summary["tensors"] = tensors;
    WriteFileAtomic(json, summary.dump(2) + "\n");
  }
  if (!quiet)
    std::printf("wrote %zu files and %s into %s%s\n", parts.size(), kIndexName, out.c_str(),
                json.empty() ? "" : (", and " + json).c_str());
}

}  // namespace

FileJob MakeFileJob(const std::string& kind, const std::string& in, const std::vector<std::string>& files,
                    const std::string& out, const std::string& json, const std::string& shard,
                    const std::string& shard_dir, bool quiet) {
  FileJob job;
  job.kind = kind;
  job.out = out;
  job.json = json;
  job.shard = shard;
  job.shard_dir = shard_dir;
  job.inputs = files;  // no output may be one of them (--out the checkpoint's own directory)
  job.inputs.push_back(in);
  job.quiet = quiet;
  job.files = files;
  job.used.assign(files.size(), false);
  job.head["out"] = out;
  job.head["files_total"] = files.size();
  job.head["generator"] = "qmx-sim " QMX_VERSION;
  return job;
}

void RunFileJob(const FileJob& job) {
  const std::string& kind = job.kind;
  if (job.out.empty() || job.out.back() != '/')
    throw Error("a multi-file checkpoint is written into a directory: --out DIR/ (ending in /) receives one .safetensors "
                "per input file and " + std::string(kIndexName));
  const WorkPart wp = ResolveWorkPart(kind, job.shard, job.shard_dir, "files");
  const Shard& shard = wp.shard;
  if (shard.given && !job.json.empty())
    throw Error(kind + ": a shard writes its part into --shard-dir; qmx-sim merge writes --json");
  const uint64_t parts = wp.count, me = wp.index;
  std::vector<std::string> outs(job.files.size());
  std::vector<OutputPath> all{{"--json", job.json}, {"--out", job.out + kIndexName}};
  std::map<std::string, size_t> seen;
  for (size_t f = 0; f < job.files.size(); ++f) {
    const std::string base = std::filesystem::path(job.files[f]).filename().string();
    if (const auto it = seen.find(base); it != seen.end())
      throw Error("input files " + job.files[it->second] + " and " + job.files[f] + " have one name; their outputs would too");
    seen[base] = f;
    outs[f] = job.out + base;
    if (job.used[f]) all.push_back({"--out", outs[f]});
  }
  CheckFileNameLengths(outs);
  CheckOutputs(all, job.inputs);
  CreateOutputDir(job.out);
  const auto work = [&] {
    ordered_json mine = ordered_json::array();
    for (size_t f = me; f < job.files.size(); f += parts) {
      if (!job.used[f]) continue;
      try {
        FilePart p = job.run(f);
        if (p.entries.empty()) continue;  // a file of no tensor this job reads
        ordered_json names = ordered_json::array();
        for (const SafetensorsEntry& e : p.entries) names.push_back(e.name);
        const std::vector<uint8_t> bytes = SerializeSafetensorsTyped(p.entries, p.meta);
        uint64_t header = 0;  // the file's first 8 bytes: its header's length, little-endian
        for (int b = 7; b >= 0; --b) header = header << 8 | bytes.at(static_cast<size_t>(b));
        WriteBytesAtomic(outs[f], bytes.data(), bytes.size());
        ordered_json part;
        part["index"] = f;
        part["file"] = std::filesystem::path(outs[f]).filename().string();
        part["sha256"] = Sha256Hex(bytes.data(), bytes.size());
        part["data_bytes"] = bytes.size() - 8 - header;
        part["names"] = names;
        part["tensors"] = p.tensors;
        part["lines"] = p.lines;
        mine.push_back(part);
        if (!job.quiet && parts > 1)
          std::printf("%swrote %s (%zu tensors)\n", WorkerPrefix(shard).c_str(), outs[f].c_str(), p.tensors.size());
      } catch (const Error& e) {
        throw Error(job.files[f] + ": " + e.what());
      }
    }
    return mine.dump() + "\n";
  };
  if (shard.given) {
    std::filesystem::create_directories(job.shard_dir);
    const std::string record = (std::filesystem::path(job.shard_dir) / ShardFileName(kind, shard)).string();
    // A finished shard of this job (its record's checksum and head match, and each file it wrote is still there
    // with its checksum) is not redone.
    if (const std::optional<ordered_json> old = ShardRecordJson(record)) {
      try {
        bool intact = old->at("head") == job.head;
        for (const auto& p : old->at("part"))
          intact = intact && FileMatches(job.out + p.at("file").get<std::string>(), p.at("sha256").get<std::string>());
        if (intact) {
          std::printf("%s%s is done (its checksum, job and files match): skipped\n", WorkerPrefix(shard).c_str(),
                      record.c_str());
          return;
        }
      } catch (const nlohmann::json::exception&) {  // not this job's record: run the shard
      }
    }
    ordered_json rec;
    rec["head"] = job.head;
    rec["part"] = ordered_json::parse(work());
    WriteShardRecord(record, rec.dump() + "\n");
    std::printf("%swrote %s\n", WorkerPrefix(shard).c_str(), record.c_str());
    return;
  }
  const std::vector<std::string> texts = RunOnRanks(work);
  if (CurrentRanks().rank != 0) return;
  std::vector<ordered_json> by_file(job.files.size()), done;
  for (const std::string& t : texts)
    for (auto& p : ordered_json::parse(t)) by_file.at(p.at("index").get<size_t>()) = p;
  for (auto& p : by_file)
    if (!p.is_null()) done.push_back(std::move(p));
  if (done.empty()) throw Error(kind + ": the checkpoint holds no tensor this command reads");
  Finish(job.head, done, job.json, job.quiet);
}

void MergeFileJob(const std::string& kind, const std::vector<std::string>& texts, const std::string& dir,
                  const std::string& json, bool quiet) {
  ordered_json head;
  std::map<size_t, ordered_json> by_file;
  for (size_t i = 0; i < texts.size(); ++i) {
    try {
      const ordered_json rec = ordered_json::parse(texts[i]);
      if (i == 0) head = rec.at("head");
      else if (rec.at("head") != head)
        throw Error("merge: " + kind + " shard " + std::to_string(i) + " in " + dir + " belongs to another job");
      for (const auto& p : rec.at("part")) {
        const size_t f = p.at("index").get<size_t>();
        if (f % texts.size() != i || by_file.count(f))
          throw Error("merge: " + kind + " shard " + std::to_string(i) + " holds file " + std::to_string(f) +
                      ", not one of its own");
        const std::string path = head.at("out").get<std::string>() + p.at("file").get<std::string>();
        if (!FileMatches(path, p.at("sha256").get<std::string>()))
          throw Error("merge: " + path + " is missing or not the file shard " + std::to_string(i) +
                      " wrote (its SHA-256 differs): run that shard again");
        by_file[f] = p;
      }
    } catch (const nlohmann::json::exception& e) {
      throw Error("merge: " + kind + " shard " + std::to_string(i) + " in " + dir + " is not a shard record: " + e.what());
    }
  }
  if (by_file.empty()) throw Error("merge: the " + kind + " shards in " + dir + " wrote no file");
  std::vector<ordered_json> parts;
  for (auto& [f, p] : by_file) parts.push_back(std::move(p));
  Finish(head, parts, json, quiet);
  if (!quiet) std::printf("merged %zu %s shards\n", texts.size(), kind.c_str());
}

}  // namespace qmx::cli
