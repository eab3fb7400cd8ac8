#!/usr/bin/env bash
# `kiln bench --json` prints one JSON object carrying every figure scripts
# read (their names are stable), and `kiln run` works in every mode.
#
#   bash tests/cli/bench_json.sh build/kiln
set -euo pipefail
kiln=$(realpath "$1")
model="$(dirname "${BASH_SOURCE[0]}")/../models/dit_tiny/model.onnx"

json=$("$kiln" bench "$model" --dim batch=2 --modes eager,graph,auto --iters 3 --warmup 1 --json)
missing=0
for key in model signature modes eager graph auto ms_median ms_min speedup_graph_vs_eager \
  replay_heap_allocations input_copy_bytes output_clone_bytes arena_bytes naive_bytes \
  eager_peak_bytes lower_bound_bytes fusions fuse_layer_norm auto_decision flops_per_forward gflops_per_s; do
  if ! grep -q "\"$key\":" <<<"$json"; then
    echo "FAIL: no \"$key\" in kiln bench --json output" >&2
    missing=1
  fi
done
if [[ $missing -ne 0 ]]; then
  echo "$json" >&2
  exit 1
fi
grep -q '"flops_per_forward": [1-9]' <<<"$json" || { echo "FAIL: flops_per_forward is not positive" >&2; exit 1; }
grep -q '"input_copy_bytes": 0,' <<<"$json" || { echo "FAIL: input_copy_bytes is not 0" >&2; exit 1; }
grep -q '"output_clone_bytes": 0,' <<<"$json" || { echo "FAIL: output_clone_bytes is not 0" >&2; exit 1; }
clone=$("$kiln" bench "$model" --dim batch=2 --iters 2 --warmup 0 --json --safe-output)
# --safe-output copies the [2,4,8,8] f32 output after every run.
grep -q '"output_clone_bytes": 2048,' <<<"$clone" || { echo "FAIL: --safe-output clone bytes" >&2; echo "$clone" >&2; exit 1; }

for mode in eager graph auto; do
  "$kiln" run "$model" --dim batch=2 --mode "$mode" >/dev/null 2>&1 || { echo "FAIL: kiln run --mode $mode" >&2; exit 1; }
done
echo "PASS: bench JSON figures and run modes"
