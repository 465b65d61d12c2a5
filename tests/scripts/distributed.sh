#!/usr/bin/env bash
# Data parallel across processes (lazy/distributed.h), at test size, each check bounded in time.
#   tests/scripts/distributed.sh RUN_DISTRIBUTED TRAIN_GPT TRAIN_MLP CHECK
# CHECK: gpt_match | mlp_match (N processes x 1 device give one process x N devices' losses, 2 and 4),
#        kill | stop (a rank killed with -9, or stopped with SIGSTOP, mid-run: the others end within the
#        bound with an error naming it), diverge (one rank traces a different graph: both fail at once,
#        naming both graph keys and the first differing node's creation site).
set -uo pipefail
run=$1 gpt=$2 mlp=$3 check=$4
export LAZYRT_PERSISTENT_CACHE=0
small=(--layers 2 --heads 2 --width 32 --context 16 --batch 4 --sample-tokens 8 --eval-every 0)
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# The value of a JSON number field on the last line of $1.
field() { tail -n 1 <<<"$1" | sed -n "s/.*\"$2\": *\\([-0-9.e+]*\\).*/\\1/p"; }
# Fails unless $1 and $2 agree to 1e-5 relative.
near() {
  awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; exit !(a != "" && d <= 1e-5 * m) }' ||
    fail "$3: $2 is not within 1e-5 relative of $1"
}
# Runs a job of $1 ranks in the background; sets job_pid and job_out.
start_job() {
  job_out=$(mktemp)
  RUN_DISTRIBUTED_GRACE_S=20 RUN_DISTRIBUTED_TIMEOUT_S=60 "$run" "$@" >"$job_out" 2>&1 &
  job_pid=$!
}
# The pid of rank $1 of the job (a child of run_distributed.sh with LAZYRT_RANK=$1), once it runs.
rank_pid() {
  for _ in $(seq 200); do
    for child in $(pgrep -P "$job_pid"); do
      if tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -qx "LAZYRT_RANK=$1"; then
        echo "$child"
        return
      fi
    done
    sleep 0.05
  done
  fail "rank $1 never started"
}

# Waits until rank 0 of the job has printed step $1's line (its stdout is the launcher's log of it), so
# that every rank has compiled and run the job's first steps together.
wait_for_step() {
  local log
  log=$(readlink "/proc/$(rank_pid 0)/fd/1")
  for _ in $(seq 1200); do
    grep -q "step $1/" "$log" 2>/dev/null && return
    sleep 0.05
  done
  fail "rank 0 did not reach step $1 within 60 s"
}

case $check in
  gpt_match)
    for n in 2 4; do
      one=$(timeout 60 "$gpt" "${small[@]}" --steps 6 --mesh data=$n) || fail "1 process x $n devices failed"
      many=$(RUN_DISTRIBUTED_TIMEOUT_S=60 timeout 90 "$run" $n "$gpt" "${small[@]}" --steps 6) ||
        fail "$n processes failed: $many"
      [ "$(field "$many" ranks)" = "$n" ] || fail "ranks is not $n: $(tail -n 1 <<<"$many")"
      for f in loss_step1 final_loss val_loss; do near "$(field "$one" $f)" "$(field "$many" $f)" "$n processes, $f"; done
      echo "$n processes x 1 device: final_loss $(field "$many" final_loss), 1 x $n: $(field "$one" final_loss)"
    done
    ;;
  mlp_match)
    for n in 2 4; do
      one=$(timeout 60 "$mlp" --steps 12 --batch 32 --epochs 1 --mesh data=$n) || fail "1 process x $n devices failed"
      many=$(RUN_DISTRIBUTED_TIMEOUT_S=60 timeout 90 "$run" $n "$mlp" --steps 12 --batch 32 --epochs 1) ||
        fail "$n processes failed: $many"
      [ "$(field "$many" ranks)" = "$n" ] || fail "ranks is not $n"
      for f in final_loss test_accuracy; do near "$(field "$one" $f)" "$(field "$many" $f)" "$n processes, $f"; done
      echo "$n processes x 1 device: final_loss $(field "$many" final_loss), 1 x $n: $(field "$one" final_loss)"
    done
    ;;
  kill | stop)
    # Rank 1 of 3 dies (or stops) once the job has run a few steps; ranks 0 and 2 must end, within the
    # collective timeout and the launcher's grace, with an error naming rank 1.
    export LAZYRT_COLLECTIVE_TIMEOUT_MS=3000
    # --eval-every 2: rank 0 prints a line each second step, so that the kill waits for the job to run.
    # A fixed sleep let it land while the ranks were still compiling their first graph, one of them
    # (ASan, a loaded machine) for longer than the launcher's grace.
    start_job 3 "$gpt" "${small[@]}" --eval-every 2 --batch 6 --steps 1000000
    victim=$(rank_pid 1)
    wait_for_step 4
    start=$SECONDS
    if [ "$check" = kill ]; then kill -9 "$victim"; else kill -STOP "$victim"; fi
    wait "$job_pid"
    status=$?
    took=$((SECONDS - start))
    out=$(cat "$job_out")
    rm -f "$job_out"
    [ "$status" -ne 0 ] || fail "the job succeeded with rank 1 gone: $out"
    [ "$took" -le 30 ] || fail "the job took $took s to end after rank 1 was stopped"
    if [ "$check" = kill ]; then want="rank 1 \\(pid $victim on [^)]*\\) has exited"; else want="rank 1 \\(pid $victim on [^)]*\\) is stopped"; fi
    for r in 0 2; do
      grep -E "rank $r of 3 was at cross-process execution [0-9]+ .*$want" <<<"$out" >/dev/null ||
        fail "rank $r did not name rank 1 ($want): $out"
    done
    echo "rank 1 (${check}): the job ended in $took s; rank 0 said: $(grep -m1 "rank 0 of 3" <<<"$out")"
    ;;
  diverge)
    export LAZYRT_COLLECTIVE_TIMEOUT_MS=20000
    start=$SECONDS
    out=$(RUN_DISTRIBUTED_TIMEOUT_S=60 timeout 90 "$run" 2 "$gpt" "${small[@]}" --steps 3 --diverge-rank 1 2>&1) &&
      fail "ranks with different graphs succeeded"
    took=$((SECONDS - start))
    [ "$took" -le 15 ] || fail "the mismatch took $took s to report (it must not wait out a timeout)"
    for r in 0 1; do
      grep -E "rank $r has graph [0-9a-f]{16} .*rank $((1 - r)) has graph [0-9a-f]{16}.*first differing node.*created at examples/train_gpt.cpp:[0-9]+.*created at examples/train_gpt.cpp:[0-9]+" <<<"$out" >/dev/null ||
        fail "rank $r's error does not name both graphs and the differing node's sites: $out"
    done
    echo "mismatch reported in $took s: $(grep -m1 "rank 0 has graph" <<<"$out")"
    ;;
  *) fail "unknown check $check" ;;
esac
