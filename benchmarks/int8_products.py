"""One int8 matrix product in ONNX Runtime with u8, s8 and s7 weights, side by side: the
shape of the served models' output projection (256 x 8,000), quantized per output channel as
`ort-int8` quantizes, at a step's row counts (4 rows: a sentence's beams; 40 and 128: a batch),
one thread, the three timed by turns (`--rounds`, the median kept). s7 is s8 kept to 7 bits,
which AVX2's saturating int16 sums hold exactly. Which weight type is faster depends on the
CPU (`models.ort_decoder.int8_weights` picks by its flags); this shows it on the machine at
hand. Beside them, the native library's product (`models.native_step.Int8Linear`, what
`native-int8` decodes with: activations quantized per row, this build's kernels), where a
compiler builds it:

    python -m benchmarks.int8_products [--rows 4,40,128] [--results FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks._common import machine, run_fields, write_record
from models import native_step
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


class NativeProduct:
    """The same product by the native library, into an output allocated once (as the native
    step's buffers are), timed like a graph."""

    def __init__(self, d_in: int, d_out: int) -> None:
        torch.manual_seed(0)
        weight = nn.Linear(d_in, d_out, bias=False).weight.detach().numpy()
        self.linear = native_step.Int8Linear(weight, None, native_step.weight_limit())
        self.lib, self.out = native_step.library(), np.empty(0, dtype=np.float32)

    def run(self, feed: dict[str, np.ndarray]) -> None:
        x = np.ascontiguousarray(feed["x"], dtype=np.float32)
        if self.out.size < x.shape[0] * self.linear.struct.n:
            self.out = np.empty(x.shape[0] * self.linear.struct.n, dtype=np.float32)
        self.lib.ragmt_qlinear(
            ctypes.byref(self.linear.struct), x.ctypes.data, x.shape[0], self.out.ctypes.data
        )


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
    graphs: dict[str, Any] = dict(product_graphs(args.d_in, args.d_out))
    native, why = native_step.available()
    if native:
        graphs["native"] = NativeProduct(args.d_in, args.d_out)
    else:
        print(f"native product left out: {why}")
    rng = np.random.default_rng(0)
    print(f"machine: {machine()}; this CPU's default: {int8_weights()} weights")
    print(
        "| rows | u8 ms | s8 ms | s7 ms | native ms | s8 / u8 | s7 / u8 | native / this CPU's "
        "default |\n|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    for rows in (int(r) for r in args.rows.split(",")):
        x = rng.standard_normal((rows, args.d_in), dtype=np.float32)
        times: dict[str, list[float]] = {kind: [] for kind in graphs}
        for _ in range(args.rounds):
            for kind, g in graphs.items():
                times[kind].append(time_call(g, x, args.calls))
        ms = {kind: float(np.median(t)) for kind, t in times.items()}
        nat = ms.get("native", float("nan"))
        print(
            f"| {rows} | {ms['u8']:.3f} | {ms['s8']:.3f} | {ms['s7']:.3f} | {nat:.3f} "
            f"| {ms['s8'] / ms['u8']:.2f} | {ms['s7'] / ms['u8']:.2f} "
            f"| {nat / ms[int8_weights()]:.2f} |"
        )
        extra = {}
        if native:
            extra = {
                "native_ms": nat,
                "native_vs_default": nat / ms[int8_weights()],
                "native_isa": native_step.isa(),
            }
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
            **extra,
        )


if __name__ == "__main__":
    main()
