"""Resident memory per model bundle the service loads: the process's RSS before and after each
bundle, beside the bundle's weights on disk, in one run (Linux: read from /proc).

    python -m benchmarks.model_memory                       # the committed bundles
    python -m benchmarks.model_memory --models-dir DIR      # and every bundle in DIR
    python -m benchmarks.model_memory --quantize auto       # as the service decodes by default

`--results FILE` appends one "model-memory" record per bundle loaded (`models.results`).

A loaded bundle should cost about its float32 weights (4 bytes a parameter) and no second copy
(`--quantize none`, the default here): the ratio column is RSS added over float32 weight bytes.
Another `--quantize` adds what that decoding path holds besides (int8 copies, ONNX Runtime's
graphs and sessions). The first translation is included, so that sessions made lazily count.
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path

import torch

from benchmarks._common import machine, run_fields, write_record
from index_builder.retrieval.encoder import bundle_sha256
from models.bundle import WEIGHTS_FILE
from models.translator import COMMITTED_BUNDLES
from service.registry import ModelRegistry, bundle_dirs


def rss_mib() -> float:
    """This process's resident set size in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status (Linux only)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models-dir", type=Path, default=None)
    ap.add_argument("--results", type=Path, help="append one record per bundle loaded here")
    ap.add_argument("--quantize", default="none", help="as RAGMT_QUANTIZE (models.quantize)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = run_fields("model-memory")
    paths = [*COMMITTED_BUNDLES, *bundle_dirs(args.models_dir)]
    registry = ModelRegistry("cpu", args.quantize)
    print(f"machine: {machine()}; torch {torch.__version__}; quantize {args.quantize}")
    gc.collect()
    start = before = rss_mib()
    print(f"RSS before any bundle: {start:.1f} MiB (python, torch, the service's imports)\n")
    print("| bundle | parameters | weights on disk MiB | float32 MiB | RSS added MiB | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    # The first bundle is loaded again at the end under another name: the first load also pays
    # one-time costs (SentencePiece, torch's lazy initialisation, allocator arenas).
    for i, path in enumerate([*paths, paths[0]]):
        name = path.name if i < len(paths) else f"{path.name} (again)"
        loaded = registry.load(path, name=name)
        loaded.translator.translate(["Save the file."])  # sessions and caches made on first use
        gc.collect()
        after = rss_mib()
        params = sum(p.numel() for p in loaded.translator.model.parameters())
        fp32 = params * 4 / 2**20
        disk = (path / WEIGHTS_FILE).stat().st_size / 2**20
        print(
            f"| {name} | {params:,} | {disk:.1f} | {fp32:.1f} | {after - before:.1f} "
            f"| {(after - before) / fp32:.2f}x |"
        )
        write_record(
            args.results,
            base,
            bundle={"name": name, "sha256": bundle_sha256(loaded.manifest)},
            order=i,
            parameters=params,
            disk_mib=round(disk, 1),
            fp32_mib=round(fp32, 1),
            rss_added_mib=round(after - before, 1),
            ratio=round((after - before) / fp32, 2),
            quantize=loaded.quantize,
        )
        before = after
    total, n = before - start, len(paths) + 1
    print(f"\n{n} bundles loaded: {total:.1f} MiB RSS added, {total / n:.1f} MiB each")


if __name__ == "__main__":
    main()
