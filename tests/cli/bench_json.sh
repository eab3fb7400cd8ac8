#!/usr/bin/env bash
# `kiln bench --json` prints one JSON object carrying every figure scripts
# read (their names are stable), and `kiln run` works in every mode.
#
#   bash tests/cli/bench_json.sh build/kiln
set -euo pipefail
kiln=$(realpath "$1")
model="$(dirname "${BASH_SOURCE[0]}")/../models/dit_tiny/model.onnx"
# The matmul peak is measured into this cache, not the user's.
export KILN_CACHE_DIR=$(mktemp -d)
trap 'rm -rf "$KILN_CACHE_DIR"' EXIT

json=$("$kiln" bench "$model" --dim batch=2 --modes eager,graph,auto --iters 3 --warmup 1 --json)
missing=0
for key in model signature modes eager graph auto ms_median ms_min ms speedup_graph_vs_eager \
  replay_heap_allocations input_copy_bytes output_clone_bytes arena_bytes naive_bytes \
  eager_peak_bytes lower_bound_bytes fusions fuse_layer_norm auto_decision flops_per_forward gflops_per_s peak percent_of_peak profiled_replay_ms_by_op \
  profiled_replay_slowest_steps; do
  if ! grep -q "\"$key\":" <<<"$json"; then
    echo "FAIL: no \"$key\" in kiln bench --json output" >&2
    missing=1
  fi
done
if [[ $missing -ne 0 ]]; then
  echo "$json" >&2
  exit 1
fi
# Each mode lists its 3 timed runs.
grep -Pzq '"ms": \[\s*[0-9.e-]+,\s*[0-9.e-]+,\s*[0-9.e-]+\s*\]' <<<"$json" || { echo "FAIL: no list of the 3 runs" >&2; exit 1; }
# Each slowest step names its node and op and has its time and GFLOP/s (null
# for a step with no products, which under a sanitizer can be the slowest);
# the products among them (dit_tiny's Linears) have a positive rate.
slowest=$(grep -Pzo '"profiled_replay_slowest_steps": \[[^\]]*\]' <<<"$json" | tr -d '\0')
grep -Pzq '^"profiled_replay_slowest_steps": \[\s*\{\s*"node": "[^"]+",\s*"op": "[^"]+",\s*"ms": [0-9.e-]+,\s*"gflops_per_s": ([0-9.e+-]+|null)\s*\}' \
  <<<"$slowest" || { echo "FAIL: the slowest steps lack a node, its op, its time or its GFLOP/s" >&2; echo "$slowest" >&2; exit 1; }
grep -Pzq '"op": "kiln\.Linear",\s*"ms": [0-9.e-]+,\s*"gflops_per_s": ([1-9]|0\.0*[1-9])' \
  <<<"$slowest" || { echo "FAIL: no product among the slowest steps has a positive GFLOP/s" >&2; echo "$slowest" >&2; exit 1; }
grep -q '"flops_per_forward": [1-9]' <<<"$json" || { echo "FAIL: flops_per_forward is not positive" >&2; exit 1; }
grep -q '"input_copy_bytes": 0,' <<<"$json" || { echo "FAIL: input_copy_bytes is not 0" >&2; exit 1; }
grep -q '"output_clone_bytes": 0,' <<<"$json" || { echo "FAIL: output_clone_bytes is not 0" >&2; exit 1; }
# The peak was measured by the first bench and cached; a second one reads it,
# a malformed cache is measured over, and --no-peak leaves it out.
grep -q '"cached": false' <<<"$json" || { echo "FAIL: the first bench did not measure the peak" >&2; exit 1; }
grep -q '"gflops_per_s": [1-9]' <<<"$json" || { echo "FAIL: the peak is not positive" >&2; exit 1; }
cached=$("$kiln" bench "$model" --dim batch=2 --iters 1 --warmup 0 --json)
grep -q '"cached": true' <<<"$cached" || { echo "FAIL: the second bench did not read the cached peak" >&2; exit 1; }
echo 'not json' >"$KILN_CACHE_DIR/matmul-peak.json"
remeasured=$("$kiln" bench "$model" --dim batch=2 --iters 1 --warmup 0 --json)
grep -q '"cached": false' <<<"$remeasured" || { echo "FAIL: a malformed peak cache was not measured over" >&2; exit 1; }
grep -q '"f32": [1-9]' "$KILN_CACHE_DIR/matmul-peak.json" || { echo "FAIL: the peak cache was not rewritten" >&2; exit 1; }
no_peak=$("$kiln" bench "$model" --dim batch=2 --iters 1 --warmup 0 --json --no-peak)
grep -q '"peak"' <<<"$no_peak" && { echo "FAIL: --no-peak still reports a peak" >&2; exit 1; }
clone=$("$kiln" bench "$model" --dim batch=2 --iters 2 --warmup 0 --json --safe-output)
# --safe-output copies the [2,4,8,8] f32 output after every run.
grep -q '"output_clone_bytes": 2048,' <<<"$clone" || { echo "FAIL: --safe-output clone bytes" >&2; echo "$clone" >&2; exit 1; }
# A bf16 bench names the GEMM its products ran on, as KILN_BF16_GEMM asks;
# a value it does not know is one error line and exit code 2.
bf16=$(KILN_BF16_GEMM=onednn "$kiln" bench "$model" --dim batch=2 --iters 1 --warmup 0 --json --no-peak --precision bf16)
grep -q '"bf16_gemm": "onednn"' <<<"$bf16" || { echo "FAIL: no bf16_gemm onednn in a bf16 bench" >&2; exit 1; }
grep -q '"bf16_gemm"' <<<"$no_peak" && { echo "FAIL: an f32 bench reports bf16_gemm" >&2; exit 1; }
# Without bf16 products (as oneDNN capped below AVX512-BF16 has it, whatever
# this CPU has): kiln's f32 GEMM on operands rounded through bf16, measured
# against the f32 peak.
capped=$(ONEDNN_MAX_CPU_ISA=AVX512_CORE "$kiln" bench "$model" --dim batch=2 --iters 1 --warmup 0 --json --precision bf16)
grep -q '"bf16_gemm": "kiln_f32"' <<<"$capped" || { echo "FAIL: no bf16_gemm kiln_f32 without bf16 products" >&2; exit 1; }
grep -A1 '"peak"' <<<"$capped" | grep -q '"dtype": "f32"' ||
  { echo "FAIL: bf16 as f32 products not measured against the f32 peak" >&2; echo "$capped" | head -30 >&2; exit 1; }
# ONEDNN_MAX_CPU_ISA caps kiln's own SIMD kernels too, and bench says so
# (on a CPU without AVX2 there is nothing to cap: both report less).
grep -Pzq '"isa": \{\s*"kiln": "[A-Z0-9_]+",\s*"onednn": "[a-z0-9_]+"' <<<"$no_peak" ||
  { echo "FAIL: no isa.kiln and isa.onednn in kiln bench --json" >&2; exit 1; }
avx2=$(ONEDNN_MAX_CPU_ISA=AVX2 "$kiln" bench "$model" --dim batch=2 --iters 1 --warmup 0 --no-peak)
grep -Eq '^kernels: kiln (AVX2|SSE4|SSSE3|EMU128|SCALAR), oneDNN (avx2|avx|sse41)$' <<<"$avx2" ||
  { echo "FAIL: ONEDNN_MAX_CPU_ISA=AVX2 did not cap kiln's kernels:" >&2; grep kernels <<<"$avx2" >&2; exit 1; }
set +e
err=$(KILN_BF16_GEMM=amx "$kiln" bench "$model" --dim batch=2 --iters 1 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc -eq 2 && $(wc -l <<<"$err") -eq 1 && $err == *"KILN_BF16_GEMM=amx"* ]] ||
  { echo "FAIL: KILN_BF16_GEMM=amx gave exit $rc: $err" >&2; exit 1; }

for mode in eager graph auto; do
  "$kiln" run "$model" --dim batch=2 --mode "$mode" >/dev/null 2>&1 || { echo "FAIL: kiln run --mode $mode" >&2; exit 1; }
done
echo "PASS: bench JSON figures and run modes"
