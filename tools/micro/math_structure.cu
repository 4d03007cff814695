// Microbenchmark: what the GEMM's math structure costs without loads. Two math warpgroups per SM; per 128-K block,
// one batch of four m64nNk32 wgmmas per wave into one temporary accumulator, wait, then promotion into per-wave
// running sums (one FFMA per element), with or without alternating turns (named barriers), and with or without a
// full/empty mbarrier ring as the kernel's (a producer thread that only arrives: no data moves).
// Prints the tensor rate as a fraction of 4096 fp8 MACs per SM clock.
// Build and run: tools/micro/run.sh. Results: docs/performance.md, session 17.
#include <algorithm>
#include <vector>

#include "micro_common.cuh"

namespace {

constexpr int kIters = 2000;  // K blocks

/// How the math warpgroups learn that a stage is full.
enum Ring : int {
  kNoRing = 0,       // none: the operands never change
  kWaitEach = 1,     // every math thread waits the stage's full barrier before the K block (the kernel's way)
  kScaleWarp = 2,    // as kWaitEach, plus a scale warp: 32 lanes load a float each and arrive on full
  kWaitEarly = 3,    // the next K block's full barrier waited right after the last wave's batch is issued
  kProbe = 4,        // a test_wait loop instead of try_wait
  kLaneZero = 5,     // lane 0 of each warp waits, then __syncwarp
  kProducerPolls = 6,  // as kWaitEach, the producer polling test_wait on empty instead of try_wait
  kSixStages = 7,    // as kWaitEach with 6 stages instead of 3
};

__device__ __forceinline__ bool mbar_test(uint64_t* bar, uint32_t parity) {
  uint32_t r;
  asm volatile("{\n.reg .pred P;\nmbarrier.test_wait.parity.shared::cta.b64 P, [%1], %2;\nselp.u32 %0, 1, 0, P;\n}\n"
               : "=r"(r)
               : "r"(ptx::smem_addr(bar)), "r"(parity)
               : "memory");
  return r != 0;
}

template <int N, int kWaves, bool kTurns, int kRing>
__global__ void __launch_bounds__(384, 1) math_structure(unsigned long long* out, float* sink, const float* gscales) {
  constexpr int kStages = kRing == kSixStages ? 6 : 3;
  extern __shared__ __align__(1024) uint8_t smem[];
  uint8_t* smem_a = smem;          // 2 warpgroups x 2 waves x 8 KB
  uint8_t* smem_b = smem + 32768;  // up to 256 rows x 128 bytes
  float* scales = reinterpret_cast<float*>(smem + 65536);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + 65536 + 4096);
  uint64_t* empty = full + kStages;
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      ptx::mbarrier_init(&full[i], kRing == kScaleWarp ? 33 : 1);
      ptx::mbarrier_init(&empty[i], 8);  // one arrive per math warp
    }
    ptx::fence_mbarrier_init();
  }
  for (int i = threadIdx.x; i < 65536 / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x38383838u ^ (i * 2654435761u & 0x07070707u);
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) scales[i] = 1.0f + i * 1e-3f;
  __syncthreads();

  if (wg == 2) {
    // ---- Producer (no loads): waits a stage empty, arrives full; the scale warp also stores a float per lane -------
    ptx::setmaxnreg_dec<40>();
    const int warp = (threadIdx.x - 256) / 32, lane = threadIdx.x % 32;
    auto wait_empty = [&](int it) {
      const int s = it % kStages;
      if (it < kStages) return;
      if (kRing == kProducerPolls) {
        while (!mbar_test(&empty[s], ((it / kStages) - 1) & 1)) {
        }
      } else {
        ptx::mbarrier_wait(&empty[s], ((it / kStages) - 1) & 1);
      }
    };
    if (kRing != kNoRing && warp == 0 && lane == 0)
      for (int it = 0; it < kIters; ++it) {
        wait_empty(it);
        ptx::mbarrier_arrive(&full[it % kStages]);
      }
    if (kRing == kScaleWarp && warp == 1)
      for (int it = 0; it < kIters; ++it) {
        wait_empty(it);
        scales[(it % kStages) * 32 + lane] = __ldg(gscales + (it * 32 + lane) % 4096);
        ptx::mbarrier_arrive(&full[it % kStages]);
      }
    return;
  }

  // ---- Math --------------------------------------------------------------------------------------------------------
  ptx::setmaxnreg_inc<232>();
  float tmp[N / 2];
  float fin[kWaves][N / 2];
#pragma unroll
  for (int w = 0; w < kWaves; ++w)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) fin[w][i] = 0.f;
  const uint32_t my_turn = 2 + wg, other_turn = 3 - wg;
  if (kTurns && wg == 1) ptx::named_barrier_arrive(other_turn, 256);
  ptx::named_barrier_sync(1, 256);
  const long long t0 = clock64();
  const int row = (threadIdx.x % 128) / 32 * 16 + (threadIdx.x % 32) / 4;
  for (int it = 0; it < kIters; ++it) {
    const int s = it % kStages;
    const uint32_t parity = (it / kStages) & 1;
    if (kRing == kWaitEach || kRing == kScaleWarp || kRing == kProducerPolls || kRing == kSixStages)
      ptx::mbarrier_wait(&full[s], parity);
    if (kRing == kWaitEarly && it == 0) ptx::mbarrier_wait(&full[0], 0);
    if (kRing == kProbe)
      while (!mbar_test(&full[s], parity)) {
      }
    if (kRing == kLaneZero) {
      if (threadIdx.x % 32 == 0) ptx::mbarrier_wait(&full[s], parity);
      __syncwarp();
    }
#pragma unroll
    for (int w = 0; w < kWaves; ++w) {
      if (kTurns) ptx::named_barrier_sync(my_turn, 256);
      ptx::wgmma_fence();
      const uint64_t da = ptx::make_smem_desc_k_major_sw128(smem_a + (wg * 2 + w) * 8192), db = ptx::make_smem_desc_k_major_sw128(smem_b);
#pragma unroll
      for (int k = 0; k < 4; ++k) ptx::WgmmaFp8<N>::mma(da + 2 * k, db + 2 * k, tmp, k > 0 ? 1u : 0u);
      ptx::wgmma_commit_group();
      if (kTurns) ptx::named_barrier_arrive(other_turn, 256);
      if (kRing == kWaitEarly && w + 1 == kWaves && it + 1 < kIters)
        ptx::mbarrier_wait(&full[(it + 1) % kStages], ((it + 1) / kStages) & 1);
      const float s0 = scales[(it * 7 + w * 64 + row) & 1023], s1 = scales[(it * 7 + w * 64 + row + 8) & 1023];
      ptx::wgmma_wait_group<0>();
      if (kRing != kNoRing && w + 1 == kWaves && threadIdx.x % 32 == 0) ptx::mbarrier_arrive(&empty[s]);
#pragma unroll
      for (int i = 0; i < N / 2; ++i) fin[w][i] += tmp[i] * ((i & 2) ? s1 : s0);
    }
  }
  const long long t1 = clock64();
  if (kTurns && wg == 0) ptx::named_barrier_sync(my_turn, 256);
  float sum = 0.f;
#pragma unroll
  for (int w = 0; w < kWaves; ++w)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) sum += fin[w][i];
  sink[blockIdx.x * 256 + threadIdx.x] = sum;
  if (threadIdx.x % 128 == 0) out[blockIdx.x * 2 + wg] = (unsigned long long)(t1 - t0);
}

template <int N, int kWaves, bool kTurns, int kRing>
void measure(const char* name, unsigned long long* out, float* sink, const float* gscales, int sms) {
  auto kernel = math_structure<N, kWaves, kTurns, kRing>;
  const int smem = 65536 + 4096 + 128;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<unsigned long long> h(size_t(sms) * 2);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {  // the first run warms up
    kernel<<<sms, 384, smem>>>(out, sink, gscales);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h.data(), out, h.size() * 8, cudaMemcpyDeviceToHost));
    double cycles = 0;
    for (int b = 0; b < sms; ++b) cycles += double(std::max(h[b * 2], h[b * 2 + 1]));
    const double macs = 2.0 * kWaves * kIters * 64.0 * N * 128.0;
    if (rep > 0) best = std::max(best, macs / (cycles / sms) / 4096.0);
  }
  std::printf("%-52s tensor %.3f of peak\n", name, best);
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned long long* out;
  CHECK(cudaMalloc(&out, size_t(sms) * 2 * 8));
  float* sink;
  CHECK(cudaMalloc(&sink, size_t(sms) * 256 * 4));
  float* gscales;
  CHECK(cudaMalloc(&gscales, 4096 * 4));
  CHECK(cudaMemset(gscales, 0, 4096 * 4));
  // 256x128 tiles: two 64-row waves per warpgroup (n128); 128x192: one wave (n192).
  measure<128, 2, false, kNoRing>("256x128: promotion", out, sink, gscales, sms);
  measure<128, 2, true, kNoRing>("256x128: promotion, turns", out, sink, gscales, sms);
  measure<128, 2, true, kWaitEach>("256x128: promotion, turns, ring", out, sink, gscales, sms);
  measure<128, 2, false, kWaitEach>("256x128: promotion, ring (no turns)", out, sink, gscales, sms);
  measure<128, 2, true, kScaleWarp>("256x128: ... ring with a scale warp", out, sink, gscales, sms);
  measure<128, 2, true, kWaitEarly>("256x128: ... next stage waited after the last issue", out, sink, gscales, sms);
  measure<128, 2, true, kProbe>("256x128: ... test_wait loop", out, sink, gscales, sms);
  measure<128, 2, true, kLaneZero>("256x128: ... lane 0 waits, __syncwarp", out, sink, gscales, sms);
  measure<128, 2, true, kProducerPolls>("256x128: ... producer polls", out, sink, gscales, sms);
  measure<128, 2, true, kSixStages>("256x128: ... 6 stages", out, sink, gscales, sms);
  measure<192, 1, false, kNoRing>("128x192: promotion", out, sink, gscales, sms);
  measure<192, 1, true, kNoRing>("128x192: promotion, turns", out, sink, gscales, sms);
  measure<192, 1, true, kWaitEach>("128x192: promotion, turns, ring", out, sink, gscales, sms);
  measure<192, 1, false, kWaitEach>("128x192: promotion, ring (no turns)", out, sink, gscales, sms);
  measure<192, 1, true, kScaleWarp>("128x192: ... ring with a scale warp", out, sink, gscales, sms);
  measure<192, 1, true, kSixStages>("128x192: ... 6 stages", out, sink, gscales, sms);
  return 0;
}
