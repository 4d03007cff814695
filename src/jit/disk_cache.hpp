// The content-addressed, cross-process disk cache of compiled kernels.
//
// Layout under the cache directory (no absolute paths anywhere, so a copied directory is hit as-is):
//   kernels/<k0k1>/<key>.bin              one entry per key, sharded by the first two hex digits of the key
//   kernels/<k0k1>/<key>.tmp.<pid>.<n>    an entry being written (or left by a killed process); never loaded
//   locks/<key>.lock                      empty file, flock()ed exclusively while a key is being built
//
// Entry file: a 72-byte little-endian header, then the payload.
//   offset  0  char[8]   magic "FGMKRN01"
//   offset  8  u32       format version (1)
//   offset 12  u32       header size in bytes (72)
//   offset 16  u64       payload size in bytes (the file is exactly header + payload bytes)
//   offset 24  u64[2]    Hasher digest {low, high} of the payload
//   offset 40  char[32]  the key, so that an entry copied or renamed to the wrong key is rejected
//   offset 72  payload
// An entry is written to a temporary file in its shard directory, fsynced, renamed over <key>.bin and the directory
// fsynced, so readers only ever see a complete old or a complete new entry. An entry that fails any check (short,
// wrong magic/version/size/key/checksum) is a miss and is replaced by the next store.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace finegemm::jit {

class DiskCache {
 public:
  struct Usage {
    uint64_t entries = 0;  ///< number of <key>.bin files
    uint64_t bytes = 0;    ///< their total size on disk, headers included
  };

  static constexpr char kMagic[8] = {'F', 'G', 'M', 'K', 'R', 'N', '0', '1'};
  static constexpr uint32_t kFormatVersion = 1;
  static constexpr uint32_t kHeaderBytes = 72;

  /// `dir` == "" disables the cache. A missing directory is created with its parents; if that fails or the directory
  /// is not writable, the cache is disabled with one warning on stderr. Never throws.
  explicit DiskCache(std::string dir);
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  bool enabled() const { return enabled_; }
  /// The directory as given to the constructor (also when the cache was disabled because it was unusable).
  const std::string& dir() const { return dir_; }

  /// True for 32 lowercase hex characters, the only keys the cache accepts.
  static bool is_valid_key(std::string_view key);
  /// Where the entry for `key` lives (whether or not it exists). Throws Error on an invalid key.
  std::string entry_path(const std::string& key) const;

  /// The payload stored for `key`, or nullopt if absent, unreadable or corrupt (or if the cache is disabled).
  /// Throws Error on an invalid key.
  std::optional<std::string> load(const std::string& key) const;

  /// Returns the payload for `key`, running `build` only if no valid entry exists. Builds of one key are serialized
  /// across threads (a per-key mutex) and processes (a per-key flock): waiters re-check and reuse the result, so
  /// concurrent callers build once. The new entry is stored atomically; if storing fails (disk full, permissions) the
  /// built payload is still returned and one warning is printed. Exceptions from `build` propagate and store nothing.
  /// `*built` (if given) tells whether this call ran `build`. Throws Error on an invalid key.
  std::string get_or_build(const std::string& key, const std::function<std::string()>& build, bool* built = nullptr);

  /// Number and total size of the entries on disk.
  Usage usage() const;
  /// Removes every entry and temporary file, and the lock files no process holds. Safe while other processes use
  /// the cache: at worst a concurrent build is repeated or its store fails with a warning.
  void clear();

 private:
  struct KeySlot {
    std::mutex mutex;                    // held while the key is looked up / built in this process
    std::optional<std::string> payload;  // the result, handed to threads that waited on `mutex`
    int users = 0;                       // guarded by slots_mutex_
  };
  class SlotRef;

  bool write_entry(const std::string& key, const std::string& payload);
  void remove_stale_temps(const std::string& key) const;
  int lock_key(const std::string& key);
  void warn_write_failure(const std::string& what, int error_number);

  std::string dir_;
  std::string root_;  // absolute form of dir_, used for every file operation
  bool enabled_ = false;
  std::mutex slots_mutex_;
  std::unordered_map<std::string, std::shared_ptr<KeySlot>> slots_;
  std::atomic<bool> warned_write_{false};
  std::atomic<uint64_t> temp_counter_{0};
};

}  // namespace finegemm::jit
