// The library's state below the public API: its settings (read once from the environment), the JIT runtime, and what
// it keeps per device (the device error word). One process-wide instance.
#pragma once

#include <cuda.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "heuristics/heuristics.hpp"
#include "jit/runtime.hpp"

namespace finegemm::api {

/// The library's knobs, read once from the environment.
struct Settings {
  bool print_configs = false;  ///< FINEGEMM_PRINT_CONFIGS: print the configuration of each new GEMM shape
  int num_sms = 0;             ///< FINEGEMM_NUM_SMS: use at most this many SMs (0: all)
  bool pdl = false;            ///< FINEGEMM_PDL: launch with programmatic dependent launch (finegemm::set_pdl)
  /// FINEGEMM_FORCE_CONFIG: restrictions on the heuristic's configurations (a measurement knob).
  heuristics::ConfigConstraints constraints;

  static Settings from_environment();
};

class Context {
 public:
  /// The process-wide context (settings from the environment, the process-wide JIT runtime).
  static Context& instance();

  jit::Runtime& runtime() { return runtime_; }
  const Settings& settings() const { return settings_; }

  /// SMs the kernels use on `device` (set_num_sms, else FINEGEMM_NUM_SMS, at most the device's).
  int num_sms(int device);
  /// The SM limit asked for (set_num_sms, else FINEGEMM_NUM_SMS; 0: none): with the device, it gives num_sms.
  int requested_sms() const {
    const int requested = num_sms_override_.load(std::memory_order_relaxed);
    return requested > 0 ? requested : settings_.num_sms;
  }
  void set_num_sms(int num_sms) { num_sms_override_ = num_sms; }
  /// Whether GEMMs and quantizers launch with programmatic dependent launch.
  bool pdl() const { return pdl_; }
  void set_pdl(bool enabled) { pdl_ = enabled; }

  /// The device error word of `device` (kernels OR device::kError* bits into it), allocated zeroed on first use.
  CUdeviceptr error_flags(int device);

  /// The K-grouped GEMMs' descriptor workspace of `device` (k_grouped_workspace_bytes), at least `bytes` bytes,
  /// allocated on first use and grown (never shrunk) for larger grids. Shared by the calls that pass no workspace.
  CUdeviceptr k_grouped_workspace(int device, int64_t bytes);

  /// Throws Error(kUnsupported) unless `device` is a Hopper GPU (compute capability 9.0); `where` names the call.
  void check_hopper(int device, const char* where);

 private:
  Context(Settings settings, jit::Runtime& runtime);

  Settings settings_;
  jit::Runtime& runtime_;
  std::atomic<int> num_sms_override_{0};
  std::atomic<bool> pdl_{false};
  std::mutex mutex_;
  std::unordered_map<int, CUdeviceptr> error_flags_;
  std::unordered_map<int, std::pair<CUdeviceptr, int64_t>> k_grouped_workspaces_;  // pointer, bytes
};

}  // namespace finegemm::api
