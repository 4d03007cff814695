#include "heuristics/kernel_options.hpp"

#include <algorithm>

#include "finegemm/device/common/gemm_layout.cuh"
#include "heuristics/time_model.hpp"

namespace finegemm::heuristics {

bool takes_steady_ffma_pass(const KernelConfig& config) {
  // ptxas has every other promotion FFMA yield its issue slot; issued without yielding, the promotion ran faster
  // in the 256-row kernels and the dense and masked 128-row kernels with whole batches (with 1x128 scales of B only
  // at 128x160) and slower in the others (docs/heuristics.md, "The steady FFMA pass").
  const bool gains_with_column_scales = config.sb_mode != device::kSbRowMnMajor || config.block_n == 160;
  const bool whole_batches = (config.kind == GemmKind::kNormal || config.kind == GemmKind::kGroupedMasked) &&
                             config.block_m == 128 && config.block_n > 64 && config.block_n < 192;
  return config.block_m == 256 || (whole_batches && gains_with_column_scales);
}

namespace {

/// B's TMA loads carry the L2 evict-first hint where each B tile is read by at most kEvictFirstMaxRowBlocks
/// tiles, which the scheduler runs side by side: B's lines then replace one another instead of lines other tiles
/// or kernels still use. Beyond kEvictFirstMaxWaves waves only dense GEMMs with one row block keep it; with one row
/// block per group it also needs a call of at most kEvictFirstMaxOneBlockFlops (masked 64-row tiles keep it in
/// three waves) (docs/heuristics.md, "B's evict-first hint").
constexpr int64_t kEvictFirstMaxRowBlocks = 3;
constexpr int64_t kEvictFirstMaxWaves = 2;
constexpr double kEvictFirstMaxOneBlockFlops = 36e9;

/// Dense GEMMs launch the fewest CTAs that run the same number of waves: the critical path stays the same, and
/// the SMs left idle stay out of the others' L2 traffic and power budget (DeepGEMM sizes its grid the same way).
/// Grouped GEMMs keep every SM: their tiles are planned for the largest layout (docs/heuristics.md, "Grid size").
int fewest_ctas_for_the_waves(const Problem& p, const KernelConfig& c) {
  if (p.kind != GemmKind::kNormal || c.num_waves < 1) return c.grid;
  const int64_t tiles_per_round = ceil_div(c.num_tiles, c.num_waves);
  const int64_t ctas = ceil_div(tiles_per_round * c.split_k, int64_t(c.split_k)) * c.split_k;
  return int(std::min<int64_t>(c.grid, ctas));
}

bool b_read_by_few_tiles(const Problem& p, const KernelConfig& c) {
  switch (p.kind) {
    case GemmKind::kNormal: return ceil_div(p.m, c.block_m) <= kEvictFirstMaxRowBlocks;
    case GemmKind::kGroupedMasked: return ceil_div(p.m_max, c.block_m) <= kEvictFirstMaxRowBlocks;
    case GemmKind::kGroupedContiguous:
    case GemmKind::kGroupedContiguousPsum: return false;  // experts hold many row blocks each
    case GemmKind::kGroupedK: return false;               // B_g is read by every row block of D[g]
  }
  return false;
}

bool b_evict_first_pays(const Problem& p, const KernelConfig& c) {
  if (!b_read_by_few_tiles(p, c)) return false;
  const bool dense = p.kind == GemmKind::kNormal;
  const bool one_row_block = ceil_div(dense ? p.m : p.m_max, c.block_m) == 1;
  if (!one_row_block) return c.num_waves <= kEvictFirstMaxWaves;
  const double flops = 2.0 * double(tiled_groups(p)) * double(p.m) * double(p.n) * double(p.k);
  const int64_t max_waves = kEvictFirstMaxWaves + (c.block_m == 64 ? 1 : 0);
  return flops <= kEvictFirstMaxOneBlockFlops && (dense || c.num_waves <= max_waves);
}

/// B's issuer fills two stages per empty wait (the kernel's kBPairs) where the call is B's DRAM stream: B read
/// by few tiles (b_read_by_few_tiles) and at most kBPairsMaxFlopsPerByte FLOPs per byte of A, B and D, in the
/// kernels that have the code (device::gemm_may_pair_b_stages; elsewhere the kernel ignores the flag)
/// (docs/heuristics.md, "B's stages in pairs").
constexpr double kBPairsMaxFlopsPerByte = 500.0;

/// Whether the kernel for `c` can pair B's stages (its kBPairs); FINEGEMM_FORCE_CONFIG=bpairs=1 pairs only these.
bool b_pairs_allowed(const Problem& p, const KernelConfig& c) {
  return device::gemm_may_pair_b_stages(static_cast<device::GemmKind>(p.kind), uint32_t(c.block_m),
                                        uint32_t(c.block_n), uint32_t(c.split_k));
}

bool b_pairs_pay(const Problem& p, const KernelConfig& c) {
  if (!b_pairs_allowed(p, c) || !b_read_by_few_tiles(p, c)) return false;
  const double flops = 2.0 * double(p.m) * double(p.n) * double(p.k);
  const double bytes = double(p.m) * double(p.k) + double(p.n) * double(p.k) + 2.0 * double(p.m) * double(p.n);
  return flops <= kBPairsMaxFlopsPerByte * bytes;
}

/// D's TMA stores carry the L2 evict-first hint (GemmArgs::d_evict_first) where the output is larger than the
/// L2 and at least kDEvictFirstMinWriteRatio times A's and B's bytes together: D's stream, written once and never
/// read, would otherwise push out operand lines that later tiles read again. Not with C loaded a tile ahead
/// (docs/heuristics.md, "D's evict-first hint").
constexpr double kDEvictFirstMinWriteRatio = 10.0;

bool d_evict_first_pays(const Problem& p, const HardwareModel& hw) {
  const CallBytes bytes = call_bytes(p);
  return bytes.d > hw.l2_bytes && bytes.d >= kDEvictFirstMinWriteRatio * (bytes.a + bytes.b);
}

/// GEMMs that reduce into D (D += A x B^T, kOutF32AddToD: dense and K-grouped ones) prefetch D's tile into the
/// L2 as A's issuer issues the tile's last K block (KernelConfig::d_prefetch_lead = 1), about a stage ring's K
/// blocks before the epilogue reduces into it (docs/heuristics.md, "D prefetched before its reductions").
/// Under programmatic dependent launch, the kernels that may (device::gemm_may_prefetch_b_under_pdl: dense,
/// bf16 out, at most 128 rows, at most 16 K blocks per CTA) prefetch the first kPdlPrefetchBytes of their tiles' B
/// into the L2 before they wait for the kernel before them, and let the next kernel launch from there: the L2 is
/// where every kernel's writes land, so a prefetched line is never stale (docs/heuristics.md, "B prefetched under
/// PDL").
constexpr int64_t kPdlPrefetchBytes = 32 * 1024;

/// Decode calls only: measured where the tiles take one or two waves (larger M untried).
constexpr int64_t kPdlPrefetchMaxWaves = 2;

int pdl_prefetch_b_blocks_for(const Problem& p, const KernelConfig& c) {
  const auto k_blocks_per_cta = uint32_t(ceil_div(p.k, device::kBlockK) / c.split_k);
  if (!device::gemm_may_prefetch_b_under_pdl(static_cast<device::GemmKind>(p.kind), uint32_t(c.block_m), c.output,
                                              k_blocks_per_cta) ||
      c.num_waves > kPdlPrefetchMaxWaves)
    return 0;
  return int(std::max<int64_t>(1, kPdlPrefetchBytes / (int64_t(c.block_n) * device::kBlockK)));
}

}  // namespace

void set_launch_options(KernelConfig& chosen, const Problem& kp, const ConfigConstraints& constraints,
                        const HardwareModel& hw) {
  chosen.b_evict_first =
      constraints.b_evict_first >= 0 ? constraints.b_evict_first == 1 : b_evict_first_pays(kp, chosen);
  chosen.grid = fewest_ctas_for_the_waves(kp, chosen);
  chosen.d_evict_first = constraints.d_evict_first >= 0 ? constraints.d_evict_first == 1
                                                        : chosen.output != device::kOutF32AddCAhead &&
                                                              d_evict_first_pays(kp, hw);
  chosen.b_pairs = constraints.b_pairs >= 0 ? constraints.b_pairs == 1 && b_pairs_allowed(kp, chosen)
                                            : b_pairs_pay(kp, chosen);
  chosen.pdl_prefetch_b_blocks = constraints.pdl_prefetch == 0 ? 0 : pdl_prefetch_b_blocks_for(kp, chosen);
  chosen.d_prefetch_lead = device::gemm_reduces_into_d(chosen.output) ? 1 : 0;
}

}  // namespace finegemm::heuristics
