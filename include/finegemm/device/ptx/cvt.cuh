// FP8 conversion, the packed-bf16 and approximate-reciprocal arithmetic and the vector global loads/stores of the
// quantizers (PTX ISA 9.7.9.21 cvt, 9.7.3 rcp, 9.7.4 max, 9.7.9.8 ld, 9.7.9.10 st). One function = one
// instruction.
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

/// 1 / x within 1 ulp (denormal inputs and results flushed to zero): a seed for a correctly rounded reciprocal.
FG_DEVICE float rcp_approx_ftz(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

/// Half-wise max(|a|, |b|) of two bf16 pairs, each result half signed with the XOR of the operands' signs (callers
/// take |.| at the end); a NaN half yields the other operand's half.
FG_DEVICE uint32_t max_xorsign_abs_bf16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("max.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

/// 16-byte global load (`ptr` 16-byte aligned) when `pred` holds; otherwise `v` keeps its value and `ptr` is not
/// read. The predicate lives inside the asm so that a guarded load is no branch around a basic block, which would keep
/// ptxas from issuing the loads of one thread back to back. Not through the non-coherent path (ld.global.nc): under
/// programmatic dependent launch its data may still be changing when the kernel starts, and ptxas hoisted such loads
/// above griddepcontrol.wait.
FG_DEVICE void ld_global_v4_b32_if(bool pred, const void* ptr, uint32_t (&v)[4]) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %5, 0;\n"
      "@p ld.global.v4.b32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "+r"(v[0]), "+r"(v[1]), "+r"(v[2]), "+r"(v[3])
      : "l"(ptr), "r"(uint32_t(pred))
      : "memory");
}

/// 8-byte global store (`ptr` 8-byte aligned) when `pred` holds (the predicate inside the asm, as for
/// ld_global_v4_b32_if).
FG_DEVICE void st_global_v2_b32_if(bool pred, void* ptr, uint32_t v0, uint32_t v1) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %3, 0;\n"
      "@p st.global.v2.b32 [%0], {%1, %2};\n}\n" ::"l"(ptr),
      "r"(v0), "r"(v1), "r"(uint32_t(pred))
      : "memory");
}

/// 4-byte global store (`ptr` 4-byte aligned) when `pred` holds.
FG_DEVICE void st_global_b32_if(bool pred, void* ptr, uint32_t v) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %2, 0;\n"
      "@p st.global.b32 [%0], %1;\n}\n" ::"l"(ptr),
      "r"(v), "r"(uint32_t(pred))
      : "memory");
}

}  // namespace finegemm::device::ptx
