// FP8 conversion and the vector global loads/stores of the quantizers (PTX ISA 9.7.9.21 cvt, 9.7.9.8 ld,
// 9.7.9.10 st). One function = one instruction.
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::device::ptx {

/// Converts two floats to e4m3 (round to nearest even, finite values beyond +-448 saturate to +-448, NaN stays NaN)
/// and packs them: `lo` in bits 0-7, `hi` in bits 8-15. PTX puts its first source operand in the upper half.
FG_DEVICE uint16_t cvt_e4m3x2(float lo, float hi) {
  uint16_t packed;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(hi), "f"(lo));
  return packed;
}

/// 16-byte read-only global load through the non-coherent path (`ptr` 16-byte aligned).
FG_DEVICE void ld_global_nc_v4_b32(const void* ptr, uint32_t (&v)[4]) {
  asm volatile("ld.global.nc.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "l"(ptr));
}

/// 8-byte global store (`ptr` 8-byte aligned).
FG_DEVICE void st_global_v2_b32(void* ptr, uint32_t v0, uint32_t v1) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(ptr), "r"(v0), "r"(v1) : "memory");
}

}  // namespace finegemm::device::ptx
