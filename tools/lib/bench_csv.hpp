// The bench's CSV files. CsvWriter writes any of them; BenchCsv is `finegemm bench --csv FILE`, the rows a plotting
// script reads (scripts/plot_bench.py):
//   line 1   # finegemm bench; device=NVIDIA H100 80GB HBM3; sms=132; timer=cupti; flush=memset; ...
//            (the run's conditions: key=value pairs after "# finegemm bench", separated by "; ")
//   line 2   kind,groups,m,n,k,config,us,ev_us,tflops,gbps,pct_copy_bw,cublaslt_us,cublaslt_tflops,x_cublaslt,check
//            and, with --ceiling, ,floor_bytes_us,floor_tensor_us,floor_us,floor_bound
//   then     one row per shape, written (and flushed) as soon as the shape is measured.
// Times in microseconds (medians); x_cublaslt = cublaslt_us / us (above 1: finegemm is faster); a figure that was not
// measured (cuBLASLt on a grouped kind) is an empty field. Fields holding a comma or a quote are quoted (RFC 4180).
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "lib/gemm_problem.hpp"

namespace finegemm::tools {

/// A CSV file of measurements: line 1 `# finegemm <title>; key=value; ...` (the run's conditions), line 2 the header,
/// then one row per call of row(), flushed as soon as it is written so that a run stopped half way keeps its rows.
class CsvWriter {
 public:
  /// Creates (truncates) `path` and writes the first two lines. `conditions`: values without ';' or a line break
  /// (else std::invalid_argument). Throws std::runtime_error when the file cannot be written.
  CsvWriter(const std::string& path, const std::string& title,
            const std::vector<std::pair<std::string, std::string>>& conditions, const std::vector<std::string>& header);
  ~CsvWriter();
  CsvWriter(const CsvWriter&) = delete;
  CsvWriter& operator=(const CsvWriter&) = delete;

  /// One row, a field per header column (else std::invalid_argument); a field holding a comma, a quote or a line
  /// break is quoted. Throws std::runtime_error when the file cannot be written.
  void row(const std::vector<std::string>& fields);

  /// `value` with `digits` digits after the point ("%.*f").
  static std::string fixed(double value, int digits);

 private:
  void check_written() const;

  std::string path_;
  FILE* file_ = nullptr;
  size_t columns_ = 0;
};

/// One shape's figures; 0 stands for "not measured" in the cuBLASLt and floor fields.
struct BenchRow {
  ProblemShape shape;
  std::string config;
  double us = 0, ev_us = 0, tflops = 0, gbps = 0, pct_copy_bw = 0;
  double cublaslt_us = 0, cublaslt_tflops = 0;
  bool ok = true;
  double floor_bytes_us = 0, floor_tensor_us = 0;  // the two parts of the floor (lib/ceiling.hpp)
};

class BenchCsv {
 public:
  /// Creates (truncates) `path` and writes the first two lines. `conditions`: key=value pairs, values without ';'
  /// or a line break. Throws std::runtime_error when the file cannot be written.
  BenchCsv(const std::string& path, const std::vector<std::pair<std::string, std::string>>& conditions,
           bool with_floor);

  void row(const BenchRow& r);

 private:
  bool with_floor_ = false;
  CsvWriter csv_;
};

}  // namespace finegemm::tools
