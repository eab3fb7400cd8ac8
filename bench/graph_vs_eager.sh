#!/usr/bin/env bash
# Graph mode against eager on every reference model (tests/models), on the
# inputs saved with each model, side by side in one process per model:
#
#   bash bench/graph_vs_eager.sh [KILN_BINARY] [ITERS]
#
# Prints one line per model (medians, the ratio, replay heap allocations and
# the arena figures) and keeps each model's full JSON in bench/out/.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kiln=${1:-$root/build/kiln}
iters=${2:-30}
mkdir -p "$root/bench/out"
printf '%-14s %10s %10s %8s %10s %12s %12s\n' model eager_ms graph_ms speedup allocs arena/lower arena/naive
for dir in "$root"/tests/models/*/; do
  [[ -f "$dir/model.onnx" ]] || continue  # a pipeline folder (tiny-sd): bench/pipeline_bench.cc
  name=$(basename "$dir")
  inputs=()
  for f in "$dir"inputs/*.npy; do
    n=$(basename "$f" .npy)
    inputs+=(--input "$n=$f")
  done
  out="$root/bench/out/$name.json"
  "$kiln" bench "$dir/model.onnx" "${inputs[@]}" --iters "$iters" --json >"$out"
  python3 - "$name" "$out" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
j = json.load(open(path))
m = j["modes"]
print(f'{name:<14} {m["eager"]["ms_median"]:10.3f} {m["graph"]["ms_median"]:10.3f} '
      f'{j["speedup_graph_vs_eager"]:8.2f} {str(j["replay_heap_allocations"]):>10} '
      f'{j["arena_bytes"] / j["lower_bound_bytes"]:12.3f} {j["arena_bytes"] / j["naive_bytes"]:12.3f}')
PY
done
