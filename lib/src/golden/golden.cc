// golden.cc: golden files and manifests: writing them (Generate), and replaying them against a backend
// (Verify). The operations live in golden_ops.cc, the case generators in golden_gen*.cc.
#include "qmx/golden.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "golden/golden_gen.h"
#include "golden/golden_internal.h"
#include "json_int.h"
#include "qmx/error.h"
#include "qmx/io.h"
#include "qmx/rng.h"
#include "qmx/sha256.h"
#include "qmx/version.h"

namespace qmx::golden {

bool HasKey(const HeaderKeys& keys, const std::string& name) {
  return std::any_of(keys.begin(), keys.end(), [&](const auto& kv) { return kv.first == name; });
}

const std::string& KeyValue(const HeaderKeys& keys, const std::string& name) {
  for (const auto& kv : keys)
    if (kv.first == name) return kv.second;
  throw Error("the golden header has no " + name + "=... key");
}

std::string Hex(uint64_t v, int digits) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(digits, '0');
  for (int i = digits - 1; i >= 0; --i, v >>= 4) s[i] = kDigits[v & 15];
  return s;
}

std::string JoinCodes(const uint8_t* codes, size_t count, int digits) {
  std::string s;
  for (size_t i = 0; i < count; ++i) s += Hex(codes[i], digits);
  return s;
}

namespace detail {

Header& Header::Set(const std::string& k, const std::string& v) {
  for (auto& kv : keys)
    if (kv.first == k) {
      kv.second = v;
      return *this;
    }
  keys.emplace_back(k, v);
  return *this;
}

bool Header::Has(const std::string& k) const { return HasKey(keys, k); }

const std::string& Header::Get(const std::string& k) const {
  if (!HasKey(keys, k)) throw Error("op=" + op + " needs the header key " + k + "=...");
  return KeyValue(keys, k);
}

std::string Header::Line() const {
  std::string s = "# op=" + op;
  for (const auto& kv : keys) s += " " + kv.first + "=" + kv.second;
  return s + " generator=" + generator;
}

Header Header::Parse(const std::string& line) {
  if (line.rfind("# op=", 0) != 0) throw Error("the header line must start with '# op=', not '" + line + "'");
  Header h;
  std::string rest = line.substr(2);
  const size_t g = rest.find(" generator=");
  if (g == std::string::npos) throw Error("the header line has no generator=...");
  h.generator = rest.substr(g + 11);
  rest = rest.substr(0, g);
  std::istringstream in(rest);
  std::string tok;
  while (in >> tok) {
    const size_t eq = tok.find('=');
    if (eq == std::string::npos || eq == 0) throw Error("header token '" + tok + "' is not key=value");
    const std::string k = tok.substr(0, eq), v = tok.substr(eq + 1);
    if (k == "op") h.op = v;
    else if (h.Has(k)) throw Error("header key " + k + " appears twice");
    else h.keys.emplace_back(k, v);
  }
  if (h.op.empty()) throw Error("the header line names no op");
  return h;
}

bool ParseHex(const std::string& s, int digits, uint64_t& v) {
  if (static_cast<int>(s.size()) != digits || digits > 16) return false;
  v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return true;
}

CaseRng::CaseRng(uint64_t seed, const std::string& stream) {
  // FNV-1a of the stream name, mixed with the seed: each file has its own stream.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : stream) h = (h ^ c) * 1099511628211ull;
  key_ = seed ^ h;
}

uint32_t CaseRng::Next() { return RandomBitsForElement(key_, counter_++); }

uint64_t CaseRng::Below(uint64_t n) {
  const uint64_t r = (uint64_t{Next()} << 32) | Next();
  return r % n;  // the bias (n / 2^64) is irrelevant for test-case selection
}

}  // namespace detail

using detail::Fields;
using detail::Header;

const char* BackendName(Backend b) { return b == Backend::kCpuRef ? "cpu-ref" : "cpu-simd"; }

Backend ParseBackend(const std::string& s) {
  if (s == "cpu-ref") return Backend::kCpuRef;
  if (s == "cpu-simd") return Backend::kCpuSimd;
  if (s == "cuda")
    throw Error("this qmx-sim has no CUDA backend (it is built by the CUDA backend issue's gpu/ code); use cpu-ref or cpu-simd");
  throw Error("unknown backend '" + s + "' (known: cpu-ref, cpu-simd)");
}

namespace {

std::string FileText(const Header& h, const detail::Op& op, const std::vector<Fields>& ins, const std::vector<Fields>& outs) {
  std::string s = std::string(detail::kMagic) + "\n" + h.Line() + "\n" + op.FieldsComment() + "\n";
  for (size_t i = 0; i < ins.size(); ++i) {
    std::string line;
    for (const auto& f : ins[i]) line += (line.empty() ? "" : " ") + f;
    for (const auto& f : outs[i]) line += " " + f;
    s += line + "\n";
  }
  return s;
}

// A file of the golden directory `dir`: `rel` resolved (symlinks followed) must stay inside the resolved
// directory and be a regular file, so a manifest cannot reach /etc/passwd through a symlinked folder, nor a
// FIFO or /dev/zero hang the replay.
std::string ReadWhole(const std::string& dir, const std::string& rel) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / rel).string();
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  if (ec) throw IoError("cannot open " + dir + ": " + ec.message());
  const fs::path real = fs::canonical(path, ec);
  if (ec) throw IoError("cannot open " + path + ": " + ec.message());
  const std::string r = real.string(), d = root.string();
  if (r.size() <= d.size() || r.compare(0, d.size(), d) != 0 || (d != "/" && r[d.size()] != '/'))
    throw IoError(path + " resolves to " + r + ", outside the golden directory " + d);
  const std::vector<uint8_t> bytes = ReadRegularFile(r);
  return std::string(bytes.begin(), bytes.end());
}

std::vector<std::string> SplitWords(const std::string& line) {
  std::vector<std::string> w;
  std::istringstream in(line);
  std::string t;
  while (in >> t) w.push_back(t);
  return w;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

namespace {

// The options' suites, resolved and sorted (Generate's order).
std::vector<std::string> ResolveSuites(const GenOptions& opt) {
  std::vector<std::string> suites;
  if (!opt.units.empty()) {
    detail::ParseUnits(opt.units);  // every entry checked before anything is written
    suites.push_back("unit");
    if (opt.suites == std::vector<std::string>{"all"}) return suites;
  }
  for (const auto& s : opt.suites) {
    if (s == "all") {
      for (const auto& info : Suites()) suites.push_back(info.name);
      continue;
    }
    if (std::none_of(Suites().begin(), Suites().end(), [&](const SuiteInfo& i) { return i.name == s; })) {
      std::string known;
      for (const auto& i : Suites()) known += (known.empty() ? "" : ", ") + i.name;
      throw Error("unknown suite '" + s + "' (known: " + known + ", all)");
    }
    suites.push_back(s);
  }
  std::sort(suites.begin(), suites.end());
  suites.erase(std::unique(suites.begin(), suites.end()), suites.end());
  return suites;
}

nlohmann::ordered_json EntryJson(const ManifestEntry& e) {
  return {{"path", e.path}, {"suite", e.suite}, {"op", e.op}, {"header", e.header}, {"cases", e.cases}, {"sha256", e.sha256}};
}

}  // namespace

std::vector<ManifestEntry> Generate(const GenOptions& opt, const std::string& dir,
                                    const std::function<void(const ManifestEntry&)>& progress) {
  if (opt.level != 1 && opt.level != 2) throw Error("--level must be 1 or 2, not " + std::to_string(opt.level));
  if (opt.parts == 0 || opt.part >= opt.parts)
    throw Error("golden gen: part " + std::to_string(opt.part) + " of " + std::to_string(opt.parts) + " does not exist");
  const std::vector<std::string> suites = ResolveSuites(opt);
  std::filesystem::create_directories(dir);
  std::vector<ManifestEntry> entries;
  uint64_t index = 0;
  for (const auto& suite : suites) {
    std::filesystem::create_directories(std::filesystem::path(dir) / suite);
    const auto write = [&](detail::PlannedFile&& f) {
      const uint64_t k = index++;
      if (k % opt.parts != opt.part) return;  // another part's file
      f.header.generator = "qmx-sim " QMX_VERSION;
      const auto op = detail::MakeOp(f.header);
      for (size_t i = 0; i < f.inputs.size(); ++i) {
        if (f.inputs[i].size() != op->InputFields())
          throw Error("internal: " + f.path + " case " + std::to_string(i) + " has the wrong field count");
        if (std::string e = op->CheckInputs(f.inputs[i]); !e.empty()) throw Error("internal: " + f.path + ": " + e);
      }
      std::vector<Fields> outs;
      op->Run(Backend::kCpuRef, f.inputs, outs);
      for (size_t i = 0; i < f.observed.size(); ++i)
        if (outs.at(i)[0] != f.observed[i])
          throw Error(f.path + ": the model gives " + outs[i][0] + " where the hardware gave " + f.observed[i] +
                      " (" + f.header.Line() + ")");
      const std::string text = FileText(f.header, *op, f.inputs, outs);
      WriteFileAtomic((std::filesystem::path(dir) / f.path).string(), text);
      if (opt.memh) {
        std::string memh_path = (std::filesystem::path(dir) / f.path).string();
        memh_path = memh_path.substr(0, memh_path.size() - 4) + ".memh";  // NAME.txt -> NAME.memh
        WriteFileAtomic(memh_path, MemhImage(text));
      }
      ManifestEntry e{f.path, suite, f.header.op, f.header.Line(), f.inputs.size(), Sha256Hex(text), k};
      if (progress) progress(e);
      entries.push_back(std::move(e));
    };
    if (opt.min_per_class == 0) {
      detail::GenerateSuite(suite, opt, write);
      continue;
    }
    // --min-per-class: the suite's files planned whole, topped up (conversion files did it themselves),
    // then written in the same order.
    std::vector<detail::PlannedFile> planned;
    detail::GenerateSuite(suite, opt, [&](detail::PlannedFile&& f) { planned.push_back(std::move(f)); });
    detail::TopUpFiles(suite, opt, planned);
    for (detail::PlannedFile& f : planned) write(std::move(f));
  }
  if (opt.parts == 1) WriteManifest(opt, entries, dir);
  return entries;
}

std::string MemhImage(const std::string& golden_text) {
  std::istringstream in(golden_text);
  std::string line, header, fields;
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    if (line.rfind("# op=", 0) == 0) header = line.substr(2);
    else if (line.rfind("# fields:", 0) == 0) fields = line.substr(2);
    if (line.empty() || line[0] == '#') continue;
    rows.push_back(SplitWords(line));
  }
  if (header.empty()) throw Error("memh: the text has no '# op=' header line");
  // Hex digits per column. A field of dashes ("-": no C operand, no block scales) is absent: the image holds
  // x digits there ($readmemh's unknown), as wide as the column's present fields.
  const auto absent = [](const std::string& f) { return !f.empty() && f.find_first_not_of('-') == std::string::npos; };
  std::vector<size_t> widths;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (r == 0) widths.assign(rows[0].size(), 0);
    if (rows[r].size() != widths.size()) throw Error("memh: case " + std::to_string(r + 1) + " has another field count");
    for (size_t c = 0; c < widths.size(); ++c) {
      if (absent(rows[r][c])) continue;
      if (widths[c] == 0) widths[c] = rows[r][c].size();
      else if (rows[r][c].size() != widths[c])
        throw Error("memh: field " + std::to_string(c + 1) + " of case " + std::to_string(r + 1) +
                    " is not as wide as the column's other fields; the image needs fixed widths");
    }
  }
  for (size_t& w : widths) w = w == 0 ? 1 : w;  // a column absent in every case
  for (auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c)
      if (absent(r[c])) r[c] = std::string(widths[c], 'x');
  std::string out = "// qmx-golden memh v1: " + header + "\n// " + fields + "\n// layout:";
  size_t bits = 0;
  for (size_t w : widths) {
    out += " " + std::to_string(4 * w);
    bits += 4 * w;
  }
  out += " (bits per field, the first field in the top bits; " + std::to_string(bits) +
         "-bit words; x digits: a field the text marks absent with -)\n// cases: " +
         std::to_string(rows.size()) + "\n";
  for (const auto& r : rows) {
    for (const std::string& f : r) out += f;
    out += "\n";
  }
  return out;
}

std::vector<std::vector<std::string>> MemhFields(const std::string& memh_text) {
  std::istringstream in(memh_text);
  std::string line;
  std::vector<size_t> widths;
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    if (line.rfind("// layout:", 0) == 0) {
      std::istringstream ws(line.substr(10));
      std::string w;
      while (ws >> w && w[0] != '(') {
        if (w.find_first_not_of("0123456789") != std::string::npos || std::stoul(w) % 4 != 0 || std::stoul(w) == 0)
          throw Error("memh: layout field '" + w + "' is not a positive multiple of 4 bits");
        widths.push_back(std::stoul(w) / 4);
      }
      continue;
    }
    if (line.empty() || line.rfind("//", 0) == 0) continue;
    if (widths.empty()) throw Error("memh: a word before the layout line");
    size_t total = 0;
    for (size_t w : widths) total += w;
    if (line.size() != total) throw Error("memh: a word of " + std::to_string(line.size()) + " hex digits, not " + std::to_string(total));
    std::vector<std::string> f;
    size_t pos = 0;
    for (size_t w : widths) {
      const std::string field = line.substr(pos, w);
      f.push_back(field.find_first_not_of("xX") == std::string::npos ? "-" : field);  // absent in the text
      pos += w;
    }
    rows.push_back(std::move(f));
  }
  return rows;
}

void WriteManifest(const GenOptions& opt, std::vector<ManifestEntry> entries, const std::string& dir) {
  std::sort(entries.begin(), entries.end(), [](const ManifestEntry& a, const ManifestEntry& b) { return a.index < b.index; });
  for (size_t i = 0; i < entries.size(); ++i)
    if (entries[i].index != i)
      throw Error("golden manifest: file " + std::to_string(i) + " of the generation is " +
                  (entries[i].index < i ? "listed twice" : "missing (a part that did not run?)"));
  nlohmann::ordered_json j;
  j["format"] = "qmx-golden v1";
  j["generator"] = "qmx-sim " QMX_VERSION;
  j["level"] = opt.level;
  j["seed"] = opt.seed;
  j["exhaustive"] = opt.exhaustive;
  if (opt.min_per_class != 0) j["min_per_class"] = opt.min_per_class;
  if (!opt.units.empty()) j["units"] = opt.units;
  j["suites"] = ResolveSuites(opt);
  j["files"] = nlohmann::ordered_json::array();
  for (const auto& e : entries) j["files"].push_back(EntryJson(e));
  WriteFileAtomic((std::filesystem::path(dir) / "manifest.json").string(), j.dump(1) + "\n");
}

std::string PartToJson(const GenOptions& opt, const std::vector<ManifestEntry>& entries) {
  nlohmann::ordered_json j;
  j["format"] = "qmx-golden part v1";
  j["suites"] = opt.suites;
  j["level"] = opt.level;
  j["seed"] = opt.seed;
  j["exhaustive"] = opt.exhaustive;
  if (opt.min_per_class != 0) j["min_per_class"] = opt.min_per_class;
  if (!opt.units.empty()) j["units"] = opt.units;
  j["part"] = opt.part;
  j["parts"] = opt.parts;
  j["files"] = nlohmann::ordered_json::array();
  for (const auto& e : entries) {
    nlohmann::ordered_json f = EntryJson(e);
    f["index"] = e.index;
    j["files"].push_back(f);
  }
  return j.dump(1) + "\n";
}

std::vector<ManifestEntry> PartFromJson(const std::string& text, GenOptions& opt) {
  const std::string what = "golden part";
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.value("format", "") != "qmx-golden part v1") throw Error(what + ": format is not \"qmx-golden part v1\"");
    opt.suites = j.at("suites").get<std::vector<std::string>>();
    opt.level = qmx::detail::JsonInteger<int>(j.at("level"), what + " level");
    opt.seed = qmx::detail::JsonInteger<uint64_t>(j.at("seed"), what + " seed");
    opt.exhaustive = j.at("exhaustive").get<bool>();
    opt.min_per_class = j.contains("min_per_class") ? j.at("min_per_class").get<uint64_t>() : 0;
    opt.units = j.contains("units") ? j.at("units").get<std::vector<std::string>>() : std::vector<std::string>{};
    opt.part = qmx::detail::JsonInteger<uint64_t>(j.at("part"), what + " part");
    opt.parts = qmx::detail::JsonInteger<uint64_t>(j.at("parts"), what + " parts");
    std::vector<ManifestEntry> out;
    for (const auto& f : j.at("files"))
      out.push_back({f.at("path").get<std::string>(), f.at("suite").get<std::string>(), f.at("op").get<std::string>(),
                     f.at("header").get<std::string>(), qmx::detail::JsonInteger<uint64_t>(f.at("cases"), what + " cases"),
                     f.at("sha256").get<std::string>(), qmx::detail::JsonInteger<uint64_t>(f.at("index"), what + " index")});
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": " + e.what());
  }
}

namespace {

std::vector<ManifestEntry> ReadManifest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "manifest.json").string();
  if (!std::filesystem::exists(path)) throw Error(dir + " has no manifest.json: not a golden directory (make one with qmx-sim golden gen)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ReadWhole(dir, "manifest.json"));
    if (j.value("format", "") != "qmx-golden v1") throw Error(path + ": format is not \"qmx-golden v1\"");
    std::vector<ManifestEntry> out;
    for (const auto& f : j.at("files")) {
      ManifestEntry e{f.at("path").get<std::string>(), f.at("suite").get<std::string>(), f.at("op").get<std::string>(),
                      f.at("header").get<std::string>(), qmx::detail::JsonInteger<uint64_t>(f.at("cases"), path + ": cases"), f.at("sha256").get<std::string>()};
      if (e.path.empty() || e.path[0] == '/' || e.path.find("..") != std::string::npos)
        throw Error(path + ": file path '" + e.path + "' must stay inside the directory");
      out.push_back(std::move(e));
    }
    return out;
  } catch (const nlohmann::json::exception& ex) {
    throw Error(path + " is not a valid manifest: " + ex.what());
  }
}

// Replays one file; appends to r. `budget` is the directory's remaining mismatch allowance.
void VerifyFile(const std::string& dir, const ManifestEntry& e, const VerifyOptions& opt, uint64_t& budget, FileResult& r) {
  std::string text;
  try {
    text = ReadWhole(dir, e.path);
  } catch (const std::exception& ex) {
    r.errors.push_back(ex.what());
    return;
  }
  const std::string sha = Sha256Hex(text);
  if (sha != e.sha256)
    r.errors.push_back("SHA-256 " + sha + " differs from the manifest's " + e.sha256 +
                       ": the file was changed after generation (its cases are replayed below)");
  std::istringstream in(text);
  std::string line;
  uint64_t lineno = 0;
  std::unique_ptr<detail::Op> op;
  std::vector<Fields> ins, expected;
  std::vector<uint64_t> lines;
  while (std::getline(in, line)) {
    ++lineno;
    if (lineno == 1) {
      if (line != detail::kMagic) {
        r.errors.push_back("line 1 is not '" + std::string(detail::kMagic) + "'");
        return;
      }
      continue;
    }
    if (line.rfind("# op=", 0) == 0) {
      if (op) {
        r.errors.push_back("line " + std::to_string(lineno) + ": a second header line");
        return;
      }
      if (line != e.header) r.errors.push_back("line " + std::to_string(lineno) + ": the header differs from the manifest's");
      try {
        const Header h = Header::Parse(line);
        r.op = h.op;
        op = detail::MakeOp(h);
      } catch (const std::exception& ex) {
        r.errors.push_back("line " + std::to_string(lineno) + ": " + ex.what());
        return;
      }
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    if (!op) {
      r.errors.push_back("line " + std::to_string(lineno) + ": a case before the header line");
      return;
    }
    Fields w = SplitWords(line);
    if (w.size() != op->InputFields() + op->OutputFields()) {
      r.errors.push_back("line " + std::to_string(lineno) + ": " + std::to_string(w.size()) + " fields, expected " +
                         std::to_string(op->InputFields() + op->OutputFields()));
      continue;
    }
    Fields input(w.begin(), w.begin() + op->InputFields()), output(w.begin() + op->InputFields(), w.end());
    if (std::string err = op->CheckInputs(input); !err.empty()) {
      r.errors.push_back("line " + std::to_string(lineno) + ": " + err);
      continue;
    }
    ins.push_back(std::move(input));
    expected.push_back(std::move(output));
    lines.push_back(lineno);
  }
  if (!op) {
    r.errors.push_back("no '# op=' header line");
    return;
  }
  if (ins.size() != e.cases)
    r.errors.push_back(std::to_string(ins.size()) + " cases, the manifest says " + std::to_string(e.cases));
  std::vector<Fields> got;
  if (opt.external) {
    const Header h = Header::Parse(e.header);
    try {
      r.skipped = opt.external(h.op, h.keys, ins, got);
    } catch (const std::exception& ex) {
      r.errors.push_back(std::string("the external backend failed: ") + ex.what());
      return;
    }
    if (!r.skipped.empty()) return;
    if (got.size() != ins.size()) {
      r.errors.push_back("the external backend returned " + std::to_string(got.size()) + " results for " +
                         std::to_string(ins.size()) + " cases");
      return;
    }
  } else {
    op->Run(opt.backend, ins, got);
  }
  r.cases = ins.size();
  r.flags_checked = !opt.external && opt.backend == Backend::kCpuRef;
  for (size_t i = 0; i < ins.size(); ++i) {
    bool same = true;
    for (size_t f = 0; f < expected[i].size(); ++f) {
      const bool is_flags = f + 1 == expected[i].size();
      if (is_flags && !r.flags_checked) continue;
      if (Lower(expected[i][f]) != got[i][f]) same = false;
    }
    if (same) continue;
    ++r.mismatches;
    if (opt.max_errors != 0 && budget == 0) continue;
    std::string t;
    for (const auto& f : ins[i]) t += f + " ";
    t += "| expected";
    for (const auto& f : expected[i]) t += " " + f;
    t += " | got";
    for (const auto& f : got[i]) t += " " + f;
    r.first.push_back({lines[i], t});
    if (budget > 0) --budget;
  }
}

}  // namespace

std::vector<FileResult> Verify(const std::string& dir, const VerifyOptions& opt) {
  const std::vector<ManifestEntry> manifest = ReadManifest(dir);
  if (opt.parts == 0 || opt.part >= opt.parts) throw Error("golden verify: part " + std::to_string(opt.part) + " of " + std::to_string(opt.parts));
  std::vector<FileResult> results;
  uint64_t budget = opt.max_errors;
  // Every listed path (not only those replayed before max_errors stops the replay: the rest are not strays).
  std::set<std::string> listed;
  for (const auto& e : manifest) listed.insert(e.path);
  for (size_t k = 0; k < manifest.size(); ++k) {
    const ManifestEntry& e = manifest[k];
    if (!opt.only.empty() && e.path.find(opt.only) == std::string::npos) continue;
    if (k % opt.parts != opt.part) continue;
    // TestFloat's testfloat_ver: stop after N errors (a part replays on: MergeVerifyParts stops where one would).
    if (opt.max_errors != 0 && budget == 0 && opt.parts == 1) break;
    FileResult r;
    r.index = k;
    r.path = e.path;
    r.op = e.op;
    VerifyFile(dir, e, opt, budget, r);
    results.push_back(std::move(r));
  }
  if (opt.only.empty() && opt.part == 0) {
    for (const auto& p : std::filesystem::recursive_directory_iterator(dir)) {
      if (!p.is_regular_file() || p.path().extension() != ".txt") continue;
      const std::string rel = std::filesystem::relative(p.path(), dir).generic_string();
      if (listed.count(rel) || rel.find('/') == std::string::npos) continue;
      FileResult r;
      r.index = manifest.size();
      r.stray = true;
      r.path = rel;
      r.errors.push_back("not listed in manifest.json (a stray or renamed file)");
      results.push_back(std::move(r));
    }
  }
  return results;
}

std::vector<FileResult> MergeVerifyParts(std::vector<FileResult> all, uint64_t max_errors) {
  std::stable_sort(all.begin(), all.end(), [](const FileResult& a, const FileResult& b) { return a.index < b.index; });
  std::vector<FileResult> out;
  uint64_t budget = max_errors;  // once spent it stays spent: every file after is dropped, as Verify stops
  for (FileResult& r : all) {
    if (!r.stray) {
      if (max_errors != 0 && budget == 0) continue;
      if (max_errors != 0) {
        if (r.first.size() > budget) r.first.resize(budget);
        budget -= r.first.size();
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace qmx::golden
