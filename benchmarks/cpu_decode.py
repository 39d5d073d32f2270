"""CPU decoding side by side in one run: ragmt's float, int8, ONNX Runtime int8 and native-int8
(ONNX Runtime's encoders and a C++ decoding step; the default where it builds) decoders, the
memory model with and without retrieval, and CTranslate2 (float32 and int8) converting the
baseline's own weights, at beam 4 on one domain's test sentences, with 1 and 2 torch/CTranslate2
threads:

    python -m benchmarks.cpu_decode --data data/en-de --stores STORES --domain medical \
        [--results FILE] [--only SYSTEM ...]

Batch 1: latency p50/p95 of one sentence at a time (what a user of the service waits). Batch
32: target tokens per second (SentencePiece pieces of the outputs, the same count for every
system). Every ragmt system translates through the pipeline (`models.pipeline`) the service
uses; the memory model with retrieval includes the retrieval time. Ratios are printed against
CTranslate2 int8 at its best with the threads given (one batch on all of them, or a batch per
thread; the issue's goal: the memory model with retrieval within 1.5x at batch 1 and
at least 1.0x its throughput at batch 32) and against ragmt's float path. CTranslate2 rows need
the `bench` extra (`pip install -e '.[bench]'`); without it they are left out, saying so.
`--only` times a few systems with the rest let go first: every model loaded in the process
slows the others (here the memory model with retrieval's batch of 32 by up to 40%, and
CTranslate2 too), so a comparison of two systems is fairest with only those two loaded.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import (
    decode_arguments,
    int8_weights_as,
    machine,
    pct,
    run_fields,
    write_record,
)
from index_builder.retrieval.serving import retrieve_with, store_encoder
from index_builder.store import load_retriever, open_store
from models import native_step, pipeline
from models.bundle import load_bundle
from models.data import read_lines
from models.ort_decoder import int8_weights
from models.translator import DecodeOptions, Translator

BEAM = 4
CT2_AT_ONCE = "CTranslate2 int8, a batch per thread"
Translate = Callable[[list[str], int], list[str]]  # (sentences, batch size) -> outputs


def ragmt_system(translator: Translator, retrieve: Any = None) -> Translate:
    def run(sentences: list[str], batch: int) -> list[str]:
        options = DecodeOptions(beam_size=BEAM, batch_size=batch)
        return [
            o.text for o in pipeline.translate(translator, sentences, options, retrieve).outputs
        ]

    return run


def measure(
    run: Translate, latency: list[str], throughput: list[str], count: Callable[[str], int]
) -> dict[str, float]:
    run(latency[:4], 1)  # warm-up
    times = []
    for s in latency:
        start = time.perf_counter()
        run([s], 1)
        times.append((time.perf_counter() - start) * 1000)
    start = time.perf_counter()
    outputs = run(throughput, 32)
    seconds = time.perf_counter() - start
    tokens = sum(count(o) for o in outputs)
    return {
        "p50_ms": pct(times, 50),
        "p95_ms": pct(times, 95),
        "tokens_per_s": tokens / seconds,
        "sentences_per_s": len(throughput) / seconds,
    }


def systems(args: argparse.Namespace, work: Path) -> dict[str, Translate]:
    """Every system measured, by name; the converted CTranslate2 models live under `work`."""
    base = Translator.from_bundle(args.baseline)
    base8 = Translator.from_bundle(args.baseline, quantize="int8")
    memory_bundle = load_bundle(args.model)  # one model: a dense store may share its encoder
    memory = Translator.from_loaded(memory_bundle)
    memory8 = Translator.from_loaded(memory_bundle, "int8")
    base_ort = Translator.from_bundle(args.baseline, quantize="ort-int8")
    memory_ort = Translator.from_loaded(memory_bundle, "ort-int8")
    native, why = native_step.available()
    if not native:
        print(f"native-int8 rows left out: {why}")
    out: dict[str, Translate] = {
        "ragmt baseline fp32": ragmt_system(base),
        "ragmt baseline int8": ragmt_system(base8),
        "ragmt baseline ort-int8": ragmt_system(base_ort),
    }
    if native:
        base_native = Translator.from_bundle(args.baseline, quantize="native-int8")
        memory_native = Translator.from_loaded(memory_bundle, "native-int8")
        out["ragmt baseline native-int8"] = ragmt_system(base_native)
    out |= {
        "ragmt memory model fp32, no store": ragmt_system(memory),
        "ragmt memory model int8, no store": ragmt_system(memory8),
        "ragmt memory model ort-int8, no store": ragmt_system(memory_ort),
    }
    if native:
        out["ragmt memory model native-int8, no store"] = ragmt_system(memory_native)
    if args.stores is not None:
        store = open_store(args.stores / args.domain)
        encoder = store_encoder(store.manifest, memory_bundle) or args.retrieval_model
        retriever = load_retriever(store, encoder)
        out["ragmt memory model fp32 + retrieval"] = ragmt_system(
            memory, retrieve_with(memory, retriever)
        )
        out["ragmt memory model int8 + retrieval"] = ragmt_system(
            memory8, retrieve_with(memory8, retriever)
        )
        out["ragmt memory model ort-int8 + retrieval"] = ragmt_system(
            memory_ort, retrieve_with(memory_ort, retriever)
        )
        if native:
            out["ragmt memory model native-int8 + retrieval"] = ragmt_system(
                memory_native, retrieve_with(memory_native, retriever)
            )
        if int8_weights() != "u8":  # this CPU's default: beside it, the u8 fallback's speed
            with int8_weights_as("u8"):
                memory_u8 = Translator.from_loaded(memory_bundle, "ort-int8")
            out["ragmt memory model ort-int8, u8 weights, + retrieval"] = ragmt_system(
                memory_u8, retrieve_with(memory_u8, retriever)
            )
    try:
        from benchmarks import ctranslate2_model as ct2
    except ImportError as e:
        print(f"CTranslate2 rows left out: {e}")
        return out
    model_dir = ct2.convert(args.baseline, work / "ct2")
    for compute_type in ("float32", "int8"):
        out[f"CTranslate2 {compute_type}"] = CT2System(ct2.CT2Translator, model_dir, compute_type)
    # with several threads, CTranslate2's other way to use them: batches decoded at once
    out[CT2_AT_ONCE] = CT2System(ct2.CT2Translator, model_dir, "int8", batches_at_once=2)
    return out


class CT2System:
    """The converted baseline decoded by CTranslate2 with its own length normalisation (the
    engine as it is usually run; with ragmt's GNMT rule re-ranked instead, greedy and beam
    outputs match ragmt's on 200 of 200 and 199 of 200 sentences: benchmarks/ctranslate2_model).
    `batches_at_once`: CTranslate2's inter_threads, each batch then on threads / that many."""

    def __init__(
        self,
        make: Any,
        model_dir: Path,
        compute_type: str,
        threads: int = 1,
        batches_at_once: int = 1,
    ) -> None:
        self.make, self.model_dir, self.compute_type = make, model_dir, compute_type
        self.batches_at_once = batches_at_once
        self.translator = make(
            model_dir,
            compute_type=compute_type,
            intra_threads=max(1, threads // batches_at_once),
            inter_threads=batches_at_once,
        )

    def with_threads(self, threads: int) -> CT2System:
        at_once = threads if self.batches_at_once > 1 else 1
        return CT2System(self.make, self.model_dir, self.compute_type, threads, at_once)

    def __call__(self, sentences: list[str], batch: int) -> list[str]:
        return self.translator.translate(
            sentences, BEAM, batch_size=batch, normalization="ctranslate2"
        )


def main() -> None:
    ap = decode_arguments(__doc__, stores_required=False)
    ap.add_argument("--retrieval-model", type=Path, default=None, help="dense stores' encoder")
    ap.add_argument("--latency-sentences", type=int, default=100)
    ap.add_argument("--throughput-sentences", type=int, default=256)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--results", type=Path, default=None)
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="SYSTEM",
        help="measure only this system (repeat for several); the others are let go before "
        "any timing, since every system loaded in one process slows the rest",
    )
    args = ap.parse_args()
    base_fields = run_fields("cpu-decode")
    sentences = [s for s in read_lines(args.data / args.domain / "test.en") if s.strip()]
    latency = sentences[: args.latency_sentences]
    throughput = sentences[: args.throughput_sentences]
    pieces = Translator.from_bundle(args.baseline).tokenizer
    count = lambda text: len(pieces.encode(text, "de"))  # noqa: E731
    print(f"machine: {machine()}; ort-int8 weights: {int8_weights()}")
    print(
        f"{args.domain} test: {len(latency)} sentences at batch 1, {len(throughput)} at batch "
        f"32; beam {BEAM}; baseline {args.baseline}, memory model {args.model}"
    )
    with tempfile.TemporaryDirectory(prefix="ragmt-cpu-decode-") as tmp:
        runs = systems(args, Path(tmp))
        if args.only:
            unknown = sorted(set(args.only) - set(runs))
            if unknown:
                raise SystemExit(f"unknown systems {unknown}; known: {sorted(runs)}")
            runs = {name: run for name, run in runs.items() if name in args.only}
            gc.collect()  # the others' models and ONNX Runtime sessions freed before timing
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            rows = {}
            for name, run in runs.items():
                if name == CT2_AT_ONCE and threads == 1:
                    continue  # one thread: the same as "CTranslate2 int8"
                if isinstance(run, CT2System):
                    run = run.with_threads(threads)
                rows[name] = measure(run, latency, throughput, count)
            report(rows, threads)
            ratios(rows)
            for name, row in rows.items():
                write_record(
                    args.results,
                    base_fields,
                    system=name,
                    threads=threads,
                    beam=BEAM,
                    domain=args.domain,
                    int8_weights=int8_weights(),
                    native_isa=native_step.isa() if "native-int8" in name else None,
                    latency_sentences=len(latency),
                    throughput_sentences=len(throughput),
                    systems_timed=len(runs),  # loaded in the process as it timed this one
                    **row,
                )


def ct2_best(rows: dict[str, dict[str, float]]) -> dict[str, float] | None:
    """CTranslate2 int8 at its best with these threads: the lower p50 and the higher
    throughput of its two ways to use them (None: not measured)."""
    ct2 = [rows[n] for n in ("CTranslate2 int8", CT2_AT_ONCE) if n in rows]
    if not ct2:
        return None
    return {
        "p50_ms": min(r["p50_ms"] for r in ct2),
        "tokens_per_s": max(r["tokens_per_s"] for r in ct2),
    }


def ratios(rows: dict[str, dict[str, float]]) -> None:
    """Each row's ratios to CTranslate2 int8 at its best (when measured, `ct2_best`) and to
    ragmt's float baseline, added to the row so the records carry them."""
    ref, fp32 = ct2_best(rows), rows.get("ragmt baseline fp32")
    for r in rows.values():
        if fp32 is not None:
            r["p50_vs_ragmt_fp32"] = r["p50_ms"] / fp32["p50_ms"]
            r["tokens_vs_ragmt_fp32"] = r["tokens_per_s"] / fp32["tokens_per_s"]
        if ref is not None:
            r["p50_vs_ct2_int8"] = r["p50_ms"] / ref["p50_ms"]
            r["tokens_vs_ct2_int8"] = r["tokens_per_s"] / ref["tokens_per_s"]


def report(rows: dict[str, dict[str, float]], threads: int) -> None:
    ref = ct2_best(rows)
    fp32 = rows.get("ragmt baseline fp32")
    print(f"\n{threads} thread(s)")
    print(
        "| system | batch-1 p50 ms | p95 ms | batch-32 tokens/s | p50 vs CT2 int8 | "
        "tokens/s vs CT2 int8 | p50 vs ragmt fp32 |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    for name, r in rows.items():
        vs_ct2 = f"{r['p50_ms'] / ref['p50_ms']:.2f}x" if ref else "-"
        tps_ct2 = f"{r['tokens_per_s'] / ref['tokens_per_s']:.2f}x" if ref else "-"
        vs_fp32 = f"{r['p50_ms'] / fp32['p50_ms']:.2f}x" if fp32 else "-"
        print(
            f"| {name} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | {r['tokens_per_s']:.0f} | "
            f"{vs_ct2} | {tps_ct2} | {vs_fp32} |"
        )


if __name__ == "__main__":
    main()
