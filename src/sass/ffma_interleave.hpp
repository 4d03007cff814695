// The FFMA interleave pass: a cubin post-pass for sm_90 that, in long runs of consecutive FFMAs (the promotion step
// of the GEMM kernels), sets the scheduler's yield hint on every other FFMA and clears its operand-B reuse flag, so
// that the other math warpgroup's wgmma can issue in between. A second mode (kSteady) does the opposite: no FFMA of
// a run yields, and each keeps the operands the next one reads in the same slot in the reuse cache. See
// docs/sass-pass.md for the encoding facts and how they were verified.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace finegemm::sass {

/// Version of the pass's behavior; part of the JIT cache key. Bump on any change to what the pass writes.
inline constexpr int kPassVersion = 2;

/// What the pass does to a run of FFMAs.
enum class FfmaPassMode {
  kInterleave,  ///< every other FFMA of the run's head yields and drops its operand-B reuse (the seed's trick)
  kSteady,      ///< no FFMA of the run but the last yields; each sets exactly the reuse flags the next one can use
};

/// Which FFMAs the pass modifies.
struct InterleaveOptions {
  int min_run_length = 8;        ///< runs of fewer consecutive FFMAs are left alone (>= 1)
  double fraction = 9.0 / 16.0;  ///< kInterleave: only the first floor(length * fraction) FFMAs are candidates ([0, 1])
  FfmaPassMode mode = FfmaPassMode::kInterleave;
};

/// "interleave" or "steady".
const char* to_string(FfmaPassMode mode);

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
/// the reuse bits (kInterleave: 123 only; kSteady: 122-124) of FFMAs in qualifying runs ever change.
std::vector<char> interleave_ffma(const std::vector<char>& cubin, const InterleaveOptions& options,
                                  InterleaveReport* report = nullptr);

/// Analysis only: the report interleave_ffma() would give, without rewriting anything.
InterleaveReport analyze_ffma(const std::vector<char>& cubin, const InterleaveOptions& options);

}  // namespace finegemm::sass
