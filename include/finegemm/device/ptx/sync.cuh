// Barriers, cluster queries and register reconfiguration (PTX ISA 9.7.13, 9.7.17.1). One function = one instruction.
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::device::ptx {

/// bar.sync on named barrier `id` among `num_threads` threads (a multiple of 32).
FG_DEVICE void named_barrier_sync(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

/// Signals named barrier `id` without waiting (the other side waits with named_barrier_sync).
FG_DEVICE void named_barrier_arrive(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

FG_DEVICE void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }

/// barrier.cluster.arrive.relaxed: arrives without ordering this thread's earlier memory operations for the cluster;
/// what the peer CTAs must see first needs its own fence (fence.mbarrier_init for barrier initialization).
FG_DEVICE void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }

FG_DEVICE void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

FG_DEVICE uint32_t cluster_cta_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

/// griddepcontrol.wait: with programmatic dependent launch, waits until the grids this one depends on completed and
/// their memory operations are visible; returns at once in a grid launched without it.
FG_DEVICE void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

/// griddepcontrol.launch_dependents: this CTA no longer holds back the launch of the grids that depend on this one
/// programmatically (they still wait for its completion in grid_dependency_wait before touching memory).
FG_DEVICE void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

template <int kRegisters>
FG_DEVICE void setmaxnreg_inc() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256, "setmaxnreg takes 24..256, step 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

template <int kRegisters>
FG_DEVICE void setmaxnreg_dec() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256, "setmaxnreg takes 24..256, step 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

/// threadIdx.x read from its special register where it is used (ptxas may then read it again rather than keep it).
FG_DEVICE uint32_t thread_index() {
  uint32_t tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return tid;
}

FG_DEVICE uint32_t lane_id() {
  uint32_t lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}

}  // namespace finegemm::device::ptx
