#!/usr/bin/env bash
# Installs everything kiln needs to build and test, from Debian packages only.
# Idempotent: safe to run again; skips apt entirely when all packages are present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev opencl-headers ocl-icd-opencl-dev libhwy-dev
  libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
  nlohmann-json3-dev libcli11-dev libfmt-dev libicu-dev libpng-dev libxxhash-dev
  libxml2-dev  # HTML character references in Wan's prompt cleaning
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev  # MP4 video out, image scaling
  ffmpeg  # the tests decode kiln's MP4s with ffprobe and ffmpeg
  libcpp-httplib-dev  # kiln serve (with libssl-dev: base64)
  chromium  # the test of kiln serve's web page, in headless Chromium
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev libomp-14-dev  # the fuzzers: clang's OpenMP
)
# Only needed to regenerate the reference models and data (tools/*.py).
if [[ "${KILN_SETUP_PYTHON:-0}" == 1 ]]; then
  # OpenBLAS: without it Debian's torch runs on the reference BLAS, far too
  # slow to train tools/train_default_model.py.
  packages+=(python3-torch python3-onnx python3-numpy python3-regex libopenblas0-openmp)
  # tools/make_tiny_wan.py: spm_train for its tokenizer, the Python module to check it.
  packages+=(sentencepiece python3-sentencepiece)
fi
# Only for bench/compare (tools/setup_compare.sh): the Python set, matplotlib
# for its chart, GNU time for peak RSS, and node with npm unless some node
# (NodeSource's, say) is there already.
if [[ "${KILN_SETUP_COMPARE:-0}" == 1 ]]; then
  packages+=(python3-torch python3-onnx python3-numpy python3-regex libopenblas0-openmp python3-matplotlib time)
  command -v npm >/dev/null || packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
