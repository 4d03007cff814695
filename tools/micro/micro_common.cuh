// Helpers shared by the wgmma microbenchmarks; the PTX wrappers are the library's own.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/ptx/sync.cuh"
#include "finegemm/device/ptx/wgmma.cuh"
#include "check.cuh"
#include "micro_mma.cuh"

namespace ptx = finegemm::device::ptx;
