// GPU tests of the FP8 quantizers: need a Hopper GPU. Without one every test reports SKIPPED (loudly), never passed.
//
// The division-free arithmetic of the kernels (reciprocal_rn, block_scale, divide_rn) against the GPU's own IEEE
// division for every float the scales can be, and both quantizers against the CPU reference, bit for bit, on the
// shapes that exercise the work split (row pairs cut by an odd row count or a group boundary, partial k blocks and
// 128-row blocks, tails of the grid) in both scale layouts.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "finegemm/device/common/quantize_args.cuh"
#include "finegemm/finegemm.hpp"
#include "jit/compiler.hpp"
#include "jit/driver.hpp"
#include "jit/runtime.hpp"
#include "gpu/gpu_test.hpp"
#include "lib/device_buffer.hpp"
#include "reference/reference.hpp"

namespace fg = finegemm;
namespace fd = finegemm::device;
namespace fj = finegemm::jit;
namespace fr = finegemm::reference;
namespace ft = finegemm::tools;

namespace {

// Check kernels over the arithmetic of kernels/quantize.cuh. Each counts its mismatches in result[0] and keeps the
// smallest failing float (as bits) in result[1].
constexpr const char* kArithmeticCheckSource = R"(
#include "finegemm/device/kernels/quantize.cuh"

namespace fd = finegemm::device;

__device__ void record_mismatch(unsigned long long* result, uint32_t bits) {
  atomicAdd(&result[0], 1ull);
  atomicMin(&result[1], (unsigned long long)bits);
}

// kWhat 0: reciprocal_rn(v) == __frcp_rn(v); 1: block_scale(v) == max(v, 2^-64) / 448. For the floats whose bits
// are first .. first + count - 1.
template <int kWhat>
__global__ void scalar_check_kernel(uint32_t first, uint32_t count, unsigned long long* result) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    const float v = __uint_as_float(first + i);
    const float got = kWhat == 0 ? fd::reciprocal_rn(v) : fd::block_scale(v);
    const float expected = kWhat == 0 ? __frcp_rn(v) : __fdiv_rn(fmaxf(v, fd::kQuantMinAmax), fd::kE4M3Max);
    if (__float_as_uint(got) != __float_as_uint(expected)) record_mismatch(result, first + i);
  }
}

// Every bf16 x (threads) against the scales whose bits are first + block * stride: the quotient of divide_rn is the
// IEEE one down to 2^-11 (below, q0 may be subnormal), and the e4m3 code is the same everywhere.
// Quotients above 449 (x beyond the block's amax) are skipped.
__global__ void divide_check_kernel(uint32_t first, uint32_t stride, unsigned long long* result) {
  const float scale = __uint_as_float(first + blockIdx.x * stride);
  const float reciprocal = fd::reciprocal_rn(scale);
  for (uint32_t b = threadIdx.x; b < 0x10000u; b += blockDim.x) {
    const float x = __uint_as_float(b << 16);
    const float expected = __fdiv_rn(x, scale);
    if (!(fabsf(expected) <= 449.0f)) continue;
    const float got = fd::divide_rn(x, scale, reciprocal);
    const bool same = fabsf(expected) < 0x1p-11f
                          ? fd::ptx::cvt_e4m3x2(got, got) == fd::ptx::cvt_e4m3x2(expected, expected)
                          : __float_as_uint(got) == __float_as_uint(expected);
    if (!same) record_mismatch(result, first + blockIdx.x * stride);
  }
}
)";

class QuantizeGpu : public ft::GpuTest {
 protected:
  /// Compiles the check kernel `name_expression` of kArithmeticCheckSource and runs it over `grid` CTAs of 256
  /// threads with arguments (a, b, result); returns {mismatches, smallest failing bits}.
  std::pair<uint64_t, uint32_t> run_check(const std::string& name_expression, uint32_t grid, uint32_t a, uint32_t b) {
    fj::Options options;
    options.cache_dir = "";
    fj::Runtime runtime(options);
    const fj::CompileResult compiled =
        runtime.compiler().compile(kArithmeticCheckSource, name_expression, {&fj::library_headers()});
    runtime.current_device();
    const CUfunction fn = runtime.function({"quantize-check " + name_expression, compiled.symbol, compiled.cubin});
    const std::vector<unsigned long long> init = {0ull, ~0ull};
    ft::DeviceBuffer result = ft::DeviceBuffer::from_host(init);
    unsigned long long* result_ptr = result.as<unsigned long long>();
    void* params[] = {&a, &b, &result_ptr};
    CUlaunchConfig config{};
    config.gridDimX = grid;
    config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = 256;
    config.blockDimY = config.blockDimZ = 1;
    config.hStream = reinterpret_cast<CUstream>(stream_);
    fj::check_cu(fj::driver().cuLaunchKernelEx(&config, fn, params, nullptr), "check kernel launch");
    ft::sync_and_check(stream_, "quantizer arithmetic check " + name_expression);
    const auto out = result.download_as<unsigned long long>();
    return {out[0], uint32_t(out[1])};
  }

};

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }

/// Input values of one test tensor: rows of random normals over a wide range of magnitudes, plus rows of zeros,
/// signed zeros, tiny (subnormal for bf16 and fp32) and huge values. bf16 inputs are rounded to bf16 here.
std::vector<float> make_input(int64_t count, int64_t cols, bool bf16, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(count));
  for (int64_t row = 0; row * cols < count; ++row) {
    const int kind = int(rng() % 16);
    const float magnitude =
        kind == 0 ? 0.0f : kind == 1 ? 1e-40f : kind == 2 ? 1e37f : std::ldexp(1.0f, int(rng() % 40) - 20);
    for (int64_t c = 0; c < cols; ++c) {
      float v = kind == 3 ? (c % 2 ? -0.0f : 0.0f) : normal(rng) * magnitude;
      if (bf16) v = fr::bf16_to_float(fr::float_to_bf16(v));
      x[size_t(row * cols + c)] = v;
    }
  }
  return x;
}

/// `x` as a device tensor of bf16 or fp32 values.
ft::DeviceBuffer upload_input(const std::vector<float>& x, bool bf16) {
  if (!bf16) return ft::DeviceBuffer::from_host(x);
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = fr::float_to_bf16(x[i]);
  return ft::DeviceBuffer::from_host(bits);
}

struct QuantizeShape {
  int64_t groups, rows, cols;
  std::string describe() const {
    return "G=" + std::to_string(groups) + " rows=" + std::to_string(rows) + " K=" + std::to_string(cols);
  }
};

// Awkward shapes: per-token row pairs with an odd row count, alone or per group (rows = 1, 3, 7, 65, 129), partial
// K blocks (K = 8, 136), partial 128-row blocks, grids whose last CTA is partly idle, and the bandwidth shape.
const std::vector<QuantizeShape> kShapes = {{1, 1, 8},      {1, 3, 128},    {1, 65, 136},  {1, 7, 576},
                                            {5, 1, 128},    {3, 2, 256},    {4, 3, 136},   {2, 200, 576},
                                            {1, 129, 2048}, {3, 264, 384},  {1, 4096, 7168}};

}  // namespace

TEST_F(QuantizeGpu, ReciprocalIsFrcpRnForEveryScale) {
  const uint32_t first = bits_of(fd::kQuantMinScale), count = bits_of(fd::kQuantMaxScale) - first + 1;
  const auto [mismatches, lowest] = run_check("&scalar_check_kernel<0>", 132 * 64, first, count);
  std::printf("[quantize] reciprocal_rn vs __frcp_rn: %u scales, %llu mismatches\n", count,
              (unsigned long long)mismatches);
  EXPECT_EQ(mismatches, 0u) << "first at scale " << std::bit_cast<float>(lowest);
}

TEST_F(QuantizeGpu, BlockScaleIsTheIeeeQuotientForEveryAmax) {
  const uint32_t first = 0, count = 0x7F800000u;  // every finite non-negative float
  const auto [mismatches, lowest] = run_check("&scalar_check_kernel<1>", 132 * 64, first, count);
  EXPECT_EQ(mismatches, 0u) << "first at amax " << std::bit_cast<float>(lowest);
}

TEST_F(QuantizeGpu, DivideMatchesTheIeeeQuotientForEveryBf16Input) {
  // Every bf16 value against every scale significand (the scales in [1, 2): scaling a scale by 2^k scales every
  // step of divide_rn exactly), then against every 1024th scale over the whole range, end binades included.
  const uint32_t one = bits_of(1.0f), num_significands = 1u << 23;
  auto [mismatches, lowest] = run_check("&divide_check_kernel", num_significands, one, 1);
  EXPECT_EQ(mismatches, 0u) << "first at scale " << std::bit_cast<float>(lowest);
  const uint32_t first = bits_of(fd::kQuantMinScale), stride = 1024;
  const uint32_t num_scales = (bits_of(fd::kQuantMaxScale) - first) / stride + 1;
  std::tie(mismatches, lowest) = run_check("&divide_check_kernel", num_scales, first, stride);
  EXPECT_EQ(mismatches, 0u) << "first at scale " << std::bit_cast<float>(lowest);
}

TEST_F(QuantizeGpu, PerTokenMatchesTheReference) {
  uint64_t seed = 1;
  for (const QuantizeShape& s : kShapes)
    for (bool bf16 : {true, false}) {
      // MN-major TMA-aligned scales, as the GEMMs read them, for bf16; K-major ([G, M, KB] row-major) for fp32.
      const bool mn_major = bf16;
      const int64_t kb = fr::ceil_div(s.cols, fr::kBlockK), m_pad = fg::get_tma_aligned_size(s.rows, 4);
      const std::vector<float> x = make_input(s.groups * s.rows * s.cols, s.cols, bf16, seed++);
      ft::DeviceBuffer d_x = upload_input(x, bf16), d_out(size_t(s.groups * s.rows * s.cols)),
                       d_scales(size_t(s.groups * kb * m_pad) * 4);
      d_out.fill_byte(0xFF, stream_);
      d_scales.fill_byte(0xFF, stream_);
      const fg::DType dtype = bf16 ? fg::DType::kBFloat16 : fg::DType::kFloat32;
      const int64_t row_stride = mn_major ? 1 : kb, k_stride = mn_major ? m_pad : 1;
      fg::per_token_cast_to_fp8(fg::TensorView::contiguous(d_x.get(), dtype, {s.groups, s.rows, s.cols}),
                                fg::TensorView::contiguous(d_out.get(), fg::DType::kFloat8E4M3,
                                                           {s.groups, s.rows, s.cols}),
                                fg::TensorView::strided(d_scales.get(), fg::DType::kFloat32, {s.groups, s.rows, kb},
                                                        {kb * m_pad, row_stride, k_stride}),
                                stream_);
      ft::sync_and_check(stream_, "per_token_cast_to_fp8 " + s.describe());
      const auto out = d_out.download_as<uint8_t>();
      const auto scales = d_scales.download_as<float>();
      int64_t bad_codes = 0, bad_scales = 0;
      for (int64_t g = 0; g < s.groups; ++g) {
        const fr::QuantizedMatrix ref = fr::quantize_per_token(x.data() + g * s.rows * s.cols, s.rows, s.cols);
        for (int64_t i = 0; i < s.rows * s.cols; ++i)
          bad_codes += out[size_t(g * s.rows * s.cols + i)] != ref.data[size_t(i)];
        for (int64_t r = 0; r < s.rows; ++r)
          for (int64_t k = 0; k < kb; ++k)
            bad_scales += bits_of(scales[size_t(g * kb * m_pad + r * row_stride + k * k_stride)]) !=
                          bits_of(ref.scales[size_t(r * kb + k)]);
      }
      EXPECT_EQ(bad_codes, 0) << s.describe() << (bf16 ? " bf16" : " fp32");
      EXPECT_EQ(bad_scales, 0) << s.describe() << (bf16 ? " bf16" : " fp32");
    }
}

TEST_F(QuantizeGpu, PerBlockMatchesTheReference) {
  uint64_t seed = 100;
  for (const QuantizeShape& s : kShapes)
    for (bool bf16 : {true, false}) {
      const int64_t kb = fr::ceil_div(s.cols, fr::kBlockK), nb = fr::ceil_div(s.rows, fr::kBlockN);
      const std::vector<float> x = make_input(s.groups * s.rows * s.cols, s.cols, bf16, seed++);
      ft::DeviceBuffer d_x = upload_input(x, bf16), d_out(size_t(s.groups * s.rows * s.cols)),
                       d_scales(size_t(s.groups * nb * kb) * 4);
      d_out.fill_byte(0xFF, stream_);
      d_scales.fill_byte(0xFF, stream_);
      const fg::DType dtype = bf16 ? fg::DType::kBFloat16 : fg::DType::kFloat32;
      fg::per_block_cast_to_fp8(fg::TensorView::contiguous(d_x.get(), dtype, {s.groups, s.rows, s.cols}),
                                fg::TensorView::contiguous(d_out.get(), fg::DType::kFloat8E4M3,
                                                           {s.groups, s.rows, s.cols}),
                                fg::TensorView::contiguous(d_scales.get(), fg::DType::kFloat32, {s.groups, nb, kb}),
                                stream_);
      ft::sync_and_check(stream_, "per_block_cast_to_fp8 " + s.describe());
      const auto out = d_out.download_as<uint8_t>();
      const auto scales = d_scales.download_as<float>();
      int64_t bad_codes = 0, bad_scales = 0;
      for (int64_t g = 0; g < s.groups; ++g) {
        const fr::QuantizedMatrix ref = fr::quantize_per_block(x.data() + g * s.rows * s.cols, s.rows, s.cols);
        for (int64_t i = 0; i < s.rows * s.cols; ++i)
          bad_codes += out[size_t(g * s.rows * s.cols + i)] != ref.data[size_t(i)];
        for (int64_t i = 0; i < nb * kb; ++i)
          bad_scales += bits_of(scales[size_t(g * nb * kb + i)]) != bits_of(ref.scales[size_t(i)]);
      }
      EXPECT_EQ(bad_codes, 0) << s.describe() << (bf16 ? " bf16" : " fp32");
      EXPECT_EQ(bad_scales, 0) << s.describe() << (bf16 ? " bf16" : " fp32");
    }
}

TEST_F(QuantizeGpu, NanInputsGiveNanCodesAndStayOutOfTheAmax) {
  // Inputs must be finite (finegemm.hpp); a NaN still stays local. bf16 [128, 256] with a NaN at (5, 7): per-token
  // block (5, 0), per-block block (0, 0). The NaN gives a NaN code and is left out of the amax, so its block matches
  // the reference with the NaN read as 0.
  constexpr int64_t kRows = 128, kCols = 256;
  std::vector<float> x = make_input(kRows * kCols, kCols, true, 77);
  std::vector<float> finite = x;
  finite[5 * kCols + 7] = 0.0f;
  x[5 * kCols + 7] = NAN;
  const fr::QuantizedMatrix ref_token = fr::quantize_per_token(finite.data(), kRows, kCols);
  const fr::QuantizedMatrix ref_block = fr::quantize_per_block(finite.data(), kRows, kCols);
  ft::DeviceBuffer d_x = upload_input(x, true), d_out(size_t(kRows * kCols)), d_scales(size_t(kRows * 2) * 4);
  const auto x_view = fg::TensorView::contiguous(d_x.get(), fg::DType::kBFloat16, {kRows, kCols});
  const auto out_view = fg::TensorView::contiguous(d_out.get(), fg::DType::kFloat8E4M3, {kRows, kCols});
  const auto is_nan_code = [](uint8_t code) { return (code & 0x7F) == 0x7F; };

  fg::per_token_cast_to_fp8(x_view, out_view,
                            fg::TensorView::contiguous(d_scales.get(), fg::DType::kFloat32, {kRows, 2}), stream_);
  ft::sync_and_check(stream_, "per_token_cast_to_fp8 with a NaN");
  auto out = d_out.download_as<uint8_t>();
  auto scales = d_scales.download_as<float>();
  EXPECT_TRUE(is_nan_code(out[5 * kCols + 7]));
  EXPECT_EQ(bits_of(scales[5 * 2 + 0]), bits_of(ref_token.scales[5 * 2 + 0])) << "the NaN counted in the amax";
  int64_t bad_codes = 0;
  for (int64_t c = 0; c < 128; ++c)
    bad_codes += c != 7 && out[size_t(5 * kCols + c)] != ref_token.data[size_t(5 * kCols + c)];
  EXPECT_EQ(bad_codes, 0) << "per-token codes next to the NaN";

  fg::per_block_cast_to_fp8(x_view, out_view, fg::TensorView::contiguous(d_scales.get(), fg::DType::kFloat32, {1, 2}),
                            stream_);
  ft::sync_and_check(stream_, "per_block_cast_to_fp8 with a NaN");
  out = d_out.download_as<uint8_t>();
  scales = d_scales.download_as<float>(2);
  EXPECT_TRUE(is_nan_code(out[5 * kCols + 7]));
  EXPECT_EQ(bits_of(scales[0]), bits_of(ref_block.scales[0])) << "the NaN counted in the amax";
  bad_codes = 0;
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < 128; ++c)
      bad_codes += (r != 5 || c != 7) && out[size_t(r * kCols + c)] != ref_block.data[size_t(r * kCols + c)];
  EXPECT_EQ(bad_codes, 0) << "per-block codes next to the NaN";
}
