"""experiments/byte_transfer.py end to end on a toy Bible with tiny budgets: both systems
trained on one language into English, scored there and zero-shot on a related one, fine-tuned
on nested few-shot samples and scored again, every score a record; a second run redoes
nothing. The real run takes hours; this proves its plumbing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.system, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "experiments" / "byte_transfer.py"
BODY = {"d_model": 32, "n_heads": 2, "enc_layers": 1, "dec_layers": 1, "d_ff": 64,
        "dropout": 0.0}  # fmt: skip
BUDGET = {"max_tokens": 2048, "lr": 0.003, "warmup": 5, "save_every": 5, "eval_every": 10**6,
          "dev_sentences": 4, "average_last": 1, "bf16": False, "max_epochs": 1}  # fmt: skip
TAG = ", toy"  # ends every label
WORDS = ["red", "house", "blue", "tree", "green", "one", "two", "three", "four", "five"]


def _toy_bible(root: Path) -> Path:
    """Verses of a toy language pair: "ru" and "uk" write each English word with their own
    ending, so what is learnt from one carries over to the other."""
    root.mkdir(parents=True)
    sizes = {"train": 60, "dev": 6, "test": 8}
    for split, n in sizes.items():
        verses = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(3)) for i in range(n)]
        book = 41 if split == "train" else 1
        ids = [f"{book:02d}.001.{i + 1:03d}" for i in range(n)]
        (root / f"{split}.ids").write_text("".join(i + "\n" for i in ids))
        for lang, ending in (("en", ""), ("ru", "ov"), ("uk", "iv")):
            lines = [" ".join(w + ending for w in v.split()) for v in verses]
            (root / f"{split}.{lang}").write_text("".join(x + "\n" for x in lines))
    (root / "manifest.json").write_text(
        json.dumps({"languages": ["en", "ru", "uk"], "split": {"books": {}}})
    )
    return root


def test_byte_transfer_runs_end_to_end_on_a_toy_bible(tmp_path: Path) -> None:
    bible = _toy_bible(tmp_path / "bible")
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "subword-m2o.json").write_text(json.dumps({"model": BODY, **BUDGET}))
    byte = {"arch": "byte-fusion",
            "model": {**BODY, "enc_layers": 2, "fusion": "ncf", "fusion_layers": 1}}  # fmt: skip
    (configs / "byte-ncf-m2o.json").write_text(json.dumps({**byte, **BUDGET}))
    work, results = tmp_path / "work", tmp_path / "results.jsonl"
    cmd = [sys.executable, str(SCRIPT), "--bible", str(bible), "--work", str(work),
           "--pairs", "ru:uk", "--few-shot", "4,8", "--test-verses", "5", "--base-epochs", "1",
           "--finetune-steps", "3", "--config-dir", str(configs), "--vocab-size", "290",
           "--noise", "0.2", "--threads", "1", "--base-steps", "byte-ncf=4",
           "--max-tokens", "1024", "--tag", TAG, "--results", str(results)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    records = [json.loads(line) for line in results.read_text().splitlines()]
    got = {(r["system"], r["languages"]["source"], r["domain"]): r for r in records}
    systems = ("subword", "byte-ncf")
    expected = (
        {(f"{s} ru-en: ru{TAG}", "ru", d) for s in systems for d in ("bible", "bible-noise20")}
        | {(f"{s} ru-en: uk zero-shot{TAG}", "uk", "bible") for s in systems}
        | {(f"{s} ru-en + {n} uk: uk{TAG}", "uk", "bible") for s in systems for n in (4, 8)}
    )
    assert set(got) == expected and len(records) == len(expected)
    zero = got[(f"byte-ncf ru-en: uk zero-shot{TAG}", "uk", "bible")]
    assert zero["decoding"]["zero_shot"] == {"trained_pairs": [["ru", "en"]]}
    assert "zero_shot" not in got[(f"byte-ncf ru-en + 4 uk: uk{TAG}", "uk", "bible")]["decoding"]
    # the noisy copy is of the sources alone: its references are the clean test's
    noisy = work / "data" / "ru-en" / "bible-noise20"
    clean = work / "data" / "ru-en" / "bible"
    assert (noisy / "test.en").read_text() == (clean / "test.en").read_text()
    assert (noisy / "test.ru").read_text() != (clean / "test.ru").read_text()
    base_cfg = json.loads((work / "configs" / "byte-ncf-base.json").read_text())
    assert (base_cfg["threads"], base_cfg["max_tokens"], base_cfg["max_steps"]) == (1, 1024, 4)
    assert "max_epochs" not in base_cfg
    # updates, not epochs, bound that system's base training; the other keeps its epoch
    manifest = work / "runs" / "byte-ncf-ru" / "bundle" / "manifest.json"
    assert json.loads(manifest.read_text())["training"]["steps"] == 4
    assert all(r["sentences"] == 5 for r in records)
    # the few-shot sets are nested, and the fine-tuned subword model kept the ru-en vocabulary
    few = {n: (work / "data" / f"uk-en-{n}" / "bible" / "train.uk").read_text().splitlines()
           for n in (4, 8)}  # fmt: skip
    assert len(few[4]) == 4 and set(few[4]) < set(few[8])
    runs = work / "runs"
    tuned = (runs / "subword-ru-uk4" / "bundle" / "spm.model").read_bytes()
    assert tuned == (runs / "subword-ru" / "bundle" / "spm.model").read_bytes()
    tuned_manifest = json.loads((runs / "byte-ncf-ru-uk8" / "bundle" / "manifest.json").read_text())
    assert tuned_manifest["pairs"] == [["uk", "en"]]
    assert tuned_manifest["training"]["steps"] == 3
    # again: every bundle and score is there, so nothing is trained or scored twice
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "+ " not in res.stdout and len(results.read_text().splitlines()) == len(records)
