// A thread-safe map from a call's arguments to what was worked out for them (a GEMM's launch plan, a quantizer's
// pointers checked), so that a warm call finds it instead of working it out again.
//
// Keys hold the caller's pointers, so a caller that never reuses buffers would grow the map without end: it is cleared
// when full. Values are shared pointers or plain values, so a caller still holding one is not affected.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace finegemm {

template <class Key, class Value, class Hash>
class BoundedCache {
 public:
  static constexpr size_t kMaxEntries = 4096;

  /// The value kept under `key`, or Value{} where there is none.
  Value find(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    return it != map_.end() ? it->second : Value{};
  }

  /// Keeps `value` under `key` and returns the value kept there: where another thread added the key first, its value
  /// stays and is returned.
  Value add(const Key& key, Value value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (map_.size() >= kMaxEntries) map_.clear();
    return map_.emplace(key, std::move(value)).first->second;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<Key, Value, Hash> map_;
};

}  // namespace finegemm
