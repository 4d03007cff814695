// A GEMM problem of any kind with random data, on the host and the device, its GPU reference and its check.
// Shared by `finegemm bench`, `finegemm check` and the GPU tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "lib/device_buffer.hpp"

namespace finegemm::tools {

struct ProblemShape {
  GemmKind kind = GemmKind::kNormal;
  int groups = 1;
  int64_t m = 0;  ///< normal: M; contiguous, psum: expected rows per expert; masked: M_max
  int64_t n = 0;
  int64_t k = 0;
  std::string describe() const;
};

/// The kind's name in shape files and on the command line: normal, contiguous, masked or psum.
inline const char* kind_name(GemmKind kind) {
  switch (kind) {
    case GemmKind::kNormal: return "normal";
    case GemmKind::kGroupedContiguous: return "contiguous";
    case GemmKind::kGroupedMasked: return "masked";
    case GemmKind::kGroupedContiguousPsum: return "psum";
  }
  return "?";
}

/// What the operands hold. kUniform: fp8 codes drawn uniformly over the finite codes, with scales log-uniform over
/// [2^scale_lo_exp, 2^scale_hi_exp] (the correctness default: every exponent, every scale range). kNormal: standard
/// normal values quantized per token (A) and per 128x128 block (B) with the quantizers' own scales, as a model's
/// operands and DeepGEMM's tests; uniform codes flip more bits per product and spend more power.
enum class DataKind { kUniform, kNormal };

/// Options of the random problem.
struct ProblemOptions {
  uint64_t seed = 1;
  DataKind data = DataKind::kUniform;
  std::vector<int> masked_m;          ///< masked: rows per group (default: all M_max)
  std::vector<int> expert_rows;       ///< contiguous, psum: real rows per expert (default: random around m)
  int scale_lo_exp = -10, scale_hi_exp = 10;
};

class GemmProblem {
 public:
  GemmProblem(const ProblemShape& shape, const ProblemOptions& options);

  const ProblemShape& shape() const { return shape_; }
  int64_t rows() const { return rows_; }             ///< rows of the 2D views of A and D
  int64_t kb() const { return (shape_.k + 127) / 128; }
  int64_t nb() const { return (shape_.n + 127) / 128; }
  /// Rows that are computed (normal: M; contiguous, psum: real rows; masked: sum of masked_m).
  int64_t valid_rows() const;
  bool row_valid(int64_t row) const { return row_group_[size_t(row)] >= 0; }
  int row_group(int64_t row) const { return row_group_[size_t(row)]; }
  const std::vector<int>& masked_m() const { return masked_m_; }

  /// Enqueues the finegemm call for this problem (SA in the layout asked for).
  void run(bool sa_k_major, cudaStream_t stream);
  /// Fills D with a NaN bit pattern (kPoison) on `stream`.
  void poison_output(cudaStream_t stream);
  std::vector<uint16_t> download_output() const;
  /// Overwrites the device layout (m_indices, masked_m or group ends) with `values` (for graph-replay tests).
  void set_layout(const std::vector<int32_t>& values, cudaStream_t stream);
  std::vector<int32_t>& layout() { return layout_; }

  /// Bytes a kernel must move at least: A and B (fp8, valid rows / used groups), D (bf16) and scales.
  double min_bytes() const;
  /// The part of min_bytes() that is written: D (bf16, valid rows).
  double min_write_bytes() const { return 2.0 * double(valid_rows()) * double(shape_.n); }
  double flops() const { return 2.0 * double(valid_rows()) * double(shape_.n) * double(shape_.k); }

  // Device data (public for the cuBLASLt baseline and tests).
  DeviceBuffer a, b, sa_k_major, sa_mn_major, sb, d, layout_buffer;
  std::vector<uint8_t> host_a, host_b;
  std::vector<float> host_sa, host_sb;  // SA K-major [rows, KB]; SB [G, NB, KB]

  static constexpr uint16_t kPoison = 0x7FFF;  ///< bf16 NaN

 private:
  void refresh_row_groups();

  ProblemShape shape_;
  int64_t rows_ = 0;
  int64_t m_pad_ = 0;
  std::vector<int> masked_m_;
  std::vector<int32_t> layout_;      // m_indices (contiguous), masked_m (masked) or group ends (psum)
  std::vector<int> row_group_;       // per 2D row: group, or -1 when the row is not computed
};

/// fp64 reference of every valid row (invalid rows hold 0), computed on the GPU with the JIT's reference kernel.
struct Reference {
  std::vector<double> value;  ///< [rows, N]
  std::vector<double> abs_sum;
};
Reference gpu_reference(const GemmProblem& problem);
/// fp64 reference of a dense GEMM on device operands: `a` fp8 [M, K] and `b` fp8 [N, K] row-major, `sa` fp32 K-major
/// [M, KB] with row stride `ld_sa`, `sb` fp32 [NB, KB] row-major.
Reference gpu_reference_dense(const void* a, const float* sa, int64_t ld_sa, const void* b, const float* sb, int64_t m,
                              int64_t n, int64_t k);

struct Verdict {
  bool ok = false;
  double worst_diff = 0;     ///< largest per-group diff
  int64_t bad_elements = 0;  ///< element-wise failures among valid rows
  int64_t touched_invalid = 0;  ///< invalid rows whose D changed from the poison
  std::string summary;
};
/// The checks' tolerances (below): the diff metric's bound, and the element-wise accumulation term.
inline constexpr double kMaxDiff = 1e-5;
inline constexpr double kAccumTolerance = 0x1p-9;

/// Checks `out` (downloaded D) against `ref`: per group diff <= max_diff, element-wise bound, untouched invalid rows.
/// Element-wise: |out - ref| <= 2^-8 |ref| (bf16 rounding) + accum_tolerance * sum|terms|. Hopper's FP8 tensor cores
/// accumulate each 128-wide K block with about 14 bits of mantissa, aligned to the largest addend; the first GPU run
/// measured errors up to 1.23 x 2^-11 * sum|terms| on correct outputs (diff 1.4e-6, bf16-rounding level), so the
/// term is 2^-9: still far below a misplaced or missing tile (|ref| ~ sum|terms| / sqrt(K) >= 2^-7 sum|terms|).
Verdict check_output(const GemmProblem& problem, const Reference& ref, const std::vector<uint16_t>& out,
                     double max_diff = kMaxDiff, double accum_tolerance = kAccumTolerance);
/// check_output for a dense D [M, N] (bf16 bits, row-major) against gpu_reference_dense's `ref`.
Verdict check_dense_output(const Reference& ref, const std::vector<uint16_t>& out, int64_t m, int64_t n,
                           double max_diff = kMaxDiff, double accum_tolerance = kAccumTolerance);

}  // namespace finegemm::tools
