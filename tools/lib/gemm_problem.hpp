// A GEMM problem of any kind with random data, on the host and the device, its GPU reference and its check.
// Shared by `finegemm bench`, `finegemm check`, `finegemm stress` and the GPU tests.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
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
/// wgrad, kgrouped: B like A (uniform codes with random scales [N, KB], or normal values quantized per 1x128 row
/// block).
enum class DataKind { kUniform, kNormal };

/// Options of the random problem.
struct ProblemOptions {
  uint64_t seed = 1;
  DataKind data = DataKind::kUniform;
  std::vector<int> masked_m;          ///< masked: rows per group (default: all M_max)
  std::vector<int> expert_rows;       ///< contiguous, psum: real rows per expert (default: random around m)
  std::vector<int64_t> expert_ks;     ///< kgrouped: tokens (K) per expert, multiples of 128 (default: draw_expert_ks)
  /// contiguous, psum: each expert's rows start at a multiple of this many rows (128, 64 or 32; the m_indices layout
  /// runs 128 and 64), passed to the GEMM as its m_alignment
  int m_alignment = 128;
  int scale_lo_exp = -10, scale_hi_exp = 10;
  /// wgrad: C is D itself (D holds C before each call, as a training step accumulates); false: C in a buffer of its
  /// own, D poisoned before each call.
  bool c_aliases_d = true;
  /// wgrad: bf16 D = A x B^T without C instead (the same operands and 1x128 scales; DeepGEMM's fp8_gemm_nt with
  /// recipe (1, 1, 128) and a bf16 d), D poisoned before each call.
  bool bf16_output = false;
  /// kgrouped: D[g] += A_g x B_g^T (D holds C before each call, as a training step accumulates); false:
  /// D[g] = A_g x B_g^T (D poisoned before each call; the call zeroes it first, so every element is written).
  bool accumulate = true;
};

class GemmProblem {
 public:
  GemmProblem(const ProblemShape& shape, const ProblemOptions& options);

  const ProblemShape& shape() const { return shape_; }
  int64_t rows() const { return rows_; }             ///< rows of the 2D views of A and D (kgrouped: of D, G * M)
  int64_t kb() const { return (shape_.k + 127) / 128; }
  int64_t nb() const { return (shape_.n + 127) / 128; }
  /// Rows that are computed (normal: M; contiguous, psum: real rows; masked: sum of masked_m; kgrouped: G * M, an
  /// expert without tokens included: its D[g] is checked to hold C, or zero).
  int64_t valid_rows() const;
  bool row_valid(int64_t row) const { return row_group_[size_t(row)] >= 0; }
  int row_group(int64_t row) const { return row_group_[size_t(row)]; }
  const std::vector<int>& masked_m() const { return masked_m_; }
  /// contiguous, psum: the row alignment of the experts' starts (ProblemOptions::m_alignment).
  int m_alignment() const { return m_alignment_; }

  bool wgrad() const { return shape_.wgrad; }
  bool k_grouped() const { return shape_.kind == GemmKind::kGroupedK; }
  /// wgrad: whether C is D (ProblemOptions::c_aliases_d).
  bool c_aliases_d() const { return c_aliases_d_; }
  /// wgrad: whether D is bf16, without C (ProblemOptions::bf16_output).
  bool bf16_output() const { return bf16_output_; }
  /// kgrouped: whether the call adds into D (ProblemOptions::accumulate).
  bool accumulate() const { return accumulate_; }
  /// Whether D holds C before each call (wgrad with C aliasing D, kgrouped accumulating): a repeated run() adds again.
  bool d_holds_c() const { return (shape_.wgrad && c_aliases_d_ && !bf16_output_) || (k_grouped() && accumulate_); }
  /// Whether D is fp32 (wgrad but with bf16_output, kgrouped) rather than bf16.
  bool f32_output() const { return (shape_.wgrad && !bf16_output_) || k_grouped(); }
  /// Bytes per element of D: 2 (bf16), 4 (fp32).
  int output_bytes() const { return f32_output() ? 4 : 2; }
  /// kgrouped: the tokens (K) of each expert, and their sum (the K extent of A and B).
  const std::vector<int64_t>& expert_ks() const { return ks_; }
  int64_t sum_k() const { return sum_k_; }
  /// kgrouped: the K per expert the library's heuristic sees for the call (sum_k() / G rounded up to 128, at least
  /// 128), where problem_of(shape()) takes the shape's k.
  int64_t expected_k() const { return std::max<int64_t>(128, (sum_k_ / shape_.groups + 127) / 128 * 128); }

  /// Enqueues the finegemm call for this problem (SA in the layout asked for).
  void run(bool sa_k_major, cudaStream_t stream);
  /// Prepares D for a checked call, on `stream`: fills it with a NaN bit pattern (kPoison, kPoisonF32), or where D
  /// holds C (d_holds_c) writes C's values into it (D is then the call's C: a repeated run() accumulates).
  void poison_output(cudaStream_t stream);
  /// D as bf16 bits (the forward kinds; throws for wgrad and kgrouped).
  std::vector<uint16_t> download_output() const;
  /// D as fp32 (wgrad, kgrouped; throws for the other kinds).
  std::vector<float> download_output_f32() const;
  /// Overwrites the device layout (m_indices, masked_m or group ends) with `values` (for graph-replay tests; not
  /// kgrouped, whose operands are laid out for their split of the tokens).
  void set_layout(const std::vector<int32_t>& values, cudaStream_t stream);
  std::vector<int32_t>& layout() { return layout_; }

  /// Bytes a kernel must move at least: A and B (fp8, valid rows / used groups; kgrouped: every token once), D (bf16;
  /// wgrad: fp32 D written and fp32 C read; kgrouped: the same for the experts with tokens, or every D[g] written
  /// without accumulation) and scales.
  double min_bytes() const;
  /// The part of min_bytes() that is written: D (bf16 or fp32, valid rows; kgrouped: as min_bytes counts it).
  double min_write_bytes() const;
  /// 2 x rows x N x K over the valid rows (kgrouped: 2 x M x N x the experts' real tokens, sum_k()).
  double flops() const;

  // Device data (public for the cuBLASLt baseline and tests). sb: [G, NB, KB] row-major; wgrad: [N, KB] MN-major and
  // TMA-aligned ([KB][sb_n_pad()]), as the kernel reads it, with sb_k_major its [N, KB] row-major copy (the reference
  // reads that one). c: wgrad with a separate C only (else C is d).
  // kgrouped: a, b, sa_k_major and sb_k_major hold the experts' blocks back to back (A_g [M, K_g] and B_g [N, K_g]
  // row-major, SA_g [M, KB_g] and SB_g [N, KB_g] K-major, as host_*), sa_mn_major and sb the kernel's scales
  // ([sum KB][M] and [sum KB][N]), d is D [G, M, N], layout_buffer the K_g as int32 (ks_device) and workspace the
  // call's own (so that calls on several streams may run at once).
  DeviceBuffer a, b, sa_k_major, sa_mn_major, sb, sb_k_major, d, c, layout_buffer, workspace;
  std::vector<uint8_t> host_a, host_b;
  std::vector<float> host_sa, host_sb;  // SA K-major [rows, KB]; SB [G, NB, KB] (wgrad: [N, KB] row-major)
  std::vector<float> host_c;            // wgrad: C [rows, N]; kgrouped with accumulation: C [G, M, N]
  /// wgrad: SB's stride between K blocks, N rounded up to 4 floats (16 bytes).
  int64_t sb_n_pad() const { return (shape_.n + 3) / 4 * 4; }

  static constexpr uint16_t kPoison = 0x7FFF;      ///< bf16 NaN
  static constexpr uint32_t kPoisonF32 = 0xFFFFFFFF;  ///< fp32 NaN (a byte pattern)

 private:
  void refresh_row_groups();
  void init_k_grouped(const ProblemOptions& options);

  ProblemShape shape_;
  bool c_aliases_d_ = true;
  bool bf16_output_ = false;
  bool accumulate_ = true;
  std::vector<int64_t> ks_;          // kgrouped: K_g
  int64_t sum_k_ = 0;
  int m_alignment_ = 128;
  int64_t rows_ = 0;
  int64_t m_pad_ = 0;
  std::vector<int> masked_m_;
  std::vector<int32_t> layout_;      // m_indices (contiguous), masked_m (masked), group ends (psum) or K_g (kgrouped)
  std::vector<int> row_group_;       // per 2D row: group, or -1 when the row is not computed
};

/// fp64 reference of every valid row (invalid rows hold 0), computed on the GPU with the JIT's reference kernel. For
/// wgrad, C is added (in fp64, on the host; not with bf16_output); abs_sum is the product's alone (reference::check_f32_output says why).
/// kgrouped: expert by expert, C added with accumulation; an expert without tokens holds C (or zero).
struct Reference {
  std::vector<double> value;  ///< [rows, N]
  std::vector<double> abs_sum;
};
Reference gpu_reference(const GemmProblem& problem);
/// kgrouped only (throws std::invalid_argument for the other kinds): the same on the CPU (reference::
/// gemm_nt_reference_sb_per_row and add_c_to_reference, expert by expert), from the host copies.
Reference cpu_reference(const GemmProblem& problem);
/// The CPU reference of a K-grouped problem from host operands laid out as GemmProblem holds them (expert g's A_g
/// [M, K_g], B_g [N, K_g] row-major and SA_g [M, KB_g], SB_g [N, KB_g] K-major, each after the previous expert's),
/// expert by expert; `c` (C [G, M, N]) is added when not null. Host-only.
Reference k_grouped_reference(const uint8_t* a, const float* sa, const uint8_t* b, const float* sb, const float* c,
                              const std::vector<int64_t>& ks, int64_t m, int64_t n);
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
/// rounding term of one fp32 rounding (reference::check_f32_output); kgrouped's through check_k_grouped_output.
Verdict check_output(const GemmProblem& problem, const Reference& ref, const std::vector<float>& out,
                     double max_diff = kMaxDiff, double accum_tolerance = kAccumTolerance);
/// A K-grouped D [G, M, N] (fp32) against its reference, expert by expert: check_f32_output on each expert with tokens
/// (diff, its largest per expert, and the element-wise bound), and an expert without tokens must hold exactly its
/// reference (C, or zero without accumulation). Host-only.
Verdict check_k_grouped_output(const std::vector<float>& out, const Reference& ref, const std::vector<int64_t>& ks,
                               int64_t m, int64_t n, double max_diff = kMaxDiff,
                               double accum_tolerance = kAccumTolerance);
/// Downloads D (bf16 or fp32, as the kind writes it) and checks it against `ref`.
Verdict check_download(const GemmProblem& problem, const Reference& ref);
/// check_output for a dense D [M, N] (bf16 bits, row-major) against gpu_reference_dense's `ref`.
Verdict check_dense_output(const Reference& ref, const std::vector<uint16_t>& out, int64_t m, int64_t n,
                           double max_diff = kMaxDiff, double accum_tolerance = kAccumTolerance);

}  // namespace finegemm::tools
