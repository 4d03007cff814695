// The epilogue's shared output tile: the swizzled offsets of its 16-byte chunks are distinct, and the one-XOR form the
// kernel uses for each stmatrix address (chunk_offset) equals the full offset computation. Runs on the host.
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
      for (uint32_t i = 0; i < BN / 16; ++i) {
        ASSERT_EQ(Tile::chunk_offset(Tile::offset(row, col0), i), Tile::offset(row, i * 16 + col0))
            << "BM=" << BM << " BN=" << BN << " row " << row << " chunk " << i << " col0 " << col0;
      }
    }
  }
}

template <uint32_t BM, uint32_t... kBlockNs>
void check_block_ns() {
  (check_tile<BM, kBlockNs>(), ...);
}

}  // namespace

TEST(Epilogue, SwizzledChunksAreDistinctAndStmatrixAddressesMatch) {
  check_block_ns<64, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256>();
  check_block_ns<128, 16, 32, 48, 64, 96, 128, 160, 192>();
  check_block_ns<256, 64, 128>();
}
