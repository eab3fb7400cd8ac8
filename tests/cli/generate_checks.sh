# Sourced by the kiln generate scripts (needs $kiln): fail with a message,
# and expect one error line and exit code 2 from `kiln generate ARGS...`.
fail() { echo "FAIL: $*" >&2; exit 1; }

expect_error() {  # EXPECTED-SUBSTRING KILN-GENERATE-ARGS...
  local want=$1
  shift
  set +e
  "$kiln" generate "$@" >/dev/null 2>err.txt
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "kiln generate $*: exit code $rc, want 2 ($(cat err.txt))"
  [[ $(wc -l <err.txt) -eq 1 ]] || fail "kiln generate $*: want one error line, got: $(cat err.txt)"
  grep -qF -- "$want" err.txt || fail "kiln generate $*: want '$want' in: $(cat err.txt)"
}
