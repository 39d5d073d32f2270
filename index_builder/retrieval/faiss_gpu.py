"""FAISS on the GPU: one resources object per worker process, indexes cloned onto a device.

Only imported when a CUDA device is configured, so a CPU-only host (faiss-cpu, no CUDA)
never reaches these code paths. `StandardGpuResources` holds the GPU's scratch memory and
streams; FAISS wants one per process and device, shared by every index on it, hence the
process-wide table instead of one per index.
"""

from __future__ import annotations

import logging
import threading

import faiss

log = logging.getLogger("ragmt.faiss_gpu")

_lock = threading.Lock()
_resources: dict[int, object] = {}


def has_faiss_gpu() -> bool:
    """Whether this FAISS build has GPU support and sees at least one GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def gpu_resources(device: int) -> object:
    """The process's resources for `device`, created on first use."""
    if not has_faiss_gpu():
        raise RuntimeError(
            "FAISS GPU search was requested but this FAISS build has no GPU support or sees no "
            "GPU: install the `gpu` extra (faiss-gpu) on a CUDA host, or use RAGMT_DEVICE=cpu"
        )
    if not 0 <= device < faiss.get_num_gpus():
        raise RuntimeError(f"GPU {device} requested; FAISS sees {faiss.get_num_gpus()}")
    with _lock:
        if device not in _resources:
            _resources[device] = faiss.StandardGpuResources()
        return _resources[device]


def index_to_gpu(index: faiss.Index, device: int) -> faiss.Index:
    """A GPU copy of a CPU index (Flat, IVF, IVF-PQ; HNSW has no GPU version and stays).

    The copy answers `search` exactly as the CPU index does, up to float rounding; ids and
    -1 padding are the same.
    """
    if isinstance(index, faiss.IndexHNSW) or "HNSW" in type(index).__name__:
        return index  # FAISS has no GPU HNSW: CPU search stays the (fast) path for it
    options = faiss.GpuClonerOptions()
    options.useFloat16 = False  # exact distances; recall@10 was measured in float32
    resources = gpu_resources(device)
    try:
        return faiss.index_cpu_to_gpu(resources, device, index, options)
    except RuntimeError as e:  # e.g. a refine wrapper FAISS cannot clone: the CPU still serves
        log.warning("FAISS index %s stays on the CPU: %s", type(index).__name__, e)
        return index
