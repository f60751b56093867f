// dmma_shapes.cu: the FP64 tensor-core shapes' throughput on this GPU (mma.sync f64 m8n8k4, m16n8k4, m16n8k8,
// m16n8k16): eight independent accumulator chains per warp, 4 or 8 warps a block, two blocks an SM. Which
// shape the engine's dmma kernel uses follows from it (gpu/README.md). nvcc -O3 -arch=sm_90a -o dmma_shapes
// dmma_shapes.cu && ./dmma_shapes
#include <cstdio>
#include <cuda_runtime.h>
template <int S> __global__ void K(double* out, int iters) {
  double acc[8][4] = {};
  double a[8], b[4];
  for (int i = 0; i < 8; ++i) a[i] = threadIdx.x * 1e-3 + i;
  for (int i = 0; i < 4; ++i) b[i] = threadIdx.x * 2e-3 + i;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int x = 0; x < 8; ++x) {
      if (S == 0) asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1},{%2},{%3},{%0,%1};" : "+d"(acc[x][0]), "+d"(acc[x][1]) : "d"(a[0]), "d"(b[0]));
      if (S == 1) asm volatile("mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3},{%4,%5},{%6},{%0,%1,%2,%3};" : "+d"(acc[x][0]), "+d"(acc[x][1]), "+d"(acc[x][2]), "+d"(acc[x][3]) : "d"(a[0]), "d"(a[1]), "d"(b[0]));
      if (S == 2) asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3},{%4,%5,%6,%7},{%8,%9},{%0,%1,%2,%3};" : "+d"(acc[x][0]), "+d"(acc[x][1]), "+d"(acc[x][2]), "+d"(acc[x][3]) : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
      if (S == 3) asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3},{%4,%5,%6,%7,%8,%9,%10,%11},{%12,%13,%14,%15},{%0,%1,%2,%3};" : "+d"(acc[x][0]), "+d"(acc[x][1]), "+d"(acc[x][2]), "+d"(acc[x][3]) : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]), "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
    }
  }
  double s = 0; for (auto& r : acc) for (double v : r) s += v;
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
int main() {
  double* out; cudaMalloc(&out, 1 << 24);
  const long macs[4] = {8 * 8 * 4, 16 * 8 * 4, 16 * 8 * 8, 16 * 8 * 16};
  const char* names[4] = {"m8n8k4", "m16n8k4", "m16n8k8", "m16n8k16"};
  for (int s = 0; s < 4; ++s) for (int warps : {4, 8}) {
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    const int iters = 2000, blocks = 132 * 2;
    auto launch = [&] {
      if (s == 0) K<0><<<blocks, 32 * warps>>>(out, iters);
      if (s == 1) K<1><<<blocks, 32 * warps>>>(out, iters);
      if (s == 2) K<2><<<blocks, 32 * warps>>>(out, iters);
      if (s == 3) K<3><<<blocks, 32 * warps>>>(out, iters);
    };
    launch(); cudaEventRecord(e0); launch(); cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    double flops = 2.0 * macs[s] * 8 * iters * (double)blocks * warps;
    printf("%s, %d warps/block x %d blocks: %.3f ms, %.1f TFLOP/s\n", names[s], warps, blocks, ms, flops / ms / 1e9);
  }
  return 0;
}
