// Microbenchmark: the DRAM read rate of a small-M GEMM's weight stream by access pattern (docs/performance-log.md,
// session 30).
//
// At M <= 128 each SM streams its own BLOCK_N rows of B ([N, K] fp8, K-major) through a ring of stages, one K block
// (128 bytes of each row) per stage and TMA load: every request is 128 bytes of a row, the rows K bytes apart. This
// runs only that stream (no A, no math: a consumer warp frees each stage once full) and varies its pattern:
//   2d x k    k K blocks per stage, as k 2D loads (box 128 B x BLOCK_N) issued back to back;
//   3d kb     k K blocks per stage as one 3D load, K blocks outermost (shared memory: k tiles of BLOCK_N rows, the
//             layout the GEMM's wgmmas read);
//   3d rows   the same bytes as one 3D load with the rows outermost (each row's k x 128 bytes requested together;
//             shared memory row-interleaved, which wgmma cannot read: a probe of the DRAM side only);
//   1d        the SM's slice of B copied as contiguous bytes (cp.async.bulk, the same bytes per stage): the copy rate.
//   2d x1 + L2 prefetch   the kernel's pattern after the SM's slice (BLOCK_N rows x K bytes, contiguous in B) was
//             requested whole into the L2 by bulk prefetches (cp.async.bulk.prefetch.L2, 16 KB each), so the DRAM
//             sees contiguous reads while the 2D loads read the L2 (session 33).
// Then, for reference, the same bytes read by every SM (B's bytes split evenly over the grid) as contiguous bulk
// copies with 1 or 2 CTAs per SM, and as plain 16-byte loads (ld.global.nc, 8 CTAs of 256 threads per SM).
// Each variant runs after a 256 MiB memset (B from DRAM, as the benchmark's calls; `b_stream read`: after a 256 MiB
// read instead, which leaves no dirty lines in the L2), 5 times; printed: the median GB/s over the grid (bytes over
// first start to last end).
// Build and run: tools/micro/run.sh.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/ptx/sync.cuh"
#include "finegemm/device/ptx/tma.cuh"
#include "tma_map.cuh"

namespace ptx = finegemm::device::ptx;
using finegemm::device::TmaDescriptor;

namespace {

constexpr int kMaxStages = 32;
constexpr uint32_t kBlockK = 128;

enum Mode : uint32_t { k2d = 0, k3dKb = 1, k3dRows = 2, k1d = 3, k2dPrefetch = 4 };

struct Plan {
  uint32_t mode, kbs, stages, block_n, num_k_blocks, n_slices, k;
  bool evict_first;
  bool prefetch_evict_first;  // k2dPrefetch: the prefetches carry the evict-first hint too
};

struct CtaTimes {
  unsigned long long begin, end;
};

__device__ void load_3d(const TmaDescriptor* map, uint64_t* bar, void* dst, int32_t c0, int32_t c1, int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::
          "r"(ptx::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(ptx::smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

__device__ void load_1d(const void* src, uint64_t* bar, void* dst, uint32_t bytes) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   ptx::smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(ptx::smem_addr(bar))
               : "memory");
}

// Plain loads: every thread reads 16-byte words grid-strided, kUnroll in flight, and keeps a sum.
template <int kUnroll>
__global__ void __launch_bounds__(256) ldg_kernel(const uint4* b, uint64_t words, uint32_t* sink) {
  uint32_t acc = 0;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < words; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldg(b + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < words; i += stride) acc ^= __ldg(b + i).x;
  if (acc == 0x12345678u) *sink = acc;
}

// Contiguous bulk copies: CTA c reads bytes [c, c + 1) * per_cta of b in chunks of `chunk` through a ring of `stages`.
__global__ void __launch_bounds__(64) bulk_kernel(const uint8_t* b, uint64_t per_cta, uint32_t chunk, uint32_t stages,
                                                  CtaTimes* times) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < stages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], 1);
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  const uint32_t steps = uint32_t(per_cta / chunk);
  const uint8_t* src = b + blockIdx.x * per_cta;
  if (threadIdx.x == 0) {
    const unsigned long long t0 = ptx::global_timer();
    for (uint32_t i = 0; i < steps; ++i) {
      ptx::mbarrier_wait(&full[i % stages], (i / stages) & 1);
      ptx::mbarrier_arrive(&empty[i % stages]);
    }
    times[blockIdx.x].begin = t0;
    times[blockIdx.x].end = ptx::global_timer();
  } else if (threadIdx.x == 32) {
    for (uint32_t i = 0; i < steps; ++i) {
      const uint32_t s = i % stages;
      ptx::mbarrier_wait(&empty[s], ((i / stages) & 1) ^ 1);
      ptx::mbarrier_arrive_expect_tx(&full[s], chunk);
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       ptx::smem_addr(smem + s * chunk)),
                   "l"(src + uint64_t(i) * chunk), "r"(chunk), "r"(ptx::smem_addr(&full[s]))
                   : "memory");
    }
  }
}

__global__ void __launch_bounds__(64, 1) stream_kernel(const __grid_constant__ TmaDescriptor map2d,
                                                         const __grid_constant__ TmaDescriptor map3d_kb,
                                                         const __grid_constant__ TmaDescriptor map3d_rows,
                                                         const uint8_t* b, const Plan plan, CtaTimes* times) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  const uint32_t stage_bytes = plan.kbs * plan.block_n * kBlockK;
  const uint32_t steps = plan.num_k_blocks / plan.kbs;
  if (threadIdx.x == 0) {
    ptx::tma_prefetch_descriptor(&map2d);
    ptx::tma_prefetch_descriptor(&map3d_kb);
    ptx::tma_prefetch_descriptor(&map3d_rows);
    for (uint32_t s = 0; s < plan.stages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], 1);
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  const uint32_t slice = blockIdx.x % plan.n_slices;
  const int32_t row = int32_t(slice * plan.block_n);
  if (threadIdx.x == 0) {
    const unsigned long long t0 = ptx::global_timer();
    for (uint32_t i = 0; i < steps; ++i) {
      const uint32_t s = i % plan.stages, phase = (i / plan.stages) & 1;
      ptx::mbarrier_wait(&full[s], phase);
      ptx::mbarrier_arrive(&empty[s]);
    }
    times[blockIdx.x].begin = t0;
    times[blockIdx.x].end = ptx::global_timer();
  } else if (threadIdx.x == 32) {
    const uint64_t policy = ptx::l2_policy_evict_first();
    if (plan.mode == k2dPrefetch) {
      const uint8_t* base = b + uint64_t(slice) * plan.block_n * plan.k;
      const uint64_t bytes = uint64_t(plan.block_n) * plan.k;
      constexpr uint32_t kChunk = 16384;
      for (uint64_t off = 0; off < bytes; off += kChunk) {
        const uint32_t n = uint32_t(bytes - off < kChunk ? bytes - off : kChunk);
        if (plan.prefetch_evict_first)
          asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(base + off), "r"(n),
                       "l"(policy)
                       : "memory");
        else
          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + off), "r"(n) : "memory");
      }
    }
    for (uint32_t i = 0; i < steps; ++i) {
      const uint32_t s = i % plan.stages, phase = (i / plan.stages) & 1;
      ptx::mbarrier_wait(&empty[s], phase ^ 1);
      uint8_t* dst = smem + s * stage_bytes;
      const uint32_t kb = i * plan.kbs;
      ptx::mbarrier_arrive_expect_tx(&full[s], stage_bytes);
      if (plan.mode == k2d || plan.mode == k2dPrefetch) {
        for (uint32_t j = 0; j < plan.kbs; ++j) {
          if (plan.evict_first)
            ptx::tma_load_2d_hinted(&map2d, &full[s], dst + j * plan.block_n * kBlockK, int32_t((kb + j) * kBlockK),
                                    row, policy);
          else
            ptx::tma_load_2d(&map2d, &full[s], dst + j * plan.block_n * kBlockK, int32_t((kb + j) * kBlockK), row);
        }
      } else if (plan.mode == k3dKb) {
        load_3d(&map3d_kb, &full[s], dst, 0, row, int32_t(kb));
      } else if (plan.mode == k3dRows) {
        load_3d(&map3d_rows, &full[s], dst, 0, int32_t(kb), row);
      } else {
        // The slice's bytes as if B were stored slice by slice: stage i is bytes [i, i + 1) * stage_bytes of it.
        load_1d(b + uint64_t(slice) * plan.block_n * plan.k + uint64_t(i) * stage_bytes, &full[s], dst, stage_bytes);
      }
    }
  }
}

/// GB/s of `bytes` read over the grid's span: the first CTA's start to the last CTA's end.
double grid_gbps(const CtaTimes* device_times, uint32_t ctas, uint64_t bytes) {
  std::vector<CtaTimes> h(ctas);
  CHECK(cudaMemcpy(h.data(), device_times, sizeof(CtaTimes) * ctas, cudaMemcpyDeviceToHost));
  unsigned long long t0 = ~0ull, t1 = 0;
  for (const CtaTimes& t : h) {
    t0 = std::min(t0, t.begin);
    t1 = std::max(t1, t.end);
  }
  return double(bytes) / double(t1 - t0);
}

struct Shape {
  uint32_t n, k, block_n, grid;
};

struct Variant {
  const char* name;
  uint32_t mode, kbs;
  bool evict_first;
  uint32_t max_stages = kMaxStages;  // fewer stages: less in flight
  bool prefetch_evict_first = false;
};

}  // namespace

int main(int argc, char** argv) {
  // b_stream [memset|read] [SHAPE]: SHAPE (e.g. 32768x512) runs only the shapes whose name contains it.
  const bool read_flush = argc > 1 && std::strcmp(argv[1], "read") == 0;
  const char* only = argc > 2 ? argv[2] : nullptr;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("b_stream on %s, %d SMs, L2 flushed by a 256 MiB %s\n", prop.name, sms, read_flush ? "read" : "memset");
  const size_t flush_bytes = size_t(256) << 20;
  void* flush = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMemset(flush, 0, flush_bytes));
  uint32_t* flush_sink = nullptr;
  CHECK(cudaMalloc(&flush_sink, 4));
  auto flush_l2 = [&](int r) {
    if (read_flush)
      ldg_kernel<4><<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(flush), flush_bytes / 16, flush_sink);
    else
      CHECK(cudaMemset(flush, r, flush_bytes));
  };
  CHECK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 222 * 1024));
  const Shape shapes[] = {{7168, 16384, 64, 112}, {4096, 7168, 32, 128}, {24576, 1536, 96, 128},
                          {7168, 2048, 64, 112},  {2112, 7168, 16, 132}, {32768, 512, 128, 128}};
  const Variant variants[] = {
      {"2d x1 (kernel)", k2d, 1, true}, {"2d x1, no hint", k2d, 1, false}, {"2d x2", k2d, 2, true},
      {"2d x4", k2d, 4, true},          {"3d kb x2", k3dKb, 2, false},     {"3d kb x4", k3dKb, 4, false},
      {"3d rows x2", k3dRows, 2, false}, {"3d rows x4", k3dRows, 4, false}, {"1d x1", k1d, 1, false},
      {"1d x4", k1d, 4, false},
      {"2d x1, 8 stages", k2d, 1, true, 8},   {"2d x1, 16 stages", k2d, 1, true, 16},
      {"2d x2, 4 stages", k2d, 2, true, 4},   {"2d x2, 8 stages", k2d, 2, true, 8},
      {"2d x2, 16 stages", k2d, 2, true, 16},
      {"2d x1 + prefetch", k2dPrefetch, 1, true, kMaxStages, false},
      {"2d x1 + pf, ef", k2dPrefetch, 1, true, kMaxStages, true},
      {"2d x2 + prefetch", k2dPrefetch, 2, true, kMaxStages, false},
      {"2d x2 + pf, ef", k2dPrefetch, 2, true, kMaxStages, true},
  };
  std::printf("%-22s %-16s %6s %9s | %8s %8s %8s\n", "shape", "variant", "stages", "stage KB", "GB/s", "min", "max");
  for (const Shape& sh : shapes) {
    char shape_name[32];
    std::snprintf(shape_name, sizeof(shape_name), "%ux%u", sh.n, sh.k);
    if (only != nullptr && std::strstr(shape_name, only) == nullptr) continue;
    const uint32_t num_kb = sh.k / kBlockK;
    uint8_t* b = nullptr;
    CHECK(cudaMalloc(&b, size_t(sh.n) * sh.k));
    CHECK(cudaMemset(b, 1, size_t(sh.n) * sh.k));
    const uint32_t grid = std::min<uint32_t>(sh.grid, uint32_t(sms));
    CtaTimes* times = nullptr;
    CHECK(cudaMalloc(&times, sizeof(CtaTimes) * grid));
    for (const Variant& v : variants) {
      if (num_kb % v.kbs != 0) continue;
      // 2D: (128 B, rows); 3D kb: (128 B, rows, K blocks); 3D rows: (128 B, K blocks, rows).
      const cuuint64_t dims2[2] = {sh.k, sh.n}, strides2[1] = {sh.k};
      const cuuint32_t box2[2] = {kBlockK, sh.block_n};
      const cuuint64_t dims_kb[3] = {kBlockK, sh.n, num_kb}, strides_kb[2] = {sh.k, kBlockK};
      const cuuint32_t box_kb[3] = {kBlockK, sh.block_n, v.kbs};
      const cuuint64_t dims_rows[3] = {kBlockK, num_kb, sh.n}, strides_rows[2] = {kBlockK, sh.k};
      const cuuint32_t box_rows[3] = {kBlockK, v.kbs, sh.block_n};
      const TmaDescriptor m2 = make_tma_map(b, 2, dims2, strides2, box2, CU_TENSOR_MAP_SWIZZLE_128B);
      const TmaDescriptor m_kb = make_tma_map(b, 3, dims_kb, strides_kb, box_kb, CU_TENSOR_MAP_SWIZZLE_128B);
      const TmaDescriptor m_rows = make_tma_map(b, 3, dims_rows, strides_rows, box_rows, CU_TENSOR_MAP_SWIZZLE_128B);
      Plan plan;
      plan.mode = v.mode;
      plan.kbs = v.kbs;
      plan.block_n = sh.block_n;
      plan.num_k_blocks = num_kb;
      plan.n_slices = sh.n / sh.block_n;
      plan.k = sh.k;
      plan.evict_first = v.evict_first;
      plan.prefetch_evict_first = v.prefetch_evict_first;
      const uint32_t stage_bytes = v.kbs * sh.block_n * kBlockK;
      plan.stages = std::min<uint32_t>(v.max_stages, (200 * 1024) / stage_bytes);
      const uint64_t bytes = uint64_t(grid) * sh.block_n * sh.k;
      std::vector<double> gbps;
      for (int r = 0; r < 5; ++r) {
        flush_l2(r);
        stream_kernel<<<grid, 64, stage_bytes * plan.stages + 1024>>>(m2, m_kb, m_rows, b, plan, times);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        gbps.push_back(grid_gbps(times, grid, bytes));
      }
      std::sort(gbps.begin(), gbps.end());
      char name[64];
      std::snprintf(name, sizeof(name), "%ux%u bn%u g%u", sh.n, sh.k, sh.block_n, grid);
      std::printf("%-22s %-16s %6u %9.1f | %8.0f %8.0f %8.0f\n", name, v.name, plan.stages, stage_bytes / 1024.0,
                  gbps[2], gbps[0], gbps[4]);
    }
    // The same bytes read by all SMs: bulk copies with 1 or 2 CTAs per SM, plain loads.
    {
      CtaTimes* all_times = nullptr;
      CHECK(cudaMalloc(&all_times, sizeof(CtaTimes) * 2 * sms));
      CHECK(cudaFuncSetAttribute(bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 222 * 1024));
      const uint64_t total = uint64_t(sh.n) * sh.k;
      for (int per_sm = 1; per_sm <= 2; ++per_sm) {
        const uint32_t ctas = uint32_t(sms * per_sm), chunk = 8192, stages = per_sm == 1 ? 25 : 12;
        const uint64_t per_cta = total / ctas / chunk * chunk;
        std::vector<double> gbps;
        for (int r = 0; r < 5; ++r) {
          flush_l2(r);
          bulk_kernel<<<ctas, 64, chunk * stages + 1024>>>(b, per_cta, chunk, stages, all_times);
          CHECK(cudaGetLastError());
          CHECK(cudaDeviceSynchronize());
          gbps.push_back(grid_gbps(all_times, ctas, per_cta * ctas));
        }
        std::sort(gbps.begin(), gbps.end());
        char name[64], variant[32];
        std::snprintf(name, sizeof(name), "%ux%u all SMs", sh.n, sh.k);
        std::snprintf(variant, sizeof(variant), "1d, %d CTA/SM", per_sm);
        std::printf("%-22s %-16s %6u %9.1f | %8.0f %8.0f %8.0f\n", name, variant, stages, chunk / 1024.0, gbps[2],
                    gbps[0], gbps[4]);
      }
      // Plain loads, timed by events (kernel only).
      uint32_t* sink = nullptr;
      CHECK(cudaMalloc(&sink, 4));
      cudaEvent_t e0, e1;
      CHECK(cudaEventCreate(&e0));
      CHECK(cudaEventCreate(&e1));
      std::vector<double> gbps;
      for (int r = 0; r < 5; ++r) {
        flush_l2(r);
        CHECK(cudaEventRecord(e0));
        ldg_kernel<4><<<sms * 8, 256>>>(reinterpret_cast<const uint4*>(b), total / 16, sink);
        CHECK(cudaEventRecord(e1));
        CHECK(cudaGetLastError());
        CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        gbps.push_back(double(total) / (ms * 1e6));
      }
      std::sort(gbps.begin(), gbps.end());
      char name[64];
      std::snprintf(name, sizeof(name), "%ux%u all SMs", sh.n, sh.k);
      std::printf("%-22s %-16s %6s %9s | %8.0f %8.0f %8.0f   (events: launch included)\n", name, "ld.global x4", "-",
                  "-", gbps[2], gbps[0], gbps[4]);
      CHECK(cudaEventDestroy(e0));
      CHECK(cudaEventDestroy(e1));
      CHECK(cudaFree(sink));
      CHECK(cudaFree(all_times));
    }
    CHECK(cudaFree(times));
    CHECK(cudaFree(b));
  }
  CHECK(cudaFree(flush_sink));
  CHECK(cudaFree(flush));
  return 0;
}
