// Host-side validation of GEMM arguments: every rule a user can break gets a message that says what to change.
#pragma once

#include "finegemm/finegemm.hpp"

namespace finegemm {

/// A validated call, normalised to the 2D views the kernel uses.
struct GemmCall {
  GemmKind kind = GemmKind::kNormal;
  int64_t rows = 0;     ///< M (normal), M_sum (contiguous, psum), M_max (masked)
  int64_t a_rows = 0;   ///< rows of the 2D views of A and D: M, M_sum, G * M_max
  int64_t n = 0, k = 0;
  int num_groups = 1;
  int64_t expected_m = 0;  ///< masked, psum: the hint of rows per group
  int m_alignment = 128;   ///< contiguous, psum: the rows each group's start is a multiple of (128, 64 or 32)
  bool sa_k_major = false;
  int64_t lda = 0;      ///< bytes between rows of A
  int64_t ld_sa = 0;    ///< K-major: elements between rows; MN-major: elements between K blocks (M_pad)
  int64_t ld_d = 0;     ///< elements between rows of D
  const void* a = nullptr;
  const void* sa = nullptr;
  const void* b = nullptr;
  const void* sb = nullptr;
  void* d = nullptr;
  const void* layout = nullptr;  ///< m_indices, masked_m or group ends
  // The general dense form (gemm_fp8_fp8_nt)
  bool sb_per_row = false;  ///< SB [N, KB] MN-major (1x128 blocks of B), row stride ld_sb
  int64_t ld_sb = 0;        ///< sb_per_row: elements between K blocks (N_pad)
  DType d_dtype = DType::kBFloat16;
  const void* c = nullptr;  ///< fp32 [rows, N] added to the product (may equal d)
  int64_t ld_c = 0;         ///< elements between rows of C
  // The K-grouped weight gradient (k = the sum of K_g, rows = M, a_rows = G * M: D's [G * M, N] view)
  int64_t expected_k = 0;   ///< sum / G: the heuristic's K per group
  bool zero_d = false;      ///< no accumulation: D is zeroed before the kernel adds into it
  void* workspace = nullptr;  ///< per-CTA TMA descriptors (nullptr: the device's buffer kept by the context)
  int64_t workspace_bytes = 0;
};

GemmCall validate_normal(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                         const TensorView& d);
GemmCall validate_dense(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                        const TensorView& d, const TensorView* c);
GemmCall validate_contiguous(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                             const TensorView& d, const TensorView& m_indices, int m_alignment = 128);
GemmCall validate_contiguous_psum(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                                  const TensorView& d, const TensorView& group_ends, int expected_m,
                                  int m_alignment = 128);
GemmCall validate_masked(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                         const TensorView& d, const TensorView& masked_m, int expected_m);

GemmCall validate_k_grouped(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                            const TensorView& d, const std::vector<int64_t>& ks, const TensorView& ks_device,
                            bool accumulate, const TensorView* workspace);

/// Shape rules shared with is_supported(): N % 8, K % 16, positive sizes, group counts.
void check_problem(const Problem& problem);

/// `ptr` is device memory of `device` (throws Error(kInvalidArgument) from `where`, naming the tensor, otherwise).
void check_device_pointer(const void* ptr, const char* name, int device, const char* where);

/// Every pointer of the call is device memory of `device` (throws naming the tensor otherwise).
void check_device_pointers(const GemmCall& call, int device);

}  // namespace finegemm
