// mbarrier: shared-memory barriers with transaction counts (PTX ISA 9.7.13.15). One function = one instruction.
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::device::ptx {

FG_DEVICE uint32_t smem_addr(const void* ptr) { return static_cast<uint32_t>(__cvta_generic_to_shared(ptr)); }

// Each barrier operation takes the barrier's 32-bit shared-memory address; the pointer forms convert it. Kernels at
// their register limit keep 32-bit addresses where generic pointers spilled (the tile ring).
FG_DEVICE void mbarrier_init(uint32_t bar, uint32_t arrive_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrive_count) : "memory");
}
FG_DEVICE void mbarrier_init(uint64_t* bar, uint32_t arrive_count) { mbarrier_init(smem_addr(bar), arrive_count); }

/// Makes barrier initialisation visible to the async proxy and to the other CTAs of the cluster.
FG_DEVICE void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

/// Orders this thread's generic-proxy shared-memory accesses before later async-proxy (TMA, wgmma) accesses.
FG_DEVICE void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

FG_DEVICE void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
FG_DEVICE void mbarrier_arrive(uint64_t* bar) { mbarrier_arrive(smem_addr(bar)); }

/// An arrive on `bar` once every cp.async this thread issued before it has completed (PTX ISA
/// cp.async.mbarrier.arrive). `.noinc`: it counts as one of the arrivals the barrier was initialized to expect.
FG_DEVICE void mbarrier_arrive_on_cp_async_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

FG_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

/// Address of `ptr`'s shared-memory location in CTA `cta_rank` of this cluster (distributed shared memory).
FG_DEVICE uint32_t mapa_shared(const void* ptr, uint32_t cta_rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(ptr)), "r"(cta_rank));
  return remote;
}

/// Arrives on the mbarrier at `bar`'s offset in CTA `cta_rank` of this cluster, releasing this thread's earlier writes
/// at cluster scope (for data sent through distributed shared memory).
FG_DEVICE void mbarrier_arrive_cluster_release(uint64_t* bar, uint32_t cta_rank) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(mapa_shared(bar, cta_rank))
               : "memory");
}

/// Upper bound, in ns, a waiting thread may be suspended in try_wait before re-checking (it wakes on completion):
/// suspended warps leave issue slots to the warps doing useful work instead of spinning.
inline constexpr uint32_t kMbarrierSuspendTimeHint = 0x989680;

/// One try of waiting for the phase with parity `phase` to complete; true once it has.
FG_DEVICE bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t phase) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(phase), "r"(kMbarrierSuspendTimeHint)
      : "memory");
  return done != 0;
}

/// As above, without the suspend-time hint (the thread suspends for the system's own limit): for waits polled by a
/// warp vote (the tile ring's), where the hint was not measured.
FG_DEVICE bool mbarrier_try_wait_parity_unhinted(uint32_t bar, uint32_t phase) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(phase)
      : "memory");
  return done != 0;
}

/// Whether the phase with parity `phase` has completed, without waiting (acquires like a successful try_wait).
FG_DEVICE bool mbarrier_test_wait_parity(uint64_t* bar, uint32_t phase) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(phase)
      : "memory");
  return done != 0;
}

FG_DEVICE void mbarrier_wait(uint64_t* bar, uint32_t phase) {
  while (!mbarrier_try_wait_parity(bar, phase)) {
  }
}

/// Waits for the phase with parity `phase` to complete, acquiring at cluster scope what the arrivals released.
FG_DEVICE void mbarrier_wait_cluster_acquire(uint64_t* bar, uint32_t phase) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(phase)
        : "memory");
  }
}

}  // namespace finegemm::device::ptx
