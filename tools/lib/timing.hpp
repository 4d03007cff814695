// Kernel timing for the finegemm bench and GPU tests.
//
// Event time: CUDA events recorded around each call, all enqueued back to back with no host synchronization inside
// the loop, the L2 flushed before each timed call *outside* its event pair, median of the samples. To keep host
// launch gaps out of the measurement, the timed loop is queued behind a "stream gate" (a host function that holds the
// stream until the host has finished enqueuing everything); the GPU then runs the whole queue back to back.
// Event time still includes the GPU-side gap between the start event and the kernel (about 3 us on an H100).
// Kernel time (TimeSource::kCuptiKernels): the same loop, with CUPTI activity records of the kernels each call
// launched (lib/kernel_timer.hpp); this is what the torch profiler measures.
// Host overhead is measured separately (host_overhead_us).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

#include "lib/device_buffer.hpp"
#include "lib/kernel_timer.hpp"

namespace finegemm::tools {

/// How L2Flusher evicts the L2.
enum class FlushMode {
  /// Writes the buffer (cudaMemsetAsync), as DeepGEMM's benchmark does: the L2 is then full of dirty lines, which the
  /// timed kernel writes back to memory as its own reads evict them.
  kMemset,
  /// Reads it (l2_read_flush_kernel, loads hinted evict-first): the L2 then holds clean lines only.
  kRead,
};

/// The read flush's buffer: 256 MiB, as the memset's default.
inline constexpr size_t kReadFlushBytes = 256ull << 20;

/// Evicts the L2 before a timed call, on the given stream, by writing or reading a large buffer. The buffer is
/// allocated once, in the constructor; the default (256 MiB) is 5x the 50 MB L2 of an H100. Move-only.
class L2Flusher {
 public:
  /// Throws std::invalid_argument if bytes == 0, std::runtime_error if the allocation fails. kRead always reads
  /// kReadFlushBytes (tools/device/l2_flush.cuh) and compiles its kernel here.
  explicit L2Flusher(size_t bytes = 256ull << 20, FlushMode mode = FlushMode::kMemset);
  /// Enqueues the flush on `s` (asynchronous). Throws std::runtime_error on a CUDA error.
  void flush(cudaStream_t s);
  size_t bytes() const { return buf_.size(); }
  FlushMode mode() const { return mode_; }

 private:
  FlushMode mode_;
  DeviceBuffer buf_;
  DeviceBuffer sink_;             // kRead: the read kernel's never-written output word
  void* read_kernel_ = nullptr;   // kRead: the CUfunction of l2_read_flush_kernel
  unsigned read_grid_ = 0;        // kRead: its blocks (8 per SM of the device it was built on)
  int value_ = 0;  // alternates between two byte values
};

/// What Timing's median/min/max/mean measure.
enum class TimeSource {
  kEvents,        // CUDA events around each call
  kCuptiKernels,  // sum of the GPU durations of the kernels each call launched (CUPTI activity records)
};

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0, mean_us = 0;  // per call, in `source` time
  int samples = 0;
  TimeSource source = TimeSource::kEvents;
  double event_median_us = 0;  // CUDA-event time of the same calls (equal to median_us when source is kEvents)
  int kernels_per_call = 0;    // kCuptiKernels: kernels launched per call (the largest count seen); else 0
};

/// Times `enqueue`, which must enqueue exactly one call of the thing to time on stream `s` and must not
/// synchronize (if it does, the measurement stays valid but the stream gate times out after 2 s, with a warning on
/// stderr, and host gaps may enter the event samples).
///  1. `warmup` untimed calls (JIT compilation, first-touch, cuBLASLt kernel loading happen here);
///  2. a stream gate, then for each of `iters` calls: [L2 flush if flush_l2] record(start_i) enqueue(s) record(stop_i)
///     (with kCuptiKernels, enqueue(s) runs between KernelRecording::begin_call(i) and end_call());
///  3. the gate is released, one cudaEventSynchronize on the last stop event, per-call elapsed times are read.
/// `flusher`: used when flush_l2 is true; when it is null, a 256 MiB flusher is allocated for this call.
/// `source`: kCuptiKernels also records the kernels of each timed call with CUPTI and reports their summed GPU
/// durations (event time in event_median_us); when CUPTI is not available (kernel_timer_available() says why) it
/// falls back to events, and the result's `source` says so. Only for work made of kernels (not copies or memsets).
/// Requires iters >= 1 and warmup >= 0 (else std::invalid_argument). Throws std::runtime_error on CUDA errors
/// (including an asynchronous fault of the timed work, reported at the final synchronize), on CUPTI errors and when
/// CUPTI saw no kernel for a call, and propagates anything `enqueue` throws, after draining the stream.
Timing time_kernel(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s, int iters = 30, int warmup = 3,
                   bool flush_l2 = true, L2Flusher* flusher = nullptr, TimeSource source = TimeSource::kEvents);

/// Host cost of a call beside a baseline launch (the driver's launch of an empty kernel, say), in microseconds per
/// call: mean wall time (std::chrono::steady_clock) over `calls` warm calls of each. 10 untimed warm-up calls of each
/// come first. The stream is held by a gate while batches of 64 calls and 64 baseline calls are enqueued, their order
/// alternating from batch to batch, so the figures are pure host cost (a full launch queue never blocks the host) and
/// the host's drifts reach both alike; only the enqueue calls are inside the timed regions. Throws like time_kernel.
struct HostOverhead {
  double call_us = 0.0;
  double baseline_us = 0.0;
};
HostOverhead host_overhead_us(const std::function<void(cudaStream_t)>& enqueue,
                              const std::function<void(cudaStream_t)>& baseline, cudaStream_t s, int calls = 10000);

/// Device-to-device bandwidth in GB/s (1e9 bytes per second): cudaMemcpyAsync of `bytes` between two fresh
/// buffers, (bytes read + bytes written) / median time of 20 copies (3 warm-up), no L2 flush (the copy is far larger
/// than L2). Allocates 2 x bytes of device memory for the duration of the call. About 3000 GB/s on an H100 SXM.
double measure_copy_bandwidth_gbps(size_t bytes = 1ull << 30);

}  // namespace finegemm::tools
