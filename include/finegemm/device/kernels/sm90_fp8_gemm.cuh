// The FP8 GEMM kernel with fine-grained scaling for sm_90a: D = (A * SA) x (B * SB)^T, all GEMM kinds.
//
// Persistent and warp-specialized: one CTA per SM walks its tiles (TileScheduler). The last warpgroup produces: one
// thread issues TMA loads of A (and SA when MN-major), a thread of another warp those of B, into a kNumStages ring
// guarded by full/empty mbarriers; a third warp writes each stage's SB (and gathers SA when it is K-major). One or two
// math warpgroups issue wgmma (64 rows each per wave; BLOCK_M=256 tiles give each warpgroup two 64-row waves) and
// promote each 128-wide K block's fp32 result into a second accumulator with the SA * SB scales (Hopper's FP8
// tensor-core accumulation keeps about 14 bits). Two math warpgroups take turns issuing (named barriers), so one
// promotes while the other's wgmmas run; at BLOCK_N >= 192 a turn's wgmmas are two commit groups of half the columns,
// the first half promoted while the second runs. The epilogue converts to bf16, stores with stmatrix into a swizzled
// shared tile and writes it with TMA stores that overlap the next tile's main loop. A 2-CTA cluster either shares one
// operand by TMA multicast or, for small-M shapes with few narrow tiles, splits K: each CTA computes the tile over half
// of K, and the second adds its fp32 partial sums into the first's through distributed shared memory (a fixed order, so
// results are deterministic). With kTailSplit (dense, unclustered), the tiles of the last, partial wave are cut along K
// into pieces that run on different CTAs; the pieces meet through global memory (the last one to finish adds them, in
// piece order).
#pragma once

#include "finegemm/device/common/gemm_args.cuh"
#include "finegemm/device/common/gemm_layout.cuh"
#include "finegemm/device/common/types.cuh"
#include "finegemm/device/epilogue.cuh"
#include "finegemm/device/ptx/ld_st.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/ptx/sync.cuh"
#include "finegemm/device/ptx/tma.cuh"
#include "finegemm/device/ptx/wgmma.cuh"
#include "finegemm/device/scheduler.cuh"

// Measurement switches, FINEGEMM_JIT_DEFINES=-DFG_EXPERIMENT=bits (scripts/perf-ab.sh; results are wrong while one is
// on): each removes one part of the main loop so that a run shows what that part costs (docs/performance.md).
//   1: promote only the last K block (ptxas drops wgmmas whose results are never read)
//   2: the TMA thread arrives on each stage without loading A, B or SA
//   4: the two math warpgroups issue without taking turns
//   8: one accumulator (turns) at every BLOCK_N, no K blocks in flight in several accumulators
//  16: with turns, pass the turn once the K block's wgmmas completed instead of right after issuing them
//  64: one thread issues every TMA load (A, SA and B), as before session 7, instead of B from a second warp
// 128: tail split without the pieces' partial sums: no slot writes or reads, the tile's piece 0 stores its own sums
// 256: trace: each CTA prints (device printf) %globaltimer at points of its first tile (results stay right). The
//      printf makes ptxas serialize every wgmma (C7510), so the trace times a slower main loop than the default's.
// 512: every thread returns at entry (the launch's own cost)
// 2048: K-loop clocks (one accumulator per warpgroup): each math thread sums the SM cycles of the loop's parts in
//       registers; CTA 0's warpgroup leaders add them, and their warpgroup's life in cycles and in ns, to measurement
//       words that `finegemm bench` prints when FINEGEMM_LOOP_CLOCKS=1 (results stay right). The TMA issuers and the
//       scale warp of every CTA add their stages, their cycles waiting for empty stages, issuing, and in their role.
// 4096: A's issuer loads no SA (its bytes are not expected either)
// 8192: A's issuer loads A only on the ring's first pass (later stages reuse what the first pass loaded)
// 131072: no scale warp: SB is never staged (the math reads stale values) and the full barriers do not wait for it
// 262144: B's issuer loads B only on the ring's first pass (later stages reuse it; with 8192 and 4096, only the
//         ring's first pass loads anything, the handshakes stay)
// 524288: SA (MN-major) loaded by lane 0 of producer warp 3, with its own empty wait and expect_tx per stage, instead
//         of by A's issuer (results stay right)
// 1048576: round-robin issuers: lane 0 of producer warps 0, 2 and 3 each load A, SA and B of every third stage
//          (dense, unclustered, MN-major SA; results stay right)
// 2097152: the scale warp arrives once per stage (lane 0) instead of once per lane (results stay right)
// 8388608: no math (one accumulator per warpgroup): the math warps wait for each stage and release it, without
//          wgmmas, promotion or turns; the epilogue stores zeros. What is left is the loads' stream, the handshakes and
//          the stores: the call's time with only its data moving.
// 16777216: the life clock alone: each math warpgroup of CTA 0 adds its life in SM cycles and in ns to the words
//           that FG_EXPERIMENT 2048 fills (no clock reads in the K loop; results stay right), so that
//           FINEGEMM_LOOP_CLOCKS=1 prints the SM clock of an unchanged kernel (or of another switch's).
// 16384: with turns, every K block's wgmmas as one commit group (no half batches, see gemm_batch_parts; results stay
//        right)
// 32768: with turns, half batches at every BLOCK_N that allows them (BLOCK_N % 16 == 0; results stay right)
#ifndef FG_EXPERIMENT
#define FG_EXPERIMENT 0
#endif
#ifndef FG_K_DEPTH
#define FG_K_DEPTH 0
#endif
#define FG_EXPERIMENT_NO_PROMOTE ((FG_EXPERIMENT & 1) != 0)
#define FG_EXPERIMENT_NO_LOADS ((FG_EXPERIMENT & 2) != 0)
#define FG_EXPERIMENT_NO_PINGPONG ((FG_EXPERIMENT & 4) != 0)
#define FG_EXPERIMENT_SINGLE_BUFFER ((FG_EXPERIMENT & 8) != 0)
#define FG_EXPERIMENT_TURN_AFTER_WAIT ((FG_EXPERIMENT & 16) != 0)
#define FG_EXPERIMENT_ONE_TMA_THREAD ((FG_EXPERIMENT & 64) != 0)
#define FG_EXPERIMENT_TAIL_NO_EXCHANGE ((FG_EXPERIMENT & 128) != 0)
#define FG_EXPERIMENT_TRACE ((FG_EXPERIMENT & 256) != 0)
#define FG_EXPERIMENT_EMPTY ((FG_EXPERIMENT & 512) != 0)
#define FG_EXPERIMENT_LOOP_CLOCKS ((FG_EXPERIMENT & 2048) != 0)
#define FG_EXPERIMENT_NO_SA_LOADS ((FG_EXPERIMENT & 4096) != 0)
#define FG_EXPERIMENT_A_FIRST_PASS ((FG_EXPERIMENT & 8192) != 0)
#define FG_EXPERIMENT_NO_SCALE_WARP ((FG_EXPERIMENT & 131072) != 0)
#define FG_EXPERIMENT_B_FIRST_PASS ((FG_EXPERIMENT & 262144) != 0)
#define FG_EXPERIMENT_WHOLE_BATCHES ((FG_EXPERIMENT & 16384) != 0)
#define FG_EXPERIMENT_HALF_BATCHES ((FG_EXPERIMENT & 32768) != 0)
#define FG_EXPERIMENT_SA_WARP3 ((FG_EXPERIMENT & 524288) != 0)
#define FG_EXPERIMENT_ROUND_ROBIN ((FG_EXPERIMENT & 1048576) != 0)
#define FG_EXPERIMENT_SCALE_ONE_ARRIVE ((FG_EXPERIMENT & 2097152) != 0)
#define FG_EXPERIMENT_NO_MATH ((FG_EXPERIMENT & 8388608) != 0)
#define FG_EXPERIMENT_LIFE_CLOCK ((FG_EXPERIMENT & (2048 | 16777216)) != 0)

namespace finegemm::device {

/// Copies of the K loop, one per split point of a tile straddling two SB blocks (BLOCK_N / gcd(BLOCK_N, 128) of them):
/// 5 covers BLOCK_N 48, 80, 96, 160 and 192; BLOCK_N 112 and 144 select the scale per granule at run time.
inline constexpr uint32_t kMaxScaleVariants = 5;

/// A value known at compile time (`value`), or at run time (RuntimeValue), for code written once for both.
template <uint32_t V>
struct Constant {
  static constexpr uint32_t value = V;
};
struct RuntimeValue {
  uint32_t value;
};

/// f(Constant<value>()) for value in [kLow, kHigh] (a value above kHigh takes kHigh's branch).
template <uint32_t kLow, uint32_t kHigh, class F>
FG_DEVICE void with_constant(uint32_t value, F& f) {
  if constexpr (kLow == kHigh) {
    f(Constant<kLow>());
  } else {
    if (value == kLow) {
      f(Constant<kLow>());
    } else {
      with_constant<kLow + 1, kHigh>(value, f);
    }
  }
}

/// Named barriers (id 0 is __syncthreads).
enum class NamedBarrier : uint32_t {
  kMathWarpgroup0 = 1,
  kMathWarpgroup1 = 2,
  kMathTurn0 = 3,
  kMathTurn1 = 4,
  kMathAll = 5,  // every math thread (tail split: who adds a cut tile's pieces; split-K: the sums were read)
};

/// Stage index and phase parity of a ring of kNumStages slots, advanced in one place.
template <uint32_t kNumStages>
struct PipelineState {
  uint32_t stage = 0;
  uint32_t phase = 0;
  FG_DEVICE void advance() {
    if (++stage == kNumStages) {
      stage = 0;
      phase ^= 1;
    }
  }
};

template <int kKind, uint32_t N, uint32_t K, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages,
          uint32_t kClusterSize, bool kMulticastOnA, uint32_t kSaMode, uint32_t kSplitK = 1, bool kTailSplit = false,
          bool kWideTail = false>
__global__ void __launch_bounds__(gemm_num_threads(BLOCK_M), 1)
    sm90_fp8_gemm_kernel(const __grid_constant__ GemmArgs args) {
  // ---- Config checks --------------------------------------------------------------------------
  static_assert(BLOCK_M == 64 || BLOCK_M == 128 || BLOCK_M == 256, "64 rows per math warpgroup and wave");
  static_assert(BLOCK_N % 8 == 0 && BLOCK_N >= 16 && BLOCK_N <= 256, "BLOCK_N: multiple of 8 in [16, 256]");
  static_assert(128 - (BLOCK_N & (~BLOCK_N + 1) & 127 ? (BLOCK_N & (~BLOCK_N + 1)) : 128) + BLOCK_N <= 256,
                "a tile may span at most two 128-column SB blocks");
  static_assert(N % 8 == 0 && K % 16 == 0, "N % 8 == 0 and K % 16 == 0 (16-byte TMA strides)");
  static_assert(kClusterSize == 1 || kClusterSize == 2, "clusters of 1 or 2 CTAs");
  static_assert(kClusterSize == 1 || kSplitK > 1 || !kMulticastOnA || BLOCK_M % (8 * kClusterSize) == 0,
                "A multicast split");
  static_assert(kClusterSize == 1 || kSplitK > 1 || kMulticastOnA || BLOCK_N % (8 * kClusterSize) == 0,
                "B multicast split");
  static_assert(kSplitK == 1 || (kSplitK == 2 && kClusterSize == 2 && kKind == int(GemmKind::kNormal)),
                "split-K: the two CTAs of a cluster each take half of K (dense GEMMs)");
  static_assert(ceil_div(K, kBlockK) % kSplitK == 0, "split-K: an even number of K blocks");
  static_assert(!kTailSplit || (kKind == int(GemmKind::kNormal) && kClusterSize == 1 &&
                                gemm_k_depth(BLOCK_M, BLOCK_N) == 1 && ceil_div(K, kBlockK) >= 2 * kMaxTailPieces),
                "tail split: dense GEMMs, unclustered, one accumulator per warpgroup, at least 2 K blocks per piece");
  static_assert(kSaMode <= kSaKMajorTma, "SA read as GemmSaMode says");
  static_assert(!kWideTail || (kKind == int(GemmKind::kNormal) && kSplitK == 1 &&
                               gemm_dense_wide_tail(BLOCK_M, BLOCK_N, kClusterSize, kTailSplit, kSaMode)),
                "wide tails: dense 256x128 kernels as gemm_dense_wide_tail says");
  static_assert(GemmSmemLayout<BLOCK_M, BLOCK_N, kNumStages, K, kSplitK, kSaMode>::kLaunchBytes ==
                    gemm_smem_launch_bytes(BLOCK_M, BLOCK_N, kNumStages, K, kSplitK, kSaMode),
                "host and device agree on the shared-memory footprint");

  // ---- Types and constants ----------------------------------------------------------------------
  using Layout = GemmSmemLayout<BLOCK_M, BLOCK_N, kNumStages, K, kSplitK, kSaMode>;
  // SA by TMA (MN-major, or K-major in boxes 4 K blocks wide) or gathered by the scale warp (K-major, other strides).
  constexpr bool kSaGather = kSaMode == kSaKMajorGather;
  constexpr uint32_t kSaRowFloats = Layout::kSaRowFloats;
  using Epilogue = EpilogueTile<BLOCK_M, BLOCK_N>;
  constexpr GemmKind kGemmKind = static_cast<GemmKind>(kKind);
  constexpr uint32_t kNumKBlocks = Layout::kNumKBlocks;
  // Split-K (kSplitK == 2): both CTAs of a cluster compute the same tile, each over half of the K blocks; the second
  // sends its fp32 partial sums to the first through distributed shared memory, and the first stores the tile.
  // Otherwise a 2-CTA cluster shares one operand by TMA multicast.
  constexpr uint32_t kKBlocksPerCta = kNumKBlocks / kSplitK;
  constexpr bool kMulticast = kClusterSize == 2 && kSplitK == 1;
  constexpr uint32_t kNumNBlocks = ceil_div(N, BLOCK_N);
  constexpr uint32_t kNumSbBlocks = ceil_div(N, 128u);
  constexpr uint32_t kNumMathWarpgroups = Layout::kNumMathWarpgroups;
  constexpr uint32_t kNumWaves = Layout::kNumWaves;
  constexpr uint32_t kWaveRows = Layout::kWaveRows;
  constexpr uint32_t kNumMathThreads = kNumMathWarpgroups * 128;
  constexpr bool kGrouped = kGemmKind != GemmKind::kNormal;
  constexpr uint32_t kMathRegisters = gemm_math_registers(kGrouped, BLOCK_M, BLOCK_N, kSaMode);
  constexpr uint32_t kProducerRegisters = gemm_producer_registers(kGrouped, BLOCK_M, BLOCK_N, kSaMode);
  static_assert(kNumMathWarpgroups == 1 || kMathRegisters * kNumMathThreads + kProducerRegisters * 128 <= 168 * 384,
                "setmaxnreg: the registers the CTA started with");
  constexpr uint32_t kNumMathWarps = kNumMathThreads / 32;
  constexpr bool kUniformScaleB = 128 % BLOCK_N == 0;  // a tile never straddles two 128-column SB blocks
  // Columns of one scale granule: a straddling tile splits at n_start % 128, a multiple of gcd(BLOCK_N, 128).
  constexpr uint32_t kLowestBit = BLOCK_N & (~BLOCK_N + 1);
  constexpr uint32_t kScaleGranule = kUniformScaleB ? BLOCK_N : kLowestBit < 128 ? kLowestBit : 128;
  constexpr uint32_t kNumScaleGranules = BLOCK_N / kScaleGranule;
  constexpr uint32_t kASplit = (kMulticast && kMulticastOnA) ? 2 : 1;
  constexpr uint32_t kBSplit = (kMulticast && !kMulticastOnA) ? 2 : 1;
  // B's loads are issued by a thread of their own (producer warp 2): with one thread issuing A, SA and B, that
  // thread's loop paced the narrow small-M tiles (docs/performance-log.md, session 7). Each issuer announces its own
  // bytes (arrive.expect_tx) before its loads.
  constexpr bool kSeparateBIssuer = !FG_EXPERIMENT_ONE_TMA_THREAD && !FG_EXPERIMENT_NO_LOADS;
  constexpr uint32_t kABytes = Layout::kABytesPerStage + (kSaGather ? 0 : BLOCK_M * kSaRowFloats * 4);
  // Tiles of at most 128 rows load A through a box of 128 rows (gemm_has_a_half_box; dense: the wide tail's).
  constexpr bool kAHalfBox = gemm_has_a_half_box(kGrouped, BLOCK_M, kASplit, kWideTail);
  constexpr uint32_t kBBytes = Layout::kBBytesPerStage;
  // The TMA issuers (with their bytes) and the scale warp's lanes; with gathered SA, each lane's cp.asyncs of the
  // stage's row scales arrive once more when they complete.
  // Measurement switches 524288, 1048576 and 2097152 (see the list at the top).
  constexpr bool kSaIssuer = FG_EXPERIMENT_SA_WARP3 && kSeparateBIssuer && kSaMode == kSaMnMajor && !kMulticast;
  constexpr bool kScaleOneArrive = FG_EXPERIMENT_SCALE_ONE_ARRIVE && !kSaGather;
  constexpr bool kRoundRobin = FG_EXPERIMENT_ROUND_ROBIN && kSeparateBIssuer && kSaMode == kSaMnMajor && !kMulticast &&
                               kGemmKind == GemmKind::kNormal && !kTailSplit;
  constexpr uint32_t kFullArrivals = (kRoundRobin ? 1 : kSeparateBIssuer ? 2 : 1) + (kSaIssuer ? 1 : 0) +
                                     (FG_EXPERIMENT_NO_SCALE_WARP ? 0 : kScaleOneArrive ? 1 : 32) +
                                     (kSaGather ? 32 : 0);
  // A stage is released by every thread that read it with ordinary loads, so that each read happens before the scale
  // warp's next stores there (one lane's arrive after __syncwarp orders the others too, but racecheck cannot see it).
  // SB: in dense kernels and in contiguous ones with whole batches every math thread reads it (a broadcast load) before
  // its turn; read by lane 0 after the issue and shuffled, as the other kernels still do, those loads sat in the chain
  // from one batch to the next (docs/performance-log.md, session 23: dense; session 37: contiguous, 2% at 256x128).
  // With half batches (128x192) the broadcast took 4096x2112x7168 from 89.5, 89.3 to 88.4, 88.5 us and left
  // 128x24576x1536 at 19.8, but made contiguous K=2048 0.3-2.8% slower (session 39). Masked kernels: the same time
  // either way at 256x128 (where the broadcast keeps the K loop the dense one's, 195 against 217 instructions), 1.4%
  // slower with it at 128x160 (session 38). Gathered SA is read by every math thread; A and B are
  // read by the async proxy (wgmma), and they and SA otherwise are written by TMA. The peer CTA of a cluster gets one
  // arrive per warp.
  constexpr bool kEveryThreadReadsSb =
      (gemm_batch_parts(BLOCK_N, kKBlocksPerCta) == 1 || kGemmKind == GemmKind::kNormal) &&
      (kGemmKind != GemmKind::kGroupedMasked || kNumWaves == 2);
  constexpr uint32_t kLocalReleaseArrivals = kSaGather || kEveryThreadReadsSb ? kNumMathThreads : kNumMathWarps;
  constexpr uint32_t kEmptyArrivals = kLocalReleaseArrivals + (kMulticast ? kNumMathWarps : 0);
  using Scheduler =
      TileScheduler<kGemmKind, BLOCK_M, BLOCK_N, kNumNBlocks, kMulticast ? 2 : 1, kMulticastOnA, kTailSplit, kWideTail>;
  // Contiguous 256-row kernels run a half (at most 128 rows) as a wide tile over two n-blocks (Tile::wide): A through
  // the 128-row box into the first half of the A stage, the second n-block's B into the other half. Its wave 1 is
  // the same rows times that B, with the second SB block's scale, stored 128 columns to the right. Dense 256x128
  // kernels with kWideTail run a last row block of at most 128 rows so (TileScheduler's kWideTail).
  constexpr bool kWideTiles = Scheduler::kWideTiles;
  static_assert(!kWideTiles || (kAHalfBox && BLOCK_N == 128 && kWaveRows == BLOCK_M / 2 &&
                                Layout::kABytesPerStage == 2 * Layout::kBBytesPerStage),
                "a wide tile's second B tile fills the A stage's second half");
  constexpr uint32_t kWideBOffset = (BLOCK_M / 2) * kBlockK;  // the second B tile, in the A stage
  // B's issuer may fill two stages per empty wait (args.b_pairs, set on the host where the call streams B:
  // heuristics.cpp, b_pairs_pay): dense, unclustered kernels with BLOCK_M <= 128 and BLOCK_N >= 64 (the 256-row
  // kernels, picked for many tiles, keep their SASS).
  constexpr bool kBPairs = kGemmKind == GemmKind::kNormal && kClusterSize == 1 && !kTailSplit && kSeparateBIssuer &&
                           BLOCK_M <= 128 && BLOCK_N >= 64 && !FG_EXPERIMENT_B_FIRST_PASS;

  // ---- Shared memory carve-up -----------------------------------------------------------------------
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(align_up(reinterpret_cast<uint64_t>(smem_raw), uint64_t(1024)));
  uint8_t* smem_d = smem + Layout::kOffsetD;                                 // (BLOCK_M, BLOCK_N) bf16, swizzled slabs
  uint8_t* smem_a = smem + Layout::kOffsetA;                                 // (kNumStages, BLOCK_M, BLOCK_K) fp8
  uint8_t* smem_b = smem + Layout::kOffsetB;                                 // (kNumStages, BLOCK_N, BLOCK_K) fp8
  float* smem_sa = reinterpret_cast<float*>(smem + Layout::kOffsetSa);       // (kNumStages, BLOCK_M, 1 or 4) fp32
  float* smem_sb = reinterpret_cast<float*>(smem + Layout::kOffsetSb);       // (kNumStages, 2) fp32
  uint64_t* full_barriers = reinterpret_cast<uint64_t*>(smem + Layout::kOffsetBarriers);  // (kNumStages)
  uint64_t* empty_barriers = full_barriers + kNumStages;                                  // (kNumStages)
  uint64_t* exchange_full = empty_barriers + kNumStages;   // split-K: partial sums arrived (used in CTA 0)
  uint64_t* exchange_empty = exchange_full + 1;            // split-K: CTA 0 consumed them (used in CTA 1)
  float* smem_exchange = reinterpret_cast<float*>(smem + Layout::kOffsetExchange);  // split-K: (BLOCK_M, BLOCK_N) fp32
  constexpr uint32_t kSaFloatsPerStage = Layout::kSaBytesPerStage / 4;

  if constexpr (FG_EXPERIMENT_EMPTY) return;
  // FG_EXPERIMENT 256: times (ns) at points of the CTA's first tile, printed at the end. Slots: 0 entry, 1 setup
  // done, 2 first stage full (math), 3 first tile's K loop done, 4 its epilogue issued, 5 math done (stores
  // complete), 6 first A load issued, 7 first B load issued, 8 last A load issued, 9 exit, 10 A's issuer in its
  // role, 11 it has its first tile, 12 the scale warp's first arrive, 13 math thread 0 in its role, 14 split-K: the
  // first partial sums sent (CTA 1) or received (CTA 0), 15 CTA 0 released the exchange buffer, 16 A's issuer read
  // a kernel parameter no earlier code reads, 17 math thread 0 has its first tile; B's issuer: 18 in its role, 19 it
  // read a kernel parameter, 20 it has its first tile, 21 its first empty-barrier wait returned, 22 its first
  // arrive.expect_tx returned, 23 it is about to wait for its first empty stage. ptxas may read a point's timer ahead of
  // independent work that precedes it in the source (slot 20's came before the scheduler's arithmetic, session 28).
  // Slots 24-31 are SM cycles (clock64) over the CTA's whole life, not times: A's issuer waiting for empty stages /
  // in its role, B's issuer the same, the scale warp's lane 0 the same, math thread 0 waiting for full stages / in
  // its role.
  constexpr uint32_t kTraceSlots = 32;
  __shared__ uint64_t trace[FG_EXPERIMENT_TRACE ? kTraceSlots : 1];
  auto trace_at = [&](uint32_t slot) {
    if constexpr (FG_EXPERIMENT_TRACE) trace[slot] = ptx::global_timer();
  };
  auto trace_once = [&](uint32_t slot) {
    if constexpr (FG_EXPERIMENT_TRACE) {
      if (trace[slot] == 0) trace[slot] = ptx::global_timer();
    }
  };
  // A barrier wait whose cycles add up in `sum` (trace builds).
  auto timed_wait = [&](uint64_t* barrier, uint32_t phase, long long& sum) {
    if constexpr (FG_EXPERIMENT_TRACE) {
      const long long c0 = clock64();
      ptx::mbarrier_wait(barrier, phase);
      sum += clock64() - c0;
    } else {
      (void)sum;
      ptx::mbarrier_wait(barrier, phase);
    }
  };
  [[maybe_unused]] auto trace_cycles = [&](uint32_t slot, long long wait, long long life_start) {
    if constexpr (FG_EXPERIMENT_TRACE) {
      trace[slot] = uint64_t(wait);
      trace[slot + 1] = uint64_t(clock64() - life_start);
    }
  };
  // Waits for a loaded value here (a trap on a value no caller passes: an empty asm statement would let ptxas move or
  // drop the load), so that the next time point includes the load.
  [[maybe_unused]] auto trace_consume = [](int32_t v) {
    asm volatile("{\n.reg .pred p;\nsetp.eq.s32 p, %0, -2147483647;\n@p trap;\n}" ::"r"(v));
  };
  // Thread 0's clock64 at entry: with %globaltimer at exit, the SM clock's average over the CTA's life (mhz=).
  [[maybe_unused]] long long trace_clock0 = 0;
  if constexpr (FG_EXPERIMENT_TRACE) {
    if (threadIdx.x < kTraceSlots) trace[threadIdx.x] = 0;
    if (threadIdx.x == 0) {
      trace_at(0);
      trace_clock0 = clock64();
    }
  }

  const uint32_t warp_idx = __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
  const uint32_t lane_idx = ptx::lane_id();
  const uint32_t cta_rank = kClusterSize > 1 ? ptx::cluster_cta_rank() : 0;

  // ---- Barrier init + fence + cluster sync ----------------------------------------------------------
  if (threadIdx.x == kNumMathThreads) {
    ptx::tma_prefetch_descriptor(&args.tma_a);
    if constexpr (kAHalfBox) ptx::tma_prefetch_descriptor(&args.tma_a_half);
    ptx::tma_prefetch_descriptor(&args.tma_b);
    if constexpr (!kSaGather) ptx::tma_prefetch_descriptor(&args.tma_sa);
    ptx::tma_prefetch_descriptor(&args.tma_d);
    for (uint32_t s = 0; s < kNumStages; ++s) {
      ptx::mbarrier_init(&full_barriers[s], kFullArrivals);
      ptx::mbarrier_init(&empty_barriers[s], kEmptyArrivals);
    }
    if constexpr (kSplitK > 1) {
      ptx::mbarrier_init(exchange_full, 1);  // CTA 0's expect_tx; CTA 1's st.async bytes complete it
      ptx::mbarrier_init(exchange_empty, 1);  // CTA 0's thread 0, once all its math threads read the sums
    }
    ptx::fence_mbarrier_init();
  }
  // Every thread waits for the peer here, split-K included. (Split-K's producer could start loading before: nothing
  // crosses the cluster until the partial sums. Waiting only in the math threads and at the producer's end ran
  // 0.4-0.5 us faster on an H100, but compute-sanitizer's racecheck then never finished: docs/performance-log.md,
  // session 11.)
  if constexpr (kClusterSize > 1) {
    ptx::cluster_arrive();
    ptx::cluster_wait();
  } else {
    __syncthreads();
  }
  // Programmatic dependent launch (a launch with it: finegemm::set_pdl): the setup above may overlap the previous
  // kernel on the stream; every thread waits for that kernel's results before its first global-memory access (the
  // scheduler's m_indices / masked_m reads, TMA loads and stores, SA gathers). The next kernel may be launched from
  // now on: its CTAs find SMs only as this persistent grid's CTAs exit, and wait in turn for its results.
  ptx::launch_dependents();
  ptx::grid_dependency_wait();
  if (threadIdx.x == 0) trace_at(1);

  // Split-K: the two CTAs of a cluster walk the cluster's tiles; CTA r takes K blocks [r, r + 1) * kKBlocksPerCta.
  Scheduler scheduler(args.num_rows, args.num_groups, args.grouped_layout, blockIdx.x / kSplitK, gridDim.x / kSplitK);
  const uint32_t kb_begin = kSplitK > 1 ? cta_rank * kKBlocksPerCta : 0;
  if constexpr (kTailSplit) scheduler.set_tail(args.tail_first_tile, args.tail_pieces, int32_t(kNumKBlocks));
  Tile tile;
  // Whole warps (the scale warp, the math warps) of 64- and 128-row kernels walk the candidates and skip those without
  // work in their own loop (TileScheduler::next_candidate): with the skip loop inside next(), ptxas gave the grouped
  // 128-row kernels a K loop of 170 instead of 156 instructions (2.5% slower at K=2048). The 256-row kernels keep
  // next(): there the candidate walk cost 2 instructions per K block (1% slower). The TMA issuers use next().
  bool has_work = true;
  auto next_for_warp = [&](Tile& t) -> bool {
    if constexpr (BLOCK_M <= 128) return scheduler.next_candidate(t, has_work);
    return scheduler.next(t);
  };
  // The tile's K blocks this CTA computes: [kb_first(), kb_first() + kb_count()) (compile-time constants unless split).
  auto kb_first = [&]() -> uint32_t {
    if constexpr (kTailSplit) return uint32_t(tile.k_begin);
    return kb_begin;
  };
  auto kb_count = [&]() -> uint32_t {
    if constexpr (kTailSplit) return uint32_t(tile.k_end - tile.k_begin);
    return kKBlocksPerCta;
  };

  // ---- Register reconfiguration, then producer / math --------------------------------------------------
  if (threadIdx.x >= kNumMathThreads) {
    ptx::setmaxnreg_dec<kProducerRegisters>();
    if (threadIdx.x == kNumMathThreads) trace_at(10);
    const uint32_t producer_warp = warp_idx - kNumMathWarps;
    PipelineState<kNumStages> pipe;

    // A wide tile's second B tile (`second`) goes to the A stage's second half.
    auto load_b = [&](const Tile& t, uint32_t stage, uint32_t kb, bool second = false) {
      uint64_t* full = &full_barriers[stage];
      const int32_t b_row = t.group * int32_t(N) + (t.n_block + int32_t(second)) * int32_t(BLOCK_N);
      const int32_t k_idx = int32_t(kb * kBlockK);
      uint8_t* b_dst = second ? smem_a + stage * Layout::kABytesPerStage + kWideBOffset
                              : smem_b + stage * Layout::kBBytesPerStage;
      // B read by few tiles is loaded evict-first (args.b_evict_first, decided on the host): its lines then
      // replace each other rather than what else the L2 holds (A, which every tile reads; other kernels' lines,
      // written back first when dirty). Otherwise the plain load: a hinted one with an evict-normal policy
      // measured slower.
      if constexpr (kBSplit == 2) {
        constexpr uint32_t kRows = BLOCK_N / 2;
        if (args.b_evict_first)
          ptx::tma_load_2d_multicast_hinted(&args.tma_b, full, b_dst + cta_rank * kRows * kBlockK, k_idx,
                                            b_row + int32_t(cta_rank * kRows), 0b11, ptx::l2_policy_evict_first());
        else
          ptx::tma_load_2d_multicast(&args.tma_b, full, b_dst + cta_rank * kRows * kBlockK, k_idx,
                                     b_row + int32_t(cta_rank * kRows), 0b11);
      } else {
        if (args.b_evict_first)
          ptx::tma_load_2d_hinted(&args.tma_b, full, b_dst, k_idx, b_row, ptx::l2_policy_evict_first());
        else
          ptx::tma_load_2d(&args.tma_b, full, b_dst, k_idx, b_row);
      }
    };

    [[maybe_unused]] long long wait_cycles = 0;
    [[maybe_unused]] const long long life_start = FG_EXPERIMENT_TRACE ? clock64() : 0;
    // FG_EXPERIMENT 2048: the role's stages, cycles waiting for empty stages, issuing, and in the role.
    struct ProducerClocks {
      uint32_t stages = 0, wait = 0, issue = 0, start = 0, mark = 0;
      FG_DEVICE void begin_wait() {
        if constexpr (FG_EXPERIMENT_LOOP_CLOCKS) mark = ptx::clock32();
      }
      FG_DEVICE void end_wait() {
        if constexpr (FG_EXPERIMENT_LOOP_CLOCKS) {
          const uint32_t now = ptx::clock32();
          wait += now - mark;
          mark = now;
        }
      }
      FG_DEVICE void end_issue() {
        if constexpr (FG_EXPERIMENT_LOOP_CLOCKS) {
          issue += ptx::clock32() - mark;
          ++stages;
        }
      }
      FG_DEVICE void publish(uint32_t* words) const {
        if constexpr (FG_EXPERIMENT_LOOP_CLOCKS) {
          const uint32_t values[4] = {stages, wait, issue, ptx::clock32() - start};
#pragma unroll
          for (uint32_t i = 0; i < 4; ++i) ptx::red_add_global(words + i, values[i]);
        }
      }
    } pclocks;
    if constexpr (FG_EXPERIMENT_LOOP_CLOCKS) pclocks.start = ptx::clock32();
    [[maybe_unused]] uint32_t issued = 0;  // stages this issuer has filled (FG_EXPERIMENT 8192 and 262144)
    if (kRoundRobin && producer_warp != 1) {
      // FG_EXPERIMENT 1048576: issuer r (warps 0, 2, 3) takes the stages r, r + 3, ... of the CTA's sequence.
      if (lane_idx == 0) {
        const uint32_t r = producer_warp == 0 ? 0 : producer_warp - 1;
        uint32_t seq = 0;
        const uint32_t a_bytes = kABytes - Layout::kABytesPerStage + args.a_box_rows * kBlockK;
        while (scheduler.next(tile)) {
#pragma unroll 1
          for (uint32_t kb = kb_first(); kb < kb_first() + kb_count(); ++kb) {
            if (seq++ % 3 == r) {
              ptx::mbarrier_wait(&empty_barriers[pipe.stage], pipe.phase ^ 1);
              uint64_t* full = &full_barriers[pipe.stage];
              ptx::mbarrier_arrive_expect_tx(full, a_bytes + kBBytes);
              const int32_t k_idx = int32_t(kb * kBlockK);
              ptx::tma_load_2d(&args.tma_a, full, smem_a + pipe.stage * Layout::kABytesPerStage, k_idx, tile.row_base);
              ptx::tma_load_2d(&args.tma_sa, full, smem_sa + pipe.stage * kSaFloatsPerStage, tile.row_base,
                               int32_t(kb));
              load_b(tile, pipe.stage, kb);
            }
            pipe.advance();
          }
        }
      }
    } else if (producer_warp == 0 && lane_idx == 0) {
      // TMA issuer of A and SA (and of B under FG_EXPERIMENT 64).
      if constexpr (FG_EXPERIMENT_TRACE) {
        trace_consume(args.num_a_rows);
        trace_at(16);
      }
      while (scheduler.next(tile)) {
        trace_once(11);
        const int32_t sa_row_base = (kGemmKind == GemmKind::kGroupedMasked)
                                        ? tile.row_base - tile.group * args.num_rows
                                        : tile.row_base;
        const int32_t sa_kb_base = (kGemmKind == GemmKind::kGroupedMasked) ? tile.group * int32_t(kNumKBlocks) : 0;
        // A with fewer rows than BLOCK_M comes in a box of only its rows (rounded up to 8, set on the host): a box
        // reaching many rows past the tensor's end measured up to 28% slower for the whole GEMM (H100,
        // docs/performance-log.md, session 8). The smem rows left unwritten feed only output rows that are not stored.
        // Grouped 256-row tiles of at most 128 rows (kAHalfBox) load only those through a box of 128 rows.
        const bool a_half = kAHalfBox && tile.compute_rows <= int32_t(BLOCK_M / 2);
        const TmaDescriptor* tma_a = a_half ? &args.tma_a_half : &args.tma_a;
        const uint32_t a_box_rows = a_half ? min_of(args.a_box_rows, BLOCK_M / 2) : args.a_box_rows;
        const uint32_t a_bytes = kASplit == 2 ? kABytes : kABytes - Layout::kABytesPerStage + a_box_rows * kBlockK;
#pragma unroll 1  // unrolled, the loop spilled out of the producer's 40 registers
        for (uint32_t kb = kb_first(); kb < kb_first() + kb_count(); ++kb) {
          pclocks.begin_wait();
          timed_wait(&empty_barriers[pipe.stage], pipe.phase ^ 1, wait_cycles);
          pclocks.end_wait();
          uint64_t* full = &full_barriers[pipe.stage];
          if constexpr (FG_EXPERIMENT_NO_LOADS) {
            ptx::mbarrier_arrive(full);
            pipe.advance();
            continue;
          }
          const uint32_t b_bytes = kWideTiles && tile.wide ? 2 * kBBytes : kBBytes;
          // Measurement switches 4096 / 8192: SA, or A after the ring's first pass, neither loaded nor expected.
          const bool load_a = !FG_EXPERIMENT_A_FIRST_PASS || issued++ < kNumStages;
          constexpr uint32_t kSaBytes = kABytes - Layout::kABytesPerStage;
          const uint32_t expected = a_bytes - (FG_EXPERIMENT_NO_SA_LOADS || kSaIssuer ? kSaBytes : 0) -
                                    (load_a ? 0 : a_bytes - kSaBytes);
          ptx::mbarrier_arrive_expect_tx(full, kSeparateBIssuer ? expected : expected + b_bytes);
          const int32_t k_idx = int32_t(kb * kBlockK);
          uint8_t* a_dst = smem_a + pipe.stage * Layout::kABytesPerStage;
          float* sa_dst = smem_sa + pipe.stage * kSaFloatsPerStage;
          if constexpr (kASplit == 2) {
            constexpr uint32_t kRows = BLOCK_M / 2;
            ptx::tma_load_2d_multicast(&args.tma_a, full, a_dst + cta_rank * kRows * kBlockK, k_idx,
                                       tile.row_base + int32_t(cta_rank * kRows), 0b11);
            if constexpr (kSaMode == kSaMnMajor)
              ptx::tma_load_2d_multicast(&args.tma_sa, full, sa_dst + cta_rank * kRows,
                                         sa_row_base + int32_t(cta_rank * kRows), sa_kb_base + int32_t(kb), 0b11);
            if constexpr (kSaMode == kSaKMajorTma)
              ptx::tma_load_2d_multicast(&args.tma_sa, full, sa_dst + cta_rank * kRows * kSaRowFloats,
                                         int32_t(kb & ~3u), tile.row_base + int32_t(cta_rank * kRows), 0b11);
          } else {
            if (load_a) ptx::tma_load_2d(tma_a, full, a_dst, k_idx, tile.row_base);
            if constexpr (kSaMode == kSaMnMajor && !FG_EXPERIMENT_NO_SA_LOADS && !kSaIssuer)
              ptx::tma_load_2d(&args.tma_sa, full, sa_dst, sa_row_base, sa_kb_base + int32_t(kb));
            // K-major: rows of the [rows, KB] view (a masked GEMM's group is in row_base), the 4 K blocks from
            // kb & ~3 (a box must start on a 16-byte boundary of the row: an unaligned start traps); the math reads
            // column kb % 4.
            if constexpr (kSaMode == kSaKMajorTma)
              ptx::tma_load_2d(&args.tma_sa, full, sa_dst, int32_t(kb & ~3u), tile.row_base);
          }
          if constexpr (!kSeparateBIssuer) {
            load_b(tile, pipe.stage, kb);
            if (kWideTiles && tile.wide) load_b(tile, pipe.stage, kb, true);
          }
          trace_once(6);
          trace_at(8);
          pclocks.end_issue();
          pipe.advance();
        }
      }
      trace_cycles(24, wait_cycles, life_start);
      pclocks.publish(args.error_flags + kProducerClockWord);
    } else if (kSeparateBIssuer && producer_warp == 2 && lane_idx == 0) {
      // TMA issuer of B.
      if constexpr (FG_EXPERIMENT_TRACE) {
        trace_at(18);
        trace_consume(args.num_groups);
        trace_at(19);
      }
      if (kBPairs && args.b_pairs != 0) {
        // Two stages per empty wait, their loads back to back (each row's two 128-byte pieces of K close together in
        // time); a tile's odd last K block alone. The math releases stages in order, so the second stage's release
        // implies the first's (across the ring's wrap too). Not instrumented for the trace and loop-clock switches:
        // measure those with FINEGEMM_FORCE_CONFIG=bpairs=0.
        while (scheduler.next(tile)) {
          const uint32_t kb_end = kb_first() + kb_count();
#pragma unroll 1
          for (uint32_t kb = kb_first(); kb < kb_end; kb += 2) {
            const bool pair = kb + 1 < kb_end;
            PipelineState<kNumStages> second = pipe;
            if (pair) second.advance();
            ptx::mbarrier_wait(&empty_barriers[second.stage], second.phase ^ 1);
            ptx::mbarrier_arrive_expect_tx(&full_barriers[pipe.stage], kBBytes);
            load_b(tile, pipe.stage, kb);
            if (pair) {
              ptx::mbarrier_arrive_expect_tx(&full_barriers[second.stage], kBBytes);
              load_b(tile, second.stage, kb + 1);
            }
            pipe = second;
            pipe.advance();
          }
        }
      } else {
        while (scheduler.next(tile)) {
          trace_once(20);
          const bool wide = kWideTiles && tile.wide;
#pragma unroll 1
          for (uint32_t kb = kb_first(); kb < kb_first() + kb_count(); ++kb) {
            trace_once(23);
            pclocks.begin_wait();
            timed_wait(&empty_barriers[pipe.stage], pipe.phase ^ 1, wait_cycles);
            pclocks.end_wait();
            trace_once(21);
            const bool load_b_now = !FG_EXPERIMENT_B_FIRST_PASS || issued++ < kNumStages;  // switch 262144
            ptx::mbarrier_arrive_expect_tx(&full_barriers[pipe.stage],
                                           !load_b_now ? 0u : wide ? 2 * kBBytes : kBBytes);
            trace_once(22);
            if (load_b_now) {
              load_b(tile, pipe.stage, kb);
              if (wide) load_b(tile, pipe.stage, kb, true);
            }
            trace_once(7);
            pclocks.end_issue();
            pipe.advance();
          }
        }
      }
      trace_cycles(26, wait_cycles, life_start);
      pclocks.publish(args.error_flags + kProducerClockWord + 4);
    } else if (kSaIssuer && producer_warp == 3 && lane_idx == 0) {
      // FG_EXPERIMENT 524288: SA's loads from a thread of their own.
      constexpr uint32_t kSaBytes = kABytes - Layout::kABytesPerStage;
      while (scheduler.next(tile)) {
        const int32_t sa_row_base = (kGemmKind == GemmKind::kGroupedMasked)
                                        ? tile.row_base - tile.group * args.num_rows
                                        : tile.row_base;
        const int32_t sa_kb_base = (kGemmKind == GemmKind::kGroupedMasked) ? tile.group * int32_t(kNumKBlocks) : 0;
#pragma unroll 1
        for (uint32_t kb = kb_first(); kb < kb_first() + kb_count(); ++kb) {
          ptx::mbarrier_wait(&empty_barriers[pipe.stage], pipe.phase ^ 1);
          uint64_t* full = &full_barriers[pipe.stage];
          ptx::mbarrier_arrive_expect_tx(full, kSaBytes);
          ptx::tma_load_2d(&args.tma_sa, full, smem_sa + pipe.stage * kSaFloatsPerStage, sa_row_base,
                           sa_kb_base + int32_t(kb));
          pipe.advance();
        }
      }
    } else if (producer_warp == 1 && !FG_EXPERIMENT_NO_SCALE_WARP) {
      // Scale warp: per stage, the two SB values of the tile's (one or two) 128-column blocks and, when SA is
      // K-major, the stage's column of row scales (gathered with ordinary loads). Every lane arrives.
      while (next_for_warp(tile)) {
        if (!has_work) continue;
        const uint32_t n_start = tile.n_block * BLOCK_N;
        const uint32_t sb_block = n_start / 128;
        // The second SB block: a tile straddling two, or a wide tile's second n-block.
        const bool has_second = (!kUniformScaleB && sb_block + 1 < kNumSbBlocks && n_start % 128 + BLOCK_N > 128) ||
                                (kWideTiles && tile.wide);
        const float* sb_src = args.sb + (uint64_t(tile.group) * kNumSbBlocks + sb_block) * kNumKBlocks;
        const uint32_t kb_end = kb_first() + kb_count();
        for (uint32_t kb_base = kb_first(); kb_base < kb_end; kb_base += 32) {
          // One load per lane covers the next 32 K blocks, so the global latency is paid once per 32 stages.
          const uint32_t my_kb = kb_base + lane_idx;
          const bool mine = my_kb < kb_end;
          const float sb_first = mine ? ptx::ld_global_f32(sb_src + my_kb) : 0.0f;
          const float sb_second = has_second && mine ? ptx::ld_global_f32(sb_src + kNumKBlocks + my_kb) : 0.0f;
          const uint32_t num_kb = min_of(32u, kb_end - kb_base);
          for (uint32_t i = 0; i < num_kb; ++i) {
            const float s0 = __shfl_sync(0xffffffff, sb_first, i);
            const float s1 = __shfl_sync(0xffffffff, sb_second, i);
            pclocks.begin_wait();
            timed_wait(&empty_barriers[pipe.stage], pipe.phase ^ 1, wait_cycles);
            pclocks.end_wait();
            if (lane_idx == 0) {
              ptx::st_shared_f32(smem_sb + pipe.stage * 2, s0);
              ptx::st_shared_f32(smem_sb + pipe.stage * 2 + 1, s1);
            }
            if constexpr (kSaGather) {
              // Copied asynchronously, completion tracked by the full barrier: the warp goes on to the next stage
              // without waiting for these scattered loads (one round trip per stage measured up to 2x slower).
              const uint32_t kb = kb_base + i;
              float* sa_dst = smem_sa + pipe.stage * kSaFloatsPerStage;
              for (uint32_t r = lane_idx; r < BLOCK_M; r += 32) {  // unrolled, ptxas spilled at BLOCK_M=256
                const int32_t row = tile.row_base + int32_t(r);
                const bool valid = row < args.num_a_rows;
                ptx::cp_async_f32(sa_dst + r, args.sa_k_major + (valid ? row * args.ld_sa + kb : 0), valid);
              }
              ptx::mbarrier_arrive_on_cp_async_noinc(&full_barriers[pipe.stage]);
            }
            if (!kScaleOneArrive || lane_idx == 0) ptx::mbarrier_arrive(&full_barriers[pipe.stage]);
            if (lane_idx == 0) trace_once(12);
            pclocks.end_issue();
            pipe.advance();
          }
        }
      }
      if (lane_idx == 0) {
        trace_cycles(28, wait_cycles, life_start);
        pclocks.publish(args.error_flags + kProducerClockWord + 8);
      }
    }
  } else {
    ptx::setmaxnreg_inc<kMathRegisters>();
    if (threadIdx.x == 0) trace_at(13);
    [[maybe_unused]] long long full_wait_cycles = 0;
    [[maybe_unused]] const long long math_life_start = FG_EXPERIMENT_TRACE ? clock64() : 0;
    const uint32_t math_wg = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
    const uint32_t wg_thread = threadIdx.x % 128;
    const uint32_t warp_in_wg = warp_idx % 4;
    // Tile rows r0 and r0 + 8 of wave 0; wave w adds w * kWaveRows.
    const uint32_t r0 = math_wg * kWarpgroupRows + warp_in_wg * 16 + lane_idx / 4;
    const uint32_t wg_barrier = static_cast<uint32_t>(NamedBarrier::kMathWarpgroup0) + math_wg;
    PipelineState<kNumStages> pipe;
    // The main loop is short on purpose: on an H100 every math-warp instruction costs tensor-pipe time (session 5 in
    // docs/performance.md), so stage and K-step offsets are folded into the 32-bit low words of the descriptors, and
    // the scale of each column granule is a compile-time choice (see k_loop below).
    const uint64_t desc_a0 = ptx::make_smem_desc_k_major_sw128(smem_a + math_wg * kWarpgroupRows * kBlockK);
    const uint64_t desc_b0 = ptx::make_smem_desc_k_major_sw128(smem_b);
    // Pinned (ptx::opaque) so that ptxas keeps them in registers instead of recomputing them in every K block.
    const uint32_t desc_hi = ptx::opaque(static_cast<uint32_t>(desc_a0 >> 32));  // stride, swizzle: same for A, B
    const uint32_t desc_a_lo = ptx::opaque(static_cast<uint32_t>(desc_a0));
    const uint32_t desc_b_lo = ptx::opaque(static_cast<uint32_t>(desc_b0));
    // Wide tiles: the second B tile's descriptor (in the A stage; not offset by the warpgroup's rows).
    uint32_t desc_b2_lo = 0;
    if constexpr (kWideTiles)
      desc_b2_lo = ptx::opaque(static_cast<uint32_t>(ptx::make_smem_desc_k_major_sw128(smem_a + kWideBOffset)));
    const float* sa_rows = smem_sa + r0 * kSaRowFloats;
    // Two ways to keep the tensor pipe busy while a warpgroup promotes (docs/performance-log.md, session 4):
    // - kKDepth > 1: a warpgroup issues kKDepth K blocks into separate accumulators, then promotes each as it
    //   completes while the later ones run;
    // - kKDepth == 1 with two math warpgroups: they take turns issuing their K block's wgmmas (a named-barrier token
    //   passed right after each issue), so the tensor pipe runs one warpgroup's batch while the other promotes.
    // FG_K_DEPTH (measurement define): another number of K blocks in flight where the default keeps several.
    constexpr uint32_t kKDepth = FG_EXPERIMENT_SINGLE_BUFFER                             ? 1
                                 : FG_K_DEPTH > 0 && gemm_k_depth(BLOCK_M, BLOCK_N) > 1 ? FG_K_DEPTH
                                                                                       : gemm_k_depth(BLOCK_M, BLOCK_N);
    constexpr bool kPingPong = kNumMathWarpgroups == 2 && kKDepth == 1 && !FG_EXPERIMENT_NO_PINGPONG;
    // With turns, a K block's wgmmas as kBatchParts commit groups of kPartN columns (gemm_batch_parts).
    constexpr uint32_t kBatchParts = !kPingPong || FG_EXPERIMENT_WHOLE_BATCHES ? 1
                                     : FG_EXPERIMENT_HALF_BATCHES      ? (BLOCK_N % 16 == 0 ? 2 : 1)
                                                                       : gemm_batch_parts(BLOCK_N, kKBlocksPerCta);
    constexpr uint32_t kPartN = BLOCK_N / kBatchParts;
    // With one accumulator (kKDepth == 1), a tile's first K block sets the running accumulators instead of a zeroing
    // pass before it. Not with a single K block (K <= 128): set directly from the in-flight accumulator, ptxas may
    // give them its registers and then waits for the wgmmas.
    constexpr bool kAssignFirst = kKDepth == 1 && kKBlocksPerCta > 1;
    const uint32_t my_turn = static_cast<uint32_t>(NamedBarrier::kMathTurn0) + math_wg;
    const uint32_t other_turn = static_cast<uint32_t>(NamedBarrier::kMathTurn0) + (1 - math_wg);
    // Warpgroup 0 goes first: warpgroup 1 hands it the first turn.
    if constexpr (kPingPong) {
      if (math_wg == 1) ptx::named_barrier_arrive(other_turn, 256);
    }

    float accum[kKDepth][BLOCK_N / 2];
    float final_accum[kNumWaves][BLOCK_N / 2];
    // A thread's sums as float4 chunks, for the exchanges of partial sums (split-K, tail split): chunk c holds
    // elements c * 4 .. c * 4 + 3 of its waves in order; exchange buffers put the threads' chunks side by side.
    constexpr uint32_t kChunksPerWave = BLOCK_N / 8;
    constexpr uint32_t kNumAccumChunks = kNumWaves * kChunksPerWave;
    auto accum_chunk = [&](uint32_t c) -> float* {
      return &final_accum[c / kChunksPerWave][(c % kChunksPerWave) * 4];
    };
    bool next_full = false;  // the next stage's full barrier was seen complete during the last promotion
    uint32_t exchange_phase = 0;  // split-K: parity of the partial-sum exchange's current phase
    // FG_EXPERIMENT 2048: cycles summed over the thread's K blocks, per part of the loop (mark() is 0 otherwise).
    struct LoopClocks {
      uint32_t batches = 0, full = 0, turn = 0, issue = 0, wait = 0, promote = 0, epilogue = 0;
      static FG_DEVICE uint32_t mark() { return FG_EXPERIMENT_LOOP_CLOCKS ? ptx::clock32() : 0u; }
    } clocks;
    // The warpgroup's life (from here to the write-out below), in SM cycles and in ns: their ratio is its clock.
    const uint32_t life_cycles_start = FG_EXPERIMENT_LIFE_CLOCK ? ptx::clock32() : 0u;
    const uint64_t life_ns_start = FG_EXPERIMENT_LIFE_CLOCK ? ptx::global_timer() : 0;
    struct Scales {
      float r0_first, r1_first, r0_second, r1_second;  // SA of rows r0 / r0 + 8 times SB of the first / second block
    };

    // The four m64nNk32 wgmmas of one stage into acc, as one commit group. Wave 1 of a wide tile (`wide`, a
    // Constant) multiplies wave 0's rows by the second B tile.
    auto issue_batch = [&](float (&acc)[BLOCK_N / 2], uint32_t stage, uint32_t wave, auto wide) {
      constexpr bool kWide = decltype(wide)::value != 0;
      const uint32_t a_lo =
          desc_a_lo + stage * (Layout::kABytesPerStage >> 4) + (kWide ? 0 : wave * ((kWaveRows * kBlockK) >> 4));
      const uint32_t b_lo = kWide && wave == 1 ? desc_b2_lo + stage * (Layout::kABytesPerStage >> 4)
                                               : desc_b_lo + stage * (Layout::kBBytesPerStage >> 4);
#pragma unroll
      for (uint32_t i = 0; i < BLOCK_N / 2; ++i) ptx::wgmma_fence_operand(acc[i]);
      ptx::wgmma_fence();
#pragma unroll
      for (uint32_t part = 0; part < kBatchParts; ++part) {
        // Part `part` covers columns part * kPartN.. of the tile: B rows at part * kPartN, accumulators from
        // part * kPartN / 2 (the m64nNk32 layout puts columns 8c..8c+7 in registers 4c..4c+3).
        auto& part_acc = *reinterpret_cast<float(*)[kPartN / 2]>(&acc[part * (kPartN / 2)]);
        const uint32_t part_b_lo = b_lo + part * ((kPartN * kBlockK) >> 4);
        // The K steps advance whole 64-bit descriptors: ptxas then gives each wgmma its own uniform registers instead
        // of rebuilding one set between wgmmas (which made each wait for the previous one to read them).
        const uint64_t desc_a = ptx::smem_desc_from_words(a_lo, desc_hi);
        const uint64_t desc_b = ptx::smem_desc_from_words(part_b_lo, desc_hi);
#pragma unroll
        for (uint32_t k = 0; k < kBlockK / 32; ++k)
          ptx::wgmma_m64k32_e4m3<kPartN>(desc_a + k * (32 >> 4), desc_b + k * (32 >> 4), part_acc, k > 0);
        ptx::wgmma_commit_group();
      }
    };
    // `kb`: the stage's K block (K-major SA by TMA: its column in the stage's box of 4; unused otherwise).
    auto load_scales = [&](uint32_t stage, uint32_t wave, auto wide, uint32_t kb) {
      constexpr bool kWide = decltype(wide)::value != 0;
      const uint32_t column = kSaMode == kSaKMajorTma ? kb % 4 : 0;
      const float* sa = sa_rows + stage * kSaFloatsPerStage + (kWide ? 0 : wave * kWaveRows * kSaRowFloats) + column;
      const float sa0 = ptx::ld_shared_f32(sa);
      const float sa1 = ptx::ld_shared_f32(sa + 8 * kSaRowFloats);
      float sb0, sb1;
      if constexpr (kEveryThreadReadsSb) {
        const float2 sb = ptx::ld_shared_v2_f32(smem_sb + stage * 2);
        // A wide tile's wave 1: the second n-block's SB (one SB block per 128-column n-block).
        sb0 = kWide && wave == 1 ? sb.y : sb.x;
        sb1 = kUniformScaleB ? sb0 : sb.y;
      } else {
        float2 sb = make_float2(0.0f, 0.0f);
        if (lane_idx == 0) sb = ptx::ld_shared_v2_f32(smem_sb + stage * 2);
        // A wide tile's wave 1: the second n-block's SB (one SB block per 128-column n-block).
        sb0 = __shfl_sync(0xffffffff, kWide && wave == 1 ? sb.y : sb.x, 0);
        sb1 = kUniformScaleB ? sb0 : __shfl_sync(0xffffffff, sb.y, 0);
      }
      return Scales{sa0 * sb0, sa1 * sb0, sa0 * sb1, sa1 * sb1};
    };
    // Once the stage's wgmmas completed and its scales were read (kEmptyArrivals says who arrives).
    auto release = [&](uint32_t stage) {
      if (kSaGather || kEveryThreadReadsSb || lane_idx == 0) ptx::mbarrier_arrive(&empty_barriers[stage]);
      if constexpr (kMulticast) {
        __syncwarp();
        if (lane_idx == 1) ptx::mbarrier_arrive_cluster(&empty_barriers[stage], cta_rank ^ 1);
      }
    };
    // The fp32 block result, scaled by SA * SB, into the running accumulator (the tile's first K block sets it, when
    // `assign` is Constant<1>). Granules g < first_granules take the first SB block's scale; first_granules is a
    // compile-time constant wherever the K loop was instantiated per split, so the choice then costs no instruction.
    // `part` (a Constant, with kBatchParts > 1): only that part's columns.
    auto promote = [&](float (&acc)[BLOCK_N / 2], const Scales& sc, const uint32_t first_granules,
                       float (&out)[BLOCK_N / 2], auto assign, auto part) {
      // Register quads j (columns 8j..8j+7) of the part: j / kPartQuads == part.
      constexpr uint32_t kPartQuads = kPartN / 8, kFirstQuad = decltype(part)::value * kPartQuads;
#pragma unroll
      for (uint32_t i = kFirstQuad * 4; i < (kFirstQuad + kPartQuads) * 4; ++i) ptx::wgmma_fence_operand(acc[i]);
#pragma unroll
      for (uint32_t g = 0; g < kNumScaleGranules; ++g) {
        const bool first = kUniformScaleB || g < first_granules;
        const float scale_r0 = first ? sc.r0_first : sc.r0_second;
        const float scale_r1 = first ? sc.r1_first : sc.r1_second;
#pragma unroll
        for (uint32_t j = g * kScaleGranule / 8; j < (g + 1) * kScaleGranule / 8; ++j) {
          if (j / kPartQuads != decltype(part)::value) continue;
#pragma unroll
          for (uint32_t c = 0; c < 4; ++c) {
            const float scaled = (c < 2 ? scale_r0 : scale_r1) * acc[j * 4 + c];
            out[j * 4 + c] = decltype(assign)::value ? scaled : out[j * 4 + c] + scaled;
          }
        }
      }
    };

    // One tile's K loop; `first` carries first_granules, as a compile-time constant (Constant<V>) or not; `wide`
    // (Constant<0 or 1>) whether the tile is wide; `waves` (Constant<1 or kNumWaves>) how many waves it computes.
    auto k_loop = [&](auto first, auto wide, auto waves) {
      if constexpr (kKDepth > 1) {
        // K blocks in groups of kKDepth (the last group may be shorter), block d of a group into accum[d]: issue
        // all, then wait for each in turn and promote it while the later ones run. Nothing is in flight across the
        // loop's back edge: ptxas serializes every wgmma when a non-wgmma instruction reads an accumulator written
        // in an earlier iteration while a group is pending (warnings C7514/C7517, rejected by the CPU tests).
        PipelineState<kNumStages> ahead = pipe;  // the next block to issue; `pipe` is the next to release
        uint32_t release_kb = kb_first();        // the K block of `pipe`
        // `count` is a constant at both call sites; once inlined, the guards fold and the loops unroll.
        auto run_group = [&](const uint32_t count) {
#pragma unroll
          for (uint32_t d = 0; d < kKDepth; ++d) {
            if (d < count) {
              timed_wait(&full_barriers[ahead.stage], ahead.phase, full_wait_cycles);
              if (threadIdx.x == 0) trace_once(2);
              issue_batch(accum[d], ahead.stage, 0, wide);
              ahead.advance();
            }
          }
#pragma unroll
          for (uint32_t d = 0; d < kKDepth; ++d) {
            if (d < count) {
              const Scales sc = load_scales(pipe.stage, 0, wide, release_kb++);
              ptx::wgmma_wait_group_at_most(count - 1 - d);
              release(pipe.stage);
              pipe.advance();
              if (!FG_EXPERIMENT_NO_PROMOTE || d + 1 == count)
                promote(accum[d], sc, first.value, final_accum[0], Constant<0>(), Constant<0>());
            }
          }
        };
        for (uint32_t group = 0; group < kKBlocksPerCta / kKDepth; ++group) run_group(kKDepth);
        if constexpr (kKBlocksPerCta % kKDepth != 0) run_group(kKBlocksPerCta % kKDepth);
      } else {
        // One batch per wave; with two warpgroups the turns alternate batch by batch. A wave without rows to
        // compute is skipped (by both warpgroups alike, so the turns stay balanced).
        constexpr uint32_t num_waves = decltype(waves)::value;
        auto k_block = [&](auto is_first, const uint32_t kb) {
          const uint32_t c_start = LoopClocks::mark();
          if (!next_full) timed_wait(&full_barriers[pipe.stage], pipe.phase, full_wait_cycles);
          next_full = false;
          if (threadIdx.x == 0) trace_once(2);
          if constexpr (FG_EXPERIMENT_LOOP_CLOCKS) clocks.full += LoopClocks::mark() - c_start;
          if constexpr (FG_EXPERIMENT_NO_MATH) {
            if constexpr (decltype(is_first)::value) {
#pragma unroll
              for (uint32_t w = 0; w < kNumWaves; ++w)
#pragma unroll
                for (uint32_t i = 0; i < BLOCK_N / 2; ++i) final_accum[w][i] = 0.0f;
            }
            release(pipe.stage);
            pipe.advance();
            return;
          }
#pragma unroll
          for (uint32_t w = 0; w < kNumWaves; ++w) {
            if (w >= num_waves) {
              // A skipped wave's running accumulators still get a value (ptxas would otherwise share their registers
              // with the in-flight accumulator and wait for the wgmmas before the epilogue reads them).
              if constexpr (decltype(is_first)::value && kAssignFirst) {
#pragma unroll
                for (uint32_t i = 0; i < BLOCK_N / 2; ++i) final_accum[w][i] = 0.0f;
              }
              break;
            }
            // Kernels whose math threads all read SB, and half batches, read the scales before the turn, so that the
            // promotion is ready to run once the wgmmas complete (read after the issue, their loads sat in the chain
            // from one batch to the next, sessions 23 and 37; with half batches, ptxas scheduled them after the second
            // half's wait).
            constexpr bool kScalesBeforeTurn = kEveryThreadReadsSb || kBatchParts == 2;
            Scales sc;
            if constexpr (kScalesBeforeTurn) sc = load_scales(pipe.stage, w, wide, kb_first() + kb);
            const uint32_t c_turn = LoopClocks::mark();
            if constexpr (kPingPong) ptx::named_barrier_sync(my_turn, 256);
            const uint32_t c_issue = LoopClocks::mark();
            issue_batch(accum[0], pipe.stage, w, wide);
            if constexpr (kPingPong && !FG_EXPERIMENT_TURN_AFTER_WAIT) ptx::named_barrier_arrive(other_turn, 256);
            const uint32_t c_wait = LoopClocks::mark();
            // Otherwise read the stage's scales while the tensor cores work, before releasing the stage.
            if constexpr (!kScalesBeforeTurn) sc = load_scales(pipe.stage, w, wide, kb_first() + kb);
            const bool promotes = !FG_EXPERIMENT_NO_PROMOTE || decltype(is_first)::value || kb + 1 == kb_count();
            using Assign = Constant<decltype(is_first)::value && kAssignFirst>;
            if constexpr (kBatchParts == 2) {
              // The first half's columns while the second half's wgmmas run.
              ptx::wgmma_wait_group<1>();
              if (promotes) promote(accum[0], sc, first.value, final_accum[w], Assign(), Constant<0>());
            }
            ptx::wgmma_wait_group<0>();
            const uint32_t c_done = LoopClocks::mark();
            if constexpr (FG_EXPERIMENT_LOOP_CLOCKS) {
              clocks.turn += c_issue - c_turn;
              clocks.issue += c_wait - c_issue;
              clocks.wait += c_done - c_wait;
              ++clocks.batches;
            }
            if constexpr (kPingPong && FG_EXPERIMENT_TURN_AFTER_WAIT) ptx::named_barrier_arrive(other_turn, 256);
            // After its last wave: release the stage before promotion so TMA refills it meanwhile, and look at the
            // next stage's full barrier, so that the test's latency runs under the promotion instead of in the chain
            // to the next issue (a stage seen full stays full until this warpgroup releases it).
            if (w + 1 == num_waves) {
              release(pipe.stage);
              PipelineState<kNumStages> next = pipe;
              next.advance();
              next_full = ptx::mbarrier_test_wait_parity(&full_barriers[next.stage], next.phase);
            }
            if (promotes) promote(accum[0], sc, first.value, final_accum[w], Assign(), Constant<kBatchParts - 1>());
            if constexpr (FG_EXPERIMENT_LOOP_CLOCKS) clocks.promote += LoopClocks::mark() - c_done;
          }
          pipe.advance();
        };
        k_block(Constant<1>(), 0);
        for (uint32_t kb = 1; kb < kb_count(); ++kb) k_block(Constant<0>(), kb);
      }
    };

    while (next_for_warp(tile)) {
      if (!has_work) continue;
      if (threadIdx.x == 0) trace_once(17);
      // A tile straddling two SB blocks switches scale at column 128 - n_start % 128, a multiple of kScaleGranule.
      const uint32_t first_granules =
          kUniformScaleB ? kNumScaleGranules
                         : min_of((128 - tile.n_block * BLOCK_N % 128) / kScaleGranule, kNumScaleGranules);
      if constexpr (!kAssignFirst) {
#pragma unroll
        for (uint32_t w = 0; w < kNumWaves; ++w)
#pragma unroll
          for (uint32_t i = 0; i < BLOCK_N / 2; ++i) final_accum[w][i] = 0.0f;
      }
      // Up to kMaxScaleVariants granules, one copy of the K loop per split point; beyond, a select per granule.
      // Wide tiles have a copy of their own.
      auto k_loops_of = [&](auto wide, auto waves) {
        if constexpr (kNumScaleGranules <= kMaxScaleVariants) {
          auto k_loop_of = [&](auto first) { k_loop(first, wide, waves); };
          with_constant<1, kNumScaleGranules>(first_granules, k_loop_of);
        } else {
          k_loop(RuntimeValue{first_granules}, wide, waves);
        }
      };
      // A tile with at most kWaveRows rows to compute runs wave 0 only (a wide tile has both). The wave count is a
      // compile-time constant, one copy of the K loop per count: tested at run time, ptxas re-evaluated it in every
      // K block (256x128 K loops of 199-229 instructions against 195; 0.3-3.3% slower, session 38).
      auto k_loops = [&](auto wide) {
        if constexpr (kNumWaves == 1 || kKDepth > 1 || decltype(wide)::value) {
          k_loops_of(wide, Constant<kNumWaves>());
        } else if (tile.compute_rows > int32_t(kWaveRows)) {
          k_loops_of(wide, Constant<kNumWaves>());
        } else {
          k_loops_of(wide, Constant<1>());
        }
      };
      if constexpr (kWideTiles) {
        if (tile.wide) {
          k_loops(Constant<1>());
        } else {
          k_loops(Constant<0>());
        }
      } else {
        k_loops(Constant<0>());
      }
      if (threadIdx.x == 0) trace_once(3);

      bool store_tile = true;  // false for a piece of a cut tile that did not finish last
      if constexpr (kTailSplit) {
        // ---- Tail split: a piece of a cut tile writes its partial sums to its slot (chunk by chunk, threads side by
        // side) and counts itself done. The last piece of the tile to finish adds every piece's sums in piece order,
        // so the result does not depend on which finished last, and stores the tile. No CTA waits for another.
        if (FG_EXPERIMENT_TAIL_NO_EXCHANGE && tile.piece >= 0) {
          store_tile = tile.piece == 0;
        } else if (tile.piece >= 0) {
          constexpr uint64_t kSlotFloats = uint64_t(BLOCK_M) * BLOCK_N;
          constexpr uint32_t kAll = static_cast<uint32_t>(NamedBarrier::kMathAll);
          const uint32_t pieces = uint32_t(args.tail_pieces);
          const uint32_t piece = uint32_t(tile.piece);
          float* slots = args.tail_partials + uint64_t(tile.tail_index) * pieces * kSlotFloats + threadIdx.x * 4;
#pragma unroll
          for (uint32_t c = 0; c < kNumAccumChunks; ++c) {
            const float* v = accum_chunk(c);
            ptx::st_global_v4_f32(slots + piece * kSlotFloats + c * kNumMathThreads * 4, v[0], v[1], v[2], v[3]);
          }
          ptx::fence_acq_rel_gpu();
          ptx::named_barrier_sync(kAll, kNumMathThreads);
          bool last = false;
          if (threadIdx.x == 0) {
            uint32_t* counter = args.tail_counters + tile.tail_index;
            last = ptx::atomic_add_acq_rel_gpu(counter, 1) == pieces - 1;
            if (last) ptx::st_relaxed_gpu_u32(counter, 0);  // zero for the next call (calls on a stream run in order)
          }
          store_tile = __shfl_sync(0xffffffff, uint32_t(ptx::named_barrier_any(kAll, kNumMathThreads, last)), 0) != 0;
          if (store_tile) {
            ptx::fence_acq_rel_gpu();
            // Every piece's sums from the slots, this piece's too (read back rather than kept in registers, which
            // spilled). The piece count is a compile-time constant, so the chunks' loads are independent and go out
            // together.
            auto add_pieces = [&](auto num_pieces) {
              constexpr uint32_t kPieces = decltype(num_pieces)::value;
#pragma unroll
              for (uint32_t c = 0; c < kNumAccumChunks; ++c) {
                float* acc = accum_chunk(c);
                const float* chunk = slots + c * kNumMathThreads * 4;
                float4 sum = ptx::ld_global_cg_v4_f32(chunk);
#pragma unroll
                for (uint32_t j = 1; j < kPieces; ++j) {
                  const float4 v = ptx::ld_global_cg_v4_f32(chunk + j * kSlotFloats);
                  sum.x += v.x;
                  sum.y += v.y;
                  sum.z += v.z;
                  sum.w += v.w;
                }
                acc[0] = sum.x;
                acc[1] = sum.y;
                acc[2] = sum.z;
                acc[3] = sum.w;
              }
            };
            with_constant<2, kMaxTailPieces>(pieces, add_pieces);
          }
        }
      }

      if constexpr (kSplitK > 1) {
        // ---- Split-K: CTA 1 sends its partial sums into CTA 0's shared memory; CTA 0 adds them (its own first, so
        // the result is deterministic) and stores the tile. Element c * 4 + e of a thread's sums sits in float4
        // chunk c of the exchange buffer, threads side by side (consecutive threads write consecutive 16 bytes).
        // CTA 1 sends with st.async: each store counts its bytes on CTA 0's exchange_full barrier, which CTA 0 arms
        // with the total, so no fence or per-thread remote arrive is needed (those took ~1 us a tile).
        float* my_chunks = smem_exchange + threadIdx.x * 4;
        constexpr uint32_t kExchangeBytes = kNumAccumChunks * kNumMathThreads * 16;
        if (cta_rank == 1) {
          ptx::mbarrier_wait_cluster_acquire(exchange_empty, exchange_phase ^ 1);  // CTA 0 read the previous tile's
          const uint32_t remote = ptx::mapa_shared(my_chunks, 0);
          const uint32_t remote_full = ptx::mapa_shared(exchange_full, 0);
#pragma unroll
          for (uint32_t c = 0; c < kNumAccumChunks; ++c) {
            const float* v = accum_chunk(c);
            ptx::st_async_v4_f32(remote + c * kNumMathThreads * 16, v[0], v[1], v[2], v[3], remote_full);
          }
          if (threadIdx.x == 0) trace_once(14);
          exchange_phase ^= 1;
          continue;
        }
        if (threadIdx.x == 0) ptx::mbarrier_arrive_expect_tx(exchange_full, kExchangeBytes);
        ptx::mbarrier_wait_cluster_acquire(exchange_full, exchange_phase);
        if (threadIdx.x == 0) trace_once(14);
#pragma unroll
        for (uint32_t c = 0; c < kNumAccumChunks; ++c) {
          const float4 v = ptx::ld_shared_v4_f32(my_chunks + c * kNumMathThreads * 4);
          float* acc = accum_chunk(c);
          acc[0] += v.x;
          acc[1] += v.y;
          acc[2] += v.z;
          acc[3] += v.w;
        }
      }

      // ---- Epilogue: bf16, stmatrix into the swizzled shared tile, TMA store (or row-checked stores) ----------
      const uint32_t c_epilogue = LoopClocks::mark();
      if (store_tile)
        Epilogue::store(final_accum, smem_d, math_wg, kWaveRows, warp_in_wg, lane_idx, wg_thread, wg_barrier, tile,
                        args, N);
      if constexpr (FG_EXPERIMENT_LOOP_CLOCKS) clocks.epilogue += LoopClocks::mark() - c_epilogue;
      if (threadIdx.x == 0) trace_once(4);
      if constexpr (kSplitK > 1) {
        // CTA 0 frees its exchange buffer once every math thread read its chunks: one remote arrive, after the tile's
        // store went out (a cluster-scope release took ~0.5 us on an H100; 128 of them, one per thread, longer).
        ptx::named_barrier_sync(static_cast<uint32_t>(NamedBarrier::kMathAll), kNumMathThreads);
        if (threadIdx.x == 0) {
          ptx::mbarrier_arrive_cluster_release(exchange_empty, 1);
          trace_once(15);
        }
        exchange_phase ^= 1;
      }
    }
    // Warpgroup 1 passed the turn after its last batch: take it so the barrier ends balanced.
    if constexpr (kPingPong) {
      if (math_wg == 0) ptx::named_barrier_sync(my_turn, 256);
    }
    if (wg_thread == 0) ptx::tma_store_wait<0>();
    // Split-K: CTA 1 leaves once CTA 0 read its last partial sums. That is the last access between the two (CTA 0
    // waited for every byte CTA 1 sent), so the cluster needs no teardown barrier.
    if constexpr (kSplitK > 1) {
      if (cta_rank == 1) ptx::mbarrier_wait_cluster_acquire(exchange_empty, exchange_phase ^ 1);
    }
    if (threadIdx.x == 0) {
      trace_at(5);
      trace_cycles(30, full_wait_cycles, math_life_start);
    }
    if constexpr (FG_EXPERIMENT_LIFE_CLOCK) {
      // Added up over calls in the measurement words of the error-flag buffer (kLoopClockWord on); `finegemm bench`
      // prints them with FINEGEMM_LOOP_CLOCKS=1. (A printf anywhere in the kernel makes ptxas serialize every wgmma.)
      if (blockIdx.x == 0 && wg_thread == 0) {
        uint32_t* words = args.error_flags + kLoopClockWord + math_wg * kLoopClockWordsPerWarpgroup;
        const uint32_t life_cycles = ptx::clock32() - life_cycles_start;
        const uint32_t life_ns = static_cast<uint32_t>(ptx::global_timer() - life_ns_start);
        const uint32_t values[kLoopClockWordsPerWarpgroup] = {clocks.batches, clocks.full,     clocks.turn,
                                                              clocks.issue,   clocks.wait,     clocks.promote,
                                                              clocks.epilogue, life_cycles,    life_ns};
#pragma unroll
        for (uint32_t i = 0; i < kLoopClockWordsPerWarpgroup; ++i) ptx::red_add_global(words + i, values[i]);
      }
    }
    if (threadIdx.x == 0 && scheduler.error_bits != 0) ptx::atomic_or_global(args.error_flags, scheduler.error_bits);
  }

  // ---- Teardown: no CTA leaves while its peer may still signal its barriers or write its shared memory --------
  if constexpr (kClusterSize > 1 && kSplitK == 1) {
    ptx::cluster_arrive();
    ptx::cluster_wait();
  }
  if constexpr (FG_EXPERIMENT_TRACE) {
    __syncthreads();
    if (threadIdx.x == 0) {
      trace_at(9);
      const long long clocks = clock64() - trace_clock0;
      const uint64_t t0 = trace[0];
      auto at = [&](uint32_t i) { return trace[i] == 0 ? -1 : int(trace[i] - t0); };
      printf(
          "FGTRACE cta=%d sm=%d t0=%llu setup=%d full=%d kdone=%d epi=%d mathdone=%d a0=%d b0=%d alast=%d exit=%d "
          "prod=%d tile=%d sb0=%d math=%d xchg=%d xrel=%d arg=%d mtile=%d brole=%d bparam=%d btile=%d bwait=%d bexp=%d "
          "bprewait=%d mhz=%d\n",
          int(blockIdx.x), int(ptx::sm_id()), (unsigned long long)t0, at(1), at(2), at(3), at(4), at(5), at(6), at(7),
          at(8), at(9), at(10), at(11), at(12), at(13), at(14), at(15), at(16), at(17), at(18), at(19), at(20),
          at(21), at(22), at(23),
          int(clocks * 1000 / (long long)(trace[9] - t0 > 0 ? trace[9] - t0 : 1)));
      // A second line: device printf takes at most 32 arguments.
      printf("FGTRACE2 cta=%d t0=%llu await=%llu alife=%llu bwaitc=%llu blife=%llu swait=%llu slife=%llu mwait=%llu "
             "mlife=%llu\n",
             int(blockIdx.x), (unsigned long long)t0, (unsigned long long)trace[24], (unsigned long long)trace[25],
             (unsigned long long)trace[26], (unsigned long long)trace[27], (unsigned long long)trace[28],
             (unsigned long long)trace[29], (unsigned long long)trace[30], (unsigned long long)trace[31]);
    }
  }
}

}  // namespace finegemm::device
