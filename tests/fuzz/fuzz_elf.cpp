// libFuzzer target: the cubin ELF reader and the steady FFMA pass (src/sass).
//
// Contract checked: every input either succeeds or throws finegemm::Error of kind kInvalidArgument (the kind the
// headers promise for malformed input; kInternal would mean a bounds check caught what validation missed). On
// success the results must be self-consistent:
//   parse_elf        every section and code section lies inside the input, code sections do not overlap;
//   steady_ffma_pass the output has the input's size, differs only in bit 109 (no yield), which it clears only where
//                    it clears the reuse bits 122-124 too (a yield point), and the reuse bits, only in register-form
//                    FFMAs followed by another in the same code section;
//                    changes exactly `num_modified` instructions, agrees with analyze_ffma_runs, and is a fixed
//                    point of the pass.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "sass/elf.hpp"
#include "sass/ffma_pass.hpp"

namespace {

using finegemm::Error;
using namespace finegemm::sass;

constexpr uint64_t kInstructionBytes = 16;
// Bits the pass may change, as byte masks over one 16-byte instruction: bit 109 is bit 5 of byte 13, bits 122-124
// are bits 2-4 of byte 15.
constexpr int kYieldByte = 109 / 8, kReuseByte = 122 / 8;
constexpr unsigned char kYieldMask = 1u << (109 % 8), kReuseMask = 0x7u << (122 % 8);
static_assert(124 / 8 == kReuseByte);

// Whether the instruction at `at` is an FFMA in register form (bits 0-11 of its low word 0x223).
bool is_ffma_registers(const std::vector<char>& bytes, uint64_t at) {
  const unsigned low = static_cast<unsigned char>(bytes[at]) | (static_cast<unsigned char>(bytes[at + 1]) & 0xfu) << 8;
  return low == 0x223;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_elf: contract violated: %s\n", what);
  std::abort();
}

void require(bool condition, const char* what) {
  if (!condition) fail(what);
}

// Runs `f`; true if it returned, false if it threw finegemm::Error(kInvalidArgument); aborts on anything else.
template <typename F>
bool succeeds(F&& f, std::string* message = nullptr) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    if (e.kind() != Error::Kind::kInvalidArgument) {
      std::fprintf(stderr, "fuzz_elf: %s\n", e.what());
      fail("finegemm::Error of a kind other than kInvalidArgument");
    }
    if (message) *message = e.what();
    return false;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_elf: %s\n", e.what());
    fail("an exception other than finegemm::Error");
  }
}

bool in_input(uint64_t offset, uint64_t size, uint64_t input_size) {
  return offset <= input_size && size <= input_size - offset;
}

void check_image(const ElfImage& image, uint64_t input_size) {
  require(!image.sections.empty(), "parse_elf returned no section 0");
  for (size_t i = 1; i < image.sections.size(); ++i) {
    const ElfSection& s = image.sections[i];
    if (s.type != kElfSectionNobits) require(in_input(s.offset, s.size, input_size), "section outside the input");
  }
  std::vector<ElfCodeSection> code = image.code;
  for (const ElfCodeSection& c : code) {
    require(c.section_index > 0 && size_t(c.section_index) < image.sections.size(), "code section index out of range");
    const ElfSection& s = image.sections[size_t(c.section_index)];
    require(s.name == ".text." + c.kernel, "code section name does not match its section");
    require(s.offset == c.offset && s.size == c.size, "code section extent does not match its section");
    require(in_input(c.offset, c.size, input_size), "code section outside the input");
  }
  std::ranges::sort(code, {}, &ElfCodeSection::offset);
  for (size_t i = 1; i < code.size(); ++i)
    require(code[i - 1].offset + code[i - 1].size <= code[i].offset, "code sections overlap");
}

bool same_report(const PassReport& a, const PassReport& b) {
  if (a.num_kernels != b.num_kernels || a.num_ffma != b.num_ffma || a.num_modified != b.num_modified ||
      a.runs.size() != b.runs.size())
    return false;
  for (size_t i = 0; i < a.runs.size(); ++i) {
    const FfmaRun &x = a.runs[i], &y = b.runs[i];
    if (x.kernel != y.kernel || x.first_offset != y.first_offset || x.length != y.length || x.modified != y.modified)
      return false;
  }
  return true;
}

// The differences between `input` and the pass's `output` are allowed ones; returns the number of changed
// instructions.
int count_changed_instructions(const std::vector<char>& input, const std::vector<char>& output, const ElfImage& image) {
  require(output.size() == input.size(), "the pass changed the size of the cubin");
  std::vector<const ElfCodeSection*> code_of(input.size(), nullptr);
  for (const ElfCodeSection& c : image.code)
    for (uint64_t at = c.offset; at < c.offset + c.size; ++at) code_of[at] = &c;

  int changed = 0;
  uint64_t last_instruction = UINT64_MAX;
  for (size_t at = 0; at < input.size(); ++at) {
    const auto before = static_cast<unsigned char>(input[at]), after = static_cast<unsigned char>(output[at]);
    if (before == after) continue;
    const ElfCodeSection* c = code_of[at];
    require(c != nullptr, "the pass changed a byte outside the code sections");
    const uint64_t within = (at - c->offset) % kInstructionBytes;
    const unsigned char allowed = within == kYieldByte ? kYieldMask : within == kReuseByte ? kReuseMask : 0;
    require(((before ^ after) & ~allowed) == 0, "the pass changed a bit other than the yield and reuse bits");
    if (within == kYieldByte && (before & ~after) != 0) {
      const uint64_t instruction = c->offset + (at - c->offset) / kInstructionBytes * kInstructionBytes;
      require((static_cast<unsigned char>(output[instruction + kReuseByte]) & kReuseMask) == 0,
              "the pass cleared a no-yield bit but left a reuse flag (a yielding FFMA must reuse nothing)");
    }
    const uint64_t instruction = c->offset + (at - c->offset) / kInstructionBytes * kInstructionBytes;
    if (instruction != last_instruction) {
      require(is_ffma_registers(input, instruction), "the pass changed an instruction that is no register-form FFMA");
      const uint64_t next = instruction + kInstructionBytes;
      require(next + kInstructionBytes <= c->offset + c->size && is_ffma_registers(input, next),
              "the pass changed the last FFMA of a run");
      ++changed;
    }
    last_instruction = instruction;
  }
  return changed;
}

void check_pass(const std::vector<char>& input, const ElfImage& image, const SteadyPassOptions& options) {
  PassReport analysis, report;
  std::vector<char> output;
  std::string analyze_error, pass_error;
  const bool analyzed = succeeds([&] { analysis = analyze_ffma_runs(input, options); }, &analyze_error);
  const bool rewritten = succeeds([&] { output = steady_ffma_pass(input, options, &report); }, &pass_error);
  require(analyzed == rewritten && analyze_error == pass_error,
          "analyze_ffma_runs and steady_ffma_pass disagree on whether the input is valid");
  if (!rewritten) return;

  require(same_report(analysis, report), "analyze_ffma_runs and steady_ffma_pass report differently");
  require(report.num_kernels == int(image.code.size()), "num_kernels is not the number of code sections");
  int modified = 0, in_runs = 0;
  for (const FfmaRun& run : report.runs) {
    require(run.length >= options.min_run_length, "a reported run is shorter than min_run_length");
    require(run.modified >= 0 && run.modified <= run.length, "a run modifies more FFMAs than it has");
    modified += run.modified;
    in_runs += run.length;
  }
  require(modified == report.num_modified, "num_modified is not the sum over the runs");
  require(in_runs <= report.num_ffma, "the runs hold more FFMAs than num_ffma");
  require(count_changed_instructions(input, output, image) == report.num_modified,
          "the number of changed instructions is not num_modified");

  PassReport again;
  const std::vector<char> twice = steady_ffma_pass(output, options, &again);
  require(twice == output && again.num_modified == 0, "the pass is not idempotent");
  (void)report.to_string();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<char> input(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);

  ElfImage image;
  if (!succeeds([&] { image = parse_elf(std::span<const char>(input)); })) return 0;
  check_image(image, input.size());
  int sm = 0;
  if (!succeeds([&] { sm = cubin_sm_version(image); })) return 0;
  (void)sm;

  check_pass(input, image, SteadyPassOptions{});
  check_pass(input, image, SteadyPassOptions{.min_run_length = 1});
  return 0;
}
