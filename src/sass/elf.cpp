#include "sass/elf.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string_view>

#include "common/error.hpp"

namespace finegemm::sass {

namespace {

constexpr const char* kWhere = "sass::parse_elf";

// ELF64 layout (System V gABI).
constexpr uint64_t kHeaderBytes = 64;
constexpr uint64_t kSectionHeaderBytes = 64;
constexpr uint64_t kProgramHeaderBytes = 56;
constexpr uint8_t kClass64 = 2;       // ELFCLASS64
constexpr uint8_t kDataLittle = 1;    // ELFDATA2LSB
constexpr uint8_t kVersionCurrent = 1;
constexpr uint16_t kSectionIndexReserved = 0xff00;  // SHN_LORESERVE: e_shnum/e_shstrndx at or above need extensions
constexpr std::string_view kCodePrefix = ".text.";

// Header field offsets.
constexpr uint64_t kIdentClass = 4, kIdentData = 5, kIdentVersion = 6, kIdentOsAbi = 7, kIdentAbiVersion = 8;
constexpr uint64_t kType = 16, kMachine = 18, kVersion = 20, kPhoff = 32, kShoff = 40, kFlags = 48, kEhsize = 52,
                   kPhentsize = 54, kPhnum = 56, kShentsize = 58, kShnum = 60, kShstrndx = 62;

// True when [offset, offset + size) lies inside a file of `file_size` bytes (no overflow).
bool in_file(uint64_t offset, uint64_t size, uint64_t file_size) {
  return offset <= file_size && size <= file_size - offset;
}

// Little-endian load of an unsigned integer at a range the caller has validated (checked again here).
template <typename T>
T load(std::span<const char> bytes, uint64_t offset) {
  check(in_file(offset, sizeof(T), bytes.size()), Error::Kind::kInternal, kWhere, "read of ", sizeof(T),
        " bytes at offset ", offset, " outside a ", bytes.size(), "-byte input");
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<T>(static_cast<uint8_t>(bytes[offset + i])) << (8 * i);
  return value;
}

std::string hex(uint64_t value) { return detail::concat("0x", std::hex, value); }

struct RawSection {
  uint32_t name = 0;
  ElfSection section;
};

RawSection read_section_header(std::span<const char> bytes, uint64_t at) {
  RawSection raw;
  raw.name = load<uint32_t>(bytes, at + 0);
  raw.section.type = load<uint32_t>(bytes, at + 4);
  raw.section.flags = load<uint64_t>(bytes, at + 8);
  raw.section.offset = load<uint64_t>(bytes, at + 24);
  raw.section.size = load<uint64_t>(bytes, at + 32);
  raw.section.link = load<uint32_t>(bytes, at + 40);
  raw.section.info = load<uint32_t>(bytes, at + 44);
  raw.section.addralign = load<uint64_t>(bytes, at + 48);
  raw.section.entsize = load<uint64_t>(bytes, at + 56);
  return raw;
}

void check_header_table(std::span<const char> bytes, const char* what, uint64_t offset, uint64_t count,
                        uint64_t entry_size, uint64_t expected_entry_size) {
  check_arg(entry_size == expected_entry_size, kWhere, what, " entries are ", entry_size, " bytes, ELF64 needs ",
            expected_entry_size);
  check_arg(offset >= kHeaderBytes, kWhere, what, " at offset ", offset, " overlaps the ELF header");
  check_arg(offset % 8 == 0, kWhere, what, " offset ", offset, " is not 8-byte aligned");
  check_arg(in_file(offset, count * entry_size, bytes.size()), kWhere, what, " (offset ", offset, ", ", count,
            " entries of ", entry_size, " bytes) runs past the end of the ", bytes.size(),
            "-byte input: truncated file or corrupt header");
}

void check_program_headers(std::span<const char> bytes, uint64_t phoff, uint64_t phnum, uint64_t phentsize) {
  if (phnum == 0) return;
  check_arg(phnum < kSectionIndexReserved, kWhere, "program header count ", phnum, " needs ELF extensions");
  check_header_table(bytes, "program header table", phoff, phnum, phentsize, kProgramHeaderBytes);
  for (uint64_t i = 0; i < phnum; ++i) {
    const uint64_t at = phoff + i * kProgramHeaderBytes;
    const uint64_t offset = load<uint64_t>(bytes, at + 8);
    const uint64_t file_size = load<uint64_t>(bytes, at + 32);
    check_arg(in_file(offset, file_size, bytes.size()), kWhere, "segment ", i, " [", hex(offset), ", +", file_size,
              " bytes) runs past the end of the ", bytes.size(), "-byte input: truncated file?");
  }
}

}  // namespace

ElfImage parse_elf(std::span<const char> bytes) {
  const uint64_t file_size = bytes.size();

  // Identification
  check_arg(file_size >= kHeaderBytes, kWhere, "input of ", file_size, " bytes is shorter than an ELF64 header (",
            kHeaderBytes, " bytes): truncated or not an ELF file");
  check_arg(std::memcmp(bytes.data(), "\x7f" "ELF", 4) == 0, kWhere, "not an ELF file (bad magic bytes)");
  check_arg(load<uint8_t>(bytes, kIdentClass) == kClass64, kWhere, "ELF class ",
            int(load<uint8_t>(bytes, kIdentClass)), " is not ELF64");
  check_arg(load<uint8_t>(bytes, kIdentData) == kDataLittle, kWhere, "ELF data encoding ",
            int(load<uint8_t>(bytes, kIdentData)), " is not little-endian");
  check_arg(load<uint8_t>(bytes, kIdentVersion) == kVersionCurrent &&
                load<uint32_t>(bytes, kVersion) == kVersionCurrent,
            kWhere, "unknown ELF version");
  check_arg(load<uint16_t>(bytes, kEhsize) == kHeaderBytes, kWhere, "ELF header size ", load<uint16_t>(bytes, kEhsize),
            " is not ", kHeaderBytes);

  ElfImage image;
  image.os_abi = load<uint8_t>(bytes, kIdentOsAbi);
  image.abi_version = load<uint8_t>(bytes, kIdentAbiVersion);
  image.type = load<uint16_t>(bytes, kType);
  image.machine = load<uint16_t>(bytes, kMachine);
  image.flags = load<uint32_t>(bytes, kFlags);

  // Program headers: not used, validated so that a truncated tail is caught.
  check_program_headers(bytes, load<uint64_t>(bytes, kPhoff), load<uint16_t>(bytes, kPhnum),
                        load<uint16_t>(bytes, kPhentsize));

  // Section header table
  const uint64_t shoff = load<uint64_t>(bytes, kShoff);
  const uint64_t shnum = load<uint16_t>(bytes, kShnum);
  const uint64_t shstrndx = load<uint16_t>(bytes, kShstrndx);
  check_arg(shnum > 0 && shoff != 0, kWhere, "the ELF file has no section header table");
  check_arg(shnum < kSectionIndexReserved, kWhere, "section count ", shnum, " needs ELF extensions");
  check_header_table(bytes, "section header table", shoff, shnum, load<uint16_t>(bytes, kShentsize),
                     kSectionHeaderBytes);
  check_arg(shstrndx > 0 && shstrndx < shnum, kWhere, "section name table index ", shstrndx,
            " is outside the section table (", shnum, " sections)");

  std::vector<RawSection> raw(shnum);
  for (uint64_t i = 0; i < shnum; ++i) {
    raw[i] = read_section_header(bytes, shoff + i * kSectionHeaderBytes);
    const ElfSection& s = raw[i].section;
    if (i == 0) {
      check_arg(s.type == kElfSectionNull, kWhere, "section 0 is not SHT_NULL");
      continue;
    }
    check_arg(s.addralign == 0 || std::has_single_bit(s.addralign), kWhere, "section ", i, " alignment ",
              s.addralign, " is not a power of two");
    if (s.type != kElfSectionNobits)
      check_arg(in_file(s.offset, s.size, file_size), kWhere, "section ", i, " contents [", hex(s.offset), ", +",
                s.size, " bytes) run past the end of the ", file_size, "-byte input: truncated file?");
  }

  // Section names
  const ElfSection& names = raw[shstrndx].section;
  check_arg(names.type == kElfSectionStrtab, kWhere, "section name table (section ", shstrndx,
            ") is not a string table");
  const std::string_view name_table(bytes.data() + names.offset, names.size);
  image.sections.reserve(shnum);
  for (uint64_t i = 0; i < shnum; ++i) {
    ElfSection section = raw[i].section;
    const uint64_t name_offset = raw[i].name;
    check_arg(name_offset < name_table.size(), kWhere, "section ", i, " name offset ", name_offset,
              " is outside the section name table (", name_table.size(), " bytes)");
    const size_t end = name_table.find('\0', name_offset);
    check_arg(end != std::string_view::npos, kWhere, "section ", i, " name is not NUL-terminated");
    section.name = std::string(name_table.substr(name_offset, end - name_offset));
    image.sections.push_back(std::move(section));
  }

  // Code sections
  for (size_t i = 1; i < image.sections.size(); ++i) {
    const ElfSection& s = image.sections[i];
    if (!s.name.starts_with(kCodePrefix) || s.type != kElfSectionProgbits || !(s.flags & kElfFlagExecInstr)) continue;
    check_arg(s.addralign <= 1 || s.offset % s.addralign == 0, kWhere, "code section ", s.name, " at offset ",
              hex(s.offset), " is not aligned to its declared ", s.addralign, " bytes");
    image.code.push_back({s.name.substr(kCodePrefix.size()), static_cast<int>(i), s.offset, s.size});
  }
  std::vector<ElfCodeSection> by_offset = image.code;
  std::ranges::sort(by_offset, {}, &ElfCodeSection::offset);
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const ElfCodeSection& a = by_offset[i - 1];
    const ElfCodeSection& b = by_offset[i];
    check_arg(a.offset + a.size <= b.offset, kWhere, "code sections .text.", a.kernel, " and .text.", b.kernel,
              " overlap");
  }
  return image;
}

int cubin_sm_version(const ElfImage& image) {
  constexpr const char* where = "sass::cubin_sm_version";
  // NOTE: CUDA ELF ABI version 7 keeps the real SM in e_flags bits 0-7; version 8 (CUDA 13) moved it to bits 8-15
  // and uses the low byte for other flags. sm_90 and sm_90a carry the same number (90).
  constexpr int kAbiSmLowByte = 7;
  constexpr int kAbiSmSecondByte = 8;
  check_arg(image.machine == kElfMachineCuda, where, "not a CUDA cubin (e_machine ", image.machine, ", expected ",
            kElfMachineCuda, ")");
  if (image.abi_version == kAbiSmLowByte) return static_cast<int>(image.flags & 0xff);
  if (image.abi_version == kAbiSmSecondByte) return static_cast<int>((image.flags >> 8) & 0xff);
  fail(Error::Kind::kInvalidArgument, where, "unknown CUDA ELF ABI version ", int(image.abi_version),
       " (known: 7, 8): cannot read the SM version from e_flags ", hex(image.flags));
}

}  // namespace finegemm::sass
