// gemm_fast.cc: fast GEMM kernels, each equal bit for bit to its model's reference (gemm_ref.cc).
// They keep the references' arithmetic exact by construction: FP8/FP6/FP4 products and the truncated
// terms of a fused step are small integers times powers of two, held exactly in float or double,
// so any evaluation order and vector width gives the same bits. OpenMP splits output rows; every
// output is computed by one thread in a fixed order. The Highway kernels (gemm/gemm_simd.cc) serve
// every SIMD target with FMA; the loops of these files are the portable path for the others (SSE4, SCALAR)
// and for the cases the Highway kernels leave out (fused models with FP64 terms). This file: the shared checks
// and tables, fp32-seq and the dispatch; gemm_fast_fused.cc: fused models; gemm_fast_exact.cc: exact ones.
#include "gemm/gemm_fast.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

namespace qmx::detail {
namespace {

bool FormatFinite(const GemmOperand& o, Exec exec) {
  uint8_t special[256];
  for (int c = 0; c < 256; ++c) {
    const CodeClass cl = (static_cast<uint64_t>(c) & ~o.elem.CodeMask()) ? CodeClass::kZero : ClassifyCode(o.elem, static_cast<uint8_t>(c));
    special[c] = cl == CodeClass::kNan || cl == CodeClass::kInf;
  }
  const uint8_t* codes = o.codes.data();
  const long n = static_cast<long>(o.codes.size());
  // Most formats' specials are the top magnitudes (E5M2's Inf and NaNs, E4M3's NaN) or none (FP6, FP4):
  // then a compare per byte, which vectorizes, stands in for the table.
  const uint8_t sign = static_cast<uint8_t>(o.elem.Bits() == 8 ? 0x80 : 0);
  int top = 256;  // the smallest special magnitude
  for (int c = 0; c < 256; ++c)
    if (special[c]) top = std::min(top, c & ~sign);
  bool by_magnitude = true;
  for (int c = 0; c < 256; ++c) by_magnitude = by_magnitude && (special[c] != 0) == ((c & ~sign) >= top);
  if (by_magnitude && top == 256) return true;
  uint8_t any = 0;
  if (by_magnitude) {
    const uint8_t mag = static_cast<uint8_t>(~sign), t = static_cast<uint8_t>(top);
#pragma omp parallel for schedule(static) reduction(| : any) if (exec == Exec::kParallel && n >= (1L << 16))
    for (long i = 0; i < n; ++i) any |= static_cast<uint8_t>((codes[i] & mag) >= t);
  } else {
#pragma omp parallel for schedule(static) reduction(| : any) if (exec == Exec::kParallel && n >= (1L << 16))
    for (long i = 0; i < n; ++i) any |= special[codes[i]];
  }
  return any == 0;
}
bool ScalesFinite(const GemmOperand& o) {
  for (float s : o.scales)
    if (!std::isfinite(s)) return false;
  for (const auto* v : {&o.row_scales, &o.col_scales})
    for (float s : *v)
      if (!std::isfinite(s)) return false;
  return std::isfinite(o.tensor_scale);
}

}  // namespace

// No NaN or Inf among the codes, scales and C: the fast kernels leave specials to the reference.
bool OperandsFinite(const GemmOperand& a, const GemmOperand& b, const float* c_in, const GemmPlan& plan, Exec exec) {
  if (!FormatFinite(a, exec) || !FormatFinite(b, exec) || !ScalesFinite(a) || !ScalesFinite(b)) return false;
  if (c_in)
    for (size_t i = 0; i < plan.m * plan.n; ++i)
      if (!std::isfinite(c_in[i])) return false;
  return true;
}

// out *= alpha (the per-tensor scales), as the reference applies them after accumulation.
void ApplyAlpha(const GemmPlan& plan, float* out) {
  if (!plan.has_alpha) return;
  if (!plan.PerLine()) {
    // (held in locals: a store through out could alias plan, which would keep the loop scalar)
    const float alpha = plan.alpha;
    const size_t total = plan.m * plan.n;
    for (size_t i = 0; i < total; ++i) out[i] = alpha * out[i];
    return;
  }
  for (size_t i = 0; i < plan.m; ++i)
    for (size_t j = 0; j < plan.n; ++j) out[i * plan.n + j] = plan.AlphaAt(i, j) * out[i * plan.n + j];
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

// The rows holding a NaN, recomputed by the reference: with finite operands a fast kernel's NaN marks an
// accumulator that overflowed, which the kernels leave to the reference.
void RecomputeNanRows(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                      const GemmPlan& plan, float* out, Exec exec) {
  // Rows are independent: each row's scan and recomputation touch that row alone.
#pragma omp parallel for schedule(dynamic, 16) if (exec == Exec::kParallel && plan.m * plan.n >= (size_t{1} << 16))
  for (long il = 0; il < static_cast<long>(plan.m); ++il) {
    const size_t i = static_cast<size_t>(il);
    const float* row = out + i * plan.n;
    uint32_t top = 0;  // the largest magnitude's bits: a NaN's are above Inf's (a max reduction vectorizes)
    for (size_t j = 0; j < plan.n; ++j) top = std::max(top, detail::F32Bits(row[j]) & 0x7FFFFFFFu);
    if (top > 0x7F800000u) GemmRefRows(a, b, c_in, model, plan, i, i + 1, out);
  }
}

// Block scale of A at (row i, K block b) and of B at (K block b, column j), as dense per-K-block tables.
// `len` (default: the plan's scale block) may be any divisor of the scale block.
void ScaleTables(const GemmOperand& a, const GemmOperand& b, const GemmPlan& plan, std::vector<float>& ta,
                 std::vector<float>& tb, size_t len) {
  if (len == 0) len = plan.kb;
  const size_t nb = (plan.k + len - 1) / len;
  ta.assign(plan.m * nb, 1.0f);
  tb.assign(nb * plan.n, 1.0f);
  // GemmOperand::ScaleOf's indices with each division once per row, block or column, not twice per
  // element (this pass runs on one thread before every scaled product).
  if (a.block_rows != 0) {
    std::vector<size_t> col(nb);
    for (size_t blk = 0; blk < nb; ++blk) col[blk] = blk * len / a.block_cols;
    for (size_t i = 0; i < plan.m; ++i) {
      const float* srow = a.scales.data() + (i / a.block_rows) * a.scale_cols;
      for (size_t blk = 0; blk < nb; ++blk) ta[i * nb + blk] = srow[col[blk]];
    }
  }
  if (b.block_rows != 0) {
    std::vector<size_t> col(plan.n);
    for (size_t j = 0; j < plan.n; ++j) col[j] = j / b.block_cols;
    for (size_t blk = 0; blk < nb; ++blk) {
      const float* srow = b.scales.data() + (blk * len / b.block_rows) * b.scale_cols;
      for (size_t j = 0; j < plan.n; ++j) tb[blk * plan.n + j] = srow[col[j]];
    }
  }
}

// Exponent of a format's smallest quantum (its smallest positive value).
int QuantumExp(const Format& f) { return static_cast<int>(std::floor(std::log2(Limits(f).min_subnormal))); }

// ---- fp32-seq ----------------------------------------------------------------------------------

namespace {

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

bool GemmFast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
              const GemmPlan& plan, Exec exec, float* out) {
  if (plan.m == 0 || plan.n == 0) return true;
  // K = 0: no products, the output is C (and alpha) as the reference's loops leave it; the kernels' tilings
  // along K divide by the number of steps.
  if (plan.k == 0) return false;
  switch (model.kind) {
    case AccumKind::kFused:
      // FP16 operand exponents (split=hmma): the reference path only.
      if (model.fused.operand_emin != 0) return false;
      return TryFused(a, b, c_in, model, plan, exec, out);
    case AccumKind::kFp32Seq: return Fp32SeqFast(a, b, c_in, plan, exec, out);
    case AccumKind::kExact:
    case AccumKind::kBlockExact: return ExactFamilyFast(a, b, c_in, model, plan, exec, out);
    default: return false;
  }
}

}  // namespace qmx::detail
