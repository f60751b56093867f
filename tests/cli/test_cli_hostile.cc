// test_cli_hostile.cc: the qmx-sim binary under hostile input (issue "reliability"): absurd and
// conflicting options for every subcommand, output paths that are missing, files, or the input itself,
// files that lie about their size and a memory ceiling (signals during a write: test_cli_hostile_fs.cc). Every case must
// end with a clear message and a documented non-zero exit (1 for qmx-sim's own errors, CLI11's 105-109
// for option-parse errors), no crash, no hang, and no output or temporary file left behind.
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

NpyArray RandomU8(std::vector<size_t> shape, uint32_t seed) {
  NpyArray a;
  a.dtype = DType::kU8;
  a.shape = shape;
  std::mt19937 rng(seed);
  a.data.resize(shape[0] * shape[1]);
  for (uint8_t& c : a.data) c = static_cast<uint8_t>(rng() % 0x7E);  // finite e4m3 codes
  return a;
}

// A .npy whose header declares `shape` but whose data is only `data_bytes` long.
void WriteLyingNpy(const std::string& path, const std::string& shape, size_t data_bytes) {
  std::string hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  hdr += std::string(118 - hdr.size(), ' ') + "\n";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(hdr.size() & 0xFF);
  bytes += static_cast<char>(hdr.size() >> 8);
  bytes += hdr + std::string(data_bytes, '\0');
  WriteText(path, bytes);
}

}  // namespace

TEST_CASE("cli hostile: absurd and conflicting options get a message naming them", "[cli][hostile]") {
  TempDir dir;
  WriteNpy(dir / "x.npy", RandomF32({64, 64}, 1));
  WriteNpy(dir / "codes.npy", RandomU8({64, 64}, 2));
  struct Attack {
    const char* args;
    const char* what;  // a word the message must hold
  };
  const Attack attacks[] = {
      // quantize
      {"quantize --in x.npy --out q/ --block 0", "--block"},
      {"quantize --in x.npy --out q/ --block 1x0", "1x0"},
      {"quantize --in x.npy --out q/ --block 0x32", "0x32"},
      {"quantize --in x.npy --out q/ --block 1x1000000000", "1x1000000000"},
      {"quantize --in x.npy --out q/ --block 1x-32", "1x-32"},
      {"quantize --in x.npy --out q/ --threads 0", "--threads"},
      {"quantize --in x.npy --out q/ --threads -1", "--threads"},
      {"quantize --in x.npy --out q/ --threads 1000000", "--threads"},
      {"quantize --in x.npy --out q/ --threads 1e6", "--threads"},
      {"quantize --in x.npy --out q/ --round sr --sr-bits 0", "0"},
      {"quantize --in x.npy --out q/ --round sr --sr-bits 33", "33"},
      {"quantize --in x.npy --out q/ --spec nosuchrecipe", "nosuchrecipe"},
      {"quantize --in x.npy --out q/ --elem e9m9", "e9m9"},
      {"quantize --in x.npy --out q/ --spec nvfp4 --elem int8", "int8"},
      {"quantize --in x.npy --out q/ --margin 100000", "margin"},
      {"quantize --in x.npy --out q/ --seed -1", "--seed"},
      {"quantize --in x.npy --out q.bin", "--out"},
      {"quantize --in x.npy --out q/ --tensor w", "--tensor"},
      {"quantize --in nothere.npy --out q/", "nothere.npy"},
      // convert
      {"convert --in x.npy --out y.npy --to e4m3 --round sr --sr-bits 33", "33"},
      {"convert --in x.npy --out y.npy --to e99m99", "e99m99"},
      {"convert --in x.npy --out y.npy --to eXmY", "eXmY"},
      {"convert --in x.npy --out y.npy --to e4m3 --round nearest-ish", "nearest-ish"},
      {"convert --in x.npy --to e4m3", "--out"},
      {"convert --out y.npy --to e4m3 1.0", "--in"},
      // gemm
      {"gemm --a codes.npy --b codes.npy --threads 0", "--threads"},
      {"gemm --a codes.npy --b codes.npy --promote -5", "--promote"},
      {"gemm --a codes.npy --b codes.npy --block 0", "--block"},
      {"gemm --a codes.npy --b codes.npy --block 7", "--block"},
      {"gemm --a codes.npy --b codes.npy --model fused:F=1000", "F"},
      {"gemm --a codes.npy --b codes.npy --model fused:step=0", "step"},
      {"gemm --a codes.npy --b codes.npy --model nosuchmodel", "nosuchmodel"},
      {"gemm --a codes.npy --b codes.npy --a-scales codes.npy", "--block"},
      {"gemm --a x.npy --b codes.npy", "uint8"},
      {"gemm --a codes.npy --b codes.npy --c x.npy --a-format e2m1", "e2m1"},
      {"gemm --a codes.npy --b codes.npy --alpha cuda", "--alpha"},
      {"gemm --a codes.npy --b codes.npy --a-amax 3", "serve --alpha te or te-ref"},
      {"gemm --a codes.npy --b codes.npy --a-amax -3 --alpha te", "--a-amax"},
      {"gemm --a codes.npy --b codes.npy --a-amax 3 --alpha te", "B has none"},
      {"gemm --a codes.npy --b codes.npy --a-amax 3 --b-amax 2 --alpha te --nvfp4-bound 300", "--nvfp4-bound"},
      {"gemm --a x.npy --b x.npy --quantize nvfp4 --a-amax 3 --alpha te", "--quantize measures it"},
      {"gemm --a x.npy --b x.npy --quantize nvfp4-row --alpha te", "alpha=te-ref"},
      {"gemm --a x.npy --b x.npy --quantize mxfp4 --alpha te", "has none"},
      // recipe
      {"recipe --m 0 --quiet", "--m"},
      {"recipe --m 100000000 --n 100000000 --k 100000000 --quiet", "--m"},
      {"recipe --steps -1 --quiet", "--steps"},
      {"recipe --steps 0 --quiet", "--steps"},
      {"recipe --threads 0 --quiet", "--threads"},
      {"recipe --recipe nosuchrecipe --quiet", "nosuchrecipe"},
      {"recipe --alpha cuda --quiet", "--alpha"},
      // study
      {"study error --rows 0", "--rows"},
      {"study error --rows 100000000 --cols 100000000", "--rows"},
      {"study error --trials 0", "--trials"},
      {"study error --threads 0", "--threads"},
      {"study error --dist nosuchdist", "nosuchdist"},
      {"study error --transform hadamard:7", "hadamard:7"},
      // bench, golden
      {"bench --log2n 100", "--log2n"},
      {"bench --reps 0", "--reps"},
      {"bench --threads 0", "--threads"},
      {"golden gen --level 3 --out g", "--level"},
      {"golden gen --suite nosuchsuite --out g", "nosuchsuite"},
      {"golden verify nothere", "nothere"},
      {"golden verify . --threads 0", "--threads"},
  };
  for (const Attack& a : attacks) ExpectRefused(dir, a.args, a.what);
}

TEST_CASE("cli hostile: output paths that are missing, files, or the input itself", "[cli][hostile]") {
  TempDir dir;
  WriteNpy(dir / "x.npy", RandomF32({32, 64}, 3));
  WriteNpy(dir / "codes.npy", RandomU8({64, 64}, 4));
  const std::string x_before = ReadText(dir / "x.npy"), codes_before = ReadText(dir / "codes.npy");
  WriteText(dir / "afile", "not a directory");

  SECTION("--out DIR/ creates DIR and its parents") {
    const RunResult r = Run("quantize --in " + Quote(dir / "x.npy") + " --out " + Quote(dir / "new/deeper/") + " --quiet");
    INFO(r.all());
    REQUIRE(r.status == 0);
    CHECK(Listing(dir.path / "new/deeper") ==
          std::vector<std::string>{"spec.json", "x.codes.npy", "x.dequant.npy", "x.scales.npy"});
    const RunResult q = Run("quantize --in " + Quote(dir / "x.npy") + " --out " + Quote(dir / "st.safetensors") + " --quiet");
    REQUIRE(q.status == 0);
    const RunResult d = Run("dequantize --in " + Quote(dir / "st.safetensors") + " --out " + Quote(dir / "dq/"));
    INFO(d.all());
    CHECK(d.status == 0);
    CHECK(fs::exists(dir.path / "dq/x.npy"));
  }
  SECTION("a file where a directory is needed, a missing parent directory") {
    ExpectRefused(dir, "quantize --in x.npy --out afile/", "afile");
    ExpectRefused(dir, "quantize --in x.npy --out nowhere/q.safetensors", "nowhere");
    ExpectRefused(dir, "convert --in x.npy --out nowhere/y.npy --to e4m3", "nowhere");
    ExpectRefused(dir, "convert --in x.npy --out afile/y.npy --to e4m3", "afile");
    ExpectRefused(dir, "gemm --a codes.npy --b codes.npy --out nowhere/d.npy", "nowhere");
  }
  SECTION("the output is the input: refused, the input intact") {
    ExpectRefused(dir, "convert --in x.npy --out x.npy --to e4m3", "input");
    ExpectRefused(dir, "convert --in x.npy --out ./x.npy --to e4m3", "input");
    ExpectRefused(dir, "quantize --in x.npy --out q/ --json x.npy", "input");
    ExpectRefused(dir, "gemm --a codes.npy --b codes.npy --out codes.npy", "input");
    ExpectRefused(dir, "gemm --a codes.npy --b codes.npy --json codes.npy", "input");
    fs::create_symlink(dir.path / "x.npy", dir.path / "link.npy");
    ExpectRefused(dir, "convert --in x.npy --out link.npy --to e4m3", "input");
  }
  CHECK(ReadText(dir / "x.npy") == x_before);
  CHECK(ReadText(dir / "codes.npy") == codes_before);
}

TEST_CASE("cli hostile: files that lie about their size, devices, and the memory ceiling", "[cli][hostile]") {
  TempDir dir;
  WriteNpy(dir / "x.npy", RandomF32({16, 64}, 5));
  WriteLyingNpy(dir / "huge.npy", "(100000, 100000)", 64);
  WriteLyingNpy(dir / "overflow.npy", "(4611686018427387904, 8)", 64);
  WriteLyingNpy(dir / "zero_dim.npy", "(0, 100000000000)", 0);
  {
    const std::string h = R"({"t": {"dtype": "F32", "shape": [1000000, 1000000], "data_offsets": [0, 4000000000000]}})";
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((h.size() >> (8 * i)) & 0xFF);
    WriteText(dir / "huge.safetensors", bytes + h + std::string(16, '\0'));
    std::string big(8, '\0');
    big[7] = 0x40;  // header length 2^62
    WriteText(dir / "hdr.safetensors", big + "{}");
  }
  ::mkfifo((dir.path / "fifo.npy").c_str(), 0600);

  ExpectRefused(dir, "quantize --in huge.npy --out q/", "huge.npy");
  ExpectRefused(dir, "quantize --in overflow.npy --out q/", "overflow.npy");
  ExpectRefused(dir, "gemm --a huge.npy --b x.npy", "huge.npy");
  ExpectRefused(dir, "quantize --in huge.safetensors --out q/", "huge.safetensors");
  ExpectRefused(dir, "quantize --in hdr.safetensors --out q/", "hdr.safetensors");
  ExpectRefused(dir, "convert --in /dev/zero --out y.npy --to e4m3", "not a regular file");
  ExpectRefused(dir, "convert --in fifo.npy --out y.npy --to e4m3", "not a regular file");
  ExpectRefused(dir, "convert --in . --out y.npy --to e4m3", "'.'");
  // The ceiling: set low, a small file is refused before it is read; a malformed value is named.
  ExpectRefused(dir, "quantize --in x.npy --out q/", "memory ceiling", "QMX_MAX_MEMORY=1K");
  ExpectRefused(dir, "quantize --in x.npy --out q/", "QMX_MAX_MEMORY", "QMX_MAX_MEMORY=banana");
  ExpectRefused(dir, "recipe --recipe bf16 --quiet", "memory ceiling", "QMX_MAX_MEMORY=1M");
  ExpectRefused(dir, "study error --rows 1024 --cols 4096", "memory ceiling", "QMX_MAX_MEMORY=16M");
}

}  // namespace qmx
