#!/usr/bin/env bash
# A training step in lazyrt and its peers, one after the other on the same data, batches and initial
# weights, then one table.
#
# --model mlp (the default): the Fashion-MNIST MLP step (784-256-128-10, batch 128, AdamW lr 1e-3,
# cross-entropy):
#   lazyrt      build/benchmarks/peer_lazyrt_mlp (C++), and examples/train_mlp as a cross-check
#   libtorch    build/benchmarks/peer_libtorch_mlp (C++ eager; built only where libtorch-dev is installed)
#   pytorch     benchmarks/peers/torch_mlp.py --backend eager
#   torch-ltc   benchmarks/peers/torch_mlp.py --backend lazy (Lazy Tensor Core, TorchScript backend)
# --model gpt: examples/train_gpt's character-level GPT (4 layers, 4 heads, width 128, context 128, batch
# 32, AdamW with warmup and cosine schedule, clipping) on Debian's fortunes, 100 steps, one run each:
#   lazyrt      build/examples/train_gpt (its steady step: the median of steps 2..N)
#   libtorch    build/benchmarks/peer_libtorch_gpt (C++ eager)
#   pytorch     benchmarks/peers/torch_gpt.py --backend eager
#   torch-ltc   benchmarks/peers/torch_gpt.py --backend lazy
# and, with --dtype bf16, lazyrt's bf16 matmuls against torch.autocast("cpu", bfloat16). The table has
# each peer's steady and first step, tokens/s, the losses at steps 1, 10 and 100, and how far its first
# ten losses are from PyTorch's (within 1e-4: the same model).
#
# A peer that is not installed is skipped with a message. Each peer runs --repeats times as separate
# processes, the peers taking turns (run 1 of each, then run 2); the table shows the median of those runs.
#
#   benchmarks/peers/run_peers.sh [--model mlp|gpt] [--build DIR] [--steps N] [--warmup N] [--threads N]
#                                 [--repeats N] [--data DIR] [--dtype f32|bf16] [--out FILE.jsonl]
#                                 [--omp-wait-policy passive|active] [--model-flops N --model-bytes N]
# With build/benchmarks/micro, it also prints the step's roofline, measured in the same run: the model's
# GEMM FLOPs at the best device GEMM rate (BM_Gemm) plus its optimizer's memory traffic at the bandwidth
# of an optimizer update (BM_AdamWUpdate), each rate the best of a measurement before the peers and one
# after them, and each peer's step as a multiple of it. Each model has its counts (below); --model-flops
# and --model-bytes replace them.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$root/build"
model=mlp
steps=""
warmup=""
threads=2
repeats=""
data=""
dtype=f32
out=""
omp_wait_policy=passive
model_flops=""
model_bytes=""
# Debian's python3-torch lives in the system interpreter, not in a pyenv or venv one that may come first
# in PATH.
python="${PYTHON:-/usr/bin/python3}"

usage() {
  echo "usage: $0 [--model mlp|gpt] [--build DIR] [--steps N] [--warmup N] [--threads N] [--repeats N]" \
    "[--data DIR] [--dtype f32|bf16] [--out FILE] [--omp-wait-policy passive|active]" \
    "[--model-flops N --model-bytes N]" >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || usage
  case "$1" in
    --model) model="$2" ;;
    --build) build="$2" ;;
    --dtype) dtype="$2" ;;
    --model-flops) model_flops="$2" ;;
    --model-bytes) model_bytes="$2" ;;
    --steps) steps="$2" ;;
    --warmup) warmup="$2" ;;
    --threads) threads="$2" ;;
    --repeats) repeats="$2" ;;
    --data) data="$2" ;;
    --out) out="$2" ;;
    --omp-wait-policy) omp_wait_policy="$2" ;;
    *) usage ;;
  esac
  shift 2
done
# Each model's roofline counts: its GEMM FLOPs per step, and the bytes its optimizer moves (AdamW reads
# weight, gradient and both moments and writes weight and moments: 7 x 4 bytes a parameter).
case $model in
  mlp)
    steps=${steps:-200} warmup=${warmup:-10} repeats=${repeats:-3} data=${data:-/usr/share/datasets/fashion-mnist}
    # 784-256-128-10 at batch 128: 2 x 128 x (784x256 + 256x128 + 128x10) for the forward, as much for
    # the weight gradients, and 2 x 128 x (256x128 + 128x10) for the input gradients of layers 2 and 3
    # (layer 1's is not needed); 235,146 parameters.
    model_flops=${model_flops:-$((2 * 128 * (784 * 256 + 256 * 128 + 128 * 10) * 2 + 2 * 128 * (256 * 128 + 128 * 10)))}
    model_bytes=${model_bytes:-$((7 * 4 * (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10)))}
    ;;
  gpt)
    steps=${steps:-100} warmup=${warmup:-5} repeats=${repeats:-1} data=${data:-/usr/share/games/fortunes}
    # train_gpt's defaults (4 layers, width C 128, context T 128, batch B 32, the fortunes' 114 symbols,
    # N = B T tokens): the linear layers 3 x 2 N (4 x 12 C^2 + C x 114) (forward, input and weight
    # gradients); causal attention 7 x B T^2 C a layer (forward: q k^T and p v, 2 x 2 B T^2 C, halved by
    # causality; backward: five such products); 838,912 parameters.
    model_flops=${model_flops:-$((3 * 2 * 4096 * (4 * 12 * 128 * 128 + 128 * 114) + 4 * 7 * 32 * 128 * 128 * 128))}
    model_bytes=${model_bytes:-$((7 * 4 * 838912))}
    ;;
  *) usage ;;
esac
[[ $dtype == f32 || $dtype == bf16 ]] || usage

# The same thread count for every peer: PyTorch's intra-op pool (set_num_threads), OpenMP and the
# OpenBLAS pool behind torch's GEMMs. lazyrt's device pool has one worker per core and runs its BLAS
# single-threaded inside it.
export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"
# OpenMP workers that spin between parallel regions (the default, "active") lose their core to any other
# process on a shared 2-core machine, and every barrier then waits out a scheduler time slice: libtorch's
# step became two orders of magnitude slower (benchmarks/RESULTS.md). Passive waiting keeps the PyTorch
# figures meaningful on a busy machine; use --omp-wait-policy active on an idle one. lazyrt does not
# use OpenMP.
export OMP_WAIT_POLICY="${omp_wait_policy^^}"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/lazyrt-peers-XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
results="${out:-$scratch/results.jsonl}"
: > "$results"
common=(--data "$data" --steps "$steps" --warmup "$warmup" --threads "$threads")

# Runs "$@" and appends its last stdout line (the JSON result) to the results, tagged with `extra`.
record() {
  local name="$1"; shift
  local log="$scratch/$name.log"
  if ! "$@" > "$log" 2> "$scratch/$name.err"; then
    echo "run_peers: $name failed:" >&2
    tail -n 20 "$scratch/$name.err" >&2
    return 1
  fi
  tail -n 1 "$log" >> "$results"
}

echo "machine: $(nproc) cpus, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)," \
  "threads $threads, OMP_WAIT_POLICY=$OMP_WAIT_POLICY" >&2

# The latency of a handoff between two cores (micro BM_CoreRoundTrip), before and after the runs: on a VM it
# changes with where the host places the vCPUs, and the MLP step with it (RESULTS.md, 2026-11-25).
core_round_trip() {
  [[ -x "$build/benchmarks/micro" ]] || return 0
  "$build/benchmarks/micro" --benchmark_filter='^BM_CoreRoundTrip' --benchmark_format=json 2> /dev/null |
    "$python" -c 'import json, sys; r = json.load(sys.stdin)["benchmarks"]; print("%.0f ns" % r[0]["real_time"] if r else "-")'
}
round_trip_before=$(core_round_trip)

# The roofline of the model's step on this machine, from rates measured now: the best GEMM rate of the
# device (BM_Gemm, its pool and its tuned GEMM library; with --dtype bf16 also BM_GemmBf16, bf16 operands)
# and the bandwidth of an optimizer update (BM_AdamWUpdate: 4 arrays read, 3 written).
measure_roofline() {
  [[ -x "$build/benchmarks/micro" ]] || return 0
  local gemms=Gemm
  [[ $dtype == bf16 ]] && gemms='Gemm|GemmBf16'
  echo "micro BM_Gemm${dtype/f32/}, BM_AdamWUpdate (the roofline's rates)" >&2
  "$build/benchmarks/micro" --benchmark_filter="^BM_($gemms|AdamWUpdate)/" --benchmark_repetitions="$repeats" \
    --benchmark_report_aggregates_only=true --benchmark_format=json > "$scratch/rates.json" 2> /dev/null
  "$python" - "$scratch/rates.json" "$model" "$model_flops" "$model_bytes" >> "$results" << 'EOF'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
medians = [b for b in runs if b.get("aggregate_name", "median") == "median"]
gflops = max(b["GFLOP/s"] for b in medians if b["name"].startswith(("BM_Gemm/", "BM_GemmBf16/")))
gbs = max(b["GB/s"] for b in medians if b["name"].startswith("BM_AdamWUpdate/"))
flops, nbytes = float(sys.argv[3]), float(sys.argv[4])
print(json.dumps({"peer": "roofline", "model": sys.argv[2], "flops": flops, "bytes": nbytes, "gemm_gflops": gflops,
                  "bandwidth_gbs": gbs, "roofline_ms": flops / gflops / 1e6 + nbytes / gbs / 1e6}))
EOF
}

# The rates before the peers, and again after them: the table takes the best of each.
measure_roofline

# The GPT peers, taking turns as the MLP's below do.
run_gpt_peers() {
  local shape=(--steps "$steps" --data "$data")
  local r
  for ((r = 1; r <= repeats; r++)); do
    if [[ -x "$build/examples/train_gpt" ]]; then
      echo "lazyrt (train_gpt), run $r/$repeats" >&2
      mkdir -p "$scratch/cache-gpt-$r"
      record "train_gpt-$r" "$build/examples/train_gpt" "${shape[@]}" --eval-every "$steps" --sample-tokens 0 \
        --dtype "$dtype" --cache-dir "$scratch/cache-gpt-$r"
    else
      echo "run_peers: skipping lazyrt: no $build/examples/train_gpt" >&2
    fi
    if [[ -x "$build/benchmarks/peer_libtorch_gpt" ]]; then
      echo "libtorch, run $r/$repeats" >&2
      record "libtorch-gpt-$r" "$build/benchmarks/peer_libtorch_gpt" "${shape[@]}" --warmup "$warmup" \
        --threads "$threads" --dtype "$dtype"
    else
      echo "run_peers: skipping libtorch: peer_libtorch_gpt not built (configure with -DLAZYRT_BUILD_PEERS=ON)" >&2
    fi
    if ! "$python" -c "import torch, numpy" 2> /dev/null; then
      echo "run_peers: skipping pytorch and torch-ltc: $python cannot import torch and numpy" >&2
      continue
    fi
    echo "pytorch eager, run $r/$repeats" >&2
    record "torch-gpt-eager-$r" "$python" "$here/torch_gpt.py" --backend eager "${shape[@]}" --warmup "$warmup" \
      --threads "$threads" --dtype "$dtype"
    # Lazy Tensor Core has no bf16 autocast; it runs f32 only.
    if [[ $dtype == f32 ]] && "$python" -c "import torch._lazy.ts_backend" 2> /dev/null; then
      echo "pytorch lazy, run $r/$repeats" >&2
      record "torch-gpt-lazy-$r" "$python" "$here/torch_gpt.py" --backend lazy "${shape[@]}" --warmup "$warmup" \
        --threads "$threads" || true
    fi
  done
  measure_roofline
  "$python" "$here/peers_table.py" --model gpt "$results"
  echo "threads $threads, OMP_WAIT_POLICY=$OMP_WAIT_POLICY, load after the runs: $(cut -d' ' -f1-3 /proc/loadavg)," \
    "core round trip before/after: $round_trip_before / $(core_round_trip)"
}
if [[ $model == gpt ]]; then
  run_gpt_peers
  exit 0
fi

# The MLP peers, taking turns: run r of every peer, then run r + 1. Run one peer's repeats back to back and a
# phase of the shared VM (its step moved 0.91-1.55 ms within ten minutes, RESULTS.md 2026-12-01) lands on one
# peer's runs only, and the ratios of the table measure the machine's phase rather than the peers.
have_lazyrt=0 have_train_mlp=0 have_libtorch=0 have_torch=0 have_ltc=0
if [[ -x "$build/benchmarks/peer_lazyrt_mlp" ]]; then
  have_lazyrt=1
else
  echo "run_peers: skipping lazyrt: no $build/benchmarks/peer_lazyrt_mlp (ninja -C $build peer_lazyrt_mlp)" >&2
fi
# train_mlp's own steady_step_ms (shuffled batches, mean over steps): the figure a user of the example
# sees, next to the peer program's.
if [[ -x "$build/examples/train_mlp" ]]; then
  have_train_mlp=1
else
  echo "run_peers: skipping the train_mlp cross-check: no $build/examples/train_mlp" >&2
fi
if [[ -x "$build/benchmarks/peer_libtorch_mlp" ]]; then
  have_libtorch=1
else
  echo "run_peers: skipping libtorch: peer_libtorch_mlp not built (configure with -DLAZYRT_BUILD_PEERS=ON; needs Debian's libtorch-dev)" >&2
fi
if "$python" -c "import torch, numpy" 2> /dev/null; then
  have_torch=1
  if "$python" -c "import torch._lazy.ts_backend" 2> /dev/null; then
    have_ltc=1
  else
    echo "run_peers: skipping torch-ltc: this torch has no torch._lazy.ts_backend" >&2
  fi
else
  echo "run_peers: skipping pytorch and torch-ltc: $python cannot import torch and numpy (Debian's python3-torch)" >&2
fi

for ((r = 1; r <= repeats; r++)); do
  if ((have_lazyrt)); then
    echo "lazyrt, run $r/$repeats" >&2
    record "lazyrt-$r" "$build/benchmarks/peer_lazyrt_mlp" "${common[@]}"
  fi
  if ((have_train_mlp)); then
    echo "train_mlp, run $r/$repeats" >&2
    mkdir -p "$scratch/cache-$r"
    record "train_mlp-$r" "$build/examples/train_mlp" --steps "$steps" --epochs 1 \
      --data "$data" --cache-dir "$scratch/cache-$r" || true
  fi
  if ((have_libtorch)); then
    echo "libtorch, run $r/$repeats" >&2
    record "libtorch-$r" "$build/benchmarks/peer_libtorch_mlp" "${common[@]}"
  fi
  if ((have_torch)); then
    echo "pytorch eager, run $r/$repeats" >&2
    record "torch-eager-$r" "$python" "$here/torch_mlp.py" --backend eager "${common[@]}"
  fi
  if ((have_ltc)); then
    echo "pytorch lazy, run $r/$repeats" >&2
    record "torch-lazy-$r" "$python" "$here/torch_mlp.py" --backend lazy "${common[@]}"
  fi
done

# lazyrt's per-op trace cost as micro measures it (Google Benchmark, the figure in RESULTS.md).
if [[ -x "$build/benchmarks/micro" ]]; then
  echo "micro BM_TraceElementwiseOp" >&2
  "$build/benchmarks/micro" --benchmark_filter='^BM_TraceElementwiseOp$' --benchmark_repetitions="$repeats" \
    --benchmark_report_aggregates_only=true --benchmark_format=json > "$scratch/micro.json" 2> /dev/null
  "$python" - "$scratch/micro.json" >> "$results" << 'EOF'
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
median = next((b for b in runs if b.get("aggregate_name") == "median"), runs[0])  # no aggregates from one repetition
scale = {"ns": 1, "us": 1e3, "ms": 1e6}[median["time_unit"]]
print(json.dumps({"peer": "micro", "op_ns": median["cpu_time"] * scale, "op_kind": "BM_TraceElementwiseOp"}))
EOF
fi

measure_roofline
"$python" "$here/peers_table.py" "$results"
echo "threads $threads, OMP_WAIT_POLICY=$OMP_WAIT_POLICY, load after the runs: $(cut -d' ' -f1-3 /proc/loadavg)," \
  "core round trip before/after: $round_trip_before / $(core_round_trip)"
