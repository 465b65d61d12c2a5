#!/usr/bin/env python3
"""Compares lazyrt's public ops and their gradients with PyTorch's (f32) on random inputs.

Run by hand, not in CI (it needs PyTorch: `tools/setup.sh --bench` installs python3-torch):
    cmake --build build --target torch_compare_driver
    /usr/bin/python3 tests/numerics/compare_with_torch.py [--driver build/tests/torch_compare_driver]
        [--cases N] [--seed S] [--rtol 1e-5] [--atol 1e-6] [--ops add,pow,...]

The optimizers (sgd, adamw) run up to 30 steps on fixed random gradients; their parameters after every
step are compared. Each case is random: ranks 0-4, broadcasting, size-0 and size-1 dimensions, values chosen per op (positive
where the op needs it, ties and exact zeros sometimes). Results and gradients (of sum(y * w) for a random
w) must agree within rtol * |torch| + atol, NaN with NaN and infinities exactly; an error must come from
both sides or neither. Prints one line per op and every mismatch; exits 1 if any.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DRIVER = os.path.join(HERE, "..", "..", "build", "tests", "torch_compare_driver")
TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32, "i64": torch.int64,
                "bool": torch.bool}


def to_json_number(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def from_json_number(v):
    return float(v) if isinstance(v, str) else v


class Gen:
    def __init__(self, seed, special):
        self.r = random.Random(seed)
        self.special = special  # NaN, infinities and signed zeros among "mixed" values

    def dims(self, max_rank=4, allow_empty=True):
        rank = self.r.randint(0, max_rank)
        out = []
        for _ in range(rank):
            p = self.r.random()
            out.append(0 if allow_empty and p < 0.08 else 1 if p < 0.25 else self.r.randint(2, 5))
        return out

    def broadcast_pair(self):
        a = self.dims()
        b = [d if self.r.random() < 0.6 else 1 for d in a[self.r.randint(0, len(a)):]]
        if self.r.random() < 0.5:
            a = [1 if (d != 0 and self.r.random() < 0.3) else d for d in a]
        return (a, b) if self.r.random() < 0.5 else (b, a)

    def values(self, n, lo, hi, kind="real"):
        if kind == "int":
            return [self.r.randint(lo, hi) for _ in range(n)]
        out = []
        for _ in range(n):
            p = self.r.random()
            if kind == "mixed" and self.special and p < 0.04:
                out.append(self.r.choice([math.nan, math.inf, -math.inf, 0.0, -0.0]))
            elif kind == "mixed" and p < 0.15:
                out.append(float(self.r.randint(int(lo), int(hi))))  # exact values and ties
            else:
                out.append(self.r.uniform(lo, hi))
        return out


def numel(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def tensor_in(dtype, dims, values, grad=False):
    return {"dtype": dtype, "dims": dims, "values": [to_json_number(v) for v in values], "grad": grad}


def make_cases(g, op, count):
    """(case for the driver, torch function of the input tensors) pairs."""
    cases = []
    for _ in range(count):
        attrs = {}
        if op in ("neg", "abs", "exp", "tanh", "sigmoid", "relu", "gelu", "sign", "log", "sqrt", "rsqrt", "erf", "sin",
                  "cos"):
            d = g.dims()
            positive = op in ("log", "sqrt", "rsqrt")
            inputs = [tensor_in("f32", d, g.values(numel(d), 0.1 if positive else -4, 4, "real" if positive else "mixed"), True)]
            fn = {"neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
                  "relu": torch.relu, "gelu": F.gelu, "sign": torch.sign, "log": torch.log, "sqrt": torch.sqrt,
                  "rsqrt": torch.rsqrt, "erf": torch.erf, "sin": torch.sin, "cos": torch.cos}[op]
            torch_fn = lambda x, fn=fn: fn(x[0])
        elif op in ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "lt", "ge"):
            a, b = g.broadcast_pair()
            lo_a = 0.25 if op == "pow" else -4
            va = g.values(numel(a), lo_a, 3 if op == "pow" else 4, "real" if op == "pow" else "mixed")
            vb = g.values(numel(b), -2 if op == "pow" else -4, 3 if op == "pow" else 4, "real" if op == "pow" else "mixed")
            if op == "div":
                vb = [v if abs(v) > 0.25 else 1.5 for v in vb]
            inputs = [tensor_in("f32", a, va, True), tensor_in("f32", b, vb, True)]
            fn = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
                  "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "lt": torch.lt, "ge": torch.ge}[op]
            torch_fn = lambda x, fn=fn: fn(x[0], x[1])
        elif op in ("pow_scalar", "mul_scalar", "rdiv_scalar", "rsub_scalar"):
            d = g.dims()
            s = g.r.choice([2.0, 3.0, 0.5, -1.0, 1.5, float(g.r.randint(-3, 3))]) if op == "pow_scalar" else g.r.uniform(-3, 3)
            positive = op in ("pow_scalar", "rdiv_scalar")
            inputs = [tensor_in("f32", d, g.values(numel(d), 0.25 if positive else -4, 3), True)]
            attrs = {"exponent": s} if op == "pow_scalar" else {"scalar": s}
            torch_fn = {"pow_scalar": lambda x, s=s: torch.pow(x[0], s), "mul_scalar": lambda x, s=s: x[0] * s,
                        "rdiv_scalar": lambda x, s=s: s / x[0], "rsub_scalar": lambda x, s=s: s - x[0]}[op]
        elif op == "where":
            a, b = g.broadcast_pair()
            c = g.broadcast_pair()[0] if g.r.random() < 0.3 else a
            try:
                torch.broadcast_shapes(tuple(a), tuple(b), tuple(c))
            except RuntimeError:
                c = a
            inputs = [tensor_in("bool", c, g.values(numel(c), 0, 1, "int")),
                      tensor_in("f32", a, g.values(numel(a), -4, 4), True), tensor_in("f32", b, g.values(numel(b), -4, 4), True)]
            torch_fn = lambda x: torch.where(x[0], x[1], x[2])
        elif op == "cast":
            d = g.dims()
            to = g.r.choice(["i32", "i64", "f64", "bool"])
            # Finite values only: NaN and +-inf differ on purpose (README "Semantics"; pinned by
            # Conformance.FloatToIntegerCastsSaturateAndMapNaNToZero).
            inputs = [tensor_in("f32", d, g.values(numel(d), -100, 100), to == "f64")]
            attrs = {"dtype": to}
            torch_fn = lambda x, to=to: x[0].to(TORCH_DTYPES[to])
        elif op == "matmul":
            m, k, n = g.r.randint(1, 6), g.r.randint(0, 6), g.r.randint(1, 6)
            batch = g.dims(max_rank=2, allow_empty=False)
            shape_a = ([k] if g.r.random() < 0.2 else batch + [m, k])
            shape_b = ([k] if g.r.random() < 0.2 else ([1] * len(batch) if g.r.random() < 0.3 else batch) + [k, n])
            inputs = [tensor_in("f32", shape_a, g.values(numel(shape_a), -2, 2), True),
                      tensor_in("f32", shape_b, g.values(numel(shape_b), -2, 2), True)]
            torch_fn = lambda x: torch.matmul(x[0], x[1])
        elif op in ("sum", "mean", "amax", "amin", "prod"):
            d = g.dims()
            rank = len(d)
            dims = sorted(g.r.sample(range(rank), g.r.randint(0, rank)))
            dims = [x - rank if g.r.random() < 0.3 else x for x in dims]
            keep = g.r.random() < 0.5
            if op in ("amax", "amin") and (numel(d) == 0 and not dims or any(d[x] == 0 for x in dims)):
                dims = [x for x in range(rank) if d[x] > 0] if numel(d) > 0 else dims
            values = g.values(numel(d), 0.8, 1.25) if op == "prod" else g.values(numel(d), -4, 4, "mixed")
            inputs = [tensor_in("f32", d, values, True)]
            attrs = {"dims": dims, "keepdim": keep}
            tdims = dims if dims else list(range(rank))
            fn = {"sum": torch.sum, "mean": torch.mean, "amax": torch.amax, "amin": torch.amin, "prod": prod_dims}[op]
            def torch_fn(x, fn=fn, tdims=tdims, keep=keep):
                return fn(x[0], dim=tdims, keepdim=keep) if tdims else fn(x[0])  # no dims: a 0-dim input
        elif op in ("argmax", "softmax", "log_softmax"):
            d = g.dims()
            rank = len(d)
            dim = g.r.randint(-max(rank, 1), max(rank, 1) - 1)
            if op == "argmax" and rank and d[dim] == 0:
                d[dim] = 3
            inputs = [tensor_in("f32", d, g.values(numel(d), -3, 3, "mixed"), op != "argmax")]
            attrs = {"dim": dim}
            fn = {"argmax": torch.argmax, "softmax": torch.softmax, "log_softmax": torch.log_softmax}[op]
            torch_fn = lambda x, fn=fn, dim=dim: fn(x[0], dim)
        elif op in ("transpose", "permute", "reshape", "expand", "slice"):
            d = g.dims()
            rank = len(d)
            inputs = [tensor_in("f32", d, g.values(numel(d), -4, 4), True)]
            if op == "transpose":
                d0, d1 = g.r.randint(-max(rank, 1), max(rank, 1) - 1), g.r.randint(-max(rank, 1), max(rank, 1) - 1)
                attrs = {"dim0": d0, "dim1": d1}
                torch_fn = lambda x, d0=d0, d1=d1: torch.transpose(x[0], d0, d1)
            elif op == "permute":
                perm = list(range(rank))
                g.r.shuffle(perm)
                attrs = {"perm": perm}
                torch_fn = lambda x, perm=perm: x[0].permute(perm)
            elif op == "reshape":
                sizes = list(reversed(d))
                if sizes and g.r.random() < 0.5 and numel(d) > 0:
                    sizes[g.r.randint(0, len(sizes) - 1)] = -1
                attrs = {"sizes": sizes}
                torch_fn = lambda x, sizes=sizes: x[0].reshape(sizes)
            elif op == "expand":
                sizes = [g.r.randint(2, 3)] * g.r.randint(0, 1) + [s if s != 1 or g.r.random() < 0.5 else 3 for s in d]
                attrs = {"sizes": sizes}
                torch_fn = lambda x, sizes=sizes: x[0].expand(sizes)
            else:
                if rank == 0:
                    d, rank = [4], 1
                    inputs = [tensor_in("f32", d, g.values(4, -4, 4), True)]
                dim = g.r.randint(0, rank - 1)
                start, end, step = g.r.randint(-6, 6), g.r.randint(-6, 6), g.r.randint(1, 3)
                attrs = {"dim": dim, "start": start, "end": end, "step": step}
                def torch_fn(x, dim=dim, start=start, end=end, step=step):
                    idx = [slice(None)] * x[0].dim()
                    idx[dim] = slice(start, end, step)
                    return x[0][tuple(idx)]
        elif op == "cat":
            d = g.dims()
            if not d:
                d = [2]
            dim = g.r.randint(0, len(d) - 1)
            shapes = []
            for _ in range(g.r.randint(1, 3)):
                s = list(d)
                s[dim] = g.r.randint(0, 3)
                shapes.append(s)
            inputs = [tensor_in("f32", s, g.values(numel(s), -4, 4), True) for s in shapes]
            attrs = {"dim": dim}
            torch_fn = lambda x, dim=dim: torch.cat(x, dim)
        elif op in ("index_select", "gather"):
            d = g.dims(allow_empty=False) or [3]
            rank = len(d)
            dim = g.r.randint(0, rank - 1)
            if op == "index_select":
                idx_dims = [g.r.randint(0, 5)]
            else:
                idx_dims = [g.r.randint(1, s) if i != dim else g.r.randint(0, 4) for i, s in enumerate(d)]
            idx = [g.r.randint(0, d[dim] - 1) for _ in range(numel(idx_dims))]
            inputs = [tensor_in("f32", d, g.values(numel(d), -4, 4), True), tensor_in("i64", idx_dims, idx)]
            attrs = {"dim": dim}
            torch_fn = (lambda x, dim=dim: torch.index_select(x[0], dim, x[1])) if op == "index_select" else \
                (lambda x, dim=dim: torch.gather(x[0], dim, x[1]))
        elif op == "one_hot":
            d = g.dims(max_rank=3)
            classes = g.r.randint(1, 6)
            inputs = [tensor_in("i64", d, [g.r.randint(0, classes - 1) for _ in range(numel(d))])]
            attrs = {"num_classes": classes}
            torch_fn = lambda x, classes=classes: F.one_hot(x[0], classes)
        elif op == "cross_entropy":
            n, c = g.r.randint(1, 8), g.r.randint(1, 6)
            inputs = [tensor_in("f32", [n, c], g.values(n * c, -5, 5), True),
                      tensor_in("i64", [n], [g.r.randint(0, c - 1) for _ in range(n)])]
            torch_fn = lambda x: F.cross_entropy(x[0], x[1])
        elif op in ("sgd", "adamw"):
            d = g.dims(max_rank=2, allow_empty=False)
            n = numel(d)
            steps = [g.values(n, -2, 2) for _ in range(g.r.randint(1, 30))]
            steps = [[float(torch.tensor(v, dtype=torch.float32)) for v in step] for step in steps]
            lr = g.r.choice([1e-3, 1e-2, 0.1])
            wd = g.r.choice([0.0, 1e-2, 0.1])
            if op == "sgd":
                attrs = {"lr": lr, "momentum": g.r.choice([0.0, 0.9]), "weight_decay": wd}
            else:
                attrs = {"lr": lr, "beta1": 0.9, "beta2": g.r.choice([0.999, 0.99999]), "eps": 1e-8, "weight_decay": wd}
            attrs["grads"] = steps
            inputs = [tensor_in("f32", d, g.values(n, -2, 2))]

            def torch_fn(x, op=op, attrs=attrs):
                p = x[0].clone().requires_grad_()
                if op == "sgd":
                    opt = torch.optim.SGD([p], lr=attrs["lr"], momentum=attrs["momentum"],
                                          weight_decay=attrs["weight_decay"])
                else:
                    opt = torch.optim.AdamW([p], lr=attrs["lr"], betas=(attrs["beta1"], attrs["beta2"]),
                                            eps=attrs["eps"], weight_decay=attrs["weight_decay"])
                trajectory = []
                for step in attrs["grads"]:
                    p.grad = torch.tensor(step, dtype=torch.float32).reshape(p.shape)
                    opt.step()
                    trajectory.append(p.detach().clone().reshape(-1))
                return torch.cat(trajectory)
        else:
            raise ValueError(f"no generator for {op}")
        cases.append(({"op": op, "inputs": inputs, "attrs": attrs}, torch_fn))
    return cases


def prod_dims(x, dim=None, keepdim=False):
    """torch.prod over several dims (torch's takes one)."""
    if dim is None:
        return torch.prod(x)
    for d in sorted((d % x.dim() for d in dim), reverse=True):
        x = torch.prod(x, d, keepdim=keepdim)
    return x


OPS = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "erf", "sin", "cos", "sign", "add", "sub", "mul",
       "div", "pow", "maximum", "minimum", "eq", "lt", "ge", "pow_scalar", "mul_scalar", "rdiv_scalar", "rsub_scalar",
       "where", "cast", "matmul", "sum", "mean", "amax", "amin", "prod", "argmax", "softmax", "log_softmax", "transpose", "permute",
       "reshape", "expand", "slice", "cat", "index_select", "gather", "one_hot", "cross_entropy", "sgd", "adamw"]


def torch_side(case, torch_fn, g):
    """PyTorch's result, gradients and weight (or its error) for `case`."""
    tensors = []
    for inp in case["inputs"]:
        values = [from_json_number(v) for v in inp["values"]]
        t = torch.tensor(values, dtype=torch.float64).to(TORCH_DTYPES[inp["dtype"]]).reshape(inp["dims"])
        if inp.get("grad"):
            t.requires_grad_()
        tensors.append(t)
    try:
        y = torch_fn(tensors)
    except (RuntimeError, IndexError, ValueError) as e:
        return {"error": str(e).splitlines()[0]}
    out = {"y": y.detach()}
    if y.requires_grad and y.dtype.is_floating_point:
        w = torch.tensor(g.values(y.numel(), -1, 1), dtype=torch.float32).to(y.dtype).reshape(y.shape)
        case["weight"] = [float(v) for v in w.reshape(-1)]
        (y * w).sum().backward()
        out["grads"] = [t.grad if t.requires_grad else None for t in tensors]
    return out


def close(got, want, rtol, atol):
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    if math.isinf(want) or math.isinf(got):
        return got == want
    return abs(got - want) <= rtol * abs(want) + atol


def compare(name, got_values, want_tensor, rtol, atol):
    want = [float(v) for v in want_tensor.detach().to(torch.float64).reshape(-1)]
    got = [from_json_number(v) for v in got_values]
    if len(got) != len(want):
        return f"{name}: {len(got)} elements, torch {len(want)}", 0.0
    worst, problem = 0.0, None
    for i, (a, b) in enumerate(zip(got, want)):
        if not close(a, b, rtol, atol):
            problem = problem or f"{name}: element {i} is {a!r}, torch {b!r}"
        if math.isfinite(a) and math.isfinite(b):
            worst = max(worst, abs(a - b) / max(abs(b), atol / rtol))
    return problem, worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", default=DEFAULT_DRIVER)
    parser.add_argument("--cases", type=int, default=40, help="random cases per op")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--atol", type=float, default=1e-6)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--special", action="store_true", help="NaN, +-inf and -0 among the inputs too")
    args = parser.parse_args()
    torch.set_num_threads(1)
    g = Gen(args.seed, args.special)
    ops = args.ops.split(",")
    pending = []
    for op in ops:
        for case, fn in make_cases(g, op, args.cases):
            pending.append((op, case, fn, torch_side(case, fn, g)))
    env = dict(os.environ, LAZYRT_PERSISTENT_CACHE="0")
    run = subprocess.run([args.driver], input=json.dumps([c for _, c, _, _ in pending]), capture_output=True,
                         text=True, env=env)
    if run.returncode != 0:
        sys.exit(f"driver failed ({run.returncode}): {run.stderr}")
    results = json.loads(run.stdout)
    failures = 0
    for op in ops:
        worst, count, problems = 0.0, 0, []
        for (case_op, case, _, want), got in zip(pending, results):
            if case_op != op:
                continue
            count += 1
            shapes = " ".join(f"{i['dtype']}{i['dims']}" for i in case["inputs"])
            where = f"{op}({shapes}) {json.dumps(case['attrs'])}"
            if "error" in want or "error" in got:
                if ("error" in want) != ("error" in got):
                    problems.append(f"{where}: lazyrt {'error: ' + got['error'] if 'error' in got else 'no error'}; "
                                    f"torch {'error: ' + want['error'] if 'error' in want else 'no error'}")
                continue
            y = want["y"]
            want_dtype = {v: k for k, v in TORCH_DTYPES.items()}.get(y.dtype, str(y.dtype))
            if got["dtype"] != want_dtype or got["dims"] != list(y.shape):
                problems.append(f"{where}: lazyrt {got['dtype']}{got['dims']}, torch {want_dtype}{list(y.shape)}")
                continue
            problem, err = compare("value", got["values"], y, args.rtol, args.atol)
            worst = max(worst, err)
            if problem:
                problems.append(f"{where}: {problem}")
            for i, tg in enumerate(want.get("grads", [])):
                if tg is None:
                    continue
                lg = got["grads"][i] if i < len(got["grads"]) else None
                if lg is None:
                    problems.append(f"{where}: no lazyrt gradient for input {i}")
                    continue
                problem, err = compare(f"grad {i}", lg, tg, args.rtol, args.atol)
                worst = max(worst, err)
                if problem:
                    problems.append(f"{where}: {problem}")
        failures += len(problems)
        print(f"{op:14s} {count:4d} cases  max rel err {worst:.2e}  {'ok' if not problems else f'{len(problems)} MISMATCHES'}")
        for p in problems[:5]:
            print(f"    {p}")
    print(f"{failures} mismatches (rtol {args.rtol}, atol {args.atol}, seed {args.seed})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
