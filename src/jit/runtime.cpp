#include "jit/runtime.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "common/hash.hpp"
#include "finegemm/device/common/gemm_args.cuh"
#include "finegemm/device/common/gemm_layout.cuh"
#include "jit/driver.hpp"
#include "jit/embedded_headers.hpp"
#include "sass/ffma_interleave.hpp"

namespace finegemm::jit {
namespace {

constexpr const char* kPayloadMagic = "FGKERNEL1\n";
constexpr const char* kCacheLayoutVersion = "finegemm-jit-v1";

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::string(v) != "0";
}

std::string serialize(const KernelBinary& b) { return std::string(kPayloadMagic) + b.symbol + "\n" + b.cubin; }

bool deserialize(const std::string& payload, KernelBinary& b) {
  const std::string magic = kPayloadMagic;
  if (payload.compare(0, magic.size(), magic) != 0) return false;
  const size_t end = payload.find('\n', magic.size());
  if (end == std::string::npos) return false;
  b.symbol = payload.substr(magic.size(), end - magic.size());
  b.cubin = payload.substr(end + 1);
  return !b.symbol.empty() && b.cubin.size() > 4 && b.cubin.compare(0, 4, "\x7f" "ELF") == 0;
}

}  // namespace

Options Options::from_environment() {
  Options o;
  if (const char* dir = std::getenv("FINEGEMM_CACHE_DIR")) {
    o.cache_dir = dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] != '\0') {
    o.cache_dir = std::string(xdg) + "/finegemm";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    o.cache_dir = std::string(home) + "/.cache/finegemm";
  }
  if (const char* c = std::getenv("FINEGEMM_JIT_COMPILER"); c != nullptr && c[0] != '\0') o.compiler = c;
  o.debug = env_flag("FINEGEMM_JIT_DEBUG");
  o.print_configs = env_flag("FINEGEMM_PRINT_CONFIGS");
  if (const char* d = std::getenv("FINEGEMM_DUMP_SASS"); d != nullptr && d[0] != '\0' && std::string(d) != "0")
    o.dump_dir = std::string(d) == "1" ? "finegemm-dump" : d;
  o.disable_sass_pass = env_flag("FINEGEMM_DISABLE_SASS_PASS");
  if (const char* m = std::getenv("FINEGEMM_SASS_PASS_MODE"); m != nullptr && m[0] != '\0') {
    const std::string mode = m;
    check_arg(mode == "interleave" || mode == "steady", "FINEGEMM_SASS_PASS_MODE",
              "must be 'interleave' or 'steady', got '", mode, "'");
    o.sass_pass_mode = mode == "steady" ? sass::FfmaPassMode::kSteady : sass::FfmaPassMode::kInterleave;
  }
  o.pdl = env_flag("FINEGEMM_PDL");
  if (const char* s = std::getenv("FINEGEMM_NUM_SMS"); s != nullptr && s[0] != '\0') {
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    check_arg(end != s && *end == '\0' && v >= 0 && v <= 1024, "FINEGEMM_NUM_SMS",
              "must be a number of SMs (0 for all), got '", s, "'");
    o.num_sms = int(v);
  }
  if (const char* d = std::getenv("FINEGEMM_JIT_DEFINES"); d != nullptr) {
    std::istringstream words(d);
    for (std::string w; words >> w;) {
      check_arg(w.size() > 2 && w.compare(0, 2, "-D") == 0, "FINEGEMM_JIT_DEFINES",
                "takes only -DNAME or -DNAME=VALUE words, got '", w, "'");
      o.extra_defines.push_back(w);
    }
  }
  return o;
}

std::string Options::describe() const {
  std::ostringstream os;
  os << "cache_dir=" << (cache_dir.empty() ? "(disabled)" : cache_dir) << " compiler=" << compiler
     << " debug=" << debug << " print_configs=" << print_configs << " dump=" << (dump_dir.empty() ? "-" : dump_dir)
     << " sass_pass=" << (disable_sass_pass ? "disabled" : "default") << " (" << sass::to_string(sass_pass_mode) << ")"
     << " num_sms=" << num_sms << " pdl=" << pdl;
  for (const auto& d : extra_defines) os << ' ' << d;
  return os.str();
}

std::string KernelSpec::source() const {
  return "#include \"" + header + "\"\ntemplate __global__ void " + function + parameters + ";\n";
}

Runtime& Runtime::instance() {
  static Runtime runtime(Options::from_environment());
  return runtime;
}

Runtime::Runtime(Options options) : options_(std::move(options)), pdl_(options_.pdl) {
  disk_cache_ = std::make_unique<DiskCache>(options_.cache_dir);
  Hasher hasher;
  for (const auto& h : embedded_headers()) hasher.update(std::string_view(h.path)).update(h.content, h.size);
  headers_hash_ = hasher.hex();
}

Runtime::~Runtime() = default;

const Compiler& Runtime::compiler() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!compiler_) compiler_ = make_compiler(options_.compiler, options_.debug, options_.extra_defines);
  return *compiler_;
}

std::optional<sass::FfmaPassMode> Runtime::ffma_pass_for(const KernelSpec& spec) const {
  if (options_.disable_sass_pass) return std::nullopt;
  if (spec.sass_pass && sass_pass_enabled_) return options_.sass_pass_mode;
  return spec.ffma_pass;
}

std::string Runtime::cache_key(const KernelSpec& spec, std::optional<sass::FfmaPassMode> ffma_pass) {
  const Compiler& c = compiler();
  Hasher hasher;
  hasher.update(std::string_view(kCacheLayoutVersion)).update(spec.source()).update(headers_hash_).update(c.identity());
  for (const auto& f : c.flags()) hasher.update(f);
  hasher.update(ffma_pass ? "sass-pass-v" + std::to_string(sass::kPassVersion) + "-" + sass::to_string(*ffma_pass)
                          : std::string("no-sass-pass"));
  return hasher.hex();
}

KernelBinary Runtime::build(const KernelSpec& spec, const std::string& key,
                            std::optional<sass::FfmaPassMode> ffma_pass) {
  const std::string source = spec.source();
  CompileResult result = compiler().compile(source, "&" + spec.function);
  KernelBinary b;
  b.key = key;
  b.symbol = result.symbol;
  b.cubin = std::move(result.cubin);
  b.log = std::move(result.log);
  b.compiled = true;
  if (ffma_pass) {
    const std::vector<char> in(b.cubin.begin(), b.cubin.end());
    sass::InterleaveReport report;
    sass::InterleaveOptions pass_options;
    pass_options.mode = *ffma_pass;
    const std::vector<char> out = sass::interleave_ffma(in, pass_options, &report);
    b.cubin.assign(out.begin(), out.end());
    if (options_.debug) std::fprintf(stderr, "finegemm: sass pass on %s: %s\n", key.c_str(), report.to_string().c_str());
  }
  compile_micros_ += uint64_t(result.seconds * 1e6);
  if (options_.debug)
    std::fprintf(stderr, "finegemm: compiled %s (%s) in %.3f s\n%s\n", spec.function.c_str(), key.c_str(),
                 result.seconds, b.log.c_str());
  if (!options_.dump_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.dump_dir, ec);
    std::ofstream(options_.dump_dir + "/" + key + ".cu") << source;
    std::ofstream(options_.dump_dir + "/" + key + ".cubin", std::ios::binary) << b.cubin;
    std::ofstream(options_.dump_dir + "/" + key + ".log") << b.log;
  }
  return b;
}

std::shared_ptr<const KernelBinary> Runtime::binary(const KernelSpec& spec, bool* compiled_now) {
  if (compiled_now != nullptr) *compiled_now = false;
  const std::optional<sass::FfmaPassMode> ffma_pass = ffma_pass_for(spec);
  const std::string map_key = spec.function + "|" + (ffma_pass ? sass::to_string(*ffma_pass) : "plain");
  std::shared_ptr<std::mutex> builder;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = binaries_.find(map_key); it != binaries_.end()) {
      ++memory_hits_;
      return it->second;
    }
    auto& slot = building_[map_key];
    if (!slot) slot = std::make_shared<std::mutex>();
    builder = slot;
  }
  std::lock_guard<std::mutex> build_lock(*builder);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = binaries_.find(map_key); it != binaries_.end()) {
      ++memory_hits_;
      return it->second;
    }
  }
  const std::string key = cache_key(spec, ffma_pass);
  auto result = std::make_shared<KernelBinary>();
  bool built = false;
  std::string payload = disk_cache_->get_or_build(
      key,
      [&] {
        *result = build(spec, key, ffma_pass);
        return serialize(*result);
      },
      &built);
  if (!built) {
    check(deserialize(payload, *result), Error::Kind::kInternal, "jit::cache", "unreadable cache entry ", key);
    result->key = key;
    ++disk_hits_;
  } else {
    ++compiles_;
    if (compiled_now != nullptr) *compiled_now = true;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  binaries_[map_key] = result;
  return result;
}

CUfunction Runtime::function(const KernelBinary& binary) {
  const DriverApi& cu = driver();
  CUcontext ctx = nullptr;
  check_cu(cu.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  const std::string key = binary.key + "@" + std::to_string(reinterpret_cast<uintptr_t>(ctx));
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = functions_.find(key); it != functions_.end()) return it->second;
  CUmodule module = nullptr;
  check_cu(cu.cuModuleLoadData(&module, binary.cubin.data()), "cuModuleLoadData");
  CUfunction fn = nullptr;
  check_cu(cu.cuModuleGetFunction(&fn, module, binary.symbol.c_str()), "cuModuleGetFunction");
  int device = 0;
  check_cu(cu.cuCtxGetDevice(&device), "cuCtxGetDevice");
  int smem_optin = 0;
  check_cu(cu.cuDeviceGetAttribute(&smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device),
           "cuDeviceGetAttribute");
  int static_smem = 0;
  check_cu(cu.cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn), "cuFuncGetAttribute");
  check_cu(cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_optin - static_smem),
           "cuFuncSetAttribute(max dynamic shared memory)");
  functions_[key] = fn;
  return fn;
}

int Runtime::current_device() {
  const DriverApi& cu = driver();
  CUcontext ctx = nullptr;
  check_cu(cu.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx == nullptr) {
    int count = 0;
    check_cu(cu.cuDeviceGetCount(&count), "cuDeviceGetCount");
    check(count > 0, Error::Kind::kCuda, "device", "no CUDA device is visible to this process");
    CUdevice dev = 0;
    check_cu(cu.cuDeviceGet(&dev, 0), "cuDeviceGet");
    check_cu(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check_cu(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  }
  CUdevice dev = 0;
  check_cu(cu.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  return int(dev);
}

const DeviceInfo& Runtime::device_info(int ordinal) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = devices_.find(ordinal); it != devices_.end()) return it->second;
  const DriverApi& cu = driver();
  CUdevice dev = 0;
  check_cu(cu.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  DeviceInfo info;
  info.ordinal = ordinal;
  check_cu(cu.cuDeviceGetAttribute(&info.num_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
  check_cu(cu.cuDeviceGetAttribute(&info.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
  check_cu(cu.cuDeviceGetAttribute(&info.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
  check_cu(cu.cuDeviceGetAttribute(&info.max_smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
           "cuDeviceGetAttribute");
  char name[256] = {};
  check_cu(cu.cuDeviceGetName(name, sizeof(name), dev), "cuDeviceGetName");
  info.name = name;
  return devices_.emplace(ordinal, info).first->second;
}

int Runtime::num_sms(int ordinal) {
  const int device_sms = device_info(ordinal).num_sms;
  int requested = num_sms_override_.load();
  if (requested <= 0) requested = options_.num_sms;
  return requested > 0 && requested < device_sms ? requested : device_sms;
}

CUdeviceptr Runtime::error_flags(int ordinal) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = error_flags_.find(ordinal); it != error_flags_.end()) return it->second;
  const DriverApi& cu = driver();
  CUdeviceptr ptr = 0;
  check_cu(cu.cuMemAlloc(&ptr, device::kErrorBufferWords * sizeof(uint32_t)), "cuMemAlloc(error flags)");
  check_cu(cu.cuMemsetD32(ptr, 0, device::kErrorBufferWords), "cuMemsetD32(error flags)");
  error_flags_[ordinal] = ptr;
  return ptr;
}

bool Runtime::tail_workspace(int ordinal, CUstream stream, CUdeviceptr* partials, CUdeviceptr* counters) {
  const int sms = device_info(ordinal).num_sms;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_pair(ordinal, stream);
  if (auto it = tail_workspaces_.find(key); it != tail_workspaces_.end()) {
    *partials = it->second.partials;
    *counters = it->second.counters;
    return true;
  }
  const DriverApi& cu = driver();
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cu.cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS || capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return false;
  TailWorkspace w;
  if (cu.cuMemAlloc(&w.partials, size_t(device::kTailSlotsPerSm) * size_t(sms) * device::kTailSlotFloats * sizeof(float)) != CUDA_SUCCESS)
    return false;
  // Zeroed on the stream itself, so the first kernel that reads the counters runs after.
  if (cu.cuMemAlloc(&w.counters, size_t(sms) * sizeof(uint32_t)) != CUDA_SUCCESS ||
      cu.cuMemsetD32Async(w.counters, 0, size_t(sms), stream) != CUDA_SUCCESS)
    return false;  // (what was allocated stays: rare, and freeing could race another thread's launch)
  tail_workspaces_[key] = w;
  *partials = w.partials;
  *counters = w.counters;
  return true;
}

JitStats Runtime::stats() const {
  JitStats s;
  s.compiles = compiles_;
  s.disk_hits = disk_hits_;
  s.memory_hits = memory_hits_;
  s.compile_seconds = double(compile_micros_.load()) * 1e-6;
  return s;
}

}  // namespace finegemm::jit
