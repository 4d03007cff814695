// The FP8 quantizer kernels (per-token 1x128 and per-block 128x128, bf16 and fp32 inputs) compile through NVRTC for
// sm_90a without local memory, and their SASS has the shape the bandwidth design relies on (kernels/quantize.cuh):
// only 16-byte loads, issued before the first shuffle; no subroutine calls (IEEE division slow paths) and no FP64;
// one FMUL and two FFMAs per element for the division; the saturating e4m3 conversion; few instructions per element.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "finegemm/device/common/quantize_args.cuh"
#include "jit/compiler.hpp"
#include "jit/runtime.hpp"
#include "unit/nvdisasm.hpp"

namespace fd = finegemm::device;
namespace fj = finegemm::jit;

namespace {

constexpr uint32_t kElemsPerThread = fd::kQuantRowsPerThread * fd::kQuantElemsPerThreadRow;  // 64
constexpr uint32_t kFp32OpsPerRowScale = 7;  // block_scale: FMUL + 2 FFMA; reciprocal_rn: 4 FFMA
// Measured with CUDA 13.0: 8.5 (per-token) and 8.6 (per-block) for bf16, 8.8 and 9.0 for fp32. A regression guard.
constexpr double kMaxInstructionsPerElement = 10.0;

struct Variant {
  std::string function;
  bool per_token, bf16;
};

/// The instructions of a one-kernel SASS listing (nvdisasm text), predicates stripped, NOPs dropped.
std::vector<std::string> instructions_of(const std::string& sass) {
  std::vector<std::string> out;
  std::istringstream lines(sass);
  for (std::string line; std::getline(lines, line);) {
    const size_t address_end = line.find("*/");
    if (line.find("/*") == std::string::npos || address_end == std::string::npos || line.find(';') == std::string::npos)
      continue;
    std::string text = line.substr(address_end + 2, line.find(';') - address_end - 2);
    text.erase(0, text.find_first_not_of(' '));
    if (text.rfind('@', 0) == 0) text.erase(0, text.find(' ') + 1);
    if (text.rfind("NOP", 0) != 0) out.push_back(text);
  }
  return out;
}

size_t count_prefix(const std::vector<std::string>& code, const std::string& prefix) {
  return size_t(std::count_if(code.begin(), code.end(), [&](const std::string& s) { return s.rfind(prefix, 0) == 0; }));
}

/// Index of the first (or last) instruction starting with `prefix`; code.size() when there is none.
size_t find_prefix(const std::vector<std::string>& code, const std::string& prefix, bool last = false) {
  size_t found = code.size();
  for (size_t i = 0; i < code.size(); ++i)
    if (code[i].rfind(prefix, 0) == 0) {
      found = i;
      if (!last) break;
    }
  return found;
}

}  // namespace

TEST(QuantizeCompile, AllVariantsCompileWithoutSpillsIntoTheIntendedSass) {
  fj::Options options;
  options.cache_dir = "";  // compile here, so the compiler log (ptxas' report) is available
  fj::Runtime runtime(options);
  const std::vector<Variant> variants = {{"finegemm::device::per_token_cast_kernel<true>", true, true},
                                         {"finegemm::device::per_token_cast_kernel<false>", true, false},
                                         {"finegemm::device::per_block_cast_kernel<true>", false, true},
                                         {"finegemm::device::per_block_cast_kernel<false>", false, false}};
  const std::string nvdisasm = finegemm::test::find_nvdisasm();
  if (nvdisasm.empty())
    std::fprintf(stderr, "\n*** SKIPPED SASS checks: nvdisasm not found (pip install nvidia-cuda-nvdisasm) ***\n\n");
  for (const Variant& v : variants) {
    const fj::KernelSpec spec{"finegemm/device/kernels/quantize.cuh", v.function,
                              "(const finegemm::device::QuantizeArgs)"};
    const auto binary = runtime.binary(spec);
    ASSERT_TRUE(binary->compiled) << v.function;
    EXPECT_EQ(binary->cubin.compare(0, 4, "\x7f" "ELF"), 0) << v.function;
    EXPECT_NE(binary->symbol.find(v.per_token ? "per_token_cast_kernel" : "per_block_cast_kernel"), std::string::npos)
        << binary->symbol;
    EXPECT_EQ(fj::spill_bytes_from_log(binary->log), 0) << v.function << "\n" << binary->log;
    if (nvdisasm.empty()) continue;
    const std::string sass = finegemm::test::disassemble(binary->cubin, nvdisasm);
    const std::vector<std::string> code = instructions_of(sass);
    ASSERT_FALSE(code.empty()) << v.function;

    // Memory: every load 16 bytes (8 per thread for bf16, 16 for fp32), codes stored 8 (bf16) or 4 (fp32) at a time,
    // no local memory.
    const size_t num_loads = kElemsPerThread * (v.bf16 ? 2 : 4) / 16;
    EXPECT_EQ(count_prefix(code, "LDG.E.128"), num_loads) << v.function;
    EXPECT_EQ(count_prefix(code, "LDG"), num_loads) << v.function << ": a load narrower than 16 bytes";
    EXPECT_EQ(count_prefix(code, v.bf16 ? "STG.E.64 " : "STG.E "), num_loads + (v.bf16 ? 0 : 1 + v.per_token))
        << v.function;
    EXPECT_EQ(count_prefix(code, "LDL") + count_prefix(code, "STL"), 0u) << v.function << " uses local memory";
    // NOTE: ptxas defers the second row's loads of per-token fp32 (8 loads per row are in flight either way).
    if (v.bf16 || !v.per_token)
      EXPECT_LT(find_prefix(code, "LDG", true), find_prefix(code, "SHFL")) << v.function << ": a load after the amax";
    // Programmatic dependent launch (finegemm::set_pdl): the wait comes before the first load.
    EXPECT_EQ(count_prefix(code, "ACQBULK"), 1u) << v.function;
    EXPECT_EQ(count_prefix(code, "PREEXIT"), 1u) << v.function;
    EXPECT_LT(find_prefix(code, "ACQBULK"), find_prefix(code, "LDG")) << v.function;

    // Arithmetic: no calls (the IEEE division's slow path is one), no FP64, FMUL + 2 FFMA per element, the saturating
    // conversion, and a bounded instruction count.
    EXPECT_EQ(count_prefix(code, "CALL"), 0u) << v.function;
    for (const char* fp64 : {"DADD", "DMUL", "DFMA", "DSETP", "F2F.F64", "MUFU.RCP64H"})
      EXPECT_EQ(count_prefix(code, fp64), 0u) << v.function << " uses FP64: " << fp64;
    const size_t fp32_ops = count_prefix(code, "FMUL") + count_prefix(code, "FFMA");
    const size_t num_row_scales = v.per_token ? fd::kQuantRowsPerThread : 1;
    EXPECT_EQ(fp32_ops, 3 * kElemsPerThread + kFp32OpsPerRowScale * num_row_scales) << v.function;
    EXPECT_EQ(count_prefix(code, "F2FP.SATFINITE.E4M3.F32.PACK_AB"), kElemsPerThread / 2) << v.function;
    const double per_element = double(code.size()) / kElemsPerThread;
    const size_t used = binary->log.find("Used ");
    const std::string registers =
        used == std::string::npos ? "?" : binary->log.substr(used, binary->log.find(',', used) - used);
    std::printf("[quantize] %s: %zu SASS instructions, %.2f per element; ptxas: %s\n", v.function.c_str(), code.size(),
                per_element, registers.c_str());
    EXPECT_LE(per_element, kMaxInstructionsPerElement) << v.function;
  }
  if (nvdisasm.empty()) GTEST_SKIP() << "SASS content not checked: nvdisasm missing";
}
