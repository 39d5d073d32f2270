"""Decoding time of several bundles side by side in one run on this CPU, on one test file of one
language pair (issue 30 asks for every system's CPU decoding time):

    python -m benchmarks.bundle_speed --bundle subword=RUNS/subword-ru/bundle \
        --bundle byte-ncf=RUNS/byte-ncf-ru/bundle --sources DATA/bible/test.ru --pair ru-en \
        [--beam 1] [--threads 1] [--results FILE]

Each bundle translates the same sources through the pipeline the service uses: one at a time
(p50/p95/mean latency) and in batches of 32 (sentences per second), as the service decodes it
(`auto`: the native int8 step for a Transformer where it builds, PyTorch int8 for a byte model)
and with PyTorch's int8 decoder for all alike. A byte model emits a byte a step where a
subword model emits a piece, so sentences and the outputs' UTF-8 bytes, not pieces, are what
the ratios compare; they are against the first bundle's `auto` row. A model that loops to its
length limit writes long outputs: its time per output byte is the fairer figure then.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from benchmarks._common import decode_speed, machine, run_fields, write_record
from index_builder.retrieval.encoder import bundle_sha256
from models.bundle import load_bundle
from models.data import read_lines
from models.quantize import resolve
from models.translator import Translator


def named_bundle(spec: str) -> tuple[str, Path]:
    name, _, path = spec.partition("=")
    if not name or not path:
        raise argparse.ArgumentTypeError(f"{spec!r}: give NAME=BUNDLE")
    return name, Path(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", type=named_bundle, action="append", required=True)
    ap.add_argument("--sources", type=Path, required=True, help="one sentence a line")
    ap.add_argument("--pair", required=True, help="source-target, e.g. ru-en")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--latency-sentences", type=int, default=100)
    ap.add_argument("--throughput-sentences", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    source, _, target = args.pair.partition("-")
    if not source or not target:
        ap.error(f"--pair {args.pair!r}: give source-target, e.g. ru-en")
    torch.set_num_threads(args.threads)
    fields = run_fields("bundle-speed")
    sentences = [s for s in read_lines(args.sources) if s.strip()]
    latency, batch = sentences[: args.latency_sentences], sentences[: args.throughput_sentences]
    print(f"machine: {machine()}; beam {args.beam}; {args.threads} thread(s); {args.sources}")
    print("| system | decoder | p50 ms | p95 ms | mean ms | sentences/s | ms an output byte "
          "| p50 vs first | sentences/s vs first |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    first: dict | None = None
    for name, path in args.bundle:
        bundle = load_bundle(path)
        served = resolve("auto", "cpu", bundle.model)
        for quantize in dict.fromkeys((served, "int8")):  # `auto` first; once if it is int8
            translator = Translator.from_loaded(bundle, quantize).for_pair(source, target)
            row = decode_speed(translator, args.beam, latency, batch)
            first = first or row
            row["p50_vs_first"] = row["p50_ms"] / first["p50_ms"]
            row["sentences_per_s_vs_first"] = row["sentences_per_s"] / first["sentences_per_s"]
            decoder = f"{quantize} (served)" if quantize == served else quantize
            print(
                f"| {name} | {decoder} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} "
                f"| {row['mean_ms']:.1f} | {row['sentences_per_s']:.1f} "
                f"| {row['ms_per_output_byte_batch1']:.2f} "
                f"| {row['p50_vs_first']:.2f}x | {row['sentences_per_s_vs_first']:.2f}x |"
            )
            write_record(
                args.results, fields, system=name, decoder=decoder, quantize=quantize,
                bundle={"path": str(path), "sha256": bundle_sha256(bundle.manifest),
                        "architecture": bundle.manifest.get("architecture")},
                languages={"source": source, "target": target}, sources=str(args.sources),
                beam=args.beam, threads=args.threads, latency_sentences=len(latency),
                throughput_sentences=len(batch), **row,
            )  # fmt: skip


if __name__ == "__main__":
    main()
