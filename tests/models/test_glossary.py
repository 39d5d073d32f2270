"""Glossaries: terms found and masked like literals, restored as their targets, enforced by the
pipeline; CSV, TSV and TBX files read, and bad ones refused with where (models/glossary*.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from models import pipeline
from models.glossary import MAX_TERM_CHARS, MAX_TERMS, Glossary, GlossaryError, Term
from models.glossary_files import format_of, read_csv, read_glossary, read_tbx
from models.literals import keeps, keeps_terms, mask, mask_pair, unmask
from models.translator import DecodeOptions, Translation

pytestmark = pytest.mark.unit

UI = Glossary(
    (
        Term("file", "Datei"),
        Term("file manager", "Dateimanager"),
        Term("save file", "Datei speichern"),
        Term("Save As", "Speichern unter"),
        Term("save", "speichern"),
        Term("e-mail", "E-Mail"),
    )
)


def spans(glossary: Glossary, text: str) -> list[tuple[str, str]]:
    return [(text[a:b], target) for a, b, target in glossary.find(text)]


# --- matching -------------------------------------------------------------------------------


def test_terms_match_whole_words_in_any_case_and_spacing() -> None:
    assert spans(UI, "Open the FILE, then the File.") == [("FILE", "Datei"), ("File", "Datei")]
    assert spans(UI, "The profile and the files are filed.") == []  # never inside a word
    assert spans(UI, "Choose Save   as now") == [("Save   as", "Speichern unter")]
    assert spans(UI, "Send an E-Mail, not an e - mail.") == [("E-Mail", "E-Mail")]


def test_the_longest_term_wins_and_matches_never_overlap() -> None:
    assert spans(UI, "Open the file manager.") == [("file manager", "Dateimanager")]
    # "save file" (9 characters) starts first, "file manager" (12) is longer: it wins, and
    # "save" is then matched on its own
    assert spans(UI, "save file manager") == [
        ("save", "speichern"),
        ("file manager", "Dateimanager"),
    ]
    assert spans(UI, "Save file now") == [("Save file", "Datei speichern")]


def test_a_later_term_replaces_an_earlier_one_of_the_same_source() -> None:
    g = Glossary((Term("File", "Akte"), Term(" file ", "Datei", "UI")))
    assert g.terms == (Term("file", "Datei", "UI"),)
    assert g.get("FILE") == Term("file", "Datei", "UI") and g.get("folder") is None
    assert g.merged([Term("folder", "Ordner")]).get("folder").target == "Ordner"
    assert len(g.without("FILE")) == 0


def test_the_version_is_a_hash_of_the_content_alone() -> None:
    a = Glossary((Term("file", "Datei"), Term("folder", "Ordner")))
    b = Glossary((Term("folder", "Ordner"), Term("file", "Datei")))
    assert a.version == b.version and len(a.version) == 16
    assert Glossary((Term("file", "Datei"),)).version != a.version
    assert Glossary((Term("file", "Datei"), Term("folder", "Verzeichnis"))).version != a.version
    assert Glossary(a.terms, "en", "fr").version != a.version
    assert Glossary.from_json(a.to_json()) == a


@pytest.mark.parametrize(
    ("term", "why"),
    [
        (Term("", "Datei"), "source term is empty"),
        (Term("file", "  "), "target term is empty"),
        (Term("x" * (MAX_TERM_CHARS + 1), "y"), f"at most {MAX_TERM_CHARS}"),
        (Term("file", "Da\x07tei"), "control character"),
        (Term("file", "Datei {1}"), "mask"),
        (Term("...", "…"), "no letter or digit"),
        (Term(" ".join(["a"] * 13), "b"), "more than 12 words"),
    ],
)
def test_bad_terms_are_refused_with_the_reason(term: Term, why: str) -> None:
    with pytest.raises(GlossaryError, match=why):
        Glossary((term,))


def test_a_glossary_holds_at_most_max_terms() -> None:
    terms = [Term(f"t{i}", "x") for i in range(MAX_TERMS + 1)]
    with pytest.raises(GlossaryError, match=f"at most {MAX_TERMS}"):
        Glossary(tuple(terms))


# --- masking and restoring -----------------------------------------------------------------


def test_a_term_is_masked_like_a_literal_and_restored_as_its_target() -> None:
    m = mask("Write to help@example.com to recover the file.", UI)
    assert m.text == "Write to {1} to recover the {2}."
    assert m.literals == ("help@example.com", "Datei") and m.terms == ((2, "file"),)
    out = unmask("Schreiben Sie an {1}, um die {2} wiederherzustellen.", m)
    assert out == "Schreiben Sie an help@example.com, um die Datei wiederherzustellen."
    lost = unmask("Schreiben Sie an {1}, um sie wiederherzustellen.", m)  # the model lost {2}
    assert lost.count("Datei") == 1 and lost.count("help@example.com") == 1


def test_a_literal_wins_over_a_term_inside_it_and_markup_stays_around_terms() -> None:
    m = mask("See https://example.org/file for the file.", UI)
    assert m.literals == ("https://example.org/file", "Datei") and m.terms == ((2, "file"),)
    m = mask("Click <b>Save</b> now.", UI)
    assert m.text == "Click {1} {2} {3} now." and m.terms == ((2, "Save"),)
    out = unmask("Klicken Sie jetzt auf {1} {2} {3}.", m)
    assert out == "Klicken Sie jetzt auf <b>speichern</b>."  # mid-sentence: as the glossary


def test_a_term_that_opens_the_sentence_is_capitalised_as_the_source_was() -> None:
    m = mask("Save the profile.", UI)
    assert unmask("{1} Sie das Profil.", m) == "Speichern Sie das Profil."
    assert unmask("Bitte {1} Sie das Profil.", m) == "Bitte speichern Sie das Profil."
    assert unmask("{1} Sie das Profil.", mask("save the profile.", UI)) == (
        "speichern Sie das Profil."
    )


def test_a_sentence_of_terms_and_literals_only_never_reaches_the_model() -> None:
    for text, out in [("Save", "Speichern"), ("<b>Save</b>", "<b>Speichern</b>"),
                      ("save as 5", "Speichern unter 5"), ("FILE", "Datei")]:  # fmt: skip
        m = mask(text, UI)
        assert m.empty and m.prefix + m.suffix == out


def test_without_terms_masking_is_what_it_was() -> None:
    text = "Please write to help@example.com or call 555 today."
    assert mask(text, Glossary(())) == mask(text)
    assert mask("Open the file.", UI, literals=False).literals == ("Datei",)
    assert mask("Open file 5.", UI, literals=False).text == "Open {1} 5."


def test_the_own_translation_stands_only_when_it_uses_every_term() -> None:
    source = "Copy the file and the file manager to /tmp."
    m = mask(source, UI)
    good = "Kopieren Sie die Datei und den Dateimanager nach /tmp."
    assert keeps_terms(good, m) and keeps(source, good, m)
    assert not keeps_terms("Kopieren Sie das Dokument und den Dateimanager nach /tmp.", m)
    assert not keeps_terms("Kopieren Sie die Textdatei und den Dateimanager nach /tmp.", m)
    assert not keeps_terms("Kopieren Sie die DATEI und den Dateimanager nach /tmp.", m)
    # inflected, or a compound's head: the model's grammar kept (a mask restores no ending)
    assert keeps_terms("Kopieren Sie die Dateien und den Dateimanagern nach /tmp.", m)
    assert keeps_terms("Kopieren Sie die Datei und den dateimanager nach /tmp.", m)
    assert not keeps(source, "Kopieren Sie die Datei und den Dateimanager nach /temp.", m)
    twice = mask("The file is a file.", UI)
    assert not keeps_terms("Die Datei ist ein Dokument.", twice)
    assert keeps_terms("Die Datei ist eine Datei.", twice)


def test_neighbour_pairs_are_masked_where_both_sides_hold_the_term() -> None:
    m = mask("Save the file.", UI)
    assert mask_pair("Delete the File now.", "Löschen Sie die Datei jetzt.", m) == (
        "Delete the {2} now.",
        "Löschen Sie die {2} jetzt.",
    )
    # the memory's target uses another word: left as it is, so the model sees the difference
    assert mask_pair("Delete the file.", "Löschen Sie das Dokument.", m) == (
        "Delete the file.",
        "Löschen Sie das Dokument.",
    )


# --- the pipeline ---------------------------------------------------------------------------


@dataclass
class FakeTranslator:
    """What `prepare` reads of a translator."""

    source_lang: str = "en"
    uses_memory: bool = False


def test_the_pipeline_keeps_a_translation_that_uses_the_terms_else_the_masked_one() -> None:
    texts = ["Open the file.", "Close the file.", "Close the window.", "Save"]
    prepared = pipeline.prepare(FakeTranslator(), texts, DecodeOptions(), glossary=UI)  # type: ignore[arg-type]
    assert prepared.sentences == [*texts, "Open the {1}.", "Close the {1}."]
    decoded = [
        Translation("Öffnen Sie die Datei.", None),  # uses the term: kept
        Translation("Schließen Sie das Dokument.", None),  # does not: the masked one
        Translation("Schließen Sie das Fenster.", None),
        Translation("Sichern", None),  # a term alone: never decoded, the term itself
        Translation("Öffnen Sie die {1}!", None),
        Translation("Schließen Sie die {1}.", None),
    ]
    out = [o.text for o in pipeline.finish(prepared, decoded)]
    assert out == [
        "Öffnen Sie die Datei.",
        "Schließen Sie die Datei.",
        "Schließen Sie das Fenster.",
        "Speichern",
    ]


def test_without_a_glossary_the_pipeline_prepares_what_it_did() -> None:
    texts = ["Open the file.", "Write to help@example.com."]
    plain = pipeline.prepare(FakeTranslator(), texts, DecodeOptions())  # type: ignore[arg-type]
    assert plain.sentences == [*texts, "Write to {1}."]
    off = DecodeOptions(keep_literals=False)
    assert pipeline.prepare(FakeTranslator(), texts, off).masked is None  # type: ignore[arg-type]
    terms_only = pipeline.prepare(FakeTranslator(), texts, off, glossary=UI)  # type: ignore[arg-type]
    assert terms_only.sentences == [*texts, "Open the {1}."]


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
