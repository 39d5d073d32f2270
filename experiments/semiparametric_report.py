"""The Markdown report of experiments/semiparametric-en-de.sh, from its evaluations.

Every number comes from the JSON that `ragmt eval` wrote; the examples are the first three
test sentences of each domain that retrieved anything (not picked by quality), shown with the
pairs the memory read, its gate, the reference and both systems' outputs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _runs(folder: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def bleu_table(runs: dict[str, dict], baseline: str) -> list[str]:
    """One row per (system, domain): store, BLEU, its difference to the baseline, chrF, gate."""
    base = runs.get(baseline, {})
    out = [
        "| system | domain | store | BLEU | Δ baseline | chrF | mean gate | neighbours/sent |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, res in runs.items():
        for domain, r in res.items():
            delta = f"{r['bleu'] - base[domain]['bleu']:+.2f}" if domain in base else "-"
            gate = f"{r['gate_mean']:.3f}" if "gate_mean" in r else "-"
            nbs = f"{r['neighbours_per_sentence']:.2f}" if "neighbours_per_sentence" in r else "-"
            out.append(
                f"| {name} | {domain} | {r.get('store', '-')} | {r['bleu']:.2f} | {delta} "
                f"| {r['chrf']:.2f} | {gate} | {nbs} |"
            )
    return out


def summary_table(runs: dict[str, dict], baseline: str) -> list[str]:
    """BLEU (Δ baseline) by evaluation and domain: the report's overview in one table."""
    base = runs.get(baseline, {})
    # the baseline's domain order (its evaluation covers all), then any it lacks
    domains = list(dict.fromkeys([*base, *(d for res in runs.values() for d in res)]))
    out = ["| evaluation | " + " | ".join(domains) + " |", "|---|" + "---:|" * len(domains)]
    for name, res in runs.items():
        cells = []
        for d in domains:
            r = res.get(d)
            delta = f" ({r['bleu'] - base[d]['bleu']:+.2f})" if r and d in base else ""
            cells.append(f"{r['bleu']:.2f}{delta}" if r else "")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def examples(
    folder: Path, data: Path, runs: dict[str, dict], baseline: str, system: str, per_domain: int
) -> list[str]:
    """The first `per_domain` test sentences per domain with at least one neighbour."""
    out: list[str] = []
    src_lang, tgt_lang = "en", "de"
    manifest = data / "manifest.json"
    if manifest.is_file():
        langs = json.loads(manifest.read_text())["languages"]
        src_lang, tgt_lang = langs["source"], langs["target"]
    for domain, r in runs.get(system, {}).items():
        hyps = folder / f"{system}-hyps"
        records = [json.loads(x) for x in _lines(hyps / f"{domain}.test.neighbours.jsonl")]
        ours = _lines(hyps / f"{domain}.test.hyp.{tgt_lang}")
        theirs = _lines(folder / f"{baseline}-hyps" / f"{domain}.test.hyp.{tgt_lang}")
        src = _lines(data / domain / f"test.{src_lang}")
        ref = _lines(data / domain / f"test.{tgt_lang}")
        out += [f"### {domain} (store {r.get('store', '-')})", ""]
        shown = 0
        for i, rec in enumerate(records):
            if not rec["neighbours"] or shown == per_domain:
                continue
            shown += 1
            out += [
                f"**test line {i + 1}** — gate {rec['gate']:.3f}",
                "",
                f"- source: {src[i]}",
                f"- reference: {ref[i]}",
                f"- baseline: {theirs[i]}",
                f"- {system}: {ours[i]}",
                "- neighbours read (retrieved source → target):",
            ]
            out += [f"  {j + 1}. {s} → {t}" for j, (s, t) in enumerate(rec["neighbours"])]
            out.append("")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval", type=Path, required=True, help="the experiment's eval folder")
    ap.add_argument("--data", type=Path, required=True, help="prepared language-pair folder")
    ap.add_argument("--baseline", default="baseline", help="evaluation name of the baseline")
    ap.add_argument("--system", required=True, help="evaluation whose examples are shown")
    ap.add_argument("--examples", type=int, default=3, help="examples per domain (0: none)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    runs = _runs(args.eval)
    if args.baseline not in runs or args.system not in runs:
        raise SystemExit(f"{args.eval}: needs {args.baseline}.json and {args.system}.json")
    lines = ["## BLEU (Δ baseline)", ""] + summary_table(runs, args.baseline)
    lines += ["", "## Results", ""] + bleu_table(runs, args.baseline)
    first = next(iter(runs[args.baseline].values()))
    lines += ["", f"BLEU: `{first['bleu_signature']}`", f"chrF: `{first['chrf_signature']}`", ""]
    if args.examples > 0:  # they need the hypotheses beside the JSON
        lines += ["## Examples with their neighbours (provenance)", ""]
        lines += examples(args.eval, args.data, runs, args.baseline, args.system, args.examples)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(args.out.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
