// The bench's kernel timer bookkeeping, on synthetic CUPTI records: which kernels count for which timed call, and the
// median. (Loading CUPTI and recording need a GPU; the bench exercises them.)
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "../../tools/lib/kernel_timer.hpp"

namespace ft = finegemm::tools;

namespace {

constexpr uint64_t kFirst = 7ull << 32;  // a recording's first external id

ft::KernelRecord kernel(uint32_t correlation_id, uint64_t start_ns, uint64_t end_ns, const char* name = "gemm") {
  return {correlation_id, start_ns, end_ns, name};
}

TEST(KernelTimer, OneKernelPerCall) {
  // Records arrive in any order; correlation records may follow the kernels they name.
  const std::vector<ft::KernelRecord> kernels = {kernel(12, 5000, 14000), kernel(10, 1000, 11000),
                                                 kernel(14, 20000, 29500)};
  const std::vector<ft::CorrelationRecord> correlations = {{10, kFirst + 0}, {14, kFirst + 2}, {12, kFirst + 1}};
  const ft::CallKernelTimes t = ft::assign_kernels_to_calls(kernels, correlations, kFirst, 3);
  ASSERT_EQ(t.us.size(), 3u);
  EXPECT_DOUBLE_EQ(t.us[0], 10.0);
  EXPECT_DOUBLE_EQ(t.us[1], 9.0);
  EXPECT_DOUBLE_EQ(t.us[2], 9.5);
  EXPECT_EQ(t.kernels, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(t.unassigned, 0);
}

TEST(KernelTimer, KernelsOfOneCallAreSummed) {
  // cuBLASLt split-K: the GEMM and the reduce kernel were launched by two API calls inside the same timed call.
  const std::vector<ft::KernelRecord> kernels = {kernel(20, 100, 8100), kernel(21, 8600, 9600, "splitKreduce"),
                                                 kernel(30, 50000, 58000), kernel(31, 58400, 59400, "splitKreduce")};
  const std::vector<ft::CorrelationRecord> correlations = {
      {20, kFirst}, {21, kFirst}, {30, kFirst + 1}, {31, kFirst + 1}};
  const ft::CallKernelTimes t = ft::assign_kernels_to_calls(kernels, correlations, kFirst, 2);
  EXPECT_DOUBLE_EQ(t.us[0], 9.0);
  EXPECT_DOUBLE_EQ(t.us[1], 9.0);
  EXPECT_EQ(t.kernels, (std::vector<int>{2, 2}));
}

TEST(KernelTimer, KernelsOutsideTheCallsDoNotCount) {
  // The L2 flush (or any kernel launched outside a pushed region) has a correlation id no external record names;
  // records of another recording (other external ids) are ignored too.
  const std::vector<ft::KernelRecord> kernels = {kernel(1, 100, 900000, "flush"), kernel(2, 1000000, 1010000),
                                                 kernel(3, 2000000, 2900000, "flush"), kernel(4, 3000000, 3010000),
                                                 kernel(5, 4000000, 4500000, "earlier recording")};
  const std::vector<ft::CorrelationRecord> correlations = {{2, kFirst}, {4, kFirst + 1}, {5, kFirst - (1ull << 32)}};
  const ft::CallKernelTimes t = ft::assign_kernels_to_calls(kernels, correlations, kFirst, 2);
  EXPECT_DOUBLE_EQ(t.us[0], 10.0);
  EXPECT_DOUBLE_EQ(t.us[1], 10.0);
  EXPECT_EQ(t.unassigned, 3);
  EXPECT_EQ(t.first_unassigned_name, "flush");
}

TEST(KernelTimer, ExternalIdsPastTheLastCallAreIgnored) {
  const std::vector<ft::KernelRecord> kernels = {kernel(1, 1000, 2000), kernel(2, 3000, 4000)};
  const std::vector<ft::CorrelationRecord> correlations = {{1, kFirst}, {2, kFirst + 1}};
  const ft::CallKernelTimes t = ft::assign_kernels_to_calls(kernels, correlations, kFirst, 1);
  ASSERT_EQ(t.us.size(), 1u);
  EXPECT_DOUBLE_EQ(t.us[0], 1.0);
  EXPECT_EQ(t.unassigned, 1);
}

TEST(KernelTimer, RuntimeAndDriverRecordsOfOneLaunchAgree) {
  // A runtime launch and the driver call under it can both be preceded by an external correlation record with the
  // same pair: not a conflict, and the kernel counts once.
  const std::vector<ft::KernelRecord> kernels = {kernel(40, 1000, 3000)};
  const std::vector<ft::CorrelationRecord> correlations = {{40, kFirst}, {40, kFirst}};
  const ft::CallKernelTimes t = ft::assign_kernels_to_calls(kernels, correlations, kFirst, 1);
  EXPECT_DOUBLE_EQ(t.us[0], 2.0);
  EXPECT_EQ(t.kernels[0], 1);
  EXPECT_EQ(t.conflicting, 0);
}

TEST(KernelTimer, ConflictsAndMissingTimestampsAreCountedNotTimed) {
  const std::vector<ft::KernelRecord> kernels = {kernel(50, 1000, 2000), kernel(51, 0, 0), kernel(52, 5000, 4000),
                                                 kernel(53, 6000, 7000)};
  const std::vector<ft::CorrelationRecord> correlations = {{50, kFirst}, {50, kFirst + 1}, {51, kFirst},
                                                           {52, kFirst + 1}, {53, kFirst + 1}};
  const ft::CallKernelTimes t = ft::assign_kernels_to_calls(kernels, correlations, kFirst, 2);
  EXPECT_EQ(t.conflicting, 1);
  EXPECT_EQ(t.incomplete, 2);
  EXPECT_EQ(t.kernels, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(t.us[0], 0.0);
  EXPECT_DOUBLE_EQ(t.us[1], 1.0);
}

TEST(KernelTimer, CallsWithoutKernelsShowZeroCount) {
  const std::vector<ft::KernelRecord> kernels = {kernel(60, 1000, 2000)};
  const std::vector<ft::CorrelationRecord> correlations = {{60, kFirst + 2}};
  const ft::CallKernelTimes t = ft::assign_kernels_to_calls(kernels, correlations, kFirst, 3);
  EXPECT_EQ(t.kernels, (std::vector<int>{0, 0, 1}));
  EXPECT_THROW(ft::assign_kernels_to_calls(kernels, correlations, kFirst, -1), std::invalid_argument);
  EXPECT_TRUE(ft::assign_kernels_to_calls(kernels, correlations, kFirst, 0).us.empty());
}

TEST(KernelTimer, SummarizeSamples) {
  const ft::SampleStats odd = ft::summarize_samples({9.0, 1.0, 5.0, 3.0, 7.0});
  EXPECT_DOUBLE_EQ(odd.median, 5.0);
  EXPECT_DOUBLE_EQ(odd.min, 1.0);
  EXPECT_DOUBLE_EQ(odd.max, 9.0);
  EXPECT_DOUBLE_EQ(odd.mean, 5.0);
  const ft::SampleStats even = ft::summarize_samples({4.0, 100.0, 1.0, 2.0});
  EXPECT_DOUBLE_EQ(even.median, 3.0);
  EXPECT_DOUBLE_EQ(even.mean, 26.75);
  EXPECT_DOUBLE_EQ(ft::summarize_samples({2.5}).median, 2.5);
  EXPECT_THROW(ft::summarize_samples({}), std::invalid_argument);
}

}  // namespace
