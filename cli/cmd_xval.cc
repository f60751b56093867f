// cmd_xval.cc: `qmx-sim xval`: the same operations on the GPU (gpu/, CUDA backend) and on the CPU
// emulator, compared bit for bit (gpu/README.md). Builds without the CUDA backend say so and exit 2.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "qmx/error.h"
#include "qmx/io.h"
#if defined(QMX_HAVE_CUDA)
#include "qmx/gpu.h"
#endif

namespace qmx::cli {
namespace {

struct XvalArgs {
  std::string golden, json, only;
  bool exhaustive = false, quick = false, no_golden = false;
  bool conversions = false, quantize = false, gemm = false, engine = false;
  uint64_t seed = 1;
  size_t max_show = 3;
};

// Exit status when no comparison could run at all (no device): ctest's SKIP_RETURN_CODE.
constexpr int kNothingRan = 77;

#if defined(QMX_HAVE_CUDA)
void PrintRow(const gpu::XvalRow& r) {
  const char* status = !r.skipped.empty() ? "skip" : (r.mismatches ? (r.informational ? "info" : "FAIL") : "ok");
  std::printf("%-4s %-9s %-52s %-34s %12llu %10llu %8.2f s\n", status, r.group.c_str(), r.op.c_str(),
              r.reference.c_str(), static_cast<unsigned long long>(r.cases),
              static_cast<unsigned long long>(r.mismatches), r.seconds);
  if (!r.skipped.empty()) std::printf("       skipped: %s\n", r.skipped.c_str());
  for (const auto& f : r.first) std::printf("       %s\n", f.c_str());
  for (const auto& n : r.notes) std::printf("       note: %s\n", n.c_str());
  std::fflush(stdout);
}

void RunXval(const XvalArgs& a) {
  const gpu::DeviceInfo& dev = gpu::Device();
  std::printf("qmx-sim xval: device %s\n", dev.Describe().c_str());
  gpu::XvalOptions o;
  o.golden_dir = a.no_golden ? "" : a.golden;
  o.exhaustive = a.exhaustive;
  o.quick = a.quick;
  o.seed = a.seed;
  o.max_show = a.max_show;
  o.only = a.only;
  if (a.conversions || a.quantize || a.gemm || a.engine) {
    o.conversions = a.conversions;
    o.quantize = a.quantize;
    o.gemm = a.gemm;
    o.engine = a.engine;
  }
  if (!dev.available) {
    std::printf("every comparison skipped: %s\n", dev.reason.c_str());
    std::fflush(stdout);
    std::exit(kNothingRan);
  }
  std::printf("%-4s %-9s %-52s %-34s %12s %10s %10s\n", "", "group", "operation", "reference", "cases", "mismatch", "time");
  const auto rows = gpu::Xval(o, [&](const gpu::XvalRow& r) {
    if (a.only.empty() || r.op.find(a.only) != std::string::npos) PrintRow(r);
  });
  uint64_t cases = 0, bad = 0, skipped = 0, ran = 0;
  nlohmann::json j;
  j["device"] = dev.Describe();
  j["options"] = {{"golden", o.golden_dir}, {"exhaustive", o.exhaustive}, {"quick", o.quick}, {"seed", o.seed}};
  j["rows"] = nlohmann::json::array();
  for (const auto& r : rows) {
    cases += r.cases;
    if (!r.skipped.empty()) ++skipped;
    else ++ran;
    if (r.mismatches && !r.informational) ++bad;
    j["rows"].push_back({{"group", r.group}, {"op", r.op}, {"reference", r.reference}, {"cases", r.cases},
                         {"mismatches", r.mismatches}, {"skipped", r.skipped}, {"informational", r.informational}, {"first", r.first}, {"notes", r.notes}, {"seconds", r.seconds}});
  }
  j["summary"] = {{"rows", rows.size()}, {"ran", ran}, {"skipped", skipped}, {"failing", bad}, {"cases", cases}};
  if (!a.json.empty()) WriteFileAtomic(a.json, j.dump(2) + "\n");
  std::printf("xval: %zu rows (%llu ran, %llu skipped), %llu cases compared, %llu rows with mismatches\n", rows.size(),
              static_cast<unsigned long long>(ran), static_cast<unsigned long long>(skipped),
              static_cast<unsigned long long>(cases), static_cast<unsigned long long>(bad));
  if (bad) throw Error(std::to_string(bad) + " comparison(s) differ between the GPU and the emulator");
}
#else
[[noreturn]] void RunXval(const XvalArgs&) {
  std::fprintf(stderr, "qmx-sim xval: this build has no CUDA backend (configure with the CUDA Toolkit and "
                       "-DQMX_ENABLE_CUDA=ON or AUTO; gpu/README.md)\n");
  std::exit(2);
}
#endif

}  // namespace

void AddXvalCommand(CLI::App& app) {
  static XvalArgs a;
  auto* c = app.add_subcommand("xval", "Cross-validate the GPU (CUDA backend) against the CPU emulator, bit for bit; "
                                       "exit 1 on a mismatch, 77 when no GPU is present");
  c->add_option("--golden", a.golden, "golden directory replayed on the GPU (default golden/level1)");
  c->add_flag("--no-golden", a.no_golden, "skip the golden replay");
  c->add_flag("--exhaustive", a.exhaustive, "all 2^32 FP32 inputs per conversion (else 2^26 spread over the space)");
  c->add_flag("--conversions", a.conversions, "run only the selected groups: conversions ...");
  c->add_flag("--quantize", a.quantize, "... MX and NVFP4 quantization ...");
  c->add_flag("--gemm", a.gemm, "... cuBLASLt and mma.sync GEMMs ...");
  c->add_flag("--engine", a.engine, "... the emulation engine's GEMMs against the CPU library, model by model");
  c->add_flag("--quick", a.quick, "smaller tensors and GEMMs (tests)");
  c->add_option("--seed", a.seed, "seed of the generated inputs");
  c->add_option("--max-show", a.max_show, "first mismatches printed per row (default 3)");
  c->add_option("--only", a.only, "print only rows whose operation contains this text (the engine's conversion rows not selected are not run)");
  c->add_option("--json", a.json, "write every row (with all kept mismatches) as JSON");
  a.golden = "golden/level1";
  c->callback([] { RunXval(a); });
}

}  // namespace qmx::cli
