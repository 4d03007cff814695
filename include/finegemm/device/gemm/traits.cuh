// Everything a GEMM kernel instance knows at compile time, derived once from its template parameters and shared by
// its roles (producer, math, epilogue, split-K exchange).
#pragma once

#include "finegemm/device/common/gemm_layout.cuh"
#include "finegemm/device/common/types.cuh"
#include "finegemm/device/epilogue.cuh"
#include "finegemm/device/scheduler.cuh"

namespace finegemm::device {

template <int kKind, uint32_t kN, uint32_t kK, uint32_t kBlockM, uint32_t kBlockN, uint32_t kStages, uint32_t kSa,
          uint32_t kSplit, bool kWide, uint32_t kSb, uint32_t kOut>
struct GemmTraits {
  // ---- The template parameters --------------------------------------------------------------------------------
  static constexpr GemmKind kGemmKind = static_cast<GemmKind>(kKind);
  static constexpr uint32_t N = kN;
  static constexpr uint32_t K = kK;
  static constexpr uint32_t BLOCK_M = kBlockM;
  static constexpr uint32_t BLOCK_N = kBlockN;
  static constexpr uint32_t kNumStages = kStages;
  static constexpr uint32_t kSaMode = kSa;
  /// 2: both CTAs of a cluster compute the same tile, each over about half of the K blocks (kSplitKLead); the second
  /// sends its fp32 partial sums to the first through distributed shared memory, and the first stores the tile.
  static constexpr uint32_t kSplitK = kSplit;
  static constexpr uint32_t kClusterSize = kSplit;
  /// 256x128 kernels that run a last row block of at most 128 rows as wide tiles (gemm_wide_tail; TileScheduler's
  /// kWideTail): a dense GEMM's last block, each masked or psum group's last block.
  static constexpr bool kWideTail = kWide;
  /// B's scales (GemmSbMode) and the output (GemmOutput).
  static constexpr uint32_t kSbMode = kSb;
  static constexpr uint32_t kOutput = kOut;

  // ---- Geometry -----------------------------------------------------------------------------------------------
  using Layout = GemmSmemLayout<BLOCK_M, BLOCK_N, kNumStages, K, kSplitK, kSaMode, kSbMode, kOutput>;
  static constexpr uint32_t kOutBytes = gemm_out_bytes(kOutput);
  using Epilogue =
      EpilogueTile<BLOCK_M, BLOCK_N, kOutBytes, gemm_store_cols(BLOCK_N, kOut, K == 0),
                   gemm_store_buffers(BLOCK_N, kOut, K == 0), gemm_d_transposed(kOut)>;
  /// D = C + A x B^T: the A issuer loads C's tile into a shared output tile at each tile's start; with
  /// kOutF32AddCAhead into two of them in turn (the tile after next's C may load while this tile's D is stored).
  static constexpr bool kAddC = gemm_loads_c(kOutput);
  static constexpr uint32_t kNumDTiles = Layout::kNumDTiles;
  /// D += A x B^T: the epilogue's TMA stores are reductions (fp32 adds in the L2) into D (or, kDTransposed, into D
  /// with the tile's rows as D's columns).
  static constexpr bool kAddToD = gemm_reduces_into_d(kOutput);
  static constexpr bool kDTransposed = gemm_d_transposed(kOutput);
  static constexpr bool kGrouped = kGemmKind != GemmKind::kNormal;
  /// K-grouped: K is not compiled in (K = 0); each tile runs over its group's K blocks (Tile::k_block0,
  /// Tile::num_k_blocks), A and B through per-group descriptors the issuers write (GroupedKMaps).
  static constexpr bool kRuntimeK = kGemmKind == GemmKind::kGroupedK;
  static constexpr uint32_t kNumKBlocks = Layout::kNumKBlocks;
  static constexpr uint32_t kKBlocksPerCta = kNumKBlocks / kSplitK;
  /// Split-K, 64-row tiles: CTA 0 takes kSplitKLead K blocks more than half, CTA 1 as many fewer. CTA 0 adds CTA 1's
  /// partial sums and stores the tile, so CTA 1's sums are then on their way before CTA 0 needs them. Measured on an
  /// H200 (finegemm bench, us, two rounds, a lead of 0 / 1 / 2 / 3 K blocks at K = 7168): 1x2112x7168 8.40, 8.38 /
  /// 8.43, 8.38 / 8.29, 8.30 / 8.40, 8.43; 64x1536x7168 7.46, 7.54 / 7.41, 7.49 / 7.33, 7.36 / 7.46, 7.44; 128x576x7168
  /// 6.94, 6.94 / 6.88, 6.86 / 6.82, 6.82 / 7.10, 7.07. 128-row tiles split the adding between the CTAs, each waiting
  /// for the other's half (SplitKExchange): no lead.
  static constexpr uint32_t kSplitKLead = kSplitK > 1 && BLOCK_M == 64 ? 2 : 0;
  static_assert(kSplitK == 1 || kKBlocksPerCta > kSplitKLead, "split-K: CTA 1 keeps K blocks of its own");
  /// The K blocks of a tile that the CTA whose first K block is `kb_begin` computes (K-grouped tiles: their group's).
  FG_HOST_DEVICE static constexpr uint32_t num_k_blocks_from(uint32_t kb_begin) {
    if constexpr (kSplitK == 1) return kKBlocksPerCta;
    return kb_begin == 0 ? kKBlocksPerCta + kSplitKLead : kNumKBlocks - (kKBlocksPerCta + kSplitKLead);
  }
  static constexpr uint32_t kNumNBlocks = ceil_div(N, BLOCK_N);
  static constexpr uint32_t kNumSbBlocks = ceil_div(N, 128u);
  static constexpr uint32_t kNumMathWarpgroups = Layout::kNumMathWarpgroups;
  static constexpr uint32_t kNumWaves = Layout::kNumWaves;
  static constexpr uint32_t kWaveRows = Layout::kWaveRows;
  static constexpr uint32_t kNumMathThreads = kNumMathWarpgroups * 128;
  static constexpr uint32_t kNumMathWarps = kNumMathThreads / 32;
  static constexpr uint32_t kMathRegisters =
      gemm_math_registers(kGemmKind, BLOCK_M, BLOCK_N, kSaMode, kSbMode, kOutput);
  static constexpr uint32_t kProducerRegisters = gemm_producer_registers(kGemmKind, BLOCK_M, BLOCK_N, kSaMode, kOutput);

  // ---- Scales -------------------------------------------------------------------------------------------------
  /// SA by TMA (MN-major, or K-major in boxes 4 K blocks wide) or gathered by the scale warp (K-major, other strides).
  static constexpr bool kSaGather = kSaMode == kSaKMajorGather;
  static constexpr uint32_t kSaRowFloats = Layout::kSaRowFloats;
  static constexpr uint32_t kSaFloatsPerStage = Layout::kSaBytesPerStage / 4;
  /// SA loaded once per CTA (gemm_sa_once): the bytes of its one box, gemm_sa_once_rows floats per K block.
  static constexpr bool kSaOnce = Layout::kSaOnce;
  static constexpr uint32_t kSaOnceTxBytes = Layout::kNumKBlocks * gemm_sa_once_rows(kSaMode) * 4;
  /// 1x128 scales of B: one per output column per K block, read by each math thread for its columns.
  static constexpr bool kSbPerColumn = kSbMode == kSbRowMnMajor;
  static constexpr uint32_t kSbFloatsPerStage = Layout::kSbBytesPerStage / 4;
  /// A tile never straddles two 128-column SB blocks (1x128 scales: no blocks to straddle).
  static constexpr bool kUniformScaleB = kSbPerColumn || 128 % BLOCK_N == 0;
  /// Columns of one scale granule: a straddling tile splits at n_start % 128, a multiple of gcd(BLOCK_N, 128).
  static constexpr uint32_t kLowestBit = BLOCK_N & (~BLOCK_N + 1);
  static constexpr uint32_t kScaleGranule = kUniformScaleB ? BLOCK_N : kLowestBit < 128 ? kLowestBit : 128;
  static constexpr uint32_t kNumScaleGranules = BLOCK_N / kScaleGranule;
  /// Copies of the K loop, one per split point of a tile straddling two SB blocks (BLOCK_N / gcd(BLOCK_N, 128) of
  /// them): 5 covers BLOCK_N 48, 80, 96, 160 and 192; BLOCK_N 112 and 144 select the scale per granule at run time.
  static constexpr uint32_t kMaxScaleVariants = 5;

  // ---- Stages and their handshakes ----------------------------------------------------------------------------
  /// A stage's bytes from A's issuer: A's tile and, by TMA, SA's (unless loaded once) and 1x128 SB's.
  static constexpr uint32_t kABytes = Layout::kABytesPerStage +
                                      (kSaGather || kSaOnce ? 0 : BLOCK_M * kSaRowFloats * 4) +
                                      (kSbPerColumn ? BLOCK_N * 4 : 0);
  static constexpr uint32_t kBBytes = Layout::kBBytesPerStage;
  /// Tiles of at most 128 rows load A through a box of 128 rows (gemm_has_a_half_box; dense: the wide tail's).
  static constexpr bool kAHalfBox = gemm_has_a_half_box(kGrouped, BLOCK_M, kWideTail);
  /// Arrivals that fill a stage: A's and B's TMA issuers (each announces its own bytes with arrive.expect_tx) and the
  /// scale warp's 32 lanes; with gathered SA, each lane's cp.asyncs of the stage's row scales arrive once more.
  static constexpr uint32_t kFullArrivals = 2 + 32 + (kSaGather ? 32 : 0);
  /// Whether every math thread reads SB itself (a broadcast load before its turn): dense kernels and contiguous ones
  /// with whole batches (read by lane 0 after the issue and shuffled, those loads sat in the chain from one batch to
  /// the next: 2% slower at 256x128 on an H100); masked kernels only with two waves (at 128x160 the broadcast measured
  /// 1.4% slower, at 256x128 it keeps the K loop the dense one's). Half batches (128x192) of grouped kernels keep lane
  /// 0's load: the broadcast made contiguous K=2048 0.3-2.8% slower.
  /// 1x128 scales of B: every thread reads its own columns' scales.
  static constexpr bool kEveryThreadReadsSb =
      kSbPerColumn || ((gemm_batch_parts(BLOCK_N, kKBlocksPerCta) == 1 || kGemmKind == GemmKind::kNormal) &&
                       (kGemmKind != GemmKind::kGroupedMasked || kNumWaves == 2));
  /// A stage is released by every thread that read it with ordinary loads, so that each read happens before the
  /// scale warp's next stores there (one lane's arrive after __syncwarp orders the others too, but racecheck cannot
  /// see it): gathered SA and a broadcast SB are read by every math thread; otherwise one arrive per warp. A and B are
  /// read by the async proxy (wgmma).
  static constexpr uint32_t kEmptyArrivals = kSaGather || kEveryThreadReadsSb ? kNumMathThreads : kNumMathWarps;

  // ---- Tile walk ----------------------------------------------------------------------------------------------
  using Scheduler = TileScheduler<kGemmKind, BLOCK_M, BLOCK_N, kNumNBlocks, kWideTail, kDefaultRasterBand,
                                  gemm_dense_clips_long_tail(kGrouped, kSbMode, kOutput),
                                  gemm_dense_one_round_by_rows(kGrouped, kSbMode, kOutput)>;
  /// Contiguous 256-row kernels run a half (at most 128 rows) as a wide tile over two n-blocks (Tile::wide): A
  /// through the 128-row box into the first half of the A stage, the second n-block's B into the other half. Its wave
  /// 1 is the same rows times that B, with the second SB block's scale, stored 128 columns to the right. Kernels with
  /// kWideTail run a last row block (dense) or each group's last block (masked, psum) of at most 128 rows so.
  static constexpr bool kWideTiles = Scheduler::kWideTiles;
  static constexpr uint32_t kWideBOffset = (BLOCK_M / 2) * kBlockK;  // the second B tile, in the A stage
  /// B's issuer may fill two stages per empty wait (GemmArgs::b_pairs, set on the host where the call streams B).
  static constexpr bool kBPairs = gemm_may_pair_b_stages(kGemmKind, BLOCK_M, BLOCK_N, kSplitK);

  // ---- The math warpgroups' K loop ----------------------------------------------------------------------------
  /// Two ways to keep the tensor pipe busy while a warpgroup promotes:
  /// - kKDepth > 1: a warpgroup issues kKDepth K blocks into separate accumulators, then promotes each as it
  ///   completes while the later ones run;
  /// - kKDepth == 1 with two math warpgroups: they take turns issuing their K block's wgmmas (a named-barrier token
  ///   passed right after each issue), so the tensor pipe runs one warpgroup's batch while the other promotes.
  static constexpr uint32_t kKDepth = gemm_k_depth(BLOCK_M, BLOCK_N);
  static constexpr bool kPingPong = kNumMathWarpgroups == 2 && kKDepth == 1;
  /// Grouped tiles end where their group's rows do, so the second math warpgroup may have no rows in a wave of a tile:
  /// it passes those turns on instead of computing them (MathWarpgroup::compute_tile). Dense tiles hold rows in every
  /// wave's both halves (a last row block moves up to end at row M; M <= 64 takes 64-row tiles).
  static constexpr bool kPassesIdleTurns = kPingPong && kGrouped;
  /// With turns, a K block's wgmmas as kBatchParts commit groups of kPartN columns (gemm_batch_parts).
  static constexpr uint32_t kBatchParts = kPingPong ? gemm_batch_parts(BLOCK_N, kKBlocksPerCta) : 1;
  static constexpr uint32_t kPartN = BLOCK_N / kBatchParts;
  /// Kernels whose math threads all read SB, and half batches, read the scales before the turn, so that the
  /// promotion is ready to run once the wgmmas complete (with half batches, ptxas otherwise scheduled the loads after
  /// the second half's wait).
  static constexpr bool kScalesBeforeTurn = kEveryThreadReadsSb || kBatchParts == 2;
  /// With one accumulator (kKDepth == 1), a tile's first K block sets the running accumulators instead of a zeroing
  /// pass before it. Not with a single K block (K <= 128): set directly from the in-flight accumulator, ptxas may
  /// give them its registers and then waits for the wgmmas.
  static constexpr bool kAssignFirst = kKDepth == 1 && kKBlocksPerCta > 1;
  /// A thread's sums as float4 chunks (split-K's exchange): chunk c holds elements c * 4 .. c * 4 + 3 of its waves in
  /// order.
  static constexpr uint32_t kChunksPerWave = BLOCK_N / 8;
  static constexpr uint32_t kNumAccumChunks = kNumWaves * kChunksPerWave;
};

}  // namespace finegemm::device
