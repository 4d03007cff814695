// KernelConfig in words (describe: the line `finegemm plan` and FINEGEMM_PRINT_CONFIGS print; kernel_function: the
// template instantiation the JIT compiles) and the parser of FINEGEMM_FORCE_CONFIG's constraints.
#include "heuristics/heuristics.hpp"

#include <sstream>

#include "common/error.hpp"
#include "finegemm/device/common/gemm_layout.cuh"

namespace finegemm::heuristics {

std::string KernelConfig::describe() const {
  std::ostringstream os;
  os << "BM=" << block_m << " BN=" << block_n << " stages=" << num_stages
     << (split_k > 1 ? " split-K=" + std::to_string(split_k) : std::string())
     << " sa="
     << (sa_mode == device::kSaMnMajor         ? "mn"
         : sa_mode == device::kSaMnMajorOnce   ? "mn-once"
         : sa_mode == device::kSaMnMajorOnce16 ? "mn-once16"
         : sa_mode == device::kSaKMajorOnce    ? "k-once"
         : sa_mode == device::kSaKMajorTma     ? "k"
                                               : "k-gather")
     << (b_evict_first ? " B:evict-first" : "") << (b_pairs ? " B:pairs" : "")
     << (d_evict_first ? " D:evict-first" : "") << (d_prefetch_lead > 0 ? " D:L2-prefetch" : "")
     << (wide_tail ? " wide-tail" : "")
     << (pdl_prefetch_b_blocks > 0 ? " PDL:B-prefetch=" + std::to_string(pdl_prefetch_b_blocks) : std::string())
     << (sb_mode == device::kSbRowMnMajor ? " sb=1x128" : "")
     << (output == device::kOutF32       ? " out=fp32"
         : output == device::kOutF32AddC   ? " out=fp32,C"
         : output == device::kOutF32AddToD ? " out=fp32,+=D"
         : output == device::kOutF32AddToDT ? " out=fp32,+=D on D^T's tiles"
         : output == device::kOutBf16DT    ? " on D^T's tiles"
         : output == device::kOutF32AddCAhead ? " out=fp32,C-ahead"
                                           : "")
     << " grid=" << grid
     << " smem=" << smem_bytes << " tiles=" << num_tiles << " waves=" << num_waves;
  return os.str();
}

std::string KernelConfig::kernel_function() const {
  std::ostringstream os;
  os << "finegemm::device::sm90_fp8_gemm_kernel<" << int(kind) << ", " << n << "u, " << k << "u, " << block_m << "u, "
     << block_n << "u, " << num_stages << "u, " << sa_mode << "u, " << split_k << "u, "
     << (wide_tail ? "true" : "false");
  // B's scales and the output only where they differ from the defaults (the forward kernels' sources, and so their
  // cache keys, stay as they were).
  if (sb_mode != device::kSbBlock || output != device::kOutBf16) os << ", " << sb_mode << "u, " << output << "u";
  os << ">";
  return os.str();
}

ConfigConstraints parse_constraints(const std::string& text) {
  ConfigConstraints c;
  c.text = text;
  constexpr const char* kWhere = "FINEGEMM_FORCE_CONFIG";
  constexpr const char* kFields = "bm, bn, stages, split, l2b, l2d, bpairs, cahead, saonce, pdlpf, dt";
  std::istringstream fields(text);
  for (std::string field; std::getline(fields, field, ',');) {
    const size_t eq = field.find('=');
    const std::string name = field.substr(0, eq), value = eq == std::string::npos ? "" : field.substr(eq + 1);
    check_arg(eq != std::string::npos && !value.empty(), kWhere, "fields are name=value (", kFields, "), got '",
              field, "'");
    if (name == "l2b" || name == "l2d") {
      check_arg(value == "first" || value == "normal", kWhere, name, " is first or normal, got '", value, "'");
      (name == "l2b" ? c.b_evict_first : c.d_evict_first) = value == "first" ? 1 : 0;
      continue;
    }
    if (name == "bpairs" || name == "cahead" || name == "dt") {
      check_arg(value == "0" || value == "1", kWhere, name, " is 0 or 1, got '", value, "'");
      (name == "bpairs" ? c.b_pairs : name == "cahead" ? c.c_ahead : c.d_transposed) = value == "1" ? 1 : 0;
      continue;
    }
    if (name == "saonce") {
      check_arg(value == "0", kWhere, "saonce is 0 (SA by a box per stage), got '", value, "'");
      c.sa_once = 0;
      continue;
    }
    if (name == "pdlpf") {
      check_arg(value == "0", kWhere, "pdlpf is 0 (no B prefetch under PDL), got '", value, "'");
      c.pdl_prefetch = 0;
      continue;
    }
    int* target = name == "bm" ? &c.block_m : name == "bn" ? &c.block_n : name == "stages" ? &c.stages
                : name == "split" ? &c.split_k : nullptr;
    check_arg(target != nullptr, kWhere, "unknown field '", name, "' (", kFields, ")");
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check_arg(used == value.size() && v > 0, kWhere, name, " is a positive integer, got '", value, "'");
    *target = v;
  }
  return c;
}

}  // namespace finegemm::heuristics
