// A small kernel that exercises what the GEMM launch path relies on: a 2-CTA cluster, distributed shared memory and
// more than 48 KB of dynamic shared memory. out[i] = in[i] * 2 + (value the peer CTA holds at the same slot).
#pragma once

#include "finegemm/device/common/types.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"  // smem_addr
#include "finegemm/device/ptx/sync.cuh"

namespace finegemm::test {

/// Loads a float from the shared memory of CTA `cta_rank` of this cluster, at the offset of `ptr` in this CTA.
__device__ __forceinline__ float ld_shared_cluster_f32(const float* ptr, uint32_t cta_rank) {
  float v;
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %1, %2;\n"
      "ld.shared::cluster.f32 %0, [remote];\n}\n"
      : "=f"(v)
      : "r"(device::ptx::smem_addr(ptr)), "r"(cta_rank)
      : "memory");
  return v;
}

template <uint32_t kSmemFloats>
__global__ void __launch_bounds__(128, 1) jit_smoke_kernel(float* out, const float* in) {
  static_assert(kSmemFloats % 128 == 0, "whole rows of 128");
  extern __shared__ __align__(16) float smem_buffer[];  // (kSmemFloats)
  const uint32_t base = blockIdx.x * kSmemFloats;
  for (uint32_t i = threadIdx.x; i < kSmemFloats; i += blockDim.x) smem_buffer[i] = in[base + i];
  device::ptx::cluster_arrive();
  device::ptx::cluster_wait();
  const uint32_t peer = device::ptx::cluster_cta_rank() ^ 1;
  for (uint32_t i = threadIdx.x; i < kSmemFloats; i += blockDim.x)
    out[base + i] = smem_buffer[i] * 2.0f + ld_shared_cluster_f32(&smem_buffer[i], peer);
  // Keep this CTA's shared memory alive until the peer has read it.
  device::ptx::cluster_arrive();
  device::ptx::cluster_wait();
}

}  // namespace finegemm::test
