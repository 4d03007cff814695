#!/usr/bin/env bash
# One command on a Hopper GPU host: configure, build with all cores, run every GPU test, the checker, the warm-up,
# the benchmark (with each shape's floor, and its CSV and plot), the decode chain (bench --chain), the Python binding
# and its examples, the stress runs and the sanitizers on the reduced set; logs and a summary land in the output
# directory.
#   scripts/device-check.sh [OUT_DIR]      (default: $OUT, else ./device-check-out)
# Steps left out with =1: FINEGEMM_SKIP_GPU_TESTS, _CHECK (checker and warm-up), _BENCH, _BENCH_READ_FLUSH, _CHAIN
# (decode layers back to back, PDL off and on), _STRESS (multi-process check, up to 7 minutes),
# _SANITIZERS (several minutes), _PYTHON; FINEGEMM_BENCH_ARGS adds bench arguments. Everything takes longer than one
# 10-minute device call: split it, or skip the stress and sanitizers.
# Needs the CUDA toolkit and CMake. GoogleTest: installed, or sources in third_party/googletest
# (cp -r /usr/src/googletest third_party/ on a Debian machine), or -DFINEGEMM_GTEST_SOURCE_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-device-check-out}}
mkdir -p "$OUT_DIR"
JOBS=$(nproc)
BUILD=build-device
export FINEGEMM_CACHE_DIR=${FINEGEMM_CACHE_DIR:-$PWD/$BUILD/jit-cache}
export PATH="$PATH:/usr/local/cuda/bin"
summary() { echo "$*" | tee -a "$OUT_DIR/summary.txt"; }
: > "$OUT_DIR/summary.txt"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv > "$OUT_DIR/gpu.txt" 2>&1
summary "gpu: $(tail -n 1 "$OUT_DIR/gpu.txt")"

start=$(date +%s)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > "$OUT_DIR/configure.log" 2>&1 &&
  cmake --build "$BUILD" -j "$JOBS" > "$OUT_DIR/build.log" 2>&1
rc=$?
summary "build: rc=$rc in $(( $(date +%s) - start )) s"
[ $rc -eq 0 ] || { tail -n 40 "$OUT_DIR/build.log"; exit 1; }

run_step() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  summary "$name: rc=$rc in $(( $(date +%s) - t0 )) s"
  return $rc
}

if [ "${FINEGEMM_SKIP_GPU_TESTS:-0}" != 1 ]; then
run_step gpu-tests 480 "$BUILD/tests/finegemm_gpu_tests" --gtest_color=no
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[jit\]|^\[overhead\]|^\[padding\]|^\[flush\]|^\[dense-awkward\]|FAILED|tests ran" "$OUT_DIR/gpu-tests.log" | tee -a "$OUT_DIR/summary.txt"
fi

if [ "${FINEGEMM_SKIP_CHECK:-0}" != 1 ]; then
  run_step check 120 "$BUILD/finegemm" check --cases 30 --seed 7
  tail -n 1 "$OUT_DIR/check.log" | tee -a "$OUT_DIR/summary.txt"
  # The checker must catch a corrupted output (exit 1).
  timeout 60 "$BUILD/finegemm" check --cases 2 --corrupt > /dev/null 2>&1
  summary "check --corrupt: rc=$? (1 expected)"
  # Warm-up of every DeepSeek-V3 shape for M in 1..8192, on an empty cache, all cores.
  rm -rf /tmp/finegemm-warmup-cache
  FINEGEMM_CACHE_DIR=/tmp/finegemm-warmup-cache timeout 300 "$BUILD/finegemm" warmup --m-range 1:8192 --sms 132 \
    > "$OUT_DIR/warmup.log" 2>&1
  summary "warmup (empty cache): rc=$? $(tail -n 1 "$OUT_DIR/warmup.log")"
fi

if [ "${FINEGEMM_SKIP_BENCH:-0}" != 1 ]; then
  # With each shape's floor (--ceiling: its bytes moved alone, its wgmmas issued alone; docs/performance.md), the
  # rows also in bench.csv, drawn into bench.png where matplotlib is installed.
  run_step bench 300 "$BUILD/finegemm" bench --ceiling --csv "$OUT_DIR/bench.csv" ${FINEGEMM_BENCH_ARGS:-}
  sed -n '/^kind /,$p' "$OUT_DIR/bench.log" >> "$OUT_DIR/summary.txt"
  if [ -s "$OUT_DIR/bench.csv" ] && python3 -c "import matplotlib" 2> /dev/null; then
    python3 scripts/plot_bench.py "$OUT_DIR/bench.csv" -o "$OUT_DIR/bench.png" > "$OUT_DIR/plot.log" 2>&1
    summary "plot: rc=$? $OUT_DIR/bench.png"
  fi
  # The same table after an L2 flush that leaves clean lines (a memset leaves dirty lines that the timed kernel
  # writes back).
  if [ "${FINEGEMM_SKIP_BENCH_READ_FLUSH:-0}" != 1 ]; then
    run_step bench-read-flush 300 "$BUILD/finegemm" bench --flush read --ceiling ${FINEGEMM_BENCH_ARGS:-}
    sed -n '/^kind /,$p' "$OUT_DIR/bench-read-flush.log" >> "$OUT_DIR/summary.txt"
  fi
fi

if [ "${FINEGEMM_SKIP_CHAIN:-0}" != 1 ]; then
  # Decode layers back to back in CUDA graphs, PDL off and on (bench --chain).
  run_step chain 300 "$BUILD/finegemm" bench --chain --csv "$OUT_DIR/chain.csv"
  sed -n '/^ *M  *N  *K |/,$p' "$OUT_DIR/chain.log" >> "$OUT_DIR/summary.txt"
fi

if [ "${FINEGEMM_SKIP_PYTHON:-0}" != 1 ]; then
  # The PyTorch binding: install over the build machine's torch, then the test suite and the examples.
  t0=$(date +%s)
  { python3 -m pip install --no-build-isolation --no-deps --no-index . ||
    python3 -m pip install --no-build-isolation --no-deps --no-index --break-system-packages .; } \
    > "$OUT_DIR/pip.log" 2>&1
  summary "python install: rc=$? in $(( $(date +%s) - t0 )) s"
  REPO=$PWD
  (cd /tmp && timeout 600 python3 -m pytest "$REPO/python/tests" -rs -q -s -p no:cacheprovider) > "$OUT_DIR/pytest.log" 2>&1
  summary "pytest: rc=$? $(tail -n 1 "$OUT_DIR/pytest.log")"
  grep -E "^\[quantizer\]|^\[overhead\]|^\[decode chain\]" "$OUT_DIR/pytest.log" | tee -a "$OUT_DIR/summary.txt"
  (cd /tmp && timeout 120 python3 "$REPO/examples/moe_layer.py") > "$OUT_DIR/moe-example.log" 2>&1
  summary "moe example: rc=$? $(tail -n 2 "$OUT_DIR/moe-example.log" | tr '\n' ' ')"
  # The decode chain through the binding, DeepGEMM's beside it where it is installed.
  (cd /tmp && timeout 600 python3 "$REPO/examples/decode_chain.py") > "$OUT_DIR/decode-chain.log" 2>&1
  summary "decode chain example: rc=$?"
  sed -n '/^ *M  *N  *K |/,$p' "$OUT_DIR/decode-chain.log" >> "$OUT_DIR/summary.txt"
fi

if [ "${FINEGEMM_SKIP_STRESS:-0}" != 1 ]; then
  # 16 processes on one empty cache, every GPU alternately and one process per GPU, 8 threads for 60 s.
  run_step multi-process 420 scripts/multi-process-check.sh "$BUILD/finegemm" "$OUT_DIR/multi-process"
  cat "$OUT_DIR/multi-process/summary.txt" >> "$OUT_DIR/summary.txt"
fi

if [ "${FINEGEMM_SKIP_SANITIZERS:-0}" != 1 ]; then
  scripts/sanitize.sh "$BUILD" "$OUT_DIR" | tee -a "$OUT_DIR/summary.txt"
fi
# At most 8 files come back from the device tool: keep the summary, the bench table, its CSV and plot, the chain's
# CSV, pack the rest.
(cd "$OUT_DIR" && tar czf logs.tgz --exclude=summary.txt --exclude=bench.log --exclude=bench.csv --exclude=bench.png \
   --exclude=chain.csv --exclude=logs.tgz -- * &&
   find . -maxdepth 1 -type f ! -name summary.txt ! -name bench.log ! -name bench.csv ! -name bench.png \
     ! -name chain.csv ! -name logs.tgz -delete)
