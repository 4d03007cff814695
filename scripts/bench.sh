#!/usr/bin/env bash
# The main job: build, then benchmark finegemm against cuBLASLt on the DeepSeek-V3 shapes (data/shapes/deepseek_v3.csv).
# Extra arguments go to `finegemm bench` (e.g. --shapes FILE, --kinds normal, --sa k). Without a Hopper GPU it says so.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FINEGEMM_BUILD_DIR:-build}
export PATH="$PATH:/usr/local/cuda/bin"
# The build directory and configuration of scripts/build.sh; only the CLI is built here.
scripts/build.sh --target finegemm_cli > /dev/null
exec "$BUILD/finegemm" bench "$@"
