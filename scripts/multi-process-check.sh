#!/usr/bin/env bash
# Reliability runs of `finegemm stress` (random GEMMs of every kind, each output checked against the GPU reference):
#   (a) 16 processes at once on one empty cache directory, same seed (so they ask for the same kernels): all correct,
#       and each kernel compiled once in all: the compiles the processes report add up to the entries in the cache;
#   (b) with more than one GPU: one process driving every GPU alternately, then one process per GPU at once;
#   (c) 8 threads for 60 s on a fresh cache (first-time compiles included).
#   scripts/multi-process-check.sh FINEGEMM_BINARY OUT_DIR
# Writes OUT_DIR/summary.txt (per run: calls, failures, compiles, cache entries; per device for (b)) and
# OUT_DIR/stress-logs.tgz (one log per process); exits 1 when any run fails. About 2 minutes on one GPU, 2.5 on two.
# Knobs: FINEGEMM_MP_PROCESSES (16), FINEGEMM_MP_SECONDS (20, runs a and b), FINEGEMM_STRESS_SECONDS (60, run c).
set -uo pipefail
usage="usage: scripts/multi-process-check.sh FINEGEMM_BINARY OUT_DIR"
BIN=${1:?$usage}
OUT_DIR=${2:?$usage}
[ -x "$BIN" ] || { echo "$BIN is not an executable (build the finegemm CLI first)" >&2; exit 2; }
mkdir -p "$OUT_DIR" || exit 2
PROCESSES=${FINEGEMM_MP_PROCESSES:-16}
SECONDS_AB=${FINEGEMM_MP_SECONDS:-20}
SECONDS_C=${FINEGEMM_STRESS_SECONDS:-60}
HANG_SECONDS=60      # one call (a compile included) longer than this is a hang: the process reports it and exits 3
MARGIN_SECONDS=90    # process start, the calls still running at the deadline, the hang report
CACHE_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/finegemm-multi-process.XXXXXX") || exit 2
trap 'rm -rf "$CACHE_ROOT"' EXIT
: > "$OUT_DIR/summary.txt"
summary() { echo "$*" | tee -a "$OUT_DIR/summary.txt"; }
status=0

# The value of NAME= on the final summary line of a stress log (empty when the process printed none).
field() { grep '^stress: calls=' "$2" | tail -n 1 | tr ' ' '\n' | sed -n "s/^$1=//p"; }
entries() { find "$1/kernels" -name '*.bin' 2> /dev/null | wc -l; }
# The first failure reports of a log (or its last lines), on one line.
why() {
  { grep -m 3 -E '^stress: (FAIL|HANG)|^finegemm' "$1" || tail -n 2 "$1"; } | tr '\n' ' ' | cut -c 1-400
}

pids=()
logs=()
# start LOG CACHE_DIR STRESS_ARGS...: one stress process in the background.
start() {
  local log=$1 cache=$2 seconds=$3
  shift 3
  FINEGEMM_CACHE_DIR=$cache timeout -s KILL $((seconds + HANG_SECONDS + MARGIN_SECONDS)) \
    "$BIN" stress --seconds "$seconds" --hang-seconds "$HANG_SECONDS" "$@" > "$log" 2>&1 &
  pids+=($!)
  logs+=("$log")
}

# finish NAME CACHE_DIR: waits for the started processes; one summary line with their sums. A run passes when every
# process exited 0 after at least one call, no call failed, and the compiles add up to the cache entries.
finish() {
  local name=$1 cache=$2 calls=0 failures=0 compiles=0 bad=0 i rc log c f k
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    log=${logs[$i]}
    c=$(field calls "$log")
    f=$(field failures "$log")
    k=$(field compiles "$log")
    if [ "$rc" -ne 0 ] || [ -z "$c" ] || [ "${c:-0}" -eq 0 ]; then
      bad=$((bad + 1))
      summary "  $name: $(basename "$log"): rc=$rc calls=${c:-none}: $(why "$log")"
    fi
    calls=$((calls + ${c:-0}))
    failures=$((failures + ${f:-0}))
    compiles=$((compiles + ${k:-0}))
  done
  local n verdict=ok
  n=$(entries "$cache")
  if [ "$bad" -ne 0 ] || [ "$failures" -ne 0 ]; then verdict=FAIL; fi
  if [ "$compiles" -ne "$n" ]; then verdict="FAIL (compiles != cache entries: a kernel was compiled twice or lost)"; fi
  [ "$verdict" = ok ] || status=1
  summary "$name: processes=${#pids[@]} calls=$calls failures=$failures compiles=$compiles cache_entries=$n bad_processes=$bad: $verdict"
  pids=()
  logs=()
}

t0=$(date +%s)
# (a) Many processes, one empty cache.
for i in $(seq -w 1 "$PROCESSES"); do
  start "$OUT_DIR/a-process$i.log" "$CACHE_ROOT/a" "$SECONDS_AB" --devices all --threads 2 --seed 1
done
logs_a=("${logs[@]}")
finish "a ($PROCESSES processes x 2 threads x $SECONDS_AB s, one cache)" "$CACHE_ROOT/a"
first_log=${logs_a[0]}
num_devices=$(field devices "$first_log")
summary "devices: ${num_devices:-unknown}"
grep '^stress: device .* finegemm uses' "$first_log" | sed 's/^/  /' | tee -a "$OUT_DIR/summary.txt"

# (b) Several GPUs: one process driving all of them alternately, then one process per GPU.
if [ "${num_devices:-1}" -gt 1 ]; then
  start "$OUT_DIR/b-all-devices.log" "$CACHE_ROOT/b1" "$SECONDS_AB" --devices all --threads 4 --seed 2
  finish "b (one process on all $num_devices GPUs alternately, 4 threads x $SECONDS_AB s)" "$CACHE_ROOT/b1"
  grep '^stress: device .*calls=' "$OUT_DIR/b-all-devices.log" | sed 's/^/  /' | tee -a "$OUT_DIR/summary.txt"
  if [ "$(grep -c '^stress: device .*calls=[1-9]' "$OUT_DIR/b-all-devices.log")" -ne "$num_devices" ]; then
    summary "  FAIL: not every GPU got calls"
    status=1
  fi
  for ((d = 0; d < num_devices; ++d)); do
    start "$OUT_DIR/b-device$d.log" "$CACHE_ROOT/b2" "$SECONDS_AB" --devices "$d" --threads 4 --seed $((3 + d))
  done
  finish "b (one process per GPU, $num_devices at once, 4 threads x $SECONDS_AB s)" "$CACHE_ROOT/b2"
  for ((d = 0; d < num_devices; ++d)); do
    grep '^stress: device .*calls=' "$OUT_DIR/b-device$d.log" | sed 's/^/  /' | tee -a "$OUT_DIR/summary.txt"
  done
else
  summary "b (several GPUs): skipped, ${num_devices:-no} device visible"
fi

# (c) 8 threads with their own streams for a minute, first-time compiles included.
start "$OUT_DIR/c-threads.log" "$CACHE_ROOT/c" "$SECONDS_C" --threads 8 --seed 4
finish "c (8 threads x $SECONDS_C s, fresh cache)" "$CACHE_ROOT/c"

summary "multi-process-check: $([ $status -eq 0 ] && echo ok || echo FAILED) in $(( $(date +%s) - t0 )) s"
# Two files come back: summary.txt and the logs packed (the device tool returns few files).
(cd "$OUT_DIR" && tar czf stress-logs.tgz -- *.log && rm -f -- *.log)
exit $status
