"""`ragmt eval`: sacreBLEU BLEU and chrF on each domain's fixed test set.

Scores are computed on detokenised output against the raw references, and each result
carries its sacreBLEU signature so that numbers are comparable across runs and papers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sacrebleu.metrics import BLEU, CHRF
from torch import Tensor

from models.data import read_lines
from models.segment import segment
from models.translator import DecodeOptions, Translator, join_translations


def score(hyps: list[str], refs: list[str]) -> dict[str, Any]:
    """Corpus BLEU and chrF with their signatures."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    bleu, chrf = BLEU(), CHRF()
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
    neighbours_for: NeighbourSource | None = None,
    split_sentences: bool = False,
) -> dict[str, Any]:
    """Translate `<data_dir>/<domain>/<split>.<src>` for each domain and score it.

    `split_sentences`: a line of several sentences is translated sentence by sentence
    (`models.segment`), each with neighbours of its own, and the pieces joined.

    `neighbours_for(domain, sources)` supplies retrieved pairs per sentence (a memory model
    reads them) and, where retrieval encoded the sentences with the translating model, those
    encodings (else None; see `Translator.translate_detailed`); the result then also holds
    the retrieval time (the encoding included) and the mean memory gate.
    """
    src_lang, tgt_lang = translator.source_lang, translator.target_lang
    results: dict[str, Any] = {}
    for domain in domains:
        src_file = Path(data_dir) / domain / f"{split}.{src_lang}"
        ref_file = Path(data_dir) / domain / f"{split}.{tgt_lang}"
        if not src_file.is_file() or not ref_file.is_file():
            raise FileNotFoundError(f"no {split} set for domain {domain!r} under {data_dir}")
        src, refs = read_lines(src_file), read_lines(ref_file)
        seg = segment(src, split_sentences, src_lang)
        extra: dict[str, Any] = {"segments": len(seg.segments)} if split_sentences else {}
        neighbours = sources = None
        if neighbours_for is not None:
            start = time.time()
            neighbours, sources = neighbours_for(domain, seg.segments)
            extra["retrieval_seconds"] = round(time.time() - start, 1)
            extra["neighbours_per_sentence"] = round(
                sum(map(len, neighbours)) / max(1, len(neighbours)), 2
            )
        start = time.time()
        out = translator.translate_detailed(
            seg.segments,
            options,
            neighbours=neighbours,
            gates=neighbours is not None,
            sources=sources,
        )
        out = join_translations(seg, out)
        if neighbours is not None:
            neighbours = seg.gather(neighbours)
        elapsed = time.time() - start
        hyps = [t.text for t in out]
        gates = [t.gate for t in out if t.gate is not None]
        if gates:
            extra["gate_mean"] = round(sum(gates) / len(gates), 4)
        results[domain] = score(hyps, refs) | {"seconds": round(elapsed, 1)} | extra
        gate = f" gate {extra['gate_mean']}" if "gate_mean" in extra else ""
        log(f"{domain}: BLEU {results[domain]['bleu']} chrF {results[domain]['chrf']}{gate}")
        if hyp_dir is not None:
            hyp_dir.mkdir(parents=True, exist_ok=True)
            (hyp_dir / f"{domain}.{split}.hyp.{tgt_lang}").write_text(
                "".join(h + "\n" for h in hyps), encoding="utf-8"
            )
            if neighbours is not None:  # provenance: what each translation read, and its gate
                records = (
                    {"gate": t.gate, "neighbours": [list(p) for p in found]}
                    for t, found in zip(out, neighbours, strict=True)
                )
                (hyp_dir / f"{domain}.{split}.neighbours.jsonl").write_text(
                    "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8",
                )
    return results


# Per sentence its retrieved (source, target) pairs, and the sentences' encodings or None.
Retrieved = tuple[list[list[tuple[str, str]]], list[Tensor] | None]
NeighbourSource = Callable[[str, list[str]], Retrieved]


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
