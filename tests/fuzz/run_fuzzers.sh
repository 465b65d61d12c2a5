#!/usr/bin/env bash
# Builds the fuzz targets with clang 14 (libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer, the
# whole project instrumented) in build-fuzz/, makes the seed corpora, replays every saved regression
# input and fuzzes each target for FUZZ_SECONDS (default 60). Exits non-zero on any crash; the
# crashing inputs are copied to tests/fuzz/regressions/<target>/ to be committed with the fix.
#   FUZZ_SECONDS=600 tests/fuzz/run_fuzzers.sh
#   FUZZ_BUILD_DIR=/tmp/build-fuzz FUZZ_JOBS=2 tests/fuzz/run_fuzzers.sh
# Needs clang-14 and libclang-rt-14-dev besides what tools/setup.sh installs.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${FUZZ_SECONDS:-60}
build=${FUZZ_BUILD_DIR:-build-fuzz}
targets=(cache_entry_fuzzer executable_loader_fuzzer module_verifier_fuzzer)

cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLAZYRT_SANITIZE=ON -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
  -DLAZYRT_BUILD_BENCHMARKS=OFF -DLAZYRT_FUZZ_SECONDS="$seconds"
if ! ninja -C "$build" -t targets all | grep -q '^cache_entry_fuzzer:'; then
  echo "run_fuzzers: no fuzz targets in $build: tests/CMakeLists.txt must add_subdirectory(fuzz)" >&2
  exit 1
fi
ninja -C "$build" -j"${FUZZ_JOBS:-1}" train_mlp seed_corpus_tool "${targets[@]}"

status=0
ctest --test-dir "$build" -L fuzz --output-on-failure || status=$?
for target in "${targets[@]}"; do
  for input in "$build/tests/fuzz/artifacts/$target"/*; do
    [ -f "$input" ] || continue
    mkdir -p "tests/fuzz/regressions/$target"
    cp "$input" "tests/fuzz/regressions/$target/"
    echo "run_fuzzers: $target: new failing input tests/fuzz/regressions/$target/$(basename "$input")"
  done
done
exit "$status"
