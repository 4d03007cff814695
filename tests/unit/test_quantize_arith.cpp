// The division-free arithmetic of the FP8 quantizers (kernels/quantize.cuh: block_scale, reciprocal_rn, divide_rn),
// replayed on the CPU with the same fp32 operations (products and FMAs, each rounded to nearest) and checked against
// IEEE division, exhaustively where the argument needs it.
//
// Scaling argument: while every intermediate stays normal, multiplying an operand by 2^k multiplies every rounded
// step by the same power of two, so one binade of each operand stands for all of them; the binades where that fails
// (the ends of the scale range, quotients below 2^-11) are checked on their own. The GPU test
// (tests/gpu/test_quantize_gpu.cpp) runs the device functions themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "finegemm/device/common/quantize_args.cuh"
#include "reference/reference.hpp"

namespace fd = finegemm::device;
namespace fr = finegemm::reference;

namespace {

// NOTE: hardware FMA keeps the exhaustive loops fast (a libm fmaf call is ~15x slower); the file is compiled with
// -ffp-contract=off so that each product below is its own rounding step, as FMUL is on the GPU.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FG_FMA_TARGET __attribute__((target("fma")))
bool cpu_has_fma() { return __builtin_cpu_supports("fma"); }
#else
#define FG_FMA_TARGET
bool cpu_has_fma() { return true; }
#endif

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

// ---- The device formulas, operation for operation ----------------------------------------------------------------

FG_FMA_TARGET inline float fma32(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

FG_FMA_TARGET inline float block_scale(float amax) {
  const float a = std::fmax(amax, fd::kQuantMinAmax);
  const float s0 = a * fd::kInvE4M3Max;
  return fma32(fma32(-s0, fd::kE4M3Max, a), fd::kInvE4M3Max, s0);
}

/// reciprocal_rn with the hardware seed replaced by `seed`.
FG_FMA_TARGET inline float reciprocal_from_seed(float scale, float seed) {
  const float r = fma32(seed, fma32(-scale, seed, 1.0f), seed);
  const float residual = fma32(-scale, r, 1.0f);
  const float neighbour = from_bits(bits_of(r) + (residual > 0.0f ? 1u : ~0u));
  return std::fabs(fma32(-scale, neighbour, 1.0f)) < std::fabs(residual) ? neighbour : r;
}

FG_FMA_TARGET inline float divide_rn(float x, float scale, float reciprocal) {
  const float q0 = x * reciprocal;
  const float neg_residual = fma32(q0, scale, -x);
  // NOTE: the negation as a sign flip: GCC folds -fma(a, b, -c) into fma(-a, b, c), which loses the sign of an
  // exact zero residual (LLVM, hence NVRTC, does not without no-signed-zeros; the GPU test checks x = -0).
  return fma32(from_bits(bits_of(neg_residual) ^ 0x80000000u), reciprocal, q0);
}

// ---- Parallel exhaustive loops ---------------------------------------------------------------------------------

/// Sum of count(i) over i in [first, last], spread over the machine's threads.
uint64_t parallel_count(uint64_t first, uint64_t last, const std::function<uint64_t(uint64_t, uint64_t)>& count) {
  const uint64_t num_threads = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t chunk = (last - first + num_threads) / num_threads;
  std::atomic<uint64_t> total{0};
  std::vector<std::thread> threads;
  for (uint64_t begin = first; begin <= last; begin += chunk)
    threads.emplace_back([&, begin] { total += count(begin, std::min(last, begin + chunk - 1)); });
  for (std::thread& t : threads) t.join();
  return total;
}

/// Floats with bits in [first, last] whose block_scale differs from the IEEE quotient.
FG_FMA_TARGET uint64_t block_scale_mismatches(uint64_t first, uint64_t last) {
  uint64_t bad = 0;
  for (uint64_t b = first; b <= last; ++b) {
    const float amax = from_bits(uint32_t(b));
    bad += bits_of(block_scale(amax)) != bits_of(std::fmax(amax, fd::kQuantMinAmax) / fd::kE4M3Max);
  }
  return bad;
}

/// Scales with bits in [first, last] for which some seed within kSeedUlps of 1 / scale misses RN(1 / scale).
constexpr int kSeedUlps = 3;  // rcp.approx is within 1 ulp (PTX ISA); margin for the argument
FG_FMA_TARGET uint64_t reciprocal_mismatches(uint64_t first, uint64_t last) {
  uint64_t bad = 0;
  for (uint64_t b = first; b <= last; ++b) {
    const float scale = from_bits(uint32_t(b));
    const float expected = 1.0f / scale;
    for (int d = -kSeedUlps; d <= kSeedUlps; ++d)
      bad += bits_of(reciprocal_from_seed(scale, from_bits(bits_of(expected) + uint32_t(d)))) != bits_of(expected);
  }
  return bad;
}

/// Scale significands (bits of [1, 2)) in [first, last] times every bf16 significand in [1, 2): quotients whose
/// divide_rn differs from x / scale.
FG_FMA_TARGET uint64_t bf16_divide_mismatches(uint64_t first, uint64_t last) {
  uint64_t bad = 0;
  for (uint64_t b = first; b <= last; ++b) {
    const float scale = from_bits(uint32_t(b));
    const float reciprocal = 1.0f / scale;
    for (uint32_t m = 0; m < 128; ++m) {
      const float x = from_bits(bits_of(1.0f) + (m << 16));
      bad += bits_of(divide_rn(x, scale, reciprocal)) != bits_of(x / scale);
    }
  }
  return bad;
}

/// Whether divide_rn's `got` stands for the IEEE quotient `expected`: the same float down to 2^-11, the same e4m3
/// code below.
bool same_quotient(float got, float expected) {
  return std::fabs(expected) >= 0x1p-11f ? bits_of(got) == bits_of(expected)
                                         : fr::float_to_e4m3(got) == fr::float_to_e4m3(expected);
}

/// Mismatches of divide_rn(x, scale) over every finite bf16 x whose quotient can occur (|x / scale| <= 449:
/// |x| <= amax and scale = RN(amax / 448)).
FG_FMA_TARGET uint64_t bf16_quotient_mismatches(float scale) {
  const float reciprocal = 1.0f / scale;
  uint64_t bad = 0;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float x = from_bits(b << 16);
    if (!std::isfinite(x) || !(std::fabs(x / scale) <= 449.0f)) continue;
    bad += !same_quotient(divide_rn(x, scale, reciprocal), x / scale);
  }
  return bad;
}

/// The same over random fp32 inputs.
FG_FMA_TARGET uint64_t fp32_divide_mismatches(uint64_t seed, uint64_t count) {
  std::mt19937_64 rng(seed);
  uint64_t bad = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const float scale = from_bits(bits_of(fd::kQuantMinScale) +
                                  uint32_t(rng() % (bits_of(fd::kQuantMaxScale) - bits_of(fd::kQuantMinScale) + 1)));
    const float x = std::ldexp(from_bits(bits_of(1.0f) | uint32_t(rng() & 0x7FFFFFu)), -int(rng() % 200)) *
                    (scale * fd::kE4M3Max) * (rng() % 2 ? -1.0f : 1.0f);
    if (!std::isfinite(x)) continue;
    bad += !same_quotient(divide_rn(x, scale, 1.0f / scale), x / scale);
  }
  return bad;
}

class QuantizeArith : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_has_fma()) {
      std::fprintf(stderr, "\n*** SKIPPED: the exhaustive quantizer arithmetic checks need a CPU with FMA ***\n\n");
      GTEST_SKIP() << "no FMA instructions on this CPU";
    }
  }
};

}  // namespace

TEST_F(QuantizeArith, ScaleConstantsAreTheRoundedQuotients) {
  EXPECT_EQ(bits_of(fd::kInvE4M3Max), bits_of(float(1.0 / 448.0)));
  EXPECT_EQ(bits_of(fd::kQuantMinScale), bits_of(float(0x1p-64 / 448.0)));
  EXPECT_EQ(bits_of(fd::kQuantMaxScale), bits_of(float(double(0x1.fffffep127f) / 448.0)));
  EXPECT_TRUE(std::isnormal(fd::kQuantMinScale) && std::isnormal(1.0f / fd::kQuantMaxScale));
}

TEST_F(QuantizeArith, BlockScaleIsTheIeeeQuotient) {
  // The first binade of the floor, one inner binade, the top binade (the scaling argument covers the rest), and
  // every 4099th float of the whole range with the amaxes below the floor.
  const uint64_t first = bits_of(fd::kQuantMinAmax), one = bits_of(1.0f), top = bits_of(0x1p127f);
  const uint64_t binade = 1u << 23, last = bits_of(0x1.fffffep127f);
  EXPECT_EQ(parallel_count(first, first + binade - 1, block_scale_mismatches), 0u);
  EXPECT_EQ(parallel_count(one, one + binade - 1, block_scale_mismatches), 0u);
  EXPECT_EQ(parallel_count(top, last, block_scale_mismatches), 0u);
  uint64_t bad = 0;
  for (uint64_t b = 0; b <= last; b += 4099) bad += block_scale_mismatches(b, b);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(bits_of(block_scale(0.0f)), bits_of(fd::kQuantMinScale));
}

TEST_F(QuantizeArith, ReciprocalIsCorrectlyRoundedFromAnySeedWithin3Ulps) {
  // Every significand (scales in [1, 2)), and the partial binades at both ends of the scale range.
  const uint64_t one = bits_of(1.0f), binade = 1u << 23;
  EXPECT_EQ(parallel_count(one, one + binade - 1, reciprocal_mismatches), 0u);
  const uint64_t min_scale = bits_of(fd::kQuantMinScale), max_scale = bits_of(fd::kQuantMaxScale);
  EXPECT_EQ(parallel_count(min_scale, (min_scale | (binade - 1)), reciprocal_mismatches), 0u);
  EXPECT_EQ(parallel_count(max_scale & ~uint64_t(binade - 1), max_scale, reciprocal_mismatches), 0u);
}

TEST_F(QuantizeArith, DivideIsTheIeeeQuotientForEveryBf16Significand) {
  // Every bf16 significand against every scale significand: 2^30 quotients, all rounded like x / scale.
  const uint64_t one = bits_of(1.0f), binade = 1u << 23;
  EXPECT_EQ(parallel_count(one, one + binade - 1, bf16_divide_mismatches), 0u);
}

TEST_F(QuantizeArith, DivideIsRightForEveryBf16InputAtTheEndsOfTheRange) {
  // Every bf16 input (all exponents) against the extreme scales and random ones: subnormal inputs, residuals and
  // quotients, and signed zeros.
  std::vector<float> scales = {fd::kQuantMinScale, from_bits(bits_of(fd::kQuantMinScale) + 1), 0x1p-72f, 1.0f,
                               fd::kQuantMaxScale, from_bits(bits_of(fd::kQuantMaxScale) - 1), 0x1p119f};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 64; ++i)
    scales.push_back(std::ldexp(1.0f + float(rng() % 4096) / 4096.0f, int(rng() % 190) - 72));
  for (const float scale : scales) EXPECT_EQ(bf16_quotient_mismatches(scale), 0u) << "scale " << scale;
  for (const float scale : {fd::kQuantMinScale, 1.0f, fd::kQuantMaxScale}) {
    EXPECT_EQ(bits_of(divide_rn(-0.0f, scale, 1.0f / scale)), bits_of(-0.0f));
    EXPECT_EQ(bits_of(divide_rn(0.0f, scale, 1.0f / scale)), bits_of(0.0f));
    EXPECT_EQ(fr::float_to_e4m3(divide_rn(-0x1p-149f, scale, 1.0f / scale)), 0x80);  // -0 code
  }
}

TEST_F(QuantizeArith, DivideMatchesForRandomFp32Inputs) {
  const uint64_t bad = parallel_count(0, 15, [](uint64_t first, uint64_t last) {
    uint64_t total = 0;
    for (uint64_t seed = first; seed <= last; ++seed) total += fp32_divide_mismatches(seed, 1u << 20);
    return total;
  });
  EXPECT_EQ(bad, 0u);
}
