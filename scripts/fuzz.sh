#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang in a separate build directory, replays every saved regression
# input once, then fuzzes each target for a bounded time. Exits non-zero on any crash or failed regression.
#   scripts/fuzz.sh [SECONDS]        seconds of fuzzing per target (default 60); 0 only builds and replays
# FINEGEMM_FUZZ_BUILD_DIR (default build-fuzz) holds the build, the growing corpora (fuzz-corpus/<target>), the logs
# (fuzz-logs/<target>.log) and any crash input (fuzz-crashes/<target>/). See docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
BUILD=${FINEGEMM_FUZZ_BUILD_DIR:-build-fuzz}
TARGETS=(elf disk_cache shapes)
export PATH="$PATH:/usr/local/cuda/bin"

if ! [[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS]" >&2
  exit 2
fi

# ---- Toolchain: clang 14 with the libFuzzer and sanitizer runtimes (nothing is installed here) ----
if ! command -v clang++-14 >/dev/null || ! command -v clang-14 >/dev/null; then
  echo "scripts/fuzz.sh: clang++-14 not found. Install it with:" >&2
  echo "  apt-get install clang-14 libclang-rt-14-dev     (Debian 12; on Ubuntu 22.04: clang-14 libclang-common-14-dev)" >&2
  exit 2
fi
probe=$(mktemp -d)
# The disk-cache fuzzer's private cache directories (tmpfs when there is one); a crashing run leaves its own behind.
export FINEGEMM_FUZZ_TMPDIR
FINEGEMM_FUZZ_TMPDIR=$( (mktemp -d -p /dev/shm finegemm-fuzz.XXXXXX || mktemp -d) 2>/dev/null)
trap 'rm -rf "$probe" "$FINEGEMM_FUZZ_TMPDIR"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe/probe.cpp"
if ! clang++-14 -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" 2> "$probe/log"; then
  cat "$probe/log" >&2
  echo "scripts/fuzz.sh: clang++-14 cannot link a libFuzzer binary (runtime missing). Install it with:" >&2
  echo "  apt-get install libclang-rt-14-dev     (Debian 12; on Ubuntu 22.04: libclang-common-14-dev)" >&2
  exit 2
fi
if ! grep -q "tests/fuzz" CMakeLists.txt; then
  echo "scripts/fuzz.sh: CMakeLists.txt does not add tests/fuzz when FINEGEMM_BUILD_FUZZERS is ON" >&2
  exit 2
fi

# ---- Build ----
cmake -S . -B "$BUILD" -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFINEGEMM_BUILD_FUZZERS=ON -DFINEGEMM_BUILD_TESTS=OFF -DFINEGEMM_BUILD_CLI=OFF -DFINEGEMM_BUILD_PYTHON=OFF >/dev/null
cmake --build "$BUILD" --target fuzzers -j "$(nproc)"
BIN="$BUILD/tests/fuzz"
"$BIN/fuzz_seeds" "$BUILD/fuzz-seeds"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0

# ---- Regressions: every saved input, once ----
for target in "${TARGETS[@]}"; do
  dir="tests/fuzz/regressions/$target"
  [ -d "$dir" ] || continue
  mapfile -t inputs < <(find "$dir" -type f | sort)
  [ "${#inputs[@]}" -gt 0 ] || continue
  if "$BIN/fuzz_$target" "${inputs[@]}" > "$BUILD/regressions-$target.log" 2>&1; then
    echo "fuzz $target: ${#inputs[@]} regression input(s) pass"
  else
    echo "fuzz $target: REGRESSION FAILED (log: $BUILD/regressions-$target.log)"
    grep -E "ERROR|contract violated|runtime error|Running:" "$BUILD/regressions-$target.log" | tail -n 5 || true
    status=1
  fi
done

# ---- Fuzzing: each target for SECONDS_PER_TARGET ----
seed_dirs() {
  local target=$1
  [ -d "tests/fuzz/corpus/$target" ] && echo "tests/fuzz/corpus/$target"
  [ -d "$BUILD/fuzz-seeds/$target" ] && echo "$BUILD/fuzz-seeds/$target"
  [ "$target" = shapes ] && echo "data/shapes"
  return 0
}
if [ "$SECONDS_PER_TARGET" -gt 0 ]; then
  for target in "${TARGETS[@]}"; do
    corpus="$BUILD/fuzz-corpus/$target"
    crashes="$BUILD/fuzz-crashes/$target"
    log="$BUILD/fuzz-logs/$target.log"
    mkdir -p "$corpus" "$crashes" "$(dirname "$log")"
    args=(-max_total_time="$SECONDS_PER_TARGET" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1
          -artifact_prefix="$crashes/")
    [ -f "tests/fuzz/corpus/$target.dict" ] && args+=(-dict="tests/fuzz/corpus/$target.dict")
    mapfile -t seeds < <(seed_dirs "$target")
    rc=0
    "$BIN/fuzz_$target" "${args[@]}" "$corpus" "${seeds[@]}" > "$log" 2>&1 || rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -oE "cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*" "$log" | tail -n 1)
    if [ "$rc" -eq 0 ]; then
      echo "fuzz $target: ok, ${runs:-?} runs in ${SECONDS_PER_TARGET} s (${rate:-?}/s), ${cov:-no coverage line}"
    else
      echo "fuzz $target: FAILED (rc=$rc) after ${runs:-?} runs, log: $log"
      grep -E "ERROR|contract violated|runtime error|SUMMARY" "$log" | head -n 5 || true
      for input in "$crashes"/*; do
        [ -f "$input" ] || continue
        echo "  input $input ($(stat -c %s "$input") bytes), first bytes:"
        od -A x -t x1z "$input" | head -n 8 | sed 's/^/    /'
      done
      echo "  save it under tests/fuzz/regressions/$target/ and report it; scripts/fuzz.sh replays it on every run"
      status=1
    fi
  done
fi
exit $status
