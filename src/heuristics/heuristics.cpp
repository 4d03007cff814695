#include "heuristics/heuristics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <tuple>

#include "common/error.hpp"
#include "finegemm/device/common/gemm_layout.cuh"

namespace finegemm::heuristics {
namespace {

constexpr int kMaxStages = 32;
constexpr int kMinStages = 3;
// Kernels that load C a tile ahead (kOutF32AddCAhead) keep two fp32 tiles in shared memory, which leaves room for
// fewer stages; they need four. Measured on an H200 at 32768x4096x512 (C = D, D's stores evict-first, us, two
// rounds): 128x96 with 4 stages 316.8, 317.8; with 3 stages 353.8, 353.3; 128x80 (5 stages) 338.7, 338.8; 128x112 (3)
// 346.0, 346.3; 128x64 (6) 344.0; 128x128 (2) 353.5, 355.1; 128x144 (2) 355.9.
constexpr int kMinStagesCAhead = 4;
// C loaded a tile ahead pays only where C's and D's bytes at the copy bandwidth outweigh the tensor work at its peak
// this many times: there C's reads and D's writes, which the other outputs wait for at each tile's end, run under
// the K loops instead. Where the math weighs more, the narrower tiles that leave room for two fp32 tiles cost more
// than that saves. Measured on an H200, C = D, against D reduced into by TMA (us, same run): 32768x4096x512 (ratio
// 5.2) 311.7, 312.4 against 446.7, 447.2; 16384x7168x256 (10.3) 271.3 against 453.7; 32768x2048x512 162.4 against
// 215.3; 4096x4096x512 (128x64 tiles) 48.1 against 58.6; 8192x4096x768 (3.4) 104.9 against 116.7; 8192x4096x1024
// (2.6, not taken) 121.4 (128x96) against 122.7; 24576x4096x1536 (1.7) 445.3 against 369.4; 7168x4096x2048 (1.3)
// 170.4 against 148.7; 4096x4096x7168 276.7 against 249.2; 7168x4096x16384 1035.1 against 944.2. Where C and D fit
// the L2 it gains nothing: 576x4096x512 11.50 against 11.49, 129x320x576 3.17 against 3.09.
constexpr double kCAheadMinBytesOverMath = 3.0;
constexpr int kMinBlockN = 16;  // wgmma takes N = 8 too, but an 8-column tile reads all of A for 8 columns
// BLOCK_N steps by 16: the epilogue's stmatrix x4 covers 16 columns. (Odd multiples of 8, which fill more SMs on some
// shapes, measured slower than the multiples of 16 on an H100, even where they filled more SMs; on an H200 the weight
// gradient's 128x136 and 128x152 tiles, DeepGEMM's picks there, ran 6-10% slower than 128x144 and 128x160 with their
// fp32 tiles stored in unswizzled halves, though their wgmmas alone run at full rate: docs/performance.md, "What was
// tried".)
constexpr int kBlockNStep = 16;
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
// Below 12 K blocks BLOCK_M=256 loses to BLOCK_M=128 on an H100: 146.0-146.5 vs 130.1-130.9 us at 4096x32768x512.
// At K=1536 (the K loop with one copy per wave count) it ran 24576x1536 at M 512-8192 0-2% faster than 128x192
// (4096: 237.7-238.3 vs 241.0-241.3 us) and, against the picks it replaced at N=7168, M=400, 2200 2-4% faster,
// M=1500 as fast, M=4000 1.1% slower (71.6-71.7 vs 70.9 with 128x160).
constexpr int64_t kBlockM256MinK = 1536;
// Except where one 256-row block holds every row and K is short: 192x32768x512 and 256x32768x512 ran 14.4 and 15.6 us
// with BLOCK_M=256 against 15.9-16.1 and 16.9-17.0 with 128-row tiles (H100; the time model then picks it); at
// K=1536 it lost there too (192x24576x1536 25.4 against 24.0).
constexpr int64_t kBlockM256OneBlockMaxK = 512;
// The epilogue's TMA stores write slabs of epilogue_slab_cols(BLOCK_N) columns; at BLOCK_N 112 and 144 (32-byte
// swizzle) a slab row is 32 bytes of D, and storing a tile costs more than its bytes at the SM's share of DRAM
// bandwidth: at 512x32768x512 (D twice B's bytes, 4 K blocks a tile) BLOCK_N=144 ran 27.5-27.6 us against 23.2 for
// BLOCK_N=128 and 23.6 for 192 (H100), 3.9 against 2.9 us per tile where the
// model's store term alone separated them by 0.2. Fitted to that: slabs with rows under 64 bytes cost this much more
// where D has at least B's bytes (dense: 2 M >= K; the call is the output's writes). Where B dominates it did not show:
// 192x7168x2048 and 256x7168x2048 ran 10.8 and 11.0 us with BLOCK_N=112 (128 tiles) against 11.5 and 11.4 with 128.
constexpr double kNarrowSlabStoreFactor = 1.43;
// The contiguous layout at K=2048, BLOCK_M=256 BN=128 against BLOCK_M=128 BN=192 on an H100 (TFLOPS), with a block
// holding two experts run as wide tiles: 1228 vs 1255 (G=4) and 1200 vs 1224 (G=8), and with equal experts (no such
// block) 1243 vs 1270 and 1242 vs 1263. At K=7168 it wins (1284 vs 1217 at G=4). On an H200 (DeepGEMM's contiguous
// cases, experts of 0.7-1.3x 8192 and 4096 rows, kernel us, 128x192 -> 256x128, same run): 7168x3072 1052, 1056 ->
// 1040 (G=4), 1134, 1138 -> 1122 (G=8); 4096x2048 409.7, 410.3 -> 410.0 and 411.0, 411.2 -> 411.3.
constexpr int64_t kBlockM256MinKContiguous = 3072;
// The masked and psum layouts where a group spans several 256-row blocks at K < 4096: measured on an H200 with
// DeepGEMM's cases (kernel us; groups of 0.7-1.3x the rows named), 6 groups of ~1024 rows, masked 7168x3072 201.4
// at 256x128 against 187.2 at 128x192 (the same tokens as psum), 4096x2048 102.9 against 101.1; but psum groups of
// ~8192 and ~4096 rows ran faster at 256x128 (128x192 -> 256x128, same run): 7168x3072 1060, 1063 -> 1014 (G=4),
// 1147, 1150 -> 1093 (G=8); 4096x2048 409.0, 409.5 -> 389.3 and 410.2, 410.6 -> 390.7. Groups of more than
// kBlockM256ShortKMaxGroupRows rows (the expected count) keep the 256-row tiles, as do groups of at most 256 rows
// (one tile per group and n-block: 32 groups of ~192 rows, psum 7168x3072 293.6 at 256x128 against 304.6 at
// 128x192, 4096x2048 120.5 against 125.4). Between ~1200 and ~4900 expected rows the limit is not measured.
constexpr int64_t kBlockM256MinKMaskedPsum = 4096;
constexpr int64_t kBlockM256MaxGroupRowsAnyK = 256;
constexpr int64_t kBlockM256ShortKMaxGroupRows = 2048;
// Split-K (two CTAs of a cluster, each over half of K) against unsplit tiles, measured on an H100 (kernel us): 64x32
// split tiles won where the unsplit ones were 16 columns wide (64x2112x7168 12.2 vs 13.3, 1x2112x7168 16.7 vs
// 18.8, 129x576x7168 11.2 vs 12.8) and lost with 64-column or 128-row ones (64x4096x7168 BN=64 19.0 vs 16.9,
// 128x4096x7168 21.2 vs 19.0, 100x2112x7168 BM=128 14.8 vs 14.5). Its fixed cost (a clustered launch, the
// partial-sum exchange) is charged as:
constexpr double kSplitKOverheadUs = 1.0;
constexpr int64_t kSplitKMinK = 7168;  // the K it was measured at
// On an H200 (kernel us, after the memset flush, two rounds) split-K also wins where the unsplit tiles fill the SMs in
// one wave, and with 128-row tiles 32 wide: 64x2112x7168 9.2, 9.2 (64x32 split) against 10.2, 10.1 (132 unsplit 64x16
// tiles); 128x2112x7168 10.3, 10.2 (128x32 split) against 10.8, 10.8 (132 unsplit 64x32 tiles). Wider split tiles lost
// there (64x64 9.6, 128x64 12.9, 64x96 10.9, 64x128 11.5; 64x4096x7168 with 64x64 13.2 against 11.8 unsplit), and so
// did clusters of 4 CTAs over a quarter of K each (64x2112x7168: 64x80 10.3, 64x64 12.1 with only 30 such clusters
// resident at once).
// K-major SA goes by TMA boxes (device::kSaKMajorTma) from this many K blocks and rows on (sa_mode_for).
constexpr int64_t kSaTmaMinKBlocks = 32;
constexpr int64_t kSaTmaMinRows = 1024;
// MN-major SA of at most 4 rows is loaded once per CTA (device::kSaMnMajorOnce) from this many K blocks on, in 64-row
// tiles, split-K included: a box per stage reads rows 16 bytes apart there; below 32 K blocks the once-loaded box
// measured slower (docs/performance.md, "What was tried").
constexpr int64_t kSaOnceMinKBlocks = 32;
// K-major SA of at most 16 rows (device::kSaKMajorOnce) is loaded once per CTA from this many K blocks on, split-K
// included, where the scale warp gathered each stage's rows; at 4 K blocks it measured slower at 16 rows (ibid.).
constexpr int64_t kSaKMajorOnceMinKBlocks = 8;
/// Largest BLOCK_N whose two fp32 accumulators (BLOCK_N / 2 registers each) fit the math warpgroups' 232 registers
/// without spills (checked for every heuristic pick by the CPU compile tests).
int max_block_n(int block_m) { return block_m == 64 ? 176 : block_m == 128 ? 192 : 128; }
/// The same with 1x128 scales of B, whose BLOCK_N / 4 column scales a math thread holds through its turn (256-row
/// tiles, two waves of running sums, spill at BLOCK_N=128 and ran 8-14% slower than 128x160 on an H200:
/// docs/performance.md, "What was tried"). On D^T's tiles 128x176 too, with 240 math registers
/// (device::gemm_widest_sb_per_row_tile).
int max_block_n_sb_per_row(int block_m, uint32_t output) {
  if (block_m == 128) return device::gemm_d_transposed(output) ? 176 : 160;
  return block_m == 64 ? 128 : 0;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Rows per group the tiles are counted over.
int64_t rows_for_tiles(const Problem& p) { return p.m; }

/// Groups whose tiles the kernel walks one after another (masked and psum: every group, p.m rows each; dense and
/// contiguous: one 2D view of p.m rows).
int tiled_groups(const Problem& p) {
  return p.kind == GemmKind::kGroupedMasked || p.kind == GemmKind::kGroupedContiguousPsum ||
                 p.kind == GemmKind::kGroupedK
             ? p.num_groups
             : 1;
}

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

/// The kernel output (device::GemmOutput) of a problem.
uint32_t output_of(const Problem& p) {
  if (p.d_dtype != DType::kFloat32) return device::kOutBf16;
  if (!p.accumulate) return device::kOutF32;
  return p.c_is_d ? device::kOutF32AddToD : device::kOutF32AddC;
}

/// Bytes of D each output element costs: written once, and with accumulation C read once too.
double output_bytes_per_element(const Problem& p) {
  const uint32_t output = output_of(p);
  return double(device::gemm_out_bytes(output)) * (p.accumulate ? 2.0 : 1.0);
}

/// Bytes a call moves at least: A and SA's rows once (the rows the tiles cover), B once per group it reads, D once
/// (and C once).
struct CallBytes {
  double a = 0, b = 0, d = 0;
};
CallBytes call_bytes(const Problem& p) {
  const double rows = double(rows_for_tiles(p) * tiled_groups(p));
  const double b_groups = p.kind == GemmKind::kNormal ? 1.0 : double(p.num_groups);
  return CallBytes{rows * double(p.k), b_groups * double(p.n * p.k), output_bytes_per_element(p) * rows * double(p.n)};
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

}  // namespace

std::string KernelConfig::describe() const {
  std::ostringstream os;
  os << "BM=" << block_m << " BN=" << block_n << " stages=" << num_stages
     << (split_k > 1 ? " split-K=" + std::to_string(split_k) : std::string())
     << " sa="
     << (sa_mode == device::kSaMnMajor       ? "mn"
         : sa_mode == device::kSaMnMajorOnce ? "mn-once"
         : sa_mode == device::kSaKMajorOnce  ? "k-once"
         : sa_mode == device::kSaKMajorTma   ? "k"
                                             : "k-gather")
     << (b_evict_first ? " B:evict-first" : "") << (b_pairs ? " B:pairs" : "")
     << (d_evict_first ? " D:evict-first" : "") << (d_prefetch_lead > 0 ? " D:L2-prefetch" : "")
     << (wide_tail ? " wide-tail" : "")
     << (pdl_prefetch_b_blocks > 0 ? " PDL:B-prefetch=" + std::to_string(pdl_prefetch_b_blocks) : std::string())
     << (sb_mode == device::kSbRowMnMajor ? " sb=1x128" : "")
     << (output == device::kOutF32       ? " out=fp32"
         : output == device::kOutF32AddC   ? " out=fp32,C"
         : output == device::kOutF32AddToD ? " out=fp32,+=D"
         : output == device::kOutF32AddToDT ? " out=fp32,+=D on D^T's tiles"
         : output == device::kOutBf16DT    ? " on D^T's tiles"
         : output == device::kOutF32AddCAhead ? " out=fp32,C-ahead"
                                           : "")
     << " grid=" << grid
     << " smem=" << smem_bytes << " tiles=" << num_tiles << " waves=" << num_waves;
  return os.str();
}

std::string KernelConfig::kernel_function() const {
  std::ostringstream os;
  os << "finegemm::device::sm90_fp8_gemm_kernel<" << int(kind) << ", " << n << "u, " << k << "u, " << block_m << "u, "
     << block_n << "u, " << num_stages << "u, " << sa_mode << "u, " << split_k << "u, "
     << (wide_tail ? "true" : "false");
  // B's scales and the output only where they differ from the defaults (the forward kernels' sources, and so their
  // cache keys, stay as they were).
  if (sb_mode != device::kSbBlock || output != device::kOutBf16) os << ", " << sb_mode << "u, " << output << "u";
  os << ">";
  return os.str();
}

ConfigConstraints parse_constraints(const std::string& text) {
  ConfigConstraints c;
  c.text = text;
  constexpr const char* kWhere = "FINEGEMM_FORCE_CONFIG";
  constexpr const char* kFields = "bm, bn, stages, split, l2b, l2d, bpairs, cahead, saonce, dt";
  std::istringstream fields(text);
  for (std::string field; std::getline(fields, field, ',');) {
    const size_t eq = field.find('=');
    const std::string name = field.substr(0, eq), value = eq == std::string::npos ? "" : field.substr(eq + 1);
    check_arg(eq != std::string::npos && !value.empty(), kWhere, "fields are name=value (", kFields, "), got '",
              field, "'");
    if (name == "l2b" || name == "l2d") {
      check_arg(value == "first" || value == "normal", kWhere, name, " is first or normal, got '", value, "'");
      (name == "l2b" ? c.b_evict_first : c.d_evict_first) = value == "first" ? 1 : 0;
      continue;
    }
    if (name == "bpairs" || name == "cahead" || name == "dt") {
      check_arg(value == "0" || value == "1", kWhere, name, " is 0 or 1, got '", value, "'");
      (name == "bpairs" ? c.b_pairs : name == "cahead" ? c.c_ahead : c.d_transposed) = value == "1" ? 1 : 0;
      continue;
    }
    if (name == "saonce") {
      check_arg(value == "0", kWhere, "saonce is 0 (SA by a box per stage), got '", value, "'");
      c.sa_once = 0;
      continue;
    }
    int* target = name == "bm" ? &c.block_m : name == "bn" ? &c.block_n : name == "stages" ? &c.stages
                : name == "split" ? &c.split_k : nullptr;
    check_arg(target != nullptr, kWhere, "unknown field '", name, "' (", kFields, ")");
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check_arg(used == value.size() && v > 0, kWhere, name, " is a positive integer, got '", value, "'");
    *target = v;
  }
  return c;
}

uint32_t sa_mode_per_stage_for(const Problem& p) {
  if (!p.sa_k_major) return device::kSaMnMajor;
  // Measured on an H100 (gather -> TMA boxes, us): faster with many rows and long
  // K (4096x7168x16384 795.6 -> 721.2, 4096x4096x7168 201.8 -> 180.8, 4096x2112x7168 109.8 -> 99.0, contiguous
  // 4x8192x4096x7168 1331.2 -> 1198.5, masked 1x1024x4096x7168 53.4 -> 47.4), slower at KB <= 16 (4096x24576x1536
  // 258.5 -> 305.0, 4096x7168x2048 107.0 -> 120.4, contiguous 8x4096x7168x2048 836.8 -> 1084.6) and at small M
  // (128x4096x7168 19.9 -> 21.6, 64x7168x2048 9.2 -> 11.6).
  const int64_t kb = ceil_div(p.k, 128);
  return kb % 4 == 0 && kb >= kSaTmaMinKBlocks && p.m >= kSaTmaMinRows ? device::kSaKMajorTma
                                                                       : device::kSaKMajorGather;
}

uint32_t sa_mode_for(const Problem& p) {
  // SA of dense calls of at most 4 (MN-major) or 16 (K-major) rows and at least kSaOnceMinKBlocks (K-major:
  // kSaKMajorOnceMinKBlocks) K blocks goes in one load for all K blocks (in 64-row tiles; the others keep a box per
  // stage: enumerate_candidates). K-major SA's box row is its K blocks: their count must be a multiple of 4 (16 bytes).
  const int64_t kb = ceil_div(p.k, int64_t(device::kBlockK));
  const uint32_t once_mode = p.sa_k_major ? device::kSaKMajorOnce : device::kSaMnMajorOnce;
  const bool once = p.kind == GemmKind::kNormal && p.m <= int64_t(device::gemm_sa_once_rows(once_mode)) &&
                    kb >= (p.sa_k_major ? kSaKMajorOnceMinKBlocks : kSaOnceMinKBlocks) &&
                    kb <= device::kSaOnceMaxKBlocks && (!p.sa_k_major || kb % 4 == 0);
  if (once) return once_mode;
  return sa_mode_per_stage_for(p);
}

/// Whether C and D outgrow the L2 and their bytes at the copy bandwidth outweigh the call's tensor work at its peak
/// kCAheadMinBytesOverMath times (where C loaded a tile ahead pays).
bool c_and_d_outweigh_math(const Problem& p, const HardwareModel& hw, int num_sms) {
  const double c_and_d_bytes = call_bytes(p).d;
  if (c_and_d_bytes <= hw.l2_bytes) return false;
  const double c_and_d_s = c_and_d_bytes / hw.dram_bytes_per_s;
  const double flops = 2.0 * double(tiled_groups(p)) * double(rows_for_tiles(p)) * double(p.n) * double(p.k);
  const double math_s = flops / (hw.sm_fp8_flops_per_s * double(num_sms));
  return c_and_d_s >= kCAheadMinBytesOverMath * math_s;
}

bool may_transpose_d(const Problem& p) {
  const bool reduced_into_d = p.d_dtype == DType::kFloat32 && p.accumulate && p.c_is_d;
  const bool bf16_without_c = p.d_dtype == DType::kBFloat16 && !p.accumulate;
  return p.kind == GemmKind::kNormal && p.sb_per_row && !p.sa_k_major && (reduced_into_d || bf16_without_c) &&
         p.n % 128 == 0 && p.m % 8 == 0;
}

namespace {
Problem with_m_and_n_swapped(const Problem& p) {
  Problem q = p;
  std::swap(q.m, q.n);
  return q;
}
}  // namespace

Problem kernel_problem(const Problem& p, const KernelConfig& c) {
  return device::gemm_d_transposed(c.output) ? with_m_and_n_swapped(p) : p;
}

namespace {

/// The candidates of `p` as the kernel computes it (M x N; on D^T's tiles the call's N x M) with `outputs`.
void enumerate_oriented(const Problem& p, const std::vector<uint32_t>& outputs, int num_sms,
                        const ConfigConstraints& constraints, const HardwareModel& hw, std::vector<Candidate>& out) {
  const uint32_t problem_sa_mode = constraints.sa_once == 0 ? sa_mode_per_stage_for(p) : sa_mode_for(p);
  const uint32_t sb_mode = p.sb_per_row ? device::kSbRowMnMajor : device::kSbBlock;
  const bool c_ahead_pays = constraints.c_ahead == 1 || c_and_d_outweigh_math(p, hw, num_sms);
  const int64_t rows = std::max<int64_t>(1, rows_for_tiles(p));
  const bool one_256_row_block = p.kind == GemmKind::kNormal && rows <= 256;
  const bool forced_256 = constraints.block_m == 256;
  for (uint32_t output : outputs) {
    for (int block_m : {64, 128, 256}) {
      for (int block_n = kMinBlockN; block_n <= 256; block_n += kBlockNStep) {
        for (int split : {1, 2}) {
          // SA loaded once: 64-row tiles only (the others take a box per stage).
          const bool per_stage = block_m != 64;
          const uint32_t sa_mode = device::gemm_sa_once(problem_sa_mode) && per_stage
                                       ? sa_mode_per_stage_for(p)
                                       : problem_sa_mode;
          Candidate cand;
          KernelConfig& c = cand.config;
          c.kind = p.kind;
          c.n = p.n;
          // K-grouped kernels take K at run time (template K = 0); p.k is the expected K per group for the model.
          c.k = p.kind == GemmKind::kGroupedK ? 0 : p.k;
          c.block_m = block_m;
          c.block_n = block_n;
          c.split_k = split;
          c.sa_mode = sa_mode;
          c.sb_mode = sb_mode;
          c.output = output;
          c.num_threads = int(device::gemm_num_threads(uint32_t(block_m)));
          c.grid = std::max(1, num_sms - num_sms % split);
          const int64_t m_blocks = ceil_div(rows, block_m);
          const int64_t n_blocks = ceil_div(p.n, block_n);
          // Filters, each with its reason.
          if (p.kind == GemmKind::kGroupedContiguous && p.m_alignment < 128 && block_m != 64) {
            cand.rejected = "experts aligned to 64 rows may start in any 64-row block: only 64-row tiles hold one "
                            "expert from their first row on";
          } else if (block_n > max_block_n(block_m)) {
            cand.rejected = "two fp32 accumulators of BLOCK_N/2 registers exceed the math warpgroups' registers";
          } else if (sb_mode == device::kSbRowMnMajor && block_n > max_block_n_sb_per_row(block_m, output)) {
            cand.rejected = "1x128 scales of B keep BLOCK_N/4 more registers (the columns' scales) per math thread";
          } else if (output == device::kOutF32AddCAhead && !c_ahead_pays) {
            cand.rejected = "C loaded a tile ahead pays only where C and D outgrow the L2 and their bytes outweigh the "
                            "tensor work 3 times";
          } else if (device::gemm_loads_c(output) && split > 1) {
            cand.rejected = "C's tile is loaded for the CTA that stores the tile only: no split-K where C is loaded";
          } else if (block_n > ceil_div(p.n, int64_t(kBlockNStep)) * kBlockNStep) {
            cand.rejected = "BLOCK_N wider than N rounded up to the BLOCK_N step only adds idle columns";
          } else if (sb_mode == device::kSbBlock && 128 - std::gcd(block_n, 128) + block_n > 256) {
            cand.rejected = "some tile would span three 128-column SB blocks (the kernel promotes with at most two)";
          } else if (block_m == 128 && rows <= 64 && p.kind != GemmKind::kGroupedK) {
            // (The K-grouped kernel runs 128-row tiles only; with M <= 64 its second warpgroup's rows are not stored.)
            cand.rejected = "M fits one 64-row warpgroup";
          } else if (block_m == 256 && rows <= 128 && !forced_256) {
            cand.rejected = "M fits 128 rows";
          } else if (block_m == 256 && block_n != 128) {
            cand.rejected = "BLOCK_M=256 measured faster than BLOCK_M=128 only with BLOCK_N=128 (BN=96, 112: slower)";
          } else if (block_m == 256 && p.k < kBlockM256MinK && !(one_256_row_block && p.k <= kBlockM256OneBlockMaxK) &&
                     !forced_256) {
            cand.rejected = "BLOCK_M=256 needs K >= 1536 (or a dense GEMM's rows in one 256-row block and K <= 512): "
                            "with fewer K blocks per tile its 3-stage refill and 256-row epilogue cost more than it "
                            "saves";
          } else if (block_m == 256 && p.k < kBlockM256MinKMaskedPsum && !forced_256 &&
                     (p.kind == GemmKind::kGroupedMasked || p.kind == GemmKind::kGroupedContiguousPsum) &&
                     p.m > kBlockM256MaxGroupRowsAnyK && p.m <= kBlockM256ShortKMaxGroupRows) {
            cand.rejected = "BLOCK_M=256 over masked or psum groups of 257-2048 rows needs K >= 4096 (128x192 tiles "
                            "measured faster)";
          } else if (block_m == 256 && p.kind == GemmKind::kGroupedContiguous && p.k < kBlockM256MinKContiguous &&
                     !forced_256) {
            cand.rejected = "BLOCK_M=256 with the contiguous layout needs K >= 3072: at K=2048 it measured no faster "
                            "than 128-row tiles (H200), ~2% slower on an H100";
          } else if (p.kind == GemmKind::kGroupedK &&
                     (block_m != 128 || device::gemm_k_depth(uint32_t(block_m), uint32_t(block_n)) != 1)) {
            cand.rejected = "K-grouped kernels run 128-row tiles with two math warpgroups taking turns (K depth 1: "
                            "BLOCK_N 16-32 or 72-160)";
          } else if (split > 1 && p.kind != GemmKind::kNormal) {
            cand.rejected = "split-K is for dense GEMMs";
          } else if (split > 1 && ceil_div(p.k, 128) % split != 0) {
            cand.rejected = "split-K gives each CTA of the cluster an equal share of the K blocks";
          } else if (split == 2 && !((block_m == 64 && block_n <= 32) || (block_m == 128 && block_n == 32)) &&
                     constraints.split_k != 2) {
            cand.rejected = "split-K measured faster only with 64x16, 64x32 and 128x32 tiles";
          } else if (split == 2 && p.k < kSplitKMinK && constraints.split_k != 2) {
            cand.rejected = "split-K measured faster only at K >= 7168";
          } else if (split > 1 && m_blocks * n_blocks > int64_t(c.grid / split)) {
            cand.rejected = "split-K pays only when the tiles leave SMs idle (at most one tile per cluster)";
          } else if (split > 1 && num_sms < split) {
            cand.rejected = "a cluster needs as many SMs as it has CTAs";
          } else if (device::gemm_d_transposed(output) && (block_m != 128 || split != 1 || block_n < 128)) {
            cand.rejected = "D^T's tiles: 128-row tiles with two math warpgroups, no split-K, at least 128 columns "
                            "(where the tile's cost per column is that of D's own tiles: only the rounds differ)";
          } else if ((constraints.block_m != 0 && constraints.block_m != block_m) ||
                     (constraints.block_n != 0 && constraints.block_n != block_n) ||
                     (constraints.split_k != 0 && constraints.split_k != split) ||
                     (constraints.c_ahead >= 0 && (output == device::kOutF32AddCAhead) != (constraints.c_ahead == 1)) ||
                     (constraints.d_transposed >= 0 &&
                      device::gemm_d_transposed(output) != (constraints.d_transposed == 1))) {
            cand.rejected = "not the configuration FINEGEMM_FORCE_CONFIG asks for";
          }
          if (cand.rejected.empty()) {
            const int min_stages = output == device::kOutF32AddCAhead ? kMinStagesCAhead : kMinStages;
            int stages = kMaxStages;
            while (stages >= min_stages &&
                   int(device::gemm_smem_launch_bytes(uint32_t(block_m), uint32_t(block_n), uint32_t(stages),
                                                      uint32_t(p.k), uint32_t(split), sa_mode, sb_mode, output)) >
                       hw.smem_per_block)
              --stages;
            const int64_t k_blocks = ceil_div(p.k, 128);
            // More stages than K blocks of two tiles buy nothing. Dense 64-row tiles over more than one round stage
            // at most one tile's K blocks: deeper, the next tile's loads go out beside this tile's and its math and
            // stores wait for both. Measured on an H200 (`finegemm bench`, two rounds, us; `bench --chain`, PDL on,
            // us per layer), 8 stages -> 4 at 32768x512: M = 1 8.5, 8.5 -> 8.0, 8.0 (chain 7.33, 7.39 -> 7.21,
            // 7.21); M = 16 8.5, 8.6 -> 8.0, 8.0 (7.82, 7.83 -> 7.82, 7.82); M = 64 8.8, 8.8 -> 8.5, 8.4 (8.79,
            // 8.79 -> 8.69, 8.70). 128-row tiles lost (M = 128, 5 stages -> 4: 9.6, 9.5 -> 9.7, 9.6; chain 9.75,
            // 9.76 -> 9.88, 9.84), and longer K with fewer stages much more (M = 1, 4096x7168: 18 -> 7, 11.6 -> 16.4).
            const bool one_tile_of_k =
                p.kind == GemmKind::kNormal && block_m == 64 && m_blocks * n_blocks * split > c.grid;
            stages = int(std::min<int64_t>(
                stages, std::max<int64_t>(min_stages, (one_tile_of_k ? 1 : 2) * k_blocks / split)));
            if (constraints.stages >= min_stages) stages = std::min(stages, constraints.stages);
            if (stages < min_stages) {
              cand.rejected = min_stages == kMinStages ? "fewer than 3 pipeline stages fit in shared memory"
                                                       : "fewer than 4 pipeline stages fit beside two fp32 tiles";
            } else {
              c.num_stages = stages;
              c.smem_bytes = int(device::gemm_smem_launch_bytes(uint32_t(block_m), uint32_t(block_n), uint32_t(stages),
                                                                uint32_t(p.k), uint32_t(split), sa_mode, sb_mode,
                                                                output));
              score(c, p, hw);
            }
          }
          out.push_back(std::move(cand));
        }
      }
    }
  }
}

}  // namespace

std::vector<Candidate> enumerate_candidates(const Problem& p, int num_sms, const ConfigConstraints& constraints,
                                            const HardwareModel& hw) {
  std::vector<Candidate> out;
  // The problem's output and, for a dense GEMM with C (D itself or another tensor), C's tiles loaded a tile ahead
  // into two shared tiles: where C and D outweigh the math, their reads and writes then stream under the K loops.
  std::vector<uint32_t> outputs = {output_of(p)};
  if (p.accumulate && p.kind == GemmKind::kNormal) outputs.push_back(device::kOutF32AddCAhead);
  enumerate_oriented(p, outputs, num_sms, constraints, hw, out);
  // With 1x128 scales of both operands (a weight gradient, or bf16 D without C) the GEMM may run on D^T's tiles
  // instead, where they fit the SMs' rounds better (select_config).
  if (may_transpose_d(p)) {
    const uint32_t transposed = p.d_dtype == DType::kFloat32 ? device::kOutF32AddToDT : device::kOutBf16DT;
    enumerate_oriented(with_m_and_n_swapped(p), {transposed}, num_sms, constraints, hw, out);
  }
  return out;
}

/// B's TMA loads carry the L2 evict-first hint when each B tile is read by at most kEvictFirstMaxRowBlocks tiles
/// (row blocks per group), which the scheduler runs side by side (one raster band): B's lines then replace one
/// another instead of lines other tiles or kernels still use (A, which every tile reads; a previous kernel's output,
/// which costs a write-back to evict when dirty). Measured on an H100 after the bench's memset flush (kernel us,
/// hint vs none): one row block 64x7168x16384 49.3 vs 53.5, 64x4096x7168 15.2 vs 17.0, 128x7168x16384 50.0 vs
/// 55.1; two 128x2112x7168 (BM=64) 14.9 vs 15.5, masked 2x512x4096x7168 49.5 vs 51.9; three 384x7168x2048 13.9 vs
/// 15.4; four masked 1x1024x7168x2048 31.0 vs 30.7; many 4096x32768x512 180.2 vs 134.8, contiguous
/// 4x8192x4096x7168 1528.1 vs 1427.2.
/// Beyond kEvictFirstMaxWaves waves the hint stays only on dense GEMMs with one row block, whose A every tile of the
/// call reads: elsewhere it cost 2-30% in longer calls, even where each B tile is read once. Measured on an H100
/// (kernel us, hint vs none, the same tiles): at most 2 waves 256x24576x1536 24.9 vs 26.7,
/// 352x14336x4096 43.0 vs 46.0, masked 4x32x7168x2048 26.7 vs 30.1, 4x384x4096x7168 73.7 vs 75.7 (but 8x256x4096x7168
/// 116.3 vs 110.7); more waves, 2-3 row blocks: 384x32768x512 23.1 vs 19.7, masked 8x256x7168x2048 79.9 vs 68.3,
/// 16x384x7168x2048 225.9 vs 157.9; one row block per group, masked: 32x256x4096x7168 441.9 vs 414.0,
/// 16x32x7168x2048 97.6 vs 94.9 (8x32x7168x2048 50.3 vs 52.3); dense: 32x65536x2048 52.0 vs 56.4, 64x49152x4096 76.9
/// vs 80.2, 64x65536x7168 171.7 vs 171.4 (128x129280x7168 346.3 vs 335.0, 256x65536x2048 70.0 vs 68.2).
/// Where B has one row block per group, the hint also needs a call of at most kEvictFirstMaxOneBlockFlops: in those
/// runs every such call of 30 GFLOP or less gained from it (128x7168x16384, masked 4x128x4096x7168 52.6 vs
/// 53.7, 4x256x7168x2048 34.9 vs 36.3, 8x64x4096x7168 91.0 vs 93.2, 128x65536x1536 47.9 vs 49.4) and every larger one
/// lost or ran even (masked 4x192x4096x7168 (45 GFLOP) 58.9 vs 58.5, 4x256x4096x7168 60.8 vs 59.2, 8x128x4096x7168
/// 99.6 vs 95.5, 8x256x4096x7168 116.3 vs 110.7; dense 128x129280x7168 and 256x65536x2048 above, 64x65536x7168 and
/// 64x129280x7168 within 0.6%), whatever its intensity (FLOPs per byte of B) or length. Masked calls with 64-row
/// tiles keep it in three waves too (us, hint vs none: 8x16x7168x2048 49.2 vs 51.8-52.0, 8x32x7168x2048
/// 50.3-50.8 vs 52.1-52.4, 8x64x7168x2048 52.0-52.3 vs 52.7-53.1, 12x32x4096x7168 132.0-132.2 vs 132.3-132.4; in four
/// waves it lost: 10x64x7168x2048 64.0 vs 63.6, 16x16x4096x7168 172.1 vs 170.0).
constexpr int64_t kEvictFirstMaxRowBlocks = 3;
constexpr int64_t kEvictFirstMaxWaves = 2;
constexpr double kEvictFirstMaxOneBlockFlops = 36e9;

bool takes_steady_ffma_pass(const KernelConfig& config) {
  // ptxas has every other promotion FFMA yield its issue slot; in the 256-row kernels those runs issue faster without
  // (H100, against no pass, alternating: 4096x7168x16384 637.5, 638.5 us / 650.8, 649.8, the other 256x128 seed
  // shapes 0.8-1.1% and contiguous 4x8192x4096x7168 1.9% faster), and in the dense 128-row kernels with whole batches
  // (on/off in three rounds: 1024x7168x2048 at 128x160 0.978-0.982, 128x128 and 128x112 0.994-1.001). Not
  // elsewhere: 128x192 (half batches) 1.003-1.010, grouped 128x160 1.001-1.047 (masked 4x600x4096x7168 the most), the
  // narrow K-depth kernels 0.998-1.003. On an H200 the masked 128-row kernels with whole batches gained from it too
  // (CUDA events after a 256 MiB memset, median of 30, two rounds, without / with: 1006 rows 4096x7168 at 128x160
  // 58.1, 58.1 / 54.7, 54.8 us, at 128x128 52.4, 52.5 / 51.3, 51.4; DeepGEMM's seed draws of 1 and 2 groups, the
  // picked 128x160 tiles, 58.1, 58.0 / 54.7, 54.9 and 58.4, 58.3 / 55.6, 55.6).
  // With 1x128 scales of B (the weight gradient: each column promoted by its own factor) only the 128x160 tiles gain
  // (H200, `finegemm bench`, same binary, two rounds, us, with / without: 7168x4096x16384 925.8, 926.2 / 937.6, 938.2;
  // 4096x4096x7168 242.1, 242.1 / 244.9, 244.9; 576x4096x7168 38.7, 38.7 / 39.1, 39.1; 7168x4096x2048 138.4, 138.2 /
  // 138.9, 138.7; but 24576x4096x1536 346.4, 346.6 / 345.0, 344.6); the others lose: 128x144 at 2112x4096x7168 137.9,
  // 138.1 / 135.7, 135.5; 128x96 at 32768x4096x512 310.4, 311.3 / 308.6, 308.3. The K-grouped kernels lose with it
  // too (128x160, 4 experts 4096x7168: 1526.0, 1526.7 / 1428.5, 1428.6).
  const bool gains_with_column_scales = config.sb_mode != device::kSbRowMnMajor || config.block_n == 160;
  const bool whole_batches = (config.kind == GemmKind::kNormal || config.kind == GemmKind::kGroupedMasked) &&
                             config.block_m == 128 && config.block_n > 64 && config.block_n < 192;
  return config.block_m == 256 || (whole_batches && gains_with_column_scales);
}

namespace {
/// Dense GEMMs launch the fewest CTAs that run the same number of waves: the critical path stays the same (each CTA
/// still takes at most num_waves tiles) and the SMs that would only have run a shorter last round stay idle, out of
/// the L2 traffic and the power budget of the others. DeepGEMM sizes its grid the same way. Measured on an H100, the
/// same 256x128 kernels on 128 CTAs instead of 132: 4096x4096x7168 (512 tiles, 4 waves) 169.5 instead of 171.4 us,
/// 4096x7168x2048 (896 tiles, 7 waves) 92.2 instead of 92.9.
/// Grouped GEMMs keep every SM: their tile count is planned for the largest layout, and fewer rows at run time would
/// run in more waves on fewer CTAs.
int fewest_ctas_for_the_waves(const Problem& p, const KernelConfig& c) {
  if (p.kind != GemmKind::kNormal || c.num_waves < 1) return c.grid;
  const int64_t tiles_per_round = ceil_div(c.num_tiles, c.num_waves);
  const int64_t ctas = ceil_div(tiles_per_round * c.split_k, int64_t(c.split_k)) * c.split_k;
  return int(std::min<int64_t>(c.grid, ctas));
}

bool b_read_by_few_tiles(const Problem& p, const KernelConfig& c) {
  switch (p.kind) {
    case GemmKind::kNormal: return ceil_div(p.m, c.block_m) <= kEvictFirstMaxRowBlocks;
    case GemmKind::kGroupedMasked: return ceil_div(p.m_max, c.block_m) <= kEvictFirstMaxRowBlocks;
    case GemmKind::kGroupedContiguous:
    case GemmKind::kGroupedContiguousPsum: return false;  // experts hold many row blocks each
    case GemmKind::kGroupedK: return false;               // B_g is read by every row block of D[g]
  }
  return false;
}

bool b_evict_first_pays(const Problem& p, const KernelConfig& c) {
  if (!b_read_by_few_tiles(p, c)) return false;
  const bool dense = p.kind == GemmKind::kNormal;
  const bool one_row_block = ceil_div(dense ? p.m : p.m_max, c.block_m) == 1;
  if (!one_row_block) return c.num_waves <= kEvictFirstMaxWaves;
  const double flops = 2.0 * double(tiled_groups(p)) * double(p.m) * double(p.n) * double(p.k);
  const int64_t max_waves = kEvictFirstMaxWaves + (c.block_m == 64 ? 1 : 0);
  return flops <= kEvictFirstMaxOneBlockFlops && (dense || c.num_waves <= max_waves);
}

/// B's issuer fills two stages per empty wait (device kernel's kBPairs) where the call is B's DRAM stream: B read by
/// few tiles (b_read_by_few_tiles) and at most kBPairsMaxFlopsPerByte FLOPs per byte of A, B and D, in the kernels
/// that have the code (device::gemm_may_pair_b_stages; elsewhere the kernel ignores the flag).
/// Measured on an H100, us without / with pairs:
/// 128x24576x1536 (219 FLOP/B) 20.4 -> 19.7-19.9, 64x7168x16384 (126) 49.3-49.4 -> 48.2-48.4, 256x32768x512 (255)
/// 18.4-18.5 -> 17.1-17.2, 256x24576x1536 (381) 25.0-25.7 -> 24.5-24.7, 128x32768x512 (340) 12.2-12.4 -> 11.8-11.9
/// in one call and 12.2 both ways in another, the other M <= 128 seed shapes unchanged; slower where the tensor work
/// bounds the call: 384x7168x16384 (700 FLOP/B, one wave) 74.0-75.7 -> 79.0-79.7, and, with pairs in every kernel,
/// 4096x2112x7168 91.3 -> 95.6 and 4096x24576x1536 242.4 -> 249.2 (our reading: there the second stage's wait holds
/// back the first's load); 384x4096x7168 (638) 22.7-23.1 -> 22.4-22.9.
/// The 64x32 decode tiles (split-K included) pair too. Measured on an H200 (`bench --chain`, 16 layers, PDL on, us
/// per layer, two rounds, without -> with): 1x4096x7168 11.74, 11.82 -> 10.83, 10.81; 64x4096x7168 12.81, 12.81 ->
/// 12.60, 12.64; 1x2112x7168 8.29, 8.27 -> 8.00, 8.02; 16x2112x7168 8.78, 8.79 -> 8.64, 8.69; plain calls after the
/// bench's memset flush within 0.1 us at 2112x7168 and 0.1-0.2 us slower at 4096x7168 (M = 1-32, about 11.7 us). The
/// 128x32 tiles (9-10 stages) lost with pairs: 128x2112x7168 11.48 -> 11.65, 128x4096x7168 15.04 -> 15.24 (chain).
constexpr double kBPairsMaxFlopsPerByte = 500.0;

/// Whether the kernel for `c` can pair B's stages (its kBPairs); FINEGEMM_FORCE_CONFIG=bpairs=1 pairs only these.
bool b_pairs_allowed(const Problem& p, const KernelConfig& c) {
  return device::gemm_may_pair_b_stages(static_cast<device::GemmKind>(p.kind), uint32_t(c.block_m),
                                        uint32_t(c.block_n), uint32_t(c.split_k));
}

bool b_pairs_pay(const Problem& p, const KernelConfig& c) {
  if (!b_pairs_allowed(p, c) || !b_read_by_few_tiles(p, c)) return false;
  const double flops = 2.0 * double(p.m) * double(p.n) * double(p.k);
  const double bytes = double(p.m) * double(p.k) + double(p.n) * double(p.k) + 2.0 * double(p.m) * double(p.n);
  return flops <= kBPairsMaxFlopsPerByte * bytes;
}

/// D's TMA stores carry the L2 evict-first hint (GemmArgs::d_evict_first) where the output is larger than the L2 and
/// at least kDEvictFirstMinWriteRatio times A's and B's bytes together: there D's stream, written once and never read,
/// would otherwise push out the operand lines that later tiles read again. Measured on an H100
/// (us, plain / hinted, two rounds):
/// 4096x32768x512 (D 14x A+B) 129.1, 128.8 / 126.7, 126.7; no change at 7.5x and below (2048x32768x512 67.5, 67.6 /
/// 67.7, 67.7; 4096x24576x1536 236.4, 235.7 / 235.3, 235.7; contiguous 4x8192x7168x2048 829.9, 832.7 / 829.9,
/// 830.2; 1024x24576x1536 61.5, 61.6 / 61.9, 61.7). Where D fits the L2 the hint would write it back during the call
/// instead of after it (64x7168x2048 9.1, 9.2 -> 9.9, 9.8 us). Not with C loaded a tile ahead, whose D tiles overwrite
/// lines of C the L2 just read (C = D): on an H200, 32768x4096x512 ran 311.7, 312.4 us plain against 316.8, 317.8
/// hinted (C's loads hinted too: 342.6, 344.1).
constexpr double kDEvictFirstMinWriteRatio = 10.0;

bool d_evict_first_pays(const Problem& p, const HardwareModel& hw) {
  const CallBytes bytes = call_bytes(p);
  return bytes.d > hw.l2_bytes && bytes.d >= kDEvictFirstMinWriteRatio * (bytes.a + bytes.b);
}

/// GEMMs that reduce into D (D += A x B^T, kOutF32AddToD: dense and K-grouped ones) prefetch D's tile into the L2 as
/// A's issuer issues the tile's last K block (KernelConfig::d_prefetch_lead = 1), about a stage ring's K blocks before
/// the epilogue reduces into it. Measured on an H200 (`finegemm bench`, C = D, two rounds, us, without -> with):
/// 2112x4096x7168 140.5, 140.2 -> 138.2, 138.5; 576x4096x7168 39.4, 39.3 -> 38.3, 38.2; 24576x4096x1536 373.1, 373.1 ->
/// 366.7, 366.3; 4096x4096x7168 252.8, 252.9 -> 250.1, 250.2; 7168x4096x2048 149.3, 150.1 -> 142.6, 143.0;
/// 7168x4096x16384 947.9, 947.2 -> 951.0, 949.5 (the one slower). Six K blocks ahead instead gained less
/// (2112x4096x7168 139.4, 7168x4096x2048 143.9, 143.7). At the tile's start (an earlier try) the dense shapes ran
/// slower (2112x4096x7168 142.4 -> 145.8). The K-grouped kernel measured within -0.5% and +0.2% on its six cases with
/// one shared output buffer (one round); with two of 64 columns (gemm_store_buffers; four of 32 since), with the last
/// K block: 16 experts 4096x7168x2048 2056.3, 2054.6 -> 2013.6, 2015.4 us, 16 experts 7168x2048x2048 1071.1, 1071.4 ->
/// 1053.2, 1052.8, 8 experts 4096x7168x4096 1646.6, 1648.6 -> 1621.9, 1623.2; at the tile's start 2041.7, 2038.7;
/// 1062.6, 1063.5; 1652.5, 1651.8.
///
/// Under programmatic dependent launch, the kernels that may (device::gemm_may_prefetch_b_under_pdl: dense, bf16 out,
/// at most 128 rows, at most 16 K blocks per CTA) prefetch the first kPdlPrefetchBytes of their tiles' B into the L2
/// before they wait for the kernel before them (a quantizer, in a model), and let the next kernel launch from there.
/// The L2 is where every kernel's writes land, so a prefetched line is never stale. Measured on an H200 (`bench
/// --chain`, 16 layers of a quantizer and a GEMM, PDL on, us per layer, two rounds each, same run, without -> with):
/// 1x32768x512 8.01, 8.05 -> 7.42, 7.44; 64x32768x512 9.95, 9.97 -> 8.82, 8.83; 128x32768x512 10.81, 10.80 -> 9.83,
/// 9.72; 64x7168x2048 8.07, 8.05 -> 7.84, 7.83; 128x7168x2048 9.72, 9.67 -> 9.09, 8.96; 1x24576x1536 13.01, 13.05 ->
/// 12.63, 12.67; 128x24576x1536 16.51, 16.53 -> 16.62, 16.63 (the one row slower). With more K blocks the early
/// launch made the layer slower (64x4096x7168 12.71 -> 16.61, 64x2112x7168 9.31 -> 13.59, 7168x16384 1-3%); all of a
/// CTA's B (up to 224 KiB) made the layers slower than 32 KiB (1x32768x512 8.77, 64x7168x2048 8.31).
constexpr int64_t kPdlPrefetchBytes = 32 * 1024;

/// Decode calls only: measured where the tiles take one or two waves (larger M untried).
constexpr int64_t kPdlPrefetchMaxWaves = 2;

int pdl_prefetch_b_blocks_for(const Problem& p, const KernelConfig& c) {
  const auto k_blocks_per_cta = uint32_t(ceil_div(p.k, device::kBlockK) / c.split_k);
  if (!device::gemm_may_prefetch_b_under_pdl(static_cast<device::GemmKind>(p.kind), uint32_t(c.block_m), c.output,
                                              k_blocks_per_cta) ||
      c.num_waves > kPdlPrefetchMaxWaves)
    return 0;
  return int(std::max<int64_t>(1, kPdlPrefetchBytes / (int64_t(c.block_n) * device::kBlockK)));
}

}  // namespace

namespace {
/// Weight gradients run on D^T's tiles (kOutF32AddToDT) where the kernel's tiles then cover fewer rounds of the SMs, as
/// the model times them (kDTransposedTileFactorBeyondL2 where D outgrows the L2). Measured on an H200 (`finegemm
/// bench`, C = D, the same binary forced to D's tiles and to D^T's, FINEGEMM_FORCE_CONFIG=dt=0 / dt=1, two rounds,
/// us): 576x4096x7168 38.2, 38.6 -> 35.0, 35.6 (128x160 over 130 tiles -> 128x144 over 128); 2112x1024x7168 37.1,
/// 37.1 -> 34.9, 34.2; 2112x1024x640 8.4, 8.5 -> 8.0, 8.0; 304x7168x7168 49.9, 49.7 -> 39.6, 40.0; 304x7168x640 9.8,
/// 9.9 -> 9.1, 9.0; 576x4096x640 9.2, 9.3 -> 9.3, 9.2. Where D outgrows the L2 (128x160 in 12 and 7 rounds -> 128x176
/// in 10 and 6): 7168x4096x16384 938.1, 935.1 -> 892.3, 891.4; 7168x4096x2048 139.1, 139.0 -> 136.4, 136.6;
/// 4096x4096x7168 243.8, 243.1 -> 236.6, 236.0. Where the model times them alike, D^T's tiles measured faster where
/// the call's M is not a multiple of 128 (2112x4096x7168 135.0, 135.6 -> 130.4, 130.5: D's own tiles end in a row
/// block of 64 rows) and slower where it is (4096x4096x7168 on 128x160 either way 243.1, 243.0 -> 254.5, 254.0).
/// bf16 D without C (kOutBf16DT) follows the same rules; through the Python binding, CUDA events after a 256 MiB
/// memset, us, dt=0 -> the pick: 576x4096x7168 42.9, 44.2 -> 38.0, 37.8; 2112x4096x7168 130.4, 130.9 -> 117.9, 118.0;
/// 4096x4096x7168 257.8, 260.5 -> 225.5, 225.7; 7168x4096x2048 135.3, 135.7 -> 125.7, 126.0; 7168x4096x16384 975.5,
/// 1015.9 -> 848.7, 870.6.
bool d_transposed_breaks_tie(const Problem& p) { return may_transpose_d(p) && p.m % 128 != 0; }
}  // namespace

KernelConfig select_config(const Problem& p, int num_sms, const ConfigConstraints& constraints,
                           const HardwareModel& hw) {
  const std::vector<Candidate> candidates = enumerate_candidates(p, num_sms, constraints, hw);
  const KernelConfig* best = nullptr;
  for (const auto& cand : candidates) {
    if (!cand.rejected.empty()) continue;
    const KernelConfig& c = cand.config;
    if (best == nullptr) {
      best = &c;
      continue;
    }
    // Lower modeled time (1% tolerance), then the tile grid without a partial row block (d_transposed_breaks_tie),
    // then fewer waves, then larger BLOCK_M, then no split-K, then smaller BLOCK_N.
    const double tolerance = 0.01 * best->estimated_us;
    if (c.estimated_us < best->estimated_us - tolerance) {
      best = &c;
    } else if (std::abs(c.estimated_us - best->estimated_us) <= tolerance) {
      const auto rank = [&](const KernelConfig& x) {
        return std::make_tuple(device::gemm_d_transposed(x.output) == d_transposed_breaks_tie(p), -x.num_waves,
                               x.block_m, -x.split_k, -x.block_n);
      };
      if (rank(c) > rank(*best)) best = &c;
    }
  }
  check(best != nullptr, Error::Kind::kUnsupported, "heuristics", "no kernel configuration fits M=", p.m, " N=", p.n,
        " K=", p.k,
        constraints.empty() ? std::string()
                            : " with FINEGEMM_FORCE_CONFIG=" + constraints.text +
                                  " (which rejects every other candidate: unset it or name a configuration that fits "
                                  "this shape)");
  KernelConfig chosen = *best;
  // The kernel's problem from here on (M and N swapped on D^T's tiles).
  const Problem kp = kernel_problem(p, chosen);
  chosen.b_evict_first =
      constraints.b_evict_first >= 0 ? constraints.b_evict_first == 1 : b_evict_first_pays(kp, chosen);
  chosen.grid = fewest_ctas_for_the_waves(kp, chosen);
  chosen.d_evict_first = constraints.d_evict_first >= 0 ? constraints.d_evict_first == 1
                                                        : chosen.output != device::kOutF32AddCAhead &&
                                                              d_evict_first_pays(kp, hw);
  chosen.b_pairs = constraints.b_pairs >= 0 ? constraints.b_pairs == 1 && b_pairs_allowed(kp, chosen)
                                            : b_pairs_pay(kp, chosen);
  chosen.pdl_prefetch_b_blocks = pdl_prefetch_b_blocks_for(kp, chosen);
  chosen.d_prefetch_lead = device::gemm_reduces_into_d(chosen.output) ? 1 : 0;
  return chosen;
}

}  // namespace finegemm::heuristics
