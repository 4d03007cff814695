// Host-side input validation: each bad input gets an Error naming what to change, before anything touches the GPU.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "api/validate.hpp"
#include "finegemm/finegemm.hpp"
#include "unit/expect_error.hpp"

using finegemm::DType;
using finegemm::Error;
using finegemm::TensorView;

namespace {

// Fake but aligned addresses: validation never dereferences them.
void* addr(uintptr_t x) { return reinterpret_cast<void*>(x); }

struct Dense {
  int64_t m = 64, n = 256, k = 512;
  TensorView a = TensorView::contiguous(addr(0x10000), DType::kFloat8E4M3, {64, 512});
  TensorView sa = TensorView::strided(addr(0x20000), DType::kFloat32, {64, 4}, {1, 64});
  TensorView b = TensorView::contiguous(addr(0x30000), DType::kFloat8E4M3, {256, 512});
  TensorView sb = TensorView::contiguous(addr(0x40000), DType::kFloat32, {2, 4});
  TensorView d = TensorView::contiguous(addr(0x50000), DType::kBFloat16, {64, 256});
  void call() const { finegemm::gemm_fp8_fp8_bf16_nt(a, sa, b, sb, d); }
};

/// The weight-gradient call: 1x128 SB [N, KB] MN-major (strides {1, N}), fp32 D, C = D.
struct Wgrad {
  TensorView a = TensorView::contiguous(addr(0x10000), DType::kFloat8E4M3, {64, 640});
  TensorView sa = TensorView::strided(addr(0x20000), DType::kFloat32, {64, 5}, {1, 64});
  TensorView b = TensorView::contiguous(addr(0x30000), DType::kFloat8E4M3, {256, 640});
  TensorView sb = TensorView::strided(addr(0x40000), DType::kFloat32, {256, 5}, {1, 256});
  TensorView d = TensorView::contiguous(addr(0x100000), DType::kFloat32, {64, 256});
  TensorView c = d;
  bool with_c = true;
  void call() const {
    finegemm::gemm_fp8_fp8_nt(a, sa, b, sb, d, with_c ? std::optional<TensorView>(c) : std::nullopt);
  }
};

using finegemm::test::expect_error;

}  // namespace

TEST(Validation, WgradBadInputs) {
  struct Row {
    const char* name;
    std::function<void(Wgrad&)> mutate;
    Error::Kind kind;
    const char* needle;
  };
  const Error::Kind bad = Error::Kind::kInvalidArgument;
  const std::vector<Row> rows = {
      {"C with a bf16 D", [](Wgrad& p) { p.d.dtype = DType::kBFloat16; p.c = p.d; }, bad,
       "C (D = C + A x B^T) needs a float32 D"},
      {"C on D's memory, another stride", [](Wgrad& p) { p.c.strides[0] = 260; }, bad,
       "C is D's memory with another row stride"},
      {"C overlapping D", [](Wgrad& p) { p.c.data = addr(0x100000 + 1024); }, bad, "C overlaps D without being D"},
      {"C bf16", [](Wgrad& p) { p.c.dtype = DType::kBFloat16; }, Error::Kind::kTypeMismatch, "C must be float32"},
      {"C shape", [](Wgrad& p) { p.c.shape[1] = 248; }, bad, "C must have shape [M, N]"},
      {"C row stride", [](Wgrad& p) { p.c.data = addr(0x200000); p.c.strides[0] = 258; }, bad,
       "C row stride must be >= N and a multiple of 4 elements"},
      {"D int32", [](Wgrad& p) { p.d.dtype = DType::kInt32; p.with_c = false; }, bad, "D must be bfloat16 or float32"},
      {"SB K-major per row", [](Wgrad& p) { p.sb.strides[0] = 5; p.sb.strides[1] = 1; }, bad,
       "1x128 SB must be MN-major and TMA-aligned"},
      {"SB N_pad not a multiple of 4", [](Wgrad& p) { p.sb.strides[1] = 258; }, bad,
       "1x128 SB must be MN-major and TMA-aligned"},
      {"SB rows neither N nor NB", [](Wgrad& p) { p.sb.shape[0] = 264; }, bad,
       "SB must be [ceil(N/128), ceil(K/128)] (128x128 blocks) or [N, ceil(K/128)] (1x128 blocks)"},
      {"SB K blocks", [](Wgrad& p) { p.sb.shape[1] = 4; }, bad, "SB must have shape [N, ceil(K/128)] (1x128 blocks"},
      {"SB misaligned", [](Wgrad& p) { p.sb.data = addr(0x40004); }, bad, "SB must be 16-byte aligned"},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.name);
    Wgrad p;
    row.mutate(p);
    expect_error([&] { p.call(); }, row.kind, row.needle);
  }
  // The valid forms (C = D, a separate C, no C, a bf16 D without C) pass validation: without a GPU they fail at the
  // device step, never before.
  for (int form = 0; form < 4; ++form) {
    Wgrad p;
    if (form == 1) p.c.data = addr(0x200000);
    if (form >= 2) p.with_c = false;
    if (form == 3) p.d.dtype = DType::kBFloat16;
    try {
      p.call();
    } catch (const Error& e) {
      EXPECT_TRUE(e.kind() == Error::Kind::kCuda ||
                  std::string(e.what()).find("is not device memory") != std::string::npos)
          << "form " << form << ": " << e.what();
    }
  }
}

TEST(Validation, DenseBadInputs) {
  struct Row {
    const char* name;
    std::function<void(Dense&)> mutate;
    Error::Kind kind;
    const char* needle;
  };
  const std::vector<Row> rows = {
      {"A dtype", [](Dense& p) { p.a.dtype = DType::kBFloat16; }, Error::Kind::kTypeMismatch, "A must be float8_e4m3fn"},
      {"B dtype", [](Dense& p) { p.b.dtype = DType::kFloat32; }, Error::Kind::kTypeMismatch, "B must be float8_e4m3fn"},
      {"SA dtype", [](Dense& p) { p.sa.dtype = DType::kBFloat16; }, Error::Kind::kTypeMismatch, "SA must be float32"},
      {"D dtype", [](Dense& p) { p.d.dtype = DType::kFloat32; }, Error::Kind::kTypeMismatch, "D must be bfloat16"},
      {"A rank", [](Dense& p) { p.a.rank = 3; }, Error::Kind::kInvalidArgument, "A must have rank 2"},
      {"K mismatch", [](Dense& p) { p.b.shape[1] = 256; }, Error::Kind::kInvalidArgument, "share K"},
      {"N not /8", [](Dense& p) { p.b.shape[0] = 250; p.d.shape[1] = 250; }, Error::Kind::kInvalidArgument, "N must be a positive multiple of 8"},
      {"K not /16", [](Dense& p) { p.a.shape[1] = 520; p.b.shape[1] = 520; }, Error::Kind::kInvalidArgument, "K must be a positive multiple of 16"},
      {"SA too small", [](Dense& p) { p.sa.shape[1] = 3; }, Error::Kind::kInvalidArgument, "SA must have shape"},
      {"SB too small", [](Dense& p) { p.sb.shape[0] = 1; }, Error::Kind::kInvalidArgument, "SB must have shape"},
      {"D shape", [](Dense& p) { p.d.shape[0] = 32; }, Error::Kind::kInvalidArgument, "D must have shape"},
      {"A not contiguous in K", [](Dense& p) { p.a.strides[1] = 2; }, Error::Kind::kInvalidArgument, "K-contiguous"},
      {"A row stride not 16B", [](Dense& p) { p.a.strides[0] = 520; }, Error::Kind::kInvalidArgument, "multiple of 16 bytes"},
      {"SA odd layout", [](Dense& p) { p.sa.strides[0] = 2; p.sa.strides[1] = 2; }, Error::Kind::kInvalidArgument, "SA layout not supported"},
      {"SA MN stride < M", [](Dense& p) { p.sa.strides[1] = 32; }, Error::Kind::kInvalidArgument, "SA layout"},
      {"D row stride", [](Dense& p) { p.d.strides[0] = 260; }, Error::Kind::kInvalidArgument, "multiple of 8"},
      {"A misaligned", [](Dense& p) { p.a.data = addr(0x10008); }, Error::Kind::kInvalidArgument, "A must be 16-byte aligned"},
      {"D misaligned", [](Dense& p) { p.d.data = addr(0x50004); }, Error::Kind::kInvalidArgument, "D must be 16-byte aligned"},
      {"A null", [](Dense& p) { p.a.data = nullptr; }, Error::Kind::kInvalidArgument, "A is a null pointer"},
      {"negative M", [](Dense& p) { p.a.shape[0] = -1; }, Error::Kind::kInvalidArgument, "invalid size"},
      {"absurd M", [](Dense& p) { p.a.shape[0] = int64_t(1) << 40; }, Error::Kind::kInvalidArgument, "invalid size"},
      {"SB not contiguous", [](Dense& p) { p.sb.strides[0] = 8; }, Error::Kind::kInvalidArgument, "SB must be contiguous"},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.name);
    Dense p;
    row.mutate(p);
    expect_error([&] { p.call(); }, row.kind, row.needle);
  }
}

TEST(Validation, ValidDenseInputReachesTheDeviceStep) {
  // Without a GPU the valid call must fail cleanly at the driver, never crash.
  Dense p;
  try {
    p.call();
  } catch (const Error& e) {
    EXPECT_TRUE(e.kind() == Error::Kind::kCuda || e.kind() == Error::Kind::kInvalidArgument) << e.what();
  }
}

TEST(Validation, ZeroRowsIsANoOp) {
  Dense p;
  p.a.shape[0] = 0;
  p.sa.shape[0] = 0;
  p.d.shape[0] = 0;
  EXPECT_NO_THROW(p.call());
}

TEST(Validation, GroupedBadInputs) {
  const int64_t g = 4, m_max = 64, n = 256, k = 512;
  TensorView a = TensorView::contiguous(addr(0x10000), DType::kFloat8E4M3, {g, m_max, k});
  TensorView sa = TensorView::strided(addr(0x20000), DType::kFloat32, {g, m_max, 4}, {4 * 64, 1, 64});
  TensorView b = TensorView::contiguous(addr(0x30000), DType::kFloat8E4M3, {g, n, k});
  TensorView sb = TensorView::contiguous(addr(0x40000), DType::kFloat32, {g, 2, 4});
  TensorView d = TensorView::contiguous(addr(0x50000), DType::kBFloat16, {g, m_max, n});
  TensorView masked = TensorView::contiguous(addr(0x60000), DType::kInt32, {g});
  expect_error([&] { finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_masked(a, sa, b, sb, d, masked, 0); },
               Error::Kind::kInvalidArgument, "expected_m must be > 0");
  TensorView masked_bad = masked;
  masked_bad.dtype = DType::kFloat32;
  expect_error([&] { finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_masked(a, sa, b, sb, d, masked_bad, 32); },
               Error::Kind::kTypeMismatch, "masked_m must be int32");
  TensorView masked_short = masked;
  masked_short.shape[0] = 3;
  expect_error([&] { finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_masked(a, sa, b, sb, d, masked_short, 32); },
               Error::Kind::kInvalidArgument, "masked_m must be a contiguous int32 [G]");
  TensorView sb_bad = sb;
  sb_bad.shape[0] = 2;
  expect_error([&] { finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_masked(a, sa, b, sb_bad, d, masked, 32); },
               Error::Kind::kInvalidArgument, "SB must have shape");

  TensorView a2 = TensorView::contiguous(addr(0x10000), DType::kFloat8E4M3, {256, k});
  TensorView sa2 = TensorView::contiguous(addr(0x20000), DType::kFloat32, {256, 4});
  TensorView d2 = TensorView::contiguous(addr(0x50000), DType::kBFloat16, {256, n});
  TensorView idx = TensorView::contiguous(addr(0x60000), DType::kInt32, {255});
  expect_error([&] { finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a2, sa2, b, sb, d2, idx); },
               Error::Kind::kInvalidArgument, "m_indices must be a contiguous int32 [M_sum]");
  TensorView b_strided = b;
  b_strided.strides[0] = n * k * 2;
  idx.shape[0] = 256;
  expect_error([&] { finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a2, sa2, b_strided, sb, d2, idx); },
               Error::Kind::kInvalidArgument, "B [G, N, K] must be contiguous");
}

// Masked activation scales laid out [G, T, KB] with strides {T*KB, 1, T} (expert, token, K block: element (g, t, kb) at
// g*T*KB + kb*T + t), as MoE dispatch and fused activation-quantization kernels write them: finegemm's MN-major layout
// with M_pad = T.
struct Masked {
  int64_t g = 4, t = 64, n = 256, k = 512;
  TensorView a, sa, b, sb, d, masked_m;
  explicit Masked(int64_t tokens, int64_t k_ = 512) : t(tokens), k(k_) {
    const int64_t kb = (k + 127) / 128;
    a = TensorView::contiguous(addr(0x10000), DType::kFloat8E4M3, {g, t, k});
    sa = TensorView::strided(addr(0x20000), DType::kFloat32, {g, t, kb}, {t * kb, 1, t});
    b = TensorView::contiguous(addr(0x30000), DType::kFloat8E4M3, {g, n, k});
    sb = TensorView::contiguous(addr(0x40000), DType::kFloat32, {g, 2, kb});
    d = TensorView::contiguous(addr(0x50000), DType::kBFloat16, {g, t, n});
    masked_m = TensorView::contiguous(addr(0x60000), DType::kInt32, {g});
  }
  finegemm::GemmCall validate() const { return finegemm::validate_masked(a, sa, b, sb, d, masked_m, 16); }
};

TEST(Validation, MaskedScalesExpertTokenBlockAreMnMajor) {
  for (const int64_t tokens : {4, 64, 256, 1028}) {
    SCOPED_TRACE(tokens);
    const finegemm::GemmCall c = Masked(tokens).validate();
    EXPECT_FALSE(c.sa_k_major);
    EXPECT_EQ(c.ld_sa, tokens);  // M_pad = T
    EXPECT_EQ(c.a_rows, 4 * tokens);
  }
}

TEST(Validation, MaskedScalesWithTokensNotAMultipleOf4NameTheTmaRule) {
  for (const int64_t tokens : {6, 65, 129}) {
    SCOPED_TRACE(tokens);
    const Masked p(tokens);
    expect_error([&] { p.validate(); }, Error::Kind::kInvalidArgument,
                 "K-block stride M_pad=" + std::to_string(tokens) + " is not a multiple of 4");
    expect_error([&] { p.validate(); }, Error::Kind::kInvalidArgument, "M_max % 4 == 0");
  }
  // The same rule for the dense GEMM's [M, KB] scales with strides {1, M}.
  Dense dense;
  dense.a.shape[0] = dense.sa.shape[0] = dense.d.shape[0] = 63;
  dense.sa.strides[1] = 63;
  expect_error([&] { dense.call(); }, Error::Kind::kInvalidArgument, "K-block stride M_pad=63 is not a multiple of 4");
}

TEST(Validation, SizeOneDimensionsDoNotDecideTheScaleLayout) {
  // One token per expert: strides {KB, 1, 1} address exactly the K-major [G, 1, KB] tensor.
  const finegemm::GemmCall one_token = Masked(1).validate();
  EXPECT_TRUE(one_token.sa_k_major);
  EXPECT_EQ(one_token.ld_sa, 4);
  // One K block (K <= 128): strides {T, 1, T} address a K-major [G, T, 1] tensor whatever T is.
  const finegemm::GemmCall one_block = Masked(6, 128).validate();
  EXPECT_TRUE(one_block.sa_k_major);
  EXPECT_EQ(one_block.ld_sa, 1);
  // Dense, one row: [1, KB] with strides {1, 1} (a transposed [KB, 1] view) is K-major.
  Dense dense;
  dense.a.shape[0] = dense.sa.shape[0] = dense.d.shape[0] = 1;
  dense.sa.strides[0] = dense.sa.strides[1] = 1;
  const finegemm::GemmCall row = finegemm::validate_normal(dense.a, dense.sa, dense.b, dense.sb, dense.d);
  EXPECT_TRUE(row.sa_k_major);
  EXPECT_EQ(row.ld_sa, 4);
  // A real stride still counts: K-major rows closer than KB apart overlap.
  Masked overlapping(8);
  overlapping.sa.strides[0] = 8 * 2;
  overlapping.sa.strides[1] = 2;
  overlapping.sa.strides[2] = 1;
  expect_error([&] { overlapping.validate(); }, Error::Kind::kInvalidArgument, "SA layout not supported");
}

TEST(Validation, IsSupportedAnswersWithoutThrowing) {
  finegemm::Problem p;
  p.m = 64;
  p.n = 1001;
  p.k = 7168;
  std::string reason;
  EXPECT_FALSE(finegemm::is_supported(p, &reason));
  EXPECT_NE(reason.find("N must be a positive multiple of 8"), std::string::npos) << reason;
  p.n = 1008;
  EXPECT_TRUE(finegemm::is_supported(p, &reason)) << reason;
  p.k = 100;
  EXPECT_FALSE(finegemm::is_supported(p, &reason));
}

TEST(Validation, TmaAlignedSize) {
  EXPECT_EQ(finegemm::get_tma_aligned_size(1, 4), 4);
  EXPECT_EQ(finegemm::get_tma_aligned_size(64, 4), 64);
  EXPECT_EQ(finegemm::get_tma_aligned_size(65, 4), 68);
  EXPECT_EQ(finegemm::get_tma_aligned_size(7, 2), 8);
  EXPECT_EQ(finegemm::get_m_alignment_for_contiguous_layout(), 128);
}

namespace {

/// A psum call: 4 groups, M_sum = 512 rows.
struct Psum {
  int64_t g = 4, rows = 512, n = 256, k = 512;
  TensorView a = TensorView::contiguous(addr(0x10000), DType::kFloat8E4M3, {512, 512});
  TensorView sa = TensorView::strided(addr(0x20000), DType::kFloat32, {512, 4}, {1, 512});
  TensorView b = TensorView::contiguous(addr(0x30000), DType::kFloat8E4M3, {4, 256, 512});
  TensorView sb = TensorView::contiguous(addr(0x40000), DType::kFloat32, {4, 2, 4});
  TensorView d = TensorView::contiguous(addr(0x50000), DType::kBFloat16, {512, 256});
  TensorView ends = TensorView::contiguous(addr(0x60000), DType::kInt32, {4});
  int expected_m = 100;
  int m_alignment = 128;
  void call() const {
    finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(a, sa, b, sb, d, ends, expected_m, nullptr, m_alignment);
  }
};

}  // namespace

TEST(Validation, PsumBadInputs) {
  struct Row {
    const char* name;
    std::function<void(Psum&)> mutate;
    Error::Kind kind;
    const char* needle;
  };
  const std::vector<Row> rows = {
      {"ends dtype", [](Psum& p) { p.ends.dtype = DType::kFloat32; }, Error::Kind::kTypeMismatch,
       "group_ends must be int32"},
      {"ends rank", [](Psum& p) { p.ends = TensorView::contiguous(addr(0x60000), DType::kInt32, {4, 1}); },
       Error::Kind::kInvalidArgument, "group_ends must have rank 1"},
      {"ends shape", [](Psum& p) { p.ends.shape[0] = 3; }, Error::Kind::kInvalidArgument,
       "group_ends must be a contiguous int32 [G] holding the end row of each of B's G=4 groups"},
      {"ends as m_indices", [](Psum& p) { p.ends.shape[0] = 512; }, Error::Kind::kInvalidArgument,
       "group_ends must be a contiguous int32 [G]"},
      {"ends strided", [](Psum& p) { p.ends.strides[0] = 2; }, Error::Kind::kInvalidArgument,
       "group_ends must be a contiguous int32 [G]"},
      {"ends misaligned", [](Psum& p) { p.ends.data = addr(0x60002); }, Error::Kind::kInvalidArgument,
       "group_ends must be 4-byte aligned"},
      {"ends null", [](Psum& p) { p.ends.data = nullptr; }, Error::Kind::kInvalidArgument,
       "group_ends is a null pointer"},
      {"negative expected_m", [](Psum& p) { p.expected_m = -1; }, Error::Kind::kInvalidArgument,
       "expected_m must be >= 0"},
      {"SB groups", [](Psum& p) { p.sb.shape[0] = 3; }, Error::Kind::kInvalidArgument, "SB must have shape"},
      {"A dtype", [](Psum& p) { p.a.dtype = DType::kBFloat16; }, Error::Kind::kTypeMismatch,
       "A must be float8_e4m3fn"},
      {"A 3D", [](Psum& p) { p.a = TensorView::contiguous(addr(0x10000), DType::kFloat8E4M3, {4, 128, 512}); },
       Error::Kind::kInvalidArgument, "A must have rank 2"},
      {"D rows", [](Psum& p) { p.d.shape[0] = 500; }, Error::Kind::kInvalidArgument, "D must have shape"},
      {"SA rows", [](Psum& p) { p.sa.shape[0] = 500; }, Error::Kind::kInvalidArgument, "SA must have shape"},
      {"K mismatch", [](Psum& p) { p.b.shape[2] = 256; p.b.strides[1] = 256; p.b.strides[0] = 256 * 256; },
       Error::Kind::kInvalidArgument, "share K"},
      {"alignment 0", [](Psum& p) { p.m_alignment = 0; }, Error::Kind::kInvalidArgument,
       "m_alignment (the rows each group's start is a multiple of) must be 128, 64 or 32, got 0"},
      {"alignment 16", [](Psum& p) { p.m_alignment = 16; }, Error::Kind::kInvalidArgument,
       "must be 128, 64 or 32, got 16"},
      {"alignment 96", [](Psum& p) { p.m_alignment = 96; }, Error::Kind::kInvalidArgument,
       "must be 128, 64 or 32, got 96"},
      {"alignment 256", [](Psum& p) { p.m_alignment = 256; }, Error::Kind::kInvalidArgument,
       "must be 128, 64 or 32, got 256"},
      {"alignment -128", [](Psum& p) { p.m_alignment = -128; }, Error::Kind::kInvalidArgument,
       "must be 128, 64 or 32, got -128"},
      {"M_sum near 2^31",
       [](Psum& p) {
         const int64_t rows = (int64_t(1) << 31) - 200;
         p.a.shape[0] = p.sa.shape[0] = p.d.shape[0] = rows;
         p.sa.strides[1] = rows;
       },
       Error::Kind::kInvalidArgument, "M_sum must be below 2^31 - 256 for the psum layout"},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.name);
    Psum p;
    row.mutate(p);
    expect_error([&] { p.call(); }, row.kind, row.needle);
  }
}

// A one-element layout tensor's stride addresses nothing: m_indices of one row and masked_m of one group take any
// stride, as group ends and ks_device of one group do (PsumCallAndItsProblem, the K-grouped checks).
TEST(Validation, OneElementLayoutTensorsTakeAnyStride) {
  const int64_t n = 256, k = 512;
  TensorView b = TensorView::contiguous(addr(0x30000), DType::kFloat8E4M3, {1, n, k});
  TensorView sb = TensorView::contiguous(addr(0x40000), DType::kFloat32, {1, 2, 4});
  // Masked, one group of 64 tokens.
  TensorView a = TensorView::contiguous(addr(0x10000), DType::kFloat8E4M3, {1, 64, k});
  TensorView sa = TensorView::strided(addr(0x20000), DType::kFloat32, {1, 64, 4}, {4 * 64, 1, 64});
  TensorView d = TensorView::contiguous(addr(0x50000), DType::kBFloat16, {1, 64, n});
  TensorView masked_m = TensorView::strided(addr(0x60000), DType::kInt32, {1}, {5});
  EXPECT_EQ(finegemm::validate_masked(a, sa, b, sb, d, masked_m, 16).layout, masked_m.data);
  // Contiguous, one row.
  TensorView a1 = TensorView::contiguous(addr(0x10000), DType::kFloat8E4M3, {1, k});
  TensorView sa1 = TensorView::contiguous(addr(0x20000), DType::kFloat32, {1, 4});
  TensorView d1 = TensorView::contiguous(addr(0x50000), DType::kBFloat16, {1, n});
  TensorView m_indices = TensorView::strided(addr(0x60000), DType::kInt32, {1}, {3});
  EXPECT_EQ(finegemm::validate_contiguous(a1, sa1, b, sb, d1, m_indices, 128).layout, m_indices.data);
  // With more than one element the stride must be 1.
  TensorView a2 = TensorView::contiguous(addr(0x10000), DType::kFloat8E4M3, {2, k});
  TensorView sa2 = TensorView::contiguous(addr(0x20000), DType::kFloat32, {2, 4});
  TensorView d2 = TensorView::contiguous(addr(0x50000), DType::kBFloat16, {2, n});
  TensorView idx2 = TensorView::strided(addr(0x60000), DType::kInt32, {2}, {3});
  expect_error([&] { finegemm::validate_contiguous(a2, sa2, b, sb, d2, idx2, 128); }, Error::Kind::kInvalidArgument,
               "m_indices must be a contiguous int32 [M_sum]");
}

TEST(Validation, PsumCallAndItsProblem) {
  Psum p;
  finegemm::GemmCall c = finegemm::validate_contiguous_psum(p.a, p.sa, p.b, p.sb, p.d, p.ends, 100);
  EXPECT_EQ(c.kind, finegemm::GemmKind::kGroupedContiguousPsum);
  EXPECT_EQ(c.rows, 512);
  EXPECT_EQ(c.a_rows, 512);
  EXPECT_EQ(c.num_groups, 4);
  EXPECT_EQ(c.expected_m, 100);
  EXPECT_EQ(c.layout, p.ends.data);
  // No hint: M_sum / G rows per group.
  EXPECT_EQ(c.m_alignment, 128);
  c = finegemm::validate_contiguous_psum(p.a, p.sa, p.b, p.sb, p.d, p.ends, 0);
  EXPECT_EQ(c.expected_m, 128);
  // 64- and 32-row alignments go to the kernel (GemmArgs::psum_alignment).
  for (int alignment : {64, 32})
    EXPECT_EQ(finegemm::validate_contiguous_psum(p.a, p.sa, p.b, p.sb, p.d, p.ends, 0, alignment).m_alignment,
              alignment);
  // One group: any stride of the one-element ends.
  Psum one;
  one.b = TensorView::contiguous(addr(0x30000), DType::kFloat8E4M3, {1, 256, 512});
  one.sb = TensorView::contiguous(addr(0x40000), DType::kFloat32, {1, 2, 4});
  one.ends = TensorView::strided(addr(0x60000), DType::kInt32, {1}, {7});
  EXPECT_EQ(finegemm::validate_contiguous_psum(one.a, one.sa, one.b, one.sb, one.d, one.ends, 0).expected_m, 512);
  // M_sum = 0: a no-op, whatever the ends hold (they are never read on the host).
  Psum empty;
  empty.a.shape[0] = empty.sa.shape[0] = empty.d.shape[0] = 0;
  EXPECT_NO_THROW(empty.call());
  // is_supported: the hint per group must be positive.
  finegemm::Problem q;
  q.kind = finegemm::GemmKind::kGroupedContiguousPsum;
  q.num_groups = 8;
  q.n = 4096;
  q.k = 7168;
  std::string reason;
  q.m = 0;
  EXPECT_FALSE(finegemm::is_supported(q, &reason));
  EXPECT_NE(reason.find("expected_m must be >= 1"), std::string::npos) << reason;
  q.m = 1000;
  EXPECT_TRUE(finegemm::is_supported(q, &reason)) << reason;
  EXPECT_NE(finegemm::describe_config(q, 132).find("BM="), std::string::npos);
  // Every alignment the psum layout runs, and no other.
  for (int alignment : {64, 32}) {
    q.m_alignment = alignment;
    EXPECT_TRUE(finegemm::is_supported(q, &reason)) << reason;
  }
  q.m_alignment = 48;
  EXPECT_FALSE(finegemm::is_supported(q, &reason));
  EXPECT_NE(reason.find("must be 128, 64 or 32, got 48"), std::string::npos) << reason;
}

TEST(Validation, ContiguousAlignments) {
  // m_indices: 128 and 64 run (64 on 64-row tiles); 32 is refused, naming what runs it; other values are invalid.
  const int64_t g = 4, n = 256, k = 512;
  const TensorView a = TensorView::contiguous(addr(0x10000), DType::kFloat8E4M3, {256, k});
  const TensorView sa = TensorView::contiguous(addr(0x20000), DType::kFloat32, {256, 4});
  const TensorView b = TensorView::contiguous(addr(0x30000), DType::kFloat8E4M3, {g, n, k});
  const TensorView sb = TensorView::contiguous(addr(0x40000), DType::kFloat32, {g, 2, 4});
  const TensorView d = TensorView::contiguous(addr(0x50000), DType::kBFloat16, {256, n});
  const TensorView idx = TensorView::contiguous(addr(0x60000), DType::kInt32, {256});
  EXPECT_EQ(finegemm::validate_contiguous(a, sa, b, sb, d, idx).m_alignment, 128);
  EXPECT_EQ(finegemm::validate_contiguous(a, sa, b, sb, d, idx, 64).m_alignment, 64);
  expect_error([&] { finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a, sa, b, sb, d, idx, nullptr, 32); },
               Error::Kind::kUnsupported,
               "the contiguous layout with m_indices runs with 128- or 64-row alignment (64: on 64-row tiles), got 32; "
               "32-row alignment runs with the psum layout (group ends, "
               "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum)");
  for (int bad : {0, 1, 100, 256})
    expect_error([&] { finegemm::m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(a, sa, b, sb, d, idx, nullptr, bad); },
                 Error::Kind::kInvalidArgument, "must be 128, 64 or 32, got " + std::to_string(bad));
  // The same answers from is_supported.
  finegemm::Problem q;
  q.kind = finegemm::GemmKind::kGroupedContiguous;
  q.num_groups = 8;
  q.m = 8192;
  q.n = 4096;
  q.k = 7168;
  std::string reason;
  q.m_alignment = 64;
  EXPECT_TRUE(finegemm::is_supported(q, &reason)) << reason;
  q.m_alignment = 32;
  EXPECT_FALSE(finegemm::is_supported(q, &reason));
  EXPECT_NE(reason.find("32-row alignment runs with the psum layout"), std::string::npos) << reason;
}
