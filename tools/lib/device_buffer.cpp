#include "lib/device_buffer.hpp"

#include <sstream>
#include <stdexcept>
#include <utility>

namespace finegemm::tools {
namespace detail {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  // Clear the last-error slot (a sticky error stays sticky regardless; a non-sticky one must not be reported twice).
  (void)cudaGetLastError();
  std::ostringstream os;
  os << file << ":" << line << ": CUDA error " << cudaGetErrorName(err) << " (" << static_cast<int>(err) << ": "
     << cudaGetErrorString(err) << ") in `" << expr << "`";
  throw std::runtime_error(os.str());
}

}  // namespace detail

namespace {
std::string cuda_error_text(cudaError_t err) {
  std::ostringstream os;
  os << cudaGetErrorName(err) << " (" << static_cast<int>(err) << ": " << cudaGetErrorString(err) << ")";
  return os.str();
}
}  // namespace

// ---- DeviceBuffer ------------------------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(size_t bytes) {
  if (bytes == 0) return;
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    std::ostringstream os;
    os << "DeviceBuffer: cudaMalloc of " << bytes << " bytes (" << (static_cast<double>(bytes) / (1 << 20))
       << " MiB) failed: " << cuda_error_text(err);
    throw std::runtime_error(os.str());
  }
  ptr_ = p;
  bytes_ = bytes;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() noexcept {
  if (ptr_ != nullptr) {
    // cudaFree can fail with a sticky error left by an earlier faulting kernel, or with cudaErrorCudartUnloading at
    // process exit: nothing useful can be done in a destructor. Clear a non-sticky error so it is not misattributed.
    if (cudaFree(ptr_) != cudaSuccess) (void)cudaGetLastError();
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  if (bytes > bytes_) {
    std::ostringstream os;
    os << "DeviceBuffer::upload: " << bytes << " bytes do not fit in a buffer of " << bytes_ << " bytes";
    throw std::invalid_argument(os.str());
  }
  if (bytes == 0) return;
  if (host == nullptr) throw std::invalid_argument("DeviceBuffer::upload: null host pointer");
  FG_CUDA_CHECK(cudaMemcpyAsync(ptr_, host, bytes, cudaMemcpyHostToDevice, cudaStreamLegacy));
  FG_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes > bytes_) {
    std::ostringstream os;
    os << "DeviceBuffer::download: " << bytes << " bytes requested from a buffer of " << bytes_ << " bytes";
    throw std::invalid_argument(os.str());
  }
  if (bytes == 0) return;
  if (host == nullptr) throw std::invalid_argument("DeviceBuffer::download: null host pointer");
  FG_CUDA_CHECK(cudaMemcpyAsync(host, ptr_, bytes, cudaMemcpyDeviceToHost, cudaStreamLegacy));
  FG_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void DeviceBuffer::fill_byte(uint8_t v, cudaStream_t s) {
  if (bytes_ == 0) return;
  FG_CUDA_CHECK(cudaMemsetAsync(ptr_, static_cast<int>(v), bytes_, s));
}

// ---- CudaStream --------------------------------------------------------------------------------------------------

CudaStream::CudaStream(unsigned flags) { FG_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, flags)); }

CudaStream::~CudaStream() {
  if (s_ != nullptr && cudaStreamDestroy(s_) != cudaSuccess) (void)cudaGetLastError();
}

CudaStream::CudaStream(CudaStream&& other) noexcept : s_(std::exchange(other.s_, nullptr)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (s_ != nullptr && cudaStreamDestroy(s_) != cudaSuccess) (void)cudaGetLastError();
    s_ = std::exchange(other.s_, nullptr);
  }
  return *this;
}

void CudaStream::sync(const char* context) const {
  sync_and_check(s_, context != nullptr ? std::string(context) : std::string("CudaStream::sync"));
}

void sync_and_check(cudaStream_t s, const std::string& context) {
  cudaError_t err = cudaStreamSynchronize(s);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error("CUDA error " + cuda_error_text(err) + " at stream synchronize, " + context);
  }
}

// ---- Device discovery --------------------------------------------------------------------------------------------

int find_hopper_device(std::string* why_not) {
  auto say = [&](const std::string& s) {
    if (why_not != nullptr) *why_not = s;
  };
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    std::string text = "cudaGetDeviceCount failed: " + cuda_error_text(err);
    if (err == cudaErrorInsufficientDriver)
      text += "; the NVIDIA driver is missing or older than this CUDA runtime";
    else if (err == cudaErrorNoDevice)
      text += "; no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
    say(text);
    return -1;
  }
  if (count <= 0) {
    say("no CUDA device is visible");
    return -1;
  }
  std::ostringstream found;
  for (int dev = 0; dev < count; ++dev) {
    int major = 0, minor = 0;
    const cudaError_t e1 = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    const cudaError_t e2 = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (e1 != cudaSuccess || e2 != cudaSuccess) {
      (void)cudaGetLastError();
      found << (dev ? ", " : "") << dev << ": <attribute query failed: "
            << cuda_error_text(e1 != cudaSuccess ? e1 : e2) << ">";
      continue;
    }
    if (major == 9 && minor == 0) return dev;
    cudaDeviceProp prop{};
    std::string name = "?";
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
      name = prop.name;
    else
      (void)cudaGetLastError();
    found << (dev ? ", " : "") << dev << ": " << name << " (sm_" << major << minor << ")";
  }
  say("no compute-capability-9.0 (Hopper) device among " + std::to_string(count) + " visible: " + found.str());
  return -1;
}

bool has_hopper_gpu(std::string* why_not) {
  try {
    return find_hopper_device(why_not) >= 0;
  } catch (const std::exception& e) {  // only std::bad_alloc from string building could get here
    if (why_not != nullptr) *why_not = e.what();
    return false;
  }
}

}  // namespace finegemm::tools
