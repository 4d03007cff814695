// The FP8 quantizers: 1x128 per-token (activations) and 128x128 per-block (weights), writing e4m3 codes and fp32
// dequantization scales in the layouts the GEMMs read.
//
// Numerics (bit-exact with the CPU reference, src/reference/quantize.cpp): per block, amax = max |x|,
// scale = RN(max(amax, 2^-64) / 448) and q = e4m3_rne_satfinite(RN(x / scale)), with no division instruction:
// - block_scale: s0 = RN(a * RN(1/448)) is within 1 ulp of a / 448, the residual a - 448 * s0 is exact in one FMA,
//   and RN(s0 + residual * RN(1/448)) is the correctly rounded quotient (Markstein's theorem).
// - reciprocal_rn: RN(1 / scale) from the 1-ulp hardware approximation, one Newton step, then whichever of the result
//   and its neighbour towards 1 / scale has the smaller exact FMA residual |1 - scale * r|. Scales lie in
//   [2^-64 / 448, FLT_MAX / 448], so neither a scale nor its reciprocal is ever subnormal.
// - divide_rn: the same Markstein correction per element with r = RN(1 / scale), one FMUL and two FFMAs. For
//   quotients of at least 2^-11 the residual stays a multiple of 2^-149, hence exact; smaller quotients (where q0 may
//   be subnormal) round to an e4m3 zero of the sign of x either way.
// tests/unit/test_quantize_arith.cpp proves these steps on the CPU (exhaustively where the argument needs it);
// tests/gpu/test_quantize_gpu.cpp checks the device functions against the GPU's IEEE division.
//
// Work split: 4 threads share each 128-column block row, thread t holding the 16-byte vectors t, t + 4, ... of the row
// (32 elements), so that each vector load of the 4 threads reads 64 contiguous bytes. A thread holds 2 rows and issues
// all its loads (8 for bf16, 16 for fp32) before any arithmetic, keeping the input as loaded until it quantizes it.
// Per element that leaves one bf16 unpack, FMUL + 2 FFMA and half a conversion, plus half a packed max for the amax.
// - Per-token: an item is one k block of 2 consecutive rows, (group, row pair, k block) with k block fastest, taken
//   by 4 threads; a CTA of 256 threads takes 64 items (32 KB of bf16).
// - Per-block: a CTA of 256 threads takes one 128x128 block in 2 passes of 64 rows, both held in registers (the input
//   is read once); the amax goes through warp shuffles and one shared-memory exchange.
#pragma once

#include "finegemm/device/common/quantize_args.cuh"
#include "finegemm/device/common/types.cuh"
#include "finegemm/device/ptx/cvt.cuh"
#include "finegemm/device/ptx/sync.cuh"

namespace finegemm::device {

inline constexpr uint32_t kFullWarpMask = 0xFFFFFFFFu;
inline constexpr uint32_t kPerBlockNumWarps = kPerBlockNumThreads / 32;
/// CTAs of 256 threads kept resident per SM: with bf16, 1024 threads x 8 loads x 16 bytes = 128 KB in flight per SM
/// (at most 64 registers); fp32 needs more registers for its 16 loads.
template <bool kIsBF16>
inline constexpr int kQuantMinCtasPerSm = kIsBF16 ? 4 : 2;
inline constexpr uint32_t kLowHalves = 0x5410;   // __byte_perm selector: (a.lo, b.lo)
inline constexpr uint32_t kHighHalves = 0x7632;  // __byte_perm selector: (a.hi, b.hi)

// ---- Exact arithmetic ------------------------------------------------------------------------------------------

/// RN(max(amax, 2^-64) / 448).
FG_DEVICE float block_scale(float amax) {
  const float a = fmaxf(amax, kQuantMinAmax);
  const float s0 = __fmul_rn(a, kInvE4M3Max);
  return __fmaf_rn(__fmaf_rn(-s0, kE4M3Max, a), kInvE4M3Max, s0);
}

/// RN(1 / scale) for scale in [kQuantMinScale, kQuantMaxScale].
FG_DEVICE float reciprocal_rn(float scale) {
  const float seed = ptx::rcp_approx_ftz(scale);
  const float r = __fmaf_rn(seed, __fmaf_rn(-scale, seed, 1.0f), seed);
  const float residual = __fmaf_rn(-scale, r, 1.0f);  // exact: 1 - scale * r
  const float neighbour = __uint_as_float(__float_as_uint(r) + (residual > 0.0f ? 1u : ~0u));  // towards 1 / scale
  return fabsf(__fmaf_rn(-scale, neighbour, 1.0f)) < fabsf(residual) ? neighbour : r;
}

/// RN(x / scale) given reciprocal = RN(1 / scale), wherever e4m3 can tell the difference.
FG_DEVICE float divide_rn(float x, float scale, float reciprocal) {
  const float q0 = __fmul_rn(x, reciprocal);
  const float neg_residual = __fmaf_rn(q0, scale, -x);  // exact: q0 * scale - x
  // NOTE: the residual enters negated so that an exact quotient adds -0 to q0 and x = -0 keeps its sign; this needs
  // signed zeros honoured (no fast-math), as NVRTC compiles by default.
  return __fmaf_rn(-neg_residual, reciprocal, q0);
}

/// Max of `value` over the aligned group of kWidth lanes holding the calling thread (kWidth: a power of two <= 32).
template <uint32_t kWidth>
FG_DEVICE float lane_group_max(float value) {
#pragma unroll
  for (uint32_t mask = kWidth / 2; mask > 0; mask /= 2)
    value = fmaxf(value, __shfl_xor_sync(kFullWarpMask, value, mask));
  return value;
}

/// The same over a bf16 pair whose halves' magnitudes are the values (see ptx::max_xorsign_abs_bf16x2).
template <uint32_t kWidth>
FG_DEVICE uint32_t lane_group_max_bf16x2(uint32_t value) {
#pragma unroll
  for (uint32_t mask = kWidth / 2; mask > 0; mask /= 2)
    value = ptx::max_xorsign_abs_bf16x2(value, __shfl_xor_sync(kFullWarpMask, value, mask));
  return value;
}

/// The low and high bf16 halves of `pair` as floats (exact).
FG_DEVICE float bf16_lo_to_float(uint32_t pair) { return __uint_as_float(pair << 16); }
FG_DEVICE float bf16_hi_to_float(uint32_t pair) { return __uint_as_float(pair & 0xFFFF0000u); }

// ---- One thread's part of a block row ------------------------------------------------------------------------

/// The vectors lane, lane + 4, ... of one 128-column block row (16 bytes each: 8 bf16 or 4 fp32), kept as loaded;
/// vectors at or past the row's `num_cols` valid columns are zero and never stored.
template <bool kIsBF16>
struct RowSlice {
  static constexpr uint32_t kElemBytes = kIsBF16 ? 2 : 4;
  static constexpr uint32_t kElemsPerVec = 16 / kElemBytes;
  static constexpr uint32_t kNumVecs = kQuantElemsPerThreadRow / kElemsPerVec;  // 4 (bf16) or 8 (fp32)
  static_assert(kElemsPerVec <= kQuantColumnAlign, "K % kQuantColumnAlign == 0 makes every vector whole");

  uint32_t raw[kNumVecs][4];

  /// Column of vector `i` within the block: the lane's first plus a constant (immediate address offsets).
  static FG_DEVICE uint32_t column(uint32_t lane, uint32_t i) { return lane * kElemsPerVec + i * kVecStride; }
  static constexpr uint32_t kVecStride = kQuantThreadsPerRow * kElemsPerVec;  // columns

  /// Element `e` of vector `i` as a float.
  FG_DEVICE float element(uint32_t i, uint32_t e) const {
    if constexpr (kIsBF16) return e % 2 == 0 ? bf16_lo_to_float(raw[i][e / 2]) : bf16_hi_to_float(raw[i][e / 2]);
    else return __uint_as_float(raw[i][e]);
  }

  /// Loads the block row at `x_row`.
  FG_DEVICE void load(const uint8_t* x_row, uint32_t lane, uint32_t num_cols) {
    const uint8_t* x_lane = x_row + column(lane, 0) * kElemBytes;
#pragma unroll
    for (uint32_t i = 0; i < kNumVecs; ++i) {
#pragma unroll
      for (uint32_t w = 0; w < 4; ++w) raw[i][w] = 0;
      ptx::ld_global_v4_b32_if(column(lane, i) < num_cols, x_lane + i * kVecStride * kElemBytes, raw[i]);
    }
  }

  /// bf16 only: a bf16 pair whose halves' magnitudes have max |x| over the slice (NaNs ignored, as by fmaxf).
  FG_DEVICE uint32_t abs_max_bf16x2() const {
    static_assert(kIsBF16, "packed maxima of bf16 inputs");
    uint32_t packed = 0;
#pragma unroll
    for (uint32_t i = 0; i < kNumVecs; ++i)
#pragma unroll
      for (uint32_t w = 0; w < 4; ++w) packed = ptx::max_xorsign_abs_bf16x2(packed, raw[i][w]);
    return packed;
  }

  /// max(amax, |x|) over the slice; NaNs are ignored, as by fmaxf.
  FG_DEVICE float abs_max(float amax) const {
    if constexpr (kIsBF16) {
      const uint32_t packed = abs_max_bf16x2();
      return fmaxf(amax, fmaxf(fabsf(bf16_lo_to_float(packed)), fabsf(bf16_hi_to_float(packed))));
    } else {
#pragma unroll
      for (uint32_t i = 0; i < kNumVecs; ++i)
#pragma unroll
        for (uint32_t e = 0; e < kElemsPerVec; ++e) amax = fmaxf(amax, fabsf(element(i, e)));
      return amax;
    }
  }

  /// Writes e4m3(x / scale) for the valid vectors to the row whose first column is `out_row`.
  FG_DEVICE void store_quantized(uint8_t* out_row, uint32_t lane, uint32_t num_cols, float scale,
                                 float reciprocal) const {
    uint8_t* out_lane = out_row + column(lane, 0);
#pragma unroll
    for (uint32_t i = 0; i < kNumVecs; ++i) {
      // NOTE: every vector is quantized and only the store is predicated: a guard around the arithmetic would be a
      // branch per vector.
      uint32_t codes[kElemsPerVec / 4];  // 4 codes per word, element 0 in the low byte
#pragma unroll
      for (uint32_t c = 0; c < kElemsPerVec / 4; ++c) {
        float q[4];
#pragma unroll
        for (uint32_t e = 0; e < 4; ++e) q[e] = divide_rn(element(i, 4 * c + e), scale, reciprocal);
        codes[c] = uint32_t(ptx::cvt_e4m3x2(q[0], q[1])) | (uint32_t(ptx::cvt_e4m3x2(q[2], q[3])) << 16);
      }
      const bool valid = column(lane, i) < num_cols;
      if constexpr (kIsBF16) ptx::st_global_v2_b32_if(valid, out_lane + i * kVecStride, codes[0], codes[1]);
      else ptx::st_global_b32_if(valid, out_lane + i * kVecStride, codes[0]);
    }
  }
};

/// Valid columns of k block `k_block_idx`: 128 but in a partial last block.
FG_DEVICE uint32_t block_num_cols(const QuantizeArgs& args, uint32_t k_block_idx) {
  return min_of<uint32_t>(kQuantBlock, uint32_t(args.num_cols) - k_block_idx * kQuantBlock);
}

// ---- Kernels ----------------------------------------------------------------------------------------------------

/// 1x128 per-token quantization. Grid: ceil(G * ceil(rows/2) * KB / kPerTokenItemsPerCta) CTAs of
/// kPerTokenNumThreads.
template <bool kIsBF16>
__global__ void __launch_bounds__(kPerTokenNumThreads, kQuantMinCtasPerSm<kIsBF16>)
    per_token_cast_kernel(const QuantizeArgs args) {
  // ---- Config checks --------------------------------------------------------------------------
  static_assert(32 % kQuantThreadsPerRow == 0, "a block row's threads sit in one warp");
  static_assert(kQuantRowsPerThread <= kQuantThreadsPerRow, "one lane per row writes its scale");
  using Slice = RowSlice<kIsBF16>;

  // ---- Work split: item = (group, row tile, k block), k block fastest (the host keeps item indices below 2^31) --
  const uint32_t num_k_blocks = ceil_div<uint32_t>(uint32_t(args.num_cols), kQuantBlock);
  const uint32_t num_row_tiles = ceil_div<uint32_t>(uint32_t(args.num_rows), kQuantRowsPerThread);
  const uint32_t item_idx = blockIdx.x * kPerTokenItemsPerCta + threadIdx.x / kQuantThreadsPerRow;
  const uint32_t lane = threadIdx.x % kQuantThreadsPerRow;
  const uint32_t k_block_idx = item_idx % num_k_blocks;
  const uint32_t tile_idx = item_idx / num_k_blocks;  // group * row tiles + row tile
  const uint32_t group_idx = tile_idx / num_row_tiles;
  const uint32_t first_row = (tile_idx - group_idx * num_row_tiles) * kQuantRowsPerThread;
  // NOTE: threads past the last item carry on with zeros: every lane of the warp takes part in the shuffles.
  const uint32_t block_cols = group_idx < uint32_t(args.num_groups) ? block_num_cols(args, k_block_idx) : 0;
  const uint32_t col = k_block_idx * kQuantBlock;
  const uint8_t* x = static_cast<const uint8_t*>(args.x) +
                     (group_idx * args.x_group_stride + first_row * args.x_row_stride + col) * Slice::kElemBytes;
  uint8_t* out = args.out + group_idx * args.out_group_stride + first_row * args.out_row_stride + col;
  float* scales = args.scales + group_idx * args.scale_group_stride + first_row * args.scale_row_stride +
                  k_block_idx * args.scale_k_block_stride;

  // ---- Load the tile's rows before any arithmetic (after the previous kernel's results, under PDL) ---------------
  ptx::launch_dependents();
  ptx::grid_dependency_wait();
  Slice slices[kQuantRowsPerThread];
  uint32_t num_cols[kQuantRowsPerThread];  // 0 for rows past the last
#pragma unroll
  for (uint32_t j = 0; j < kQuantRowsPerThread; ++j) {
    num_cols[j] = first_row + j < uint32_t(args.num_rows) ? block_cols : 0;
    slices[j].load(x + j * args.x_row_stride * Slice::kElemBytes, lane, num_cols[j]);
  }

  // ---- Reduce each row's amax over its threads ----------------------------------------------------------
  float row_scales[kQuantRowsPerThread];
  if constexpr (kIsBF16) {
    // NOTE: both rows' maxima travel as one bf16 pair: half the shuffles, and since the reduction needs all loads
    // of the thread, ptxas cannot defer the second row's loads past the first row's stores.
    static_assert(kQuantRowsPerThread == 2, "one bf16 half per row");
    const uint32_t row0 = slices[0].abs_max_bf16x2(), row1 = slices[1].abs_max_bf16x2();
    const uint32_t both = lane_group_max_bf16x2<kQuantThreadsPerRow>(ptx::max_xorsign_abs_bf16x2(
        __byte_perm(row0, row1, kLowHalves), __byte_perm(row0, row1, kHighHalves)));
    row_scales[0] = block_scale(fabsf(bf16_lo_to_float(both)));
    row_scales[1] = block_scale(fabsf(bf16_hi_to_float(both)));
  } else {
#pragma unroll
    for (uint32_t j = 0; j < kQuantRowsPerThread; ++j)
      row_scales[j] = block_scale(lane_group_max<kQuantThreadsPerRow>(slices[j].abs_max(0.0f)));
  }

  // ---- Quantize and write ----------------------------------------------------------------------------
#pragma unroll
  for (uint32_t j = 0; j < kQuantRowsPerThread; ++j) {
    slices[j].store_quantized(out + j * args.out_row_stride, lane, num_cols[j], row_scales[j],
                              reciprocal_rn(row_scales[j]));
    if (lane == j && num_cols[j] > 0) scales[j * args.scale_row_stride] = row_scales[j];
  }
}

/// 128x128 per-block quantization. Grid: G * ceil(rows/128) * KB CTAs of kPerBlockNumThreads.
template <bool kIsBF16>
__global__ void __launch_bounds__(kPerBlockNumThreads, kQuantMinCtasPerSm<kIsBF16>)
    per_block_cast_kernel(const QuantizeArgs args) {
  // ---- Config checks --------------------------------------------------------------------------
  static_assert(kQuantRowsPerThread * kPerBlockRowsPerPass == kQuantBlock, "the passes cover the block's rows");
  using Slice = RowSlice<kIsBF16>;

  // ---- Shared memory carve-up -----------------------------------------------------------------------
  __shared__ float warp_amax[kPerBlockNumWarps];  // (kPerBlockNumWarps)

  // ---- Work split: CTA = (group, row block, k block), k block fastest -----------------------------------
  const uint32_t num_k_blocks = ceil_div<uint32_t>(uint32_t(args.num_cols), kQuantBlock);
  const uint32_t num_row_blocks = ceil_div<uint32_t>(uint32_t(args.num_rows), kQuantBlock);
  const uint32_t k_block_idx = blockIdx.x % num_k_blocks;
  const uint32_t row_block_idx = (blockIdx.x / num_k_blocks) % num_row_blocks;
  const uint32_t group_idx = blockIdx.x / (num_k_blocks * num_row_blocks);
  const uint32_t lane = threadIdx.x % kQuantThreadsPerRow;
  const uint32_t first_row = row_block_idx * kQuantBlock + threadIdx.x / kQuantThreadsPerRow;
  const uint32_t col = k_block_idx * kQuantBlock;
  const uint32_t block_cols = block_num_cols(args, k_block_idx);
  const uint8_t* x = static_cast<const uint8_t*>(args.x) +
                     (group_idx * args.x_group_stride + first_row * args.x_row_stride + col) * Slice::kElemBytes;
  uint8_t* out = args.out + group_idx * args.out_group_stride + first_row * args.out_row_stride + col;

  // ---- Load the thread's rows (one per pass) before any arithmetic (after the previous kernel's, under PDL) ---
  ptx::launch_dependents();
  ptx::grid_dependency_wait();
  Slice slices[kQuantRowsPerThread];
  uint32_t num_cols[kQuantRowsPerThread];  // 0 for rows past the last
#pragma unroll
  for (uint32_t pass = 0; pass < kQuantRowsPerThread; ++pass) {
    num_cols[pass] = first_row + pass * kPerBlockRowsPerPass < uint32_t(args.num_rows) ? block_cols : 0;
    slices[pass].load(x + pass * kPerBlockRowsPerPass * args.x_row_stride * Slice::kElemBytes, lane, num_cols[pass]);
  }

  // ---- Reduce the block's amax: warp shuffles, then one exchange through shared memory ------------------
  float amax = 0.0f;
#pragma unroll
  for (uint32_t pass = 0; pass < kQuantRowsPerThread; ++pass) amax = slices[pass].abs_max(amax);
  amax = lane_group_max<32>(amax);
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
#pragma unroll
  for (uint32_t warp = 0; warp < kPerBlockNumWarps; ++warp) amax = fmaxf(amax, warp_amax[warp]);
  const float scale = block_scale(amax);
  const float reciprocal = reciprocal_rn(scale);

  // ---- Quantize and write ----------------------------------------------------------------------------
#pragma unroll
  for (uint32_t pass = 0; pass < kQuantRowsPerThread; ++pass)
    slices[pass].store_quantized(out + pass * kPerBlockRowsPerPass * args.out_row_stride, lane,
                                 num_cols[pass], scale, reciprocal);
  if (threadIdx.x == 0)
    args.scales[group_idx * args.scale_group_stride + row_block_idx * args.scale_row_stride +
                k_block_idx * args.scale_k_block_stride] = scale;
}

}  // namespace finegemm::device
