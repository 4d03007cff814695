// Microbenchmark: how fast one SM takes in a GEMM's operands through TMA (docs/performance-log.md, session 29).
//
// The producer side of a small-M GEMM without its math: per stage, A's issuer announces its bytes and loads a box of
// A's rows (the same rows on every SM, as every tile of a 64-row GEMM reads all of A) and SA's 64 floats; B's issuer
// announces its bytes and loads the SM's own BLOCK_N rows of B; a consumer warp waits for each stage to fill and
// frees it. The shapes are the seed's narrow ones (A 64 x K, B N x K fp8, one BLOCK_N slice of B per SM). Variants
// move the loads between issuer threads (A split into two 32-row boxes from two threads, SA from a third thread, all
// loads from one thread) or drop some, and the ring depth varies; each runs after a 256 MiB memset (cold: B from
// DRAM, as the benchmark's calls) and again right after (warm: B from the L2).
//
// Reported per variant: the median over CTAs of cycles per stage, bytes per cycle per SM, the grid's bandwidth
// (bytes over the slowest CTA's time) and each issuer's cycles per stage spent issuing (after its empty wait).
// Build and run: tools/micro/run.sh.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/ptx/sync.cuh"
#include "finegemm/device/ptx/tma.cuh"
#include "tma_map.cuh"

namespace ptx = finegemm::device::ptx;
using finegemm::device::TmaDescriptor;

namespace {

constexpr int kMaxStages = 24;
constexpr int kIssuers = 3;  // warps 1..3, lane 0 of each
constexpr int kThreads = 32 * (1 + kIssuers);
constexpr uint32_t kBlockK = 128;

struct Maps {
  TmaDescriptor a;       // A [rows, K] fp8, box (128, 64)
  TmaDescriptor a_half;  // A, box (128, 32)
  TmaDescriptor b;       // B [N, K] fp8, box (128, block_n)
  TmaDescriptor sa;      // SA [KB, 64] fp32 as bytes, box (256 B, 1)
};

// What each issuer loads per stage (bit set): A whole, A's first / second 32-row half, SA, B.
enum : uint32_t { kLoadA = 1, kLoadAFirst = 2, kLoadASecond = 4, kLoadSa = 8, kLoadB = 16 };

struct Plan {
  uint32_t loads[kIssuers];  // per issuer warp 1..3
  uint32_t stages;
  uint32_t num_k_blocks;
  uint32_t block_n;
  uint32_t a_rows;
  uint32_t n_slices;
  uint32_t sm_filter;  // 0: every CTA works; 1: CTAs on odd SMs leave at once (one SM per TPC works); 2: CTAs on SMs
                       // >= half the SM count leave at once
};

struct CtaResult {
  long long cycles;        // consumer: first wait to last stage full
  long long issue[kIssuers];  // each issuer's cycles after its empty waits
  unsigned long long t_begin, t_end;
};

__device__ uint32_t bytes_of(uint32_t loads, const Plan& p) {
  uint32_t b = 0;
  if (loads & kLoadA) b += p.a_rows * kBlockK;
  if (loads & kLoadAFirst) b += 32 * kBlockK;
  if (loads & kLoadASecond) b += 32 * kBlockK;
  if (loads & kLoadSa) b += 256;
  if (loads & kLoadB) b += p.block_n * kBlockK;
  return b;
}

__global__ void __launch_bounds__(kThreads, 1) ingress_kernel(const __grid_constant__ Maps maps, const Plan plan,
                                                               CtaResult* results) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  if ((plan.sm_filter == 1 && (ptx::sm_id() & 1) != 0) || (plan.sm_filter == 2 && ptx::sm_id() >= gridDim.x / 2)) {
    if (threadIdx.x == 0) results[blockIdx.x].cycles = -1;
    return;
  }
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t a_stage = 64 * kBlockK, b_stage = plan.block_n * kBlockK;
  const uint32_t stage_bytes = ((a_stage + b_stage + 256 + 1023) / 1024) * 1024;
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint32_t num_issuers = 0;
  for (int i = 0; i < kIssuers; ++i) num_issuers += plan.loads[i] != 0;
  if (threadIdx.x == 0) {
    ptx::tma_prefetch_descriptor(&maps.a);
    ptx::tma_prefetch_descriptor(&maps.a_half);
    ptx::tma_prefetch_descriptor(&maps.b);
    ptx::tma_prefetch_descriptor(&maps.sa);
    for (uint32_t s = 0; s < plan.stages; ++s) {
      ptx::mbarrier_init(&full[s], num_issuers);
      ptx::mbarrier_init(&empty[s], 1);
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  // Two SMs share a slice of B when the grid wraps around N.
  const int32_t b_row = int32_t((blockIdx.x % plan.n_slices) * plan.block_n);
  if (warp == 0) {
    const long long c0 = clock64();
    const unsigned long long t0 = ptx::global_timer();
    for (uint32_t kb = 0; kb < plan.num_k_blocks; ++kb) {
      const uint32_t s = kb % plan.stages, phase = (kb / plan.stages) & 1;
      ptx::mbarrier_wait(&full[s], phase);
      __syncwarp();
      if (lane == 0) ptx::mbarrier_arrive(&empty[s]);
    }
    if (lane == 0) {
      results[blockIdx.x].cycles = clock64() - c0;
      results[blockIdx.x].t_begin = t0;
      results[blockIdx.x].t_end = ptx::global_timer();
    }
  } else if (lane == 0) {
    const uint32_t loads = plan.loads[warp - 1];
    long long issue = 0;
    if (loads != 0) {
      const uint32_t bytes = bytes_of(loads, plan);
      for (uint32_t kb = 0; kb < plan.num_k_blocks; ++kb) {
        const uint32_t s = kb % plan.stages, phase = (kb / plan.stages) & 1;
        ptx::mbarrier_wait(&empty[s], phase ^ 1);
        const long long c = clock64();
        uint8_t* st = smem + s * stage_bytes;
        const int32_t k = int32_t(kb * kBlockK);
        ptx::mbarrier_arrive_expect_tx(&full[s], bytes);
        if (loads & kLoadA) ptx::tma_load_2d(&maps.a, &full[s], st, k, 0);
        if (loads & kLoadAFirst) ptx::tma_load_2d(&maps.a_half, &full[s], st, k, 0);
        if (loads & kLoadASecond) ptx::tma_load_2d(&maps.a_half, &full[s], st + 32 * kBlockK, k, 32);
        if (loads & kLoadSa) ptx::tma_load_2d(&maps.sa, &full[s], st + a_stage + b_stage, 0, int32_t(kb));
        if (loads & kLoadB) ptx::tma_load_2d(&maps.b, &full[s], st + a_stage, k, b_row);
        issue += clock64() - c;
      }
    }
    results[blockIdx.x].issue[warp - 1] = issue;
  }
}

TmaDescriptor make_map(void* base, uint64_t cols_bytes, uint64_t rows, uint32_t box_cols, uint32_t box_rows,
                       bool swizzle) {
  const cuuint64_t dims[2] = {cols_bytes, rows};
  const cuuint64_t strides[1] = {cols_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  return make_tma_map(base, 2, dims, strides, box, swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE);
}

struct Shape {
  uint32_t n, k, block_n, grid;
};

struct Variant {
  const char* name;
  uint32_t loads[kIssuers];
  uint32_t stages;  // 0: the most that fit
  uint32_t sm_filter;
};

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("tma_ingress on %s, %d SMs\n", prop.name, sms);
  const size_t flush_bytes = size_t(256) << 20;
  void* flush = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaFuncSetAttribute(ingress_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 222 * 1024));

  const Shape shapes[] = {{2112, 7168, 16, 132}, {2112, 7168, 32, 132}, {4096, 7168, 32, 128}, {7168, 2048, 64, 112},
                          {7168, 16384, 64, 112}};
  const Variant variants[] = {
      {"kernel (A+SA | B)", {kLoadA | kLoadSa, kLoadB, 0}, 0},
      {"A halves (A1+SA | B | A2)", {kLoadAFirst | kLoadSa, kLoadB, kLoadASecond}, 0},
      {"SA apart (A | B | SA)", {kLoadA, kLoadB, kLoadSa}, 0},
      {"one thread (A+SA+B)", {kLoadA | kLoadSa | kLoadB, 0, 0}, 0},
      {"no SA (A | B)", {kLoadA, kLoadB, 0}, 0},
      {"B only", {0, kLoadB, 0}, 0},
      {"A+SA only", {kLoadA | kLoadSa, 0, 0}, 0},
      {"kernel, 8 stages", {kLoadA | kLoadSa, kLoadB, 0}, 8},
      {"kernel, even SMs only", {kLoadA | kLoadSa, kLoadB, 0}, 0, 1},
      {"kernel, low half of SMs", {kLoadA | kLoadSa, kLoadB, 0}, 0, 2},
      {"B only, even SMs only", {0, kLoadB, 0}, 0, 1},
  };
  std::printf("%-16s %-28s %6s | %-4s %8s %8s %8s | %s\n", "shape", "variant", "stages", "L2", "cyc/st", "B/clk",
              "GB/s", "issue cycles per stage (warps 1-3) | CTAs that worked");
  for (const Shape& sh : shapes) {
    const uint32_t kb = sh.k / kBlockK;
    uint8_t *a = nullptr, *b = nullptr, *sa = nullptr;
    CHECK(cudaMalloc(&a, size_t(64) * sh.k));
    CHECK(cudaMalloc(&b, size_t(sh.n) * sh.k));
    CHECK(cudaMalloc(&sa, size_t(kb) * 256));
    CHECK(cudaMemset(a, 1, size_t(64) * sh.k));
    CHECK(cudaMemset(b, 1, size_t(sh.n) * sh.k));
    CHECK(cudaMemset(sa, 0, size_t(kb) * 256));
    Maps maps;
    maps.a = make_map(a, sh.k, 64, 128, 64, true);
    maps.a_half = make_map(a, sh.k, 64, 128, 32, true);
    maps.b = make_map(b, sh.k, sh.n, 128, sh.block_n, true);
    maps.sa = make_map(sa, 256, kb, 256, 1, false);
    const uint32_t grid = std::min<uint32_t>(sh.grid, uint32_t(sms));
    CtaResult* results = nullptr;
    CHECK(cudaMalloc(&results, sizeof(CtaResult) * grid));
    const uint32_t stage_bytes = ((64 * kBlockK + sh.block_n * kBlockK + 256 + 1023) / 1024) * 1024;
    const uint32_t max_stages = std::min<uint32_t>(kMaxStages, (220 * 1024) / stage_bytes);
    for (const Variant& v : variants) {
      Plan plan;
      std::memcpy(plan.loads, v.loads, sizeof(plan.loads));
      plan.stages = v.stages ? std::min(v.stages, max_stages) : max_stages;
      plan.num_k_blocks = kb;
      plan.block_n = sh.block_n;
      plan.a_rows = 64;
      plan.n_slices = sh.n / sh.block_n;
      plan.sm_filter = v.sm_filter;
      uint64_t bytes_per_cta = 0;
      for (int i = 0; i < kIssuers; ++i) {
        uint32_t l = v.loads[i];
        bytes_per_cta += ((l & kLoadA) ? 64 * kBlockK : 0) + ((l & kLoadAFirst) ? 32 * kBlockK : 0) +
                         ((l & kLoadASecond) ? 32 * kBlockK : 0) + ((l & kLoadSa) ? 256 : 0) +
                         ((l & kLoadB) ? sh.block_n * kBlockK : 0);
      }
      bytes_per_cta *= kb;
      for (int warm = 0; warm < 2; ++warm) {
        std::vector<long long> cyc;
        size_t active_ctas = 0;
        std::vector<double> per_run_gbps;
        std::vector<double> issue_med(kIssuers, 0);
        double cyc_med_sum = 0;
        const int runs = 5;
        for (int r = 0; r < runs; ++r) {
          if (!warm) CHECK(cudaMemset(flush, r, flush_bytes));
          if (warm) ingress_kernel<<<grid, kThreads, stage_bytes * plan.stages + 1024>>>(maps, plan, results);
          ingress_kernel<<<grid, kThreads, stage_bytes * plan.stages + 1024>>>(maps, plan, results);
          CHECK(cudaGetLastError());
          CHECK(cudaDeviceSynchronize());
          std::vector<CtaResult> h(grid);
          CHECK(cudaMemcpy(h.data(), results, sizeof(CtaResult) * grid, cudaMemcpyDeviceToHost));
          unsigned long long t0 = ~0ull, t1 = 0;
          cyc.clear();
          std::vector<std::vector<long long>> is(kIssuers);
          for (uint32_t c = 0; c < grid; ++c) {
            if (h[c].cycles < 0) continue;  // left at once (sm_filter)
            cyc.push_back(h[c].cycles);
            t0 = std::min(t0, h[c].t_begin);
            t1 = std::max(t1, h[c].t_end);
            for (int i = 0; i < kIssuers; ++i) is[i].push_back(h[c].issue[i]);
          }
          const size_t active = cyc.size();
          std::sort(cyc.begin(), cyc.end());
          cyc_med_sum += double(cyc[active / 2]);
          per_run_gbps.push_back(double(bytes_per_cta) * active / double(t1 - t0));
          for (int i = 0; i < kIssuers; ++i) {
            std::sort(is[i].begin(), is[i].end());
            issue_med[i] += double(is[i][active / 2]) / kb / runs;
          }
          active_ctas = active;
        }
        std::sort(per_run_gbps.begin(), per_run_gbps.end());
        const double cyc_med = cyc_med_sum / runs;
        char shape_name[64];
        std::snprintf(shape_name, sizeof(shape_name), "%ux%u bn%u g%u", sh.n, sh.k, sh.block_n, grid);
        std::printf("%-16s %-28s %6u | %-4s %8.1f %8.1f %8.0f | %.0f %.0f %.0f | %zu CTAs\n", shape_name, v.name,
                    plan.stages, warm ? "warm" : "cold", cyc_med / kb, double(bytes_per_cta) / cyc_med,
                    per_run_gbps[runs / 2], issue_med[0], issue_med[1], issue_med[2], active_ctas);
      }
    }
    CHECK(cudaFree(results));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(sa));
  }
  CHECK(cudaFree(flush));
  return 0;
}
