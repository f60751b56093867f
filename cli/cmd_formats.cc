// cmd_formats.cc: `qmx-sim formats` lists the registry with derived limits; `formats show F` prints
// the value of every code of a format of 8 bits or fewer.
#include <algorithm>
#include <cstdio>
#include <string>

#include "commands.h"
#include "qmx/error.h"
#include "qmx/format.h"

namespace qmx::cli {
namespace {

const char* InfText(const Format& f) { return f.HasInf() ? "yes" : "no"; }
std::string NanText(const Format& f) {
  if (!f.HasNan()) return "no";
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llX", static_cast<unsigned long long>(f.CanonicalNan()));
  return buf;
}

void PrintRow(const Format& f, const char* comment, int width) {
  const FormatLimits l = Limits(f);
  std::printf("%-*s %4d %4d %4d %5d  %-15.9g %-15.9g %-15.9g %7.2f  %-4s %-10s %s\n", width, f.name, f.Bits(),
              f.IsInt() ? 0 : f.exp_bits, f.man_bits, f.bias, l.max_finite, l.min_normal, l.min_subnormal,
              l.binades, InfText(f), NanText(f).c_str(), comment);
}

void ListFormats() {
  int width = 7;  // the name column fits the longest registry name (e4m3b11fnuz)
  for (const auto& e : Registry()) width = std::max(width, static_cast<int>(std::string(e.format.name).size()));
  std::printf("%-*s %4s %4s %4s %5s  %-15s %-15s %-15s %7s  %-4s %-10s %s\n", width, "format", "bits", "exp", "man", "bias",
              "max", "min_normal", "min_subnorm", "binades", "inf", "nan", "spec");
  for (const auto& e : Registry()) PrintRow(e.format, e.comment, width);
}

void ShowFormat(const std::string& name) {
  const Format f = ParseFormat(name);
  if (f.Bits() > 8) throw Error("'formats show' prints value tables of formats of 8 bits or fewer; " + name + " has " +
                                std::to_string(f.Bits()));
  PrintRow(f, "", std::max(7, static_cast<int>(std::string(f.name).size())));
  std::printf("\n%-6s %-10s %-9s %-24s %s\n", "code", "binary", "class", "value", "hex-float");
  static const char* kClass[] = {"zero", "subnormal", "normal", "inf", "nan"};
  for (uint64_t c : AllCodes(f)) {
    std::string bin;
    for (int b = f.Bits() - 1; b >= 0; --b) bin += ((c >> b) & 1) ? '1' : '0';
    const double v = DecodeToDouble(f, c);
    std::printf("0x%02llX   %-10s %-9s %-24.17g %a\n", static_cast<unsigned long long>(c), bin.c_str(),
                kClass[static_cast<int>(ClassifyCode(f, c))], v, v);
  }
}

}  // namespace

void AddFormatsCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("formats", "List the format registry, or show every code of one format");
  auto* show = cmd->add_subcommand("show", "Print the value of every code of a format of 8 bits or fewer");
  static std::string name_storage;
  std::string* name = &name_storage;
  show->add_option("format", *name, "Registry name or description (e4m3, e3m4, e4m3:bias=8, binary8p3se)")
      ->required();
  show->callback([name] { ShowFormat(*name); });
  cmd->callback([cmd] {
    if (cmd->get_subcommands().empty()) ListFormats();
  });
}

}  // namespace qmx::cli
