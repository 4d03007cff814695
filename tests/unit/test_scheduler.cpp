// The block scheduler's tile order: every tile exactly once, rasterized in bands, grouped kinds skip padding and masked
// rows. Runs the device scheduler's code on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "finegemm/device/scheduler.cuh"

namespace fd = finegemm::device;

namespace {

struct Visit {
  int cta, group, m_block, n_block, row_base, row_limit;
  bool check_rows;
  int first_row;
  bool wide;
  int compute_rows;
};

template <fd::GemmKind kKind, int BM, int BN, int NB, bool kWideTail = false, bool kClipLongTail = false,
          bool kOneRoundByRows = false>
std::vector<std::vector<Visit>> walk(int rows, int groups, const int32_t* layout, int num_ctas) {
  std::vector<std::vector<Visit>> per_cta(static_cast<size_t>(num_ctas));
  for (int cta = 0; cta < num_ctas; ++cta) {
    fd::TileScheduler<kKind, BM, BN, NB, kWideTail, fd::kDefaultRasterBand, kClipLongTail, kOneRoundByRows> s(
        rows, groups, layout, cta, num_ctas);
    fd::Tile t;
    while (s.next(t))
      per_cta[size_t(cta)].push_back({cta, t.group, t.m_block, t.n_block, t.row_base, t.row_limit, t.check_rows,
                                      t.first_row, t.wide, t.compute_rows});
  }
  return per_cta;
}

/// m_indices of experts with these row counts, each padded to a multiple of `alignment` rows with -1.
std::vector<int32_t> contiguous_layout(const std::vector<int>& counts, int alignment = 128) {
  std::vector<int32_t> m_indices;
  for (int e = 0; e < int(counts.size()); ++e) {
    const int padded = (counts[size_t(e)] + alignment - 1) / alignment * alignment;
    for (int r = 0; r < padded; ++r) m_indices.push_back(r < counts[size_t(e)] ? e : -1);
  }
  return m_indices;
}

/// 8 router-like expert sizes (0.5x..1.5x of 1000 rows), fixed by a seeded generator.
std::vector<int> router_counts(uint32_t seed) {
  std::vector<int> counts(8);
  for (int& c : counts) {
    seed = seed * 1664525u + 1013904223u;
    c = 500 + int(seed >> 8) % 1001;
  }
  return counts;
}

template <int BM, int BN, int NB, bool kWideTail = false, bool kClipLongTail = false, bool kOneRoundByRows = false>
void check_normal(int m, int num_ctas) {
  const auto visits =
      walk<fd::GemmKind::kNormal, BM, BN, NB, kWideTail, kClipLongTail, kOneRoundByRows>(m, 1, nullptr, num_ctas);
  std::map<std::pair<int, int>, int> seen;
  int num_tiles = 0;
  for (const auto& cta : visits)
    for (const auto& v : cta) {
      ++num_tiles;
      for (int n = v.n_block; n <= v.n_block + int(v.wide); ++n) ++seen[{v.m_block, n}];
    }
  const int m_blocks = (m + BM - 1) / BM;
  ASSERT_EQ(int(seen.size()), m_blocks * NB) << "m=" << m << " ctas=" << num_ctas;
  for (const auto& [tile, count] : seen) {
    ASSERT_EQ(count, 1) << "tile (" << tile.first << "," << tile.second << ") visited " << count << " times";
    ASSERT_LT(tile.first, m_blocks);
    ASSERT_LT(tile.second, NB);
  }
  // The heuristic's tile count is the walk's (gemm_dense_tiles).
  EXPECT_EQ(num_tiles, int(fd::gemm_dense_tiles(m, NB, BM, kWideTail))) << "m=" << m;
  const bool one_round = num_tiles <= num_ctas;
  // Each output row is written by exactly one tile per n-block, and with M >= BLOCK_M no tile reaches more than 3
  // rows past row M (the last row block moves up to a multiple of 4 rows; its rows before first_row belong to the
  // block before; a wide tail's 128 rows likewise), but a last block of more than BLOCK_M / 2 rows in the kernels that
  // keep it where it falls (kClipLongTail), and every last block but a wide tail's in one-round grids of the kernels
  // that walk those by rows (kOneRoundByRows, M at most the n-blocks' width), except a last block that lacks more than
  // 16 rows of BLOCK_M after one 128-row block or any number of 64-row ones.
  std::vector<int> written(size_t(m) * NB, 0);
  for (const auto& cta : visits)
    for (const auto& v : cta) {
      EXPECT_EQ(v.row_base % 4, 0);
      const bool last = m >= BM && v.m_block == m / BM && !v.wide;
      const bool by_rows = kOneRoundByRows && one_round && m <= NB * BN;
      const bool short_last = BM <= 128 && (m / BM == 1 || BM == 64) && m % BM < BM - 16;
      const bool kept = last && ((kClipLongTail && m % BM > BM / 2) || (by_rows && m % BM != 0 && !short_last));
      if (kept) {
        EXPECT_EQ(v.row_base, v.m_block * BM) << "m=" << m;
        EXPECT_EQ(v.first_row, 0) << "m=" << m;
      } else if (m >= BM) {
        EXPECT_LE(v.row_base + v.row_limit, m + 3) << "m=" << m << " m_block " << v.m_block;
      } else {
        EXPECT_EQ(v.row_base, 0);
      }
      EXPECT_GE(v.row_base, 0);
      EXPECT_EQ(v.compute_rows, std::min(v.row_limit, m - v.row_base)) << "m=" << m;
      for (int n = v.n_block; n <= v.n_block + int(v.wide); ++n)
        for (int r = v.row_base + v.first_row; r < std::min(m, v.row_base + v.row_limit); ++r)
          ++written[size_t(r) * NB + size_t(n)];
    }
  for (size_t i = 0; i < written.size(); ++i)
    ASSERT_EQ(written[i], 1) << "m=" << m << " row " << i / NB << " n_block " << i % NB;
}

}  // namespace

TEST(Scheduler, NormalEveryTileOnceAcrossShapesAndSmCounts) {
  for (int ctas : {1, 2, 7, 66, 78, 114, 132}) {
    for (int m : {1, 63, 64, 65, 100, 128, 129, 130, 131, 200, 1000, 4000, 4096, 4097}) {
      check_normal<64, 16, 132>(m, ctas);
      check_normal<256, 128, 16>(m, ctas);
      check_normal<256, 128, 16, true>(m, ctas);
      check_normal<128, 112, 64>(m, ctas);
      check_normal<128, 128, 33>(m, ctas);
      check_normal<128, 144, 29, false, true>(m, ctas);
      check_normal<128, 160, 26, false, true>(m, ctas);
      check_normal<64, 16, 132, false, false, true>(m, ctas);
      check_normal<256, 128, 16, false, false, true>(m, ctas);
      check_normal<256, 128, 16, true, false, true>(m, ctas);
      check_normal<128, 144, 29, false, false, true>(m, ctas);
      check_normal<128, 160, 26, false, false, true>(m, ctas);
    }
  }
}

TEST(Scheduler, ForwardGemmWalksOneRoundByRowsAndKeepsItsLastRowBlock) {
  // The forward kernels (128x128 SB blocks, bf16 D: gemm_dense_one_round_by_rows): a grid whose tiles fit one round of
  // the CTAs, with M at most N, is walked m-block fastest, so that the CTAs reading one B tile are neighbours in the
  // launch, and a last row block that M ends inside stays where it falls (but a short one after 64-row blocks or one
  // 128-row block, below); grids of more rounds keep the bands of n-blocks.
  static_assert(fd::gemm_dense_one_round_by_rows(false, fd::kSbBlock, fd::kOutBf16));
  static_assert(!fd::gemm_dense_one_round_by_rows(true, fd::kSbBlock, fd::kOutBf16));
  static_assert(!fd::gemm_dense_one_round_by_rows(false, fd::kSbRowMnMajor, fd::kOutBf16));
  static_assert(!fd::gemm_dense_one_round_by_rows(false, fd::kSbRowMnMajor, fd::kOutF32AddToD));
  static_assert(!fd::gemm_dense_one_round_by_rows(false, fd::kSbBlock, fd::kOutF32));
  static_assert(!fd::gemm_dense_one_round_by_rows(false, fd::kSbRowMnMajor, fd::kOutBf16DT));
  // 576x4096 on 128x160 tiles: 5 x 26 tiles over 130 CTAs, one round; CTA i takes m-block i % 5 of n-block i / 5.
  const auto one_round = walk<fd::GemmKind::kNormal, 128, 160, 26, false, false, true>(576, 1, nullptr, 130);
  for (int cta = 0; cta < 130; ++cta) {
    ASSERT_EQ(one_round[size_t(cta)].size(), 1u);
    const Visit& v = one_round[size_t(cta)][0];
    EXPECT_EQ(v.m_block, cta % 5);
    EXPECT_EQ(v.n_block, cta / 5);
    EXPECT_EQ(v.row_base, 128 * (cta % 5));
    EXPECT_EQ(v.first_row, 0);
    EXPECT_EQ(v.compute_rows, cta % 5 == 4 ? 64 : 128);
  }
  // The same tiles over 129 CTAs (two rounds): the bands of n-blocks, the last block moved up to end at row M.
  const auto two_rounds = walk<fd::GemmKind::kNormal, 128, 160, 26, false, false, true>(576, 1, nullptr, 129);
  const auto bands = walk<fd::GemmKind::kNormal, 128, 160, 26>(576, 1, nullptr, 129);
  for (int cta = 0; cta < 129; ++cta) {
    ASSERT_EQ(two_rounds[size_t(cta)].size(), bands[size_t(cta)].size());
    for (size_t i = 0; i < bands[size_t(cta)].size(); ++i) {
      const Visit& v = two_rounds[size_t(cta)][i];
      const Visit& w = bands[size_t(cta)][i];
      EXPECT_EQ(std::make_tuple(v.m_block, v.n_block, v.row_base, v.first_row, v.compute_rows),
                std::make_tuple(w.m_block, w.n_block, w.row_base, w.first_row, w.compute_rows));
    }
  }
  EXPECT_EQ(bands[16][0].m_block, 1);  // n-block 0 of the second row block, in the band of 16 n-blocks
  EXPECT_EQ(bands[64][0].row_base, 448);
  // A taller than B is wide keeps the bands in one round too: 4096x512 on 128x128 tiles, 32 x 4 tiles over 128 CTAs,
  // CTA i takes n-block i % 4 of m-block i / 4 (the CTAs that read one A tile are neighbours); 2100x512 (17 x 4 tiles
  // over 68 CTAs) moves its last block up.
  const auto tall = walk<fd::GemmKind::kNormal, 128, 128, 4, false, false, true>(4096, 1, nullptr, 128);
  for (int cta = 0; cta < 128; ++cta) {
    ASSERT_EQ(tall[size_t(cta)].size(), 1u);
    EXPECT_EQ(tall[size_t(cta)][0].n_block, cta % 4);
    EXPECT_EQ(tall[size_t(cta)][0].m_block, cta / 4);
  }
  const auto tall_tail = walk<fd::GemmKind::kNormal, 128, 128, 4, false, false, true>(2100, 1, nullptr, 68);
  EXPECT_EQ(tall_tail[64][0].m_block, 16);
  EXPECT_EQ(tall_tail[64][0].row_base, 2100 - 128);
  EXPECT_EQ(tall_tail[64][0].first_row, 16 * 128 - (2100 - 128));
  // M equal to the n-blocks' width still walks by rows: 512x512, 4 x 4 tiles over 16 CTAs.
  const auto square = walk<fd::GemmKind::kNormal, 128, 128, 4, false, false, true>(512, 1, nullptr, 16);
  EXPECT_EQ(square[1][0].m_block, 1);
  EXPECT_EQ(square[1][0].n_block, 0);
}

TEST(Scheduler, OneRoundByRowsMovesAShortLastRowBlockUp) {
  // Two row blocks, the second lacking more than 16 rows of BLOCK_M: it moves up to end at row M (136x4096x7168 on
  // 128x64 tiles: 31.5 -> 16.9 us on an H200), its rows before first_row the first block's; still walked by rows.
  for (int m : {129, 136, 160, 200, 223, 224, 232, 239}) {
    const auto v = walk<fd::GemmKind::kNormal, 128, 64, 64, false, false, true>(m, 1, nullptr, 128);
    for (int cta = 0; cta < 128; ++cta) {
      ASSERT_EQ(v[size_t(cta)].size(), 1u);
      const Visit& t = v[size_t(cta)][0];
      EXPECT_EQ(t.m_block, cta % 2);
      EXPECT_EQ(t.n_block, cta / 2);
      const int base = cta % 2 == 0 ? 0 : (m - 128 + 3) / 4 * 4;
      EXPECT_EQ(t.row_base, base) << "m=" << m;
      EXPECT_EQ(t.first_row, cta % 2 == 0 ? 0 : 128 - base) << "m=" << m;
      EXPECT_EQ(t.compute_rows, cta % 2 == 0 ? 128 : m - base) << "m=" << m;
    }
  }
  // 64-row tiles: 72x3072 on 64x48 (16.1 -> 11.7 us); 112 rows (48 of 64 in the second block) stay.
  const auto short64 = walk<fd::GemmKind::kNormal, 64, 48, 64, false, false, true>(72, 1, nullptr, 128);
  EXPECT_EQ(short64[1][0].row_base, 8);
  EXPECT_EQ(short64[1][0].first_row, 56);
  const auto long64 = walk<fd::GemmKind::kNormal, 64, 48, 64, false, false, true>(112, 1, nullptr, 128);
  EXPECT_EQ(long64[1][0].row_base, 64);
  EXPECT_EQ(long64[1][0].first_row, 0);
  // A short last of three or four 64-row blocks moves up too (136x2112x7168 on 64x48: 14.5 -> 11.5 us); one of 48
  // rows or more stays.
  // 3 x 44 tiles of 64x48 or 4 x 33 of 64x64 over 132 CTAs (one round): CTA blocks - 1 takes n-block 0's last block.
  const auto last_block = [](int m) {
    const int blocks = (m + 63) / 64;
    const auto v = blocks == 3 ? walk<fd::GemmKind::kNormal, 64, 48, 44, false, false, true>(m, 1, nullptr, 132)
                               : walk<fd::GemmKind::kNormal, 64, 64, 33, false, false, true>(m, 1, nullptr, 132);
    return v[size_t(blocks - 1)][0];
  };
  for (int m : {129, 136, 144, 160, 175, 193, 200, 208, 216, 239}) {
    const int blocks = (m + 63) / 64;
    const Visit t = last_block(m);
    ASSERT_EQ(t.m_block, blocks - 1);
    const int base = (m - 64 + 3) / 4 * 4;
    EXPECT_EQ(t.row_base, base) << "m=" << m;
    EXPECT_EQ(t.first_row, (blocks - 1) * 64 - base) << "m=" << m;
    EXPECT_EQ(t.compute_rows, m - base) << "m=" << m;
  }
  for (int m : {176, 180, 240, 250}) {
    const Visit t = last_block(m);
    EXPECT_EQ(t.row_base, ((m + 63) / 64 - 1) * 64) << "m=" << m;
    EXPECT_EQ(t.first_row, 0) << "m=" << m;
  }
  // A second block of 112 or more of 128 rows (240x7168x2048 on 128x112: 9.9 us kept, 10.2 moved up), and a third
  // block of 128 rows of any size, stay where they fall.
  for (int m : {240, 250}) {
    const auto long128 = walk<fd::GemmKind::kNormal, 128, 64, 64, false, false, true>(m, 1, nullptr, 128);
    EXPECT_EQ(long128[1][0].row_base, 128) << "m=" << m;
    EXPECT_EQ(long128[1][0].first_row, 0) << "m=" << m;
    EXPECT_EQ(long128[1][0].compute_rows, m - 128) << "m=" << m;
  }
  const auto rows256 = walk<fd::GemmKind::kNormal, 256, 128, 56, false, false, true>(385, 1, nullptr, 112);
  EXPECT_EQ(rows256[1][0].row_base, 256);  // 256-row tiles keep a short second block where it falls
  const auto third = walk<fd::GemmKind::kNormal, 128, 160, 26, false, false, true>(520, 1, nullptr, 130);
  EXPECT_EQ(third[4][0].m_block, 4);
  EXPECT_EQ(third[4][0].row_base, 512);
  EXPECT_EQ(third[4][0].first_row, 0);
}

TEST(Scheduler, WeightGradientKeepsALongLastRowBlockWhereItFalls) {
  // Dense kernels with 1x128 SB and fp32 output (gemm_dense_clips_long_tail): a last block of more than 64 of its 128
  // rows stays where it falls, so that no warpgroup's rows are shared with the block before; one of at most 64 rows
  // still moves up, its first warpgroup's rows then all the block before's.
  static_assert(fd::gemm_dense_clips_long_tail(false, fd::kSbRowMnMajor, fd::kOutF32AddToD));
  static_assert(fd::gemm_dense_clips_long_tail(false, fd::kSbRowMnMajor, fd::kOutF32));
  static_assert(!fd::gemm_dense_clips_long_tail(false, fd::kSbRowMnMajor, fd::kOutBf16));
  static_assert(!fd::gemm_dense_clips_long_tail(true, fd::kSbRowMnMajor, fd::kOutF32AddToD));
  static_assert(!fd::gemm_dense_clips_long_tail(false, fd::kSbBlock, fd::kOutBf16));
  const auto last_block = [](int m) {
    const auto visits = walk<fd::GemmKind::kNormal, 128, 144, 29, false, true>(m, 1, nullptr, 132);
    for (const auto& cta : visits)
      for (const auto& v : cta)
        if (v.m_block == (m - 1) / 128 && v.n_block == 0) return v;
    return Visit{};
  };
  const Visit kept = last_block(1000);  // 104 rows in the last block
  EXPECT_EQ(kept.row_base, 896);
  EXPECT_EQ(kept.first_row, 0);
  EXPECT_EQ(kept.compute_rows, 104);
  const Visit moved = last_block(2112);  // 64 rows
  EXPECT_EQ(moved.row_base, 1984);
  EXPECT_EQ(moved.first_row, 64);
  EXPECT_EQ(moved.compute_rows, 128);
}

TEST(Scheduler, DenseTailOfAtMostHalfATileRunsAsWideTiles) {
  // The wide-tail kernels (256x128 tiles), M > 256 with M mod 256 in 1..128: the last row block is 128 rows moved up
  // to end at row M, walked after the full tiles as one wide tile per pair of n-blocks (an odd n-block count leaves a
  // narrow last one). The round robin then deals equal work: no CTA takes more than ceil(tiles / CTAs) tiles, each at
  // most a full tile's.
  for (int ctas : {1, 7, 128, 132}) {
    for (int m : {257, 300, 384, 385, 511, 2049, 4097, 4100, 4160, 4224, 4225}) {
      check_normal<256, 128, 56, true>(m, ctas);
      check_normal<256, 128, 15, true>(m, ctas);
      const auto visits = walk<fd::GemmKind::kNormal, 256, 128, 56, true>(m, 1, nullptr, ctas);
      const int tail = m % 256;
      const bool wide_tail = tail > 0 && tail <= 128;
      const int tiles = (m / 256 + (wide_tail ? 0 : 1)) * 56 + (wide_tail ? 28 : 0);
      size_t most = 0;
      int wide = 0;
      for (const auto& cta : visits) {
        most = std::max(most, cta.size());
        for (const auto& v : cta) {
          wide += v.wide;
          if (v.wide) {
            EXPECT_EQ(v.n_block % 2, 0);
            EXPECT_EQ(v.row_base, (m - 128 + 3) / 4 * 4);
            EXPECT_LE(v.compute_rows, 128);  // one 128-row wave per n-block
          } else {
            EXPECT_EQ(v.row_limit, 256) << "m=" << m;  // a full tile (or the block moved up, 129..255 rows)
          }
        }
      }
      EXPECT_EQ(wide, wide_tail ? 28 : 0) << "m=" << m;
      EXPECT_EQ(int(most), (tiles + ctas - 1) / ctas) << "m=" << m << " ctas=" << ctas;
    }
  }
  // Unpaired last n-block: a narrow 128-row tile of one wave.
  const auto visits = walk<fd::GemmKind::kNormal, 256, 128, 15, true>(4160, 1, nullptr, 132);
  int narrow_tail = 0;
  for (const auto& cta : visits)
    for (const auto& v : cta)
      if (v.m_block == 16) {
        EXPECT_EQ(v.wide, v.n_block != 14);
        narrow_tail += !v.wide;
        EXPECT_EQ(v.compute_rows, 4160 - 4032);
        EXPECT_EQ(v.first_row, 4096 - 4032);
      }
  EXPECT_EQ(narrow_tail, 1);
  // Only 256x128 tiles without split-K and without gathered K-major SA have wide tails, of the dense, masked and psum
  // kinds.
  for (fd::GemmKind kind : {fd::GemmKind::kNormal, fd::GemmKind::kGroupedMasked, fd::GemmKind::kGroupedContiguousPsum}) {
    EXPECT_TRUE(fd::gemm_wide_tail(kind, 256, 128, 1, fd::kSaMnMajor));
    EXPECT_TRUE(fd::gemm_wide_tail(kind, 256, 128, 1, fd::kSaKMajorTma));
    EXPECT_FALSE(fd::gemm_wide_tail(kind, 256, 128, 1, fd::kSaKMajorGather));
    EXPECT_FALSE(fd::gemm_wide_tail(kind, 256, 128, 2, fd::kSaMnMajor));
    EXPECT_FALSE(fd::gemm_wide_tail(kind, 128, 128, 1, fd::kSaMnMajor));
    EXPECT_FALSE(fd::gemm_wide_tail(kind, 256, 112, 1, fd::kSaMnMajor));
  }
  EXPECT_FALSE(fd::gemm_wide_tail(fd::GemmKind::kGroupedContiguous, 256, 128, 1, fd::kSaMnMajor));  // wide halves
  EXPECT_FALSE(fd::gemm_wide_tail(fd::GemmKind::kGroupedK, 256, 128, 1, fd::kSaMnMajor));
}

TEST(Scheduler, RasterizationKeepsAWaveInABandOfN) {
  // With 132 CTAs over 32 x 56 tiles, the first wave must touch at most one band (16 n-blocks) of B.
  const auto visits = walk<fd::GemmKind::kNormal, 128, 128, 56>(4096, 1, nullptr, 132);
  std::set<int> n_blocks;
  for (const auto& cta : visits) n_blocks.insert(cta.front().n_block);
  EXPECT_LE(n_blocks.size(), size_t(fd::kDefaultRasterBand));
  EXPECT_EQ(fd::kDefaultRasterBand, 16);
}

TEST(Scheduler, ContiguousSkipsPaddingAndFlagsPartialBlocks) {
  // Experts of 100, 0, 300 and 128 rows, each padded to a multiple of 128.
  const std::vector<int32_t> m_indices = contiguous_layout({100, 0, 300, 128});
  const int rows = int(m_indices.size());  // 128 + 0 + 384 + 128 = 640
  const auto visits = walk<fd::GemmKind::kGroupedContiguous, 128, 64, 4>(rows, 4, m_indices.data(), 5);
  std::map<std::pair<int, int>, Visit> seen;
  for (const auto& cta : visits)
    for (const auto& v : cta) {
      EXPECT_TRUE(seen.emplace(std::make_pair(v.m_block, v.n_block), v).second);
      EXPECT_EQ(v.group, m_indices[size_t(v.row_base)]);
    }
  EXPECT_EQ(seen.size(), 5u * 4u);  // 5 m-blocks hold real rows, none is all padding
  EXPECT_TRUE(seen.at({0, 0}).check_rows);   // expert 0: 100 of 128 rows
  EXPECT_FALSE(seen.at({1, 0}).check_rows);  // expert 2, full block
  EXPECT_TRUE(seen.at({3, 0}).check_rows);   // expert 2's last block: 44 rows
  EXPECT_FALSE(seen.at({4, 0}).check_rows);
}

TEST(Scheduler, ContiguousWith256RowTilesCoversEachExpertRowOnce) {
  // Experts aligned to 128 rows, so a 256-row block may hold two experts: its second half then gets its own tile.
  // The last set: 8 experts of router-like sizes.
  for (const std::vector<int>& counts : {std::vector<int>{100, 0, 300, 128, 250}, std::vector<int>{256, 1, 129, 512},
                                         std::vector<int>{0, 0, 5}, router_counts(12345)}) {
    const std::vector<int32_t> m_indices = contiguous_layout(counts);
    const int rows = int(m_indices.size());
    for (int ctas : {1, 3, 132}) {
      const auto visits =
          walk<fd::GemmKind::kGroupedContiguous, 256, 64, 3>(rows, int(counts.size()), m_indices.data(), ctas);
      std::vector<int> covered(size_t(rows) * 3, 0);  // (row, n_block): times written by a tile of the row's expert
      for (const auto& cta : visits)
        for (const auto& v : cta) {
          EXPECT_EQ(v.group, m_indices[size_t(v.row_base)]);
          bool foreign = false;
          for (int r = v.row_base; r < std::min(rows, v.row_base + v.row_limit); ++r) {
            if (m_indices[size_t(r)] == v.group) ++covered[size_t(r) * 3 + size_t(v.n_block)];
            foreign |= m_indices[size_t(r)] != v.group;
          }
          if (foreign) EXPECT_TRUE(v.check_rows) << "row_base " << v.row_base;
        }
      for (int r = 0; r < rows; ++r)
        for (int n = 0; n < 3; ++n)
          EXPECT_EQ(covered[size_t(r) * 3 + size_t(n)], m_indices[size_t(r)] >= 0 ? 1 : 0) << "row " << r << " n " << n;
    }
  }
}

TEST(Scheduler, ContiguousAlignedTo64RowsOn64RowTilesCoversEachExpertRowOnce) {
  // Experts aligned to 64 rows (set_mk_alignment_for_contiguous_layout(64)): each 64-row block holds one expert from
  // its first row on, then padding, so 64-row tiles take every block for the expert of its first row and compute each
  // expert row exactly once; a tile whose block ends in padding checks its rows. (128-row tiles could not: the
  // heuristic gives such calls 64-row tiles only.)
  for (const std::vector<int>& counts : {std::vector<int>{100, 0, 300, 128, 250, 1, 64, 65}, std::vector<int>{0, 0, 5},
                                         router_counts(4321)}) {
    const std::vector<int32_t> m_indices = contiguous_layout(counts, 64);
    const int rows = int(m_indices.size());
    for (int ctas : {1, 3, 132}) {
      const auto visits =
          walk<fd::GemmKind::kGroupedContiguous, 64, 64, 3>(rows, int(counts.size()), m_indices.data(), ctas);
      std::vector<int> covered(size_t(rows) * 3, 0);
      for (const auto& cta : visits)
        for (const auto& v : cta) {
          EXPECT_EQ(v.row_base % 64, 0);
          ASSERT_GE(v.group, 0);
          EXPECT_EQ(v.group, m_indices[size_t(v.row_base)]);
          bool padding = false;
          for (int r = v.row_base; r < std::min(rows, v.row_base + v.row_limit); ++r) {
            if (m_indices[size_t(r)] == v.group) ++covered[size_t(r) * 3 + size_t(v.n_block)];
            EXPECT_TRUE(m_indices[size_t(r)] == v.group || m_indices[size_t(r)] == -1) << "row " << r;
            padding |= m_indices[size_t(r)] == -1;
          }
          EXPECT_EQ(v.check_rows, padding) << "row_base " << v.row_base;
        }
      for (int r = 0; r < rows; ++r)
        for (int n = 0; n < 3; ++n)
          EXPECT_EQ(covered[size_t(r) * 3 + size_t(n)], m_indices[size_t(r)] >= 0 ? 1 : 0) << "row " << r << " n " << n;
    }
  }
}

TEST(Scheduler, ContiguousHalvesRunAsWideTilesOverTwoNBlocks) {
  // 256-row tiles of 128 columns: a half (at most 128 rows of one expert) at an even n-block also covers the next
  // n-block; the odd n-block's candidate has no work. With an odd number of n-blocks the last one stays narrow.
  for (const std::vector<int>& counts : {std::vector<int>{100, 0, 300, 128, 250}, std::vector<int>{128, 128, 1, 384},
                                         router_counts(777)}) {
    const std::vector<int32_t> m_indices = contiguous_layout(counts);
    const int rows = int(m_indices.size());
    auto check = [&](auto visits, int num_n_blocks, int ctas) {
      // With an even n-block count, a last round of at most ctas / 2 tiles runs as halves (kTailHalves).
      const int last_round = (rows + 255) / 256 * num_n_blocks % ctas;
      const bool halved_last_round = num_n_blocks % 2 == 0 && last_round > 0 && 2 * last_round <= ctas;
      std::vector<int> covered(size_t(rows) * size_t(num_n_blocks), 0);
      int wide_tiles = 0;
      for (const auto& cta : visits)
        for (const auto& v : cta) {
          if (v.wide) {
            ++wide_tiles;
            EXPECT_LE(v.row_limit, 128);
            EXPECT_EQ(v.n_block % 2, 0);
            EXPECT_LT(v.n_block + 1, num_n_blocks);
          } else if (v.row_limit <= 128 && !halved_last_round) {
            EXPECT_EQ(v.n_block, num_n_blocks - 1) << "a half stays narrow only at an odd count's last n-block";
          }
          for (int n = v.n_block; n <= v.n_block + int(v.wide); ++n)
            for (int r = v.row_base; r < std::min(rows, v.row_base + v.row_limit); ++r)
              if (m_indices[size_t(r)] == v.group) ++covered[size_t(r) * size_t(num_n_blocks) + size_t(n)];
        }
      EXPECT_GT(wide_tiles, 0);
      for (int r = 0; r < rows; ++r)
        for (int n = 0; n < num_n_blocks; ++n)
          EXPECT_EQ(covered[size_t(r) * size_t(num_n_blocks) + size_t(n)], m_indices[size_t(r)] >= 0 ? 1 : 0)
              << "row " << r << " n " << n;
    };
    for (int ctas : {1, 3, 132}) {
      check(walk<fd::GemmKind::kGroupedContiguous, 256, 128, 4>(rows, int(counts.size()), m_indices.data(),
                                                                        ctas), 4, ctas);
      check(walk<fd::GemmKind::kGroupedContiguous, 256, 128, 5>(rows, int(counts.size()), m_indices.data(),
                                                                        ctas), 5, ctas);
    }
  }
}

TEST(Scheduler, ContiguousLastRoundRunsAsHalves) {
  // 256x128 tiles: when the last round of candidates holds at most half as many tiles as there are CTAs, each of
  // those tiles runs as two 128-row halves on two CTAs. The expert sizes are the bench's draws for the seed shapes
  // 4x8192x4096x7168 (141 blocks x 32 n-blocks = 4512 tiles: 34 rounds and 24 tiles) and 8x4096x4096x7168 (4384:
  // 33 rounds and 28).
  for (const std::vector<int>& counts :
       {std::vector<int>{11802, 9553, 8360, 6065}, std::vector<int>{2712, 4905, 4036, 2842, 5013, 5720, 5070, 4203}}) {
    const std::vector<int32_t> m_indices = contiguous_layout(counts);
    const int rows = int(m_indices.size());
    const int groups = int(counts.size());
    const int tiles = (rows + 255) / 256 * 32;
    for (int ctas : {132, 100, 7}) {
      const auto visits = walk<fd::GemmKind::kGroupedContiguous, 256, 128, 32>(rows, groups, m_indices.data(), ctas);
      const int last_round = tiles % ctas;
      const bool halved = last_round > 0 && 2 * last_round <= ctas;
      std::vector<int> covered(size_t(rows) * 32, 0);
      double slowest = 0;  // a CTA's tiles, a narrow half counted as 0.65 of a tile
      int narrow_halves = 0;
      for (const auto& cta : visits) {
        double cost = 0;
        for (const auto& v : cta) {
          const bool narrow_half = !v.wide && v.row_limit <= 128;
          narrow_halves += narrow_half;
          cost += narrow_half ? 0.65 : 1.0;
          for (int n = v.n_block; n <= v.n_block + int(v.wide); ++n)
            for (int r = v.row_base; r < std::min(rows, v.row_base + v.row_limit); ++r)
              if (m_indices[size_t(r)] == v.group) ++covered[size_t(r) * 32 + size_t(n)];
        }
        slowest = std::max(slowest, cost);
      }
      for (int r = 0; r < rows; ++r)
        for (int n = 0; n < 32; ++n)
          ASSERT_EQ(covered[size_t(r) * 32 + size_t(n)], m_indices[size_t(r)] >= 0 ? 1 : 0)
              << "row " << r << " n " << n << " ctas " << ctas;
      // Narrow halves only in a halved last round (N / 128 is even: no second pass), two per halved tile of one
      // expert; then no CTA runs more than its whole rounds and one half.
      if (!halved) EXPECT_EQ(narrow_halves, 0) << "ctas " << ctas;
      if (halved) {
        EXPECT_GT(narrow_halves, 0) << "ctas " << ctas;
        EXPECT_LE(narrow_halves, 2 * last_round) << "ctas " << ctas;
        EXPECT_LE(slowest, tiles / ctas + 0.65 + 1e-9) << "ctas " << ctas;
      }
    }
  }
}

TEST(Scheduler, ContiguousWideHalvesKeepTheCtasEven) {
  // 8 experts of 4224 rows (33 blocks of 128): 4 of the 132 256-row blocks hold two experts, and their candidates all
  // fell to the same 16 of 132 CTAs, which ran 40 tiles (24 full, 16 halves) while the others ran 32. With wide halves
  // each candidate of such a block holds one wide tile: every CTA runs 32 tiles, and nothing is left for a second pass.
  std::vector<int32_t> m_indices;
  for (int e = 0; e < 8; ++e)
    for (int r = 0; r < 4224; ++r) m_indices.push_back(e);
  const int rows = int(m_indices.size());
  const auto visits = walk<fd::GemmKind::kGroupedContiguous, 256, 128, 32>(rows, 8, m_indices.data(), 132);
  size_t fewest = visits[0].size(), most = 0;
  int wide = 0;
  for (const auto& cta : visits) {
    fewest = std::min(fewest, cta.size());
    most = std::max(most, cta.size());
    for (const auto& v : cta) wide += v.wide;
  }
  EXPECT_EQ(fewest, 32u);
  EXPECT_EQ(most, 32u);
  EXPECT_EQ(wide, 4 * 32);  // 4 split blocks x 2 halves x 16 n-block pairs
}

TEST(Scheduler, ContiguousAllPaddingBlocksAndBadIdsAreSkipped) {
  std::vector<int32_t> m_indices(256, -1);
  for (int r = 128; r < 256; ++r) m_indices[size_t(r)] = 7;  // 7 >= G: out of range
  fd::TileScheduler<fd::GemmKind::kGroupedContiguous, 64, 64, 2> s(256, 4, m_indices.data(), 0, 1);
  fd::Tile t;
  EXPECT_FALSE(s.next(t));
  EXPECT_EQ(s.error_bits, uint32_t(fd::kErrorExpertIdOutOfRange));
}

TEST(Scheduler, CandidateWalkKeepsExactlyTheTilesOfNext) {
  // The math and scale warps walk candidates (next_candidate) and skip those without work themselves; the TMA issuers
  // call next(). Both must see the same tiles in the same order, or the pipeline's stages would pair up wrongly.
  const std::vector<int> counts = {300, 0, 129, 5, 640, 128, 1000};
  std::vector<int32_t> m_indices = contiguous_layout(counts);
  for (int r = 0; r < 384; ++r) m_indices.push_back(-1);  // a worst-case M_sum's unused tail
  const int rows = int(m_indices.size());
  const int groups = int(counts.size());
  auto same_walks = [&](auto make) {
    for (int ctas : {1, 5, 132}) {
      for (int cta = 0; cta < ctas; ++cta) {
        auto by_next = make(cta, ctas);
        auto by_candidate = make(cta, ctas);
        fd::Tile a, b;
        bool has_work = false;
        int tiles = 0;
        for (;;) {
          const bool more_a = by_next.next(a);
          bool more_b = by_candidate.next_candidate(b, has_work);
          while (more_b && !has_work) more_b = by_candidate.next_candidate(b, has_work);
          ASSERT_EQ(more_a, more_b) << "cta " << cta << " of " << ctas << " after " << tiles << " tiles";
          if (!more_a) break;
          EXPECT_EQ(a.row_base, b.row_base);
          EXPECT_EQ(a.n_block, b.n_block);
          EXPECT_EQ(a.group, b.group);
          EXPECT_EQ(a.row_limit, b.row_limit);
          EXPECT_EQ(a.check_rows, b.check_rows);
          EXPECT_EQ(a.wide, b.wide);
          ++tiles;
        }
        EXPECT_EQ(by_next.error_bits, by_candidate.error_bits);
      }
    }
  };
  same_walks([&](int cta, int ctas) {
    return fd::TileScheduler<fd::GemmKind::kGroupedContiguous, 128, 192, 3>(rows, groups, m_indices.data(),
                                                                                      cta, ctas);
  });
  same_walks([&](int cta, int ctas) {
    return fd::TileScheduler<fd::GemmKind::kGroupedContiguous, 256, 128, 4>(rows, groups, m_indices.data(),
                                                                                      cta, ctas);
  });
}

TEST(Scheduler, MaskedGroupTailsOfAtMostHalfATileRunAsWideTiles) {
  // 256x128 tiles with a wide tail: a group's last row block of at most 128 rows (a group of so few rows is that block
  // alone) runs after the group's full tiles as one wide tile per pair of n-blocks (an odd n-block count leaves the
  // last n-block narrow); a last block of 129-255 rows, and every block without a wide tail, one n-block at a time.
  // Every valid row of every group is written once per n-block, and the tile count is the heuristic's
  // (gemm_group_tiles).
  const int m_max = 1400;
  const std::vector<int32_t> masked = {0, 1, 128, 129, 256, 257, 384, 300, 1000, 1292, 1400, 792};
  for (int ctas : {1, 3, 132}) {
    const auto check = [&](auto visits, int nb, int bm, bool wide_tails) {
      std::vector<int> written(size_t(masked.size()) * m_max * size_t(nb), 0);
      int tiles = 0;
      for (const auto& cta : visits)
        for (const auto& v : cta) {
          ++tiles;
          const int rows = masked[size_t(v.group)];
          EXPECT_EQ(v.row_base, v.group * m_max + v.m_block * bm);
          EXPECT_EQ(v.row_limit, std::min(bm, rows - v.m_block * bm));
          EXPECT_EQ(v.compute_rows, v.row_limit);
          const bool half_last = rows % bm != 0 && rows % bm <= bm / 2 && v.m_block == rows / bm;
          EXPECT_EQ(v.wide, wide_tails && half_last && v.n_block + 1 < nb) << "group " << v.group << " m_block "
                                                                             << v.m_block << " n_block " << v.n_block;
          if (wide_tails && half_last) EXPECT_EQ(v.n_block % 2, 0);
          for (int n = v.n_block; n <= v.n_block + int(v.wide); ++n)
            for (int r = 0; r < v.row_limit; ++r)
              ++written[(size_t(v.group) * m_max + size_t(v.m_block * bm + r)) * size_t(nb) + size_t(n)];
        }
      int expected_tiles = 0;
      for (size_t g = 0; g < masked.size(); ++g) {
        expected_tiles += fd::gemm_group_tiles<int>(masked[g], nb, bm, wide_tails);
        for (int r = 0; r < m_max; ++r)
          for (int n = 0; n < nb; ++n)
            ASSERT_EQ(written[(g * m_max + size_t(r)) * size_t(nb) + size_t(n)], r < masked[g] ? 1 : 0)
                << "group " << g << " row " << r << " n_block " << n << " ctas " << ctas;
      }
      EXPECT_EQ(tiles, expected_tiles);
    };
    using fd::GemmKind;
    check(walk<GemmKind::kGroupedMasked, 256, 128, 48, true>(m_max, int(masked.size()), masked.data(), ctas), 48, 256,
          true);
    check(walk<GemmKind::kGroupedMasked, 256, 128, 7, true>(m_max, int(masked.size()), masked.data(), ctas), 7, 256,
          true);
    check(walk<GemmKind::kGroupedMasked, 256, 128, 7, false>(m_max, int(masked.size()), masked.data(), ctas), 7, 256,
          false);
    check(walk<GemmKind::kGroupedMasked, 128, 192, 5>(m_max, int(masked.size()), masked.data(), ctas), 5, 128, false);
  }
  // A group of 792 rows (3 full blocks and 24 rows) over 48 n-blocks: 144 full tiles and 24 wide ones, not 192.
  EXPECT_EQ(fd::gemm_group_tiles<int>(792, 48, 256, true), 3 * 48 + 24);
  EXPECT_EQ(fd::gemm_group_tiles<int>(792, 48, 256, false), 4 * 48);
}

TEST(Scheduler, MaskedVisitsOnlyValidRowsOfEachGroup) {
  const int m_max = 200;
  for (int ctas : {1, 3, 132}) {
    std::vector<int32_t> masked = {0, 1, 63, 64, 65, 200, 129, 0};
    const auto visits = walk<fd::GemmKind::kGroupedMasked, 64, 32, 4>(m_max, int(masked.size()), masked.data(), ctas);
    std::map<std::tuple<int, int, int>, int> seen;
    for (const auto& cta : visits)
      for (const auto& v : cta) {
        ++seen[{v.group, v.m_block, v.n_block}];
        EXPECT_EQ(v.row_base, v.group * m_max + v.m_block * 64);
        EXPECT_EQ(v.row_limit, std::min(64, masked[size_t(v.group)] - v.m_block * 64));
        EXPECT_GT(v.row_limit, 0);
      }
    size_t expected = 0;
    for (int rows : masked) expected += size_t((rows + 63) / 64) * 4;
    EXPECT_EQ(seen.size(), expected);
    for (const auto& [tile, count] : seen) EXPECT_EQ(count, 1);
  }
}

// K-grouped weight gradient: every (group, m-block, n-block) tile of the groups with K_g > 0 exactly once, none of
// the empty groups, each tile with its group's K offset and K blocks; rows of D[g] in the [G * M, N] view.
TEST(Scheduler, KGroupedVisitsEveryTileOfNonEmptyGroupsWithTheirKRange) {
  const int m = 200;  // 2 row blocks of 128, the last of 72 rows
  std::vector<int32_t> ks = {256, 0, 128, 1024, 0, 384};
  int32_t total = 0;
  for (int32_t k : ks) total += k;
  for (int ctas : {1, 3, 7, 132}) {
    std::vector<std::vector<fd::Tile>> visits(static_cast<size_t>(ctas));
    uint32_t errors = 0;
    for (int cta = 0; cta < ctas; ++cta) {
      fd::TileScheduler<fd::GemmKind::kGroupedK, 128, 96, 3> s(m, int(ks.size()), ks.data(), cta, ctas, total);
      fd::Tile t;
      while (s.next(t)) visits[size_t(cta)].push_back(t);
      errors |= s.error_bits;
    }
    EXPECT_EQ(errors, 0u);
    std::map<std::tuple<int, int, int>, int> seen;
    for (const auto& cta : visits) {
      int last_group = -1;
      for (const auto& v : cta) {
        EXPECT_GE(v.group, last_group) << "a CTA's groups only move forward";
        last_group = v.group;
        ++seen[{v.group, v.m_block, v.n_block}];
        int32_t prefix = 0;
        for (int g = 0; g < v.group; ++g) prefix += ks[size_t(g)];
        EXPECT_EQ(v.k_block0, prefix / 128);
        EXPECT_EQ(v.num_k_blocks, ks[size_t(v.group)] / 128);
        EXPECT_GT(v.num_k_blocks, 0);
        EXPECT_EQ(v.row_base, v.group * m + v.m_block * 128);
        EXPECT_EQ(v.row_limit, std::min(128, m - v.m_block * 128));
      }
    }
    size_t expected = 0;
    for (int32_t k : ks) expected += k > 0 ? 2 * 3 : 0;
    EXPECT_EQ(seen.size(), expected) << ctas << " CTAs";
    for (const auto& [tile, count] : seen) EXPECT_EQ(count, 1);
  }
}

// K-grouped: a K_g that is negative, not a multiple of 128 or past the K extent gets no tiles, counts as 0 in the
// offsets of the groups after it, and raises kErrorGroupKInvalid.
TEST(Scheduler, KGroupedSkipsAndFlagsInvalidK) {
  std::vector<int32_t> ks = {128, -128, 100, 256, 512};  // total 384: the last reaches past it
  fd::TileScheduler<fd::GemmKind::kGroupedK, 128, 128, 1> s(128, int(ks.size()), ks.data(), 0, 1, 384);
  fd::Tile t;
  std::vector<fd::Tile> tiles;
  while (s.next(t)) tiles.push_back(t);
  ASSERT_EQ(tiles.size(), 2u);
  EXPECT_EQ(tiles[0].group, 0);
  EXPECT_EQ(tiles[0].k_block0, 0);
  EXPECT_EQ(tiles[1].group, 3);
  EXPECT_EQ(tiles[1].k_block0, 1);
  EXPECT_EQ(tiles[1].num_k_blocks, 2);
  EXPECT_EQ(s.error_bits, uint32_t(fd::kErrorGroupKInvalid));
}

TEST(Scheduler, MaskedClampsAndFlagsRowsAboveMmax) {
  std::vector<int32_t> masked = {300};
  fd::TileScheduler<fd::GemmKind::kGroupedMasked, 128, 64, 1> s(256, 1, masked.data(), 0, 1);
  fd::Tile t;
  int tiles = 0;
  while (s.next(t)) ++tiles;
  EXPECT_EQ(tiles, 2);  // 256 rows, not 300
  EXPECT_EQ(s.error_bits, uint32_t(fd::kErrorMaskedMTooLarge));
}

namespace {

/// The rows of each group of a psum layout, row by row: group g holds [align(e[g-1], alignment), e[g]) of the `rows`
/// that exist, where e is the end as the kernel clamps it (an end below the group's start: the start; past `rows`:
/// `rows`). -1: a row of no group. Also says whether some end was invalid (below its start, or past `rows` with rows to
/// hold).
std::vector<int> psum_row_groups(const std::vector<int32_t>& ends, int rows, int alignment, bool* invalid) {
  std::vector<int> out(size_t(rows), -1);
  int64_t start = 0;
  *invalid = false;
  for (size_t g = 0; g < ends.size(); ++g) {
    int64_t end = ends[g];
    if (end < start) {
      *invalid = true;
      end = start;
    } else if (end > rows && end > start) {
      *invalid = true;
      end = std::max<int64_t>(rows, start);
    }
    for (int64_t r = start; r < std::min<int64_t>(end, rows); ++r) out[size_t(r)] = int(g);
    start = (end + alignment - 1) / alignment * alignment;
  }
  return out;
}

/// DeepEP v2's psum layout of experts with these row counts: each end is the previous end rounded up to `alignment`,
/// plus the expert's rows (an empty expert's end is its start).
std::vector<int32_t> psum_ends(const std::vector<int>& counts, int alignment = 128) {
  std::vector<int32_t> ends;
  int32_t start = 0;
  for (int c : counts) {
    ends.push_back(start + c);
    start = (ends.back() + alignment - 1) / alignment * alignment;
  }
  return ends;
}

/// Walks every CTA of a psum kernel of BM x BN tiles over NB n-blocks and checks that each row of each group is in
/// exactly one tile per n-block, as that group's row; that no tile holds a row of no group, reaches past the group's
/// end or past `rows`; that only a group's last block of at most half a tile is wide, and only with 256x128 tiles;
/// and that next() and the candidate walk (which the math and scale warps use) agree, with no candidate without work.
/// Sets `bits` to the error bits of the walks (the same in every CTA). Groups start at multiples of `alignment` rows.
template <int BM, int BN, int NB, bool kWideTail = false>
void check_psum(const std::vector<int32_t>& ends, int rows, int num_ctas, int alignment, uint32_t* bits) {
  bool invalid = false;
  const std::vector<int> row_group = psum_row_groups(ends, rows, alignment, &invalid);
  const int groups = int(ends.size());
  std::vector<int> covered(size_t(rows) * NB, 0);
  std::set<uint32_t> error_bits;
  int num_tiles = 0;
  for (int cta = 0; cta < num_ctas; ++cta) {
    using Scheduler = fd::TileScheduler<fd::GemmKind::kGroupedContiguousPsum, BM, BN, NB, kWideTail>;
    Scheduler by_next(rows, groups, ends.data(), cta, num_ctas, 0, alignment);
    Scheduler by_candidate(rows, groups, ends.data(), cta, num_ctas, 0, alignment);
    fd::Tile t, c;
    int last_group = -1;
    while (by_next.next(t)) {
      bool has_work = false;
      EXPECT_TRUE(by_candidate.next_candidate(c, has_work));
      EXPECT_TRUE(has_work) << "a psum candidate without work";
      EXPECT_EQ(c.row_base, t.row_base);
      EXPECT_EQ(c.n_block, t.n_block);
      EXPECT_EQ(c.group, t.group);
      EXPECT_EQ(c.row_limit, t.row_limit);
      EXPECT_EQ(c.wide, t.wide);
      ++num_tiles;
      EXPECT_GE(t.group, last_group) << "a CTA's groups only move forward";
      last_group = t.group;
      EXPECT_FALSE(t.check_rows);
      if (t.wide) {
        EXPECT_TRUE(kWideTail);
        EXPECT_LE(t.row_limit, BM / 2) << "a wide tile holds at most half a tile's rows";
        EXPECT_EQ(t.n_block % 2, 0);
        ASSERT_LT(t.n_block + 1, NB);
        // Its group ends inside it.
        EXPECT_TRUE(t.row_base + t.row_limit == rows || row_group[size_t(t.row_base + t.row_limit)] != t.group);
      }
      EXPECT_EQ(t.first_row, 0);
      EXPECT_EQ(t.compute_rows, t.row_limit);
      EXPECT_GT(t.row_limit, 0);
      EXPECT_LE(t.row_limit, BM);
      // A tile starts at its group's start (on the alignment) plus whole tiles: a multiple of 32 rows, so MN-major
      // SA's TMA box starts 16-byte aligned (a multiple of 4 rows).
      EXPECT_EQ(t.row_base % std::min(alignment, BM), 0) << "a tile off its group's aligned start";
      ASSERT_GE(t.row_base, 0);
      ASSERT_LE(t.row_base + t.row_limit, rows) << "a tile writes past M_sum";
      ASSERT_LT(t.n_block, NB);
      ASSERT_GE(t.group, 0);
      ASSERT_LT(t.group, groups);
      for (int r = t.row_base; r < t.row_base + t.row_limit; ++r) {
        ASSERT_EQ(row_group[size_t(r)], t.group) << "row " << r << " is not group " << t.group << "'s";
        for (int n = t.n_block; n <= t.n_block + int(t.wide); ++n) ++covered[size_t(r) * NB + size_t(n)];
      }
    }
    bool has_work = true;
    EXPECT_FALSE(by_candidate.next_candidate(c, has_work));
    EXPECT_EQ(by_next.error_bits, by_candidate.error_bits);
    error_bits.insert(by_next.error_bits);
  }
  for (int r = 0; r < rows; ++r)
    for (int n = 0; n < NB; ++n)
      EXPECT_EQ(covered[size_t(r) * NB + size_t(n)], row_group[size_t(r)] >= 0 ? 1 : 0) << "row " << r << " n " << n;
  // Only the blocks of the groups' rows are tiles: padding costs no candidate.
  int expected_tiles = 0;
  for (int g = 0; g < groups; ++g)
    expected_tiles += fd::gemm_group_tiles<int>(int(std::count(row_group.begin(), row_group.end(), g)), NB, BM,
                                                kWideTail);
  EXPECT_EQ(num_tiles, expected_tiles);
  EXPECT_EQ(error_bits.size(), 1u) << "every CTA walks every group";
  *bits = *error_bits.begin();
  EXPECT_EQ(*bits, invalid ? uint32_t(fd::kErrorGroupEndInvalid) : 0u);
}

/// check_psum with 64-, 128- and 256-row tiles (with and without a wide tail); the error bits, which must be the same
/// for all.
template <int NB>
uint32_t check_psum_all_tiles(const std::vector<int32_t>& ends, int rows, int num_ctas, int alignment = 128) {
  uint32_t bits64 = ~0u, bits128 = ~0u, bits256 = ~0u, bits256_wide = ~0u;
  check_psum<64, 32, NB>(ends, rows, num_ctas, alignment, &bits64);
  check_psum<128, 192, NB>(ends, rows, num_ctas, alignment, &bits128);
  check_psum<256, 128, NB>(ends, rows, num_ctas, alignment, &bits256);
  check_psum<256, 128, NB, true>(ends, rows, num_ctas, alignment, &bits256_wide);
  EXPECT_EQ(bits128, bits64);
  EXPECT_EQ(bits256, bits64);
  EXPECT_EQ(bits256_wide, bits64);
  return bits64;
}

}  // namespace

TEST(Scheduler, PsumCoversEveryRowOfEveryGroupOnceAndSkipsPadding) {
  // DeepEP v2's layouts: empty groups (an end at its start), a group ending on a 128-row boundary, groups of one row,
  // a last group ending before M_sum (a worst-case allocation's unused tail), router-like sizes, many experts.
  std::vector<int> many(256);
  for (size_t e = 0; e < many.size(); ++e) many[e] = int(e * 37 % 300);
  for (const std::vector<int>& counts :
       {std::vector<int>{100, 0, 300, 128, 250}, std::vector<int>{256, 1, 129, 512}, std::vector<int>{0, 0, 5},
        std::vector<int>{0}, std::vector<int>{1}, router_counts(12345), router_counts(99), many}) {
    const std::vector<int32_t> ends = psum_ends(counts);
    const int used = (ends.back() + 127) / 128 * 128;
    for (int rows : {std::max(ends.back(), 1), used + 384}) {
      for (int ctas : {1, 3, 132}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " ctas " + std::to_string(ctas) + " groups " +
                     std::to_string(ends.size()));
        EXPECT_EQ((check_psum_all_tiles<3>(ends, rows, ctas)), 0u);
        EXPECT_EQ((check_psum_all_tiles<17>(ends, rows, ctas)), 0u);
      }
    }
  }
}

TEST(Scheduler, PsumWithSixtyFourAndThirtyTwoRowAlignmentCoversEveryRowOnce) {
  // Groups starting at multiples of 64 or 32 rows (the run-time alignment): tiles of 64, 128 and 256 rows start at
  // their group's start, so a tile's first row is on the alignment, not on a multiple of the tile height; every row of
  // every group is computed once and no padding row is in a tile.
  std::vector<int> many(256);
  for (size_t e = 0; e < many.size(); ++e) many[e] = int(e * 37 % 100);
  for (int alignment : {64, 32}) {
    for (const std::vector<int>& counts :
         {std::vector<int>{70, 0, 131}, std::vector<int>{100, 0, 300, 128, 250, 33, 31, 32, 64, 1},
          std::vector<int>{0, 0, 5}, std::vector<int>{1}, router_counts(2024), many}) {
      const std::vector<int32_t> ends = psum_ends(counts, alignment);
      const int used = (ends.back() + alignment - 1) / alignment * alignment;
      for (int rows : {std::max(ends.back(), 1), used + 96}) {
        for (int ctas : {1, 3, 132}) {
          SCOPED_TRACE("alignment " + std::to_string(alignment) + " rows " + std::to_string(rows) + " ctas " +
                       std::to_string(ctas) + " groups " + std::to_string(ends.size()));
          EXPECT_EQ((check_psum_all_tiles<3>(ends, rows, ctas, alignment)), 0u);
          EXPECT_EQ((check_psum_all_tiles<17>(ends, rows, ctas, alignment)), 0u);
        }
      }
    }
  }
}

TEST(Scheduler, PsumGroupStartsFollowTheAlignment) {
  // Ends {70, 201}: group 1 holds rows [128, 201) with 128- and 64-row alignment, [96, 201) with 32.
  const std::vector<int32_t> ends = {70, 201};
  for (const auto& [alignment, start] : {std::pair{128, 128}, std::pair{64, 128}, std::pair{32, 96}}) {
    fd::TileScheduler<fd::GemmKind::kGroupedContiguousPsum, 128, 64, 1> s(256, 2, ends.data(), 0, 1, 0, alignment);
    fd::Tile t;
    std::vector<std::tuple<int, int, int>> tiles;  // (group, row_base, row_limit)
    while (s.next(t)) tiles.emplace_back(t.group, t.row_base, t.row_limit);
    EXPECT_EQ(tiles, (std::vector<std::tuple<int, int, int>>{{0, 0, 70}, {1, start, 201 - start}})) << alignment;
    EXPECT_EQ(s.error_bits, 0u);
  }
  // Ends written for 32-row alignment ({70, 96, 131}: group 1 empty at 96, group 2 [96, 131)) read with 128: group 1
  // starts at 128, past its end, which is invalid.
  const std::vector<int32_t> ends32 = psum_ends({70, 0, 35}, 32);
  ASSERT_EQ(ends32, (std::vector<int32_t>{70, 96, 131}));
  EXPECT_EQ((check_psum_all_tiles<2>(ends32, 160, 3, 32)), 0u);
  EXPECT_EQ((check_psum_all_tiles<2>(ends32, 160, 3, 128)), uint32_t(fd::kErrorGroupEndInvalid));
}

TEST(Scheduler, PsumTilesOfALargeGroupAreRasterizedInBands) {
  // One group of 32 blocks of 128 rows over 56 n-blocks: the first wave of 132 CTAs touches one band of B.
  const std::vector<int32_t> ends = {4096};
  std::set<int> n_blocks;
  for (int cta = 0; cta < 132; ++cta) {
    fd::TileScheduler<fd::GemmKind::kGroupedContiguousPsum, 128, 128, 56> s(4096, 1, ends.data(), cta, 132);
    fd::Tile t;
    ASSERT_TRUE(s.next(t));
    n_blocks.insert(t.n_block);
    EXPECT_EQ(t.row_base, (cta % (32 * 16)) / 16 * 128);
  }
  EXPECT_LE(n_blocks.size(), size_t(fd::kDefaultRasterBand));
}

TEST(Scheduler, MaskedTilesReadingOneBTileAreNeighbours) {
  // Four groups of 252, 312, 219 and 302 rows (2, 3, 2 and 3 row blocks of 128) over 22 n-blocks: groups of at most
  // kColumnWalkMaxRows rows are walked column by column, so a B tile's readers run in the same wave.
  const std::vector<int32_t> masked_m = {252, 312, 219, 302};
  constexpr int kCtas = 132;
  std::vector<std::tuple<int, int, int>> order;  // (group, n_block, m_block) by tile index
  std::map<int, std::tuple<int, int, int>> by_index;
  for (int cta = 0; cta < kCtas; ++cta) {
    fd::TileScheduler<fd::GemmKind::kGroupedMasked, 128, 192, 22> s(4096, 4, masked_m.data(), cta, kCtas);
    fd::Tile t;
    for (int i = 0; s.next(t); ++i) by_index[cta + i * s.tile_stride] = {t.group, t.n_block, t.m_block};
  }
  for (const auto& [index, tile] : by_index) order.push_back(tile);
  ASSERT_EQ(order.size(), size_t((2 + 3 + 2 + 3) * 22));
  std::vector<std::tuple<int, int, int>> expected;
  for (int g = 0; g < 4; ++g)
    for (int n = 0; n < 22; ++n)
      for (int m = 0; m < (masked_m[size_t(g)] + 127) / 128; ++m) expected.emplace_back(g, n, m);
  EXPECT_EQ(order, expected);
}

TEST(Scheduler, GroupsUpToTheColumnWalkLimitGoByColumnsLargerOnesByBands) {
  // 256-row psum tiles over 20 n-blocks, first tiles of the walk: a group of kColumnWalkMaxRows rows (8 blocks) takes
  // its row blocks of n-block 0 first, one of 2049 rows (9 blocks) walks n-blocks 0..15 of its first row block.
  auto first_tiles = [](int32_t rows) {
    const std::vector<int32_t> ends = {rows};
    std::vector<std::pair<int, int>> tiles;  // (m_block, n_block)
    for (int cta = 0; cta < 10; ++cta) {
      fd::TileScheduler<fd::GemmKind::kGroupedContiguousPsum, 256, 128, 20> s(rows, 1, ends.data(), cta, 132);
      fd::Tile t;
      EXPECT_TRUE(s.next(t));
      tiles.emplace_back(t.m_block, t.n_block);
    }
    return tiles;
  };
  ASSERT_EQ(fd::kColumnWalkMaxRows, 2048);
  EXPECT_EQ(first_tiles(2048), (std::vector<std::pair<int, int>>{
                                   {0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 0}, {5, 0}, {6, 0}, {7, 0}, {0, 1}, {1, 1}}));
  EXPECT_EQ(first_tiles(2049), (std::vector<std::pair<int, int>>{
                                   {0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}, {0, 6}, {0, 7}, {0, 8}, {0, 9}}));
}

TEST(Scheduler, FewGroupsRunOnTheFewestCtasThatKeepTheRounds) {
  // Masked, four groups of 252, 312, 219 and 302 rows at 128x192 over 22 n-blocks: 220 tiles, two rounds on 132 CTAs,
  // so 110 CTAs take two tiles each and 22 none (without balancing, 88 would take two and 44 one).
  const std::vector<int32_t> masked_m = {252, 312, 219, 302};
  std::vector<int> per_cta;
  std::set<std::tuple<int, int, int>> seen;
  for (int cta = 0; cta < 132; ++cta) {
    fd::TileScheduler<fd::GemmKind::kGroupedMasked, 128, 192, 22> s(4096, 4, masked_m.data(), cta, 132);
    fd::Tile t;
    int n = 0;
    while (s.next(t)) {
      EXPECT_TRUE(seen.insert({t.group, t.m_block, t.n_block}).second);
      ++n;
    }
    per_cta.push_back(n);
    EXPECT_EQ(s.error_bits, 0u);
  }
  EXPECT_EQ(seen.size(), size_t(220));
  EXPECT_EQ(std::count(per_cta.begin(), per_cta.end(), 2), 110);
  EXPECT_EQ(std::count(per_cta.begin(), per_cta.end(), 0), 22);

  // Masked, groups of 300 rows (3 blocks of 128) over 32 n-blocks: 8 groups make 768 tiles, 6 rounds, on 128 CTAs;
  // nine groups are not balanced: every CTA works.
  auto active_ctas = [](int groups) {
    const std::vector<int32_t> rows(size_t(groups), 300);
    int active = 0;
    size_t tiles = 0;
    for (int cta = 0; cta < 132; ++cta) {
      fd::TileScheduler<fd::GemmKind::kGroupedMasked, 128, 128, 32> s(300, groups, rows.data(), cta, 132);
      fd::Tile t;
      size_t n = 0;
      while (s.next(t)) ++n;
      active += n > 0;
      tiles += n;
    }
    EXPECT_EQ(tiles, size_t(groups * 3 * 32));
    return active;
  };
  EXPECT_EQ(active_ctas(8), 128);
  EXPECT_EQ(active_ctas(9), 132);
}

TEST(Scheduler, PsumInvalidEndsAreClampedFlaggedAndNeverOutOfBounds) {
  // Ends below the group's start (the previous end rounded up to 128; negative ones too), past M_sum, and extreme
  // values: the group keeps the rows that exist, no tile leaves [0, M_sum), and kErrorGroupEndInvalid is raised.
  const int32_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  const std::vector<std::vector<int32_t>> bad = {
      {100, 50},            // below the second group's start (128)
      {100, 100, 300},      // an empty group must end at its start (128), not at the previous end
      {-5, 300},            // negative
      {kMin, 200},          // the most negative end
      {100, 10000},         // past M_sum
      {kMax},               // the largest end
      {600, 700},           // the first group past M_sum (512), the second starting beyond it
      {300, 200, 400},      // decreasing
  };
  for (const auto& ends : bad) {
    SCOPED_TRACE("ends " + std::to_string(ends[0]) + ", ...");
    for (int ctas : {1, 3, 132}) EXPECT_EQ((check_psum_all_tiles<5>(ends, 512, ctas)), uint32_t(fd::kErrorGroupEndInvalid));
  }
  // With 32-row alignment: an end below its group's start (70 -> 96), past M_sum, or decreasing.
  for (const std::vector<int32_t>& ends : {std::vector<int32_t>{70, 80}, std::vector<int32_t>{70, 70, 200},
                                           std::vector<int32_t>{31, 5000}, std::vector<int32_t>{kMax},
                                           std::vector<int32_t>{300, 200, 400}, std::vector<int32_t>{-1}})
    for (int ctas : {1, 3, 132})
      EXPECT_EQ((check_psum_all_tiles<5>(ends, 512, ctas, 32)), uint32_t(fd::kErrorGroupEndInvalid));
  // Valid: empty groups at the aligned start past M_sum (their end is their start), a last group ending at M_sum.
  for (const std::vector<int32_t>& ends : {std::vector<int32_t>{300, 384, 384}, std::vector<int32_t>{512},
                                           std::vector<int32_t>{0, 0, 0}, std::vector<int32_t>{128, 256, 256, 300}})
    EXPECT_EQ((check_psum_all_tiles<5>(ends, 300 + 212 * (ends.back() == 512), 7)), 0u);
}

TEST(Scheduler, PsumGroupsAfterTheLastAreNotRead) {
  // The walk reads group_ends[0 .. G) only: the entry after the last group (here an end that would hold rows) is never
  // taken for a group.
  const std::vector<int32_t> ends_and_beyond = {100, 300, 1000};
  fd::TileScheduler<fd::GemmKind::kGroupedContiguousPsum, 128, 64, 2> s(1024, 2, ends_and_beyond.data(), 0, 1);
  fd::Tile t;
  int tiles = 0, last_row = 0;
  while (s.next(t)) ++tiles, last_row = std::max(last_row, t.row_base + t.row_limit);
  EXPECT_EQ(tiles, (1 + 2) * 2);  // group 0: one block; group 1 (rows 128-299): two
  EXPECT_EQ(last_row, 300);
  EXPECT_EQ(s.error_bits, 0u);
}
