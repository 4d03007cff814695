#!/usr/bin/env bash
# The test command: builds through scripts/build.sh (incremental), then runs every test with ctest. GPU tests
# report SKIPPED without a Hopper GPU. Extra arguments go to ctest (e.g. -L cpu, -R Heuristics). Fails when no
# test ran.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FINEGEMM_BUILD_DIR:-build}
scripts/build.sh
if ! grep -q '^FINEGEMM_BUILD_TESTS:BOOL=ON$' "$BUILD/CMakeCache.txt"; then
  echo "scripts/test.sh: $BUILD is configured without the tests (FINEGEMM_BUILD_TESTS is not ON)" >&2
  exit 1
fi
export PATH="$PATH:/usr/local/cuda/bin"
NVDISASM=$(python3 -c "import nvidia, os, glob; print(next(iter(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], '*', 'bin', 'nvdisasm')))), ''))" 2>/dev/null || true)
[ -n "$NVDISASM" ] && export FINEGEMM_NVDISASM="$NVDISASM"
# A private cache so tests never depend on (or pollute) the user's kernel cache.
export FINEGEMM_CACHE_DIR="$PWD/$BUILD/test-jit-cache"
cd "$BUILD"
ctest --output-on-failure --no-tests=error -j 1 --timeout 900 "$@"
