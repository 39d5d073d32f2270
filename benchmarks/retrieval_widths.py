"""Which n-gram widths should IDF n-gram retrieval use on our domains? A cheap proxy, measured
side by side in one run on the dev sets (no model involved):

    python -m benchmarks.retrieval_widths --data /root/ragmt/data/en-de

For each dev sentence, retrieve k neighbours from the train split and score what they offer a
retrieval-memory model for the reference translation:
- cover2: share of the reference's target word bigrams found in some neighbour's target
  (what could be copied), averaged over sentences;
- best BLEU: sacreBLEU sentence BLEU of the best single neighbour target vs the reference;
- hit4: share of sentences with a neighbour target sharing a 4-gram with the reference.
Also neighbours per sentence, index size (n-grams) and query time per sentence (batch 32).
`--results FILE` appends one "retrieval-widths" record per row (`models.results`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sacrebleu.metrics import BLEU

from benchmarks._common import run_fields, write_record
from index_builder.columns import PairTexts
from index_builder.retrieval.idf import IdfNgramParams, IdfNgramRetriever, IdfSentenceRetriever
from index_builder.retrieval.text import tokenize

CONFIGS: list[tuple[str, tuple[int, ...] | None, bool]] = [
    ("idf-sentence", None, False),
    ("idf-ngram", (2,), False),
    ("idf-ngram", (4,), False),
    ("idf-ngram", (4, 2), False),
    ("idf-ngram", (6, 3), False),
    ("idf-ngram", (8, 4), False),
    ("idf-ngram", (8, 4, 2), False),
    ("idf-ngram", (12, 6, 3), False),
    ("idf-ngram", (18, 10, 6), False),  # the paper's widths (long news sentences)
    ("idf-ngram", (4, 2), True),
    ("idf-ngram", (8, 4, 2), True),
]


def _read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def proxy(refs: list[str], neighbours: list[list[str]]) -> dict[str, float]:
    bleu = BLEU(effective_order=True)
    cover, best, hit4, count = [], [], [], []
    for ref, targets in zip(refs, neighbours, strict=True):
        ref_tok = tokenize(ref)
        tok = [tokenize(t) for t in targets]
        ref2 = _ngrams(ref_tok, 2)
        have2 = set().union(*(_ngrams(t, 2) for t in tok)) if tok else set()
        if ref2:
            cover.append(len(ref2 & have2) / len(ref2))
        ref4 = _ngrams(ref_tok, 4)
        hit4.append(any(ref4 & _ngrams(t, 4) for t in tok))
        best.append(max((bleu.sentence_score(t, [ref]).score for t in targets), default=0.0))
        count.append(len(targets))
    return {
        "cover2": float(np.mean(cover)),
        "best_bleu": float(np.mean(best)),
        "hit4": float(np.mean(hit4)),
        "neighbours": float(np.mean(count)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--domains", default="bible,software-docs")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--dev", type=int, default=500, help="dev sentences per domain")
    ap.add_argument("--results", type=Path, default=None, help="append a record per row")
    args = ap.parse_args()
    base = run_fields("retrieval-widths")
    print(f"k = {args.k}; dev sentences per domain <= {args.dev}; query time at batch 32")
    for domain in args.domains.split(","):
        d = args.data / domain
        pairs = PairTexts.from_strings(_read(d / "train.en"), _read(d / "train.de"))
        dev_src, dev_ref = _read(d / "dev.en")[: args.dev], _read(d / "dev.de")[: args.dev]
        lengths = [len(tokenize(s)) for s in dev_src]
        print(
            f"\n## {domain}: {len(pairs)} train pairs, {len(dev_src)} dev sentences, "
            f"dev length median {int(np.median(lengths))} tokens (p10 "
            f"{int(np.percentile(lengths, 10))}, p90 {int(np.percentile(lengths, 90))})\n"
        )
        print(
            "| method | widths | corpus n-grams | items | nbrs/sent | cover2 | best BLEU "
            "| hit4 | query ms/sent | build s |"
        )
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for method, widths, all_pos in CONFIGS:
            t0 = time.perf_counter()
            if widths is None:
                r = IdfSentenceRetriever.build(pairs)
            else:
                r = IdfNgramRetriever.build(pairs, IdfNgramParams(widths, all_pos))
            build = time.perf_counter() - t0
            t0 = time.perf_counter()
            found = []
            for lo in range(0, len(dev_src), 32):
                found += r.search(dev_src[lo : lo + 32], args.k)
            query_ms = (time.perf_counter() - t0) / len(dev_src) * 1000
            m = proxy(dev_ref, [[n.target for n in f] for f in found])
            w = "-" if widths is None else ",".join(map(str, sorted(widths, reverse=True)))
            corpus = "-" if widths is None else ("all" if all_pos else "reduced")
            print(
                f"| {method} | {w} | {corpus} | {r.counts()['items']} | {m['neighbours']:.1f} "
                f"| {m['cover2']:.3f} | {m['best_bleu']:.1f} | {m['hit4']:.3f} "
                f"| {query_ms:.1f} | {build:.1f} |",
                flush=True,
            )
            write_record(
                args.results,
                base,
                domain=domain,
                method=method,
                widths=None if widths is None else w,
                corpus=None if widths is None else corpus,
                k=args.k,
                train_pairs=len(pairs),
                dev_sentences=len(dev_src),
                dev_tokens={
                    "median": float(np.median(lengths)),
                    "p10": float(np.percentile(lengths, 10)),
                    "p90": float(np.percentile(lengths, 90)),
                },
                items=int(r.counts()["items"]),
                neighbours_per_sentence=m["neighbours"],
                cover2=m["cover2"],
                best_bleu=m["best_bleu"],
                hit4=m["hit4"],
                query_ms_per_sentence=query_ms,
                build_seconds=build,
            )


if __name__ == "__main__":
    main()
