// Microbenchmark: is the fp8 wgmma limited by shared-memory bandwidth? Two math warpgroups per SM issue batches of
// four m64nNk32 wgmmas (one batch, wait, next), A from shared memory (SS) or from registers loaded by ldmatrix (RS),
// while a third warpgroup's thread streams 16 KB bulk copies (global -> shared, as TMA loads do) at a set pace.
// Prints the tensor rate as a fraction of 4096 fp8 MACs per SM clock, and the copies' bytes per clock.
// Build and run: tools/micro/run.sh. Results: docs/performance-log.md, session 17.
#include <algorithm>
#include <vector>

#include "micro_common.cuh"

namespace {

constexpr int kRingSlots = 4, kSlotBytes = 16384, kIters = 4000;


/// kBHalves: batches alternate between two 128-row halves of B (a 128x256 tile's two waves); otherwise between two
/// 64-row waves of A (a 256x128 tile). RS loads A's fragments every kAReuse batches.
template <int N, bool kRS, int kAReuse, bool kBHalves>
__global__ void __launch_bounds__(384, 1) wgmma_smem(const uint8_t* src, int pace, unsigned long long* out) {
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* smem_a = smem;          // 2 warpgroups x 2 waves x 64 rows x 128 bytes
  uint8_t* smem_b = smem + 32768;  // 256 rows x 128 bytes
  uint8_t* ring = smem + 65536;
  uint64_t* bars = reinterpret_cast<uint64_t*>(ring + kRingSlots * kSlotBytes);
  volatile int* done = reinterpret_cast<volatile int*>(bars + kRingSlots);
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kRingSlots; ++i) ptx::mbarrier_init(&bars[i], 1);
    *done = 0;
    ptx::fence_mbarrier_init();
  }
  for (int i = threadIdx.x; i < 65536 / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x38383838u ^ (i * 2654435761u & 0x07070707u);  // finite e4m3 values
  __syncthreads();

  if (wg == 2) {
    // ---- Copy stream: 16 KB bulk copies into a 4-slot ring, one every `pace` clocks (0: as fast as they go) --------
    if (threadIdx.x == 256 && pace >= 0) {
      const long long t0 = clock64();
      long long next = t0;
      unsigned long long i = 0;
      while (!*done) {
        const int s = int(i % kRingSlots);
        if (i >= kRingSlots) ptx::mbarrier_wait(&bars[s], uint32_t((i / kRingSlots - 1) & 1));
        ptx::mbarrier_arrive_expect_tx(&bars[s], kSlotBytes);
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                ptx::smem_addr(ring + s * kSlotBytes)),
            "l"(src + ((blockIdx.x * 61 + i) % 256) * kSlotBytes), "r"(kSlotBytes), "r"(ptx::smem_addr(&bars[s]))
            : "memory");
        ++i;
        if (pace > 0) {
          next += pace;
          while (clock64() < next) {
          }
        }
      }
      const long long t1 = clock64();
      for (unsigned long long j = i > kRingSlots ? i - kRingSlots : 0; j < i; ++j)
        ptx::mbarrier_wait(&bars[j % kRingSlots], uint32_t((j / kRingSlots) & 1));
      out[blockIdx.x * 4 + 2] = i * kSlotBytes;
      out[blockIdx.x * 4 + 3] = (unsigned long long)(t1 - t0);
    }
    return;
  }

  // ---- Math: batches of four wgmmas, each waited before the next --------------------------------------------------
  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.f;
  uint32_t frag[4][4] = {};
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  ptx::named_barrier_sync(1, 256);
  const long long t0 = clock64();
  for (int it = 0; it < kIters; ++it) {
    const int wave = it & 1;
    uint8_t* a = smem_a + (wg * 2 + ((kBHalves || kRS) ? 0 : wave)) * 8192;
    uint8_t* b = smem_b + (kBHalves ? wave * 16384 : 0);
    if constexpr (kRS) {
      if (it % kAReuse == 0) {
        // The m64k32 A fragment of each K step: ldmatrix x4 over the warp's 16 rows, 128-byte swizzle undone.
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int m = lane / 8, row = warp * 16 + (m & 1) * 8 + lane % 8, chunk = 2 * k + (m >> 1);
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                       : "=r"(frag[k][0]), "=r"(frag[k][1]), "=r"(frag[k][2]), "=r"(frag[k][3])
                       : "r"(ptx::smem_addr(a + row * 128 + ((chunk ^ (row % 8)) * 16))));
        }
      }
    }
    ptx::wgmma_fence();
    const uint64_t da = ptx::make_smem_desc_k_major_sw128(a), db = ptx::make_smem_desc_k_major_sw128(b);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (kRS) {
        WgmmaFp8Rs<N>::mma(frag[k], db + 2 * k, acc, 1u);
      } else {
        ptx::WgmmaFp8<N>::mma(da + 2 * k, db + 2 * k, acc, 1u);
      }
    }
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
  }
  const long long t1 = clock64();
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) sum += acc[i];
  if (sum == 12345.f) out[0] = 1;  // the accumulator chain stays live
  ptx::named_barrier_sync(1, 256);
  if (threadIdx.x == 0) *done = 1;
  if (threadIdx.x % 128 == 0) out[blockIdx.x * 4 + wg] = (unsigned long long)(t1 - t0);
}

template <int N, bool kRS, int kAReuse, bool kBHalves>
void measure(const char* name, const uint8_t* src, unsigned long long* out, int sms, int pace) {
  auto kernel = wgmma_smem<N, kRS, kAReuse, kBHalves>;
  const int smem = 65536 + kRingSlots * kSlotBytes + 64;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<unsigned long long> h(size_t(sms) * 4);
  double best = 0, copy_rate = 0;
  for (int rep = 0; rep < 4; ++rep) {  // the first run warms up
    CHECK(cudaMemset(out, 0, h.size() * 8));
    kernel<<<sms, 384, smem>>>(src, pace, out);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h.data(), out, h.size() * 8, cudaMemcpyDeviceToHost));
    double cycles = 0, bytes = 0, copy_cycles = 0;
    for (int b = 0; b < sms; ++b) {
      cycles += double(std::max(h[b * 4], h[b * 4 + 1]));
      bytes += double(h[b * 4 + 2]);
      copy_cycles += double(h[b * 4 + 3]);
    }
    const double macs = 2.0 * kIters * 64.0 * N * 128.0;  // per SM: two warpgroups
    if (rep > 0) {
      best = std::max(best, macs / (cycles / sms) / 4096.0);
      copy_rate = copy_cycles > 0 ? bytes / copy_cycles : 0;
    }
  }
  std::printf("%-36s copies every %5d clk (-1 none, 0 unpaced): tensor %.3f of peak, copies %.1f B/clk\n", name, pace,
              best, copy_rate);
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint8_t* src;
  CHECK(cudaMalloc(&src, 256 * kSlotBytes));
  CHECK(cudaMemset(src, 0x3a, 256 * kSlotBytes));
  unsigned long long* out;
  CHECK(cudaMalloc(&out, size_t(sms) * 4 * 8));
  for (int pace : {-1, 400, 300, 0}) {
    measure<128, false, 1, false>("SS n128 (256x128: A waves)", src, out, sms, pace);
    measure<128, false, 1, true>("SS n128 (128x256: B halves)", src, out, sms, pace);
    measure<192, false, 1, false>("SS n192 (128x192)", src, out, sms, pace);
    measure<256, false, 1, false>("SS n256", src, out, sms, pace);
    measure<128, true, 1, true>("RS n128, A loaded per batch", src, out, sms, pace);
    measure<128, true, 2, true>("RS n128, A per 2 batches (128x256)", src, out, sms, pace);
    measure<192, true, 1, false>("RS n192, A loaded per batch", src, out, sms, pace);
  }
  return 0;
}
