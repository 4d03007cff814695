// FP8 e4m3 and bf16 conversions, bit-exact with CUDA's host implementations (see reference.hpp for the NaN details).
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "reference/reference.hpp"

namespace finegemm::reference {

namespace {

constexpr uint32_t kFloatAbsMask = 0x7FFFFFFFu;
constexpr uint32_t kFloatInfBits = 0x7F800000u;
constexpr uint32_t kFloat448Bits = 0x43E00000u;     // 448.0f: the e4m3 saturation point
constexpr uint32_t kFloatMinNormE4M3 = 0x3C800000u;  // 2^-6: the smallest normal e4m3 value
constexpr int kFloatMantissaBits = 23;
constexpr int kE4M3MantissaBits = 3;
constexpr int kE4M3Bias = 7;
constexpr int kFloatBias = 127;
// Shift that aligns a float's (exponent, mantissa) to e4m3's 3-bit mantissa field.
constexpr int kDroppedBits = kFloatMantissaBits - kE4M3MantissaBits;  // 20
// Subnormal e4m3 codes count units of 2^-9.
constexpr int kE4M3SubnormalShift = kE4M3Bias - 1 + kE4M3MantissaBits;  // 9

// Round-to-nearest-even right shift of an unsigned value.
uint32_t shift_right_rne(uint32_t value, int shift) {
  if (shift == 0) return value;
  if (shift > 31) return 0;
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return (rest > half || (rest == half && (kept & 1u))) ? kept + 1u : kept;
}

float decode_e4m3(uint8_t code) {
  const bool negative = (code & 0x80u) != 0;
  const int exponent = (code >> kE4M3MantissaBits) & 0xF;
  const int mantissa = code & 0x7;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -kE4M3SubnormalShift);
  } else {
    magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - kE4M3Bias - kE4M3MantissaBits);
  }
  return negative ? -magnitude : magnitude;
}

std::array<float, 256> make_decode_table() {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) table[code] = decode_e4m3(static_cast<uint8_t>(code));
  return table;
}

// A function-local static, so that static initializers of other translation units may already decode.
const std::array<float, 256>& decode_table() {
  static const std::array<float, 256> table = make_decode_table();
  return table;
}

}  // namespace

uint8_t float_to_e4m3(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t abs_bits = bits & kFloatAbsMask;
  if (abs_bits > kFloatInfBits) return kE4M3NaN;
  if (abs_bits >= kFloat448Bits) return static_cast<uint8_t>(sign | kE4M3MaxCode);
  if (abs_bits >= kFloatMinNormE4M3) {
    // Normal range: round the mantissa to 3 bits (a carry moves into the exponent), then rebias the exponent.
    const uint32_t rounded = shift_right_rne(abs_bits, kDroppedBits);
    const uint32_t rebias = static_cast<uint32_t>(kFloatBias - kE4M3Bias) << kE4M3MantissaBits;
    return static_cast<uint8_t>(sign | (rounded - rebias));
  }
  // Subnormal range: the code is |x| * 2^9 rounded to an integer (8 rounds up to the smallest normal, code 0x08).
  const int biased_exponent = static_cast<int>(abs_bits >> kFloatMantissaBits);
  if (biased_exponent == 0) return static_cast<uint8_t>(sign);  // float subnormals are far below 2^-10
  const uint32_t significand = (abs_bits & ((1u << kFloatMantissaBits) - 1u)) | (1u << kFloatMantissaBits);
  // |x| * 2^9 = significand * 2^(biased_exponent - 127 - 23 + 9)
  const int shift = kFloatBias + kFloatMantissaBits - kE4M3SubnormalShift - biased_exponent;
  return static_cast<uint8_t>(sign | shift_right_rne(significand, shift));
}

float e4m3_to_float(uint8_t code) { return decode_table()[code]; }

const float* e4m3_decode_table() { return decode_table().data(); }

uint16_t float_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & kFloatAbsMask) > kFloatInfBits) return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  return static_cast<uint16_t>(shift_right_rne(bits, 16));
}

uint16_t double_to_bf16(double x) {
  // Round to float with round-to-odd (24 bits >= 8 + 2, so the following nearest-even rounding to bf16 is exact).
  float f = static_cast<float>(x);
  if (std::isfinite(x) && static_cast<double>(f) != x) {
    uint32_t bits = std::bit_cast<uint32_t>(f);
    if (std::fabs(static_cast<double>(f)) > std::fabs(x)) bits -= 1;  // step toward zero
    f = std::bit_cast<float>(bits | 1u);
  }
  return float_to_bf16(f);
}

float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

}  // namespace finegemm::reference
