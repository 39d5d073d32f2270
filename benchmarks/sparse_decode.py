"""Decoding time of a sparse model's per-language sub-networks against the dense model of the
same active size (issue 31's goal: at most 1.1x), side by side in one run on this CPU:

    python -m benchmarks.sparse_decode --sparse RUN/ffn-sparse/bundle --dense RUN/dense/bundle \
        --data RUN/data [--langs de,zh] [--results FILE]

For each target language, both models translate the same test sources through the pipeline
the service uses (beam 4, float PyTorch, one thread): one at a time (p50 latency) and in
batches of 32 (target pieces per second). Their outputs differ in length, so the ratios are
given per sentence and per target piece. The sparse model runs the language's extracted
sub-network (`SparseTransformer.subnetwork`): its selected blocks only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from benchmarks._common import decode_speed, machine, run_fields, write_record
from models.bundle import load_bundle
from models.data import read_lines
from models.translator import Translator

BEAM = 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sparse", type=Path, required=True)
    ap.add_argument("--dense", type=Path, required=True, help="the same active size")
    ap.add_argument("--data", type=Path, required=True, help="an ast-bible.sh data directory")
    ap.add_argument("--langs", default=None, help="targets (default: every pair of the model)")
    ap.add_argument("--latency-sentences", type=int, default=40)
    ap.add_argument("--throughput-sentences", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    fields = run_fields("sparse-decode")
    systems = {"sparse": load_bundle(args.sparse), "dense": load_bundle(args.dense)}
    translators = {name: Translator.from_loaded(b, "none") for name, b in systems.items()}
    pairs = [tuple(p) for p in systems["sparse"].manifest["pairs"]]
    langs = args.langs.split(",") if args.langs else [t for _, t in pairs]
    print(f"machine: {machine()}; beam {BEAM}; {args.threads} thread(s)")
    print("| target | sparse p50 ms | dense p50 ms | ratio | ms a piece, ratio | sparse pieces/s "
          "| dense pieces/s | time ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|")  # fmt: skip
    for lang in langs:
        source = next(s for s, t in pairs if t == lang)
        lines = [x for x in read_lines(args.data / "bible" / f"test.{source}") if x.strip()]
        sentences = lines[: args.throughput_sentences]
        rows = {
            name: decode_speed(
                t.for_pair(source, lang), BEAM, sentences[: args.latency_sentences], sentences
            )
            for name, t in translators.items()
        }
        s, d = rows["sparse"], rows["dense"]
        print(
            f"| {lang} | {s['p50_ms']:.0f} | {d['p50_ms']:.0f} | {s['p50_ms'] / d['p50_ms']:.2f}x "
            f"| {s['ms_per_piece_batch1'] / d['ms_per_piece_batch1']:.2f}x "
            f"| {s['pieces_per_s']:.0f} | {d['pieces_per_s']:.0f} "
            f"| {d['pieces_per_s'] / s['pieces_per_s']:.2f}x |"
        )
        for name, row in rows.items():
            write_record(
                args.results, fields, system=name, bundle=str(systems[name].path),
                pair=[source, lang],
                beam=BEAM, threads=args.threads, latency_sentences=args.latency_sentences,
                throughput_sentences=len(sentences), **row,
                **({"p50_vs_dense": s["p50_ms"] / d["p50_ms"],
                    "ms_per_piece_vs_dense": s["ms_per_piece_batch1"] / d["ms_per_piece_batch1"],
                    "pieces_time_vs_dense": d["pieces_per_s"] / s["pieces_per_s"]}
                   if name == "sparse" else {}),
            )  # fmt: skip


if __name__ == "__main__":
    main()
