// cmd_prove.cc: `qmx-sim prove` (exhaustive conversion proofs, qmx/prove.h) on one process, on the ranks of
// an MPI job, or as one shard of a job array; and `qmx-sim merge DIR`, which joins a job array's shards into
// the bytes the one-process run writes (cli/README.md "Running on many machines").
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/audit_report.h"
#include "commands.h"
#include "common/outputs.h"
#include "common/ranks.h"
#include "qmx/error.h"
#include "qmx/golden.h"
#include "qmx/io.h"
#include "qmx/prove.h"
#include "qmx/sha256.h"
#include "study/study_cli.h"

namespace qmx::cli {
namespace {

struct ProveArgs {
  std::vector<std::string> formats, roundings{"rne"}, saturations{"satfinite"};
  std::string range, out, shard, shard_dir;
  uint64_t seed = 0x5EED5EEDull;
  bool quiet = false;
};

uint64_t ParseCount(const std::string& s, const std::string& what) {
  try {
    size_t used = 0;
    const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    if (s.empty() || s[0] == '-' || s[0] == '+') throw std::invalid_argument(s);
    const uint64_t v = std::stoull(hex ? s.substr(2) : s, &used, hex ? 16 : 10);
    if (used != (hex ? s.size() - 2 : s.size())) throw std::invalid_argument(s);
    return v;
  } catch (const std::logic_error&) {
    throw Error("--range: '" + s + "' is not a " + what + " (decimal or 0x hex)");
  }
}

ProveJob JobOf(const ProveArgs& a) {
  ProveJob job;
  job.formats = a.formats;
  job.seed = a.seed;
  const auto all = [](const std::vector<std::string>& v) { return v.size() == 1 && v[0] == "all"; };
  if (all(a.roundings)) {
    job.roundings = {Rounding::kRne, Rounding::kRna, Rounding::kRz, Rounding::kRu, Rounding::kRd,
                     Rounding::kRo, Rounding::kSrA, Rounding::kSrB, Rounding::kSrC};
  } else {
    for (const std::string& r : a.roundings) job.roundings.push_back(ParseRounding(r));
  }
  if (all(a.saturations)) {
    job.saturations = {Saturation::kSatFinite, Saturation::kNoSat, Saturation::kSatPropagate};
  } else {
    for (const std::string& s : a.saturations) job.saturations.push_back(ParseSaturation(s));
  }
  if (!a.range.empty()) {
    const size_t colon = a.range.find(':');
    if (colon == std::string::npos) throw Error("--range '" + a.range + "': expected FIRST:COUNT");
    job.first = ParseCount(a.range.substr(0, colon), "first input");
    job.count = ParseCount(a.range.substr(colon + 1), "count");
  }
  ValidateProveJob(job);
  return job;
}

// The shard's file and its checksum beside it; a file that exists, matches its checksum and holds this part
// of this job is done.
bool ShardDone(const std::filesystem::path& file, const ProveJob& job, uint64_t first, uint64_t count) {
  const std::optional<std::string> text = ShardRecord(file.string());
  if (!text) return false;
  try {
    const ProveResult r = ProveFromJson(*text);
    return r.job.formats == job.formats && r.job.roundings == job.roundings && r.job.saturations == job.saturations &&
           r.job.first == job.first && r.job.count == job.count && r.job.seed == job.seed && r.first == first &&
           r.count == count;
  } catch (const Error&) {
    return false;
  }
}

void PrintSummary(const ProveResult& r) {
  std::printf("%-10s %-6s %-13s %12s %10s %10s\n", "format", "round", "saturation", "inputs", "simd", "oracle");
  for (const ProveMode& m : r.modes)
    std::printf("%-10s %-6s %-13s %12llu %10llu %10s\n", m.format.c_str(), RoundingName(m.rounding),
                SaturationName(m.saturation), static_cast<unsigned long long>(m.inputs),
                static_cast<unsigned long long>(m.fast_mismatches),
                m.oracle ? std::to_string(m.oracle_mismatches).c_str() : "-");
  std::printf("%llu modes, inputs 0x%08llx + %llu: %llu mismatches\n", static_cast<unsigned long long>(r.modes.size()),
              static_cast<unsigned long long>(r.first), static_cast<unsigned long long>(r.count),
              static_cast<unsigned long long>(r.Mismatches()));
}

// The result written (atomically) and summarized; a proof with mismatches fails the command.
void FinishProof(const ProveResult& r, const std::string& out, bool quiet) {
  if (!out.empty()) WriteFileAtomic(out, ProveToJson(r));
  if (!quiet) PrintSummary(r);
  if (r.Mismatches() != 0)
    throw Error("prove: " + std::to_string(r.Mismatches()) + " mismatches (the first of each mode are in " +
                (out.empty() ? std::string("--out's file") : out) + ")");
}

void RunProve(const ProveArgs& a) {
  const ProveJob job = JobOf(a);
  const Shard shard = a.shard.empty() ? Shard{} : ParseShard(a.shard);
  const Ranks& ranks = CurrentRanks();
  if (shard.given && ranks.size > 1) throw Error("prove: --shard is for job arrays; under MPI the ranks split the work");
  if (shard.given && a.shard_dir.empty()) throw Error("prove: --shard needs --shard-dir, where the shard's result goes");
  if (!shard.given && !a.shard_dir.empty()) throw Error("prove: --shard-dir goes with --shard I/N");
  CheckOutputs({{"--out", a.out}}, {});
  const uint64_t parts = shard.given ? shard.count : static_cast<uint64_t>(ranks.size);
  const uint64_t me = shard.given ? shard.index : static_cast<uint64_t>(ranks.rank);
  uint64_t first = 0, count = 0;
  ProvePart(job.first, job.count, me, parts, first, count);
  const std::string prefix = WorkerPrefix(shard);
  const bool tty = isatty(fileno(stderr)) && !a.quiet;
  const auto progress = [&](uint64_t done, uint64_t total) {
    if (tty) std::fprintf(stderr, "\r%sprove: %3.0f %%", prefix.c_str(), 100.0 * static_cast<double>(done) / static_cast<double>(total));
  };

  if (shard.given) {
    std::filesystem::create_directories(a.shard_dir);
    const std::filesystem::path file = std::filesystem::path(a.shard_dir) / ShardFileName("prove", shard);
    if (ShardDone(file, job, first, count)) {
      std::printf("%s%s is done (its checksum and job match): skipped\n", prefix.c_str(), file.string().c_str());
      return;
    }
    const ProveResult r = Prove(job, first, count, progress);
    if (tty) std::fprintf(stderr, "\n");
    const std::string text = ProveToJson(r);
    WriteShardRecord(file.string(), text);
    std::printf("%swrote %s: inputs 0x%08llx + %llu, %llu mismatches\n", prefix.c_str(), file.string().c_str(),
                static_cast<unsigned long long>(first), static_cast<unsigned long long>(count),
                static_cast<unsigned long long>(r.Mismatches()));
    return;
  }

  // One process, or the ranks of an MPI job: each its part, rank 0 merges in rank (= range) order.
  const std::vector<std::string> all = RunOnRanks([&] { return ProveToJson(Prove(job, first, count, progress)); });
  if (tty) std::fprintf(stderr, "\n");
  if (ranks.rank != 0) return;
  std::vector<ProveResult> results;
  for (const std::string& s : all) results.push_back(ProveFromJson(s));
  FinishProof(MergeProofs(results, true), a.out, a.quiet);
}

// The shards KIND-shard-I-of-N.json of one N in dir, each checked against its .sha256, as texts in shard order.
std::vector<std::string> ReadShards(const std::string& dir, const std::string& kind, uint64_t& n) {
  std::map<uint64_t, std::map<uint64_t, std::filesystem::path>> by_n;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    unsigned long long i = 0, count = 0;
    const std::string pattern = kind + "-shard-%llu-of-%llu.json";
    if (std::sscanf(name.c_str(), pattern.c_str(), &i, &count) == 2 &&
        name == ShardFileName(kind, {i, count, true}))
      by_n[count][i] = e.path();
  }
  if (by_n.size() > 1) throw Error("merge: " + dir + " holds " + kind + " shards of different counts N; keep one job's shards per directory");
  n = by_n.empty() ? 0 : by_n.begin()->first;
  if (n == 0) return {};
  const auto& files = by_n.begin()->second;
  std::string missing;
  for (uint64_t i = 0; i < n; ++i)
    if (!files.count(i)) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
  if (!missing.empty()) throw Error("merge: " + kind + " shards " + missing + " of " + std::to_string(n) + " are missing in " + dir);
  std::vector<std::string> texts;
  for (const auto& [i, path] : files) {
    const std::string text = ReadText(path.string());
    std::string sum;
    try {
      sum = ReadText(path.string() + ".sha256");
    } catch (const Error&) {
      throw Error("merge: " + path.string() + " has no checksum file beside it (an interrupted shard: run it again)");
    }
    if (Sha256Hex(text) + "\n" != sum)
      throw Error("merge: " + path.string() + " does not match its checksum (damaged: run shard " + std::to_string(i) + " again)");
    texts.push_back(text);
  }
  return texts;
}

void MergeGolden(const std::vector<std::string>& texts, const std::string& dir, const std::string& out, bool quiet) {
  if (out.empty()) throw Error("merge: golden shards need --out, the golden directory the shards wrote their files into");
  golden::GenOptions first;
  std::vector<golden::ManifestEntry> all;
  for (size_t i = 0; i < texts.size(); ++i) {
    golden::GenOptions o;
    std::vector<golden::ManifestEntry> entries = golden::PartFromJson(texts[i], o);
    if (i == 0) first = o;
    if (o.suites != first.suites || o.level != first.level || o.seed != first.seed || o.exhaustive != first.exhaustive ||
        o.part != i || o.parts != texts.size())
      throw Error("merge: golden shard " + std::to_string(i) + " in " + dir + " belongs to another generation");
    for (golden::ManifestEntry& e : entries) {
      std::string text;
      try {
        text = ReadText((std::filesystem::path(out) / e.path).string());
      } catch (const Error&) {
        throw Error("merge: " + e.path + " (shard " + std::to_string(i) + ") is not in " + out);
      }
      if (Sha256Hex(text) != e.sha256)
        throw Error("merge: " + (std::filesystem::path(out) / e.path).string() + " is not the file shard " +
                    std::to_string(i) + " wrote (its SHA-256 differs)");
      all.push_back(std::move(e));
    }
  }
  const size_t files = all.size();
  golden::WriteManifest(first, std::move(all), out);
  if (!quiet)
    std::printf("merged %zu golden shards: %zu files, %s/manifest.json\n", texts.size(), files, out.c_str());
}

// The records of a job array split k mod N (audit, audit --convert, study): every record's head (each key
// but "part" and "extra", its count `total_key` among them) equals shard 0's, and each entry of its "part"
// has an "index" k of its own (k mod N = i) that no other shard holds. Gives the head, the entries by index
// (none where no shard had one: --convert's other tensors) and shard 0's "extra". `what` names the job,
// `unit` its items and `other` what a record of another job is, in the messages.
struct IndexedShards {
  nlohmann::ordered_json head, extra;
  std::vector<std::optional<nlohmann::ordered_json>> entries;
};
IndexedShards ReadIndexedShards(const std::vector<std::string>& texts, const std::string& dir, const std::string& what,
                                const char* total_key, const char* unit, const char* other) {
  IndexedShards r;
  for (size_t i = 0; i < texts.size(); ++i) {
    try {
      nlohmann::ordered_json rec = nlohmann::ordered_json::parse(texts[i]);
      const nlohmann::ordered_json part = rec.at("part");
      if (i == 0 && rec.contains("extra")) r.extra = rec.at("extra");
      rec.erase("part");
      rec.erase("extra");
      if (i == 0) {
        r.head = rec;
        r.entries.resize(rec.at(total_key).get<size_t>());
      } else if (rec != r.head) {
        throw Error("merge: " + what + " shard " + std::to_string(i) + " in " + dir + " " + other);
      }
      for (const auto& e : part) {
        const size_t k = e.at("index").get<size_t>();
        if (k >= r.entries.size() || r.entries[k] || k % texts.size() != i)
          throw Error("merge: " + what + " shard " + std::to_string(i) + " holds " + unit + " " + std::to_string(k) +
                      ", not one of its own");
        r.entries[k] = e;
      }
    } catch (const nlohmann::json::exception& e) {
      throw Error("merge: " + what + " shard " + std::to_string(i) + " in " + dir + " is not a shard record: " + e.what());
    }
  }
  return r;
}

// audit shards (and audit --convert's): the report's head, the tensor count and the part's tensors (index,
// table line, JSON); a --convert shard holds only its FROM tensors.
void MergeAudit(const std::vector<std::string>& texts, const std::string& dir, const std::string& out, bool quiet,
                bool convert) {
  const std::string what = convert ? "audit --convert" : "audit";
  if (out.empty()) throw Error("merge: " + what + " shards need --out, the report's JSON file (audit --json)");
  IndexedShards r = ReadIndexedShards(texts, dir, what, "tensors_total", "tensor", "audits another checkpoint");
  r.head.erase("tensors_total");  // the report's head is the records' without the count
  std::vector<nlohmann::ordered_json> tensors;
  for (size_t k = 0; k < r.entries.size(); ++k) {
    if (r.entries[k]) tensors.push_back(std::move(*r.entries[k]));
    else if (!convert) throw Error("merge: tensor " + std::to_string(k) + " is in no audit shard of " + dir);
  }
  const nlohmann::ordered_json report = convert ? ConvertReport(r.head, tensors, quiet) : AuditReport(r.head, tensors, quiet);
  WriteFileAtomic(out, report.dump(2) + "\n");
  if (!quiet)
    std::printf("merged %zu %s shards (%zu tensors) into %s\n", texts.size(), what.c_str(), tensors.size(), out.c_str());
}

// study shards: the study's head, the input count, the part's entries (index, entry), and shard 0's extra
// (kurtosis's outlier sweep); the study's own code prints and writes the result.
void MergeStudy(const std::vector<std::string>& texts, const std::string& dir, const std::string& out, bool quiet) {
  if (!out.empty()) throw Error("merge: study shards write the --csv and --json their command names; there is no --out");
  IndexedShards r = ReadIndexedShards(texts, dir, "study", "inputs_total", "input", "is of another study or command");
  std::vector<nlohmann::ordered_json> entries;
  for (size_t k = 0; k < r.entries.size(); ++k) {
    if (!r.entries[k]) throw Error("merge: input " + std::to_string(k) + " is in no study shard of " + dir);
    entries.push_back(r.entries[k]->at("entry"));
  }
  try {
    study::FinishStudy(r.head, entries, r.extra);
  } catch (const nlohmann::json::exception& e) {
    throw Error("merge: the study shards in " + dir + " are not study records: " + e.what());
  }
  if (!quiet) std::printf("merged %zu study shards (%zu inputs)\n", texts.size(), entries.size());
}

void RunMerge(const std::string& dir, const std::string& out, bool quiet) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) throw Error("merge: " + dir + " is not a directory");
  uint64_t n_prove = 0, n_golden = 0, n_audit = 0, n_convert = 0, n_quantize = 0, n_dequantize = 0, n_verify = 0,
           n_study = 0;
  const std::vector<std::string> prove = ReadShards(dir, "prove", n_prove);
  const std::vector<std::string> gold = ReadShards(dir, "golden", n_golden);
  const std::vector<std::string> audit = ReadShards(dir, "audit", n_audit);
  const std::vector<std::string> convert = ReadShards(dir, "audit-convert", n_convert);
  const std::vector<std::string> studies = ReadShards(dir, "study", n_study);
  const std::vector<std::string> quantize = ReadShards(dir, "quantize", n_quantize);
  const std::vector<std::string> dequantize = ReadShards(dir, "dequantize", n_dequantize);
  const std::vector<std::string> verify = ReadShards(dir, "verify", n_verify);
  if ((n_prove != 0) + (n_golden != 0) + (n_audit != 0) + (n_convert != 0) + (n_quantize != 0) + (n_dequantize != 0) +
          (n_verify != 0) + (n_study != 0) > 1)
    throw Error("merge: " + dir + " holds the shards of more than one command; keep one job per directory");
  if (n_golden) return MergeGolden(gold, dir, out, quiet);
  if (n_audit) return MergeAudit(audit, dir, out, quiet, false);
  if (n_convert) return MergeAudit(convert, dir, out, quiet, true);
  if (n_study) return MergeStudy(studies, dir, out, quiet);
  if (n_quantize) return MergeQuantize("quantize", quantize, dir, out, quiet);
  if (n_dequantize) return MergeQuantize("dequantize", dequantize, dir, out, quiet);
  if (n_verify) {
    if (!out.empty()) throw Error("merge: verify shards print their report; there is no --out");
    return MergeGoldenVerify(verify, dir, quiet);
  }
  if (!n_prove)
    throw Error("merge: no shard files (prove-, golden-, audit-, audit-convert-, quantize-, dequantize-, verify- or "
                "study-shard-I-of-N.json) in " + dir);
  std::vector<ProveResult> parts;
  for (size_t i = 0; i < prove.size(); ++i) {
    try {
      parts.push_back(ProveFromJson(prove[i]));
    } catch (const Error& e) {
      throw Error("merge: prove shard " + std::to_string(i) + ": " + e.what());
    }
  }
  const std::string target = out.empty() ? (std::filesystem::path(dir) / "prove.json").string() : out;
  FinishProof(MergeProofs(parts, true), target, quiet);
  if (!quiet) std::printf("merged %llu shards into %s\n", static_cast<unsigned long long>(n_prove), target.c_str());
}

}  // namespace

void AddProveCommand(CLI::App& app) {
  static ProveArgs args;
  ProveArgs* a = &args;
  CLI::App* cmd = app.add_subcommand(
      "prove", "Exhaustive proof of FP32 conversions: every input of a range through the SIMD path, the reference "
               "routine and the table oracle (MPI ranks or --shard split it; cli/README.md)");
  cmd->add_option("--to", a->formats, "Formats (8 bits or fewer)")->required();
  cmd->add_option("--round", a->roundings, "Roundings (rne rna rz ru rd ro sr-a sr-b sr-c) or all");
  cmd->add_option("--sat", a->saturations, "Saturations (satfinite nosat satpropagate) or all");
  cmd->add_option("--range", a->range, "FIRST:COUNT of the FP32 bit patterns (default 0:0x100000000, all)");
  cmd->add_option("--seed", a->seed, "Stochastic rounding: input u draws Philox(seed, u)");
  cmd->add_option("--out", a->out, "The result as JSON (rank 0 writes it under MPI)");
  cmd->add_option("--shard", a->shard, "I/N: compute shard I (0-based) of N only, into --shard-dir (job arrays)");
  cmd->add_option("--shard-dir", a->shard_dir, "Where --shard writes prove-shard-I-of-N.json (and its .sha256)");
  cmd->add_flag("--quiet", a->quiet, "No table and no progress");
  cmd->callback([a] { RunProve(*a); });

  static std::string merge_dir, merge_out;
  static bool merge_quiet = false;
  std::string* dir = &merge_dir;
  std::string* out = &merge_out;
  bool* quiet = &merge_quiet;
  CLI::App* merge = app.add_subcommand(
      "merge", "Join a job array's shards (prove, golden gen and verify, audit [--convert], quantize or dequantize, study "
               "error|misalignment|hadamard|kurtosis --shard) into the one-process result");
  merge->add_option("dir", *dir, "The --shard-dir of the shards")->required();
  merge->add_option("--out", *out, "prove: the merged result (default DIR/prove.json); golden: the golden directory, "
                                   "which receives manifest.json; audit: the report (audit --json); (de)quantize: the "
                                   "summary (--json; the checkpoint's index goes into the shards' --out)");
  merge->add_flag("--quiet", *quiet, "No table");
  merge->callback([dir, out, quiet] { RunMerge(*dir, *out, *quiet); });
}

}  // namespace qmx::cli
