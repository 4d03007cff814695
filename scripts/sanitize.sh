#!/usr/bin/env bash
# Runs the GPU suite's reduced set under compute-sanitizer memcheck, racecheck, synccheck and initcheck, then the CLI on
# 256-row contiguous tiles and on 128x192 tiles with half batches (memcheck, racecheck, synccheck); fails on any
# report. From the repository root:
#   scripts/sanitize.sh [BUILD_DIR] [OUT_DIR]
set -uo pipefail
BUILD=${1:-build-device}
OUT_DIR=${2:-.}
TESTS="$BUILD/tests/finegemm_gpu_tests"
FILTER=${FINEGEMM_SANITIZE_FILTER:-Gpu.SanitizerSmallCases}
status=0
for tool in memcheck racecheck synccheck initcheck; do
  log="$OUT_DIR/sanitizer-$tool.log"
  timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 "$TESTS" --gtest_filter="$FILTER" > "$log" 2>&1
  rc=$?
  errors=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
  echo "sanitizer $tool: rc=$rc ${errors:-no summary line}"
  [ $rc -eq 0 ] || status=1
done
# The 256-row kernel, which the suite's small cases never pick: contiguous shapes forced to 256x128 tiles whose
# router-like draws hold wide tiles (a block's 128-row half over two n-blocks), both SA layouts.
if [ -x "$BUILD/finegemm" ]; then
  for sa in mn k; do
    for tool in memcheck racecheck synccheck; do
      log="$OUT_DIR/sanitizer-wide-$tool-$sa.log"
      FINEGEMM_FORCE_CONFIG=bm=256,bn=128 timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 \
        "$BUILD/finegemm" bench --shapes scripts/ab-shapes/sanitize-wide.csv --iters 1 --sa "$sa" > "$log" 2>&1
      rc=$?
      errors=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
      echo "sanitizer $tool (256-row wide tiles, SA $sa): rc=$rc ${errors:-no summary line}"
      [ $rc -eq 0 ] || status=1
    done
  done
  # Half batches (BLOCK_N=192, more than 4 K blocks: two commit groups per K block), one tile over two SB blocks;
  # grouped shapes, which have no cuBLASLt baseline (racecheck reports hazards inside cuBLASLt's own kernel).
  for sa in mn k; do
    for tool in memcheck racecheck synccheck; do
      log="$OUT_DIR/sanitizer-halves-$tool-$sa.log"
      FINEGEMM_FORCE_CONFIG=bm=128,bn=192 timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 \
        "$BUILD/finegemm" bench --shapes scripts/ab-shapes/sanitize-halves.csv --iters 1 --sa "$sa" > "$log" 2>&1
      rc=$?
      errors=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
      echo "sanitizer $tool (128x192 half batches, SA $sa): rc=$rc ${errors:-no summary line}"
      [ $rc -eq 0 ] || status=1
    done
  done
fi
exit $status
