#!/usr/bin/env python3
"""Writes the torch.optim.AdamW reference of tests/lazy/optim_test.cc (AdamWTracksTorchOptimOnAnMlp).

Run by hand (needs PyTorch; `tools/setup.sh --bench` installs python3-torch), never in CI:
    python3 tests/numerics/make_adamw_reference.py > tests/numerics/adamw_mlp_reference.inc

The weights, inputs and labels are not stored: both sides make them with the same integer generator
(SplitMix64) and exact double arithmetic rounded once to f32, so they are bit-identical in Python and
C++. The file (C++ initializers, included by the test) holds, per step, the training loss of PyTorch f32 (the reference) and of PyTorch f64 (to
show where f32 itself leaves the exact trajectory).
"""
import math
import struct
import sys

import torch

SIZES = [64, 48, 32, 10]
BATCH = 32
STEPS = 120
# beta2 close to 1 makes 1 - beta2^t cancel the most, so an inaccurate bias correction shows in the loss
# within the run (an f32 1 - exp(t ln beta2) leaves this reference at step ~25); PyTorch f32 and f64 stay
# within 1e-4 of each other for all 120 steps.
LR, BETAS, EPS, WEIGHT_DECAY = 1e-2, (0.9, 0.99999), 1e-8, 1e-2
MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self, bound):
        """A double in [-bound, bound): exact until the final multiplication, rounded once."""
        u = (self.next() >> 11) * 2.0**-53
        return (2.0 * u - 1.0) * bound


def parameters():
    rng = SplitMix64(1)
    params = []
    for fan_in, fan_out in zip(SIZES, SIZES[1:]):
        bound = 1.0 / math.sqrt(fan_in)
        w = [[rng.uniform(bound) for _ in range(fan_in)] for _ in range(fan_out)]
        b = [rng.uniform(bound) for _ in range(fan_out)]
        params += [w, b]
    return params


def to_f32(v):
    """v rounded to the nearest f32 (as static_cast<float> in C++)."""
    return struct.unpack("f", struct.pack("f", v))[0]


def teacher():
    rng = SplitMix64(2)
    return [[rng.uniform(1.0) for _ in range(SIZES[0])] for _ in range(SIZES[-1])]


def batch(step, teacher_rows):
    """Inputs (rounded to f32) and labels: the class whose teacher row has the largest dot product."""
    rng = SplitMix64(1000 + step)
    xs, labels = [], []
    for _ in range(BATCH):
        x = [to_f32(rng.uniform(1.0)) for _ in range(SIZES[0])]
        scores = []
        for row in teacher_rows:
            s = 0.0
            for k in range(SIZES[0]):
                s += x[k] * row[k]
            scores.append(s)
        xs.append(x)
        labels.append(max(range(len(scores)), key=lambda c: (scores[c], -c)))
    return xs, labels


def train(dtype, batches, init):
    params = [torch.tensor(p, dtype=torch.float32).to(dtype).requires_grad_() for p in init]
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY)
    losses = []
    for xs, labels in batches:
        h = torch.tensor(xs, dtype=torch.float32).to(dtype)
        for i in range(0, len(params), 2):
            h = h @ params[i].t() + params[i + 1]
            if i + 2 < len(params):
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h, torch.tensor(labels))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    torch.set_num_threads(1)
    init = parameters()
    rows = teacher()
    batches = [batch(step, rows) for step in range(STEPS)]
    f32 = train(torch.float32, batches, init)
    f64 = train(torch.float64, batches, init)
    print(f"// torch {torch.__version__}: MLP {SIZES}, batch {BATCH}, AdamW lr={LR} betas={BETAS} eps={EPS} "
          f"weight_decay={WEIGHT_DECAY}.")
    print("// Made by tests/numerics/make_adamw_reference.py; do not edit. {step, loss torch f32, loss torch f64}")
    for step, (a, b) in enumerate(zip(f32, f64)):
        print(f"{{{step + 1}, {a!r}, {b!r}}},")
    first_apart = next((s + 1 for s, (a, b) in enumerate(zip(f32, f64)) if abs(a - b) > 1e-4 * abs(b)), None)
    print(f"f32 and f64 first differ by more than 1e-4 relative at step {first_apart}", file=sys.stderr)


if __name__ == "__main__":
    main()
