// Calls the installed finegemm's queries that need no GPU: the version, and the heuristic's answer for one problem
// that is supported and one that is not.
#include <finegemm/finegemm.hpp>

#include <cstdio>
#include <string>

int main() {
  finegemm::Problem problem;
  problem.m = 128;
  problem.n = 7168;
  problem.k = 2048;
  std::string reason;
  if (!finegemm::is_supported(problem, &reason)) {
    std::printf("unexpected: 128x7168x2048 is not supported: %s\n", reason.c_str());
    return 1;
  }
  finegemm::Problem bad = problem;
  bad.n = 1001;
  if (finegemm::is_supported(bad, &reason)) {
    std::printf("unexpected: N=1001 is supported\n");
    return 1;
  }
  std::printf("version %s\n", finegemm::version());
  std::printf("config %s\n", finegemm::describe_config(problem, 132).c_str());
  std::printf("rejected %s\n", reason.c_str());
  return 0;
}
