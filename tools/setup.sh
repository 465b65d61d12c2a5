#!/usr/bin/env bash
# Installs what lazyrt needs on a fresh Debian machine (bookworm). Idempotent: packages already
# present are skipped, so a warm machine pays only for the dpkg query.
#   tools/setup.sh           build, tests and examples (and clang 16 with libFuzzer for the fuzzers, and
#                            clang-format/clang-tidy 16 for tools/lint.sh)
#   tools/setup.sh --bench   also the peers of the comparison benchmarks (PyTorch, libtorch)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libabsl-dev libprotobuf-dev protobuf-compiler
  libxxhash-dev libzstd-dev libdw-dev nlohmann-json3-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libblis-serial-dev libopenblas-dev libdnnl-dev libxsmm-dev libgloo-dev
  clang-16 libclang-rt-16-dev clang-format-16 clang-tidy-16 python3
  dataset-fashion-mnist fortunes
)
if [ "${1:-}" = "--bench" ]; then
  packages+=(python3-torch python3-numpy libtorch-dev libopenblas0-pthread libeigen3-dev)
elif [ -n "${1:-}" ]; then
  echo "usage: tools/setup.sh [--bench]" >&2
  exit 2
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) || true
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
