"""`ragmt data mix` (index_builder/prepare/multilingual.py): many-to-English and
English-to-many sets from a verse-aligned Bible directory."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from index_builder.prepare.multilingual import MixError, mix_bible, noisy
from service.cli import app

pytestmark = pytest.mark.integration
runner = CliRunner()


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
    cmd = ["data", "mix", "--bible", str(bible), "--from", "de,ru", "--to", "en",
           "--out", str(out), "--nt", "--test-verses", "4", "--noise", "0.1"]  # fmt: skip
    result = runner.invoke(app, cmd)
    assert result.exit_code == 0, result.output
    train_src = (out / "bible" / "train.mul").read_text().splitlines()
    train_en = (out / "bible" / "train.en").read_text().splitlines()
    # New Testament verses only (book 44), German and Russian in turn
    assert train_src == ["deutsch 3", "русский 3", "deutsch 4", "русский 4", "deutsch 5",
                         "русский 5"]  # fmt: skip
    assert train_en == ["english 3", "english 3", "english 4", "english 4", "english 5",
                        "english 5"]  # fmt: skip
    assert (out / "bible" / "train.pairs").read_text().splitlines() == ["de-en", "ru-en"] * 3
    dev = (out / "bible" / "dev.mul").read_text().splitlines()
    assert "" not in dev and len(dev) == 11  # the empty German verse is left out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["languages"] == {"source": "mul", "target": "en"}
    assert manifest["pairs"] == [["de", "en"], ["ru", "en"]]
    assert manifest["counts"]["de-en"] == {"train": 3, "dev": 5, "test": 3}
    clean = (out / "bible" / "test.ru").read_text().splitlines()
    noisy_lines = (out / "bible-noise10" / "test.ru").read_text().splitlines()
    assert len(clean) == len(noisy_lines) == 4 and clean != noisy_lines
    assert (out / "bible-noise10" / "test.en").read_text() == (
        out / "bible" / "test.en"
    ).read_text()  # references stay clean
    again = tmp_path / "again"
    assert runner.invoke(app, [*cmd[:9], str(again), *cmd[10:]]).exit_code == 0
    assert (again / "bible-noise10" / "test.ru").read_text().splitlines() == noisy_lines


def test_one_to_many_names_the_mixed_side_and_keeps_each_pair(tmp_path: Path) -> None:
    bible = _bible(tmp_path / "bible")
    manifest = mix_bible(bible, tmp_path / "o2m", ["en"], ["de", "ru"], log=lambda _: None)
    d = tmp_path / "o2m" / "bible"
    assert manifest["languages"] == {"source": "en", "target": "mul"}
    pairs = (d / "train.pairs").read_text().splitlines()
    src, tgt = (d / "train.en").read_text().splitlines(), (d / "train.mul").read_text().splitlines()
    assert len(pairs) == len(src) == len(tgt) == 11  # one German verse missing
    for pair, s, t in zip(pairs, src, tgt, strict=True):
        assert s.split()[-1] == t.split()[-1] and pair in ("en-de", "en-ru")
    assert (d / "test.de").read_bytes() == (bible / "test.de").read_bytes()


def test_a_mix_that_cannot_be_made_says_why(tmp_path: Path) -> None:
    bible = _bible(tmp_path / "bible")
    with pytest.raises(MixError, match="no language 'fr'"):
        mix_bible(bible, tmp_path / "bad", ["en"], ["fr"], log=lambda _: None)
    with pytest.raises(MixError, match="one side must be a single language"):
        mix_bible(bible, tmp_path / "bad", ["en", "de"], ["ru", "de"], log=lambda _: None)
    with pytest.raises(MixError, match="not the prepared Bible"):
        mix_bible(tmp_path, tmp_path / "bad", ["en"], ["de"], log=lambda _: None)
    assert not (tmp_path / "bad").exists()  # nothing half-written


def test_noise_changes_about_its_share_of_characters_and_keeps_spaces() -> None:
    rng = random.Random(0)
    text = "In the beginning God created the heavens and the earth " * 20
    assert noisy(text, 0.0, rng) == text
    out = noisy(text, 0.1, rng)
    assert out.count(" ") == text.count(" ")
    changed = sum(a != b for a, b in zip(out.split(), text.split(), strict=True))
    assert 0.2 < changed / len(text.split()) < 0.7  # words of ~5 letters at 10% a letter
    assert noisy("Éé", 1.0, random.Random(3)) != "Éé"


def test_train_verses_is_a_seeded_sample_and_a_smaller_one_lies_inside_a_larger(
    tmp_path: Path,
) -> None:
    bible = _bible(tmp_path / "bible")
    made = {}
    for n in (2, 4):
        out = tmp_path / f"few{n}"
        cmd = ["data", "mix", "--bible", str(bible), "--from", "de", "--to", "en",
               "--out", str(out), "--train-verses", str(n), "--seed", "7"]  # fmt: skip
        result = runner.invoke(app, cmd)
        assert result.exit_code == 0, result.output
        src = (out / "bible" / "train.de").read_text().splitlines()
        tgt = (out / "bible" / "train.en").read_text().splitlines()
        assert len(src) == len(tgt) == n
        assert all(s.split()[-1] == t.split()[-1] for s, t in zip(src, tgt, strict=True))
        assert src == sorted(src, key=lambda x: int(x.split()[-1]))  # in the Bible's order
        made[n] = set(src)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["train_verses"] == n and manifest["train_seed"] == 7
        assert manifest["counts"]["de-en"]["train"] == n
        assert manifest["counts"]["de-en"]["dev"] == 5  # dev stays whole
    assert made[2] < made[4]
    # 5 German verses have text: asking for more keeps them all, and the counts say so
    more = mix_bible(bible, tmp_path / "few9", ["de"], ["en"], train_verses=9, log=lambda _: None)
    assert more["counts"]["de-en"]["train"] == 5
    other = mix_bible(bible, tmp_path / "s8", ["de"], ["en"], train_verses=2, seed=8,
                      log=lambda _: None)  # fmt: skip
    assert other["train_seed"] == 8
    with pytest.raises(MixError, match="train_verses must be at least 1"):
        mix_bible(bible, tmp_path / "bad", ["de"], ["en"], train_verses=0, log=lambda _: None)
