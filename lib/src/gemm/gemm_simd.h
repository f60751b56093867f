// gemm_simd.h: the Highway GEMM kernels behind gemm_fast*.cc. Each runs a packed, register-tiled
// loop nest (GotoBLAS style) in which every output is computed by one thread in K order, so the bits
// do not depend on the thread count or the vector width. Each returns false, computing nothing, when
// the chosen SIMD target has no fused multiply-add (SSE4, SCALAR): the caller then takes its portable
// path. Matrices are row-major; A is m x k, B is k x n, C and out are m x n.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace qmx::simd {

// An operand read straight from its codes (the kernels pack it without an intermediate copy):
// value(r, c) = table[codes[r * cols + c]], times fl32 of the block scale
// scales[(r / block_rows) * scale_cols + c / block_cols] when `scales` is set (FP32 tables only).
template <typename T>
struct CodeMatrix {
  const uint8_t* codes = nullptr;
  const T* table = nullptr;  // 256 entries
  size_t rows = 0, cols = 0;
  const float* scales = nullptr;
  size_t block_rows = 0, block_cols = 0, scale_cols = 0;
  T At(size_t r, size_t c) const {
    const T v = table[codes[r * cols + c]];
    if (!scales) return v;
    return static_cast<T>(static_cast<float>(v) * scales[(r / block_rows) * scale_cols + c / block_cols]);
  }
};

// Each kernel's A is m x k and B is k x n, given as CodeMatrix (a.rows = m, a.cols = b.rows = k, b.cols = n).

// c[i][j] = fma(a[i][k-1], b[k-1][j], ... fma(a[i][0], b[0][j], c[i][j])): IEEE FP32 FMA in K order.
bool GemmF32Seq(const CodeMatrix<float>& a, const CodeMatrix<float>& b, float* c, bool parallel);

// Scale-block GEMM. For each K block `blk` of kb elements (the last may be shorter), the block sum
// S = sum a[i][k] * b[k][j] starts from -0 and must be exact in the element type (the caller checks
// the bound); sa is m x nb and sb is nb x n with nb = ceil(k / kb), powers of two.
//   Float: c = fma(S, sa * sb, c), where the caller guarantees sa * sb and S * sa * sb exact in FP32,
//          so this is c + S * sa * sb rounded once (RNE).
//   Double: c = RN32(c + S * sa * sb), the exact sum rounded once (round to odd at FP64, then RNE);
//          outputs whose accumulator overflowed come back as NaN: the caller recomputes them.
// exact_sum: instead of rounding into c per block, every S * sa * sb and c itself go into an exact
//   accumulator, rounded once (RNE) at the end; lsb is the exponent of the elements' product quantum
//   (S * 2^-lsb is an integer). Returns false also when the sum's exponent range is too wide.
struct BlockGemmArgs {
  size_t m = 0, n = 0, k = 0, kb = 0;
  const float* sa = nullptr;
  const float* sb = nullptr;
  bool parallel = true;
};
bool GemmBlockF32(const BlockGemmArgs& g, const CodeMatrix<float>& a, const CodeMatrix<float>& b, float* c);
bool GemmBlockF64(const BlockGemmArgs& g, const CodeMatrix<double>& a, const CodeMatrix<double>& b, float* c);
bool GemmExactF64(const BlockGemmArgs& g, const CodeMatrix<double>& a, const CodeMatrix<double>& b, int lsb, bool has_c,
                  float* c);

// MMA-Sim's fused dot product with FP32 terms (the caller checks that a step's terms sum exactly in
// FP32 and that every nonzero product a * b lies within FP32's normal range): per step of `step` K,
// the terms (the accumulator and each product) are aligned to the largest nominal exponent emax,
// scaled by 2^(F - emax), truncated (or rounded to nearest even) to integers and summed; the sum is
// rounded (RZ or RNE) to out_bits significant bits. Operands are values (a, b) with their nominal
// exponents (ea, eb; zeros carry zero_code). With promote > 0 the accumulator starts from 0 every
// `promote` K and is added to c afterwards: c + part, or, with block scales (sa m x nb, sb nb x n),
// fma(part, sa * sb, c) or fma(part * sa, sb, c) when `separate`. Outputs whose accumulation became
// non-finite come back as NaN: the caller recomputes them with the reference.
struct FusedGemmArgs {
  size_t m = 0, n = 0, k = 0;
  CodeMatrix<float> a, b;     // values
  CodeMatrix<int32_t> ea, eb;  // nominal exponents (same codes)
  int32_t zero_code = -30000;  // the nominal exponent given to zero elements
  int step = 32, frac_bits = 13, out_bits = 14;
  bool rne_terms = false, rne_out = false;
  int zero_exp = -133;
  bool track_zero = true;  // a zero term lifts emax to zero_exp
  int promote = 0;
  size_t kb = 0;  // scale block along K when sa/sb are given
  const float* sa = nullptr;
  const float* sb = nullptr;
  bool separate = false;
  bool parallel = true;
};
bool GemmFusedF32(const FusedGemmArgs& g, float* c);

// MMA-Sim's fused dot product with exact groups (GST-FDPA, promote = 0): per step of `step` K, each
// group of `group` K gives the term P * sa * sb, P the group's exact sum and sa, sb the block scales of
// the group's K block (kb elements, a multiple of group; m x nb and nb x n tables); its nominal exponent
// is xa + xb, or zero_exp when the group has no nonzero product or a zero scale. The terms and the
// accumulator are aligned at the largest nominal exponent emax, truncated (or rounded) at 2^(emax - F)
// and summed in FP64, and the sum is rounded to out_bits (<= 24) significant bits, the exponent floored
// at -126. The kernel sums the scaled operands a * sa and b * sb in FP32: the caller checks that every
// such product and group sum is exact in FP32 (each term's LSB at least 2^(xa + xb - lsb_drop), within
// FP32's range), that every step is exact in FP64 and that the exponents stay within FP64's range. c
// holds the accumulators' start values; outputs whose accumulation became non-finite come back as NaN
// for the reference.
constexpr size_t kMaxGroupsPerStep = 8;
struct GroupGemmArgs {
  size_t m = 0, n = 0, k = 0, kb = 0;
  CodeMatrix<float> a, b;       // values
  const float* sa = nullptr;    // m x nb
  const float* sb = nullptr;    // nb x n
  const int32_t* xa = nullptr;  // nominal exponents of sa and sb
  const int32_t* xb = nullptr;
  int group = 16, step = 64, frac_bits = 35, out_bits = 24;
  int lsb_drop = 0;  // a term's LSB is at least 2^(xa + xb - lsb_drop)
  bool rne_terms = false, rne_out = false;
  int zero_exp = -139;
  bool parallel = true;
};
bool GemmGroupF32(const GroupGemmArgs& g, float* c);

// MMA-Sim's fused dot product with the block scales in each product's exponent (T-FDPA with UE8M0
// scales, group 1, promote = 0: blackwell-mxf8f6f4): per step of `step` K (inside one scale block: kb a
// multiple of step), each product a * b * 2^(xa + xb) has the nominal exponent ea + eb + xa + xb (zero
// elements carry zero_code; a zero product, or a zero accumulator, lifts emax to zero_exp); the terms
// and the accumulator are aligned at the largest nominal exponent emax, truncated (or rounded) at
// 2^(emax - F) and summed, and the sum is rounded to out_bits (<= 24) significant bits, the exponent
// floored at -126. The kernel works in FP32 lanes with int32 sums where the element formats allow (its
// own check), else in FP64: the caller checks that a step's terms sum exactly there
// (F + 2 + log2(step + 1) <= 53). man_bits: the two element formats' mantissa bits (an element's LSB is
// 2^(nominal exponent - mantissa bits)). c holds the start values; outputs whose accumulation became
// non-finite come back as NaN for the reference.
struct ScaledFusedArgs {
  size_t m = 0, n = 0, k = 0, kb = 0;
  CodeMatrix<double> a, b;       // values
  CodeMatrix<int32_t> ea, eb;    // nominal exponents (same codes)
  const int32_t* xa = nullptr;   // m x nb scale exponents
  const int32_t* xb = nullptr;   // nb x n
  int32_t zero_code = -30000;
  int step = 32, frac_bits = 25, out_bits = 24, man_bits = 6;
  bool rne_terms = false, rne_out = false;
  int zero_exp = -133;
  bool parallel = true;
};
bool GemmScaledF64(const ScaledFusedArgs& g, float* c);

// AMD CDNA3's FP8 step (cdna3-fp8: FusedParams::cdna3_halves with RNE output; gemm_ref.cc's Cdna3Step): per
// step of `step` K (even, at most 64), each output's products summed exactly in int32 lanes from int16
// significands (A's row and B's column of the step each scaled to its own lowest set bit) beside their largest
// nominal exponent E. Where the step provably cuts no product and no bit of C (L >= E - F, C's exponent at
// least E - 1 or C zero, the products' sum not floored below C) it is that exact sum plus C rounded once; the
// other outputs' steps call `exact` on the elements' values rebuilt from the kernel's packs (`slow`, which reads
// the codes, where a row or column of the step is too wide for the packs). Codes are row-major
// (A m x k, B k x n); the tables map each code to its value (finite operands only), its nominal exponent (-126
// for zero), its lowest set bit (any value for zero) and its odd significand. out gets the accumulations; one that left
// the finite range comes back as NaN for the caller's reference.
struct Cdna3GemmArgs;
using Cdna3SlowStep = float (*)(const Cdna3GemmArgs& g, size_t i, size_t j, size_t k0, size_t k1, float c);
// The exact step on n elements' values x, y and nominal exponents ex, ey (contiguous) from accumulator c.
using Cdna3ExactStep = float (*)(int frac_bits, const double* x, const int16_t* ex, const double* y, const int16_t* ey,
                                 size_t n, float c);
struct Cdna3GemmArgs {
  size_t m = 0, n = 0, k = 0;
  int step = 16, frac_bits = 24;
  const uint8_t* a_codes = nullptr;
  const uint8_t* b_codes = nullptr;
  const double* a_val = nullptr;  // 256 entries each
  const double* b_val = nullptr;
  const int16_t* a_nom = nullptr;
  const int16_t* b_nom = nullptr;
  const int16_t* a_lsb = nullptr;
  const int16_t* b_lsb = nullptr;
  const int32_t* a_sig = nullptr;  // the value / 2^lsb: an odd integer (0 for zero)
  const int32_t* b_sig = nullptr;
  const float* c = nullptr;  // m x n start values, or none (zeros)
  Cdna3SlowStep slow = nullptr;
  Cdna3ExactStep exact = nullptr;
  bool parallel = true;
};
bool GemmCdna3(const Cdna3GemmArgs& g, float* out);
// The kernel's path counts since the program started (qmx::Cdna3StepCounts, in this order), for tests.
void Cdna3Counts(uint64_t (&counts)[5]);

// Whether the CPU has AVX512-FP16, AVX512-VNNI and AVX512BW, and whether the fused kernel may form its
// products in FP16 lanes there (GemmFusedF32 on an AVX-512 target): yes unless a SIMD target without
// "_FP16" was forced (qmx::ForceSimdTarget; the pseudo-target "AVX3_FP16" lists it).
bool CpuHasFp16Products();
bool Fp16Products();
// Whether the CPU has AVX512-VNNI and AVX512BW, and whether the CDNA3 kernel may sum with VPDPWSSD: yes
// unless a SIMD target without "_VNNI" or "_FP16" was forced (the pseudo-target "AVX3_VNNI" lists it where the
// CPU has VNNI but not FP16, as AMD's Zen 4 and 5 and Intel's Ice Lake do; "AVX3_FP16" implies it).
bool CpuHasVnni();
bool VnniSums();
// Fused-kernel steps since the program started that formed their products in FP16 lanes (taken) and
// that fell back to FP32 lanes because some output's G passed the bound (declined); for tests.
void CountFp16Steps(uint64_t taken, uint64_t declined);
void Fp16StepCounts(uint64_t* taken, uint64_t* declined);

// The kernels' packing buffers (gemm_buffers.cc): 64-byte aligned blocks that a GEMM call hands back to
// a pool rather than to the allocator, so that the next call reuses pages already mapped (a fresh buffer
// costs a page fault and a zeroing per 4 KB page; at 1024^3 about a tenth of a fused model's time on two
// threads). The pool keeps at most 256 MiB in 32 blocks, the oldest leaving first; a block from it holds
// stale data (every packer writes its whole buffer). TakeBuffer rounds `bytes` up to the block's size,
// which GiveBuffer takes back with it. Both are thread-safe.
void* TakeBuffer(size_t& bytes);
void GiveBuffer(void* p, size_t bytes) noexcept;

// A packing buffer from the pool, handed back to it when freed (every kernel's packs; stale contents).
struct PoolFreer {
  size_t bytes = 0;
  void operator()(void* p) const noexcept { GiveBuffer(p, bytes); }
};
template <typename T>
using Buf = std::unique_ptr<T[], PoolFreer>;
template <typename T>
Buf<T> AllocateBuf(size_t n) {
  static_assert(std::is_trivially_copyable_v<T>, "plain values only (the pool's blocks are not constructed)");
  size_t bytes = n * sizeof(T);
  T* p = static_cast<T*>(TakeBuffer(bytes));
  return Buf<T>(p, PoolFreer{bytes});
}

}  // namespace qmx::simd
