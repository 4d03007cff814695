// Problem -> kernel configuration: enumerate candidates, filter (each filter says why), score with a time model.
// Deterministic and pure: the same problem, SM count and constraints give the same configuration; nothing is measured
// or read from the environment here.
#pragma once

#include <string>
#include <vector>

#include "finegemm/finegemm.hpp"

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

/// Restrictions on the configuration, for measurements (FINEGEMM_FORCE_CONFIG, parsed by parse_constraints): a
/// field left at its default is the heuristic's choice. Candidates that differ in a named field are rejected; the
/// other filters still apply (except the measured-speed ones on M and K for a forced bm=256, and split-K's tile-shape
/// and fill rules for a forced split), so a forced configuration is always one the kernel supports, or none is found.
struct ConfigConstraints {
  int block_m = 0, block_n = 0, stages = 0, split_k = 0;
  int b_evict_first = -1;  ///< B's L2 hint on its TMA loads: 1 evict-first, 0 normal, -1 the heuristic's
  int d_evict_first = -1;  ///< D's L2 hint on its TMA stores, as b_evict_first
  int b_pairs = -1;        ///< B's loads two stages per empty wait: 1 / 0, or -1 (the heuristic's)
  int c_ahead = -1;        ///< dense GEMMs with C: 1 C's tiles loaded a tile ahead (kOutF32AddCAhead), 0 not, -1 either
  int sa_once = -1;        ///< 0: SA by a box per stage even where the heuristic loads it once per CTA; -1 its choice
  int pdl_prefetch = -1;   ///< 0: no B prefetch under PDL even where the heuristic prefetches; -1 its choice
  int d_transposed = -1;   ///< 1 run on D^T's tiles (may_transpose_d), 0 on D's, -1 the heuristic's choice
  std::string text;        ///< as given, for messages ("" when nothing is constrained)

  bool empty() const { return text.empty(); }
};

/// Parses "bm=128,bn=192,stages=4,split=1,l2b=normal,l2d=first,bpairs=0,cahead=1,saonce=0,pdlpf=0,dt=1" (any subset; ""
/// constrains nothing).
/// Throws Error(kInvalidArgument) naming the field and what it accepts.
ConfigConstraints parse_constraints(const std::string& text);

struct KernelConfig {
  GemmKind kind = GemmKind::kNormal;
  int64_t n = 0, k = 0;
  int block_m = 0, block_n = 0, num_stages = 0;
  int split_k = 1;             ///< 2: the two CTAs of a cluster each take about half of K (the first a few more)
  /// How the kernel reads SA (device::GemmSaMode): MN-major by TMA (a box per stage, or for at most 4 rows one box
  /// loaded once), K-major by TMA boxes of 4 K blocks, K-major of at most 16 rows in one box loaded once, or K-major
  /// gathered (sa_mode_for; the GEMM calls also fall back to it for strides TMA cannot take).
  uint32_t sa_mode = 0;
  bool b_evict_first = false;  ///< B's tiles are read by few tiles: its TMA loads carry an L2 evict-first hint
  bool b_pairs = false;        ///< B's TMA issuer fills two stages per empty wait (kernels that allow it)
  bool d_evict_first = false;  ///< D's TMA stores carry an L2 evict-first hint (d_evict_first_pays)
  /// D += A x B^T in a dense or K-grouped GEMM: A's issuer prefetches D's tile into the L2 with the tile's last K
  /// block (1), so that the epilogue's reductions into D find its lines there (GemmArgs::d_prefetch_lead); 0: none.
  int d_prefetch_lead = 0;
  /// Launched with programmatic dependent launch: K blocks of B's tiles the kernel prefetches into the L2 before it
  /// waits for the previous kernel, and from then on the next kernel may launch (GemmArgs::pdl_prefetch_b_blocks);
  /// 0: neither (the 128-row and smaller kernels let the next one launch after their math).
  int pdl_prefetch_b_blocks = 0;
  /// 256x128 tiles: a last row block of at most 128 rows (a dense GEMM's; each masked or psum group's) runs as wide
  /// tiles over two n-blocks each, in a kernel of its own (device::gemm_wide_tail; score() picks it for a dense GEMM
  /// where it saves a round of tiles, for masked and psum wherever the kernel allows).
  bool wide_tail = false;
  uint32_t sb_mode = 0;        ///< B's scales (device::GemmSbMode): per 128x128 block, or per 1x128 row block
  /// What the kernel writes (device::GemmOutput): bf16, fp32, fp32 plus C (three ways), or D += A x B^T and bf16 D on
  /// D^T's tiles (kOutF32AddToDT, kOutBf16DT: the kernel's M, N and operands are the call's N, M and B, A; `n` is then
  /// the call's M).
  uint32_t output = 0;
  int grid = 0;                ///< CTAs launched (persistent: at most one per SM)
  int num_threads = 0;
  int smem_bytes = 0;
  // Model outputs
  int64_t num_tiles = 0;
  int64_t num_waves = 0;
  double tile_us = 0.0;  ///< modeled time of one tile on one SM
  double estimated_us = 0.0;

  int cluster_size() const { return split_k; }
  std::string describe() const;         ///< one line, e.g. "BM=128 BN=112 stages=5 sa=mn grid=132 smem=..."
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

/// Whether `problem` may run on the tiles of D^T (device::gemm_d_transposed): a dense GEMM with 1x128 scales of both
/// operands and MN-major SA, either reducing into fp32 D (C = D: the weight gradient, kOutF32AddToDT) or writing bf16
/// D without C (kOutBf16DT), whose N is a multiple of 128 (the kernel's rows: every tile whole) and M of 8 (the
/// kernel's N: its B and SB rows in whole 16-byte units).
bool may_transpose_d(const Problem& problem);

/// The problem the kernel of `config` computes: `problem` itself, or with M and N swapped where the config runs on
/// D^T's tiles.
Problem kernel_problem(const Problem& problem, const KernelConfig& config);

/// Every candidate for `problem` with the filter verdicts (for tests and `FINEGEMM_PRINT_CONFIGS`).
std::vector<Candidate> enumerate_candidates(const Problem& problem, int num_sms,
                                            const ConfigConstraints& constraints = {}, const HardwareModel& hw = {});

/// Whether a kernel of `config` takes the steady FFMA pass (src/sass) after compiling: the promotion FFMAs issued
/// without yielding, for 256-row tiles and dense 128-row tiles with whole batches (BLOCK_N 72-184), measured faster
/// or the same there and slower on 128x192 and grouped 128-row tiles (kernel_options.cpp).
bool takes_steady_ffma_pass(const KernelConfig& config);

/// The chosen configuration. Throws Error(kUnsupported) when no candidate survives.
KernelConfig select_config(const Problem& problem, int num_sms, const ConfigConstraints& constraints = {},
                           const HardwareModel& hw = {});

}  // namespace finegemm::heuristics
