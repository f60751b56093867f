// wgmma_f16_acc.cu: Hopper's FP8 wgmma with an FP16 accumulator (qmx-sim's hopper-wgmma-fp8-f16). One
// warpgroup runs wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3 with its accumulator registers preset
// to C (scale-d = 1). A is all `a`, B all `b` (so the shared-memory layout the descriptors describe does not
// matter) and C all `c`, so every output is C + 32 a b as the instruction computes it; each case prints
//   f16 <a> <b> <c> -> <d>
// (E4M3 codes, FP16 patterns in hex; " (outputs differ)" if the 512 outputs are not all alike). The cases
// cross E4M3 values (zero, subnormal, one, 448 and between) with FP16 values of C across its range
// (subnormals, ulp boundaries, 2048 where products below 2^-2 fall under F = 13, 65504): the rounding of the
// output (to nearest even or toward zero), F, the accumulator's exponent floor and the zero rule all show.
// gpu/scripts/replay_wgmma_f16.py compares the lines with the model.
// Build: nvcc -gencode arch=compute_90a,code=sm_90a -O2 -o wgmma_f16_acc wgmma_f16_acc.cu
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "../src/mma_tile.cuh"

__global__ void WgmmaF16(uint8_t a, uint8_t b, uint16_t c, uint16_t* d) {
  __shared__ __align__(1024) uint8_t sa[8192];
  __shared__ __align__(1024) uint8_t sb[8192];
  qmx_mma::UniformTiles(sa, sb, a, b);
  uint32_t acc[2] = {c | (static_cast<uint32_t>(c) << 16), c | (static_cast<uint32_t>(c) << 16)};
  const uint64_t da = qmx_mma::WgmmaDesc(sa), db = qmx_mma::WgmmaDesc(sb);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3 {%0, %1}, %2, %3, p, 1, 1;\n}\n"
      : "+r"(acc[0]), "+r"(acc[1])
      : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < 2; ++i) {
    d[threadIdx.x * 4 + 2 * i] = static_cast<uint16_t>(acc[i] & 0xFFFF);
    d[threadIdx.x * 4 + 2 * i + 1] = static_cast<uint16_t>(acc[i] >> 16);
  }
}

int main() {
  uint16_t* d;
  cudaMalloc(&d, 512 * 2);
  const uint8_t as[] = {0x00, 0x80, 0x01, 0x08, 0x30, 0x38, 0x3B, 0x46, 0x5D, 0x7E, 0xB8, 0xFE};
  const uint8_t bs[] = {0x00, 0x01, 0x21, 0x2C, 0x38, 0x3D, 0x7E, 0xBB};
  const uint16_t cs[] = {0x0000, 0x8000, 0x0001, 0x0010, 0x03FF, 0x0400, 0x0401, 0x1C01, 0x3C00, 0x3C01, 0xBC03,
                         0x4801, 0x6800, 0x6801, 0x7000, 0x7A00, 0x7BFF, 0xFBFF, 0x7C00};
  uint16_t h[512];
  for (uint8_t a : as)
    for (uint8_t b : bs)
      for (uint16_t c : cs) {
        WgmmaF16<<<1, 128>>>(a, b, c, d);
        const cudaError_t e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
          std::printf("error %s\n", cudaGetErrorString(e));
          return 1;
        }
        bool same = true;
        for (int i = 1; i < 512; ++i) same &= h[i] == h[0];
        std::printf("f16 %02x %02x %04x -> %04x%s\n", a, b, c, h[0], same ? "" : " (outputs differ)");
      }
  return 0;
}
