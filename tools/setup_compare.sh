#!/usr/bin/env bash
# Installs what bench/compare needs beyond kiln's own set-up (not part of
# the test command): through tools/setup.sh, Debian's PyTorch on OpenBLAS
# (without libopenblas0-openmp Debian's torch runs on the reference BLAS,
# ~38x slower), ONNX for the exports, matplotlib for the chart and GNU time
# for peak RSS; then ONNX Runtime's CPU build from the npm package
# onnxruntime-node, installed with --ignore-scripts (its install script
# downloads extra files; the CPU library ships inside the package) into
# bench/compare/node_modules.
#
#   bash tools/setup_compare.sh && python3 bench/compare/run.py
set -euo pipefail
cd "$(dirname "$0")/.."
KILN_SETUP_COMPARE=1 bash tools/setup.sh

ort_version=1.30.0
if [[ ! -f bench/compare/node_modules/onnxruntime-node/package.json ]] ||
  ! grep -q "\"version\": \"$ort_version\"" bench/compare/node_modules/onnxruntime-node/package.json; then
  (cd bench/compare && npm install --ignore-scripts --no-audit --no-fund --no-save "onnxruntime-node@$ort_version")
fi
node -e "require('$PWD/bench/compare/node_modules/onnxruntime-node')" ||
  { echo "setup_compare: onnxruntime-node does not load" >&2; exit 1; }
echo "setup_compare: ready (python3-torch, onnxruntime-node $ort_version)"
