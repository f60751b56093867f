// libFuzzer target for golden manifests (manifest.json: format, files[] with path, suite, op, header, cases,
// sha256). The input is the manifest's text; the scratch directory beside it holds one small valid golden
// file (s/f.txt) and a subdirectory. Verify, on both CPU backends, must throw qmx::Error (malformed JSON, a
// missing or mistyped field, a path leaving the directory) or report each listed file's problems; never crash,
// read outside the directory, or throw anything else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "qmx/error.h"
#include "qmx/golden.h"
#include "scratch.h"

namespace {

constexpr const char* kFile =
    "# qmx-golden v1\n"
    "# op=convert src=bf16 dst=e2m1 round=rd sat=satfinite nan-sign=keep nan-fallback=max subnormals=keep "
    "spec=OCP-MX-1.0 level=1 seed=1 generator=qmx-sim 0.1.0\n"
    "# fields: input (bf16 bits) | output (e2m1 code) | flags\n"
    "0000 00 00\n"
    "7f80 07 20\n"
    "7fc0 07 10\n";

const std::string& ScratchDir() {
  static const std::string dir = [] {
    const std::string d = qmx::fuzz::MakeScratchDir("qmx-fuzz-manifest", "s/d");
    qmx::fuzz::WriteText(d + "/s/f.txt", kFile);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = ScratchDir();
  qmx::fuzz::WriteText(dir + "/manifest.json", std::string(reinterpret_cast<const char*>(data), size));
  for (const auto backend : {qmx::golden::Backend::kCpuRef, qmx::golden::Backend::kCpuSimd}) {
    qmx::golden::VerifyOptions opt;
    opt.backend = backend;
    opt.max_errors = 4;
    try {
      for (const auto& r : qmx::golden::Verify(dir, opt))
        if (r.path.find("..") != std::string::npos || (!r.path.empty() && r.path[0] == '/')) std::abort();
    } catch (const qmx::Error&) {
    }
  }
  return 0;
}
