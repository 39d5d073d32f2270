"""How much of a reference translation the retrieved targets hold: an upper bound on what a
memory model can copy, measured before any model reads them.

For each sentence: the share of its reference's n-grams (sacreBLEU 13a tokens) that occur in
the union of its first k retrieved targets, and — given the baseline's hypotheses — the share
of the reference words the baseline missed that the neighbours hold (what the memory could
add). A control pairs each sentence with the neighbours of another sentence of the same set
(shifted by half the set), which shows how much overlap comes from common words alone.
Given the sources (`--src`), it also reports the fuzzy match of the best retrieved source, as
translation-memory tools band it: difflib's character ratio 2M/T against the test source.

    python experiments/neighbour_coverage.py --neighbours NB.jsonl --ref test.de \
        [--src test.en] [--hyp baseline.hyp.de] [--k 5] [--name LABEL]

NB.jsonl: `ragmt neighbours` output, or the `<domain>.test.neighbours.jsonl` that `ragmt eval`
writes beside its hypotheses (pairs as [source, target]).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from difflib import SequenceMatcher
from pathlib import Path

from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

_tok = Tokenizer13a()


def words(text: str) -> list[str]:
    return _tok(text).split()


def ngrams(toks: list[str], n: int) -> Counter:
    return Counter(tuple(toks[i : i + n]) for i in range(len(toks) - n + 1))


def union(targets: list[list[str]], n: int) -> Counter:
    """The n-grams of all targets, each at its highest count in any one of them."""
    have: Counter = Counter()
    for t in targets:
        have |= ngrams(t, n)
    return have


def covered(ref: list[str], targets: list[list[str]], n: int) -> tuple[int, int]:
    """(reference n-grams found in any target, reference n-grams), counts clipped as BLEU."""
    want, have = ngrams(ref, n), union(targets, n)
    return sum(min(c, have[g]) for g, c in want.items()), sum(want.values())


def read_pairs(path: Path, k: int) -> list[list[tuple[str, str]]]:
    """(source, target) of the first k neighbours of every line of a neighbours file."""
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            found = json.loads(line)["neighbours"][:k]
            out.append(
                [
                    (nb["source"], nb["target"]) if isinstance(nb, dict) else tuple(nb)
                    for nb in found
                ]
            )
    return out


def read_targets(path: Path, k: int) -> list[list[list[str]]]:
    """Tokenised targets of the first k neighbours of every line of a neighbours file."""
    return [[words(t) for _, t in found] for found in read_pairs(path, k)]


def fuzzy(sources: list[str], neighbour_sources: list[list[str]]) -> dict[str, float]:
    """Shares (percent) of sentences whose best retrieved source matches at >= 0.9, 0.7-0.9
    and below 0.7 (no neighbour: 0), and the mean best match."""
    if len(sources) != len(neighbour_sources):
        raise ValueError(f"{len(sources)} sources but {len(neighbour_sources)} neighbour records")
    best = [
        max((SequenceMatcher(None, s, n, autojunk=False).ratio() for n in found), default=0.0)
        for s, found in zip(sources, neighbour_sources, strict=True)
    ]
    n = max(len(best), 1)
    return {
        "fuzzy_90": 100 * sum(b >= 0.9 for b in best) / n,
        "fuzzy_70_90": 100 * sum(0.7 <= b < 0.9 for b in best) / n,
        "fuzzy_below_70": 100 * sum(b < 0.7 for b in best) / n,
        "fuzzy_mean": sum(best) / n,
    }


def coverage(
    refs: list[str], targets: list[list[list[str]]], hyps: list[str] | None = None
) -> dict[str, float]:
    """Corpus-level shares (percent) of reference 1-, 2- and 4-grams found in the targets."""
    if len(refs) != len(targets):
        raise ValueError(f"{len(refs)} references but {len(targets)} neighbour records")
    res: dict[str, float] = {
        "sentences": len(refs),
        "with_neighbours": 100 * sum(bool(t) for t in targets) / max(len(refs), 1),
    }
    toks = [words(r) for r in refs]
    for n in (1, 2, 4):
        hit = total = 0
        for ref, tg in zip(toks, targets, strict=True):
            h, t = covered(ref, tg, n)
            hit, total = hit + h, total + t
        res[f"cov{n}"] = 100 * hit / max(total, 1)
    if hyps is not None:
        hit = total = 0
        for ref, tg, hyp in zip(toks, targets, hyps, strict=True):
            missed = ngrams(ref, 1) - ngrams(words(hyp), 1)
            have = union(tg, 1)
            hit += sum(min(c, have[g]) for g, c in missed.items())
            total += sum(missed.values())
        res["missed_by_baseline"] = 100 * total / max(sum(len(t) for t in toks), 1)
        res["missed_covered"] = 100 * hit / max(total, 1)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--neighbours", type=Path, required=True, help="`ragmt neighbours` JSONL")
    ap.add_argument("--ref", type=Path, required=True, help="reference targets, one per line")
    ap.add_argument("--src", type=Path, help="the sources of the same lines (fuzzy match)")
    ap.add_argument("--hyp", type=Path, help="the baseline's hypotheses of the same lines")
    ap.add_argument("--k", type=int, default=5, help="neighbours read per sentence")
    ap.add_argument("--name", default="", help="label of the output row")
    args = ap.parse_args()
    refs = args.ref.read_text(encoding="utf-8").splitlines()
    targets = read_targets(args.neighbours, args.k)
    hyps = args.hyp.read_text(encoding="utf-8").splitlines() if args.hyp else None
    real = coverage(refs, targets, hyps)
    half = len(targets) // 2
    control = coverage(refs, targets[half:] + targets[:half])
    row = {"name": args.name, "k": args.k, **real}
    if args.src:
        sources = args.src.read_text(encoding="utf-8").splitlines()
        row |= fuzzy(sources, [[s for s, _ in f] for f in read_pairs(args.neighbours, args.k)])
    print(json.dumps({**row, "control_cov1": control["cov1"], "control_cov4": control["cov4"]}))


if __name__ == "__main__":
    main()
