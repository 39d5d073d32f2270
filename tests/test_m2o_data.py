"""experiments/m2o_data.py: a many-to-English set from a verse-aligned Bible directory."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parent.parent / "experiments" / "m2o_data.py"
spec = importlib.util.spec_from_file_location("m2o_data", SCRIPT)
m2o = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m2o)  # type: ignore[union-attr]


def _bible(root: Path) -> Path:
    """Three verses of an Old Testament book and three of a New Testament one, in en/de/ru;
    one German verse missing (empty)."""
    root.mkdir()
    ids = ["02.001.001", "02.001.002", "02.001.003", "44.001.001", "44.001.002", "44.001.003"]
    text = {
        "en": [f"english {i}" for i in range(6)],
        "de": ["deutsch 0", "", "deutsch 2", "deutsch 3", "deutsch 4", "deutsch 5"],
        "ru": [f"русский {i}" for i in range(6)],
    }
    for split in ("train", "dev", "test"):
        (root / f"{split}.ids").write_text("".join(i + "\n" for i in ids))
        for lang, lines in text.items():
            (root / f"{split}.{lang}").write_text("".join(t + "\n" for t in lines))
    (root / "manifest.json").write_text(
        json.dumps({"languages": ["de", "en", "ru"], "split": {"books": {}}})
    )
    return root


def test_sources_are_interleaved_empty_verses_dropped_and_noise_is_seeded(tmp_path: Path) -> None:
    bible = _bible(tmp_path / "bible")
    out = tmp_path / "m2o"
    cmd = [sys.executable, str(SCRIPT), "--bible", str(bible), "--langs", "de,ru",
           "--out", str(out), "--nt", "--test-verses", "4", "--noise", "0.1"]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    train_src = (out / "bible" / "train.mul").read_text().splitlines()
    train_en = (out / "bible" / "train.en").read_text().splitlines()
    # New Testament verses only (book 44), German and Russian in turn
    assert train_src == ["deutsch 3", "русский 3", "deutsch 4", "русский 4", "deutsch 5",
                         "русский 5"]  # fmt: skip
    assert train_en == [
        "english 3",
        "english 3",
        "english 4",
        "english 4",
        "english 5",
        "english 5",
    ]
    dev = (out / "bible" / "dev.mul").read_text().splitlines()
    assert "" not in dev and len(dev) == 11  # the empty German verse is left out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["pairs"] == [["de", "en"], ["ru", "en"]]
    assert manifest["counts"]["de"] == {"train": 3, "dev": 5, "test": 3}
    clean = (out / "bible" / "test.ru").read_text().splitlines()
    noisy = (out / "bible-noise10" / "test.ru").read_text().splitlines()
    assert len(clean) == len(noisy) == 4
    assert (out / "bible-noise10" / "test.en").read_text() == (
        out / "bible" / "test.en"
    ).read_text()
    again = tmp_path / "again"
    subprocess.run([*cmd[:7], str(again), *cmd[8:]], check=True, capture_output=True)
    assert (again / "bible-noise10" / "test.ru").read_text().splitlines() == noisy


def test_noise_changes_about_its_share_of_characters_and_keeps_spaces() -> None:
    rng = random.Random(0)
    text = "In the beginning God created the heavens and the earth " * 20
    assert m2o.noisy(text, 0.0, rng) == text
    out = m2o.noisy(text, 0.1, rng)
    assert out.count(" ") == text.count(" ")
    changed = sum(a != b for a, b in zip(out.split(), text.split(), strict=True))
    assert 0.2 < changed / len(text.split()) < 0.7  # words of ~5 letters at 10% a letter
    assert m2o.noisy("Éé", 1.0, random.Random(3)) != "Éé"
