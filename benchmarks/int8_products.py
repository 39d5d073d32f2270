"""One int8 matrix product in ONNX Runtime with u8, s8 and s7 weights, side by side: the
shape of the served models' output projection (256 x 8,000), quantized per output channel as
`ort-int8` quantizes, at a step's row counts (4 rows: a sentence's beams; 40 and 128: a batch),
one thread, the three timed by turns (`--rounds`, the median kept). s7 is s8 kept to 7 bits,
which AVX2's saturating int16 sums hold exactly. Which weight type is faster depends on the
CPU (`models.ort_decoder.int8_weights` picks by its flags); this shows it on the machine at
hand:

    python -m benchmarks.int8_products [--rows 4,40,128] [--results FILE]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from benchmarks._common import machine, run_fields, write_record
from models.ort_decoder import _export, _Graph, _quantize, int8_weights


def product_graphs(d_in: int, d_out: int) -> dict[str, _Graph]:
    """A float `x @ W` graph quantized with each weight type, on one thread."""
    torch.manual_seed(0)
    linear = nn.Linear(d_in, d_out, bias=False)
    graph = _export(linear, {"x": torch.zeros(2, d_in)}, ["y"], {"x": {0: "rows"}})
    return {kind: _Graph(_quantize(graph, kind), threads=1) for kind in ("u8", "s8", "s7")}


def time_call(graph: _Graph, x: np.ndarray, calls: int) -> float:
    """Mean milliseconds of one call, after a warm-up."""
    for _ in range(5):
        graph.run({"x": x})
    start = time.perf_counter()
    for _ in range(calls):
        graph.run({"x": x})
    return (time.perf_counter() - start) / calls * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="4,40,128")
    ap.add_argument("--d-in", type=int, default=256)
    ap.add_argument("--d-out", type=int, default=8000)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5, help="each weight type timed by turns")
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    base = run_fields("int8-products")
    graphs = product_graphs(args.d_in, args.d_out)
    rng = np.random.default_rng(0)
    print(f"machine: {machine()}; this CPU's default: {int8_weights()} weights")
    print("| rows | u8 ms | s8 ms | s7 ms | s8 / u8 | s7 / u8 |\n|---:|---:|---:|---:|---:|---:|")
    for rows in (int(r) for r in args.rows.split(",")):
        x = rng.standard_normal((rows, args.d_in), dtype=np.float32)
        times: dict[str, list[float]] = {kind: [] for kind in graphs}
        for _ in range(args.rounds):
            for kind, g in graphs.items():
                times[kind].append(time_call(g, x, args.calls))
        ms = {kind: float(np.median(t)) for kind, t in times.items()}
        print(
            f"| {rows} | {ms['u8']:.3f} | {ms['s8']:.3f} | {ms['s7']:.3f} "
            f"| {ms['s8'] / ms['u8']:.2f} | {ms['s7'] / ms['u8']:.2f} |"
        )
        write_record(
            args.results,
            base,
            rows=rows,
            d_in=args.d_in,
            d_out=args.d_out,
            u8_ms=ms["u8"],
            s8_ms=ms["s8"],
            s8_vs_u8=ms["s8"] / ms["u8"],
            s7_ms=ms["s7"],
            s7_vs_u8=ms["s7"] / ms["u8"],
            rounds=args.rounds,
            default_weights=int8_weights(),
        )


if __name__ == "__main__":
    main()
