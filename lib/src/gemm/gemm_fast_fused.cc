// gemm_fast_fused.cc: the fast paths of the fused models (MMA-Sim's T-FDPA / ST-FDPA, and GST with exact
// groups: hopper-fp8, blackwell-*), equal bit for bit to gemm_ref.cc: the Highway kernel where its FP32 bounds
// hold, else portable tiles whose truncated terms are exact in float or double.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "gemm/gemm_fast.h"

namespace qmx::detail {
namespace {

// ---- fused (MMA-Sim T-FDPA / ST-FDPA with UE8M0 scales) -------------------------------------------

// Each code's nominal exponent (MMA-Sim's Exp); kZeroE for zeros (and non-finite codes, which the fused
// kernels never see: they leave specials to the reference).
std::array<int32_t, 256> NominalExps(const Format& f) {
  const std::array<double, 256> values = CodeValues(f);
  std::array<int32_t, 256> e;
  for (int c = 0; c < 256; ++c)
    e[c] = values[c] == 0 || !std::isfinite(values[c]) ? kZeroE : NominalExp(values[c], FormatEmin(f));
  return e;
}

// Element x as (significand x / 2^Exp, Exp) with MMA-Sim's nominal exponent; zero as (0, kZeroE).
template <typename T>
void SplitNominal(const GemmOperand& o, std::vector<T>& sig, std::vector<int>& ex) {
  const std::array<double, 256> values = CodeValues(o.elem);
  const std::array<int32_t, 256> table_e = NominalExps(o.elem);
  T table_s[256];
  for (int c = 0; c < 256; ++c) table_s[c] = table_e[c] == kZeroE ? T(0) : static_cast<T>(std::ldexp(values[c], -table_e[c]));
  sig.resize(o.codes.size());
  ex.resize(o.codes.size());
  for (size_t i = 0; i < o.codes.size(); ++i) {
    sig[i] = table_s[o.codes[i]];
    ex[i] = table_e[o.codes[i]];
  }
}

// The accumulator as a term: (significand, Exp) with Exp floored at `emin` (-126 for FP32, -14 for an FP16
// accumulator's values); zero as (0, kZeroE).
template <typename T>
inline void AccSplit(float c, T& s, int& e, int emin = -126) {
  uint32_t b;
  std::memcpy(&b, &c, 4);
  const int field = (b >> 23) & 0xFF;
  if ((b & 0x7FFFFFFF) == 0) {
    s = 0;
    e = kZeroE;
    return;
  }
  e = std::max(field == 0 ? -126 : field - 127, emin);
  s = static_cast<T>(static_cast<double>(c) * Pow2d(-e));
}

struct FusedCtx {
  const FusedParams* p;
  size_t n, k;
  int zero_exp;
  bool track_zero;
};

// Rounds S * 2^unit (S an integer held exactly in a double) to the step's output: RoundFused's rule
// in double arithmetic (every step exact: S < 2^53, the kept bits scaled by powers of two). Kept
// beside RoundFused because a few double operations per output and step cost far less in the tiles'
// inner loop than RoundFused's 128-bit integer path; the tests hold the two to the same bits through
// fast = reference.
// emin and inf_exp: RoundFused's (FP32's -126 and 2^128, an FP16 accumulator's -14 and 2^16). Branch-free, so
// that the tiles' loops over their columns vectorize: every value is formed, then the zero sum's +0 chosen.
inline float FusedOut(double s, int unit, int bits, bool rne, int emin = -126, int inf_exp = 128) {
  const double a = std::fabs(s);
  uint64_t ab;
  std::memcpy(&ab, &a, 8);
  const int msb = static_cast<int>(ab >> 52) - 1023;  // a >= 1 (a = 0 is chosen away below)
  const int e = std::max(msb + unit, emin);
  const int q = e - (bits - 1);
  const double scaled = a * Pow2d(unit - q);  // unit - q >= -(msb + 1): within double's range
  const double kept = rne ? std::nearbyint(scaled) : std::trunc(scaled);
  const double v = kept * Pow2d(q);
  const double r = v >= Pow2d(inf_exp) ? std::numeric_limits<double>::infinity() : v;
  const float f = static_cast<float>(r);  // exact: kept has at most `bits` bits, or Inf
  return s == 0 ? 0.0f : s < 0 ? -f : f;
}

// The end of a promotion window (or of K without promotion), columns j0 .. j0 + nc - 1 of row i, as the
// reference's FusedDot: without promotion acc is the part; with block scales at promotion (ta, tb: per-K-
// block tables of m x nb and nb x n) acc = fma(part, sa * sb, acc), or fma(part * sa, sb, acc) with the
// scales applied separately; otherwise acc + part in FP32.
inline void EndWindow(const FusedParams& p, const float* ta, const float* tb, size_t nb, size_t n, size_t i, size_t blk,
                      size_t j0, size_t nc, const float* part, float* acc) {
  if (p.promote == 0) {
    for (size_t j = 0; j < nc; ++j) acc[j] = part[j];
  } else if (ta != nullptr) {
    const float s_a = ta[i * nb + blk];
    for (size_t j = 0; j < nc; ++j) {
      const float s_b = tb[blk * n + j0 + j];
      acc[j] = p.promote_scale_separately ? std::fma(part[j] * s_a, s_b, acc[j]) : std::fma(part[j], s_a * s_b, acc[j]);
    }
  } else {
    for (size_t j = 0; j < nc; ++j) acc[j] = acc[j] + part[j];
  }
}

// The loops FusedTile and GroupTile share, for rows [i0, i1) and columns j0 .. j0 + nc - 1: the accumulator
// starts at C (or 0); each promotion window (all of K without promotion) starts its part at 0 (promotion)
// or at the accumulator, runs step(i, k0, k1, part) over its K steps (each leaves its rounded sum in
// part), and ends through end(i, w0, part, acc). A column whose part or result left the finite range
// gets the canonical NaN, and the reference recomputes its row. Always inlined, lambdas included, so that
// the loops compile for each of the callers' target clones.
template <typename Step, typename End>
__attribute__((always_inline)) inline void FusedRows(const FusedParams& p, size_t n, size_t k, const float* c_in,
                                                     size_t i0, size_t i1, size_t j0, size_t nc, float* out,
                                                     const Step& step_fn, const End& end) {
  const size_t step = static_cast<size_t>(p.step);
  const size_t window = p.promote ? static_cast<size_t>(p.promote) : k;
  for (size_t i = i0; i < i1; ++i) {
    float acc[kCols], part[kCols];
    bool overflow[kCols] = {};
    for (size_t j = 0; j < nc; ++j) acc[j] = c_in ? c_in[i * n + j0 + j] : 0.0f;
    for (size_t w0 = 0; w0 < k; w0 += window) {
      const size_t w1 = std::min(k, w0 + window);
      for (size_t j = 0; j < nc; ++j) part[j] = p.promote != 0 ? 0.0f : acc[j];
      for (size_t k0 = w0; k0 < w1; k0 += step) {
        step_fn(i, k0, std::min(w1, k0 + step), part);
        for (size_t j = 0; j < nc; ++j) overflow[j] = overflow[j] || !std::isfinite(part[j]);
      }
      end(i, w0, part, acc);
    }
    for (size_t j = 0; j < nc; ++j) out[i * n + j0 + j] = overflow[j] || !std::isfinite(acc[j]) ? CanonicalNanF() : acc[j];
  }
}

// One tile: rows [i0, i1), columns [j0, j0 + nc). T holds the truncated terms exactly.
template <typename T>
QMX_GEMM_CLONES void FusedTile(const FusedCtx& ctx, const T* sa, const int* ea, const T* sb, const int* eb,
                               const int* xa, const int* xb, size_t kb, const float* scale_prod_a, const float* scale_b,
                               const float* c_in, size_t i0, size_t i1, size_t j0, size_t nc,
                               float* out) {
  const FusedParams& p = *ctx.p;
  const size_t n = ctx.n, k = ctx.k;
  const bool rne_terms = p.term_round == FusedRound::kRne, rne_out = p.out_round == FusedRound::kRne;
  const int acc_emin = p.acc_fp16 ? -14 : -126, inf_exp = p.acc_fp16 ? 16 : 128;  // FP16 or FP32 accumulator
  const auto step = [&](size_t i, size_t k0, size_t k1, float* part) __attribute__((always_inline)) {
    int emax[kCols], emin[kCols], ec[kCols];
    T sc[kCols], sum[kCols];
    for (size_t j = 0; j < nc; ++j) {
      AccSplit(part[j], sc[j], ec[j], acc_emin);
      emax[j] = ec[j];
      emin[j] = ec[j];
    }
    for (size_t kk = k0; kk < k1; ++kk) {
      const int e_a = ea[i * k + kk] + xa[i * ((k + kb - 1) / kb) + kk / kb];
      const int* e_b = eb + kk * n + j0;
      const int* x_b = xb + (kk / kb) * n + j0;
      for (size_t j = 0; j < nc; ++j) {
        const int e = e_a + e_b[j] + x_b[j];
        emax[j] = std::max(emax[j], e);
        emin[j] = std::min(emin[j], e);
      }
    }
    if (ctx.track_zero)
      for (size_t j = 0; j < nc; ++j)
        if (emin[j] < kZeroE / 2) emax[j] = std::max(emax[j], ctx.zero_exp);
    for (size_t j = 0; j < nc; ++j) {
      const int d = ec[j] - emax[j] + p.frac_bits;
      const T f = d < -126 ? T(0) : (sizeof(T) == 4 ? T(Pow2f(std::min(d, 127))) : T(Pow2d(std::min(d, 1023))));
      const T t = sc[j] * f;
      sum[j] = rne_terms ? std::nearbyint(t) : std::trunc(t);
    }
    for (size_t kk = k0; kk < k1; ++kk) {
      const int e_a = ea[i * k + kk] + xa[i * ((k + kb - 1) / kb) + kk / kb];
      const T s_a = sa[i * k + kk];
      const int* e_b = eb + kk * n + j0;
      const T* s_b = sb + kk * n + j0;
      const int* x_b = xb + (kk / kb) * n + j0;
      for (size_t j = 0; j < nc; ++j) {
        const int d = e_a + e_b[j] + x_b[j] - emax[j] + p.frac_bits;
        const T f = d < -126 ? T(0) : (sizeof(T) == 4 ? T(Pow2f(d)) : T(Pow2d(d)));
        const T t = s_a * s_b[j] * f;
        sum[j] += rne_terms ? std::nearbyint(t) : std::trunc(t);
      }
    }
    for (size_t j = 0; j < nc; ++j)
      part[j] = FusedOut(static_cast<double>(sum[j]), emax[j] - p.frac_bits, p.out_bits, rne_out, acc_emin, inf_exp);
  };
  const auto end = [&](size_t i, size_t w0, const float* part, float* acc) __attribute__((always_inline)) {
    EndWindow(p, scale_prod_a, scale_b, (k + kb - 1) / kb, n, i, w0 / kb, j0, nc, part, acc);
  };
  FusedRows(p, n, k, c_in, i0, i1, j0, nc, out, step, end);
}

template <typename T>
bool FusedFast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
               const GemmPlan& plan, Exec exec, float* out) {
  const FusedParams& p = model.fused;
  std::vector<T> sa, sb;
  std::vector<int> ea, eb;
  SplitNominal(a, sa, ea);
  SplitNominal(b, sb, eb);
  const bool blocks = plan.a_blocks || plan.b_blocks;
  std::vector<float> ta, tb;
  std::vector<int> xa, xb;
  if (blocks) ScaleTables(a, b, plan, ta, tb);
  if (blocks && p.scale_in_products) {  // UE8M0 only: exponents add, significands are 1
    xa.resize(ta.size());
    xb.resize(tb.size());
    for (size_t i = 0; i < ta.size(); ++i) xa[i] = IlogbF(ta[i]);
    for (size_t i = 0; i < tb.size(); ++i) xb[i] = IlogbF(tb[i]);
  } else {  // no scale exponents: zeros, so the kernel's loops carry no branches
    const size_t nb = (plan.k + plan.kb - 1) / plan.kb;
    xa.assign(plan.m * nb, 0);
    xb.assign(nb * plan.n, 0);
  }
  FusedCtx ctx{&p, plan.n, plan.k, p.zero_exp, p.zero_exp > -1000};
  const bool at_promotion = blocks && !p.scale_in_products;
  ParallelRows(plan, exec, [&](size_t i0, size_t i1) {
    for (size_t j0 = 0; j0 < plan.n; j0 += kCols)
      FusedTile<T>(ctx, sa.data(), ea.data(), sb.data(), eb.data(), xa.data(), xb.data(), plan.kb, at_promotion ? ta.data() : nullptr,
                   at_promotion ? tb.data() : nullptr, c_in, i0, i1, j0, std::min(kCols, plan.n - j0), out);
  });
  return true;
}

// Bits of the largest |significand| product of two formats (for the exactness bounds).
int SigProductBits(const Format& a, const Format& b) {
  auto bits = [](const Format& f) { return f.IsInt() ? f.Bits() - 1 : f.man_bits + 1; };
  return bits(a) + bits(b);
}

// The Highway fused kernel (FP32 terms). It needs every nonzero product a * b exact and normal in FP32
// and 2^(F - emax) within FP32's range; outputs whose accumulation overflowed come back as NaN and are
// recomputed by the reference (TryFused).
bool FusedSimd(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
               const GemmPlan& plan, Exec exec, float* out) {
  const FusedParams& p = model.fused;
  const bool blocks = plan.a_blocks || plan.b_blocks;
  if (blocks && p.scale_in_products) return false;
  const int emin_sum = FormatEmin(a.elem) + FormatEmin(b.elem);
  if (Limits(a.elem).max_finite * Limits(b.elem).max_finite >= 0x1p127 || emin_sum < -126 ||
      p.frac_bits - emin_sum > 127 || QuantumExp(a.elem) + QuantumExp(b.elem) < -126)
    return false;
  simd::FusedGemmArgs g;
  g.zero_code = kZeroE;
  const std::array<float, 256> va = TableOf<float>(a.elem), vb = TableOf<float>(b.elem);
  const std::array<int32_t, 256> ea = NominalExps(a.elem), eb = NominalExps(b.elem);
  std::vector<float> ta, tb;
  g.m = plan.m;
  g.n = plan.n;
  g.k = plan.k;
  g.a = MatrixOf(a, va, false);
  g.ea = MatrixOf(a, ea, false);
  g.b = MatrixOf(b, vb, false);
  g.eb = MatrixOf(b, eb, false);
  g.step = p.step;
  g.frac_bits = p.frac_bits;
  g.out_bits = p.out_bits;
  g.rne_terms = p.term_round == FusedRound::kRne;
  g.rne_out = p.out_round == FusedRound::kRne;
  g.zero_exp = p.zero_exp;
  g.track_zero = p.zero_exp > -1000;
  g.promote = p.promote;
  if (blocks) {
    ScaleTables(a, b, plan, ta, tb);
    g.kb = plan.kb;
    g.sa = ta.data();
    g.sb = tb.data();
  }
  g.separate = p.promote_scale_separately;
  g.parallel = exec == Exec::kParallel;
  StartValues(c_in, plan, out);
  if (!simd::GemmFusedF32(g, out)) return false;
  return true;
}

// The Highway kernel of scales in the products (blackwell-mxf8f6f4), or of no scales at all, in FP64:
// every product a * 2^xa * b * 2^xb is exact in a double (at most 2 x 9 significant bits, exponents
// within +-300), and the caller's width bound keeps each step's sum exact. No promotion; the UE8M0 block
// along K a multiple of the step (each step under one scale pair).
bool ScaledSimd(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                const GemmPlan& plan, Exec exec, float* out) {
  const FusedParams& p = model.fused;
  const bool blocks = plan.a_blocks || plan.b_blocks;
  if (p.promote != 0 || p.group != 1 || p.out_bits > 24 || p.zero_exp < -1000 || (blocks && !p.scale_in_products))
    return false;
  if (a.elem.encoding == Encoding::kExponentOnly || b.elem.encoding == Encoding::kExponentOnly) return false;
  const size_t step = static_cast<size_t>(p.step);
  simd::ScaledFusedArgs g;
  g.m = plan.m;
  g.n = plan.n;
  g.k = plan.k;
  g.kb = blocks ? plan.kb : (plan.k + step - 1) / step * step;
  if (g.kb % step != 0) return false;
  const size_t nb = (plan.k + g.kb - 1) / g.kb;
  std::vector<int32_t> xa(plan.m * nb, 0), xb(nb * plan.n, 0);
  if (blocks) {
    std::vector<float> ta, tb;
    ScaleTables(a, b, plan, ta, tb);
    for (size_t i = 0; i < ta.size(); ++i) xa[i] = IlogbF(ta[i]);
    for (size_t i = 0; i < tb.size(); ++i) xb[i] = IlogbF(tb[i]);
  }
  const std::array<double, 256> va = TableOf<double>(a.elem), vb = TableOf<double>(b.elem);
  const std::array<int32_t, 256> ea = NominalExps(a.elem), eb = NominalExps(b.elem);
  g.a = MatrixOf(a, va, false);
  g.b = MatrixOf(b, vb, false);
  g.ea = MatrixOf(a, ea, false);
  g.eb = MatrixOf(b, eb, false);
  g.xa = xa.data();
  g.xb = xb.data();
  g.zero_code = kZeroE;
  g.step = p.step;
  g.frac_bits = p.frac_bits;
  g.out_bits = p.out_bits;
  g.man_bits = a.elem.man_bits + b.elem.man_bits;
  g.rne_terms = p.term_round == FusedRound::kRne;
  g.rne_out = p.out_round == FusedRound::kRne;
  g.zero_exp = p.zero_exp;
  g.parallel = exec == Exec::kParallel;
  StartValues(c_in, plan, out);
  if (!simd::GemmScaledF64(g, out)) return false;
  return true;
}

// ---- fused with exact groups (group > 1: MMA-Sim's GST, blackwell-mxf4nvf4) ------------------------

struct GroupCtx {
  const FusedParams* p;
  size_t n, k, kb, nb;  // kb: the scale block along K; nb: scale blocks along K
  bool scales_in, at_promotion;
};

// One tile, rows [i0, i1) and columns [j0, j0 + nc), in double. Per step: the accumulator's term, and
// one term per group: the group's exact sum P, times the group's two block scales (scales in products,
// nominal exponent = the scales' nominal exponents) or alone (nominal 0); a group without a nonzero
// product, or with a zero scale, is a zero term at zero_exp. The terms are truncated (or rounded) at
// 2^(emax - F) and summed exactly, and FusedOut rounds the sum. GroupFast's bounds keep every step exact.
// tv/tn: room for the terms of one step (groups per step x kCols).
QMX_GEMM_CLONES void GroupTile(const GroupCtx& ctx, const double* va, const double* vb, const float* ta, const int* xa,
                               const float* tb, const int* xb, const float* c_in, size_t i0, size_t i1, size_t j0,
                               size_t nc, double* tv, int* tn, float* out) {
  const FusedParams& p = *ctx.p;
  const size_t n = ctx.n, k = ctx.k, nb = ctx.nb, g = static_cast<size_t>(p.group);
  const bool rne_terms = p.term_round == FusedRound::kRne, rne_out = p.out_round == FusedRound::kRne;
  const auto step = [&](size_t i, size_t k0, size_t k1, float* part) __attribute__((always_inline)) {
    int ec[kCols], emax[kCols];
    double sc[kCols], sum[kCols];
    for (size_t j = 0; j < nc; ++j) {
      AccSplit(part[j], sc[j], ec[j]);
      emax[j] = ec[j] == kZeroE ? p.zero_exp : ec[j];
    }
    size_t groups = 0;
    for (size_t q0 = k0; q0 < k1; q0 += g, ++groups) {
      double* P = tv + groups * kCols;
      int* nom = tn + groups * kCols;
      bool nz[kCols];
      for (size_t j = 0; j < nc; ++j) {
        P[j] = 0.0;
        nz[j] = false;
      }
      for (size_t kk = q0; kk < std::min(k1, q0 + g); ++kk) {
        const double x = va[i * k + kk];
        if (x == 0) continue;
        const double* br = vb + kk * n + j0;
        for (size_t j = 0; j < nc; ++j) {
          P[j] += x * br[j];  // exact
          nz[j] = nz[j] || br[j] != 0;
        }
      }
      const size_t blk = q0 / ctx.kb;
      if (ctx.scales_in) {
        const double sa = ta[i * nb + blk];
        const int ea = xa[i * nb + blk];
        for (size_t j = 0; j < nc; ++j) {
          const double sb = tb[blk * n + j0 + j];
          const bool zero = !nz[j] || sa == 0 || sb == 0;
          P[j] *= sa * sb;  // exact
          nom[j] = zero ? p.zero_exp : ea + xb[blk * n + j0 + j];
        }
      } else {
        for (size_t j = 0; j < nc; ++j) nom[j] = nz[j] ? 0 : p.zero_exp;
      }
      for (size_t j = 0; j < nc; ++j) emax[j] = std::max(emax[j], nom[j]);
    }
    double f[kCols];
    for (size_t j = 0; j < nc; ++j) {
      const int d = ec[j] - emax[j] + p.frac_bits;  // sc < 2: below 2^-125 it keeps nothing
      const double t = d < -126 ? 0.0 : sc[j] * Pow2d(std::min(d, 1023));
      sum[j] = rne_terms ? std::nearbyint(t) : std::trunc(t);
      // 2^(F - emax), clamped to double's normal range: below it every term keeps nothing; above it
      // every term is zero.
      f[j] = Pow2d(std::clamp(p.frac_bits - emax[j], -1022, 1023));
    }
    for (size_t q = 0; q < groups; ++q) {
      const double* P = tv + q * kCols;
      for (size_t j = 0; j < nc; ++j) {
        const double t = P[j] * f[j];
        sum[j] += rne_terms ? std::nearbyint(t) : std::trunc(t);
      }
    }
    for (size_t j = 0; j < nc; ++j) part[j] = FusedOut(sum[j], emax[j] - p.frac_bits, p.out_bits, rne_out);
  };
  const auto end = [&](size_t i, size_t w0, const float* part, float* acc) __attribute__((always_inline)) {
    EndWindow(p, ctx.at_promotion ? ta : nullptr, tb, nb, n, i, w0 / ctx.kb, j0, nc, part, acc);
  };
  FusedRows(p, n, k, c_in, i0, i1, j0, nc, out, step, end);
}

// Significant bits of the widest value in a table (0 for zeros).
int MaxSigBits(const std::vector<float>& t) {
  // A normal number's significant bits are 24 - ctz(its significand, implicit bit set), so the widest
  // normal one's are 24 - ctz(the OR of all their significands); other nonzero values one by one.
  int bits = 0;
  uint32_t normal = 0;
  for (float v : t) {
    const uint32_t u = detail::F32Bits(v), field = (u >> 23) & 0xFF;
    if (field != 0 && field != 0xFF) normal |= (u & 0x7FFFFFu) | 0x800000u;
    else if (v != 0) bits = std::max(bits, SignificantBits(v));
  }
  return normal ? std::max(bits, 24 - __builtin_ctz(normal)) : bits;
}

// The Highway group kernel, where its extra bounds hold: group sums exact in FP32, no promotion (the
// accumulator carries across steps), scales in the products or no scales, groups inside scale blocks,
// results of at most 24 bits, the scaled operands, their products and group sums exact in FP32.
bool GroupSimd(const GemmOperand& a, const GemmOperand& b, const float* c_in, const FusedParams& p,
               const GemmPlan& plan, Exec exec, const std::vector<float>& ta, const std::vector<int>& xa,
               const std::vector<float>& tb, const std::vector<int>& xb, double p_max, float* out) {
  const bool blocks = plan.a_blocks || plan.b_blocks;
  if (p.promote != 0 || (blocks && !p.scale_in_products) || p.out_bits > 24 || p.frac_bits > 60 || p.zero_exp < -300)
    return false;
  const auto [xa_lo, xa_hi] = std::minmax_element(xa.begin(), xa.end());
  const auto [xb_lo, xb_hi] = std::minmax_element(xb.begin(), xb.end());
  // The kernel sums a * sa and b * sb in FP32: a term's LSB is at least 2^(xa + xb - lsb_drop) (the
  // elements' quanta times the scales' LSBs, 2^(x - mantissa bits)), its magnitude below
  // 2^(xa + xb + p_max + 2) (p_max: GroupFast's bound on a group sum's bits); both must stay within FP32's
  // range, subnormals included.
  const int man_a = blocks ? ScaleFractionBits(a) : 0, man_b = blocks ? ScaleFractionBits(b) : 0;
  const int lsb_drop = -(QuantumExp(a.elem) + QuantumExp(b.elem)) + man_a + man_b;
  if (*xa_lo + *xb_lo - lsb_drop < -149 || *xa_hi + *xb_hi + p_max + 2 > 127 ||
      *xa_lo + QuantumExp(a.elem) - man_a < -149 || *xb_lo + QuantumExp(b.elem) - man_b < -149 ||
      *xa_hi + Limits(a.elem).emax + 2 > 127 || *xb_hi + Limits(b.elem).emax + 2 > 127)
    return false;
  if (BlockSumBits(a.elem, b.elem, static_cast<size_t>(p.group)) + man_a + man_b > 24) return false;
  const std::array<float, 256> va = TableOf<float>(a.elem), vb = TableOf<float>(b.elem);
  simd::GroupGemmArgs g;
  g.m = plan.m;
  g.n = plan.n;
  g.k = plan.k;
  g.a = MatrixOf(a, va, false);
  g.b = MatrixOf(b, vb, false);
  // Without blocks the tables hold one column of ones (exponent 0) and kb covers K.
  const size_t gsz = static_cast<size_t>(p.group);
  g.kb = blocks ? plan.kb : (plan.k + gsz - 1) / gsz * gsz;
  g.sa = ta.data();
  g.sb = tb.data();
  g.xa = xa.data();
  g.xb = xb.data();
  g.group = p.group;
  g.step = p.step;
  g.frac_bits = p.frac_bits;
  g.out_bits = p.out_bits;
  g.lsb_drop = lsb_drop;
  g.rne_terms = p.term_round == FusedRound::kRne;
  g.rne_out = p.out_round == FusedRound::kRne;
  g.zero_exp = p.zero_exp;
  g.parallel = exec == Exec::kParallel;
  StartValues(c_in, plan, out);
  return simd::GemmGroupF32(g, out);
}

// The fast path of fused models with group > 1 (finite operands, float formats). It needs, in double:
// every group sum exact (BlockSumBits), times the scales' significands still exact, and each step's
// sum of truncated terms below 2^53: a term is below |P|max * 2^(F + 2) relative to 2^emax (the scales
// lie below twice 2^(nominal exponent)), the accumulator's below 2^(F + 1).
bool GroupFast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
               const GemmPlan& plan, Exec exec, float* out) {
  const FusedParams& p = model.fused;
  const size_t g = static_cast<size_t>(p.group), step = static_cast<size_t>(p.step);
  const bool blocks = plan.a_blocks || plan.b_blocks;
  GroupCtx ctx{&p, plan.n, plan.k, blocks ? plan.kb : plan.k, 1, blocks && p.scale_in_products, false};
  ctx.at_promotion = blocks && !p.scale_in_products;
  std::vector<float> ta(plan.m, 1.0f), tb(plan.n, 1.0f);
  if (blocks) {
    ScaleTables(a, b, plan, ta, tb);
    ctx.nb = (plan.k + plan.kb - 1) / plan.kb;
  }
  const int scale_bits = ctx.scales_in ? MaxSigBits(ta) + MaxSigBits(tb) : 0;
  if (BlockSumBits(a.elem, b.elem, g) + scale_bits > 53) return false;
  const double p_max = std::log2(static_cast<double>(g)) + Limits(a.elem).emax + 1 + Limits(b.elem).emax + 1;
  const double terms = std::ceil(static_cast<double>(std::min(step, plan.k)) / static_cast<double>(g)) + 1;
  if (std::log2(terms) + p_max + p.frac_bits + 2 >= 53) return false;
  std::vector<int> xa(ta.size()), xb(tb.size());
  const int esa = ScaleEmin(a), esb = ScaleEmin(b);
  for (size_t i = 0; i < ta.size(); ++i) xa[i] = ta[i] == 0 ? esa : std::max(IlogbF(ta[i]), esa);  // NominalExp
  for (size_t i = 0; i < tb.size(); ++i) xb[i] = tb[i] == 0 ? esb : std::max(IlogbF(tb[i]), esb);
  if (GroupSimd(a, b, c_in, p, plan, exec, ta, xa, tb, xb, p_max, out)) return true;
  const std::vector<double> va = Values<double>(a, false, exec), vb = Values<double>(b, false, exec);
  const size_t groups = (std::min(step, plan.k) + g - 1) / g;
  ParallelRows(plan, exec, [&](size_t i0, size_t i1) {
    std::vector<double> tv(groups * kCols);
    std::vector<int> tn(groups * kCols);
    for (size_t j0 = 0; j0 < plan.n; j0 += kCols)
      GroupTile(ctx, va.data(), vb.data(), ta.data(), xa.data(), tb.data(), xb.data(), c_in, i0, i1, j0,
                std::min(kCols, plan.n - j0), tv.data(), tn.data(), out);
  });
  return true;
}

// ---- MMA-Sim's zero rule (FusedParams::zero_operands) ---------------------------------------------
//
// The kernels above take one exponent, zero_exp, for every zero term. Run with zero_exp = -126, a zero
// accumulator is aligned as the rule aligns it, and a zero product or all-zero group lifts emax to -126,
// which changes nothing: a nonzero accumulator's nominal exponent is at least -126, and a zero one already
// puts -126 into the step. The rule gives a zero term instead the exponent of its operands: a zero element's
// -126 plus the other element's and the scales' (group 1), an all-zero group's (or a zero-scale group's) its
// scales' own (group > 1). The two emax differ only where such a zero term lies above -126 and above every
// other term of its step, and the sums differ only where that cuts a nonzero term. ZeroRuleRisks marks the
// outputs where that can happen; TryFused leaves them to the reference.

// The codes of o's format whose value is 0 (at most four, the first repeated to fill; false where there are
// none or more), so that the scans below compare bytes instead of looking each one up, and vectorize.
bool ZeroCodes(const GemmOperand& o, std::array<uint8_t, 4>& z) {
  const std::array<double, 256> v = CodeValues(o.elem);
  size_t count = 0;
  for (int c = 0; c < 256; ++c)
    if (v[c] == 0) {
      if (count == 4) return false;
      z[count++] = static_cast<uint8_t>(c);
    }
  if (count == 0) return false;
  for (size_t x = count; x < 4; ++x) z[x] = z[0];
  return true;
}
inline uint8_t IsNonzero(uint8_t c, const std::array<uint8_t, 4>& z) {
  return static_cast<uint8_t>((c != z[0]) & (c != z[1]) & (c != z[2]) & (c != z[3]));
}

// out[l] |= (codes[l] is nonzero) << bit for l < lines.
QMX_GEMM_CLONES void OrNonzeroBits(const uint8_t* codes, size_t lines, std::array<uint8_t, 4> z, int bit,
                                   uint64_t* out) {
  for (size_t l = 0; l < lines; ++l) out[l] |= uint64_t{IsNonzero(codes[l], z)} << bit;
}

// Whether some element of o is zero.
bool HasZeroElement(const GemmOperand& o) {
  std::array<uint8_t, 4> z;
  const uint8_t* codes = o.codes.data();
  const size_t size = o.codes.size();
  if (!ZeroCodes(o, z)) {
    const std::array<double, 256> v = CodeValues(o.elem);
    for (size_t x = 0; x < size; ++x)
      if (v[codes[x]] == 0) return true;
    return false;
  }
  uint8_t nonzero = 1;
  for (size_t x = 0; x < size; ++x) nonzero &= IsNonzero(codes[x], z);
  return nonzero == 0;
}

// Each cell (cell_len consecutive K) of each row of A, or of each column of B, as a mask of its nonzero
// elements (bit kk - cell start): A's m x cells, B's cells x n.
std::vector<uint64_t> NonzeroMasks(const GemmOperand& o, bool is_a, size_t lines, size_t k, size_t cell_len) {
  const std::array<double, 256> v = CodeValues(o.elem);
  std::array<uint8_t, 4> z;
  const bool few = ZeroCodes(o, z);
  uint8_t nonzero[256];
  for (int c = 0; c < 256; ++c) nonzero[c] = v[c] != 0;
  const size_t cells = (k + cell_len - 1) / cell_len;
  std::vector<uint64_t> mask(lines * cells, 0);
  // Along the codes' rows: A's rows hold K (a row's cells one after the other), B's rows one K of every
  // column.
  if (is_a) {
    for (size_t l = 0; l < lines; ++l)
      for (size_t q = 0; q < cells; ++q) {
        const uint8_t* cell = o.codes.data() + l * k + q * cell_len;
        uint64_t bits = 0;
        for (size_t t = 0; t < std::min(cell_len, k - q * cell_len); ++t) bits |= uint64_t{nonzero[cell[t]]} << t;
        mask[l * cells + q] = bits;
      }
    return mask;
  }
  for (size_t q = 0; q < cells; ++q)
    for (size_t kk = q * cell_len; kk < std::min(k, (q + 1) * cell_len); ++kk) {
      const int bit = static_cast<int>(kk - q * cell_len);
      const uint8_t* row = o.codes.data() + kk * lines;
      uint64_t* out = mask.data() + q * lines;
      if (few) {
        OrNonzeroBits(row, lines, z, bit, out);
      } else {
        for (size_t l = 0; l < lines; ++l) out[l] |= uint64_t{nonzero[row[l]]} << bit;
      }
    }
  return mask;
}

// The largest exponent MMA-Sim's rule gives a zero product of the two formats: a zero element's -126 plus the
// other format's largest nominal exponent (-252 where neither has a nonzero value).
int ZeroProductExp(const Format& a, const Format& b) {
  int top = kZeroE;
  for (const Format* f : {&a, &b})
    for (int e : NominalExps(*f)) top = std::max(top, e);
  return top == kZeroE ? -252 : -126 + top;
}

// Whether ZeroRuleRisks can bound the rule's differences (below); the reference runs the rest.
bool ZeroRuleBounded(const GemmOperand& a, const GemmOperand& b, const FusedParams& p, const GemmPlan& plan) {
  if (p.group == 1 && !((plan.a_blocks || plan.b_blocks) && p.scale_in_products)) {
    return FormatEmin(a.elem) + FormatEmin(b.elem) - p.frac_bits > ZeroProductExp(a.elem, b.elem);
  }
  const size_t len = p.group == 1 ? static_cast<size_t>(p.step) : static_cast<size_t>(p.group);
  return len <= 64 && static_cast<size_t>(p.step) % len == 0 &&
         (!(plan.a_blocks || plan.b_blocks) || !p.scale_in_products || plan.kb % len == 0);
}

// Writes NaN over out[i * n + j] where the zero rule may give another result than the kernels with
// zero_exp = -126 (see above), where ZeroRuleBounded holds:
//  - group 1 without scales in the products: a zero product's exponent is at most Z = -126 + the larger of
//    the formats' top exponents, and every nonzero product's at least emin_a + emin_b, above it, so only a
//    step without a nonzero product can differ, and only through a nonzero accumulator below 2^Z. A step's
//    nonzero result is at least 2^(emin_a + emin_b - F) (its unit), and a step without a product keeps c's
//    leading bit; with that bound above Z, only a nonzero C below 2^Z is marked.
//  - otherwise, cell by cell (a step for group 1, a group for group > 1): a cell is zero for (i, j) when
//    its products are all zero or a scale is zero, and its zero term lies at Z(i, j, cell) (the scales' sum,
//    plus -126 + the top exponent for group 1). Where Z > -126 and the step holds a nonzero cell or the
//    accumulator may be nonzero (C is, or an earlier step held a nonzero cell), the output is marked.
void ZeroRuleRisks(const GemmOperand& a, const GemmOperand& b, const float* c_in, const FusedParams& p,
                   const GemmPlan& plan, Exec exec, float* out) {
  const size_t m = plan.m, n = plan.n, k = plan.k;
  const bool scaled = (plan.a_blocks || plan.b_blocks) && p.scale_in_products;
  const int zero_product = ZeroProductExp(a.elem, b.elem);
  if (p.group == 1 && !scaled) {
    if (c_in)
      for (size_t x = 0; x < m * n; ++x)
        if (c_in[x] != 0 && NominalExp(c_in[x], -126) < zero_product) out[x] = CanonicalNanF();
    return;
  }
  const size_t step = static_cast<size_t>(p.step), len = p.group == 1 ? step : static_cast<size_t>(p.group);
  const size_t cells = (k + len - 1) / len, per_step = step / len;
  // Each cell's scales and their exponents (ZeroRuleExp: -126 for a zero scale); ones without scales.
  std::vector<float> ta(m, 1.0f), tb(n, 1.0f);
  if (scaled) ScaleTables(a, b, plan, ta, tb, len);
  const size_t a_cells = scaled ? cells : 1;
  std::vector<int> xa(ta.size(), 0), xb(tb.size(), 0);
  std::vector<uint8_t> b_nonzero(cells, 1);  // every column's scale of the cell is nonzero
  if (scaled) {
    const int esa = ScaleEmin(a), esb = ScaleEmin(b);
    for (size_t x = 0; x < ta.size(); ++x) xa[x] = ta[x] == 0 ? -126 : NominalExp(ta[x], esa);
    for (size_t x = 0; x < tb.size(); ++x) {
      xb[x] = tb[x] == 0 ? -126 : NominalExp(tb[x], esb);
      if (tb[x] == 0) b_nonzero[x / n] = 0;
    }
  }
  // Without a zero element or scale every cell holds a nonzero product for every output: nothing to mark.
  const auto zero_scale = [](const std::vector<float>& t) { return std::find(t.begin(), t.end(), 0.0f) != t.end(); };
  if (!zero_scale(ta) && !zero_scale(tb) && !HasZeroElement(a) && !HasZeroElement(b)) return;
  const int base = p.group == 1 ? zero_product : 0;  // a zero cell's exponent less its scales'
  const std::vector<uint64_t> ma = NonzeroMasks(a, true, m, k, len), mb = NonzeroMasks(b, false, n, k, len);
  // A row's cell with more nonzero elements than len less the fewest of any column's cell meets every
  // column's cell in a nonzero product.
  std::vector<int> fewest(cells, 64);
  for (size_t q = 0; q < cells; ++q)
    for (size_t j = 0; j < n; ++j) fewest[q] = std::min(fewest[q], __builtin_popcountll(mb[q * n + j]));
#pragma omp parallel for schedule(dynamic, 4) if (exec == Exec::kParallel && m * n * cells >= (size_t{1} << 20))
  for (long il = 0; il < static_cast<long>(m); ++il) {
    const size_t i = static_cast<size_t>(il);
    std::vector<uint8_t> live(n, 0), risky(n, 0), step_nz(n), zero_high(n);
    if (c_in)
      for (size_t j = 0; j < n; ++j) live[j] = c_in[i * n + j] != 0;
    for (size_t q0 = 0; q0 < cells; q0 += per_step) {
      std::fill(step_nz.begin(), step_nz.end(), 0);
      // every_nz: a cell of the step is nonzero for every column; checked: a cell was looked at column by column.
      bool checked = false, every_nz = false;
      for (size_t q = q0; q < std::min(cells, q0 + per_step); ++q) {
        const uint64_t row_mask = ma[i * cells + q];
        const int cell_len = static_cast<int>(std::min(len, k - q * len));
        const size_t sa = scaled ? i * a_cells + q : i, sb = scaled ? q * n : 0;
        if (ta[sa] != 0 && b_nonzero[q] && __builtin_popcountll(row_mask) + fewest[q] > cell_len) {
          every_nz = true;
          continue;
        }
        if (!checked) std::fill(zero_high.begin(), zero_high.end(), 0);
        checked = true;
        const bool a_zero = ta[sa] == 0;
        const int za = base + xa[sa];
        const uint64_t* mbq = mb.data() + q * n;
        for (size_t j = 0; j < n; ++j) {  // branch-free, so that it vectorizes
          const bool zero = a_zero | ((row_mask & mbq[j]) == 0) | (tb[sb + j] == 0);
          step_nz[j] |= static_cast<uint8_t>(!zero);
          zero_high[j] |= static_cast<uint8_t>(zero & (za + xb[sb + j] > -126));
        }
      }
      if (!checked) {
        std::fill(live.begin(), live.end(), 1);
        continue;
      }
      for (size_t j = 0; j < n; ++j) {
        const bool nz = every_nz || step_nz[j];
        if (zero_high[j] && (nz || live[j])) risky[j] = 1;
        live[j] = live[j] || nz;
      }
    }
    for (size_t j = 0; j < n; ++j)
      if (risky[j]) out[i * n + j] = CanonicalNanF();
  }
}

// ---- AMD CDNA3's FP8 step (FusedParams::cdna3_halves) ------------------------------------------------

// gemm_ref.cc's Cdna3Step in doubles for one output and one step of len products: x[q * xs] and y[q * ys]
// the elements' values, ex and ey their exponents under the zero rule (-126 for zero), c the accumulator. Each
// half's products (even and odd q) times 2^(F - top) cut toward zero, top the half's largest exponent; the half
// sums floored by 2^(top - E) to the step's largest E; that floored by 2^(7 - (M - E)) into units of 2^(M - 31)
// and C floored into units of 2^(M - 24), M = max(E, C's exponent), unless C lies more than 25 binades below M;
// their sum rounded. Every value is an integer below 2^53 held exactly: a product of two FP8 values has at most
// 8 significant bits and lies below 2^(top + 2), so a half's 8 cut terms sum below 2^29, the floored sums below
// 2^30, the total below 2^38; floor of an exact double product by a power of two is FloorShift.
inline float Cdna3StepOne(int F, bool rne_out, const double* x, const int16_t* ex, size_t xs, const double* y,
                          const int16_t* ey, size_t ys, size_t len, float c) {
  constexpr int kNone = -100000;  // an empty half's top (the even half is never empty)
  int top[2] = {kNone, kNone};
  for (size_t q = 0; q < len; ++q) top[q & 1] = std::max(top[q & 1], ex[q * xs] + ey[q * ys]);
  const double f[2] = {Pow2d(F - std::max(top[0], -1000)), Pow2d(F - std::max(top[1], -1000))};
  double sum[2] = {0.0, 0.0};
  for (size_t q = 0; q < len; ++q) sum[q & 1] += std::trunc(x[q * xs] * y[q * ys] * f[q & 1]);
  const int e = std::max(top[0], top[1]);
  const double s0 = std::floor(sum[0] * Pow2d(top[0] - e));  // e - top <= 283
  const double s1 = top[1] != kNone ? std::floor(sum[1] * Pow2d(top[1] - e)) : 0.0;
  uint32_t cb;
  std::memcpy(&cb, &c, 4);
  const int ec = std::max(static_cast<int>((cb >> 23) & 0xFF) - 127, -126);  // -126 for zero and subnormals
  const int mx = std::max(e, ec);
  const double t = std::floor((s0 + s1) * Pow2d(31 - F - (mx - e)));  // an integer times 2^(>= 0), or floored
  const double cq = c != 0 && ec >= mx - 25 ? std::floor(static_cast<double>(c) * Pow2d(24 - mx)) : 0.0;
  return FusedOut(t + cq * 128.0, mx - 31, 24, rne_out);
}

// The operands of the CDNA3 kernel: each element's value, its exponent under the zero rule (-126 for zero) and
// its lowest set bit (kCdna3NoLsb for zero). A as it is (rows padded to a multiple of kRows with zeros); B in
// panels of kCdna3Cols columns (its columns padded to a multiple of that), each panel's K rows of 32 side by
// side, so that a step's rows share cache sets with nothing of their own panel.
constexpr size_t kCdna3Cols = 32;
using V8d = double __attribute__((vector_size(64)));
using V32s = int16_t __attribute__((vector_size(64)));
using V8dU = double __attribute__((vector_size(64), aligned(8)));  // loads from the packed operands
using V32sU = int16_t __attribute__((vector_size(64), aligned(2)));
constexpr int16_t kCdna3NoLsb = 8000;  // a zero's: a product with a zero lies above every bound
struct Cdna3Operand {
  std::vector<double> v;
  std::vector<int16_t> e, l;
};
// One operand's code tables, for the portable tiles (Cdna3Pack) and the Highway kernel (simd::Cdna3GemmArgs):
// values (0 for non-finite codes, which OperandsFinite has excluded), nominal exponents (-126 for zero), lowest
// set bits (kCdna3NoLsb for zero) and odd significands (the value / 2^lsb; 0 for zero).
struct Cdna3Tables {
  std::array<double, 256> val;
  std::array<int16_t, 256> nom, lsb;
  std::array<int32_t, 256> sig;
  explicit Cdna3Tables(const Format& f) : val(CodeValues(f)) {
    const std::array<int32_t, 256> e = NominalExps(f);
    for (int c = 0; c < 256; ++c) {
      if (!std::isfinite(val[c])) val[c] = 0.0;
      const Exact x = ExactOf(val[c]);  // an odd significand
      nom[c] = static_cast<int16_t>(e[c] == kZeroE ? -126 : e[c]);
      lsb[c] = val[c] != 0 ? static_cast<int16_t>(x.lsb) : kCdna3NoLsb;
      sig[c] =
          val[c] != 0 ? static_cast<int32_t>(x.neg ? -static_cast<int64_t>(x.mag) : static_cast<int64_t>(x.mag)) : 0;
    }
  }
};

Cdna3Operand Cdna3Pack(const GemmOperand& o, size_t rows, size_t cols, size_t ld, bool panels) {
  const Cdna3Tables t(o.elem);
  Cdna3Operand p;
  p.v.assign(rows * ld, 0.0);
  p.e.assign(rows * ld, -126);
  p.l.assign(rows * ld, kCdna3NoLsb);
  for (size_t r = 0; r < o.rows; ++r)
    for (size_t q = 0; q < cols; ++q) {
      const uint8_t c = o.codes[r * o.cols + q];
      const size_t at = panels ? (q / kCdna3Cols * rows + r) * kCdna3Cols + q % kCdna3Cols : r * ld + q;
      p.v[at] = t.val[c];
      p.e[at] = t.nom[c];
      p.l[at] = t.lsb[c];
    }
  return p;
}

// The CDNA3 step for kRows rows from i0 (A padded) and 32 columns from j0 (B padded; rows and nc say which
// outputs exist). Per output and step: P the products' sum in FP64, E their largest exponent and L their lowest
// set bit (a product's is the sum of its elements'), each over the step's k, vectorized along the columns.
// Where L >= E - F, no product has a bit below 2^(E - F): no half cuts a term or floors a bit away, P is exact
// (products below 2^(E + 2), at most 16 of them, all multiples of 2^(E - F): F + 6 bits), and the step is
// Cdna3Step's tail on it: t = floor(P 2^(31 - M)), M = max(E, C's exponent), plus C floored unless dropped,
// rounded. Other outputs take Cdna3StepOne. An accumulator that left the finite range gives the canonical NaN,
// and the caller's reference redoes its row.
QMX_GEMM_CLONES void Cdna3Chunk(const FusedParams& p, size_t k, size_t n, const Cdna3Operand& a, const Cdna3Operand& b,
                                const float* c_in, size_t i0, size_t rows, size_t j0, size_t nc, float* out) {
  const int F = p.frac_bits;
  const bool rne_out = p.out_round == FusedRound::kRne;
  const size_t panel = j0 / kCdna3Cols * k * kCdna3Cols;  // B's panel of columns j0 ..
  alignas(64) float acc[kRows][kCdna3Cols];
  alignas(64) int32_t overflow[kRows][kCdna3Cols];
  for (size_t r = 0; r < kRows; ++r)
    for (size_t j = 0; j < kCdna3Cols; ++j) {
      acc[r][j] = c_in && r < rows && j < nc ? c_in[(i0 + r) * n + j0 + j] : 0.0f;
      overflow[r][j] = 0;
    }
  for (size_t k0 = 0; k0 < k; k0 += static_cast<size_t>(p.step)) {
    const size_t k1 = std::min(k, k0 + static_cast<size_t>(p.step));
    // The kRows x 32 sums, tops and lowest bits in registers over the step (GCC's vector types: 16 vectors of 8
    // doubles and 8 of 32 int16 on AVX-512, split in halves or quarters on narrower targets).
    V8d vs[kRows][4];
    V32s vt[kRows], vl[kRows];
    for (size_t r = 0; r < kRows; ++r) {
      for (int q = 0; q < 4; ++q) vs[r][q] = V8d{} + 0.0;
      vt[r] = V32s{} - 32000;
      vl[r] = V32s{} + 32000;
    }
    for (size_t kk = k0; kk < k1; ++kk) {
      const size_t bk = panel + kk * kCdna3Cols;
      const V8dU* yp = reinterpret_cast<const V8dU*>(&b.v[bk]);
      const V8d y[4] = {yp[0], yp[1], yp[2], yp[3]};
      const V32s ey = *reinterpret_cast<const V32sU*>(&b.e[bk]);
      const V32s ly = *reinterpret_cast<const V32sU*>(&b.l[bk]);
      for (size_t r = 0; r < kRows; ++r) {
        const size_t at = (i0 + r) * k + kk;
        const double x = a.v[at];
        for (int q = 0; q < 4; ++q) vs[r][q] += x * y[q];  // exact: at most 8 significant bits
        const V32s t = ey + a.e[at], l = ly + a.l[at];
        vt[r] = vt[r] > t ? vt[r] : t;
        vl[r] = vl[r] < l ? vl[r] : l;
      }
    }
    for (size_t r = 0; r < kRows; ++r) {
      const size_t row = (i0 + r) * k;
      alignas(64) double sum[kCdna3Cols];
      alignas(64) int16_t top[kCdna3Cols], low[kCdna3Cols];
      for (int q = 0; q < 4; ++q) reinterpret_cast<V8d*>(sum)[q] = vs[r][q];
      *reinterpret_cast<V32s*>(top) = vt[r];
      *reinterpret_cast<V32s*>(low) = vl[r];
      alignas(64) int32_t slow[kCdna3Cols];
      // The step's total in units of 2^(mx - 31) (an integer below 2^40), rounded: under RNE one conversion of
      // the exact double total * 2^(mx - 31) (FusedOut's rule to 24 bits with FP32's -126 and 2^128 is
      // IEEE's FP32 rounding, subnormals and overflow included; the total is never -0), else FusedOut.
      // Each loop is branch-free, so that it vectorizes.
      const auto tail = [&](auto rne) {
        for (size_t j = 0; j < kCdna3Cols; ++j) {
          const int e = top[j];
          const float c = acc[r][j];
          uint32_t cb;
          std::memcpy(&cb, &c, 4);
          const int ec = std::max(static_cast<int>((cb >> 23) & 0xFF) - 127, -126);
          const int mx = std::max(e, ec);
          const double t = std::floor(sum[j] * Pow2d(31 - mx));
          const double cq = c != 0 && ec >= mx - 25 ? std::floor(static_cast<double>(c) * Pow2d(24 - mx)) : 0.0;
          const double total = t + cq * 128.0;
          slow[j] = static_cast<int32_t>(low[j] < e - F);
          if constexpr (decltype(rne)::value) acc[r][j] = static_cast<float>(total * Pow2d(mx - 31));
          else acc[r][j] = FusedOut(total, mx - 31, 24, false);
          if (slow[j]) acc[r][j] = c;  // recomputed below
        }
      };
      if (rne_out) tail(std::true_type{});
      else tail(std::false_type{});
      int32_t any = 0;
      for (size_t j = 0; j < kCdna3Cols; ++j) any |= slow[j];
      for (size_t j = 0; any != 0 && j < nc && r < rows; ++j)
        if (slow[j])
          acc[r][j] = Cdna3StepOne(F, rne_out, &a.v[row + k0], &a.e[row + k0], 1, &b.v[panel + k0 * kCdna3Cols + j],
                                   &b.e[panel + k0 * kCdna3Cols + j], kCdna3Cols, k1 - k0, acc[r][j]);
      for (size_t j = 0; j < kCdna3Cols; ++j)
        overflow[r][j] |= static_cast<int32_t>(!(std::fabs(acc[r][j]) <= FLT_MAX));
    }
  }
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < nc; ++j) out[(i0 + r) * n + j0 + j] = overflow[r][j] ? CanonicalNanF() : acc[r][j];
}

// The Highway kernel's exact step on values and nominal exponents it rebuilt from its packs (Cdna3StepOne); an
// accumulator that left the finite range stays there.
float Cdna3ExactValues(int F, const double* x, const int16_t* ex, const double* y, const int16_t* ey, size_t n,
                       float c) {
  if (!std::isfinite(c)) return c;
  return Cdna3StepOne(F, true, x, ex, 1, y, ey, 1, n, c);
}

// The Highway kernel's exact step for output (i, j) over K k0 .. k1 (Cdna3StepOne on the elements' values and
// exponents from their codes); an accumulator that left the finite range stays there.
float Cdna3SlowStep(const simd::Cdna3GemmArgs& g, size_t i, size_t j, size_t k0, size_t k1, float c) {
  if (!std::isfinite(c)) return c;
  double x[64], y[64];
  int16_t ex[64], ey[64];
  for (size_t q = 0; q < k1 - k0; ++q) {
    const uint8_t ca = g.a_codes[i * g.k + k0 + q], cb = g.b_codes[(k0 + q) * g.n + j];
    x[q] = g.a_val[ca];
    ex[q] = g.a_nom[ca];
    y[q] = g.b_val[cb];
    ey[q] = g.b_nom[cb];
  }
  return Cdna3StepOne(g.frac_bits, true, x, ex, 1, y, ey, 1, k1 - k0, c);
}

// CDNA3's FP8 MFMA (finite operands, 8-bit float formats without block scales; PlanGemm refuses those): the
// Highway kernel where the output rounds to nearest even and a step is even (up to 64 K), else the portable
// tiles.
bool Cdna3Fast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const FusedParams& p,
               const GemmPlan& plan, Exec exec, float* out) {
  if (plan.a_blocks || plan.b_blocks || p.frac_bits != 24 || p.step > 64 || p.promote != 0 || p.group != 1 ||
      a.elem.Bits() > 8 || b.elem.Bits() > 8 || SigProductBits(a.elem, b.elem) > 10)
    return false;
  if (p.out_round == FusedRound::kRne && p.step % 2 == 0) {
    const Cdna3Tables ta(a.elem), tb(b.elem);
    simd::Cdna3GemmArgs g;
    g.m = plan.m;
    g.n = plan.n;
    g.k = plan.k;
    g.step = p.step;
    g.frac_bits = p.frac_bits;
    g.a_codes = a.codes.data();
    g.b_codes = b.codes.data();
    g.a_val = ta.val.data();
    g.b_val = tb.val.data();
    g.a_nom = ta.nom.data();
    g.b_nom = tb.nom.data();
    g.a_lsb = ta.lsb.data();
    g.b_lsb = tb.lsb.data();
    g.a_sig = ta.sig.data();
    g.b_sig = tb.sig.data();
    g.c = c_in;
    g.slow = Cdna3SlowStep;
    g.exact = Cdna3ExactValues;
    g.parallel = exec == Exec::kParallel;
    if (simd::GemmCdna3(g, out)) return true;
  }
  const size_t mp = (plan.m + kRows - 1) / kRows * kRows, np = (plan.n + kCdna3Cols - 1) / kCdna3Cols * kCdna3Cols;
  const Cdna3Operand pa = Cdna3Pack(a, mp, plan.k, plan.k, false), pb = Cdna3Pack(b, plan.k, plan.n, np, true);
  // Tiles of 32 columns by up to 256 rows, column-major: a thread's consecutive row tiles reuse B's 32-column
  // panel (K x 32 values, exponents and lowest bits) from its cache; rows streamed past it once a panel.
  constexpr size_t kBlockRows = 256;
  const size_t panels = np / kCdna3Cols, blocks = (plan.m + kBlockRows - 1) / kBlockRows;
  const long tiles = static_cast<long>(panels * blocks);
#pragma omp parallel for schedule(dynamic) if (exec == Exec::kParallel)
  for (long t = 0; t < tiles; ++t) {
    const detail::ScopedDefaultFpEnv fp_env;
    const size_t j0 = static_cast<size_t>(t) / blocks * kCdna3Cols, r0 = static_cast<size_t>(t) % blocks * kBlockRows;
    for (size_t i0 = r0; i0 < std::min(plan.m, r0 + kBlockRows); i0 += kRows)
      Cdna3Chunk(p, plan.k, plan.n, pa, pb, c_in, i0, std::min(kRows, plan.m - i0), j0,
                 std::min(kCdna3Cols, plan.n - j0), out);
  }
  return true;
}

// The kernels of the fused models, by their bounds (out: the accumulations, before alpha).
bool FusedKernels(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                  const GemmPlan& plan, Exec exec, float* out) {
  const FusedParams& p = model.fused;
  if (p.cdna3_halves) return Cdna3Fast(a, b, c_in, p, plan, exec, out);
  if (p.group != 1) return !p.acc_fp16 && GroupFast(a, b, c_in, model, plan, exec, out);
  const bool blocks = plan.a_blocks || plan.b_blocks;
  if (blocks && p.scale_in_products &&
      (a.scale_format != ScaleFormat::kUe8m0 || b.scale_format != ScaleFormat::kUe8m0 || !plan.a_blocks || !plan.b_blocks))
    return false;
  // A term is below 2^(F+2); the accumulator term below 2^(F+1); step + 1 of them must sum exactly.
  const int width = p.frac_bits + 2 + static_cast<int>(std::ceil(std::log2(p.step + 1.0)));
  const int sig_bits = SigProductBits(a.elem, b.elem);
  // The Highway kernels round to FP32; an FP16 accumulator takes the portable tiles.
  if (width <= 24 && sig_bits <= 24) {
    if (!p.acc_fp16 && FusedSimd(a, b, c_in, model, plan, exec, out)) return true;
    return FusedFast<float>(a, b, c_in, model, plan, exec, out);
  }
  if (width <= 53) {
    if (!p.acc_fp16 && ScaledSimd(a, b, c_in, model, plan, exec, out)) return true;
    return FusedFast<double>(a, b, c_in, model, plan, exec, out);
  }
  return false;
}

}  // namespace

bool TryFused(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
              const GemmPlan& plan, Exec exec, float* out) {
  const FusedParams& p = model.fused;
  // MMA-Sim's zero rule runs on the kernels where it adds nothing to them: no promotion (whose FP32 adds
  // would see the signs of zero parts), FP32 accumulators, operands at their own exponents, one-step halves.
  if (p.zero_operands && !p.cdna3_halves && (p.promote != 0 || p.operand_emin != 0 || !ZeroRuleBounded(a, b, p, plan)))
    return false;
  if (!OperandsFinite(a, b, c_in, plan, exec)) return false;
  if (a.elem.IsInt() || b.elem.IsInt()) return false;
  if (!p.zero_operands || p.cdna3_halves) {  // (CDNA3's tiles align zero elements at -126 themselves)
    if (!FusedKernels(a, b, c_in, model, plan, exec, out)) return false;
  } else {
    AccumModel kernel = model;
    kernel.fused.zero_operands = false;
    kernel.fused.zero_exp = -126;
    if (!FusedKernels(a, b, c_in, kernel, plan, exec, out)) return false;
    // The rule's step cut to zero is +0 (the kernels keep the sign of a nonzero sum cut to zero); the last
    // step's is the output.
    // (on the bits, branch-free, so that it vectorizes: a conditional store of each -0 does not)
    const size_t total = plan.m * plan.n;  // (held: the stores through out could alias plan)
    for (size_t x = 0; x < total; ++x) {
      uint32_t bits;
      std::memcpy(&bits, out + x, 4);
      bits &= (bits & 0x7FFFFFFFu) != 0 ? ~0u : 0u;
      std::memcpy(out + x, &bits, 4);
    }
    ZeroRuleRisks(a, b, c_in, p, plan, exec, out);
  }
  ApplyAlpha(plan, out);
  RecomputeNanRows(a, b, c_in, model, plan, out, exec);
  return true;
}

}  // namespace qmx::detail
