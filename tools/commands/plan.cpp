// `finegemm plan`: the kernel configuration the heuristic picks for each shape, without a GPU.
#include <cstdio>
#include <string>
#include <vector>

#include "commands/commands.hpp"
#include "finegemm/finegemm.hpp"
#include "lib/shapes.hpp"

namespace fg = finegemm;
namespace ft = finegemm::tools;

namespace finegemm::tools::commands {

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

}  // namespace finegemm::tools::commands
