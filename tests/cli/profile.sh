#!/usr/bin/env bash
# `kiln profile` prints where a compiled model's time goes: the run's median,
# each op kind's steps, time and share (the shares of every kind sum to 100),
# the products' GFLOP/s, and the slowest steps by node; --json the same.
#
#   bash tests/cli/profile.sh build/kiln
set -euo pipefail
kiln=$(realpath "$1")
model="$(dirname "${BASH_SOURCE[0]}")/../models/dit_tiny/model.onnx"
export KILN_CACHE_DIR=$(mktemp -d)  # the matmul peak is measured into this cache, not the user's
trap 'rm -rf "$KILN_CACHE_DIR"' EXIT
fail() { echo "FAIL: $1" >&2; echo "$2" >&2; exit 1; }

text=$("$kiln" profile "$model" --dim batch=2 --iters 3 --top 4)
grep -q '^run: [0-9.]* ms (median of 3 replays), [0-9.]* GFLOP, [0-9.]* GFLOP/s, [0-9.]* % of the f32 matmul peak' \
  <<<"$text" || fail "no run line with its GFLOP/s and share of the peak" "$text"
grep -Eq '^kiln\.Linear +[1-9][0-9]* +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$' <<<"$text" \
  || fail "no kiln.Linear row with steps, ms, %, GFLOP/s and % of peak" "$text"
grep -Eq '^kiln\.ModulatedLayerNorm +[1-9][0-9]* +[0-9.]+ +[0-9.]+$' <<<"$text" \
  || fail "a memory-bound op's row has a GFLOP/s or lacks its share" "$text"
# The op kinds' shares sum to 100 (the rows between the header and the blank line).
sum=$(awk '/^op  +steps/{on=1; next} on && NF==0{exit} on{s+=$4} END{printf "%.0f", s}' <<<"$text")
[[ $sum -ge 99 && $sum -le 101 ]] || fail "the op kinds' shares sum to $sum %, not 100" "$text"
slowest=$(sed -n '/^slowest steps/,$p' <<<"$text" | tail -n +3)
[[ $(wc -l <<<"$slowest") -eq 4 ]] || fail "--top 4 did not list 4 steps" "$text"
grep -q '/blocks' <<<"$slowest" || fail "the slowest steps do not name their nodes" "$text"

json=$("$kiln" profile "$model" --dim batch=2 --iters 2 --top 3 --no-peak --json)
for key in model signature replays run_ms_median flops_per_forward gflops_per_s steps ops slowest_steps node percent; do
  grep -q "\"$key\":" <<<"$json" || fail "no \"$key\" in kiln profile --json" "$json"
done
! grep -q '"peak"\|percent_of_peak' <<<"$json" || fail "--no-peak still reported a peak" "$json"
[[ $(grep -c '"node":' <<<"$json") -eq 3 ]] || fail "--top 3 did not list 3 steps" "$json"
# bf16: the products are measured against the bf16 peak, where there is one.
"$kiln" profile "$model" --dim batch=2 --iters 1 --precision bf16 --top 0 >/dev/null
echo "kiln profile: ok"
