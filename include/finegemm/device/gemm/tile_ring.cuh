// The math warps' tiles, walked for them by one producer thread: the math then starts a tile with a shared-memory read
// instead of the scheduler's walk (its index arithmetic and, for the contiguous layout, a global-memory round trip
// between two tiles). Two slots, each with a full barrier (the publisher's arrival) and an empty one (every math
// thread's). Everything is addressed from one 32-bit shared address (generic pointers to it spilled in the kernels
// at the register limit).
#pragma once

#include "finegemm/device/common/types.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/scheduler.cuh"

namespace finegemm::device {

/// The ring's shared memory: two slots of 12 words (Tile's fields, then 1 if it is a tile, 0 once the walk is over),
/// then the two full barriers and the two empty ones.
struct TileRingLayout {
  static constexpr uint32_t kSlotBytes = 48;
  static constexpr uint32_t kFull = 2 * kSlotBytes;
  static constexpr uint32_t kEmpty = kFull + 16;
  static constexpr uint32_t kBytes = kEmpty + 16;
};

/// Called by one thread before the CTA's barrier sync.
FG_DEVICE void init_tile_ring(uint32_t ring, uint32_t num_math_threads) {
  for (uint32_t r = 0; r < 2; ++r) {
    ptx::mbarrier_init(ring + TileRingLayout::kFull + 8 * r, 1);
    ptx::mbarrier_init(ring + TileRingLayout::kEmpty + 8 * r, num_math_threads);
  }
}

/// The publisher (one thread): every tile of the walk into the ring, then an end marker.
template <class Scheduler>
FG_DEVICE void publish_tiles(Scheduler& scheduler, uint32_t ring) {
  uint32_t slot = 0, phase = 0;
  bool more = true;
  while (more) {
    Tile t;
    more = scheduler.next(t);
    while (!ptx::mbarrier_try_wait_parity_unhinted(ring + TileRingLayout::kEmpty + 8 * slot, phase ^ 1)) {
    }
    const uint32_t w = ring + slot * TileRingLayout::kSlotBytes;
    asm volatile("st.shared.v4.s32 [%0], {%1, %2, %3, %4};" ::"r"(w), "r"(t.group), "r"(t.m_block), "r"(t.n_block),
                 "r"(t.row_base)
                 : "memory");
    asm volatile("st.shared.v4.s32 [%0], {%1, %2, %3, %4};" ::"r"(w + 16), "r"(t.row_limit), "r"(t.first_row),
                 "r"(t.compute_rows), "r"(int32_t(t.check_rows) | (int32_t(t.wide) << 1))
                 : "memory");
    asm volatile("st.shared.v4.s32 [%0], {%1, %2, %3, %4};" ::"r"(w + 32), "r"(t.k_block0), "r"(t.num_k_blocks),
                 "r"(int32_t(more)), "r"(0)
                 : "memory");
    ptx::mbarrier_arrive(ring + TileRingLayout::kFull + 8 * slot);  // releases the slot's stores
    if (++slot == 2) {
      slot = 0;
      phase ^= 1;
    }
  }
}

/// A math thread's side of the ring.
struct TileSubscriber {
  uint32_t ring;
  uint32_t slot = 0;
  uint32_t phase = 0;

  /// The next tile; false once there is none left. Every thread of the warp calls it. The wait is a warp vote: with
  /// a per-thread exit from the wait loop, ptxas kept the K loop's stage index out of the uniform registers (195 ->
  /// 258 instructions per iteration of the 256x128 kernels).
  FG_DEVICE bool next(Tile& t) {
    const uint32_t full = ring + TileRingLayout::kFull + 8 * slot;
    while (!__all_sync(0xffffffffu, ptx::mbarrier_try_wait_parity_unhinted(full, phase))) {
    }
    const uint32_t w = ring + slot * TileRingLayout::kSlotBytes;
    int32_t v[12];
    asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "r"(w)
                 : "memory");
    asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];" : "=r"(v[4]), "=r"(v[5]), "=r"(v[6]), "=r"(v[7])
                 : "r"(w + 16)
                 : "memory");
    asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];" : "=r"(v[8]), "=r"(v[9]), "=r"(v[10]), "=r"(v[11])
                 : "r"(w + 32)
                 : "memory");
    ptx::mbarrier_arrive(ring + TileRingLayout::kEmpty + 8 * slot);
    phase ^= slot;
    slot ^= 1;
    t.group = v[0];
    t.m_block = v[1];
    t.n_block = v[2];
    t.row_base = v[3];
    t.row_limit = v[4];
    t.first_row = v[5];
    t.compute_rows = v[6];
    t.check_rows = (v[7] & 1) != 0;
    t.wide = (v[7] & 2) != 0;
    t.k_block0 = v[8];
    t.num_k_blocks = v[9];
    return v[10] != 0;
  }
};

}  // namespace finegemm::device
