// Split-K across a 2-CTA cluster (dense GEMMs whose few narrow tiles would leave SMs idle): both CTAs compute the
// same tile, each over about half of the K blocks (with 64-row tiles CTA 0 a few more: GemmTraits::kSplitKLead). Each
// math warpgroup's 64 rows are added and stored by one CTA, warpgroup w's by CTA w % 2: with 64-row tiles CTA 1 sends
// all its partial sums to CTA 0; with 128-row tiles each CTA sends the other the rows it does not own, and both add and
// store at once. The sums arrive through distributed shared memory. A tile's two partial sums are added in one
// operation (fp32 addition is commutative), so the result does not depend on which CTA adds them.
#pragma once

#include "finegemm/device/gemm/math.cuh"
#include "finegemm/device/gemm/pipeline.cuh"
#include "finegemm/device/gemm/producer.cuh"
#include "finegemm/device/ptx/ld_st.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/ptx/sync.cuh"

namespace finegemm::device {

/// The partial-sum exchange of one math thread. Element c * 4 + e of a thread's sums sits in float4 chunk c of the
/// receiving CTA's exchange buffer, the warpgroup's threads side by side (consecutive threads write consecutive 16
/// bytes); a thread sends to the thread of the same warpgroup and place in the other CTA, which holds the same
/// elements of the tile.
template <class Cfg>
struct SplitKExchange {
  static constexpr uint32_t kWarpgroupThreads = 128;
  static constexpr uint32_t kExchangeBytes = Cfg::kNumAccumChunks * kWarpgroupThreads * 16;  // one warpgroup's sums

  const GemmSmem& smem;
  uint32_t wg_thread;  // this thread's place in its warpgroup
  uint32_t peer;       // the other CTA's rank in the cluster
  uint32_t phase = 0;  // parity of the exchange's current phase

  /// Whether this CTA adds and stores the rows of math warpgroup `math_wg` (the other CTA sends it its sums of them).
  FG_DEVICE static bool owns(uint32_t math_wg, uint32_t cta_rank) { return math_wg % 2 == cta_rank; }

  /// A warpgroup whose rows the other CTA owns: waits until that CTA read the previous tile's sums, then sends this
  /// tile's with st.async. Each store counts its bytes on the other CTA's exchange_full barrier, which its receiving
  /// warpgroup arms with the total, so no fence or per-thread remote arrive is needed (those took ~1 us a tile on an
  /// H100).
  FG_DEVICE void send(MathWarpgroup<Cfg>& math) {
    float* my_chunks = smem.exchange + wg_thread * 4;
    ptx::mbarrier_wait_cluster_acquire(smem.exchange_empty, phase ^ 1);
    const uint32_t remote = ptx::mapa_shared(my_chunks, peer);
    const uint32_t remote_full = ptx::mapa_shared(smem.exchange_full, peer);
#pragma unroll
    for (uint32_t c = 0; c < Cfg::kNumAccumChunks; ++c) {
      const float* v = math.accum_chunk(c);
      ptx::st_async_v4_f32(remote + c * kWarpgroupThreads * 16, v[0], v[1], v[2], v[3], remote_full);
    }
    phase ^= 1;
  }

  /// A warpgroup whose rows this CTA owns: waits for the other CTA's sums of them and adds them to its own.
  FG_DEVICE void receive(MathWarpgroup<Cfg>& math) {
    float* my_chunks = smem.exchange + wg_thread * 4;
    if (wg_thread == 0) ptx::mbarrier_arrive_expect_tx(smem.exchange_full, kExchangeBytes);
    ptx::mbarrier_wait_cluster_acquire(smem.exchange_full, phase);
#pragma unroll
    for (uint32_t c = 0; c < Cfg::kNumAccumChunks; ++c) {
      const float4 v = ptx::ld_shared_v4_f32(my_chunks + c * kWarpgroupThreads * 4);
      float* acc = math.accum_chunk(c);
      acc[0] += v.x;
      acc[1] += v.y;
      acc[2] += v.z;
      acc[3] += v.w;
    }
  }

  /// The receiving warpgroup frees the exchange buffer for the other CTA's next tile once all its threads read their
  /// chunks: one remote arrive, after the tile's store went out (a cluster-scope release took ~0.5 us on an H100; 128
  /// of them, one per thread, longer). Not after the cluster's last tile: nothing more is sent.
  FG_DEVICE void release(uint32_t wg_barrier) {
    ptx::named_barrier_sync(wg_barrier, kWarpgroupThreads);
    if (wg_thread == 0) ptx::mbarrier_arrive_cluster_release(smem.exchange_empty, peer);
    phase ^= 1;
  }
};

}  // namespace finegemm::device
