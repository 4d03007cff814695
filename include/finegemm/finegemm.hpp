// finegemm: FP8 GEMMs with fine-grained scaling for NVIDIA Hopper (sm_90a), compiled at run time.
//
// This is the only header users include. It has no CUDA, PyTorch or Python dependency: device pointers and
// streams are passed as plain values (`Stream` is the same type as `cudaStream_t` and `CUstream`).
//
// Conventions shared by every GEMM below
//  - Row-major tensors described by `TensorView` (device pointer, dtype, shape, strides in elements).
//  - FP8 is e4m3 (OCP E4M3FN). Scales are fp32 dequantization factors: real = fp8 * scale.
//  - K is blocked by 128 (`KB = ceil(K/128)`), N by 128 for the weight scales (`NB = ceil(N/128)`).
//  - Activation scales SA (one per row per 128-wide K block) come in either of two layouts, detected from strides:
//      * MN-major, TMA-aligned (free): shape [M, KB], strides {1, M_pad} with M_pad = get_tma_aligned_size(M, 4),
//        i.e. element (m, kb) at kb * M_pad + m. This is what cuBLASLt and DeepGEMM take.
//      * K-major (also supported, no extra kernel): shape [M, KB], strides {KB, 1}, as a per-token quantizer writes it.
//        With M >= 1024 and KB >= 32 a multiple of 4 (row stride a multiple of 4 floats, base 16-byte aligned) the
//        kernel reads them by TMA, a box of 4 K blocks per stage: on an H100, 1.7-3.5% slower than MN-major scales at
//        the seed shapes with K = 7168 and 16384. Otherwise it gathers them with 4-byte asynchronous copies: 1-18%
//        slower at M = 64 and 128, 5-12% at the larger seed shapes with K <= 2048 (H100). For the fastest calls, pass
//        MN-major scales (get_col_major_tma_aligned_tensor in Python converts).
//  - Weight scales SB: [NB, KB] row-major (as stored in checkpoints), [G, NB, KB] for grouped GEMMs.
//  - Output D: bf16 row-major with 16-byte aligned rows (N % 8 == 0).
//  - Alignment: every base pointer 16-byte aligned; K % 16 == 0 (16-byte TMA row stride of A and B); N % 8 == 0.
//    Any M >= 1 is valid; M == 0 is a no-op.
//  - Speed: a K that is a multiple of 128 is fastest. On an H100, 4096x7168x576 measured 20% slower than
//    4096x7168x640 (rows of A and B then start off 128-byte lines); A passed with a row stride that is a multiple of
//    128 bytes took back a quarter of that.
//  - Every call is asynchronous on `stream`, does not synchronize, allocates no device memory once warm, and is legal
//    inside CUDA-graph capture once its kernel is compiled (the first call of a new shape compiles it: warm up first).
//  - Errors are thrown as `finegemm::Error` before anything is enqueued; no output is touched on error.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

struct CUstream_st;

namespace finegemm {

/// A CUDA stream handle; identical to `cudaStream_t` and `CUstream`. nullptr is the legacy default stream.
using Stream = CUstream_st*;

/// Element types of tensors passed to finegemm.
enum class DType : int { kFloat8E4M3 = 0, kBFloat16 = 1, kFloat32 = 2, kInt32 = 3 };

/// Size of one element of `dtype`, in bytes.
int dtype_size(DType dtype);
/// Human-readable name of `dtype` ("float8_e4m3fn", "bfloat16", "float32", "int32").
const char* dtype_name(DType dtype);

/// A non-owning view of a device tensor. Strides are in elements; rank is 1..3.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  int rank = 0;
  int64_t shape[3] = {0, 0, 0};
  int64_t strides[3] = {0, 0, 0};

  /// A contiguous row-major view of `shape`.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape);
  /// A view with explicit strides (in elements).
  static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> strides);
  int64_t numel() const;
  std::string describe() const;  ///< e.g. "float32[64, 56] strides {1, 64}"
};

/// The one exception type of finegemm. `what()` reads "finegemm: <where>: <message>".
class Error : public std::runtime_error {
 public:
  enum class Kind { kInvalidArgument, kUnsupported, kTypeMismatch, kCuda, kCompile, kInternal };
  Error(Kind kind, std::string where, std::string message);
  Kind kind() const { return kind_; }
  const std::string& where() const { return where_; }
  const std::string& message() const { return message_; }

 private:
  Kind kind_;
  std::string where_;
  std::string message_;
};

// ----------------------------------------------------------------------------------------------
// GEMMs
// ----------------------------------------------------------------------------------------------

/// D[M,N] (bf16) = A[M,K] (fp8, scales SA 1x128) x B[N,K]^T (fp8, scales SB 128x128).
/// `a`: fp8 [M, K] row-major. `sa`: fp32 [M, KB] in either layout above. `b`: fp8 [N, K] row-major.
/// `sb`: fp32 [NB, KB] row-major. `d`: bf16 [M, N] row-major (row stride may exceed N, multiple of 8).
void gemm_fp8_fp8_bf16_nt(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                          const TensorView& d, Stream stream = nullptr);

/// D[M,N] = A[M,K] x B[N,K]^T (+ C), the general dense form: fp32 or bf16 output, optional accumulation, and B's scales
/// either per 128x128 block (weights, as above) or per 1x128 row block (the weight-gradient GEMM of FP8 training,
/// where both operands are activations or gradients quantized along the token dimension, the K of this GEMM).
/// `a`, `sa`: as for gemm_fp8_fp8_bf16_nt. `b`: fp8 [N, K] row-major. `sb`: fp32, one of
///   * [NB, KB] row-major: one scale per 128x128 block of B;
///   * [N, KB] MN-major and TMA-aligned, strides {1, N_pad} with N_pad = get_tma_aligned_size(N, 4) (N % 8 == 0
///     makes N_pad = N): one scale per row of B per 128-wide K block (what per_token_cast_to_fp8 writes with MN-major
///     scales).
///   The shape tells them apart (N > NB for every valid N).
/// `d`: bf16 or fp32 [M, N], N-contiguous, row stride a multiple of 16 bytes. `c`: nullopt, or fp32 [M, N] with the
/// same rules (it may be `d` itself, then with d's strides, or a tensor that does not overlap d): D = C + A x B^T with
/// fp32 D only. The sum is the fp32 product plus C's value, rounded once.
void gemm_fp8_fp8_nt(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                     const TensorView& d, const std::optional<TensorView>& c, Stream stream = nullptr);

/// MoE grouped GEMM, contiguous layout. `a`: fp8 [M_sum, K], each expert's rows starting at a multiple of
/// `m_alignment` rows: 128 (get_m_alignment_for_contiguous_layout()) or 64, which runs on 64-row tiles only (less
/// padding for experts with few rows; 32 is refused: the psum layout runs it). `sa`: [M_sum, KB]. `b`: fp8 [G, N, K].
/// `sb`: [G, NB, KB]. `d`: bf16 [M_sum, N]. `m_indices`: int32 [M_sum] on the device, the expert of each row, -1 for
/// padding rows. Padding rows of `d` are left untouched. Rows with an expert id outside [-1, G) are treated as padding
/// (skipped, never read or written out of bounds) and raise the device error flag (see device_error_flags()). The
/// kernel takes each block of rows (its tile height, 64 to 256; 128-row halves of 256) for the expert of its first
/// row: in a block whose last row names another expert (a block where an expert ends), a row naming neither that
/// expert nor -1 is left untouched and raises kDeviceErrorExpertIdInconsistent; in a block whose first and last rows
/// agree, every row is computed as that expert's (a wrong id strictly inside it is not detected). An expert starting
/// off the alignment is such an error too.
void m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(const TensorView& a, const TensorView& sa, const TensorView& b,
                                               const TensorView& sb, const TensorView& d,
                                               const TensorView& m_indices, Stream stream = nullptr);
/// The same with experts aligned to `m_alignment` rows (128 or 64).
void m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(const TensorView& a, const TensorView& sa, const TensorView& b,
                                               const TensorView& sb, const TensorView& d,
                                               const TensorView& m_indices, Stream stream, int m_alignment);

/// MoE grouped GEMM, contiguous layout given by each group's end row ("psum" layout: DeepGEMM's
/// use_psum_layout=True, as DeepEP v2 and training frameworks write it). `a`, `sa`, `b`, `sb`, `d` as in
/// m_grouped_gemm_fp8_fp8_bf16_nt_contiguous (M_sum < 2^31 - 256). `group_ends`: int32 [G] on the device, never read
/// on the host; group g holds rows [align(end[g-1], m_alignment), end[g]) (end[-1] = 0), so ends never decrease and an
/// empty group's end is its start. `m_alignment`: 128, 64 or 32 (the same kernels for each: tiles start at
/// their group's start). Rows between a group's end and the next group's start, and rows at or past end[G-1], are
/// padding: they cost nothing (no tile holds them) and their rows of `d` are left untouched. Invalid ends (below the
/// group's start, or past M_sum for a group with rows) are clamped to the rows that exist, never read or written out
/// of bounds, and raise kDeviceErrorGroupEndInvalid. `expected_m` (>= 0): a host-side hint of the typical rows per
/// group, used only to choose the kernel configuration; 0 assumes M_sum / G. Asynchronous and graph-capturable like
/// the others: the ends may change between CUDA-graph replays.
void m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(const TensorView& a, const TensorView& sa, const TensorView& b,
                                                    const TensorView& sb, const TensorView& d,
                                                    const TensorView& group_ends, int expected_m = 0,
                                                    Stream stream = nullptr);
/// The same with groups aligned to `m_alignment` rows (128, 64 or 32).
void m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(const TensorView& a, const TensorView& sa, const TensorView& b,
                                                    const TensorView& sb, const TensorView& d,
                                                    const TensorView& group_ends, int expected_m, Stream stream,
                                                    int m_alignment);

/// MoE grouped GEMM, masked layout (decoding under CUDA graphs). `a`: fp8 [G, M_max, K]. `sa`: [G, M_max, KB]
/// (MN-major per group: strides {KB*M_pad, 1, M_pad}; or K-major). `b`: [G, N, K]. `sb`: [G, NB, KB].
/// `d`: bf16 [G, M_max, N]. `masked_m`: int32 [G] on the device; only rows < masked_m[g] of group g are computed,
/// the rest of `d` is left untouched. Values above M_max are clamped to M_max and raise the device error flag.
/// `expected_m` (> 0) is a host-side hint of the typical masked_m, used only to choose the kernel configuration.
void m_grouped_gemm_fp8_fp8_bf16_nt_masked(const TensorView& a, const TensorView& sa, const TensorView& b,
                                           const TensorView& sb, const TensorView& d, const TensorView& masked_m,
                                           int expected_m, Stream stream = nullptr);

/// MoE weight gradient, K-grouped (DeepGEMM's k_grouped_fp8_gemm_nt_contiguous on SM90): for each expert g with
/// K_g tokens, D[g] (fp32 [M, N]) = C[g] + A_g x B_g^T, where A_g is fp8 [M, K_g] and B_g fp8 [N, K_g], both K-major
/// and scaled per 1x128 block along K (the tokens). The experts' blocks lie back to back:
/// `a`: fp8 [sum_g M * K_g], flat: A_g's [M, K_g] row-major block starts at element M * (K_0 + ... + K_{g-1}).
/// `sa`: fp32 [M, sum_g K_g / 128] MN-major, strides {1, M}: expert g's K blocks from column
/// (K_0 + ... + K_{g-1}) / 128. `b`, `sb`: likewise with N. `d`: fp32 [G, M, N], contiguous. `ks`: the K_g on the host
/// (each a multiple of 128, 0 for an expert without tokens; their sum the K extent of `a` and `b`); `ks_device`: int32
/// [G] on the device with the same values, the ones the kernel reads (they may change between CUDA-graph replays,
/// keeping the sum; a K_g that is negative, not a multiple of 128 or reaching past the sum leaves D[g] as it is and
/// raises kDeviceErrorGroupKInvalid). `accumulate`: true, D += A_g x B_g^T (C is D; an empty expert's D[g] is
/// untouched); false, D[g] = A_g x B_g^T (D is zeroed first by a memset on `stream`, so an empty expert's D[g] is
/// zero).
/// M % 8 == 0 and N % 8 == 0 (16-byte TMA strides of D and the scales); M, N >= 1. `workspace`: device memory of at
/// least k_grouped_workspace_bytes() bytes, 128-byte aligned, where the kernel writes each CTA's per-expert TMA
/// descriptors; nullopt uses one buffer per device kept by finegemm, so calls without a workspace must not run
/// concurrently (on different streams) with each other.
void k_grouped_gemm_fp8_fp8_f32_nt(const TensorView& a, const TensorView& sa, const TensorView& b,
                                   const TensorView& sb, const TensorView& d, const std::vector<int64_t>& ks,
                                   const TensorView& ks_device, bool accumulate,
                                   const std::optional<TensorView>& workspace = std::nullopt, Stream stream = nullptr);

/// Bytes of the workspace k_grouped_gemm_fp8_fp8_f32_nt needs on a GPU of `num_sms` SMs (0: the current device's):
/// four 128-byte TMA descriptors per CTA.
int64_t k_grouped_workspace_bytes(int num_sms = 0);

/// Bits set by kernels when they met device-side data they could not use (reset with reset_device_error_flags).
enum DeviceErrorFlag : uint32_t {
  kDeviceErrorNone = 0,
  kDeviceErrorExpertIdOutOfRange = 1u << 0,  ///< m_indices held a value >= G or < -1: those rows were skipped.
  kDeviceErrorMaskedMTooLarge = 1u << 1,     ///< masked_m[g] > M_max: clamped to M_max.
  /// Contiguous layout: a row of a block where an expert ends held an expert other than the block's and -1: the row
  /// was left untouched.
  kDeviceErrorExpertIdInconsistent = 1u << 2,
  /// Psum layout: a group's end was below its start (the previous end rounded up to the alignment) or past M_sum: the
  /// group kept only the rows that exist between the two (none, or up to M_sum).
  kDeviceErrorGroupEndInvalid = 1u << 3,
  /// K-grouped: a K_g of ks_device was negative, not a multiple of 128, or reached past the K extent of A and B: that
  /// expert's D[g] was left as it was.
  kDeviceErrorGroupKInvalid = 1u << 4,
};
/// Reads the device error flags of the current device (synchronizes the current context).
uint32_t device_error_flags();
void reset_device_error_flags();

// ----------------------------------------------------------------------------------------------
// Queries
// ----------------------------------------------------------------------------------------------

/// The default row alignment of each expert's segment in the contiguous layouts (128); the contiguous GEMMs also take
/// 64 (and the psum layout 32) through their `m_alignment` argument.
int get_m_alignment_for_contiguous_layout();
/// `x` rounded up so that x * element_size is a multiple of 16 bytes (TMA stride rule).
int64_t get_tma_aligned_size(int64_t x, int element_size);
/// Number of SMs the kernels use on the current device (FINEGEMM_NUM_SMS or set_num_sms overrides).
int get_num_sms();
/// Limit the kernels to `num_sms` SMs (1..device SMs); 0 restores the default.
void set_num_sms(int num_sms);
/// Programmatic dependent launch (PDL) for the GEMMs and quantizers this process launches from now on (default: off,
/// or FINEGEMM_PDL=1). With it, a kernel may be launched while the previous kernel on its stream still runs: its CTAs
/// set up as SMs free, and every thread waits for the previous kernel's completion (griddepcontrol.wait) before it
/// touches global memory, so results are the same. It pays in chains of short kernels (decoding). It relaxes the
/// order for the kernel after a finegemm one only if that kernel is itself launched with PDL: such a kernel must
/// wait (cudaGridDependencySynchronize) before reading finegemm's output. Captured into CUDA graphs as programmatic
/// edges.
void set_pdl(bool enabled);
bool get_pdl();

/// Kinds of GEMM finegemm implements (kGroupedContiguousPsum: the contiguous layout given by group ends; kGroupedK:
/// the K-grouped weight gradient, k_grouped_gemm_fp8_fp8_f32_nt).
enum class GemmKind : int {
  kNormal = 0,
  kGroupedContiguous = 1,
  kGroupedMasked = 2,
  kGroupedContiguousPsum = 3,
  kGroupedK = 4,
};

/// A GEMM problem as the heuristic sees it.
struct Problem {
  GemmKind kind = GemmKind::kNormal;
  int64_t m = 0;           ///< rows (normal), M_sum (contiguous), expected rows per group (masked, psum), M (K-grouped)
  int64_t n = 0;
  int64_t k = 0;           ///< K; K-grouped: the expected K per group (sum / G), for the time model only
  int num_groups = 1;
  int64_t m_max = 0;       ///< masked only: M_max
  bool sa_k_major = false; ///< SA given K-major ([M, KB] row-major)
  /// normal: B's scales per 1x128 row block ([N, KB]) instead of per 128x128 block; K-grouped: must be true
  bool sb_per_row = false;
  DType d_dtype = DType::kBFloat16;  ///< normal: kBFloat16 or kFloat32; K-grouped: kFloat32
  bool accumulate = false; ///< normal: D = C + A x B^T (fp32 D); K-grouped: must be true (C = None zeroes D first)
  bool c_is_d = true;      ///< with accumulate: C is D itself (D += A x B^T), or another tensor
  /// contiguous, psum: the rows each group's start is a multiple of (128, 64, or 32 for psum only); with m_indices,
  /// 64 leaves the heuristic 64-row tiles only
  int m_alignment = 128;
};

/// Answers "would this call be accepted?" without throwing. On false, `reason` (if given) says what to change.
bool is_supported(const Problem& problem, std::string* reason = nullptr);

/// The kernel configuration chosen for a problem (printable; also printed when FINEGEMM_PRINT_CONFIGS=1).
std::string describe_config(const Problem& problem, int num_sms = 0);

// ----------------------------------------------------------------------------------------------
// Ahead-of-time compilation and the JIT cache
// ----------------------------------------------------------------------------------------------

/// Compiles (or finds in the cache) the kernel the heuristic picks for `problem` on a GPU of `num_sms` SMs, without
/// needing a GPU. Returns true when it had to compile. Thread-safe; used by `finegemm warmup`.
bool precompile(const Problem& problem, int num_sms);

/// Statistics of the JIT in this process.
struct JitStats {
  uint64_t compiles = 0;         ///< kernels compiled by this process
  uint64_t disk_hits = 0;        ///< kernels loaded from the disk cache
  uint64_t memory_hits = 0;      ///< lookups served by the in-memory map
  double compile_seconds = 0.0;  ///< total wall time spent compiling
};
JitStats jit_stats();

/// The cache directory in use ("" when the disk cache is disabled because it is not writable).
std::string cache_dir();

/// Library version, e.g. "0.1.0".
const char* version();

// ----------------------------------------------------------------------------------------------
// Quantizers (on the GPU, through the same JIT)
// ----------------------------------------------------------------------------------------------
// Both compute, per block: amax = max |x|, scale = max(amax, 2^-64) / 448 and out = e4m3(x / scale), with IEEE
// division and round-to-nearest-even saturating conversion (finite values beyond +-448 become +-448): bit-exact with
// finegemm's CPU reference (and with the same formula evaluated in fp32 by any IEEE-conforming implementation).
// Inputs must be finite. Common rules: `x` is bf16 or fp32 with K contiguous, 16-byte aligned, row stride a multiple
// of 8 elements; `out` is fp8 of x's shape with K contiguous, 8-byte aligned, row stride a multiple of 8; K % 8 == 0
// (the last 128-wide block may be partial). `scales` may use any strides whose elements do not overlap. Rank 3
// inputs are G independent matrices. Asynchronous on `stream`, graph-capturable once warm, like the GEMMs.

/// 1x128 per-token quantization of activations: one scale per row per 128-wide K block.
/// `x`: bf16/fp32 [M, K] or [G, M, K]. `out`: fp8, same shape. `scales`: fp32 [M, KB] or [G, M, KB]; give it
/// MN-major TMA-aligned strides ({1, M_pad} or {KB * M_pad, 1, M_pad}, M_pad = get_tma_aligned_size(M, 4)) to get
/// the SA layout the GEMMs read for free, or K-major ({KB, 1}).
void per_token_cast_to_fp8(const TensorView& x, const TensorView& out, const TensorView& scales,
                           Stream stream = nullptr);

/// 128x128 per-block quantization of weights: one scale per 128x128 block (partial blocks at the edges allowed).
/// `x`: bf16/fp32 [N, K] or [G, N, K]. `out`: fp8, same shape. `scales`: fp32 [NB, KB] or [G, NB, KB] (row-major is
/// the SB layout the GEMMs take).
void per_block_cast_to_fp8(const TensorView& x, const TensorView& out, const TensorView& scales,
                           Stream stream = nullptr);

}  // namespace finegemm
