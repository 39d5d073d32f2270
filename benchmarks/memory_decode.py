"""Decoding cost of the semi-parametric model with retrieval against the baseline without it,
side by side in one run on one domain's test set (beam 4): latency p50/p95 at batch 1 and
throughput at batch 32, retrieval time shown apart and included in the memory model's total.
Every system translates through the pipeline (`models.pipeline`) as the service calls it; the
memory model reports each output's mean gate. When the store is a dense one built with the
memory model's own encoder, the service encodes a request once, for retrieval and decoding
alike; that path is measured too, in the same run, beside encoding the query twice, and that
path's decoding once more with the gated sublayer unfused (six matmuls a step instead of three;
`fuse_steps`), so the fused step's saving is a ratio of this run. Lines are cut into sentences
and each sentence retrieves and is decoded alone, as the service does (`--no-split-sentences`:
whole lines); a latency is a whole line's, all its sentences included.

    python -m benchmarks.memory_decode --baseline models/baseline_bundle \
        --model models/semiparametric_bundle --stores STORES --domain medical

The issue's goal: the memory model's batch-1 latency, retrieval included, at most 1.5x the
baseline's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from benchmarks._common import machine, pct
from index_builder.retrieval.serving import retrieve_with, store_encoder
from index_builder.store import load_retriever, open_store
from models import defaults, pipeline
from models.bundle import load_bundle
from models.data import read_lines
from models.translator import DecodeOptions, Translator


def _timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1000, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--baseline", type=Path, default=Path("models/baseline_bundle"))
    ap.add_argument("--model", type=Path, required=True, help="the semi-parametric bundle")
    ap.add_argument("--stores", type=Path, required=True, help="stores directory (by domain)")
    ap.add_argument("--domain", default="medical")
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--retrieval-model", type=Path, default=None, help="dense stores' encoder")
    ap.add_argument(
        "--k", type=int, default=defaults.NEIGHBOURS_K, help="neighbours retrieved per sentence"
    )
    ap.add_argument("--beam", type=int, default=defaults.BEAM_SIZE)
    ap.add_argument("--sentences", type=int, default=256, help="lines, for batch-32 throughput")
    ap.add_argument("--latency-sentences", type=int, default=100, help="lines, batch-1 latency")
    ap.add_argument(
        "--split-sentences",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="cut lines into sentences, each retrieved for and decoded alone (the service's way)",
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    base = Translator.from_bundle(args.baseline, device=args.device)
    bundle = load_bundle(args.model, device=args.device)
    memory = Translator.from_loaded(bundle)
    if not memory.uses_memory:
        raise SystemExit(f"{args.model} is not a memory model (architecture without neighbours)")
    store = open_store(args.stores / args.domain)
    # The memory model's own bundle when the store's vectors are its encoder's, else the
    # encoder named (or the one the store records).
    retriever = load_retriever(store, store_encoder(store.manifest, bundle) or args.retrieval_model)
    share = getattr(retriever, "encodes_with", lambda _m: False)(memory.model)
    src = read_lines(args.data / args.domain / "test.en")
    print(f"machine: {machine()}; torch threads {torch.get_num_threads()}")
    print(
        f"baseline {args.baseline} | memory model {args.model} | store {store.root} "
        f"({store.method}) | {args.domain} test | beam {args.beam} | "
        f"length penalty {DecodeOptions().length_penalty} (both) | "
        f"sentences {'split' if args.split_sentences else 'not split'} (both) | "
        f"k={args.k} on {args.device} | memory model reports its gates | "
        f"store encoded by the memory model: {'yes' if share else 'no'}"
    )

    # Every path is the pipeline's (models.pipeline), as the service runs it: lines cut into
    # sentences, each retrieved for and decoded alone, the outputs joined per line.
    def searched(queries, k):  # the store searched on its own: decoding encodes again
        return retriever.search(queries, k), None

    shared = retrieve_with(memory, retriever)  # a store of the model's own encoder: encoded once

    def translate(texts: list[str], options: DecodeOptions) -> list[str]:
        return [o.text for o in pipeline.translate(base, texts, options).outputs]

    def run(texts: list[str], options: DecodeOptions, retrieve) -> tuple[float, float, list[str]]:
        """(retrieval ms, decoding ms, outputs) of the memory model on `texts`."""
        done = pipeline.translate(memory, texts, options, retrieve)
        return done.retrieval_ms, done.decode_ms, [o.text for o in done.outputs]

    def fuse(on: bool) -> None:
        for layer in memory.model.decoder_layers:
            layer.fuse_steps = on

    def opts(batch_size: int) -> DecodeOptions:
        return DecodeOptions(
            beam_size=args.beam,
            batch_size=batch_size,
            split_sentences=args.split_sentences,
            neighbours_k=args.k,
        )

    one, many = opts(1), opts(32)
    warm = src[:8]
    translate(warm, many)
    run(warm, many, searched)

    # Batch 1: the systems alternate sentence by sentence, so drift hits them alike.
    lat_base, lat_ret, lat_dec, lat_mem = [], [], [], []
    sh_ret, sh_dec, sh_mem, fused_dec, unfused_dec = [], [], [], [], []
    for i, s in enumerate(src[: args.latency_sentences]):
        ms, _ = _timed(lambda s=s: translate([s], one))
        lat_base.append(ms)
        r_ms, d_ms, _ = run([s], one, searched)
        lat_ret.append(r_ms)
        lat_dec.append(d_ms)
        lat_mem.append(r_ms + d_ms)
        if share:
            r_ms, d_ms, _ = run([s], one, shared)
            sh_ret.append(r_ms)
            sh_dec.append(d_ms)
            sh_mem.append(r_ms + d_ms)
            # The gated sublayer fused (as served) and unfused, once more each, in turns: the
            # model's weights are as warm for either.
            timed = {}
            for on in (True, False) if i % 2 else (False, True):
                fuse(on)
                timed[on] = run([s], one, shared)[1]
            fuse(True)
            fused_dec.append(timed[True])
            unfused_dec.append(timed[False])

    batch = src[: args.sentences]
    base_ms, _ = _timed(lambda: translate(batch, many))
    ret_ms, dec_ms, hyps = run(batch, many, searched)
    if share:
        sh_ret_ms, sh_dec_ms, sh_hyps = run(batch, many, shared)
        fuse(False)
        _, unfused_ms, unfused_hyps = run(batch, many, shared)
        fuse(True)
        same_unfused = sum(a == b for a, b in zip(sh_hyps, unfused_hyps, strict=True))
        print(
            f"batch 32, gated sublayer fused vs unfused: the same translation for {same_unfused} "
            f"of {len(batch)} lines"
        )
        same = sum(a == b for a, b in zip(hyps, sh_hyps, strict=True))
        print(
            f"batch 32, source encoded once vs twice: the same translation for {same} of "
            f"{len(batch)} lines"
        )

    def row(name: str, lat: list[float], total_ms: float | None) -> None:
        tput = f"{len(batch) / total_ms * 1000:7.1f}" if total_ms else "      -"
        print(f"| {name} | {pct(lat, 50):7.1f} | {pct(lat, 95):7.1f} | {tput} |")

    sentences = pipeline.prepare(memory, batch, many).sentences
    print(f"\n{len(batch)} lines for batch 32: {len(sentences)} sentences decoded")
    print("\n| system | batch-1 p50 ms | batch-1 p95 ms | batch-32 lines/s |")
    print("|---|---:|---:|---:|")
    row("baseline, no retrieval", lat_base, base_ms)
    row("retrieval alone", lat_ret, ret_ms)
    row("memory model decoding alone", lat_dec, dec_ms)
    row("memory model with retrieval", lat_mem, ret_ms + dec_ms)
    if share:
        row("retrieval, its encoding handed to decoding", sh_ret, sh_ret_ms)
        row("memory model decoding, source given", sh_dec, sh_dec_ms)
        row("memory model with retrieval, source encoded once", sh_mem, sh_ret_ms + sh_dec_ms)
        row("memory model decoding, source given, gated sublayer unfused", unfused_dec, unfused_ms)

    def ratios(name: str, lat: list[float], r_ms: float, d_ms: float) -> float:
        p50 = pct(lat, 50) / pct(lat_base, 50)
        p95 = pct(lat, 95) / pct(lat_base, 95)
        print(f"\nratio {name} / baseline: batch-1 p50 {p50:.2f}x, p95 {p95:.2f}x")
        total, alone = (r_ms + d_ms) / base_ms, r_ms / base_ms
        print(f"ratio batch-32 time: {total:.2f}x (retrieval {alone:.2f}x of it)")
        return p50

    p50 = ratios("memory model with retrieval", lat_mem, ret_ms, dec_ms)
    if share:  # the service's path with this store
        p50 = ratios("source encoded once", sh_mem, sh_ret_ms, sh_dec_ms)
        print(
            f"\nratio memory model decoding, gated sublayer fused / unfused (decoded in turns): "
            f"batch-1 p50 {pct(fused_dec, 50) / pct(unfused_dec, 50):.3f}x, mean "
            f"{sum(fused_dec) / sum(unfused_dec):.3f}x; batch-32 time {sh_dec_ms / unfused_ms:.3f}x"
        )
    print(f"goal batch-1 p50 <= 1.5x (the service's path): {'met' if p50 <= 1.5 else 'missed'}")


if __name__ == "__main__":
    main()
