#!/usr/bin/env bash
# Prints the path of the nvdisasm binary the SASS tests use, or exits 1 with an install hint.
# Search order (the same as tests/unit/test_sass.cpp): $FINEGEMM_NVDISASM, PATH, $CUDA_HOME/bin, $CUDA_PATH/bin,
# /usr/local/cuda/bin, then the PyPI wheel nvidia-cuda-nvdisasm (<site-packages>/nvidia/*/bin/nvdisasm).
set -euo pipefail

found() {
  if [[ -n "$1" && -f "$1" && -x "$1" ]]; then
    echo "$1"
    exit 0
  fi
}

if [[ -n "${FINEGEMM_NVDISASM:-}" ]]; then
  found "$FINEGEMM_NVDISASM"
  echo "FINEGEMM_NVDISASM=$FINEGEMM_NVDISASM is not an executable file" >&2
  exit 1
fi
found "$(command -v nvdisasm || true)"
for home in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  [[ -n "$home" ]] && found "$home/bin/nvdisasm"
done
for python in python3 python; do
  command -v "$python" >/dev/null || continue
  found "$("$python" -c "
import importlib.util, pathlib
spec = importlib.util.find_spec('nvidia')
dirs = spec.submodule_search_locations if spec else []
print(next((str(p) for d in dirs for p in sorted(pathlib.Path(d).glob('*/bin/nvdisasm'))), ''))
" 2>/dev/null || true)"
done
echo "nvdisasm not found: pip install nvidia-cuda-nvdisasm==13.2.51 (or set FINEGEMM_NVDISASM)" >&2
exit 1
