// gpu_internal.h: what the CUDA backend's sources share: error checks and device buffers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "qmx/error.h"
#include "qmx/format.h"
#include "qmx/gpu.h"

namespace qmx::gpu::detail {

inline void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}
inline void CheckLaunch(const char* what) {
  Check(cudaGetLastError(), what);
  Check(cudaDeviceSynchronize(), what);
}

// A device allocation freed on scope exit.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() : n_(0) {}
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n > 0) Check(cudaMalloc(&p_, n * sizeof(T)), "cudaMalloc");
  }
  DeviceBuffer(const T* host, size_t n) : DeviceBuffer(n) { Upload(host, n); }
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (p_) cudaFree(p_);
      p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  T* get() const { return p_; }
  void Upload(const T* host, size_t n) {
    if (n > 0) Check(cudaMemcpy(p_, host, n * sizeof(T), cudaMemcpyHostToDevice), "copy to device");
  }
  void Download(T* host, size_t n) const {
    if (n > 0) Check(cudaMemcpy(host, p_, n * sizeof(T), cudaMemcpyDeviceToHost), "copy to host");
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

// Two CUDA events destroyed on scope exit (an exception between them leaks neither); Seconds() is the time
// between the records of start and stop, which must have been recorded; it waits for stop to complete.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    Check(cudaEventCreate(&start), "cudaEventCreate");
    Check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  double Seconds() const {
    float ms = 0;
    Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return ms * 1e-3;
  }
};

inline bool IsFp8(const Format& f) { return std::string(f.name) == "e4m3" || std::string(f.name) == "e5m2"; }

inline unsigned Blocks(size_t n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// cuBLASLt's GEMM in `mode` (gemm_cublaslt.cu: GemmCublasLt's configuration) on device codes: a_kmajor A's M x K
// and b_kmajor B's N x K codes, K contiguous (FP4 two per byte), out M x N FP32 row-major; the scales from a's
// and b's meta (tensor_scale, or the block scales on the host). On `stream`, waited for.
void CublasLtMatmulOn(const GemmOperand& a, const GemmOperand& b, CublasMode mode, const uint8_t* a_kmajor,
                      const uint8_t* b_kmajor, float* out, void* stream, CublasAlgo* algo, int split_k);

}  // namespace qmx::gpu::detail
