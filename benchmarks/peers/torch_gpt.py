#!/usr/bin/env python3
"""examples/train_gpt's character-level GPT in PyTorch, eager (f32, or bf16 under torch.autocast) or
on Lazy Tensor Core (torch._lazy with its TorchScript backend), on the same text, batches, initial
weights, schedule and clipping: this file reproduces lazy/text_dataset.cc (the corpus, its 90/10 split
by document and the splitmix windows), examples/gpt.cc (the model and its splitmix initial weights)
and train_gpt's training step. The last stdout line is one JSON object, as train_gpt prints.

  torch_gpt.py --backend eager|lazy [--data FILE|DIR] [--steps N] [--warmup N] [--layers N] [--heads N]
               [--width N] [--context N] [--batch N] [--lr X] [--seed N] [--dtype f32|bf16] [--threads N]
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from torch_peer import peer_device, splitmix, uniform

VALIDATION_EVERY = 10


def documents(text):
    """Fortunes (separated by lines holding only '%'), or else paragraphs."""
    lines = text.split(b"\n")
    if text.endswith(b"\n"):
        lines.pop()
    fortunes = b"%" in lines
    docs, doc = [], b""
    for line in lines:
        separator = line == b"%" if fortunes else line.strip(b" \t\r") == b""
        if separator:
            if doc:
                docs.append(doc)
            doc = b""
        else:
            doc += line + b"\n"
    if doc:
        docs.append(doc)
    return docs


def load_corpus(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.endswith(".dat"))
        files = [os.path.join(path, n) for n in names
                 if os.path.isfile(os.path.join(path, n)) and not os.path.islink(os.path.join(path, n))]
    else:
        files = [path]
    train, val, index = [], [], 0
    for name in files:
        with open(name, "rb") as f:
            for doc in documents(f.read()):
                index += 1
                (val if index % VALIDATION_EVERY == 0 else train).append(doc + b"%\n")
    train, val = b"".join(train), b"".join(val)
    vocab = sorted(set(train) | set(val))
    table = np.zeros(256, dtype=np.int64)
    table[vocab] = np.arange(len(vocab))
    return len(vocab), table[np.frombuffer(train, dtype=np.uint8)], table[np.frombuffer(val, dtype=np.uint8)]


def training_windows(tokens, batch, context, seed, step):
    rows = np.arange(step * batch, (step + 1) * batch, dtype=np.uint64)
    starts = (splitmix(seed, rows) % np.uint64(len(tokens) - context)).astype(np.int64)
    idx = starts[:, None] + np.arange(context)[None, :]
    return tokens[idx], tokens[idx + 1]


def validation_windows(tokens, batch, context, count, b):
    """lazy/text_dataset.cc's ValidationWindows: `count` windows spread evenly over the tokens."""
    last_start = len(tokens) - context - 1
    w = np.arange(b * batch, (b + 1) * batch)
    starts = last_start * w // (count - 1) if count > 1 else np.zeros(batch, dtype=np.int64)
    idx = starts[:, None] + np.arange(context)[None, :]
    return tokens[idx], tokens[idx + 1]


class Gpt(torch.nn.Module):
    """examples/gpt.cc's model; parameters registered and initialised in its order."""

    def __init__(self, vocab, layers, heads, width, context, seed, device):
        super().__init__()
        # Parameters are made on the device: Module.to() would replace them for a lazy device, and the
        # references kept below would go stale.
        self.device = device
        self.heads, self.width = heads, width
        self.count = 0
        self.seed = seed
        stddev, residual = 0.02, 0.02 / math.sqrt(2 * layers)
        self.tok_emb = self.add([vocab, width], stddev)
        self.pos_emb = self.add([context, width], stddev)
        self.blocks = []
        for _ in range(layers):
            b = {}
            b["ln1_w"], b["ln1_b"] = self.add([width], 0, 1), self.add([width], 0, 0)
            b["qkv_w"], b["qkv_b"] = self.add([3 * width, width], stddev), self.add([3 * width], 0, 0)
            b["proj_w"], b["proj_b"] = self.add([width, width], residual), self.add([width], 0, 0)
            b["ln2_w"], b["ln2_b"] = self.add([width], 0, 1), self.add([width], 0, 0)
            b["fc_w"], b["fc_b"] = self.add([4 * width, width], stddev), self.add([4 * width], 0, 0)
            b["fc_proj_w"], b["fc_proj_b"] = self.add([width, 4 * width], residual), self.add([width], 0, 0)
            self.blocks.append(b)
        self.lnf_w, self.lnf_b = self.add([width], 0, 1), self.add([width], 0, 0)
        self.head_w = self.add([vocab, width], stddev)

    def add(self, dims, stddev, constant=0.0):
        n = int(np.prod(dims))
        if stddev > 0:
            values = uniform(n, stddev * math.sqrt(3.0), self.seed * 1000 + self.count)
        else:
            values = np.full(n, constant, dtype=np.float32)
        p = torch.nn.Parameter(torch.from_numpy(values.reshape(dims)).to(self.device))
        self.register_parameter(f"p{self.count}", p)
        self.count += 1
        return p

    def forward(self, tokens):
        batch, time_ = tokens.shape
        c, h = self.width, self.heads
        d = c // h
        causal = torch.ones(time_, time_, dtype=torch.bool, device=tokens.device).tril()
        x = F.embedding(tokens, self.tok_emb) + self.pos_emb[:time_]
        for b in self.blocks:
            y = F.layer_norm(x, [c], b["ln1_w"], b["ln1_b"])
            qkv = F.linear(y, b["qkv_w"], b["qkv_b"])
            q, k, v = (qkv[..., i * c:(i + 1) * c].reshape(batch, time_, h, d).permute(0, 2, 1, 3) for i in range(3))
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
            scores = scores.masked_fill(~causal, float("-inf"))
            y = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(batch, time_, c)
            x = x + F.linear(y, b["proj_w"], b["proj_b"])
            y = F.gelu(F.linear(F.layer_norm(x, [c], b["ln2_w"], b["ln2_b"]), b["fc_w"], b["fc_b"]))
            x = x + F.linear(y, b["fc_proj_w"], b["fc_proj_b"])
        return F.linear(F.layer_norm(x, [c], self.lnf_w, self.lnf_b), self.head_w)


def learning_rate(lr, steps, s):
    """train_gpt's LearningRate."""
    warmup = max(1, min(100, steps // 10))
    if s < warmup:
        return lr * (s + 1) / warmup
    progress = (s - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["eager", "lazy"], required=True)
    parser.add_argument("--data", default="/usr/share/games/fortunes")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eval-batches", type=int, default=4)
    args = parser.parse_args()
    if args.warmup + 1 >= args.steps:
        parser.error("--steps must exceed --warmup + 1")
    if args.width % args.heads:
        parser.error("--heads must divide --width")

    lazy = args.backend == "lazy"
    device = peer_device(args.backend, args.threads)

    vocab, train, val = load_corpus(args.data)
    model = Gpt(vocab, args.layers, args.heads, args.width, args.context, args.seed, device)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=args.weight_decay)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    step_ms, losses = [], []
    for step in range(args.steps):
        start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(args.lr, args.steps, step)
        inputs, targets = training_windows(train, args.batch, args.context, args.seed, step)
        x = torch.from_numpy(inputs).to(device, copy=True)
        y = torch.from_numpy(targets).to(device, copy=True)
        optimizer.zero_grad()
        with autocast:
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, args.clip)
        optimizer.step()
        if lazy:
            torch._lazy.mark_step()
        losses.append(loss.detach())
        if step == 0:
            losses[0] = losses[0].item()  # the first step ends when its result is ready
        step_ms.append((time.perf_counter() - start) * 1e3)
    losses = [float(l) for l in losses]
    if lazy:
        torch._lazy.wait_device_ops()

    # train_gpt's final validation loss: the mean over --eval-batches batches of fixed windows.
    with torch.no_grad(), autocast:
        val_losses = []
        for b in range(args.eval_batches):
            inputs, targets = validation_windows(val, args.batch, args.context, args.batch * args.eval_batches, b)
            logits = model(torch.from_numpy(inputs).to(device)).float()
            val_losses.append(F.cross_entropy(logits.reshape(-1, vocab), torch.from_numpy(targets).to(device).reshape(-1)))
        val_loss = float(sum(v.item() for v in val_losses) / args.eval_batches)

    steady = statistics.median(step_ms[1 + args.warmup:])
    result = {
        "peer": ("torch-ltc" if lazy else "pytorch") + ("-bf16" if args.dtype == "bf16" else ""),
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "first_step_ms": round(step_ms[0], 3),
        "steady_step_ms": round(steady, 4),
        "tokens_per_s": round(args.batch * args.context / steady * 1e3),
        "losses_first10": losses[:10],
        "final_loss": losses[-1],
        "val_loss": val_loss,
        "vocab": vocab,
        "torch": torch.__version__,
    }
    for s in (1, 10, 100):
        if s <= args.steps:
            result[f"loss_step{s}"] = losses[s - 1]
    if lazy:
        result["ltc_compiles"] = torch._lazy.metrics.counter_value("UncachedCompile")
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
