// Types and helpers shared by device code and by host code that includes device headers (the scheduler).
// Compiles under NVRTC without any standard header.
#pragma once

#if defined(__CUDACC_RTC__)
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
#else
#include <cstdint>
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FG_HOST_DEVICE __host__ __device__ __forceinline__
#define FG_DEVICE __device__ __forceinline__
#else
#define FG_HOST_DEVICE inline
#endif

namespace finegemm::device {

/// Same values as finegemm::GemmKind on the host.
enum class GemmKind : int {
  kNormal = 0,
  kGroupedContiguous = 1,
  kGroupedMasked = 2,
  kGroupedContiguousPsum = 3,
  kGroupedK = 4,  ///< K-grouped weight gradient: per group D[g] += A_g x B_g^T, K_g read on the device (K not compiled in)
};

/// Bits of the device error word (same values as finegemm::DeviceErrorFlag).
enum : uint32_t {
  kErrorExpertIdOutOfRange = 1u << 0,
  kErrorMaskedMTooLarge = 1u << 1,
  kErrorExpertIdInconsistent = 1u << 2,
  kErrorGroupEndInvalid = 1u << 3,
  kErrorGroupKInvalid = 1u << 4,
};

template <typename T>
FG_HOST_DEVICE constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

template <typename T>
FG_HOST_DEVICE constexpr T align_up(T a, T b) { return ceil_div(a, b) * b; }

template <typename T>
FG_HOST_DEVICE constexpr T min_of(T a, T b) { return a < b ? a : b; }

template <typename T>
FG_HOST_DEVICE constexpr T max_of(T a, T b) { return a > b ? a : b; }

// A minimal std::integer_sequence (NVRTC has no <utility>).
template <int... Is>
struct IndexSequence {};

namespace detail {
template <int N, int... Is>
struct MakeIndexSequence : MakeIndexSequence<N - 1, N - 1, Is...> {};
template <int... Is>
struct MakeIndexSequence<0, Is...> {
  using type = IndexSequence<Is...>;
};
}  // namespace detail

template <int N>
using MakeIndexSequence = typename detail::MakeIndexSequence<N>::type;

/// A CUtensorMap, passed by value inside __grid_constant__ kernel arguments.
struct alignas(64) TmaDescriptor {
  uint64_t opaque[16];
};

}  // namespace finegemm::device
