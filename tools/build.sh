#!/usr/bin/env bash
# Sets up (Debian packages) and builds kiln in build/ (Release). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_SANITIZE=OFF -DKILN_BUILD_TESTS=ON >/dev/null
cmake --build build -j"${KILN_JOBS:-2}"
