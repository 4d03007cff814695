#!/usr/bin/env bash
# Builds tools/compare/deepgemm_sm90.cu (DeepGEMM's SM90 FP8 1D2D kernel vs finegemm, see README.md) into
# $OUT/deepgemm_sm90. Needs the third-party sources in third_party/ (git-ignored, see README.md) and a built finegemm
# tree in $BUILD (cmake -S . -B build && cmake --build build --target finegemm finegemm_toolkit): the binary links
# $BUILD/libfinegemm.so, and $BUILD/libfinegemm_toolkit.a + libfinegemm_reference.a when they exist (else it compiles
# tools/lib and src/reference itself, as CMake's finegemm_toolkit target does). No GPU is needed to build.
#
# Variables: BUILD (default build), OUT (default build-dgcmp), NVCC (default nvcc on PATH, else
# /usr/local/cuda/bin/nvcc), CUPTI_INCLUDE (directory with cupti_activity.h, fallback build only), JOBS.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BUILD="${BUILD:-build}"
OUT="${OUT:-build-dgcmp}"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
JOBS="${JOBS:-$(nproc)}"
BUILD_ABS="$(cd "$BUILD" 2>/dev/null && pwd || true)"

DG_INC="third_party/deepgemm/deep_gemm/include"
CUTLASS_INC="third_party/cutlass/include"
for f in "$DG_INC/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh" "$CUTLASS_INC/cute/tensor.hpp"; do
  [[ -f "$f" ]] || { echo "build.sh: missing $f (third-party sources: see tools/compare/README.md)" >&2; exit 1; }
done
[[ -n "$BUILD_ABS" && -f "$BUILD_ABS/libfinegemm.so" ]] || {
  echo "build.sh: no $BUILD/libfinegemm.so: build finegemm first (cmake -S . -B $BUILD && cmake --build $BUILD)" >&2
  exit 1
}
mkdir -p "$OUT/obj"
OUT_ABS="$(cd "$OUT" && pwd)"
CUDA_HOME="$(cd "$(dirname "$NVCC")/.." && pwd)"

# Host flags of CMake's finegemm_toolkit (C++20, the repo's include dirs, the toolkit's definitions).
HOST_INC=(-Iinclude -Itools -Isrc -I"$CUDA_HOME/include")
LIBS=()
if [[ -f "$BUILD_ABS/libfinegemm_toolkit.a" && -f "$BUILD_ABS/libfinegemm_reference.a" ]]; then
  echo "build.sh: linking $BUILD/libfinegemm_toolkit.a and libfinegemm_reference.a"
  LIBS+=("$BUILD_ABS/libfinegemm_toolkit.a" "$BUILD_ABS/libfinegemm_reference.a")
else
  echo "build.sh: no toolkit archives in $BUILD: compiling tools/lib and src/reference"
  CUPTI_DEFS=()
  for d in "${CUPTI_INCLUDE:-}" "$CUDA_HOME/include" "$CUDA_HOME/extras/CUPTI/include" third_party/cupti/include; do
    if [[ -n "$d" && -f "$d/cupti_activity.h" ]]; then
      hints="$(ls "$d"/../lib/libcupti.so* "$d"/../lib64/libcupti.so* "$CUDA_HOME"/lib64/libcupti.so* \
               "$CUDA_HOME"/extras/CUPTI/lib64/libcupti.so* 2>/dev/null | sort -u | paste -sd: || true)"
      CUPTI_DEFS=(-idirafter"$d" -DFINEGEMM_HAVE_CUPTI=1 "-DFINEGEMM_CUPTI_LIB_HINTS=\"$hints\"")
      break
    fi
  done
  [[ ${#CUPTI_DEFS[@]} -gt 0 ]] || echo "build.sh: no CUPTI headers: the timer will use CUDA events" >&2
  pids=()
  for src in tools/lib/*.cpp src/reference/*.cpp; do
    case "$src" in tools/lib/cublaslt_baseline.cpp) continue ;; esac
    obj="$OUT/obj/$(echo "$src" | tr '/' '_').o"
    extra=()
    [[ "$src" == tools/lib/kernel_timer.cpp ]] && extra=("${CUPTI_DEFS[@]}")
    g++ -std=c++20 -O2 -fPIC "${HOST_INC[@]}" -DFINEGEMM_SOURCE_DIR="\"$ROOT\"" "${extra[@]}" -c "$src" -o "$obj" &
    pids+=($!)
    LIBS+=("$obj")
    if (( ${#pids[@]} >= JOBS )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
fi

# The DeepGEMM kernels: DeepGEMM's own JIT flags (csrc/jit/compiler.hpp: C++20, -O3, relaxed constexpr, extended
# lambdas, ptxas register-usage-level 10, sm_90a), plus the harness's host code in the same translation unit.
REL_RPATH="$(python3 -c "import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))" "$BUILD_ABS" "$OUT_ABS" \
             2>/dev/null || echo ../build)"
set -x
"$NVCC" -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a \
  --expt-relaxed-constexpr --expt-extended-lambda --diag-suppress=39,161,174,177,186,940 \
  --ptxas-options=--register-usage-level=10 --resource-usage \
  -I"$DG_INC" -I"$CUTLASS_INC" "${HOST_INC[@]}" \
  tools/compare/deepgemm_sm90.cu "${LIBS[@]}" "$BUILD_ABS/libfinegemm.so" \
  -cudart shared -ldl -lpthread \
  -Xlinker -rpath -Xlinker "\$ORIGIN/$REL_RPATH" -Xlinker -rpath -Xlinker "$BUILD_ABS" \
  -o "$OUT/deepgemm_sm90" 2> "$OUT/ptxas.log" || { cat "$OUT/ptxas.log" >&2; exit 1; }
set +x
# NOTE: a spill in DeepGEMM's kernels would make the comparison unfair; ptxas reports them per kernel.
if grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$OUT/ptxas.log" >/dev/null; then
  echo "build.sh: WARNING: spills in the DeepGEMM kernels (see $OUT/ptxas.log)" >&2
fi
grep -E "Function properties|spill|registers" "$OUT/ptxas.log" | sed 's/^/  /' | head -60 || true
echo "built $OUT/deepgemm_sm90"
