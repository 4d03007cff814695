// A GEMM problem of any kind with random data, on the host and the device, its GPU reference and its check.
// Shared by `finegemm bench`, `finegemm check`, `finegemm stress` and the GPU tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "lib/device_buffer.hpp"
#include "lib/problem_shape.hpp"

namespace finegemm::tools {

/// What the operands hold. kUniform: fp8 codes drawn uniformly over the finite codes, with scales log-uniform over
/// [2^scale_lo_exp, 2^scale_hi_exp] (the correctness default: every exponent, every scale range). kNormal: standard
/// normal values quantized per token (A) and per 128x128 block (B) with the quantizers' own scales, as a model's
/// operands and DeepGEMM's tests; uniform codes flip more bits per product and spend more power.
/// wgrad: B like A (uniform codes with random scales [N, KB], or normal values quantized per 1x128 row block).
enum class DataKind { kUniform, kNormal };

/// Options of the random problem.
struct ProblemOptions {
  uint64_t seed = 1;
  DataKind data = DataKind::kUniform;
  std::vector<int> masked_m;          ///< masked: rows per group (default: all M_max)
  std::vector<int> expert_rows;       ///< contiguous, psum: real rows per expert (default: random around m)
  /// contiguous, psum: each expert's rows start at a multiple of this many rows (128, 64 or 32; the m_indices layout
  /// runs 128 and 64), passed to the GEMM as its m_alignment
  int m_alignment = 128;
  int scale_lo_exp = -10, scale_hi_exp = 10;
  /// wgrad: C is D itself (D holds C before each call, as a training step accumulates); false: C in a buffer of its
  /// own, D poisoned before each call.
  bool c_aliases_d = true;
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
  /// contiguous, psum: the row alignment of the experts' starts (ProblemOptions::m_alignment).
  int m_alignment() const { return m_alignment_; }

  bool wgrad() const { return shape_.wgrad; }
  /// wgrad: whether C is D (ProblemOptions::c_aliases_d).
  bool c_aliases_d() const { return c_aliases_d_; }
  /// Bytes per element of D: 2 (bf16), 4 (wgrad: fp32).
  int output_bytes() const { return shape_.wgrad ? 4 : 2; }

  /// Enqueues the finegemm call for this problem (SA in the layout asked for).
  void run(bool sa_k_major, cudaStream_t stream);
  /// Prepares D for a checked call, on `stream`: fills it with a NaN bit pattern (kPoison, kPoisonF32), or for wgrad
  /// with C aliasing D writes C's values into it (D is then the call's C: a repeated run() accumulates).
  void poison_output(cudaStream_t stream);
  /// D as bf16 bits (the forward kinds; throws for wgrad).
  std::vector<uint16_t> download_output() const;
  /// D as fp32 (wgrad; throws for the other kinds).
  std::vector<float> download_output_f32() const;
  /// Overwrites the device layout (m_indices, masked_m or group ends) with `values` (for graph-replay tests).
  void set_layout(const std::vector<int32_t>& values, cudaStream_t stream);
  std::vector<int32_t>& layout() { return layout_; }

  /// Bytes a kernel must move at least: A and B (fp8, valid rows / used groups), D (bf16; wgrad: fp32 D written and
  /// fp32 C read) and scales.
  double min_bytes() const;
  /// The part of min_bytes() that is written: D (bf16 or fp32, valid rows).
  double min_write_bytes() const { return double(output_bytes()) * double(valid_rows()) * double(shape_.n); }
  double flops() const { return 2.0 * double(valid_rows()) * double(shape_.n) * double(shape_.k); }

  // Device data (public for the cuBLASLt baseline and tests). sb: [G, NB, KB] row-major; wgrad: [N, KB] MN-major and
  // TMA-aligned ([KB][sb_n_pad()]), as the kernel reads it, with sb_k_major its [N, KB] row-major copy (the reference
  // reads that one). c: wgrad with a separate C only (else C is d).
  DeviceBuffer a, b, sa_k_major, sa_mn_major, sb, sb_k_major, d, c, layout_buffer;
  std::vector<uint8_t> host_a, host_b;
  std::vector<float> host_sa, host_sb;  // SA K-major [rows, KB]; SB [G, NB, KB] (wgrad: [N, KB] row-major)
  std::vector<float> host_c;            // wgrad: C [rows, N]
  /// wgrad: SB's stride between K blocks, N rounded up to 4 floats (16 bytes).
  int64_t sb_n_pad() const { return (shape_.n + 3) / 4 * 4; }

  static constexpr uint16_t kPoison = 0x7FFF;      ///< bf16 NaN
  static constexpr uint32_t kPoisonF32 = 0xFFFFFFFF;  ///< fp32 NaN (a byte pattern)

 private:
  void refresh_row_groups();

  ProblemShape shape_;
  bool c_aliases_d_ = true;
  int m_alignment_ = 128;
  int64_t rows_ = 0;
  int64_t m_pad_ = 0;
  std::vector<int> masked_m_;
  std::vector<int32_t> layout_;      // m_indices (contiguous), masked_m (masked) or group ends (psum)
  std::vector<int> row_group_;       // per 2D row: group, or -1 when the row is not computed
};

/// fp64 reference of every valid row (invalid rows hold 0), computed on the GPU with the JIT's reference kernel. For
/// wgrad, C is added (in fp64, on the host); abs_sum is the product's alone (reference::check_f32_output says why).
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
/// The same for wgrad's fp32 D: |out - ref| <= (1 + 2^-23) (2^-24 |ref| + accum_tolerance * sum|terms|), the
/// rounding term of one fp32 rounding (reference::check_f32_output).
Verdict check_output(const GemmProblem& problem, const Reference& ref, const std::vector<float>& out,
                     double max_diff = kMaxDiff, double accum_tolerance = kAccumTolerance);
/// Downloads D (bf16 or fp32, as the kind writes it) and checks it against `ref`.
Verdict check_download(const GemmProblem& problem, const Reference& ref);
/// check_output for a dense D [M, N] (bf16 bits, row-major) against gpu_reference_dense's `ref`.
Verdict check_dense_output(const Reference& ref, const std::vector<uint16_t>& out, int64_t m, int64_t n,
                           double max_diff = kMaxDiff, double accum_tolerance = kAccumTolerance);

}  // namespace finegemm::tools
