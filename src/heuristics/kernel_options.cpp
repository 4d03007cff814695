#include "heuristics/kernel_options.hpp"

#include <algorithm>

#include "finegemm/device/common/gemm_layout.cuh"
#include "heuristics/time_model.hpp"

namespace finegemm::heuristics {

bool takes_steady_ffma_pass(const KernelConfig& config) {
  // ptxas has every other promotion FFMA yield its issue slot; in the 256-row kernels those runs issue faster without
  // (H100, against no pass, alternating: 4096x7168x16384 637.5, 638.5 us / 650.8, 649.8, the other 256x128 seed
  // shapes 0.8-1.1% and contiguous 4x8192x4096x7168 1.9% faster), and in the dense 128-row kernels with whole batches
  // (on/off in three rounds: 1024x7168x2048 at 128x160 0.978-0.982, 128x128 and 128x112 0.994-1.001). Not
  // elsewhere: 128x192 (half batches) 1.003-1.010, grouped 128x160 1.001-1.047 (masked 4x600x4096x7168 the most), the
  // narrow K-depth kernels 0.998-1.003. On an H200 the masked 128-row kernels with whole batches gained from it too
  // (CUDA events after a 256 MiB memset, median of 30, two rounds, without / with: 1006 rows 4096x7168 at 128x160
  // 58.1, 58.1 / 54.7, 54.8 us, at 128x128 52.4, 52.5 / 51.3, 51.4; DeepGEMM's seed draws of 1 and 2 groups, the
  // picked 128x160 tiles, 58.1, 58.0 / 54.7, 54.9 and 58.4, 58.3 / 55.6, 55.6).
  // With 1x128 scales of B (the weight gradient: each column promoted by its own factor) only the 128x160 tiles gain
  // (H200, `finegemm bench`, same binary, two rounds, us, with / without: 7168x4096x16384 925.8, 926.2 / 937.6, 938.2;
  // 4096x4096x7168 242.1, 242.1 / 244.9, 244.9; 576x4096x7168 38.7, 38.7 / 39.1, 39.1; 7168x4096x2048 138.4, 138.2 /
  // 138.9, 138.7; but 24576x4096x1536 346.4, 346.6 / 345.0, 344.6); the others lose: 128x144 at 2112x4096x7168 137.9,
  // 138.1 / 135.7, 135.5; 128x96 at 32768x4096x512 310.4, 311.3 / 308.6, 308.3. The K-grouped kernels lose with it
  // too (128x160, 4 experts 4096x7168: 1526.0, 1526.7 / 1428.5, 1428.6).
  const bool gains_with_column_scales = config.sb_mode != device::kSbRowMnMajor || config.block_n == 160;
  const bool whole_batches = (config.kind == GemmKind::kNormal || config.kind == GemmKind::kGroupedMasked) &&
                             config.block_m == 128 && config.block_n > 64 && config.block_n < 192;
  return config.block_m == 256 || (whole_batches && gains_with_column_scales);
}

namespace {

/// B's TMA loads carry the L2 evict-first hint when each B tile is read by at most kEvictFirstMaxRowBlocks tiles
/// (row blocks per group), which the scheduler runs side by side (one raster band): B's lines then replace one
/// another instead of lines other tiles or kernels still use (A, which every tile reads; a previous kernel's output,
/// which costs a write-back to evict when dirty). Measured on an H100 after the bench's memset flush (kernel us,
/// hint vs none): one row block 64x7168x16384 49.3 vs 53.5, 64x4096x7168 15.2 vs 17.0, 128x7168x16384 50.0 vs
/// 55.1; two 128x2112x7168 (BM=64) 14.9 vs 15.5, masked 2x512x4096x7168 49.5 vs 51.9; three 384x7168x2048 13.9 vs
/// 15.4; four masked 1x1024x7168x2048 31.0 vs 30.7; many 4096x32768x512 180.2 vs 134.8, contiguous
/// 4x8192x4096x7168 1528.1 vs 1427.2.
/// Beyond kEvictFirstMaxWaves waves the hint stays only on dense GEMMs with one row block, whose A every tile of the
/// call reads: elsewhere it cost 2-30% in longer calls, even where each B tile is read once. Measured on an H100
/// (kernel us, hint vs none, the same tiles): at most 2 waves 256x24576x1536 24.9 vs 26.7,
/// 352x14336x4096 43.0 vs 46.0, masked 4x32x7168x2048 26.7 vs 30.1, 4x384x4096x7168 73.7 vs 75.7 (but 8x256x4096x7168
/// 116.3 vs 110.7); more waves, 2-3 row blocks: 384x32768x512 23.1 vs 19.7, masked 8x256x7168x2048 79.9 vs 68.3,
/// 16x384x7168x2048 225.9 vs 157.9; one row block per group, masked: 32x256x4096x7168 441.9 vs 414.0,
/// 16x32x7168x2048 97.6 vs 94.9 (8x32x7168x2048 50.3 vs 52.3); dense: 32x65536x2048 52.0 vs 56.4, 64x49152x4096 76.9
/// vs 80.2, 64x65536x7168 171.7 vs 171.4 (128x129280x7168 346.3 vs 335.0, 256x65536x2048 70.0 vs 68.2).
/// Where B has one row block per group, the hint also needs a call of at most kEvictFirstMaxOneBlockFlops: in those
/// runs every such call of 30 GFLOP or less gained from it (128x7168x16384, masked 4x128x4096x7168 52.6 vs
/// 53.7, 4x256x7168x2048 34.9 vs 36.3, 8x64x4096x7168 91.0 vs 93.2, 128x65536x1536 47.9 vs 49.4) and every larger one
/// lost or ran even (masked 4x192x4096x7168 (45 GFLOP) 58.9 vs 58.5, 4x256x4096x7168 60.8 vs 59.2, 8x128x4096x7168
/// 99.6 vs 95.5, 8x256x4096x7168 116.3 vs 110.7; dense 128x129280x7168 and 256x65536x2048 above, 64x65536x7168 and
/// 64x129280x7168 within 0.6%), whatever its intensity (FLOPs per byte of B) or length. Masked calls with 64-row
/// tiles keep it in three waves too (us, hint vs none: 8x16x7168x2048 49.2 vs 51.8-52.0, 8x32x7168x2048
/// 50.3-50.8 vs 52.1-52.4, 8x64x7168x2048 52.0-52.3 vs 52.7-53.1, 12x32x4096x7168 132.0-132.2 vs 132.3-132.4; in four
/// waves it lost: 10x64x7168x2048 64.0 vs 63.6, 16x16x4096x7168 172.1 vs 170.0).
constexpr int64_t kEvictFirstMaxRowBlocks = 3;
constexpr int64_t kEvictFirstMaxWaves = 2;
constexpr double kEvictFirstMaxOneBlockFlops = 36e9;

/// Dense GEMMs launch the fewest CTAs that run the same number of waves: the critical path stays the same (each CTA
/// still takes at most num_waves tiles) and the SMs that would only have run a shorter last round stay idle, out of
/// the L2 traffic and the power budget of the others. DeepGEMM sizes its grid the same way. Measured on an H100, the
/// same 256x128 kernels on 128 CTAs instead of 132: 4096x4096x7168 (512 tiles, 4 waves) 169.5 instead of 171.4 us,
/// 4096x7168x2048 (896 tiles, 7 waves) 92.2 instead of 92.9.
/// Grouped GEMMs keep every SM: their tile count is planned for the largest layout, and fewer rows at run time would
/// run in more waves on fewer CTAs.
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

/// B's issuer fills two stages per empty wait (device kernel's kBPairs) where the call is B's DRAM stream: B read by
/// few tiles (b_read_by_few_tiles) and at most kBPairsMaxFlopsPerByte FLOPs per byte of A, B and D, in the kernels
/// that have the code (device::gemm_may_pair_b_stages; elsewhere the kernel ignores the flag).
/// Measured on an H100, us without / with pairs:
/// 128x24576x1536 (219 FLOP/B) 20.4 -> 19.7-19.9, 64x7168x16384 (126) 49.3-49.4 -> 48.2-48.4, 256x32768x512 (255)
/// 18.4-18.5 -> 17.1-17.2, 256x24576x1536 (381) 25.0-25.7 -> 24.5-24.7, 128x32768x512 (340) 12.2-12.4 -> 11.8-11.9
/// in one call and 12.2 both ways in another, the other M <= 128 seed shapes unchanged; slower where the tensor work
/// bounds the call: 384x7168x16384 (700 FLOP/B, one wave) 74.0-75.7 -> 79.0-79.7, and, with pairs in every kernel,
/// 4096x2112x7168 91.3 -> 95.6 and 4096x24576x1536 242.4 -> 249.2 (our reading: there the second stage's wait holds
/// back the first's load); 384x4096x7168 (638) 22.7-23.1 -> 22.4-22.9.
/// The 64x32 decode tiles (split-K included) pair too. Measured on an H200 (`bench --chain`, 16 layers, PDL on, us
/// per layer, two rounds, without -> with): 1x4096x7168 11.74, 11.82 -> 10.83, 10.81; 64x4096x7168 12.81, 12.81 ->
/// 12.60, 12.64; 1x2112x7168 8.29, 8.27 -> 8.00, 8.02; 16x2112x7168 8.78, 8.79 -> 8.64, 8.69; plain calls after the
/// bench's memset flush within 0.1 us at 2112x7168 and 0.1-0.2 us slower at 4096x7168 (M = 1-32, about 11.7 us). The
/// 128x32 tiles (9-10 stages) lost with pairs: 128x2112x7168 11.48 -> 11.65, 128x4096x7168 15.04 -> 15.24 (chain).
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

/// D's TMA stores carry the L2 evict-first hint (GemmArgs::d_evict_first) where the output is larger than the L2 and
/// at least kDEvictFirstMinWriteRatio times A's and B's bytes together: there D's stream, written once and never read,
/// would otherwise push out the operand lines that later tiles read again. Measured on an H100
/// (us, plain / hinted, two rounds):
/// 4096x32768x512 (D 14x A+B) 129.1, 128.8 / 126.7, 126.7; no change at 7.5x and below (2048x32768x512 67.5, 67.6 /
/// 67.7, 67.7; 4096x24576x1536 236.4, 235.7 / 235.3, 235.7; contiguous 4x8192x7168x2048 829.9, 832.7 / 829.9,
/// 830.2; 1024x24576x1536 61.5, 61.6 / 61.9, 61.7). Where D fits the L2 the hint would write it back during the call
/// instead of after it (64x7168x2048 9.1, 9.2 -> 9.9, 9.8 us). Not with C loaded a tile ahead, whose D tiles overwrite
/// lines of C the L2 just read (C = D): on an H200, 32768x4096x512 ran 311.7, 312.4 us plain against 316.8, 317.8
/// hinted (C's loads hinted too: 342.6, 344.1).
constexpr double kDEvictFirstMinWriteRatio = 10.0;

bool d_evict_first_pays(const Problem& p, const HardwareModel& hw) {
  const CallBytes bytes = call_bytes(p);
  return bytes.d > hw.l2_bytes && bytes.d >= kDEvictFirstMinWriteRatio * (bytes.a + bytes.b);
}

/// GEMMs that reduce into D (D += A x B^T, kOutF32AddToD: dense and K-grouped ones) prefetch D's tile into the L2 as
/// A's issuer issues the tile's last K block (KernelConfig::d_prefetch_lead = 1), about a stage ring's K blocks before
/// the epilogue reduces into it. Measured on an H200 (`finegemm bench`, C = D, two rounds, us, without -> with):
/// 2112x4096x7168 140.5, 140.2 -> 138.2, 138.5; 576x4096x7168 39.4, 39.3 -> 38.3, 38.2; 24576x4096x1536 373.1, 373.1 ->
/// 366.7, 366.3; 4096x4096x7168 252.8, 252.9 -> 250.1, 250.2; 7168x4096x2048 149.3, 150.1 -> 142.6, 143.0;
/// 7168x4096x16384 947.9, 947.2 -> 951.0, 949.5 (the one slower). Six K blocks ahead instead gained less
/// (2112x4096x7168 139.4, 7168x4096x2048 143.9, 143.7). At the tile's start (an earlier try) the dense shapes ran
/// slower (2112x4096x7168 142.4 -> 145.8). The K-grouped kernel measured within -0.5% and +0.2% on its six cases with
/// one shared output buffer (one round); with two of 64 columns (gemm_store_buffers; four of 32 since), with the last
/// K block: 16 experts 4096x7168x2048 2056.3, 2054.6 -> 2013.6, 2015.4 us, 16 experts 7168x2048x2048 1071.1, 1071.4 ->
/// 1053.2, 1052.8, 8 experts 4096x7168x4096 1646.6, 1648.6 -> 1621.9, 1623.2; at the tile's start 2041.7, 2038.7;
/// 1062.6, 1063.5; 1652.5, 1651.8.
///
/// Under programmatic dependent launch, the kernels that may (device::gemm_may_prefetch_b_under_pdl: dense, bf16 out,
/// at most 128 rows, at most 16 K blocks per CTA) prefetch the first kPdlPrefetchBytes of their tiles' B into the L2
/// before they wait for the kernel before them (a quantizer, in a model), and let the next kernel launch from there.
/// The L2 is where every kernel's writes land, so a prefetched line is never stale. Measured on an H200 (`bench
/// --chain`, 16 layers of a quantizer and a GEMM, PDL on, us per layer, two rounds each, same run, without -> with):
/// 1x32768x512 8.01, 8.05 -> 7.42, 7.44; 64x32768x512 9.95, 9.97 -> 8.82, 8.83; 128x32768x512 10.81, 10.80 -> 9.83,
/// 9.72; 64x7168x2048 8.07, 8.05 -> 7.84, 7.83; 128x7168x2048 9.72, 9.67 -> 9.09, 8.96; 1x24576x1536 13.01, 13.05 ->
/// 12.63, 12.67; 128x24576x1536 16.51, 16.53 -> 16.62, 16.63 (the one row slower). With more K blocks the early
/// launch made the layer slower (64x4096x7168 12.71 -> 16.61, 64x2112x7168 9.31 -> 13.59, 7168x16384 1-3%); all of a
/// CTA's B (up to 224 KiB) made the layers slower than 32 KiB (1x32768x512 8.77, 64x7168x2048 8.31).
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
  chosen.pdl_prefetch_b_blocks = pdl_prefetch_b_blocks_for(kp, chosen);
  chosen.d_prefetch_lead = device::gemm_reduces_into_d(chosen.output) ? 1 : 0;
}

}  // namespace finegemm::heuristics
