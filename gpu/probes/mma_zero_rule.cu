// mma_zero_rule.cu: probes of the raw mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 instruction on
// the device (one warp, one 16 x 8 tile per launch), printed one line per output for an offline model
// fit. Standalone: nvcc -arch=sm_90a -O2 -o mma_zero_rule mma_zero_rule.cu && ./mma_zero_rule
//   zero <a> <b> <c> -> <d>      A rows all `a`, B columns all `b` (e4m3 codes), C all `c` (FP32 bits):
//                                whether zero products lift the step's exponent above a tiny C
//                                (MMA-Sim's zero rule) or leave C alone (qmx-sim's fixed zero exponent).
//   pair <i> <j> -> <d>          A row: 448 at k = i, 2^-9 at k = j, 0 elsewhere; B all 1.0; C = 0: the
//                                small product survives only where i and j are summed in different steps.
// With an output folder argument it also writes random cases for a model fit: NAME_a.bin (M x K codes),
// NAME_b.bin (K x N codes), NAME_c.bin and NAME_d.bin (M x N FP32), K chained over k32 instructions with
// the accumulator in registers (as gpu/src/device.cu's kernel).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../src/mma_tile.cuh"

// a: m x k row-major codes; bt: n x k (column j's K values); c, d: m x n row-major; FA, FB: 0 e4m3, 1 e5m2.
// One warp per 16 x 8 tile, the accumulator in registers over K (fragment layout of PTX ISA 9.7.14.5, as
// gpu/src/device.cu).
template <int FA, int FB>
__global__ void Chain(const uint8_t* a, const uint8_t* bt, const float* c, int m, int n, int k, float* d) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int tiles_n = n / 8;
  if (warp >= (m / 16) * tiles_n) return;
  const size_t r0 = (warp / tiles_n) * 16, c0 = (warp % tiles_n) * 8, at = r0 * n + c0;
  qmx_mma::Fp8Tile<FA, FB>(a + r0 * k, k, bt + c0 * k, k, c + at, n, k, d + at, n);
}

// Chain on host arrays; returns D.
std::vector<float> RunChain(int fa, int fb, const std::vector<uint8_t>& a, const std::vector<uint8_t>& bt,
                            const std::vector<float>& c, int m, int n, int k) {
  uint8_t *da, *db;
  float *dc, *dd;
  cudaMalloc(&da, a.size());
  cudaMalloc(&db, bt.size());
  cudaMalloc(&dc, c.size() * 4);
  cudaMalloc(&dd, c.size() * 4);
  cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(db, bt.data(), bt.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice);
  const int warps = (m / 16) * (n / 8), blocks = (warps + 3) / 4;
  if (fa == 0 && fb == 0) Chain<0, 0><<<blocks, 128>>>(da, db, dc, m, n, k, dd);
  if (fa == 0 && fb == 1) Chain<0, 1><<<blocks, 128>>>(da, db, dc, m, n, k, dd);
  if (fa == 1 && fb == 1) Chain<1, 1><<<blocks, 128>>>(da, db, dc, m, n, k, dd);
  std::vector<float> d(c.size());
  cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) std::printf("error %s\n", cudaGetErrorString(e));
  cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
  return d;
}

void WriteBin(const char* dir, const char* name, const char* what, const void* p, size_t bytes) {
  char path[512];
  std::snprintf(path, sizeof path, "%s/%s_%s.bin", dir, name, what);
  FILE* f = std::fopen(path, "wb");
  std::fwrite(p, 1, bytes, f);
  std::fclose(f);
}

// Random cases: A, B codes drawn over every finite code (wide: exponents from subnormal to max) or over
// codes near 1 (narrow), C from 2^-20 .. 2^20 with zeros; M = 64, N = 32.
struct Config {
  int fa, fb, m, k, n;
  bool wide_a, wide_b;
  const char* name;
};

void RandomCases(const char* dir) {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto rnd = [&] { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; };
  std::vector<Config> configs;
  const char* fname[2] = {"e4m3", "e5m2"};
  static char names[64][64];
  int at = 0;
  for (int f = 0; f < 2; ++f)
    for (int k : {32, 64, 256})
      for (int wide = 0; wide < 2; ++wide) {
        std::snprintf(names[at], 64, "%s_k%d_%s", fname[f], k, wide ? "wide" : "narrow");
        configs.push_back({f, f, 64, k, 32, wide != 0, wide != 0, names[at++]});
      }
  // Mixed formats, long K: e4m3 near 1 or over every finite code, times e5m2 over every finite code.
  for (int rep = 0; rep < 4; ++rep) {
    std::snprintf(names[at], 64, "e4m3_e5m2_k1024_mixed%d", rep);
    configs.push_back({0, 1, 256, 1024, 256, rep >= 2, true, names[at++]});
  }
  for (const Config& cf : configs) {
    const int m = cf.m, n = cf.n, k = cf.k;
    std::vector<uint8_t> a(m * k), b(k * n), bt(n * k);
    auto code = [&](int fmt, bool wide) -> uint8_t {
      for (;;) {
        uint8_t c = static_cast<uint8_t>(rnd());
        if (!wide) c = static_cast<uint8_t>((c & 0x80) | ((fmt == 0 ? 0x30 : 0x38) + (c & 0x0F)));
        if (rnd() % 8 == 0) c = 0;
        const bool nan_inf = fmt == 0 ? (c & 0x7F) == 0x7F : (c & 0x7C) == 0x7C;
        if (!nan_inf) return c;
      }
    };
    for (auto& v : a) v = code(cf.fa, cf.wide_a);
    for (auto& v : b) v = code(cf.fb, cf.wide_b);
    for (int kk = 0; kk < k; ++kk)
      for (int j = 0; j < n; ++j) bt[j * k + kk] = b[kk * n + j];
    std::vector<float> c(m * n);
    for (auto& v : c) {
      const uint64_t r = rnd();
      v = r % 5 == 0 ? 0.0f : std::ldexp(static_cast<float>(static_cast<int64_t>(r >> 40) - (1 << 23)) / (1 << 23), static_cast<int>(r % 41) - 20);
    }
    const std::vector<float> d = RunChain(cf.fa, cf.fb, a, bt, c, m, n, k);
    WriteBin(dir, cf.name, "a", a.data(), a.size());
    WriteBin(dir, cf.name, "b", b.data(), b.size());
    WriteBin(dir, cf.name, "c", c.data(), c.size() * 4);
    WriteBin(dir, cf.name, "d", d.data(), d.size() * 4);
    std::printf("case %s %s %s %d %d %d\n", cf.name, fname[cf.fa], fname[cf.fb], m, k, n);
  }
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float Float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device %s sm_%d%d\n", prop.name, prop.major, prop.minor);
  // zero: (a, b) code pairs x C values.
  const uint8_t codes[][2] = {{0x00, 0x7E}, {0x00, 0x00}, {0x80, 0x7E}, {0x00, 0x01}, {0x01, 0x01}, {0x00, 0x38}};
  const uint32_t cs[] = {0x00800400u, 0x00800001u, 0x00000001u, 0x00400001u, 0x3F800001u, 0x80800400u,
                         0x02000001u, 0x06000001u, 0x0A000001u, 0x0E000001u, 0x12000001u, 0x16000001u,
                         0x1A000001u, 0x1E000001u, 0x22000001u, 0x26000001u, 0x2A000001u, 0x2E000001u,
                         0x32000001u, 0x36000001u, 0x00000000u, 0x80000000u};
  for (const auto& ab : codes)
    for (uint32_t c : cs) {
      const std::vector<float> d =
          RunChain(0, 0, std::vector<uint8_t>(16 * 32, ab[0]), std::vector<uint8_t>(8 * 32, ab[1]),
                   std::vector<float>(128, Float(c)), 16, 8, 32);
      std::printf("zero %02x %02x %08x -> %08x\n", ab[0], ab[1], c, Bits(d[0]));
    }
  // pair: 16 (i, j) pairs per launch, one per row.
  std::vector<std::pair<int, int>> pairs;
  for (int i = 0; i < 32; ++i)
    for (int j = 0; j < 32; ++j)
      if (i != j) pairs.push_back({i, j});
  for (size_t p0 = 0; p0 < pairs.size(); p0 += 16) {
    std::vector<uint8_t> a(16 * 32, 0);
    for (int r = 0; r < 16 && p0 + r < pairs.size(); ++r) {
      a[r * 32 + pairs[p0 + r].first] = 0x7E;   // 448
      a[r * 32 + pairs[p0 + r].second] = 0x01;  // 2^-9
    }
    const std::vector<float> d = RunChain(0, 0, a, std::vector<uint8_t>(8 * 32, 0x38), std::vector<float>(128, 0.0f), 16, 8, 32);
    for (int r = 0; r < 16 && p0 + r < pairs.size(); ++r)
      std::printf("pair %d %d -> %08x\n", pairs[p0 + r].first, pairs[p0 + r].second, Bits(d[r * 8]));
  }
  // sub: an E4M3 subnormal (2^-9) times E5M2 57344 is the step's largest product (112, exponent 6 as FP16
  // values; 9 were the E4M3 subnormal's exponent clamped to E4M3's emin -6), beside 2^-9 x 2^-8 = 2^-17:
  // D = 112 + 2^-17 (0x42e00001) where the HMMA aligns at 6, 112 (0x42e00000) where at 9.
  {
    std::vector<uint8_t> a(16 * 32, 0), bt(8 * 32, 0);
    for (int r = 0; r < 16; ++r) a[r * 32] = a[r * 32 + 1] = 0x01;
    for (int j = 0; j < 8; ++j) bt[j * 32] = 0x7B, bt[j * 32 + 1] = 0x1C;
    const float d0 = RunChain(0, 1, a, bt, std::vector<float>(128, 0.0f), 16, 8, 32)[0];
    std::printf("sub e4m3 01 01 x e5m2 7b 1c -> %08x\n", Bits(d0));
  }
  if (argc > 1) RandomCases(argv[1]);
  return 0;
}
