"""Paired bootstrap resampling (sacreBLEU, 1,000 resamples) of systems against a baseline on
the same test sentences, from the hypothesis files `ragmt eval --out` wrote; one record per
system, test set and metric ("paired-bootstrap", `models.results`).

    python experiments/paired_bootstrap.py --refs data/m2o-4-nt/bible/test.en \\
        --baseline byte-none=runs/m2o/byte-none/eval-ru-hyps/bible.test.hyp.en \\
        --system byte-ncf=runs/m2o/byte-ncf/eval-ru-hyps/bible.test.hyp.en \\
        --label ru:bible --results experiments/results/byte-fusion.jsonl

A difference is significant at p < 0.05 when fewer than 5% of the resamples favour the
baseline (sacreBLEU's p-value).
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from models.artifacts import sha256_file
from models.data import read_lines
from models.results import FORMAT, append_record, git_state


def _named(spec: str) -> tuple[str, Path]:
    name, _, path = spec.partition("=")
    if not path:
        raise SystemExit(f"{spec!r}: give NAME=PATH")
    return name, Path(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refs", type=Path, required=True)
    ap.add_argument("--baseline", required=True, help="NAME=hypothesis file")
    ap.add_argument("--system", action="append", required=True, help="NAME=file; repeatable")
    ap.add_argument("--label", required=True, help="what the test set is, e.g. ru:bible")
    ap.add_argument("--results", type=Path)
    ap.add_argument(
        "--tokenize", default="13a", help="BLEU's tokenizer: 13a, or zh for Chinese references"
    )
    args = ap.parse_args()
    git = git_state()
    refs = read_lines(args.refs)
    named = [_named(args.baseline), *(_named(s) for s in args.system)]
    systems = [(name, read_lines(path)) for name, path in named]
    for name, hyps in systems:
        if len(hyps) != len(refs):
            raise SystemExit(f"{name}: {len(hyps)} hypotheses for {len(refs)} references")
    metrics = {"bleu": BLEU(tokenize=args.tokenize), "chrf": CHRF()}
    test = PairedTest(systems, metrics, [refs], test_type="bs")
    signatures, results = test()
    base = named[0][0]
    for metric in ("BLEU", "chrF2"):  # the names sacreBLEU gives its results
        key = "chrf" if metric == "chrF2" else "bleu"
        scores = results[metric]
        for (name, path), r in zip(named[1:], scores[1:], strict=True):
            print(
                f"{args.label} {key}: {name} {r.score:.2f} vs {base} {scores[0].score:.2f} "
                f"(p = {r.p_value:.4f})"
            )
            if args.results is not None:
                append_record(
                    args.results,
                    {
                        "format": FORMAT,
                        "kind": "paired-bootstrap",
                        "label": args.label,
                        "metric": key,
                        "system": name,
                        "baseline": base,
                        "score": round(r.score, 2),
                        "baseline_score": round(scores[0].score, 2),
                        "delta": round(r.score - scores[0].score, 2),
                        "p_value": r.p_value,
                        "signature": str(signatures[metric]),
                        "hypotheses_sha256": sha256_file(path),
                        "baseline_sha256": sha256_file(named[0][1]),
                        "references_sha256": sha256_file(args.refs),
                        "git": git,
                        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                    },
                )


if __name__ == "__main__":
    main()
