#include "lib/gemm_problem.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "jit/launch.hpp"
#include "lib/jit_kernel.hpp"
#include "reference/reference.hpp"

namespace finegemm::tools {
namespace {

TensorView view(DeviceBuffer& buf, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(buf.get(), dtype, shape);
}

/// Runs fn(begin, end) over bands of [0, rows) on all hardware threads.
template <class Fn>
void parallel_rows(int64_t rows, const Fn& fn) {
  constexpr int64_t kBand = 64;
  const int64_t num_bands = (rows + kBand - 1) / kBand;
  const int64_t num_threads =
      std::clamp<int64_t>(int64_t(std::thread::hardware_concurrency()), 1, std::max<int64_t>(num_bands, 1));
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t band = next++; band < num_bands; band = next++) fn(band * kBand, std::min(rows, (band + 1) * kBand));
  };
  std::vector<std::thread> threads;
  for (int64_t t = 1; t < num_threads; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
}

/// Root mean square of each dequantized row of fp8 `codes` [rows, k] with 1x128 scales [rows, KB] (row-major).
std::vector<double> row_rms(const uint8_t* codes, const float* scales, int64_t rows, int64_t k) {
  const float* table = reference::e4m3_decode_table();
  const int64_t kb = (k + 127) / 128;
  std::vector<double> rms(size_t(rows), 0.0);
  parallel_rows(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      double sum = 0;
      for (int64_t blk = 0; blk < kb; ++blk) {
        double block = 0;
        for (int64_t i = blk * 128; i < std::min(k, blk * 128 + 128); ++i) {
          const double v = table[codes[r * k + i]];
          block += v * v;
        }
        const double scale = scales[r * kb + blk];
        sum += block * scale * scale;
      }
      rms[size_t(r)] = k > 0 ? std::sqrt(sum / double(k)) : 0.0;
    }
  });
  return rms;
}

/// wgrad's C [rows, N] (kgrouped: one expert's C[g]): normal values of about the product's magnitude, element (m, n)
/// scaled by sqrt(K) * rms(row m of A) * rms(row n of B) (dequantized), so that neither the product nor C dominates the
/// sum.
/// Row m draws from its own generator: the values depend on the seed only.
std::vector<float> random_c(const uint8_t* a, const float* sa, const uint8_t* b, const float* sb, int64_t rows,
                            int64_t n, int64_t k, uint64_t seed) {
  const std::vector<double> rms_a = row_rms(a, sa, rows, k), rms_b = row_rms(b, sb, n, k);
  std::vector<float> c(size_t(rows * n));
  const double sqrt_k = std::sqrt(double(k));
  parallel_rows(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + uint64_t(r) * 0xD1B54A32D192ED03ull + 5);
      std::normal_distribution<double> normal;
      for (int64_t j = 0; j < n; ++j)
        c[size_t(r * n + j)] = float(normal(rng) * sqrt_k * rms_a[size_t(r)] * rms_b[size_t(j)]);
    }
  });
  return c;
}

}  // namespace

GemmProblem::GemmProblem(const ProblemShape& shape, const ProblemOptions& options)
    : shape_(shape), c_aliases_d_(options.c_aliases_d), bf16_output_(options.bf16_output),
      accumulate_(options.accumulate), m_alignment_(options.m_alignment) {
  if (shape.wgrad && (shape.kind != GemmKind::kNormal || shape.groups != 1))
    throw std::invalid_argument("a wgrad problem is dense: kind normal, one group, got " + shape.describe());
  if (bf16_output_ && !shape.wgrad)
    throw std::invalid_argument("bf16_output is a wgrad problem's option, got " + shape.describe());
  if (m_alignment_ != 128 && m_alignment_ != 64 && m_alignment_ != 32)
    throw std::invalid_argument("m_alignment is 128, 64 or 32, got " + std::to_string(m_alignment_));
  if (shape.kind == GemmKind::kGroupedK) {
    init_k_grouped(options);
    return;
  }
  std::mt19937_64 rng(options.seed * 0x9E3779B97F4A7C15ull + 17);
  const int g = shape.groups;
  if (shape.kind == GemmKind::kNormal) {
    rows_ = shape.m;
  } else if (shape.kind == GemmKind::kGroupedMasked) {
    rows_ = int64_t(g) * shape.m;
    masked_m_ = options.masked_m;
    if (masked_m_.empty()) masked_m_.assign(size_t(g), int(shape.m));
    if (int(masked_m_.size()) != g) throw std::invalid_argument("masked_m needs one entry per group");
    layout_.assign(masked_m_.begin(), masked_m_.end());
  } else {
    std::vector<int> counts = options.expert_rows;
    if (counts.empty()) {
      // Router-like: counts drawn around the expected value (0.5x..1.5x).
      std::uniform_int_distribution<int64_t> dist(shape.m / 2, shape.m + shape.m / 2);
      for (int e = 0; e < g; ++e) counts.push_back(int(dist(rng)));
    }
    if (int(counts.size()) != g) throw std::invalid_argument("expert_rows needs one entry per expert");
    for (int e = 0; e < g; ++e) {
      const int64_t padded = reference::align_up(counts[size_t(e)], m_alignment_);
      for (int64_t r = 0; r < padded; ++r) layout_.push_back(r < counts[size_t(e)] ? e : -1);
    }
    rows_ = int64_t(layout_.size());
    if (shape.kind == GemmKind::kGroupedContiguousPsum) {
      // The same rows given by each expert's end row: the previous end rounded up, plus its rows.
      std::vector<int32_t> ends;
      int64_t start = 0;
      for (int e = 0; e < g; ++e) {
        ends.push_back(int32_t(start + counts[size_t(e)]));
        start = reference::align_up(ends.back(), m_alignment_);
      }
      layout_ = ends;
    }
  }
  refresh_row_groups();

  const int64_t kb_ = kb(), nb_ = nb();
  host_a.resize(size_t(rows_ * shape.k));
  host_b.resize(size_t(int64_t(g) * shape.n * shape.k));
  host_sa.resize(size_t(rows_ * kb_));
  host_sb.resize(size_t((shape.wgrad ? shape.n : int64_t(g) * nb_) * kb_));
  if (options.data == DataKind::kNormal && shape.wgrad) {
    // Both operands quantized per 1x128 block along K, as activations and gradients are.
    reference::fill_quantized_normal_fp8(host_a, host_sa, rows_, shape.k, 1, options.seed * 4 + 0);
    reference::fill_quantized_normal_fp8(host_b, host_sb, shape.n, shape.k, 1, options.seed * 4 + 1);
  } else if (options.data == DataKind::kNormal) {
    reference::fill_quantized_normal_fp8(host_a, host_sa, rows_, shape.k, 1, options.seed * 4 + 0);
    // B per group: its 128x128 blocks never straddle two experts.
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    for (int grp = 0; grp < g; ++grp) {
      reference::fill_quantized_normal_fp8(codes, scales, shape.n, shape.k, reference::kBlockN,
                                           options.seed * 4 + 1 + uint64_t(grp) * 0x10000);
      std::copy(codes.begin(), codes.end(), host_b.begin() + int64_t(grp) * shape.n * shape.k);
      std::copy(scales.begin(), scales.end(), host_sb.begin() + int64_t(grp) * nb_ * kb_);
    }
  } else {
    reference::fill_random_fp8(host_a, options.seed * 4 + 0);
    reference::fill_random_fp8(host_b, options.seed * 4 + 1);
    reference::fill_random_scales(host_sa, options.seed * 4 + 2, options.scale_lo_exp, options.scale_hi_exp);
    reference::fill_random_scales(host_sb, options.seed * 4 + 3, options.scale_lo_exp, options.scale_hi_exp);
  }

  // SA MN-major: per group (masked) or whole (normal, contiguous): [KB][M_pad].
  const int64_t group_rows = shape.kind == GemmKind::kGroupedMasked ? shape.m : rows_;
  const int64_t num_sa_groups = shape.kind == GemmKind::kGroupedMasked ? g : 1;
  m_pad_ = reference::align_up(std::max<int64_t>(group_rows, 1), 4);
  std::vector<float> sa_mn;
  for (int64_t grp = 0; grp < num_sa_groups; ++grp) {
    std::vector<float> part(host_sa.begin() + grp * group_rows * kb_, host_sa.begin() + (grp + 1) * group_rows * kb_);
    std::vector<float> mn = reference::scales_to_mn_major(part, group_rows, kb_);
    sa_mn.insert(sa_mn.end(), mn.begin(), mn.end());
  }

  a = DeviceBuffer(std::max<size_t>(host_a.size(), 16));
  b = DeviceBuffer(host_b.size());
  sa_k_major = DeviceBuffer(std::max<size_t>(host_sa.size() * 4, 16));
  // MN-major SA allocated to the extent of its strided view and no further (the last K block's padding past the rows
  // left out), the tightest layout a caller may pass: reading past it is a memcheck error.
  const size_t sa_mn_floats =
      group_rows == 0 ? 0 : size_t((num_sa_groups * kb_ - 1) * m_pad_ + group_rows);
  sa_mn_major = DeviceBuffer(std::max<size_t>(sa_mn_floats * 4, 16));
  d = DeviceBuffer(std::max<size_t>(size_t(rows_ * shape.n * output_bytes()), 16));
  if (!host_a.empty()) a.upload(host_a.data(), host_a.size());
  b.upload(host_b.data(), host_b.size());
  if (!host_sa.empty()) sa_k_major.upload(host_sa.data(), host_sa.size() * 4);
  if (sa_mn_floats > 0) sa_mn_major.upload(sa_mn.data(), sa_mn_floats * 4);
  if (shape.wgrad) {
    // SB as the kernel reads it ([KB][N_pad], N contiguous), and the row-major copy the reference reads.
    const std::vector<float> sb_mn = reference::scales_to_mn_major(host_sb, shape.n, kb_);
    sb = DeviceBuffer(sb_mn.size() * 4);
    sb.upload(sb_mn.data(), sb_mn.size() * 4);
    sb_k_major = DeviceBuffer(host_sb.size() * 4);
    sb_k_major.upload(host_sb.data(), host_sb.size() * 4);
    if (!bf16_output_)
      host_c = random_c(host_a.data(), host_sa.data(), host_b.data(), host_sb.data(), rows_, shape.n, shape.k,
                        options.seed * 4 + 2);
    if (!c_aliases_d_ && !bf16_output_) {
      c = DeviceBuffer(std::max<size_t>(host_c.size() * 4, 16));
      if (!host_c.empty()) c.upload(host_c.data(), host_c.size() * 4);
    }
  } else {
    sb = DeviceBuffer(host_sb.size() * 4);
    sb.upload(host_sb.data(), host_sb.size() * 4);
  }
  if (!layout_.empty()) {
    layout_buffer = DeviceBuffer(layout_.size() * 4);
    layout_buffer.upload(layout_.data(), layout_.size() * 4);
  }
}

void GemmProblem::init_k_grouped(const ProblemOptions& options) {
  const int g = shape_.groups;
  const int64_t m = shape_.m, n = shape_.n;
  ks_ = options.expert_ks.empty() ? draw_expert_ks(shape_, options.seed) : options.expert_ks;
  if (int(ks_.size()) != g) throw std::invalid_argument("expert_ks needs one entry per expert");
  for (int64_t k : ks_) {
    if (k < 0 || k % 128 != 0)
      throw std::invalid_argument("every expert's K must be a multiple of 128 (or 0), got " + std::to_string(k));
    sum_k_ += k;
  }
  rows_ = int64_t(g) * m;
  layout_.assign(ks_.begin(), ks_.end());
  refresh_row_groups();

  // Expert by expert, back to back: A_g [M, K_g], B_g [N, K_g], SA_g [M, KB_g], SB_g [N, KB_g].
  const int64_t sum_kb = sum_k_ / 128;
  host_a.resize(size_t(m * sum_k_));
  host_b.resize(size_t(n * sum_k_));
  host_sa.resize(size_t(m * sum_kb));
  host_sb.resize(size_t(n * sum_kb));
  if (options.data == DataKind::kNormal) {
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    int64_t k0 = 0;
    for (int e = 0; e < g; ++e) {
      const int64_t k = ks_[size_t(e)];
      if (k == 0) continue;
      reference::fill_quantized_normal_fp8(codes, scales, m, k, 1, options.seed * 4 + 0 + uint64_t(e) * 0x10000);
      std::copy(codes.begin(), codes.end(), host_a.begin() + m * k0);
      std::copy(scales.begin(), scales.end(), host_sa.begin() + m * k0 / 128);
      reference::fill_quantized_normal_fp8(codes, scales, n, k, 1, options.seed * 4 + 1 + uint64_t(e) * 0x10000);
      std::copy(codes.begin(), codes.end(), host_b.begin() + n * k0);
      std::copy(scales.begin(), scales.end(), host_sb.begin() + n * k0 / 128);
      k0 += k;
    }
  } else {
    reference::fill_random_fp8(host_a, options.seed * 4 + 0);
    reference::fill_random_fp8(host_b, options.seed * 4 + 1);
    reference::fill_random_scales(host_sa, options.seed * 4 + 2, options.scale_lo_exp, options.scale_hi_exp);
    reference::fill_random_scales(host_sb, options.seed * 4 + 3, options.scale_lo_exp, options.scale_hi_exp);
  }
  // The kernel's scales: [sum KB][M] and [sum KB][N], each expert's K blocks after the previous expert's.
  std::vector<float> sa_mn(host_sa.size()), sb_mn(host_sb.size());
  int64_t kb0 = 0;
  for (int64_t k : ks_) {
    const int64_t kb = k / 128;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < kb; ++j) sa_mn[size_t((kb0 + j) * m + r)] = host_sa[size_t(m * kb0 + r * kb + j)];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < kb; ++j) sb_mn[size_t((kb0 + j) * n + r)] = host_sb[size_t(n * kb0 + r * kb + j)];
    kb0 += kb;
  }
  // C [G, M, N]: of the product's magnitude for an expert with tokens, standard normal values for one without (which
  // the call must leave as they are).
  if (accumulate_) {
    host_c.resize(size_t(rows_ * n));
    int64_t k0 = 0;
    for (int e = 0; e < g; ++e) {
      const int64_t k = ks_[size_t(e)];
      const uint64_t seed = options.seed * 4 + 2 + uint64_t(e) * 0x10000;
      std::vector<float> part(size_t(m * n));
      if (k > 0) {
        part = random_c(host_a.data() + m * k0, host_sa.data() + m * k0 / 128, host_b.data() + n * k0,
                        host_sb.data() + n * k0 / 128, m, n, k, seed);
      } else {
        reference::fill_random_normal(part, seed);
      }
      std::copy(part.begin(), part.end(), host_c.begin() + int64_t(e) * m * n);
      k0 += k;
    }
  }

  a = DeviceBuffer(std::max<size_t>(host_a.size(), 16));
  b = DeviceBuffer(std::max<size_t>(host_b.size(), 16));
  sa_k_major = DeviceBuffer(std::max<size_t>(host_sa.size() * 4, 16));
  sb_k_major = DeviceBuffer(std::max<size_t>(host_sb.size() * 4, 16));
  sa_mn_major = DeviceBuffer(std::max<size_t>(sa_mn.size() * 4, 16));
  sb = DeviceBuffer(std::max<size_t>(sb_mn.size() * 4, 16));
  if (sum_k_ > 0) {
    a.upload(host_a);
    b.upload(host_b);
    sa_k_major.upload(host_sa);
    sb_k_major.upload(host_sb);
    sa_mn_major.upload(sa_mn);
    sb.upload(sb_mn);
  }
  d = DeviceBuffer(std::max<size_t>(size_t(rows_ * n * 4), 16));
  layout_buffer = DeviceBuffer(layout_.size() * 4);
  layout_buffer.upload(layout_);
  workspace = DeviceBuffer(size_t(k_grouped_workspace_bytes()));
}

void GemmProblem::refresh_row_groups() {
  row_group_.assign(size_t(rows_), -1);
  if (shape_.kind == GemmKind::kNormal) {
    std::fill(row_group_.begin(), row_group_.end(), 0);
  } else if (shape_.kind == GemmKind::kGroupedK) {
    for (int64_t r = 0; r < rows_; ++r) row_group_[size_t(r)] = int(r / shape_.m);
  } else if (shape_.kind == GemmKind::kGroupedContiguous) {
    for (int64_t r = 0; r < rows_; ++r) row_group_[size_t(r)] = layout_[size_t(r)] >= 0 && layout_[size_t(r)] < shape_.groups ? layout_[size_t(r)] : -1;
  } else if (shape_.kind == GemmKind::kGroupedContiguousPsum) {
    // Group g: rows [align(end[g-1]), end[g]) of those that exist (an invalid end keeps no row beyond them).
    int64_t start = 0;
    for (int grp = 0; grp < shape_.groups; ++grp) {
      const int64_t end = std::min<int64_t>(std::max<int64_t>(layout_[size_t(grp)], start), rows_);
      for (int64_t r = start; r < end; ++r) row_group_[size_t(r)] = grp;
      start = reference::align_up(std::max(end, start), m_alignment_);
    }
  } else {
    for (int grp = 0; grp < shape_.groups; ++grp) {
      const int64_t valid = std::clamp<int64_t>(layout_[size_t(grp)], 0, shape_.m);
      for (int64_t r = 0; r < valid; ++r) row_group_[size_t(grp * shape_.m + r)] = grp;
    }
  }
}

int64_t GemmProblem::valid_rows() const {
  return std::count_if(row_group_.begin(), row_group_.end(), [](int g) { return g >= 0; });
}

void GemmProblem::run(bool k_major, cudaStream_t stream) {
  const int64_t kb_ = kb(), nb_ = nb(), n = shape_.n, k = shape_.k;
  const Stream s = reinterpret_cast<Stream>(stream);
  if (shape_.kind == GemmKind::kGroupedMasked) {
    const int64_t g = shape_.groups, mm = shape_.m;
    const TensorView va = view(a, DType::kFloat8E4M3, {g, mm, k});
    const TensorView vsa = k_major ? view(sa_k_major, DType::kFloat32, {g, mm, kb_})
                                   : TensorView::strided(sa_mn_major.get(), DType::kFloat32, {g, mm, kb_},
                                                         {kb_ * m_pad_, 1, m_pad_});
    int expected = 0;
    for (int v : masked_m_) expected = std::max(expected, v);
    m_grouped_gemm_fp8_fp8_bf16_nt_masked(va, vsa, view(b, DType::kFloat8E4M3, {g, n, k}),
                                          view(sb, DType::kFloat32, {g, nb_, kb_}), view(d, DType::kBFloat16, {g, mm, n}),
                                          view(layout_buffer, DType::kInt32, {g}), std::max(expected, 1), s);
    return;
  }
  if (shape_.kind == GemmKind::kGroupedK) {
    // SA and SB are MN-major whatever `k_major` asks (the kind takes no other layout).
    const int64_t g = shape_.groups, m = shape_.m, sum_kb = sum_k_ / 128;
    k_grouped_gemm_fp8_fp8_f32_nt(
        view(a, DType::kFloat8E4M3, {m * sum_k_}),
        TensorView::strided(sa_mn_major.get(), DType::kFloat32, {m, sum_kb}, {1, m}),
        view(b, DType::kFloat8E4M3, {n * sum_k_}),
        TensorView::strided(sb.get(), DType::kFloat32, {n, sum_kb}, {1, n}), view(d, DType::kFloat32, {g, m, n}), ks_,
        view(layout_buffer, DType::kInt32, {g}), accumulate_,
        view(workspace, DType::kInt32, {int64_t(workspace.size() / 4)}), s);
    return;
  }
  const TensorView va = view(a, DType::kFloat8E4M3, {rows_, k});
  const TensorView vsa = k_major ? view(sa_k_major, DType::kFloat32, {rows_, kb_})
                                 : TensorView::strided(sa_mn_major.get(), DType::kFloat32, {rows_, kb_}, {1, m_pad_});
  if (shape_.wgrad) {
    const TensorView vsb = TensorView::strided(sb.get(), DType::kFloat32, {n, kb_}, {1, sb_n_pad()});
    if (bf16_output_) {
      gemm_fp8_fp8_nt(va, vsa, view(b, DType::kFloat8E4M3, {n, k}), vsb, view(d, DType::kBFloat16, {rows_, n}),
                      std::nullopt, s);
      return;
    }
    const TensorView vd = view(d, DType::kFloat32, {rows_, n});
    const TensorView vc = c_aliases_d_ ? vd : view(c, DType::kFloat32, {rows_, n});
    gemm_fp8_fp8_nt(va, vsa, view(b, DType::kFloat8E4M3, {n, k}), vsb, vd, vc, s);
    return;
  }
  const TensorView vd = view(d, DType::kBFloat16, {rows_, n});
  if (shape_.kind == GemmKind::kNormal) {
    gemm_fp8_fp8_bf16_nt(va, vsa, view(b, DType::kFloat8E4M3, {n, k}), view(sb, DType::kFloat32, {nb_, kb_}), vd, s);
  } else if (shape_.kind == GemmKind::kGroupedContiguous) {
    const int64_t g = shape_.groups;
    m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(va, vsa, view(b, DType::kFloat8E4M3, {g, n, k}),
                                              view(sb, DType::kFloat32, {g, nb_, kb_}), vd,
                                              view(layout_buffer, DType::kInt32, {rows_}), s, m_alignment_);
  } else {
    const int64_t g = shape_.groups;
    m_grouped_gemm_fp8_fp8_bf16_nt_contiguous_psum(va, vsa, view(b, DType::kFloat8E4M3, {g, n, k}),
                                                   view(sb, DType::kFloat32, {g, nb_, kb_}), vd,
                                                   view(layout_buffer, DType::kInt32, {g}),
                                                   int(std::max<int64_t>(1, shape_.m)), s, m_alignment_);
  }
}

void GemmProblem::poison_output(cudaStream_t stream) {
  const size_t count = size_t(rows_ * shape_.n);
  if (count == 0) return;
  if (f32_output()) {
    static_assert(kPoisonF32 == 0xFFFFFFFFu, "a byte pattern, for cudaMemsetAsync");
    if (d_holds_c()) {
      FG_CUDA_CHECK(cudaMemcpyAsync(d.get(), host_c.data(), count * 4, cudaMemcpyHostToDevice, stream));
    } else {
      FG_CUDA_CHECK(cudaMemsetAsync(d.get(), 0xFF, count * 4, stream));
    }
    FG_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  std::vector<uint16_t> pattern(count, kPoison);
  FG_CUDA_CHECK(cudaMemcpyAsync(d.get(), pattern.data(), count * 2, cudaMemcpyHostToDevice, stream));
  FG_CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::vector<uint16_t> GemmProblem::download_output() const {
  if (f32_output()) throw std::logic_error("download_output: a wgrad or kgrouped D is fp32 (download_output_f32)");
  std::vector<uint16_t> out(size_t(rows_ * shape_.n));
  if (!out.empty()) d.download(out.data(), out.size() * 2);
  return out;
}

std::vector<float> GemmProblem::download_output_f32() const {
  if (!f32_output())
    throw std::logic_error("download_output_f32: only a wgrad or kgrouped D is fp32 (download_output)");
  std::vector<float> out(size_t(rows_ * shape_.n));
  if (!out.empty()) d.download(out.data(), out.size() * 4);
  return out;
}

void GemmProblem::set_layout(const std::vector<int32_t>& values, cudaStream_t stream) {
  if (k_grouped()) throw std::logic_error("set_layout: a kgrouped problem's operands are laid out for its K_g");
  layout_ = values;
  if (shape_.kind == GemmKind::kGroupedMasked) masked_m_.assign(values.begin(), values.end());
  FG_CUDA_CHECK(cudaMemcpyAsync(layout_buffer.get(), layout_.data(), layout_.size() * 4, cudaMemcpyHostToDevice, stream));
  FG_CUDA_CHECK(cudaStreamSynchronize(stream));
  refresh_row_groups();
}

double GemmProblem::min_bytes() const {
  if (k_grouped()) {
    // Every token's row of A and B once (fp8) with its scales, and D as min_write_bytes counts it, C read with it.
    const double tokens = double(sum_k_), sum_kb = double(sum_k_ / 128);
    const double c_bytes = accumulate_ ? min_write_bytes() : 0.0;
    return tokens * double(shape_.m + shape_.n) + 4.0 * sum_kb * double(shape_.m + shape_.n) + min_write_bytes() +
           c_bytes;
  }
  const double rows = double(valid_rows());
  int used_groups = 1;
  if (shape_.kind != GemmKind::kNormal) {
    std::vector<char> used(size_t(shape_.groups), 0);
    for (int g : row_group_)
      if (g >= 0) used[size_t(g)] = 1;
    used_groups = int(std::count(used.begin(), used.end(), 1));
  }
  const double kb_ = double(kb()), nb_ = double(nb());
  // D written (bf16, or wgrad's fp32) and, for wgrad, C read (fp32); SB per 128x128 block, or wgrad's per row of B.
  const double out_bytes = f32_output() ? 8.0 : 2.0;
  const double sb_bytes = shape_.wgrad ? 4.0 * double(shape_.n) * kb_ : 4.0 * used_groups * nb_ * kb_;
  return rows * double(shape_.k) + double(used_groups) * double(shape_.n * shape_.k) +
         out_bytes * rows * double(shape_.n) + 4.0 * rows * kb_ + sb_bytes;
}

double GemmProblem::min_write_bytes() const {
  if (k_grouped()) {
    // With accumulation only the experts with tokens change; without, the call writes every D[g] (zeros first).
    const int64_t written = accumulate_ ? std::count_if(ks_.begin(), ks_.end(), [](int64_t k) { return k > 0; })
                                        : int64_t(shape_.groups);
    return 4.0 * double(written) * double(shape_.m) * double(shape_.n);
  }
  return double(output_bytes()) * double(valid_rows()) * double(shape_.n);
}

double GemmProblem::flops() const {
  if (k_grouped()) return 2.0 * double(shape_.m) * double(shape_.n) * double(sum_k_);
  return 2.0 * double(valid_rows()) * double(shape_.n) * double(shape_.k);
}

namespace {

/// fp64 results of the reference kernel, on the device, zeroed.
struct ReferenceBuffers {
  ReferenceBuffers(int64_t rows, int64_t n)
      : rows(rows),
        n(n),
        value(std::max<size_t>(size_t(rows * n * 8), 8)),
        abs_sum(std::max<size_t>(size_t(rows * n * 8), 8)) {
    FG_CUDA_CHECK(cudaMemset(value.get(), 0, value.size()));
    FG_CUDA_CHECK(cudaMemset(abs_sum.get(), 0, abs_sum.size()));
  }

  /// Enqueues the reference of rows [row, row + m) on the legacy default stream: `a` and `sa` point at that row. `sb`
  /// is [N / sb_block_rows, KB] row-major: sb_block_rows 128 (128x128 blocks) or 1 (1x128 blocks).
  void launch(int64_t row, int64_t m, const uint8_t* a, const float* sa, int64_t ld_sa, const uint8_t* b,
              const float* sb, int32_t sb_block_rows, int64_t k) {
    const CUfunction fn = jit_tool_kernel(
        "finegemm/tools/reference_gemm.cuh", "finegemm::tools::reference_gemm_kernel<64u>",
        "(const uint8_t*, const float*, int64_t, const uint8_t*, const float*, int32_t, double*, double*, int32_t, "
        "int32_t, int32_t)");
    double* v = value.as<double>() + row * n;
    double* s = abs_sum.as<double>() + row * n;
    int32_t m32 = int32_t(m), n32 = int32_t(n), k32 = int32_t(k);
    void* args[] = {&a, &sa, &ld_sa, &b, &sb, &sb_block_rows, &v, &s, &m32, &n32, &k32};
    jit::LaunchShape shape;
    shape.grid_x = unsigned((n + 63) / 64);
    shape.grid_y = unsigned((m + 63) / 64);
    shape.block_x = 256;
    jit::launch_kernel(fn, shape, nullptr, args, "reference_gemm_kernel");
  }

  /// Waits for the launches and downloads the results.
  Reference download() {
    FG_CUDA_CHECK(cudaDeviceSynchronize());
    Reference ref;
    ref.value.resize(size_t(rows * n));
    ref.abs_sum.resize(size_t(rows * n));
    if (rows * n > 0) {
      value.download(ref.value.data(), ref.value.size() * 8);
      abs_sum.download(ref.abs_sum.data(), ref.abs_sum.size() * 8);
    }
    return ref;
  }

  int64_t rows, n;
  DeviceBuffer value, abs_sum;
};

}  // namespace

Reference gpu_reference(const GemmProblem& problem) {
  const ProblemShape& shape = problem.shape();
  const int64_t rows = problem.rows(), n = shape.n, k = shape.k, kb = problem.kb(), nb = problem.nb();
  ReferenceBuffers buffers(rows, n);
  if (problem.k_grouped()) {
    // Expert by expert: A_g, SA_g, B_g and SB_g are [M, K_g], [M, KB_g], [N, K_g], [N, KB_g] row-major.
    const int64_t m = shape.m;
    int64_t k0 = 0;
    for (int e = 0; e < shape.groups; ++e) {
      const int64_t k_g = problem.expert_ks()[size_t(e)];
      if (k_g > 0)
        buffers.launch(int64_t(e) * m, m, problem.a.as<uint8_t>() + m * k0,
                       problem.sa_k_major.as<float>() + m * k0 / 128, k_g / 128, problem.b.as<uint8_t>() + n * k0,
                       problem.sb_k_major.as<float>() + n * k0 / 128, 1, k_g);
      k0 += k_g;
    }
    Reference ref = buffers.download();
    if (problem.accumulate()) reference::add_c_to_reference(ref.value, problem.host_c.data(), n, rows, n);
    return ref;
  }
  if (shape.wgrad) {
    if (rows > 0)
      buffers.launch(0, rows, problem.a.as<uint8_t>(), problem.sa_k_major.as<float>(), kb, problem.b.as<uint8_t>(),
                     problem.sb_k_major.as<float>(), 1, k);
    Reference ref = buffers.download();
    if (!problem.bf16_output()) reference::add_c_to_reference(ref.value, problem.host_c.data(), n, rows, n);
    return ref;
  }
  // One launch per run of consecutive rows of one group.
  int64_t r = 0;
  while (r < rows) {
    const int g = problem.row_group(r);
    int64_t end = r + 1;
    while (end < rows && problem.row_group(end) == g) ++end;
    if (g >= 0)
      buffers.launch(r, end - r, problem.a.as<uint8_t>() + r * k, problem.sa_k_major.as<float>() + r * kb, kb,
                     problem.b.as<uint8_t>() + int64_t(g) * n * k, problem.sb.as<float>() + int64_t(g) * nb * kb,
                     reference::kBlockN, k);
    r = end;
  }
  return buffers.download();
}

Reference cpu_reference(const GemmProblem& problem) {
  if (!problem.k_grouped())
    throw std::invalid_argument("cpu_reference: for kgrouped problems (the other kinds take gpu_reference), got " +
                                problem.shape().describe());
  return k_grouped_reference(problem.host_a.data(), problem.host_sa.data(), problem.host_b.data(),
                             problem.host_sb.data(), problem.accumulate() ? problem.host_c.data() : nullptr,
                             problem.expert_ks(), problem.shape().m, problem.shape().n);
}

Reference k_grouped_reference(const uint8_t* a, const float* sa, const uint8_t* b, const float* sb, const float* c,
                              const std::vector<int64_t>& ks, int64_t m, int64_t n) {
  Reference ref;
  ref.value.assign(ks.size() * size_t(m * n), 0.0);
  ref.abs_sum.assign(ref.value.size(), 0.0);
  int64_t k0 = 0;
  for (size_t e = 0; e < ks.size(); ++e) {
    const int64_t k = ks[e], offset = int64_t(e) * m * n;
    std::vector<double> value(size_t(m * n), 0.0), abs_sum;
    if (k > 0) {
      value = reference::gemm_nt_reference_sb_per_row(a + m * k0, sa + m * k0 / 128, b + n * k0, sb + n * k0 / 128,
                                                      m, n, k, &abs_sum);
      std::copy(abs_sum.begin(), abs_sum.end(), ref.abs_sum.begin() + offset);
    }
    if (c != nullptr) reference::add_c_to_reference(value, c + offset, n, m, n);
    std::copy(value.begin(), value.end(), ref.value.begin() + offset);
    k0 += k;
  }
  return ref;
}

Reference gpu_reference_dense(const void* a, const float* sa, int64_t ld_sa, const void* b, const float* sb, int64_t m,
                              int64_t n, int64_t k) {
  ReferenceBuffers buffers(m, n);
  if (m > 0)
    buffers.launch(0, m, static_cast<const uint8_t*>(a), sa, ld_sa, static_cast<const uint8_t*>(b), sb,
                   reference::kBlockN, k);
  return buffers.download();
}

Verdict check_output(const GemmProblem& problem, const Reference& ref, const std::vector<uint16_t>& out,
                     double max_diff, double accum_tolerance) {
  const int64_t rows = problem.rows(), n = problem.shape().n;
  if (problem.f32_output()) throw std::invalid_argument("check_output: a wgrad or kgrouped D is fp32");
  Verdict v;
  v.ok = true;
  std::ostringstream os;
  int64_t r = 0;
  while (r < rows) {
    const int g = problem.row_group(r);
    int64_t end = r + 1;
    while (end < rows && problem.row_group(end) == g) ++end;
    if (g < 0) {
      for (int64_t i = r * n; i < end * n; ++i)
        if (out[size_t(i)] != GemmProblem::kPoison) ++v.touched_invalid;
    } else {
      const reference::CheckResult c =
          reference::check_bf16_output(out.data() + r * n, n, ref.value.data() + r * n, ref.abs_sum.data() + r * n,
                                       end - r, n, max_diff, accum_tolerance);
      v.worst_diff = std::max(v.worst_diff, std::isnan(c.diff) ? 1.0 : c.diff);
      v.bad_elements += c.num_bad;
      if (!c.ok) {
        v.ok = false;
        if (os.tellp() < 2000) os << "rows [" << r << ", " << end << ") group " << g << ": " << c.summary() << "\n";
      }
    }
    r = end;
  }
  if (v.touched_invalid > 0) {
    v.ok = false;
    os << v.touched_invalid << " elements of rows that must stay untouched were written\n";
  }
  std::ostringstream head;
  head << (v.ok ? "ok" : "FAIL") << " diff=" << v.worst_diff << " bad=" << v.bad_elements;
  v.summary = head.str() + (os.str().empty() ? "" : "\n" + os.str());
  return v;
}

namespace {

Verdict verdict_of(const reference::CheckResult& c) {
  Verdict v;
  v.ok = c.ok;
  v.worst_diff = std::isnan(c.diff) ? 1.0 : c.diff;
  v.bad_elements = c.num_bad;
  std::ostringstream head;
  head << (v.ok ? "ok" : "FAIL") << " diff=" << v.worst_diff << " bad=" << v.bad_elements;
  v.summary = head.str() + (v.ok ? "" : "\n" + c.summary() + "\n");
  return v;
}

}  // namespace

Verdict check_output(const GemmProblem& problem, const Reference& ref, const std::vector<float>& out,
                     double max_diff, double accum_tolerance) {
  const int64_t rows = problem.rows(), n = problem.shape().n;
  if (!problem.f32_output()) throw std::invalid_argument("check_output: fp32 outputs are wgrad's and kgrouped's");
  if (out.size() != size_t(rows * n) || ref.value.size() != size_t(rows * n))
    throw std::invalid_argument("check_output: D and its reference must hold M x N elements");
  if (problem.k_grouped())
    return check_k_grouped_output(out, ref, problem.expert_ks(), problem.shape().m, n, max_diff, accum_tolerance);
  return verdict_of(reference::check_f32_output(out.data(), n, ref.value.data(), ref.abs_sum.data(), rows, n,
                                                max_diff, accum_tolerance));
}

Verdict check_k_grouped_output(const std::vector<float>& out, const Reference& ref, const std::vector<int64_t>& ks,
                               int64_t m, int64_t n, double max_diff, double accum_tolerance) {
  const size_t size = ks.size() * size_t(m * n);
  if (out.size() != size || ref.value.size() != size || ref.abs_sum.size() != size)
    throw std::invalid_argument("check_k_grouped_output: D and its reference must hold G x M x N elements");
  Verdict v;
  v.ok = true;
  std::ostringstream os;
  for (size_t e = 0; e < ks.size(); ++e) {
    const int64_t offset = int64_t(e) * m * n;
    if (ks[e] == 0) {
      int64_t changed = 0;
      for (int64_t i = offset; i < offset + m * n; ++i) changed += !(out[size_t(i)] == float(ref.value[size_t(i)]));
      const std::vector<double> got(out.begin() + offset, out.begin() + offset + m * n);
      const double diff = reference::diff_metric(ref.value.data() + offset, got.data(), m * n);
      v.worst_diff = std::max(v.worst_diff, std::isnan(diff) ? 1.0 : diff);
      v.bad_elements += changed;
      if (changed > 0) {
        v.ok = false;
        if (os.tellp() < 2000)
          os << "expert " << e << " (no tokens): " << changed
             << " elements of D[g] differ from C (zero without accumulation), which it must hold\n";
      }
      continue;
    }
    const reference::CheckResult c =
        reference::check_f32_output(out.data() + offset, n, ref.value.data() + offset, ref.abs_sum.data() + offset, m,
                                    n, max_diff, accum_tolerance);
    v.worst_diff = std::max(v.worst_diff, std::isnan(c.diff) ? 1.0 : c.diff);
    v.bad_elements += c.num_bad;
    if (!c.ok) {
      v.ok = false;
      if (os.tellp() < 2000) os << "expert " << e << " (K=" << ks[e] << "): " << c.summary() << "\n";
    }
  }
  std::ostringstream head;
  head << (v.ok ? "ok" : "FAIL") << " diff=" << v.worst_diff << " bad=" << v.bad_elements;
  v.summary = head.str() + (os.str().empty() ? "" : "\n" + os.str());
  return v;
}

Verdict check_download(const GemmProblem& problem, const Reference& ref) {
  return problem.f32_output() ? check_output(problem, ref, problem.download_output_f32())
                         : check_output(problem, ref, problem.download_output());
}

Verdict check_dense_output(const Reference& ref, const std::vector<uint16_t>& out, int64_t m, int64_t n,
                           double max_diff, double accum_tolerance) {
  if (out.size() != size_t(m * n) || ref.value.size() != size_t(m * n))
    throw std::invalid_argument("check_dense_output: D and its reference must hold M x N elements");
  return verdict_of(reference::check_bf16_output(out.data(), n, ref.value.data(), ref.abs_sum.data(), m, n, max_diff,
                                                 accum_tolerance));
}

}  // namespace finegemm::tools
