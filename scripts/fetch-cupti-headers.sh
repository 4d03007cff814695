#!/usr/bin/env bash
# Fetches the CUPTI headers (compile time only: the bench loads libcupti with dlopen at run time) into
# third_party/cupti/include (git-ignored), from the nvidia-cuda-cupti wheel on PyPI. For machines whose CUDA toolkit
# ships without them (CI); CMake looks there after FINEGEMM_CUPTI_INCLUDE_DIR and the toolkit.
#   scripts/fetch-cupti-headers.sh [VERSION]     (default 13.0.85; FINEGEMM_CUPTI_WHEEL_VERSION also sets it)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-${FINEGEMM_CUPTI_WHEEL_VERSION:-13.0.85}}
DEST=third_party/cupti
if [ -f "$DEST/include/cupti_activity.h" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  echo "CUPTI $VERSION headers already in $DEST/include"
  exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# The wheel holds the library too (~10 MB); only its include/ is kept. The platform is pinned so the same wheel is
# chosen on any host (headers are the same for every platform).
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --platform manylinux_2_25_x86_64 --python-version 3 --implementation py \
  -d "$TMP" "nvidia-cuda-cupti==$VERSION"
WHEEL=$(ls "$TMP"/nvidia_cuda_cupti-*.whl)
python3 - "$WHEEL" "$TMP/include" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
n = 0
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        parts = name.split("/")
        if "include" not in parts[:-1] or name.endswith("/"):
            continue
        rel = "/".join(parts[parts.index("include") + 1:])
        os.makedirs(os.path.join(out, os.path.dirname(rel)), exist_ok=True)
        with z.open(name) as src, open(os.path.join(out, rel), "wb") as dst:
            dst.write(src.read())
        n += 1
if n == 0:
    sys.exit(f"{wheel}: no include/ directory in the wheel")
PY
[ -f "$TMP/include/cupti_activity.h" ] || { echo "fetch-cupti-headers: cupti_activity.h missing from $WHEEL" >&2; exit 1; }
rm -rf "$DEST"
mkdir -p "$DEST"
mv "$TMP/include" "$DEST/include"
echo "$VERSION" > "$DEST/VERSION"
echo "CUPTI $VERSION headers in $DEST/include"
