#!/usr/bin/env bash
# Runs the GPU suite's reduced set under compute-sanitizer memcheck, racecheck, synccheck and initcheck (each test in
# a process of its own), the dense wide tail under memcheck, synccheck and initcheck, then the CLI on 256-row
# contiguous tiles, on 128x192 tiles with half batches, on the weight gradients' 128x160 tiles, dense and K-grouped,
# on the dense one's C loaded a tile ahead, and the decode chain with PDL (memcheck, racecheck, synccheck); fails on
# any report. From the repository root:
#   scripts/sanitize.sh [BUILD_DIR] [OUT_DIR]
set -uo pipefail
BUILD=${1:-build-device}
OUT_DIR=${2:-.}
TESTS="$BUILD/tests/finegemm_gpu_tests"
FILTER=${FINEGEMM_SANITIZE_FILTER:-Gpu.SanitizerSmallCases:Gpu.SanitizerPsumCases:Gpu.SanitizerDecodeCases}
status=0
# sanitize TOOL LOG LABEL COMMAND...: COMMAND under compute-sanitizer's TOOL (at most 300 s), its output in
# $OUT_DIR/sanitizer-LOG.log; prints the tool's summary line and fails the script on any report.
sanitize() {
  local tool=$1 log="$OUT_DIR/sanitizer-$2.log" label=$3
  shift 3
  timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 "$@" > "$log" 2>&1
  local rc=$?
  local summary
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
  echo "sanitizer $tool$label: rc=$rc ${summary:-no summary line}"
  [ $rc -eq 0 ] || status=1
}
# Each test of the filter in a process of its own, so that each gets the 300 s (racecheck is the slowest).
IFS=: read -r -a TEST_NAMES <<< "$FILTER"
for tool in memcheck racecheck synccheck initcheck; do
  for test in "${TEST_NAMES[@]}"; do
    sanitize "$tool" "$tool-${test#Gpu.}" " ($test)" "$TESTS" --gtest_filter="$test"
  done
done
# The dense wide tail (racecheck took over 300 s on it; its wide tiles' shared-memory use is the contiguous kernels',
# which the CLI cases below racecheck).
for tool in memcheck synccheck initcheck; do
  sanitize "$tool" "wide-tail-$tool" " (dense wide tail)" "$TESTS" --gtest_filter=Gpu.SanitizerWideTail
done
# The CLI on a shape file with forced tiles, both SA layouts, under memcheck, racecheck and synccheck.
#   cli_cases NAME "DESCRIPTION" FORCE_CONFIG SHAPES_CSV
cli_cases() {
  local name=$1 what=$2 force=$3 shapes=$4
  for sa in mn k; do
    for tool in memcheck racecheck synccheck; do
      FINEGEMM_FORCE_CONFIG=$force sanitize "$tool" "$name-$tool-$sa" " ($what, SA $sa)" \
        "$BUILD/finegemm" bench --shapes "$shapes" --iters 1 --sa "$sa"
    done
  done
}
if [ -x "$BUILD/finegemm" ]; then
  # The 256-row kernel, which the suite's small cases never pick: contiguous shapes forced to 256x128 tiles whose
  # router-like draws hold wide tiles (a block's 128-row half over two n-blocks), and masked and psum groups of at most
  # 128 rows (wide tiles with SA by TMA; with gathered SA the K loop of one wave).
  cli_cases wide "256-row wide and one-wave tiles" bm=256,bn=128 tests/sanitizer/wide-tiles.csv
  # Half batches (BLOCK_N=192, more than 4 K blocks: two commit groups per K block), one tile over two SB blocks;
  # grouped shapes, which have no cuBLASLt baseline (racecheck reports hazards inside cuBLASLt's own kernel).
  cli_cases halves "128x192 half batches" bm=128,bn=192 tests/sanitizer/half-batches.csv
  # The weight-gradient kernel's widest tile (1x128 SB; bench passes C as D, so the epilogue reduces into D by TMA),
  # which the suite's small wgrad cases never pick; M not a multiple of 4, so that cuBLASLt does not run.
  cli_cases wgrad "wgrad 128x160 tiles" bm=128,bn=160 tests/sanitizer/wgrad.csv
  # The same shapes with C's tiles loaded a tile ahead into two shared tiles (C = D; M=301 moves its last row block
  # up, which then reads rows of C that another tile writes, and stores only its own).
  cli_cases wgrad-ahead "wgrad C loaded ahead, 128x96 tiles" cahead=1,bm=128,bn=96 tests/sanitizer/wgrad.csv
  # The K-grouped kernel's widest tile over experts of drawn sizes (some without tokens), D reduced into by TMA.
  cli_cases kgrouped "kgrouped 128x160 tiles" bm=128,bn=160 tests/sanitizer/kgrouped.csv
  # The decode chain as a model runs it (bench --chain: each layer a per-token quantization then its GEMM, in CUDA
  # graphs with programmatic dependent launch off and on): 2 layers, M = 1 and 12 (SA loaded once per CTA, 4 and 16
  # floats per K block) and 64, N x K 2112x7168 (split-K over 2-CTA clusters) and 4096x7168.
  for tool in memcheck racecheck synccheck; do
    sanitize "$tool" "chain-$tool" " (decode chain, PDL off and on)" \
      "$BUILD/finegemm" bench --chain --layers 2 --m 1,12,64 --iters 20 --shapes tests/sanitizer/chain.csv
  done
fi
exit $status
