// The GPU reference GEMM used by tests and `finegemm check` on shapes too large for the CPU reference.
// D[m,n] = sum_kb SA[m,kb] * SB[n/sb_block_rows,kb] * sum_{k in kb} A[m,k]*B[n,k] over the dequantized FP8 inputs:
// each product of two e4m3 values is exact in fp32, block sums and the scaled sum are fp64. Also writes sum of |terms|
// for element-wise tolerances. SA is K-major [M, KB] with row stride ld_sa; A, B row-major with row stride K; SB is
// [ceil(N/sb_block_rows), KB] row-major: sb_block_rows 128 for B's 128x128 blocks, 1 for its 1x128 blocks.
#pragma once

#include "finegemm/device/common/types.cuh"

namespace finegemm::tools {

FG_DEVICE float e4m3_to_float(uint8_t code) {
  const uint32_t sign = (code >> 7) & 1, exponent = (code >> 3) & 0xF, mantissa = code & 7;
  float v;
  if (exponent == 0xF && mantissa == 7) {
    v = __int_as_float(0x7FC00000);
  } else if (exponent == 0) {
    v = float(mantissa) * 0.001953125f;  // subnormal: m * 2^-9
  } else {
    v = __int_as_float(int((exponent + 120) << 23 | mantissa << 20));
  }
  return sign ? -v : v;
}

inline constexpr uint32_t kRefChunk = 32;  // K elements staged per step

/// kRefTile: outputs per block along M and N (64: 256 threads of 4x4 outputs).
template <uint32_t kRefTile>
__global__ void __launch_bounds__(256) reference_gemm_kernel(const uint8_t* a, const float* sa, int64_t ld_sa,
                                                             const uint8_t* b, const float* sb, int32_t sb_block_rows,
                                                             double* d, double* abs_sum, int32_t m, int32_t n,
                                                             int32_t k) {
  static_assert(kRefTile == 64, "256 threads x 4x4 outputs");
  __shared__ float tile_a[kRefChunk][kRefTile + 1];
  __shared__ float tile_b[kRefChunk][kRefTile + 1];
  const int32_t num_k_blocks = (k + 127) / 128;
  const int32_t tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int32_t m0 = blockIdx.y * kRefTile, n0 = blockIdx.x * kRefTile;
  double acc[4][4] = {}, acc_abs[4][4] = {};
  for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
    double block[4][4] = {}, block_abs[4][4] = {};
    for (int32_t kc = kb * 128; kc < device::min_of(k, kb * 128 + 128); kc += kRefChunk) {
      for (uint32_t i = threadIdx.x; i < kRefChunk * kRefTile; i += blockDim.x) {
        const int32_t kk = i % kRefChunk, r = i / kRefChunk;
        const bool in_k = kc + kk < k;
        tile_a[kk][r] = (in_k && m0 + r < m) ? e4m3_to_float(a[int64_t(m0 + r) * k + kc + kk]) : 0.f;
        tile_b[kk][r] = (in_k && n0 + r < n) ? e4m3_to_float(b[int64_t(n0 + r) * k + kc + kk]) : 0.f;
      }
      __syncthreads();
      for (int32_t kk = 0; kk < int32_t(kRefChunk); ++kk) {
        float av[4], bv[4];
        for (int i = 0; i < 4; ++i) av[i] = tile_a[kk][ty * 4 + i];
        for (int j = 0; j < 4; ++j) bv[j] = tile_b[kk][tx * 4 + j];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) {
            const double p = double(av[i] * bv[j]);  // exact in fp32
            block[i][j] += p;
            block_abs[i][j] += p < 0 ? -p : p;
          }
      }
      __syncthreads();
    }
    for (int i = 0; i < 4; ++i) {
      const int32_t row = m0 + ty * 4 + i;
      if (row >= m) continue;
      const double s_a = sa[int64_t(row) * ld_sa + kb];
      for (int j = 0; j < 4; ++j) {
        const int32_t col = n0 + tx * 4 + j;
        if (col >= n) continue;
        const double s = s_a * double(sb[int64_t(col / sb_block_rows) * num_k_blocks + kb]);
        acc[i][j] += s * block[i][j];
        acc_abs[i][j] += (s < 0 ? -s : s) * block_abs[i][j];
      }
    }
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int32_t row = m0 + ty * 4 + i, col = n0 + tx * 4 + j;
      if (row < m && col < n) {
        d[int64_t(row) * n + col] = acc[i][j];
        abs_sum[int64_t(row) * n + col] = acc_abs[i][j];
      }
    }
}

}  // namespace finegemm::tools
