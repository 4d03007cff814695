// `finegemm warmup`: every kernel the heuristic picks for a shape list, compiled ahead of time into the cache.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "commands/commands.hpp"
#include "finegemm/finegemm.hpp"
#include "lib/shapes.hpp"

namespace fg = finegemm;
namespace ft = finegemm::tools;

namespace finegemm::tools::commands {

ft::OptionSet warmup_options() {
  return ft::OptionSet("warmup")
      .input_file("shapes")
      .integer_list("n", 1, kMaxDim)
      .integer_list("k", 1, kMaxDim)
      .word("kind", ft::shape_kind_names())
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
    const std::filesystem::recursive_directory_iterator end;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); it != end; it.increment(ec)) {
      if (it->is_regular_file(ec)) bytes += it->file_size(ec), ++files;
    }
  }
  std::printf("warmup: %zu shapes x M in [%lld, %lld] x 2 SA layouts for %d SMs: %d kernels compiled, %llu already "
              "cached, %.1f s on %d jobs; cache %s: %llu files, %.1f MB\n",
              shapes.size(), (long long)m_lo, (long long)m_hi, sms, compiled,
              (unsigned long long)fg::jit_stats().disk_hits, sec, jobs, dir.empty() ? "(disabled)" : dir.c_str(),
              (unsigned long long)files, double(bytes) / 1e6);
  if (k_grouped_skipped > 0)
    std::printf("warmup: %lld kgrouped (shape, M) pairs skipped, no configuration fits them (first: %s)\n",
                (long long)k_grouped_skipped, k_grouped_skip_reason.c_str());
  return 0;
}

}  // namespace finegemm::tools::commands
