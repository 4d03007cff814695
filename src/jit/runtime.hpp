// The JIT runtime: options, compiler, disk cache, in-memory kernel map, loaded modules and device queries.
#pragma once

#include <cuda.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <unordered_map>

#include "finegemm/finegemm.hpp"
#include "jit/compiler.hpp"
#include "jit/disk_cache.hpp"
#include "jit/embedded_headers.hpp"

namespace finegemm::jit {

/// The JIT's knobs, read once from the environment.
struct Options {
  std::string cache_dir;        ///< FINEGEMM_CACHE_DIR, default ~/.cache/finegemm ("" disables the disk cache)
  std::string compiler = "nvrtc";  ///< FINEGEMM_JIT_COMPILER: nvrtc | nvcc
  bool debug = false;           ///< FINEGEMM_JIT_DEBUG: line info, compile logs and timings on stderr
  std::string dump_dir;         ///< FINEGEMM_DUMP_SASS: directory receiving each compiled source and cubin
  bool disable_sass_pass = false;  ///< FINEGEMM_DISABLE_SASS_PASS: no cubin post-pass

  static Options from_environment();
  std::string describe() const;
};

/// A kernel to compile: one header and one explicit instantiation.
struct KernelSpec {
  std::string header;         ///< e.g. "finegemm/device/kernels/sm90_fp8_gemm.cuh"
  std::string function;       ///< e.g. "finegemm::device::sm90_fp8_gemm_kernel<0, 7168, ...>"
  std::string parameters;     ///< e.g. "(const __grid_constant__ finegemm::device::GemmArgs)"
  bool steady_ffma_pass = false;  ///< whether the cubin takes the steady FFMA pass after compiling (src/sass)
  /// Headers of the calling program's own kernels (the CLI's, the tests'), besides the library's; null for the
  /// library's kernels. Their hash enters only the keys of the kernels compiled with them.
  const HeaderSet* own_headers = nullptr;

  std::string source() const;  ///< the generated translation unit
};

/// A compiled kernel, independent of any GPU.
struct KernelBinary {
  std::string key;     ///< cache key (32 hex)
  std::string symbol;  ///< mangled kernel name
  std::string cubin;
  std::string log;     ///< compiler log (empty when loaded from the disk cache)
  bool compiled = false;
};

/// What the library reads of a device, queried once per device (Runtime::device_info).
struct DeviceInfo {
  int ordinal = 0;
  int num_sms = 0;
  int major = 0, minor = 0;
  int max_smem_optin = 0;          ///< a CTA's shared memory with the opt-in
  int smem_per_sm = 0;             ///< an SM's shared memory
  int reserved_smem_per_cta = 0;   ///< the driver's own shared memory in each CTA
  std::string name;
};

/// Compiles kernels (or finds them in the disk cache) and loads them on the current device. No GPU is needed to
/// compile. Thread-safe.
class Runtime {
 public:
  /// The process-wide runtime, with the options of the environment.
  static Runtime& instance();
  explicit Runtime(Options options);
  ~Runtime();

  const Options& options() const { return options_; }

  /// Compiles or loads `spec` (no GPU needed). Concurrent requests for one kernel compile it once. `compiled_now`
  /// (optional) tells whether this very call compiled it.
  std::shared_ptr<const KernelBinary> binary(const KernelSpec& spec, bool* compiled_now = nullptr);
  /// The function of `binary` in the current context (loads the module on first use per context).
  CUfunction function(const KernelBinary& binary);

  /// Makes sure a context is current (the device's primary context when none is) and returns its device ordinal.
  int current_device();
  /// The device's facts, queried on first use; the reference stays valid for the runtime's life.
  const DeviceInfo& device_info(int ordinal);

  JitStats stats() const;
  std::string cache_dir() const { return disk_cache_->enabled() ? disk_cache_->dir() : std::string(); }
  const Compiler& compiler();

 private:
  /// Whether `spec` takes the steady FFMA pass now (not under FINEGEMM_DISABLE_SASS_PASS).
  bool steady_pass_for(const KernelSpec& spec) const;
  std::string cache_key(const KernelSpec& spec, bool steady_pass);
  KernelBinary build(const KernelSpec& spec, const std::string& key, bool steady_pass);

  Options options_;
  std::unique_ptr<DiskCache> disk_cache_;

  mutable std::mutex mutex_;
  std::unique_ptr<Compiler> compiler_;
  std::unordered_map<std::string, std::shared_ptr<const KernelBinary>> binaries_;  // by source + pass
  std::unordered_map<std::string, std::shared_ptr<std::mutex>> building_;          // one builder per kernel
  std::unordered_map<std::string, CUfunction> functions_;                          // by key + context
  std::unordered_map<int, DeviceInfo> devices_;

  std::atomic<uint64_t> compiles_{0}, disk_hits_{0}, memory_hits_{0};
  std::atomic<uint64_t> compile_micros_{0};
};

}  // namespace finegemm::jit
