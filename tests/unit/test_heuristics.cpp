// The heuristic: deterministic, every filter enforced, stages fit in shared memory, sensible picks; the constraints of
// FINEGEMM_FORCE_CONFIG parsed strictly and applied as given.
#include <gtest/gtest.h>

#include <tuple>
#include <utility>

#include "finegemm/device/common/gemm_layout.cuh"
#include "heuristics/heuristics.hpp"
#include "heuristics/quantizer_launch.hpp"

namespace fh = finegemm::heuristics;
using finegemm::GemmKind;
using finegemm::Problem;

namespace {
Problem dense(int64_t m, int64_t n, int64_t k) {
  Problem p;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

/// A masked grouped GEMM of `groups` groups whose M_max and expected M are both `m`.
Problem masked(int groups, int64_t m, int64_t n, int64_t k) {
  Problem p = dense(m, n, k);
  p.kind = GemmKind::kGroupedMasked;
  p.num_groups = groups;
  p.m_max = m;
  return p;
}
}  // namespace

TEST(Heuristics, DeterministicAndWithinLimits) {
  for (int64_t m : {1, 64, 128, 4096})
    for (int64_t n : {576, 2112, 7168, 24576})
      for (int64_t k : {128, 512, 7168, 16384}) {
        const auto a = fh::select_config(dense(m, n, k), 132);
        const auto b = fh::select_config(dense(m, n, k), 132);
        EXPECT_EQ(a.describe(), b.describe());
        EXPECT_LE(a.smem_bytes, 232448);
        EXPECT_EQ(uint32_t(a.smem_bytes), finegemm::device::gemm_smem_launch_bytes(a.block_m, a.block_n, a.num_stages, uint32_t(k),
                                                                               uint32_t(a.split_k), a.sa_mode));
        EXPECT_GE(a.num_stages, 3);
        EXPECT_EQ(a.block_n % 16, 0);
        EXPECT_GE(a.block_n, 16);
        EXPECT_LE(a.block_n, a.block_m == 64 ? 176 : a.block_m == 128 ? 192 : 128);
        EXPECT_LE(a.grid, 132);
        EXPECT_EQ(a.cluster_size(), a.split_k);
        if (a.split_k == 2) EXPECT_EQ(a.grid % 2, 0);
      }
}

TEST(Heuristics, EveryRejectionHasAReason) {
  for (const auto& c : fh::enumerate_candidates(dense(4096, 7168, 7168), 132)) {
    if (!c.rejected.empty()) EXPECT_GT(c.rejected.size(), 10u);
  }
}

TEST(Heuristics, SmallMUsesOneWarpgroupAndFillsTheMachine) {
  // 64x1536x7168: 48 tiles of 64x32, each split over K between the two CTAs of a cluster: 96 CTAs streaming B (on an
  // H100: 9.4 us against 10.4 for 96 unsplit 64x16 tiles).
  const auto c = fh::select_config(dense(64, 1536, 7168), 132);
  EXPECT_EQ(c.block_m, 64);
  EXPECT_EQ(c.split_k, 2);
  EXPECT_EQ(c.cluster_size(), 2);
  EXPECT_GE(c.num_tiles * c.split_k, 96);  // enough CTAs to keep most SMs streaming B
  EXPECT_NE(c.describe().find("split-K"), std::string::npos) << c.describe();
  EXPECT_NE(c.kernel_function().find(", 2u, false>"), std::string::npos) << c.kernel_function();
  EXPECT_EQ(fh::select_config(dense(128, 576, 7168), 132).split_k, 2);
  // 64x2112x7168 and 128x2112x7168: 66 split 64x32 and 128x32 tiles, though 132 unsplit ones would fill the SMs in
  // one wave (H200: 9.2 against 10.1-10.2 us, 10.2-10.3 against 10.8).
  const auto e = fh::select_config(dense(64, 2112, 7168), 132);
  EXPECT_EQ(e.block_m, 64);
  EXPECT_EQ(e.block_n, 32);
  EXPECT_EQ(e.split_k, 2);
  EXPECT_EQ(e.num_tiles, 66);
  const auto f = fh::select_config(dense(128, 2112, 7168), 132);
  EXPECT_EQ(f.block_m, 128);
  EXPECT_EQ(f.block_n, 32);
  EXPECT_EQ(f.split_k, 2);
  // 65-128 rows: split 64x64 tiles (two row blocks) where their CTAs take at most 4/5 of the SMs (H200: 128x1536x7168
  // 8.30-8.34 against 8.70 us for split 128x32 tiles, 80x1152x7168 7.98-8.00 against 8.32-8.34), not from 120 CTAs
  // (128x1920x7168 9.15-9.20 against 9.02).
  for (int64_t m : {65, 96, 128})
    for (int64_t n : {1152, 1536, 1664}) {
      const auto g = fh::select_config(dense(m, n, 7168), 132);
      EXPECT_EQ(std::make_tuple(g.block_m, g.block_n, g.split_k), std::make_tuple(64, 64, 2)) << g.describe();
    }
  for (int64_t n : {1792, 1920, 2048}) {
    const auto h = fh::select_config(dense(128, n, 7168), 132);
    EXPECT_EQ(std::make_tuple(h.block_m, h.block_n, h.split_k), std::make_tuple(128, 32, 2)) << h.describe();
  }
  // At most 64 rows the 64x32 split tiles stay (64x1536x7168, above).
  // With 64-column tiles split-K lost: 64x4096x7168 stays unsplit, one tile per SM.
  const auto d = fh::select_config(dense(64, 4096, 7168), 132);
  EXPECT_EQ(d.split_k, 1);
  EXPECT_EQ(d.cluster_size(), 1);
  EXPECT_GE(d.num_tiles, 100);
  // Nor below the K it was measured at, nor with enough tiles to fill the machine.
  EXPECT_EQ(fh::select_config(dense(64, 2112, 2048), 132).split_k, 1);
  EXPECT_EQ(fh::select_config(dense(4096, 2112, 7168), 132).split_k, 1);
}

TEST(Heuristics, LargeMUsesBigTiles) {
  const auto c = fh::select_config(dense(4096, 7168, 7168), 132);
  EXPECT_EQ(c.block_m, 256);
  EXPECT_EQ(c.block_n, 128);
  // The contiguous layout too (its scheduler gives a 256-row block's second half a tile of its own when a new
  // expert starts there).
  Problem p = dense(8192 * 4, 4096, 7168);
  p.kind = GemmKind::kGroupedContiguous;
  p.num_groups = 4;
  EXPECT_EQ(fh::select_config(p, 132).block_m, 256);
  p.k = 2048;  // measured slower than BLOCK_M=128 there
  EXPECT_EQ(fh::select_config(p, 132).block_m, 128);
  // Short K: the 256-row tile's refill and epilogue are not paid back.
  EXPECT_EQ(fh::select_config(dense(4096, 32768, 512), 132).block_m, 128);
}

TEST(Heuristics, NoTileSpansThreeScaleBlocks) {
  // Found on the GPU: BLOCK_N = 176 put columns of three 128-wide SB blocks in one tile (M=4097, N=2112).
  for (int64_t m : {1, 64, 4097})
    for (int64_t n : {576, 2112, 7232, 24576}) {
      const auto c = fh::select_config(dense(m, n, 7168), 132);
      for (int64_t start = 0; start < n; start += c.block_n)
        EXPECT_LE(start % 128 + c.block_n, 256) << c.describe();
    }
}

TEST(Heuristics, KernelFunctionNamesTheConfig) {
  const auto c = fh::select_config(dense(128, 4096, 7168), 132);
  const std::string f = c.kernel_function();
  EXPECT_NE(f.find("sm90_fp8_gemm_kernel<0, 4096u, 7168u, "), std::string::npos) << f;
}

TEST(Heuristics, MaskedAndContiguousPickLegalConfigs) {
  Problem p = masked(4, 256, 7168, 2048);
  const auto masked = fh::select_config(p, 132);
  p.kind = GemmKind::kGroupedContiguous;
  p.m = 8192 * 4;
  const auto contiguous = fh::select_config(p, 132);
  EXPECT_EQ(masked.split_k, 1);
  EXPECT_EQ(contiguous.split_k, 1);
}

TEST(Heuristics, PsumCountsTheTilesOfEachGroupAndKeepsTheContiguousPolicies) {
  // The psum layout's problem: `m` rows expected per group, each group's rows starting on a 128-row boundary, so
  // each group has its own row blocks.
  Problem p;
  p.kind = GemmKind::kGroupedContiguousPsum;
  p.num_groups = 8;
  p.m = 1000;
  p.n = 4096;
  p.k = 7168;
  const auto c = fh::select_config(p, 132);
  EXPECT_EQ(c.kind, GemmKind::kGroupedContiguousPsum);
  EXPECT_NE(c.kernel_function().find("sm90_fp8_gemm_kernel<3, 4096u, 7168u, "), std::string::npos)
      << c.kernel_function();
  EXPECT_EQ(c.num_tiles, 8 * ((1000 + c.block_m - 1) / c.block_m) * ((4096 + c.block_n - 1) / c.block_n));
  EXPECT_EQ(c.split_k, 1);
  EXPECT_EQ(c.grid, 132) << "grouped kernels keep every SM";
  EXPECT_FALSE(c.b_evict_first) << "experts hold many row blocks each (the contiguous policy)";
  // The K rule for 256-row tiles over masked and psum groups of 257-2048 rows; groups of at most 256 rows (one
  // 256-row tile per group and n-block) and groups of more than 2048 keep them at any K.
  p.k = 2048;
  for (int64_t rows : {5000, 2048, 1000, 300, 230}) {
    for (GemmKind kind : {GemmKind::kGroupedContiguousPsum, GemmKind::kGroupedMasked}) {
      Problem q = p;
      q.kind = kind;
      q.m = rows;
      q.m_max = kind == GemmKind::kGroupedMasked ? 8192 : 0;
      for (const auto& cand : fh::enumerate_candidates(q, 132))
        if (cand.config.block_m == 256 && cand.config.block_n == 128 && cand.config.split_k == 1) {
          if (rows > 256 && rows <= 2048)
            EXPECT_NE(cand.rejected.find("needs K >= 4096"), std::string::npos) << rows << ": " << cand.rejected;
          else
            EXPECT_TRUE(cand.rejected.empty()) << rows << ": " << cand.rejected;
        }
    }
  }
  // The m_indices layout keeps 256-row tiles from K = 3072.
  for (int64_t k : {2048, 3072}) {
    Problem q = p;
    q.kind = GemmKind::kGroupedContiguous;
    q.m = 8 * 4096;
    q.k = k;
    for (const auto& cand : fh::enumerate_candidates(q, 132))
      if (cand.config.block_m == 256 && cand.config.block_n == 128 && cand.config.split_k == 1) {
        if (k < 3072)
          EXPECT_NE(cand.rejected.find("needs K >= 3072"), std::string::npos) << k << ": " << cand.rejected;
        else
          EXPECT_TRUE(cand.rejected.empty()) << k << ": " << cand.rejected;
      }
  }
  // Few rows per group: tiles of 64 rows, one block per group.
  p.m = 40;
  const auto small = fh::select_config(p, 132);
  EXPECT_EQ(small.block_m, 64);
  EXPECT_EQ(small.num_tiles, 8 * ((4096 + small.block_n - 1) / small.block_n));
}

TEST(Heuristics, MaskedAndPsumTake256RowTilesWithAWideTail) {
  // Each group's last block of at most 128 rows runs as wide tiles wherever the kernel allows (256x128 tiles, SA not
  // gathered): the groups' rows are known only on the device. The model counts every group as p.m rows: 300 rows are a
  // full block and a 44-row tail, one tile per pair of the 32 n-blocks.
  for (GemmKind kind : {GemmKind::kGroupedMasked, GemmKind::kGroupedContiguousPsum})
    for (bool k_major : {false, true})
      for (int64_t rows : {300, 1024, 1100}) {
        Problem p = masked(6, rows, 4096, 7168);
        p.kind = kind;
        p.m_max = kind == GemmKind::kGroupedMasked ? rows : 0;
        p.sa_k_major = k_major;
        int wide_256 = 0;
        for (const auto& cand : fh::enumerate_candidates(p, 132)) {
          const auto& c = cand.config;
          if (!cand.rejected.empty()) continue;
          SCOPED_TRACE(c.describe());
          const bool wide = c.block_m == 256 && c.sa_mode != finegemm::device::kSaKMajorGather;
          EXPECT_EQ(c.wide_tail, wide);
          wide_256 += wide;
          const int64_t n_blocks = (4096 + c.block_n - 1) / c.block_n;
          EXPECT_EQ(c.num_tiles, 6 * finegemm::device::gemm_group_tiles<int64_t>(rows, n_blocks, c.block_m, wide));
          if (wide) EXPECT_NE(c.kernel_function().find(", 1u, true>"), std::string::npos) << c.kernel_function();
          if (wide) EXPECT_NE(c.describe().find("wide-tail"), std::string::npos);
        }
        // The one 256x128 candidate, unless K-major SA is gathered (few rows).
        EXPECT_EQ(wide_256, fh::sa_mode_for(p) == finegemm::device::kSaKMajorGather ? 0 : 1) << rows << " " << k_major;
      }
  EXPECT_EQ(finegemm::device::gemm_group_tiles<int64_t>(300, 32, 256, true), 32 + 16);
}

TEST(Heuristics, GroupedBReadPastNCountsWhereTheCallStreamsB) {
  // 32 groups of ~24 rows stream B: the DRAM term decides, and an n-block running past N reads the next group's rows.
  // At N=4096 the 64-row tiles then take BLOCK_N=128 (no partial n-block) over 160 (26 n-blocks, 64 rows past N).
  for (GemmKind kind : {GemmKind::kGroupedMasked, GemmKind::kGroupedContiguousPsum})
    for (int64_t k : {2048, 4096}) {
      Problem p = masked(32, 24, 4096, k);
      p.kind = kind;
      p.m_max = kind == GemmKind::kGroupedMasked ? 4096 : 0;
      const fh::KernelConfig c = fh::select_config(p, 132);
      EXPECT_EQ(c.block_m, 64) << c.describe();
      EXPECT_EQ(4096 % c.block_n, 0) << c.describe();
      // Both are timed by the DRAM term; BLOCK_N=160 reads 4160 of every 4096 rows of B, beyond the pick's 1%
      // tolerance.
      double est_128 = 0, est_160 = 0;
      for (const auto& cand : fh::enumerate_candidates(p, 132)) {
        if (!cand.rejected.empty() || cand.config.block_m != 64) continue;
        if (cand.config.block_n == 128) est_128 = cand.config.estimated_us;
        if (cand.config.block_n == 160) est_160 = cand.config.estimated_us;
      }
      ASSERT_GT(est_128, 0);
      EXPECT_GT(est_160 / est_128, 1.01);
      EXPECT_LE(est_160 / est_128, 4160.0 / 4096.0);
    }
}

TEST(Heuristics, ContiguousAlignedTo64RowsTakesOnly64RowTiles) {
  // m_indices with experts aligned to 64 rows: a 128- or 256-row block may hold two experts' starts, which those tiles
  // cannot compute, so every other tile height is rejected, with its reason, whatever M_sum, N and K (the 128-aligned
  // layout takes 128- or 256-row tiles at these shapes). The psum layout's tiles start at each group's start: its
  // alignment leaves the heuristic as it is.
  for (const auto& [m, n, k] : {std::tuple{8192 * 4, 4096, 7168}, std::tuple{4096 * 8, 7168, 2048},
                                std::tuple{256, 576, 7168}, std::tuple{64 * 64, 2112, 7168}}) {
    Problem p;
    p.kind = GemmKind::kGroupedContiguous;
    p.num_groups = 8;
    p.m = m;
    p.n = n;
    p.k = k;
    const auto aligned128 = fh::select_config(p, 132);
    for (bool k_major : {false, true}) {
      p.sa_k_major = k_major;
      p.m_alignment = 64;
      const auto c = fh::select_config(p, 132);
      EXPECT_EQ(c.block_m, 64) << c.describe();
      EXPECT_NE(c.kernel_function().find("sm90_fp8_gemm_kernel<1, "), std::string::npos) << c.kernel_function();
      for (const auto& cand : fh::enumerate_candidates(p, 132))
        if (cand.config.block_m != 64)
          EXPECT_NE(cand.rejected.find("experts aligned to 64 rows may start in any 64-row block"), std::string::npos)
              << cand.config.block_m << " " << cand.rejected;
      p.m_alignment = 128;
    }
    if (m >= 8192) EXPECT_GE(aligned128.block_m, 128) << aligned128.describe();
  }
  Problem psum;
  psum.kind = GemmKind::kGroupedContiguousPsum;
  psum.num_groups = 8;
  psum.m = 1000;
  psum.n = 4096;
  psum.k = 7168;
  const std::string default_pick = fh::select_config(psum, 132).describe();
  for (int alignment : {64, 32}) {
    psum.m_alignment = alignment;
    EXPECT_EQ(fh::select_config(psum, 132).describe(), default_pick);
  }
}

TEST(Heuristics, NarrowStoreSlabsCostMoreWhereTheOutputDominates) {
  // 512x32768x512 writes twice B's bytes: BLOCK_N=144 (32-byte store rows) measured 27.5 us against 23.3 for 128 on
  // an H100, so 144's fewer waves no longer win it.
  const auto wide_d = fh::select_config(dense(512, 32768, 512), 132);
  EXPECT_EQ(wide_d.block_n, 128) << wide_d.describe();
  // Where B's bytes dominate, BLOCK_N=112 keeps its extra tiles (192x7168x2048: 10.8 us against 11.5 with 128).
  for (int64_t m : {192, 256}) {
    const auto c = fh::select_config(dense(m, 7168, 2048), 132);
    EXPECT_EQ(c.block_n, 112) << c.describe();
  }
  // Long K with few rows: BLOCK_N=144 stays where it fills the SMs (1024x2112x7168 ran 1.59x cuBLASLt with it).
  EXPECT_EQ(fh::select_config(dense(1024, 2112, 7168), 132).block_n, 144);
}

TEST(Heuristics, ShortKOverManyRoundsAvoids64ByteSlabsAndKeepsTheWholeKInStages) {
  // K <= 576 over at least 8 rounds: 128x160 (64-byte store rows) ran 4-13% slower than 128x192 (H200).
  for (const auto& [m, k] : {std::pair<int64_t, int64_t>{8192, 384}, {8192, 512}, {8192, 576}, {4096, 512}}) {
    const auto c = fh::select_config(dense(m, 7168, k), 132);
    EXPECT_EQ(c.block_n, 192) << m << "x7168x" << k << ": " << c.describe();
  }
  // Where the model then times 128x128 and 128x192 alike, the five stages of 128x128 hold the whole K (35.8 us
  // against 36.7 at 4096x7168x576).
  for (int64_t m : {2048, 4096}) {
    const auto c = fh::select_config(dense(m, 7168, 576), 132);
    EXPECT_EQ(c.block_n, 128) << c.describe();
    EXPECT_GE(int64_t(c.num_stages), 5) << c.describe();
  }
  // K = 640 and few rounds keep 128x160 (34.8 us against 35.0 for 128x128 at 4096x7168x640; 12.2 against 12.4 at
  // 1024x7168x576, three rounds); so do bf16 outputs with 1x128 scales of B, which were not measured under the rule.
  for (const Problem& p : {dense(4096, 7168, 640), dense(1024, 7168, 576)}) {
    const auto c = fh::select_config(p, 132);
    EXPECT_EQ(c.block_n, 160) << p.m << "x" << p.n << "x" << p.k << ": " << c.describe();
  }
  Problem sb_per_row = dense(8192, 7168, 512);
  sb_per_row.sb_per_row = true;
  const auto c = fh::select_config(sb_per_row, 132);
  EXPECT_EQ(c.block_n, 160) << c.describe();
}

TEST(Heuristics, TwoRowBlocksTakeSixtyFourRowTilesInOneRound) {
  // Forward GEMMs of 65-128 rows at 3072 <= K <= 7168 whose 64-row tiles fit one round: 64x64 ran 3-15% faster than
  // 128x32 at N = 3584-4224 (H200), plain and as a decode-chain layer; 64x80 than 128x48 at N = 4608 and 5120.
  for (int64_t m : {65, 72, 100, 113, 120, 128}) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4096, 3072}, {4096, 7168}, {4224, 7168}, {3584, 4096}}) {
      const auto c = fh::select_config(dense(m, n, k), 132);
      EXPECT_EQ(c.block_m, 64) << c.describe();
      EXPECT_EQ(c.block_n, 64) << c.describe();
      EXPECT_EQ(c.num_waves, 1) << c.describe();
    }
    EXPECT_EQ(fh::select_config(dense(m, 5120, 7168), 132).block_n, 80);
  }
  // K = 16384 (a chain layer 14% slower at M = 128), K <= 2048 (64x80 at 128x5120x2048: a chain layer 27% slower),
  // 64-row tiles over two rounds (N = 7168), split-K at N = 2112, and 1x128 scales of B (not measured under the rule)
  // keep 128-row tiles.
  for (const Problem& p : {dense(128, 4096, 16384), dense(72, 4096, 16384), dense(128, 4096, 1536),
                           dense(128, 4096, 2048), dense(128, 5120, 2048), dense(128, 7168, 2048),
                           dense(128, 2112, 7168)}) {
    EXPECT_EQ(fh::select_config(p, 132).block_m, 128) << p.m << "x" << p.n << "x" << p.k;
  }
  Problem sb_per_row = dense(128, 4096, 7168);
  sb_per_row.sb_per_row = true;
  EXPECT_EQ(fh::select_config(sb_per_row, 132).block_m, 128);
}

TEST(Heuristics, ThreeAndFourRowBlocksTakeSixtyFourRowTilesInOneRound) {
  // Forward GEMMs of 129-256 rows at 3072 <= K <= 7168 whose 64-row tiles fit one round (H200): over four row blocks
  // 64x64 ran 1-22% faster than 128x32 at N = 1664-2112 and 64x80 5-12% faster than 128x48 at N = 2304 and 2560; over
  // three, 64x80-64x128 ran 7-16% faster than 128x48-128x80 at N = 3072-5120.
  for (int64_t m : {193, 200, 208, 224, 240, 256}) {
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{1664, 7168}, {2048, 3072}, {2112, 4096}, {2112, 7168}}) {
      const auto c = fh::select_config(dense(m, n, k), 132);
      EXPECT_EQ(c.block_m, 64) << c.describe();
      EXPECT_EQ(c.block_n, 64) << c.describe();
      EXPECT_EQ(c.num_waves, 1) << c.describe();
    }
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{2304, 7168}, {2560, 4096}}) {
      const auto c = fh::select_config(dense(m, n, k), 132);
      EXPECT_EQ(c.block_m, 64) << c.describe();
      EXPECT_EQ(c.block_n, 80) << c.describe();
    }
  }
  for (int64_t m : {129, 160, 192}) {
    for (const auto& [n, k, bn] : {std::tuple<int64_t, int64_t, int>{3072, 7168, 80}, {4096, 7168, 96},
                                   {4608, 7168, 112}, {5120, 3072, 128}}) {
      const auto c = fh::select_config(dense(m, n, k), 132);
      EXPECT_EQ(c.block_m, 64) << m << "x" << n << "x" << k << ": " << c.describe();
      EXPECT_EQ(c.block_n, bn) << m << "x" << n << "x" << k << ": " << c.describe();
      EXPECT_EQ(c.num_waves, 1) << c.describe();
    }
  }
}

TEST(Heuristics, DecodeTilesOverTwoRoundsStageOneTileOfK) {
  // Dense 64-row tiles over more than one round stage at most one tile's K blocks (4 at K = 512: 8 measured slower on
  // an H200); one-round grids, 128-row tiles and longer K keep the stages that fit.
  for (int64_t m : {1, 16, 64}) {
    const auto c = fh::select_config(dense(m, 32768, 512), 132);
    ASSERT_EQ(c.block_m, 64) << c.describe();
    EXPECT_GT(c.num_waves, 1) << c.describe();
    EXPECT_EQ(c.num_stages, 4) << c.describe();
  }
  const auto two_warpgroups = fh::select_config(dense(128, 32768, 512), 132);
  ASSERT_EQ(two_warpgroups.block_m, 128);
  EXPECT_EQ(two_warpgroups.num_stages, 5) << two_warpgroups.describe();
  const auto one_round = fh::select_config(dense(64, 4096, 512), 132);
  ASSERT_EQ(one_round.block_m, 64);
  EXPECT_EQ(one_round.num_waves, 1);
  EXPECT_EQ(one_round.num_stages, 8) << one_round.describe();
  for (int64_t n : {2112, 4096}) {
    const auto long_k = fh::select_config(dense(1, n, 7168), 132);
    EXPECT_GT(long_k.num_stages, 8) << long_k.describe();
  }
}

TEST(Heuristics, Block256AtShortKOnlyWhenOneBlockHoldsEveryRow) {
  // K = 512 with all rows in one 256-row block: BLOCK_M=256 measured 8-10% faster on an H100.
  for (int64_t m : {192, 256}) {
    const auto c = fh::select_config(dense(m, 32768, 512), 132);
    EXPECT_EQ(c.block_m, 256) << c.describe();
  }
  // Two blocks of 256 rows, or K = 1536: 128-row tiles (BLOCK_M=256 measured slower there).
  EXPECT_EQ(fh::select_config(dense(512, 32768, 512), 132).block_m, 128);
  for (int64_t m : {192, 256}) EXPECT_EQ(fh::select_config(dense(m, 24576, 1536), 132).block_m, 128);
  // The rejection says when BLOCK_M=256 is allowed at short K.
  bool found = false;
  for (const auto& cand : fh::enumerate_candidates(dense(512, 32768, 512), 132))
    if (cand.config.block_m == 256 && cand.rejected.find("one 256-row block") != std::string::npos) found = true;
  EXPECT_TRUE(found);
}

TEST(Heuristics, Block256WeighsLessWhereItsTilesRunInFewWaves) {
  // H100: where 256x128 tiles run in at most 4 waves, or K <= 2048, 128-row tiles measured faster:
  // 1024x7168x2048 26.6 us with 128x160 against 29.0; 2048x7168x16384 359.5 with 128x192 against 373.7.
  const auto short_k = fh::select_config(dense(1024, 7168, 2048), 132);
  EXPECT_EQ(short_k.block_m, 128) << short_k.describe();
  EXPECT_EQ(short_k.block_n, 160) << short_k.describe();
  const auto few_waves = fh::select_config(dense(2048, 7168, 16384), 132);
  EXPECT_EQ(few_waves.block_m, 128) << few_waves.describe();
  EXPECT_EQ(few_waves.block_n, 192) << few_waves.describe();
  // Many waves at longer K keep 256x128 (10688x4096x7168: 456.2 us against 515.0 with 128x192), and so do the
  // seed's M = 4096 shapes.
  for (const Problem& p : {dense(10688, 4096, 7168), dense(5504, 11008, 4096), dense(4096, 4096, 7168),
                           dense(4096, 7168, 16384), dense(4096, 7168, 2048)}) {
    const auto c = fh::select_config(p, 132);
    EXPECT_EQ(c.block_m, 256) << p.m << "x" << p.n << "x" << p.k << ": " << c.describe();
  }
  // Grouped GEMMs keep the old weight: masked 4x256x7168x2048 ran 35.1 us with 256x128 against 44.0 with 128x160.
  EXPECT_EQ(fh::select_config(masked(4, 256, 7168, 2048), 132).block_m, 256);
}

TEST(Heuristics, BReadByFewTilesGetsTheEvictFirstHint) {
  // One block of rows: every B tile is read by one tile, so its lines are loaded evict-first.
  for (int64_t m : {1, 64}) {
    const auto c = fh::select_config(dense(m, 7168, 2048), 132);
    EXPECT_TRUE(c.b_evict_first) << c.describe();
    EXPECT_NE(c.describe().find("B:evict-first"), std::string::npos) << c.describe();
  }
  EXPECT_TRUE(fh::select_config(dense(64, 2112, 7168), 132).b_evict_first);
  EXPECT_TRUE(fh::select_config(dense(64, 1536, 7168), 132).b_evict_first);  // split-K: each CTA reads its half once
  // Up to three row blocks, which run side by side, still gain from it; many lose (4096x32768x512 measured 34%
  // slower).
  EXPECT_TRUE(fh::select_config(dense(128, 2112, 7168), 132).b_evict_first);
  EXPECT_TRUE(fh::select_config(dense(256, 7168, 2048), 132).b_evict_first);
  EXPECT_TRUE(fh::select_config(dense(384, 7168, 2048), 132).b_evict_first);
  EXPECT_FALSE(fh::select_config(dense(4096, 7168, 2048), 132).b_evict_first);
  EXPECT_FALSE(fh::select_config(dense(4096, 32768, 512), 132).b_evict_first);
  // Two or three row blocks keep it in at most two waves (256x24576x1536: 24.9 us with it, 26.7 without) and lose it
  // in more (384x32768x512, four waves: 23.1 against 19.7).
  const auto two_waves = fh::select_config(dense(256, 24576, 1536), 132);
  EXPECT_EQ(two_waves.num_waves, 2) << two_waves.describe();
  EXPECT_TRUE(two_waves.b_evict_first) << two_waves.describe();
  const auto four_waves = fh::select_config(dense(384, 32768, 512), 132);
  EXPECT_GT(four_waves.num_waves, 2) << four_waves.describe();
  EXPECT_FALSE(four_waves.b_evict_first) << four_waves.describe();
  EXPECT_TRUE(four_waves.b_pairs) << four_waves.describe();  // pairs follow the row blocks alone
  // One row block keeps it in longer dense calls, where every tile reads A (32x65536x2048: 52.0 us with it, 56.4
  // without).
  const auto one_row_block = fh::select_config(dense(32, 65536, 2048), 132);
  EXPECT_GT(one_row_block.num_waves, 2) << one_row_block.describe();
  EXPECT_TRUE(one_row_block.b_evict_first) << one_row_block.describe();
  // One row block and more than 36 GFLOP: no hint, however few the waves (H100: 128x129280x7168 346.3 us with
  // it, 335.0 without; masked 8x256x4096x7168, two waves, 116.3 against 110.7). Up to 30 GFLOP it stays
  // (128x7168x16384: 50.0 against 55.1; masked 4x128x4096x7168, 52.6 against 53.7).
  EXPECT_FALSE(fh::select_config(dense(128, 129280, 7168), 132).b_evict_first);
  EXPECT_FALSE(fh::select_config(dense(256, 65536, 2048), 132).b_evict_first);
  EXPECT_TRUE(fh::select_config(dense(128, 7168, 16384), 132).b_evict_first);
  for (const auto& [groups, m, hinted] : {std::tuple{8, 256, false}, {8, 128, false}, {4, 256, false},
                                          {4, 128, true}, {8, 64, true}}) {
    const Problem q = masked(groups, m, 4096, 7168);
    const auto c = fh::select_config(q, 132);
    EXPECT_LE(m, c.block_m) << c.describe();  // one row block per group
    EXPECT_LE(c.num_waves, 2) << c.describe();
    EXPECT_EQ(c.b_evict_first, hinted) << groups << "x" << m << "x4096x7168: " << c.describe();
  }
  Problem p = masked(4, 256, 7168, 2048);
  const auto four_groups = fh::select_config(p, 132);
  EXPECT_EQ(four_groups.b_evict_first, four_groups.block_m >= 128) << four_groups.describe();
  // 64-row tiles keep it in three waves (masked 8x32x7168x2048: 50.3-50.8 us with it, 52.1-52.4 without), not in four
  // (10x64x7168x2048: 64.0 against 63.6).
  for (const auto& [groups, m, hinted] : {std::tuple{8, 32, true}, {8, 16, true}, {10, 64, false}}) {
    const Problem q = masked(groups, m, 7168, 2048);
    const auto c = fh::select_config(q, 132);
    EXPECT_EQ(c.block_m, 64) << c.describe();
    EXPECT_EQ(c.num_waves, hinted ? 3 : 4) << c.describe();
    EXPECT_EQ(c.b_evict_first, hinted) << groups << "x" << m << "x7168x2048: " << c.describe();
  }
  p.num_groups = 8;  // 128-row tiles in five waves: masked 8x256x7168x2048 ran 79.9 us with the hint, 68.3 without
  const auto many_waves = fh::select_config(p, 132);
  EXPECT_GT(many_waves.num_waves, 2) << many_waves.describe();
  EXPECT_FALSE(many_waves.b_evict_first) << many_waves.describe();
  p.num_groups = 32;  // one 256-row block per group in eight waves: 441.9 us with the hint, 414.0 without
  p.n = 4096;
  p.k = 7168;
  const auto one_block_per_group = fh::select_config(p, 132);
  EXPECT_EQ(one_block_per_group.block_m, 256) << one_block_per_group.describe();
  EXPECT_FALSE(one_block_per_group.b_evict_first) << one_block_per_group.describe();
  p.n = 7168;
  p.k = 2048;
  p.num_groups = 4;
  p.m_max = 1024;  // rows beyond expected_m may be valid: B is read by up to four row blocks
  EXPECT_FALSE(fh::select_config(p, 132).b_evict_first);
  p.m_max = 4096;
  EXPECT_FALSE(fh::select_config(p, 132).b_evict_first);
  p.kind = GemmKind::kGroupedContiguous;
  p.m = 8192 * 4;
  EXPECT_FALSE(fh::select_config(p, 132).b_evict_first);
}

TEST(Heuristics, OutputMuchLargerThanOperandsAndL2GetsTheEvictFirstHint) {
  // D at least 10x A and B together and larger than the L2: D's stores are hinted (4096x32768x512, D 14x A+B: 129.1,
  // 128.8 us plain against 126.7, 126.7 hinted on an H100). Not at 7.5x and below, where the hint measured no gain.
  const auto hinted = fh::select_config(dense(4096, 32768, 512), 132);
  EXPECT_TRUE(hinted.d_evict_first) << hinted.describe();
  EXPECT_NE(hinted.describe().find("D:evict-first"), std::string::npos) << hinted.describe();
  for (const Problem& q : {dense(2048, 32768, 512), dense(4096, 24576, 1536), dense(4096, 7168, 2048),
                           dense(1024, 24576, 1536)}) {
    const auto c = fh::select_config(q, 132);
    EXPECT_FALSE(c.d_evict_first) << q.m << "x" << q.n << "x" << q.k << ": " << c.describe();
  }
  // An output that fits the L2 would be written back during the call instead of after it (64x7168x2048: 9.1 -> 9.9
  // us with the hint on an H100), however small the operands' share.
  EXPECT_FALSE(fh::select_config(dense(64, 7168, 2048), 132).d_evict_first);
  EXPECT_FALSE(fh::select_config(dense(512, 32768, 64), 132).d_evict_first);  // D 33.6 MB, 16x A and B
  EXPECT_TRUE(fh::select_config(dense(2048, 24576, 64), 132).d_evict_first);  // D 101 MB, 59x
  // Grouped calls count every group's rows and B.
  EXPECT_FALSE(fh::select_config(masked(4, 256, 7168, 2048), 132).d_evict_first);
  Problem contiguous = dense(4 * 8192, 7168, 2048);
  contiguous.kind = GemmKind::kGroupedContiguous;
  contiguous.num_groups = 4;
  EXPECT_FALSE(fh::select_config(contiguous, 132).d_evict_first);
}

TEST(Heuristics, ShortKDecodeKernelsPrefetchBUnderPdl) {
  // Dense bf16 calls of at most 128-row tiles and at most 16 K blocks per CTA: 32 KiB of B's first blocks.
  const struct {
    Problem p;
    int blocks;
  } cases[] = {
      {dense(1, 7168, 2048), 4},    {dense(64, 7168, 2048), 4},  {dense(128, 7168, 2048), 4},
      {dense(64, 32768, 512), 2},   {dense(128, 32768, 512), 2}, {dense(64, 24576, 1536), 2},
      {dense(64, 2112, 7168), 0},   // 28 K blocks per CTA (split-K): the early launch made it slower
      {dense(64, 4096, 7168), 0},   {dense(64, 7168, 16384), 0},
      {dense(4096, 7168, 2048), 0},  // 256-row tiles: they let the next kernel launch from the start already
      {dense(4096, 32768, 512), 0},  // 128-row tiles in 42 waves: not a decode call (measured on those only)
      // A grouped call's tiles need the layout, written before the wait. A masked decode call's B prefetched by
      // the walk one row block per group gives (masked_m unread) made masked chains slower (docs/performance.md).
      {masked(4, 64, 7168, 2048), 0},  {masked(4, 16, 7168, 2048), 0}, {masked(1, 128, 7168, 2048), 0},
  };
  for (const auto& c : cases) {
    const auto config = fh::select_config(c.p, 132);
    EXPECT_EQ(config.pdl_prefetch_b_blocks, c.blocks) << c.p.m << "x" << c.p.n << "x" << c.p.k << ": "
                                                      << config.describe();
    EXPECT_EQ(config.describe().find("PDL:B-prefetch") != std::string::npos, c.blocks > 0) << config.describe();
    if (c.blocks > 0) {
      EXPECT_LE(config.block_m, 128);
      EXPECT_EQ(c.blocks, std::max(1, 32 * 1024 / (config.block_n * 128))) << config.describe();  // whole blocks
    }
  }
  // fp32 outputs (the weight gradient) do not.
  Problem wgrad = dense(64, 4096, 512);
  wgrad.sb_per_row = true;
  wgrad.d_dtype = finegemm::DType::kFloat32;
  wgrad.accumulate = true;
  EXPECT_EQ(fh::select_config(wgrad, 132).pdl_prefetch_b_blocks, 0);
  // FINEGEMM_FORCE_CONFIG=pdlpf=0 turns it off where the heuristic would prefetch, and changes nothing else.
  const auto with = fh::select_config(dense(64, 7168, 2048), 132);
  const auto without = fh::select_config(dense(64, 7168, 2048), 132, fh::parse_constraints("pdlpf=0"));
  EXPECT_GT(with.pdl_prefetch_b_blocks, 0);
  EXPECT_EQ(without.pdl_prefetch_b_blocks, 0);
  EXPECT_EQ(without.kernel_function(), with.kernel_function());
  EXPECT_EQ(without.grid, with.grid);
  EXPECT_THROW(fh::parse_constraints("pdlpf=1"), finegemm::Error);
}

TEST(Heuristics, BPairsWhereTheCallStreamsB) {
  // Few row blocks and few FLOPs per byte: B's issuer fills two stages per wait, one tile per CTA or several.
  // (256x32768x512 runs one 256-row block per tile: faster than 128-row tiles with pairs.)
  for (const auto& shape : {dense(128, 24576, 1536), dense(64, 7168, 16384), dense(384, 32768, 512),
                            dense(256, 24576, 1536), dense(128, 24576, 1408), dense(64, 7168, 2048),
                            dense(1, 4096, 7168), dense(64, 4096, 7168), dense(1, 2112, 7168), dense(64, 2112, 7168),
                            dense(128, 4096, 7168)}) {
    const auto c = fh::select_config(shape, 132);
    EXPECT_TRUE(c.b_pairs) << shape.m << "x" << shape.n << "x" << shape.k << ": " << c.describe();
  }
  EXPECT_NE(fh::select_config(dense(128, 24576, 1536), 132).describe().find("B:pairs"), std::string::npos);
  // (The 64x32 decode tiles above, split-K at N = 2112 included, and 128x4096x7168's 64x64.) Tensor-bound calls
  // (384x7168x16384: one wave, 700 FLOPs per byte; M = 4096), 128x32 tiles (M = 128 at N = 2112, M = 112 at N = 4096
  // and K = 16384), grouped GEMMs: one stage per wait.
  for (const auto& shape : {dense(384, 7168, 16384), dense(4096, 24576, 1536), dense(4096, 2112, 7168),
                            dense(4096, 32768, 512), dense(4096, 7168, 16384), dense(128, 2112, 7168),
                            dense(112, 4096, 16384)}) {
    const auto c = fh::select_config(shape, 132);
    EXPECT_FALSE(c.b_pairs) << shape.m << "x" << shape.n << "x" << shape.k << ": " << c.describe();
  }
  const Problem p = masked(1, 256, 7168, 2048);
  EXPECT_FALSE(fh::select_config(p, 132).b_pairs);
  // Every pick with pairs is one the kernel allows (its kBPairs: BLOCK_M <= 128 and either BLOCK_N >= 64 without
  // split-K or 64x32 tiles).
  for (int64_t m : {1, 64, 65, 128, 256, 384, 1000}) {
    for (int64_t n : {576, 2112, 4096, 7168, 24576, 32768}) {
      for (int64_t k : {512, 1408, 1536, 2048, 7168}) {
        const auto c = fh::select_config(dense(m, n, k), 132);
        if (!c.b_pairs) continue;
        EXPECT_LE(c.block_m, 128) << c.describe();
        if (c.block_m == 64 && c.block_n == 32) continue;
        EXPECT_GE(c.block_n, 64) << c.describe();
        EXPECT_EQ(c.split_k, 1) << c.describe();
      }
    }
  }
}

// K-major SA by TMA boxes only where it measured faster (many rows, KB >= 32 and a multiple of 4); MN-major SA is
// always read by TMA; the rest gathered. The smem footprint follows the mode.
TEST(Heuristics, KMajorScalesByTmaOnlyWhereMeasuredFaster) {
  namespace dev = finegemm::device;
  auto mode = [](int64_t m, int64_t k, bool k_major) {
    Problem p = dense(m, 7168, k);
    p.sa_k_major = k_major;
    return fh::sa_mode_for(p);
  };
  EXPECT_EQ(mode(4096, 7168, false), dev::kSaMnMajor);
  EXPECT_EQ(mode(64, 576, false), dev::kSaMnMajor);
  EXPECT_EQ(mode(4096, 7168, true), dev::kSaKMajorTma);    // KB 56
  EXPECT_EQ(mode(1024, 16384, true), dev::kSaKMajorTma);   // KB 128
  EXPECT_EQ(mode(4096, 2048, true), dev::kSaKMajorGather);  // KB 16
  EXPECT_EQ(mode(4096, 1536, true), dev::kSaKMajorGather);  // KB 12
  EXPECT_EQ(mode(128, 7168, true), dev::kSaKMajorGather);   // small M
  EXPECT_EQ(mode(4096, 4224, true), dev::kSaKMajorGather);  // KB 33, not a multiple of 4
  Problem p = dense(4096, 7168, 7168);
  p.sa_k_major = true;
  const auto c = fh::select_config(p, 132);
  EXPECT_EQ(c.sa_mode, dev::kSaKMajorTma);
  EXPECT_EQ(uint32_t(c.smem_bytes), dev::gemm_smem_launch_bytes(uint32_t(c.block_m), uint32_t(c.block_n),
                                                                uint32_t(c.num_stages), 7168, 1, dev::kSaKMajorTma));
  EXPECT_NE(c.kernel_function().find(", 2u, 1u, false>"), std::string::npos) << c.kernel_function();
  EXPECT_NE(c.describe().find("sa=k "), std::string::npos) << c.describe();
}

// SA of dense decode calls is loaded once per CTA where that measured faster: MN-major of at most 16 rows from 32 K
// blocks (up to 256) in 64-row tiles, split-K included (1-4 rows and 5-16 rows in modes of their own); K-major of at
// most 16 rows from 8 K blocks (a multiple of 4), split-K included. The smem footprint and the kernel follow the mode.
TEST(Heuristics, ScalesOfDecodeRowsLoadedOnceWhereMeasuredFaster) {
  namespace dev = finegemm::device;
  auto mode = [](int64_t m, int64_t k, bool k_major = false, GemmKind kind = GemmKind::kNormal) {
    Problem p = dense(m, 4096, k);
    p.kind = kind;
    p.sa_k_major = k_major;
    return fh::sa_mode_for(p);
  };
  for (int64_t m = 1; m <= 4; ++m) EXPECT_EQ(mode(m, 7168), dev::kSaMnMajorOnce) << m;
  for (int64_t m = 5; m <= 16; ++m) EXPECT_EQ(mode(m, 7168), dev::kSaMnMajorOnce16) << m;
  EXPECT_EQ(mode(17, 7168), dev::kSaMnMajor);
  EXPECT_EQ(mode(8, 16384), dev::kSaMnMajorOnce16);  // KB 128
  EXPECT_EQ(mode(8, 3968), dev::kSaMnMajor);         // KB 31
  EXPECT_EQ(mode(16, 32768), dev::kSaMnMajorOnce16);  // KB 256
  EXPECT_EQ(mode(16, 32896), dev::kSaMnMajor);        // KB 257
  EXPECT_EQ(mode(8, 7168, false, GemmKind::kGroupedMasked), dev::kSaMnMajor);
  EXPECT_EQ(mode(2, 16384), dev::kSaMnMajorOnce);  // KB 128
  EXPECT_EQ(mode(2, 4096), dev::kSaMnMajorOnce);   // KB 32
  EXPECT_EQ(mode(2, 3968), dev::kSaMnMajor);       // KB 31
  EXPECT_EQ(mode(2, 2048), dev::kSaMnMajor);       // KB 16
  EXPECT_EQ(mode(2, 32768), dev::kSaMnMajorOnce);  // KB 256: one box
  EXPECT_EQ(mode(2, 32896), dev::kSaMnMajor);      // KB 257
  EXPECT_EQ(mode(2, 7168, true), dev::kSaKMajorOnce);     // K-major: a box row of 56 K blocks
  EXPECT_EQ(mode(2, 4224, true), dev::kSaKMajorGather);   // KB 33: not a multiple of 4 (16 bytes)
  EXPECT_EQ(mode(16, 7168, true), dev::kSaKMajorOnce);    // K-major: up to 16 rows
  EXPECT_EQ(mode(17, 7168, true), dev::kSaKMajorGather);
  EXPECT_EQ(mode(2, 1024, true), dev::kSaKMajorOnce);     // K-major: from 8 K blocks
  EXPECT_EQ(mode(2, 512, true), dev::kSaKMajorGather);    // KB 4
  EXPECT_EQ(mode(2, 7168, false, GemmKind::kGroupedMasked), dev::kSaMnMajor);
  Problem k_major = dense(2, 4096, 7168);
  k_major.sa_k_major = true;
  EXPECT_EQ(fh::select_config(k_major, 132).sa_mode, dev::kSaKMajorOnce);
  fh::ConfigConstraints per_stage;
  per_stage.sa_once = 0;
  EXPECT_EQ(fh::select_config(k_major, 132, per_stage).sa_mode, dev::kSaKMajorGather);
  EXPECT_EQ(fh::parse_constraints("saonce=0").sa_once, 0);

  const auto c = fh::select_config(dense(1, 4096, 7168), 132);
  EXPECT_EQ(c.sa_mode, dev::kSaMnMajorOnce);
  EXPECT_EQ(c.block_m, 64);
  EXPECT_EQ(c.split_k, 1);
  EXPECT_EQ(uint32_t(c.smem_bytes), dev::gemm_smem_launch_bytes(64, uint32_t(c.block_n), uint32_t(c.num_stages), 7168,
                                                                1, dev::kSaMnMajorOnce));
  EXPECT_LT(dev::gemm_smem_launch_bytes(64, 32, 18, 7168, 1, dev::kSaMnMajorOnce),
            dev::gemm_smem_launch_bytes(64, 32, 18, 7168, 1, dev::kSaMnMajor));  // 56 K blocks of 16 bytes, not 18x256
  EXPECT_NE(c.kernel_function().find(", 3u, 1u, false>"), std::string::npos) << c.kernel_function();
  EXPECT_NE(c.describe().find("sa=mn-once "), std::string::npos) << c.describe();
  const auto c8 = fh::select_config(dense(8, 4096, 7168), 132);
  EXPECT_EQ(c8.sa_mode, dev::kSaMnMajorOnce16);
  EXPECT_EQ(c8.block_m, 64);
  EXPECT_EQ(uint32_t(c8.smem_bytes), dev::gemm_smem_launch_bytes(64, uint32_t(c8.block_n), uint32_t(c8.num_stages),
                                                                 7168, 1, dev::kSaMnMajorOnce16));
  EXPECT_EQ(dev::gemm_sa_once_bytes(dev::kSaMnMajorOnce16, 7168), 56u * 64u);  // 56 K blocks of 16 floats
  EXPECT_NE(c8.kernel_function().find(", 5u, 1u, false>"), std::string::npos) << c8.kernel_function();
  EXPECT_NE(c8.describe().find("sa=mn-once16 "), std::string::npos) << c8.describe();
  EXPECT_EQ(fh::select_config(dense(8, 4096, 7168), 132, per_stage).sa_mode, dev::kSaMnMajor);
  // Split-K tiles (N = 2112) load SA once too, MN-major and K-major.
  EXPECT_EQ(fh::select_config(dense(12, 2112, 7168), 132).sa_mode, dev::kSaMnMajorOnce16);
  const auto s = fh::select_config(dense(2, 2112, 7168), 132);
  EXPECT_EQ(s.split_k, 2);
  EXPECT_EQ(s.sa_mode, dev::kSaMnMajorOnce);
  Problem split_k_major = dense(2, 2112, 7168);
  split_k_major.sa_k_major = true;
  const auto sk = fh::select_config(split_k_major, 132);
  EXPECT_EQ(sk.split_k, 2);
  EXPECT_EQ(sk.sa_mode, dev::kSaKMajorOnce);
}

TEST(Heuristics, DenseGridIsTheFewestCtasForTheWaves) {
  // 4096x4096x7168: 512 tiles of 256x128 run in 4 waves on 132 SMs; 128 CTAs run them in 4 as well (as DeepGEMM
  // sizes its grid). Grouped layouts keep every SM.
  const auto c = fh::select_config(dense(4096, 4096, 7168), 132);
  EXPECT_EQ(c.num_tiles, 512);
  EXPECT_EQ(c.num_waves, 4);
  EXPECT_EQ(c.grid, 128) << c.describe();
  for (int64_t m : {1, 64, 128, 4096})
    for (int64_t n : {576, 2112, 7168, 24576})
      for (int64_t k : {512, 7168}) {
        const auto x = fh::select_config(dense(m, n, k), 132);
        const int64_t per_round = x.grid / x.split_k;
        EXPECT_EQ((x.num_tiles + per_round - 1) / per_round, x.num_waves) << x.describe();  // no wave added
        const int64_t fewer = (x.grid - x.cluster_size()) / x.split_k;  // one cluster (or CTA) less
        if (fewer > 0) EXPECT_GT((x.num_tiles + fewer - 1) / fewer, x.num_waves) << x.describe();  // the fewest
        EXPECT_EQ(x.grid % x.cluster_size(), 0) << x.describe();
      }
}

TEST(Heuristics, DenseWideTailWhereItSavesARound) {
  // 4160x7168x16384: 16 full row blocks of 256 and a 64-row last one. As full 256-row tiles that was 17 x 56 = 952
  // tiles, 8 waves on 132 SMs (1 more than M=4096 in 7 waves); as wide tiles the last block is 28 tiles: 924, 7 waves.
  const auto c = fh::select_config(dense(4160, 7168, 16384), 132);
  EXPECT_EQ(c.block_m, 256);
  EXPECT_EQ(c.block_n, 128);
  EXPECT_TRUE(c.wide_tail);
  EXPECT_EQ(c.num_tiles, 16 * 56 + 28);
  EXPECT_EQ(c.num_waves, 7) << c.describe();
  EXPECT_NE(c.kernel_function().find(", 0u, 1u, true>"), std::string::npos) << c.kernel_function();
  EXPECT_NE(c.describe().find("wide-tail"), std::string::npos) << c.describe();
  // No round saved (8300x7168x2048: 14 rounds either way), K below 2048 (4160x24576x1536 keeps 128x192 tiles), M a
  // multiple of 256, or K-major SA gathered: the plain kernel.
  EXPECT_FALSE(fh::select_config(dense(8300, 7168, 2048), 132).wide_tail);
  const auto k1536 = fh::select_config(dense(4160, 24576, 1536), 132);
  EXPECT_FALSE(k1536.wide_tail);
  EXPECT_EQ(k1536.block_n, 192) << k1536.describe();
  EXPECT_FALSE(fh::select_config(dense(4096, 7168, 16384), 132).wide_tail);
  Problem gathered = dense(4160, 7168, 2048);  // K-major SA with 16 K blocks: gathered
  gathered.sa_k_major = true;
  EXPECT_FALSE(fh::select_config(gathered, 132).wide_tail);
  // The count is the device scheduler's (checked against its walk in test_scheduler.cpp), and a wide tail always
  // saves a round over full 256-row tiles.
  for (int64_t m : {257, 300, 384, 385, 801, 1100, 2049, 4097, 4224, 4225, 6000, 6200})
    for (int64_t n : {1000, 1408, 4096, 7168})
      for (int64_t k : {2048, 7168}) {
        const auto x = fh::select_config(dense(m, n, k), 132);
        const int64_t n_blocks = (n + x.block_n - 1) / x.block_n;
        EXPECT_EQ(x.num_tiles, finegemm::device::gemm_dense_tiles(m, n_blocks, uint32_t(x.block_m), x.wide_tail))
            << x.describe();
        if (x.wide_tail) {
          const int64_t full = finegemm::device::gemm_dense_tiles(m, n_blocks, uint32_t(x.block_m), false);
          EXPECT_LT(x.num_waves, (full + 131) / 132) << x.describe();
        }
      }
}

// FINEGEMM_FORCE_CONFIG: parsed once (by the library, at start), strictly, into constraints that the heuristic applies
// as a plain argument; every pick obeys them, and a shape they rule out gets a message that names them.
TEST(Heuristics, ConstraintsParseStrictlyAndRestrictThePick) {
  const fh::ConfigConstraints none = fh::parse_constraints("");
  EXPECT_TRUE(none.empty());
  const fh::ConfigConstraints c =
      fh::parse_constraints("bm=128,bn=192,stages=4,l2b=first,l2d=normal,bpairs=0,cahead=0");
  EXPECT_EQ(c.block_m, 128);
  EXPECT_EQ(c.block_n, 192);
  EXPECT_EQ(c.stages, 4);
  EXPECT_EQ(c.b_evict_first, 1);
  EXPECT_EQ(c.d_evict_first, 0);
  EXPECT_EQ(c.b_pairs, 0);
  EXPECT_EQ(c.c_ahead, 0);
  const auto pick = fh::select_config(dense(4096, 7168, 7168), 132, c);
  EXPECT_EQ(pick.block_m, 128);
  EXPECT_EQ(pick.block_n, 192);
  EXPECT_EQ(pick.num_stages, 4);
  EXPECT_TRUE(pick.b_evict_first);
  EXPECT_FALSE(pick.d_evict_first);
  EXPECT_EQ(fh::select_config(dense(64, 1536, 7168), 132, fh::parse_constraints("split=1")).split_k, 1);
  EXPECT_EQ(fh::select_config(dense(64, 2112, 7168), 132, fh::parse_constraints("split=2")).split_k, 2);
  // The same problem without constraints is unaffected: the heuristic reads nothing but its arguments.
  EXPECT_EQ(fh::select_config(dense(4096, 7168, 7168), 132).block_m, 256);
  for (const char* bad : {"bm", "bm=", "bm=abc", "bm=-1", "bm=12x", "tile=3", "mc=a", "cluster=2", "l2b=last",
                          "bpairs=2", "cahead=2", "cahead=", "bn=128,,"}) {
    try {
      fh::parse_constraints(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const finegemm::Error& e) {
      EXPECT_NE(std::string(e.what()).find("FINEGEMM_FORCE_CONFIG"), std::string::npos) << e.what();
    }
  }
  try {
    fh::select_config(dense(64, 2112, 7168), 132, fh::parse_constraints("bm=256,bn=96"));
    ADD_FAILURE() << "no 256x96 kernel exists";
  } catch (const finegemm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("with FINEGEMM_FORCE_CONFIG=bm=256,bn=96"), std::string::npos) << e.what();
  }
}

// The weight-gradient GEMM (gemm_fp8_fp8_nt with 1x128 scales of B, fp32 D = C + A x B^T): every pick within the
// filters that 1x128 scales and accumulation add, over awkward and DeepSeek-V3 shapes, both SA layouts, and C apart
// from D (C's tile loaded, no split-K) or C being D (D reduced into by TMA).
TEST(Heuristics, WgradPicksNoBlock256AndFitSharedMemory) {
  namespace fd = finegemm::device;
  for (bool c_is_d : {false, true})
    for (bool sa_k_major : {false, true})
      for (int64_t m : {1, 7, 65, 129, 300, 576, 4096, 32768})
        for (int64_t n : {8, 24, 136, 264, 576, 4096, 7168})
          for (int64_t k : {16, 112, 576, 640, 1536, 7168, 16384}) {
            Problem p = dense(m, n, k);
            p.sa_k_major = sa_k_major;
            p.sb_per_row = true;
            p.d_dtype = finegemm::DType::kFloat32;
            p.accumulate = true;
            p.c_is_d = c_is_d;
            const auto c = fh::select_config(p, 132);
            SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k << " sa_k_major=" << sa_k_major
                                              << " c_is_d=" << c_is_d << ": " << c.describe());
            if (!c_is_d) EXPECT_EQ(c.split_k, 1) << "C's tile is loaded for the CTA that stores the tile only";
            EXPECT_NE(c.block_m, 256) << "no 256-row tiles with 1x128 scales of B";
            EXPECT_LE(c.block_n, c.block_m == 64 ? 128 : fd::gemm_d_transposed(c.output) ? 176 : 160)
                << "the columns' scales take registers";
            EXPECT_EQ(c.sb_mode, fd::kSbRowMnMajor);
            // C loaded a tile ahead only at short K, where C's and D's bytes outweigh the math (N x 8 bytes a row
            // against 2 N K FLOPs: K <= 512 or so on 132 SMs).
            if (c.output == fd::kOutF32AddCAhead) {
              EXPECT_LE(k, 640);
              EXPECT_GE(c.num_stages, 4) << "two fp32 tiles leave room for fewer stages; at least 4";
              EXPECT_FALSE(c.d_evict_first) << "D's lines overwrite C's, read just before";
            } else if (c.output == fd::kOutF32AddToDT) {
              EXPECT_TRUE(fh::may_transpose_d(p)) << "D^T's tiles: MN-major SA, C = D, N % 128 == 0, M % 8 == 0";
              EXPECT_EQ(c.n, m) << "the kernel's N is the call's M";
              EXPECT_EQ(c.block_m, 128);
              EXPECT_GE(c.block_n, 128);
            } else {
              EXPECT_EQ(c.output, c_is_d ? fd::kOutF32AddToD : fd::kOutF32AddC);
            }
            EXPECT_FALSE(c.wide_tail);
            EXPECT_EQ(c.d_prefetch_lead, fd::gemm_reduces_into_d(c.output) ? 1 : 0)
                << "dense reductions into D prefetch D's tile into the L2 with the tile's last K block";
            EXPECT_EQ(c.describe().find(" D:L2-prefetch") != std::string::npos, c.d_prefetch_lead == 1);
            EXPECT_LE(c.smem_bytes, 232448);
            EXPECT_EQ(uint32_t(c.smem_bytes),
                      fd::gemm_smem_launch_bytes(uint32_t(c.block_m), uint32_t(c.block_n), uint32_t(c.num_stages),
                                                 uint32_t(k), uint32_t(c.split_k), c.sa_mode, c.sb_mode, c.output));
            EXPECT_GE(c.num_stages, 3);
            EXPECT_LE(c.grid, 132);
            EXPECT_NE(c.describe().find(c.output == fd::kOutF32AddCAhead ? " sb=1x128 out=fp32,C-ahead"
                                        : c_is_d                         ? " sb=1x128 out=fp32,+=D"
                                                                         : " sb=1x128 out=fp32,C"),
                      std::string::npos);
          }
  // Every candidate the filters leave open obeys the same rules, each rejected one says why.
  Problem p = dense(64, 1536, 7168);  // a shape whose forward pick splits K
  p.sb_per_row = true;
  p.d_dtype = finegemm::DType::kFloat32;
  EXPECT_EQ(fh::select_config(dense(64, 1536, 7168), 132).split_k, 2) << "the premise: the forward GEMM splits K";
  p.accumulate = true;
  p.c_is_d = false;  // C apart from D: its tile is loaded by the CTA that stores the tile
  int open = 0;
  for (const auto& cand : fh::enumerate_candidates(p, 132)) {
    if (!cand.rejected.empty()) continue;
    ++open;
    EXPECT_EQ(cand.config.split_k, 1) << cand.config.describe();
    EXPECT_NE(cand.config.block_m, 256) << cand.config.describe();
  }
  EXPECT_GT(open, 0);
  // Without C (fp32 D, 1x128 SB) split-K stays open.
  p.accumulate = false;
  bool split_open = false;
  for (const auto& cand : fh::enumerate_candidates(p, 132))
    split_open |= cand.rejected.empty() && cand.config.split_k > 1;
  EXPECT_TRUE(split_open);
  // Nor does C being D close it: the tile is reduced into D, which holds C already.
  p.accumulate = true;
  p.c_is_d = true;
  split_open = false;
  for (const auto& cand : fh::enumerate_candidates(p, 132))
    split_open |= cand.rejected.empty() && cand.config.split_k > 1;
  EXPECT_TRUE(split_open);
}

// With 1x128 scales on both operands a K block's promotion scales each column by its own factor, and wider tiles in
// fewer rounds pay: on D's own tiles, DeepSeek-V3's 4096x4096x7168 and 7168x4096x2048 take 128x160 tiles (7 and 12
// rounds) over 128x128 (8 and 14), as measured on an H200 (the heuristic takes D^T's tiles there: the next test).
TEST(Heuristics, WgradTakesWideTilesWhereTheySaveRounds) {
  auto wgrad = [](int64_t m, int64_t n, int64_t k) {
    Problem p = dense(m, n, k);
    p.sb_per_row = true;
    p.d_dtype = finegemm::DType::kFloat32;
    p.accumulate = p.c_is_d = true;
    return fh::select_config(p, 132, fh::parse_constraints("dt=0"));
  };
  const auto a = wgrad(4096, 4096, 7168);
  EXPECT_EQ(a.block_m, 128);
  EXPECT_EQ(a.block_n, 160) << a.describe();
  EXPECT_EQ(a.num_waves, 7);
  const auto b = wgrad(7168, 4096, 2048);
  EXPECT_EQ(b.block_n, 160) << b.describe();
  EXPECT_EQ(b.num_waves, 12);
  // The steady FFMA pass: with the columns' own scales only the 128x160 tiles gain from it.
  EXPECT_TRUE(fh::takes_steady_ffma_pass(a));
  EXPECT_FALSE(fh::takes_steady_ffma_pass(wgrad(2112, 4096, 7168)));  // 128x144
  EXPECT_FALSE(fh::takes_steady_ffma_pass(wgrad(32768, 4096, 512)));
  // The forward GEMM's picks (one scale per 128x128 block of B) are not moved: 4096x4096x7168 stays 256x128.
  EXPECT_EQ(fh::select_config(dense(4096, 4096, 7168), 132).block_m, 256);
}

// Weight gradients run on D^T's tiles (kOutF32AddToDT: the kernel's M, N and operands the call's N, M and B, A) where
// those tiles fit the SMs' rounds better, as the time model counts them (with the cost of their transposed reductions
// where D outgrows the L2): DeepSeek-V3's 576x4096x7168 (one round of 128 tiles of 128x144), 2112x4096x7168 (3 rounds
// of 128x176, a width only D^T's tiles take), 7168x4096x16384 and 7168x4096x2048 (10 rounds of 128x176 against 12 of
// 128x160) and 4096x4096x7168 (6 against 7); not 24576x4096x1536 (34 rounds against 38 of 128x160, less than the
// reductions cost), nor the memory-bound K = 512 (C ahead). Never where the kernel could not: K-major SA, C apart from
// D, N not a multiple of 128, M not a multiple of 8.
TEST(Heuristics, WgradRunsOnTheTilesOfDTransposedWhereTheyFitTheRounds) {
  namespace fd = finegemm::device;
  auto wgrad = [](int64_t m, int64_t n, int64_t k) {
    Problem p = dense(m, n, k);
    p.sb_per_row = true;
    p.d_dtype = finegemm::DType::kFloat32;
    p.accumulate = p.c_is_d = true;
    return p;
  };
  const auto dt = [](const fh::KernelConfig& c) { return fd::gemm_d_transposed(c.output); };
  const auto small = fh::select_config(wgrad(576, 4096, 7168), 132);
  EXPECT_TRUE(dt(small)) << small.describe();
  EXPECT_EQ(small.n, 576);
  EXPECT_EQ(small.block_n, 144);
  EXPECT_EQ(small.num_tiles, 128);
  EXPECT_EQ(small.grid, 128);
  EXPECT_EQ(fh::kernel_problem(wgrad(576, 4096, 7168), small).m, 4096);
  EXPECT_EQ(fh::kernel_problem(wgrad(576, 4096, 7168), small).n, 576);
  const auto mid = fh::select_config(wgrad(2112, 4096, 7168), 132);
  EXPECT_TRUE(dt(mid)) << mid.describe();
  EXPECT_EQ(mid.block_n, 176) << "2112 = 12 x 176: 384 tiles in 3 rounds (128x144: 480 in 4)";
  EXPECT_EQ(mid.num_tiles, 384);
  EXPECT_EQ(mid.d_prefetch_lead, 1);
  // 176 columns only on D^T's tiles: D's own stop at 160.
  EXPECT_LE(fh::select_config(wgrad(2112, 4096, 7168), 132, fh::parse_constraints("dt=0")).block_n, 160);
  EXPECT_THROW(fh::select_config(wgrad(2112, 4096, 7168), 132, fh::parse_constraints("dt=0,bn=176")),
               finegemm::Error);
  using Case = std::tuple<int64_t, int64_t, int64_t>;  // M, K, rounds (N = 4096)
  for (auto [m, k, waves] : {Case{7168, 16384, 10}, Case{7168, 2048, 10}, Case{4096, 7168, 6}}) {
    const auto c = fh::select_config(wgrad(m, 4096, k), 132);
    EXPECT_TRUE(dt(c)) << m << "x4096x" << k << ": " << c.describe();
    EXPECT_EQ(c.block_n, 176) << m << "x4096x" << k;
    EXPECT_EQ(c.num_waves, waves) << m << "x4096x" << k;
  }
  for (auto [m, k] : {std::pair<int64_t, int64_t>{24576, 1536}, {32768, 512}})
    EXPECT_FALSE(dt(fh::select_config(wgrad(m, 4096, k), 132))) << m << "x4096x" << k;
  // Where D outgrows the L2, a D^T tile is modeled longer than the same tile on D's own grid: at equal rounds (a
  // square call, 128x160 forced either way) D's own tiles win.
  const auto square = [&](const char* force) {
    return fh::select_config(wgrad(4096, 4096, 7168), 132, fh::parse_constraints(force));
  };
  EXPECT_GT(square("dt=1,bn=160").estimated_us, square("dt=0,bn=160").estimated_us);
  // Where the kernel could not run on D^T's tiles, neither the heuristic nor a forced dt=1 takes them.
  Problem k_major = wgrad(576, 4096, 7168);
  k_major.sa_k_major = true;
  Problem c_apart = wgrad(576, 4096, 7168);
  c_apart.c_is_d = false;
  for (const Problem& p : {k_major, c_apart, wgrad(576, 4160, 7168), wgrad(580, 4096, 7168)}) {
    EXPECT_FALSE(fh::may_transpose_d(p));
    EXPECT_FALSE(dt(fh::select_config(p, 132))) << p.m << "x" << p.n;
    EXPECT_THROW(fh::select_config(p, 132, fh::parse_constraints("dt=1")), finegemm::Error);
  }
  // bf16 D without C (1x128 scales of both operands): the same grids, each tile stored into D transposed.
  auto bf16 = [&](int64_t m, int64_t n, int64_t k) {
    Problem p = wgrad(m, n, k);
    p.d_dtype = finegemm::DType::kBFloat16;
    p.accumulate = p.c_is_d = false;
    return p;
  };
  for (auto [m, k, block_n] : {Case{576, 7168, 144}, Case{2112, 7168, 176}, Case{4096, 7168, 176}}) {
    const auto c = fh::select_config(bf16(m, 4096, k), 132);
    EXPECT_EQ(c.output, fd::kOutBf16DT) << m << "x4096x" << k << ": " << c.describe();
    EXPECT_EQ(c.block_n, block_n) << m << "x4096x" << k;
    EXPECT_EQ(c.d_prefetch_lead, 0) << "nothing to reduce into";
  }
  EXPECT_FALSE(dt(fh::select_config(bf16(24576, 4096, 1536), 132)));
  Problem bf16_k_major = bf16(576, 4096, 7168);
  bf16_k_major.sa_k_major = true;
  EXPECT_FALSE(fh::may_transpose_d(bf16_k_major));
  Problem bf16_block_sb = bf16(576, 4096, 7168);
  bf16_block_sb.sb_per_row = false;  // the forward GEMM's 128x128 blocks of B
  EXPECT_FALSE(fh::may_transpose_d(bf16_block_sb));
  // Forced either way (FINEGEMM_FORCE_CONFIG=dt=...), for measurements.
  EXPECT_FALSE(dt(fh::select_config(wgrad(4096, 4096, 7168), 132, fh::parse_constraints("dt=0"))));
  EXPECT_FALSE(dt(fh::select_config(wgrad(576, 4096, 7168), 132, fh::parse_constraints("dt=0"))));
  EXPECT_THROW(fh::parse_constraints("dt=2"), finegemm::Error);
}

// C loaded a tile ahead into two shared tiles (kOutF32AddCAhead) where C's and D's bytes outweigh the math: the
// memory-bound weight gradient of DeepSeek-V3 (K = 512) takes it, C being D or not, with 128x96 tiles and 4 stages and
// no evict-first hint on D; the longer-K ones keep D reduced into by TMA (or C's tile loaded once per tile).
TEST(Heuristics, WgradLoadsCAheadWhereCAndDOutweighTheMath) {
  namespace fd = finegemm::device;
  auto wgrad = [](int64_t m, int64_t n, int64_t k, bool c_is_d) {
    Problem p = dense(m, n, k);
    p.sb_per_row = true;
    p.d_dtype = finegemm::DType::kFloat32;
    p.accumulate = true;
    p.c_is_d = c_is_d;
    return p;
  };
  for (bool c_is_d : {true, false}) {
    const auto c = fh::select_config(wgrad(32768, 4096, 512, c_is_d), 132);
    EXPECT_EQ(c.output, fd::kOutF32AddCAhead) << c.describe();
    EXPECT_EQ(c.block_m, 128);
    EXPECT_EQ(c.block_n, 96);
    EXPECT_EQ(c.num_stages, 4);
    EXPECT_FALSE(c.d_evict_first);
    EXPECT_EQ(uint32_t(c.smem_bytes), fd::gemm_smem_launch_bytes(128, 96, 4, 512, 1, c.sa_mode, c.sb_mode, c.output));
    for (auto [m, k] : {std::pair<int64_t, int64_t>{24576, 1536}, {7168, 2048}, {4096, 7168}, {7168, 16384}}) {
      const auto longer = fh::select_config(wgrad(m, 4096, k, c_is_d), 132);
      if (c_is_d)
        EXPECT_TRUE(fd::gemm_reduces_into_d(longer.output)) << m << "x4096x" << k << ": " << longer.describe();
      else
        EXPECT_EQ(longer.output, fd::kOutF32AddC) << m << "x4096x" << k;
    }
  }
  // The GPU tests' cases of it (Gpu.WgradCAliasingDOrNot, Gpu.WgradDeterministicAcrossRuns); where C and D fit the
  // L2, not taken.
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{4100, 4096, 512}, {4100, 4104, 208}})
    for (bool c_is_d : {true, false})
      EXPECT_EQ(fh::select_config(wgrad(m, n, k, c_is_d), 132).output, fd::kOutF32AddCAhead)
          << m << "x" << n << "x" << k;
  EXPECT_TRUE(fd::gemm_reduces_into_d(fh::select_config(wgrad(576, 4096, 512, true), 132).output));
  // Forced either way (FINEGEMM_FORCE_CONFIG=cahead=...), for measurements.
  EXPECT_TRUE(fd::gemm_reduces_into_d(
      fh::select_config(wgrad(32768, 4096, 512, true), 132, fh::parse_constraints("cahead=0")).output));
  const auto forced = fh::select_config(wgrad(7168, 4096, 2048, true), 132, fh::parse_constraints("cahead=1"));
  EXPECT_EQ(forced.output, fd::kOutF32AddCAhead);
  EXPECT_GE(forced.num_stages, 4);
  // Two fp32 tiles and their barriers: the host's footprint is the kernel's.
  using AheadLayout = fd::GemmSmemLayout<128, 96, 4, 512, 1, fd::kSaMnMajor, fd::kSbRowMnMajor, fd::kOutF32AddCAhead>;
  EXPECT_EQ(fd::gemm_smem_launch_bytes(128, 96, 4, 512, 1, fd::kSaMnMajor, fd::kSbRowMnMajor, fd::kOutF32AddCAhead),
            AheadLayout::kLaunchBytes);
  EXPECT_EQ(AheadLayout::kDBytes, 2u * 128 * 96 * 4);
}

TEST(Heuristics, WgradFieldsAreForDenseGemmsOnly) {
  std::string reason;
  Problem p = masked(4, 256, 4096, 7168);
  p.sb_per_row = true;
  EXPECT_FALSE(finegemm::is_supported(p, &reason));
  EXPECT_NE(reason.find("for dense GEMMs"), std::string::npos) << reason;
  Problem q = dense(4096, 4096, 7168);
  q.accumulate = true;  // with a bf16 D
  EXPECT_FALSE(finegemm::is_supported(q, &reason));
  EXPECT_NE(reason.find("needs a float32 D"), std::string::npos) << reason;
  q.d_dtype = finegemm::DType::kFloat32;
  q.sb_per_row = true;
  EXPECT_TRUE(finegemm::is_supported(q, &reason)) << reason;
}

// The K-grouped kernel runs 128-row tiles only: M of at most 64 rows still gets one (no "M fits one warpgroup").
TEST(Heuristics, KGroupedRunsEveryMultipleOfEightRows) {
  for (int64_t m : {8, 64, 72, 4096}) {
    Problem q;
    q.kind = GemmKind::kGroupedK;
    q.num_groups = 4;
    q.m = m;
    q.n = 2048;
    q.k = 1024;
    q.sb_per_row = true;
    q.d_dtype = finegemm::DType::kFloat32;
    q.accumulate = true;
    q.c_is_d = true;
    const auto c = fh::select_config(q, 132);
    EXPECT_EQ(c.block_m, 128) << m;
    EXPECT_EQ(c.output, finegemm::device::kOutF32AddToD) << m;
    EXPECT_EQ(c.d_prefetch_lead, 1) << "D's tile is prefetched into the L2 before the reduction into it";
  }
}

// The K-grouped kernel never pairs B's stages (its kBPairs is false): no pick pairs them, even when forced, so the
// arguments the launch fills from the config (GemmArgs::b_pairs) hold 0 for it.
TEST(Heuristics, KGroupedNeverPairsBStages) {
  for (int64_t m : {8, 128, 4096}) {
    for (int64_t n : {256, 7168}) {
      Problem q;
      q.kind = GemmKind::kGroupedK;
      q.num_groups = 4;
      q.m = m;
      q.n = n;
      q.k = 1024;
      q.sb_per_row = true;
      q.d_dtype = finegemm::DType::kFloat32;
      q.accumulate = true;
      q.c_is_d = true;
      EXPECT_FALSE(fh::select_config(q, 132).b_pairs) << m << "x" << n;
      EXPECT_FALSE(fh::select_config(q, 132, fh::parse_constraints("bpairs=1")).b_pairs) << m << "x" << n;
    }
  }
}

TEST(Heuristics, QuantizersUnderPdlTakeAnSmPerCta) {
  // An H200: 228 KiB per SM, 1 KiB reserved per CTA; a kernel without static shared memory.
  const fh::SmSharedMemory h200{233472, 1024};
  const int bytes = fh::quantizer_spread_smem_bytes(12, true, 132, h200, 0);
  // One CTA fits an SM (as the kernels' limit allows: 227 KiB per CTA), two do not.
  EXPECT_LE(bytes + 1024, 232448);
  EXPECT_GT(2 * (bytes + 1024), 233472) << bytes;
  EXPECT_EQ(bytes % 16, 0);
  // With static shared memory of its own, correspondingly less.
  const int with_static = fh::quantizer_spread_smem_bytes(12, true, 132, h200, 4096);
  EXPECT_GT(2 * (with_static + 4096 + 1024), 233472) << with_static;
  EXPECT_LT(with_static, bytes);
  // Grids of at most a quarter of the SMs (128 tokens of K = 1536: 12 CTAs; of K = 2048: 16), and only under PDL:
  // larger grids would hold nearly every SM from the next GEMM, and without PDL the CTAs are placed on SMs the
  // kernel before has left.
  EXPECT_GT(fh::quantizer_spread_smem_bytes(33, true, 132, h200, 0), 0);
  EXPECT_GT(fh::quantizer_spread_smem_bytes(1, true, 132, h200, 0), 0);
  EXPECT_EQ(fh::quantizer_spread_smem_bytes(34, true, 132, h200, 0), 0);
  EXPECT_EQ(fh::quantizer_spread_smem_bytes(128, true, 132, h200, 0), 0);
  EXPECT_EQ(fh::quantizer_spread_smem_bytes(12, false, 132, h200, 0), 0);
  EXPECT_EQ(fh::quantizer_spread_smem_bytes(0, true, 132, h200, 0), 0);
}
