// The CLI's commands, a file each in tools/commands: each command's options and its run; tools/main.cpp prints the
// usage and dispatches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/cli_args.hpp"
#include "lib/problem_shape.hpp"

namespace finegemm::tools::commands {

inline constexpr const char* kSeedShapes = "data/shapes/deepseek_v3.csv";
inline constexpr int64_t kMaxDim = int64_t(1) << 31;  // the largest M, N or K a shape file may hold
inline constexpr int kMaxSms = 1024;

/// Prints one line on stderr and returns false when there is no Hopper GPU.
bool hopper_or_explain(const char* command);
/// The words joined by commas.
std::string join(const std::vector<std::string>& words);
/// --shapes FILE, else the seed shapes.
std::vector<ProblemShape> shapes_of(const ParsedArgs& args);

OptionSet bench_options();
int cmd_bench(const ParsedArgs& args);
OptionSet check_options();
int cmd_check(const ParsedArgs& args);
OptionSet warmup_options();
int cmd_warmup(const ParsedArgs& args);
OptionSet plan_options();
int cmd_plan(const ParsedArgs& args);
OptionSet info_options();
int cmd_info(const ParsedArgs& args);

}  // namespace finegemm::tools::commands
