#include "jit/disk_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/error.hpp"
#include "common/hash.hpp"

namespace finegemm::jit {

namespace fs = std::filesystem;

namespace {

constexpr const char* kKernelsSubdir = "kernels";
constexpr const char* kLocksSubdir = "locks";
constexpr const char* kEntrySuffix = ".bin";
constexpr const char* kLockSuffix = ".lock";
// Temporary files are "<key>.tmp.<pid>.<n>": they never end in kEntrySuffix, so they are never loaded.
constexpr const char* kTempInfix = ".tmp.";
// How often to retry taking a lock whose file clear() replaced under us before giving up on locking.
constexpr int kMaxLockAttempts = 64;

// ---- Little-endian header fields ---------------------------------------------------------------------------------
void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Field offsets of the entry header (see disk_cache.hpp).
constexpr size_t kMagicOffset = 0;
constexpr size_t kVersionOffset = 8;
constexpr size_t kHeaderSizeOffset = 12;
constexpr size_t kPayloadSizeOffset = 16;
constexpr size_t kChecksumOffset = 24;
constexpr size_t kKeyOffset = 40;
constexpr size_t kKeyChars = 32;
static_assert(kKeyOffset + kKeyChars == DiskCache::kHeaderBytes);

using Header = std::array<unsigned char, DiskCache::kHeaderBytes>;

Header encode_header(const std::string& key, const std::string& payload) {
  Header h{};
  std::memcpy(h.data() + kMagicOffset, DiskCache::kMagic, sizeof(DiskCache::kMagic));
  put_u32(h.data() + kVersionOffset, DiskCache::kFormatVersion);
  put_u32(h.data() + kHeaderSizeOffset, DiskCache::kHeaderBytes);
  put_u64(h.data() + kPayloadSizeOffset, payload.size());
  const auto checksum = Hasher().update(payload.data(), payload.size()).digest();
  put_u64(h.data() + kChecksumOffset, checksum[0]);
  put_u64(h.data() + kChecksumOffset + 8, checksum[1]);
  std::memcpy(h.data() + kKeyOffset, key.data(), kKeyChars);
  return h;
}

// ---- POSIX helpers -------------------------------------------------------------------------------------------------
// Reads exactly `size` bytes; false on error or early end of file.
bool read_all(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Writes all bytes; false (with errno set) on error.
bool write_all(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {
      errno = ENOSPC;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Makes a rename or creation in `dir` durable. Best effort: some file systems refuse fsync on directories.
void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// An open file descriptor, closed on destruction (closing a flock()ed descriptor releases the lock).
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Creates and removes a file in `dir`, to tell whether the directory is writable ("" if so, else the reason).
std::string probe_writable(const std::string& dir) {
  const std::string probe = dir + "/.probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot write in " + dir + ": " + std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

// Creates the cache layout under `root`; "" on success, else the reason it is unusable.
std::string prepare_layout(const std::string& root) {
  for (const std::string& sub : {std::string(), std::string(kKernelsSubdir), std::string(kLocksSubdir)}) {
    const std::string path = sub.empty() ? root : root + "/" + sub;
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) return "cannot create " + path + ": " + ec.message();
    if (!fs::is_directory(path, ec)) return path + " is not a directory";
  }
  for (const char* sub : {kKernelsSubdir, kLocksSubdir}) {
    std::string reason = probe_writable(root + "/" + sub);
    if (!reason.empty()) return reason;
  }
  return "";
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The names of the directory entries of `dir` (empty if it cannot be listed).
std::vector<std::string> list_names(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  return names;
}

}  // namespace

// ---- Per-key in-process slot ---------------------------------------------------------------------------------------
// Registers the caller as a user of the key's slot for its lifetime; the last user removes the slot from the map.
class DiskCache::SlotRef {
 public:
  SlotRef(DiskCache& cache, const std::string& key) : cache_(cache), key_(key) {
    std::lock_guard<std::mutex> guard(cache_.slots_mutex_);
    auto& slot = cache_.slots_[key_];
    if (!slot) slot = std::make_shared<KeySlot>();
    ++slot->users;
    slot_ = slot;
  }
  SlotRef(const SlotRef&) = delete;
  SlotRef& operator=(const SlotRef&) = delete;
  ~SlotRef() {
    std::lock_guard<std::mutex> guard(cache_.slots_mutex_);
    if (--slot_->users == 0) cache_.slots_.erase(key_);
  }
  KeySlot* operator->() const { return slot_.get(); }

 private:
  DiskCache& cache_;
  const std::string& key_;
  std::shared_ptr<KeySlot> slot_;
};

// ---- DiskCache -----------------------------------------------------------------------------------------------------
DiskCache::DiskCache(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) return;
  std::error_code ec;
  const fs::path absolute = fs::absolute(dir_, ec);
  std::string reason;
  if (ec) {
    reason = "cannot resolve the path: " + ec.message();
  } else {
    root_ = absolute.lexically_normal().string();
    while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
    try {
      reason = prepare_layout(root_);
    } catch (const std::exception& e) {  // allocation failures; the constructor must not throw
      reason = e.what();
    }
  }
  if (!reason.empty()) {
    std::fprintf(stderr, "finegemm: warning: cannot use the kernel cache directory '%s' (%s); compiling in memory\n",
                 dir_.c_str(), reason.c_str());
    return;
  }
  enabled_ = true;
}

bool DiskCache::is_valid_key(std::string_view key) {
  if (key.size() != kKeyChars) return false;
  for (char c : key)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string DiskCache::entry_path(const std::string& key) const {
  check_arg(is_valid_key(key), "DiskCache", "cache keys are 32 lowercase hex characters, got '", key, "'");
  return root_ + "/" + kKernelsSubdir + "/" + key.substr(0, 2) + "/" + key + kEntrySuffix;
}

std::optional<std::string> DiskCache::load(const std::string& key) const {
  const std::string path = entry_path(key);
  if (!enabled_) return std::nullopt;
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kHeaderBytes) return std::nullopt;

  // Header: every field must match before the payload is read.
  Header header;
  if (!read_all(fd.get(), header.data(), header.size())) return std::nullopt;
  if (std::memcmp(header.data() + kMagicOffset, kMagic, sizeof(kMagic)) != 0) return std::nullopt;
  if (get_u32(header.data() + kVersionOffset) != kFormatVersion) return std::nullopt;
  if (get_u32(header.data() + kHeaderSizeOffset) != kHeaderBytes) return std::nullopt;
  if (std::memcmp(header.data() + kKeyOffset, key.data(), kKeyChars) != 0) return std::nullopt;
  const uint64_t payload_size = get_u64(header.data() + kPayloadSizeOffset);
  if (payload_size != file_size - kHeaderBytes) return std::nullopt;

  // Payload and its checksum.
  std::string payload(payload_size, '\0');
  if (!read_all(fd.get(), payload.data(), payload.size())) return std::nullopt;
  const auto checksum = Hasher().update(payload.data(), payload.size()).digest();
  if (get_u64(header.data() + kChecksumOffset) != checksum[0] ||
      get_u64(header.data() + kChecksumOffset + 8) != checksum[1])
    return std::nullopt;
  return payload;
}

std::string DiskCache::get_or_build(const std::string& key, const std::function<std::string()>& build,
                                    bool* built) {
  check_arg(is_valid_key(key), "DiskCache::get_or_build", "cache keys are 32 lowercase hex characters, got '", key,
            "'");
  if (built) *built = false;
  if (!enabled_) {
    if (built) *built = true;
    return build();
  }
  // Fast path: a valid entry needs no lock.
  if (auto hit = load(key)) return std::move(*hit);

  // One thread of this process per key past this point; the others wait here and reuse its result.
  SlotRef slot(*this, key);
  std::lock_guard<std::mutex> key_guard(slot->mutex);
  if (slot->payload) return *slot->payload;

  // One process per key past this point. If the lock cannot be taken we still build (and warn once).
  FileDescriptor lock(lock_key(key));
  if (auto hit = load(key)) {
    slot->payload = *hit;
    return std::move(*hit);
  }
  if (lock.get() >= 0) remove_stale_temps(key);

  std::string payload = build();
  if (built) *built = true;
  write_entry(key, payload);
  slot->payload = payload;
  return payload;
}

int DiskCache::lock_key(const std::string& key) {
  const std::string locks_dir = root_ + "/" + kLocksSubdir;
  const std::string path = locks_dir + "/" + key + kLockSuffix;
  for (int attempt = 0; attempt < kMaxLockAttempts; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EACCES) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // a lock file of another user
    if (fd < 0 && errno == ENOENT) {  // the locks directory was removed under us
      std::error_code ec;
      fs::create_directories(locks_dir, ec);
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    }
    if (fd < 0) {
      warn_write_failure("lock file " + path, errno);
      return -1;
    }
    int rc;
    do {
      rc = ::flock(fd, LOCK_EX);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      warn_write_failure("lock file " + path, errno);
      ::close(fd);
      return -1;
    }
    // NOTE: clear() may unlink a lock file between our open() and flock(); then we hold a lock nobody else can see.
    // Only a lock on the file currently at `path` counts.
    struct stat held {}, current {};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &current) == 0 && held.st_dev == current.st_dev &&
        held.st_ino == current.st_ino)
      return fd;
    ::close(fd);
  }
  warn_write_failure("lock file " + path, EAGAIN);
  return -1;
}

void DiskCache::remove_stale_temps(const std::string& key) const {
  // Called with the key's lock held: every temporary file of this key belongs to a writer that died.
  const std::string shard = root_ + "/" + kKernelsSubdir + "/" + key.substr(0, 2);
  const std::string prefix = key + kTempInfix;
  for (const std::string& name : list_names(shard))
    if (name.compare(0, prefix.size(), prefix) == 0) ::unlink((shard + "/" + name).c_str());
}

bool DiskCache::write_entry(const std::string& key, const std::string& payload) {
  const std::string kernels_dir = root_ + "/" + kKernelsSubdir;
  const std::string shard = kernels_dir + "/" + key.substr(0, 2);
  const std::string final_path = shard + "/" + key + kEntrySuffix;
  const std::string temp_path = shard + "/" + key + kTempInfix + std::to_string(::getpid()) + "." +
                                std::to_string(temp_counter_.fetch_add(1));

  std::error_code ec;
  if (fs::create_directories(shard, ec)) fsync_dir(kernels_dir);
  if (ec) {
    warn_write_failure("directory " + shard, ec.value());
    return false;
  }
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    warn_write_failure(temp_path, errno);
    return false;
  }
  const Header header = encode_header(key, payload);
  bool ok = write_all(fd, header.data(), header.size()) && write_all(fd, payload.data(), payload.size()) &&
            ::fsync(fd) == 0;
  int error_number = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    error_number = errno;
  }
  if (ok && ::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    ok = false;
    error_number = errno;
  }
  if (!ok) {
    ::unlink(temp_path.c_str());
    warn_write_failure(final_path, error_number);
    return false;
  }
  fsync_dir(shard);
  return true;
}

void DiskCache::warn_write_failure(const std::string& what, int error_number) {
  if (warned_write_.exchange(true)) return;
  std::fprintf(stderr,
               "finegemm: warning: cannot write to the kernel cache '%s' (%s: %s); kernels missing from it are "
               "compiled in memory\n",
               dir_.c_str(), what.c_str(), std::strerror(error_number));
}

DiskCache::Usage DiskCache::usage() const {
  Usage usage;
  if (!enabled_) return usage;
  const std::string kernels_dir = root_ + "/" + kKernelsSubdir;
  for (const std::string& shard : list_names(kernels_dir)) {
    const std::string shard_dir = kernels_dir + "/" + shard;
    for (const std::string& name : list_names(shard_dir)) {
      if (!ends_with(name, kEntrySuffix)) continue;
      struct stat st {};
      if (::stat((shard_dir + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      ++usage.entries;
      usage.bytes += static_cast<uint64_t>(st.st_size);
    }
  }
  return usage;
}

void DiskCache::clear() {
  if (!enabled_) return;
  // Entries and temporary files, then the shard directories that became empty.
  const std::string kernels_dir = root_ + "/" + kKernelsSubdir;
  for (const std::string& shard : list_names(kernels_dir)) {
    const std::string shard_dir = kernels_dir + "/" + shard;
    for (const std::string& name : list_names(shard_dir))
      if (ends_with(name, kEntrySuffix) || name.find(kTempInfix) != std::string::npos)
        ::unlink((shard_dir + "/" + name).c_str());
    ::rmdir(shard_dir.c_str());
  }
  // Lock files that no process holds (lock_key() notices a lock file unlinked under it and retries).
  const std::string locks_dir = root_ + "/" + kLocksSubdir;
  for (const std::string& name : list_names(locks_dir)) {
    if (!ends_with(name, kLockSuffix)) continue;
    const std::string path = locks_dir + "/" + name;
    FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() >= 0 && ::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) ::unlink(path.c_str());
  }
}

}  // namespace finegemm::jit
