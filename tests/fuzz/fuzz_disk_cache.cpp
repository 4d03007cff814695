// libFuzzer target: the kernel cache's entry reader (src/jit/disk_cache).
//
// Each input becomes the entry file of one fixed key in a private cache directory, created once per process under
// $FINEGEMM_FUZZ_TMPDIR, else /dev/shm (tmpfs: the fsyncs of get_or_build cost nothing), else $TMPDIR or /tmp, and
// removed at a normal exit (scripts/fuzz.sh also removes its FINEGEMM_FUZZ_TMPDIR after a crash). Contract checked:
//   load          never throws for a valid key; returns nullopt, or a payload that is exactly the bytes after the
//                 72-byte header, when the header carries the magic and the key;
//   get_or_build  returns load's payload without building when there is one; otherwise builds, returns the built
//                 payload and replaces the entry, so that load then returns the built payload.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "jit/disk_cache.hpp"

#ifndef FINEGEMM_FUZZ_CACHE_KEY
#error "FINEGEMM_FUZZ_CACHE_KEY (the key of the fuzzed entry) must be defined by the build"
#endif

namespace {

namespace fs = std::filesystem;
using finegemm::jit::DiskCache;

constexpr const char* kKey = FINEGEMM_FUZZ_CACHE_KEY;
constexpr const char* kBuiltPayload = "payload built by fuzz_disk_cache";
constexpr size_t kKeyOffset = 40;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_disk_cache: contract violated: %s\n", what);
  std::abort();
}

void require(bool condition, const char* what) {
  if (!condition) fail(what);
}

std::string base_dir() {
  const char* fuzz_tmpdir = std::getenv("FINEGEMM_FUZZ_TMPDIR");
  if (fuzz_tmpdir && *fuzz_tmpdir) return fuzz_tmpdir;
  if (::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  const char* tmpdir = std::getenv("TMPDIR");
  return tmpdir && *tmpdir ? tmpdir : "/tmp";
}

// The process's cache directory and cache; the directory is removed at exit.
class Fixture {
 public:
  Fixture() {
    const std::string base = base_dir();
    std::string pattern = base + "/finegemm-fuzz-cache.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) fail("cannot create a temporary cache directory");
    dir_ = pattern;
    cache_.emplace(dir_);
    require(cache_->enabled(), "the temporary cache directory is not usable");
    entry_path_ = cache_->entry_path(kKey);
    fs::create_directories(fs::path(entry_path_).parent_path());
  }
  ~Fixture() {
    cache_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  DiskCache& cache() { return *cache_; }
  const std::string& entry_path() const { return entry_path_; }

 private:
  std::string dir_;
  std::optional<DiskCache> cache_;
  std::string entry_path_;
};

Fixture& fixture() {
  static Fixture instance;
  return instance;
}

void write_entry_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  out.close();
  require(bool(out), "cannot write the entry file");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = fixture();
  write_entry_file(f.entry_path(), data, size);
  try {
    const std::optional<std::string> loaded = f.cache().load(kKey);
    if (loaded) {
      require(size == DiskCache::kHeaderBytes + loaded->size(), "load returned a payload of the wrong size");
      require(std::memcmp(data + DiskCache::kHeaderBytes, loaded->data(), loaded->size()) == 0,
              "load returned bytes other than the entry's payload");
      require(std::memcmp(data, DiskCache::kMagic, sizeof(DiskCache::kMagic)) == 0,
              "load accepted an entry without the magic");
      require(std::memcmp(data + kKeyOffset, kKey, std::strlen(kKey)) == 0, "load accepted an entry of another key");
    }

    bool built = false;
    const std::string payload = f.cache().get_or_build(kKey, [] { return std::string(kBuiltPayload); }, &built);
    if (loaded) {
      require(!built && payload == *loaded, "get_or_build rebuilt an entry that load accepted");
    } else {
      require(built && payload == kBuiltPayload, "get_or_build did not build for an entry that load rejected");
      require(f.cache().load(kKey) == std::optional<std::string>(kBuiltPayload),
              "get_or_build did not replace a rejected entry");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_disk_cache: %s\n", e.what());
    fail("the cache threw for a valid key");
  }
  return 0;
}
