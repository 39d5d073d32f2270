"""CUDA against CPU in one run: decoding (beam 4, batch 32 and batch 1) and FAISS search.

    bash benchmarks/gpu.sh            # on a machine with a GPU; writes docs/gpu-benchmarks.md
    python -m benchmarks.gpu --model models/baseline_bundle --data data/en-de

Decoding uses the same sentences on both devices (CUDA under the service's autocast, see
models.devices). FAISS compares a Flat and an IVF index on CPU and GPU over vectors of the
dense store's shape (random when no store is given: search time depends on sizes, not values).
Without CUDA it says so and exits 2: there is nothing to compare.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks._common import machine, pct
from models import pipeline
from models.data import read_lines
from models.translator import DecodeOptions, Translator


def _decode(tr: Translator, src: list[str], sync) -> tuple[float, float, float]:
    pipeline.translate(tr, src[:8], DecodeOptions(beam_size=4))  # warm-up (CUDA kernels, allocator)
    sync()
    start = time.perf_counter()
    pipeline.translate(tr, src, DecodeOptions(beam_size=4, batch_size=32))
    sync()
    throughput = len(src) / (time.perf_counter() - start)
    lat = []
    for s in src[:40]:
        t0 = time.perf_counter()
        pipeline.translate(tr, [s], DecodeOptions(beam_size=4, batch_size=1))
        sync()
        lat.append((time.perf_counter() - t0) * 1000)
    return throughput, pct(lat, 50), pct(lat, 95)


def _faiss(n: int, dim: int, queries: int) -> list[tuple[str, float, float]]:
    import faiss

    from index_builder.retrieval.faiss_gpu import has_faiss_gpu, index_to_gpu

    rng = np.random.default_rng(0)
    xb = rng.standard_normal((n, dim)).astype("float32")
    xq = rng.standard_normal((queries, dim)).astype("float32")
    rows = []
    for factory in ("Flat", "IVF1024,Flat"):
        index = faiss.index_factory(dim, factory)
        index.train(xb[: min(n, 100_000)])
        index.add(xb)
        if hasattr(index, "nprobe"):
            index.nprobe = 32
        timings = []
        for idx in (index, index_to_gpu(index, 0) if has_faiss_gpu() else None):
            if idx is None:
                timings.append(float("nan"))
                continue
            idx.search(xq[:10], 10)  # warm-up
            t0 = time.perf_counter()
            idx.search(xq, 10)
            timings.append((time.perf_counter() - t0) * 1000 / queries)
        rows.append((factory, timings[0], timings[1]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path, default=Path("models/baseline_bundle"))
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--sentences", type=int, default=512)
    ap.add_argument("--vectors", type=int, default=500_000, help="FAISS corpus n-grams")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to compare (run this on a GPU machine)")
        sys.exit(2)
    src = read_lines(args.data / "general" / "test.en")[: args.sentences]
    cpu = _decode(Translator.from_bundle(args.model, "cpu"), src, lambda: None)
    gpu = _decode(Translator.from_bundle(args.model, "cuda"), src, torch.cuda.synchronize)
    print(f"decoding {args.model}, beam 4, {len(src)} general test sentences")
    print("| device | batch 32 sent/s | batch 1 p50 ms | batch 1 p95 ms |")
    print("|---|---:|---:|---:|")
    for name, (tp, p50, p95) in (("cpu", cpu), ("cuda", gpu)):
        print(f"| {name} | {tp:.1f} | {p50:.1f} | {p95:.1f} |")
    print(f"ratio cuda/cpu: throughput {gpu[0] / cpu[0]:.1f}x, batch-1 p50 {cpu[1] / gpu[1]:.1f}x")
    dim = Translator.from_bundle(args.model, "cpu").model.config.d_model
    print(f"\nFAISS search, {args.vectors} vectors of dimension {dim}, k=10, 1000 queries")
    print("| index | cpu ms/query | gpu ms/query | speed-up |")
    print("|---|---:|---:|---:|")
    for factory, c, g in _faiss(args.vectors, dim, 1000):
        print(f"| {factory} | {c:.3f} | {g:.3f} | {c / g:.1f}x |")


if __name__ == "__main__":
    main()
