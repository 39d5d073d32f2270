"""Sparse retrieval stores on real domains, side by side in one run: build time and throughput,
size on disk, load time (with checksum verification), resident memory, and query latency per
sentence at batch 1 (p50/p95) and batch 32:

    python -m benchmarks.retrieval --data /root/ragmt/data/en-de --stores /root/ragmt/stores

Builds `idf-sentence` and `idf-ngram` (default widths) stores for each domain's train split
under --stores, marks the last built one active, and queries them with the dev sentences.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from index_builder.readers import read_moses
from index_builder.store import build_store, load_retriever, set_active

METHODS = ("idf-sentence", "idf-ngram")


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        kb = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
    return kb / 1024


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def _size_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.iterdir()) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--stores", type=Path, default=Path("stores"))
    ap.add_argument("--domains", default="bible,software-docs")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--latency-sentences", type=int, default=200, help="batch-1 queries")
    ap.add_argument("--batch-sentences", type=int, default=500, help="batch-32 queries")
    args = ap.parse_args()
    print(f"machine: {_cpu()}; {os.cpu_count()} cores; k = {args.k}; dev sentences as queries")
    print(
        "\n| domain | method | pairs | items | build s | pairs/s | items/s | disk MiB "
        "| load s | RSS +MiB | b1 p50 ms | b1 p95 ms | b32 ms/sent |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for domain in args.domains.split(","):
        d = args.data / domain
        pairs = read_moses(d / "train.en", d / "train.de")
        dev = (d / "dev.en").read_text(encoding="utf-8").splitlines()
        rows = {}
        for method in METHODS:
            gc.collect()
            t0 = time.perf_counter()
            path = build_store(pairs, domain, method, args.stores)
            build = time.perf_counter() - t0
            set_active(args.stores, domain, path.name)
            manifest = json.loads((path / "manifest.json").read_text())
            gc.collect()
            rss0 = _rss_mib()
            t0 = time.perf_counter()
            r = load_retriever(path)
            load = time.perf_counter() - t0
            r.search(dev[:8], args.k)  # warm-up
            lat = []
            for s in dev[: args.latency_sentences]:
                t1 = time.perf_counter()
                r.search([s], args.k)
                lat.append((time.perf_counter() - t1) * 1000)
            batch = dev[: args.batch_sentences]
            t1 = time.perf_counter()
            for lo in range(0, len(batch), 32):
                r.search(batch[lo : lo + 32], args.k)
            b32 = (time.perf_counter() - t1) / len(batch) * 1000
            rss = _rss_mib() - rss0
            items = manifest["items"]
            rows[method] = (np.percentile(lat, 50), b32)
            print(
                f"| {domain} | {method} | {len(pairs)} | {items} | {build:.1f} "
                f"| {len(pairs) / build:.0f} | {items / build:.0f} | {_size_mib(path):.1f} "
                f"| {load:.2f} | {rss:.0f} | {np.percentile(lat, 50):.2f} "
                f"| {np.percentile(lat, 95):.2f} | {b32:.2f} |",
                flush=True,
            )
            del r
        s, n = rows["idf-sentence"], rows["idf-ngram"]
        print(
            f"| {domain} | ratio ngram/sentence | | | | | | | | | {n[0] / s[0]:.1f}x | "
            f"| {n[1] / s[1]:.1f}x |"
        )


if __name__ == "__main__":
    main()
