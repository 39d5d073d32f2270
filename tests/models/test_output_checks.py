"""Loops and implausible lengths counted over translations (models/output_checks.py)."""

from __future__ import annotations

import pytest

from models.output_checks import check_outputs, has_loop, implausible_length, repeated

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "hyp",
    [
        "Das Wetter ist heute nett heute nett heute.",
        "Speichern speichern",
        "Die Söhne, die Söhne Levis.",
        "in Ihrem Dokument in Ihrem Dokument als Text",
    ],
)
def test_back_to_back_repeats_are_loops(hyp: str) -> None:
    assert has_loop(hyp, "A source that repeats nothing.")


@pytest.mark.parametrize(
    "hyp",
    [
        "Dateien, die die Anwendung braucht.",  # German asks for "die die"
        "Wenn es gespeichert wird, wird es kopiert.",  # and for "wird, wird"
        "Seite 1 1 2",  # numbers may repeat
        "Das Haus und das Haus daneben.",  # not back to back
        "Speichern",
    ],
)
def test_ordinary_sentences_are_not_loops(hyp: str) -> None:
    assert not has_loop(hyp, "A source that repeats nothing.")


def test_a_source_that_repeats_may_be_translated_with_a_repeat() -> None:
    assert not has_loop("sehr, sehr gut", "very, very good")


def test_length_ratio_outside_a_third_to_three_times_is_implausible() -> None:
    src = "This sentence has exactly forty characters"
    assert implausible_length("Kurz.", src)
    assert implausible_length("x" * 130, src)
    assert not implausible_length("Dieser Satz hat genau vierzig Zeichen oder so", src)
    assert not implausible_length("Abbrechen und zurückkehren", "Cancel")  # short: not judged


def test_counts_and_shares() -> None:
    out = check_outputs(["Speichern speichern", "Gut."], ["Save", "Good."])
    assert out == {
        "loops": 1,
        "loops_pct": 50.0,
        "implausible_length": 0,
        "implausible_length_pct": 0.0,
    }
    with pytest.raises(ValueError, match="2 translations for 1 sources"):
        check_outputs(["a", "b"], ["a"])


@pytest.mark.parametrize(
    ("text", "word", "span"),
    [
        ("very very good", True, False),
        ("two two three", True, False),  # a short word too: its translation may repeat
        ("Mary and Martha, Mary and Martha came.", False, True),
        ("Holy, holy, holy is the Lord.", False, False),  # a word after a comma: German too
        ("Clean animals, animals that are not clean", False, False),
        ("Save your changes before closing.", False, False),
    ],
)
def test_what_a_source_says_again_is_judged_by_its_words(text: str, word: bool, span: bool) -> None:
    assert repeated(text) == (word, span)
