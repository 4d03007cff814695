// Microbenchmark: the two sides of an H100's L2, and what reading across them costs (docs/performance-log.md,
// session 22).
//
// An H100's L2 is two partitions; each 4 KB chunk of memory has its home in one of them, and each SM sits next to
// one. An atomic runs at the chunk's home, so its latency tells the side:
//  1. each SM's side: a chain of dependent atomics on one word, from every SM in turn (two latency clusters);
//  2. each 4 KB chunk's side: the same chain from one SM over every chunk of a buffer; then, for every address bit
//     from 12 to 20, the share of chunk pairs differing only in that bit that sit on different sides (a bit of the
//     side hash flips every pair) and, per 2 MB page, whether parity(offset & mask) predicts the measured sides;
//  3. what reading costs by side: every SM reads 16-byte words (ld.global.cg) from chunks of its own side only
//     ("near"), of the other side only ("far"), or from all chunks in address order ("all"), in two patterns:
//     L2-resident (every SM reads the same 8 MB of chunks, over and over: what GEMM tiles shared by many SMs do) and
//     streaming (each chunk of a 2 GB buffer read once per pass by one SM: what a GEMM's first touch of A and B does).
//     Each variant runs about a second; the card's energy counter (NVML) gives its average power and the energy per
//     byte, alongside the bandwidth and the SM clock at the end.
// Build and run: tools/micro/run.sh (it runs this after the wgmma benchmarks).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "check.cuh"
#include "lib/power.hpp"

namespace {

constexpr size_t kChunkBytes = 4096;
constexpr size_t kPageBytes = 2u << 20;
constexpr int kChainLength = 32;
constexpr int kBlockThreads = 1024;
// Dynamic shared memory that keeps one block per SM, so that a grid of one block per SM covers every SM once.
constexpr int kOneBlockPerSmBytes = 160 * 1024;

__device__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

/// Mean latency (SM clocks) of a chain of dependent atomics on `word`, run by thread 0 of the block on `target_sm`.
__device__ float atomic_chain(uint32_t* word) {
  atomicExch(word, 0u);
  uint32_t offset = 0;
  const long long t0 = clock64();
  for (int i = 0; i < kChainLength; ++i) {
    const uint32_t v = atomicAdd(word + offset, 1u);
    offset = v > 0x40000000u ? 1u : 0u;  // never taken: makes each atomic wait for the one before
  }
  return float(clock64() - t0) / kChainLength;
}

__global__ void probe_sm(uint32_t* word, uint32_t target_sm, float* out) {
  extern __shared__ uint8_t unused_smem[];
  if (sm_id() != target_sm || threadIdx.x != 0) return;
  out[target_sm] = atomic_chain(word);
}

__global__ void probe_chunks(uint32_t* buf, size_t num_chunks, uint32_t target_sm, float* out) {
  extern __shared__ uint8_t unused_smem[];
  if (sm_id() != target_sm || threadIdx.x != 0) return;
  for (size_t c = 0; c < num_chunks; ++c) out[c] = atomic_chain(buf + c * (kChunkBytes / 4));
}

/// Reads chunks: the block on SM `sm` reads list entries rank, rank + stride, ... (`shared`: every SM reads the
/// whole list, starting at a different place). `lists[side]` holds chunk indices; `which[sm]` is the list that SM
/// reads, `rank[sm]` its place among the SMs reading it and `readers[list]` their number.
__global__ void __launch_bounds__(kBlockThreads, 1)
    read_chunks(const uint4* buf, const uint32_t* const* lists, const uint32_t* list_len, const uint8_t* which,
                const uint16_t* rank, const uint16_t* readers, int shared, int passes, uint32_t* sink) {
  extern __shared__ uint8_t unused_smem[];
  const uint32_t sm = sm_id();
  const uint32_t list_id = which[sm];
  const uint32_t* list = lists[list_id];
  const uint32_t len = list_len[list_id];
  const uint32_t n = readers[list_id];
  const uint32_t first = shared ? 0 : rank[sm];
  const uint32_t step = shared ? 1 : n;
  const uint32_t start = shared ? uint32_t(uint64_t(rank[sm]) * len / n) : 0;
  constexpr uint32_t kWordsPerChunk = kChunkBytes / 16;
  constexpr uint32_t kChunksPerSweep = kBlockThreads / kWordsPerChunk;  // 4
  constexpr int kUnroll = 4;
  const uint32_t sub = threadIdx.x / kWordsPerChunk, word = threadIdx.x % kWordsPerChunk;
  uint32_t acc = 0;
  for (int p = 0; p < passes; ++p) {
    for (uint32_t i = first; i < len; i += step * kChunksPerSweep * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t j = i + (u * kChunksPerSweep + sub) * step;
        v[u] = j < len ? __ldcg(buf + size_t(list[(j + start) % len]) * kWordsPerChunk + word) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

struct Sides {
  std::vector<int> sm_side;     // per SM: 0 or 1
  std::vector<int> chunk_side;  // per chunk of the probe buffer
};

int classify(const std::vector<float>& lat, std::vector<int>& side) {
  const auto [lo, hi] = std::minmax_element(lat.begin(), lat.end());
  const float threshold = (*lo + *hi) / 2;
  side.resize(lat.size());
  int far = 0;
  for (size_t i = 0; i < lat.size(); ++i) far += side[i] = lat[i] > threshold;
  std::printf("  latency clusters: %.0f .. %.0f clocks, threshold %.0f, %d of %zu far\n", *lo, *hi, threshold, far,
              lat.size());
  return far;
}

}  // namespace

int main() {
  int num_sms = 0;
  CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("l2_sides on %s (%d SMs, L2 %d MB)\n", prop.name, num_sms, prop.l2CacheSize >> 20);
  CHECK(cudaFuncSetAttribute(probe_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneBlockPerSmBytes));
  CHECK(cudaFuncSetAttribute(probe_chunks, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneBlockPerSmBytes));
  CHECK(cudaFuncSetAttribute(read_chunks, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneBlockPerSmBytes));

  // ---- 1. Each SM's side, against the home of one word ----
  const size_t probe_bytes = 64u << 20;
  uint32_t* probe_buf = nullptr;
  CHECK(cudaMalloc(&probe_buf, probe_bytes));
  CHECK(cudaMemset(probe_buf, 0, probe_bytes));
  float* d_lat = nullptr;
  const size_t num_probe_chunks = probe_bytes / kChunkBytes;
  CHECK(cudaMalloc(&d_lat, sizeof(float) * std::max<size_t>(num_probe_chunks, num_sms)));
  for (int sm = 0; sm < num_sms; ++sm)
    probe_sm<<<num_sms, 32, kOneBlockPerSmBytes>>>(probe_buf, uint32_t(sm), d_lat);
  CHECK(cudaDeviceSynchronize());
  std::vector<float> sm_lat(num_sms);
  CHECK(cudaMemcpy(sm_lat.data(), d_lat, sizeof(float) * num_sms, cudaMemcpyDeviceToHost));
  std::printf("1. SM sides (atomics on the first word of a buffer):\n");
  Sides sides;
  const int far_sms = classify(sm_lat, sides.sm_side);
  std::printf("  side 0 (near that word): %d SMs, side 1: %d SMs\n  sides by SM id:", num_sms - far_sms, far_sms);
  for (int sm = 0; sm < num_sms; ++sm) std::printf("%s%d", sm % 32 == 0 ? "\n    " : "", sides.sm_side[sm]);
  std::printf("\n");

  // ---- 2. Each chunk's side, from the nearest SM of side 0 ----
  const int probe_sm_id = int(std::min_element(sm_lat.begin(), sm_lat.end()) - sm_lat.begin());
  probe_chunks<<<num_sms, 32, kOneBlockPerSmBytes>>>(probe_buf, num_probe_chunks, uint32_t(probe_sm_id), d_lat);
  CHECK(cudaDeviceSynchronize());
  std::vector<float> chunk_lat(num_probe_chunks);
  CHECK(cudaMemcpy(chunk_lat.data(), d_lat, sizeof(float) * num_probe_chunks, cudaMemcpyDeviceToHost));
  std::printf("2. Chunk sides (%zu chunks of 4 KB, from SM %d; 1 = the far side):\n", num_probe_chunks, probe_sm_id);
  classify(chunk_lat, sides.chunk_side);
  const uint64_t base = reinterpret_cast<uint64_t>(probe_buf);
  std::printf("  buffer at 0x%llx (%s 2 MB aligned)\n", (unsigned long long)base, base % kPageBytes ? "not" : "");
  uint32_t mask = 0;
  for (int bit = 12; bit <= 20; ++bit) {
    size_t pairs = 0, flips = 0;
    for (size_t c = 0; c < num_probe_chunks; ++c) {
      const size_t other = c ^ (size_t(1) << (bit - 12));
      if (other < c || other >= num_probe_chunks) continue;
      ++pairs;
      flips += sides.chunk_side[c] != sides.chunk_side[other];
    }
    const double share = pairs ? double(flips) / pairs : 0;
    if (share > 0.9) mask |= 1u << bit;
    std::printf("  bit %2d: %5.1f%% of %zu pairs on different sides\n", bit, 100 * share, pairs);
  }
  size_t pages = 0, consistent = 0;
  for (size_t p = 0; p * (kPageBytes / kChunkBytes) < num_probe_chunks; ++p) {
    const size_t per_page = kPageBytes / kChunkBytes;
    size_t agree = 0;
    for (size_t i = 0; i < per_page; ++i) {
      const size_t c = p * per_page + i;
      const uint64_t offset = (base + c * kChunkBytes) & (kPageBytes - 1);
      agree += int(__builtin_popcountll(offset & mask) & 1) == sides.chunk_side[c];
    }
    ++pages;
    consistent += agree == per_page || agree == 0;
  }
  std::printf("  hash mask from the flips: 0x%x; pages whose sides it predicts (up to a flip per page): %zu of %zu\n",
              mask, consistent, pages);

  // ---- 3. Reading by side: L2-resident and streaming ----
  finegemm::tools::PowerMeter meter(0);
  if (!meter.available()) std::printf("3. power: %s; bandwidth only\n", meter.why().c_str());
  else std::printf("3. reads by side (power limit %.0f W)\n", meter.power_limit_w());
  const double idle_w = [&] {
    if (!meter.available()) return 0.0;
    const double e0 = meter.energy_mj();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return (meter.energy_mj() - e0) / 1000.0;
  }();
  std::printf("  idle: %.1f W\n", idle_w);

  // Streaming needs every chunk's side in a 2 GB buffer: its chunks follow the hash, per 2 MB page, with each
  // page's polarity taken from one probe (a chunk at offset 0 of the page).
  const size_t stream_bytes = size_t(2) << 30;
  uint8_t* stream_buf = nullptr;
  CHECK(cudaMalloc(&stream_buf, stream_bytes + kPageBytes));
  uint8_t* stream_base = reinterpret_cast<uint8_t*>((reinterpret_cast<uint64_t>(stream_buf) + kPageBytes - 1) /
                                                    kPageBytes * kPageBytes);
  CHECK(cudaMemset(stream_base, 1, stream_bytes));
  const size_t stream_chunks = stream_bytes / kChunkBytes;
  const size_t stream_pages = stream_bytes / kPageBytes;
  std::vector<int> page_polarity(stream_pages);
  {
    // One probe per page (chunk 0), from the same SM.
    float* d_page_lat = nullptr;
    CHECK(cudaMalloc(&d_page_lat, sizeof(float)));
    std::vector<float> lat(stream_pages);
    for (size_t p = 0; p < stream_pages; ++p) {
      probe_chunks<<<num_sms, 32, kOneBlockPerSmBytes>>>(reinterpret_cast<uint32_t*>(stream_base + p * kPageBytes), 1,
                                                        uint32_t(probe_sm_id), d_page_lat);
      CHECK(cudaMemcpy(&lat[p], d_page_lat, sizeof(float), cudaMemcpyDeviceToHost));
    }
    std::vector<int> side0;
    std::printf("  streaming buffer, chunk 0 of each 2 MB page:\n");
    classify(lat, side0);
    for (size_t p = 0; p < stream_pages; ++p) page_polarity[p] = side0[p];  // offset 0: parity 0, so side = polarity
    CHECK(cudaFree(d_page_lat));
  }
  auto stream_chunk_side = [&](size_t c) {
    const uint64_t offset = (c * kChunkBytes) & (kPageBytes - 1);
    return (int(__builtin_popcountll(offset & mask) & 1)) ^ page_polarity[c * kChunkBytes / kPageBytes];
  };
  // The L2-resident set: the first 8 MB of the probe buffer's chunks of each side (sides measured directly).
  std::vector<uint32_t> resident[2], streaming[2], resident_all, streaming_all;
  for (size_t c = 0; c < num_probe_chunks && (resident[0].size() < 1024 || resident[1].size() < 1024); ++c) {
    auto& l = resident[sides.chunk_side[c]];
    if (l.size() < 1024) l.push_back(uint32_t(c)), resident_all.push_back(uint32_t(c));
  }
  for (size_t c = 0; c < stream_chunks; ++c) {
    streaming[stream_chunk_side(c)].push_back(uint32_t(c));
    streaming_all.push_back(uint32_t(c));
  }
  std::printf("  streaming chunks by side: %zu / %zu\n", streaming[0].size(), streaming[1].size());

  uint32_t* d_lists[3];
  uint32_t* d_list_ptrs = nullptr;
  uint32_t* d_len = nullptr;
  uint8_t* d_which = nullptr;
  uint16_t *d_rank = nullptr, *d_readers = nullptr;
  uint32_t* d_sink = nullptr;
  CHECK(cudaMalloc(&d_list_ptrs, sizeof(uint32_t*) * 3));
  CHECK(cudaMalloc(&d_len, sizeof(uint32_t) * 3));
  CHECK(cudaMalloc(&d_which, num_sms));
  CHECK(cudaMalloc(&d_rank, 2 * num_sms));
  CHECK(cudaMalloc(&d_readers, 2 * 3));
  CHECK(cudaMalloc(&d_sink, 4));
  for (auto& l : d_lists) CHECK(cudaMalloc(&l, sizeof(uint32_t) * stream_chunks));
  cudaEvent_t ev0, ev1;
  CHECK(cudaEventCreate(&ev0));
  CHECK(cudaEventCreate(&ev1));

  // mode: 0 near (each SM its own side's list), 1 far (the other side's), 2 all (one list of every chunk).
  auto run = [&](const char* pattern, const uint8_t* buf, const std::vector<uint32_t>* by_side,
                 const std::vector<uint32_t>& all, bool shared, int passes, int mode) {
    const std::vector<uint32_t>* lists[3] = {&by_side[0], &by_side[1], &all};
    uint32_t len[3];
    for (int i = 0; i < 3; ++i) {
      len[i] = uint32_t(lists[i]->size());
      CHECK(cudaMemcpy(d_lists[i], lists[i]->data(), sizeof(uint32_t) * len[i], cudaMemcpyHostToDevice));
    }
    CHECK(cudaMemcpy(d_list_ptrs, d_lists, sizeof(d_lists), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_len, len, sizeof(len), cudaMemcpyHostToDevice));
    std::vector<uint8_t> which(num_sms);
    std::vector<uint16_t> rank(num_sms), readers(3, 0);
    for (int sm = 0; sm < num_sms; ++sm) {
      which[sm] = uint8_t(mode == 2 ? 2 : (sides.sm_side[sm] ^ mode));
      rank[sm] = readers[which[sm]]++;
    }
    CHECK(cudaMemcpy(d_which, which.data(), num_sms, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_rank, rank.data(), 2 * num_sms, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d_readers, readers.data(), 2 * 3, cudaMemcpyHostToDevice));
    auto launch = [&](int reps) {
      for (int r = 0; r < reps; ++r)
        read_chunks<<<num_sms, kBlockThreads, kOneBlockPerSmBytes>>>(
            reinterpret_cast<const uint4*>(buf), reinterpret_cast<const uint32_t* const*>(d_list_ptrs), d_len,
            d_which, d_rank, d_readers, shared ? 1 : 0, passes, d_sink);
    };
    launch(2);
    CHECK(cudaEventRecord(ev0));
    launch(1);
    CHECK(cudaEventRecord(ev1));
    CHECK(cudaEventSynchronize(ev1));
    float one_ms = 0;
    CHECK(cudaEventElapsedTime(&one_ms, ev0, ev1));
    const int reps = std::max(1, int(1500.0 / std::max(one_ms, 0.01f)));  // about 1.5 s
    CHECK(cudaDeviceSynchronize());
    const double e0 = meter.energy_mj();
    CHECK(cudaEventRecord(ev0));
    launch(reps);
    CHECK(cudaEventRecord(ev1));
    CHECK(cudaEventSynchronize(ev1));
    const int mhz = meter.sm_clock_mhz();
    const unsigned long long reasons = meter.clock_event_reasons();
    const double e1 = meter.energy_mj();
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, ev0, ev1));
    double bytes = 0;
    for (int sm = 0; sm < num_sms; ++sm) {
      const double l = len[which[sm]];
      bytes += (shared ? l : l / readers[which[sm]]) * kChunkBytes;
    }
    bytes *= double(passes) * reps;
    const double s = ms / 1000.0;
    const double watts = meter.available() ? (e1 - e0) / 1000.0 / s : 0;
    std::printf("  %-9s %-4s %8.0f GB/s  %6.1f W  %6.1f pJ/B (%6.1f above idle)  SM %4d MHz  reasons 0x%llx\n",
                pattern, mode == 0 ? "near" : mode == 1 ? "far" : "all", bytes / s / 1e9, watts,
                watts / (bytes / s) * 1e12, (watts - idle_w) / (bytes / s) * 1e12, mhz, reasons);
  };
  std::printf("  pattern   side   bandwidth   power   energy per byte read          clock\n");
  for (int round = 0; round < 2; ++round) {
    for (int mode : {0, 1, 2})
      run("resident", reinterpret_cast<const uint8_t*>(probe_buf), resident, resident_all, true, 20, mode);
    for (int mode : {0, 1, 2}) run("streaming", stream_base, streaming, streaming_all, false, 1, mode);
  }
  CHECK(cudaGetLastError());
  return 0;
}
