"""Literal text masked before translation and restored exactly (models/literals.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.literals import (
    find_literals,
    keeps_literals,
    mask,
    mask_pair,
    mask_training_pair,
    unmask,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "kind", "literal"),
    [
        ("Visit https://example.org/docs for more.", "url", "https://example.org/docs"),
        ("See www.example.com/help?id=42.", "url", "www.example.com/help?id=42"),
        ("Write to help@example.com if stuck.", "email", "help@example.com"),
        ("Edit /etc/ragmt/config.yaml now.", "path", "/etc/ragmt/config.yaml"),
        ("Open ~/Documents/report.odt.", "path", "~/Documents/report.odt"),
        ("Run ./configure first.", "path", "./configure"),
        ("Copy C:\\Users\\x\\a.txt away.", "path", "C:\\Users\\x\\a.txt"),
        ("Could not open %s: denied.", "placeholder", "%s"),
        ("Deleted %1$d files.", "placeholder", "%1$d"),
        ("Page %1 of %2.", "placeholder", "%1"),
        ("Hello {name}, welcome.", "placeholder", "{name}"),
        ("Set $HOME first.", "placeholder", "$HOME"),
        ("Set ${USER} first.", "placeholder", "${USER}"),
        ("It is in %APPDATA% somewhere.", "placeholder", "%APPDATA%"),
        ("Hello %(name)s, welcome.", "placeholder", "%(name)s"),
        ("Deleted %(count)d files.", "placeholder", "%(count)d"),
        ("It costs %(x).2f euros.", "placeholder", "%(x).2f"),
        ("Hello {{ name }}, welcome.", "placeholder", "{{ name }}"),
        ("Hello {{name}}, welcome.", "placeholder", "{{name}}"),
        ("At most {{ limit }} items.", "placeholder", "{{ limit }}"),
        ("Due {{ date | date:'short' }} here.", "placeholder", "{{ date | date:'short' }}"),
        ("Raw {{{ body }}} here.", "placeholder", "{{{ body }}}"),
        ("{% if user %}Welcome back{% endif %}", "placeholder", "{% if user %}"),
        ("Saved {# a note #} now.", "placeholder", "{# a note #}"),
        ("Hello %{name}, welcome.", "placeholder", "%{name}"),
        ("Deleted %<count>d files.", "placeholder", "%<count>d"),
        ("You have {count, number} files.", "placeholder", "{count, number}"),
        ("Saved on {0, date, short} here.", "placeholder", "{0, date, short}"),
        ("Deleted %n file(s).", "placeholder", "%n"),
        ("Page %L1 of %L2.", "placeholder", "%L1"),
        ("Balance: % d.", "placeholder", "% d"),
        ("It costs 3.14 euros.", "number", "3.14"),
        ("Meet at 12:30 today.", "number", "12:30"),
        ("Done at 75% now.", "number", "75%"),
        ("Due on 2002-03-31 at the latest.", "number", "2002-03-31"),
        ("Call 555-1234 today.", "number", "555-1234"),
        ("Great work 👍 team.", "emoji", "👍"),
        ("Click <b>Save</b> now.", "markup", "<b>"),
        ("Use &amp; here.", "markup", "&amp;"),
    ],
)
def test_each_kind_is_found(text: str, kind: str, literal: str) -> None:
    found = {(text[a:b], k) for a, b, k in find_literals(text)}
    assert (literal, kind) in found


@pytest.mark.parametrize("text", ["and/or", "MP3 player", "x86_64 build", "Version two", "e.g."])
def test_words_with_digits_or_slashes_are_not_literals(text: str) -> None:
    assert find_literals(text) == []


@pytest.mark.parametrize(
    "text",
    [
        "a lone % sign",
        "50 % discount",
        "5 % e.g. here",
        "a 5%(approx) rise",
        "50% {",
        "brace { and } alone",
        "an open {{ brace and } one",
        "{count, plural, one {# item} other {# items}}",
        "%{1 }",
        "a 5%quick rise and %Cat",
    ],
)
def test_percent_signs_and_braces_in_text_are_not_placeholders(text: str) -> None:
    assert [(text[a:b], k) for a, b, k in find_literals(text) if k != "number"] == []


@pytest.mark.parametrize(
    ("text", "literals"),
    [
        ("100% done", ("100%",)),
        ("1%% corresponds to 0.0001", ("1%", "0.0001")),  # "% c" of "corresponds" is text
        ("Open 50% {{ x }} now", ("50%", "{{ x }}")),
    ],
)
def test_a_percent_after_a_number_stays_with_it(text: str, literals: tuple[str, ...]) -> None:
    assert tuple(text[a:b] for a, b, _ in find_literals(text)) == literals


@pytest.mark.parametrize(
    "text",
    [
        "Hello %(name)s, you have %(count)d new messages worth %(total).2f euros.",
        "Hi {{ user.name }}, at most {{limit}} of {{{ raw }}} items remain.",
        "{% if admin %}Delete the {{ kind }}{% endif %} now.",
        "Hello %{name}, you have %<count>d new messages.",
        "Send %s to {name} at %(host)s via ${PROTO} or {{ url }}, see /etc/hosts and 42 more.",
        "Saved %n file(s) on {0, date, short} for %1 and %L2 at 75%.",
    ],
)
def test_named_and_template_placeholders_are_masked_and_restored_exactly(text: str) -> None:
    m = mask(text)
    assert not any(c in m.text for c in "%$") and "{{" not in m.text
    assert "".join(m.literals) and all(x in text for x in m.literals)
    assert unmask(m.text, m) == text  # the model copied every mask
    shuffled = " ".join(reversed(m.text.split()))  # the model moved them
    out = unmask(shuffled, m)
    assert all(out.count(x) == text.count(x) for x in m.literals)


@pytest.mark.parametrize(
    ("text", "literals"),
    [
        ("the %<bool%> keyword is not allowed", ("%<bool%>",)),
        ("missing cpu name in %<-mtune=%s%>", ("%<-mtune=%s%>",)),
        ("%qE appears more than once in %<allocate%> clauses", ("%qE", "%<allocate%>")),
        ("use %#qT and %q+D here, not %qs", ("%#qT", "%q+D", "%qs")),
        ("Label %d at %C previously used; value %wd at %L", ("%d", "%C", "%wd", "%L")),
        ("a %<count>d items", ("%<count>d",)),  # Ruby's, not GCC's: no closing %>
    ],
)
def test_gcc_diagnostic_directives_are_placeholders(text: str, literals: tuple[str, ...]) -> None:
    """GCC's message catalogs (in the general domain) quote code as %<...%> and arguments as
    %qE: 10 of 131 general test sentences lost one before these were masked."""
    assert tuple(text[a:b] for a, b, _ in find_literals(text)) == literals
    m = mask(text)
    assert unmask(m.text, m) == text


def test_a_template_placeholder_is_one_literal_with_the_others() -> None:
    m = mask("Hello %(name)s, {{ count }} files in /tmp/x for {user}.")
    assert m.text == "Hello {1}, {2} files in {3} for {4}."
    assert m.literals == ("%(name)s", "{{ count }}", "/tmp/x", "{user}")
    assert unmask("Hallo {1}, {2} Dateien in {3} für {4}.", m) == (
        "Hallo %(name)s, {{ count }} Dateien in /tmp/x für {user}."
    )


def test_mask_numbers_literals_and_restores_them() -> None:
    m = mask("Please write to help@example.com or call 555 today.")
    assert m.text == "Please write to {1} or call {2} today."
    assert m.literals == ("help@example.com", "555")
    assert unmask("Bitte schreiben Sie an {1} oder rufen Sie heute {2} an.", m) == (
        "Bitte schreiben Sie an help@example.com oder rufen Sie heute 555 an."
    )


def test_markup_and_emoji_around_the_text_never_reach_the_model() -> None:
    m = mask("<b>Save</b>")
    assert (m.prefix, m.text, m.suffix) == ("<b>", "Save", "</b>")
    assert unmask("Speichern", m) == "<b>Speichern</b>"
    m = mask("Thank you! 😀")
    assert m.text == "Thank you!" and unmask("Danke!", m) == "Danke! 😀"


def test_a_text_of_literals_only_comes_back_as_it_is() -> None:
    for text in ("https://example.org", "😀", "<br/>", "42"):
        m = mask(text)
        assert m.empty
        assert unmask("", m) == text


def test_inline_markup_is_glued_back_to_its_word() -> None:
    m = mask("Click <b>Save</b> now.")
    assert m.literals == ("<b>", "</b>")
    assert unmask("Klicken Sie jetzt auf {1} Speichern {2}.", m) == (
        "Klicken Sie jetzt auf <b>Speichern</b>."
    )


def test_a_lost_mask_is_put_back_a_repeated_one_dropped_an_unknown_one_removed() -> None:
    m = mask("Copy /tmp/a.txt to /tmp/b.txt now.")
    out = unmask("Kopieren Sie {1} {1} nach {7} jetzt.", m)
    assert out.count("/tmp/a.txt") == 1 and out.count("/tmp/b.txt") == 1
    assert "{" not in out


def test_masks_written_with_spaces_are_read() -> None:
    m = mask("Open %s now.")
    assert unmask("Öffnen Sie { 1 } jetzt.", m) == "Öffnen Sie %s jetzt."


def test_a_neighbour_gets_the_request_masks_where_both_sides_hold_the_literal() -> None:
    m = mask("Edit /etc/hosts and 42 more.")
    src, tgt = mask_pair("Edit /etc/hosts first.", "Bearbeiten Sie zuerst /etc/hosts.", m)
    assert (src, tgt) == ("Edit {1} first.", "Bearbeiten Sie zuerst {1} .")
    # a literal on one side only stays as it is
    assert mask_pair("42 files", "Dateien", m) == ("42 files", "Dateien")


words = st.text(alphabet="abcdefghij XYZ", min_size=1, max_size=12)
literal = st.sampled_from(
    [
        "https://a.org/x",
        "me@a.org",
        "/etc/x.conf",
        "%s",
        "{n}",
        "%(n)s",
        "{{ n }}",
        "%{n}",
        "42",
        "😀",
        "<b>",
        "</b>",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(words, literal), min_size=1, max_size=8), st.randoms())
def test_every_literal_comes_back_exactly_as_often_whatever_the_model_does(parts, rnd) -> None:
    text = " ".join(parts)
    m = mask(text)
    # a model that shuffles, drops and repeats masks
    tokens = m.text.split()
    rnd.shuffle(tokens)
    tokens = [t for t in tokens if rnd.random() > 0.3] + [t for t in tokens if rnd.random() > 0.7]
    out = unmask(" ".join(tokens), m)
    for lit in set(m.literals):
        assert out.count(lit) >= text.count(lit) - (m.prefix + m.suffix).count(lit)
        assert out.count(lit) == text.count(lit)


def test_half_written_masks_are_removed_and_their_literal_put_back() -> None:
    m = mask("Six months after September 14 2001?")
    assert m.literals == ("14", "2001")
    out = unmask("Sechs Monate nach September {1} {2 und 2}?", m)
    assert "{" not in out and "}" not in out
    assert out.count("14") == 1 and out.count("2001") == 1


def test_a_markup_pair_the_model_wrote_back_to_front_is_put_in_order() -> None:
    m = mask("They returned into the land <b>of</b> the Philistines.")
    out = unmask("Sie kehrten in das Land {2} {1} der Philister zurück.", m)
    assert out.count("<b>") == 1 and out.index("<b>") < out.index("</b>")


def test_words_in_markup_copied_untranslated_do_not_count_as_kept() -> None:
    source = "<b>Save</b> your changes before closing."
    assert not keeps_literals(source, "<b>Save</b> Ihre Änderungen vor dem Schließen.")
    assert keeps_literals(source, "<b>Speichern</b> Sie Ihre Änderungen vor dem Schließen.")
    assert keeps_literals("Open %s now.", "Öffnen Sie %s jetzt.")


def test_a_training_pair_gets_the_masks_the_pipeline_would_show_and_unmasks_back() -> None:
    source = "Open %s and then 3 files at /tmp/x."
    target = "Öffnen Sie %s und dann 3 Dateien in /tmp/x."
    m, masked_target = mask_training_pair(source, target)
    assert m == mask(source)
    assert m.text == "Open {1} and then {2} files at {3}."
    assert masked_target == "Öffnen Sie {1} und dann {2} Dateien in {3}."
    assert unmask(masked_target, m) == target


def test_a_literal_written_twice_takes_its_masks_in_source_order() -> None:
    m, t = mask_training_pair("From 5 to 5 or %s", "Von 5 bis 5 oder %s")
    assert m.text == "From {1} to {2} or {3}"
    assert t == "Von {1} bis {2} oder {3}"


def test_a_literal_glued_to_a_word_is_spaced_off_on_both_sides() -> None:
    m, t = mask_training_pair("Copy %sfiles now", "%sDateien jetzt kopieren")
    assert m.text == "Copy {1} files now"
    assert t == "{1} Dateien jetzt kopieren"


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("Open the file.", "Öffnen Sie die Datei."),  # nothing to mask
        ("Pay 1,000 dollars.", "Zahlen Sie 1.000 Dollar."),  # the number written otherwise
        ("Open %s now.", "Jetzt öffnen."),  # the target dropped it
        ("Open it now.", "Öffnen Sie 2 jetzt."),  # no source literal, one in the target
        ("Open %s now.", "Öffnen Sie %s und %d jetzt."),  # the target added one
        ("<b>Save</b>", "<b>Speichern</b>"),  # markup peeled off: the model never sees it
    ],
)
def test_a_pair_whose_literals_differ_or_that_has_none_is_not_masked(source, target) -> None:
    assert mask_training_pair(source, target) is None
