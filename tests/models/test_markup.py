"""HTML translated block by block with every tag kept (models/markup.py)."""

from __future__ import annotations

import pytest

from models.markup import fill, split_html

pytestmark = pytest.mark.unit


def test_blocks_are_units_inline_tags_stay_in_them() -> None:
    doc = split_html(
        '<p>Click <b>Save</b> now.</p>\n<ul><li>Open <a href="/x?a=1&amp;b=2">it</a></li></ul>'
    )
    assert doc.units == ("Click <b>Save</b> now.", 'Open <a href="/x?a=1&amp;b=2">it</a>')
    assert doc.tags[1] == ('<a href="/x?a=1&amp;b=2">', "</a>")
    out = fill(
        doc,
        ["Klicken Sie jetzt auf <b>Speichern</b>.", 'Öffnen Sie <a href="/x?a=1&amp;b=2">es</a>'],
    )
    assert out == (
        "<p>Klicken Sie jetzt auf <b>Speichern</b>.</p>\n"
        '<ul><li>Öffnen Sie <a href="/x?a=1&amp;b=2">es</a></li></ul>'
    )


def test_entities_are_decoded_for_the_model_and_text_escaped_after() -> None:
    doc = split_html("<p>Tom &amp; Jerry &lt;3</p>")
    assert doc.units == ("Tom & Jerry <3",)
    assert fill(doc, ["Tom & Jerry <3"]) == "<p>Tom &amp; Jerry &lt;3</p>"


def test_a_tag_the_unit_did_not_hold_comes_back_as_text() -> None:
    doc = split_html("<p>Save <b>now</b></p>")
    assert fill(doc, ["<script>x</script> Speichern <b>jetzt</b></b>"]) == (
        "<p>&lt;script&gt;x&lt;/script&gt; Speichern <b>jetzt</b>&lt;/b&gt;</p>"
    )


def test_code_scripts_comments_and_wordless_blocks_stay_byte_for_byte() -> None:
    page = (
        "<!DOCTYPE html><html><head><title>Help</title><style>p{color:red}</style></head>"
        "<body><!-- note --><p>Run <code>make install</code> first.</p><pre>a  b\n c</pre>"
        "<p>42</p><script>if (a < b) { go(); }</script></body></html>"
    )
    doc = split_html(page)
    assert doc.units == ("Help", "Run", "first.")
    out = fill(doc, ["Hilfe", "Führen Sie", "zuerst aus."])
    assert out == page.replace("Help", "Hilfe").replace("Run ", "Führen Sie ").replace(
        " first.", " zuerst aus."
    )


def test_a_document_without_markup_is_one_unit_and_fill_checks_counts() -> None:
    doc = split_html("  Hello world  ")
    assert doc.units == ("Hello world",)
    assert fill(doc, ["Hallo Welt"]) == "  Hallo Welt  "
    with pytest.raises(ValueError, match="2 translations for 1 units"):
        fill(doc, ["a", "b"])
