#!/usr/bin/env bash
# The test command: configure, build, run every test with ctest. GPU tests report SKIPPED without a Hopper GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FINEGEMM_BUILD_DIR:-build}
export PATH="$PATH:/usr/local/cuda/bin"
NVDISASM=$(python3 -c "import nvidia, os, glob; print(next(iter(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], '*', 'bin', 'nvdisasm')))), ''))" 2>/dev/null || true)
[ -n "$NVDISASM" ] && export FINEGEMM_NVDISASM="$NVDISASM"
# A private cache so tests never depend on (or pollute) the user's kernel cache.
export FINEGEMM_CACHE_DIR="$PWD/$BUILD/test-jit-cache"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$(nproc)"
cd "$BUILD"
ctest --output-on-failure -j 1 --timeout 900 "$@"
