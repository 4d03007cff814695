// Run-time arguments of the GEMM kernels, filled on the host and passed by value as one __grid_constant__ parameter.
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::device {

/// The device error buffer (GemmArgs::error_flags): word 0 holds the kError* flags. Measurement builds
/// (FG_EXPERIMENT 2048) add CTA 0's K-loop clocks from word kLoopClockWord on, kLoopClockWordsPerWarpgroup words per
/// math warpgroup: batches, then cycles in the full wait, the turn wait, the issue, the wgmma wait, the promotion
/// (with the stage's release) and the epilogue, then the warpgroup's whole life in cycles and in ns (%globaltimer).
inline constexpr uint32_t kErrorBufferWords = 64;
inline constexpr uint32_t kLoopClockWord = 32;
inline constexpr uint32_t kLoopClockWordsPerWarpgroup = 9;
/// Measurement builds (FG_EXPERIMENT 2048) also add, over every CTA, A's TMA issuer's stages, cycles waiting for empty
/// stages, cycles issuing and cycles in its role from word kProducerClockWord on, then B's issuer's four words, then
/// the scale warp's (lane 0).
inline constexpr uint32_t kProducerClockWord = kLoopClockWord + 2 * kLoopClockWordsPerWarpgroup;
static_assert(kProducerClockWord + 12 <= kErrorBufferWords, "measurement words fit the error buffer");

struct GemmArgs {
  TmaDescriptor tma_a;        ///< A as 2D [rows, K] fp8, box (128, a_box_rows), 128B swizzle
  TmaDescriptor tma_b;        ///< B as 2D [G * N, K] fp8, box (128, BLOCK_N / B-multicast split), 128B swizzle
  TmaDescriptor tma_sa;       ///< SA MN-major as 2D [G * KB, M_pad] fp32, box (rows, 1) (unused when SA is K-major)
  TmaDescriptor tma_d;        ///< D as 2D [rows, N] bf16, box (epilogue slab width, 64), swizzled like the smem tile
  TmaDescriptor tma_a_half;   ///< A like tma_a, box (128, min(a_box_rows, 128)) (gemm_has_a_half_box kernels only)
  // The scalars every role reads at its first tile come first, in one 64-byte line of the constant bank: each line
  // of parameters a thread touches first costs it a constant-cache miss (~200 ns on an H100 at a call's start).
  int32_t num_rows;           ///< M (normal), M_sum (contiguous), M_max (masked)
  int32_t num_a_rows;         ///< rows of the 2D A view: M, M_sum, or G * M_max
  int32_t num_groups;
  uint32_t b_evict_first;     ///< 1: B's tiles are read by few tiles, so B's lines are loaded evict-first (L2)
  uint32_t a_box_rows;        ///< rows of tma_a's box: BLOCK_M / A-multicast split, or fewer when A has fewer rows
  // Tail split (kernels instantiated with kTailSplit, dense GEMMs): tiles [0, tail_first_tile) are walked whole; each
  // later tile (the last, partial wave) is cut into tail_pieces ranges of K blocks run by different CTAs. Every piece
  // writes its fp32 partial sums to its slot and counts itself done; the last piece of a tile to finish adds all of
  // them in piece order (deterministic) and stores the tile. tail_first_tile = all tiles: nothing is cut.
  int32_t tail_first_tile;
  int32_t tail_pieces;
  uint32_t b_pairs;           ///< 1: B's issuer fills two stages per empty wait (kernels that allow it, see kBPairs)
  const float* sb;            ///< [G, NB, KB] fp32
  const int32_t* grouped_layout;  ///< m_indices (contiguous) or masked_m (masked)
  const float* sa_k_major;    ///< [rows, KB] fp32 with row stride ld_sa (K-major SA only)
  int64_t ld_sa;              ///< row stride of K-major SA, elements
  // Read later (epilogue, errors, tail split).
  uint16_t* d;                ///< D base pointer (bf16), for edge tiles written without TMA
  uint32_t* error_flags;      ///< device error buffer: word 0 the kError* bits (kErrorBufferWords)
  int64_t ld_d;               ///< row stride of D, elements
  float* tail_partials;       ///< (tail tiles * tail_pieces, BLOCK_M * BLOCK_N) fp32 slots
  uint32_t* tail_counters;    ///< (tail tiles): pieces done; zero between calls (the last piece resets it)
  uint32_t d_evict_first;     ///< 1: D's TMA stores carry the L2 evict-first hint (outputs larger than the L2)
};

// The scalars read at a tile's start (num_rows .. ld_sa) fill one 64-byte line: they start on a 64-byte boundary of
// the struct, which the TMA descriptors' 64-byte alignment places on one in the constant bank. (Checked where the
// host compiler builds this header; NVRTC has no offsetof.)
#if !defined(__CUDACC_RTC__)
static_assert(__builtin_offsetof(GemmArgs, num_rows) % 64 == 0 &&
                  __builtin_offsetof(GemmArgs, ld_sa) + sizeof(int64_t) - __builtin_offsetof(GemmArgs, num_rows) <= 64,
              "GemmArgs: the first-tile scalars must share one 64-byte line");
#endif

}  // namespace finegemm::device
