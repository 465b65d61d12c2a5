#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds lazyrt and runs the whole test suite.
#   tools/run_tests.sh                 Release build in build/
#   LAZYRT_SANITIZE=1 tools/run_tests.sh   AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh

build_dir=build
cmake_args=()
if [ "${LAZYRT_SANITIZE:-0}" = 1 ]; then
  build_dir=build-asan
  cmake_args+=(-DLAZYRT_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
fi
unset LAZYRT_SANITIZE  # a build switch, not a runtime setting: the runtime refuses unknown LAZYRT_*

cmake -S . -B "$build_dir" -G Ninja "${cmake_args[@]}"
cmake --build "$build_dir"
ctest --test-dir "$build_dir" --output-on-failure --timeout 1200 -j2
