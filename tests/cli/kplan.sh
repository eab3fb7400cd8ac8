#!/usr/bin/env bash
# kiln compile -> kiln run FILE.kplan gives the model's outputs; a corrupt or
# truncated .kplan is one error line and exit code 2.
#
#   bash tests/cli/kplan.sh build/kiln
set -euo pipefail
kiln=$(realpath "$1")
models="$(cd "$(dirname "${BASH_SOURCE[0]}")/../models" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

inputs=(--input "x=$models/dit_tiny/inputs/x.npy" --input "t=$models/dit_tiny/inputs/t.npy")
"$kiln" compile "$models/dit_tiny/model.onnx" --dim batch=2 -o dit.kplan >compile.txt
grep -q "fuse_attention 6" compile.txt || fail "compile summary lacks the fusions: $(cat compile.txt)"
"$kiln" run dit.kplan "${inputs[@]}" -o from_plan >/dev/null
"$kiln" run "$models/dit_tiny/model.onnx" "${inputs[@]}" -o from_model >/dev/null
cmp -s from_plan/out.npy from_model/out.npy || fail "the .kplan's output differs from the model's"
# A bf16 plan keeps its precision in the file: the same outputs as running the
# model with --precision bf16, and not f32's.
"$kiln" compile "$models/dit_tiny/model.onnx" --dim batch=2 --precision bf16 -o bf16.kplan >compile.txt
grep -q "precision: bf16" compile.txt || fail "compile summary lacks the precision: $(cat compile.txt)"
"$kiln" run bf16.kplan "${inputs[@]}" -o bf16_plan >/dev/null
"$kiln" run "$models/dit_tiny/model.onnx" --precision bf16 "${inputs[@]}" -o bf16_model >/dev/null
cmp -s bf16_plan/out.npy bf16_model/out.npy || fail "the bf16 .kplan's output differs from the model's in bf16"
cmp -s bf16_plan/out.npy from_model/out.npy && fail "the bf16 .kplan computed f32's output"

expect_error() {  # FILE EXPECTED-SUBSTRING
  set +e
  "$kiln" run "$1" "${inputs[@]}" >/dev/null 2>err.txt
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "kiln run $1: exit code $rc, want 2"
  [[ $(wc -l <err.txt) -eq 1 ]] || fail "kiln run $1: want one error line, got: $(cat err.txt)"
  grep -q "kiln: error: $1: $2" err.txt || fail "kiln run $1: $(cat err.txt)"
}
size=$(stat -c %s dit.kplan)
head -c $((size / 2)) dit.kplan >truncated.kplan
expect_error truncated.kplan "corrupt or truncated plan file"
cp dit.kplan flipped.kplan
printf '\x42' | dd of=flipped.kplan bs=1 seek=$((size / 3)) conv=notrunc status=none
expect_error flipped.kplan "corrupt or truncated plan file"
head -c 12 dit.kplan >stub.kplan
expect_error stub.kplan "truncated plan file"
set +e
"$kiln" run dit.kplan --mode eager >/dev/null 2>err.txt
rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q "a .kplan runs as compiled" err.txt || fail "--mode eager on a .kplan: $(cat err.txt)"
# The commands that take an ONNX model say what a .kplan is, not that it
# fails to parse as ONNX.
for command in bench profile show compile; do
  set +e
  "$kiln" $command dit.kplan $([[ $command == compile ]] && echo "-o again.kplan") >/dev/null 2>err.txt
  rc=$?
  set -e
  [[ $rc -eq 2 && $(wc -l <err.txt) -eq 1 ]] && grep -q "dit.kplan: a compiled .kplan, which only kiln run loads" err.txt ||
    fail "kiln $command on a .kplan: exit code $rc: $(cat err.txt)"
done
echo "PASS: kiln compile / run .kplan, corrupt and truncated plans rejected"
