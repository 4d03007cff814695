// The FP8 quantizer kernels (per-token 1x128 and per-block 128x128, bf16 and fp32 inputs) compile through NVRTC for
// sm_90a without local-memory spills, convert with the saturating e4m3 instruction and divide without a reciprocal.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "jit/compiler.hpp"
#include "jit/runtime.hpp"
#include "unit/nvdisasm.hpp"

namespace fj = finegemm::jit;

TEST(QuantizeCompile, AllVariantsCompileWithoutSpills) {
  fj::Options options;
  options.cache_dir = "";  // compile here, so the compiler log (ptxas' report) is available
  fj::Runtime runtime(options);
  const std::vector<std::string> functions = {
      "finegemm::device::per_token_cast_kernel<true>", "finegemm::device::per_token_cast_kernel<false>",
      "finegemm::device::per_block_cast_kernel<true>", "finegemm::device::per_block_cast_kernel<false>"};
  const std::string nvdisasm = finegemm::test::find_nvdisasm();
  if (nvdisasm.empty())
    std::fprintf(stderr, "\n*** SKIPPED SASS checks: nvdisasm not found (pip install nvidia-cuda-nvdisasm) ***\n\n");
  for (const std::string& function : functions) {
    const fj::KernelSpec spec{"finegemm/device/kernels/quantize.cuh", function,
                              "(const finegemm::device::QuantizeArgs)", false};
    const auto binary = runtime.binary(spec);
    ASSERT_TRUE(binary->compiled) << function;
    EXPECT_EQ(binary->cubin.compare(0, 4, "\x7f" "ELF"), 0) << function;
    EXPECT_NE(binary->symbol.find(function.find("per_token") != std::string::npos ? "per_token_cast_kernel"
                                                                                   : "per_block_cast_kernel"),
              std::string::npos)
        << binary->symbol;
    EXPECT_EQ(fj::spill_bytes_from_log(binary->log), 0) << function << "\n" << binary->log;
    if (nvdisasm.empty()) continue;
    const std::string sass = finegemm::test::disassemble(binary->cubin, nvdisasm);
    ASSERT_FALSE(sass.empty()) << function;
    EXPECT_NE(sass.find("F2FP.SATFINITE.E4M3"), std::string::npos) << function << ": no saturating e4m3 conversion";
    EXPECT_NE(sass.find("LDG.E.128"), std::string::npos) << function << ": no 16-byte loads";
    EXPECT_NE(sass.find("STG.E.64"), std::string::npos) << function << ": no 8-byte stores";
    EXPECT_EQ(sass.find(" LDL"), std::string::npos) << function << " reads local memory";
    EXPECT_EQ(sass.find(" STL"), std::string::npos) << function << " writes local memory";
  }
  if (nvdisasm.empty()) GTEST_SKIP() << "SASS content not checked: nvdisasm missing";
}
