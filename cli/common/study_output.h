// study_output.h: what every `qmx-sim study` writes: an aligned table on stdout, CSV and JSON files
// (atomic, with the command, version and seed), an SVG bar chart, a progress bar on stderr (terminals
// only), and Ctrl-C handling that stops the sweep before any file is written.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qmx::cli {

using nlohmann::ordered_json;

// A column of the printed table: the record key, its header and a printf format for numbers ("%s" prints
// strings and integers as they are).
struct TableColumn {
  std::string key, header, fmt;
};
// Prints records (JSON objects with the columns' keys) as an aligned table.
void PrintTable(const std::vector<TableColumn>& cols, const std::vector<ordered_json>& records);
// CSV with the keys of the first record as its header; numbers in shortest round-trip form.
std::string ToCsv(const std::vector<ordered_json>& records);
// The process's command line, for the JSON sidecars (main.cc records it).
void SetCommandLine(int argc, char** argv);
std::string CommandLine();
// The same without the given options and their values ("--shard 1/4" and "--shard=1/4" alike).
std::string CommandLineWithout(const std::vector<std::string>& options);

// {"tool", "version", "command", "seed", <extra>, "records": [...]}; command: the JSON's "command",
// CommandLine() unless given.
ordered_json StudyJson(const std::string& study, uint64_t seed, const std::vector<ordered_json>& records,
                       const std::string& command = CommandLine());

// A grouped horizontal bar chart: one group per category, one bar per series, a value per (category,
// series) (NaN: no bar). Returns the SVG text.
std::string BarChartSvg(const std::string& title, const std::string& axis_label,
                        const std::vector<std::string>& categories, const std::vector<std::string>& series,
                        const std::vector<std::vector<double>>& values);

// "[=====>    ] 12/40 label" on stderr, redrawn in place; silent when stderr is not a terminal or quiet.
class Progress {
 public:
  Progress(size_t total, bool quiet);
  ~Progress();
  void Step(const std::string& label);

 private:
  size_t total_, done_ = 0;
  bool on_;
};

// While alive, SIGINT and SIGTERM set a flag instead of killing the process; ThrowIfInterrupted() turns
// the flag into qmx::Error("interrupted ..."). Sweeps check it between steps and write files only at the
// end, so an interrupted study leaves no file behind (and every write is atomic anyway).
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
};
void ThrowIfInterrupted();

}  // namespace qmx::cli
