// gemm_ref.cc: the reference GEMM, one dot product at a time, each model written as its definition
// (docs/gemm.md "GEMM accumulation models"; docs/REFERENCES.md section 4; MMA-Sim's T-, ST- and GST-FDPA).
#include <cmath>
#include <algorithm>
#include <initializer_list>
#include <limits>
#include <vector>

#include "gemm/exact_sum.h"
#include "fp_env.h"
#include "gemm/gemm_internal.h"
#include "qmx/error.h"

namespace qmx {
namespace {

using detail::Exact;
using detail::ExactOf;
using detail::i128;
using detail::Mul;
using detail::u128;

// DecodeToDouble of every code of a format, computed once per call instead of once per product (the
// reference spent half its time decoding the same 256 codes); codes past the format's width, if any,
// still go through DecodeToDouble itself.
struct CodeValues {
  const Format& f;
  double v[256];
  unsigned count;
  explicit CodeValues(const Format& fmt) : f(fmt), count(fmt.Bits() >= 8 ? 256u : 1u << fmt.Bits()) {
    for (unsigned c = 0; c < count; ++c) v[c] = DecodeToDouble(f, c);
  }
  double operator()(uint8_t c) const { return c < count ? v[c] : DecodeToDouble(f, c); }
};

struct Dot {
  const GemmOperand& a;
  const GemmOperand& b;
  const detail::GemmPlan& plan;
  const AccumModel* plan_model;
  size_t i, j;
  const CodeValues& va;
  const CodeValues& vb;
  double A(size_t k) const { return va(a.codes[i * a.cols + k]); }
  double B(size_t k) const { return vb(b.codes[k * b.cols + j]); }
  double SA(size_t k) const { return a.ScaleOf(i, k); }
  double SB(size_t k) const { return b.ScaleOf(k, j); }
  double TA() const { return a.row_scales.empty() ? a.tensor_scale : a.row_scales[i]; }  // second-level scales
  double TB() const { return b.col_scales.empty() ? b.tensor_scale : b.col_scales[j]; }
};

float Alpha(const Dot& d, float acc) { return d.plan.has_alpha ? d.plan.AlphaAt(d.i, d.j) * acc : acc; }

// Adds the product of `factors` (element values and scales) to `sum` exactly (exact_sum.h AddExactFactors).
void AddExactProduct(detail::ExactSum& sum, bool& all_neg_zero, std::initializer_list<double> factors) {
  detail::AddExactFactors(sum, all_neg_zero, factors.begin(), static_cast<int>(factors.size()));
}

// exact: RNE(sum a*b*sa*sb*ta*tb + c), every product exact, one rounding (ta, tb: each side's tensor scale,
// or its line's for row-scaled NVFP4; under TE's alpha rules, the FP32 alpha TE forms in their place).
float ExactDot(const Dot& d, const float* c) {
  detail::ExactSum sum;
  bool all_neg_zero = true;
  if (c) {
    sum.AddDouble(*c);
    all_neg_zero = *c == 0 && std::signbit(*c);
  }
  const bool te = d.plan.rule != AlphaRule::kDecode;
  const double ta = te ? d.plan.AlphaAt(d.i, d.j) : d.TA(), tb = te ? 1.0 : d.TB();
  for (size_t k = 0; k < d.plan.k; ++k)
    AddExactProduct(sum, all_neg_zero, {d.A(k), d.B(k), d.SA(k), d.SB(k), ta, tb});
  const bool any = c || d.plan.k > 0;
  return sum.RoundToFloat(any && all_neg_zero);
}

float Fp32SeqDot(const Dot& d, const float* c) {
  float acc = c ? *c : 0.0f;
  for (size_t k = 0; k < d.plan.k; ++k) {
    const float x = static_cast<float>(d.A(k)) * static_cast<float>(d.SA(k));
    const float y = static_cast<float>(d.B(k)) * static_cast<float>(d.SB(k));
    acc = std::fma(x, y, acc);
  }
  return Alpha(d, acc);
}

float BlockExactDot(const Dot& d, const float* c) {
  float acc = c ? *c : 0.0f;
  const size_t step = d.plan.xstep != 0 ? d.plan.xstep : d.plan.kb;  // a plan built without PlanGemm: kb
  for (size_t k0 = 0; k0 < d.plan.k; k0 += step) {
    const size_t k1 = std::min(d.plan.k, k0 + step);
    detail::ExactSum sum;
    sum.AddDouble(acc);
    bool all_neg_zero = acc == 0 && std::signbit(acc);
    for (size_t k = k0; k < k1; ++k) AddExactProduct(sum, all_neg_zero, {d.A(k), d.B(k), d.SA(k), d.SB(k)});
    acc = sum.RoundToFloat(all_neg_zero);
  }
  return Alpha(d, acc);
}

// One term of a fused step: its exact value and the exponent it is aligned by.
struct Term {
  Exact v;
  int nominal = 0;
};

// Special operands of a step (NaN, Inf) decide its result on their own, IEEE-style.
struct Specials {
  bool nan = false, pos_inf = false, neg_inf = false;
  void Add(double p) {
    if (std::isnan(p)) nan = true;
    else if (std::isinf(p)) (p > 0 ? pos_inf : neg_inf) = true;
  }
  bool Any() const { return nan || pos_inf || neg_inf; }
  float Result() const {
    if (nan || (pos_inf && neg_inf)) return detail::CanonicalNanF();
    return pos_inf ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  }
};

// MMA-Sim's truncated fused sum: align every term (the accumulator c included) to the largest nominal
// exponent, keep F fractional bits of each, sum exactly, round the sum to the step's output.
float FusedSum(const std::vector<Term>& terms, const FusedParams& p) {
  int emax = std::numeric_limits<int>::min();
  for (const Term& t : terms) emax = std::max(emax, t.nominal);
  if (terms.empty()) return 0.0f;
  const int unit = emax - p.frac_bits;  // exponent of the LSB kept
  i128 s = 0;
  for (const Term& t : terms) {
    const u128 q = detail::ShiftRound(t.v.mag, t.v.lsb - unit, p.term_round == FusedRound::kRne);
    s += t.v.neg ? -static_cast<i128>(q) : static_cast<i128>(q);
  }
  const bool neg = s < 0;
  return detail::RoundFused(neg, static_cast<u128>(neg ? -s : s), unit, p.out_bits, p.out_round == FusedRound::kRne,
                            p.acc_fp16 ? -14 : -126, p.acc_fp16 ? 16 : 128);
}

// MMA-Sim's exponent of an operand: -126 for zero (whatever its format), else the nominal exponent.
int ZeroRuleExp(double v, int emin) { return v == 0 ? -126 : detail::NominalExp(v, emin); }

Term AccTerm(float c, const FusedParams& p) {
  Term t;
  if (c == 0) {
    t.nominal = p.zero_operands ? -126 : p.zero_exp;
    return t;
  }
  t.v = ExactOf(c);
  t.nominal = detail::NominalExp(c, p.acc_fp16 ? -14 : -126);
  return t;
}

// floor(v / 2^d) for d >= 0 (an arithmetic shift toward minus infinity).
i128 FloorShift(i128 v, int d) {
  if (d <= 0) return v;
  if (d >= 126) return v < 0 ? -1 : 0;
  return v >= 0 ? v >> d : -((-v + ((static_cast<i128>(1) << d) - 1)) >> d);
}

// AMD CDNA3's FP8 step (FusedParams::cdna3_halves), MMA-Sim's amd_fused_dot_rd_add with is_fp8 written
// in integers: each half (even and odd k) sums its products cut toward zero to F bits below the half's
// largest exponent (a zero element's exponent -126); the half sums are floored to F bits below their common
// exponent E and added; that sum floored to 31 fractional bits and C (floored to 24, or dropped when its
// exponent is below max(E, ec) - 25) are added at max(E, ec) and rounded to FP32. NaN or Inf anywhere
// (FNUZ NaN codes, C) decide the result as the double sum would.
float Cdna3Step(const Dot& d, size_t k0, size_t k1, float c) {
  const FusedParams& p = d.plan_model->fused;
  const int F = p.frac_bits;
  Specials sp;
  sp.Add(c);
  const int ea = detail::FormatEmin(d.a.elem), eb = detail::FormatEmin(d.b.elem);
  std::vector<Exact> v[2];
  std::vector<int> e[2];
  for (size_t k = k0; k < k1; ++k) {
    const double x = d.A(k), y = d.B(k);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      sp.Add(x * y);
      continue;
    }
    const int h = static_cast<int>((k - k0) % 2);
    v[h].push_back(x == 0 || y == 0 ? Exact{} : Mul(ExactOf(x), ExactOf(y)));
    e[h].push_back(ZeroRuleExp(x, ea) + ZeroRuleExp(y, eb));
  }
  if (sp.Any()) return sp.Result();
  // Each half: S_h = sum of trunc(v / 2^(e_h - F)), e_h its largest exponent.
  i128 sum[2] = {0, 0};
  int top[2] = {std::numeric_limits<int>::min(), std::numeric_limits<int>::min()};
  for (int h = 0; h < 2; ++h) {
    for (int x : e[h]) top[h] = std::max(top[h], x);
    for (const Exact& t : v[h]) {
      const u128 q = detail::ShiftRound(t.mag, t.lsb - (top[h] - F), false);
      sum[h] += t.neg ? -static_cast<i128>(q) : static_cast<i128>(q);
    }
  }
  const int E = std::max(top[0], top[1]);
  i128 s = 0;  // in units of 2^(E - F)
  for (int h = 0; h < 2; ++h)
    if (!v[h].empty()) s += FloorShift(sum[h], E - top[h]);
  // C at max(E, ec): the products' sum floored to 31 fractional bits, C to 24.
  const int ec = c == 0 ? -126 : detail::NominalExp(c, -126);
  const int M = std::max(E, ec);
  const i128 t = 31 - F >= M - E ? s * (static_cast<i128>(1) << (31 - F - (M - E))) : FloorShift(s, M - E - (31 - F));
  i128 cq = 0;  // in units of 2^(M - 24)
  if (c != 0 && ec >= M - 25) {
    const Exact cx = ExactOf(c);
    const int shift = cx.lsb - (M - 24);
    const i128 signed_c = cx.neg ? -static_cast<i128>(cx.mag) : static_cast<i128>(cx.mag);
    cq = shift >= 0 ? signed_c * (static_cast<i128>(1) << shift) : FloorShift(signed_c, -shift);
  }
  const i128 total = t + cq * 128;  // in units of 2^(M - 31)
  const bool neg = total < 0;
  return detail::RoundFused(neg, static_cast<u128>(neg ? -total : total), M - 31, 24, p.out_round == FusedRound::kRne);
}

// One fused step over products k0..k1 with the accumulator c. Block scales enter the products when
// the model says so: per product (group == 1: exponents added, significands multiplied) or per exact
// group sum (group > 1: aligned at the scale exponents only). `terms` and `prods` are the caller's
// scratch, reused from step to step (an allocation per step was most of the reference's time).
struct StepScratch {
  std::vector<Term> terms;
  std::vector<Exact> prods;
};
float FusedStep(const Dot& d, size_t k0, size_t k1, float c, bool scales_in, StepScratch& scratch) {
  const FusedParams& p = d.plan_model->fused;
  if (p.cdna3_halves) return Cdna3Step(d, k0, k1, c);
  Specials sp;
  sp.Add(c);
  std::vector<Term>& terms = scratch.terms;
  terms.clear();
  terms.push_back(AccTerm(c, p));
  const int ea = p.operand_emin != 0 ? p.operand_emin : detail::FormatEmin(d.a.elem);
  const int eb = p.operand_emin != 0 ? p.operand_emin : detail::FormatEmin(d.b.elem);
  const int esa = detail::ScaleEmin(d.a), esb = detail::ScaleEmin(d.b);
  const size_t g = static_cast<size_t>(p.group);
  for (size_t q0 = k0; q0 < k1; q0 += g) {
    const size_t q1 = std::min(k1, q0 + g);
    if (g == 1) {
      const double x = d.A(q0), y = d.B(q0);
      const double sa = scales_in ? d.SA(q0) : 1.0, sb = scales_in ? d.SB(q0) : 1.0;
      const double prod = x * y * sa * sb;
      if (!std::isfinite(x) || !std::isfinite(y) || !std::isfinite(sa) || !std::isfinite(sb)) {
        sp.Add(prod);
        continue;
      }
      Term t;
      if (x == 0 || y == 0 || sa == 0 || sb == 0) {
        t.nominal = p.zero_operands ? ZeroRuleExp(x, ea) + ZeroRuleExp(y, eb) +
                                          (scales_in ? ZeroRuleExp(sa, esa) + ZeroRuleExp(sb, esb) : 0)
                                    : p.zero_exp;
      } else {
        t.v = Mul(Mul(ExactOf(x), ExactOf(y)), Mul(ExactOf(sa), ExactOf(sb)));
        t.nominal = detail::NominalExp(x, ea) + detail::NominalExp(y, eb) +
                    (scales_in ? detail::NominalExp(sa, esa) + detail::NominalExp(sb, esb) : 0);
      }
      terms.push_back(t);
      continue;
    }
    // GST: exact group sum P times the scales, aligned at the scale exponents.
    const double sa = scales_in ? d.SA(q0) : 1.0, sb = scales_in ? d.SB(q0) : 1.0;
    detail::i128 sum = 0;
    int lsb = 0;
    bool all_zero = true, special = false;
    std::vector<Exact>& prods = scratch.prods;
    prods.clear();
    for (size_t k = q0; k < q1; ++k) {
      const double x = d.A(k), y = d.B(k);
      if (!std::isfinite(x) || !std::isfinite(y) || !std::isfinite(sa) || !std::isfinite(sb)) {
        sp.Add(x * y * sa * sb);
        special = true;
        continue;
      }
      if (x == 0 || y == 0) continue;
      all_zero = false;
      prods.push_back(Mul(ExactOf(x), ExactOf(y)));
    }
    if (special) continue;
    if (!prods.empty()) {
      lsb = prods[0].lsb;
      for (const Exact& e : prods) lsb = std::min(lsb, e.lsb);
      for (const Exact& e : prods) {
        const i128 v = static_cast<i128>(e.mag << (e.lsb - lsb));
        sum += e.neg ? -v : v;
      }
    }
    Term t;
    if (p.zero_operands && (all_zero || sa == 0 || sb == 0)) {
      t.nominal = scales_in ? ZeroRuleExp(sa, esa) + ZeroRuleExp(sb, esb) : 0;  // its value is 0
    } else if (all_zero || sa == 0 || sb == 0) {
      t.nominal = p.zero_exp;
    } else {
      Exact ps;
      ps.neg = sum < 0;
      ps.mag = static_cast<u128>(sum < 0 ? -sum : sum);
      ps.lsb = lsb;
      t.v = Mul(ps, Mul(ExactOf(sa), ExactOf(sb)));
      t.nominal = (scales_in ? detail::NominalExp(sa, esa) + detail::NominalExp(sb, esb) : 0);
    }
    terms.push_back(t);
  }
  if (sp.Any()) return sp.Result();
  const float r = FusedSum(terms, p);
  return p.zero_operands && r == 0 ? 0.0f : r;  // MMA-Sim: a sum cut to zero is +0
}

float FusedDot(const Dot& d, const float* c) {
  const FusedParams& p = d.plan_model->fused;
  const size_t step = static_cast<size_t>(p.step);
  const bool blocks = d.plan.a_blocks || d.plan.b_blocks;
  const bool scales_in = blocks && p.scale_in_products;
  float acc = c ? *c : 0.0f;
  StepScratch scratch;
  if (p.promote == 0) {
    for (size_t k0 = 0; k0 < d.plan.k; k0 += step)
      acc = FusedStep(d, k0, std::min(d.plan.k, k0 + step), acc, scales_in, scratch);
    return Alpha(d, acc);
  }
  const size_t window = static_cast<size_t>(p.promote);
  for (size_t w0 = 0; w0 < d.plan.k; w0 += window) {
    const size_t w1 = std::min(d.plan.k, w0 + window);
    float part = 0.0f;
    for (size_t k0 = w0; k0 < w1; k0 += step) part = FusedStep(d, k0, std::min(w1, k0 + step), part, scales_in, scratch);
    if (blocks && !scales_in) {
      const float sa = static_cast<float>(d.SA(w0)), sb = static_cast<float>(d.SB(w0));
      acc = p.promote_scale_separately ? std::fma(part * sa, sb, acc) : std::fma(part, sa * sb, acc);
    } else {
      acc = acc + part;
    }
  }
  return Alpha(d, acc);
}

}  // namespace

namespace detail {
void GemmRefRows(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                 const GemmPlan& plan, size_t i0, size_t i1, float* out) {
  const detail::ScopedDefaultFpEnv fp_env;
  const CodeValues va(a.elem), vb(b.elem);
  for (size_t i = i0; i < i1; ++i) {
    for (size_t j = 0; j < plan.n; ++j) {
      Dot d{a, b, plan, &model, i, j, va, vb};
      const float* c = c_in ? c_in + i * plan.n + j : nullptr;
      float r = 0;
      switch (model.kind) {
        case AccumKind::kExact: r = ExactDot(d, c); break;
        case AccumKind::kFp32Seq: r = Fp32SeqDot(d, c); break;
        case AccumKind::kBlockExact: r = BlockExactDot(d, c); break;
        case AccumKind::kFused: r = FusedDot(d, c); break;
      }
      out[i * plan.n + j] = std::isnan(r) ? detail::ModelNan(model) : r;
    }
  }
}
}  // namespace detail

std::vector<float> GemmRef(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model) {
  GemmOperand pa, pb;
  AccumModel pm;
  if (detail::SplitHmma(a, b, model, pa, pb, pm)) return GemmRef(pa, pb, c_in, pm);
  const detail::GemmPlan plan = detail::PlanGemm(a, b, c_in, model);
  std::vector<float> out(plan.m * plan.n);
  detail::GemmRefRows(a, b, c_in, model, plan, 0, plan.m, out.data());
  return out;
}

}  // namespace qmx
