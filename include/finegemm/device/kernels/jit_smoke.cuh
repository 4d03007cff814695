// A small kernel that exercises what the GEMM launch path relies on: a 2-CTA cluster, distributed shared memory and
// more than 48 KB of dynamic shared memory. out[i] = in[i] * 2 + (value the peer CTA holds at the same slot).
#pragma once

#include "finegemm/device/common/types.cuh"
#include "finegemm/device/ptx/ld_st.cuh"
#include "finegemm/device/ptx/sync.cuh"

namespace finegemm::device {

template <uint32_t kSmemFloats>
__global__ void __launch_bounds__(128, 1) jit_smoke_kernel(float* out, const float* in) {
  static_assert(kSmemFloats % 128 == 0, "whole rows of 128");
  extern __shared__ __align__(16) float smem_buffer[];  // (kSmemFloats)
  const uint32_t base = blockIdx.x * kSmemFloats;
  for (uint32_t i = threadIdx.x; i < kSmemFloats; i += blockDim.x) smem_buffer[i] = in[base + i];
  ptx::cluster_arrive();
  ptx::cluster_wait();
  const uint32_t peer = ptx::cluster_cta_rank() ^ 1;
  for (uint32_t i = threadIdx.x; i < kSmemFloats; i += blockDim.x)
    out[base + i] = smem_buffer[i] * 2.0f + ptx::ld_shared_cluster_f32(&smem_buffer[i], peer);
  // Keep this CTA's shared memory alive until the peer has read it.
  ptx::cluster_arrive();
  ptx::cluster_wait();
}

}  // namespace finegemm::device
