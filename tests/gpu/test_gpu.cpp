// GPU tests: need a Hopper GPU. Without one every test reports SKIPPED (loudly), never passed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <atomic>
#include <climits>
#include <mutex>

#include "finegemm/device/common/gemm_args.cuh"
#include "finegemm/finegemm.hpp"
#include "heuristics/heuristics.hpp"
#include "jit/driver.hpp"
#include "jit/launch.hpp"
#include "jit/runtime.hpp"
#include "test_headers.hpp"
#include "reference/reference.hpp"
#include "gpu/gpu_test.hpp"
#include "lib/device_buffer.hpp"
#include "lib/gemm_problem.hpp"
#include "lib/jit_kernel.hpp"
#include "lib/shapes.hpp"
#include "lib/timing.hpp"

namespace fg = finegemm;
namespace ft = finegemm::tools;
namespace fr = finegemm::reference;
using fg::GemmKind;

namespace {

class Gpu : public ft::GpuTest {
 protected:
  /// The weight gradient's operands (1x128 scales of both) on `shapes`, each checked as expect_correct does: fp32 D +=
  /// A x B^T with C = D, or with `bf16_output` bf16 D = A x B^T without C. Seeds from `seed0`, data kinds alternating.
  void expect_wgrad_operands_correct(const std::string& tag, const std::vector<ft::ProblemShape>& shapes,
                                     uint64_t seed0, bool bf16_output) {
    const auto problem = [&](const ft::ProblemShape& s) {
      fg::Problem q = ft::problem_of(s, false);
      if (bf16_output) {
        q.d_dtype = fg::DType::kBFloat16;
        q.accumulate = false;
      }
      return q;
    };
    std::vector<fg::Problem> problems;
    for (const auto& s : shapes) problems.push_back(problem(s));
    ft::precompile_all(problems, fg::get_num_sms(), int(std::thread::hardware_concurrency()));
    int i = 0;
    for (const auto& s : shapes) {
      ft::ProblemOptions opt;
      opt.seed = seed0 + uint64_t(i);
      opt.data = i++ % 2 == 0 ? ft::DataKind::kNormal : ft::DataKind::kUniform;
      opt.bf16_output = bf16_output;
      ft::GemmProblem p(s, opt);
      expect_correct(tag, p, s, false, fg::describe_config(problem(s)));
    }
  }

  /// Runs `problem` with poisoned output (wgrad with C aliasing D: D = C) and checks it; returns the verdict.
  ft::Verdict run_and_check(ft::GemmProblem& problem, bool k_major) {
    problem.poison_output(stream_);
    problem.run(k_major, stream_);
    FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return ft::check_download(problem, ft::gpu_reference(problem));
  }

  /// Runs `problem` (of shape `s`) with MN-major or K-major SA, checks it, prints one line `[tag] shape SA note |
  /// verdict` and expects it correct; a failure names the case and `note` (e.g. its configuration).
  void expect_correct(const std::string& tag, ft::GemmProblem& problem, const ft::ProblemShape& s, bool k_major,
                      const std::string& note = {}) {
    const ft::Verdict v = run_and_check(problem, k_major);
    const char* sa = k_major ? "K-major" : "MN-major";
    std::printf("[%s] %-40s SA %-8s %s%s%s\n", tag.c_str(), s.describe().c_str(), sa, note.c_str(),
                note.empty() ? "" : " | ", v.summary.c_str());
    EXPECT_TRUE(v.ok) << "[" << tag << "] " << s.describe() << " " << sa << (note.empty() ? "" : " ") << note << "\n"
                      << v.summary;
  }

  void precompile(const std::vector<ft::ProblemShape>& shapes) {
    std::vector<fg::Problem> problems;
    for (const auto& s : shapes)
      for (bool k_major : {false, true}) problems.push_back(ft::problem_of(s, k_major));
    ft::precompile_all(problems, fg::get_num_sms(), int(std::thread::hardware_concurrency()));
  }

  /// What `enqueue` puts on `stream`, captured into an instantiated graph (the caller destroys it).
  template <class F>
  static cudaGraphExec_t capture(cudaStream_t stream, F&& enqueue) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    FG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    enqueue();
    FG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    FG_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);  // the instantiated graph does not need it
    return exec;
  }

  /// Runs `problem` again `runs - 1` times (output poisoned before each) and returns the first run whose output
  /// differs from `first` by a single bit, or 0 when every one matches.
  int first_differing_run(ft::GemmProblem& problem, const std::vector<uint16_t>& first, int runs) {
    for (int run = 1; run < runs; ++run) {
      problem.poison_output(stream_);
      problem.run(false, stream_);
      FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
      if (problem.download_output() != first) return run;
    }
    return 0;
  }
};

/// A file of the repository (the build may live outside it, and the binary run from anywhere).
std::string repository_file(const char* relative) { return std::string(FINEGEMM_SOURCE_DIR) + "/" + relative; }

ft::ProblemShape shape(GemmKind kind, int groups, int64_t m, int64_t n, int64_t k) {
  ft::ProblemShape s;
  s.kind = kind;
  s.groups = groups;
  s.m = m;
  s.n = n;
  s.k = k;
  return s;
}

/// Router-like rows per expert for a grouped shape: drawn from 0.5x..1.5x of its m, every fifth expert from the
/// second on empty.
std::vector<int> router_rows(const ft::ProblemShape& s, std::mt19937& rng) {
  std::vector<int> rows;
  for (int e = 0; e < s.groups; ++e) {
    std::uniform_int_distribution<int64_t> dist(s.m / 2, s.m + s.m / 2);
    rows.push_back(e % 5 == 1 ? 0 : int(dist(rng)));
  }
  return rows;
}

/// The weight-gradient GEMM: fp32 D = C + A x B^T, 1x128 scales on both operands.
ft::ProblemShape wgrad(int64_t m, int64_t n, int64_t k) {
  ft::ProblemShape s = shape(GemmKind::kNormal, 1, m, n, k);
  s.wgrad = true;
  return s;
}

/// The bits of an fp32 output, for bitwise comparisons (NaN == NaN).
std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * 4);
  return out;
}

}  // namespace

TEST_F(Gpu, JitKernelWithClusterAndLargeSharedMemory) {
  char dir[] = "/tmp/finegemm-jit-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  fg::jit::Options options;
  options.cache_dir = dir;
  fg::jit::KernelSpec spec{"finegemm/tests/jit_smoke.cuh", "finegemm::test::jit_smoke_kernel<16384u>",
                           "(float*, const float*)", false, &fg::test::test_headers()};
  auto t0 = std::chrono::steady_clock::now();
  fg::jit::Runtime cold(options);
  auto binary = cold.binary(spec);
  const double cold_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(binary->compiled);
  t0 = std::chrono::steady_clock::now();
  fg::jit::Runtime warm(options);
  auto again = warm.binary(spec);
  const double warm_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(again->compiled);
  std::printf("[jit] cold NVRTC compile of the smoke kernel: %.3f s; warm load from the disk cache: %.3f ms\n", cold_s,
              warm_s * 1e3);

  constexpr int kFloats = 16384, kBlocks = 8;  // 64 KB of dynamic shared memory per CTA
  warm.current_device();
  const CUfunction fn = warm.function(*again);
  std::vector<float> in(size_t(kFloats * kBlocks));
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(i % 977) * 0.5f;
  ft::DeviceBuffer d_in(in.size() * 4), d_out(in.size() * 4);
  d_in.upload(in.data(), in.size() * 4);
  float* out_ptr = d_out.as<float>();
  const float* in_ptr = d_in.as<float>();
  void* params[] = {&out_ptr, &in_ptr};
  CUlaunchConfig config{};
  config.gridDimX = kBlocks;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 128;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = kFloats * 4;
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = 2;
  attr.value.clusterDim.y = attr.value.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  fg::jit::check_cu(fg::jit::driver().cuLaunchKernelEx(&config, fn, params, nullptr), "smoke launch");
  FG_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out(in.size());
  d_out.download(out.data(), out.size() * 4);
  for (int b = 0; b < kBlocks; ++b)
    for (int i = 0; i < kFloats; ++i) {
      const size_t idx = size_t(b * kFloats + i), peer = size_t((b ^ 1) * kFloats + i);
      ASSERT_EQ(out[idx], in[idx] * 2.0f + in[peer]) << "block " << b << " element " << i;
    }
  std::filesystem::remove_all(dir);
}

TEST_F(Gpu, DenseSeedShapes) {
  std::vector<ft::ProblemShape> shapes;
  for (const auto& s : ft::read_shape_file(repository_file("data/shapes/deepseek_v3.csv")))
    if (s.kind == GemmKind::kNormal) shapes.push_back(s);
  ASSERT_EQ(shapes.size(), 18u);
  precompile(shapes);
  int i = 0;
  for (const auto& s : shapes)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(100 + i++);
      ft::GemmProblem p(s, opt);
      expect_correct("dense", p, s, k_major);
    }
}

TEST_F(Gpu, DenseAwkwardShapes) {
  std::vector<ft::ProblemShape> shapes;
  for (int64_t m : {1, 3, 7, 13, 63, 65, 129, 255, 4097})
    for (int64_t n : {576, 2112, 7232})
      for (int64_t k : {128, 576, 7168}) shapes.push_back(shape(GemmKind::kNormal, 1, m, n, k));
  // Split 64x64 tiles over two row blocks, a partial last n-block (and K not a multiple of 7168's 56 K blocks).
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{65, 1096, 7168}, {127, 1496, 7168},
                                {100, 1664, 7424}})
    shapes.push_back(shape(GemmKind::kNormal, 1, m, n, k));
  // 64-row tiles over three and four row blocks in one round: a last block of fewer than 48 rows moved up (136, 193,
  // 208, 216 rows), one of more kept where it falls (180, 250), partial last n-blocks.
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{136, 2112, 7168}, {193, 2104, 4096},
                                {208, 2304, 3200}, {216, 2560, 7168}, {180, 4104, 3072}, {250, 2104, 4096}})
    shapes.push_back(shape(GemmKind::kNormal, 1, m, n, k));
  // 128-row tiles over two row blocks in one round: a second block of 98 and 108 rows moved up, one of 116 kept.
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{226, 4104, 7168}, {236, 3064, 7168},
                                {244, 7168, 2048}})
    shapes.push_back(shape(GemmKind::kNormal, 1, m, n, k));
  precompile(shapes);
  int i = 0, failures = 0;
  for (const auto& s : shapes)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(500 + i++);
      ft::GemmProblem p(s, opt);
      const ft::Verdict v = run_and_check(p, k_major);
      if (!v.ok) ++failures;
      EXPECT_TRUE(v.ok) << s.describe() << (k_major ? " K-major" : " MN-major") << "\n" << v.summary;
    }
  std::printf("[dense-awkward] %zu cases, %d failures\n", shapes.size() * 2, failures);
}

// Dense 256x128 tiles with M > 256 ending in a block of at most 128 rows, where that saves a round of tiles: the
// wide-tail kernel runs that block as 128 rows moved up to end at row M, times two n-blocks per tile
// (KernelConfig::wide_tail). Cases: a 61-row tail with M not a multiple of 4 (the moved-up rows reach 3 past M), a
// 4-row tail, a 128-row tail with a partial last n-block inside a wide tile and a partial last K block, and an odd
// n-block count (the last tail tile narrow, one wave); on 132 SMs each picks the wide-tail kernel with MN-major SA and
// with K-major SA by TMA boxes (K-major SA gathered, K below 4096 or not a multiple of 512, keeps the plain kernels).
TEST_F(Gpu, DenseTailAsWideTiles) {
  const ft::ProblemShape shapes[] = {shape(GemmKind::kNormal, 1, 4157, 7168, 2048),
                                     shape(GemmKind::kNormal, 1, 4100, 4096, 7168),
                                     shape(GemmKind::kNormal, 1, 4224, 1000, 4160),
                                     shape(GemmKind::kNormal, 1, 2148, 1920, 7168)};
  precompile(std::vector<ft::ProblemShape>(std::begin(shapes), std::end(shapes)));
  const int num_sms = fg::get_num_sms();
  int i = 0;
  for (const auto& s : shapes)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(2600 + i++);
      ft::GemmProblem p(s, opt);
      const std::string config = fg::describe_config(ft::problem_of(s, k_major), num_sms);
      const bool gathered = config.find("sa=k-gather") != std::string::npos;
      if (num_sms == 132)
        EXPECT_EQ(config.find("BM=256 BN=128") != std::string::npos && config.find("wide-tail") != std::string::npos,
                  !gathered)
            << s.describe() << ": the pick changed: " << config;
      expect_correct("wide-tail", p, s, k_major, config.substr(0, config.find(" grid")));
    }
}

TEST_F(Gpu, GroupedContiguous) {
  struct Case {
    int groups;
    int64_t expected, n, k;
  };
  const Case cases[] = {{1, 300, 2112, 576}, {2, 700, 576, 7168}, {8, 256, 4096, 2048}, {32, 130, 2112, 576}, {256, 40, 576, 512}};
  std::vector<ft::ProblemShape> shapes;
  for (const auto& c : cases) shapes.push_back(shape(GemmKind::kGroupedContiguous, c.groups, c.expected, c.n, c.k));
  shapes.push_back(shape(GemmKind::kGroupedContiguous, 4, 8192, 4096, 7168));  // a seed shape, full size
  precompile(shapes);
  std::mt19937 rng(7);
  int i = 0;
  for (const auto& s : shapes)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(900 + i++);
      opt.expert_rows = router_rows(s, rng);
      ft::GemmProblem p(s, opt);
      expect_correct("contiguous", p, s, k_major);
    }
}

// The contiguous layout with m_indices, experts aligned to 64 rows: the heuristic picks 64-row tiles (each holds one
// expert from its first row on, then padding), every expert row is computed and every padding row keeps its poison.
// Random counts with empty experts, experts of 1 and 64 rows, both SA layouts; no device error flag.
TEST_F(Gpu, ContiguousAlignedTo64Rows) {
  struct Case {
    int groups;
    int64_t expected, n, k;
    std::vector<int> expert_rows;  // empty: random around `expected`, every fifth expert empty
  };
  const Case cases[] = {{8, 256, 4096, 2048, {}},
                        {32, 130, 2112, 576, {}},
                        {256, 40, 576, 512, {}},
                        {4, 4000, 4096, 7168, {}},
                        {8, 60, 576, 7168, {70, 0, 1, 63, 64, 65, 0, 129}}};
  std::vector<ft::ProblemShape> shapes;
  for (const auto& c : cases) shapes.push_back(shape(GemmKind::kGroupedContiguous, c.groups, c.expected, c.n, c.k));
  std::mt19937 rng(29);
  int i = 0;
  for (size_t c = 0; c < std::size(cases); ++c)
    for (bool k_major : {false, true}) {
      const ft::ProblemShape& s = shapes[c];
      ft::ProblemOptions opt;
      opt.seed = uint64_t(3300 + i++);
      opt.m_alignment = 64;
      opt.expert_rows = cases[c].expert_rows;
      if (opt.expert_rows.empty()) opt.expert_rows = router_rows(s, rng);
      ft::GemmProblem p(s, opt);
      fg::Problem problem = ft::problem_of(s, k_major);
      problem.m = p.rows();
      problem.m_alignment = 64;
      const std::string config = fg::describe_config(problem, fg::get_num_sms());
      EXPECT_EQ(config.rfind("BM=64 ", 0), 0u) << s.describe() << ": " << config;
      fg::reset_device_error_flags();
      expect_correct("contiguous-64", p, s, k_major, config);
      EXPECT_EQ(fg::device_error_flags(), 0u) << s.describe();
    }
}

// Contiguous 256-row tiles: a block's half (at most 128 rows of one expert) runs as a wide tile over two n-blocks
// (the second B tile in the A stage's free half, wave 1 stored 128 columns to the right). Cases with halves in both
// scheduler passes, experts of 1 row, empty experts, an odd n-block count (the last half stays narrow), a partial
// last n-block inside a wide tile and a partial last K block; each a shape the heuristic gives 256x128 tiles on 132
// SMs (checked below).
TEST_F(Gpu, ContiguousHalvesAsWideTiles) {
  struct Case {
    ft::ProblemShape shape;
    std::vector<int> expert_rows;
  };
  const Case cases[] = {
      {shape(GemmKind::kGroupedContiguous, 6, 1000, 1408, 7168), {1000, 0, 1300, 128, 1, 2200}},  // 11 n-blocks
      {shape(GemmKind::kGroupedContiguous, 5, 1500, 1000, 4160), {1500, 1700, 129, 1200, 3000}},  // N, K partial
      {shape(GemmKind::kGroupedContiguous, 8, 2000, 4096, 7168), {1900, 2300, 2000, 1800, 2200, 2050, 1700, 2100}},
      // 63 blocks x 32 n-blocks = 2016 tiles: with 132 SMs the last round's 36 tiles run as halves (kTailHalves).
      {shape(GemmKind::kGroupedContiguous, 8, 2000, 4096, 7168), {1900, 2300, 2000, 1800, 2200, 2050, 1700, 1650}},
  };
  std::vector<ft::ProblemShape> shapes;
  for (const auto& c : cases) shapes.push_back(c.shape);
  precompile(shapes);
  const int num_sms = fg::get_num_sms();
  int i = 0;
  for (const auto& c : cases)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(2400 + i++);
      opt.expert_rows = c.expert_rows;
      ft::GemmProblem p(c.shape, opt);
      fg::Problem problem = ft::problem_of(c.shape, k_major);
      problem.m = p.rows();
      const std::string config = fg::describe_config(problem, num_sms);
      if (num_sms == 132)
        EXPECT_NE(config.find("BM=256 BN=128"), std::string::npos) << c.shape.describe() << ": the pick changed: " << config;
      expect_correct("wide-halves", p, c.shape, k_major, config.substr(0, config.find(" grid")));
    }
}

TEST_F(Gpu, GroupedMasked) {
  struct Case {
    int groups;
    int64_t m_max, n, k;
  };
  const Case cases[] = {{1, 256, 4096, 7168}, {2, 128, 2112, 576}, {8, 256, 576, 2048}, {32, 96, 2112, 512}, {256, 65, 576, 256}};
  std::vector<ft::ProblemShape> shapes;
  for (const auto& c : cases) shapes.push_back(shape(GemmKind::kGroupedMasked, c.groups, c.m_max, c.n, c.k));
  precompile(shapes);
  int i = 0;
  for (const auto& s : shapes)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(1300 + i++);
      const int64_t values[] = {0, 1, 63, 64, 65, s.m};
      for (int g = 0; g < s.groups; ++g) opt.masked_m.push_back(int(std::min<int64_t>(values[(g + i) % 6], s.m)));
      ft::GemmProblem p(s, opt);
      expect_correct("masked", p, s, k_major);
    }
}

// Masked and psum groups whose last row block holds at most 128 rows run it as wide tiles over two n-blocks (the
// 256x128 kernels with a wide tail): groups of 0, 1-128 rows, 128 rows past whole blocks, 129-255 past them (full
// tiles), an odd n-block count (the last n-block of a tail alone), N and rows off the tile. Where the second math
// warpgroup has no rows in a wave it only passes its turn: 1-64 rows in a wide tail, 129-192 in a full tile (184, 192;
// at 193 it computes the wave). Both SA layouts: K-major SA gathered (psum, 200 rows per group) takes the plain 256x128
// kernel.
TEST_F(Gpu, MaskedAndPsumGroupTailsAsWideTiles) {
  struct Case {
    ft::ProblemShape shape;
    std::vector<int> rows;
  };
  const Case cases[] = {
      // 11 n-blocks
      {shape(GemmKind::kGroupedMasked, 8, 1400, 1408, 7168), {792, 1292, 100, 0, 1400, 1208, 1216, 1217}},
      {shape(GemmKind::kGroupedContiguousPsum, 8, 200, 4096, 7168), {100, 0, 300, 128, 129, 256, 257, 1}},
      {shape(GemmKind::kGroupedContiguousPsum, 8, 200, 4224, 7168), {64, 384, 0, 200, 130, 385, 31, 250}},  // 33
  };
  std::vector<ft::ProblemShape> shapes;
  for (const auto& c : cases) shapes.push_back(c.shape);
  precompile(shapes);
  const int num_sms = fg::get_num_sms();
  int i = 0;
  for (const auto& c : cases)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(3100 + i++);
      if (c.shape.kind == GemmKind::kGroupedMasked)
        opt.masked_m = c.rows;
      else
        opt.expert_rows = c.rows;
      ft::GemmProblem p(c.shape, opt);
      const std::string config = fg::describe_config(ft::problem_of(c.shape, k_major), num_sms);
      const bool gathered = config.find("k-gather") != std::string::npos;
      if (num_sms == 132) {
        EXPECT_NE(config.find("BM=256 BN=128"), std::string::npos) << c.shape.describe() << ": the pick changed: " << config;
        EXPECT_EQ(config.find("wide-tail") != std::string::npos, !gathered) << config;
      }
      fg::reset_device_error_flags();
      expect_correct("wide-group-tails", p, c.shape, k_major, config.substr(0, config.find(" grid")));
      EXPECT_EQ(fg::device_error_flags(), 0u) << c.shape.describe();
    }
}

TEST_F(Gpu, MaskedGraphReplayWithNewCounts) {
  const auto s = shape(GemmKind::kGroupedMasked, 4, 256, 2112, 2048);
  ft::ProblemOptions opt;
  opt.seed = 77;
  ft::GemmProblem p(s, opt);
  p.run(false, stream_);  // compile and build the plan outside the capture
  FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const cudaGraphExec_t exec = capture(stream_, [&] { p.run(false, stream_); });
  const std::vector<std::vector<int32_t>> counts = {{256, 0, 17, 200}, {1, 255, 64, 65}, {0, 0, 0, 129}};
  for (const auto& c : counts) {
    p.set_layout(c, stream_);
    p.poison_output(stream_);
    FG_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const ft::Verdict v = ft::check_output(p, ft::gpu_reference(p), p.download_output());
    EXPECT_TRUE(v.ok) << "masked_m {" << c[0] << "," << c[1] << "," << c[2] << "," << c[3] << "}: " << v.summary;
  }
  cudaGraphExecDestroy(exec);
}

TEST_F(Gpu, ContiguousGraphReplayWithNewIndices) {
  const auto s = shape(GemmKind::kGroupedContiguous, 4, 512, 2112, 2048);
  ft::ProblemOptions opt;
  opt.seed = 78;
  opt.expert_rows = {512, 512, 512, 512};  // worst case M_sum = 2048
  ft::GemmProblem p(s, opt);
  p.run(true, stream_);
  FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const cudaGraphExec_t exec = capture(stream_, [&] { p.run(true, stream_); });
  const std::vector<std::vector<int>> splits = {{100, 0, 300, 512}, {0, 0, 0, 1}, {512, 512, 512, 512}};
  for (const auto& split : splits) {
    std::vector<int32_t> idx;
    for (int e = 0; e < 4; ++e) {
      const int padded = (split[size_t(e)] + 127) / 128 * 128;
      for (int r = 0; r < padded; ++r) idx.push_back(r < split[size_t(e)] ? e : -1);
    }
    idx.resize(2048, -1);
    p.set_layout(idx, stream_);
    p.poison_output(stream_);
    FG_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const ft::Verdict v = ft::check_output(p, ft::gpu_reference(p), p.download_output());
    EXPECT_TRUE(v.ok) << v.summary;
  }
  cudaGraphExecDestroy(exec);
}

TEST_F(Gpu, DeterministicAcrossRuns) {
  const ft::ProblemShape shapes[] = {shape(GemmKind::kNormal, 1, 4096, 7168, 2048), shape(GemmKind::kNormal, 1, 64, 2112, 7168),
                                     shape(GemmKind::kGroupedContiguous, 4, 1000, 4096, 2048),
                                     shape(GemmKind::kGroupedMasked, 4, 256, 7168, 2048)};
  for (const auto& s : shapes) {
    ft::ProblemOptions opt;
    opt.seed = 5;
    ft::GemmProblem p(s, opt);
    p.poison_output(stream_);  // rows a GEMM leaves untouched must compare equal too
    p.run(false, stream_);
    FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::vector<uint16_t> first = p.download_output();
    ASSERT_EQ(first_differing_run(p, first, 10), 0) << s.describe() << " differs on that run";
  }
}

TEST_F(Gpu, ContiguousPaddingCostsNearlyNothing) {
  // 8 experts with 10% real rows inside 4096-row segments, against the same rows packed tightly.
  const int experts = 8;
  std::vector<int> real(experts, 410);
  const auto padded_shape = shape(GemmKind::kGroupedContiguous, experts, 4096, 4096, 7168);
  ft::ProblemOptions padded_opt;
  padded_opt.seed = 9;
  std::vector<int32_t> idx;
  for (int e = 0; e < experts; ++e)
    for (int r = 0; r < 4096; ++r) idx.push_back(r < real[size_t(e)] ? e : -1);
  padded_opt.expert_rows.assign(experts, 4096);
  ft::GemmProblem wide(padded_shape, padded_opt);
  wide.set_layout(idx, stream_);
  ft::ProblemOptions tight_opt = padded_opt;
  tight_opt.expert_rows = real;
  ft::GemmProblem tight(padded_shape, tight_opt);
  const ft::Verdict v = run_and_check(wide, false);
  EXPECT_TRUE(v.ok) << v.summary;
  ft::L2Flusher flusher;
  const double t_wide = ft::time_kernel([&](cudaStream_t s) { wide.run(false, s); }, stream_, 30, 3, true, &flusher).median_us;
  const double t_tight = ft::time_kernel([&](cudaStream_t s) { tight.run(false, s); }, stream_, 30, 3, true, &flusher).median_us;
  std::printf("[padding] 10%% valid rows: %.1f us; the same rows packed: %.1f us; ratio %.3f\n", t_wide, t_tight, t_wide / t_tight);
  EXPECT_LE(t_wide, 1.3 * t_tight);
}

// The bench's two L2 flushes: after a memset the L2 is full of dirty lines, and a memory-bound call pays for writing
// them back; after a read (--flush read) it holds clean lines. Both must leave the timer's kernel attribution intact.
TEST_F(Gpu, ReadFlushLeavesNoWritebackForTheTimedCall) {
  ft::GemmProblem p(shape(GemmKind::kNormal, 1, 64, 7168, 2048), ft::ProblemOptions{});
  const ft::Verdict v = run_and_check(p, false);
  EXPECT_TRUE(v.ok) << v.summary;
  ft::L2Flusher memset_flush;
  ft::L2Flusher read_flush(256ull << 20, ft::FlushMode::kRead);
  const auto time = [&](ft::L2Flusher& f) {
    return ft::time_kernel([&](cudaStream_t s) { p.run(false, s); }, stream_, 30, 3, true, &f).median_us;
  };
  const double t_memset = time(memset_flush), t_read = time(read_flush);
  std::printf("[flush] 64x7168x2048 after a 256 MiB memset: %.1f us; after a 256 MiB read: %.1f us\n", t_memset, t_read);
  EXPECT_LT(t_read, t_memset);
}

TEST_F(Gpu, DeviceSideBadDataIsSkippedAndFlagged) {
  fg::reset_device_error_flags();
  {
    const auto s = shape(GemmKind::kGroupedContiguous, 2, 128, 576, 256);
    ft::ProblemOptions opt;
    opt.seed = 11;
    opt.expert_rows = {128, 128};
    ft::GemmProblem p(s, opt);
    std::vector<int32_t> idx = p.layout();
    for (int r = 128; r < 256; ++r) idx[size_t(r)] = 9;  // expert 9 of 2: out of range
    p.set_layout(idx, stream_);
    const ft::Verdict v = run_and_check(p, false);  // rows with id 9 count as invalid: must stay untouched
    EXPECT_TRUE(v.ok) << v.summary;
    EXPECT_EQ(fg::device_error_flags() & fg::kDeviceErrorExpertIdOutOfRange, uint32_t(fg::kDeviceErrorExpertIdOutOfRange));
  }
  fg::reset_device_error_flags();
  {
    const auto s = shape(GemmKind::kGroupedMasked, 2, 64, 576, 256);
    ft::ProblemOptions opt;
    opt.seed = 12;
    ft::GemmProblem p(s, opt);
    p.set_layout({1000, 3}, stream_);  // 1000 > M_max = 64: clamped
    const ft::Verdict v = run_and_check(p, false);
    EXPECT_TRUE(v.ok) << v.summary;
    EXPECT_EQ(fg::device_error_flags() & fg::kDeviceErrorMaskedMTooLarge, uint32_t(fg::kDeviceErrorMaskedMTooLarge));
  }
  fg::reset_device_error_flags();
  EXPECT_EQ(fg::device_error_flags(), 0u);
}

// The psum layout (each group's end row; DeepEP v2, training): random rows per group with empty groups, rows past a
// group's end and before the next group's start left untouched (poisoned, checked by check_output), tiles of 64, 128
// and 256 rows among the configurations the shapes pick, both SA layouts.
TEST_F(Gpu, GroupedContiguousPsum) {
  struct Case {
    int groups;
    int64_t expected, n, k;
  };
  const Case cases[] = {{1, 300, 2112, 576},  {2, 700, 576, 7168},  {8, 256, 4096, 2048},
                        {32, 130, 2112, 576}, {256, 40, 576, 512},  {4, 4000, 4096, 7168}};
  std::vector<ft::ProblemShape> shapes;
  for (const auto& c : cases) shapes.push_back(shape(GemmKind::kGroupedContiguousPsum, c.groups, c.expected, c.n, c.k));
  precompile(shapes);
  std::mt19937 rng(17);
  std::set<std::string> configs;
  int i = 0;
  for (const auto& s : shapes)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(2900 + i++);
      opt.expert_rows = router_rows(s, rng);
      ft::GemmProblem p(s, opt);
      const std::string config = fg::describe_config(ft::problem_of(s, k_major), fg::get_num_sms());
      configs.insert(config.substr(0, config.find(' ')));
      fg::reset_device_error_flags();
      expect_correct("psum", p, s, k_major, config);
      EXPECT_EQ(fg::device_error_flags(), 0u) << s.describe();
    }
  EXPECT_EQ(configs, (std::set<std::string>{"BM=64", "BM=128", "BM=256"}));
}

// The psum layout with groups starting at multiples of 64 or 32 rows (the call's m_alignment): tiles start at their
// group's start, off the tile height's multiples; rows of no group (between an end and the next aligned start, past
// the last end) keep their poison. Random rows per group with empty groups, tiles of 64, 128 and 256 rows among the
// picks, both SA layouts; then fixed counts that end one row before, on and after the alignment.
TEST_F(Gpu, PsumWith64And32RowAlignment) {
  struct Case {
    int groups;
    int64_t expected, n, k;
    std::vector<int> expert_rows;  // empty: random around `expected`, every fifth expert empty
  };
  const Case cases[] = {{8, 256, 4096, 2048, {}},
                        {32, 130, 2112, 576, {}},
                        {256, 40, 576, 512, {}},
                        {4, 4000, 4096, 7168, {}},
                        {9, 60, 576, 7168, {70, 0, 131, 31, 32, 33, 63, 64, 65}},
                        {5, 300, 2112, 2048, {1, 0, 0, 511, 97}}};
  std::vector<ft::ProblemShape> shapes;
  for (const auto& c : cases) shapes.push_back(shape(GemmKind::kGroupedContiguousPsum, c.groups, c.expected, c.n, c.k));
  precompile(shapes);
  std::mt19937 rng(23);
  std::set<std::string> configs;
  int i = 0;
  for (int alignment : {64, 32})
    for (size_t c = 0; c < std::size(cases); ++c)
      for (bool k_major : {false, true}) {
        const ft::ProblemShape& s = shapes[c];
        ft::ProblemOptions opt;
        opt.seed = uint64_t(3100 + i++);
        opt.m_alignment = alignment;
        opt.expert_rows = cases[c].expert_rows;
        if (opt.expert_rows.empty()) opt.expert_rows = router_rows(s, rng);
        ft::GemmProblem p(s, opt);
        ASSERT_EQ(p.m_alignment(), alignment);
        fg::Problem problem = ft::problem_of(s, k_major);
        problem.m_alignment = alignment;
        const std::string config = fg::describe_config(problem, fg::get_num_sms());
        configs.insert(config.substr(0, config.find(' ')));
        fg::reset_device_error_flags();
        expect_correct("psum-" + std::to_string(alignment), p, s, k_major, config);
        EXPECT_EQ(fg::device_error_flags(), 0u) << s.describe() << " alignment " << alignment;
      }
  EXPECT_EQ(configs, (std::set<std::string>{"BM=64", "BM=128", "BM=256"}));
}

// One graph, replayed with new group ends written to the device between replays (the host never reads them): each
// replay computes the new groups and leaves every other row untouched.
TEST_F(Gpu, PsumGraphReplayWithNewEnds) {
  const auto s = shape(GemmKind::kGroupedContiguousPsum, 4, 512, 2112, 2048);
  for (int alignment : {128, 32}) {
    ft::ProblemOptions opt;
    opt.seed = 79;
    opt.m_alignment = alignment;
    opt.expert_rows = {512, 512, 512, 512};  // worst case M_sum = 2048
    ft::GemmProblem p(s, opt);
    p.run(true, stream_);
    FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const cudaGraphExec_t exec = capture(stream_, [&] { p.run(true, stream_); });
    std::vector<std::vector<int32_t>> ends = {{100, 128, 428, 1024}, {0, 0, 0, 1}, {512, 1024, 1536, 2048},
                                              {5, 133, 384, 385}};
    // Valid with 32-row alignment only: group 1 empty at 64, group 2 [64, 97), group 3 [128, 2000).
    if (alignment == 32) ends.push_back({33, 64, 97, 2000});
    for (const auto& e : ends) {
      p.set_layout(e, stream_);
      p.poison_output(stream_);
      fg::reset_device_error_flags();
      FG_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
      FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const ft::Verdict v = ft::check_output(p, ft::gpu_reference(p), p.download_output());
      EXPECT_TRUE(v.ok) << "alignment " << alignment << ", ends {" << e[0] << "," << e[1] << "," << e[2] << ","
                        << e[3] << "}: " << v.summary;
      EXPECT_EQ(fg::device_error_flags(), 0u) << "alignment " << alignment;
    }
    cudaGraphExecDestroy(exec);
  }
}

// Invalid group ends: below the group's start (the previous end rounded up to 128), negative, past M_sum. The kernel
// keeps each group's rows that exist (tools' GemmProblem clamps its reference the same way), writes nothing else, and
// raises kDeviceErrorGroupEndInvalid.
TEST_F(Gpu, PsumInvalidEndsAreClampedAndFlagged) {
  const auto s = shape(GemmKind::kGroupedContiguousPsum, 4, 128, 576, 256);
  ft::ProblemOptions opt;
  opt.seed = 13;
  opt.expert_rows = {128, 128, 128, 128};  // M_sum = 512
  ft::GemmProblem p(s, opt);
  const std::vector<std::vector<int32_t>> bad = {{100, 50, 300, 400},  {-7, 200, 300, 512},  {100, 10000, 0, 0},
                                                 {600, 700, 800, 900}, {300, 200, 400, 401}, {INT32_MIN, 0, 0, INT32_MAX}};
  for (const auto& e : bad) {
    p.set_layout(e, stream_);
    fg::reset_device_error_flags();
    const ft::Verdict v = run_and_check(p, false);
    EXPECT_TRUE(v.ok) << "ends {" << e[0] << "," << e[1] << "," << e[2] << "," << e[3] << "}: " << v.summary;
    EXPECT_EQ(fg::device_error_flags(), uint32_t(fg::kDeviceErrorGroupEndInvalid))
        << "ends {" << e[0] << "," << e[1] << "," << e[2] << "," << e[3] << "}";
  }
  fg::reset_device_error_flags();
}

// Contiguous layout, a block where expert 0 ends (rows 100..127 padding): a padding row given expert 1's id instead of
// -1 is left untouched and raises kDeviceErrorExpertIdInconsistent; the rest of the output is right. (The device
// layout is overwritten directly, so the problem's reference still takes the row for padding.)
TEST_F(Gpu, ContiguousInconsistentExpertIdIsFlagged) {
  for (int64_t k : {256, 7168}) {  // 128-row and 256-row tiles
    const auto s = shape(GemmKind::kGroupedContiguous, 2, 1000, 4096, k);
    ft::ProblemOptions opt;
    opt.seed = 14;
    opt.expert_rows = {100, 4000};
    ft::GemmProblem p(s, opt);
    std::vector<int32_t> idx = p.layout();
    ASSERT_EQ(idx[110], -1);
    idx[110] = 1;
    FG_CUDA_CHECK(cudaMemcpy(p.layout_buffer.get(), idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
    fg::reset_device_error_flags();
    const ft::Verdict v = run_and_check(p, false);
    EXPECT_TRUE(v.ok) << "K=" << k << ": " << v.summary;
    EXPECT_EQ(fg::device_error_flags(), uint32_t(fg::kDeviceErrorExpertIdInconsistent)) << "K=" << k;
    // A consistent layout raises nothing.
    FG_CUDA_CHECK(cudaMemcpy(p.layout_buffer.get(), p.layout().data(), idx.size() * 4, cudaMemcpyHostToDevice));
    fg::reset_device_error_flags();
    const ft::Verdict clean = run_and_check(p, false);
    EXPECT_TRUE(clean.ok) << clean.summary;
    EXPECT_EQ(fg::device_error_flags(), 0u) << "K=" << k;
  }
}

// Bad arguments of the psum call are rejected before anything is enqueued: the output keeps its poison. The same
// tensors ran a good call first, so each bad call differs from a warm call only in the argument it breaks.
TEST_F(Gpu, PsumBadArgumentsLeaveTheOutputUntouched) {
  const auto s = shape(GemmKind::kGroupedContiguousPsum, 4, 128, 576, 256);
  ft::ProblemOptions opt;
  opt.seed = 15;
  ft::GemmProblem p(s, opt);
  const int64_t rows = p.rows(), kb = p.kb(), nb = p.nb();
  const auto view = [](ft::DeviceBuffer& b, fg::DType t, std::initializer_list<int64_t> shape) {
    return fg::TensorView::contiguous(b.get(), t, shape);
  };
  const fg::TensorView a = view(p.a, fg::DType::kFloat8E4M3, {rows, s.k});
  const fg::TensorView sa = view(p.sa_k_major, fg::DType::kFloat32, {rows, kb});
  const fg::TensorView b = view(p.b, fg::DType::kFloat8E4M3, {4, s.n, s.k});
  const fg::TensorView sb = view(p.sb, fg::DType::kFloat32, {4, nb, kb});
  const fg::TensorView d = view(p.d, fg::DType::kBFloat16, {rows, s.n});
  const fg::TensorView ends_short = view(p.layout_buffer, fg::DType::kInt32, {3});
  const fg::TensorView ends_float = view(p.layout_buffer, fg::DType::kFloat32, {4});
  const auto st = reinterpret_cast<fg::Stream>(stream_);
  const fg::TensorView ends = view(p.layout_buffer, fg::DType::kInt32, {4});
  fg::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(a, sa, b, sb, d, ends, 128, st, 128);
  p.poison_output(stream_);
  EXPECT_THROW(fg::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(a, sa, b, sb, d, ends_short, 128, st, 128),
               fg::Error);
  EXPECT_THROW(fg::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(a, sa, b, sb, d, ends_float, 128, st, 128),
               fg::Error);
  EXPECT_THROW(fg::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(a, sa, b, sb, d, ends, -1, st, 128), fg::Error);
  for (int alignment : {0, 16, 96, 256})
    EXPECT_THROW(fg::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(a, sa, b, sb, d, ends, 128, st, alignment),
                 fg::Error)
        << alignment;
  // The m_indices layout refuses 32-row alignment (64-row tiles are its smallest).
  EXPECT_THROW(fg::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a, sa, b, sb, d,
                                                            view(p.layout_buffer, fg::DType::kInt32, {rows}), st, 32),
               fg::Error);
  FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (uint16_t x : p.download_output()) ASSERT_EQ(x, ft::GemmProblem::kPoison);
}

TEST_F(Gpu, HostOverheadOfWarmCalls) {
  // The host time of a warm call of each GEMM an engine calls per decode step: the dense one at M = 64 and the three
  // grouped layouts with 8 experts of about 64 rows. Beside each call, the driver's own launch (cuLaunchKernelEx) of
  // a kernel that does nothing with the same argument block, on one CTA of 384 threads per SM, in alternating batches
  // (ft::host_overhead_us). Most of a call is that launch, and its cost moves with the host: about 3 to 5 us on the
  // lent hosts, one of them now and then slowed down as a whole by other tenants. So the bound is on the library's
  // part, the call's time above the empty launch: at most 1.0 us, the median of three runs of 10,000 calls each.
  // (An absolute bound of 5.0 us per call failed on hosts where the empty launch alone took 4.5 us.) Every run is
  // printed.
  constexpr double kLibraryPartBoundUs = 1.0;
  const CUfunction empty = ft::jit_tool_kernel("finegemm/tools/empty_kernel.cuh",
                                               "finegemm::tools::empty_kernel<finegemm::device::GemmArgs>",
                                               "(const __grid_constant__ finegemm::device::GemmArgs)");
  fg::jit::LaunchShape empty_shape;
  empty_shape.grid_x = unsigned(fg::get_num_sms());
  empty_shape.block_x = 384;
  fg::device::GemmArgs empty_args{};
  void* empty_params[] = {&empty_args};
  const auto launch_empty = [&](cudaStream_t st) {
    fg::jit::launch_kernel(empty, empty_shape, reinterpret_cast<CUstream>(st), empty_params, "empty_kernel");
  };
  // Times warm calls of `enqueue` (after one call that compiles and plans) beside the empty launch, prints both and
  // bounds the call's part above the launch.
  const auto time_warm_calls = [&](const std::string& label, const std::function<void(cudaStream_t)>& enqueue) {
    enqueue(stream_);
    FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<double> calls, launches, above;
    for (int i = 0; i < 3; ++i) {
      const ft::HostOverhead h = ft::host_overhead_us(enqueue, launch_empty, stream_, 10000);
      calls.push_back(h.call_us);
      launches.push_back(h.baseline_us);
      above.push_back(h.call_us - h.baseline_us);
    }
    const double call = ft::summarize_samples(calls).median, launch = ft::summarize_samples(launches).median,
                 part = ft::summarize_samples(above).median;
    std::printf("[overhead] warm %s: %.2f us per call (%.2f, %.2f, %.2f); the driver's launch of an empty kernel "
                "%.2f us (%.2f, %.2f, %.2f); the call above it %.2f us (%.2f, %.2f, %.2f), 3 runs of 10000 each\n",
                label.c_str(), call, calls[0], calls[1], calls[2], launch, launches[0], launches[1], launches[2], part,
                above[0], above[1], above[2]);
    EXPECT_LE(part, kLibraryPartBoundUs) << label;
  };
  const ft::ProblemShape shapes[] = {shape(GemmKind::kNormal, 1, 64, 7168, 2048),
                                     shape(GemmKind::kGroupedContiguous, 8, 64, 4096, 7168),
                                     shape(GemmKind::kGroupedContiguousPsum, 8, 64, 4096, 7168),
                                     shape(GemmKind::kGroupedMasked, 8, 64, 4096, 7168)};
  for (const auto& s : shapes) {
    ft::ProblemOptions opt;
    ft::GemmProblem p(s, opt);
    time_warm_calls(std::string(s.kind_name()) + " " + std::to_string(s.groups) + "x" + std::to_string(s.m) + "x" +
                        std::to_string(s.n) + "x" + std::to_string(s.k),
                    [&](cudaStream_t st) { p.run(false, st); });
  }
  // The per-token quantization of a decode step's activations (64x7168 bf16 into e4m3 and MN-major scales, as the
  // GEMM reads them): validated on every call, its pointers asked about once (src/api/quantize.cpp).
  constexpr int64_t m = 64, k = 7168, kb = k / 128;
  const int64_t m_pad = fg::get_tma_aligned_size(m, 4);
  ft::DeviceBuffer x(size_t(m * k) * 2), a(size_t(m * k)), sa(size_t(kb * m_pad) * 4);
  FG_CUDA_CHECK(cudaMemset(x.get(), 0, size_t(m * k) * 2));
  const fg::TensorView vx = fg::TensorView::contiguous(x.get(), fg::DType::kBFloat16, {m, k});
  const fg::TensorView va = fg::TensorView::contiguous(a.get(), fg::DType::kFloat8E4M3, {m, k});
  const fg::TensorView vsa = fg::TensorView::strided(sa.get(), fg::DType::kFloat32, {m, kb}, {1, m_pad});
  time_warm_calls("per_token_cast_to_fp8 64x7168", [&](cudaStream_t st) {
    fg::per_token_cast_to_fp8(vx, va, vsa, reinterpret_cast<fg::Stream>(st));
  });
}

// Programmatic dependent launch (finegemm::set_pdl): in a chain of per-token quantizations and GEMMs sharing A and
// SA, each GEMM reads what the quantizer just wrote and each quantizer overwrites what the GEMM before it read. With
// PDL every kernel may start while the previous one runs, so a missing griddepcontrol.wait on either side shows as a
// GEMM output that differs from the chain run without PDL (bit for bit: the GEMM is deterministic). The chain is also
// captured into a CUDA graph with PDL on. Then chains of 32 decoding-size GEMMs, and of 32 quantization + GEMM steps,
// are timed with PDL off and on, over one weight and over 8 (distinct weights checked against the plain chain too).
TEST_F(Gpu, ProgrammaticDependentLaunchKeepsTheOrder) {
  struct PdlOff {
    ~PdlOff() { fg::set_pdl(false); }
  } pdl_off;
  constexpr int64_t m = 64, n = 7168, k = 2048, kb = k / 128;
  constexpr int kSteps = 8;
  const int64_t m_pad = fg::get_tma_aligned_size(m, 4);
  ft::ProblemOptions opt;
  opt.seed = 91;
  opt.data = ft::DataKind::kNormal;
  ft::GemmProblem p(shape(GemmKind::kNormal, 1, m, n, k), opt);  // B and SB
  std::mt19937_64 rng(92);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> x_host(size_t(kSteps * m * k));
  for (auto& v : x_host) v = fr::float_to_bf16(normal(rng));
  ft::DeviceBuffer x = ft::DeviceBuffer::from_host(x_host), a(size_t(m * k)), sa(size_t(kb * m_pad) * 4),
                   d(size_t(kSteps * m * n) * 2);
  const fg::TensorView va = fg::TensorView::contiguous(a.get(), fg::DType::kFloat8E4M3, {m, k});
  const fg::TensorView vsa = fg::TensorView::strided(sa.get(), fg::DType::kFloat32, {m, kb}, {1, m_pad});
  const fg::TensorView vb = fg::TensorView::contiguous(p.b.get(), fg::DType::kFloat8E4M3, {n, k});
  const fg::TensorView vsb = fg::TensorView::contiguous(p.sb.get(), fg::DType::kFloat32, {n / 128, kb});
  auto step_x = [&](int i) {
    return fg::TensorView::contiguous(x.as<uint16_t>() + i * m * k, fg::DType::kBFloat16, {m, k});
  };
  auto step_d = [&](int i) {
    return fg::TensorView::contiguous(d.as<uint16_t>() + i * m * n, fg::DType::kBFloat16, {m, n});
  };
  auto chain = [&] {
    for (int i = 0; i < kSteps; ++i) {
      fg::per_token_cast_to_fp8(step_x(i), va, vsa, reinterpret_cast<fg::Stream>(stream_));
      fg::gemm_fp8_fp8_bf16_nt(va, vsa, vb, vsb, step_d(i), reinterpret_cast<fg::Stream>(stream_));
    }
  };
  auto run_chain = [&](bool pdl, bool graph) {
    fg::set_pdl(pdl);
    d.fill_byte(0xFF, stream_);
    if (graph) {
      const cudaGraphExec_t exec = capture(stream_, chain);
      FG_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
      FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
      cudaGraphExecDestroy(exec);
    } else {
      chain();
    }
    ft::sync_and_check(stream_, std::string("chain, pdl=") + (pdl ? "on" : "off"));
    return d.download_as<uint16_t>();
  };
  const std::vector<uint16_t> reference = run_chain(false, false);
  EXPECT_EQ(std::count(reference.begin(), reference.end(), uint16_t(0xFFFF)), 0) << "every element written";
  for (int round = 0; round < 3; ++round) {
    EXPECT_TRUE(run_chain(true, false) == reference) << "PDL on a stream, round " << round;
    EXPECT_TRUE(run_chain(true, true) == reference) << "PDL in a CUDA graph, round " << round;
  }

  // Every launch form under PDL gives the plain launch's output: a split-K cluster (64x1536x7168), the 256-row
  // kernel, both grouped layouts (masked with groups of 256 rows and of 16) and K-major SA.
  const ft::ProblemShape forms[] = {shape(GemmKind::kNormal, 1, 64, 1536, 7168),
                                    shape(GemmKind::kNormal, 1, 1024, 4096, 7168),
                                    shape(GemmKind::kGroupedMasked, 4, 256, 7168, 2048),
                                    shape(GemmKind::kGroupedMasked, 4, 16, 7168, 2048),
                                    shape(GemmKind::kGroupedContiguous, 4, 512, 4096, 2048)};
  for (const auto& f : forms)
    for (bool k_major : {false, true}) {
      ft::GemmProblem q(f, opt);
      std::vector<uint16_t> outputs[2];
      for (bool pdl : {false, true}) {
        fg::set_pdl(pdl);
        q.poison_output(stream_);
        q.run(k_major, stream_);
        ft::sync_and_check(stream_, f.describe());
        outputs[pdl] = q.download_output();
      }
      EXPECT_TRUE(outputs[1] == outputs[0]) << f.describe() << (k_major ? " K-major SA" : "") << ": PDL changed D";
      EXPECT_TRUE(ft::check_output(q, ft::gpu_reference(q), outputs[1]).ok) << f.describe();
    }

  // Timing: 32 GEMMs back to back (no flush), then 32 quantization + GEMM steps; each chain enqueued whole behind a
  // host function that holds the stream (so the host's launch rate does not pace it), events around it, median of 5.
  // Both chains once on one B (which then stays in the L2) and once over 8 copies of it (118 MB, so each step reads
  // its B from DRAM, as a model's layers do).
  constexpr int kChain = 32, kWeights = 8;
  ft::DeviceBuffer weights(size_t(kWeights * n * k));
  for (int w = 0; w < kWeights; ++w)
    FG_CUDA_CHECK(cudaMemcpy(weights.as<uint8_t>() + w * n * k, p.b.get(), size_t(n * k), cudaMemcpyDeviceToDevice));
  auto step_b = [&](int i, bool distinct) {
    return distinct ? fg::TensorView::contiguous(weights.as<uint8_t>() + (i % kWeights) * n * k,
                                                 fg::DType::kFloat8E4M3, {n, k})
                    : vb;
  };
  {
    // The distinct-weight chain under PDL gives the plain chain's output.
    fg::set_pdl(true);
    d.fill_byte(0xFF, stream_);
    for (int i = 0; i < kSteps; ++i) {
      fg::per_token_cast_to_fp8(step_x(i), va, vsa, reinterpret_cast<fg::Stream>(stream_));
      fg::gemm_fp8_fp8_bf16_nt(va, vsa, step_b(i, true), vsb, step_d(i), reinterpret_cast<fg::Stream>(stream_));
    }
    ft::sync_and_check(stream_, "distinct-weight chain, pdl=on");
    EXPECT_TRUE(d.download_as<uint16_t>() == reference) << "PDL over distinct weights";
  }
  auto chain_us = [&](bool pdl, bool quantize, bool distinct) {
    fg::set_pdl(pdl);
    cudaEvent_t start, stop;
    FG_CUDA_CHECK(cudaEventCreate(&start));
    FG_CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> runs;
    for (int r = 0; r < 6; ++r) {
      std::atomic<bool> open{false};
      FG_CUDA_CHECK(cudaLaunchHostFunc(
          stream_,
          [](void* flag) {
            while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
          },
          &open));
      FG_CUDA_CHECK(cudaEventRecord(start, stream_));
      for (int i = 0; i < kChain; ++i) {
        if (quantize) fg::per_token_cast_to_fp8(step_x(i % kSteps), va, vsa, reinterpret_cast<fg::Stream>(stream_));
        fg::gemm_fp8_fp8_bf16_nt(va, vsa, step_b(i, distinct), vsb, step_d(i % kSteps),
                                 reinterpret_cast<fg::Stream>(stream_));
      }
      FG_CUDA_CHECK(cudaEventRecord(stop, stream_));
      open = true;
      FG_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      FG_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (r > 0) runs.push_back(1000.0 * ms / kChain);  // the first chain warms up
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ft::summarize_samples(runs).median;
  };
  for (bool distinct : {false, true})
    for (bool quantize : {false, true}) {
      const double off = chain_us(false, quantize, distinct), on = chain_us(true, quantize, distinct);
      const double off2 = chain_us(false, quantize, distinct), on2 = chain_us(true, quantize, distinct);
      std::printf("[pdl] %d chained %s%lldx%lldx%lld GEMMs over %s, us per step (gated, events, median of 5): PDL "
                  "off %.2f, %.2f; on %.2f, %.2f\n", kChain, quantize ? "per-token quantizations + " : "",
                  (long long)m, (long long)n, (long long)k, distinct ? "8 weights" : "one weight", off, off2, on,
                  on2);
      EXPECT_LE(std::min(on, on2), 1.05 * std::min(off, off2)) << "PDL should not slow a chain down";
    }
}

TEST_F(Gpu, SanitizerSmallCases) {
  // The reduced set the sanitizer script runs: one small and two larger dense cases (1024x4096x1024 runs two
  // tiles per CTA through the 128-row ping-pong path and the overlapped epilogue), one split-K case (63x576x7168:
  // two CTAs of a cluster, partial sums through distributed shared memory), one with B loaded two stages per wait
  // (129x7232x1408: 11 K blocks, a 6-stage ring, the last K block alone), one with 128x192 half batches (769x3072x768:
  // 6 K blocks, SB read by every math thread), one contiguous, one masked, and three weight-gradient cases (1x128 SB,
  // C's tile loaded into the output tile): 65x136x576 and 456x1024x512 (a last row block of 72 rows, kept where it
  // falls) with C aliasing D, 300x264x640 with a separate C. The dense
  // wide tail has a case of its own (SanitizerWideTail), the psum layout too (SanitizerPsumCases). Then the K-grouped
  // weight gradient (3 experts, the middle one without tokens, M off the tile; adding into D, then overwriting it).
  // The decode calls that load SA once per CTA have a case of their own (SanitizerDecodeCases).
  const ft::ProblemShape shapes[] = {shape(GemmKind::kNormal, 1, 65, 576, 576), shape(GemmKind::kNormal, 1, 512, 2112, 1024),
                                     shape(GemmKind::kNormal, 1, 63, 576, 7168),
                                     shape(GemmKind::kNormal, 1, 1024, 4096, 1024),
                                     shape(GemmKind::kNormal, 1, 129, 7232, 1408),
                                     shape(GemmKind::kNormal, 1, 769, 3072, 768),
                                     shape(GemmKind::kGroupedContiguous, 3, 100, 576, 256),
                                     shape(GemmKind::kGroupedMasked, 3, 130, 576, 256),
                                     wgrad(65, 136, 576),
                                     wgrad(300, 264, 640),
                                     wgrad(456, 1024, 512),
                                     shape(GemmKind::kGroupedK, 3, 136, 264, 256)};
  int i = 0;
  for (const auto& s : shapes)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(40 + i++);
      if (s.kind == GemmKind::kGroupedMasked) opt.masked_m = {130, 0, 65};
      if (s.kind == GemmKind::kGroupedK) {
        opt.expert_ks = {256, 0, 384};
        opt.accumulate = !k_major;  // its SA is MN-major either way
      }
      opt.c_aliases_d = s.m != 300;
      ft::GemmProblem p(s, opt);
      const ft::Verdict v = run_and_check(p, k_major);
      EXPECT_TRUE(v.ok) << s.describe() << "\n" << v.summary;
    }
}

// Decode calls that load SA once per CTA under the sanitizers: 1-4 rows (4 floats per K block) and 5-16 rows (16),
// without and with split-K (3x576x4096, 5x576x4096; 3x2112x7168, 12x2112x7168), MN-major SA allocated to its view's
// extent, without the last K block's padding rows (read by 4-byte copies, the rest by one bulk copy); K-major SA by
// one TMA box.
TEST_F(Gpu, SanitizerDecodeCases) {
  const ft::ProblemShape shapes[] = {shape(GemmKind::kNormal, 1, 3, 576, 4096), shape(GemmKind::kNormal, 1, 5, 576, 4096),
                                     shape(GemmKind::kNormal, 1, 3, 2112, 7168),
                                     shape(GemmKind::kNormal, 1, 12, 2112, 7168)};
  int i = 0;
  for (const auto& s : shapes)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(80 + i++);
      ft::GemmProblem p(s, opt);
      const std::string config = fg::describe_config(ft::problem_of(s, k_major), fg::get_num_sms());
      EXPECT_NE(config.find(k_major ? "sa=k-once" : s.m <= 4 ? "sa=mn-once " : "sa=mn-once16"), std::string::npos)
          << config;
      const ft::Verdict v = run_and_check(p, k_major);
      EXPECT_TRUE(v.ok) << s.describe() << (k_major ? " K-major" : " MN-major") << "\n" << v.summary;
    }
}

// The psum layout under the sanitizers: 3 groups with 128-row alignment (one empty, rows past each group's end), and
// 4 groups with 32-row alignment (starts at 0, 96, 96 and 256: tiles starting off the multiples of their height).
TEST_F(Gpu, SanitizerPsumCases) {
  struct Case {
    int groups, alignment;
    std::vector<int> rows;
  };
  const Case cases[] = {{3, 128, {70, 0, 131}}, {4, 32, {70, 0, 131, 33}}};
  int i = 0;
  for (const Case& c : cases)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(60 + i++);
      opt.expert_rows = c.rows;
      opt.m_alignment = c.alignment;
      const auto s = shape(GemmKind::kGroupedContiguousPsum, c.groups, 100, 576, 256);
      ft::GemmProblem p(s, opt);
      const ft::Verdict v = run_and_check(p, k_major);
      EXPECT_TRUE(v.ok) << s.describe() << " alignment " << c.alignment << "\n" << v.summary;
    }
}

// The dense wide tail under the sanitizers (scripts/sanitize.sh: memcheck, synccheck, initcheck; racecheck took over
// 300 s on it, and its wide tiles share the contiguous kernels' shared-memory use, which the script's CLI cases
// racecheck): 4157x1000x2048 (a 61-row last block as 128 rows moved up, reaching 3 rows past M, over two n-blocks per
// tile, the second one partial) picks the wide-tail kernel with MN-major SA on 132 SMs; K-major SA (gathered) the
// plain one.
TEST_F(Gpu, SanitizerWideTail) {
  const ft::ProblemShape s = shape(GemmKind::kNormal, 1, 4157, 1000, 2048);
  int i = 0;
  for (bool k_major : {false, true}) {
    ft::ProblemOptions opt;
    opt.seed = uint64_t(60 + i++);
    ft::GemmProblem p(s, opt);
    const std::string config = fg::describe_config(ft::problem_of(s, k_major), fg::get_num_sms());
    if (fg::get_num_sms() == 132 && !k_major) EXPECT_NE(config.find("wide-tail"), std::string::npos) << config;
    const ft::Verdict v = run_and_check(p, k_major);
    EXPECT_TRUE(v.ok) << s.describe() << " " << config << "\n" << v.summary;
  }
}

TEST_F(Gpu, ColdCompileAndWarmLoadOfADenseKernel) {
  // Cold NVRTC compile of one real GEMM kernel, then a fresh runtime finding it on disk.
  char dir[] = "/tmp/finegemm-cold-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  fg::jit::Options options;
  options.cache_dir = dir;
  fg::Problem p;
  p.m = 4096;
  p.n = 7168;
  p.k = 7168;
  const fg::heuristics::KernelConfig config = fg::heuristics::select_config(p, fg::get_num_sms());
  const fg::jit::KernelSpec spec{"finegemm/device/kernels/sm90_fp8_gemm.cuh", config.kernel_function(),
                                 "(const __grid_constant__ finegemm::device::GemmArgs)",
                                 fg::heuristics::takes_steady_ffma_pass(config)};
  auto t0 = std::chrono::steady_clock::now();
  {
    fg::jit::Runtime cold(options);
    ASSERT_TRUE(cold.binary(spec)->compiled);
  }
  const double cold_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fg::jit::Runtime warm(options);
  t0 = std::chrono::steady_clock::now();
  auto binary = warm.binary(spec);
  const double lookup_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  warm.current_device();
  t0 = std::chrono::steady_clock::now();
  warm.function(*binary);
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(binary->compiled);
  std::printf("[cold-start] %s: cold NVRTC compile %.3f s; warm lookup from disk %.3f ms; module load %.3f ms\n",
              spec.function.c_str(), cold_s, lookup_ms, load_ms);
  EXPECT_LE(cold_s, 1.5);
  EXPECT_LE(lookup_ms, 5.0);
  std::filesystem::remove_all(dir);
}

TEST_F(Gpu, ConcurrentThreadsWithTheirOwnStreams) {
  // 8 host threads, each with its own stream, issuing random GEMMs of all kinds (first compiles included).
  const double seconds = std::getenv("FINEGEMM_STRESS_SECONDS") ? std::atof(std::getenv("FINEGEMM_STRESS_SECONDS")) : 20.0;
  std::atomic<int> calls{0}, failures{0};
  std::mutex log_mutex;
  std::vector<std::thread> threads;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t stream;
      FG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      std::mt19937 rng(uint32_t(1000 + t));
      const int64_t ms[] = {1, 63, 130, 512}, ns[] = {576, 2112, 4096}, ks[] = {256, 576, 2048};
      while (std::chrono::steady_clock::now() < deadline) {
        ft::ProblemShape s;
        s.kind = GemmKind(rng() % 3);
        s.groups = s.kind == GemmKind::kNormal ? 1 : int(1 + rng() % 4);
        s.m = ms[rng() % 4];
        s.n = ns[rng() % 3];
        s.k = ks[rng() % 3];
        ft::ProblemOptions opt;
        opt.seed = rng();
        try {
          ft::GemmProblem p(s, opt);
          const bool k_major = rng() % 2;
          p.poison_output(stream);
          p.run(k_major, stream);
          FG_CUDA_CHECK(cudaStreamSynchronize(stream));
          const ft::Verdict v = ft::check_output(p, ft::gpu_reference(p), p.download_output());
          ++calls;
          if (!v.ok) {
            ++failures;
            std::lock_guard<std::mutex> lock(log_mutex);
            std::printf("[threads] FAIL %s: %s\n", s.describe().c_str(), v.summary.c_str());
          }
        } catch (const std::exception& e) {
          ++failures;
          std::lock_guard<std::mutex> lock(log_mutex);
          std::printf("[threads] exception %s: %s\n", s.describe().c_str(), e.what());
        }
      }
      cudaStreamDestroy(stream);
    });
  }
  for (auto& th : threads) th.join();
  const auto stats = fg::jit_stats();
  std::printf("[threads] 8 threads for %.0f s: %d checked calls, %d failures, %llu kernels compiled in this process\n",
              seconds, calls.load(), failures.load(), static_cast<unsigned long long>(stats.compiles));
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(calls.load(), 8);
}

TEST_F(Gpu, NanInputsPropagateToTheirRowOnly) {
  // Documented behaviour: a NaN fp8 code (0x7F) in row r of A makes row r of D NaN; every other row is unchanged.
  const auto s = shape(GemmKind::kNormal, 1, 130, 576, 512);
  ft::ProblemOptions opt;
  opt.seed = 21;
  ft::GemmProblem p(s, opt);
  p.poison_output(stream_);
  p.run(false, stream_);
  FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const std::vector<uint16_t> clean = p.download_output();
  const int64_t bad_row = 67;
  const uint8_t nan_code = 0x7F;
  FG_CUDA_CHECK(cudaMemcpy(p.a.as<uint8_t>() + bad_row * s.k + 5, &nan_code, 1, cudaMemcpyHostToDevice));
  p.poison_output(stream_);
  p.run(false, stream_);
  FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const std::vector<uint16_t> out = p.download_output();
  for (int64_t r = 0; r < s.m; ++r)
    for (int64_t c = 0; c < s.n; ++c) {
      const uint16_t v = out[size_t(r * s.n + c)];
      if (r == bad_row) {
        ASSERT_TRUE((v & 0x7F80) == 0x7F80 && (v & 0x7F) != 0) << "row " << r << " col " << c << " should be NaN";
      } else {
        ASSERT_EQ(v, clean[size_t(r * s.n + c)]) << "row " << r << " col " << c << " changed";
      }
    }
}

TEST_F(Gpu, HostAndForeignPointersAreRejectedBeforeAnyWrite) {
  const auto s = shape(GemmKind::kNormal, 1, 64, 576, 256);
  ft::ProblemOptions opt;
  ft::GemmProblem p(s, opt);
  p.poison_output(stream_);
  std::vector<uint8_t> host_a(size_t(s.m * s.k), 0x38);
  const int64_t kb = p.kb();
  try {
    fg::gemm_fp8_fp8_bf16_nt(fg::TensorView::contiguous(host_a.data(), fg::DType::kFloat8E4M3, {s.m, s.k}),
                             fg::TensorView::contiguous(p.sa_k_major.get(), fg::DType::kFloat32, {s.m, kb}),
                             fg::TensorView::contiguous(p.b.get(), fg::DType::kFloat8E4M3, {s.n, s.k}),
                             fg::TensorView::contiguous(p.sb.get(), fg::DType::kFloat32, {p.nb(), kb}),
                             fg::TensorView::contiguous(p.d.get(), fg::DType::kBFloat16, {s.m, s.n}),
                             reinterpret_cast<fg::Stream>(stream_));
    ADD_FAILURE() << "a host pointer for A was accepted";
  } catch (const fg::Error& e) {
    EXPECT_EQ(int(e.kind()), int(fg::Error::Kind::kInvalidArgument));
    EXPECT_NE(std::string(e.what()).find("A is not device memory"), std::string::npos) << e.what();
  }
  FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (uint16_t v : p.download_output()) ASSERT_EQ(v, ft::GemmProblem::kPoison);
}

// ---- the weight-gradient GEMM (gemm_fp8_fp8_nt: 1x128 scales on both operands, fp32 D = C + A x B^T) ------------

TEST_F(Gpu, WgradSeedShapes) {
  const std::vector<ft::ProblemShape> shapes =
      ft::read_shape_file(repository_file("data/shapes/deepseek_v3_wgrad.csv"));
  ASSERT_EQ(shapes.size(), 7u);
  precompile(shapes);
  int i = 0;
  for (const auto& s : shapes)
    for (bool k_major : {false, true}) {
      ASSERT_TRUE(s.wgrad) << s.describe();
      ft::ProblemOptions opt;
      opt.seed = uint64_t(3000 + i++);
      ft::GemmProblem p(s, opt);
      expect_correct("wgrad", p, s, k_major);
    }
}

// Small and unaligned M and N, K of one partial block up to 56 blocks, K not a multiple of 128; C aliasing D and a
// separate C (D poisoned: every element must be written), both SA layouts, uniform codes and normal values.
TEST_F(Gpu, WgradAwkwardShapes) {
  std::vector<ft::ProblemShape> shapes;
  for (int64_t m : {1, 7, 65, 129, 300})
    for (int64_t n : {8, 24, 136, 264})
      for (int64_t k : {16, 112, 576, 640, 7168}) shapes.push_back(wgrad(m, n, k));
  precompile(shapes);
  int i = 0, failures = 0;
  for (const auto& s : shapes)
    for (bool k_major : {false, true}) {
      ft::ProblemOptions opt;
      opt.seed = uint64_t(3100 + i);
      opt.c_aliases_d = (i / 2) % 2 == 0;
      opt.data = i % 3 == 0 ? ft::DataKind::kNormal : ft::DataKind::kUniform;
      ++i;
      ft::GemmProblem p(s, opt);
      const ft::Verdict v = run_and_check(p, k_major);
      if (!v.ok) ++failures;
      EXPECT_TRUE(v.ok) << s.describe() << (k_major ? " K-major" : " MN-major")
                        << (opt.c_aliases_d ? " C=D" : " C apart") << "\n" << v.summary;
    }
  std::printf("[wgrad-awkward] %zu cases, %d failures\n", shapes.size() * 2, failures);
}

// C = D and a separate C give the same D bit for bit (one fp32 add of the same values); a separate C is only read.
// 4100x4096x512 and 4100x4104x208 load C a tile ahead (Heuristics.WgradLoadsCAheadWhereCAndDOutweighTheMath) over
// many tiles per CTA, their last row block moved up; the second ends in a narrow n-block and a partial K block.
TEST_F(Gpu, WgradCAliasingDOrNot) {
  for (const ft::ProblemShape& s : {wgrad(300, 264, 640), wgrad(1000, 4096, 1536), wgrad(129, 2112, 7168),
                                    wgrad(4100, 4096, 512), wgrad(4100, 4104, 208)})
    for (bool k_major : {false, true}) {
      std::vector<uint32_t> outputs[2];
      for (bool alias : {true, false}) {
        ft::ProblemOptions opt;
        opt.seed = 3200;
        opt.c_aliases_d = alias;
        ft::GemmProblem p(s, opt);
        const ft::Verdict v = run_and_check(p, k_major);
        EXPECT_TRUE(v.ok) << s.describe() << (alias ? " C=D" : " C apart") << "\n" << v.summary;
        outputs[alias] = bits_of(p.download_output_f32());
        if (!alias) {
          const std::vector<float> c_after = p.c.download_as<float>(p.host_c.size());
          EXPECT_TRUE(bits_of(c_after) == bits_of(p.host_c)) << s.describe() << ": the call wrote into C";
        }
      }
      EXPECT_TRUE(outputs[0] == outputs[1]) << s.describe() << (k_major ? " K-major" : " MN-major")
                                            << ": C = D and a separate C differ";
    }
}

TEST_F(Gpu, WgradDeterministicAcrossRuns) {
  for (const ft::ProblemShape& s :
       {wgrad(4096, 4096, 2048), wgrad(576, 4096, 7168), wgrad(65, 264, 640), wgrad(4100, 4096, 512)})
    for (bool alias : {true, false}) {
      ft::ProblemOptions opt;
      opt.seed = 6;
      opt.c_aliases_d = alias;
      ft::GemmProblem p(s, opt);
      std::vector<uint32_t> first;
      for (int run = 0; run < 10; ++run) {
        p.poison_output(stream_);  // D = C again (C = D), or poisoned (a separate C)
        p.run(false, stream_);
        FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
        const std::vector<uint32_t> out = bits_of(p.download_output_f32());
        if (run == 0) {
          first = out;
          EXPECT_TRUE(ft::check_download(p, ft::gpu_reference(p)).ok) << s.describe();
        } else {
          ASSERT_TRUE(out == first) << s.describe() << (alias ? " C=D" : " C apart") << " differs on run " << run;
        }
      }
    }
}

// A captured call replays to the eager call's D, bit for bit; with C = D each replay adds the product again, so D is
// reset to C before each.
TEST_F(Gpu, WgradGraphReplayEqualsEager) {
  for (const ft::ProblemShape& s : {wgrad(1024, 2112, 1536), wgrad(7, 136, 576)})
    for (bool alias : {true, false}) {
      ft::ProblemOptions opt;
      opt.seed = 7;
      opt.c_aliases_d = alias;
      ft::GemmProblem p(s, opt);
      p.poison_output(stream_);
      p.run(true, stream_);  // compile and build the plan outside the capture
      FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const std::vector<uint32_t> eager = bits_of(p.download_output_f32());
      EXPECT_TRUE(ft::check_download(p, ft::gpu_reference(p)).ok) << s.describe();
      const cudaGraphExec_t exec = capture(stream_, [&] { p.run(true, stream_); });
      for (int replay = 0; replay < 3; ++replay) {
        p.poison_output(stream_);
        FG_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
        FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
        EXPECT_TRUE(bits_of(p.download_output_f32()) == eager)
            << s.describe() << (alias ? " C=D" : " C apart") << ": replay " << replay << " differs from eager";
      }
      cudaGraphExecDestroy(exec);
    }
}

// Weight gradients on D^T's tiles (device::kOutF32AddToDT: the kernel runs the call's N x M x K with A and B swapped
// and reduces each tile into D transposed) with C = D: N a multiple of 128, M a multiple of 8 (D's rows, the kernel's
// columns) with the last tile clipped, K of one partial block up to 56 blocks, tiles with a narrower last part (144
// columns) and without (160). tests/CMakeLists.txt registers this test twice more, with
// FINEGEMM_FORCE_CONFIG=dt=1,bn=144 and dt=1,bn=160, so that every case runs on D^T's tiles of either width (here as
// the heuristic picks: D^T's tiles at 576x4096 and 2112x4096 among them, 128x176 at the latter, D's own elsewhere).
std::vector<ft::ProblemShape> d_transposed_shapes() {
  std::vector<ft::ProblemShape> shapes;
  for (int64_t m : {152, 296, 576, 1000})
    for (int64_t n : {128, 1024})
      for (int64_t k : {16, 640, 7168}) shapes.push_back(wgrad(m, n, k));
  for (const ft::ProblemShape& s : {wgrad(576, 4096, 7168), wgrad(7168, 4096, 2048), wgrad(2112, 1024, 1536),
                                    wgrad(2112, 4096, 7168), wgrad(1000, 4096, 640)})
    shapes.push_back(s);
  return shapes;
}

TEST_F(Gpu, WgradOnTheTilesOfDTransposed) {
  expect_wgrad_operands_correct("wgrad-dt", d_transposed_shapes(), 3300, false);  // C = D
}

// bf16 D = A x B^T with 1x128 scales of both operands (DeepGEMM's fp8_gemm_nt with recipe (1, 1, 128) and a bf16 d)
// on D^T's tiles (device::kOutBf16DT: each tile written into D transposed, by stmatrix.trans and a TMA store): the
// shapes above, D poisoned before the call, every element checked. The forced registrations (tests/CMakeLists.txt)
// run them on D^T's tiles of 144 and 160 columns too.
TEST_F(Gpu, Bf16OnTheTilesOfDTransposed) {
  expect_wgrad_operands_correct("bf16-dt", d_transposed_shapes(), 3400, true);
}

// Each bad input raises finegemm::Error before anything is enqueued: D (poisoned, C apart) stays as it was.
TEST_F(Gpu, WgradBadInputsLeaveDUntouched) {
  const ft::ProblemShape s = wgrad(64, 264, 640);
  ft::ProblemOptions opt;
  opt.seed = 8;
  opt.c_aliases_d = false;
  ft::GemmProblem p(s, opt);
  p.poison_output(stream_);
  const int64_t m = s.m, n = s.n, k = s.k, kb = p.kb();
  const fg::TensorView a = fg::TensorView::contiguous(p.a.get(), fg::DType::kFloat8E4M3, {m, k});
  const fg::TensorView sa = fg::TensorView::contiguous(p.sa_k_major.get(), fg::DType::kFloat32, {m, kb});
  const fg::TensorView b = fg::TensorView::contiguous(p.b.get(), fg::DType::kFloat8E4M3, {n, k});
  const fg::TensorView sb = fg::TensorView::strided(p.sb.get(), fg::DType::kFloat32, {n, kb}, {1, p.sb_n_pad()});
  const fg::TensorView d = fg::TensorView::contiguous(p.d.get(), fg::DType::kFloat32, {m, n});
  const fg::TensorView c = fg::TensorView::contiguous(p.c.get(), fg::DType::kFloat32, {m, n});
  const fg::TensorView d_bf16 = fg::TensorView::contiguous(p.d.get(), fg::DType::kBFloat16, {m, n});
  // C on D's memory, rows 4 floats longer (within D's buffer: the first M - 1 rows).
  const fg::TensorView c_strided = fg::TensorView::strided(p.d.get(), fg::DType::kFloat32, {m / 2, n}, {n + 4, 1});
  const fg::TensorView d_half = fg::TensorView::contiguous(p.d.get(), fg::DType::kFloat32, {m / 2, n});
  const fg::TensorView c_shifted =
      fg::TensorView::contiguous(p.d.as<float>() + 4 * n, fg::DType::kFloat32, {m / 2, n});
  const fg::TensorView sb_k_major = fg::TensorView::contiguous(p.sb_k_major.get(), fg::DType::kFloat32, {n, kb});
  const fg::TensorView sb_wrong = fg::TensorView::strided(p.sb.get(), fg::DType::kFloat32, {n - 8, kb}, {1, n});
  const fg::TensorView a_half = fg::TensorView::contiguous(p.a.get(), fg::DType::kFloat8E4M3, {m / 2, k});
  const fg::TensorView sa_half = fg::TensorView::contiguous(p.sa_k_major.get(), fg::DType::kFloat32, {m / 2, kb});
  const fg::Stream st = reinterpret_cast<fg::Stream>(stream_);
  const struct {
    const char* name;
    std::function<void()> call;
    const char* needle;
  } cases[] = {
      {"C with a bf16 D", [&] { fg::gemm_fp8_fp8_nt(a, sa, b, sb, d_bf16, c, st); },
       "C (D = C + A x B^T) needs a float32 D"},
      {"C on D's memory with another stride", [&] { fg::gemm_fp8_fp8_nt(a_half, sa_half, b, sb, d_half, c_strided, st); },
       "C is D's memory with another row stride"},
      {"C overlapping D", [&] { fg::gemm_fp8_fp8_nt(a_half, sa_half, b, sb, d_half, c_shifted, st); },
       "C overlaps D without being D"},
      {"SB K-major per row", [&] { fg::gemm_fp8_fp8_nt(a, sa, b, sb_k_major, d, c, st); },
       "1x128 SB must be MN-major and TMA-aligned"},
      {"SB of the wrong shape", [&] { fg::gemm_fp8_fp8_nt(a, sa, b, sb_wrong, d, c, st); },
       "SB must be [ceil(N/128), ceil(K/128)] (128x128 blocks) or [N, ceil(K/128)] (1x128 blocks)"},
  };
  for (const auto& t : cases) {
    try {
      t.call();
      ADD_FAILURE() << t.name << ": accepted";
    } catch (const fg::Error& e) {
      EXPECT_EQ(int(e.kind()), int(fg::Error::Kind::kInvalidArgument)) << t.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(t.needle), std::string::npos) << t.name << ": " << e.what();
    }
    FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const std::vector<uint32_t> after = p.d.download_as<uint32_t>(size_t(m * n));
    EXPECT_EQ(std::count(after.begin(), after.end(), ft::GemmProblem::kPoisonF32), int64_t(m * n))
        << t.name << ": D was written";
  }
  // The same tensors, valid, then run and check (the premise: the cases above differ only in what they name).
  p.run(true, stream_);
  FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  EXPECT_TRUE(ft::check_download(p, ft::gpu_reference(p)).ok);
}


namespace {

/// A K-grouped problem in DeepGEMM's SM90 layout with host copies for the CPU reference: expert g's A_g [M, K_g] and
/// B_g [N, K_g] (fp8, K-major, normal values quantized per 1x128) back to back, scales [sum KB][M] and [sum KB][N].
struct KGroupedProblem {
  int64_t m, n;
  std::vector<int64_t> ks;
  std::vector<std::vector<uint8_t>> a, b;  // per expert, row-major
  std::vector<std::vector<float>> sa, sb;  // per expert, K-major [rows, KB_g]
  ft::DeviceBuffer a_dev, sa_dev, b_dev, sb_dev, d_dev, ks_dev;
  std::vector<float> c;                    // [G, M, N], D's values before the call
  int64_t sum_k = 0, sum_kb = 0;

  KGroupedProblem(int64_t m_, int64_t n_, std::vector<int64_t> ks_, uint64_t seed) : m(m_), n(n_), ks(std::move(ks_)) {
    const int64_t g_count = int64_t(ks.size());
    for (int64_t k : ks) sum_k += k;
    sum_kb = sum_k / 128;
    std::vector<uint8_t> a_flat, b_flat;
    std::vector<float> sa_mn(size_t(sum_kb * m)), sb_mn(size_t(sum_kb * n));
    int64_t kb0 = 0;
    a.resize(ks.size());
    b.resize(ks.size());
    sa.resize(ks.size());
    sb.resize(ks.size());
    for (int64_t g = 0; g < g_count; ++g) {
      const int64_t k = ks[size_t(g)], kb = k / 128;
      if (k > 0) {
        fr::fill_quantized_normal_fp8(a[size_t(g)], sa[size_t(g)], m, k, 1, seed * 16 + uint64_t(g) * 2);
        fr::fill_quantized_normal_fp8(b[size_t(g)], sb[size_t(g)], n, k, 1, seed * 16 + uint64_t(g) * 2 + 1);
        a_flat.insert(a_flat.end(), a[size_t(g)].begin(), a[size_t(g)].end());
        b_flat.insert(b_flat.end(), b[size_t(g)].begin(), b[size_t(g)].end());
        for (int64_t r = 0; r < m; ++r)
          for (int64_t j = 0; j < kb; ++j) sa_mn[size_t((kb0 + j) * m + r)] = sa[size_t(g)][size_t(r * kb + j)];
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < kb; ++j) sb_mn[size_t((kb0 + j) * n + r)] = sb[size_t(g)][size_t(r * kb + j)];
      }
      kb0 += kb;
    }
    c.resize(size_t(g_count * m * n));
    fr::fill_random_normal(c, seed * 16 + 15, 4.0f);
    a_dev = ft::DeviceBuffer(std::max<size_t>(a_flat.size(), 16));
    b_dev = ft::DeviceBuffer(std::max<size_t>(b_flat.size(), 16));
    sa_dev = ft::DeviceBuffer(std::max<size_t>(sa_mn.size() * 4, 16));
    sb_dev = ft::DeviceBuffer(std::max<size_t>(sb_mn.size() * 4, 16));
    d_dev = ft::DeviceBuffer(c.size() * 4);
    ks_dev = ft::DeviceBuffer(ks.size() * 4);
    if (!a_flat.empty()) a_dev.upload(a_flat);
    if (!b_flat.empty()) b_dev.upload(b_flat);
    if (!sa_mn.empty()) sa_dev.upload(sa_mn);
    if (!sb_mn.empty()) sb_dev.upload(sb_mn);
    std::vector<int32_t> ks32(ks.begin(), ks.end());
    ks_dev.upload(ks32);
    reset_d();
  }

  void reset_d() { d_dev.upload(c); }

  void run(bool accumulate, cudaStream_t stream) {
    const int64_t g_count = int64_t(ks.size());
    fg::k_grouped_gemm_fp8_fp8_f32_nt(
        fg::TensorView::contiguous(a_dev.get(), fg::DType::kFloat8E4M3, {m * sum_k}),
        fg::TensorView::strided(sa_dev.get(), fg::DType::kFloat32, {m, sum_kb}, {1, m}),
        fg::TensorView::contiguous(b_dev.get(), fg::DType::kFloat8E4M3, {n * sum_k}),
        fg::TensorView::strided(sb_dev.get(), fg::DType::kFloat32, {n, sum_kb}, {1, n}),
        fg::TensorView::contiguous(d_dev.get(), fg::DType::kFloat32, {g_count, m, n}), ks,
        fg::TensorView::contiguous(ks_dev.get(), fg::DType::kInt32, {g_count}), accumulate, std::nullopt,
        reinterpret_cast<fg::Stream>(stream));
  }

  std::vector<float> download() const {
    std::vector<float> out(c.size());
    d_dev.download(out.data(), out.size() * 4);
    return out;
  }

  /// Checks `out` expert by expert against the fp64 reference (D = C + A_g B_g^T, or A_g B_g^T without accumulation;
  /// an empty expert's D[g] is C[g], or zero).
  std::string check(const std::vector<float>& out, bool accumulate) const {
    std::string failures;
    for (size_t g = 0; g < ks.size(); ++g) {
      const float* got = out.data() + g * size_t(m * n);
      const float* before = c.data() + g * size_t(m * n);
      if (ks[g] == 0) {
        for (int64_t i = 0; i < m * n; ++i)
          if (got[i] != (accumulate ? before[i] : 0.0f)) {
            failures += "expert " + std::to_string(g) + " (empty) changed\n";
            break;
          }
        continue;
      }
      std::vector<double> abs_sum;
      std::vector<double> ref = fr::gemm_nt_reference_sb_per_row(a[g].data(), sa[g].data(), b[g].data(),
                                                                 sb[g].data(), m, n, ks[g], &abs_sum);
      if (accumulate) fr::add_c_to_reference(ref, before, n, m, n);
      const fr::CheckResult r =
          fr::check_f32_output(got, n, ref.data(), abs_sum.data(), m, n, ft::kMaxDiff, ft::kAccumTolerance);
      if (!r.ok) failures += "expert " + std::to_string(g) + ": " + r.summary() + "\n";
    }
    return failures;
  }
};

}  // namespace

// The K-grouped weight gradient against the CPU reference, expert by expert: an empty expert, one expert, N and M
// not multiples of the tile, M of at most 64 rows (one warpgroup's rows of the 128-row tile), adding into D and
// overwriting it; bitwise the same over repeated runs.
TEST_F(Gpu, KGroupedAgainstReference) {
  struct Case {
    int64_t m, n;
    std::vector<int64_t> ks;
  };
  const Case cases[] = {{256, 256, {256, 0, 384, 128}}, {136, 264, {128}}, {8, 128, {128, 256}}, {64, 520, {384, 0, 128}},
                        {512, 1024, {512, 640, 0, 0, 896, 128}},
                        {1024, 576, {1024, 1024}}};
  int i = 0;
  for (const Case& cs : cases) {
    for (bool accumulate : {true, false}) {
      KGroupedProblem p(cs.m, cs.n, cs.ks, uint64_t(40 + i++));
      p.run(accumulate, stream_);
      FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const std::vector<float> first = p.download();
      const std::string failures = p.check(first, accumulate);
      std::printf("[k-grouped] M=%lld N=%lld G=%zu accumulate=%d %s\n", (long long)cs.m, (long long)cs.n,
                  cs.ks.size(), int(accumulate), failures.empty() ? "ok" : "FAIL");
      EXPECT_TRUE(failures.empty()) << failures;
      for (int run = 0; run < 3; ++run) {
        p.reset_d();
        p.run(accumulate, stream_);
        FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
        EXPECT_EQ(p.download(), first) << "run " << run + 1 << " differs bitwise";
      }
    }
  }
  EXPECT_EQ(fg::device_error_flags(), 0u);
}

// ks_device changed between replays of a captured call (same sum): each replay computes the new split.
TEST_F(Gpu, KGroupedGraphReplayWithNewSplit) {
  KGroupedProblem p(256, 512, {256, 256, 256, 256}, 77);
  p.run(true, stream_);  // compile before capture
  FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaGraphExec_t exec = capture(stream_, [&] { p.run(true, stream_); });
  // Another split of the same token count (expert 0 takes 512 tokens, expert 1 none): q's operands, laid out for
  // it, copied into the buffers the graph reads, and the new ks into ks_device.
  KGroupedProblem q(256, 512, {512, 0, 256, 256}, 77);
  p.ks_dev.upload(std::vector<int32_t>{512, 0, 256, 256});
  FG_CUDA_CHECK(cudaMemcpy(p.a_dev.get(), q.a_dev.get(), q.a_dev.size(), cudaMemcpyDeviceToDevice));
  FG_CUDA_CHECK(cudaMemcpy(p.b_dev.get(), q.b_dev.get(), q.b_dev.size(), cudaMemcpyDeviceToDevice));
  FG_CUDA_CHECK(cudaMemcpy(p.sa_dev.get(), q.sa_dev.get(), q.sa_dev.size(), cudaMemcpyDeviceToDevice));
  FG_CUDA_CHECK(cudaMemcpy(p.sb_dev.get(), q.sb_dev.get(), q.sb_dev.size(), cudaMemcpyDeviceToDevice));
  p.d_dev.upload(q.c);
  FG_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
  FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const std::string failures = q.check(p.download(), true);
  EXPECT_TRUE(failures.empty()) << failures;
  cudaGraphExecDestroy(exec);
}

// ---- the K-grouped weight gradient through the tools (GemmProblem: `finegemm check`, bench and stress) ------------

// `finegemm check`'s K-grouped cases: problems as the tools build them (the experts' K drawn from the seed with some
// experts empty, or given), run with accumulation (D holds C) and without (D poisoned: the call must zero it and write
// every expert's D[g]), checked expert by expert against the CPU reference; the GPU reference, which bench and stress
// check against, agrees with it. M and N off the tiles with several experts, N = 8, one expert, 16 experts, experts
// without tokens first, in the middle and five in a row.
TEST_F(Gpu, KGroupedToolsCheckAgainstTheCpuReference) {
  struct Case {
    int groups;
    int64_t m, n, k;
    std::vector<int64_t> ks;  // empty: drawn from the seed (draw_expert_ks)
  };
  const Case cases[] = {{4, 136, 264, 256, {}},  {3, 72, 576, 384, {384, 0, 128}},        {1, 264, 136, 640, {}},
                        {8, 200, 1024, 128, {}}, {2, 256, 8, 512, {0, 512}},               {16, 72, 64, 128, {}},
                        {6, 136, 576, 256, {0, 0, 0, 0, 0, 128}}};
  int i = 0;
  for (const Case& cs : cases) {
    for (bool accumulate : {true, false}) {
      const ft::ProblemShape s = shape(GemmKind::kGroupedK, cs.groups, cs.m, cs.n, cs.k);
      ft::ProblemOptions opt;
      opt.seed = uint64_t(4000 + i);
      opt.expert_ks = cs.ks;
      opt.accumulate = accumulate;
      opt.data = i % 2 == 0 ? ft::DataKind::kNormal : ft::DataKind::kUniform;
      ++i;
      ft::GemmProblem p(s, opt);
      ASSERT_EQ(p.expert_ks(), cs.ks.empty() ? ft::draw_expert_ks(s, opt.seed) : cs.ks);
      if (cs.groups > 1) EXPECT_NE(std::count(p.expert_ks().begin(), p.expert_ks().end(), 0), 0) << s.describe();
      p.poison_output(stream_);
      p.run(false, stream_);
      FG_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const ft::Reference cpu = ft::cpu_reference(p);
      const ft::Verdict v = ft::check_download(p, cpu);
      std::string split;
      for (int64_t k : p.expert_ks()) split += (split.empty() ? "" : ",") + std::to_string(k);
      std::printf("[kgrouped-tools] %-34s ks=%-24s %s %s\n", s.describe().c_str(), split.c_str(),
                  accumulate ? "D+=" : "D= ", v.summary.c_str());
      EXPECT_TRUE(v.ok) << s.describe() << " ks=" << split << (accumulate ? " D+=" : " D=") << "\n" << v.summary;
      // The GPU reference of the same problem: the same values and magnitudes, up to fp64 rounding.
      const ft::Reference gpu = ft::gpu_reference(p);
      ASSERT_EQ(gpu.value.size(), cpu.value.size());
      double worst = 0;
      for (size_t e = 0; e < cpu.value.size(); ++e) {
        const double scale = cpu.abs_sum[e] + std::abs(cpu.value[e]) + 1e-300;
        worst = std::max({worst, std::abs(gpu.value[e] - cpu.value[e]) / scale,
                          std::abs(gpu.abs_sum[e] - cpu.abs_sum[e]) / scale});
      }
      EXPECT_LT(worst, 1e-12) << s.describe() << " ks=" << split;
    }
  }
  EXPECT_EQ(fg::device_error_flags(), 0u);
}

// The shape file's K-grouped rows (DeepGEMM's SM90 cases) as bench runs them: drawn splits, D += A_g x B_g^T, checked
// against the GPU reference; the flops count the real tokens only.
TEST_F(Gpu, KGroupedSeedShapes) {
  const std::vector<ft::ProblemShape> shapes =
      ft::read_shape_file(repository_file("data/shapes/deepseek_v3_kgrouped.csv"));
  ASSERT_EQ(shapes.size(), 6u);
  precompile(shapes);
  int i = 0;
  for (const auto& s : shapes) {
    ASSERT_EQ(s.kind, GemmKind::kGroupedK) << s.describe();
    ft::ProblemOptions opt;
    opt.seed = uint64_t(4100 + i++);
    ft::GemmProblem p(s, opt);
    EXPECT_DOUBLE_EQ(p.flops(), 2.0 * double(s.m) * double(s.n) * double(p.sum_k())) << s.describe();
    const ft::Verdict v = run_and_check(p, false);
    std::printf("[kgrouped] %-36s tokens=%-6lld %s\n", s.describe().c_str(), (long long)p.sum_k(), v.summary.c_str());
    EXPECT_TRUE(v.ok) << s.describe() << "\n" << v.summary;
  }
  EXPECT_EQ(fg::device_error_flags(), 0u);
}
