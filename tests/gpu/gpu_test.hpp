// The base fixture of the GPU tests: a Hopper GPU or a loud skip (never a pass), and one non-blocking stream per test.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "lib/device_buffer.hpp"

namespace finegemm::tools {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!has_hopper_gpu(&why)) {
      std::fprintf(stderr, "\n*** SKIPPED: GPU test needs a Hopper GPU: %s ***\n\n", why.c_str());
      GTEST_SKIP() << "no Hopper GPU: " << why;
    }
    FG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  cudaStream_t stream_ = nullptr;
};

}  // namespace finegemm::tools
