// The math warpgroups of the GEMM kernel: one tile's K loop. Per K block a warpgroup issues the stage's m64nNk32
// wgmmas into a fresh fp32 accumulator, releases the stage, and promotes the result into the running accumulator with
// the block's SA * SB scales (Hopper's FP8 tensor-core accumulation keeps about 14 bits, so every 128-wide K block is
// scaled and added with CUDA-core FFMAs).
#pragma once

#include "finegemm/device/common/gemm_args.cuh"
#include "finegemm/device/gemm/pipeline.cuh"
#include "finegemm/device/gemm/producer.cuh"
#include "finegemm/device/gemm/traits.cuh"
#include "finegemm/device/ptx/ld_st.cuh"
#include "finegemm/device/ptx/mbarrier.cuh"
#include "finegemm/device/ptx/sync.cuh"
#include "finegemm/device/ptx/wgmma.cuh"
#include "finegemm/device/scheduler.cuh"

namespace finegemm::device {

/// One math thread's state across its tiles: its place in the warpgroup, the stage ring's position, the shared-memory
/// descriptors and the accumulators.
template <class Cfg>
struct MathWarpgroup {
  using Layout = typename Cfg::Layout;
  static constexpr uint32_t BLOCK_N = Cfg::BLOCK_N;

  /// Columns of this thread's 1x128 SB pairs: 8j + 2 (lane % 4) and the next, j < BLOCK_N / 8.
  static constexpr uint32_t kNumSbPairs = Cfg::kSbPerColumn ? BLOCK_N / 8 : 1;

  /// SA of rows r0 / r0 + 8 times SB of the first / second 128-column block; with 1x128 scales of B, SA of the two
  /// rows in r0_first / r1_first and this thread's column scales in sb_pairs.
  struct Scales {
    float r0_first, r1_first, r0_second, r1_second;
    float2 sb_pairs[kNumSbPairs];
  };

  const GemmSmem& smem;
  uint32_t math_wg;      // this thread's math warpgroup
  uint32_t lane_idx;
  uint32_t my_turn, other_turn;
  PipelineState<Cfg::kNumStages> pipe;
  // The main loop is short on purpose: every math-warp instruction costs tensor-pipe time, so stage and K-step offsets
  // are folded into the 32-bit low words of the descriptors, and the scale of each column granule is a compile-time
  // choice (see k_loop). Pinned (ptx::opaque) so that ptxas keeps them in registers instead of recomputing them in
  // every K block.
  uint32_t desc_hi;      // stride and swizzle: the same for A and B
  uint32_t desc_a_lo;
  uint32_t desc_b_lo;
  uint32_t desc_b2_lo;   // wide tiles: the second B tile's descriptor (in the A stage; not offset by the warpgroup's rows)
  const float* sa_rows;  // this thread's row r0 in the stage's SA
  uint32_t sa_kb_stride;  // SA loaded once: floats between two K blocks of its shared copy
  bool next_full;        // the next stage's full barrier was seen complete during the last promotion
  float accum[Cfg::kKDepth][BLOCK_N / 2];
  float final_accum[Cfg::kNumWaves][BLOCK_N / 2];

  /// Tile rows r0 and r0 + 8 of wave 0 are this thread's; wave w adds w * kWaveRows.
  /// `ld_sa`: SA's stride (GemmArgs::ld_sa), that of its shared copy where it is loaded once by kSaMnMajorOnce16.
  FG_DEVICE MathWarpgroup(const GemmSmem& smem_, uint32_t math_wg_, uint32_t warp_in_wg, uint32_t lane_idx_,
                          int64_t ld_sa)
      : smem(smem_), math_wg(math_wg_), lane_idx(lane_idx_) {
    const uint32_t r0 = math_wg * kWarpgroupRows + warp_in_wg * 16 + lane_idx / 4;
    const uint64_t desc_a0 = ptx::make_smem_desc_k_major_sw128(smem.a + math_wg * kWarpgroupRows * kBlockK);
    const uint64_t desc_b0 = ptx::make_smem_desc_k_major_sw128(smem.b);
    desc_hi = ptx::opaque(static_cast<uint32_t>(desc_a0 >> 32));
    desc_a_lo = ptx::opaque(static_cast<uint32_t>(desc_a0));
    desc_b_lo = ptx::opaque(static_cast<uint32_t>(desc_b0));
    desc_b2_lo = 0;
    if constexpr (Cfg::kWideTiles)
      desc_b2_lo = ptx::opaque(static_cast<uint32_t>(ptx::make_smem_desc_k_major_sw128(smem.a + Cfg::kWideBOffset)));
    // SA loaded once holds the call's rows only (gemm_sa_once_rows; past M zero, or by kSaMnMajorOnce16 the next K
    // block's rows): the first warp's, r0 and (16 rows) r0 + 8. The other threads read rows of it too, whose products
    // go to output rows that are not stored.
    constexpr uint32_t kOnceLastRow = min_of(gemm_sa_once_rows(Cfg::kSaMode), 8u) - 1;
    sa_rows = Cfg::kSaOnce ? smem.sa + min_of(r0, kOnceLastRow) * Layout::kSaOnceRowStride
                           : smem.sa + r0 * Cfg::kSaRowFloats;
    sa_kb_stride = Cfg::kSaMode == kSaMnMajorOnce16 ? uint32_t(ld_sa) : Layout::kSaOnceKbStride;
    my_turn = static_cast<uint32_t>(NamedBarrier::kMathTurn0) + math_wg;
    other_turn = static_cast<uint32_t>(NamedBarrier::kMathTurn0) + (1 - math_wg);
    next_full = false;
  }

  /// Warpgroup 0 goes first: warpgroup 1 hands it the first turn.
  FG_DEVICE void start_turns() {
    if constexpr (Cfg::kPingPong) {
      if (math_wg == 1) ptx::named_barrier_arrive(other_turn, 256);
    }
  }

  /// Warpgroup 1 passed the turn after its last batch: warpgroup 0 takes it so the barrier ends balanced.
  FG_DEVICE void end_turns() {
    if constexpr (Cfg::kPingPong) {
      if (math_wg == 0) ptx::named_barrier_sync(my_turn, 256);
    }
  }

  /// Float4 chunk c of this thread's sums: elements c * 4 .. c * 4 + 3 of its waves in order.
  FG_DEVICE float* accum_chunk(uint32_t c) { return &final_accum[c / Cfg::kChunksPerWave][(c % Cfg::kChunksPerWave) * 4]; }

  /// The four m64nNk32 wgmmas of one stage into acc, as kBatchParts commit groups. Wave 1 of a wide tile (`wide`, a
  /// Constant) multiplies wave 0's rows by the second B tile.
  template <class Wide>
  FG_DEVICE void issue_batch(float (&acc)[BLOCK_N / 2], uint32_t stage, uint32_t wave, Wide) {
    constexpr bool kWide = Wide::value != 0;
    const uint32_t a_lo = desc_a_lo + stage * (Layout::kABytesPerStage >> 4) +
                          (kWide ? 0 : wave * ((Cfg::kWaveRows * kBlockK) >> 4));
    const uint32_t b_lo = kWide && wave == 1 ? desc_b2_lo + stage * (Layout::kABytesPerStage >> 4)
                                             : desc_b_lo + stage * (Layout::kBBytesPerStage >> 4);
#pragma unroll
    for (uint32_t i = 0; i < BLOCK_N / 2; ++i) ptx::wgmma_fence_operand(acc[i]);
    ptx::wgmma_fence();
#pragma unroll
    for (uint32_t part = 0; part < Cfg::kBatchParts; ++part) {
      // Part `part` covers columns part * kPartN.. of the tile: B rows at part * kPartN, accumulators from
      // part * kPartN / 2 (the m64nNk32 layout puts columns 8c..8c+7 in registers 4c..4c+3).
      constexpr uint32_t kPartN = Cfg::kPartN;
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
  }

  /// This thread's row r0 of SA in `stage`, whose K block is `kb` (K-major SA by TMA: its column in the stage's box of
  /// 4; unused otherwise). Computed once per stage: each wave's rows are then a constant offset from it.
  FG_DEVICE const float* stage_sa(uint32_t stage, uint32_t kb) const {
    if constexpr (Cfg::kSaOnce) return sa_rows + kb * sa_kb_stride;  // (loaded once: K block kb's)
    const uint32_t column = Cfg::kSaMode == kSaKMajorTma ? kb % 4 : 0;
    return sa_rows + stage * Cfg::kSaFloatsPerStage + column;
  }

  /// The scales of this thread's rows of wave `wave` in `stage` (`sa_stage`: stage_sa of that stage).
  template <class Wide>
  FG_DEVICE Scales load_scales(const float* sa_stage, uint32_t stage, uint32_t wave, Wide) {
    constexpr bool kWide = Wide::value != 0;
    constexpr uint32_t kSaRowFloats = Cfg::kSaRowFloats;
    const float* sa = sa_stage + (kWide ? 0 : wave * Cfg::kWaveRows * kSaRowFloats);
    const float sa0 = ptx::ld_shared_f32(sa);
    // SA loaded once: row r0 + 8 in a copy of 16 rows; past M (its row r0 read again) in a copy of 4
    constexpr uint32_t kRow8Offset = !Cfg::kSaOnce                             ? 8 * kSaRowFloats
                                     : gemm_sa_once_rows(Cfg::kSaMode) > 8u ? 8 * Layout::kSaOnceRowStride
                                                                              : 0u;
    const float sa1 = ptx::ld_shared_f32(sa + kRow8Offset);
    if constexpr (Cfg::kSbPerColumn) {
      Scales sc;
      sc.r0_first = sa0;
      sc.r1_first = sa1;
      const float* sb = smem.sb + stage * Cfg::kSbFloatsPerStage + 2 * (lane_idx % 4);
#pragma unroll
      for (uint32_t j = 0; j < kNumSbPairs; ++j) sc.sb_pairs[j] = ptx::ld_shared_v2_f32(sb + 8 * j);
      return sc;
    }
    float sb0, sb1;
    if constexpr (Cfg::kEveryThreadReadsSb) {
      const float2 sb = ptx::ld_shared_v2_f32(smem.sb + stage * 2);
      // A wide tile's wave 1: the second n-block's SB (one SB block per 128-column n-block).
      sb0 = kWide && wave == 1 ? sb.y : sb.x;
      sb1 = Cfg::kUniformScaleB ? sb0 : sb.y;
    } else {
      float2 sb = make_float2(0.0f, 0.0f);
      if (lane_idx == 0) sb = ptx::ld_shared_v2_f32(smem.sb + stage * 2);
      // A wide tile's wave 1: the second n-block's SB (one SB block per 128-column n-block).
      sb0 = __shfl_sync(0xffffffff, kWide && wave == 1 ? sb.y : sb.x, 0);
      sb1 = Cfg::kUniformScaleB ? sb0 : __shfl_sync(0xffffffff, sb.y, 0);
    }
    Scales sc;
    sc.r0_first = sa0 * sb0;
    sc.r1_first = sa1 * sb0;
    sc.r0_second = sa0 * sb1;
    sc.r1_second = sa1 * sb1;
    return sc;
  }

  /// Once the stage's wgmmas completed and its scales were read (Cfg::kEmptyArrivals says who arrives).
  FG_DEVICE void release(uint32_t stage) {
    if (Cfg::kSaGather || Cfg::kEveryThreadReadsSb || lane_idx == 0) ptx::mbarrier_arrive(&smem.empty_barriers[stage]);
  }

  /// The fp32 block result, scaled by SA * SB, into the running accumulator (the tile's first K block sets it, when
  /// `Assign` is Constant<1>). Granules g < first_granules take the first SB block's scale; first_granules is a
  /// compile-time constant wherever the K loop was instantiated per split, so the choice then costs no instruction.
  /// `Part` (a Constant, with kBatchParts > 1): only that part's columns.
  template <class Assign, class Part>
  FG_DEVICE static void promote(float (&acc)[BLOCK_N / 2], const Scales& sc, const uint32_t first_granules,
                                float (&out)[BLOCK_N / 2], Assign, Part) {
    // Register quads j (columns 8j..8j+7) of the part: j / kPartQuads == part.
    constexpr uint32_t kPartQuads = Cfg::kPartN / 8, kFirstQuad = Part::value * kPartQuads;
    constexpr uint32_t kScaleGranule = Cfg::kScaleGranule;
#pragma unroll
    for (uint32_t i = kFirstQuad * 4; i < (kFirstQuad + kPartQuads) * 4; ++i) ptx::wgmma_fence_operand(acc[i]);
    if constexpr (Cfg::kSbPerColumn) {
      // 1x128 scales of B: element (row, column) takes SA[row] * SB[column].
#pragma unroll
      for (uint32_t j = kFirstQuad; j < kFirstQuad + kPartQuads; ++j) {
        const float2 sb = sc.sb_pairs[j];
        const float scale[4] = {sc.r0_first * sb.x, sc.r0_first * sb.y, sc.r1_first * sb.x, sc.r1_first * sb.y};
#pragma unroll
        for (uint32_t c = 0; c < 4; ++c) {
          const float scaled = scale[c] * acc[j * 4 + c];
          out[j * 4 + c] = Assign::value ? scaled : out[j * 4 + c] + scaled;
        }
      }
    } else {
#pragma unroll
      for (uint32_t g = 0; g < Cfg::kNumScaleGranules; ++g) {
        const bool first = Cfg::kUniformScaleB || g < first_granules;
        const float scale_r0 = first ? sc.r0_first : sc.r0_second;
        const float scale_r1 = first ? sc.r1_first : sc.r1_second;
#pragma unroll
        for (uint32_t j = g * kScaleGranule / 8; j < (g + 1) * kScaleGranule / 8; ++j) {
          if (j / kPartQuads != Part::value) continue;
#pragma unroll
          for (uint32_t c = 0; c < 4; ++c) {
            const float scaled = (c < 2 ? scale_r0 : scale_r1) * acc[j * 4 + c];
            out[j * 4 + c] = Assign::value ? scaled : out[j * 4 + c] + scaled;
          }
        }
      }
    }
  }

  /// A tile without rows of this warpgroup (Cfg::kPassesIdleTurns): per K block it passes on its `waves` turns and
  /// releases the stage (full by then: the other warpgroup issued from it before passing the first turn). The epilogue
  /// writes none of its rows; its running sums are zeroed all the same (left holding the last tile's, they stay live
  /// across the other tiles' K loops, and ptxas spilled).
  template <class Waves>
  FG_DEVICE void pass_turns(Waves, const uint32_t num_kb) {
    static_assert(Cfg::kPassesIdleTurns, "turns are passed between two math warpgroups");
    if constexpr (Cfg::kAssignFirst) {  // (otherwise zeroed at the tile's start)
#pragma unroll
      for (uint32_t w = 0; w < Cfg::kNumWaves; ++w)
#pragma unroll
        for (uint32_t i = 0; i < BLOCK_N / 2; ++i) final_accum[w][i] = 0.0f;
    }
    for (uint32_t kb = 0; kb < num_kb; ++kb) {
#pragma unroll
      for (uint32_t w = 0; w < Waves::value; ++w) {
        ptx::named_barrier_sync(my_turn, 256);
        ptx::named_barrier_arrive(other_turn, 256);
      }
      release(pipe.stage);
      pipe.advance();
    }
    next_full = false;
  }

  /// One tile's K loop over K blocks [kb_first, kb_first + num_kb). `first` carries first_granules, as a
  /// compile-time constant (Constant<V>) or not; `wide` (Constant<0 or 1>) whether the tile is wide; `waves`
  /// (Constant<1 or kNumWaves>) how many waves the tile computes; `mine` (a Constant, 1 up to `waves`) how many of
  /// them have rows of this warpgroup: in the others it only passes the turn (Cfg::kPassesIdleTurns).
  /// `num_kb`: the tile's K blocks, Cfg::num_k_blocks_from(kb_first) but for K-grouped tiles (Cfg::kRuntimeK).
  template <class First, class Wide, class Waves, class Mine>
  FG_DEVICE void k_loop(First first, Wide wide, Waves, Mine, const uint32_t kb_first, const uint32_t num_kb) {
    constexpr uint32_t kKDepth = Cfg::kKDepth;
    if constexpr (kKDepth > 1) {
      // K blocks in groups of kKDepth (the last group may be shorter), block d of a group into accum[d]: issue all,
      // then wait for each in turn and promote it while the later ones run. Nothing is in flight across the loop's
      // back edge: ptxas serializes every wgmma when a non-wgmma instruction reads an accumulator written in an
      // earlier iteration while a group is pending (warnings C7514/C7517, rejected by the CPU tests).
      PipelineState<Cfg::kNumStages> ahead = pipe;  // the next block to issue; `pipe` is the next to release
      uint32_t release_kb = kb_first;               // the K block of `pipe`
      // `count` is a constant at both call sites; once inlined, the guards fold and the loops unroll.
      auto run_group = [&](const uint32_t count) {
#pragma unroll
        for (uint32_t d = 0; d < kKDepth; ++d) {
          if (d < count) {
            ptx::mbarrier_wait(&smem.full_barriers[ahead.stage], ahead.phase);
            issue_batch(accum[d], ahead.stage, 0, wide);
            ahead.advance();
          }
        }
#pragma unroll
        for (uint32_t d = 0; d < kKDepth; ++d) {
          if (d < count) {
            const Scales sc = load_scales(stage_sa(pipe.stage, release_kb++), pipe.stage, 0, wide);
            ptx::wgmma_wait_group_at_most(count - 1 - d);
            release(pipe.stage);
            pipe.advance();
            promote(accum[d], sc, first.value, final_accum[0], Constant<0>(), Constant<0>());
          }
        }
      };
      // Whole groups, then the rest. num_kb is a constant but in split-K kernels, whose two CTAs compute different
      // numbers of K blocks (Cfg::kSplitKLead).
      static_assert(kKDepth <= 4, "the rest of a group: 1 to 3 K blocks");
      for (uint32_t group = 0; group < num_kb / kKDepth; ++group) run_group(kKDepth);
      const uint32_t rest = num_kb % kKDepth;
      if (rest == 1) run_group(1);
      if constexpr (kKDepth > 2) {
        if (rest == 2) run_group(2);
      }
      if constexpr (kKDepth > 3) {
        if (rest == 3) run_group(3);
      }
    } else {
      // One batch per wave; with two warpgroups the turns alternate batch by batch. A wave without rows to compute is
      // skipped (by both warpgroups alike, so the turns stay balanced); a wave with rows of the other warpgroup only
      // (past the tile's rows in this warpgroup's 64) costs this one a turn passed on, not a batch.
      constexpr uint32_t num_waves = Waves::value;
      constexpr uint32_t my_waves = Mine::value;
      static_assert(my_waves >= 1 && my_waves <= num_waves && (my_waves == num_waves || Cfg::kPassesIdleTurns),
                    "a warpgroup skips a wave of the tile only where it takes turns with another");
      // A skipped wave's running accumulators still get a value (ptxas would otherwise share their registers with
      // the in-flight accumulator and wait for the wgmmas before the epilogue reads them).
      auto set_skipped = [&](auto is_first, const uint32_t w) {
        if constexpr (decltype(is_first)::value && Cfg::kAssignFirst) {
#pragma unroll
          for (uint32_t i = 0; i < BLOCK_N / 2; ++i) final_accum[w][i] = 0.0f;
        }
      };
      auto k_block = [&](auto is_first, const uint32_t kb) {
        if (!next_full) ptx::mbarrier_wait(&smem.full_barriers[pipe.stage], pipe.phase);
        next_full = false;
        const float* sa_stage = stage_sa(pipe.stage, kb_first + kb);
#pragma unroll
        for (uint32_t w = 0; w < Cfg::kNumWaves; ++w) {
          if (w >= num_waves) {
            set_skipped(is_first, w);
            break;
          }
          if (w >= my_waves) {
            // The other warpgroup's batch of this wave runs in this turn; the stage is this one's to release once
            // its last turn of the K block is passed (the stage is full: the other warpgroup issued from it).
            set_skipped(is_first, w);
            if constexpr (Cfg::kPingPong) {
              ptx::named_barrier_sync(my_turn, 256);
              ptx::named_barrier_arrive(other_turn, 256);
            }
            if (w + 1 == num_waves) release(pipe.stage);
            continue;
          }
          Scales sc;
          if constexpr (Cfg::kScalesBeforeTurn) sc = load_scales(sa_stage, pipe.stage, w, wide);
          if constexpr (Cfg::kPingPong) ptx::named_barrier_sync(my_turn, 256);
          issue_batch(accum[0], pipe.stage, w, wide);
          if constexpr (Cfg::kPingPong) ptx::named_barrier_arrive(other_turn, 256);
          // Otherwise read the stage's scales while the tensor cores work, before releasing the stage.
          if constexpr (!Cfg::kScalesBeforeTurn) sc = load_scales(sa_stage, pipe.stage, w, wide);
          using Assign = Constant<decltype(is_first)::value && Cfg::kAssignFirst>;
          if constexpr (Cfg::kBatchParts == 2) {
            // The first half's columns while the second half's wgmmas run.
            ptx::wgmma_wait_group<1>();
            promote(accum[0], sc, first.value, final_accum[w], Assign(), Constant<0>());
          }
          ptx::wgmma_wait_group<0>();
          // After its last wave: release the stage before promotion so TMA refills it meanwhile, and look at the next
          // stage's full barrier, so that the test's latency runs under the promotion instead of in the chain to the
          // next issue (a stage seen full stays full until this warpgroup releases it).
          if (w + 1 == num_waves) {
            release(pipe.stage);
            PipelineState<Cfg::kNumStages> next = pipe;
            next.advance();
            next_full = ptx::mbarrier_test_wait_parity(&smem.full_barriers[next.stage], next.phase);
          }
          promote(accum[0], sc, first.value, final_accum[w], Assign(), Constant<Cfg::kBatchParts - 1>());
        }
        pipe.advance();
      };
      if constexpr (Cfg::kRuntimeK) {
        // Every block accumulates (no kAssignFirst: the running sums were zeroed at the tile's start).
        static_assert(!Cfg::kAssignFirst, "K-grouped tiles zero their running sums first");
#pragma unroll 1
        for (uint32_t kb = 0; kb < num_kb; ++kb) k_block(Constant<0>(), kb);
      } else {
        k_block(Constant<1>(), 0);
        for (uint32_t kb = 1; kb < num_kb; ++kb) k_block(Constant<0>(), kb);
      }
    }
  }

  /// One tile's sums into final_accum. The K loop is instantiated per case that would otherwise cost instructions in
  /// every K block: where a tile straddling two SB blocks switches scale, whether the tile is wide, and how many waves
  /// it computes.
  FG_DEVICE void compute_tile(const Tile& tile, const uint32_t kb_first) {
    constexpr uint32_t kNumScaleGranules = Cfg::kNumScaleGranules;
    // A tile straddling two SB blocks switches scale at column 128 - n_start % 128, a multiple of kScaleGranule.
    const uint32_t num_kb = Cfg::kRuntimeK ? uint32_t(tile.num_k_blocks) : Cfg::num_k_blocks_from(kb_first);
    const uint32_t first_granules =
        Cfg::kUniformScaleB ? kNumScaleGranules
                            : min_of((128 - tile.n_block * BLOCK_N % 128) / Cfg::kScaleGranule, kNumScaleGranules);
    if constexpr (!Cfg::kAssignFirst) {
#pragma unroll
      for (uint32_t w = 0; w < Cfg::kNumWaves; ++w)
#pragma unroll
        for (uint32_t i = 0; i < BLOCK_N / 2; ++i) final_accum[w][i] = 0.0f;
    }
    // Up to kMaxScaleVariants granules, one copy of the K loop per split point; beyond, a select per granule.
    auto k_loops_of = [&](auto wide, auto waves, auto mine) {
      if constexpr (kNumScaleGranules <= Cfg::kMaxScaleVariants) {
        auto k_loop_of = [&](auto first) { k_loop(first, wide, waves, mine, kb_first, num_kb); };
        with_constant<1, kNumScaleGranules>(first_granules, k_loop_of);
      } else {
        k_loop(RuntimeValue{first_granules}, wide, waves, mine, kb_first, num_kb);
      }
    };
    // With turns, the waves this warpgroup has rows in: wave w's 64 rows start at tile row (wide ? 0 : w * kWaveRows)
    // + math_wg * 64, so warpgroup 1 may have one wave fewer than the tile (none in a wide tile). Grouped tiles end
    // where their group does: in DeepGEMM's masked cases of 0.7-1.3x 192 rows per group, half of the 256-row tiles
    // hold 129-192 rows, and warpgroup 1 then passes its second turn. Measured on an H200 against the kernels without
    // (same-run DeepGEMM ratios in parentheses), masked 32 groups 6144x7168 549.1 (0.966) -> 532.7 (0.995) us and
    // 7168x3072 289.7 (0.985) -> 278.7 (1.023); as psum 549.8 (0.962) -> 536.9 (0.986).
    auto k_loops_with = [&](auto wide, auto waves) {
      if constexpr (Cfg::kPassesIdleTurns) {
        constexpr uint32_t kWaves = decltype(waves)::value;
        const int32_t my_rows = tile.compute_rows - int32_t(math_wg * kWarpgroupRows);
        if (my_rows <= 0) {
          pass_turns(waves, num_kb);
          return;
        }
        if constexpr (kWaves == 2 && !decltype(wide)::value) {
          if (my_rows <= int32_t(Cfg::kWaveRows)) {
            k_loops_of(wide, waves, Constant<1>());
            return;
          }
        }
      }
      k_loops_of(wide, waves, waves);
    };
    // A tile with at most kWaveRows rows to compute runs wave 0 only (a wide tile has both). Tested at run time, ptxas
    // re-evaluated the wave count in every K block (256x128 K loops of 199-229 instructions against 195; 0.3-3.3%
    // slower on an H100).
    auto k_loops = [&](auto wide) {
      if constexpr (Cfg::kNumWaves == 1 || Cfg::kKDepth > 1 || decltype(wide)::value) {
        k_loops_with(wide, Constant<Cfg::kNumWaves>());
      } else if (tile.compute_rows > int32_t(Cfg::kWaveRows)) {
        k_loops_with(wide, Constant<Cfg::kNumWaves>());
      } else {
        k_loops_with(wide, Constant<1>());
      }
    };
    if constexpr (Cfg::kWideTiles) {
      if (tile.wide) {
        k_loops(Constant<1>());
      } else {
        k_loops(Constant<0>());
      }
    } else {
      k_loops(Constant<0>());
    }
  }
};

}  // namespace finegemm::device
