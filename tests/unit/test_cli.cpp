// The CLI on the CPU: `finegemm warmup` compiles each kernel once when 4 processes share an empty cache, a copied
// cache directory is hit without recompiling, and commands that need a GPU say so clearly; the shape files behind
// the commands.
#include <gtest/gtest.h>

#include "run_command.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "lib/shapes.hpp"

namespace fs = std::filesystem;
namespace ft = finegemm::tools;
using finegemm::GemmKind;

namespace {

using finegemm::test::run_command;

int compiled_count(const std::string& out) {
  std::smatch m;
  const std::regex re(R"((\d+) kernels compiled)");
  return std::regex_search(out, m, re) ? std::stoi(m[1]) : -1;
}

fs::path temp_dir() {
  char tmpl[] = "/tmp/finegemm-cli-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

const std::string kCli = FINEGEMM_CLI_PATH;

}  // namespace

TEST(Cli, ConcurrentWarmupsCompileEachKernelOnce) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  const fs::path dir = temp_dir(), cache = dir / "cache";
  std::ofstream(dir / "shapes.csv") << "kind,groups,m,n,k\nnormal,1,64,576,256\nnormal,1,64,2112,512\nmasked,4,64,576,256\n";
  const std::string cmd = "FINEGEMM_CACHE_DIR=" + cache.string() + " " + kCli + " warmup --shapes " +
                          (dir / "shapes.csv").string() + " --m-range 1:300 --sms 132 --jobs 1";
  // Four processes at once, then a fifth on the warm cache.
  std::string script = "(";
  for (int i = 0; i < 4; ++i) script += cmd + " > " + (dir / ("out" + std::to_string(i))).string() + " 2>&1 & ";
  script += "wait)";
  int status = 0;
  run_command(script, &status);
  int total = 0;
  for (int i = 0; i < 4; ++i) {
    std::ifstream in(dir / ("out" + std::to_string(i)));
    const std::string out((std::istreambuf_iterator<char>(in)), {});
    const int c = compiled_count(out);
    ASSERT_GE(c, 0) << out;
    total += c;
  }
  const std::string again = run_command(cmd);
  EXPECT_EQ(compiled_count(again), 0) << again;
  // Distinct kernels = cache entries.
  size_t entries = 0;
  for (const auto& e : fs::recursive_directory_iterator(cache / "kernels"))
    if (e.path().extension() == ".bin") ++entries;
  EXPECT_GT(entries, 0u);
  EXPECT_EQ(size_t(total), entries) << "each kernel compiled exactly once across the 4 processes";
  // A copy of the cache at another path is hit without recompiling.
  fs::copy(cache, dir / "copied", fs::copy_options::recursive);
  const std::string copied = run_command("FINEGEMM_CACHE_DIR=" + (dir / "copied").string() + " " + kCli + " warmup --shapes " +
                                 (dir / "shapes.csv").string() + " --m-range 1:300 --sms 132 --jobs 1");
  EXPECT_EQ(compiled_count(copied), 0) << copied;
  fs::remove_all(dir);
}

TEST(Cli, GpuCommandsSayWhenThereIsNoGpu) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  int status = 0;
  const std::string out = run_command(kCli + " bench", &status);
  if (out.find("no Hopper GPU present") == std::string::npos) GTEST_SKIP() << "a GPU is present: " << out.substr(0, 200);
  EXPECT_EQ(status, 0);
  const std::string usage = run_command(kCli + " frobnicate", &status);
  EXPECT_EQ(status, 2);
  EXPECT_NE(usage.find("usage: finegemm"), std::string::npos);
}

TEST(Cli, CheckFailsOnACorruptedOutput) {
  // The checker and its exit code, on the CPU (scripts/device-check.sh runs the GPU version with --corrupt too).
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  int status = -1;
  const std::string good = run_command(kCli + " check --cpu --cases 4 --seed 3", &status);
  EXPECT_EQ(status, 0) << good;
  EXPECT_NE(good.find("4 passed, 0 failed"), std::string::npos) << good;
  const std::string bad = run_command(kCli + " check --cpu --cases 4 --seed 3 --corrupt", &status);
  EXPECT_EQ(status, 1) << bad;
  EXPECT_NE(bad.find("FAILED. Replay: finegemm check --cpu --seed 3 --cases 1 --corrupt"), std::string::npos) << bad;
}

TEST(Cli, PlanPrintsTheHeuristicsPickWithoutAGpu) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  int status = -1;
  // The seed file (the default): one line per shape, each with its configuration.
  std::string out = run_command(kCli + " plan", &status);
  EXPECT_EQ(status, 0) << out;
  int lines = 0;
  for (size_t at = out.find(" | BM="); at != std::string::npos; at = out.find(" | BM=", at + 1)) ++lines;
  EXPECT_EQ(lines, 28) << out;
  EXPECT_NE(out.find("normal       1   4096   7168  16384 | BM=256 BN=128 stages=3"), std::string::npos) << out;
  // Over an M range: one line where the pick changes, the first at the range's start.
  const fs::path dir = temp_dir();
  {
    std::ofstream f(dir / "one.csv");
    f << "kind,groups,m,n,k\nnormal,1,1,32768,512\n";
  }
  out = run_command(kCli + " plan --shapes " + (dir / "one.csv").string() + " --m-range 1:600", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("normal       1      1  32768    512 | BM=64 BN=128"), std::string::npos) << out;
  EXPECT_NE(out.find("normal       1    129  32768    512 | BM=256 BN=128"), std::string::npos) << out;
  EXPECT_EQ(out.find("normal       1      2  32768"), std::string::npos) << out;
  // A bad range is an error that says what to pass.
  out = run_command(kCli + " plan --m-range 9:3 2>&1", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("plan: --m-range needs 1 <= LO <= HI"), std::string::npos) << out;
  out = run_command(kCli + " warmup --m-range 1-8 2>&1", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("warmup: --m-range needs 1 <= LO <= HI as LO:HI, got '1-8'"), std::string::npos) << out;
  fs::remove_all(dir);
}

// ---- shape files -------------------------------------------------------------------------------------------------

TEST(Shapes, UnsupportedShapesAreSetAsideWithTheirReason) {
  std::vector<ft::ProblemShape> shapes = ft::parse_shapes(
      "kind,groups,m,n,k\n"
      "normal,1,64,7168,2048\n"
      "normal,1,64,1001,2048\n"    // N not a multiple of 8
      "masked,4,256,4096,7168\n"
      "normal,1,128,4096,100\n",   // K not a multiple of 16
      "test");
  const std::vector<ft::UnsupportedShape> removed = ft::remove_unsupported(shapes, false);
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].n, 7168);
  EXPECT_EQ(shapes[1].kind, GemmKind::kGroupedMasked);
  ASSERT_EQ(removed.size(), 2u);
  EXPECT_EQ(removed[0].shape.n, 1001);
  EXPECT_NE(removed[0].reason.find("N must be a positive multiple of 8"), std::string::npos) << removed[0].reason;
  EXPECT_EQ(removed[1].shape.k, 100);
  EXPECT_NE(removed[1].reason.find("K"), std::string::npos) << removed[1].reason;
  // Every seed shape fits without a forced configuration.
  std::vector<ft::ProblemShape> seed =
      ft::read_shape_file(std::string(FINEGEMM_SOURCE_DIR) + "/data/shapes/deepseek_v3.csv");
  const size_t count = seed.size();
  EXPECT_TRUE(ft::remove_unsupported(seed, false).empty());
  EXPECT_TRUE(ft::remove_unsupported(seed, true).empty());
  EXPECT_EQ(seed.size(), count);
}
