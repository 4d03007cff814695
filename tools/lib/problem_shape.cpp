#include "lib/problem_shape.hpp"

#include <algorithm>
#include <random>
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
    case GemmKind::kGroupedK: return "kgrouped";
  }
  return "?";
}

std::string ProblemShape::describe() const {
  std::ostringstream os;
  os << kind_name() << " G=" << groups << " M=" << m << " N=" << n << " K=" << k;
  return os.str();
}

const std::vector<std::string>& shape_kind_names() {
  static const std::vector<std::string> names = {"normal", "contiguous", "masked", "psum", "wgrad", "kgrouped"};
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
  } else if (name == "kgrouped") {
    s.kind = GemmKind::kGroupedK;
  } else {
    throw std::invalid_argument("unknown GEMM kind '" + name +
                                "' (normal, contiguous, masked, psum, wgrad or kgrouped)");
  }
  return s;
}

std::vector<int64_t> draw_expert_ks(const ProblemShape& shape, uint64_t seed) {
  constexpr int64_t kKAlignment = 128;  // every K_g is a whole number of 1x128 scale blocks
  constexpr uint64_t kEmptyOneIn = 8;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 29);
  const int64_t k = std::max<int64_t>(1, shape.k);
  std::uniform_int_distribution<int64_t> tokens(std::max<int64_t>(1, k / 2), k + k / 2);
  std::vector<int64_t> ks;
  for (int e = 0; e < shape.groups; ++e) ks.push_back((tokens(rng) + kKAlignment - 1) / kKAlignment * kKAlignment);
  if (shape.groups < 2) return ks;
  std::vector<char> empty(ks.size());
  for (char& e : empty) e = rng() % kEmptyOneIn == 0;
  const auto num_empty = std::count(empty.begin(), empty.end(), 1);
  if (num_empty == 0) empty[rng() % empty.size()] = 1;
  if (num_empty == int64_t(empty.size())) empty[rng() % empty.size()] = 0;
  for (size_t e = 0; e < ks.size(); ++e)
    if (empty[e]) ks[e] = 0;
  return ks;
}

}  // namespace finegemm::tools
