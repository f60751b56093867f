// wgmma_zero_rule.cu: the zero-term rule of Hopper's FP8 wgmma (the instruction cuBLASLt's FP8 GEMMs and
// qmx-sim's hopper-fp8 models are about). One warpgroup runs
// wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 with its accumulator registers preset to C
// (scale-d = 1). A is all `a`, B all `b` (so the shared-memory layout the descriptors describe does not
// matter), C all `c`; every output prints alike:  zero <a> <b> <c> -> <d>.
// qmx-sim's rule (zero products at a fixed exponent, -133, below any C) keeps C whole: D = C for A = 0.
// MMA-Sim's rule (a zero element has exponent -126, so 0 x 448 sits at -118) aligns C at -118 and cuts
// it to 13 fraction bits there: C = 0x00800400 (2^-126 + 2^-139) becomes 0x00800000.
// Build: nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o wgmma_zero_rule wgmma_zero_rule.cu
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "../src/mma_tile.cuh"

__global__ void Wgmma(uint8_t a, uint8_t b, float c, float* d) {
  __shared__ __align__(1024) uint8_t sa[8192];
  __shared__ __align__(1024) uint8_t sb[8192];
  qmx_mma::UniformTiles(sa, sb, a, b);
  float acc[4] = {c, c, c, c};
  const uint64_t da = qmx_mma::WgmmaDesc(sa), db = qmx_mma::WgmmaDesc(sb);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < 4; ++i) d[threadIdx.x * 4 + i] = acc[i];
}

int main() {
  float* d;
  cudaMalloc(&d, 128 * 4 * 4);
  const uint8_t pairs[][2] = {{0x00, 0x7E}, {0x00, 0x00}, {0x80, 0x7E}, {0x00, 0x38}, {0x38, 0x38}, {0x01, 0x01}};
  const uint32_t cs[] = {0x00800400u, 0x00800001u, 0x00000001u, 0x00400001u, 0x3F800001u, 0x80800400u,
                         0x02000001u, 0x06000001u, 0x0A000001u, 0x0E000001u, 0x12000001u, 0x16000001u,
                         0x1A000001u, 0x1E000001u, 0x22000001u, 0x26000001u, 0x2A000001u, 0x2E000001u,
                         0x32000001u, 0x36000001u, 0x00000000u, 0x80000000u};
  for (const auto& p : pairs)
    for (uint32_t cb : cs) {
      float c;
      std::memcpy(&c, &cb, 4);
      Wgmma<<<1, 128>>>(p[0], p[1], c, d);
      float h[512];
      const cudaError_t e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
      if (e != cudaSuccess) {
        std::printf("error %s\n", cudaGetErrorString(e));
        return 1;
      }
      uint32_t first, same = 1;
      std::memcpy(&first, &h[0], 4);
      for (int i = 1; i < 512; ++i) same &= std::memcmp(&h[i], &h[0], 4) == 0;
      std::printf("zero %02x %02x %08x -> %08x%s\n", p[0], p[1], cb, first, same ? "" : " (outputs differ)");
    }
  return 0;
}
