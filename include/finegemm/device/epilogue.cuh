// GEMM epilogue: fp32 accumulators -> bf16 -> stmatrix into a swizzled shared tile -> TMA store (or, for grouped edge
// tiles and a dense GEMM's moved-up last row block, row-checked vector stores), overlapped with the next tile's main
// loop.
#pragma once

#include "finegemm/device/common/gemm_args.cuh"
#include "finegemm/device/common/gemm_layout.cuh"
#include "finegemm/device/common/types.cuh"
#include "finegemm/device/scheduler.cuh"
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "finegemm/device/ptx/ld_st.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/ptx/sync.cuh"
#include "finegemm/device/ptx/tma.cuh"
#endif

namespace finegemm::device {

/// The shared output tile: kStoreCols / kSlabCols slabs of (BLOCK_M, kSlabCols) bf16 or fp32 (kOutBytes 2 or 4), each
/// swizzled the way TMA's kSwizzleBytes mode expects, so stmatrix rows of one 8x8 matrix (bf16) and the float2 pairs
/// of 8 rows (fp32) land in distinct banks. It holds the tile's columns kStoreCols at a time (gemm_store_cols).
/// Parts go out through kStoreBuffers shared buffers in turn (gemm_store_buffers). `kTransposed` (gemm_d_transposed):
/// the tile's rows are D's columns, and the shared tile holds it transposed: fp32 parts as offset_transposed says,
/// a bf16 tile whole as offset_transposed_bf16 says.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kOutBytes = 2, uint32_t kStoreCols = BLOCK_N,
          uint32_t kStoreBuffers = 1, bool kTransposed = false>
struct EpilogueTile {
  static_assert(BLOCK_N % 16 == 0, "stmatrix x4 covers 16 columns");
  static_assert(kOutBytes == 2 || kOutBytes == 4, "bf16 or fp32 output");
  static_assert(kStoreCols == BLOCK_N || kOutBytes == 4, "bf16 tiles are stored whole");
  static constexpr uint32_t kSwizzleBytes = epilogue_swizzle_bytes(BLOCK_N, kOutBytes);
  static constexpr uint32_t kSlabCols = epilogue_slab_cols(BLOCK_N, kOutBytes);
  static constexpr uint32_t kSlabRowBytes = kSlabCols * kOutBytes;
  /// Columns of one 16-byte chunk of a row.
  static constexpr uint32_t kChunkCols = 16 / kOutBytes;
  static_assert(kStoreCols % kSlabCols == 0 && BLOCK_N % kSlabCols == 0, "parts of whole slabs");
  static constexpr uint32_t kNumSlabs = kStoreCols / kSlabCols;
  /// Parts the tile's columns go out in (the last may be narrower).
  static constexpr uint32_t kNumParts = ceil_div(BLOCK_N, kStoreCols);
  static constexpr uint32_t kSlabBytes = BLOCK_M * kSlabRowBytes;
  /// One buffer: a part's slabs (1024-aligned, as the layout's kDTileBytes).
  static constexpr uint32_t kBufferBytes = align_up(kNumSlabs * kSlabBytes, 1024u);
  static_assert(kStoreBuffers == 1 || (kStoreBuffers <= 4 && kNumParts > 1 && kOutBytes == 4),
                "fp32 parts may go through up to four buffers in turn");
  static constexpr uint32_t kSwizzleMask = kSwizzleBytes / 16 - 1;
  static constexpr uint32_t kRowsPerWarpgroup = 64;
  static constexpr uint32_t kStoreColumns = kStoreCols;

  /// kTransposed: a part's buffer as slabs of 32 tile rows, each the part's columns as 128-byte rows of 32 floats (one
  /// row of D's, 32 of its columns), swizzled as TMA's 128-byte mode expects: the TMA box (32 columns, kStoreCols rows
  /// of D) of one slab, two per warpgroup. A warp's 32 scalar stores of one accumulator register (8 tile rows, 4
  /// columns 2 apart) then fall in 8 distinct 16-byte chunks: no bank conflict.
  static_assert(!kTransposed || BLOCK_M % 64 == 0, "transposed: whole 64-row warpgroups");
  static_assert(!kTransposed || kOutBytes == 2 || kStoreCols <= 256, "transposed: fp32 parts of at most 256 columns");
  static constexpr uint32_t kTransposedSlabRows = 32;
  static constexpr uint32_t kTransposedSlabBytes = kStoreCols * 128;
  static_assert(!kTransposed || BLOCK_M * kStoreCols * kOutBytes <= kBufferBytes, "a transposed part fits the buffer");

  /// kTransposed bf16 tiles: one slab per math warpgroup, its 64 tile rows (64 of D's columns, 128 bytes) by the
  /// BLOCK_N tile columns (D's rows), as one TMA box of (64 columns, BLOCK_N rows of D) in 128-byte swizzle: tile
  /// column c is the slab's row c, and its 16-byte chunk k (tile rows 8k..8k+7 of the slab) sits at chunk k ^ (c % 8).
  static constexpr uint32_t kTransposedBf16SlabBytes = BLOCK_N * 128;
  static FG_HOST_DEVICE uint32_t offset_transposed_bf16(uint32_t row, uint32_t col) {
    return (row / 64) * kTransposedBf16SlabBytes + col * 128 + ((((row % 64) / 8) ^ (col % 8)) << 4) + (row % 8) * 2;
  }
  /// The row address a math thread gives stmatrix.trans for the tile's 16 columns from 16 i (warp_in_wg, lane: its
  /// place in warpgroup math_wg): matrix lane / 8 holds tile rows 16 warp_in_wg + 8 (lane / 8 % 2) + [0, 8) and columns
  /// 16 i + 8 (lane / 16) + [0, 8); the lane's stored row is its column lane % 8. The swizzle depends on the column's
  /// low three bits only, so the address for column group i is the one for 0 plus i * 16 rows of 128 bytes.
  static FG_HOST_DEVICE uint32_t stmatrix_trans_offset(uint32_t math_wg, uint32_t warp_in_wg, uint32_t lane,
                                                       uint32_t i) {
    return offset_transposed_bf16(math_wg * 64 + warp_in_wg * 16 + 8 * (lane / 8 % 2),
                                  16 * i + 8 * (lane / 16) + lane % 8);
  }

  /// Byte offset of tile element (row, col) in a transposed part's buffer (col: the column within the part).
  static FG_HOST_DEVICE uint32_t offset_transposed(uint32_t row, uint32_t col) {
    const uint32_t off = col * 128 + (row % kTransposedSlabRows) * 4;
    return (row / kTransposedSlabRows) * kTransposedSlabBytes + (off ^ (((off >> 7) & 7) << 4));
  }

  /// offset_transposed of a math thread's elements, in two pieces: a thread of the wgmma layout (row0 = its first row,
  /// a multiple of 16 plus lane / 4; q = lane % 4) holds rows row0 + 8h and columns 8j + 2q + e. The row's 4-byte
  /// offset in the slab row, (row % 32) * 4, has bit 5 clear (row0 % 16 < 8) and the swizzle XORs bits 4-6 with the
  /// column's low three bits (2q + e), so offset_transposed(row0 + 8h, 8j + 2q + e) = lane_base(row0, q) + (8j + e) *
  /// 128 + (lane_swizzle(row0, q) ^ (h << 5 | e << 4)): a per-lane base and four per-lane XOR values, the rest
  /// immediates (computed in full per element, ptxas kept 16 offsets per thread and spilled at 128x176).
  static FG_HOST_DEVICE uint32_t lane_base(uint32_t row0, uint32_t q) {
    return (row0 / kTransposedSlabRows) * kTransposedSlabBytes + 2 * q * 128;
  }
  static FG_HOST_DEVICE uint32_t lane_swizzle(uint32_t row0, uint32_t q) {
    return ((row0 % kTransposedSlabRows) * 4) ^ (q << 5);
  }

  /// Byte offset of (row, col) in the shared tile; col is a multiple of kChunkCols (one 16-byte chunk), or, fp32, of 2
  /// (a float2 inside a chunk: the swizzle moves whole chunks).
  static FG_HOST_DEVICE uint32_t offset(uint32_t row, uint32_t col) {
    uint32_t off = row * kSlabRowBytes + (col % kSlabCols) * kOutBytes;
    off ^= ((off >> 7) & kSwizzleMask) << 4;
    return (col / kSlabCols) * kSlabBytes + off;
  }

  /// offset(row, i * 16 + col0) from offset(row, col0), col0 in {0, 8}: the swizzle XORs the 16-byte chunk index
  /// inside a slab row, and chunk (2i + col0 / 8) mod kSlabCols / 8 differs from chunk col0 / 8 by XOR (2i mod
  /// kSlabCols / 8), so each stmatrix address is one XOR with a constant plus an immediate offset from one per-lane
  /// base instead of the full swizzle arithmetic (ptxas may still keep the results in registers across the tile
  /// loop where it has them to spare). Also valid with a 1024-aligned base added.
  static FG_HOST_DEVICE uint32_t chunk_offset(uint32_t offset_col0, uint32_t i) {
    return (offset_col0 ^ (((2 * i) % (kSlabCols / 8)) << 4)) + (i * 16 / kSlabCols) * kSlabBytes;
  }

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  /// Writes the tile's kNumWaves x 64 rows of this warpgroup: wave w holds tile rows w * wave_rows + math_wg * 64 + [0,
  /// 64) (in a wide tile, rows math_wg * 64 + [0, 64) of columns w * BLOCK_N + [0, BLOCK_N); shared rows as for
  /// another tile). bf16: all waves go through stmatrix before the (one) wait for the previous tile's store.
  template <uint32_t kNumWaves>
  static FG_DEVICE void store(const float (&acc)[kNumWaves][BLOCK_N / 2], uint8_t* smem_d, uint32_t math_wg,
                              uint32_t wave_rows, uint32_t warp_in_wg, uint32_t lane, uint32_t wg_thread,
                              uint32_t wg_barrier, const Tile& tile, const GemmArgs& args, uint32_t n) {
    static_assert(kOutBytes == 2, "bf16 tiles; fp32 ones go through store_f32");
    // The previous tile's TMA store must be done reading the shared tile.
    if (wg_thread == 0) ptx::tma_store_wait_read<0>();
    ptx::named_barrier_sync(wg_barrier, 128);

#pragma unroll
    for (uint32_t w = 0; w < kNumWaves; ++w) {
      const uint32_t row = w * wave_rows + math_wg * kRowsPerWarpgroup + warp_in_wg * 16 + lane % 16;
      const uint32_t lane_offset = ptx::opaque(offset(row, 8 * (lane / 16)));
#pragma unroll
      for (uint32_t i = 0; i < BLOCK_N / 16; ++i) {
        ptx::stmatrix_x4(smem_d + chunk_offset(lane_offset, i), ptx::cvt_bf16x2(acc[w][i * 8 + 0], acc[w][i * 8 + 1]),
                         ptx::cvt_bf16x2(acc[w][i * 8 + 2], acc[w][i * 8 + 3]),
                         ptx::cvt_bf16x2(acc[w][i * 8 + 4], acc[w][i * 8 + 5]),
                         ptx::cvt_bf16x2(acc[w][i * 8 + 6], acc[w][i * 8 + 7]));
      }
    }
    write_out<kNumWaves>(smem_d, math_wg, wave_rows, wg_thread, wg_barrier, tile, args, n, 0, BLOCK_N);
  }

  /// The bf16 tile on D^T's grid (kTransposed): stmatrix.trans into this warpgroup's slab (offset_transposed_bf16),
  /// then one TMA store of it into D (its rows past D's end clipped), once the previous tile's store has read it.
  static FG_DEVICE void store_transposed(const float (&acc)[1][BLOCK_N / 2], uint8_t* smem_d, uint32_t math_wg,
                                         uint32_t wg_thread, uint32_t wg_barrier, const Tile& tile,
                                         const GemmArgs& args) {
    static_assert(kTransposed && kOutBytes == 2, "bf16 tiles of D^T; fp32 ones go through store_f32");
    if (wg_thread == 0) ptx::tma_store_wait_read<0>();
    ptx::named_barrier_sync(wg_barrier, 128);
    // The thread's place from threadIdx.x read here, as store_f32's transposed parts do (values kept from the
    // kernel's start stay live across the K loop).
    const uint32_t tid = ptx::thread_index();
    const uint32_t lane_offset = stmatrix_trans_offset(tid / 128, tid % 128 / 32, tid % 32, 0);
#pragma unroll
    for (uint32_t i = 0; i < BLOCK_N / 16; ++i) {
      ptx::stmatrix_x4_trans(smem_d + lane_offset + i * 16 * 128,
                             ptx::cvt_bf16x2(acc[0][i * 8 + 0], acc[0][i * 8 + 1]),
                             ptx::cvt_bf16x2(acc[0][i * 8 + 2], acc[0][i * 8 + 3]),
                             ptx::cvt_bf16x2(acc[0][i * 8 + 4], acc[0][i * 8 + 5]),
                             ptx::cvt_bf16x2(acc[0][i * 8 + 6], acc[0][i * 8 + 7]));
    }
    ptx::fence_proxy_async_shared();
    ptx::named_barrier_sync(wg_barrier, 128);
    if (wg_thread == 0) {
      ptx::tma_store_2d(&args.tma_d, smem_d + math_wg * kTransposedBf16SlabBytes,
                        tile.row_base + int32_t(math_wg * kRowsPerWarpgroup), int32_t(tile.n_block * BLOCK_N));
      ptx::tma_store_commit_group();
    }
  }

  /// The fp32 tile: each thread's accumulator pairs (rows r0 and r0 + 8, columns 8j + 2q and 8j + 2q + 1 of the wgmma
  /// layout) as float2 into the shared tile, plus C's value at the same place when `kAddC` (C's tile was loaded there
  /// by TMA: the producer issued it at the tile's start, `c_full` says it arrived). Each thread reads and writes only
  /// its own elements, so C and D share the tile without a barrier between the read and the write. Without C, the
  /// previous tile's store must be done reading first; with C, the producer's load waited for that (c_empty). With
  /// `kAddToD` the tile is reduced into D (D += tile) instead of stored.
  template <bool kAddC, bool kAddToD, uint32_t kNumWaves>
  static FG_DEVICE void store_f32(const float (&acc)[kNumWaves][BLOCK_N / 2], uint8_t* smem_d, uint32_t math_wg,
                                  uint32_t wave_rows, uint32_t warp_in_wg, uint32_t lane, uint32_t wg_thread,
                                  uint32_t wg_barrier, const Tile& tile, const GemmArgs& args, uint32_t n,
                                  uint64_t* c_full, uint32_t c_phase) {
    static_assert(kOutBytes == 4, "fp32 tiles");
    static_assert(!kAddC || kNumParts == 1, "C's tile is loaded whole");
    if constexpr (kAddC) ptx::mbarrier_wait(c_full, c_phase);
#pragma unroll
    for (uint32_t part = 0; part < kNumParts; ++part) {
      // The part's buffer is free once the stores that last read it have (wait_for_buffer).
      uint8_t* const buffer = smem_d + (part % kStoreBuffers) * kBufferBytes;
      if constexpr (!kAddC) {
        if (wg_thread == 0) wait_for_buffer(part);
        ptx::named_barrier_sync(wg_barrier, 128);
      }
      constexpr uint32_t kPartQuads = kStoreCols / 8;
#pragma unroll
      for (uint32_t w = 0; w < kNumWaves; ++w) {
        const uint32_t row = w * wave_rows + math_wg * kRowsPerWarpgroup + warp_in_wg * 16 + lane / 4;
#pragma unroll
        for (uint32_t j = part * kPartQuads; j < min_of((part + 1) * kPartQuads, BLOCK_N / 8); ++j) {
#pragma unroll
          for (uint32_t h = 0; h < 2; ++h) {
            if constexpr (kTransposed) {
              // The thread's row from threadIdx.x read here (one 64-row wave per warpgroup): values derived from the
              // kernel's lane and warp indices stayed live across the K loop, and ptxas spilled them at 128x176.
              static_assert(kNumWaves == 1, "transposed tiles: 128 rows, one wave per warpgroup");
              const uint32_t tid = ptx::thread_index();
              const uint32_t my_row = tid / 128 * kRowsPerWarpgroup + tid % 128 / 32 * 16 + tid % 32 / 4;
              const uint32_t base = lane_base(my_row, tid % 4);
              const uint32_t swizzle = lane_swizzle(my_row, tid % 4);
#pragma unroll
              for (uint32_t e = 0; e < 2; ++e) {
                const uint32_t off = base + (8 * (j - part * kPartQuads) + e) * 128 + (swizzle ^ (h << 5 | e << 4));
                ptx::st_shared_f32(reinterpret_cast<float*>(buffer + off), acc[w][j * 4 + 2 * h + e]);
              }
              continue;
            }
            float* dst = reinterpret_cast<float*>(
                buffer + offset(row + 8 * h, 8 * (j - part * kPartQuads) + 2 * (lane % 4)));
            float2 v = make_float2(acc[w][j * 4 + 2 * h], acc[w][j * 4 + 2 * h + 1]);
            if constexpr (kAddC) {
              const float2 c = ptx::ld_shared_v2_f32(dst);
              v.x += c.x;
              v.y += c.y;
            }
            ptx::st_shared_v2_f32(dst, v);
          }
        }
      }
      write_out<kNumWaves, kAddToD>(buffer, math_wg, wave_rows, wg_thread, wg_barrier, tile, args, n,
                                    part * kStoreCols, min_of(kStoreCols, BLOCK_N - part * kStoreCols));
    }
  }

  /// Waits until part `part`'s buffer is no longer read by the stores that last used it: those of part `part` -
  /// kStoreBuffers, with the parts after it still pending; for the first parts, the previous tile's (long done by
  /// then: the first part waits for all of them). `part` is a constant once the part loop is unrolled.
  static FG_DEVICE void wait_for_buffer(uint32_t part) {
    switch (min_of(part, kStoreBuffers - 1)) {
      case 0: ptx::tma_store_wait_read<0>(); break;
      case 1: ptx::tma_store_wait_read<1>(); break;
      case 2: ptx::tma_store_wait_read<2>(); break;
      default: ptx::tma_store_wait_read<3>(); break;
    }
  }

  /// This warpgroup's rows of the shared tile to D: TMA stores of whole slabs, or, for grouped edge tiles and a dense
  /// GEMM's moved-up last row block, row-checked 16-byte stores. Commits the stores as one bulk group. `kReduce`
  /// (fp32): TMA reductions and atomic adds into D instead of stores. The shared tile holds the tile's columns
  /// [part_col0, part_col0 + part_cols) (a compile-time constant once the part loop is unrolled).
  template <uint32_t kNumWaves, bool kReduce = false>
  static FG_DEVICE void write_out(uint8_t* smem_d, uint32_t math_wg, uint32_t wave_rows, uint32_t wg_thread,
                                  uint32_t wg_barrier, const Tile& tile, const GemmArgs& args, uint32_t n,
                                  uint32_t part_col0, uint32_t part_cols) {
    const uint32_t n_start = tile.n_block * BLOCK_N + part_col0;
    ptx::fence_proxy_async_shared();
    ptx::named_barrier_sync(wg_barrier, 128);

#pragma unroll
    for (uint32_t w = 0; w < kNumWaves; ++w) {
      const uint32_t wg_row0 = w * wave_rows + math_wg * kRowsPerWarpgroup;  // in the shared tile
      // In the output: the tile's row out_row0 and column out_col0 (wide tiles: wave w's n-block).
      const uint32_t out_row0 = tile.wide ? math_wg * kRowsPerWarpgroup : wg_row0;
      const uint32_t out_col0 = n_start + (tile.wide ? w * BLOCK_N : 0);
      // This warpgroup's rows [row_lo, row_hi) are the tile's to write.
      const int32_t row_lo = min_of(int32_t(kRowsPerWarpgroup), max_of(0, tile.first_row - int32_t(out_row0)));
      const int32_t row_hi = min_of(int32_t(kRowsPerWarpgroup), max_of(0, tile.row_limit - int32_t(out_row0)));
      if constexpr (kTransposed) {
        // The tiles are whole (the kernel's rows are a multiple of BLOCK_M): this warpgroup's two slabs, TMA clipping
        // D's rows (the tile's columns) past its end.
        static_assert(kReduce, "transposed tiles are reduced into D");
        if (wg_thread == 0) {
#pragma unroll
          for (uint32_t s = 0; s < kRowsPerWarpgroup / kTransposedSlabRows; ++s) {
            const uint32_t slab_row0 = wg_row0 + s * kTransposedSlabRows;
            // A last part narrower than kStoreCols (BLOCK_N % 32 columns) goes through a descriptor of its height.
            const TmaDescriptor* map = part_cols < kStoreCols ? &args.tma_c : &args.tma_d;
            ptx::tma_reduce_add_2d(map, smem_d + (slab_row0 / kTransposedSlabRows) * kTransposedSlabBytes,
                                   tile.row_base + int32_t(slab_row0), int32_t(n_start));
          }
        }
      } else if (row_lo == 0 && row_hi == int32_t(kRowsPerWarpgroup) && !tile.check_rows) {
        // Full rows: TMA clips columns >= N and rows past the tensor.
        if (wg_thread == 0) {
          // D's lines evict-first (args.d_evict_first, decided on the host) where the output outgrows the L2: they
          // then replace each other rather than the operands' lines that later tiles read again.
          const bool hinted = args.d_evict_first != 0;
          const uint64_t policy = hinted ? ptx::l2_policy_evict_first() : 0;
#pragma unroll
          for (uint32_t slab = 0; slab < kNumSlabs; ++slab) {
            if (slab * kSlabCols >= part_cols) break;
            const void* src = smem_d + slab * kSlabBytes + wg_row0 * kSlabRowBytes;
            const int32_t col = int32_t(out_col0 + slab * kSlabCols), row = tile.row_base + int32_t(out_row0);
            if (kReduce)
              ptx::tma_reduce_add_2d(&args.tma_d, src, col, row);
            else if (hinted)
              ptx::tma_store_2d_hinted(&args.tma_d, src, col, row, policy);
            else
              ptx::tma_store_2d(&args.tma_d, src, col, row);
          }
        }
      } else if (row_hi > row_lo) {
        // Grouped edge tile or a dense last row block moved up: write only the tile's rows (and, for the contiguous
        // layout, rows of this expert).
        // Contiguous: each warp reads the 64 rows' expert ids once (two loads per lane, in parallel) into a mask,
        // instead of one dependent load per 16-byte chunk.
        uint32_t mine_lo = 0xffffffffu, mine_hi = 0xffffffffu;  // bit r: row wg_row0 + r (+ 32) is this expert's
        if (tile.check_rows) {
          const uint32_t lane = wg_thread % 32;
          const int32_t lane_row_lo = tile.row_base + int32_t(out_row0 + lane);
          const int32_t lane_row_hi = lane_row_lo + 32;
          const int32_t expert_lo =
              lane_row_lo < args.num_a_rows ? ptx::ld_global_s32(args.grouped_layout + lane_row_lo) : -1;
          const int32_t expert_hi =
              lane_row_hi < args.num_a_rows ? ptx::ld_global_s32(args.grouped_layout + lane_row_hi) : -1;
          mine_lo = __ballot_sync(0xffffffffu, expert_lo == tile.group);
          mine_hi = __ballot_sync(0xffffffffu, expert_hi == tile.group);
          // The tile's rows hold its expert or -1 in a consistent m_indices (a block holds one expert from its first
          // row on, then padding); another expert's row is left unwritten and raises kErrorExpertIdInconsistent.
          // NOTE: only blocks whose probed rows differ take this path: a wrong id strictly inside a block whose
          // first and last rows agree is computed as the block's expert, unflagged (checking every block would cost
          // its loads on the common path).
          const bool other_lo = int32_t(lane) >= row_lo && int32_t(lane) < row_hi && expert_lo != tile.group &&
                                expert_lo != -1;
          const bool other_hi = int32_t(lane) + 32 >= row_lo && int32_t(lane) + 32 < row_hi &&
                                expert_hi != tile.group && expert_hi != -1;
          if (__any_sync(0xffffffffu, other_lo || other_hi) && wg_thread == 0)
            ptx::atomic_or_global(args.error_flags, kErrorExpertIdInconsistent);
        }
        const uint32_t chunks_per_row = part_cols / kChunkCols;
        const uint32_t num_chunks = uint32_t(row_hi - row_lo) * chunks_per_row;
        for (uint32_t c = wg_thread; c < num_chunks; c += 128) {
          const uint32_t r = uint32_t(row_lo) + c / chunks_per_row;
          const uint32_t col = (c % chunks_per_row) * kChunkCols;
          const uint32_t global_col = out_col0 + col;
          const int32_t global_row = tile.row_base + int32_t(out_row0 + r);
          if (global_col >= n || global_row >= args.num_a_rows) continue;
          if ((((r < 32 ? mine_lo : mine_hi) >> (r % 32)) & 1u) == 0) continue;
          uint32_t v[4];
          ptx::ld_shared_v4_b32(smem_d + offset(wg_row0 + r, col), v);
          uint8_t* dst = args.d + (int64_t(global_row) * args.ld_d + global_col) * kOutBytes;
          if constexpr (kReduce) {
#pragma unroll
            for (uint32_t e = 0; e < 4; ++e) ptx::red_add_global_f32(reinterpret_cast<float*>(dst) + e, __uint_as_float(v[e]));
          } else {
            ptx::st_global_v4_b32(dst, v);
          }
        }
      }
    }
    if (wg_thread == 0) ptx::tma_store_commit_group();
  }
#endif
};

}  // namespace finegemm::device
