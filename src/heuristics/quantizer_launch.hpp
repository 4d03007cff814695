// How an FP8 quantizer is launched besides its grid: the dynamic shared memory that keeps its CTAs one per SM under
// programmatic dependent launch. Called by the quantizers' entry points (src/api/quantize.cpp).
#pragma once

#include <cstdint>

namespace finegemm::heuristics {

/// An SM's shared-memory budget as the driver reports it.
struct SmSharedMemory {
  int per_sm = 0;              ///< CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
  int reserved_per_cta = 0;    ///< CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK (the driver's own)
};

/// Dynamic shared memory (bytes, never read) for a per-token quantizer launch of `grid` CTAs whose kernel has
/// `static_smem` bytes of its own, so that no two of its CTAs share an SM; 0 where that is not wanted.
///
/// Under programmatic dependent launch a quantizer is launched while the GEMM before it still holds the SMs. Its
/// CTAs, several of which would fit an SM, are then all placed on the few SMs that GEMM leaves free, and run there
/// side by side once it ends: a 128-tile GEMM on 132 SMs leaves 4, and a 128-token quantization of K = 1536 has 12
/// CTAs. Holding more than half of an SM's shared memory, a CTA takes an SM of its own, and the others are placed as
/// the GEMM's CTAs leave theirs. Only under PDL (without it the CTAs are placed on SMs the kernel before has left)
/// and for grids of at most kQuantizerSpreadMaxSmShare of the SMs (`num_sms`): a grid of nearly one CTA per SM then
/// holds nearly every SM, and the next GEMM's CTAs, launched from the quantizer's start, wait for them (measured
/// neutral to 2% slower on a 128-CTA quantization, where the small grids gained; docs/heuristics.md).
inline constexpr int kQuantizerSpreadMaxSmShare = 4;  ///< at most num_sms / 4 CTAs
int quantizer_spread_smem_bytes(int64_t grid, bool pdl, int num_sms, const SmSharedMemory& sm, int static_smem);

}  // namespace finegemm::heuristics
