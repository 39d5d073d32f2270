"""Short inputs and the length penalty: UI strings of the test sets under several penalties.

A length penalty tuned on sentences might push a one-word input into a longer output
("Save" -> "Speichern speichern"). This scores the test sources of at most `--max-words`
words (general, medical, software-docs: the domains with UI strings), each with its own
store, through the one pipeline at each penalty, and records BLEU, chrF and exact matches.

    python experiments/short_inputs.py --data data/en-de --stores stores \
        --penalties 2.0,1.0,0.0 --results experiments/results/short-inputs.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DOMAINS = ("general", "medical", "software-docs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--stores", type=Path, required=True)
    ap.add_argument("--max-words", type=int, default=3)
    ap.add_argument("--penalties", default="2.0,1.0,0.0")
    ap.add_argument("--results", type=Path, help="append records here (JSON Lines)")
    args = ap.parse_args()

    from index_builder.retrieval.serving import retrieve_with, store_encoder
    from index_builder.store import load_retriever, open_store
    from models import pipeline
    from models.bundle import load_bundle
    from models.data import read_lines
    from models.evaluate import score
    from models.results import FORMAT, append_record, git_state
    from models.translator import DEFAULT_BUNDLE, DecodeOptions, Translator

    git = git_state()
    bundle = load_bundle(DEFAULT_BUNDLE)
    translator = Translator.from_loaded(bundle, "auto")
    sets = []
    for domain in DOMAINS:
        src = read_lines(args.data / domain / "test.en")
        ref = read_lines(args.data / domain / "test.de")
        keep = [i for i, s in enumerate(src) if len(s.split()) <= args.max_words]
        store = open_store(args.stores / domain)
        retriever = load_retriever(store, store_encoder(store.manifest, bundle, None))
        retrieve = retrieve_with(translator, retriever)
        sets.append(([src[i] for i in keep], [ref[i] for i in keep], retrieve))
    for penalty in (float(p) for p in args.penalties.split(",")):
        options = DecodeOptions(length_penalty=penalty)
        hyps: list[str] = []
        refs: list[str] = []
        for src, ref, retrieve in sets:
            hyps += [o.text for o in pipeline.translate(translator, src, options, retrieve).outputs]
            refs += ref
        scores = score(hyps, refs)
        record = {
            "format": FORMAT,
            "kind": "short-inputs",
            "domains": list(DOMAINS),
            "max_words": args.max_words,
            "length_penalty": penalty,
            "sentences": len(hyps),
            "bleu": scores["bleu"],
            "chrf": scores["chrf"],
            "exact": sum(h.strip() == r.strip() for h, r in zip(hyps, refs, strict=True)),
            "signatures": {"bleu": scores["bleu_signature"], "chrf": scores["chrf_signature"]},
            "model": str(DEFAULT_BUNDLE),
            "git": git,
        }
        print(record["length_penalty"], record["bleu"], record["chrf"], record["exact"], flush=True)
        if args.results:
            append_record(args.results, record)


if __name__ == "__main__":
    main()
