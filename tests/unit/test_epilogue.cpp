// The epilogue's shared output tile: the offsets of its 16-byte chunks are distinct, the 8 rows of each stmatrix matrix
// fall in distinct bank groups (no conflicts), and the one-XOR form the kernel uses for each stmatrix address
// (chunk_offset) equals the full offset computation, for every slab swizzle (32, 64, 128 bytes). Runs on the host.
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
