"""What the PyTorch peers (torch_mlp.py, torch_gpt.py) share: the splitmix numbers of lazy/splitmix.h,
and the device of a backend."""
import importlib

import numpy as np
import torch


def splitmix(seed, index):
    """lazy/splitmix.h's Draw for an array of indices (uint64 arithmetic wraps as in C++)."""
    with np.errstate(over="ignore"):
        golden = np.uint64(0x9E3779B97F4A7C15)
        z = np.uint64(seed) * np.uint64(1 << 32) + index.astype(np.uint64) * golden + golden
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniform(n, bound, seed):
    """lazy/splitmix.h's Uniform: 24 random bits each, to [-bound, bound), in f32."""
    u = (splitmix(seed, np.arange(n, dtype=np.uint64)) >> np.uint64(40)).astype(np.float64) / 16777216.0
    return (bound * (2 * u - 1)).astype(np.float32)


def peer_device(backend, threads):
    """torch's CPU device for "eager"; for "lazy", Lazy Tensor Core with its TorchScript backend."""
    torch.set_num_threads(threads)
    if backend != "lazy":
        return torch.device("cpu")
    # Imported here, not at the top: the eager peer must run on a torch without Lazy Tensor Core.
    for module in ("torch._lazy", "torch._lazy.metrics", "torch._lazy.ts_backend"):
        importlib.import_module(module)
    torch._lazy.ts_backend.init()
    return torch.device("lazy")
