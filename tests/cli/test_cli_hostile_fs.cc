// test_cli_hostile_fs.cc: the qmx-sim binary against a hostile filesystem and hostile sizes (issue "Defects
// found by a hostile-input attack"): outputs that are inputs or each other, tensor names that are paths,
// planted symlinks, devices and FIFOs, fatal signals and stale temporaries, golden directories that reach
// outside themselves, products of small sizes that overflow, and headers built to exhaust memory or time.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "qmx/io.h"
#include "qmx/safetensors.h"
#include "support/arrays.h"
#include "support/cli.h"

namespace qmx {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using namespace qmx::test;

RunResult RunIn(const TempDir& dir, const std::string& args, const std::string& env = "") {
  return Run(args, "cd " + Quote(dir.path.string()) + " && " + env);
}

// A .npy of `dtype` declaring `shape`, with no data (every shape here has a zero dimension).
void WriteEmptyNpy(const std::string& path, const std::string& shape, const std::string& dtype = "|u1") {
  std::string hdr = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': " + shape + ", }";
  hdr += std::string(118 - hdr.size(), ' ') + "\n";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(hdr.size() & 0xFF);
  bytes += static_cast<char>(hdr.size() >> 8);
  WriteText(path, bytes + hdr);
}

// A .safetensors file image from a header text and a data section.
std::string SafetensorsImage(const std::string& header, const std::string& data = "") {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return bytes + header + data;
}

// An F32 safetensors file with one small tensor per name.
void WriteNamedTensors(const std::string& path, const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, NpyArray>> t;
  for (size_t i = 0; i < names.size(); ++i) t.emplace_back(names[i], RandomF32({4, 32}, static_cast<uint32_t>(10 + i)));
  WriteSafetensors(path, t);
}

// Every regular file under `dir`, relative, sorted.
std::vector<std::string> Tree(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (!e.is_directory()) out.push_back(fs::relative(e.path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

// Starts the CLI with `args` (and `env` when given, else this process's), its stdout and stderr sent to
// /dev/null, and returns its pid without waiting.
pid_t SpawnCli(const std::vector<std::string>& args, char* const* env = nullptr) {
  std::vector<char*> argv{const_cast<char*>("qmx-sim")};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    ::execve(QMX_CLI_PATH, argv.data(), env != nullptr ? env : environ);
    ::_exit(127);
  }
  return pid;
}

pid_t DeadPid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return pid;
}

}  // namespace

TEST_CASE("cli hostile: products of small sizes that overflow or are empty", "[cli][hostile]") {
  TempDir dir;
  WriteEmptyNpy(dir / "a32.npy", "(4294967296, 0)");
  WriteEmptyNpy(dir / "b32.npy", "(0, 4294967296)");
  WriteEmptyNpy(dir / "a16.npy", "(65536, 0)");
  WriteEmptyNpy(dir / "b16.npy", "(0, 65536)");
  WriteEmptyNpy(dir / "af.npy", "(1048576, 0)", "<f4");
  WriteEmptyNpy(dir / "bf.npy", "(0, 1048576)", "<f4");
  // Two 128-byte files once crashed (M x N wrapped to 0) or allocated 16 GiB of zeros.
  ExpectRefused(dir, "gemm --a a32.npy --b b32.npy", "K is 0");
  ExpectRefused(dir, "gemm --a a32.npy --b b32.npy --reference", "K is 0");
  ExpectRefused(dir, "gemm --a a16.npy --b b16.npy --out d.npy", "K is 0");
  ExpectRefused(dir, "gemm --a af.npy --b bf.npy --quantize mxfp8", "K is 0");
  // bench: its working set is checked against the ceiling before anything is allocated.
  ExpectRefused(dir, "bench --suite gemm --gemm-sizes 4096", "memory ceiling", "QMX_MAX_MEMORY=1G");
  ExpectRefused(dir, "bench --suite recipe --recipe-shape 4096 4096 4096", "memory ceiling", "QMX_MAX_MEMORY=1G");
}

TEST_CASE("cli hostile: safetensors headers built to exhaust memory or time", "[cli][hostile]") {
  TempDir dir;
  // 20 MB of nested brackets: refused by the depth check before the JSON parser builds a tree.
  WriteText(dir / "deep.safetensors", SafetensorsImage("{\"t\":" + std::string(20'000'000, '[')));
  const auto t0 = std::chrono::steady_clock::now();
  ExpectRefused(dir, "dequantize --in deep.safetensors --out d/", "nests deeper");
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
  // 100 k zero-size tensors named t<i>.blocks: every look-up of a companion tensor is a binary search, so
  // the scan is quick (it was quadratic: 200 s for this file) and ends in the plain refusal.
  std::string h = "{";
  for (int i = 0; i < 100000; ++i)
    h += (i ? ",\"t" : "\"t") + std::to_string(i) + ".blocks\":{\"dtype\":\"U8\",\"shape\":[0,16],\"data_offsets\":[0,0]}";
  h += "}";
  WriteText(dir / "many.safetensors", SafetensorsImage(h));
  const auto t1 = std::chrono::steady_clock::now();
  ExpectRefused(dir, "dequantize --in many.safetensors --out d/", "no quantized tensor");
  CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(20));
}

TEST_CASE("cli hostile: no output replaces an input or another output", "[cli][hostile]") {
  TempDir dir;
  WriteNpy(dir / "x.npy", RandomF32({16, 64}, 3));
  WriteNamedTensors(dir / "m.safetensors", {"w"});
  const std::string x_before = ReadText(dir / "x.npy"), m_before = ReadText(dir / "m.safetensors");
  fs::create_symlink(dir.path / "x.npy", dir.path / "link.npy");
  const std::string study = "study error --spec mxfp8 --quiet ";
  SECTION("an output that is an input, by name, through ./ or a symlink") {
    ExpectRefused(dir, study + "--input x.npy --csv x.npy", "input");
    ExpectRefused(dir, study + "--input x.npy --json ./x.npy", "input");
    ExpectRefused(dir, study + "--input x.npy --csv link.npy", "input");
    ExpectRefused(dir, study + "--input m.safetensors:w --json m.safetensors", "input");
    ExpectRefused(dir, "study hadamard --spec mxfp4 --quiet --input x.npy --csv x.npy", "input");
    ExpectRefused(dir, "study kurtosis --quiet --input x.npy --json x.npy", "input");
    ExpectRefused(dir, "study kurtosis --quiet --input x.npy --csv x.npy", "input");
    // --csv k.csv writes k-kurtosis.csv beside it: that one is checked too.
    fs::copy_file(dir.path / "x.npy", dir.path / "k-kurtosis.csv");
    ExpectRefused(dir, "study kurtosis --quiet --input k-kurtosis.csv --csv k.csv", "input");
    fs::remove(dir.path / "k-kurtosis.csv");
    ExpectRefused(dir, "recipe --recipe bf16 --quiet --x x.npy --m 16 --k 64 --csv x.npy", "input");
    ExpectRefused(dir, "recipe --recipe bf16 --quiet --x x.npy --m 16 --k 64 --json link.npy", "input");
  }
  SECTION("two outputs on one file") {
    ExpectRefused(dir, "quantize --in x.npy --out q.safetensors --json q.safetensors", "one file");
    ExpectRefused(dir, "quantize --in x.npy --out q.safetensors --json ./q.safetensors", "one file");
    ExpectRefused(dir, "quantize --in x.npy --out q/ --json q/spec.json", "one file");
    ExpectRefused(dir, "quantize --in x.npy --out q/ --json q/x.codes.npy", "one file");
    ExpectRefused(dir, "gemm --a x.npy --b x.npy --quantize mxfp8 --out d.npy --json d.npy", "one file");
    ExpectRefused(dir, study + "--csv r.txt --json r.txt", "one file");
    ExpectRefused(dir, "study ranges --csv r.txt --json ./r.txt", "one file");
    ExpectRefused(dir, "study kurtosis --quiet --csv k.csv --json k-kurtosis.csv", "one file");
    ExpectRefused(dir, "recipe --recipe bf16 --quiet --m 16 --n 16 --k 64 --csv r.txt --json r.txt", "one file");
  }
  SECTION("character devices are written through and may repeat") {
    const RunResult r = RunIn(dir, study + "--rows 8 --cols 64 --csv /dev/null --json /dev/null");
    INFO(r.all());
    CHECK(r.status == 0);
    CHECK(fs::is_character_file("/dev/null"));
  }
  CHECK(ReadText(dir / "x.npy") == x_before);
  CHECK(ReadText(dir / "m.safetensors") == m_before);
}

TEST_CASE("cli hostile: tensor names are not paths", "[cli][hostile]") {
  TempDir dir;
  fs::create_directory(dir.path / "work");
  WriteText(dir / "victim.npy", "precious");
  WriteNamedTensors(dir / "m.safetensors", {"../../victim", "sub/dir/b", ".hidden", "..", "plain.w"});
  SECTION("quantize --out DIR/: every file inside DIR, names %-encoded, reversibly") {
    const RunResult r = RunIn(dir, "quantize --in m.safetensors --out work/q/ --quiet");
    INFO(r.all());
    REQUIRE(r.status == 0);
    CHECK(ReadText(dir / "victim.npy") == "precious");
    const std::vector<std::string> files = Tree(dir.path / "work/q");
    CHECK(std::count_if(files.begin(), files.end(), [](const std::string& f) { return f.find('/') != std::string::npos; }) == 0);
    CHECK(std::count(files.begin(), files.end(), "%2E.%2F..%2Fvictim.codes.npy") == 1);
    CHECK(std::count(files.begin(), files.end(), "sub%2Fdir%2Fb.codes.npy") == 1);
    CHECK(std::count(files.begin(), files.end(), "%2Ehidden.codes.npy") == 1);
    CHECK(std::count(files.begin(), files.end(), "%2E..codes.npy") == 1);
    CHECK(std::count(files.begin(), files.end(), "plain.w.codes.npy") == 1);
    for (const char* n : {"../../victim", "sub/dir/b", ".hidden", "..", "plain.w"})
      CHECK(TensorNameOfFile(TensorFileName(n)) == n);
  }
  SECTION("dequantize --out DIR/ maps the names the same way") {
    REQUIRE(RunIn(dir, "quantize --in m.safetensors --out q.safetensors --quiet").status == 0);
    const RunResult r = RunIn(dir, "dequantize --in q.safetensors --out work/d/");
    INFO(r.all());
    REQUIRE(r.status == 0);
    CHECK(ReadText(dir / "victim.npy") == "precious");
    CHECK(Tree(dir.path / "work/d") == std::vector<std::string>{"%2E.%2F..%2Fvictim.npy", "%2E..npy", "%2Ehidden.npy",
                                                                 "plain.w.npy", "sub%2Fdir%2Fb.npy"});
  }
  SECTION("a set that cannot be written whole is not written at all") {
    WriteNamedTensors(dir / "long.safetensors", {"a", std::string(300, 'n')});
    ExpectRefused(dir, "quantize --in long.safetensors --out work/q/ --quiet", "255");
    CHECK_FALSE(fs::exists(dir.path / "work/q"));
    WriteNamedTensors(dir / "empty.safetensors", {"a", ""});
    ExpectRefused(dir, "quantize --in empty.safetensors --out work/q/ --quiet", "empty name");
    CHECK_FALSE(fs::exists(dir.path / "work/q"));
    // A later file that cannot be created (a directory in its place) leaves none of the set behind.
    fs::create_directories(dir.path / "work/q/b.dequant.npy");
    WriteNamedTensors(dir / "ab.safetensors", {"a", "b"});
    const RunResult r = RunIn(dir, "quantize --in ab.safetensors --out work/q/ --quiet");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK(Tree(dir.path / "work/q") == std::vector<std::string>{});
  }
}

TEST_CASE("cli hostile: planted symlinks, devices and FIFOs as outputs", "[cli][hostile]") {
  TempDir dir;
  WriteNpy(dir / "x.npy", RandomF32({16, 64}, 4));
  WriteText(dir / "victim", "precious");
  SECTION("symlinks at every temporary name a pid could give are never followed") {
    // The old temporary was OUT.tmp.<pid>: a symlink planted at the next pids made a run overwrite its target.
    const pid_t next = DeadPid();
    for (pid_t p = next; p < next + 64; ++p)
      fs::create_symlink(dir.path / "victim", dir.path / ("y.npy.tmp." + std::to_string(p)));
    const RunResult r = RunIn(dir, "convert --in x.npy --out y.npy --to e4m3");
    INFO(r.all());
    CHECK(r.status == 0);
    CHECK(ReadText(dir / "victim") == "precious");
    CHECK(fs::is_regular_file(fs::symlink_status(dir.path / "y.npy")));
  }
  SECTION("a FIFO is written through when read, refused at once when nobody reads it") {
    REQUIRE(::mkfifo((dir.path / "pipe").c_str(), 0600) == 0);
    const RunResult none = RunIn(dir, "convert --in x.npy --out pipe --to e4m3");
    INFO(none.all());
    CHECK(none.status == 1);
    CHECK_THAT(none.err, Contains("no reader"));
    const std::string cmd = "cd " + Quote(dir.path.string()) + " && (cat pipe > got & " + Quote(QMX_CLI_PATH) +
                            " convert --in x.npy --out pipe --to e4m3 && wait)";
    CHECK(std::system(cmd.c_str()) == 0);
    CHECK(fs::file_size(dir.path / "got") > 128);
    CHECK(fs::is_fifo(dir.path / "pipe"));
  }
  SECTION("a directory, a block device or a socket is refused") {
    fs::create_directory(dir.path / "adir");
    ExpectRefused(dir, "study ranges --csv adir", "directory");
  }
}

TEST_CASE("cli hostile: fatal signals and stale temporaries", "[cli][hostile]") {
  // A quantization whose output takes a while to write, killed by each signal whose default action ends a
  // process: afterwards the output is complete or absent, and no temporary is left.
  TempDir dir;
  WriteNpy(dir / "x.npy", RandomF32({2048, 2048}, 6));
  for (int sig : {SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM, SIGXFSZ, SIGTERM, SIGHUP, SIGINT}) {
    for (int delay_ms : {60, 200, 400}) {
      const std::string out = dir / ("q" + std::to_string(sig) + "_" + std::to_string(delay_ms) + ".safetensors");
      const pid_t pid = SpawnCli({"quantize", "--in", dir / "x.npy", "--out", out, "--quiet", "--threads", "1"});
      REQUIRE(pid >= 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      ::kill(pid, sig);
      int status = 0;
      ::waitpid(pid, &status, 0);
      INFO("signal " << sig << " after " << delay_ms << " ms; status " << status);
      CHECK((WIFSIGNALED(status) ? WTERMSIG(status) == sig : WEXITSTATUS(status) == 0));
      CHECK_FALSE(HasTemporaries(dir.path));
      if (fs::exists(out)) CHECK(SafetensorsReader(out).Read("x.codes").data.size() == size_t{2048} * 2048);
    }
  }
  SECTION("ulimit -f: SIGXFSZ mid-write") {
    const RunResult r = RunIn(dir, "quantize --in x.npy --out big.safetensors --quiet", "ulimit -f 2048 &&");
    CHECK(r.status != 0);
    CHECK_FALSE(fs::exists(dir.path / "big.safetensors"));
    CHECK_FALSE(HasTemporaries(dir.path));
  }
  SECTION("temporaries of a process that no longer runs are removed by the next write there") {
    const std::string stale = "y.npy.tmp." + std::to_string(DeadPid()) + ".0123456789ab";
    const std::string other = "y.npy.tmp." + std::to_string(::getpid()) + ".0123456789ab";  // alive: kept
    WriteText(dir / stale, "partial");
    WriteText(dir / other, "in progress");
    REQUIRE(RunIn(dir, "convert --in x.npy --out y.npy --to e4m3").status == 0);
    CHECK_FALSE(fs::exists(dir.path / stale));
    CHECK(fs::exists(dir.path / other));
    fs::remove(dir.path / other);
  }
}

TEST_CASE("cli hostile: a signal just after a temporary is created leaves nothing", "[cli][hostile]") {
  // The shim (slow_tmp_open.c, preloaded) holds the CLI for 20 s just after the open() that creates an
  // output's temporary; the signal arrives in that moment every time. The writer used to register the
  // temporary for removal only after creating it, and left it behind here (seen once in CI, by timing).
  TempDir dir;
  WriteNpy(dir / "x.npy", RandomF32({64, 64}, 7));
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0 && std::strncmp(*e, "ASAN_OPTIONS=", 13) != 0) env_text.emplace_back(*e);
  const char* asan = std::getenv("ASAN_OPTIONS");
  // A preloaded library ahead of the sanitizer runtime (the sanitizer build) is fine for this test.
  env_text.push_back(std::string("ASAN_OPTIONS=") + (asan != nullptr ? std::string(asan) + ":" : "") +
                     "verify_asan_link_order=0");
  env_text.push_back("LD_PRELOAD=" QMX_SLOW_TMP_OPEN);
  env_text.push_back("QMX_SLOW_TMP_MS=20000");
  std::vector<char*> env;
  for (std::string& e : env_text) env.push_back(e.data());
  env.push_back(nullptr);
  for (const char* cmd : {"quantize", "convert"}) {
    for (int sig : {SIGHUP, SIGTERM, SIGINT}) {
      const bool quantize = std::strcmp(cmd, "quantize") == 0;
      const std::string out = dir / (std::string(cmd) + std::to_string(sig) + (quantize ? ".safetensors" : ".npy"));
      const pid_t pid = quantize ? SpawnCli({"quantize", "--in", dir / "x.npy", "--out", out, "--quiet"}, env.data())
                                 : SpawnCli({"convert", "--in", dir / "x.npy", "--out", out, "--to", "e4m3"}, env.data());
      REQUIRE(pid >= 0);
      bool held = false;
      for (int i = 0; i < 3000 && !held; ++i) {
        held = HasTemporaries(dir.path);
        if (!held) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      ::kill(pid, sig);
      int status = 0;
      ::waitpid(pid, &status, 0);
      INFO(cmd << ": signal " << sig << "; status " << status);
      REQUIRE(held);
      CHECK(WIFSIGNALED(status));
      CHECK(WTERMSIG(status) == sig);
      CHECK_FALSE(HasTemporaries(dir.path));
      CHECK_FALSE(fs::exists(out));
    }
  }
}

TEST_CASE("cli hostile: golden verify reads regular files inside its directory only", "[cli][hostile]") {
  TempDir dir;
  REQUIRE(RunIn(dir, "golden gen --suite conversions --level 1 --seed 1 --out g --quiet").status == 0);
  REQUIRE(RunIn(dir, "golden verify g --quiet").status == 0);
  std::string listed;
  for (const auto& e : fs::recursive_directory_iterator(dir.path / "g"))
    if (e.path().extension() == ".txt") listed = fs::relative(e.path(), dir.path / "g").string();
  REQUIRE(!listed.empty());
  const fs::path victim = dir.path / "g" / listed;
  SECTION("a FIFO as a listed file does not hang") {
    fs::remove(victim);
    REQUIRE(::mkfifo(victim.c_str(), 0600) == 0);
    const RunResult r = RunIn(dir, "golden verify g --quiet");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.all(), Contains("not a regular file"));
  }
  SECTION("a FIFO as manifest.json does not hang") {
    fs::remove(dir.path / "g/manifest.json");
    REQUIRE(::mkfifo((dir.path / "g/manifest.json").c_str(), 0600) == 0);
    const RunResult r = RunIn(dir, "golden verify g --quiet");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.err, Contains("not a regular file"));
  }
  SECTION("a symlink to /dev/zero is not read") {
    fs::remove(victim);
    fs::create_symlink("/dev/zero", victim);
    const RunResult r = RunIn(dir, "golden verify g --quiet");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.all(), Contains("outside the golden directory"));
  }
  SECTION("a symlinked folder cannot take the manifest outside the directory") {
    const fs::path suite = victim.parent_path();
    fs::create_directory(dir.path / "outside");
    fs::copy(suite, dir.path / "outside", fs::copy_options::recursive);
    fs::remove_all(suite);
    fs::create_directory_symlink(dir.path / "outside", suite);
    const RunResult r = RunIn(dir, "golden verify g --quiet");
    INFO(r.all());
    CHECK(r.status == 1);
    CHECK_THAT(r.all(), Contains("outside the golden directory"));
  }
}

}  // namespace qmx
