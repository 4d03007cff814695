// Microbenchmark: what the GEMM's math structure costs without loads. Two math warpgroups per SM; per 128-K block,
// one batch of four m64nNk32 wgmmas per wave into one temporary accumulator, wait, then promotion into per-wave
// running sums (one FFMA per element), with or without alternating turns (named barriers), and with or without a
// full/empty mbarrier ring as the kernel's (a producer thread that only arrives: no data moves).
// Prints the tensor rate as a fraction of 4096 fp8 MACs per SM clock; traced variants also print thread 0's clocks per
// K block in each part of the loop (the clock reads slow the loop down).
// Caveat (session 18): these loops are not the kernel's. With a barrier in the loop ptxas re-reads the thread index
// (S2R) and rebuilds the descriptors inside it, in the path to the next issue, so a ring costs more here than in the
// kernel (there, leaving out the math's full-barrier wait gained 1.4%).
// Build and run: tools/micro/run.sh. Results: docs/performance-log.md, sessions 17 and 18.
#include <algorithm>
#include <cstdio>
#include <type_traits>
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
  kWaitDone = 8,     // every math thread waits a phase that has already completed; no producer, no release
  kArriveOnly = 9,   // the math warps release (arrive on empty) but never wait full; no producer
  kIdleProducer = 10,  // no ring, but a producer thread stays resident, waiting for the math to end
  kWarpZeroWaits = 11,  // warp 0 of each warpgroup waits full; the turn's bar.sync holds the other three warps
  kWarpZeroWaitsGroupRelease = 12,  // as kWarpZeroWaits, and one release per warpgroup (its thread 0)
  kGroupRelease = 13,  // as kWaitEach, but one release per warpgroup (its thread 0)
  kNamedFull = 14,     // full signalled by the producer warp on a named barrier per (stage, warpgroup); release as 13
  kNamedBoth = 15,     // as kNamedFull, and the release too is a named barrier per stage (math arrive, producer sync)
};

__host__ __device__ constexpr bool group_release(int ring) {
  return ring == kWarpZeroWaitsGroupRelease || ring == kGroupRelease || ring == kNamedFull;
}
__device__ constexpr uint32_t full_named_barrier(int stage, int wg) { return 4 + stage * 2 + wg; }  // 4..9
__device__ constexpr uint32_t empty_named_barrier(int stage) { return 10 + stage; }                 // 10..12

template <int kRing>
using Ring_ = std::integral_constant<int, kRing>;  // a Ring as a type, for tile_variants

/// Per-K-block time of the traced thread (thread 0 of each math warpgroup), in SM clocks, summed over the loop.
enum Segment : int { kSegWait, kSegTurn, kSegIssue, kSegMmaWait, kSegPromote, kSegments };

__device__ __forceinline__ bool mbar_test(uint64_t* bar, uint32_t parity) {
  uint32_t r;
  asm volatile("{\n.reg .pred P;\nmbarrier.test_wait.parity.shared::cta.b64 P, [%1], %2;\nselp.u32 %0, 1, 0, P;\n}\n"
               : "=r"(r)
               : "r"(ptx::smem_addr(bar)), "r"(parity)
               : "memory");
  return r != 0;
}

__device__ __forceinline__ uint32_t clock_lo() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%clock;" : "=r"(t)::"memory");
  return t;
}

template <int N, int kWaves, bool kTurns, int kRing, bool kTrace>
__global__ void __launch_bounds__(384, 1)
    math_structure(unsigned long long* out, float* sink, const float* gscales, uint32_t* trace) {
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
      ptx::mbarrier_init(&empty[i], group_release(kRing) ? 2 : 8);  // one arrive per math warp or warpgroup
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
    if (kRing == kIdleProducer && warp == 0 && lane == 0) ptx::mbarrier_wait(&full[0], 0);
    if ((kRing == kNamedFull || kRing == kNamedBoth) && warp == 0) {
      for (int it = 0; it < kIters; ++it) {
        const int s = it % kStages;
        if (kRing == kNamedFull) wait_empty(it);
        if (kRing == kNamedBoth && it >= kStages) ptx::named_barrier_sync(empty_named_barrier(s), 288);
        ptx::named_barrier_arrive(full_named_barrier(s, 0), 160);
        ptx::named_barrier_arrive(full_named_barrier(s, 1), 160);
      }
      if (kRing == kNamedBoth)  // the math's last releases
        for (int it = kIters; it < kIters + kStages; ++it) ptx::named_barrier_sync(empty_named_barrier(it % kStages), 288);
    }
    const bool producer_ring = kRing != kNoRing && kRing != kWaitDone && kRing != kArriveOnly && kRing != kIdleProducer &&
                               kRing != kNamedFull && kRing != kNamedBoth;
    if (producer_ring && warp == 0 && lane == 0)
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
  uint32_t seg[kSegments] = {};
  uint32_t tick = clock_lo();
  auto mark = [&](int segment) {
    if (kTrace) {
      const uint32_t now = clock_lo();
      seg[segment] += now - tick;
      tick = now;
    }
  };
  for (int it = 0; it < kIters; ++it) {
    const int s = it % kStages;
    const uint32_t parity = (it / kStages) & 1;
    if (kRing == kWaitEach || kRing == kScaleWarp || kRing == kProducerPolls || kRing == kSixStages)
      ptx::mbarrier_wait(&full[s], parity);
    if (kRing == kWaitDone) ptx::mbarrier_wait(&full[s], 1);
    if ((kRing == kWarpZeroWaits || kRing == kWarpZeroWaitsGroupRelease) && threadIdx.x % 128 < 32)
      ptx::mbarrier_wait(&full[s], parity);
    if (kRing == kNamedFull || kRing == kNamedBoth) ptx::named_barrier_sync(full_named_barrier(s, wg), 160);
    if (kRing == kWaitEarly && it == 0) ptx::mbarrier_wait(&full[0], 0);
    if (kRing == kProbe)
      while (!mbar_test(&full[s], parity)) {
      }
    if (kRing == kLaneZero) {
      if (threadIdx.x % 32 == 0) ptx::mbarrier_wait(&full[s], parity);
      __syncwarp();
    }
    mark(kSegWait);
#pragma unroll
    for (int w = 0; w < kWaves; ++w) {
      if (kTurns) ptx::named_barrier_sync(my_turn, 256);
      mark(kSegTurn);
      ptx::wgmma_fence();
      const uint64_t da = ptx::make_smem_desc_k_major_sw128(smem_a + (wg * 2 + w) * 8192), db = ptx::make_smem_desc_k_major_sw128(smem_b);
#pragma unroll
      for (int k = 0; k < 4; ++k) ptx::WgmmaFp8<N>::mma(da + 2 * k, db + 2 * k, tmp, k > 0 ? 1u : 0u);
      ptx::wgmma_commit_group();
      if (kTurns) ptx::named_barrier_arrive(other_turn, 256);
      mark(kSegIssue);
      if (kRing == kWaitEarly && w + 1 == kWaves && it + 1 < kIters)
        ptx::mbarrier_wait(&full[(it + 1) % kStages], ((it + 1) / kStages) & 1);
      const float s0 = scales[(it * 7 + w * 64 + row) & 1023], s1 = scales[(it * 7 + w * 64 + row + 8) & 1023];
      ptx::wgmma_wait_group<0>();
      mark(kSegMmaWait);
      const bool releases = kRing != kNoRing && kRing != kWaitDone && kRing != kIdleProducer && kRing != kNamedBoth;
      if (releases && w + 1 == kWaves && threadIdx.x % (group_release(kRing) ? 128 : 32) == 0)
        ptx::mbarrier_arrive(&empty[s]);
      if (kRing == kNamedBoth && w + 1 == kWaves) ptx::named_barrier_arrive(empty_named_barrier(s), 288);
#pragma unroll
      for (int i = 0; i < N / 2; ++i) fin[w][i] += tmp[i] * ((i & 2) ? s1 : s0);
      mark(kSegPromote);
    }
  }
  const long long t1 = clock64();
  if (kTurns && wg == 0) ptx::named_barrier_sync(my_turn, 256);
  if (kRing == kIdleProducer && threadIdx.x == 0) ptx::mbarrier_arrive(&full[0]);
  if (kTrace && threadIdx.x % 128 == 0)
    for (int i = 0; i < kSegments; ++i) trace[(blockIdx.x * 2 + wg) * kSegments + i] = seg[i];
  float sum = 0.f;
#pragma unroll
  for (int w = 0; w < kWaves; ++w)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) sum += fin[w][i];
  sink[blockIdx.x * 256 + threadIdx.x] = sum;
  if (threadIdx.x % 128 == 0) out[blockIdx.x * 2 + wg] = (unsigned long long)(t1 - t0);
}

template <int N, int kWaves, bool kTurns, int kRing, bool kTrace = false>
void measure(const char* name, unsigned long long* out, float* sink, const float* gscales, uint32_t* trace, int sms) {
  auto kernel = math_structure<N, kWaves, kTurns, kRing, kTrace>;
  const int smem = 65536 + 4096 + 128;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<unsigned long long> h(size_t(sms) * 2);
  std::vector<uint32_t> segs(size_t(sms) * 2 * kSegments);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {  // the first run warms up
    kernel<<<sms, 384, smem>>>(out, sink, gscales, trace);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h.data(), out, h.size() * 8, cudaMemcpyDeviceToHost));
    double cycles = 0;
    for (int b = 0; b < sms; ++b) cycles += double(std::max(h[b * 2], h[b * 2 + 1]));
    const double macs = 2.0 * kWaves * kIters * 64.0 * N * 128.0;
    if (rep > 0) best = std::max(best, macs / (cycles / sms) / 4096.0);
  }
  std::printf("%-56s tensor %.3f of peak\n", name, best);
  if constexpr (kTrace) {
    // Clocks per K block of thread 0 of each warpgroup, averaged over the SMs (from the last run).
    CHECK(cudaMemcpy(segs.data(), trace, segs.size() * 4, cudaMemcpyDeviceToHost));
    const char* names[kSegments] = {"wait full", "turn", "issue", "wgmma wait", "promote"};
    for (int wg = 0; wg < 2; ++wg) {
      std::printf("    warpgroup %d, clocks per K block:", wg);
      for (int i = 0; i < kSegments; ++i) {
        double sum = 0;
        for (int b = 0; b < sms; ++b) sum += segs[(size_t(b) * 2 + wg) * kSegments + i];
        std::printf("  %s %.1f", names[i], sum / sms / kIters);
      }
      std::printf("\n");
    }
  }
}

/// Every variant of one tile shape, in order; the ring's waiting alternatives only for 256x128 (two waves).
template <int N, int kWaves>
void tile_variants(const char* tile, unsigned long long* out, float* sink, const float* gscales, uint32_t* trace,
                   int sms) {
  char name[96];
  auto run = [&](auto turns, auto ring, auto traced, const char* what) {
    std::snprintf(name, sizeof(name), "%s: %s", tile, what);
    measure<N, kWaves, decltype(turns)::value, decltype(ring)::value, decltype(traced)::value>(name, out, sink, gscales,
                                                                                             trace, sms);
  };
  using Off = std::false_type;
  using On = std::true_type;
  run(Off(), Ring_<kNoRing>(), Off(), "promotion");
  run(On(), Ring_<kNoRing>(), Off(), "promotion, turns");
  run(On(), Ring_<kWaitEach>(), Off(), "promotion, turns, ring");
  run(Off(), Ring_<kWaitEach>(), Off(), "promotion, ring (no turns)");
  run(On(), Ring_<kScaleWarp>(), Off(), "... ring with a scale warp");
  if constexpr (kWaves == 2) {
    run(On(), Ring_<kWaitEarly>(), Off(), "... next stage waited after the last issue");
    run(On(), Ring_<kProbe>(), Off(), "... test_wait loop");
    run(On(), Ring_<kLaneZero>(), Off(), "... lane 0 waits, __syncwarp");
    run(On(), Ring_<kProducerPolls>(), Off(), "... producer polls");
  }
  run(On(), Ring_<kSixStages>(), Off(), "... 6 stages");
  // The ring taken apart (session 18): each half alone, and fewer or other barriers.
  run(On(), Ring_<kWaitDone>(), Off(), "... wait a completed phase only (no producer)");
  run(On(), Ring_<kArriveOnly>(), Off(), "... release only (no wait, no producer)");
  run(On(), Ring_<kIdleProducer>(), Off(), "... no ring, a producer thread resident");
  run(On(), Ring_<kWarpZeroWaits>(), Off(), "... warp 0 waits, the turn holds the rest");
  run(On(), Ring_<kWarpZeroWaitsGroupRelease>(), Off(), "... warp 0 waits, one release per warpgroup");
  run(On(), Ring_<kGroupRelease>(), Off(), "... all wait, one release per warpgroup");
  run(On(), Ring_<kNamedFull>(), Off(), "... full on named barriers, release per warpgroup");
  run(On(), Ring_<kNamedBoth>(), Off(), "... full and empty on named barriers");
  run(On(), Ring_<kNoRing>(), On(), "promotion, turns (traced)");
  run(On(), Ring_<kWaitEach>(), On(), "promotion, turns, ring (traced)");
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
  uint32_t* trace;
  CHECK(cudaMalloc(&trace, size_t(sms) * 2 * kSegments * 4));
  // 256x128 tiles: two 64-row waves per warpgroup (n128); 128x192: one wave (n192).
  tile_variants<128, 2>("256x128", out, sink, gscales, trace, sms);
  tile_variants<192, 1>("128x192", out, sink, gscales, trace, sms);
  return 0;
}
