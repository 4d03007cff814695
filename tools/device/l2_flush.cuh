// The benchmark's read flush (`finegemm bench --flush read`, tools/lib/timing.cpp): a grid-stride read of a buffer
// larger than the L2, each line brought in with the L2 evict-first hint, so that the next, timed call finds the L2
// full of clean lines (nothing to write back) that give way first. A kernel of its own, so that nothing that changes
// the GEMM under test (FINEGEMM_FORCE_CONFIG) changes the flush.
#pragma once

#include "finegemm/device/common/types.cuh"
#include "finegemm/device/ptx/tma.cuh"

namespace finegemm::tools {

/// Reads `count` 16-byte pieces of `data`, kUnroll independent loads in flight per thread; writes `sink[0]` only if
/// their XOR is 0x9E3779B9 (never, for the zero-filled flush buffer), so that the loads are kept.
template <uint32_t kUnroll>
__global__ void __launch_bounds__(256) l2_read_flush_kernel(const uint4* data, uint64_t count, uint32_t* sink) {
  const uint64_t policy = device::ptx::l2_policy_evict_first();
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  uint32_t acc = 0;
  for (uint64_t base = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; base < count; base += stride * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const uint64_t i = base + u * stride;
      v[u] = make_uint4(0, 0, 0, 0);
      if (i < count)
        asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                     : "l"(data + i), "l"(policy));
    }
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;
}

}  // namespace finegemm::tools
