"""Glossary files: CSV, TSV and TBX read into terms, and bad ones refused naming the line or
entry where they went wrong (index_builder/glossary_files.py)."""

from __future__ import annotations

import pytest

from index_builder.glossary_files import format_of, read_csv, read_glossary, read_tbx
from models.glossary import GlossaryError, Term

pytestmark = pytest.mark.unit


# --- CSV and TSV ----------------------------------------------------------------------------


def test_csv_with_a_header_quotes_notes_and_a_byte_order_mark() -> None:
    data = (
        '\ufeffsource,target,note\nfile,Datei,noun\n"Save, then close","Speichern, dann '
        'schließen",\n"the ""Open"" button",Schaltfläche „Öffnen“,UI label\n'
    ).encode()
    assert read_glossary(data, "csv", "en", "de").terms == (
        Term("file", "Datei", "noun"),
        Term("Save, then close", "Speichern, dann schließen"),
        Term('the "Open" button', "Schaltfläche „Öffnen“", "UI label"),
    )


def test_csv_header_may_name_languages_in_any_order_and_excel_uses_semicolons() -> None:
    data = "Note;DE;EN\nUI;Datei;file\n;Ordner;folder\n"
    assert read_csv(data).terms == (Term("file", "Datei", "UI"), Term("folder", "Ordner"))


def test_tsv_without_a_header_and_in_utf16_as_excel_saves_it() -> None:
    data = "file\tDatei\nfolder\tOrdner\tplural: Ordner\n\n"
    expected = (Term("file", "Datei"), Term("folder", "Ordner", "plural: Ordner"))
    assert read_glossary(data.encode("utf-8"), "tsv", "en", "de").terms == expected
    assert read_glossary(data.encode("utf-16"), "tsv", "en", "de").terms == expected


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"file,Datei\nfolder\n", "line 2: 1 column"),
        (b"file,Datei\nfolder,\n", "line 2: the target term is empty"),
        (b"file,Datei,n,extra\n", "line 1: 4 columns"),
        (b"file,Datei\n\xff\xfe\xfa,x\n", "line 2: not utf-8"),
        (b"\n\n", "no terms"),
        (b'file,Datei\n"open,"Offen\n', "line 2"),
        (("x," + "y" * 201 + "\n").encode(), "line 1: the target term has 201 characters"),
    ],
)
def test_bad_csv_is_refused_naming_the_line(data: bytes, error: str) -> None:
    with pytest.raises(GlossaryError, match=error):
        read_glossary(data, "csv", "en", "de")


def test_the_format_comes_from_the_name_unless_given() -> None:
    assert [format_of(None, n) for n in ("a.CSV", "b.tsv", "c.txt", "d.tbx")] == [
        "csv",
        "tsv",
        "tsv",
        "tbx",
    ]
    assert format_of("tbx", "terms.csv") == "tbx"
    with pytest.raises(GlossaryError, match="format"):
        format_of(None, "terms.xlsx")


# --- TBX ------------------------------------------------------------------------------------

TBX_V2 = b"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE martif SYSTEM "TBXcoreStructV02.dtd">
<martif type="TBX-Basic" xml:lang="en-US">
  <martifHeader><fileDesc><sourceDesc><p>UI terms</p></sourceDesc></fileDesc></martifHeader>
  <text><body>
    <termEntry id="t1">
      <descrip type="definition">A named collection of data.</descrip>
      <langSet xml:lang="en-US"><tig><term>file</term></tig></langSet>
      <langSet xml:lang="de-DE">
        <tig><term>File</term>
          <termNote type="administrativeStatus">deprecatedTerm-admn-sts</termNote></tig>
        <ntig><termGrp><term>Datei</term>
          <termNote type="administrativeStatus">preferredTerm-admn-sts</termNote>
        </termGrp></ntig>
      </langSet>
    </termEntry>
    <termEntry id="t2">
      <langSet xml:lang="en"><tig><term>Save As</term></tig></langSet>
      <langSet xml:lang="fr"><tig><term>Enregistrer sous</term></tig></langSet>
    </termEntry>
    <termEntry id="t3">
      <langSet xml:lang="en"><tig><term>folder</term></tig><tig><term>directory</term></tig>
      </langSet>
      <langSet xml:lang="de"><tig><term>Ordner</term></tig></langSet>
    </termEntry>
  </body></text>
</martif>
"""

TBX_V3 = b"""<?xml version="1.0" encoding="UTF-8"?>
<tbx type="TBX-Basic" style="dca" xml:lang="en" xmlns="urn:iso:std:iso:30042:ed-2">
  <tbxHeader><fileDesc><sourceDesc><p>v3</p></sourceDesc></fileDesc></tbxHeader>
  <text><body>
    <conceptEntry id="c1">
      <langSec xml:lang="en"><termSec><term>e-mail</term></termSec></langSec>
      <langSec xml:lang="de">
        <termSec><term>E-Mail</term>
          <termNote type="administrativeStatus">preferredTerm-admn-sts</termNote></termSec>
        <note>neuter</note>
      </langSec>
    </conceptEntry>
  </body></text>
</tbx>
"""


def test_tbx_v2_preferred_targets_synonyms_notes_and_skipped_entries() -> None:
    got = read_tbx(TBX_V2, "en", "de")
    assert got.terms == (
        Term("file", "Datei", "A named collection of data."),
        Term("folder", "Ordner"),
        Term("directory", "Ordner"),
    )
    assert got.skipped == 1  # t2 has no German term
    assert read_tbx(TBX_V2, "en", "fr").terms == (Term("Save As", "Enregistrer sous"),)


def test_tbx_v3_namespaced_concept_entries() -> None:
    got = read_glossary(TBX_V3, "tbx", "en", "de")
    assert got.terms == (Term("e-mail", "E-Mail", "neuter"),) and got.skipped == 0


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (  # billion laughs: refused before anything is expanded
            b'<?xml version="1.0"?><!DOCTYPE martif [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'
            b'<martif><text><body><termEntry><langSet xml:lang="en"><tig><term>&b;</term>'
            b"</tig></langSet></termEntry></body></text></martif>",
            "internal subset",
        ),
        (  # an external entity (XXE): never fetched
            b'<!DOCTYPE martif [<!ENTITY x SYSTEM "file:///etc/passwd">]><martif><text><body>'
            b'<termEntry><langSet xml:lang="en"><tig><term>&x;</term></tig></langSet>'
            b"</termEntry></body></text></martif>",
            "internal subset",
        ),
        (b"<martif><text>\n<body><termEntry>", "line 2: not well-formed XML"),
        (b"<html><body/></html>", "<html> is not a TBX document"),
        (b"<martif><text><body/></text></martif>", "no termEntry or conceptEntry"),
        (
            b'<martif><text><body><termEntry id="e7">\n<langSet><tig><term>file</term></tig>'
            b"</langSet></termEntry></body></text></martif>",
            r"entry e7 \(line 1\): a <langSet> \(line 2\) has no xml:lang",
        ),
        (
            b'<martif><text><body><termEntry id="e8"><langSet xml:lang="en">\n<tig><term> </term>'
            b"</tig></langSet></termEntry></body></text></martif>",
            r"entry e8 \(line 1\): an empty en term \(line 2\)",
        ),
        (
            b'<martif><text><body><termEntry><langSet xml:lang="en"><tig><term>file</term></tig>'
            b"</langSet></termEntry></body></text></martif>",
            "no entry of 1 has terms in both en and de",
        ),
    ],
)
def test_bad_tbx_is_refused_naming_the_entry_or_line(data: bytes, error: str) -> None:
    with pytest.raises(GlossaryError, match=error):
        read_tbx(data, "en", "de")
