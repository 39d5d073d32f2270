"""experiments/reference_nll.py on the toy bundle: nats per reference byte are the summed
teacher-forced log-probabilities over the references' bytes, a model that has learnt its task
predicts a reference far better from its own source than from another, and each system is
compared with the baseline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from models.translator import Translator
from tests.toy import toy_pairs

pytestmark = pytest.mark.system

SCRIPT = Path(__file__).resolve().parent.parent / "experiments" / "reference_nll.py"


def _expected_nats(bundle: Path, sources: list[str], refs: list[str]) -> float:
    """-sum log p(ref | source) sentence by sentence, one model call each (no batching)."""
    tr = Translator.from_bundle(bundle)
    total = 0.0
    with torch.inference_mode():
        for s, r in zip(sources, refs, strict=True):
            src = torch.tensor([tr.tokenizer.encode(s, "en")])
            ref = tr.tokenizer.encode(r, "de")
            tgt_in = torch.tensor([[tr.model.config.bos_id, *ref]])
            lp = tr.model.decode(tgt_in, tr.model.encode(src)).log_softmax(-1)[0]
            total -= float(lp[torch.arange(len(ref) + 1), [*ref, tr.model.config.eos_id]].sum())
    return total


def test_nats_per_byte_and_what_the_source_is_worth(bundle: Path, tmp_path: Path) -> None:
    pairs = toy_pairs(40, seed=5)
    sources, refs = [p[0] for p in pairs], [p[1] for p in pairs]
    (tmp_path / "test.en").write_text("".join(s + "\n" for s in sources))
    (tmp_path / "test.de").write_text("".join(r + "\n" for r in refs))
    results = tmp_path / "nll.jsonl"
    cmd = [sys.executable, str(SCRIPT), "--baseline", f"base={bundle}",
           "--system", f"same={bundle}", "--target-lang", "de", "--rotated",
           "--test", f"en:toy={tmp_path / 'test.en'},{tmp_path / 'test.de'}",
           "--results", str(results)]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    records = {
        (r["system"], r["label"]): r for r in map(json.loads, results.read_text().split("\n")[:-1])
    }
    assert set(records) == {
        (s, t) for s in ("base", "same") for t in ("en:toy", "en:toy, sources rotated")
    }
    ref_bytes = sum(len(r.encode()) for r in refs)
    true = records[("base", "en:toy")]
    assert true["reference_bytes"] == ref_bytes and true["kind"] == "reference-nll"
    assert true["nats_per_byte"] == pytest.approx(
        _expected_nats(bundle, sources, refs) / ref_bytes, abs=1e-4
    )
    rotated = records[("base", "en:toy, sources rotated")]
    assert rotated["sources_rotated"] and not true["sources_rotated"]
    assert rotated["nats_per_byte"] > 5 * true["nats_per_byte"]  # the source is what it reads
    same = records[("same", "en:toy")]  # the baseline against itself: no difference
    assert same["baseline"] == "base" and same["delta"] == 0.0 and same["p_value"] == 1.0
    assert "delta" not in true


def test_a_test_without_references_is_refused(bundle: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, str(SCRIPT), "--baseline", f"base={bundle}",
           "--system", f"same={bundle}", "--test", f"en:toy={tmp_path / 'test.en'}"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode != 0 and "give LANG:NAME=SOURCES,REFERENCES" in res.stderr
