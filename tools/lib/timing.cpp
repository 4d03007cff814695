#include "lib/timing.hpp"

#include "finegemm/finegemm.hpp"
#include "jit/launch.hpp"
#include "lib/jit_kernel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace finegemm::tools {
namespace {

using Clock = std::chrono::steady_clock;

// How long a stream gate holds its stream at most. Only reached when the host cannot finish enqueuing, i.e. when
// `enqueue` synchronizes (or the launch queue is full): the gate then lets the stream go so nothing deadlocks.
constexpr auto kGateTimeout = std::chrono::seconds(2);

// Shared between the host thread and the CUDA host-function callback. Two references: the callback drops one when
// it has run, the StreamGate object the other; the last one deletes it (so a callback that runs late, or never,
// because the context died, never touches freed memory).
struct GateState {
  std::atomic<bool> open{false};
  std::atomic<bool> timed_out{false};
  std::atomic<int> refs{2};
  void release_ref() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

void CUDART_CB gate_host_fn(void* user) {
  auto* g = static_cast<GateState*>(user);
  const auto deadline = Clock::now() + kGateTimeout;
  while (!g->open.load(std::memory_order_acquire)) {
    if (Clock::now() >= deadline) {
      g->timed_out.store(true, std::memory_order_release);
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  g->release_ref();
}

// Holds stream `s` (everything enqueued on it after construction waits) until open() or finish() is called.
// The destructor opens the gate and drains the stream if finish() was not reached (exception path).
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t s) : s_(s), g_(new GateState) {
    const cudaError_t err = cudaLaunchHostFunc(s, gate_host_fn, g_);
    if (err != cudaSuccess) {
      delete g_;  // the callback was not enqueued: nobody else holds a reference
      g_ = nullptr;
      detail::throw_cuda_error(err, "cudaLaunchHostFunc(s, gate_host_fn, gate)", __FILE__, __LINE__);
    }
  }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  void open() { g_->open.store(true, std::memory_order_release); }

  // Opens the gate and synchronizes the stream; throws (naming `context`) if the stream reports an error.
  void finish(const char* context) {
    open();
    finished_ = true;
    sync_and_check(s_, context);
  }
  // Valid after finish(): whether the gate gave up waiting for the host.
  bool timed_out() const { return g_->timed_out.load(std::memory_order_acquire); }

  ~StreamGate() {
    if (g_ == nullptr) return;
    open();
    if (!finished_) {
      if (cudaStreamSynchronize(s_) != cudaSuccess) (void)cudaGetLastError();
    }
    g_->release_ref();
  }

 private:
  cudaStream_t s_;
  GateState* g_;
  bool finished_ = false;
};

// A set of timing events, destroyed with the object (also when construction stops half way).
class EventSet {
 public:
  explicit EventSet(size_t n) {
    events_.reserve(n);
    try {
      for (size_t i = 0; i < n; ++i) {
        cudaEvent_t e = nullptr;
        FG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
        events_.push_back(e);
      }
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~EventSet() { destroy(); }
  EventSet(const EventSet&) = delete;
  EventSet& operator=(const EventSet&) = delete;
  cudaEvent_t operator[](size_t i) const { return events_[i]; }

 private:
  void destroy() noexcept {
    for (cudaEvent_t e : events_)
      if (cudaEventDestroy(e) != cudaSuccess) (void)cudaGetLastError();
    events_.clear();
  }
  std::vector<cudaEvent_t> events_;
};

void warn(const std::string& msg) { std::fprintf(stderr, "finegemm::tools: warning: %s\n", msg.c_str()); }

// How far a call's kernel time may exceed its event time before the records are suspect: the events bracket the
// kernels on the same stream, so only the timers' resolutions separate them.
constexpr double kKernelOverEventSlackUs = 1.0;

// Throws when the CUPTI records cannot give a kernel time for every call; warns on what looks wrong but still
// measures the calls (kernels from elsewhere, varying kernel counts, kernel time above event time).
// `flush_kernels`: kernels the L2 flushes launched in the loop (not counted, as expected).
void check_kernel_times(const CallKernelTimes& calls, const std::vector<double>& event_us, int flush_kernels) {
  const int n = static_cast<int>(calls.us.size());
  for (int i = 0; i < n; ++i) {
    if (calls.kernels[static_cast<size_t>(i)] == 0)
      throw std::runtime_error("time_kernel: CUPTI recorded no kernel for timed call " + std::to_string(i) + " of " +
                               std::to_string(n) + " (the enqueue function launched none, or its launches were not "
                               "traced); time non-kernel work with TimeSource::kEvents");
  }
  if (calls.incomplete > 0 || calls.conflicting > 0)
    throw std::runtime_error("time_kernel: " + std::to_string(calls.incomplete) + " kernel records without " +
                             "timestamps and " + std::to_string(calls.conflicting) + " attributed to two calls");
  if (calls.unassigned != flush_kernels)
    warn("time_kernel: " + std::to_string(calls.unassigned) + " kernels (first: " + calls.first_unassigned_name +
         ") ran during the timed loop but were not launched by a timed call (" + std::to_string(flush_kernels) +
         " expected, from the L2 flushes); not counted");
  const auto [lo, hi] = std::minmax_element(calls.kernels.begin(), calls.kernels.end());
  if (*lo != *hi)
    warn("time_kernel: the timed calls launched between " + std::to_string(*lo) + " and " + std::to_string(*hi) +
         " kernels each");
  int over = 0;
  for (int i = 0; i < n; ++i)
    if (calls.us[static_cast<size_t>(i)] > event_us[static_cast<size_t>(i)] + kKernelOverEventSlackUs) ++over;
  if (over > 0)
    warn("time_kernel: " + std::to_string(over) + " of " + std::to_string(n) + " calls have a kernel time above " +
         "their event time; the CUPTI records may be attributed to the wrong calls");
}

}  // namespace

// ---- L2Flusher ---------------------------------------------------------------------------------------------------

L2Flusher::L2Flusher(size_t bytes, FlushMode mode) : mode_(mode) {
  if (bytes == 0) throw std::invalid_argument("L2Flusher: the flush buffer must not be empty");
  if (mode_ == FlushMode::kMemset) {
    buf_ = DeviceBuffer(bytes);
    return;
  }
  // kRead: 256 MiB of zeros read by l2_read_flush_kernel (compiled here, not inside a timed loop).
  buf_ = DeviceBuffer(kReadFlushBytes);
  sink_ = DeviceBuffer(16);
  CudaStream stream;
  for (DeviceBuffer* b : {&buf_, &sink_}) b->fill_byte(0, stream);
  int device = 0, sms = 0;
  FG_CUDA_CHECK(cudaGetDevice(&device));
  FG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  read_grid_ = unsigned(sms) * 8;
  read_kernel_ = jit_tool_kernel("finegemm/tools/l2_flush.cuh", "finegemm::tools::l2_read_flush_kernel<4u>",
                                 "(const uint4*, uint64_t, uint32_t*)");
  flush(stream);
  FG_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void L2Flusher::flush(cudaStream_t s) {
  if (mode_ == FlushMode::kMemset) {
    value_ ^= 0x5A;
    FG_CUDA_CHECK(cudaMemsetAsync(buf_.get(), value_, buf_.size(), s));
    return;
  }
  const void* data = buf_.get();
  uint64_t count = buf_.size() / 16;
  void* sink = sink_.get();
  void* args[] = {&data, &count, &sink};
  jit::LaunchShape shape;
  shape.grid_x = read_grid_;
  shape.block_x = 256;
  jit::launch_kernel(static_cast<CUfunction>(read_kernel_), shape, reinterpret_cast<CUstream>(s), args,
                     "l2_read_flush_kernel");
}

// ---- time_kernel -------------------------------------------------------------------------------------------------

Timing time_kernel(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s, int iters, int warmup,
                   bool flush_l2, L2Flusher* flusher, TimeSource source) {
  if (!enqueue) throw std::invalid_argument("time_kernel: empty enqueue function");
  if (iters < 1) throw std::invalid_argument("time_kernel: iters must be >= 1, got " + std::to_string(iters));
  if (warmup < 0) throw std::invalid_argument("time_kernel: warmup must be >= 0, got " + std::to_string(warmup));

  // Declaration order matters for the exception path: the gate (declared last) is destroyed first, which releases
  // and drains the stream before the recording stops and the events and the flush buffer go away.
  L2Flusher* fl = nullptr;
  std::unique_ptr<L2Flusher> own_flusher;
  if (flush_l2) {
    if (flusher == nullptr) own_flusher = std::make_unique<L2Flusher>();
    fl = flusher != nullptr ? flusher : own_flusher.get();
  }
  EventSet start(static_cast<size_t>(iters)), stop(static_cast<size_t>(iters));

  for (int i = 0; i < warmup; ++i) enqueue(s);
  // Surface faults of the warm-up calls here rather than in the timed loop.
  sync_and_check(s, "time_kernel: after the warm-up calls");

  std::optional<KernelRecording> recording;
  if (source == TimeSource::kCuptiKernels && kernel_timer_available()) recording.emplace(iters);
  {
    StreamGate gate(s);
    for (int i = 0; i < iters; ++i) {
      if (fl != nullptr) fl->flush(s);
      FG_CUDA_CHECK(cudaEventRecord(start[i], s));
      if (recording) recording->begin_call(i);
      enqueue(s);
      if (recording) recording->end_call();
      FG_CUDA_CHECK(cudaEventRecord(stop[i], s));
    }
    gate.finish("time_kernel: after the timed calls");
    if (gate.timed_out())
      warn("time_kernel: the stream gate timed out (does the enqueue function synchronize?); the samples may "
           "include host launch gaps");
  }

  std::vector<double> event_us(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    float ms = 0.f;
    FG_CUDA_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
    event_us[static_cast<size_t>(i)] = static_cast<double>(ms) * 1000.0;
  }
  const SampleStats events = summarize_samples(event_us);
  Timing t;
  t.samples = iters;
  t.event_median_us = events.median;
  if (!recording) {
    t.source = TimeSource::kEvents;
    t.median_us = events.median, t.min_us = events.min, t.max_us = events.max, t.mean_us = events.mean;
    return t;
  }

  const CallKernelTimes calls = recording->finish();
  check_kernel_times(calls, event_us, fl != nullptr && fl->mode() == FlushMode::kRead ? iters : 0);
  const SampleStats kernels = summarize_samples(calls.us);
  t.source = TimeSource::kCuptiKernels;
  t.median_us = kernels.median, t.min_us = kernels.min, t.max_us = kernels.max, t.mean_us = kernels.mean;
  t.kernels_per_call = *std::max_element(calls.kernels.begin(), calls.kernels.end());
  return t;
}

// ---- host_overhead_us --------------------------------------------------------------------------------------------

HostOverhead host_overhead_us(const std::function<void(cudaStream_t)>& enqueue,
                              const std::function<void(cudaStream_t)>& baseline, cudaStream_t s, int calls) {
  if (!enqueue || !baseline) throw std::invalid_argument("host_overhead_us: empty enqueue function");
  if (calls < 1) throw std::invalid_argument("host_overhead_us: calls must be >= 1, got " + std::to_string(calls));
  constexpr int kWarm = 10;
  constexpr int kBatch = 64;  // calls of each queued behind one gate: well below the driver's launch-queue depth

  for (int i = 0; i < kWarm; ++i) {
    enqueue(s);
    baseline(s);
  }
  sync_and_check(s, "host_overhead_us: after the warm-up calls");

  const auto time_batch = [&](const std::function<void(cudaStream_t)>& f, int batch) {
    const auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) f(s);
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0);
  };
  std::chrono::nanoseconds call_total{0}, baseline_total{0};
  bool any_timeout = false;
  for (int done = 0, round = 0; done < calls; ++round) {
    const int batch = std::min(kBatch, calls - done);
    StreamGate gate(s);
    if (round % 2 == 0) {
      call_total += time_batch(enqueue, batch);
      baseline_total += time_batch(baseline, batch);
    } else {
      baseline_total += time_batch(baseline, batch);
      call_total += time_batch(enqueue, batch);
    }
    gate.finish("host_overhead_us: after a batch of calls");
    any_timeout = any_timeout || gate.timed_out();
    done += batch;
  }
  if (any_timeout)
    warn("host_overhead_us: the stream gate timed out (does the enqueue function synchronize?); the figures "
         "include waiting for the GPU");
  HostOverhead r;
  r.call_us = static_cast<double>(call_total.count()) / 1000.0 / calls;
  r.baseline_us = static_cast<double>(baseline_total.count()) / 1000.0 / calls;
  return r;
}

// ---- measure_copy_bandwidth_gbps ---------------------------------------------------------------------------------

double measure_copy_bandwidth_gbps(size_t bytes) {
  if (bytes == 0) throw std::invalid_argument("measure_copy_bandwidth_gbps: bytes must be > 0");
  DeviceBuffer src(bytes), dst(bytes);
  CudaStream stream;
  src.fill_byte(0x3C, stream);
  dst.fill_byte(0x00, stream);
  void* d = dst.get();
  const void* sp = src.get();
  const Timing t = time_kernel(
      [&](cudaStream_t st) { FG_CUDA_CHECK(cudaMemcpyAsync(d, sp, bytes, cudaMemcpyDeviceToDevice, st)); },
      stream, /*iters=*/20, /*warmup=*/3, /*flush_l2=*/false);
  if (!(t.median_us > 0)) {
    std::ostringstream os;
    os << "measure_copy_bandwidth_gbps: non-positive median time " << t.median_us << " us for " << bytes << " bytes";
    throw std::runtime_error(os.str());
  }
  return 2.0 * static_cast<double>(bytes) / (t.median_us * 1e-6) / 1e9;
}

}  // namespace finegemm::tools
