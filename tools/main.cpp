// The finegemm command-line tool: bench, check, warmup, plan, stress, info.
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "jit/runtime.hpp"
#include "lib/bench_csv.hpp"
#include "lib/ceiling.hpp"
#include "lib/chain.hpp"
#include "lib/cli_args.hpp"
#include "lib/cublaslt_baseline.hpp"
#include "lib/device_buffer.hpp"
#include "lib/gemm_problem.hpp"
#include "lib/shapes.hpp"
#include "lib/timing.hpp"
#include "stress.hpp"
#include "reference/reference.hpp"

namespace fg = finegemm;
namespace ft = finegemm::tools;

namespace {

constexpr const char* kSeedShapes = "data/shapes/deepseek_v3.csv";
const std::vector<std::string>& kAllKinds = ft::shape_kind_names();  // normal, ..., psum, wgrad, kgrouped
constexpr int64_t kMaxDim = int64_t(1) << 31;  // the largest M, N or K a shape file may hold
constexpr int kMaxSms = 1024;

// ---- usage ---------------------------------------------------------------------------------------------------------

struct CommandHelp {
  const char* name;
  const char* text;  // starts with the command's options; continuation lines indented by 10
};

constexpr CommandHelp kHelp[] = {
    {"bench",
     "bench   [--shapes FILE] [--kinds normal,contiguous,masked,psum,wgrad,kgrouped] [--iters 30] [--sa mn|k]\n"
     "          [--flush memset|read|none] [--experts random|equal] [--data normal|uniform] [--ceiling] [--csv FILE]\n"
     "        | --chain [--layers 16] [--m 1,16,64,128] [--shapes FILE] [--iters 30] [--csv FILE]\n"
     "          time finegemm and cuBLASLt's block-scaled FP8 GEMM in the same run (same data, flush and timer) on a\n"
     "          shape list (default: data/shapes/deepseek_v3.csv); needs a Hopper GPU. x cuBLT = cuBLASLt's time over\n"
     "          finegemm's. The first line names the card, the timer and the L2 flush. wgrad rows (the weight\n"
     "          gradient, data/shapes/deepseek_v3_wgrad.csv): fp32 D = D + A x B^T, both operands with 1x128 scales;\n"
     "          cuBLASLt runs it with VEC128_32F scales on both operands, fp32 D and beta = 1 where its heuristic\n"
     "          offers an algorithm for that (not every cuBLASLt version does: its columns then stay empty and a line\n"
     "          under the first such row says why); its output is checked once like finegemm's, and not timed if it\n"
     "          fails. kgrouped rows (the MoE weight gradient, data/shapes/deepseek_v3_kgrouped.csv): per expert,\n"
     "          fp32 D[g] += A_g x B_g^T over its tokens (K_g, drawn around k, some experts without any); TFLOPS\n"
     "          count the real tokens only; no cuBLASLt baseline.\n"
     "          --flush: before each timed call, a 256 MiB memset (default), a 256 MiB read (leaves clean lines) or\n"
     "            none (a warm L2)\n"
     "          --experts: rows per expert of the contiguous layout (kgrouped: tokens per expert), random 0.5x..1.5x\n"
     "            of M (default; kgrouped: of K, rounded up to 128, with some experts empty) or M (K) each\n"
     "          --data: operands quantized from normal values (default) or uniform fp8 codes (more bit flips)\n"
     "            (wgrad: C normal values of the product's magnitude either way)\n"
     "          --ceiling: also each shape's floor (its bytes moved alone, its wgmmas issued alone)\n"
     "          --csv FILE: also one row per shape in FILE. Line 1: '# finegemm bench; device=NAME; sms=N;\n"
     "            timer=cupti|events; flush=memset|read|none; ...' (key=value pairs separated by '; '); line 2, the\n"
     "            header: kind,groups,m,n,k,config,us,ev_us,tflops,gbps,pct_copy_bw,cublaslt_us,cublaslt_tflops,\n"
     "            x_cublaslt,check and, with --ceiling, floor_bytes_us,floor_tensor_us,floor_us,floor_bound. Times\n"
     "            in microseconds; cuBLASLt's columns are empty where it does not run (grouped kinds, M not a\n"
     "            multiple of 4, wgrad where cuBLASLt has no algorithm). scripts/plot_bench.py draws such files.\n"
     "          --chain: decode layers back to back, as a model runs them: for each (N, K) of the shape file's normal\n"
     "            rows and each M of --m, --layers layers, each a per-token FP8 quantization of its own bf16\n"
     "            activations then a GEMM with its own weights, captured into a CUDA graph with programmatic\n"
     "            dependent launch off and on. Prints a layer's time in each graph (CUDA events, median of --iters\n"
     "            replays, at least 20) against its bytes at the copy bandwidth, checks that both graphs' outputs are\n"
     "            bitwise equal and the last layer's against the reference, and a checksum of all outputs per row.\n"
     "            --csv FILE: one row per (M, N, K). --kinds, --sa, --flush, --experts, --data and --ceiling do not\n"
     "            apply.\n"},
    {"check",
     "check   [--seed 1] [--cases 40] [--kinds normal,contiguous,masked,psum,wgrad,kgrouped] [--corrupt] [--cpu]\n"
     "          correctness sweep over random and awkward shapes, each output checked against a reference; exits 1\n"
     "          on the first failure; needs a Hopper GPU. wgrad cases: fp32 D = C + A x B^T with C aliasing D or a\n"
     "          separate C (D poisoned), checked within one fp32 rounding plus the accumulation term. kgrouped cases:\n"
     "          1-8 experts, some without tokens, adding into D or overwriting it (D poisoned), checked expert by\n"
     "          expert against the CPU reference; an expert without tokens must leave C (or zero). --corrupt flips\n"
     "          one output element (the checker must fail); --cpu checks the checker itself on the CPU, without a\n"
     "          GPU (6 cases by default; bf16 outputs, fp32 ones with C when --kinds has wgrad, and K-grouped ones\n"
     "          when it has kgrouped)\n"},
    {"warmup",
     "warmup  [--shapes FILE | --n N1,N2 --k K1,K2 [--kind normal|contiguous|masked|psum|wgrad|kgrouped]\n"
     "          [--groups 1]] [--m-range 1:8192] [--sms 132] [--jobs J]\n"
     "          compile ahead of time every kernel the heuristic picks for each shape (default: the DeepSeek-V3\n"
     "          shapes; a training job adds data/shapes/deepseek_v3_wgrad.csv and deepseek_v3_kgrouped.csv, or\n"
     "          --kind wgrad and --kind kgrouped), every M of the range (kgrouped: every multiple of 8, K being the\n"
     "          tokens expected per expert) and both SA layouts, on J threads (default: one per CPU); no GPU needed\n"},
    {"plan",
     "plan    [--shapes FILE] [--m-range LO:HI] [--sa mn|k] [--sms 132]\n"
     "          the kernel configuration the heuristic picks for each shape (no GPU, nothing compiled); with\n"
     "          --m-range, each shape's N and K over every M of the range (kgrouped: every multiple of 8), one line\n"
     "          where the pick changes. Shape files: kind,groups,m,n,k[,note] with kind normal, contiguous, masked,\n"
     "          psum, wgrad or kgrouped (m: rows of each expert's D, k: tokens expected per expert)\n"},
    {"stress",
     "stress  [--threads 8] [--seconds 60] [--devices 0,1|all] [--seed S] ...\n"
     "          random GEMMs of every kind on several threads, each output checked (finegemm stress --help)\n"},
    {"info",
     "info    the version, the JIT options, the cache directory and the device\n"},
};

void print_usage(FILE* out) {
  std::fputs("usage: finegemm <command> [options]   (finegemm <command> --help: one command's options)\n", out);
  for (const CommandHelp& h : kHelp) std::fprintf(out, "  %s", h.text);
}

void print_command_usage(const std::string& command) {
  for (const CommandHelp& h : kHelp) {
    if (command != h.name) continue;
    const char* options = h.text + std::strlen(h.name);
    while (*options == ' ') ++options;
    std::printf("usage: finegemm %s %s", h.name, options);
  }
}

// ---- shared --------------------------------------------------------------------------------------------------------

/// Prints one line on stderr and returns false when there is no Hopper GPU.
bool hopper_or_explain(const char* command) {
  std::string why;
  if (ft::has_hopper_gpu(&why)) return true;
  std::replace(why.begin(), why.end(), '\n', ' ');
  std::fprintf(stderr, "finegemm %s: no Hopper GPU present (%s): %s needs one\n", command, why.c_str(), command);
  return false;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ",") + w;
  return out;
}

/// --shapes FILE, else the seed shapes.
std::vector<ft::ProblemShape> shapes_of(const ft::ParsedArgs& args) {
  const std::string file = args.text("shapes", "");
  return ft::read_shape_file(file.empty() ? ft::find_data_file(kSeedShapes) : file);
}

// ---- bench ---------------------------------------------------------------------------------------------------------

/// `bench --ceiling`: one line per shape under its row, then the run's ratios if every call ran at its floor.
class CeilingSummary {
 public:
  void add(const ft::ProblemShape& s, const ft::Ceiling& c, double flops, double ours_us, double cublas_us,
           double copy_gbps) {
    const double floor_tflops = flops / (c.us() * 1e-6) / 1e12;
    const double stream_gbps = (c.read_bytes + c.write_bytes) / (c.stream_us * 1e-6) / 1e9;
    std::printf("  ceiling: bytes %.1f MB read + %.1f MB written in %.1f us (%.0f GB/s, %.0f%% of copy; %s) | "
                "tensor %.1f us (%s, %.0f TFLOPS; %.0f MHz, pipe %.0f%% busy) | floor %.1f us, %.0f TFLOPS (%s) | "
                "finegemm at %.0f%% of it",
                c.read_bytes / 1e6, c.write_bytes / 1e6, c.stream_us, stream_gbps, 100.0 * stream_gbps / copy_gbps,
                c.stream_variant.c_str(), c.tensor_us, c.tensor_variant.c_str(), flops / (c.tensor_us * 1e-6) / 1e12,
                c.tensor_clock_mhz, 100.0 * c.tensor_busy, c.us(), floor_tflops, c.bound(), 100.0 * c.us() / ours_us);
    const bool dense = s.kind == fg::GemmKind::kNormal && !s.wgrad;
    if (cublas_us > 0) {
      std::printf(" | x cuBLT at the floor %.2f", cublas_us / c.us());
      if (dense) log_cublas_ += std::log(cublas_us / c.us()), ++n_cublas_;
    }
    if (dense && s.m <= 128) {
      ++n_small_;
      below_85_ += 100.0 * stream_gbps / copy_gbps < 85.0;
    }
    std::printf("\n");
  }

  void print(const std::string& flush) const {
    std::printf("\nat the floor (every call as fast as its bytes alone or its wgmmas alone, L2 %s):\n",
                flush == "none" ? "not flushed" : flush == "read" ? "read-flushed" : "memset-flushed");
    if (n_cublas_ > 0)
      std::printf("  dense geomean x cuBLASLt at the floor: %.3f over %d shapes\n", std::exp(log_cublas_ / n_cublas_),
                  n_cublas_);
    if (n_small_ > 0)
      std::printf("  dense M <= 128 shapes whose bytes alone move below 85%% of the copy bandwidth: %d of %d\n",
                  below_85_, n_small_);
  }

 private:
  double log_cublas_ = 0;
  int n_cublas_ = 0, n_small_ = 0, below_85_ = 0;
};

ft::OptionSet bench_options() {
  return ft::OptionSet("bench")
      .input_file("shapes")
      .word_list("kinds", kAllKinds)
      .integer("iters", 1, 10000)
      .word("sa", {"mn", "k"})
      .word("flush", {"memset", "read", "none"})
      .word("experts", {"random", "equal"})
      .word("data", {"normal", "uniform"})
      .flag("ceiling")
      .output_file("csv")
      .flag("chain")
      .integer("layers", 1, 256)
      .integer_list("m", 1, kMaxDim);
}

/// `bench --chain`: the options that go with it checked, then the chain (lib/chain.hpp).
int cmd_bench_chain(const ft::ParsedArgs& args) {
  for (const char* name : {"kinds", "sa", "flush", "experts", "data", "ceiling"})
    if (args.has(name))
      throw ft::UsageError(std::string("finegemm bench: --") + name +
                           " does not go with --chain (it takes --layers, --m, --shapes, --iters and --csv)");
  const int64_t iters = args.integer("iters", 30);
  if (iters < ft::kMinChainReplays)
    throw ft::UsageError("finegemm bench: --iters takes an integer in " + std::to_string(ft::kMinChainReplays) +
                         "..10000 with --chain, got '" + std::to_string(iters) + "'");
  const std::string file = args.text("shapes", "");
  const std::string path = file.empty() ? ft::find_data_file(kSeedShapes) : file;
  ft::ChainOptions options;
  options.weights = ft::chain_weight_shapes(ft::read_shape_file(path));
  if (options.weights.empty())
    throw ft::UsageError("finegemm bench: --chain takes the (N, K) of the shape file's normal rows, and " + path +
                         " has none");
  options.ms = args.has("m") ? args.integers("m") : std::vector<int64_t>{1, 16, 64, 128};
  options.layers = int(args.integer("layers", 16));
  options.replays = int(iters);
  options.shapes_origin = file.empty() ? kSeedShapes : file;
  options.csv_path = args.text("csv", "");
  if (!hopper_or_explain("bench")) return 1;
  return ft::run_chain_bench(options);
}

int cmd_bench(const ft::ParsedArgs& args) {
  if (args.flag("chain")) return cmd_bench_chain(args);
  for (const char* name : {"layers", "m"})
    if (args.has(name)) throw ft::UsageError(std::string("finegemm bench: --") + name + " goes with --chain");
  std::vector<ft::ProblemShape> shapes = shapes_of(args);
  const std::vector<std::string> kinds = args.words("kinds", kAllKinds);
  shapes.erase(std::remove_if(shapes.begin(), shapes.end(),
                              [&](const ft::ProblemShape& s) {
                                return std::find(kinds.begin(), kinds.end(), s.kind_name()) == kinds.end();
                              }),
               shapes.end());
  const bool k_major = args.text("sa", "mn") == "k";
  const int iters = int(args.integer("iters", 30));
  const bool with_ceiling = args.flag("ceiling");
  // none: no flush between calls, so operands, kernel code and parameters may still be in the L2 (a warm-cache time).
  const std::string flush = args.text("flush", "memset");
  // Contiguous rows per expert: drawn at random around M (a router's spread, the default) or exactly M each.
  const std::string experts = args.text("experts", "random");
  // Operand data: quantized normals (a model's operands, as DeepGEMM's tests draw them) or uniform fp8 codes,
  // which flip more bits per product: where the card runs at its power cap, its clock is then lower.
  const std::string data = args.text("data", "normal");
  const std::string csv_path = args.text("csv", "");
  if (!hopper_or_explain("bench")) return 1;

  const std::vector<ft::UnsupportedShape> skipped = ft::remove_unsupported(shapes, k_major);
  cudaStream_t stream;
  FG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const bool flush_l2 = flush != "none";
  ft::L2Flusher flusher(256ull << 20, flush == "read" ? ft::FlushMode::kRead : ft::FlushMode::kMemset);
  const double copy_gbps = ft::measure_copy_bandwidth_gbps();
  cudaDeviceProp prop{};
  FG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::string no_cupti_why;
  const bool kernel_time = ft::kernel_timer_available(&no_cupti_why);
  const ft::TimeSource time_source = kernel_time ? ft::TimeSource::kCuptiKernels : ft::TimeSource::kEvents;
  const std::string timer = kernel_time ? "CUPTI kernel time (each call's kernels summed; ev us: CUDA events)"
                                        : "CUDA events around each call (CUPTI unavailable: " + no_cupti_why + ")";
  const char* flush_text = flush == "read"   ? "256 MiB read before each timed call (clean lines)"
                           : flush == "none" ? "none (a warm L2)"
                                             : "256 MiB memset before each timed call";
  std::printf("finegemm %s bench on %s (%d SMs); timer: %s, median of %d calls; L2 flush: %s\n", fg::version(),
              prop.name, fg::get_num_sms(), timer.c_str(), iters, flush_text);
  std::printf("copy bandwidth %.0f GB/s; SA %s; operands: %s; rows per expert (contiguous; kgrouped: tokens): %s\n",
              copy_gbps, k_major ? "K-major" : "MN-major",
              data == "normal"
                  ? "normal values quantized per token (A) and per 128x128 block (B; wgrad, kgrouped: per token)"
                  : "uniform fp8 codes, scales 2^-10..2^10",
              experts == "equal" ? "M (K) each" : "random, 0.5x..1.5x of M (K; kgrouped: some experts empty)");
  std::unique_ptr<ft::BenchCsv> csv;
  if (!csv_path.empty())
    csv = std::make_unique<ft::BenchCsv>(csv_path,
                                         std::vector<std::pair<std::string, std::string>>{
                                             {"version", fg::version()},
                                             {"device", prop.name},
                                             {"sms", std::to_string(fg::get_num_sms())},
                                             {"timer", kernel_time ? "cupti" : "events"},
                                             {"flush", flush},
                                             {"iters", std::to_string(iters)},
                                             {"sa", k_major ? "k" : "mn"},
                                             {"data", data},
                                             {"experts", experts},
                                             {"copy_gbps", std::to_string(std::lround(copy_gbps))}},
                                         with_ceiling);

  for (const ft::UnsupportedShape& u : skipped)
    std::printf("skipped %s %d %lld %lld %lld: %s\n", u.shape.kind_name(), u.shape.groups, (long long)u.shape.m,
                (long long)u.shape.n, (long long)u.shape.k, u.reason.c_str());
  // Compile everything first, in parallel.
  {
    std::vector<fg::Problem> problems;
    for (const auto& s : shapes) problems.push_back(ft::problem_of(s, k_major));
    const auto t0 = std::chrono::steady_clock::now();
    const int n = ft::precompile_all(problems, fg::get_num_sms(), int(std::thread::hardware_concurrency()));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("compiled %d kernels in %.1f s (%u threads)\n", n, sec, std::thread::hardware_concurrency());
  }

  std::printf("\n%-10s %6s %6s %6s %6s | %-60s | %8s %7s %7s %6s %5s | %8s %7s | %7s | %s\n", "kind", "G", "M", "N",
              "K", "config", "us", "ev us", "TFLOPS", "GB/s", "%BW", "cuBLASLt", "TFLOPS", "x cuBLT", "check");
  double log_cublas = 0, log_cublas_normal = 0, log_cublas_wgrad = 0;
  int n_cublas = 0, n_cublas_normal = 0, n_cublas_wgrad = 0, failures = 0;
  bool wgrad_baseline_explained = false;  // the first wgrad row cuBLASLt cannot run gets a line saying why
  std::unique_ptr<ft::CeilingKernels> ceiling_kernels;
  if (with_ceiling) ceiling_kernels = std::make_unique<ft::CeilingKernels>();
  CeilingSummary ceiling_summary;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const ft::ProblemShape& s = shapes[i];
    ft::ProblemOptions opt;
    opt.seed = 1000 + i;
    opt.data = data == "normal" ? ft::DataKind::kNormal : ft::DataKind::kUniform;
    const bool contiguous = s.kind == fg::GemmKind::kGroupedContiguous || s.kind == fg::GemmKind::kGroupedContiguousPsum;
    if (contiguous && experts == "equal") opt.expert_rows.assign(size_t(s.groups), int(s.m));
    if (s.kind == fg::GemmKind::kGroupedK && experts == "equal")
      opt.expert_ks.assign(size_t(s.groups), std::max<int64_t>(128, (s.k + 127) / 128 * 128));
    ft::GemmProblem problem(s, opt);
    problem.poison_output(stream);
    problem.run(k_major, stream);
    FG_CUDA_CHECK(cudaStreamSynchronize(stream));
    const ft::Reference reference = ft::gpu_reference(problem);
    const ft::Verdict verdict = ft::check_download(problem, reference);
    if (!verdict.ok) ++failures;
    const ft::Timing t = ft::time_kernel([&](cudaStream_t st) { problem.run(k_major, st); }, stream, iters, 3, flush_l2,
                                         &flusher, time_source);
    const double tflops = problem.flops() / (t.median_us * 1e-6) / 1e12;
    const double gbps = problem.min_bytes() / (t.median_us * 1e-6) / 1e9;
    double cublas_us = 0, cublas_tflops = 0;
    std::string cublas_refused;  // wgrad: why cuBLASLt did not run (or was not timed)
    if (s.kind == fg::GemmKind::kNormal && s.m % 4 == 0) {
      // Its own D (wgrad: holding C, which each call accumulates into, as finegemm's does), the same operands; for
      // wgrad SB is [KB][N], MN-major, as finegemm reads it (N % 8 == 0: no padding).
      ft::DeviceBuffer d2(size_t(s.m * s.n * problem.output_bytes()));
      if (s.wgrad) d2.upload(problem.host_c.data(), problem.host_c.size() * 4);
      ft::CublasLtBlockFp8::Mode mode;
      mode.sb_per_row = mode.f32_accumulate = s.wgrad;
      ft::CublasLtBlockFp8 lt(s.m, s.n, s.k, problem.a.get(), problem.sa_mn_major.as<float>(), problem.b.get(),
                              problem.sb.as<float>(), d2.get(), mode);
      if (s.wgrad && !lt.supported()) cublas_refused = lt.reason();
      // With FINEGEMM_PRINT_CONFIGS, the baseline's algorithm too (tile, stages and cluster ids of cuBLASLt's pick).
      if (std::getenv("FINEGEMM_PRINT_CONFIGS") != nullptr) std::fprintf(stderr, "%s\n", lt.describe().c_str());
      bool lt_computes_the_same = true;
      if (lt.supported() && s.wgrad) {
        // Its wgrad mode (1x128 scales of B read as [KB][N], fp32 D, beta = 1) checked once against the same
        // reference: a ratio to a GEMM that computes something else is no ratio.
        try {
          lt.run(stream);
          ft::sync_and_check(stream, "cuBLASLt wgrad");
          const ft::Verdict lt_verdict =
              ft::check_output(problem, reference, d2.download_as<float>(size_t(s.m * s.n)));
          if (!lt_verdict.ok)
            cublas_refused = "its output fails the check (" +
                             lt_verdict.summary.substr(0, lt_verdict.summary.find('\n')) + "), so it is not timed";
        } catch (const std::runtime_error& e) {
          cublas_refused = e.what();
        }
        lt_computes_the_same = cublas_refused.empty();
      }
      if (lt.supported() && lt_computes_the_same) {
        const ft::Timing tl =
            ft::time_kernel([&](cudaStream_t st) { lt.run(st); }, stream, iters, 3, flush_l2, &flusher, time_source);
        cublas_us = tl.median_us;
        cublas_tflops = problem.flops() / (cublas_us * 1e-6) / 1e12;
      }
    }
    const double x_cublas = cublas_tflops > 0 ? tflops / cublas_tflops : 0;
    if (x_cublas > 0) {
      log_cublas += std::log(x_cublas);
      ++n_cublas;
      if (s.wgrad) {
        log_cublas_wgrad += std::log(x_cublas), ++n_cublas_wgrad;
      } else if (s.kind == fg::GemmKind::kNormal) {
        log_cublas_normal += std::log(x_cublas), ++n_cublas_normal;
      }
    }
    fg::Problem heuristic_problem = ft::problem_of(s, k_major);
    if (problem.k_grouped()) heuristic_problem.k = problem.expected_k();  // what the call's split gives the heuristic
    const std::string config = fg::describe_config(heuristic_problem, fg::get_num_sms());
    // Where cuBLASLt did not run (grouped shapes, the K-grouped ones included; M not a multiple of 4; a shape or mode
    // it rejects), its columns print '-'.
    char baseline[48] = "       -       - |       -";
    if (x_cublas > 0)
      std::snprintf(baseline, sizeof(baseline), "%8.1f %7.0f | %7.2f", cublas_us, cublas_tflops, x_cublas);
    std::printf("%-10s %6d %6lld %6lld %6lld | %-60.60s | %8.1f %7.1f %7.0f %6.0f %4.0f%% | %s | %s\n",
                s.kind_name(), s.groups, (long long)s.m, (long long)s.n, (long long)s.k, config.c_str(),
                t.median_us, t.event_median_us, tflops, gbps, 100.0 * gbps / copy_gbps, baseline,
                verdict.ok ? "ok" : "FAIL");
    if (!verdict.ok) std::printf("  %s\n", verdict.summary.c_str());
    if (!cublas_refused.empty() && !wgrad_baseline_explained) {
      std::printf("  cuBLASLt does not run the wgrad rows here: %s\n", cublas_refused.c_str());
      wgrad_baseline_explained = true;
    }
    ft::BenchRow row{s, config, t.median_us, t.event_median_us, tflops, gbps, 100.0 * gbps / copy_gbps,
                     cublas_us, cublas_tflops, verdict.ok};
    if (with_ceiling) {
      const ft::Ceiling c = ceiling_kernels->measure(problem, stream, iters, flush_l2, &flusher, time_source);
      ceiling_summary.add(s, c, problem.flops(), t.median_us, cublas_us, copy_gbps);
      row.floor_bytes_us = c.stream_us;
      row.floor_tensor_us = c.tensor_us;
    }
    if (csv) csv->row(row);
    std::fflush(stdout);
  }
  std::printf("\ngeomean x cuBLASLt: %.3f over %d shapes (dense %.3f over %d",
              n_cublas ? std::exp(log_cublas / n_cublas) : 0.0, n_cublas,
              n_cublas_normal ? std::exp(log_cublas_normal / n_cublas_normal) : 0.0, n_cublas_normal);
  if (n_cublas_wgrad > 0)
    std::printf("; wgrad %.3f over %d", std::exp(log_cublas_wgrad / n_cublas_wgrad), n_cublas_wgrad);
  std::printf(")\n");
  if (with_ceiling) ceiling_summary.print(flush);
  if (!skipped.empty())
    std::printf("%zu shapes skipped: no kernel configuration fits them (the lines before the table)\n", skipped.size());
  if (csv) std::printf("rows written to %s\n", csv_path.c_str());
  std::printf("%d correctness failures\n", failures);
  FG_CUDA_CHECK(cudaStreamDestroy(stream));
  return failures == 0 ? 0 : 1;
}

// ---- check ---------------------------------------------------------------------------------------------------------

ft::OptionSet check_options() {
  return ft::OptionSet("check")
      .integer("seed", 0, INT64_MAX)
      .integer("cases", 1, 1000000)
      .word_list("kinds", kAllKinds)
      .flag("corrupt")
      .flag("cpu");
}

// The checker itself, without a GPU: the "kernel output" is the CPU reference rounded to bf16 (what a correct kernel
// returns up to rounding); --corrupt flips one element, and the checker must then exit 1.
// wgrad cases: B's scales per 1x128 row block, a random C, and the "kernel output" fl(fl(product) + C) in fp32, the
// two roundings of a correct kernel; --corrupt flips a high mantissa bit. kgrouped cases: the same expert by expert
// (1-4 experts, some without tokens, whose output is C as it was). The cases take the checks --kinds selects in turn:
// bf16 (any forward kind), wgrad, kgrouped.
int cmd_check_cpu(const ft::ParsedArgs& args) {
  namespace ref = fg::reference;
  const uint64_t seed = uint64_t(args.integer("seed", 1));
  const int cases = int(args.integer("cases", 6));
  const bool corrupt = args.flag("corrupt");
  const std::vector<std::string> kinds = args.words("kinds", kAllKinds);
  std::vector<std::string> checks;
  if (std::any_of(kinds.begin(), kinds.end(), [](const std::string& k) { return k != "wgrad" && k != "kgrouped"; }))
    checks.push_back("bf16");
  for (const char* kind : {"wgrad", "kgrouped"})
    if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) checks.push_back(kind);
  std::mt19937_64 rng(seed);
  const int64_t ms[] = {1, 7, 65}, ns[] = {64, 576}, ks[] = {128, 576};
  for (int c = 0; c < cases; ++c) {
    const int64_t m = ms[rng() % 3], n = ns[rng() % 2], k = ks[rng() % 2], kb = (k + 127) / 128, nb = (n + 127) / 128;
    const std::string& check = checks[size_t(c) % checks.size()];
    if (check == "kgrouped") {
      // M a multiple of 8, as the kind takes it; k the tokens expected per expert.
      ft::ProblemShape s = ft::shape_of_kind("kgrouped");
      s.groups = int(1 + rng() % 4);
      s.m = (m + 7) / 8 * 8;
      s.n = n;
      s.k = k;
      const std::vector<int64_t> expert_ks = ft::draw_expert_ks(s, seed * 100 + uint64_t(c));
      int64_t sum_k = 0;
      for (int64_t k_g : expert_ks) sum_k += k_g;
      std::vector<uint8_t> a(size_t(s.m * sum_k)), b(size_t(n * sum_k));
      std::vector<float> sa(size_t(s.m * sum_k / 128)), sb(size_t(n * sum_k / 128));
      ref::fill_random_fp8(a, seed * 100 + uint64_t(c));
      ref::fill_random_fp8(b, seed * 100 + uint64_t(c) + 50);
      ref::fill_random_scales(sa, seed * 7 + uint64_t(c));
      ref::fill_random_scales(sb, seed * 11 + uint64_t(c));
      const ft::Reference product = ft::k_grouped_reference(a.data(), sa.data(), b.data(), sb.data(), nullptr,
                                                            expert_ks, s.m, n);
      // C of the product's magnitude where there is one, standard normal values in the experts without tokens.
      std::vector<float> c_values(product.value.size());
      ref::fill_random_normal(c_values, seed * 13 + uint64_t(c));
      for (size_t i = 0; i < c_values.size(); ++i)
        if (product.abs_sum[i] > 0) c_values[i] = float(c_values[i] * product.abs_sum[i]);
      ft::Reference d = product;
      ref::add_c_to_reference(d.value, c_values.data(), n, s.groups * s.m, n);
      std::vector<float> out(d.value.size());
      for (size_t i = 0; i < out.size(); ++i) out[i] = float(product.value[i]) + c_values[i];
      if (corrupt) {
        float& victim = out[size_t(rng() % out.size())];
        victim = std::bit_cast<float>(std::bit_cast<uint32_t>(victim) ^ 0x00400000u);
      }
      // The CPU's products are exact: the reference's own accumulation term (2^-20), not the tensor cores'.
      const ft::Verdict v = ft::check_k_grouped_output(out, d, expert_ks, s.m, n, ft::kMaxDiff, 0x1p-20);
      std::string split;
      for (int64_t k_g : expert_ks) split += (split.empty() ? "" : ",") + std::to_string(k_g);
      std::printf("case %d  cpu kgrouped G=%d M=%lld N=%lld ks=%s  %s\n", c, s.groups, (long long)s.m, (long long)n,
                  split.c_str(), v.ok ? "ok" : v.summary.c_str());
      if (!v.ok) {
        std::printf("FAILED. Replay: finegemm check --cpu --seed %llu --cases %d%s%s\n", (unsigned long long)seed,
                    c + 1, corrupt ? " --corrupt" : "", args.has("kinds") ? (" --kinds " + join(kinds)).c_str() : "");
        return 1;
      }
      continue;
    }
    const bool wgrad = check == "wgrad";
    std::vector<uint8_t> a(size_t(m * k)), b(size_t(n * k));
    std::vector<float> sa(size_t(m * kb)), sb(size_t((wgrad ? n : nb) * kb));
    ref::fill_random_fp8(a, seed * 100 + uint64_t(c));
    ref::fill_random_fp8(b, seed * 100 + uint64_t(c) + 50);
    ref::fill_random_scales(sa, seed * 7 + uint64_t(c));
    ref::fill_random_scales(sb, seed * 11 + uint64_t(c));
    std::vector<double> abs_sum;
    ref::CheckResult r;
    if (wgrad) {
      const std::vector<double> product =
          ref::gemm_nt_reference_sb_per_row(a.data(), sa.data(), b.data(), sb.data(), m, n, k, &abs_sum);
      std::vector<float> c_values(product.size());
      ref::fill_random_normal(c_values, seed * 13 + uint64_t(c));
      for (size_t i = 0; i < c_values.size(); ++i) c_values[i] = float(c_values[i] * abs_sum[i]);
      std::vector<double> d = product;
      ref::add_c_to_reference(d, c_values.data(), n, m, n);
      std::vector<float> out(d.size());
      for (size_t i = 0; i < d.size(); ++i) out[i] = float(product[i]) + c_values[i];
      if (corrupt) {
        float& victim = out[size_t(rng() % out.size())];
        victim = std::bit_cast<float>(std::bit_cast<uint32_t>(victim) ^ 0x00400000u);
      }
      r = ref::check_f32_output(out.data(), n, d.data(), abs_sum.data(), m, n);
    } else {
      const std::vector<double> d =
          ref::gemm_nt_reference(a.data(), sa.data(), b.data(), sb.data(), m, n, k, &abs_sum);
      std::vector<uint16_t> out(d.size());
      for (size_t i = 0; i < d.size(); ++i) out[i] = ref::double_to_bf16(d[i]);
      if (corrupt) out[size_t(rng() % out.size())] ^= 0x4000;
      r = ref::check_bf16_output(out.data(), n, d.data(), abs_sum.data(), m, n);
    }
    std::printf("case %d  cpu %s M=%lld N=%lld K=%lld  %s\n", c, wgrad ? "wgrad" : "bf16", (long long)m,
                (long long)n, (long long)k, r.ok ? "ok" : r.summary().c_str());
    if (!r.ok) {
      std::printf("FAILED. Replay: finegemm check --cpu --seed %llu --cases %d%s%s\n", (unsigned long long)seed,
                  c + 1, corrupt ? " --corrupt" : "", args.has("kinds") ? (" --kinds " + join(kinds)).c_str() : "");
      return 1;
    }
  }
  std::printf("%d passed, 0 failed\n", cases);
  return 0;
}

int cmd_check(const ft::ParsedArgs& args) {
  if (args.flag("cpu")) return cmd_check_cpu(args);
  if (!hopper_or_explain("check")) return 1;
  const uint64_t seed = uint64_t(args.integer("seed", 1));
  const int cases = int(args.integer("cases", 40));
  const bool corrupt = args.flag("corrupt");
  const std::vector<std::string> kinds = args.words("kinds", kAllKinds);
  std::mt19937_64 rng(seed);
  const int64_t ms[] = {1, 7, 63, 64, 65, 128, 129, 255, 256, 1000};
  const int64_t ns[] = {8, 64, 128, 576, 2112, 4096, 7232};
  const int64_t ks[] = {16, 128, 576, 2048, 7168};
  cudaStream_t stream;
  FG_CUDA_CHECK(cudaStreamCreate(&stream));
  for (int c = 0; c < cases; ++c) {
    ft::ProblemShape s = ft::shape_of_kind(kinds[size_t(rng() % kinds.size())]);
    s.m = ms[rng() % std::size(ms)];
    s.n = ns[rng() % std::size(ns)];
    s.k = ks[rng() % std::size(ks)];
    s.groups = s.kind == fg::GemmKind::kNormal ? 1 : int(1 + rng() % 8);
    bool k_major = rng() % 2;
    ft::ProblemOptions opt;
    opt.seed = seed * 1000 + uint64_t(c);
    if (s.kind == fg::GemmKind::kGroupedMasked)
      for (int g = 0; g < s.groups; ++g) opt.masked_m.push_back(int(rng() % (s.m + 1)));
    if (s.wgrad) opt.c_aliases_d = rng() % 2 == 0;  // C is D (training's case), or a separate C with D poisoned
    if (s.kind == fg::GemmKind::kGroupedK) {
      // Sizes the CPU reference computes in well under a second: M and N multiples of 8 (M > 64: below, the
      // heuristic finds no configuration), k the tokens expected per expert (each expert's drawn around it, some
      // experts without any). SA is MN-major, the kind's only layout.
      const int64_t k_grouped_ms[] = {72, 136, 200, 264}, k_grouped_ns[] = {8, 64, 136, 576, 1024};
      const int64_t k_grouped_ks[] = {128, 256, 640};
      s.m = k_grouped_ms[rng() % std::size(k_grouped_ms)];
      s.n = k_grouped_ns[rng() % std::size(k_grouped_ns)];
      s.k = k_grouped_ks[rng() % std::size(k_grouped_ks)];
      k_major = false;
      opt.accumulate = rng() % 2 == 0;  // D += A_g x B_g^T (training's case), or D overwritten, poisoned before
    }
    ft::GemmProblem problem(s, opt);
    problem.poison_output(stream);
    problem.run(k_major, stream);
    FG_CUDA_CHECK(cudaStreamSynchronize(stream));
    // K-grouped: against the CPU reference, expert by expert.
    const ft::Reference reference = problem.k_grouped() ? ft::cpu_reference(problem) : ft::gpu_reference(problem);
    ft::Verdict v;
    // --corrupt, a test hook: one valid output element flipped, so that the checker must fail.
    if (problem.f32_output()) {
      std::vector<float> out = problem.download_output_f32();
      if (corrupt && !out.empty()) out[0] = std::bit_cast<float>(std::bit_cast<uint32_t>(out[0]) ^ 0x00400000u);
      v = ft::check_output(problem, reference, out);
    } else {
      std::vector<uint16_t> out = problem.download_output();
      if (corrupt) {
        for (int64_t r = 0; r < problem.rows(); ++r)
          if (problem.row_valid(r)) {
            out[size_t(r * s.n)] ^= 0x4000;
            break;
          }
      }
      v = ft::check_output(problem, reference, out);
    }
    std::string what = s.describe() + (s.wgrad ? (problem.c_aliases_d() ? " C=D" : " C apart") : "");
    if (problem.k_grouped()) {
      what += problem.accumulate() ? " D+= ks=" : " D= ks=";
      for (size_t g = 0; g < problem.expert_ks().size(); ++g)
        what += (g ? "," : "") + std::to_string(problem.expert_ks()[g]);
    }
    std::printf("case %3d  %-48s SA %-8s %s\n", c, what.c_str(), k_major ? "K-major" : "MN-major", v.summary.c_str());
    if (!v.ok) {
      std::printf("FAILED. Replay: finegemm check --seed %llu --cases %d --kinds %s%s\n", (unsigned long long)seed,
                  c + 1, join(kinds).c_str(), corrupt ? " --corrupt" : "");
      return 1;
    }
  }
  std::printf("%d passed, 0 failed\n", cases);
  return 0;
}

// ---- warmup --------------------------------------------------------------------------------------------------------

ft::OptionSet warmup_options() {
  return ft::OptionSet("warmup")
      .input_file("shapes")
      .integer_list("n", 1, kMaxDim)
      .integer_list("k", 1, kMaxDim)
      .word("kind", kAllKinds)
      .integer("groups", 1, 65536)
      .range("m-range", 1, kMaxDim)
      .integer("sms", 1, kMaxSms)
      .integer("jobs", 1, 1024);
}

int cmd_warmup(const ft::ParsedArgs& args) {
  // The options that only go together, checked before anything is compiled.
  const bool listed = args.has("n") || args.has("k");
  if (args.has("n") != args.has("k"))
    throw ft::UsageError(std::string("finegemm warmup: --n and --k go together, got only ") +
                         (args.has("n") ? "--n" : "--k"));
  if (listed && args.has("shapes"))
    throw ft::UsageError("finegemm warmup: --shapes and --n/--k are alternatives, got both");
  if (!listed && (args.has("kind") || args.has("groups")))
    throw ft::UsageError(std::string("finegemm warmup: ") + (args.has("kind") ? "--kind" : "--groups") +
                         " describes the --n/--k shapes, got no --n/--k");
  const std::string kind = args.text("kind", "normal");
  const int groups = int(args.integer("groups", 1));
  if ((kind == "normal" || kind == "wgrad") && groups != 1)
    throw ft::UsageError("finegemm warmup: --groups takes 1 with --kind " + kind + ", got '" + std::to_string(groups) +
                         "'");

  std::vector<ft::ProblemShape> shapes;
  if (listed) {
    ft::ProblemShape s = ft::shape_of_kind(kind);
    s.groups = groups;
    for (int64_t n : args.integers("n"))
      for (int64_t k : args.integers("k")) {
        s.n = n;
        s.k = k;
        shapes.push_back(s);
      }
  } else {
    shapes = shapes_of(args);
  }
  const auto [m_lo, m_hi] = args.range("m-range", {1, 8192});
  const int sms = int(args.integer("sms", 132));
  const int jobs = int(args.integer("jobs", std::max(1u, std::thread::hardware_concurrency())));
  // Every M in the range the kind takes (the heuristic only changes its pick at a few M); both SA layouts (kgrouped:
  // MN-major, its only one). kgrouped: the M no configuration fits are left out and counted, with the first reason.
  std::vector<fg::Problem> problems;
  int64_t k_grouped_skipped = 0;
  std::string k_grouped_skip_reason;
  for (const auto& s : shapes) {
    for (bool k_major : {false, true}) {
      if (k_major && s.kind == fg::GemmKind::kGroupedK) continue;
      for (int64_t m = (m_lo + s.m_step() - 1) / s.m_step() * s.m_step(); m <= m_hi; m += s.m_step()) {
        ft::ProblemShape t = s;
        if (s.kind == fg::GemmKind::kGroupedContiguous) {
          fg::Problem p = ft::problem_of(t, k_major);
          p.m = m;  // M_sum
          problems.push_back(p);
        } else {
          t.m = m;
          const fg::Problem p = ft::problem_of(t, k_major);
          std::string reason;
          if (s.kind == fg::GemmKind::kGroupedK && !fg::is_supported(p, &reason)) {
            if (k_grouped_skipped++ == 0) k_grouped_skip_reason = reason;
            continue;
          }
          problems.push_back(p);
        }
      }
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int compiled = ft::precompile_all(problems, sms, jobs);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t bytes = 0, files = 0;
  const std::string dir = fg::cache_dir();
  if (!dir.empty()) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); it != std::filesystem::recursive_directory_iterator();
         it.increment(ec)) {
      if (it->is_regular_file(ec)) bytes += it->file_size(ec), ++files;
    }
  }
  std::printf("warmup: %zu shapes x M in [%lld, %lld] x 2 SA layouts for %d SMs: %d kernels compiled, %llu already cached, %.1f s on %d jobs; cache %s: %llu files, %.1f MB\n",
              shapes.size(), (long long)m_lo, (long long)m_hi, sms, compiled,
              (unsigned long long)fg::jit_stats().disk_hits, sec, jobs, dir.empty() ? "(disabled)" : dir.c_str(),
              (unsigned long long)files, double(bytes) / 1e6);
  if (k_grouped_skipped > 0)
    std::printf("warmup: %lld kgrouped (shape, M) pairs skipped, no configuration fits them (first: %s)\n",
                (long long)k_grouped_skipped, k_grouped_skip_reason.c_str());
  return 0;
}

// ---- plan ----------------------------------------------------------------------------------------------------------

ft::OptionSet plan_options() {
  return ft::OptionSet("plan")
      .input_file("shapes")
      .range("m-range", 1, kMaxDim)
      .word("sa", {"mn", "k"})
      .integer("sms", 1, kMaxSms);
}

/// The kernel configuration the heuristic picks for each shape (no GPU, nothing compiled). With --m-range, every M of
/// the range the kind takes for each shape's N and K, one line where the pick changes.
int cmd_plan(const ft::ParsedArgs& args) {
  const std::vector<ft::ProblemShape> shapes = shapes_of(args);
  const bool k_major = args.text("sa", "mn") == "k";
  const int sms = int(args.integer("sms", 132));
  const auto [m_lo, m_hi] = args.range("m-range", {0, -1});  // by default an empty range: each shape at its own M
  auto line = [&](const ft::ProblemShape& s, const std::string& config) {
    std::printf("%-10s %3d %6lld %6lld %6lld | %s\n", s.kind_name(), s.groups, (long long)s.m, (long long)s.n,
                (long long)s.k, config.c_str());
  };
  auto pick = [&](const ft::ProblemShape& s) {
    std::string reason;
    const fg::Problem p = ft::problem_of(s, k_major);
    return fg::is_supported(p, &reason) ? fg::describe_config(p, sms) : "unsupported: " + reason;
  };
  for (ft::ProblemShape s : shapes) {
    if (m_hi < m_lo) {
      line(s, pick(s));
      continue;
    }
    std::string last;
    for (int64_t m = (m_lo + s.m_step() - 1) / s.m_step() * s.m_step(); m <= m_hi; m += s.m_step()) {
      s.m = m;
      const std::string config = pick(s);
      // The tile counts change with every M: a pick is its configuration up to " tiles=".
      const std::string kernel = config.substr(0, config.find(" tiles="));
      if (kernel != last) line(s, config);
      last = kernel;
    }
  }
  return 0;
}

// ---- info ----------------------------------------------------------------------------------------------------------

ft::OptionSet info_options() { return ft::OptionSet("info"); }

int cmd_info(const ft::ParsedArgs&) {
  std::printf("finegemm %s\noptions: %s\ncache: %s\n", fg::version(),
              fg::jit::Runtime::instance().options().describe().c_str(),
              fg::cache_dir().empty() ? "(disabled)" : fg::cache_dir().c_str());
  std::string why;
  if (ft::has_hopper_gpu(&why)) {
    cudaDeviceProp prop{};
    FG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, compute capability %d.%d\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor);
  } else {
    std::printf("device: no Hopper GPU (%s)\n", why.c_str());
  }
  return 0;
}

struct Command {
  const char* name;
  ft::OptionSet (*options)();
  int (*run)(const ft::ParsedArgs&);
};

constexpr Command kCommands[] = {
    {"bench", bench_options, cmd_bench},    {"check", check_options, cmd_check},
    {"warmup", warmup_options, cmd_warmup}, {"plan", plan_options, cmd_plan},
    {"info", info_options, cmd_info},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  if (name == "stress") return ft::run_stress(argc - 2, argv + 2);
  const Command* command = nullptr;
  for (const Command& c : kCommands)
    if (name == c.name) command = &c;
  if (command == nullptr) {
    std::fprintf(stderr,
                 "finegemm: unknown command '%s' (commands: bench, check, warmup, plan, stress, info; finegemm --help "
                 "describes them)\n",
                 name.c_str());
    return 2;
  }
  try {
    const ft::ParsedArgs args = command->options().parse(argc - 2, argv + 2);
    if (args.help()) {
      print_command_usage(name);
      return 0;
    }
    return command->run(args);
  } catch (const ft::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    // The library's errors name themselves ("finegemm: ..."); the tools' own get the command's name.
    const bool named = std::strncmp(e.what(), "finegemm", 8) == 0;
    std::fprintf(stderr, "%s%s%s\n", named ? "" : "finegemm ", named ? "" : (name + ": ").c_str(), e.what());
    return 1;
  }
}
