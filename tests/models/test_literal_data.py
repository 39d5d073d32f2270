"""Training data that teaches the literal masks (models/literal_data.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.literal_data import mask_literal_corpus, mask_literal_lines
from models.literals import mask, unmask

pytestmark = pytest.mark.unit

SOURCES = [
    "Open %s now.",
    "Pay 1,000 dollars.",  # written 1.000 in German: not maskable
    "Read the manual.",
    "Copy 3 files to /tmp/x.",
]
TARGETS = [
    "Öffnen Sie %s jetzt.",
    "Zahlen Sie 1.000 Dollar.",
    "Lesen Sie das Handbuch.",
    "Kopieren Sie 3 Dateien nach /tmp/x.",
]
NEIGHBOURS = [
    [{"pair_id": 7, "source": "Close %s.", "target": "Schließen Sie %s.", "score": 1.0}],
    [],
    [{"pair_id": 8, "source": "The manual.", "target": "Das Handbuch.", "score": 2.0}],
    [
        {"pair_id": 9, "source": "Copy 3 files.", "target": "3 Dateien kopieren.", "score": 3.0},
        {"pair_id": 10, "source": "Open /tmp/x.", "target": "Öffnen Sie /tmp/x.", "score": 1.0},
    ],
]


def test_every_maskable_pair_and_its_neighbours_are_masked_at_share_one() -> None:
    src, tgt, nbs, counts = mask_literal_lines(SOURCES, TARGETS, NEIGHBOURS, 1.0, seed=0)
    assert (counts.lines, counts.with_literals, counts.masked) == (4, 2, 2)
    assert src == ["Open {1} now.", SOURCES[1], SOURCES[2], "Copy {1} files to {2}."]
    assert tgt == [
        "Öffnen Sie {1} jetzt.",
        TARGETS[1],
        TARGETS[2],
        "Kopieren Sie {1} Dateien nach {2}.",
    ]
    # the neighbours show the same masks, spaced as `mask_pair` shows them at translation time
    assert (nbs[0][0]["source"], nbs[0][0]["target"]) == ("Close {1} .", "Schließen Sie {1} .")
    assert [(n["source"], n["target"]) for n in nbs[3]] == [
        ("Copy {1} files.", "{1} Dateien kopieren."),
        ("Open {2} .", "Öffnen Sie {2} ."),
    ]
    assert nbs[3][0]["pair_id"] == 9 and nbs[2] == NEIGHBOURS[2]
    # a masked target restores to the original with the source's literals
    for i in (0, 3):
        assert unmask(tgt[i], mask(SOURCES[i])) == TARGETS[i]


def test_share_zero_changes_nothing_and_a_share_is_seeded() -> None:
    src, tgt, nbs, counts = mask_literal_lines(SOURCES, TARGETS, NEIGHBOURS, 0.0, seed=0)
    assert (src, tgt, nbs, counts.masked) == (SOURCES, TARGETS, NEIGHBOURS, 0)
    many_s, many_t = SOURCES * 50, TARGETS * 50
    a = mask_literal_lines(many_s, many_t, None, 0.5, seed=3)
    b = mask_literal_lines(many_s, many_t, None, 0.5, seed=3)
    assert a == b and 20 < a[3].masked < 80 and a[2] is None


@pytest.mark.parametrize(
    ("sources", "targets", "neighbours", "share", "message"),
    [
        (SOURCES, TARGETS, NEIGHBOURS, 1.5, "share"),
        (SOURCES, TARGETS[:3], None, 0.5, "3 targets"),
        (SOURCES, TARGETS, NEIGHBOURS[:2], 0.5, "2 neighbour records"),
    ],
)
def test_bad_input_is_refused_with_what_was_wrong(sources, targets, neighbours, share, message):
    with pytest.raises(ValueError, match=message):
        mask_literal_lines(sources, targets, neighbours, share, seed=0)


def _prepared(root: Path) -> Path:
    d = root / "general"
    d.mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"languages": {"source": "en", "target": "de"}}))
    (d / "train.en").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    (d / "train.de").write_text("\n".join(TARGETS) + "\n", encoding="utf-8")
    (d / "dev.en").write_text("Save %s.\n", encoding="utf-8")
    (d / "dev.de").write_text("%s speichern.\n", encoding="utf-8")
    return root


def test_a_masked_corpus_is_a_whole_prepared_directory_with_dev_unchanged(tmp_path: Path) -> None:
    data = _prepared(tmp_path / "data")
    nb_file = tmp_path / "nb.jsonl"
    nb_file.write_text(
        "".join(
            json.dumps({"id": i, "source": s, "neighbours": n}) + "\n"
            for i, (s, n) in enumerate(zip(SOURCES, NEIGHBOURS, strict=True))
        )
    )
    out = tmp_path / "masked"
    counts = mask_literal_corpus(data, "general", out, 1.0, 0, nb_file)
    assert counts.masked == 2
    assert (out / "general/train.en").read_text().splitlines()[0] == "Open {1} now."
    assert (out / "general/dev.en").read_text() == "Save %s.\n"  # dev BLEU stays comparable
    records = [json.loads(x) for x in (out / "general/train.neighbours.jsonl").open()]
    assert [r["id"] for r in records] == [0, 1, 2, 3]
    assert records[3]["source"] == "Copy {1} files to {2}."
    assert records[0]["neighbours"][0]["target"] == "Schließen Sie {1} ."
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["languages"] == {"source": "en", "target": "de"}
    assert manifest["literal_masks"]["with_literals"] == 2


def test_a_failed_masking_writes_nothing(tmp_path: Path) -> None:
    data = _prepared(tmp_path / "data")
    nb_file = tmp_path / "nb.jsonl"
    nb_file.write_text(json.dumps({"id": 0, "source": "x", "neighbours": []}) + "\n")
    with pytest.raises(ValueError, match="1 records for a corpus of 4 lines"):
        mask_literal_corpus(data, "general", tmp_path / "masked", 0.5, 0, nb_file)
    assert not (tmp_path / "masked").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
