// Side-by-side measurement of DeepGEMM's SM90 FP8 1D2D dense kernel (`sm90_fp8_gemm_1d2d_impl`, public source, built
// from the git-ignored third_party/deepgemm, see tools/compare/README.md) and finegemm on the same random problem, in
// the same process, on the same card: both results checked against the same fp64 GPU reference, then both timed
// alternately (finegemm 30 flushed calls, DeepGEMM 30 flushed calls, per round), kernel time from CUPTI when it loads.
//
// DeepGEMM's launch is reproduced from its host code (csrc/jit_kernels/impls/sm90_fp8_gemm_1d2d.hpp, heuristics/
// common.hpp + sm90.hpp, impls/runtime_utils.hpp, jit/handle.hpp): template arguments, TMA descriptors, dynamic shared
// memory, cluster size and grid. Only the JIT is replaced by instantiating the kernel at compile time for a fixed list
// of configurations (kEntries below); M is a run-time argument (DeepGEMM's default compiled_dims "nk").
//
// Usage: deepgemm_sm90 [--only SUBSTRING] [--rounds R] [--iters N] [--power S] [--seed S] [--list]
// finegemm's own knobs apply to its calls (FINEGEMM_NUM_SMS, FINEGEMM_FORCE_CONFIG, FINEGEMM_JIT_DEFINES).
#include <cuda.h>
#include <cuda_runtime.h>

#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "lib/device_buffer.hpp"
#include "lib/gemm_problem.hpp"
#include "lib/kernel_timer.hpp"
#include "lib/power.hpp"
#include "lib/shapes.hpp"
#include "lib/timing.hpp"

namespace fg = finegemm;
namespace ft = finegemm::tools;

namespace {

constexpr int kBlockK = 128;
constexpr int kNumTMAThreads = 128;
constexpr int kSmemCapacity = 232448;  // SM90ArchSpec::smem_capacity

constexpr int ceil_div_i(int64_t a, int64_t b) { return int((a + b - 1) / b); }
constexpr int64_t align_i(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// heuristics/common.hpp get_swizzle_mode: the largest of 128/64/32/16 dividing the block's inner bytes.
constexpr int swizzle_mode(int block_bytes) {
  for (int mode : {128, 64, 32, 16})
    if (block_bytes % mode == 0) return mode;
  return 0;
}

// ---- DeepGEMM's host-side configuration ---------------------------------------------------------------------------

struct DgConfig {
  int block_m = 0, block_n = 0, stages = 0, multicast = 1;
  bool multicast_on_a = false;
  int num_sms = 0;  // grid size and the kernel's kNumSMs (the heuristic's minimized SM count)

  int math_threads() const { return block_m <= 64 ? 128 : 256; }  // SM90ArchSpec::get_thread_config
  int swizzle_d() const { return swizzle_mode(block_n * 2); }       // bf16 D
  bool operator==(const DgConfig& o) const {
    return block_m == o.block_m && block_n == o.block_n && stages == o.stages && multicast == o.multicast &&
           multicast_on_a == o.multicast_on_a && num_sms == o.num_sms;
  }
  std::string describe() const {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "BM%d BN%d S%d %s SM%d", block_m, block_n, stages,
                  multicast > 1 ? (multicast_on_a ? "mcA" : "mcB") : "mc1", num_sms);
    return buf;
  }
};

// get_smem_config<SM90ArchSpec> for the 1D2D kernel, bf16 D, fp8 A/B: D tile (1024-aligned), A/B/SFA per stage
// (SFA 128-aligned), the B scales of the whole K (one or two rows), two mbarriers per stage.
int dg_smem_size(int block_m, int block_n, int stages, int64_t k) {
  const int smem_cd = int(align_i(int64_t(block_m) * block_n * 2, 1024));
  const int smem_a = block_m * kBlockK, smem_b = block_n * kBlockK;
  const int smem_sfa = int(align_i(int64_t(block_m) * 4, 128));
  const int use_uniform_sfb = kBlockK % block_n == 0 ? 1 : 2;
  const int smem_extra_sfb = int(align_i(int64_t(ceil_div_i(k, kBlockK)) * 4 * use_uniform_sfb, 8));
  return smem_cd + stages * (smem_a + smem_b + smem_sfa) + smem_extra_sfb + stages * 8 * 2;
}

// DeepGEMM's get_best_config (heuristics/common.hpp) with SM90ArchSpec (heuristics/sm90.hpp), for a dense NT GEMM,
// 1D2D kernel, fp8 A/B, bf16 D, K-major A and B: block sizes by waves then last-wave use, multicast x2 when M >= 512
// (on the larger block side first), the most stages that fit, then the fewest SMs that keep the wave count.
DgConfig dg_heuristic(int64_t m, int64_t n, int64_t k, int num_sms) {
  std::vector<int> block_ms = {64, 128, 256};
  if (m <= 16) block_ms.push_back(16);
  if (m <= 32) block_ms.push_back(32);
  std::vector<int> block_ns;
  for (int i = 16; i <= 256; i += 16) block_ns.push_back(i);
  auto num_blocks = [&](int bm, int bn) { return int64_t(ceil_div_i(m, bm)) * ceil_div_i(n, bn); };
  auto num_waves = [&](int bm, int bn) { return ceil_div_i(num_blocks(bm, bn), num_sms); };
  auto last_util = [&](int bm, int bn) {
    const int64_t r = num_blocks(bm, bn) % num_sms;
    return r == 0 ? num_sms : int(r);
  };
  auto legal = [&](int bm, int bn) {
    // Too many B scales per block or register spills; at least one side <= 128.
    if (bn > 128 && bn != 144 && bn != 160 && bn != 192) return false;
    return bm <= 128 || bn <= 128;
  };
  int best_m = 0, best_n = 0, best_waves = 0, best_last = 0;
  for (int bm : block_ms) {
    for (int bn : block_ns) {
      const int waves = num_waves(bm, bn), last = last_util(bm, bn);
      if (!legal(bm, bn)) continue;
      bool success = false;
      if (best_m == 0 || best_n == 0 || waves < best_waves) {
        success = true;
      } else if (waves == best_waves) {
        success = last > best_last;
        if (last == best_last) {
          success |= bm == best_m && bn < best_n;
          success |= bn == best_n && bm < best_m;
          success |= bm != best_m && bn > best_n && bn <= n && bm <= m;
        }
      }
      if (success) best_m = bm, best_n = bn, best_waves = waves, best_last = last;
    }
  }
  DgConfig c;
  c.block_m = best_m;
  c.block_n = best_n;
  // SM90ArchSpec::get_multicast_legality for a normal GEMM: no divisibility required, the SM count must be even.
  const bool legal_on_a = num_sms % 2 == 0, legal_on_b = num_sms % 2 == 0;
  bool order[2] = {false, true};
  if (best_m > best_n) std::swap(order[0], order[1]);
  for (bool on_a : order) {
    if (m >= 512 && (on_a ? legal_on_a : legal_on_b)) {
      c.multicast = 2;
      c.multicast_on_a = on_a;
      break;
    }
  }
  for (int s = 32; s > 0; --s) {
    // is_num_stages_legal: unrolling both stages and num_former_iters would make the code too large.
    if (kBlockK % best_n != 0 && kBlockK / std::gcd(best_n, kBlockK) <= 4 && s > 4) continue;
    if (dg_smem_size(best_m, best_n, s, k) <= kSmemCapacity) {
      c.stages = s;
      break;
    }
  }
  c.num_sms = int(align_i(ceil_div_i(num_blocks(best_m, best_n), best_waves), c.multicast));
  return c;
}

// ---- TMA descriptors (impls/runtime_utils.hpp make_tma_2d_desc) -----------------------------------------------------

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_tiled() {
  static EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    FG_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || p == nullptr)
      throw std::runtime_error("cuTensorMapEncodeTiled is not available from the driver");
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

CUtensorMapSwizzle to_swizzle(int mode) {
  switch (mode) {
    case 0:
    case 16: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  throw std::invalid_argument("bad swizzle mode");
}

// A 2D map of a row-major [outer, inner] tensor with a row stride of `outer_stride` elements; the box's inner size is
// replaced by the swizzle atom when swizzling (as DeepGEMM does), L2 promotion 256B, no OOB fill.
CUtensorMap make_tma_2d(const void* ptr, CUtensorMapDataType dtype, int elem_size, uint64_t inner, uint64_t outer,
                        uint32_t box_inner, uint32_t box_outer, uint64_t outer_stride, int swizzle) {
  if (swizzle != 0) box_inner = uint32_t(swizzle / elem_size);
  CUtensorMap map;
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {outer_stride * uint64_t(elem_size)};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, dtype, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, to_swizzle(swizzle),
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw std::runtime_error("cuTensorMapEncodeTiled failed: " + std::to_string(int(r)));
  return map;
}

// ---- The compiled DeepGEMM configurations --------------------------------------------------------------------------

using DgKernelFn = void (*)(float*, int*, uint32_t, uint32_t, uint32_t, CUtensorMap, CUtensorMap, CUtensorMap,
                            CUtensorMap);

// The instantiation DeepGEMM's JIT would generate (sm90_fp8_gemm_1d2d.hpp generate_impl) for a dense NT GEMM with
// compiled dims "nk": SFB K-major, SHAPE_M = 0, SHAPE_N/SHAPE_K compiled, one group, BLOCK_K 128, 128B swizzle of A
// and B, D swizzle from BLOCK_N, 128 TMA threads, EpilogueIdentity.
template <uint32_t N, uint32_t K, uint32_t BM, uint32_t BN, uint32_t kStages, uint32_t kMulticast, bool kOnA,
          uint32_t kSms>
DgKernelFn dg_kernel() {
  constexpr uint32_t kLastStages = uint32_t(ceil_div_i(K, kBlockK)) % kStages;  // num_last_stages
  constexpr uint32_t kMathThreads = BM <= 64 ? 128 : 256;
  constexpr uint32_t kSwizzleD = uint32_t(swizzle_mode(int(BN) * 2));
  return &deep_gemm::sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, N, K, 1, BM, BN, kBlockK, 128, 128, kSwizzleD,
                                             kStages, kLastStages, kNumTMAThreads, kMathThreads, kMulticast, kOnA,
                                             kSms, deep_gemm::GemmType::Normal, deep_gemm::EpilogueIdentity>;
}

struct Entry {
  int64_t m, n, k;
  DgConfig config;
  DgKernelFn (*kernel)();
};

template <uint32_t N, uint32_t K, uint32_t BM, uint32_t BN, uint32_t S, uint32_t MC, bool ON_A, uint32_t SMS>
Entry entry(int64_t m) {
  DgConfig c;
  c.block_m = BM, c.block_n = BN, c.stages = S, c.multicast = int(MC), c.multicast_on_a = ON_A, c.num_sms = int(SMS);
  return Entry{m, N, K, c, &dg_kernel<N, K, BM, BN, S, MC, ON_A, SMS>};
}

// DeepGEMM's heuristic on a 132-SM H100 (SXM) picks, for these shapes (dg_heuristic prints it again at run time for
// the card's SM count): 256x128 tiles, 3 stages, multicast x2 on A, 128 SMs for the M = 4096 dense shapes with
// N >= 4096; 128x192, 4 stages, multicast x2 on B, 118 SMs for 4096x2112x7168. The "mc1" twins are the same
// configuration without multicast (the minimized SM count is the same).
std::vector<Entry> entries() {
  return {
      entry<7168, 16384, 256, 128, 3, 2, true, 128>(4096),
      entry<7168, 16384, 256, 128, 3, 1, false, 128>(4096),
      entry<4096, 7168, 256, 128, 3, 2, true, 128>(4096),
      entry<4096, 7168, 256, 128, 3, 1, false, 128>(4096),
      entry<7168, 2048, 256, 128, 3, 2, true, 128>(4096),
      entry<7168, 2048, 256, 128, 3, 1, false, 128>(4096),
      entry<2112, 7168, 128, 192, 4, 2, false, 118>(4096),
      entry<24576, 1536, 256, 128, 3, 2, true, 128>(4096),
      entry<32768, 512, 256, 128, 3, 2, true, 128>(4096),
  };
}

std::string shape_name(const Entry& e) {
  return std::to_string(e.m) + "x" + std::to_string(e.n) + "x" + std::to_string(e.k);
}

std::string entry_name(const Entry& e) { return shape_name(e) + " " + e.config.describe(); }

// One DeepGEMM call on a GemmProblem's buffers: A [M, K] fp8, B [N, K] fp8, SFA MN-major [KB][align(M, 4)] fp32 (the
// problem's sa_mn_major is exactly that layout), SFB [NB][KB] fp32 (K contiguous), D [M, N] bf16.
class DgLauncher {
 public:
  DgLauncher(const Entry& e, ft::GemmProblem& p) : e_(e), kernel_(e.kernel()) {
    const DgConfig& c = e.config;
    const int64_t m = e.m, n = e.n, k = e.k;
    smem_ = dg_smem_size(c.block_m, c.block_n, c.stages, k);
    if (smem_ > kSmemCapacity) throw std::runtime_error("DeepGEMM config does not fit in shared memory");
    const int64_t m_tma = fg::get_tma_aligned_size(m, 4);
    tma_a_ = make_tma_2d(p.a.get(), CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, uint64_t(k), uint64_t(m), kBlockK,
                         uint32_t(c.block_m), uint64_t(k), 128);
    tma_b_ = make_tma_2d(p.b.get(), CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, uint64_t(k), uint64_t(n), kBlockK,
                         uint32_t(c.block_n), uint64_t(k), 128);
    tma_d_ = make_tma_2d(p.d.get(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, uint64_t(n), uint64_t(m),
                         uint32_t(c.block_n), uint32_t(c.block_m), uint64_t(n), c.swizzle_d());
    tma_sfa_ = make_tma_2d(p.sa_mn_major.get(), CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, uint64_t(m_tma),
                           uint64_t(ceil_div_i(k, kBlockK)), uint32_t(c.block_m), 1, uint64_t(m_tma), 0);
    sfb_ = p.sb.as<float>();
    FG_CUDA_CHECK(cudaFuncSetAttribute(kernel_, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_));
  }

  void launch(cudaStream_t s) const {
    const DgConfig& c = e_.config;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(c.num_sms));
    cfg.blockDim = dim3(unsigned(kNumTMAThreads + c.math_threads()));
    cfg.dynamicSmemBytes = size_t(smem_);
    cfg.stream = s;
    cudaLaunchAttribute attr{};
    if (c.multicast > 1) {
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = unsigned(c.multicast);
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
    }
    // K is passed aligned to 128 as DeepGEMM does (all listed K are multiples of 128).
    const uint32_t m = uint32_t(e_.m), n = uint32_t(e_.n), k = uint32_t(align_i(e_.k, 128));
    FG_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel_, sfb_, static_cast<int*>(nullptr), m, n, k, tma_a_, tma_b_,
                                     tma_d_, tma_sfa_));
  }

  int smem() const { return smem_; }

 private:
  const Entry& e_;
  DgKernelFn kernel_;
  int smem_ = 0;
  float* sfb_ = nullptr;
  CUtensorMap tma_a_{}, tma_b_{}, tma_d_{}, tma_sfa_{};
};

struct Options {
  std::string only;
  int rounds = 3, iters = 30;
  double power_seconds = 0;
  uint64_t seed = 1;
  bool list = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "deepgemm_sm90: %s\nusage: deepgemm_sm90 [--only SUBSTRING] [--rounds R] [--iters N] [--power S] "
               "[--seed S] [--list]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    try {
      if (a == "--only") o.only = value();
      else if (a == "--rounds") o.rounds = std::stoi(value());
      else if (a == "--iters") o.iters = std::stoi(value());
      else if (a == "--power") o.power_seconds = std::stod(value());
      else if (a == "--seed") o.seed = std::stoull(value());
      else if (a == "--list") o.list = true;
      else usage(("unknown argument " + a).c_str());
    } catch (const std::logic_error&) {
      usage(("bad value for " + a).c_str());
    }
  }
  if (o.rounds < 1 || o.iters < 1) usage("--rounds and --iters must be >= 1");
  if (o.power_seconds < 0 || o.power_seconds > 600) usage("--power takes 0 < S <= 600 seconds");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  std::vector<Entry> all = entries();
  std::vector<Entry> selected;
  for (const Entry& e : all)
    if (opt.only.empty() || entry_name(e).find(opt.only) != std::string::npos) selected.push_back(e);
  if (opt.list) {
    for (const Entry& e : all) std::printf("%s\n", entry_name(e).c_str());
    return 0;
  }
  if (selected.empty()) usage("no entry matches --only");

  try {
    cudaDeviceProp prop{};
    FG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) {
      std::fprintf(stderr, "deepgemm_sm90: needs an sm_90 GPU (found %s, sm_%d%d)\n", prop.name, prop.major,
                   prop.minor);
      return 2;
    }
    const int device_sms = prop.multiProcessorCount;
    cudaStream_t stream;
    FG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ft::L2Flusher flusher(256ull << 20, ft::FlushMode::kMemset);
    std::string no_cupti_why;
    const bool cupti = ft::kernel_timer_available(&no_cupti_why);
    const ft::TimeSource source = cupti ? ft::TimeSource::kCuptiKernels : ft::TimeSource::kEvents;
    std::unique_ptr<ft::PowerMeter> meter;
    if (opt.power_seconds > 0) {
      meter = std::make_unique<ft::PowerMeter>(0);
      if (!meter->available()) std::printf("power: NVML unavailable (%s): sustained times only\n", meter->why().c_str());
    }
    std::printf("DeepGEMM sm90_fp8_gemm_1d2d vs finegemm %s on %s (%d SMs), seed %llu, %d rounds x %d flushed calls "
                "each (256 MiB memset flush), operands: normal values quantized per token (A) / 128x128 block (B)\n",
                fg::version(), prop.name, device_sms, (unsigned long long)opt.seed, opt.rounds, opt.iters);
    std::printf("timer: %s\n", cupti ? ("CUPTI kernel time (" + ft::kernel_timer_description() + ")").c_str()
                                     : ("CUDA events (CUPTI unavailable: " + no_cupti_why + ")").c_str());

    struct Row {
      std::string shape, config, fg_config;
      double fg_us = 0, dg_us = 0;
      bool fg_ok = false, dg_ok = false;
    };
    std::vector<Row> rows;
    for (size_t idx = 0; idx < selected.size(); ++idx) {
      const Entry& e = selected[idx];
      const DgConfig heur = dg_heuristic(e.m, e.n, e.k, device_sms);
      std::printf("\n== %s | DeepGEMM %s%s (its heuristic on %d SMs: %s)\n", shape_name(e).c_str(),
                  e.config.describe().c_str(), e.config == heur ? " = heuristic" : "", device_sms,
                  heur.describe().c_str());
      if (e.config.num_sms > device_sms)
        std::printf("   WARNING: the kernel was built for %d SMs, the card has %d\n", e.config.num_sms, device_sms);

      ft::ProblemShape shape;
      shape.kind = fg::GemmKind::kNormal;
      shape.m = e.m, shape.n = e.n, shape.k = e.k;
      ft::ProblemOptions po;
      po.seed = opt.seed;
      po.data = ft::DataKind::kNormal;
      ft::GemmProblem problem(shape, po);
      const ft::Reference ref = ft::gpu_reference(problem);
      const std::string fg_config = fg::describe_config(ft::problem_of(shape, false), fg::get_num_sms());

      // finegemm (SA MN-major), then DeepGEMM into the same (re-poisoned) D; same check for both.
      problem.poison_output(stream);
      problem.run(false, stream);
      FG_CUDA_CHECK(cudaStreamSynchronize(stream));
      const ft::Verdict vf = ft::check_output(problem, ref, problem.download_output());
      DgLauncher dg(e, problem);
      problem.poison_output(stream);
      dg.launch(stream);
      FG_CUDA_CHECK(cudaStreamSynchronize(stream));
      const ft::Verdict vd = ft::check_output(problem, ref, problem.download_output());
      std::printf("   check finegemm: %s (worst diff %.3g) | DeepGEMM: %s (worst diff %.3g), smem %d B\n",
                  vf.ok ? "ok" : "FAIL", vf.worst_diff, vd.ok ? "ok" : "FAIL", vd.worst_diff, dg.smem());
      if (!vf.ok) std::printf("   finegemm: %s\n", vf.summary.c_str());
      if (!vd.ok) std::printf("   DeepGEMM: %s\n", vd.summary.c_str());
      std::printf("   finegemm config: %s\n", fg_config.c_str());

      auto run_fg = [&](cudaStream_t st) { problem.run(false, st); };
      auto run_dg = [&](cudaStream_t st) { dg.launch(st); };
      auto tflops = [&](double us) { return problem.flops() / (us * 1e-6) / 1e12; };
      std::vector<double> fg_rounds, dg_rounds;
      for (int r = 0; r < opt.rounds; ++r) {
        const ft::Timing tf = ft::time_kernel(run_fg, stream, opt.iters, 3, true, &flusher, source);
        const ft::Timing td = ft::time_kernel(run_dg, stream, opt.iters, 3, true, &flusher, source);
        fg_rounds.push_back(tf.median_us);
        dg_rounds.push_back(td.median_us);
        std::printf("   round %d: finegemm %8.1f us %6.0f TFLOPS (ev %.1f) | DeepGEMM %8.1f us %6.0f TFLOPS (ev %.1f) | "
                    "DG/fg time %.3f\n",
                    r, tf.median_us, tflops(tf.median_us), tf.event_median_us, td.median_us, tflops(td.median_us),
                    td.event_median_us, td.median_us / tf.median_us);
      }
      Row row;
      row.shape = shape_name(e);
      row.config = e.config.describe();
      row.fg_config = fg_config;
      row.fg_us = ft::summarize_samples(fg_rounds).median;
      row.dg_us = ft::summarize_samples(dg_rounds).median;
      row.fg_ok = vf.ok;
      row.dg_ok = vd.ok;
      rows.push_back(row);

      if (opt.power_seconds > 0) {
        auto describe = [&](const char* who, const ft::SustainedRun& s) {
          std::printf("   sustained %s: %.1f us/call %.0f TFLOPS %.0f W %.2f mJ/call %d MHz (%s)\n", who,
                      s.us_per_call, tflops(s.us_per_call), s.watts, s.mj_per_call, s.sm_clock_mhz,
                      ft::describe_clock_event_reasons(s.clock_event_reasons).c_str());
        };
        describe("finegemm", ft::run_sustained(run_fg, stream, row.fg_us, opt.power_seconds, *meter));
        describe("DeepGEMM", ft::run_sustained(run_dg, stream, row.dg_us, opt.power_seconds, *meter));
      }
    }

    std::printf("\n%-18s | %-26s | %11s | %11s | %8s | %s\n", "shape (MxNxK)", "DG config", "finegemm us", "DG us",
                "DG/fg", "checks (fg, DG)");
    int failures = 0;
    for (const Row& r : rows) {
      std::printf("%-18s | %-26s | %11.1f | %11.1f | %8.3f | %s, %s\n", r.shape.c_str(), r.config.c_str(), r.fg_us,
                  r.dg_us, r.dg_us / r.fg_us, r.fg_ok ? "ok" : "FAIL", r.dg_ok ? "ok" : "FAIL");
      failures += !r.fg_ok + !r.dg_ok;
    }
    std::printf("(medians of the %d rounds' medians; DG/fg > 1: finegemm faster)\n", opt.rounds);
    FG_CUDA_CHECK(cudaStreamDestroy(stream));
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "deepgemm_sm90: %s\n", ex.what());
    return 1;
  }
}
