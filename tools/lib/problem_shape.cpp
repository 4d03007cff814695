#include "lib/problem_shape.hpp"

#include <sstream>
#include <stdexcept>

namespace finegemm::tools {

const char* ProblemShape::kind_name() const {
  if (wgrad) return "wgrad";
  switch (kind) {
    case GemmKind::kNormal: return "normal";
    case GemmKind::kGroupedContiguous: return "contiguous";
    case GemmKind::kGroupedMasked: return "masked";
    case GemmKind::kGroupedContiguousPsum: return "psum";
    case GemmKind::kGroupedK: return "k-grouped";
  }
  return "?";
}

std::string ProblemShape::describe() const {
  std::ostringstream os;
  os << kind_name() << " G=" << groups << " M=" << m << " N=" << n << " K=" << k;
  return os.str();
}

const std::vector<std::string>& shape_kind_names() {
  static const std::vector<std::string> names = {"normal", "contiguous", "masked", "psum", "wgrad"};
  return names;
}

ProblemShape shape_of_kind(const std::string& name) {
  ProblemShape s;
  if (name == "normal") {
    s.kind = GemmKind::kNormal;
  } else if (name == "contiguous") {
    s.kind = GemmKind::kGroupedContiguous;
  } else if (name == "masked") {
    s.kind = GemmKind::kGroupedMasked;
  } else if (name == "psum") {
    s.kind = GemmKind::kGroupedContiguousPsum;
  } else if (name == "wgrad") {
    s.kind = GemmKind::kNormal;
    s.wgrad = true;
  } else {
    throw std::invalid_argument("unknown GEMM kind '" + name + "' (normal, contiguous, masked, psum or wgrad)");
  }
  return s;
}

}  // namespace finegemm::tools
