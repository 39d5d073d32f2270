"""Stores against hostile disks and hostile builders: an opened store outlives its files, values
are validated on open, and a server with a key opens only stores signed with it."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np
import pytest

from index_builder.columns import TextColumn
from index_builder.corpus import Pair
from index_builder.store import (
    SIGNATURE,
    build_store,
    load_retriever,
    manifest_signature,
    open_store,
    set_active,
    sign_store,
)
from models.artifacts import ArtifactError, write_manifest
from tests.toy import gloss, toy_pairs

pytestmark = pytest.mark.unit

SOURCES = [
    "Open the file menu.",
    "Close the file.",
    "Save the file as a new name.",
    "The menu bar shows the file menu.",
    "The database stores the file.",
    "Grüße aus Köln — ünïcödé",
]
PAIRS = [Pair(s, f"DE {s}") for s in SOURCES]
QUERIES = ["open the file", "the database", "save as", "köln"]
KEY = b"a key the builder and the servers share"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("stores")
    return {
        "idf-sentence": build_store(PAIRS, "docs", "idf-sentence", out),
        "idf-ngram": build_store(PAIRS, "docs", "idf-ngram", out, {"widths": [2, 4]}),
        "signed": build_store(PAIRS, "docs", "idf-sentence", out, signing_key=KEY),
    }


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "docs" / src.name
    shutil.copytree(src, dst)
    return dst


def _rewrite(path: Path, name: str, edit: Callable[[np.ndarray], np.ndarray]) -> None:
    """Edit an array of a store and recompute its checksums, as a deliberate editor would;
    the rest of the manifest (a signature included) is kept."""
    np.save(path / name, edit(np.load(path / name).copy()), allow_pickle=False)
    _recompute_checksums(path)


def _recompute_checksums(path: Path) -> None:
    m = json.loads((path / "manifest.json").read_text())
    m.pop("files")
    write_manifest(path, m)


# --- an opened store outlives its files --------------------------------------------------

# Run in a child process: a store that maps its files dies of SIGBUS here, and the suite
# reports the signal instead of dying with it.
_SURVIVE = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    from index_builder.store import load_retriever, open_store

    stores, queries = json.loads(sys.argv[1]), json.loads(sys.argv[2])

    for path, model in stores:
        store = open_store(Path(path))
        served = load_retriever(store, model)
        want = served.search(queries, 3)
        pairs = list(zip(store.pairs.sources, store.pairs.targets))
        assert any(want), "vacuous"
        files = sorted(Path(path).iterdir())
        size = {f: f.stat().st_size for f in files}

        def truncate(f):  # a mapped file would SIGBUS on the next read of a page
            os.truncate(f, 0)

        def overwrite(f):
            with open(f, "r+b") as fh:  # in place: the same inode, other bytes
                fh.write(os.urandom(size[f]))

        for damage in (truncate, overwrite, Path.unlink):
            for f in files:
                damage(f)
            assert served.search(queries, 3) == want, damage.__name__
            assert load_retriever(store, model).search(queries, 3) == want, damage.__name__
            assert list(zip(store.pairs.sources, store.pairs.targets)) == pairs
    print("ok")
    """
)


def _survives(stores: list[tuple[Path, Path | None]], queries: list[str]) -> None:
    arg = json.dumps([[str(p), None if m is None else str(m)] for p, m in stores])
    res = subprocess.run(
        [sys.executable, "-c", _SURVIVE, arg, json.dumps(queries)],
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert res.returncode == 0 and res.stdout.strip() == "ok", (
        f"exit {res.returncode} (negative: killed by that signal)\n{res.stderr[-3000:]}"
    )


@pytest.mark.integration
def test_opened_store_outlives_its_files(stores: dict[str, Path], tmp_path: Path) -> None:
    """Overwritten in place, truncated, deleted: the opened store answers as before."""
    copies = [_copy(stores[m], tmp_path / m) for m in ("idf-sentence", "idf-ngram")]
    _survives([(p, None) for p in copies], QUERIES)


@pytest.mark.integration
def test_opened_dense_store_outlives_its_files(bundle: Path, tmp_path: Path) -> None:
    pairs = [Pair(s, gloss(s)) for s in dict.fromkeys(s for s, _ in toy_pairs(120, 11))]
    path = build_store(pairs, "toy", "dense-ngram", tmp_path, {"widths": [2]}, model=bundle)
    _survives([(path, bundle)], ["red tree two house", "one two three"])


def test_store_is_held_in_memory_once(stores: dict[str, Path]) -> None:
    """The texts are the bytes read (no copy), arrays read-only: RAM is about the files' size."""
    s = open_store(stores["idf-ngram"])
    blob = s.pairs.sources._blob
    assert isinstance(blob.base, bytes) and len(blob.base) == len(blob)  # a view of the read
    held = sum(a.nbytes for a in s.arrays.values())
    held += sum(c._blob.nbytes + c._offsets.nbytes for c in s.columns.values())
    on_disk = sum(f.stat().st_size for f in s.root.iterdir() if f.name != "manifest.json")
    assert on_disk - 128 * len(s.manifest["files"]) <= held <= on_disk  # less the npy headers
    idf = s.array("idf")
    with pytest.raises(ValueError, match="read-only"):
        idf[0] = 1.0


# --- values are validated on open --------------------------------------------------------


def _set(i: int, value: float) -> Callable[[np.ndarray], np.ndarray]:
    def edit(a: np.ndarray) -> np.ndarray:
        a[i] = value
        return a

    return edit


@pytest.mark.parametrize(
    ("victim", "edit", "message"),
    [
        ("idf.npy", _set(3, np.inf), r"idf.npy: 1 value is not finite \(inf at index 3\)"),
        ("idf.npy", _set(5, np.nan), r"idf.npy: 1 value is not finite \(nan at index 5\)"),
        ("idf.npy", _set(2, -0.5), r"idf.npy: 1 value is negative \(-0.5 at index 2\)"),
        ("idf.npy", lambda a: a[:-1], r"idf.npy: \d+ float64 values for \d+ vocab.bin terms"),
        ("idf.npy", lambda a: a.astype(np.complex128), "idf.npy: not a plain numeric array"),
        ("sentences.indices.npy", _set(0, 6), r"indices.npy: 1 value is outside the ids 0..5 \(6"),
        (
            "sentences.indices.npy",
            _set(1, -1),
            r"indices.npy: 1 value is outside .* \(-1 at index 1",
        ),
        ("sentences.indptr.npy", _set(1, 10**6), "sentences.indptr.npy: decreases at index 2"),
        ("sources.offsets.npy", _set(2, 1), "sources.offsets.npy: offsets decrease at index 2"),
        ("sources.offsets.npy", _set(-1, 10), "sources.offsets.npy: offsets end at 10, not at the"),
        ("targets.offsets.npy", lambda a: a.astype(np.int32), "targets.offsets.npy: .* int64"),
    ],
)
def test_bad_values_refused_on_open(
    stores: dict[str, Path], tmp_path: Path, victim: str, edit: Callable, message: str
) -> None:
    """Checksums recomputed, as a deliberate editor would: the values themselves are refused,
    by `open_store`, so activation (`set_active`) refuses them too, naming the file."""
    path = _copy(stores["idf-sentence"], tmp_path)
    _rewrite(path, victim, edit)
    with pytest.raises(ArtifactError, match=message):
        open_store(path)
    with pytest.raises(ArtifactError, match=message):
        set_active(tmp_path, "docs", path.name)
    assert not (tmp_path / "docs" / "ACTIVE").exists()


@pytest.mark.parametrize(
    ("victim", "edit", "message"),
    [
        (
            "w4.owner.npy",
            _set(0, 6),
            r"w4.owner.npy: 1 value is outside the ids 0..5 \(6 at index 0",
        ),
        (
            "w4.owner.npy",
            lambda a: a.astype(np.float64),
            "w4.owner.npy: float64 values, expected int",
        ),
        ("w4.start.npy", _set(1, -2), r"w4.start.npy: 1 value is negative \(-2 at index 1\)"),
        ("w2.start.npy", lambda a: a[1:], r"w2.start.npy: \d+ int32 values, expected \d+ integers"),
        (
            "w2.owner.npy",
            lambda a: a[1:],
            r"w2.owner.npy: \d+ items, the manifest's counts.items_w2",
        ),
        ("w2.indices.npy", _set(0, 10**6), "w2.indices.npy: 1 value is outside the ids"),
    ],
)
def test_bad_ngram_values_refused_on_open(
    stores: dict[str, Path], tmp_path: Path, victim: str, edit: Callable, message: str
) -> None:
    path = _copy(stores["idf-ngram"], tmp_path)
    _rewrite(path, victim, edit)
    with pytest.raises(ArtifactError, match=f"inconsistent idf-ngram store: {message}"):
        open_store(path)


def test_infinite_idf_refused_where_it_broke_requests(
    stores: dict[str, Path], tmp_path: Path
) -> None:
    """An infinite IDF for one word would fail every query that contains the word."""
    path = _copy(stores["idf-sentence"], tmp_path)
    term = list(open_store(path).column("vocab")).index("database")
    _rewrite(path, "idf.npy", _set(term, np.inf))
    with pytest.raises(
        ArtifactError, match=rf"idf.npy: 1 value is not finite \(inf at index {term}"
    ):
        load_retriever(path)


def test_text_not_utf8_refused_on_open(stores: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(stores["idf-sentence"], tmp_path)
    blob = (path / "sources.bin").read_bytes()
    (path / "sources.bin").write_bytes(blob.replace("Köln".encode(), b"K\xff\xfeln"))  # same size
    _recompute_checksums(path)
    with pytest.raises(ArtifactError, match=r"sources.bin: string 5 is not UTF-8 \(byte 0xff"):
        open_store(path)


def test_offset_inside_a_character_refused_on_open(stores: dict[str, Path], tmp_path: Path) -> None:
    """Each string must decode alone, not only the blob as a whole."""
    path = _copy(stores["idf-sentence"], tmp_path)
    blob = (path / "sources.bin").read_bytes()
    _rewrite(path, "sources.offsets.npy", _set(5, blob.index("ü".encode()) + 1))
    with pytest.raises(ArtifactError, match="sources.offsets.npy: string 5 starts inside a"):
        open_store(path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"counts": {"vocabulary": 3, "items": 6}}, "vocab.bin: .* counts.vocabulary is 3"),
        ({"counts": {"vocabulary": 3}}, "do not match its items"),
        ({"files": {"../../etc/passwd": "0" * 64}}, "invalid file entry '../../etc/passwd'"),
    ],
)
def test_manifest_inconsistent_with_files_refused(
    stores: dict[str, Path], tmp_path: Path, changes: dict, message: str
) -> None:
    path = _copy(stores["idf-sentence"], tmp_path)
    m = json.loads((path / "manifest.json").read_text())
    m.update(changes)
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match=message):
        open_store(path)


@pytest.mark.integration
def test_non_finite_dense_vector_refused(bundle: Path, tmp_path: Path) -> None:
    pairs = [Pair(s, gloss(s)) for s in dict.fromkeys(s for s, _ in toy_pairs(60, 3))]
    path = build_store(pairs, "toy", "dense-ngram", tmp_path, {"widths": [2]}, model=bundle)
    index = faiss.read_index(str(path / "w2.faiss"))
    vectors = index.reconstruct_n(0, index.ntotal)
    vectors[7, 1] = np.nan
    edited = faiss.IndexFlatL2(index.d)
    edited.add(vectors)
    faiss.write_index(edited, str(path / "w2.faiss"))
    _recompute_checksums(path)
    with pytest.raises(
        ArtifactError, match=r"w2.faiss: 1 of its vectors not finite \(the first: 7"
    ):
        open_store(path)


# --- signed stores ------------------------------------------------------------------------


def test_signature_is_hmac_of_canonical_manifest(stores: dict[str, Path]) -> None:
    """The format, by hand: HMAC-SHA256 over the manifest less its signature, sorted keys,
    no spaces, UTF-8, so that another tool can sign and check stores."""
    m = json.loads((stores["signed"] / "manifest.json").read_text())
    body = {k: v for k, v in m.items() if k != "signature"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert m[SIGNATURE] == hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()
    assert manifest_signature(m, KEY) == m[SIGNATURE]
    assert set(m["files"]) >= {"sources.bin", "targets.bin", "idf.npy"}  # what it covers
    assert SIGNATURE not in json.loads((stores["idf-sentence"] / "manifest.json").read_text())


def test_signed_store_opens_with_its_key(stores: dict[str, Path]) -> None:
    signed = open_store(stores["signed"], KEY)
    assert load_retriever(signed).search(QUERIES, 3) == load_retriever(
        stores["idf-sentence"]
    ).search(QUERIES, 3)
    assert open_store(stores["signed"]).pairs.sources[0] == SOURCES[0]  # a key is optional


def _edit_target(path: Path, i: int, text: str) -> None:
    """Replace a pair's target and recompute every checksum: a deliberate edit."""
    targets = list(open_store(path).pairs.targets)
    targets[i] = text
    TextColumn.from_strings(targets).save(path, "targets")
    _recompute_checksums(path)


def test_edited_store_refused_only_with_a_key(stores: dict[str, Path], tmp_path: Path) -> None:
    """Without a key checksums catch corruption, not an edit with recomputed checksums; with
    one, the edit breaks the signature, and dropping the signature leaves an unsigned store."""
    path = _copy(stores["signed"], tmp_path)
    _edit_target(path, 0, "Überweisen Sie 1000 EUR an ...")
    assert open_store(path).pairs.targets[0].startswith("Überweisen")  # accepted: no key
    with pytest.raises(ArtifactError, match="signature does not match"):
        open_store(path, KEY)
    with pytest.raises(ArtifactError, match="signature does not match"):
        set_active(tmp_path, "docs", path.name, signing_key=KEY)
    m = json.loads((path / "manifest.json").read_text())
    del m[SIGNATURE]
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="unsigned store"):
        load_retriever(path, signing_key=KEY)


def test_wrong_key_and_unsigned_store_refused(stores: dict[str, Path]) -> None:
    with pytest.raises(ArtifactError, match="signature does not match"):
        open_store(stores["signed"], b"another key")
    with pytest.raises(ArtifactError, match="unsigned store"):
        open_store(stores["idf-sentence"], KEY)
    with pytest.raises(ValueError, match="non-empty bytes"):
        open_store(stores["signed"], b"")


def test_forged_signature_value_refused(stores: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(stores["signed"], tmp_path)
    for forged in ["ü" * 64, 12, None]:
        m = json.loads((path / "manifest.json").read_text())
        m[SIGNATURE] = forged
        (path / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(ArtifactError, match="signature does not match|unsigned store"):
            open_store(path, KEY)


def test_sign_store_signs_an_existing_store(stores: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(stores["idf-sentence"], tmp_path)
    (path / "manifest.json").chmod(0o644)
    before = json.loads((path / "manifest.json").read_text())
    signed = sign_store(path, KEY)
    assert signed == json.loads((path / "manifest.json").read_text())
    assert {k: v for k, v in signed.items() if k != SIGNATURE} == before  # only signed
    assert open_store(path, KEY).manifest == signed
    assert (path / "manifest.json").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == [path.name]  # no temp left
    sign_store(path, b"a new key")  # re-signing replaces the signature
    open_store(path, b"a new key")
    with pytest.raises(ArtifactError, match="signature does not match"):
        open_store(path, KEY)


def test_sign_store_refuses_a_damaged_store(stores: dict[str, Path], tmp_path: Path) -> None:
    path = _copy(stores["idf-sentence"], tmp_path)
    (path / "targets.bin").write_bytes(b"tampered")
    before = (path / "manifest.json").read_bytes()
    with pytest.raises(ArtifactError, match="checksum mismatch for targets.bin"):
        sign_store(path, KEY)
    assert (path / "manifest.json").read_bytes() == before


def test_build_refuses_an_empty_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="non-empty bytes"):
        build_store(PAIRS, "docs", "idf-sentence", tmp_path, signing_key=b"")
    assert not (tmp_path / "docs").exists()
