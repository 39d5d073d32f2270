"""`ragmt eval`: sacreBLEU BLEU and chrF on each domain's fixed test set.

Scores are computed on detokenised output against the raw references, and each result
carries its sacreBLEU signature so that numbers are comparable across runs and papers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF

from models import pipeline
from models.data import read_lines
from models.output_checks import check_outputs
from models.pipeline import Retrieve
from models.translator import DecodeOptions, Translator

# BLEU's tokenizer by target language where 13a's would score whole clauses as words
# (Chinese has no spaces between words; sacreBLEU's "zh" splits its characters)
BLEU_TOKENIZE = {"zh": "zh"}


def score(hyps: list[str], refs: list[str], target_lang: str | None = None) -> dict[str, Any]:
    """Corpus BLEU and chrF with their signatures; BLEU tokenised as `target_lang` needs."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    bleu, chrf = BLEU(tokenize=BLEU_TOKENIZE.get(target_lang or "")), CHRF()
    b = bleu.corpus_score(hyps, [refs])
    c = chrf.corpus_score(hyps, [refs])
    return {
        "bleu": round(b.score, 2),
        "chrf": round(c.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hyps),
    }


def evaluate(
    translator: Translator,
    data_dir: Path,
    domains: list[str],
    options: DecodeOptions = DecodeOptions(),
    split: str = "test",
    hyp_dir: Path | None = None,
    log: Callable[[str], None] = print,
    retrieve_for: Callable[[str], Retrieve] | None = None,
) -> dict[str, Any]:
    """Translate `<data_dir>/<domain>/<split>.<src>` for each domain through the pipeline
    (`models.pipeline`) and score it.

    `retrieve_for(domain)` gives the domain's retrieval (a memory model reads what it finds);
    the result then also holds the retrieval time and the mean memory gate, and `hyp_dir`
    gets each translation's neighbours and gate (provenance) beside the hypotheses.
    """
    src_lang, tgt_lang = translator.source_lang, translator.target_lang
    results: dict[str, Any] = {}
    for domain in domains:
        src_file = Path(data_dir) / domain / f"{split}.{src_lang}"
        ref_file = Path(data_dir) / domain / f"{split}.{tgt_lang}"
        if not src_file.is_file() or not ref_file.is_file():
            raise FileNotFoundError(f"no {split} set for domain {domain!r} under {data_dir}")
        src, refs = read_lines(src_file), read_lines(ref_file)
        retrieve = retrieve_for(domain) if retrieve_for is not None else None
        done = pipeline.translate(translator, src, options, retrieve)
        out = done.outputs
        extra: dict[str, Any] = {"segments": done.sentences} if options.split_sentences else {}
        if retrieve is not None:
            extra["retrieval_seconds"] = round(done.retrieval_ms / 1000, 1)
            extra["neighbours_per_sentence"] = round(
                sum(len(o.neighbours) for o in out) / max(1, done.sentences), 2
            )
        hyps = [o.text for o in out]
        gates = [o.gate for o in out if o.gate is not None]
        if gates:
            extra["gate_mean"] = round(sum(gates) / len(gates), 4)
        seconds = round(done.decode_ms / 1000, 1)
        extra["checks"] = check_outputs(hyps, src)
        results[domain] = score(hyps, refs, tgt_lang) | {"seconds": seconds} | extra
        gate = f" gate {extra['gate_mean']}" if "gate_mean" in extra else ""
        loops = f" loops {extra['checks']['loops_pct']}%"
        log(f"{domain}: BLEU {results[domain]['bleu']} chrF {results[domain]['chrf']}{gate}{loops}")
        if hyp_dir is not None:
            hyp_dir.mkdir(parents=True, exist_ok=True)
            (hyp_dir / f"{domain}.{split}.hyp.{tgt_lang}").write_text(
                "".join(h + "\n" for h in hyps), encoding="utf-8"
            )
            if retrieve is not None:  # provenance: what each translation read, and its gate
                records = (
                    {"gate": o.gate, "neighbours": [[n.source, n.target] for n in o.neighbours]}
                    for o in out
                )
                (hyp_dir / f"{domain}.{split}.neighbours.jsonl").write_text(
                    "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8",
                )
    return results


def markdown_table(results: dict[str, Any], title: str = "") -> str:
    """One row per domain; the signature is printed once under the table."""
    lines = [f"### {title}", ""] if title else []
    gated = any("gate_mean" in r for r in results.values())
    if gated:
        lines += [
            "| domain | store | sentences | BLEU | chrF | mean gate |",
            "|---|---|---:|---:|---:|---:|",
        ]
    else:
        lines += ["| domain | sentences | BLEU | chrF |", "|---|---:|---:|---:|"]
    for domain, r in results.items():
        if gated:
            gate = f"{r['gate_mean']:.3f}" if "gate_mean" in r else "-"
            lines.append(
                f"| {domain} | {r.get('store', '-')} | {r['sentences']} | {r['bleu']:.2f} "
                f"| {r['chrf']:.2f} | {gate} |"
            )
        else:
            lines.append(f"| {domain} | {r['sentences']} | {r['bleu']:.2f} | {r['chrf']:.2f} |")
    first = next(iter(results.values()), None)
    if first:
        lines += ["", f"BLEU: `{first['bleu_signature']}`", f"chrF: `{first['chrf_signature']}`"]
    return "\n".join(lines) + "\n"


def write_report(results: dict[str, Any], json_path: Path, md_path: Path, title: str) -> None:
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    md_path.write_text(markdown_table(results, title))
