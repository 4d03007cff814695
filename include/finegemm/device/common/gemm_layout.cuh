// Compile-time geometry of the GEMM kernel, shared by the kernel and by the host heuristic (which must agree on the
// shared-memory footprint and the epilogue's TMA box).
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::device {

inline constexpr uint32_t kBlockK = 128;
inline constexpr uint32_t kNumProducerThreads = 128;
inline constexpr uint32_t kWarpgroupRows = 64;

/// Math warpgroups of a BLOCK_M: one for 64 rows, two for 128 and 256 (then each computes two 64-row waves).
FG_HOST_DEVICE constexpr uint32_t gemm_num_math_warpgroups(uint32_t block_m) { return block_m == 64 ? 1 : 2; }

FG_HOST_DEVICE constexpr uint32_t gemm_num_threads(uint32_t block_m) {
  return kNumProducerThreads + gemm_num_math_warpgroups(block_m) * 128;
}

/// How a kernel reads the activation scales SA (a kernel template parameter).
enum GemmSaMode : uint32_t {
  /// MN-major, TMA-aligned ([KB][M_pad]): one TMA box of BLOCK_M row scales per stage.
  kSaMnMajor = 0,
  /// K-major ([M][KB]) whose row stride TMA cannot take (not a multiple of 4 floats, or a base not 16-byte aligned):
  /// the scale warp gathers each row's scale with cp.async.
  kSaKMajorGather = 1,
  /// K-major with a row stride of a multiple of 4 floats: one TMA box of 4 K blocks x BLOCK_M rows per stage (the
  /// smallest box TMA takes, 16 bytes a row), of which the stage uses the first column.
  kSaKMajorTma = 2,
  /// MN-major with at most 4 rows (decode calls of 1 to 4 tokens): every K block's row scales loaded once per CTA,
  /// the same for all its tiles, instead of a box per stage (whose rows, 16 bytes apart, measured slow: heuristics'
  /// sa_mode_for). With M_pad = 4 one bulk copy (the last K block by 4-byte copies), else one TMA box of (4, KB).
  kSaMnMajorOnce = 3,
  /// K-major ([M][KB], a row stride of a multiple of 4 floats) with at most 16 rows: the same once-loaded SA, through
  /// one box of (KB, 16), held [row][KB] in shared memory (gathered per stage, such rows measured up to 1.5x slower).
  kSaKMajorOnce = 4,
  /// MN-major with 5 to 16 rows and M_pad (the stride between K blocks) of at most 16: every K block's row scales
  /// loaded once per CTA, as kSaMnMajorOnce, by one bulk copy of all but the last K block (and 4-byte copies for that
  /// one), held with SA's own stride in shared memory (a TMA box of (16, KB), rows of 64 bytes, measured slower).
  kSaMnMajorOnce16 = 5,
};

/// Whether a kernel loads SA once per CTA (kSaMnMajorOnce, kSaKMajorOnce, kSaMnMajorOnce16).
FG_HOST_DEVICE constexpr bool gemm_sa_once(uint32_t sa_mode) {
  return sa_mode == kSaMnMajorOnce || sa_mode == kSaKMajorOnce || sa_mode == kSaMnMajorOnce16;
}

/// SA loaded once: the rows it takes (MN-major of at most 4 rows: a K block's scales fill one 16-byte row of the box;
/// otherwise 16, the rows of the first warp, which holds rows r0 and r0 + 8 of the m64 accumulator) and the K blocks
/// one box holds (a TMA box dimension is at most 256).
FG_HOST_DEVICE constexpr uint32_t gemm_sa_once_rows(uint32_t sa_mode) { return sa_mode == kSaMnMajorOnce ? 4u : 16u; }
inline constexpr uint32_t kSaOnceMaxKBlocks = 256;

/// SA loaded once: bytes of its shared copy for a K extent `k` (gemm_sa_once_rows floats per K block).
FG_HOST_DEVICE constexpr uint32_t gemm_sa_once_bytes(uint32_t sa_mode, uint32_t k) {
  return align_up(ceil_div(k, kBlockK) * gemm_sa_once_rows(sa_mode) * 4u, 128u);
}

/// B's scales (a kernel template parameter).
enum GemmSbMode : uint32_t {
  /// One scale per 128x128 block of B (weights): [G, NB, KB] row-major, two values per stage staged by the scale warp.
  kSbBlock = 0,
  /// One scale per row of B per 128-wide K block (1x128, the weight gradient's second operand): MN-major and
  /// TMA-aligned ([KB][N_pad]), one TMA box of BLOCK_N column scales per stage, applied per output column.
  kSbRowMnMajor = 1,
};

/// What a kernel writes (a kernel template parameter).
enum GemmOutput : uint32_t {
  kOutBf16 = 0,     ///< D = A x B^T, bf16
  kOutF32 = 1,      ///< D = A x B^T, fp32
  kOutF32AddC = 2,  ///< D = C + A x B^T, fp32, C another fp32 tensor of D's shape (C's tiles loaded by TMA)
  kOutF32AddToD = 3,  ///< D += A x B^T, fp32 (C is D): D's tiles reduced into it by TMA (the add in the L2)
  /// D = C + A x B^T, fp32, C another tensor or D itself: C's tiles loaded by TMA into two shared tiles in turn, each
  /// a tile ahead of its use, so that C's reads and D's writes stream under the K loops (memory-bound calls)
  kOutF32AddCAhead = 4,
  /// D += (A x B^T)^T, fp32 (C is D): the kernel runs a weight gradient on the tile grid of D^T, its A and B the
  /// call's B and A (both with 1x128 scales along K), and reduces each tile into D transposed by TMA. Chosen where
  /// D^T's tiles take fewer rounds of the SMs than D's, as the time model counts them (time_model.cpp); dense 128-row
  /// tiles, the kernel's rows a multiple of 128 (every tile whole, no row-checked path).
  kOutF32AddToDT = 5,
  /// D = (A x B^T)^T, bf16: the same GEMM on D^T's tile grid without C, each tile stored into D transposed by TMA
  /// (stmatrix.trans into shared memory). Chosen as kOutF32AddToDT is.
  kOutBf16DT = 6,
};

/// Whether the kernel reduces its tiles into D by TMA (D += A x B^T, as given or transposed).
FG_HOST_DEVICE constexpr bool gemm_reduces_into_d(uint32_t output) {
  return output == kOutF32AddToD || output == kOutF32AddToDT;
}

/// Whether the kernel's tiles are tiles of D^T (kOutF32AddToDT, kOutBf16DT).
FG_HOST_DEVICE constexpr bool gemm_d_transposed(uint32_t output) {
  return output == kOutF32AddToDT || output == kOutBf16DT;
}

/// Whether the output's kernel loads C's tiles by TMA (kOutF32AddC, kOutF32AddCAhead).
FG_HOST_DEVICE constexpr bool gemm_loads_c(uint32_t output) {
  return output == kOutF32AddC || output == kOutF32AddCAhead;
}

/// Shared output tiles of a kernel: two where C's tiles are loaded a tile ahead, one otherwise.
FG_HOST_DEVICE constexpr uint32_t gemm_num_d_tiles(uint32_t output) { return output == kOutF32AddCAhead ? 2u : 1u; }

/// Bytes of one output element.
FG_HOST_DEVICE constexpr uint32_t gemm_out_bytes(uint32_t output) {
  return output == kOutBf16 || output == kOutBf16DT ? 2u : 4u;
}

/// Whether the output tile goes out in parts (gemm_store_cols): fp32 tiles wider than 64 columns without a C to load.
FG_HOST_DEVICE constexpr bool gemm_stores_in_parts(uint32_t block_n, uint32_t output) {
  return (output == kOutF32 || gemm_reduces_into_d(output)) && block_n > 64;
}

/// Columns of the output tile one shared buffer holds (a part of the tile). fp32 tiles without a C to load go out in
/// parts, each stored (or reduced) from its buffer while the next is written: a whole 128x160 fp32 tile (80 KB) left
/// shared memory for 3 stages, parts of 64 columns (32 KB) leave it 5. Parts of 32 columns in K-grouped tiles, in
/// dense ones of at most 144 columns and in those reduced into D transposed, of 64 in wider dense tiles. bf16 tiles and
/// fp32 ones that C's tile is loaded into are held whole. `k_grouped`: the K-grouped kind (K = 0 in the kernel's
/// template).
FG_HOST_DEVICE constexpr uint32_t gemm_store_cols(uint32_t block_n, uint32_t output, bool k_grouped) {
  if (!gemm_stores_in_parts(block_n, output)) return block_n;
  if (gemm_d_transposed(output)) return 32u;  // a part is a TMA box's 32 rows of D (tile columns)
  return k_grouped || block_n <= 144 ? 32u : 64u;
}

/// Shared buffers the output's parts go through in turn (gemm_store_cols), so that a part is written while the
/// stores (or reductions) of the ones before still read theirs: 128 columns of buffers where a reduction into D goes
/// out in parts of a tile of more than 144 columns, 64 otherwise (128x160: 4 stages instead of 5; at 128x144 the
/// second 64 columns measured slower than the stage they cost). A part waits only for the buffer's previous part.
/// Measured on an H200 (`finegemm bench`, C = D, same run, two rounds, us), parts of 64 columns -> 32 with the same
/// shared memory: K-grouped (128x160) 4 experts 4096x7168 1410.3, 1410.2 -> 1396.8, 1398.5, 7168x2048 831.9, 831.8 ->
/// 826.3, 826.6; 8 experts 4096x7168 1000.9, 1000.5 -> 989.6, 991.0, 7168x2048 653.7, 653.4 -> 646.9, 647.2; 16
/// experts 4096x7168 1988.6, 1968.2 -> 1940.2, 1942.9, 7168x2048 1080.3, 1079.1 -> 1068.3, 1067.3; dense 2112x4096x7168
/// (128x144) 137.3, 136.9 -> 136.1, 135.9; but dense 128x160 slower: 7168x4096x16384 935.8, 936.6 -> 944.8, 943.8,
/// 24576x4096x1536 348.6, 348.5 -> 351.8, 352.1, 7168x4096x2048 139.8, 139.8 -> 141.0, 140.6.
FG_HOST_DEVICE constexpr uint32_t gemm_store_buffers(uint32_t block_n, uint32_t output, bool k_grouped) {
  if (!gemm_stores_in_parts(block_n, output)) return 1u;
  return (gemm_reduces_into_d(output) && block_n > 144 ? 128u : 64u) / gemm_store_cols(block_n, output, k_grouped);
}

/// Floats a stage holds per tile row of SA (the K-major TMA box is 4 wide).
FG_HOST_DEVICE constexpr uint32_t gemm_sa_row_floats(uint32_t sa_mode) { return sa_mode == kSaKMajorTma ? 4u : 1u; }

/// Shared-memory layout of one kernel instance (byte offsets from a 1024-aligned base).
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, uint32_t K, uint32_t kSplitK = 1,
          uint32_t kSaMode = kSaMnMajor, uint32_t kSbMode = kSbBlock, uint32_t kOutput = kOutBf16>
struct GemmSmemLayout {
  static constexpr uint32_t kNumKBlocks = ceil_div(K, kBlockK);
  static constexpr uint32_t kNumMathWarpgroups = gemm_num_math_warpgroups(BLOCK_M);
  /// 64-row waves per math warpgroup; wave w of warpgroup g holds tile rows w * kWaveRows + g * 64 + [0, 64).
  static constexpr uint32_t kNumWaves = BLOCK_M / (kWarpgroupRows * kNumMathWarpgroups);
  static constexpr uint32_t kWaveRows = kWarpgroupRows * kNumMathWarpgroups;
  // (BLOCK_M, BLOCK_N) bf16 or fp32; where C is loaded, C's tile arrives here by TMA and D's leaves from it
  static constexpr uint32_t kDTileBytes =
      align_up(BLOCK_M * gemm_store_cols(BLOCK_N, kOutput, K == 0) * gemm_out_bytes(kOutput), 1024u);
  static constexpr uint32_t kNumDTiles = gemm_num_d_tiles(kOutput);
  static constexpr uint32_t kStoreBuffers = gemm_store_buffers(BLOCK_N, kOutput, K == 0);
  static constexpr uint32_t kDBytes = kNumDTiles * kStoreBuffers * kDTileBytes;
  static constexpr uint32_t kABytesPerStage = BLOCK_M * kBlockK;                         // (BLOCK_M, BLOCK_K) fp8
  static constexpr uint32_t kBBytesPerStage = BLOCK_N * kBlockK;                         // (BLOCK_N, BLOCK_K) fp8
  static constexpr uint32_t kSaRowFloats = gemm_sa_row_floats(kSaMode);
  static constexpr bool kSaOnce = gemm_sa_once(kSaMode);
  // SA loaded once: floats between two rows and between two K blocks of its shared copy (kSaMnMajorOnce16: between
  // K blocks SA's own M_pad, args.ld_sa, at run time)
  static constexpr uint32_t kSaOnceRowStride = kSaMode == kSaKMajorOnce ? kNumKBlocks : 1u;
  static constexpr uint32_t kSaOnceKbStride = kSaMode == kSaKMajorOnce ? 1u : gemm_sa_once_rows(kSaMode);
  // (BLOCK_M, 1 or 4) fp32 per stage; SA loaded once: none per stage, (KB, gemm_sa_once_rows) fp32 for the whole call
  static constexpr uint32_t kSaBytesPerStage = kSaOnce ? 0u : align_up(BLOCK_M * kSaRowFloats * 4u, 128u);
  static constexpr uint32_t kSaOnceBytes = kSaOnce ? gemm_sa_once_bytes(kSaMode, K) : 0u;
  // (2) fp32, or (BLOCK_N) fp32 for 1x128 scales of B
  static constexpr uint32_t kSbBytesPerStage = kSbMode == kSbBlock ? 8u : align_up(BLOCK_N * 4u, 128u);
  static constexpr uint32_t kOffsetD = 0;
  static constexpr uint32_t kOffsetA = kOffsetD + kDBytes;
  static constexpr uint32_t kOffsetB = kOffsetA + kNumStages * kABytesPerStage;
  static constexpr uint32_t kOffsetSa = kOffsetB + kNumStages * kBBytesPerStage;
  static constexpr uint32_t kOffsetSb = kOffsetSa + kNumStages * kSaBytesPerStage + kSaOnceBytes;
  static constexpr uint32_t kOffsetBarriers = kOffsetSb + align_up(kNumStages * kSbBytesPerStage, 16u);
  // full + empty per stage; split-K: the partial-sum exchange's full + empty; C loaded: each shared tile's full and
  // empty; SA loaded once: its full barrier, last
  static constexpr uint32_t kBarrierBytes =
      (2 * kNumStages + (kSplitK > 1 ? 2 : 0) + (gemm_loads_c(kOutput) ? 2 * kNumDTiles : 0) + (kSaOnce ? 1 : 0)) * 8;
  static constexpr uint32_t kOffsetSaFull = kOffsetBarriers + kBarrierBytes - 8;
  // Split-K: the fp32 partial sums of one warpgroup's 64 rows, which the other CTA of the cluster sends this one
  // (SplitKExchange: each CTA adds and stores the rows of the warpgroups it owns)
  static constexpr uint32_t kOffsetExchange = align_up(kOffsetBarriers + kBarrierBytes, 16u);
  static constexpr uint32_t kExchangeBytes = kSplitK > 1 ? kWarpgroupRows * BLOCK_N * 4u : 0u;
  static constexpr uint32_t kTotalBytes = kOffsetExchange + kExchangeBytes;
  static constexpr uint32_t kAlignmentSlack = 1024;  // the dynamic shared base is aligned up to 1024 in the kernel
  static constexpr uint32_t kLaunchBytes = kTotalBytes + kAlignmentSlack;
};

/// Run-time twin of GemmSmemLayout<...>::kLaunchBytes for the host heuristic.
FG_HOST_DEVICE constexpr uint32_t gemm_smem_launch_bytes(uint32_t block_m, uint32_t block_n, uint32_t num_stages,
                                                         uint32_t k, uint32_t split_k = 1,
                                                         uint32_t sa_mode = kSaMnMajor, uint32_t sb_mode = kSbBlock,
                                                         uint32_t output = kOutBf16) {
  const uint32_t d_bytes =
      gemm_num_d_tiles(output) * gemm_store_buffers(block_n, output, k == 0) *
      align_up(block_m * gemm_store_cols(block_n, output, k == 0) * gemm_out_bytes(output), 1024u);
  const bool sa_once = gemm_sa_once(sa_mode);
  const uint32_t stage_bytes = block_m * kBlockK + block_n * kBlockK +
                               (sa_once ? 0u : align_up(block_m * gemm_sa_row_floats(sa_mode) * 4u, 128u));
  const uint32_t sa_once_bytes = sa_once ? gemm_sa_once_bytes(sa_mode, k) : 0u;
  const uint32_t sb_bytes = align_up(num_stages * (sb_mode == kSbBlock ? 8u : align_up(block_n * 4u, 128u)), 16u);
  const uint32_t barrier_bytes = (2 * num_stages + (split_k > 1 ? 2 : 0) +
                                  (gemm_loads_c(output) ? 2 * gemm_num_d_tiles(output) : 0) + (sa_once ? 1 : 0)) *
                                 8;
  const uint32_t exchange_bytes = split_k > 1 ? kWarpgroupRows * block_n * 4u : 0u;
  return align_up(d_bytes + num_stages * stage_bytes + sa_once_bytes + sb_bytes + barrier_bytes, 16u) +
         exchange_bytes + 1024;
}

/// Epilogue slabs: the output tile is stored as BLOCK_N / slab_cols slabs with the widest TMA swizzle that divides its
/// rows (BLOCK_N is a multiple of 16, so at least 32 bytes); `out_bytes` is 2 (bf16) or 4 (fp32).
FG_HOST_DEVICE constexpr uint32_t epilogue_swizzle_bytes(uint32_t block_n, uint32_t out_bytes = 2) {
  return block_n * out_bytes % 128 == 0 ? 128 : block_n * out_bytes % 64 == 0 ? 64 : 32;
}

/// Columns of one epilogue slab: the TMA store's box width.
FG_HOST_DEVICE constexpr uint32_t epilogue_slab_cols(uint32_t block_n, uint32_t out_bytes = 2) {
  return epilogue_swizzle_bytes(block_n, out_bytes) / out_bytes;
}

/// Registers per thread after setmaxnreg in the kernels with two math warpgroups (BLOCK_M 128 and 256), which start
/// with 168 each (384 x 168 of the SM's 65536): the math warpgroups take 232 and leave the producer warpgroup 40.
/// The producers of the M-grouped layouts (contiguous, masked, psum) and of the gathered SA spill with 40 at BLOCK_M
/// 128, so those kernels split 224 / 56: the M-grouped ones up to BLOCK_N 160 (the contiguous 128x192 kernels do not
/// spill with 40), the gathered ones up to 192 (224 registers hold 128x192's 192 accumulators without spills). The
/// K-grouped producer fits in 40 but at BLOCK_N 144 (8 bytes spilled): its 128x160 kernels at 232 / 40 ran DeepGEMM's
/// six expert shapes 0.7-1.6% faster than at 224 / 56 (H200, same run).
FG_HOST_DEVICE constexpr bool gemm_roomy_producer(GemmKind kind, uint32_t block_m, uint32_t block_n,
                                                  uint32_t sa_mode) {
  const bool grouped_by_rows = kind != GemmKind::kNormal && kind != GemmKind::kGroupedK;
  return block_m == 128 && ((grouped_by_rows && block_n <= 160) || (kind == GemmKind::kGroupedK && block_n == 144) ||
                            (sa_mode == kSaKMajorGather && block_n <= 192));
}
/// The 128x176 weight-gradient tiles on D^T's tiles (gemm_d_transposed; 1x128 scales of both operands, the widest
/// tile those scales fit): their math warpgroups hold 88 + 88 accumulators and 44 column scales and take 240
/// registers, the producer warpgroup the remaining 24 (its A box a constant there). At 232 / 40 the math spilled.
FG_HOST_DEVICE constexpr bool gemm_widest_sb_per_row_tile(uint32_t block_m, uint32_t block_n, uint32_t output) {
  return block_m == 128 && block_n == 176 && gemm_d_transposed(output);
}
/// The 64-row kernels (one math warpgroup, 256 threads) have registers to spare: the weight gradient's (1x128 SB, a
/// scale per column of the tile) take 248, with which its 64x96 tiles of three K blocks in flight stop spilling (12
/// bytes with 232); the others keep 232.
FG_HOST_DEVICE constexpr uint32_t gemm_math_registers(GemmKind kind, uint32_t block_m, uint32_t block_n,
                                                      uint32_t sa_mode, uint32_t sb_mode, uint32_t output) {
  if (block_m == 64 && sb_mode == kSbRowMnMajor) return 248;
  if (gemm_widest_sb_per_row_tile(block_m, block_n, output)) return 240;
  return gemm_roomy_producer(kind, block_m, block_n, sa_mode) ? 224 : 232;
}
FG_HOST_DEVICE constexpr uint32_t gemm_producer_registers(GemmKind kind, uint32_t block_m, uint32_t block_n,
                                                          uint32_t sa_mode, uint32_t output) {
  if (gemm_widest_sb_per_row_tile(block_m, block_n, output)) return 24;
  return gemm_roomy_producer(kind, block_m, block_n, sa_mode) ? 56 : 40;
}

/// K blocks a math warpgroup keeps in flight in separate accumulators (1: one accumulator, turns between two
/// warpgroups). Small tiles are latency-bound (a K block's wgmmas take only 2 * BLOCK_N tensor cycles, their latency
/// is longer), so they issue several blocks before promoting the first; the (depth + 1) fp32 register arrays of
/// BLOCK_N / 2 must fit gemm_math_registers. With two warpgroups the turns measured as fast as depth 2 at BN=128 and 5%
/// faster than depth 4 at BN=32 (H100), so there only BN 48..64 use depth 4.
FG_HOST_DEVICE constexpr uint32_t gemm_k_depth(uint32_t block_m, uint32_t block_n) {
  return block_m == 64    ? (block_n <= 64 ? 4 : block_n <= 96 ? 3 : block_n <= 128 ? 2 : 1)
         : block_m == 128 ? (block_n > 32 && block_n <= 64 ? 4 : 1)
                          : 1;
}

/// Commit groups one K block's wgmmas of a warpgroup are split into when two warpgroups take turns: with 2, each
/// group covers half the columns (m64n(BLOCK_N/2)k32) and the first half is promoted while the second runs, which
/// shortens the path from a batch's completion to the warpgroup's next issue. It costs twice the wgmma instructions and
/// a second read of A from shared memory per batch. Measured on an H100: BLOCK_N=192 (m64n96k32 halves) 0.3-2.4%
/// faster at K >= 1536 and 1% slower at K=512 (4 K blocks); BLOCK_N=128 at BLOCK_M=256 (m64n64k32 halves) 1-9% slower;
/// BLOCK_N=160 mostly slower. Halves need BLOCK_N / 2 to be a multiple of 8 (B's 128-byte swizzle atoms of 8 rows).
FG_HOST_DEVICE constexpr uint32_t gemm_batch_parts(uint32_t block_n, uint32_t k_blocks_per_cta) {
  return block_n >= 192 && block_n % 16 == 0 && k_blocks_per_cta > 4 ? 2 : 1;
}

/// Whether a dense kernel keeps a last row block of more than BLOCK_M / 2 rows where it falls (its rows past M read as
/// zeros by TMA and clipped from the stores) instead of moving it up to end at row M (TileScheduler's kClipLongTail):
/// the weight gradient's (1x128 SB, fp32 output). A moved-up block shares up to BLOCK_M / 2 - 1 rows with the block
/// before, so one math warpgroup reduces its rows into D row by row with atomic adds. H200, 1000x4096x7168 (104 rows in
/// the last block): 65.7 -> 63.0 us kept where it falls. A block of at most BLOCK_M / 2 rows still moves up: the shared
/// rows are then a whole warpgroup's, which stores nothing, and A's box stays within 3 rows of row M (kept where they
/// fall, such blocks ran slower: 2112x4096x7168 136.1 -> 137.9 us, 2112x4096x2048 49.0 -> 51.0).
FG_HOST_DEVICE constexpr bool gemm_dense_clips_long_tail(bool grouped, uint32_t sb_mode, uint32_t output) {
  return !grouped && sb_mode == kSbRowMnMajor && gemm_out_bytes(output) == 4;
}

/// Whether a dense kernel whose tiles fit one round of its CTAs walks them m-block fastest and keeps a last row block
/// that M ends inside where it falls (TileScheduler's kOneRoundByRows, where M is at most N): the forward GEMM's
/// (128x128 SB blocks, bf16 output). Measured on an H200 against bands of n-blocks with that block moved up
/// (DeepGEMM's timer, DeepGEMM in the same process, DG / FG), 576x4096x7168 (one round of 130 tiles): 0.994, 0.996 ->
/// 1.014, 1.019 (`finegemm bench` 28.2 -> 27.6 us; 512x4096x7168 25.2 -> 24.0; 320x7168x7168 31.7-32.5 -> 30.9-31.0).
/// Of the two alone, the order gave 1.006-1.011 there and the kept block (in bands of n-blocks) 0.847-0.864. Where A
/// is the taller operand the bands win (their neighbours share an A tile; `finegemm bench`, three rounds, us, by rows
/// -> bands: 4096x512x32768 101.2-101.5 -> 98.2-98.5, 2048x512x7168 19.9-20.0 -> 16.6-16.7, 4096x1024x7168 44.4-44.7
/// -> 43.8-43.9, 4096x576x7168 28.7 -> 28.5-28.6; 1024x576x7168 14.2-14.3 -> 14.4). Over more rounds the order lost
/// (every grid m-block fastest in bands of 16 m-blocks, `finegemm bench`, us: 4096x4096x7168 159.1-159.4 ->
/// 163.0-163.1, 4096x7168x16384 622.2-623.2 -> 641.4-642.0, 2112x7168x2048 47.8-47.9 -> 48.6-48.7). A last row
/// block that lacks more than 16 rows moves up all the same, after one 128-row block or any number of 64-row ones
/// (TileScheduler::one_round_last_block_stays).
FG_HOST_DEVICE constexpr bool gemm_dense_one_round_by_rows(bool grouped, uint32_t sb_mode, uint32_t output) {
  return !grouped && sb_mode == kSbBlock && output == kOutBf16;
}

/// Whether a kernel also gets a 128-row box of A (GemmArgs::tma_a_half) for the tiles that compute at most 128 rows:
/// grouped GEMMs with 256-row tiles, whose contiguous blocks split between two experts and masked groups' last rows
/// make such tiles (with only the 256-row box, such a tile moved 48 KB per stage for half the math of a full one: 1.2%
/// slower on an H100 with 8 experts of 4224 rows; two 128-row boxes for every tile made full tiles ~1% slower), and
/// dense kernels with a wide tail (gemm_wide_tail), for their last row block.
FG_HOST_DEVICE constexpr bool gemm_has_a_half_box(bool grouped, uint32_t block_m, bool dense_wide_tail) {
  return block_m == 256 && (grouped || dense_wide_tail);
}

/// Whether a kernel may run a last row block of at most 128 rows as wide tiles, times two adjacent n-blocks each (the
/// kernel's and TileScheduler's kWideTail):
/// - dense: M > 256 and M mod 256 in 1..128, the last block 128 rows moved up to end at row M. Otherwise such a block
///   runs as full 256-row tiles moved up to end at row M, twice the work of its rows, which can take one more round
///   of tiles than M rounded down (H100: 4160x7168x16384 756.8 us against 674.4 at M=4096, 694.9 with wide tiles).
///   The heuristic picks it only where it saves a round (KernelConfig::wide_tail).
/// - masked and psum: each group's last block of at most 128 rows (gemm_has_half_last_block), which otherwise runs
///   one n-block at a time with its second wave skipped, about 0.65 of a full tile's time for half its work. The
///   groups' rows are known only on the device: the heuristic picks it wherever the kernel allows.
/// 256x128 tiles without split-K: the tiles of the contiguous layout's wide halves. Not with K-major SA gathered by
/// the scale warp: ptxas then spills the tile walk's position (dense N=7168 K=16384; psum N=4096 K=7168). A separate
/// instantiation from the plain kernel.
FG_HOST_DEVICE constexpr bool gemm_wide_tail(GemmKind kind, uint32_t block_m, uint32_t block_n, uint32_t split_k,
                                             uint32_t sa_mode) {
  return (kind == GemmKind::kNormal || kind == GemmKind::kGroupedMasked || kind == GemmKind::kGroupedContiguousPsum) &&
         block_m == 256 && block_n == 128 && split_k == 1 && sa_mode != kSaKMajorGather;
}

/// Whether a kernel has the code that, launched with programmatic dependent launch, prefetches B's first blocks into
/// the L2 before its wait on the previous kernel and lets the next kernel launch from there (GemmArgs::
/// pdl_prefetch_b_blocks; the heuristic's pdl_prefetch_b_blocks_for sets it): dense bf16-output kernels of at most
/// 128 rows with at most 16 K blocks per CTA. The others keep the code they had without it.
inline constexpr uint32_t kPdlPrefetchMaxKBlocks = 16;
FG_HOST_DEVICE constexpr bool gemm_may_prefetch_b_under_pdl(GemmKind kind, uint32_t block_m, uint32_t output,
                                                             uint32_t k_blocks_per_cta) {
  return kind == GemmKind::kNormal && block_m <= 128 && output == kOutBf16 && k_blocks_per_cta > 0 &&
         k_blocks_per_cta <= kPdlPrefetchMaxKBlocks;
}

/// Whether a kernel has the code that lets B's issuer fill two stages per empty wait (GemmArgs::b_pairs; the
/// heuristic's b_pairs_pay sets it where the call streams B): dense kernels of at most 128 rows without split-K and
/// BLOCK_N >= 64, and the 64x32 decode kernels, split-K included (the 256-row kernels, picked for many tiles, keep
/// their code).
FG_HOST_DEVICE constexpr bool gemm_may_pair_b_stages(GemmKind kind, uint32_t block_m, uint32_t block_n,
                                                     uint32_t split_k) {
  return kind == GemmKind::kNormal && block_m <= 128 &&
         ((split_k == 1 && block_n >= 64) || (block_m == 64 && block_n == 32));
}

/// Whether `rows` (M) ends in a last row block of at most half a tile and is not that block alone: the block a wide
/// tail runs as wide tiles.
/// (Any signed integer type: the scheduler's walk does this in 32 bits.)
template <class Int>
FG_HOST_DEVICE constexpr bool gemm_has_short_last_block(Int rows, Int block_m) {
  return rows > block_m && rows % block_m != 0 && rows % block_m <= block_m / 2;
}

/// Whether a group of `rows` rows ends in a row block of at most half a tile (a group of so few rows is that block
/// alone): the block that masked and psum kernels with a wide tail run as wide tiles. (Any signed integer type: the
/// scheduler's walk does this in 32 bits.)
template <class Int>
FG_HOST_DEVICE constexpr bool gemm_has_half_last_block(Int rows, Int block_m) {
  return rows % block_m != 0 && rows % block_m <= block_m / 2;
}

/// Tiles of one masked or psum group of `rows` rows over `n_blocks` n-blocks: its row blocks times the n-blocks,
/// except that with a wide tail (gemm_wide_tail) a half last block (gemm_has_half_last_block) takes one tile per pair
/// of n-blocks (an unpaired last n-block: a narrow one).
template <class Int>
FG_HOST_DEVICE constexpr Int gemm_group_tiles(Int rows, Int n_blocks, Int block_m, bool wide_tail) {
  if (wide_tail && gemm_has_half_last_block<Int>(rows, block_m)) return rows / block_m * n_blocks + (n_blocks + 1) / 2;
  return (rows + block_m - 1) / block_m * n_blocks;
}

/// Tiles of a dense GEMM of `rows` rows and `n_blocks` n-blocks: full row blocks times the n-blocks, and with a wide
/// tail (gemm_wide_tail and gemm_has_short_last_block) one tile per pair of n-blocks for the last block (an
/// unpaired last n-block: a narrow one).
FG_HOST_DEVICE constexpr int64_t gemm_dense_tiles(int64_t rows, int64_t n_blocks, uint32_t block_m, bool wide_tail) {
  const int64_t full = rows / block_m;
  if (wide_tail && gemm_has_short_last_block<int64_t>(rows, block_m)) return full * n_blocks + (n_blocks + 1) / 2;
  return (full + (rows % block_m != 0 ? 1 : 0)) * n_blocks;
}

}  // namespace finegemm::device
