// Run-time arguments of the GEMM kernels, filled on the host and passed by value as one __grid_constant__ parameter.
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::device {

struct GemmArgs {
  TmaDescriptor tma_a;        ///< A as 2D [rows, K] fp8, box (128, a_box_rows), 128B swizzle
  TmaDescriptor tma_b;        ///< B as 2D [G * N, K] fp8, box (128, BLOCK_N), 128B swizzle
  TmaDescriptor tma_sa;       ///< SA MN-major as 2D [G * KB, M_pad] fp32, box (rows, 1) (unused when SA is K-major)
  /// D as 2D [rows, N] bf16 or fp32, box (epilogue slab width, 64), swizzled like the smem tile (kOutF32AddToDT: D as
  /// the call gives it, box (32, 32): a slab of a transposed part; kOutBf16DT: box (64, BLOCK_N), a warpgroup's slab)
  TmaDescriptor tma_d;
  TmaDescriptor tma_a_half;   ///< A like tma_a, box (128, min(a_box_rows, 128)) (gemm_has_a_half_box kernels only)
  TmaDescriptor tma_sb;       ///< 1x128 SB MN-major as 2D [G * KB, N_pad] fp32, box (BLOCK_N, 1) (kSbRowMnMajor only)
  /// C like tma_d, fp32 (kOutF32AddC); with kOutF32AddToDT, D with the box of a tile's last part where it is
  /// narrower than the others (BLOCK_N % 32 rows of D)
  TmaDescriptor tma_c;
  // The scalars every role reads at its first tile come first, in one 64-byte line of the constant bank: each line
  // of parameters a thread touches first costs it a constant-cache miss (~200 ns on an H100 at a call's start).
  int32_t num_rows;           ///< M (normal), M_sum (contiguous), M_max (masked)
  int32_t num_a_rows;         ///< rows of the 2D A view: M, M_sum, or G * M_max
  int32_t num_groups;
  uint32_t b_evict_first;     ///< 1: B's tiles are read by few tiles, so B's lines are loaded evict-first (L2)
  uint32_t a_box_rows;        ///< rows of tma_a's box: BLOCK_M, or fewer when A has fewer rows
  uint32_t b_pairs;           ///< 1: B's issuer fills two stages per empty wait (kernels that allow it, see kBPairs)
  int32_t psum_alignment;     ///< psum layout: each group starts at the previous end rounded up to this (128, 64, 32)
  /// Set in a launch with programmatic dependent launch only: K blocks of B prefetched into the L2 before the wait,
  /// and the next kernel launched from there (0: neither). Read by B's issuer before the wait.
  uint32_t pdl_prefetch_b_blocks;
  const float* sb;            ///< [G, NB, KB] fp32
  const int32_t* grouped_layout;  ///< m_indices (contiguous), masked_m (masked), group ends (psum) or ks (K-grouped)
  /// SA itself where a kernel reads it without its tensor map: K-major [rows, KB] with row stride ld_sa (gathered),
  /// or MN-major [KB][M_pad] loaded once by bulk copies (kSaMnMajorOnce with M_pad = 4, kSaMnMajorOnce16); else null
  const float* sa;
  int64_t ld_sa;              ///< SA's stride, elements: between rows (K-major) or K blocks (MN-major, M_pad)
  // Read later (epilogue, errors).
  uint8_t* d;                 ///< D base pointer (bf16 or fp32), for edge tiles written without TMA
  uint32_t* error_flags;      ///< device error word: the kError* bits
  int64_t ld_d;               ///< row stride of D, elements
  uint32_t d_evict_first;     ///< 1: D's TMA stores carry the L2 evict-first hint (outputs larger than the L2)
  // K-grouped GEMM only (GemmKind::kGroupedK): tma_a and tma_b are templates whose address, K extent and row stride
  // each CTA rewrites per group into its own four descriptors here (A's two, then B's two; 128 bytes each).
  TmaDescriptor* k_grouped_maps;  ///< gridDim.x * 4 descriptors in global memory, 128-byte aligned
  const uint8_t* a_base;      ///< A's flat fp8 data: group g's [M, K_g] block at element M * (K_0 + ... + K_{g-1})
  const uint8_t* b_base;      ///< B's, likewise with N rows
  int32_t total_k;            ///< K_0 + ... + K_{G-1}: the K extent A and B hold (a larger sum of K_g is an error)
  /// D += A x B^T (kOutF32AddToD) in a dense or K-grouped GEMM: A's issuer prefetches D's tile into the L2 as it
  /// issues the tile's K block this many blocks before the end (1: the last), so that the epilogue reduces into lines
  /// the L2 holds (0: no prefetch). Set by the heuristic (KernelConfig::d_prefetch_lead).
  uint32_t d_prefetch_lead;
};

// The scalars read at a tile's start (num_rows .. ld_sa) share one 64-byte line: they start on a 64-byte boundary of
// the struct, which the TMA descriptors' 64-byte alignment places on one in the constant bank. (Checked where the
// host compiler builds this header; NVRTC has no offsetof.)
#if !defined(__CUDACC_RTC__)
static_assert(__builtin_offsetof(GemmArgs, num_rows) % 64 == 0 &&
                  __builtin_offsetof(GemmArgs, ld_sa) + sizeof(int64_t) - __builtin_offsetof(GemmArgs, num_rows) <= 64,
              "GemmArgs: the first-tile scalars must share one 64-byte line");
#endif

}  // namespace finegemm::device
