// Entry points of the FP8 quantizers: validate, find the kernel (one JIT instance per kind and input type, its
// CUfunction cached per context), launch. A warm call costs the validation (which formats no message unless a check
// fails), three pointer queries the first time its pointers are seen, and one cuLaunchKernelEx; nothing is allocated
// and nothing synchronizes.
#include <cuda.h>

#include <algorithm>
#include <array>
#include <utility>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "api/context.hpp"
#include "api/validate.hpp"
#include "common/bounded_cache.hpp"
#include "common/error.hpp"
#include "finegemm/device/common/quantize_args.cuh"
#include "finegemm/finegemm.hpp"
#include "heuristics/quantizer_launch.hpp"
#include "jit/driver.hpp"
#include "jit/launch.hpp"
#include "jit/runtime.hpp"

namespace finegemm {
namespace {

using api::Context;
using jit::check_cu;
using jit::driver;

constexpr const char* kQuantizeHeader = "finegemm/device/kernels/quantize.cuh";
constexpr const char* kQuantizeParameters = "(const finegemm::device::QuantizeArgs)";
constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxGrid = std::numeric_limits<int32_t>::max();  // gridDim.x limit
constexpr int kInputAlignBytes = 16;   // 16-byte loads of 8 bf16 or 4 fp32
constexpr int kOutputAlignBytes = 8;   // 8-byte stores of 8 e4m3 codes (4-byte stores of 4 for fp32 inputs)

enum class QuantizeKind : int { kPerToken = 0, kPerBlock = 1 };

const char* function_name(QuantizeKind kind) {
  return kind == QuantizeKind::kPerToken ? "per_token_cast_to_fp8" : "per_block_cast_to_fp8";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct QuantizeLaunch {
  QuantizeKind kind = QuantizeKind::kPerToken;
  bool is_bf16 = true;
  uint32_t grid = 0;
  device::QuantizeArgs args{};
};

/// True when no two indices of `t` address the same element: with the dimensions sorted by stride, each stride
/// reaches past every offset the smaller dimensions span. Dimensions of size 1 do not matter.
bool non_overlapping(const TensorView& t) {
  std::array<std::pair<int64_t, int64_t>, 3> dims{};  // (stride, size)
  int n = 0;
  for (int d = 0; d < t.rank; ++d)
    if (t.shape[d] > 1) dims[n++] = {t.strides[d], t.shape[d]};
  for (int i = 1; i < n; ++i)  // insertion sort of at most 3 dimensions, by stride
    for (int j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  int64_t extent = 1;  // 1 + the largest offset reached by the dimensions seen so far
  for (int i = 0; i < n; ++i) {
    if (dims[i].first < extent) return false;
    extent += dims[i].first * (dims[i].second - 1);
  }
  return true;
}

void expect_aligned(const void* ptr, int64_t bytes, const char* fn, const char* name) {
  check_arg(reinterpret_cast<uintptr_t>(ptr) % uintptr_t(bytes) == 0, fn, name, " must be ", bytes,
            "-byte aligned, got address ", ptr);
}

/// Row and group strides of a [G?, rows, K] view: K contiguous, strides a multiple of `align_bytes`.
void expect_rows(const TensorView& t, const char* fn, const char* name, int align_bytes) {
  const int last = t.rank - 1;
  check_arg(t.strides[last] == 1 || t.shape[last] <= 1, fn, name, " must be K-contiguous (last stride 1), got ",
            t);
  const int64_t size = dtype_size(t.dtype);
  for (int d = 0; d < last; ++d)
    check_arg(t.strides[d] * size % align_bytes == 0 || t.shape[d] <= 1, fn, name, " stride ", d, " must be a multiple of ",
              align_bytes, " bytes (vector loads and stores), got ", t);
}

QuantizeLaunch validate(QuantizeKind kind, const TensorView& x, const TensorView& out, const TensorView& scales) {
  const char* fn = function_name(kind);
  check(x.dtype == DType::kBFloat16 || x.dtype == DType::kFloat32, Error::Kind::kTypeMismatch, fn,
        "x must be bfloat16 or float32, got ", x);
  check(out.dtype == DType::kFloat8E4M3, Error::Kind::kTypeMismatch, fn, "out must be float8_e4m3fn, got ",
        out);
  check(scales.dtype == DType::kFloat32, Error::Kind::kTypeMismatch, fn, "scales must be float32, got ",
        scales);
  check_arg(x.rank == 2 || x.rank == 3, fn, "x must have rank 2 ([rows, K]) or 3 ([G, rows, K]), got ", x);
  for (int d = 0; d < x.rank; ++d)
    check_arg(x.shape[d] >= 0 && x.shape[d] <= kMaxDim && x.strides[d] >= 0, fn, "x has an invalid size or stride: ",
              x);
  check_arg(out.rank == x.rank && std::equal(out.shape, out.shape + x.rank, x.shape), fn,
            "out must have the shape of x ", x, ", got ", out);
  check_arg(std::all_of(out.strides, out.strides + out.rank, [](int64_t s) { return s >= 0; }) &&
                std::all_of(scales.strides, scales.strides + scales.rank, [](int64_t s) { return s >= 0; }),
            fn, "strides must be non-negative: out ", out, ", scales ", scales);

  const bool grouped = x.rank == 3;
  const int row_dim = grouped ? 1 : 0;
  const int64_t groups = grouped ? x.shape[0] : 1, rows = x.shape[row_dim], cols = x.shape[row_dim + 1];
  const int64_t k_blocks = ceil_div(cols, device::kQuantBlock);
  const int64_t scale_rows = kind == QuantizeKind::kPerToken ? rows : ceil_div(rows, device::kQuantBlock);
  const char* scale_shape = kind == QuantizeKind::kPerToken
                                ? (grouped ? "[G, M, ceil(K/128)]" : "[M, ceil(K/128)]")
                                : (grouped ? "[G, ceil(N/128), ceil(K/128)]" : "[ceil(N/128), ceil(K/128)]");
  const bool scale_shape_ok = scales.rank == x.rank && (!grouped || scales.shape[0] == groups) &&
                              scales.shape[row_dim] == scale_rows && scales.shape[row_dim + 1] == k_blocks;
  if (!scale_shape_ok) [[unlikely]]
    fail(Error::Kind::kInvalidArgument, fn, "scales must have shape ", scale_shape, " = [",
         grouped ? std::to_string(groups) + ", " : "", scale_rows, ", ", k_blocks, "] for x ", x, ", got ", scales);
  check_arg(cols % device::kQuantColumnAlign == 0, fn, "K must be a multiple of ", device::kQuantColumnAlign,
            ", got K=", cols);

  QuantizeLaunch launch;
  launch.kind = kind;
  launch.is_bf16 = x.dtype == DType::kBFloat16;
  if (groups == 0 || rows == 0 || cols == 0) return launch;  // grid 0: nothing to do

  expect_rows(x, fn, "x", kInputAlignBytes);
  expect_rows(out, fn, "out", kOutputAlignBytes);
  check_arg(non_overlapping(out), fn, "out has overlapping rows: ", out);
  check_arg(non_overlapping(scales), fn, "scales has overlapping elements: ", scales);
  expect_aligned(x.data, kInputAlignBytes, fn, "x");
  expect_aligned(out.data, kOutputAlignBytes, fn, "out");
  expect_aligned(scales.data, 4, fn, "scales");

  // Per-token: one item per (group, pair of rows, k block), kPerTokenItemsPerCta per CTA. Per-block: one CTA per
  // block. Both kernels index items and CTAs with 32 bits.
  const int64_t num_blocks = groups * scale_rows * k_blocks;
  check_arg(num_blocks <= kMaxGrid, fn, "x has too many scale blocks for one launch (", num_blocks,
            "): split it, got ", x);
  const int64_t num_items = groups * ceil_div(rows, device::kQuantRowsPerThread) * k_blocks;
  const int64_t grid =
      kind == QuantizeKind::kPerToken ? ceil_div(num_items, device::kPerTokenItemsPerCta) : num_blocks;

  device::QuantizeArgs& a = launch.args;
  a.x = x.data;
  a.out = static_cast<uint8_t*>(out.data);
  a.scales = static_cast<float*>(scales.data);
  a.x_group_stride = grouped ? x.strides[0] : 0;
  a.x_row_stride = x.strides[row_dim];
  a.out_group_stride = grouped ? out.strides[0] : 0;
  a.out_row_stride = out.strides[row_dim];
  a.scale_group_stride = grouped ? scales.strides[0] : 0;
  a.scale_row_stride = scales.strides[row_dim];
  a.scale_k_block_stride = scales.strides[row_dim + 1];
  a.num_groups = int32_t(groups);
  a.num_rows = int32_t(rows);
  a.num_cols = int32_t(cols);
  launch.grid = uint32_t(grid);
  return launch;
}

/// A quantizer call's tensors and device, the key of the pointer checks already made.
struct QuantizePointers {
  const void* x;
  const void* out;
  const void* scales;
  int device;
  bool operator==(const QuantizePointers& o) const {
    return x == o.x && out == o.out && scales == o.scales && device == o.device;
  }
};

struct QuantizePointersHash {
  size_t operator()(const QuantizePointers& k) const {
    const auto h = [](const void* p) { return std::hash<const void*>()(p); };
    return h(k.x) ^ (h(k.out) * 0x9E3779B97F4A7C15ull) ^ (h(k.scales) * 0xC2B2AE3D27D4EB4Full) ^ size_t(k.device);
  }
};

/// Every tensor of the call is device memory of the current device. The driver is asked once per set of pointers
/// (three queries cost a warm call about as much as the rest of it), as a GEMM's plan is built once per set of
/// arguments.
void check_device_pointers(const QuantizeLaunch& launch, int device) {
  static BoundedCache<QuantizePointers, bool, QuantizePointersHash> checked;
  const QuantizePointers key{launch.args.x, launch.args.out, launch.args.scales, device};
  if (checked.find(key)) return;
  const char* where = function_name(launch.kind);
  check_device_pointer(launch.args.x, "x", device, where);
  check_device_pointer(launch.args.out, "out", device, where);
  check_device_pointer(launch.args.scales, "scales", device, where);
  checked.add(key, true);
}

/// A quantizer kernel as loaded in a context.
struct QuantizeKernel {
  CUfunction function = nullptr;
  int static_smem = 0;                          ///< the kernel's static shared memory
  const jit::DeviceInfo* device_info = nullptr;  ///< the context's device (the runtime keeps it for the process)
};

/// The quantizer kernels, compiled (or loaded from the cache) once per variant, their functions kept per context.
class QuantizeKernels {
 public:
  QuantizeKernel get(QuantizeKind kind, bool is_bf16, int device) {
    CUcontext ctx = nullptr;
    check_cu(driver().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
    const int variant = int(kind) * 2 + (is_bf16 ? 1 : 0);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const Entry& e : entries_)
        if (e.ctx == ctx && e.variant == variant) return e.kernel;
    }
    Context& context = Context::instance();
    context.check_hopper(device, function_name(kind));
    jit::KernelSpec spec;
    spec.header = kQuantizeHeader;
    spec.function = kernel_function(kind, is_bf16);
    spec.parameters = kQuantizeParameters;
    QuantizeKernel kernel;
    kernel.function = context.runtime().function(*context.runtime().binary(spec));
    check_cu(driver().cuFuncGetAttribute(&kernel.static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel.function),
             "cuFuncGetAttribute(static shared memory)");
    kernel.device_info = &context.runtime().device_info(device);
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back({ctx, variant, kernel});
    return kernel;
  }

  static std::string kernel_function(QuantizeKind kind, bool is_bf16) {
    return std::string("finegemm::device::") +
           (kind == QuantizeKind::kPerToken ? "per_token_cast_kernel<" : "per_block_cast_kernel<") +
           (is_bf16 ? "true>" : "false>");
  }

 private:
  struct Entry {
    CUcontext ctx;
    int variant;
    QuantizeKernel kernel;
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;  // a handful: 4 variants (kind x input type) per context
};

QuantizeKernels& quantize_kernels() {
  static QuantizeKernels kernels;
  return kernels;
}

void run(const QuantizeLaunch& launch, Stream stream) {
  if (launch.grid == 0) return;
  Context& ctx = Context::instance();
  const int device = ctx.runtime().current_device();
  check_device_pointers(launch, device);
  const QuantizeKernel kernel = quantize_kernels().get(launch.kind, launch.is_bf16, device);
  jit::LaunchShape shape;
  shape.grid_x = launch.grid;
  shape.block_x = launch.kind == QuantizeKind::kPerToken ? device::kPerTokenNumThreads : device::kPerBlockNumThreads;
  shape.pdl = ctx.pdl();
  if (launch.kind == QuantizeKind::kPerToken) {
    const jit::DeviceInfo& info = *kernel.device_info;
    const heuristics::SmSharedMemory sm_smem{info.smem_per_sm, info.reserved_smem_per_cta};
    shape.smem_bytes = unsigned(
        heuristics::quantizer_spread_smem_bytes(launch.grid, shape.pdl, info.num_sms, sm_smem, kernel.static_smem));
  }
  void* params[] = {const_cast<device::QuantizeArgs*>(&launch.args)};
  jit::launch_kernel(kernel.function, shape, reinterpret_cast<CUstream>(stream), params,
                     "cuLaunchKernelEx(fp8 quantizer)");
}

}  // namespace

void per_token_cast_to_fp8(const TensorView& x, const TensorView& out, const TensorView& scales, Stream stream) {
  run(validate(QuantizeKind::kPerToken, x, out, scales), stream);
}

void per_block_cast_to_fp8(const TensorView& x, const TensorView& out, const TensorView& scales, Stream stream) {
  run(validate(QuantizeKind::kPerBlock, x, out, scales), stream);
}

}  // namespace finegemm
