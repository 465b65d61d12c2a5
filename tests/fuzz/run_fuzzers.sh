#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer, AddressSanitizer, UndefinedBehaviorSanitizer, the
# whole project instrumented) in build-fuzz/, makes the seed corpora, replays every saved regression
# input and fuzzes each target for FUZZ_SECONDS (default 60). Exits non-zero on any crash; the
# crashing inputs are copied to tests/fuzz/regressions/<target>/ to be committed with the fix.
#   FUZZ_SECONDS=600 tests/fuzz/run_fuzzers.sh
#   FUZZ_BUILD_DIR=/tmp/build-fuzz FUZZ_JOBS=1 FUZZ_CXX=clang++-17 tests/fuzz/run_fuzzers.sh
# FUZZ_JOBS (default: the machine's cores) bounds the build's parallel compiles.
# Configures with the fuzz preset of CMakePresets.json: clang-16 and libclang-rt-16-dev (Debian 12, installed
# by tools/setup.sh). Clang 14
# cannot compile lazyrt: libstdc++ 12's <source_location> needs __builtin_source_location and x86
# _Float16 needs clang 15; Debian 12 ships libFuzzer for clang 16 but not for 15.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${FUZZ_SECONDS:-60}
build=${FUZZ_BUILD_DIR:-build-fuzz}
targets=(cache_entry_fuzzer executable_loader_fuzzer module_verifier_fuzzer entry_signature_fuzzer run_report_fuzzer
         idx_fuzzer)
unset LAZYRT_SANITIZE  # a build switch of tools/run_tests.sh; the runtime refuses unknown LAZYRT_*

# The fuzz preset of CMakePresets.json (clang 16); FUZZ_CXX picks another clang, FUZZ_BUILD_DIR another tree.
overrides=(-DLAZYRT_FUZZ_SECONDS="$seconds")
if [ -n "${FUZZ_CXX:-}" ]; then
  overrides+=(-DCMAKE_CXX_COMPILER="$FUZZ_CXX" -DCMAKE_C_COMPILER="${FUZZ_CXX/clang++/clang}")
fi
cxx=${FUZZ_CXX:-clang++-16}
command -v "$cxx" > /dev/null || { echo "run_fuzzers: $cxx not found; tools/setup.sh installs clang-16" >&2; exit 1; }
if [ -f "$build/CMakeCache.txt" ] && ! grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=.*$cxx\$" "$build/CMakeCache.txt"; then
  echo "run_fuzzers: $build was configured with another compiler; starting it afresh"
  rm -rf "$build"
fi
cmake --preset fuzz -B "$build" "${overrides[@]}"
# Read the whole list before grepping: grep -q stops at the first match, and under pipefail the
# SIGPIPE that ninja then gets would fail the check on a tree that has the targets.
build_targets=$(ninja -C "$build" -t targets all)
if ! grep -q '^cache_entry_fuzzer:' <<< "$build_targets"; then
  echo "run_fuzzers: no fuzz targets in $build: tests/CMakeLists.txt must add_subdirectory(fuzz)" >&2
  exit 1
fi
# One compile per core, as the other stages build: one at a time left a core idle through this build.
ninja -C "$build" -j"${FUZZ_JOBS:-$(nproc)}" train_mlp seed_corpus_tool "${targets[@]}"

status=0
rm -rf "$build/tests/fuzz/artifacts"  # only this run's failing inputs are news
# One fuzzer per core: each is a single process, and its per-input timeout (25 s) is far above a slice.
ctest --test-dir "$build" -L fuzz -j"$(nproc)" --output-on-failure || status=$?
grep -h "regression input\|executions\|reached:" "$build/Testing/Temporary/LastTest.log" | sed 's/^-- /run_fuzzers: /' || true
for target in "${targets[@]}"; do
  for input in "$build/tests/fuzz/artifacts/$target"/*; do
    [ -f "$input" ] || continue
    mkdir -p "tests/fuzz/regressions/$target"
    cp "$input" "tests/fuzz/regressions/$target/"
    echo "run_fuzzers: $target: new failing input tests/fuzz/regressions/$target/$(basename "$input")"
  done
done
exit "$status"
