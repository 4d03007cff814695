#!/usr/bin/env bash
# A/B measurements in one run: `finegemm bench` on one shape list under several environments (e.g. forced kernel
# configurations or kernel experiment switches), each table kept, then one line per shape and variant.
#   scripts/perf-ab.sh BUILD_DIR OUT_DIR SHAPES_CSV "label|ENV=V ENV2=V" ...
# Example variant: "mc-b|FINEGEMM_FORCE_CONFIG=cluster=2,mc=b" or "exp|FINEGEMM_JIT_DEFINES=-DFG_EXPERIMENT=1"; a value
# with spaces is quoted inside the variant: "x|FINEGEMM_JIT_DEFINES='-DFG_EXPERIMENT=1 -DFG_RASTER_BAND=8'".
# AB_ITERS (default 30) and AB_FLAGS (extra bench arguments, e.g. "--flush read") apply to every variant.
set -uo pipefail
BUILD=$1 OUT_DIR=$2 SHAPES=$3
shift 3
mkdir -p "$OUT_DIR"
for variant in "$@"; do
  label=${variant%%|*}
  envs=${variant#*|}
  [ "$envs" = "$variant" ] && envs=""
  eval "env_args=($envs)"  # the variant's NAME=VALUE words, quotes honoured
  env "${env_args[@]}" timeout 300 "$BUILD/finegemm" bench --shapes "$SHAPES" --iters "${AB_ITERS:-30}" ${AB_FLAGS:-} \
    > "$OUT_DIR/ab-$label.log" 2>&1
  echo "== $label ($envs) rc=$?"
  # kind G M N K | config | us ev-us TFLOPS ... | x cuBLT x best | check  ->  compact columns
  awk -F'|' -v label="$label" '/^(normal|contiguous|masked) / {
      split($1, s, " "); split($3, t, " "); split($5, x, " ");
      printf "%-10s %-10s %3s %5s %6s %6s  %-46s %9s us (ev %7s) %6s TF  xcublt %5s  xbest %5s  %s\n",
             label, s[1], s[2], s[3], s[4], s[5], $2, t[1], t[2], t[3], x[1], x[2], $6 }' "$OUT_DIR/ab-$label.log"
  grep -E "^timer:" "$OUT_DIR/ab-$label.log"
  grep -E "^geomean" "$OUT_DIR/ab-$label.log"
done
