// `finegemm bench`: finegemm against cuBLASLt on a shape list, and `bench --chain`, decode layers back to back.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "commands/commands.hpp"
#include "finegemm/finegemm.hpp"
#include "lib/bench_csv.hpp"
#include "lib/ceiling.hpp"
#include "lib/chain.hpp"
#include "lib/cublaslt_baseline.hpp"
#include "lib/device_buffer.hpp"
#include "lib/gemm_problem.hpp"
#include "lib/shapes.hpp"
#include "lib/timing.hpp"

namespace fg = finegemm;
namespace ft = finegemm::tools;

namespace finegemm::tools::commands {
namespace {

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


}  // namespace

ft::OptionSet bench_options() {
  return ft::OptionSet("bench")
      .input_file("shapes")
      .word_list("kinds", ft::shape_kind_names())
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


int cmd_bench(const ft::ParsedArgs& args) {
  if (args.flag("chain")) return cmd_bench_chain(args);
  for (const char* name : {"layers", "m"})
    if (args.has(name)) throw ft::UsageError(std::string("finegemm bench: --") + name + " goes with --chain");
  std::vector<ft::ProblemShape> shapes = shapes_of(args);
  const std::vector<std::string> kinds = args.words("kinds", ft::shape_kind_names());
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
    const bool contiguous =
        s.kind == fg::GemmKind::kGroupedContiguous || s.kind == fg::GemmKind::kGroupedContiguousPsum;
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

}  // namespace finegemm::tools::commands
