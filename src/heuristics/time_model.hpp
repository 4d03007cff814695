// The time model: how long a kernel configuration runs a problem (score), and the sizes of a problem it counts.
// Internal to the heuristic (heuristics.cpp enumerates and filters the candidates, score() times each).
#pragma once

#include <cstdint>

#include "heuristics/heuristics.hpp"

namespace finegemm::heuristics {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Rows per group the tiles are counted over.
inline int64_t rows_for_tiles(const Problem& p) { return p.m; }

/// Groups whose tiles the kernel walks one after another (masked and psum: every group, p.m rows each; dense and
/// contiguous: one 2D view of p.m rows).
int tiled_groups(const Problem& p);

/// The kernel output (device::GemmOutput) of a problem.
uint32_t output_of(const Problem& p);

/// Bytes a call moves at least: A and SA's rows once (the rows the tiles cover), B once per group it reads, D once
/// (and C once).
struct CallBytes {
  double a = 0, b = 0, d = 0;
};
CallBytes call_bytes(const Problem& p);

/// Whether `c` runs `p` as a short-K forward GEMM: dense, bf16 D, 128x128 B scales, K <= 576. There the tile's store
/// follows a K loop of at most 4.5 blocks (docs/heuristics.md, "Short K"): score() charges 64-byte store slabs more,
/// and select_config prefers the tile whose stages hold the whole K among those the model times alike.
bool short_k_forward(const Problem& p, const KernelConfig& c);

/// Whether `c` runs `p` as a forward GEMM of two to four 64-row blocks: dense, bf16 D, 128x128 B scales, 65-256 rows
/// (at most N), 64-row tiles in one round of the CTAs, 3072 <= K <= 7168. The kernel then walks the tiles m-block
/// fastest, so the CTAs that read one B tile are neighbours (device::gemm_dense_one_round_by_rows; a last block of
/// fewer than 48 rows moved up to end at row M); score() charges such tiles less (docs/heuristics.md, "Row blocks of
/// 64").
bool row_blocks_forward(const Problem& p, const KernelConfig& c);

/// Fills the model outputs of `c` (num_tiles, num_waves, tile_us, estimated_us, and wide_tail where a dense GEMM's
/// last row block runs as wide tiles) for `p` as the kernel computes it.
void score(KernelConfig& c, const Problem& p, const HardwareModel& hw);

}  // namespace finegemm::heuristics
