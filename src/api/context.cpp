#include "api/context.hpp"

#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "jit/driver.hpp"

namespace finegemm::api {
namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::string(v) != "0";
}

}  // namespace

Settings Settings::from_environment() {
  Settings s;
  s.print_configs = env_flag("FINEGEMM_PRINT_CONFIGS");
  s.pdl = env_flag("FINEGEMM_PDL");
  if (const char* v = std::getenv("FINEGEMM_NUM_SMS"); v != nullptr && v[0] != '\0') {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    check_arg(end != v && *end == '\0' && n >= 0 && n <= 1024, "FINEGEMM_NUM_SMS",
              "must be a number of SMs (0 for all), got '", v, "'");
    s.num_sms = int(n);
  }
  if (const char* v = std::getenv("FINEGEMM_FORCE_CONFIG"); v != nullptr && v[0] != '\0')
    s.constraints = heuristics::parse_constraints(v);
  return s;
}

Context& Context::instance() {
  static Context context(Settings::from_environment(), jit::Runtime::instance());
  return context;
}

Context::Context(Settings settings, jit::Runtime& runtime)
    : settings_(std::move(settings)), runtime_(runtime), pdl_(settings_.pdl) {}

int Context::num_sms(int device) {
  const int device_sms = runtime_.device_info(device).num_sms;
  const int requested = requested_sms();
  return requested > 0 && requested < device_sms ? requested : device_sms;
}

CUdeviceptr Context::error_flags(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = error_flags_.find(device); it != error_flags_.end()) return it->second;
  const jit::DriverApi& cu = jit::driver();
  CUdeviceptr ptr = 0;
  jit::check_cu(cu.cuMemAlloc(&ptr, sizeof(uint32_t)), "cuMemAlloc(error flags)");
  jit::check_cu(cu.cuMemsetD32(ptr, 0, 1), "cuMemsetD32(error flags)");
  error_flags_[device] = ptr;
  return ptr;
}

CUdeviceptr Context::k_grouped_workspace(int device, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& [ptr, size] = k_grouped_workspaces_[device];
  if (size >= bytes) return ptr;
  // NOTE: a smaller buffer is kept (not freed): a kernel enqueued earlier may still write into it.
  jit::check_cu(jit::driver().cuMemAlloc(&ptr, size_t(bytes)), "cuMemAlloc(K-grouped workspace)");
  size = bytes;
  return ptr;
}

void Context::check_hopper(int device, const char* where) {
  const jit::DeviceInfo& info = runtime_.device_info(device);
  check(info.major == 9 && info.minor == 0, Error::Kind::kUnsupported, where,
        "finegemm's kernels need a Hopper GPU (compute capability 9.0: H100, H800, H200, H20); device ", device, " (",
        info.name, ") is ", info.major, ".", info.minor);
}

}  // namespace finegemm::api
