#!/usr/bin/env bash
# The collective share of a data-parallel GPT step: runs examples/train_gpt on one device and on meshes
# data=1, 2, 4 (at test size and at a small size) and prints, per run, the steady step's time, the time a
# device spends inside collectives per step (averaged over the mesh's devices; waiting at the rendezvous
# for the other partitions included) and their ratio, from the final JSON's steady_step_ms,
# collective_ms_per_step and collective_share, and of the collective time the part spent waiting at the
# rendezvous for the other partitions (collective_wait_ms_per_step).
#   benchmarks/collective_share.sh [BUILD_DIR]        (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
train="$build/examples/train_gpt"
[ -x "$train" ] || { echo "collective_share: no $train (cmake --build $build --target train_gpt)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

declare -A configs=(
  [test]="--layers 2 --heads 2 --width 32 --context 16 --batch 8 --steps 30"
  [small]="--layers 4 --heads 4 --width 64 --context 64 --batch 16 --steps 20"
)
printf '%-6s %-8s %10s %14s %10s %8s %s\n' config mesh step_ms collective_ms wait_ms share devices
for config in test small; do
  for mesh in none data=1 data=2 data=4; do
    mesh_flags=()
    [ "$mesh" = none ] || mesh_flags=(--mesh "$mesh")
    # shellcheck disable=SC2086  # the config's flags are words
    "$train" ${configs[$config]} --eval-every 0 --sample-tokens 1 --cache-dir "$work/cache" "${mesh_flags[@]}" \
      > "$work/out.txt"
    tail -n 1 "$work/out.txt" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
print("%-6s %-8s %10.3f %14.3f %10.3f %8.4f %d" % (sys.argv[1], sys.argv[2], r["steady_step_ms"],
      r["collective_ms_per_step"], r["collective_wait_ms_per_step"], r["collective_share"], r["devices"]))' \
      "$config" "$mesh"
  done
done
