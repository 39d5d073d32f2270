"""`benchmarks.bundle_speed` on real bundles: every bundle timed as served and with PyTorch
int8, one record per row, ratios against the first row, and a malformed bundle argument
refused with what was wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from models.bundle import load_bundle
from models.quantize import resolve

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent


def _bench(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "benchmarks.bundle_speed", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_each_bundle_is_timed_as_served_and_in_int8(bundle: Path, tmp_path: Path) -> None:
    sources = tmp_path / "test.en"
    sources.write_text("red house\n\nblue tree one\ngreen two three four\nfive\n")
    results = tmp_path / "speed.jsonl"
    res = _bench("--bundle", f"first={bundle}", "--bundle", f"again={bundle}",
                 "--sources", str(sources), "--pair", "en-de", "--latency-sentences", "3",
                 "--throughput-sentences", "4", "--results", str(results))  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    records = [json.loads(line) for line in results.read_text().splitlines()]
    served = resolve("auto", "cpu", load_bundle(bundle).model)
    decoders = [f"{served} (served)"] + (["int8"] if served != "int8" else [])
    assert [(r["system"], r["decoder"]) for r in records] == [
        (name, d) for name in ("first", "again") for d in decoders
    ]
    assert records[0]["p50_vs_first"] == 1.0 and records[0]["sentences_per_s_vs_first"] == 1.0
    for r in records:
        assert r["format"] == "ragmt-result/1" and r["kind"] == "bundle-speed"
        assert r["languages"] == {"source": "en", "target": "de"}
        assert r["latency_sentences"] == 3 and r["throughput_sentences"] == 4  # blank line left
        assert r["bundle"]["architecture"] == "transformer" and len(r["bundle"]["sha256"]) == 64
        assert r["p50_ms"] > 0 and r["sentences_per_s"] > 0 and r["output_bytes_per_s"] > 0
        assert r["ms_per_output_byte_batch1"] > 0


def test_a_bundle_without_a_name_is_refused(bundle: Path, tmp_path: Path) -> None:
    res = _bench("--bundle", str(bundle), "--sources", str(tmp_path), "--pair", "en-de")
    assert res.returncode == 2 and "give NAME=BUNDLE" in res.stderr
