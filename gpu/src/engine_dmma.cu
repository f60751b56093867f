// engine_dmma.cu: the emulation engine's FP64 tensor-core GEMM kernel (engine_internal.h, StepInfo).
//
// Why it is exact. A fused step cuts every term (each product times its scales, and the accumulator) at
// the unit 2^(emax - F), emax the step's largest nominal exponent, sums the cut terms exactly and rounds the
// sum (gemm_ref.cc FusedStep). Where no term has a bit below the unit, cutting changes nothing and the step
// is the exact sum of its terms, rounded. The row's and the column's StepInfo bound emax: every nonzero
// product's nominal exponent is at most maxnom(row) + maxnom(column), so emax is at most
// E = max(that, the accumulator's exponent, the zero rule's exponent), and the unit at most 2^(E - F).
//
// The certificate. A product's lowest bit is the sum of its elements' lowest bits (odd significands multiply
// to an odd one). Each element's lowest bit relative to its line's lowest, r = lsb - minlsb(line) >= 0, gives
// it the weight 2^(-6 min(r, 10)) (zero for a zero, NaN or Inf element), a BF16 power of two. The BF16 tensor core sums
// the weights' products for each output, W, in FP32: a product whose relative lowest bits sum to d weighs 64^-d, or
// more where a side was capped. With v = E - F - minlsb(row) - minlsb(column), every product's lowest bit is at or
// above the unit when v <= 0, or when v <= 21 and W < 64^(1 - v) (1 - 2^-16): a product with relative sum below v
// weighs at least 64^(1 - v), and the tensor core's FP32 sum of at most 32 nonnegative terms is within 2^-17 of W (each
// term it drops or cuts lies more than 23 bits below the largest), so such a product keeps the computed W above the
// bound. Uncapped, 32 products at v or above weigh at most 64^(1 - v) / 2 and pass. With the accumulator's own lowest
// bit at or above 2^(E - F), nothing is cut. On quantized Gaussian MXFP8 tensors this leaves 0.4-0.8 % of the steps
// uncertified, those whose terms are in fact cut (the row-and-column bound alone left 7-9 %).
//
// The sum. The tiles hold each element times its block scale in FP64 (exact: a power of two). Where nothing
// is cut, every product and partial sum of the step, the accumulator included (the DMMA's C), is a multiple of
// 2^(E - F) below 2^(E + 8) (F + 8 <= 53 bits), so the FP64 tensor core's sum is exact whatever its order.
// Rounding that to FP32 toward zero or to nearest even is one conversion (FusedStep's rounding at 24 bits,
// subnormals on FP32's own grid); the bound E stays at or below 119, so no RZ result sits at FLT_MAX, where
// the reference may give Inf, and none overflows; other widths run RoundFused. An uncertified step whose
// accumulator sets E is computed by one lane from the FP64 tiles (AccStep); any other one exactly from the
// tile's codes in integers (WarpTileStep: each term cut at the step's unit as FusedStep cuts it) by the whole
// warp, and a step that meets NaN or Inf runs FusedStep itself.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
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

constexpr int kWeightCap = 10;  // relative lowest bits past this weigh as this: 64^-10 = 2^-60, products >= 2^-120

// One line's step: row i of A (k along the row) or column j of B (k down the column): its bounds, and each
// element's certificate weight as BF16 bits, 2^(-6 min(r, kWeightCap)) with r its lowest bit (scale's exponent
// added) above the line's lowest, 0 for a zero, NaN or Inf element or a zero scale. A's weights go to
// w[line * pitch + k], B's to w[k * pitch + line], every k of the step (0 past K); none where w is null. Where ss
// is not null, ss[line * steps + s] is the step's sum of squared finite values (elements times scales).
__global__ void StepInfoKernel(EngineOperand o, bool is_a, size_t lines, size_t k, int step, bool scales_in,
                               size_t steps, StepInfo* info, uint16_t* w, size_t pitch, double* ss) {
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
      const float sv = o.ScaleOf(is_a, line, k0);
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
    auto code_at = [&](size_t kk) { return is_a ? o.codes[line * o.cols + kk] : o.codes[kk * o.cols + line]; };
    int maxnom = kNoTerm, minlsb = kNoLsb;
    double sq = 0;
    for (size_t kk = k0; kk < k1; ++kk) {
      const uint8_t c = code_at(kk);
      const double v = o.values[c];
      if (!Finite(v)) {
        special = true;
        continue;
      }
      if (v == 0 || zero_scale) continue;
      maxnom = max(maxnom, o.nominal[c] + es);
      minlsb = min(minlsb, LowestBit(v) + ls);
      const double x = v * r.scale;  // exact: a power of two (or 1); |x| within 2^+-400, its square in range
      sq += x * x;
    }
    r.maxnom = special ? kSpecialStep : maxnom;
    r.minlsb = minlsb;
    info[line * steps + s] = r;
    if (ss != nullptr) ss[line * steps + s] = sq;
    if (w == nullptr) continue;
    for (size_t kk = k0; kk < k0 + step; ++kk) {
      uint16_t wk = 0;
      if (kk < k1 && !zero_scale) {
        const double v = o.values[code_at(kk)];
        if (Finite(v) && v != 0)
          wk = static_cast<uint16_t>((127 - 6 * min(LowestBit(v) + ls - minlsb, kWeightCap)) << 7);
      }
      w[is_a ? line * pitch + kk : kk * pitch + line] = wk;
    }
  }
}

// Each line's LineBound from its steps' StepInfo and sums of squares, a warp a line (lanes over the steps). The
// FP64 sum of at most 2^26 nonnegative squares is within a factor 1 + 2^-26 of the exact one (each addition
// rounds by 2^-53 at most), so a norm below 2^top: 2^(2 top) > 2 ss (with margin), top = floor(ilogb(ss) / 2) + 1.
__global__ void LineBoundKernel(const StepInfo* info, const double* ss, size_t lines, size_t steps, LineBound* out) {
  const int lane = threadIdx.x & 31;
  const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  for (size_t line = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32; line < lines; line += warps) {
    int minlsb = kNoLsb;
    bool special = false;
    double sum = 0;
    for (size_t s = lane; s < steps; s += 32) {
      const StepInfo& r = info[line * steps + s];
      special = special || r.maxnom == kSpecialStep;
      minlsb = min(minlsb, r.minlsb);
      sum += ss[line * steps + s];
    }
    minlsb = __reduce_min_sync(0xFFFFFFFFu, minlsb);
    special = __any_sync(0xFFFFFFFFu, special);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    if (lane != 0) continue;
    LineBound b;
    b.minlsb = minlsb;
    b.top = special ? kSpecialStep : sum == 0 ? kNoTerm : (ilogb(sum) >> 1) + 1;
    out[line] = b;
  }
}

// True where the FP64 tensor core sums output (row, column)'s products onto its accumulator c exactly in any order
// and in any grouping, over all of K: every product and c are multiples of 2^lo, and every partial sum is below
// Σ|products| + |c| < 2^(top(row) + top(column)) + 2^(ilogb(c) + 1) <= 2^(hi + 1), so it is exact when
// hi + 1 - lo <= 53. False for a special line and a NaN or Inf c.
__device__ inline bool WholeSumExact(const LineBound& ra, const LineBound& cb, float c) {
  if (ra.top == kSpecialStep || cb.top == kSpecialStep || !isfinite(c)) return false;
  int hi = ra.top + cb.top, lo = ra.minlsb + cb.minlsb;  // an all-zero line: hi below -30000, lo above 30000
  if (c != 0) {
    hi = max(hi, ilogbf(c) + 1);
    lo = min(lo, LowestBit(static_cast<double>(c)));
  }
  return hi < -10000 || hi + 1 - lo <= 53;
}

// d += a * b on the FP64 tensor core, one 16 x 8 x 4 product per warp (twice the rate of m8n8k4 on an H200:
// 66 against 33 TFLOP/s, gpu/probes/dmma_shapes.cu). Fragments, g = lane / 4, t = lane % 4: a0 at
// (g, t), a1 at (g + 8, t); b at (k = t, n = g); d0, d1 at (g, 2 t + {0, 1}), d2, d3 at (g + 8, 2 t + {0, 1}).
__device__ inline void Dmma(double (&lo)[2], double (&hi)[2], double a0, double a1, double b) {
  asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
               : "+d"(lo[0]), "+d"(lo[1]), "+d"(hi[0]), "+d"(hi[1])
               : "d"(a0), "d"(a1), "d"(b));
}

using qmx_mma::CpAsync16;
using qmx_mma::MmaBf16;
using qmx_mma::SharedAddr;

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
__device__ __forceinline__ float WarpTileStep(const EngineModel& p, const CodeParts* pa, const CodeParts* pb,
                                              const uint8_t* ca, const uint8_t* cb, int n, const StepInfo& ia,
                                              const StepInfo& ib, float c, int lane) {
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
  long long t =
      lane < n && !zero_scale ? CutSigned(static_cast<long long>(x.m) * y.m, x.e + y.e + es - unit, p.term_rne) : 0;
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

// The kernel's shared memory (dynamic: 74 KB for steps of 32, so three blocks an SM; two for the promoting
// models, whose partial sums take more registers). Certificate weights and step bounds arrive by cp.async into
// two stages, and the codes too where K and N are multiples of 16 (plain loads otherwise); each step converts
// its stage's codes into the FP64 tiles of the products.
// Pitches keep fragment loads free of bank conflicts: A's FP64 rows 2 * pitch = 8 (mod 32) banks apart, B's k
// rows the same, the BF16 rows 16 bytes aligned on distinct banks for ldmatrix.
template <int kStep>
struct DmmaShared {
  static constexpr int kPa = kStep + 4, kPb = kDTile + 4, kWa = kStep + 8, kWb = kDTile + 8;
  struct Stage {
    uint8_t a[kDTile][kStep];  // A's codes, row-major
    uint8_t b[kStep][kDTile];  // B's codes, k-major (B's own layout)
    uint16_t wa[kDTile][kWa];  // the certificate's weights, as the codes
    uint16_t wb[kStep][kWb];
    StepInfo ia[kDTile], ib[kDTile];
  };
  Stage stage[2];
  double sa[kDTile][kPa];
  double sb[kStep][kPb];
  float scratch[kDThreads / 32][16][33];  // each warp's queued accumulators of a half, by output within it
};
// Three blocks an SM: at most 76,800 bytes each with the 1 KB the device keeps per block.
static_assert(sizeof(DmmaShared<32>) <= 76800, "three blocks an SM");

// Four FP8 codes (a 32-bit word, code q in byte q) as doubles, through the hardware's exact FP8 -> FP16
// conversion; `e5m2` picks the format.
__device__ inline void Fp8Word(uint32_t word, bool e5m2, double (&v)[4]) {
  const __nv_fp8_interpretation_t kind = e5m2 ? __NV_E5M2 : __NV_E4M3;
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const __half2_raw h2 = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> (16 * p)), kind);
    asm("cvt.f64.f16 %0, %1;" : "=d"(v[2 * p]) : "h"(h2.x));  // exact, one instruction
    asm("cvt.f64.f16 %0, %1;" : "=d"(v[2 * p + 1]) : "h"(h2.y));
  }
}

// Step s's codes, weights and bounds into a stage: codes by 16-byte cp.async where K and N are multiples of 16
// (kVec; rows and columns past the matrix zero-filled), else plain loads; the weights' buffers are padded for
// 16-byte loads always. Each thread's chunks keep their place in the tile from step to step, so their addresses
// are worked out once and advanced by a stride per step. Without kWeights (exact, block-exact) no weights load.
template <int kStep, bool kVec, bool kWeights>
struct StageLoader {
  static constexpr int kCodeA = kDTile * kStep / 16, kCodeB = kStep * kDTile / 16;  // 16-byte chunks
  static constexpr int kWeightA = kDTile * kStep / 8, kWeightB = kStep * kDTile / 8;
  static_assert(kCodeA <= kDThreads && kCodeB <= kDThreads && kWeightA % kDThreads == 0 && kWeightB % kDThreads == 0,
                "one code chunk a thread at most, whole rounds of weight chunks");
  static constexpr int kWa = kWeightA / kDThreads, kWb = kWeightB / kDThreads;
  int tid;
  size_t row0, col0;
  // A's code chunk: its row is in the matrix, its column within the step; B's: its k row within the step.
  bool a_row_in = false, b_col_in = false;
  int a_kc = 0, b_kr = 0;
  const uint8_t* a_code = nullptr;
  const uint8_t* b_code = nullptr;
  const uint16_t* a_w[kWa];
  bool a_w_in[kWa];
  const uint16_t* b_w[kWb];
  const StepInfo* info = nullptr;  // A's row (tid < 64) or B's column (tid < 128) at step 0
  bool info_in = false;

  __device__ StageLoader(const EngineGemmArgs& g, const EngineDmmaBuffers& f, size_t r0, size_t c0, int t)
      : tid(t), row0(r0), col0(c0) {
    if (kVec && tid < kCodeA) {
      const int r = tid / (kStep / 16);
      a_kc = 16 * (tid % (kStep / 16));
      a_row_in = row0 + r < g.m;
      a_code = g.a.codes + (a_row_in ? (row0 + r) * g.k + a_kc : 0);
    }
    if (kVec && tid < kCodeB) {
      b_kr = tid / (kDTile / 16);
      const size_t j = col0 + 16 * (tid % (kDTile / 16));
      b_col_in = j < g.n;
      b_code = g.b.codes + (b_col_in ? b_kr * g.n + j : 0);
    }
    if constexpr (kWeights) {
#pragma unroll
      for (int q = 0; q < kWa; ++q) {
        const int x = tid + q * kDThreads, r = x / (kStep / 8);
        a_w_in[q] = row0 + r < g.m;
        a_w[q] = f.a_w + (a_w_in[q] ? (row0 + r) * f.kp + 8 * (x % (kStep / 8)) : 0);
      }
#pragma unroll
      for (int q = 0; q < kWb; ++q) {
        const int x = tid + q * kDThreads;
        b_w[q] = f.b_w + (x / (kDTile / 8)) * f.np + col0 + 8 * (x % (kDTile / 8));
      }
    }
    if (tid < kDTile) {
      info_in = row0 + tid < g.m;
      info = f.a_info + (info_in ? (row0 + tid) * f.steps : 0);
    } else if (tid < 2 * kDTile) {
      info_in = col0 + tid - kDTile < g.n;
      info = f.b_info + (info_in ? (col0 + tid - kDTile) * f.steps : 0);
    }
  }

  __device__ void Load(typename DmmaShared<kStep>::Stage& st, const EngineGemmArgs& g, const EngineDmmaBuffers& f,
                       size_t s) const {
    const size_t k0 = s * kStep;
    if (kVec) {
      if (tid < kCodeA) {
        const bool in = a_row_in && k0 + a_kc < g.k;
        CpAsync16(&st.a[tid / (kStep / 16)][a_kc], in ? a_code + k0 : a_code, in);
      }
      if (tid < kCodeB) {
        const bool in = b_col_in && k0 + b_kr < g.k;
        CpAsync16(&st.b[b_kr][16 * (tid % (kDTile / 16))], in ? b_code + k0 * g.n : b_code, in);
      }
    } else {
      for (int x = tid; x < kDTile * kStep; x += kDThreads) {
        const int r = x / kStep, kk = x % kStep;
        const size_t i = row0 + r, k = k0 + kk;
        st.a[r][kk] = i < g.m && k < g.k ? g.a.codes[i * g.k + k] : 0;
      }
      for (int x = tid; x < kStep * kDTile; x += kDThreads) {
        const int r = x / kDTile, c = x % kDTile;
        const size_t k = k0 + r, j = col0 + c;
        st.b[r][c] = k < g.k && j < g.n ? g.b.codes[k * g.n + j] : 0;
      }
    }
    if constexpr (kWeights) {
#pragma unroll
      for (int q = 0; q < kWa; ++q) {
        const int x = tid + q * kDThreads;
        CpAsync16(&st.wa[x / (kStep / 8)][8 * (x % (kStep / 8))], a_w_in[q] ? a_w[q] + k0 : a_w[q], a_w_in[q]);
      }
#pragma unroll
      for (int q = 0; q < kWb; ++q) {
        const int x = tid + q * kDThreads;
        CpAsync16(&st.wb[x / (kDTile / 8)][8 * (x % (kDTile / 8))], b_w[q] + k0 * f.np, true);
      }
    }
    if (tid < kDTile) CpAsync16(&st.ia[tid], info_in ? info + s : info, info_in);
    else if (tid < 2 * kDTile) CpAsync16(&st.ib[tid - kDTile], info_in ? info + s : info, info_in);
    asm volatile("cp.async.commit_group;");
  }
};

// Four codes of a word as doubles, by the hardware's conversion (fp8: 1 E4M3, 2 E5M2) or the operand's table (0).
__device__ inline void DecodeWord(uint32_t word, int fp8, const double* __restrict__ table, double (&v)[4]) {
  if (fp8) {
    Fp8Word(word, fp8 == 2, v);
    return;
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) v[q] = __ldg(&table[(word >> (8 * q)) & 0xFF]);  // FP6, FP4: global, cached
}

// The stage's codes as FP64 values times their block scales (sa, sb; exact: powers of two, or zero), four codes
// per 32-bit word. A thread's B words keep their four columns (kDThreads is a multiple of kDTile / 4), so
// their scales are read once.
template <int kStep>
__device__ inline void ConvertStage(DmmaShared<kStep>& sm, const typename DmmaShared<kStep>::Stage& st, int tid,
                                    int a_fp8, int b_fp8, const double* a_values, const double* b_values) {
  for (int x = tid; x < kDTile * kStep / 4; x += kDThreads) {
    const int r = x / (kStep / 4), k4 = 4 * (x % (kStep / 4));
    const double scale = st.ia[r].scale;
    double v[4];
    DecodeWord(*reinterpret_cast<const uint32_t*>(&st.a[r][k4]), a_fp8, a_values, v);
    *reinterpret_cast<double2*>(&sm.sa[r][k4]) = make_double2(v[0] * scale, v[1] * scale);
    *reinterpret_cast<double2*>(&sm.sa[r][k4 + 2]) = make_double2(v[2] * scale, v[3] * scale);
  }
  static_assert(kDThreads % (kDTile / 4) == 0, "a thread's B columns stay put");
  const int c4 = 4 * (tid % (kDTile / 4));
  double bs[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) bs[q] = static_cast<double>(st.ib[c4 + q].scale);
  for (int kk = tid / (kDTile / 4); kk < kStep; kk += kDThreads / (kDTile / 4)) {
    double v[4];
    DecodeWord(*reinterpret_cast<const uint32_t*>(&st.b[kk][c4]), b_fp8, b_values, v);
    *reinterpret_cast<double2*>(&sm.sb[kk][c4]) = make_double2(v[0] * bs[0], v[1] * bs[1]);
    *reinterpret_cast<double2*>(&sm.sb[kk][c4 + 2]) = make_double2(v[2] * bs[2], v[3] * bs[3]);
  }
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

// How a certified step's sum is rounded: kRound24Rz / kRound24Rne, FP32 (24 bits) toward zero or to nearest
// even, by one conversion; kRoundFused, any other width (RoundFused); kRoundBlockExact, the block-exact model's
// RNE32(acc + the block's exact sum).
// kRoundExact, exact's steps each summed from zero and added to a running FP64 sum where TwoSum proves it exact;
// kRoundExactWhole, exact's blocks whose line bounds prove the whole sum exact (WholeSumExact): every step straight
// onto the FP64 accumulator (a lean kernel, more blocks an SM; the other blocks are left to kRoundExact).
enum StepRound {
  kRoundFused = 0,
  kRound24Rz = 1,
  kRound24Rne = 2,
  kRoundBlockExact = 3,
  kRoundExact = 4,
  kRoundExactWhole = 5
};

// RNE32(c + s) of an FP32 c and a double s, exactly: TwoSum gives t = fl64(c + s) and its error e; t rounded
// to odd where e is not zero (one step toward e when t's last bit is even) holds the exact sum's FP32 rounding,
// since 53 bits are at least 24 + 2 (and the magnitudes here, above 2^-300, are far from FP64's subnormals).
__device__ inline float AddRoundF32(float c, double s) {
  double e;
  const double t = qmx::detail::TwoSum(static_cast<double>(c), s, e);
  long long bits = __double_as_longlong(t);
  if (e != 0 && (bits & 1) == 0) bits += (e > 0) == (t > 0) ? 1 : -1;
  return __double2float_rn(__longlong_as_double(bits));
}

// A block-exact step where the bounds prove the FP64 tensor core's sum d of the block's products (from zero)
// exact: every product is a multiple of 2^(minlsb(row) + minlsb(column)) below 2^(maxnom(row) + maxnom(column)
// + 2), so 2^(kLogStep) of them and every partial sum fit 53 bits when the span ab - lo plus 2 + kLogStep is
// at most 53 (an all-zero line passes with d = 0). Then the step is RNE32(c + d). False (c unchanged)
// otherwise: for a special line (maxnom kSpecialStep; checked on its own, since a line of Inf or NaN and
// zeros has minlsb kNoLsb, which would pass the span), a NaN or Inf c or d, and d = 0 with c = -0 (whose sign
// depends on the products' zero signs).
template <int kLogStep>
__device__ __forceinline__ bool BlockExactFast(int ab, int lo, double d, float& c) {
  if (ab >= kSpecialSum || ab - lo > 51 - kLogStep || !isfinite(c) || !isfinite(d)) return false;
  if (d == 0) return !(c == 0 && signbit(c));  // c + 0 is c; +0 stays +0
  c = AddRoundF32(c, d);
  return true;
}

// exact's step: the running sum s (FP64, C first) plus the block's sum d, where the bounds prove d exact (as
// BlockExactFast) and TwoSum proves the addition exact (its error is zero). False otherwise (s updated anyway):
// the output then takes the exact accumulator at the end.
template <int kLogStep>
__device__ __forceinline__ bool ExactFast(int ab, int lo, double d, double& s) {
  double e;
  s = qmx::detail::TwoSum(s, d, e);
  return ab < kSpecialSum && ab - lo <= 51 - kLogStep && e == 0;
}

// The step's result for one output where the certificate proves that no term is cut: d the sum of its
// products (elements times scales) and its accumulator c from the FP64 tensor core (exact where no term is
// cut), w its weights' sum from the BF16 one, a127 its row's plus its column's maxnom plus 127, b127f their
// minlsb plus 127 + F, z127 max(zero_exp, -126) + 127. U + 127 = max(c's exponent field, a127, z127) bounds the
// step's largest nominal exponent from above (a zero or subnormal c's -126 included), so 2^(U - F) bounds the
// unit. True with c updated, else false (c unchanged). U <= 119 keeps |d| below 2^127 (products below
// 2^(U + 2), 32 of them and c below 2^(U + 8)), so no RZ result sits at FLT_MAX (where the reference may give
// Inf); a special line (maxnom kSpecialStep) and a NaN or Inf accumulator (field 255) fail it too.
template <int kRound>
__device__ __forceinline__ bool FastStep(int z127, int frac_bits, int out_bits, bool out_rne, int a127, int b127f,
                                         double d, float w, float& c) {
  const unsigned cb = __float_as_uint(c);
  const int efn = static_cast<int>((cb >> 23) & 0xFFu);
  const int u127 = max(max(efn, a127), z127);
  // The products: v <= 0 passes for any w (w <= 32); v >= 22 passes only w = 0 (no nonzero product).
  const int v = min(max(u127 - b127f, 0), 22);
  // The accumulator: its lowest set bit plus 151 (one lower for a subnormal c: stricter), bit 23 set capping the
  // count at the significand's width, at or above the unit U - F.
  const int clo = efn + __ffs(static_cast<int>(cb | 0x800000u));
  const bool ok = __float_as_uint(w) < (static_cast<unsigned>(133 - 6 * v) << 23) - 128u &&
                  ((cb << 1) == 0 || clo >= u127 + 24 - frac_bits) && u127 <= 127 + 119;
  // An exact zero sum is +0 (RoundFused's rule); a nonzero one cut to zero keeps its sign, as the conversion does.
  float r;
  if (kRound == kRound24Rz) {
    r = d == 0 ? 0.0f : __double2float_rz(d);
  } else if (kRound == kRound24Rne) {
    r = d == 0 ? 0.0f : __double2float_rn(d);
  } else {
    const int unit = min(u127, 127 + 119) - 127 - frac_bits;  // clamped: a failing step's is discarded anyway
    r = d == 0 ? 0.0f : RoundFused(d * Pow2(-unit), unit, out_bits, out_rne);
  }
  if (ok) c = r;
  return ok;
}

// A queued step whose accumulator c (nonzero, finite) has a nominal exponent at or above every product's bound
// (the row's maxnom plus the column's) and the zero rule's: then c sets the step's largest exponent, so the unit
// is 2^(nom(c) - F) without looking at the products, and the step is FusedStep's sum of each term cut at that
// unit, computed here by one lane from the FP64 tiles: each product (element times scale, exact) times
// 2^-unit is exact in FP64 and cut by trunc (or rint); the integers' sum stays below 2^(F + 8). False (out
// unchanged) for any other step, and where an RZ result at FLT_MAX may be the reference's Inf.
template <int kStep, int kRound>
__device__ __forceinline__ bool AccStep(const EngineModel& p, const DmmaShared<kStep>& sm, const StepInfo& ia,
                                        const StepInfo& ib, int r, int c, float cur, float& out) {
  const int mab = ia.maxnom + ib.maxnom;
  if (mab >= kSpecialSum || cur == 0 || !isfinite(cur)) return false;
  const int ce = NominalF32(cur);
  if (ce < mab || ce < p.zero_exp) return false;
  const int unit = ce - p.frac_bits;
  const double p2 = Pow2(-unit);
  const bool rne = p.term_rne;
  double t = CutP(static_cast<double>(cur), p2, rne);
#pragma unroll
  for (int k = 0; k < kStep; ++k) {
    const double y = sm.sa[r][k] * p2 * sm.sb[k][c];
    t += rne ? rint(y) : trunc(y);
  }
  float res;
  if (kRound == kRoundFused) {
    res = RoundFused(t, unit, p.out_bits, p.out_rne);
  } else {
    const double d = t * Pow2(unit);  // exact: unit >= -126 - F
    if (kRound == kRound24Rz) {
      res = __double2float_rz(d);
      if (fabsf(res) == FLT_MAX) return false;
    } else {
      res = __double2float_rn(d);
    }
    if (t == 0) res = 0.0f;  // +0 for an exact zero (RoundFused's rule); a nonzero sum keeps its sign
  }
  out = res;
  return true;
}

template <int kStep, bool kPromote, bool kVec, int kRound>
__global__ void __launch_bounds__(kDThreads, kPromote || kRound == kRoundExact ? 2 : 3)
    EngineDmmaKernel(const __grid_constant__ EngineGemmArgs g, const __grid_constant__ EngineDmmaBuffers f) {
  using Shared = DmmaShared<kStep>;
  constexpr int kLogStep = kStep == 32 ? 5 : 4;  // the exact models' products a step: 2^kLogStep
  // exact and block-exact cut no term: no certificate weights, no BF16 tensor-core sums.
  constexpr bool kExactSum = kRound == kRoundExact || kRound == kRoundExactWhole;
  constexpr bool kCert = !kExactSum && kRound != kRoundBlockExact;
  extern __shared__ __align__(16) unsigned char dmma_smem[];
  Shared& sm = *reinterpret_cast<Shared*>(dmma_smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const EngineModel& p = g.model;
  const int z127 = max(p.zero_exp, -126) + 127, frac_bits = p.frac_bits, out_bits = p.out_bits;
  const bool out_rne = p.out_rne;
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
  // exact: each output's running sum in FP64 (C first), and the outputs (bit 8 mi + 2 ni + h) whose sum the
  // steps could not keep exact, which take the exact accumulator at the end.
  double dacc[4][4][2];
  unsigned inexact = 0;
  const size_t block = static_cast<size_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  if constexpr (kRound == kRoundExact) {
    if (f.per_step != nullptr && !f.per_step[block]) return;  // summed whole by the first kernel
    ForOutputs([&](int mi, int ni, int h) {
      dacc[mi][ni][h] = acc[mi][ni][h];
      if (!isfinite(acc[mi][ni][h])) inexact |= 1u << (8 * mi + 2 * ni + h);
    });
  }
  if constexpr (kRound == kRoundExactWhole) {
    // The block runs here where the line bounds prove every one of its outputs' whole sums exact in FP64, else
    // marks itself for kRoundExact's kernel and leaves.
    bool mine = true;
    ForOutputs([&](int mi, int ni, int h) {
      dacc[mi][ni][h] = acc[mi][ni][h];
      const size_t i = row0 + wr + 8 * mi + gr, j = col0 + wc + 8 * ni + 2 * gc + h;
      if (i < g.m && j < g.n) mine = mine && WholeSumExact(f.a_bound[i], f.b_bound[j], acc[mi][ni][h]);
    });
    if (!__syncthreads_and(mine)) {
      if (tid == 0) f.per_step[block] = 1;
      return;
    }
    if (tid == 0 && f.whole_outputs) {
      const size_t rows = g.m - row0 < kDTile ? g.m - row0 : kDTile, cols = g.n - col0 < kDTile ? g.n - col0 : kDTile;
      atomicAdd(f.whole_outputs, static_cast<unsigned long long>(rows * cols));
    }
  }
  const size_t window = kPromote ? static_cast<size_t>(p.promote) : 1;
  StageLoader<kStep, kVec, kCert> loader(g, f, row0, col0, tid);
  loader.Load(sm.stage[0], g, f, 0);
  for (size_t s = 0, k0 = 0; k0 < g.k; ++s, k0 += kStep) {
    const size_t k1 = k0 + kStep < g.k ? k0 + kStep : g.k;
    const typename Shared::Stage& st = sm.stage[s & 1];
    asm volatile("cp.async.wait_group 0;");
    __syncthreads();  // the stage has arrived, and every warp is done with the previous step's tiles
    ConvertStage<kStep>(sm, st, tid, f.a_fp8, f.b_fp8, g.a.values, g.b.values);
    __syncthreads();
    if (k1 < g.k) loader.Load(sm.stage[(s + 1) & 1], g, f, s + 1);
    if constexpr (kRound == kRoundExactWhole) {
      // Every step straight onto the accumulators, k4 slice by slice: the two row tiles' A fragments and the four
      // column tiles' B fragments (each loaded once a step), then eight independent FP64 products.
#pragma unroll
      for (int q = 0; q < kStep / 4; ++q) {
        double a[2][2], b[4];
#pragma unroll
        for (int t = 0; t < 2; ++t) {
          a[t][0] = sm.sa[wr + 16 * t + gr][4 * q + gc];
          a[t][1] = sm.sa[wr + 16 * t + 8 + gr][4 * q + gc];
        }
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) b[ni] = sm.sb[4 * q + gc][wc + 8 * ni + gr];
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int ni = 0; ni < 4; ++ni) Dmma(dacc[2 * t][ni], dacc[2 * t + 1][ni], a[t][0], a[t][1], b[ni]);
      }
    } else {
      // Two halves of the warp's rows, 16 each (m2), to keep fewer values live: the certificate's weight sums on
      // the BF16 tensor core, the FP64 sums 16 x 8 at a time, then each output's step where the certificate
      // holds. The rest wait in the warp's scratch, marked in `queued` (bit (mi % 2 * 4 + ni) * 2 + h), with
      // steps that meet NaN or Inf, and are computed before the next half.
#pragma unroll
      for (int m2 = 0; m2 < 2; ++m2) {
        float ws[4][4];  // ws[ni][2 (mi % 2) + h]
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int x = 0; x < 4; ++x) ws[ni][x] = 0.0f;
#pragma unroll
        for (int k16 = 0; k16 < (kCert ? kStep : 0); k16 += 16) {
          uint32_t wa[4], wb[4][2];
          const unsigned addr =
              SharedAddr(&st.wa[wr + 16 * m2 + lane % 8 + 8 * ((lane / 8) % 2)][k16 + 8 * (lane / 16)]);
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                       : "=r"(wa[0]), "=r"(wa[1]), "=r"(wa[2]), "=r"(wa[3])
                       : "r"(addr));
#pragma unroll
          for (int ni = 0; ni < 4; ni += 2) {
            // Matrix l / 8: k rows k16 + 8 ((l / 8) % 2), columns of n tile ni + l / 16; transposed, each lane gets
            // B (k 2t..2t+1, n g) as the MMA takes it.
            const unsigned baddr = SharedAddr(&st.wb[k16 + lane % 8 + 8 * ((lane / 8) % 2)][wc + 8 * (ni + lane / 16)]);
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                         : "=r"(wb[ni][0]), "=r"(wb[ni][1]), "=r"(wb[ni + 1][0]), "=r"(wb[ni + 1][1])
                         : "r"(baddr));
          }
#pragma unroll
          for (int ni = 0; ni < 4; ++ni) MmaBf16(ws[ni], wa, wb[ni][0], wb[ni][1]);
        }
        double af[kStep / 4][2];  // A's fragments of the half for every k4
#pragma unroll
        for (int q = 0; q < kStep / 4; ++q) {
          af[q][0] = sm.sa[wr + 16 * m2 + gr][4 * q + gc];
          af[q][1] = sm.sa[wr + 16 * m2 + 8 + gr][4 * q + gc];
        }
        int row_a[2], row_b[2];  // FastStep's a127 and b127f, the row's parts
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          row_a[x] = st.ia[wr + 16 * m2 + 8 * x + gr].maxnom + 127;
          row_b[x] = st.ia[wr + 16 * m2 + 8 * x + gr].minlsb + 127 + frac_bits;
        }
        unsigned queued = 0;
        float(&scratch)[16][33] = sm.scratch[warp];
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          // The accumulators plus the step's products, [mi % 2][h] (exact where no term is cut: FastStep).
          double sum[2][2];
#pragma unroll
          for (int x = 0; x < 2; ++x)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              sum[x][h] = kRound == kRoundExact || kRound == kRoundBlockExact
                              ? 0.0
                              : static_cast<double>(kPromote ? part[2 * m2 + x][ni][h] : acc[2 * m2 + x][ni][h]);
#pragma unroll
          for (int q = 0; q < kStep / 4; ++q)
            Dmma(sum[0], sum[1], af[q][0], af[q][1], sm.sb[4 * q + gc][wc + 8 * ni + gr]);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int2 ib = *reinterpret_cast<const int2*>(&st.ib[wc + 8 * ni + 2 * gc + h]);  // maxnom, minlsb
#pragma unroll
            for (int x = 0; x < 2; ++x) {
              if constexpr (kRound == kRoundExact) {
                if (!ExactFast<kLogStep>(row_a[x] + ib.x, row_b[x] + ib.y, sum[x][h], dacc[2 * m2 + x][ni][h]))
                  inexact |= 1u << (8 * (2 * m2 + x) + 2 * ni + h);
                continue;
              }
              float& cur = kPromote ? part[2 * m2 + x][ni][h] : acc[2 * m2 + x][ni][h];
              const bool ok = kRound == kRoundBlockExact
                                  ? BlockExactFast<kLogStep>(row_a[x] + ib.x, row_b[x] + ib.y, sum[x][h], cur)
                                  : FastStep<kRound>(z127, frac_bits, out_bits, out_rne, row_a[x] + ib.x,
                                                     row_b[x] + ib.y, sum[x][h], ws[ni][2 * x + h], cur);
              if (!ok) {
                queued |= 1u << ((x * 4 + ni) * 2 + h);
                scratch[8 * x + gr][8 * ni + 2 * gc + h] = cur;
              }
            }
          }
        }
        // The queued steps: first each lane its own whose accumulator sets the step's exponent (AccStep), all
        // lanes at once; then the others one at a time, each on the whole warp (a loop, not unrolled: the
        // kernel's code stays small). Rows and columns past the matrix are dropped here.
        if (__any_sync(0xFFFFFFFFu, queued != 0)) {
          unsigned mine = queued, rest = 0;
          while (__any_sync(0xFFFFFFFFu, mine != 0)) {
            if (mine == 0) continue;
            const int b = __ffs(static_cast<int>(mine)) - 1;
            mine &= mine - 1;
            const int rl = 8 * (b >> 3) + gr, cl = 8 * ((b >> 1) & 3) + 2 * gc + (b & 1);
            const int r = wr + 16 * m2 + rl, c = wc + cl;
            if (row0 + r >= g.m || col0 + c >= g.n) continue;
            float out;
            if (kRound == kRoundBlockExact) {  // on the reference's exact accumulator (engine_fused.cuh)
              scratch[rl][cl] =
                  BlockExactStep(LineOf(g, g.a.values, g.b.values, g.a.nominal, g.b.nominal, row0 + r, col0 + c), k0,
                                 k1, scratch[rl][cl]);
              ++fallbacks;
            } else if (AccStep<kStep, kRound>(p, sm, st.ia[r], st.ib[c], r, c, scratch[rl][cl], out)) {
              scratch[rl][cl] = out;
              ++fallbacks;
            } else {
              rest |= 1u << b;
            }
          }
          __syncwarp();  // the other lanes' scratch entries, written above, are read below
          for (;;) {
            const unsigned lanes = __ballot_sync(0xFFFFFFFFu, rest != 0);
            if (lanes == 0) break;
            const int src = __ffs(static_cast<int>(lanes)) - 1;
            const int b = __ffs(static_cast<int>(__shfl_sync(0xFFFFFFFFu, rest, src))) - 1;
            if (lane == src) rest &= rest - 1;
            const int rl = 8 * (b >> 3) + src / 4, cl = 8 * ((b >> 1) & 3) + 2 * (src % 4) + (b & 1);
            const int r = wr + 16 * m2 + rl, c = wc + cl;
            const size_t i = row0 + r, j = col0 + c;
            if (lane == 0) ++fallbacks;
            const float in = scratch[rl][cl];
            const StepInfo &ia = st.ia[r], &ib = st.ib[c];
            if (ia.maxnom == kSpecialStep || ib.maxnom == kSpecialStep || !isfinite(in)) {
              if (lane == 0)
                scratch[rl][cl] = FusedStep(LineOf(g, g.a.values, g.b.values, g.a.nominal, g.b.nominal, i, j), p, k0,
                                            k1, in, p.scales_in);
            } else {
              const float out = WarpTileStep(p, f.a_parts, f.b_parts, &st.a[r][0], &st.b[0][c],
                                             static_cast<int>(k1 - k0), ia, ib, in, lane);
              if (lane == 0) scratch[rl][cl] = out;
            }
            __syncwarp();
          }
          __syncwarp();
#pragma unroll
          for (int x = 0; x < 2; ++x)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                float& cur = kPromote ? part[2 * m2 + x][ni][h] : acc[2 * m2 + x][ni][h];
                if ((queued >> ((x * 4 + ni) * 2 + h)) & 1u) cur = scratch[8 * x + gr][8 * ni + 2 * gc + h];
              }
          __syncwarp();
        }
      }
    }
    if (kPromote && ((k0 + kStep) % window == 0 || k1 == g.k)) {
      const size_t w0 = k0 / window * window;
      ForOutputs([&](int mi, int ni, int h) {
        const size_t i = row0 + wr + 8 * mi + gr, j = col0 + wc + 8 * ni + 2 * gc + h;
        if (i >= g.m || j >= g.n) return;
        acc[mi][ni][h] = Promote(g, LineOf(g, g.a.values, g.b.values, g.a.nominal, g.b.nominal, i, j), w0,
                                 part[mi][ni][h], acc[mi][ni][h]);
        part[mi][ni][h] = 0.0f;
      });
    }
  }
  if constexpr (kExactSum) {
    // An exact FP64 sum rounds once to FP32; an inexact one, and an exact zero (whose sign depends on the
    // products' zero signs), runs on the exact accumulator, its steps counted as fallbacks.
    const unsigned long long k_steps = (g.k + kStep - 1) / kStep;
    unsigned long long slow = 0;  // counted apart: 32 outputs' K steps may pass 2^32
    unsigned redo = 0;            // bit 8 mi + 2 ni + h: the exact accumulator's (one call site, few live values)
    ForOutputs([&](int mi, int ni, int h) {
      const size_t i = row0 + wr + 8 * mi + gr, j = col0 + wc + 8 * ni + 2 * gc + h;
      if (i >= g.m || j >= g.n) return;
      const double v = dacc[mi][ni][h];
      const int bit = 8 * mi + 2 * ni + h;
      if (((inexact >> bit) & 1u) || v == 0) redo |= 1u << bit;
      else g.out[i * g.n + j] = Finish(g, i, j, __double2float_rn(v));
    });
    while (redo != 0) {
      const int b = __ffs(static_cast<int>(redo)) - 1;
      redo &= redo - 1;
      const size_t i = row0 + wr + 8 * (b >> 3) + gr, j = col0 + wc + 8 * ((b >> 1) & 3) + 2 * gc + (b & 1);
      const float r = ExactFamilyDot(g, LineOf(g, g.a.values, g.b.values, g.a.nominal, g.b.nominal, i, j), i, j);
      g.out[i * g.n + j] = Finish(g, i, j, r);
      slow += k_steps;
    }
    if (slow && f.fallback_steps) atomicAdd(f.fallback_steps, slow);
  } else {
    ForOutputs([&](int mi, int ni, int h) {
      const size_t i = row0 + wr + 8 * mi + gr, j = col0 + wc + 8 * ni + 2 * gc + h;
      if (i < g.m && j < g.n) g.out[i * g.n + j] = Finish(g, i, j, acc[mi][ni][h]);
    });
  }
  const unsigned counted = __reduce_add_sync(0xFFFFFFFFu, fallbacks);
  if (lane == 0 && counted && f.fallback_steps) atomicAdd(f.fallback_steps, static_cast<unsigned long long>(counted));
}

template <int kStep, bool kPromote, bool kVec, int kRound>
void LaunchDmma(const EngineGemmArgs& args, const EngineDmmaBuffers& f, cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>((args.n + kDTile - 1) / kDTile),
                  static_cast<unsigned>((args.m + kDTile - 1) / kDTile));
  const auto kernel = EngineDmmaKernel<kStep, kPromote, kVec, kRound>;
  const int bytes = static_cast<int>(sizeof(DmmaShared<kStep>));
  Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
        "engine FP64 tensor-core GEMM: shared memory");
  // All of L1 as shared memory, so that three blocks fit an SM (the tiles arrive by cp.async).
  Check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared),
        "engine FP64 tensor-core GEMM: carveout");
  kernel<<<grid, kDThreads, bytes, st>>>(args, f);
}

// exact through cuBLASLt (EngineDmmaBuffers::dense_a): each element times its step's scale in FP64 (exact: the
// scale is a power of two, 1 without scales), A row-major M x K, B row-major K x N; NaN and Inf stay (their lines
// are special, WholeSumExact false).
__global__ void DenseValuesKernel(EngineOperand o, bool is_a, size_t k, int step, size_t steps, const StepInfo* info,
                                  double* out) {
  const size_t total = o.rows * o.cols;
  for (size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = t / o.cols, c = t % o.cols;  // A: (row, k); B: (k, column)
    const size_t line = is_a ? r : c, kk = is_a ? c : r;
    out[t] = o.values[o.codes[t]] * static_cast<double>(info[line * steps + kk / static_cast<size_t>(step)].scale);
  }
}

// C (or 0) in FP64 into D, which cuBLASLt then accumulates onto (exact: C is part of WholeSumExact's bound).
__global__ void DenseCKernel(const float* c, size_t total, double* d) {
  for (size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<size_t>(gridDim.x) * blockDim.x)
    d[t] = static_cast<double>(c[t]);
}

// kRoundExactWhole's epilogue on cuBLASLt's FP64 product d: a 64 x 64 block of outputs whose line bounds prove every
// whole sum exact rounds each sum once to FP32 (an exact zero, whose sign depends on the products' zero signs,
// takes the exact accumulator, its steps counted as fallbacks); any other block is marked for kRoundExact.
__global__ void __launch_bounds__(kDThreads)
    DenseFinishKernel(const __grid_constant__ EngineGemmArgs g, const __grid_constant__ EngineDmmaBuffers f) {
  const size_t row0 = static_cast<size_t>(blockIdx.y) * kDTile, col0 = static_cast<size_t>(blockIdx.x) * kDTile;
  const size_t block = static_cast<size_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  const int tid = threadIdx.x;
  bool mine = true;
  for (int t = tid; t < kDTile * kDTile; t += kDThreads) {
    const size_t i = row0 + t / kDTile, j = col0 + t % kDTile;
    if (i < g.m && j < g.n) mine = mine && WholeSumExact(f.a_bound[i], f.b_bound[j], g.c ? g.c[i * g.n + j] : 0.0f);
  }
  if (!__syncthreads_and(mine)) {
    if (tid == 0) f.per_step[block] = 1;
    return;
  }
  const size_t rows = g.m - row0 < kDTile ? g.m - row0 : kDTile, cols = g.n - col0 < kDTile ? g.n - col0 : kDTile;
  if (tid == 0 && f.whole_outputs) atomicAdd(f.whole_outputs, static_cast<unsigned long long>(rows * cols));
  const unsigned long long k_steps = (g.k + g.model.step - 1) / g.model.step;
  unsigned long long slow = 0;
  for (int t = tid; t < kDTile * kDTile; t += kDThreads) {
    const size_t i = row0 + t / kDTile, j = col0 + t % kDTile;
    if (i >= g.m || j >= g.n) continue;
    const double v = f.dense_d[i * g.n + j];
    float r;
    if (v != 0) {
      r = __double2float_rn(v);
    } else {
      r = ExactFamilyDot(g, LineOf(g, g.a.values, g.b.values, g.a.nominal, g.b.nominal, i, j), i, j);
      slow += k_steps;
    }
    g.out[i * g.n + j] = Finish(g, i, j, r);
  }
  if (slow && f.fallback_steps) atomicAdd(f.fallback_steps, slow);
}

template <int kStep>
void LaunchStep(const EngineGemmArgs& args, const EngineDmmaBuffers& f, cudaStream_t st) {
  // 16-byte loads where every row of A and of B starts 16 bytes aligned.
  const bool vec = args.k % 16 == 0 && args.n % 16 == 0 && reinterpret_cast<uintptr_t>(args.a.codes) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(args.b.codes) % 16 == 0;
  const EngineModel& p = args.model;
  if (p.kind == 2) {
    // exact: the blocks summed whole (by cuBLASLt's FP64 GEMM where given and it has an algorithm), then the others
    // step by step.
    const bool dense = f.dense_a != nullptr &&
                       DenseDgemm(args.m, args.n, args.k, f.dense_a, f.dense_b, f.dense_d, args.c != nullptr, st);
    if (f.dense_used != nullptr) *f.dense_used = dense;
    if (dense) {
      const dim3 grid(static_cast<unsigned>((args.n + kDTile - 1) / kDTile),
                      static_cast<unsigned>((args.m + kDTile - 1) / kDTile));
      DenseFinishKernel<<<grid, kDThreads, 0, st>>>(args, f);
    } else if (vec) {
      LaunchDmma<kStep, false, true, kRoundExactWhole>(args, f, st);
    } else {
      LaunchDmma<kStep, false, false, kRoundExactWhole>(args, f, st);
    }
    if (vec) LaunchDmma<kStep, false, true, kRoundExact>(args, f, st);
    else LaunchDmma<kStep, false, false, kRoundExact>(args, f, st);
  } else if (p.kind == 3) {  // block-exact
    if (vec) LaunchDmma<kStep, false, true, kRoundBlockExact>(args, f, st);
    else LaunchDmma<kStep, false, false, kRoundBlockExact>(args, f, st);
  } else if (p.promote != 0) {  // hopper-fp8 and its kin, off Hopper (out_bits 24 or F + 1)
    if (vec) LaunchDmma<kStep, true, true, kRoundFused>(args, f, st);
    else LaunchDmma<kStep, true, false, kRoundFused>(args, f, st);
  } else if (p.out_bits == 24 && !p.out_rne) {  // blackwell-mxf8f6f4
    if (vec) LaunchDmma<kStep, false, true, kRound24Rz>(args, f, st);
    else LaunchDmma<kStep, false, false, kRound24Rz>(args, f, st);
  } else if (p.out_bits == 24) {
    if (vec) LaunchDmma<kStep, false, true, kRound24Rne>(args, f, st);
    else LaunchDmma<kStep, false, false, kRound24Rne>(args, f, st);
  } else {
    LaunchDmma<kStep, false, false, kRoundFused>(args, f, st);
  }
}

}  // namespace

void LaunchEngineDmmaGemm(const EngineGemmArgs& args, const EngineDmmaBuffers& f, void* stream) {
  const cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (args.m == 0 || args.n == 0) return;
  const int step = args.model.step;
  if (f.per_step != nullptr)
    Check(cudaMemsetAsync(f.per_step, 0, ((args.m + kDTile - 1) / kDTile) * ((args.n + kDTile - 1) / kDTile), st),
          "engine FP64 tensor-core GEMM: block marks");
  if (f.b_w != nullptr && f.np > args.n)
    Check(cudaMemsetAsync(f.b_w, 0, f.kp * f.np * sizeof(uint16_t), st), "engine FP64 tensor-core GEMM: weights");
  StepInfoKernel<<<1024, 256, 0, st>>>(args.a, true, args.m, args.k, step, args.model.scales_in, f.steps, f.a_info,
                                       f.a_w, f.kp, f.a_ss);
  StepInfoKernel<<<1024, 256, 0, st>>>(args.b, false, args.n, args.k, step, args.model.scales_in, f.steps, f.b_info,
                                       f.b_w, f.np, f.b_ss);
  if (f.a_bound != nullptr) {
    LineBoundKernel<<<256, 256, 0, st>>>(f.a_info, f.a_ss, args.m, f.steps, f.a_bound);
    LineBoundKernel<<<256, 256, 0, st>>>(f.b_info, f.b_ss, args.n, f.steps, f.b_bound);
  }
  if (f.dense_a != nullptr) {
    DenseValuesKernel<<<1024, 256, 0, st>>>(args.a, true, args.k, step, f.steps, f.a_info, f.dense_a);
    DenseValuesKernel<<<1024, 256, 0, st>>>(args.b, false, args.k, step, f.steps, f.b_info, f.dense_b);
    if (args.c != nullptr) DenseCKernel<<<1024, 256, 0, st>>>(args.c, args.m * args.n, f.dense_d);
  }
  Check(cudaGetLastError(), "engine FP64 tensor-core GEMM: step bounds launch");
  if (step == 16) LaunchStep<16>(args, f, st);
  else LaunchStep<32>(args, f, st);
  Check(cudaGetLastError(), "engine FP64 tensor-core GEMM launch");
}

}  // namespace qmx::gpu::detail
