// A GEMM call's measured floor (`finegemm bench --ceiling`): the call's bytes moved alone and its tensor work issued
// alone, each by a kernel that does nothing else (tools/device/ceiling.cuh), timed like the GEMMs. A GEMM
// must read A, B and the scales and write D at least once, and must issue the same wgmmas, with loads, promotion and
// stores on top (more power, so a clock no higher). So the slower of the two parts is an estimate of the fastest a
// GEMM call can be on that card under that flush: the tensor part is a bound (its pipe runs ~100% busy at its own
// clock, which the kernel measures), the stream part an estimate (a plain grid-wide streaming read and write, the
// fastest of three occupancies; a GEMM's own access pattern may do a few percent better). It leaves out the wave
// quantization of tiles, the first loads' latency before the first wgmma and the last tile's store after the last.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lib/gemm_problem.hpp"
#include "lib/timing.hpp"

namespace finegemm::tools {

/// One shape's floor, in microseconds of kernel time (medians).
struct Ceiling {
  double read_bytes = 0, write_bytes = 0;  // what the stream part moved (GemmProblem::min_bytes, split)
  double stream_us = 0;                    // the fastest stream variant
  std::string stream_variant;              // e.g. "4 CTAs/SM"
  double tensor_us = 0;                    // the fastest tensor variant
  std::string tensor_variant;              // e.g. "m64n256k32"
  double tensor_clock_mhz = 0;             // its SM clock in its last call (mean over CTAs: cycles / time)
  double tensor_busy = 0;                  // its tensor work per SM cycle there, over kFp8FlopsPerSmClock (mean)
  double us() const { return stream_us > tensor_us ? stream_us : tensor_us; }
  const char* bound() const { return stream_us >= tensor_us ? "bytes" : "tensor"; }
};

/// Dense fp8 wgmma FLOPs per SM per clock on sm_90: 1979 TFLOPS / 132 SMs / 1830 MHz (the H100 SXM datasheet's peak
/// and boost clock).
inline constexpr double kFp8FlopsPerSmClock = 8192;

/// Batches of four m64nNk32 wgmmas (a 64 x N x 128 product) that cover `flops` (2 M N K), rounded up.
uint64_t tensor_ceiling_batches(double flops, uint32_t wgmma_n);

/// The floor kernels, compiled (or loaded from the disk cache) on construction for the current device.
class CeilingKernels {
 public:
  /// Stream variants: CTAs per SM; tensor variants: wgmma N.
  static constexpr int kStreamCtasPerSm[] = {2, 4, 8};
  static constexpr uint32_t kTensorN[] = {256, 128};

  CeilingKernels();

  /// Enqueues stream_ceiling_kernel: `read_units` 16-byte pieces of `src` read, `write_units` of `dst` written,
  /// over num_sms x ctas_per_sm CTAs; the XOR of what was read goes into sink[0..3] (XORed in: zero it first).
  void launch_stream(int ctas_per_sm, const void* src, uint64_t read_units, void* dst, uint64_t write_units,
                     uint32_t* sink, cudaStream_t s) const;
  /// Enqueues tensor_ceiling_kernel<wgmma_n> over num_sms CTAs: `batches` batches of four wgmmas on K block 0 of
  /// the first rows of a ([a_rows, k]) and b ([b_rows, k]); out: tensor_out_words() words, 2 per warpgroup
  /// (2 x num_sms of them) then 2 per CTA (tools/device/ceiling.cuh).
  void launch_tensor(uint32_t wgmma_n, const uint8_t* a, uint32_t a_rows, const uint8_t* b, uint32_t b_rows,
                     uint32_t k, uint64_t batches, uint32_t* out, cudaStream_t s) const;

  /// Times every variant on `problem`'s byte counts and FLOPs (the tensor part reads its operands from problem.a
  /// and problem.b) with time_kernel's method and returns the fastest of each part.
  Ceiling measure(const GemmProblem& problem, cudaStream_t s, int iters, bool flush_l2, L2Flusher* flusher,
                  TimeSource source) const;

  int num_sms() const { return num_sms_; }
  size_t tensor_out_words() const { return size_t(num_sms_) * 2 * 2 + size_t(num_sms_) * 2; }

 private:
  int num_sms_ = 0;
  void* stream_fn_ = nullptr;      // CUfunction of stream_ceiling_kernel
  std::vector<void*> tensor_fns_;  // CUfunction per kTensorN entry
};

}  // namespace finegemm::tools
