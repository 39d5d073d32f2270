"""PO and XLIFF files filled with translations: golden outputs byte for byte, only targets
changed, inline codes and placeholders kept, bad files refused with what and where."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest
from lxml import etree

from service.documents import (
    Code,
    Coded,
    DocumentError,
    LanguageMismatch,
    read_document,
    restore,
)
from service.documents_xliff import xml_escape

pytestmark = pytest.mark.unit

DATA = Path(__file__).parent / "data" / "files"
DE = {
    "Save file": "Datei speichern",
    "Close": "Schließen",
    "Hello <x1/>, you have mail": "Hallo <x1/>, Sie haben Post",
    "First line": "Erste Zeile",
    "Second line": "Zweite Zeile",
    'Say "yes"\tor no': 'Sag "ja"\toder nein',
    "One file": "Eine Datei",
    "%d files": "%d Dateien",
    "Old text": "Neuer Text",
    "Click <g1>Save</g1> to keep <x2/> changes & go.": (
        "Klicken Sie auf <g1>Speichern</g1>, um <x2/> Änderungen zu behalten & weiter."
    ),
    "Press <x1/>Enter<x2/>": "Drücken Sie <x1/>Eingabe<x2/>",
    "Click <g1>Save</g1> now.<x2/>": "Klicken Sie jetzt auf <g1>Speichern</g1>.<x2/>",
    "Done: <x1/> items": "Fertig: <x1/> Elemente",
}


def german(texts: list[str]) -> list[str]:
    return [DE[t] for t in texts]  # a KeyError: the file asked for a text it should not


def golden(name: str) -> tuple[bytes, bytes]:
    stem, suffix = name.rsplit(".", 1)
    return (DATA / name).read_bytes(), (DATA / f"{stem}.de.{suffix}").read_bytes()


@pytest.mark.parametrize("name", ["demo.po", "demo.xlf", "demo20.xlf"])
def test_golden_files_are_filled_byte_for_byte(name: str) -> None:
    data, expected = golden(name)
    doc = read_document(data)
    assert doc.fill(german) == expected


@pytest.mark.parametrize("name", ["demo.po", "demo.xlf", "demo20.xlf"])
def test_identity_translations_change_only_what_was_untranslated(name: str) -> None:
    """Filling a filled file changes nothing; its texts are asked for once each."""
    _, filled = golden(name)
    doc = read_document(filled)
    assert doc.todo == [] and doc.texts() == []
    assert doc.fill(german) == filled


def test_po_units_and_texts() -> None:
    doc = read_document((DATA / "demo.po").read_bytes())
    assert doc.kind == "po" and doc.target_lang == "de" and doc.codec == "utf-8"
    states = {u.id: u.state for u in doc.units}
    assert states["Open file"] == "translated" and states["Old text"] == "fuzzy"
    assert states["menu\x04Close"] == "untranslated"
    assert "" not in states and "Gone" not in states  # the header, the obsolete entry
    # "Save file" twice (two contexts): translated once; each line of a text on its own
    assert doc.texts() == [
        "Save file",
        "Close",
        "Hello <x1/>, you have mail",
        "First line",
        "Second line",
        'Say "yes"\tor no',
        "One file",
        "%d files",
    ]
    plural = next(u for u in doc.units if u.id == "One file")
    assert [c.text for c in plural.coded] == ["One file", "%d files"]


def test_po_with_crlf_line_endings_keeps_them() -> None:
    data, expected = golden("demo.po")
    crlf = data.replace(b"\n", b"\r\n")
    assert read_document(crlf).fill(german) == expected.replace(b"\n", b"\r\n")


def test_po_fuzzy_entries_are_filled_only_when_asked() -> None:
    data, expected = golden("demo.po")
    out = read_document(data, fuzzy=True).fill(german)
    old = b'msgid "Old text"\nmsgstr "Alter Text"'
    assert out == expected.replace(old, b'msgid "Old text"\nmsgstr "Neuer Text"')


def test_po_needs_review_marks_filled_entries_fuzzy() -> None:
    data, _ = golden("demo.po")
    out = read_document(data).fill(german, needs_review=True).decode()
    assert '#: app.py:2\n#, fuzzy\nmsgid "Save file"\nmsgstr "Datei speichern"' in out
    assert '#, python-format, fuzzy\nmsgid "Hello %(name)s' in out
    assert '#: app.py:1\nmsgid "Open file"' in out  # a translated entry is left alone
    assert out.count("#, fuzzy\n") == 7  # 6 new flag lines + the entry fuzzy already
    assert read_document(out.encode()).todo == []


def test_po_plural_forms_follow_nplurals() -> None:
    po = (
        'msgid ""\nmsgstr "Plural-Forms: nplurals=3; plural=n%10==1 ? 0 : 1;\\n"\n\n'
        'msgid "One file"\nmsgid_plural "%d files"\nmsgstr[0] ""\nmsgstr[1] "schon da"\n'
    )
    out = read_document(po.encode()).fill(german).decode()
    assert out.endswith(
        'msgstr[0] "Eine Datei"\nmsgstr[1] "schon da"\nmsgstr[2] "%d Dateien"\n'
    )  # an empty form filled, a filled one kept, the missing third added
    one = 'msgid ""\nmsgstr "Plural-Forms: nplurals=1; plural=0;\\n"\n\n' + po.split("\n\n")[1]
    one = one.replace('msgstr[1] "schon da"\n', "")
    out = read_document(one.encode()).fill(german).decode()
    assert 'msgstr[0] "%d Dateien"' in out  # one form: the plural's translation


def test_po_escapes_and_multiline_strings_round_trip() -> None:
    po = 'msgid ""\n"a \\"b\\"\\n"\n"\\\\ c\\td"\nmsgstr ""\n'
    doc = read_document(po.encode())
    assert doc.units[0].source == 'a "b"\n\\ c\td'
    out = doc.fill(lambda ts: [t.upper() for t in ts]).decode()
    assert out.endswith('msgstr ""\n"A \\"B\\"\\n"\n"\\\\ C\\tD"\n')
    assert read_document(out.encode()).units[0].target == 'A "B"\n\\ C\tD'


def test_po_in_latin1_is_read_and_written_in_latin1() -> None:
    po = (
        'msgid ""\nmsgstr "Content-Type: text/plain; charset=ISO-8859-1\\n"\n\n'
        'msgid "Close"\nmsgstr ""\n\nmsgid "Open file"\nmsgstr "Datei öffnen"\n'
    ).encode("latin-1")
    doc = read_document(po)
    assert doc.codec == "iso8859-1"
    out = doc.fill(german)
    assert out == po.replace(
        b'msgstr ""\n\nmsgid "Open', 'msgstr "Schließen"\n\nmsgid "Open'.encode("latin-1")
    )


@pytest.mark.parametrize(
    ("po", "message"),
    [
        ('msgid "a"\nmsgstr "b\n', "line 2: expected a quoted string"),
        ('msgid "a"\nfoo "b"\n', "line 2: unexpected 'foo'"),
        ('msgstr "b"\n', "line 1: msgstr without a msgid"),
        ('msgid "a"\n\nmsgid "b"\nmsgstr ""\n', "line 1: an entry without msgstr"),
        ('msgid "a\\q"\nmsgstr ""\n', "line 1: invalid escape \\q"),
        ('msgid "a"\nmsgid_plural "b"\nmsgstr "c"\n', "line 3: a plural entry needs msgstr[N]"),
        ('msgid "a"\nmsgstr[0] "c"\n', "line 2: msgstr[0] without msgid_plural"),
        ('msgid "a"\n# note\nmsgstr ""\n', "line 2: a comment inside an entry"),
        ('"orphan"\n', "line 1: a string without a keyword"),
        ("Hello world, this is text.\n", "line 1: unexpected 'Hello'"),
        ("# only a comment\n", "not a PO file: it holds no msgid entries"),
        ("   \n", "the file is empty"),
    ],
)
def test_bad_po_files_are_refused_with_the_line(po: str, message: str) -> None:
    with pytest.raises(DocumentError, match=re.escape(message)):
        read_document(po.encode())


def test_bytes_that_are_not_the_declared_charset_are_named() -> None:
    po = 'msgid "a"\nmsgstr ""\n\nmsgid "Größe"\nmsgstr ""\n'.encode("latin-1")
    with pytest.raises(DocumentError, match=r"not valid utf-8: byte 30 \(line 4\)"):
        read_document(po)
    mo = b"\xde\x12\x04\x95\x00\x00\x00\x00"  # a compiled .mo file
    with pytest.raises(DocumentError, match="not valid utf-8"):
        read_document(mo)


def test_xliff_units_languages_and_skipped_units() -> None:
    doc = read_document((DATA / "demo.xlf").read_bytes())
    assert (doc.kind, doc.source_lang, doc.target_lang) == ("xliff-1.2", "en", "de")
    assert [(u.id, u.state) for u in doc.units] == [
        ("1", "translated"),
        ("2", "untranslated"),
        ("3", "untranslated"),
        ("4", "not-translatable"),
        ("5", "not-translatable"),  # its group says translate="no"
        ("6", "untranslated"),
        ("7", "untranslated"),
    ]
    assert doc.units[1].source == "Click Save to keep  changes & go."
    doc.check_languages("en-US", "de")  # by primary subtag
    with pytest.raises(LanguageMismatch, match=r"target language is 'de' \(line 3\)"):
        doc.check_languages("en", "fr")
    doc20 = read_document((DATA / "demo20.xlf").read_bytes())
    assert [u.id for u in doc20.todo] == ["u2/s1", "u2/s2"]  # state="initial" is untranslated
    with pytest.raises(LanguageMismatch, match="source language is 'en'"):
        doc20.check_languages("fr", "de")


def test_xliff_needs_review_states() -> None:
    data, _ = golden("demo.xlf")
    out = read_document(data).fill(german, needs_review=True).decode()
    assert out.count('state="needs-review-translation"') == 4
    data20, expected20 = golden("demo20.xlf")
    out20 = read_document(data20).fill(german, needs_review=True).decode()
    assert '<segment id="s1">' in out20 and '<segment id="s2" state="initial">' in out20
    assert "<target>Fertig: {{ count }} Elemente</target>" in out20


def test_xliff_whatever_the_model_writes_stays_well_formed() -> None:
    """Tokens lost, repeated, crossed, invented; markup and ampersands as text."""
    data, _ = golden("demo.xlf")
    doc = read_document(data)
    mangled = {
        "Click <g1>Save</g1> to keep <x2/> changes & go.": "</g1>Klick <x2/><x2/> & <b> <x7/>",
        "Press <x1/>Enter<x2/>": "Drücken <x2/> Sie",
        "Save file": "<g1>Datei</g1> <speichern>",
        "Close": "]]> & <!-- -->",
    }
    out = doc.fill(lambda ts: [mangled[t] for t in ts])
    etree.fromstring(out)  # well-formed
    text = out.decode()
    assert (
        '<target state="translated"><g id="1">Klick <x id="2"/> &amp; &lt;b&gt; </g></target>'
        in text
    )  # the broken pair put back around the text, the repeat dropped, the invented one gone
    assert (
        '<target state="translated">Drücken <ept id="1">&lt;/b&gt;</ept> Sie'
        '<bpt id="1">&lt;b&gt;</bpt></target>' in text
    )  # the lost code back at the end
    assert '<target state="translated">&lt;g1&gt;Datei&lt;/g1&gt; &lt;speichern&gt;' in text
    assert '<target state="translated">]]&gt; &amp; &lt;!-- --&gt;</target>' in text


def test_restore_puts_back_lost_and_misnested_codes() -> None:
    coded = Coded(
        "<x1/>a <g2>b <g3>c</g3></g2> d<x4/>",
        codes=tuple(
            Code(*c)
            for c in [
                ("<x1/>", "[1]", "single", 0, True),
                ("<g2>", "(", "open", 2, False),
                ("<g3>", "{", "open", 3, False),
                ("</g3>", "}", "close", 3, False),
                ("</g2>", ")", "close", 2, False),
                ("<x4/>", "[4]", "single", 0, False),
            ]
        ),
    )
    same = lambda s: s  # noqa: E731
    assert restore("<x1/>A <g2>B <g3>C</g3></g2> D<x4/>", coded, same) == "[1]A (B {C}) D[4]"
    assert restore("A B C D", coded, same) == "[1]({A B C D})[4]"
    assert restore("<g2>A <g3>B</g2> C</g3>", coded, same) == "[1]({A B C})[4]"  # crossed
    assert restore("<g3>A</g3> <g2>B", coded, same) == "[1]({A} B)[4]"  # one side lost
    assert restore("<x4/><x4/> A <x9/>", coded, same) == "[1]({[4] A })"


def test_tokens_avoid_tag_like_text_of_the_source() -> None:
    po = 'msgid "Type <x1/> then %(n)s"\nmsgstr ""\n'
    doc = read_document(po.encode())
    (text,) = doc.texts()
    assert text == "Type <x1/> then <xx1/>"
    out = doc.fill(lambda ts: ["Tippe <x1/> dann <xx1/>"]).decode()
    assert out.endswith('msgstr "Tippe <x1/> dann %(n)s"\n')


def test_xliff_escapes_and_keeps_encoding() -> None:
    xlf = (
        '<?xml version="1.0" encoding="ISO-8859-1"?>\n<xliff version="1.2">'
        '<file source-language="en" datatype="x" original="o"><body>'
        '<trans-unit id="a"><source>Size</source></trans-unit></body></file></xliff>\n'
    ).encode("latin-1")
    out = read_document(xlf).fill(lambda ts: ["Größe ≥ 5 & <mehr>"])
    assert b'<target state="translated">Gr\xf6\xdfe &#8805; 5 &amp; &lt;mehr&gt;</target>' in out
    assert xml_escape("a\x01b") == "ab"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"<xliff version='1.2'><file>", "not well-formed XML"),
        (b"<html><body/></html>", "not an XLIFF file: its root element is <html>"),
        (b'<xliff version="3.0"/>', "XLIFF version 3.0 is not supported"),
        (
            b'<?xml version="1.0"?>\n<!DOCTYPE x [<!ENTITY a "aaaa">]>\n'
            b'<xliff version="1.2"><file><body/></file></xliff>',
            "declares entities",
        ),
        (
            b'<?xml version="1.0"?>\n<xliff version="1.2"><file>\n'
            b"<body>&nbsp;</body></file></xliff>",
            "line 3",
        ),
        (
            b'<xliff version="1.2"><file><body>\n<trans-unit id="1"/></body></file></xliff>',
            "line 2: a <trans-unit> without <source>",
        ),
        (b'<?xml version="1.0" encoding="klingon"?><xliff/>', "unknown encoding 'klingon'"),
    ],
)
def test_bad_xml_files_are_refused_with_what_and_where(data: bytes, message: str) -> None:
    with pytest.raises(DocumentError, match=re.escape(message)):
        read_document(data)


def _changed_lines(before: bytes, after: bytes) -> tuple[list[str], list[str]]:
    """The lines of `before` that `after` replaced or removed, and the lines it added."""
    a, b = before.decode().splitlines(), after.decode().splitlines()
    old, new = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op != "equal":
            old += a[i1:i2]
            new += b[j1:j2]
    return old, new


def _without_targets(text: str, po: bool) -> str:
    """`text` with every target region (and mark of a filled unit's state) cut out."""
    if po:
        text = re.sub(r'(?m)^msgstr(\[\d+\])? ".*"\n("[^\n]*"\n)*', "", text)
        return re.sub(r"(?m)^#, fuzzy\n|, fuzzy$", "", text)
    text = re.sub(r"\s*<target\b[^>]*?(/>|>.*?</target>)", "", text, flags=re.S)
    return re.sub(r'(<segment[^>]*?) state="[^"]*"', r"\1", text)


@pytest.mark.parametrize("review", [False, True])
@pytest.mark.parametrize("name", ["demo.po", "demo.xlf", "demo20.xlf"])
def test_only_target_regions_differ(name: str, review: bool) -> None:
    """Whatever the translations, the file without its targets is the same before and
    after, and difflib finds changes on target lines only."""
    data, _ = golden(name)
    out = read_document(data, fuzzy=True).fill(lambda ts: [f"«{t}» & co" for t in ts], review)
    po = name.endswith(".po")
    assert _without_targets(out.decode(), po) == _without_targets(data.decode(), po)
    old, new = _changed_lines(data, out)
    assert new, "something was filled"
    mark = re.compile(r'^(msgstr|"|#, )' if po else r"^\s*<(target|segment)|.*<target")
    assert all(mark.match(line) for line in old + new), (old, new)
