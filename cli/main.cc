// main.cc: the qmx-sim command line. Each subcommand lives in cmd_<name>.cc and only calls lib/.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "common/ranks.h"
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

// Edit distance (insertions, deletions, substitutions) between two option or command names.
size_t Distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The closest of the names to what was typed, when it is close enough to be a slip (or a prefix of it).
std::string Closest(const std::string& typed, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::max<size_t>(2, typed.size() / 3) + 1;
  for (const std::string& n : names) {
    const size_t d = n.rfind(typed, 0) == 0 && typed.size() >= 3 ? 1 : Distance(typed, n);
    if (d < best_d) best_d = d, best = n;
  }
  return best;
}

// "did you mean" lines for the words of the command line that name no option or subcommand of the
// subcommands they follow (CLI11 only says they were not expected).
std::vector<std::string> Suggestions(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> out;
  CLI::App* cur = &app;
  std::vector<std::string> longs;  // the long options of every command on the path so far
  const auto add_options = [&](CLI::App* a) {
    for (CLI::Option* o : a->get_options())
      for (const std::string& n : o->get_lnames()) longs.push_back("--" + n);
  };
  add_options(cur);
  bool positional_seen = false;
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    if (w == "--") break;
    if (w.rfind("--", 0) == 0 && w.size() > 2) {
      const std::string name = w.substr(0, w.find('='));
      if (std::find(longs.begin(), longs.end(), name) != longs.end()) continue;
      if (const std::string c = Closest(name, longs); !c.empty()) out.push_back("'" + name + "': did you mean '" + c + "'?");
      continue;
    }
    if (w.empty() || w[0] == '-' || positional_seen) continue;
    std::vector<std::string> subs;
    CLI::App* next = nullptr;
    for (CLI::App* sub : cur->get_subcommands([](CLI::App*) { return true; })) {
      subs.push_back(sub->get_name());
      if (sub->check_name(w)) next = sub;
    }
    if (next != nullptr) {
      cur = next;
      add_options(cur);
    } else if (!subs.empty() && cur->get_require_subcommand_min() > 0) {  // a command that needs a subcommand
      if (const std::string c = Closest(w, subs); !c.empty()) out.push_back("'" + w + "': did you mean '" + c + "'?");
      positional_seen = true;
    }
  }
  return out;
}

}  // namespace

namespace {

// MPI's lifetime (common/ranks.h): finalized on every way out of main.
struct RanksGuard {
  RanksGuard(int* argc, char*** argv) { qmx::cli::StartRanks(argc, argv); }
  ~RanksGuard() { qmx::cli::EndRanks(); }
};

}  // namespace

int main(int argc, char** argv) {
  const RanksGuard ranks(&argc, &argv);
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
  qmx::cli::AddProveCommand(app);
  qmx::cli::AddGoldenCommand(app);
  qmx::cli::AddXvalCommand(app);
  RefuseNegativeUnsigned(&app);
  qmx::cli::SetCommandLine(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int status = app.exit(e);
    if (status != 0)
      for (const std::string& line : Suggestions(app, argc, argv)) std::fprintf(stderr, "qmx-sim: %s\n", line.c_str());
    return status;
  } catch (const qmx::Error& e) {
    std::fprintf(stderr, "qmx-sim: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qmx-sim: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
