// device.cu: opening the GPU, and the raw tensor-core kernel (PTX ISA mma.sync.aligned.m16n8k32 with FP8
// operands, sm_89+), which shows the MMA's arithmetic without any library's promotion policy.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "gpu_internal.h"
#include "mma_tile.cuh"
#include "qmx/gpu.h"

namespace qmx::gpu {

std::string DeviceInfo::Describe() const {
  if (!available) return "no CUDA device (" + reason + ")";
  const auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  return name + " (sm_" + std::to_string(major * 10 + minor) + "), driver " + ver(driver_version) + ", runtime " +
         ver(runtime_version) + ", cuBLASLt " + std::to_string(cublaslt_version) + ", " +
         std::to_string(memory_bytes >> 20) + " MiB";
}

const DeviceInfo& Device() {
  static const DeviceInfo info = [] {
    DeviceInfo d;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      d.reason = std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
      return d;
    }
    if (count == 0) {
      d.reason = "no CUDA device is visible";
      return d;
    }
    cudaDeviceProp p{};
    e = cudaGetDeviceProperties(&p, 0);
    if (e != cudaSuccess) {
      d.reason = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e);
      return d;
    }
    d.available = true;
    d.name = p.name;
    d.major = p.major;
    d.minor = p.minor;
    d.memory_bytes = p.totalGlobalMem;
    cudaDriverGetVersion(&d.driver_version);
    cudaRuntimeGetVersion(&d.runtime_version);
    d.cublaslt_version = static_cast<int>(cublasLtGetVersion());
    d.sm100a_code = p.major == 10 && p.minor == 0;  // sm_100a machine code runs on compute 10.0 only
    return d;
  }();
  return info;
}

void Require(const char* what, bool need_sm100a) {
  const DeviceInfo& d = Device();
  if (!d.available) throw Error(std::string(what) + ": " + d.reason);
  if (need_sm100a && !d.sm100a_code)
    throw Error(std::string(what) + " needs sm_100a (Blackwell, compute 10.0); this device is " + d.name + " (sm_" +
                std::to_string(d.major * 10 + d.minor) + ")");
}

namespace detail {
namespace {

thread_local bool scope_active = false;
thread_local cudaStream_t scope_stream = nullptr;

// The engine's memory pool on the current device, made once: device memory that stays reserved after a free
// (release threshold: never), so steady-state calls allocate without the driver.
cudaMemPool_t EnginePool() {
  static std::mutex mutex;
  static std::map<int, cudaMemPool_t> pools;
  int device = 0;
  Check(cudaGetDevice(&device), "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = pools.find(device); it != pools.end()) return it->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  Check(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  uint64_t keep = ~uint64_t{0};
  Check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  pools.emplace(device, pool);
  return pool;
}

}  // namespace

StreamScope::StreamScope(cudaStream_t stream) : prev_active_(scope_active), prev_(scope_stream) {
  scope_active = true;
  scope_stream = stream;
}
StreamScope::~StreamScope() {
  scope_active = prev_active_;
  scope_stream = prev_;
}
bool StreamScope::Active(cudaStream_t* stream) {
  if (scope_active && stream != nullptr) *stream = scope_stream;
  return scope_active;
}

void* DeviceAlloc(size_t bytes, bool pooled, cudaStream_t stream) {
  void* p = nullptr;
  if (pooled) Check(cudaMallocFromPoolAsync(&p, bytes, EnginePool(), stream), "cudaMallocFromPoolAsync");
  else Check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}
void DeviceFree(void* p, bool pooled, cudaStream_t stream) {
  if (pooled) cudaFreeAsync(p, stream);
  else cudaFree(p);
}
void DeviceCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, bool pooled, cudaStream_t stream) {
  const char* what = kind == cudaMemcpyHostToDevice ? "copy to device" : "copy to host";
  if (!pooled) {
    Check(cudaMemcpy(dst, src, bytes, kind), what);
    return;
  }
  Check(cudaMemcpyAsync(dst, src, bytes, kind, stream), what);
  Check(cudaStreamSynchronize(stream), what);
}

}  // namespace detail

DeviceMemory::DeviceMemory(size_t bytes) : bytes_(bytes) {
  Require("device memory");
  cudaStream_t s = nullptr;
  pooled_ = detail::StreamScope::Active(&s);
  stream_ = s;
  if (bytes > 0) p_ = detail::DeviceAlloc(bytes, pooled_, s);
}
DeviceMemory::~DeviceMemory() {
  if (p_) detail::DeviceFree(p_, pooled_, static_cast<cudaStream_t>(stream_));
}
void DeviceMemory::Upload(const void* host, size_t bytes) {
  if (bytes > bytes_) throw Error("DeviceMemory: an upload of " + std::to_string(bytes) + " bytes into " + std::to_string(bytes_));
  if (bytes > 0) detail::DeviceCopy(p_, host, bytes, cudaMemcpyHostToDevice, pooled_, static_cast<cudaStream_t>(stream_));
}
void DeviceMemory::Download(void* host, size_t bytes) const {
  if (bytes > bytes_) throw Error("DeviceMemory: a download of " + std::to_string(bytes) + " bytes from " + std::to_string(bytes_));
  if (bytes > 0) detail::DeviceCopy(host, p_, bytes, cudaMemcpyDeviceToHost, pooled_, static_cast<cudaStream_t>(stream_));
}

namespace {

// One warp per 16 x 8 tile of D (mma_tile.cuh holds the fragment layouts).
template <int FA, int FB>
__global__ void MmaKernel(const uint8_t* a, const uint8_t* bt, const float* c, int m, int n, int k, float* d) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int tiles_n = n / 8;
  if (warp >= (m / 16) * tiles_n) return;
  const size_t r0 = (warp / tiles_n) * 16, c0 = (warp % tiles_n) * 8;
  const size_t at = r0 * n + c0;
  qmx_mma::Fp8Tile<FA, FB>(a + r0 * k, k, bt + c0 * k, k, c ? c + at : nullptr, n, k, d + at, n);
}

int Fp8Index(const Format& f) {
  const std::string nm = f.name;
  if (nm == "e4m3") return 0;
  if (nm == "e5m2") return 1;
  throw Error(std::string("mma.sync FP8 takes e4m3 or e5m2 operands, not ") + f.name);
}

}  // namespace

std::vector<float> GemmMmaSync(const GemmOperand& a, const GemmOperand& b, const float* c_in) {
  Require("mma.sync FP8");
  const DeviceInfo& dev = Device();
  if (dev.major * 10 + dev.minor < 89) throw Error("mma.sync with FP8 operands needs sm_89 or newer");
  const int fa = Fp8Index(a.elem), fb = Fp8Index(b.elem);
  if (a.cols != b.rows) throw Error("mma.sync: A's columns (K) differ from B's rows");
  if (a.block_rows || b.block_rows || a.tensor_scale != 1.0f || b.tensor_scale != 1.0f || !a.row_scales.empty() ||
      !b.col_scales.empty())
    throw Error("mma.sync: the raw kernel takes plain codes without scales");
  const size_t m = a.rows, k = a.cols, n = b.cols;
  if (m % 16 || n % 8 || k % 32 || m == 0 || n == 0 || k == 0)
    throw Error("mma.sync: M must be a multiple of 16, N of 8 and K of 32 (got " + std::to_string(m) + " x " +
                std::to_string(n) + " x " + std::to_string(k) + ")");
  std::vector<uint8_t> bt(n * k);
  for (size_t kk = 0; kk < k; ++kk)
    for (size_t j = 0; j < n; ++j) bt[j * k + kk] = b.codes[kk * n + j];
  detail::DeviceBuffer<uint8_t> da(a.codes.data(), m * k), db(bt.data(), n * k);
  detail::DeviceBuffer<float> dd(m * n);
  std::unique_ptr<detail::DeviceBuffer<float>> dc;
  if (c_in) dc = std::make_unique<detail::DeviceBuffer<float>>(c_in, m * n);
  const size_t warps = (m / 16) * (n / 8);
  const unsigned threads = 128, blocks = detail::Blocks(warps * 32, threads);
  const float* cp = dc ? dc->get() : nullptr;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (fa == 0 && fb == 0) MmaKernel<0, 0><<<blocks, threads>>>(da.get(), db.get(), cp, mi, ni, ki, dd.get());
  if (fa == 0 && fb == 1) MmaKernel<0, 1><<<blocks, threads>>>(da.get(), db.get(), cp, mi, ni, ki, dd.get());
  if (fa == 1 && fb == 0) MmaKernel<1, 0><<<blocks, threads>>>(da.get(), db.get(), cp, mi, ni, ki, dd.get());
  if (fa == 1 && fb == 1) MmaKernel<1, 1><<<blocks, threads>>>(da.get(), db.get(), cp, mi, ni, ki, dd.get());
  detail::CheckLaunch("mma.sync kernel");
  std::vector<float> d(m * n);
  dd.Download(d.data(), m * n);
  return d;
}

}  // namespace qmx::gpu
