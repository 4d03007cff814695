// The device headers under include/finegemm/device/, embedded at build time (cmake/embed_headers.cmake).
#pragma once

#include <cstddef>
#include <vector>

namespace finegemm::jit {

struct EmbeddedHeader {
  const char* path;     ///< relative to include/, e.g. "finegemm/device/ptx/wgmma.cuh"
  const char* content;  ///< NUL-terminated
  size_t size;
};

const std::vector<EmbeddedHeader>& embedded_headers();

}  // namespace finegemm::jit
