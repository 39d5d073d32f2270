"""Structural extraction from small fixture trees (never the real package cache)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from index_builder.corpus import Pair
from index_builder.prepare.structural import (
    _keep,
    _unescape_groff,
    debian_reference,
    gimp_help,
    libreoffice_help,
    man_pages,
)

pytestmark = pytest.mark.unit


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _lo_page(body: str, lang: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="{lang}"><head><meta charset="utf-8"><title>t</title></head>
<body><header><p>LibreOffice Help</p></header>
<div id="DisplayArea">{body}</div>
<footer><p id="bm_module" dir="auto"></p></footer></body></html>"""


def test_keep_rules() -> None:
    assert _keep("Open the file.", "Öffnen Sie die Datei.")
    assert not _keep("Open", "Open")
    assert not _keep("123", "456")
    assert not _keep("", "x")
    assert not _keep("Edit", "Bearbeiten des Dokuments")  # ratio > 2
    assert not _keep('The "Normal" group', "The „Normal“ group")  # untranslated


def test_libreoffice_help(tmp_path: Path) -> None:
    base = tmp_path / "usr/share/libreoffice/help"
    _write(
        base / "en-US/text/a.html",
        _lo_page(
            """<h1 id="hd_id1">Load/Save   options</h1>
<p id="par_id2" class="paragraph">Specifies <span class="emph">general</span> &amp; settings.</p>
<p id="par_id3">Choose <span class="switchinline"><span hidden="true" id="MACx">
LibreOffice - Preferences</span><span hidden="true" id="defaultx">Tools - Options</span></span>
- Load/Save.</p>
<p id="par_id4">SOLID</p>
<p id="par_id5" class="code">x = Open("file")</p>
<p id="par_id6">Only in English.</p>""",
            "en-US",
        ),
    )
    _write(
        base / "de/text/a.html",
        _lo_page(
            """<h1 id="hd_id1">Laden/Speichern-Optionen</h1>
<p id="par_id2" class="paragraph">Legt <span class="emph">allgemeine</span> &amp;
Einstellungen fest.</p>
<p id="par_id3">Wählen Sie <span class="switchinline"><span hidden="true" id="MACx">
LibreOffice - Einstellungen</span><span hidden="true" id="defaultx">Extras - Optionen</span>
</span> - Laden/Speichern.</p>
<p id="par_id4">SOLID</p>
<p id="par_id5" class="code">x = Öffnen("Datei")</p>""",
            "de",
        ),
    )
    _write(base / "en-US/text/b.html", _lo_page('<h2 id="hd_id9">Printing</h2>', "en-US"))
    _write(base / "de/text/b.html", _lo_page('<h2 id="hd_id9">Drucken</h2>', "de"))
    _write(base / "en-US/text/c.html", _lo_page('<p id="par_1">No German file.</p>', "en-US"))

    origin = "libreoffice-help"
    assert libreoffice_help(tmp_path) == [
        Pair("Load/Save options", "Laden/Speichern-Optionen", origin, "text/a.html"),
        Pair(
            "Specifies general & settings.",
            "Legt allgemeine & Einstellungen fest.",
            origin,
            "text/a.html",
        ),
        Pair(
            "Choose Tools - Options - Load/Save.",
            "Wählen Sie Extras - Optionen - Laden/Speichern.",
            origin,
            "text/a.html",
        ),
        Pair("Printing", "Drucken", origin, "text/b.html"),
    ]
    assert libreoffice_help(tmp_path, tgt_lang="fr") == []


_NAV = """<div class="navheader"><table summary="Navigation header"><tr><th>Chapter 1</th>
<td><a href="p.html">Prev</a></td></tr></table></div>"""


def _docbook(body: str) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" "x">
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Head title</title></head>
<body>{_NAV}<div class="chapter">{body}</div>
<div class="navfooter"><p>Home</p></div></body></html>"""


def test_gimp_help(tmp_path: Path) -> None:
    base = tmp_path / "usr/share/gimp/2.0/help"
    # Same block sequence: aligned by position.
    _write(
        base / "en/match.html",
        _docbook(
            """<h2 class="title">1. Layers</h2>
<div class="toc"><dl><dt>1.1 Layers</dt></dl></div>
<p>A layer is like a   transparent sheet.</p>
<ul><li><p>Click the <span class="guilabel">New</span> button.</p></li></ul>
<pre class="programlisting">gimp --batch</pre>"""
        ),
    )
    _write(
        base / "de/match.html",
        _docbook(
            """<h2 class="title">1. Ebenen</h2>
<div class="toc"><dl><dt>1.1 Ebenen</dt></dl></div>
<p>Eine Ebene ist wie eine durchsichtige Folie.</p>
<ul><li><p>Klicken Sie auf <span class="guilabel">Neu</span>.</p></li></ul>
<pre class="programlisting">gimp --batch</pre>"""
        ),
    )
    # Different sequences (the translator merged two paragraphs): the longest common
    # subsequence of tags is aligned, keeping only pairs that the forward and the backward
    # alignment agree on (the paragraphs around the merge are ambiguous and dropped).
    steps_en = [f"<li>Step {n}: click the button.</li>" for n in range(1, 8)]
    steps_de = [f"<li>Schritt {n}: Klicken Sie auf den Knopf.</li>" for n in range(1, 8)]
    _write(
        base / "en/mismatch.html",
        _docbook(
            """<h2 class="title">2. Paths</h2>
<p>Paths are curves with handles.</p>
<p>They can be stroked.</p>
<ul>"""
            + "".join(steps_en)
            + "</ul>"
        ),
    )
    _write(
        base / "de/mismatch.html",
        _docbook(
            """<h2 class="title">2. Pfade</h2>
<p>Pfade sind Kurven mit Anfassern, die man nachziehen kann.</p>
<ul>"""
            + "".join(steps_de)
            + "</ul>"
        ),
    )
    # A file whose sequences are too different (an index sorted by the translated term).
    _write(base / "en/zindex.html", _docbook("<p>Alpha channel</p>" + "<dt>Layer</dt>" * 5))
    _write(base / "de/zindex.html", _docbook("<p>Alphakanal</p>" + "<dd>Ebene</dd>" * 5))
    origin = "gimp-help"
    assert gimp_help(tmp_path) == [
        Pair("1. Layers", "1. Ebenen", origin, "match.html"),
        Pair(
            "A layer is like a transparent sheet.",
            "Eine Ebene ist wie eine durchsichtige Folie.",
            origin,
            "match.html",
        ),
        Pair("Click the New button.", "Klicken Sie auf Neu.", origin, "match.html"),
        Pair("2. Paths", "2. Pfade", origin, "mismatch.html"),
    ] + [
        Pair(
            f"Step {n}: click the button.",
            f"Schritt {n}: Klicken Sie auf den Knopf.",
            origin,
            "mismatch.html",
        )
        for n in range(1, 8)
    ]


def test_debian_reference(tmp_path: Path) -> None:
    base = tmp_path / "usr/share/debian-reference"
    _write(
        base / "ch01.en.html",
        _docbook(
            """<h1 class="title">Chapter 1. GNU/Linux tutorials</h1>
<p>Learning a computer system is like learning a new foreign language.</p>
<p>This paragraph is not translated yet.</p>
<table><tr><td>package</td><td>popcon</td><td>system administration tools</td></tr></table>"""
        ),
    )
    _write(
        base / "ch01.de.html",
        _docbook(
            """<h1 class="title">Kapitel 1. GNU/Linux-Grundlagen</h1>
<p>Ein Computersystem zu erlernen ist wie das Erlernen einer neuen Fremdsprache.</p>
<p>This paragraph is not translated yet.</p>
<table><tr><td>Paket</td><td>Popcon</td><td>Werkzeuge zur Systemadministration</td></tr>
</table>"""
        ),
    )
    _write(base / "ch02.en.html", _docbook("<p>No German.</p>"))
    origin, doc = "debian-reference", "ch01.en.html"
    assert debian_reference(tmp_path) == [
        Pair("Chapter 1. GNU/Linux tutorials", "Kapitel 1. GNU/Linux-Grundlagen", origin, doc),
        Pair(
            "Learning a computer system is like learning a new foreign language.",
            "Ein Computersystem zu erlernen ist wie das Erlernen einer neuen Fremdsprache.",
            origin,
            doc,
        ),
        Pair("package", "Paket", origin, doc),
        Pair("system administration tools", "Werkzeuge zur Systemadministration", origin, doc),
    ]


_MAN_EN = r""".\" Copyright (c) 1993 Someone
.TH utmp 5 2023-02-05 "Linux man-pages 6.03"
.SH NAME
utmp, wtmp \- login records
.SH SYNOPSIS
.nf
.B #include <utmp.h>
.fi
.SH DESCRIPTION
The
.I utmp
file allows one to discover information about who is currently using the
system.
.PP
.B Warning:
.I utmp
must not be writable by the user class \[dq]other\[dq].
.TP
.B \-\-all
Show all entries, see
.BR login (1).
.PP
.in +4n
.EX
struct utmp { short ut_type; };
.EE
.SH "SEE ALSO"
Ok.
"""

_MAN_DE = r""".\" -*- coding: UTF-8 -*-
.TH utmp 5 "5. Februar 2023" "Linux man\-pages 6.03"
.SH BEZEICHNUNG
utmp, wtmp \- Anmeldedatensätze
.SH ÜBERSICHT
.nf
\fB#include <utmp.h>\fP
.fi
.SH BESCHREIBUNG
Die Datei \fIutmp\fP gibt Auskunft darüber, wer das System im Moment
benutzt.
.PP
\fBWarnung\fP: \fIutmp\fP darf nicht von der Benutzerklasse \(Bqother\(lq schreibbar sein.
.TP
\fB\-\-all\fP
Alle Einträge anzeigen, siehe \fBlogin\fP(1).
.PP
.in +4n
.EX
struct utmp { short ut_type; };
.EE
.SH "SIEHE AUCH"
Gut.
"""


def test_unescape_groff() -> None:
    assert (
        _unescape_groff(r"\fBbold\fR \f(CWcode\fP \(em x\-y \e \&.z")
        == "bold code \u2014 x-y \\ .z"
    )
    assert _unescape_groff(r"a\[u00E4]b \*(lqq\*(rq \s-1SMALL\s0") == "a\u00e4b \u201cq\u201d SMALL"


def test_man_pages(tmp_path: Path) -> None:
    base = tmp_path / "usr/share/man"
    for rel, text in (("man5/utmp.5.gz", _MAN_EN), ("de/man5/utmp.5.gz", _MAN_DE)):
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    (base / "man5/wtmp.5.gz").symlink_to("utmp.5.gz")  # alias: skipped
    (base / "de/man5/wtmp.5.gz").symlink_to("utmp.5.gz")
    _write(base / "man5/broken.5.gz", "not gzip")  # malformed: skipped
    _write(base / "de/man5/broken.5.gz", "not gzip")

    origin, doc = "man-pages", "man5/utmp.5.gz"
    assert man_pages(tmp_path) == [
        Pair("utmp, wtmp - login records", "utmp, wtmp - Anmeldedatensätze", origin, doc),
        Pair("DESCRIPTION", "BESCHREIBUNG", origin, doc),
        Pair(
            "The utmp file allows one to discover information about who is currently using "
            "the system.",
            "Die Datei utmp gibt Auskunft darüber, wer das System im Moment benutzt.",
            origin,
            doc,
        ),
        Pair(
            'Warning: utmp must not be writable by the user class "other".',
            "Warnung: utmp darf nicht von der Benutzerklasse \u201eother\u201c schreibbar sein.",
            origin,
            doc,
        ),
        Pair(
            "Show all entries, see login(1).",
            "Alle Einträge anzeigen, siehe login(1).",
            origin,
            doc,
        ),
    ]
