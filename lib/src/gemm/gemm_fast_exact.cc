// gemm_fast_exact.cc: the fast paths of the exact and block-exact models, equal bit for bit to gemm_ref.cc:
// block sums exact in FP64 (or FP32), scaled by powers of two (or, for exact, by any positive scales as
// split products), then an exact accumulator (exact) or one rounding per block (block-exact); the Highway
// kernels first, portable tiles otherwise.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "gemm/exact_sum.h"
#include "gemm/gemm_fast.h"

namespace qmx::detail {

// ---- exact and block-exact with exact double block sums --------------------------------------------

// Bits an exact sum of `count` products of two formats can span (largest magnitude over smallest LSB).
int BlockSumBits(const Format& fa, const Format& fb, size_t count) {
  auto span = [](const Format& f) {  // exponent of the top of the range minus that of the smallest LSB
    const FormatLimits l = Limits(f);
    return (l.emax + 1) - static_cast<int>(std::floor(std::log2(l.min_subnormal)));
  };
  return span(fa) + span(fb) + static_cast<int>(std::ceil(std::log2(std::max<size_t>(count, 1)))) + 1;
}

namespace {

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

// acc + v rounded once to FP32 (acc an FP32 value, v a double): the exact sum by TwoSum, rounded to odd
// at double precision, then to FP32, which rounds correctly since 53 >= 24 + 2.
inline float AddRoundOnce(float acc, double v) {
  const double x = acc;
  if (!std::isfinite(acc)) return static_cast<float>(x + v);  // an overflowed accumulator stays Inf
  double err;
  const double s = TwoSum(x, v, err);
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
  RecomputeNanRows(a, b, c_in, model, plan, out, exec);
  return true;
}

// ---- exact with any positive scales: E4M3 and FP32 block scales, tensor and per-line scales -----------
//
// The reference sums a*b*sa*sb*ta*tb exactly per product. Within a scale block sa and sb are constant, so
// the block's contribution is S * (sa*sb) * u with S the block's exact sum of a*b (a double, as above) and u
// the output's second-level factor (ta*tb, or TE's alpha). sa*sb and ta*tb are products of two floats, exact
// in double; S * w and each part times u split exactly into two doubles by an FMA (TwoProduct), so four
// doubles carry each block's exact value into the accumulator. Scales must be finite and positive (a zero or
// negative scale would make the sign of a zero product depend on the single products, which S has merged),
// and the parts must stay inside the accumulator's and double's exponent range: otherwise the reference runs.

// Exponent range [lo, hi] (ilogb) of positive finite values; false if one is not positive and finite.
bool PositiveExpRange(const float* v, size_t n, int& lo, int& hi) {
  for (size_t i = 0; i < n; ++i) {
    if (!(v[i] > 0.0f) || !std::isfinite(v[i])) return false;
    const int e = std::ilogb(v[i]);
    lo = std::min(lo, e);
    hi = std::max(hi, e);
  }
  return true;
}

// The second-level factor u of output (i, j), as the reference forms it: TA * TB exactly, or TE's alpha.
inline double SecondLevel(const GemmOperand& a, const GemmOperand& b, const GemmPlan& plan, size_t i, size_t j) {
  if (plan.rule != AlphaRule::kDecode) return plan.AlphaAt(i, j);
  return static_cast<double>(a.row_scales.empty() ? a.tensor_scale : a.row_scales[i]) *
         static_cast<double>(b.col_scales.empty() ? b.tensor_scale : b.col_scales[j]);
}

bool ExactScaledFast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const GemmPlan& plan, Exec exec,
                     float* out) {
  std::vector<float> ta, tb;
  ScaleTables(a, b, plan, ta, tb);
  int alo = 1000, ahi = -1000, blo = 1000, bhi = -1000, ulo = 1000, uhi = -1000, u_lsb = 0;
  if (!PositiveExpRange(ta.data(), ta.size(), alo, ahi) || !PositiveExpRange(tb.data(), tb.size(), blo, bhi)) return false;
  if (plan.rule != AlphaRule::kDecode) {
    for (size_t i = 0; i < plan.m; ++i)
      for (size_t j = 0; j < plan.n; ++j) {
        const float u = plan.AlphaAt(i, j);
        if (!PositiveExpRange(&u, 1, ulo, uhi)) return false;
      }
    u_lsb = ulo - 23;
  } else {
    int rlo = 1000, rhi = -1000, clo = 1000, chi = -1000;
    const std::vector<float> one_a{a.tensor_scale}, one_b{b.tensor_scale};
    const std::vector<float>& rows = a.row_scales.empty() ? one_a : a.row_scales;
    const std::vector<float>& cols = b.col_scales.empty() ? one_b : b.col_scales;
    if (!PositiveExpRange(rows.data(), rows.size(), rlo, rhi) || !PositiveExpRange(cols.data(), cols.size(), clo, chi))
      return false;
    ulo = rlo + clo;
    u_lsb = ulo - 46;
    uhi = rhi + chi + 1;
  }
  // Every part is a nonzero multiple of lsb(S) * lsb(w) * lsb(u) (an FP32 value's LSB is 2^(ilogb - 23)), and
  // AddDouble places a part's 53-bit significand 52 bits below its leading bit: that must not pass below the
  // accumulator. The largest part is below the block sum's top times the scales' tops, with room above it for
  // the accumulator's carries. Both bounds also keep every part a normal, finite double.
  const int q = QuantumExp(a.elem) + QuantumExp(b.elem);
  const int lo = q + (alo - 23) + (blo - 23) + u_lsb - 52;
  const int hi = q + BlockSumBits(a.elem, b.elem, plan.kb) + (ahi + 1) + (bhi + 1) + (uhi + 1);
  if (lo < ExactSum::kLowExp || hi > ExactSum::kHighExp - 72) return false;
  const std::vector<double> da = Values<double>(a, false, exec), db = Values<double>(b, false, exec);
  const size_t nb = (plan.k + plan.kb - 1) / plan.kb;
  ParallelRows(plan, exec, [&](size_t i0, size_t i1) {
    std::vector<double> p(kRows * kCols), u(kRows * kCols);
    std::vector<ExactSum> sums(kRows * kCols);
    std::vector<char> neg_zero(kRows * kCols);
    for (size_t j0 = 0; j0 < plan.n; j0 += kCols) {
      const size_t nc = std::min(kCols, plan.n - j0);
      for (size_t i = i0; i < i1; ++i)
        for (size_t j = 0; j < nc; ++j) {
          const size_t t = (i - i0) * kCols + j;
          const float c = c_in ? c_in[i * plan.n + j0 + j] : 0.0f;
          sums[t].Clear();
          sums[t].AddDouble(c);
          neg_zero[t] = c_in ? (c == 0 && std::signbit(c)) : 1;
          u[t] = SecondLevel(a, b, plan, i, j0 + j);  // once per output, not per block
        }
      for (size_t blk = 0; blk < nb; ++blk) {
        const size_t k0 = blk * plan.kb, k1 = std::min(plan.k, k0 + plan.kb);
        BlockSums(da.data(), db.data(), plan.n, plan.k, i0, i1, j0, nc, k0, k1, p.data());
        for (size_t i = i0; i < i1; ++i) {
          const double sa = ta[i * nb + blk];
          for (size_t j = 0; j < nc; ++j) {
            const size_t t = (i - i0) * kCols + j;
            const double s = p[t];
            if (s == 0) {  // positive factors keep the block sum's sign, which is -0 only if every product was
              neg_zero[t] = neg_zero[t] && std::signbit(s);
              continue;
            }
            neg_zero[t] = 0;
            sums[t].AddProduct3(s, sa * static_cast<double>(tb[blk * plan.n + j0 + j]), u[t]);
          }
        }
      }
      for (size_t i = i0; i < i1; ++i)
        for (size_t j = 0; j < nc; ++j) {
          const size_t t = (i - i0) * kCols + j;
          out[i * plan.n + j0 + j] = sums[t].RoundToFloat(neg_zero[t] && plan.k + (c_in ? 1 : 0) > 0);
        }
    }
  });
  return true;
}

}  // namespace

bool ExactFamilyFast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                     const GemmPlan& plan, Exec exec, float* out) {
  const bool exact = model.kind == AccumKind::kExact;
  if (a.elem.IsInt() || b.elem.IsInt()) return false;
  if (!OperandsFinite(a, b, c_in, plan, exec)) return false;
  if (BlockSumBits(a.elem, b.elem, plan.kb) > 53) return false;
  const bool pow2_blocks = (!plan.a_blocks || a.scale_format == ScaleFormat::kUe8m0) &&
                           (!plan.b_blocks || b.scale_format == ScaleFormat::kUe8m0);
  // exact folds the tensor scales into each product, and E4M3 / FP32 block scales are not powers of two.
  if (exact && (!pow2_blocks || plan.has_alpha)) return ExactScaledFast(a, b, c_in, plan, exec, out);
  if (!pow2_blocks) return false;
  std::vector<float> ta, tb;
  ScaleTables(a, b, plan, ta, tb);
  // block-exact with a rounding step of several scale blocks (cdna4-mx) takes the portable tiles below; a
  // step inside one block (no block scales along K, or blocks longer than the step) the reference.
  if (!exact && plan.xstep % plan.kb != 0) return false;
  const size_t per = exact ? 1 : plan.xstep / plan.kb;
  if (per == 1 && ExactFamilySimd(a, b, c_in, model, plan, exec, ta, tb, out)) return true;
  // Portable tiles. exact: the split-product tiles above serve power-of-two scales too (their parts are then
  // the products themselves: w exact, u = 1, the low halves zero).
  if (exact) return ExactScaledFast(a, b, c_in, plan, exec, out);
  const std::vector<double> da = Values<double>(a, false, exec), db = Values<double>(b, false, exec);
  const size_t nb = (plan.k + plan.kb - 1) / plan.kb;
  ParallelRows(plan, exec, [&](size_t i0, size_t i1) {
    std::vector<double> p(kRows * kCols);
    // Steps of several blocks: each output's running double sum from the accumulator, which TwoSum proves
    // exact or not, the step's block sums (for an inexact step, summed again on the exact accumulator), and
    // whether all of it is -0, which the reference's sum then keeps.
    const size_t lanes = per > 1 ? kRows * kCols : 0;
    std::vector<double> run(lanes), hist(lanes * per);
    std::vector<float> start(lanes);
    std::vector<char> neg_zero(lanes), inexact(lanes);
    for (size_t j0 = 0; j0 < plan.n; j0 += kCols) {
      const size_t nc = std::min(kCols, plan.n - j0);
      float acc[kRows * kCols];
      for (size_t i = i0; i < i1; ++i)
        for (size_t j = 0; j < nc; ++j) acc[(i - i0) * kCols + j] = c_in ? c_in[i * plan.n + j0 + j] : 0.0f;
      for (size_t blk = 0; blk < nb; ++blk) {
        const size_t k0 = blk * plan.kb, k1 = std::min(plan.k, k0 + plan.kb);
        BlockSums(da.data(), db.data(), plan.n, plan.k, i0, i1, j0, nc, k0, k1, p.data());
        const bool first = blk % per == 0, last = (blk + 1) % per == 0 || blk + 1 == nb;
        for (size_t i = i0; i < i1; ++i) {
          const double sa = ta[i * nb + blk];
          for (size_t j = 0; j < nc; ++j) {
            const size_t t = (i - i0) * kCols + j;
            const double v = p[t] * sa * static_cast<double>(tb[blk * plan.n + j0 + j]);  // powers of two: exact
            if (per == 1) {
              acc[t] = AddRoundOnce(acc[t], v);
              continue;
            }
            if (first) {
              run[t] = start[t] = acc[t];
              neg_zero[t] = acc[t] == 0 && std::signbit(acc[t]);
              inexact[t] = 0;
            }
            hist[t * per + blk % per] = v;
            double e;
            run[t] = TwoSum(run[t], v, e);
            inexact[t] = inexact[t] || e != 0 || std::isnan(e);
            neg_zero[t] = neg_zero[t] && v == 0 && std::signbit(v);
            if (!last) continue;
            if (!inexact[t]) {  // the exact sum in one double: its FP32 rounding is the step's
              acc[t] = run[t] == 0 ? (neg_zero[t] ? -0.0f : 0.0f) : static_cast<float>(run[t]);
              continue;
            }
            ExactSum sum;
            sum.AddDouble(start[t]);
            for (size_t q = 0; q <= blk % per; ++q) sum.AddDouble(hist[t * per + q]);
            acc[t] = sum.RoundToFloat(neg_zero[t]);
          }
        }
      }
      for (size_t i = i0; i < i1; ++i)
        for (size_t j = 0; j < nc; ++j) out[i * plan.n + j0 + j] = acc[(i - i0) * kCols + j];
    }
  });
  ApplyAlpha(plan, out);
  return true;
}

}  // namespace qmx::detail
