#include "jit/driver.hpp"

#include <dlfcn.h>

#include <mutex>

#include "common/error.hpp"

namespace finegemm::jit {
namespace {

struct DriverState {
  DriverApi api;
  std::string error;  // non-empty when loading failed
};

template <typename Fn>
bool resolve(void* get_proc, const char* name, Fn& fn, std::string& error) {
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  void* ptr = nullptr;
  CUdriverProcAddressQueryResult status{};
  const CUresult r = reinterpret_cast<GetProc>(get_proc)(name, &ptr, 12080, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (r != CUDA_SUCCESS || ptr == nullptr) {
    error = std::string("the CUDA driver has no entry point ") + name + " (driver too old? CUDA 12.8+ is required)";
    return false;
  }
  fn = reinterpret_cast<Fn>(ptr);
  return true;
}

DriverState load_driver() {
  DriverState state;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) handle = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    state.error = "cannot open libcuda.so.1 (no NVIDIA driver on this machine?)";
    return state;
  }
  void* get_proc = dlsym(handle, "cuGetProcAddress_v2");
  if (get_proc == nullptr) {
    state.error = "libcuda has no cuGetProcAddress_v2: the NVIDIA driver is too old (CUDA 12.8+ driver required)";
    return state;
  }
  DriverApi& a = state.api;
  std::string& e = state.error;
  const bool ok = resolve(get_proc, "cuInit", a.cuInit, e) && resolve(get_proc, "cuGetErrorString", a.cuGetErrorString, e) &&
                  resolve(get_proc, "cuDriverGetVersion", a.cuDriverGetVersion, e) &&
                  resolve(get_proc, "cuDeviceGetCount", a.cuDeviceGetCount, e) &&
                  resolve(get_proc, "cuDeviceGet", a.cuDeviceGet, e) &&
                  resolve(get_proc, "cuDeviceGetAttribute", a.cuDeviceGetAttribute, e) &&
                  resolve(get_proc, "cuDeviceGetName", a.cuDeviceGetName, e) &&
                  resolve(get_proc, "cuDevicePrimaryCtxRetain", a.cuDevicePrimaryCtxRetain, e) &&
                  resolve(get_proc, "cuCtxGetCurrent", a.cuCtxGetCurrent, e) &&
                  resolve(get_proc, "cuCtxSetCurrent", a.cuCtxSetCurrent, e) &&
                  resolve(get_proc, "cuCtxGetDevice", a.cuCtxGetDevice, e) &&
                  resolve(get_proc, "cuCtxSynchronize", a.cuCtxSynchronize, e) &&
                  resolve(get_proc, "cuModuleLoadData", a.cuModuleLoadData, e) &&
                  resolve(get_proc, "cuModuleGetFunction", a.cuModuleGetFunction, e) &&
                  resolve(get_proc, "cuFuncSetAttribute", a.cuFuncSetAttribute, e) &&
                  resolve(get_proc, "cuFuncGetAttribute", a.cuFuncGetAttribute, e) &&
                  resolve(get_proc, "cuLaunchKernelEx", a.cuLaunchKernelEx, e) &&
                  resolve(get_proc, "cuOccupancyMaxActiveClusters", a.cuOccupancyMaxActiveClusters, e) &&
                  resolve(get_proc, "cuTensorMapEncodeTiled", a.cuTensorMapEncodeTiled, e) &&
                  resolve(get_proc, "cuPointerGetAttributes", a.cuPointerGetAttributes, e) &&
                  resolve(get_proc, "cuMemAlloc", a.cuMemAlloc, e) && resolve(get_proc, "cuMemsetD32", a.cuMemsetD32, e) &&
                  resolve(get_proc, "cuMemcpyDtoH", a.cuMemcpyDtoH, e) &&
                  resolve(get_proc, "cuStreamGetCtx", a.cuStreamGetCtx, e) &&
                  resolve(get_proc, "cuStreamIsCapturing", a.cuStreamIsCapturing, e) &&
                  resolve(get_proc, "cuMemsetD32Async", a.cuMemsetD32Async, e);
  if (!ok) return state;
  const CUresult init = a.cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char* msg = nullptr;
    a.cuGetErrorString(init, &msg);
    e = std::string("cuInit failed: ") + (msg ? msg : "unknown error") + " (is a GPU visible to this process?)";
  }
  return state;
}

const DriverState& state() {
  static const DriverState kState = load_driver();
  return kState;
}

}  // namespace

const DriverApi& driver() {
  const DriverState& s = state();
  check(s.error.empty(), Error::Kind::kCuda, "driver", s.error);
  return s.api;
}

bool driver_available(std::string* why_not) {
  const DriverState& s = state();
  if (!s.error.empty() && why_not != nullptr) *why_not = s.error;
  return s.error.empty();
}

void check_cu(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) [[likely]]
    return;
  const char* msg = nullptr;
  if (driver_available()) state().api.cuGetErrorString(result, &msg);
  fail(Error::Kind::kCuda, what, "CUDA driver error ", int(result), " (", msg ? msg : "unknown", ")");
}

}  // namespace finegemm::jit
