// gemm_fast.h (internal): the pieces the fast GEMM paths share: finiteness checks, code tables, the row tiling
// and the operands' values (gemm_fast.cc), and each model family's entry point: the fused models in
// gemm_fast_fused.cc, exact and block-exact in gemm_fast_exact.cc. GemmFast (gemm_fast.cc) dispatches.
#pragma once

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "fp_env.h"
#include "gemm/gemm_internal.h"
#include "gemm/gemm_simd.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && !defined(QMX_NO_CLONES)
#define QMX_GEMM_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define QMX_GEMM_CLONES
#endif

namespace qmx::detail {

constexpr int kZeroE = -30000;  // nominal exponent of a zero element: far below every real one
constexpr size_t kCols = 128;   // output columns per tile
constexpr size_t kRows = 4;     // output rows per tile

// No NaN or Inf among the codes, scales and C: the fast kernels leave specials to the reference.
bool OperandsFinite(const GemmOperand& a, const GemmOperand& b, const float* c_in, const GemmPlan& plan, Exec exec);

// out *= alpha (the per-tensor scales), as the reference applies them after accumulation.
void ApplyAlpha(const GemmPlan& plan, float* out);

// out = the accumulators' start values: C, or +0.
void StartValues(const float* c_in, const GemmPlan& plan, float* out);

// The value of every byte read as a code of f (0 for bytes wider than f's codes).
std::array<double, 256> CodeValues(const Format& f);

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
                      const GemmPlan& plan, float* out, Exec exec);

// Block scale of A at (row i, K block b) and of B at (K block b, column j), as dense per-K-block tables.
// `len` (default: the plan's scale block) may be any divisor of the scale block.
void ScaleTables(const GemmOperand& a, const GemmOperand& b, const GemmPlan& plan, std::vector<float>& ta,
                 std::vector<float>& tb, size_t len = 0);

// Exponent of a format's smallest quantum (its smallest positive value).
int QuantumExp(const Format& f);

// Bits an exact sum of `count` products of two formats can span (largest magnitude over smallest LSB).
int BlockSumBits(const Format& fa, const Format& fb, size_t count);

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

// The fast paths of the model families (false: the case needs the generic path).
bool TryFused(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
              const GemmPlan& plan, Exec exec, float* out);
bool ExactFamilyFast(const GemmOperand& a, const GemmOperand& b, const float* c_in, const AccumModel& model,
                     const GemmPlan& plan, Exec exec, float* out);

}  // namespace qmx::detail
