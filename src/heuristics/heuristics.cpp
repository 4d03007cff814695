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
// Kernels that load C a tile ahead (kOutF32AddCAhead) keep two fp32 tiles in shared memory beside the stages
// and need four of them (docs/heuristics.md, "C loaded a tile ahead").
constexpr int kMinStagesCAhead = 4;
// C loaded a tile ahead pays where C's and D's bytes at the copy bandwidth outweigh the tensor work at its peak
// this many times: their reads and writes then run under the K loops (docs/heuristics.md, "C loaded a tile ahead").
constexpr double kCAheadMinBytesOverMath = 3.0;
constexpr int kMinBlockN = 16;  // wgmma takes N = 8 too, but an 8-column tile reads all of A for 8 columns
// BLOCK_N steps by 16, the columns of the epilogue's stmatrix x4; odd multiples of 8 measured slower
// (docs/heuristics.md, "BLOCK_N in steps of 16").
constexpr int kBlockNStep = 16;
// BLOCK_M=256 only from 12 K blocks on: with fewer, its 3-stage refill and 256-row epilogue cost more than it saves
// (docs/heuristics.md, "256-row tiles").
constexpr int64_t kBlockM256MinK = 1536;
// Except where one 256-row block holds every row and K is at most 512.
constexpr int64_t kBlockM256OneBlockMaxK = 512;
// The contiguous layout takes 256-row tiles only from K = 3072 on (no faster at K = 2048).
constexpr int64_t kBlockM256MinKContiguous = 3072;
// Masked and psum groups of 257-2048 expected rows take 256-row tiles only from K = 4096 on (128x192 measured
// faster below); groups of at most 256 or more than 2048 rows are not bound by this rule.
constexpr int64_t kBlockM256MinKMaskedPsum = 4096;
constexpr int64_t kBlockM256MaxGroupRowsAnyK = 256;
constexpr int64_t kBlockM256ShortKMaxGroupRows = 2048;
// Split-K measured faster only from this K on (docs/heuristics.md, "Split-K").
constexpr int64_t kSplitKMinK = 7168;
// Calls of 65-128 rows: split 64x64 tiles (two row blocks) measured faster than split 128x32 ones where their CTAs
// take at most this share of the SMs (72-104 of 132), slower from 120 of 132 (docs/heuristics.md, "Split-K").
constexpr double kSplit64x64MaxSmShare = 0.8;
// K-major SA goes by TMA boxes (device::kSaKMajorTma) from this many K blocks and rows on (sa_mode_for).
constexpr int64_t kSaTmaMinKBlocks = 32;
constexpr int64_t kSaTmaMinRows = 1024;
// MN-major SA of at most 16 rows is loaded once per CTA (device::kSaMnMajorOnce, kSaMnMajorOnce16) from this many K
// blocks on, in 64-row tiles, split-K included: a box per stage reads rows 16-64 bytes apart there; below 32 K blocks
// the once-loaded box measured slower (docs/performance.md, "What was tried").
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
  // TMA boxes measured faster with many rows and long K, slower at KB <= 16 and at small M
  // (docs/heuristics.md, "K-major scales: TMA boxes or gathered").
  const int64_t kb = ceil_div(p.k, 128);
  return kb % 4 == 0 && kb >= kSaTmaMinKBlocks && p.m >= kSaTmaMinRows ? device::kSaKMajorTma
                                                                       : device::kSaKMajorGather;
}

uint32_t sa_mode_for(const Problem& p) {
  // SA of dense calls of at most 16 rows and at least kSaOnceMinKBlocks (K-major: kSaKMajorOnceMinKBlocks) K blocks goes
  // in one load for all K blocks (in 64-row tiles; the others keep a box per stage: enumerate_candidates): MN-major of
  // at most 4 rows as kSaMnMajorOnce, of 5-16 as kSaMnMajorOnce16. K-major SA's box row is its K blocks: their count
  // must be a multiple of 4 (16 bytes).
  const int64_t kb = ceil_div(p.k, int64_t(device::kBlockK));
  const uint32_t once_mode = p.sa_k_major ? device::kSaKMajorOnce
                             : p.m <= int64_t(device::gemm_sa_once_rows(device::kSaMnMajorOnce))
                                 ? device::kSaMnMajorOnce
                                 : device::kSaMnMajorOnce16;
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
/// Whether split 64x64 tiles take the place of split 128x32 ones: 65-128 rows, split-K's K, and the 64x64 tiles'
/// clusters on at most kSplit64x64MaxSmShare of the SMs.
bool split_64x64_tiles_pay(const Problem& p, int64_t rows, int num_sms) {
  const int64_t ctas = 2 * ceil_div(rows, int64_t(64)) * ceil_div(p.n, int64_t(64));
  return p.kind == GemmKind::kNormal && rows > 64 && rows <= 128 && p.k >= kSplitKMinK &&
         double(ctas) <= kSplit64x64MaxSmShare * double(num_sms);
}

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
  const bool split_64x64 = split_64x64_tiles_pay(p, rows, num_sms);
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
            cand.rejected = "split-K divides an even number of K blocks between the cluster's two CTAs";
          } else if (split == 2 &&
                     !((block_m == 64 && block_n <= 32) || (block_m == 128 && block_n == 32) ||
                       (block_m == 64 && block_n == 64 && split_64x64)) &&
                     constraints.split_k != 2) {
            cand.rejected = "split-K measured faster only with 64x16, 64x32 and 128x32 tiles (and 64x64 ones over "
                            "65-128 rows on at most 4/5 of the SMs)";
          } else if (split == 2 && block_m == 128 && split_64x64 && constraints.block_m != 128) {
            cand.rejected = "over 65-128 rows, split 64x64 tiles on at most 4/5 of the SMs measured faster than split "
                            "128x32 ones";
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
            // at most one tile's K blocks: deeper, the next tile's loads go out beside this tile's, and its math and
            // stores wait for both (docs/heuristics.md, "Pipeline stages").
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
/// Weight gradients (and bf16 D with 1x128 scales on both operands) run on D^T's tiles where the model gives
/// them fewer rounds of the SMs; where it times both alike, D^T's tiles measured faster where the call's M is not a
/// multiple of 128, and slower where it is (docs/heuristics.md, "D^T's tiles").
bool d_transposed_breaks_tie(const Problem& p) { return may_transpose_d(p) && p.m % 128 != 0; }

/// Short-K forward GEMMs (short_k_forward): where the model times tiles alike, the one whose stage ring holds its
/// whole K measured faster (128x128 with 5 stages against 128x192 with 4 at 2048 and 4096 x 7168 x 576:
/// docs/heuristics.md, "Short K").
bool whole_k_in_stages(const Problem& p, const KernelConfig& c) {
  return short_k_forward(p, c) && c.num_stages >= ceil_div(p.k, int64_t(device::kBlockK));
}
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
    // then at short K the whole K in the stage ring (whole_k_in_stages), then fewer waves, then larger BLOCK_M, then
    // no split-K, then smaller BLOCK_N.
    const double tolerance = 0.01 * best->estimated_us;
    if (c.estimated_us < best->estimated_us - tolerance) {
      best = &c;
    } else if (std::abs(c.estimated_us - best->estimated_us) <= tolerance) {
      const auto rank = [&](const KernelConfig& x) {
        return std::make_tuple(device::gemm_d_transposed(x.output) == d_transposed_breaks_tie(p),
                               whole_k_in_stages(p, x), -x.num_waves, x.block_m, -x.split_k, -x.block_n);
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
