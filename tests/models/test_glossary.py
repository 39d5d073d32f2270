"""Glossaries: terms found and masked like literals, restored as their targets, enforced by the
pipeline (models/glossary.py; its files are read by index_builder/glossary_files.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from models import pipeline
from models.glossary import MAX_TERM_CHARS, MAX_TERMS, Glossary, GlossaryError, Term
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
