// mma_probe.cu: a standalone probe of the arithmetic of mma.sync on one GPU (written for sm_90, H100):
//   mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32  (the raw kernel of gpu/src/device.cu)
//   mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32                   (HMMA, FP16 inputs, FP32 accumulate)
// It runs designed single-tile dot products (which K indices share a fused step, the fraction bits F kept in
// the alignment, term and output rounding, where C enters, zero and subnormal exponents, NaN/Inf), then
// random tiles against (a) FP8 emulated as FP8->FP16 + two chained m16n8k16 with several K mappings (run on
// the device), (b) host fused-sum models (MMA-Sim's T-FDPA with groupings / F / rounding / exponent rules).
// Build: nvcc -arch=sm_90a -O2 -o mma_probe mma_probe.cu          (also compiles for sm_89)
// Run:   ./mma_probe > probe.txt       [--simulate[=GROUPING]] [--npy DIR] [--no-exp]
//   --simulate: no GPU; a host model stands in for the device (GROUPING of FP8 steps, default 2x16-lohi,
//               F = 25, RZ, FP16 exponent rule): checks that the analysis recovers a known answer.
//   --sim-c-outside: with --simulate, FP8 steps sum their products alone and C is added in FP32 RN after each.
//   --sim-c-after: with --simulate, each FP8 instruction chains its steps from zero, then FADD of C (as
//               qmx-sim's hopper-mma-sync: split=hmma,promote=32).
//   --npy DIR:  write the random FP8 GEMMs (A.npy uint8 M x K, B.npy uint8 K x N, C.npy, D.npy float32) for
//               `qmx-sim gemm --a A.npy --b B.npy --c C.npy --a-format .. --model .. --expect D.npy`.
//   --no-exp:   leave out the EXP lines of the big order / C-position tables (the DERIVED lines stay).
//   --all-exp:  print every order3 triple (14,880 lines per FP8 kind; by default only j = i + 1).
// Output: one line per record, space-separated, first word the record type (see mma_probe.md):
//   EXP <kind> <section>/<name> K=<K> a=<codes> b=<codes> c=<f32 hex> d=<f32 hex> dv=<d as %a> [POSDEP]
//   codes: K codes of row i of A and column j of B, 2 hex digits (FP8) or 4 (FP16) each, k = 0 first.
//   DERIVED <kind> <key> <value...>   SWEEP ...   SUMMARY ...   EMU ...   MODEL ...   # comments
// What each section tests and how to read it: gpu/probes/mma_probe.md.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <sys/stat.h>
#include <unordered_map>
#include <vector>

#include "../src/mma_tile.cuh"

#define CK(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      exit(2);                                                                                   \
    }                                                                                            \
  } while (0)

// ============================================================================ device kernels
namespace {

__device__ inline uint32_t Load2h(const uint16_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Tiles: tile w has A (16 x k, row-major), Bt (8 x k: column j of B, K contiguous), C and D (16 x 8,
// row-major), through the backend's own tile (gpu/src/mma_tile.cuh, as device.cu's MmaKernel).
template <int FA, int FB>
__global__ void MmaFp8Tiles(const uint8_t* a, const uint8_t* bt, const float* c, int k, int tiles, float* d) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (warp >= tiles) return;
  const size_t w = warp;
  qmx_mma::Fp8Tile<FA, FB>(a + w * 16 * k, k, bt + w * 8 * k, k, c + w * 128, 8, k, d + w * 128, 8);
}

// m16n8k16 with .f16 operands (PTX ISA 9.7.14.5.8): A regs: (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..),
// (g+8, 2t+8..); B regs: k = 2t..2t+1 and 2t+8..2t+9 of column g; the lower K index in the low half.
__global__ void MmaF16Tiles(const uint16_t* a, const uint16_t* bt, const float* c, int k, int tiles, float* d) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (warp >= tiles) return;
  a += static_cast<size_t>(warp) * 16 * k;
  bt += static_cast<size_t>(warp) * 8 * k;
  c += static_cast<size_t>(warp) * 128;
  d += static_cast<size_t>(warp) * 128;
  const int n = 8, g = lane / 4, t = lane % 4;
  float acc[4];
  const int rows[4] = {g, g, g + 8, g + 8};
  const int cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int i = 0; i < 4; ++i) acc[i] = c[rows[i] * n + cols[i]];
  const uint16_t* ar0 = a + static_cast<size_t>(g) * k;
  const uint16_t* ar1 = a + static_cast<size_t>(g + 8) * k;
  const uint16_t* bc = bt + static_cast<size_t>(g) * k;
  for (int k0 = 0; k0 < k; k0 += 16) {
    const uint32_t a0 = Load2h(ar0 + k0 + 2 * t), a1 = Load2h(ar1 + k0 + 2 * t);
    const uint32_t a2 = Load2h(ar0 + k0 + 8 + 2 * t), a3 = Load2h(ar1 + k0 + 8 + 2 * t);
    const uint32_t b0 = Load2h(bc + k0 + 2 * t), b1 = Load2h(bc + k0 + 8 + 2 * t);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  for (int i = 0; i < 4; ++i) d[rows[i] * n + cols[i]] = acc[i];
}

// ============================================================================ formats
enum Fmt { E4M3, E5M2, F16 };
enum Kind { K_E4E4, K_E4E5, K_E5E4, K_E5E5, K_F16 };
struct KindInfo {
  const char* name;
  Fmt fa, fb;
  int kinst;  // K of one instruction
};
const KindInfo kKinds[] = {{"e4m3xe4m3", E4M3, E4M3, 32},
                           {"e4m3xe5m2", E4M3, E5M2, 32},
                           {"e5m2xe4m3", E5M2, E4M3, 32},
                           {"e5m2xe5m2", E5M2, E5M2, 32},
                           {"f16xf16", F16, F16, 16}};
const char* KN(Kind k) { return kKinds[k].name; }

int Bits(Fmt f) { return f == F16 ? 16 : 8; }
double MinNormal(Fmt f) { return f == E4M3 ? std::ldexp(1.0, -6) : std::ldexp(1.0, -14); }
int FmtEmin(Fmt f) { return f == E4M3 ? -6 : -14; }

double Decode(Fmt f, uint32_t code) {
  const int mb = f == E4M3 ? 3 : f == E5M2 ? 2 : 10, eb = f == E4M3 ? 4 : 5, bias = f == E4M3 ? 7 : 15;
  const int s = (code >> (eb + mb)) & 1, e = (code >> mb) & ((1 << eb) - 1), m = code & ((1 << mb) - 1);
  if (f == E4M3 && e == 15 && m == 7) return NAN;
  if (f != E4M3 && e == (1 << eb) - 1) return m ? NAN : (s ? -INFINITY : INFINITY);
  const double v = e == 0 ? std::ldexp(m, 1 - bias - mb) : std::ldexp((1 << mb) + m, e - bias - mb);
  return s ? -v : v;
}

struct FmtTable {
  std::vector<std::pair<double, uint32_t>> pos;  // positive finite nonzero values, ascending
};
const FmtTable& Table(Fmt f) {
  static FmtTable t[3];
  static bool init[3] = {false, false, false};
  if (!init[f]) {
    const uint32_t n = 1u << (Bits(f) - 1);
    for (uint32_t c = 1; c < n; ++c) {
      const double v = Decode(f, c);
      if (std::isfinite(v)) t[f].pos.push_back({v, c});
    }
    std::sort(t[f].pos.begin(), t[f].pos.end());
    init[f] = true;
  }
  return t[f];
}
uint32_t SignBit(Fmt f) { return 1u << (Bits(f) - 1); }
bool Encode(Fmt f, double v, uint32_t* code) {
  if (v == 0) {
    *code = std::signbit(v) ? SignBit(f) : 0;
    return true;
  }
  if (std::isnan(v)) {
    *code = f == E4M3 ? 0x7F : f == E5M2 ? 0x7E : 0x7E00;
    return true;
  }
  const uint32_t s = v < 0 ? SignBit(f) : 0;
  if (std::isinf(v)) {
    if (f == E4M3) return false;
    *code = s | (f == E5M2 ? 0x7C : 0x7C00);
    return true;
  }
  const auto& p = Table(f).pos;
  const double a = std::fabs(v);
  auto it = std::lower_bound(p.begin(), p.end(), std::make_pair(a, 0u));
  if (it == p.end() || it->first != a) return false;
  *code = s | it->second;
  return true;
}
uint32_t EncodeOrDie(Fmt f, double v) {
  uint32_t c;
  if (!Encode(f, v, &c)) {
    fprintf(stderr, "internal error: %a is not representable in format %d\n", v, f);
    exit(3);
  }
  return c;
}
// Nearest finite code (saturating); data generation only.
uint32_t Nearest(Fmt f, double v) {
  const auto& p = Table(f).pos;
  const uint32_t s = v < 0 ? SignBit(f) : 0;
  const double a = std::fabs(v);
  if (a < p.front().first / 2) return s;
  auto it = std::lower_bound(p.begin(), p.end(), std::make_pair(a, 0u));
  if (it == p.end()) return s | p.back().second;
  if (it != p.begin() && a - (it - 1)->first < it->first - a) --it;
  return s | it->second;
}
bool IsNormalIn(Fmt f, double v) { return v == 0 || std::fabs(v) >= MinNormal(f); }

// a * b = p with both representable (normal unless allow_sub), exponents as balanced as possible.
bool Factor(Fmt fa, Fmt fb, double p, double* a, double* b, bool allow_sub = false) {
  if (p == 0) {
    *a = p;
    *b = 1;
    return true;
  }
  const int e = std::ilogb(p);
  const double sig = std::ldexp(p, -e);
  int best = INT_MAX;
  for (int pass = 0; pass < 2; ++pass)
    for (int ea = -40; ea <= 40; ++ea) {
      const double av = pass == 0 ? std::ldexp(sig, ea) : std::ldexp(1.0, ea);
      const double bv = pass == 0 ? std::ldexp(1.0, e - ea) : std::ldexp(sig, e - ea);
      uint32_t c;
      if (!Encode(fa, av, &c) || !Encode(fb, bv, &c)) continue;
      if (!allow_sub && (!IsNormalIn(fa, av) || !IsNormalIn(fb, bv))) continue;
      const int cost = std::abs(2 * ea - e);
      if (cost < best) {
        best = cost;
        *a = av;
        *b = bv;
      }
    }
  return best != INT_MAX;
}

uint32_t F32Bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
float F32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
std::string Hex(uint64_t v, int digits) {
  char buf[32];
  snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}
std::string Fmtf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Fmtf(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// ============================================================================ host fused-sum model
// MMA-Sim's T-FDPA, as in qmx-sim's gemm_ref.cc: per step, terms = C and the products of one group of K
// indices; each term's nominal exponent (products: Exp(a) + Exp(b), subnormals at an emin; C: its exponent,
// at least -126); all aligned to the largest, each cut to F fraction bits (RZ or RNE), summed exactly, the
// sum rounded to `bits` significant bits (exponent floored at -126), RZ or RNE.
// rule 0: emin of the FP8 format (e4m3 -6, e5m2 -14): qmx-sim's current rule.
// rule 1: emin of FP16 (-14) for every format: what FP8 -> FP16 conversion before an FP16 HMMA gives.
using i128 = __int128;
using u128 = unsigned __int128;

struct Model {
  std::string gname;
  std::vector<std::vector<int>> groups;  // ordered groups of K indices within one block
  int block = 32;
  int F = 25;
  bool term_rne = false, out_rne = false;
  int rule = 1;
  int zero_exp = -1000;  // <= -1000: zero terms never set the exponent
  int bits = 24;
  int c_mode = 0;  // 0: the accumulator is a term of every step; 1: each step sums its products alone (from
                   // zero) and the accumulator takes it with an IEEE FP32 add (RN): acc = fl32(acc + step);
                   // 2: each instruction (block) chains its steps from zero, then acc = fl32(acc + block sum)
};

struct Exact {
  bool neg = false;
  uint64_t mag = 0;
  int lsb = 0;
};
Exact ExactOf(double x) {
  Exact r;
  if (x == 0) return r;
  int e;
  const double f = std::frexp(std::fabs(x), &e);
  uint64_t m = static_cast<uint64_t>(std::ldexp(f, 53));
  int lsb = e - 53;
  const int tz = __builtin_ctzll(m);
  r.neg = x < 0;
  r.mag = m >> tz;
  r.lsb = lsb + tz;
  return r;
}
int NominalOf(double x, Fmt f, int rule) {
  const int emin = rule == 1 ? -14 : FmtEmin(f);
  const int e = std::ilogb(x);
  return e < emin ? emin : e;
}
int Msb(u128 v) {
  const uint64_t hi = static_cast<uint64_t>(v >> 64);
  return hi ? 127 - __builtin_clzll(hi) : 63 - __builtin_clzll(static_cast<uint64_t>(v));
}
u128 ShiftRound(u128 mag, int shift, bool rne) {
  if (mag == 0) return 0;
  if (shift >= 0) return shift >= 100 ? 0 : mag << shift;
  const int s = -shift;
  if (s >= 127) return 0;
  u128 q = mag >> s;
  if (rne) {
    const u128 rem = mag & ((static_cast<u128>(1) << s) - 1), half = static_cast<u128>(1) << (s - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  return q;
}
float RoundOut(bool neg, u128 s, int lsb, int bits, bool rne) {
  if (s == 0) return 0.0f;
  int e = Msb(s) + lsb;
  if (e < -126) e = -126;
  const int q = e - (bits - 1);
  const u128 kept = ShiftRound(s, lsb - q, rne);
  const double v = std::ldexp(static_cast<double>(kept), q);
  if (v >= 0x1p128) return neg ? -INFINITY : INFINITY;
  const float f = static_cast<float>(v);
  return neg ? -f : f;
}

// One fused step over terms given as values (products exact in double) with their nominal exponents.
struct TermV {
  double v;  // exact value (0 for a zero)
  int nominal;
};
float FusedTerms(const std::vector<TermV>& terms, const Model& m) {
  int emax = INT_MIN;
  for (const TermV& t : terms) {
    if (t.v != 0) emax = std::max(emax, t.nominal);
    else if (m.zero_exp > -1000) emax = std::max(emax, m.zero_exp);
  }
  if (emax == INT_MIN) return 0.0f;
  const int unit = emax - m.F;
  i128 s = 0;
  for (const TermV& t : terms) {
    if (t.v == 0) continue;
    const Exact x = ExactOf(t.v);
    const u128 q = ShiftRound(x.mag, x.lsb - unit, m.term_rne);
    s += x.neg ? -static_cast<i128>(q) : static_cast<i128>(q);
  }
  const bool neg = s < 0;
  return RoundOut(neg, static_cast<u128>(neg ? -s : s), unit, m.bits, m.out_rne);
}

float HostStep(const Model& m, Fmt fa, Fmt fb, const uint32_t* a, const uint32_t* b, int k0,
               const std::vector<int>& idx, float acc) {
  bool nan = std::isnan(acc), pinf = acc == INFINITY, ninf = acc == -INFINITY;
  std::vector<TermV> terms;
  terms.push_back({acc, acc == 0 || !std::isfinite(acc) ? 0 : std::max(std::ilogb(acc), -126)});
  if (!std::isfinite(acc)) terms.back().v = 0;
  for (int i : idx) {
    const double x = Decode(fa, a[k0 + i]), y = Decode(fb, b[k0 + i]);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      const double p = x * y;
      if (std::isnan(p)) nan = true;
      else (p > 0 ? pinf : ninf) = true;
      continue;
    }
    if (x == 0 || y == 0) {
      terms.push_back({0.0, 0});
      continue;
    }
    terms.push_back({x * y, NominalOf(x, fa, m.rule) + NominalOf(y, fb, m.rule)});
  }
  if (nan || (pinf && ninf)) return F32(0x7FFFFFFF);
  if (pinf) return INFINITY;
  if (ninf) return -INFINITY;
  return FusedTerms(terms, m);
}
float HostDot(const Model& m, Fmt fa, Fmt fb, const uint32_t* a, const uint32_t* b, int K, float c) {
  float acc = c;
  for (int k0 = 0; k0 < K; k0 += m.block)
    for (const auto& g : m.groups) {
      if (m.c_mode == 0) {
        acc = HostStep(m, fa, fb, a, b, k0, g, acc);
      } else if (m.c_mode == 1) {
        acc = acc + HostStep(m, fa, fb, a, b, k0, g, 0.0f);
        if (std::isnan(acc)) acc = F32(0x7FFFFFFF);
      }
    }
  if (m.c_mode == 2) {
    acc = c;
    for (int k0 = 0; k0 < K; k0 += m.block) {
      float part = 0.0f;
      for (const auto& g : m.groups) part = HostStep(m, fa, fb, a, b, k0, g, part);
      acc = acc + part;
      if (std::isnan(acc)) acc = F32(0x7FFFFFFF);
    }
  }
  return acc;
}

// Groupings of one block of K (32 for FP8, 16 for FP16), named after the lowering that would produce them.
// For FP8 on sm_90 with two HMMA.16816 (h = 0, 1), HMMA-K p = 8 * hi + 2 * t + e (t: thread in group,
// hi: first or second A register pair, e: element of the f16x2) takes FP8 index
//   contig: 16h + p;  natural: 16h + 4t + 2hi + e (FP8 regs a0/a2 -> HMMA 0/1, bytes {0,1} -> cols 2t);
//   lohi: 16hi + 4t + 2h + e (bytes {0,1} of every reg -> HMMA 0);  evenodd: 16hi + 4t + 2e + h.
int EmuIndex(const std::string& map, int h, int p) {
  const int hi = p / 8, t = (p % 8) / 2, e = p % 2;
  if (map == "contig") return 16 * h + p;
  if (map == "natural") return 16 * h + 4 * t + 2 * hi + e;
  if (map == "lohi") return 16 * hi + 4 * t + 2 * h + e;
  if (map == "evenodd") return 16 * hi + 4 * t + 2 * e + h;
  return -1;
}
std::vector<std::vector<int>> Grouping(const std::string& name) {
  std::vector<std::vector<int>> g;
  auto range = [](int a, int b) {
    std::vector<int> v;
    for (int i = a; i < b; ++i) v.push_back(i);
    return v;
  };
  auto rev = [](std::vector<std::vector<int>> v) {
    std::reverse(v.begin(), v.end());
    return v;
  };
  if (name == "1x32") return {range(0, 32)};
  if (name == "1x16") return {range(0, 16)};
  if (name == "2x8-contig") return {range(0, 8), range(8, 16)};
  if (name == "4x4-contig") return {range(0, 4), range(4, 8), range(8, 12), range(12, 16)};
  if (name == "4x8-contig") return {range(0, 8), range(8, 16), range(16, 24), range(24, 32)};
  for (const char* map : {"contig", "natural", "lohi", "evenodd"}) {
    // two HMMA k16, each one step
    std::vector<std::vector<int>> two(2);
    for (int h = 0; h < 2; ++h)
      for (int p = 0; p < 16; ++p) two[h].push_back(EmuIndex(map, h, p));
    for (auto& v : two) std::sort(v.begin(), v.end());
    if (name == std::string("2x16-") + map) return two;
    if (name == std::string("2x16-") + map + "-rev") return rev(two);
    // two HMMA k16, each two k8 steps (HMMA-K 0..7, then 8..15)
    std::vector<std::vector<int>> four(4);
    for (int h = 0; h < 2; ++h)
      for (int p = 0; p < 16; ++p) four[2 * h + p / 8].push_back(EmuIndex(map, h, p));
    for (auto& v : four) std::sort(v.begin(), v.end());
    if (name == std::string("4x8-") + map) return four;
  }
  return g;
}
const char* kFp8Groupings[] = {"1x32",          "2x16-contig",  "2x16-contig-rev", "2x16-lohi",
                               "2x16-lohi-rev", "2x16-evenodd", "2x16-evenodd-rev", "4x8-contig",
                               "4x8-natural",   "4x8-lohi",     "4x8-evenodd"};
const char* kF16Groupings[] = {"1x16", "2x8-contig", "4x4-contig"};

std::string GroupsStr(const std::vector<std::vector<int>>& g) {
  std::string s;
  for (const auto& v : g) {
    s += "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    s += "]";
  }
  return s;
}

// ============================================================================ running tiles
bool g_sim = false;
std::string g_sim_grouping = "2x16-lohi";
int g_sim_cmode = 0;
bool g_print_exp = true;
bool g_all_exp = false;

Model SimModel(Kind kind) {
  Model m;
  m.F = 25;
  m.rule = 1;
  if (kind == K_F16) {
    m.block = 16;
    m.gname = "1x16";
  } else {
    m.block = 32;
    m.gname = g_sim_grouping;
    m.c_mode = g_sim_cmode;
  }
  m.groups = Grouping(m.gname);
  return m;
}

// a: tiles x 16 x K codes (row-major), bt: tiles x 8 x K (column j of B), c, d: tiles x 128.
void RunTiles(Kind kind, int K, int tiles, const std::vector<uint32_t>& a, const std::vector<uint32_t>& bt,
              const std::vector<float>& c, std::vector<float>& d) {
  d.assign(static_cast<size_t>(tiles) * 128, 0.0f);
  const KindInfo& ki = kKinds[kind];
  if (g_sim) {
    const Model m = SimModel(kind);
    for (int w = 0; w < tiles; ++w)
      for (int r = 0; r < 16; ++r)
        for (int j = 0; j < 8; ++j)
          d[w * 128 + r * 8 + j] = HostDot(m, ki.fa, ki.fb, &a[(static_cast<size_t>(w) * 16 + r) * K],
                                           &bt[(static_cast<size_t>(w) * 8 + j) * K], K, c[w * 128 + r * 8 + j]);
    return;
  }
  float *dc = nullptr, *dd = nullptr;
  CK(cudaMalloc(&dc, c.size() * 4));
  CK(cudaMalloc(&dd, d.size() * 4));
  CK(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
  const unsigned threads = 128, blocks = (static_cast<unsigned>(tiles) * 32 + threads - 1) / threads;
  void *da = nullptr, *db = nullptr;
  if (kind == K_F16) {
    std::vector<uint16_t> ha(a.begin(), a.end()), hb(bt.begin(), bt.end());
    CK(cudaMalloc(&da, ha.size() * 2));
    CK(cudaMalloc(&db, hb.size() * 2));
    CK(cudaMemcpy(da, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice));
    MmaF16Tiles<<<blocks, threads>>>(static_cast<uint16_t*>(da), static_cast<uint16_t*>(db), dc, K, tiles, dd);
  } else {
    std::vector<uint8_t> ha(a.begin(), a.end()), hb(bt.begin(), bt.end());
    CK(cudaMalloc(&da, ha.size()));
    CK(cudaMalloc(&db, hb.size()));
    CK(cudaMemcpy(da, ha.data(), ha.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, hb.data(), hb.size(), cudaMemcpyHostToDevice));
    const uint8_t *pa = static_cast<uint8_t*>(da), *pb = static_cast<uint8_t*>(db);
    if (kind == K_E4E4) MmaFp8Tiles<0, 0><<<blocks, threads>>>(pa, pb, dc, K, tiles, dd);
    if (kind == K_E4E5) MmaFp8Tiles<0, 1><<<blocks, threads>>>(pa, pb, dc, K, tiles, dd);
    if (kind == K_E5E4) MmaFp8Tiles<1, 0><<<blocks, threads>>>(pa, pb, dc, K, tiles, dd);
    if (kind == K_E5E5) MmaFp8Tiles<1, 1><<<blocks, threads>>>(pa, pb, dc, K, tiles, dd);
  }
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dc));
  CK(cudaFree(dd));
}

// A designed dot product: row i of A and column j of B (K codes each) and C; the probe writes it into every
// row and column of a tile, so all 128 outputs compute it (POSDEP marks a tile whose outputs differ).
struct Dot {
  std::string sec, name;
  Kind kind;
  int K;
  std::vector<uint32_t> a, b;
  uint32_t c = 0, d = 0;
  bool posdep = false;
  float D() const { return F32(d); }
};
Dot NewDot(Kind kind, int K, const std::string& sec, const std::string& name) {
  Dot d;
  d.kind = kind;
  d.K = K;
  d.sec = sec;
  d.name = name;
  d.a.assign(K, 0);
  d.b.assign(K, 0);
  return d;
}
void PutAB(Dot& d, int k, double av, double bv) {
  d.a[k] = EncodeOrDie(kKinds[d.kind].fa, av);
  d.b[k] = EncodeOrDie(kKinds[d.kind].fb, bv);
}
void PutCodes(Dot& d, int k, uint32_t ac, uint32_t bc) {
  d.a[k] = ac;
  d.b[k] = bc;
}
bool PutProd(Dot& d, int k, double p, bool allow_sub = false) {
  double av, bv;
  if (!Factor(kKinds[d.kind].fa, kKinds[d.kind].fb, p, &av, &bv, allow_sub)) return false;
  PutAB(d, k, av, bv);
  return true;
}
void PutC(Dot& d, double c) {
  const float f = static_cast<float>(c);
  if (static_cast<double>(f) != c && !std::isnan(c)) {
    fprintf(stderr, "internal error: C %a is not an FP32 value\n", c);
    exit(3);
  }
  d.c = F32Bits(f);
}

void RunDots(std::vector<Dot>& dots) {
  if (g_sim) {  // every output of a replicated tile is the same dot: compute it once
    for (Dot& x : dots) {
      const Model m = SimModel(x.kind);
      x.d = F32Bits(HostDot(m, kKinds[x.kind].fa, kKinds[x.kind].fb, x.a.data(), x.b.data(), x.K, F32(x.c)));
      x.posdep = false;
    }
    return;
  }
  std::map<std::pair<int, int>, std::vector<size_t>> by;
  for (size_t i = 0; i < dots.size(); ++i) by[{dots[i].kind, dots[i].K}].push_back(i);
  for (auto& kv : by) {
    const Kind kind = static_cast<Kind>(kv.first.first);
    const int K = kv.first.second, tiles = static_cast<int>(kv.second.size());
    std::vector<uint32_t> a(static_cast<size_t>(tiles) * 16 * K), bt(static_cast<size_t>(tiles) * 8 * K);
    std::vector<float> c(static_cast<size_t>(tiles) * 128), d;
    for (int w = 0; w < tiles; ++w) {
      const Dot& x = dots[kv.second[w]];
      for (int r = 0; r < 16; ++r) std::copy(x.a.begin(), x.a.end(), a.begin() + (static_cast<size_t>(w) * 16 + r) * K);
      for (int j = 0; j < 8; ++j) std::copy(x.b.begin(), x.b.end(), bt.begin() + (static_cast<size_t>(w) * 8 + j) * K);
      for (int i = 0; i < 128; ++i) c[w * 128 + i] = F32(x.c);
    }
    RunTiles(kind, K, tiles, a, bt, c, d);
    for (int w = 0; w < tiles; ++w) {
      Dot& x = dots[kv.second[w]];
      x.d = F32Bits(d[w * 128]);
      x.posdep = false;
      for (int i = 1; i < 128; ++i)
        if (F32Bits(d[w * 128 + i]) != x.d) x.posdep = true;
    }
  }
}

std::string CodesHex(const std::vector<uint32_t>& v, Fmt f) {
  std::string s;
  for (uint32_t c : v) s += Hex(c, f == F16 ? 4 : 2);
  return s;
}
void PrintDot(const Dot& d) {
  const KindInfo& ki = kKinds[d.kind];
  printf("EXP %s %s/%s K=%d a=%s b=%s c=%08x d=%08x dv=%a%s\n", ki.name, d.sec.c_str(), d.name.c_str(), d.K,
         CodesHex(d.a, ki.fa).c_str(), CodesHex(d.b, ki.fb).c_str(), d.c, d.d, static_cast<double>(d.D()),
         d.posdep ? " POSDEP" : "");
}
void PrintDots(const std::vector<Dot>& v) {
  for (const Dot& d : v) PrintDot(d);
}
int CountPosdep(const std::vector<Dot>& v) {
  int n = 0;
  for (const Dot& d : v) n += d.posdep;
  return n;
}

// ============================================================================ per-kind experiment values
struct KindVals {
  double big_f;    // factor: big product = big_f^2
  double small_f;  // factor: small product = small_f^2
  double sig_f;    // largest significand factor (for the "sig" configurations)
  double max_f;    // largest finite value of A's format
};
KindVals Vals(Kind k) {
  if (k == K_E4E4) return {256.0, std::ldexp(1.0, -6), 1.75, 448.0};
  if (k == K_F16) return {32768.0, std::ldexp(1.0, -14), 2047.0 / 1024, 65504.0};
  return {32768.0, std::ldexp(1.0, -14), 1.75, 57344.0};  // e5m2
}

struct KindState {
  Kind kind;
  int K;
  std::vector<std::vector<int>> partition;  // derived from the order experiment (ordered steps)
  bool partition_ok = false;
  int i0 = 0, j0 = 1, l0 = 2;  // three indices of the first step (the one holding C)
  int F_c = INT_MIN, F_prod = INT_MIN;
  std::string c_position = "?";
};

// ---------------------------------------------------------------------------- E0: layout check
void LayoutCheck(Kind kind, int K, std::mt19937_64& g) {
  const KindInfo& ki = kKinds[kind];
  const int tiles = 8;
  std::vector<uint32_t> a(tiles * 16 * K), bt(tiles * 8 * K);
  std::vector<float> c(tiles * 128), d;
  for (auto& x : a) x = EncodeOrDie(ki.fa, static_cast<double>(static_cast<int>(g() % 9) - 4));
  for (auto& x : bt) x = EncodeOrDie(ki.fb, static_cast<double>(static_cast<int>(g() % 9) - 4));
  for (auto& x : c) x = static_cast<float>(static_cast<int>(g() % 65) - 32);
  RunTiles(kind, K, tiles, a, bt, c, d);
  int bad = 0;
  std::string first;
  for (int w = 0; w < tiles; ++w)
    for (int r = 0; r < 16; ++r)
      for (int j = 0; j < 8; ++j) {
        double s = c[w * 128 + r * 8 + j];
        for (int k = 0; k < K; ++k)
          s += Decode(ki.fa, a[(w * 16 + r) * K + k]) * Decode(ki.fb, bt[(w * 8 + j) * K + k]);
        if (static_cast<double>(d[w * 128 + r * 8 + j]) != s) {
          if (!bad) first = Fmtf(" first: tile %d D[%d,%d] got %g want %g", w, r, j, d[w * 128 + r * 8 + j], s);
          ++bad;
        }
      }
  printf("SUMMARY %s layout K=%d small-integer tiles (exact sums): %d of %d outputs wrong%s\n", ki.name, K, bad,
         tiles * 128, first.c_str());
}

// ---------------------------------------------------------------------------- E9: single products
// Every (a, b) code pair (FP8: all 65536; FP16: 16 random rows x 8 random columns per tile, and the special
// codes) as the only nonzero product of a dot (at k = tile % K), C = -0 so the IEEE sum keeps a zero's sign.
void ProductCheck(Kind kind, std::mt19937_64& g) {
  const KindInfo& ki = kKinds[kind];
  const int K = ki.kinst;
  std::vector<std::vector<uint32_t>> rows, cols;  // per tile: 16 a codes, 8 b codes
  if (kind == K_F16) {
    const uint32_t sp[] = {0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0x3C00,
                           0xBC00, 0x0200, 0x8001, 0x7FFF, 0xFE00};
    rows.push_back(std::vector<uint32_t>(sp, sp + 16));
    cols.push_back(std::vector<uint32_t>(sp, sp + 8));
    rows.push_back(std::vector<uint32_t>(sp, sp + 16));
    cols.push_back(std::vector<uint32_t>(sp + 8, sp + 16));
    for (int w = 0; w < 512; ++w) {
      std::vector<uint32_t> r(16), c(8);
      for (auto& x : r) x = static_cast<uint32_t>(g() & 0xFFFF);
      for (auto& x : c) x = static_cast<uint32_t>(g() & 0xFFFF);
      rows.push_back(r);
      cols.push_back(c);
    }
  } else {
    for (uint32_t xb = 0; xb < 16; ++xb)
      for (uint32_t yb = 0; yb < 32; ++yb) {
        std::vector<uint32_t> r(16), c(8);
        for (uint32_t i = 0; i < 16; ++i) r[i] = xb * 16 + i;
        for (uint32_t j = 0; j < 8; ++j) c[j] = yb * 8 + j;
        rows.push_back(r);
        cols.push_back(c);
      }
  }
  const int tiles = static_cast<int>(rows.size());
  std::vector<uint32_t> a(static_cast<size_t>(tiles) * 16 * K, 0), bt(static_cast<size_t>(tiles) * 8 * K, 0);
  std::vector<float> c(static_cast<size_t>(tiles) * 128, -0.0f), d;
  for (int w = 0; w < tiles; ++w) {
    const int kp = w % K;
    for (int r = 0; r < 16; ++r) a[(static_cast<size_t>(w) * 16 + r) * K + kp] = rows[w][r];
    for (int j = 0; j < 8; ++j) bt[(static_cast<size_t>(w) * 8 + j) * K + kp] = cols[w][j];
  }
  RunTiles(kind, K, tiles, a, bt, c, d);
  long bad = 0, zero_sign = 0, n = 0;
  std::map<uint32_t, long> nan_out;
  std::vector<std::string> shown;
  for (int w = 0; w < tiles; ++w)
    for (int r = 0; r < 16; ++r)
      for (int j = 0; j < 8; ++j) {
        const uint32_t xa = rows[w][r], yb = cols[w][j];
        const double p = Decode(ki.fa, xa) * Decode(ki.fb, yb);
        const float want = static_cast<float>(p + -0.0);  // exact: at most 22 significant bits
        const float got = d[w * 128 + r * 8 + j];
        ++n;
        if (std::isnan(want)) {
          if (!std::isnan(got)) {
            ++bad;
            if (shown.size() < 8)
              shown.push_back(Fmtf("a=%s b=%s got=%08x want=NaN", Hex(xa, Bits(ki.fa) / 4).c_str(), Hex(yb, Bits(ki.fb) / 4).c_str(), F32Bits(got)));
          } else {
            nan_out[F32Bits(got)]++;
          }
          continue;
        }
        if (F32Bits(got) == F32Bits(want)) continue;
        if (got == want) {
          ++zero_sign;
          continue;
        }
        if (shown.size() < 8)
          shown.push_back(Fmtf("a=%s b=%s got=%08x want=%08x", Hex(xa, Bits(ki.fa) / 4).c_str(), Hex(yb, Bits(ki.fb) / 4).c_str(),
                               F32Bits(got), F32Bits(want)));
        ++bad;
      }
  std::string nans;
  for (auto& kv : nan_out) nans += " " + Hex(kv.first, 8) + "x" + std::to_string(kv.second);
  printf("SUMMARY %s single-products (C=-0, one nonzero k): %ld pairs, %ld wrong values, %ld zero-sign only; NaN outputs:%s\n",
         ki.name, n, bad, zero_sign, nans.empty() ? " none" : nans.c_str());
  for (auto& s : shown) printf("SUMMARY %s single-products mismatch %s\n", ki.name, s.c_str());
}

// ---------------------------------------------------------------------------- E1/E2: order, C position
void OrderExperiments(KindState& st) {
  const Kind kind = st.kind;
  const int K = st.K;
  const KindVals kv = Vals(kind);
  const double B = kv.big_f * kv.big_f, s = kv.small_f * kv.small_f;
  std::vector<Dot> e1, e2;
  for (int i = 0; i < K; ++i)
    for (int l = 0; l < K; ++l) {
      if (i == l) continue;
      Dot d = NewDot(kind, K, "order", Fmtf("i=%d,l=%d", i, l));
      PutAB(d, i, kv.big_f, kv.big_f);
      PutAB(d, l, kv.small_f, kv.small_f);
      PutC(d, -B);
      e1.push_back(d);
    }
  for (int i = 0; i < K; ++i)
    for (int j = i + 1; j < K; ++j) {
      Dot d = NewDot(kind, K, "cpos", Fmtf("i=%d,j=%d", i, j));
      PutAB(d, i, kv.big_f, kv.big_f);
      PutAB(d, j, -kv.big_f, kv.big_f);
      PutC(d, s);
      e2.push_back(d);
    }
  RunDots(e1);
  RunDots(e2);
  printf("# %s order: C = -B, +B at k=i (B = %a), s at k=l (s = %a): d = s iff l's step comes after i's\n",
         KN(kind), B, s);
  if (g_print_exp) PrintDots(e1);
  printf("# %s cpos: C = s, +B at k=i, -B at k=j: d = s iff C is added after the step(s) of i and j\n", KN(kind));
  if (g_print_exp) PrintDots(e2);
  // R[i][l]: 1 = s, 0 = zero, 2 = other
  std::vector<std::vector<int>> R(K, std::vector<int>(K, -1));
  int other = 0;
  for (const Dot& d : e1) {
    int i, l;
    sscanf(d.name.c_str(), "i=%d,l=%d", &i, &l);
    R[i][l] = d.D() == static_cast<float>(s) ? 1 : d.D() == 0 ? 0 : 2;
    other += R[i][l] == 2;
  }
  // Matrix: row i, column l.
  printf("DERIVED %s order-matrix rows=i cols=l (1: s survived, 0: lost, x: other)\n", KN(kind));
  for (int i = 0; i < K; ++i) {
    std::string row;
    for (int l = 0; l < K; ++l) row += i == l ? '.' : R[i][l] == 1 ? '1' : R[i][l] == 0 ? '0' : 'x';
    printf("DERIVED %s order-row %2d %s\n", KN(kind), i, row.c_str());
  }
  std::vector<int> rank(K, 0);
  for (int l = 0; l < K; ++l)
    for (int i = 0; i < K; ++i)
      if (i != l && R[i][l] == 1) ++rank[l];
  std::map<int, std::vector<int>> by;
  for (int l = 0; l < K; ++l) by[rank[l]].push_back(l);
  int viol = 0;
  for (int i = 0; i < K; ++i)
    for (int l = 0; l < K; ++l)
      if (i != l && R[i][l] != (rank[i] < rank[l] ? 1 : 0)) ++viol;
  std::vector<std::vector<int>> p1;
  for (auto& x : by) p1.push_back(x.second);
  const bool ok1 = viol == 0 && other == 0 && p1.size() > 1;
  printf("DERIVED %s steps-from-C %zu %s consistent=%s violations=%d other=%d posdep=%d\n", KN(kind), p1.size(),
         GroupsStr(p1).c_str(), viol == 0 ? "yes" : "no", viol, other, CountPosdep(e1));

  // C-free order test: C = 0, +B at i, -B at j, s at l: d = s iff l's step comes after the steps of i and j
  // (whatever C's place). EXP lines for j = i + 1 only (all with --all-exp).
  std::vector<Dot> e3;
  for (int i = 0; i < K; ++i)
    for (int j = i + 1; j < K; ++j)
      for (int l = 0; l < K; ++l) {
        if (l == i || l == j) continue;
        Dot d = NewDot(kind, K, "order3", Fmtf("i=%d,j=%d,l=%d", i, j, l));
        PutAB(d, i, kv.big_f, kv.big_f);
        PutAB(d, j, -kv.big_f, kv.big_f);
        PutAB(d, l, kv.small_f, kv.small_f);
        e3.push_back(d);
      }
  RunDots(e3);
  printf("# %s order3: C = 0, +B at k=i, -B at k=j, s at k=l: d = s iff l's step comes after i's and j's\n", KN(kind));
  std::vector<int> cnt(K, 0);
  int other3 = 0;
  for (const Dot& d : e3) {
    int i, j, l;
    sscanf(d.name.c_str(), "i=%d,j=%d,l=%d", &i, &j, &l);
    if (g_print_exp && (g_all_exp || j == i + 1)) PrintDot(d);
    if (d.D() == static_cast<float>(s)) ++cnt[l];
    else if (d.D() != 0) ++other3;
  }
  std::map<int, std::vector<int>> by3;
  for (int l = 0; l < K; ++l) by3[cnt[l]].push_back(l);
  std::vector<std::vector<int>> p3;
  std::vector<int> st3(K, 0);
  for (auto& x : by3) {
    for (int l : x.second) st3[l] = static_cast<int>(p3.size());
    p3.push_back(x.second);
  }
  int viol3 = 0;
  for (const Dot& d : e3) {
    int i, j, l;
    sscanf(d.name.c_str(), "i=%d,j=%d,l=%d", &i, &j, &l);
    if ((d.D() == static_cast<float>(s)) != (st3[l] > std::max(st3[i], st3[j]))) ++viol3;
  }
  const bool ok3 = viol3 == 0 && other3 == 0 && p3.size() > 1;
  std::string counts;
  for (int l = 0; l < K; ++l) counts += Fmtf(" %d:%d", l, cnt[l]);
  printf("DERIVED %s order3-counts (l: pairs i<j before it)%s\n", KN(kind), counts.c_str());
  printf("DERIVED %s steps-C-free %zu %s consistent=%s violations=%d other=%d posdep=%d\n", KN(kind), p3.size(),
         GroupsStr(p3).c_str(), viol3 == 0 ? "yes" : "no", viol3, other3, CountPosdep(e3));
  if (ok1 && ok3 && p1 != p3) printf("DERIVED %s steps-disagree the C-based and C-free order tests differ\n", KN(kind));
  st.partition = ok3 ? p3 : ok1 ? p1 : p3;
  st.partition_ok = ok3 || ok1;
  printf("DERIVED %s steps %zu %s\n", KN(kind), st.partition.size(), GroupsStr(st.partition).c_str());
  if (st.partition.size() == 1)
    printf("DERIVED %s steps-note every small term was lost: one step over all K, or F >= %d (see the F sweeps)\n",
           KN(kind), std::ilogb(B) - std::ilogb(s));
  // C position: the cpos pattern against what each hypothesis predicts from the derived steps.
  std::vector<int> step_of(K, 0);
  for (size_t q = 0; q < st.partition.size(); ++q)
    for (int k : st.partition[q]) step_of[k] = static_cast<int>(q);
  const int last = static_cast<int>(st.partition.size()) - 1;
  const char* hyp[] = {"first-step", "outside-each-step-fp32", "after-all-steps", "last-step"};
  int agree[4] = {0, 0, 0, 0}, n_other = 0, n_s = 0;
  for (const Dot& d : e2) {
    int i, j;
    sscanf(d.name.c_str(), "i=%d,j=%d", &i, &j);
    const bool got_s = d.D() == static_cast<float>(s);
    if (!got_s && d.D() != 0) ++n_other;
    n_s += got_s;
    const bool same = step_of[i] == step_of[j];
    const bool pred[4] = {false, same, true, std::max(step_of[i], step_of[j]) < last};
    for (int h = 0; h < 4; ++h) agree[h] += pred[h] == got_s;
  }
  st.c_position = "none-of-the-hypotheses";
  std::string tally;
  for (int h = 0; h < 4; ++h) {
    tally += Fmtf(" %s:%d/%zu", hyp[h], agree[h], e2.size());
    if (agree[h] == static_cast<int>(e2.size()) && st.c_position == "none-of-the-hypotheses") st.c_position = hyp[h];
  }
  printf("DERIVED %s c-position %s (cpos: %d of %zu pairs gave s, %d other; agreement:%s) first-step: C is a term of "
         "the first fused step; outside-each-step-fp32: each step sums its products alone, then acc = fl32(acc + step) "
         "(also the order test then holds); after-all-steps: C added once at the end; last-step: C a term of the last step\n",
         KN(kind), st.c_position.c_str(), n_s, e2.size(), n_other, tally.c_str());
  const std::vector<int>& g0 = st.partition.front();
  if (g0.size() >= 3) {
    st.i0 = g0[0];
    st.j0 = g0[1];
    st.l0 = g0[2];
  }
  printf("DERIVED %s first-step-indices i0=%d j0=%d l0=%d\n", KN(kind), st.i0, st.j0, st.l0);
}

// ---------------------------------------------------------------------------- zero products inside a step
// C = 0; a small product s at the first index of step 1; zero products made of a large partner and a zero
// either in the next step (where s arrives as the chained partial sum) or in s's own step. d = s unless a
// zero product sets the step's exponent (the zero-term rule; qmx-sim zero-exp, or Exp(partner) + emin).
void ZeroInStep(const KindState& st) {
  const Kind kind = st.kind;
  const KindInfo& ki = kKinds[kind];
  const KindVals kv = Vals(kind);
  std::vector<std::pair<double, double>> smalls;  // factors of s
  if (kind == K_E4E4) smalls = {{0x1p-6, 0x1p-6}, {0x1p-9, 0x1p-6}, {0x1p-9, 0x1p-9}};
  else if (kind == K_E5E5) smalls = {{0x1p-14, 0x1p-14}, {0x1p-16, 0x1p-14}, {0x1p-16, 0x1p-16}};
  else smalls = {{0x1p-14, 0x1p-14}, {0x1p-24, 0x1p-14}, {0x1p-24, 0x1p-24}};
  const std::vector<int>& g1 = st.partition.front();
  const std::vector<int>* g2 = st.partition.size() > 1 ? &st.partition[1] : nullptr;
  std::vector<Dot> v;
  std::vector<double> want;
  for (int where = 0; where < 2; ++where) {
    if (where == 0 && !g2) continue;
    const std::vector<int>& zs = where == 0 ? *g2 : g1;
    for (int zk = 0; zk < 3; ++zk)
      for (const auto& sf : smalls) {
        Dot d = NewDot(kind, st.K, "zerostep",
                       Fmtf("%s/%s/s=%a", where == 0 ? "next-step" : "same-step",
                            zk == 0 ? "0x0" : zk == 1 ? "maxA_x_0" : "0_x_maxB", sf.first * sf.second));
        for (int k : zs) {
          if (zk == 1) PutCodes(d, k, EncodeOrDie(ki.fa, kv.max_f), 0);
          if (zk == 2) PutCodes(d, k, 0, EncodeOrDie(ki.fb, kv.max_f));
        }
        PutAB(d, g1[0], sf.first, sf.second);
        v.push_back(d);
        want.push_back(sf.first * sf.second);
      }
  }
  RunDots(v);
  PrintDots(v);
  std::string res;
  for (size_t i = 0; i < v.size(); ++i)
    res += " " + v[i].name + ":" + (static_cast<double>(v[i].D()) == want[i] ? "kept" : v[i].D() == 0 ? "lost" : "other");
  printf("DERIVED %s zero-products%s  (kept everywhere: zero products never set the exponent)\n", KN(kind), res.c_str());
}

// ---------------------------------------------------------------------------- C sweeps (alignment exponent)
struct Config {
  std::string name;
  double a, b;  // +a*b at i0, -a*b at j0 (a == 0: see zero_mode)
  int zero_mode = 0;  // 1: A = +0 everywhere (B = 1); 2: A = -0 (B = 1); 3: A = B = 0; 4: A = max, B = 0 everywhere;
                      // 5: A = max at i0 only, B = 0 there
  std::string expect;  // nominal exponents predicted by the rules
};
std::vector<Config> Configs(Kind kind) {
  const KindVals kv = Vals(kind);
  std::vector<Config> v;
  v.push_back({"one", 1, 1, 0, "0"});
  if (kind == K_E4E4) {
    v.push_back({"big", 256, 256, 0, "16"});
    v.push_back({"sig", 1.75, 1.75, 0, "0 (nominal; 1 if normalized)"});
    v.push_back({"sub1", std::ldexp(1.0, -9), 1, 0, "fp8-rule -6, f16-rule -9"});
    v.push_back({"sub7", 7 * std::ldexp(1.0, -9), 1, 0, "fp8-rule -6, f16-rule -7"});
    v.push_back({"subsub", std::ldexp(1.0, -9), std::ldexp(1.0, -9), 0, "fp8-rule -12, f16-rule -18"});
    v.push_back({"tiny", std::ldexp(1.0, -6), std::ldexp(1.0, -6), 0, "-12"});
  } else if (kind == K_E5E5) {
    v.push_back({"big", 32768, 32768, 0, "30"});
    v.push_back({"sig", 1.75, 1.75, 0, "0 (nominal; 1 if normalized)"});
    v.push_back({"sub1", std::ldexp(1.0, -16), 1, 0, "-14 (both rules; -16 if normalized)"});
    v.push_back({"sub3", 3 * std::ldexp(1.0, -16), 1, 0, "-14 (both rules; -15 if normalized)"});
    v.push_back({"subsub", std::ldexp(1.0, -16), std::ldexp(1.0, -16), 0, "-28 (both rules; -32 if normalized)"});
    v.push_back({"tiny", std::ldexp(1.0, -14), std::ldexp(1.0, -14), 0, "-28"});
  } else {
    v.push_back({"big", 32768, 32768, 0, "30"});
    v.push_back({"sig", kv.sig_f, kv.sig_f, 0, "0 (nominal; 1 if normalized)"});
    v.push_back({"sub1", std::ldexp(1.0, -24), 1, 0, "-14 (MMA-Sim; -24 if normalized)"});
    v.push_back({"subhi", 1023 * std::ldexp(1.0, -24), 1, 0, "-14 (MMA-Sim; -15 if normalized)"});
    v.push_back({"subsub", std::ldexp(1.0, -24), std::ldexp(1.0, -24), 0, "-28 (MMA-Sim; -48 if normalized)"});
    v.push_back({"tiny", std::ldexp(1.0, -14), std::ldexp(1.0, -14), 0, "-28"});
  }
  v.push_back({"zeroA", 0, 1, 1, "zero-exp (none: C never cut)"});
  v.push_back({"zeroNegA", 0, 1, 2, "zero-exp"});
  v.push_back({"zeroAB", 0, 0, 3, "zero-exp"});
  v.push_back({"zeroBigA", kv.max_f, 0, 4, "zero-exp, or Exp(a)+emin if a zero keeps its partner's exponent"});
  v.push_back({"zeroBigA1", kv.max_f, 0, 5, "as zeroBigA, one k only"});
  return v;
}
Dot ConfigDot(const KindState& st, const Config& cf, const std::string& sec, const std::string& name) {
  Dot d = NewDot(st.kind, st.K, sec, cf.name + "/" + name);
  switch (cf.zero_mode) {
    case 0:
      PutAB(d, st.i0, cf.a, cf.b);
      PutAB(d, st.j0, -cf.a, cf.b);
      break;
    case 1:
    case 2:
      for (int k = 0; k < st.K; ++k) PutAB(d, k, cf.zero_mode == 2 ? -0.0 : 0.0, 1.0);
      break;
    case 3:
      break;
    case 4:
      for (int k = 0; k < st.K; ++k) PutAB(d, k, cf.a, 0.0);
      break;
    case 5:
      PutAB(d, st.i0, cf.a, 0.0);
      break;
  }
  return d;
}

// Sweeps C = 2^t (pattern 1) and C = (1 + 2^-23) 2^t (pattern 2, t >= -126). Returns t_min of pattern 1 (the
// smallest t from which C comes back exactly for every larger t), INT_MIN when none.
int CSweep(const KindState& st, const Config& cf, int* tmin2) {
  std::vector<Dot> v;
  for (int p = 1; p <= 2; ++p)
    for (int t = -149; t <= 40; ++t) {
      if (p == 2 && t < -126) continue;
      Dot d = ConfigDot(st, cf, "csweep", Fmtf("p%d/t=%d", p, t));
      PutC(d, p == 1 ? std::ldexp(1.0, t) : std::ldexp(1.0 + std::ldexp(1.0, -23), t));
      v.push_back(d);
    }
  RunDots(v);
  int tm[3] = {INT_MIN, INT_MIN, INT_MIN};
  std::string cls[3];
  for (int p = 1; p <= 2; ++p) {
    // classify per t: K kept, 0 zero, P partial (nonzero, != C), X other
    std::string s;
    int first = 0;
    for (const Dot& d : v) {
      int pp, t;
      sscanf(d.name.c_str() + cf.name.size() + 1, "p%d/t=%d", &pp, &t);
      if (pp != p) continue;
      if (s.empty()) first = t;
      const float c = F32(d.c), r = d.D();
      s += r == c && F32Bits(r) == d.c ? 'K' : r == 0 ? '0' : std::isfinite(r) && std::fabs(r) < std::fabs(c) ? 'P' : 'X';
    }
    int t_min = INT_MIN;
    for (int i = static_cast<int>(s.size()) - 1; i >= 0 && s[i] == 'K'; --i) t_min = first + i;
    tm[p] = t_min;
    printf("SWEEP %s %s p%d t=%d..40 %s  (K: C exact, 0: lost, P: partly cut, X: other)\n", KN(st.kind),
           cf.name.c_str(), p, first, s.c_str());
    // EXP lines around the transition
    for (const Dot& d : v) {
      int pp, t;
      sscanf(d.name.c_str() + cf.name.size() + 1, "p%d/t=%d", &pp, &t);
      if (pp == p && t_min != INT_MIN && t >= t_min - 2 && t <= t_min + 1) PrintDot(d);
      if (pp == p && t_min == INT_MIN && (t == first || t == 0)) PrintDot(d);
    }
  }
  *tmin2 = tm[2];
  return tm[1];
}

// ---------------------------------------------------------------------------- F sweeps with products
int ProductFSweep(const KindState& st, double xf, const std::string& tag) {
  const KindVals kv = Vals(st.kind);
  (void)kv;
  const double X = xf * xf;
  const int eX = std::ilogb(xf) * 2;  // nominal exponent of the big product
  std::vector<Dot> v;
  for (int m = 1; m <= 70; ++m) {
    Dot d = NewDot(st.kind, st.K, "fprod-" + tag, Fmtf("m=%d", m));
    PutAB(d, st.i0, xf, xf);
    PutAB(d, st.j0, -xf, xf);
    if (!PutProd(d, st.l0, std::ldexp(1.0, eX - m))) continue;
    v.push_back(d);
  }
  (void)X;
  RunDots(v);
  PrintDots(v);
  int last_kept = INT_MIN, first_lost = INT_MAX;
  for (const Dot& d : v) {
    int m;
    sscanf(d.name.c_str(), "m=%d", &m);
    const bool kept = d.D() == static_cast<float>(std::ldexp(1.0, eX - m));
    if (kept && first_lost == INT_MAX) last_kept = m;
    if (!kept) first_lost = std::min(first_lost, m);
  }
  const int mmax = v.empty() ? 0 : atoi(v.back().name.c_str() + 2);
  printf("DERIVED %s F-products-%s %s (+-X at i0,j0 with X = %a, nominal exponent %d; s = 2^(%d-m) at l0 kept for "
         "m <= this; m tested up to %d)\n",
         KN(st.kind), tag.c_str(), first_lost == INT_MAX ? Fmtf(">=%d", mmax).c_str() : std::to_string(last_kept).c_str(),
         xf * xf, eX, eX, mmax);
  return first_lost == INT_MAX ? INT_MIN : last_kept;
}

// ---------------------------------------------------------------------------- term rounding
double RoundMode(double v, const std::string& mode) {
  if (mode == "rz") return std::trunc(v);
  if (mode == "rd") return std::floor(v);
  if (mode == "ru") return std::ceil(v);
  return std::nearbyint(v);  // rne (default FE_TONEAREST)
}
void TermRounding(const KindState& st, int F, bool with_c) {
  const KindVals kv = Vals(st.kind);
  const double vs[] = {0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2.5, 3.5};
  const int eX = with_c ? 0 : std::ilogb(kv.big_f) * 2;
  const double u = std::ldexp(1.0, eX - F);
  std::vector<Dot> v;
  std::vector<double> vals;
  for (int sgn = 1; sgn >= -1; sgn -= 2)
    for (double x : vs) {
      const double val = sgn * x;
      Dot d = NewDot(st.kind, st.K, with_c ? "termround-c" : "termround-prod", Fmtf("v=%g", val));
      if (with_c) {
        PutAB(d, st.i0, 1, 1);
        PutAB(d, st.j0, -1, 1);
        PutC(d, val * u);
      } else {
        PutAB(d, st.i0, kv.big_f, kv.big_f);
        PutAB(d, st.j0, -kv.big_f, kv.big_f);
        if (!PutProd(d, st.l0, val * u)) continue;
      }
      v.push_back(d);
      vals.push_back(val);
    }
  RunDots(v);
  PrintDots(v);
  std::string got;
  std::map<std::string, int> ok;
  for (size_t i = 0; i < v.size(); ++i) {
    const double q = static_cast<double>(v[i].D()) / u;
    got += Fmtf(" %g->%g", vals[i], q);
    for (const char* mode : {"rz", "rne", "rd", "ru"}) ok[mode] += RoundMode(vals[i], mode) == q;
  }
  std::string match;
  for (auto& kvp : ok)
    if (kvp.second == static_cast<int>(v.size())) match += " " + kvp.first;
  printf("DERIVED %s term-rounding-%s F=%d unit=2^%d matches:%s  (v -> d/unit:%s)\n", KN(st.kind), with_c ? "C" : "products",
         F, eX - F, match.empty() ? " none" : match.c_str(), got.c_str());
}

// ---------------------------------------------------------------------------- output rounding and width
void OutputRounding(const KindState& st, int F) {
  const int k = st.kind == K_E4E4 ? 14 : 20;
  const double vs[] = {0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3};
  std::vector<Dot> v;
  std::vector<double> vals;
  for (int sgn = 1; sgn >= -1; sgn -= 2)
    for (double x : vs) {
      const double val = sgn * x;
      Dot d = NewDot(st.kind, st.K, "outround", Fmtf("v=%g", val));
      PutC(d, std::ldexp(1.0, k));
      if (!PutProd(d, st.l0, val * std::ldexp(1.0, k - 24))) continue;
      v.push_back(d);
      vals.push_back(val);
    }
  RunDots(v);
  PrintDots(v);
  int n_rz = 0, n_rne = 0;
  std::string got;
  for (size_t i = 0; i < v.size(); ++i) {
    // The terms C = 2^k and d = v 2^(k-24), d cut at 2^(k-F) toward zero, then rounded to 24 bits.
    const double unit = std::ldexp(1.0, k - F);
    const double dt = std::trunc(vals[i] * std::ldexp(1.0, k - 24) / unit) * unit;
    const double S = std::ldexp(1.0, k) + dt;  // exact in double
    std::vector<TermV> one = {{S, k}};
    Model m;
    m.F = 60;
    m.out_rne = false;
    const float rz = FusedTerms(one, m);
    m.out_rne = true;
    const float rne = FusedTerms(one, m);
    n_rz += v[i].d == F32Bits(rz);
    n_rne += v[i].d == F32Bits(rne);
    got += Fmtf(" %g:%s", vals[i], v[i].d == F32Bits(rz) && v[i].d == F32Bits(rne) ? "both" : v[i].d == F32Bits(rz) ? "rz" : v[i].d == F32Bits(rne) ? "rne" : "neither");
  }
  printf("DERIVED %s output-rounding C=2^%d plus v*2^%d (terms cut at F=%d): rz %d/%zu rne %d/%zu (%s )\n", KN(st.kind), k,
         k - 24, F, n_rz, v.size(), n_rne, v.size(), got.c_str());
  // Width: C = 2^k and one product 2^(k-m).
  std::vector<Dot> w;
  for (int m = 1; m <= 30; ++m) {
    Dot d = NewDot(st.kind, st.K, "outbits", Fmtf("m=%d", m));
    PutC(d, std::ldexp(1.0, k));
    if (!PutProd(d, st.l0, std::ldexp(1.0, k - m))) continue;
    w.push_back(d);
  }
  RunDots(w);
  PrintDots(w);
  int last = 0;
  for (const Dot& d : w) {
    int m;
    sscanf(d.name.c_str(), "m=%d", &m);
    if (static_cast<double>(d.D()) == std::ldexp(1.0, k) + std::ldexp(1.0, k - m) && m == last + 1) last = m;
  }
  printf("DERIVED %s output-width C=2^%d + 2^(%d-m) exact for m <= %d (23: 24-bit FP32 result, 13: e8m13 as Ada FP8)\n",
         KN(st.kind), k, k, last);
}

// ---------------------------------------------------------------------------- NaN / Inf / signed zero
void Specials(const KindState& st) {
  const Kind kind = st.kind;
  const KindInfo& ki = kKinds[kind];
  const int K = st.K;
  std::vector<Dot> v;
  auto dot = [&](const std::string& name) { return NewDot(kind, K, "special", name); };
  const uint32_t nanA = ki.fa == E4M3 ? 0x7F : ki.fa == E5M2 ? 0x7E : 0x7E00;
  const uint32_t nanAneg = nanA | SignBit(ki.fa);
  const uint32_t one_b = EncodeOrDie(ki.fb, 1.0), one_a = EncodeOrDie(ki.fa, 1.0);
  {
    Dot d = dot("nanA");
    PutCodes(d, st.l0, nanA, one_b);
    PutAB(d, st.i0, 1, 1);
    v.push_back(d);
  }
  {
    Dot d = dot("negnanA");
    PutCodes(d, st.l0, nanAneg, one_b);
    v.push_back(d);
  }
  {
    Dot d = dot("nanA_times_zero");
    PutCodes(d, st.l0, nanA, 0);
    v.push_back(d);
  }
  if (ki.fa == E4M3) {
    Dot d = dot("nanA_other_step");  // NaN in the last step, C and a product elsewhere
    PutCodes(d, st.partition.back().back(), nanA, one_b);
    PutC(d, 1.0);
    v.push_back(d);
  }
  if (ki.fa != E4M3) {
    const uint32_t inf = ki.fa == E5M2 ? 0x7C : 0x7C00, ninf = inf | SignBit(ki.fa);
    const uint32_t snan = ki.fa == E5M2 ? 0x7D : 0x7C01;
    Dot d = dot("infA");
    PutCodes(d, st.l0, inf, one_b);
    v.push_back(d);
    d = dot("infA_times_zero");
    PutCodes(d, st.l0, inf, 0);
    v.push_back(d);
    d = dot("infA_plus_neginfA");
    PutCodes(d, st.i0, inf, one_b);
    PutCodes(d, st.j0, ninf, one_b);
    v.push_back(d);
    d = dot("infA_neginfA_other_steps");
    PutCodes(d, st.partition.front().front(), inf, one_b);
    PutCodes(d, st.partition.back().back(), ninf, one_b);
    v.push_back(d);
    d = dot("infA_plus_Cneginf");
    PutCodes(d, st.l0, inf, one_b);
    PutC(d, -INFINITY);
    v.push_back(d);
    d = dot("snanA");
    PutCodes(d, st.l0, snan, one_b);
    v.push_back(d);
    d = dot("infA_times_max");
    PutCodes(d, st.l0, inf, EncodeOrDie(ki.fb, Vals(kind).max_f));
    v.push_back(d);
  }
  for (uint32_t cb : {0x7fc00000u, 0x7fc01234u, 0xffc00000u, 0x7f800001u, 0x7f800000u, 0xff800000u}) {
    Dot d = dot("C=" + Hex(cb, 8) + "_prod1");
    PutAB(d, st.i0, 1, 1);
    d.c = cb;
    v.push_back(d);
  }
  {
    Dot d = dot("Cinf_nanA");
    PutCodes(d, st.l0, nanA, one_b);
    d.c = 0x7f800000u;
    v.push_back(d);
  }
  {
    Dot d = dot("Cfltmax_plus_max_products");
    for (int k = 0; k < K; ++k) PutAB(d, k, Vals(kind).max_f, Vals(kind).max_f);
    d.c = 0x7f7fffffu;
    v.push_back(d);
  }
  // Signed zeros.
  {
    Dot d = dot("C=-0_products+0");
    d.c = 0x80000000u;
    v.push_back(d);
    d = dot("C=-0_products-0");
    for (int k = 0; k < K; ++k) PutCodes(d, k, SignBit(ki.fa), one_b);
    d.c = 0x80000000u;
    v.push_back(d);
    d = dot("C=+0_products-0");
    for (int k = 0; k < K; ++k) PutCodes(d, k, SignBit(ki.fa), one_b);
    v.push_back(d);
    d = dot("C=-0_cancel_+1-1");
    PutAB(d, st.i0, 1, 1);
    PutAB(d, st.j0, -1, 1);
    d.c = 0x80000000u;
    v.push_back(d);
    d = dot("C=-1_plus_1");
    PutAB(d, st.i0, 1, 1);
    PutC(d, -1.0);
    v.push_back(d);
    d = dot("C=+1_minus_1");
    PutCodes(d, st.i0, one_a | SignBit(ki.fa), one_b);
    PutC(d, 1.0);
    v.push_back(d);
  }
  RunDots(v);
  PrintDots(v);
}

// ---------------------------------------------------------------------------- random tiles, emulation, models
struct RandSet {
  Kind kind;
  std::string dist;
  int K, M, N;
  std::vector<uint32_t> A, B;  // A: M x K row-major, B: K x N row-major
  std::vector<float> C, D;     // M x N
};
uint32_t RandCode(Fmt f, const std::string& dist, std::mt19937_64& g) {
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  if (dist == "bits") {
    for (;;) {
      const uint32_t c = static_cast<uint32_t>(g()) & ((1u << Bits(f)) - 1);
      if (std::isfinite(Decode(f, c))) return c;
    }
  }
  if (dist == "normal") return Nearest(f, nd(g));
  const double lo = f == E4M3 ? -12 : f == E5M2 ? -18 : -26, hi = f == E4M3 ? 8.7 : f == E5M2 ? 15.8 : 15.9;
  return Nearest(f, ((g() & 1) ? 1 : -1) * std::exp2(lo + (hi - lo) * ud(g)));
}
void TilesOf(const RandSet& s, const std::vector<uint32_t>& A, const std::vector<uint32_t>& B, int K,
             std::vector<uint32_t>& a, std::vector<uint32_t>& bt, std::vector<float>& c) {
  const int tm = s.M / 16, tn = s.N / 8, tiles = tm * tn;
  a.assign(static_cast<size_t>(tiles) * 16 * K, 0);
  bt.assign(static_cast<size_t>(tiles) * 8 * K, 0);
  c.assign(static_cast<size_t>(tiles) * 128, 0);
  for (int w = 0; w < tiles; ++w) {
    const int r0 = (w / tn) * 16, c0 = (w % tn) * 8;
    for (int r = 0; r < 16; ++r)
      for (int k = 0; k < K; ++k) a[(static_cast<size_t>(w) * 16 + r) * K + k] = A[static_cast<size_t>(r0 + r) * K + k];
    for (int j = 0; j < 8; ++j)
      for (int k = 0; k < K; ++k) bt[(static_cast<size_t>(w) * 8 + j) * K + k] = B[static_cast<size_t>(k) * s.N + c0 + j];
    for (int r = 0; r < 16; ++r)
      for (int j = 0; j < 8; ++j) c[w * 128 + r * 8 + j] = s.C[static_cast<size_t>(r0 + r) * s.N + c0 + j];
  }
}
std::vector<float> Untile(const RandSet& s, const std::vector<float>& d) {
  const int tn = s.N / 8;
  std::vector<float> D(static_cast<size_t>(s.M) * s.N);
  for (int w = 0; w < (s.M / 16) * tn; ++w) {
    const int r0 = (w / tn) * 16, c0 = (w % tn) * 8;
    for (int r = 0; r < 16; ++r)
      for (int j = 0; j < 8; ++j) D[static_cast<size_t>(r0 + r) * s.N + c0 + j] = d[w * 128 + r * 8 + j];
  }
  return D;
}
RandSet MakeSet(Kind kind, const std::string& dist, int K, std::mt19937_64& g, int M = 64, int N = 64) {
  RandSet s;
  s.kind = kind;
  s.dist = dist;
  s.K = K;
  s.M = M;
  s.N = N;
  const KindInfo& ki = kKinds[kind];
  s.A.resize(static_cast<size_t>(s.M) * K);
  s.B.resize(static_cast<size_t>(K) * s.N);
  for (auto& x : s.A) x = RandCode(ki.fa, dist, g);
  for (auto& x : s.B) x = RandCode(ki.fb, dist, g);
  s.C.resize(static_cast<size_t>(s.M) * s.N);
  for (size_t i = 0; i < s.C.size(); ++i)  // as gpu/src/xval.cc draws C
    s.C[i] = (i % 3 == 0) ? std::ldexp(static_cast<float>(g() % 1000) - 500.0f, -6) : 0.0f;
  std::vector<uint32_t> a, bt;
  std::vector<float> c, d;
  TilesOf(s, s.A, s.B, K, a, bt, c);
  RunTiles(kind, K, (s.M / 16) * (s.N / 8), a, bt, c, d);
  s.D = Untile(s, d);
  return s;
}
// FP8 set emulated on the FP16 HMMA: each 32-block of K becomes two k16 halves in the order `map` says.
// fadd: the HMMA chain of each instruction starts from zero and C is added afterwards in FP32 (on the host).
long Emulate(const RandSet& s, const std::string& map, bool rev, bool fadd) {
  const KindInfo& ki = kKinds[s.kind];
  const int K = s.K;
  std::vector<uint32_t> A(s.A.size()), B(s.B.size());
  for (int k0 = 0; k0 < K; k0 += 32)
    for (int h = 0; h < 2; ++h)
      for (int p = 0; p < 16; ++p) {
        const int j = k0 + 16 * h + p, src = k0 + EmuIndex(map, rev ? 1 - h : h, p);
        for (int r = 0; r < s.M; ++r) A[static_cast<size_t>(r) * K + j] = EncodeOrDie(F16, Decode(ki.fa, s.A[static_cast<size_t>(r) * K + src]));
        for (int c = 0; c < s.N; ++c) B[static_cast<size_t>(j) * s.N + c] = EncodeOrDie(F16, Decode(ki.fb, s.B[static_cast<size_t>(src) * s.N + c]));
      }
  RandSet e = s;
  e.kind = K_F16;
  std::vector<uint32_t> a, bt;
  std::vector<float> c, d;
  std::vector<float> D;
  if (!fadd) {
    TilesOf(e, A, B, K, a, bt, c);
    RunTiles(K_F16, K, (s.M / 16) * (s.N / 8), a, bt, c, d);
    D = Untile(e, d);
  } else {
    D = s.C;
    for (int k0 = 0; k0 < K; k0 += 32) {  // one FP8 instruction = two chained k16 HMMAs from zero
      RandSet one = e;
      one.K = 32;
      std::fill(one.C.begin(), one.C.end(), 0.0f);
      std::vector<uint32_t> A1(static_cast<size_t>(s.M) * 32), B1(static_cast<size_t>(32) * s.N);
      for (int r = 0; r < s.M; ++r)
        for (int q = 0; q < 32; ++q) A1[static_cast<size_t>(r) * 32 + q] = A[static_cast<size_t>(r) * K + k0 + q];
      for (int q = 0; q < 32; ++q)
        for (int cc = 0; cc < s.N; ++cc) B1[static_cast<size_t>(q) * s.N + cc] = B[static_cast<size_t>(k0 + q) * s.N + cc];
      TilesOf(one, A1, B1, 32, a, bt, c);
      RunTiles(K_F16, 32, (s.M / 16) * (s.N / 8), a, bt, c, d);
      const std::vector<float> P = Untile(one, d);
      for (size_t i = 0; i < D.size(); ++i) D[i] = D[i] + P[i];
    }
  }
  long bad = 0;
  for (size_t i = 0; i < D.size(); ++i) bad += F32Bits(D[i]) != F32Bits(s.D[i]);
  return bad;
}
// Products of a set precomputed: value (exact in double) and nominal exponent under both rules.
struct PreSet {
  int M = 0, N = 0, K = 0;
  std::vector<double> pv;
  std::vector<int16_t> nom[2];
};
PreSet Precompute(const RandSet& s) {
  const KindInfo& ki = kKinds[s.kind];
  PreSet p;
  p.M = s.M;
  p.N = s.N;
  p.K = s.K;
  const size_t n = static_cast<size_t>(s.M) * s.N * s.K;
  p.pv.resize(n);
  p.nom[0].resize(n);
  p.nom[1].resize(n);
  for (int i = 0; i < s.M; ++i)
    for (int j = 0; j < s.N; ++j)
      for (int k = 0; k < s.K; ++k) {
        const double x = Decode(ki.fa, s.A[static_cast<size_t>(i) * s.K + k]), y = Decode(ki.fb, s.B[static_cast<size_t>(k) * s.N + j]);
        const size_t q = (static_cast<size_t>(i) * s.N + j) * s.K + k;
        p.pv[q] = x * y;
        for (int r = 0; r < 2; ++r)
          p.nom[r][q] = static_cast<int16_t>(x == 0 || y == 0 ? 0 : NominalOf(x, ki.fa, r) + NominalOf(y, ki.fb, r));
      }
  return p;
}
// The fused step in doubles: every term scaled by 2^(F - emax) is below 2^(F + 2), so trunc and the sum of at
// most 33 terms are exact for F <= 45 (finite data, term=rz, zero-exp none).
float FastDot(const Model& m, const PreSet& p, int i, int j, float c) {
  const size_t base = (static_cast<size_t>(i) * p.N + j) * p.K;
  const double* pv = &p.pv[base];
  const int16_t* nom = &p.nom[m.rule][base];
  float acc = c, part = 0.0f;
  for (int k0 = 0; k0 < p.K; k0 += m.block) {
    part = 0.0f;
    for (const auto& g : m.groups) {
      const float in = m.c_mode == 0 ? acc : m.c_mode == 1 ? 0.0f : part;
      int emax = in != 0 ? std::max(std::ilogb(in), -126) : INT_MIN;
      for (int k : g)
        if (pv[k0 + k] != 0) emax = std::max(emax, static_cast<int>(nom[k0 + k]));
      float r = 0.0f;
      if (emax != INT_MIN) {
        const double scale = std::ldexp(1.0, m.F - emax);
        double S = std::trunc(static_cast<double>(in) * scale);
        for (int k : g) S += std::trunc(pv[k0 + k] * scale);
        const bool neg = S < 0;
        r = RoundOut(neg, static_cast<u128>(static_cast<uint64_t>(neg ? -S : S)), emax - m.F, m.bits, m.out_rne);
      }
      if (m.c_mode == 0) acc = r;
      else if (m.c_mode == 1) acc = acc + r;
      else part = r;
    }
    if (m.c_mode == 2) acc = acc + part;
  }
  return acc;
}
long ModelMismatches(const RandSet& s, const PreSet& p, const Model& m) {
  long bad = 0;
  for (int i = 0; i < s.M; ++i)
    for (int j = 0; j < s.N; ++j) {
      const size_t o = static_cast<size_t>(i) * s.N + j;
      bad += F32Bits(FastDot(m, p, i, j, s.C[o])) != F32Bits(s.D[o]);
    }
  return bad;
}
// The slow reference (HostDot) on a few outputs, to hold FastDot to it.
long CrossCheckFast(const RandSet& s, const PreSet& p, const Model& m) {
  const KindInfo& ki = kKinds[s.kind];
  std::vector<uint32_t> col(s.K);
  long bad = 0;
  for (int j = 0; j < s.N; j += 7) {
    for (int k = 0; k < s.K; ++k) col[k] = s.B[static_cast<size_t>(k) * s.N + j];
    for (int i = 0; i < s.M; i += 3) {
      const size_t o = static_cast<size_t>(i) * s.N + j;
      const float r = HostDot(m, ki.fa, ki.fb, &s.A[static_cast<size_t>(i) * s.K], col.data(), s.K, s.C[o]);
      bad += F32Bits(r) != F32Bits(FastDot(m, p, i, j, s.C[o]));
    }
  }
  return bad;
}
bool IsContiguous(const std::vector<std::vector<int>>& g, int* step) {
  int next = 0;
  for (const auto& v : g) {
    if (v.size() != g[0].size()) return false;
    for (int x : v)
      if (x != next++) return false;
  }
  *step = static_cast<int>(g[0].size());
  return true;
}
// The model in qmx-sim's fused grammar where it has the keys (split=hmma: the K grouping k % 4 in {0,1} then
// {2,3} per 32, with FP16 operand exponents; promote=N: a partial from zero added to C in FP32 every N K).
std::string QmxString(const Model& m, Kind kind) {
  int step;
  const bool contig = IsContiguous(m.groups, &step);
  const bool hmma = m.groups == Grouping("2x16-lohi");
  const bool e4 = kKinds[kind].fa == E4M3 || kKinds[kind].fb == E4M3;
  std::string s = Fmtf("fused:step=%d,F=%d,term=%s,out=%s", contig ? step : static_cast<int>(m.groups[0].size()), m.F,
                       m.term_rne ? "rne" : "rz", m.out_rne ? "rne" : "rz");
  std::string need;
  if (hmma && kind != K_F16) {
    s += ",split=hmma";
    if (e4 && m.rule == 0) need += " +E4M3 subnormals at emin -6 (split=hmma implies FP16 exponents: no key)";
  } else {
    if (!contig) need += " +K-order " + GroupsStr(m.groups) + " (no key: permute K within each 32 first)";
    if (e4 && m.rule == 1) need += " +E4M3 subnormals at their own exponent (FP16 emin; only split=hmma sets it)";
  }
  if (m.c_mode == 1) s += Fmtf(",promote=%d", static_cast<int>(m.groups[0].size()));
  if (m.c_mode == 2) s += Fmtf(",promote=%d", m.block);
  return s + need;
}

void WriteNpyU8(const std::string& path, const std::vector<uint32_t>& v, int r, int c) {
  FILE* f = fopen(path.c_str(), "wb");
  if (!f) return;
  std::string h = Fmtf("{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d), }", r, c);
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  const uint16_t hl = static_cast<uint16_t>(h.size());
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fwrite(&hl, 2, 1, f);
  fwrite(h.data(), 1, h.size(), f);
  for (uint32_t x : v) fputc(static_cast<int>(x), f);
  fclose(f);
}
void WriteNpyF32(const std::string& path, const std::vector<float>& v, int r, int c) {
  FILE* f = fopen(path.c_str(), "wb");
  if (!f) return;
  std::string h = Fmtf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", r, c);
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  const uint16_t hl = static_cast<uint16_t>(h.size());
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fwrite(&hl, 2, 1, f);
  fwrite(h.data(), 1, h.size(), f);
  fwrite(v.data(), 4, v.size(), f);
  fclose(f);
}

void RandomSection(const std::map<Kind, KindState>& states, const std::string& npy_dir, std::mt19937_64& g) {
  printf("# random: 64x64 outputs per set (normal/K=16 instructions: 32x32), C as xval draws it; EMU = FP8 data converted to FP16 (exact) and run as "
         "two chained m16n8k16 per 32 K in the order named; MODEL = host fused-sum model\n");
  const Kind kinds[] = {K_E4E4, K_E5E5, K_E4E5, K_F16};
  for (Kind kind : kinds) {
    std::vector<RandSet> sets;
    for (const char* dist : {"normal", "bits", "wide"})
      for (int mult = 1; mult <= 2; ++mult) sets.push_back(MakeSet(kind, dist, kKinds[kind].kinst * mult, g));
    // Short sums of normal values are exact (nothing is cut); a long chain, as in xval's "normal" case, is not.
    sets.push_back(MakeSet(kind, "normal", kKinds[kind].kinst * 16, g, 32, 32));
    long total = 0;
    for (auto& s : sets) total += static_cast<long>(s.D.size());
    if (!npy_dir.empty() && kind != K_F16) {
      for (auto& s : sets) {
        const std::string base = npy_dir + "/" + KN(kind) + "_" + s.dist + "_K" + std::to_string(s.K) + "_";
        WriteNpyU8(base + "A.npy", s.A, s.M, s.K);
        WriteNpyU8(base + "B.npy", s.B, s.K, s.N);
        WriteNpyF32(base + "C.npy", s.C, s.M, s.N);
        WriteNpyF32(base + "D.npy", s.D, s.M, s.N);
        // The same operands with K reordered so that the derived steps are contiguous (step = group size):
        // qmx-sim's fused:step=S then models a non-contiguous grouping.
        auto st = states.find(kind == K_E4E5 ? K_E4E4 : kind);
        if (st == states.end() || !st->second.partition_ok) continue;
        std::vector<int> order;
        for (const auto& grp : st->second.partition) order.insert(order.end(), grp.begin(), grp.end());
        std::vector<uint32_t> Ak(s.A.size()), Bk(s.B.size());
        for (int k0 = 0; k0 < s.K; k0 += 32)
          for (int q = 0; q < 32; ++q) {
            for (int r = 0; r < s.M; ++r) Ak[static_cast<size_t>(r) * s.K + k0 + q] = s.A[static_cast<size_t>(r) * s.K + k0 + order[q]];
            for (int c = 0; c < s.N; ++c) Bk[static_cast<size_t>(k0 + q) * s.N + c] = s.B[static_cast<size_t>(k0 + order[q]) * s.N + c];
          }
        WriteNpyU8(base + "Ak.npy", Ak, s.M, s.K);
        WriteNpyU8(base + "Bk.npy", Bk, s.K, s.N);
      }
    }
    if (kind != K_F16) {
      for (int fadd = 0; fadd < 2; ++fadd)
        for (const char* map : {"contig", "natural", "lohi", "evenodd"})
          for (int rev = 0; rev < 2; ++rev) {
            long bad = 0;
            std::string per;
            for (auto& s : sets) {
              const long b = Emulate(s, map, rev, fadd);
              bad += b;
              per += Fmtf(" %s/K%d:%ld", s.dist.c_str(), s.K, b);
            }
            printf("EMU %s map=%s%s c=%s mismatches=%ld/%ld (%s )\n", KN(kind), map, rev ? "-rev" : "",
                   fadd ? "fadd-after" : "in-hmma", bad, total, per.c_str());
          }
    }
    // Host models.
    std::vector<Model> models;
    std::vector<std::pair<std::string, std::vector<std::vector<int>>>> groupings;
    if (kind == K_F16)
      for (const char* n : kF16Groupings) groupings.push_back({n, Grouping(n)});
    else
      for (const char* n : kFp8Groupings) groupings.push_back({n, Grouping(n)});
    const Kind src = kind == K_E4E5 ? K_E4E4 : kind;
    auto it = states.find(src);
    if (it != states.end() && it->second.partition_ok) groupings.push_back({"derived", it->second.partition});
    const bool e4 = kKinds[kind].fa == E4M3 || kKinds[kind].fb == E4M3;
    for (auto& gr : groupings)
      for (int F : {24, 25, 26})
        for (int out = 0; out < 2; ++out)
          for (int rule = 0; rule < (e4 ? 2 : 1); ++rule) {
            Model m;
            m.gname = gr.first;
            m.groups = gr.second;
            m.block = kind == K_F16 ? 16 : 32;
            m.F = F;
            m.out_rne = out;
            m.rule = e4 ? rule : 1;
            models.push_back(m);
            if (m.rule == 1 && kind != K_F16) {  // the accumulator outside the fused steps (FP32 RN adds)
              m.c_mode = 1;
              models.push_back(m);
              m.c_mode = 2;
              models.push_back(m);
            }
          }
    std::vector<PreSet> pre;
    for (auto& s : sets) pre.push_back(Precompute(s));
    long xbad = 0;
    for (size_t i = 0; i < models.size(); i += 7)
      for (size_t q = 0; q < sets.size(); ++q) xbad += CrossCheckFast(sets[q], pre[q], models[i]);
    if (xbad) printf("# INTERNAL: fast host model differs from the reference in %ld outputs\n", xbad);
    std::vector<std::pair<long, size_t>> res;
    for (size_t i = 0; i < models.size(); ++i) {
      long bad = 0;
      for (size_t q = 0; q < sets.size(); ++q) bad += ModelMismatches(sets[q], pre[q], models[i]);
      res.push_back({bad, i});
    }
    std::sort(res.begin(), res.end());
    for (size_t r = 0; r < res.size(); ++r) {
      const Model& m = models[res[r].second];
      const bool mmasim = m.F == 25 && !m.out_rne;
      if (r >= 10 && !(mmasim && (m.gname == "derived" || m.gname == "1x16"))) continue;
      printf("MODEL %s rank=%zu mismatches=%ld/%ld grouping=%s F=%d term=rz out=%s exp-rule=%s acc=%s qmx=\"%s\"\n", KN(kind),
             r + 1, res[r].first, total, m.gname.c_str(), m.F, m.out_rne ? "rne" : "rz", m.rule ? "f16-emin" : "fmt-emin",
             m.c_mode == 1 ? "each-step-then-fadd" : m.c_mode == 2 ? "instruction-then-fadd" : "in-step",
             QmxString(m, kind).c_str());
    }
  }
}

}  // namespace

// ============================================================================ main
int main(int argc, char** argv) {
  std::string npy_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--simulate") g_sim = true;
    else if (a.rfind("--simulate=", 0) == 0) {
      g_sim = true;
      g_sim_grouping = a.substr(11);
      if (Grouping(g_sim_grouping).empty()) {
        fprintf(stderr, "unknown grouping %s\n", g_sim_grouping.c_str());
        return 1;
      }
    } else if (a == "--npy" && i + 1 < argc) {
      npy_dir = argv[++i];
      mkdir(npy_dir.c_str(), 0755);
    } else if (a == "--sim-c-outside") g_sim_cmode = 1;
    else if (a == "--sim-c-after") g_sim_cmode = 2;
    else if (a == "--no-exp") g_print_exp = false;
    else if (a == "--all-exp") g_all_exp = true;
    else {
      fprintf(stderr, "usage: %s [--simulate[=GROUPING]] [--sim-c-outside] [--sim-c-after] [--npy DIR] [--no-exp] [--all-exp]\n", argv[0]);
      return 1;
    }
  }
  if (g_sim) {
    printf("# SIMULATION: host model stands in for the device: FP8 grouping %s %s, F=25, RZ, FP16 exponent rule, "
           "accumulator %s; FP16 1x16\n",
           g_sim_grouping.c_str(), GroupsStr(Grouping(g_sim_grouping)).c_str(), g_sim_cmode == 1 ? "added after each step (FP32 RN)" : g_sim_cmode == 2 ? "added after each instruction (FP32 RN)" : "in-step");
  } else {
    cudaDeviceProp p{};
    CK(cudaGetDeviceProperties(&p, 0));
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    printf("# device %s sm_%d%d driver %d runtime %d\n", p.name, p.major, p.minor, drv, rt);
    if (p.major * 10 + p.minor < 89) {
      printf("# FP8 mma.sync needs sm_89 or newer\n");
      return 1;
    }
  }
  std::mt19937_64 g(12345);
  printf("# section layout\n");
  for (Kind k : {K_E4E4, K_E4E5, K_E5E4, K_E5E5, K_F16})
    for (int mult = 1; mult <= 2; ++mult) LayoutCheck(k, kKinds[k].kinst * mult, g);
  printf("# section single-products\n");
  for (Kind k : {K_E4E4, K_E5E5, K_E4E5, K_F16}) ProductCheck(k, g);

  std::map<Kind, KindState> states;
  for (Kind kind : {K_E4E4, K_E5E5, K_F16}) {
    KindState st;
    st.kind = kind;
    st.K = kKinds[kind].kinst;
    printf("# section order %s\n", KN(kind));
    OrderExperiments(st);

    printf("# section zero products in a step %s\n", KN(kind));
    ZeroInStep(st);
    printf("# section alignment %s: +-X at i0, j0 (exact cancel) and C = 2^t: C survives iff t >= emax - F\n", KN(kind));
    int t_one2 = INT_MIN;
    const int t_one = CSweep(st, Configs(kind)[0], &t_one2);
    st.F_c = t_one == INT_MIN || t_one == -149 ? INT_MIN : -t_one;
    if (t_one == -149)
      printf("DERIVED %s F-from-C none: C = 2^-149 survives next to +-1 (C is not cut at the products' exponent: it is "
             "not a term of the step holding i0, j0; see c-position)\n", KN(kind));
    printf("DERIVED %s F-from-C %s (config one: X = 1*1, t_min = %d; pattern (1+2^-23)2^t t_min = %d)\n", KN(kind),
           st.F_c == INT_MIN ? "?" : std::to_string(st.F_c).c_str(), t_one, t_one2);
    for (const Config& cf : Configs(kind)) {
      if (cf.name == "one") continue;
      int t2;
      const int t1 = CSweep(st, cf, &t2);
      const std::string e1 = t1 == INT_MIN || st.F_c == INT_MIN ? "?" : t1 == -149 ? Fmtf("<=%d", -149 + st.F_c) : std::to_string(t1 + st.F_c);
      const std::string e2 = t2 == INT_MIN || st.F_c == INT_MIN ? "?" : t2 == -126 ? Fmtf("<=%d", -126 + st.F_c - 23) : std::to_string(t2 + st.F_c - 23);
      printf("DERIVED %s emax %s = %s (from 2^t: t_min %d) = %s (from (1+2^-23)2^t: t_min %d); predicted %s\n", KN(kind),
             cf.name.c_str(), e1.c_str(), t1, e2.c_str(), t2, cf.expect.c_str());
    }
    printf("# section F-products %s\n", KN(kind));
    const KindVals kv = Vals(kind);
    st.F_prod = ProductFSweep(st, kv.big_f, "big");
    ProductFSweep(st, kv.sig_f * kv.big_f / (kind == K_F16 ? 1.0 : 1.0), "sig");
    const int F = st.F_prod != INT_MIN ? st.F_prod : st.F_c != INT_MIN ? st.F_c : 25;
    printf("# section rounding %s (F=%d)\n", KN(kind), F);
    if (st.F_c != INT_MIN) TermRounding(st, st.F_c, true);
    TermRounding(st, F, false);
    OutputRounding(st, F);
    printf("# section specials %s\n", KN(kind));
    Specials(st);
    states[kind] = st;
  }
  printf("# section random\n");
  RandomSection(states, npy_dir, g);
  printf("# done\n");
  return 0;
}
