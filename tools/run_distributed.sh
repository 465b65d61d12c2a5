#!/usr/bin/env bash
# Starts N processes of PROGRAM on this host as one job (lazy/distributed.h): ranks 0..N-1, a fresh
# file coordinator. Prints rank 0's output as it comes; the other ranks' go to files, shown when a rank
# fails. Exits with the first failing rank's status (0 when all succeed), kills the others as soon as
# one fails, and never runs longer than RUN_DISTRIBUTED_TIMEOUT_S seconds (default 600).
#   tools/run_distributed.sh N PROGRAM [ARGS...]
set -uo pipefail
if [ $# -lt 2 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]] || [ "$1" -gt 256 ]; then
  echo "usage: tools/run_distributed.sh N PROGRAM [ARGS...]   (N: 1 to 256 processes)" >&2
  exit 2
fi
n=$1
shift
limit=${RUN_DISTRIBUTED_TIMEOUT_S:-600}
[[ $limit =~ ^[1-9][0-9]*$ ]] || { echo "run_distributed: RUN_DISTRIBUTED_TIMEOUT_S=$limit is not a number of seconds" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/lazyrt-job.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for ((r = 0; r < n; ++r)); do
  if [ "$r" -eq 0 ]; then
    LAZYRT_WORLD_SIZE=$n LAZYRT_RANK=$r LAZYRT_COORDINATOR=file://$work/coordinator "$@" &
  else
    LAZYRT_WORLD_SIZE=$n LAZYRT_RANK=$r LAZYRT_COORDINATOR=file://$work/coordinator "$@" \
      > "$work/rank$r.log" 2> "$work/rank$r.err" &
  fi
  pids+=($!)
done

# Waits for the ranks one by one as they end; the first failure (or the time limit) ends the job.
status=0
deadline=$((SECONDS + limit))
remaining=$n
declare -A done_rank
while [ "$remaining" -gt 0 ]; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "run_distributed: the job did not end within ${limit} s (RUN_DISTRIBUTED_TIMEOUT_S): killing its ranks" >&2
    status=124
    break
  fi
  for ((r = 0; r < n; ++r)); do
    [ -n "${done_rank[$r]:-}" ] && continue
    pid=${pids[$r]}
    if ! kill -0 "$pid" 2>/dev/null || [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = Z ]; then
      wait "$pid"
      code=$?
      done_rank[$r]=1
      remaining=$((remaining - 1))
      if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then
        status=$code
        echo "run_distributed: rank $r exited with status $code" >&2
      fi
    fi
  done
  [ "$status" -ne 0 ] && break
  sleep 0.05
done
if [ "$status" -ne 0 ]; then
  # The others get a moment to report what they saw (their bounded waits), then are killed.
  # A stopped rank cannot report: it is not waited for.
  grace=$((SECONDS + ${RUN_DISTRIBUTED_GRACE_S:-15}))
  for ((r = 0; r < n; ++r)); do
    [ -n "${done_rank[$r]:-}" ] && continue
    while kill -0 "${pids[$r]}" 2>/dev/null && [ "$SECONDS" -lt "$grace" ]; do
      case "$(ps -o stat= -p "${pids[$r]}" 2>/dev/null | cut -c1)" in Z | T | t) break ;; esac
      sleep 0.05
    done
  done
  cleanup
  for ((r = 1; r < n; ++r)); do
    echo "--- rank $r (stdout, last lines) ---" >&2
    tail -n 5 "$work/rank$r.log" >&2 2>/dev/null
    echo "--- rank $r (stderr) ---" >&2
    cat "$work/rank$r.err" >&2 2>/dev/null
  done
fi
rm -rf "$work"
exit "$status"
