#!/usr/bin/env bash
# Instruction-level profile of one GEMM kernel launch: Nsight Compute's warp-state sampling per SASS instruction
# (clocks as found), summarized as the instructions where warps spend the most samples and why.
#   scripts/profile-source.sh BUILD_DIR OUT_DIR "kind,groups,m,n,k" [TAG]
set -uo pipefail
BUILD=$1 OUT_DIR=$2 SHAPE=$3 TAG=${4:-src}
shape_file=$(mktemp /tmp/profile-shape-XXXX.csv)
printf 'kind,groups,m,n,k\n%s\n' "$SHAPE" > "$shape_file"
rep=/tmp/profile-$TAG
timeout 300 ncu --clock-control none --target-processes all -k regex:sm90_fp8_gemm -c 1 \
  --section WarpStateStats --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis \
  -f -o "$rep" "$BUILD/finegemm" bench --shapes "$shape_file" --iters 2 > "$OUT_DIR/profile-$TAG-run.log" 2>&1
echo "== ncu $SHAPE rc=$?"
ncu -i "$rep.ncu-rep" --print-details all > "$OUT_DIR/profile-$TAG-details.log" 2>&1
grep -E "Duration|SM Frequency|Throughput|Warp Cycles Per Issued|Stall|Samples" "$OUT_DIR/profile-$TAG-details.log" | head -40
ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT_DIR/profile-$TAG-source.csv" 2> "$OUT_DIR/profile-$TAG-source.err"
echo "== source page rc=$? lines=$(wc -l < "$OUT_DIR/profile-$TAG-source.csv")"
python3 - "$OUT_DIR/profile-$TAG-source.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
# The source page may start with banner lines: find the header row (it names the SASS column).
head = next((i for i, r in enumerate(rows) if any("Source" in c for c in r) and len(r) > 5), None)
if head is None:
    print("no source table; first lines:", rows[:3]); sys.exit(0)
hdr, body = rows[head], rows[head + 1:]
print("columns:", "; ".join(hdr)[:1500])
src = next(i for i, c in enumerate(hdr) if "Source" in c)
samp = [i for i, c in enumerate(hdr) if "Sampling" in c and "All" in c] or [i for i, c in enumerate(hdr) if "Sampling" in c]
if not samp:
    sys.exit(0)
def num(v):
    try: return float(v.replace(",", ""))
    except ValueError: return 0.0
total = sum(num(r[samp[0]]) for r in body if len(r) > samp[0])
stall_cols = [i for i, c in enumerate(hdr) if c.startswith("stall_") or "Stall" in c]
print(f"total samples {total:.0f}")
for r in sorted(body, key=lambda r: -num(r[samp[0]]) if len(r) > samp[0] else 0)[:30]:
    s = num(r[samp[0]])
    reasons = sorted(((num(r[i]), hdr[i]) for i in stall_cols if i < len(r) and num(r[i]) > 0), reverse=True)[:4]
    print(f"{100 * s / max(total, 1):5.1f}%  {r[src].strip()[:70]:70s} " + ", ".join(f"{n}={v:.0f}" for v, n in reasons))
PY
