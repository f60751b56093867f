// engine_fp4.cu: the emulation engine's FP4 GEMM kernel (E2M1 x E2M1, groups of 16 in fused steps of 64, no
// promotion: blackwell-mxf4nvf4 and its -mmasim form; engine_internal.h, Fp4StepInfo).
//
// Operands. A pre-pass writes each element times its group's block scale as an integer, relative to the
// smallest scale exponent of its line's step: A'_k = 2 a_k v_q 2^(3 - emin_step). With E2M1 values (twice
// them: 0..12, two significant bits) and scale significands of at most four bits (E4M3, UE8M0), A'_k has at
// most six significant bits and is a BF16 value exactly; the element's value is A'_k 2^lsb, lsb = emin_step - 4.
// A step's products are then A'_k B'_k 2^(lsb_a + lsb_b), integers times one power of two.
//
// Why the fast step is exact. A fused step cuts every term (a group's sum of products times its scales, and the
// accumulator) at the unit 2^(emax - F), sums the cut terms exactly and rounds (gemm_ref.cc FusedStep). emax is
// at most E = max(the accumulator's exponent or the zero rule's, maxe_a + maxe_b, the zero exponent). Where the
// products' common lowest bit 2^(lsb_a + lsb_b) and the accumulator's lowest bit are at or above 2^(E - F),
// nothing is cut, and the step is the exact sum acc + S 2^(lsb_a + lsb_b), S = sum A'B', rounded once. The BF16
// tensor core forms S exactly when every partial sum is an integer below 2^24: its products are exact (at most
// 12 bits) and S's magnitudes sum M = sum |A'B'| bounds every partial sum. M comes from the line bounds
// (sum |A'| times max |B'|, either way) or, where those do not prove it, from the tensor core itself on the
// magnitudes (an FP32 sum of nonnegative integers is below 2^24 exactly when the true one is). Rounding that
// exact sum to 24 bits toward zero or to nearest even is one FP32 addition in that rounding of acc and
// S 2^(lsb_a + lsb_b) (both FP32 values exactly), with -0 made +0 as the reference makes it; an RZ sum that
// reaches FLT_MAX (where the reference gives Inf past 2^128) takes the exact step instead.
//
// The exact step (any other output's step): each group's sum on the tensor core by itself (a group has one
// scale pair, so its sum has at most 20 significant bits and is exact in FP32), whether every product is zero
// from the magnitudes, then FusedStep's two passes in FP64 on those sums (exact under the host's support
// bounds). A step with a NaN or Inf scale or accumulator, or scales the packed values cannot hold, runs
// FusedStep on the codes. Both are counted in *fallback_steps.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "engine_fused.cuh"
#include "engine_internal.h"
#include "gpu_internal.h"
#include "mma_tile.cuh"

namespace qmx::gpu::detail {
namespace {

using namespace fused;

constexpr int kStepK = 64, kGroups = 4;   // one step: 64 products, 4 groups of 16
constexpr int kTile = 64, kNi = 4, kF4Threads = 128;  // a block's 64 x 64 outputs: 2 x 2 warps of 32 rows x 8 kNi columns
constexpr int kPitch = kStepK + 8;        // shared rows padded by 16 bytes: a fragment load's 8 rows x 4 lanes
                                          // then fall on 32 different banks
constexpr int kMaxSpread = 48;            // a line's scale exponents within a step span at most this, else the
                                          // step runs FusedStep (keeps A' B' and group sums finite in FP32)

// A line's step where the packed values cannot stand for it (a NaN or Inf scale, or too wide a spread).
__device__ inline void MarkGeneric(Fp4StepInfo& r) { r.lsb = kFp4GenericLsb; }

// Row i of A (k along the row) or column j of B (k down the column), one step of 64: its packed values and
// its Fp4StepInfo.
__global__ void PackFp4Kernel(EngineOperand o, bool is_a, size_t lines, size_t k, size_t kp, bool scales_in,
                              size_t steps, uint16_t* packed, Fp4StepInfo* info) {
  const size_t total = lines * steps;
  for (size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<size_t>(gridDim.x) * blockDim.x) {
    // Consecutive threads take consecutive lines of one step: B's columns are read coalesced.
    const size_t s = t / lines, line = t % lines, k0 = s * kStepK;
    const int ng = static_cast<int>(k - k0 >= kStepK ? kGroups : (k - k0 + 15) / 16);
    double v[kGroups];
    int e[kGroups];
    bool special = false;
    int emin = 100000, emax = -100000;
    Fp4StepInfo r{};
    for (int q = 0; q < kGroups; ++q) {
      v[q] = 1.0;
      e[q] = 0;
      if (q >= ng) continue;
      if (scales_in && o.scales != nullptr) {
        const size_t kk = k0 + 16 * q;
        const float sv = o.ScaleOf(is_a, line, kk);
        v[q] = static_cast<double>(sv);
        special |= !Finite(v[q]);
        e[q] = Finite(v[q]) ? ScaleExponent(v[q], o.scale_emin) : 0;
        special |= e[q] < -128 || e[q] > 127;  // Fp4StepInfo::e holds it in 8 bits
      }
      r.e[q] = static_cast<int8_t>(special ? 0 : e[q]);
      emax = max(emax, e[q]);
      if (Finite(v[q]) && v[q] != 0) emin = min(emin, e[q]);
    }
    r.maxe = static_cast<int16_t>(emax);
    const bool terms = emin != 100000;
    if (special || (terms && emax - emin > kMaxSpread)) MarkGeneric(r);
    else r.lsb = static_cast<int16_t>(terms ? emin - 4 : 0);
    const double rel = terms ? Pow2(3 - emin) : 0.0;
    double l1 = 0, mx = 0;
    uint32_t words[kStepK / 2];
    for (int x = 0; x < kStepK; ++x) {
      const size_t kk = k0 + x;
      const int q = x / 16;
      uint16_t bits = 0;
      if (kk < k && q < ng && r.lsb != kFp4GenericLsb && v[q] != 0) {
        const uint8_t code = is_a ? o.codes[line * o.cols + kk] : o.codes[kk * o.cols + line];
        const double a = 2.0 * o.values[code] * v[q] * rel;  // exact: at most 28 significant bits
        const float f = static_cast<float>(a);
        const uint32_t fb = __float_as_uint(f);
        if (static_cast<double>(f) != a || a != rint(a) || (fb & 0xFFFF) != 0) {
          MarkGeneric(r);  // a scale the packed values cannot hold exactly
        } else {
          bits = static_cast<uint16_t>(fb >> 16);
          l1 += fabs(a);
          mx = fmax(mx, fabs(a));
        }
      }
      if (x % 2 == 0) words[x / 2] = bits;
      else words[x / 2] |= static_cast<uint32_t>(bits) << 16;
    }
    if (r.lsb == kFp4GenericLsb) {
      for (uint32_t& w : words) w = 0;
      l1 = mx = 0;
    }
    r.l1 = __double2float_ru(l1);
    r.maxabs = __double2float_ru(mx);
    uint4* dst = reinterpret_cast<uint4*>(packed + line * kp + k0);
    for (int w = 0; w < kStepK / 8; ++w) dst[w] = make_uint4(words[4 * w], words[4 * w + 1], words[4 * w + 2], words[4 * w + 3]);
    info[line * steps + s] = r;
  }
}

using qmx_mma::CpAsync16;
using qmx_mma::SharedAddr;

struct Stage {
  uint16_t a[kTile][kPitch];  // A' rows, k along the row
  uint16_t b[kTile][kPitch];  // B' columns, k along the row (B transposed)
  Fp4StepInfo ia[kTile], ib[kTile];
};

// Step s's tiles into `st`, asynchronously; rows and columns past the matrix are zero.
template <int kThreads>
__device__ inline void LoadStage(Stage& st, const EngineGemmArgs& g, const EngineFp4Buffers& f, size_t row0,
                                 size_t col0, size_t s, int tid) {
  const size_t k0 = s * kStepK;
  for (int x = tid; x < kTile * (kStepK / 8); x += kThreads) {
    const int line = x / (kStepK / 8), c = x % (kStepK / 8);
    const size_t i = row0 + line, j = col0 + line;
    CpAsync16(&st.a[line][8 * c], f.a_packed + (i < g.m ? i * f.kp + k0 + 8 * c : 0), i < g.m);
    CpAsync16(&st.b[line][8 * c], f.b_packed + (j < g.n ? j * f.kp + k0 + 8 * c : 0), j < g.n);
  }
  if (tid >= 2 * kTile) {
  } else if (tid < kTile) {
    const size_t i = row0 + tid;
    CpAsync16(&st.ia[tid], f.a_info + (i < g.m ? i * f.steps + s : 0), i < g.m);
  } else {
    const size_t j = col0 + tid - kTile;
    CpAsync16(&st.ib[tid - kTile], f.b_info + (j < g.n ? j * f.steps + s : 0), j < g.n);
  }
  asm volatile("cp.async.commit_group;");
}

// The fragments of A rows r0..r0+15 and of B columns c0..c0+7 (or c0..c0+15: two n tiles) for the 16 products
// k16..k16+15, by ldmatrix: lane l gives the address of row l % 8 of 8 x 8 matrix l / 8, and register x receives
// matrix x in the MMA's fragment layout. A's matrices: rows +0 / +8 by k +0 / +8 (a[0..3] as Mma takes them); B's:
// k +0 / +8 of each n tile.
__device__ inline void FragA(const Stage& st, int r0, int k16, int lane, uint32_t (&a)[4]) {
  const unsigned addr = SharedAddr(&st.a[r0 + lane % 8 + 8 * ((lane / 8) % 2)][k16 + 8 * (lane / 16)]);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(addr));
}
__device__ inline void FragB2(const Stage& st, int c0, int k16, int lane, uint32_t (&b)[2][2]) {
  const unsigned addr = SharedAddr(&st.b[c0 + lane % 8 + 8 * (lane / 16)][k16 + 8 * ((lane / 8) % 2)]);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(b[0][0]), "=r"(b[0][1]), "=r"(b[1][0]), "=r"(b[1][1])
               : "r"(addr));
}
__device__ inline void FragB(const Stage& st, int c0, int k16, int lane, uint32_t& b0, uint32_t& b1) {
  const unsigned addr = SharedAddr(&st.b[c0 + lane % 8][k16 + 8 * ((lane / 8) % 2)]);  // lanes 16..31: ignored
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(b0), "=r"(b1) : "r"(addr));
}
__device__ inline void AbsA(uint32_t (&a)[4]) {
  for (uint32_t& x : a) x &= 0x7FFF7FFFu;
}

// The thread's 32 outputs: m tile mi (rows wr + 16 mi + g + 8 hh), n tile ni (columns wc + 8 ni + 2 t + hc),
// h = 2 hh + hc its place in the fragment; unrolled so that the per-output arrays stay in registers.
template <typename F>
__device__ __forceinline__ void ForOutputs(F f) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
      for (int h = 0; h < 4; ++h) f(mi, ni, h);
}

// The exact step for the outputs of one 16 x 8 tile whose bit in `need` (h) is set: FusedStep's two passes on
// the groups' sums from the tensor core, or FusedStep itself on the codes (generic lines, non-finite acc).
struct Four {
  float v[4];
};
__device__ __noinline__ Four ExactTileStep(const EngineGemmArgs& g, const Stage& st, int r0, int c0, int lane, int ng,
                                           size_t k0, size_t row0, size_t col0, unsigned need, Four acc) {
  const EngineModel& p = g.model;
  const int gq = lane / 4, tq = lane % 4;
  float mag[kGroups][4], val[kGroups][4];
#pragma unroll
  for (int q = 0; q < kGroups; ++q) {
    for (int h = 0; h < 4; ++h) mag[q][h] = val[q][h] = 0.0f;
    if (q >= ng) continue;
    uint32_t a[4], b0, b1;
    FragA(st, r0, 16 * q, lane, a);
    FragB(st, c0, 16 * q, lane, b0, b1);
    qmx_mma::MmaBf16(val[q], a, b0, b1);
    AbsA(a);
    qmx_mma::MmaBf16(mag[q], a, b0 & 0x7FFF7FFFu, b1 & 0x7FFF7FFFu);
  }
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    if (!(need & (1u << h))) continue;
    const int r = r0 + gq + 8 * (h / 2), c = c0 + 2 * tq + h % 2;
    const Fp4StepInfo &ia = st.ia[r], &ib = st.ib[c];
    const float cur = acc.v[h];
    if (ia.lsb == kFp4GenericLsb || ib.lsb == kFp4GenericLsb || !isfinite(cur)) {
      const size_t i = row0 + r, j = col0 + c;
      acc.v[h] = FusedStep(LineOf(g, g.a.values, g.b.values, g.a.nominal, g.b.nominal, i, j), p, k0,
                         k0 + kStepK < g.k ? k0 + kStepK : g.k, cur, p.scales_in);
      continue;
    }
    int emax = cur == 0 ? (p.zero_operands ? -126 : p.zero_exp) : NominalF32(cur);
    for (int q = 0; q < ng; ++q) {
      const int nom = mag[q][h] == 0 && !p.zero_operands ? p.zero_exp : ia.e[q] + ib.e[q];
      emax = max(emax, nom);
    }
    const int unit = emax - p.frac_bits, e0 = ia.lsb + ib.lsb;
    double s = 0;
    if (-unit <= 1023) {
      s = CutP(static_cast<double>(cur), Pow2(-unit), p.term_rne);
      const int sh = e0 - unit;  // a group's sum is in units of 2^e0
      if (sh >= -1022) {
        const double p2 = Pow2(sh < 1023 ? sh : 1023);
        for (int q = 0; q < ng; ++q)
          if (mag[q][h] != 0) s += CutP(static_cast<double>(val[q][h]), p2, p.term_rne);
      }
    }
    const float res = RoundFused(s, unit, p.out_bits, p.out_rne);
    acc.v[h] = p.zero_operands && res == 0 ? 0.0f : res;
  }
  return acc;
}

// Four warps of 32 x 32 outputs (kNi = 4 n tiles of 8 columns), three blocks an SM (at most 168 registers, some
// spilled). Measured on an H200 at 8192^3 (NVFP4), against two blocks an SM (255 registers, no spills) and eight
// warps of 32 x 16 outputs (128 registers): 13.7 ms, 16.8 ms and 17.5 ms.
__global__ void __launch_bounds__(kF4Threads, 3) EngineFp4Kernel(EngineGemmArgs g, EngineFp4Buffers f) {
  constexpr int kWarpsN = kTile / (8 * kNi), kThreads = kF4Threads, kCols = 8 * kNi;
  __shared__ __align__(16) Stage stages[2];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, gq = lane / 4, tq = lane % 4;
  const EngineModel& p = g.model;
  const int wr = (warp / kWarpsN) * 32, wc = (warp % kWarpsN) * kCols;
  const size_t row0 = static_cast<size_t>(blockIdx.y) * kTile, col0 = static_cast<size_t>(blockIdx.x) * kTile;
  float acc[2][kNi][4];
  ForOutputs([&](int mi, int ni, int h) {
    const size_t i = row0 + wr + 16 * mi + gq + 8 * (h / 2), j = col0 + wc + 8 * ni + 2 * tq + h % 2;
    acc[mi][ni][h] = g.c && i < g.m && j < g.n ? g.c[i * g.n + j] : 0.0f;
  });
  // The zero rule's exponents: a zero accumulator's, and a zero group's (none under MMA-Sim's rule, whose
  // zero groups take their scales' exponents, within maxe_a + maxe_b).
  const int zacc = p.zero_operands ? -126 : p.zero_exp, zgroup = p.zero_operands ? -100000 : p.zero_exp;
  const bool fast_model = p.out_bits == 24;
  unsigned long long fallbacks = 0;
  LoadStage<kThreads>(stages[0], g, f, row0, col0, 0, tid);
  for (size_t s = 0; s < f.steps; ++s) {
    const Stage& st = stages[s & 1];
    if (s + 1 < f.steps) {
      LoadStage<kThreads>(stages[(s + 1) & 1], g, f, row0, col0, s + 1, tid);
      asm volatile("cp.async.wait_group 1;");
    } else {
      asm volatile("cp.async.wait_group 0;");
    }
    __syncthreads();
    const size_t k0 = s * kStepK;
    const int ng = static_cast<int>(g.k - k0 >= kStepK ? kGroups : (g.k - k0 + 15) / 16);
    // S: the step's sum of A'B' for each output, on the tensor core.
    float sum[2][kNi][4];
    ForOutputs([&](int mi, int ni, int h) { sum[mi][ni][h] = 0.0f; });
#pragma unroll
    for (int q = 0; q < kGroups; ++q) {
      uint32_t a[2][4], b[kNi][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) FragA(st, wr + 16 * mi, 16 * q, lane, a[mi]);
#pragma unroll
      for (int ni = 0; ni < kNi; ni += 2) FragB2(st, wc + 8 * ni, 16 * q, lane, *reinterpret_cast<uint32_t(*)[2][2]>(&b[ni][0]));
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) qmx_mma::MmaBf16(sum[mi][ni], a[mi], b[ni][0], b[ni][1]);
    }
    // The warp's bounds over its 32 rows and 32 columns (nonnegative floats compare as their bits). Rows and
    // columns past the matrix (zero info) only widen them.
    const Fp4StepInfo &wa = st.ia[wr + lane], &wb = st.ib[wc + lane % kCols];
    const float l1a = __uint_as_float(__reduce_max_sync(~0u, __float_as_uint(wa.l1)));
    const float mxa = __uint_as_float(__reduce_max_sync(~0u, __float_as_uint(wa.maxabs)));
    const float l1b = __uint_as_float(__reduce_max_sync(~0u, __float_as_uint(wb.l1)));
    const float mxb = __uint_as_float(__reduce_max_sync(~0u, __float_as_uint(wb.maxabs)));
    const int la_lo = __reduce_min_sync(~0u, static_cast<int>(wa.lsb)), la_hi = __reduce_max_sync(~0u, static_cast<int>(wa.lsb));
    const int lb_lo = __reduce_min_sync(~0u, static_cast<int>(wb.lsb)), lb_hi = __reduce_max_sync(~0u, static_cast<int>(wb.lsb));
    const int emax_w = max(max(__reduce_max_sync(~0u, static_cast<int>(wa.maxe)) + __reduce_max_sync(~0u, static_cast<int>(wb.maxe)),
                               zgroup), zacc);
    // M < 2^24 for every output from the line bounds, else M itself per output.
    constexpr float k2p24 = 16777216.0f;
    const bool bounded = __fmul_ru(l1a, mxb) < k2p24 || __fmul_ru(mxa, l1b) < k2p24;
    unsigned need = 0;  // outputs whose step is not proven exact: bit (mi * kNi + ni) * 4 + h
    if (!bounded) {  // M itself, one 16 x 8 tile at a time
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) {
          float mag[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int q = 0; q < kGroups; ++q) {
            uint32_t a[4], b0, b1;
            FragA(st, wr + 16 * mi, 16 * q, lane, a);
            FragB(st, wc + 8 * ni, 16 * q, lane, b0, b1);
            AbsA(a);
            qmx_mma::MmaBf16(mag, a, b0 & 0x7FFF7FFFu, b1 & 0x7FFF7FFFu);
          }
#pragma unroll
          for (int h = 0; h < 4; ++h)
            if (!(mag[h] < k2p24)) need |= 1u << ((mi * kNi + ni) * 4 + h);
        }
    }
    // The fast step where it is proven exact; the rest marked in need. Where the warp's bounds prove that no
    // group term is cut whatever the accumulator (e0 >= emax_w - F for every output) and keep the terms and
    // sums within FP32's normal range, an output's step is exact when its accumulator is zero or its exponent
    // lies in [lo, hi]: at least emax_w - F + 23 (its lowest bit not cut below the groups) and at most
    // e0_min + F (the groups not cut below it), with F >= 23 (its own bits kept when it is the largest).
    const int e0_lo = la_lo + lb_lo, e0_hi = la_hi + lb_hi, F = p.frac_bits;
    const bool uniform = fast_model && F >= 23 && e0_lo >= emax_w - F && e0_lo >= -126 && e0_hi <= 102 && la_lo >= -126 &&
                         la_hi <= 103 && lb_lo >= -126 && lb_hi <= 127;
    if (uniform) {
      const int lo = max(emax_w - F + 23, -126), hi = min(e0_lo + F, 125);
      const unsigned ec_lo = static_cast<unsigned>(lo + 127), span = static_cast<unsigned>(hi - lo);
      float pa[2][2], pb[kNi][2];  // 2^lsb of the thread's rows and columns
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) pa[mi][hh] = __int_as_float((st.ia[wr + 16 * mi + gq + 8 * hh].lsb + 127) << 23);
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
        for (int hc = 0; hc < 2; ++hc) pb[ni][hc] = __int_as_float((st.ib[wc + 8 * ni + 2 * tq + hc].lsb + 127) << 23);
      const auto fast = [&](auto add) {
        ForOutputs([&](int mi, int ni, int h) {
          const unsigned bit = 1u << ((mi * kNi + ni) * 4 + h);
          const float c = acc[mi][ni][h];
          const unsigned cb = __float_as_uint(c);
          const bool ok = (cb << 1) == 0 || ((cb >> 23) & 0xFFu) - ec_lo <= span;
          const float r = add(c, __fmul_rn(__fmul_rn(sum[mi][ni][h], pa[mi][h / 2]), pb[ni][h % 2]));
          if (ok && !(need & bit)) acc[mi][ni][h] = __fadd_rn(r, 0.0f);  // -0 + +0 is +0: the reference's zero
          else need |= bit;
        });
      };
      if (p.out_rne) fast([](float x, float y) { return __fadd_rn(x, y); });
      else fast([](float x, float y) { return __fadd_rz(x, y); });
    } else {
      // Each output's own bounds.
      int la[2][2], ma[2][2], lb[kNi][2], mb[kNi][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const Fp4StepInfo& r = st.ia[wr + 16 * mi + gq + 8 * hh];
          la[mi][hh] = r.lsb;
          ma[mi][hh] = r.maxe;
        }
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni)
#pragma unroll
        for (int hc = 0; hc < 2; ++hc) {
          const Fp4StepInfo& r = st.ib[wc + 8 * ni + 2 * tq + hc];
          lb[ni][hc] = r.lsb;
          mb[ni][hc] = r.maxe;
        }
      ForOutputs([&](int mi, int ni, int h) {
        const unsigned bit = 1u << ((mi * kNi + ni) * 4 + h);
        const float c = acc[mi][ni][h], sm = sum[mi][ni][h];
        const int e0 = la[mi][h / 2] + lb[ni][h % 2];
        const int ec = (__float_as_int(c) >> 23) & 0xFF, nc = (ec == 0 ? 1 : ec) - 127;
        const int emax = max(max(c == 0 ? zacc : nc, ma[mi][h / 2] + mb[ni][h % 2]), zgroup);
        const int unit = emax - F;
        bool ok = fast_model && ec != 0xFF && e0 >= unit && (c == 0 || nc - 23 >= unit) &&
                  (sm == 0 || (e0 >= -126 && e0 <= 103)) && !(need & bit);
        const float term = sm * __int_as_float((min(max(e0, -126), 127) + 127) << 23);
        const float r = p.out_rne ? __fadd_rn(c, term) : __fadd_rz(c, term);
        ok = ok && (p.out_rne || fabsf(r) != FLT_MAX);
        if (ok) acc[mi][ni][h] = __fadd_rn(r, 0.0f);
        else need |= bit;
      });
    }
    if (__any_sync(0xFFFFFFFFu, need != 0)) {
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni) {
          const unsigned mine = (need >> ((mi * kNi + ni) * 4)) & 0xFu;
          if (!__any_sync(0xFFFFFFFFu, mine != 0)) continue;
          fallbacks += __popc(mine);
          Four cur;
#pragma unroll
          for (int h = 0; h < 4; ++h) cur.v[h] = acc[mi][ni][h];
          cur = ExactTileStep(g, st, wr + 16 * mi, wc + 8 * ni, lane, ng, k0, row0, col0, mine, cur);
#pragma unroll
          for (int h = 0; h < 4; ++h) acc[mi][ni][h] = cur.v[h];
        }
    }
    __syncthreads();  // every warp done with this stage before it is loaded again
  }
  ForOutputs([&](int mi, int ni, int h) {
    const size_t i = row0 + wr + 16 * mi + gq + 8 * (h / 2), j = col0 + wc + 8 * ni + 2 * tq + h % 2;
    if (i < g.m && j < g.n) g.out[i * g.n + j] = Finish(g, i, j, acc[mi][ni][h]);
  });
  if (fallbacks && f.fallback_steps) atomicAdd(f.fallback_steps, fallbacks);
}

}  // namespace

void LaunchEngineFp4Gemm(const EngineGemmArgs& args, const EngineFp4Buffers& f, void* stream) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (args.m == 0 || args.n == 0) return;
  const bool scales_in = args.model.scales_in;
  PackFp4Kernel<<<1024, 256, 0, st>>>(args.a, true, args.m, args.k, f.kp, scales_in, f.steps, f.a_packed, f.a_info);
  PackFp4Kernel<<<1024, 256, 0, st>>>(args.b, false, args.n, args.k, f.kp, scales_in, f.steps, f.b_packed, f.b_info);
  Check(cudaGetLastError(), "engine FP4 GEMM: packing launch");
  const dim3 grid(static_cast<unsigned>((args.n + kTile - 1) / kTile), static_cast<unsigned>((args.m + kTile - 1) / kTile));
  EngineFp4Kernel<<<grid, kF4Threads, 0, st>>>(args, f);
  Check(cudaGetLastError(), "engine FP4 GEMM launch");
}

}  // namespace qmx::gpu::detail
