#include "lib/ceiling.hpp"

#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "finegemm/finegemm.hpp"
#include "jit/driver.hpp"
#include "jit/launch.hpp"
#include "lib/device_buffer.hpp"
#include "lib/jit_kernel.hpp"

namespace finegemm::tools {

namespace {

// Mirrors of tools/device/ceiling.cuh (a device header: not included by host code).
constexpr unsigned kStreamThreads = 256;
constexpr unsigned kTensorThreads = 256;
constexpr unsigned kTensorSmemBytes = 120 * 1024;
constexpr const char* kHeader = "finegemm/tools/ceiling.cuh";

void launch(void* fn, unsigned grid, unsigned block, unsigned smem, cudaStream_t s, void** args, const char* what) {
  jit::LaunchShape shape;
  shape.grid_x = grid;
  shape.block_x = block;
  shape.smem_bytes = smem;
  jit::launch_kernel(static_cast<CUfunction>(fn), shape, reinterpret_cast<CUstream>(s), args, what);
}

}  // namespace

uint64_t tensor_ceiling_batches(double flops, uint32_t wgmma_n) {
  const double per_batch = 2.0 * 64.0 * double(wgmma_n) * 128.0;
  return uint64_t(std::ceil(flops / per_batch));
}

CeilingKernels::CeilingKernels() {
  num_sms_ = get_num_sms();
  stream_fn_ = jit_tool_kernel(kHeader, "finegemm::tools::stream_ceiling_kernel<8u>",
                               "(const uint4*, uint64_t, uint4*, uint64_t, uint32_t*)");
  for (uint32_t n : kTensorN) {
    const std::string name = "finegemm::tools::tensor_ceiling_kernel<" + std::to_string(n) + "u>";
    CUfunction fn = jit_tool_kernel(
        kHeader, name.c_str(), "(const uint8_t*, uint32_t, const uint8_t*, uint32_t, uint32_t, uint64_t, uint32_t*)");
    jit::check_cu(jit::driver().cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   int(kTensorSmemBytes)),
                  "tensor_ceiling_kernel: shared memory size");
    tensor_fns_.push_back(fn);
  }
}

void CeilingKernels::launch_stream(int ctas_per_sm, const void* src, uint64_t read_units, void* dst,
                                   uint64_t write_units, uint32_t* sink, cudaStream_t s) const {
  if (ctas_per_sm < 1) throw std::invalid_argument("launch_stream: ctas_per_sm must be >= 1");
  void* args[] = {&src, &read_units, &dst, &write_units, &sink};
  launch(stream_fn_, unsigned(num_sms_ * ctas_per_sm), kStreamThreads, 0, s, args, "stream_ceiling_kernel");
}

void CeilingKernels::launch_tensor(uint32_t wgmma_n, const uint8_t* a, uint32_t a_rows, const uint8_t* b,
                                   uint32_t b_rows, uint32_t k, uint64_t batches, uint32_t* out,
                                   cudaStream_t s) const {
  const auto* at = std::find(std::begin(kTensorN), std::end(kTensorN), wgmma_n);
  if (at == std::end(kTensorN))
    throw std::invalid_argument("launch_tensor: no variant for wgmma N=" + std::to_string(wgmma_n));
  if (a_rows == 0 || b_rows == 0 || k == 0 || k % 16 != 0)
    throw std::invalid_argument("launch_tensor: needs rows of A and B and K a multiple of 16");
  void* args[] = {&a, &a_rows, &b, &b_rows, &k, &batches, &out};
  launch(tensor_fns_[size_t(at - std::begin(kTensorN))], unsigned(num_sms_), kTensorThreads, kTensorSmemBytes, s, args,
         "tensor_ceiling_kernel");
}

Ceiling CeilingKernels::measure(const GemmProblem& problem, cudaStream_t s, int iters, bool flush_l2,
                                L2Flusher* flusher, TimeSource source) const {
  Ceiling c;
  c.write_bytes = problem.min_write_bytes();
  c.read_bytes = problem.min_bytes() - c.write_bytes;
  // Whole 16-byte pieces; the scales' last few bytes may round away (under 16 bytes per call).
  const uint64_t read_units = uint64_t(c.read_bytes) / 16, write_units = uint64_t(c.write_bytes) / 16;
  DeviceBuffer src(std::max<uint64_t>(read_units, 1) * 16), dst(std::max<uint64_t>(write_units, 1) * 16), sink(16);
  src.fill_byte(0x3C, s);
  sink.fill_byte(0, s);
  for (int ctas : kStreamCtasPerSm) {
    const Timing t = time_kernel(
        [&](cudaStream_t st) {
          launch_stream(ctas, src.get(), read_units, dst.get(), write_units, sink.as<uint32_t>(), st);
        },
        s, iters, 3, flush_l2, flusher, source);
    if (c.stream_us == 0 || t.median_us < c.stream_us) {
      c.stream_us = t.median_us;
      c.stream_variant = std::to_string(ctas) + " CTAs/SM";
    }
  }

  const ProblemShape& shape = problem.shape();
  const uint32_t k = uint32_t(shape.k);
  const uint32_t a_rows = uint32_t(std::min<uint64_t>(problem.a.size() / k, UINT32_MAX));
  const uint32_t b_rows = uint32_t(std::min<uint64_t>(problem.b.size() / k, UINT32_MAX));
  DeviceBuffer out(tensor_out_words() * 4);
  for (uint32_t n : kTensorN) {
    const uint64_t batches = tensor_ceiling_batches(problem.flops(), n);
    const Timing t = time_kernel(
        [&](cudaStream_t st) {
          launch_tensor(n, problem.a.as<uint8_t>(), a_rows, problem.b.as<uint8_t>(), b_rows, k, batches,
                        out.as<uint32_t>(), st);
        },
        s, iters, 3, flush_l2, flusher, source);
    if (c.tensor_us == 0 || t.median_us < c.tensor_us) {
      c.tensor_us = t.median_us;
      c.tensor_variant = "m64n" + std::to_string(n) + "k32";
      // The last call's clock and tensor-pipe use, per CTA (its two warpgroups' batches over its loop cycles).
      const std::vector<uint32_t> words = out.download_as<uint32_t>(tensor_out_words());
      const size_t warpgroups = size_t(num_sms_) * 2;
      double mhz = 0, busy = 0;
      for (size_t cta = 0; cta < size_t(num_sms_); ++cta) {
        const double cycles = words[2 * (warpgroups + cta)], ns = words[2 * (warpgroups + cta) + 1];
        const double cta_batches = double(words[4 * cta]) + double(words[4 * cta + 2]);
        mhz += ns > 0 ? 1e3 * cycles / ns : 0;
        busy += cycles > 0 ? cta_batches * 2.0 * 64.0 * n * 128.0 / (cycles * kFp8FlopsPerSmClock) : 0;
      }
      c.tensor_clock_mhz = mhz / num_sms_;
      c.tensor_busy = busy / num_sms_;
    }
  }
  return c;
}

}  // namespace finegemm::tools
