// Tests of the cubin post-pass (src/sass): the ELF reader and the steady FFMA pass.
//
// Cubins are compiled here with NVRTC for sm_90a (no GPU needed); a hand-built cubin pins the pass's bit rules one
// instruction at a time. The listing comparisons use nvdisasm; without it those tests report SKIPPED and say how to
// install it. nvdisasm is found through FINEGEMM_NVDISASM, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, then the PyPI
// package nvidia-cuda-nvdisasm (scripts/find-nvdisasm.sh does the same search from a shell).
#include <gtest/gtest.h>
#include <nvrtc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "finegemm/finegemm.hpp"
#include "sass/elf.hpp"
#include "sass/ffma_pass.hpp"

namespace {

using finegemm::Error;
using finegemm::sass::analyze_ffma_runs;
using finegemm::sass::ElfImage;
using finegemm::sass::FfmaRun;
using finegemm::sass::kPassVersion;
using finegemm::sass::kYieldEvery;
using finegemm::sass::parse_elf;
using finegemm::sass::PassReport;
using finegemm::sass::steady_ffma_pass;
using finegemm::sass::SteadyPassOptions;

// Fields of the high 64-bit word of an instruction (instruction bit n is bit n - 64 there): the stall count (bits
// 105-108), the no-yield bit (109) and the reuse flags of operands A, B, C (122-124). The pass changes only the last
// two.
constexpr int kStallShiftHigh = 105 - 64;
constexpr uint64_t kNoYieldBitHigh = 1ull << (109 - 64);
constexpr uint64_t kReuseBitsHigh = 0x7ull << (122 - 64);
constexpr int kPromotionBlockN = 128;  // accumulator registers per thread = BLOCK_N / 2

// ---------------------------------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------------------------------

// The promotion step of the GEMM kernels in miniature: a wgmma m64nNk32 (fp8) fills `accum`, then every accumulator
// register is scaled by its row's scale and added into `final_accum`: one long run of FFMAs per K block.
std::string promotion_kernel_source(int block_n) {
  const int num_regs = block_n / 2;
  std::ostringstream outs, operands;
  for (int i = 0; i < num_regs; ++i) {
    outs << (i ? ", " : "") << "%" << i;
    operands << (i ? ", " : "") << "\"+f\"(accum[" << i << "])";
  }
  std::ostringstream src;
  src << "extern \"C\" __global__ void promote(float* out, const float* scales_a, const float* scales_b,\n"
         "                                   unsigned long long desc_a, unsigned long long desc_b,\n"
         "                                   int num_k_blocks) {\n"
         "  float final_accum[" << num_regs << "], accum[" << num_regs << "];\n"
         "#pragma unroll\n"
         "  for (int i = 0; i < " << num_regs << "; ++i) final_accum[i] = accum[i] = 0.f;\n"
         "  const int row = (threadIdx.x / 32) * 16 + (threadIdx.x % 32) / 4;\n"
         "  for (int kb = 0; kb < num_k_blocks; ++kb) {\n"
         "    asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n"
         "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, 0, 0;\\n\"\n"
         "                 \"wgmma.mma_async.sync.aligned.m64n" << block_n << "k32.f32.e4m3.e4m3 {" << outs.str()
      << "}, %" << num_regs << ", %" << num_regs + 1 << ", p, 1, 1;\\n}\\n\"\n"
         "                 : " << operands.str() << " : \"l\"(desc_a + kb), \"l\"(desc_b + kb));\n"
         "    asm volatile(\"wgmma.commit_group.sync.aligned;\\n\" ::: \"memory\");\n"
         "    asm volatile(\"wgmma.wait_group.sync.aligned 0;\\n\" ::: \"memory\");\n"
         "    const float scale_b = scales_b[kb];\n"
         "    const float s0 = scales_a[kb * 64 + row] * scale_b, s1 = scales_a[kb * 64 + row + 8] * scale_b;\n"
         "#pragma unroll\n"
         "    for (int i = 0; i < " << num_regs << "; ++i) final_accum[i] += ((i / 2) % 2 ? s1 : s0) * accum[i];\n"
         "  }\n"
         "#pragma unroll\n"
         "  for (int i = 0; i < " << num_regs << "; ++i) out[i * 128 + threadIdx.x] = final_accum[i];\n"
         "}\n";
  return src.str();
}

// A shorter run whose FFMAs share operands A and B (both reuse flags set), and FFMAs with immediate, uniform-register
// and constant operands, which the pass must not count as register-form FFMAs.
constexpr const char* kOtherKernelsSource = R"(
extern "C" __global__ void shared_operands(float* out, const float* in) {
  const float x = in[threadIdx.x], y = in[threadIdx.x + 1024];
  float acc[24];
#pragma unroll
  for (int i = 0; i < 24; ++i) acc[i] = in[threadIdx.x + 2048 * (i + 1)];
#pragma unroll
  for (int i = 0; i < 24; ++i) acc[i] = fmaf(x, y, acc[i]);
#pragma unroll
  for (int i = 0; i < 24; ++i) out[i * blockDim.x + threadIdx.x] = acc[i];
}
extern "C" __global__ void operand_forms(float* out, const float* in, float a, float b) {
  const int t = threadIdx.x;
  const float x = in[t], y = in[t + 32], z = in[t + 64];
  out[t] = fmaf(x, y, z);
  out[t + 32] = fmaf(x, 3.7f, z);
  out[t + 64] = fmaf(x, a, z);
  out[t + 96] = fmaf(x, y, 1.25f);
  out[t + 128] = fmaf(x, y, b);
  out[t + 160] = fmaf(-x, y, z);
  out[t + 192] = __fmaf_rz(x, y, z);
  out[t + 224] = fmaf(fabsf(x), y, -z);
}
)";

constexpr const char* kTrivialKernelSource = R"(
extern "C" __global__ void trivial(int* out) { out[threadIdx.x] = threadIdx.x * 3 + 1; }
)";

std::vector<char> compile_cubin(const std::string& source, const std::string& arch) {
  auto check = [](nvrtcResult result, const char* what) {
    if (result != NVRTC_SUCCESS) throw std::runtime_error(std::string(what) + ": " + nvrtcGetErrorString(result));
  };
  nvrtcProgram program = nullptr;
  check(nvrtcCreateProgram(&program, source.c_str(), "test_sass.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
  const std::string arch_option = "--gpu-architecture=" + arch;
  const char* options[] = {arch_option.c_str(), "-std=c++17"};
  const nvrtcResult compiled = nvrtcCompileProgram(program, 2, options);
  size_t log_size = 0;
  nvrtcGetProgramLogSize(program, &log_size);
  std::string log(log_size, '\0');
  nvrtcGetProgramLog(program, log.data());
  if (compiled != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&program);
    throw std::runtime_error("NVRTC compilation failed: " + log);
  }
  size_t size = 0;
  check(nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
  std::vector<char> cubin(size);
  check(nvrtcGetCUBIN(program, cubin.data()), "nvrtcGetCUBIN");
  nvrtcDestroyProgram(&program);
  return cubin;
}

// Compiled once per process.
const std::vector<char>& gemm_like_cubin() {
  static const std::vector<char> cubin =
      compile_cubin(promotion_kernel_source(kPromotionBlockN) + kOtherKernelsSource, "sm_90a");
  return cubin;
}
const std::vector<char>& trivial_cubin() {
  static const std::vector<char> cubin = compile_cubin(kTrivialKernelSource, "sm_90a");
  return cubin;
}

// ---------------------------------------------------------------------------------------------------------------
// Helpers: raw words, header patching, error checks
// ---------------------------------------------------------------------------------------------------------------

uint64_t load_u64(const std::vector<char>& bytes, uint64_t at) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes.at(at + i))) << (8 * i);
  return value;
}

template <typename T>
void patch(std::vector<char>& bytes, uint64_t at, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    bytes.at(at + i) = static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff);
}

// Expects `fn` to throw finegemm::Error of kind kInvalidArgument whose message contains `needle`.
template <typename Fn>
void expect_invalid(Fn&& fn, const std::string& needle, const std::string& context) {
  try {
    fn();
    ADD_FAILURE() << context << ": no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::kInvalidArgument) << context << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << context << ": message \"" << e.what() << "\" lacks \"" << needle << "\"";
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": threw a non-finegemm exception: " << e.what();
  }
}

void expect_rejected(const std::vector<char>& bytes, const std::string& needle, const std::string& context) {
  expect_invalid([&] { parse_elf(bytes); }, needle, context + " (parse_elf)");
  expect_invalid([&] { steady_ffma_pass(bytes); }, needle, context + " (steady_ffma_pass)");
  expect_invalid([&] { analyze_ffma_runs(bytes); }, needle, context + " (analyze_ffma_runs)");
}

// File offset of the `.text.<kernel>` section.
uint64_t code_offset(const ElfImage& image, const std::string& kernel) {
  for (const auto& code : image.code)
    if (code.kernel == kernel) return code.offset;
  throw std::runtime_error("no code section .text." + kernel);
}

// The promotion runs as ptxas compiles them in the GEMM kernels: every other FFMA yields its issue slot and, yielding,
// carries no reuse flag (ptxas never emits one on a yielding instruction). ptxas compiles the test kernels' runs
// without yields; this gives the pass runs of the GEMM kernels' kind to start from. The last FFMA of each run, and any
// with stall count 0, keep their encoding.
std::vector<char> with_ptxas_yields(const std::vector<char>& cubin) {
  std::vector<char> out = cubin;
  const ElfImage image = parse_elf(cubin);
  for (const FfmaRun& run : analyze_ffma_runs(cubin).runs)
    for (int i = 1; i + 1 < run.length; i += 2) {
      const uint64_t at = code_offset(image, run.kernel) + run.first_offset + 16ull * i + 8;
      const uint64_t high = load_u64(cubin, at);
      if (((high >> kStallShiftHigh) & 0xf) != 0) patch<uint64_t>(out, at, high & ~(kNoYieldBitHigh | kReuseBitsHigh));
    }
  return out;
}

const std::vector<char>& yielding_cubin() {
  static const std::vector<char> cubin = with_ptxas_yields(gemm_like_cubin());
  return cubin;
}

// ---------------------------------------------------------------------------------------------------------------
// Hand-built code: one instruction at a time
// ---------------------------------------------------------------------------------------------------------------

using Instruction = std::array<uint64_t, 2>;  // low word, high word

// Control bits of an instruction: stall count (bits 105-108), yield (bit 109 clear), reuse flags of A, B, C (122-124).
// Both barrier fields hold 7 (none), as ptxas writes them.
struct Control {
  int stall = 1;
  bool yield = false;
  int reuse = 0;  // kA | kB | kC
};
constexpr int kA = 1, kB = 2, kC = 4;
constexpr int kRZ = 255;  // the zero register

uint64_t control_bits(Control c) {
  return uint64_t(c.stall) << kStallShiftHigh | (c.yield ? 0 : kNoYieldBitHigh) | uint64_t(c.reuse) << (122 - 64) |
         0x3full << (110 - 64);
}

// FFMA Rd, Ra, Rb, Rc under predicate PT, in register form (opcode bits 0x223).
Instruction ffma(int rd, int ra, int rb, int rc, Control c) {
  return {0x7223 | uint64_t(rd) << 16 | uint64_t(ra) << 24 | uint64_t(rb) << 32, uint64_t(rc) | control_bits(c)};
}

// FFMA Rd, Ra, 1.5, Rc: the immediate form (opcode bits 0x423), which the pass does not match.
Instruction ffma_immediate(int rd, int ra, int rc) {
  constexpr uint64_t kOnePointFive = 0x3fc00000;
  return {0x7423 | uint64_t(rd) << 16 | uint64_t(ra) << 24 | kOnePointFive << 32, uint64_t(rc) | control_bits({})};
}

// A cubin of one `.text.synthetic` section holding `code`, laid out as CUDA 13 writes cubins (ELF ABI version 8, the
// SM in e_flags bits 8-15): enough for parse_elf and the pass, not for the driver.
std::vector<char> synthetic_cubin(const std::vector<Instruction>& code) {
  constexpr uint64_t kCodeOffset = 128;
  const std::string names = std::string("\0.shstrtab\0.text.synthetic\0", 27);
  const uint64_t names_offset = kCodeOffset + 16 * code.size();
  const uint64_t section_table = (names_offset + names.size() + 7) / 8 * 8;
  std::vector<char> bytes(section_table + 3 * 64, '\0');
  const char ident[] = {0x7f, 'E', 'L', 'F', 2 /* ELF64 */, 1 /* little-endian */, 1 /* version */, 0x41, 8};
  std::copy(std::begin(ident), std::end(ident), bytes.begin());
  patch<uint16_t>(bytes, 16, 2);                                  // e_type: ET_EXEC
  patch<uint16_t>(bytes, 18, finegemm::sass::kElfMachineCuda);
  patch<uint32_t>(bytes, 20, 1);                                  // e_version
  patch<uint64_t>(bytes, 40, section_table);                      // e_shoff
  patch<uint32_t>(bytes, 48, 90 << 8);                            // e_flags: sm_90
  patch<uint16_t>(bytes, 52, 64);                                 // e_ehsize
  patch<uint16_t>(bytes, 58, 64);                                 // e_shentsize
  patch<uint16_t>(bytes, 60, 3);                                  // e_shnum
  patch<uint16_t>(bytes, 62, 1);                                  // e_shstrndx
  for (size_t i = 0; i < code.size(); ++i) {
    patch<uint64_t>(bytes, kCodeOffset + 16 * i, code[i][0]);
    patch<uint64_t>(bytes, kCodeOffset + 16 * i + 8, code[i][1]);
  }
  std::copy(names.begin(), names.end(), bytes.begin() + static_cast<std::ptrdiff_t>(names_offset));
  // Section headers: [1] .shstrtab, [2] .text.synthetic (SHF_ALLOC | SHF_EXECINSTR, 128-byte aligned).
  auto section = [&](int index, uint32_t name, uint32_t type, uint64_t flags, uint64_t offset, uint64_t size,
                     uint64_t align) {
    const uint64_t at = section_table + 64 * uint64_t(index);
    patch<uint32_t>(bytes, at + 0, name);
    patch<uint32_t>(bytes, at + 4, type);
    patch<uint64_t>(bytes, at + 8, flags);
    patch<uint64_t>(bytes, at + 24, offset);
    patch<uint64_t>(bytes, at + 32, size);
    patch<uint64_t>(bytes, at + 48, align);
  };
  section(1, 1, finegemm::sass::kElfSectionStrtab, 0, names_offset, names.size(), 1);
  section(2, 11, finegemm::sass::kElfSectionProgbits, 0x2 | finegemm::sass::kElfFlagExecInstr, kCodeOffset,
          16 * code.size(), 128);
  return bytes;
}

// ---------------------------------------------------------------------------------------------------------------
// nvdisasm
// ---------------------------------------------------------------------------------------------------------------

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string shell_quote(const std::string& s) {
  std::string quoted = "'";
  for (char c : s) quoted += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

bool is_executable(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && access(path.c_str(), X_OK) == 0;
}

constexpr const char* kNvdisasmInstallHint =
    "nvdisasm not found: the SASS listing checks did not run. Install it with "
    "`pip install nvidia-cuda-nvdisasm==13.2.51` (or any CUDA toolkit with nvdisasm), or point FINEGEMM_NVDISASM at "
    "the binary; scripts/find-nvdisasm.sh prints what this test would use.";

// Search order: $FINEGEMM_NVDISASM, PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, the PyPI package.
std::optional<std::string> find_nvdisasm() {
  if (const char* forced = std::getenv("FINEGEMM_NVDISASM"); forced && *forced) return std::string(forced);
  std::vector<std::filesystem::path> candidates;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');)
      if (!dir.empty()) candidates.push_back(std::filesystem::path(dir) / "nvdisasm");
  }
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* home = std::getenv(var); home && *home)
      candidates.push_back(std::filesystem::path(home) / "bin/nvdisasm");
  candidates.push_back("/usr/local/cuda/bin/nvdisasm");
  for (const auto& candidate : candidates)
    if (is_executable(candidate)) return candidate.string();
  // The wheel installs <site-packages>/nvidia/cu13/bin/nvdisasm (13.x) or nvidia/cuda_nvdisasm/bin/nvdisasm (12.x).
  for (const char* python : {"python3", "python"}) {
    const CommandResult found = run_command(
        std::string(python) +
        " -c \"import importlib.util, pathlib; s = importlib.util.find_spec('nvidia'); "
        "print(next((str(p) for d in (s.submodule_search_locations if s else []) "
        "for p in sorted(pathlib.Path(d).glob('*/bin/nvdisasm'))), ''))\" 2>/dev/null");
    std::string path = found.output.substr(0, found.output.find('\n'));
    if (found.exit_code == 0 && !path.empty() && is_executable(path)) return path;
  }
  return std::nullopt;
}

const std::optional<std::string>& nvdisasm_path() {
  static const std::optional<std::string> path = find_nvdisasm();
  return path;
}

// Skips loudly without nvdisasm; fails when FINEGEMM_NVDISASM names something that cannot run.
#define REQUIRE_NVDISASM()                                                                  \
  do {                                                                                      \
    if (!nvdisasm_path()) GTEST_SKIP() << "\n\n*** " << kNvdisasmInstallHint << " ***\n\n"; \
    if (!is_executable(*nvdisasm_path()))                                                   \
      FAIL() << "FINEGEMM_NVDISASM=" << *nvdisasm_path() << " is not an executable file";  \
  } while (0)

struct SassInstruction {
  std::string section;
  uint64_t offset = 0;
  std::string text;  // e.g. "FFMA R135, R24, R136.reuse, R135"
  uint64_t low = 0, high = 0;
};

struct Listing {
  CommandResult run;
  std::vector<SassInstruction> instructions;
};

// Runs `nvdisasm -hex -c` on `cubin` and parses every instruction with its two encoding words.
Listing disassemble(const std::vector<char>& cubin) {
  static std::atomic<int> counter{0};
  const auto path = std::filesystem::temp_directory_path() /
                    ("finegemm_test_sass_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + ".cubin");
  {
    std::ofstream file(path, std::ios::binary);
    file.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
  }
  Listing listing;
  listing.run = run_command(shell_quote(*nvdisasm_path()) + " -hex -c " + shell_quote(path.string()) + " 2>&1");
  std::filesystem::remove(path);

  static const std::regex section_re(R"(^\s*\.section\s+\.text\.([^,\s]+))");
  static const std::regex first_line_re(R"(^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;\s*/\* 0x([0-9a-f]{16}) \*/\s*$)");
  static const std::regex second_line_re(R"(^\s*/\* 0x([0-9a-f]{16}) \*/\s*$)");
  std::istringstream lines(listing.run.output);
  std::string section, line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, section_re)) {
      section = m[1];
    } else if (std::regex_match(line, m, first_line_re)) {
      SassInstruction inst{section, std::stoull(m[1], nullptr, 16), m[2], std::stoull(m[3], nullptr, 16), 0};
      std::string next;
      if (!std::getline(lines, next) || !std::regex_match(next, m, second_line_re))
        throw std::runtime_error("unexpected nvdisasm output after: " + line);
      inst.high = std::stoull(m[1], nullptr, 16);
      listing.instructions.push_back(std::move(inst));
    }
  }
  return listing;
}

std::string strip_reuse(std::string text) {
  for (size_t at; (at = text.find(".reuse")) != std::string::npos;) text.erase(at, 6);
  return text;
}

// The three source operands of an FFMA whose sources are all registers, judged from nvdisasm's text alone
// (predicate, modifiers, negation and absolute value allowed); nullopt for any other instruction.
std::optional<std::array<std::string, 3>> ffma_register_sources(const std::string& text) {
  static const std::regex re(
      R"(^(?:@!?P[T0-6] )?FFMA(?:\.[A-Z]+)* (?:R\d+|RZ), (-?\|?(?:R\d+|RZ)\|?(?:\.reuse)?), )"
      R"((-?\|?(?:R\d+|RZ)\|?(?:\.reuse)?), (-?\|?(?:R\d+|RZ)\|?(?:\.reuse)?)$)");
  std::smatch m;
  if (!std::regex_match(text, m, re)) return std::nullopt;
  return std::array<std::string, 3>{m[1], m[2], m[3]};
}

// ---------------------------------------------------------------------------------------------------------------
// ELF reader
// ---------------------------------------------------------------------------------------------------------------

TEST(SassElf, ReadsNvrtcCubin) {
  const std::vector<char>& cubin = gemm_like_cubin();
  const ElfImage image = parse_elf(cubin);
  EXPECT_EQ(image.machine, finegemm::sass::kElfMachineCuda);
  EXPECT_EQ(finegemm::sass::cubin_sm_version(image), 90);
  std::set<std::string> kernels;
  for (const auto& code : image.code) {
    kernels.insert(code.kernel);
    const auto& section = image.sections.at(code.section_index);
    EXPECT_EQ(section.name, ".text." + code.kernel);
    EXPECT_EQ(section.offset, code.offset);
    EXPECT_EQ(section.size, code.size);
    EXPECT_EQ(code.offset % 16, 0u);
    EXPECT_GT(code.size, 0u);
    EXPECT_LE(code.offset + code.size, cubin.size());
  }
  EXPECT_EQ(kernels, (std::set<std::string>{"promote", "shared_operands", "operand_forms"}));
  bool has_symtab = false;
  for (const auto& section : image.sections) has_symtab |= section.name == ".symtab";
  EXPECT_TRUE(has_symtab);
}

TEST(SassElf, RejectsTruncatedInput) {
  const std::vector<char>& cubin = gemm_like_cubin();
  const ElfImage image = parse_elf(cubin);
  const uint64_t shoff = load_u64(cubin, 40);
  const uint64_t phoff = load_u64(cubin, 32);
  const auto& code = image.code.front();

  // The furthest byte any validated structure reaches must be the end of the file, so cutting anywhere is caught.
  uint64_t extent = shoff + 64 * image.sections.size();
  extent = std::max<uint64_t>(extent, phoff + 56 * static_cast<uint8_t>(cubin[56]));
  for (const auto& s : image.sections)
    if (s.type != finegemm::sass::kElfSectionNobits) extent = std::max(extent, s.offset + s.size);
  ASSERT_EQ(extent, cubin.size()) << "the cubin has trailing bytes no structure covers; pick other cut points";

  const std::vector<std::pair<uint64_t, std::string>> cuts = {
      {0, "shorter than an ELF64 header"},
      {3, "shorter than an ELF64 header"},
      {63, "shorter than an ELF64 header"},
      {64, "past the end"},
      {code.offset + code.size / 2, "past the end"},
      {shoff + 64 * 2 + 10, "past the end"},
      {cubin.size() - 1, "past the end"},
  };
  for (const auto& [size, needle] : cuts) {
    ASSERT_LT(size, cubin.size());
    const std::vector<char> truncated(cubin.begin(), cubin.begin() + static_cast<std::ptrdiff_t>(size));
    expect_rejected(truncated, needle, "truncated to " + std::to_string(size) + " bytes");
  }
}

TEST(SassElf, RejectsNonElfInput) {
  std::string text = "This is not a cubin, just some text long enough to fill an ELF64 header and then some.";
  expect_rejected(std::vector<char>(text.begin(), text.end()), "not an ELF file", "text");

  std::vector<char> elf32 = gemm_like_cubin();
  elf32[4] = 1;  // ELFCLASS32
  expect_rejected(elf32, "not ELF64", "ELF32");

  std::vector<char> big_endian = gemm_like_cubin();
  big_endian[5] = 2;  // ELFDATA2MSB
  expect_rejected(big_endian, "not little-endian", "big-endian");
}

TEST(SassElf, RejectsOutOfRangeSectionTable) {
  const std::vector<char>& cubin = gemm_like_cubin();
  const uint64_t shoff = load_u64(cubin, 40);
  const auto shnum = static_cast<uint16_t>(static_cast<uint8_t>(cubin[60]) | static_cast<uint8_t>(cubin[61]) << 8);

  std::vector<char> bytes = cubin;
  patch<uint64_t>(bytes, 40, cubin.size());  // e_shoff at the end of the file
  expect_rejected(bytes, "section header table", "e_shoff past the end");

  bytes = cubin;
  patch<uint64_t>(bytes, 40, ~uint64_t{0} - 63);  // e_shoff + table size overflows
  expect_rejected(bytes, "section header table", "e_shoff overflowing");

  bytes = cubin;
  patch<uint16_t>(bytes, 60, 0xfe00);  // e_shnum far larger than the table
  expect_rejected(bytes, "section header table", "e_shnum too large");

  bytes = cubin;
  patch<uint16_t>(bytes, 58, 40);  // e_shentsize
  expect_rejected(bytes, "entries are 40 bytes", "e_shentsize");

  bytes = cubin;
  patch<uint16_t>(bytes, 62, shnum);  // e_shstrndx out of range
  expect_rejected(bytes, "section name table index", "e_shstrndx");

  bytes = cubin;
  patch<uint64_t>(bytes, shoff + 64 * 2 + 24, cubin.size() - 8);  // section 2 contents past the end
  expect_rejected(bytes, "past the end", "section contents out of range");

  bytes = cubin;
  patch<uint32_t>(bytes, shoff + 64 * 2 + 0, 0x7fffffffu);  // section 2 name outside the name table
  expect_rejected(bytes, "name offset", "section name out of range");

  bytes = cubin;
  patch<uint64_t>(bytes, 32, cubin.size() - 16);  // program header table past the end
  expect_rejected(bytes, "program header table", "e_phoff past the end");

  // A code section that is not made of whole instructions.
  const ElfImage image = parse_elf(cubin);
  bytes = cubin;
  patch<uint64_t>(bytes, shoff + 64 * image.code.front().section_index + 32, image.code.front().size - 4);
  expect_invalid([&] { steady_ffma_pass(bytes); }, "16-byte instructions", "odd code size");
}

TEST(SassElf, RejectsOtherMachinesAndArchitectures) {
  std::vector<char> x86 = gemm_like_cubin();
  patch<uint16_t>(x86, 18, 62);  // EM_X86_64
  expect_invalid([&] { steady_ffma_pass(x86); }, "not a CUDA cubin", "x86-64 ELF");

  std::vector<char> future_abi = gemm_like_cubin();
  future_abi[8] = 9;
  expect_invalid([&] { steady_ffma_pass(future_abi); }, "ABI version 9", "unknown ABI");

  const std::vector<char> sm80 = compile_cubin(kOtherKernelsSource, "sm_80");
  expect_invalid([&] { steady_ffma_pass(sm80); }, "sm_80", "sm_80 cubin");
  const std::vector<char> sm100 = compile_cubin(kTrivialKernelSource, "sm_100a");
  expect_invalid([&] { analyze_ffma_runs(sm100); }, "sm_100", "sm_100a cubin");
}

// ---------------------------------------------------------------------------------------------------------------
// The steady pass, CPU only
// ---------------------------------------------------------------------------------------------------------------

TEST(SassSteadyPass, RewritesAHandBuiltRunByTheBitRules) {
  // Each FFMA of a run but its last: no yield, and reuse exactly on the slots whose register the next FFMA reads in
  // the same slot, unless it is RZ or the register this FFMA writes. Everything else keeps its bits.
  constexpr uint64_t kFtzHigh = 1ull << (80 - 64);  // .FTZ: not a control bit
  std::vector<Instruction> before = {
      ffma(8, 2, 3, 8, {.stall = 1, .yield = true}),                 // 0: next reads R2, R3 in A, B
      ffma(9, 2, 3, 9, {.stall = 2, .reuse = kA | kB | kC}),         // 1: next reads R3 in B; C's flag is wrong
      ffma(10, kRZ, 3, 10, {.stall = 1, .yield = true}),             // 2: next reads RZ in A: no reuse of RZ
      ffma(11, kRZ, 4, 11, {.stall = 1}),                            // 3: next reads R4 in B
      ffma(4, 5, 4, 12, {.stall = 1, .yield = true}),                // 4: next reads R5, R4, R12; R4 is written here
      ffma(13, 5, 4, 12, {.stall = 0, .yield = true}),               // 5: stall 0: left as compiled
      ffma(14, 5, 6, 14, {.stall = 3}),                              // 6: next reads R5, R6 in A, B; .FTZ
      ffma(15, 5, 6, 15, {.stall = 1, .reuse = kA | kB}),            // 7: already so
      ffma(16, 5, 6, 16, {.stall = 1, .yield = true}),               // 8: next reads R6 in B
      ffma(17, 7, 6, 17, {.stall = 1, .yield = true, .reuse = kB}),  // 9: the run's last: left as compiled
      ffma_immediate(18, 7, 18),                                     // not a register-form FFMA: ends the run
      ffma(20, 2, 3, 20, {.stall = 1, .yield = true}),               // a run of 3, shorter than min_run_length
      ffma(21, 2, 3, 21, {.stall = 1, .yield = true}),
      ffma(22, 2, 3, 22, {.stall = 1, .yield = true}),
  };
  before[6][1] |= kFtzHigh;
  std::vector<Instruction> expected = before;
  expected[0] = ffma(8, 2, 3, 8, {.stall = 1, .reuse = kA | kB});
  expected[1] = ffma(9, 2, 3, 9, {.stall = 2, .reuse = kB});
  expected[2] = ffma(10, kRZ, 3, 10, {.stall = 1});
  expected[3] = ffma(11, kRZ, 4, 11, {.stall = 1, .reuse = kB});
  expected[4] = ffma(4, 5, 4, 12, {.stall = 1, .reuse = kA | kC});
  expected[6] = ffma(14, 5, 6, 14, {.stall = 3, .reuse = kA | kB});
  expected[6][1] |= kFtzHigh;
  expected[8] = ffma(16, 5, 6, 16, {.stall = 1, .reuse = kB});

  const std::vector<char> cubin = synthetic_cubin(before);
  PassReport report;
  EXPECT_EQ(steady_ffma_pass(cubin, {}, &report), synthetic_cubin(expected));
  EXPECT_EQ(report.num_kernels, 1);
  EXPECT_EQ(report.num_ffma, 13);
  ASSERT_EQ(report.runs.size(), 1u) << report.to_string();
  EXPECT_EQ(report.runs[0].kernel, "synthetic");
  EXPECT_EQ(report.runs[0].first_offset, 0u);
  EXPECT_EQ(report.runs[0].length, 10);
  EXPECT_EQ(report.runs[0].modified, 7);
  EXPECT_EQ(report.num_modified, 7);
  EXPECT_EQ(analyze_ffma_runs(cubin).to_string(), report.to_string());

  // With min_run_length 3, the short run's first two FFMAs are rewritten too (its last is left as compiled).
  expected[11] = ffma(20, 2, 3, 20, {.stall = 1, .reuse = kA | kB});
  expected[12] = ffma(21, 2, 3, 21, {.stall = 1, .reuse = kA | kB});
  EXPECT_EQ(steady_ffma_pass(cubin, {.min_run_length = 3}, &report), synthetic_cubin(expected));
  ASSERT_EQ(report.runs.size(), 2u) << report.to_string();
  EXPECT_EQ(report.runs[1].first_offset, 16u * 11);
  EXPECT_EQ(report.runs[1].length, 3);
  EXPECT_EQ(report.runs[1].modified, 2);
  EXPECT_EQ(report.num_modified, 9);
  EXPECT_EQ(steady_ffma_pass(synthetic_cubin(expected), {.min_run_length = 3}), synthetic_cubin(expected));
}

TEST(SassSteadyPass, FindsThePromotionRun) {
  const PassReport compiled = analyze_ffma_runs(gemm_like_cubin());
  EXPECT_EQ(compiled.num_kernels, 3);
  auto promotion_run = [](const PassReport& report) {
    const FfmaRun* promotion = nullptr;
    for (const FfmaRun& run : report.runs)
      if (run.kernel == "promote" && (!promotion || run.length > promotion->length)) promotion = &run;
    return promotion;
  };
  const FfmaRun* promotion = promotion_run(compiled);
  ASSERT_NE(promotion, nullptr) << compiled.to_string();
  // One FFMA per accumulator register; ptxas keeps them back to back after the wgmma wait.
  EXPECT_EQ(promotion->length, kPromotionBlockN / 2) << compiled.to_string();
  // ptxas compiles the test kernels' runs without yields, with the reuse flags the rule gives: the pass changes only
  // the FFMAs that yield every kYieldEvery (positions 31, 63, ... of a run, not its last).
  int yield_points = 0;
  for (const FfmaRun& run : compiled.runs) yield_points += (run.length - 1) / kYieldEvery;
  ASSERT_GT(yield_points, 0) << "no run of the test kernels is longer than " << kYieldEvery << " FFMAs";
  EXPECT_EQ(compiled.num_modified, yield_points) << compiled.to_string();
  EXPECT_EQ(promotion->modified, (promotion->length - 1) / kYieldEvery) << compiled.to_string();
  EXPECT_NE(compiled.to_string().find("promote"), std::string::npos);
  EXPECT_NE(compiled.to_string().find("steady FFMA pass (v" + std::to_string(kPassVersion) + ")"), std::string::npos)
      << compiled.to_string();

  // Where every other FFMA yields (positions 1, 3, ..., 61 of 64), the pass rewrites each of them but the yield point
  // at position 31, which already yields without reuse.
  const PassReport yielding = analyze_ffma_runs(yielding_cubin());
  promotion = promotion_run(yielding);
  ASSERT_NE(promotion, nullptr) << yielding.to_string();
  EXPECT_EQ(promotion->length, kPromotionBlockN / 2);
  EXPECT_EQ(promotion->modified, (promotion->length - 1) / 2 - (promotion->length - 1) / kYieldEvery)
      << yielding.to_string();
}

TEST(SassSteadyPass, OnlyTheRunsControlBitsChange) {
  const std::vector<char>& before = yielding_cubin();
  PassReport report;
  const std::vector<char> after = steady_ffma_pass(before, {}, &report);
  ASSERT_EQ(after.size(), before.size());
  ASSERT_GT(report.num_modified, 0) << report.to_string();

  // The high words of every FFMA of a run but its last may change; nothing else may. Every kYieldEvery-th FFMA of a
  // run yields, without reuse; the others do not yield.
  std::set<uint64_t> candidates, yield_points;
  std::set<uint64_t> last_of_run;
  const ElfImage image = parse_elf(before);
  for (const FfmaRun& run : report.runs)
    for (int i = 0; i < run.length; ++i) {
      const uint64_t high_at = code_offset(image, run.kernel) + run.first_offset + 16 * uint64_t(i) + 8;
      (i + 1 < run.length ? candidates : last_of_run).insert(high_at);
      if (i + 1 < run.length && (i + 1) % kYieldEvery == 0) yield_points.insert(high_at);
    }
  int changed = 0;
  for (uint64_t at = 0; at + 8 <= before.size(); at += 8) {
    const uint64_t x = load_u64(before, at), y = load_u64(after, at);
    if (!candidates.count(at)) {
      EXPECT_EQ(x, y) << "changed outside the runs' FFMAs (or a run's last one) at byte " << at;
      continue;
    }
    changed += x != y;
    EXPECT_EQ(x & ~(kNoYieldBitHigh | kReuseBitsHigh), y & ~(kNoYieldBitHigh | kReuseBitsHigh)) << "at byte " << at;
    if (yield_points.count(at)) {
      EXPECT_EQ(y & (kNoYieldBitHigh | kReuseBitsHigh), 0u) << "a yield point does not yield, or reuses, at byte " << at;
    } else {
      EXPECT_NE(y & kNoYieldBitHigh, 0u) << "an FFMA of a run still yields, at byte " << at;
    }
  }
  for (uint64_t at = before.size() / 8 * 8; at < before.size(); ++at) EXPECT_EQ(before[at], after[at]);
  EXPECT_EQ(changed, report.num_modified);
  EXPECT_FALSE(last_of_run.empty());
  ASSERT_FALSE(yield_points.empty());

  // ptxas compiled the test kernels' runs without yields: the steady pass gives back exactly its encoding, but at the
  // yield points, which yield without reuse.
  std::vector<char> expected = gemm_like_cubin();
  for (uint64_t at : yield_points)
    patch<uint64_t>(expected, at, load_u64(expected, at) & ~(kNoYieldBitHigh | kReuseBitsHigh));
  EXPECT_EQ(after, expected);
  // The output reads back with the same section table, and the analysis of the input predicted the rewrite.
  const ElfImage out = parse_elf(after);
  EXPECT_EQ(image.sections, out.sections);
  EXPECT_EQ(image.code, out.code);
  EXPECT_EQ(analyze_ffma_runs(before).to_string(), report.to_string());
  // Applying the pass twice changes nothing more.
  PassReport again;
  EXPECT_EQ(steady_ffma_pass(after, {}, &again), after);
  EXPECT_EQ(again.num_modified, 0);
}

TEST(SassSteadyPass, NoQualifyingRunIsByteIdentical) {
  PassReport report;
  EXPECT_EQ(steady_ffma_pass(trivial_cubin(), {}, &report), trivial_cubin());
  EXPECT_EQ(report.num_kernels, 1);
  EXPECT_EQ(report.num_ffma, 0);
  EXPECT_TRUE(report.runs.empty());
  EXPECT_EQ(report.num_modified, 0);

  const std::vector<char>& cubin = yielding_cubin();
  EXPECT_EQ(steady_ffma_pass(cubin, {.min_run_length = 1000}, &report), cubin);
  EXPECT_TRUE(report.runs.empty());
  EXPECT_EQ(report.num_modified, 0);
}

TEST(SassSteadyPass, MinRunLengthSelectsTheRuns) {
  const std::vector<char>& cubin = yielding_cubin();
  const PassReport all = analyze_ffma_runs(cubin, {.min_run_length = 1});
  int longest = 0, total = 0;
  for (const FfmaRun& run : all.runs) {
    longest = std::max(longest, run.length);
    total += run.length;
  }
  EXPECT_EQ(total, all.num_ffma);

  for (int min_run_length : {2, 8, 24, 25, longest, longest + 1}) {
    PassReport report;
    const std::vector<char> after = steady_ffma_pass(cubin, {.min_run_length = min_run_length}, &report);
    std::vector<std::pair<uint64_t, int>> expected, got;
    int expected_modified = 0;
    for (const FfmaRun& run : all.runs)
      if (run.length >= min_run_length) {
        expected.emplace_back(run.first_offset, run.length);
        expected_modified += run.modified;
      }
    for (const FfmaRun& run : report.runs) got.emplace_back(run.first_offset, run.length);
    EXPECT_EQ(got, expected) << "min_run_length " << min_run_length;
    EXPECT_EQ(report.num_ffma, all.num_ffma);
    EXPECT_EQ(report.num_modified, expected_modified) << "min_run_length " << min_run_length;
    EXPECT_EQ(after == cubin, expected_modified == 0) << "min_run_length " << min_run_length;
  }
  EXPECT_TRUE(analyze_ffma_runs(cubin, {.min_run_length = longest + 1}).runs.empty());
}

TEST(SassSteadyPass, RejectsInvalidOptions) {
  const std::vector<char>& cubin = gemm_like_cubin();
  expect_invalid([&] { steady_ffma_pass(cubin, {.min_run_length = 0}); }, "min_run_length", "min_run_length 0");
  expect_invalid([&] { analyze_ffma_runs(cubin, {.min_run_length = -8}); }, "min_run_length", "min_run_length -8");
}

// ---------------------------------------------------------------------------------------------------------------
// The steady pass, checked against nvdisasm
// ---------------------------------------------------------------------------------------------------------------

TEST(SassSteadyPassNvdisasm, ListingsDifferOnlyInTheRunsYieldAndReuse) {
  REQUIRE_NVDISASM();
  const std::vector<char>& before = yielding_cubin();
  const SteadyPassOptions options;
  PassReport report;
  const std::vector<char> after = steady_ffma_pass(before, options, &report);

  const Listing a = disassemble(before), b = disassemble(after);
  ASSERT_EQ(a.run.exit_code, 0) << a.run.output;
  ASSERT_EQ(b.run.exit_code, 0) << "nvdisasm rejects the rewritten cubin:\n" << b.run.output;
  EXPECT_EQ(b.run.output.find("error"), std::string::npos) << b.run.output;
  ASSERT_FALSE(a.instructions.empty());
  ASSERT_EQ(a.instructions.size(), b.instructions.size());

  // FFMA runs and the instructions that may change (each FFMA of a run but its last), found from nvdisasm's text (not
  // from the library's opcode match).
  std::set<std::pair<std::string, uint64_t>> rewritable, yield_points;
  int num_ffma = 0, num_runs = 0;
  for (size_t i = 0; i < a.instructions.size();) {
    if (!ffma_register_sources(a.instructions[i].text)) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < a.instructions.size() && a.instructions[end].section == a.instructions[i].section &&
           a.instructions[end].offset == a.instructions[i].offset + 16 * (end - i) &&
           ffma_register_sources(a.instructions[end].text))
      ++end;
    const int length = static_cast<int>(end - i);
    num_ffma += length;
    if (length >= options.min_run_length) {
      ++num_runs;
      for (size_t j = i; j + 1 < end; ++j) {
        const SassInstruction& inst = a.instructions[j];
        ASSERT_NE((inst.high >> kStallShiftHigh) & 0xf, 0u) << "stall 0 in a run: " << inst.text;
        rewritable.insert({inst.section, inst.offset});
        if ((j - i + 1) % kYieldEvery == 0) yield_points.insert({inst.section, inst.offset});
      }
    }
    i = end;
  }
  EXPECT_EQ(num_ffma, report.num_ffma) << "the opcode match and nvdisasm disagree on which FFMAs are register form";
  EXPECT_EQ(num_runs, static_cast<int>(report.runs.size()));
  ASSERT_FALSE(rewritable.empty());

  int num_changed = 0, num_yields_removed = 0;
  for (size_t i = 0; i < a.instructions.size(); ++i) {
    const SassInstruction& x = a.instructions[i];
    const SassInstruction& y = b.instructions[i];
    ASSERT_EQ(x.section, y.section);
    ASSERT_EQ(x.offset, y.offset);
    EXPECT_EQ(x.low, y.low) << x.section << " " << x.offset << ": " << x.text;
    EXPECT_EQ(strip_reuse(x.text), strip_reuse(y.text)) << x.section << " " << x.offset;
    if (x.high != y.high) {
      ++num_changed;
      num_yields_removed += (x.high & kNoYieldBitHigh) == 0;
      EXPECT_TRUE(rewritable.count({x.section, x.offset})) << "changed: " << x.section << " " << x.offset << " "
                                                           << x.text;
      EXPECT_EQ(x.high & ~(kNoYieldBitHigh | kReuseBitsHigh), y.high & ~(kNoYieldBitHigh | kReuseBitsHigh)) << x.text;
      EXPECT_EQ((y.high & kNoYieldBitHigh) == 0, yield_points.count({x.section, x.offset}) == 1) << y.text;
    } else {
      EXPECT_EQ(y.text, x.text);
    }
    // nvdisasm prints ".reuse" on A, B, C exactly when bits 122, 123, 124 are set, unless the FFMA yields (bit 109
    // clear): then it prints no reuse at all.
    for (const SassInstruction* inst : {&x, &y}) {
      const auto sources = ffma_register_sources(inst->text);
      if (!sources) continue;
      const bool yields = (inst->high & kNoYieldBitHigh) == 0;
      for (int k = 0; k < 3; ++k) {
        const bool flag = (inst->high >> (122 - 64 + k)) & 1;
        EXPECT_EQ((*sources)[k].ends_with(".reuse"), flag && !yields) << inst->text << " operand " << k;
      }
    }
  }
  EXPECT_EQ(num_changed, report.num_modified);
  EXPECT_GT(num_yields_removed, 0) << "no FFMA of a run yielded: the test kernels no longer exercise it";
}

TEST(SassSteadyPassNvdisasm, ReuseFlagsNameWhatTheNextFfmaReads) {
  REQUIRE_NVDISASM();
  const std::vector<char>& before = yielding_cubin();
  const SteadyPassOptions options;
  PassReport report;
  const std::vector<char> after = steady_ffma_pass(before, options, &report);
  const Listing a = disassemble(before), b = disassemble(after);
  ASSERT_EQ(b.run.exit_code, 0) << "nvdisasm rejects the rewritten cubin:\n" << b.run.output;
  EXPECT_EQ(b.run.output.find("error"), std::string::npos) << b.run.output;
  ASSERT_EQ(a.instructions.size(), b.instructions.size());

  // The register an operand names ("R12", "RZ"), without reuse, negation or absolute value.
  auto reg = [](const std::string& operand) {
    std::string r = strip_reuse(operand);
    std::erase_if(r, [](char c) { return c == '-' || c == '|'; });
    return r;
  };
  for (size_t i = 0; i < b.instructions.size(); ++i)
    ASSERT_EQ(strip_reuse(a.instructions[i].text), strip_reuse(b.instructions[i].text)) << b.instructions[i].text;
  int num_runs = 0, num_reused = 0;
  for (size_t i = 0; i < b.instructions.size(); ++i) {
    if (!ffma_register_sources(b.instructions[i].text)) continue;
    size_t end = i;
    while (end < b.instructions.size() && b.instructions[end].section == b.instructions[i].section &&
           ffma_register_sources(b.instructions[end].text))
      ++end;
    if (end - i >= size_t(options.min_run_length)) {
      ++num_runs;
      for (size_t j = i; j + 1 < end; ++j) {
        const SassInstruction& inst = b.instructions[j];
        const auto here = *ffma_register_sources(inst.text);
        const auto next = *ffma_register_sources(b.instructions[j + 1].text);
        const size_t name_end = inst.text.find(' ', inst.text.find("FFMA"));
        const std::string dest = inst.text.substr(name_end + 1, inst.text.find(',', name_end) - name_end - 1);
        // Every kYieldEvery-th FFMA of the run yields and reuses nothing; the others do not yield.
        const bool yield_point = (j - i + 1) % kYieldEvery == 0;
        EXPECT_EQ((inst.high & kNoYieldBitHigh) == 0, yield_point) << inst.text;
        for (int k = 0; k < 3; ++k) {
          const bool same =
              !yield_point && reg(here[k]) == reg(next[k]) && reg(here[k]) != "RZ" && reg(here[k]) != dest;
          EXPECT_EQ(here[k].ends_with(".reuse"), same) << inst.text << " then " << b.instructions[j + 1].text;
          num_reused += here[k].ends_with(".reuse");
        }
      }
    }
    i = end - 1;
  }
  EXPECT_EQ(num_runs, static_cast<int>(report.runs.size()));
  EXPECT_GT(num_reused, 0) << "no FFMA of a run reuses an operand: the test kernels no longer exercise it";
}

TEST(SassSteadyPassNvdisasm, TrivialKernelHasNoFfma) {
  REQUIRE_NVDISASM();
  const Listing listing = disassemble(trivial_cubin());
  ASSERT_EQ(listing.run.exit_code, 0) << listing.run.output;
  ASSERT_FALSE(listing.instructions.empty());
  for (const SassInstruction& inst : listing.instructions) EXPECT_EQ(inst.text.find("FFMA"), std::string::npos);
}

}  // namespace
