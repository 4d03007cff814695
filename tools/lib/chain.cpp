#include "lib/chain.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "jit/launch.hpp"
#include "lib/bench_csv.hpp"
#include "lib/device_buffer.hpp"
#include "lib/jit_kernel.hpp"
#include "lib/shapes.hpp"
#include "lib/timing.hpp"

namespace finegemm::tools {
namespace {

constexpr int kWarmupReplays = 3;
// Weights with the spread of a trained layer's, activations of unit variance: D's values are then of order 1.
constexpr float kWeightStddev = 0.02f;
constexpr float kActivationStddev = 1.0f;
// Each layer's part of a buffer starts at this alignment (the API asks for 16 bytes; 256 keeps layers off shared
// lines).
constexpr size_t kSliceAlignment = 256;
// D is filled with this byte before each graph runs: every bf16 element 0xFFFF, a NaN no GEMM of finite operands
// writes.
constexpr uint8_t kPoisonByte = 0xFF;
constexpr uint16_t kPoison = 0xFFFF;
// Seeds of the random streams, one per kind of operand.
constexpr uint64_t kWeightSeed = 0x57E1647u, kActivationSeed = 0xAC71u;

/// The splitmix64 finalizer (as tools/device/random_normal.cuh).
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The seed of one operand's values: a function of what it is and where, the same in every run.
uint64_t seed_of(uint64_t kind, int64_t m, int64_t n, int64_t k, int layer) {
  uint64_t s = mix64(kind);
  for (uint64_t v : {uint64_t(m), uint64_t(n), uint64_t(k), uint64_t(layer)}) s = mix64(s ^ v);
  return s;
}

size_t slice_bytes(size_t bytes) { return (bytes + kSliceAlignment - 1) / kSliceAlignment * kSliceAlignment; }

Stream as_stream(cudaStream_t s) { return reinterpret_cast<Stream>(s); }

/// Enqueues random_normal_kernel<T> (tools/device/random_normal.cuh) on `stream`: out[i] = stddev * normal(seed, i).
template <typename T>
void fill_normal(T* out, uint64_t count, uint64_t seed, float stddev, cudaStream_t stream) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, uint16_t>, "fp32 values or bf16 bits");
  constexpr bool kFloat = std::is_same_v<T, float>;
  const CUfunction fn = jit_tool_kernel(
      "finegemm/tools/random_normal.cuh",
      kFloat ? "finegemm::tools::random_normal_kernel<float>" : "finegemm::tools::random_normal_kernel<uint16_t>",
      kFloat ? "(float*, uint64_t, uint64_t, float)" : "(uint16_t*, uint64_t, uint64_t, float)");
  int device = 0, sms = 0;
  FG_CUDA_CHECK(cudaGetDevice(&device));
  FG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  void* args[] = {&out, &count, &seed, &stddev};
  jit::LaunchShape shape;
  shape.grid_x = unsigned(std::clamp<uint64_t>((count + 255) / 256, 1, uint64_t(sms) * 8));
  shape.block_x = 256;
  jit::launch_kernel(fn, shape, reinterpret_cast<CUstream>(stream), args, "random_normal_kernel");
}

/// The weights of L layers of one (N, K): B_l fp8 [N, K] and SB_l fp32 [NB, KB] row-major, each layer's quantized per
/// 128x128 block (finegemm::per_block_cast_to_fp8) from normal values of its own.
class ChainWeights {
 public:
  ChainWeights(WeightShape shape, int layers, cudaStream_t stream)
      : n_(shape.n),
        k_(shape.k),
        nb_((shape.n + 127) / 128),
        kb_((shape.k + 127) / 128),
        b_slice_(slice_bytes(size_t(n_ * k_))),
        sb_slice_(slice_bytes(size_t(nb_ * kb_) * 4)),
        b_(size_t(layers) * b_slice_),
        sb_(size_t(layers) * sb_slice_) {
    DeviceBuffer values(size_t(n_ * k_) * 4);
    const TensorView x = TensorView::contiguous(values.get(), DType::kFloat32, {n_, k_});
    for (int l = 0; l < layers; ++l) {
      fill_normal(values.as<float>(), uint64_t(n_ * k_), seed_of(kWeightSeed, 0, n_, k_, l), kWeightStddev, stream);
      per_block_cast_to_fp8(x, b(l), sb(l), as_stream(stream));
    }
    sync_and_check(stream, "bench --chain: drawing and quantizing the weights of N=" + std::to_string(n_) +
                               " K=" + std::to_string(k_));
  }

  TensorView b(int l) { return TensorView::contiguous(b_data(l), DType::kFloat8E4M3, {n_, k_}); }
  TensorView sb(int l) { return TensorView::contiguous(sb_data(l), DType::kFloat32, {nb_, kb_}); }
  uint8_t* b_data(int l) { return b_.as<uint8_t>() + size_t(l) * b_slice_; }
  float* sb_data(int l) { return reinterpret_cast<float*>(sb_.as<uint8_t>() + size_t(l) * sb_slice_); }

 private:
  int64_t n_, k_, nb_, kb_;
  size_t b_slice_, sb_slice_;
  DeviceBuffer b_, sb_;
};

/// The activations and outputs of L layers of M tokens, chained as in a model: layer l quantizes the first M x K
/// elements of io_l (bf16) into A_l fp8 [M, K] and SA_l fp32 [M, KB] MN-major TMA-aligned (strides {1, M_pad}: what
/// per_token_cast_to_fp8 writes for the GEMM to read without conversion), and its GEMM writes D_l bf16 [M, N] as the
/// first M x N elements of io_(l+1). So each quantizer reads what the GEMM before it just wrote (from the L2, as a
/// model's activations come); where K > N the rest of its input keeps the normal values drawn once. io_0 is the first
/// layer's input, drawn once.
class ChainActivations {
 public:
  ChainActivations(int64_t m, WeightShape shape, int layers, cudaStream_t stream)
      : m_(m),
        n_(shape.n),
        k_(shape.k),
        kb_((shape.k + 127) / 128),
        m_pad_(get_tma_aligned_size(m, 4)),
        layers_(layers),
        io_slice_(slice_bytes(size_t(m * std::max(k_, n_)) * 2)),
        a_slice_(slice_bytes(size_t(m * k_))),
        sa_slice_(slice_bytes(size_t(kb_ * m_pad_) * 4)),
        io_(size_t(layers + 1) * io_slice_),
        a_(size_t(layers) * a_slice_),
        sa_(size_t(layers) * sa_slice_) {
    for (int l = 0; l <= layers; ++l)
      fill_normal(reinterpret_cast<uint16_t*>(io_.as<uint8_t>() + size_t(l) * io_slice_), uint64_t(m * std::max(k_, n_)),
                  seed_of(kActivationSeed, m, n_, k_, l), kActivationStddev, stream);
    sync_and_check(stream, "bench --chain: drawing the activations");
  }

  /// Enqueues one step: for each layer, per_token_cast_to_fp8(x_l -> A_l, SA_l), then D_l = GEMM(A_l, SA_l, B_l, SB_l).
  void step(ChainWeights& w, cudaStream_t stream) {
    for (int l = 0; l < layers_; ++l) {
      per_token_cast_to_fp8(x(l), a(l), sa(l), as_stream(stream));
      gemm_fp8_fp8_bf16_nt(a(l), sa(l), w.b(l), w.sb(l), d(l), as_stream(stream));
    }
  }

  /// Poisons every layer's D (the first M x N elements of io_1 .. io_L; the rest of each io holds its drawn values).
  void poison_outputs(cudaStream_t stream) {
    FG_CUDA_CHECK(cudaMemset2DAsync(io_.as<uint8_t>() + io_slice_, io_slice_, kPoisonByte, size_t(m_ * n_) * 2,
                                    size_t(layers_), stream));
  }

  /// Every layer's D, layer after layer ([L, M, N] bf16 bits). The stream that wrote them must be synchronized.
  std::vector<uint16_t> download_outputs() const {
    const size_t row_bytes = size_t(m_ * n_) * 2;
    std::vector<uint16_t> out(size_t(layers_) * size_t(m_ * n_));
    FG_CUDA_CHECK(cudaMemcpy2D(out.data(), row_bytes, io_.as<uint8_t>() + io_slice_, io_slice_, row_bytes,
                               size_t(layers_), cudaMemcpyDeviceToHost));
    return out;
  }

  /// Layer l's SA as K-major [M, KB] floats (the layout the reference kernel reads).
  std::vector<float> download_scales_k_major(int l) const {
    std::vector<float> mn(size_t(kb_ * m_pad_));
    FG_CUDA_CHECK(cudaMemcpy(mn.data(), sa_.as<uint8_t>() + size_t(l) * sa_slice_, mn.size() * 4,
                             cudaMemcpyDeviceToHost));
    std::vector<float> k_major(size_t(m_ * kb_));
    for (int64_t row = 0; row < m_; ++row)
      for (int64_t kb = 0; kb < kb_; ++kb) k_major[size_t(row * kb_ + kb)] = mn[size_t(kb * m_pad_ + row)];
    return k_major;
  }

  const uint8_t* a_data(int l) const { return a_.as<uint8_t>() + size_t(l) * a_slice_; }

 private:
  TensorView x(int l) {
    return TensorView::contiguous(io_.as<uint8_t>() + size_t(l) * io_slice_, DType::kBFloat16, {m_, k_});
  }
  TensorView a(int l) {
    return TensorView::contiguous(a_.as<uint8_t>() + size_t(l) * a_slice_, DType::kFloat8E4M3, {m_, k_});
  }
  TensorView sa(int l) {
    return TensorView::strided(sa_.as<uint8_t>() + size_t(l) * sa_slice_, DType::kFloat32, {m_, kb_}, {1, m_pad_});
  }
  TensorView d(int l) {
    return TensorView::contiguous(io_.as<uint8_t>() + size_t(l + 1) * io_slice_, DType::kBFloat16, {m_, n_});
  }

  int64_t m_, n_, k_, kb_, m_pad_;
  int layers_;
  size_t io_slice_, a_slice_, sa_slice_;
  DeviceBuffer io_, a_, sa_;
};

/// finegemm's PDL setting for the object's lifetime; the previous one is restored after.
class PdlScope {
 public:
  explicit PdlScope(bool enabled) : previous_(get_pdl()) { set_pdl(enabled); }
  ~PdlScope() { set_pdl(previous_); }
  PdlScope(const PdlScope&) = delete;
  PdlScope& operator=(const PdlScope&) = delete;

 private:
  bool previous_;
};

/// An instantiated CUDA graph of what `enqueue` puts on `stream`. The capture is global, so that a call the capture
/// does not allow fails instead of running outside the graph.
class CapturedGraph {
 public:
  CapturedGraph(cudaStream_t stream, const std::function<void()>& enqueue) {
    FG_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    try {
      enqueue();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(stream, &partial) == cudaSuccess && partial != nullptr) cudaGraphDestroy(partial);
      (void)cudaGetLastError();
      throw;
    }
    cudaGraph_t graph = nullptr;
    FG_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    const cudaError_t instantiated = cudaGraphInstantiate(&exec_, graph, 0);
    FG_CUDA_CHECK(cudaGraphDestroy(graph));
    FG_CUDA_CHECK(instantiated);
  }
  ~CapturedGraph() {
    if (exec_ != nullptr && cudaGraphExecDestroy(exec_) != cudaSuccess) (void)cudaGetLastError();
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void launch(cudaStream_t stream) { FG_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

/// An order-independent 64-bit checksum of outputs: the wrapping sum, over the elements, of a hash of (position,
/// bits). Equal checksums of the same shapes in two runs: the same bits, up to a 2^-64 chance.
uint64_t outputs_checksum(const std::vector<uint16_t>& d) {
  uint64_t sum = 0;
  for (size_t i = 0; i < d.size(); ++i) sum += mix64(mix64(uint64_t(i)) ^ d[i]);
  return sum;
}

/// One row of the table.
struct ChainRow {
  int64_t m = 0, n = 0, k = 0;
  std::string config;
  double layer_bytes = 0, bytes_us = 0;
  Timing off, on;             ///< per replay of the whole step
  int layers_differing = 0;   ///< layers whose D differs between the two graphs
  int first_differing = -1;
  int64_t unwritten = 0;      ///< elements of D still holding the poison after either graph ran
  Verdict reference;          ///< the last layer's D against the GPU reference
  uint64_t checksum = 0;      ///< of every layer's D (PDL on)

  bool bitwise() const { return layers_differing == 0 && unwritten == 0; }
  bool ok() const { return bitwise() && reference.ok; }
};

ChainRow measure(ChainWeights& weights, WeightShape shape, int64_t m, const ChainOptions& options, double copy_gbps,
                 cudaStream_t stream) {
  const int layers = options.layers;
  ChainRow row;
  row.m = m, row.n = shape.n, row.k = shape.k;
  row.config =
      describe_config(problem_of(ProblemShape{GemmKind::kNormal, 1, m, shape.n, shape.k}, false), get_num_sms());
  row.layer_bytes = chain_layer_bytes(m, shape.n, shape.k);
  row.bytes_us = row.layer_bytes / (copy_gbps * 1e3);

  ChainActivations chain(m, shape, layers, stream);
  const auto step = [&] { chain.step(weights, stream); };
  // Every kernel compiled (and its launch plan built) with either setting, before anything is captured.
  for (bool pdl : {false, true}) {
    PdlScope scope(pdl);
    step();
    sync_and_check(stream, std::string("bench --chain: warm-up with PDL ") + (pdl ? "on" : "off"));
  }
  std::unique_ptr<CapturedGraph> graphs[2];
  for (bool pdl : {false, true}) {
    PdlScope scope(pdl);
    graphs[pdl] = std::make_unique<CapturedGraph>(stream, step);
  }

  std::vector<uint16_t> outputs[2];
  for (bool pdl : {false, true}) {
    chain.poison_outputs(stream);
    CapturedGraph& graph = *graphs[pdl];
    (pdl ? row.on : row.off) = time_kernel([&](cudaStream_t s) { graph.launch(s); }, stream, options.replays,
                                           kWarmupReplays, /*flush_l2=*/false, nullptr, TimeSource::kEvents);
    outputs[pdl] = chain.download_outputs();
    row.unwritten += std::count(outputs[pdl].begin(), outputs[pdl].end(), kPoison);
  }
  const size_t per_layer = size_t(m * shape.n);
  for (int l = 0; l < layers; ++l) {
    const auto begin = size_t(l) * per_layer;
    if (!std::equal(outputs[0].begin() + begin, outputs[0].begin() + begin + per_layer, outputs[1].begin() + begin)) {
      if (row.layers_differing++ == 0) row.first_differing = l;
    }
  }
  row.checksum = outputs_checksum(outputs[1]);

  // The last layer against the reference, on the quantizer's own A and SA of that layer.
  const int last = layers - 1;
  const DeviceBuffer sa_k_major = DeviceBuffer::from_host(chain.download_scales_k_major(last));
  const Reference ref = gpu_reference_dense(chain.a_data(last), sa_k_major.as<float>(), (shape.k + 127) / 128,
                                            weights.b_data(last), weights.sb_data(last), m, shape.n, shape.k);
  const std::vector<uint16_t> last_d(outputs[1].begin() + size_t(last) * per_layer, outputs[1].end());
  row.reference = check_dense_output(ref, last_d, m, shape.n);
  return row;
}

std::string timing_cell(const Timing& t, int layers) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%7.2f (%.2f-%.2f)", t.median_us / layers, t.min_us / layers, t.max_us / layers);
  return buf;
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::vector<WeightShape> chain_weight_shapes(const std::vector<ProblemShape>& shapes) {
  std::vector<WeightShape> out;
  for (const ProblemShape& s : shapes) {
    if (s.kind != GemmKind::kNormal || s.wgrad) continue;  // the forward (inference) GEMMs only
    const bool seen =
        std::any_of(out.begin(), out.end(), [&](const WeightShape& w) { return w.n == s.n && w.k == s.k; });
    if (!seen) out.push_back({s.n, s.k});
  }
  return out;
}

double chain_layer_bytes(int64_t m, int64_t n, int64_t k) {
  const double md = double(m), nd = double(n), kd = double(k);
  const double kb = double((k + 127) / 128), nb = double((n + 127) / 128);
  return 2.0 * md * kd        // x read (bf16)
         + 2.0 * md * kd      // A written by the quantizer and read by the GEMM (fp8)
         + 2.0 * 4.0 * md * kb  // SA written and read (fp32)
         + nd * kd            // B (fp8)
         + 4.0 * nb * kb      // SB (fp32)
         + 2.0 * md * nd;     // D written (bf16)
}

int run_chain_bench(const ChainOptions& options) {
  if (options.layers < 1) throw std::invalid_argument("bench --chain: layers must be >= 1");
  if (options.replays < kMinChainReplays)
    throw std::invalid_argument("bench --chain: at least " + std::to_string(kMinChainReplays) + " replays");
  const int layers = options.layers;
  CudaStream stream(cudaStreamNonBlocking);
  const double copy_gbps = measure_copy_bandwidth_gbps();
  cudaDeviceProp prop{};
  FG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const char* forced = std::getenv("FINEGEMM_FORCE_CONFIG");
  const std::string forced_config = forced != nullptr ? forced : "";

  std::printf("finegemm %s bench --chain on %s (%d SMs): per (M, N, K), %d layers back to back, each a per-token FP8 "
              "quantization of the layer before's output then a GEMM with its own weights (SA MN-major); (N, K): the "
              "normal shapes of %s\n",
              version(), prop.name, get_num_sms(), layers, options.shapes_origin.c_str());
  std::printf("timer: CUDA events around each replay of a CUDA graph of the %d layers, %d warm-up replays then the "
              "median (min-max) of %d, no L2 flush (each layer reads weights of its own from DRAM); us/layer = replay "
              "time / %d\n",
              layers, kWarmupReplays, options.replays, layers);
  std::printf("copy bandwidth %.0f GB/s (device-to-device copy of 1 GiB, bytes read + written); a layer's bytes: x "
              "read (2MK), A written and read (2MK), SA written and read (8 M KB), B (NK), SB (4 NB KB), D written "
              "(2MN); bytes us = a layer's bytes at the copy bandwidth\n",
              copy_gbps);
  if (!forced_config.empty()) std::printf("FINEGEMM_FORCE_CONFIG=%s\n", forced_config.c_str());

  // The (M, N, K) the kernels support, and their kernels compiled first, in parallel.
  std::vector<std::pair<WeightShape, std::vector<int64_t>>> plan;
  std::vector<Problem> problems;
  for (const WeightShape& w : options.weights) {
    std::vector<int64_t> ms;
    for (int64_t m : options.ms) {
      const Problem p = problem_of(ProblemShape{GemmKind::kNormal, 1, m, w.n, w.k}, false);
      std::string reason;
      if (!is_supported(p, &reason)) {
        std::printf("skipped M=%lld N=%lld K=%lld: %s\n", (long long)m, (long long)w.n, (long long)w.k, reason.c_str());
        continue;
      }
      ms.push_back(m);
      problems.push_back(p);
    }
    if (!ms.empty()) plan.emplace_back(w, std::move(ms));
  }
  {
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    const auto t0 = std::chrono::steady_clock::now();
    const int compiled = precompile_all(problems, get_num_sms(), int(threads));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("compiled %d kernels in %.1f s (%u threads)\n", compiled, sec, threads);
  }

  std::unique_ptr<CsvWriter> csv;
  if (!options.csv_path.empty())
    csv = std::make_unique<CsvWriter>(
        options.csv_path, "bench --chain",
        std::vector<std::pair<std::string, std::string>>{{"version", version()},
                                                         {"device", prop.name},
                                                         {"sms", std::to_string(get_num_sms())},
                                                         {"layers", std::to_string(layers)},
                                                         {"replays", std::to_string(options.replays)},
                                                         {"timer", "events"},
                                                         {"copy_gbps", std::to_string(std::lround(copy_gbps))},
                                                         {"force_config", forced_config}},
        std::vector<std::string>{"m", "n", "k", "config", "layer_bytes", "bytes_us", "off_us", "off_min_us",
                                 "off_max_us", "on_us", "on_min_us", "on_max_us", "on_over_bytes", "off_over_on",
                                 "bitwise", "reference", "reference_diff", "checksum"});

  std::printf("\ncolumns: layer MB and bytes us: a layer's bytes, and their time at the copy bandwidth; PDL off / on: "
              "us per layer of the graph captured without / with programmatic dependent launch (median, min-max); "
              "on / bytes: PDL on over bytes us; off / on: PDL off over PDL on; D: every layer's output bitwise equal "
              "in both graphs (and written), then the last layer's against the GPU reference; checksum: a 64-bit hash "
              "of all layers' outputs (equal in two runs: the same bits)\n");
  std::printf("%7s %6s %6s | %8s | %8s | %-26s | %-26s | %10s | %8s | %-30s | %s\n", "M", "N", "K", "layer MB",
              "bytes us", "PDL off us/layer (min-max)", "PDL on us/layer (min-max)", "on / bytes", "off / on",
              "D: bitwise on==off, reference", "checksum");
  std::fflush(stdout);
  int failures = 0, rows = 0;
  double log_off_on = 0, log_on_bytes = 0;
  for (auto& [shape, ms] : plan) {
    ChainWeights weights(shape, layers, stream);
    for (int64_t m : ms) {
      const ChainRow r = measure(weights, shape, m, options, copy_gbps, stream);
      const double on_us = r.on.median_us / layers, off_us = r.off.median_us / layers;
      const std::string d_cell = std::string(r.bitwise() ? "yes" : "NO") + ", " + (r.reference.ok ? "ok" : "FAIL");
      std::printf("%7lld %6lld %6lld | %8.2f | %8.2f | %-26s | %-26s | %10.2f | %8.3f | %-30s | %s\n", (long long)m,
                  (long long)shape.n, (long long)shape.k, r.layer_bytes / 1e6, r.bytes_us,
                  timing_cell(r.off, layers).c_str(), timing_cell(r.on, layers).c_str(), on_us / r.bytes_us,
                  off_us / on_us, d_cell.c_str(), hex64(r.checksum).c_str());
      if (r.layers_differing > 0)
        std::printf("  %d of %d layers' outputs differ between PDL off and on (the first: layer %d)\n",
                    r.layers_differing, layers, r.first_differing);
      if (r.unwritten > 0) std::printf("  %lld output elements left unwritten\n", (long long)r.unwritten);
      if (!r.reference.ok)
        std::printf("  layer %d against the reference: %s\n", layers - 1, r.reference.summary.c_str());
      if (csv)
        csv->row({std::to_string(m), std::to_string(shape.n), std::to_string(shape.k), r.config,
                  CsvWriter::fixed(r.layer_bytes, 0), CsvWriter::fixed(r.bytes_us, 3), CsvWriter::fixed(off_us, 3),
                  CsvWriter::fixed(r.off.min_us / layers, 3), CsvWriter::fixed(r.off.max_us / layers, 3),
                  CsvWriter::fixed(on_us, 3), CsvWriter::fixed(r.on.min_us / layers, 3),
                  CsvWriter::fixed(r.on.max_us / layers, 3), CsvWriter::fixed(on_us / r.bytes_us, 4),
                  CsvWriter::fixed(off_us / on_us, 4), r.bitwise() ? "yes" : "no", r.reference.ok ? "ok" : "FAIL",
                  CsvWriter::fixed(r.reference.worst_diff, 9), hex64(r.checksum)});
      std::fflush(stdout);
      failures += !r.ok();
      ++rows;
      log_off_on += std::log(off_us / on_us);
      log_on_bytes += std::log(on_us / r.bytes_us);
    }
  }
  if (rows > 0)
    std::printf("\ngeomean over %d rows: off / on %.3f, on / bytes %.3f\n", rows, std::exp(log_off_on / rows),
                std::exp(log_on_bytes / rows));
  if (csv) std::printf("rows written to %s\n", options.csv_path.c_str());
  std::printf("%d check failures\n", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace finegemm::tools
