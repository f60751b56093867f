// cmd_golden.cc: `qmx-sim golden gen|verify|list`: golden vectors for hardware verification
// (qmx/golden.h; the format is documented in golden/README.md).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "common/outputs.h"
#include "common/ranks.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/golden.h"
#include "qmx/io.h"
#include "qmx/sha256.h"
#include "qmx/testing.h"
#if defined(QMX_HAVE_CUDA)
#include "qmx/gpu.h"
#endif

namespace qmx::cli {

namespace {

struct GenArgs {
  std::vector<std::string> suites{"all"};
  int level = 1;
  uint64_t seed = 1;
  bool exhaustive = false;
  std::string out, hopper_dir;  // "": golden::ResolveHopperDir's search
  std::string shard, shard_dir;  // --shard I/N into --shard-dir (job arrays; qmx-sim merge)
  std::string layout = "text";
  uint64_t min_per_class = 0;
  std::vector<std::string> units;  // --unit: a design's own dot-product units (GenOptions::units)
  bool quiet = false;
};

struct VerifyArgs {
  std::string dir, backend = "cpu-simd", simd_target, only, shard, shard_dir;
  uint64_t max_errors = 20;
  int threads = 0;
  bool quiet = false;
};

// A shard's record that exists, matches its checksum and these options, and whose files are all in `out` with
// their SHA-256: done.
bool GoldenShardDone(const std::filesystem::path& record, const golden::GenOptions& o, const std::string& out) {
  const std::optional<std::string> text = ShardRecord(record.string());
  if (!text) return false;
  try {
    golden::GenOptions p;
    const std::vector<golden::ManifestEntry> entries = golden::PartFromJson(*text, p);
    if (p.suites != o.suites || p.level != o.level || p.seed != o.seed || p.exhaustive != o.exhaustive ||
        p.min_per_class != o.min_per_class || p.units != o.units || p.part != o.part || p.parts != o.parts)
      return false;
    for (const golden::ManifestEntry& e : entries)
      if (Sha256Hex(ReadText((std::filesystem::path(out) / e.path).string())) != e.sha256) return false;
    return true;
  } catch (const Error&) {
    return false;
  }
}

// After --min-per-class: the coverage classes of the written files still under n cases, by operation and
// class with their number of files (hardware-measured files are not topped up and not counted).
void ReportShortClasses(const std::string& dir, uint64_t n) {
  std::map<std::string, size_t> under;
  for (const golden::CoverageReport& r : golden::Coverage({dir})) {
    if (r.header.find(" observed=") != std::string::npos) continue;
    for (const golden::CoverageClass& c : r.classes)
      if (c.hits < n) ++under[r.op + " " + c.name];
  }
  if (under.empty()) {
    std::printf("every coverage class holds at least %llu cases\n", static_cast<unsigned long long>(n));
    return;
  }
  std::printf("classes under %llu cases (fewer distinct inputs exist, or none the generator draws):",
              static_cast<unsigned long long>(n));
  for (const auto& [name, files] : under) std::printf(" %s (%zu file%s);", name.c_str(), files, files == 1 ? "" : "s");
  std::printf("\n");
}

void RunGen(const GenArgs& a) {
  golden::GenOptions o;
  o.suites = a.suites;
  o.level = a.level;
  o.seed = a.seed;
  o.exhaustive = a.exhaustive;
  o.min_per_class = a.min_per_class;
  o.units = a.units;
  if (a.layout != "text" && a.layout != "memh") throw Error("--layout is text or memh, not '" + a.layout + "'");
  o.memh = a.layout == "memh";
  // Before anything is written: a gemm suite without its measured data would be a partial set.
  const bool units_only = !o.units.empty() && o.suites == std::vector<std::string>{"all"};
  o.hopper_dir = golden::ResolveHopperDir(units_only ? std::vector<std::string>{"unit"} : a.suites, a.hopper_dir);
  const WorkPart wp = ResolveWorkPart("golden gen", a.shard, a.shard_dir, "files");
  const Shard& shard = wp.shard;
  const Ranks& ranks = CurrentRanks();
  o.part = wp.index;
  o.parts = wp.count;
  const std::string prefix = WorkerPrefix(shard);
  uint64_t files = 0, cases = 0;
  const auto progress = [&](const golden::ManifestEntry& e) {
    ++files;
    cases += e.cases;
    if (!a.quiet)
      std::printf("%s%-58s %-12s %8llu cases\n", prefix.c_str(), e.path.c_str(), e.op.c_str(),
                  static_cast<unsigned long long>(e.cases));
  };
  if (shard.given) {
    const std::filesystem::path record = std::filesystem::path(a.shard_dir) / ShardFileName("golden", shard);
    if (GoldenShardDone(record, o, a.out)) {
      std::printf("%s%s is done (its checksum, options and files match): skipped\n", prefix.c_str(), record.string().c_str());
      return;
    }
    const std::vector<golden::ManifestEntry> entries = golden::Generate(o, a.out, progress);
    std::filesystem::create_directories(a.shard_dir);
    const std::string text = golden::PartToJson(o, entries);
    WriteShardRecord(record.string(), text);
    std::printf("%swrote %llu files, %llu cases into %s and %s\n", prefix.c_str(), static_cast<unsigned long long>(files),
                static_cast<unsigned long long>(cases), a.out.c_str(), record.string().c_str());
    return;
  }
  // One process (Generate writes the manifest), or MPI ranks: each writes its files, rank 0 the manifest.
  const std::vector<std::string> parts = RunOnRanks([&] { return golden::PartToJson(o, golden::Generate(o, a.out, progress)); });
  if (ranks.rank != 0) return;
  if (ranks.size > 1) {
    std::vector<golden::ManifestEntry> all;
    cases = 0;
    for (const std::string& p : parts) {
      golden::GenOptions po;
      for (golden::ManifestEntry& e : golden::PartFromJson(p, po)) {
        cases += e.cases;
        all.push_back(std::move(e));
      }
    }
    files = all.size();
    golden::WriteManifest(o, all, a.out);
  }
  std::printf("wrote %llu files, %llu cases, and %s/manifest.json (level %d, seed %llu%s%s)\n",
              static_cast<unsigned long long>(files), static_cast<unsigned long long>(cases), a.out.c_str(), a.level,
              static_cast<unsigned long long>(a.seed), a.exhaustive ? ", exhaustive" : "",
              ranks.size > 1 ? (", " + std::to_string(ranks.size) + " ranks").c_str() : "");
  if (a.min_per_class > 0 && !a.quiet) ReportShortClasses(a.out, a.min_per_class);
}

nlohmann::ordered_json ResultToJson(const golden::FileResult& r) {
  nlohmann::ordered_json j = {{"index", r.index}, {"stray", r.stray}, {"path", r.path}, {"op", r.op},
                              {"cases", r.cases}, {"mismatches", r.mismatches}, {"flags_checked", r.flags_checked},
                              {"skipped", r.skipped}, {"errors", r.errors}};
  j["first"] = nlohmann::ordered_json::array();
  for (const auto& m : r.first) j["first"].push_back({{"line", m.line}, {"text", m.text}});
  return j;
}

golden::FileResult ResultFromJson(const nlohmann::json& j) {
  golden::FileResult r;
  r.index = j.at("index").get<uint64_t>();
  r.stray = j.at("stray").get<bool>();
  r.path = j.at("path").get<std::string>();
  r.op = j.at("op").get<std::string>();
  r.cases = j.at("cases").get<uint64_t>();
  r.mismatches = j.at("mismatches").get<uint64_t>();
  r.flags_checked = j.at("flags_checked").get<bool>();
  r.skipped = j.at("skipped").get<std::string>();
  r.errors = j.at("errors").get<std::vector<std::string>>();
  for (const auto& m : j.at("first")) r.first.push_back({m.at("line").get<uint64_t>(), m.at("text").get<std::string>()});
  return r;
}

// The report of a verification (one process, rank 0, or qmx-sim merge of shards): a line per file, the
// summary; throws when a file failed (exit 1).
void ReportVerify(const std::vector<golden::FileResult>& results, const nlohmann::ordered_json& head, bool quiet) {
  uint64_t cases = 0, mismatches = 0, bad_files = 0, skipped = 0;
  for (const auto& r : results) {
    cases += r.cases;
    if (!r.skipped.empty()) {
      ++skipped;
      if (!quiet) std::printf("skip %-58s %-12s %s\n", r.path.c_str(), r.op.c_str(), r.skipped.c_str());
      continue;
    }
    mismatches += r.mismatches;
    if (!r.ok()) ++bad_files;
    if (!quiet || !r.ok())
      std::printf("%-4s %-58s %-12s %8llu cases %6llu mismatches%s\n", r.ok() ? "ok" : "FAIL", r.path.c_str(), r.op.c_str(),
                  static_cast<unsigned long long>(r.cases), static_cast<unsigned long long>(r.mismatches),
                  r.flags_checked || r.cases == 0 ? "" : " (flags not checked)");
    for (const auto& e : r.errors) std::printf("     %s: %s\n", r.path.c_str(), e.c_str());
    for (const auto& m : r.first)
      std::printf("     %s:%llu: %s\n", r.path.c_str(), static_cast<unsigned long long>(m.line), m.text.c_str());
  }
  std::printf("%s: %zu files (%llu skipped), %llu cases, %llu mismatches, %llu files failing (backend %s%s)\n",
              head.at("dir").get<std::string>().c_str(), results.size(), static_cast<unsigned long long>(skipped),
              static_cast<unsigned long long>(cases), static_cast<unsigned long long>(mismatches),
              static_cast<unsigned long long>(bad_files), head.at("backend_name").get<std::string>().c_str(),
              head.at("target").get<std::string>().c_str());
  if (bad_files) throw Error(std::to_string(bad_files) + " golden file(s) failed verification");
}

void RunVerify(const VerifyArgs& a) {
  golden::VerifyOptions o;
  std::string backend_name;
  if (a.backend == "cuda") {
#if defined(QMX_HAVE_CUDA)
    gpu::Require("golden verify --backend cuda");
    o.external = gpu::GoldenRunner();
    backend_name = "cuda on " + gpu::Device().Describe();
#else
    throw Error("--backend cuda: this build has no CUDA backend (configure with the CUDA Toolkit; gpu/README.md)");
#endif
  } else {
    o.backend = golden::ParseBackend(a.backend);
  }
  o.max_errors = a.max_errors;
  o.only = a.only;
  if (a.threads < 0 || a.threads > 1024) throw Error("--threads must be 1..1024");
  if (a.threads > 0) omp_set_num_threads(a.threads);
  if (!a.simd_target.empty()) ForceSimdTarget(a.simd_target);
  const std::string target = o.external ? "" : (o.backend == golden::Backend::kCpuSimd ? " on " + SimdTargetName() : "");
  if (backend_name.empty()) backend_name = golden::BackendName(o.backend);
  const WorkPart wp = ResolveWorkPart("golden verify", a.shard, a.shard_dir, "files");
  const Shard& shard = wp.shard;
  o.parts = wp.count;
  o.part = wp.index;
  // What a shard's record must match to be reused: the options, and the manifest it replayed (its SHA-256).
  nlohmann::ordered_json head = {{"dir", a.dir}, {"backend", a.backend}, {"simd_target", a.simd_target},
                                 {"max_errors", a.max_errors}, {"only", a.only}, {"backend_name", backend_name},
                                 {"target", target}};
  const auto run = [&] {
    nlohmann::ordered_json part = nlohmann::ordered_json::array();
    for (const golden::FileResult& r : golden::Verify(a.dir, o)) part.push_back(ResultToJson(r));
    return part.dump() + "\n";
  };
  if (shard.given) {
    head["manifest_sha256"] = Sha256Hex(ReadText((std::filesystem::path(a.dir) / "manifest.json").string()));
    std::filesystem::create_directories(a.shard_dir);
    const std::string record = (std::filesystem::path(a.shard_dir) / ShardFileName("verify", shard)).string();
    if (const std::optional<nlohmann::ordered_json> old = ShardRecordJson(record);
        old && old->contains("head") && old->at("head") == head) {
      std::printf("%s%s is done (its checksum, options and manifest match): skipped\n", WorkerPrefix(shard).c_str(),
                  record.c_str());
      return;
    }
    nlohmann::ordered_json rec;
    rec["head"] = head;
    rec["part"] = nlohmann::ordered_json::parse(run());
    WriteShardRecord(record, rec.dump() + "\n");
    std::printf("%swrote %s\n", WorkerPrefix(shard).c_str(), record.c_str());
    return;
  }
  const std::vector<std::string> texts = RunOnRanks(run);
  if (CurrentRanks().rank != 0) return;
  std::vector<golden::FileResult> all;
  for (const std::string& t : texts)
    for (const auto& j : nlohmann::json::parse(t)) all.push_back(ResultFromJson(j));
  ReportVerify(golden::MergeVerifyParts(std::move(all), o.max_errors), head, a.quiet);
}

void ListSuites() {
  for (const auto& s : golden::Suites()) std::printf("%s\n  %s\n\n", s.name.c_str(), s.description.c_str());
  std::printf("Backends for verify: cpu-ref (scalar references, flags checked), cpu-simd (fast paths on the dispatched "
              "or --simd-target SIMD target; flags not computed). Format: golden/README.md.\n");
}

}  // namespace

void MergeGoldenVerify(const std::vector<std::string>& texts, const std::string& dir, bool quiet) {
  nlohmann::ordered_json head;
  std::vector<golden::FileResult> all;
  for (size_t i = 0; i < texts.size(); ++i) {
    try {
      const nlohmann::ordered_json rec = nlohmann::ordered_json::parse(texts[i]);
      if (i == 0) head = rec.at("head");
      else if (rec.at("head") != head)
        throw Error("merge: verify shard " + std::to_string(i) + " in " + dir + " replayed with other options or another manifest");
      for (const auto& j : rec.at("part")) {
        golden::FileResult r = ResultFromJson(j);
        if (!r.stray && r.index % texts.size() != i)
          throw Error("merge: verify shard " + std::to_string(i) + " holds file " + r.path + ", not one of its own");
        all.push_back(std::move(r));
      }
    } catch (const nlohmann::json::exception& e) {
      throw Error("merge: verify shard " + std::to_string(i) + " in " + dir + " is not a shard record: " + e.what());
    }
  }
  ReportVerify(golden::MergeVerifyParts(std::move(all), head.at("max_errors").get<uint64_t>()), head, quiet);
}

struct CoverageArgs {
  std::vector<std::string> paths;
  std::string log, like, json;
  bool require_all = false, misses_only = false;
};

// golden coverage: each file's classes hit and missed (qmx/golden.h Coverage), a summary, and --json.
void RunCoverage(const CoverageArgs& a) {
  if (!a.log.empty() && a.like.empty()) throw Error("--log needs --like FILE: the golden file whose header the log's cases follow");
  if (a.log.empty() && !a.like.empty()) throw Error("--like names the header of a --log; give --log FILE too");
  if (a.log.empty() && a.paths.empty()) throw Error("nothing to measure: give golden files or directories, or --log FILE --like FILE");
  if (!a.log.empty() && !a.paths.empty()) throw Error("give either golden files or --log, not both");
  if (!a.json.empty()) CheckOutputs({{"--json", a.json}}, a.log.empty() ? a.paths : std::vector<std::string>{a.log, a.like});
  std::vector<golden::CoverageReport> reps =
      a.log.empty() ? golden::Coverage(a.paths) : std::vector<golden::CoverageReport>{golden::CoverageOfLog(a.like, a.log)};
  uint64_t modelled = 0, classes = 0, missed = 0, cases = 0;
  nlohmann::json files = nlohmann::json::array();
  for (const auto& r : reps) {
    cases += r.cases;
    nlohmann::json jf = {{"file", r.file}, {"op", r.op}, {"header", r.header}, {"cases", r.cases}, {"modelled", r.modelled}};
    if (!r.modelled) {
      if (!a.misses_only) std::printf("%s: %llu cases, op=%s: no coverage model yet\n", r.file.c_str(),
                                      static_cast<unsigned long long>(r.cases), r.op.c_str());
      files.push_back(jf);
      continue;
    }
    ++modelled;
    std::string miss;
    uint64_t file_missed = 0;
    nlohmann::json jc = nlohmann::json::array();
    for (const auto& c : r.classes) {
      jc.push_back({{"class", c.name}, {"hits", c.hits}, {"description", c.description}});
      if (c.hits == 0) {
        miss += (miss.empty() ? "" : ", ") + c.name;
        ++file_missed;
      }
    }
    jf["classes"] = jc;
    files.push_back(jf);
    classes += r.classes.size();
    missed += file_missed;
    if (a.misses_only && file_missed == 0) continue;
    std::printf("%s: %llu cases, %llu of %zu classes hit%s%s\n", r.file.c_str(), static_cast<unsigned long long>(r.cases),
                static_cast<unsigned long long>(r.classes.size() - file_missed), r.classes.size(),
                miss.empty() ? "" : "; missed: ", miss.c_str());
  }
  std::printf("coverage: %zu files (%llu with a model), %llu cases, %llu classes, %llu missed\n", reps.size(),
              static_cast<unsigned long long>(modelled), static_cast<unsigned long long>(cases),
              static_cast<unsigned long long>(classes), static_cast<unsigned long long>(missed));
  if (!a.json.empty()) {
    const nlohmann::json doc = {{"files", files}, {"classes", classes}, {"missed", missed}, {"cases", cases}};
    WriteFileAtomic(a.json, doc.dump(1) + "\n");
  }
  if (a.require_all && missed > 0)
    throw Error("--require-all: " + std::to_string(missed) + " classes missed");
}

void AddGoldenCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("golden", "Golden vectors for hardware verification: generate, verify, list suites");
  cmd->require_subcommand(1);

  static GenArgs gen;
  auto* g = cmd->add_subcommand("gen", "Write golden files and a manifest (SHA-256 per file) into a directory");
  g->add_option("--suite", gen.suites, "suite name(s) or all (see golden list)")->delimiter(',');
  g->add_option("--level", gen.level, "1: small, checked into golden/level1; 2: full cross products")->check(CLI::Range(1, 2));
  g->add_option("--seed", gen.seed, "seed of the random cases");
  g->add_flag("--exhaustive", gen.exhaustive, "every input where the space allows (all FP16/BF16 inputs)");
  g->add_option("--out", gen.out, "output directory")->required();
  g->add_option("--hopper-dir", gen.hopper_dir, "hardware-observed Hopper GEMM outputs (default: golden/gemm-hopper here, in the source tree, or installed)");
  g->add_option("--layout", gen.layout, "text (default), or memh: also NAME.memh beside each NAME.txt ($readmemh words)");
  g->add_option("--shard", gen.shard, "I/N: write only shard I (0-based) of N's files, and its record into --shard-dir");
  g->add_option("--shard-dir", gen.shard_dir, "where --shard writes golden-shard-I-of-N.json (qmx-sim merge joins them)");
  g->add_option("--min-per-class", gen.min_per_class,
                 "add cases until each coverage class (golden coverage) of each file holds N, where N distinct "
                 "inputs exist; prints the classes left under N");
  g->add_option("--unit", gen.units,
                "a dot-product / MMA unit of your design: \"name=N a=FMT b=FMT k=K model=M [scale=S block=B]\" "
                "(M any accumulation model, fused:... included): writes unit/N.txt; repeatable; alone, only those files")
      ->take_all()
      ->allow_extra_args(false);
  g->add_flag("--quiet", gen.quiet, "print only the summary");
  g->callback([] { RunGen(gen); });

  static VerifyArgs ver;
  auto* v = cmd->add_subcommand("verify", "Replay a golden directory against a backend; exit 1 on any mismatch");
  v->add_option("dir", ver.dir, "directory holding manifest.json")->required();
  v->add_option("--backend", ver.backend, "cpu-ref, cpu-simd (default) or cuda (the GPU; builds with the CUDA backend)");
  v->add_option("--simd-target", ver.simd_target, "force one SIMD target (AVX3, AVX2, SSE4, ...; cpu-simd)");
  v->add_option("--max-errors", ver.max_errors, "stop after this many mismatches (0: never), default 20");
  v->add_option("--only", ver.only, "replay only files whose path contains this text");
  v->add_option("--threads", ver.threads, "OpenMP threads (default: all cores)")->check(CLI::Range(1, 1024));
  v->add_flag("--quiet", ver.quiet, "print only failing files and the summary");
  v->add_option("--shard", ver.shard, "I/N: replay only the manifest's files k with k mod N = I, into --shard-dir");
  v->add_option("--shard-dir", ver.shard_dir, "where --shard writes verify-shard-I-of-N.json (qmx-sim merge reports them)");
  v->callback([] { RunVerify(ver); });

  static CoverageArgs cov;
  auto* c = cmd->add_subcommand("coverage", "Which classes of cases golden files (or a simulator's log) hit and miss");
  c->add_option("paths", cov.paths, "golden .txt files or directories (searched recursively)");
  c->add_option("--log", cov.log, "a simulator's log: one case per line, its input fields in hex as the golden file has them");
  c->add_option("--like", cov.like, "the golden file whose header (operation and options) the --log cases follow");
  c->add_option("--json", cov.json, "also write every file's class counts as JSON here");
  c->add_flag("--require-all", cov.require_all, "exit 1 when any class of a modelled operation is missed");
  c->add_flag("--misses-only", cov.misses_only, "print only files that miss a class (and the summary)");
  c->callback([] { RunCoverage(cov); });

  auto* l = cmd->add_subcommand("list", "Describe the suites");
  l->callback([] { ListSuites(); });
}

}  // namespace qmx::cli
