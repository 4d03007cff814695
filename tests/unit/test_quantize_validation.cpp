// Host-side validation of the FP8 quantizers: each bad input gets an Error naming what to change, before anything
// touches the GPU. Valid inputs get past validation (and then need a GPU: on this machine they fail with kCuda, or,
// with a driver, with "not device memory" for the fake addresses used here).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "unit/expect_error.hpp"

using finegemm::DType;
using finegemm::Error;
using finegemm::TensorView;

namespace {

// Fake but aligned addresses: validation never dereferences them.
void* addr(uintptr_t x) { return reinterpret_cast<void*>(x); }

struct PerToken {
  TensorView x = TensorView::contiguous(addr(0x10000), DType::kBFloat16, {65, 576});
  TensorView out = TensorView::contiguous(addr(0x20000), DType::kFloat8E4M3, {65, 576});
  TensorView scales = TensorView::strided(addr(0x30000), DType::kFloat32, {65, 5}, {1, 68});
  void call() const { finegemm::per_token_cast_to_fp8(x, out, scales); }
};

struct PerBlock {
  TensorView x = TensorView::contiguous(addr(0x10000), DType::kFloat32, {3, 200, 256});
  TensorView out = TensorView::contiguous(addr(0x20000), DType::kFloat8E4M3, {3, 200, 256});
  TensorView scales = TensorView::contiguous(addr(0x30000), DType::kFloat32, {3, 2, 2});
  void call() const { finegemm::per_block_cast_to_fp8(x, out, scales); }
};

using finegemm::test::expect_error;

/// A valid call passes validation: it fails only where it needs the GPU (no driver, or fake addresses).
void expect_valid(const std::function<void()>& f, const char* name) {
  try {
    f();
    ADD_FAILURE() << name << ": a call on fake addresses cannot succeed";
  } catch (const Error& e) {
    const bool needs_gpu = e.kind() == Error::Kind::kCuda ||
                           std::string(e.what()).find("not device memory") != std::string::npos;
    EXPECT_TRUE(needs_gpu) << name << ": rejected by validation: " << e.what();
  }
}

}  // namespace

TEST(QuantizeValidation, ValidLayoutsPassValidation) {
  expect_valid([] { PerToken().call(); }, "per-token, MN-major scales");
  expect_valid([] { PerToken p; p.scales = TensorView::contiguous(addr(0x30000), DType::kFloat32, {65, 5}); p.call(); },
               "per-token, K-major scales");
  expect_valid([] {
    PerToken p;
    p.x = TensorView::contiguous(addr(0x10000), DType::kFloat32, {4, 65, 576});
    p.out = TensorView::contiguous(addr(0x20000), DType::kFloat8E4M3, {4, 65, 576});
    p.scales = TensorView::strided(addr(0x30000), DType::kFloat32, {4, 65, 5}, {5 * 68, 1, 68});
    p.call();
  }, "per-token, grouped, MN-major scales");
  expect_valid([] { PerBlock().call(); }, "per-block, grouped");
  expect_valid([] {
    PerBlock p;
    p.x = TensorView::strided(addr(0x10000), DType::kBFloat16, {200, 256}, {512, 1});  // a row slice of a wider matrix
    p.out = TensorView::contiguous(addr(0x20000), DType::kFloat8E4M3, {200, 256});
    p.scales = TensorView::contiguous(addr(0x30000), DType::kFloat32, {2, 2});
    p.call();
  }, "per-block, strided input");
}

TEST(QuantizeValidation, EmptyInputsAreNoOps) {
  PerToken p;
  p.x.shape[0] = p.out.shape[0] = p.scales.shape[0] = 0;
  EXPECT_NO_THROW(p.call());
  PerBlock b;
  b.x.shape[0] = b.out.shape[0] = b.scales.shape[0] = 0;
  EXPECT_NO_THROW(b.call());
}

TEST(QuantizeValidation, BadInputs) {
  using K = Error::Kind;
  struct Row {
    const char* name;
    std::function<void()> call;
    K kind;
    const char* needle;
  };
  const std::vector<Row> rows = {
      {"x dtype", [] { PerToken p; p.x.dtype = DType::kFloat8E4M3; p.call(); }, K::kTypeMismatch, "x must be bfloat16 or float32"},
      {"out dtype", [] { PerToken p; p.out.dtype = DType::kBFloat16; p.call(); }, K::kTypeMismatch, "out must be float8_e4m3fn"},
      {"scales dtype", [] { PerBlock p; p.scales.dtype = DType::kInt32; p.call(); }, K::kTypeMismatch, "scales must be float32"},
      {"x rank", [] { PerToken p; p.x.rank = p.out.rank = p.scales.rank = 1; p.call(); }, K::kInvalidArgument, "rank 2"},
      {"out shape", [] { PerToken p; p.out.shape[1] = 512; p.call(); }, K::kInvalidArgument, "out must have the shape of x"},
      {"per-token scales shape", [] { PerToken p; p.scales.shape[1] = 4; p.call(); }, K::kInvalidArgument, "scales must have shape [M, ceil(K/128)]"},
      {"per-block scales shape", [] { PerBlock p; p.scales.shape[1] = 1; p.call(); }, K::kInvalidArgument, "scales must have shape [G, ceil(N/128), ceil(K/128)]"},
      {"K not /8", [] {
         PerToken p;
         p.x.shape[1] = p.out.shape[1] = 580;
         p.x.strides[0] = p.out.strides[0] = 580;
         p.call();
       }, K::kInvalidArgument, "K must be a multiple of 8"},
      {"x not K-contiguous", [] { PerToken p; p.x.strides[1] = 2; p.call(); }, K::kInvalidArgument, "x must be K-contiguous"},
      {"x row stride", [] { PerToken p; p.x.strides[0] = 580; p.call(); }, K::kInvalidArgument, "x stride 0 must be a multiple of 16 bytes"},
      {"out row stride", [] { PerToken p; p.out.strides[0] = 580; p.call(); }, K::kInvalidArgument, "out stride 0 must be a multiple of 8 bytes"},
      {"out overlapping", [] { PerToken p; p.out.strides[0] = 8; p.call(); }, K::kInvalidArgument, "out has overlapping rows"},
      {"scales overlapping", [] { PerToken p; p.scales.strides[1] = 32; p.call(); }, K::kInvalidArgument, "scales has overlapping elements"},
      {"x misaligned", [] { PerToken p; p.x.data = addr(0x10008); p.call(); }, K::kInvalidArgument, "x must be 16-byte aligned"},
      {"out misaligned", [] { PerToken p; p.out.data = addr(0x20004); p.call(); }, K::kInvalidArgument, "out must be 8-byte aligned"},
      {"negative stride", [] { PerBlock p; p.x.strides[0] = -1; p.call(); }, K::kInvalidArgument, "invalid size or stride"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    expect_error(row.call, row.kind, row.needle);
  }
}
