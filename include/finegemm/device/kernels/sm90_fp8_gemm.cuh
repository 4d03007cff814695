// The FP8 GEMM kernel with fine-grained scaling for sm_90a: D = (A * SA) x (B * SB)^T, all GEMM kinds.
//
// Persistent and warp-specialized: one CTA per SM walks its tiles (TileScheduler). The last warpgroup produces
// (gemm/producer.cuh): one thread issues TMA loads of A (and SA when it goes by TMA), a thread of another warp those of
// B, into a kNumStages ring guarded by full/empty mbarriers; a third warp writes each stage's SB (and gathers SA when
// it is K-major with a stride TMA cannot take). One or two math warpgroups (gemm/math.cuh) issue wgmma (64 rows each
// per wave; BLOCK_M=256 tiles give each warpgroup two 64-row waves) and promote each 128-wide K block's fp32 result
// into a second accumulator with the SA * SB scales. Two math warpgroups take turns issuing (named barriers), so one
// promotes while the other's wgmmas run; at BLOCK_N >= 192 a turn's wgmmas are two commit groups of half the columns,
// the first half promoted while the second runs. Where a grouped tile's rows end before a warpgroup's 64 rows of a
// wave, that warpgroup passes the turn without issuing (kPassesIdleTurns). The epilogue (epilogue.cuh) converts to
// bf16, stores with stmatrix into a swizzled shared tile and writes it with TMA stores that overlap the next tile's
// main loop; fp32 outputs go through the shared tile as float pairs, plus C's tile where C is loaded (A's issuer loads
// it at the tile's start; kOutF32AddCAhead alternates two shared tiles, so that C loads a tile ahead), or reduced into
// D by TMA (kOutF32AddToD; kOutF32AddToDT: the kernel runs on D^T's tile grid, the call's A and B swapped, and reduces
// each tile into D transposed; kOutBf16DT stores it into D transposed, in bf16). For small-M shapes with few narrow
// tiles, a 2-CTA cluster splits K (gemm/split_k.cuh): each CTA computes the tile over about half of K, and the fp32
// partial sums of each warpgroup's rows go through distributed shared memory to the CTA that adds and stores them.
// Launched with programmatic dependent launch, the short-K dense kernels prefetch their first blocks of B into the L2
// while the kernel before them finishes (gemm_may_prefetch_b_under_pdl).
#pragma once

#include "finegemm/device/common/gemm_args.cuh"
#include "finegemm/device/common/gemm_layout.cuh"
#include "finegemm/device/common/types.cuh"
#include "finegemm/device/epilogue.cuh"
#include "finegemm/device/gemm/math.cuh"
#include "finegemm/device/gemm/pipeline.cuh"
#include "finegemm/device/gemm/producer.cuh"
#include "finegemm/device/gemm/split_k.cuh"
#include "finegemm/device/gemm/tile_ring.cuh"
#include "finegemm/device/gemm/traits.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/ptx/sync.cuh"
#include "finegemm/device/ptx/tma.cuh"
#include "finegemm/device/scheduler.cuh"

namespace finegemm::device {

template <int kKind, uint32_t N, uint32_t K, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, uint32_t kSaMode,
          uint32_t kSplitK = 1, bool kWideTail = false, uint32_t kSbMode = kSbBlock, uint32_t kOutput = kOutBf16>
__global__ void __launch_bounds__(gemm_num_threads(BLOCK_M), 1)
    sm90_fp8_gemm_kernel(const __grid_constant__ GemmArgs args) {
  // ---- Config checks --------------------------------------------------------------------------
  static_assert(BLOCK_M == 64 || BLOCK_M == 128 || BLOCK_M == 256, "64 rows per math warpgroup and wave");
  static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 16 && BLOCK_N <= 256, "BLOCK_N: multiple of 16 in [16, 256]");
  static_assert(kSbMode == kSbRowMnMajor ||
                    128 - (BLOCK_N & (~BLOCK_N + 1) & 127 ? (BLOCK_N & (~BLOCK_N + 1)) : 128) + BLOCK_N <= 256,
                "a tile may span at most two 128-column SB blocks (1x128 SB: a scale per column)");
  static_assert(kSbMode != kSbRowMnMajor || BLOCK_N <= 160 || gemm_widest_sb_per_row_tile(BLOCK_M, BLOCK_N, kOutput),
                "1x128 SB: the columns' scales take registers; 176 columns only on D^T's 128-row tiles");
  static_assert(N % 8 == 0 && K % 16 == 0, "N % 8 == 0 and K % 16 == 0 (16-byte TMA strides)");
  static_assert(kSplitK == 1 || (kSplitK == 2 && kKind == int(GemmKind::kNormal)),
                "split-K: the two CTAs of a cluster each take about half of K (dense GEMMs)");
  static_assert(ceil_div(K, kBlockK) % kSplitK == 0, "split-K: an even number of K blocks");
  static_assert(kSaMode <= kSaMnMajorOnce16, "SA read as GemmSaMode says");
  static_assert(!gemm_sa_once(kSaMode) || (kKind == int(GemmKind::kNormal) && BLOCK_M == 64 &&
                                           ceil_div(K, kBlockK) <= kSaOnceMaxKBlocks &&
                                           (kSaMode != kSaKMajorOnce || ceil_div(K, kBlockK) % 4 == 0)),
                "SA loaded once: dense 64-row tiles (the call's rows are the tile's first), one box of K blocks");
  static_assert(!kWideTail || gemm_wide_tail(GemmKind(kKind), BLOCK_M, BLOCK_N, kSplitK, kSaMode),
                "wide tails: dense, masked and psum 256x128 kernels as gemm_wide_tail says");
  static_assert(kSbMode <= kSbRowMnMajor && kOutput <= kOutBf16DT, "B's scales and the output as GemmSbMode "
                "and GemmOutput say");
  static_assert(!gemm_d_transposed(kOutput) || (kKind == int(GemmKind::kNormal) && BLOCK_M == 128 && kSplitK == 1 &&
                                                kSbMode == kSbRowMnMajor && kSaMode == kSaMnMajor),
                "D written transposed: dense 128-row tiles with 1x128 scales of both operands");
  static_assert(kOutput == kOutBf16 || (!kWideTail && !(kKind == int(GemmKind::kGroupedContiguous) && BLOCK_M == 256)),
                "fp32 outputs: no wide tiles (their waves are stored as two bf16 n-blocks)");
  static_assert(!gemm_loads_c(kOutput) || kSplitK == 1, "C's tile is loaded for the CTA that stores the tile only: "
                "no split-K");
  // K-grouped: K read per group on the device (K = 0 here), in the one shape that keeps its code small: two math
  // warpgroups taking turns over 128-row tiles, 1x128 scales of both operands by TMA, fp32 reduced into D.
  static_assert((kKind == int(GemmKind::kGroupedK)) == (K == 0), "K = 0: run-time K, the K-grouped kind only");
  static_assert(kKind != int(GemmKind::kGroupedK) ||
                    (BLOCK_M == 128 && gemm_k_depth(BLOCK_M, BLOCK_N) == 1 && kSplitK == 1 && !kWideTail &&
                     kSaMode == kSaMnMajor && kSbMode == kSbRowMnMajor && kOutput == kOutF32AddToD),
                "K-grouped: 128-row tiles with turns, no split-K, MN-major 1x128 scales, D += A x B^T in fp32");

  // ---- Types and constants ----------------------------------------------------------------------
  using Cfg = GemmTraits<kKind, N, K, BLOCK_M, BLOCK_N, kNumStages, kSaMode, kSplitK, kWideTail, kSbMode, kOutput>;
  using Layout = typename Cfg::Layout;
  static_assert(Layout::kLaunchBytes ==
                    gemm_smem_launch_bytes(BLOCK_M, BLOCK_N, kNumStages, K, kSplitK, kSaMode, kSbMode, kOutput),
                "host and device agree on the shared-memory footprint");
  static_assert(!Cfg::kWideTiles || (Cfg::kAHalfBox && BLOCK_N == 128 && Cfg::kWaveRows == BLOCK_M / 2 &&
                                     Layout::kABytesPerStage == 2 * Layout::kBBytesPerStage),
                "a wide tile's second B tile fills the A stage's second half");
  static_assert(Cfg::kNumMathWarpgroups == 1 ||
                    Cfg::kMathRegisters * Cfg::kNumMathThreads + Cfg::kProducerRegisters * 128 <= 168 * 384,
                "setmaxnreg: the registers the CTA started with");
  constexpr uint32_t kNumMathThreads = Cfg::kNumMathThreads;

  // ---- Shared memory carve-up -----------------------------------------------------------------------
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* base = reinterpret_cast<uint8_t*>(align_up(reinterpret_cast<uint64_t>(smem_raw), uint64_t(1024)));
  GemmSmem smem;
  smem.d = base + Layout::kOffsetD;                                           // (kNumDTiles, BLOCK_M, BLOCK_N)
  smem.a = base + Layout::kOffsetA;                                           // (kNumStages, BLOCK_M, BLOCK_K) fp8
  smem.b = base + Layout::kOffsetB;                                           // (kNumStages, BLOCK_N, BLOCK_K) fp8
  smem.sa = reinterpret_cast<float*>(base + Layout::kOffsetSa);               // (kNumStages, BLOCK_M, 1 or 4) fp32
  smem.sb = reinterpret_cast<float*>(base + Layout::kOffsetSb);               // (kNumStages, 2 or BLOCK_N) fp32
  smem.full_barriers = reinterpret_cast<uint64_t*>(base + Layout::kOffsetBarriers);  // (kNumStages)
  smem.empty_barriers = smem.full_barriers + kNumStages;                              // (kNumStages)
  smem.exchange_full = smem.empty_barriers + kNumStages;                              // split-K
  smem.exchange_empty = smem.exchange_full + 1;                                       // split-K
  smem.c_full = smem.empty_barriers + kNumStages + (kSplitK > 1 ? 2 : 0);             // C loaded: (kNumDTiles)
  smem.c_empty = smem.c_full + Cfg::kNumDTiles;                                       // C loaded: (kNumDTiles)
  smem.exchange = reinterpret_cast<float*>(base + Layout::kOffsetExchange);  // split-K: (BLOCK_M, BLOCK_N) fp32
  smem.sa_full = reinterpret_cast<uint64_t*>(base + Layout::kOffsetSaFull);  // SA loaded once

  // The math warps' tiles, walked for them by the producer's fourth warp (publish_tiles): two slots of a tile's
  // fields and a flag (0: none left), each with a full and an empty barrier. The math then starts a tile with a shared
  // read instead of the walk (for m_indices, a global round trip after each epilogue). Measured against the math's own
  // walk (finegemm bench, H200, mean of two rounds' medians): contiguous 4x8192x7168x3072 1381.1 -> 1365.9 us,
  // 8x4096x4096x2048 495.3 -> 492.0 us, psum 8x4096x4096x2048 396.0 -> 390.9 us; dense and masked within 0.4%.
  // Not for the fp32 outputs: their 128x144 and 128x160 kernels then kept GemmSmem on the stack (768-928 bytes).
  constexpr bool kTileRing = kOutput == kOutBf16;
  // The ring lives in the launch's alignment slack (1024 bytes, before base or after the carve-up, one of which holds
  // at least 512): a static __shared__ array made the kernels' static shared memory 1024 bytes (the dynamic part's
  // alignment), which the largest launches do not have.
  static_assert(Layout::kAlignmentSlack >= 2 * TileRingLayout::kBytes);
  const uint32_t smem_raw_addr = ptx::smem_addr(smem_raw);
  const uint32_t carve_end = ptx::smem_addr(base) + Layout::kTotalBytes;
  const uint32_t tile_ring =
      smem_raw_addr + Layout::kLaunchBytes - carve_end >= TileRingLayout::kBytes ? carve_end : smem_raw_addr;

  const uint32_t warp_idx = __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
  const uint32_t lane_idx = ptx::lane_id();
  const uint32_t cta_rank = kSplitK > 1 ? ptx::cluster_cta_rank() : 0;

  // ---- Barrier init + fence + cluster sync ----------------------------------------------------------
  if (threadIdx.x == kNumMathThreads) {
    ptx::tma_prefetch_descriptor(&args.tma_a);
    if constexpr (Cfg::kAHalfBox) ptx::tma_prefetch_descriptor(&args.tma_a_half);
    ptx::tma_prefetch_descriptor(&args.tma_b);
    if constexpr (!Cfg::kSaGather) ptx::tma_prefetch_descriptor(&args.tma_sa);
    ptx::tma_prefetch_descriptor(&args.tma_d);
    if constexpr (Cfg::kSbPerColumn) ptx::tma_prefetch_descriptor(&args.tma_sb);
    if constexpr (Cfg::kAddC || (Cfg::kDTransposed && Cfg::kAddToD && BLOCK_N % 32 != 0))
      ptx::tma_prefetch_descriptor(&args.tma_c);
    for (uint32_t s = 0; s < kNumStages; ++s) {
      ptx::mbarrier_init(&smem.full_barriers[s], Cfg::kFullArrivals);
      ptx::mbarrier_init(&smem.empty_barriers[s], Cfg::kEmptyArrivals);
    }
    if constexpr (kSplitK > 1) {
      ptx::mbarrier_init(smem.exchange_full, 1);   // the receiving warpgroup's expect_tx; the peer's st.async bytes
      ptx::mbarrier_init(smem.exchange_empty, 1);  // the peer's receiving warpgroup, once it read the sums
    }
    if constexpr (kTileRing) init_tile_ring(tile_ring, kNumMathThreads);
    // A's issuer's expect_tx (and its copies' arrival); SA's bytes complete it.
    if constexpr (Cfg::kSaOnce) ptx::mbarrier_init(smem.sa_full, gemm_sa_once_arrivals<Cfg>(args));
    if constexpr (Cfg::kAddC) {
      for (uint32_t i = 0; i < Cfg::kNumDTiles; ++i) {
        ptx::mbarrier_init(smem.c_full + i, 1);  // A's issuer's expect_tx; C's TMA bytes complete it
        ptx::mbarrier_init(smem.c_empty + i, Cfg::kNumMathWarpgroups);  // each math warpgroup, once its stores read it
      }
    }
    ptx::fence_mbarrier_init();
  }
  // The CTA's threads see thread 0's barrier initialization through __syncthreads. Split-K: every thread also waits
  // for the peer here, the producer too (it could start loading before: nothing crosses the cluster until the partial
  // sums; but compute-sanitizer's racecheck then never finished). The peer needs only this CTA's initialized barriers,
  // which fence_mbarrier_init publishes to the cluster, so the arrival is relaxed (one with release semantics waits
  // for every earlier memory operation: 0.1-0.3 us per call).
  __syncthreads();
  if constexpr (kSplitK > 1) {
    ptx::cluster_arrive_relaxed();
    ptx::cluster_wait();
  }
  // Split-K: the two CTAs of a cluster walk the cluster's tiles; CTA 0 takes the first num_k_blocks_from(0) K blocks,
  // CTA 1 the rest.
  const uint32_t kb_begin = kSplitK > 1 && cta_rank == 1 ? Cfg::num_k_blocks_from(0) : 0;
  // Programmatic dependent launch (a launch with it: finegemm::set_pdl): the setup above may overlap the previous
  // kernel on the stream; every thread waits for that kernel's results before its first global-memory access (the
  // scheduler's m_indices / masked_m / group-end reads, TMA loads and stores, SA gathers). The 256-row kernels let the
  // next kernel launch from here on (the others after their math, below). In the kernels that may prefetch B
  // (gemm_may_prefetch_b_under_pdl), launched with PDL, B's issuer (producer warp 2) first lets the next kernel launch
  // and prefetches its first blocks of B into the L2, whose lines no kernel's writes can leave stale (a dense GEMM's
  // tiles are known without reading global memory). Only that thread reads the flag before the wait.
  if constexpr (BLOCK_M == 256) ptx::launch_dependents();
  if constexpr (gemm_may_prefetch_b_under_pdl(GemmKind(kKind), BLOCK_M, kOutput, Cfg::kKBlocksPerCta)) {
    if (threadIdx.x == kNumMathThreads + 64 && args.pdl_prefetch_b_blocks > 0) {
      ptx::launch_dependents();
      prefetch_b_into_l2<Cfg>(args,
                              typename Cfg::Scheduler(args.num_rows, args.num_groups, args.grouped_layout,
                                                      blockIdx.x / kSplitK, gridDim.x / kSplitK),
                              kb_begin, args.pdl_prefetch_b_blocks);
    }
  }
  // Dense GEMMs know their tiles from their arguments: the tile walk is built, the roles split and the registers
  // handed over before the wait, and each role waits at its start (the tile publisher before its error report, its
  // only global access). In a decode chain the CTAs are resident while the quantizer before them runs, so that setup
  // leaves the path from the quantizer's end to B's first loads. The grouped kinds read their layouts from the walk's
  // start: every thread waits here.
  constexpr bool kSetUpBeforeWait = GemmKind(kKind) == GemmKind::kNormal;
  if constexpr (!kSetUpBeforeWait) ptx::grid_dependency_wait();

  typename Cfg::Scheduler scheduler(args.num_rows, args.num_groups, args.grouped_layout, blockIdx.x / kSplitK,
                                    gridDim.x / kSplitK, args.total_k, args.psum_alignment);

  // ---- Register reconfiguration, then producer / math --------------------------------------------------
  if (threadIdx.x >= kNumMathThreads) {
    ptx::setmaxnreg_dec<Cfg::kProducerRegisters>();
    const uint32_t producer_warp = warp_idx - Cfg::kNumMathWarps;
    if (producer_warp == 0 && lane_idx == 0) {
      if constexpr (kSetUpBeforeWait) ptx::grid_dependency_wait();
      load_a_stages<Cfg>(args, smem, scheduler, kb_begin);
    } else if (producer_warp == 2 && lane_idx == 0) {
      if constexpr (kSetUpBeforeWait) ptx::grid_dependency_wait();
      load_b_stages<Cfg>(args, smem, scheduler, kb_begin);
    } else if (producer_warp == 1) {
      if constexpr (kSetUpBeforeWait) ptx::grid_dependency_wait();
      stage_scales<Cfg>(args, smem, scheduler, kb_begin, lane_idx);
    } else if (kTileRing && producer_warp == 3 && lane_idx == 0) {
      publish_tiles(scheduler, tile_ring);
      if (scheduler.error_bits != 0) {
        if constexpr (kSetUpBeforeWait) ptx::grid_dependency_wait();
        ptx::atomic_or_global(args.error_flags, scheduler.error_bits);
      }
    }
  } else {
    if constexpr (kSetUpBeforeWait) ptx::grid_dependency_wait();
    ptx::setmaxnreg_inc<Cfg::kMathRegisters>();
    const uint32_t math_wg = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
    const uint32_t wg_thread = threadIdx.x % 128;
    const uint32_t warp_in_wg = warp_idx % 4;
    const uint32_t wg_barrier = static_cast<uint32_t>(NamedBarrier::kMathWarpgroup0) + math_wg;
    MathWarpgroup<Cfg> math(smem, math_wg, warp_in_wg, lane_idx, args.ld_sa);
    if constexpr (Cfg::kSaOnce) ptx::mbarrier_wait(smem.sa_full, 0);  // SA loaded once, before the first tile
    math.start_turns();
    SplitKExchange<Cfg> exchange{smem, wg_thread, cta_rank ^ 1u};
    TileSubscriber tiles{tile_ring};
    // Without the ring (fp32 outputs): whole warps of 64- and 128-row kernels walk the candidates and skip those
    // without work in their own loop (TileScheduler::next_candidate): with the skip loop inside next(), ptxas gave the
    // grouped 128-row kernels a K loop of 170 instead of 156 instructions (2.5% slower at K=2048). The 256-row kernels
    // keep next(): there the candidate walk cost 2 instructions per K block (1% slower).
    bool has_work = true;
    auto next_tile = [&](Tile& t) -> bool {
      if constexpr (kTileRing) return tiles.next(t);
      if constexpr (BLOCK_M <= 128) return scheduler.next_candidate(t, has_work);
      return scheduler.next(t);
    };
    Tile tile;
    CTileTurn<Cfg> c_turn;  // C loaded: the shared tile of this CTA's tile and the phase C's arrival completes there

    // ---- Epilogue: into the swizzled shared tile (bf16 by stmatrix; fp32 pairs, C added), TMA store (or row-checked
    // stores) -----------------------------------------------------------------------------------------------------
    auto store_tile = [&](const Tile& t) {
      if constexpr (kOutput == kOutBf16) {
        Cfg::Epilogue::store(math.final_accum, smem.d, math_wg, Cfg::kWaveRows, warp_in_wg, lane_idx, wg_thread,
                             wg_barrier, t, args, N);
      } else if constexpr (kOutput == kOutBf16DT) {
        Cfg::Epilogue::store_transposed(math.final_accum, smem.d, math_wg, wg_thread, wg_barrier, t, args);
      } else {
        Cfg::Epilogue::template store_f32<Cfg::kAddC, Cfg::kAddToD>(
            math.final_accum, smem.d + c_turn.slot() * Layout::kDTileBytes, math_wg, Cfg::kWaveRows, warp_in_wg,
            lane_idx, wg_thread, wg_barrier, t, args, N, smem.c_full + c_turn.slot(), c_turn.phase());
        if constexpr (Cfg::kAddC) {
          // A later tile's C may go into the shared tile once this warpgroup's stores have read it.
          if (wg_thread == 0) {
            ptx::tma_store_wait_read<0>();
            ptx::mbarrier_arrive(smem.c_empty + c_turn.slot());
          }
          c_turn.advance();
        }
      }
    };

    if constexpr (kSplitK == 1) {
      while (next_tile(tile)) {
        if (!has_work) continue;
        math.compute_tile(tile, kb_begin);
        store_tile(tile);
      }
    } else {
      // Split-K: a warpgroup whose rows the other CTA owns sends its partial sums and goes on to its next tile; the
      // owner's adds them, stores its rows and frees its exchange buffer only when another tile follows. After the last
      // tile nothing crosses the cluster (each receiver waited for every byte sent to it, and no sender waits), so
      // neither CTA waits for the other to leave. Releasing after every tile, with the sender waiting for the last
      // release before it left, measured 0.3-0.4 us slower per call (H200, finegemm bench: 1x2112x7168 8.77 -> 8.42 us,
      // 64x1536x7168 7.90 -> 7.50). With 128-row tiles, each CTA owning one warpgroup's rows instead of CTA 0 all of
      // them (with a lead of 2 K blocks): bench --chain, PDL on, us per layer, 72x2112x7168 10.01 -> 9.81,
      // 128x2112x7168 10.57 -> 10.34; plain calls within 0.1 us.
      auto next_work = [&](Tile& t) -> bool {
        while (next_tile(t)) {
          if (has_work) return true;
        }
        return false;
      };
      bool more = next_work(tile);
      while (more) {
        math.compute_tile(tile, kb_begin);
        if (!SplitKExchange<Cfg>::owns(math_wg, cta_rank)) {
          exchange.send(math);
          more = next_work(tile);
          continue;
        }
        exchange.receive(math);
        store_tile(tile);
        more = next_work(tile);
        if (more) exchange.release(wg_barrier);
      }
    }
    math.end_turns();
    // Kernels of at most 128 rows let the next kernel launch once every CTA is past its math: its CTAs (a quantizer's
    // small ones fit beside this kernel's) then overlap only the last stores. Launched from the start, they made
    // chains of long-K decode GEMMs slower than plain launches (H200, a quantizer and a 64x4096x7168 GEMM per layer:
    // 14.93 us against 13.38; from here, 12.64). The 256-row kernels keep the early trigger: with the late one, plain
    // launches of 4096x7168x16384 and contiguous 4x8192x4096x7168 measured 1.4% and 2.3% slower. Kernels that
    // prefetched B let the next kernel launch before their wait already (from B's issuer; the chains gained as with
    // every thread's trigger there).
    if constexpr (BLOCK_M <= 128) ptx::launch_dependents();
    if (wg_thread == 0) ptx::tma_store_wait<0>();
    if (!kTileRing && threadIdx.x == 0 && scheduler.error_bits != 0)
      ptx::atomic_or_global(args.error_flags, scheduler.error_bits);
  }
}

}  // namespace finegemm::device
