// engine_kernels.cu: the emulation engine's GEMM kernel. Each output is the dot product the CPU
// reference (lib/src/gemm/gemm_ref.cc) defines, computed the same way: MMA-Sim's fused steps (products or
// exact group sums aligned to the step's largest nominal exponent, F fractional bits kept, summed exactly,
// the sum rounded to the step's output), promotion into FP32, IEEE FP32 accumulation (fp32-seq), and the
// alpha epilogue.
//
// Exactness. The reference sums in 128-bit integers; here every value is a double, which is exact under
// bounds the host proves per call before launching (engine_gemm.cc, EngineGemmSupport): each product of
// element values and scales fits 53 bits of significand, each group's sum of products does, and a step's
// truncated terms, counted in units of 2^(emax - F), stay below 2^53 in total. Under those bounds the
// double arithmetic below performs the reference's integer arithmetic operation for operation.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine_internal.h"
#include "gpu_internal.h"

namespace qmx::gpu::detail {
namespace {

constexpr int kTileN = 32, kTileM = 4;  // threads per block: 32 columns x 4 rows, one output each

struct Specials {
  bool nan = false, pos_inf = false, neg_inf = false;
  __device__ void Add(double p) {
    if (isnan(p)) nan = true;
    else if (isinf(p)) (p > 0 ? pos_inf : neg_inf) = true;
  }
  __device__ bool Any() const { return nan || pos_inf || neg_inf; }
  __device__ float Result() const {
    if (nan || (pos_inf && neg_inf)) return __int_as_float(0x7FFFFFFF);  // the library's canonical NaN
    return pos_inf ? __int_as_float(0x7F800000) : __int_as_float(static_cast<int>(0xFF800000u));
  }
};

__device__ inline bool Finite(double v) { return isfinite(v); }

// MMA-Sim's exponent of a nonzero finite value, never below emin (internal::NominalExp).
__device__ inline int Nominal(double v, int emin) {
  const int e = ilogb(v);
  return e < emin ? emin : e;
}
// The zero rule's exponent (FusedParams::zero_operands): -126 for zero.
__device__ inline int ZeroRule(double v, int emin) { return v == 0 ? -126 : Nominal(v, emin); }

// A term's magnitude in units of 2^unit, truncated toward zero or rounded to nearest even
// (internal::ShiftRound on the exact value); ldexp keeps zero a zero whatever the unit.
__device__ inline double Cut(double v, int unit, bool rne) {
  const double t = ldexp(v, -unit);
  return rne ? rint(t) : trunc(t);
}

// internal::RoundFused on the exact integer sum s (|s| < 2^53) in units of 2^unit.
__device__ float RoundFused(double s, int unit, int bits, bool rne) {
  if (s == 0) return 0.0f;
  const bool neg = s < 0;
  const unsigned long long mag = static_cast<unsigned long long>(fabs(s));
  int e = 63 - __clzll(static_cast<long long>(mag)) + unit;
  if (e < -126) e = -126;
  const int q = e - (bits - 1);
  const int sh = unit - q;
  unsigned long long kept;
  if (sh >= 0) {
    kept = mag << sh;
  } else if (-sh >= 64) {
    kept = 0;
  } else {
    const int r = -sh;
    kept = mag >> r;
    if (rne) {
      const unsigned long long rem = mag & ((1ull << r) - 1), half = 1ull << (r - 1);
      if (rem > half || (rem == half && (kept & 1))) ++kept;
    }
  }
  const double v = ldexp(static_cast<double>(kept), q);
  if (v >= 0x1p128) return neg ? __int_as_float(static_cast<int>(0xFF800000u)) : __int_as_float(0x7F800000);
  const float f = __double2float_rn(v);
  return neg ? -f : f;
}

// What one output (i, j) reads: row i of A, column j of B, their block scales.
struct Line {
  const uint8_t* a;
  const uint8_t* b;
  size_t n;
  const double* va;
  const double* vb;
  const int* na;
  const int* nb;
  const float* sa_row;  // A's scales of row block i / block_rows, or null
  size_t a_bc;
  const float* sb_col;  // B's scales at column block j / block_cols, stride b_sc per row block, or null
  size_t b_br, b_sc;
  int esa, esb;

  __device__ uint8_t CodeA(size_t k) const { return a[k]; }
  __device__ uint8_t CodeB(size_t k) const { return b[k * n]; }
  __device__ double SA(size_t k) const { return sa_row ? static_cast<double>(sa_row[k / a_bc]) : 1.0; }
  __device__ double SB(size_t k) const { return sb_col ? static_cast<double>(sb_col[(k / b_br) * b_sc]) : 1.0; }
};

// One fused step over products k0..k1 with accumulator c (gemm_ref.cc FusedStep).
__device__ float FusedStep(const Line& L, const EngineModel& p, size_t k0, size_t k1, float c, bool scales_in) {
  Specials sp;
  sp.Add(c);
  int emax = c == 0 ? (p.zero_operands ? -126 : p.zero_exp) : Nominal(c, -126);
  const size_t g = static_cast<size_t>(p.group);
  // Pass 1: specials and the largest nominal exponent.
  for (size_t q0 = k0; q0 < k1; q0 += g) {
    const size_t q1 = q0 + g < k1 ? q0 + g : k1;
    const double sa = scales_in ? L.SA(q0) : 1.0, sb = scales_in ? L.SB(q0) : 1.0;
    if (g == 1) {
      const uint8_t ca = L.CodeA(q0), cb = L.CodeB(q0);
      const double x = L.va[ca], y = L.vb[cb];
      if (!Finite(x) || !Finite(y) || !Finite(sa) || !Finite(sb)) {
        sp.Add(x * y * sa * sb);
        continue;
      }
      int nom;
      if (x == 0 || y == 0 || sa == 0 || sb == 0) {
        nom = p.zero_operands ? L.na[ca] + L.nb[cb] + (scales_in ? ZeroRule(sa, L.esa) + ZeroRule(sb, L.esb) : 0)
                              : p.zero_exp;
      } else {
        nom = L.na[ca] + L.nb[cb] + (scales_in ? Nominal(sa, L.esa) + Nominal(sb, L.esb) : 0);
      }
      emax = nom > emax ? nom : emax;
      continue;
    }
    bool all_zero = true, special = false;
    for (size_t k = q0; k < q1; ++k) {
      const double x = L.va[L.CodeA(k)], y = L.vb[L.CodeB(k)];
      if (!Finite(x) || !Finite(y) || !Finite(sa) || !Finite(sb)) {
        sp.Add(x * y * sa * sb);
        special = true;
        continue;
      }
      if (x != 0 && y != 0) all_zero = false;
    }
    if (special) continue;
    int nom;
    if (p.zero_operands && (all_zero || sa == 0 || sb == 0)) nom = scales_in ? ZeroRule(sa, L.esa) + ZeroRule(sb, L.esb) : 0;
    else if (all_zero || sa == 0 || sb == 0) nom = p.zero_exp;
    else nom = scales_in ? Nominal(sa, L.esa) + Nominal(sb, L.esb) : 0;
    emax = nom > emax ? nom : emax;
  }
  if (sp.Any()) return sp.Result();
  // Pass 2: every term cut at the unit, summed exactly (no specials remain).
  const int unit = emax - p.frac_bits;
  double s = Cut(static_cast<double>(c), unit, p.term_rne);
  for (size_t q0 = k0; q0 < k1; q0 += g) {
    const size_t q1 = q0 + g < k1 ? q0 + g : k1;
    const double sa = scales_in ? L.SA(q0) : 1.0, sb = scales_in ? L.SB(q0) : 1.0;
    double sum = 0;  // the group's exact sum of products (one product when g == 1)
    for (size_t k = q0; k < q1; ++k) sum += L.va[L.CodeA(k)] * L.vb[L.CodeB(k)];
    s += Cut(sum * sa * sb, unit, p.term_rne);
  }
  const float r = RoundFused(s, unit, p.out_bits, p.out_rne);
  return p.zero_operands && r == 0 ? 0.0f : r;  // MMA-Sim: a sum cut to zero is +0
}

__device__ float AlphaAt(const EngineAlpha& al, size_t i, size_t j) {
  if (al.rule == 0) return __fmul_rn(al.rows ? al.rows[i] : al.ta, al.cols ? al.cols[j] : al.tb);
  const float p = __fmul_rn(al.amax_rows ? al.amax_rows[i] : al.amax_a, al.amax_cols ? al.amax_cols[j] : al.amax_b);
  return al.rule == 1 ? __fmul_rn(p, al.te_inv) : __fdiv_rn(p, al.te_factor);
}

__device__ float Dot(const EngineGemmArgs& g, const Line& L, size_t i, size_t j) {
  const EngineModel& p = g.model;
  float acc = g.c ? g.c[i * g.n + j] : 0.0f;
  if (p.kind == 1) {  // fp32-seq: acc = fmaf(a_k * sa_k, b_k * sb_k, acc) in K order
    for (size_t k = 0; k < g.k; ++k) {
      const float x = __fmul_rn(static_cast<float>(L.va[L.CodeA(k)]), static_cast<float>(L.SA(k)));
      const float y = __fmul_rn(static_cast<float>(L.vb[L.CodeB(k)]), static_cast<float>(L.SB(k)));
      acc = __fmaf_rn(x, y, acc);
    }
  } else {
    const size_t step = static_cast<size_t>(p.step);
    if (p.promote == 0) {
      for (size_t k0 = 0; k0 < g.k; k0 += step) acc = FusedStep(L, p, k0, k0 + step < g.k ? k0 + step : g.k, acc, p.scales_in);
    } else {
      const size_t window = static_cast<size_t>(p.promote);
      for (size_t w0 = 0; w0 < g.k; w0 += window) {
        const size_t w1 = w0 + window < g.k ? w0 + window : g.k;
        float part = 0.0f;
        for (size_t k0 = w0; k0 < w1; k0 += step) part = FusedStep(L, p, k0, k0 + step < w1 ? k0 + step : w1, part, p.scales_in);
        if (p.blocks && !p.scales_in) {
          const float sa = static_cast<float>(L.SA(w0)), sb = static_cast<float>(L.SB(w0));
          acc = p.promote_separately ? __fmaf_rn(__fmul_rn(part, sa), sb, acc) : __fmaf_rn(part, __fmul_rn(sa, sb), acc);
        } else {
          acc = __fadd_rn(acc, part);
        }
      }
    }
  }
  const float r = g.alpha.has ? __fmul_rn(AlphaAt(g.alpha, i, j), acc) : acc;
  // The model's canonical NaN (internal::ModelNan): 0x7FFFFFFF fused, 0x7FC00000 fp32-seq.
  return isnan(r) ? __int_as_float(p.kind == 1 ? 0x7FC00000 : 0x7FFFFFFF) : r;
}

__global__ void __launch_bounds__(kTileN* kTileM) EngineGemmKernel(EngineGemmArgs g) {
  __shared__ double va[256], vb[256];
  __shared__ int na[256], nb[256];
  const int tid = threadIdx.y * kTileN + threadIdx.x;
  for (int t = tid; t < 256; t += kTileN * kTileM) {
    va[t] = g.a.values[t];
    vb[t] = g.b.values[t];
    na[t] = g.a.nominal[t];
    nb[t] = g.b.nominal[t];
  }
  __syncthreads();
  const size_t j = static_cast<size_t>(blockIdx.x) * kTileN + threadIdx.x;
  if (j >= g.n) return;
  const size_t tiles_m = (g.m + kTileM - 1) / kTileM;
  for (size_t tile = blockIdx.y; tile < tiles_m; tile += gridDim.y) {
    const size_t i = tile * kTileM + threadIdx.y;
    if (i >= g.m) continue;
    Line L;
    L.a = g.a.codes + i * g.k;
    L.b = g.b.codes + j;
    L.n = g.n;
    L.va = va;
    L.vb = vb;
    L.na = na;
    L.nb = nb;
    L.sa_row = g.a.scales ? g.a.scales + (i / g.a.block_rows) * g.a.scale_cols : nullptr;
    L.a_bc = g.a.block_cols;
    L.sb_col = g.b.scales ? g.b.scales + j / g.b.block_cols : nullptr;
    L.b_br = g.b.block_rows;
    L.b_sc = g.b.scale_cols;
    L.esa = g.a.scale_emin;
    L.esb = g.b.scale_emin;
    g.out[i * g.n + j] = Dot(g, L, i, j);
  }
}

}  // namespace

void LaunchEngineGemm(const EngineGemmArgs& args, void* stream) {
  if (args.m == 0 || args.n == 0) return;
  const dim3 threads(kTileN, kTileM);
  const size_t tiles_m = (args.m + kTileM - 1) / kTileM;
  const dim3 grid(static_cast<unsigned>((args.n + kTileN - 1) / kTileN),
                  static_cast<unsigned>(tiles_m < 65535 ? tiles_m : 65535));
  EngineGemmKernel<<<grid, threads, 0, static_cast<cudaStream_t>(stream)>>>(args);
  Check(cudaGetLastError(), "engine GEMM launch");
}

}  // namespace qmx::gpu::detail
