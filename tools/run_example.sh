#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds lazyrt and runs the main example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja
cmake --build build
./build/examples/trace_graph
