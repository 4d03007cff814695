// `finegemm bench --chain`: decode layers back to back, the way a model runs them. A layer is a per-token FP8
// quantization of its own bf16 activations, then a GEMM of the result with the layer's own weights; L layers with
// distinct weights (far more bytes than the L2, so every layer reads its weights from DRAM) make one step, captured
// into a CUDA graph twice, with programmatic dependent launch off and on, and timed by CUDA events over the graphs'
// replays. A layer's time is set against the bytes it must move, at the device's copy bandwidth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/gemm_problem.hpp"

namespace finegemm::tools {

/// A layer's weight shape: the GEMM's N and K.
struct WeightShape {
  int64_t n = 0, k = 0;
};

/// The distinct (N, K) of the normal shapes in `shapes`, in the order they first appear.
std::vector<WeightShape> chain_weight_shapes(const std::vector<ProblemShape>& shapes);

/// The bytes one layer of M tokens must move once: x read (bf16, 2MK), A written and read back (2MK), SA written and
/// read back (2 x 4 M KB), B (NK), SB (4 NB KB) and D written (bf16, 2MN).
double chain_layer_bytes(int64_t m, int64_t n, int64_t k);

/// The fewest timed replays the chain takes (the median of fewer would move with single outliers).
inline constexpr int kMinChainReplays = 20;

struct ChainOptions {
  std::vector<WeightShape> weights;  ///< one table row per (M, N, K) with M from `ms`
  std::vector<int64_t> ms;
  int layers = 16;
  int replays = 30;                  ///< timed replays of each graph (at least kMinChainReplays)
  std::string shapes_origin;         ///< where `weights` came from, for the header
  std::string csv_path;              ///< "" writes no CSV
};

/// Runs the chain on the current device, which must be a Hopper GPU, and prints its table on stdout. Returns 0, or 1
/// when a check failed (outputs of the two graphs not bitwise equal, an output left unwritten, the reference check).
/// Throws on CUDA and library errors.
int run_chain_bench(const ChainOptions& options);

}  // namespace finegemm::tools
