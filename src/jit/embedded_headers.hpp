// Device headers embedded at build time (cmake/embed_headers.cmake), from which the JIT compiles: the library's own
// (include/finegemm/device/), and, for programs that bring kernels of their own (the CLI, the tests), theirs.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace finegemm::jit {

struct EmbeddedHeader {
  const char* path;     ///< the include path, e.g. "finegemm/device/ptx/wgmma.cuh"
  const char* content;  ///< NUL-terminated
  size_t size;
};

/// A set of embedded headers and the hash of their paths and contents (part of the cache key of every kernel
/// compiled with them).
struct HeaderSet {
  std::vector<EmbeddedHeader> headers;
  std::string hash;

  explicit HeaderSet(std::vector<EmbeddedHeader> embedded);
};

/// The library's device headers: what every kernel compiles with.
const HeaderSet& library_headers();

}  // namespace finegemm::jit
