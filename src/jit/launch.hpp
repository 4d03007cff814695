// One kernel launch through the driver (cuLaunchKernelEx): grid, block, dynamic shared memory, cluster size and
// programmatic dependent launch, described once for the library's kernels and the toolkit's.
#pragma once

#include <cuda.h>

#include "jit/driver.hpp"

namespace finegemm::jit {

/// What a launch needs besides the kernel and its arguments. A 1-D block; a 1- or 2-D grid.
struct LaunchShape {
  unsigned grid_x = 1;
  unsigned grid_y = 1;
  unsigned block_x = 1;
  unsigned smem_bytes = 0;  ///< dynamic shared memory per CTA
  unsigned cluster_x = 1;   ///< CTAs per cluster along x; 1 sets no cluster attribute (see Launch::config)
  bool pdl = false;         ///< programmatic dependent launch (finegemm::set_pdl)
};

/// A launch configuration with the attributes it points to: keep the object alive while the configuration is used.
class Launch {
 public:
  Launch(const LaunchShape& shape, CUstream stream) {
    config_.gridDimX = shape.grid_x;
    config_.gridDimY = shape.grid_y;
    config_.gridDimZ = 1;
    config_.blockDimX = shape.block_x;
    config_.blockDimY = 1;
    config_.blockDimZ = 1;
    config_.sharedMemBytes = shape.smem_bytes;
    config_.hStream = stream;
    unsigned n = 0;
    // A cluster attribute sends even a 1-CTA cluster down the driver's slower cluster-launch path.
    if (shape.cluster_x > 1) {
      attrs_[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs_[n].value.clusterDim.x = shape.cluster_x;
      attrs_[n].value.clusterDim.y = 1;
      attrs_[n].value.clusterDim.z = 1;
      ++n;
    }
    // The kernel may start while the previous one on the stream runs; it waits for its inputs itself
    // (griddepcontrol.wait).
    if (shape.pdl) {
      attrs_[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs_[n].value.programmaticStreamSerializationAllowed = 1;
      ++n;
    }
    config_.attrs = n > 0 ? attrs_ : nullptr;
    config_.numAttrs = n;
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  /// For the driver's occupancy queries too (cuOccupancyMaxActiveClusters).
  const CUlaunchConfig& config() const { return config_; }

  /// Launches `function` with `args`; throws finegemm::Error naming `what` on a driver error.
  void run(CUfunction function, void** args, const char* what) const {
    check_cu(driver().cuLaunchKernelEx(&config_, function, args, nullptr), what);
  }

 private:
  CUlaunchConfig config_{};
  CUlaunchAttribute attrs_[2]{};
};

/// Launches `function` with `args` on `stream`; throws finegemm::Error naming `what` on a driver error.
inline void launch_kernel(CUfunction function, const LaunchShape& shape, CUstream stream, void** args,
                          const char* what) {
  Launch(shape, stream).run(function, args, what);
}

}  // namespace finegemm::jit
