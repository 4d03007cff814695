// libFuzzer target: shape-file parsing (tools/lib/shapes: parse_shapes).
//
// Contract checked: parse_shapes returns shapes or throws std::runtime_error (with the origin and line number),
// nothing else. On success every shape is in range (groups 1..65536, normal and wgrad GEMMs with one group,
// 0 < n, k and m, n, k <= 2^31), each shape holds exactly the values written on its line (one shape per data line, in
// order; a line is skipped when empty, a '#' comment, or the header), and writing the shapes back as CSV parses to
// the same shapes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lib/shapes.hpp"

namespace {

using finegemm::GemmKind;
using finegemm::tools::ProblemShape;

constexpr const char* kOrigin = "fuzz.csv";
constexpr int64_t kMaxSize = int64_t(1) << 31;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_shapes: contract violated: %s\n", what);
  std::abort();
}

void require(bool condition, const char* what) {
  if (!condition) fail(what);
}

const char* kind_name(const ProblemShape& s) {
  if (s.wgrad) {
    require(s.kind == GemmKind::kNormal, "a wgrad shape of a grouped kind");
    return "wgrad";
  }
  switch (s.kind) {
    case GemmKind::kNormal: return "normal";
    case GemmKind::kGroupedContiguous: return "contiguous";
    case GemmKind::kGroupedMasked: return "masked";
    case GemmKind::kGroupedContiguousPsum: return "psum";
    case GemmKind::kGroupedK: return "kgrouped";
  }
  fail("unknown GemmKind");
}

bool same_shape(const ProblemShape& a, const ProblemShape& b) {
  return a.kind == b.kind && a.wgrad == b.wgrad && a.groups == b.groups && a.m == b.m && a.n == b.n && a.k == b.k;
}

// The first five comma-separated cells of each data line, by the file format's rules (not the parser's code).
std::vector<std::vector<std::string>> data_lines(const std::string& text) {
  std::vector<std::vector<std::string>> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#' || line.starts_with("kind,")) continue;
    std::vector<std::string> cells;
    size_t from = 0;
    while (cells.size() < 5) {
      const size_t comma = line.find(',', from);
      cells.push_back(line.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
    lines.push_back(std::move(cells));
  }
  return lines;
}

// The integer a cell spells, as the C library reads it (the parser accepted the cell, so it is one).
int64_t cell_value(const std::string& cell) { return std::strtoll(cell.c_str(), nullptr, 10); }

void check_shapes(const std::string& text, const std::vector<ProblemShape>& shapes) {
  for (const ProblemShape& s : shapes) {
    require(s.groups >= 1 && s.groups <= 65536, "groups out of 1..65536");
    require(s.kind != GemmKind::kNormal || s.groups == 1, "a normal GEMM with groups != 1");
    require(s.m >= 0 && s.n > 0 && s.k > 0, "m < 0, n <= 0 or k <= 0");
    require(s.m <= kMaxSize && s.n <= kMaxSize && s.k <= kMaxSize, "a size above 2^31");
  }

  const auto lines = data_lines(text);
  require(lines.size() == shapes.size(), "not one shape per data line");
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto& cells = lines[i];
    const ProblemShape& s = shapes[i];
    require(cells.size() == 5, "a shape from a line with fewer than five cells");
    require(cells[0] == kind_name(s), "the kind differs from the line's");
    require(cell_value(cells[1]) == s.groups, "groups differs from the line's value");
    require(cell_value(cells[2]) == s.m, "m differs from the line's value");
    require(cell_value(cells[3]) == s.n, "n differs from the line's value");
    require(cell_value(cells[4]) == s.k, "k differs from the line's value");
  }

  std::ostringstream csv;
  csv << "kind,groups,m,n,k\n";
  for (const ProblemShape& s : shapes)
    csv << kind_name(s) << ',' << s.groups << ',' << s.m << ',' << s.n << ',' << s.k << '\n';
  const std::vector<ProblemShape> again = finegemm::tools::parse_shapes(csv.str(), kOrigin);
  require(again.size() == shapes.size(), "the shapes written back parse to a different count");
  for (size_t i = 0; i < shapes.size(); ++i) require(same_shape(again[i], shapes[i]), "the shapes do not round-trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<ProblemShape> shapes;
  try {
    shapes = finegemm::tools::parse_shapes(text, kOrigin);
  } catch (const std::runtime_error& e) {
    require(std::string(e.what()).starts_with(kOrigin), "the error message does not start with the origin");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_shapes: %s\n", e.what());
    fail("an exception other than std::runtime_error");
  }
  check_shapes(text, shapes);
  return 0;
}

// NOTE: shapes.cpp also holds precompile_all() and remove_unsupported(), which call into the library's heuristic
// and JIT; the parser never does. These stand-ins keep the fuzzer free of the library, NVRTC and the CUDA runtime.
namespace finegemm {
std::string describe_config(const Problem&, int) { fail("describe_config is not linked into the fuzzer"); }
bool precompile(const Problem&, int) { fail("precompile is not linked into the fuzzer"); }
bool is_supported(const Problem&, std::string*) { fail("is_supported is not linked into the fuzzer"); }
}  // namespace finegemm
