// support/cli.h: running the qmx-sim binary (QMX_CLI_PATH) from tests: scratch directories, capture of
// stdout / stderr / exit status, and small text helpers.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace qmx::test {

namespace fs = std::filesystem;

// A scratch directory from mkdtemp, removed with everything in it at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/qmx_cli_test_XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    REQUIRE(made != nullptr);
    path = made;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// Single-quotes a word for /bin/sh.
inline std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

struct RunResult {
  int status;  // exit status; -1 when the process did not exit normally (e.g. killed by a signal)
  std::string out, err;
  std::string all() const { return out + err; }
};

// Runs `[env] qmx-sim args`, capturing stdout and stderr separately (in files under a private
// temp dir, so the directories the tests inspect stay untouched).
inline RunResult Run(const std::string& args, const std::string& env = "") {
  TempDir capture;
  const std::string out_path = capture / "stdout", err_path = capture / "stderr";
  const std::string cmd = env + (env.empty() ? "" : " ") + Quote(QMX_CLI_PATH) + " " + args + " >" +
                          Quote(out_path) + " 2>" + Quote(err_path);
  const int raw = std::system(cmd.c_str());
  RunResult r;
  r.status = raw != -1 && WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = ReadText(out_path);
  r.err = ReadText(err_path);
  return r;
}

inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::vector<std::string> Words(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// Names of the entries of a directory, sorted.
// The comma-separated fields of one CSV line (the writers never quote).
inline std::vector<std::string> CsvFields(const std::string& line) {
  std::vector<std::string> f;
  std::string cur;
  for (char c : line) {
    if (c == ',') f.push_back(cur), cur.clear();
    else cur += c;
  }
  f.push_back(cur);
  return f;
}

inline std::vector<std::string> Listing(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Whether a temporary output file ("NAME.tmp.<pid>...") is anywhere under `dir`.
inline bool HasTemporaries(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

// Runs qmx-sim in `dir`: it must fail as documented (exit 1 for qmx-sim's own errors, CLI11's 105-109 for
// option-parse errors) with a message holding `what`, crash-free, and leave the directory as it was (no
// output, no temporary).
inline void ExpectRefused(const TempDir& dir, const std::string& args, const std::string& what, const std::string& env = "") {
  const std::vector<std::string> before = Listing(dir.path);
  const RunResult r = Run(args, "cd " + Quote(dir.path.string()) + " && " + env);
  INFO("qmx-sim " << args << "\nexit " << r.status << "\n" << r.all());
  CHECK((r.status == 1 || (r.status >= 105 && r.status <= 109)));
  CHECK_THAT(r.err, Catch::Matchers::Contains(what));
  for (const char* crash : {"internal error", "terminate", "Sanitizer", "runtime error", "Segmentation"})
    CHECK_THAT(r.err, !Catch::Matchers::Contains(crash));
  CHECK(Listing(dir.path) == before);
  CHECK_FALSE(HasTemporaries(dir.path));
}

}  // namespace qmx::test
