// The reliability commands of the CLI on the CPU: `finegemm stress` says clearly why it cannot run without a GPU and
// rejects bad options with one line naming the option; a `finegemm warmup` killed (SIGKILL) in the middle of a real
// GEMM kernel compile leaves a cache that the next process uses and repairs, also a process already waiting for it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "run_command.hpp"

extern char** environ;

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

const std::string kCli = FINEGEMM_CLI_PATH;
constexpr auto kKillTimeout = std::chrono::seconds(60);
constexpr auto kPollPeriod = std::chrono::milliseconds(1);
// 6 (N, K) pairs x 2 SA layouts: 12 GEMM kernels, compiled one after the other (--jobs 1), ~0.3 s each.
const std::vector<std::string> kWarmupArgs = {"warmup", "--n",   "576,2112", "--k",    "256,512,7168", "--m-range",
                                              "64:64",  "--sms", "132",      "--jobs", "1"};
constexpr int kNumWarmupKernels = 12;

using finegemm::test::run_command;

fs::path temp_dir() {
  char tmpl[] = "/tmp/finegemm-stress-cli-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

// ---- finegemm stress -------------------------------------------------------------------------------------------

TEST(StressCli, WithoutAGpuFailsWithAClearMessage) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  int status = -1;
  const std::string out = run_command(kCli + " stress --threads 2 --seconds 1", &status);
  if (out.find("no Hopper GPU present") == std::string::npos) GTEST_SKIP() << "a GPU is present: " << out.substr(0, 200);
  EXPECT_EQ(status, 1) << out;
  EXPECT_EQ(out.rfind("finegemm stress: no Hopper GPU present (", 0), 0u) << out;
  EXPECT_NE(out.find("): stress needs one\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("stress: calls="), std::string::npos) << "no summary without a single call: " << out;
}

TEST(StressCli, BadOptionsAreRejectedWithTheirName) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"--threads 0", "--threads takes an integer in 1..256, got '0'"},
      {"--threads=many", "--threads takes an integer in 1..256, got 'many'"},
      {"--seconds -3", "--seconds takes a number in (0, 86400], got '-3'"},
      {"--seconds", "--seconds takes a number in (0, 86400], got no value"},
      {"--seconds inf", "--seconds takes a number in (0, 86400], got 'inf'"},
      {"--devices 0,0", "--devices takes 'all' or a comma list of distinct integers in 0..1023, got '0,0'"},
      {"--devices gpu1", "--devices takes 'all' or a comma list of distinct integers in 0..1023, got 'gpu1'"},
      {"--devices 0,", "--devices takes 'all' or a comma list of distinct integers in 0..1023, got '0,'"},
      {"--device-order round-robin", "--device-order takes one of alternate, random, got 'round-robin'"},
      {"--kinds normal,dense", "--kinds takes a comma list of distinct words from normal, contiguous, masked, psum, "
                               "wgrad, kgrouped, got 'normal,dense'"},
      {"--kinds wgrad,wgrad", "--kinds takes a comma list of distinct words from normal, contiguous, masked, psum, "
                              "wgrad, kgrouped, got 'wgrad,wgrad'"},
      {"--kinds kgrouped,wgrad,kgrouped", "--kinds takes a comma list of distinct words from normal, contiguous, "
                                          "masked, psum, wgrad, kgrouped, got 'kgrouped,wgrad,kgrouped'"},
      {"--max-m 0", "--max-m takes an integer in 1..65536, got '0'"},
      {"--fresh-percent 101", "--fresh-percent takes an integer in 0..100, got '101'"},
      {"--hang-seconds 0", "--hang-seconds takes a number in (0, 86400], got '0'"},
      {"--max-calls -1", "--max-calls takes an integer in 0..9223372036854775807, got '-1'"},
      {"--threads 2 --threads 3", "--threads given twice"},
      {"--bogus 1", "unknown option --bogus (options: --device-order, --devices, --fresh-percent, --hang-seconds, "
                    "--kinds, --max-calls, --max-m, --seconds, --seed, --threads)"},
      {"threads=8", "unexpected argument 'threads=8' (options: --device-order, --devices, --fresh-percent, "
                    "--hang-seconds, --kinds, --max-calls, --max-m, --seconds, --seed, --threads)"},
  };
  for (const auto& c : cases) {
    int status = -1;
    const std::string out = run_command(kCli + " stress " + c.args, &status);
    EXPECT_EQ(status, 2) << c.args << ": " << out;
    EXPECT_EQ(out, std::string("finegemm stress: ") + c.message + "\n") << c.args;
  }
  int status = -1;
  const std::string help = run_command(kCli + " stress --help", &status);
  EXPECT_EQ(status, 0) << help;
  EXPECT_EQ(help.rfind("usage: finegemm stress", 0), 0u) << help;
  const std::string usage = run_command(kCli + " --help", &status);
  EXPECT_NE(usage.find("  stress  "), std::string::npos) << "finegemm --help lists stress: " << usage;
}

// ---- A process killed in the middle of a compile ---------------------------------------------------------------

// The CLI started with `args`, FINEGEMM_CACHE_DIR=cache and the NVRTC backend (compiles inside the process), its
// stdout and stderr going to `log`.
pid_t spawn_cli(const std::vector<std::string>& args, const fs::path& cache, const fs::path& log) {
  std::vector<std::string> argv_storage = {kCli};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<std::string> env_storage = {"FINEGEMM_CACHE_DIR=" + cache.string(), "FINEGEMM_JIT_COMPILER=nvrtc"};
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "FINEGEMM_", 9) != 0) env_storage.push_back(*e);
  std::vector<char*> argv, envp;
  for (auto& a : argv_storage) argv.push_back(a.data());
  for (auto& e : env_storage) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + kCli + ": " + std::strerror(rc));
  return pid;
}

// A started CLI process; killed (SIGKILL) and reaped at the end of the test if it is still running.
class Process {
 public:
  Process(const std::vector<std::string>& args, const fs::path& cache, const fs::path& log)
      : pid_(spawn_cli(args, cache, log)) {}
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() {
    if (!reaped_) kill();
  }
  pid_t pid() const { return pid_; }
  bool exited() {
    if (!reaped_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
    return reaped_;
  }
  int wait() {
    while (!reaped_) {
      if (::waitpid(pid_, &status_, 0) == pid_) reaped_ = true;
      else if (errno != EINTR) break;
    }
    return status_;
  }
  int kill() {
    if (!reaped_) ::kill(pid_, SIGKILL);
    return wait();
  }

 private:
  pid_t pid_;
  int status_ = 0;
  bool reaped_ = false;
};

// A fresh directory, removed with its contents at the end of the test.
struct TempDir {
  fs::path path = temp_dir();
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

size_t count_files(const fs::path& cache, const std::string& needle) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(cache / "kernels", ec); it != fs::recursive_directory_iterator();
       it.increment(ec))
    n += it->path().filename().string().find(needle) != std::string::npos;
  return n;
}
size_t count_entries(const fs::path& cache) { return count_files(cache, ".bin"); }

// The flock()s that /proc/locks lists on the cache's lock files (<cache>/locks/<key>.lock): who holds one, who waits.
struct CacheLocks {
  std::set<pid_t> holders, waiters;
};

CacheLocks cache_locks(const fs::path& cache) {
  std::set<ino_t> inodes;
  std::error_code ec;
  for (auto it = fs::directory_iterator(cache / "locks", ec); it != fs::directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::stat(it->path().c_str(), &st) == 0) inodes.insert(st.st_ino);
  }
  // Lines read "1: FLOCK  ADVISORY  WRITE <pid> <major>:<minor>:<inode> 0 EOF"; a waiter's has "->" after the id.
  CacheLocks locks;
  std::ifstream in("/proc/locks");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, type, advisory, mode, device;
    long pid = 0;
    fields >> id >> type;
    const bool waiting = type == "->";
    if (waiting) fields >> type;
    fields >> advisory >> mode >> pid >> device;
    if (type != "FLOCK" || device.rfind(':') == std::string::npos) continue;
    if (inodes.count(ino_t(std::strtoull(device.c_str() + device.rfind(':') + 1, nullptr, 10))) == 0) continue;
    (waiting ? locks.waiters : locks.holders).insert(pid_t(pid));
  }
  return locks;
}

bool proc_locks_readable() { return std::ifstream("/proc/locks").good(); }

// "<compiled> kernels compiled, <cached> already cached" of a `finegemm warmup` output ({-1, -1} when absent).
std::pair<int, int> warmup_counts(const std::string& out) {
  std::smatch m;
  const std::regex re(R"((\d+) kernels compiled, (\d+) already cached)");
  if (!std::regex_search(out, m, re)) return {-1, -1};
  return {std::stoi(m[1]), std::stoi(m[2])};
}

std::string warmup_command(const fs::path& cache) {
  std::string cmd = "FINEGEMM_CACHE_DIR=" + cache.string() + " FINEGEMM_JIT_COMPILER=nvrtc " + kCli;
  for (const auto& a : kWarmupArgs) cmd += " " + a;
  return cmd;
}

// After the kill, a warm-up that has nothing left to compile: every kernel is in the cache, none twice, no leftovers.
void expect_complete_cache(const fs::path& cache, int num_kernels) {
  int status = -1;
  const std::string again = run_command(warmup_command(cache), &status);
  EXPECT_EQ(status, 0) << again;
  EXPECT_EQ(warmup_counts(again), std::make_pair(0, num_kernels)) << again;
  EXPECT_EQ(count_entries(cache), size_t(num_kernels));
  EXPECT_EQ(count_files(cache, ".tmp."), 0u) << "a temporary file of the killed writer was left behind";
}

/// Polls until `victim` has stored two kernels and holds the lock of a third (it is compiling it); false if it
/// exited or kKillTimeout passed first.
bool wait_until_compiling(Process& victim, const fs::path& cache) {
  const auto deadline = Clock::now() + kKillTimeout;
  while (Clock::now() < deadline && !victim.exited()) {
    if (count_entries(cache) >= 2 && cache_locks(cache).holders.count(victim.pid()) != 0) return true;
    std::this_thread::sleep_for(kPollPeriod);
  }
  return false;
}

TEST(StressCli, WarmupKilledInTheMiddleOfACompileLeavesACacheTheNextProcessUsesAndRepairs) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  if (!proc_locks_readable()) GTEST_SKIP() << "needs /proc/locks to see which process holds a cache lock";
  const TempDir dir;
  const fs::path cache = dir.path / "cache";
  Process victim(kWarmupArgs, cache, dir.path / "victim.log");
  // Kill it once it has stored two kernels and holds the lock of a third, i.e. is compiling it (NVRTC, in-process).
  const bool compiling = wait_until_compiling(victim, cache);
  const int status = victim.kill();
  ASSERT_TRUE(compiling) << "never caught the warm-up compiling; status " << status << ", log:\n"
                         << read_text(dir.path / "victim.log");
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  const size_t stored_before_kill = count_entries(cache);

  // The next process loads what the killed one stored, compiles the rest (the interrupted kernel included).
  const auto begin = Clock::now();
  int next_status = -1;
  const std::string next = run_command(warmup_command(cache), &next_status);
  EXPECT_EQ(next_status, 0) << next;
  const auto [compiled, cached] = warmup_counts(next);
  EXPECT_EQ(cached, int(stored_before_kill)) << next;
  EXPECT_GE(compiled, 1) << "the interrupted kernel must be compiled again: " << next;
  EXPECT_EQ(compiled + cached, kNumWarmupKernels) << next;
  EXPECT_LT(Clock::now() - begin, kKillTimeout) << "the dead process's lock held the next one up";
  expect_complete_cache(cache, kNumWarmupKernels);
}

TEST(StressCli, ProcessWaitingForAKilledCompileTakesOver) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  if (!proc_locks_readable()) GTEST_SKIP() << "needs /proc/locks to see which process holds a cache lock";
  const TempDir dir;
  const fs::path cache = dir.path / "cache";
  Process victim(kWarmupArgs, cache, dir.path / "victim.log");
  const auto deadline = Clock::now() + kKillTimeout;
  wait_until_compiling(victim, cache);
  // A second process on the same kernels: it loads what the victim stored and then blocks on the victim's lock.
  Process waiter(kWarmupArgs, cache, dir.path / "waiter.log");
  bool caught = false;
  while (!caught && Clock::now() < deadline && !victim.exited() && !waiter.exited()) {
    const CacheLocks locks = cache_locks(cache);
    caught = locks.holders.count(victim.pid()) != 0 && locks.waiters.count(waiter.pid()) != 0;
    if (!caught) std::this_thread::sleep_for(kPollPeriod);
  }
  const int status = victim.kill();
  const int waiter_status = waiter.wait();
  const std::string waiter_out = read_text(dir.path / "waiter.log");
  ASSERT_TRUE(caught) << "never saw the waiter blocked on the victim's compile; victim log:\n"
                      << read_text(dir.path / "victim.log") << "waiter log:\n" << waiter_out;
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  ASSERT_TRUE(WIFEXITED(waiter_status) && WEXITSTATUS(waiter_status) == 0) << waiter_out;
  const auto [compiled, cached] = warmup_counts(waiter_out);
  EXPECT_GE(compiled, 1) << "the waiter must compile the kernel the victim did not finish: " << waiter_out;
  EXPECT_GE(cached, 2) << "the waiter must load what the victim stored: " << waiter_out;
  EXPECT_EQ(compiled + cached, kNumWarmupKernels) << waiter_out;
  expect_complete_cache(cache, kNumWarmupKernels);
}

}  // namespace
