// Tensor maps for the TMA microbenchmarks: cuTensorMapEncodeTiled (fetched through the runtime's driver entry point,
// so the binaries need no -lcuda) over bytes, every element stride 1, L2 promotion 256 B, no out-of-bounds fill.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "check.cuh"
#include "finegemm/device/common/types.cuh"

/// A tensor map over `base`'s bytes: dims[0] innermost, strides[i] the bytes between steps of dimension i + 1.
inline finegemm::device::TmaDescriptor make_tma_map(void* base, uint32_t rank, const cuuint64_t* dims,
                                                    const cuuint64_t* strides, const cuuint32_t* box,
                                                    CUtensorMapSwizzle swizzle) {
  using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const EncodeFn encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (fn == nullptr) {
      std::printf("cuTensorMapEncodeTiled not found\n");
      std::exit(1);
    }
    return reinterpret_cast<EncodeFn>(fn);
  }();
  finegemm::device::TmaDescriptor d;
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = encode(reinterpret_cast<CUtensorMap*>(&d), CU_TENSOR_MAP_DATA_TYPE_UINT8, rank, base, dims,
                            strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled failed (%d)\n", int(r));
    std::exit(1);
  }
  return d;
}
