// The dequantized fp64 reference GEMM (NT), tiled and multithreaded.
//
// Work is split into output tiles of kTileM x kTileN; threads take tiles from an atomic counter. For each 128-wide K
// block a tile decodes its A rows and B rows to fp64 once (zero-padded to full tiles and full K blocks), computes
// the exact block sums S with a vectorized register-blocked kernel, then adds (SA*SB) * S into the output in
// ascending kb order. Only the block-sum kernel is compiled per instruction set (baseline and AVX2+FMA on x86-64):
// block sums are exact, so the instruction set, fusing and summation order cannot change them, and the rounding steps
// (scaling and the sum over kb) are plain scalar code shared by every path.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "reference/reference.hpp"

namespace finegemm::reference {

namespace {

constexpr int kTileM = 64;
constexpr int kTileN = 64;  // divides kBlockN, so every tile lies in a single weight scale block
static_assert(kBlockN % kTileN == 0);

// S[i, j] = sum_k a[i, k] * b[j, k] (and the same over |a*b|) for a kTileM x kBlockK block of A and a kTileN x kBlockK
// block of B, both row-major with row length kBlockK and zero-padded. s and s_abs are [kTileM, kTileN]; s_abs may be
// null. Only rows i < num_rows and columns j < num_cols are needed (more may be written, up to the register blocks).
using BlockSumsFn = void (*)(const double* a, const double* b, int num_rows, int num_cols, double* s, double* s_abs);

// fp64 vectors of kWidth lanes (GCC/Clang vector extensions) and their bit patterns.
template <int kWidth>
struct VecTypes;
template <>
struct VecTypes<2> {
  typedef double Vec __attribute__((vector_size(16)));
  typedef uint64_t Bits __attribute__((vector_size(16)));
};
template <>
struct VecTypes<4> {
  typedef double Vec __attribute__((vector_size(32)));
  typedef uint64_t Bits __attribute__((vector_size(32)));
};

// One kRegM x kRegN register block over K (kRegM A rows x kRegN B rows), with vectors of kWidth lanes.
template <int kWidth, int kRegM, int kRegN, bool kWithAbs>
inline __attribute__((always_inline)) void register_block(const double* a, const double* b, double* s,
                                                          double* s_abs) {
  using Vec = typename VecTypes<kWidth>::Vec;
  using Bits = typename VecTypes<kWidth>::Bits;
  Vec acc[kRegM][kRegN] = {};
  Vec acc_abs[kRegM][kRegN] = {};
  Bits abs_mask;
#pragma GCC unroll 4
  for (int l = 0; l < kWidth; ++l) abs_mask[l] = 0x7FFFFFFFFFFFFFFFull;
  // NOTE: the fixed-trip loops are unrolled so that acc, acc_abs, va and vb live in registers.
  for (int k = 0; k < kBlockK; k += kWidth) {
    Vec va[kRegM], vb[kRegN];
#pragma GCC unroll 8
    for (int i = 0; i < kRegM; ++i) std::memcpy(&va[i], a + i * kBlockK + k, sizeof(Vec));
#pragma GCC unroll 8
    for (int j = 0; j < kRegN; ++j) std::memcpy(&vb[j], b + j * kBlockK + k, sizeof(Vec));
#pragma GCC unroll 8
    for (int i = 0; i < kRegM; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < kRegN; ++j) acc[i][j] += va[i] * vb[j];
    if constexpr (kWithAbs) {
#pragma GCC unroll 8
      for (int i = 0; i < kRegM; ++i) va[i] = (Vec)((Bits)va[i] & abs_mask);
#pragma GCC unroll 8
      for (int j = 0; j < kRegN; ++j) vb[j] = (Vec)((Bits)vb[j] & abs_mask);
#pragma GCC unroll 8
      for (int i = 0; i < kRegM; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < kRegN; ++j) acc_abs[i][j] += va[i] * vb[j];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kRegM; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < kRegN; ++j) {
      double sum = 0, sum_abs = 0;
#pragma GCC unroll 4
      for (int l = 0; l < kWidth; ++l) {
        sum += acc[i][j][l];
        sum_abs += acc_abs[i][j][l];
      }
      s[i * kTileN + j] = sum;
      if constexpr (kWithAbs) s_abs[i * kTileN + j] = sum_abs;
    }
  }
}

// The whole tile, in register blocks. The accumulators (twice as many with the absolute sums) and the kRegM + kRegN
// operand vectors must fit in the 16 vector registers.
template <int kWidth, int kRegM, int kRegN, bool kWithAbs>
inline __attribute__((always_inline)) void block_sums_impl(const double* a, const double* b, int num_rows,
                                                           int num_cols, double* s, double* s_abs) {
  static_assert(kTileM % kRegM == 0 && kTileN % kRegN == 0);
  for (int i = 0; i < num_rows; i += kRegM)
    for (int j = 0; j < num_cols; j += kRegN)
      register_block<kWidth, kRegM, kRegN, kWithAbs>(a + i * kBlockK, b + j * kBlockK, s + i * kTileN + j,
                                                      kWithAbs ? s_abs + i * kTileN + j : nullptr);
}

// Register blocks measured best on 2-core AMD EPYC (AVX2): 2x4 for the sums alone, 2x2 with the absolute sums.
template <int kWidth>
inline __attribute__((always_inline)) void block_sums_dispatch(const double* a, const double* b, int num_rows,
                                                               int num_cols, double* s, double* s_abs) {
  if (s_abs != nullptr)
    block_sums_impl<kWidth, 2, 2, true>(a, b, num_rows, num_cols, s, s_abs);
  else
    block_sums_impl<kWidth, 2, 4, false>(a, b, num_rows, num_cols, s, nullptr);
}

void block_sums_baseline(const double* a, const double* b, int num_rows, int num_cols, double* s, double* s_abs) {
  block_sums_dispatch<2>(a, b, num_rows, num_cols, s, s_abs);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) void block_sums_avx2(const double* a, const double* b, int num_rows,
                                                         int num_cols, double* s, double* s_abs) {
  block_sums_dispatch<4>(a, b, num_rows, num_cols, s, s_abs);
}
#endif

BlockSumsFn pick_block_sums() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return block_sums_avx2;
#endif
  return block_sums_baseline;
}

struct Problem {
  const uint8_t* a;
  const float* sa;
  const uint8_t* b;
  const float* sb;
  bool sb_per_row;  // SB [n, KB] (1x128 blocks of B) rather than [ceil(n/128), KB]
  int64_t m, n, k, lda, num_k_blocks;
  double* d;
  double* abs_sum;  // may be null
};

struct Workspace {
  std::vector<double> a_block = std::vector<double>(kTileM * kBlockK);  // (kTileM, kBlockK)
  std::vector<double> b_block = std::vector<double>(kTileN * kBlockK);  // (kTileN, kBlockK)
  std::vector<double> s = std::vector<double>(kTileM * kTileN);         // (kTileM, kTileN)
  std::vector<double> s_abs = std::vector<double>(kTileM * kTileN);     // (kTileM, kTileN)
  std::vector<double> sb = std::vector<double>(kTileN);                  // (kTileN): SB of each column, one K block
};

// Decodes rows [0, num_rows) x K block kb of an fp8 matrix (row stride ld) into out (tile_rows, kBlockK), zero-padded.
void decode_block(const uint8_t* codes, int64_t ld, int64_t num_rows, int64_t kb, int64_t k, const double* table,
                  int tile_rows, double* out) {
  const int64_t k0 = kb * kBlockK;
  const int64_t width = std::min<int64_t>(kBlockK, k - k0);
  std::fill(out, out + tile_rows * kBlockK, 0.0);
  for (int64_t r = 0; r < num_rows; ++r) {
    const uint8_t* src = codes + r * ld + k0;
    double* dst = out + r * kBlockK;
    for (int64_t c = 0; c < width; ++c) dst[c] = table[src[c]];
  }
}

void run_tile(const Problem& p, int64_t tile_m, int64_t tile_n, const double* table, BlockSumsFn block_sums,
              Workspace& ws) {
  const int64_t m0 = tile_m * kTileM, n0 = tile_n * kTileN;
  const int64_t rows = std::min<int64_t>(kTileM, p.m - m0);
  const int64_t cols = std::min<int64_t>(kTileN, p.n - n0);
  const int64_t n_block = n0 / kBlockN;
  const bool with_abs = p.abs_sum != nullptr;
  for (int64_t kb = 0; kb < p.num_k_blocks; ++kb) {
    decode_block(p.a + m0 * p.lda, p.lda, rows, kb, p.k, table, kTileM, ws.a_block.data());
    decode_block(p.b + n0 * p.k, p.k, cols, kb, p.k, table, kTileN, ws.b_block.data());
    block_sums(ws.a_block.data(), ws.b_block.data(), static_cast<int>(rows), static_cast<int>(cols), ws.s.data(),
               with_abs ? ws.s_abs.data() : nullptr);
    // SB per column of the tile: one value (128x128 blocks; kTileN divides kBlockN) or one per row of B.
    for (int64_t j = 0; j < cols; ++j)
      ws.sb[j] = p.sb[(p.sb_per_row ? n0 + j : n_block) * p.num_k_blocks + kb];
    for (int64_t i = 0; i < rows; ++i) {
      const double sa = p.sa[(m0 + i) * p.num_k_blocks + kb];
      double* d_row = p.d + (m0 + i) * p.n + n0;
      const double* s_row = ws.s.data() + i * kTileN;
      // SA * SB is exact in fp64 (two 24-bit significands).
      for (int64_t j = 0; j < cols; ++j) d_row[j] += (sa * ws.sb[j]) * s_row[j];
      if (with_abs) {
        double* abs_row = p.abs_sum + (m0 + i) * p.n + n0;
        const double* s_abs_row = ws.s_abs.data() + i * kTileN;
        for (int64_t j = 0; j < cols; ++j) abs_row[j] += std::fabs(sa * ws.sb[j]) * s_abs_row[j];
      }
    }
  }
}

void require(bool condition, const std::string& message) {
  if (!condition) throw std::invalid_argument("finegemm::reference::gemm_nt_reference: " + message);
}

std::vector<double> gemm_reference(const uint8_t* a, const float* sa_k_major, const uint8_t* b, const float* sb,
                                   bool sb_per_row, int64_t m, int64_t n, int64_t k, std::vector<double>* abs_sum,
                                   int64_t lda) {
  require(m >= 0 && n >= 0 && k >= 0,
          "negative shape " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
  if (lda == 0) lda = k;
  require(lda >= k, "lda must be >= k, got lda=" + std::to_string(lda) + ", k=" + std::to_string(k));
  const bool empty = m == 0 || n == 0 || k == 0;
  require(empty || (a != nullptr && sa_k_major != nullptr && b != nullptr && sb != nullptr), "null input pointer");

  std::vector<double> d(static_cast<size_t>(m * n), 0.0);
  if (abs_sum != nullptr) abs_sum->assign(static_cast<size_t>(m * n), 0.0);
  if (empty) return d;

  std::array<double, 256> table;
  for (int code = 0; code < 256; ++code) table[code] = e4m3_to_float(static_cast<uint8_t>(code));

  const Problem problem{a, sa_k_major, b, sb, sb_per_row, m, n, k, lda, ceil_div(k, kBlockK), d.data(),
                        abs_sum != nullptr ? abs_sum->data() : nullptr};
  const int64_t num_tiles_n = ceil_div(n, kTileN);
  const int64_t num_tiles = ceil_div(m, kTileM) * num_tiles_n;
  const BlockSumsFn block_sums = pick_block_sums();

  const int64_t num_threads =
      std::clamp<int64_t>(static_cast<int64_t>(std::thread::hardware_concurrency()), 1, num_tiles);
  std::vector<Workspace> workspaces(static_cast<size_t>(num_threads));
  std::atomic<int64_t> next_tile{0};
  auto worker = [&](Workspace& ws) {
    for (int64_t tile = next_tile.fetch_add(1); tile < num_tiles; tile = next_tile.fetch_add(1))
      run_tile(problem, tile / num_tiles_n, tile % num_tiles_n, table.data(), block_sums, ws);
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(num_threads - 1));
  try {
    for (int64_t t = 1; t < num_threads; ++t) threads.emplace_back(worker, std::ref(workspaces[t]));
  } catch (const std::system_error&) {
    // NOTE: no more threads to be had; the threads already started and this one still take every tile.
  }
  worker(workspaces[0]);
  for (std::thread& thread : threads) thread.join();
  return d;
}

}  // namespace

std::vector<double> gemm_nt_reference(const uint8_t* a, const float* sa_k_major, const uint8_t* b, const float* sb,
                                      int64_t m, int64_t n, int64_t k, std::vector<double>* abs_sum, int64_t lda) {
  return gemm_reference(a, sa_k_major, b, sb, false, m, n, k, abs_sum, lda);
}

std::vector<double> gemm_nt_reference_sb_per_row(const uint8_t* a, const float* sa_k_major, const uint8_t* b,
                                                 const float* sb_per_row, int64_t m, int64_t n, int64_t k,
                                                 std::vector<double>* abs_sum, int64_t lda) {
  return gemm_reference(a, sa_k_major, b, sb_per_row, true, m, n, k, abs_sum, lda);
}

void add_c_to_reference(std::vector<double>& ref, const float* c, int64_t ld_c, int64_t m, int64_t n) {
  if (m < 0 || n < 0 || ld_c < n || ref.size() != static_cast<size_t>(m * n) || (m * n > 0 && c == nullptr))
    throw std::invalid_argument("finegemm::reference::add_c_to_reference: bad arguments (m=" + std::to_string(m) +
                                ", n=" + std::to_string(n) + ", ld_c=" + std::to_string(ld_c) +
                                ", reference of " + std::to_string(ref.size()) + " elements)");
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) ref[static_cast<size_t>(i * n + j)] += static_cast<double>(c[i * ld_c + j]);
}

}  // namespace finegemm::reference
