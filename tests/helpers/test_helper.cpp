// finegemm_test_helper: a small program that the unit tests start as several processes at once.
//
//   finegemm_test_helper cache-build <dir> <key> <payload> <sleep_ms> <counter_file> [<start_file>]
//       DiskCache(dir).get_or_build(key, build) where build appends "build <pid>" to <counter_file>, sleeps
//       <sleep_ms> and returns <payload>. Prints "payload=<payload> built=<0|1>".
//   finegemm_test_helper nvrtc-compile <dir> <counter_file> [<start_file>]
//       Compiles a small kernel for sm_90a with NVRTC inside get_or_build (appending "compile <pid>" to
//       <counter_file>). Prints "key=<key> size=<cubin bytes> hash=<cubin hash> built=<0|1>".
//
// With <start_file>, the process first creates "<start_file>.ready.<pid>" and then waits for <start_file> to exist,
// so that a test can release all its processes at the same moment.
#include <fcntl.h>
#include <nvrtc.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "common/hash.hpp"
#include "jit/disk_cache.hpp"
#include "jit/runtime.hpp"
#include "test_headers.hpp"

namespace {

using finegemm::jit::DiskCache;

constexpr auto kStartTimeout = std::chrono::seconds(30);
constexpr auto kStartPoll = std::chrono::microseconds(200);

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "finegemm_test_helper: %s\n", message.c_str());
  std::exit(1);
}

void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) die("cannot open " + path + ": " + std::strerror(errno));
  const std::string text = line + "\n";
  // NOTE: one write() of an O_APPEND file is atomic with respect to other appenders.
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) die("cannot append to " + path);
  ::close(fd);
}

void wait_for_start(const char* start_file) {
  if (start_file == nullptr) return;
  const std::string ready = std::string(start_file) + ".ready." + std::to_string(::getpid());
  const int fd = ::open(ready.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) die("cannot create " + ready);
  ::close(fd);
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (::access(start_file, F_OK) != 0) {
    if (std::chrono::steady_clock::now() > deadline) die(std::string("timed out waiting for ") + start_file);
    std::this_thread::sleep_for(kStartPoll);
  }
}

int cache_build(int argc, char** argv) {
  if (argc != 7 && argc != 8) die("usage: cache-build <dir> <key> <payload> <sleep_ms> <counter_file> [<start_file>]");
  const std::string dir = argv[2], key = argv[3], payload = argv[4], counter = argv[6];
  const int sleep_ms = std::atoi(argv[5]);
  wait_for_start(argc == 8 ? argv[7] : nullptr);

  DiskCache cache(dir);
  bool built = false;
  const std::string result = cache.get_or_build(
      key,
      [&] {
        append_line(counter, "build " + std::to_string(::getpid()));
        std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
        return payload;
      },
      &built);
  std::printf("payload=%s built=%d\n", result.c_str(), built ? 1 : 0);
  return 0;
}

void check_nvrtc(nvrtcResult result, const char* what) {
  if (result != NVRTC_SUCCESS) die(std::string(what) + ": " + nvrtcGetErrorString(result));
}

int nvrtc_compile(int argc, char** argv) {
  if (argc != 4 && argc != 5) die("usage: nvrtc-compile <dir> <counter_file> [<start_file>]");
  const std::string dir = argv[2], counter = argv[3];
  wait_for_start(argc == 5 ? argv[4] : nullptr);

  static constexpr const char* kSource = R"(
extern "C" __global__ void scale_add(float* y, const float* x, float alpha, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i] + y[i];
}
)";
  const std::vector<const char*> options = {"--gpu-architecture=sm_90a", "--std=c++17"};
  int major = 0, minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");

  finegemm::Hasher hasher;
  hasher.update(std::string_view("nvrtc-compile")).update(std::string_view(kSource));
  for (const char* option : options) hasher.update(std::string_view(option));
  hasher.update_u64(static_cast<uint64_t>(major)).update_u64(static_cast<uint64_t>(minor));
  const std::string key = hasher.hex();

  DiskCache cache(dir);
  bool built = false;
  const std::string cubin = cache.get_or_build(
      key,
      [&] {
        append_line(counter, "compile " + std::to_string(::getpid()));
        nvrtcProgram program;
        check_nvrtc(nvrtcCreateProgram(&program, kSource, "scale_add.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
        const nvrtcResult compiled = nvrtcCompileProgram(program, static_cast<int>(options.size()), options.data());
        if (compiled != NVRTC_SUCCESS) {
          size_t log_size = 0;
          nvrtcGetProgramLogSize(program, &log_size);
          std::string log(log_size, '\0');
          nvrtcGetProgramLog(program, log.data());
          die(std::string("nvrtcCompileProgram: ") + nvrtcGetErrorString(compiled) + "\n" + log);
        }
        size_t size = 0;
        check_nvrtc(nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
        std::string image(size, '\0');
        check_nvrtc(nvrtcGetCUBIN(program, image.data()), "nvrtcGetCUBIN");
        nvrtcDestroyProgram(&program);
        return image;
      },
      &built);
  std::printf("key=%s size=%zu hash=%s built=%d\n", key.c_str(), cubin.size(), finegemm::hash_hex(cubin).c_str(),
              built ? 1 : 0);
  return 0;
}

// runtime-compile <cache_dir>: compiles the JIT smoke kernel through the library's runtime with that cache dir and
// prints whether it compiled or hit the disk cache (used to check that a copied install hits the cache).
int runtime_compile(int argc, char** argv) {
  if (argc < 3) die("usage: runtime-compile <cache_dir>");
  finegemm::jit::Options options;
  options.cache_dir = argv[2];
  finegemm::jit::Runtime runtime(options);
  const finegemm::jit::KernelSpec spec{"finegemm/tests/jit_smoke.cuh", "finegemm::test::jit_smoke_kernel<1024u>",
                                       "(float*, const float*)", false, &finegemm::test::test_headers()};
  const auto binary = runtime.binary(spec);
  const auto stats = runtime.stats();
  std::printf("compiled=%d disk_hits=%llu symbol=%s\n", binary->compiled ? 1 : 0,
              static_cast<unsigned long long>(stats.disk_hits), binary->symbol.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "cache-build") return cache_build(argc, argv);
    if (mode == "nvrtc-compile") return nvrtc_compile(argc, argv);
    if (mode == "runtime-compile") return runtime_compile(argc, argv);
  } catch (const std::exception& e) {
    die(e.what());
  }
  std::fprintf(stderr, "usage: finegemm_test_helper {cache-build|nvrtc-compile|runtime-compile} ...\n");
  return 2;
}
