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
// Cycles per FLOP of a BLOCK_M=256 tile (two 64-row waves per math warpgroup, BLOCK_N=128) relative to
// BLOCK_M=128: the per-K-block work is shared by two waves and the tile loads 17% fewer bytes per FLOP
// (docs/heuristics.md, "256-row tiles in the time model").
constexpr double kBlockM256CycleFactor = 0.91;
// Dense GEMMs whose 256x128 tiles run in few waves, or at K <= 2048, take 0.95 instead: with 0.91 they were
// picked where 128-row tiles ran faster (docs/heuristics.md, "256-row tiles in the time model").
constexpr double kBlockM256CycleFactorFewWaves = 0.95;
constexpr int64_t kBlockM256FewWaves = 4;
constexpr int64_t kBlockM256ShortK = 2048;
// Slabs with rows under 64 bytes (BLOCK_N 112 and 144 of bf16 D: a 32-byte swizzle) cost this much more than
// their bytes to store where D has at least B's bytes (docs/heuristics.md, "Narrow epilogue slabs").
constexpr double kNarrowSlabStoreFactor = 1.43;
// Short-K forward calls (short_k_forward) over at least 8 rounds: tiles whose epilogue slabs have 64-byte rows
// (BLOCK_N 32, 96, 160, 224) store this much slower than their bytes where D has at least B's bytes; 128x160 ran
// 4-13% slower than 128x128 or 128x192 at 4096 and 8192 x 7168 x 384-576 (docs/heuristics.md, "Short K").
constexpr double kShortKWideSlabStoreFactor = 1.3;
constexpr int64_t kShortKMinRounds = 8;
// The largest K of short_k_forward: at K = 640 128x160 tiles held their own (docs/heuristics.md, "Short K").
constexpr int64_t kShortKMaxK = 576;
// Forward calls of two to four 64-row blocks in one round (row_blocks_forward): 64-row tiles take this share of their
// modeled time. Every pick it moves (65-256 rows, K = 3072-7168) ran faster, plain and, where measured (65-128, 144
// and 200 rows), in a decode chain; a chain layer ran slower with 64-row tiles at K = 16384 and (64x80) at K = 2048
// (docs/heuristics.md, "Row blocks of 64").
constexpr double kRowBlocksFactor = 0.95;
constexpr int64_t kRowBlocksMinM = 65;
constexpr int64_t kRowBlocksMaxM = 256;
constexpr int64_t kRowBlocksMinK = 3072;
constexpr int64_t kRowBlocksMaxK = 7168;
// Split-K's fixed cost: a clustered launch, the partial-sum exchange (docs/heuristics.md, "Split-K").
constexpr double kSplitKOverheadUs = 1.0;

/// Dense 256x128 tiles take the wide-tail kernel (KernelConfig::wide_tail) from this K on, where it saves a round
/// of tiles; without that limit the shapes it did not change ran slower (docs/heuristics.md, "Wide tails").
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

/// Where D outgrows the L2, a tile on D^T's grid takes this much longer than one of the same size on D's own
/// grid: its transposed reductions into D cost it more there (docs/heuristics.md, "D^T's tiles").
constexpr double kDTransposedTileFactorBeyondL2 = 1.06;

}  // namespace

bool short_k_forward(const Problem& p, const KernelConfig& c) {
  return p.kind == GemmKind::kNormal && !p.sb_per_row && c.output == device::kOutBf16 && p.k <= kShortKMaxK;
}

bool row_blocks_forward(const Problem& p, const KernelConfig& c) {
  return p.kind == GemmKind::kNormal && !p.sb_per_row && c.output == device::kOutBf16 && c.block_m == 64 &&
         c.split_k == 1 && p.m >= kRowBlocksMinM && p.m <= kRowBlocksMaxM && p.m <= p.n && c.num_waves == 1 &&
         p.k >= kRowBlocksMinK && p.k <= kRowBlocksMaxK;
}

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
  const uint32_t out_bytes = device::gemm_out_bytes(c.output);
  const uint32_t slab_row_bytes = out_bytes * device::epilogue_slab_cols(uint32_t(c.block_n), out_bytes);
  const bool short_k_many_rounds = short_k_forward(p, c) && c.num_waves >= kShortKMinRounds;
  const double slab_factor = !writes_dominate                             ? 1.0
                             : slab_row_bytes < 64                        ? kNarrowSlabStoreFactor
                             : slab_row_bytes == 64 && short_k_many_rounds ? kShortKWideSlabStoreFactor
                                                                           : 1.0;
  const double tile_store_s =
      slab_factor * output_bytes_per_element(p) * c.block_m * c.block_n / (hw.dram_bytes_per_s / double(c.grid));
  // Loaded a tile ahead, C's reads and D's writes run under the K loops; otherwise each tile's stores (or reductions
  // into D, whose reads the L2 makes as it adds) follow its K loop.
  const double tile_math_s = tile_compute_s + tile_l2_bytes / hw.sm_l2_bytes_per_s;
  const double d_transposed_factor =
      device::gemm_d_transposed(c.output) && !d_fits_the_l2(p, hw) ? kDTransposedTileFactorBeyondL2 : 1.0;
  const double row_blocks_factor = row_blocks_forward(p, c) ? kRowBlocksFactor : 1.0;
  const double tile_s = c.output == device::kOutF32AddCAhead
                            ? std::max(tile_math_s, tile_store_s)
                            : d_transposed_factor * row_blocks_factor * (tile_math_s + tile_store_s);
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
