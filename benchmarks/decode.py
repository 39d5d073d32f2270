"""Decoding speed of a bundle: sentences/s at batch 32 and latency p50/p95 at batch 1,
greedy and beam 4, measured side by side in one run on the `general` test set, through the
pipeline the service uses (sentences split):
    python -m benchmarks.decode --model models/baseline_bundle --data data/en-de
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from benchmarks._common import machine, pct
from models import pipeline
from models.data import read_lines
from models.translator import DecodeOptions, Translator


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path, default=Path("models/baseline_bundle"))
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--sentences", type=int, default=256, help="for the batch-32 throughput")
    ap.add_argument("--latency-sentences", type=int, default=60, help="for batch-1 latency")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    tr = Translator.from_bundle(args.model, device=args.device)
    src = read_lines(args.data / "general" / "test.en")
    print(f"machine: {machine()}")
    print(f"model: {args.model} on {args.device}; general test sentences")
    pipeline.translate(tr, src[:8], DecodeOptions(beam_size=4))  # warm-up
    rows = {}
    for beam in (1, 4):
        opts = DecodeOptions(beam_size=beam, batch_size=32)
        start = time.perf_counter()
        pipeline.translate(tr, src[: args.sentences], opts)
        throughput = args.sentences / (time.perf_counter() - start)
        lat = []
        for s in src[: args.latency_sentences]:
            t0 = time.perf_counter()
            pipeline.translate(tr, [s], DecodeOptions(beam_size=beam, batch_size=1))
            lat.append((time.perf_counter() - t0) * 1000)
        rows[beam] = (throughput, pct(lat, 50), pct(lat, 95))
        print(
            f"beam {beam}: batch 32 {throughput:6.1f} sentences/s | "
            f"batch 1 p50 {rows[beam][1]:6.1f} ms p95 {rows[beam][2]:6.1f} ms"
        )
    print(f"ratio beam4/greedy throughput: {rows[4][0] / rows[1][0]:.2f}x")
    print(
        f"ratio batch-32 per-sentence time / batch-1 p50 (beam 4): "
        f"{(1000 / rows[4][0]) / rows[4][1]:.2f}x"
    )


if __name__ == "__main__":
    main()
