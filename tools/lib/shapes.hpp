// Shape files (the benchmark's and warm-up's input), anchor figures, and parallel ahead-of-time compilation.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "lib/gemm_problem.hpp"

namespace finegemm::tools {

/// Reads a CSV with header `kind,groups,m,n,k[,note]` (kind: normal | contiguous | masked). Throws with the line
/// number on malformed input.
std::vector<ProblemShape> read_shape_file(const std::string& path);
std::vector<ProblemShape> parse_shapes(const std::string& text, const std::string& origin);

/// Best anchor TFLOPS per shape (from anchors/h100_normal.csv and h100_grouped.csv), 0 when unknown.
class Anchors {
 public:
  void load_normal(const std::string& path);
  void load_grouped(const std::string& path);
  /// TFLOPS of a seed shape's column, 0 for a shape the files do not list: the best anchor, cuBLASLt measured on
  /// the anchors' H100 (dense shapes only) and DeepGEMM measured on that H100 (`deepgemm_head_h100_tflops`).
  double best_tflops(const ProblemShape& shape) const;
  double cublaslt_tflops(const ProblemShape& shape) const;
  double deepgemm_h100_tflops(const ProblemShape& shape) const;

 private:
  struct Row {
    double best = 0, cublaslt = 0, deepgemm_h100 = 0;
  };
  const Row* find(const ProblemShape& shape) const;
  void load(const std::string& path, bool grouped);
  std::map<std::tuple<int, int, int64_t, int64_t, int64_t>, Row> table_;
};

/// Finds a data file shipped in the repository (data/...), searching the source dir, the executable's dir and cwd.
std::string find_data_file(const std::string& relative);

/// The Problem the heuristic sees for `shape` with `sa_k_major`.
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
