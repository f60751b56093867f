// distributions.cc: seeded synthetic study inputs (qmx/distributions.h). Each element uses its own
// Philox4x32-10 counters {i low, i high, draw, kStream}, so any element can be computed alone.
#include "qmx/distributions.h"

#include <omp.h>

#include <cmath>
#include <cstdlib>

#include "qmx/error.h"
#include "qmx/rng.h"

namespace qmx {
namespace {

constexpr uint32_t kStream = 0x51D1u;  // keeps these streams apart from the SR stream (counter word 3 = 0)
constexpr double kTwoPi = 6.283185307179586476925286766559;

struct Draws {
  uint64_t seed, index;
  uint32_t draw = 0;
  // Four 32-bit words for the next draw of this element.
  Philox4x32Counter Next() {
    return Philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), draw++, kStream},
                         {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  }
};

// A double in (0, 1) from two words: 53 random bits, offset by half an ulp so neither end is reached.
double Unit(uint32_t hi, uint32_t lo) {
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return (static_cast<double>(bits) + 0.5) * 0x1p-53;
}

// Box-Muller, cosine branch only (one normal per draw).
double Normal(Draws& d) {
  const Philox4x32Counter w = d.Next();
  const double u1 = Unit(w[0], w[1]), u2 = Unit(w[2], w[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

double UniformOpen(Draws& d) {
  const Philox4x32Counter w = d.Next();
  return Unit(w[0], w[1]);
}

// Marsaglia and Tsang (2000) for shape a >= 1; a < 1 through Gamma(a + 1) * U^(1/a).
double Gamma(Draws& d, double a) {
  if (a < 1.0) {
    const double g = Gamma(d, a + 1.0);
    return g * std::pow(UniformOpen(d), 1.0 / a);
  }
  const double dd = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * dd);
  for (;;) {
    double x, v;
    do {
      x = Normal(d);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = UniformOpen(d);
    if (u < 1.0 - 0.0331 * x * x * x * x) return dd * v;
    if (std::log(u) < 0.5 * x * x + dd * (1.0 - v + std::log(v))) return dd * v;
  }
}

double Sample(const DistSpec& s, Draws& d) {
  switch (s.kind) {
    case DistKind::kNormal:
      return Normal(d);
    case DistKind::kLaplace: {
      const double u = UniformOpen(d) - 0.5;  // in (-0.5, 0.5)
      const double b = 1.0 / std::sqrt(2.0);
      return (u < 0 ? b : -b) * std::log(1.0 - 2.0 * std::fabs(u));
    }
    case DistKind::kStudentT: {
      const double nu = s.param;
      const double z = Normal(d);
      const double chi2 = 2.0 * Gamma(d, nu / 2.0);
      const double t = z / std::sqrt(chi2 / nu);
      return nu > 2.0 ? t * std::sqrt((nu - 2.0) / nu) : t;
    }
    case DistKind::kLogNormal: {
      const double sg = s.param;
      return std::exp(sg * Normal(d) - sg * sg);
    }
    case DistKind::kUniform:
      return (2.0 * UniformOpen(d) - 1.0) * std::sqrt(3.0);
  }
  return 0.0;
}

double ParseNumber(const std::string& t, const std::string& whole, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(v))
    throw Error("distribution '" + whole + "': " + what + " '" + t + "' is not a number");
  return v;
}

}  // namespace

std::vector<std::string> DistSyntax() {
  return {"normal", "laplace", "student-t:NU (NU > 0 degrees of freedom)", "lognormal:SIGMA (SIGMA > 0)",
          "uniform", "any of them + \"+tauT\" or \"+tauT:RATE\": outliers of magnitude T x RMS at rate RATE "
          "(default 1/1024)"};
}

DistSpec ParseDist(const std::string& s) {
  DistSpec d;
  std::string base = s, outl;
  const size_t plus = s.find('+');
  if (plus != std::string::npos) {
    base = s.substr(0, plus);
    outl = s.substr(plus + 1);
  }
  const size_t colon = base.find(':');
  const std::string name = base.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : base.substr(colon + 1);
  const auto need_arg = [&](const char* what) {
    if (arg.empty()) throw Error("distribution '" + s + "' needs " + what + " (e.g. " + name + ":3)");
    const double v = ParseNumber(arg, s, what);
    if (!(v > 0)) throw Error("distribution '" + s + "': " + what + " must be > 0");
    return v;
  };
  if (name == "normal" || name == "gaussian") d.kind = DistKind::kNormal;
  else if (name == "laplace") d.kind = DistKind::kLaplace;
  else if (name == "student-t" || name == "t") { d.kind = DistKind::kStudentT; d.param = need_arg("degrees of freedom"); }
  else if (name == "lognormal") { d.kind = DistKind::kLogNormal; d.param = need_arg("sigma"); }
  else if (name == "uniform") d.kind = DistKind::kUniform;
  else {
    std::string forms;
    for (const std::string& f : DistSyntax()) forms += "\n  " + f;
    throw Error("unknown distribution '" + s + "'; accepted forms:" + forms);
  }
  if ((d.kind == DistKind::kNormal || d.kind == DistKind::kLaplace || d.kind == DistKind::kUniform) && !arg.empty())
    throw Error("distribution '" + s + "': " + name + " takes no parameter");
  if (!outl.empty() || plus != std::string::npos) {
    if (outl.rfind("tau", 0) != 0) throw Error("distribution '" + s + "': outliers are written +tauT or +tauT:RATE");
    const std::string t = outl.substr(3);
    const size_t c = t.find(':');
    d.outlier_tau = ParseNumber(t.substr(0, c), s, "outlier tau");
    d.outlier_rate = c == std::string::npos ? 1.0 / 1024 : ParseNumber(t.substr(c + 1), s, "outlier rate");
    if (!(d.outlier_tau > 0)) throw Error("distribution '" + s + "': outlier tau must be > 0");
    if (!(d.outlier_rate > 0 && d.outlier_rate <= 1)) throw Error("distribution '" + s + "': outlier rate must be in (0, 1]");
  }
  return d;
}

std::string DescribeDist(const DistSpec& d) {
  const auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  std::string s;
  switch (d.kind) {
    case DistKind::kNormal: s = "normal"; break;
    case DistKind::kLaplace: s = "laplace"; break;
    case DistKind::kStudentT: s = "student-t:" + num(d.param); break;
    case DistKind::kLogNormal: s = "lognormal:" + num(d.param); break;
    case DistKind::kUniform: s = "uniform"; break;
  }
  if (d.outlier_tau > 0) {
    s += "+tau" + num(d.outlier_tau);
    if (d.outlier_rate != 1.0 / 1024) s += ":" + num(d.outlier_rate);
  }
  return s;
}

void GenerateDist(const DistSpec& d, uint64_t seed, float* out, size_t n, uint64_t first, Exec exec) {
  if (d.kind == DistKind::kStudentT || d.kind == DistKind::kLogNormal)
    if (!(d.param > 0)) throw Error("distribution " + DescribeDist(d) + ": parameter must be > 0");
  const bool par = exec == Exec::kParallel && n >= (1u << 16);
#pragma omp parallel for schedule(static) if (par)
  for (size_t i = 0; i < n; ++i) {
    Draws dr{seed, first + i};
    double v = Sample(d, dr);
    if (d.outlier_tau > 0) {
      // A draw of its own, so whether i is an outlier does not depend on how many draws Sample took.
      const Philox4x32Counter w = Philox4x32_10(
          {static_cast<uint32_t>(first + i), static_cast<uint32_t>((first + i) >> 32), 0xFFFFFFFFu, kStream},
          {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
      if (Unit(w[0], w[1]) < d.outlier_rate) v = std::signbit(v) ? -d.outlier_tau : d.outlier_tau;
    }
    out[i] = static_cast<float>(v);
  }
}

}  // namespace qmx
