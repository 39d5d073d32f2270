"""HTML in, HTML out: the text of each block translated, every tag kept.

A document is cut at block-level tags (`<p>`, `<li>`, `<td>`, `<br>`, ...) into units; a
unit is text with its inline tags (`<b>`, `<a href=...>`, ...), translated as one text in
which the tags are literal text (`models.literals` keeps them exactly). What is not text to
translate stays byte for byte: block tags, comments, doctype, the content of `<script>`,
`<style>`, `<code>`, `<pre>`, `<textarea>`, and whitespace between blocks. Entities are
decoded for the model and text is escaped again after it, so `Tom &amp; Jerry` reads as
`Tom & Jerry` and the output cannot carry markup that was not in the source: a tag the model
wrote that the unit did not hold is escaped as text.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Document", "fill", "split_html"]

_TOKEN = re.compile(r"<!--.*?-->|<![^>]*>|<\?.*?\?>|</?[A-Za-z][^<>]*>", re.DOTALL)
_NAME = re.compile(r"</?([A-Za-z][\w:-]*)")
BLOCK = frozenset(
    "address article aside blockquote body br caption dd details div dl dt fieldset "
    "figcaption figure footer form h1 h2 h3 h4 h5 h6 head header hr html legend li main nav "
    "ol option p section summary table tbody td tfoot th thead title tr ul".split()
)
VERBATIM = frozenset("code pre script style textarea noscript svg math".split())


@dataclass(frozen=True)
class Document:
    """`parts`: verbatim strings and unit numbers in document order; `units[i]`: unit i's
    text as the model reads it (entities decoded, whitespace collapsed, inline tags in);
    `tags[i]`: the inline tags unit i holds, which alone may come back as tags."""

    parts: tuple[str | int, ...]
    units: tuple[str, ...]
    tags: tuple[tuple[str, ...], ...]


def _name(tag: str) -> str | None:
    m = _NAME.match(tag)
    return m.group(1).lower() if m else None


def split_html(doc: str) -> Document:
    """Cut `doc` into verbatim parts and units of text to translate."""
    parts: list[str | int] = []
    units: list[str] = []
    tags: list[tuple[str, ...]] = []
    current: list[str] = []  # raw tokens of the unit being read
    verbatim: str | None = None  # inside <script> and kin: the element's name

    def close_unit() -> None:
        raw = "".join(current)
        current.clear()
        if not raw:
            return
        pieces = [p for p in _split(raw) if p]
        text = "".join(p if _TOKEN.fullmatch(p) else html.unescape(p) for p in pieces)
        if not any(c.isalpha() for p in pieces if not _TOKEN.fullmatch(p) for c in p):
            parts.append(raw)  # no words: nothing to translate
            return
        lead = raw[: len(raw) - len(raw.lstrip())]
        trail = raw[len(raw.rstrip()) :]
        parts.extend([lead, len(units), trail])
        units.append(" ".join(text.split()))
        tags.append(tuple(p for p in pieces if _TOKEN.fullmatch(p) and _name(p)))

    for piece in _split(doc):
        if not piece:
            continue
        if verbatim is not None:
            parts.append(piece)
            if _TOKEN.fullmatch(piece) and piece.startswith("</") and _name(piece) == verbatim:
                verbatim = None
            continue
        if not _TOKEN.fullmatch(piece):
            current.append(piece)
            continue
        name = _name(piece)
        if name is None or name in BLOCK:  # a comment, doctype, or a block boundary
            close_unit()
            parts.append(piece)
        elif name in VERBATIM and not piece.startswith("</"):
            close_unit()
            parts.append(piece)
            if not piece.endswith("/>"):
                verbatim = name
        else:
            current.append(piece)  # inline markup: part of the text
    close_unit()
    return Document(tuple(p for p in parts if p != ""), tuple(units), tuple(tags))


def _split(text: str) -> list[str]:
    """Tags and the text between them, in order."""
    out, cursor = [], 0
    for m in _TOKEN.finditer(text):
        out += [text[cursor : m.start()], m.group(0)]
        cursor = m.end()
    out.append(text[cursor:])
    return out


def fill(doc: Document, translations: Sequence[str]) -> str:
    """The document with unit i replaced by `translations[i]`: its text escaped, and of the
    tags in it only those the unit held (as many times), the rest escaped as text."""
    if len(translations) != len(doc.units):
        raise ValueError(f"{len(translations)} translations for {len(doc.units)} units")
    out = []
    for part in doc.parts:
        if isinstance(part, str):
            out.append(part)
            continue
        allowed = Counter(doc.tags[part])
        for piece in _split(translations[part]):
            if _TOKEN.fullmatch(piece) and allowed[piece] > 0:
                allowed[piece] -= 1
                out.append(piece)
            else:
                out.append(html.escape(piece, quote=False))
    return "".join(out)
