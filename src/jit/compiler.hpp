// Compiler backends of the JIT: NVRTC from memory (default) and NVCC through a temporary directory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "jit/embedded_headers.hpp"

namespace finegemm::jit {

struct CompileResult {
  std::string cubin;    ///< ELF bytes for sm_90a
  std::string symbol;   ///< mangled name of the one kernel instantiated by the source
  std::string log;      ///< compiler output, including ptxas' resource report
  double seconds = 0.0;
};

class Compiler {
 public:
  virtual ~Compiler() = default;
  /// Name and version, part of the cache key (e.g. "nvrtc 13.0").
  virtual std::string identity() const = 0;
  /// Flags, part of the cache key.
  virtual const std::vector<std::string>& flags() const = 0;
  /// Compiles `source`, whose includes resolve to the headers of `header_sets`. `name_expression` names the kernel
  /// (e.g. "&finegemm::device::sm90_fp8_gemm_kernel<...>") so its mangled symbol can be reported. Throws
  /// Error(kCompile).
  virtual CompileResult compile(const std::string& source, const std::string& name_expression,
                                const std::vector<const HeaderSet*>& header_sets) const = 0;
};

/// "nvrtc" or "nvcc"; `debug` adds line info.
std::unique_ptr<Compiler> make_compiler(const std::string& backend, bool debug);

/// Bytes of local-memory spill stores + loads reported by ptxas in `log` (-1 when the log holds no report).
long spill_bytes_from_log(const std::string& log);

}  // namespace finegemm::jit
