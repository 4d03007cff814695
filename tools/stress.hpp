// `finegemm stress`: host threads, each with its own stream per device, issuing random GEMMs of every kind (new
// shapes included, so kernels are compiled while other threads launch) for a while, every result checked against
// the GPU reference. scripts/multi-process-check.sh builds the multi-thread, multi-process and multi-GPU
// acceptance runs from it.
#pragma once

namespace finegemm::tools {

/// Runs `finegemm stress` with the options in argv[0..argc) (the words after the command name) and prints one
/// machine-readable summary line "stress: calls=... failures=... compiles=... ...". Returns the exit code: 0 when
/// every call was correct, 1 on any failure or without a usable GPU, 2 on invalid options. A call that hangs
/// (--hang-seconds) ends the process with status 3 after the summary: stuck threads cannot be joined.
int run_stress(int argc, char** argv);

}  // namespace finegemm::tools
