// Split-K across a 2-CTA cluster (dense GEMMs whose few narrow tiles would leave SMs idle): both CTAs compute the
// same tile, each over about half of the K blocks (CTA 0 a few more: GemmTraits::kSplitKLead). CTA 1 sends its fp32
// partial sums into CTA 0's shared memory; CTA 0 adds them to its own (its own first, so the result is deterministic)
// and stores the tile.
#pragma once

#include "finegemm/device/gemm/math.cuh"
#include "finegemm/device/gemm/pipeline.cuh"
#include "finegemm/device/gemm/producer.cuh"
#include "finegemm/device/ptx/ld_st.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/ptx/sync.cuh"

namespace finegemm::device {

/// The partial-sum exchange of one math thread. Element c * 4 + e of a thread's sums sits in float4 chunk c of the
/// exchange buffer, threads side by side (consecutive threads write consecutive 16 bytes).
template <class Cfg>
struct SplitKExchange {
  static constexpr uint32_t kNumMathThreads = Cfg::kNumMathThreads;
  static constexpr uint32_t kExchangeBytes = Cfg::kNumAccumChunks * kNumMathThreads * 16;

  const GemmSmem& smem;
  uint32_t phase = 0;  // parity of the exchange's current phase

  /// CTA 1: waits until CTA 0 read the previous tile's sums, then sends this tile's with st.async: each store counts
  /// its bytes on CTA 0's exchange_full barrier, which CTA 0 arms with the total, so no fence or per-thread remote
  /// arrive is needed (those took ~1 us a tile on an H100).
  FG_DEVICE void send(MathWarpgroup<Cfg>& math) {
    float* my_chunks = smem.exchange + threadIdx.x * 4;
    ptx::mbarrier_wait_cluster_acquire(smem.exchange_empty, phase ^ 1);
    const uint32_t remote = ptx::mapa_shared(my_chunks, 0);
    const uint32_t remote_full = ptx::mapa_shared(smem.exchange_full, 0);
#pragma unroll
    for (uint32_t c = 0; c < Cfg::kNumAccumChunks; ++c) {
      const float* v = math.accum_chunk(c);
      ptx::st_async_v4_f32(remote + c * kNumMathThreads * 16, v[0], v[1], v[2], v[3], remote_full);
    }
    phase ^= 1;
  }

  /// CTA 0: waits for CTA 1's sums and adds them to its own.
  FG_DEVICE void receive(MathWarpgroup<Cfg>& math) {
    float* my_chunks = smem.exchange + threadIdx.x * 4;
    if (threadIdx.x == 0) ptx::mbarrier_arrive_expect_tx(smem.exchange_full, kExchangeBytes);
    ptx::mbarrier_wait_cluster_acquire(smem.exchange_full, phase);
#pragma unroll
    for (uint32_t c = 0; c < Cfg::kNumAccumChunks; ++c) {
      const float4 v = ptx::ld_shared_v4_f32(my_chunks + c * kNumMathThreads * 4);
      float* acc = math.accum_chunk(c);
      acc[0] += v.x;
      acc[1] += v.y;
      acc[2] += v.z;
      acc[3] += v.w;
    }
  }

  /// CTA 0 frees its exchange buffer for CTA 1's next tile once every math thread read its chunks: one remote arrive,
  /// after the tile's store went out (a cluster-scope release took ~0.5 us on an H100; 128 of them, one per thread,
  /// longer). Not after the cluster's last tile: CTA 1 sends nothing more.
  FG_DEVICE void release() {
    ptx::named_barrier_sync(static_cast<uint32_t>(NamedBarrier::kMathAll), kNumMathThreads);
    if (threadIdx.x == 0) ptx::mbarrier_arrive_cluster_release(smem.exchange_empty, 1);
    phase ^= 1;
  }
};

}  // namespace finegemm::device
