// Shape files (the benchmark's, warm-up's and plan's input) and parallel ahead-of-time compilation.
#pragma once

#include <string>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "lib/gemm_problem.hpp"

namespace finegemm::tools {

/// Reads a CSV with header `kind,groups,m,n,k[,note]` (kind: normal | contiguous | masked | psum | wgrad | kgrouped;
/// m: rows per expert for contiguous and psum, M_max for masked, the rows of each expert's D for kgrouped, whose k is
/// the tokens expected per expert; normal and wgrad have groups 1). Throws with the line number on malformed input.
std::vector<ProblemShape> read_shape_file(const std::string& path);
std::vector<ProblemShape> parse_shapes(const std::string& text, const std::string& origin);

/// Finds a data file shipped in the repository (data/...), searching the source dir, the executable's dir and cwd.
std::string find_data_file(const std::string& relative);

/// The Problem the heuristic sees for `shape` with `sa_k_major` (wgrad: 1x128 SB, fp32 D, accumulation; kgrouped: the
/// same with MN-major SA, the only layout it takes, M rows per expert and the expected K per expert).
Problem problem_of(const ProblemShape& shape, bool sa_k_major);

/// A shape no kernel configuration fits (`finegemm::is_supported` is false), with the reason it gives.
struct UnsupportedShape {
  ProblemShape shape;
  std::string reason;
};

/// Removes from `shapes` (keeping their order) those no configuration fits with `sa_k_major` and returns them: a
/// forced configuration (FINEGEMM_FORCE_CONFIG) fits only some seed shapes, and a shape file may hold any shape.
std::vector<UnsupportedShape> remove_unsupported(std::vector<ProblemShape>& shapes, bool sa_k_major);

/// Compiles the kernels of `problems` for `num_sms` SMs on `jobs` threads. Returns the number compiled (not found in
/// the caches).
int precompile_all(const std::vector<Problem>& problems, int num_sms, int jobs);

}  // namespace finegemm::tools
