// Device memory and CUDA error helpers for the finegemm tools (CLI bench and GPU tests).
//
// Everything here uses the CUDA runtime (libcudart). Nothing runs at static-initialisation time, so a binary
// linking this library starts (and can list its tests) on a machine without a GPU or driver.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace finegemm::tools {
namespace detail {
// Throws std::runtime_error("<file>:<line>: CUDA error <name> (<description>) in `<expr>`"). Also clears the
// runtime's last-error slot so that a later cudaGetLastError() does not report the same (non-sticky) error again.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
}  // namespace detail
}  // namespace finegemm::tools

/// Evaluates a CUDA runtime call once; on failure throws std::runtime_error naming file:line, the expression and
/// cudaGetErrorName/cudaGetErrorString of the result.
#define FG_CUDA_CHECK(expr)                                                                 \
  do {                                                                                      \
    const cudaError_t fg_cuda_check_err_ = (expr);                                          \
    if (fg_cuda_check_err_ != cudaSuccess)                                                  \
      ::finegemm::tools::detail::throw_cuda_error(fg_cuda_check_err_, #expr, __FILE__, __LINE__); \
  } while (0)

namespace finegemm::tools {

/// RAII owner of one cudaMalloc allocation (256-byte aligned, as cudaMalloc guarantees). Move-only.
/// A zero-byte buffer holds no allocation and get() returns nullptr.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates `bytes` on the current device; throws std::runtime_error (with the size) on failure.
  /// The contents are uninitialised: poison them with fill_byte() when a test must see every element written.
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();

  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  void* get() { return ptr_; }
  const void* get() const { return ptr_; }
  template <class T>
  T* as() {
    return static_cast<T*>(ptr_);
  }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(ptr_);
  }
  size_t size() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }

  /// Frees the allocation now (errors from cudaFree are ignored, as in the destructor).
  void reset() noexcept;

  /// Host -> device copy of `bytes` (<= size()) to the start of the buffer. Synchronous: the data is on the device
  /// when it returns (goes through the legacy default stream, so it is ordered after work already queued on
  /// blocking streams; work on non-blocking streams must be synchronized by the caller).
  void upload(const void* host, size_t bytes);
  /// Device -> host copy of the first `bytes` (<= size()). Synchronous, same stream rules as upload(): sync a
  /// non-blocking stream that wrote the buffer before calling it.
  void download(void* host, size_t bytes) const;

  template <class T>
  void upload(const std::vector<T>& host) {
    upload(host.data(), host.size() * sizeof(T));
  }
  /// Downloads the first `count` elements of type T (default: as many as fit in size()).
  template <class T>
  std::vector<T> download_as(size_t count = static_cast<size_t>(-1)) const {
    if (count == static_cast<size_t>(-1)) count = bytes_ / sizeof(T);
    std::vector<T> out(count);
    download(out.data(), count * sizeof(T));
    return out;
  }
  /// Allocates a buffer of exactly host.size()*sizeof(T) bytes and uploads `host` into it.
  template <class T>
  static DeviceBuffer from_host(const std::vector<T>& host) {
    DeviceBuffer b(host.size() * sizeof(T));
    b.upload(host);
    return b;
  }

  /// Asynchronously sets every byte of the buffer to `v` on stream `s` (cudaMemsetAsync). Poison tip: 0xFF makes
  /// every bf16, fp16 and fp32 element a NaN (and every e4m3 byte the e4m3 NaN), so unwritten outputs are caught.
  void fill_byte(uint8_t v, cudaStream_t s = nullptr);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// RAII CUDA stream (cudaStreamCreateWithFlags). The default flags create a *blocking* stream, which the legacy
/// default stream (used by DeviceBuffer::upload/download) synchronizes with. Move-only.
class CudaStream {
 public:
  explicit CudaStream(unsigned flags = cudaStreamDefault);
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }
  /// cudaStreamSynchronize; throws with `context` in the message if the stream reports an error.
  void sync(const char* context = nullptr) const;

 private:
  cudaStream_t s_ = nullptr;
};

/// cudaStreamSynchronize(s) followed by a check of cudaGetLastError(); throws std::runtime_error naming `context`
/// (e.g. "after finegemm::gemm M=64 N=7168 K=7168") so that an asynchronous kernel fault is reported where it is found.
void sync_and_check(cudaStream_t s, const std::string& context);

/// True iff a CUDA device of compute capability 9.0 (Hopper: H100/H800/H200/H20) is visible. Otherwise false, and
/// `why_not` (when given) says why: no driver / driver too old for this runtime, no visible device, or which
/// devices were found and their architectures. Never throws and leaves no pending CUDA error behind.
bool has_hopper_gpu(std::string* why_not = nullptr);

/// Ordinal of the first visible compute-capability-9.0 device, or -1 (then `why_not` says why, as above).
int find_hopper_device(std::string* why_not = nullptr);

}  // namespace finegemm::tools
