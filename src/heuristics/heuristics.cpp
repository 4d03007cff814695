#include "heuristics/heuristics.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "common/error.hpp"
#include "finegemm/device/common/gemm_layout.cuh"
#include "heuristics/kernel_options.hpp"
#include "heuristics/time_model.hpp"

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
// Below 12 K blocks BLOCK_M=256 loses to BLOCK_M=128 on an H100: 146.0-146.5 vs 130.1-130.9 us at 4096x32768x512.
// At K=1536 (the K loop with one copy per wave count) it ran 24576x1536 at M 512-8192 0-2% faster than 128x192
// (4096: 237.7-238.3 vs 241.0-241.3 us) and, against the picks it replaced at N=7168, M=400, 2200 2-4% faster,
// M=1500 as fast, M=4000 1.1% slower (71.6-71.7 vs 70.9 with 128x160).
constexpr int64_t kBlockM256MinK = 1536;
// Except where one 256-row block holds every row and K is short: 192x32768x512 and 256x32768x512 ran 14.4 and 15.6 us
// with BLOCK_M=256 against 15.9-16.1 and 16.9-17.0 with 128-row tiles (H100; the time model then picks it); at
// K=1536 it lost there too (192x24576x1536 25.4 against 24.0).
constexpr int64_t kBlockM256OneBlockMaxK = 512;
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
// Split-K measured faster only at this K and above (the runs: kSplitKOverheadUs, time_model.cpp).
constexpr int64_t kSplitKMinK = 7168;
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

}  // namespace

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


namespace {
/// Weight gradients run on D^T's tiles (kOutF32AddToDT) where the kernel's tiles then cover fewer rounds of the SMs, as
/// the model times them (time_model.cpp: kDTransposedTileFactorBeyondL2 where D outgrows the L2). Measured on an H200
/// (`finegemm bench`, C = D, the same binary forced to D's tiles and to D^T's, FINEGEMM_FORCE_CONFIG=dt=0 / dt=1, two
/// rounds, us): 576x4096x7168 38.2, 38.6 -> 35.0, 35.6 (128x160 over 130 tiles -> 128x144 over 128); 2112x1024x7168
/// 37.1, 37.1 -> 34.9, 34.2; 2112x1024x640 8.4, 8.5 -> 8.0, 8.0; 304x7168x7168 49.9, 49.7 -> 39.6, 40.0; 304x7168x640
/// 9.8, 9.9 -> 9.1, 9.0; 576x4096x640 9.2, 9.3 -> 9.3, 9.2. Where D outgrows the L2 (128x160 in 12 and 7 rounds ->
/// 128x176 in 10 and 6): 7168x4096x16384 938.1, 935.1 -> 892.3, 891.4; 7168x4096x2048 139.1, 139.0 -> 136.4, 136.6;
/// 4096x4096x7168 243.8, 243.1 -> 236.6, 236.0. Where the model times them alike, D^T's tiles measured faster where the
/// call's M is not a multiple of 128 (2112x4096x7168 135.0, 135.6 -> 130.4, 130.5: D's own tiles end in a row block of
/// 64 rows) and slower where it is (4096x4096x7168 on 128x160 either way 243.1, 243.0 -> 254.5, 254.0). bf16 D without
/// C (kOutBf16DT) follows the same rules; through the Python binding, CUDA events after a 256 MiB memset, us, dt=0 ->
/// the pick: 576x4096x7168 42.9, 44.2 -> 38.0, 37.8; 2112x4096x7168 130.4, 130.9 -> 117.9, 118.0; 4096x4096x7168 257.8,
/// 260.5 -> 225.5, 225.7; 7168x4096x2048 135.3, 135.7 -> 125.7, 126.0; 7168x4096x16384 975.5, 1015.9 -> 848.7, 870.6.
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
  set_launch_options(chosen, kernel_problem(p, chosen), constraints, hw);
  return chosen;
}

}  // namespace finegemm::heuristics
