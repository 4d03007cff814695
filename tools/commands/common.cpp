// What the commands share: the GPU check, the shape list, joined words.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "commands/commands.hpp"
#include "lib/device_buffer.hpp"
#include "lib/shapes.hpp"

namespace fg = finegemm;
namespace ft = finegemm::tools;

namespace finegemm::tools::commands {

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

std::vector<ft::ProblemShape> shapes_of(const ft::ParsedArgs& args) {
  const std::string file = args.text("shapes", "");
  return ft::read_shape_file(file.empty() ? ft::find_data_file(kSeedShapes) : file);
}

}  // namespace finegemm::tools::commands
