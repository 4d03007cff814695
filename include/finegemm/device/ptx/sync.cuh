// Barriers, cluster queries and register reconfiguration (PTX ISA 9.7.13, 9.7.17.1). One function = one instruction.
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::device::ptx {

/// bar.sync on named barrier `id` among `num_threads` threads (a multiple of 32).
FG_DEVICE void named_barrier_sync(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

/// bar.red.or on named barrier `id` among `num_threads` threads: waits like named_barrier_sync and returns whether
/// `pred` held in any of them.
FG_DEVICE bool named_barrier_any(uint32_t id, uint32_t num_threads, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n.reg .pred p, q;\n"
      "setp.ne.u32 p, %3, 0;\n"
      "bar.red.or.pred q, %1, %2, p;\n"
      "selp.u32 %0, 1, 0, q;\n}"
      : "=r"(any)
      : "r"(id), "r"(num_threads), "r"(uint32_t(pred))
      : "memory");
  return any != 0;
}

/// Signals named barrier `id` without waiting (the other side waits with named_barrier_sync).
FG_DEVICE void named_barrier_arrive(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

FG_DEVICE void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }

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

/// %globaltimer: nanoseconds, shared by all SMs (measurement switches only).
FG_DEVICE uint64_t global_timer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

/// %clock: the SM's cycle counter, low 32 bits (measurement switches only). No memory clobber, so that it orders only
/// against the other volatile asm (barriers, wgmma) and leaves the loop's loads and FFMAs where ptxas puts them.
FG_DEVICE uint32_t clock32() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%clock;" : "=r"(t));
  return t;
}

/// %smid: the SM this CTA runs on (measurement switches only).
FG_DEVICE uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

FG_DEVICE uint32_t lane_id() {
  uint32_t lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}

}  // namespace finegemm::device::ptx
