"""Shared helpers for the benchmarks: the machine they ran on, percentiles."""

from __future__ import annotations

import os
import platform

import numpy as np
import torch


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{cpu}; {os.cpu_count()} cores; torch {torch.__version__} "
        f"({torch.get_num_threads()} threads); {dev}"
    )


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))
