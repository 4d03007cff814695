// Kernel time from CUPTI activity records, as the torch profiler measures it (it reads the same records): the GPU
// start/end timestamps of each kernel, without the launch gap that CUDA events around a call add.
//
// Which kernels belong to which timed call: external correlation ids. Before enqueuing call i the host pushes the id
// (recording << 32 | i) with cuptiActivityPushExternalCorrelationId and pops it right after; CUPTI then precedes the
// record of every runtime and driver API call made inside, on that thread, with an EXTERNAL_CORRELATION record
// (external id -> CUPTI correlation id), and each kernel record carries the correlation id of the API call that
// launched it. So a kernel counts for call i exactly when it was launched from inside call i's enqueue function, by
// construction rather than by timestamps: two kernels of one call (cuBLASLt's split-K reduce) both count, as they do
// in the profiler; the L2 flush (a memset enqueued outside the pushed region, and not a kernel record) never counts;
// kernels launched by anything else (another thread) carry no id of ours and are reported as unassigned. The kernel
// time of a call is the sum of (end - start) of its kernels; the figure reported is the median over the calls.
//
// CUPTI is opened with dlopen at run time (FINEGEMM_CUPTI_LIB, then libcupti.so.13, libcupti.so, then the paths
// CMake found next to the toolkit and the headers); its headers are needed only to build (types, enums, records).
// When it cannot be loaded, or another tool (nsys) already owns CUPTI in this process, kernel_timer_available()
// says why and the caller falls back to CUDA events. FINEGEMM_CUPTI_LIB=none turns the CUPTI timer off.
//
// The record bookkeeping (assign_kernels_to_calls, summarize_samples) is plain C++ so the CPU tests can check it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace finegemm::tools {

// ---- Record bookkeeping (no CUDA, no CUPTI) ----------------------------------------------------------------------

/// A CONCURRENT_KERNEL activity record, reduced to what the timer uses. Timestamps in ns (CUPTI's clock).
struct KernelRecord {
  uint32_t correlation_id = 0;
  uint64_t start_ns = 0, end_ns = 0;
  std::string name;
};

/// An EXTERNAL_CORRELATION activity record (of the kind the timer pushes): the API call `correlation_id` was made
/// while `external_id` was pushed.
struct CorrelationRecord {
  uint32_t correlation_id = 0;
  uint64_t external_id = 0;
};

/// Kernel time per timed call. Call i is the external id first_external_id + i.
struct CallKernelTimes {
  std::vector<double> us;                 // per call: sum of (end - start) of its kernels, in microseconds
  std::vector<int> kernels;               // per call: how many kernels
  int unassigned = 0;                     // kernel records launched outside every call (not counted)
  std::string first_unassigned_name;      // the first of those, for the warning
  int incomplete = 0;                     // kernel records of a call without valid timestamps (start 0 or end < start)
  int conflicting = 0;                    // correlation ids mapped to two different calls (kernels not counted)
};

/// Groups kernel records by timed call through the external correlation records. Correlation records whose external
/// id lies outside [first_external_id, first_external_id + num_calls) are ignored (other recordings, other tools).
/// Requires num_calls >= 0.
inline CallKernelTimes assign_kernels_to_calls(const std::vector<KernelRecord>& kernels,
                                               const std::vector<CorrelationRecord>& correlations,
                                               uint64_t first_external_id, int num_calls) {
  if (num_calls < 0) throw std::invalid_argument("assign_kernels_to_calls: num_calls must be >= 0");
  constexpr int kConflict = -1;
  std::unordered_map<uint32_t, int> call_of;  // correlation id -> call index, or kConflict
  for (const CorrelationRecord& c : correlations) {
    if (c.external_id < first_external_id || c.external_id - first_external_id >= uint64_t(num_calls)) continue;
    const int call = int(c.external_id - first_external_id);
    // NOTE: a runtime call and the driver calls it makes may each get a record with the same pair; only two
    // different calls for one correlation id are a conflict.
    const auto [it, inserted] = call_of.emplace(c.correlation_id, call);
    if (!inserted && it->second != call) it->second = kConflict;
  }
  CallKernelTimes out;
  out.us.assign(size_t(num_calls), 0.0);
  out.kernels.assign(size_t(num_calls), 0);
  for (const KernelRecord& k : kernels) {
    const auto it = call_of.find(k.correlation_id);
    if (it == call_of.end()) {
      if (out.unassigned++ == 0) out.first_unassigned_name = k.name;
      continue;
    }
    if (it->second == kConflict) {
      ++out.conflicting;
      continue;
    }
    if (k.start_ns == 0 || k.end_ns < k.start_ns) {
      ++out.incomplete;
      continue;
    }
    out.us[size_t(it->second)] += double(k.end_ns - k.start_ns) / 1000.0;
    ++out.kernels[size_t(it->second)];
  }
  return out;
}

struct SampleStats {
  double median = 0, min = 0, max = 0, mean = 0;
};

/// Median (mean of the two middle values for an even count), min, max and mean. Throws std::invalid_argument when
/// `samples` is empty.
inline SampleStats summarize_samples(std::vector<double> samples) {
  if (samples.empty()) throw std::invalid_argument("summarize_samples: no samples");
  std::sort(samples.begin(), samples.end());
  SampleStats s;
  const size_t n = samples.size();
  s.min = samples.front();
  s.max = samples.back();
  s.median = (n % 2 == 1) ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  double sum = 0;
  for (double v : samples) sum += v;
  s.mean = sum / double(n);
  return s;
}

// ---- The CUPTI side (kernel_timer.cpp) ----------------------------------------------------------------------------

/// Whether CUPTI kernel timing can be used in this process. The first call loads CUPTI and tries to enable and
/// disable the activity kinds once; the answer is kept. On false, `why` (if given) says what failed.
bool kernel_timer_available(std::string* why = nullptr);

/// The loaded CUPTI, e.g. "libcupti.so.13, CUPTI API version 130001"; empty when it is not available.
std::string kernel_timer_description();

/// One recording of CUPTI kernel records around `num_calls` timed calls. One at a time per process (a second one
/// throws std::logic_error). Usage: begin_call(i), enqueue call i, end_call(), for i = 0..num_calls-1; synchronize
/// the work; finish(). The destructor stops the recording if finish() was not reached (exception path).
class KernelRecording {
 public:
  /// Throws std::runtime_error if CUPTI is not available or the activity kinds cannot be enabled.
  explicit KernelRecording(int num_calls);
  ~KernelRecording();
  KernelRecording(const KernelRecording&) = delete;
  KernelRecording& operator=(const KernelRecording&) = delete;

  /// Marks the calling thread as inside call `call_idx` (pushes its external correlation id).
  void begin_call(int call_idx);
  /// Leaves the current call (pops the id). Calls must not nest.
  void end_call();
  /// After the timed work has completed on the GPU: flushes the records, stops the recording and returns the kernel
  /// time per call. Throws std::runtime_error if CUPTI dropped records.
  CallKernelTimes finish();

 private:
  int num_calls_;
  uint64_t first_id_ = 0;
  bool in_call_ = false;
  bool finished_ = false;
};

}  // namespace finegemm::tools
