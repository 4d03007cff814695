// The shape of a GEMM problem as shape files and the tools' options name it: its kind and sizes. Host-only, no CUDA.
//
// The kinds: normal, contiguous, masked and psum (the forward GEMMs: B's scales per 128x128 block, bf16 D; psum is the
// contiguous layout given by each group's end row), wgrad, the weight-gradient GEMM of FP8 training: dense, both
// operands with 1x128 scales (quantized along K, the token dimension), fp32 D = C + A x B^T with C aliasing D
// (gemm_fp8_fp8_nt with c = d), and kgrouped, the weight gradient of an MoE layer: per expert g, fp32
// D[g] (M x N) = C[g] + A_g x B_g^T over that expert's K_g tokens (k_grouped_gemm_fp8_fp8_f32_nt).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "finegemm/finegemm.hpp"

namespace finegemm::tools {

struct ProblemShape {
  GemmKind kind = GemmKind::kNormal;
  int groups = 1;
  /// normal, wgrad: M; contiguous, psum: expected rows per expert; masked: M_max; kgrouped: rows of each D[g]
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;  ///< kgrouped: expected tokens (K) per expert
  /// The weight-gradient GEMM (with kind kNormal): B's scales per 1x128 row block, fp32 D = C + A x B^T.
  bool wgrad = false;
  /// normal | contiguous | masked | psum | wgrad | kgrouped
  const char* kind_name() const;
  std::string describe() const;
  /// The M values the kind takes are the multiples of this: 8 for kgrouped (16-byte strides of SA and D), else 1.
  int64_t m_step() const { return kind == GemmKind::kGroupedK ? 8 : 1; }
};

/// The kind names of shape files and of the tools' --kind(s) options, in this order.
const std::vector<std::string>& shape_kind_names();
/// A shape of the kind `name` (one of shape_kind_names(); throws std::invalid_argument otherwise), no sizes set.
ProblemShape shape_of_kind(const std::string& name);

/// kgrouped: each expert's K for `shape` (shape.k tokens expected per expert), a function of the shape and `seed`
/// alone. Each K is drawn uniformly in [k/2, 3k/2] and rounded up to a multiple of 128 (a router's spread); with two
/// experts or more, about one in eight gets no tokens at all, at least one and never every one.
std::vector<int64_t> draw_expert_ks(const ProblemShape& shape, uint64_t seed);

}  // namespace finegemm::tools
