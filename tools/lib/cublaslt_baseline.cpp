#include "lib/cublaslt_baseline.hpp"

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "lib/device_buffer.hpp"

namespace finegemm::tools {
namespace detail {

[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line) {
  std::ostringstream os;
  os << file << ":" << line << ": cuBLAS error " << cublas_status_text(st) << " in `" << expr << "`";
  throw std::runtime_error(os.str());
}

}  // namespace detail

std::string cublas_status_text(cublasStatus_t st) {
  const char* name = cublasLtGetStatusName(st);
  const char* text = cublasLtGetStatusString(st);
  std::ostringstream os;
  os << (name != nullptr ? name : "CUBLAS_STATUS_?") << " (" << static_cast<int>(st) << ": "
     << (text != nullptr ? text : "?") << ")";
  return os.str();
}

std::vector<float> sa_kmajor_to_cublaslt(const float* sa_kmajor, int64_t m, int64_t kb) {
  if (m < 0 || kb < 0) throw std::invalid_argument("sa_kmajor_to_cublaslt: negative dimension");
  if (m * kb > 0 && sa_kmajor == nullptr) throw std::invalid_argument("sa_kmajor_to_cublaslt: null input");
  std::vector<float> out(static_cast<size_t>(m * kb));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < kb; ++j) out[static_cast<size_t>(j * m + i)] = sa_kmajor[i * kb + j];
  return out;
}

namespace {

constexpr uint64_t kMaxWorkspaceBytes = 64ull << 20;
constexpr size_t kMinCublasLtVersion = 120900;  // VEC128_32F / BLK128x128_32F scale modes appeared in cuBLAS 12.9

// Largest power of two (capped at 256, the cuBLASLt default preference) dividing the pointer's address.
uint32_t pointer_alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a >>= 1;
  return a;
}

template <class T>
std::string algo_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS)
    return "?";
  return std::to_string(static_cast<long long>(v));
}

}  // namespace

struct CublasLtBlockFp8::Impl {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  const float* sa = nullptr;
  const void* b = nullptr;
  const float* sb = nullptr;
  void* d = nullptr;
  Mode mode;

  bool supported = false;
  std::string reason;

  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr;  // cuBLAS A = our B
  cublasLtMatrixLayout_t layout_b = nullptr;  // cuBLAS B = our A
  cublasLtMatrixLayout_t layout_d = nullptr;  // cuBLAS C and D = our D
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic{};
  DeviceBuffer workspace;
  size_t version = 0;

  // Weight scales as cuBLASLt reads them: [NB][sb_ld] row-major with sb_ld = align(KB, 4) (16-byte rows). When
  // KB % 4 != 0 the caller's [NB][KB] tensor is repacked into sb_packed; otherwise sb is used in place.
  int64_t kb = 0, nb = 0, sb_ld = 0;
  DeviceBuffer sb_packed;
  const float* sb_used = nullptr;

  ~Impl() {
    // Destruction order: descriptors, then the handle. Errors cannot be reported from a destructor.
    if (pref != nullptr) (void)cublasLtMatmulPreferenceDestroy(pref);
    if (layout_d != nullptr) (void)cublasLtMatrixLayoutDestroy(layout_d);
    if (layout_b != nullptr) (void)cublasLtMatrixLayoutDestroy(layout_b);
    if (layout_a != nullptr) (void)cublasLtMatrixLayoutDestroy(layout_a);
    if (op != nullptr) (void)cublasLtMatmulDescDestroy(op);
    if (handle != nullptr) (void)cublasLtDestroy(handle);
  }

  std::string shape() const {
    std::ostringstream os;
    os << "M=" << m << " N=" << n << " K=" << k << (mode.sb_per_row ? " SB 1x128" : "")
       << (mode.f32_accumulate ? " fp32 D += A x B^T" : "");
    return os.str();
  }

  void refuse(const std::string& why) {
    supported = false;
    reason = why;
  }

  template <class T>
  void set_desc(cublasLtMatmulDescAttributes_t attr, const T& value, const char* what) {
    const cublasStatus_t st = cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof(value));
    if (st != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("CublasLtBlockFp8 (" + shape() + "): cublasLtMatmulDescSetAttribute(" + what +
                               ") failed: " + cublas_status_text(st));
  }
  // Scale-mode attributes: an older or different cuBLASLt may not know them; that means "unsupported", not a bug.
  bool set_scale_mode(cublasLtMatmulDescAttributes_t attr, int32_t mode, const char* what) {
    const cublasStatus_t st = cublasLtMatmulDescSetAttribute(op, attr, &mode, sizeof(mode));
    if (st != CUBLAS_STATUS_SUCCESS) {
      refuse(std::string("cuBLASLt rejected ") + what + ": " + cublas_status_text(st));
      return false;
    }
    return true;
  }
  template <class T>
  void set_pref(cublasLtMatmulPreferenceAttributes_t attr, const T& value, const char* what) {
    const cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value));
    if (st != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("CublasLtBlockFp8 (" + shape() + "): cublasLtMatmulPreferenceSetAttribute(" + what +
                               ") failed: " + cublas_status_text(st));
  }
  void create_layout(cublasLtMatrixLayout_t* layout, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                     const char* what) {
    const cublasStatus_t st =
        cublasLtMatrixLayoutCreate(layout, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld);
    if (st != CUBLAS_STATUS_SUCCESS) {
      *layout = nullptr;
      std::ostringstream os;
      os << "CublasLtBlockFp8 (" << shape() << "): cublasLtMatrixLayoutCreate(" << what << ", " << rows << " x "
         << cols << ", ld " << ld << ") failed: " << cublas_status_text(st);
      throw std::runtime_error(os.str());
    }
  }

  // Enqueues the [NB][KB] -> [NB][sb_ld] copy of the weight scales on `s` (only when a repack is needed).
  void repack_scales(cudaStream_t s) {
    if (sb_packed.empty()) return;
    const size_t row = static_cast<size_t>(kb) * sizeof(float);
    const cudaError_t err = cudaMemcpy2DAsync(sb_packed.get(), static_cast<size_t>(sb_ld) * sizeof(float), sb, row,
                                              row, static_cast<size_t>(nb), cudaMemcpyDeviceToDevice, s);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      std::ostringstream os;
      os << "CublasLtBlockFp8 (" << shape() << "): repacking the weight scales [" << nb << "][" << kb << "] -> ["
         << nb << "][" << sb_ld << "] (cudaMemcpy2DAsync) failed: " << cudaGetErrorName(err) << " ("
         << cudaGetErrorString(err) << ")";
      throw std::runtime_error(os.str());
    }
  }

  void build() {
    // ---- Preconditions that make the problem unsupported (not errors) -------------------------------------------
    if (m == 0 || n == 0 || k == 0) return refuse("empty problem (" + shape() + ")");
    version = cublasLtGetVersion();
    if (version < kMinCublasLtVersion)
      return refuse("cuBLASLt " + std::to_string(version) +
                    " predates block-scaled FP8 (VEC128_32F / BLK128x128_32F need cuBLAS >= 12.9)");
    if (m % 4 != 0)
      return refuse("cuBLASLt block-scaled FP8 requires M % 4 == 0 (the VEC128_32F activation-scale rows of M floats "
                    "must be 16-byte aligned); got " + shape());
    kb = (k + 127) / 128;
    nb = (n + 127) / 128;
    // 1x128 scales of B are read as they are ([KB][N]); 128x128 ones with rows padded to align(KB, 4).
    sb_ld = mode.sb_per_row ? kb : (kb + 3) / 4 * 4;
    if (mode.sb_per_row && n % 4 != 0)
      return refuse("cuBLASLt 1x128 scales of B need N % 4 == 0 (rows of N floats, 16-byte aligned); got " + shape());
    if (reinterpret_cast<uintptr_t>(sa) % 16 != 0)
      return refuse("the activation-scale pointer must be 16-byte aligned for cuBLASLt block scaling");
    if (sb_ld == kb && reinterpret_cast<uintptr_t>(sb) % 16 != 0)
      return refuse("the weight-scale pointer must be 16-byte aligned for cuBLASLt block scaling");

    // ---- Handle and descriptors -----------------------------------------------------------------------------------
    FG_CUBLAS_CHECK(cublasLtCreate(&handle));
    {
      const cublasStatus_t st = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
      if (st != CUBLAS_STATUS_SUCCESS) {
        op = nullptr;
        throw std::runtime_error("CublasLtBlockFp8 (" + shape() +
                                 "): cublasLtMatmulDescCreate(CUBLAS_COMPUTE_32F, CUDA_R_32F) failed: " +
                                 cublas_status_text(st));
      }
    }
    const int32_t trans_a = CUBLAS_OP_T;  // cuBLAS A = our B [N, K] row-major = K x N column-major; op(A) = N x K
    const int32_t trans_b = CUBLAS_OP_N;  // cuBLAS B = our A [M, K] row-major = K x M column-major; op(B) = K x M
    set_desc(CUBLASLT_MATMUL_DESC_TRANSA, trans_a, "TRANSA = CUBLAS_OP_T");
    set_desc(CUBLASLT_MATMUL_DESC_TRANSB, trans_b, "TRANSB = CUBLAS_OP_N");
    const int8_t fast_accum = 0;  // keep cuBLASLt's periodic promotion (the accurate path)
    set_desc(CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum, "FAST_ACCUM = 0");
    if (mode.sb_per_row ? !set_scale_mode(CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                          static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F),
                                          "A_SCALE_MODE = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F")
                        : !set_scale_mode(CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                          static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F),
                                          "A_SCALE_MODE = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F"))
      return;
    if (!set_scale_mode(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<int32_t>(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F),
                        "B_SCALE_MODE = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F"))
      return;
    // cuBLASLt reads the BLK128x128_32F tensor with rows of align(KB, 4) floats (measured on an H100 with cuBLASLt
    // 13.1: [NB][KB] is right when KB % 4 == 0, wrong -- including reads past the tensor -- otherwise). Repack once
    // here, synchronously, so run() is the bare matmul; refresh_weight_scales() repeats the copy on demand.
    if (sb_ld != kb) {
      sb_packed = DeviceBuffer(static_cast<size_t>(nb * sb_ld) * sizeof(float));
      sb_packed.fill_byte(0, cudaStreamLegacy);  // padding columns: finite zeros (never used by the product)
      repack_scales(cudaStreamLegacy);
      sync_and_check(cudaStreamLegacy, "CublasLtBlockFp8 (" + shape() + "): after repacking the weight scales");
      sb_used = sb_packed.as<float>();
    } else {
      sb_used = sb;
    }
    const void* a_scale = sb_used;  // B's scales (128x128 or 1x128 blocks) go with cuBLAS A (= our B)
    const void* b_scale = sa;  // activations' 1x128 scales go with cuBLAS B (= our A)
    set_desc(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, a_scale, "A_SCALE_POINTER = sb (or its repacked copy)");
    set_desc(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, b_scale, "B_SCALE_POINTER = sa");

    create_layout(&layout_a, CUDA_R_8F_E4M3, k, n, k, "A (our B, e4m3)");
    create_layout(&layout_b, CUDA_R_8F_E4M3, k, m, k, "B (our A, e4m3)");
    if (mode.f32_accumulate)
      create_layout(&layout_d, CUDA_R_32F, n, m, n, "C/D (our D, fp32)");
    else
      create_layout(&layout_d, CUDA_R_16BF, n, m, n, "C/D (our D, bf16)");

    // ---- Heuristic --------------------------------------------------------------------------------------------------
    {
      const cublasStatus_t st = cublasLtMatmulPreferenceCreate(&pref);
      if (st != CUBLAS_STATUS_SUCCESS) {
        pref = nullptr;
        throw std::runtime_error("CublasLtBlockFp8 (" + shape() +
                                 "): cublasLtMatmulPreferenceCreate failed: " + cublas_status_text(st));
      }
    }
    set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kMaxWorkspaceBytes, "MAX_WORKSPACE_BYTES");
    // cuBLASLt assumes 256-byte aligned buffers unless told otherwise; tell it the truth so that a pointer into the
    // middle of a buffer (e.g. one group of a grouped tensor) never gets an algorithm that needs more.
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, pointer_alignment(b), "MIN_ALIGNMENT_A_BYTES");
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, pointer_alignment(a), "MIN_ALIGNMENT_B_BYTES");
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, pointer_alignment(d), "MIN_ALIGNMENT_C_BYTES");
    set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, pointer_alignment(d), "MIN_ALIGNMENT_D_BYTES");

    int returned = 0;
    cublasLtMatmulHeuristicResult_t result{};
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, op, layout_a, layout_b, layout_d, layout_d, pref,
                                                             /*requestedAlgoCount=*/1, &result, &returned);
    if (st != CUBLAS_STATUS_SUCCESS)
      return refuse("cublasLtMatmulAlgoGetHeuristic: " + cublas_status_text(st) + " for " + shape());
    if (returned < 1)
      return refuse("cublasLtMatmulAlgoGetHeuristic returned no algorithm for " + shape());
    if (result.state != CUBLAS_STATUS_SUCCESS)
      return refuse("cublasLtMatmulAlgoGetHeuristic: first result has state " + cublas_status_text(result.state) +
                    " for " + shape());
    heuristic = result;

    // ---- Workspace (once; run() never allocates) -----------------------------------------------------------------
    if (heuristic.workspaceSize > 0) workspace = DeviceBuffer(heuristic.workspaceSize);
    supported = true;
    reason.clear();
  }
};

CublasLtBlockFp8::CublasLtBlockFp8(int64_t m, int64_t n, int64_t k, const void* a, const float* sa, const void* b,
                                   const float* sb, void* d, Mode mode)
    : impl_(std::make_unique<Impl>()) {
  if (m < 0 || n < 0 || k < 0) {
    std::ostringstream os;
    os << "CublasLtBlockFp8: negative dimension M=" << m << " N=" << n << " K=" << k;
    throw std::invalid_argument(os.str());
  }
  if (a == nullptr || sa == nullptr || b == nullptr || sb == nullptr || d == nullptr) {
    std::ostringstream os;
    os << "CublasLtBlockFp8: null device pointer (a=" << a << " sa=" << sa << " b=" << b << " sb=" << sb
       << " d=" << d << ")";
    throw std::invalid_argument(os.str());
  }
  Impl& im = *impl_;
  im.m = m;
  im.n = n;
  im.k = k;
  im.a = a;
  im.sa = sa;
  im.b = b;
  im.sb = sb;
  im.d = d;
  im.mode = mode;
  im.build();
}

CublasLtBlockFp8::~CublasLtBlockFp8() = default;
CublasLtBlockFp8::CublasLtBlockFp8(CublasLtBlockFp8&&) noexcept = default;
CublasLtBlockFp8& CublasLtBlockFp8::operator=(CublasLtBlockFp8&&) noexcept = default;

bool CublasLtBlockFp8::supported() const { return impl_ != nullptr && impl_->supported; }

const std::string& CublasLtBlockFp8::reason() const {
  static const std::string kMovedFrom = "moved-from CublasLtBlockFp8";
  return impl_ != nullptr ? impl_->reason : kMovedFrom;
}

void CublasLtBlockFp8::run(cudaStream_t s) {
  if (!supported())
    throw std::logic_error("CublasLtBlockFp8::run called on an unsupported problem: " + reason());
  Impl& im = *impl_;
  const float alpha = 1.0f;
  const float beta = im.mode.f32_accumulate ? 1.0f : 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(im.handle, im.op, &alpha, /*A=*/im.b, im.layout_a, /*B=*/im.a, im.layout_b, &beta,
                     /*C=*/im.d, im.layout_d, /*D=*/im.d, im.layout_d, &im.heuristic.algo, im.workspace.get(),
                     im.workspace.size(), s);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("CublasLtBlockFp8::run (" + im.shape() + "): cublasLtMatmul failed: " +
                             cublas_status_text(st) + "; " + describe());
}

void CublasLtBlockFp8::refresh_weight_scales(cudaStream_t s) {
  if (!supported())
    throw std::logic_error("CublasLtBlockFp8::refresh_weight_scales called on an unsupported problem: " + reason());
  impl_->repack_scales(s);
}

bool CublasLtBlockFp8::weight_scales_repacked() const { return impl_ != nullptr && !impl_->sb_packed.empty(); }

std::string CublasLtBlockFp8::describe() const {
  if (impl_ == nullptr) return "cuBLASLt block FP8: " + reason();
  const Impl& im = *impl_;
  std::ostringstream os;
  os << "cuBLASLt";
  if (im.version != 0) os << " " << im.version;
  os << " block FP8 " << im.shape();
  if (!im.supported) {
    os << ": unsupported: " << im.reason;
    return os.str();
  }
  const cublasLtMatmulAlgo_t& algo = im.heuristic.algo;
  os << ": algo_id=" << algo_attr<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID)
     << " tile_id=" << algo_attr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID)
     << " stages_id=" << algo_attr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID)
     << " cluster_id=" << algo_attr<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)
     << " inner_id=" << algo_attr<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID)
     << " splitk=" << algo_attr<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM)
     << " reduction=" << algo_attr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)
     << " swizzle=" << algo_attr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING)
     << " custom=" << algo_attr<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION)
     << " workspace=" << im.workspace.size() << "B"
     << " sb_ld=" << im.sb_ld << (im.sb_packed.empty() ? "" : " (repacked)")
     << " waves=" << im.heuristic.wavesCount;
  return os.str();
}

}  // namespace finegemm::tools
