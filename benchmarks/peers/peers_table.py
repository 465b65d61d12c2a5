#!/usr/bin/env python3
"""The table of run_peers.sh: one JSON object per line in, medians per peer out, each peer's step time
as a multiple of lazyrt's (above 1: the peer is slower), and, when the run measured the rates of a
roofline, each step as a multiple of the roofline. Standard library only.

  peers_table.py [--model mlp|gpt] RESULTS.jsonl
"""
import json
import statistics
import sys

ORDER = ["lazyrt", "train_mlp", "libtorch", "pytorch", "torch-ltc"]
GPT_ORDER = ["lazyrt", "libtorch", "pytorch", "torch-ltc", "lazyrt-bf16", "libtorch-bf16", "pytorch-bf16"]


def read_runs(path):
    runs = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            # The examples print no peer name: train_mlp is the MLP's cross-check, train_gpt is the GPT's
            # lazyrt peer.
            default = "train_mlp" if "test_accuracy" in r else "lazyrt" + ("-bf16" if r.get("dtype") == "bf16" else "")
            runs.setdefault(r.get("peer", default), []).append(r)
    return runs


def median_of(runs, name, key):
    values = [r[key] for r in runs.get(name, []) if r.get(key) is not None and r.get(key, -1) >= 0]
    return statistics.median(values) if values else None


def print_roofline(runs, order):
    """The roofline measured in the same run (run_peers.sh's measure_roofline, before and after the peers),
    from the best GEMM rate and the best bandwidth of its measurements, and each peer's step as a multiple
    of it. The best, not the last: a roofline is what the machine can do, and one measurement taken while
    the machine was disturbed read the optimizer's bandwidth at half its usual rate."""
    roofline = runs.get("roofline")
    if not roofline:
        return
    r = roofline[-1]
    gflops = max(m["gemm_gflops"] for m in roofline)
    gbs = max(m["bandwidth_gbs"] for m in roofline)
    bound = r["flops"] / gflops / 1e6 + r["bytes"] / gbs / 1e6
    print(f"roofline ({r['model']}): {r['flops'] / 1e6:.1f} MFLOP of GEMM at {gflops:.1f} GFLOP/s + "
          f"{r['bytes'] / 1e6:.2f} MB at {gbs:.1f} GB/s = {bound:.3f} ms (best of {len(roofline)} measurements: "
          + ", ".join(f"{m['gemm_gflops']:.0f} GFLOP/s {m['bandwidth_gbs']:.1f} GB/s" for m in roofline) + ")")
    ratios = []
    for name in order:
        steady = median_of(runs, name, "steady_step_ms")
        if steady is not None:
            ratios.append(f"{name} {steady / bound:.2f}")
    print("step / roofline: " + ", ".join(ratios))


def gpt_table(runs):
    """Steady and first step, tokens/s and the losses at steps 1, 10 and 100 of each peer, and how far
    each peer's first ten losses are from PyTorch eager's (the proof that the model is the same)."""
    # A bf16 run (run_peers.sh --dtype bf16) compares with the bf16 peers.
    suffix = "-bf16" if "lazyrt-bf16" in runs and "lazyrt" not in runs else ""
    base = median_of(runs, "lazyrt" + suffix, "steady_step_ms")
    reference = runs.get("pytorch" + suffix, [{}])[0].get("losses_first10")
    print()
    print(f"{'peer':<14} {'runs':>4} {'steady ms':>10} {'x lazyrt':>9} {'first ms':>9} {'tokens/s':>9} "
          f"{'loss@1':>8} {'loss@10':>8} {'loss@100':>8} {'val loss':>8}  first 10 losses vs pytorch")
    for name in GPT_ORDER:
        if name not in runs:
            continue
        steady = median_of(runs, name, "steady_step_ms")
        ratio = f"{steady / base:9.2f}" if base and steady else f"{'-':>9}"

        def fmt(key, width, digits):
            v = median_of(runs, name, key)
            return f"{v:{width}.{digits}f}" if v is not None else f"{'-':>{width}}"

        mine = runs[name][0].get("losses_first10")
        if reference and mine and len(mine) == len(reference):
            worst = max(abs(a - b) / abs(b) for a, b in zip(mine, reference))
            agreement = f"max relative difference {worst:.1e}" + (" (same model)" if worst <= 1e-4 and not suffix else "")
        else:
            agreement = "-"
        print(f"{name:<14} {len(runs[name]):>4} {fmt('steady_step_ms', 10, 2)} {ratio} {fmt('first_step_ms', 9, 1)} "
              f"{fmt('tokens_per_s', 9, 0)} {fmt('loss_step1', 8, 4)} {fmt('loss_step10', 8, 4)} "
              f"{fmt('loss_step100', 8, 4)} {fmt('val_loss', 8, 4)}  {agreement}")
    faster = [median_of(runs, n + suffix, "steady_step_ms") for n in ("pytorch", "libtorch")]
    faster = [v for v in faster if v]
    if base and faster:
        print(f"lazyrt / the faster of PyTorch eager and libtorch: {base / min(faster):.2f} (target <= 0.7)")
    print_roofline(runs, GPT_ORDER)


def main():
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "--model" and args[1] in ("mlp", "gpt"):
        model, path = args[1], args[2]
    elif len(args) == 1:
        model, path = "mlp", args[0]
    else:
        sys.exit("usage: peers_table.py [--model mlp|gpt] RESULTS.jsonl")
    runs = read_runs(path)
    if model == "gpt":
        gpt_table(runs)
        return

    def med(name, key):
        return median_of(runs, name, key)

    base = med("lazyrt", "steady_step_ms")
    micro_ns = med("micro", "op_ns")
    print()
    print(f"{'peer':<11} {'runs':>4} {'steady ms':>10} {'x lazyrt':>9} {'first ms':>9} {'mean ms':>8} "
          f"{'op ns':>8}  {'first loss':>10} {'last loss':>10}  per-op figure")
    for name in ORDER:
        if name not in runs:
            continue
        steady = med(name, "steady_step_ms")
        ratio = f"{steady / base:9.2f}" if base and steady else f"{'-':>9}"
        first = med(name, "first_step_ms")
        mean = med(name, "mean_step_ms")
        op = med(name, "op_ns")
        kind = runs[name][0].get("op_kind", "")
        if name == "lazyrt" and micro_ns is not None:
            kind += f"; micro BM_TraceElementwiseOp {micro_ns:.1f} ns"
        if name == "train_mlp":
            kind = "examples/train_mlp: shuffled batches; steady = mean of steps 2..N"
        fl, ll = med(name, "first_loss"), med(name, "last_loss")
        if name == "train_mlp":
            ll = med(name, "final_loss")

        def fmt(v, width, digits):
            return f"{v:{width}.{digits}f}" if v is not None else f"{'-':>{width}}"

        print(f"{name:<11} {len(runs[name]):>4} {fmt(steady, 10, 3)} {ratio} {fmt(first, 9, 1)} {fmt(mean, 8, 3)} "
              f"{fmt(op, 8, 0)}  {fmt(fl, 10, 6)} {fmt(ll, 10, 6)}  {kind}")
    print_roofline(runs, ORDER)
    libtorch = med("libtorch", "steady_step_ms")
    if base and libtorch:
        print(f"lazyrt / libtorch: {base / libtorch:.2f}")
    extra = runs.get("torch-ltc")
    if extra:
        print(f"torch-ltc compiles per run: {[r.get('ltc_compiles') for r in extra]}, "
              f"cached compiles: {[r.get('ltc_cache_hits') for r in extra]}")
    for name in ("pytorch", "torch-ltc"):
        if name in runs:
            r = runs[name][0]
            print(f"{name}: torch {r.get('torch')}, BLAS {r.get('blas')}, threads {r.get('threads')}")
            break
    # The peers train the same weights on the same batches: their first losses must agree closely
    # (the last ones drift apart with summation order, a little).
    firsts = {n: med(n, "first_loss") for n in ("lazyrt", "libtorch", "pytorch", "torch-ltc") if med(n, "first_loss")}
    if firsts:
        spread = max(firsts.values()) - min(firsts.values())
        note = "same computation" if spread <= 1e-4 * max(abs(v) for v in firsts.values()) else "LOSSES DISAGREE"
        print(f"first-step loss spread across peers: {spread:.2e} ({note})")


if __name__ == "__main__":
    main()
