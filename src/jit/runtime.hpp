// The JIT runtime: options, compiler, disk cache, in-memory kernel map, loaded modules and per-device state.
#pragma once

#include <cuda.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include <unordered_map>

#include "finegemm/finegemm.hpp"
#include "jit/compiler.hpp"
#include "jit/disk_cache.hpp"
#include "sass/ffma_interleave.hpp"

namespace finegemm::jit {

/// Knobs, read once from the environment.
struct Options {
  std::string cache_dir;        ///< FINEGEMM_CACHE_DIR, default ~/.cache/finegemm ("" disables the disk cache)
  std::string compiler = "nvrtc";  ///< FINEGEMM_JIT_COMPILER: nvrtc | nvcc
  bool debug = false;           ///< FINEGEMM_JIT_DEBUG: line info, compile logs and timings on stderr
  bool print_configs = false;   ///< FINEGEMM_PRINT_CONFIGS: print each new kernel configuration
  std::string dump_dir;         ///< FINEGEMM_DUMP_SASS: directory receiving each compiled source and cubin
  bool disable_sass_pass = false;  ///< FINEGEMM_DISABLE_SASS_PASS
  /// FINEGEMM_SASS_PASS_MODE: the pass Runtime::set_sass_pass_enabled(true) gives every kernel that takes one
  sass::FfmaPassMode sass_pass_mode = sass::FfmaPassMode::kInterleave;
  int num_sms = 0;              ///< FINEGEMM_NUM_SMS (0: all)
  bool pdl = false;             ///< FINEGEMM_PDL: launch with programmatic dependent launch (finegemm::set_pdl)
  std::vector<std::string> extra_defines;  ///< FINEGEMM_JIT_DEFINES: "-DNAME[=VALUE] ..." (kernel experiments)

  static Options from_environment();
  std::string describe() const;
};

/// A kernel to compile: one header and one explicit instantiation.
struct KernelSpec {
  std::string header;         ///< e.g. "finegemm/device/kernels/sm90_fp8_gemm.cuh"
  std::string function;       ///< e.g. "finegemm::device::sm90_fp8_gemm_kernel<0, 7168, ...>"
  std::string parameters;     ///< e.g. "(const __grid_constant__ finegemm::device::GemmArgs)"
  bool sass_pass = false;     ///< whether the family takes the pass Runtime::set_sass_pass_enabled() turns on
  std::optional<sass::FfmaPassMode> ffma_pass;  ///< the FFMA pass this kernel takes otherwise (none if empty)

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

struct DeviceInfo {
  int ordinal = 0;
  int num_sms = 0;
  int major = 0, minor = 0;
  int max_smem_optin = 0;
  std::string name;
};

class Runtime {
 public:
  static Runtime& instance();
  explicit Runtime(Options options);
  ~Runtime();

  const Options& options() const { return options_; }
  /// Gives every kernel whose family takes the pass Options::sass_pass_mode (true) instead of its own default pass
  /// (false, the default) for later compiles of this process: the CLI's A/B switch (`finegemm bench --sass-ab`).
  void set_sass_pass_enabled(bool enabled) { sass_pass_enabled_ = enabled; }
  bool sass_pass_enabled() const { return sass_pass_enabled_; }

  /// Compiles or loads `spec` (no GPU needed). Thread-safe; concurrent requests for one kernel compile it once.
  /// `compiled_now` (optional) tells whether this very call compiled it.
  std::shared_ptr<const KernelBinary> binary(const KernelSpec& spec, bool* compiled_now = nullptr);
  /// The function of `binary` in the current context (loads the module on first use per context).
  CUfunction function(const KernelBinary& binary);

  /// Makes sure a context is current (the device's primary context when none is) and returns its device ordinal.
  int current_device();
  const DeviceInfo& device_info(int ordinal);
  /// SMs the kernels use on `ordinal` (options, set_num_sms, device limit).
  int num_sms(int ordinal);
  void set_num_sms(int num_sms) { num_sms_override_ = num_sms; }
  /// Whether GEMMs and quantizers launch with programmatic dependent launch (Options::pdl, then set_pdl).
  bool pdl() const { return pdl_; }
  void set_pdl(bool enabled) { pdl_ = enabled; }
  /// The device error buffer of the current context (allocated on first use): word 0 the flags, then the words
  /// of measurement builds (device::kErrorBufferWords).
  CUdeviceptr error_flags(int ordinal);
  /// Memory where the pieces of tail-split tiles meet (KernelConfig::tail_pieces), one per device and stream so that
  /// GEMMs on different streams never share it (calls on one stream run in order and leave the counters zeroed):
  /// device::kTailSlotsPerSm * SMs slots of device::kTailSlotFloats fp32 (35 MB on an H100) and a counter per SM. Allocated, its
  /// counters zeroed on `stream`, at the stream's first tail-split call. Returns false (no memory; the caller then
  /// cuts no tile) when that first call comes while the stream is being captured into a CUDA graph, where allocating
  /// is not allowed, or when the allocation fails.
  bool tail_workspace(int ordinal, CUstream stream, CUdeviceptr* partials, CUdeviceptr* counters);

  JitStats stats() const;
  std::string cache_dir() const { return disk_cache_->enabled() ? disk_cache_->dir() : std::string(); }
  const Compiler& compiler();

 private:
  /// The FFMA pass `spec` gets now: none under FINEGEMM_DISABLE_SASS_PASS; Options::sass_pass_mode where the family
  /// takes the pass and set_sass_pass_enabled(true) is in force (a measurement switch); else spec.ffma_pass.
  std::optional<sass::FfmaPassMode> ffma_pass_for(const KernelSpec& spec) const;
  std::string cache_key(const KernelSpec& spec, std::optional<sass::FfmaPassMode> ffma_pass);
  KernelBinary build(const KernelSpec& spec, const std::string& key, std::optional<sass::FfmaPassMode> ffma_pass);

  Options options_;
  std::atomic<bool> sass_pass_enabled_{false};  // each kernel's own pass by default: docs/sass-pass.md
  std::atomic<int> num_sms_override_{0};
  std::atomic<bool> pdl_{false};
  std::unique_ptr<DiskCache> disk_cache_;
  std::string headers_hash_;

  mutable std::mutex mutex_;
  std::unique_ptr<Compiler> compiler_;
  std::unordered_map<std::string, std::shared_ptr<const KernelBinary>> binaries_;  // by source + pass flag
  std::unordered_map<std::string, std::shared_ptr<std::mutex>> building_;          // one builder per kernel
  std::unordered_map<std::string, CUfunction> functions_;                          // by key + context
  std::unordered_map<int, DeviceInfo> devices_;
  std::unordered_map<int, CUdeviceptr> error_flags_;
  struct TailWorkspace {
    CUdeviceptr partials = 0, counters = 0;
  };
  std::map<std::pair<int, CUstream>, TailWorkspace> tail_workspaces_;  // by device and stream, kept for the process

  std::atomic<uint64_t> compiles_{0}, disk_hits_{0}, memory_hits_{0};
  std::atomic<uint64_t> compile_micros_{0};
};

/// Fills `attr` as a launch's programmatic-dependent-launch attribute (used where Runtime::pdl() is on): the kernel
/// may start while the previous one on the stream runs, and waits for its results itself (griddepcontrol.wait).
/// Returns the number of attributes filled (1).
inline unsigned set_pdl_attribute(CUlaunchAttribute& attr) {
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  return 1;
}

}  // namespace finegemm::jit
