// The CUDA driver API, opened lazily with dlopen so the library loads (and its CPU tests run) without a GPU driver.
#pragma once

#include <cuda.h>

#include <string>

namespace finegemm::jit {

/// Function pointers of the driver entry points finegemm uses. Obtain with driver(); throws Error(kCuda) with an
/// actionable message when libcuda cannot be opened (no driver installed).
struct DriverApi {
#define FG_DRIVER_FN(name) decltype(&::name) name = nullptr
  FG_DRIVER_FN(cuInit);
  FG_DRIVER_FN(cuGetErrorString);
  FG_DRIVER_FN(cuDriverGetVersion);
  FG_DRIVER_FN(cuDeviceGetCount);
  FG_DRIVER_FN(cuDeviceGet);
  FG_DRIVER_FN(cuDeviceGetAttribute);
  FG_DRIVER_FN(cuDeviceGetName);
  FG_DRIVER_FN(cuDevicePrimaryCtxRetain);
  FG_DRIVER_FN(cuCtxGetCurrent);
  FG_DRIVER_FN(cuCtxSetCurrent);
  FG_DRIVER_FN(cuCtxGetDevice);
  FG_DRIVER_FN(cuCtxSynchronize);
  FG_DRIVER_FN(cuModuleLoadData);
  FG_DRIVER_FN(cuModuleGetFunction);
  FG_DRIVER_FN(cuFuncSetAttribute);
  FG_DRIVER_FN(cuFuncGetAttribute);
  FG_DRIVER_FN(cuLaunchKernelEx);
  FG_DRIVER_FN(cuOccupancyMaxActiveClusters);
  FG_DRIVER_FN(cuTensorMapEncodeTiled);
  FG_DRIVER_FN(cuPointerGetAttributes);
  FG_DRIVER_FN(cuMemAlloc);
  FG_DRIVER_FN(cuMemsetD32);
  FG_DRIVER_FN(cuMemcpyDtoH);
  FG_DRIVER_FN(cuStreamGetCtx);
  FG_DRIVER_FN(cuStreamIsCapturing);
  FG_DRIVER_FN(cuMemsetD32Async);
#undef FG_DRIVER_FN
};

/// The process-wide driver table (opened and cuInit'ed on first use). Throws when no driver is present.
const DriverApi& driver();

/// True when libcuda could be opened and initialised; `why_not` explains otherwise. Never throws.
bool driver_available(std::string* why_not = nullptr);

/// Throws Error(kCuda) naming `what` and the driver's message when `result` is not CUDA_SUCCESS.
void check_cu(CUresult result, const char* what);

}  // namespace finegemm::jit
