"""Shipped translation memories: packed with their contamination check, verified, and built
into a store at a server's first start (index_builder/memories.py)."""

from __future__ import annotations

import lzma
import threading
from pathlib import Path

import pytest

from index_builder.memories import (
    PAIRS_FILE,
    SHIPPED,
    install_memories,
    pack_memory,
    shipped_memories,
)
from index_builder.store import active_version, list_versions, load_retriever, open_store
from models.artifacts import ArtifactError
from tests.service.conftest import make_store

pytestmark = pytest.mark.unit

TRAIN = [
    ("Cancel", "Abbrechen"),
    ("Save the file", "Die Datei speichern"),
    ("Open a new window", "Ein neues Fenster öffnen"),
    ("Close the dialog", "Den Dialog schließen"),
]


def prepared(root: Path, train=TRAIN, medical_test=("Take two tablets",)) -> Path:
    """A prepared en-de directory: general train/dev/test and a medical test split."""
    data = root / "en-de"
    for domain, split, pairs in (
        ("general", "train", train),
        ("general", "dev", [("Print the page", "Die Seite drucken")]),
        ("general", "test", [("Quit the program", "Das Programm beenden")]),
        ("medical", "test", [(s, "x") for s in medical_test]),
    ):
        d = data / domain
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{split}.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (d / f"{split}.de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    (data / "general" / "train.origin").write_text("ui\n" * len(train), encoding="utf-8")
    return data


def test_pack_records_origins_and_the_held_out_files_it_was_checked_against(tmp_path) -> None:
    out = tmp_path / "memories" / "general.en-de"
    manifest = pack_memory(prepared(tmp_path), "general", out)
    assert manifest["pairs"] == 4 and manifest["origins"] == {"ui": 4}
    assert sorted(manifest["contamination_check"]["held_out_files"]) == [
        "general/dev.en",
        "general/test.en",
        "medical/test.en",
    ]
    (memory,) = shipped_memories(out.parent)
    assert [(p.source, p.target) for p in memory.pairs()] == TRAIN


def test_a_memory_holding_a_test_sentence_of_any_domain_is_refused(tmp_path) -> None:
    train = [*TRAIN, ("take two  TABLETS", "Nehmen Sie zwei Tabletten")]
    out = tmp_path / "memories" / "general.en-de"
    with pytest.raises(ValueError, match="line 5 is a medical/test source"):
        pack_memory(prepared(tmp_path, train), "general", out)
    assert not out.exists()


def test_a_damaged_memory_is_refused_before_it_is_read(tmp_path) -> None:
    out = tmp_path / "memories" / "general.en-de"
    pack_memory(prepared(tmp_path), "general", out)
    (out / PAIRS_FILE).write_bytes(lzma.compress(b"Cancel\tVerbrechen\n"))
    (memory,) = shipped_memories(out.parent)
    with pytest.raises(ArtifactError, match="sha256 differs"):
        memory.pairs()


@pytest.mark.integration
def test_first_start_builds_and_activates_the_memory_once(tmp_path) -> None:
    root = tmp_path / "memories"
    pack_memory(prepared(tmp_path), "general", root / "general.en-de")
    stores = tmp_path / "stores"
    done = install_memories(stores, [("en", "de")], root=root, log=lambda _: None)
    assert [d["domain"] for d in done] == ["general"]
    version = active_version(stores, "general")
    assert version == done[0]["version"]
    hits = load_retriever(open_store(stores / "general")).search(["Cancel"], 1)
    assert (hits[0][0].source, hits[0][0].target) == ("Cancel", "Abbrechen")
    # the second start, and replicas starting together, find it built
    args = (stores, [("en", "de")])
    threads = [
        threading.Thread(target=install_memories, args=args, kwargs={"root": root})
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert list_versions(stores, "general") == [version]


@pytest.mark.integration
def test_no_memory_where_the_operator_has_a_store_the_pair_is_not_served_or_not_wanted(
    tmp_path,
) -> None:
    root = tmp_path / "memories"
    pack_memory(prepared(tmp_path), "general", root / "general.en-de")
    stores = tmp_path / "stores"
    own = make_store(stores, "general", [("a b c", "x y z")], activate=True)
    assert install_memories(stores, [("en", "de")], root=root) == []
    assert list_versions(stores, "general") == [own]
    empty = tmp_path / "other"
    assert install_memories(empty, [("de", "en")], root=root) == []
    assert install_memories(empty, [("en", "de")], domains=["medical"], root=root) == []
    assert not (empty / "general").exists()


def test_the_shipped_general_memory_verifies_and_passed_its_contamination_check() -> None:
    memories = {m.domain: m for m in shipped_memories(SHIPPED)}
    general = memories["general"]
    assert general.languages == ("en", "de")
    check = general.manifest["contamination_check"]
    assert check["passed"] and len(check["held_out_files"]) == 8  # dev and test of 4 domains
    assert set(general.manifest["licenses"]) == set(general.manifest["origins"])
    pairs = general.pairs()
    assert len(pairs) == general.manifest["pairs"] > 100_000
