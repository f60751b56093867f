// golden_gen_gemm.cc: the generator of the gemm suite: block dot products (codes, block scales, C) under
// each MMA-Sim accumulation model, adversarial cases first, and the Hopper outputs observed on hardware.
#include "golden/golden_gen.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/io.h"

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

// Random dot-product cases for a configuration, adversarial ones first.
std::vector<Fields> DotCases(const DotConfig& cfg, int level, CaseRng& rng) {
  const Format& fa = GetFormat(cfg.a);
  const Format& fb = GetFormat(cfg.b);
  const size_t nscales = cfg.scale == "none" ? 0 : cfg.k / cfg.block;
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
      else if (cfg.scale == "e4m3") s += Hex(1 + rng.Below(0x7E), 2);
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
      sa += cfg.scale == "ue8m0" ? Hex(254, 2) : cfg.scale == "e4m3" ? Hex(0x7E, 2) : Hex(F32Bits(1e30f), 8);
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

}  // namespace

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
