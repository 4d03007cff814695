// `finegemm check`: a correctness sweep over random and awkward shapes; `check --cpu`, the checker itself.
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "commands/commands.hpp"
#include "finegemm/finegemm.hpp"
#include "lib/device_buffer.hpp"
#include "lib/gemm_problem.hpp"
#include "reference/reference.hpp"

namespace fg = finegemm;
namespace ft = finegemm::tools;

namespace finegemm::tools::commands {

ft::OptionSet check_options() {
  return ft::OptionSet("check")
      .integer("seed", 0, INT64_MAX)
      .integer("cases", 1, 1000000)
      .word_list("kinds", ft::shape_kind_names())
      .flag("corrupt")
      .flag("cpu");
}

namespace {

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
  const std::vector<std::string> kinds = args.words("kinds", ft::shape_kind_names());
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

}  // namespace

int cmd_check(const ft::ParsedArgs& args) {
  if (args.flag("cpu")) return cmd_check_cpu(args);
  if (!hopper_or_explain("check")) return 1;
  const uint64_t seed = uint64_t(args.integer("seed", 1));
  const int cases = int(args.integer("cases", 40));
  const bool corrupt = args.flag("corrupt");
  const std::vector<std::string> kinds = args.words("kinds", ft::shape_kind_names());
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

}  // namespace finegemm::tools::commands
