// The toolkit's own JIT kernels (the GPU reference GEMM, the read flush): built and loaded by the library's runtime
// on the current device, like the GEMMs.
#pragma once

#include <cuda.h>

#include "jit/runtime.hpp"

namespace finegemm::tools {

/// The kernel `function` (an explicit instantiation, with `parameters` its parameter list) of device header `header`,
/// compiled or loaded from the disk cache. Throws finegemm::Error on a compile or driver error.
inline CUfunction jit_tool_kernel(const char* header, const char* function, const char* parameters) {
  jit::Runtime& rt = jit::Runtime::instance();
  jit::KernelSpec spec;
  spec.header = header;
  spec.function = function;
  spec.parameters = parameters;
  rt.current_device();
  return rt.function(*rt.binary(spec));
}

}  // namespace finegemm::tools
