"""The language identifier behind `source: auto` and `/detect`, on short real sentences."""

from __future__ import annotations

import pytest

from service.langid import LANGUAGES, LanguageIdentifier

pytestmark = pytest.mark.unit

SENTENCES = {
    "en": ["The file could not be saved.", "Click OK to close the dialog.", "Open the file."],
    "de": [
        "Die Datei konnte nicht gespeichert werden.",
        "Klicken Sie auf OK, um den Dialog zu schließen.",
        "Öffnen Sie die Datei.",
    ],
    "fr": [
        "Le fichier n'a pas pu être enregistré.",
        "Cliquez sur OK pour fermer la boîte de dialogue.",
        "Ouvrez le fichier.",
    ],
}


@pytest.fixture(scope="module")
def ident() -> LanguageIdentifier:
    return LanguageIdentifier()


@pytest.mark.parametrize(("lang", "text"), [(k, t) for k, ts in SENTENCES.items() for t in ts])
def test_tells_german_english_and_french_apart(ident: LanguageIdentifier, lang, text) -> None:
    found = ident.detect(text)
    assert found is not None and found.language == lang
    assert 0.5 < found.confidence <= 1.0


def test_confidence_is_the_identifiers_own(ident: LanguageIdentifier) -> None:
    long = ident.detect("Click OK to close the dialog and save the file.")
    short = ident.detect("red tree")
    assert long is not None and short is not None
    assert short.language == long.language == "en"
    assert short.confidence < long.confidence < 1.0


def test_answers_only_the_languages_it_is_restricted_to() -> None:
    assert len(LANGUAGES) == 22 and {"en", "de", "fr", "zh", "ja"} <= set(LANGUAGES)
    ident = LanguageIdentifier(["en", "fr"])
    found = ident.detect("Die Datei konnte nicht gespeichert werden.")
    assert found is not None and found.language in {"en", "fr"}


@pytest.mark.parametrize("text", ["", "   ", "123 456", "?!"])
def test_a_text_without_letters_is_not_identified(ident: LanguageIdentifier, text) -> None:
    assert ident.detect(text) is None
