// Microbenchmark: what a K block of the narrow small-M tiles (BLOCK_M = 64, BLOCK_N 16-64) costs the math warpgroup
// without loads (docs/performance-log.md, session 30).
//
// One math warpgroup per SM runs the dense kernel's K-depth loop on data already in shared memory: per group of
// kDepth K blocks, each K block's four m64nNk32 e4m3 wgmmas into an accumulator of its own (one commit group), then
// each waited for in turn and promoted (N/2 FFMAs per thread). A comes from shared memory (SS, as the kernel does) or
// from registers (RS: ldmatrix of the K block's 64 x 128 bytes, then the register form), B from shared memory.
// Rolling: K blocks in flight across the promotions (issue K block i + kDepth, then wait for and promote K block i),
// the loop unrolled over a tile's kChunk K blocks so that ptxas sees every accumulator's index.
// Printed: SM cycles per K block (median over the SMs), and the tensor work's share of them (64 x N x 128 MACs at
// 4096 per cycle).
// Build and run: tools/micro/run.sh.
#include <algorithm>
#include <vector>

#include "micro_common.cuh"

namespace {

constexpr int kStages = 4;
constexpr int kIters = 4096;  // K blocks per run
constexpr int kChunk = 64;    // K blocks per tile in the rolling loop

template <int N, bool kRS, int kDepth, bool kPromote, bool kRolling = false>
__global__ void __launch_bounds__(128, 1) narrow_wgmma(unsigned long long* out) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* smem_a = smem;                   // kStages x 64 rows x 128 bytes
  uint8_t* smem_b = smem + kStages * 8192;  // kStages x N rows x 128 bytes
  for (int i = threadIdx.x; i < kStages * (8192 + N * 128) / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x38383838u ^ (i * 2654435761u & 0x07070707u);  // finite e4m3 values
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc[kDepth][N / 2];
  float final_acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) final_acc[i] = 0.f;
  uint32_t frag[kDepth][4][4];
  const float scale = 1.0f + 1e-7f * float(threadIdx.x);
  const long long t0 = clock64();
  // One K block's wgmmas into acc[d] (one commit group).
  auto issue = [&](int kb, int d) {
    const int stage = kb % kStages;
    const uint64_t da = ptx::make_smem_desc_k_major_sw128(smem_a + stage * 8192);
    const uint64_t db = ptx::make_smem_desc_k_major_sw128(smem_b + stage * N * 128);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) ptx::wgmma_fence_operand(acc[d][i]);
    ptx::wgmma_fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) ptx::WgmmaFp8<N>::mma(da + 2 * k, db + 2 * k, acc[d], k > 0 ? 1u : 0u);
    ptx::wgmma_commit_group();
  };
  if constexpr (kRolling) {
    for (int c = 0; c < kIters / kChunk; ++c) {
#pragma unroll
      for (int kb = 0; kb < kDepth; ++kb) issue(kb, kb);
#pragma unroll
      for (int kb = 0; kb < kChunk; ++kb) {
        ptx::wgmma_wait_group_at_most(min(kDepth, kChunk - kb) - 1);
#pragma unroll
        for (int i = 0; i < N / 2; ++i) ptx::wgmma_fence_operand(acc[kb % kDepth][i]);
#pragma unroll
        for (int i = 0; i < N / 2; ++i) final_acc[i] += scale * acc[kb % kDepth][i];
        if (kb + kDepth < kChunk) issue(kb + kDepth, kb % kDepth);
      }
    }
  }
  for (int g = 0; g < (kRolling ? 0 : kIters / kDepth); ++g) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const int stage = (g * kDepth + d) % kStages;
      uint8_t* a = smem_a + stage * 8192;
      const uint64_t db = ptx::make_smem_desc_k_major_sw128(smem_b + stage * N * 128);
      if constexpr (kRS) {
        // The m64k32 A fragment of each K step: ldmatrix x4 over the warp's 16 rows, 128-byte swizzle undone.
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int m = lane / 8, row = warp * 16 + (m & 1) * 8 + lane % 8, chunk = 2 * k + (m >> 1);
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                       : "=r"(frag[d][k][0]), "=r"(frag[d][k][1]), "=r"(frag[d][k][2]), "=r"(frag[d][k][3])
                       : "r"(ptx::smem_addr(a + row * 128 + ((chunk ^ (row % 8)) * 16))));
        }
      }
#pragma unroll
      for (int i = 0; i < N / 2; ++i) ptx::wgmma_fence_operand(acc[d][i]);
      ptx::wgmma_fence();
      const uint64_t da = ptx::make_smem_desc_k_major_sw128(a);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if constexpr (kRS) {
          WgmmaFp8Rs<N>::mma(frag[d][k], db + 2 * k, acc[d], k > 0 ? 1u : 0u);
        } else {
          ptx::WgmmaFp8<N>::mma(da + 2 * k, db + 2 * k, acc[d], k > 0 ? 1u : 0u);
        }
      }
      ptx::wgmma_commit_group();
    }
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      ptx::wgmma_wait_group_at_most(kDepth - 1 - d);
#pragma unroll
      for (int i = 0; i < N / 2; ++i) ptx::wgmma_fence_operand(acc[d][i]);
      if constexpr (kPromote) {
#pragma unroll
        for (int i = 0; i < N / 2; ++i) final_acc[i] += scale * acc[d][i];
      }
    }
  }
  const long long t1 = clock64();
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) sum += kPromote ? final_acc[i] : acc[0][i];
  if (sum == 12345.f) out[gridDim.x] = 1;  // the accumulators stay live
  if (threadIdx.x == 0) out[blockIdx.x] = (unsigned long long)(t1 - t0);
}

template <int N, bool kRS, int kDepth, bool kPromote, bool kRolling = false>
void measure(const char* name, unsigned long long* out, int sms) {
  auto kernel = narrow_wgmma<N, kRS, kDepth, kPromote, kRolling>;
  const int smem = 160 * 1024;  // one CTA per SM
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<unsigned long long> h(sms);
  std::vector<double> runs;
  for (int rep = 0; rep < 4; ++rep) {  // the first run warms up
    kernel<<<sms, 128, smem>>>(out);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(h.data(), out, sms * 8, cudaMemcpyDeviceToHost));
    std::sort(h.begin(), h.end());
    if (rep > 0) runs.push_back(double(h[sms / 2]) / kIters);
  }
  std::sort(runs.begin(), runs.end());
  const double tensor = 64.0 * N * 128 / 4096;
  std::printf("%-34s %7.1f cycles per K block, tensor work %5.1f (%4.0f%%)\n", name, runs[1], tensor,
              100.0 * tensor / runs[1]);
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned long long* out;
  CHECK(cudaMalloc(&out, size_t(sms + 1) * 8));
  measure<16, false, 4, true>("SS n16 depth 4 (kernel)", out, sms);
  measure<16, false, 4, false>("SS n16 depth 4, no promotion", out, sms);
  measure<16, false, 8, true>("SS n16 depth 8", out, sms);
  measure<16, false, 4, true, true>("SS n16 rolling 4", out, sms);
  measure<16, false, 2, true, true>("SS n16 rolling 2", out, sms);
  measure<16, false, 8, true, true>("SS n16 rolling 8", out, sms);
  measure<32, false, 4, true, true>("SS n32 rolling 4", out, sms);
  measure<64, false, 4, true, true>("SS n64 rolling 4", out, sms);
  measure<64, false, 2, true, true>("SS n64 rolling 2", out, sms);
  measure<16, true, 4, true>("RS n16 depth 4", out, sms);
  measure<16, true, 4, false>("RS n16 depth 4, no promotion", out, sms);
  measure<32, false, 4, true>("SS n32 depth 4 (kernel)", out, sms);
  measure<32, true, 4, true>("RS n32 depth 4", out, sms);
  measure<64, false, 4, true>("SS n64 depth 4 (kernel)", out, sms);
  measure<64, true, 4, true>("RS n64 depth 4", out, sms);
  measure<128, false, 2, true>("SS n128 depth 2 (kernel)", out, sms);
  measure<128, true, 2, true>("RS n128 depth 2", out, sms);
  return 0;
}
