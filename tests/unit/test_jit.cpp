// The JIT runtime on the CPU: NVRTC compiles a real templated kernel for sm_90a into a cubin holding exactly that
// kernel; the disk cache turns a second runtime's request into a hit, rebuilds a corrupt entry, and is hit from a copy
// of the installed library in another directory.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "jit/compiler.hpp"
#include "jit/embedded_headers.hpp"
#include "jit/runtime.hpp"
#include "lib/jit_kernel.hpp"
#include "nvdisasm.hpp"
#include "sass/elf.hpp"
#include "test_headers.hpp"

namespace fs = std::filesystem;
namespace fj = finegemm::jit;

namespace {

const fj::KernelSpec kSmoke{"finegemm/tests/jit_smoke.cuh", "finegemm::test::jit_smoke_kernel<1024u>",
                            "(float*, const float*)", false, &finegemm::test::test_headers()};

/// A toolkit kernel (tools/device), compiled with the toolkit's headers.
fj::KernelSpec tool_kernel(const std::string& header, const std::string& function, const std::string& parameters) {
  return {header, function, parameters, false, &finegemm::tools::tool_headers()};
}

fs::path make_temp_dir() {
  char tmpl[] = "/tmp/finegemm-jit-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

fj::Options options_with_cache(const fs::path& dir) {
  fj::Options o;
  o.cache_dir = dir.string();
  return o;
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while (p != nullptr && (n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (p != nullptr) pclose(p);
  return out;
}

}  // namespace

TEST(Jit, NvrtcCompilesExactlyTheRequestedKernelForSm90a) {
  fj::Runtime runtime(options_with_cache(""));
  const auto binary = runtime.binary(kSmoke);
  ASSERT_TRUE(binary->compiled);
  const auto image = finegemm::sass::parse_elf(std::span<const char>(binary->cubin.data(), binary->cubin.size()));
  EXPECT_EQ(finegemm::sass::cubin_sm_version(image), 90);
  ASSERT_EQ(image.code.size(), 1u) << "one explicit instantiation -> one kernel";
  EXPECT_EQ(image.code[0].kernel, binary->symbol);
  EXPECT_NE(binary->symbol.find("jit_smoke_kernel"), std::string::npos);
  EXPECT_EQ(fj::spill_bytes_from_log(binary->log), 0) << binary->log;
  EXPECT_EQ(kSmoke.source(),
            "#include \"finegemm/tests/jit_smoke.cuh\"\ntemplate __global__ void "
            "finegemm::test::jit_smoke_kernel<1024u>(float*, const float*);\n");
}

// The library embeds (and hashes into every kernel's cache key) only its own device code: the CLI's and the tests'
// kernels come in header sets of their own, which enter only their kernels' keys.
TEST(Jit, LibraryEmbedsOnlyItsOwnDeviceCode) {
  const fj::HeaderSet& library = fj::library_headers();
  ASSERT_FALSE(library.headers.empty());
  bool has_gemm = false;
  for (const auto& h : library.headers) {
    const std::string path = h.path;
    EXPECT_EQ(path.rfind("finegemm/device/", 0), 0u) << path;
    for (const char* tool : {"ceiling", "l2_flush", "reference_gemm", "jit_smoke"})
      EXPECT_EQ(path.find(tool), std::string::npos) << path;
    has_gemm = has_gemm || path == "finegemm/device/kernels/sm90_fp8_gemm.cuh";
  }
  EXPECT_TRUE(has_gemm);
  for (const fj::HeaderSet* own : {&finegemm::tools::tool_headers(), &finegemm::test::test_headers()}) {
    ASSERT_FALSE(own->headers.empty());
    EXPECT_NE(own->hash, library.hash);
    for (const auto& h : own->headers) EXPECT_EQ(std::string(h.path).rfind("finegemm/device/", 0), std::string::npos);
  }
  // The same kernel source with and without a program's own headers gets different keys; the library's own
  // kernels' keys depend on nothing outside the library.
  fj::Runtime runtime(options_with_cache(""));
  fj::KernelSpec quantizer{"finegemm/device/kernels/quantize.cuh", "finegemm::device::per_token_cast_kernel<true>",
                           "(const finegemm::device::QuantizeArgs)"};
  const std::string plain_key = runtime.binary(quantizer)->key;
  quantizer.own_headers = &finegemm::test::test_headers();
  EXPECT_NE(runtime.binary(quantizer)->key, plain_key);
}

// The benchmark's read flush (tools/lib/timing.cpp): NVRTC builds its kernel for sm_90a without spills, and its SASS
// reads with four independent 128-bit loads per iteration (ptxas folds the evict-first policy into the loads' memory
// descriptor, so no CREATEPOLICY instruction shows).
TEST(Jit, ReadFlushKernelBuildsWithWideIndependentLoads) {
  fj::Runtime runtime(options_with_cache(""));
  const auto binary = runtime.binary(tool_kernel("finegemm/tools/l2_flush.cuh",
                                                 "finegemm::tools::l2_read_flush_kernel<4u>",
                                                 "(const uint4*, uint64_t, uint32_t*)"));
  ASSERT_TRUE(binary->compiled);
  EXPECT_EQ(fj::spill_bytes_from_log(binary->log), 0) << binary->log;
  const std::string nvdisasm = finegemm::test::find_nvdisasm();
  if (nvdisasm.empty()) GTEST_SKIP() << "SASS content not checked: nvdisasm missing";
  const std::string sass = finegemm::test::disassemble(binary->cubin, nvdisasm);
  size_t loads = 0;
  for (size_t at = sass.find("LDG.E.128"); at != std::string::npos; at = sass.find("LDG.E.128", at + 1)) ++loads;
  EXPECT_GE(loads, 4u) << sass;
}

// The floor kernels of `finegemm bench --ceiling` (tools/device/ceiling.cuh): NVRTC builds them for sm_90a without
// spills; the stream kernel moves 16-byte pieces, eight loads issued before their results are used; the tensor
// kernel's loop is batches of four fp8 wgmmas of its N, one batch left in flight, and nothing from global memory.
TEST(Jit, CeilingKernelsBuildAsTheirTimesAssume) {
  fj::Runtime runtime(options_with_cache(""));
  const std::string nvdisasm = finegemm::test::find_nvdisasm();
  const auto stream = runtime.binary(tool_kernel("finegemm/tools/ceiling.cuh",
                                                 "finegemm::tools::stream_ceiling_kernel<8u>",
                                                 "(const uint4*, uint64_t, uint4*, uint64_t, uint32_t*)"));
  ASSERT_TRUE(stream->compiled);
  EXPECT_EQ(fj::spill_bytes_from_log(stream->log), 0) << stream->log;
  if (!nvdisasm.empty()) {
    const std::string sass = finegemm::test::disassemble(stream->cubin, nvdisasm);
    // 16-byte loads that skip L1, all eight issued before the first XOR of their data (a three-input LOP3).
    const std::string load = "LDG.E.NA.128";
    size_t loads = 0, stores = 0;
    for (size_t at = sass.find(load); at != std::string::npos; at = sass.find(load, at + 1)) ++loads;
    for (size_t at = sass.find("STG.E.128"); at != std::string::npos; at = sass.find("STG.E.128", at + 1)) ++stores;
    EXPECT_EQ(loads, 8u) << sass;
    EXPECT_EQ(stores, 8u) << sass;
    EXPECT_LT(sass.rfind(load), sass.find("0x96, !PT")) << sass;
  }
  for (const char* n : {"256", "128"}) {
    const auto tensor = runtime.binary(tool_kernel("finegemm/tools/ceiling.cuh",
                                                   std::string("finegemm::tools::tensor_ceiling_kernel<") + n + "u>",
                                                   "(const uint8_t*, uint32_t, const uint8_t*, uint32_t, uint32_t, "
                                                   "uint64_t, uint32_t*)"));
    ASSERT_TRUE(tensor->compiled) << n;
    EXPECT_EQ(fj::spill_bytes_from_log(tensor->log), 0) << tensor->log;
    // A wait after every wgmma (ptxas C75xx "serialized") would time the wgmmas' latency, not their throughput.
    EXPECT_EQ(tensor->log.find("serialized"), std::string::npos) << n << "\n" << tensor->log;
    if (nvdisasm.empty()) continue;
    const std::string sass = finegemm::test::disassemble(tensor->cubin, nvdisasm);
    const std::string wgmma = std::string("QGMMA.64x") + n + "x32.F32.E4M3.E4M3";
    size_t wgmmas = 0, waits = 0;
    for (size_t at = sass.find(wgmma); at != std::string::npos; at = sass.find(wgmma, at + 1)) ++wgmmas;
    for (size_t at = sass.find("WARPGROUP.DEPBAR"); at != std::string::npos; at = sass.find("WARPGROUP.DEPBAR", at + 1))
      ++waits;
    // Batches of four (the loop unrolled or not), each waited with one batch still in flight, plus the last wait.
    EXPECT_TRUE(wgmmas >= 4 && wgmmas % 4 == 0) << n << ": " << wgmmas << " wgmmas\n" << sass;
    EXPECT_EQ(waits, wgmmas / 4 + 1) << n << "\n" << sass;
    EXPECT_NE(sass.find("WARPGROUP.DEPBAR.LE gsb0, 0x1"), std::string::npos) << n << "\n" << sass;
    // Global memory only before the loop (the operands) and after it (two words per warpgroup).
    EXPECT_LT(sass.rfind("LDG"), sass.find(wgmma)) << sass;
  }
  if (nvdisasm.empty()) GTEST_SKIP() << "SASS content not checked: nvdisasm missing";
}

// The GPU reference GEMM of the checks (tools/lib/gemm_problem.cpp) builds from the toolkit's headers for sm_90a.
TEST(Jit, ReferenceGemmKernelBuilds) {
  fj::Runtime runtime(options_with_cache(""));
  const auto binary = runtime.binary(tool_kernel("finegemm/tools/reference_gemm.cuh",
                                                 "finegemm::tools::reference_gemm_kernel<64u>",
                                                 "(const uint8_t*, const float*, int64_t, const uint8_t*, const float*, "
                                                 "int32_t, double*, double*, int32_t, int32_t, int32_t)"));
  ASSERT_TRUE(binary->compiled);
  EXPECT_NE(binary->symbol.find("reference_gemm_kernel"), std::string::npos);
  EXPECT_EQ(fj::spill_bytes_from_log(binary->log), 0) << binary->log;
}

// The random operands of `finegemm bench --chain` (tools/lib/chain.cpp) build for sm_90a, as fp32 and as bf16 bits.
TEST(Jit, RandomNormalKernelBuilds) {
  fj::Runtime runtime(options_with_cache(""));
  for (const auto& [type, parameters] : {std::pair<std::string, std::string>{"float", "(float*, uint64_t, uint64_t, float)"},
                                         {"uint16_t", "(uint16_t*, uint64_t, uint64_t, float)"}}) {
    const auto binary = runtime.binary(tool_kernel("finegemm/tools/random_normal.cuh",
                                                   "finegemm::tools::random_normal_kernel<" + type + ">", parameters));
    ASSERT_TRUE(binary->compiled) << type;
    EXPECT_NE(binary->symbol.find("random_normal_kernel"), std::string::npos) << type;
    EXPECT_EQ(fj::spill_bytes_from_log(binary->log), 0) << type << "\n" << binary->log;
  }
}

TEST(Jit, MissCompilesHitLoadsCorruptRebuilds) {
  const fs::path dir = make_temp_dir();
  {
    fj::Runtime first(options_with_cache(dir));
    EXPECT_TRUE(first.binary(kSmoke)->compiled);
    EXPECT_EQ(first.stats().compiles, 1u);
    EXPECT_TRUE(first.binary(kSmoke) == first.binary(kSmoke));  // in-memory map
    EXPECT_GE(first.stats().memory_hits, 1u);
  }
  std::string key;
  {
    fj::Runtime second(options_with_cache(dir));
    const auto b = second.binary(kSmoke);
    EXPECT_FALSE(b->compiled);
    EXPECT_EQ(second.stats().disk_hits, 1u);
    EXPECT_EQ(second.stats().compiles, 0u);
    key = b->key;
  }
  // Corrupt the entry: the next runtime rebuilds it, and the one after hits again.
  const fs::path entry = dir / "kernels" / key.substr(0, 2) / (key + ".bin");
  ASSERT_TRUE(fs::exists(entry)) << entry;
  {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(fs::file_size(entry) / 2));
    f.put('\x5a');
  }
  {
    fj::Runtime third(options_with_cache(dir));
    EXPECT_TRUE(third.binary(kSmoke)->compiled);
  }
  {
    fj::Runtime fourth(options_with_cache(dir));
    EXPECT_FALSE(fourth.binary(kSmoke)->compiled);
  }
  fs::remove_all(dir);
}

TEST(Jit, CacheKeyIgnoresWhereTheLibraryIsInstalled) {
  // Copy the helper program and libfinegemm.so to another directory; both copies must share cache entries.
  const fs::path cache = make_temp_dir(), install = make_temp_dir();
  const fs::path helper = FINEGEMM_TEST_HELPER;
  const std::string first = run("\"" + helper.string() + "\" runtime-compile " + cache.string());
  ASSERT_NE(first.find("compiled=1"), std::string::npos) << first;
  const std::string ldd = run("ldd \"" + helper.string() + "\" | grep libfinegemm | awk '{print $3}'");
  const fs::path lib = ldd.substr(0, ldd.find_first_of("\r\n"));
  ASSERT_TRUE(fs::exists(lib)) << "libfinegemm not found via ldd: " << ldd;
  fs::copy_file(helper, install / "helper");
  fs::copy_file(lib, install / lib.filename());
  const std::string second =
      run("LD_LIBRARY_PATH=\"" + install.string() + "\" \"" + (install / "helper").string() + "\" runtime-compile " +
          cache.string());
  EXPECT_NE(second.find("compiled=0 disk_hits=1"), std::string::npos) << second;
  fs::remove_all(cache);
  fs::remove_all(install);
}

TEST(Jit, UnusableCacheDirectoryDegradesToMemory) {
  const fs::path dir = make_temp_dir();
  const fs::path file = dir / "not-a-dir";
  std::ofstream(file) << "x";
  fj::Runtime runtime(options_with_cache(file / "cache"));
  EXPECT_TRUE(runtime.binary(kSmoke)->compiled);
  EXPECT_EQ(runtime.cache_dir(), "");
  fs::remove_all(dir);
}

TEST(Jit, UnknownCompilerBackendIsAClearError) {
  fj::Options o = options_with_cache("");
  o.compiler = "clang";
  fj::Runtime runtime(o);
  try {
    runtime.binary(kSmoke);
    ADD_FAILURE() << "expected an error";
  } catch (const finegemm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("FINEGEMM_JIT_COMPILER must be 'nvrtc' or 'nvcc'"), std::string::npos);
  }
}
