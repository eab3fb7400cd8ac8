#!/usr/bin/env bash
# Runs every case in cases.txt (written by tools/make_bad_inputs.py) against
# KILN_BINARY. Each must fail cleanly: exit code exactly 2, and stderr exactly
# one line, starting "kiln: error: " and containing the expected substring.
#
#   bash tests/bad_inputs/check.sh build/kiln
#
# A case runs under `timeout 20` (a hang fails it) and a 4 GB address-space cap
# (a runaway allocation fails instead of eating the machine).
#
# KILN_SANITIZED=1 (an ASan/UBSan build): ASan reserves terabytes of virtual
# memory up front, so the cap is ASan's own instead: allocations over 4 GB
# return null, as they would under ulimit. Sanitizer reports go to a log file,
# not stderr (ASan warns on every refused allocation), and are shown when a
# case fails; a sanitizer error also changes the exit code, failing the case.
set -uo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 KILN_BINARY" >&2
  exit 2
fi
kiln=$(realpath "$1")
if [[ ! -x "$kiln" ]]; then
  echo "$0: $1 is not an executable" >&2
  exit 2
fi
cd "$(dirname "${BASH_SOURCE[0]}")" || exit 2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stderr_file="$tmp/stderr"
if [[ "${KILN_SANITIZED:-0}" == 1 ]]; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1:max_allocation_size_mb=4096:log_path=$tmp/sanitizer"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1:log_path=$tmp/sanitizer"
  limit_memory=""
else
  limit_memory="ulimit -v 4194304;"  # KiB
fi

passed=0
failed=0

while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] && continue
  args=${line%% | *}
  expect=${line#* | }
  # $args is split on purpose (file names have no spaces). stdin is not the
  # manifest; the outer braces take bash's own "Segmentation fault" notice,
  # as the exit code already tells.
  # shellcheck disable=SC2086
  { bash -c "$limit_memory"' exec timeout 20 "$@"' kiln "$kiln" $args </dev/null >/dev/null 2>"$stderr_file"; } 2>/dev/null
  rc=$?
  mapfile -t err <"$stderr_file"

  problem=""
  if [[ $rc -eq 124 ]]; then
    problem="timed out after 20 s"
  elif [[ $rc -gt 128 ]]; then
    problem="crashed: killed by signal $((rc - 128)) ($(kill -l $((rc - 128))))"
  elif [[ $rc -ne 2 ]]; then
    problem="exit code $rc, want 2"
  elif [[ ${#err[@]} -ne 1 ]]; then
    problem="${#err[@]} stderr lines, want 1"
  elif [[ "${err[0]}" != "kiln: error: "* ]]; then
    problem="error line does not start with 'kiln: error: '"
  elif [[ "${err[0]}" != *"$expect"* ]]; then
    problem="error line lacks '$expect'"
  fi

  if [[ -z "$problem" ]]; then
    passed=$((passed + 1))
    echo "PASS  kiln $args"
  else
    failed=$((failed + 1))
    echo "FAIL  kiln $args: $problem"
    # At most a few lines: a crash's stack trace would drown the summary.
    head -n 5 "$stderr_file" | sed 's/^/      | /'
    cat "$tmp"/sanitizer.* 2>/dev/null | grep -E "ERROR|SUMMARY|runtime error|^ +#[0-9] " |
      head -n 8 | sed 's/^/      | /'
  fi
  rm -f "$tmp"/sanitizer.*
done <cases.txt

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
