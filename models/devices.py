"""Where a model runs: `auto`, `cpu`, `cuda` or `cuda:N`, resolved once, with a clear error.

On CUDA, decoding runs under bf16 autocast when the GPU supports it (fp16 otherwise): matmuls
in half precision, while autocast keeps softmax, layer norm and the log-probabilities that
beam search adds up in float32 — the part where half precision would change the search.
A CPU-only host never touches CUDA: `auto` checks `torch.cuda.is_available()` and stops.
"""

from __future__ import annotations

import re
import time

import torch

_SPEC = re.compile(r"auto|cpu|cuda(:\d+)?")


def resolve_device(spec: str) -> torch.device:
    """The torch device for a setting; ValueError naming the problem when it cannot be used."""
    if not _SPEC.fullmatch(spec):
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {spec!r}")
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {spec!r} requested but CUDA is not available on this host")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {spec!r}: this host has {torch.cuda.device_count()} CUDA device(s)"
            )
    return device


def decode_autocast_dtype(device: torch.device) -> torch.dtype | None:
    """Half-precision type for decoding on `device`; None: run in float32 (CPU)."""
    if device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def cpu_bf16_speedup(size: int = 256, reps: int = 3) -> float:
    """fp32 time / bf16 time of a `size`-square matmul on the CPU, measured now.

    Why measured: on a CPU without native bf16 (AVX2 only) a bf16 matmul runs 10-100x slower
    than fp32, so bf16 autocast would stall training; with AVX-512 bf16 or AMX it is faster.
    Asking the hardware is more reliable than reading CPU flags across torch builds.
    """
    a, b = torch.randn(size, size), torch.randn(size, size)
    times = {}
    for dtype in (torch.float32, torch.bfloat16):
        x, y = a.to(dtype), b.to(dtype)
        x @ y  # warm-up
        start = time.perf_counter()
        for _ in range(reps):
            x @ y
        times[dtype] = time.perf_counter() - start
    return times[torch.float32] / max(times[torch.bfloat16], 1e-9)
