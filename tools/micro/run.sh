#!/usr/bin/env bash
# Builds and runs the microbenchmarks on a Hopper GPU (docs/performance-log.md: wgmma, sessions 17-18; L2 sides,
# session 22; TMA ingress, session 29; narrow tiles' K block and B's DRAM stream, session 30):
#   tools/micro/run.sh [BUILD_DIR]      (default build-micro; nvcc from PATH or /usr/local/cuda/bin)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-build-micro}
mkdir -p "$out"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
python3 "$here/gen_mma.py" > "$out/micro_mma.cuh"
for bench in wgmma_smem math_structure narrow_wgmma; do
  "$nvcc" -gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -I"$out" -I"$here/../../include" -o "$out/$bench" \
    "$here/$bench.cu"
done
"$nvcc" -gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -I"$here/.." -o "$out/l2_sides" "$here/l2_sides.cu" \
  "$here/../lib/power.cpp" -ldl
"$nvcc" -gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -I"$here" -I"$here/../../include" -o "$out/tma_ingress" \
  "$here/tma_ingress.cu"
"$nvcc" -gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -I"$here" -I"$here/../../include" -o "$out/b_stream" \
  "$here/b_stream.cu"
if ! nvidia-smi -L 2>/dev/null | grep -q "H100\|H200\|H800\|H20"; then
  echo "tools/micro: built in $out; no Hopper GPU here, not run"
  exit 0
fi
"$out/wgmma_smem"
"$out/math_structure"
"$out/narrow_wgmma"
"$out/l2_sides"
"$out/tma_ingress"
"$out/b_stream"
"$out/b_stream" read
