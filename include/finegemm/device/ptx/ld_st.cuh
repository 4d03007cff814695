// Loads, stores and conversions (PTX ISA 9.7.9, 9.7.16.3 stmatrix, 9.7.9.21 cvt). One function = one instruction.
#pragma once

#include "finegemm/device/common/types.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"

namespace finegemm::device::ptx {

/// `v`, hidden from the optimizer: it is computed where it stands, neither recomputed inside a loop from its inputs
/// nor values derived from it hoisted out of one.
FG_DEVICE uint32_t opaque(uint32_t v) {
  uint32_t r;
  asm volatile("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
  return r;
}

/// Four floats into another CTA's shared memory (a mapa address); their 16 bytes count as completed transactions on
/// the mbarrier at `remote_bar` in that CTA (st.async: no fence, the mbarrier's phase publishes them).
FG_DEVICE void st_async_v4_f32(uint32_t remote_addr, float a, float b, float c, float d, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   remote_addr),
               "r"(__float_as_uint(a)), "r"(__float_as_uint(b)), "r"(__float_as_uint(c)), "r"(__float_as_uint(d)),
               "r"(remote_bar)
               : "memory");
}

FG_DEVICE float4 ld_shared_v4_f32(const float* ptr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(smem_addr(ptr)));
  return v;
}

FG_DEVICE float ld_shared_f32(const float* ptr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(smem_addr(ptr)));
  return v;
}

FG_DEVICE float2 ld_shared_v2_f32(const float* ptr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(smem_addr(ptr)));
  return v;
}

FG_DEVICE void st_shared_f32(float* ptr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(smem_addr(ptr)), "f"(v) : "memory");
}

FG_DEVICE void st_shared_v2_f32(float* ptr, float2 v) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(smem_addr(ptr)), "f"(v.x), "f"(v.y) : "memory");
}

/// Global load. Not the non-coherent path (ld.global.nc), whose data must stay unchanged for the kernel's whole life:
/// under programmatic dependent launch the previous kernel may still be writing it when this one starts, and ptxas
/// then hoists .nc loads above griddepcontrol.wait (seen in the quantizers' SASS).
FG_DEVICE float ld_global_f32(const float* ptr) {
  float v;
  asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(ptr) : "memory");
  return v;
}

/// Asynchronous copy of one fp32 from global to shared memory (PTX ISA cp.async, 4 bytes through L1); with `valid`
/// false nothing is read and the destination is set to zero. Completion: mbarrier_arrive_on_cp_async_noinc.
FG_DEVICE void cp_async_f32(float* smem_dst, const float* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr(smem_dst)), "l"(src),
               "r"(valid ? 4u : 0u)
               : "memory");
}

FG_DEVICE int32_t ld_global_s32(const int32_t* ptr) {
  int32_t v;
  asm volatile("ld.global.s32 %0, [%1];" : "=r"(v) : "l"(ptr) : "memory");
  return v;
}

FG_DEVICE void ld_shared_v4_b32(const void* ptr, uint32_t (&v)[4]) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "r"(smem_addr(ptr)));
}

FG_DEVICE void st_global_v4_b32(void* ptr, const uint32_t (&v)[4]) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}

/// Packs two floats into bf16x2 with round-to-nearest-even: `lo` in the low half.
/// Atomic fp32 add to global memory without a result (red: the add happens in the L2).
FG_DEVICE void red_add_global_f32(float* ptr, float v) {
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(ptr), "f"(v) : "memory");
}

FG_DEVICE uint32_t cvt_bf16x2(float lo, float hi) {
  uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
}

/// Four 8x8 b16 matrices to shared memory; lane i gives the row address for matrix i / 8, row i % 8.
FG_DEVICE void stmatrix_x4(void* row_ptr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr(row_ptr)), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

/// stmatrix_x4 with each matrix stored transposed: lane i gives the address of matrix i / 8's row i % 8, which
/// receives the matrix's column i % 8.
FG_DEVICE void stmatrix_x4_trans(void* row_ptr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.x4.trans.m8n8.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr(row_ptr)),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

FG_DEVICE void atomic_or_global(uint32_t* ptr, uint32_t bits) {
  asm volatile("red.relaxed.gpu.global.or.b32 [%0], %1;" ::"l"(ptr), "r"(bits) : "memory");
}

}  // namespace finegemm::device::ptx
