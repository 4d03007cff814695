// Bulk tensor copies (TMA) between global and shared memory (PTX ISA 9.7.9.25). One function = one instruction.
#pragma once

#include "finegemm/device/common/types.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"

namespace finegemm::device::ptx {

FG_DEVICE void tma_prefetch_descriptor(const TmaDescriptor* desc) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(desc)) : "memory");
}

/// 2D tile prefetched into the L2 (no shared memory, no barrier: a hint the memory system may drop).
FG_DEVICE void tma_prefetch_2d_l2(const TmaDescriptor* desc, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" ::"l"(
                   reinterpret_cast<uint64_t>(desc)),
               "r"(c0), "r"(c1)
               : "memory");
}

/// 2D tile load into this CTA's shared memory, completing `bytes` on `bar`.
FG_DEVICE void tma_load_2d(const TmaDescriptor* desc, uint64_t* bar, void* smem_dst, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}

/// Contiguous bytes (a multiple of 16, both addresses 16-byte aligned) copied into this CTA's shared memory without a
/// tensor map, completing `bytes` on `bar`.
FG_DEVICE void bulk_load(void* smem_dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(smem_dst)),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

/// An L2 eviction policy for the whole of each access (PTX ISA createpolicy.fractional, fraction 1.0): the lines
/// are replaced before any other line of their set.
FG_DEVICE uint64_t l2_policy_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

/// tma_load_2d with an L2 eviction policy (l2_policy_evict_first) for the lines it brings in.
FG_DEVICE void tma_load_2d_hinted(const TmaDescriptor* desc, uint64_t* bar, void* smem_dst, int32_t c0, int32_t c1,
                                  uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
      "[%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}

/// 2D tile store from shared memory, tracked by the bulk async-group of this thread.
FG_DEVICE void tma_store_2d(const TmaDescriptor* desc, const void* smem_src, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(desc)),
               "r"(smem_addr(smem_src)), "r"(c0), "r"(c1)
               : "memory");
}

/// tma_store_2d with an L2 eviction policy (l2_policy_evict_first) for the lines it writes.
FG_DEVICE void tma_store_2d_hinted(const TmaDescriptor* desc, const void* smem_src, int32_t c0, int32_t c1,
                                   uint64_t policy) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], %4;" ::"l"(
                   reinterpret_cast<uint64_t>(desc)),
               "r"(smem_addr(smem_src)), "r"(c0), "r"(c1), "l"(policy)
               : "memory");
}

/// 2D tile reduction into global memory: each element of the box is added to the one it lands on (fp32 add in the
/// L2), tracked by the bulk async-group of this thread like a store.
FG_DEVICE void tma_reduce_add_2d(const TmaDescriptor* desc, const void* smem_src, int32_t c0, int32_t c1) {
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<uint64_t>(desc)),
               "r"(smem_addr(smem_src)), "r"(c0), "r"(c1)
               : "memory");
}

FG_DEVICE void tma_store_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

/// Waits until at most kPending bulk groups are still reading their shared-memory source.
template <int kPending>
FG_DEVICE void tma_store_wait_read() {
  static_assert(kPending >= 0 && kPending < 8, "bulk group count is an immediate 0..7");
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}

/// Waits until at most kPending bulk groups are incomplete (their writes visible).
template <int kPending>
FG_DEVICE void tma_store_wait() {
  static_assert(kPending >= 0 && kPending < 8, "bulk group count is an immediate 0..7");
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}

// ---- Tensor-map updates in global memory (the K-grouped GEMM's per-group descriptors of A and B) ----
// A CTA rewrites a descriptor in global memory with generic stores and tensormap.replace, then makes it visible to
// the TMA unit (the tensormap proxy) with a release fence and an acquire fence on its address before it loads through
// it. The PTX ISA's pattern (fence.proxy.tensormap); the descriptor is 128 bytes, 128-byte aligned.

/// Copies the 128-byte descriptor `src` (a kernel parameter) to `dst` in global memory with generic stores.
FG_DEVICE void tensormap_copy_to_global(TmaDescriptor* dst, const TmaDescriptor* src) {
#pragma unroll
  for (int i = 0; i < 16; i += 2) {
    asm volatile("st.global.v2.b64 [%0], {%1, %2};" ::"l"(reinterpret_cast<uint64_t>(&dst->opaque[i])),
                 "l"(src->opaque[i]), "l"(src->opaque[i + 1])
                 : "memory");
  }
}

/// Sets the global address of the tensor map at `desc` (global memory).
FG_DEVICE void tensormap_replace_global_address(TmaDescriptor* desc, const void* address) {
  asm volatile("tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;" ::"l"(
                   reinterpret_cast<uint64_t>(desc)),
               "l"(reinterpret_cast<uint64_t>(address))
               : "memory");
}

/// Sets the extent of dimension 0 (the innermost, in elements) of the tensor map at `desc` (global memory).
FG_DEVICE void tensormap_replace_global_dim0(TmaDescriptor* desc, uint32_t extent) {
  asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 0, %1;" ::"l"(
                   reinterpret_cast<uint64_t>(desc)),
               "r"(extent)
               : "memory");
}

/// Sets the stride of dimension 1 (bytes; the ISA numbers the strides from dimension 1, as ordinal 0) of the tensor
/// map at `desc` (global memory).
FG_DEVICE void tensormap_replace_global_stride0(TmaDescriptor* desc, uint64_t stride_bytes) {
  asm volatile("tensormap.replace.tile.global_stride.global.b1024.b64 [%0], 0, %1;" ::"l"(
                   reinterpret_cast<uint64_t>(desc)),
               "l"(stride_bytes)
               : "memory");
}

/// Orders this thread's earlier generic-proxy writes of tensor maps before later tensormap-proxy reads (GPU scope).
FG_DEVICE void tensormap_fence_release() { asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory"); }

/// Makes the tensor map at `desc` (global memory), released above, visible to this thread's later TMA instructions.
FG_DEVICE void tensormap_fence_acquire(const TmaDescriptor* desc) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(reinterpret_cast<uint64_t>(desc))
               : "memory");
}

}  // namespace finegemm::device::ptx
