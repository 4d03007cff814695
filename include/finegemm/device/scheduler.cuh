// The block scheduler shared by every GEMM kind: maps the tiles of a persistent CTA to (group, m-block, n-block).
//
// A pure index function over plain pointers, compiled for the host too, so CPU tests enumerate its tile order.
// Tile order (per group): bands of kRasterBand n-blocks; inside a band, m-block after m-block, so one wave of CTAs
// shares a few rows of A and a band of B in L2. The forward dense kernels walk a grid of one round (every tile
// resident at once) with M at most N m-block fastest instead (kOneRoundByRows), so that neighbouring CTAs share a B
// tile. Dense and contiguous GEMMs tile the 2D view as one group; the masked and psum layouts walk their groups one
// after another, each group's tiles rasterized alone: a group of at most kColumnWalkMaxRows rows column by column (its
// row blocks of one n-block together), a larger one in bands; with 256x128 tiles, a group's last block of at most 128
// rows after them, as wide tiles over two n-blocks.
#pragma once

#include "finegemm/device/common/gemm_layout.cuh"
#include "finegemm/device/common/types.cuh"

namespace finegemm::device {

/// Width of the rasterization bands in n-blocks. 8 cut L2 traffic by 20% and ran 0-2% faster on the large dense shapes
/// of an H100, but contiguous calls with 10% valid rows then cost 1.435x the packed rows (1.226x with 16): the CTAs'
/// strided tiles meet the skipped padding blocks less evenly.
inline constexpr int kDefaultRasterBand = 16;

/// Masked and psum groups of at most this many rows are walked column by column (TileScheduler::rasterize_by_rows),
/// larger ones in bands. Measured on an H200 against the bands (kernel us, same run): masked 2 groups of ~512 rows
/// 4096x7168 58.1 -> 56.0, 4 of ~256 70.7 -> 68.5, 6 of ~1024 4096x4096 151.1 -> 149.2 (as psum 152.4 -> 149.0),
/// 7168x3072 184.8 -> 182.3; column by column, psum groups of ~8192 rows ran slower (4 groups 6144x7168 2095 -> 2182,
/// 8 of ~4096 2391 -> 2455).
inline constexpr int32_t kColumnWalkMaxRows = 2048;

/// Psum layout: group g starts at its previous group's end rounded up to a multiple of the alignment, a run-time value
/// (GemmArgs::psum_alignment: 128, 64 or 32; the tiles start at their group's start whatever it is). This one unless
/// the call says otherwise.
inline constexpr int32_t kDefaultPsumAlignment = 128;

/// One output tile, as the kernel needs it.
struct Tile {
  int32_t group = 0;
  int32_t m_block = 0;
  int32_t n_block = 0;
  int32_t row_base = 0;      ///< row of the tile's first row in the 2D views of A and D
  int32_t row_limit = 0;     ///< rows of the tile that may be written (< BLOCK_M only for grouped edge tiles)
  int32_t first_row = 0;     ///< rows of the tile before this one belong to another tile and are not written
  int32_t compute_rows = 0;  ///< rows that need computing (<= BLOCK_M): 256-row tiles skip a wave with none
  bool check_rows = false;   ///< contiguous layout: write only rows whose m_indices entry equals `group`
  bool wide = false;         ///< kWideTiles: the tile's (at most 128) rows for n-blocks n_block and n_block + 1
  int32_t k_block0 = 0;      ///< K-grouped: the group's first K block (K_0 + ... + K_{g-1}) / 128
  int32_t num_k_blocks = 0;  ///< K-grouped: the group's K blocks, K_g / 128 (at least 1: empty groups have no tiles)
};

template <GemmKind kKind, int BLOCK_M, int BLOCK_N, int kNumNBlocks, bool kWideTail = false,
          int kRasterBand = kDefaultRasterBand, bool kClipLongTail = false, bool kOneRoundByRows = false>
struct TileScheduler {
  /// kOneRoundByRows (gemm_dense_one_round_by_rows): where the dense tiles fit one round of the CTAs and M is at most
  /// the n-blocks' width (B the larger operand), they are walked m-block fastest (the CTAs that read one B tile are
  /// neighbours in the launch), and a last row block that M ends inside stays where it falls (its rows past M read as
  /// zeros by TMA and clipped from the stores), but a short one (one_round_last_block_stays). A taller A
  /// keeps the bands, whose neighbours read one A tile.
  static_assert(!kOneRoundByRows || (kKind == GemmKind::kNormal && !kClipLongTail), "one round by rows: dense kernels");
  /// Contiguous layout, 256-row tiles: a second pass over the blocks covers halves of another expert.
  static constexpr bool kContiguousHalves = kKind == GemmKind::kGroupedContiguous && BLOCK_M == 256;
  /// With 128-column tiles (unclustered), a half (at most 128 rows of one expert) is computed for two adjacent
  /// n-blocks 2p and 2p + 1 at once, as one "wide" tile: the second B tile fills the half of the A stage that the
  /// half's 128-row box leaves free, so the tile moves a full tile's bytes for a full tile's math. The two candidates
  /// of a block split between two experts then each take one expert's half over both n-blocks, so every candidate
  /// holds one full tile's work and no second pass is needed (only for an unpaired last n-block). Before, the halves
  /// ran one n-block at a time, about 0.65 of a full tile each, and the round robin could give one CTA many of them
  /// (H100, 8 experts of 4224 rows: 16 CTAs took all 256 halves).
  static constexpr bool kWideHalves = kContiguousHalves && BLOCK_N == 128;
  /// With wide halves and an even n-block count (no second pass), when the last round of candidates has at most half
  /// as many tiles as there are CTAs, each of them becomes two candidates, one per 128-row half (a block of one
  /// expert: both halves computed; a block split between experts: the first candidate as before, the second without
  /// work). The CTAs that took a whole tile in the last round then take about 0.65 of one (the cost of a half tile):
  /// with 34.2 waves of tiles, the slowest CTA runs 34.65 instead of 35 tiles. Measured on an H100: the two K=7168
  /// contiguous seed draws 0.5-0.7% faster.
  static constexpr bool kTailHalves = kWideHalves && kNumNBlocks % 2 == 0;
  /// kWideTail (256x128 tiles, gemm_wide_tail), dense: with M > 256 and M mod 256 in 1..128, the last row block
  /// is 128 rows moved up to end at row M, walked after all full tiles as wide tiles over n-blocks 2p and 2p + 1 (an
  /// unpaired last n-block alone). Each holds a full tile's work, so the round robin stays even.
  static_assert(!kWideTail || ((kKind == GemmKind::kNormal || kKind == GemmKind::kGroupedMasked ||
                                 kKind == GemmKind::kGroupedContiguousPsum) &&
                                BLOCK_M == 256 && BLOCK_N == 128),
                "wide tails: dense, masked and psum 256x128 tiles");
  /// kWideTail, masked and psum: a group's last row block of at most 128 rows is walked after the group's full tiles
  /// as wide tiles over n-blocks 2p and 2p + 1 (an unpaired last n-block alone).
  static constexpr bool kWideGroupTails =
      kWideTail && (kKind == GemmKind::kGroupedMasked || kKind == GemmKind::kGroupedContiguousPsum);
  static constexpr bool kWideTiles = kWideHalves || kWideTail;
  /// Masked, psum and K-grouped layouts: the groups are walked one after another (next_masked).
  static constexpr bool kWalksGroups = kKind == GemmKind::kGroupedMasked ||
                                       kKind == GemmKind::kGroupedContiguousPsum || kKind == GemmKind::kGroupedK;

  /// Contiguous layout: the m_indices entries that decide a candidate tile (of the 256- or 128-row block at
  /// `row_base`): its first row, the last row of its first half and, for 256-row blocks, the first and last rows of its
  /// second half (rows clamped to M_sum; -1 past it). Their addresses follow from the block alone, so the loads are in
  /// flight together: one global-memory round trip per candidate. (Loading the next candidate's entries during the
  /// current tile measured 1.4-3.6% slower on an H100: ptxas moves them to uniform registers right after the loads and
  /// waits there.)
  struct Probe {
    int32_t first = -1, first_last = -1, second = -1, second_last = -1;
  };

  // Problem
  int32_t num_rows;                ///< M (normal), M_sum (contiguous, psum), M_max (masked)
  int32_t num_groups;
  const int32_t* grouped_layout;   ///< m_indices (contiguous), masked_m (masked), group ends (psum), unused (normal)
  // This CTA
  int32_t first_tile;
  int32_t tile_stride;
  // Progress
  int32_t next_tile;
  int32_t group = 0;               ///< masked, psum: group of the tiles being walked
  int32_t tiles_before_group = 0;  ///< masked, psum: tiles of the groups before `group`
  int32_t group_rows = 0;          ///< masked, psum: valid rows of `group`
  int32_t group_start = 0;         ///< psum: row of `group`'s first row
  int32_t psum_alignment;          ///< psum: group starts are multiples of this (a power of two)
  int32_t total_k = 0;             ///< K-grouped: the K extent of A and B (sum of the valid K_g)
  int32_t group_k_start = 0;       ///< K-grouped: K_0 + ... + K_{group-1} (invalid K_g counted as 0)
  int32_t group_k = 0;             ///< K-grouped: K_group (0: an empty or invalid group)
  uint32_t error_bits = 0;         ///< kError* bits met while walking (bad m_indices / masked_m / group ends)

  /// `total_k_`: K-grouped only, the K extent of A and B. `psum_alignment_`: psum only, the row alignment of the
  /// groups' starts (128, 64 or 32).
  FG_HOST_DEVICE TileScheduler(int32_t num_rows_, int32_t num_groups_, const int32_t* grouped_layout_,
                               int32_t block_idx, int32_t num_blocks, int32_t total_k_ = 0,
                               int32_t psum_alignment_ = kDefaultPsumAlignment)
      : num_rows(num_rows_),
        num_groups(num_groups_),
        grouped_layout(grouped_layout_),
        first_tile(block_idx),
        tile_stride(num_blocks),
        next_tile(block_idx),
        psum_alignment(psum_alignment_) {
    if constexpr (kKind == GemmKind::kGroupedMasked) group_rows = masked_rows(0);
    if constexpr (kKind == GemmKind::kGroupedContiguousPsum) enter_psum_group(0);
    if constexpr (kKind == GemmKind::kGroupedK) {
      total_k = total_k_;
      enter_k_group(0);
    }
    if constexpr (kBalancesRounds) {
      if (num_groups <= kBalancedMaxGroups) balance_rounds();
    }
  }

  /// Masked calls of at most kBalancedMaxGroups groups run on the fewest CTAs that take as many rounds of tiles as
  /// all of them would (dense GEMMs do so on the host, where M is known): every CTA that works then takes the same
  /// number of tiles, and the others leave at once instead of running one round fewer beside them. The walk counts
  /// the call's tiles first (one masked_m load per group). (Psum kernels with gathered K-major SA spilled with it.)
  static constexpr bool kBalancesRounds = kKind == GemmKind::kGroupedMasked;
  static constexpr int32_t kBalancedMaxGroups = 8;

  FG_HOST_DEVICE void balance_rounds() {
    TileScheduler walk = *this;
    int32_t total = 0;
    while (walk.group < walk.num_groups) {
      total += walk.group_tiles();
      walk.enter_next_group();
    }
    const int32_t rounds = ceil_div(total, tile_stride);
    if (rounds == 0) return;
    tile_stride = ceil_div(total, rounds);
    if (first_tile >= tile_stride) next_tile = total;  // no tile for this CTA
  }

  /// Masked, psum and K-grouped walks: the tiles of the walked group, its row blocks one n-block at a time and, with
  /// kWideGroupTails, the pairs of n-blocks of a last block of at most 128 rows; `num_m_blocks` the former's rows.
  FG_HOST_DEVICE int32_t group_tiles(int32_t* num_m_blocks = nullptr) const {
    const bool wide_tail = kWideGroupTails && gemm_has_half_last_block<int32_t>(group_rows, BLOCK_M);
    const int32_t m_blocks = wide_tail ? group_rows / BLOCK_M : ceil_div(group_rows, BLOCK_M);
    if (num_m_blocks != nullptr) *num_m_blocks = m_blocks;
    return m_blocks * kNumNBlocks + (wide_tail ? (kNumNBlocks + 1) / 2 : 0);
  }

  /// Masked, psum and K-grouped walks: makes the group after `group` the walked one.
  FG_HOST_DEVICE void enter_next_group() {
    ++group;
    if constexpr (kKind == GemmKind::kGroupedContiguousPsum)
      enter_psum_group(group);
    else if constexpr (kKind == GemmKind::kGroupedK)
      enter_k_group(group);
    else
      group_rows = masked_rows(group);
  }

  /// kTailHalves: the tiles of the last round that run as halves (0 when that round has more than half as many tiles
  /// as there are CTAs). Recomputed for each candidate from values the kernel reloads (num_rows and the grid size are
  /// kernel parameters): computed once and kept through the walk, it took a register that the 256-row kernels with
  /// K-major SA do not have, and ptxas spilled the walk's position.
  FG_HOST_DEVICE int32_t halved_last_round(int32_t first_pass_tiles) const {
    int32_t stride = tile_stride;
#if defined(__CUDA_ARCH__)
    asm volatile("" : "+r"(stride));  // keeps the division in the walk (not hoisted out of the tile loop)
#endif
    const int32_t last_round = first_pass_tiles % stride;
    return 2 * last_round <= stride ? last_round : 0;
  }

  /// Valid rows of masked group g (clamped to M_max).
  FG_HOST_DEVICE int32_t masked_rows(int32_t g) {
    if (g >= num_groups) return 0;
    int32_t rows = load_layout(g);
    if (rows > num_rows) {
      error_bits |= kErrorMaskedMTooLarge;
      rows = num_rows;
    }
    return rows < 0 ? 0 : rows;
  }

  /// Psum layout: makes g (the group after `group`, or 0) the walked group. It starts at the end of the group before
  /// (as clamped here; 0 for group 0) rounded up to psum_alignment, and ends at its entry of the layout. An end before
  /// that start (negative ones included; an empty group's end is its start) or past M_sum (for a group with rows) is
  /// invalid: the group keeps the rows that exist, none or up to M_sum, and kErrorGroupEndInvalid is raised. Nothing
  /// is loaded past the last group.
  FG_HOST_DEVICE void enter_psum_group(int32_t g) {
    // A power of two: a mask, not a division. (A start is at most M_sum rounded up, and the host keeps M_sum 256 rows
    // below 2^31: the sum cannot overflow.)
    group_start = (group_start + group_rows + psum_alignment - 1) & -psum_alignment;
    group_rows = 0;
    if (g >= num_groups) return;
    const int32_t end = load_layout(g);
    if (end < group_start) {
      error_bits |= kErrorGroupEndInvalid;
    } else if (end > num_rows && end > group_start) {
      error_bits |= kErrorGroupEndInvalid;
      group_rows = max_of(num_rows - group_start, 0);
    } else {
      group_rows = end - group_start;
    }
  }

  /// K-grouped: makes g (the group after `group`, or 0) the walked group: its K extent starts where the previous
  /// group's ends, and K_g is its entry of ks. Every group has all M rows (group_rows = M) when K_g > 0 and no tiles
  /// when K_g == 0. A K_g that is negative, not a multiple of 128, or reaching past total_k is invalid: the group
  /// gets no tiles (its D left as it is), counts as 0 in the K offsets, and raises kErrorGroupKInvalid.
  FG_HOST_DEVICE void enter_k_group(int32_t g) {
    group_k_start += group_k;
    group_k = 0;
    group_rows = 0;
    if (g >= num_groups) return;
    const int32_t k = load_layout(g);
    if (k < 0 || k % int32_t(kBlockK) != 0 || k > total_k - group_k_start) {
      error_bits |= kErrorGroupKInvalid;
      return;
    }
    group_k = k;
    group_rows = k > 0 ? num_rows : 0;
  }

  FG_HOST_DEVICE int32_t load_layout(int32_t i) const {
#if defined(__CUDA_ARCH__)
    int32_t v;
    asm volatile("ld.global.s32 %0, [%1];" : "=r"(v) : "l"(grouped_layout + i) : "memory");
    return v;
#else
    return grouped_layout[i];
#endif
  }

  /// (m-block, n-block) of linear tile `t` among `num_m_blocks` x kNumNBlocks tiles.
  static FG_HOST_DEVICE void rasterize(int32_t t, int32_t num_m_blocks, int32_t& m_block, int32_t& n_block) {
    const int32_t tiles_per_band = num_m_blocks * kRasterBand;
    const int32_t band = t / tiles_per_band;
    const int32_t first_n = band * kRasterBand;
    const int32_t band_width = min_of(kRasterBand, kNumNBlocks - first_n);
    const int32_t in_band = t - band * tiles_per_band;
    m_block = in_band / band_width;
    n_block = first_n + in_band % band_width;
  }

  /// Masked and psum groups of at most kColumnWalkMaxRows rows: (m-block, n-block) of linear tile `t` among
  /// `num_m_blocks` x kNumNBlocks tiles, m-block fastest. The tiles that read one B tile are then neighbours in the
  /// walk and run in the same wave, so B streams from DRAM once; in n-block bands, the tiles of a band's last row
  /// blocks that fall into the next wave read their B tiles again.
  static FG_HOST_DEVICE void rasterize_by_rows(int32_t t, int32_t num_m_blocks, int32_t& m_block, int32_t& n_block) {
    m_block = t % num_m_blocks;
    n_block = t / num_m_blocks;
  }

  FG_HOST_DEVICE Probe load_probe(int32_t row_base) const {
    constexpr int32_t kHalf = kContiguousHalves ? BLOCK_M / 2 : BLOCK_M;
    Probe p;
    p.first = load_layout(row_base);
    p.first_last = load_layout(min_of(row_base + kHalf, num_rows) - 1);
    if constexpr (kContiguousHalves) {
      if (row_base + kHalf < num_rows) {
        p.second = load_layout(row_base + kHalf);
        p.second_last = load_layout(min_of(row_base + BLOCK_M, num_rows) - 1);
      }
    }
    return p;
  }

  /// kOneRoundByRows: whether a one-round grid walked by rows keeps its last row block where it falls (its rows past
  /// M read as zeros by TMA and clipped from the stores). It does where that block lacks at most 16 rows of BLOCK_M
  /// (112x3072x7168 on 64x48: 11.7 us against 11.9 moved up, on an H200; 240x7168x2048 on 128x112 9.9 against 10.2)
  /// and over three row blocks or more of 128 rows (moved up, 520, 576 and 600 x 4096 x 7168 on 128x160 tiles ran 1%
  /// slower, 300x7168x2048 on 128x192 1.5%). A last block of fewer rows moves up to end at row M: kept where it falls,
  /// 136x4096x7168 on 128x64 tiles took 31.5 us against 16.9 moved up, 228x3072x7168 on 128x48 17.3 against 15.5,
  /// 72x3072x7168 on 64x48 16.1 against 11.7, 193x2112x7168 on 64x64 14.9-15.1 against 12.2-12.3, and in a decode
  /// chain with PDL (bench --chain, us per layer) 224x4096x7168 on 128x64 22.6-22.8 against 19.0, 216x2112x7168 on
  /// 64x64 17.1-17.3 against 14.2-14.3, 160x4096x7168 on 64x96 21.1 against 16.7-16.8. 256-row tiles keep theirs (not
  /// measured moved up).
  static FG_HOST_DEVICE bool one_round_last_block_stays(int32_t rows) {
    if (BLOCK_M > 128 || (BLOCK_M == 128 && rows > 2 * BLOCK_M)) return true;
    return (rows - 1) % BLOCK_M + 1 >= BLOCK_M - 16;
  }

  /// Advances to this CTA's next tile; false when there is none left.
  FG_HOST_DEVICE bool next(Tile& tile) {
    if constexpr (kWalksGroups) {
      return next_masked(tile);
    } else {
      bool second_pass = false;
      int32_t tail_half = -1;
      while (take_candidate(tile, second_pass, tail_half)) {
        if constexpr (kKind == GemmKind::kGroupedContiguous) {
          if (!contiguous_tile(tile, load_probe(tile.row_base), second_pass, tail_half)) continue;
        }
        return true;
      }
      return false;
    }
  }

  /// One step of the walk: the next candidate tile (false when there is none left) and whether it has work
  /// (`has_work` false: a contiguous block of padding, or a 256-row block's second half of the same expert; nothing to
  /// load or compute). The same tiles as next(), for callers that skip in their own loop: with the skip loop inside
  /// next(), whose exit depends on loaded m_indices, ptxas gave the math warps of grouped 128-row kernels a K loop with
  /// the pipeline state in per-thread registers (170 instead of 156 instructions).
  FG_HOST_DEVICE bool next_candidate(Tile& tile, bool& has_work) {
    has_work = true;
    if constexpr (kWalksGroups) {
      return next_masked(tile);
    } else {
      bool second_pass = false;
      int32_t tail_half = -1;
      if (!take_candidate(tile, second_pass, tail_half)) return false;
      if constexpr (kKind == GemmKind::kGroupedContiguous)
        has_work = contiguous_tile(tile, load_probe(tile.row_base), second_pass, tail_half);
      return true;
    }
  }

  /// Dense and contiguous walks: the next candidate's index, coordinates and rows (before the contiguous layout's
  /// probe); false when there is none left.
  /// `tail_half`: kTailHalves, which half of a last-round tile the candidate is (-1: the whole tile).
  FG_HOST_DEVICE bool take_candidate(Tile& tile, bool& second_pass, int32_t& tail_half) {
    const int32_t num_m_blocks = ceil_div(num_rows, BLOCK_M);
    // kWideTail: full row blocks first (rasterized), then the last block's wide tiles.
    const bool wide_tail = kWideTail && gemm_has_short_last_block<int32_t>(num_rows, BLOCK_M);
    const int32_t full_tiles = (wide_tail ? num_m_blocks - 1 : num_m_blocks) * kNumNBlocks;
    // Contiguous 256-row tiles add a second pass over the blocks: all n-blocks, or with wide halves only an unpaired
    // last one.
    const int32_t first_pass_tiles = wide_tail ? full_tiles + (kNumNBlocks + 1) / 2 : full_tiles;
    const int32_t halved_tiles = kTailHalves ? halved_last_round(first_pass_tiles) : 0;
    const int32_t num_tiles = !kContiguousHalves ? first_pass_tiles
                              : kWideHalves ? first_pass_tiles + halved_tiles + (kNumNBlocks % 2 == 1 ? num_m_blocks : 0)
                                            : 2 * first_pass_tiles;
    if (next_tile >= num_tiles) return false;
    // kOneRoundByRows: every tile of the grid resident at once, so the walk only places tiles on SMs; by rows where
    // A is no taller than B's n-blocks are wide (B the larger operand).
    const bool one_round_by_rows =
        kOneRoundByRows && num_tiles <= tile_stride && num_rows <= kNumNBlocks * BLOCK_N;
    int32_t t = next_tile;
    next_tile += tile_stride;
    tail_half = -1;
    if constexpr (kTailHalves) {
      const int32_t tail_start = first_pass_tiles - halved_tiles;
      if (halved_tiles > 0 && t >= tail_start) {
        // Candidate j of the last round: half j / halved of tile j % halved of that round.
        const int32_t j = t - tail_start;
        tail_half = j >= halved_tiles ? 1 : 0;
        t = tail_start + (j - tail_half * halved_tiles);
      }
    }
    second_pass = kContiguousHalves && t >= first_pass_tiles;
    tile.group = 0;
    tile.check_rows = false;
    tile.wide = false;
    if (kWideTail && wide_tail && t >= full_tiles) {
      // The last block's rows, moved up to end at row M (rounded up to a multiple of 4 rows as below; rows before
      // first_row are the block before's), times n-blocks 2p and 2p + 1.
      const int32_t pair = t - full_tiles;
      tile.m_block = num_m_blocks - 1;
      tile.n_block = 2 * pair;
      tile.wide = tile.n_block + 1 < kNumNBlocks;
      tile.row_base = align_up(num_rows - BLOCK_M / 2, 4);
      tile.row_limit = BLOCK_M / 2;
      tile.first_row = tile.m_block * BLOCK_M - tile.row_base;
      tile.compute_rows = num_rows - tile.row_base;
      return true;
    }
    if (kWideHalves && second_pass) {
      tile.m_block = t - first_pass_tiles;
      tile.n_block = kNumNBlocks - 1;
    } else if (one_round_by_rows) {
      rasterize_by_rows(t, wide_tail ? num_m_blocks - 1 : num_m_blocks, tile.m_block, tile.n_block);
    } else {
      rasterize(second_pass ? t - first_pass_tiles : t, wide_tail ? num_m_blocks - 1 : num_m_blocks, tile.m_block,
                tile.n_block);
    }
    tile.row_base = tile.m_block * BLOCK_M;
    tile.row_limit = BLOCK_M;
    tile.first_row = 0;
    if constexpr (kKind == GemmKind::kNormal) {
      // A last row block that M ends inside moves up to end at row M (when M >= BLOCK_M), rounded up to a row
      // multiple of 4 (a TMA box of MN-major SA must start 16-byte aligned): its loads then reach at most 3 rows
      // past A (a box reaching far past the end measured up to 28% slower on an H100).
      // The rows it shares with the block before are computed twice and written only by that block.
      // kClipLongTail (gemm_dense_clips_long_tail): a block of more than BLOCK_M / 2 rows stays where it falls;
      // kOneRoundByRows: so does the last block of a one-round grid, but one that lacks more than 16 rows of BLOCK_M
      // after one 128-row block or any number of 64-row ones (one_round_last_block_stays).
      const int32_t moved_base = align_up(num_rows - BLOCK_M, 4);
      const bool stays = (one_round_by_rows && one_round_last_block_stays(num_rows)) ||
                         (kClipLongTail && num_rows - tile.row_base > BLOCK_M / 2);
      if (num_rows >= BLOCK_M && moved_base < tile.row_base && !stays) {
        tile.first_row = tile.row_base - moved_base;
        tile.row_base = moved_base;
      }
    }
    tile.compute_rows = min_of(BLOCK_M, num_rows - tile.row_base);
    return true;
  }

  /// Contiguous layout: fills group, rows and check_rows of the tile from its probe; false: nothing to compute.
  /// 128-row tiles (and smaller) hold one expert from their first row on, or are padding. 256-row tiles over experts
  /// aligned to 128 rows have halves h0 (rows 0-127) and h1 (128-255), each of one expert (or padding): the first pass
  /// computes h0's expert, and h1 too when it is the same expert; the second pass computes h1 alone when its expert
  /// differs, as a tile starting at row 128 of the block (its second wave, past the tile's 128 rows, is skipped).
  /// kWideHalves: see wide_half().
  FG_HOST_DEVICE bool contiguous_tile(Tile& tile, const Probe& p, bool second_pass, int32_t tail_half) {
    const auto valid = [&](int32_t e) {
      if (e < -1 || e >= num_groups) error_bits |= kErrorExpertIdOutOfRange;
      return e >= 0 && e < num_groups;
    };
    if constexpr (!kContiguousHalves) {
      if (!valid(p.first)) return false;  // padding block: nothing to load or write
      tile.group = p.first;
      tile.check_rows = p.first_last != p.first;
      return true;
    } else {
      constexpr int32_t kHalf = BLOCK_M / 2;
      if (!second_pass) {
        if (!valid(p.first)) return false;
        const bool both = p.second == p.first;
        if (kTailHalves && tail_half == 1) {
          // A last-round block of one expert: its second half alone. A split block's first candidate works as in
          // other rounds, so its second one has nothing to do.
          if (!both) return false;
          take_second_half(tile, p);
          return true;
        }
        const bool whole = both && tail_half < 0;  // a last-round block of one expert: its first half alone
        tile.group = p.first;
        tile.row_limit = whole ? BLOCK_M : kHalf;
        tile.compute_rows = min_of(tile.row_limit, num_rows - tile.row_base);
        tile.check_rows = p.first_last != p.first || (whole && p.second_last != p.first);
        if (both) return true;
        if constexpr (kWideHalves) return wide_half(tile, p, valid(p.second));
        return true;
      }
      if (p.second == p.first || !valid(p.second)) return false;
      take_second_half(tile, p);
      return true;
    }
  }

  FG_HOST_DEVICE void take_second_half(Tile& tile, const Probe& p) const {
    constexpr int32_t kHalf = BLOCK_M / 2;
    tile.row_base = tile.m_block * BLOCK_M + kHalf;
    tile.group = p.second;
    tile.row_limit = kHalf;
    tile.compute_rows = min_of(kHalf, num_rows - tile.row_base);
    tile.check_rows = p.second_last != p.second;
  }

  /// kWideHalves, first pass, a block whose halves are not one expert's (the tile holds its first half). Candidates
  /// 2p and 2p + 1 of the block become wide tiles over both n-blocks: the first half on 2p, the second half (when it
  /// is an expert's, `second_valid`) on 2p + 1. With the second half padding, one of the two takes the first half,
  /// alternating with the block and the pair so that such tiles spread over the CTAs. An unpaired last n-block (an
  /// odd count) keeps the narrow first half here and gets the second half in the second pass.
  FG_HOST_DEVICE bool wide_half(Tile& tile, const Probe& p, bool second_valid) const {
    const bool odd = tile.n_block % 2 == 1;
    if (!odd && tile.n_block + 1 == kNumNBlocks) return true;
    if (second_valid) {
      if (odd) take_second_half(tile, p);
    } else if (odd != (((tile.m_block + tile.n_block / 2) & 1) == 1)) {
      return false;
    }
    tile.n_block &= ~1;
    tile.wide = true;
    return true;
  }

  /// Masked, psum and K-grouped layouts: the tiles of each group's rows (a psum group's rows start at group_start),
  /// group after group. Padding (rows past masked_m, or between a psum group's end and the next group's start) is in
  /// no tile: it costs no candidate and no load. A psum tile ends at its group's end (row_limit), so the epilogue
  /// writes no row past it. K-grouped: every group with K_g > 0 has the M x N tiles of D[g] (rows g * M + .. of the
  /// [G * M, N] view), over its own K blocks; groups with K_g == 0 have none. kWideGroupTails: a group's last block of
  /// at most 128 rows comes after its full tiles, one wide tile per pair of n-blocks (gemm_group_tiles).
  FG_HOST_DEVICE bool next_masked(Tile& tile) {
    const int32_t t = next_tile;
    // Walk forward to the group holding tile t (tiles of a CTA only move forward): one load per group passed.
    while (group < num_groups) {
      int32_t num_m_blocks = 0;
      const int32_t tiles = group_tiles(&num_m_blocks);
      if (t < tiles_before_group + tiles) {
        next_tile += tile_stride;
        const int32_t i = t - tiles_before_group;
        tile.wide = false;
        if (i < num_m_blocks * kNumNBlocks) {
          if (kKind != GemmKind::kGroupedK && num_m_blocks * BLOCK_M <= kColumnWalkMaxRows)
            rasterize_by_rows(i, num_m_blocks, tile.m_block, tile.n_block);
          else
            rasterize(i, num_m_blocks, tile.m_block, tile.n_block);
        } else {
          tile.m_block = num_m_blocks;
          tile.n_block = 2 * (i - num_m_blocks * kNumNBlocks);
          tile.wide = tile.n_block + 1 < kNumNBlocks;
        }
        tile.group = group;
        if constexpr (kKind == GemmKind::kGroupedContiguousPsum)
          tile.row_base = group_start + tile.m_block * BLOCK_M;
        else
          tile.row_base = group * num_rows + tile.m_block * BLOCK_M;
        tile.row_limit = min_of(BLOCK_M, group_rows - tile.m_block * BLOCK_M);
        tile.compute_rows = tile.row_limit;
        tile.check_rows = false;
        if constexpr (kKind == GemmKind::kGroupedK) {
          tile.k_block0 = group_k_start / int32_t(kBlockK);
          tile.num_k_blocks = group_k / int32_t(kBlockK);
        }
        return true;
      }
      tiles_before_group += tiles;
      enter_next_group();
    }
    return false;
  }
};

}  // namespace finegemm::device
