// engine_dmma.cu: the emulation engine's FP64 tensor-core GEMM kernel (engine_internal.h, StepInfo).
//
// Why it is exact. A fused step cuts every term (each product times its scales, and the accumulator) at
// the unit 2^(emax - F), emax the step's largest nominal exponent, sums the cut terms exactly and rounds the
// sum (gemm_ref.cc FusedStep). Where no term has a bit below the unit, cutting changes nothing and the step
// is the exact sum of its terms, rounded. The row's and the column's StepInfo bound that: every nonzero
// product's nominal exponent is at most maxnom(row) + maxnom(column), so emax is at most
// E = max(that, the accumulator's exponent, the zero rule's exponent); every nonzero product's lowest bit is
// at least minlsb(row) + minlsb(column). When that lowest bit and the accumulator's are at or above E - F,
// they are at or above the true unit, so no term is cut. Then every partial sum of the step's products is a
// multiple of 2^(E - F - the scales' lowest bits) below 2^(E - the scales' exponents + 7), at most F + 7
// significant bits, so the tensor core's FP64 sums are exact whatever their order, and so are the scaled sum
// and the accumulator added to it (F + 8 bits, F <= 45). Any other step is computed exactly from the tile's
// codes in integers (WarpTileStep: each term cut at the step's unit as FusedStep cuts it), and a step that meets
// NaN or Inf runs FusedStep itself.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine_fused.cuh"
#include "engine_internal.h"
#include "gpu_internal.h"

namespace qmx::gpu::detail {
namespace {

using namespace fused;

constexpr int kDTile = 64;  // a block's outputs: 64 x 64, four warps of 32 x 32
constexpr int kDThreads = 128;

// The exponent of the lowest set bit of a finite nonzero double (exact: from its fields).
__device__ inline int LowestBit(double v) {
  const long long b = __double_as_longlong(v);
  const int ef = static_cast<int>((b >> 52) & 0x7FF);
  long long m = b & 0xFFFFFFFFFFFFFLL;
  if (ef != 0) m |= 1LL << 52;
  return (ef == 0 ? 1 : ef) - 1075 + __ffsll(m) - 1;
}

// One line's step: row i of A (k along the row) or column j of B (k down the column).
__global__ void StepInfoKernel(EngineOperand o, bool is_a, size_t lines, size_t k, int step, bool scales_in,
                               size_t steps, StepInfo* info) {
  const size_t total = lines * steps;
  for (size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<size_t>(gridDim.x) * blockDim.x) {
    // Consecutive threads take consecutive lines of one step: B's columns are read coalesced.
    const size_t s = t / lines, line = t % lines;
    const size_t k0 = s * static_cast<size_t>(step), k1 = k0 + step < k ? k0 + step : k;
    StepInfo r;
    int es = 0, ls = 0;
    bool special = false, zero_scale = false;
    if (scales_in && o.scales != nullptr) {
      const float sv = is_a ? o.scales[(line / o.block_rows) * o.scale_cols + k0 / o.block_cols]
                            : o.scales[(k0 / o.block_rows) * o.scale_cols + line / o.block_cols];
      r.scale = sv;
      const double v = static_cast<double>(sv);
      special = !Finite(v);
      zero_scale = v == 0;
      if (!special && !zero_scale) {
        es = ScaleExponent(v, o.scale_emin);
        ls = LowestBit(v);
      }
      r.scale_exp = static_cast<int16_t>(ls);  // a power of two (the host takes UE8M0 scales only)
      r.zero_scale = zero_scale;
    }
    int maxnom = kNoTerm, minlsb = kNoLsb;
    for (size_t kk = k0; kk < k1; ++kk) {
      const uint8_t c = is_a ? o.codes[line * o.cols + kk] : o.codes[kk * o.cols + line];
      const double v = o.values[c];
      if (!Finite(v)) {
        special = true;
        continue;
      }
      if (v == 0 || zero_scale) continue;
      maxnom = max(maxnom, o.nominal[c] + es);
      minlsb = min(minlsb, LowestBit(v) + ls);
    }
    r.maxnom = static_cast<int16_t>(special ? kSpecialStep : maxnom);
    r.minlsb = static_cast<int16_t>(minlsb);
    info[line * steps + s] = r;
  }
}

// d += a * b on the FP64 tensor core, one 8 x 8 x 4 product per warp. Fragments: a at (lane / 4, lane % 4),
// b at (k = lane % 4, n = lane / 4), d at (lane / 4, 2 * (lane % 4) + {0, 1}).
__device__ inline void Dmma(double (&d)[2], double a, double b) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
               : "+d"(d[0]), "+d"(d[1])
               : "d"(a), "d"(b));
}

// |x| * 2^sh cut to an integer as FusedStep cuts a term (toward zero, or to nearest even); mag < 2^25.
__device__ inline long long CutMag(long long mag, int sh, bool rne) {
  if (sh >= 0) return mag << sh;  // the host's bounds keep every term below 2^(F + 2)
  const int r = -sh;
  if (r >= 40) return 0;  // below 2^-15: zero under both roundings
  long long q = mag >> r;
  if (rne) {
    const long long rem = mag & ((1LL << r) - 1), half = 1LL << (r - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  return q;
}

__device__ inline long long CutSigned(long long v, int sh, bool rne) {
  return v < 0 ? -CutMag(-v, sh, rne) : CutMag(v, sh, rne);
}

// One step of a finite output exactly as FusedStep computes it, in integers from the tile's codes, on a whole
// warp: row r of A's codes (ca, n <= 32 of them), column c of B's (cb, stride kDTile), the code parts, the
// step's power-of-two scales and the accumulator. Lane k takes term k; the nominal bounds are warp maxima
// and the cut terms' sum a butterfly of 64-bit integers (exact, so in any order); every lane returns it.
__device__ inline float WarpTileStep(const EngineModel& p, const CodeParts* pa, const CodeParts* pb, const uint8_t* ca,
                                     const uint8_t* cb, int n, const StepInfo& ia, const StepInfo& ib, float c,
                                     int lane) {
  const bool zero_scale = ia.zero_scale || ib.zero_scale;
  const int es = ia.scale_exp + ib.scale_exp;
  CodeParts x{}, y{};
  if (lane < n) {
    x = pa[ca[lane]];
    y = pb[cb[lane * kDTile]];
  }
  const int hi = __reduce_max_sync(0xFFFFFFFFu, lane < n ? x.nom + y.nom : -32768);
  const int lo = __reduce_min_sync(0xFFFFFFFFu, lane < n ? x.nom + y.nom : 32767);
  int emax = c == 0 ? p.zero_exp : NominalF32(c);
  if (n > 0 && zero_scale) emax = max(emax, p.zero_exp);
  if (n > 0 && !zero_scale) {
    if (hi > kZeroNom / 2) emax = max(emax, hi + es);
    if (lo <= kZeroNom / 2) emax = max(emax, p.zero_exp);
  }
  const int unit = emax - p.frac_bits;
  if (unit < -1000) return 0.0f;  // every term is zero (a nonzero one's exponent is above -400)
  long long t = lane < n && !zero_scale ? CutSigned(static_cast<long long>(x.m) * y.m, x.e + y.e + es - unit, p.term_rne) : 0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xFFFFFFFFu, t, o);
  if (c != 0) {
    const int b = __float_as_int(c), ef = (b >> 23) & 0xFF;
    const long long mc = (b & 0x7FFFFF) | (ef ? 0x800000 : 0);
    const int ec = (ef ? ef : 1) - 150;  // c = mc * 2^ec
    t += CutSigned(b < 0 ? -mc : mc, ec - unit, p.term_rne);
  }
  return RoundFused(static_cast<double>(t), unit, p.out_bits, p.out_rne);
}

// The step's result for one output where the thread can give it: the tensor core's exact sum where the
// bounds prove that no term is cut, or FusedStep on the codes where the step meets NaN or Inf (counted in
// `fallbacks`). False where a term may be cut: the step goes to the block's queue for WarpTileStep.
__device__ inline bool StepOutput(const EngineGemmArgs& g, const double* va, const double* vb, size_t i, size_t j,
                                  size_t k0, size_t k1, float& c, double sum, const StepInfo& ia, const StepInfo& ib,
                                  unsigned& fallbacks) {
  const EngineModel& p = g.model;
  if (ia.maxnom != kSpecialStep && ib.maxnom != kSpecialStep && isfinite(c)) {
    int emax = p.zero_exp;  // zero terms (products or a zero accumulator) take it; it only raises the bound
    if (c != 0) emax = max(emax, NominalF32(c));
    if (ia.maxnom != kNoTerm && ib.maxnom != kNoTerm) emax = max(emax, ia.maxnom + ib.maxnom);
    const int unit = emax - p.frac_bits;
    if (static_cast<int>(ia.minlsb) + ib.minlsb >= unit && (c == 0 || LowestBit(c) >= unit)) {
      const double s = static_cast<double>(c) + sum * (static_cast<double>(ia.scale) * ib.scale);
      c = s == 0 ? 0.0f : RoundFused(s * Pow2(-unit), unit, p.out_bits, p.out_rne);
      return true;
    }
    return false;
  }
  ++fallbacks;
  c = FusedStep(LineOf(g, va, vb, g.a.nominal, g.b.nominal, i, j), p, k0, k1, c, p.scales_in);
  return true;
}

// f(mi, ni, h) for each of the thread's 32 outputs (rows wr + 8 mi + gr, columns wc + 8 ni + 2 gc + h), unrolled
// so that the per-output arrays stay in registers.
template <typename F>
__device__ __forceinline__ void ForOutputs(F f) {
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) f(mi, ni, h);
}

template <int kStep, bool kPromote>
__global__ void __launch_bounds__(kDThreads, 2) EngineDmmaKernel(EngineGemmArgs g, EngineDmmaBuffers f) {
  __shared__ double va[256], vb[256];
  __shared__ CodeParts pa[256], pb[256];
  // A's values, row-major (padded against bank conflicts), and B's, k-major; once a step's products are
  // formed, the same memory holds the steps queued for WarpTileStep: their accumulators and their indices.
  __shared__ union {
    double sa[kDTile][kStep + 1];
    float queued[kDTile][kDTile];
  } ua;
  __shared__ union {
    double sb[kStep][kDTile + 1];
    uint16_t queue[kDTile * kDTile];
  } ub;
  __shared__ int queue_len;
  auto& sa = ua.sa;
  auto& sb = ub.sb;
  __shared__ uint8_t ca[kDTile][kStep], cb[kStep][kDTile];  // their codes
  __shared__ StepInfo ia[kDTile], ib[kDTile];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int t = tid; t < 256; t += kDThreads) {
    va[t] = g.a.values[t];
    vb[t] = g.b.values[t];
    pa[t] = f.a_parts[t];
    pb[t] = f.b_parts[t];
  }
  const size_t row0 = static_cast<size_t>(blockIdx.y) * kDTile, col0 = static_cast<size_t>(blockIdx.x) * kDTile;
  const int wr = (warp >> 1) * 32, wc = (warp & 1) * 32;  // the warp's 32 x 32 outputs in the tile
  const int gr = lane >> 2, gc = lane & 3;
  // The thread's outputs: rows wr + 8 mi + gr, columns wc + 8 ni + 2 gc + h.
  float acc[4][4][2], part[4][4][2];
  ForOutputs([&](int mi, int ni, int h) {
    const size_t i = row0 + wr + 8 * mi + gr, j = col0 + wc + 8 * ni + 2 * gc + h;
    acc[mi][ni][h] = g.c && i < g.m && j < g.n ? g.c[i * g.n + j] : 0.0f;
    part[mi][ni][h] = 0.0f;
  });
  unsigned fallbacks = 0;
  const size_t window = kPromote ? static_cast<size_t>(g.model.promote) : 1;
  for (size_t s = 0, k0 = 0; k0 < g.k; ++s, k0 += kStep) {
    const size_t k1 = k0 + kStep < g.k ? k0 + kStep : g.k;
    __syncthreads();
    for (int t = tid; t < kDTile * kStep; t += kDThreads) {
      const int r = t / kStep, kk = t % kStep;
      const size_t i = row0 + r, k = k0 + kk;
      const uint8_t code = i < g.m && k < k1 ? g.a.codes[i * g.k + k] : 0;
      ca[r][kk] = code;
      sa[r][kk] = i < g.m && k < k1 ? va[code] : 0.0;
    }
    for (int t = tid; t < kDTile * kStep; t += kDThreads) {
      const int kk = t / kDTile, c = t % kDTile;
      const size_t j = col0 + c, k = k0 + kk;
      const uint8_t code = j < g.n && k < k1 ? g.b.codes[k * g.n + j] : 0;
      cb[kk][c] = code;
      sb[kk][c] = j < g.n && k < k1 ? vb[code] : 0.0;
    }
    if (tid == 0) queue_len = 0;
    if (tid < kDTile) {
      const size_t i = row0 + tid;
      ia[tid] = i < g.m ? f.a_info[i * f.steps + s] : StepInfo{};
    } else {
      const size_t j = col0 + tid - kDTile;
      ib[tid - kDTile] = j < g.n ? f.b_info[j * f.steps + s] : StepInfo{};
    }
    __syncthreads();
    double sum[4][4][2];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) sum[mi][ni][0] = sum[mi][ni][1] = 0.0;
#pragma unroll
    for (int q = 0; q < kStep; q += 4) {
      double a[4], b[4];
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        a[x] = sa[wr + 8 * x + gr][q + gc];
        b[x] = sb[q + gc][wc + 8 * x + gr];
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) Dmma(sum[mi][ni], a[mi], b[ni]);
    }
    const bool window_end = kPromote && ((k0 + kStep) % window == 0 || k1 == g.k);
    __syncthreads();  // every warp's products formed: sa and sb now hold the queue
    // The outputs whose step may cut a term wait in the queue (a lane alone would take the whole step, and
    // its warp with it); the block's warps then take them one step per warp.
    unsigned queued = 0;  // bit (mi * 4 + ni) * 2 + h
    ForOutputs([&](int mi, int ni, int h) {
      const int r = wr + 8 * mi + gr, c = wc + 8 * ni + 2 * gc + h;
      const size_t i = row0 + r, j = col0 + c;
      if (i >= g.m || j >= g.n) return;
      float& cur = kPromote ? part[mi][ni][h] : acc[mi][ni][h];
      if (StepOutput(g, va, vb, i, j, k0, k1, cur, sum[mi][ni][h], ia[r], ib[c], fallbacks)) return;
      ua.queued[r][c] = cur;
      ub.queue[atomicAdd(&queue_len, 1)] = static_cast<uint16_t>(r * kDTile + c);
      queued |= 1u << ((mi * 4 + ni) * 2 + h);
      ++fallbacks;
    });
    __syncthreads();
    for (int q = warp; q < queue_len; q += kDThreads / 32) {
      const int r = ub.queue[q] / kDTile, c = ub.queue[q] % kDTile;
      const float out = WarpTileStep(g.model, pa, pb, &ca[r][0], &cb[0][c], static_cast<int>(k1 - k0), ia[r], ib[c],
                                     ua.queued[r][c], lane);
      __syncwarp();
      if (lane == 0) ua.queued[r][c] = out;
    }
    __syncthreads();
    ForOutputs([&](int mi, int ni, int h) {
      const int r = wr + 8 * mi + gr, c = wc + 8 * ni + 2 * gc + h;
      const size_t i = row0 + r, j = col0 + c;
      if (i >= g.m || j >= g.n) return;
      float& cur = kPromote ? part[mi][ni][h] : acc[mi][ni][h];
      if (queued & (1u << ((mi * 4 + ni) * 2 + h))) cur = ua.queued[r][c];
      if (window_end) {
        const size_t w0 = k0 / window * window;
        acc[mi][ni][h] =
            Promote(g, LineOf(g, va, vb, g.a.nominal, g.b.nominal, i, j), w0, part[mi][ni][h], acc[mi][ni][h]);
        part[mi][ni][h] = 0.0f;
      }
    });
  }
  ForOutputs([&](int mi, int ni, int h) {
    const size_t i = row0 + wr + 8 * mi + gr, j = col0 + wc + 8 * ni + 2 * gc + h;
    if (i < g.m && j < g.n) g.out[i * g.n + j] = Finish(g, i, j, acc[mi][ni][h]);
  });
  if (fallbacks && f.fallback_steps) atomicAdd(f.fallback_steps, static_cast<unsigned long long>(fallbacks));
}

template <int kStep>
void LaunchStep(const EngineGemmArgs& args, const EngineDmmaBuffers& f, cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>((args.n + kDTile - 1) / kDTile),
                  static_cast<unsigned>((args.m + kDTile - 1) / kDTile));
  if (args.model.promote != 0) EngineDmmaKernel<kStep, true><<<grid, kDThreads, 0, st>>>(args, f);
  else EngineDmmaKernel<kStep, false><<<grid, kDThreads, 0, st>>>(args, f);
}

}  // namespace

void LaunchEngineDmmaGemm(const EngineGemmArgs& args, const EngineDmmaBuffers& f, void* stream) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (args.m == 0 || args.n == 0) return;
  const int step = args.model.step;
  StepInfoKernel<<<1024, 256, 0, st>>>(args.a, true, args.m, args.k, step, args.model.scales_in, f.steps, f.a_info);
  StepInfoKernel<<<1024, 256, 0, st>>>(args.b, false, args.n, args.k, step, args.model.scales_in, f.steps, f.b_info);
  Check(cudaGetLastError(), "engine FP64 tensor-core GEMM: step bounds launch");
  if (step == 16) LaunchStep<16>(args, f, st);
  else LaunchStep<32>(args, f, st);
  Check(cudaGetLastError(), "engine FP64 tensor-core GEMM launch");
}

}  // namespace qmx::gpu::detail
