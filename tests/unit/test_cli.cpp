// The CLI on the CPU: every command rejects a bad command line with one line naming the option, before doing
// anything; `finegemm warmup` compiles each kernel once when 4 processes share an empty cache, and a copied cache
// directory is hit without recompiling; commands that need a GPU say so clearly; the shape files, the option parser
// and the bench's CSV writer behind the commands.
#include <gtest/gtest.h>

#include "run_command.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lib/bench_csv.hpp"
#include "lib/cli_args.hpp"
#include "lib/shapes.hpp"

namespace fs = std::filesystem;
namespace ft = finegemm::tools;
using finegemm::DType;
using finegemm::GemmKind;
using finegemm::Problem;

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

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

size_t count_lines(const std::string& text) {
  size_t n = 0;
  for (char c : text) n += c == '\n';
  return n + (!text.empty() && text.back() != '\n');
}

bool is_empty_dir(const fs::path& dir) { return fs::is_directory(dir) && fs::is_empty(dir); }

const std::string kCli = FINEGEMM_CLI_PATH;

/// A CLI run with stdout and stderr apart.
struct CliRun {
  int status = -1;
  std::string out, err;
};

/// `finegemm ARGS` through the shell, from directory `cwd`, with `env` (NAME=value words) before it.
CliRun run_cli(const std::string& args, const fs::path& cwd, const std::string& env = "") {
  const fs::path err_file = fs::temp_directory_path() / ("finegemm-cli-stderr-" + std::to_string(::getpid()));
  const std::string cmd = "cd '" + cwd.string() + "' && " + env + " " + kCli + " " + args + " 2> '" +
                          err_file.string() + "'";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while (p != nullptr && (n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int rc = p != nullptr ? pclose(p) : -1;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.err = read_text(err_file);
  fs::remove(err_file);
  return r;
}

/// Whether this machine has a Hopper GPU, as `finegemm info` sees it; `info` receives its device line.
bool has_gpu(std::string* info) {
  const CliRun r = run_cli("info", fs::temp_directory_path());
  const size_t at = r.out.find("device: ");
  *info = at == std::string::npos ? r.out : r.out.substr(at, r.out.find('\n', at) - at);
  return r.out.find("device: no Hopper GPU") == std::string::npos;
}

}  // namespace

// ---- bad command lines -------------------------------------------------------------------------------------------

TEST(Cli, BadCommandLinesExitTwoWithOneLineNamingTheOption) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  const fs::path dir = temp_dir(), work = dir / "work", cache = dir / "cache", inputs = dir / "inputs";
  fs::create_directories(work);
  fs::create_directories(cache);
  fs::create_directories(inputs);
  const std::string shapes = (inputs / "shapes.csv").string();
  std::ofstream(shapes) << "kind,groups,m,n,k\nnormal,1,64,576,256\n";
  const std::string grouped = (inputs / "grouped.csv").string();
  std::ofstream(grouped) << "kind,groups,m,n,k\nmasked,4,256,4096,7168\ncontiguous,4,8192,7168,2048\n";
  const struct {
    std::string args;
    std::string message;  // the whole line on stderr starts with it
  } cases[] = {
      {"bench --bogus", "finegemm bench: unknown option --bogus (options: --ceiling, --chain, --csv, --data, "
                        "--experts, --flush, --iters, --kinds, --layers, --m, --sa, --shapes)"},
      {"bench --power 5", "finegemm bench: unknown option --power ("},
      {"bench --iters", "finegemm bench: --iters takes an integer in 1..10000, got no value"},
      {"bench --iters --ceiling", "finegemm bench: --iters takes an integer in 1..10000, got no value"},
      {"bench --iters 0", "finegemm bench: --iters takes an integer in 1..10000, got '0'"},
      {"bench --iters=3.5", "finegemm bench: --iters takes an integer in 1..10000, got '3.5'"},
      {"bench --iters 5 --iters 6", "finegemm bench: --iters given twice"},
      {"bench --flush fast", "finegemm bench: --flush takes one of memset, read, none, got 'fast'"},
      {"bench --kinds normal,dense",
       "finegemm bench: --kinds takes a comma list of distinct words from normal, contiguous, masked, psum, wgrad, "
       "kgrouped, got 'normal,dense'"},
      {"bench --kinds normal,normal",
       "finegemm bench: --kinds takes a comma list of distinct words from normal, contiguous, masked, psum, wgrad, "
       "kgrouped, got 'normal,normal'"},
      {"bench --kinds wgrad,dgrad",
       "finegemm bench: --kinds takes a comma list of distinct words from normal, contiguous, masked, psum, wgrad, "
       "kgrouped, got 'wgrad,dgrad'"},
      {"bench --shapes " + (inputs / "missing.csv").string(),
       "finegemm bench: --shapes takes an existing file, got '" + (inputs / "missing.csv").string() + "'"},
      {"bench --ceiling=yes", "finegemm bench: --ceiling takes no value, got 'yes'"},
      {"bench --csv " + (dir / "no-such-dir" / "out.csv").string(),
       "finegemm bench: --csv takes a file path in an existing directory, got '" +
           (dir / "no-such-dir" / "out.csv").string() + "'"},
      {"bench out.csv", "finegemm bench: unexpected argument 'out.csv' (options: "},
      {"bench --chain --ceiling",
       "finegemm bench: --ceiling does not go with --chain (it takes --layers, --m, --shapes, --iters and --csv)"},
      {"bench --chain --kinds normal", "finegemm bench: --kinds does not go with --chain ("},
      {"bench --sa k --chain", "finegemm bench: --sa does not go with --chain ("},
      {"bench --chain --flush none", "finegemm bench: --flush does not go with --chain ("},
      {"bench --chain --experts equal", "finegemm bench: --experts does not go with --chain ("},
      {"bench --chain --data uniform", "finegemm bench: --data does not go with --chain ("},
      {"bench --chain=1", "finegemm bench: --chain takes no value, got '1'"},
      {"bench --chain --layers 0", "finegemm bench: --layers takes an integer in 1..256, got '0'"},
      {"bench --chain --layers 257", "finegemm bench: --layers takes an integer in 1..256, got '257'"},
      {"bench --chain --layers", "finegemm bench: --layers takes an integer in 1..256, got no value"},
      {"bench --chain --m 0", "finegemm bench: --m takes a comma list of distinct integers in 1..2147483648, got '0'"},
      {"bench --chain --m abc",
       "finegemm bench: --m takes a comma list of distinct integers in 1..2147483648, got 'abc'"},
      {"bench --chain --m 16,16",
       "finegemm bench: --m takes a comma list of distinct integers in 1..2147483648, got '16,16'"},
      {"bench --chain --m 1,-4", "finegemm bench: --m takes a comma list of distinct integers in 1..2147483648, got"},
      {"bench --chain --m 64,", "finegemm bench: --m takes a comma list of distinct integers in 1..2147483648, got"},
      {"bench --chain --iters 19", "finegemm bench: --iters takes an integer in 20..10000 with --chain, got '19'"},
      {"bench --layers 4", "finegemm bench: --layers goes with --chain"},
      {"bench --m 64 --ceiling", "finegemm bench: --m goes with --chain"},
      {"bench --chain --shapes " + grouped,
       "finegemm bench: --chain takes the (N, K) of the shape file's normal rows, and " + grouped + " has none"},
      {"check --cases -3", "finegemm check: --cases takes an integer in 1..1000000, got '-3'"},
      {"check --cpu --seed x1", "finegemm check: --seed takes an integer in 0..9223372036854775807, got 'x1'"},
      {"check --cpu --corrupt extra", "finegemm check: unexpected argument 'extra' (options: "},
      {"check --kinds wgrad,", "finegemm check: --kinds takes a comma list of distinct words from normal, contiguous, "
                               "masked, psum, wgrad, kgrouped, got 'wgrad,'"},
      {"check --cpu --kinds kgrouped,kgrouped", "finegemm check: --kinds takes a comma list of distinct words from "
                                                "normal, contiguous, masked, psum, wgrad, kgrouped, got "
                                                "'kgrouped,kgrouped'"},
      {"check --kinds k-grouped", "finegemm check: --kinds takes a comma list of distinct words from normal, "
                                  "contiguous, masked, psum, wgrad, kgrouped, got 'k-grouped'"},
      {"bench --kinds kgrouped --chain", "finegemm bench: --kinds does not go with --chain ("},
      {"warmup " + shapes, "finegemm warmup: unexpected argument '" + shapes + "' (options: "},
      {"warmup --jobs 0", "finegemm warmup: --jobs takes an integer in 1..1024, got '0'"},
      {"warmup --m-range 5:2", "finegemm warmup: --m-range takes LO:HI with 1 <= LO <= HI <= 2147483648, got '5:2'"},
      {"warmup --m-range 1-8", "finegemm warmup: --m-range takes LO:HI with 1 <= LO <= HI <= 2147483648, got '1-8'"},
      {"warmup --n 576", "finegemm warmup: --n and --k go together, got only --n"},
      {"warmup --n 576,x --k 512",
       "finegemm warmup: --n takes a comma list of distinct integers in 1..2147483648, got '576,x'"},
      {"warmup --n 576 --k 512 --kind dense",
       "finegemm warmup: --kind takes one of normal, contiguous, masked, psum, wgrad, kgrouped, got 'dense'"},
      {"warmup --n 576 --k 512 --kind kgrouped --groups 0",
       "finegemm warmup: --groups takes an integer in 1..65536, got '0'"},
      {"warmup --kind kgrouped --groups 4",
       "finegemm warmup: --kind describes the --n/--k shapes, got no --n/--k"},
      {"warmup --groups 4 --k 512", "finegemm warmup: --n and --k go together, got only --k"},
      {"warmup --n 576 --k 512 --groups 4", "finegemm warmup: --groups takes 1 with --kind normal, got '4'"},
      {"warmup --n 576 --k 512 --kind wgrad --groups 2",
       "finegemm warmup: --groups takes 1 with --kind wgrad, got '2'"},
      {"warmup --kind wgrad", "finegemm warmup: --kind describes the --n/--k shapes, got no --n/--k"},
      {"warmup --shapes " + shapes + " --n 576 --k 512",
       "finegemm warmup: --shapes and --n/--k are alternatives, got both"},
      {"plan --sms abc", "finegemm plan: --sms takes an integer in 1..1024, got 'abc'"},
      {"plan --sms 1025", "finegemm plan: --sms takes an integer in 1..1024, got '1025'"},
      {"plan --sa rows", "finegemm plan: --sa takes one of mn, k, got 'rows'"},
      {"plan --m-range 0:10", "finegemm plan: --m-range takes LO:HI with 1 <= LO <= HI <= 2147483648, got '0:10'"},
      {"plan -s 3", "finegemm plan: unknown option -s (options: --m-range, --sa, --shapes, --sms)"},
      {"stress --threads 0", "finegemm stress: --threads takes an integer in 1..256, got '0'"},
      {"stress --seconds -3", "finegemm stress: --seconds takes a number in (0, 86400], got '-3'"},
      {"stress --devices 0,0",
       "finegemm stress: --devices takes 'all' or a comma list of distinct integers in 0..1023, got '0,0'"},
      {"stress threads=8", "finegemm stress: unexpected argument 'threads=8' (options: "},
      {"info --verbose", "finegemm info: unknown option --verbose (info takes no options)"},
      {"frobnicate", "finegemm: unknown command 'frobnicate' (commands: bench, check, warmup, plan, stress, info"},
      {"--bench", "finegemm: unknown command '--bench' (commands: "},
  };
  for (const auto& c : cases) {
    const CliRun r = run_cli(c.args, work, "FINEGEMM_CACHE_DIR='" + cache.string() + "'");
    EXPECT_EQ(r.status, 2) << c.args << "\nstdout: " << r.out << "\nstderr: " << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_EQ(count_lines(r.err), 1u) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.rfind(c.message, 0), 0u) << c.args << "\nexpected: " << c.message << "\ngot:      " << r.err;
    EXPECT_TRUE(is_empty_dir(cache)) << c.args << " wrote into the cache directory";
    EXPECT_TRUE(is_empty_dir(work)) << c.args << " wrote into its working directory";
  }
  fs::remove_all(dir);
}

TEST(Cli, HelpExitsZeroForTheToolAndEachCommand) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  const fs::path cwd = fs::temp_directory_path();
  for (const char* args : {"--help", "-h", "help"}) {
    const CliRun r = run_cli(args, cwd);
    EXPECT_EQ(r.status, 0) << args << ": " << r.err;
    EXPECT_EQ(r.out.rfind("usage: finegemm <command> [options]", 0), 0u) << r.out;
    for (const char* command : {"  bench   ", "  check   ", "  warmup  ", "  plan    ", "  stress  ", "  info    "})
      EXPECT_NE(r.out.find(command), std::string::npos) << command << " missing from: " << r.out;
    EXPECT_EQ(r.out.find("--power"), std::string::npos) << r.out;
    EXPECT_EQ(r.err, "");
  }
  for (const char* command : {"bench", "check", "warmup", "plan", "stress", "info"}) {
    for (const char* flag : {"--help", "-h"}) {
      // Help wins over the other words, even a bad one: nothing runs.
      const CliRun r = run_cli(std::string(command) + " --bogus " + flag, cwd);
      EXPECT_EQ(r.status, 0) << command << " " << flag << ": " << r.err;
      EXPECT_EQ(r.out.rfind(std::string("usage: finegemm ") + command, 0), 0u) << r.out;
      EXPECT_EQ(r.err, "");
    }
  }
  // The bench's help documents the CSV it writes.
  const CliRun bench = run_cli("bench --help", cwd);
  EXPECT_NE(bench.out.find("'# finegemm bench; device=NAME"), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("x_cublaslt,check"), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("| --chain [--layers 16] [--m 1,16,64,128]"), std::string::npos) << bench.out;
  // No command at all: the usage on stderr, exit 2.
  const CliRun none = run_cli("", cwd);
  EXPECT_EQ(none.status, 2);
  EXPECT_EQ(none.out, "");
  EXPECT_EQ(none.err.rfind("usage: finegemm <command> [options]", 0), 0u) << none.err;
}

// ---- without a GPU -----------------------------------------------------------------------------------------------

TEST(Cli, GpuCommandsExitOneWithOneLineWithoutAGpu) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  std::string info;
  if (has_gpu(&info))
    GTEST_SKIP() << "a Hopper GPU is present (" << info << "): the no-GPU exits of bench, check and stress cannot be "
                 << "exercised on this machine";
  const fs::path dir = temp_dir(), cache = dir / "cache";
  fs::create_directories(cache);
  for (const char* command : {"bench", "bench --ceiling --csv out.csv", "bench --chain",
                              "bench --chain --layers 4 --m 64 --csv out.csv", "bench --kinds kgrouped", "check",
                              "check --cases 3", "check --kinds kgrouped", "stress", "stress --kinds kgrouped"}) {
    const CliRun r = run_cli(command, dir, "FINEGEMM_CACHE_DIR='" + cache.string() + "'");
    const std::string name = std::string(command).substr(0, std::string(command).find(' '));
    EXPECT_EQ(r.status, 1) << command << ": " << r.out << r.err;
    EXPECT_EQ(r.out, "") << command;
    EXPECT_EQ(count_lines(r.err), 1u) << command << ": " << r.err;
    EXPECT_EQ(r.err.rfind("finegemm " + name + ": no Hopper GPU present (", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("): " + name + " needs one\n"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir / "out.csv")) << command;
  }
  EXPECT_TRUE(is_empty_dir(cache));
  fs::remove_all(dir);
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

TEST(Cli, CheckOfTheWgradCheckerFailsOnACorruptedOutput) {
  // The fp32 check with C (wgrad) on the CPU: passes on a correct output, fails on one flipped element.
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  int status = -1;
  const std::string good = run_command(kCli + " check --cpu --cases 4 --seed 5 --kinds wgrad", &status);
  EXPECT_EQ(status, 0) << good;
  EXPECT_NE(good.find("4 passed, 0 failed"), std::string::npos) << good;
  EXPECT_NE(good.find("case 3  cpu wgrad M="), std::string::npos) << good;
  EXPECT_EQ(good.find("cpu bf16"), std::string::npos) << good;
  const std::string bad = run_command(kCli + " check --cpu --cases 4 --seed 5 --kinds wgrad --corrupt", &status);
  EXPECT_EQ(status, 1) << bad;
  EXPECT_NE(bad.find("FAILED. Replay: finegemm check --cpu --seed 5 --cases 1 --corrupt --kinds wgrad"),
            std::string::npos)
      << bad;
  // With every kind (the default), the cases alternate between the bf16 and the fp32 checks.
  const std::string both = run_command(kCli + " check --cpu --cases 2 --seed 5", &status);
  EXPECT_EQ(status, 0) << both;
  EXPECT_NE(both.find("case 0  cpu bf16 M="), std::string::npos) << both;
  EXPECT_NE(both.find("case 1  cpu wgrad M="), std::string::npos) << both;
}

TEST(Cli, CheckOfTheKGroupedCheckerFailsOnACorruptedOutput) {
  // The K-grouped check on the CPU, expert by expert with C: passes on a correct output, fails on one flipped element.
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  int status = -1;
  const std::string good = run_command(kCli + " check --cpu --cases 6 --seed 5 --kinds kgrouped", &status);
  EXPECT_EQ(status, 0) << good;
  EXPECT_NE(good.find("6 passed, 0 failed"), std::string::npos) << good;
  EXPECT_NE(good.find("case 5  cpu kgrouped G="), std::string::npos) << good;
  EXPECT_EQ(good.find("cpu bf16"), std::string::npos) << good;
  EXPECT_EQ(good.find("cpu wgrad"), std::string::npos) << good;
  // Some case has an expert without tokens (its output must be C as it was).
  EXPECT_TRUE(std::regex_search(good, std::regex(R"(ks=([0-9]+,)*0[, ])"))) << good;
  const std::string bad = run_command(kCli + " check --cpu --cases 6 --seed 5 --kinds kgrouped --corrupt", &status);
  EXPECT_EQ(status, 1) << bad;
  EXPECT_NE(bad.find("FAILED. Replay: finegemm check --cpu --seed 5 --cases 1 --corrupt --kinds kgrouped"),
            std::string::npos)
      << bad;
  // With every kind (the default), the cases take the bf16, wgrad and K-grouped checks in turn.
  const std::string all = run_command(kCli + " check --cpu --cases 3 --seed 5", &status);
  EXPECT_EQ(status, 0) << all;
  EXPECT_NE(all.find("case 0  cpu bf16 M="), std::string::npos) << all;
  EXPECT_NE(all.find("case 1  cpu wgrad M="), std::string::npos) << all;
  EXPECT_NE(all.find("case 2  cpu kgrouped G="), std::string::npos) << all;
}

// ---- warmup and plan ---------------------------------------------------------------------------------------------

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
    const std::string out = read_text(dir / ("out" + std::to_string(i)));
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

TEST(Cli, WarmupCompilesTheWgradKernels) {
  // The weight-gradient kernels are kernels of their own: a cache warmed for the forward GEMM of the same N and K
  // does not hold them, and a shape file's wgrad rows and --kind wgrad warm the same ones.
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  const fs::path dir = temp_dir(), cache = dir / "cache";
  std::ofstream(dir / "normal.csv") << "kind,groups,m,n,k\nnormal,1,64,256,640\n";
  std::ofstream(dir / "wgrad.csv") << "kind,groups,m,n,k\nwgrad,1,64,256,640\n";
  const std::string env = "FINEGEMM_CACHE_DIR=" + cache.string() + " ";
  const std::string range = " --m-range 1:200 --sms 132 --jobs 2";
  int status = -1;
  std::string out = run_command(env + kCli + " warmup --shapes " + (dir / "normal.csv").string() + range, &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_GT(compiled_count(out), 0) << out;
  out = run_command(env + kCli + " warmup --shapes " + (dir / "wgrad.csv").string() + range, &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_GT(compiled_count(out), 0) << "the wgrad kernels differ from the forward ones: " << out;
  out = run_command(env + kCli + " warmup --n 256 --k 640 --kind wgrad" + range, &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(compiled_count(out), 0) << out;
  fs::remove_all(dir);
}

TEST(Cli, WarmupCompilesTheKGroupedKernels) {
  // The K-grouped kernels are kernels of their own; a shape file's kgrouped rows and --kind kgrouped with --groups
  // warm the same ones, over the M of the range that the kind takes (multiples of 8).
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  const fs::path dir = temp_dir(), cache = dir / "cache";
  std::ofstream(dir / "kgrouped.csv") << "kind,groups,m,n,k\nkgrouped,4,256,256,256\n";
  const std::string env = "FINEGEMM_CACHE_DIR=" + cache.string() + " ";
  const std::string range = " --m-range 1:136 --sms 132 --jobs 2";
  int status = -1;
  std::string out = run_command(env + kCli + " warmup --shapes " + (dir / "kgrouped.csv").string() + range, &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_GT(compiled_count(out), 0) << out;
  out = run_command(env + kCli + " warmup --n 256 --k 256 --kind kgrouped --groups 4" + range, &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(compiled_count(out), 0) << out;
  fs::remove_all(dir);
}

TEST(Cli, PlanPrintsTheKGroupedPicks) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  int status = -1;
  const std::string file = std::string(FINEGEMM_SOURCE_DIR) + "/data/shapes/deepseek_v3_kgrouped.csv";
  const std::string out = run_command(kCli + " plan --shapes " + file, &status);
  EXPECT_EQ(status, 0) << out;
  std::istringstream lines(out);
  int count = 0;
  for (std::string line; std::getline(lines, line);) {
    ++count;
    EXPECT_EQ(line.rfind("kgrouped  ", 0), 0u) << line;
    EXPECT_NE(line.find(" | BM=128 "), std::string::npos) << line;  // 128-row tiles, as the K-grouped kernels run
    EXPECT_NE(line.find(" sa=mn "), std::string::npos) << line;
    EXPECT_NE(line.find(" sb=1x128 out=fp32,+=D "), std::string::npos) << line;
  }
  EXPECT_EQ(count, 6) << out;
  EXPECT_NE(out.find("kgrouped    16   4096   7168   2048 | BM=128"), std::string::npos) << out;
  // SA K-major asked for: the kind's SA stays MN-major, the picks the same.
  EXPECT_EQ(run_command(kCli + " plan --sa k --shapes " + file, &status), out);
  // Over an M range: the multiples of 8 only, one line where the pick changes.
  const fs::path dir = temp_dir();
  std::ofstream(dir / "one.csv") << "kind,groups,m,n,k\nkgrouped,4,4096,7168,8192\n";
  const std::string range = run_command(kCli + " plan --shapes " + (dir / "one.csv").string() + " --m-range 65:600",
                                        &status);
  EXPECT_EQ(status, 0) << range;
  std::istringstream range_lines(range);
  int range_count = 0;
  for (std::string line; std::getline(range_lines, line);) {
    std::istringstream fields(line);
    std::string kind;
    int64_t groups = 0, m = 0;
    fields >> kind >> groups >> m;
    EXPECT_EQ(m % 8, 0) << line;
    ++range_count;
  }
  EXPECT_GT(range_count, 1) << range;
  EXPECT_EQ(range.rfind("kgrouped     4     72   7168   8192 | BM=128", 0), 0u) << range;
  fs::remove_all(dir);
}

TEST(Cli, PlanPrintsTheWgradPicks) {
  if (kCli.empty()) GTEST_SKIP() << "CLI not built";
  int status = -1;
  const std::string out =
      run_command(kCli + " plan --shapes " + std::string(FINEGEMM_SOURCE_DIR) + "/data/shapes/deepseek_v3_wgrad.csv",
                  &status);
  EXPECT_EQ(status, 0) << out;
  std::istringstream lines(out);
  int count = 0;
  for (std::string line; std::getline(lines, line);) {
    ++count;
    EXPECT_EQ(line.rfind("wgrad        1 ", 0), 0u) << line;
    // C is D, as training passes it: reduced into, or, where C and D outweigh the math (K = 512), loaded a tile ahead
    const bool memory_bound = line.find("  32768   4096    512 |") != std::string::npos;
    EXPECT_NE(line.find(memory_bound ? " sb=1x128 out=fp32,C-ahead " : " D:L2-prefetch sb=1x128 out=fp32,+=D "),
              std::string::npos)
        << line;
    EXPECT_EQ(line.find("BM=256"), std::string::npos) << line;
  }
  EXPECT_EQ(count, 7) << out;
  EXPECT_NE(out.find("wgrad        1   7168   4096  16384 | BM="), std::string::npos) << out;
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
  out = run_command(kCli + " plan --shapes " + (dir / "one.csv").string() + " --m-range=1:600 --sms=132", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("normal       1      1  32768    512 | BM=64 BN=128"), std::string::npos) << out;
  EXPECT_NE(out.find("normal       1    129  32768    512 | BM=256 BN=128"), std::string::npos) << out;
  EXPECT_EQ(out.find("normal       1      2  32768"), std::string::npos) << out;
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

TEST(Shapes, WgradRowsAreDenseWeightGradientShapes) {
  const std::vector<ft::ProblemShape> shapes = ft::parse_shapes(
      "kind,groups,m,n,k,note\n"
      "wgrad,1,7168,4096,16384,weight gradient\n"
      "normal,1,64,7168,2048\n",
      "test");
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].kind, GemmKind::kNormal);
  EXPECT_TRUE(shapes[0].wgrad);
  EXPECT_STREQ(shapes[0].kind_name(), "wgrad");
  EXPECT_EQ(shapes[0].describe(), "wgrad G=1 M=7168 N=4096 K=16384");
  EXPECT_FALSE(shapes[1].wgrad);
  EXPECT_STREQ(shapes[1].kind_name(), "normal");
  // The heuristic sees 1x128 scales of B, an fp32 D and accumulation (C is D).
  for (bool k_major : {false, true}) {
    const Problem p = ft::problem_of(shapes[0], k_major);
    EXPECT_EQ(p.kind, GemmKind::kNormal);
    EXPECT_TRUE(p.sb_per_row);
    EXPECT_EQ(p.d_dtype, DType::kFloat32);
    EXPECT_TRUE(p.accumulate);
    EXPECT_TRUE(p.c_is_d);
    EXPECT_EQ(p.sa_k_major, k_major);
    EXPECT_EQ(p.m, 7168);
    const Problem q = ft::problem_of(shapes[1], k_major);
    EXPECT_FALSE(q.sb_per_row);
    EXPECT_EQ(q.d_dtype, DType::kBFloat16);
    EXPECT_FALSE(q.accumulate);
  }
  // Every kind name round-trips, and nothing else is a kind.
  for (const std::string& name : ft::shape_kind_names()) EXPECT_EQ(ft::shape_of_kind(name).kind_name(), name);
  EXPECT_THROW(ft::shape_of_kind("dgrad"), std::invalid_argument);
  // The DeepSeek-V3 weight-gradient shapes: seven, each M x 4096 x K, every one supported with both SA layouts.
  std::vector<ft::ProblemShape> wgrad =
      ft::read_shape_file(std::string(FINEGEMM_SOURCE_DIR) + "/data/shapes/deepseek_v3_wgrad.csv");
  ASSERT_EQ(wgrad.size(), 7u);
  for (const ft::ProblemShape& s : wgrad) {
    EXPECT_TRUE(s.wgrad) << s.describe();
    EXPECT_EQ(s.n, 4096) << s.describe();
  }
  const size_t count = wgrad.size();
  EXPECT_TRUE(ft::remove_unsupported(wgrad, false).empty());
  EXPECT_TRUE(ft::remove_unsupported(wgrad, true).empty());
  EXPECT_EQ(wgrad.size(), count);
}

TEST(Shapes, PsumRowsAreContiguousGemmsGivenByGroupEnds) {
  const std::vector<ft::ProblemShape> shapes = ft::parse_shapes(
      "kind,groups,m,n,k,note\n"
      "psum,8,512,4096,7168,prefill by group ends\n"
      "contiguous,8,512,4096,7168\n",
      "test");
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].kind, GemmKind::kGroupedContiguousPsum);
  EXPECT_FALSE(shapes[0].wgrad);
  EXPECT_STREQ(shapes[0].kind_name(), "psum");
  EXPECT_EQ(shapes[0].describe(), "psum G=8 M=512 N=4096 K=7168");
  EXPECT_STREQ(shapes[1].kind_name(), "contiguous");
  // The heuristic sees the rows per group (the expected_m hint), where the contiguous layout gives M_sum.
  for (bool k_major : {false, true}) {
    std::vector<ft::ProblemShape> both = shapes;
    EXPECT_TRUE(ft::remove_unsupported(both, k_major).empty());
    const Problem p = ft::problem_of(shapes[0], k_major);
    EXPECT_EQ(p.kind, GemmKind::kGroupedContiguousPsum);
    EXPECT_EQ(p.m, 512);
    EXPECT_EQ(p.num_groups, 8);
    EXPECT_FALSE(p.sb_per_row);
    EXPECT_EQ(p.d_dtype, DType::kBFloat16);
    EXPECT_EQ(ft::problem_of(shapes[1], k_major).m, 8 * 512);
  }
  EXPECT_EQ(ft::shape_kind_names(),
            (std::vector<std::string>{"normal", "contiguous", "masked", "psum", "wgrad", "kgrouped"}));
}

TEST(Shapes, KGroupedRowsAreMoeWeightGradients) {
  const std::vector<ft::ProblemShape> shapes = ft::parse_shapes(
      "kind,groups,m,n,k,note\n"
      "kgrouped,4,4096,7168,8192,EP64\n"
      "kgrouped,8,100,7168,4096,M not a multiple of 8\n"
      "kgrouped,8,4096,7168,4000,K not a multiple of 128\n",
      "test");
  ASSERT_EQ(shapes.size(), 3u);
  EXPECT_EQ(shapes[0].kind, GemmKind::kGroupedK);
  EXPECT_FALSE(shapes[0].wgrad);
  EXPECT_STREQ(shapes[0].kind_name(), "kgrouped");
  EXPECT_EQ(shapes[0].describe(), "kgrouped G=4 M=4096 N=7168 K=8192");
  EXPECT_EQ(shapes[0].m_step(), 8);
  EXPECT_EQ(ft::shape_of_kind("wgrad").m_step(), 1);
  // The heuristic sees M rows per expert, the tokens expected per expert, 1x128 SB and an fp32 D added into, and
  // MN-major SA whatever is asked (the kind takes no other layout).
  for (bool k_major : {false, true}) {
    const Problem p = ft::problem_of(shapes[0], k_major);
    EXPECT_EQ(p.kind, GemmKind::kGroupedK);
    EXPECT_EQ(p.m, 4096);
    EXPECT_EQ(p.n, 7168);
    EXPECT_EQ(p.k, 8192);
    EXPECT_EQ(p.num_groups, 4);
    EXPECT_FALSE(p.sa_k_major);
    EXPECT_TRUE(p.sb_per_row);
    EXPECT_EQ(p.d_dtype, DType::kFloat32);
    EXPECT_TRUE(p.accumulate);
    EXPECT_TRUE(p.c_is_d);
    std::string reason;
    EXPECT_TRUE(finegemm::is_supported(p, &reason)) << reason;
  }
  // M not a multiple of 8 (SA's and D's 16-byte strides) and an expected K not a multiple of 128 are set aside.
  std::vector<ft::ProblemShape> all = shapes;
  const std::vector<ft::UnsupportedShape> removed = ft::remove_unsupported(all, false);
  ASSERT_EQ(all.size(), 1u);
  ASSERT_EQ(removed.size(), 2u);
  EXPECT_NE(removed[0].reason.find("M must be a positive multiple of 8"), std::string::npos) << removed[0].reason;
  EXPECT_NE(removed[1].reason.find("multiple of 128"), std::string::npos) << removed[1].reason;
  // DeepGEMM's SM90 K-grouped cases: 32768 tokens over 4, 8 or 16 experts, D[g] 4096x7168 or 7168x2048; all fit.
  std::vector<ft::ProblemShape> file =
      ft::read_shape_file(std::string(FINEGEMM_SOURCE_DIR) + "/data/shapes/deepseek_v3_kgrouped.csv");
  ASSERT_EQ(file.size(), 6u);
  for (const ft::ProblemShape& s : file) {
    EXPECT_EQ(s.kind, GemmKind::kGroupedK) << s.describe();
    EXPECT_EQ(int64_t(s.groups) * s.k, 32768) << s.describe();
    EXPECT_TRUE((s.m == 4096 && s.n == 7168) || (s.m == 7168 && s.n == 2048)) << s.describe();
  }
  EXPECT_TRUE(ft::remove_unsupported(file, false).empty());
  EXPECT_TRUE(ft::remove_unsupported(file, true).empty());
  EXPECT_EQ(file.size(), 6u);
}

TEST(Shapes, KGroupedExpertsDrawTheirTokensAroundKSomeWithoutAny) {
  ft::ProblemShape s = ft::shape_of_kind("kgrouped");
  s.groups = 16;
  s.m = 4096;
  s.n = 7168;
  s.k = 2048;
  // The shape and the seed alone decide the draw.
  const std::vector<int64_t> first = ft::draw_expert_ks(s, 7);
  EXPECT_EQ(ft::draw_expert_ks(s, 7), first);
  EXPECT_NE(ft::draw_expert_ks(s, 8), first);
  // Each K a multiple of 128 in [k/2, 3k/2 rounded up], or 0; in every draw at least one expert without tokens and
  // one with; about one expert in eight empty, the others k tokens on average.
  int64_t experts = 0, empty = 0, tokens = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const std::vector<int64_t> ks = ft::draw_expert_ks(s, seed);
    ASSERT_EQ(ks.size(), 16u);
    const int64_t without = std::count(ks.begin(), ks.end(), 0);
    EXPECT_GE(without, 1) << "seed " << seed;
    EXPECT_LT(without, 16) << "seed " << seed;
    for (int64_t k : ks) {
      EXPECT_EQ(k % 128, 0) << k;
      if (k == 0) continue;
      EXPECT_GE(k, s.k / 2) << k;
      EXPECT_LE(k, (s.k + s.k / 2 + 127) / 128 * 128) << k;
      tokens += k;
    }
    experts += 16;
    empty += without;
  }
  const double empty_share = double(empty) / double(experts), mean = double(tokens) / double(experts - empty);
  EXPECT_GT(empty_share, 0.09);
  EXPECT_LT(empty_share, 0.18);
  EXPECT_GT(mean, 0.95 * double(s.k));
  EXPECT_LT(mean, 1.10 * double(s.k));
  // Two experts: always one with tokens and one without. One expert: always tokens, at least one block of 128.
  ft::ProblemShape two = s, one = s;
  two.groups = 2;
  one.groups = 1;
  one.k = 1;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const std::vector<int64_t> ks = ft::draw_expert_ks(two, seed);
    ASSERT_EQ(ks.size(), 2u);
    EXPECT_EQ(std::count(ks.begin(), ks.end(), 0), 1) << "seed " << seed;
    EXPECT_EQ(ft::draw_expert_ks(one, seed), std::vector<int64_t>{128}) << "seed " << seed;
  }
}

TEST(Shapes, MalformedLinesAreRejectedWithTheirLineNumber) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"kind,groups,m,n,k\nnormal,1,64,576\n", "f.csv:2: expected kind,groups,m,n,k"},
      {"kind,groups,m,n,k\n# note\ndense,1,64,576,256\n",
       "f.csv:3: kind must be normal, contiguous, masked, psum, wgrad or kgrouped"},
      {"wgrad,4,7168,4096,16384\n", "f.csv:1: wgrad GEMMs have groups=1"},
      {"Wgrad,1,7168,4096,16384\n",
       "f.csv:1: kind must be normal, contiguous, masked, psum, wgrad or kgrouped, got 'Wgrad'"},
      {"k-grouped,4,4096,7168,8192\n",
       "f.csv:1: kind must be normal, contiguous, masked, psum, wgrad or kgrouped, got 'k-grouped'"},
      {"kgrouped,0,4096,7168,8192\n", "f.csv:1: groups must be in 1..65536"},
      {"kgrouped,4,4096,7168,0\n", "f.csv:1: sizes out of range"},
      {"kgrouped,4,4096,7168\n", "f.csv:1: expected kind,groups,m,n,k"},
      {"normal,1,-64,576,256\n", "f.csv:1: expected a non-negative integer, got '-64'"},
      {"masked,0,64,576,256\n", "f.csv:1: groups must be in 1..65536"},
      {"normal,2,64,576,256\n", "f.csv:1: normal GEMMs have groups=1"},
  };
  for (const auto& c : cases) {
    try {
      ft::parse_shapes(c.text, "f.csv");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
    }
  }
}

// ---- the option parser -------------------------------------------------------------------------------------------

namespace {

ft::ParsedArgs parse(const ft::OptionSet& options, std::vector<const char*> words) {
  return options.parse(int(words.size()), words.data());
}

ft::OptionSet example_options() {
  return ft::OptionSet("demo")
      .flag("fast")
      .integer("count", -5, 5)
      .number("seconds", 0, 10, true)
      .word("mode", {"a", "b"})
      .word_list("kinds", {"x", "y", "z"})
      .integer_list("devices", 0, 7, "all")
      .range("m-range", 1, 100);
}

}  // namespace

TEST(CliArgs, ValuesAreConvertedAndDefaultsApply) {
  const ft::ParsedArgs a = parse(example_options(), {"--count", "-3", "--seconds=2.5", "--mode", "b", "--kinds",
                                                     "z,x", "--devices", "3,1", "--m-range", "2:2", "--fast"});
  EXPECT_FALSE(a.help());
  EXPECT_TRUE(a.flag("fast"));
  EXPECT_EQ(a.integer("count", 0), -3);
  EXPECT_DOUBLE_EQ(a.number("seconds", 1), 2.5);
  EXPECT_EQ(a.text("mode", "a"), "b");
  EXPECT_EQ(a.words("kinds", {}), (std::vector<std::string>{"z", "x"}));
  EXPECT_EQ(a.integers("devices"), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(a.range("m-range", {1, 1}), std::make_pair(int64_t(2), int64_t(2)));
  const ft::ParsedArgs d = parse(example_options(), {"--devices", "all"});
  EXPECT_TRUE(d.has("devices"));
  EXPECT_TRUE(d.integers("devices").empty());
  EXPECT_FALSE(d.flag("fast"));
  EXPECT_EQ(d.integer("count", 4), 4);
  EXPECT_EQ(d.text("mode", "a"), "a");
  EXPECT_THROW(d.integer("undeclared", 0), std::logic_error);
  EXPECT_THROW(d.text("count", ""), std::logic_error);
  EXPECT_TRUE(parse(example_options(), {"--count", "9", "-h"}).help());
}

TEST(CliArgs, EachKindRejectsWhatItDoesNotAccept) {
  const struct {
    std::vector<const char*> words;
    const char* message;
  } cases[] = {
      {{"--count", "6"}, "finegemm demo: --count takes an integer in -5..5, got '6'"},
      {{"--count", " 1"}, "finegemm demo: --count takes an integer in -5..5, got ' 1'"},
      {{"--count", "99999999999999999999"}, "got '99999999999999999999'"},
      {{"--seconds", "0"}, "finegemm demo: --seconds takes a number in (0, 10], got '0'"},
      {{"--seconds", "nan"}, "--seconds takes a number in (0, 10], got 'nan'"},
      {{"--seconds", "1s"}, "--seconds takes a number in (0, 10], got '1s'"},
      {{"--mode="}, "finegemm demo: --mode takes one of a, b, got ''"},
      {{"--kinds", "x,"}, "--kinds takes a comma list of distinct words from x, y, z, got 'x,'"},
      {{"--devices", "8"}, "--devices takes 'all' or a comma list of distinct integers in 0..7, got '8'"},
      {{"--devices", "all,1"}, "got 'all,1'"},
      {{"--m-range", "3"}, "--m-range takes LO:HI with 1 <= LO <= HI <= 100, got '3'"},
      {{"--m-range", "1:101"}, "got '1:101'"},
      {{"--fast", "--fast"}, "finegemm demo: --fast given twice"},
      {{"--fast=1"}, "finegemm demo: --fast takes no value, got '1'"},
      {{"--mode"}, "finegemm demo: --mode takes one of a, b, got no value"},
      {{"-"}, "finegemm demo: unknown option - (options: "},
      {{""}, "finegemm demo: unexpected argument '' (options: "},
  };
  for (const auto& c : cases) {
    try {
      parse(example_options(), c.words);
      ADD_FAILURE() << "accepted: " << c.message;
    } catch (const ft::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

// ---- the bench's CSV ---------------------------------------------------------------------------------------------

TEST(BenchCsv, ConditionsLineHeaderAndRowsWithEmptyFieldsForWhatWasNotMeasured) {
  const fs::path dir = temp_dir();
  const std::vector<std::pair<std::string, std::string>> conditions = {
      {"device", "NVIDIA H100 80GB HBM3"}, {"timer", "cupti"}, {"flush", "memset"}};
  ft::BenchRow dense{{GemmKind::kNormal, 1, 4096, 7168, 16384}, "BM=256 BN=128 stages=3 grid=132",
                     500.0, 503.25, 1924.2, 450.5, 15.0, 600.0, 1603.5, true};
  dense.floor_bytes_us = 100.0;
  dense.floor_tensor_us = 420.0;
  const ft::BenchRow grouped{{GemmKind::kGroupedMasked, 4, 256, 4096, 7168}, "BM=64, BN=\"128\"", 40.0, 43.0,
                             1.0, 2.0, 3.0, 0, 0, false};
  {
    ft::BenchCsv csv((dir / "a.csv").string(), conditions, true);
    csv.row(dense);
    csv.row(grouped);
  }
  EXPECT_EQ(read_text(dir / "a.csv"),
            "# finegemm bench; device=NVIDIA H100 80GB HBM3; timer=cupti; flush=memset\n"
            "kind,groups,m,n,k,config,us,ev_us,tflops,gbps,pct_copy_bw,cublaslt_us,cublaslt_tflops,x_cublaslt,check,"
            "floor_bytes_us,floor_tensor_us,floor_us,floor_bound\n"
            "normal,1,4096,7168,16384,BM=256 BN=128 stages=3 grid=132,500.00,503.25,1924.2,450.5,15.0,600.00,1603.5,"
            "1.2000,ok,100.00,420.00,420.00,tensor\n"
            "masked,4,256,4096,7168,\"BM=64, BN=\"\"128\"\"\",40.00,43.00,1.0,2.0,3.0,,,,FAIL,,,,\n");
  {
    ft::BenchCsv csv((dir / "b.csv").string(), conditions, false);
    csv.row(dense);
  }
  const std::string b = read_text(dir / "b.csv");
  EXPECT_NE(b.find("x_cublaslt,check\nnormal,"), std::string::npos) << b;
  EXPECT_NE(b.find(",1.2000,ok\n"), std::string::npos) << b;
  EXPECT_THROW(ft::BenchCsv((dir / "c.csv").string(), {{"device", "a;b"}}, false), std::invalid_argument);
  EXPECT_THROW(ft::BenchCsv((dir / "no-dir" / "d.csv").string(), conditions, false), std::runtime_error);
  fs::remove_all(dir);
}

TEST(CsvWriter, ConditionsHeaderAndRowsOfAnyTable) {
  const fs::path dir = temp_dir();
  {
    ft::CsvWriter csv((dir / "chain.csv").string(), "bench --chain", {{"layers", "16"}, {"force_config", ""}},
                      {"m", "config", "off_us"});
    csv.row({"64", "BM=64, BN=128", ft::CsvWriter::fixed(7.8449, 3)});
    csv.row({"128", "say \"hi\"", ft::CsvWriter::fixed(12.0, 3)});
    EXPECT_THROW(csv.row({"1", "2"}), std::invalid_argument);
  }
  EXPECT_EQ(read_text(dir / "chain.csv"),
            "# finegemm bench --chain; layers=16; force_config=\n"
            "m,config,off_us\n"
            "64,\"BM=64, BN=128\",7.845\n"
            "128,\"say \"\"hi\"\"\",12.000\n");
  EXPECT_THROW(ft::CsvWriter((dir / "x.csv").string(), "t", {{"k", "a\nb"}}, {"m"}), std::invalid_argument);
  fs::remove_all(dir);
}
