#!/usr/bin/env bash
# Builds and runs the microbenchmarks on a Hopper GPU (docs/performance-log.md: wgmma, sessions 17-18; L2 sides,
# session 22; TMA ingress, session 29; narrow tiles' K block and B's DRAM stream, session 30; a warm call's host cost,
# session 32):
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
# launch_overhead links the library: FINEGEMM_LIB_DIR (default: build) must hold libfinegemm.so.
lib=${FINEGEMM_LIB_DIR:-build}
if [ -f "$lib/libfinegemm.so" ]; then
  "$nvcc" -gencode=arch=compute_90a,code=sm_90a -std=c++17 -O3 -I"$here/../../include" -o "$out/launch_overhead" \
    "$here/launch_overhead.cu" -L"$lib" -lfinegemm -lcuda -Xlinker -rpath -Xlinker "$(cd "$lib" && pwd)"
else
  echo "tools/micro: launch_overhead not built ($lib/libfinegemm.so missing; set FINEGEMM_LIB_DIR)"
fi
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
if [ -x "$out/launch_overhead" ]; then "$out/launch_overhead"; fi
