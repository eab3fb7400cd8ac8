#!/usr/bin/env bash
# Installs what bench/compare needs beyond tools/setup.sh (not part of the
# test command): Debian's PyTorch on OpenBLAS (without libopenblas0-openmp
# Debian's torch runs on the reference BLAS, ~38x slower), ONNX for the
# exports, matplotlib for the chart, GNU time for peak RSS, and ONNX Runtime's CPU build from the
# npm package onnxruntime-node, installed with --ignore-scripts (its install
# script downloads extra files; the CPU library ships inside the package)
# into bench/compare/node_modules.
#
#   bash tools/setup_compare.sh && python3 bench/compare/run.py
set -euo pipefail
cd "$(dirname "$0")/.."
KILN_SETUP_PYTHON=1 bash tools/setup.sh  # kiln's own, and python3-torch, python3-onnx, numpy, OpenBLAS

packages=(python3-matplotlib time nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nodejs from another source (NodeSource) brings its own npm.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs/}")
  missing=("${missing[@]/npm/}")
fi
read -r -a missing <<<"${missing[*]}"
if ((${#missing[@]})); then
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

ort_version=1.30.0
if [[ ! -f bench/compare/node_modules/onnxruntime-node/package.json ]] ||
  ! grep -q "\"version\": \"$ort_version\"" bench/compare/node_modules/onnxruntime-node/package.json; then
  (cd bench/compare && npm install --ignore-scripts --no-audit --no-fund --no-save "onnxruntime-node@$ort_version")
fi
node -e "require('$PWD/bench/compare/node_modules/onnxruntime-node')" ||
  { echo "setup_compare: onnxruntime-node does not load" >&2; exit 1; }
echo "setup_compare: ready (python3-torch, onnxruntime-node $ort_version)"
