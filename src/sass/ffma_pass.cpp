#include "sass/ffma_pass.hpp"

#include <array>
#include <sstream>

#include "common/error.hpp"
#include "sass/elf.hpp"

namespace finegemm::sass {

namespace {

constexpr const char* kWhere = "sass::steady_ffma_pass";
constexpr int kSupportedSm = 90;

// A Hopper SASS instruction: 128 bits, stored as two little-endian 64-bit words, low word first.
constexpr uint64_t kInstructionBytes = 16;

// Low word: bits 0-11 hold the opcode together with the operand form. 0x223 is FFMA with four register operands
// (FFMA Rd, Ra, Rb, Rc); the immediate, constant-bank and uniform-register forms have other values here
// (0x423, 0x623, 0x823, 0xa23, 0xc23, 0xe23) and are not matched.
constexpr uint64_t kOpcodeMask = 0xfff;
constexpr uint64_t kOpcodeFfmaRegisters = 0x223;

// High word: instruction bit n is bit (n - 64) here.
constexpr int kStallShift = 105 - 64;                 // stall count, bits 105-108
constexpr uint64_t kStallMask = 0xf;
constexpr uint64_t kNoYieldBit = 1ull << (109 - 64);  // 1: do not yield; 0: yield
constexpr uint64_t kReuseA = 1ull << (122 - 64);      // operand reuse flags, bits 122-124
constexpr uint64_t kReuseB = 1ull << (123 - 64);
constexpr uint64_t kReuseC = 1ull << (124 - 64);

// Register operands of an FFMA in register form: Rd (bits 16-23), and the sources A (24-31), B (32-39), C (64-71).
constexpr uint32_t kZeroRegister = 255;  // RZ

uint64_t load_word(const char* at) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(static_cast<uint8_t>(at[i])) << (8 * i);
  return value;
}

void store_word(char* at, uint64_t value) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

bool is_ffma_registers(uint64_t low_word) { return (low_word & kOpcodeMask) == kOpcodeFfmaRegisters; }

uint32_t ffma_destination(uint64_t low_word) { return (low_word >> 16) & 0xff; }

std::array<uint32_t, 3> ffma_sources(uint64_t low_word, uint64_t high_word) {
  return {uint32_t((low_word >> 24) & 0xff), uint32_t((low_word >> 32) & 0xff), uint32_t(high_word & 0xff)};
}

// The high word of an FFMA followed by another FFMA of its run: no yield, and a reuse flag on each source slot whose
// register the next FFMA reads in the same slot (not RZ, and not the register this one writes).
// NOTE: an FFMA with stall count 0 is left as compiled: ptxas emits none in runs, and nvdisasm's rules for stall 0
// with reuse flags were probed only for yielding FFMAs.
uint64_t steady_high_word(uint64_t low_word, uint64_t high_word, uint64_t next_low_word, uint64_t next_high_word) {
  if (((high_word >> kStallShift) & kStallMask) == 0) return high_word;
  const auto sources = ffma_sources(low_word, high_word);
  const auto next_sources = ffma_sources(next_low_word, next_high_word);
  uint64_t reuse = 0;
  for (int slot = 0; slot < 3; ++slot) {
    const uint32_t r = sources[slot];
    if (r == next_sources[slot] && r != kZeroRegister && r != ffma_destination(low_word)) reuse |= kReuseA << slot;
  }
  return (high_word & ~(kReuseA | kReuseB | kReuseC)) | kNoYieldBit | reuse;
}

// The high word of an FFMA that yields inside its run: yield, and no reuse flag (ptxas never emits one on a yielding
// instruction). Stall count 0 is left as compiled, as above.
uint64_t yielding_high_word(uint64_t high_word) {
  if (((high_word >> kStallShift) & kStallMask) == 0) return high_word;
  return high_word & ~(kReuseA | kReuseB | kReuseC | kNoYieldBit);
}

void check_options(const SteadyPassOptions& options) {
  check_arg(options.min_run_length >= 1, kWhere, "min_run_length must be >= 1, got ", options.min_run_length);
}

// Scans every code section; when `output` is given (a copy of `cubin`), writes the rewritten FFMAs into it.
PassReport run_pass(const std::vector<char>& cubin, const SteadyPassOptions& options, std::vector<char>* output) {
  check_options(options);
  const ElfImage image = parse_elf(cubin);
  const int sm = cubin_sm_version(image);
  check_arg(sm == kSupportedSm, kWhere, "the cubin is compiled for sm_", sm, "; the pass knows the sm_",
            kSupportedSm, " encoding only");

  PassReport report;
  report.num_kernels = static_cast<int>(image.code.size());
  for (const ElfCodeSection& code : image.code) {
    check_arg(code.offset % kInstructionBytes == 0 && code.size % kInstructionBytes == 0, kWhere, "code section .text.",
              code.kernel, " (offset ", code.offset, ", ", code.size, " bytes) is not made of 16-byte instructions");
    const char* base = cubin.data() + code.offset;
    const uint64_t num_instructions = code.size / kInstructionBytes;
    auto low_word = [&](uint64_t idx) { return load_word(base + idx * kInstructionBytes); };
    auto high_word = [&](uint64_t idx) { return load_word(base + idx * kInstructionBytes + 8); };

    uint64_t idx = 0;
    while (idx < num_instructions) {
      if (!is_ffma_registers(low_word(idx))) {
        ++idx;
        continue;
      }
      uint64_t end = idx;
      while (end < num_instructions && is_ffma_registers(low_word(end))) ++end;
      const int length = static_cast<int>(end - idx);
      report.num_ffma += length;

      if (length >= options.min_run_length) {
        FfmaRun run{code.kernel, idx * kInstructionBytes, length, 0};
        // Every FFMA but the run's last (its successor is not an FFMA of the run), from the input's words.
        for (uint64_t i = idx; i + 1 < end; ++i) {
          const bool yields = (i - idx + 1) % kYieldEvery == 0;
          const uint64_t steady = yields ? yielding_high_word(high_word(i))
                                         : steady_high_word(low_word(i), high_word(i), low_word(i + 1), high_word(i + 1));
          if (steady == high_word(i)) continue;
          ++run.modified;
          if (output) store_word(output->data() + code.offset + i * kInstructionBytes + 8, steady);
        }
        report.num_modified += run.modified;
        report.runs.push_back(std::move(run));
      }
      idx = end;
    }
  }
  return report;
}

}  // namespace

std::string PassReport::to_string() const {
  std::ostringstream os;
  os << "steady FFMA pass (v" << kPassVersion << "): " << num_kernels << " kernel(s), " << num_ffma << " FFMA(s), "
     << runs.size() << " run(s), " << num_modified << " FFMA(s) modified";
  for (const FfmaRun& run : runs)
    os << "\n  " << run.kernel << ": run at 0x" << std::hex << run.first_offset << std::dec << ", " << run.length
       << " FFMAs, " << run.modified << " modified";
  return os.str();
}

std::vector<char> steady_ffma_pass(const std::vector<char>& cubin, const SteadyPassOptions& options,
                                   PassReport* report) {
  std::vector<char> output = cubin;
  PassReport result = run_pass(cubin, options, &output);
  if (report) *report = std::move(result);
  return output;
}

PassReport analyze_ffma_runs(const std::vector<char>& cubin, const SteadyPassOptions& options) {
  return run_pass(cubin, options, nullptr);
}

}  // namespace finegemm::sass
