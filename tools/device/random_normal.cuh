// Random operands for the decode chain of `finegemm bench --chain` (tools/lib/chain.cpp): normal values written on the
// GPU, where the host would take seconds for the gigabytes of weights of 16 layers. Element i of stream `seed` is a
// pure function of (seed, i), so every run and every process draws the same values.
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::tools {

/// The splitmix64 finalizer: a bijection of 64-bit words whose outputs pass as independent uniform bits.
FG_DEVICE uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

FG_DEVICE void store_value(float* out, float v) { *out = v; }

/// bf16 bits of a finite `v`, rounded to nearest even.
FG_DEVICE void store_value(uint16_t* out, float v) {
  const uint32_t bits = __float_as_uint(v);
  *out = uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

/// out[i] = stddev * z_i for i < count, z_i standard normal (Box-Muller over 48 bits of mix64). T: float, or uint16_t
/// for bf16 bits.
template <typename T>
__global__ void __launch_bounds__(256) random_normal_kernel(T* out, uint64_t count, uint64_t seed, float stddev) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const uint64_t h = mix64(seed ^ mix64(i));
    const float u1 = (float(uint32_t(h >> 40)) + 1.0f) * 0x1p-24f;  // (0, 1]: the logarithm stays finite
    const float u2 = float(uint32_t(h) & 0xFFFFFFu) * 0x1p-24f;     // [0, 1)
    store_value(out + i, stddev * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
  }
}

}  // namespace finegemm::tools
