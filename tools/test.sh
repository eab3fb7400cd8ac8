#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. set up and build (Release), run every CTest test
#   2. the same suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   3. the libFuzzer targets, each for a bounded time on its seed corpus
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${KILN_JOBS:-2}"
fuzz_seconds="${KILN_FUZZ_SECONDS:-30}"

echo "== release build and tests"
bash tools/build.sh
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== ASan + UBSan build and tests"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON -DKILN_BUILD_TESTS=ON \
  -DKILN_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$jobs"
KILN_SANITIZED=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

if [[ -f fuzz/run.sh ]]; then
  echo "== fuzzers (${fuzz_seconds} s each)"
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKILN_BUILD_FUZZERS=ON -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" --target kiln_fuzzers
  bash fuzz/run.sh build-fuzz "$fuzz_seconds"
fi
echo "== all tests passed"
