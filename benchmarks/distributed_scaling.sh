#!/usr/bin/env bash
# The scaling table of benchmarks/RESULTS.md ("Data parallel across processes"): train_gpt's default
# model on 1 process (one device), and on 2 and 4 processes of one device each (tools/run_distributed.sh),
# the same global batch; prints one line per run with tokens/s and the collectives' share of the step.
#   benchmarks/distributed_scaling.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-12}
export LAZYRT_PERSISTENT_CACHE=0
args=(--steps "$steps" --eval-every 0 --sample-tokens 1)
field() { sed -n "s/.*\"$2\":\\([-0-9.e+]*\\).*/\\1/p" <<<"$1"; }
printf "%-9s %12s %14s %15s %14s %18s %16s\n" processes tokens_per_s steady_step_ms collective_ms collective_share collectives_per_step bytes_per_step
for n in 1 2 4; do
  if [ "$n" -eq 1 ]; then
    out=$("$build/examples/train_gpt" "${args[@]}" | tail -n 1)
  else
    out=$(tools/run_distributed.sh "$n" "$build/examples/train_gpt" "${args[@]}" | tail -n 1)
  fi
  step=$(field "$out" steady_step_ms)
  coll=$(field "$out" collective_ms_per_step)
  share=$(awk -v c="$coll" -v s="$step" 'BEGIN { printf "%.3f", c / s }')
  printf "%-9s %12s %14s %15s %14s %18s %16s\n" "$n" "$(field "$out" tokens_per_s)" "$step" "$coll" "$share" \
    "$(field "$out" collectives_per_step)" "$(field "$out" collective_bytes_per_step)"
done
