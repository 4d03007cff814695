#include "lib/kernel_timer.hpp"

#include <stdexcept>
#include <string>

#ifdef FINEGEMM_HAVE_CUPTI
#include <cupti_activity.h>
#include <cupti_result.h>
#include <cupti_version.h>
#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>
#endif

// Extra libcupti paths to try, ':'-separated (CMake passes those it found next to the toolkit and the headers).
#ifndef FINEGEMM_CUPTI_LIB_HINTS
#define FINEGEMM_CUPTI_LIB_HINTS ""
#endif

namespace finegemm::tools {

#ifdef FINEGEMM_HAVE_CUPTI
namespace {

constexpr size_t kBufferBytes = 8u << 20;  // per CUPTI activity buffer; a timed loop of 30 calls fills a few KB
constexpr CUpti_ExternalCorrelationKind kExternalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
// RUNTIME and DRIVER: the external correlation records precede API records, so both must be on (finegemm launches
// through the driver API, cuBLASLt through the runtime).
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
                                         CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                         CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL};

// The fields read from a kernel record lie in the prefix shared by every kernel record version since 4, so the
// record of an older or newer libcupti than the headers reads the same.
using KernelActivity = CUpti_ActivityKernel10;
static_assert(offsetof(KernelActivity, start) == offsetof(CUpti_ActivityKernel4, start));
static_assert(offsetof(KernelActivity, end) == offsetof(CUpti_ActivityKernel4, end));
static_assert(offsetof(KernelActivity, correlationId) == offsetof(CUpti_ActivityKernel4, correlationId));
static_assert(offsetof(KernelActivity, name) == offsetof(CUpti_ActivityKernel4, name));

// The CUPTI functions the timer uses, resolved with dlsym (types from the headers).
struct CuptiApi {
  decltype(&cuptiGetVersion) get_version = nullptr;
  decltype(&cuptiGetResultString) get_result_string = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) num_dropped = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push_external = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop_external = nullptr;
};

// Process-wide CUPTI state: the loaded library and the records its buffer callbacks deliver. One instance because
// CUPTI's buffer callbacks carry no user pointer and CUPTI itself is per process.
class CuptiState {
 public:
  static CuptiState& instance() {
    static CuptiState* state = new CuptiState;  // never destroyed: CUPTI may call back during exit
    return *state;
  }

  // Loads and probes CUPTI once; later calls return the same answer.
  bool available(std::string* why) {
    std::call_once(load_once_, [this] { load(); });
    if (!ok_ && why != nullptr) *why = error_;
    return ok_;
  }
  const std::string& description() const { return description_; }
  const CuptiApi& api() const { return api_; }

  std::string result_string(CUptiResult r) const {
    const char* s = nullptr;
    if (api_.get_result_string != nullptr && api_.get_result_string(r, &s) == CUPTI_SUCCESS && s != nullptr) return s;
    return "CUPTI error " + std::to_string(int(r));
  }
  // Throws std::runtime_error naming `what` when `r` is not CUPTI_SUCCESS.
  void check(CUptiResult r, const char* what) const {
    if (r != CUPTI_SUCCESS) throw std::runtime_error(std::string("CUPTI: ") + what + " failed: " + result_string(r));
  }

  // Enables every kind of kKinds; on a failure disables those already enabled and returns a message naming the kind
  // and the error (empty on success).
  std::string enable_all() {
    for (size_t i = 0; i < std::size(kKinds); ++i) {
      const CUptiResult r = api_.enable(kKinds[i]);
      if (r != CUPTI_SUCCESS) {
        for (size_t j = 0; j < i; ++j) (void)api_.disable(kKinds[j]);
        return "cuptiActivityEnable(activity kind " + std::to_string(int(kKinds[i])) + ") failed: " + result_string(r);
      }
    }
    return std::string();
  }
  void disable_all() {
    for (CUpti_ActivityKind k : kKinds) (void)api_.disable(k);
  }

  // The one-recording-at-a-time rule.
  bool try_begin_recording() { return !recording_.exchange(true); }
  void end_recording() { recording_.store(false); }
  uint64_t next_recording() { return next_recording_.fetch_add(1); }

  void clear_records() {
    std::lock_guard<std::mutex> lock(records_mu_);
    kernels_.clear();
    correlations_.clear();
    parse_errors_ = 0;
  }
  void take_records(std::vector<KernelRecord>* kernels, std::vector<CorrelationRecord>* correlations,
                    int* parse_errors) {
    std::lock_guard<std::mutex> lock(records_mu_);
    *kernels = std::move(kernels_);
    *correlations = std::move(correlations_);
    *parse_errors = parse_errors_;
    kernels_.clear();
    correlations_.clear();
    parse_errors_ = 0;
  }

  // Called from CUPTI's buffer-completed callback (any thread).
  void parse_buffer(uint8_t* buffer, size_t valid_bytes) {
    std::lock_guard<std::mutex> lock(records_mu_);
    CUpti_Activity* record = nullptr;
    for (;;) {
      const CUptiResult r = api_.next_record(buffer, valid_bytes, &record);
      if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // end of the buffer
      if (r != CUPTI_SUCCESS) {
        ++parse_errors_;
        break;
      }
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        const auto* k = reinterpret_cast<const KernelActivity*>(record);
        kernels_.push_back({k->correlationId, k->start, k->end, k->name != nullptr ? k->name : "?"});
      } else if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
        const auto* c = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (c->externalKind == kExternalKind) correlations_.push_back({c->correlationId, c->externalId});
      }
    }
  }

 private:
  CuptiState() = default;
  void load();

  std::once_flag load_once_;
  bool ok_ = false;
  std::string error_, description_;
  void* handle_ = nullptr;
  CuptiApi api_;
  std::atomic<bool> recording_{false};
  std::atomic<uint64_t> next_recording_{1};
  std::mutex records_mu_;
  std::vector<KernelRecord> kernels_;
  std::vector<CorrelationRecord> correlations_;
  int parse_errors_ = 0;
};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_num_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;  // no buffer: CUPTI drops the records and counts them
  *max_num_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  if (buffer == nullptr) return;
  if (valid_bytes > 0) CuptiState::instance().parse_buffer(buffer, valid_bytes);
  std::free(buffer);
}

std::vector<std::string> split_paths(const std::string& s) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= s.size()) {
    const size_t end = s.find(':', begin);
    const std::string item = s.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (!item.empty()) out.push_back(item);
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return out;
}

void CuptiState::load() {
  const char* env = std::getenv("FINEGEMM_CUPTI_LIB");
  const std::string env_lib = env != nullptr ? env : "";
  if (env_lib == "none") {
    error_ = "FINEGEMM_CUPTI_LIB=none";
    return;
  }
  // NOTE: a profiler (nsys) injects its own libcupti; enabling activity records or registering buffer callbacks
  // here would take its records away. Only use CUPTI when this process has not loaded it yet.
  for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) {
      dlclose(h);
      error_ = std::string(name) + " is already loaded in this process (by a profiler such as nsys?)";
      return;
    }
  }
  std::vector<std::string> candidates;
  if (!env_lib.empty()) {
    candidates.push_back(env_lib);  // explicit: no other candidate
  } else {
    candidates = {"libcupti.so.13", "libcupti.so"};
    for (const std::string& p : split_paths(FINEGEMM_CUPTI_LIB_HINTS)) candidates.push_back(p);
  }
  std::string tried;
  std::string loaded;
  for (const std::string& c : candidates) {
    handle_ = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ != nullptr) {
      loaded = c;
      break;
    }
    const char* e = dlerror();
    tried += (tried.empty() ? "" : "; ") + (e != nullptr ? std::string(e) : c);
  }
  if (handle_ == nullptr) {
    error_ = "cannot load libcupti (" + tried + "); set FINEGEMM_CUPTI_LIB to its path";
    return;
  }
  bool missing = false;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle_, name));
    if (fn == nullptr) {
      if (!missing) error_ = loaded + " has no symbol " + name;
      missing = true;
    }
  };
  resolve(api_.get_version, "cuptiGetVersion");
  resolve(api_.get_result_string, "cuptiGetResultString");
  resolve(api_.register_callbacks, "cuptiActivityRegisterCallbacks");
  resolve(api_.enable, "cuptiActivityEnable");
  resolve(api_.disable, "cuptiActivityDisable");
  resolve(api_.flush_all, "cuptiActivityFlushAll");
  resolve(api_.next_record, "cuptiActivityGetNextRecord");
  resolve(api_.num_dropped, "cuptiActivityGetNumDroppedRecords");
  resolve(api_.push_external, "cuptiActivityPushExternalCorrelationId");
  resolve(api_.pop_external, "cuptiActivityPopExternalCorrelationId");
  if (missing) return;  // the library stays loaded: unloading CUPTI is not supported
  uint32_t version = 0;
  if (const CUptiResult r = api_.get_version(&version); r != CUPTI_SUCCESS) {
    error_ = loaded + ": cuptiGetVersion failed: " + result_string(r);
    return;
  }
  if (const CUptiResult r = api_.register_callbacks(buffer_requested, buffer_completed); r != CUPTI_SUCCESS) {
    error_ = loaded + ": cuptiActivityRegisterCallbacks failed: " + result_string(r);
    return;
  }
  // Probe: a kind that cannot be enabled here (another CUPTI client, an unsupported driver) fails now rather than
  // in the middle of a benchmark.
  if (const std::string e = enable_all(); !e.empty()) {
    error_ = loaded + ": " + e;
    return;
  }
  disable_all();
  (void)api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  clear_records();
  description_ = loaded + ", CUPTI API version " + std::to_string(version) + " (built with the headers of " +
                 std::to_string(CUPTI_API_VERSION) + ")";
  ok_ = true;
}

}  // namespace

bool kernel_timer_available(std::string* why) { return CuptiState::instance().available(why); }

std::string kernel_timer_description() {
  CuptiState& st = CuptiState::instance();
  return st.available(nullptr) ? st.description() : std::string();
}

KernelRecording::KernelRecording(int num_calls) : num_calls_(num_calls) {
  if (num_calls < 1) throw std::invalid_argument("KernelRecording: num_calls must be >= 1");
  CuptiState& st = CuptiState::instance();
  std::string why;
  if (!st.available(&why)) throw std::runtime_error("KernelRecording: CUPTI is not available: " + why);
  if (!st.try_begin_recording()) throw std::logic_error("KernelRecording: another recording is active");
  // External ids of this recording: recording << 32 | call, never reused in the process.
  first_id_ = st.next_recording() << 32;
  st.clear_records();
  if (const std::string e = st.enable_all(); !e.empty()) {
    st.end_recording();
    throw std::runtime_error("KernelRecording: " + e);
  }
}

KernelRecording::~KernelRecording() {
  if (finished_) return;
  CuptiState& st = CuptiState::instance();
  if (in_call_) (void)st.api().pop_external(kExternalKind, nullptr);
  st.disable_all();
  (void)st.api().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  st.clear_records();
  st.end_recording();
}

void KernelRecording::begin_call(int call_idx) {
  if (in_call_) throw std::logic_error("KernelRecording: begin_call inside a call");
  if (call_idx < 0 || call_idx >= num_calls_)
    throw std::out_of_range("KernelRecording: call " + std::to_string(call_idx) + " of " + std::to_string(num_calls_));
  CuptiState& st = CuptiState::instance();
  st.check(st.api().push_external(kExternalKind, first_id_ + uint64_t(call_idx)),
           "cuptiActivityPushExternalCorrelationId");
  in_call_ = true;
}

void KernelRecording::end_call() {
  if (!in_call_) throw std::logic_error("KernelRecording: end_call outside a call");
  in_call_ = false;
  CuptiState& st = CuptiState::instance();
  st.check(st.api().pop_external(kExternalKind, nullptr), "cuptiActivityPopExternalCorrelationId");
}

CallKernelTimes KernelRecording::finish() {
  if (finished_) throw std::logic_error("KernelRecording: finish called twice");
  if (in_call_) throw std::logic_error("KernelRecording: finish inside a call");
  CuptiState& st = CuptiState::instance();
  finished_ = true;
  // The caller has synchronized the timed work, so every kernel record is complete; a forced flush also hands over
  // the buffers CUPTI has not filled.
  const CUptiResult flushed = st.api().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  st.disable_all();
  (void)st.api().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  size_t dropped = 0;
  const CUptiResult dropped_result = st.api().num_dropped(nullptr, 0, &dropped);
  std::vector<KernelRecord> kernels;
  std::vector<CorrelationRecord> correlations;
  int parse_errors = 0;
  st.take_records(&kernels, &correlations, &parse_errors);
  st.end_recording();
  st.check(flushed, "cuptiActivityFlushAll");
  st.check(dropped_result, "cuptiActivityGetNumDroppedRecords");
  if (dropped > 0 || parse_errors > 0)
    throw std::runtime_error("KernelRecording: CUPTI dropped " + std::to_string(dropped) + " activity records (" +
                             std::to_string(parse_errors) + " unreadable buffers): the kernel times are incomplete");
  return assign_kernels_to_calls(kernels, correlations, first_id_, num_calls_);
}

#else  // built without the CUPTI headers: events only

bool kernel_timer_available(std::string* why) {
  if (why != nullptr)
    *why = "finegemm was built without the CUPTI headers (scripts/fetch-cupti-headers.sh, or configure with "
           "-DFINEGEMM_CUPTI_INCLUDE_DIR=<dir with cupti_activity.h>)";
  return false;
}

std::string kernel_timer_description() { return std::string(); }

KernelRecording::KernelRecording(int num_calls) : num_calls_(num_calls) {
  std::string why;
  kernel_timer_available(&why);
  throw std::runtime_error("KernelRecording: CUPTI is not available: " + why);
}
KernelRecording::~KernelRecording() = default;
void KernelRecording::begin_call(int) { throw std::logic_error("KernelRecording: built without CUPTI"); }
void KernelRecording::end_call() { throw std::logic_error("KernelRecording: built without CUPTI"); }
CallKernelTimes KernelRecording::finish() { throw std::logic_error("KernelRecording: built without CUPTI"); }

#endif

}  // namespace finegemm::tools
