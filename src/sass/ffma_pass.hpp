// The steady FFMA pass: a cubin post-pass for sm_90 over the long runs of consecutive FFMAs that the promotion step of
// the GEMM kernels compiles to. An FFMA of a run yields its issue slot only every kYieldEvery FFMAs (ptxas has every
// other one yield), and each other FFMA keeps in the operand reuse cache the registers the next FFMA of the run reads
// in the same slot. Only control bits change: no instruction is added, moved or re-encoded otherwise. See
// docs/sass-pass.md for the encoding facts and how they were verified.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace finegemm::sass {

/// Version of what the pass writes; part of the JIT cache key. Bump on any change to the bytes it produces.
inline constexpr int kPassVersion = 4;

/// FFMA j (from 0) of a run yields, with no reuse flag, where (j + 1) is a multiple of this (the run's last keeps its
/// own encoding): the other math warpgroup, whose warps share the schedulers, then gets its issue slot within 32
/// FFMAs instead of waiting for the end of a 64-FFMA promotion. Measured on an H200 against no yield in the run
/// (kernel us, same run, two rounds each): 4096x7168x16384 636.3 against 643.3, 4096x24576x1536 223.6 against 228.3,
/// contiguous 8x4096x4096x7168 with K-major scales 1484.3 against 1512.1; no seed shape slower by more than its
/// run-to-run spread.
inline constexpr int kYieldEvery = 32;

/// Which runs the pass rewrites.
struct SteadyPassOptions {
  int min_run_length = 8;  ///< runs of fewer consecutive FFMAs are left alone (>= 1)
};

/// One run of at least `min_run_length` consecutive FFMAs.
struct FfmaRun {
  std::string kernel;     ///< the kernel (symbol) whose `.text.<kernel>` section holds the run
  uint64_t first_offset;  ///< byte offset of the run's first FFMA within that section
  int length;             ///< number of FFMAs in the run
  int modified;           ///< number of FFMAs of the run whose encoding the pass changes
};

/// What the pass found and changed.
struct PassReport {
  int num_kernels = 0;        ///< code sections scanned
  int num_ffma = 0;           ///< FFMAs (register form) in all code sections
  std::vector<FfmaRun> runs;  ///< the qualifying runs, in section-table then offset order
  int num_modified = 0;       ///< FFMAs whose encoding changes, summed over the runs
  std::string to_string() const;
};

/// The rewritten cubin (byte-identical when no run qualifies). Throws finegemm::Error (kInvalidArgument) for a
/// truncated / non-ELF / non-sm_90 input or invalid options. Only bit 109 (set: no yield; clear: yield) and the reuse
/// bits 122-124 of the FFMAs of qualifying runs, the last of each run excepted, ever change.
std::vector<char> steady_ffma_pass(const std::vector<char>& cubin, const SteadyPassOptions& options = {},
                                   PassReport* report = nullptr);

/// What steady_ffma_pass would find and change, without rewriting.
PassReport analyze_ffma_runs(const std::vector<char>& cubin, const SteadyPassOptions& options = {});

}  // namespace finegemm::sass
