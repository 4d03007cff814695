// The epilogue's shared output tile: the offsets of its 16-byte chunks are distinct, the 8 rows of each stmatrix matrix
// fall in distinct bank groups (no conflicts), and the one-XOR form the kernel uses for each stmatrix address
// (chunk_offset) equals the full offset computation, for every slab swizzle (32, 64, 128 bytes); the fp32 tiles that go
// out in parts (gemm_store_cols, gemm_store_buffers) cover the tile in buffers of the shared memory the layout
// reserves, the same for dense and K-grouped tiles; D^T's tiles store each element once, without bank conflicts, at the
// offsets the kernel computes per lane. Runs on the host.
#include <gtest/gtest.h>

#include <set>

#include "finegemm/device/epilogue.cuh"

namespace fd = finegemm::device;

namespace {

template <uint32_t BM, uint32_t BN>
void check_tile() {
  using Tile = fd::EpilogueTile<BM, BN>;
  std::set<uint32_t> chunks;
  for (uint32_t row = 0; row < BM; ++row) {
    for (uint32_t col = 0; col < BN; col += 8) {
      const uint32_t off = Tile::offset(row, col);
      ASSERT_EQ(off % 16, 0u) << "BM=" << BM << " BN=" << BN << " row " << row << " col " << col;
      ASSERT_LT(off, BM * BN * 2) << "BM=" << BM << " BN=" << BN << " row " << row << " col " << col;
      ASSERT_TRUE(chunks.insert(off).second) << "BM=" << BM << " BN=" << BN << " row " << row << " col " << col;
    }
    for (uint32_t col0 = 0; col0 <= 8; col0 += 8) {
      // stmatrix x4 over 16 columns: lanes 0-15 address columns col0 = 0, lanes 16-31 col0 = 8.
      for (uint32_t i = 0; i * 16 + col0 < BN; ++i) {
        ASSERT_EQ(Tile::chunk_offset(Tile::offset(row, col0), i), Tile::offset(row, i * 16 + col0))
            << "BM=" << BM << " BN=" << BN << " row " << row << " chunk " << i << " col0 " << col0;
      }
    }
  }
  // One stmatrix matrix: 8 consecutive rows (from a multiple of 8) of one 8-column chunk, 16 bytes each; the 128
  // bytes land in the 32 banks without conflict when their 16-byte positions within 128 bytes differ.
  for (uint32_t row0 = 0; row0 < BM; row0 += 8) {
    for (uint32_t col = 0; col < BN; col += 8) {
      std::set<uint32_t> bank_groups;
      for (uint32_t r = 0; r < 8; ++r) bank_groups.insert(Tile::offset(row0 + r, col) / 16 % 8);
      ASSERT_EQ(bank_groups.size(), 8u) << "BM=" << BM << " BN=" << BN << " rows " << row0 << "+8 col " << col;
    }
  }
}

template <uint32_t BM, uint32_t... kBlockNs>
void check_block_ns() {
  (check_tile<BM, kBlockNs>(), ...);
}

}  // namespace

TEST(Epilogue, ChunksAreDistinctConflictFreeAndStmatrixAddressesMatch) {
  check_block_ns<64, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256>();
  check_block_ns<128, 16, 32, 48, 64, 96, 112, 128, 144, 160, 192>();
  check_block_ns<256, 64, 128>();
}

namespace {

// An fp32 tile sent out in parts (the weight gradient's reduction into D): each part's float pairs land at distinct
// 8-byte places inside one buffer, the parts cover the tile's columns, and the buffers take the shared memory the
// layout reserves for them.
template <uint32_t BM, uint32_t BN, bool kKGrouped>
void check_fp32_parts(uint32_t want_cols, uint32_t want_buffers) {
  constexpr uint32_t kOut = fd::kOutF32AddToD;
  constexpr uint32_t kCols = fd::gemm_store_cols(BN, kOut, kKGrouped);
  constexpr uint32_t kBuffers = fd::gemm_store_buffers(BN, kOut, kKGrouped);
  using Tile = fd::EpilogueTile<BM, BN, 4, kCols, kBuffers>;
  ASSERT_EQ(kCols, want_cols) << "BN=" << BN << " K-grouped " << kKGrouped;
  ASSERT_EQ(kBuffers, want_buffers) << "BN=" << BN << " K-grouped " << kKGrouped;
  ASSERT_GE(Tile::kNumParts * kCols, BN);
  ASSERT_LT((Tile::kNumParts - 1) * kCols, BN);
  using Layout = fd::GemmSmemLayout<BM, BN, 4, kKGrouped ? 0 : 7168, 1, fd::kSaMnMajor, fd::kSbRowMnMajor, kOut>;
  ASSERT_EQ(Layout::kDBytes, kBuffers * Tile::kBufferBytes);
  std::set<uint32_t> places;
  for (uint32_t row = 0; row < BM; ++row) {
    for (uint32_t col = 0; col < kCols; col += 2) {
      const uint32_t off = Tile::offset(row, col);
      ASSERT_EQ(off % 8, 0u);
      ASSERT_LT(off + 8, Tile::kBufferBytes + 1) << "BN=" << BN << " row " << row << " col " << col;
      ASSERT_TRUE(places.insert(off).second) << "BN=" << BN << " row " << row << " col " << col;
    }
  }
}

}  // namespace

TEST(Epilogue, Fp32ReductionPartsCoverTheTileInTheirBuffers) {
  // K-grouped: parts of 32 columns, 128 columns of buffers at 128x160; dense: 64-column parts at 128x160, 32 at
  // 128x144 and below, with 64 columns of buffers.
  check_fp32_parts<128, 160, true>(32, 4);
  check_fp32_parts<128, 144, true>(32, 2);
  check_fp32_parts<128, 160, false>(64, 2);
  check_fp32_parts<128, 144, false>(32, 2);
  check_fp32_parts<128, 128, false>(32, 2);
  check_fp32_parts<128, 96, false>(32, 2);
  check_fp32_parts<64, 160, false>(64, 2);
  check_fp32_parts<128, 64, false>(64, 1);
}

TEST(Epilogue, Fp32PartsTakeTheSameSharedMemoryInEitherKind) {
  // The heuristic sizes the stage ring from the same footprint for dense and K-grouped tiles of one width.
  for (uint32_t bn = 16; bn <= 256; bn += 16) {
    for (uint32_t out : {fd::kOutF32, fd::kOutF32AddToD}) {
      EXPECT_EQ(fd::gemm_store_cols(bn, out, false) * fd::gemm_store_buffers(bn, out, false),
                fd::gemm_store_cols(bn, out, true) * fd::gemm_store_buffers(bn, out, true))
          << "BN=" << bn << " output " << out;
      EXPECT_EQ(fd::gemm_smem_launch_bytes(128, bn, 4, 7168, 1, fd::kSaMnMajor, fd::kSbRowMnMajor, out),
                fd::gemm_smem_launch_bytes(128, bn, 4, 0, 1, fd::kSaMnMajor, fd::kSbRowMnMajor, out))
          << "BN=" << bn << " output " << out;
    }
  }
}

namespace {

/// D^T's tiles (gemm_d_transposed): a part's buffer holds each element once, within the buffer; the per-lane form the
/// kernel stores with (lane_base, lane_swizzle and a constant per element) equals offset_transposed; and a warp's 32
/// scalar stores of one accumulator register (8 rows, 4 columns 2 apart) hit 32 distinct banks.
template <uint32_t BN>
void check_transposed_parts() {
  constexpr uint32_t kOut = fd::kOutF32AddToDT;
  constexpr uint32_t kCols = fd::gemm_store_cols(BN, kOut, false);
  using Tile = fd::EpilogueTile<128, BN, 4, kCols, fd::gemm_store_buffers(BN, kOut, false), true>;
  static_assert(kCols == (BN > 64 ? 32u : BN), "parts of 32 columns: a TMA box's 32 rows of D");
  std::set<uint32_t> words;
  for (uint32_t row = 0; row < 128; ++row)
    for (uint32_t col = 0; col < kCols; ++col) {
      const uint32_t off = Tile::offset_transposed(row, col);
      ASSERT_LT(off, Tile::kBufferBytes) << "BN=" << BN << " row " << row << " col " << col;
      ASSERT_TRUE(words.insert(off).second) << "BN=" << BN << " row " << row << " col " << col;
    }
  for (uint32_t warp_row0 = 0; warp_row0 < 128; warp_row0 += 16)  // a warp's 16 rows
    for (uint32_t j = 0; j < kCols / 8; ++j)
      for (uint32_t h = 0; h < 2; ++h)
        for (uint32_t e = 0; e < 2; ++e) {
          std::set<uint32_t> banks;
          for (uint32_t lane = 0; lane < 32; ++lane) {
            const uint32_t row0 = warp_row0 + lane / 4, q = lane % 4;
            const uint32_t fast = Tile::lane_base(row0, q) + (8 * j + e) * 128 +
                                  (Tile::lane_swizzle(row0, q) ^ (h << 5 | e << 4));
            ASSERT_EQ(fast, Tile::offset_transposed(row0 + 8 * h, 8 * j + 2 * q + e))
                << "BN=" << BN << " rows " << warp_row0 << "+ lane " << lane << " j " << j << " h " << h << " e " << e;
            banks.insert(fast / 4 % 32);
          }
          ASSERT_EQ(banks.size(), 32u) << "BN=" << BN << " rows " << warp_row0 << "+ j " << j << " h " << h << " e "
                                       << e;
        }
}

}  // namespace

TEST(Epilogue, TransposedPartsAreDistinctConflictFreeAndTheLaneFormMatches) {
  check_transposed_parts<64>();
  check_transposed_parts<128>();
  check_transposed_parts<144>();
  check_transposed_parts<160>();
}

namespace {

/// bf16 tiles of D^T (kOutBf16DT): the tile fills its shared bytes, each element once; element (row, col) lies in
/// row `col` of its warpgroup's slab, in the 16-byte chunk TMA's 128-byte swizzle puts tile rows 8k..8k+7 at; and
/// stmatrix.trans (each lane's row address per 16 columns, plus 2048 bytes per column group) stores each 8x8 matrix's
/// column c at element (row, col) with row = the matrix's rows, col its column c, its 8 rows of a phase in 8 distinct
/// 16-byte chunks of the banks (no conflict).
template <uint32_t BN>
void check_transposed_bf16_tile() {
  using Tile = fd::EpilogueTile<128, BN, 2, BN, 1, true>;
  static_assert(Tile::kTransposedBf16SlabBytes * 2 == 128 * BN * 2, "two slabs hold the tile");
  std::set<uint32_t> elements;
  for (uint32_t row = 0; row < 128; ++row)
    for (uint32_t col = 0; col < BN; ++col) {
      const uint32_t off = Tile::offset_transposed_bf16(row, col);
      ASSERT_LT(off, 128 * BN * 2) << "BN=" << BN << " row " << row << " col " << col;
      ASSERT_TRUE(elements.insert(off).second) << "BN=" << BN << " row " << row << " col " << col;
      const uint32_t in_slab = off - (row / 64) * Tile::kTransposedBf16SlabBytes;
      ASSERT_EQ(in_slab / 128, col) << "BN=" << BN << ": D's row of the tile's column";
      ASSERT_EQ((in_slab / 16 % 8) ^ (col % 8), row % 64 / 8) << "BN=" << BN << ": the 128-byte swizzle's chunk";
      ASSERT_EQ(in_slab % 16, row % 8 * 2) << "BN=" << BN << ": D's column inside the chunk";
    }
  for (uint32_t wg = 0; wg < 2; ++wg)
    for (uint32_t warp = 0; warp < 4; ++warp)
      for (uint32_t i = 0; i < BN / 16; ++i)
        for (uint32_t matrix = 0; matrix < 4; ++matrix) {
          std::set<uint32_t> chunks;
          for (uint32_t r = 0; r < 8; ++r) {
            const uint32_t lane = matrix * 8 + r;
            const uint32_t addr = Tile::stmatrix_trans_offset(wg, warp, lane, i);
            ASSERT_EQ(addr, Tile::stmatrix_trans_offset(wg, warp, lane, 0) + i * 16 * 128);
            // Matrix m of the x4 store holds the accumulators' rows 8 (m % 2) and columns 8 (m / 2) of the warp's
            // 16 x 16 block; the lane's row is the matrix's column r, 8 bf16 of its 8 rows from the chunk's start.
            const uint32_t row = wg * 64 + warp * 16 + 8 * (matrix % 2), col = 16 * i + 8 * (matrix / 2) + r;
            ASSERT_EQ(addr, Tile::offset_transposed_bf16(row, col)) << "BN=" << BN << " lane " << lane << " i " << i;
            chunks.insert(addr / 16 % 8);
          }
          ASSERT_EQ(chunks.size(), 8u) << "BN=" << BN << " warp " << warp << " i " << i << " matrix " << matrix;
        }
}

}  // namespace

TEST(Epilogue, TransposedBf16TileIsTheSwizzledBoxAndStmatrixTransIsConflictFree) {
  check_transposed_bf16_tile<128>();
  check_transposed_bf16_tile<144>();
  check_transposed_bf16_tile<160>();
  check_transposed_bf16_tile<176>();
}
