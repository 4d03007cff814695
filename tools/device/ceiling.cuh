// The two parts of a GEMM call's floor (`finegemm bench --ceiling`, tools/lib/ceiling.hpp). A GEMM call must move
// its bytes (read A, B and the scales once, write D once) and must issue its tensor work; these kernels do each part
// alone, with nothing else on the GPU:
//   stream_ceiling_kernel  reads `read_units` 16-byte pieces and writes `write_units`, spread evenly over the grid,
//                          reads and writes interleaved in proportion (the stream part);
//   tensor_ceiling_kernel  two warpgroups per CTA issue back-to-back m64nNk32 e4m3 wgmmas from shared memory, as many
//                          as the call's FLOPs need, split evenly over the grid (the tensor part: no loads, no
//                          promotion, no stores, so less power than a GEMM and a clock at least as high).
// Both are timed like the GEMMs (L2 flushed before each call, CUPTI kernel time, median).
#pragma once

#include "finegemm/device/common/types.cuh"
#include "finegemm/device/ptx/ld_st.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"  // smem_addr
#include "finegemm/device/ptx/sync.cuh"
#include "finegemm/device/ptx/wgmma.cuh"

namespace finegemm::tools {

/// %clock: the SM's cycle counter, low 32 bits.
__device__ __forceinline__ uint32_t sm_clock32() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%clock;" : "=r"(t));
  return t;
}

/// %globaltimer: nanoseconds, shared by all SMs.
__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

/// 16 bytes from global memory through the non-coherent path, not kept in L1 (data read once, that nothing writes
/// while the kernel runs). Volatile: a run of them stays in program order, ahead of the uses of their data.
__device__ __forceinline__ void ld_global_nc_na_v4_b32(const void* ptr, uint32_t (&v)[4]) {
  asm volatile("ld.global.nc.L1::no_allocate.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
               : "l"(ptr));
}

/// Threads of a stream_ceiling_kernel CTA.
inline constexpr uint32_t kStreamCeilingThreads = 256;

/// Reads `read_units` pieces of `src` and writes `write_units` pieces of `dst`. CTA b takes the b-th even share of
/// each; it walks both shares in rounds of about kUnroll pieces per thread, each round's reads and writes in the
/// proportion of the whole, so the two streams run side by side for the whole kernel (a GEMM's D leaves while its
/// operands arrive). Piece i of `dst` is written as {i, i ^ kStreamPattern, ~i, lo ^ hi} (lo, hi: i's 32-bit halves)
/// and the XOR of every piece read is XORed into sink[0..3] (one atomic per thread), so a test can check that every
/// byte moved.
template <uint32_t kUnroll>
__global__ void __launch_bounds__(kStreamCeilingThreads) stream_ceiling_kernel(const uint4* __restrict__ src,
                                                                                uint64_t read_units,
                                                                                uint4* __restrict__ dst,
                                                                                uint64_t write_units, uint32_t* sink) {
  constexpr uint32_t kStreamPattern = 0x5EED5EEDu;
  const uint64_t ctas = gridDim.x, cta = blockIdx.x;
  const uint64_t read_begin = read_units * cta / ctas, read_end = read_units * (cta + 1) / ctas;
  const uint64_t write_begin = write_units * cta / ctas, write_end = write_units * (cta + 1) / ctas;
  const uint64_t reads = read_end - read_begin, writes = write_end - write_begin;
  const uint64_t per_round = uint64_t(kStreamCeilingThreads) * kUnroll;
  const uint64_t rounds = (reads + writes + per_round - 1) / per_round;
  // Each round's slices of the CTA's reads and writes (each at most per_round pieces: reads, writes <= rounds x
  // per_round), the last ones cut short.
  const uint64_t read_step = rounds > 0 ? (reads + rounds - 1) / rounds : 0;
  const uint64_t write_step = rounds > 0 ? (writes + rounds - 1) / rounds : 0;
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (uint64_t r = 0; r < rounds; ++r) {
    const uint64_t rb = read_begin + read_step * r, re = min(rb + read_step, read_end);
    const uint64_t wb = write_begin + write_step * r, we = min(wb + write_step, write_end);
    uint32_t v[kUnroll][4];
    // NOTE: the loads are volatile (ld_global_nc_na_v4_b32), so all kUnroll are issued before their first use;
    // plain loads were interleaved with the XORs, two in flight per thread.
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const uint64_t i = rb + threadIdx.x + uint64_t(u) * kStreamCeilingThreads;
      v[u][0] = v[u][1] = v[u][2] = v[u][3] = 0;
      if (i < re) ld_global_nc_na_v4_b32(src + i, v[u]);
    }
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const uint64_t i = wb + threadIdx.x + uint64_t(u) * kStreamCeilingThreads;
      if (i < we) {
        const uint32_t lo = uint32_t(i), hi = uint32_t(i >> 32);
        const uint32_t piece[4] = {lo, lo ^ kStreamPattern, ~lo, lo ^ hi};
        device::ptx::st_global_v4_b32(dst + i, piece);
      }
    }
#pragma unroll
    for (uint32_t u = 0; u < kUnroll; ++u) {
      acc.x ^= v[u][0];
      acc.y ^= v[u][1];
      acc.z ^= v[u][2];
      acc.w ^= v[u][3];
    }
  }
  if ((acc.x | acc.y | acc.z | acc.w) != 0) {
    atomicXor(sink + 0, acc.x);
    atomicXor(sink + 1, acc.y);
    atomicXor(sink + 2, acc.z);
    atomicXor(sink + 3, acc.w);
  }
}

/// Threads of a tensor_ceiling_kernel CTA: two math warpgroups.
inline constexpr uint32_t kTensorCeilingThreads = 256;
/// Its dynamic shared memory: more than half of an SM's, so that each CTA has an SM of its own.
inline constexpr uint32_t kTensorCeilingSmemBytes = 120 * 1024;

/// Bytes of one K block (128 fp8 values) of a row.
inline constexpr uint32_t kTensorCeilingRowBytes = 128;

/// Issues `num_batches` batches of four m64nNk32 e4m3 wgmmas (one 64 x N x 128 product each), split evenly over the
/// grid's warpgroups, each batch committed and waited with one batch still in flight (so the tensor pipe never waits
/// for an issue). Operands: one K block of 64 rows of A per warpgroup and N rows of B shared by both, copied once into
/// shared memory (128-byte swizzle, as TMA writes them) from the first rows of `a` and `b` ([rows, k] fp8, K-major),
/// so the products run on the call's own data (rows wrap at the largest power of two <= a_rows or b_rows).
/// Written, for warpgroup w (global index): out[2 w] = its batches, out[2 w + 1] = its thread 0's first accumulator
/// D[0][0] as a float (batches x the dot product of A's row 0 and B's row 0 over the K block, up to the tensor core's
/// fp32 accumulation); then for CTA c, out[2 (W + c)] and out[2 (W + c) + 1] (W: warpgroups in the grid): its loop
/// time in SM cycles (%clock) and in nanoseconds (%globaltimer), i.e. the clock it ran at and how busy its tensor
/// pipe was.
template <uint32_t N>
__global__ void __launch_bounds__(kTensorCeilingThreads, 1) tensor_ceiling_kernel(const uint8_t* a, uint32_t a_rows,
                                                                                  const uint8_t* b, uint32_t b_rows,
                                                                                  uint32_t k, uint64_t num_batches,
                                                                                  uint32_t* out) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma N is 8..256 in steps of 8");
  constexpr uint32_t kNumWarpgroups = kTensorCeilingThreads / 128;
  constexpr uint32_t kABytes = 64 * kTensorCeilingRowBytes;  // (64, BLOCK_K) per warpgroup
  constexpr uint32_t kBBytes = N * kTensorCeilingRowBytes;   // (N, BLOCK_K)
  static_assert(kNumWarpgroups * kABytes + kBBytes <= kTensorCeilingSmemBytes, "operands fit the shared memory");

  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* smem_a = smem;                            // warpgroup w's rows at w * kABytes
  uint8_t* smem_b = smem + kNumWarpgroups * kABytes;

  // ---- Operands: rows of 128 bytes, 16-byte chunk c of row r at chunk c ^ (r % 8) --------------------------------
  constexpr uint32_t kChunksPerRow = kTensorCeilingRowBytes / 16;
  constexpr uint32_t kARows = kNumWarpgroups * 64, kChunks = (kARows + N) * kChunksPerRow;
  constexpr uint32_t kChunksPerThread = (kChunks + kTensorCeilingThreads - 1) / kTensorCeilingThreads;
  // Rows and bytes past the operands' ends wrap by power-of-two masks (no divisions): K is a multiple of 16, so a
  // chunk stays whole and inside its row (K < 128 repeats the row's first chunks).
  auto pow2_floor_mask = [](uint32_t v) { return (1u << (31 - __clz(v))) - 1; };
  const uint32_t a_row_mask = pow2_floor_mask(a_rows), b_row_mask = pow2_floor_mask(b_rows);
  const uint32_t k_mask = pow2_floor_mask(k < kTensorCeilingRowBytes ? k : kTensorCeilingRowBytes);
  auto chunk_source = [&](uint32_t c) {
    const uint32_t row = c / kChunksPerRow, offset = (c % kChunksPerRow * 16) & k_mask;
    return row < kARows ? a + uint64_t(row & a_row_mask) * k + offset
                        : b + uint64_t((row - kARows) & b_row_mask) * k + offset;
  };
  uint4 chunks[kChunksPerThread];
#pragma unroll
  for (uint32_t i = 0; i < kChunksPerThread; ++i) {
    const uint32_t c = threadIdx.x + i * kTensorCeilingThreads;
    if (c < kChunks) chunks[i] = *reinterpret_cast<const uint4*>(chunk_source(c));
  }
#pragma unroll
  for (uint32_t i = 0; i < kChunksPerThread; ++i) {
    const uint32_t c = threadIdx.x + i * kTensorCeilingThreads;
    if (c >= kChunks) continue;
    const uint32_t row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const uint32_t local_row = row < kARows ? row : row - kARows;
    uint8_t* dst = (row < kARows ? smem_a : smem_b) + local_row * kTensorCeilingRowBytes;
    *reinterpret_cast<uint4*>(dst + ((chunk ^ (local_row % 8)) * 16)) = chunks[i];
  }
  __syncthreads();
  const uint32_t start_clock = sm_clock32();
  const uint64_t start_ns = global_timer_ns();

  // ---- This warpgroup's share of the batches --------------------------------------------------------------------
  // Broadcast from lane 0 so that ptxas sees a warp-uniform loop (a divergent one serializes the wgmmas).
  const uint32_t warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  const uint64_t num_warpgroups = uint64_t(gridDim.x) * kNumWarpgroups;
  const uint64_t global_wg = uint64_t(blockIdx.x) * kNumWarpgroups + warpgroup;
  const uint64_t my_batches = num_batches / num_warpgroups + (global_wg < num_batches % num_warpgroups ? 1 : 0);

  float acc[N / 2];
#pragma unroll
  for (uint32_t i = 0; i < N / 2; ++i) acc[i] = 0.f;
  const uint64_t desc_a = device::ptx::make_smem_desc_k_major_sw128(smem_a + warpgroup * kABytes);
  const uint64_t desc_b = device::ptx::make_smem_desc_k_major_sw128(smem_b);
  constexpr uint32_t kDescStepPerK32 = 32 >> 4;  // 32 bytes of K, in the descriptor's 16-byte units
  // NOTE: nothing but wgmmas touches the accumulators until the last wait (a fence_operand in the loop would
  // make ptxas wait for every wgmma: the batches would no longer overlap).
  for (uint64_t batch = 0; batch < my_batches; ++batch) {
    device::ptx::wgmma_fence();
#pragma unroll
    for (uint32_t step = 0; step < kTensorCeilingRowBytes / 32; ++step)
      device::ptx::wgmma_m64k32_e4m3<N>(desc_a + step * kDescStepPerK32, desc_b + step * kDescStepPerK32, acc, true);
    device::ptx::wgmma_commit_group();
    device::ptx::wgmma_wait_group<1>();
  }
  device::ptx::wgmma_wait_group<0>();
#pragma unroll
  for (uint32_t i = 0; i < N / 2; ++i) device::ptx::wgmma_fence_operand(acc[i]);
  // The CTA's loop time in SM cycles and in nanoseconds, after both warpgroups finished (the clock it ran at).
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t cycles = sm_clock32() - start_clock;
    const uint64_t ns = global_timer_ns() - start_ns;
    out[2 * num_warpgroups + 2 * blockIdx.x] = cycles;
    out[2 * num_warpgroups + 2 * blockIdx.x + 1] = uint32_t(ns);
  }
  if (threadIdx.x % 128 == 0) {
    out[2 * global_wg] = uint32_t(my_batches);
    reinterpret_cast<float*>(out)[2 * global_wg + 1] = acc[0];  // stored as a float: a bit cast made acc[0] an
                                                                 // integer register, which serialized the wgmmas
  }
}

}  // namespace finegemm::tools
