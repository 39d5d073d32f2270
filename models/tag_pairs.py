"""Markup around words that move: a tag pair whose words German moves comes back empty.

German moves a verb to the end ("<b>Save</b> your changes" -> "Ihre Änderungen ...
speichern"), and a model that reads "{1} Save {2}" writes the two masks side by side and the
word elsewhere: the emphasis comes back empty (hollow). `repair` moves such a pair around the
words it enclosed where the translation wrote them, else takes the translation of the
sentence with the pair masked whole (`wrap`), what it encloses translated on its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from models.literals import (
    LITERAL,
    MASK,
    MASK_OUT,
    PEELED,
    TAG,
    Masked,
    find_literals,
    tag_pairs,
    unmask,
)

__all__ = ["TagPair", "Wrapped", "hollow", "repair", "unwrap", "wrap"]


@dataclass(frozen=True)
class TagPair:
    """A tag pair masked whole as mask `k` of `Wrapped.masked`; `nth`: which of the sentence's
    pairs opened by `opening` it is (0: the first), to find it again in a translation."""

    k: int
    opening: str
    closing: str
    nth: int


@dataclass(frozen=True)
class Wrapped:
    """A sentence's `Masked` with each outermost tag pair that encloses words masked whole
    (its literal: the source's span), and per pair (`pairs[p]`) what it encloses as a
    `Masked` of its own (`inner[p]`), translated apart and put back between the tags."""

    masked: Masked
    pairs: tuple[TagPair, ...]
    inner: tuple[Masked, ...]


@dataclass(frozen=True)
class _Lit:
    """A literal of a masked text: its value (a term's target), glue, a term's source."""

    value: str
    glue: tuple[bool, bool]
    term: str | None = None


_MASK_IN = re.compile(r"\{(\d+)\}")  # a mask as `mask` writes it


def _peeled_items(peeled: str, before: str, after: str) -> list[str | _Lit]:
    """A peeled prefix or suffix as text and literals; `before` and `after`: the text around
    it (for the glue)."""
    items: list[str | _Lit] = []
    cursor = 0
    for a, b, _ in find_literals(peeled):
        left, right = peeled[a - 1] if a else before, peeled[b] if b < len(peeled) else after
        items += [peeled[cursor:a], _Lit(peeled[a:b], (left.isalnum(), right.isalnum()))]
        cursor = b
    return [*items, peeled[cursor:]]


def _body_items(masked: Masked) -> list[str | _Lit]:
    """`masked.text` as text and literals."""
    items: list[str | _Lit] = []
    terms, cursor = dict(masked.terms), 0
    for m in _MASK_IN.finditer(masked.text):
        k = int(m.group(1))
        items.append(masked.text[cursor : m.start()])
        if 1 <= k <= len(masked.literals):
            items.append(_Lit(masked.literals[k - 1], masked.glue[k - 1], terms.get(k)))
        else:
            items.append(m.group(0))
        cursor = m.end()
    return [*items, masked.text[cursor:]]


def _render(items: Sequence[str | _Lit]) -> str:
    return "".join(x if isinstance(x, str) else x.value for x in items)


def _masked(items: Sequence[str | _Lit], prefix: str = "", suffix: str = "") -> Masked:
    """The `Masked` of `items`, masks numbered in order; nothing but literals: `.empty`, the
    literals (terms restored) in its prefix."""
    pieces, values, glue, terms = [], [], [], []
    for x in items:
        if isinstance(x, str):
            pieces.append(x)
            continue
        values.append(x.value)
        glue.append(x.glue)
        if x.term is not None:
            terms.append((len(values), x.term))
        before, after = x.glue
        pieces.append(f"{' ' if before else ''}{MASK.format(len(values))}{' ' if after else ''}")
    text = " ".join("".join(pieces).split())
    where = tuple(text.index(MASK.format(k)) / max(1, len(text)) for k in range(1, len(values) + 1))
    out = Masked(text, tuple(values), prefix, suffix, where, tuple(glue), tuple(terms))
    if not any(c.isalpha() for c in MASK_OUT.sub("", text)):
        return Masked("", prefix=unmask(text, out))
    return out


def _peels(x: str | _Lit) -> bool:
    """Whether `x` is space, or markup or emoji that `mask` would peel off a text's ends."""
    if isinstance(x, str):
        return not x.strip()
    m = LITERAL.fullmatch(x.value)
    return x.term is None and m is not None and m.lastgroup in PEELED


def _inner(items: Sequence[str | _Lit]) -> Masked:
    """What a pair encloses, to translate on its own: its edge markup peeled as `mask` does."""
    lo, hi = 0, len(items)
    while lo < hi and _peels(items[lo]):
        lo += 1
    while hi > lo and _peels(items[hi - 1]):
        hi -= 1
    head, tail = items[:lo], items[hi:]
    last = next((x for x in reversed(head) if isinstance(x, _Lit)), None)
    first = next((x for x in tail if isinstance(x, _Lit)), None)
    prefix = _render(head).rstrip() + ("" if last is None or last.glue[1] else " ")
    suffix = ("" if first is None or first.glue[0] else " ") + _render(tail).lstrip()
    return _masked(items[lo:hi], prefix.lstrip(), suffix.rstrip())


def _source(items: Sequence[str | _Lit]) -> str:
    """`items` as the source wrote them (a term's source, not its target)."""
    plain = [x if isinstance(x, str) or x.term is None else _Lit(x.term, x.glue) for x in items]
    m = _masked(plain)
    return unmask(m.text, m)


def _wordy(items: Sequence[str | _Lit]) -> bool:
    """Whether `items` hold words: letters outside the literals, or a glossary term."""
    return any(
        any(c.isalpha() for c in x) if isinstance(x, str) else x.term is not None for x in items
    )


def wrap(masked: Masked) -> Wrapped | None:
    """`masked` with each outermost tag pair that encloses words (its opening or closing tag
    maybe peeled) masked whole, so the model moves the words and their tags together; None
    when it holds no such pair, or nothing would be left to translate around them."""
    if masked.empty:
        return None
    head = _peeled_items(masked.prefix, "", masked.text[:1])
    body = _body_items(masked)
    items = head + body + _peeled_items(masked.suffix, masked.text[-1:], "")
    lits = [(j, x) for j, x in enumerate(items) if isinstance(x, _Lit)]
    tags = tuple("" if x.term is not None else x.value for _, x in lits)
    around = sorted((lits[o - 1][0], lits[c - 1][0]) for o, c in tag_pairs(tags))
    outer: list[tuple[int, int]] = []
    for a, b in around:
        whole = a < len(head) and b >= len(head) + len(body)  # peeled both: around the text
        if not whole and (not outer or a > outer[-1][1]) and _wordy(items[a + 1 : b]):
            outer.append((a, b))
    if not outer:
        return None
    start = min(outer[0][0], len(head))
    end = max(outer[-1][1] + 1, len(head) + len(body))
    kept: list[str | _Lit] = []
    pairs, inner, j = [], [], start
    opened = {a: b for a, b in outer}
    while j < end:
        if j not in opened:
            kept.append(items[j])
            j += 1
            continue
        b = opened[j]
        opening, closing = items[j], items[b]
        assert isinstance(opening, _Lit) and isinstance(closing, _Lit)
        nth = sum(_render(items[a : a + 1]) == opening.value for a, _ in around if a < j)
        k = sum(isinstance(x, _Lit) for x in kept) + 1
        pairs.append(TagPair(k, opening.value, closing.value, nth))
        inner.append(_inner(items[j + 1 : b]))
        span = opening.value + _source(items[j + 1 : b]) + closing.value
        kept.append(_Lit(span, (opening.glue[0], closing.glue[1])))
        j = b + 1
    wrapped = _masked(kept, _render(items[:start]), _render(items[end:]))
    if wrapped.empty:
        return None
    return Wrapped(wrapped, tuple(pairs), tuple(inner))


def unwrap(translation: str, wrapped: Wrapped, inner: Sequence[str]) -> str:
    """The translation of `wrapped.masked` restored, each pair's mask as its tags around
    `inner[p]`, the translation (restored) of what it enclosed."""
    literals = list(wrapped.masked.literals)
    for pair, text in zip(wrapped.pairs, inner, strict=True):
        literals[pair.k - 1] = f"{pair.opening}{text}{pair.closing}"
    return unmask(translation, replace(wrapped.masked, literals=tuple(literals)))


def _pairs_of(text: str) -> list[tuple[int, int, int, int]]:
    """(opening's start, end, closing's start, end) of each tag pair of `text`, in order."""
    tags = [(a, b) for a, b, kind in find_literals(text) if kind == "markup"]
    found = tag_pairs(tuple(text[a:b] for a, b in tags))
    return sorted((*tags[o - 1], *tags[c - 1]) for o, c in found)


def _hollows(source: str, translation: str) -> list[tuple[int, int, int, int, int]]:
    """The pairs of `translation` with nothing but spaces and punctuation between their tags
    where the source's same pair (the nth opened by the same tag) enclosed letters: their
    `_pairs_of` spans and n."""
    words: dict[str, list[bool]] = {}
    for a, b, c, _ in _pairs_of(source):
        words.setdefault(source[a:b], []).append(any(x.isalpha() for x in TAG.sub("", source[b:c])))
    out: list[tuple[int, int, int, int, int]] = []
    seen: dict[str, int] = {}
    for a, b, c, d in _pairs_of(translation):
        tag = translation[a:b]
        nth = seen.get(tag, 0)
        seen[tag] = nth + 1
        empty = not any(x.isalnum() for x in TAG.sub("", translation[b:c]))
        if empty and nth < len(words.get(tag, [])) and words[tag][nth]:
            out.append((a, b, c, d, nth))
    return out


def hollow(source: str, translation: str) -> bool:
    """Whether `translation` holds a tag pair side by side (spaces or punctuation between)
    where the source's pair enclosed words: the words moved out of their markup."""
    return bool(_hollows(source, translation))


_CLOSES = ",.;:!?)]"  # no space before these
_ENDS = " .,;:!?…\"'«»„“”"  # stripped off an inner translation to find it in a sentence


def _seam(left: str, right: str) -> str:
    """`left` and `right` joined by one space, none before closing punctuation."""
    left, right = left.rstrip(), right.lstrip()
    if not left or not right:
        return left + right
    return left + ("" if right[0] in _CLOSES else " ") + right


def _moved(text: str, spot: tuple[int, int, int, int], words: str) -> str | None:
    """`text` with the hollow pair at `spot` put around `words` (case aside, whole words),
    nearest where it stood; None when `words` is not there outside every literal."""
    a, b, c, d = spot
    words = words.strip(_ENDS)
    if not any(x.isalnum() for x in words):
        return None
    ahead = _seam(text[:a], text[b:c])
    rest = _seam(ahead, text[d:])
    pattern = r"\s+".join(re.escape(w) for w in words.split())
    spans = [(x, y) for x, y, _ in find_literals(rest)]
    found = [
        m
        for m in re.finditer(rf"(?<!\w){pattern}(?!\w)", rest, re.IGNORECASE)
        if not any(
            x < m.end() and m.start() < y and not m.start() <= x < y <= m.end() for x, y in spans
        )  # a literal it cuts, or one around it: not those words
    ]
    if not found:
        return None
    m = min(found, key=lambda m: abs(m.start() - len(ahead)))
    return rest[: m.start()] + text[a:b] + m.group(0) + text[c:d] + rest[m.end() :]


def _bare(text: str) -> str:
    """`text` without tags and spaces: what moving tags must leave as it was."""
    return "".join(TAG.sub("", text).split())


def _relocated(source: str, translation: str, wrapped: Wrapped, inner: Sequence[str]) -> str | None:
    """`translation` with each hollow pair put around the words its `inner` translation
    wrote elsewhere in it; None unless every one was."""
    text = translation
    for _ in range(len(_hollows(source, translation))):
        spots = _hollows(source, text)
        if not spots:
            break
        a, b, c, d, nth = spots[0]
        key = (text[a:b], text[c:d], nth)
        p = next(
            (p for p, x in enumerate(wrapped.pairs) if (x.opening, x.closing, x.nth) == key), None
        )
        moved = _moved(text, (a, b, c, d), inner[p]) if p is not None else None
        if moved is None:
            return None
        text = moved
    literals = {source[a:b] for a, b, _ in find_literals(source)}
    same = all(text.count(x) == translation.count(x) for x in literals)
    return text if same and _bare(text) == _bare(translation) and not hollow(source, text) else None


_ECHO = re.compile(r"\b([^\W\d_]+)(?:\s+\1\b)+", re.IGNORECASE)


def _unechoed(translation: str, source: str) -> str:
    """A pair's words translated on their own with a word said again at once said once
    ("and" -> "und und und"; a short word escapes the repeat ban), unless its source does."""
    return translation if _ECHO.search(source) else _ECHO.sub(r"\1", translation)


def _stems(text: str) -> set[str]:
    """Case-folded words of `text` outside tags, cut to their first five letters: a pair's
    content and its words' own translation agree when they share one ("aktuelle",
    "Aktuelles"), whatever German's ending."""
    return {w.casefold()[:5] for w in re.findall(r"[^\W\d_]+", TAG.sub(" ", text))}


def _misplaced(source: str, text: str, wrapped: Wrapped, inner: Sequence[str]) -> str:
    """`text` with the words taken out of each wrapped pair that holds none of its own
    translation's words (`<b>seite</b>` for "current" -> "Aktuelles": the tags landed on
    another word), leaving the pair empty for `_relocated` to move."""
    seen: dict[str, int] = {}
    spots = []
    for a, b, c, d in _pairs_of(text):
        nth = seen.get(text[a:b], 0)
        seen[text[a:b]] = nth + 1
        key = (text[a:b], text[c:d], nth)
        p = next(
            (p for p, x in enumerate(wrapped.pairs) if (x.opening, x.closing, x.nth) == key), None
        )
        words = _stems(text[b:c])
        if find_literals(text[b:c]):  # never drop a literal with the words
            continue
        if p is not None and words and _stems(inner[p]) and not words & _stems(inner[p]):
            spots.append((b, c))
    for b, c in reversed(spots):  # from the end: earlier spans keep their places
        text = text[:b] + text[c:]
    return text


def repair(
    source: str,
    candidates: Sequence[str],
    wrapped: Wrapped,
    decoded: str,
    inner: Sequence[str],
) -> str:
    """The first of `candidates` (translations of `source`, best first) whose wrapped pairs
    each enclose words of their own translation (`inner[p]`: what pair p enclosed,
    translated apart and restored); else the first candidate with each pair that came back
    empty, or around other words, moved around those words where it wrote them; else, where
    a pair came back empty, the translation of the wrapped sentence (`decoded`, as the model
    wrote it) restored (`unwrap`) when that has every literal exactly as often as the source
    and no empty pair; else the first candidate as it is (a pair around a synonym of its
    own translation stays)."""
    inner = [_unechoed(x, m.text) for x, m in zip(inner, wrapped.inner, strict=True)]
    for text in candidates:
        if not hollow(source, text) and _misplaced(source, text, wrapped, inner) == text:
            return text
    first = candidates[0]
    moved = _relocated(source, _misplaced(source, first, wrapped, inner), wrapped, inner)
    if moved is not None:
        return moved
    if not hollow(source, first):
        return first
    whole = unwrap(decoded, wrapped, inner)
    literals = {source[a:b] for a, b, _ in find_literals(source)}
    if hollow(source, whole) or any(whole.count(x) != source.count(x) for x in literals):
        return first
    return whole
