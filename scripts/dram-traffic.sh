#!/usr/bin/env bash
# DRAM bytes read and written by finegemm's and cuBLASLt's kernels during `finegemm bench` calls, with the bench's
# own L2 flush in front of each call (ncu --cache-control none: ncu neither flushes nor replays, so the memset's
# dirty lines are still in the L2 when the timed kernel runs and their write-backs show up as its DRAM writes).
#   scripts/dram-traffic.sh BUILD_DIR OUT_DIR [--flush memset|read] "kind,groups,m,n,k" ...
set -uo pipefail
BUILD=$1 OUT_DIR=$2
shift 2
FLUSH=memset
if [ "${1:-}" = "--flush" ]; then FLUSH=$2; shift 2; fi
METRICS="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_elapsed.avg.per_second"
mkdir -p "$OUT_DIR"
i=0
for shape in "$@"; do
  i=$((i + 1))
  shape_file=$("$(dirname "$0")/shape-file.sh" "$shape" dram-shape)
  log="$OUT_DIR/dram-$FLUSH-$i.log"
  # The bench's check call, 3 warm-up calls and 3 timed calls of each library; ncu reports every one.
  timeout 300 ncu --clock-control none --cache-control none --target-processes all \
    -k "regex:sm90_fp8_gemm|nvjet|gemm" --metrics "$METRICS" --csv --page raw \
    "$BUILD/finegemm" bench --shapes "$shape_file" --iters 3 --flush "$FLUSH" > "$log" 2>&1
  echo "== $shape, flush $FLUSH (rc=$?): kernel, us, MB read, MB written, MHz (the bench's timed calls are the last 3 of each)"
  python3 - "$log" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1], errors="replace") if l.startswith('"'))]
if not rows:
    sys.exit("no ncu rows")
head, units, data = rows[0], rows[1], rows[2:]
col = {name: head.index(name) for name in head}
def num(r, name):
    try:
        return float(r[col[name]].replace(",", ""))
    except (KeyError, ValueError):
        return float("nan")
def scale(name, unit):
    return {"ns": 1e-3, "us": 1.0, "ms": 1e3, "hz": 1e-6,
            "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3,
            "hz": 1e-6, "khz": 1e-3, "Mhz": 1.0, "Ghz": 1e3, "cycle/second": 1e-6, "cycle/nsecond": 1e3,
            "cycle/usecond": 1.0}.get(unit, float("nan"))
u = {name: units[col[name]] for name in head}
for r in data:
    name = r[col["Kernel Name"]][:48]
    t = num(r, "gpu__time_duration.sum") * scale("", u["gpu__time_duration.sum"])
    rd = num(r, "dram__bytes_read.sum") * scale("", u["dram__bytes_read.sum"])
    wr = num(r, "dram__bytes_write.sum") * scale("", u["dram__bytes_write.sum"])
    mhz = num(r, "sm__cycles_elapsed.avg.per_second") * scale("", u["sm__cycles_elapsed.avg.per_second"])
    print(f"  {name:48s} {t:8.1f} {rd:8.1f} {wr:8.1f} {mhz:6.0f}")
PY
done
