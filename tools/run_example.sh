#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds lazyrt and runs the main job: the Fashion-MNIST training
# example twice on one fresh cache directory (the first process compiles its graphs, cold; the second
# loads the compiled executables from the persistent cache and compiles nothing, warm), then the
# character-level GPT on Debian's fortunes (300 steps, validation, a sample). Arguments go to train_mlp.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset release
cmake --build --preset release

cache=build/quickstart-cache
rm -rf "$cache"
echo "== cold: empty cache ($cache)"
./build/examples/train_mlp --cache-dir "$cache" "$@"
echo "== warm: same cache, new process"
./build/examples/train_mlp --cache-dir "$cache" "$@"
echo "== GPT: train_gpt on /usr/share/games/fortunes"
./build/examples/train_gpt --cache-dir "$cache"
