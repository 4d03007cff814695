// A small, bounds-checked reader for the ELF64 little-endian files that NVIDIA's compilers write (cubins).
//
// Everything the reader returns has been validated against the size of the input: header fields, the section and
// program header tables, section names and section contents. A truncated or hostile input throws
// finegemm::Error (kInvalidArgument) instead of reading out of bounds. The reader keeps no pointer into the bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace finegemm::sass {

/// e_machine of NVIDIA GPU code (EM_CUDA).
inline constexpr uint16_t kElfMachineCuda = 190;
/// Section types and flags the reader interprets.
inline constexpr uint32_t kElfSectionNull = 0;      // SHT_NULL
inline constexpr uint32_t kElfSectionProgbits = 1;  // SHT_PROGBITS
inline constexpr uint32_t kElfSectionStrtab = 3;    // SHT_STRTAB
inline constexpr uint32_t kElfSectionNobits = 8;    // SHT_NOBITS
inline constexpr uint64_t kElfFlagExecInstr = 0x4;  // SHF_EXECINSTR

/// One entry of the section header table, with its name resolved.
struct ElfSection {
  std::string name;
  uint32_t type = 0;
  uint64_t flags = 0;
  uint64_t offset = 0;  ///< file offset of the contents (unused for SHT_NOBITS)
  uint64_t size = 0;    ///< bytes of contents (in the file unless SHT_NOBITS)
  uint64_t addralign = 0;
  uint32_t link = 0;
  uint32_t info = 0;
  uint64_t entsize = 0;

  bool operator==(const ElfSection&) const = default;
};

/// A `.text.<kernel>` section: executable PROGBITS whose contents lie inside the file, aligned as declared.
struct ElfCodeSection {
  std::string kernel;     ///< the symbol name after ".text."
  int section_index = 0;  ///< index into ElfImage::sections
  uint64_t offset = 0;    ///< file offset of the first instruction
  uint64_t size = 0;      ///< bytes of code

  bool operator==(const ElfCodeSection&) const = default;
};

/// What parse_elf() read: the identification and header fields that matter for cubins, and the section table.
struct ElfImage {
  uint8_t os_abi = 0;       ///< e_ident[EI_OSABI]: 0x33 (CUDA ABI v7) or 0x41 (CUDA ABI v8) for cubins
  uint8_t abi_version = 0;  ///< e_ident[EI_ABIVERSION]
  uint16_t type = 0;        ///< e_type (ET_REL, ET_EXEC)
  uint16_t machine = 0;     ///< e_machine
  uint32_t flags = 0;       ///< e_flags (for cubins: the SM version, see cubin_sm_version)
  std::vector<ElfSection> sections;      ///< the whole section header table, entry 0 included
  std::vector<ElfCodeSection> code;      ///< the `.text.*` sections, in section-table order
};

/// Parses and validates an ELF64 little-endian image. Throws finegemm::Error (kInvalidArgument) on anything that is
/// malformed or out of bounds: a short or non-ELF input, header tables outside the file or with unexpected entry
/// sizes, a section whose contents or name lie outside the file, overlapping or misaligned code sections.
ElfImage parse_elf(std::span<const char> bytes);

/// The real SM version a CUDA ELF is compiled for (90 for both sm_90 and sm_90a), read from e_flags in the layout
/// of its ABI version (7: bits 0-7; 8: bits 8-15). Throws finegemm::Error (kInvalidArgument) for a non-CUDA ELF or
/// an ABI version whose e_flags layout is unknown.
int cubin_sm_version(const ElfImage& image);

}  // namespace finegemm::sass
