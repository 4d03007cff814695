#include "jit/runtime.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "common/hash.hpp"
#include "jit/driver.hpp"
#include "jit/embedded_headers.hpp"
#include "sass/ffma_pass.hpp"

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
  if (const char* d = std::getenv("FINEGEMM_DUMP_SASS"); d != nullptr && d[0] != '\0' && std::string(d) != "0")
    o.dump_dir = std::string(d) == "1" ? "finegemm-dump" : d;
  o.disable_sass_pass = env_flag("FINEGEMM_DISABLE_SASS_PASS");
  return o;
}

std::string Options::describe() const {
  std::ostringstream os;
  os << "cache_dir=" << (cache_dir.empty() ? "(disabled)" : cache_dir) << " compiler=" << compiler
     << " debug=" << debug << " dump=" << (dump_dir.empty() ? "-" : dump_dir)
     << " sass_pass=" << (disable_sass_pass ? "disabled" : "default");
  return os.str();
}

std::string KernelSpec::source() const {
  return "#include \"" + header + "\"\ntemplate __global__ void " + function + parameters + ";\n";
}

Runtime& Runtime::instance() {
  static Runtime runtime(Options::from_environment());
  return runtime;
}

Runtime::Runtime(Options options) : options_(std::move(options)) {
  disk_cache_ = std::make_unique<DiskCache>(options_.cache_dir);
}

Runtime::~Runtime() = default;

const Compiler& Runtime::compiler() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!compiler_) compiler_ = make_compiler(options_.compiler, options_.debug);
  return *compiler_;
}

bool Runtime::steady_pass_for(const KernelSpec& spec) const {
  return spec.steady_ffma_pass && !options_.disable_sass_pass;
}

std::string Runtime::cache_key(const KernelSpec& spec, bool steady_pass) {
  const Compiler& c = compiler();
  Hasher hasher;
  hasher.update(std::string_view(kCacheLayoutVersion)).update(spec.source()).update(library_headers().hash);
  if (spec.own_headers != nullptr) hasher.update(spec.own_headers->hash);
  hasher.update(c.identity());
  for (const auto& f : c.flags()) hasher.update(f);
  hasher.update(steady_pass ? "steady-ffma-pass-v" + std::to_string(sass::kPassVersion) : std::string("no-sass-pass"));
  return hasher.hex();
}

KernelBinary Runtime::build(const KernelSpec& spec, const std::string& key, bool steady_pass) {
  const std::string source = spec.source();
  std::vector<const HeaderSet*> header_sets = {&library_headers()};
  if (spec.own_headers != nullptr) header_sets.push_back(spec.own_headers);
  CompileResult result = compiler().compile(source, "&" + spec.function, header_sets);
  KernelBinary b;
  b.key = key;
  b.symbol = result.symbol;
  b.cubin = std::move(result.cubin);
  b.log = std::move(result.log);
  b.compiled = true;
  if (steady_pass) {
    const std::vector<char> in(b.cubin.begin(), b.cubin.end());
    sass::PassReport report;
    const std::vector<char> out = sass::steady_ffma_pass(in, {}, &report);
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
  const bool steady_pass = steady_pass_for(spec);
  const std::string map_key = spec.header + "|" + spec.function + "|" + (steady_pass ? "steady" : "plain") + "|" +
                              (spec.own_headers != nullptr ? spec.own_headers->hash : std::string());
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
  const std::string key = cache_key(spec, steady_pass);
  auto result = std::make_shared<KernelBinary>();
  bool built = false;
  std::string payload = disk_cache_->get_or_build(
      key,
      [&] {
        *result = build(spec, key, steady_pass);
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = functions_.find(key); it != functions_.end()) return it->second;
  }
  CUdevice device = 0;
  check_cu(cu.cuCtxGetDevice(&device), "cuCtxGetDevice");
  const int smem_optin = device_info(int(device)).max_smem_optin;  // takes mutex_ itself
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = functions_.find(key); it != functions_.end()) return it->second;  // loaded by another thread meanwhile
  CUmodule module = nullptr;
  check_cu(cu.cuModuleLoadData(&module, binary.cubin.data()), "cuModuleLoadData");
  CUfunction fn = nullptr;
  check_cu(cu.cuModuleGetFunction(&fn, module, binary.symbol.c_str()), "cuModuleGetFunction");
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
  check_cu(cu.cuDeviceGetAttribute(&info.smem_per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev),
           "cuDeviceGetAttribute");
  check_cu(cu.cuDeviceGetAttribute(&info.reserved_smem_per_cta, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
                                   dev),
           "cuDeviceGetAttribute");
  char name[256] = {};
  check_cu(cu.cuDeviceGetName(name, sizeof(name), dev), "cuDeviceGetName");
  info.name = name;
  return devices_.emplace(ordinal, info).first->second;
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
