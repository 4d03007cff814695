#include "lib/power.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace finegemm::tools {
namespace {

// The few NVML entry points used, declared from NVML's documented C API (nvml.h is not part of the CUDA toolkit's
// headers here): every function returns an nvmlReturn_t, 0 on success; a device is an opaque pointer.
using NvmlInit = int (*)();
using NvmlShutdown = int (*)();
using NvmlHandleByPciBusId = int (*)(const char*, void**);
using NvmlTotalEnergy = int (*)(void*, unsigned long long*);
using NvmlClockInfo = int (*)(void*, int, unsigned int*);
using NvmlEnforcedPowerLimit = int (*)(void*, unsigned int*);
using NvmlClockEventReasons = int (*)(void*, unsigned long long*);
constexpr int kNvmlClockSm = 1;

template <typename F>
F symbol(void* lib, const char* name) {
  return lib == nullptr ? nullptr : reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

PowerMeter::PowerMeter(int cuda_device) {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) {
    why_ = "libnvidia-ml.so.1 could not be loaded (no NVIDIA driver?)";
    return;
  }
  auto init = symbol<NvmlInit>(lib_, "nvmlInit_v2");
  auto by_bus = symbol<NvmlHandleByPciBusId>(lib_, "nvmlDeviceGetHandleByPciBusId_v2");
  if (init == nullptr || by_bus == nullptr || init() != 0) {
    why_ = "NVML did not initialize";
    return;
  }
  initialized_ = true;
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_device) != cudaSuccess) {
    why_ = "cudaDeviceGetPCIBusId failed";
    return;
  }
  void* device = nullptr;
  if (by_bus(bus_id, &device) != 0 || device == nullptr) {
    why_ = std::string("NVML has no device at PCI bus id ") + bus_id;
    return;
  }
  device_ = device;
}

PowerMeter::~PowerMeter() {
  if (initialized_) {
    if (auto shutdown = symbol<NvmlShutdown>(lib_, "nvmlShutdown")) shutdown();
  }
  if (lib_ != nullptr) dlclose(lib_);
}

void* PowerMeter::entry(const char* name) const { return device_ != nullptr ? dlsym(lib_, name) : nullptr; }

double PowerMeter::energy_mj() const {
  auto f = reinterpret_cast<NvmlTotalEnergy>(entry("nvmlDeviceGetTotalEnergyConsumption"));
  unsigned long long mj = 0;
  return (f != nullptr && f(device_, &mj) == 0) ? double(mj) : -1.0;
}

int PowerMeter::sm_clock_mhz() const {
  auto f = reinterpret_cast<NvmlClockInfo>(entry("nvmlDeviceGetClockInfo"));
  unsigned int mhz = 0;
  return (f != nullptr && f(device_, kNvmlClockSm, &mhz) == 0) ? int(mhz) : -1;
}

double PowerMeter::power_limit_w() const {
  auto f = reinterpret_cast<NvmlEnforcedPowerLimit>(entry("nvmlDeviceGetEnforcedPowerLimit"));
  unsigned int mw = 0;
  return (f != nullptr && f(device_, &mw) == 0) ? mw / 1000.0 : -1.0;
}

unsigned long long PowerMeter::clock_event_reasons() const {
  // The newer name first; drivers before it have the older one.
  void* e = entry("nvmlDeviceGetCurrentClocksEventReasons");
  if (e == nullptr) e = entry("nvmlDeviceGetCurrentClocksThrottleReasons");
  auto f = reinterpret_cast<NvmlClockEventReasons>(e);
  unsigned long long reasons = 0;
  return (f != nullptr && f(device_, &reasons) == 0) ? reasons : 0;
}

std::string describe_clock_event_reasons(unsigned long long reasons) {
  static const struct {
    unsigned long long bit;
    const char* name;
  } kNames[] = {{0x1, "idle"},          {0x2, "app clocks"},    {0x4, "power cap"},       {0x8, "hw slowdown"},
                {0x10, "sync boost"},   {0x20, "sw thermal"},   {0x40, "hw thermal"},     {0x80, "power brake"},
                {0x100, "display clocks"}};
  std::string out;
  for (const auto& n : kNames) {
    if (reasons & n.bit) out += (out.empty() ? "" : ",") + std::string(n.name);
  }
  return out.empty() ? "none" : out;
}

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

SustainedRun run_sustained(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s, double call_us,
                           double seconds, const PowerMeter& meter) {
  const int per_graph = std::clamp(int(20000.0 / std::max(call_us, 1.0)), 1, 2000);
  const int replays = std::max(1, int(seconds * 1e6 / (per_graph * std::max(call_us, 1.0))));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    for (int i = 0; i < per_graph; ++i) enqueue(s);
  } catch (...) {
    cudaStreamEndCapture(s, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    throw;
  }
  check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  SustainedRun r;
  check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");  // warm-up replay
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const double e0 = meter.energy_mj();
  check(cudaEventRecord(start, s), "cudaEventRecord");
  for (int i = 0; i < replays; ++i) check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
  check(cudaEventRecord(stop, s), "cudaEventRecord");
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds / 2));
  r.sm_clock_mhz = meter.sm_clock_mhz();
  r.clock_event_reasons = meter.clock_event_reasons();
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  const double e1 = meter.energy_mj();
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  r.calls = per_graph * replays;
  r.us_per_call = 1000.0 * ms / r.calls;
  if (meter.available() && e0 >= 0 && e1 >= e0) {
    r.watts = (e1 - e0) / ms;  // mJ per ms
    r.mj_per_call = (e1 - e0) / r.calls;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return r;
}

}  // namespace finegemm::tools
