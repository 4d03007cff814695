#include "jit/compiler.hpp"

#include <nvrtc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/error.hpp"

namespace finegemm::jit {
namespace {

constexpr const char* kArchFlag = "--gpu-architecture=sm_90a";  // wgmma and setmaxnreg need the 'a' target

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void check_nvrtc(nvrtcResult result, const char* what, const std::string& log = {}) {
  if (result != NVRTC_SUCCESS)
    fail(Error::Kind::kCompile, "jit::nvrtc", what, " failed: ", nvrtcGetErrorString(result), log.empty() ? "" : "\n",
         log);
}

class NvrtcCompiler final : public Compiler {
 public:
  explicit NvrtcCompiler(bool debug) {
    int major = 0, minor = 0;
    check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");
    identity_ = "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
    // -default-device: NVRTC otherwise takes the call operator of a generic lambda inside a kernel for a host
    // function (the kernel instantiates its K loop once per compile-time scale split through one).
    flags_ = {kArchFlag, "-std=c++17", "-default-device", "--ptxas-options=--verbose", "-DNDEBUG"};
    if (debug) flags_.push_back("-lineinfo");
  }

  std::string identity() const override { return identity_; }
  const std::vector<std::string>& flags() const override { return flags_; }

  CompileResult compile(const std::string& source, const std::string& name_expression,
                        const std::vector<const HeaderSet*>& header_sets) const override {
    const auto start = std::chrono::steady_clock::now();
    std::vector<const char*> contents, names;
    for (const HeaderSet* set : header_sets) {
      for (const auto& h : set->headers) {
        contents.push_back(h.content);
        names.push_back(h.path);
      }
    }
    nvrtcProgram program = nullptr;
    check_nvrtc(nvrtcCreateProgram(&program, source.c_str(), "finegemm_kernel.cu", int(contents.size()),
                                   contents.data(), names.data()),
                "nvrtcCreateProgram");
    struct Destroy {
      nvrtcProgram* p;
      ~Destroy() { nvrtcDestroyProgram(p); }
    } destroy{&program};
    check_nvrtc(nvrtcAddNameExpression(program, name_expression.c_str()), "nvrtcAddNameExpression");
    std::vector<const char*> options;
    for (const auto& f : flags_) options.push_back(f.c_str());
    const nvrtcResult compiled = nvrtcCompileProgram(program, int(options.size()), options.data());
    CompileResult result;
    size_t log_size = 0;
    nvrtcGetProgramLogSize(program, &log_size);
    result.log.resize(log_size);
    if (log_size > 0) nvrtcGetProgramLog(program, result.log.data());
    while (!result.log.empty() && result.log.back() == '\0') result.log.pop_back();
    check_nvrtc(compiled, "nvrtcCompileProgram", result.log);
    size_t cubin_size = 0;
    check_nvrtc(nvrtcGetCUBINSize(program, &cubin_size), "nvrtcGetCUBINSize");
    result.cubin.resize(cubin_size);
    check_nvrtc(nvrtcGetCUBIN(program, result.cubin.data()), "nvrtcGetCUBIN");
    const char* lowered = nullptr;
    check_nvrtc(nvrtcGetLoweredName(program, name_expression.c_str(), &lowered), "nvrtcGetLoweredName");
    result.symbol = lowered;
    result.seconds = seconds_since(start);
    return result;
  }

 private:
  std::string identity_;
  std::vector<std::string> flags_;
};

std::string run_command(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  check(pipe != nullptr, Error::Kind::kCompile, "jit::nvcc", "cannot run: ", command);
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int raw = pclose(pipe);
  *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return output;
}

std::string find_nvcc() {
  if (const char* env = std::getenv("FINEGEMM_NVCC")) return env;
  if (const char* home = std::getenv("CUDA_HOME")) {
    const std::string path = std::string(home) + "/bin/nvcc";
    if (std::filesystem::exists(path)) return path;
  }
#ifdef FINEGEMM_NVCC_PATH
  if (std::filesystem::exists(FINEGEMM_NVCC_PATH)) return FINEGEMM_NVCC_PATH;
#endif
  return "nvcc";
}

class NvccCompiler final : public Compiler {
 public:
  explicit NvccCompiler(bool debug) : nvcc_(find_nvcc()) {
    int status = 0;
    const std::string version = run_command("\"" + nvcc_ + "\" --version", &status);
    check(status == 0, Error::Kind::kCompile, "jit::nvcc", "cannot run ", nvcc_,
          " (set FINEGEMM_NVCC or CUDA_HOME, or use FINEGEMM_JIT_COMPILER=nvrtc): ", version);
    std::smatch match;
    const std::regex release(R"(release ([0-9.]+), V([0-9.]+))");
    identity_ = std::regex_search(version, match, release) ? "nvcc " + match[2].str() : "nvcc unknown";
    flags_ = {"-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-O3", "-Xptxas=-v", "-DNDEBUG"};
    if (debug) flags_.push_back("-lineinfo");
  }

  std::string identity() const override { return identity_; }
  const std::vector<std::string>& flags() const override { return flags_; }

  CompileResult compile(const std::string& source, const std::string& name_expression,
                        const std::vector<const HeaderSet*>& header_sets) const override {
    namespace fs = std::filesystem;
    const auto start = std::chrono::steady_clock::now();
    char tmpl[] = "/tmp/finegemm-nvcc-XXXXXX";
    check(mkdtemp(tmpl) != nullptr, Error::Kind::kCompile, "jit::nvcc", "cannot create a temporary directory");
    const fs::path dir(tmpl);
    struct Cleanup {
      fs::path p;
      ~Cleanup() {
        std::error_code ec;
        fs::remove_all(p, ec);
      }
    } cleanup{dir};
    for (const HeaderSet* set : header_sets) {
      for (const auto& h : set->headers) {
        const fs::path path = dir / "include" / h.path;
        fs::create_directories(path.parent_path());
        std::ofstream(path, std::ios::binary).write(h.content, std::streamsize(h.size));
      }
    }
    const fs::path cu = dir / "kernel.cu";
    std::ofstream(cu) << source;
    const fs::path cubin = dir / "kernel.cubin";
    std::ostringstream cmd;
    cmd << '"' << nvcc_ << '"';
    for (const auto& f : flags_) cmd << ' ' << f;
    cmd << " -cubin -I" << (dir / "include") << ' ' << cu << " -o " << cubin;
    int status = 0;
    CompileResult result;
    result.log = run_command(cmd.str(), &status);
    check(status == 0, Error::Kind::kCompile, "jit::nvcc", "compilation failed:\n", result.log);
    std::ifstream in(cubin, std::ios::binary);
    result.cubin.assign(std::istreambuf_iterator<char>(in), {});
    result.symbol = symbol_from_log(result.log, name_expression);
    result.seconds = seconds_since(start);
    return result;
  }

 private:
  // ptxas -v prints "Compiling entry function '<mangled>'"; the generated source instantiates exactly one kernel.
  static std::string symbol_from_log(const std::string& log, const std::string& name_expression) {
    const std::regex entry(R"(Compiling entry function '([^']+)')");
    std::smatch match;
    check(std::regex_search(log, match, entry), Error::Kind::kCompile, "jit::nvcc",
          "no kernel found in the output for ", name_expression);
    return match[1].str();
  }

  std::string nvcc_;
  std::string identity_;
  std::vector<std::string> flags_;
};

}  // namespace

std::unique_ptr<Compiler> make_compiler(const std::string& backend, bool debug) {
  if (backend.empty() || backend == "nvrtc") return std::make_unique<NvrtcCompiler>(debug);
  if (backend == "nvcc") return std::make_unique<NvccCompiler>(debug);
  fail(Error::Kind::kInvalidArgument, "jit", "FINEGEMM_JIT_COMPILER must be 'nvrtc' or 'nvcc', got '", backend, "'");
}

long spill_bytes_from_log(const std::string& log) {
  const std::regex spills(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  long total = -1;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), spills); it != std::sregex_iterator(); ++it)
    total = (total < 0 ? 0 : total) + std::stol((*it)[1].str()) + std::stol((*it)[2].str());
  return total;
}

}  // namespace finegemm::jit
