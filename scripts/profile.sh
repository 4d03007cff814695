#!/usr/bin/env bash
# Profiles the GEMM kernel of a few shapes with Nsight Compute (clocks as found: --clock-control none): speed of light,
# per-unit throughput, tensor-pipe activity and the warp stall reasons per issued instruction.
#   scripts/profile.sh BUILD_DIR OUT_DIR "kind,groups,m,n,k" ...      (PROFILE_TAG prefixes the log names)
set -uo pipefail
BUILD=$1 OUT_DIR=$2
shift 2
METRICS="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$"
METRICS+=",sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
METRICS+=",l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed"
METRICS+=",dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed"
METRICS+=",l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg"
METRICS+=",gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second"
METRICS+=",dram__bytes_read.sum,lts__t_bytes.sum,sm__cycles_active.avg,sm__cycles_active.max"
i=0
for shape in "$@"; do
  i=$((i + 1))
  shape_file=$("$(dirname "$0")/shape-file.sh" "$shape" profile-shape)
  log="$OUT_DIR/profile-${PROFILE_TAG:-}$i.log"
  timeout 240 ncu --clock-control none --target-processes all -k regex:sm90_fp8_gemm -c 1 --metrics "$METRICS" \
    "$BUILD/finegemm" bench --shapes "$shape_file" --iters 2 > "$log" 2>&1
  echo "== profile ${PROFILE_TAG:-} $shape (rc=$?)"
  # Non-zero stall reasons, largest first, then the throughput lines.
  grep -E "issue_stalled" "$log" | awk '{v=$NF; gsub(",","",v); if (v+0 > 0.05) print v, $1}' | sort -rn | head -12
  grep -E "tensor_op|throughput|duration|cycles_elapsed|cycles_active|bytes|inst_executed|wavefronts" "$log" |
    sed 's/  */ /g'
done
