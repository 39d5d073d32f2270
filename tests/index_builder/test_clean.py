"""Text cleaning and pair filters, on hand-computed examples."""

from __future__ import annotations

from collections import Counter

import pytest

from index_builder.prepare.clean import (
    clean_ui,
    collapse,
    dedup_key,
    has_letters,
    keep_pair,
    placeholders,
    strip_accelerators,
    strip_markup,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("_Open", "Open"),
        ("~Save As...", "Save As..."),
        ("&File", "File"),
        ("Save && Close", "Save & Close"),
        ("Ctrl+_Z", "Ctrl+Z"),
        ("snake_case_name", "snake_case_name"),
        ("A & B", "A & B"),
        ('<b>Bold</b> and <a href="x">link</a>', "Bold and link"),
        ("<i>_Recent</i> files", "Recent files"),
        ("Fish &amp; Chips", "Fish & Chips"),
        ("Caf&eacute; &#169; 2024", "Café © 2024"),
        ("&lt;none&gt;", "<none>"),
        ("Insert {0} rows", "Insert {0} rows"),
        ("Line one\\nLine two\\tend", "Line one Line two end"),
        ("  many   spaces\n here ", "many spaces here"),
    ],
)
def test_clean_ui(raw: str, clean: str) -> None:
    assert clean_ui(raw) == clean


def test_helpers() -> None:
    assert collapse(" a \t b\n\nc ") == "a b c"
    assert strip_markup("<p class='x'>x &lt; y</p><br/>") == "x < y"
    assert strip_accelerators("_File ~Edit &View &&") == "File Edit View &"
    assert has_letters("Ärger") and has_letters("x1")
    assert not has_letters("123 _ %") and not has_letters("")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Deleted %s", {"%s": 1}),
        ("%1$d of %2$d", {"%1$d": 1, "%2$d": 1}),
        ("Hello %(name)s, %(name)s", {"%(name)s": 2}),
        ("{0} and {name} and {}", {"{0}": 1, "{name}": 1, "{}": 1}),
        ("Welcome $name$", {"$name$": 1}),
        ("Page %1 of %2", {"%1": 1, "%2": 1}),
        ("%.2f MB, %ld items", {"%.2f": 1, "%ld": 1}),
        ("Run $(ARG1)", {"$(ARG1)": 1}),
        ("%d%% done", {"%d": 1}),
        ("50% off", {}),
        ("100 % sure", {}),
        ("no placeholders here", {}),
    ],
)
def test_placeholders(text: str, found: dict[str, int]) -> None:
    assert placeholders(text) == Counter(found)


@pytest.mark.parametrize(
    ("source", "target", "reason"),
    [
        ("", "Datei", "empty"),
        ("File", "", "empty"),
        ("123", "456", "no-letters"),
        ("--", "Datei", "no-letters"),
        ("OK", "OK", "identical"),
        ("a" * 601, "b" * 601, "too-long"),
        ("OK", "In Ordnung", None),  # ratio 5, but both sides are short
        ("Edit", "Bearbeiten des Dokuments", "length-ratio"),
        ("Open the file now", "Öffnen", "length-ratio"),
        ("abcdef", "abcdefghijkl", None),  # ratio exactly 2.0
        ("abcdef", "abcdefghijklm", "length-ratio"),
        ("%s files", "Dateien", "placeholders"),
        ("{0} rows", "{1} Zeilen", "placeholders"),
        ("%1$s of %2$s", "%2$s von %1$s", None),
        ("Saved %d files", "%d Dateien gespeichert", None),
    ],
)
def test_keep_pair(source: str, target: str, reason: str | None) -> None:
    assert keep_pair(source, target) == reason


def test_keep_pair_ratio_min_chars() -> None:
    assert keep_pair("Edit", "Bearbeiten des Dokuments", ratio_min_chars=30) is None
    assert keep_pair("Edit", "Bearbeiten", ratio_min_chars=10) == "length-ratio"
    assert keep_pair("Edit", "Bearbeite", ratio_min_chars=10) is None


def test_dedup_key() -> None:
    assert dedup_key("  Hello\n  World ") == "hello world"
    assert dedup_key("STRASSE") == dedup_key("Straße")
    assert dedup_key("Open File") == dedup_key("open   file")
    assert dedup_key("Open file.") != dedup_key("Open file")
