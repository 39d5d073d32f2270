"""What a served model's tokenizer lets it write: each test reference of a prepared data
directory encoded and decoded by a bundle's tokenizer, then scored against itself. That is the
most a perfect model behind that tokenizer could score, and the characters it loses are the
ones no translation from it can contain (the Moses punctuation normalisation before
SentencePiece writes „“ «» – … in ASCII, for one). One record per domain and language.

    python experiments/tokenizer_ceiling.py --bundle models/semiparametric_bundle \
        --data data/en-de --lang de --results experiments/results/tokenizer-ceiling.jsonl
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DOMAINS = ("general", "bible", "medical", "software-docs")


def lost_characters(refs: list[str], trips: list[str]) -> Counter:
    """Per character, the references that hold it and lose it in the round trip."""
    lost: Counter = Counter()
    for ref, trip in zip(refs, trips, strict=True):
        if ref != trip:
            lost.update(set(ref) - set(trip))
    return lost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", type=Path, required=True, help="a model bundle directory")
    ap.add_argument("--data", type=Path, required=True, help="a prepared data directory")
    ap.add_argument("--lang", required=True, help="the references' language (test.<lang>)")
    ap.add_argument("--domains", default=",".join(DOMAINS))
    ap.add_argument("--results", type=Path, help="append records here (JSON Lines)")
    args = ap.parse_args()

    from models.artifacts import sha256_file
    from models.data import read_lines
    from models.evaluate import score
    from models.results import FORMAT, append_record, git_state
    from models.tokenizer import Tokenizer

    model = args.bundle / "spm.model"
    if not model.is_file():
        sys.exit(f"{args.bundle} has no spm.model: not a SentencePiece bundle")
    tok = Tokenizer(model)
    git = git_state()
    for domain in args.domains.split(","):
        path = args.data / domain / f"test.{args.lang}"
        if not path.is_file():
            sys.exit(f"no test references {path}: prepare the data first (ragmt data prepare)")
        refs = read_lines(path)
        trips = [tok.decode(tok.encode(ref, args.lang)) for ref in refs]
        ceiling = score(trips, refs, args.lang)
        lost = lost_characters(refs, trips)
        record = {
            "format": FORMAT,
            "kind": "tokenizer-ceiling",
            "bundle": args.bundle.name,
            "domain": domain,
            "language": args.lang,
            "sentences": len(refs),
            "changed": sum(r != t for r, t in zip(refs, trips, strict=True)),
            "lost": "".join(c for c, _ in lost.most_common(8)),
            "lost_counts": dict(lost.most_common(8)),
            "ceiling_bleu": ceiling["bleu"],
            "ceiling_chrf": ceiling["chrf"],
            "bleu_signature": ceiling["bleu_signature"],
            "chrf_signature": ceiling["chrf_signature"],
            "spm_sha256": sha256_file(model),
            "data": {"reference_sha256": sha256_file(path)},
            "git": git,
        }
        print(domain, record["changed"], len(refs), record["lost"], ceiling["bleu"], flush=True)
        if args.results:
            append_record(args.results, record)


if __name__ == "__main__":
    main()
