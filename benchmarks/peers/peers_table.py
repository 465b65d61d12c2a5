#!/usr/bin/env python3
"""The table of run_peers.sh: one JSON object per line in, medians per peer out, each peer's step time
as a multiple of lazyrt's (above 1: the peer is slower), and, when the run measured the rates of a
roofline, each step as a multiple of the roofline. Standard library only.

  peers_table.py RESULTS.jsonl
"""
import json
import statistics
import sys

ORDER = ["lazyrt", "train_mlp", "libtorch", "pytorch", "torch-ltc"]


def main():
    runs = {}
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            # examples/train_mlp prints no peer name; its line has steady_step_ms and graphs_compiled.
            runs.setdefault(r.get("peer", "train_mlp"), []).append(r)

    def med(name, key):
        values = [r[key] for r in runs.get(name, []) if r.get(key) is not None and r.get(key, -1) >= 0]
        return statistics.median(values) if values else None

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
    roofline = runs.get("roofline")
    if roofline:
        r = roofline[-1]
        bound = r["roofline_ms"]
        print(f"roofline ({r['model']}): {r['flops'] / 1e6:.1f} MFLOP of GEMM at {r['gemm_gflops']:.1f} GFLOP/s + "
              f"{r['bytes'] / 1e6:.2f} MB at {r['bandwidth_gbs']:.1f} GB/s = {bound:.3f} ms")
        ratios = []
        for name in ORDER:
            steady = med(name, "steady_step_ms")
            if steady is not None:
                ratios.append(f"{name} {steady / bound:.2f}")
        print("step / roofline: " + ", ".join(ratios))
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
