#!/usr/bin/env bash
# Runs each libFuzzer target for a bounded time on a copy of its seed corpus.
#
#   fuzz/run.sh BUILD_DIR SECONDS [TARGET...]   (BUILD_DIR from -DKILN_BUILD_FUZZERS=ON)
#
# TARGETs: onnx_import onnx_tensor npy safetensors serve_request serve_http (default: all), each for
# SECONDS.
# The committed corpus (fuzz/corpus/<name>/) is never grown: each run works on
# a temporary copy. A crash, ASan/UBSan report, timeout (-timeout=10 s per
# input) or an allocation past 2 GB (-rss_limit_mb, which also caps a single
# malloc) fails the target; the input is saved as fuzz/crashes/<name>/<kind>-<sha1>
# (not committed). Reproduce one with: BUILD_DIR/<name>_fuzzer fuzz/crashes/<name>/<file>
set -uo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR SECONDS [TARGET...]" >&2
  exit 2
fi
build=$(realpath "$1")
seconds=$2
shift 2
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(onnx_import onnx_tensor npy safetensors serve_request serve_http)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# UBSan reports abort (the build also sets -fno-sanitize-recover) so they
# count as crashes; stack traces help diagnose what CI found.
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:halt_on_error=1"

failed=0
for name in "${targets[@]}"; do
  fuzzer="$build/fuzz/${name}_fuzzer"
  if [[ ! -x "$fuzzer" ]]; then
    echo "FAIL  $name: $fuzzer not built"
    failed=$((failed + 1))
    continue
  fi
  mkdir -p "$work/$name" "$here/crashes/$name"
  cp "$here/corpus/$name/"* "$work/$name/"
  log="$work/$name.log"
  dict=()
  [[ -f "$here/$name.dict" ]] && dict=(-dict="$here/$name.dict")
  "$fuzzer" "$work/$name" "${dict[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$here/crashes/$name/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  corpus=$(ls "$work/$name" | wc -l)
  if [[ $rc -eq 0 ]]; then
    echo "PASS  $name: ${runs:-?} runs in ${seconds} s, corpus $corpus files"
  else
    failed=$((failed + 1))
    artifact=$(grep -o "Test unit written to .*" "$log" | tail -1 | sed 's/Test unit written to //')
    echo "FAIL  $name: exit code $rc; input saved as ${artifact:-?}"
    # What went wrong, and where in kiln: the report line, the summary and
    # the first stack frames in kiln's own sources (not the sanitizer's).
    grep -E "^==[0-9]+== ?ERROR|runtime error|^SUMMARY|^internal error" "$log" | head -n 3 | sed 's/^/      | /'
    grep -E "^ +#[0-9]+ .* /[^ ]*/(src|fuzz)/[^ ]+\.(cc|h):[0-9]+" "$log" | head -n 4 |
      sed -E 's/^ +#[0-9]+ 0x[0-9a-f]+ in /      |   /; s/\(anonymous namespace\):://g'
  fi
done

echo "$(( ${#targets[@]} - failed )) passed, $failed failed"
[[ $failed -eq 0 ]]
