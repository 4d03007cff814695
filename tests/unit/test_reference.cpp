// Tests of the CPU reference numerics: conversions against CUDA's own host conversions, the quantizers, the
// reference GEMM against a naive loop (B's scales per 128x128 block and per 1x128 row block, with C), the diff metric,
// the bf16 and fp32 output checks and the scale layouts.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "reference/reference.hpp"

namespace finegemm::reference {
namespace {

uint8_t cuda_float_to_e4m3(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

float cuda_e4m3_to_float(uint8_t code) {
  const __half h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(h);
}

uint16_t cuda_float_to_bf16(float x) {
  const __nv_bfloat16_raw raw = __float2bfloat16_rn(x);
  return raw.x;
}

bool is_e4m3_nan(uint8_t code) { return (code & 0x7F) == 0x7F; }

// Every finite e4m3 value, sorted ascending, without -0.
std::vector<float> finite_e4m3_values() {
  std::vector<float> values;
  for (int code = 0; code < 256; ++code) {
    if (is_e4m3_nan(static_cast<uint8_t>(code)) || code == 0x80) continue;
    values.push_back(e4m3_to_float(static_cast<uint8_t>(code)));
  }
  std::sort(values.begin(), values.end());
  return values;
}

// Float inputs that exercise every rounding case of float -> e4m3: the representable values, the exact midpoints
// between neighbours (ties), one float ulp either side of them, the subnormal range and underflow, the saturation
// region, infinities, NaNs and float subnormals.
std::vector<float> e4m3_edge_inputs() {
  std::vector<float> inputs;
  const std::vector<float> values = finite_e4m3_values();
  for (size_t i = 0; i < values.size(); ++i) {
    inputs.push_back(values[i]);
    if (i + 1 < values.size()) {
      const float mid = (values[i] + values[i + 1]) / 2;  // exact: both have few significant bits
      inputs.push_back(mid);
      inputs.push_back(std::nextafter(mid, -INFINITY));
      inputs.push_back(std::nextafter(mid, INFINITY));
    }
  }
  const float kInf = std::numeric_limits<float>::infinity();
  for (float v : {0x1p-10f, 0x1.8p-10f, 0x1p-11f, 0x1p-12f, 0x1p-20f, 0x1p-126f, 0x1p-149f, 0x1.fffffep-7f, 448.0f,
                  449.0f, 463.99997f, 464.0f, 464.00003f, 479.0f, 480.0f, 481.0f, 500.0f, 1e30f,
                  std::numeric_limits<float>::max(), kInf}) {
    inputs.push_back(v);
  }
  for (float v : std::vector<float>(inputs)) inputs.push_back(-v);
  for (uint32_t bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    inputs.push_back(std::bit_cast<float>(bits));
  }
  inputs.push_back(-0.0f);
  return inputs;
}

// ---- e4m3 ---------------------------------------------------------------------------------------------------------

TEST(ReferenceE4M3, KnownValues) {
  EXPECT_EQ(e4m3_to_float(0x00), 0.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(e4m3_to_float(0x08), 0x1p-6f);  // smallest normal
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
  EXPECT_EQ(e4m3_to_float(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);  // tie between 1 and 1.125 -> even (1)
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3A);  // tie between 1.125 and 1.25 -> even (1.25)
  EXPECT_EQ(float_to_e4m3(0x1p-10f), 0x00);  // tie between 0 and the smallest subnormal -> 0
  EXPECT_EQ(float_to_e4m3(1000.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(float_to_e4m3(NAN), kE4M3NaN);
  EXPECT_EQ(float_to_e4m3(-NAN), kE4M3NaN);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(-0x1p-12f), 0x80);  // rounds to zero, keeps the sign
}

TEST(ReferenceE4M3, RoundTripAllCodes) {
  for (int code = 0; code < 256; ++code) {
    const auto c = static_cast<uint8_t>(code);
    const float value = e4m3_to_float(c);
    if (is_e4m3_nan(c)) {
      EXPECT_TRUE(std::isnan(value)) << "code " << code;
      EXPECT_EQ(float_to_e4m3(value), kE4M3NaN) << "code " << code;
    } else {
      // -0 (0x80) decodes to -0.0f and encodes back to 0x80.
      EXPECT_EQ(float_to_e4m3(value), c) << "code " << code << " value " << value;
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(e4m3_decode_table()[code]), std::bit_cast<uint32_t>(value)) << "code " << code;
  }
}

TEST(ReferenceE4M3, DecodeMatchesCuda) {
  for (int code = 0; code < 256; ++code) {
    const auto c = static_cast<uint8_t>(code);
    const float ours = e4m3_to_float(c), cuda = cuda_e4m3_to_float(c);
    if (is_e4m3_nan(c)) {
      EXPECT_TRUE(std::isnan(ours) && std::isnan(cuda)) << "code " << code;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(ours), std::bit_cast<uint32_t>(cuda)) << "code " << code;
    }
  }
}

TEST(ReferenceE4M3, EncodeMatchesCudaOnEdgeCases) {
  const std::vector<float> inputs = e4m3_edge_inputs();
  ASSERT_GT(inputs.size(), 2000u);
  int mismatches = 0;
  for (float x : inputs) {
    const uint8_t ours = float_to_e4m3(x), cuda = cuda_float_to_e4m3(x);
    if (ours != cuda && ++mismatches <= 10) {
      ADD_FAILURE() << "x = " << x << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(x) << "): ours 0x"
                    << int(ours) << ", cuda 0x" << int(cuda);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(ReferenceE4M3, EncodeMatchesCudaOnRandomFloats) {
  std::mt19937_64 rng(12345);
  int mismatches = 0;
  for (int i = 0; i < 2000000; ++i) {
    const uint64_t r = rng();
    float x;
    if (i % 2 == 0) {
      // Any bit pattern: the whole float range, NaNs and infinities included.
      x = std::bit_cast<float>(static_cast<uint32_t>(r));
    } else {
      // Magnitudes log-uniform over the e4m3 range and a little beyond, both signs.
      const int exponent = static_cast<int>((r >> 32) % 24) - 13;  // 2^-13 .. 2^10
      x = std::ldexp(1.0f + static_cast<float>(r & 0xFFFFFF) * 0x1p-24f, exponent) * ((r >> 63) ? -1.0f : 1.0f);
    }
    const uint8_t ours = float_to_e4m3(x), cuda = cuda_float_to_e4m3(x);
    if (ours != cuda && ++mismatches <= 10) {
      ADD_FAILURE() << "x = " << x << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(x) << "): ours 0x"
                    << int(ours) << ", cuda 0x" << int(cuda);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// ---- bf16 ---------------------------------------------------------------------------------------------------------

TEST(ReferenceBf16, MatchesCudaOnRandomFloats) {
  std::mt19937_64 rng(777);
  std::vector<float> inputs;
  for (int i = 0; i < 2000000; ++i) inputs.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  // Ties (low 16 bits exactly 0x8000) with both parities, their neighbours, and the overflow edge.
  for (uint32_t high = 0; high < 0x10000; high += 7) {
    const uint32_t tie = (high << 16) | 0x8000u;
    for (uint32_t bits : {tie, tie - 1, tie + 1}) inputs.push_back(std::bit_cast<float>(bits));
  }
  for (float v : {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::max(), 0x1p-149f, 0x1p-133f}) {
    inputs.push_back(v);
  }
  int mismatches = 0;
  for (float x : inputs) {
    const uint16_t ours = float_to_bf16(x), cuda = cuda_float_to_bf16(x);
    bool same;
    if (std::isnan(x)) {
      // CUDA returns the canonical 0x7FFF; we keep sign and payload, quiet.
      same = std::isnan(bf16_to_float(ours)) && std::isnan(bf16_to_float(cuda)) && (ours & 0x0040) != 0 &&
             (ours >> 15) == (std::bit_cast<uint32_t>(x) >> 31);
    } else {
      same = ours == cuda;
    }
    if (!same && ++mismatches <= 10) {
      ADD_FAILURE() << "x bits 0x" << std::hex << std::bit_cast<uint32_t>(x) << ": ours 0x" << ours << ", cuda 0x"
                    << cuda;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(ReferenceBf16, RoundTripAllCodes) {
  for (uint32_t code = 0; code < 0x10000; ++code) {
    const auto c = static_cast<uint16_t>(code);
    const float value = bf16_to_float(c);
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(value))));
    } else {
      ASSERT_EQ(float_to_bf16(value), c) << "code 0x" << std::hex << code;
      ASSERT_EQ(double_to_bf16(static_cast<double>(value)), c) << "code 0x" << std::hex << code;
    }
  }
}

// The correctly rounded bf16 of x (finite, in the normal range), by search: the nearer of the two bf16 neighbours,
// ties to the even code.
uint16_t bf16_nearest_by_search(double x) {
  uint16_t below = float_to_bf16(static_cast<float>(x));
  while (static_cast<double>(bf16_to_float(below)) > x) below = x >= 0 ? below - 1 : below + 1;
  while (true) {
    const uint16_t next = x >= 0 ? below + 1 : below - 1;
    if (static_cast<double>(bf16_to_float(next)) > x) break;
    below = next;
  }
  // below <= x < above, walking in the direction of increasing value.
  const uint16_t above = x >= 0 ? below + 1 : below - 1;
  const double lo = bf16_to_float(below), hi = bf16_to_float(above);
  if (x - lo < hi - x) return below;
  if (hi - x < x - lo) return above;
  return (below & 1) ? above : below;
}

TEST(ReferenceBf16, DoubleRoundsOnce) {
  // 1 + 2^-8 + 2^-30 is just above the midpoint of 1 and 1 + 2^-7: correct rounding goes up, while rounding through
  // float first lands exactly on the midpoint and then rounds to even (down).
  const double x = 1.0 + 0x1p-8 + 0x1p-30;
  EXPECT_EQ(double_to_bf16(x), 0x3F81);
  EXPECT_EQ(float_to_bf16(static_cast<float>(x)), 0x3F80);
  EXPECT_EQ(double_to_bf16(-x), 0xBF81);
  EXPECT_EQ(double_to_bf16(1.0 + 0x1p-8), 0x3F80);  // an exact tie: to even
  EXPECT_EQ(double_to_bf16(1e300), 0x7F80);
  EXPECT_EQ(double_to_bf16(-1e300), 0xFF80);
  EXPECT_TRUE(std::isnan(bf16_to_float(double_to_bf16(std::nan("")))));

  std::mt19937_64 rng(99);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t r = rng();
    const double magnitude = std::ldexp(1.0 + static_cast<double>(r >> 12) * 0x1p-52, static_cast<int>(r % 200) - 100);
    // Half of the inputs sit within a few float ulps of a bf16 midpoint, where double rounding would go wrong.
    double v = magnitude;
    if (i % 2 == 1) {
      const float rounded = bf16_to_float(float_to_bf16(static_cast<float>(magnitude)));
      const double ulp = std::ldexp(1.0, std::ilogb(rounded) - 7);
      v = rounded + ulp / 2 + static_cast<double>(static_cast<int64_t>(r % 7) - 3) * ulp * 0x1p-20;
    }
    if (r & 1) v = -v;
    ASSERT_EQ(double_to_bf16(v), bf16_nearest_by_search(v)) << "x = " << v;
  }
}

// ---- quantizers ---------------------------------------------------------------------------------------------------

// Random activations with rows of very different magnitudes, one all-zero row and one row of tiny values.
std::vector<float> make_activations(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  fill_random_normal(x, seed);
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::ldexp(1.0f, static_cast<int>(r % 21) - 10);
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] *= row_scale;
  }
  if (rows > 1) std::fill(x.begin() + cols, x.begin() + 2 * cols, 0.0f);
  if (rows > 2)
    for (int64_t c = 0; c < cols; ++c) x[2 * cols + c] *= 1e-30f;
  return x;
}

// |dequantized - original| <= half an e4m3 ulp relative (2^-4 |x|), or half the subnormal spacing (scale * 2^-10),
// plus a few fp32 roundings of the scaling itself.
void expect_quantization_error_bounded(const std::vector<float>& x, const std::vector<float>& deq,
                                       const std::vector<float>& scale_of) {
  int bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double err = std::fabs(static_cast<double>(deq[i]) - x[i]);
    const double bound = 0x1p-4 * std::fabs(x[i]) * (1 + 0x1p-20) + scale_of[i] * 0x1p-10;
    if (!(err <= bound) && ++bad <= 5) ADD_FAILURE() << "element " << i << ": x " << x[i] << ", dequantized " << deq[i];
  }
  EXPECT_EQ(bad, 0);
}

TEST(ReferenceQuantize, PerTokenInvariants) {
  const int64_t rows = 23, cols = 300;  // K blocks of 128, 128 and a partial 44
  const int64_t num_k_blocks = 3;
  std::vector<float> x = make_activations(rows, cols, 5);
  // Make the partial block of row 0 much smaller, so that its scale must come from its own 44 columns.
  for (int64_t c = 256; c < cols; ++c) x[c] *= 1e-3f;
  const QuantizedMatrix q = quantize_per_token(x.data(), rows, cols);
  ASSERT_EQ(q.rows, rows);
  ASSERT_EQ(q.cols, cols);
  ASSERT_EQ(q.data.size(), static_cast<size_t>(rows * cols));
  ASSERT_EQ(q.scales.size(), static_cast<size_t>(rows * num_k_blocks));

  std::vector<float> scale_of(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t kb = 0; kb < num_k_blocks; ++kb) {
      const float scale = q.scales[r * num_k_blocks + kb];
      EXPECT_TRUE(std::isnormal(scale) && scale > 0) << "row " << r << " kb " << kb << " scale " << scale;
      float amax = 0, qmax = 0;
      for (int64_t c = kb * 128; c < std::min<int64_t>(cols, (kb + 1) * 128); ++c) {
        const uint8_t code = q.data[r * cols + c];
        EXPECT_FALSE(is_e4m3_nan(code));
        amax = std::max(amax, std::fabs(x[r * cols + c]));
        qmax = std::max(qmax, std::fabs(e4m3_to_float(code)));
        scale_of[r * cols + c] = scale;
      }
      EXPECT_LE(qmax, 448.0f);
      EXPECT_FLOAT_EQ(scale, std::max(amax, kMinAmax) / 448.0f) << "row " << r << " kb " << kb;
      if (amax >= kMinAmax) {
        EXPECT_EQ(qmax, 448.0f) << "the block maximum maps to 448, row " << r << " kb " << kb;
      }
    }
  }
  // The all-zero row: tiny positive scales, zero codes.
  for (int64_t kb = 0; kb < num_k_blocks; ++kb) EXPECT_EQ(q.scales[num_k_blocks + kb], kMinAmax / 448.0f);
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(q.data[cols + c], 0x00);
  expect_quantization_error_bounded(x, dequantize_per_token(q), scale_of);
}

TEST(ReferenceQuantize, PerBlockInvariants) {
  const int64_t rows = 200, cols = 300;  // partial blocks along both dimensions
  const int64_t num_row_blocks = 2, num_k_blocks = 3;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  fill_random_normal(w, 8, 0.02f);
  // A different magnitude in each block, and one all-zero block (the bottom-right partial one).
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      w[r * cols + c] *= (r >= 128 && c >= 256) ? 0.0f : std::ldexp(1.0f, static_cast<int>(3 * (r / 128) + c / 128));
  const QuantizedMatrix q = quantize_per_block(w.data(), rows, cols);
  ASSERT_EQ(q.scales.size(), static_cast<size_t>(num_row_blocks * num_k_blocks));
  std::vector<float> scale_of(w.size());
  for (int64_t rb = 0; rb < num_row_blocks; ++rb) {
    for (int64_t kb = 0; kb < num_k_blocks; ++kb) {
      const float scale = q.scales[rb * num_k_blocks + kb];
      EXPECT_TRUE(std::isnormal(scale) && scale > 0);
      float amax = 0, qmax = 0;
      for (int64_t r = rb * 128; r < std::min<int64_t>(rows, (rb + 1) * 128); ++r) {
        for (int64_t c = kb * 128; c < std::min<int64_t>(cols, (kb + 1) * 128); ++c) {
          EXPECT_FALSE(is_e4m3_nan(q.data[r * cols + c]));
          amax = std::max(amax, std::fabs(w[r * cols + c]));
          qmax = std::max(qmax, std::fabs(e4m3_to_float(q.data[r * cols + c])));
          scale_of[r * cols + c] = scale;
        }
      }
      EXPECT_FLOAT_EQ(scale, std::max(amax, kMinAmax) / 448.0f) << "block " << rb << ", " << kb;
      EXPECT_EQ(qmax, amax > 0 ? 448.0f : 0.0f) << "block " << rb << ", " << kb;
    }
  }
  expect_quantization_error_bounded(w, dequantize_per_block(q), scale_of);
}

TEST(ReferenceQuantize, RejectsNonFiniteInput) {
  std::vector<float> x(256, 1.0f);
  x[200] = INFINITY;
  EXPECT_THROW(quantize_per_token(x.data(), 2, 128), std::invalid_argument);
  x[200] = NAN;
  EXPECT_THROW(quantize_per_block(x.data(), 2, 128), std::invalid_argument);
}

// ---- scale layouts ------------------------------------------------------------------------------------------------

TEST(ReferenceScales, MnMajorLayout) {
  const int64_t m = 5, kb = 3;  // M_pad = 8
  std::vector<float> k_major(m * kb);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < kb; ++b) k_major[r * kb + b] = static_cast<float>(10 * r + b + 1);
  const std::vector<float> mn = scales_to_mn_major(k_major, m, kb);
  const std::vector<float> expected = {1, 11, 21, 31, 41, 0, 0, 0,   //
                                       2, 12, 22, 32, 42, 0, 0, 0,   //
                                       3, 13, 23, 33, 43, 0, 0, 0};
  EXPECT_EQ(mn, expected);
  EXPECT_EQ(scales_from_mn_major(mn, m, kb), k_major);
  // M already a multiple of 4: no padding.
  const std::vector<float> k_major4 = {1, 2, 3, 4, 5, 6, 7, 8};  // [4, 2]
  EXPECT_EQ(scales_to_mn_major(k_major4, 4, 2), (std::vector<float>{1, 3, 5, 7, 2, 4, 6, 8}));
  EXPECT_THROW(scales_to_mn_major(k_major, m, kb + 1), std::invalid_argument);
}

// ---- random fills -------------------------------------------------------------------------------------------------

TEST(ReferenceRandom, Fp8CodesFiniteDeterministicAndCovering) {
  std::vector<uint8_t> a(100000), b(100000), c(100000);
  fill_random_fp8(a, 1);
  fill_random_fp8(b, 1);
  fill_random_fp8(c, 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::set<uint8_t> seen(a.begin(), a.end());
  EXPECT_EQ(seen.size(), 254u);
  EXPECT_EQ(seen.count(0x7F), 0u);
  EXPECT_EQ(seen.count(0xFF), 0u);
}

TEST(ReferenceRandom, ScalesLogUniform) {
  std::vector<float> s(20000), t(20000);
  fill_random_scales(s, 3);
  fill_random_scales(t, 3);
  EXPECT_EQ(s, t);
  const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
  EXPECT_GE(*lo, 0x1p-10f);
  EXPECT_LE(*hi, 0x1p10f);
  EXPECT_LT(*lo, 0x1p-9f);
  EXPECT_GT(*hi, 0x1p9f);
  // Log-uniform: about half of the scales lie below 1.
  const auto below_one = std::count_if(s.begin(), s.end(), [](float v) { return v < 1.0f; });
  EXPECT_NEAR(static_cast<double>(below_one) / s.size(), 0.5, 0.02);
}

// The bench's model-like operands: every block reaches +-448 (its amax), the dequantized values are standard normal,
// and the result is the seed's alone (the bands are drawn on many threads).
TEST(ReferenceRandom, QuantizedNormalsPerTokenAndPerBlock) {
  const int64_t rows = 300, cols = 520;  // partial last row band and K block
  const int64_t kb = ceil_div(cols, kBlockK);
  for (const int64_t block_rows : {int64_t{1}, int64_t{kBlockN}}) {
    std::vector<uint8_t> codes, codes2, codes3;
    std::vector<float> scales, scales2, scales3;
    fill_quantized_normal_fp8(codes, scales, rows, cols, block_rows, 9);
    fill_quantized_normal_fp8(codes2, scales2, rows, cols, block_rows, 9);
    fill_quantized_normal_fp8(codes3, scales3, rows, cols, block_rows, 10);
    EXPECT_EQ(codes, codes2);
    EXPECT_EQ(scales, scales2);
    EXPECT_NE(codes, codes3);
    const int64_t bands = ceil_div(rows, block_rows);
    ASSERT_EQ(codes.size(), static_cast<size_t>(rows * cols));
    ASSERT_EQ(scales.size(), static_cast<size_t>(bands * kb));
    std::vector<int> max_code(static_cast<size_t>(bands * kb), 0);
    double sum = 0, sum_sq = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t code = codes[static_cast<size_t>(r * cols + c)];
        ASSERT_NE(code & 0x7F, kE4M3NaN);
        const size_t block = static_cast<size_t>((r / block_rows) * kb + c / kBlockK);
        max_code[block] = std::max(max_code[block], code & 0x7F);
        const double v = double(e4m3_to_float(code)) * scales[block];
        sum += v;
        sum_sq += v * v;
      }
    }
    for (const int m : max_code) EXPECT_EQ(m, kE4M3MaxCode);
    for (const float s : scales) EXPECT_TRUE(s > 0.0f && s < 0.05f) << s;  // amax of >= 8 normals over 448
    const double n = double(rows * cols);
    EXPECT_NEAR(sum / n, 0.0, 0.01);
    EXPECT_NEAR(std::sqrt(sum_sq / n), 1.0, 0.02);
  }
}

// ---- reference GEMM -----------------------------------------------------------------------------------------------

struct RandomProblem {
  int64_t m, n, k, lda, num_k_blocks;
  std::vector<uint8_t> a, b;
  std::vector<float> sa, sb;
};

RandomProblem make_problem(int64_t m, int64_t n, int64_t k, uint64_t seed, int64_t lda = 0, bool sb_per_row = false) {
  RandomProblem p{m, n, k, lda == 0 ? k : lda, ceil_div(k, 128), {}, {}, {}, {}};
  p.a.resize(static_cast<size_t>(m * p.lda));
  p.b.resize(static_cast<size_t>(n * k));
  p.sa.resize(static_cast<size_t>(m * p.num_k_blocks));
  p.sb.resize(static_cast<size_t>((sb_per_row ? n : ceil_div(n, 128)) * p.num_k_blocks));
  fill_random_fp8(p.a, seed);
  fill_random_fp8(p.b, seed + 1);
  fill_random_scales(p.sa, seed + 2);
  fill_random_scales(p.sb, seed + 3);
  return p;
}

// The definition, one element at a time: block sums in fp64 (exact), then (SA*SB) * S summed over kb in order.
// sb_per_row: p.sb is [n, KB] (1x128 blocks of B), else [ceil(n/128), KB].
void naive_gemm(const RandomProblem& p, std::vector<double>& d, std::vector<double>& abs_sum,
                bool sb_per_row = false) {
  d.assign(static_cast<size_t>(p.m * p.n), 0.0);
  abs_sum.assign(static_cast<size_t>(p.m * p.n), 0.0);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double acc = 0, acc_abs = 0;
      for (int64_t kb = 0; kb < p.num_k_blocks; ++kb) {
        double s = 0, s_abs = 0;
        for (int64_t kk = kb * 128; kk < std::min<int64_t>(p.k, (kb + 1) * 128); ++kk) {
          const double product = static_cast<double>(e4m3_to_float(p.a[i * p.lda + kk])) *
                                 static_cast<double>(e4m3_to_float(p.b[j * p.k + kk]));
          s += product;
          s_abs += std::fabs(product);
        }
        const double scale = static_cast<double>(p.sa[i * p.num_k_blocks + kb]) *
                             static_cast<double>(p.sb[(sb_per_row ? j : j / 128) * p.num_k_blocks + kb]);
        acc += scale * s;
        acc_abs += std::fabs(scale) * s_abs;
      }
      d[i * p.n + j] = acc;
      abs_sum[i * p.n + j] = acc_abs;
    }
  }
}

TEST(ReferenceGemm, MatchesNaiveLoopExactly) {
  struct Shape {
    int64_t m, n, k, lda;
  };
  // Tiles of 64 rows and 64 columns inside: shapes straddle them, and N / K are not all multiples of 128.
  const Shape shapes[] = {{1, 128, 128, 0},  {7, 200, 300, 0},  {65, 576, 576, 0}, {129, 136, 200, 0},
                          {63, 72, 1000, 0}, {2, 64, 7168, 0}, {33, 130, 260, 384}};
  uint64_t seed = 100;
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(::testing::Message() << shape.m << "x" << shape.n << "x" << shape.k << " lda " << shape.lda);
    const RandomProblem p = make_problem(shape.m, shape.n, shape.k, seed += 10, shape.lda);
    std::vector<double> abs_sum;
    const std::vector<double> d = gemm_nt_reference(p.a.data(), p.sa.data(), p.b.data(), p.sb.data(), p.m, p.n, p.k,
                                                    &abs_sum, shape.lda);
    const std::vector<double> d_no_abs =
        gemm_nt_reference(p.a.data(), p.sa.data(), p.b.data(), p.sb.data(), p.m, p.n, p.k, nullptr, shape.lda);
    std::vector<double> d_naive, abs_naive;
    naive_gemm(p, d_naive, abs_naive);
    ASSERT_EQ(d.size(), d_naive.size());
    ASSERT_EQ(abs_sum.size(), abs_naive.size());
    int64_t mismatches = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      const bool same = d[i] == d_naive[i] && d_no_abs[i] == d_naive[i] && abs_sum[i] == abs_naive[i];
      if (!same && ++mismatches <= 5) {
        ADD_FAILURE() << "element " << i << ": d " << d[i] << " / " << d_no_abs[i] << " vs naive " << d_naive[i]
                      << ", abs " << abs_sum[i] << " vs naive " << abs_naive[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
    // The accumulation magnitude bounds the result.
    for (size_t i = 0; i < d.size(); ++i) ASSERT_LE(std::fabs(d[i]), abs_sum[i]);
  }
}

TEST(ReferenceGemm, AgreesWithDequantizedProduct) {
  // Quantize real-valued inputs with the library's quantizers, then compare with the plain product of the
  // dequantized values (their own fp32 rounding is the only difference: 2^-24 relative per input).
  const int64_t m = 70, n = 200, k = 400;
  std::vector<float> x(m * k), w(n * k);
  fill_random_normal(x, 21);
  fill_random_normal(w, 22, 0.05f);
  const QuantizedMatrix qa = quantize_per_token(x.data(), m, k);
  const QuantizedMatrix qb = quantize_per_block(w.data(), n, k);
  std::vector<double> abs_sum;
  const std::vector<double> d =
      gemm_nt_reference(qa.data.data(), qa.scales.data(), qb.data.data(), qb.scales.data(), m, n, k, &abs_sum);
  const std::vector<float> xa = dequantize_per_token(qa), wb = dequantize_per_block(qb);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      long double expected = 0;
      for (int64_t kk = 0; kk < k; ++kk) expected += static_cast<long double>(xa[i * k + kk]) * wb[j * k + kk];
      ASSERT_NEAR(d[i * n + j], static_cast<double>(expected), 0x1p-22 * abs_sum[i * n + j]) << i << ", " << j;
    }
  }
}

TEST(ReferenceGemm, EmptyShapes) {
  const RandomProblem p = make_problem(4, 8, 128, 1);
  std::vector<double> abs_sum = {1.0};
  EXPECT_TRUE(gemm_nt_reference(p.a.data(), p.sa.data(), p.b.data(), p.sb.data(), 0, 8, 128, &abs_sum).empty());
  EXPECT_TRUE(abs_sum.empty());
  const std::vector<double> zeros =
      gemm_nt_reference(nullptr, nullptr, nullptr, nullptr, 4, 8, 0);  // K = 0: all zeros
  EXPECT_EQ(zeros, std::vector<double>(32, 0.0));
  EXPECT_THROW(gemm_nt_reference(p.a.data(), p.sa.data(), p.b.data(), p.sb.data(), 4, 8, 128, nullptr, 64),
               std::invalid_argument);
}

// ---- reference GEMM with 1x128 scales of B and with C ---------------------------------------------------------------

constexpr uint8_t kE4M3One = 0x38, kE4M3Two = 0x40, kE4M3Half = 0x30;  // 1.0, 2.0, 0.5

TEST(ReferenceGemmSbPerRow, HandComputed) {
  // M = 2, N = 3, K = 130 (a full K block and a block of 2): A all 1.0; row n of B all b_n = {1, 2, 0.5}, so the
  // block sums are S(m, n, 0) = 128 b_n and S(m, n, 1) = 2 b_n.
  const int64_t m = 2, n = 3, k = 130;
  std::vector<uint8_t> a(m * k, kE4M3One), b(n * k);
  const uint8_t b_codes[3] = {kE4M3One, kE4M3Two, kE4M3Half};
  for (int64_t j = 0; j < n; ++j) std::fill(b.begin() + j * k, b.begin() + (j + 1) * k, b_codes[j]);
  const std::vector<float> sa = {1.0f, 0.25f,   // row 0: kb 0, 1
                                 3.0f, -2.0f};  // row 1
  const std::vector<float> sb = {1.0f, 4.0f,    // row 0 of B
                                 0.5f, 1.0f,    // row 1
                                 8.0f, -0.5f};  // row 2
  // D[i, j] = SA[i,0] SB[j,0] 128 b_j + SA[i,1] SB[j,1] 2 b_j
  const std::vector<double> expected = {
      1 * 1 * 128 * 1.0 + 0.25 * 4 * 2 * 1.0,   1 * 0.5 * 128 * 2.0 + 0.25 * 1 * 2 * 2.0,
      1 * 8 * 128 * 0.5 + 0.25 * -0.5 * 2 * 0.5, 3 * 1 * 128 * 1.0 + -2 * 4 * 2 * 1.0,
      3 * 0.5 * 128 * 2.0 + -2 * 1 * 2 * 2.0,   3 * 8 * 128 * 0.5 + -2 * -0.5 * 2 * 0.5};
  EXPECT_EQ(expected[0], 130.0);  // the arithmetic above, spelled out once
  EXPECT_EQ(expected[5], 1537.0);
  std::vector<double> abs_sum;
  const std::vector<double> d =
      gemm_nt_reference_sb_per_row(a.data(), sa.data(), b.data(), sb.data(), m, n, k, &abs_sum);
  EXPECT_EQ(d, expected);
  // abs_sum: the same with |scales| (every product is positive here).
  EXPECT_EQ(abs_sum[3], 3 * 1 * 128 * 1.0 + 2 * 4 * 2 * 1.0);
  EXPECT_EQ(abs_sum[5], 3 * 8 * 128 * 0.5 + 2 * 0.5 * 2 * 0.5);
  // The 128x128 form reads only SB's first row ([NB = 1, KB]) for every column.
  const std::vector<double> d_block = gemm_nt_reference(a.data(), sa.data(), b.data(), sb.data(), m, n, k);
  EXPECT_EQ(d_block[1], 1 * 1 * 128 * 2.0 + 0.25 * 4 * 2 * 2.0);
  EXPECT_NE(d_block, d);
}

TEST(ReferenceGemmSbPerRow, MatchesNaiveLoopExactly) {
  struct Shape {
    int64_t m, n, k, lda;
  };
  const Shape shapes[] = {{1, 8, 16, 0}, {7, 200, 300, 0}, {65, 136, 576, 0}, {129, 264, 112, 0}, {33, 72, 260, 384}};
  uint64_t seed = 300;
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(::testing::Message() << shape.m << "x" << shape.n << "x" << shape.k << " lda " << shape.lda);
    const RandomProblem p = make_problem(shape.m, shape.n, shape.k, seed += 10, shape.lda, true);
    std::vector<double> abs_sum;
    const std::vector<double> d = gemm_nt_reference_sb_per_row(p.a.data(), p.sa.data(), p.b.data(), p.sb.data(), p.m,
                                                               p.n, p.k, &abs_sum, shape.lda);
    std::vector<double> d_naive, abs_naive;
    naive_gemm(p, d_naive, abs_naive, true);
    EXPECT_EQ(d, d_naive);
    EXPECT_EQ(abs_sum, abs_naive);
  }
}

TEST(ReferenceGemmSbPerRow, EqualRowScalesGiveTheBlockReferenceBitForBit) {
  // SB [NB, KB] repeated over the rows of each 128-row block is the same product, term by term.
  const RandomProblem p = make_problem(70, 264, 400, 77);
  std::vector<float> sb_rows(static_cast<size_t>(p.n * p.num_k_blocks));
  for (int64_t j = 0; j < p.n; ++j)
    for (int64_t kb = 0; kb < p.num_k_blocks; ++kb)
      sb_rows[j * p.num_k_blocks + kb] = p.sb[(j / 128) * p.num_k_blocks + kb];
  std::vector<double> abs_block, abs_rows;
  const std::vector<double> d_block =
      gemm_nt_reference(p.a.data(), p.sa.data(), p.b.data(), p.sb.data(), p.m, p.n, p.k, &abs_block);
  const std::vector<double> d_rows =
      gemm_nt_reference_sb_per_row(p.a.data(), p.sa.data(), p.b.data(), sb_rows.data(), p.m, p.n, p.k, &abs_rows);
  EXPECT_EQ(d_block, d_rows);
  EXPECT_EQ(abs_block, abs_rows);
}

TEST(ReferenceGemmSbPerRow, AddC) {
  std::vector<double> ref = {1.0, -2.0, 0x1p60, 3.0, 0.0, 0.0};
  // C [2, 3] with a row stride of 4 (the fourth column is padding and never read).
  const std::vector<float> c = {0.5f, 2.0f, 1.0f, 99.0f, -3.0f, 0.0f, -0.0f, 99.0f};
  add_c_to_reference(ref, c.data(), 4, 2, 3);
  EXPECT_EQ(ref, (std::vector<double>{1.5, 0.0, 0x1p60 + 1.0, 0.0, 0.0, 0.0}));
  EXPECT_THROW(add_c_to_reference(ref, c.data(), 2, 2, 3), std::invalid_argument);  // ld_c < n
  EXPECT_THROW(add_c_to_reference(ref, c.data(), 4, 3, 3), std::invalid_argument);  // ref is not m x n
  EXPECT_THROW(add_c_to_reference(ref, nullptr, 4, 2, 3), std::invalid_argument);
}

// ---- diff metric --------------------------------------------------------------------------------------------------

TEST(ReferenceDiff, Values) {
  const std::vector<double> x = {1, 2, 3, -4};
  EXPECT_EQ(diff_metric(x.data(), x.data(), 4), 0.0);
  const std::vector<double> zeros(4, 0.0);
  EXPECT_EQ(diff_metric(zeros.data(), zeros.data(), 4), 0.0);
  // Hand-computed: x = (1, 2), y = (1, 3): 1 - 2*(1 + 6) / (1 + 4 + 1 + 9) = 1 - 14/15 = 1/15.
  const std::vector<double> a = {1, 2}, b = {1, 3};
  EXPECT_NEAR(diff_metric(a.data(), b.data(), 2), 1.0 / 15, 1e-16);
  // Opposite signs: 1 - 2*(-1)/2 = 2.
  const double one = 1, minus_one = -1;
  EXPECT_EQ(diff_metric(&one, &minus_one, 1), 2.0);
  // Scale-free.
  std::vector<double> y = x;
  y[2] += 1e-3;
  const double base = diff_metric(x.data(), y.data(), 4);
  EXPECT_GT(base, 0.0);
  std::vector<double> x1000 = x, y1000 = y;
  for (double& v : x1000) v *= 1000;
  for (double& v : y1000) v *= 1000;
  EXPECT_NEAR(diff_metric(x1000.data(), y1000.data(), 4), base, 1e-12 * base);
  // No cancellation for tiny differences: (x - y)^2 / (x^2 + y^2) with y = x (1 + 1e-12).
  const double p = 3.0, q = 3.0 * (1 + 1e-12);
  EXPECT_NEAR(diff_metric(&p, &q, 1), 0.5e-24, 0.01e-24);
}

// ---- bf16 output check --------------------------------------------------------------------------------------------

struct CheckFixture {
  int64_t m = 96, n = 200, k = 384;
  std::vector<double> ref, abs_sum;
  std::vector<uint16_t> out;  // [m, n], the reference rounded to bf16
};

CheckFixture make_check_fixture() {
  CheckFixture f;
  const RandomProblem p = make_problem(f.m, f.n, f.k, 55);
  f.ref = gemm_nt_reference(p.a.data(), p.sa.data(), p.b.data(), p.sb.data(), f.m, f.n, f.k, &f.abs_sum);
  f.out.resize(f.ref.size());
  for (size_t i = 0; i < f.ref.size(); ++i) f.out[i] = double_to_bf16(f.ref[i]);
  return f;
}

int64_t argmax_abs(const std::vector<double>& v) {
  return std::max_element(v.begin(), v.end(), [](double a, double b) { return std::fabs(a) < std::fabs(b); }) -
         v.begin();
}

TEST(ReferenceCheck, PassesOnRoundedReference) {
  const CheckFixture f = make_check_fixture();
  const CheckResult r = check_bf16_output(f.out.data(), f.n, f.ref.data(), f.abs_sum.data(), f.m, f.n);
  EXPECT_TRUE(r.ok) << r.summary();
  EXPECT_EQ(r.num_bad, 0);
  EXPECT_EQ(r.first_bad, -1);
  EXPECT_GT(r.diff, 0.0);  // bf16 rounding is visible...
  EXPECT_LT(r.diff, 1e-5);  // ...but small
  EXPECT_LE(r.max_rel_err, 0x1p-8);
  EXPECT_LE(r.max_err_ratio, 1.0);
  // Without abs_sum the bound falls back to |ref|; the rounded reference still passes.
  EXPECT_TRUE(check_bf16_output(f.out.data(), f.n, f.ref.data(), nullptr, f.m, f.n).ok);
  // A tight max_diff fails on the diff alone.
  const CheckResult tight = check_bf16_output(f.out.data(), f.n, f.ref.data(), f.abs_sum.data(), f.m, f.n, 1e-12);
  EXPECT_FALSE(tight.ok);
  EXPECT_EQ(tight.num_bad, 0);
}

TEST(ReferenceCheck, FailsOnOneWrongElement) {
  CheckFixture f = make_check_fixture();
  const int64_t idx = argmax_abs(f.ref);
  f.out[idx] ^= 0x0010;  // a mantissa bit: 2^-3 .. 2^-4 relative
  const CheckResult r = check_bf16_output(f.out.data(), f.n, f.ref.data(), f.abs_sum.data(), f.m, f.n);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.num_bad, 1);
  EXPECT_EQ(r.first_bad, idx);
  EXPECT_EQ(r.first_ref, f.ref[idx]);
  EXPECT_NE(r.summary().find("FAILED"), std::string::npos);
  // One bf16 ulp off on the largest element, stepping away from the reference: the error is then at least one ulp,
  // which exceeds the half-ulp rounding term.
  CheckFixture g = make_check_fixture();
  const uint16_t rounded = double_to_bf16(g.ref[idx]);
  const bool rounded_down = std::fabs(bf16_to_float(rounded)) <= std::fabs(g.ref[idx]);
  // Sign-magnitude codes: -1 is one ulp smaller in magnitude, +1 one ulp larger.
  g.out[idx] = static_cast<uint16_t>(rounded_down ? rounded - 1 : rounded + 1);
  const double err = std::fabs(bf16_to_float(g.out[idx]) - g.ref[idx]);
  ASSERT_GT(err, 0x1p-8 * std::fabs(g.ref[idx]) + 0x1p-20 * g.abs_sum[idx]) << "the test's premise";
  const CheckResult r_ulp = check_bf16_output(g.out.data(), g.n, g.ref.data(), g.abs_sum.data(), g.m, g.n);
  EXPECT_FALSE(r_ulp.ok);
  EXPECT_EQ(r_ulp.num_bad, 1);
  EXPECT_EQ(r_ulp.first_bad, idx);
}

TEST(ReferenceCheck, BoundIsHalfUlpPlusAccumulationTerm) {
  // Synthetic 1 x 4 outputs around 1.0, where a bf16 ulp is 2^-7.
  const std::vector<double> ref = {1.0 + 0x1p-8 - 0x1p-14,  // below the midpoint of 1 and 1 + 2^-7
                                   1.0 + 0x1p-8,            // exactly the midpoint
                                   1.0, 1.0};
  const std::vector<double> no_accumulation(4, 0.0);
  // Correct rounding, either neighbour at the tie, and exact values pass with no accumulation term.
  const std::vector<uint16_t> good = {0x3F80, 0x3F81, 0x3F80, 0x3F80};
  EXPECT_TRUE(check_bf16_output(good.data(), 4, ref.data(), no_accumulation.data(), 1, 4, 1.0).ok);
  // Rounding the wrong way off a non-tie is more than half an ulp away.
  const std::vector<uint16_t> wrong_way = {0x3F81, 0x3F80, 0x3F80, 0x3F80};
  const CheckResult r = check_bf16_output(wrong_way.data(), 4, ref.data(), no_accumulation.data(), 1, 4, 1.0);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.first_bad, 0);
  EXPECT_EQ(r.num_bad, 1);
  // One ulp (2^-7) off an exact 1.0 passes exactly when 2^-20 * abs_sum covers the other half ulp.
  const std::vector<uint16_t> one_ulp = {0x3F80, 0x3F80, 0x3F81, 0x3F81};
  const std::vector<double> abs_sum = {0.0, 0.0, 0x1p10, 0x1p12};  // accumulation terms 2^-10 and 2^-8
  const CheckResult r2 = check_bf16_output(one_ulp.data(), 4, ref.data(), abs_sum.data(), 1, 4, 1.0);
  EXPECT_EQ(r2.num_bad, 1);
  EXPECT_EQ(r2.first_bad, 2);
}

TEST(ReferenceCheck, FailsOnNaN) {
  CheckFixture f = make_check_fixture();
  const int64_t idx = 3 * f.n + 17;
  f.out[idx] = 0x7FC0;
  const CheckResult r = check_bf16_output(f.out.data(), f.n, f.ref.data(), f.abs_sum.data(), f.m, f.n);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.num_bad, 1);
  EXPECT_EQ(r.first_bad, idx);
  EXPECT_TRUE(std::isnan(r.first_out));
  f.out[idx] = 0x7F80;  // +inf
  EXPECT_FALSE(check_bf16_output(f.out.data(), f.n, f.ref.data(), f.abs_sum.data(), f.m, f.n).ok);
}

TEST(ReferenceCheck, FailsOnUnwrittenElement) {
  const CheckFixture f = make_check_fixture();
  // A strided output (ld_out > n): poison everything, write all but one element. The padding stays poisoned.
  const int64_t ld_out = f.n + 8;
  std::vector<uint16_t> out(static_cast<size_t>(f.m * ld_out), kBf16Poison);
  const int64_t skip_row = f.m - 1, skip_col = f.n - 1;
  for (int64_t i = 0; i < f.m; ++i)
    for (int64_t j = 0; j < f.n; ++j)
      if (i != skip_row || j != skip_col) out[i * ld_out + j] = f.out[i * f.n + j];
  const CheckResult r = check_bf16_output(out.data(), ld_out, f.ref.data(), f.abs_sum.data(), f.m, f.n);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.num_bad, 1);
  EXPECT_EQ(r.first_bad, skip_row * f.n + skip_col);
  EXPECT_NE(r.summary().find("unwritten"), std::string::npos) << r.summary();
  // Once written, it passes: the poisoned padding columns are not part of the output.
  out[skip_row * ld_out + skip_col] = f.out[skip_row * f.n + skip_col];
  EXPECT_TRUE(check_bf16_output(out.data(), ld_out, f.ref.data(), f.abs_sum.data(), f.m, f.n).ok);
}

// ---- fp32 output check ---------------------------------------------------------------------------------------------

float f32_from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }

/// A weight-gradient-like output: the 1x128-by-1x128 reference plus C, and the kernel's answer if its product were
/// exact (fl(fl(product) + C), both fp32 roundings of a correct kernel).
struct F32Fixture {
  int64_t m = 70, n = 136, k = 300;
  std::vector<double> product, abs_sum, ref;  // ref = product + C
  std::vector<float> c, out;
};

/// C[i] is normal, scaled by c_scale times the product's magnitude abs_sum[i] (the scales make that vary widely).
F32Fixture make_f32_fixture(double c_scale) {
  F32Fixture f;
  const RandomProblem p = make_problem(f.m, f.n, f.k, 91, 0, true);
  f.product =
      gemm_nt_reference_sb_per_row(p.a.data(), p.sa.data(), p.b.data(), p.sb.data(), f.m, f.n, f.k, &f.abs_sum);
  f.c.resize(f.product.size());
  fill_random_normal(f.c, 92);
  for (size_t i = 0; i < f.c.size(); ++i) f.c[i] = static_cast<float>(f.c[i] * c_scale * f.abs_sum[i]);
  f.ref = f.product;
  add_c_to_reference(f.ref, f.c.data(), f.n, f.m, f.n);
  f.out.resize(f.product.size());
  for (size_t i = 0; i < f.product.size(); ++i) f.out[i] = static_cast<float>(f.product[i]) + f.c[i];
  return f;
}

TEST(ReferenceCheckF32, PassesOnRoundedReference) {
  for (const double c_scale : {0.0, 1.0, 0x1p20}) {
    SCOPED_TRACE(c_scale);
    const F32Fixture f = make_f32_fixture(c_scale);
    // The kernel's two roundings (product, then + C) with no accumulation error: the accumulation term covers the
    // first, the rounding term the second.
    const CheckResult r = check_f32_output(f.out.data(), f.n, f.ref.data(), f.abs_sum.data(), f.m, f.n);
    EXPECT_TRUE(r.ok) << r.summary();
    EXPECT_LE(r.max_err_ratio, 1.0);
    EXPECT_LT(r.diff, 1e-13);  // fp32 rounding, far below the bf16 level (~1e-6)
    // The reference rounded once to fp32 passes with no accumulation term at all, at most half an ulp off.
    std::vector<float> rounded(f.ref.size());
    for (size_t i = 0; i < f.ref.size(); ++i) rounded[i] = static_cast<float>(f.ref[i]);
    const std::vector<double> zeros(f.ref.size(), 0.0);
    const CheckResult exact = check_f32_output(rounded.data(), f.n, f.ref.data(), zeros.data(), f.m, f.n, 1e-5, 0.0);
    EXPECT_TRUE(exact.ok) << exact.summary();
    EXPECT_LE(exact.max_rel_err, 0x1p-24);
  }
}

TEST(ReferenceCheckF32, BoundIsHalfUlpPlusAccumulationTerm) {
  // Synthetic 1 x 4 outputs around 1.0, where an fp32 ulp is 2^-23.
  const std::vector<double> ref = {1.0 + 0x1p-24 - 0x1p-30,  // below the midpoint of 1 and 1 + 2^-23
                                   1.0 + 0x1p-24,            // exactly the midpoint
                                   1.0, 1.0};
  const std::vector<double> no_accumulation(4, 0.0);
  const float one = 1.0f, next = f32_from_bits(bits_of(1.0f) + 1);
  const std::vector<float> good = {one, next, one, one};  // correct rounding, either neighbour at the tie
  EXPECT_TRUE(check_f32_output(good.data(), 4, ref.data(), no_accumulation.data(), 1, 4, 1.0, 0.0).ok);
  const std::vector<float> wrong_way = {next, one, one, one};
  const CheckResult r = check_f32_output(wrong_way.data(), 4, ref.data(), no_accumulation.data(), 1, 4, 1.0, 0.0);
  EXPECT_EQ(r.num_bad, 1);
  EXPECT_EQ(r.first_bad, 0);
  // One ulp (2^-23) off an exact 1.0 passes exactly when accum_tolerance * abs_sum covers the other half ulp.
  const std::vector<float> one_ulp = {one, one, next, next};
  const std::vector<double> abs_sum = {0.0, 0.0, 0x1p-6, 0x1p-3};  // with 2^-20: terms 2^-26 and 2^-23
  const CheckResult r2 = check_f32_output(one_ulp.data(), 4, ref.data(), abs_sum.data(), 1, 4, 1.0, 0x1p-20);
  EXPECT_EQ(r2.num_bad, 1);
  EXPECT_EQ(r2.first_bad, 2);
}

TEST(ReferenceCheckF32, FailsOnOneWrongElementNaNAndUnwritten) {
  F32Fixture f = make_f32_fixture(1.0);
  const int64_t idx = argmax_abs(f.ref);
  std::vector<float> out = f.out;
  out[idx] = f32_from_bits(bits_of(out[idx]) ^ 0x00004000);  // a mantissa bit: 2^-9 .. 2^-10 relative
  CheckResult r = check_f32_output(out.data(), f.n, f.ref.data(), f.abs_sum.data(), f.m, f.n);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.num_bad, 1);
  EXPECT_EQ(r.first_bad, idx);
  out = f.out;
  out[5] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(check_f32_output(out.data(), f.n, f.ref.data(), f.abs_sum.data(), f.m, f.n).ok);
  // A strided output, poisoned, every element written but one.
  const int64_t ld_out = f.n + 4;
  std::vector<float> strided(static_cast<size_t>(f.m * ld_out), f32_from_bits(kF32Poison));
  for (int64_t i = 0; i < f.m; ++i)
    for (int64_t j = 0; j < f.n; ++j)
      if (i != 1 || j != 2) strided[i * ld_out + j] = f.out[i * f.n + j];
  r = check_f32_output(strided.data(), ld_out, f.ref.data(), f.abs_sum.data(), f.m, f.n);
  EXPECT_EQ(r.num_bad, 1);
  EXPECT_EQ(r.first_bad, 1 * f.n + 2);
  EXPECT_TRUE(std::isnan(r.first_out));
  EXPECT_NE(r.summary().find("unwritten"), std::string::npos) << r.summary();
  strided[1 * ld_out + 2] = f.out[1 * f.n + 2];
  EXPECT_TRUE(check_f32_output(strided.data(), ld_out, f.ref.data(), f.abs_sum.data(), f.m, f.n).ok);
  EXPECT_THROW(check_f32_output(out.data(), f.n - 1, f.ref.data(), nullptr, f.m, f.n), std::invalid_argument);
}

TEST(ReferenceCheckF32, CatchesCAddedAtLowPrecision) {
  // With C much larger than the product, a C rounded to bf16 before the add (an error of up to 2^-9 |C|) fails even
  // under the GPU checks' accumulation tolerance of 2^-9: abs_sum is the product's magnitude, not |C|'s.
  const F32Fixture f = make_f32_fixture(0x1p12);
  std::vector<float> low(f.out.size());
  for (size_t i = 0; i < low.size(); ++i)
    low[i] = static_cast<float>(f.product[i]) + bf16_to_float(float_to_bf16(f.c[i]));
  const CheckResult r = check_f32_output(low.data(), f.n, f.ref.data(), f.abs_sum.data(), f.m, f.n, 1e-5, 0x1p-9);
  EXPECT_FALSE(r.ok);
  EXPECT_GT(r.num_bad, f.m * f.n / 2) << r.summary();
  // The correct sum passes under the same tolerance.
  EXPECT_TRUE(check_f32_output(f.out.data(), f.n, f.ref.data(), f.abs_sum.data(), f.m, f.n, 1e-5, 0x1p-9).ok);
}

}  // namespace
}  // namespace finegemm::reference
