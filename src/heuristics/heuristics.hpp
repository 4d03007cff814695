// Problem -> kernel configuration: enumerate candidates, filter (each filter says why), score with a time model.
// Deterministic: no run-time tuning.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "sass/ffma_interleave.hpp"

namespace finegemm::heuristics {

/// Hardware numbers of an H100 SXM used by the model (the heuristic never measures at run time).
struct HardwareModel {
  int smem_per_block = 232448;          ///< bytes of dynamic shared memory a block may opt into
  double dram_bytes_per_s = 3.0e12;     ///< measured device copy bandwidth
  double sm_fp8_flops_per_s = 1979e12 / 132;  ///< dense FP8 peak per SM
  double sm_clock_hz = 1.83e9;          ///< the clock the FP8 peak is quoted at
  double sm_l2_bytes_per_s = 150e9;     ///< L2 -> SM fill rate per SM
  double l2_bytes = 50e6;               ///< L2 cache size
};

struct KernelConfig {
  GemmKind kind = GemmKind::kNormal;
  int64_t n = 0, k = 0;
  int block_m = 0, block_n = 0, num_stages = 0;
  int cluster_size = 1;
  bool multicast_on_a = true;  ///< which operand the 2-CTA cluster shares (cluster_size == 2, split_k == 1)
  int split_k = 1;             ///< 2: the two CTAs of a cluster each take half of K (cluster_size == 2, no multicast)
  /// How the kernel reads SA (device::GemmSaMode): MN-major by TMA, K-major by TMA boxes of 4 K blocks, or K-major
  /// gathered (sa_mode_for; the GEMM calls also fall back to it for strides TMA cannot take).
  uint32_t sa_mode = 0;
  bool b_evict_first = false;  ///< B's tiles are read by few tiles: its TMA loads carry an L2 evict-first hint
  bool b_pairs = false;        ///< B's TMA issuer fills two stages per empty wait (kernels that allow it)
  bool d_evict_first = false;  ///< D's TMA stores carry an L2 evict-first hint (d_evict_first_pays)
  /// Tail split (dense GEMMs): > 1 cuts each tile of the last, partial wave (tiles from tail_first_tile on) into this
  /// many ranges of K blocks run by different CTAs (device::GemmArgs); 1: none.
  int tail_pieces = 1;
  int64_t tail_first_tile = 0;
  /// Dense 256x128 tiles: the last row block (at most 128 rows) runs as wide tiles over two n-blocks each, in a kernel
  /// of its own (device::gemm_dense_wide_tail; score() picks it where it saves a round of tiles).
  bool wide_tail = false;
  int grid = 0;                ///< CTAs launched (persistent: at most one per SM)
  int num_threads = 0;
  int smem_bytes = 0;
  // Model outputs
  int64_t num_tiles = 0;
  int64_t num_waves = 0;
  double tile_us = 0.0;  ///< modeled time of one tile on one SM
  double estimated_us = 0.0;

  std::string describe() const;         ///< one line, e.g. "BM=128 BN=112 stages=5 cluster=2(A) grid=132 smem=..."
  std::string kernel_function() const;  ///< the template instantiation to compile
};

struct Candidate {
  KernelConfig config;
  std::string rejected;  ///< empty when kept; otherwise the filter's reason
};

/// The SA mode (device::GemmSaMode) the heuristic picks for `problem`: K-major SA is read by TMA boxes when KB is a
/// multiple of 4 (contiguous [M, KB] rows are then 16-byte multiples), at least 32, and M at least 1024 (where it
/// measured faster than the gather), and gathered otherwise.
uint32_t sa_mode_for(const Problem& problem);

/// Every candidate for `problem` with the filter verdicts (for tests and `FINEGEMM_PRINT_CONFIGS`).
std::vector<Candidate> enumerate_candidates(const Problem& problem, int num_sms, const HardwareModel& hw = {});

/// Whether the experimental tail split (KernelConfig::tail_pieces) is on: FINEGEMM_EXPERIMENTAL_TAIL_SPLIT=1.
bool tail_split_enabled();

/// Whether BLOCK_N may be an odd multiple of 8 (24, 40, 56, ...): FINEGEMM_EXPERIMENTAL_ODD_BLOCK_N=1. The kernel
/// supports such tiles; the heuristic leaves them out by default because they measured slower (heuristics.cpp).
bool odd_eighth_block_n_enabled();

/// The FFMA pass (src/sass) a kernel of `config` takes after compiling, none if empty: the steady one (promotion
/// FFMAs issued without yielding) for 256-row tiles and dense 128-row tiles with whole batches (BLOCK_N 72-184),
/// measured faster or the same there and slower on 128x192 and grouped 128-row tiles (heuristics.cpp).
std::optional<sass::FfmaPassMode> ffma_pass_for(const KernelConfig& config);

/// The chosen configuration. Throws Error(kUnsupported) when no candidate survives.
KernelConfig select_config(const Problem& problem, int num_sms, const HardwareModel& hw = {});

}  // namespace finegemm::heuristics
