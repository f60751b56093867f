// golden_gen_gemm.cc: the generator of the gemm suite: block dot products (codes, block scales, C) under
// each MMA-Sim accumulation model, adversarial cases first, and the Hopper outputs observed on hardware.
#include "golden/golden_gen.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/gemm.h"
#include "qmx/io.h"
#include "qmx/round.h"

namespace qmx::golden::detail {
namespace {

// ------------------------------------------------------------------ gemm
struct DotConfig {
  std::string name, a, b, scale;
  size_t k, block;
  std::vector<std::string> models;
};

std::string CodesHex(const std::vector<uint8_t>& c) {
  std::string s;
  for (uint8_t v : c) s += Hex(v, 2);
  return s;
}

// The word of the block scale 1.0 in a scale format (UE8M0 127, E4M3 0x38, FP32 bits, another format's code).
uint32_t OneScaleWord(const BlockScaleFormat& f) {
  if (f.kind == ScaleFormat::kUe8m0) return 127;
  if (f.kind == ScaleFormat::kE4m3) return 0x38;
  if (f.kind == ScaleFormat::kFp32) return F32Bits(1.0f);
  uint64_t c = 0;
  if (!ExactCodeOf(f.code, 1.0, &c)) throw Error("block-scale format '" + f.name + "' does not hold 1.0");
  return static_cast<uint32_t>(c);
}

// Random dot-product cases for a configuration, adversarial ones first.
std::vector<Fields> DotCases(const DotConfig& cfg, int level, CaseRng& rng) {
  const Format& fa = GetFormat(cfg.a);
  const Format& fb = GetFormat(cfg.b);
  const size_t nscales = cfg.scale == "none" ? 0 : cfg.k / cfg.block;
  // Scales held as codes of a narrow format (NVFP4's E4M3, read as UE4M3, or any other format of 8 bits or
  // fewer): drawn among the positive finite codes 1 .. smax.
  const BlockScaleFormat bsf = ParseBlockScaleFormat(nscales ? cfg.scale : "fp32");
  const bool coded = nscales && (bsf.kind == ScaleFormat::kE4m3 || bsf.kind == ScaleFormat::kCode);
  const Format scode = bsf.kind == ScaleFormat::kE4m3 ? fmt::kE4M3 : bsf.code;
  const uint32_t smax = coded ? static_cast<uint32_t>(scode.MaxFiniteCode()) : 0;
  auto finite_code = [&](const Format& f) {
    for (;;) {
      const uint8_t c = static_cast<uint8_t>(rng.Below(f.CodeMask() + 1));
      if (std::isfinite(DecodeToFloat(f, c))) return c;
    }
  };
  auto scales = [&](int lo, int hi) -> std::string {
    if (nscales == 0) return "-";
    std::string s;
    for (size_t i = 0; i < nscales; ++i) {
      if (cfg.scale == "ue8m0") s += Hex(127 + lo + rng.Below(hi - lo + 1), 2);
      else if (coded) s += Hex(1 + rng.Below(smax), 2);
      else s += Hex(F32Bits(std::ldexp(1.0f + static_cast<float>(rng.Below(1 << 23)) / 8388608.0f, lo + static_cast<int>(rng.Below(hi - lo + 1)))), 8);
    }
    return s;
  };
  auto c_field = [&](float c) { return Hex(F32Bits(c), 8); };
  std::vector<Fields> out;
  const int n_random = level >= 2 ? 2000 : 16;
  // Cancellation: pairs of equal products with opposite signs plus one small term.
  {
    std::vector<uint8_t> a(cfg.k), b(cfg.k);
    for (size_t i = 0; i + 1 < cfg.k; i += 2) {
      a[i] = a[i + 1] = finite_code(fa);
      b[i] = finite_code(fb);
      b[i + 1] = static_cast<uint8_t>(b[i] ^ (uint8_t{1} << (fb.Bits() - 1)));
    }
    a[cfg.k - 1] = 1;
    b[cfg.k - 1] = 1;
    const std::string s = scales(0, 0);
    out.push_back({CodesHex(a), CodesHex(b), s, s, "-"});
    out.push_back({CodesHex(a), CodesHex(b), s, s, c_field(1.0f)});
  }
  // All zeros with C = -0 and without C.
  {
    const std::string z(2 * cfg.k, '0');
    const std::string s = scales(0, 0);
    out.push_back({z, z, s, s, c_field(-0.0f)});
    out.push_back({z, z, s, s, "-"});
  }
  // Largest codes under large scales: overflow to Inf where the model allows.
  {
    std::vector<uint8_t> a(cfg.k, static_cast<uint8_t>(fa.MaxFiniteCode())), b(cfg.k, static_cast<uint8_t>(fb.MaxFiniteCode()));
    std::string sa = nscales ? "" : "-";
    for (size_t i = 0; i < nscales; ++i)
      sa += cfg.scale == "ue8m0" ? Hex(254, 2) : coded ? Hex(smax, 2) : Hex(F32Bits(1e30f), 8);
    out.push_back({CodesHex(a), CodesHex(b), sa, sa, "-"});
  }
  // A NaN element, where the format has one; a NaN scale where the scale format has one.
  if (fa.HasNan()) {
    std::vector<uint8_t> a(cfg.k), b(cfg.k);
    for (size_t i = 0; i < cfg.k; ++i) a[i] = finite_code(fa), b[i] = finite_code(fb);
    a[rng.Below(cfg.k)] = static_cast<uint8_t>(fa.CanonicalNan());
    const std::string s = scales(-2, 2);
    out.push_back({CodesHex(a), CodesHex(b), s, s, c_field(0.5f)});
  }
  if (cfg.scale == "ue8m0") {
    std::vector<uint8_t> a(cfg.k), b(cfg.k);
    for (size_t i = 0; i < cfg.k; ++i) a[i] = finite_code(fa), b[i] = finite_code(fb);
    std::string sa = scales(-2, 2), sb = scales(-2, 2);
    sa.replace(0, 2, "ff");
    out.push_back({CodesHex(a), CodesHex(b), sa, sb, "-"});
  }
  // A large C against a small sum, and the reverse.
  for (float c : {1e20f, -3.0e-30f}) {
    std::vector<uint8_t> a(cfg.k), b(cfg.k);
    for (size_t i = 0; i < cfg.k; ++i) a[i] = finite_code(fa), b[i] = finite_code(fb);
    const std::string s = scales(-4, 4);
    out.push_back({CodesHex(a), CodesHex(b), s, scales(-4, 4), c_field(c)});
  }
  for (int i = 0; i < n_random; ++i) {
    std::vector<uint8_t> a(cfg.k), b(cfg.k);
    for (size_t j = 0; j < cfg.k; ++j) a[j] = finite_code(fa), b[j] = finite_code(fb);
    const std::string c = rng.Below(4) == 0 ? "-" : c_field(RandomValue(rng, -10, 10));
    out.push_back({CodesHex(a), CodesHex(b), scales(-8, 8), scales(-8, 8), c});
  }
  // Cases for the coverage model's classes (golden_coverage_ops.cc), after the random ones so that those keep
  // their draws.
  // Exact cancellation with nothing left (D = 0 from nonzero products), a NaN and an infinite C.
  {
    std::vector<uint8_t> a(cfg.k), b(cfg.k);
    for (size_t i = 0; i + 1 < cfg.k; i += 2) {
      a[i] = a[i + 1] = finite_code(fa);
      b[i] = finite_code(fb);
      b[i + 1] = static_cast<uint8_t>(b[i] ^ (uint8_t{1} << (fb.Bits() - 1)));
    }
    if (cfg.k % 2) a[cfg.k - 1] = b[cfg.k - 1] = 0;
    const std::string s = scales(0, 0);
    out.push_back({CodesHex(a), CodesHex(b), s, s, "-"});
    for (size_t i = 0; i < cfg.k; ++i) a[i] = finite_code(fa), b[i] = finite_code(fb);
    out.push_back({CodesHex(a), CodesHex(b), s, s, c_field(INFINITY)});
    out.push_back({CodesHex(a), CodesHex(b), s, s, c_field(std::numeric_limits<float>::quiet_NaN())});
  }
  // The smallest codes under scales that put their product near 2^-140: a subnormal FP32 result, where the
  // scales reach (UE8M0, FP32).
  if (cfg.scale == "ue8m0" || cfg.scale == "fp32") {
    std::vector<uint8_t> a(cfg.k, 0), b(cfg.k, 0);
    a[0] = b[0] = 1;  // the smallest positive code of the registry's formats
    const int e = (-140 - std::ilogb(DecodeToDouble(fa, 1) * DecodeToDouble(fb, 1))) / 2;
    std::string sc;
    for (size_t i = 0; i < nscales; ++i) sc += cfg.scale == "ue8m0" ? Hex(127 + e, 2) : Hex(F32Bits(std::ldexp(1.0f, e)), 8);
    out.push_back({CodesHex(a), CodesHex(b), sc, sc, "-"});
  }
  // A zero and a NaN block scale, where the scale format has them (E4M3, FP32, most narrow formats; UE8M0's
  // NaN is above).
  std::vector<std::string> specials;
  if (cfg.scale == "fp32") specials = {Hex(0, 8), Hex(0x7FC00000u, 8)};
  if (coded && scode.HasZero()) specials.push_back("00");
  if (coded && scode.HasNan()) specials.push_back(Hex(scode.CanonicalNan(), 2));
  {
    for (const std::string& special : specials) {
      std::vector<uint8_t> a(cfg.k), b(cfg.k);
      for (size_t i = 0; i < cfg.k; ++i) a[i] = finite_code(fa), b[i] = finite_code(fb);
      std::string sa = scales(-2, 2);
      sa.replace(0, special.size(), special);
      out.push_back({CodesHex(a), CodesHex(b), sa, scales(-2, 2), "-"});
    }
  }
  // Two blocks of one step whose scales put the second's product d binades below the first's (d = 0 .. 40):
  // the alignment shifts that block scales open beyond the elements' own range (NVFP4, MXFP4 in steps of 64).
  if (nscales >= 2) {
    const uint8_t ta = static_cast<uint8_t>(fa.MaxFiniteCode()), tb = static_cast<uint8_t>(fb.MaxFiniteCode());
    std::vector<uint8_t> a(cfg.k, 0), b(cfg.k, 0);
    a[0] = a[cfg.block] = ta;
    b[0] = b[cfg.block] = tb;
    for (int d = 0; d <= 40; ++d) {
      // The scales of the two blocks: (1, 1) and (2^-ceil(d/2), 2^-floor(d/2)); E4M3 from 448 down, by search.
      std::string sa, sb;
      const auto put = [&](double va, double vb) {
        for (size_t i = 0; i < nscales; ++i) {
          const double x = i == 1 ? va : 1.0, y = i == 1 ? vb : 1.0;
          if (cfg.scale == "ue8m0") sa += Hex(127 + std::ilogb(x), 2), sb += Hex(127 + std::ilogb(y), 2);
          else sa += Hex(F32Bits(static_cast<float>(x)), 8), sb += Hex(F32Bits(static_cast<float>(y)), 8);
        }
      };
      b[cfg.block] = tb;
      if (coded) {
        // The largest scale (448 for E4M3) on both sides of block 0; in block 1 the first pair of scales (and
        // B's largest or smallest positive code) that puts the product d binades down.
        const double top = DecodeToDouble(scode, smax);
        const double p0 = DecodeToDouble(fa, ta) * DecodeToDouble(fb, tb) * top * top;
        bool found = false;
        for (uint8_t code : {tb, uint8_t{1}})
          for (uint32_t x = 1; x <= smax && !found; ++x)
            for (uint32_t y = x; y <= smax && !found; ++y) {
              const double p1 = DecodeToDouble(fa, ta) * DecodeToDouble(fb, code) * DecodeToDouble(scode, x) *
                                DecodeToDouble(scode, y);
              if (found || std::ilogb(p0) - std::ilogb(p1) != d) continue;
              for (size_t i = 0; i < nscales; ++i) sa += Hex(i == 1 ? x : smax, 2), sb += Hex(i == 1 ? y : smax, 2);
              b[cfg.block] = code;
              found = true;
            }
        if (!found) continue;
      } else {
        put(std::ldexp(1.0, -(d + 1) / 2), std::ldexp(1.0, -d / 2));
      }
      out.push_back({CodesHex(a), CodesHex(b), sa, sb, "-"});
    }
  }
  return out;
}

// Element i of a float32 array, as its bit pattern.
uint32_t F32At(const NpyArray& a, size_t i) {
  uint32_t v;
  std::memcpy(&v, &a.data[i * 4], 4);
  return v;
}

void GenHopperObserved(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  namespace fs = std::filesystem;
  const fs::path dir = opt.hopper_dir;
  const fs::path cases_path = dir / "cases.json";
  std::string text;
  try {
    const std::vector<uint8_t> bytes = ReadRegularFile(cases_path.string());
    text.assign(bytes.begin(), bytes.end());
  } catch (const IoError& e) {
    throw Error(std::string(e.what()) + " (the --hopper-dir of hardware-observed GEMM outputs)");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& ex) {
    throw Error(cases_path.string() + " is not valid JSON: " + ex.what());
  }
  const std::string device = j.value("device", "unknown device");
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name");
    const size_t m = c.at("m"), k = c.at("k"), n = c.at("n");
    const NpyArray a = ReadNpy((dir / (name + "_a.npy")).string()), b = ReadNpy((dir / (name + "_b.npy")).string());
    if (a.count() != m * k || b.count() != k * n) throw Error(name + ": A or B does not have the shape cases.json gives");
    const bool blockwise = c.contains("a_block");
    NpyArray sa, sb;
    if (blockwise) {
      sa = ReadNpy((dir / (name + "_sa.npy")).string());
      sb = ReadNpy((dir / (name + "_sb.npy")).string());
      if (sa.dtype != DType::kF32 || sb.dtype != DType::kF32 || sa.shape.size() != 2 || sb.shape.size() != 2 ||
          sa.count() != m * (k / 128) || sb.shape[0] != k / 128 || sb.shape[1] == 0 || n % sb.shape[1] != 0)
        throw Error(name + ": the block scales are not float32 (M x K/128) and (K/128 x N/per) arrays");
    }
    std::vector<std::pair<std::string, std::string>> outputs;  // (file suffix, model)
    if (c.contains("models")) {
      for (auto it = c["models"].begin(); it != c["models"].end(); ++it) outputs.emplace_back(it.key(), it.value());
    } else {
      for (auto it = j["models"].begin(); it != j["models"].end(); ++it) outputs.emplace_back(it.key(), it.value());
    }
    for (const auto& [key, model] : outputs) {
      const NpyArray d = ReadNpy((dir / (name + "_" + key + ".npy")).string());
      if (d.count() != m * n || d.dtype != DType::kF32) throw Error(name + "_" + key + ".npy is not an M x N float32 array");
      const std::string mode = key == "d_fast" ? "fast" : "slow";
      CaseRng rng(opt.seed, "gemm/hopper_" + name + "_" + mode);
      PlannedFile f;
      f.path = "gemm/hopper_" + name + "_" + mode + ".txt";
      f.header.op = "dot";
      f.header.Set("a", c.at("a_format").get<std::string>()).Set("b", c.at("b_format").get<std::string>());
      f.header.Set("k", std::to_string(k)).Set("scale", blockwise ? "fp32" : "none");
      if (blockwise) f.header.Set("block", "128");
      if (c.contains("a_tensor_scale")) {
        f.header.Set("tensor-a", Hex(F32Bits(c["a_tensor_scale"].get<float>()), 8));
        f.header.Set("tensor-b", Hex(F32Bits(c["b_tensor_scale"].get<float>()), 8));
      }
      f.header.Set("model", model).Set("observed", "hardware");
      std::string dev = device;
      for (char& ch : dev)
        if (ch == ' ') ch = '_';
      f.header.Set("device", dev);
      std::vector<size_t> picks;
      if (opt.level >= 2) {
        for (size_t i = 0; i < m * n; ++i) picks.push_back(i);
      } else {
        std::set<size_t> chosen;
        while (chosen.size() < std::min<size_t>(8, m * n)) chosen.insert(rng.Below(m * n));
        picks.assign(chosen.begin(), chosen.end());
      }
      const size_t kb = k / 128;
      for (size_t p : picks) {
        const size_t r = p / n, col = p % n;
        std::string ah, bh, sah = "-", sbh = "-";
        for (size_t t = 0; t < k; ++t) {
          ah += Hex(a.data[r * k + t], 2);
          bh += Hex(b.data[t * n + col], 2);
        }
        if (blockwise) {
          const size_t sb_cols = sb.shape[1], per = n / sb_cols;  // 128x128 blocks or 128x1 (per = 1)
          sah.clear();
          sbh.clear();
          for (size_t t = 0; t < kb; ++t) {
            sah += Hex(F32At(sa, r * kb + t), 8);
            sbh += Hex(F32At(sb, t * sb_cols + col / per), 8);
          }
        }
        f.inputs.push_back({ah, bh, sah, sbh, "-"});
        f.observed.push_back(Hex(F32At(d, p), 8));
      }
      emit(std::move(f));
    }
  }
}

// ------------------------------------------------------------------ a unit's own parameters

// Each alignment shift a step can take: a largest product and a second one d binades below it (d = 0 ..
// F + 3, where the element formats reach), the second with either sign (cancellation at d = 0), one pair of
// each; then a C d binades above and below the largest product, its significand odd in its last bit. Scales
// are 1. F is the model's (fused), else 24.
std::vector<Fields> AlignmentCases(const DotConfig& cfg, const AccumModel& model, CaseRng& rng) {
  const Format& fa = GetFormat(cfg.a);
  const Format& fb = GetFormat(cfg.b);
  const int f_bits = model.kind == AccumKind::kFused ? model.fused.frac_bits : 24;
  // The nonzero finite products of the two formats' codes, by the binade of the product.
  std::map<int, std::vector<std::pair<uint8_t, uint8_t>>> by_exp;
  for (uint32_t ca = 0; ca <= fa.CodeMask(); ++ca)
    for (uint32_t cb = 0; cb <= fb.CodeMask(); ++cb) {
      const double va = DecodeToDouble(fa, ca), vb = DecodeToDouble(fb, cb);
      if (!std::isfinite(va) || !std::isfinite(vb) || va <= 0 || vb <= 0) continue;  // positive: the signs are set below
      by_exp[std::ilogb(va * vb)].emplace_back(static_cast<uint8_t>(ca), static_cast<uint8_t>(cb));
    }
  std::vector<Fields> out;
  if (by_exp.empty()) return out;
  const auto pick = [&](int e) {
    const auto& v = by_exp.at(e);
    return v[rng.Below(v.size())];
  };
  const size_t nscales = cfg.scale == "none" ? 0 : cfg.k / cfg.block;
  std::string one;
  for (size_t i = 0; i < nscales; ++i)
    one += Hex(OneScaleWord(ParseBlockScaleFormat(cfg.scale)), cfg.scale == "fp32" ? 8 : 2);
  if (nscales == 0) one = "-";
  const int top = by_exp.rbegin()->first;
  const auto [ta, tb] = pick(top);
  const uint8_t sign_a = static_cast<uint8_t>(1u << (fa.Bits() - 1));
  for (int d = 0; d <= f_bits + 3; ++d) {
    if (!by_exp.count(top - d) || cfg.k < 2) continue;
    const auto [sa, sb] = pick(top - d);
    std::vector<uint8_t> a(cfg.k, 0), b(cfg.k, 0);
    a[0] = ta, b[0] = tb;
    a[1] = sa, b[1] = sb;
    out.push_back({CodesHex(a), CodesHex(b), one, one, "-"});
    a[1] = static_cast<uint8_t>(sa | sign_a);
    out.push_back({CodesHex(a), CodesHex(b), one, one, "-"});
  }
  for (int d = -(f_bits + 3); d <= f_bits + 3; ++d) {
    std::vector<uint8_t> a(cfg.k, 0), b(cfg.k, 0);
    a[0] = ta, b[0] = tb;
    const float c = std::ldexp(1.0f + std::ldexp(static_cast<float>(2 * rng.Below(1u << 10) + 1), -11), top + d);
    if (!std::isfinite(c) || c == 0) continue;
    out.push_back({CodesHex(a), CodesHex(b), one, one, Hex(F32Bits(rng.Below(2) ? -c : c), 8)});
  }
  return out;
}

}  // namespace

std::vector<UnitSpec> ParseUnits(const std::vector<std::string>& texts) {
  std::vector<UnitSpec> units;
  std::set<std::string> names;
  for (const std::string& text : texts) {
    const std::string what = "--unit '" + text + "'";
    std::map<std::string, std::string> kv;
    std::istringstream in(text);
    std::string tok;
    while (in >> tok) {
      const size_t eq = tok.find('=');
      if (eq == std::string::npos || eq == 0)
        throw Error(what + ": each part is KEY=VALUE, not '" + tok + "' (keys: name a b k model scale block)");
      const std::string key = tok.substr(0, eq);
      if (key != "name" && key != "a" && key != "b" && key != "k" && key != "model" && key != "scale" && key != "block")
        throw Error(what + ": unknown key '" + key + "' (keys: name a b k model scale block)");
      if (!kv.emplace(key, tok.substr(eq + 1)).second) throw Error(what + ": '" + key + "' is given twice");
    }
    for (const char* key : {"name", "a", "b", "k", "model"})
      if (!kv.count(key)) throw Error(what + ": '" + key + "' is missing (name a b k model, and scale block for block scales)");
    UnitSpec u;
    u.name = kv["name"];
    if (u.name.empty() || u.name.size() > 64 || u.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != std::string::npos || u.name[0] == '.')
      throw Error(what + ": name must be 1..64 of letters, digits, '.', '_' and '-' (a file name), not '" + u.name + "'");
    if (!names.insert(u.name).second) throw Error(what + ": a unit named '" + u.name + "' is given twice");
    for (const char* key : {"a", "b"}) {
      try {
        ElementFormat(kv[key]);
      } catch (const Error& e) {
        throw Error(what + ": " + key + "=" + kv[key] + ": " + e.what());
      }
    }
    u.a = kv["a"];
    u.b = kv["b"];
    const std::string& ks = kv["k"];
    if (ks.empty() || ks.size() > 7 || ks.find_first_not_of("0123456789") != std::string::npos || std::stoul(ks) < 1 ||
        std::stoul(ks) > (1u << 20))
      throw Error(what + ": k must be 1..1048576, not '" + ks + "'");
    u.k = std::stoul(ks);
    u.model = kv["model"];
    AccumModelByName(u.model);  // throws naming the problem
    u.scale = kv.count("scale") ? kv["scale"] : "none";
    if (u.scale != "none") {
      try {
        OneScaleWord(ParseBlockScaleFormat(u.scale));
      } catch (const Error& e) {
        throw Error(what + ": scale must be none, ue8m0, e4m3, fp32 or a format of 8 bits or fewer that holds 1.0 (" +
                    e.what() + ")");
      }
    }
    if (u.scale == "none") {
      if (kv.count("block")) throw Error(what + ": block is the block scales' length; scale=none has none");
    } else {
      const std::string bs = kv.count("block") ? kv["block"] : "";
      if (bs.empty() || bs.size() > 7 || bs.find_first_not_of("0123456789") != std::string::npos || std::stoul(bs) < 1 ||
          u.k % std::stoul(bs) != 0)
        throw Error(what + ": block must be a length that divides k=" + std::to_string(u.k) + ", not '" + bs + "'");
      u.block = std::stoul(bs);
    }
    // The model with these operands (block scales where it applies them, K against its step): one zero
    // dot product, so an unfit combination fails here, before any file is written.
    try {
      const std::vector<uint8_t> zeros(u.k, 0);
      GemmOperand a = OperandFromCodes(GetFormat(u.a), 1, u.k, zeros.data());
      GemmOperand b = OperandFromCodes(GetFormat(u.b), u.k, 1, zeros.data());
      if (u.scale != "none") {
        const BlockScaleFormat sf = ParseBlockScaleFormat(u.scale);
        const std::vector<uint32_t> one(u.k / u.block, OneScaleWord(sf));
        SetBlockScales(a, sf, 1, u.block, one.data());
        SetBlockScales(b, sf, u.block, 1, one.data());
      }
      GemmRef(a, b, nullptr, AccumModelByName(u.model));
    } catch (const Error& e) {
      throw Error(what + ": " + e.what());
    }
    units.push_back(u);
  }
  return units;
}

void GenUnits(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  for (const UnitSpec& u : ParseUnits(opt.units)) {
    const DotConfig cfg{u.name, u.a, u.b, u.scale, u.k, u.block, {u.model}};
    const AccumModel model = AccumModelByName(u.model);
    CaseRng rng(opt.seed, "unit/" + u.name);
    std::vector<Fields> cases = AlignmentCases(cfg, model, rng);
    for (Fields& f : DotCases(cfg, opt.level, rng)) cases.push_back(std::move(f));
    if (model.kind == AccumKind::kFused && model.fused.acc_fp16)  // C holds FP16 values: each C rounded to FP16
      for (Fields& f : cases) {
        if (f[4] == "-") continue;
        CastOptions o;
        o.saturation = Saturation::kSatFinite;
        const uint16_t h = static_cast<uint16_t>(ConvertF32(F32FromBits(static_cast<uint32_t>(std::stoull(f[4], nullptr, 16))), fmt::kFP16, o));
        f[4] = Hex(F32Bits(SourceValueF32(DType::kF16, &h, 0)), 8);
      }
    PlannedFile f;
    f.path = "unit/" + u.name + ".txt";
    f.header.op = "dot";
    f.header.Set("a", u.a).Set("b", u.b).Set("k", std::to_string(u.k)).Set("scale", u.scale);
    if (u.scale != "none") f.header.Set("block", std::to_string(u.block));
    f.header.Set("model", u.model).Set("unit", u.name);
    f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
    f.inputs = std::move(cases);
    emit(std::move(f));
  }
}

void GenGemm(const GenOptions& opt, const std::function<void(PlannedFile&&)>& emit) {
  const std::vector<DotConfig> configs = {
      {"mxfp8", "e4m3", "e4m3", "ue8m0", 64, 32, {"exact", "fp32-seq", "block-exact", "blackwell-mxf8f6f4"}},
      {"mxfp8-e5m2", "e5m2", "e5m2", "ue8m0", 64, 32, {"exact", "block-exact", "blackwell-mxf8f6f4"}},
      {"mxfp6", "e2m3", "e3m2", "ue8m0", 64, 32, {"exact", "blackwell-mxf8f6f4"}},
      {"mxfp4", "e2m1", "e2m1", "ue8m0", 64, 32,
       {"exact", "fp32-seq", "block-exact", "blackwell-mxf8f6f4", "blackwell-mxf4nvf4"}},
      {"nvfp4", "e2m1", "e2m1", "e4m3", 64, 16, {"exact", "fp32-seq", "block-exact", "blackwell-mxf4nvf4"}},
      {"fp8", "e4m3", "e4m3", "none", 256, 0, {"exact", "fp32-seq", "hopper-fp8", "hopper-fp8-fast", "ada-fp8"}},
      {"fp8-blockwise", "e4m3", "e4m3", "fp32", 256, 128, {"exact", "block-exact", "hopper-fp8", "hopper-fp8-vec"}},
  };
  for (const auto& cfg : configs) {
    CaseRng rng(opt.seed, "gemm/" + cfg.name);
    const std::vector<Fields> cases = DotCases(cfg, opt.level, rng);
    for (const auto& model : cfg.models) {
      PlannedFile f;
      f.path = "gemm/" + cfg.name + "_" + model + ".txt";
      f.header.op = "dot";
      f.header.Set("a", cfg.a).Set("b", cfg.b).Set("k", std::to_string(cfg.k)).Set("scale", cfg.scale);
      if (cfg.scale != "none") f.header.Set("block", std::to_string(cfg.block));
      f.header.Set("model", model).Set("spec", "MMA-Sim");
      f.header.Set("level", std::to_string(opt.level)).Set("seed", std::to_string(opt.seed));
      f.inputs = cases;
      emit(std::move(f));
    }
  }
  if (!opt.hopper_dir.empty()) GenHopperObserved(opt, emit);
}

}  // namespace qmx::golden::detail

// Set by lib/CMakeLists.txt for this file (builds that compile it on their own look in the working directory).
#ifndef QMX_GOLDEN_SOURCE_DIR
#define QMX_GOLDEN_SOURCE_DIR "golden"
#endif
#ifndef QMX_GOLDEN_INSTALL_DIR
#define QMX_GOLDEN_INSTALL_DIR "golden"
#endif

namespace qmx::golden {
namespace fs = std::filesystem;

std::string ResolveHopperDir(const std::vector<std::string>& suites, const std::string& given) {
  const bool wants = std::find(suites.begin(), suites.end(), "gemm") != suites.end() ||
                     std::find(suites.begin(), suites.end(), "all") != suites.end();
  const auto holds = [](const fs::path& d) {
    std::error_code ec;
    return fs::is_regular_file(d / "cases.json", ec);
  };
  if (!given.empty()) {
    if (!holds(given))
      throw Error("golden gen: " + given + "/cases.json not found (--hopper-dir / hopper_dir names the folder of the "
                  "GEMM outputs measured on a Hopper GPU, golden/gemm-hopper in the repository)");
    return given;
  }
  const std::vector<std::string> places = {"golden/gemm-hopper", QMX_GOLDEN_SOURCE_DIR "/gemm-hopper",
                                           QMX_GOLDEN_INSTALL_DIR "/gemm-hopper"};
  for (const std::string& p : places)
    if (holds(p)) return p;
  if (!wants) return "";
  std::string looked;
  for (const std::string& p : places) looked += (looked.empty() ? "" : ", ") + p;
  throw Error("golden gen: the gemm suite includes the GEMM outputs measured on a Hopper GPU (cases.json), found in none "
              "of " + looked + ": pass --hopper-dir DIR (Python: hopper_dir=), or choose suites without gemm");
}

}  // namespace qmx::golden
