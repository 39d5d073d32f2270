"""Literal text kept intact: URLs, e-mail addresses, paths, numbers, placeholders, emoji and
inline markup pass through a translation exactly.

A model trained on sentences mangles what is not language ("help@example.com" ->
"in@example.com.com.com", "/etc/ragmt/config.yaml" -> "config.yl.yaml", an emoji dropped
or hallucinated around). Each such span is masked before translation as `{1}`, `{2}`, ...
(the placeholder form the model copies most reliably, measured in
docs/trustworthy-translations.md) and restored after it; literals that open or close the
text are peeled off and never reach the model. The restoration does not trust the model:
each mask is used once, a repeated mask is dropped, an unknown one removed, and a mask the
model lost is put back where it stood in the source, proportionally — so every literal is
in the output exactly as often as in the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KINDS", "Masked", "find_literals", "keeps_literals", "mask", "mask_pair", "unmask"]

# Each kind's pattern; the first that matches at a position wins, longer kinds first.
KINDS: dict[str, str] = {
    "markup": r"</?[A-Za-z][\w:.-]*(?:\s+[^<>]*?)?/?>|&(?:#\d+|#x[0-9A-Fa-f]+|[A-Za-z]\w*);",
    "url": r"(?:\b(?:https?|ftp|file)://|\bwww\.)[^\s<>\"']*[^\s<>\"'.,;:!?)\]]",
    "email": r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}\b",
    "path": (
        r"(?<![\w/.])(?:~|\.{1,2})?/(?:[\w.@%+~*?-]+/?)+(?<![.,;:!?])"
        r"|\b[A-Za-z]:\\(?:[\w.@%+~-]+\\?)*[\w.@%+~-]"
    ),
    "placeholder": (
        r"%(?:\d+\$)?[-+ #0]*\d*(?:\.\d+)?(?:l{1,2}|h|z)?[sdifuxXoeEgGcp@]"  # printf
        r"|%\d+|%[A-Za-z_]\w*%"  # Qt %1, Windows %APPDATA%
        r"|\{[\w.:!-]*\}|\$\{\w+\}|\$\(\w+\)|\$\w+\$?"  # {name} {0} ${VAR} $(VAR) $VAR $name$
    ),
    "number": r"(?<![\w.,:])\d+(?:[.,:/-]\d+)*%?(?![\w])",  # 3.14 1,024 12:30 2002-03-31
    "emoji": (
        r"[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF]"
        r"(?:[\uFE0F\u200D\U0001F3FB-\U0001F3FF]|[\U0001F000-\U0001FAFF\u2600-\u27BF])*"
    ),
}
_LITERAL = re.compile("|".join(f"(?P<{k}>{p})" for k, p in KINDS.items()))
PEELED = frozenset({"markup", "emoji"})
MASK = "{{{}}}"  # mask k of a text: {k}, counted from 1
_MASK_OUT = re.compile(r"\{\s*(\d+)\s*\}")  # as the model may write it back
_BROKEN_MASK = re.compile(r"\{\s*\d+\s*\}?|(?<![\w\0])\d+\s*\}")


def find_literals(text: str) -> list[tuple[int, int, str]]:
    """The literal spans of `text`: (start, end, kind), in order, not overlapping."""
    return [(m.start(), m.end(), m.lastgroup or "") for m in _LITERAL.finditer(text)]


@dataclass(frozen=True)
class Masked:
    """A text ready to translate: `text` with literal k (`literals[k - 1]`) masked as `{k}`,
    the literals (and spaces) that opened and closed it peeled into `prefix` and `suffix`;
    `where[k - 1]` is mask k's relative position in `text` (0..1), `glue[k - 1]` whether the
    literal touched a letter or digit before and after it in the source."""

    text: str
    literals: tuple[str, ...] = ()
    prefix: str = ""
    suffix: str = ""
    where: tuple[float, ...] = ()
    glue: tuple[tuple[bool, bool], ...] = ()

    @property
    def empty(self) -> bool:
        """Nothing to translate: the text was literals and spaces only."""
        return not self.text.strip()


def mask(text: str) -> Masked:
    """`text` with its literal spans masked (see the module's docstring)."""
    spans = find_literals(text)
    if not spans:
        return Masked(text)
    # Peel markup and emoji (with the spaces between them) off both ends: they wrap or
    # decorate the text, where a number or a path that opens it may move in translation.
    lo, hi = 0, len(text)
    first, last = 0, len(spans)
    while first < last and spans[first][2] in PEELED and not text[lo : spans[first][0]].strip():
        lo = spans[first][1]
        first += 1
    while (
        last > first and spans[last - 1][2] in PEELED and not text[spans[last - 1][1] : hi].strip()
    ):
        hi = spans[last - 1][0]
        last -= 1
    body_start = len(text[lo:hi]) - len(text[lo:hi].lstrip()) + lo
    body_end = len(text[lo:hi].rstrip()) + lo
    prefix, suffix = text[:body_start], text[body_end:]
    if body_start >= body_end:  # literals only
        return Masked("", prefix=text)
    pieces, literals, glue, cursor = [], [], [], body_start
    for start, end, _ in spans[first:last]:
        pieces.append(text[cursor:start])
        literals.append(text[start:end])
        # Spaced off a word it touches (the model reads "Save {1} your"), and glued back to
        # the word after translation; next to a space or punctuation, the model's spacing.
        before = start > 0 and text[start - 1].isalnum()
        after = end < len(text) and text[end].isalnum()
        glue.append((before, after))
        pieces.append(f"{' ' if before else ''}{MASK.format(len(literals))}{' ' if after else ''}")
        cursor = end
    pieces.append(text[cursor:body_end])
    masked = " ".join("".join(pieces).split())
    if not any(c.isalpha() for c in _MASK_OUT.sub("", masked)):  # nothing to translate
        return Masked("", prefix=text)
    where = tuple(
        masked.index(MASK.format(k + 1)) / max(1, len(masked)) for k in range(len(literals))
    )
    return Masked(masked, tuple(literals), prefix, suffix, where, tuple(glue))


_MARKED_WORDS = re.compile(r"<([A-Za-z][\w:.-]*)[^<>]*>[^<>]*[A-Za-z][^<>]*</\1>")


def keeps_literals(source: str, translation: str) -> bool:
    """Whether `translation` holds each literal span of `source` exactly as often, and
    translated what markup encloses (`<b>Save</b>` copied whole is left untranslated)."""
    spans = {source[a:b] for a, b, _ in find_literals(source)}
    if any(translation.count(x) != source.count(x) for x in spans):
        return False
    return not any(m.group(0) in translation for m in _MARKED_WORDS.finditer(source))


def mask_pair(source: str, target: str, masked: Masked) -> tuple[str, str]:
    """A retrieved pair with the request's literals masked as in the request wherever both
    sides hold one (the memory then shows the model a mask copied across); other text kept."""
    for k, literal in enumerate(masked.literals, start=1):
        if literal in source and literal in target:
            token = f" {MASK.format(k)} "
            source = source.replace(literal, token)
            target = target.replace(literal, token)
    return " ".join(source.split()), " ".join(target.split())


def unmask(translation: str, masked: Masked) -> str:
    """The translation of `masked` with every literal back exactly once, and the peeled
    prefix and suffix around it."""
    if masked.empty:
        return masked.prefix + masked.suffix
    out: list[str] = []
    used: set[int] = set()
    cursor = 0
    for m in _MASK_OUT.finditer(translation):
        out.append(translation[cursor : m.start()])
        k = int(m.group(1))
        if 1 <= k <= len(masked.literals) and k not in used:
            used.add(k)
            out.append(f"\0{k}\0")
        cursor = m.end()
    out.append(translation[cursor:])
    text = _BROKEN_MASK.sub(" ", "".join(out))  # a mask the model wrote half of ("{3")
    for k in range(1, len(masked.literals) + 1):
        if k not in used:
            text = _insert_at(text, f"\0{k}\0", masked.where[k - 1])
    for k_open, k_close in _tag_pairs(masked.literals):  # a pair the model put back to front
        a, b = text.find(f"\0{k_open}\0"), text.find(f"\0{k_close}\0")
        if a > b >= 0:
            text = text.replace(f"\0{k_open}\0", "\1").replace(f"\0{k_close}\0", f"\0{k_open}\0")
            text = text.replace("\1", f"\0{k_close}\0")
    text = " ".join(text.split())
    for k, literal in enumerate(masked.literals, start=1):
        before, after = masked.glue[k - 1]
        token = f"\0{k}\0"
        if before:
            text = text.replace(f" {token}", token)
        if after:
            text = text.replace(f"{token} ", token)
        text = text.replace(token, literal)
    return masked.prefix + text + masked.suffix


_TAG_NAME = re.compile(r"<(/?)([A-Za-z][\w:.-]*)")


def _tag_pairs(literals: tuple[str, ...]) -> list[tuple[int, int]]:
    """(opening, closing) mask numbers of the markup literals that pair up, in order."""
    pairs, stack = [], []
    for k, literal in enumerate(literals, start=1):
        m = _TAG_NAME.match(literal)
        if m is None or literal.endswith("/>"):
            continue
        if not m.group(1):
            stack.append((m.group(2).lower(), k))
        elif stack and stack[-1][0] == m.group(2).lower():
            pairs.append((stack.pop()[1], k))
    return pairs


def _insert_at(text: str, token: str, where: float) -> str:
    """`token` put between words at the space nearest `where` (0..1) of `text`."""
    target = where * len(text)
    spaces = [i for i, c in enumerate(text) if c == " "] + [len(text)]
    spot = min(spaces + [0], key=lambda i: abs(i - target))
    return f"{text[:spot]} {token} {text[spot:]}"
