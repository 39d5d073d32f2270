"""Retrieval stores: round trip, versions and ACTIVE, and refusal of damaged stores."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from index_builder import store as store_mod
from index_builder.columns import PairTexts
from index_builder.corpus import CorpusError, Pair
from index_builder.retrieval.idf import IdfNgramParams, IdfNgramRetriever, IdfSentenceRetriever
from index_builder.store import (
    ACTIVE,
    Method,
    active_version,
    build_store,
    corpus_sha256,
    list_versions,
    load_retriever,
    open_store,
    set_active,
)
from models.artifacts import ArtifactError, write_manifest

pytestmark = pytest.mark.unit

SOURCES = [
    "Open the file menu.",
    "Close the file.",
    "Save the file as a new name.",
    "The menu bar shows the file menu.",
    "Blessed are the meek, for they shall inherit the earth.",
    "Grüße aus Köln — ünïcödé",
]
PAIRS = [Pair(s, f"DE {s}") for s in SOURCES]
QUERIES = ["open the file", "the meek shall inherit", "save as", "köln", "nothing here"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("stores")
    return {
        "idf-sentence": build_store(PAIRS, "docs", "idf-sentence", out),
        "idf-ngram": build_store(PAIRS, "docs", "idf-ngram", out, {"widths": [2, 4]}),
    }


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "docs" / src.name
    shutil.copytree(src, dst)
    return dst


def test_round_trip_equals_in_memory(stores: dict[str, Path]) -> None:
    texts = PairTexts.from_strings(SOURCES, [p.target for p in PAIRS])
    in_memory = {
        "idf-sentence": IdfSentenceRetriever.build(texts),
        "idf-ngram": IdfNgramRetriever.build(texts, IdfNgramParams(widths=(4, 2))),
    }
    for method, path in stores.items():
        loaded = load_retriever(path)
        assert type(loaded) is type(in_memory[method])
        want = in_memory[method].search(QUERIES, 3)
        assert loaded.search(QUERIES, 3) == want
        assert any(want)  # not vacuous


def test_manifest_and_pairs(stores: dict[str, Path]) -> None:
    s = open_store(stores["idf-ngram"])
    m = s.manifest
    assert (m["kind"], m["format_version"], m["method"], m["domain"]) == (
        "retrieval-store",
        1,
        "idf-ngram",
        "docs",
    )
    assert m["version"] == s.root.name
    assert m["languages"] == {"source": "en", "target": "de"}
    assert m["pairs"] == len(PAIRS)
    assert m["params"] == {"widths": [4, 2], "all_positions": False}
    assert m["items"] == m["counts"]["items_w4"] + m["counts"]["items_w2"] > len(PAIRS)
    assert m["corpus_sha256"] == corpus_sha256(PAIRS)
    assert m["model_sha256"] is None and m["faiss_factory"] is None
    assert set(m["files"]) == {p.name for p in s.root.iterdir() if p.name != "manifest.json"}
    assert list(s.pairs.sources) == SOURCES
    assert s.pairs.targets[5] == "DE Grüße aus Köln — ünïcödé"
    assert not isinstance(s.pairs.sources._blob, np.memmap)  # read into memory, not mapped


def test_arrays_are_plain_npy(stores: dict[str, Path]) -> None:
    for path in stores.values():
        for f in path.iterdir():
            assert f.suffix in {".npy", ".bin", ".json"}, f
            if f.suffix == ".npy":
                arr = np.load(f, allow_pickle=False)  # raises on an object (pickled) array
                assert arr.dtype.kind in "iuf"


def test_versions_and_active(tmp_path: Path) -> None:
    a = build_store(PAIRS, "docs", "idf-sentence", tmp_path)
    b = build_store(PAIRS[:3], "docs", "idf-sentence", tmp_path)
    assert a.name < b.name  # ids sort by build time
    assert list_versions(tmp_path, "docs") == [a.name, b.name]
    assert active_version(tmp_path, "docs") is None
    set_active(tmp_path, "docs", a.name)
    assert active_version(tmp_path, "docs") == a.name
    assert (tmp_path / "docs" / ACTIVE).read_text() == a.name + "\n"
    assert open_store(tmp_path / "docs").root == a  # a domain directory opens its ACTIVE
    set_active(tmp_path, "docs", b.name)
    assert open_store(tmp_path / "docs").manifest["pairs"] == 3
    assert not [p for p in (tmp_path / "docs").iterdir() if p.name.startswith(".")]
    with pytest.raises(ArtifactError):
        set_active(tmp_path, "docs", "20000101T000000.000Z-deadbeef")
    assert active_version(tmp_path, "docs") == b.name  # unchanged by the failed call


def test_set_active_refuses_other_domain(stores: dict[str, Path], tmp_path: Path) -> None:
    shutil.copytree(stores["idf-sentence"], tmp_path / "bible" / "v1")
    with pytest.raises(ArtifactError, match="not 'bible'"):
        set_active(tmp_path, "bible", "v1")


def test_dangling_active_pointer(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / ACTIVE).write_text("gone\n")
    with pytest.raises(ArtifactError, match="not a store of docs"):
        active_version(tmp_path, "docs")


@pytest.mark.parametrize("victim", ["w4.indices.npy", "sources.bin", "vocab.offsets.npy"])
def test_tampered_file_refused(stores: dict[str, Path], tmp_path: Path, victim: str) -> None:
    path = _copy(stores["idf-ngram"], tmp_path)
    data = bytearray((path / victim).read_bytes())
    data[-1] ^= 0x01
    (path / victim).write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=f"checksum mismatch for {victim}"):
        load_retriever(path)


def test_truncated_and_missing_files_refused(stores: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(stores["idf-sentence"], tmp_path)
    blob = path / "sentences.indices.npy"
    blob.write_bytes(blob.read_bytes()[:100])
    with pytest.raises(ArtifactError, match="checksum mismatch for sentences.indices.npy"):
        open_store(path)
    blob.unlink()
    with pytest.raises(ArtifactError, match="indices.npy listed in the manifest is missing"):
        open_store(path)
    (path / "manifest.json").write_text('{"kind": "retrieval-st')
    with pytest.raises(ArtifactError, match="not valid JSON"):
        open_store(path)


def _edit_manifest(path: Path, **changes: object) -> None:
    m = json.loads((path / "manifest.json").read_text())
    m.update(changes)
    (path / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kind": "model-bundle"}, "kind is 'model-bundle', expected 'retrieval-store'"),
        ({"format_version": 2}, "format_version 2 is newer than this ragmt supports"),
        ({"method": "bm25"}, "unknown retrieval method 'bm25'"),
        ({"token_view": "sentencepiece"}, "token view 'sentencepiece'"),
        ({"pairs": 7}, "6 pairs, manifest says 7"),
    ],
)
def test_wrong_manifest_refused(
    stores: dict[str, Path], tmp_path: Path, changes: dict, message: str
) -> None:
    path = _copy(stores["idf-sentence"], tmp_path)
    _edit_manifest(path, **changes)
    with pytest.raises(ArtifactError, match=message):
        load_retriever(path)


def test_pickled_array_refused_even_with_matching_checksum(
    stores: dict[str, Path], tmp_path: Path
) -> None:
    path = _copy(stores["idf-sentence"], tmp_path)
    np.save(path / "idf.npy", np.array([{"x": 1}], dtype=object), allow_pickle=True)
    m = json.loads((path / "manifest.json").read_text())
    m.pop("files")
    write_manifest(path, m)  # checksums now match the hostile file
    with pytest.raises(ArtifactError, match="idf.npy: not a plain numeric array"):
        load_retriever(path)


@pytest.mark.parametrize(
    ("victim", "damage", "message"),
    [
        ("w2.owner.npy", lambda a: a + 100, "w2.owner.npy: .* outside the ids 0..5"),
        ("w2.indices.npy", lambda a: a[::-1].copy(), "not sorted"),
        ("w2.indices.npy", lambda a: a + 10**6, "w2.indices.npy: .* outside the ids"),
        ("w2.indptr.npy", lambda a: a[:-1], "w2.indptr.npy: .* expected"),
    ],
)
def test_inconsistent_arrays_refused(
    stores: dict[str, Path], tmp_path: Path, victim: str, damage: object, message: str
) -> None:
    """Checksums only prove the files are the ones written; the arrays are checked too."""
    path = _copy(stores["idf-ngram"], tmp_path)
    np.save(path / victim, damage(np.load(path / victim)))  # type: ignore[operator]
    m = json.loads((path / "manifest.json").read_text())
    m.pop("files")
    write_manifest(path, m)
    with pytest.raises(ArtifactError, match=f"inconsistent idf-ngram store: .*{message}"):
        load_retriever(path)


def test_build_refuses_before_writing(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="empty corpus"):
        build_store([], "docs", "idf-sentence", tmp_path)
    with pytest.raises(ValueError, match="invalid domain"):
        build_store(PAIRS, "../evil", "idf-sentence", tmp_path)
    with pytest.raises(ValueError, match="unknown method"):
        build_store(PAIRS, "docs", "bm25", tmp_path)
    with pytest.raises(ValueError, match="unknown idf-ngram parameter"):
        build_store(PAIRS, "docs", "idf-ngram", tmp_path, {"stride": 2})
    assert list(tmp_path.rglob("*")) in ([], [tmp_path / "docs"])
    assert list_versions(tmp_path, "docs") == []


def test_interrupted_build_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*args: object) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setitem(store_mod.METHODS, "idf-sentence", Method(explode, lambda s: None))
    with pytest.raises(KeyboardInterrupt):
        build_store(PAIRS, "docs", "idf-sentence", tmp_path)
    assert list((tmp_path / "docs").iterdir()) == []
