"""Toy parallel data: a word-for-word 'translation' a tiny model learns in seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.toy import toy_pairs


def write_pairs(folder: Path, split: str, pairs: list[tuple[str, str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.en").write_text("".join(e + "\n" for e, _ in pairs), encoding="utf-8")
    (folder / f"{split}.de").write_text("".join(d + "\n" for _, d in pairs), encoding="utf-8")


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("toy")
    write_pairs(folder, "train", toy_pairs(3000, seed=1))
    write_pairs(folder, "dev", toy_pairs(40, seed=2))
    write_pairs(folder, "test", toy_pairs(40, seed=3))
    return folder


@pytest.fixture(scope="session")
def toy_tokenizer(toy_data: Path, tmp_path_factory: pytest.TempPathFactory):
    from models.tokenizer import train_tokenizer

    out = tmp_path_factory.mktemp("spm") / "spm.model"
    corpora = [(toy_data / "train.en", "en"), (toy_data / "train.de", "de")]
    return train_tokenizer(corpora, out, vocab_size=300)
