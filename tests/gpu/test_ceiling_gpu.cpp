// The floor kernels of `finegemm bench --ceiling` (tools/lib/ceiling.hpp) do the work their times stand for: the
// stream kernel reads every piece it is given and writes every piece of its output; the tensor kernel's warpgroups run
// the batches asked for, on the operands they were given.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/gpu_test.hpp"
#include "lib/ceiling.hpp"
#include "lib/device_buffer.hpp"
#include "reference/reference.hpp"

namespace ft = finegemm::tools;
namespace fr = finegemm::reference;

namespace {

class Ceiling : public ft::GpuTest {};

}  // namespace

TEST_F(Ceiling, StreamKernelReadsAndWritesEveryPiece) {
  const ft::CeilingKernels kernels;
  struct Case {
    uint64_t read_units, write_units;
    int ctas_per_sm;
  };
  // Uneven splits over the grid, writes ahead of reads and the other way round, and each side empty.
  for (const Case& c : {Case{1000003, 54321, 2}, Case{4099, 700001, 8}, Case{123457, 0, 4}, Case{0, 98765, 4}}) {
    std::vector<uint32_t> src(size_t(c.read_units) * 4);
    std::mt19937 rng(uint32_t(c.read_units + c.write_units));
    for (uint32_t& w : src) w = rng();
    uint32_t expect[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < src.size(); ++i) expect[i % 4] ^= src[i];
    ft::DeviceBuffer d_src(std::max<size_t>(src.size() * 4, 16)), d_dst(std::max<uint64_t>(c.write_units, 1) * 16);
    ft::DeviceBuffer sink(16);
    if (!src.empty()) d_src.upload(src);
    d_dst.fill_byte(0xFF, stream_);
    sink.fill_byte(0, stream_);
    kernels.launch_stream(c.ctas_per_sm, d_src.get(), c.read_units, d_dst.get(), c.write_units, sink.as<uint32_t>(),
                          stream_);
    ft::sync_and_check(stream_, "stream_ceiling_kernel");
    const std::vector<uint32_t> got_sink = sink.download_as<uint32_t>(4);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(got_sink[size_t(j)], expect[j]) << "XOR of word " << j << " of every piece";
    const std::vector<uint32_t> dst = d_dst.download_as<uint32_t>(size_t(std::max<uint64_t>(c.write_units, 1)) * 4);
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < c.write_units; ++i) {
      const uint32_t lo = uint32_t(i), hi = uint32_t(i >> 32);
      const uint32_t* p = dst.data() + i * 4;
      wrong += p[0] != lo || p[1] != (lo ^ 0x5EED5EEDu) || p[2] != ~lo || p[3] != (lo ^ hi);
    }
    EXPECT_EQ(wrong, 0u) << c.write_units << " pieces written";
    std::printf("[ceiling] stream %llu pieces read, %llu written, %d CTAs/SM: ok\n", (unsigned long long)c.read_units,
                (unsigned long long)c.write_units, c.ctas_per_sm);
  }
}

TEST_F(Ceiling, TensorKernelRunsTheBatchesOnItsOperands) {
  const ft::CeilingKernels kernels;
  // The kernel wraps rows at the largest power of two <= the row count: A's 128 rows over 128 of 200, so the two
  // warpgroups of a CTA read rows 0 and 64.
  const uint32_t k = 256, a_rows = 200, b_rows = 300;
  std::vector<uint8_t> a(size_t(a_rows) * k), b(size_t(b_rows) * k);
  std::mt19937 rng(7);
  for (auto* v : {&a, &b})
    for (uint8_t& x : *v) {
      x = uint8_t(rng());
      if ((x & 0x7F) == 0x7F) x ^= 0x01;  // no NaN codes
    }
  ft::DeviceBuffer d_a = ft::DeviceBuffer::from_host(a), d_b = ft::DeviceBuffer::from_host(b);
  const int warpgroups = 2 * kernels.num_sms();
  for (uint32_t n : ft::CeilingKernels::kTensorN) {
    // About 3.8 batches per warpgroup: a wrong count moves D[0][0] by a quarter or more.
    const uint64_t batches = uint64_t(warpgroups) * 38 / 10;
    ft::DeviceBuffer out(kernels.tensor_out_words() * 4);
    out.fill_byte(0xFF, stream_);
    kernels.launch_tensor(n, d_a.as<uint8_t>(), a_rows, d_b.as<uint8_t>(), b_rows, k, batches, out.as<uint32_t>(),
                          stream_);
    ft::sync_and_check(stream_, "tensor_ceiling_kernel");
    const std::vector<uint32_t> words = out.download_as<uint32_t>(kernels.tensor_out_words());
    uint64_t total = 0, bad = 0;
    for (int w = 0; w < warpgroups; ++w) {
      const uint32_t count = words[size_t(2 * w)];
      total += count;
      // D[0][0] of warpgroup w: A's row (w % 2) * 64 times B's row 0, over the first K block.
      const uint8_t* a_row = a.data() + size_t((w % 2) * 64) * k;
      double dot = 0, mag = 0;
      for (uint32_t j = 0; j < 128; ++j) {
        const double p = double(fr::e4m3_to_float(a_row[j])) * double(fr::e4m3_to_float(b[j]));
        dot += p;
        mag += std::fabs(p);
      }
      float got;
      std::memcpy(&got, &words[size_t(2 * w + 1)], 4);
      bad += !(std::fabs(double(got) - count * dot) <= 1e-2 * count * mag + 1e-6);
    }
    EXPECT_EQ(total, batches) << "m64n" << n << "k32: batches run over all warpgroups";
    // Each CTA's loop time in cycles and nanoseconds: a clock between 200 MHz and the boost clock's 1980.
    int implausible = 0;
    for (int c = 0; c < kernels.num_sms(); ++c) {
      const double cycles = words[size_t(2 * (warpgroups + c))], ns = words[size_t(2 * (warpgroups + c) + 1)];
      implausible += !(ns > 0 && cycles / ns >= 0.2 && cycles / ns <= 2.0);
    }
    EXPECT_EQ(implausible, 0) << "CTAs whose cycles / ns is no SM clock";
    EXPECT_EQ(bad, 0u) << "m64n" << n << "k32: warpgroups whose D[0][0] is not batches x A[0] . B[0]";
    std::printf("[ceiling] tensor m64n%uk32: %llu batches over %d warpgroups, D[0][0] checked: %s\n", n,
                (unsigned long long)total, warpgroups, bad == 0 ? "ok" : "WRONG");
  }
}
