"""Retrieval stores on real domains, side by side in one run: build time and throughput (pairs/s,
items/s: n-grams or vectors), size on disk, load time (with checksum verification), resident
memory, recall@10 of approximate FAISS indexes against Flat, and query latency per sentence at
batch 1 (p50/p95) and batch 32, including query encoding for the dense method:

    python -m benchmarks.retrieval --data /root/ragmt/data/en-de --stores /root/ragmt/stores \\
        --model /root/ragmt/runs/base/bundle

Builds `idf-sentence`, `idf-ngram` and `dense-ngram` (Flat) stores for each domain's train
split under --stores, then the approximate dense stores (`--approx`, FACTORY:SEARCH) from the
Flat store's vectors: the same vectors a fresh build makes (same chunks), so only the FAISS
index is rebuilt; their "build s" is the Flat build's (encoding) plus their index time.
Queries are the dev sentences. `--results FILE` appends one "retrieval-benchmark" record per
store row and one "retrieval-recall-sweep" record per search setting (`models.results`).
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from benchmarks._common import machine, pct, run_fields, write_record
from index_builder.readers import read_moses
from index_builder.retrieval.faiss_index import apply_search, build_index, recall_at_k, write_index
from index_builder.store import build_store, load_retriever, open_store, set_active
from models.artifacts import MANIFEST, write_manifest

SPARSE = ("idf-sentence", "idf-ngram")
APPROX = "HNSW32:efSearch=128;IVF1024,PQ64x4fs,RFlat:nprobe=64,k_factor_rf=16"
# Other search settings whose recall@10 and time are measured on the same built index.
SWEEP = {
    "HNSW": ["efSearch=32", "efSearch=64", "efSearch=128", "efSearch=256"],
    "IVF": [
        "nprobe=8,k_factor_rf=4",
        "nprobe=16,k_factor_rf=8",
        "nprobe=32,k_factor_rf=8",
        "nprobe=64,k_factor_rf=16",
    ],
}


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        kb = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
    return kb / 1024


def _size_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.iterdir()) / 2**20


def _sweep(
    index: faiss.Index, vectors: np.ndarray, factory: str, search: str
) -> list[tuple[str, float, float]]:
    """(setting, recall@10, µs per query vector) of `index` under other search settings
    (exact neighbours computed once; the same sample rule as the build's recall)."""
    settings = next((v for k, v in SWEEP.items() if factory.startswith(k)), [])
    if not settings:
        return []
    rng = np.random.default_rng(1)  # recall_at_k's sample for seed 0
    n = len(vectors)
    queries = np.ascontiguousarray(vectors[np.sort(rng.choice(n, min(n, 1000), replace=False))])
    _, exact = faiss.knn(queries, vectors, 10, metric=faiss.METRIC_L2)
    lines = []
    for setting in settings:
        apply_search(index, setting)
        t0 = time.perf_counter()
        _, approx = index.search(queries, 10)
        us = (time.perf_counter() - t0) / len(queries) * 1e6
        recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact, strict=True)])
        lines.append((setting, float(recall), us))
    apply_search(index, search)
    return lines


def _derive_approx(
    flat: Path, factory: str, search: str, notes: list[dict[str, Any]]
) -> tuple[Path, float]:
    """A copy of the Flat dense store with `factory` indexes built from its vectors, recall@10
    measured and recorded as `build_store` does; returns (path, index seconds). Appends the
    recall of other search settings to `notes` (one dict per width and setting)."""
    store = open_store(flat)
    m = dict(store.manifest)
    params = {**m["params"], "factory": factory, "search": search}
    out = flat.parent / f"{flat.name}-{factory.replace(',', '_')}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(flat, out)
    seconds, recall = 0.0, {}
    for w in params["widths"]:
        name = f"w{w}"
        vectors = faiss.read_index(str(flat / f"{name}.faiss"))
        vectors = vectors.reconstruct_n(0, vectors.ntotal)
        t0 = time.perf_counter()
        index = build_index(vectors, factory, search, params["train_sample"], params["seed"])
        seconds += time.perf_counter() - t0
        recall[name], recall[f"queries_{name}"] = recall_at_k(
            index, vectors, params["recall_sample"], params["seed"]
        )
        notes += [
            {"domain": flat.parent.name, "width": w, "index": factory, "search": setting,
             "recall_at_10": recall, "us_per_query_vector": us}
            for setting, recall, us in _sweep(index, vectors, factory, search)
        ]  # fmt: skip
        write_index(index, out / f"{name}.faiss")
        del index, vectors
    n = sum(recall[f"queries_w{w}"] for w in params["widths"])
    recall["all"] = sum(recall[f"w{w}"] * recall[f"queries_w{w}"] for w in params["widths"]) / n
    recall["k"] = 10
    m.pop("files")
    m.update(params=params, faiss_factory=factory, recall_at_10=recall, version=out.name)
    (out / MANIFEST).unlink()
    write_manifest(out, m)
    return out, seconds


def _latency(
    search: Callable[[list[str]], object], dev: list[str], n1: int, n32: int
) -> tuple[list[float], float]:
    search(dev[:8])  # warm-up
    lat = []
    for s in dev[:n1]:
        t1 = time.perf_counter()
        search([s])
        lat.append((time.perf_counter() - t1) * 1000)
    batch = dev[:n32]
    t1 = time.perf_counter()
    for lo in range(0, len(batch), 32):
        search(batch[lo : lo + 32])
    return lat, (time.perf_counter() - t1) / len(batch) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--stores", type=Path, default=Path("stores"))
    ap.add_argument("--model", type=Path, default=None, help="bundle for dense-ngram")
    ap.add_argument("--domains", default="bible,software-docs")
    ap.add_argument("--methods", default="idf-sentence,idf-ngram,dense-ngram")
    ap.add_argument("--approx", default=APPROX, help="FACTORY:SEARCH;... ('' for none)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--limit", type=int, default=0, help="first N train pairs (0: all)")
    ap.add_argument("--latency-sentences", type=int, default=200, help="batch-1 queries")
    ap.add_argument("--batch-sentences", type=int, default=512, help="batch-32 queries")
    ap.add_argument("--flat-sentences", type=int, default=64, help="dense Flat: fewer queries")
    ap.add_argument("--results", type=Path, default=None, help="append a record per row")
    args = ap.parse_args()
    base = run_fields("retrieval-benchmark")
    base["settings"] = {
        "k": args.k, "limit": args.limit or None, "latency_sentences": args.latency_sentences,
        "batch_sentences": args.batch_sentences, "flat_sentences": args.flat_sentences,
        "queries": "dev", "faiss": faiss.__version__, "faiss_threads": faiss.omp_get_max_threads(),
    }  # fmt: skip
    methods = args.methods.split(",")
    approx = [tuple(a.split(":", 1)) for a in args.approx.split(";") if a]
    print(f"machine: {machine()}; faiss {faiss.__version__} ({faiss.omp_get_max_threads()} "
          f"threads); k = {args.k}; dev sentences as queries")  # fmt: skip
    print(
        "\n| domain | method | index | pairs | items | build s | pairs/s | items/s | disk MiB "
        "| load s | RSS +MiB | recall@10 | b1 p50 ms | b1 p95 ms | b32 ms/sent | encode p50 ms |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for domain in args.domains.split(","):
        d = args.data / domain
        pairs = read_moses(d / "train.en", d / "train.de")
        if args.limit:
            pairs = pairs[: args.limit]
        dev = (d / "dev.en").read_text(encoding="utf-8").splitlines()
        builds: list[tuple[str, str, Path, float]] = []
        notes: list[dict[str, Any]] = []
        measured: list[dict[str, Any]] = []
        for method in methods:
            dense = method == "dense-ngram"
            gc.collect()
            t0 = time.perf_counter()
            model = {"model": args.model} if dense else {}
            path = build_store(pairs, domain, method, args.stores, **model)
            build = time.perf_counter() - t0
            set_active(args.stores, domain, path.name)
            builds.append((method, "Flat" if dense else "-", path, build))
            if dense:
                for factory, search in approx:
                    derived, seconds = _derive_approx(path, factory, search, notes)
                    builds.append((method, factory, derived, build + seconds))
        for method, factory, path, build in builds:
            dense = method == "dense-ngram"
            manifest = json.loads((path / "manifest.json").read_text())
            gc.collect()
            rss0 = _rss_mib()
            t0 = time.perf_counter()
            r = load_retriever(path, args.model if dense else None)
            load = time.perf_counter() - t0
            rss = _rss_mib() - rss0
            few = factory == "Flat"
            n1 = min(args.latency_sentences, args.flat_sentences) if few else args.latency_sentences
            n32 = min(args.batch_sentences, args.flat_sentences) if few else args.batch_sentences
            lat, b32 = _latency(lambda qs, r=r: r.search(qs, args.k), dev, n1, n32)
            encode, encode_ms = "-", None
            if dense:
                enc, _ = _latency(lambda qs, r=r: r.query_vectors(qs), dev, n1, 32)
                encode_ms = pct(enc, 50)
                encode = f"{encode_ms:.2f}"
            recall = manifest.get("recall_at_10")
            recall_text = f"{recall['all']:.3f}" if recall else "-"
            items = manifest["items"]
            print(
                f"| {domain} | {method} | {factory} | {len(pairs)} | {items} | {build:.1f} "
                f"| {len(pairs) / build:.0f} | {items / build:.0f} | {_size_mib(path):.1f} "
                f"| {load:.2f} | {rss:.0f} | {recall_text} "
                f"| {pct(lat, 50):.2f} | {pct(lat, 95):.2f} | {b32:.2f} | {encode} |",
                flush=True,
            )
            measured.append({
                "domain": domain, "method": method, "index": None if factory == "-" else factory,
                "search": manifest["params"].get("search") if dense else None,
                "pairs": len(pairs), "items": items, "build_seconds": build,
                "pairs_per_second": len(pairs) / build, "items_per_second": items / build,
                "disk_mib": _size_mib(path), "load_seconds": load, "rss_mib": rss,
                "recall_at_10": recall["all"] if recall else None,
                "b1_p50_ms": pct(lat, 50), "b1_p95_ms": pct(lat, 95),
                "b32_ms_per_sentence": b32, "encode_p50_ms": encode_ms,
                "ratio_to_idf_ngram": None,
            })  # fmt: skip
            del r
        idf = next((r for r in measured if r["method"] == "idf-ngram"), None)
        for row in measured if idf else []:
            if row is not idf:
                p50 = row["b1_p50_ms"] / idf["b1_p50_ms"]
                b32 = row["b32_ms_per_sentence"] / idf["b32_ms_per_sentence"]
                row["ratio_to_idf_ngram"] = {"b1_p50": p50, "b32": b32}
                name = " ".join(x for x in (row["method"], row["index"]) if x)
                print(f"| {domain} | ratio {name} / idf-ngram | | | | | | | | | | "
                      f"| {p50:.1f}x | | {b32:.1f}x | |")  # fmt: skip
        for row in measured:
            write_record(args.results, base, **row)
        for note in notes:
            print(f"    recall sweep, {note['domain']} w{note['width']} {note['index']} "
                  f"{note['search']}: recall@10 {note['recall_at_10']:.3f}, "
                  f"{note['us_per_query_vector']:.0f} us/query vector", flush=True)  # fmt: skip
            write_record(args.results, {**base, "kind": "retrieval-recall-sweep"}, k=10, **note)


if __name__ == "__main__":
    main()
