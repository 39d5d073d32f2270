"""experiments/paired_bootstrap.py: one record per system and metric, sacreBLEU's own p-value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parent.parent / "experiments" / "paired_bootstrap.py"


def test_records_per_metric_with_the_tokenizer_asked_for(tmp_path: Path) -> None:
    refs = ["the cat sat on the mat today", "a dog ran in the park at noon"] * 20
    good = refs[:]  # the system is exact, the baseline misses words
    bad = ["the cat sat", "a dog ran"] * 20
    for name, lines in (("refs", refs), ("good", good), ("bad", bad)):
        (tmp_path / name).write_text("".join(x + "\n" for x in lines))
    results = tmp_path / "r.jsonl"
    cmd = [sys.executable, str(SCRIPT), "--refs", str(tmp_path / "refs"),
           "--baseline", f"base={tmp_path / 'bad'}", "--system", f"new={tmp_path / 'good'}",
           "--label", "de:bible", "--tokenize", "zh", "--results", str(results)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    records = [json.loads(x) for x in results.read_text().splitlines()]
    assert [(r["metric"], r["system"], r["baseline"]) for r in records] == [
        ("bleu", "new", "base"),
        ("chrf", "new", "base"),
    ]
    assert all(r["delta"] > 0 and r["p_value"] < 0.05 for r in records)
    assert "tok:zh" in records[0]["signature"]
