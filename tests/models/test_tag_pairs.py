"""Markup around words that move: a tag pair left empty is moved to its words or masked
whole (models/tag_pairs.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.glossary import Glossary, Term
from models.literals import find_literals, mask, unmask
from models.tag_pairs import hollow, repair, unwrap, wrap
from tests.models.test_literals import literal, words

pytestmark = pytest.mark.unit


FILE = Glossary((Term("file", "Datei"),))


def test_a_pair_around_words_is_masked_whole_and_what_it_encloses_apart() -> None:
    w = wrap(mask("Copy <b>all %d files</b> to /tmp/x now."))
    assert w is not None
    assert w.masked.text == "Copy {1} to {2} now."
    assert w.masked.literals == ("<b>all %d files</b>", "/tmp/x")
    assert w.masked.where == (5 / 20, 12 / 20)
    assert w.masked.glue == ((False, False), (False, False))
    assert [(p.k, p.opening, p.closing, p.nth) for p in w.pairs] == [(1, "<b>", "</b>", 0)]
    (inner,) = w.inner
    assert (inner.text, inner.literals, inner.prefix, inner.suffix) == (
        "all {1} files",
        ("%d",),
        "",
        "",
    )
    assert unmask("alle {1} Dateien", inner) == "alle %d Dateien"


def test_a_peeled_tag_of_a_pair_is_wrapped_with_it() -> None:
    m = mask("<b>Save</b> your changes before closing.")
    assert (m.prefix, m.text) == ("<b>", "Save {1} your changes before closing.")
    w = wrap(m)
    assert w is not None
    assert (w.masked.prefix, w.masked.text) == ("", "{1} your changes before closing.")
    assert w.masked.glue == ((False, False),)
    assert [x.text for x in w.inner] == ["Save"]
    w = wrap(mask("<i>Click <b>Save</b> now</i>"))  # <i> around the whole text stays peeled
    assert w is not None
    assert (w.masked.prefix, w.masked.text, w.masked.suffix) == ("<i>", "Click {1} now", "</i>")


def test_only_the_outermost_pair_around_words_is_wrapped() -> None:
    w = wrap(mask('Click <a href="x"><b>Save</b> all</a> or <i>42</i> now.'))
    assert w is not None
    assert w.masked.text == "Click {1} or {2} {3} {4} now."  # as `mask` spaces them
    assert w.masked.literals == ('<a href="x"><b>Save</b> all</a>', "<i>", "42", "</i>")
    (inner,) = w.inner  # its own edge tag peeled, as `mask` does
    assert (inner.prefix, inner.text, inner.literals) == ("<b>", "Save {1} all", ("</b>",))
    assert unmask("Speichern {1} alle", inner) == "<b>Speichern</b> alle"
    assert wrap(mask("Save <b>42</b> now.")) is None  # no words inside
    assert wrap(mask("<b>Save</b>")) is None  # both tags peeled: nothing moves
    assert wrap(mask("<b>Save</b> 42")) is None  # nothing but the pair to translate


def test_a_wrapped_translation_gets_its_tags_around_the_inner_translation() -> None:
    w = wrap(mask("Click <b>Save</b> to keep your changes."))
    assert w is not None
    assert unwrap("Klicken Sie auf {1}, um Ihre Änderungen zu behalten.", w, ["Speichern"]) == (
        "Klicken Sie auf <b>Speichern</b>, um Ihre Änderungen zu behalten."
    )
    # a glossary term alone inside: nothing to decode, restored as its target
    w = wrap(mask("Click <b>file</b> now.", FILE))
    assert w is not None
    assert w.masked.text == "Click {1} now." and w.inner[0].empty
    inner = unmask("", w.inner[0])
    assert unwrap("Klicken Sie jetzt auf {1}.", w, [inner]) == (
        "Klicken Sie jetzt auf <b>Datei</b>."
    )
    w = wrap(mask("Open <b>the file</b> and <i>close</i> it.", FILE))
    assert w is not None
    assert w.masked.text == "Open {1} and {2} it."
    assert [(x.text, x.literals, x.terms) for x in w.inner] == [
        ("the {1}", ("Datei",), ((1, "file"),)),
        ("close", (), ()),
    ]
    inner = [unmask("die {1}", w.inner[0]), "schließen"]
    assert unwrap("Öffnen Sie {1} und {2} Sie sie.", w, inner) == (
        "Öffnen Sie <b>die Datei</b> und <i>schließen</i> Sie sie."
    )


def test_a_pair_side_by_side_is_hollow_where_the_source_pair_held_words() -> None:
    source = "Click <b>Save</b> to keep your changes."
    assert hollow(source, "Klicken Sie auf <b></b>, um Ihre Änderungen zu halten.")
    assert hollow(source, "Klicken Sie auf <b> , </b> um Ihre Änderungen zu halten.")
    assert not hollow(source, "Klicken Sie auf <b>Speichern</b>, um Ihre Änderungen zu halten.")
    assert not hollow("A <b></b> B.", "A <b></b> B.")  # empty in the source too
    # the second <b> pair of the source held words, the first did not
    assert hollow("<b> </b> or <b>Save</b> now", "<b> </b> oder <b></b> jetzt")
    assert not hollow("<b>Save</b> or <b> </b> now", "<b>Speichern</b> oder <b></b> jetzt")


def test_a_hollow_pair_is_moved_around_the_words_it_enclosed() -> None:
    source = "<b>Save</b> your changes before closing."
    w = wrap(mask(source))
    assert w is not None
    restored = "<b></b> Ihre Änderungen vor dem Schließen speichern."
    out = repair(source, [restored], w, "{1} Ihre Änderungen.", ["Speichern."])
    assert out == "Ihre Änderungen vor dem Schließen <b>speichern</b>."
    source = "Click <b>Save all</b> to keep your changes."
    w = wrap(mask(source))
    assert w is not None
    restored = "Klicken Sie auf <b></b>, um Ihre Änderungen zu halten, alle speichern."
    assert repair(source, [restored], w, "-", ["Alle speichern"]) == (
        "Klicken Sie auf, um Ihre Änderungen zu halten, <b>alle speichern</b>."
    )


def test_a_pair_whose_words_are_not_found_takes_the_wrapped_translation() -> None:
    source = "Click <b>Save</b> to keep your changes."
    w = wrap(mask(source))
    assert w is not None
    restored = "Klicken Sie auf <b></b>, um Ihre Änderungen zu halten."
    wrapped = "Klicken Sie auf {1}, um Ihre Änderungen zu behalten."
    assert repair(source, [restored], w, wrapped, ["Speichern"]) == (
        "Klicken Sie auf <b>Speichern</b>, um Ihre Änderungen zu behalten."
    )
    # words inside a literal are not the words: "speichern" in the URL is left alone
    restored = "Siehe www.example.org/speichern <b></b>, um Ihre Änderungen zu halten."
    assert repair(source, [restored], w, wrapped, ["Speichern"]).startswith("Klicken Sie auf <b>")


def test_a_repair_that_would_be_hollow_too_keeps_the_translation() -> None:
    source = "Click <b>Save</b> to keep your changes."
    w = wrap(mask(source))
    assert w is not None
    restored = "Klicken Sie auf <b></b>, um Ihre Änderungen zu halten."
    assert repair(source, [restored], w, "Klicken Sie auf {1}.", ["..."]) == restored
    kept = "Klicken Sie auf <b>Speichern</b>, um Ihre Änderungen zu halten."
    assert repair(source, [kept], w, "Klicken Sie auf {1}.", ["Sichern"]) == kept  # not hollow


words_in_pair = st.text(alphabet="abcdef XY", min_size=1, max_size=10).filter(str.strip)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(words, literal, words_in_pair.map(lambda w: f"<i>{w}</i>")), max_size=8),
    st.randoms(),
)
def test_a_repair_keeps_every_literal_exactly_as_often_whatever_the_model_does(parts, rnd) -> None:
    text = " ".join(["Click", *parts, "now"])
    m, w = mask(text), wrap(mask(text))
    if w is None:
        return

    def model(masked_text: str) -> str:  # shuffles, drops and repeats masks
        tokens = masked_text.split()
        rnd.shuffle(tokens)
        keep = [t for t in tokens if rnd.random() > 0.3]
        return " ".join(keep + [t for t in tokens if rnd.random() > 0.8])

    restored = unmask(model(m.text), m)
    inner = [unmask("" if x.empty else model(x.text), x) for x in w.inner]
    words_out = restored.split()
    if rnd.random() < 0.5 and words_out:  # an inner translation the sentence also wrote
        inner = [rnd.choice(words_out) for _ in inner]
    out = repair(text, [restored], w, model(w.masked.text), inner)
    for lit in set(find_literals(text)):
        value = text[lit[0] : lit[1]]
        assert out.count(value) == text.count(value)


def test_words_translated_apart_lose_a_word_said_again() -> None:
    source = "Click <a href='x'>and</a> choose Delete."
    w = wrap(mask(source))
    assert w is not None
    hollowed = "Klicken Sie <a href='x'></a> und wählen Sie Löschen."
    # not found in the sentence as "und und und": the echo is dropped, then it is found
    fixed = repair(source, [hollowed], w, "Klicken Sie {1} wählen Sie Löschen.", ["und und und"])
    assert fixed == "Klicken Sie <a href='x'>und</a> wählen Sie Löschen."


def test_a_pair_around_another_word_moves_to_its_own_or_takes_the_next_candidate() -> None:
    source = "<b>Save</b> your changes before closing."
    w = wrap(mask(source))
    assert w is not None
    wrong = "<b>Änderungen</b> Ihre Änderungen vor dem Schließen speichern."
    # the pair holds another word: emptied, and moved around its own translation
    assert repair(source, [wrong], w, "{1} Ihre Änderungen.", ["Speichern"]) == (
        "Ihre Änderungen vor dem Schließen <b>speichern</b>."
    )
    right = "<b>Speichern</b> Sie Ihre Änderungen vor dem Schließen."
    assert repair(source, [wrong, right], w, "-", ["Speichern"]) == right  # the next candidate
    # a candidate whose pair holds its own words wins over a first one that does not
    source = "Print the <b>current</b> page"
    w = wrap(mask(source))
    assert w is not None
    own, masked = "Die <b>seite</b> Seite drucken", "Druckt die <b>aktuelle</b> Seite"
    assert repair(source, [own, masked], w, "Druckt die Seite {1}", ["Aktuelles"]) == masked
    # a synonym the sentence does not repeat elsewhere stays where it is
    synonym = "Klicken Sie auf <b>Speichern</b>, um Ihre Änderungen zu behalten."
    click = "Click <b>Save</b> to keep your changes."
    w = wrap(mask(click))
    assert w is not None
    assert repair(click, [synonym], w, "Klicken Sie auf {1}.", ["Sichern"]) == synonym
