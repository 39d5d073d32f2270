"""Two ways of decoding the served memory model with retrieval, timed in pairs in one process
(ort-int8, beam 4, one thread): the host's time moves by up to 30% from run to run, and
alternating the two is what makes a 5-10% difference visible.

    python -m benchmarks.decode_variants --data data/en-de --stores STORES --domain medical \
        [--results FILE]

- `weights`: this CPU's signed int8 weights (s8 with VNNI or AMX, s7 on AVX2 alone;
  `models.ort_decoder.int8_weights`) against u8; different weights give slightly different
  translations, counted.
- `compaction`: finished sentences dropped by moving the few survivors past the kept count
  in place (`models.decoding.fill_order`, `models.ort_decoder._compact`) against copying every
  kept sentence's keys and values (the code before, restored for the comparison); the
  translations must be the same.
- `step`: each decoding step as one C++ call (`native-int8`, models/native_step.py) against
  ONNX Runtime's step graph (`ort-int8`); the encoders are ONNX Runtime's in both. The native
  step quantizes each row's activations alone, so some translations differ, counted.
- `encoder`: with the native step, the source encoder in the native library too against
  ONNX Runtime's encoder graph (int8 both; the native one quantizes each row alone, so some
  translations differ, counted).
- `search`: with the native step, beam search in the native library too (one call a batch)
  against beam search's Python loop calling the native step each step; the translations
  must be the same.
- `memory`: with everything else native, the memory encoder in the native library too (one
  call a batch, embedding to packed memory) against ONNX Runtime's int8 graph of it (the code
  before); each quantizes differently, so some translations differ, counted.
- `keys`: with everything else native, the decoder's source and memory keys/values made by
  the native library straight into halves against ONNX Runtime's int8 graph then PyTorch's
  conversion to halves (the code before); some translations differ, counted.
- `groups`: a large batch's neighbours encoded in length groups
  (`models.semiparametric.PACKED_GROUPS`) against one call for them all (the code before);
  each call quantizes its activations with its own scale, so some translations differ.

Batch 32: the whole `--throughput-sentences` three times, the two variants by turns; batch 1:
each of `--latency-sentences` once with each variant, by turns (p50, p95, mean).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._common import int8_weights_as, machine, pct, run_fields, write_record
from index_builder.retrieval.serving import retrieve_with, store_encoder
from index_builder.store import load_retriever, open_store
from models import decoding, native_step, ort_decoder, pipeline, semiparametric
from models.bundle import load_bundle
from models.data import read_lines
from models.layers import DecoderCache
from models.translator import DEFAULT_BUNDLE, DecodeOptions, Translator

Run = Callable[[list[str], int], tuple[float, list[str]]]  # (texts, batch) -> (seconds, outputs)


@contextlib.contextmanager
def _copying() -> Iterator[None]:
    """The code before in-place compaction: survivors in ascending order, all copied."""
    cache = ort_decoder._ReorderedCache
    saved = decoding.fill_order, cache.select_sentences, cache.index_select
    decoding.fill_order = lambda keep: keep
    cache.select_sentences, cache.index_select = (
        DecoderCache.select_sentences,
        DecoderCache.index_select,
    )
    try:
        yield
    finally:
        decoding.fill_order, cache.select_sentences, cache.index_select = saved


def _ort_encoder(model: ort_decoder.OrtDecoder) -> None:
    """`model`'s source encoder as ONNX Runtime's int8 graph (what native-int8 ran before its
    native encoder), its step and search still native."""
    float_model = model.float_model
    graph = ort_decoder._quantize(ort_decoder._encoder_graph(float_model), model.int8_weights)
    stack = ort_decoder._OrtEncoderStack(ort_decoder._Graph(graph, model.threads))
    model._encoder._modules["encoder_layers"] = torch.nn.ModuleList([stack])


def _ort_memory_encoder(model: ort_decoder.OrtDecoder) -> None:
    """`model`'s memory encoder as ONNX Runtime's int8 graph (what native-int8 ran before its
    native memory encoder)."""
    float_model = model.float_model
    graph = ort_decoder._memory_encoder_graph(float_model)
    graph = ort_decoder._Graph(ort_decoder._quantize(graph, model.int8_weights), model.threads)
    uses_sources = float_model.memory_encoder.uses_sources
    model._encoder._modules["memory_encoder"] = ort_decoder._OrtMemoryEncoder(graph, uses_sources)


class _OrtKeysValues:
    """The decoder's keys/values of one attention as before the native ones: ONNX Runtime's
    int8 graph, then stacked into halves by PyTorch (`models.native_step.stack_keys`)."""

    def __init__(self, model: ort_decoder.OrtDecoder, attr: str) -> None:
        graph = ort_decoder._kv_graph(model.float_model, attr)
        quantized = ort_decoder._quantize(graph, model.int8_weights)
        self.graph = ort_decoder._Graph(quantized, model.threads)

    def __call__(self, x: np.ndarray, pad: np.ndarray, threads: int = 1) -> tuple[Any, Any]:
        kv = self.graph.run({"x": x})
        return native_step.stack_keys(kv[0::2]), native_step.stack_values(kv[1::2])


def _ort_keys_values(model: ort_decoder.OrtDecoder) -> None:
    model._kv = {kind: _OrtKeysValues(model, f"{kind}_attn") for kind in model._kv}


@contextlib.contextmanager
def _python_search(model: ort_decoder.OrtDecoder) -> Iterator[None]:
    """Beam search's Python loop over the native step (the code before the native search)."""
    model.native_search = False
    try:
        yield
    finally:
        model.native_search = True


@contextlib.contextmanager
def _one_call() -> Iterator[None]:
    """The code before length groups for a packing memory encoder: all neighbours at once."""
    saved = semiparametric.PACKED_GROUPS
    semiparametric.PACKED_GROUPS = 1
    try:
        yield
    finally:
        semiparametric.PACKED_GROUPS = saved


def _runner(translator: Translator, retrieve: object, context=contextlib.nullcontext) -> Run:
    def run(texts: list[str], batch: int) -> tuple[float, list[str]]:
        options = DecodeOptions(beam_size=4, batch_size=batch)
        with context():
            start = time.perf_counter()
            done = pipeline.translate(translator, texts, options, retrieve)
            return time.perf_counter() - start, [o.text for o in done.outputs]

    return run


def paired(a: Run, b: Run, latency: list[str], throughput: list[str]) -> dict[str, float]:
    """Both variants by turns: batch 32 three times, batch 1 sentence by sentence."""
    a(throughput[:32], 32), b(throughput[:32], 32)  # warm-up
    batch = {"a": 0.0, "b": 0.0}
    for _ in range(3):
        seconds, out_a = a(throughput, 32)
        batch["a"] += seconds
        seconds, out_b = b(throughput, 32)
        batch["b"] += seconds
    one: dict[str, list[float]] = {"a": [], "b": []}
    for s in latency:
        one["a"].append(a([s], 1)[0] * 1000)
        one["b"].append(b([s], 1)[0] * 1000)
    row: dict[str, float] = {
        "batch32_seconds_a": batch["a"],
        "batch32_seconds_b": batch["b"],
        "batch32_ratio": batch["a"] / batch["b"],
        "batch32_outputs_differing": sum(x != y for x, y in zip(out_a, out_b, strict=True)),
    }
    for side, times in one.items():
        row[f"p50_ms_{side}"] = pct(times, 50)
        row[f"p95_ms_{side}"] = pct(times, 95)
        row[f"mean_ms_{side}"] = float(np.mean(times))
    row["p50_ratio"] = row["p50_ms_a"] / row["p50_ms_b"]
    row["mean_ratio"] = row["mean_ms_a"] / row["mean_ms_b"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_BUNDLE)
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--domain", default="medical")
    ap.add_argument("--stores", type=Path, required=True, help="stores directory, by domain")
    ap.add_argument("--latency-sentences", type=int, default=200)
    ap.add_argument("--throughput-sentences", type=int, default=256)
    ap.add_argument("--variants", default="weights,compaction,groups")
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = run_fields("decode-variants")
    sentences = [s for s in read_lines(args.data / args.domain / "test.en") if s.strip()]
    latency = sentences[: args.latency_sentences]
    throughput = sentences[: args.throughput_sentences]
    bundle = load_bundle(args.model)
    store = open_store(args.stores / args.domain)
    retriever = load_retriever(store, store_encoder(store.manifest, bundle))
    print(f"machine: {machine()}; one thread; {args.domain} test, beam 4, ort-int8")
    pairs: dict[str, tuple[str, str, Run, Run]] = {}
    for variant in args.variants.split(","):
        if variant == "weights":
            made = {}
            default = ort_decoder.int8_weights()
            signed = default if default != "u8" else "s8"
            for kind in (signed, "u8"):
                with int8_weights_as(kind):
                    t = Translator.from_loaded(bundle, "ort-int8")
                made[kind] = _runner(t, retrieve_with(t, retriever))
            pairs[variant] = (signed, "u8", made[signed], made["u8"])
        elif variant == "compaction":
            t = Translator.from_loaded(bundle, "ort-int8")
            r = retrieve_with(t, retriever)
            pairs[variant] = ("in place", "copying", _runner(t, r), _runner(t, r, _copying))
        elif variant == "step":
            made = {m: Translator.from_loaded(bundle, m) for m in ("native-int8", "ort-int8")}
            a, b = (_runner(t, retrieve_with(t, retriever)) for t in made.values())
            isa = made["native-int8"].model.native_isa
            pairs[variant] = (f"native step ({isa})", "ort-int8 step graph", a, b)
        elif variant == "encoder":
            made = [Translator.from_loaded(bundle, "native-int8") for _ in range(2)]
            _ort_encoder(made[1].model)
            a, b = (_runner(t, retrieve_with(t, retriever)) for t in made)
            pairs[variant] = ("native encoder", "ort-int8 encoder graph", a, b)
        elif variant == "search":
            t = Translator.from_loaded(bundle, "native-int8")
            r = retrieve_with(t, retriever)
            python = functools.partial(_python_search, t.model)
            pairs[variant] = ("native search", "Python loop", _runner(t, r), _runner(t, r, python))
        elif variant in ("memory", "keys"):
            made = [Translator.from_loaded(bundle, "native-int8") for _ in range(2)]
            (_ort_memory_encoder if variant == "memory" else _ort_keys_values)(made[1].model)
            a, b = (_runner(t, retrieve_with(t, retriever)) for t in made)
            before = (
                "ONNX Runtime's memory encoder graph"
                if variant == "memory"
                else ("ONNX Runtime's keys/values graph, halves by PyTorch")
            )
            pairs[variant] = (f"native {variant}", before, a, b)
        elif variant == "groups":
            t = Translator.from_loaded(bundle, "ort-int8")
            r = retrieve_with(t, retriever)
            pairs[variant] = ("length groups", "one call", _runner(t, r), _runner(t, r, _one_call))
        else:
            raise SystemExit(
                f"unknown variant {variant!r}: weights, compaction, step, encoder, search, "
                "memory, keys or groups"
            )
    print(
        "| variant | a / b | batch 32: a / b time | outputs differing | batch-1 p50 ms a, b | "
        "mean ms a, b |\n|---|---|---:|---:|---:|---:|"
    )
    for variant, (name_a, name_b, a, b) in pairs.items():
        row = paired(a, b, latency, throughput)
        print(
            f"| {variant} | {name_a} / {name_b} | {row['batch32_ratio']:.3f} "
            f"({row['batch32_seconds_a']:.2f} s / {row['batch32_seconds_b']:.2f} s) | "
            f"{row['batch32_outputs_differing']} of {len(throughput)} | "
            f"{row['p50_ms_a']:.1f}, {row['p50_ms_b']:.1f} | "
            f"{row['mean_ms_a']:.1f}, {row['mean_ms_b']:.1f} |"
        )
        write_record(
            args.results,
            base,
            variant=variant,
            a=name_a,
            b=name_b,
            domain=args.domain,
            int8_weights=ort_decoder.int8_weights(),
            latency_sentences=len(latency),
            throughput_sentences=len(throughput),
            **row,
        )


if __name__ == "__main__":
    main()
