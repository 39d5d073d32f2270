"""experiments/byte_fusion_gpu.py on the CPU at two updates a training, on a toy Bible: the
work directory it prepares here, and both parts as a lent GPU would run them, down to what
comes back (the archive of records and the returned weights, which join into a bundle that
verifies). The real run needs the GPU; this proves its plumbing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from models.bundle import load_bundle
from tests.test_byte_transfer_script import _toy_bible

pytestmark = [pytest.mark.system, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "experiments" / "byte_fusion_gpu.py"
TINY = {"d_model": 32, "n_heads": 2, "enc_layers": 2, "dec_layers": 1, "d_ff": 64}


def _script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env,
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def test_byte_fusion_gpu_script_prepares_and_runs_both_parts_on_the_cpu(tmp_path: Path) -> None:
    bible = _toy_bible(tmp_path / "bible")
    general = tmp_path / "en-de" / "general"
    general.mkdir(parents=True)
    (general / "test.en").write_text("The file could not be saved.\nHello.\n")
    pack = tmp_path / "pack"
    _script("prepare", "--bible", str(bible), "--data", str(tmp_path / "en-de"), "--pack",
            str(pack), "--sources", "ru", "--pairs", "ru:uk", "--few-shot", "4,8",
            "--test-verses", "5", "--vocab-size", "290", "--no-wheels")  # fmt: skip
    with tarfile.open(pack / "work.tar.xz") as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    work = tmp_path / "unpacked" / "byte-work"
    assert sorted(p.name for p in (work / "spm").iterdir()) == ["m2o.model", "ru-en.model"]
    assert sorted(p.name for p in (work / "data").iterdir()) == [
        "m2o", "ru-en", "uk-en-4", "uk-en-8"
    ]  # fmt: skip
    for system in ("subword", "byte-none", "byte-ncf", "byte-wsf"):
        cfg = json.loads((work / "configs" / f"{system}.json").read_text())
        assert (cfg["model"]["d_model"], cfg["model"]["d_ff"]) == (256, 1024)
        cfg["model"] |= TINY  # the test's size: seconds on a CPU
        if "fusion_layers" in cfg["model"]:
            cfg["model"]["fusion_layers"] = 1
        (work / "configs" / f"{system}.json").write_text(json.dumps(cfg))

    out = tmp_path / "out-m2o"
    _script("run", "--work", str(work), "--out", str(out), "--part", "m2o", "--systems",
            "subword,byte-ncf", "--steps", "2", "--beam", "1", "--device", "cpu",
            "--return", "byte-ncf")  # fmt: skip
    names = sorted(p.name for p in out.iterdir())
    parts = [n for n in names if n.startswith("byte-ncf.model.safetensors.part-")]
    assert names == [*parts, "small.tar.gz"] and parts
    with tarfile.open(out / "small.tar.gz") as tar:
        tar.extractall(tmp_path / "back", filter="data")
    back = tmp_path / "back" / "byte-gpu-m2o"
    records = [json.loads(x) for x in (back / "results.jsonl").read_text().splitlines()]
    seen = {(r["system"], r["domain"]) for r in records}
    systems = ["subword", "byte-ncf", "subword (byte-ncf's training time)"]
    assert seen == {(s, d) for s in systems for d in ("bible", "bible-noise5", "bible-noise10")}
    assert all(r["decoding"]["updates"] == 2 and r["bundle"]["parameters"] > 0 for r in records)
    timed = [json.loads(x) for x in (back / "cpu-decode.jsonl").read_text().splitlines()]
    assert [t["system"] for t in timed] == ["subword", "byte-ncf"]
    assert all(t["sentences"] == 5 and t["p50_ms"] > 0 for t in timed)
    bundle = back / "bundle-byte-ncf"
    (bundle / "model.safetensors").write_bytes(b"".join((out / p).read_bytes() for p in parts))
    assert load_bundle(bundle).manifest["architecture"] == "byte-fusion"  # checksums verified

    out = tmp_path / "out-transfer"
    _script("run", "--work", str(work), "--out", str(out), "--part", "transfer",
            "--pairs", "ru:uk", "--few-shot", "4,8", "--steps", "2", "--beam", "1",
            "--device", "cpu")  # fmt: skip
    with tarfile.open(out / "small.tar.gz") as tar:
        tar.extractall(tmp_path / "back", filter="data")
    lines = (tmp_path / "back" / "byte-gpu-transfer" / "results.jsonl").read_text().splitlines()
    records = {r["system"]: r for r in map(json.loads, lines)}
    expected = {f"{s} ru-en: ru" for s in ("subword", "byte-ncf")}
    expected |= {f"{s} ru-en: uk zero-shot" for s in ("subword", "byte-ncf")}
    expected |= {f"{s} ru-en + {n} uk: uk" for s in ("subword", "byte-ncf") for n in (4, 8)}
    assert set(records) == expected and len(lines) == len(expected)
    zero = records["byte-ncf ru-en: uk zero-shot"]
    assert zero["decoding"]["zero_shot"] == {"trained_pairs": [["ru", "en"]]}
    assert zero["languages"] == {"source": "uk", "target": "en"}
    tuned = load_bundle(work / "runs" / "subword-ru-uk4" / "bundle")
    assert tuned.manifest["pairs"] == [["uk", "en"]]
