// gemm_fast.cc: fast GEMM kernels, each equal bit for bit to its model's reference (gemm_ref.cc).
// They keep the references' arithmetic exact by construction: FP8/FP6/FP4 products and the truncated
// terms of a fused step are small integers times powers of two, held exactly in float or double,
// so any evaluation order and vector width gives the same bits. OpenMP splits output rows; every
// output is computed by one thread in a fixed order. The Highway kernels (gemm/gemm_simd.cc) serve
// every SIMD target with FMA; the loops below are the portable path for the others (SSE4, SCALAR) and
// for the cases the Highway kernels leave out (fused models with FP64 terms).
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "gemm/exact_sum.h"
#include "fp_env.h"
#include "gemm/gemm_internal.h"
#include "gemm/gemm_simd.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && !defined(QMX_NO_CLONES)
#define QMX_GEMM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define QMX_GEMM_CLONES
#endif

namespace qmx::internal {
namespace {

constexpr int kZeroE = -30000;  // nominal exponent of a zero element: far below every real one
constexpr size_t kCols = 128;   // output columns per tile
constexpr size_t kRows = 4;     // output rows per tile

bool FormatFinite(const GemmOperand& o) {
  bool special[256];
  for (int c = 0; c < 256; ++c) {
    const CodeClass cl = (static_cast<uint64_t>(c) & ~o.elem.CodeMask()) ? CodeClass::kZero : ClassifyCode(o.elem, static_cast<uint8_t>(c));
    special[c] = cl == CodeClass::kNan || cl == CodeClass::kInf;
  }
  for (uint8_t c : o.codes)
    if (special[c]) return false;
  return true;
}
bool ScalesFinite(const GemmOperand& o) {
  for (float s : o.scales)
    if (!std::isfinite(s)) return false;
  return std::isfinite(o.tensor_scale);
}
// No NaN or Inf among the codes, scales and C: the kernels below leave specials to the reference.
bool OperandsFinite(const GemmOperand& a, const GemmOperand& b, const float* c_in, const GemmPlan& plan) {
  if (!FormatFinite(a) || !FormatFinite(b) || !ScalesFinite(a) || !ScalesFinite(b)) return false;
  if (c_in)
    for (size_t i = 0; i < plan.m * plan.n; ++i)
      if (!std::isfinite(c_in[i])) return false;
  return true;
}

// out *= alpha (the per-tensor scales), as the reference applies them after accumulation.
void ApplyAlpha(const GemmPlan& plan, float* out) {
  if (plan.has_alpha)
    for (size_t i = 0; i < plan.m * plan.n; ++i) out[i] = plan.alpha * out[i];
}

// out = the accumulators' start values: C, or +0.
void StartValues(const float* c_in, const GemmPlan& plan, float* out) {
  if (c_in) std::memcpy(out, c_in, plan.m * plan.n * sizeof(float));
  else std::fill(out, out + plan.m * plan.n, 0.0f);
}

// The value of every byte read as a code of f (0 for bytes wider than f's codes).
std::array<double, 256> CodeValues(const Format& f) {
  std::array<double, 256> t;
  for (int c = 0; c < 256; ++c) t[c] = (static_cast<uint64_t>(c) & ~f.CodeMask()) ? 0.0 : DecodeToDouble(f, c);
  return t;
}

// A code-to-value table in T, and an operand as the Highway kernels read it (with `scaled`, each value
// times its block scale in FP32, as fp32-seq forms its operands).
template <typename T>
std::array<T, 256> TableOf(const Format& f) {
  const std::array<double, 256> v = CodeValues(f);
  std::array<T, 256> t;
  for (int c = 0; c < 256; ++c) t[c] = static_cast<T>(v[c]);
  return t;
}
template <typename T>
simd::CodeMatrix<T> MatrixOf(const GemmOperand& o, const std::array<T, 256>& table, bool scaled) {
  simd::CodeMatrix<T> m;
  m.codes = o.codes.data();
  m.table = table.data();
  m.rows = o.rows;
  m.cols = o.cols;
  if (scaled && o.block_rows != 0) {
    m.scales = o.scales.data();
    m.block_rows = o.block_rows;
    m.block_cols = o.block_cols;
    m.scale_cols = o.scale_cols;
  }
  return m;
}

template <typename T>
void ParallelRows(const GemmPlan& plan, Exec exec, const T& body) {
  const long tiles = static_cast<long>((plan.m + kRows - 1) / kRows);
#pragma omp parallel for schedule(dynamic) if (exec == Exec::kParallel)
  for (long t = 0; t < tiles; ++t) {
    const detail::ScopedDefaultFpEnv fp_env;
    body(static_cast<size_t>(t) * kRows, std::min(plan.m, static_cast<size_t>(t + 1) * kRows));
  }
}

inline float Pow2f(int e) {  // 2^e for -126 <= e <= 127
  const uint32_t b = static_cast<uint32_t>(e + 127) << 23;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline double Pow2d(int e) {  // 2^e for -1022 <= e <= 1023
  const uint64_t b = static_cast<uint64_t>(e + 1023) << 52;
  double f;
  std::memcpy(&f, &b, 8);
  return f;
}

// The rows holding a NaN, recomputed by the reference: with finite operands a fast kernel's NaN marks an
// accumulator that overflowed, which the kernels leave to the reference.
void RecomputeNanRows(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                      const GemmPlan& plan, float* out) {
  for (size_t i = 0; i < plan.m; ++i)
    for (size_t j = 0; j < plan.n; ++j)
      if (std::isnan(out[i * plan.n + j])) {
        GemmRefRows(a, b, c_in, model, plan, i, i + 1, out);
        break;
      }
}

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

// The FP32 accumulator as a term: (significand, Exp) with Exp floored at -126; zero as (0, kZeroE).
template <typename T>
inline void AccSplit(float c, T& s, int& e) {
  uint32_t b;
  std::memcpy(&b, &c, 4);
  const int field = (b >> 23) & 0xFF;
  if ((b & 0x7FFFFFFF) == 0) {
    s = 0;
    e = kZeroE;
    return;
  }
  e = field == 0 ? -126 : field - 127;
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
// beside RoundFused because it makes the whole 1024^3 hopper-fp8 GEMM about 20% faster; the tests
// hold the two to the same bits through fast = reference.
inline float FusedOut(double s, int unit, int bits, bool rne) {
  if (s == 0) return 0.0f;
  const double a = std::fabs(s);
  uint64_t ab;
  std::memcpy(&ab, &a, 8);
  const int msb = static_cast<int>((ab >> 52) & 0x7FF) - 1023;  // a >= 1
  int e = msb + unit;
  if (e < -126) e = -126;
  const int q = e - (bits - 1);
  const double scaled = a * Pow2d(unit - q);  // unit - q >= -(msb + 1): within double's range
  const double kept = rne ? std::nearbyint(scaled) : std::trunc(scaled);
  const double v = kept * Pow2d(q);
  if (v >= 0x1p128) return s < 0 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  const float f = static_cast<float>(v);
  return s < 0 ? -f : f;
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
  const auto step = [&](size_t i, size_t k0, size_t k1, float* part) __attribute__((always_inline)) {
    int emax[kCols], emin[kCols], ec[kCols];
    T sc[kCols], sum[kCols];
    for (size_t j = 0; j < nc; ++j) {
      AccSplit(part[j], sc[j], ec[j]);
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
    for (size_t j = 0; j < nc; ++j) part[j] = FusedOut(static_cast<double>(sum[j]), emax[j] - p.frac_bits, p.out_bits, rne_out);
  };
  const auto end = [&](size_t i, size_t w0, const float* part, float* acc) __attribute__((always_inline)) {
    EndWindow(p, scale_prod_a, scale_b, (k + kb - 1) / kb, n, i, w0 / kb, j0, nc, part, acc);
  };
  FusedRows(p, n, k, c_in, i0, i1, j0, nc, out, step, end);
}

// Block scale of A at (row i, K block b) and of B at (K block b, column j), as dense per-K-block tables.
// `len` (default: the plan's scale block) may be any divisor of the scale block.
void ScaleTables(const GemmOperand& a, const GemmOperand& b, const GemmPlan& plan, std::vector<float>& ta,
                 std::vector<float>& tb, size_t len = 0) {
  if (len == 0) len = plan.kb;
  const size_t nb = (plan.k + len - 1) / len;
  ta.assign(plan.m * nb, 1.0f);
  tb.assign(nb * plan.n, 1.0f);
  for (size_t i = 0; i < plan.m; ++i)
    for (size_t blk = 0; blk < nb; ++blk) ta[i * nb + blk] = a.ScaleOf(i, blk * len);
  for (size_t blk = 0; blk < nb; ++blk)
    for (size_t j = 0; j < plan.n; ++j) tb[blk * plan.n + j] = b.ScaleOf(blk * len, j);
}

// Smallest and largest binary exponent in a table of power-of-two scales.
std::pair<int, int> ExpRange(const std::vector<float>& t) {
  int lo = 1000, hi = -1000;
  for (float v : t) {
    const int e = std::ilogb(v);
    lo = std::min(lo, e);
    hi = std::max(hi, e);
  }
  return {lo, hi};
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
    for (size_t i = 0; i < ta.size(); ++i) xa[i] = std::ilogb(ta[i]);
    for (size_t i = 0; i < tb.size(); ++i) xb[i] = std::ilogb(tb[i]);
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
  ApplyAlpha(plan, out);
  RecomputeNanRows(a, b, c_in, model, plan, out);
  return true;
}

// Bits of the largest |significand| product of two formats (for the exactness bounds).
int SigProductBits(const Format& a, const Format& b) {
  auto bits = [](const Format& f) { return f.IsInt() ? f.Bits() - 1 : f.man_bits + 1; };
  return bits(a) + bits(b);
}

// Exponent of a format's smallest quantum (its smallest positive value).
int QuantumExp(const Format& f) { return static_cast<int>(std::floor(std::log2(Limits(f).min_subnormal))); }

// The Highway fused kernel (FP32 terms). It needs every nonzero product a * b exact and normal in FP32
// and 2^(F - emax) within FP32's range; outputs whose accumulation overflowed come back as NaN and are
// recomputed here by the reference.
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
  ApplyAlpha(plan, out);
  RecomputeNanRows(a, b, c_in, model, plan, out);
  return true;
}

template <typename T>
std::vector<T> Values(const GemmOperand& o, bool scaled, Exec exec);
bool GroupFast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
               const GemmPlan& plan, Exec exec, float* out);

bool TryFused(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
              const GemmPlan& plan, Exec exec, float* out) {
  const FusedParams& p = model.fused;
  if (!OperandsFinite(a, b, c_in, plan)) return false;
  if (a.elem.IsInt() || b.elem.IsInt()) return false;
  if (p.group != 1) return GroupFast(a, b, c_in, model, plan, exec, out);
  const bool blocks = plan.a_blocks || plan.b_blocks;
  if (blocks && p.scale_in_products &&
      (a.scale_format != ScaleFormat::kUe8m0 || b.scale_format != ScaleFormat::kUe8m0 || !plan.a_blocks || !plan.b_blocks))
    return false;
  // A term is below 2^(F+2); the accumulator term below 2^(F+1); step + 1 of them must sum exactly.
  const int width = p.frac_bits + 2 + static_cast<int>(std::ceil(std::log2(p.step + 1.0)));
  const int sig_bits = SigProductBits(a.elem, b.elem);
  if (width <= 24 && sig_bits <= 24) {
    if (FusedSimd(a, b, c_in, model, plan, exec, out)) return true;
    return FusedFast<float>(a, b, c_in, model, plan, exec, out);
  }
  if (width <= 53) return FusedFast<double>(a, b, c_in, model, plan, exec, out);
  return false;
}

// ---- fp32-seq ----------------------------------------------------------------------------------

// The element values as T (exact in FP32 for formats of <= 8 bits), or with `scaled` the scaled operand
// as the fp32-seq reference forms it, fl32(value * block scale). Rows in parallel.
template <typename T>
std::vector<T> Values(const GemmOperand& o, bool scaled, Exec exec) {
  const std::array<double, 256> table = CodeValues(o.elem);
  T t[256];
  for (int c = 0; c < 256; ++c) t[c] = static_cast<T>(table[c]);
  std::vector<T> v(o.codes.size());
  const long rows = static_cast<long>(o.rows);
#pragma omp parallel for schedule(static) if (exec == Exec::kParallel)
  for (long r = 0; r < rows; ++r) {
    const detail::ScopedDefaultFpEnv fp_env;
    const uint8_t* cr = o.codes.data() + r * o.cols;
    T* vr = v.data() + r * o.cols;
    if (!scaled || o.block_rows == 0) {
      for (size_t c = 0; c < o.cols; ++c) vr[c] = t[cr[c]];
      continue;
    }
    const float* srow = o.scales.data() + (static_cast<size_t>(r) / o.block_rows) * o.scale_cols;
    for (size_t c0 = 0; c0 < o.cols; c0 += o.block_cols) {
      const float sc = srow[c0 / o.block_cols];
      for (size_t c = c0; c < std::min(o.cols, c0 + o.block_cols); ++c) vr[c] = static_cast<T>(static_cast<float>(t[cr[c]]) * sc);
    }
  }
  return v;
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

int BlockSumBits(const Format& fa, const Format& fb, size_t count);

// Significant bits of the widest value in a table (0 for zeros).
int MaxSigBits(const std::vector<float>& t) {
  int bits = 0;
  for (float v : t) {
    if (v != 0) bits = std::max(bits, Msb128(ExactOf(v).mag) + 1);
  }
  return bits;
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
  const int esa = ScaleEmin(a.scale_format), esb = ScaleEmin(b.scale_format);
  for (size_t i = 0; i < ta.size(); ++i) xa[i] = ta[i] == 0 ? esa : NominalExp(ta[i], esa);
  for (size_t i = 0; i < tb.size(); ++i) xb[i] = tb[i] == 0 ? esb : NominalExp(tb[i], esb);
  const std::vector<double> va = Values<double>(a, false, exec), vb = Values<double>(b, false, exec);
  const size_t groups = (std::min(step, plan.k) + g - 1) / g;
  ParallelRows(plan, exec, [&](size_t i0, size_t i1) {
    std::vector<double> tv(groups * kCols);
    std::vector<int> tn(groups * kCols);
    for (size_t j0 = 0; j0 < plan.n; j0 += kCols)
      GroupTile(ctx, va.data(), vb.data(), ta.data(), xa.data(), tb.data(), xb.data(), c_in, i0, i1, j0,
                std::min(kCols, plan.n - j0), tv.data(), tn.data(), out);
  });
  ApplyAlpha(plan, out);
  RecomputeNanRows(a, b, c_in, model, plan, out);
  return true;
}

QMX_GEMM_CLONES void Fp32SeqTile(const float* a, const float* b, const float* c_in, size_t n, size_t k, size_t i0,
                                 size_t i1, size_t j0, size_t nc, float* out) {
  for (size_t i = i0; i < i1; ++i) {
    float acc[kCols];
    for (size_t j = 0; j < nc; ++j) acc[j] = c_in ? c_in[i * n + j0 + j] : 0.0f;
    for (size_t kk = 0; kk < k; ++kk) {
      const float x = a[i * k + kk];
      const float* y = b + kk * n + j0;
      for (size_t j = 0; j < nc; ++j) acc[j] = std::fma(x, y[j], acc[j]);
    }
    for (size_t j = 0; j < nc; ++j) out[i * n + j0 + j] = acc[j];
  }
}

bool Fp32SeqFast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const GemmPlan& plan, Exec exec,
                 float* out) {
  StartValues(c_in, plan, out);
  const std::array<float, 256> ta = TableOf<float>(a.elem), tb = TableOf<float>(b.elem);
  if (simd::GemmF32Seq(MatrixOf(a, ta, true), MatrixOf(b, tb, true), out, exec == Exec::kParallel)) {
    ApplyAlpha(plan, out);
    return true;
  }
  const std::vector<float> fa = Values<float>(a, true, exec), fb = Values<float>(b, true, exec);
  ParallelRows(plan, exec, [&](size_t i0, size_t i1) {
    for (size_t j0 = 0; j0 < plan.n; j0 += kCols)
      Fp32SeqTile(fa.data(), fb.data(), c_in, plan.n, plan.k, i0, i1, j0, std::min(kCols, plan.n - j0), out);
  });
  ApplyAlpha(plan, out);
  return true;
}

}  // namespace

void GemmF32SeqValues(const float* a, const float* b, size_t m, size_t n, size_t k, Exec exec, float* out) {
  GemmPlan plan;
  plan.m = m;
  plan.n = n;
  plan.k = k;
  ParallelRows(plan, exec, [&](size_t i0, size_t i1) {
    for (size_t j0 = 0; j0 < n; j0 += kCols) Fp32SeqTile(a, b, nullptr, n, k, i0, i1, j0, std::min(kCols, n - j0), out);
  });
}

namespace {

// ---- exact and block-exact with exact double block sums --------------------------------------------

// Bits an exact sum of `count` products of two formats can span (largest magnitude over smallest LSB).
int BlockSumBits(const Format& fa, const Format& fb, size_t count) {
  auto span = [](const Format& f) {  // exponent of the top of the range minus that of the smallest LSB
    const FormatLimits l = Limits(f);
    return (l.emax + 1) - static_cast<int>(std::floor(std::log2(l.min_subnormal)));
  };
  return span(fa) + span(fb) + static_cast<int>(std::ceil(std::log2(std::max<size_t>(count, 1)))) + 1;
}

// acc + v rounded once to FP32 (acc an FP32 value, v a double): the exact sum by TwoSum, rounded to odd
// at double precision, then to FP32, which rounds correctly since 53 >= 24 + 2.
inline float AddRoundOnce(float acc, double v) {
  const double x = acc;
  if (!std::isfinite(acc)) return static_cast<float>(x + v);  // an overflowed accumulator stays Inf
  const double s = x + v;
  const double bb = s - x;
  const double err = (x - (s - bb)) + (v - bb);
  double r = s;
  if (err != 0) {
    uint64_t bits;
    std::memcpy(&bits, &r, 8);
    if ((bits & 1) == 0) {
      bits += ((err > 0) == (s > 0)) ? 1 : static_cast<uint64_t>(-1);
      std::memcpy(&r, &bits, 8);
    }
  }
  return static_cast<float>(r);
}

// Block sums of one tile: p[r][j] = sum over the K block of a[i][k] * b[k][j], exact in double (the
// bound is checked by the caller), starting from -0 so an all-negative-zero block keeps its sign.
QMX_GEMM_CLONES void BlockSums(const double* a, const double* b, size_t n, size_t k, size_t i0, size_t i1, size_t j0,
                               size_t nc, size_t k0, size_t k1, double* p) {
  for (size_t i = i0; i < i1; ++i) {
    double* pr = p + (i - i0) * kCols;
    for (size_t j = 0; j < nc; ++j) pr[j] = -0.0;
    for (size_t kk = k0; kk < k1; ++kk) {
      const double x = a[i * k + kk];
      const double* y = b + kk * n + j0;
      for (size_t j = 0; j < nc; ++j) pr[j] = std::fma(x, y[j], pr[j]);
    }
  }
}


// The Highway kernels for exact and block-exact (the caller has checked the formats, the finiteness,
// the UE8M0 scales and that block sums are exact in FP64). Block sums exact in FP32 run in FP32 when
// every scale product sa * sb is an FP32 value (the fma then rounds c + S * sa * sb once).
bool ExactFamilySimd(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                     const GemmPlan& plan, Exec exec, const std::vector<float>& ta, const std::vector<float>& tb, float* out) {
  if (plan.k == 0) return false;
  simd::BlockGemmArgs g;
  g.m = plan.m;
  g.n = plan.n;
  g.k = plan.k;
  g.kb = plan.kb;
  g.sa = ta.data();
  g.sb = tb.data();
  g.parallel = exec == Exec::kParallel;
  StartValues(c_in, plan, out);
  const bool exact = model.kind == AccumKind::kExact;
  const std::array<double, 256> da = TableOf<double>(a.elem), db = TableOf<double>(b.elem);
  if (exact)
    return simd::GemmExactF64(g, MatrixOf(a, da, false), MatrixOf(b, db, false), QuantumExp(a.elem) + QuantumExp(b.elem),
                              c_in != nullptr, out);
  const auto [alo, ahi] = ExpRange(ta);
  const auto [blo, bhi] = ExpRange(tb);
  bool done;
  if (BlockSumBits(a.elem, b.elem, plan.kb) <= 24 && alo + blo >= -149 && ahi + bhi <= 127) {
    const std::array<float, 256> fa = TableOf<float>(a.elem), fb = TableOf<float>(b.elem);
    done = simd::GemmBlockF32(g, MatrixOf(a, fa, false), MatrixOf(b, fb, false), out);
  } else {
    done = simd::GemmBlockF64(g, MatrixOf(a, da, false), MatrixOf(b, db, false), out);
  }
  if (!done) return false;
  ApplyAlpha(plan, out);
  RecomputeNanRows(a, b, c_in, model, plan, out);
  return true;
}

bool ExactFamilyFast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                     const GemmPlan& plan, Exec exec, float* out) {
  const bool exact = model.kind == AccumKind::kExact;
  if (a.elem.IsInt() || b.elem.IsInt()) return false;
  if (!OperandsFinite(a, b, c_in, plan)) return false;
  if ((plan.a_blocks && a.scale_format != ScaleFormat::kUe8m0) || (plan.b_blocks && b.scale_format != ScaleFormat::kUe8m0))
    return false;
  if (exact && plan.has_alpha) return false;  // the reference folds the tensor scales into each product
  if (BlockSumBits(a.elem, b.elem, plan.kb) > 53) return false;
  std::vector<float> ta, tb;
  ScaleTables(a, b, plan, ta, tb);
  if (ExactFamilySimd(a, b, c_in, model, plan, exec, ta, tb, out)) return true;
  const std::vector<double> da = Values<double>(a, false, exec), db = Values<double>(b, false, exec);
  const size_t nb = (plan.k + plan.kb - 1) / plan.kb;
  ParallelRows(plan, exec, [&](size_t i0, size_t i1) {
    std::vector<double> p(kRows * kCols);
    std::vector<ExactSum> sums(exact ? kRows * kCols : 0);
    std::vector<char> neg_zero(kRows * kCols);
    for (size_t j0 = 0; j0 < plan.n; j0 += kCols) {
      const size_t nc = std::min(kCols, plan.n - j0);
      float acc[kRows * kCols];
      for (size_t i = i0; i < i1; ++i)
        for (size_t j = 0; j < nc; ++j) {
          const size_t t = (i - i0) * kCols + j;
          acc[t] = c_in ? c_in[i * plan.n + j0 + j] : 0.0f;
          if (exact) {
            sums[t].Clear();
            sums[t].AddDouble(acc[t]);
            neg_zero[t] = c_in ? (acc[t] == 0 && std::signbit(acc[t])) : 1;
          }
        }
      for (size_t blk = 0; blk < nb; ++blk) {
        const size_t k0 = blk * plan.kb, k1 = std::min(plan.k, k0 + plan.kb);
        BlockSums(da.data(), db.data(), plan.n, plan.k, i0, i1, j0, nc, k0, k1, p.data());
        for (size_t i = i0; i < i1; ++i) {
          const double sa = ta[i * nb + blk];
          for (size_t j = 0; j < nc; ++j) {
            const size_t t = (i - i0) * kCols + j;
            const double v = p[t] * sa * static_cast<double>(tb[blk * plan.n + j0 + j]);  // powers of two: exact
            if (exact) {
              sums[t].AddDouble(v);
              neg_zero[t] = neg_zero[t] && v == 0 && std::signbit(v);
            } else {
              acc[t] = AddRoundOnce(acc[t], v);
            }
          }
        }
      }
      for (size_t i = i0; i < i1; ++i)
        for (size_t j = 0; j < nc; ++j) {
          const size_t t = (i - i0) * kCols + j;
          out[i * plan.n + j0 + j] = exact ? sums[t].RoundToFloat(neg_zero[t] && plan.k + (c_in ? 1 : 0) > 0) : acc[t];
        }
    }
  });
  ApplyAlpha(plan, out);  // block-exact only: exact refuses tensor scales above
  return true;
}

}  // namespace

bool GemmFast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
              const GemmPlan& plan, Exec exec, float* out) {
  if (plan.m == 0 || plan.n == 0) return true;
  switch (model.kind) {
    case AccumKind::kFused: return TryFused(a, b, c_in, model, plan, exec, out);
    case AccumKind::kFp32Seq: return Fp32SeqFast(a, b, c_in, plan, exec, out);
    case AccumKind::kExact:
    case AccumKind::kBlockExact: return ExactFamilyFast(a, b, c_in, model, plan, exec, out);
    default: return false;
  }
}

}  // namespace qmx::internal
