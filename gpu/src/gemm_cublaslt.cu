// gemm_cublaslt.cu: FP8 / block-scaled GEMMs through cuBLASLt (cublasLt.h: per-tensor scale pointers and
// fast accumulation (sm_89/90), VEC128_32F and BLK128x128_32F block scales (Hopper), VEC32_UE8M0 and
// VEC16_UE4M3 in the 128x4 tiled scale layout (Blackwell)). Operands are arranged as PyTorch's
// _scaled_mm hands them to cuBLASLt: cuBLAS's A is our B (N x K, K contiguous, TRANSA = T), cuBLAS's B
// is our A (M x K, K contiguous), D is N x M column-major, which is our M x N row-major.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine_internal.h"
#include "gpu_internal.h"
#include "qmx/convert.h"
#include "qmx/gpu.h"
#include "qmx/quantize.h"

namespace qmx::gpu {
namespace {

using detail::DeviceBuffer;
using detail::IsFp8;

const char* StatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "see cublas_api.h";
  }
}

void CheckLt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLASLt: ") + what + " failed with status " + std::to_string(static_cast<int>(s)) +
                " (" + StatusName(s) + ")");
}

struct LtHandle {
  cublasLtHandle_t h = nullptr;
  LtHandle() { CheckLt(cublasLtCreate(&h), "cublasLtCreate"); }
  ~LtHandle() { cublasLtDestroy(h); }
};
struct LtDesc {
  cublasLtMatmulDesc_t d = nullptr;
  explicit LtDesc(cublasComputeType_t compute = CUBLAS_COMPUTE_32F, cudaDataType scale = CUDA_R_32F) {
    CheckLt(cublasLtMatmulDescCreate(&d, compute, scale), "cublasLtMatmulDescCreate");
  }
  ~LtDesc() { cublasLtMatmulDescDestroy(d); }
  template <typename T>
  void Set(cublasLtMatmulDescAttributes_t a, const T& v, const char* what) {
    CheckLt(cublasLtMatmulDescSetAttribute(d, a, &v, sizeof(v)), what);
  }
};
struct LtLayout {
  cublasLtMatrixLayout_t l = nullptr;
  LtLayout(cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld) {
    CheckLt(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  }
  ~LtLayout() { cublasLtMatrixLayoutDestroy(l); }
};
struct LtPref {
  cublasLtMatmulPreference_t p = nullptr;
  explicit LtPref(size_t ws) {
    CheckLt(cublasLtMatmulPreferenceCreate(&p), "cublasLtMatmulPreferenceCreate");
    CheckLt(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
            "workspace preference");
  }
  ~LtPref() { cublasLtMatmulPreferenceDestroy(p); }
};

// The workspace every GEMM here offers cuBLASLt, and the heuristic's first algorithm for D = A * B with it.
constexpr size_t kWorkspaceBytes = size_t{64} << 20;
cublasLtMatmulHeuristicResult_t FirstAlgorithm(const LtHandle& h, const LtDesc& desc, const LtLayout& a, const LtLayout& b,
                                               const LtLayout& d, const std::string& what) {
  LtPref pref(kWorkspaceBytes);
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  CheckLt(cublasLtMatmulAlgoGetHeuristic(h.h, desc.d, a.l, b.l, d.l, d.l, pref.p, 1, &heur, &found),
          "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) throw Error("cuBLASLt found no algorithm for " + what);
  return heur;
}

cudaDataType ElemType(const Format& f) {
  const std::string n = f.name;
  if (n == "e4m3") return CUDA_R_8F_E4M3;
  if (n == "e5m2") return CUDA_R_8F_E5M2;
  if (n == "e2m1") return CUDA_R_4F_E2M1;
  throw Error(std::string("cuBLASLt: no element type for ") + f.name + " here (e4m3, e5m2, e2m1)");
}


// Element codes of an operand in cuBLAS's K-contiguous order (rows of `outer`, each K long), packed two per
// byte (element 0 in the low nibble) for FP4.
std::vector<uint8_t> KMajor(const GemmOperand& o, bool is_b, size_t& bytes) {
  const size_t outer = is_b ? o.cols : o.rows, k = is_b ? o.rows : o.cols;
  const auto at = [&](size_t r, size_t kk) { return is_b ? o.codes[kk * o.cols + r] : o.codes[r * o.cols + kk]; };
  const bool fp4 = std::string(o.elem.name) == "e2m1";
  bytes = fp4 ? outer * k / 2 : outer * k;
  std::vector<uint8_t> v(bytes);
  for (size_t r = 0; r < outer; ++r)
    for (size_t kk = 0; kk < k; ++kk) {
      if (fp4) v[(r * k + kk) / 2] |= static_cast<uint8_t>((at(r, kk) & 0xF) << ((kk % 2) * 4));
      else v[r * k + kk] = at(r, kk);
    }
  return v;
}

}  // namespace

static_assert(CublasAlgo::kReduceInComputeType == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, "cublasLt.h's value");

const char* CublasModeName(CublasMode m) {
  switch (m) {
    case CublasMode::kTensorwise: return "tensorwise";
    case CublasMode::kTensorwiseFast: return "tensorwise-fast";
    case CublasMode::kBlockwise: return "blockwise";
    case CublasMode::kBlockwiseVec: return "blockwise-vec";
    case CublasMode::kMx: return "mx";
    case CublasMode::kNvfp4: return "nvfp4";
  }
  return "?";
}

CublasMode ParseCublasMode(const std::string& s) {
  for (CublasMode m : {CublasMode::kTensorwise, CublasMode::kTensorwiseFast, CublasMode::kBlockwise,
                       CublasMode::kBlockwiseVec, CublasMode::kMx, CublasMode::kNvfp4})
    if (s == CublasModeName(m)) return m;
  throw Error("unknown cuBLASLt mode '" + s + "' (tensorwise, tensorwise-fast, blockwise, blockwise-vec, mx, nvfp4)");
}

std::string CublasModeModel(CublasMode m, const DeviceInfo& dev) {
  const bool hopper = dev.major == 9;
  switch (m) {
    case CublasMode::kTensorwise: return hopper ? "hopper-fp8" : "";
    case CublasMode::kTensorwiseFast: return hopper ? "hopper-fp8-fast" : "";
    case CublasMode::kBlockwise: return hopper ? "hopper-fp8" : "";
    case CublasMode::kBlockwiseVec: return hopper ? "hopper-fp8-vec" : "";
    case CublasMode::kMx: return dev.major == 10 ? "blackwell-mxf8f6f4" : "";
    case CublasMode::kNvfp4: return dev.major == 10 ? "blackwell-mxf4nvf4" : "";
  }
  return "";
}

std::string CublasSupport(CublasMode mode, const GemmOperand& a, const GemmOperand& b) {
  const std::string what = std::string("cuBLASLt ") + CublasModeName(mode);
  const DeviceInfo& d = Device();
  if (!d.available) return what + ": " + d.reason;
  const int sm = d.major * 10 + d.minor;
  if (a.cols != b.rows) return what + ": A's columns (K) differ from B's rows";
  if (!a.row_scales.empty() || !a.col_scales.empty() || !b.row_scales.empty() || !b.col_scales.empty())
    return what + ": row-scaled operands (a second-level scale per row) are not run on cuBLASLt here";
  const size_t m = a.rows, k = a.cols, n = b.cols;
  if (m % 16 || n % 16 || k % 32 || m == 0 || n == 0 || k == 0)
    return what + ": M and N must be multiples of 16 and K of 32";
  switch (mode) {
    case CublasMode::kTensorwise:
    case CublasMode::kTensorwiseFast:
      if (sm < 89 || sm >= 100) return what + ": per-tensor FP8 scaling with fast accumulation is an sm_89/sm_90 mode";
      if (!IsFp8(a.elem) || !IsFp8(b.elem)) return what + ": FP8 operands only";
      if (std::string(a.elem.name) == "e5m2" && std::string(b.elem.name) == "e5m2")
        return what + ": cuBLASLt has no e5m2 x e5m2 FP8 GEMM";
      if (a.block_rows || b.block_rows) return what + ": per-tensor scales only";
      return "";
    case CublasMode::kBlockwise:
    case CublasMode::kBlockwiseVec:
      if (d.major != 9) return what + ": VEC128_32F / BLK128x128_32F scales are a Hopper (sm_90) mode here";
      if (!IsFp8(a.elem) || !IsFp8(b.elem)) return what + ": FP8 operands only";
      if (a.block_rows != 1 || a.block_cols != 128) return what + ": A needs 1x128 FP32 block scales";
      if (mode == CublasMode::kBlockwise && (b.block_rows != 128 || b.block_cols != 128))
        return what + ": B needs 128x128 FP32 block scales";
      if (mode == CublasMode::kBlockwiseVec && (b.block_rows != 128 || b.block_cols != 1))
        return what + ": B needs 128x1 (1x128 along K) FP32 block scales";
      if (m % 128 || n % 128 || k % 128) return what + ": M, N and K must be multiples of 128";
      return "";
    case CublasMode::kMx:
    case CublasMode::kNvfp4: {
      if (!d.sm100a_code) return what + ": block-scaled MMA needs Blackwell (sm_100); this device is sm_" + std::to_string(sm);
      const size_t blk = mode == CublasMode::kMx ? 32 : 16;
      if (a.block_rows != 1 || a.block_cols != blk || b.block_rows != blk || b.block_cols != 1)
        return what + ": A needs 1x" + std::to_string(blk) + " and B " + std::to_string(blk) + "x1 block scales";
      if (mode == CublasMode::kNvfp4 && (std::string(a.elem.name) != "e2m1" || std::string(b.elem.name) != "e2m1"))
        return what + ": E2M1 operands only";
      if (mode == CublasMode::kMx) {
        const bool fp4a = std::string(a.elem.name) == "e2m1", fp4b = std::string(b.elem.name) == "e2m1";
        if (fp4a != fp4b) return what + ": MXFP4 needs E2M1 on both sides";
        if (!fp4a && (!IsFp8(a.elem) || !IsFp8(b.elem))) return what + ": MXFP8 or MXFP4 operands (MXFP6 packing is not implemented)";
      }
      if (k % 128) return what + ": K must be a multiple of 128";
      return "";
    }
  }
  return what + ": unknown mode";
}

namespace detail {

void CublasLtMatmulOn(const GemmOperand& a, const GemmOperand& b, CublasMode mode, const uint8_t* a_kmajor,
                      const uint8_t* b_kmajor, float* out, void* stream_ptr, CublasAlgo* algo, int split_k) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (std::string why = CublasSupport(mode, a, b); !why.empty()) throw Error(why);
  if (split_k < 0) throw Error("cuBLASLt: split_k must be 0 (the heuristic's choice) or a positive count");
  const size_t m = a.rows, k = a.cols, n = b.cols;
  LtHandle h;
  LtDesc desc;
  const cublasOperation_t tr = CUBLAS_OP_T, nt = CUBLAS_OP_N;
  desc.Set(CUBLASLT_MATMUL_DESC_TRANSA, tr, "TRANSA");
  desc.Set(CUBLASLT_MATMUL_DESC_TRANSB, nt, "TRANSB");
  float alpha = 1.0f;
  const float beta = 0.0f;
  std::unique_ptr<DeviceBuffer<float>> s_lt_a, s_lt_b;      // FP32 scales for cuBLAS's A (our B) and B (our A)
  std::unique_ptr<DeviceBuffer<uint8_t>> s8_lt_a, s8_lt_b;  // block scale bytes
  const void* scale_a = nullptr;  // what the scale pointers of cuBLAS's A and B point at
  const void* scale_b = nullptr;
  int32_t scale_mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  int32_t scale_mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  switch (mode) {
    case CublasMode::kTensorwise:
    case CublasMode::kTensorwiseFast: {
      s_lt_a = std::make_unique<DeviceBuffer<float>>(&b.tensor_scale, 1);
      s_lt_b = std::make_unique<DeviceBuffer<float>>(&a.tensor_scale, 1);
      scale_a = s_lt_a->get();
      scale_b = s_lt_b->get();
      const int8_t fast = mode == CublasMode::kTensorwiseFast ? 1 : 0;
      desc.Set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast, "fast accumulation");
      break;
    }
    case CublasMode::kBlockwise:
    case CublasMode::kBlockwiseVec: {
      const size_t kb = k / 128;
      std::vector<float> sa(kb * m), sb;
      for (size_t r = 0; r < m; ++r)
        for (size_t j = 0; j < kb; ++j) sa[j * m + r] = a.scales[r * a.scale_cols + j];  // outer (M) contiguous
      if (mode == CublasMode::kBlockwise) {
        // K blocks contiguous, each N block's run padded to a multiple of 4 (what cuBLASLt reads: PyTorch's
        // _scaled_mm pads them so). Unpadded, the N blocks past the first few read the wrong scales, or past
        // the buffer, wherever K / 128 is not a multiple of 4 (found by QMX_ENGINE_CHECK at K = 256).
        const size_t nb = n / 128, kb4 = (kb + 3) / 4 * 4;
        sb.assign(nb * kb4, 0.0f);
        for (size_t j = 0; j < kb; ++j)
          for (size_t c = 0; c < nb; ++c) sb[c * kb4 + j] = b.scales[j * b.scale_cols + c];
      } else {
        sb.resize(kb * n);
        for (size_t j = 0; j < kb; ++j)
          for (size_t c = 0; c < n; ++c) sb[j * n + c] = b.scales[j * b.scale_cols + c];  // outer (N) contiguous
      }
      s_lt_a = std::make_unique<DeviceBuffer<float>>(sb.data(), sb.size());
      s_lt_b = std::make_unique<DeviceBuffer<float>>(sa.data(), sa.size());
      scale_a = s_lt_a->get();
      scale_b = s_lt_b->get();
      scale_mode_a = mode == CublasMode::kBlockwise ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                    : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      scale_mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      break;
    }
    case CublasMode::kMx:
    case CublasMode::kNvfp4: {
      const size_t blk = mode == CublasMode::kMx ? 32 : 16, kb = k / blk;
      const auto byte_of = [&](float s) -> uint8_t {
        if (mode == CublasMode::kMx) {
          if (std::isnan(s)) return 0xFF;
          int e = 0;
          std::frexp(s, &e);
          return static_cast<uint8_t>(e - 1 + 127);
        }
        uint8_t c = 0;
        ConvertToCodes(DType::kF32, &s, 1, fmt::kE4M3, CastOptions{}, &c);
        return c;
      };
      const auto tiled = [&](const GemmOperand& o, bool is_b, size_t outer) {
        std::vector<uint8_t> t(((outer + 127) / 128) * 128 * ((kb + 3) / 4) * 4, 0);
        for (size_t r = 0; r < outer; ++r)
          for (size_t j = 0; j < kb; ++j)
            t[CublasTiledIndex(r, j, kb)] = byte_of(is_b ? o.scales[j * o.scale_cols + r] : o.scales[r * o.scale_cols + j]);
        return t;
      };
      const std::vector<uint8_t> ta = tiled(b, true, n), tb = tiled(a, false, m);
      s8_lt_a = std::make_unique<DeviceBuffer<uint8_t>>(ta.data(), ta.size());
      s8_lt_b = std::make_unique<DeviceBuffer<uint8_t>>(tb.data(), tb.size());
      scale_a = s8_lt_a->get();
      scale_b = s8_lt_b->get();
      scale_mode_a = scale_mode_b = mode == CublasMode::kMx ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0
                                                            : CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
      alpha = a.tensor_scale * b.tensor_scale;  // NVFP4's second-level scales
      break;
    }
  }
  if (scale_mode_b != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) {  // per-tensor scaling keeps the default modes
    desc.Set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, scale_mode_a, "A scale mode");
    desc.Set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, scale_mode_b, "B scale mode");
  }
  desc.Set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_a, "A scale pointer");
  desc.Set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_b, "B scale pointer");
  LtLayout la(ElemType(b.elem), k, n, static_cast<int64_t>(k));
  LtLayout lb(ElemType(a.elem), k, m, static_cast<int64_t>(k));
  LtLayout lc(CUDA_R_32F, n, m, static_cast<int64_t>(n));
  DeviceBuffer<uint8_t> ws(kWorkspaceBytes);
  cublasLtMatmulHeuristicResult_t heur = FirstAlgorithm(h, desc, la, lb, lc, CublasModeName(mode));
  if (split_k > 0) {  // the same kernel, another numSplitsK (and, when split, the FP32 reduction)
    const uint32_t scheme = split_k > 1 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_NONE;
    const int32_t splits = split_k;
    CheckLt(cublasLtMatmulAlgoConfigSetAttribute(&heur.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)),
            "setting numSplitsK");
    CheckLt(cublasLtMatmulAlgoConfigSetAttribute(&heur.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme)),
            "setting the reduction scheme");
    cublasLtMatmulHeuristicResult_t checked{};
    const cublasStatus_t s = cublasLtMatmulAlgoCheck(h.h, desc.d, la.l, lb.l, lc.l, lc.l, &heur.algo, &checked);
    if (s != CUBLAS_STATUS_SUCCESS || checked.workspaceSize > kWorkspaceBytes)
      throw Error("cuBLASLt: the heuristic's algorithm for " + std::string(CublasModeName(mode)) + " does not run with numSplitsK = " +
                  std::to_string(split_k) + " on " + std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k) +
                  " (cublasLtMatmulAlgoCheck status " + std::to_string(static_cast<int>(s)) + ", " + StatusName(s) + ")");
  }
  if (algo != nullptr) {
    const auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attr, auto& v, const char* what) {
      size_t written = 0;
      CheckLt(cublasLtMatmulAlgoConfigGetAttribute(&heur.algo, attr, &v, sizeof(v), &written), what);
    };
    *algo = CublasAlgo{};
    get(CUBLASLT_ALGO_CONFIG_ID, algo->id, "reading the algorithm id");
    get(CUBLASLT_ALGO_CONFIG_TILE_ID, algo->tile, "reading the tile");
    get(CUBLASLT_ALGO_CONFIG_STAGES_ID, algo->stages, "reading the stages");
    get(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, algo->split_k, "reading numSplitsK");
    get(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, algo->reduction, "reading the reduction scheme");
  }
  CheckLt(cublasLtMatmul(h.h, desc.d, &alpha, b_kmajor, la.l, a_kmajor, lb.l, &beta, out, lc.l, out, lc.l, &heur.algo,
                         ws.get(), kWorkspaceBytes, stream),
          "cublasLtMatmul");
  // The scales and the workspace are freed on return: the GEMM must be done.
  Check(cudaStreamSynchronize(stream), "cuBLASLt GEMM");
}

bool DenseDgemm(size_t m, size_t n, size_t k, const double* a, const double* b, double* d, bool accumulate,
                void* stream) {
  // Row-major D = A B is column-major D^T = B^T A^T: B's K x N rows as an N x K column-major matrix (ld N), A's as
  // K x M (ld K). One handle for the process (cuBLASLt handles are not tied to a stream); no workspace.
  static LtHandle* const h = new LtHandle();
  LtDesc desc(CUBLAS_COMPUTE_64F, CUDA_R_64F);
  LtLayout la(CUDA_R_64F, n, k, static_cast<int64_t>(n)), lb(CUDA_R_64F, k, m, static_cast<int64_t>(k)),
      ld(CUDA_R_64F, n, m, static_cast<int64_t>(n));
  LtPref pref(0);
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  CheckLt(cublasLtMatmulAlgoGetHeuristic(h->h, desc.d, la.l, lb.l, ld.l, ld.l, pref.p, 1, &heur, &found),
          "cublasLtMatmulAlgoGetHeuristic (FP64)");
  if (found == 0) return false;
  const double alpha = 1.0, beta = accumulate ? 1.0 : 0.0;
  CheckLt(cublasLtMatmul(h->h, desc.d, &alpha, b, la.l, a, lb.l, &beta, d, ld.l, d, ld.l, &heur.algo, nullptr, 0,
                         static_cast<cudaStream_t>(stream)),
          "cublasLtMatmul (FP64)");
  return true;
}

}  // namespace detail

std::vector<float> GemmCublasLt(const GemmOperand& a, const GemmOperand& b, CublasMode mode, CublasAlgo* algo,
                                int split_k) {
  if (std::string why = CublasSupport(mode, a, b); !why.empty()) throw Error(why);
  size_t a_bytes = 0, b_bytes = 0;
  const std::vector<uint8_t> ak = KMajor(a, false, a_bytes), bk = KMajor(b, true, b_bytes);
  DeviceBuffer<uint8_t> da(ak.data(), a_bytes), db(bk.data(), b_bytes);
  DeviceBuffer<float> dd(a.rows * b.cols);
  detail::CublasLtMatmulOn(a, b, mode, da.get(), db.get(), dd.get(), nullptr, algo, split_k);
  std::vector<float> d(a.rows * b.cols);
  dd.Download(d.data(), d.size());
  return d;
}


double Bf16GemmSeconds(size_t m, size_t n, size_t k, int reps) {
  Require("the BF16 cuBLASLt baseline");
  if (m == 0 || n == 0 || k == 0 || reps < 1) throw Error("the BF16 baseline needs M, N, K and reps of at least 1");
  // Column-major D (m x n) = A (m x k) * B (k x n), BF16 in and out, FP32 accumulation: torch.matmul's GEMM.
  // The operands hold 0x3C3C (about 0.0115) everywhere: nonzero data, as all-zero operands run faster.
  DeviceBuffer<uint16_t> a(m * k), b(k * n), d(m * n);
  detail::Check(cudaMemset(a.get(), 0x3C, m * k * 2), "cudaMemset");
  detail::Check(cudaMemset(b.get(), 0x3C, k * n * 2), "cudaMemset");
  LtHandle h;
  LtDesc desc;
  LtLayout la(CUDA_R_16BF, m, k, static_cast<int64_t>(m)), lb(CUDA_R_16BF, k, n, static_cast<int64_t>(k)),
      ld(CUDA_R_16BF, m, n, static_cast<int64_t>(m));
  DeviceBuffer<uint8_t> ws(kWorkspaceBytes);
  const cublasLtMatmulHeuristicResult_t heur = FirstAlgorithm(h, desc, la, lb, ld, "a BF16 GEMM of this shape");
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    CheckLt(cublasLtMatmul(h.h, desc.d, &alpha, a.get(), la.l, b.get(), lb.l, &beta, d.get(), ld.l, d.get(), ld.l,
                           &heur.algo, ws.get(), kWorkspaceBytes, 0),
            "cublasLtMatmul (BF16)");
  };
  run();
  detail::CheckLaunch("BF16 GEMM");
  const detail::EventPair ev;
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    detail::Check(cudaEventRecord(ev.start), "cudaEventRecord");
    run();
    detail::Check(cudaEventRecord(ev.stop), "cudaEventRecord");
    detail::Check(cudaEventSynchronize(ev.stop), "cudaEventSynchronize");
    times.push_back(ev.Seconds());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace qmx::gpu
