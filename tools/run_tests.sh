#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds lazyrt and runs the whole test suite:
#   release  the Release build (warnings are errors) and every test             (build/)
#   asan     every test again under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   tsan     the concurrent parts (device streams, async execution, the cache under threads and
#            processes) under ThreadSanitizer                                  (build-tsan/)
#   fuzz     each libFuzzer target for FUZZ_SECONDS (default 60) plus its regression inputs
# TEST_STAGES="release asan" tools/run_tests.sh runs a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
stages=${TEST_STAGES:-release asan tsan fuzz}

# run_stage NAME DIR "CMAKE ARGS" "TARGETS (empty: all)" "CTEST ARGS"
run_stage() {
  local name=$1 dir=$2 cmake_args=$3 targets=$4 ctest_args=$5
  echo "== stage $name: $(date -u +%H:%M:%S)"
  # shellcheck disable=SC2086  # the argument strings are word lists
  cmake -S . -B "$dir" -G Ninja $cmake_args
  # shellcheck disable=SC2086
  cmake --build "$dir" ${targets:+--target $targets}
  # shellcheck disable=SC2086
  ctest --test-dir "$dir" --output-on-failure --timeout 1500 -j2 $ctest_args
}

for stage in $stages; do
  case $stage in
    release) run_stage release build "-DLAZYRT_WERROR=ON" "" "" ;;
    asan) run_stage asan build-asan "-DLAZYRT_SANITIZE=address -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            -DLAZYRT_BUILD_BENCHMARKS=OFF" "" "" ;;
    tsan) run_stage tsan build-tsan "-DLAZYRT_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            -DLAZYRT_BUILD_BENCHMARKS=OFF" "cache_test pjrt_sim_test lazy_test" "-L concurrency" ;;
    fuzz) bash tests/fuzz/run_fuzzers.sh ;;
    *) echo "unknown stage '$stage' (release, asan, tsan, fuzz)" >&2; exit 2 ;;
  esac
done
echo "== all stages passed: $stages"
