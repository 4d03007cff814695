// Microbenchmark: the host cost of a warm GEMM call against the driver's own launch cost (docs/performance-log.md,
// session 32). Gpu.HostOverheadOfAWarmCall bounds finegemm's warm call at M=64; this program times, the same way
// (batches of 64 calls queued behind a host function that holds the stream, host clock around the enqueues only):
//   - an empty kernel with a 16-byte parameter, through the runtime (cudaLaunchKernel);
//   - an empty kernel with a parameter the size of finegemm's GemmArgs (__grid_constant__), through the runtime and
//     through the driver (cuLaunchKernelEx, as finegemm launches);
//   - finegemm::gemm_fp8_fp8_bf16_nt at 64x7168x2048 (operands uninitialized: only the launch path matters here).
// Build and run: tools/micro/run.sh (links libfinegemm.so from FINEGEMM_LIB_DIR, default build).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "check.cuh"
#include "finegemm/device/common/gemm_args.cuh"
#include "finegemm/finegemm.hpp"

namespace {

struct Small {
  int v;
  int pad[3];
};

__global__ void empty_small(Small) {}
__global__ void empty_args(const __grid_constant__ finegemm::device::GemmArgs) {}

using Clock = std::chrono::steady_clock;

void CUDART_CB hold(void* flag) {
  auto* open = static_cast<std::atomic<bool>*>(flag);
  while (!open->load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

// Median over `repeats` runs of the mean host time per enqueue, `calls` calls per run in batches of 64.
double per_call_us(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s, int calls, int repeats) {
  for (int i = 0; i < 10; ++i) enqueue(s);
  CHECK(cudaStreamSynchronize(s));
  std::vector<double> runs;
  for (int r = 0; r < repeats; ++r) {
    double total_ns = 0;
    for (int done = 0; done < calls; done += 64) {
      std::atomic<bool> open{false};
      CHECK(cudaLaunchHostFunc(s, hold, &open));
      const auto t0 = Clock::now();
      for (int i = 0; i < 64; ++i) enqueue(s);
      const auto t1 = Clock::now();
      open.store(true, std::memory_order_release);
      CHECK(cudaStreamSynchronize(s));
      total_ns += double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    }
    runs.push_back(total_ns / 1000.0 / double((calls + 63) / 64 * 64));
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

}  // namespace

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  constexpr int kCalls = 10000, kRepeats = 5;

  const double small = per_call_us([](cudaStream_t st) { empty_small<<<132, 384, 0, st>>>(Small{1, {}}); }, s, kCalls,
                                   kRepeats);
  finegemm::device::GemmArgs args{};
  const double big_rt = per_call_us([&](cudaStream_t st) { empty_args<<<132, 384, 0, st>>>(args); }, s, kCalls,
                                    kRepeats);
  cudaFunction_t rt_fn;
  CHECK(cudaGetFuncBySymbol(&rt_fn, reinterpret_cast<const void*>(empty_args)));
  const CUfunction fn = reinterpret_cast<CUfunction>(rt_fn);
  const double big_drv = per_call_us(
      [&](cudaStream_t st) {
        CUlaunchConfig config{};
        config.gridDimX = 132;
        config.gridDimY = config.gridDimZ = 1;
        config.blockDimX = 384;
        config.blockDimY = config.blockDimZ = 1;
        config.hStream = reinterpret_cast<CUstream>(st);
        void* params[] = {&args};
        if (cuLaunchKernelEx(&config, fn, params, nullptr) != CUDA_SUCCESS) std::exit(2);
      },
      s, kCalls, kRepeats);

  constexpr int64_t m = 64, n = 7168, k = 2048, kb = k / 128, nb = n / 128;
  void *a, *sa, *b, *sb, *d;
  CHECK(cudaMalloc(&a, m * k));
  CHECK(cudaMalloc(&sa, kb * m * 4));
  CHECK(cudaMalloc(&b, n * k));
  CHECK(cudaMalloc(&sb, nb * kb * 4));
  CHECK(cudaMalloc(&d, m * n * 2));
  using finegemm::DType;
  using finegemm::TensorView;
  const TensorView va = TensorView::contiguous(a, DType::kFloat8E4M3, {m, k});
  const TensorView vsa = TensorView::strided(sa, DType::kFloat32, {m, kb}, {1, m});
  const TensorView vb = TensorView::contiguous(b, DType::kFloat8E4M3, {n, k});
  const TensorView vsb = TensorView::contiguous(sb, DType::kFloat32, {nb, kb});
  const TensorView vd = TensorView::contiguous(d, DType::kBFloat16, {m, n});
  const double gemm = per_call_us(
      [&](cudaStream_t st) {
        finegemm::gemm_fp8_fp8_bf16_nt(va, vsa, vb, vsb, vd, reinterpret_cast<finegemm::Stream>(st));
      },
      s, kCalls, kRepeats);

  std::printf("launch_overhead: host us per enqueue (median of %d runs of %d calls, 64 per batch behind a held "
              "stream)\n", kRepeats, kCalls);
  std::printf("  empty kernel, 16-byte parameter, cudaLaunchKernel            %6.2f\n", small);
  std::printf("  empty kernel, GemmArgs parameter (%zu bytes), cudaLaunchKernel %6.2f\n", sizeof(args), big_rt);
  std::printf("  empty kernel, GemmArgs parameter, cuLaunchKernelEx              %6.2f\n", big_drv);
  std::printf("  finegemm::gemm_fp8_fp8_bf16_nt 64x7168x2048, warm                %6.2f\n", gemm);
  return 0;
}
