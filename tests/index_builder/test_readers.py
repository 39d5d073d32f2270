"""Tests for index_builder.readers: exact pairs on good input, precise errors on bad input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from index_builder.corpus import CorpusError, Pair
from index_builder.readers import read_corpus, read_moses, read_tmx, read_tsv, write_tsv

pytestmark = pytest.mark.unit


def _write(path: Path, data: str | bytes) -> Path:
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def _tmx(body: str, header: str = "") -> str:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<tmx version="1.4">{header}<header srclang="en" datatype="plaintext"/>\n'
        f"<body>\n{body}\n</body>\n</tmx>\n"
    )


def _tu(en: str, de: str, en_tag: str = "en-US", de_tag: str = "de-DE") -> str:
    return (
        f'<tu><tuv xml:lang="{en_tag}"><seg>{en}</seg></tuv>'
        f'<tuv xml:lang="{de_tag}"><seg>{de}</seg></tuv></tu>'
    )


# ---- TSV -------------------------------------------------------------------------------------


def test_tsv_good_with_bom_crlf_and_trailing_blank_lines(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "mem.tsv", b"\xef\xbb\xbfHello\tHallo\r\n Good day \tGuten Tag\r\n\r\n\n"
    )
    assert read_tsv(path) == [
        Pair("Hello", "Hallo", origin="mem.tsv"),
        Pair("Good day", "Guten Tag", origin="mem.tsv"),
    ]


def test_tsv_selects_columns(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.tsv", "id1\tHallo\tHello\nid2\tWelt\tWorld\n")
    assert read_tsv(path, src_col=2, tgt_col=1) == [
        Pair("Hello", "Hallo", origin="c.tsv"),
        Pair("World", "Welt", origin="c.tsv"),
    ]


def test_tsv_missing_column_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.tsv", "a\tb\nno tab here\nc\td\n")
    with pytest.raises(CorpusError, match=r"bad\.tsv: line 2: 1 column"):
        read_tsv(path)


def test_tsv_interior_blank_line_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "gap.tsv", "a\tb\n\nc\td\n")
    with pytest.raises(CorpusError, match=r"gap\.tsv: line 2"):
        read_tsv(path)


def test_tsv_empty_side_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "e.tsv", "a\tb\nc\t  \n")
    with pytest.raises(CorpusError, match=r"e\.tsv: line 2: empty target side"):
        read_tsv(path)


def test_tsv_invalid_utf8_names_line_and_offset(tmp_path: Path) -> None:
    path = _write(tmp_path / "u.tsv", b"a\tb\nc\td\ne\t\xff\n")
    with pytest.raises(CorpusError, match=r"u\.tsv: line 3: invalid UTF-8 \(byte offset 10"):
        read_tsv(path)


@pytest.mark.parametrize("data", [b"", b"\xef\xbb\xbf", b"\n \r\n"])
def test_tsv_empty_file(tmp_path: Path, data: bytes) -> None:
    path = _write(tmp_path / "empty.tsv", data)
    with pytest.raises(CorpusError, match=r"empty\.tsv: empty file"):
        read_tsv(path)


def test_missing_file_is_corpus_error(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"nope\.tsv: cannot read"):
        read_tsv(tmp_path / "nope.tsv")
    with pytest.raises(CorpusError, match=r"nope\.tmx: cannot read"):
        read_tmx(tmp_path / "nope.tmx")


# ---- Moses -----------------------------------------------------------------------------------


def test_moses_good(tmp_path: Path) -> None:
    src = _write(tmp_path / "corpus.en", "\ufeffOne\r\nTwo\n")
    tgt = _write(tmp_path / "corpus.de", "Eins\nZwei\n\n")
    assert read_moses(src, tgt) == [
        Pair("One", "Eins", origin="corpus.en"),
        Pair("Two", "Zwei", origin="corpus.en"),
    ]


def test_moses_unequal_counts_names_both_files_and_counts(tmp_path: Path) -> None:
    src = _write(tmp_path / "c.en", "a\nb\nc\n")
    tgt = _write(tmp_path / "c.de", "x\ny\n")
    with pytest.raises(CorpusError) as err:
        read_moses(src, tgt)
    msg = str(err.value)
    assert "c.en has 3" in msg and "c.de has 2" in msg


def test_moses_empty_side_and_bad_utf8(tmp_path: Path) -> None:
    src = _write(tmp_path / "m.en", "a\n\nc\n")
    tgt = _write(tmp_path / "m.de", "x\ny\nz\n")
    with pytest.raises(CorpusError, match=r"line 2: empty source side"):
        read_moses(src, tgt)
    bad = _write(tmp_path / "b.de", b"x\n\xc3\x28\nz\n")
    with pytest.raises(CorpusError, match=r"b\.de: line 2: invalid UTF-8"):
        read_moses(_write(tmp_path / "b.en", "a\nb\nc\n"), bad)


def test_moses_empty_file(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"z\.en: empty file"):
        read_moses(_write(tmp_path / "z.en", ""), _write(tmp_path / "z.de", ""))


# ---- TMX -------------------------------------------------------------------------------------


def test_tmx_lang_variants_and_skipped_tu(tmp_path: Path) -> None:
    body = "\n".join(
        [
            _tu("Hello", "Hallo"),
            _tu("Bye", "Tschüss", en_tag="EN", de_tag="de"),
            _tu("Only French", "Seulement", de_tag="fr-FR"),  # skipped: no German
            '<tu><tuv lang="en_GB"><seg>Old</seg></tuv><tuv lang="DE-AT"><seg>Alt</seg></tuv></tu>',
        ]
    )
    path = _write(tmp_path / "mem.tmx", _tmx(body))
    assert read_tmx(path) == [
        Pair("Hello", "Hallo", origin="mem.tmx"),
        Pair("Bye", "Tschüss", origin="mem.tmx"),
        Pair("Old", "Alt", origin="mem.tmx"),
    ]
    assert read_tmx(path, src_lang="de-DE", tgt_lang="EN")[0] == Pair("Hallo", "Hello", "mem.tmx")


def test_tmx_inline_markup(tmp_path: Path) -> None:
    en = (
        'Click <bpt i="1">&lt;b&gt;</bpt>Save<ept i="1">&lt;/b&gt;</ept> now'
        '<ph x="1">&lt;br/&gt;</ph>, <hi type="em">really <it pos="begin">{x}</it>now</hi>'
        "<ut>{\\i}</ut>!"
    )
    de = "Auf <bpt i='1'>[b]</bpt>Speichern<ept i='1'>[/b]</ept> &amp; <hi>fertig</hi>"
    path = _write(tmp_path / "inline.tmx", _tmx(_tu(en, de)))
    assert read_tmx(path) == [
        Pair("Click Save now, really now!", "Auf Speichern & fertig", origin="inline.tmx")
    ]


def test_tmx_bom_crlf_and_comments(tmp_path: Path) -> None:
    text = _tmx("<!-- note -->" + _tu("A<!-- c -->B", "C")).replace("\n", "\r\n")
    path = _write(tmp_path / "bom.tmx", b"\xef\xbb\xbf" + text.encode())
    assert read_tmx(path) == [Pair("AB", "C", origin="bom.tmx")]


def test_tmx_does_not_expand_entities(tmp_path: Path) -> None:
    secret = _write(tmp_path / "secret.txt", "TOP-SECRET")
    doctype = f'<!DOCTYPE tmx [<!ENTITY x SYSTEM "{secret.as_uri()}"><!ENTITY i "INTERNAL">]>\n'
    text = _tmx(_tu("a &x; b &i;", "c")).replace("\n", "\n" + doctype, 1)
    pairs = read_tmx(_write(tmp_path / "xxe.tmx", text))
    assert pairs == [Pair("a  b", "c", origin="xxe.tmx")]


def test_tmx_malformed_names_file_and_line(tmp_path: Path) -> None:
    text = _tmx(_tu("ok", "gut") + "\n<tu><tuv xml:lang='en'><seg>broken</tuv></tu>")
    path = _write(tmp_path / "broken.tmx", text)
    with pytest.raises(CorpusError) as err:
        read_tmx(path)
    msg = str(err.value)
    assert "broken.tmx" in msg and "line 5" in msg and "malformed TMX" in msg


def test_tmx_invalid_utf8_names_line(tmp_path: Path) -> None:
    data = _tmx(_tu("ok", "gut") + "\n" + _tu("X", "Y")).encode().replace(b"X", b"\xff")
    with pytest.raises(CorpusError, match=r"u\.tmx: line 5: malformed TMX"):
        read_tmx(_write(tmp_path / "u.tmx", data))


def test_tmx_no_matching_tu(tmp_path: Path) -> None:
    path = _write(tmp_path / "fr.tmx", _tmx(_tu("Hello", "Bonjour", de_tag="fr")))
    with pytest.raises(CorpusError, match=r"fr\.tmx: no <tu> with both en and de \(1 <tu> skipped"):
        read_tmx(path)


def test_tmx_empty_side_and_empty_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "es.tmx", _tmx(_tu("Hi", "Hallo") + "\n" + _tu(" <ph>x</ph> ", "Y")))
    with pytest.raises(CorpusError, match=r"es\.tmx: line 5: empty source side"):
        read_tmx(path)
    with pytest.raises(CorpusError, match=r"e\.tmx: empty file"):
        read_tmx(_write(tmp_path / "e.tmx", ""))


# ---- dispatch --------------------------------------------------------------------------------


def test_read_corpus_dispatch(tmp_path: Path) -> None:
    tsv = _write(tmp_path / "a.tsv", "x\ty\n")
    txt = _write(tmp_path / "a.txt", "x\ty\n")
    tmx = _write(tmp_path / "a.tmx", _tmx(_tu("x", "y")))
    en, de = _write(tmp_path / "c.en", "x\n"), _write(tmp_path / "c.de", "y\n")
    expected = [Pair("x", "y", origin=name) for name in ("a.tsv", "a.txt", "a.tmx", "c.en")]
    assert read_corpus(tsv) + read_corpus(txt) + read_corpus(tmx) + read_corpus([en, de]) == (
        expected
    )
    assert read_corpus(tmp_path / "c") == [Pair("x", "y", origin="c.en")]
    assert read_corpus(str(en)) == [Pair("x", "y", origin="c.en")]
    assert read_corpus(de, src_lang="de", tgt_lang="en") == [Pair("y", "x", origin="c.de")]
    assert read_corpus(tmp_path / "c", fmt="moses") == [Pair("x", "y", origin="c.en")]


def test_read_corpus_unknown_format(tmp_path: Path) -> None:
    plain = _write(tmp_path / "notes.txt", "no tabs\n")
    with pytest.raises(CorpusError, match=r"notes\.txt: cannot tell the corpus format"):
        read_corpus(plain)
    with pytest.raises(CorpusError, match=r"unknown corpus format 'csv'"):
        read_corpus(plain, fmt="csv")
    with pytest.raises(CorpusError, match=r"exactly a Moses"):
        read_corpus([plain, plain, plain])


# ---- write_tsv -------------------------------------------------------------------------------


def test_write_tsv_round_trip(tmp_path: Path) -> None:
    pairs = [Pair("Hello", "Hallo"), Pair("Straße «x»", "Street")]
    path = tmp_path / "out.tsv"
    write_tsv(pairs, path)
    assert path.read_bytes() == "Hello\tHallo\nStraße «x»\tStreet\n".encode()
    assert [(p.source, p.target) for p in read_tsv(path)] == [(p.source, p.target) for p in pairs]
    assert os.listdir(tmp_path) == ["out.tsv"]


@pytest.mark.parametrize(
    "bad", [Pair("a\tb", "c"), Pair("a", "b\nc"), Pair("a", "b\r"), Pair("", "x"), Pair(" a", "b")]
)
def test_write_tsv_rejects_unreadable_pairs_without_touching_files(
    tmp_path: Path, bad: Pair
) -> None:
    fresh = tmp_path / "fresh.tsv"
    with pytest.raises(CorpusError, match=r"fresh\.tsv: pair 2"):
        write_tsv([Pair("ok", "gut"), bad], fresh)
    assert not fresh.exists()
    old = _write(tmp_path / "old.tsv", "old\talt\n")
    with pytest.raises(CorpusError):
        write_tsv([bad], old)
    assert old.read_text() == "old\talt\n"
    assert sorted(os.listdir(tmp_path)) == ["old.tsv"]


def test_write_tsv_failure_mid_write_leaves_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _write(tmp_path / "old.tsv", "old\talt\n")

    def boom(*_args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_tsv([Pair("new", "neu")], old)
    assert old.read_text() == "old\talt\n"
    assert os.listdir(tmp_path) == ["old.tsv"]


def test_write_tsv_empty_list(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="no pairs to write"):
        write_tsv([], tmp_path / "n.tsv")
    assert not (tmp_path / "n.tsv").exists()
