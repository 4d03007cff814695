#!/usr/bin/env bash
# The build command: configures and builds everything (libfinegemm, the finegemm CLI, the CPU and GPU tests) in
# Release with all cores, in build/ (or $FINEGEMM_BUILD_DIR). Incremental: a second run rebuilds what changed.
#   scripts/build.sh [cmake --build arguments, e.g. --target finegemm_cli]
# scripts/test.sh and scripts/bench.sh build through it, so every script uses the same configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FINEGEMM_BUILD_DIR:-build}
export PATH="$PATH:/usr/local/cuda/bin"
# The options are passed on every run, so a build directory configured otherwise (e.g. without the tests) is
# reconfigured to this configuration.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFINEGEMM_BUILD_TESTS=ON -DFINEGEMM_BUILD_CLI=ON
cmake --build "$BUILD" -j "$(nproc)" "$@"
if [ -x "$BUILD/finegemm" ]; then
  echo "The finegemm CLI is $BUILD/finegemm (try $BUILD/finegemm --help); scripts/test.sh runs the tests."
fi
