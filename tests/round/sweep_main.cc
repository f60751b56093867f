// sweep_main.cc: FP32 -> format conversion sweeps over all 2^32 inputs or a sampled set, every mode in one
// pass over the inputs. For each mode, the scalar reference routine (qmx::Convert) is compared with NVIDIA's
// host conversion functions from the CUDA headers (where they define the same operation) and/or the naive
// table oracle (tests/support/naive_round.h); with --simd, every compiled SIMD target's ConvertToCodes is
// compared with the reference's codes for the same inputs.
//
// Speed (tests/CMakeLists.txt): the reference's two sources (lib/src/round/round_pack_ref.cc,
// lib/src/format/format.cc) are compiled into this program with link-time optimization, and each registry
// format has its own instance of the per-block loop with the format a compile-time constant, so the
// compiler inlines the routine and folds the format's limits into it; the modes of the exhaustive sweeps
// also have their options constant (BlockFnFor), and stochastic rounding draws one Philox block per four
// inputs. The source is the library's; only
// its object code is this program's own. The library's object code of the same routine is compared with
// the SIMD targets and the golden vectors in the default suite.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "qmx/convert.h"
#include "qmx/error.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "qmx/testing.h"
#include "support/hex.h"
#include "support/naive_round.h"

#ifdef QMX_HAVE_CUDA_HEADERS
#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>
#endif

#if defined(__GNUC__)
#define SWEEP_FLATTEN __attribute__((flatten))
#else
#define SWEEP_FLATTEN
#endif

namespace {

using qmx::CastOptions;
using qmx::Format;
using qmx::Rounding;
using qmx::Saturation;

constexpr uint64_t kSweepSeed = 0x5EED5EEDull;  // stochastic rounding: bits of element k are Philox(seed, k)
constexpr size_t kChunk = size_t{1} << 22;       // inputs per pass over the modes and targets
constexpr size_t kBlock = 4096;                  // inputs per OpenMP work item

// The CUDA host function for (format, options), or nullptr where NVIDIA defines no such operation.
// CUDA's NaN is positive (nan_sign positive), its FP6/FP4 NaN is the largest finite (nan_fallback max),
// and it keeps subnormals.
using OracleFn = uint64_t (*)(float);
OracleFn CudaOracle(const Format& f, const CastOptions& o) {
#ifdef QMX_HAVE_CUDA_HEADERS
  if (o.nan_sign != qmx::NanSign::kPositive || o.nan_fallback != qmx::NanFallback::kMaxPositive ||
      o.subnormals != qmx::Subnormals::kKeep || o.negative_unsigned != qmx::NegativeUnsigned::kInvalid)
    return nullptr;
  const std::string n = f.name;
  const bool rne = o.rounding == Rounding::kRne, rz = o.rounding == Rounding::kRz, ru = o.rounding == Rounding::kRu;
  const bool sat = o.saturation == Saturation::kSatFinite, nosat = o.saturation == Saturation::kNoSat;
  if (n == "e4m3" && rne && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); };
  if (n == "e4m3" && rne && nosat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3); };
  if (n == "e5m2" && rne && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2); };
  if (n == "e5m2" && rne && nosat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2); };
  if (n == "e2m3" && rne && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp6(x, __NV_E2M3, cudaRoundNearest); };
  if (n == "e2m3" && rz && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp6(x, __NV_E2M3, cudaRoundZero); };
  if (n == "e3m2" && rne && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp6(x, __NV_E3M2, cudaRoundNearest); };
  if (n == "e3m2" && rz && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp6(x, __NV_E3M2, cudaRoundZero); };
  if (n == "e2m1" && rne && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest); };
  if (n == "e2m1" && rz && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundZero); };
  // ue8m0: CUDA reads |x| (the sign is ignored); qmx-sim rejects negative inputs, so only x >= 0 is compared.
  if (n == "ue8m0" && rz && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero); };
  if (n == "ue8m0" && rz && nosat) return [](float x) -> uint64_t { return __nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundZero); };
  if (n == "ue8m0" && ru && sat) return [](float x) -> uint64_t { return __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf); };
  if (n == "ue8m0" && ru && nosat) return [](float x) -> uint64_t { return __nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundPosInf); };
#else
  (void)f;
  (void)o;
#endif
  return nullptr;
}

struct Args {
  std::string format;
  std::vector<Rounding> roundings;
  std::vector<Saturation> saturations;
  bool sample = false;
  bool variants = false;  // each mode also with flushed subnormals, and with kept NaN signs / zero for NaN
  bool simd = false;      // compare every compiled SIMD target with the reference
  std::string oracle = "auto";  // auto: cuda where defined, else naive; both; naive; cuda; none (SIMD only)
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "qmx_sweep: %s\nusage: qmx_sweep --format NAME --round MODE[,MODE...]|all --sat MODE[,MODE...]|all "
               "[--sample] [--variants] [--simd] [--oracle auto|cuda|naive|both|none]\n",
               why.c_str());
  std::exit(2);
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) v.push_back(item);
  return v;
}

Args Parse(int argc, char** argv) {
  Args a;
  std::string round = "rne", sat = "satfinite";
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Usage("missing value after " + k);
      return argv[++i];
    };
    if (k == "--format") a.format = val();
    else if (k == "--round") round = val();
    else if (k == "--sat") sat = val();
    else if (k == "--sample") a.sample = true;
    else if (k == "--variants") a.variants = true;
    else if (k == "--simd") a.simd = true;
    else if (k == "--oracle") a.oracle = val();
    else Usage("unknown argument " + k);
  }
  if (a.format.empty()) Usage("--format is required");
  if (a.oracle != "auto" && a.oracle != "cuda" && a.oracle != "naive" && a.oracle != "both" && a.oracle != "none")
    Usage("--oracle must be auto, cuda, naive, both or none, not '" + a.oracle + "'");
  if (round == "all") {
    a.roundings = {Rounding::kRne, Rounding::kRna, Rounding::kRz,  Rounding::kRu, Rounding::kRd,
                   Rounding::kRo,  Rounding::kSrA, Rounding::kSrB, Rounding::kSrC};
  } else {
    for (const std::string& r : SplitList(round)) a.roundings.push_back(qmx::ParseRounding(r));
  }
  if (sat == "all") {
    a.saturations = {Saturation::kSatFinite, Saturation::kNoSat, Saturation::kSatPropagate};
  } else {
    for (const std::string& s : SplitList(sat)) a.saturations.push_back(qmx::ParseSaturation(s));
  }
  if (a.roundings.empty() || a.saturations.empty()) Usage("--round and --sat need at least one mode");
  return a;
}

// One option set of the sweep and what it is compared with.
struct Mode {
  CastOptions opt;
  OracleFn cuda = nullptr;
  bool naive = false;
  uint64_t mismatches = 0;
  int printed = 0;

  std::string Name(const Format& f) const {
    std::string s = std::string(f.name) + " " + qmx::RoundingName(opt.rounding) + " " + qmx::SaturationName(opt.saturation);
    if (opt.subnormals == qmx::Subnormals::kFlush) s += " flush";
    if (opt.nan_sign == qmx::NanSign::kKeep) s += " nan-keep";
    if (opt.nan_fallback == qmx::NanFallback::kZero) s += " nan-zero";
    return s;
  }
};

// The option sets: every valid (saturation, rounding) pair with CUDA's NaN and subnormal rules, and with
// `variants` each also with flushed subnormals and with kept NaN signs plus zero for NaN where the format
// has no NaN. Oracles: CUDA where it defines the set (auto: else naive); the naive oracle does not model a
// flushed subnormal input, so flushed sets are compared with the SIMD targets only.
std::vector<Mode> Modes(const Format& f, const Args& args) {
  std::vector<Mode> modes;
  for (Saturation s : args.saturations) {
    for (Rounding r : args.roundings) {
      CastOptions base;
      base.rounding = r;
      base.saturation = s;
      base.nan_sign = qmx::NanSign::kPositive;
      try {
        qmx::ValidateCastOptions(f, base);
      } catch (const qmx::Error&) {
        continue;  // not defined for this format (e.g. nosat into e2m1)
      }
      std::vector<CastOptions> sets{base};
      if (args.variants) {
        CastOptions flush = base;
        flush.subnormals = qmx::Subnormals::kFlush;
        CastOptions keep = base;
        keep.nan_sign = qmx::NanSign::kKeep;
        keep.nan_fallback = qmx::NanFallback::kZero;
        sets.push_back(flush);
        sets.push_back(keep);
      }
      for (const CastOptions& o : sets) {
        Mode m;
        m.opt = o;
        const OracleFn cuda = CudaOracle(f, o);
        const bool can_naive = o.subnormals == qmx::Subnormals::kKeep;
        const std::string& w = args.oracle;
        m.cuda = (w == "auto" || w == "cuda" || w == "both") ? cuda : nullptr;
        m.naive = can_naive && (w == "naive" || w == "both" || (w == "auto" && !cuda));
        modes.push_back(m);
      }
    }
  }
  return modes;
}

uint32_t InputAt(uint64_t k, bool sample, uint64_t n_strided) {
  // Sampled: every 1009th input, then every input whose low 12 bits are zero (these hold all codes,
  // midpoints and overflow thresholds of the formats of 8 bits or fewer).
  if (!sample) return static_cast<uint32_t>(k);
  return k < n_strided ? static_cast<uint32_t>(k * 1009) : static_cast<uint32_t>((k - n_strided) << 12);
}

// A mismatch: printed for the first ten of each mode.
[[gnu::noinline]] void Report(const Format& f, Mode* m, const char* what, uint32_t u, uint64_t got, uint64_t want) {
#pragma omp critical(sweep_report)
  if (m->printed < 10) {
    ++m->printed;
    std::printf("  MISMATCH %s: input 0x%08x (%.9g) reference 0x%02llx %s 0x%02llx\n", m->Name(f).c_str(), u,
                qmx::test::BitsFloat(u), static_cast<unsigned long long>(got), what, static_cast<unsigned long long>(want));
  }
}

struct Block {
  const uint32_t* in;
  size_t n;
  uint64_t first_index;  // element index of in[0] (stochastic rounding's Philox counter)
  uint8_t* codes;        // the reference's codes, for the SIMD comparison
};

// The reference's codes for one block and their comparison with the oracles; returns the mismatch count.
inline uint64_t CheckBlock(const Format& dst, const CastOptions& opt, const Block& b, Mode* m,
                           const qmx::test::NaiveRounder* naive) {
  const bool stochastic = qmx::IsStochastic(opt.rounding);
  const bool unsigned_skip = dst.encoding == qmx::Encoding::kExponentOnly;  // CUDA reads |x|: compare x >= 0
  // Locals, not b's and m's fields: the byte stores below may alias any object, and would make the
  // compiler reload each field on every element.
  const uint32_t* const in = b.in;
  uint8_t* const codes = b.codes;
  const size_t n = b.n;
  const uint64_t first = b.first_index;
  const OracleFn cuda = m->cuda;
  uint64_t bad = 0;
  qmx::Philox4x32Counter words{};  // stochastic rounding: one Philox call per four elements
  for (size_t j = 0; j < n; ++j) {
    const uint32_t u = in[j];
    const uint64_t k = first + j;
    if (stochastic && (j == 0 || (k & 3) == 0)) words = qmx::RandomWordsForBlock(kSweepSeed, k >> 2);
    const uint32_t r = stochastic ? words[k & 3] : 0;
    const uint64_t got = qmx::Convert(qmx::fmt::kFP32, u, dst, opt, r).code;
    codes[j] = static_cast<uint8_t>(got);
    if (cuda != nullptr && !(unsigned_skip && (u >> 31))) {
      const uint64_t want = cuda(qmx::test::BitsFloat(u));
      if (got != want) {
        ++bad;
        Report(dst, m, "cuda", u, got, want);
      }
    }
    if (naive != nullptr) {
      const uint64_t want = naive->Round(static_cast<double>(qmx::test::BitsFloat(u)), opt, r);
      if (got != want) {
        ++bad;
        Report(dst, m, "naive", u, got, want);
      }
    }
  }
  return bad;
}

// Per registry format, the block loop with the format a compile-time constant (flattened: the reference
// routine is inlined into it); any other format takes the generic instance. The modes of the exhaustive
// sweeps (tests/CMakeLists.txt) also have the options constant, CUDA's NaN and subnormal rules with one
// rounding and saturation: the compiler folds the reference's mode switches, about 2x the speed. Every
// instance runs the same source, the library's.
using BlockFn = uint64_t (*)(const Format&, const Block&, Mode*, const qmx::test::NaiveRounder*);
template <const Format& kDst>
SWEEP_FLATTEN uint64_t CheckBlockFixed(const Format&, const Block& b, Mode* m, const qmx::test::NaiveRounder* naive) {
  return CheckBlock(kDst, m->opt, b, m, naive);
}
constexpr CastOptions CudaRules(Rounding r, Saturation s) {
  CastOptions o;
  o.rounding = r;
  o.saturation = s;
  o.nan_sign = qmx::NanSign::kPositive;
  return o;
}
template <const Format& kDst, Rounding kR, Saturation kS>
SWEEP_FLATTEN uint64_t CheckBlockMode(const Format&, const Block& b, Mode* m, const qmx::test::NaiveRounder* naive) {
  constexpr CastOptions kOpt = CudaRules(kR, kS);
  return CheckBlock(kDst, kOpt, b, m, naive);
}
SWEEP_FLATTEN uint64_t CheckBlockAny(const Format& dst, const Block& b, Mode* m, const qmx::test::NaiveRounder* naive) {
  return CheckBlock(dst, m->opt, b, m, naive);
}
bool SameOptions(const CastOptions& a, const CastOptions& b) {
  return a.rounding == b.rounding && a.saturation == b.saturation && a.nan_sign == b.nan_sign &&
         a.nan_fallback == b.nan_fallback && a.subnormals == b.subnormals && a.sr_bits == b.sr_bits &&
         a.negative_unsigned == b.negative_unsigned;
}
BlockFn BlockFnFor(const Format& f, const CastOptions& o) {
  namespace fmt = qmx::fmt;
  using R = Rounding;
  using S = Saturation;
#define SWEEP_MODE(kFmt, kR, kS) \
  if (f == fmt::kFmt && SameOptions(o, CudaRules(R::kR, S::kS))) return &CheckBlockMode<fmt::kFmt, R::kR, S::kS>;
  SWEEP_MODE(kE4M3, kRne, kSatFinite)
  SWEEP_MODE(kE4M3, kRne, kNoSat)
  SWEEP_MODE(kE5M2, kRne, kSatFinite)
  SWEEP_MODE(kE5M2, kRne, kNoSat)
  SWEEP_MODE(kE3M2, kRne, kSatFinite)
  SWEEP_MODE(kE3M2, kRz, kSatFinite)
  SWEEP_MODE(kE2M3, kRne, kSatFinite)
  SWEEP_MODE(kE2M3, kRz, kSatFinite)
  SWEEP_MODE(kE2M1, kRne, kSatFinite)
  SWEEP_MODE(kE2M1, kRz, kSatFinite)
  SWEEP_MODE(kE2M1, kSrA, kSatFinite)
  SWEEP_MODE(kUE8M0, kRz, kSatFinite)
  SWEEP_MODE(kUE8M0, kRz, kNoSat)
  SWEEP_MODE(kUE8M0, kRu, kSatFinite)
  SWEEP_MODE(kUE8M0, kRu, kNoSat)
  SWEEP_MODE(kE4M3Fnuz, kRne, kSatFinite)
  SWEEP_MODE(kE4M3Fnuz, kRne, kNoSat)
  SWEEP_MODE(kE5M2Fnuz, kRne, kSatFinite)
  SWEEP_MODE(kE5M2Fnuz, kRne, kNoSat)
#undef SWEEP_MODE
  if (f == fmt::kE4M3) return &CheckBlockFixed<fmt::kE4M3>;
  if (f == fmt::kE5M2) return &CheckBlockFixed<fmt::kE5M2>;
  if (f == fmt::kE3M2) return &CheckBlockFixed<fmt::kE3M2>;
  if (f == fmt::kE2M3) return &CheckBlockFixed<fmt::kE2M3>;
  if (f == fmt::kE2M1) return &CheckBlockFixed<fmt::kE2M1>;
  if (f == fmt::kUE8M0) return &CheckBlockFixed<fmt::kUE8M0>;
  if (f == fmt::kInt8) return &CheckBlockFixed<fmt::kInt8>;
  if (f == fmt::kE4M3Fnuz) return &CheckBlockFixed<fmt::kE4M3Fnuz>;
  if (f == fmt::kE5M2Fnuz) return &CheckBlockFixed<fmt::kE5M2Fnuz>;
  if (f == fmt::kE4M3B11Fnuz) return &CheckBlockFixed<fmt::kE4M3B11Fnuz>;
  return &CheckBlockAny;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = Parse(argc, argv);
    const Format f = qmx::ParseFormat(args.format);
#ifndef QMX_HAVE_CUDA_HEADERS
    if (args.oracle == "cuda") {
      std::printf("SKIP: the CUDA headers (cuda_fp8.h, cuda_fp6.h, cuda_fp4.h) were not found at configure time\n");
      return 77;
    }
    std::printf("note: CUDA headers not found; comparing with the naive oracle only\n");
#endif
    std::vector<Mode> modes = Modes(f, args);
    const std::vector<std::string> targets = args.simd ? qmx::SimdTargets() : std::vector<std::string>{};
    if (args.simd && f.Bits() > 8) Usage(std::string("--simd: '") + f.name + "' has more than 8 bits");
    modes.erase(std::remove_if(modes.begin(), modes.end(),
                               [&](const Mode& m) { return m.cuda == nullptr && !m.naive && targets.empty(); }),
                modes.end());
    if (modes.empty()) {
      std::printf("SKIP: no oracle defines these operations\n");
      return 77;
    }
    const qmx::test::NaiveRounder naive(f);
    const uint64_t n_strided = args.sample ? (1ull << 32) / 1009 + 1 : (1ull << 32);
    const uint64_t n_total = args.sample ? n_strided + (1ull << 20) : n_strided;
    std::vector<uint32_t> in(kChunk);
    std::vector<uint8_t> want(kChunk), got(kChunk);
    std::vector<uint64_t> simd_bad(modes.size(), 0);
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t start = 0; start < n_total; start += kChunk) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(kChunk, n_total - start));
      const int64_t blocks = static_cast<int64_t>((len + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
      for (int64_t j = 0; j < static_cast<int64_t>(len); ++j) in[j] = InputAt(start + j, args.sample, n_strided);
      for (size_t mi = 0; mi < modes.size(); ++mi) {
        Mode* m = &modes[mi];
        const qmx::test::NaiveRounder* nv = m->naive ? &naive : nullptr;
        const BlockFn check = BlockFnFor(f, m->opt);
        uint64_t bad = 0;
#pragma omp parallel for schedule(dynamic, 16) reduction(+ : bad)
        for (int64_t b = 0; b < blocks; ++b) {
          const size_t s = static_cast<size_t>(b) * kBlock;
          bad += check(f, Block{in.data() + s, std::min(kBlock, len - s), start + s, want.data() + s}, m, nv);
        }
        m->mismatches += bad;
        for (const std::string& t : targets) {
          qmx::ForceSimdTarget(t);
          qmx::ConvertToCodes(qmx::DType::kF32, in.data(), len, f, m->opt, got.data(), {kSweepSeed, start, nullptr},
                              qmx::Exec::kParallel);
          uint64_t tbad = 0;
#pragma omp parallel for schedule(static) reduction(+ : tbad)
          for (int64_t b = 0; b < blocks; ++b) {
            const size_t s = static_cast<size_t>(b) * kBlock, e = std::min(s + kBlock, len);
            if (std::memcmp(got.data() + s, want.data() + s, e - s) == 0) continue;
            for (size_t j = s; j < e; ++j) {
              if (got[j] == want[j]) continue;
              ++tbad;
              Report(f, m, t.c_str(), in[j], want[j], got[j]);
            }
          }
          simd_bad[mi] += tbad;
          m->mismatches += tbad;
        }
        if (!targets.empty()) qmx::ForceSimdTarget("");
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    uint64_t total = 0;
    for (size_t mi = 0; mi < modes.size(); ++mi) {
      const Mode& m = modes[mi];
      std::string against = m.cuda ? "cuda" : "";
      if (m.naive) against += std::string(against.empty() ? "" : "+") + "naive";
      if (!targets.empty()) against += std::string(against.empty() ? "" : "+") + std::to_string(targets.size()) + " SIMD targets";
      std::printf("%-34s %11llu inputs  %llu mismatches (%llu SIMD)  vs %s\n", m.Name(f).c_str(),
                  static_cast<unsigned long long>(n_total), static_cast<unsigned long long>(m.mismatches),
                  static_cast<unsigned long long>(simd_bad[mi]), against.c_str());
      total += m.mismatches;
    }
    std::printf("%s: %llu mismatches in total, %zu modes", total ? "FAIL" : "PASS", static_cast<unsigned long long>(total),
                modes.size());
    if (!targets.empty()) {
      std::printf(", targets:");
      for (const std::string& t : targets) std::printf(" %s", t.c_str());
    }
    std::printf(", %.1f s\n", secs);
    return total ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qmx_sweep: %s\n", e.what());
    return 2;
  }
}
