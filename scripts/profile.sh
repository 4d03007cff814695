#!/usr/bin/env bash
# Profiles the GEMM kernel of a few shapes with Nsight Compute (clocks as found: --clock-control none).
#   scripts/profile.sh BUILD_DIR OUT_DIR "kind,groups,m,n,k" ...
set -uo pipefail
BUILD=$1 OUT_DIR=$2
shift 2
i=0
for shape in "$@"; do
  i=$((i + 1))
  shape_file=$(mktemp /tmp/profile-shape-XXXX.csv)
  printf 'kind,groups,m,n,k\n%s\n' "$shape" > "$shape_file"
  timeout 240 ncu --clock-control none --target-processes all -k regex:sm90_fp8_gemm -c 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis \
    "$BUILD/finegemm" bench --shapes "$shape_file" --iters 2 > "$OUT_DIR/profile-${PROFILE_TAG:-}$i.log" 2>&1
  echo "== profile $shape (rc=$?)"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Executed Ipc Active|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|L2 Hit Rate|L1/TEX Hit|Stall|stall" "$OUT_DIR/profile-${PROFILE_TAG:-}$i.log" | head -40
done
