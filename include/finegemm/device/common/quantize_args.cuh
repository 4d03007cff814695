// Launch geometry and run-time arguments of the FP8 quantizers, shared by the kernels (kernels/quantize.cuh) and the
// host code that launches them (src/api/quantize.cpp).
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::device {

inline constexpr uint32_t kQuantBlock = 128;         // K extent of a scale block (and its N extent, per-block)
inline constexpr uint32_t kQuantElemsPerThread = 8;  // consecutive columns per thread: K % 8 == 0
inline constexpr uint32_t kQuantThreadsPerBlockRow = kQuantBlock / kQuantElemsPerThread;  // 16
inline constexpr uint32_t kQuantNumThreads = 256;
inline constexpr uint32_t kQuantRowsPerPass = kQuantNumThreads / kQuantThreadsPerBlockRow;  // 16
/// Per-token: (group, row, k block) units per CTA. Per-block: one 128x128 block per CTA.
inline constexpr uint32_t kPerTokenUnitsPerCta = kQuantRowsPerPass;

/// Run-time arguments of both quantizers. Strides are in elements. Tensors are [G, rows, cols] (G = 1 for 2D inputs);
/// per-token scales are [G, rows, KB], per-block scales [G, ceil(rows/128), KB], in any non-overlapping layout
/// (MN-major TMA-aligned and K-major among them).
struct QuantizeArgs {
  const void* x;   ///< bf16 or fp32, columns contiguous, 16-byte aligned rows
  uint8_t* out;    ///< e4m3, columns contiguous, 8-byte aligned rows
  float* scales;   ///< fp32
  int64_t x_group_stride, x_row_stride;
  int64_t out_group_stride, out_row_stride;
  int64_t scale_group_stride, scale_row_stride, scale_k_block_stride;
  int32_t num_groups, num_rows, num_cols;  ///< all > 0, num_cols % kQuantElemsPerThread == 0
};

}  // namespace finegemm::device
