// Entry points of the GEMMs: validate, pick a config, build TMA descriptors, launch. A warm call is a lookup in the
// plan cache (keyed by the call's arguments as given: tensor views, scalars, device) followed by one
// cuLaunchKernelEx; only the first call with those arguments validates them.
#include <cuda.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <type_traits>

#include "api/context.hpp"
#include "api/validate.hpp"
#include "common/bounded_cache.hpp"
#include "common/error.hpp"
#include "finegemm/device/common/gemm_args.cuh"
#include "finegemm/device/common/gemm_layout.cuh"
#include "finegemm/finegemm.hpp"
#include "heuristics/heuristics.hpp"
#include "jit/driver.hpp"
#include "jit/launch.hpp"
#include "jit/runtime.hpp"

namespace finegemm {
namespace {

using api::Context;
using heuristics::KernelConfig;
using jit::check_cu;
using jit::driver;

constexpr const char* kGemmHeader = "finegemm/device/kernels/sm90_fp8_gemm.cuh";
constexpr const char* kGemmParameters = "(const __grid_constant__ finegemm::device::GemmArgs)";
// The SM count a query assumes without a GPU: an H100 SXM's (H800 and H200 have as many).
constexpr int kDefaultNumSms = 132;
// The descriptors each CTA of a K-grouped GEMM rewrites per group (GemmArgs::k_grouped_maps): A's two, then B's two.
constexpr int64_t kKGroupedMapsPerCta = 4;

/// Bytes of the K-grouped workspace for a grid of `num_ctas` CTAs.
int64_t k_grouped_workspace_bytes_for(int num_ctas) {
  return int64_t(num_ctas) * kKGroupedMapsPerCta * int64_t(sizeof(device::TmaDescriptor));
}

jit::KernelSpec gemm_spec(const KernelConfig& config) {
  jit::KernelSpec spec;
  spec.header = kGemmHeader;
  spec.function = config.kernel_function();
  spec.parameters = kGemmParameters;
  spec.steady_ffma_pass = heuristics::takes_steady_ffma_pass(config);
  return spec;
}

/// A call's arguments as given, before validation: its kind, tensor views (address, type, rank, sizes, strides) and
/// scalars, with the device and the SM limit asked for. Validation reads nothing else, so arguments equal to an
/// earlier call's validate the same way: a warm call finds its plan by them, without validating again. Compared as
/// bytes (zero-initialized, no padding).
struct ArgumentKey {
  static constexpr int kMaxViews = 7;  // the K-grouped call's
  int32_t kind = 0;
  int32_t num_views = 0;
  int32_t device = 0;
  int32_t requested_sms = 0;
  int64_t scalars[2] = {0, 0};
  TensorView views[kMaxViews];

  ArgumentKey(GemmKind call_kind, std::initializer_list<const TensorView*> call_views) {
    std::memset(static_cast<void*>(this), 0, sizeof(*this));
    kind = int32_t(call_kind);
    for (const TensorView* v : call_views) {
      if (v != nullptr) views[num_views] = *v;  // an absent optional view stays all zero (no TensorView{} is)
      ++num_views;
    }
  }
  bool operator==(const ArgumentKey& o) const { return std::memcmp(this, &o, sizeof(*this)) == 0; }
  /// The kind, the first view's rows and the views' addresses, mixed: calls rarely share all of them.
  size_t hash() const {
    uint64_t h = uint64_t(kind) * 0x9E3779B97F4A7C15ull ^ uint64_t(views[0].shape[0]);
    for (const TensorView& v : views) h = (h ^ uint64_t(reinterpret_cast<uintptr_t>(v.data))) * 0xFF51AFD7ED558CCDull;
    return size_t(h ^ (h >> 29));
  }
};
static_assert(sizeof(TensorView) == 64 && std::has_unique_object_representations_v<TensorView>,
              "ArgumentKey compares views as bytes");
static_assert(sizeof(ArgumentKey) == 32 + 64 * ArgumentKey::kMaxViews, "ArgumentKey has no padding");

struct ArgumentKeyHash {
  size_t operator()(const ArgumentKey& k) const { return k.hash(); }
};

struct LaunchPlan {
  CUfunction function = nullptr;
  device::GemmArgs args{};      ///< a plain launch's
  device::GemmArgs pdl_args{};  ///< a launch with programmatic dependent launch: args and its B prefetch
  KernelConfig config;
};

void encode_2d(device::TmaDescriptor& map, CUtensorMapDataType dtype, const void* base, uint64_t inner, uint64_t outer,
               uint64_t row_stride_bytes, uint32_t box_inner, uint32_t box_outer, CUtensorMapSwizzle swizzle,
               const char* what) {
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {row_stride_bytes};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t element_strides[2] = {1, 1};
  check_cu(driver().cuTensorMapEncodeTiled(reinterpret_cast<CUtensorMap*>(&map), dtype, 2, const_cast<void*>(base),
                                           dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
           what);
}

/// An fp8 operand (A or B) as [rows, K] with `row_stride_bytes` between rows: boxes of (BLOCK_K, box_rows), 128B
/// swizzle.
void encode_fp8_operand(device::TmaDescriptor& map, const void* base, uint64_t k, uint64_t rows,
                        uint64_t row_stride_bytes, uint32_t box_rows, const char* what) {
  encode_2d(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, k, rows, row_stride_bytes, device::kBlockK, box_rows,
            CU_TENSOR_MAP_SWIZZLE_128B, what);
}

/// MN-major fp32 scales as [K blocks, MN] with `ld` floats between K blocks: a box of `box_mn` scales of one K block
/// (or of `box_k_blocks`).
void encode_mn_major_scales(device::TmaDescriptor& map, const void* base, uint64_t mn, uint64_t k_blocks, int64_t ld,
                            uint32_t box_mn, const char* what, uint32_t box_k_blocks = 1) {
  encode_2d(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, base, mn, k_blocks, uint64_t(ld) * 4, box_mn, box_k_blocks,
            CU_TENSOR_MAP_SWIZZLE_NONE, what);
}

CUtensorMapSwizzle swizzle_for_bytes(uint32_t bytes) {
  switch (bytes) {
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

/// How `cfg`'s kernel launches: grid, block, dynamic shared memory, the cluster dimension and, with `pdl`,
/// programmatic dependent launch. The launch and the occupancy query both take it from here.
jit::LaunchShape launch_shape(const KernelConfig& cfg, bool pdl) {
  jit::LaunchShape shape;
  shape.grid_x = uint32_t(cfg.grid);
  shape.block_x = uint32_t(cfg.num_threads);
  shape.smem_bytes = uint32_t(cfg.smem_bytes);
  shape.cluster_x = uint32_t(cfg.cluster_size());
  shape.pdl = pdl;
  return shape;
}

/// How many clusters of `cfg` (clusters of more than one CTA) the device runs at once (at least 1).
int max_active_clusters(CUfunction function, const KernelConfig& cfg) {
  // NOTE: no PDL attribute: PDL orders launches on a stream, it does not change what fits on an SM.
  const jit::Launch launch(launch_shape(cfg, /*pdl=*/false), nullptr);
  int clusters = 0;
  check_cu(driver().cuOccupancyMaxActiveClusters(&clusters, function, &launch.config()),
           "cuOccupancyMaxActiveClusters");
  return std::max(1, clusters);
}

const char* kind_name(GemmKind kind) {
  switch (kind) {
    case GemmKind::kNormal: return "gemm";
    case GemmKind::kGroupedContiguous: return "contiguous";
    case GemmKind::kGroupedMasked: return "masked";
    case GemmKind::kGroupedContiguousPsum: return "psum";
    case GemmKind::kGroupedK: return "k-grouped";
  }
  return "?";
}

Problem problem_of(const GemmCall& c) {
  Problem p;
  p.kind = c.kind;
  // Masked and psum: the hint of rows per group (no group holds more than the call's rows).
  const bool per_group = c.kind == GemmKind::kGroupedMasked || c.kind == GemmKind::kGroupedContiguousPsum;
  p.m = per_group ? std::min<int64_t>(c.expected_m, c.rows) : c.rows;
  p.n = c.n;
  p.k = c.k;
  p.num_groups = c.num_groups;
  p.m_alignment = c.m_alignment;
  if (c.kind == GemmKind::kGroupedK) p.k = c.expected_k;
  p.m_max = c.kind == GemmKind::kGroupedMasked ? c.rows : 0;
  p.sa_k_major = c.sa_k_major;
  p.sb_per_row = c.sb_per_row;
  p.d_dtype = c.d_dtype;
  p.accumulate = c.c != nullptr;
  p.c_is_d = c.c == c.d;
  return p;
}

/// Rows of A's box: BLOCK_M, or with fewer rows than one tile only those, rounded up to the 8-row unit of the 128B
/// swizzle. NOTE: a box reaching far past A's last row is slow (up to 28% of the GEMM on an H100).
uint32_t a_box_rows(int64_t rows, const KernelConfig& cfg) {
  return uint32_t(std::min<int64_t>(cfg.block_m, (rows + 7) / 8 * 8));
}

/// The dense and M-grouped kernels' input descriptors: A (and its half box), B, SA (unless gathered), SB (1x128).
void encode_inputs(const GemmCall& c, const KernelConfig& cfg, device::GemmArgs& args) {
  const uint64_t kb = uint64_t((c.k + 127) / 128);
  args.a_box_rows = a_box_rows(c.a_rows, cfg);
  encode_fp8_operand(args.tma_a, c.a, uint64_t(c.k), uint64_t(c.a_rows), uint64_t(c.lda), args.a_box_rows,
                     "cuTensorMapEncodeTiled(A)");
  if (device::gemm_has_a_half_box(c.kind != GemmKind::kNormal, uint32_t(cfg.block_m), cfg.wide_tail))
    encode_fp8_operand(args.tma_a_half, c.a, uint64_t(c.k), uint64_t(c.a_rows), uint64_t(c.lda),
                       std::min(args.a_box_rows, uint32_t(cfg.block_m) / 2), "cuTensorMapEncodeTiled(A, half box)");
  encode_fp8_operand(args.tma_b, c.b, uint64_t(c.k), uint64_t(c.n * c.num_groups), uint64_t(c.k),
                     uint32_t(cfg.block_n), "cuTensorMapEncodeTiled(B)");
  if (cfg.sa_mode == device::kSaMnMajorOnce16) {
    // MN-major SA of 5-16 rows, loaded once by bulk copies from args.sa: no descriptor.
  } else if (cfg.sa_mode == device::kSaMnMajorOnce) {
    // MN-major SA of at most 4 rows, loaded once: [KB, rows] with row stride ld_sa, one box of 4 rows x KB.
    encode_mn_major_scales(args.tma_sa, c.sa, uint64_t(c.a_rows), kb, c.ld_sa, device::gemm_sa_once_rows(cfg.sa_mode),
                           "cuTensorMapEncodeTiled(SA, once)", uint32_t(kb));
  } else if (cfg.sa_mode == device::kSaKMajorOnce) {
    // K-major SA of at most 16 rows, loaded once: [rows, KB] with row stride ld_sa, one box of KB x 16 rows.
    encode_2d(args.tma_sa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, c.sa, kb, uint64_t(c.a_rows), uint64_t(c.ld_sa) * 4,
              uint32_t(kb), device::gemm_sa_once_rows(cfg.sa_mode), CU_TENSOR_MAP_SWIZZLE_NONE,
              "cuTensorMapEncodeTiled(SA, K-major once)");
  } else if (!c.sa_k_major) {
    // MN-major SA: [G * KB, rows per group] with row stride ld_sa (M_pad).
    const bool masked = c.kind == GemmKind::kGroupedMasked;
    encode_mn_major_scales(args.tma_sa, c.sa, uint64_t(masked ? c.rows : c.a_rows),
                           kb * uint64_t(masked ? c.num_groups : 1), c.ld_sa, uint32_t(cfg.block_m),
                           "cuTensorMapEncodeTiled(SA)");
  } else if (cfg.sa_mode == device::kSaKMajorTma) {
    // K-major SA: [rows of the 2D view of A, KB] with row stride ld_sa; a box of 4 K blocks x the tile's rows.
    encode_2d(args.tma_sa, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, c.sa, kb, uint64_t(c.a_rows), uint64_t(c.ld_sa) * 4,
              device::gemm_sa_row_floats(cfg.sa_mode), uint32_t(cfg.block_m), CU_TENSOR_MAP_SWIZZLE_NONE,
              "cuTensorMapEncodeTiled(SA, K-major)");
  }
  // 1x128 SB, MN-major: [KB, N_pad] with row stride ld_sb.
  if (c.sb_per_row)
    encode_mn_major_scales(args.tma_sb, c.sb, uint64_t(c.n), kb, c.ld_sb, uint32_t(cfg.block_n),
                           "cuTensorMapEncodeTiled(SB, 1x128)");
}

/// The K-grouped kernel's input descriptors. A and B are templates each CTA rewrites per group: A_g and B_g as
/// [rows, K_g] with row stride K_g bytes, here K_g = 128 until a CTA replaces address, K extent and stride. SA
/// [sum KB, M] and SB [sum KB, N] hold every group's K blocks.
void encode_k_grouped_inputs(const GemmCall& c, const KernelConfig& cfg, device::GemmArgs& args) {
  const uint64_t sum_kb = uint64_t(c.k / 128);
  args.a_box_rows = a_box_rows(c.rows, cfg);
  encode_fp8_operand(args.tma_a, c.a, device::kBlockK, uint64_t(c.rows), device::kBlockK, args.a_box_rows,
                     "cuTensorMapEncodeTiled(A, K-grouped template)");
  encode_fp8_operand(args.tma_b, c.b, device::kBlockK, uint64_t(c.n), device::kBlockK, uint32_t(cfg.block_n),
                     "cuTensorMapEncodeTiled(B, K-grouped template)");
  encode_mn_major_scales(args.tma_sa, c.sa, uint64_t(c.rows), sum_kb, c.ld_sa, uint32_t(cfg.block_m),
                         "cuTensorMapEncodeTiled(SA, K-grouped)");
  encode_mn_major_scales(args.tma_sb, c.sb, uint64_t(c.n), sum_kb, c.ld_sb, uint32_t(cfg.block_n),
                         "cuTensorMapEncodeTiled(SB, K-grouped)");
}

/// D (and C, where it is another tensor than D) as [rows of the 2D view of A, N] in the epilogue's slabs: bf16 or
/// fp32 boxes of (slab columns, 64 rows), swizzled like the shared tile. K-grouped: D as [G * M, N] fp32, reduced
/// into by TMA.
void encode_outputs(const GemmCall& c, const KernelConfig& cfg, device::GemmArgs& args) {
  const uint32_t out_bytes = device::gemm_out_bytes(cfg.output);
  const CUtensorMapDataType out_type =
      out_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const uint32_t slab_cols = device::epilogue_slab_cols(uint32_t(cfg.block_n), out_bytes);
  const CUtensorMapSwizzle out_swizzle =
      swizzle_for_bytes(device::epilogue_swizzle_bytes(uint32_t(cfg.block_n), out_bytes));
  if (cfg.output == device::kOutBf16DT) {
    // On D^T's tiles (c is the kernel's call: D's rows are its N, D's columns its rows), bf16: a box of a math
    // warpgroup's 64 columns and the tile's rows of D.
    encode_2d(args.tma_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, c.d, uint64_t(c.a_rows), uint64_t(c.n),
              uint64_t(c.ld_d) * 2, device::kWarpgroupRows, uint32_t(cfg.block_n), CU_TENSOR_MAP_SWIZZLE_128B,
              "cuTensorMapEncodeTiled(D, transposed)");
    return;
  }
  if (device::gemm_d_transposed(cfg.output)) {
    // On D^T's tiles, fp32 reduced into D: boxes of 32 columns and a part's rows of D, and, where the tile's last part
    // is narrower, a second descriptor of its height (tma_c).
    const uint32_t part_rows = device::gemm_store_cols(uint32_t(cfg.block_n), cfg.output, false);
    const uint32_t last_rows = uint32_t(cfg.block_n) % part_rows;
    encode_2d(args.tma_d, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, c.d, uint64_t(c.a_rows), uint64_t(c.n),
              uint64_t(c.ld_d) * 4, 32, part_rows, CU_TENSOR_MAP_SWIZZLE_128B, "cuTensorMapEncodeTiled(D, transposed)");
    if (last_rows != 0)
      encode_2d(args.tma_c, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, c.d, uint64_t(c.a_rows), uint64_t(c.n),
                uint64_t(c.ld_d) * 4, 32, last_rows, CU_TENSOR_MAP_SWIZZLE_128B,
                "cuTensorMapEncodeTiled(D, transposed, last part)");
    return;
  }
  auto encode = [&](device::TmaDescriptor& map, const void* base, int64_t ld, const char* what) {
    encode_2d(map, out_type, base, uint64_t(c.n), uint64_t(c.a_rows), uint64_t(ld) * out_bytes, slab_cols,
              device::kWarpgroupRows, out_swizzle, what);
  };
  encode(args.tma_d, c.d, c.ld_d, "cuTensorMapEncodeTiled(D)");
  if (device::gemm_loads_c(cfg.output)) encode(args.tma_c, c.c, c.ld_c, "cuTensorMapEncodeTiled(C)");
}

/// K-grouped: the workspace of the CTAs' descriptors (the caller's, or the device's kept by the context) and the
/// flat A and B each CTA addresses per group.
void set_k_grouped_args(const GemmCall& c, const KernelConfig& cfg, int device, device::GemmArgs& args) {
  const int64_t workspace_bytes = k_grouped_workspace_bytes_for(cfg.grid);
  CUdeviceptr workspace = reinterpret_cast<CUdeviceptr>(c.workspace);
  if (workspace == 0) {
    workspace = Context::instance().k_grouped_workspace(device, workspace_bytes);
  } else {
    check_arg(c.workspace_bytes >= workspace_bytes, "k_grouped_gemm_fp8_fp8_f32_nt", "the workspace must hold ",
              workspace_bytes, " bytes (k_grouped_workspace_bytes()), got ", c.workspace_bytes);
  }
  args.k_grouped_maps = reinterpret_cast<device::TmaDescriptor*>(workspace);
  args.a_base = static_cast<const uint8_t*>(c.a);
  args.b_base = static_cast<const uint8_t*>(c.b);
  args.total_k = int32_t(c.k);
}

/// The pointers and scalars of every kernel. K-grouped calls have MN-major SA, and their configs never pair B's
/// stages (heuristics::b_pairs_allowed): sa is null and b_pairs 0 there.
void set_common_args(const GemmCall& c, const KernelConfig& cfg, int device, device::GemmArgs& args) {
  args.num_rows = int32_t(c.rows);
  args.num_a_rows = int32_t(c.a_rows);
  args.num_groups = c.num_groups;
  args.b_evict_first = cfg.b_evict_first ? 1u : 0u;
  args.b_pairs = cfg.b_pairs ? 1u : 0u;
  args.psum_alignment = c.m_alignment;
  args.sb = static_cast<const float*>(c.sb);
  args.grouped_layout = static_cast<const int32_t*>(c.layout);
  // MN-major SA loaded once whose KB x 4 floats are contiguous (M_pad = 4) goes in one bulk copy, as SA of 5-16 rows
  // always does (build_plan keeps M_pad at most 16 there).
  const bool sa_contiguous_once = (cfg.sa_mode == device::kSaMnMajorOnce &&
                                   c.ld_sa == int64_t(device::gemm_sa_once_rows(cfg.sa_mode))) ||
                                  cfg.sa_mode == device::kSaMnMajorOnce16;
  args.sa = c.sa_k_major || sa_contiguous_once ? static_cast<const float*>(c.sa) : nullptr;
  args.ld_sa = c.ld_sa;
  args.d = static_cast<uint8_t*>(c.d);
  args.error_flags = reinterpret_cast<uint32_t*>(Context::instance().error_flags(device));
  args.ld_d = c.ld_d;
  args.d_evict_first = cfg.d_evict_first ? 1u : 0u;
  args.d_prefetch_lead = uint32_t(cfg.d_prefetch_lead);
}

/// The call as the kernel of `cfg` computes it: on D^T's tiles (gemm_d_transposed), A and B, their scales, and M and N
/// trade places (D stays the call's; B's rows are contiguous, and A's must be: build_plan). Otherwise the call itself.
GemmCall kernel_call(const GemmCall& c, const KernelConfig& cfg) {
  if (!device::gemm_d_transposed(cfg.output)) return c;
  GemmCall t = c;
  t.rows = t.a_rows = c.n;
  t.n = c.rows;
  t.a = c.b;
  t.b = c.a;
  t.lda = c.k;
  t.sa = c.sb;
  t.ld_sa = c.ld_sb;
  t.sb = c.sa;
  t.ld_sb = c.ld_sa;
  return t;
}

/// The kernel's arguments: the descriptors in the order A, B, SA, SB, D, C; then the K-grouped workspace; then the
/// pointers and scalars (with the error flags). `c`: the kernel's call (kernel_call).
void build_args(const GemmCall& c, const KernelConfig& cfg, int device, device::GemmArgs& args) {
  const bool k_grouped = c.kind == GemmKind::kGroupedK;
  if (k_grouped)
    encode_k_grouped_inputs(c, cfg, args);
  else
    encode_inputs(c, cfg, args);
  encode_outputs(c, cfg, args);
  if (k_grouped) set_k_grouped_args(c, cfg, device, args);
  set_common_args(c, cfg, device, args);
}

std::unique_ptr<LaunchPlan> build_plan(const GemmCall& c, int device, int num_sms) {
  Context& ctx = Context::instance();
  jit::Runtime& rt = ctx.runtime();
  auto plan = std::make_unique<LaunchPlan>();
  plan->config = heuristics::select_config(problem_of(c), num_sms, ctx.settings().constraints);
  // K-major SA loaded once goes by TMA too: with a stride or base TMA cannot take, the heuristic's pick with a box of
  // SA per stage (gathered below), whose shared memory it counts. MN-major SA of 5-16 rows loaded once is held with its
  // own stride, 16 floats per K block at most: with a wider one, the same.
  const bool sa_tma_aligned = c.ld_sa % 4 == 0 && reinterpret_cast<uintptr_t>(c.sa) % 16 == 0;
  const int64_t once16_max_ld = int64_t(device::gemm_sa_once_rows(device::kSaMnMajorOnce16));
  if ((plan->config.sa_mode == device::kSaKMajorOnce && !sa_tma_aligned) ||
      (plan->config.sa_mode == device::kSaMnMajorOnce16 && (!sa_tma_aligned || c.ld_sa > once16_max_ld))) {
    heuristics::ConfigConstraints per_stage = ctx.settings().constraints;
    per_stage.sa_once = 0;
    plan->config = heuristics::select_config(problem_of(c), num_sms, per_stage);
  }
  // On D^T's tiles the call's A is the kernel's B, whose rows the kernel reads contiguous: with a row stride of A
  // other than K, the heuristic's pick on D's own tiles.
  if (device::gemm_d_transposed(plan->config.output) && c.lda != c.k) {
    heuristics::ConfigConstraints own_tiles = ctx.settings().constraints;
    own_tiles.d_transposed = 0;
    plan->config = heuristics::select_config(problem_of(c), num_sms, own_tiles);
  }
  // K-major SA goes by TMA only with a row stride of a multiple of 4 floats and a 16-byte aligned base (TMA's stride
  // and address rules); otherwise the same tile with the scales gathered (it needs less shared memory).
  // The gathering kernels have no wide tail (device::gemm_wide_tail): their last row block runs as full tiles.
  if (plan->config.sa_mode == device::kSaKMajorTma && !sa_tma_aligned) {
    plan->config.sa_mode = device::kSaKMajorGather;
    plan->config.wide_tail = false;
  }
  const KernelConfig& cfg = plan->config;
  auto binary = rt.binary(gemm_spec(cfg));
  plan->function = rt.function(*binary);
  // A clustered grid launches no more clusters than fit on the device at once (the SMs of a GPC need not divide by
  // the cluster size): a persistent CTA then never waits for another to leave its SM.
  if (cfg.cluster_size() > 1)
    plan->config.grid = std::min(cfg.grid, cfg.cluster_size() * max_active_clusters(plan->function, cfg));
  if (ctx.settings().print_configs)
    std::fprintf(stderr, "finegemm: %s M=%lld N=%lld K=%lld G=%d -> %s\n", kind_name(c.kind),
                 static_cast<long long>(c.rows), static_cast<long long>(c.n), static_cast<long long>(c.k), c.num_groups,
                 cfg.describe().c_str());
  build_args(kernel_call(c, cfg), cfg, device, plan->args);
  plan->pdl_args = plan->args;
  plan->pdl_args.pdl_prefetch_b_blocks = uint32_t(cfg.pdl_prefetch_b_blocks);
  return plan;
}

void launch(const LaunchPlan& plan, Stream stream) {
  const bool pdl = Context::instance().pdl();
  void* params[] = {const_cast<device::GemmArgs*>(pdl ? &plan.pdl_args : &plan.args)};
  jit::launch_kernel(plan.function, launch_shape(plan.config, pdl),
                     reinterpret_cast<CUstream>(stream), params, "cuLaunchKernelEx(fp8 gemm)");
}

/// The plans of the calls made so far, by their arguments.
using PlanCache = BoundedCache<ArgumentKey, std::shared_ptr<const LaunchPlan>, ArgumentKeyHash>;

PlanCache& plan_cache() {
  static PlanCache cache;
  return cache;
}

/// The plan of the call whose arguments `key` holds (the device and SM limit are set here): an earlier call's, or
/// built after `validate()`, which returns the GemmCall or throws on bad arguments. Null where there is nothing to
/// compute. Without a driver the arguments are validated all the same before the driver's absence is reported.
template <typename Validate>
std::shared_ptr<const LaunchPlan> plan_for(ArgumentKey& key, const Validate& validate) {
  if (!jit::driver_available()) [[unlikely]] {
    const GemmCall call = validate();
    if (call.rows == 0 || call.num_groups == 0) return nullptr;
    driver();  // throws: why there is no driver
  }
  Context& ctx = Context::instance();
  const int device = ctx.runtime().current_device();
  key.device = device;
  key.requested_sms = ctx.requested_sms();
  if (std::shared_ptr<const LaunchPlan> plan = plan_cache().find(key)) return plan;
  const GemmCall call = validate();
  if (call.rows == 0 || call.num_groups == 0) return nullptr;  // nothing to compute
  // A new plan: first where the call's pointers live (asked of the driver once per set of arguments).
  ctx.check_hopper(device, "device");
  check_device_pointers(call, device);
  return plan_cache().add(key, build_plan(call, device, ctx.num_sms(device)));
}

/// Launches the plan of the call whose arguments `key` holds (see plan_for), if there is anything to compute.
template <typename Validate>
void run(ArgumentKey& key, const Validate& validate, Stream stream) {
  if (std::shared_ptr<const LaunchPlan> plan = plan_for(key, validate)) launch(*plan, stream);
}

}  // namespace

void gemm_fp8_fp8_bf16_nt(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                          const TensorView& d, Stream stream) {
  ArgumentKey key(GemmKind::kNormal, {&a, &sa, &b, &sb, &d});
  run(key, [&] { return validate_normal(a, sa, b, sb, d); }, stream);
}

void gemm_fp8_fp8_nt(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                     const TensorView& d, const std::optional<TensorView>& c, Stream stream) {
  const TensorView* pc = c ? &*c : nullptr;
  // One view more than the bf16 call's key (C, or its absence): the two entry points never share a plan.
  ArgumentKey key(GemmKind::kNormal, {&a, &sa, &b, &sb, &d, pc});
  run(key, [&] { return validate_dense(a, sa, b, sb, d, pc); }, stream);
}

void m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(const TensorView& a, const TensorView& sa, const TensorView& b,
                                               const TensorView& sb, const TensorView& d,
                                               const TensorView& m_indices, Stream stream, int m_alignment) {
  ArgumentKey key(GemmKind::kGroupedContiguous, {&a, &sa, &b, &sb, &d, &m_indices});
  key.scalars[0] = m_alignment;
  run(key, [&] { return validate_contiguous(a, sa, b, sb, d, m_indices, m_alignment); }, stream);
}

void m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(const TensorView& a, const TensorView& sa, const TensorView& b,
                                               const TensorView& sb, const TensorView& d,
                                               const TensorView& m_indices, Stream stream) {
  m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a, sa, b, sb, d, m_indices, stream, get_m_alignment_for_contiguous_layout());
}

void k_grouped_gemm_fp8_fp8_f32_nt(const TensorView& a, const TensorView& sa, const TensorView& b,
                                   const TensorView& sb, const TensorView& d, const std::vector<int64_t>& ks,
                                   const TensorView& ks_device, bool accumulate,
                                   const std::optional<TensorView>& workspace, Stream stream) {
  // Validated at every call: the K_g are host values that may change between calls with the same tensors.
  const TensorView* pw = workspace ? &*workspace : nullptr;
  const GemmCall call = validate_k_grouped(a, sa, b, sb, d, ks, ks_device, accumulate, pw);
  if (call.rows == 0 || call.num_groups == 0) return;  // nothing to compute
  // Every expert empty: no kernel (D stays as it is, or zero).
  std::shared_ptr<const LaunchPlan> plan;
  if (call.k > 0) {
    ArgumentKey key(GemmKind::kGroupedK, {&a, &sa, &b, &sb, &d, &ks_device, pw});
    key.scalars[0] = call.k;
    key.scalars[1] = call.expected_k;
    plan = plan_for(key, [&] { return call; });
  }
  // Without accumulation the kernel adds into D (and skips empty experts), so D starts at zero.
  if (call.zero_d)
    check_cu(driver().cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(call.d), 0,
                                       size_t(call.a_rows) * size_t(call.n), reinterpret_cast<CUstream>(stream)),
             "cuMemsetD32Async(D)");
  if (plan) launch(*plan, stream);
}

int64_t k_grouped_workspace_bytes(int num_sms) {
  if (num_sms <= 0) num_sms = jit::driver_available() ? get_num_sms() : kDefaultNumSms;
  return k_grouped_workspace_bytes_for(num_sms);
}

void m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(const TensorView& a, const TensorView& sa, const TensorView& b,
                                                    const TensorView& sb, const TensorView& d,
                                                    const TensorView& group_ends, int expected_m, Stream stream,
                                                    int m_alignment) {
  ArgumentKey key(GemmKind::kGroupedContiguousPsum, {&a, &sa, &b, &sb, &d, &group_ends});
  key.scalars[0] = expected_m;
  key.scalars[1] = m_alignment;
  run(key, [&] { return validate_contiguous_psum(a, sa, b, sb, d, group_ends, expected_m, m_alignment); }, stream);
}

void m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(const TensorView& a, const TensorView& sa, const TensorView& b,
                                                    const TensorView& sb, const TensorView& d,
                                                    const TensorView& group_ends, int expected_m, Stream stream) {
  m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(a, sa, b, sb, d, group_ends, expected_m, stream,
                                                 get_m_alignment_for_contiguous_layout());
}

void m_grouped_gemm_fp8_fp8_bf16_nt_masked(const TensorView& a, const TensorView& sa, const TensorView& b,
                                           const TensorView& sb, const TensorView& d, const TensorView& masked_m,
                                           int expected_m, Stream stream) {
  ArgumentKey key(GemmKind::kGroupedMasked, {&a, &sa, &b, &sb, &d, &masked_m});
  key.scalars[0] = expected_m;
  run(key, [&] { return validate_masked(a, sa, b, sb, d, masked_m, expected_m); }, stream);
}

uint32_t device_error_flags() {
  Context& ctx = Context::instance();
  const int device = ctx.runtime().current_device();
  const jit::DriverApi& cu = driver();
  check_cu(cu.cuCtxSynchronize(), "cuCtxSynchronize");
  uint32_t flags = 0;
  check_cu(cu.cuMemcpyDtoH(&flags, ctx.error_flags(device), sizeof(flags)), "cuMemcpyDtoH(error flags)");
  return flags;
}

void reset_device_error_flags() {
  Context& ctx = Context::instance();
  const int device = ctx.runtime().current_device();
  check_cu(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  check_cu(driver().cuMemsetD32(ctx.error_flags(device), 0, 1), "cuMemsetD32(error flags)");
}

void set_pdl(bool enabled) { Context::instance().set_pdl(enabled); }

bool get_pdl() { return Context::instance().pdl(); }

int get_num_sms() {
  Context& ctx = Context::instance();
  return ctx.num_sms(ctx.runtime().current_device());
}

void set_num_sms(int num_sms) {
  check_arg(num_sms >= 0, "set_num_sms", "num_sms must be >= 0 (0 restores all SMs), got ", num_sms);
  Context::instance().set_num_sms(num_sms);
}

bool is_supported(const Problem& problem, std::string* reason) {
  try {
    check_problem(problem);
    heuristics::select_config(problem, jit::driver_available() ? get_num_sms() : kDefaultNumSms,
                              Context::instance().settings().constraints);
    return true;
  } catch (const Error& e) {
    if (reason != nullptr) *reason = e.message();
    return false;
  }
}

std::string describe_config(const Problem& problem, int num_sms) {
  check_problem(problem);
  if (num_sms <= 0) num_sms = jit::driver_available() ? get_num_sms() : kDefaultNumSms;
  return heuristics::select_config(problem, num_sms, Context::instance().settings().constraints).describe();
}

bool precompile(const Problem& problem, int num_sms) {
  check_problem(problem);
  check_arg(num_sms > 0, "precompile", "num_sms must be > 0, got ", num_sms);
  const KernelConfig config = heuristics::select_config(problem, num_sms, Context::instance().settings().constraints);
  bool compiled_now = false;
  Context::instance().runtime().binary(gemm_spec(config), &compiled_now);
  return compiled_now;
}

JitStats jit_stats() { return Context::instance().runtime().stats(); }

std::string cache_dir() { return Context::instance().runtime().cache_dir(); }

}  // namespace finegemm
