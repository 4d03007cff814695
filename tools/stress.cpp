#include "stress.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "lib/cli_args.hpp"
#include "lib/device_buffer.hpp"
#include "lib/gemm_problem.hpp"

namespace finegemm::tools {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: finegemm stress [--threads 8] [--seconds 60] [--devices 0 | 0,1 | all] [--device-order alternate|random]\n"
    "                       [--seed 1] [--kinds normal,contiguous,masked,psum,wgrad,kgrouped] [--max-m 1024]\n"
    "                       [--fresh-percent 10] [--max-calls 0] [--hang-seconds 120]\n"
    "  Each thread issues random GEMMs on its own stream (one per device it uses), the device chosen per call among\n"
    "  --devices (cudaSetDevice on that thread), and checks every output (poisoned first) against the GPU reference.\n"
    "  --fresh-percent of the calls draw a new shape (a kernel compiled for the first time, most likely; M awkward or\n"
    "  uniform up to --max-m); the others take one of 28 fixed shapes, with fresh data. wgrad calls (fp32\n"
    "  D = C + A x B^T, 1x128 scales on both operands) take C as D or as a buffer of their own; kgrouped calls\n"
    "  (per expert fp32 D[g] = C[g] + A_g x B_g^T, M a multiple of 8 above 64, some experts without tokens) add\n"
    "  into D or overwrite it, each with a workspace of its own. --max-calls bounds the calls per thread (0: until\n"
    "  --seconds). A call running longer than --hang-seconds is reported as a hang and ends the process (exit 3).\n"
    "  Last line: stress: calls=N failures=F compiles=C ... (exit 1 when F > 0).\n"
    "  Needs a Hopper GPU. Accepted: --threads 1..256; --seconds and --hang-seconds in (0, 86400]; --devices 'all'\n"
    "  or distinct ordinals 0..1023; --seed and --max-calls >= 0; --max-m 1..65536; --fresh-percent 0..100.\n";

// ---- Shapes ------------------------------------------------------------------------------------------------------
// N and K follow the documented rules (N % 8 == 0, K % 16 == 0; kgrouped: M % 8 == 0 and M > 64, K the tokens
// expected per expert, a multiple of 128); M is any value >= 1 otherwise. Most calls take one of these
// shapes (with fresh data, SA layout and masked_m), so their kernels are warm after the first calls; the others draw
// a new shape (--fresh-percent), whose kernel is most likely compiled while other threads launch.
struct WarmShape {
  const char* kind;  // a shape kind name (ProblemShape::kind_name)
  int groups;
  int64_t m, n, k;
};
constexpr WarmShape kWarmShapes[] = {
    {"normal", 1, 1, 2112, 7168},        {"normal", 1, 7, 576, 256},         {"normal", 1, 63, 4096, 512},
    {"normal", 1, 128, 7168, 2048},      {"normal", 1, 129, 1536, 7168},     {"normal", 1, 255, 8, 16},
    {"normal", 1, 511, 7168, 576},       {"normal", 1, 4096, 136, 272},      {"contiguous", 4, 64, 2048, 512},
    {"contiguous", 8, 17, 576, 256},     {"contiguous", 2, 200, 4096, 1536}, {"contiguous", 1, 1, 136, 16},
    {"masked", 8, 32, 4096, 512},        {"masked", 4, 1, 576, 7168},        {"masked", 2, 129, 2112, 576},
    {"masked", 6, 65, 256, 272},         {"psum", 4, 64, 2048, 512},         {"psum", 8, 17, 576, 256},
    {"psum", 2, 200, 4096, 1536},        {"psum", 1, 1, 136, 16},            {"wgrad", 1, 1, 8, 16},
    {"wgrad", 1, 65, 136, 576},          {"wgrad", 1, 576, 4096, 512},       {"wgrad", 1, 2112, 1024, 1536},
    {"kgrouped", 1, 72, 8, 128},          {"kgrouped", 4, 256, 512, 256},     {"kgrouped", 8, 136, 576, 384},
    {"kgrouped", 2, 512, 2048, 1024},
};
constexpr int64_t kAwkwardM[] = {1, 2, 3, 7, 17, 31, 63, 64, 65, 127, 128, 129, 255, 257, 511, 1000};
constexpr int64_t kMaxFreshDim = 8192;
// kgrouped: the heuristic keeps the 128-row tiles the K-grouped kernels need for M > 64 only, and finds no
// configuration below.
constexpr int64_t kMinKGroupedM = 72;
constexpr int kMaxStressGroups = 8;
// Bounds that keep one call (host data, the fp64 GPU reference, the host check) in the milliseconds.
constexpr int64_t kMaxWeightBytes = int64_t(64) << 20;      // G * N * K fp8 bytes of B
constexpr int64_t kMaxOutputElements = int64_t(4) << 20;    // rows * N (the reference holds two fp64 copies)
constexpr int64_t kMaxReferenceMacs = int64_t(1) << 34;     // rows * N * K multiply-adds in fp64
constexpr int64_t kContiguousAlignment = 128;
constexpr int kMaxLoggedFailures = 20;
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(100);
constexpr int64_t kProgressPeriodMs = 10000;

struct StressOptions {
  int threads = 8;
  double seconds = 60.0;
  bool all_devices = false;
  std::vector<int> devices{0};
  bool random_device = false;
  uint64_t seed = 1;
  std::vector<std::string> kinds = shape_kind_names();
  int64_t max_m = 1024;
  int fresh_percent = 10;
  int64_t max_calls = 0;
  double hang_seconds = 120.0;
  bool help = false;
};

constexpr double kMaxSeconds = 86400;

/// Throws UsageError (one line) on a bad command line.
StressOptions parse_options(int argc, const char* const* argv) {
  const ParsedArgs args = OptionSet("stress")
                              .integer("threads", 1, 256)
                              .number("seconds", 0, kMaxSeconds, true)
                              .integer_list("devices", 0, 1023, "all")
                              .word("device-order", {"alternate", "random"})
                              .integer("seed", 0, INT64_MAX)
                              .word_list("kinds", shape_kind_names())
                              .integer("max-m", 1, 65536)
                              .integer("fresh-percent", 0, 100)
                              .integer("max-calls", 0, INT64_MAX)
                              .number("hang-seconds", 0, kMaxSeconds, true)
                              .parse(argc, argv);
  StressOptions o;
  o.help = args.help();
  if (o.help) return o;
  o.threads = int(args.integer("threads", o.threads));
  o.seconds = args.number("seconds", o.seconds);
  if (args.has("devices")) {
    const std::vector<int64_t> ordinals = args.integers("devices");
    o.all_devices = ordinals.empty();  // the word 'all'
    o.devices.assign(ordinals.begin(), ordinals.end());
  }
  o.random_device = args.text("device-order", "alternate") == "random";
  o.seed = uint64_t(args.integer("seed", int64_t(o.seed)));
  if (args.has("kinds")) o.kinds = args.words("kinds", {});
  o.max_m = args.integer("max-m", o.max_m);
  o.fresh_percent = int(args.integer("fresh-percent", o.fresh_percent));
  o.max_calls = args.integer("max-calls", o.max_calls);
  o.hang_seconds = args.number("hang-seconds", o.hang_seconds);
  return o;
}

// ---- One random call ---------------------------------------------------------------------------------------------

struct Call {
  ProblemShape shape;
  ProblemOptions data;
  bool sa_k_major = false;
  bool launch_twice = false;  // a second launch with the same pointers takes the warm plan-cache path
  bool fresh = false;  // a new shape, not one of kWarmShapes
};

int64_t rows_upper_bound(const ProblemShape& s) {
  if (s.kind == GemmKind::kNormal) return s.m;
  if (s.kind == GemmKind::kGroupedMasked || s.kind == GemmKind::kGroupedK) return s.groups * s.m;
  const int64_t most = s.m + s.m / 2;  // GemmProblem draws each expert's rows in [m/2, 3m/2]
  return s.groups * ((most + kContiguousAlignment - 1) / kContiguousAlignment * kContiguousAlignment);
}

Call draw_call(std::mt19937_64& rng, const StressOptions& opt) {
  Call c;
  ProblemShape& s = c.shape;
  s = shape_of_kind(opt.kinds[rng() % opt.kinds.size()]);
  c.fresh = int(rng() % 100) < opt.fresh_percent;
  if (c.fresh) {
    s.groups = s.kind == GemmKind::kNormal ? 1 : int(1 + rng() % kMaxStressGroups);
    if (rng() % 2 == 0) {
      std::vector<int64_t> awkward;
      for (int64_t m : kAwkwardM)
        if (m <= opt.max_m) awkward.push_back(m);
      s.m = awkward[rng() % awkward.size()];
    } else {
      s.m = 1 + int64_t(rng() % uint64_t(opt.max_m));
    }
    s.n = 8 * (1 + int64_t(rng() % (kMaxFreshDim / 8)));
    s.k = 16 * (1 + int64_t(rng() % (kMaxFreshDim / 16)));
  } else {
    std::vector<const WarmShape*> of_kind;
    for (const WarmShape& w : kWarmShapes)
      if (std::string(w.kind) == s.kind_name()) of_kind.push_back(&w);
    const WarmShape& w = *of_kind[rng() % of_kind.size()];
    s.groups = w.groups;
    s.m = w.m;
    s.n = w.n;
    s.k = w.k;
  }
  const int64_t min_m = s.kind == GemmKind::kGroupedK ? kMinKGroupedM : 1;
  if (s.kind == GemmKind::kGroupedK) {
    s.m = std::max(min_m, (s.m + 7) / 8 * 8);
    s.k = (s.k + 127) / 128 * 128;
  }
  // kgrouped: an expert's K reaches 1.5 k rounded up to 128 (draw_expert_ks).
  const auto most_k = [&] { return s.kind == GemmKind::kGroupedK ? (s.k + s.k / 2 + 127) / 128 * 128 : s.k; };
  while (s.groups > 1 && s.groups * s.n * most_k() > kMaxWeightBytes) --s.groups;
  auto too_big = [&] {
    const int64_t rows = rows_upper_bound(s);
    return rows * s.n > kMaxOutputElements || rows * s.n * most_k() > kMaxReferenceMacs;
  };
  while (too_big() && (s.m > min_m || s.groups > 1)) {
    if (s.m > min_m) s.m = std::max(min_m, s.m / 2 / s.m_step() * s.m_step());
    else --s.groups;
  }
  c.sa_k_major = rng() % 2 == 1;
  c.launch_twice = rng() % 4 == 0;
  c.data.seed = rng();
  if (s.kind == GemmKind::kGroupedMasked)
    for (int g = 0; g < s.groups; ++g) c.data.masked_m.push_back(int(rng() % uint64_t(s.m + 1)));
  if (s.wgrad) c.data.c_aliases_d = rng() % 2 == 0;
  if (s.kind == GemmKind::kGroupedK) c.data.accumulate = rng() % 2 == 0;
  return c;
}

// The problem the library's heuristic sees for this call (as the library derives it from the tensors), to name the
// kernel it launches: its kind, N, K, SA layout and configuration (up to the M-dependent tile counts). Empty when
// the call launches nothing.
std::string kernel_of(const GemmProblem& p, const Call& c, int num_sms) {
  Problem q;
  q.kind = c.shape.kind;
  q.n = c.shape.n;
  q.k = c.shape.k;
  q.num_groups = c.shape.groups;
  q.sa_k_major = c.sa_k_major;
  if (c.shape.wgrad) {
    q.sb_per_row = true;
    q.d_dtype = DType::kFloat32;
    q.accumulate = true;
    q.c_is_d = c.data.c_aliases_d;
  }
  q.m = p.rows();
  if (c.shape.kind == GemmKind::kGroupedK) {
    // MN-major SA whatever the call drew; it adds into D with or without accumulation (D zeroed first).
    q.sa_k_major = false;
    q.sb_per_row = true;
    q.d_dtype = DType::kFloat32;
    q.accumulate = true;
    q.m = c.shape.m;
    q.k = p.expected_k();
    if (p.sum_k() == 0) return {};
  } else if (c.shape.kind == GemmKind::kGroupedContiguousPsum) {
    q.m = std::min<int64_t>(std::max<int64_t>(1, c.shape.m), p.rows());  // the expected_m GemmProblem::run passes
  } else if (c.shape.kind == GemmKind::kGroupedMasked) {
    int expected = 1;
    for (int v : p.masked_m()) expected = std::max(expected, v);
    q.m = std::min<int64_t>(expected, c.shape.m);
    q.m_max = c.shape.m;
  }
  if (p.rows() == 0) return {};
  const std::string config = describe_config(q, num_sms);
  return std::string(c.shape.kind_name()) + " N=" + std::to_string(q.n) + " K=" + std::to_string(q.k) +
         (q.sa_k_major ? " SA K-major " : " SA MN-major ") + config.substr(0, config.find(" tiles="));
}

// ---- Shared state ------------------------------------------------------------------------------------------------

struct DeviceTally {
  int ordinal = 0;
  std::string name;
  int device_sms = 0;
  int library_sms = 0;
  std::atomic<uint64_t> calls{0}, failures{0};
  std::mutex mutex;
  std::set<std::string> kernels;  // distinct GEMM kernels launched on this device
};

struct ThreadState {
  std::atomic<int64_t> busy_since_ms{-1};  // start of the current call (ms since the run began), -1 when idle
  std::mutex mutex;
  std::string current;  // the current call, for the hang report
};

struct Shared {
  StressOptions options;
  Clock::time_point start;
  std::vector<std::unique_ptr<DeviceTally>> devices;
  std::vector<std::unique_ptr<ThreadState>> threads;
  std::atomic<uint64_t> calls{0}, failures{0}, fresh_calls{0};
  std::atomic<int> finished{0};
  std::mutex log_mutex;

  int64_t elapsed_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  }
  void report_failure(DeviceTally* device, const std::string& what) {
    const uint64_t n = ++failures;
    if (device != nullptr) ++device->failures;
    std::lock_guard<std::mutex> lock(log_mutex);
    if (n <= uint64_t(kMaxLoggedFailures)) std::printf("stress: FAIL %s\n", what.c_str());
    if (n == uint64_t(kMaxLoggedFailures)) std::printf("stress: (later failures are counted, not printed)\n");
    std::fflush(stdout);
  }
};

std::string describe_call(int device, int thread, int64_t index, const Call& c) {
  std::ostringstream os;
  os << "device " << device << " thread " << thread << " call " << index << ": " << c.shape.describe() << " SA "
     << (c.sa_k_major && c.shape.kind != GemmKind::kGroupedK ? "K-major" : "MN-major")
     << (c.shape.wgrad ? (c.data.c_aliases_d ? " C=D" : " C apart") : "")
     << (c.shape.kind == GemmKind::kGroupedK ? (c.data.accumulate ? " D+=" : " D=") : "")
     << (c.fresh ? " (new shape)" : "") << " data seed " << c.data.seed;
  if (!c.data.masked_m.empty()) {
    os << " masked_m {";
    for (size_t g = 0; g < c.data.masked_m.size(); ++g) os << (g ? "," : "") << c.data.masked_m[g];
    os << "}";
  }
  if (c.shape.kind == GemmKind::kGroupedK) {
    const std::vector<int64_t> ks = draw_expert_ks(c.shape, c.data.seed);  // GemmProblem's split of the tokens
    os << " ks {";
    for (size_t g = 0; g < ks.size(); ++g) os << (g ? "," : "") << ks[g];
    os << "}";
  }
  return os.str();
}

void worker(int thread_idx, Shared& shared) {
  const StressOptions& opt = shared.options;
  ThreadState& me = *shared.threads[size_t(thread_idx)];
  std::mt19937_64 rng(opt.seed * 0x9E3779B97F4A7C15ull + uint64_t(thread_idx) * 0xD1B54A32D192ED03ull + 1);
  const auto deadline = shared.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt.seconds));
  const size_t num_devices = shared.devices.size();
  std::map<int, cudaStream_t> streams;  // this thread's stream on each device it used
  for (int64_t call_idx = 0; Clock::now() < deadline && (opt.max_calls == 0 || call_idx < opt.max_calls); ++call_idx) {
    DeviceTally& device = *shared.devices[opt.random_device ? rng() % num_devices
                                                            : size_t(thread_idx + call_idx) % num_devices];
    const Call call = draw_call(rng, opt);
    const std::string what = describe_call(device.ordinal, thread_idx, call_idx, call);
    {
      std::lock_guard<std::mutex> lock(me.mutex);
      me.current = what;
    }
    me.busy_since_ms = shared.elapsed_ms();
    try {
      FG_CUDA_CHECK(cudaSetDevice(device.ordinal));
      cudaStream_t& stream = streams[device.ordinal];
      if (stream == nullptr) FG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      GemmProblem problem(call.shape, call.data);
      problem.poison_output(stream);
      problem.run(call.sa_k_major, stream);
      if (call.launch_twice) {
        // D = C + A x B^T with C aliasing D adds the product again: start the second call from C too.
        if (problem.d_holds_c()) problem.poison_output(stream);
        problem.run(call.sa_k_major, stream);
      }
      sync_and_check(stream, what);
      const Verdict verdict = check_download(problem, gpu_reference(problem));
      if (!verdict.ok) shared.report_failure(&device, what + ": " + verdict.summary);
      const std::string kernel = kernel_of(problem, call, device.library_sms);
      if (!kernel.empty()) {
        std::lock_guard<std::mutex> lock(device.mutex);
        device.kernels.insert(kernel);
      }
    } catch (const std::exception& e) {
      shared.report_failure(&device, what + ": " + e.what());
    }
    me.busy_since_ms = -1;
    ++shared.calls;
    ++device.calls;
    if (call.fresh) ++shared.fresh_calls;
  }
  for (const auto& [ordinal, stream] : streams) {
    if (stream == nullptr) continue;
    cudaError_t err = cudaSetDevice(ordinal);
    if (err == cudaSuccess) err = cudaStreamDestroy(stream);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      shared.report_failure(nullptr, "thread " + std::to_string(thread_idx) + ": cannot destroy its stream on device " +
                                         std::to_string(ordinal) + ": " + cudaGetErrorString(err));
    }
  }
  ++shared.finished;
}

void print_summary(const Shared& shared, bool hung) {
  const JitStats stats = jit_stats();
  std::printf("stress: calls=%llu failures=%llu compiles=%llu disk_hits=%llu compile_seconds=%.1f new_shape_calls=%llu "
              "devices=%zu threads=%d seconds=%.1f hung=%d\n",
              (unsigned long long)shared.calls.load(), (unsigned long long)shared.failures.load(),
              (unsigned long long)stats.compiles, (unsigned long long)stats.disk_hits, stats.compile_seconds,
              (unsigned long long)shared.fresh_calls.load(), shared.devices.size(), shared.options.threads,
              double(shared.elapsed_ms()) / 1e3, hung ? 1 : 0);
  std::fflush(stdout);
}

// The devices to drive: the listed ones (each must be a Hopper GPU), or every Hopper GPU for --devices all.
std::vector<int> resolve_devices(const StressOptions& opt, std::string* error) {
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    (void)cudaGetLastError();
    *error = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(err);
    return {};
  }
  auto is_hopper = [](int ordinal) {
    int major = 0, minor = 0;
    return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal) == cudaSuccess &&
           cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal) == cudaSuccess && major == 9 &&
           minor == 0;
  };
  std::vector<int> out;
  if (opt.all_devices) {
    for (int d = 0; d < count; ++d) {
      if (is_hopper(d)) out.push_back(d);
      else std::printf("stress: device %d is not a Hopper GPU (compute capability 9.0): not used\n", d);
    }
    return out;
  }
  for (int d : opt.devices) {
    if (d >= count) {
      *error = "--devices " + std::to_string(d) + ": only " + std::to_string(count) + " CUDA device" +
               (count == 1 ? " is" : "s are") + " visible (0.." + std::to_string(count - 1) + ")";
      return {};
    }
    if (!is_hopper(d)) {
      *error = "--devices " + std::to_string(d) + " is not a Hopper GPU (compute capability 9.0)";
      return {};
    }
    out.push_back(d);
  }
  return out;
}

// FINEGEMM_NUM_SMS as the library reads it: the SMs its kernels may use (0 or unset: all). A value the library
// rejects makes get_num_sms() throw, which the caller reports.
int num_sms_from_environment() {
  const char* v = std::getenv("FINEGEMM_NUM_SMS");
  if (v == nullptr || v[0] == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n > 0 ? int(std::min<long>(n, INT32_MAX)) : 0;
}

}  // namespace

int run_stress(int argc, char** argv) {
  Shared shared;
  try {
    shared.options = parse_options(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const StressOptions& opt = shared.options;
  if (opt.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string why;
  if (!has_hopper_gpu(&why)) {
    std::fprintf(stderr, "finegemm stress: no Hopper GPU present (%s): stress needs one\n", why.c_str());
    return 1;
  }
  const std::vector<int> ordinals = resolve_devices(opt, &why);
  if (ordinals.empty()) {
    std::fprintf(stderr, "finegemm stress: %s\n", why.empty() ? "no Hopper GPU to drive" : why.c_str());
    return 1;
  }

  // Per-device facts, as the CUDA runtime and as the library see them.
  const int sms_option = num_sms_from_environment();
  std::string kinds;
  for (const std::string& k : opt.kinds) kinds += (kinds.empty() ? "" : ",") + k;
  std::printf("stress: finegemm %s, %d threads, %.0f s, %zu device(s) (%s order), kinds %s, seed %llu, max M %lld, "
              "%d%% new shapes, cache %s\n",
              version(), opt.threads, opt.seconds, ordinals.size(), opt.random_device ? "random" : "alternate",
              kinds.c_str(), (unsigned long long)opt.seed, (long long)opt.max_m, opt.fresh_percent,
              cache_dir().empty() ? "(disabled)" : cache_dir().c_str());
  for (int ordinal : ordinals) {
    auto tally = std::make_unique<DeviceTally>();
    tally->ordinal = ordinal;
    try {
      FG_CUDA_CHECK(cudaSetDevice(ordinal));
      cudaDeviceProp prop{};
      FG_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
      tally->name = prop.name;
      tally->device_sms = prop.multiProcessorCount;
      tally->library_sms = get_num_sms();
      const int expected_sms = sms_option > 0 && sms_option < prop.multiProcessorCount ? sms_option : prop.multiProcessorCount;
      std::printf("stress: device %d: %s, %d SMs, finegemm uses %d SMs%s\n", ordinal, prop.name,
                  prop.multiProcessorCount, tally->library_sms,
                  sms_option > 0 ? (" (FINEGEMM_NUM_SMS=" + std::to_string(sms_option) + ")").c_str() : "");
      if (tally->library_sms != expected_sms)
        shared.report_failure(nullptr, "device " + std::to_string(ordinal) + " (" + prop.name + ", " +
                                           std::to_string(prop.multiProcessorCount) + " SMs): finegemm uses " +
                                           std::to_string(tally->library_sms) + " SMs, expected " +
                                           std::to_string(expected_sms));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "finegemm stress: device %d: %s\n", ordinal, e.what());
      return 1;
    }
    shared.devices.push_back(std::move(tally));
  }
  std::fflush(stdout);

  shared.start = Clock::now();
  for (int t = 0; t < opt.threads; ++t) shared.threads.push_back(std::make_unique<ThreadState>());
  std::vector<std::thread> threads;
  for (int t = 0; t < opt.threads; ++t) threads.emplace_back(worker, t, std::ref(shared));

  // Watchdog: a call that does not return within --hang-seconds is a deadlock (or a hung kernel).
  const int64_t hang_ms = int64_t(opt.hang_seconds * 1e3);
  int64_t next_progress_ms = kProgressPeriodMs;
  while (shared.finished.load() < opt.threads) {
    std::this_thread::sleep_for(kWatchdogPeriod);
    const int64_t now_ms = shared.elapsed_ms();
    if (now_ms >= next_progress_ms) {
      next_progress_ms += kProgressPeriodMs;
      std::lock_guard<std::mutex> lock(shared.log_mutex);
      std::printf("stress: %.0f s: calls=%llu failures=%llu compiles=%llu\n", double(now_ms) / 1e3,
                  (unsigned long long)shared.calls.load(), (unsigned long long)shared.failures.load(),
                  (unsigned long long)jit_stats().compiles);
      std::fflush(stdout);
    }
    for (int t = 0; t < opt.threads; ++t) {
      ThreadState& state = *shared.threads[size_t(t)];
      const int64_t since = state.busy_since_ms.load();
      if (since < 0 || now_ms - since < hang_ms) continue;
      {
        std::lock_guard<std::mutex> lock(state.mutex);
        std::lock_guard<std::mutex> log_lock(shared.log_mutex);
        std::printf("stress: HANG: thread %d has been in one call for %.0f s (--hang-seconds %g): %s\n", t,
                    double(now_ms - since) / 1e3, opt.hang_seconds, state.current.c_str());
      }
      print_summary(shared, true);
      std::fflush(nullptr);
      std::_Exit(3);
    }
  }
  for (auto& th : threads) th.join();

  // Per device: calls, kernels, and the device error word (no call of the stress may raise it).
  for (const auto& device : shared.devices) {
    uint32_t flags = 0;
    try {
      FG_CUDA_CHECK(cudaSetDevice(device->ordinal));
      flags = device_error_flags();
    } catch (const std::exception& e) {
      shared.report_failure(device.get(), "device " + std::to_string(device->ordinal) + ": " + e.what());
    }
    if (flags != 0)
      shared.report_failure(device.get(), "device " + std::to_string(device->ordinal) + ": device error flags " +
                                              std::to_string(flags) + " raised by valid calls");
    std::printf("stress: device %d: %s, %d SMs (finegemm %d): calls=%llu failures=%llu kernels=%zu error_flags=%u\n",
                device->ordinal, device->name.c_str(), device->device_sms, device->library_sms,
                (unsigned long long)device->calls.load(), (unsigned long long)device->failures.load(),
                device->kernels.size(), flags);
  }
  print_summary(shared, false);
  return shared.failures.load() == 0 ? 0 : 1;
}

}  // namespace finegemm::tools
