// A kernel that does nothing with its argument block: the driver's own cost of a launch, against which the GPU tests
// read a warm GEMM call's host time (instantiated with device::GemmArgs, the block the GEMMs take by value).
#pragma once

#include "finegemm/device/common/gemm_args.cuh"

namespace finegemm::tools {

template <typename Args>
__global__ void empty_kernel(const __grid_constant__ Args args) {
  (void)args;
}

}  // namespace finegemm::tools
