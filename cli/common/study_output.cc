// study_output.cc: tables, CSV/JSON, SVG charts, progress and interrupts for `qmx-sim study`.
#include "common/study_output.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>

#include "qmx/error.h"
#include "qmx/version.h"

namespace qmx::cli {
namespace {

std::string g_command_line;
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void OnInterrupt(int) { g_interrupted = 1; }

std::string Cell(const ordered_json& v, const std::string& fmt) {
  char buf[64];
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  const double d = v.get<double>();
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (std::isnan(d)) return "nan";
  std::snprintf(buf, sizeof buf, fmt.c_str(), d);
  return buf;
}

std::string CsvField(const ordered_json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    if (std::isnan(d)) return "nan";
  }
  return v.dump();
}

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

}  // namespace

void PrintTable(const std::vector<TableColumn>& cols, const std::vector<ordered_json>& records) {
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> width(cols.size());
  for (size_t c = 0; c < cols.size(); ++c) width[c] = cols[c].header.size();
  for (const ordered_json& r : records) {
    std::vector<std::string> row;
    for (size_t c = 0; c < cols.size(); ++c) {
      row.push_back(Cell(r.contains(cols[c].key) ? r.at(cols[c].key) : ordered_json(), cols[c].fmt));
      width[c] = std::max(width[c], row.back().size());
    }
    cells.push_back(std::move(row));
  }
  const auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (size_t c = 0; c < cols.size(); ++c) {
      const bool left = c == 0 || cols[c].fmt == "%s";
      std::string f = row[c];
      const std::string pad(width[c] - f.size(), ' ');
      s += (c ? "  " : "") + (left ? f + pad : pad + f);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    std::printf("%s\n", s.c_str());
  };
  std::vector<std::string> head;
  for (const TableColumn& c : cols) head.push_back(c.header);
  line(head);
  for (const auto& row : cells) line(row);
}

std::string ToCsv(const std::vector<ordered_json>& records) {
  if (records.empty()) return "";
  std::string out;
  std::vector<std::string> keys;
  for (auto it = records[0].begin(); it != records[0].end(); ++it) keys.push_back(it.key());
  for (size_t k = 0; k < keys.size(); ++k) out += (k ? "," : "") + keys[k];
  out += "\n";
  for (const ordered_json& r : records) {
    for (size_t k = 0; k < keys.size(); ++k) out += (k ? "," : "") + CsvField(r.contains(keys[k]) ? r.at(keys[k]) : ordered_json());
    out += "\n";
  }
  return out;
}

ordered_json StudyJson(const std::string& study, uint64_t seed, const std::vector<ordered_json>& records,
                       const std::string& command) {
  ordered_json j;
  j["tool"] = "qmx-sim";
  j["version"] = QMX_VERSION;
  j["study"] = study;
  j["command"] = command;
  j["seed"] = seed;
  j["records"] = records;
  return j;
}

namespace {
std::vector<std::string> g_args;  // argv, argv[0] as "qmx-sim"

std::string JoinArgs(const std::vector<std::string>& args) {
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a.find_first_of(" \t'\"") != std::string::npos) a = "'" + a + "'";
    out += (i ? " " : "") + a;
  }
  return out;
}
}  // namespace

void SetCommandLine(int argc, char** argv) {
  g_args.clear();
  for (int i = 0; i < argc; ++i) g_args.push_back(i == 0 ? "qmx-sim" : argv[i]);
  g_command_line = JoinArgs(g_args);
}
std::string CommandLine() { return g_command_line; }

std::string CommandLineWithout(const std::vector<std::string>& options) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < g_args.size(); ++i) {
    bool drop = false;
    for (const std::string& o : options) {
      if (g_args[i] == o) {
        drop = true;
        ++i;  // and its value
        break;
      }
      if (g_args[i].rfind(o + "=", 0) == 0) drop = true;
    }
    if (!drop) kept.push_back(g_args[i]);
  }
  return JoinArgs(kept);
}

std::string BarChartSvg(const std::string& title, const std::string& axis_label,
                        const std::vector<std::string>& categories, const std::vector<std::string>& series,
                        const std::vector<std::vector<double>>& values) {
  static const char* kColors[] = {"#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"};
  const int label_w = 230, plot_w = 520, bar_h = 12, gap = 10, top = 50, legend_h = 18 * static_cast<int>(series.size());
  const int group_h = bar_h * static_cast<int>(series.size()) + gap;
  const int plot_h = group_h * static_cast<int>(categories.size());
  const int width = label_w + plot_w + 80, height = top + plot_h + 40 + legend_h + 20;
  double vmax = 0;
  for (const auto& row : values)
    for (double v : row)
      if (std::isfinite(v)) vmax = std::max(vmax, v);
  if (vmax <= 0) vmax = 1;
  // A round upper end for the axis.
  const double step = std::pow(10.0, std::floor(std::log10(vmax / 5)));
  double nice = step;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (vmax / (m * step) <= 6) { nice = m * step; break; }
  const double axis_max = std::ceil(vmax / nice) * nice;
  char buf[512];
  std::string s;
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
                "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                width, height);
  s += buf;
  std::snprintf(buf, sizeof buf, "<text x=\"%d\" y=\"24\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", 10,
                Escape(title).c_str());
  s += buf;
  for (double t = 0; t <= axis_max + 1e-9 * axis_max; t += nice) {
    const double x = label_w + plot_w * t / axis_max;
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n"
                  "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
                  x, top, x, top + plot_h, x, top + plot_h + 15, t);
    s += buf;
  }
  std::snprintf(buf, sizeof buf, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", label_w + plot_w / 2,
                top + plot_h + 32, Escape(axis_label).c_str());
  s += buf;
  for (size_t c = 0; c < categories.size(); ++c) {
    const int y0 = top + static_cast<int>(c) * group_h;
    std::snprintf(buf, sizeof buf, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", label_w - 8,
                  y0 + (group_h - gap) / 2 + 4, Escape(categories[c]).c_str());
    s += buf;
    for (size_t k = 0; k < series.size(); ++k) {
      const double v = values[c][k];
      if (!std::isfinite(v)) continue;
      const double w = plot_w * std::max(0.0, v) / axis_max;
      std::snprintf(buf, sizeof buf,
                    "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>"
                    "<text x=\"%.1f\" y=\"%d\" font-size=\"10\">%.1f</text>\n",
                    label_w, y0 + static_cast<int>(k) * bar_h, w, bar_h - 1, kColors[k % 8], label_w + w + 3,
                    y0 + static_cast<int>(k) * bar_h + bar_h - 2, v);
      s += buf;
    }
  }
  for (size_t k = 0; k < series.size(); ++k) {
    const int y = top + plot_h + 50 + 18 * static_cast<int>(k);
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
                  label_w, y - 10, kColors[k % 8], label_w + 18, y, Escape(series[k]).c_str());
    s += buf;
  }
  s += "</svg>\n";
  return s;
}

Progress::Progress(size_t total, bool quiet) : total_(total), on_(!quiet && isatty(STDERR_FILENO) && total > 1) {}
Progress::~Progress() {
  if (on_) std::fprintf(stderr, "\r\033[K");
}
void Progress::Step(const std::string& label) {
  ++done_;
  if (!on_) return;
  const int w = 30, fill = static_cast<int>(w * done_ / std::max<size_t>(total_, 1));
  std::string bar(static_cast<size_t>(fill), '=');
  if (fill < w) bar += '>';
  bar.resize(w, ' ');
  std::fprintf(stderr, "\r\033[K[%s] %zu/%zu %s", bar.c_str(), done_, total_, label.substr(0, 60).c_str());
  std::fflush(stderr);
}

InterruptGuard::InterruptGuard() {
  g_interrupted = 0;
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
}
InterruptGuard::~InterruptGuard() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}
void ThrowIfInterrupted() {
  if (g_interrupted) throw Error("interrupted: the study stopped before writing any file");
}

}  // namespace qmx::cli
