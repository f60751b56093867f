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
// it the weight 2^(-6 min(r, 10)) (zero for a zero element), a BF16 power of two. The BF16 tensor core sums the
// weights' products for each output, W, in FP32: a product whose relative lowest bits sum to d weighs
// 64^-d, or more where a side was capped. With v = E - F - minlsb(row) - minlsb(column), every product's
// lowest bit is at or above the unit when v <= 0, or when v <= 21 and W < 64^(1 - v) (1 - 2^-16): a product
// with relative sum below v weighs at least 64^(1 - v), and the tensor core's FP32 sum of at most 32
// nonnegative terms is within 2^-17 of W (each term it drops or cuts lies more than 23 bits below the
// largest), so such a product keeps the computed W above the bound. Uncapped, 32 products at v or above weigh
// at most 64^(1 - v) / 2 and pass. With the accumulator's own lowest bit at or above 2^(E - F), nothing is
// cut. On quantized Gaussian MXFP8 tensors this leaves 0.5-0.8 % of the steps uncertified, those whose
// terms are in fact cut (the row-and-column bound alone left 7-9 %).
//
// The sum. The tiles hold each element times its block scale in FP64 (exact: a power of two). Where nothing
// is cut, every product and partial sum of the step is a multiple of 2^(E - F) below 2^(E + 7) (F + 7 bits),
// so the FP64 tensor core's sum is exact whatever its order, and so is the accumulator added to it (F + 8 <=
// 53 bits). Rounding that to FP32 toward zero or to nearest even is one conversion (FusedStep's rounding at
// 24 bits, subnormals on FP32's own grid; RNE's overflow is the reference's Inf, and an RZ result at FLT_MAX,
// where the reference may give Inf, takes the exact step); other widths run RoundFused. Any other step is
// computed exactly from the tile's codes in integers (WarpTileStep: each term cut at the step's unit as
// FusedStep cuts it) by the whole warp, and a step that meets NaN or Inf runs FusedStep itself.
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
// w[line * pitch + k], B's to w[k * pitch + line], every k of the step (0 past K).
__global__ void StepInfoKernel(EngineOperand o, bool is_a, size_t lines, size_t k, int step, bool scales_in,
                               size_t steps, StepInfo* info, uint16_t* w, size_t pitch) {
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
    auto code_at = [&](size_t kk) { return is_a ? o.codes[line * o.cols + kk] : o.codes[kk * o.cols + line]; };
    int maxnom = kNoTerm, minlsb = kNoLsb;
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
    }
    r.maxnom = special ? kSpecialStep : maxnom;
    r.minlsb = minlsb;
    info[line * steps + s] = r;
    for (size_t kk = k0; kk < k0 + step; ++kk) {
      uint16_t wk = 0;
      if (kk < k1 && !zero_scale) {
        const double v = o.values[code_at(kk)];
        if (Finite(v) && v != 0) wk = static_cast<uint16_t>((127 - 6 * min(LowestBit(v) + ls - minlsb, kWeightCap)) << 7);
      }
      w[is_a ? line * pitch + kk : kk * pitch + line] = wk;
    }
  }
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

// The kernel's shared memory (dynamic: about 80 KB for steps of 32). Codes, certificate weights and step bounds
// arrive by cp.async into two stages; each step converts its stage's codes into the FP64 tiles of the products.
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
  double ta[256], tb[256];  // the codes' values, where the hardware's FP8 conversion does not serve
  CodeParts pa[256], pb[256];
  float scratch[kDThreads / 32][32][33];  // each warp's queued accumulators, by output within the warp's tile
};

// Four FP8 codes (a 32-bit word, code q in byte q) as doubles, through the hardware's exact FP8 -> FP16
// conversion; `e5m2` picks the format.
__device__ inline void Fp8Word(uint32_t word, bool e5m2, double (&v)[4]) {
  const __nv_fp8_interpretation_t kind = e5m2 ? __NV_E5M2 : __NV_E4M3;
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const __half2_raw h2 = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> (16 * p)), kind);
    v[2 * p] = static_cast<double>(__half2float(__half(__half_raw{h2.x})));
    v[2 * p + 1] = static_cast<double>(__half2float(__half(__half_raw{h2.y})));
  }
}

// Step s's codes, weights and bounds into stage `st`: codes by 16-byte cp.async where K and N are multiples of
// 16 (kVec; rows and columns past the matrix zero-filled), else plain loads; the weights' buffers are padded
// for 16-byte loads always.
template <int kStep, bool kVec>
__device__ inline void LoadStage(typename DmmaShared<kStep>::Stage& st, const EngineGemmArgs& g,
                                 const EngineDmmaBuffers& f, size_t row0, size_t col0, size_t s, int tid) {
  const size_t k0 = s * kStep;
  if (kVec) {
    for (int x = tid; x < kDTile * kStep / 16; x += kDThreads) {
      const int r = x / (kStep / 16), c = x % (kStep / 16);
      const size_t i = row0 + r, k = k0 + 16 * c;
      const bool in = i < g.m && k < g.k;
      CpAsync16(&st.a[r][16 * c], g.a.codes + (in ? i * g.k + k : 0), in);
    }
    for (int x = tid; x < kStep * kDTile / 16; x += kDThreads) {
      const int r = x / (kDTile / 16), c = x % (kDTile / 16);
      const size_t k = k0 + r, j = col0 + 16 * c;
      const bool in = k < g.k && j < g.n;
      CpAsync16(&st.b[r][16 * c], g.b.codes + (in ? k * g.n + j : 0), in);
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
  for (int x = tid; x < kDTile * kStep / 8; x += kDThreads) {  // A's weights: 8 per 16 bytes
    const int r = x / (kStep / 8), c = x % (kStep / 8);
    const size_t i = row0 + r;
    CpAsync16(&st.wa[r][8 * c], f.a_w + (i < g.m ? i * f.kp + k0 + 8 * c : 0), i < g.m);
  }
  for (int x = tid; x < kStep * kDTile / 8; x += kDThreads) {  // B's: the padded columns hold zeros
    const int r = x / (kDTile / 8), c = x % (kDTile / 8);
    CpAsync16(&st.wb[r][8 * c], f.b_w + (k0 + r) * f.np + col0 + 8 * c, true);
  }
  if (tid < kDTile) {
    const size_t i = row0 + tid;
    CpAsync16(&st.ia[tid], f.a_info + (i < g.m ? i * f.steps + s : 0), i < g.m);
  } else if (tid < 2 * kDTile) {
    const size_t j = col0 + tid - kDTile;
    CpAsync16(&st.ib[tid - kDTile], f.b_info + (j < g.n ? j * f.steps + s : 0), j < g.n);
  }
  asm volatile("cp.async.commit_group;");
}

// Four codes of a word as doubles, by the hardware's conversion (fp8: 1 E4M3, 2 E5M2) or the operand's table (0).
__device__ inline void DecodeWord(uint32_t word, int fp8, const double* table, double (&v)[4]) {
  if (fp8) {
    Fp8Word(word, fp8 == 2, v);
    return;
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) v[q] = table[(word >> (8 * q)) & 0xFF];
}

// The stage's codes as FP64 values times their block scales (sa, sb; exact: powers of two, or zero), four codes
// per 32-bit word. A thread's B words keep their four columns (kDThreads is a multiple of kDTile / 4), so
// their scales are read once.
template <int kStep>
__device__ inline void ConvertStage(DmmaShared<kStep>& sm, const typename DmmaShared<kStep>::Stage& st, int tid, int a_fp8,
                                    int b_fp8) {
  for (int x = tid; x < kDTile * kStep / 4; x += kDThreads) {
    const int r = x / (kStep / 4), k4 = 4 * (x % (kStep / 4));
    const double scale = st.ia[r].scale;
    double v[4];
    DecodeWord(*reinterpret_cast<const uint32_t*>(&st.a[r][k4]), a_fp8, sm.ta, v);
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
    DecodeWord(*reinterpret_cast<const uint32_t*>(&st.b[kk][c4]), b_fp8, sm.tb, v);
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
// even, by one conversion; kRoundFused, any other width (RoundFused).
enum StepRound { kRoundFused = 0, kRound24Rz = 1, kRound24Rne = 2 };

// The step's result for one output where the certificate proves that no term is cut: s the sum of its
// products (elements times scales) from the FP64 tensor core, w its weights' sum from the BF16 one, c its
// accumulator, mab and rab its row's plus its column's maxnom and minlsb. True with c updated, else false (c
// unchanged): a special line (mab above kSpecialSum), a NaN or Inf accumulator (exponent field 255), and an RZ
// result at FLT_MAX (where the reference may give Inf) never pass.
template <int kRound>
__device__ __forceinline__ bool FastStep(int zero_exp, int frac_bits, int out_bits, bool out_rne, int mab, int rab, double s,
                                         float w, float& c) {
  const unsigned cb = __float_as_uint(c);
  const bool czero = (cb << 1) == 0;
  const int efn = max(static_cast<int>((cb >> 23) & 0xFFu), 1);
  const int unit = max(max(czero ? zero_exp : efn - 127, mab), zero_exp) - frac_bits;
  // The products: v <= 0 passes for any w (w <= 32); v >= 22 passes only w = 0 (no nonzero product).
  const int v = min(max(unit - rab, 0), 22);
  // The accumulator: its lowest set bit (bit 23 set caps the count at the significand's width) at or above
  // the unit.
  const int clsb = efn - 151 + __ffs(static_cast<int>(cb | 0x800000u));
  bool ok = __float_as_uint(w) + 128u < static_cast<unsigned>(133 - 6 * v) << 23 && (czero || clsb >= unit) &&
            mab < kSpecialSum && efn != 0xFF;
  const double d = s + static_cast<double>(c);  // exact where ok
  float r;
  if (kRound == kRound24Rz) {
    r = __double2float_rz(d);
    ok = ok && fabsf(r) != FLT_MAX;
    r = __fadd_rn(r, 0.0f);  // -0 + +0 is +0: the reference's zero
  } else if (kRound == kRound24Rne) {
    r = __fadd_rn(__double2float_rn(d), 0.0f);  // past FLT_MAX: Inf, as the reference
  } else {
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
    res = __fadd_rn(res, 0.0f);  // -0 + +0 is +0: the reference's zero
  }
  out = res;
  return true;
}

template <int kStep, bool kPromote, bool kVec, int kRound>
__global__ void __launch_bounds__(kDThreads, 2) EngineDmmaKernel(const __grid_constant__ EngineGemmArgs g,
                                                                const __grid_constant__ EngineDmmaBuffers f) {
  using Shared = DmmaShared<kStep>;
  extern __shared__ __align__(16) unsigned char dmma_smem[];
  Shared& sm = *reinterpret_cast<Shared*>(dmma_smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int t = tid; t < 256; t += kDThreads) {
    sm.pa[t] = f.a_parts[t];
    sm.pb[t] = f.b_parts[t];
    sm.ta[t] = g.a.values[t];
    sm.tb[t] = g.b.values[t];
  }
  const EngineModel& p = g.model;
  const int zero_exp = p.zero_exp, frac_bits = p.frac_bits, out_bits = p.out_bits;
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
  const size_t window = kPromote ? static_cast<size_t>(p.promote) : 1;
  LoadStage<kStep, kVec>(sm.stage[0], g, f, row0, col0, 0, tid);
  for (size_t s = 0, k0 = 0; k0 < g.k; ++s, k0 += kStep) {
    const size_t k1 = k0 + kStep < g.k ? k0 + kStep : g.k;
    const typename Shared::Stage& st = sm.stage[s & 1];
    asm volatile("cp.async.wait_group 0;");
    __syncthreads();  // the stage has arrived, and every warp is done with the previous step's tiles
    ConvertStage<kStep>(sm, st, tid, f.a_fp8, f.b_fp8);
    __syncthreads();
    if (k1 < g.k) LoadStage<kStep, kVec>(sm.stage[(s + 1) & 1], g, f, row0, col0, s + 1, tid);
    // The step's sums of products on the FP64 tensor core.
    double sum[4][4][2];
    ForOutputs([&](int mi, int ni, int h) { sum[mi][ni][h] = 0.0; });
#pragma unroll
    for (int q = 0; q < kStep; q += 4) {
      double a[4], b[4];
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        a[x] = sm.sa[wr + 8 * x + gr][q + gc];
        b[x] = sm.sb[q + gc][wc + 8 * x + gr];
      }
#pragma unroll
      for (int m2 = 0; m2 < 2; ++m2)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) Dmma(sum[2 * m2][ni], sum[2 * m2 + 1][ni], a[2 * m2], a[2 * m2 + 1], b[ni]);
    }
    // The certificate's weight sums on the BF16 tensor core: wsum[mi / 2][ni][2 (mi % 2) + h].
    float wsum[2][4][4];
#pragma unroll
    for (int m2 = 0; m2 < 2; ++m2)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int x = 0; x < 4; ++x) wsum[m2][ni][x] = 0.0f;
#pragma unroll
    for (int k16 = 0; k16 < kStep; k16 += 16) {
      uint32_t a[2][4], b[4][2];
#pragma unroll
      for (int m2 = 0; m2 < 2; ++m2) {
        const unsigned addr = SharedAddr(&st.wa[wr + 16 * m2 + lane % 8 + 8 * ((lane / 8) % 2)][k16 + 8 * (lane / 16)]);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(a[m2][0]), "=r"(a[m2][1]), "=r"(a[m2][2]), "=r"(a[m2][3])
                     : "r"(addr));
      }
#pragma unroll
      for (int ni = 0; ni < 4; ni += 2) {
        // Matrix l / 8: k rows k16 + 8 ((l / 8) % 2), columns of n tile ni + l / 16; transposed, each lane gets
        // B (k 2t..2t+1, n g) as the MMA takes it.
        const unsigned addr = SharedAddr(&st.wb[k16 + lane % 8 + 8 * ((lane / 8) % 2)][wc + 8 * (ni + lane / 16)]);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(b[ni][0]), "=r"(b[ni][1]), "=r"(b[ni + 1][0]), "=r"(b[ni + 1][1])
                     : "r"(addr));
      }
#pragma unroll
      for (int m2 = 0; m2 < 2; ++m2)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) MmaBf16(wsum[m2][ni], a[m2], b[ni][0], b[ni][1]);
    }
    // Each output's step where the certificate holds; the rest wait in the warp's scratch, marked in `queued`
    // (bit (mi * 4 + ni) * 2 + h), with steps that meet NaN or Inf.
    unsigned queued = 0;
    float (&scratch)[32][33] = sm.scratch[warp];
    int row_max[4], row_lsb[4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
      row_max[mi] = st.ia[wr + 8 * mi + gr].maxnom;
      row_lsb[mi] = st.ia[wr + 8 * mi + gr].minlsb;
    }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int2 ib = *reinterpret_cast<const int2*>(&st.ib[wc + 8 * ni + 2 * gc + h]);  // maxnom, minlsb
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          float& cur = kPromote ? part[mi][ni][h] : acc[mi][ni][h];
          if (!FastStep<kRound>(zero_exp, frac_bits, out_bits, out_rne, row_max[mi] + ib.x, row_lsb[mi] + ib.y, sum[mi][ni][h],
                                wsum[mi / 2][ni][2 * (mi % 2) + h], cur)) {
            queued |= 1u << ((mi * 4 + ni) * 2 + h);
            scratch[8 * mi + gr][8 * ni + 2 * gc + h] = cur;
          }
        }
      }
    // The queued steps: first each lane its own whose accumulator sets the step's exponent (AccStep), all lanes
    // at once; then the others one at a time, each on the whole warp (a loop, not unrolled: the kernel's code
    // stays small). Rows and columns past the matrix are dropped here.
    if (__any_sync(0xFFFFFFFFu, queued != 0)) {
      unsigned mine = queued, rest = 0;
      while (__any_sync(0xFFFFFFFFu, mine != 0)) {
        if (mine == 0) continue;
        const int b = __ffs(static_cast<int>(mine)) - 1;
        mine &= mine - 1;
        const int rl = 8 * (b >> 3) + gr, cl = 8 * ((b >> 1) & 3) + 2 * gc + (b & 1);
        if (row0 + wr + rl >= g.m || col0 + wc + cl >= g.n) continue;
        float out;
        if (AccStep<kStep, kRound>(p, sm, st.ia[wr + rl], st.ib[wc + cl], wr + rl, wc + cl, scratch[rl][cl], out)) {
          scratch[rl][cl] = out;
          ++fallbacks;
        } else {
          rest |= 1u << b;
        }
      }
      for (;;) {
        const unsigned lanes = __ballot_sync(0xFFFFFFFFu, rest != 0);
        if (lanes == 0) break;
        const int src = __ffs(static_cast<int>(lanes)) - 1;
        const int b = __ffs(static_cast<int>(__shfl_sync(0xFFFFFFFFu, rest, src))) - 1;
        if (lane == src) rest &= rest - 1;
        const int rl = 8 * (b >> 3) + src / 4, cl = 8 * ((b >> 1) & 3) + 2 * (src % 4) + (b & 1);
        const int r = wr + rl, c = wc + cl;
        const size_t i = row0 + r, j = col0 + c;
        if (lane == 0) ++fallbacks;
        const float in = scratch[rl][cl];
        const StepInfo &ia = st.ia[r], &ib = st.ib[c];
        if (ia.maxnom == kSpecialStep || ib.maxnom == kSpecialStep || !isfinite(in)) {
          if (lane == 0)
            scratch[rl][cl] = FusedStep(LineOf(g, g.a.values, g.b.values, g.a.nominal, g.b.nominal, i, j), p, k0, k1,
                                        in, p.scales_in);
        } else {
          const float out = WarpTileStep(p, sm.pa, sm.pb, &st.a[r][0], &st.b[0][c], static_cast<int>(k1 - k0), ia, ib,
                                         in, lane);
          if (lane == 0) scratch[rl][cl] = out;
        }
        __syncwarp();
      }
      __syncwarp();
      ForOutputs([&](int mi, int ni, int h) {
        float& cur = kPromote ? part[mi][ni][h] : acc[mi][ni][h];
        if ((queued >> ((mi * 4 + ni) * 2 + h)) & 1u) cur = scratch[8 * mi + gr][8 * ni + 2 * gc + h];
      });
      __syncwarp();
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
  ForOutputs([&](int mi, int ni, int h) {
    const size_t i = row0 + wr + 8 * mi + gr, j = col0 + wc + 8 * ni + 2 * gc + h;
    if (i < g.m && j < g.n) g.out[i * g.n + j] = Finish(g, i, j, acc[mi][ni][h]);
  });
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
  kernel<<<grid, kDThreads, bytes, st>>>(args, f);
}

template <int kStep>
void LaunchStep(const EngineGemmArgs& args, const EngineDmmaBuffers& f, cudaStream_t st) {
  // 16-byte loads where every row of A and of B starts 16 bytes aligned.
  const bool vec = args.k % 16 == 0 && args.n % 16 == 0 && reinterpret_cast<uintptr_t>(args.a.codes) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(args.b.codes) % 16 == 0;
  const EngineModel& p = args.model;
  if (p.promote != 0) {  // hopper-fp8 and its kin, off Hopper (out_bits 24 or F + 1)
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
  if (f.np > args.n) Check(cudaMemsetAsync(f.b_w, 0, f.kp * f.np * sizeof(uint16_t), st), "engine FP64 tensor-core GEMM: weights");
  StepInfoKernel<<<1024, 256, 0, st>>>(args.a, true, args.m, args.k, step, args.model.scales_in, f.steps, f.a_info, f.a_w, f.kp);
  StepInfoKernel<<<1024, 256, 0, st>>>(args.b, false, args.n, args.k, step, args.model.scales_in, f.steps, f.b_info, f.b_w,
                                       f.np);
  Check(cudaGetLastError(), "engine FP64 tensor-core GEMM: step bounds launch");
  if (step == 16) LaunchStep<16>(args, f, st);
  else LaunchStep<32>(args, f, st);
  Check(cudaGetLastError(), "engine FP64 tensor-core GEMM launch");
}

}  // namespace qmx::gpu::detail
