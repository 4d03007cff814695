#include "lib/bench_csv.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace finegemm::tools {
namespace {

const char* kind_name(GemmKind k) {
  return k == GemmKind::kNormal ? "normal" : (k == GemmKind::kGroupedContiguous ? "contiguous" : "masked");
}

std::string quoted(const std::string& field) {
  if (field.find_first_of(",\"\r\n") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

BenchCsv::BenchCsv(const std::string& path, const std::vector<std::pair<std::string, std::string>>& conditions,
                   bool with_floor)
    : path_(path), with_floor_(with_floor) {
  for (const auto& [key, value] : conditions)
    if (value.find_first_of(";\r\n") != std::string::npos)
      throw std::invalid_argument("bench CSV: the value of " + key + " holds ';' or a line break: '" + value + "'");
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  std::fputs("# finegemm bench", file_);
  for (const auto& [key, value] : conditions) std::fprintf(file_, "; %s=%s", key.c_str(), value.c_str());
  std::fputs("\nkind,groups,m,n,k,config,us,ev_us,tflops,gbps,pct_copy_bw,cublaslt_us,cublaslt_tflops,x_cublaslt,check",
             file_);
  if (with_floor_) std::fputs(",floor_bytes_us,floor_tensor_us,floor_us,floor_bound", file_);
  std::fputs("\n", file_);
  check_written();
}

BenchCsv::~BenchCsv() {
  if (file_ != nullptr) std::fclose(file_);
}

void BenchCsv::row(const BenchRow& r) {
  const ProblemShape& s = r.shape;
  std::fprintf(file_, "%s,%d,%lld,%lld,%lld,%s,%.2f,%.2f,%.1f,%.1f,%.1f,", kind_name(s.kind), s.groups, (long long)s.m,
               (long long)s.n, (long long)s.k, quoted(r.config).c_str(), r.us, r.ev_us, r.tflops, r.gbps,
               r.pct_copy_bw);
  if (r.cublaslt_us > 0) std::fprintf(file_, "%.2f,%.1f,%.4f", r.cublaslt_us, r.cublaslt_tflops, r.cublaslt_us / r.us);
  else std::fputs(",,", file_);
  std::fprintf(file_, ",%s", r.ok ? "ok" : "FAIL");
  if (with_floor_) {
    if (r.floor_bytes_us > 0 || r.floor_tensor_us > 0) {
      const bool bytes = r.floor_bytes_us >= r.floor_tensor_us;
      std::fprintf(file_, ",%.2f,%.2f,%.2f,%s", r.floor_bytes_us, r.floor_tensor_us,
                   bytes ? r.floor_bytes_us : r.floor_tensor_us, bytes ? "bytes" : "tensor");
    } else {
      std::fputs(",,,,", file_);
    }
  }
  std::fputs("\n", file_);
  check_written();
}

void BenchCsv::check_written() const {
  if (std::fflush(file_) != 0 || std::ferror(file_))
    throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
}

}  // namespace finegemm::tools
