#include "heuristics/time_model.hpp"

#include <algorithm>

#include "finegemm/device/common/gemm_layout.cuh"

namespace finegemm::heuristics {
namespace {

// Cycles from a math warpgroup's wgmma completion to its next issue (promotion, release, turn, descriptors): fitted
// to H100 runs of BLOCK_N 96..192.
constexpr double kMathCriticalCycles = 300.0;
// The same with 1x128 scales on both operands (the weight gradient), whose promotion scales each column by its own
// factor: fitted to H200 runs of 4096x4096x7168, where 128x160 tiles (7 rounds) ran faster than 128x128 (8 rounds).
constexpr double kMathCriticalCyclesSbPerRow = 384.0;
// Cycles per FLOP of a BLOCK_M=256 tile (two 64-row waves per math warpgroup, BLOCK_N=128) relative to BLOCK_M=128:
// the per-K-block work (barrier waits, scales, turns, stage bookkeeping) is shared by two waves and the tile loads
// 17% fewer bytes per FLOP. Measured on an H100: 180.2 vs 199.9 us at 4096x4096x7168 (BN=128, same wave count,
// 0.90) and 723.0 vs 775.2 us at 4096x7168x16384 (against BN=160, 0.915 per FLOP).
constexpr double kBlockM256CycleFactor = 0.91;
// Dense GEMMs whose 256x128 tiles run in few waves, or at K <= 2048, take 0.95 instead. Timed on an H100 with
// 256x128, 128x192, 128x160 and 128x128 tiles over M 512..3072 and six (N, K) pairs, the 0.91 pick was
// up to 9.8% slower than the fastest of them (1024x7168x2048 29.0 against 26.4 us with 128x160). Where 0.95 then
// moves a shape to 128-row tiles it ran faster on 15 of 16 checked (two rounds each, us: 2048x7168x16384 372.4-373.7
// -> 361.9-363.1, 1024x7168x2048 28.5 -> 26.1, 6400x2112x7168 164.2-164.5 -> 147.8-148.4, 3200x7168x2048 78.5-78.9
// -> 73.7-73.9) and 0.9% slower on one (1600x4096x7168, BN=144). Where the 256x128 tiles run in more waves at longer
// K, 0.95 lost 2-13% (10688x4096x7168 456.1-456.2 -> 514.8-515.0, 5504x11008x4096 362.8-363.7 -> 381.6-383.5): over
// many rounds of tiles the 256-row tile's fewer operand reads per FLOP count for more than the model shows. Grouped
// GEMMs keep 0.91: with 0.95 masked 4x256x7168x2048 moved to 128x160 tiles and ran 44.0 against 35.1 us.
constexpr double kBlockM256CycleFactorFewWaves = 0.95;
constexpr int64_t kBlockM256FewWaves = 4;
constexpr int64_t kBlockM256ShortK = 2048;
// The epilogue's TMA stores write slabs of epilogue_slab_cols(BLOCK_N) columns; at BLOCK_N 112 and 144 (32-byte
// swizzle) a slab row is 32 bytes of D, and storing a tile costs more than its bytes at the SM's share of DRAM
// bandwidth: at 512x32768x512 (D twice B's bytes, 4 K blocks a tile) BLOCK_N=144 ran 27.5-27.6 us against 23.2 for
// BLOCK_N=128 and 23.6 for 192 (H100), 3.9 against 2.9 us per tile where the
// model's store term alone separated them by 0.2. Fitted to that: slabs with rows under 64 bytes cost this much more
// where D has at least B's bytes (dense: 2 M >= K; the call is the output's writes). Where B dominates it did not show:
// 192x7168x2048 and 256x7168x2048 ran 10.8 and 11.0 us with BLOCK_N=112 (128 tiles) against 11.5 and 11.4 with 128.
constexpr double kNarrowSlabStoreFactor = 1.43;
// Split-K (two CTAs of a cluster, each over half of K) against unsplit tiles, measured on an H100 (kernel us): 64x32
// split tiles won where the unsplit ones were 16 columns wide (64x2112x7168 12.2 vs 13.3, 1x2112x7168 16.7 vs
// 18.8, 129x576x7168 11.2 vs 12.8) and lost with 64-column or 128-row ones (64x4096x7168 BN=64 19.0 vs 16.9,
// 128x4096x7168 21.2 vs 19.0, 100x2112x7168 BM=128 14.8 vs 14.5). Its fixed cost (a clustered launch, the
// partial-sum exchange) is charged as:
constexpr double kSplitKOverheadUs = 1.0;

/// Dense 256x128 tiles take the wide-tail kernel (KernelConfig::wide_tail) from this K on, where it saves a round of
/// tiles. Measured on an H100 (us, without / with wide tails, two rounds): 4160x7168x16384 756.8, 756.4 / 694.9, 695.3;
/// 4100x4096x7168 (128x128 before) 198.5, 200.5 / 172.4, 173.2; 6200x4096x7168 (128x160 before) 301.8, 304.7 / 257.1,
/// 257.0; 1100x7168x16384 (128x192 before) 209.7, 209.6 / 194.2, 194.3; 4224x7168x2048 (128x192 before) 97.8, 97.4 /
/// 94.7, 94.7; 4157x1000x4096 (128x128 before) 29.0, 29.0 / 29.3, 29.2. A first version had the wide path in every
/// 256x128 kernel and no K limit: the unchanged shapes ran 0.4-0.6% slower (4096x7168x16384 643.1, 643.9 / 647.4,
/// 647.8), 8300x7168x2048 (no round saved) 0.5% slower, and at K=1536 4160x24576x1536 took 256x128 tiles over 128x192
/// ones, 247.8, 248.4 against 237.9, 237.2.
constexpr int64_t kWideTailMinK = 2048;

/// Whether the kernel of `c` may run a last row block of at most 128 rows as wide tiles (device::gemm_wide_tail): a
/// dense GEMM's from kWideTailMinK on, each masked or psum group's at any K.
bool wide_tail_allowed(const Problem& p, const KernelConfig& c) {
  return device::gemm_wide_tail(static_cast<device::GemmKind>(p.kind), uint32_t(c.block_m), uint32_t(c.block_n),
                                uint32_t(c.split_k), c.sa_mode) &&
         (p.kind != GemmKind::kNormal || p.k >= kWideTailMinK);
}

/// Bytes of D each output element costs: written once, and with accumulation C read once too.
double output_bytes_per_element(const Problem& p) {
  const uint32_t output = output_of(p);
  return double(device::gemm_out_bytes(output)) * (p.accumulate ? 2.0 : 1.0);
}

/// Whether D (the call's M x N) fits the L2.
bool d_fits_the_l2(const Problem& p, const HardwareModel& hw) {
  return double(p.m) * double(p.n) * double(device::gemm_out_bytes(output_of(p))) <= hw.l2_bytes;
}

/// Where D outgrows the L2, a tile on D^T's grid takes this much longer than one of the same size on D's own grid:
/// its transposed reductions into D cost it more there. Measured on an H200 (`finegemm bench`, C = D, 128x160 tiles
/// on a grid of 1440 in 11 rounds either way, two rounds, us): 7168x4096x16384 on D^T's tiles 950.4, 950.9 against
/// 898.4, 897.0 for a 4096x7168x16384 call on D's own (5.9%; on another machine 923.2, 922.4 against 875.7, 876.4,
/// 5.4%); at 128x176 (7168x4096x16384 in 10 rounds, 1312 tiles, against 4096x7168x16384 on D's own 128x160 in 11)
/// 903.4, 902.6 against 898.4, 897.0, about what its 10% more columns per tile cost. At 2112x4096x7168 (D of 35 MB)
/// the two ran alike (128x176: 123.6, 124.0 against 124.0, 123.8 us).
constexpr double kDTransposedTileFactorBeyondL2 = 1.06;

}  // namespace

int tiled_groups(const Problem& p) {
  return p.kind == GemmKind::kGroupedMasked || p.kind == GemmKind::kGroupedContiguousPsum ||
                 p.kind == GemmKind::kGroupedK
             ? p.num_groups
             : 1;
}

uint32_t output_of(const Problem& p) {
  if (p.d_dtype != DType::kFloat32) return device::kOutBf16;
  if (!p.accumulate) return device::kOutF32;
  return p.c_is_d ? device::kOutF32AddToD : device::kOutF32AddC;
}

CallBytes call_bytes(const Problem& p) {
  const double rows = double(rows_for_tiles(p) * tiled_groups(p));
  const double b_groups = p.kind == GemmKind::kNormal ? 1.0 : double(p.num_groups);
  return CallBytes{rows * double(p.k), b_groups * double(p.n * p.k), output_bytes_per_element(p) * rows * double(p.n)};
}

void score(KernelConfig& c, const Problem& p, const HardwareModel& hw) {
  const int64_t n_blocks = ceil_div(p.n, c.block_n);
  const int groups = tiled_groups(p);
  // Masked and psum kernels run each group's last block of at most 128 rows as wide tiles wherever they can (the
  // groups' rows are known only on the device); here every group has p.m rows.
  c.wide_tail = p.kind != GemmKind::kNormal && wide_tail_allowed(p, c);
  c.num_tiles = std::max<int64_t>(
      1, groups * device::gemm_group_tiles<int64_t>(rows_for_tiles(p), n_blocks, c.block_m, c.wide_tail));
  // Split-K: a tile takes both CTAs of a cluster, each over half of K.
  c.num_waves = ceil_div(c.num_tiles, int64_t(c.grid / c.split_k));
  // A dense GEMM's last row block of at most 128 rows as wide tiles, where that saves a round.
  if (p.kind == GemmKind::kNormal && wide_tail_allowed(p, c)) {
    const int64_t wide_tiles = device::gemm_dense_tiles(p.m, n_blocks, uint32_t(c.block_m), true);
    if (ceil_div(wide_tiles, int64_t(c.grid)) < c.num_waves) {
      c.wide_tail = true;
      c.num_tiles = wide_tiles;
      c.num_waves = ceil_div(c.num_tiles, int64_t(c.grid));
    }
  }
  // Cycles per 128-wide K block. A warpgroup's batch of four m64nNk32 wgmmas keeps the tensor pipe busy 2N cycles
  // (N rounded up to 32: BN=112 measured 14% slower than BN=128 at equal waves on an H100). Between the end of its
  // batch and the issue of its next one a warpgroup promotes and re-issues, about kMathCriticalCycles. With two
  // warpgroups taking turns, the pipe stays busy while the other's batch covers that; one warpgroup (BLOCK_M = 64)
  // pays it every K block. Straddling tiles pay 2% for their per-granule scale selection.
  const double charged_n = double(ceil_div(c.block_n, 32) * 32);
  const double straddle = 128 % c.block_n == 0 ? 1.0 : 1.02;
  const double batch_cycles = 2.0 * charged_n * straddle;
  // BLOCK_M = 256: each warpgroup runs two 64-row waves, i.e. two batches, per K block.
  const double critical_cycles = p.sb_per_row ? kMathCriticalCyclesSbPerRow : kMathCriticalCycles;
  const double turns_cycles = std::max(2.0 * batch_cycles, batch_cycles + critical_cycles);
  const bool few_waves_or_short_k = c.num_waves <= kBlockM256FewWaves || p.k <= kBlockM256ShortK;
  const double block_m256_factor =
      p.kind == GemmKind::kNormal && few_waves_or_short_k ? kBlockM256CycleFactorFewWaves : kBlockM256CycleFactor;
  const double k_block_cycles = c.block_m == 64    ? batch_cycles + critical_cycles
                                : c.block_m == 128 ? turns_cycles
                                                   : 2.0 * turns_cycles * block_m256_factor;
  const double cta_k = double(p.k) / double(c.split_k);
  const double tile_compute_s = double(ceil_div(p.k, 128)) / double(c.split_k) * k_block_cycles / hw.sm_clock_hz;
  const double tile_l2_bytes = double(c.block_m + c.block_n) * cta_k;
  // Loading the tile's operands into the SM is counted in full next to the compute: with few K blocks per stage
  // ring the two overlap poorly (measured: BM=128 BN=16 at 128x4096x7168 ran 1.4x slower than BN=32 on an H100).
  // Writing the bf16 tile at the SM's share of DRAM bandwidth overlaps the next tile poorly: measured per-tile
  // overheads on 4096x32768x512 (H100) were 1.24 us (BN=128) and 1.68 us (BN=160), close to this term.
  const CallBytes bytes = call_bytes(p);
  const bool writes_dominate = bytes.d >= bytes.b;
  const double slab_factor =
      writes_dominate && device::gemm_out_bytes(c.output) *
                                 device::epilogue_slab_cols(uint32_t(c.block_n), device::gemm_out_bytes(c.output)) <
                             64
          ? kNarrowSlabStoreFactor
          : 1.0;
  const double tile_store_s =
      slab_factor * output_bytes_per_element(p) * c.block_m * c.block_n / (hw.dram_bytes_per_s / double(c.grid));
  // Loaded a tile ahead, C's reads and D's writes run under the K loops; otherwise each tile's stores (or reductions
  // into D, whose reads the L2 makes as it adds) follow its K loop.
  const double tile_math_s = tile_compute_s + tile_l2_bytes / hw.sm_l2_bytes_per_s;
  const double d_transposed_factor =
      device::gemm_d_transposed(c.output) && !d_fits_the_l2(p, hw) ? kDTransposedTileFactorBeyondL2 : 1.0;
  const double tile_s = c.output == device::kOutF32AddCAhead ? std::max(tile_math_s, tile_store_s)
                                                              : d_transposed_factor * (tile_math_s + tile_store_s);
  c.tile_us = 1e6 * tile_s;
  // The M-grouped kernels read B as one [G * N, K] tensor: an n-block that runs past N reads the next group's first
  // rows too (TMA clips only at the tensor's end). Where the call is B's stream, that decides between tiles the model
  // otherwise times alike: masked 32 groups of ~20 rows at 4096x4096 and 4096x2048 ran 141.0 and 76.3 us with 64x128
  // tiles against 146.5 and 80.0 with 64x160 (the last n-block of each group 96 wide, 64 rows read past it; H200).
  const bool b_groups_in_one_tensor = p.kind == GemmKind::kGroupedContiguous || p.kind == GemmKind::kGroupedMasked ||
                                 p.kind == GemmKind::kGroupedContiguousPsum;
  const double b_read = b_groups_in_one_tensor ? double(n_blocks * c.block_n) / double(p.n) : 1.0;
  const double dram_bytes = bytes.a + bytes.b * b_read + bytes.d;
  c.estimated_us = 1e6 * std::max(dram_bytes / hw.dram_bytes_per_s, double(c.num_waves) * tile_s) +
                   (c.split_k > 1 ? kSplitKOverheadUs : 0.0);
}

}  // namespace finegemm::heuristics
