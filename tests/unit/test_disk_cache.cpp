// The content hash and the cross-process disk cache of compiled kernels (src/common/hash, src/jit/disk_cache).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <latch>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/hash.hpp"
#include "finegemm/finegemm.hpp"
#include "jit/disk_cache.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using finegemm::Hasher;
using finegemm::hash_hex;
using finegemm::jit::DiskCache;
using Clock = std::chrono::steady_clock;

constexpr int kNumConcurrent = 8;
constexpr auto kHelperStartTimeout = std::chrono::seconds(30);

// ---- Helpers ---------------------------------------------------------------------------------------------------
// A fresh directory, removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/finegemm_cache_test.XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string key_for(const std::string& name) { return hash_hex(name); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  ASSERT_TRUE(out.good()) << path;
}

int count_lines(const std::string& path) {
  std::ifstream in(path);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

int count_occurrences(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++count;
  return count;
}

// A build function that counts its calls.
struct CountingBuild {
  std::string payload;
  std::atomic<int>* calls;
  std::chrono::milliseconds delay{0};
  std::string operator()() const {
    calls->fetch_add(1);
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    return payload;
  }
};

// A started finegemm_test_helper whose stdout is read through a pipe.
struct Child {
  pid_t pid = -1;
  int stdout_fd = -1;
};

Child spawn_helper(const std::vector<std::string>& args) {
  std::vector<std::string> argv_storage = {FINEGEMM_TEST_HELPER};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  Child child;
  const int rc = posix_spawn(&child.pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    throw std::runtime_error(std::string("cannot start ") + FINEGEMM_TEST_HELPER + ": " + std::strerror(rc));
  }
  child.stdout_fd = pipe_fds[0];
  return child;
}

struct ChildResult {
  int wait_status = 0;
  std::string out;
  bool exited_ok() const { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }
};

ChildResult finish(Child& child) {
  ChildResult result;
  char buffer[4096];
  for (ssize_t n; (n = ::read(child.stdout_fd, buffer, sizeof(buffer))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    result.out.append(buffer, static_cast<size_t>(n));
  }
  ::close(child.stdout_fd);
  while (::waitpid(child.pid, &result.wait_status, 0) < 0 && errno == EINTR) {
  }
  return result;
}

// Starts `count` helpers with `args` + a start file, waits until all are ready, then releases them together.
std::vector<ChildResult> run_helpers_together(const TempDir& tmp, const std::vector<std::string>& args, int count) {
  const std::string start_file = tmp / "start";
  std::vector<Child> children;
  for (int i = 0; i < count; ++i) {
    auto with_start = args;
    with_start.push_back(start_file);
    children.push_back(spawn_helper(with_start));
  }
  const auto deadline = Clock::now() + kHelperStartTimeout;
  for (;;) {
    int ready = 0;
    for (const auto& entry : fs::directory_iterator(tmp.path()))
      ready += entry.path().filename().string().rfind("start.ready.", 0) == 0;
    if (ready == count || Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  write_file(start_file, "");
  std::vector<ChildResult> results;
  for (auto& child : children) results.push_back(finish(child));
  return results;
}

// ---- Hash ------------------------------------------------------------------------------------------------------
TEST(Hash, IsDeterministicAndStreamingMatchesOneShot) {
  EXPECT_EQ(hash_hex("finegemm"), hash_hex("finegemm"));
  // Pinned values: cache keys must not change across builds or machines.
  EXPECT_EQ(hash_hex(""), "83d16029be1a5eeff6fa1fecc93aefe5");
  EXPECT_EQ(hash_hex("finegemm"), "e733cd753bc16a5673a827a9848ff3c5");

  std::string data(100, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 37 + 11);
  const std::string whole = hash_hex(data);
  for (size_t a = 0; a <= data.size(); a += 3) {
    for (size_t b = a; b <= data.size(); b += 7) {
      Hasher h;
      h.update(data.data(), a).update(data.data() + a, b - a).update(data.data() + b, data.size() - b);
      ASSERT_EQ(h.hex(), whole) << "split at " << a << ", " << b;
    }
  }
}

TEST(Hash, DifferentInputsGiveDifferentHashes) {
  std::set<std::string> seen;
  std::vector<std::string> inputs;
  for (int length = 0; length <= 64; ++length) inputs.push_back(std::string(length, '\0'));  // length matters
  for (int i = 0; i < 20000; ++i) inputs.push_back("kernel<" + std::to_string(i) + ">");
  for (int i = 1; i < 256; ++i) inputs.push_back(std::string(1, static_cast<char>(i)));
  for (const auto& input : inputs) seen.insert(hash_hex(input));
  EXPECT_EQ(seen.size(), inputs.size());
}

TEST(Hash, StringUpdatesAreLengthPrefixed) {
  using namespace std::string_view_literals;
  EXPECT_NE(Hasher().update("ab"sv).update("c"sv).hex(), Hasher().update("a"sv).update("bc"sv).hex());
  EXPECT_NE(Hasher().update(""sv).update("x"sv).hex(), Hasher().update("x"sv).update(""sv).hex());
  EXPECT_NE(Hasher().update("abc"sv).hex(), hash_hex("abc"));
  // Raw byte updates concatenate.
  EXPECT_EQ(Hasher().update("ab", 2).update("c", 1).hex(), hash_hex("abc"));
}

TEST(Hash, HexIs32LowercaseHexChars) {
  for (const char* input : {"", "a", "finegemm", "0123456789abcdef0123456789abcdef!"}) {
    const std::string hex = hash_hex(input);
    ASSERT_EQ(hex.size(), 32u);
    for (char c : hex) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << hex;
    EXPECT_TRUE(DiskCache::is_valid_key(hex));
  }
}

TEST(Hash, FlippingOneInputBitFlipsHalfTheOutputBits) {
  constexpr int kNumInputs = 100;
  constexpr int kInputBytes = 40;
  std::mt19937_64 rng(1234);
  std::vector<int64_t> flips_per_output_bit(128, 0);
  int64_t trials = 0, total_flips = 0;
  for (int n = 0; n < kNumInputs; ++n) {
    std::string input(kInputBytes, '\0');
    for (char& c : input) c = static_cast<char>(rng());
    const auto base = Hasher().update(input.data(), input.size()).digest();
    for (int bit = 0; bit < kInputBytes * 8; ++bit) {
      std::string flipped = input;
      flipped[bit / 8] = static_cast<char>(flipped[bit / 8] ^ (1 << (bit % 8)));
      const auto digest = Hasher().update(flipped.data(), flipped.size()).digest();
      for (int lane = 0; lane < 2; ++lane) {
        const uint64_t diff = digest[lane] ^ base[lane];
        total_flips += std::popcount(diff);
        for (int i = 0; i < 64; ++i) flips_per_output_bit[lane * 64 + i] += (diff >> i) & 1;
      }
      ++trials;
    }
  }
  EXPECT_NEAR(static_cast<double>(total_flips) / trials, 64.0, 0.5);
  for (int i = 0; i < 128; ++i)
    EXPECT_NEAR(static_cast<double>(flips_per_output_bit[i]) / trials, 0.5, 0.03) << "output bit " << i;
}

// ---- DiskCache: single process ---------------------------------------------------------------------------------
TEST(DiskCache, MissBuildsThenHitsInSameAndFreshObject) {
  TempDir tmp;
  const std::string dir = tmp / "nested/cache";  // parents are created
  const std::string key = key_for("miss-then-hit");
  std::string payload(1 << 20, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>((i * 131) >> 3);  // binary, with NULs
  std::atomic<int> calls{0};
  bool built = false;

  DiskCache cache(dir);
  ASSERT_TRUE(cache.enabled());
  EXPECT_EQ(cache.dir(), dir);
  EXPECT_FALSE(cache.load(key).has_value());
  EXPECT_EQ(cache.get_or_build(key, CountingBuild{payload, &calls}, &built), payload);
  EXPECT_TRUE(built);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(fs::is_regular_file(cache.entry_path(key)));

  EXPECT_EQ(cache.get_or_build(key, CountingBuild{"other", &calls}, &built), payload);
  EXPECT_FALSE(built);
  DiskCache fresh(dir);
  EXPECT_EQ(fresh.get_or_build(key, CountingBuild{"other", &calls}, &built), payload);
  EXPECT_FALSE(built);
  EXPECT_EQ(fresh.load(key), payload);
  EXPECT_EQ(calls.load(), 1);

  // Entry path: relative to the cache directory, sharded by the first two hex digits.
  EXPECT_EQ(fs::path(cache.entry_path(key)), fs::absolute(dir) / "kernels" / key.substr(0, 2) / (key + ".bin"));
  EXPECT_EQ(fs::file_size(cache.entry_path(key)), DiskCache::kHeaderBytes + payload.size());
}

TEST(DiskCache, EmptyPayloadRoundTrips) {
  TempDir tmp;
  DiskCache cache(tmp / "cache");
  std::atomic<int> calls{0};
  const std::string key = key_for("empty");
  EXPECT_EQ(cache.get_or_build(key, CountingBuild{"", &calls}), "");
  EXPECT_EQ(DiskCache(tmp / "cache").load(key), std::optional<std::string>(""));
  EXPECT_EQ(calls.load(), 1);
}

TEST(DiskCache, DisabledCacheAlwaysBuilds) {
  DiskCache cache("");
  EXPECT_FALSE(cache.enabled());
  std::atomic<int> calls{0};
  bool built = false;
  const std::string key = key_for("disabled");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(cache.get_or_build(key, CountingBuild{"p", &calls}, &built), "p");
    EXPECT_TRUE(built);
  }
  EXPECT_EQ(calls.load(), 3);
  EXPECT_FALSE(cache.load(key).has_value());
  EXPECT_EQ(cache.usage().entries, 0u);
}

TEST(DiskCache, RejectsInvalidKeys) {
  TempDir tmp;
  DiskCache cache(tmp / "cache");
  std::atomic<int> calls{0};
  for (const std::string key : {"", "abc", "../../../../../../../../etc/pass", "83D16029BE1A5EEFF6FA1FECC93AEFE5",
                                "83d16029be1a5eeff6fa1fecc93aefe5/", "83d16029be1a5eeff6fa1fecc93aefeg"}) {
    EXPECT_THROW(cache.load(key), finegemm::Error) << key;
    EXPECT_THROW(cache.get_or_build(key, CountingBuild{"p", &calls}), finegemm::Error) << key;
  }
  EXPECT_EQ(calls.load(), 0);
}

// Each corruption of a valid entry must be a miss, rebuilt, and the repaired entry must then hit.
struct Corruption {
  const char* name;
  void (*apply)(const std::string& entry_path, const std::string& other_entry_path);
};

void flip_byte(const std::string& path, size_t offset) {
  std::string data = read_file(path);
  ASSERT_LT(offset, data.size());
  data[offset] = static_cast<char>(data[offset] ^ 0x20);
  write_file(path, data);
}

const Corruption kCorruptions[] = {
    {"FlipPayloadByte", [](const std::string& p, const std::string&) { flip_byte(p, DiskCache::kHeaderBytes + 5); }},
    {"FlipLastPayloadByte", [](const std::string& p, const std::string&) { flip_byte(p, fs::file_size(p) - 1); }},
    {"FlipMagicByte", [](const std::string& p, const std::string&) { flip_byte(p, 2); }},
    {"FlipVersionByte", [](const std::string& p, const std::string&) { flip_byte(p, 8); }},
    {"FlipSizeByte", [](const std::string& p, const std::string&) { flip_byte(p, 16); }},
    {"FlipChecksumByte", [](const std::string& p, const std::string&) { flip_byte(p, 30); }},
    {"FlipKeyByte", [](const std::string& p, const std::string&) { flip_byte(p, 50); }},
    {"TruncatePayload", [](const std::string& p, const std::string&) { fs::resize_file(p, fs::file_size(p) - 1); }},
    {"TruncateHeader", [](const std::string& p, const std::string&) { fs::resize_file(p, 10); }},
    {"Empty", [](const std::string& p, const std::string&) { fs::resize_file(p, 0); }},
    {"AppendedBytes", [](const std::string& p, const std::string&) { write_file(p, read_file(p) + "x"); }},
    {"EntryOfAnotherKey", [](const std::string& p, const std::string& o) { write_file(p, read_file(o)); }},
    {"Garbage", [](const std::string& p, const std::string&) { write_file(p, std::string(200, '\x5a')); }},
    {"Directory",
     [](const std::string& p, const std::string&) {
       fs::remove(p);
       fs::create_directory(p);
     }},
};

void PrintTo(const Corruption& corruption, std::ostream* os) { *os << corruption.name; }

class DiskCacheCorruption : public testing::TestWithParam<Corruption> {};

TEST_P(DiskCacheCorruption, IsDetectedRebuiltAndRepaired) {
  TempDir tmp;
  const std::string dir = tmp / "cache";
  const std::string key = key_for("victim"), other_key = key_for("bystander");
  std::atomic<int> calls{0};
  bool built = false;
  {
    DiskCache cache(dir);
    cache.get_or_build(key, CountingBuild{"original payload of the victim", &calls});
    cache.get_or_build(other_key, CountingBuild{"original payload of the bystander", &calls});
    GetParam().apply(cache.entry_path(key), cache.entry_path(other_key));
  }
  DiskCache cache(dir);
  EXPECT_FALSE(cache.load(key).has_value());
  if (std::string(GetParam().name) == "Directory") {
    // A directory squatting on the entry path cannot be replaced by rename: the payload is still returned.
    testing::internal::CaptureStderr();
    EXPECT_EQ(cache.get_or_build(key, CountingBuild{"rebuilt", &calls}, &built), "rebuilt");
    EXPECT_EQ(count_occurrences(testing::internal::GetCapturedStderr(), "finegemm: warning:"), 1);
    EXPECT_TRUE(built);
    return;
  }
  EXPECT_EQ(cache.get_or_build(key, CountingBuild{"rebuilt", &calls}, &built), "rebuilt");
  EXPECT_TRUE(built);
  EXPECT_EQ(DiskCache(dir).get_or_build(key, CountingBuild{"again", &calls}, &built), "rebuilt");
  EXPECT_FALSE(built);
  EXPECT_EQ(DiskCache(dir).load(other_key), "original payload of the bystander");
  EXPECT_EQ(calls.load(), 3);
}

INSTANTIATE_TEST_SUITE_P(All, DiskCacheCorruption, testing::ValuesIn(kCorruptions),
                         [](const testing::TestParamInfo<Corruption>& info) { return info.param.name; });

TEST(DiskCache, UnwritableDirectoryDegradesWithOneWarning) {
  TempDir tmp;
  write_file(tmp / "regular_file", "not a directory");
  std::atomic<int> calls{0};
  bool built = false;
  testing::internal::CaptureStderr();
  {
    DiskCache cache(tmp / "regular_file/cache");
    EXPECT_FALSE(cache.enabled());
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(cache.get_or_build(key_for("unwritable"), CountingBuild{"payload", &calls}, &built), "payload");
      EXPECT_TRUE(built);
    }
    EXPECT_EQ(cache.usage().entries, 0u);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_occurrences(err, "finegemm: warning:"), 1) << err;
  EXPECT_NE(err.find("compiling in memory"), std::string::npos) << err;
  EXPECT_NE(err.find("regular_file/cache"), std::string::npos) << err;
  EXPECT_EQ(calls.load(), 3);
}

TEST(DiskCache, FailedWritesReturnThePayloadAndWarnOnce) {
  TempDir tmp;
  DiskCache cache(tmp / "cache");
  ASSERT_TRUE(cache.enabled());
  // A regular file where the shard directory "ab" would go makes every store of an "ab..." key fail.
  write_file(tmp / "cache/kernels/ab", "");
  const std::string key1 = "ab" + key_for("one").substr(2), key2 = "ab" + key_for("two").substr(2);
  std::atomic<int> calls{0};
  bool built = false;
  testing::internal::CaptureStderr();
  EXPECT_EQ(cache.get_or_build(key1, CountingBuild{"p1", &calls}, &built), "p1");
  EXPECT_TRUE(built);
  EXPECT_EQ(cache.get_or_build(key2, CountingBuild{"p2", &calls}, &built), "p2");
  EXPECT_TRUE(built);
  EXPECT_EQ(cache.get_or_build(key1, CountingBuild{"p1", &calls}, &built), "p1");
  EXPECT_TRUE(built);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_occurrences(err, "finegemm: warning:"), 1) << err;
  EXPECT_EQ(calls.load(), 3);
  // Other shards still work.
  const std::string key3 = "cd" + key_for("three").substr(2);
  cache.get_or_build(key3, CountingBuild{"p3", &calls});
  EXPECT_EQ(cache.load(key3), "p3");
}

TEST(DiskCache, CopiedDirectoryIsHitAsIs) {
  TempDir tmp;
  std::atomic<int> calls{0};
  std::vector<std::string> keys;
  {
    DiskCache cache(tmp / "original");
    for (int i = 0; i < 3; ++i) {
      keys.push_back(key_for("copied " + std::to_string(i)));
      cache.get_or_build(keys.back(), CountingBuild{"payload " + std::to_string(i), &calls});
    }
  }
  fs::create_directories(tmp / "elsewhere");
  fs::copy(tmp / "original", tmp / "elsewhere/copy", fs::copy_options::recursive);
  fs::remove_all(tmp / "original");
  DiskCache copy(tmp / "elsewhere/copy");
  bool built = true;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(copy.get_or_build(keys[i], CountingBuild{"rebuilt", &calls}, &built), "payload " + std::to_string(i));
    EXPECT_FALSE(built);
  }
  EXPECT_EQ(calls.load(), 3);
  EXPECT_EQ(copy.usage().entries, 3u);
}

TEST(DiskCache, UsageAndClear) {
  TempDir tmp;
  DiskCache cache(tmp / "cache");
  std::atomic<int> calls{0};
  uint64_t expected_bytes = 0;
  for (int i = 0; i < 5; ++i) {
    const std::string payload(100 * (i + 1), 'p');
    cache.get_or_build(key_for("usage " + std::to_string(i)), CountingBuild{payload, &calls});
    expected_bytes += DiskCache::kHeaderBytes + payload.size();
  }
  EXPECT_EQ(cache.usage().entries, 5u);
  EXPECT_EQ(cache.usage().bytes, expected_bytes);

  cache.clear();
  EXPECT_EQ(cache.usage().entries, 0u);
  EXPECT_EQ(cache.usage().bytes, 0u);
  EXPECT_FALSE(cache.load(key_for("usage 0")).has_value());
  EXPECT_TRUE(fs::is_empty(tmp / "cache/locks"));
  bool built = false;
  EXPECT_EQ(cache.get_or_build(key_for("usage 0"), CountingBuild{"new", &calls}, &built), "new");
  EXPECT_TRUE(built);
  EXPECT_EQ(cache.usage().entries, 1u);
}

TEST(DiskCache, LeftoverTempFileIsNotAnEntryAndIsCleanedUp) {
  TempDir tmp;
  const std::string key = key_for("interrupted write");
  std::atomic<int> calls{0};
  // A complete, valid entry image under a temporary name, as a writer killed just before its rename leaves it.
  DiskCache source(tmp / "source");
  source.get_or_build(key, CountingBuild{"never renamed", &calls});
  DiskCache cache(tmp / "cache");
  const std::string temp_path = cache.entry_path(key).substr(0, cache.entry_path(key).size() - 4) + ".tmp.99999.0";
  fs::create_directories(fs::path(temp_path).parent_path());
  fs::copy_file(source.entry_path(key), temp_path);

  EXPECT_FALSE(cache.load(key).has_value());
  EXPECT_EQ(cache.usage().entries, 0u);
  bool built = false;
  EXPECT_EQ(cache.get_or_build(key, CountingBuild{"fresh", &calls}, &built), "fresh");
  EXPECT_TRUE(built);
  EXPECT_FALSE(fs::exists(temp_path));
  EXPECT_EQ(cache.usage().entries, 1u);
  EXPECT_EQ(fs::directory_iterator(fs::path(temp_path).parent_path())->path().filename(), key + ".bin");
}

TEST(DiskCache, FailedBuildStoresNothingAndReleasesTheLock) {
  TempDir tmp;
  DiskCache cache(tmp / "cache");
  const std::string key = key_for("throws");
  EXPECT_THROW(cache.get_or_build(key, []() -> std::string { throw std::runtime_error("compiler crashed"); }),
               std::runtime_error);
  EXPECT_FALSE(cache.load(key).has_value());
  // A second object opens its own lock file description: this blocks forever if the first lock was not released.
  DiskCache other(tmp / "cache");
  std::atomic<int> calls{0};
  EXPECT_EQ(other.get_or_build(key, CountingBuild{"ok", &calls}), "ok");
  EXPECT_EQ(cache.get_or_build(key, CountingBuild{"ok", &calls}), "ok");
  EXPECT_EQ(calls.load(), 1);
}

// ---- DiskCache: threads ----------------------------------------------------------------------------------------
void run_threads_on_one_key(bool shared_object) {
  TempDir tmp;
  const std::string key = key_for(shared_object ? "threads shared" : "threads separate");
  DiskCache shared(tmp / "cache");
  std::atomic<int> calls{0}, num_built{0};
  std::vector<std::string> results(kNumConcurrent);
  std::latch start(kNumConcurrent);
  std::vector<std::thread> threads;
  for (int t = 0; t < kNumConcurrent; ++t) {
    threads.emplace_back([&, t] {
      std::optional<DiskCache> own;
      if (!shared_object) own.emplace(tmp / "cache");
      DiskCache& cache = shared_object ? shared : *own;
      start.arrive_and_wait();
      bool built = false;
      results[t] = cache.get_or_build(key, CountingBuild{"payload", &calls, std::chrono::milliseconds(200)}, &built);
      num_built += built;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(num_built.load(), 1);
  for (const auto& result : results) EXPECT_EQ(result, "payload");
}

TEST(DiskCache, ThreadsSharingOneCacheBuildOnce) { run_threads_on_one_key(true); }

TEST(DiskCache, ThreadsShareOneBuildEvenWhenTheStoreFails) {
  TempDir tmp;
  DiskCache cache(tmp / "cache");
  write_file(tmp / "cache/kernels/ab", "");  // no "ab..." entry can be stored: waiters must reuse the result in memory
  const std::string key = "ab" + key_for("unstorable").substr(2);
  std::atomic<int> calls{0};
  std::latch start(kNumConcurrent);
  std::vector<std::thread> threads;
  testing::internal::CaptureStderr();
  for (int t = 0; t < kNumConcurrent; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      EXPECT_EQ(cache.get_or_build(key, CountingBuild{"payload", &calls, std::chrono::milliseconds(200)}), "payload");
    });
  }
  for (auto& thread : threads) thread.join();
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(calls.load(), 1);
}
TEST(DiskCache, ThreadsWithTheirOwnCacheObjectsBuildOnce) { run_threads_on_one_key(false); }

TEST(DiskCache, DifferentKeysBuildInParallel) {
  TempDir tmp;
  DiskCache cache(tmp / "cache");
  constexpr int kNumKeys = 4;
  constexpr auto kBuildTime = std::chrono::milliseconds(300);
  std::atomic<int> calls{0};
  std::latch start(kNumKeys);
  std::vector<std::thread> threads;
  const auto begin = Clock::now();
  for (int t = 0; t < kNumKeys; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      cache.get_or_build(key_for("parallel " + std::to_string(t)), CountingBuild{"p", &calls, kBuildTime});
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(calls.load(), kNumKeys);
  EXPECT_LT(Clock::now() - begin, kBuildTime * (kNumKeys - 1)) << "builds of different keys were serialized";
}

// ---- DiskCache: processes --------------------------------------------------------------------------------------
TEST(DiskCache, ProcessesStartedTogetherBuildOnce) {
  TempDir tmp;
  const std::string counter = tmp / "builds.txt";
  const std::string key = key_for("processes");
  const auto results = run_helpers_together(
      tmp, {"cache-build", tmp / "cache", key, "payload-from-one-process", "300", counter}, kNumConcurrent);
  int num_built = 0;
  for (const auto& result : results) {
    ASSERT_TRUE(result.exited_ok()) << "status " << result.wait_status << ", output: " << result.out;
    EXPECT_EQ(result.out.rfind("payload=payload-from-one-process built=", 0), 0u) << result.out;
    num_built += result.out.find("built=1") != std::string::npos;
  }
  EXPECT_EQ(count_lines(counter), 1) << read_file(counter);
  EXPECT_EQ(num_built, 1);
  EXPECT_EQ(DiskCache(tmp / "cache").load(key), "payload-from-one-process");
}

TEST(DiskCache, ProcessKilledDuringBuildLeavesAUsableCache) {
  TempDir tmp;
  const std::string counter = tmp / "builds.txt";
  const std::string key = key_for("killed");
  Child victim = spawn_helper({"cache-build", tmp / "cache", key, "never-stored", "60000", counter});
  // Wait until the victim is inside build(), i.e. holds the key's lock.
  const auto deadline = Clock::now() + kHelperStartTimeout;
  while (count_lines(counter) < 1 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(count_lines(counter), 1) << "the helper never started building";
  ::kill(victim.pid, SIGKILL);
  const ChildResult killed = finish(victim);
  ASSERT_TRUE(WIFSIGNALED(killed.wait_status) && WTERMSIG(killed.wait_status) == SIGKILL);

  DiskCache cache(tmp / "cache");
  EXPECT_FALSE(cache.load(key).has_value());
  std::atomic<int> calls{0};
  bool built = false;
  const auto begin = Clock::now();
  EXPECT_EQ(cache.get_or_build(key, CountingBuild{"survivor", &calls}, &built), "survivor");
  EXPECT_LT(Clock::now() - begin, std::chrono::seconds(5)) << "the dead process's lock was not released";
  EXPECT_TRUE(built);
  EXPECT_EQ(DiskCache(tmp / "cache").load(key), "survivor");
  EXPECT_EQ(cache.usage().entries, 1u);
}

TEST(DiskCache, ProcessesStartedTogetherCompileOneRealKernelWithNvrtc) {
  TempDir tmp;
  const std::string counter = tmp / "compiles.txt";
  const auto results = run_helpers_together(tmp, {"nvrtc-compile", tmp / "cache", counter}, kNumConcurrent);
  std::set<std::string> outputs;
  int num_built = 0;
  for (const auto& result : results) {
    ASSERT_TRUE(result.exited_ok()) << "status " << result.wait_status << ", output: " << result.out;
    const size_t built_pos = result.out.find(" built=");
    ASSERT_NE(built_pos, std::string::npos) << result.out;
    outputs.insert(result.out.substr(0, built_pos));
    num_built += result.out.compare(built_pos, 8, " built=1") == 0;
  }
  EXPECT_EQ(count_lines(counter), 1) << read_file(counter);
  EXPECT_EQ(num_built, 1);
  ASSERT_EQ(outputs.size(), 1u) << "processes got different cubins";

  // "key=<key> size=<n> hash=<h>": the stored entry is that ELF image.
  std::istringstream fields(*outputs.begin());
  std::string key_field, size_field, hash_field;
  fields >> key_field >> size_field >> hash_field;
  const std::string key = key_field.substr(4);
  const auto cubin = DiskCache(tmp / "cache").load(key);
  ASSERT_TRUE(cubin.has_value());
  ASSERT_GE(cubin->size(), 4u);
  EXPECT_EQ(cubin->substr(0, 4), "\x7f" "ELF");
  EXPECT_EQ(size_field, "size=" + std::to_string(cubin->size()));
  EXPECT_EQ(hash_field, "hash=" + hash_hex(*cubin));
}

}  // namespace
