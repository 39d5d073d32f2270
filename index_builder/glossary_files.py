"""Glossary files as terminologists exchange them: CSV or TSV, and TBX.

CSV and TSV: one term a row, columns source, target and an optional note; a first row that
names its columns (source/target, the languages' codes or names, term/translation, note) is a
header and may put them in any order. A UTF-8 or UTF-16 byte-order mark, quoted fields and
Excel's semicolons are understood.

TBX (ISO 30042): TBX v2 and TBX-Basic (`martif`, `termEntry`, `langSet`, `tig` or `ntig`)
and TBX v3 (`tbx`, `conceptEntry`, `langSec`, `termSec`), namespaced or not. Each entry maps
every source-language term to its preferred target term (a deprecated or superseded target is
never chosen); an entry without both languages is skipped and counted. The XML parser loads
no DTD, resolves no entity and reaches no network; a document type with an internal subset
is refused outright.

Every error names the line (and the TBX entry) where the file went wrong. Nothing here does
I/O: bytes in, terms out.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Literal

from lxml import etree

from index_builder.readers import SAFE_XML
from models.glossary import MAX_TERMS, GlossaryError, Term

__all__ = ["FORMATS", "Imported", "format_of", "read_csv", "read_glossary", "read_tbx"]

Format = Literal["csv", "tsv", "tbx"]
FORMATS: tuple[str, ...] = ("csv", "tsv", "tbx")
_SUFFIXES = {"csv": "csv", "tsv": "tsv", "tab": "tsv", "txt": "tsv", "tbx": "tbx", "xml": "tbx"}

SOURCE_NAMES = {"source", "src", "source term", "term", "english"}
TARGET_NAMES = {"target", "tgt", "target term", "translation", "german", "deutsch"}
NOTE_NAMES = {"note", "notes", "comment", "comments", "description", "definition"}

XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_SHUNNED = ("deprecated", "superseded", "notrecommended", "forbidden")


@dataclass(frozen=True)
class Imported:
    """The terms a file holds, in file order, and how many of its entries gave none."""

    terms: tuple[Term, ...]
    skipped: int = 0


def format_of(given: str | None, filename: str | None) -> Format:
    """The file's format: as given, else from its name's extension."""
    if given is not None:
        if given not in FORMATS:
            raise GlossaryError(f"format {given!r}: one of {', '.join(FORMATS)}")
        return given  # type: ignore[return-value]
    suffix = (filename or "").rsplit(".", 1)[-1].lower() if "." in (filename or "") else ""
    if suffix not in _SUFFIXES:
        raise GlossaryError("cannot tell the format from the file name; give csv, tsv or tbx")
    return _SUFFIXES[suffix]  # type: ignore[return-value]


def read_glossary(data: bytes, fmt: Format, source_lang: str, target_lang: str) -> Imported:
    """The terms of a glossary file of format `fmt` for the pair source_lang->target_lang."""
    if fmt == "tbx":
        return read_tbx(data, source_lang, target_lang)
    return read_csv(_text(data), "\t" if fmt == "tsv" else None, source_lang, target_lang)


def _text(data: bytes) -> str:
    """Decoded by its byte-order mark (UTF-8 or UTF-16), else as UTF-8."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise GlossaryError(f"line {line}: not {encoding.removesuffix('-sig')} text") from None


def _delimiter(text: str) -> str:
    """Of comma, semicolon and tab, the one the first non-blank line holds most of."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    return max(",;\t", key=lambda d: (first.count(d), d == ","))


def _header(row: list[str], source_lang: str, target_lang: str) -> tuple[int, int, int | None]:
    """The (source, target, note) columns a header row names; ValueError when it is no header."""
    names = [" ".join(c.split()).casefold() for c in row]
    sources = SOURCE_NAMES | {source_lang.casefold()}
    targets = TARGET_NAMES | {target_lang.casefold()}
    src = next(i for i, n in enumerate(names) if n in sources or n.split("-")[0] == source_lang)
    tgt = next(
        i
        for i, n in enumerate(names)
        if i != src and (n in targets or n.split("-")[0] == target_lang)
    )
    note = next((i for i, n in enumerate(names) if n in NOTE_NAMES), None)
    return src, tgt, note


def read_csv(
    text: str, delimiter: str | None = None, source_lang: str = "en", target_lang: str = "de"
) -> Imported:
    """The terms of CSV or TSV `text` (`delimiter` None: comma, semicolon or tab, guessed)."""
    text = text.removeprefix("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter or _delimiter(text))
    columns: tuple[int, int, int | None] | None = None
    headed = False
    terms: list[Term] = []
    try:
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if columns is None:
                try:
                    columns, headed = _header(row, source_lang, target_lang), True
                    continue
                except StopIteration:
                    columns = (0, 1, 2)
            if not headed and len(row) > 3 and any(c.strip() for c in row[3:]):
                raise GlossaryError(
                    f"line {line}: {len(row)} columns; expected source, target and an optional "
                    "note (or a header row naming the columns)"
                )
            src, tgt, note = columns
            if max(src, tgt) >= len(row):
                raise GlossaryError(f"line {line}: {len(row)} column(s); no target term")
            term = Term(
                row[src], row[tgt], row[note] if note is not None and note < len(row) else ""
            )
            _check(term, f"line {line}")
            terms.append(term)
            if len(terms) > MAX_TERMS:
                raise GlossaryError(f"line {line}: more than {MAX_TERMS} terms")
    except csv.Error as e:
        raise GlossaryError(f"line {reader.line_num}: {e}") from None
    if not terms:
        raise GlossaryError("the file holds no terms")
    return Imported(tuple(terms))


def _check(term: Term, where: str) -> None:
    try:
        term.check()
    except GlossaryError as e:
        raise GlossaryError(f"{where}: {e}") from None


# --- TBX ------------------------------------------------------------------------------------


def _parser() -> etree.XMLParser:
    """No DTD, no entities, no network: a file can neither expand nor fetch anything."""
    return etree.XMLParser(**SAFE_XML, dtd_validation=False, remove_comments=True, remove_pis=True)


def _local(el: etree._Element) -> str:
    return etree.QName(el).localname if isinstance(el.tag, str) else ""


def _lang(el: etree._Element) -> str:
    """An element's language's primary subtag, lowercased ("en-GB" -> "en")."""
    return (el.get(XML_LANG) or "").split("-")[0].split("_")[0].strip().lower()


def _status(term: etree._Element) -> str:
    """The administrative status of a term (preferred, admitted, deprecated, ...), "" if none:
    a `termNote type="administrativeStatus"` or an `administrativeStatus` element beside it."""
    holder = term.getparent()
    scopes = (
        [holder] if holder is None or _local(holder) != "termGrp" else [holder, holder.getparent()]
    )
    for scope in (s for s in scopes if s is not None):
        for el in scope:
            local = _local(el)
            if (local == "termNote" and el.get("type") == "administrativeStatus") or (
                local == "administrativeStatus"
            ):
                return "".join(el.itertext()).strip().casefold()
    return ""


def _note(entry: etree._Element) -> str:
    """An entry's definition, else its first note (of the entry or a language section)."""
    kinds = [
        el
        for el in entry.iter()
        if (_local(el) == "descrip" and el.get("type") == "definition")
        or _local(el) == "definition"
    ]
    kinds += [el for el in entry.iter() if _local(el) == "note"]
    return " ".join("".join(kinds[0].itertext()).split()) if kinds else ""


def _where(entry: etree._Element, n: int) -> str:
    name = entry.get("id") or f"#{n}"
    return f"entry {name} (line {entry.sourceline})"


def read_tbx(data: bytes, source_lang: str = "en", target_lang: str = "de") -> Imported:
    """The terms of a TBX document (see the module's docstring)."""
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as e:
        raise GlossaryError(f"line {e.lineno}: not well-formed XML: {e.msg}") from None
    dtd = root.getroottree().docinfo.internalDTD  # an external one is named, never loaded
    if dtd is not None and (any(dtd.iterentities()) or any(dtd.iterelements())):
        raise GlossaryError("a document type with an internal subset is not accepted")
    if _local(root) not in ("martif", "tbx"):
        raise GlossaryError(f"line {root.sourceline}: <{_local(root)}> is not a TBX document")
    entries = [el for el in root.iter() if _local(el) in ("termEntry", "conceptEntry")]
    if not entries:
        raise GlossaryError("no termEntry or conceptEntry elements")
    terms: list[Term] = []
    skipped = 0
    for n, entry in enumerate(entries, start=1):
        where = _where(entry, n)
        by_lang: dict[str, list[tuple[str, str]]] = {}
        for section in entry:
            if _local(section) not in ("langSet", "langSec"):
                continue
            lang = _lang(section)
            if not lang:
                raise GlossaryError(
                    f"{where}: a <{_local(section)}> (line {section.sourceline}) has no xml:lang"
                )
            for term in section.iter():
                if _local(term) != "term":
                    continue
                text = " ".join("".join(term.itertext()).split())
                if not text:
                    raise GlossaryError(f"{where}: an empty {lang} term (line {term.sourceline})")
                by_lang.setdefault(lang, []).append((text, _status(term)))
        sources, targets = by_lang.get(source_lang, []), by_lang.get(target_lang, [])
        usable = [t for t, status in targets if not any(s in status for s in _SHUNNED)]
        preferred = [t for t, status in targets if "preferred" in status]
        if not sources or not usable:
            skipped += 1
            continue
        target, note = (preferred or usable)[0], _note(entry)
        for source, _ in sources:
            term = Term(source, target, note)
            _check(term, where)
            terms.append(term)
        if len(terms) > MAX_TERMS:
            raise GlossaryError(f"{where}: more than {MAX_TERMS} terms")
    if not terms:
        raise GlossaryError(
            f"no entry of {len(entries)} has terms in both {source_lang} and {target_lang}"
        )
    return Imported(tuple(terms), skipped)
