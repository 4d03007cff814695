#include "lib/shapes.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace finegemm::tools {
namespace {

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, sep)) out.push_back(cell);
  return out;
}

int64_t parse_int(const std::string& s, const std::string& where) {
  size_t pos = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != s.size() || v < 0) throw std::runtime_error(where + ": expected a non-negative integer, got '" + s + "'");
  return v;
}

/// A shape of the line's kind (sizes not set yet).
ProblemShape parse_kind(const std::string& s, const std::string& where) {
  const std::vector<std::string>& names = shape_kind_names();
  if (std::find(names.begin(), names.end(), s) == names.end())
    throw std::runtime_error(where + ": kind must be normal, contiguous, masked, psum, wgrad or kgrouped, got '" + s +
                             "'");
  return shape_of_kind(s);
}

}  // namespace

std::vector<ProblemShape> parse_shapes(const std::string& text, const std::string& origin) {
  std::vector<ProblemShape> shapes;
  std::stringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#' || line.rfind("kind,", 0) == 0) continue;
    const std::string where = origin + ":" + std::to_string(line_no);
    const auto cells = split(line, ',');
    if (cells.size() < 5) throw std::runtime_error(where + ": expected kind,groups,m,n,k");
    ProblemShape s = parse_kind(cells[0], where);
    const int64_t groups = parse_int(cells[1], where);  // range-checked before narrowing (found by fuzz_shapes)
    s.m = parse_int(cells[2], where);
    s.n = parse_int(cells[3], where);
    s.k = parse_int(cells[4], where);
    if (groups < 1 || groups > 65536) throw std::runtime_error(where + ": groups must be in 1..65536");
    s.groups = int(groups);
    if (s.n == 0 || s.k == 0 || s.m > (int64_t(1) << 31) || s.n > (int64_t(1) << 31) || s.k > (int64_t(1) << 31))
      throw std::runtime_error(where + ": sizes out of range");
    if (s.kind == GemmKind::kNormal && s.groups != 1)
      throw std::runtime_error(where + ": " + s.kind_name() + " GEMMs have groups=1");
    shapes.push_back(s);
  }
  return shapes;
}

std::vector<ProblemShape> read_shape_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read shape file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_shapes(ss.str(), path);
}

std::string find_data_file(const std::string& relative) {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots;
  char exe[4096] = {};
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len > 0) {
    fs::path dir = fs::path(std::string(exe, size_t(len))).parent_path();
    for (int up = 0; up < 4 && !dir.empty(); ++up, dir = dir.parent_path()) roots.push_back(dir);
  }
  roots.push_back(fs::current_path());
  for (const auto& root : roots) {
    for (const fs::path& candidate : {root / relative, root / "share" / "finegemm" / relative}) {
      if (fs::exists(candidate)) return candidate.string();
    }
  }
  throw std::runtime_error("cannot find " + relative + " (run from the repository or pass the path explicitly)");
}

Problem problem_of(const ProblemShape& shape, bool sa_k_major) {
  Problem p;
  p.kind = shape.kind;
  p.n = shape.n;
  p.k = shape.k;
  p.num_groups = shape.groups;
  p.sa_k_major = sa_k_major;
  if (shape.wgrad || shape.kind == GemmKind::kGroupedK) {
    p.sb_per_row = true;
    p.d_dtype = DType::kFloat32;
    p.accumulate = true;
  }
  if (shape.kind == GemmKind::kGroupedK) {
    // The call's SA is MN-major whatever the tools are asked for (the kind takes no other); it adds into D whether
    // or not it accumulates (without, D is zeroed first), and its heuristic sees M and the expected K per expert.
    p.sa_k_major = false;
    p.m = shape.m;
  } else if (shape.kind == GemmKind::kGroupedContiguous) {
    p.m = std::max<int64_t>(1, shape.m) * shape.groups;  // M_sum the heuristic sees (expected)
  } else {
    p.m = std::max<int64_t>(1, shape.m);  // normal: M; masked, psum: rows per group
  }
  p.m_max = shape.kind == GemmKind::kGroupedMasked ? shape.m : 0;
  return p;
}

std::vector<UnsupportedShape> remove_unsupported(std::vector<ProblemShape>& shapes, bool sa_k_major) {
  std::vector<UnsupportedShape> removed;
  std::vector<ProblemShape> kept;
  for (const ProblemShape& s : shapes) {
    std::string reason;
    if (is_supported(problem_of(s, sa_k_major), &reason)) {
      kept.push_back(s);
    } else {
      removed.push_back({s, reason});
    }
  }
  shapes = std::move(kept);
  return removed;
}

int precompile_all(const std::vector<Problem>& problems, int num_sms, int jobs) {
  // Distinct configurations only.
  std::vector<Problem> todo;
  std::set<std::string> seen;
  for (const auto& p : problems) {
    const std::string key = describe_config(p, num_sms) + "|" + std::to_string(p.n) + "|" + std::to_string(p.k) + "|" +
                            std::to_string(int(p.kind)) + "|" + std::to_string(p.sa_k_major) + "|" +
                            std::to_string(p.sb_per_row) + "|" + std::to_string(int(p.d_dtype)) + "|" +
                            std::to_string(p.accumulate) + "|" + std::to_string(p.c_is_d);
    if (seen.insert(key).second) todo.push_back(p);
  }
  std::atomic<size_t> next{0};
  std::atomic<int> compiled{0};
  std::mutex error_mutex;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, jobs); ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < todo.size(); i = next++) {
        try {
          if (precompile(todo[i], num_sms)) ++compiled;
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(error_mutex);
          if (first_error.empty()) first_error = e.what();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!first_error.empty()) throw std::runtime_error(first_error);
  return compiled.load();
}

}  // namespace finegemm::tools
