// The producer warpgroup of the GEMM kernel: A's TMA issuer, B's TMA issuer and the scale warp fill the stage ring.
// Each waits for a stage to be empty, announces its bytes on the stage's full barrier and issues its loads; the math
// warpgroups wait on that barrier (Cfg::kFullArrivals arrivals and the announced bytes).
#pragma once

#include "finegemm/device/common/gemm_args.cuh"
#include "finegemm/device/gemm/pipeline.cuh"
#include "finegemm/device/gemm/traits.cuh"
#include "finegemm/device/ptx/ld_st.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/ptx/tma.cuh"
#include "finegemm/device/scheduler.cuh"

namespace finegemm::device {

/// The shared-memory carve-up of a kernel instance (offsets: GemmSmemLayout).
struct GemmSmem {
  uint8_t* d;                 // (BLOCK_M, BLOCK_N) bf16 or fp32, swizzled slabs (C's tile first, with kOutF32AddC)
  uint8_t* a;                 // (kNumStages, BLOCK_M, BLOCK_K) fp8
  uint8_t* b;                 // (kNumStages, BLOCK_N, BLOCK_K) fp8
  float* sa;                  // (kNumStages, BLOCK_M, 1 or 4) fp32
  float* sb;                  // (kNumStages, 2) fp32, or (kNumStages, BLOCK_N) fp32 for 1x128 scales of B
  uint64_t* full_barriers;    // (kNumStages)
  uint64_t* empty_barriers;   // (kNumStages)
  uint64_t* exchange_full;    // split-K: partial sums arrived (used in CTA 0)
  uint64_t* exchange_empty;   // split-K: CTA 0 consumed them (used in CTA 1)
  float* exchange;            // split-K: (BLOCK_M, BLOCK_N) fp32
  uint64_t* c_full;           // C loaded (Cfg::kAddC): (kNumDTiles) C's tile arrived in shared tile i
  uint64_t* c_empty;          // C loaded: (kNumDTiles) the math warpgroups' stores are done reading shared tile i
  uint64_t* sa_full;          // SA loaded once (gemm_sa_once): every K block's row scales arrived in `sa`
};

/// Which shared output tile, and which phase of its barriers, the n-th tile a CTA walks uses where C is loaded: the
/// tiles take the kNumDTiles shared tiles in turn.
/// (One shared tile: the phase alone, toggled per tile; counting tiles there made the math warpgroups of the 64x96
/// kernel with a C other than D spill.)
template <class Cfg>
struct CTileTurn {
  uint32_t index = 0;  // two shared tiles: tiles walked so far
  uint32_t toggle = 0;  // one shared tile: the phase
  FG_DEVICE uint32_t slot() const { return Cfg::kNumDTiles == 1 ? 0 : index % Cfg::kNumDTiles; }
  FG_DEVICE uint32_t phase() const { return Cfg::kNumDTiles == 1 ? toggle : (index / Cfg::kNumDTiles) & 1; }
  FG_DEVICE void advance() {
    if (Cfg::kNumDTiles == 1)
      toggle ^= 1;
    else
      ++index;
  }
};

/// C loaded (Cfg::kAddC): C's (BLOCK_M, BLOCK_N) tile into shared output tile `turn.slot()`, in the slabs and 64-row
/// boxes the epilogue stores D from (TMA fills rows and columns past C with zeros; they are not stored). Issued at the
/// tile's start, once the stores of the tile that last used that shared tile have read it: with one shared tile the
/// previous tile's, so that C arrives under the tile's K loop; with two (kOutF32AddCAhead), the tile before the
/// previous one's, so that it loads under the previous tile's K loop and epilogue too.
template <class Cfg>
FG_DEVICE void load_c_tile(const GemmArgs& args, const GemmSmem& smem, const Tile& tile, CTileTurn<Cfg> turn) {
  using Epilogue = typename Cfg::Epilogue;
  uint64_t* full = smem.c_full + turn.slot();
  uint8_t* dst = smem.d + turn.slot() * Cfg::Layout::kDTileBytes;
  ptx::mbarrier_wait(smem.c_empty + turn.slot(), turn.phase() ^ 1);
  ptx::mbarrier_arrive_expect_tx(full, Cfg::BLOCK_M * Cfg::BLOCK_N * 4);
#pragma unroll
  for (uint32_t r = 0; r < Cfg::BLOCK_M; r += Epilogue::kRowsPerWarpgroup) {
#pragma unroll
    for (uint32_t slab = 0; slab < Epilogue::kNumSlabs; ++slab) {
      ptx::tma_load_2d(&args.tma_c, full, dst + slab * Epilogue::kSlabBytes + r * Epilogue::kSlabRowBytes,
                       int32_t(tile.n_block * Cfg::BLOCK_N + slab * Epilogue::kSlabCols), tile.row_base + int32_t(r));
    }
  }
}

/// D's (BLOCK_M, BLOCK_N) tile into the L2, in the epilogue's boxes (those past D are clipped).
template <class Cfg>
FG_DEVICE void prefetch_d_tile(const GemmArgs& args, const Tile& tile) {
  using Epilogue = typename Cfg::Epilogue;
  if constexpr (Cfg::kDTransposed) {
    // The tile's rows are D's columns: boxes of (32 columns, a part's rows of D).
#pragma unroll
    for (uint32_t r = 0; r < Cfg::BLOCK_M; r += Epilogue::kTransposedSlabRows) {
#pragma unroll
      for (uint32_t col = 0; col < Cfg::BLOCK_N; col += Epilogue::kStoreColumns)
        ptx::tma_prefetch_2d_l2(&args.tma_d, tile.row_base + int32_t(r), int32_t(tile.n_block * Cfg::BLOCK_N + col));
    }
  } else {
#pragma unroll
    for (uint32_t r = 0; r < Cfg::BLOCK_M; r += Epilogue::kRowsPerWarpgroup) {
#pragma unroll
      for (uint32_t col = 0; col < Cfg::BLOCK_N; col += Epilogue::kSlabCols)
        ptx::tma_prefetch_2d_l2(&args.tma_d, int32_t(tile.n_block * Cfg::BLOCK_N + col), tile.row_base + int32_t(r));
    }
  }
}

/// The K blocks of a tile this CTA computes: [kb_begin, kb_end(...)); K-grouped tiles have their group's.
template <class Cfg>
FG_DEVICE uint32_t tile_kb_end(const Tile& tile, uint32_t kb_begin) {
  if constexpr (Cfg::kRuntimeK) return uint32_t(tile.num_k_blocks);
  return kb_begin + Cfg::num_k_blocks_from(kb_begin);
}

/// K-grouped GEMM: one TMA issuer's descriptor of its operand's current group. A_g ([M, K_g], row stride K_g bytes)
/// and B_g differ per group in base and row stride, which one descriptor cannot address: at each group change the
/// issuer copies the host-encoded template (GemmArgs::tma_a / tma_b) into one of its two slots in global memory,
/// replaces the address, K extent and row stride (tensormap.replace), and fences it for the TMA unit. Two slots, so
/// that the previous group's loads, possibly still in flight, keep theirs; a slot is rewritten only once the loads
/// last issued through it completed: those of stage position p are complete once the math released position p,
/// which the issuer's own empty wait at position p + kNumStages shows (waited for here when not yet passed).
template <class Cfg>
struct GroupedKMaps {
  TmaDescriptor* slots;     // this issuer's two descriptors
  const TmaDescriptor* base;
  const uint8_t* data;      // the operand's flat fp8 data
  uint32_t rows;            // M or N: rows of every group's block
  int32_t group = -1;
  uint32_t slot = 1;
  uint32_t issued = 0;      // stage positions this issuer filled
  uint32_t last_use0 = 0, last_use1 = 0;  // `issued` after the last tile loaded through slot 0 / 1 (0: never used)

  /// The descriptor of `tile`'s group (rewritten into the other slot when the group changed).
  FG_DEVICE const TmaDescriptor* enter(const GemmSmem& smem, const Tile& tile) {
    TmaDescriptor* map = slots + slot;
    if (tile.group == group) return map;
    group = tile.group;
    slot ^= 1;
    map = slots + slot;
    const uint32_t last_use = slot == 0 ? last_use0 : last_use1;
    if (last_use != 0 && last_use + Cfg::kNumStages > issued) {
      // Position last_use - 1 was the slot's last: wait as the fill of position last_use - 1 + kNumStages will.
      const uint32_t q = last_use - 1 + Cfg::kNumStages;
      ptx::mbarrier_wait(&smem.empty_barriers[q % Cfg::kNumStages], ((q / Cfg::kNumStages) & 1) ^ 1);
    }
    const uint32_t k = uint32_t(tile.num_k_blocks) * kBlockK;
    ptx::tensormap_copy_to_global(map, base);
    ptx::tensormap_replace_global_address(map, data + uint64_t(rows) * uint64_t(tile.k_block0) * kBlockK);
    ptx::tensormap_replace_global_dim0(map, k);
    ptx::tensormap_replace_global_stride0(map, k);
    ptx::tensormap_fence_release();
    ptx::tensormap_fence_acquire(map);
    return map;
  }

  /// After a tile's `num_stages` stages were issued through the current slot.
  FG_DEVICE void used(uint32_t num_stages) {
    issued += num_stages;
    if (slot == 0)
      last_use0 = issued;
    else
      last_use1 = issued;
  }
};

/// Whether the SA loaded once comes by one bulk copy and, for its last K block, 4-byte copies (MN-major SA with
/// M_pad = 4, and kSaMnMajorOnce16, whose M_pad is at most 16) rather than by its tensor map. The copies then complete
/// the barrier `sa_full` with an arrival of their own, which it is initialized to expect (gemm_sa_once_arrivals).
template <class Cfg>
FG_DEVICE bool gemm_sa_once_by_copies(const GemmArgs& args) {
  return Cfg::kSaMode == kSaMnMajorOnce16 || (Cfg::kSaMode == kSaMnMajorOnce && args.sa != nullptr);
}

/// The arrivals `sa_full` expects: A's issuer's expect_tx, and that of its 4-byte copies where it issues them.
template <class Cfg>
FG_DEVICE uint32_t gemm_sa_once_arrivals(const GemmArgs& args) {
  return gemm_sa_once_by_copies<Cfg>(args) ? 2 : 1;
}

/// A's issuer: per stage, A's tile and, when SA goes by TMA, the stage's SA box (or, loaded once, all of SA first).
/// `kb_begin`: the first of the K blocks this CTA computes of each tile (split-K).
template <class Cfg>
FG_DEVICE void load_a_stages(const GemmArgs& args, const GemmSmem& smem, typename Cfg::Scheduler& scheduler,
                             uint32_t kb_begin) {
  using Layout = typename Cfg::Layout;
  PipelineState<Cfg::kNumStages> pipe;
  Tile tile;
  CTileTurn<Cfg> c_turn;
  GroupedKMaps<Cfg> maps{args.k_grouped_maps + blockIdx.x * 4, &args.tma_a, args.a_base, uint32_t(args.num_rows)};
  if constexpr (Cfg::kSaOnce) {
    // The call's (at most gemm_sa_once_rows) rows' scales of every K block, once: the same for all of this CTA's tiles.
    // MN-major SA is [KB][M_pad], in order: one bulk copy of its bytes (a TMA box of KB rows of 16 or 64 bytes measured
    // slower), but for the last K block, whose padding past the call's rows may lie past SA's allocation: its rows come
    // by 4-byte copies, gemm_sa_once_rows of them, the padding zero-filled as TMA fills it (M_pad = 16 at most, so the
    // shared copy of gemm_sa_once_rows floats per K block holds them).
    if (gemm_sa_once_by_copies<Cfg>(args)) {
      const uint32_t kb_stride = Cfg::kSaMode == kSaMnMajorOnce16 ? uint32_t(args.ld_sa) : Layout::kSaOnceKbStride;
      const uint32_t last_block = (Layout::kNumKBlocks - 1) * kb_stride;
#pragma unroll
      for (uint32_t r = 0; r < gemm_sa_once_rows(Cfg::kSaMode); ++r) {
        const bool valid = int32_t(r) < args.num_a_rows;
        ptx::cp_async_f32(smem.sa + last_block + r, args.sa + (valid ? last_block + r : 0), valid);
      }
      // An arrival the barrier expects (.noinc; synccheck reports the counting form, which adds one, as a missing wait).
      ptx::mbarrier_arrive_on_cp_async_noinc(smem.sa_full);
      ptx::mbarrier_arrive_expect_tx(smem.sa_full, last_block * 4);
      ptx::bulk_load(smem.sa, args.sa, last_block * 4, smem.sa_full);
    } else {
      ptx::mbarrier_arrive_expect_tx(smem.sa_full, Cfg::kSaOnceTxBytes);
      ptx::tma_load_2d(&args.tma_sa, smem.sa_full, smem.sa, 0, 0);
    }
  }
  while (scheduler.next(tile)) {
    if constexpr (Cfg::kAddC) {
      load_c_tile<Cfg>(args, smem, tile, c_turn);
      c_turn.advance();
    }
    // A masked GEMM's SA is [G * KB, M_max]: the group is in the K-block coordinate. A K-grouped GEMM's SA is
    // [sum KB_g, M]: rows of the group's own, from its first K block. (So are its A's rows: A_g is [M, K_g].)
    constexpr bool kGroupRows = Cfg::kGemmKind == GemmKind::kGroupedMasked || Cfg::kRuntimeK;
    const int32_t sa_row_base = kGroupRows ? tile.row_base - tile.group * args.num_rows : tile.row_base;
    const int32_t sa_kb_base = (Cfg::kGemmKind == GemmKind::kGroupedMasked) ? tile.group * int32_t(Cfg::kNumKBlocks)
                               : Cfg::kRuntimeK                             ? tile.k_block0
                                                                            : 0;
    // A with fewer rows than BLOCK_M comes in a box of only its rows (rounded up to 8, set on the host): a box reaching
    // many rows past the tensor's end measured up to 28% slower for the whole GEMM (H100). The smem rows left
    // unwritten feed only output rows that are not stored. Tiles of at most 128 rows of the kernels with a half box
    // load only those through a box of 128 rows.
    const bool a_half = Cfg::kAHalfBox && tile.compute_rows <= int32_t(Cfg::BLOCK_M / 2);
    const TmaDescriptor* tma_a = a_half ? &args.tma_a_half : &args.tma_a;
    if constexpr (Cfg::kRuntimeK) tma_a = maps.enter(smem, tile);
    const int32_t a_row = Cfg::kRuntimeK ? sa_row_base : tile.row_base;
    // (On D^T's tiles the kernel's rows are a multiple of BLOCK_M: the box is whole, a constant.)
    const uint32_t a_box_rows = Cfg::kDTransposed ? Cfg::BLOCK_M
                                : a_half          ? min_of(args.a_box_rows, Cfg::BLOCK_M / 2)
                                                  : args.a_box_rows;
    const uint32_t a_bytes = Cfg::kABytes - Layout::kABytesPerStage + a_box_rows * kBlockK;
    const uint32_t kb_end = tile_kb_end<Cfg>(tile, kb_begin);
#pragma unroll 1  // unrolled, the loop spilled out of the producer's 40 registers
    for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
      ptx::mbarrier_wait(&smem.empty_barriers[pipe.stage], pipe.phase ^ 1);
      uint64_t* full = &smem.full_barriers[pipe.stage];
      ptx::mbarrier_arrive_expect_tx(full, a_bytes);
      const int32_t k_idx = int32_t(kb * kBlockK);
      uint8_t* a_dst = smem.a + pipe.stage * Layout::kABytesPerStage;
      float* sa_dst = smem.sa + pipe.stage * Cfg::kSaFloatsPerStage;
      ptx::tma_load_2d(tma_a, full, a_dst, k_idx, a_row);
      if constexpr (Cfg::kSaMode == kSaMnMajor)
        ptx::tma_load_2d(&args.tma_sa, full, sa_dst, sa_row_base, sa_kb_base + int32_t(kb));
      // K-major: rows of the [rows, KB] view (a masked GEMM's group is in row_base), the 4 K blocks from kb & ~3 (a
      // box must start on a 16-byte boundary of the row: an unaligned start traps); the math reads column kb % 4.
      if constexpr (Cfg::kSaMode == kSaKMajorTma)
        ptx::tma_load_2d(&args.tma_sa, full, sa_dst, int32_t(kb & ~3u), tile.row_base);
      // 1x128 SB: the tile's columns of K block kb (a grouped GEMM's group is in the K-block coordinate; a
      // K-grouped one's K blocks start at the group's first).
      if constexpr (Cfg::kSbPerColumn)
        ptx::tma_load_2d(&args.tma_sb, full, smem.sb + pipe.stage * Cfg::kSbFloatsPerStage,
                         int32_t(tile.n_block * Cfg::BLOCK_N),
                         (Cfg::kRuntimeK ? tile.k_block0 : tile.group * int32_t(Cfg::kNumKBlocks)) + int32_t(kb));
      // D += A x B^T: D's tile into the L2 a few K blocks before the tile ends (GemmArgs::d_prefetch_lead), so that
      // the epilogue's reductions find its lines there instead of reading them from DRAM first.
      if constexpr (Cfg::kAddToD) {
        if (args.d_prefetch_lead != 0 && kb + args.d_prefetch_lead == kb_end) prefetch_d_tile<Cfg>(args, tile);
      }
      pipe.advance();
    }
    if constexpr (Cfg::kRuntimeK) maps.used(kb_end - kb_begin);
  }
}

/// B's tile of K block `kb` for tile `t` into `stage`; a wide tile's second B tile (`second`) goes to the A stage's
/// second half. B read by few tiles is loaded evict-first (args.b_evict_first, decided on the host): its lines then
/// replace each other rather than what else the L2 holds (A, which every tile reads; other kernels' lines, written
/// back first when dirty). Otherwise the plain load: a hinted one with an evict-normal policy measured slower.
/// `tma_b`: B's descriptor (K-grouped: the group's, whose rows are its own N).
template <class Cfg>
FG_DEVICE void load_b_tile(const GemmArgs& args, const GemmSmem& smem, const Tile& t, uint32_t stage, uint32_t kb,
                           bool second = false, const TmaDescriptor* tma_b = nullptr) {
  using Layout = typename Cfg::Layout;
  uint64_t* full = &smem.full_barriers[stage];
  const int32_t b_row = (Cfg::kRuntimeK ? 0 : t.group * int32_t(Cfg::N)) +
                        (t.n_block + int32_t(second)) * int32_t(Cfg::BLOCK_N);
  if (!Cfg::kRuntimeK) tma_b = &args.tma_b;
  const int32_t k_idx = int32_t(kb * kBlockK);
  uint8_t* b_dst = second ? smem.a + stage * Layout::kABytesPerStage + Cfg::kWideBOffset
                          : smem.b + stage * Layout::kBBytesPerStage;
  if (args.b_evict_first)
    ptx::tma_load_2d_hinted(tma_b, full, b_dst, k_idx, b_row, ptx::l2_policy_evict_first());
  else
    ptx::tma_load_2d(tma_b, full, b_dst, k_idx, b_row);
}

/// Before the PDL wait (dense GEMMs: their tiles are known without reading global memory): the first `num_blocks`
/// K blocks of B of this CTA's tiles, in the order its issuer will load them, prefetched into the L2. A prefetch reads
/// B no earlier than the L2 holds what any kernel wrote, so it is right whatever ran before.
template <class Cfg>
FG_DEVICE void prefetch_b_into_l2(const GemmArgs& args, typename Cfg::Scheduler scheduler, uint32_t kb_begin,
                                  uint32_t num_blocks) {
  static_assert(Cfg::kGemmKind == GemmKind::kNormal, "the tiles of a dense GEMM only");
  Tile tile;
#pragma unroll 1
  while (num_blocks > 0 && scheduler.next(tile)) {
    const int32_t b_row = tile.n_block * int32_t(Cfg::BLOCK_N);
#pragma unroll 1
    for (uint32_t kb = kb_begin; kb < tile_kb_end<Cfg>(tile, kb_begin) && num_blocks > 0; ++kb, --num_blocks)
      ptx::tma_prefetch_2d_l2(&args.tma_b, int32_t(kb * kBlockK), b_row);
  }
}

/// B's issuer: a thread of its own, since one thread issuing A, SA and B paced the narrow small-M tiles.
template <class Cfg>
FG_DEVICE void load_b_stages(const GemmArgs& args, const GemmSmem& smem, typename Cfg::Scheduler& scheduler,
                             uint32_t kb_begin) {
  PipelineState<Cfg::kNumStages> pipe;
  Tile tile;
  if (Cfg::kBPairs && args.b_pairs != 0) {
    // Two stages per empty wait, their loads back to back (each row's two 128-byte pieces of K close together in
    // time); a tile's odd last K block alone. The math releases stages in order, so the second stage's release
    // implies the first's (across the ring's wrap too).
    while (scheduler.next(tile)) {
      const uint32_t kb_end = tile_kb_end<Cfg>(tile, kb_begin);
#pragma unroll 1
      for (uint32_t kb = kb_begin; kb < kb_end; kb += 2) {
        const bool pair = kb + 1 < kb_end;
        PipelineState<Cfg::kNumStages> second = pipe;
        if (pair) second.advance();
        ptx::mbarrier_wait(&smem.empty_barriers[second.stage], second.phase ^ 1);
        ptx::mbarrier_arrive_expect_tx(&smem.full_barriers[pipe.stage], Cfg::kBBytes);
        load_b_tile<Cfg>(args, smem, tile, pipe.stage, kb);
        if (pair) {
          ptx::mbarrier_arrive_expect_tx(&smem.full_barriers[second.stage], Cfg::kBBytes);
          load_b_tile<Cfg>(args, smem, tile, second.stage, kb + 1);
        }
        pipe = second;
        pipe.advance();
      }
    }
  } else {
    GroupedKMaps<Cfg> maps{args.k_grouped_maps + blockIdx.x * 4 + 2, &args.tma_b, args.b_base, Cfg::N};
    while (scheduler.next(tile)) {
      const bool wide = Cfg::kWideTiles && tile.wide;
      const TmaDescriptor* tma_b = Cfg::kRuntimeK ? maps.enter(smem, tile) : nullptr;
      const uint32_t kb_end = tile_kb_end<Cfg>(tile, kb_begin);
#pragma unroll 1
      for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
        ptx::mbarrier_wait(&smem.empty_barriers[pipe.stage], pipe.phase ^ 1);
        ptx::mbarrier_arrive_expect_tx(&smem.full_barriers[pipe.stage], wide ? 2 * Cfg::kBBytes : Cfg::kBBytes);
        load_b_tile<Cfg>(args, smem, tile, pipe.stage, kb, false, tma_b);
        if (wide) load_b_tile<Cfg>(args, smem, tile, pipe.stage, kb, true);
        pipe.advance();
      }
      if constexpr (Cfg::kRuntimeK) maps.used(kb_end - kb_begin);
    }
  }
}

/// The scale warp: per stage, the two SB values of the tile's (one or two) 128-column blocks and, when SA is K-major
/// and gathered, the stage's column of row scales. Every lane arrives.
template <class Cfg>
FG_DEVICE void stage_scales(const GemmArgs& args, const GemmSmem& smem, typename Cfg::Scheduler& scheduler,
                            uint32_t kb_begin, uint32_t lane_idx) {
  PipelineState<Cfg::kNumStages> pipe;
  Tile tile;
  // 64- and 128-row kernels walk the candidates and skip those without work in this loop (see the math's walk).
  bool has_work = true;
  auto next_tile = [&](Tile& t) -> bool {
    if constexpr (Cfg::BLOCK_M <= 128) return scheduler.next_candidate(t, has_work);
    return scheduler.next(t);
  };
  while (next_tile(tile)) {
    if (!has_work) continue;
    const uint32_t n_start = tile.n_block * Cfg::BLOCK_N;
    const uint32_t sb_block = n_start / 128;
    // The second SB block: a tile straddling two, or a wide tile's second n-block.
    const bool has_second =
        (!Cfg::kUniformScaleB && sb_block + 1 < Cfg::kNumSbBlocks && n_start % 128 + Cfg::BLOCK_N > 128) ||
        (Cfg::kWideTiles && tile.wide);
    const float* sb_src = args.sb + (uint64_t(tile.group) * Cfg::kNumSbBlocks + sb_block) * Cfg::kNumKBlocks;
    const uint32_t kb_end = tile_kb_end<Cfg>(tile, kb_begin);
    for (uint32_t kb_base = kb_begin; kb_base < kb_end; kb_base += 32) {
      // One load per lane covers the next 32 K blocks, so the global latency is paid once per 32 stages.
      const uint32_t my_kb = kb_base + lane_idx;
      const bool mine = my_kb < kb_end;
      // (1x128 SB goes by TMA with A: nothing to stage here.)
      const float sb_first = !Cfg::kSbPerColumn && mine ? ptx::ld_global_f32(sb_src + my_kb) : 0.0f;
      const float sb_second =
          !Cfg::kSbPerColumn && has_second && mine ? ptx::ld_global_f32(sb_src + Cfg::kNumKBlocks + my_kb) : 0.0f;
      const uint32_t num_kb = min_of(32u, kb_end - kb_base);
      for (uint32_t i = 0; i < num_kb; ++i) {
        const float s0 = __shfl_sync(0xffffffff, sb_first, i);
        const float s1 = __shfl_sync(0xffffffff, sb_second, i);
        ptx::mbarrier_wait(&smem.empty_barriers[pipe.stage], pipe.phase ^ 1);
        if (!Cfg::kSbPerColumn && lane_idx == 0) {
          ptx::st_shared_f32(smem.sb + pipe.stage * 2, s0);
          ptx::st_shared_f32(smem.sb + pipe.stage * 2 + 1, s1);
        }
        if constexpr (Cfg::kSaGather) {
          // Copied asynchronously, completion tracked by the full barrier: the warp goes on to the next stage without
          // waiting for these scattered loads (one round trip per stage measured up to 2x slower).
          const uint32_t kb = kb_base + i;
          float* sa_dst = smem.sa + pipe.stage * Cfg::kSaFloatsPerStage;
          for (uint32_t r = lane_idx; r < Cfg::BLOCK_M; r += 32) {  // unrolled, ptxas spilled at BLOCK_M=256
            const int32_t row = tile.row_base + int32_t(r);
            const bool valid = row < args.num_a_rows;
            ptx::cp_async_f32(sa_dst + r, args.sa + (valid ? row * args.ld_sa + kb : 0), valid);
          }
          ptx::mbarrier_arrive_on_cp_async_noinc(&smem.full_barriers[pipe.stage]);
        }
        ptx::mbarrier_arrive(&smem.full_barriers[pipe.stage]);
        pipe.advance();
      }
    }
  }
}

}  // namespace finegemm::device
