"""How well each model predicts the reference translations given their sources, teacher-forced:
nats per UTF-8 byte of the reference, the same unit for a byte model and a subword model (a
model's summed log-probability of a reference, its end included, over the reference's bytes).
It measures what a model has learnt before its greedy output is worth scoring: how much the
source helps (clean against noisy sources), and how much a related language's source helps
(zero-shot). Each system is compared with `--baseline` by paired bootstrap over sentences.

    python experiments/reference_nll.py --baseline subword=RUNS/subword-ru/bundle \\
        --system byte-none=RUNS/byte-none-ru/bundle --system byte-ncf=RUNS/byte-ncf-ru/bundle \\
        --test ru:bible=DATA/ru-en/bible/test.ru,DATA/ru-en/bible/test.en \\
        --test uk:zero-shot=DATA/uk-en-test/bible/test.uk,DATA/uk-en-test/bible/test.en \\
        --results experiments/results/byte-transfer.jsonl

A test is LANG:NAME=SOURCES,REFERENCES: LANG is the source language (a language the model was
not trained on is read as it would be zero-shot). One record per system and test ("reference
nll"), with the baseline's value, the difference and its p-value: the share of 1,000
resamples of the sentences in which the system is not better than the baseline.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import numpy as np
import torch

from models.artifacts import sha256_file
from models.bundle import load_bundle
from models.data import read_lines
from models.decoding import sequence_log_probs
from models.results import FORMAT, append_record, git_state
from models.tokenizer import PAD_ID
from models.translator import Translator

BATCH = 32
RESAMPLES = 1000


def _named(spec: str) -> tuple[str, Path]:
    name, _, path = spec.partition("=")
    if not name or not path:
        raise SystemExit(f"{spec!r}: give NAME=BUNDLE")
    return name, Path(path)


def _test(spec: str) -> tuple[str, str, Path, Path]:
    label, _, files = spec.partition("=")
    lang, _, _ = label.partition(":")
    sources, _, refs = files.partition(",")
    if not lang or not sources or not refs:
        raise SystemExit(f"{spec!r}: give LANG:NAME=SOURCES,REFERENCES")
    return label, lang, Path(sources), Path(refs)


def nats_per_sentence(translator: Translator, sources: list[str], refs: list[str]) -> np.ndarray:
    """-log p(reference | source) of each pair, summed over the reference's tokens and end."""
    model, tok = translator.model, translator.tokenizer
    if getattr(model, "directional", False):
        raise SystemExit("a model told the language pair is not scored here")
    out = np.zeros(len(sources))
    order = np.argsort([len(s) for s in sources])  # similar lengths batch with little padding
    for start in range(0, len(order), BATCH):
        rows = order[start : start + BATCH]
        src = [tok.encode(sources[i], translator.source_lang) for i in rows]
        hyps = [tok.encode(refs[i], translator.target_lang) for i in rows]
        batch = torch.full((len(rows), max(map(len, src))), PAD_ID, dtype=torch.long)
        for j, ids in enumerate(src):
            batch[j, : len(ids)] = torch.tensor(ids)
        total, _ = sequence_log_probs(model, batch, hyps)
        out[rows] = -total.double().numpy()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="NAME=BUNDLE")
    ap.add_argument("--system", action="append", required=True, help="NAME=BUNDLE; repeatable")
    ap.add_argument("--test", action="append", required=True, help="LANG:NAME=SOURCES,REFS")
    ap.add_argument("--target-lang", default="en")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--rotated",
        action="store_true",
        help="also score each test with its sources moved one line on: a source unrelated to "
        "its reference, so the difference is what the true source is worth",
    )
    ap.add_argument("--results", type=Path)
    args = ap.parse_args()
    git = git_state()
    named = [_named(args.baseline), *(_named(s) for s in args.system)]
    tests = [_test(t) for t in args.test]
    if args.rotated:
        tests += [(f"{label}, sources rotated", *rest) for label, *rest in tests]
    bundles = {name: load_bundle(path) for name, path in named}
    translators = {name: Translator.from_loaded(b, "none") for name, b in bundles.items()}
    for label, lang, src_path, ref_path in tests:
        sources, refs = read_lines(src_path), read_lines(ref_path)
        if len(sources) != len(refs):
            raise SystemExit(f"{label}: {len(sources)} sources for {len(refs)} references")
        if label.endswith(", sources rotated"):
            sources = sources[1:] + sources[:1]
        ref_bytes = np.array([len(r.encode("utf-8")) for r in refs], dtype=float)
        nats = {}
        for name, translator in translators.items():
            pair = (lang, args.target_lang)
            nats[name] = nats_per_sentence(translator.for_pair(*pair, unseen=True), sources, refs)
        rng = np.random.default_rng(args.seed)
        draws = rng.integers(0, len(refs), size=(RESAMPLES, len(refs)))
        base_name = named[0][0]
        base = nats[base_name].sum() / ref_bytes.sum()
        base_draws = nats[base_name][draws].sum(axis=1) / ref_bytes[draws].sum(axis=1)
        for (name, path), bundle in zip(named, bundles.values(), strict=True):
            value = nats[name].sum() / ref_bytes.sum()
            record = {
                "format": FORMAT, "kind": "reference-nll", "system": name, "label": label,
                "languages": {"source": lang, "target": args.target_lang},
                "bundle": {"path": str(path), "architecture": bundle.manifest.get("architecture"),
                           "parameters": bundle.manifest.get("parameters"),
                           "steps": bundle.manifest.get("training", {}).get("steps")},
                "sentences": len(refs), "reference_bytes": int(ref_bytes.sum()),
                "nats_per_byte": round(float(value), 4),
                "source_sha256": sha256_file(src_path),
                "sources_rotated": label.endswith(", sources rotated"),
                "reference_sha256": sha256_file(ref_path),
                "git": git,
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            }  # fmt: skip
            line = f"{label} {name}: {value:.4f} nats a byte"
            if name != base_name:
                draws_value = nats[name][draws].sum(axis=1) / ref_bytes[draws].sum(axis=1)
                p = float(np.mean(draws_value - base_draws >= 0))  # lower is better
                record |= {"baseline": base_name, "baseline_nats_per_byte": round(float(base), 4),
                           "delta": round(float(value - base), 4), "p_value": p}  # fmt: skip
                line += f" ({value - base:+.4f} against {base_name}, p = {p:.3f})"
            print(line, flush=True)
            if args.results is not None:
                append_record(args.results, record)


if __name__ == "__main__":
    main()
