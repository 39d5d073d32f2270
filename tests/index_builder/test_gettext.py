"""Gettext catalogs: .mo files written byte by byte here, .po files by hand."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from index_builder.prepare.gettext import CatalogEntry, CatalogError, read_mo, read_po

pytestmark = pytest.mark.unit


def write_mo(path: Path, entries: list[tuple[str, str]], order: str = "<") -> Path:
    """Write a GNU .mo file: header, offset tables, NUL-terminated strings (no hash table)."""
    entries = sorted(entries)
    n = len(entries)
    orig_off = 28
    trans_off = orig_off + 8 * n
    pos = trans_off + 8 * n
    orig_table, trans_table, blob = b"", b"", b""
    encoded = [(o.encode("utf-8"), t.encode("utf-8")) for o, t in entries]
    for o, _ in encoded:
        orig_table += struct.pack(order + "2I", len(o), pos + len(blob))
        blob += o + b"\x00"
    for _, t in encoded:
        trans_table += struct.pack(order + "2I", len(t), pos + len(blob))
        blob += t + b"\x00"
    header = struct.pack(order + "7I", 0x950412DE, 0, n, orig_off, trans_off, 0, 0)
    path.write_bytes(header + orig_table + trans_table + blob)
    return path


MO_ENTRIES = [
    ("", "Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2;\n"),
    ("Open file", "Datei öffnen"),
    ("menu\x04Quit", "Beenden"),
    ("one file\x00%d files", "eine Datei\x00%d Dateien"),
    ("Untranslated", ""),
]
MO_EXPECTED = [
    CatalogEntry("Open file", "Datei öffnen"),
    CatalogEntry("Quit", "Beenden", "menu"),
    CatalogEntry("one file", "eine Datei"),
]


def test_read_mo_little_endian(tmp_path: Path) -> None:
    path = write_mo(tmp_path / "a.mo", MO_ENTRIES, "<")
    assert path.read_bytes()[:4] == b"\xde\x12\x04\x95"
    assert read_mo(path) == MO_EXPECTED


def test_read_mo_big_endian(tmp_path: Path) -> None:
    path = write_mo(tmp_path / "b.mo", MO_ENTRIES, ">")
    assert path.read_bytes()[:4] == b"\x95\x04\x12\xde"
    assert read_mo(path) == MO_EXPECTED


def test_read_mo_errors(tmp_path: Path) -> None:
    short = tmp_path / "short.mo"
    short.write_bytes(b"\xde\x12\x04\x95")
    with pytest.raises(CatalogError, match="short.mo"):
        read_mo(short)
    bad = tmp_path / "bad.mo"
    bad.write_bytes(b"\x00" * 40)
    with pytest.raises(CatalogError, match="bad magic"):
        read_mo(bad)
    good = write_mo(tmp_path / "trunc.mo", MO_ENTRIES)
    truncated = tmp_path / "truncated.mo"
    truncated.write_bytes(good.read_bytes()[:-40])
    with pytest.raises(CatalogError, match="past the end"):
        read_mo(truncated)


PO = r"""# Translator comment
msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

#: src/main.c:10
msgid "Open file"
msgstr "Datei öffnen"

#. extracted comment
#: src/menu.c:3
msgctxt "menu"
msgid "Quit"
msgstr "Beenden"

msgid ""
"A long string "
"over two lines"
msgstr ""
"Eine lange Zeichenkette "
"über zwei Zeilen"

#, fuzzy
msgid "Fuzzy one"
msgstr "Unscharf"

#, c-format
msgid "Tab\there \"quoted\""
msgstr "Tab\thier \"zitiert\""

msgid "one file"
msgid_plural "%d files"
msgstr[0] "eine Datei"
msgstr[1] "%d Dateien"

msgid "Not translated"
msgstr ""

#~ msgid "Obsolete"
#~ msgstr "Veraltet"
#| msgid "Previous"
msgid "Last"
msgstr "Letzte"
"""


def test_read_po(tmp_path: Path) -> None:
    path = tmp_path / "de.po"
    path.write_text(PO, encoding="utf-8")
    assert read_po(path) == [
        CatalogEntry("Open file", "Datei öffnen"),
        CatalogEntry("Quit", "Beenden", "menu"),
        CatalogEntry("A long string over two lines", "Eine lange Zeichenkette über zwei Zeilen"),
        CatalogEntry('Tab\there "quoted"', 'Tab\thier "zitiert"'),
        CatalogEntry("one file", "eine Datei"),
        CatalogEntry("Last", "Letzte"),
    ]


def test_read_po_entries_without_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "tight.po"
    path.write_text(
        'msgid "one file"\nmsgid_plural "%d files"\nmsgstr[0] "eine Datei"\n'
        'msgstr[1] "%d Dateien"\nmsgid "Open"\nmsgstr "Öffnen"\n'
        'msgctxt "x"\nmsgid "Save"\nmsgstr "Speichern"\n'
        'msgid "one page"\nmsgid_plural "%d pages"\nmsgstr[0] "eine Seite"\n'
        'msgstr[1] "%d Seiten"\n#, fuzzy\nmsgid "Fuzzy"\nmsgstr "Unscharf"\n',
        encoding="utf-8",
    )
    assert read_po(path) == [
        CatalogEntry("one file", "eine Datei"),
        CatalogEntry("Open", "Öffnen"),
        CatalogEntry("Save", "Speichern", "x"),
        CatalogEntry("one page", "eine Seite"),
    ]


@pytest.mark.parametrize(
    ("text", "lineno"),
    [
        ('msgid "ok"\nmsgstr "gut"\n\nmsgid "broken\nmsgstr "x"\n', 4),
        ('msgid "ok"\nmsgstr "gut"\n\n"stray continuation"\n', 4),
        ('msgid "ok"\nmsgstr "gut"\nmsgfoo "x"\n', 3),
    ],
)
def test_read_po_malformed(tmp_path: Path, text: str, lineno: int) -> None:
    path = tmp_path / "bad.po"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CatalogError, match=rf"bad\.po:{lineno}: "):
        read_po(path)
