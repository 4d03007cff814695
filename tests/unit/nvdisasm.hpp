// Locates nvdisasm for the SASS checks of the CPU tests (FINEGEMM_NVDISASM, PATH, CUDA_HOME, or PyPI's
// nvidia-cuda-nvdisasm package) and disassembles a cubin.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace finegemm::test {

inline std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

inline std::string find_nvdisasm() {
  if (const char* env = std::getenv("FINEGEMM_NVDISASM")) return std::filesystem::exists(env) ? env : "";
  std::string path = run_capture("command -v nvdisasm 2>/dev/null");
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  if (!path.empty()) return path;
  if (const char* home = std::getenv("CUDA_HOME"))
    if (std::filesystem::exists(std::string(home) + "/bin/nvdisasm")) return std::string(home) + "/bin/nvdisasm";
  path = run_capture(
      "python3 -c \"import nvidia, os, glob; "
      "print(next(iter(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], '*', 'bin', 'nvdisasm')))), ''))\" "
      "2>/dev/null");
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  return path;
}

/// SASS listing of `cubin` ("" when nvdisasm is missing or fails).
inline std::string disassemble(const std::string& cubin, const std::string& nvdisasm) {
  if (nvdisasm.empty()) return "";
  char tmpl[] = "/tmp/finegemm-sass-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return "";
  close(fd);
  std::ofstream(tmpl, std::ios::binary) << cubin;
  const std::string out = run_capture("\"" + nvdisasm + "\" \"" + tmpl + "\" 2>&1");
  std::remove(tmpl);
  return out;
}

}  // namespace finegemm::test
