// commands.h: registration of the qmx-sim subcommands (one cmd_<name>.cc each).
#pragma once

#include <CLI/CLI.hpp>

namespace qmx::cli {
void AddFormatsCommand(CLI::App& app);
void AddConvertCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);
void AddQuantizeCommand(CLI::App& app);
// qmx-sim merge of `golden verify --shard` records (texts in shard order): the one-process report; throws
// when a file failed.
void MergeGoldenVerify(const std::vector<std::string>& texts, const std::string& dir, bool quiet);
// qmx-sim merge of `quantize --shard` or `dequantize --shard` records (kind; texts in shard order): the
// checkpoint's index and --json.
void MergeQuantize(const std::string& kind, const std::vector<std::string>& texts, const std::string& dir,
                   const std::string& json, bool quiet);
void AddGemmCommand(CLI::App& app);
void AddScaledMmCommand(CLI::App& app);
void AddStudyCommand(CLI::App& app);
void AddGoldenCommand(CLI::App& app);
void AddXvalCommand(CLI::App& app);
void AddRecipeCommand(CLI::App& app);
void AddAuditCommand(CLI::App& app);
void AddDiffCommand(CLI::App& app);
void AddProveCommand(CLI::App& app);  // prove and merge
}  // namespace qmx::cli
