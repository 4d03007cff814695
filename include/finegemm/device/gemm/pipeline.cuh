// Small building blocks of the GEMM kernel: compile-time values, named barriers, the stage ring's position.
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::device {

/// A value known at compile time (`value`), or at run time (RuntimeValue), for code written once for both.
template <uint32_t V>
struct Constant {
  static constexpr uint32_t value = V;
};
struct RuntimeValue {
  uint32_t value;
};

/// f(Constant<value>()) for value in [kLow, kHigh] (a value above kHigh takes kHigh's branch).
template <uint32_t kLow, uint32_t kHigh, class F>
FG_DEVICE void with_constant(uint32_t value, F& f) {
  if constexpr (kLow == kHigh) {
    f(Constant<kLow>());
  } else {
    if (value == kLow) {
      f(Constant<kLow>());
    } else {
      with_constant<kLow + 1, kHigh>(value, f);
    }
  }
}

/// Named barriers (id 0 is __syncthreads).
enum class NamedBarrier : uint32_t {
  kMathWarpgroup0 = 1,
  kMathWarpgroup1 = 2,
  kMathTurn0 = 3,
  kMathTurn1 = 4,
};

/// Stage index and phase parity of a ring of kNumStages slots, advanced in one place.
template <uint32_t kNumStages>
struct PipelineState {
  uint32_t stage = 0;
  uint32_t phase = 0;
  FG_DEVICE void advance() {
    if (++stage == kNumStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

}  // namespace finegemm::device
