// Warpgroup matrix multiply-accumulate (PTX ISA 9.7.15). One function = one instruction.
#pragma once

#include "finegemm/device/common/types.cuh"
#include "finegemm/device/ptx/wgmma_fp8_shapes.cuh"

namespace finegemm::device::ptx {

FG_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

FG_DEVICE void wgmma_commit_group() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

template <int kPending>
FG_DEVICE void wgmma_wait_group() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma group count is an immediate 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

/// wgmma_wait_group<n> for an n known only after unrolling (0..7): the switch folds to one instruction.
FG_DEVICE void wgmma_wait_group_at_most(uint32_t n) {
  switch (n) {
    case 0: wgmma_wait_group<0>(); break;
    case 1: wgmma_wait_group<1>(); break;
    case 2: wgmma_wait_group<2>(); break;
    case 3: wgmma_wait_group<3>(); break;
    case 4: wgmma_wait_group<4>(); break;
    case 5: wgmma_wait_group<5>(); break;
    case 6: wgmma_wait_group<6>(); break;
    default: wgmma_wait_group<7>(); break;
  }
}

/// Pins an accumulator register so the compiler does not move its uses across wgmma fences or waits.
FG_DEVICE void wgmma_fence_operand(float& reg) { asm volatile("" : "+f"(reg)::"memory"); }

/// Swizzle modes of shared-memory matrix descriptors (bits 62-63).
enum class SmemSwizzle : uint64_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

/// Shared-memory matrix descriptor for a K-major operand tile written by TMA with 128-byte swizzle: rows of 128 bytes,
/// 8-row atoms of 1024 bytes (stride byte offset), leading byte offset unused for swizzled K-major layouts.
FG_DEVICE uint64_t make_smem_desc_k_major_sw128(const void* smem_ptr) {
  constexpr uint64_t kStrideBytes = 1024;
  const uint64_t addr = smem_addr(smem_ptr);
  uint64_t desc = 0;
  desc |= (addr & 0x3FFFF) >> 4;                                     // start address, bits 0-13
  desc |= uint64_t(1) << 16;                                         // leading byte offset (ignored), bits 16-29
  desc |= (kStrideBytes >> 4) << 32;                                 // stride byte offset, bits 32-45
  desc |= static_cast<uint64_t>(SmemSwizzle::k128B) << 62;           // layout type
  return desc;
}

/// The descriptor made of its two 32-bit words. The main loop advances only the low word (start address / 16, bits
/// 0-13) per stage and adds the K step to the whole descriptor; shared addresses stay below 256 KB, so neither add
/// carries out of the field.
FG_DEVICE uint64_t smem_desc_from_words(uint32_t lo, uint32_t hi) {
  uint64_t desc;
  asm("mov.b64 %0, {%1, %2};" : "=l"(desc) : "r"(lo), "r"(hi));
  return desc;
}

/// D[64 x N] (+)= A[64 x 32] * B[N x 32]^T, fp8 e4m3 inputs, fp32 accumulators (N/2 per thread).
template <int N>
FG_DEVICE void wgmma_m64k32_e4m3(uint64_t desc_a, uint64_t desc_b, float (&d)[N / 2], bool accumulate) {
  WgmmaFp8<N>::mma(desc_a, desc_b, d, accumulate ? 1u : 0u);
}

}  // namespace finegemm::device::ptx
