// mma_tile.cuh: one warp's 16 x 8 FP32 tile D = A B + C through a chain of FP8 mma.sync.m16n8k32 instructions
// (PTX ISA 9.7.14.5), the accumulator in registers between them. The backend's MmaKernel (device.cu) and the
// standalone probes (gpu/probes) share it, so that what the probes measure is the kernel the backend runs.
// Also the BF16 MMA and the shared-memory helpers of the engine's tensor-core kernels (engine_fp4.cu,
// engine_dmma.cu), and the wgmma probes' descriptors (gpu/probes).
#pragma once

#include <cstddef>
#include <cstdint>

namespace qmx_mma {

__device__ inline uint32_t Load4(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// d += a b on the BF16 tensor core, FP32 accumulation: D (16 x 8) = A (16 x 16, row) B (16 x 8, col). Lane l holds
// g = l / 4, t = l % 4: A (g, 2t..2t+1), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..); B (k 2t..2t+1, column g),
// (k 2t + 8.., g); D (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
__device__ inline void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline unsigned SharedAddr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// 16 bytes from global to shared memory, asynchronously; zeros where `in` is false.
__device__ inline void CpAsync16(void* smem, const void* gmem, bool in) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(SharedAddr(smem)), "l"(gmem), "r"(in ? 16 : 0));
}

// The tile whose A rows start at a (16 rows, k codes each, row stride lda), B columns at bt (8 columns, K
// contiguous, stride ldb); C (may be null: zeros) and D are 16 x 8 at c and d with row strides ldc, ldd.
// FA, FB: 0 for e4m3, 1 for e5m2. k is a multiple of 32. Lane l holds g = l / 4, t = l % 4; A registers:
// (g, 4t..4t+3), (g+8, ..), (g, 16+4t..), (g+8, 16+4t..); B registers: k = 4t..4t+3 and 16+4t.. of column
// g; C/D: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
template <int FA, int FB>
__device__ inline void Fp8Tile(const uint8_t* a, size_t lda, const uint8_t* bt, size_t ldb, const float* c,
                               size_t ldc, int k, float* d, size_t ldd) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rows[4] = {g, g, g + 8, g + 8};
  const int cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = c ? c[rows[i] * ldc + cols[i]] : 0.0f;
  const uint8_t* ar0 = a + g * lda;
  const uint8_t* ar1 = a + (g + 8) * lda;
  const uint8_t* bc = bt + g * ldb;
  for (int k0 = 0; k0 < k; k0 += 32) {
    const uint32_t a0 = Load4(ar0 + k0 + 4 * t), a1 = Load4(ar1 + k0 + 4 * t);
    const uint32_t a2 = Load4(ar0 + k0 + 16 + 4 * t), a3 = Load4(ar1 + k0 + 16 + 4 * t);
    const uint32_t b0 = Load4(bc + k0 + 4 * t), b1 = Load4(bc + k0 + 16 + 4 * t);
#define QMX_MMA(TA, TB)                                                                                      \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." TA "." TB ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, " \
               "{%8, %9}, {%0, %1, %2, %3};"                                                                \
               : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])                                     \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
    if (FA == 0 && FB == 0) QMX_MMA("e4m3", "e4m3");
    if (FA == 0 && FB == 1) QMX_MMA("e4m3", "e5m2");
    if (FA == 1 && FB == 0) QMX_MMA("e5m2", "e4m3");
    if (FA == 1 && FB == 1) QMX_MMA("e5m2", "e5m2");
#undef QMX_MMA
  }
  for (int i = 0; i < 4; ++i) d[rows[i] * ldd + cols[i]] = acc[i];
}

// A wgmma shared-memory matrix descriptor for the probes' uniform tiles: start address, leading and stride
// byte offsets of 128 bytes (>> 4), no swizzle.
__device__ inline uint64_t WgmmaDesc(const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return (static_cast<uint64_t>((addr >> 4) & 0x3FFF)) | (static_cast<uint64_t>(128 >> 4) << 16) |
         (static_cast<uint64_t>(128 >> 4) << 32);
}

// Fills both 8 KiB operand tiles with one code each (so the layout the descriptors describe does not matter)
// and makes them visible to the asynchronous proxy, as the wgmma probes need before they issue.
__device__ inline void UniformTiles(uint8_t* sa, uint8_t* sb, uint8_t a, uint8_t b) {
  for (int i = threadIdx.x; i < 8192; i += blockDim.x) sa[i] = a, sb[i] = b;
  __syncthreads();
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace qmx_mma
