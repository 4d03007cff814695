// The FP8 quantizers: 1x128 per-token (activations) and 128x128 per-block (weights), writing e4m3 codes and fp32
// dequantization scales in the layouts the GEMMs read.
//
// Numerics (bit-exact with the CPU reference, src/reference/quantize.cpp): for each block, amax = max |x|,
// scale = max(amax, 2^-64) / 448 and q = e4m3_rne_satfinite(x / scale), both divisions IEEE round-to-nearest
// (not x * (1 / scale), which rounds twice).
//
// Work split: 16 threads cover the 128 columns of one block row, 8 consecutive elements each (one 16-byte load
// for bf16, two for fp32; one 8-byte store of e4m3 codes). Per-token: 16 (group, row, k block) units per CTA,
// k block fastest so that a CTA reads 16 consecutive blocks of a row. Per-block: one CTA per 128x128 block, held in
// registers (8 passes of 16 rows), so the input is read once.
#pragma once

#include "finegemm/device/common/quantize_args.cuh"
#include "finegemm/device/common/types.cuh"
#include "finegemm/device/ptx/cvt.cuh"

namespace finegemm::device {

inline constexpr uint32_t kQuantNumWarps = kQuantNumThreads / 32;
inline constexpr uint32_t kPerBlockNumPasses = kQuantBlock / kQuantRowsPerPass;  // 8
inline constexpr float kQuantMinAmax = 0x1p-64f;  // smallest amax used: no scale is ever 0, inf or NaN
inline constexpr float kE4M3Max = 448.0f;
inline constexpr uint32_t kFullWarpMask = 0xFFFFFFFFu;

/// Loads 8 consecutive elements (bf16 or fp32) as floats; bf16 -> fp32 is exact.
template <bool kIsBF16>
FG_DEVICE void load_elements(const void* base, int64_t offset, float (&v)[kQuantElemsPerThread]) {
  if constexpr (kIsBF16) {
    uint32_t raw[4];
    ptx::ld_global_nc_v4_b32(static_cast<const uint16_t*>(base) + offset, raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(raw[i] << 16);
      v[2 * i + 1] = __uint_as_float(raw[i] & 0xFFFF0000u);
    }
  } else {
    uint32_t raw[2][4];
    const float* ptr = static_cast<const float*>(base) + offset;
    ptx::ld_global_nc_v4_b32(ptr, raw[0]);
    ptx::ld_global_nc_v4_b32(ptr + 4, raw[1]);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __uint_as_float(raw[i / 4][i % 4]);
  }
}

FG_DEVICE float abs_max(const float (&v)[kQuantElemsPerThread], float amax) {
#pragma unroll
  for (uint32_t i = 0; i < kQuantElemsPerThread; ++i) amax = fmaxf(amax, fabsf(v[i]));
  return amax;
}

/// Max of `value` over the aligned group of kWidth lanes holding the calling thread (kWidth: a power of two <= 32).
template <uint32_t kWidth>
FG_DEVICE float lane_group_max(float value) {
#pragma unroll
  for (uint32_t mask = kWidth / 2; mask > 0; mask /= 2) value = fmaxf(value, __shfl_xor_sync(kFullWarpMask, value, mask));
  return value;
}

FG_DEVICE float block_scale(float amax) { return __fdiv_rn(fmaxf(amax, kQuantMinAmax), kE4M3Max); }

/// Writes e4m3(v[i] / scale) for the 8 elements, element 0 at the lowest address.
/// x / scale, correctly rounded, given reciprocal = RN(1 / scale): q0 = RN(x * r) is within 1 ulp, the residual
/// x - q0 * scale is exact in one FMA, and RN(q0 + residual * r) is the correctly rounded quotient (Markstein) while
/// nothing underflows; a quotient that small rounds to e4m3 zero either way. 3 instructions instead of a full
/// IEEE division per element.
FG_DEVICE float divide_rn(float x, float scale, float reciprocal) {
  const float q0 = __fmul_rn(x, reciprocal);
  const float residual = __fmaf_rn(-q0, scale, x);
  return residual == 0.0f ? q0 : __fmaf_rn(residual, reciprocal, q0);  // an exact q0 keeps its sign (x = -0)
}

/// Quantizes 8 values with `scale` and stores them. kReciprocal: divide through one correctly rounded reciprocal
/// (divide_rn, cheap); otherwise IEEE division per element (for the per-block kernel, whose 64 live values would
/// spill around __frcp_rn's slow-path call). Both give the correctly rounded x / scale.
template <bool kReciprocal>
FG_DEVICE void store_quantized(uint8_t* ptr, const float (&v)[kQuantElemsPerThread], float scale) {
  float q[kQuantElemsPerThread];
  if constexpr (kReciprocal) {
    const float reciprocal = __frcp_rn(scale);
#pragma unroll
    for (uint32_t i = 0; i < kQuantElemsPerThread; ++i) q[i] = divide_rn(v[i], scale, reciprocal);
  } else {
#pragma unroll
    for (uint32_t i = 0; i < kQuantElemsPerThread; ++i) q[i] = __fdiv_rn(v[i], scale);
  }
  uint32_t packed[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint16_t lo = ptx::cvt_e4m3x2(q[4 * i], q[4 * i + 1]);
    const uint16_t hi = ptx::cvt_e4m3x2(q[4 * i + 2], q[4 * i + 3]);
    packed[i] = uint32_t(lo) | (uint32_t(hi) << 16);
  }
  ptx::st_global_v2_b32(ptr, packed[0], packed[1]);
}

/// 1x128 per-token quantization. Grid: ceil(G * rows * KB / kPerTokenUnitsPerCta) CTAs of kQuantNumThreads.
template <bool kIsBF16>
__global__ void __launch_bounds__(kQuantNumThreads) per_token_cast_kernel(const QuantizeArgs args) {
  // ---- Config checks --------------------------------------------------------------------------
  static_assert(kQuantThreadsPerBlockRow * kQuantElemsPerThread == kQuantBlock, "16 threads cover one block row");
  static_assert(32 % kQuantThreadsPerBlockRow == 0, "a unit's threads sit in one warp");

  // ---- Work split: unit = (group, row, k block), k block fastest (the host keeps unit indices below 2^31) ----------
  const uint32_t num_k_blocks = ceil_div<uint32_t>(uint32_t(args.num_cols), kQuantBlock);
  const uint32_t num_units = uint32_t(args.num_groups) * uint32_t(args.num_rows) * num_k_blocks;
  const uint32_t unit_idx = blockIdx.x * kPerTokenUnitsPerCta + threadIdx.x / kQuantThreadsPerBlockRow;
  const uint32_t sub_idx = threadIdx.x % kQuantThreadsPerBlockRow;
  // NOTE: threads past the last unit carry on with zeros: every lane of the warp takes part in the shuffles.
  const bool unit_valid = unit_idx < num_units;
  const uint32_t k_block_idx = unit_idx % num_k_blocks;
  const uint32_t row_linear = unit_idx / num_k_blocks;  // group * rows + row
  const uint32_t group_idx = args.num_groups == 1 ? 0 : row_linear / uint32_t(args.num_rows);
  const uint32_t row_idx = row_linear - group_idx * uint32_t(args.num_rows);
  const uint32_t col = k_block_idx * kQuantBlock + sub_idx * kQuantElemsPerThread;
  const bool active = unit_valid && col < uint32_t(args.num_cols);

  // ---- Load and reduce the block's amax ----------------------------------------------------------
  float v[kQuantElemsPerThread] = {};
  if (active)
    load_elements<kIsBF16>(args.x, group_idx * args.x_group_stride + row_idx * args.x_row_stride + col, v);
  const float amax = lane_group_max<kQuantThreadsPerBlockRow>(abs_max(v, 0.0f));
  const float scale = block_scale(amax);

  // ---- Quantize and write ----------------------------------------------------------------------------
  if (active)
    store_quantized<true>(args.out + group_idx * args.out_group_stride + row_idx * args.out_row_stride + col, v, scale);
  if (unit_valid && sub_idx == 0)
    args.scales[group_idx * args.scale_group_stride + row_idx * args.scale_row_stride +
                k_block_idx * args.scale_k_block_stride] = scale;
}

/// 128x128 per-block quantization. Grid: G * ceil(rows/128) * KB CTAs of kQuantNumThreads.
template <bool kIsBF16>
__global__ void __launch_bounds__(kQuantNumThreads) per_block_cast_kernel(const QuantizeArgs args) {
  // ---- Config checks --------------------------------------------------------------------------
  static_assert(kQuantThreadsPerBlockRow * kQuantElemsPerThread == kQuantBlock, "16 threads cover one block row");
  static_assert(kPerBlockNumPasses * kQuantRowsPerPass == kQuantBlock, "the passes cover the block's rows");

  // ---- Shared memory carve-up -----------------------------------------------------------------------
  __shared__ float warp_amax[kQuantNumWarps];  // (kQuantNumWarps)

  // ---- Work split: CTA = (group, row block, k block), k block fastest -----------------------------------
  const uint32_t num_k_blocks = ceil_div<uint32_t>(uint32_t(args.num_cols), kQuantBlock);
  const uint32_t num_row_blocks = ceil_div<uint32_t>(uint32_t(args.num_rows), kQuantBlock);
  const uint32_t k_block_idx = blockIdx.x % num_k_blocks;
  const uint32_t row_block_idx = (blockIdx.x / num_k_blocks) % num_row_blocks;
  const uint32_t group_idx = blockIdx.x / (num_k_blocks * num_row_blocks);
  const uint32_t sub_idx = threadIdx.x % kQuantThreadsPerBlockRow;
  const uint32_t row_in_pass = threadIdx.x / kQuantThreadsPerBlockRow;
  const uint32_t col = k_block_idx * kQuantBlock + sub_idx * kQuantElemsPerThread;
  const bool col_active = col < uint32_t(args.num_cols);
  const uint32_t first_row = row_block_idx * kQuantBlock + row_in_pass;

  // ---- Load the block into registers, reduce its amax -------------------------------------------------
  float v[kPerBlockNumPasses][kQuantElemsPerThread];
  float amax = 0.0f;
#pragma unroll
  for (uint32_t pass = 0; pass < kPerBlockNumPasses; ++pass) {
    const uint32_t row = first_row + pass * kQuantRowsPerPass;
#pragma unroll
    for (uint32_t i = 0; i < kQuantElemsPerThread; ++i) v[pass][i] = 0.0f;
    if (col_active && row < uint32_t(args.num_rows))
      load_elements<kIsBF16>(args.x, int64_t(group_idx) * args.x_group_stride + int64_t(row) * args.x_row_stride + col,
                             v[pass]);
    amax = abs_max(v[pass], amax);
  }
  amax = lane_group_max<32>(amax);
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
#pragma unroll
  for (uint32_t warp = 0; warp < kQuantNumWarps; ++warp) amax = fmaxf(amax, warp_amax[warp]);
  const float scale = block_scale(amax);

  // ---- Quantize and write ----------------------------------------------------------------------------
#pragma unroll
  for (uint32_t pass = 0; pass < kPerBlockNumPasses; ++pass) {
    const uint32_t row = first_row + pass * kQuantRowsPerPass;
    if (col_active && row < uint32_t(args.num_rows))
      store_quantized<false>(args.out + int64_t(group_idx) * args.out_group_stride + int64_t(row) * args.out_row_stride + col,
                      v[pass], scale);
  }
  if (threadIdx.x == 0)
    args.scales[int64_t(group_idx) * args.scale_group_stride + int64_t(row_block_idx) * args.scale_row_stride +
                int64_t(k_block_idx) * args.scale_k_block_stride] = scale;
}

}  // namespace finegemm::device
