// transform.cc: block Hadamard transforms (normalized Walsh-Hadamard), the randomized Hadamard transform
// and QuEST's forward quantizer (qmx/transform.h).
#include "qmx/transform.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "qmx/error.h"
#include "qmx/rng.h"
#include "qmx/round.h"
#include "transform/transform_simd.h"

namespace qmx {
namespace {

constexpr int kMaxHadamard = 256;

bool SupportedBlock(int b) { return b == 16 || b == 32 || b == 64 || b == 128 || b == 256; }

// In-place butterflies on one block of doubles: after stage h, v[i] holds sums over 2h inputs.
void Fwht(double* v, int n) {
  for (int h = 1; h < n; h *= 2) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const double a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
}

// The scalar butterflies: y = H D x (forward) or x = D H y (inverse) on every block of every row.
void ApplyScalar(const HadamardSpec& h, const float* in, float* out, size_t rows, size_t cols, bool inverse) {
  ValidateHadamard(h, cols);
  const int n = h.block;
  const std::vector<float> sign = HadamardSigns(h);
  const double norm = 1.0 / std::sqrt(static_cast<double>(n));
  double v[kMaxHadamard];
  for (size_t b = 0; b < rows * (cols / n); ++b) {
    const float* src = in + b * n;
    float* dst = out + b * n;
    for (int j = 0; j < n; ++j) v[j] = inverse ? src[j] : static_cast<double>(src[j]) * sign[j];
    Fwht(v, n);
    for (int j = 0; j < n; ++j) {
      const double y = v[j] * norm;
      dst[j] = static_cast<float>(inverse ? y * sign[j] : y);
    }
  }
}

// The same through the Highway kernel, runs of blocks in parallel.
void Apply(const HadamardSpec& h, const float* in, float* out, size_t rows, size_t cols, Exec exec, bool inverse) {
  ValidateHadamard(h, cols);
  const int n = h.block;
  const std::vector<float> sign = HadamardSigns(h);
  alignas(64) double signd[kMaxHadamard];
  for (int j = 0; j < n; ++j) signd[j] = sign[j];
  const double norm = 1.0 / std::sqrt(static_cast<double>(n));
  const size_t blocks = rows * (cols / n);
  constexpr size_t kRun = 256;  // blocks per task
  const long runs = static_cast<long>((blocks + kRun - 1) / kRun);
  const bool par = exec == Exec::kParallel && rows * cols >= (1u << 16);
#pragma omp parallel for schedule(static) if (par)
  for (long r = 0; r < runs; ++r) {
    const size_t b0 = static_cast<size_t>(r) * kRun, nb = std::min(kRun, blocks - b0);
    simd::HadamardBlocks(in + b0 * n, out + b0 * n, nb, n, signd, norm, inverse);
  }
}

}  // namespace

HadamardSpec ParseHadamard(const std::string& s) {
  HadamardSpec h;
  const auto fail = [&](const std::string& why) -> HadamardSpec {
    throw Error("transform '" + s + "': " + why + " (expected hadamard:N or rht:N[:seed], N in 16 32 64 128 256)");
  };
  const size_t c1 = s.find(':');
  if (c1 == std::string::npos) return fail("no block size");
  const std::string kind = s.substr(0, c1);
  if (kind == "hadamard") h.randomized = false;
  else if (kind == "rht") h.randomized = true;
  else return fail("unknown kind '" + kind + "'");
  const size_t c2 = s.find(':', c1 + 1);
  const std::string nstr = s.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
  if (nstr.empty() || nstr.size() > 3 || nstr.find_first_not_of("0123456789") != std::string::npos)
    return fail("bad block size '" + nstr + "'");
  h.block = std::stoi(nstr);
  if (!SupportedBlock(h.block)) return fail("unsupported block size " + nstr);
  if (c2 != std::string::npos) {
    const std::string seed = s.substr(c2 + 1);
    if (!h.randomized) return fail("a plain Hadamard takes no seed");
    if (seed.empty() || seed.size() > 19 || seed.find_first_not_of("0123456789") != std::string::npos)
      return fail("bad seed '" + seed + "'");
    h.seed = std::stoull(seed);
  }
  return h;
}

std::string DescribeHadamard(const HadamardSpec& h) {
  std::string s = (h.randomized ? "rht:" : "hadamard:") + std::to_string(h.block);
  if (h.randomized && h.seed != 0) s += ":" + std::to_string(h.seed);
  return s;
}

void ValidateHadamard(const HadamardSpec& h, size_t cols) {
  if (!SupportedBlock(h.block))
    throw Error("Hadamard block " + std::to_string(h.block) + " is not one of 16, 32, 64, 128, 256");
  if (cols % static_cast<size_t>(h.block) != 0)
    throw Error("Hadamard block " + std::to_string(h.block) + " does not divide the row length " +
                std::to_string(cols));
}

std::vector<float> HadamardSigns(const HadamardSpec& h) {
  std::vector<float> s(static_cast<size_t>(h.block), 1.0f);
  if (h.randomized)
    for (int j = 0; j < h.block; ++j) s[j] = (RandomBitsForElement(h.seed, j) & 1u) ? -1.0f : 1.0f;
  return s;
}

void HadamardForward(const HadamardSpec& h, const float* in, float* out, size_t rows, size_t cols, Exec exec) {
  Apply(h, in, out, rows, cols, exec, false);
}

void HadamardInverse(const HadamardSpec& h, const float* in, float* out, size_t rows, size_t cols, Exec exec) {
  Apply(h, in, out, rows, cols, exec, true);
}

void HadamardButterfliesRef(const HadamardSpec& h, const float* in, float* out, size_t rows, size_t cols, bool inverse) {
  ApplyScalar(h, in, out, rows, cols, inverse);
}

void HadamardForwardRef(const HadamardSpec& h, const float* in, float* out, size_t rows, size_t cols) {
  ValidateHadamard(h, cols);
  const int n = h.block;
  const std::vector<float> sign = HadamardSigns(h);
  const double norm = 1.0 / std::sqrt(static_cast<double>(n));
  std::vector<double> x(n);
  for (size_t b = 0; b < rows * (cols / n); ++b) {
    for (int j = 0; j < n; ++j) x[j] = static_cast<double>(in[b * n + j]) * sign[j];
    for (int i = 0; i < n; ++i) {
      double sum = 0;
      for (int j = 0; j < n; ++j) sum += (__builtin_popcount(i & j) & 1) ? -x[j] : x[j];
      out[b * n + i] = static_cast<float>(sum * norm);
    }
  }
}

const char* QuestStatName(QuestStat s) { return s == QuestStat::kStd ? "std" : "rms"; }
const char* QuestScaleRoundingName(QuestScaleRounding r) {
  switch (r) {
    case QuestScaleRounding::kFloor: return "floor";
    case QuestScaleRounding::kNearest: return "nearest";
    case QuestScaleRounding::kExact: return "exact";
  }
  return "?";
}
QuestStat ParseQuestStat(const std::string& s) {
  if (s == "std") return QuestStat::kStd;
  if (s == "rms") return QuestStat::kRms;
  throw Error("unknown QuEST statistic '" + s + "' (expected std or rms)");
}
QuestScaleRounding ParseQuestScaleRounding(const std::string& s) {
  if (s == "floor") return QuestScaleRounding::kFloor;
  if (s == "nearest") return QuestScaleRounding::kNearest;
  if (s == "exact") return QuestScaleRounding::kExact;
  throw Error("unknown QuEST scale rounding '" + s + "' (expected floor, nearest or exact)");
}

double QuestGaussianMse(const Format& elem, double alpha) {
  // Nonnegative finite levels of the grid, ascending.
  std::vector<double> lv;
  for (double v : DecodeTable(elem))
    if (std::isfinite(v) && v >= 0) lv.push_back(v);
  std::sort(lv.begin(), lv.end());
  lv.erase(std::unique(lv.begin(), lv.end()), lv.end());
  const double s = alpha / lv.back();
  const auto phi = [](double g) { return std::exp(-0.5 * g * g) * 0.39894228040143267794; };
  const auto cdf = [](double g) { return 0.5 * std::erfc(-g * 0.70710678118654752440); };
  // Antiderivative of (g - v)^2 phi(g): Phi - g phi + 2 v phi + v^2 Phi.
  const auto prim = [&](double g, double v) {
    if (std::isinf(g)) return 1.0 + v * v;
    return cdf(g) - g * phi(g) + 2.0 * v * phi(g) + v * v * cdf(g);
  };
  double mse = 0;
  for (size_t k = 0; k < lv.size(); ++k) {
    const double v = lv[k] * s;
    const double a = k == 0 ? 0.0 : 0.5 * (lv[k - 1] + lv[k]) * s;
    const double b = k + 1 == lv.size() ? HUGE_VAL : 0.5 * (lv[k] + lv[k + 1]) * s;
    mse += prim(b, v) - prim(a, v);
  }
  return 2.0 * mse;  // both signs
}

double QuestOptimalClip(const Format& elem) {
  // Scan alpha on a log grid, then golden-section search around the best point.
  double best = 0, best_mse = HUGE_VAL;
  for (int i = 0; i <= 400; ++i) {
    const double a = std::ldexp(1.0, -2) * std::pow(2.0, i * 0.025);  // 0.25 .. 256
    const double m = QuestGaussianMse(elem, a);
    if (m < best_mse) best_mse = m, best = a;
  }
  double lo = best * std::pow(2.0, -0.025), hi = best * std::pow(2.0, 0.025);
  const double gr = 0.61803398874989484820;
  double c = hi - gr * (hi - lo), d = lo + gr * (hi - lo);
  double fc = QuestGaussianMse(elem, c), fd = QuestGaussianMse(elem, d);
  for (int it = 0; it < 200 && hi - lo > 1e-12 * hi; ++it) {
    if (fc < fd) {
      hi = d, d = c, fd = fc;
      c = hi - gr * (hi - lo), fc = QuestGaussianMse(elem, c);
    } else {
      lo = c, c = d, fc = fd;
      d = lo + gr * (hi - lo), fd = QuestGaussianMse(elem, d);
    }
  }
  return 0.5 * (lo + hi);
}

double QuestDefaultClip(const Format& elem) {
  if (elem == fmt::kE2M1) return 2.92247856;  // by encoding: name pointers differ where literals are not merged (ASan)
  return QuestOptimalClip(elem);
}

QuestResult QuestQuantize(const float* x, size_t rows, size_t cols, const QuantSpec& spec, const QuestOptions& opt,
                          Exec exec) {
  ValidateQuantSpec(spec);
  const BlockExtent be = ResolveBlock(spec, rows, cols);
  if (spec.axis != Axis::kRow || spec.block_rows != 1 || spec.block_cols <= 0)
    throw Error("QuEST needs a row-wise 1xK spec; " + spec.name + " is " + DescribeBlock(spec) + " along " +
                AxisName(spec.axis));
  const size_t g = be.cols;
  if (cols % g != 0)
    throw Error("QuEST: the row length " + std::to_string(cols) + " is not a multiple of the group size " +
                std::to_string(g));
  const double alpha = opt.clip_ratio > 0 ? opt.clip_ratio : QuestDefaultClip(spec.elem);
  if (!(alpha > 0) || !std::isfinite(alpha)) throw Error("QuEST: the clip ratio must be a positive number");
  const double emax = Limits(spec.elem).max_finite;
  const float emax_f = static_cast<float>(emax);
  CastOptions cast = spec.cast;
  cast.saturation = Saturation::kSatFinite;  // clipping is part of QuEST, whatever the spec asked
  ValidateCastOptions(spec.elem, cast);
  QuestResult out;
  const size_t n = rows * cols, groups = n / g;
  out.dequant.assign(n, 0.0f);
  out.mask.assign(n, 0);
  out.codes.assign(n, 0);
  out.scales.assign(groups, 0.0f);
  std::vector<uint64_t> clipped(rows, 0);
  const bool par = exec == Exec::kParallel && n >= (1u << 16);
#pragma omp parallel for schedule(static) if (par)
  for (size_t r = 0; r < rows; ++r) {
    std::vector<float> v(cols), d(cols);
    std::vector<uint8_t> codes(cols);
    for (size_t c0 = 0; c0 < cols; c0 += g) {
      const float* xg = x + r * cols + c0;
      double sum = 0, sq = 0;
      bool finite = true;
      for (size_t i = 0; i < g; ++i) {
        finite = finite && std::isfinite(xg[i]);
        sum += xg[i];
        sq += static_cast<double>(xg[i]) * xg[i];
      }
      double stat;
      if (opt.stat == QuestStat::kRms) {
        stat = std::sqrt(sq / static_cast<double>(g));
      } else {
        const double mean = sum / static_cast<double>(g);
        double var = 0;
        for (size_t i = 0; i < g; ++i) var += (xg[i] - mean) * (xg[i] - mean);
        stat = std::sqrt(var / static_cast<double>(g));
      }
      float scale = static_cast<float>(stat * (alpha / emax) + 1e-8);
      if (!finite || !std::isfinite(scale)) scale = std::numeric_limits<float>::quiet_NaN();
      if (std::isfinite(scale) && opt.scale_rounding != QuestScaleRounding::kExact) {
        uint32_t bits;
        std::memcpy(&bits, &scale, 4);
        const bool up = opt.scale_rounding == QuestScaleRounding::kNearest && (bits & 0x7FFFFFu) >= 0x3504F4u;
        bits &= 0x7F800000u;  // floor to 2^k (scale >= 1e-8 is a normal float)
        if (up) bits += 0x800000u;  // mantissa >= sqrt(2) - 1: the upper power is nearer (log2 rounds up)
        std::memcpy(&scale, &bits, 4);
      }
      out.scales[(r * cols + c0) / g] = scale;
      for (size_t i = 0; i < g; ++i) {
        v[c0 + i] = xg[i] / scale;
        out.mask[r * cols + c0 + i] = std::fabs(v[c0 + i]) < emax_f;
        clipped[r] += !(std::fabs(v[c0 + i]) < emax_f);
      }
    }
    SrSource sr;
    sr.seed = spec.seed;
    sr.first_index = r * cols;
    ConvertToCodes(DType::kF32, v.data(), cols, spec.elem, cast, codes.data(), sr);
    DecodeToF32(codes.data(), cols, spec.elem, d.data());
    std::copy(codes.begin(), codes.end(), out.codes.begin() + static_cast<std::ptrdiff_t>(r * cols));
    for (size_t c = 0; c < cols; ++c) {
      const float scale = out.scales[(r * cols + c) / g];
      out.dequant[r * cols + c] = std::isnan(scale) ? scale : d[c] * scale;
    }
  }
  for (uint64_t c : clipped) out.clipped += c;
  return out;
}

}  // namespace qmx
