// The vendor baseline: cuBLASLt block-scaled FP8 GEMM on sm_90 (cuBLAS >= 12.9), computing the same product as
// finegemm's normal GEMM:
//
//   D[m, n] (bf16, [M, N] row-major) = sum_kb SA[m, kb] * SB[n / 128, kb] * sum_{k in block kb} A[m, k] * B[n, k]
//
// with A fp8 e4m3 [M, K] row-major (1x128 activation scales), B fp8 e4m3 [N, K] row-major (128x128 weight scales);
// or, with Mode::sb_per_row and Mode::f32_accumulate, the weight-gradient GEMM (finegemm's wgrad):
//
//   D[m, n] (fp32, [M, N] row-major) = D[m, n] + sum_kb SA[m, kb] * SB[n, kb] * sum_{k in block kb} A[m, k] * B[n, k]
//
// with B's scales per 1x128 row block too.
//
// Mapping onto cuBLASLt (column-major) -- it computes D^T = B * A^T:
//   cuBLAS A := our B, CUDA_R_8F_E4M3, K x N column-major, ld = K, op = T
//               scale mode CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, A_SCALE_POINTER = sb, which cuBLASLt reads
//               as [NB][align(KB, 4)] row-major (rows padded to 16 bytes; measured, see below)
//   cuBLAS B := our A, CUDA_R_8F_E4M3, K x M column-major, ld = K, op = N
//               scale mode CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,     B_SCALE_POINTER = sa ([KB][M], M contiguous)
//               (sb_per_row: scale mode CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, A_SCALE_POINTER = sb, [KB][N], N
//               contiguous, N % 4 == 0: the layout finegemm's 1x128 SB has, MN-major and TMA-aligned)
//   cuBLAS C = D := our D, CUDA_R_16BF, N x M column-major, ld = N  (== [M, N] row-major); beta = 0, C aliases D
//               (f32_accumulate: CUDA_R_32F and beta = 1, so D = D + A x B^T in place)
//   CUBLAS_COMPUTE_32F, scale type CUDA_R_32F, alpha = 1, FAST_ACCUM = 0; first result of
//   cublasLtMatmulAlgoGetHeuristic with a 64 MiB workspace limit and the minimum-alignment preferences set from the
//   actual pointers.
//
// Measured on an H100 (cuBLASLt 13.1, driver 580): with KB % 4 != 0 (K = 576, 640, ...) cuBLASLt reads the weight
// scales with a row pitch of align(KB, 4) floats; passing the dense [NB][KB] tensor gives wrong results and reads
// past its end. This class therefore repacks SB into a padded copy at construction when KB % 4 != 0 (see
// refresh_weight_scales()). The activation scales ([KB][M]) need M % 4 == 0 for the same 16-byte-row reason.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace finegemm::tools {
namespace detail {
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line);
}  // namespace detail
}  // namespace finegemm::tools

/// Evaluates a cuBLAS(Lt) call once; on failure throws std::runtime_error naming file:line, the expression and
/// cublasLtGetStatusName/cublasLtGetStatusString of the result.
#define FG_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                          \
    const cublasStatus_t fg_cublas_check_st_ = (expr);                                          \
    if (fg_cublas_check_st_ != CUBLAS_STATUS_SUCCESS)                                           \
      ::finegemm::tools::detail::throw_cublas_error(fg_cublas_check_st_, #expr, __FILE__, __LINE__); \
  } while (0)

namespace finegemm::tools {

/// "CUBLAS_STATUS_NOT_SUPPORTED (15: ...)" style text for a status.
std::string cublas_status_text(cublasStatus_t st);

/// Converts activation scales from the K-major layout a per-token quantizer writes (SA[m][kb], [M][KB] row-major) to
/// the M-contiguous layout cuBLASLt's VEC128_32F mode reads for the B slot ([KB][M]). Host-side, for tests/bench.
std::vector<float> sa_kmajor_to_cublaslt(const float* sa_kmajor, int64_t m, int64_t kb);

/// What CublasLtBlockFp8 computes besides the default (128x128 scales of B, bf16 D, beta = 0).
struct CublasLtMode {
  bool sb_per_row = false;      ///< B's scales per 1x128 row block (VEC128_32F on both operands)
  bool f32_accumulate = false;  ///< fp32 D, beta = 1: D += A x B^T (C is D)
};

class CublasLtBlockFp8 {
 public:
  using Mode = CublasLtMode;

  /// a:  fp8 e4m3 [M, K] row-major (device).
  /// sa: fp32 activation scales, [KB][M] (element (m, kb) at kb * M + m), device, 16-byte aligned. This is finegemm's
  ///     "MN-major TMA-aligned" SA layout whenever M % 4 == 0 (M_pad == M), the only case cuBLASLt accepts.
  /// b:  fp8 e4m3 [N, K] row-major (device).
  /// sb: fp32 weight scales, [NB][KB] row-major (device; 16-byte aligned when KB % 4 == 0); with mode.sb_per_row,
  ///     [KB][N] (element (n, kb) at kb * N + n), 16-byte aligned, N % 4 == 0.
  /// d:  bf16 [M, N] row-major (device), fully overwritten by run(); with mode.f32_accumulate fp32 [M, N], each run()
  ///     adds the product to it.
  /// The pointers are captured: run() always uses these buffers, and a, sa, b and d may change contents between
  /// runs. sb too when KB % 4 == 0; when KB % 4 != 0 its contents are copied (repacked to cuBLASLt's padded layout)
  /// here in the constructor, so after changing them call refresh_weight_scales() before the next run().
  ///
  /// Creates a cuBLASLt handle, the descriptors, queries the heuristic and allocates the chosen algorithm's
  /// workspace (on the current device; use the object on that device). Launches GPU work only for the SB repack
  /// (KB % 4 != 0), on the legacy default stream, synchronously: write sb on a blocking stream or synchronize
  /// before constructing. If the problem cannot run (M % 4 != 0, a zero dimension, a misaligned scale pointer, cuBLASLt
  /// older than 12.9, or cuBLASLt rejecting the configuration: a status other than SUCCESS from a scale-mode attribute
  /// or from the heuristic, or no heuristic result), the object is built with supported() == false and reason() says
  /// why. Null data pointers or negative dimensions throw std::invalid_argument; failing to create the
  /// handle/descriptors or to allocate the workspace throws std::runtime_error.
  CublasLtBlockFp8(int64_t m, int64_t n, int64_t k, const void* a, const float* sa, const void* b, const float* sb,
                   void* d, Mode mode = Mode{});
  ~CublasLtBlockFp8();
  CublasLtBlockFp8(CublasLtBlockFp8&&) noexcept;
  CublasLtBlockFp8& operator=(CublasLtBlockFp8&&) noexcept;
  CublasLtBlockFp8(const CublasLtBlockFp8&) = delete;
  CublasLtBlockFp8& operator=(const CublasLtBlockFp8&) = delete;

  bool supported() const;
  /// Empty when supported().
  const std::string& reason() const;
  /// Enqueues one cublasLtMatmul on `s` (asynchronous; no host sync, no allocation). Throws std::logic_error if
  /// !supported(), std::runtime_error (with the shape, the status and describe()) if cublasLtMatmul fails.
  void run(cudaStream_t s);
  /// Re-copies the weight scales from sb into the padded copy, asynchronously on `s` (a no-op when KB % 4 == 0,
  /// where sb is used in place). Needed only after sb's contents changed. Throws like run().
  void refresh_weight_scales(cudaStream_t s);
  /// True when KB % 4 != 0, i.e. run() reads a private padded copy of sb made at construction.
  bool weight_scales_repacked() const;
  /// One line for logs: the shape, cuBLASLt version and the chosen algorithm's configuration (numeric ids of
  /// cublasLtMatmulTile_t / cublasLtMatmulStages_t / cublasLtClusterShape_t), workspace and estimated waves; or
  /// "unsupported: <reason>".
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace finegemm::tools
