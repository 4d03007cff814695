// The real GEMM kernels compile through NVRTC for sm_90a for every config the heuristic picks on the seed shapes:
// no local-memory spills, and the SASS holds FP8 wgmma (QGMMA), TMA loads (UTMALDG, B's also with an
// L2 cache policy) and stores (UTMASTG).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <iterator>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "finegemm/device/common/gemm_layout.cuh"
#include "finegemm/finegemm.hpp"
#include "heuristics/heuristics.hpp"
#include "jit/compiler.hpp"
#include "jit/runtime.hpp"
#include "sass/ffma_pass.hpp"
#include "unit/nvdisasm.hpp"

namespace fj = finegemm::jit;
using finegemm::GemmKind;
using finegemm::Problem;

namespace {

std::vector<Problem> seed_problems() {
  std::vector<Problem> out;
  std::ifstream in(std::string(FINEGEMM_SOURCE_DIR) + "/data/shapes/deepseek_v3.csv");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("kind", 0) == 0 || line.empty()) continue;
    std::stringstream ss(line);
    std::string kind, g, m, n, k;
    std::getline(ss, kind, ',');
    std::getline(ss, g, ',');
    std::getline(ss, m, ',');
    std::getline(ss, n, ',');
    std::getline(ss, k, ',');
    Problem p;
    p.kind = kind == "normal" ? GemmKind::kNormal : (kind == "contiguous" ? GemmKind::kGroupedContiguous : GemmKind::kGroupedMasked);
    p.num_groups = std::stoi(g);
    p.m = std::stoll(m) * (p.kind == GemmKind::kGroupedContiguous ? p.num_groups : 1);
    p.n = std::stoll(n);
    p.k = std::stoll(k);
    p.m_max = p.kind == GemmKind::kGroupedMasked ? std::stoll(m) : 0;
    out.push_back(p);
  }
  return out;
}

fj::Options uncached_options() {
  fj::Options o;
  o.cache_dir = "";  // compile every kernel here, so its compiler log is available
  return o;
}

/// Compiles every kernel function (all cores), failing the test on any compile error.
std::vector<std::shared_ptr<const fj::KernelBinary>> compile_all(const std::vector<std::string>& names,
                                                                 const fj::Options& options = uncached_options()) {
  fj::Runtime runtime(options);
  std::vector<std::shared_ptr<const fj::KernelBinary>> binaries(names.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::string error;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
    threads.emplace_back([&] {
      for (size_t i = next++; i < names.size(); i = next++) {
        fj::KernelSpec spec{"finegemm/device/kernels/sm90_fp8_gemm.cuh", names[i],
                            "(const __grid_constant__ finegemm::device::GemmArgs)", false};
        try {
          binaries[i] = runtime.binary(spec);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mutex);
          error += names[i] + ": " + e.what() + "\n";
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_TRUE(error.empty()) << error;
  return binaries;
}

/// What the compiler log must not say: local-memory spills, wgmmas serialized (ptxas C75xx "Potential Performance
/// Loss" notes: a wait after every wgmma, which the kernel's in-flight accumulators exist to avoid), or any front-end
/// warning (an unreachable loop or an unused constant in some instantiation: noise in every user's debug log).
void expect_clean_log(const std::string& name, const fj::KernelBinary& b) {
  EXPECT_EQ(fj::spill_bytes_from_log(b.log), 0) << name << "\n" << b.log;
  EXPECT_EQ(b.log.find("warning #"), std::string::npos) << name << ": compiler warning\n" << b.log;
  EXPECT_EQ(b.log.find("serialized"), std::string::npos) << name << ": ptxas serialized the wgmmas\n" << b.log;
  EXPECT_EQ(b.log.find("warpgroup.wait is injected"), std::string::npos) << name << "\n" << b.log;
}

/// The kernel function of an unclustered GEMM of `kind` with N=7168, the given tile, K, stages and SA mode.
std::string kernel_with_sa_mode(GemmKind kind, int block_m, int block_n, int64_t k, int stages, uint32_t sa_mode,
                                bool wide_tail = false) {
  finegemm::heuristics::KernelConfig c;
  c.wide_tail = wide_tail;
  c.kind = kind;
  c.n = 7168;
  c.k = k;
  c.block_m = block_m;
  c.block_n = block_n;
  c.num_stages = stages;
  c.sa_mode = sa_mode;
  return c.kernel_function();
}

/// The same with the SA layout the caller passes (MN-major or K-major) in the mode the heuristic picks for it.
std::string kernel_of(GemmKind kind, int block_m, int block_n, int64_t k, int stages, bool sa_k_major = false) {
  Problem q;  // the SA mode the heuristic picks at M = 4096
  q.m = 4096;
  q.k = k;
  q.sa_k_major = sa_k_major;
  return kernel_with_sa_mode(kind, block_m, block_n, k, stages, finegemm::heuristics::sa_mode_for(q));
}

std::string dense_kernel(int block_m, int block_n, int64_t k, int stages, bool sa_k_major) {
  return kernel_of(GemmKind::kNormal, block_m, block_n, k, stages, sa_k_major);
}

/// Compiles `names`, expects clean compiler logs, and calls `check(i, sass)` on each kernel's SASS; without nvdisasm
/// the SASS checks are skipped, loudly.
void compile_and_check_sass(const std::vector<std::string>& names,
                            const std::function<void(size_t, const std::string&)>& check) {
  const auto binaries = compile_all(names);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::string nvdisasm = finegemm::test::find_nvdisasm();
  for (size_t i = 0; i < names.size(); ++i) {
    expect_clean_log(names[i], *binaries[i]);
    if (!nvdisasm.empty()) check(i, finegemm::test::disassemble(binaries[i]->cubin, nvdisasm));
  }
  if (nvdisasm.empty()) GTEST_SKIP() << "SASS content not checked: nvdisasm missing";
}

/// BLOCK_M of a kernel function name (its fourth template argument: kind, N, K, BLOCK_M, ...).
int block_m_of(const std::string& kernel_function) {
  std::stringstream args(kernel_function.substr(kernel_function.find('<') + 1));
  std::string arg;
  for (int i = 0; i < 4; ++i) std::getline(args, arg, ',');
  return std::stoi(arg);
}

/// Grouped kernels read their layout on the device after the previous kernel: griddepcontrol.wait (ACQBULK) comes
/// before every global-memory access, and nothing spills.
void expect_clean_grouped_sass(const std::string& name, const std::string& sass) {
  EXPECT_NE(sass.find("QGMMA.64x"), std::string::npos) << name;
  EXPECT_EQ(sass.find(" LDL"), std::string::npos) << name << " reads local memory";
  EXPECT_EQ(sass.find(" STL"), std::string::npos) << name << " writes local memory";
  const size_t wait = sass.find("ACQBULK");
  ASSERT_NE(wait, std::string::npos) << name;
  for (const char* access : {"UTMALDG", "UTMASTG", " LDG", " STG", " ATOMG", " RED"})
    EXPECT_LT(wait, sass.find(access)) << name << ": " << access << " before griddepcontrol.wait";
}

}  // namespace

TEST(KernelsCompile, SeedShapesCompileWithoutSpillsAndUseHopperInstructions) {
  const std::vector<Problem> problems = seed_problems();
  ASSERT_EQ(problems.size(), 28u) << "data/shapes/deepseek_v3.csv should list the 28 seed shapes";
  std::set<std::string> functions;
  std::vector<Problem> with_split_k = problems;  // the seed's N = 2112 decode shapes pick split-K: two more that do
  for (int64_t n : {1536, 576}) {
    Problem q;
    q.kind = GemmKind::kNormal;
    q.num_groups = 1;
    q.m = n == 576 ? 128 : 64;
    q.n = n;
    q.k = 7168;
    with_split_k.push_back(q);
  }
  size_t split_k_kernels = 0;
  std::set<std::string> prefetching;  // the kernels with the B prefetch under PDL (gemm_may_prefetch_b_under_pdl)
  for (const auto& p : with_split_k) {
    for (bool k_major : {false, true}) {
      Problem q = p;
      q.sa_k_major = k_major;
      const auto config = finegemm::heuristics::select_config(q, 132);
      functions.insert(config.kernel_function());
      const auto k_blocks_per_cta = uint32_t((q.k + 127) / 128 / config.split_k);
      if (finegemm::device::gemm_may_prefetch_b_under_pdl(static_cast<finegemm::device::GemmKind>(q.kind),
                                                          uint32_t(config.block_m), config.output, k_blocks_per_cta))
        prefetching.insert(config.kernel_function());
    }
  }
  // N x K = 24576x1536, 32768x512 and 7168x2048 at M = 64 and 128, and 4096x32768x512 (128-row tiles), both SA
  // layouts.
  EXPECT_EQ(prefetching.size(), 14u);
  std::vector<std::string> names(functions.begin(), functions.end());
  const auto binaries = compile_all(names);
  ASSERT_FALSE(HasFailure());

  const std::string nvdisasm = finegemm::test::find_nvdisasm();
  if (nvdisasm.empty())
    std::fprintf(stderr, "\n*** SKIPPED SASS checks: nvdisasm not found (pip install nvidia-cuda-nvdisasm) ***\n\n");
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& b = *binaries[i];
    expect_clean_log(names[i], b);
    EXPECT_EQ(b.cubin.compare(0, 4, "\x7f" "ELF"), 0);
    EXPECT_NE(b.symbol.find("sm90_fp8_gemm_kernel"), std::string::npos);
    if (nvdisasm.empty()) continue;
    const std::string sass = finegemm::test::disassemble(b.cubin, nvdisasm);
    EXPECT_NE(sass.find("QGMMA.64x"), std::string::npos) << names[i];
    EXPECT_NE(sass.find("UTMALDG.2D"), std::string::npos) << names[i];
    // B's loads have an evict-first variant (taken when the host hints B, a run-time branch).
    EXPECT_NE(sass.find("], desc[UR"), std::string::npos) << names[i] << ": no TMA load with a cache policy";
    EXPECT_NE(sass.find("UTMASTG.2D"), std::string::npos) << names[i];
    EXPECT_NE(sass.find("STSM"), std::string::npos) << names[i];
    // Split-K kernels send the second CTA's partial sums with st.async, whose bytes complete on the first CTA's
    // mbarrier (no per-thread fence or remote arrive).
    if (names[i].find(", 2u, false>") != std::string::npos) {
      EXPECT_NE(sass.find("STAS.128"), std::string::npos) << names[i];
      ++split_k_kernels;
    }
    EXPECT_EQ(sass.find(" LDL"), std::string::npos) << names[i] << " reads local memory";
    EXPECT_EQ(sass.find(" STL"), std::string::npos) << names[i] << " writes local memory";
    // Programmatic dependent launch (finegemm::set_pdl): griddepcontrol.wait (ACQBULK) precedes every global-memory
    // access in the code, and the CTA lets dependents launch (griddepcontrol.launch_dependents, PREEXIT).
    const size_t wait = sass.find("ACQBULK");
    EXPECT_NE(wait, std::string::npos) << names[i] << ": no griddepcontrol.wait";
    EXPECT_NE(sass.find("PREEXIT"), std::string::npos) << names[i] << ": no griddepcontrol.launch_dependents";
    for (const char* access : {"UTMALDG", "UTMASTG", " LDG", " STG", " ATOMG", " RED", " STAS"})
      EXPECT_LT(wait, sass.find(access)) << names[i] << ": " << access << " before griddepcontrol.wait";
    // Launched with PDL, the short-K dense kernels of at most 128 rows prefetch B into the L2 before the wait
    // (UTMAPF: a hint, nothing read into the SM); no other kernel has the instruction.
    if (prefetching.count(names[i]) != 0) {
      EXPECT_LT(sass.find("UTMAPF.L2.2D"), wait) << names[i] << ": no B prefetch before griddepcontrol.wait";
    } else {
      EXPECT_EQ(sass.find("UTMAPF"), std::string::npos) << names[i];
    }
  }
  if (nvdisasm.empty()) GTEST_SKIP() << "SASS content not checked: nvdisasm missing";
  EXPECT_EQ(split_k_kernels, 8u) << "64x2112x7168, 128x2112x7168, 64x1536x7168 and 128x576x7168, both SA layouts";
}

// Every BLOCK_M x BLOCK_N the heuristic may pick, with 1, 5 and 56 K blocks (each tail of the in-flight accumulator
// groups), BLOCK_M=256 with its two waves per warpgroup too: no spills and no serialized wgmmas.
TEST(KernelsCompile, EveryBlockShapeKeepsWgmmasInFlight) {
  std::vector<std::string> names;
  for (int block_m : {64, 128, 256}) {
    for (int block_n = 16; block_n <= (block_m == 64 ? 176 : block_m == 128 ? 192 : 128); block_n += 16) {
      if (block_m == 256 && block_n != 128) continue;  // the heuristic pairs BLOCK_M=256 with BLOCK_N=128 only
      if (128 - std::gcd(block_n, 128) + block_n > 256) continue;  // three SB blocks: rejected by the heuristic
      for (int64_t k : {128, 576, 7168}) names.push_back(dense_kernel(block_m, block_n, k, 3, false));
    }
  }
  const auto binaries = compile_all(names);
  ASSERT_FALSE(HasFailure());
  for (size_t i = 0; i < names.size(); ++i) expect_clean_log(names[i], *binaries[i]);
}

// Half batches (gemm_batch_parts): a 128x192 tile with more than 4 K blocks issues each K block as two m64n96k32
// commit groups and promotes the first half's 48 columns between the two waits. Read after the issue, the scales made
// ptxas schedule that promotion after the second wait, which left nothing to overlap; the SASS must show at least the
// 48 multiplies (FFMA, or FMUL in a tile's first K block) between `DEPBAR.LE gsb0, 0x1` and `0x0`. BLOCK_N=128 and a
// 4-K-block 128x192 kernel keep one group per K block.
TEST(KernelsCompile, HalfBatchesPromoteTheFirstHalfWhileTheSecondRuns) {
  const std::vector<std::string> names = {dense_kernel(128, 192, 7168, 4, false), dense_kernel(128, 192, 512, 4, false),
                                          dense_kernel(256, 128, 7168, 3, false)};
  const auto binaries = compile_all(names);
  ASSERT_FALSE(HasFailure());
  for (size_t i = 0; i < names.size(); ++i) expect_clean_log(names[i], *binaries[i]);
  const std::string nvdisasm = finegemm::test::find_nvdisasm();
  if (nvdisasm.empty()) GTEST_SKIP() << "SASS content not checked: nvdisasm missing";
  std::vector<std::string> sass;
  for (const auto& b : binaries) sass.push_back(finegemm::test::disassemble(b->cubin, nvdisasm));
  EXPECT_NE(sass[0].find("QGMMA.64x96x32"), std::string::npos) << names[0];
  EXPECT_EQ(sass[0].find("QGMMA.64x192x32"), std::string::npos) << names[0];
  EXPECT_NE(sass[1].find("QGMMA.64x192x32"), std::string::npos) << names[1];
  EXPECT_NE(sass[2].find("QGMMA.64x128x32"), std::string::npos) << names[2];
  EXPECT_EQ(sass[2].find("QGMMA.64x64x32"), std::string::npos) << names[2];
  // Multiplies between each first-half wait and the second-half wait after it.
  std::istringstream in(sass[0]);
  int between = -1, fewest = -1, waits = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("WARPGROUP.DEPBAR.LE gsb0, 0x1") != std::string::npos) {
      between = 0;
      ++waits;
    } else if (line.find("WARPGROUP.DEPBAR.LE gsb0, 0x0") != std::string::npos && between >= 0) {
      fewest = fewest < 0 ? between : std::min(fewest, between);
      between = -1;
    } else if (between >= 0 && (line.find(" FFMA ") != std::string::npos || line.find(" FMUL ") != std::string::npos)) {
      ++between;
    }
  }
  EXPECT_GT(waits, 0) << names[0] << ": no first-half wait";
  EXPECT_GE(fewest, 48) << names[0] << ": the first half's promotion is not between the two waits";
}

// K-major SA: at M = 4096 and KB = 56 (K = 7168) the kernels read it by TMA, a box of 4 K blocks per stage (no
// cp.async in the SASS); otherwise (K = 2048: KB = 16; K = 576: KB = 5) the scale warp gathers it (LDGSTS). Every tile
// height, dense and grouped, no spills.
TEST(KernelsCompile, KMajorScalesByTmaBoxesOrGathered) {
  struct Case {
    GemmKind kind;
    int block_m, block_n;
    int64_t k;
    int stages;
    bool tma;
  };
  const Case cases[] = {
      {GemmKind::kNormal, 64, 64, 7168, 8, true},
      {GemmKind::kNormal, 128, 192, 7168, 4, true},
      {GemmKind::kNormal, 256, 128, 7168, 3, true},
      {GemmKind::kGroupedContiguous, 256, 128, 7168, 3, true},
      {GemmKind::kGroupedMasked, 256, 128, 7168, 3, true},
      {GemmKind::kNormal, 256, 128, 2048, 3, false},
      {GemmKind::kNormal, 64, 64, 576, 8, false},
      {GemmKind::kNormal, 256, 128, 576, 3, false},
      {GemmKind::kGroupedContiguous, 256, 128, 576, 3, false},
  };
  std::vector<std::string> names;
  for (const auto& c : cases) {
    names.push_back(kernel_of(c.kind, c.block_m, c.block_n, c.k, c.stages, true));
    const std::string mode = c.tma ? ", 2u, 1u, false>" : ", 1u, 1u, false>";  // kSaKMajorTma / kSaKMajorGather
    EXPECT_NE(names.back().find(mode), std::string::npos) << names.back();
  }
  compile_and_check_sass(names, [&](size_t i, const std::string& sass) {
    const bool gathers = sass.find("LDGSTS") != std::string::npos;
    EXPECT_EQ(gathers, !cases[i].tma) << names[i];
    EXPECT_NE(sass.find("UTMALDG.2D"), std::string::npos) << names[i];
    EXPECT_EQ(sass.find(" STL"), std::string::npos) << names[i] << " writes local memory";
  });
}

// The producer warpgroup's registers after setmaxnreg (gemm_producer_registers): 40 left it short in the M-grouped
// layouts and with the gathered SA at BLOCK_M 128, where ptxas spilled 1-21 words (contiguous 128x64 at K=2048;
// dense gathered 128x112, 128x144 and 128x192 at K=16384), and in the K-grouped 128x144 kernel (8 bytes). Those
// kernels split 224 / 56 and write no local memory; the 256x128, contiguous 128x192 and the other K-grouped kernels
// keep 232 / 40.
TEST(KernelsCompile, ProducersOfGroupedAndGatheredKernelsDoNotSpill) {
  namespace fd = finegemm::device;
  struct Case {
    std::string name;
    uint32_t math, producer;
  };
  // The K-grouped weight gradient's kernels: run-time K, 1x128 scales of both operands, fp32 reduced into D.
  auto k_grouped = [](int block_n, int stages) {
    finegemm::heuristics::KernelConfig c;
    c.kind = GemmKind::kGroupedK;
    c.n = 7168;
    c.k = 0;
    c.block_m = 128;
    c.block_n = block_n;
    c.num_stages = stages;
    c.sa_mode = fd::kSaMnMajor;
    c.sb_mode = fd::kSbRowMnMajor;
    c.output = fd::kOutF32AddToD;
    return c.kernel_function();
  };
  const std::vector<Case> cases = {
      {kernel_with_sa_mode(GemmKind::kGroupedContiguous, 128, 64, 2048, 8, fd::kSaMnMajor), 224, 56},
      {kernel_with_sa_mode(GemmKind::kGroupedMasked, 128, 160, 2048, 5, fd::kSaMnMajor), 224, 56},
      {kernel_with_sa_mode(GemmKind::kNormal, 128, 112, 16384, 6, fd::kSaKMajorGather), 224, 56},
      {kernel_with_sa_mode(GemmKind::kNormal, 128, 144, 16384, 5, fd::kSaKMajorGather), 224, 56},
      {kernel_with_sa_mode(GemmKind::kNormal, 128, 192, 16384, 4, fd::kSaKMajorGather), 224, 56},
      {kernel_with_sa_mode(GemmKind::kGroupedContiguous, 128, 192, 2048, 4, fd::kSaMnMajor), 232, 40},
      {kernel_with_sa_mode(GemmKind::kNormal, 256, 128, 16384, 3, fd::kSaMnMajor), 232, 40},
      {k_grouped(144, 5), 224, 56},
      {k_grouped(160, 4), 232, 40},
      {k_grouped(128, 5), 232, 40},
      {k_grouped(96, 6), 232, 40},
  };
  std::vector<std::string> names;
  for (const Case& c : cases) names.push_back(c.name);
  compile_and_check_sass(names, [&](size_t i, const std::string& sass) {
    EXPECT_EQ(sass.find(" STL"), std::string::npos) << names[i] << " writes local memory";
    EXPECT_EQ(sass.find(" LDL"), std::string::npos) << names[i] << " reads local memory";
    char alloc[64], dealloc[64];
    std::snprintf(alloc, sizeof(alloc), "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0x%x", cases[i].math);
    std::snprintf(dealloc, sizeof(dealloc), "USETMAXREG.DEALLOC.CTAPOOL 0x%x", cases[i].producer);
    EXPECT_NE(sass.find(alloc), std::string::npos) << names[i] << ": math registers " << cases[i].math;
    EXPECT_NE(sass.find(dealloc), std::string::npos) << names[i] << ": producer registers " << cases[i].producer;
  });
}

namespace {

/// The K loops of `sass`: its innermost loops (from a label to the backward branch to it, with no other such loop
/// inside) that issue wgmmas, as their lines.
std::vector<std::vector<std::string>> innermost_wgmma_loops(const std::string& sass) {
  std::vector<std::string> lines;
  std::istringstream in(sass);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::map<std::string, size_t> labels;
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t p = lines[i].find(".L_x_");
    if (p != std::string::npos && lines[i].find(':') != std::string::npos && lines[i].find("BRA") == std::string::npos)
      labels[lines[i].substr(p, lines[i].find(':', p) - p)] = i;
  }
  std::vector<std::pair<size_t, size_t>> loops;  // [label line, branch line]
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t bra = lines[i].find("BRA `(");
    if (bra == std::string::npos) continue;
    const size_t p = lines[i].find(".L_x_", bra);
    const auto it = labels.find(lines[i].substr(p, lines[i].find(')', p) - p));
    if (it != labels.end() && it->second <= i) loops.emplace_back(it->second, i);
  }
  std::vector<std::vector<std::string>> out;
  for (const auto& [begin, end] : loops) {
    bool innermost = true;
    for (const auto& [b, e] : loops) innermost &= !(begin <= b && e <= end && (b != begin || e != end));
    std::vector<std::string> body(lines.begin() + long(begin), lines.begin() + long(end) + 1);
    const bool wgmmas = std::any_of(body.begin(), body.end(),
                                    [](const std::string& l) { return l.find("GMMA") != std::string::npos; });
    if (innermost && wgmmas) out.push_back(std::move(body));
  }
  return out;
}

/// The K loops of `sass` as the shortest loop's instruction count per number of wgmma instructions in it (one K loop
/// per wave count: the 256-row kernels have one of 4 wgmmas and one of 8).
std::map<size_t, size_t> k_loops_by_wgmmas(const std::string& sass) {
  std::map<size_t, size_t> best;
  for (const auto& body : innermost_wgmma_loops(sass)) {
    size_t instrs = 0, wgmmas = 0;
    for (const std::string& l : body) {
      if (l.find("/*") != std::string::npos && l.find(';') != std::string::npos) ++instrs;
      if (l.find("GMMA") != std::string::npos) ++wgmmas;
    }
    auto [it, fresh] = best.emplace(wgmmas, instrs);
    if (!fresh) it->second = std::min(it->second, instrs);
  }
  return best;
}

}  // namespace

TEST(KernelsCompile, GroupedKernelsKeepTheDenseKLoop) {
  // The grouped schedulers read m_indices / masked_m; walked with a data-dependent skip loop inside the scheduler,
  // that made ptxas keep the 128-row kernels' pipeline state in per-thread registers: 170 instead of 156 instructions
  // per K block, 4% slower than dense. Each grouped K loop must stay within a few instructions of the dense one with
  // as many wgmmas. The 256-row kernels have a K loop per wave count (a tile of at most 128 rows runs one wave):
  // tested at run time, the wave count cost up to 34 instructions a K block. With half batches (128x192) the dense
  // kernel reads SB by every thread and the grouped ones by lane 0 and a shuffle (each measured faster so), which
  // costs 8 instructions a K block (the dense loop: 165 with lane
  // 0, 157 without): allowed on top for that tile.
  // The masked and psum 256x128 kernels with a wide tail (each group's last block of at most 128 rows as wide tiles,
  // a K loop of their own) keep the plain K loops too.
  constexpr size_t kLane0SbInstructions = 8;
  const std::vector<std::pair<int, int>> tiles = {{128, 192}, {256, 128}};
  const GemmKind kinds[] = {GemmKind::kNormal,          GemmKind::kGroupedContiguous,     GemmKind::kGroupedMasked,
                            GemmKind::kGroupedContiguousPsum, GemmKind::kGroupedMasked, GemmKind::kGroupedContiguousPsum};
  constexpr size_t kNumKinds = std::size(kinds);
  std::vector<std::string> names;
  for (const auto& [bm, bn] : tiles)
    for (size_t g = 0; g < kNumKinds; ++g) {
      const int64_t k = bm == 128 ? 2048 : 7168;
      const bool wide_tail = g >= 4 && bm == 256;
      names.push_back(wide_tail ? kernel_with_sa_mode(kinds[g], bm, bn, k, 3, finegemm::device::kSaMnMajor, true)
                                : kernel_of(kinds[g], bm, bn, k, bm == 128 ? 4 : 3));
    }
  const auto binaries = compile_all(names);
  ASSERT_FALSE(HasFailure());
  const std::string nvdisasm = finegemm::test::find_nvdisasm();
  if (nvdisasm.empty()) GTEST_SKIP() << "SASS content not checked: nvdisasm missing";
  for (size_t t = 0; t < tiles.size(); ++t) {
    const auto dense = k_loops_by_wgmmas(finegemm::test::disassemble(binaries[t * kNumKinds]->cubin, nvdisasm));
    // 4 wgmmas (m64nNk32) per wave and K block; 128x192 kernels run two half batches of 4 (8 in all).
    const std::vector<size_t> expected_counts =
        tiles[t].first == 256 ? std::vector<size_t>{4, 8} : std::vector<size_t>{8};
    for (size_t g = 0; g < kNumKinds; ++g) {
      const size_t i = t * kNumKinds + g;
      const auto loops = g == 0 ? dense : k_loops_by_wgmmas(finegemm::test::disassemble(binaries[i]->cubin, nvdisasm));
      for (size_t count : expected_counts) {
        ASSERT_EQ(loops.count(count), 1u) << names[i] << ": no K loop of " << count << " wgmmas";
        const size_t sb_read = g > 0 && tiles[t].first == 128 ? kLane0SbInstructions : 0;
        EXPECT_LE(loops.at(count), dense.at(count) + 6 + sb_read)
            << names[i] << ", " << count << " wgmmas (dense: " << dense.at(count) << ")";
      }
    }
  }
}

TEST(KernelsCompile, KLoopsBuildTheirWgmmaDescriptorsInUniformRegisters) {
  // The math's K loop builds its wgmma descriptors in uniform registers from a uniform stage index. Where ptxas cannot
  // prove the warp converged at the tile's start (a wait whose exit each thread decides alone, as a plain mbarrier wait
  // for the next tile would be), it keeps the stage index in a regular register and moves every descriptor into the
  // uniform file inside the loop (R2UR): 195 -> 258 instructions per K block at 256x128, 118 -> 149 at masked 128x128.
  // The math's wait for its next tile is therefore a warp vote.
  const std::vector<std::string> names = {
      kernel_of(GemmKind::kNormal, 256, 128, 7168, 3),
      kernel_of(GemmKind::kGroupedContiguous, 256, 128, 3072, 3),
      kernel_with_sa_mode(GemmKind::kGroupedContiguousPsum, 256, 128, 3072, 3, finegemm::device::kSaMnMajor, true),
      kernel_with_sa_mode(GemmKind::kGroupedMasked, 256, 128, 7168, 3, finegemm::device::kSaMnMajor, true),
      kernel_of(GemmKind::kNormal, 128, 192, 2048, 4),
      kernel_of(GemmKind::kGroupedMasked, 128, 128, 7168, 5),
      kernel_of(GemmKind::kGroupedMasked, 128, 32, 7168, 10),
  };
  compile_and_check_sass(names, [&](size_t i, const std::string& sass) {
    const auto loops = innermost_wgmma_loops(sass);
    ASSERT_FALSE(loops.empty()) << names[i];
    for (const auto& body : loops)
      for (const std::string& l : body) EXPECT_EQ(l.find("R2UR"), std::string::npos) << names[i] << ": " << l;
  });
}

TEST(KernelsCompile, TwoFiftySixRowAndDenseWholeBatchKernelsTakeTheSteadyFfmaPass) {
  // The heuristic gives the steady FFMA pass (promotion runs issued without yielding) to the 256-row kernels and the
  // dense and masked 128-row ones with whole batches (BLOCK_N 72-184; with 1x128 scales of B, 128x160 only), and no
  // other kernel a pass; the runtime applies it after compiling, keys the cache by it, and drops it under
  // FINEGEMM_DISABLE_SASS_PASS.
  std::set<int> with_pass, without_pass;
  std::string steady_kernel;
  for (const Problem& p : seed_problems()) {
    const auto config = finegemm::heuristics::select_config(p, 132);
    const bool pass = finegemm::heuristics::takes_steady_ffma_pass(config);
    const bool whole_batches = (p.kind == GemmKind::kNormal || p.kind == GemmKind::kGroupedMasked) &&
                               config.block_m == 128 && config.block_n > 64 && config.block_n < 192 &&
                               (!p.sb_per_row || config.block_n == 160);
    EXPECT_EQ(pass, config.block_m == 256 || whole_batches) << config.kernel_function();
    if (pass && p.kind == GemmKind::kNormal) steady_kernel = config.kernel_function();
    (pass ? with_pass : without_pass).insert(config.block_m);
  }
  ASSERT_FALSE(with_pass.empty());
  ASSERT_FALSE(without_pass.empty());
  ASSERT_FALSE(steady_kernel.empty());

  auto spec_of = [&](bool steady_pass) {
    return fj::KernelSpec{"finegemm/device/kernels/sm90_fp8_gemm.cuh", steady_kernel,
                          "(const __grid_constant__ finegemm::device::GemmArgs)", steady_pass};
  };
  fj::Runtime runtime(uncached_options());
  const auto plain = runtime.binary(spec_of(false));
  const auto steady = runtime.binary(spec_of(true));
  auto as_bytes = [](const std::string& cubin) { return std::vector<char>(cubin.begin(), cubin.end()); };
  const auto plain_report = finegemm::sass::analyze_ffma_runs(as_bytes(plain->cubin));
  const auto steady_report = finegemm::sass::analyze_ffma_runs(as_bytes(steady->cubin));
  ASSERT_FALSE(plain_report.runs.empty()) << plain_report.to_string();
  EXPECT_GT(plain_report.num_modified, 0) << "ptxas no longer has the promotion FFMAs yield:\n"
                                          << plain_report.to_string();
  EXPECT_EQ(steady_report.num_modified, 0) << "the runtime's cubin did not take the pass:\n"
                                           << steady_report.to_string();
  EXPECT_EQ(as_bytes(steady->cubin), finegemm::sass::steady_ffma_pass(as_bytes(plain->cubin)));
  EXPECT_NE(plain->key, steady->key);

  fj::Options disabled = uncached_options();
  disabled.disable_sass_pass = true;
  fj::Runtime without(disabled);
  EXPECT_EQ(without.binary(spec_of(true))->cubin, plain->cubin);
}

// The weight-gradient GEMM of FP8 training (1x128 scales on both operands, fp32 D = C + A x B^T) on DeepSeek-V3's
// layers, and the fp32 and bf16 outputs without accumulation: every kernel the heuristic picks compiles without
// spills, loads C's tile and 1x128 SB by TMA, and stores fp32 pairs into the shared tile (no stmatrix). The K=512
// ones load C a tile ahead (kOutF32AddCAhead) and store D by TMA, C being D or not; those that reduce into D
// prefetch D's tile into the L2 first (GemmArgs::d_prefetch_lead). Those on D^T's tiles (576x4096x7168 at 128x144,
// the others at 128x176, whose math warpgroups take 240 registers) write the tile transposed: fp32 (kOutF32AddToDT)
// with scalar shared stores, then reduced into D by TMA; bf16 (kOutBf16DT) by stmatrix.trans, then stored by TMA.
TEST(KernelsCompile, WeightGradientKernelsCompileWithoutSpills) {
  std::set<std::string> functions;
  // The last three take 64x96 tiles with three K blocks in flight (gemm_math_registers gives them 248 registers).
  const int64_t shapes[][3] = {{7168, 4096, 16384}, {4096, 4096, 7168}, {2112, 4096, 7168}, {24576, 4096, 1536},
                               {576, 4096, 7168},   {32768, 4096, 512}, {7168, 4096, 2048}, {100, 264, 640},
                               {144, 4096, 512},    {144, 4096, 1536},  {144, 4096, 2048}};
  struct Variant {
    finegemm::DType d_dtype;
    bool accumulate, c_is_d;
  };
  for (const auto& s : shapes) {
    for (Variant v : {Variant{finegemm::DType::kFloat32, true, true}, Variant{finegemm::DType::kFloat32, true, false},
                      Variant{finegemm::DType::kFloat32, false, false},
                      Variant{finegemm::DType::kBFloat16, false, false}}) {
      Problem q;
      q.kind = GemmKind::kNormal;
      q.m = s[0];
      q.n = s[1];
      q.k = s[2];
      q.sb_per_row = true;
      q.d_dtype = v.d_dtype;
      q.accumulate = v.accumulate;
      q.c_is_d = v.c_is_d;
      functions.insert(finegemm::heuristics::select_config(q, 132).kernel_function());
    }
  }
  std::vector<std::string> names(functions.begin(), functions.end());
  const auto c_ahead = [](const std::string& name) { return name.find(", 1u, 4u>") != std::string::npos; };
  const auto d_transposed = [](const std::string& name) { return name.find(", 1u, 5u>") != std::string::npos; };
  const auto bf16_transposed = [](const std::string& name) { return name.find(", 1u, 6u>") != std::string::npos; };
  EXPECT_TRUE(std::any_of(names.begin(), names.end(), c_ahead)) << "no kernel loads C a tile ahead";
  EXPECT_TRUE(std::any_of(names.begin(), names.end(), d_transposed)) << "no kernel reduces into D on D^T's tiles";
  EXPECT_TRUE(std::any_of(names.begin(), names.end(), bf16_transposed)) << "no bf16 kernel on D^T's tiles";
  compile_and_check_sass(names, [&](size_t i, const std::string& sass) {
    EXPECT_NE(sass.find("QGMMA.64x"), std::string::npos) << names[i];
    EXPECT_NE(sass.find("UTMALDG.2D"), std::string::npos) << names[i];
    const bool add_to_d = names[i].find(", 1u, 3u>") != std::string::npos || d_transposed(names[i]);
    if (d_transposed(names[i])) {
      EXPECT_NE(sass.find("STS ["), std::string::npos) << names[i] << ": the transposed tile by scalar stores";
      EXPECT_EQ(sass.find("STS.64"), std::string::npos) << names[i] << ": no float pairs in a transposed tile";
    }
    if (bf16_transposed(names[i]))
      EXPECT_NE(sass.find("STSM.16.MT88.4"), std::string::npos) << names[i] << ": the transposed tile by stmatrix.trans";
    else
      EXPECT_EQ(sass.find(".MT88"), std::string::npos) << names[i] << ": stmatrix.trans only on bf16 D^T tiles";
    if (!add_to_d) EXPECT_NE(sass.find("UTMASTG.2D"), std::string::npos) << names[i];
    EXPECT_EQ(sass.find(" LDL"), std::string::npos) << names[i] << " reads local memory";
    EXPECT_EQ(sass.find(" STL"), std::string::npos) << names[i] << " writes local memory";
    const bool fp32 = names[i].find(", 1u, 1u>") != std::string::npos || names[i].find(", 1u, 2u>") != std::string::npos ||
                      add_to_d || c_ahead(names[i]);
    if (fp32) EXPECT_EQ(sass.find("STSM"), std::string::npos) << names[i] << ": fp32 tiles are not stored by stmatrix";
    // D += A x B^T: the tile is reduced into D by TMA (UTMAREDG), C other than D is loaded by TMA into the tile.
    if (add_to_d) {
      EXPECT_NE(sass.find("UTMAREDG"), std::string::npos) << names[i] << ": no TMA reduction";
      EXPECT_NE(sass.find("UTMAPF.L2.2D"), std::string::npos) << names[i] << ": no prefetch of D's tile into the L2";
    } else
      EXPECT_EQ(sass.find("UTMAREDG"), std::string::npos) << names[i] << ": D is stored, not reduced into";
  });
}

// Decode calls of 1 to 16 tokens load every K block's row scales once per CTA (device::gemm_sa_once) where the
// heuristic picks it: the kernels of the seed's (N, K) pairs and of the weight gradient compile without spills, and
// read SA with the other loads (MN-major SA: one bulk copy and 4-byte copies of the last K block; K-major: a TMA box).
TEST(KernelsCompile, DecodeKernelsWithScalesLoadedOnceCompileWithoutSpills) {
  std::set<std::string> functions, mn_major;
  auto mn_major_once = [](uint32_t sa_mode) {
    return sa_mode == finegemm::device::kSaMnMajorOnce || sa_mode == finegemm::device::kSaMnMajorOnce16;
  };
  const int64_t nk[][2] = {{2112, 7168}, {24576, 1536}, {32768, 512}, {7168, 16384}, {4096, 7168}, {7168, 2048}};
  for (const auto& s : nk) {
    for (int64_t m : {1, 2, 3, 4, 7, 12, 16}) {
      Problem q;
      q.m = m;
      q.n = s[0];
      q.k = s[1];
      q.sa_k_major = m <= 4 ? m % 2 == 0 : m == 16;  // both SA layouts
      const auto c = finegemm::heuristics::select_config(q, 132);
      if (finegemm::device::gemm_sa_once(c.sa_mode)) functions.insert(c.kernel_function());
      if (mn_major_once(c.sa_mode)) mn_major.insert(c.kernel_function());
      q.sb_per_row = true;  // the weight gradient's: fp32 D += A x B^T
      q.d_dtype = finegemm::DType::kFloat32;
      q.accumulate = q.c_is_d = true;
      const auto w = finegemm::heuristics::select_config(q, 132);
      if (finegemm::device::gemm_sa_once(w.sa_mode)) functions.insert(w.kernel_function());
      if (mn_major_once(w.sa_mode)) mn_major.insert(w.kernel_function());
    }
  }
  std::vector<std::string> names(functions.begin(), functions.end());
  EXPECT_GE(names.size(), 3u) << "4096x7168, 7168x16384 and the weight gradient's kernels load SA once";
  EXPECT_GE(mn_major.size(), 4u) << "2112x7168 (split-K) and 4096x7168 load MN-major SA of 1-4 and 5-16 rows once";
  compile_and_check_sass(names, [&](size_t i, const std::string& sass) {
    EXPECT_NE(names[i].find("u, 64u, "), std::string::npos) << names[i] << ": 64-row tiles";
    EXPECT_NE(sass.find("QGMMA.64x"), std::string::npos) << names[i];
    EXPECT_NE(sass.find("UTMALDG.2D"), std::string::npos) << names[i];
    EXPECT_EQ(sass.find(" LDL"), std::string::npos) << names[i] << " reads local memory";
    EXPECT_EQ(sass.find(" STL"), std::string::npos) << names[i] << " writes local memory";
    if (mn_major.count(names[i])) {  // MN-major SA: a bulk copy, the last K block by 4-byte copies
      EXPECT_NE(sass.find("UBLKCP.S.G"), std::string::npos) << names[i] << ": no bulk copy of SA";
      EXPECT_NE(sass.find("LDGSTS"), std::string::npos) << names[i] << ": no 4-byte copies of SA's last K block";
    }
  });
}

// The K-grouped weight gradient (K read per group on the device): the kernels the heuristic picks for DeepSeek-V3's
// expert shapes compile without spills, load through per-group descriptors rewritten in global memory (tensormap
// stores, then the acquire fence's descriptor-cache invalidation UTMACCTL.IV) and reduce D by TMA.
TEST(KernelsCompile, KGroupedKernelsCompileWithoutSpills) {
  std::set<std::string> functions;
  const int64_t shapes[][4] = {{8, 4096, 7168, 4096}, {8, 7168, 2048, 4096}, {4, 2048, 7168, 1024}, {32, 512, 256, 128}};
  for (const auto& s : shapes) {
    Problem q;
    q.kind = GemmKind::kGroupedK;
    q.num_groups = int(s[0]);
    q.m = s[1];
    q.n = s[2];
    q.k = s[3];
    q.sb_per_row = true;
    q.d_dtype = finegemm::DType::kFloat32;
    q.accumulate = true;
    q.c_is_d = true;
    const auto config = finegemm::heuristics::select_config(q, 132);
    EXPECT_EQ(config.block_m, 128);
    EXPECT_EQ(config.k, 0);
    functions.insert(config.kernel_function());
  }
  std::vector<std::string> names(functions.begin(), functions.end());
  compile_and_check_sass(names, [&](size_t i, const std::string& sass) {
    EXPECT_NE(sass.find("QGMMA.64x"), std::string::npos) << names[i];
    EXPECT_NE(sass.find("UTMALDG.2D"), std::string::npos) << names[i];
    EXPECT_NE(sass.find("UTMAREDG"), std::string::npos) << names[i] << ": no TMA reduction";
    EXPECT_NE(sass.find("UTMACCTL.IV"), std::string::npos) << names[i] << ": no tensormap acquire";
    EXPECT_EQ(sass.find(" LDL"), std::string::npos) << names[i] << " reads local memory";
    EXPECT_EQ(sass.find(" STL"), std::string::npos) << names[i] << " writes local memory";
  });
}

// The contiguous layout with m_indices aligned to 64 rows runs on 64-row tiles only (the heuristic's rule): the kernels
// it picks for the seed's contiguous shapes and for experts with few rows, both SA layouts, compile without spills or
// serialized wgmmas, with griddepcontrol.wait before the first global access.
TEST(KernelsCompile, ContiguousKernelsOf64RowAlignmentCompileWithoutSpills) {
  std::set<std::string> functions;
  std::vector<Problem> problems;
  for (const Problem& p : seed_problems())
    if (p.kind == GemmKind::kGroupedContiguous) problems.push_back(p);
  ASSERT_EQ(problems.size(), 4u);
  for (const auto& [groups, m, n, k] : {std::tuple{64, 40, 7168, 2048}, std::tuple{8, 1000, 576, 7168}}) {
    Problem p;
    p.kind = GemmKind::kGroupedContiguous;
    p.num_groups = groups;
    p.m = int64_t(groups) * m;
    p.n = n;
    p.k = k;
    problems.push_back(p);
  }
  for (Problem p : problems)
    for (bool k_major : {false, true}) {
      p.sa_k_major = k_major;
      p.m_alignment = 64;
      functions.insert(finegemm::heuristics::select_config(p, 132).kernel_function());
    }
  std::vector<std::string> names(functions.begin(), functions.end());
  for (const auto& name : names)
    EXPECT_EQ(name.rfind("finegemm::device::sm90_fp8_gemm_kernel<1, ", 0), 0u) << name;
  for (const auto& name : names) EXPECT_EQ(block_m_of(name), 64) << name;
  compile_and_check_sass(names, [&](size_t i, const std::string& sass) { expect_clean_grouped_sass(names[i], sass); });
}

// The psum layout's kernels (each group's rows from its end row): every tile height the heuristic picks for it, both
// SA layouts, no spills or serialized wgmmas, and griddepcontrol.wait before the first global access (the group ends
// are read on the device, after the previous kernel).
TEST(KernelsCompile, PsumKernelsCompileWithoutSpills) {
  std::set<std::string> functions;
  struct Shape {
    int groups;
    int64_t m, n, k;
  };
  // Prefill / training shapes (DeepSeek-V3's experts, N and K of both GEMMs) and decode-like few rows per group.
  for (const Shape& s : {Shape{4, 8192, 4096, 7168}, Shape{8, 4096, 7168, 2048}, Shape{32, 256, 4096, 7168},
                         Shape{64, 40, 7168, 2048}, Shape{8, 1000, 576, 7168}})
    for (bool k_major : {false, true}) {
      Problem p;
      p.kind = GemmKind::kGroupedContiguousPsum;
      p.num_groups = s.groups;
      p.m = s.m;
      p.n = s.n;
      p.k = s.k;
      p.sa_k_major = k_major;
      functions.insert(finegemm::heuristics::select_config(p, 132).kernel_function());
    }
  std::set<int> block_ms;
  std::vector<std::string> names(functions.begin(), functions.end());
  for (const auto& name : names) {
    EXPECT_NE(name.find("sm90_fp8_gemm_kernel<3, "), std::string::npos) << name;
    block_ms.insert(block_m_of(name));
  }
  EXPECT_GE(block_ms.size(), 2u) << "the shapes should pick more than one tile height";
  compile_and_check_sass(names, [&](size_t i, const std::string& sass) { expect_clean_grouped_sass(names[i], sass); });
}
