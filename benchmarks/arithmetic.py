"""How much arithmetic each served decoder does per sentence, and how fast it does it: the
multiply-adds that the native library counts (weight products and attention) beside the wall
time, for the baseline, the memory model without a store and with retrieval (all
`native-int8`), and the time of CTranslate2 int8 on the baseline's weights. One thread, beam 4,
one domain's test sentences; every system timed in each of `--rounds` rounds, by turns, and the
median round kept:

    python -m benchmarks.arithmetic --data data/en-de --stores STORES --domain medical \
        [--rounds 3] [--results FILE]

Why: issue 35's goals compare the memory model with retrieval against CTranslate2 int8 on the
baseline, a model that does less arithmetic. A time ratio is the ratio of the arithmetic times
the ratio of the rates it runs at; this prints both, so what a goal needs of either is plain.
CTranslate2 is taken to do the arithmetic of ragmt's baseline (the same weights and beam search;
their outputs differ on about 1 of 200 sentences), so its rate is that count over its time.
The rate is set against the native product's own, timed alone on the output projection's shape
(`--peak-rows` rows) in each round, the most this build's kernels do.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._common import decode_arguments, machine, run_fields, write_record
from benchmarks.cpu_decode import BEAM, CT2System, ragmt_system
from benchmarks.int8_products import NativeProduct, time_call
from index_builder.retrieval.serving import retrieve_with
from index_builder.store import load_retriever, open_store
from models import native_step
from models.bundle import load_bundle
from models.data import read_lines
from models.translator import Translator

CT2 = "CTranslate2 int8"
BASELINE = "ragmt baseline native-int8"
ALONE = "ragmt memory model native-int8, no store"
RETRIEVAL = "ragmt memory model native-int8 + retrieval"


class Timed:
    """A retrieval function that adds up the seconds spent in it."""

    def __init__(self, retrieve: Callable[..., Any]) -> None:
        self.retrieve, self.seconds = retrieve, 0.0

    def __call__(self, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.retrieve(*args)
        finally:
            self.seconds += time.perf_counter() - start


def peak_rate(product: NativeProduct, rows: int, calls: int = 30) -> float:
    """Multiply-adds a second of the native int8 product alone on `rows` rows
    (`benchmarks.int8_products`' product)."""
    d_in, d_out = product.linear.struct.k, product.linear.struct.n
    x = np.random.default_rng(0).standard_normal((rows, d_in)).astype(np.float32)
    return rows * d_in * d_out / (time_call(product, x, calls) / 1000)  # type: ignore[arg-type]


def one_pass(
    run: Callable[[list[str], int], Any], batch: list[str], latency: list[str], ragmt: bool
) -> dict[str, float]:
    """Seconds a sentence at batch 32 and at batch 1, and the multiply-adds a sentence at batch
    32 (ragmt only: CTranslate2's are not counted)."""
    before = native_step.counts() if ragmt else (0, 0)
    start = time.perf_counter()
    run(batch, 32)
    batch_s = (time.perf_counter() - start) / len(batch)
    after = native_step.counts() if ragmt else (0, 0)
    start = time.perf_counter()
    for s in latency:
        run([s], 1)
    single_s = (time.perf_counter() - start) / len(latency)
    return {
        "ms_batch32": batch_s * 1000,
        "ms_batch1": single_s * 1000,
        "product_macs": (after[0] - before[0]) / len(batch),
        "attention_macs": (after[1] - before[1]) / len(batch),
    }


def main() -> None:
    ap = decode_arguments(__doc__, stores_required=True)
    ap.add_argument("--batch-sentences", type=int, default=256)
    ap.add_argument("--latency-sentences", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peak-rows", type=int, default=128)
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    usable, why = native_step.available()
    if not usable:
        raise SystemExit(f"the native library is needed to count the arithmetic: {why}")
    fields = run_fields("arithmetic")
    torch.set_num_threads(1)
    sentences = [s for s in read_lines(args.data / args.domain / "test.en") if s.strip()]
    batch, latency = sentences[: args.batch_sentences], sentences[: args.latency_sentences]

    memory_bundle = load_bundle(args.model)
    memory = Translator.from_loaded(memory_bundle, "native-int8")
    store = open_store(args.stores / args.domain)
    search = Timed(retrieve_with(memory, load_retriever(store, None)))
    baseline = Translator.from_bundle(args.baseline, quantize="native-int8")
    runs: dict[str, tuple[Callable[[list[str], int], Any], bool]] = {
        BASELINE: (ragmt_system(baseline), True),
        ALONE: (ragmt_system(memory), True),
        RETRIEVAL: (ragmt_system(memory, search), True),
    }
    try:
        from benchmarks import ctranslate2_model as ct2
    except ImportError as e:
        print(f"{CT2} left out: {e}")
        ct2 = None
    with tempfile.TemporaryDirectory(prefix="ragmt-arithmetic-") as tmp:
        if ct2 is not None:
            model_dir = ct2.convert(args.baseline, Path(tmp) / "ct2")
            runs[CT2] = (CT2System(ct2.CT2Translator, model_dir, "int8"), False)
        print(f"machine: {machine()}; native library {native_step.isa()}, one thread")
        print(
            f"{args.domain} test: {len(batch)} sentences at batch 32, {len(latency)} one at a "
            f"time; beam {BEAM}; {args.rounds} rounds, each system by turns"
        )
        for run, _ in runs.values():
            run(batch[:8], 4)  # warm-up
        passes: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
        search_ms, peaks = [], []
        product = NativeProduct(256, 8000)  # the output projection's shape
        for r in range(args.rounds):
            peaks.append(peak_rate(product, args.peak_rows))
            names = list(runs)
            names = names[r % len(names) :] + names[: r % len(names)]  # a new order each round
            for name in names:
                search.seconds = 0.0
                run, ragmt = runs[name]
                passes[name].append(one_pass(run, batch, latency, ragmt))
                if name == RETRIEVAL:
                    search_ms.append(search.seconds * 1000 / (len(batch) + len(latency)))
        peak = statistics.median(peaks)
        rows = summarise(passes, peak)
    print(f"\nnative int8 product alone, {args.peak_rows} x 256 x 8000: {peak / 1e9:.0f} GMAC/s")
    print(f"the IDF n-gram search inside the retrieval rows: {statistics.median(search_ms):.2f} ms")
    report(rows, peak)
    for name, row in rows.items():
        write_record(
            args.results,
            fields,
            system=name,
            domain=args.domain,
            beam=BEAM,
            threads=1,
            rounds=args.rounds,
            batch_sentences=len(batch),
            latency_sentences=len(latency),
            native_isa=native_step.isa(),
            peak_macs_per_s=peak,
            search_ms=statistics.median(search_ms) if name == RETRIEVAL else None,
            **row,
        )


def summarise(
    passes: dict[str, list[dict[str, float]]], peak: float
) -> dict[str, dict[str, float]]:
    """Each system's median round, with CTranslate2's arithmetic taken as the baseline's: the
    multiply-adds a sentence in millions, the rates in billions a second at both batch sizes,
    and the ratios the report prints (to the model alone and to CTranslate2)."""
    rows: dict[str, dict[str, float]] = {}
    for name, ps in passes.items():
        rows[name] = {key: statistics.median(p[key] for p in ps) for key in ps[0]}
    if CT2 in rows:
        for key in ("product_macs", "attention_macs"):
            rows[CT2][key] = rows[BASELINE][key]
    for row in rows.values():
        macs = row["product_macs"] + row["attention_macs"]
        row["macs_m"] = macs / 1e6
        row["gmacs_batch32"] = macs / row["ms_batch32"] / 1e6
        row["gmacs_batch1"] = macs / row["ms_batch1"] / 1e6
        row["share_of_peak_batch32"] = row["gmacs_batch32"] * 1e9 / peak
    for name, row in rows.items():
        for ref, tag in ((rows[ALONE], "alone"), (rows.get(CT2), "ct2")):
            if ref is None or name == (ALONE if tag == "alone" else CT2):
                continue
            row[f"time_batch32_vs_{tag}"] = row["ms_batch32"] / ref["ms_batch32"]
            row[f"time_batch1_vs_{tag}"] = row["ms_batch1"] / ref["ms_batch1"]
            row[f"macs_vs_{tag}"] = row["macs_m"] / ref["macs_m"]
            row[f"rate_batch32_vs_{tag}"] = row["gmacs_batch32"] / ref["gmacs_batch32"]
        if CT2 in rows and name != CT2:
            # the rate at which this arithmetic would take CTranslate2's time, of the peak
            need = row["macs_vs_ct2"] * rows[CT2]["gmacs_batch32"]
            row["ct2_time_needs_gmacs"] = need
            row["ct2_time_needs_share_of_peak"] = need * 1e9 / peak
    return rows


def report(rows: dict[str, dict[str, float]], peak: float) -> None:
    print(
        "\n| system | M multiply-adds a sentence (products + attention) | ms a sentence, "
        "batch 32 | GMAC/s | share of the product's peak | ms a sentence, batch 1 | GMAC/s |"
        "\n|---|---:|---:|---:|---:|---:|---:|"
    )
    for name, r in rows.items():
        counted = f"{r['macs_m']:.0f} ({r['product_macs'] / 1e6:.0f} + "
        counted += f"{r['attention_macs'] / 1e6:.0f})" + (" as the baseline" if name == CT2 else "")
        print(
            f"| {name} | {counted} | {r['ms_batch32']:.2f} | {r['gmacs_batch32']:.0f} | "
            f"{r['share_of_peak_batch32']:.2f} | {r['ms_batch1']:.2f} | {r['gmacs_batch1']:.0f} |"
        )
    ret = rows[RETRIEVAL]
    print(
        f"\nretrieval against the model alone: time {ret['time_batch32_vs_alone']:.2f}x at batch "
        f"32 and {ret['time_batch1_vs_alone']:.2f}x at batch 1; arithmetic "
        f"{ret['macs_vs_alone']:.2f}x (goal for the time: 1.2x)"
    )
    if CT2 in rows:
        print(
            f"memory model with retrieval against {CT2}: time {ret['time_batch32_vs_ct2']:.2f}x "
            f"at batch 32 (goal: at most 1.0x) and {ret['time_batch1_vs_ct2']:.2f}x at batch 1 "
            f"(mean, not p50); arithmetic {ret['macs_vs_ct2']:.2f}x; rate "
            f"{ret['rate_batch32_vs_ct2']:.2f}x CTranslate2's at batch 32"
        )
        print(
            "CTranslate2's throughput with this arithmetic needs "
            f"{ret['ct2_time_needs_gmacs']:.0f} GMAC/s at batch 32: "
            f"{ret['ct2_time_needs_share_of_peak']:.2f} of the product's peak"
        )


if __name__ == "__main__":
    main()
