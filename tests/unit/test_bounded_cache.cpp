// The bounded map in which warm calls find their launch plans and pointer checks (src/common/bounded_cache.hpp).
#include <gtest/gtest.h>

#include <functional>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

#include "common/bounded_cache.hpp"

namespace {

using finegemm::BoundedCache;
using IntCache = BoundedCache<int, std::shared_ptr<const int>, std::hash<int>>;

TEST(BoundedCache, FindsWhatWasAddedAndNothingElse) {
  IntCache cache;
  EXPECT_EQ(cache.find(1), nullptr);
  const auto kept = cache.add(1, std::make_shared<const int>(10));
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(*kept, 10);
  EXPECT_EQ(cache.find(1), kept);
  EXPECT_EQ(cache.find(2), nullptr);
}

TEST(BoundedCache, TheFirstValueAddedUnderAKeyStays) {
  IntCache cache;
  const auto first = cache.add(7, std::make_shared<const int>(1));
  const auto second = cache.add(7, std::make_shared<const int>(2));
  EXPECT_EQ(second, first);
  EXPECT_EQ(*cache.find(7), 1);
}

TEST(BoundedCache, IsClearedWhenFullAndValuesHeldByCallersSurvive) {
  IntCache cache;
  const auto held = cache.add(0, std::make_shared<const int>(-1));
  for (int k = 1; k < int(IntCache::kMaxEntries); ++k) cache.add(k, std::make_shared<const int>(k));
  EXPECT_EQ(*cache.find(0), -1);  // full, nothing dropped yet
  cache.add(int(IntCache::kMaxEntries), std::make_shared<const int>(0));  // the add past the bound clears
  EXPECT_EQ(cache.find(0), nullptr);
  EXPECT_EQ(cache.find(int(IntCache::kMaxEntries) - 1), nullptr);
  EXPECT_NE(cache.find(int(IntCache::kMaxEntries)), nullptr);
  EXPECT_EQ(*held, -1);
}

TEST(BoundedCache, ThreadsAddingTheSameKeysAllGetOneValuePerKey) {
  IntCache cache;
  constexpr int kThreads = 8, kKeys = 512;
  std::vector<std::vector<std::shared_ptr<const int>>> got(kThreads, std::vector<std::shared_ptr<const int>>(kKeys));
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int k = 0; k < kKeys; ++k) {
        auto found = cache.find(k);
        got[t][k] = found ? found : cache.add(k, std::make_shared<const int>(t));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < kKeys; ++k) {
    const auto kept = cache.find(k);
    ASSERT_NE(kept, nullptr);
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[t][k], kept) << "key " << k << ", thread " << t;
  }
}

TEST(BoundedCache, PlainValuesReadAsAbsentByTheirDefault) {
  BoundedCache<int, bool, std::hash<int>> checked;
  EXPECT_FALSE(checked.find(3));
  EXPECT_TRUE(checked.add(3, true));
  EXPECT_TRUE(checked.find(3));
}

}  // namespace
