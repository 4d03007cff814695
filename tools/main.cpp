// The finegemm command-line tool: bench, check, warmup, plan, stress, info (each in tools/commands, stress in
// tools/stress.cpp): the usage text and the dispatch.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands/commands.hpp"
#include "lib/cli_args.hpp"
#include "stress.hpp"

namespace ft = finegemm::tools;
namespace cmd = finegemm::tools::commands;

namespace {

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

struct Command {
  const char* name;
  ft::OptionSet (*options)();
  int (*run)(const ft::ParsedArgs&);
};

constexpr Command kCommands[] = {
    {"bench", cmd::bench_options, cmd::cmd_bench},    {"check", cmd::check_options, cmd::cmd_check},
    {"warmup", cmd::warmup_options, cmd::cmd_warmup}, {"plan", cmd::plan_options, cmd::cmd_plan},
    {"info", cmd::info_options, cmd::cmd_info},
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
