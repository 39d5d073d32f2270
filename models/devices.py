"""Where a model runs: `auto`, `cpu`, `cuda` or `cuda:N`, resolved once, with a clear error.

On CUDA, decoding runs under bf16 autocast when the GPU supports it (fp16 otherwise): matmuls
in half precision, while autocast keeps softmax, layer norm and the log-probabilities that
beam search adds up in float32 — the part where half precision would change the search.
A CPU-only host never touches CUDA: `auto` checks `torch.cuda.is_available()` and stops.
"""

from __future__ import annotations

import re

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
