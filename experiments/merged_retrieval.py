"""Does a memory read from two retrieval methods at once translate better than either alone?

The IDF n-gram and dense stores of one corpus find different pairs (shared words against
encoder similarity). This merges their ranked lists per sentence — ranks taken in turn from
each store, a pair found by both kept once, cut to k — and scores the memory model with the
merged memory, with the same evaluation as `ragmt eval` (sentences split, default length
penalty). It asks whether a merged retriever is worth building into the stores; it is not how
the service retrieves.

    python experiments/merged_retrieval.py --model models/semiparametric_bundle \
      --data $DATA --stores $SP/stores/dense-own8-r95 $SP/stores/idf-ngram --k 5 --split dev \
      --out $SP/eval/cstm-run8+merged-dense-idf-split-lp2.0-dev
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from index_builder.retrieval.base import Neighbour
from index_builder.retrieval.serving import search_for, store_encoder
from index_builder.store import load_retriever, open_store
from models.bundle import load_bundle
from models.evaluate import evaluate, markdown_table
from models.pipeline import Retrieve
from models.translator import DecodeOptions, Translator


def merge(lists: list[list[Neighbour]], k: int) -> list[Neighbour]:
    """Ranks taken in turn from each list (first list first), a pair's repeat dropped, <= k."""
    out: list[Neighbour] = []
    seen: set[tuple[str, str]] = set()
    for rank in range(max((len(found) for found in lists), default=0)):
        for found in lists:
            if rank < len(found) and (found[rank].source, found[rank].target) not in seen:
                seen.add((found[rank].source, found[rank].target))
                out.append(found[rank])
                if len(out) == k:
                    return out
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--stores", type=Path, nargs="+", required=True, help="stores directories")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--domains", default="bible,medical,software-docs")
    ap.add_argument("--out", type=Path, required=True, help="write <out>.json")
    args = ap.parse_args()

    loaded = load_bundle(args.model)
    translator = Translator.from_loaded(loaded)
    labels: dict[str, str] = {}

    def retrieve_for(domain: str) -> Retrieve:
        retrievers = []
        for root in args.stores:
            store = open_store(root / domain)
            retrievers.append(load_retriever(store, store_encoder(store.manifest, loaded)))
        labels[domain] = " + ".join(f"{domain}@{root.name}" for root in args.stores)

        def retrieve(src: Sequence[str], k: int) -> tuple[list[list[Neighbour]], list | None]:
            lists, sources = [], None
            for retriever in retrievers:
                hits, states = search_for(translator, retriever, src, k)
                sources = sources if sources is not None else states
                lists.append(hits)
            return [merge(list(per), k) for per in zip(*lists, strict=True)], sources

        return retrieve

    results = evaluate(
        translator,
        args.data,
        [d for d in args.domains.split(",") if d],
        DecodeOptions(neighbours_k=args.k),
        args.split,
        retrieve_for=retrieve_for,
    )
    for domain, label in labels.items():
        results[domain]["store"] = label
    args.out.with_name(args.out.name + ".json").write_text(json.dumps(results, indent=2) + "\n")
    print(markdown_table(results, "merged memory: " + ", ".join(map(str, args.stores))))


if __name__ == "__main__":
    main()
