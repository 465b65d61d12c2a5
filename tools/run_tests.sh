#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds lazyrt and runs the whole test suite:
#   release  the Release build (warnings are errors) and every test             (build/)
#   asan     every test again under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   tsan     the concurrent parts (device streams, async execution, the cache under threads and
#            processes) under ThreadSanitizer                                  (build-tsan/)
#   lint     the tree formatted by .clang-format, and .clang-tidy's checks clean (tools/lint.sh)
#   fuzz     each libFuzzer target for FUZZ_SECONDS (default 60) plus its regression inputs
# TEST_STAGES="release asan" tools/run_tests.sh runs a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
stages=${TEST_STAGES:-release lint asan tsan fuzz}

# A stage is a preset of CMakePresets.json: configure, build and test with it.
run_stage() {
  echo "== stage $1: $(date -u +%H:%M:%S)"
  cmake --preset "$1"
  cmake --build --preset "$1"
  ctest --preset "$1"
}

for stage in $stages; do
  case $stage in
    release|asan|tsan) run_stage "$stage" ;;
    lint) echo "== stage lint: $(date -u +%H:%M:%S)"; bash tools/lint.sh ;;  # after release: its compile commands
    fuzz) bash tests/fuzz/run_fuzzers.sh ;;
    *) echo "unknown stage '$stage' (release, lint, asan, tsan, fuzz)" >&2; exit 2 ;;
  esac
done
echo "== all stages passed: $stages"
