#!/usr/bin/env bash
# The habits a tool checks: every C++ file formatted by .clang-format, and .clang-tidy's checks clean.
#   tools/lint.sh            both (clang-tidy reads build/compile_commands.json: configure first)
#   tools/lint.sh --format   formatting only (seconds)
#   tools/lint.sh --fix      reformat the files in place instead of failing
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
case $mode in all|--format|--fix) ;; *) echo "usage: tools/lint.sh [--format|--fix]" >&2; exit 2 ;; esac
format=$(command -v clang-format-16) || { echo "lint: clang-format-16 is missing (tools/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cpp')

if [ "$mode" = --fix ]; then
  "$format" -i "${files[@]}"
  exit 0
fi
echo "lint: clang-format on ${#files[@]} files"
"$format" --dry-run --Werror "${files[@]}"
[ "$mode" = --format ] && exit 0

tidy=$(command -v run-clang-tidy-16) || { echo "lint: run-clang-tidy-16 is missing (tools/setup.sh installs clang-tidy-16)" >&2; exit 1; }
[ -f build/compile_commands.json ] || { echo "lint: no build/compile_commands.json (run cmake --preset release first)" >&2; exit 1; }
# clang-tidy runs on what the build compiles: a unity batch (CMakeLists.txt) as one translation unit,
# so the headers its files share are parsed and matched once. Every tracked source must be compiled
# by some command, itself or in a batch: one that none names would go unchecked. Excepted: the fuzz
# targets (built by clang only), the libtorch peers (built with -DLAZYRT_BUILD_PEERS=ON only: clang 16
# cannot parse Debian's libtorch 1.13 headers, c10::IValue), the GEMM backends benchmark (built where
# Eigen is, `tools/setup.sh --bench`) and the consumer that the install test builds against the
# installed tree.
# clang takes GCC's precompiled test headers (tests/CMakeLists.txt) for its own and fails on them: its
# compile commands drop that -include, which changes nothing (every test file includes what it uses).
mkdir -p build/lint
sed -E 's# -Winvalid-pch -include [^ ]*/cmake_pch\.hxx##g' build/compile_commands.json > build/lint/compile_commands.json
root=$(pwd -P)  # as CMake names the sources
units=$(git ls-files '*.cc' '*.cpp' |
  grep -v -e '^tests/fuzz/' -e '^benchmarks/peers/libtorch_' -e '^tests/install_consumer/' \
          -e '^benchmarks/gemm_backends\.cc$' |
  python3 tools/lint_units.py "$root" build/lint/compile_commands.json)
mapfile -t units <<< "$units"
echo "lint: clang-tidy on ${#units[@]} translation units"
# The .cc files of a batch are headers to clang-tidy: the filter names the project's directories.
root_pattern=$(python3 -c 'import re, sys; print(re.escape(sys.argv[1]))' "$root")
project_dirs="^$root_pattern/(ir|lazy|lowering|pjrt_sim|cache|tools|examples|benchmarks|tests)/"
"$tidy" -quiet -p build/lint -j "$(nproc)" -header-filter="$project_dirs" "${units[@]}" > build/clang-tidy.log 2>&1 || {
  grep -E "warning:|error:" build/clang-tidy.log | sort -u | sed -n 1,50p  # sed reads to the end: no SIGPIPE under pipefail
  echo "lint: clang-tidy found problems (all of them in build/clang-tidy.log)" >&2
  exit 1
}
echo "lint: clean"
