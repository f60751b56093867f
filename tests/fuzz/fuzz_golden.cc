// libFuzzer target for golden vector files (golden/README.md: the magic line, the "# op=..." header that
// builds the operation, hex case lines). The input is one file's text; the target writes it into a scratch
// golden directory beside a manifest that lists it under its own header, SHA-256 and case count, and replays
// the directory with both CPU backends. Any text must give per-file errors or mismatches, never a crash, an
// exception other than qmx::Error, or memory beyond a small multiple of the file; and a file that replays
// clean on cpu-ref (outputs and flags) must replay clean on cpu-simd (outputs only).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "qmx/error.h"
#include "qmx/golden.h"
#include "qmx/sha256.h"
#include "scratch.h"

namespace {

const std::string& ScratchDir() {
  static const std::string dir = qmx::fuzz::MakeScratchDir("qmx-fuzz-golden", "s");
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string header, op;
  uint64_t cases = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# op=", 0) == 0 && header.empty()) {
      header = line;
      op = line.substr(5, line.find(' ', 5) == std::string::npos ? std::string::npos : line.find(' ', 5) - 5);
    } else if (!line.empty() && line[0] != '#') {
      ++cases;
    }
  }
  const std::string& dir = ScratchDir();
  qmx::fuzz::WriteText(dir + "/s/f.txt", text);
  nlohmann::json m;
  m["format"] = "qmx-golden v1";
  m["files"] = nlohmann::json::array(
      {{{"path", "s/f.txt"}, {"suite", "s"}, {"op", op}, {"header", header}, {"cases", cases}, {"sha256", qmx::Sha256Hex(text)}}});
  // (A header that is not UTF-8 goes into the manifest with U+FFFD in place of its bad bytes; Verify then
  // reports that the file's header differs from the manifest's.)
  qmx::fuzz::WriteText(dir + "/manifest.json", m.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  bool ref_clean = false;
  for (const auto backend : {qmx::golden::Backend::kCpuRef, qmx::golden::Backend::kCpuSimd}) {
    qmx::golden::VerifyOptions opt;
    opt.backend = backend;
    opt.max_errors = 4;
    std::vector<qmx::golden::FileResult> r;
    try {
      r = qmx::golden::Verify(dir, opt);
    } catch (const qmx::Error&) {
      std::abort();  // the manifest is well formed: Verify reports file problems, it does not throw
    }
    if (r.size() != 1) std::abort();
    if (backend == qmx::golden::Backend::kCpuRef) ref_clean = r[0].ok();
    else if (ref_clean && !r[0].ok()) std::abort();
  }
  return 0;
}
