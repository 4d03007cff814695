// The shape of a GEMM problem as shape files and the tools' options name it: its kind and sizes. Host-only, no CUDA.
//
// The kinds: normal, contiguous, masked and psum (the forward GEMMs: B's scales per 128x128 block, bf16 D; psum is the
// contiguous layout given by each group's end row), and wgrad, the weight-gradient GEMM of FP8 training: dense, both
// operands with 1x128 scales (quantized along K, the token dimension), fp32 D = C + A x B^T with C aliasing D
// (gemm_fp8_fp8_nt with c = d).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "finegemm/finegemm.hpp"

namespace finegemm::tools {

struct ProblemShape {
  GemmKind kind = GemmKind::kNormal;
  int groups = 1;
  int64_t m = 0;  ///< normal, wgrad: M; contiguous, psum: expected rows per expert; masked: M_max
  int64_t n = 0;
  int64_t k = 0;
  /// The weight-gradient GEMM (with kind kNormal): B's scales per 1x128 row block, fp32 D = C + A x B^T.
  bool wgrad = false;
  /// normal | contiguous | masked | psum | wgrad
  const char* kind_name() const;
  std::string describe() const;
};

/// The kind names of shape files and of the tools' --kind(s) options, in this order.
const std::vector<std::string>& shape_kind_names();
/// A shape of the kind `name` (one of shape_kind_names(); throws std::invalid_argument otherwise), no sizes set.
ProblemShape shape_of_kind(const std::string& name);

}  // namespace finegemm::tools
