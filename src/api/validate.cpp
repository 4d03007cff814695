#include "api/validate.hpp"

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/error.hpp"
#include "jit/driver.hpp"

namespace finegemm {
namespace {

constexpr int64_t kMaxDim = std::numeric_limits<int32_t>::max();  // TMA coordinates are int32
constexpr int kMaxGroups = 1 << 16;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void expect_tensor(const TensorView& t, const char* fn, const char* name, DType dtype, int rank) {
  check(t.dtype == dtype, Error::Kind::kTypeMismatch, fn, name, " must be ", dtype_name(dtype), ", got ", t);
  check_arg(t.rank == rank, fn, name, " must have rank ", rank, ", got ", t);
  for (int d = 0; d < rank; ++d) {
    check_arg(t.shape[d] >= 0 && t.shape[d] <= kMaxDim, fn, name, " has an invalid size in dimension ", d, ": ", t);
    check_arg(t.strides[d] >= 0, fn, name, " has a negative stride: ", t);
  }
  if (t.numel() > 0) check_arg(t.data != nullptr, fn, name, " is a null pointer");
}

void expect_aligned(const void* ptr, int bytes, const char* fn, const char* name) {
  check_arg(reinterpret_cast<uintptr_t>(ptr) % uintptr_t(bytes) == 0, fn, name, " must be ", bytes,
            "-byte aligned (TMA rule), got address ", ptr);
}

void expect_dims(const TensorView& t, std::initializer_list<int64_t> dims, const char* fn, const char* name,
                 const char* expected) {
  int d = 0;
  for (int64_t want : dims) {
    check_arg(t.shape[d] == want, fn, name, " must have shape ", expected, ", got ", t, " (dimension ", d,
              " should be ", want, ")");
    ++d;
  }
}

void check_n_k(int64_t n, int64_t k, const char* fn) {
  check_arg(n > 0 && n % 8 == 0, fn,
            "N must be a positive multiple of 8 (16-byte row stride of the bf16 output), got N=", n);
  check_arg(k > 0 && k % 16 == 0, fn,
            "K must be a positive multiple of 16 (16-byte row stride of the fp8 inputs), got K=", k);
}

/// A row-major fp8 matrix view [rows, K] (last dim contiguous, row stride a multiple of 16 bytes).
int64_t fp8_row_stride(const TensorView& t, int dim, const char* fn, const char* name) {
  check_arg(t.strides[dim + 1] == 1, fn, name, " must be K-contiguous (last stride 1), got ", t);
  const int64_t stride = t.strides[dim];
  check_arg(stride >= t.shape[dim + 1] || t.shape[dim] <= 1, fn, name, " rows overlap: row stride < K in ", t);
  check_arg(stride % 16 == 0, fn, name, " row stride must be a multiple of 16 bytes (TMA rule), got ", stride, " in ",
            t);
  return stride;
}

/// SA [rows, KB]: MN-major (strides {1, M_pad}, M_pad >= rows, multiple of 4) or K-major (strides {ld >= KB, 1}).
/// Sets *k_major and returns ld (M_pad or the K-major row stride). The stride of a dimension of size 1 is never used
/// to address anything, so it does not decide the layout: with KB == 1 any K-major row stride >= 1 reads, and with
/// one row the K-major row stride is `single_row_ld` (KB, or the group stride of a [G, 1, KB] masked SA).
int64_t sa_layout_2d(const TensorView& sa, int64_t rows, int64_t kb, int64_t single_row_ld, const char* fn,
                     bool* k_major) {
  const int64_t s0 = sa.strides[sa.rank - 2], s1 = sa.strides[sa.rank - 1];
  if (s0 == 1 && s1 % 4 == 0 && s1 >= rows && !(kb == 1 && s1 == 1 && rows > 1)) {
    *k_major = false;
    return s1;
  }
  const int64_t ld = rows == 1 ? single_row_ld : s0;
  if ((s1 == 1 || kb == 1) && ld >= kb) {
    *k_major = true;
    return ld;
  }
  if (s0 == 1 && s1 >= rows)
    fail(Error::Kind::kInvalidArgument, fn, "SA is MN-major but its K-block stride M_pad=", s1,
         " is not a multiple of 4 (TMA needs 16-byte strides): ", sa,
         "; allocate it with M_pad = get_tma_aligned_size(M, 4) (masked [G, M_max, KB] scales with strides "
         "{M_max*KB, 1, M_max} need M_max % 4 == 0), convert it (get_mn_major_tma_aligned_tensor in Python) or pass "
         "it K-major");
  fail(Error::Kind::kInvalidArgument, fn, "SA layout not supported: ", sa,
       "; pass it MN-major and TMA-aligned (strides {1, M_pad} with M_pad = get_tma_aligned_size(M, 4), free) or "
       "K-major (strides {ld >= KB, 1})");
}

void check_sb(const TensorView& sb, int groups, int64_t nb, int64_t kb, const char* fn, bool grouped) {
  expect_tensor(sb, fn, "SB", DType::kFloat32, grouped ? 3 : 2);
  if (grouped) {
    expect_dims(sb, {groups, nb, kb}, fn, "SB", "[G, ceil(N/128), ceil(K/128)]");
    check_arg(sb.strides[2] == 1 && sb.strides[1] == kb && (sb.strides[0] == nb * kb || groups == 1), fn,
              "SB must be contiguous, got ", sb);
  } else {
    expect_dims(sb, {nb, kb}, fn, "SB", "[ceil(N/128), ceil(K/128)]");
    check_arg(sb.strides[1] == 1 && sb.strides[0] == kb, fn, "SB must be contiguous, got ", sb);
  }
  expect_aligned(sb.data, 4, fn, "SB");
}

/// An output-shaped [rows, N] matrix (D, or C): N-contiguous, row stride a multiple of 16 bytes, 16-byte aligned.
void check_out_2d(const TensorView& d, int64_t rows, int64_t n, const char* fn, const char* name, DType dtype,
                  int64_t* ld) {
  expect_tensor(d, fn, name, dtype, 2);
  expect_dims(d, {rows, n}, fn, name, "[M, N]");
  check_arg(d.strides[1] == 1, fn, name, " must be N-contiguous (last stride 1), got ", d);
  const int64_t per_16_bytes = 16 / dtype_size(dtype);
  check_arg(d.strides[0] >= n && d.strides[0] % per_16_bytes == 0, fn, name,
            " row stride must be >= N and a multiple of ", per_16_bytes, " elements (16 bytes), got ", d);
  expect_aligned(d.data, 16, fn, name);
  *ld = d.strides[0];
}

void check_grouped_b(const TensorView& b, int64_t* n, int64_t* k, int* groups, const char* fn) {
  expect_tensor(b, fn, "B", DType::kFloat8E4M3, 3);
  *groups = int(b.shape[0]);
  *n = b.shape[1];
  *k = b.shape[2];
  check_arg(*groups >= 1 && *groups <= kMaxGroups, fn, "B must hold 1..", kMaxGroups, " groups, got ", b);
  check_arg(b.strides[2] == 1 && b.strides[1] == *k && (b.strides[0] == *n * *k || *groups == 1), fn,
            "B [G, N, K] must be contiguous, got ", b);
  check_arg(*n * *groups <= kMaxDim, fn, "G * N exceeds 2^31 - 1");
  expect_aligned(b.data, 16, fn, "B");
}

/// The row alignment of the contiguous layouts' groups: 128, 64 or 32; the m_indices layout 128 or 64 (its tiles hold
/// one expert from their first row on, and the smallest tiles are 64 rows).
void check_m_alignment(int m_alignment, GemmKind kind, const char* fn) {
  check_arg(m_alignment == 128 || m_alignment == 64 || m_alignment == 32, fn,
            "m_alignment (the rows each group's start is a multiple of) must be 128, 64 or 32, got ", m_alignment);
  if (kind == GemmKind::kGroupedContiguous && m_alignment == 32) [[unlikely]]
    throw Error(Error::Kind::kUnsupported, fn,
                "the contiguous layout with m_indices runs with 128- or 64-row alignment (64: on 64-row tiles), got "
                "32; 32-row alignment runs with the psum layout (group ends, "
                "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum)");
}

}  // namespace

void check_problem(const Problem& p) {
  const char* fn = "is_supported";
  check_arg(p.m >= 0 && p.m <= kMaxDim, fn, "M must be in [0, 2^31), got M=", p.m);
  check_n_k(p.n, p.k, fn);
  check_arg(p.num_groups >= 1 && p.num_groups <= kMaxGroups, fn, "the number of groups must be in [1, ", kMaxGroups,
            "], got ", p.num_groups);
  if (p.kind == GemmKind::kGroupedMasked || p.kind == GemmKind::kGroupedContiguousPsum) {
    check_arg(p.m >= 1, fn, "expected_m must be >= 1, got ", p.m);
  }
  check_m_alignment(p.m_alignment, p.kind, fn);
  check_arg(p.d_dtype == DType::kBFloat16 || p.d_dtype == DType::kFloat32, fn,
            "the output is bfloat16 or float32, got ", dtype_name(p.d_dtype));
  if (p.kind == GemmKind::kGroupedK) {
    check_arg(p.m > 0 && p.m % 8 == 0, fn,
              "K-grouped: M must be a positive multiple of 8 (16-byte strides of the scales), got M=", p.m);
    check_arg(p.sb_per_row && p.d_dtype == DType::kFloat32 && p.accumulate && p.c_is_d, fn,
              "K-grouped: 1x128 scales of B (sb_per_row), a float32 D and accumulation into D (accumulate, c_is_d) "
              "are how the kernel runs (no accumulation: D is zeroed first)");
    check_arg(p.k % 128 == 0, fn, "K-grouped: the expected K per group must be a multiple of 128, got K=", p.k);
    return;
  }
  check_arg(p.kind == GemmKind::kNormal || (!p.sb_per_row && p.d_dtype == DType::kBFloat16 && !p.accumulate), fn,
            "1x128 scales of B, fp32 outputs and accumulation are for dense GEMMs (gemm_fp8_fp8_nt)");
  check_arg(!p.accumulate || p.d_dtype == DType::kFloat32, fn, "accumulation (D = C + A x B^T) needs a float32 D");
}

namespace {

/// A [rows, K], SA [rows, KB] and D [rows, N] of the 2D kinds (normal, dense, contiguous); needs c.n, c.k and
/// c.d_dtype set.
void check_activations_2d(const TensorView& a, const TensorView& sa, const TensorView& d, const char* fn,
                          const char* sa_shape, GemmCall& c) {
  c.rows = c.a_rows = a.shape[0];
  check_arg(a.shape[1] == c.k, fn, "A and B must share K: A is ", a, ", K of B is ", c.k);
  check_n_k(c.n, c.k, fn);
  const int64_t kb = ceil_div(c.k, 128);
  c.lda = fp8_row_stride(a, 0, fn, "A");
  expect_dims(sa, {c.rows, kb}, fn, "SA", sa_shape);
  c.ld_sa = sa_layout_2d(sa, c.rows, kb, kb, fn, &c.sa_k_major);
  expect_aligned(a.data, 16, fn, "A");
  expect_aligned(sa.data, 16, fn, "SA");
  check_out_2d(d, c.rows, c.n, fn, "D", c.d_dtype, &c.ld_d);
}

/// The dense kinds' A [M, K], SA [M, KB], B [N, K] and D [M, N] of `d_dtype`, once the types of A, B and SA are
/// checked: everything but the scales of B (and C).
GemmCall check_dense_operands(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& d,
                              DType d_dtype, const char* fn) {
  GemmCall c;
  c.kind = GemmKind::kNormal;
  c.d_dtype = d_dtype;
  c.n = b.shape[0];
  c.k = b.shape[1];
  check_arg(a.shape[1] == c.k, fn, "A and B must share K: A is ", a, ", B is ", b);
  check_activations_2d(a, sa, d, fn, "[M, ceil(K/128)]", c);
  check_arg(fp8_row_stride(b, 0, fn, "B") == c.k, fn, "B must be contiguous [N, K], got ", b);
  return c;
}

/// The contiguous grouped GEMM, whether its groups are given by m_indices or by their ends: the row alignment, A
/// [M_sum, K], SA [M_sum, KB], B [G, N, K], SB [G, NB, KB], D [M_sum, N] and the type of the layout tensor (its shape
/// is each layout's own).
GemmCall check_contiguous(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                          const TensorView& d, const TensorView& layout, const char* layout_name, GemmKind kind,
                          int m_alignment, const char* fn) {
  check_m_alignment(m_alignment, kind, fn);
  expect_tensor(a, fn, "A", DType::kFloat8E4M3, 2);
  expect_tensor(sa, fn, "SA", DType::kFloat32, 2);
  expect_tensor(layout, fn, layout_name, DType::kInt32, 1);
  GemmCall c;
  c.kind = kind;
  c.m_alignment = m_alignment;
  check_grouped_b(b, &c.n, &c.k, &c.num_groups, fn);
  check_activations_2d(a, sa, d, fn, "[M_sum, ceil(K/128)]", c);
  check_sb(sb, c.num_groups, ceil_div(c.n, 128), ceil_div(c.k, 128), fn, true);
  return c;
}

/// The call's tensors, set once every check has passed; `layout` is the grouped kinds' m_indices, group ends,
/// masked_m or ks_device.
void set_tensors(GemmCall& c, const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                 const TensorView& d, const void* layout = nullptr) {
  c.a = a.data;
  c.sa = sa.data;
  c.b = b.data;
  c.sb = sb.data;
  c.d = d.data;
  c.layout = layout;
}

}  // namespace

GemmCall validate_normal(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                         const TensorView& d) {
  const char* fn = "gemm_fp8_fp8_bf16_nt";
  expect_tensor(a, fn, "A", DType::kFloat8E4M3, 2);
  expect_tensor(b, fn, "B", DType::kFloat8E4M3, 2);
  expect_tensor(sa, fn, "SA", DType::kFloat32, 2);
  GemmCall c = check_dense_operands(a, sa, b, d, DType::kBFloat16, fn);
  check_sb(sb, 1, ceil_div(c.n, 128), ceil_div(c.k, 128), fn, false);
  expect_aligned(b.data, 16, fn, "B");
  set_tensors(c, a, sa, b, sb, d);
  return c;
}

GemmCall validate_dense(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                        const TensorView& d, const TensorView* c_view) {
  const char* fn = "gemm_fp8_fp8_nt";
  expect_tensor(a, fn, "A", DType::kFloat8E4M3, 2);
  expect_tensor(b, fn, "B", DType::kFloat8E4M3, 2);
  expect_tensor(sa, fn, "SA", DType::kFloat32, 2);
  check_arg(d.dtype == DType::kBFloat16 || d.dtype == DType::kFloat32, fn, "D must be bfloat16 or float32, got ", d);
  GemmCall c = check_dense_operands(a, sa, b, d, d.dtype, fn);
  const int64_t kb = ceil_div(c.k, 128), nb = ceil_div(c.n, 128);
  expect_tensor(sb, fn, "SB", DType::kFloat32, 2);
  c.sb_per_row = sb.shape[0] == c.n;
  if (c.sb_per_row) {
    expect_dims(sb, {c.n, kb}, fn, "SB", "[N, ceil(K/128)] (1x128 blocks of B)");
    check_arg(sb.strides[0] == 1 && sb.strides[1] >= c.n && sb.strides[1] % 4 == 0, fn,
              "1x128 SB must be MN-major and TMA-aligned (strides {1, N_pad}, N_pad >= N a multiple of 4), got ", sb,
              "; convert it (get_mn_major_tma_aligned_tensor in Python)");
    expect_aligned(sb.data, 16, fn, "SB");
    c.ld_sb = sb.strides[1];
  } else {
    check_arg(sb.shape[0] == nb, fn,
              "SB must be [ceil(N/128), ceil(K/128)] (128x128 blocks) or [N, ceil(K/128)] (1x128 blocks) with N=", c.n,
              ", got ", sb);
    check_sb(sb, 1, nb, kb, fn, false);
  }
  if (c_view != nullptr) {
    const TensorView& cv = *c_view;
    check_arg(d.dtype == DType::kFloat32, fn, "C (D = C + A x B^T) needs a float32 D, got ", d);
    check_out_2d(cv, c.rows, c.n, fn, "C", DType::kFloat32, &c.ld_c);
    if (cv.data != d.data) {
      // C other than D must not overlap it: the kernel reads C's tiles while other tiles of D are written.
      const auto bytes_end = [&](const TensorView& t) {
        return static_cast<const char*>(t.data) + ((c.rows - 1) * t.strides[0] + c.n) * 4;
      };
      const bool disjoint = c.rows == 0 || bytes_end(cv) <= static_cast<const char*>(d.data) ||
                            bytes_end(d) <= static_cast<const char*>(cv.data);
      check_arg(disjoint, fn,
                "C overlaps D without being D: pass c = d (the same tensor) or a separate tensor, got C ", cv,
                " and D ", d);
    } else {
      check_arg(c.ld_c == c.ld_d, fn, "C is D's memory with another row stride: C ", cv, ", D ", d);
    }
    c.c = cv.data;
  }
  expect_aligned(b.data, 16, fn, "B");
  set_tensors(c, a, sa, b, sb, d);
  return c;
}

GemmCall validate_contiguous(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                             const TensorView& d, const TensorView& m_indices, int m_alignment) {
  const char* fn = "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous";
  GemmCall c = check_contiguous(a, sa, b, sb, d, m_indices, "m_indices", GemmKind::kGroupedContiguous, m_alignment, fn);
  check_arg(m_indices.shape[0] == c.rows && (m_indices.strides[0] == 1 || c.rows == 1), fn,
            "m_indices must be a contiguous int32 [M_sum] with M_sum=", c.rows, ", got ", m_indices);
  expect_aligned(m_indices.data, 4, fn, "m_indices");
  set_tensors(c, a, sa, b, sb, d, m_indices.data);
  return c;
}

GemmCall validate_contiguous_psum(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                                  const TensorView& d, const TensorView& group_ends, int expected_m,
                                  int m_alignment) {
  const char* fn = "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum";
  GemmCall c =
      check_contiguous(a, sa, b, sb, d, group_ends, "group_ends", GemmKind::kGroupedContiguousPsum, m_alignment, fn);
  // The kernel rounds group starts up in 32-bit rows (at most M_sum + 254 before the rounding).
  check_arg(c.rows <= kMaxDim - 256, fn, "M_sum must be below 2^31 - 256 for the psum layout, got M_sum=", c.rows);
  check_arg(group_ends.shape[0] == c.num_groups && (group_ends.strides[0] == 1 || c.num_groups == 1), fn,
            "group_ends must be a contiguous int32 [G] holding the end row of each of B's G=", c.num_groups,
            " groups, got ", group_ends);
  expect_aligned(group_ends.data, 4, fn, "group_ends");
  check_arg(expected_m >= 0, fn, "expected_m must be >= 0 (a hint of the typical rows per group; 0: M_sum / G), got ",
            expected_m);
  // No hint: the rows spread evenly over the groups.
  c.expected_m = expected_m > 0 ? expected_m : std::max<int64_t>(1, ceil_div(c.rows, c.num_groups));
  set_tensors(c, a, sa, b, sb, d, group_ends.data);
  return c;
}

GemmCall validate_k_grouped(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                            const TensorView& d, const std::vector<int64_t>& ks, const TensorView& ks_device,
                            bool accumulate, const TensorView* workspace) {
  const char* fn = "k_grouped_gemm_fp8_fp8_f32_nt";
  expect_tensor(a, fn, "A", DType::kFloat8E4M3, 1);
  expect_tensor(b, fn, "B", DType::kFloat8E4M3, 1);
  expect_tensor(sa, fn, "SA", DType::kFloat32, 2);
  expect_tensor(sb, fn, "SB", DType::kFloat32, 2);
  expect_tensor(d, fn, "D", DType::kFloat32, 3);
  expect_tensor(ks_device, fn, "ks_device", DType::kInt32, 1);
  GemmCall c;
  c.kind = GemmKind::kGroupedK;
  const int64_t groups = d.shape[0], m = d.shape[1], n = d.shape[2];
  check_arg(groups >= 1 && groups <= kMaxGroups, fn, "D must be float32 [G, M, N] with 1 <= G <= ", kMaxGroups,
            ", got ", d);
  check_arg(int64_t(ks.size()) == groups, fn, "ks must hold one K per group of D (G=", groups, "), got ", ks.size(),
            " values");
  check_arg(m > 0 && m % 8 == 0, fn, "M must be a positive multiple of 8 (16-byte strides of SA and D), got M=", m,
            " in D ", d);
  check_arg(n > 0 && n % 8 == 0, fn, "N must be a positive multiple of 8 (16-byte strides of SB and D), got N=", n,
            " in D ", d);
  check_arg(d.strides[2] == 1 && d.strides[1] == n && (d.strides[0] == m * n || groups == 1), fn,
            "D must be a contiguous float32 [G, M, N], got ", d);
  int64_t sum_k = 0;
  for (size_t g = 0; g < ks.size(); ++g) {
    check_arg(ks[g] >= 0 && ks[g] % 128 == 0, fn,
              "every K_g must be a multiple of 128 (0 for an expert without tokens), got ks[", g, "]=", ks[g]);
    sum_k += ks[g];
    check_arg(sum_k <= kMaxDim, fn, "the sum of ks must be below 2^31, got more at ks[", g, "]");
  }
  const int64_t sum_kb = sum_k / 128;
  check_arg(a.shape[0] == m * sum_k && a.strides[0] == 1, fn, "A must be a contiguous fp8 [M * sum(ks)] = [", m * sum_k,
            "] (M=", m, ", sum(ks)=", sum_k, "), got ", a);
  check_arg(b.shape[0] == n * sum_k && b.strides[0] == 1, fn, "B must be a contiguous fp8 [N * sum(ks)] = [", n * sum_k,
            "] (N=", n, ", sum(ks)=", sum_k, "), got ", b);
  check_arg(sa.shape[0] == m && sa.shape[1] == sum_kb && sa.strides[0] == 1 && (sa.strides[1] == m || sum_kb <= 1), fn,
            "SA must be float32 [M, sum(ks)/128] = [", m, ", ", sum_kb,
            "] MN-major with strides {1, M} (the experts' K blocks back to back), got ", sa);
  check_arg(sb.shape[0] == n && sb.shape[1] == sum_kb && sb.strides[0] == 1 && (sb.strides[1] == n || sum_kb <= 1), fn,
            "SB must be float32 [N, sum(ks)/128] = [", n, ", ", sum_kb,
            "] MN-major with strides {1, N} (the experts' K blocks back to back), got ", sb);
  check_arg(ks_device.shape[0] == groups && (ks_device.strides[0] == 1 || groups == 1), fn,
            "ks_device must be a contiguous int32 [G] (G=", groups, ") on the device, got ", ks_device);
  expect_aligned(a.data, 16, fn, "A");
  expect_aligned(b.data, 16, fn, "B");
  expect_aligned(sa.data, 16, fn, "SA");
  expect_aligned(sb.data, 16, fn, "SB");
  expect_aligned(d.data, 16, fn, "D");
  expect_aligned(ks_device.data, 4, fn, "ks_device");
  if (workspace != nullptr) {
    check_arg(workspace->data != nullptr, fn, "the workspace is a null pointer");
    expect_aligned(workspace->data, 128, fn, "the workspace");
    c.workspace = workspace->data;
    c.workspace_bytes = workspace->numel() * dtype_size(workspace->dtype);
  }
  c.rows = m;
  c.a_rows = groups * m;
  c.n = n;
  c.k = sum_k;
  c.num_groups = int(groups);
  c.expected_k = std::max<int64_t>(128, (sum_k / groups + 127) / 128 * 128);
  c.lda = 0;
  c.ld_sa = m;
  c.ld_sb = n;
  c.ld_d = n;
  c.sb_per_row = true;
  c.d_dtype = DType::kFloat32;
  set_tensors(c, a, sa, b, sb, d, ks_device.data);
  c.c = d.data;
  c.ld_c = n;
  c.zero_d = !accumulate;
  return c;
}

GemmCall validate_masked(const TensorView& a, const TensorView& sa, const TensorView& b, const TensorView& sb,
                         const TensorView& d, const TensorView& masked_m, int expected_m) {
  const char* fn = "m_grouped_gemm_fp8_fp8_bf16_nt_masked";
  expect_tensor(a, fn, "A", DType::kFloat8E4M3, 3);
  expect_tensor(sa, fn, "SA", DType::kFloat32, 3);
  expect_tensor(d, fn, "D", DType::kBFloat16, 3);
  expect_tensor(masked_m, fn, "masked_m", DType::kInt32, 1);
  GemmCall c;
  c.kind = GemmKind::kGroupedMasked;
  check_grouped_b(b, &c.n, &c.k, &c.num_groups, fn);
  check_n_k(c.n, c.k, fn);
  check_arg(expected_m > 0, fn, "expected_m must be > 0 (a hint of the typical rows per group), got ", expected_m);
  const int64_t kb = ceil_div(c.k, 128), nb = ceil_div(c.n, 128);
  expect_dims(a, {c.num_groups, a.shape[1], c.k}, fn, "A", "[G, M_max, K]");
  c.rows = a.shape[1];
  c.a_rows = c.rows * c.num_groups;
  check_arg(c.a_rows <= kMaxDim, fn, "G * M_max exceeds 2^31 - 1");
  c.expected_m = expected_m;
  c.lda = fp8_row_stride(a, 1, fn, "A");
  check_arg(a.strides[0] == c.rows * a.strides[1] || c.num_groups == 1, fn,
            "A groups must be back to back (stride[0] == M_max * stride[1]), got ", a);
  expect_dims(sa, {c.num_groups, c.rows, kb}, fn, "SA", "[G, M_max, ceil(K/128)]");
  c.ld_sa = sa_layout_2d(sa, c.rows, kb, c.num_groups > 1 ? sa.strides[0] : kb, fn, &c.sa_k_major);
  if (c.sa_k_major) {
    check_arg(sa.strides[0] == c.rows * c.ld_sa || c.num_groups == 1, fn,
              "K-major SA groups must be back to back (stride[0] == M_max * row stride), got ", sa);
  } else {
    check_arg(sa.strides[0] == kb * sa.strides[2] || c.num_groups == 1, fn,
              "MN-major SA groups must be back to back (stride[0] == KB * M_pad), got ", sa);
  }
  check_sb(sb, c.num_groups, nb, kb, fn, true);
  expect_dims(d, {c.num_groups, c.rows, c.n}, fn, "D", "[G, M_max, N]");
  check_arg(d.strides[2] == 1 && d.strides[1] >= c.n && d.strides[1] % 8 == 0 &&
                (d.strides[0] == c.rows * d.strides[1] || c.num_groups == 1),
            fn,
            "D must be [G, M_max, N] with N-contiguous rows (row stride a multiple of 8) and groups back to back, got ",
            d);
  c.ld_d = d.strides[1];
  check_arg(masked_m.shape[0] == c.num_groups && (masked_m.strides[0] == 1 || c.num_groups == 1), fn,
            "masked_m must be a contiguous int32 [G] with G=", c.num_groups, ", got ", masked_m);
  expect_aligned(a.data, 16, fn, "A");
  expect_aligned(b.data, 16, fn, "B");
  expect_aligned(sa.data, 16, fn, "SA");
  expect_aligned(d.data, 16, fn, "D");
  expect_aligned(masked_m.data, 4, fn, "masked_m");
  set_tensors(c, a, sa, b, sb, d, masked_m.data);
  return c;
}

void check_device_pointer(const void* ptr, const char* name, int device, const char* where) {
  CUmemorytype type{};
  int ordinal = -1;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* values[] = {&type, &ordinal};
  const CUresult r =
      jit::driver().cuPointerGetAttributes(2, attrs, values, CUdeviceptr(reinterpret_cast<uintptr_t>(ptr)));
  const bool on_device = r == CUDA_SUCCESS && (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED);
  check(on_device, Error::Kind::kInvalidArgument, where, name, " is not device memory (", ptr,
        "): pass tensors allocated on the GPU");
  check(ordinal == device, Error::Kind::kInvalidArgument, where, name, " lives on device ", ordinal,
        " but the current device is ", device, ": make the tensors' device current (cudaSetDevice / torch.cuda.device)");
}

void check_device_pointers(const GemmCall& c, int device) {
  const struct {
    const void* ptr;
    const char* name;
  } tensors[] = {{c.a, "A"},   {c.sa, "SA"}, {c.b, "B"},
                 {c.sb, "SB"}, {c.d, "D"},   {c.layout, "m_indices/masked_m/group_ends/ks_device"}, {c.c, "C"},
                 {c.workspace, "workspace"}};
  for (const auto& t : tensors)
    if (t.ptr != nullptr) check_device_pointer(t.ptr, t.name, device, "gemm");
}

}  // namespace finegemm
