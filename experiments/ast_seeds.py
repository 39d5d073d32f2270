"""Whether two seeds of a sparse model give the same pattern of sharing between languages
(issue 31, SEEDS §2.3): a Mantel test on their `ast-selection` records.

Block numbers mean nothing across seeds (two runs may keep the same sub-network under other
indices), so what can repeat is which languages share much with which: the 28 pairwise
Jaccard overlaps of eight languages. This script correlates one seed's overlaps with the
other's (Pearson r over the language pairs) and asks how often relabelling the second seed's
languages gives an r at least as large: every one of the n! relabellings, so the one-sided p is
exact. A small p says the seeds agree on who shares with whom; a large one that each seed's
pattern is its own.

    python experiments/ast_seeds.py --results experiments/results/ast-bible.jsonl \
        --pair "ffn-sparse-lr30, 5 epochs" "ffn-sparse-lr30-seed2, 5 epochs" [--pair A B ...] \
        [--record]
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

import torch

from models.results import FORMAT, append_new_records, read_records


def overlap_matrix(jaccard: dict[str, float], langs: list[str]) -> torch.Tensor:
    """The symmetric `(n, n)` matrix of a record's "a-b" overlaps (diagonal 0)."""
    index = {lang: i for i, lang in enumerate(langs)}
    m = torch.zeros(len(langs), len(langs), dtype=torch.float64)
    for pair, value in jaccard.items():
        a, b = pair.split("-")
        m[index[a], index[b]] = m[index[b], index[a]] = value
    return m


def mantel(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float, int]:
    """Pearson r between the upper triangles of two symmetric matrices, and the exact
    one-sided p of a relabelling of b's rows and columns reaching it (the identity counted),
    over all n! relabellings. Returns (r, p, relabellings)."""
    n = a.shape[0]
    iu = torch.triu_indices(n, n, offset=1)
    perms = torch.tensor(list(itertools.permutations(range(n))))  # (n!, n)
    x = a[iu[0], iu[1]]
    y = b[perms[:, iu[0]], perms[:, iu[1]]]  # each relabelling's upper triangle
    x = x - x.mean()
    x = x / x.norm().clamp_min(1e-12)
    y = y - y.mean(dim=1, keepdim=True)
    r = (y @ x) / y.norm(dim=1).clamp_min(1e-12)
    observed = float(r[0])  # permutations() starts with the identity
    p = int((r >= observed - 1e-9).sum()) / len(perms)
    return round(observed, 4), round(p, 6), len(perms)


def compare(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """A record comparing two `ast-selection` records of the same languages."""
    langs = sorted({lang for pair in first["jaccard"] for lang in pair.split("-")})
    other = sorted({lang for pair in second["jaccard"] for lang in pair.split("-")})
    if langs != other:
        raise ValueError(f"the records cover other languages: {langs} and {other}")
    r, p, n = mantel(overlap_matrix(first["jaccard"], langs),
                     overlap_matrix(second["jaccard"], langs))  # fmt: skip
    return {
        "format": FORMAT, "kind": "ast-selection-seeds",
        "system": first["system"], "other": second["system"], "languages": langs,
        "pearson_r": r, "mantel_p": p, "relabellings": n,
        "related_gap": [first.get("related_gap"), second.get("related_gap")],
        "jaccard_mean": [first["jaccard_mean"], second["jaccard_mean"]],
    }  # fmt: skip


def find(records: list[dict[str, Any]], system: str) -> dict[str, Any]:
    """The final (not a checkpoint's) `ast-selection` record of `system`."""
    found = [r for r in records
             if r.get("kind") == "ast-selection" and r.get("system") == system
             and r.get("update") is None]  # fmt: skip
    if not found:
        raise SystemExit(f"no ast-selection record of {system!r}")
    return found[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True, help="holds the ast-selection records")
    ap.add_argument("--pair", nargs=2, action="append", required=True, metavar=("A", "B"))
    ap.add_argument("--record", action="store_true", help="append the comparisons to --results")
    args = ap.parse_args()
    records = read_records(args.results)
    compared = []
    for a, b in args.pair:
        compared.append(record := compare(find(records, a), find(records, b)))
        print(f"{a} / {b}: r {record['pearson_r']:+.3f}, exact Mantel p {record['mantel_p']} "
              f"over {record['relabellings']} relabellings")  # fmt: skip
    if args.record:
        append_new_records(args.results, compared)


if __name__ == "__main__":
    main()
