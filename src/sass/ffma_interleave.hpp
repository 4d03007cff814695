// The FFMA interleave pass: a cubin post-pass for sm_90 that, in long runs of consecutive FFMAs (the promotion step
// of the GEMM kernels), sets the scheduler's yield hint on every other FFMA and clears its operand-B reuse flag, so
// that the other math warpgroup's wgmma can issue in between. See docs/sass-pass.md for the encoding facts and how
// they were verified.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace finegemm::sass {

/// Version of the pass's behavior; part of the JIT cache key. Bump on any change to what the pass writes.
inline constexpr int kPassVersion = 1;

/// Which FFMAs the pass modifies.
struct InterleaveOptions {
  int min_run_length = 8;        ///< runs of fewer consecutive FFMAs are left alone (>= 1)
  double fraction = 9.0 / 16.0;  ///< only the first floor(length * fraction) FFMAs of a run are candidates ([0, 1])
};

/// One run of at least `min_run_length` consecutive FFMAs.
struct FfmaRun {
  std::string kernel;     ///< the kernel (symbol) whose `.text.<kernel>` section holds the run
  uint64_t first_offset;  ///< byte offset of the run's first FFMA within that section
  int length;             ///< number of FFMAs in the run
  int modified;           ///< number of FFMAs of the run whose encoding the pass changes
};

/// What the pass found and changed.
struct InterleaveReport {
  int num_kernels = 0;       ///< code sections scanned
  int num_ffma = 0;          ///< FFMAs (register form) in all code sections
  std::vector<FfmaRun> runs; ///< the qualifying runs, in section-table then offset order
  int num_modified = 0;      ///< FFMAs whose encoding changes, summed over the runs
  std::string to_string() const;
};

/// Positions (0-based, within a run of `length` FFMAs) the rule selects: the odd positions below
/// floor(length * fraction), or none when length < min_run_length. Throws finegemm::Error for invalid options.
std::vector<int> interleave_positions(int length, const InterleaveOptions& options);

/// Returns the rewritten cubin. Throws finegemm::Error (kInvalidArgument) for a truncated / non-ELF / non-sm_90 input
/// or invalid options. A cubin with no qualifying FFMA runs comes back byte-identical. Only the yield bit (109) and
/// the operand-B reuse bit (123) of selected FFMAs ever change.
std::vector<char> interleave_ffma(const std::vector<char>& cubin, const InterleaveOptions& options,
                                  InterleaveReport* report = nullptr);

/// Analysis only: the report interleave_ffma() would give, without rewriting anything.
InterleaveReport analyze_ffma(const std::vector<char>& cubin, const InterleaveOptions& options);

}  // namespace finegemm::sass
