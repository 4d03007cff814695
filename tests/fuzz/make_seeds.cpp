// Writes the generated seed corpora of the fuzzers:   fuzz_seeds OUT_DIR
//   OUT_DIR/elf/         real cubins compiled by NVRTC (sm_90a with FFMA runs, sm_80), and synthetic cubins of both
//                        CUDA ELF ABI versions (no NVRTC needed)
//   OUT_DIR/disk_cache/  valid entries for the fuzzed key, written by DiskCache itself
// Without a working NVRTC the real cubins are skipped with a warning; everything else is always written.
#include <nvrtc.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "jit/disk_cache.hpp"
#include "sass/elf.hpp"
#include "sass/ffma_pass.hpp"

#ifndef FINEGEMM_FUZZ_CACHE_KEY
#error "FINEGEMM_FUZZ_CACHE_KEY (the key of the fuzzed entry) must be defined by the build"
#endif

namespace {

namespace fs = std::filesystem;

// ---- Real cubins ---------------------------------------------------------------------------------------------------
// Two kernels: a promotion step in miniature (a long run of register-form FFMAs after the loads) and one with
// other instructions only, so the seed has several code sections.
constexpr const char* kKernelSource = R"(
extern "C" __global__ void promote(float* out, const float* in, const float* scales) {
  const int t = threadIdx.x;
  const float s0 = scales[2 * blockIdx.x], s1 = scales[2 * blockIdx.x + 1];
  float acc[32], part[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    acc[i] = out[i * blockDim.x + t];
    part[i] = in[i * blockDim.x + t];
  }
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = fmaf((i / 2) % 2 ? s1 : s0, part[i], acc[i]);
#pragma unroll
  for (int i = 0; i < 32; ++i) out[i * blockDim.x + t] = acc[i];
}
extern "C" __global__ void scale(int* out, int factor) { out[threadIdx.x] = int(threadIdx.x) * factor + 1; }
)";

std::vector<char> compile_cubin(const std::string& arch) {
  auto check = [](nvrtcResult result, const char* what) {
    if (result != NVRTC_SUCCESS) throw std::runtime_error(std::string(what) + ": " + nvrtcGetErrorString(result));
  };
  nvrtcProgram program = nullptr;
  check(nvrtcCreateProgram(&program, kKernelSource, "fuzz_seed.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
  const std::string arch_option = "--gpu-architecture=" + arch;
  const char* options[] = {arch_option.c_str()};
  const nvrtcResult compiled = nvrtcCompileProgram(program, 1, options);
  if (compiled != NVRTC_SUCCESS) {
    size_t log_size = 0;
    nvrtcGetProgramLogSize(program, &log_size);
    std::string log(log_size, '\0');
    nvrtcGetProgramLog(program, log.data());
    nvrtcDestroyProgram(&program);
    throw std::runtime_error("NVRTC compilation for " + arch + " failed: " + log);
  }
  size_t size = 0;
  check(nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
  std::vector<char> cubin(size);
  check(nvrtcGetCUBIN(program, cubin.data()), "nvrtcGetCUBIN");
  nvrtcDestroyProgram(&program);
  return cubin;
}

// ---- Synthetic cubins ----------------------------------------------------------------------------------------------
void put(std::vector<char>& bytes, uint64_t offset, uint64_t value, int size) {
  for (int i = 0; i < size; ++i) bytes[offset + uint64_t(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
}

// A register-form FFMA (opcode bits 0x223) with the given registers; control bits: stall 1, no yield, reuse-B set.
void put_ffma(std::vector<char>& bytes, uint64_t at, int rd, int ra, int rb, int rc) {
  put(bytes, at, 0x7223 | uint64_t(rd) << 16 | uint64_t(ra) << 24 | uint64_t(rb) << 32, 8);
  put(bytes, at + 8, uint64_t(rc) | 1ull << (105 - 64) | 1ull << (109 - 64) | 1ull << (123 - 64), 8);
}

// The smallest cubin the pass accepts: an ELF header, a section name table, one `.text.synthetic` section holding a
// run of 12 FFMAs, a non-FFMA instruction and a run of 3, and the section header table.
std::vector<char> synthetic_cubin(int abi_version) {
  constexpr uint64_t kCodeOffset = 128, kNumInstructions = 16, kCodeBytes = kNumInstructions * 16;
  const std::string names = std::string("\0.shstrtab\0.text.synthetic\0", 27);
  const uint64_t names_offset = kCodeOffset + kCodeBytes;
  const uint64_t section_table = (names_offset + names.size() + 7) / 8 * 8;
  std::vector<char> bytes(section_table + 3 * 64, '\0');

  // ELF header
  const char ident[] = {0x7f, 'E', 'L', 'F', 2 /* ELF64 */, 1 /* little-endian */, 1 /* version */};
  std::copy(std::begin(ident), std::end(ident), bytes.begin());
  bytes[7] = static_cast<char>(abi_version == 7 ? 0x33 : 0x41);  // EI_OSABI
  bytes[8] = static_cast<char>(abi_version);                     // EI_ABIVERSION
  put(bytes, 16, 2, 2);                                           // e_type: ET_EXEC
  put(bytes, 18, finegemm::sass::kElfMachineCuda, 2);
  put(bytes, 20, 1, 4);                                           // e_version
  put(bytes, 40, section_table, 8);                               // e_shoff
  put(bytes, 48, abi_version == 7 ? 90 : 90 << 8, 4);             // e_flags: sm_90
  put(bytes, 52, 64, 2);                                          // e_ehsize
  put(bytes, 58, 64, 2);                                          // e_shentsize
  put(bytes, 60, 3, 2);                                           // e_shnum
  put(bytes, 62, 1, 2);                                           // e_shstrndx

  // Code: FFMA x 12, one other instruction, FFMA x 3
  for (uint64_t i = 0; i < kNumInstructions; ++i) {
    const uint64_t at = kCodeOffset + i * 16;
    if (i == 12) {
      put(bytes, at, 0x7918, 8);  // not an FFMA
      put(bytes, at + 8, 1ull << (105 - 64), 8);
    } else {
      put_ffma(bytes, at, int(i % 8) + 8, 2, 3, int(i % 8) + 8);
    }
  }
  std::copy(names.begin(), names.end(), bytes.begin() + long(names_offset));

  // Section headers: [1] .shstrtab, [2] .text.synthetic
  auto section = [&](int index, uint32_t name, uint32_t type, uint64_t flags, uint64_t offset, uint64_t size,
                     uint64_t align) {
    const uint64_t at = section_table + uint64_t(index) * 64;
    put(bytes, at + 0, name, 4);
    put(bytes, at + 4, type, 4);
    put(bytes, at + 8, flags, 8);
    put(bytes, at + 24, offset, 8);
    put(bytes, at + 32, size, 8);
    put(bytes, at + 48, align, 8);
  };
  section(1, 1, finegemm::sass::kElfSectionStrtab, 0, names_offset, names.size(), 1);
  section(2, 11, finegemm::sass::kElfSectionProgbits, 0x2 | finegemm::sass::kElfFlagExecInstr, kCodeOffset, kCodeBytes,
          128);
  return bytes;
}

// ---- Disk-cache entries ------------------------------------------------------------------------------------------
std::string cache_entry(const std::string& payload) {
  std::string pattern = fs::temp_directory_path().string() + "/finegemm-fuzz-seeds.XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create a temporary directory");
  std::string entry;
  {
    finegemm::jit::DiskCache cache(pattern);
    if (!cache.enabled()) throw std::runtime_error("the temporary cache directory is not usable");
    cache.get_or_build(FINEGEMM_FUZZ_CACHE_KEY, [&] { return payload; });
    std::ifstream in(cache.entry_path(FINEGEMM_FUZZ_CACHE_KEY), std::ios::binary);
    entry.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  fs::remove_all(pattern);
  if (entry.size() != finegemm::jit::DiskCache::kHeaderBytes + payload.size())
    throw std::runtime_error("the cache wrote an entry of an unexpected size");
  return entry;
}

// ---- Output ------------------------------------------------------------------------------------------------------
void write_file(const fs::path& path, std::span<const char> bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

void write_cubin(const fs::path& path, const std::vector<char>& cubin) {
  write_file(path, cubin);
  std::string what;
  try {
    what = finegemm::sass::analyze_ffma_runs(cubin).to_string();
  } catch (const std::exception& e) {
    what = e.what();
  }
  std::printf("%s (%zu bytes): %s\n", path.c_str(), cubin.size(), what.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  try {
    write_cubin(out / "elf" / "synthetic_abi7.cubin", synthetic_cubin(7));
    write_cubin(out / "elf" / "synthetic_abi8.cubin", synthetic_cubin(8));
    for (const char* arch : {"sm_90a", "sm_80"}) {
      try {
        write_cubin(out / "elf" / ("nvrtc_" + std::string(arch) + ".cubin"), compile_cubin(arch));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "fuzz_seeds: warning: no NVRTC seed for %s: %s\n", arch, e.what());
      }
    }
    const std::string payload = "a small payload standing in for a cubin \x7f" "ELF\x02\x01\x01";
    write_file(out / "disk_cache" / "entry.bin", cache_entry(payload));
    write_file(out / "disk_cache" / "entry_empty_payload.bin", cache_entry(""));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
