// main.cc: the qmx-sim command line. Each subcommand lives in cmd_<name>.cc and only calls lib/.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "commands.h"
#include "common/study_output.h"
#include "qmx/error.h"
#include "qmx/version.h"

namespace {

// Unsigned options refuse a negative value: CLI11 would otherwise wrap "--seed -1" to 2^64 - 1.
void RefuseNegativeUnsigned(CLI::App* app) {
  const CLI::Validator non_negative(
      [](std::string& v) {
        return !v.empty() && v[0] == '-' ? "'" + v + "' is negative; it must be 0 or more" : std::string();
      },
      "", "NON-NEGATIVE");
  for (CLI::Option* o : app->get_options())
    if (o->get_type_name().rfind("UINT", 0) == 0) o->check(non_negative);
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) RefuseNegativeUnsigned(sub);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"qmx-sim " QMX_VERSION ": bit-exact emulation of OCP FP8/FP6/FP4, MX and NVFP4 numerics"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "qmx-sim " QMX_VERSION);
  qmx::cli::AddFormatsCommand(app);
  qmx::cli::AddConvertCommand(app);
  qmx::cli::AddBenchCommand(app);
  qmx::cli::AddQuantizeCommand(app);
  qmx::cli::AddGemmCommand(app);
  qmx::cli::AddScaledMmCommand(app);
  qmx::cli::AddStudyCommand(app);
  qmx::cli::AddRecipeCommand(app);
  qmx::cli::AddAuditCommand(app);
  qmx::cli::AddDiffCommand(app);
  qmx::cli::AddGoldenCommand(app);
  qmx::cli::AddXvalCommand(app);
  RefuseNegativeUnsigned(&app);
  qmx::cli::SetCommandLine(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const qmx::Error& e) {
    std::fprintf(stderr, "qmx-sim: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qmx-sim: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
