// CPU reference numerics for finegemm: FP8/BF16 conversions, the 1x128 and 128x128 quantizers, scale layouts,
// random problem generation, the dequantized fp64 reference GEMM (B's scales per 128x128 block or per 1x128 row block,
// with or without C) and the output checks (bf16 and fp32) of DESIGN.md section 4.
//
// Everything here runs on the host, depends on nothing but the C++ standard library, and is deterministic: the same
// inputs (and seeds) give bit-identical results on every run and with any number of threads.
// Invalid arguments throw std::invalid_argument.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace finegemm::reference {

// ---- Format constants -------------------------------------------------------------------------------------------

inline constexpr int kBlockK = 128;               // K extent of one scale block (both operands)
inline constexpr int kBlockN = 128;               // N extent of one weight scale block
inline constexpr float kE4M3Max = 448.0f;         // largest finite e4m3 value
inline constexpr uint8_t kE4M3NaN = 0x7F;         // canonical e4m3 NaN (the only other NaN code is 0xFF)
inline constexpr uint8_t kE4M3MaxCode = 0x7E;     // +448
inline constexpr int kScaleAlignMN = 4;           // MN-major SA: M padded to 4 floats (16-byte TMA stride rule)
inline constexpr uint16_t kBf16Poison = 0xFFFF;   // a negative NaN: fill outputs with it to catch unwritten elements
inline constexpr uint32_t kF32Poison = 0xFFFFFFFF;  // the same for fp32 outputs

// ---- Conversions --------------------------------------------------------------------------------------------------
// All conversions are bit-exact with CUDA's host implementations in <cuda_fp8.h> / <cuda_bf16.h> except where noted.

// float -> e4m3 (OCP E4M3FN), round to nearest even. Finite values beyond +-448 (and +-inf) saturate to +-448 (as
// __NV_SATFINITE does). Any NaN gives the canonical 0x7F (sign dropped, as CUDA's float path does). The sign of zero
// is kept: -0.0f and negative values that round to zero give 0x80.
uint8_t float_to_e4m3(float x);
// e4m3 -> float, exact. 0x7F and 0xFF decode to NaN (of either sign); 0x80 decodes to -0.0f.
float e4m3_to_float(uint8_t code);
// The 256 decoded values, indexed by code (e4m3_to_float as a table).
const float* e4m3_decode_table();

// float -> bf16 bits, round to nearest even; +-inf stay +-inf. A NaN stays a NaN with its sign and the top 7 payload
// bits, made quiet (CUDA instead returns the canonical 0x7FFF for every NaN: equal up to sign and payload).
uint16_t float_to_bf16(float x);
// double -> bf16 bits with a single rounding (nearest even), not the double rounding of float_to_bf16(float(x)).
uint16_t double_to_bf16(double x);
float bf16_to_float(uint16_t bits);

// ---- Index helpers ------------------------------------------------------------------------------------------------

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t align_up(int64_t x, int64_t a) { return ceil_div(x, a) * a; }

// ---- Quantization -------------------------------------------------------------------------------------------------

// FP8 codes plus fp32 dequantization scales: real value ~= e4m3_to_float(data[i]) * scale of i's block.
struct QuantizedMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> data;  // [rows, cols] row-major
  std::vector<float> scales;  // per_token: [rows, KB] row-major (K-major); per_block: [ceil(rows/128), KB] row-major
};

// Smallest block amax the quantizers use. A block whose amax is below it (in particular an all-zero block) gets the
// scale kMinAmax / 448 (about 1.2e-22: tiny, positive, a normal float), so no scale is ever 0, inf or NaN and x / scale
// never overflows.
inline constexpr float kMinAmax = 0x1p-64f;

// 1x128 per-token quantization of activations x [rows, cols] (row-major, contiguous): for each row and each 128-wide
// K block (the last one may be partial), scale = max(amax, kMinAmax) / 448 and q = float_to_e4m3(x / scale).
// Every input must be finite.
QuantizedMatrix quantize_per_token(const float* x, int64_t rows, int64_t cols);
// 128x128 per-block quantization of weights w [rows = N, cols = K]: the same rule over each 128x128 block (partial
// blocks at the bottom and right edges allowed). Every input must be finite.
QuantizedMatrix quantize_per_block(const float* w, int64_t rows, int64_t cols);
// Dequantized values [rows, cols] of a quantize_per_token / quantize_per_block result.
std::vector<float> dequantize_per_token(const QuantizedMatrix& q);
std::vector<float> dequantize_per_block(const QuantizedMatrix& q);

// ---- Scale layouts ------------------------------------------------------------------------------------------------

// K-major activation scales [m, kb] (row-major) -> MN-major TMA-aligned: element (row, kb_idx) at kb_idx * M_pad + row,
// M_pad = align_up(m, 4); the padding entries are 0. Result size kb * M_pad.
std::vector<float> scales_to_mn_major(const std::vector<float>& k_major, int64_t m, int64_t kb);
// The inverse: MN-major TMA-aligned (kb * align_up(m, 4) floats) -> K-major [m, kb]. Padding entries are ignored.
std::vector<float> scales_from_mn_major(const std::vector<float>& mn_major, int64_t m, int64_t kb);

// ---- Random problems (deterministic per seed, std::mt19937_64) --------------------------------------------------

// Fills `out` (at its current size) with fp8 codes drawn uniformly from the 254 finite codes (never 0x7F / 0xFF).
void fill_random_fp8(std::vector<uint8_t>& out, uint64_t seed);
// Fills `out` (at its current size) with scales log-uniform over [2^lo_exp, 2^hi_exp]; -126 <= lo_exp <= hi_exp <= 127.
void fill_random_scales(std::vector<float>& out, uint64_t seed, int lo_exp = -10, int hi_exp = 10);
// Fills `out` (at its current size) with normally distributed floats (mean 0, standard deviation `stddev`).
void fill_random_normal(std::vector<float>& out, uint64_t seed, float stddev = 1.0f);
// Model-like operands: standard normal values quantized as the quantizers above do, in blocks of `block_rows` x 128
// (1: per token, as activations; 128: per block, as weights), written straight into `codes` [rows, cols] and
// `scales` (K-major: [ceil(rows / block_rows), KB]), both resized. This is what DeepGEMM's tests feed the kernels;
// uniform codes (fill_random_fp8) spread over every exponent and flip more bits per product, which spends more
// power. Bands of block rows are drawn on all hardware threads, each from its own seeded generator:
// the result depends on the seed only.
void fill_quantized_normal_fp8(std::vector<uint8_t>& codes, std::vector<float>& scales, int64_t rows, int64_t cols,
                               int64_t block_rows, uint64_t seed);

// ---- Reference GEMM -----------------------------------------------------------------------------------------------

// The dequantized reference of the normal GEMM (NT), computed in fp64:
//   D[m,n] = sum over kb = 0, 1, ..., KB-1 (in that order) of (double(SA[m,kb]) * double(SB[n/128,kb])) * S(m,n,kb),
//   S(m,n,kb) = sum_{k in block kb} A[m,k] * B[n,k].
// Each S is exact (a product of two e4m3 values is a multiple of 2^-18 below 2^18, so 128 of them sum exactly in the
// 53-bit fp64 significand) and so is SA*SB (two 24-bit significands); only the scaling and the sum over kb round.
// A naive loop written with that expression and order reproduces the result bit for bit (when compiled with the same
// floating-point contraction settings).
//   a          fp8 codes [m, k], row stride lda elements (lda == 0 means k)
//   sa_k_major SA [m, KB] row-major
//   b          fp8 codes [n, k] row-major
//   sb         SB [ceil(n/128), KB] row-major
//   abs_sum    if not null, receives per element the accumulation magnitude
//              sum_kb |SA*SB| * sum_{k in kb} |A[m,k]*B[n,k]| (fp64, [m, n] row-major) for element-wise tolerances.
// Returns D [m, n] row-major. Runs on std::thread::hardware_concurrency() threads.
std::vector<double> gemm_nt_reference(const uint8_t* a, const float* sa_k_major, const uint8_t* b, const float* sb,
                                      int64_t m, int64_t n, int64_t k, std::vector<double>* abs_sum = nullptr,
                                      int64_t lda = 0);
// The same with B's scales per 1x128 row block (the weight-gradient GEMM, both operands quantized per token):
//   D[m,n] = sum over kb = 0, 1, ..., KB-1 (in that order) of (double(SA[m,kb]) * double(SB[n,kb])) * S(m,n,kb),
// sb_per_row SB [n, KB] row-major, everything else as above. The exactness argument carries over unchanged: SA*SB is
// still the product of two floats (exact in fp64) and S does not depend on the scales.
std::vector<double> gemm_nt_reference_sb_per_row(const uint8_t* a, const float* sa_k_major, const uint8_t* b,
                                                 const float* sb_per_row, int64_t m, int64_t n, int64_t k,
                                                 std::vector<double>* abs_sum = nullptr, int64_t lda = 0);

// D = C + A x B^T: adds C [m, n] (fp32, row stride ld_c elements) to a reference D [m, n] in fp64, element by element
// (one fp64 rounding each; exact whenever the two share a 53-bit window). The accumulation magnitude (abs_sum) is the
// product's alone: see check_f32_output.
void add_c_to_reference(std::vector<double>& ref, const float* c, int64_t ld_c, int64_t m, int64_t n);

// ---- Checks -------------------------------------------------------------------------------------------------------

// diff = 1 - 2*sum(x*y) / sum(x*x + y*y) over n elements, evaluated in fp64 as the algebraically equal
// sum((x-y)^2) / sum(x*x + y*y), which has no cancellation. 0 when x == y; 0/0 (both all zero) is defined as 0.
// Invariant under scaling both inputs by the same factor. NaN if any input is NaN.
double diff_metric(const double* x, const double* y, int64_t n);

struct CheckResult {
  bool ok = false;
  int64_t num_bad = 0;       // elements outside the element-wise bound (including non-finite ones)
  int64_t first_bad = -1;    // row-major index (row * n + col) of the first bad element, -1 if none
  double first_out = 0;      // the output and reference values at first_bad
  double first_ref = 0;
  double diff = 0;           // diff_metric(ref, out) over the whole output; NaN when some output is NaN
  double max_abs_err = 0;    // max |out - ref| over the finite outputs
  double max_rel_err = 0;    // max |out - ref| / |ref| over the finite outputs with ref != 0
  double max_err_ratio = 0;  // max |out - ref| / bound over the finite outputs (<= 1 means within the bound)
  int64_t n = 0;             // the output's column count, for summary()
  std::string summary() const;
};

// Checks a bf16 output [m, n] (row stride ld_out elements) against the fp64 reference `ref` [m, n] of
// gemm_nt_reference. Element (i, j) passes when out is finite and
//   |out - ref| <= 2^-8 * |ref| + accum_tolerance * abs_sum[i, j].
// 2^-8 * |ref| is the largest error of rounding ref to bf16 (half of a bf16 ulp, 2^(e-7) for ref in [2^e, 2^(e+1)),
// is at most 2^-8 * |ref|). The second term covers the error of the GPU's fp32 accumulation (promotion) before that
// rounding; 2^-20 is a few fp32 ulps per scaled block sum. With abs_sum == nullptr it uses |ref| in place of abs_sum.
// The output passes as a whole when no element is bad and diff <= max_diff. A bf16 NaN (e.g. kBf16Poison left in an
// unwritten element) or inf is always bad.
CheckResult check_bf16_output(const uint16_t* out_bf16, int64_t ld_out, const double* ref, const double* abs_sum,
                              int64_t m, int64_t n, double max_diff = 1e-5, double accum_tolerance = 0x1p-20);

// Checks an fp32 output [m, n] (row stride ld_out elements) the same way. Element (i, j) passes when out is finite and
//   |out - ref| <= (1 + 2^-23) * (2^-24 * |ref| + accum_tolerance * abs_sum[i, j]).
// 2^-24 * |ref| is the largest error of rounding ref to fp32 (half an fp32 ulp); the accumulation term covers the
// GPU's fp32 promotions as for bf16, where it is the whole error budget but for that one rounding. With C
// (D = C + A x B^T, ref from add_c_to_reference), the kernel rounds once more: out = fl(acc + C) with acc the product
// off by e, so |out - ref| <= |e| (1 + 2^-24) + 2^-24 |ref|, plus ref's own fp64 rounding (2^-53 |ref|); the factor
// (1 + 2^-23) covers both. abs_sum stays the product's magnitude and must not include |C|: a C added at lower
// precision (rounded to bf16: up to 2^-9 |C|) would then hide under accum_tolerance * |C| with the tolerances
// measured for the tensor cores (2^-9). With abs_sum == nullptr it uses |ref| in place of abs_sum.
// An fp32 NaN (kF32Poison left in an unwritten element) or inf is always bad.
CheckResult check_f32_output(const float* out, int64_t ld_out, const double* ref, const double* abs_sum, int64_t m,
                             int64_t n, double max_diff = 1e-5, double accum_tolerance = 0x1p-20);

}  // namespace finegemm::reference
