// The 1x128 / 128x128 quantizers, scale layout conversions and random problem generation.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "reference/reference.hpp"

namespace finegemm::reference {

namespace {

void require(bool condition, const char* where, const std::string& message) {
  if (!condition) throw std::invalid_argument(std::string("finegemm::reference::") + where + ": " + message);
}

void check_matrix_args(const void* data, int64_t rows, int64_t cols, const char* where) {
  require(rows >= 0 && cols >= 0, where,
          "rows and cols must be non-negative, got " + std::to_string(rows) + "x" + std::to_string(cols));
  require(data != nullptr || rows * cols == 0, where, "null input for a non-empty matrix");
}

// Quantizes the block x[0:rows, 0:cols] (row stride ld) into q (row stride ld) and returns its scale.
float quantize_block(const float* x, int64_t ld, int64_t rows, int64_t cols, uint8_t* q, const char* where) {
  float amax = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[r * ld + c];
      // The message is built only on failure (building it for every element made the quantizers ~6x slower).
      if (!std::isfinite(v)) require(false, where, "non-finite input value " + std::to_string(v));
      amax = std::max(amax, std::fabs(v));
    }
  }
  const float scale = std::max(amax, kMinAmax) / kE4M3Max;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) q[r * ld + c] = float_to_e4m3(x[r * ld + c] / scale);
  return scale;
}

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1p-53; }  // [0, 1)

// n normally distributed floats (mean 0, standard deviation `stddev`) into out: Box-Muller, two values per pair of
// uniforms (written out so the sequence does not depend on the standard library).
void draw_normals(std::mt19937_64& rng, float* out, size_t n, double stddev) {
  for (size_t i = 0; i < n; i += 2) {
    const double u1 = 1.0 - uniform01(rng);  // (0, 1]
    const double u2 = uniform01(rng);
    const double radius = std::sqrt(-2.0 * std::log(u1)) * stddev;
    const double angle = 2.0 * std::numbers::pi * u2;
    out[i] = static_cast<float>(radius * std::cos(angle));
    if (i + 1 < n) out[i + 1] = static_cast<float>(radius * std::sin(angle));
  }
}

}  // namespace

QuantizedMatrix quantize_per_token(const float* x, int64_t rows, int64_t cols) {
  check_matrix_args(x, rows, cols, "quantize_per_token");
  const int64_t num_k_blocks = ceil_div(cols, kBlockK);
  QuantizedMatrix q;
  q.rows = rows;
  q.cols = cols;
  q.data.resize(static_cast<size_t>(rows * cols));
  q.scales.resize(static_cast<size_t>(rows * num_k_blocks));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t kb = 0; kb < num_k_blocks; ++kb) {
      const int64_t c0 = kb * kBlockK;
      const int64_t width = std::min<int64_t>(kBlockK, cols - c0);
      q.scales[r * num_k_blocks + kb] =
          quantize_block(x + r * cols + c0, cols, 1, width, q.data.data() + r * cols + c0, "quantize_per_token");
    }
  }
  return q;
}

QuantizedMatrix quantize_per_block(const float* w, int64_t rows, int64_t cols) {
  check_matrix_args(w, rows, cols, "quantize_per_block");
  const int64_t num_row_blocks = ceil_div(rows, kBlockN);
  const int64_t num_k_blocks = ceil_div(cols, kBlockK);
  QuantizedMatrix q;
  q.rows = rows;
  q.cols = cols;
  q.data.resize(static_cast<size_t>(rows * cols));
  q.scales.resize(static_cast<size_t>(num_row_blocks * num_k_blocks));
  for (int64_t rb = 0; rb < num_row_blocks; ++rb) {
    const int64_t r0 = rb * kBlockN;
    const int64_t height = std::min<int64_t>(kBlockN, rows - r0);
    for (int64_t kb = 0; kb < num_k_blocks; ++kb) {
      const int64_t c0 = kb * kBlockK;
      const int64_t width = std::min<int64_t>(kBlockK, cols - c0);
      q.scales[rb * num_k_blocks + kb] = quantize_block(w + r0 * cols + c0, cols, height, width,
                                                        q.data.data() + r0 * cols + c0, "quantize_per_block");
    }
  }
  return q;
}

std::vector<float> dequantize_per_token(const QuantizedMatrix& q) {
  const int64_t num_k_blocks = ceil_div(q.cols, kBlockK);
  require(static_cast<int64_t>(q.data.size()) == q.rows * q.cols &&
              static_cast<int64_t>(q.scales.size()) == q.rows * num_k_blocks,
          "dequantize_per_token", "data/scales sizes do not match a per-token quantization");
  std::vector<float> out(q.data.size());
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      out[r * q.cols + c] = e4m3_to_float(q.data[r * q.cols + c]) * q.scales[r * num_k_blocks + c / kBlockK];
  return out;
}

std::vector<float> dequantize_per_block(const QuantizedMatrix& q) {
  const int64_t num_k_blocks = ceil_div(q.cols, kBlockK);
  require(static_cast<int64_t>(q.data.size()) == q.rows * q.cols &&
              static_cast<int64_t>(q.scales.size()) == ceil_div(q.rows, kBlockN) * num_k_blocks,
          "dequantize_per_block", "data/scales sizes do not match a per-block quantization");
  std::vector<float> out(q.data.size());
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      out[r * q.cols + c] =
          e4m3_to_float(q.data[r * q.cols + c]) * q.scales[(r / kBlockN) * num_k_blocks + c / kBlockK];
  return out;
}

std::vector<float> scales_to_mn_major(const std::vector<float>& k_major, int64_t m, int64_t kb) {
  require(m >= 0 && kb >= 0, "scales_to_mn_major", "negative size");
  require(static_cast<int64_t>(k_major.size()) == m * kb, "scales_to_mn_major",
          "expected " + std::to_string(m * kb) + " K-major scales, got " + std::to_string(k_major.size()));
  const int64_t m_pad = align_up(m, kScaleAlignMN);
  std::vector<float> mn_major(static_cast<size_t>(kb * m_pad), 0.0f);
  for (int64_t row = 0; row < m; ++row)
    for (int64_t kb_idx = 0; kb_idx < kb; ++kb_idx) mn_major[kb_idx * m_pad + row] = k_major[row * kb + kb_idx];
  return mn_major;
}

std::vector<float> scales_from_mn_major(const std::vector<float>& mn_major, int64_t m, int64_t kb) {
  require(m >= 0 && kb >= 0, "scales_from_mn_major", "negative size");
  const int64_t m_pad = align_up(m, kScaleAlignMN);
  require(static_cast<int64_t>(mn_major.size()) == kb * m_pad, "scales_from_mn_major",
          "expected " + std::to_string(kb * m_pad) + " MN-major scales, got " + std::to_string(mn_major.size()));
  std::vector<float> k_major(static_cast<size_t>(m * kb));
  for (int64_t row = 0; row < m; ++row)
    for (int64_t kb_idx = 0; kb_idx < kb; ++kb_idx) k_major[row * kb + kb_idx] = mn_major[kb_idx * m_pad + row];
  return k_major;
}

void fill_random_fp8(std::vector<uint8_t>& out, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  while (i < out.size()) {
    uint64_t word = rng();
    for (int byte = 0; byte < 8 && i < out.size(); ++byte, word >>= 8) {
      const auto code = static_cast<uint8_t>(word & 0xFFu);
      if ((code & 0x7Fu) != kE4M3NaN) out[i++] = code;
    }
  }
}

void fill_random_scales(std::vector<float>& out, uint64_t seed, int lo_exp, int hi_exp) {
  require(lo_exp <= hi_exp && lo_exp >= -126 && hi_exp <= 127, "fill_random_scales",
          "need -126 <= lo_exp <= hi_exp <= 127, got " + std::to_string(lo_exp) + ", " + std::to_string(hi_exp));
  std::mt19937_64 rng(seed);
  for (float& s : out) s = static_cast<float>(std::exp2(lo_exp + uniform01(rng) * (hi_exp - lo_exp)));
}

void fill_random_normal(std::vector<float>& out, uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  draw_normals(rng, out.data(), out.size(), stddev);
}

void fill_quantized_normal_fp8(std::vector<uint8_t>& codes, std::vector<float>& scales, int64_t rows, int64_t cols,
                               int64_t block_rows, uint64_t seed) {
  require(rows >= 0 && cols >= 0 && block_rows >= 1, "fill_quantized_normal_fp8",
          "need rows, cols >= 0 and block_rows >= 1, got " + std::to_string(rows) + ", " + std::to_string(cols) +
              ", " + std::to_string(block_rows));
  const int64_t num_bands = ceil_div(rows, block_rows);
  const int64_t num_k_blocks = ceil_div(cols, kBlockK);
  codes.assign(static_cast<size_t>(rows * cols), 0);
  scales.assign(static_cast<size_t>(num_bands * num_k_blocks), 0.0f);
  // One band of block rows: its normals, then the blocks quantized in place.
  auto fill_band = [&](int64_t band, std::vector<float>& x) {
    const int64_t r0 = band * block_rows;
    const int64_t height = std::min(block_rows, rows - r0);
    x.resize(static_cast<size_t>(height * cols));
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(band) * 0xD1B54A32D192ED03ull + 1);
    draw_normals(rng, x.data(), x.size(), 1.0);
    for (int64_t kb = 0; kb < num_k_blocks; ++kb) {
      const int64_t c0 = kb * kBlockK;
      scales[static_cast<size_t>(band * num_k_blocks + kb)] =
          quantize_block(x.data() + c0, cols, height, std::min<int64_t>(kBlockK, cols - c0),
                         codes.data() + r0 * cols + c0, "fill_quantized_normal_fp8");
    }
  };
  const int64_t num_threads = std::clamp<int64_t>(static_cast<int64_t>(std::thread::hardware_concurrency()), 1,
                                                  std::max<int64_t>(num_bands, 1));
  std::atomic<int64_t> next_band{0};
  auto worker = [&]() {
    std::vector<float> x;
    for (int64_t band = next_band++; band < num_bands; band = next_band++) fill_band(band, x);
  };
  std::vector<std::thread> threads;
  try {
    for (int64_t t = 1; t < num_threads; ++t) threads.emplace_back(worker);
  } catch (const std::system_error&) {
    // No more threads to be had: the ones started and this one take every band.
  }
  worker();
  for (auto& th : threads) th.join();
}

}  // namespace finegemm::reference
