"""Score a `ragmt eval` hypotheses folder (`<out>-hyps`) again, into the JSON `ragmt eval` writes.

Session 15 found that `ragmt eval --out NAME` cut NAME at its last dot ("…-lp2.0-dev" wrote
"…-lp2.json"), so evaluations that differed only after the dot overwrote each other's JSON;
their hypothesis folders kept the full name. This rebuilds each JSON from the folder with the
same sacreBLEU metrics: BLEU, chrF and their signatures, the mean memory gate (from the
provenance file), and the segment count when sentences were split. Timings are not in the
hypotheses and are left out.

    python experiments/rescore_hyps.py --data $DATA --hyps $SP/eval/NAME-hyps \
      [--store-label domain=LABEL ...] [--split-sentences] --out $SP/eval/NAME.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from models.evaluate import score
from models.segment import segment


def rescore(
    hyps: Path, data: Path, split_sentences: bool, labels: dict[str, str]
) -> dict[str, dict]:
    """One result per `<domain>.<split>.hyp.<lang>` file in `hyps`."""
    results: dict[str, dict] = {}
    order = ["general", "bible", "medical", "software-docs"]  # ragmt eval's; others after

    def rank(f: Path) -> tuple[int, str]:
        domain = f.name.split(".")[0]
        return (order.index(domain) if domain in order else len(order), domain)

    for hyp_file in sorted(hyps.glob("*.hyp.*"), key=rank):
        domain, split, _, lang = hyp_file.name.rsplit(".", 3)
        src_lang = "en" if lang == "de" else "de"
        refs = (data / domain / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
        out = hyp_file.read_text(encoding="utf-8").splitlines()
        r = score(out, refs)
        if split_sentences:
            src = (data / domain / f"{split}.{src_lang}").read_text(encoding="utf-8").splitlines()
            r["segments"] = len(segment(src).segments)
        provenance = hyps / f"{domain}.{split}.neighbours.jsonl"
        if provenance.is_file():
            records = [json.loads(x) for x in provenance.read_text(encoding="utf-8").splitlines()]
            gates = [rec["gate"] for rec in records if rec["gate"] is not None]
            if gates:
                r["gate_mean"] = round(sum(gates) / len(gates), 4)
        if domain in labels:
            r["store"] = labels[domain]
        r["rescored_from_hyps"] = True
        results[domain] = r
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="prepared language-pair folder")
    ap.add_argument("--hyps", type=Path, required=True, help="an `<out>-hyps` folder")
    ap.add_argument("--split-sentences", action="store_true", help="the run split sentences")
    ap.add_argument("--store-label", action="append", default=[], help="domain=label")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    labels = dict(x.split("=", 1) for x in args.store_label)
    results = rescore(args.hyps, args.data, args.split_sentences, labels)
    if not results:
        raise SystemExit(f"no hypothesis files in {args.hyps}")
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(" ".join(f"{d} {r['bleu']}" for d, r in results.items()))


if __name__ == "__main__":
    main()
