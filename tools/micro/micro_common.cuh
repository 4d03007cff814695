// Helpers shared by the wgmma microbenchmarks; the PTX wrappers are the library's own.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/ptx/sync.cuh"
#include "finegemm/device/ptx/wgmma.cuh"
#include "micro_mma.cuh"

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

namespace ptx = finegemm::device::ptx;
