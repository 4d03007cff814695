// The toolkit's own JIT kernels (tools/device: the GPU reference GEMM, the read flush, the floor kernels): built with
// the library's runtime and loaded on the current device, like the GEMMs, from headers embedded in the toolkit.
#pragma once

#include <cuda.h>

#include "jit/embedded_headers.hpp"
#include "jit/runtime.hpp"

namespace finegemm::tools {

/// The toolkit's device headers (tools/device/*.cuh, included as "finegemm/tools/<name>.cuh").
const jit::HeaderSet& tool_headers();

/// The kernel `function` (an explicit instantiation, with `parameters` its parameter list) of the toolkit's device
/// header `header`, compiled or loaded from the disk cache. Throws finegemm::Error on a compile or driver error.
inline CUfunction jit_tool_kernel(const char* header, const char* function, const char* parameters) {
  jit::Runtime& rt = jit::Runtime::instance();
  jit::KernelSpec spec;
  spec.header = header;
  spec.function = function;
  spec.parameters = parameters;
  spec.own_headers = &tool_headers();
  rt.current_device();
  return rt.function(*rt.binary(spec));
}

}  // namespace finegemm::tools
