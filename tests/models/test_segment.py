import pytest

from models.segment import Segmented, segment, split_sentences

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'Filenames are case sensitive. That is, "MYFILE" and "MyFile" differ.',
            ["Filenames are case sensitive.", 'That is, "MYFILE" and "MyFile" differ.'],
        ),
        ("Is it on? Yes! It is.", ["Is it on?", "Yes!", "It is."]),
        ('He said "Go." Then he left.', ['He said "Go."', "Then he left."]),
        ("(See below.) The table follows.", ["(See below.)", "The table follows."]),
        ("Get it at www.unix.org. Now run it.", ["Get it at www.unix.org.", "Now run it."]),
        # not a sentence end: abbreviations, initials, numbers, a lower-case continuation
        ("Use a tool, e.g. Calc for this.", ["Use a tool, e.g. Calc for this."]),
        ("J. R. R. Tolkien wrote it.", ["J. R. R. Tolkien wrote it."]),
        ("It is in the U.S. The end.", ["It is in the U.S. The end."]),
        ("Step 1. Click OK.", ["Step 1. Click OK."]),
        ("Version 2.0 is out. it is.", ["Version 2.0 is out. it is."]),
        ("See Fig. 3 for details.", ["See Fig. 3 for details."]),
        ("one sentence", ["one sentence"]),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected
    assert " ".join(split_sentences(text)) == " ".join(text.split())


def test_segment_spans_and_join() -> None:
    seg = segment(["Ab cd. Ef gh.", "", "Ij kl", "M. No pq. Rs tu!"])
    assert seg.segments == ["Ab cd.", "Ef gh.", "", "Ij kl", "M. No pq.", "Rs tu!"]
    assert seg.spans == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert seg.join(["1", "2", "", "3", "4", "5"]) == ["1 2", "", "3", "4 5"]
    # an empty piece of output is not joined with a stray space
    assert seg.join(["1", "", "", "3", "", "5"]) == ["1", "", "3", "5"]
    with pytest.raises(ValueError, match="5 outputs for 6 segments"):
        seg.join(["x"] * 5)


def test_segment_off_keeps_texts_whole() -> None:
    texts = ["Ab cd. Ef gh.", "Ij kl"]
    seg = segment(texts, split=False)
    assert seg == Segmented(texts, [(0, 1), (1, 2)])


def test_gather_and_mean_per_text() -> None:
    seg = segment(["Ab cd. Ef gh.", "Ij kl", "Mn op. Qr st! Uv."])
    per_segment = [["a1", "a2"], ["b1"], [], ["d1"], [], ["f1", "f2"]]
    assert seg.gather(per_segment) == [["a1", "a2", "b1"], [], ["d1", "f1", "f2"]]
    assert seg.mean([0.2, 0.4, None, 0.5, None, None]) == pytest.approx([0.3, None, 0.5])
    with pytest.raises(ValueError, match="2 lists for 6 segments"):
        seg.gather([[], []])
    with pytest.raises(ValueError, match="1 values for 6 segments"):
        seg.mean([0.1])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Das ist z. B. möglich. Der Rest folgt.",
            ["Das ist z. B. möglich.", "Der Rest folgt."],
        ),
        ("Das gilt bzw. Dateien auch. Ende.", ["Das gilt bzw. Dateien auch.", "Ende."]),
        ("Siehe Abb. 3 und Nr. 5 unten. Weiter.", ["Siehe Abb. 3 und Nr. 5 unten.", "Weiter."]),
        ("Am 3. Mai kam er. Dann ging er.", ["Am 3. Mai kam er.", "Dann ging er."]),
        ("Das ist d.h. Klar. Gut.", ["Das ist d.h. Klar.", "Gut."]),
    ],
)
def test_split_sentences_german(text: str, expected: list[str]) -> None:
    assert split_sentences(text, "de") == expected
    assert segment([text], lang="de").segments == expected


def test_abbreviations_are_per_language() -> None:
    # "bzw." is German: an English source ends a sentence there, a German one does not.
    text = "Er kam bzw. Sie ging."
    assert split_sentences(text, "de") == [text]
    assert split_sentences(text, "en") == ["Er kam bzw.", "Sie ging."]
    # "e.g." is a chain of single letters, not a sentence end in any language
    assert split_sentences("Use e.g. Calc. Then stop.", "fr") == ["Use e.g. Calc.", "Then stop."]
    # a language without a list (and a regional tag) uses the other rules only
    assert split_sentences("See Fig. Two. Ok.", "xx") == ["See Fig.", "Two.", "Ok."]
    assert split_sentences("See Fig. Two. Ok.", "en-GB") == ["See Fig. Two.", "Ok."]
