// Launch geometry, numeric constants and run-time arguments of the FP8 quantizers, shared by the kernels
// (kernels/quantize.cuh), the host code that launches them (src/api/quantize.cpp) and the tests.
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::device {

inline constexpr uint32_t kQuantBlock = 128;          // K extent of a scale block (and its N extent, per-block)
inline constexpr uint32_t kQuantColumnAlign = 8;      // K % 8 == 0: whole 16-byte bf16 vectors, 8-byte code stores
inline constexpr uint32_t kQuantThreadsPerRow = 4;    // threads sharing one 128-column row of a block
inline constexpr uint32_t kQuantElemsPerThreadRow = kQuantBlock / kQuantThreadsPerRow;  // 32 per thread and row
inline constexpr uint32_t kQuantRowsPerThread = 2;    // rows per thread, both loaded before any arithmetic

inline constexpr float kQuantMinAmax = 0x1p-64f;  // smallest amax used: no scale is ever 0, inf or NaN
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kInvE4M3Max = 1.0f / kE4M3Max;                // RN(1 / 448)
inline constexpr float kQuantMinScale = kQuantMinAmax / kE4M3Max;    // RN(2^-64 / 448), the smallest scale
inline constexpr float kQuantMaxScale = 0x1.fffffep127f / kE4M3Max;  // RN(FLT_MAX / 448), the largest finite one

/// Per-token: a CTA holds 64 row groups of 4 threads; each group takes one k block of 2 consecutive rows (an item),
/// so a thread has 8 independent 16-byte loads of bf16 in flight (32 KB per CTA).
inline constexpr uint32_t kPerTokenNumThreads = 256;
inline constexpr uint32_t kPerTokenItemsPerCta = kPerTokenNumThreads / kQuantThreadsPerRow;

/// Per-block: a CTA holds one 128x128 block in registers, in 2 passes of 64 rows.
inline constexpr uint32_t kPerBlockNumThreads = 256;
inline constexpr uint32_t kPerBlockRowsPerPass = kPerBlockNumThreads / kQuantThreadsPerRow;

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
  int32_t num_groups, num_rows, num_cols;  ///< all > 0, num_cols % kQuantColumnAlign == 0
};

}  // namespace finegemm::device
