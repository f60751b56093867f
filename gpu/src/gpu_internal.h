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
// Blocks of `threads` for a grid-stride loop over `count` items: enough for one item a thread, at least one,
// at most 65,535 x 16.
inline unsigned GridFor(size_t count, unsigned threads) {
  const size_t b = (count + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b == 0 ? 1 : b) : 65535 * 16);
}

// The stream an engine call's work runs on, set for the call by a StreamScope at its entry point. Inside a
// scope, device buffers come from the engine's own memory pool (cudaMallocFromPoolAsync on that stream; the
// pool keeps freed memory for the next call instead of returning it to the system) and are freed in the
// stream's order (cudaFreeAsync), their copies queued on it: a call's many short-lived buffers then cost
// neither cudaMalloc's time nor cudaFree's device-wide synchronization, and a buffer is reused only after
// the stream's earlier work on it. Outside a scope, cudaMalloc and cudaFree. Scopes nest (the innermost wins).
class StreamScope {
 public:
  explicit StreamScope(cudaStream_t stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;
  // Whether a scope is active on this thread, and its stream.
  static bool Active(cudaStream_t* stream);

 private:
  bool prev_active_;
  cudaStream_t prev_;
};
// bytes from the pool on `stream` (stream order), or cudaMalloc when pooled is false; and the matching free.
void* DeviceAlloc(size_t bytes, bool pooled, cudaStream_t stream);
void DeviceFree(void* p, bool pooled, cudaStream_t stream);
// A copy between host and device memory, ordered on `stream` and waited for when pooled, else cudaMemcpy.
void DeviceCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, bool pooled, cudaStream_t stream);

// A device allocation freed on scope exit (pooled inside a StreamScope).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() : n_(0) {}
  explicit DeviceBuffer(size_t n) : n_(n) {
    pooled_ = StreamScope::Active(&stream_);
    if (n > 0) p_ = static_cast<T*>(DeviceAlloc(n * sizeof(T), pooled_, stream_));
  }
  DeviceBuffer(const T* host, size_t n) : DeviceBuffer(n) { Upload(host, n); }
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_), pooled_(o.pooled_), stream_(o.stream_) {
    o.p_ = nullptr, o.n_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Release();
      p_ = o.p_, n_ = o.n_, pooled_ = o.pooled_, stream_ = o.stream_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  T* get() const { return p_; }
  void Upload(const T* host, size_t n) {
    if (n > 0) DeviceCopy(p_, host, n * sizeof(T), cudaMemcpyHostToDevice, pooled_, stream_);
  }
  void Download(T* host, size_t n) const {
    if (n > 0) DeviceCopy(host, p_, n * sizeof(T), cudaMemcpyDeviceToHost, pooled_, stream_);
  }

 private:
  void Release() noexcept {
    if (p_) DeviceFree(p_, pooled_, stream_);
    p_ = nullptr;
  }
  T* p_ = nullptr;
  size_t n_;
  bool pooled_ = false;
  cudaStream_t stream_ = nullptr;
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

inline bool IsFp8(const Format& f) { return f == fmt::kE4M3 || f == fmt::kE5M2; }  // by encoding, as DevFmtOf

inline unsigned Blocks(size_t n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// cuBLASLt's GEMM in `mode` (gemm_cublaslt.cu: GemmCublasLt's configuration) on device codes: a_kmajor A's M x K
// and b_kmajor B's N x K codes, K contiguous (FP4 two per byte), out M x N FP32 row-major; the scales from a's
// and b's meta (tensor_scale, or the block scales on the host). On `stream`, waited for.
void CublasLtMatmulOn(const GemmOperand& a, const GemmOperand& b, CublasMode mode, const uint8_t* a_kmajor,
                      const uint8_t* b_kmajor, float* out, void* stream, CublasAlgo* algo, int split_k);

}  // namespace qmx::gpu::detail
