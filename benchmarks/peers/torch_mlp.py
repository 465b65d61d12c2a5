#!/usr/bin/env python3
"""The Fashion-MNIST MLP step (784-256-128-10, AdamW, cross-entropy) in PyTorch, eager or on Lazy
Tensor Core (torch._lazy with its TorchScript backend), on the batches and initial weights of the C++
peers: this file reproduces benchmarks/peers/mlp_common.h (IDX reader, normalization, SplitMix64
initial weights, fixed batch order). The last stdout line is one JSON object, as the C++ peers print.

  torch_mlp.py --backend eager|lazy [--data DIR] [--steps N] [--warmup N] [--batch N] [--lr X]
               [--threads N] [--op-iterations N]
"""
import argparse
import gzip
import json
import re
import statistics
import struct
import sys
import time

import numpy as np
import torch

from torch_peer import peer_device, uniform

LAYER_SIZES = [784, 256, 128, 10]


def load_train(data_dir):
    """Pixels / 255 in f32, then standardized by the split's mean and deviation (in f64)."""
    with gzip.open(f"{data_dir}/train-images-idx3-ubyte.gz", "rb") as f:
        raw = f.read()
    magic, count, rows, cols = struct.unpack(">IIII", raw[:16])
    if magic != 0x803:
        sys.exit(f"torch_mlp: {data_dir}: not an IDX image file")
    pixels = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(count, rows * cols)
    with gzip.open(f"{data_dir}/train-labels-idx1-ubyte.gz", "rb") as f:
        raw = f.read()
    if struct.unpack(">II", raw[:8]) != (0x801, count):
        sys.exit(f"torch_mlp: {data_dir}: label file does not match the images")
    labels = np.frombuffer(raw, dtype=np.uint8, offset=8).astype(np.int64)
    images = pixels.astype(np.float32) / np.float32(255)
    wide = images.astype(np.float64)
    mean = wide.mean()
    stddev = np.sqrt((wide * wide).mean() - mean * mean)
    images = ((wide - mean) / stddev).astype(np.float32)
    return images, labels


def make_model(device):
    layers = []
    for l in range(len(LAYER_SIZES) - 1):
        fan_in, fan_out = LAYER_SIZES[l], LAYER_SIZES[l + 1]
        bound = 1.0 / np.sqrt(fan_in)
        layer = torch.nn.Linear(fan_in, fan_out)
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(uniform(fan_out * fan_in, bound, 2 * l).reshape(fan_out, fan_in)))
            layer.bias.copy_(torch.from_numpy(uniform(fan_out, bound, 2 * l + 1)))
        layers.append(layer)
        if l + 2 < len(LAYER_SIZES):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(device)


def blas_info():
    """What BLAS this torch build calls (from torch.__config__.show())."""
    found = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return found.group(1) if found else "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["eager", "lazy"], required=True)
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--op-iterations", type=int, default=200000)
    args = parser.parse_args()
    if args.warmup + 1 >= args.steps:
        parser.error("--steps must exceed --warmup + 1")

    lazy = args.backend == "lazy"
    device = peer_device(args.backend, args.threads)

    images, labels = load_train(args.data)
    per_epoch = len(labels) // args.batch
    model = make_model(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    step_ms = []
    first_loss = None
    run_start = time.perf_counter()
    for step in range(args.steps):
        start = time.perf_counter()
        first = (step % per_epoch) * args.batch
        # The batch's rows read in place where the device is the CPU (eager), as the C++ peers' are; a lazy
        # device copies them (a transfer). The labels copied, as the C++ peers' are.
        x = torch.from_numpy(images[first:first + args.batch]).to(device)
        y = torch.from_numpy(labels[first:first + args.batch]).to(device, copy=True)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if lazy:
            torch._lazy.mark_step()
        if step == 0:
            first_loss = loss.item()  # the first step ends when its result is ready
        step_ms.append((time.perf_counter() - start) * 1e3)
    last_loss = loss.item()
    if lazy:
        torch._lazy.wait_device_ops()
    total_ms = (time.perf_counter() - run_start) * 1e3

    # Per-op cost of x * 0.5 on a 4x4 tensor: for LTC the trace (an IR node, nothing runs), for eager
    # the dispatch and the kernel. Results are dropped at once, as temporaries in a step are.
    with torch.no_grad():
        x = torch.ones(4, 4, device=device)
        if lazy:
            torch._lazy.mark_step()
        start = time.perf_counter()
        for _ in range(args.op_iterations):
            y = x * 0.5
        op_ns = (time.perf_counter() - start) * 1e9 / args.op_iterations
        del y

    result = {
        "peer": "torch-ltc" if lazy else "pytorch",
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "warmup": args.warmup,
        "first_step_ms": round(step_ms[0], 3),
        "steady_step_ms": round(statistics.median(step_ms[1 + args.warmup:]), 4),
        "mean_step_ms": round(total_ms / args.steps, 4),
        "first_loss": first_loss,
        "last_loss": last_loss,
        "op_ns": round(op_ns, 1),
        "op_kind": ("trace" if lazy else "eager") + " x*0.5 (Python)",
        "torch": torch.__version__,
        "blas": blas_info(),
    }
    if lazy:
        # Recompiles would make the steady figure meaningless: report LTC's own compile counters.
        result["ltc_compiles"] = torch._lazy.metrics.counter_value("UncachedCompile")
        result["ltc_cache_hits"] = torch._lazy.metrics.counter_value("CachedCompile")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
