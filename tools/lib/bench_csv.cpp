#include "lib/bench_csv.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace finegemm::tools {
namespace {

std::string quoted(const std::string& field) {
  if (field.find_first_of(",\"\r\n") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::vector<std::string> bench_header(bool with_floor) {
  std::vector<std::string> header = {"kind",   "groups", "m",           "n",           "k",
                                     "config", "us",     "ev_us",       "tflops",      "gbps",
                                     "pct_copy_bw", "cublaslt_us", "cublaslt_tflops", "x_cublaslt", "check"};
  if (with_floor) header.insert(header.end(), {"floor_bytes_us", "floor_tensor_us", "floor_us", "floor_bound"});
  return header;
}

}  // namespace

// ---- CsvWriter -----------------------------------------------------------------------------------------------------

CsvWriter::CsvWriter(const std::string& path, const std::string& title,
                     const std::vector<std::pair<std::string, std::string>>& conditions,
                     const std::vector<std::string>& header)
    : path_(path), columns_(header.size()) {
  for (const auto& [key, value] : conditions)
    if (value.find_first_of(";\r\n") != std::string::npos)
      throw std::invalid_argument(title + " CSV: the value of " + key + " holds ';' or a line break: '" + value + "'");
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  std::fprintf(file_, "# finegemm %s", title.c_str());
  for (const auto& [key, value] : conditions) std::fprintf(file_, "; %s=%s", key.c_str(), value.c_str());
  std::fputs("\n", file_);
  for (size_t i = 0; i < header.size(); ++i) std::fprintf(file_, "%s%s", i ? "," : "", quoted(header[i]).c_str());
  std::fputs("\n", file_);
  check_written();
}

CsvWriter::~CsvWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void CsvWriter::row(const std::vector<std::string>& fields) {
  if (fields.size() != columns_)
    throw std::invalid_argument("CSV row for " + path_ + ": " + std::to_string(fields.size()) +
                                " fields, the header has " + std::to_string(columns_));
  for (size_t i = 0; i < fields.size(); ++i) std::fprintf(file_, "%s%s", i ? "," : "", quoted(fields[i]).c_str());
  std::fputs("\n", file_);
  check_written();
}

std::string CsvWriter::fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, value);
  return buf;
}

void CsvWriter::check_written() const {
  if (std::fflush(file_) != 0 || std::ferror(file_))
    throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
}

// ---- BenchCsv ------------------------------------------------------------------------------------------------------

BenchCsv::BenchCsv(const std::string& path, const std::vector<std::pair<std::string, std::string>>& conditions,
                   bool with_floor)
    : with_floor_(with_floor), csv_(path, "bench", conditions, bench_header(with_floor)) {}

void BenchCsv::row(const BenchRow& r) {
  const ProblemShape& s = r.shape;
  std::vector<std::string> fields = {s.kind_name(),
                                     std::to_string(s.groups),
                                     std::to_string(s.m),
                                     std::to_string(s.n),
                                     std::to_string(s.k),
                                     r.config,
                                     CsvWriter::fixed(r.us, 2),
                                     CsvWriter::fixed(r.ev_us, 2),
                                     CsvWriter::fixed(r.tflops, 1),
                                     CsvWriter::fixed(r.gbps, 1),
                                     CsvWriter::fixed(r.pct_copy_bw, 1)};
  if (r.cublaslt_us > 0)
    fields.insert(fields.end(), {CsvWriter::fixed(r.cublaslt_us, 2), CsvWriter::fixed(r.cublaslt_tflops, 1),
                                 CsvWriter::fixed(r.cublaslt_us / r.us, 4)});
  else
    fields.insert(fields.end(), {"", "", ""});
  fields.push_back(r.ok ? "ok" : "FAIL");
  if (with_floor_) {
    if (r.floor_bytes_us > 0 || r.floor_tensor_us > 0) {
      const bool bytes = r.floor_bytes_us >= r.floor_tensor_us;
      fields.insert(fields.end(), {CsvWriter::fixed(r.floor_bytes_us, 2), CsvWriter::fixed(r.floor_tensor_us, 2),
                                   CsvWriter::fixed(bytes ? r.floor_bytes_us : r.floor_tensor_us, 2),
                                   bytes ? "bytes" : "tensor"});
    } else {
      fields.insert(fields.end(), {"", "", "", ""});
    }
  }
  csv_.row(fields);
}

}  // namespace finegemm::tools
