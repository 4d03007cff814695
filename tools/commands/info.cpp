// `finegemm info`: the version, the JIT options, the cache directory and the device.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "commands/commands.hpp"
#include "finegemm/finegemm.hpp"
#include "jit/runtime.hpp"
#include "lib/device_buffer.hpp"

namespace fg = finegemm;
namespace ft = finegemm::tools;

namespace finegemm::tools::commands {

ft::OptionSet info_options() { return ft::OptionSet("info"); }

int cmd_info(const ft::ParsedArgs&) {
  std::printf("finegemm %s\noptions: %s\ncache: %s\n", fg::version(),
              fg::jit::Runtime::instance().options().describe().c_str(),
              fg::cache_dir().empty() ? "(disabled)" : fg::cache_dir().c_str());
  std::string why;
  if (ft::has_hopper_gpu(&why)) {
    cudaDeviceProp prop{};
    FG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, compute capability %d.%d\n", prop.name, prop.multiProcessorCount, prop.major,
                prop.minor);
  } else {
    std::printf("device: no Hopper GPU (%s)\n", why.c_str());
  }
  return 0;
}

}  // namespace finegemm::tools::commands
