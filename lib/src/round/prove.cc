// prove.cc: exhaustive conversion proofs (qmx/prove.h): per chunk of FP32 inputs, the fast path's codes
// (ConvertToCodes) and the table oracle's against the reference routine's, each mode in turn; mismatch counts
// and the first few mismatches, merged over parts in input order.
#include "qmx/prove.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "json_int.h"
#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "round/naive_round.h"

namespace qmx {
namespace {

constexpr uint64_t kRange = uint64_t{1} << 32;
constexpr size_t kChunk = size_t{1} << 20;  // inputs per work item: one OpenMP task each

// What one chunk of one mode found (merged in chunk order).
struct ChunkResult {
  uint64_t fast = 0, oracle = 0;
  std::vector<ProveMismatch> fast_first, oracle_first;
};

void Keep(std::vector<ProveMismatch>& v, const ProveMismatch& m) {
  if (v.size() < ProveMode::kMaxShown) v.push_back(m);
}

CastOptions OptionsOf(const ProveMode& m) {
  CastOptions o;
  o.rounding = m.rounding;
  o.saturation = m.saturation;
  return o;
}

ChunkResult CheckChunk(const Format& f, const ProveMode& m, const detail::NaiveRounder* oracle, uint64_t seed,
                       uint64_t first, size_t n, std::vector<uint32_t>& in, std::vector<uint8_t>& fast) {
  const CastOptions opt = OptionsOf(m);
  in.resize(n);
  fast.resize(n);
  for (size_t j = 0; j < n; ++j) in[j] = static_cast<uint32_t>(first + j);
  SrSource sr;
  sr.seed = seed;
  sr.first_index = first;  // input u draws RandomBitsForElement(seed, u)
  ConvertToCodes(DType::kF32, in.data(), n, f, opt, fast.data(), sr);
  const bool stochastic = IsStochastic(opt.rounding);
  ChunkResult r;
  for (size_t j = 0; j < n; ++j) {
    const uint32_t u = in[j];
    const uint32_t bits = stochastic ? RandomBitsForElement(seed, u) : 0;
    const uint32_t ref = static_cast<uint32_t>(Convert(fmt::kFP32, u, f, opt, bits).code);
    if (fast[j] != ref) {
      ++r.fast;
      Keep(r.fast_first, {u, ref, fast[j]});
    }
    if (oracle) {
      float x;
      std::memcpy(&x, &u, 4);
      const uint32_t want = static_cast<uint32_t>(oracle->Round(static_cast<double>(x), opt, bits));
      if (want != ref) {
        ++r.oracle;
        Keep(r.oracle_first, {u, ref, want});
      }
    }
  }
  return r;
}

void Append(std::vector<ProveMismatch>& to, const std::vector<ProveMismatch>& from) {
  for (const ProveMismatch& m : from) Keep(to, m);
}

nlohmann::json MismatchesJson(const std::vector<ProveMismatch>& v, const char* other) {
  nlohmann::json a = nlohmann::json::array();
  char buf[16];
  for (const ProveMismatch& m : v) {
    nlohmann::json e;
    std::snprintf(buf, sizeof buf, "0x%08x", m.input);
    e["input"] = buf;
    std::snprintf(buf, sizeof buf, "0x%02x", m.reference);
    e["reference"] = buf;
    std::snprintf(buf, sizeof buf, "0x%02x", m.other);
    e[other] = buf;
    a.push_back(e);
  }
  return a;
}

uint32_t HexField(const nlohmann::json& e, const char* key, const std::string& what) {
  if (!e.contains(key) || !e[key].is_string()) throw Error(what + ": a mismatch lacks its '" + key + "'");
  const std::string s = e[key].get<std::string>();
  if (s.size() < 3 || s.size() > 10 || s.compare(0, 2, "0x") != 0 ||
      s.find_first_not_of("0123456789abcdef", 2) != std::string::npos)
    throw Error(what + ": '" + s + "' is not a hex code");
  return static_cast<uint32_t>(std::stoul(s.substr(2), nullptr, 16));
}

std::vector<ProveMismatch> MismatchesFrom(const nlohmann::json& a, const char* other, const std::string& what) {
  if (!a.is_array()) throw Error(what + ": the mismatches are not a list");
  std::vector<ProveMismatch> v;
  for (const nlohmann::json& e : a) v.push_back({HexField(e, "input", what), HexField(e, "reference", what), HexField(e, other, what)});
  return v;
}

bool SameJob(const ProveJob& a, const ProveJob& b) {
  return a.formats == b.formats && a.roundings == b.roundings && a.saturations == b.saturations && a.first == b.first &&
         a.count == b.count && a.seed == b.seed;
}

}  // namespace

uint64_t ProveResult::Mismatches() const {
  uint64_t n = 0;
  for (const ProveMode& m : modes) n += m.fast_mismatches + m.oracle_mismatches;
  return n;
}

void ValidateProveJob(const ProveJob& job) {
  if (job.formats.empty()) throw Error("prove: no format (--to)");
  if (job.roundings.empty() || job.saturations.empty()) throw Error("prove: no rounding or no saturation mode");
  if (job.count == 0 || job.first >= kRange || job.count > kRange - job.first)
    throw Error("prove: the range " + std::to_string(job.first) + " + " + std::to_string(job.count) +
                " is empty or passes 2^32 FP32 inputs");
  for (const std::string& name : job.formats) {
    const Format f = ParseFormat(name);
    if (f.Bits() > 8 || !IsFastFormat(f))
      throw Error("prove: " + name + " is not a format of 8 bits or fewer that ConvertToCodes converts to");
  }
  if (ProveModes(job).empty()) throw Error("prove: none of the rounding and saturation modes is defined for these formats");
}

std::vector<ProveMode> ProveModes(const ProveJob& job) {
  std::vector<ProveMode> modes;
  for (const std::string& name : job.formats) {
    const Format f = ParseFormat(name);
    for (Rounding r : job.roundings)
      for (Saturation s : job.saturations) {
        ProveMode m;
        m.format = f.name;
        m.rounding = r;
        m.saturation = s;
        try {
          ValidateCastOptions(f, OptionsOf(m));
        } catch (const Error&) {
          continue;  // not defined for this format (nosat into e2m1, ...)
        }
        modes.push_back(m);
      }
  }
  return modes;
}

void ProvePart(uint64_t first, uint64_t count, uint64_t i, uint64_t n, uint64_t& part_first, uint64_t& part_count) {
  if (n == 0 || i >= n) throw Error("prove: part " + std::to_string(i) + " of " + std::to_string(n) + " does not exist");
  // count < 2^33 and n < 2^31 in practice; the products are taken in 128 bits all the same.
  const auto at = [&](uint64_t k) {
    return first + static_cast<uint64_t>((static_cast<unsigned __int128>(count) * k) / n);
  };
  part_first = at(i);
  part_count = at(i + 1) - part_first;
}

ProveResult Prove(const ProveJob& job, uint64_t first, uint64_t count,
                  const std::function<void(uint64_t, uint64_t)>& progress) {
  ValidateProveJob(job);
  if (first < job.first || count > job.first + job.count - first)
    throw Error("prove: the part's range lies outside the job's");
  ProveResult res;
  res.job = job;
  res.first = first;
  res.count = count;
  res.modes = ProveModes(job);
  const size_t chunks = static_cast<size_t>((count + kChunk - 1) / kChunk);
  const uint64_t total = count * res.modes.size();
  uint64_t done = 0;
  for (ProveMode& m : res.modes) {
    const Format f = ParseFormat(m.format);
    const CastOptions opt = OptionsOf(m);
    const bool use_oracle = opt.subnormals == Subnormals::kKeep;
    m.oracle = use_oracle;
    const detail::NaiveRounder oracle(f);
    std::vector<ChunkResult> parts(chunks);
#pragma omp parallel
    {
      std::vector<uint32_t> in;
      std::vector<uint8_t> fast;
#pragma omp for schedule(dynamic, 1)
      for (long c = 0; c < static_cast<long>(chunks); ++c) {
        const uint64_t c0 = first + static_cast<uint64_t>(c) * kChunk;
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, first + count - c0));
        parts[static_cast<size_t>(c)] = CheckChunk(f, m, use_oracle ? &oracle : nullptr, job.seed, c0, n, in, fast);
      }
    }
    for (const ChunkResult& p : parts) {
      m.fast_mismatches += p.fast;
      m.oracle_mismatches += p.oracle;
      Append(m.fast_first, p.fast_first);
      Append(m.oracle_first, p.oracle_first);
    }
    m.inputs = count;
    done += count;
    if (progress) progress(done, total);
  }
  return res;
}

ProveResult MergeProofs(const std::vector<ProveResult>& parts, bool whole) {
  if (parts.empty()) throw Error("prove: nothing to merge");
  ProveResult out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const ProveResult& p = parts[i];
    if (!SameJob(p.job, out.job) || p.modes.size() != out.modes.size())
      throw Error("prove: part " + std::to_string(i) + " belongs to another job (formats, modes, range or seed differ)");
    if (p.first != out.first + out.count)
      throw Error("prove: part " + std::to_string(i) + " starts at input " + std::to_string(p.first) + ", not at " +
                  std::to_string(out.first + out.count) + " where the parts before it end");
    for (size_t k = 0; k < p.modes.size(); ++k) {
      ProveMode& m = out.modes[k];
      const ProveMode& q = p.modes[k];
      if (q.format != m.format || q.rounding != m.rounding || q.saturation != m.saturation)
        throw Error("prove: part " + std::to_string(i) + "'s modes differ from the first part's");
      m.inputs += q.inputs;
      m.fast_mismatches += q.fast_mismatches;
      m.oracle_mismatches += q.oracle_mismatches;
      Append(m.fast_first, q.fast_first);
      Append(m.oracle_first, q.oracle_first);
    }
    out.count += p.count;
  }
  if (whole && (out.first != out.job.first || out.count != out.job.count))
    throw Error("prove: the parts cover inputs " + std::to_string(out.first) + " + " + std::to_string(out.count) +
                ", not the job's " + std::to_string(out.job.first) + " + " + std::to_string(out.job.count));
  return out;
}

std::string ProveToJson(const ProveResult& r) {
  nlohmann::ordered_json j;
  nlohmann::ordered_json job;
  job["formats"] = r.job.formats;
  std::vector<std::string> rs, ss;
  for (Rounding x : r.job.roundings) rs.push_back(RoundingName(x));
  for (Saturation x : r.job.saturations) ss.push_back(SaturationName(x));
  job["roundings"] = rs;
  job["saturations"] = ss;
  job["first"] = r.job.first;
  job["count"] = r.job.count;
  job["seed"] = r.job.seed;
  j["job"] = job;
  j["first"] = r.first;
  j["count"] = r.count;
  j["mismatches"] = r.Mismatches();
  nlohmann::ordered_json modes = nlohmann::ordered_json::array();
  for (const ProveMode& m : r.modes) {
    nlohmann::ordered_json e;
    e["format"] = m.format;
    e["rounding"] = RoundingName(m.rounding);
    e["saturation"] = SaturationName(m.saturation);
    e["inputs"] = m.inputs;
    e["fast_mismatches"] = m.fast_mismatches;
    e["fast_first"] = MismatchesJson(m.fast_first, "fast");
    e["oracle"] = m.oracle;
    e["oracle_mismatches"] = m.oracle_mismatches;
    e["oracle_first"] = MismatchesJson(m.oracle_first, "oracle");
    modes.push_back(e);
  }
  j["modes"] = modes;
  return j.dump(1) + "\n";
}

ProveResult ProveFromJson(const std::string& text) {
  const std::string what = "prove result";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": not JSON (" + e.what() + ")");
  }
  try {
    ProveResult r;
    const nlohmann::json& job = j.at("job");
    r.job.formats = job.at("formats").get<std::vector<std::string>>();
    r.job.roundings.clear();
    r.job.saturations.clear();
    for (const std::string& s : job.at("roundings").get<std::vector<std::string>>()) r.job.roundings.push_back(ParseRounding(s));
    for (const std::string& s : job.at("saturations").get<std::vector<std::string>>())
      r.job.saturations.push_back(ParseSaturation(s));
    r.job.first = detail::JsonInteger<uint64_t>(job.at("first"), what + " job.first");
    r.job.count = detail::JsonInteger<uint64_t>(job.at("count"), what + " job.count");
    r.job.seed = detail::JsonInteger<uint64_t>(job.at("seed"), what + " job.seed");
    ValidateProveJob(r.job);
    r.first = detail::JsonInteger<uint64_t>(j.at("first"), what + " first");
    r.count = detail::JsonInteger<uint64_t>(j.at("count"), what + " count");
    if (r.first < r.job.first || r.count > r.job.first + r.job.count - r.first)
      throw Error(what + ": its range lies outside its job's");
    const std::vector<ProveMode> expect = ProveModes(r.job);
    const nlohmann::json& modes = j.at("modes");
    if (!modes.is_array() || modes.size() != expect.size()) throw Error(what + ": its modes are not its job's");
    for (size_t i = 0; i < expect.size(); ++i) {
      const nlohmann::json& e = modes[i];
      ProveMode m = expect[i];
      if (e.at("format").get<std::string>() != m.format || e.at("rounding").get<std::string>() != RoundingName(m.rounding) ||
          e.at("saturation").get<std::string>() != SaturationName(m.saturation))
        throw Error(what + ": mode " + std::to_string(i) + " is not its job's");
      m.inputs = detail::JsonInteger<uint64_t>(e.at("inputs"), what + " inputs");
      m.fast_mismatches = detail::JsonInteger<uint64_t>(e.at("fast_mismatches"), what + " fast_mismatches");
      m.oracle = e.at("oracle").get<bool>();
      m.oracle_mismatches = detail::JsonInteger<uint64_t>(e.at("oracle_mismatches"), what + " oracle_mismatches");
      m.fast_first = MismatchesFrom(e.at("fast_first"), "fast", what);
      m.oracle_first = MismatchesFrom(e.at("oracle_first"), "oracle", what);
      if (m.inputs != r.count) throw Error(what + ": mode " + std::to_string(i) + " counts another range");
      r.modes.push_back(m);
    }
    if (detail::JsonInteger<uint64_t>(j.at("mismatches"), what + " mismatches") != r.Mismatches())
      throw Error(what + ": its total of mismatches is not the sum of its modes'");
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": " + e.what());
  }
}

}  // namespace qmx
