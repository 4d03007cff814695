#!/usr/bin/env bash
# Runs the GPU suite's reduced set under compute-sanitizer memcheck, racecheck, synccheck and initcheck; fails on any
# report.   scripts/sanitize.sh [BUILD_DIR] [OUT_DIR]
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
exit $status
