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

A glossary term (`models.glossary`) is masked the same way, its mask restored to the term's
target instead of the source text: one mechanism keeps literals intact and enforces
terminology.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "KINDS",
    "LITERAL",
    "MASK",
    "MASK_OUT",
    "MARKED_WORDS",
    "PEELED",
    "TAG",
    "TEMPLATE_PLACEHOLDER",
    "Masked",
    "Terms",
    "find_literals",
    "keeps",
    "keeps_literals",
    "keeps_terms",
    "mask",
    "mask_pair",
    "mask_training_pair",
    "tag_pairs",
    "unmask",
]

_CONVERSION = r"[sdifuxXoeEgGcp@]"  # a printf conversion
_SIZE = r"\d*(?:\.\d+)?(?:l{1,2}|h|z)?"  # its width, precision and length
# Named and template placeholders of localisation files, which `service.documents` also
# keeps out of a file's text; `{` or `%` followed by a word, a space or a lone brace is text.
TEMPLATE_PLACEHOLDER = (
    r"\{\{\{[^{}\n]{0,200}\}\}\}|\{\{[^{}\n]{0,200}\}\}"  # {{{ raw }}} {{ name }} {{name}}
    r"|\{%[^{}\n]{0,200}%\}|\{#[^{}\n]{0,200}#\}"  # {% tag %} {# comment #}
    r"|%\([^()\s]{1,64}\)[-+#0]*\d*(?:\.\d+)?[sdifuxXoeEgGcr]"  # Python %(name)s %(x).2f
    r"|%\{[A-Za-z_]\w*\}|%<[A-Za-z_]\w*>[-+#0]*\d*(?:\.\d+)?[sdifuxXoeEgGcbBaAp]"  # Ruby
    r"|\{\s*\w+\s*,\s*(?:number|date|time|duration|ordinal|spellout)\s*(?:,[^{}\n]{0,64})?\}"  # ICU
)
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
        TEMPLATE_PLACEHOLDER
        # GCC's diagnostics: %<code%> quoted, %qE %q+D %#qT quoted arguments, %wd, %L %C loci
        + r"|%<[^\n]{0,100}?%>|%[#+]?q[+#]?[A-Za-z](?![A-Za-z])|%w[diux](?!\w)|%[LC](?!\w)"
        + rf"|%(?:\d+\$)?[-+#0]*{_SIZE}{_CONVERSION}"  # printf %s %1$d %-5.2f
        + rf"|%(?:\d+\$)?[-+#0]* [-+ #0]*{_SIZE}{_CONVERSION}(?!\w|\.\w)"  # % d, not "% sign"
        + r"|%L?\d+|%n(?!\w)|%[A-Za-z_]\w*%"  # Qt %1 %L1 %n, Windows %APPDATA%
        r"|\{[\w.:!-]*\}|\$\{\w+\}|\$\(\w+\)|\$\w+\$?"  # {name} {0} ${VAR} $(VAR) $VAR $name$
    ),
    "number": r"(?<![\w.,:])\d+(?:[.,:/-]\d+)*%?(?![\w])",  # 3.14 1,024 12:30 2002-03-31
    "emoji": (
        r"[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF]"
        r"(?:[\uFE0F\u200D\U0001F3FB-\U0001F3FF]|[\U0001F000-\U0001FAFF\u2600-\u27BF])*"
    ),
}
LITERAL = re.compile("|".join(f"(?P<{k}>{p})" for k, p in KINDS.items()))
PEELED = frozenset({"markup", "emoji"})
MASK = "{{{}}}"  # mask k of a text: {k}, counted from 1
MASK_OUT = re.compile(r"\{\s*(\d+)\s*\}")  # as the model may write it back
_BROKEN_MASK = re.compile(r"\{\s*\d+\s*\}?|(?<![\w\0])\d+\s*\}")


def find_literals(text: str) -> list[tuple[int, int, str]]:
    """The literal spans of `text`: (start, end, kind), in order, not overlapping."""
    return [(m.start(), m.end(), m.lastgroup or "") for m in LITERAL.finditer(text)]


class Terms(Protocol):
    """Terminology to enforce (`models.glossary.Glossary` is one)."""

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """The term spans of `text`: (start, end, target term), in order, not overlapping."""
        ...


TERM = "term"  # the kind of a glossary term's span


@dataclass(frozen=True)
class Masked:
    """A text ready to translate: `text` with literal k (`literals[k - 1]`) masked as `{k}`,
    the literals (and spaces) that opened and closed it peeled into `prefix` and `suffix`;
    `where[k - 1]` is mask k's relative position in `text` (0..1), `glue[k - 1]` whether the
    literal touched a letter or digit before and after it in the source. `terms` lists the
    masks that stand for glossary terms, (k, the term as the source wrote it): their
    `literals[k - 1]` is the target term that restores them."""

    text: str
    literals: tuple[str, ...] = ()
    prefix: str = ""
    suffix: str = ""
    where: tuple[float, ...] = ()
    glue: tuple[tuple[bool, bool], ...] = ()
    terms: tuple[tuple[int, str], ...] = ()

    @property
    def empty(self) -> bool:
        """Nothing to translate: the text was literals and spaces only."""
        return not self.text.strip()


def mask(text: str, terms: Terms | None = None, literals: bool = True) -> Masked:
    """`text` with its literal spans (unless not `literals`) and its `terms` masked (see the
    module's docstring); a term that overlaps a literal is left to the literal."""
    spans = [(a, b, k, text[a:b]) for a, b, k in find_literals(text)] if literals else []
    if terms is not None:
        taken = [(a, b) for a, b, _, _ in spans]
        found = [
            (a, b, TERM, target)
            for a, b, target in terms.find(text)
            if not any(a < y and x < b for x, y in taken)
        ]
        spans = sorted(spans + found)
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
    pieces, values, glue, term_of, cursor = [], [], [], [], body_start
    for start, end, kind, value in spans[first:last]:
        pieces.append(text[cursor:start])
        values.append(value)
        if kind == TERM:
            term_of.append((len(values), text[start:end]))
        # Spaced off a word it touches (the model reads "Save {1} your"), and glued back to
        # the word after translation; next to a space or punctuation, the model's spacing.
        before = start > 0 and text[start - 1].isalnum()
        after = end < len(text) and text[end].isalnum()
        glue.append((before, after))
        pieces.append(f"{' ' if before else ''}{MASK.format(len(values))}{' ' if after else ''}")
        cursor = end
    pieces.append(text[cursor:body_end])
    masked = " ".join("".join(pieces).split())
    if not any(c.isalpha() for c in MASK_OUT.sub("", masked)):  # nothing to translate
        return Masked("", prefix=_restored(text, spans))
    where = tuple(
        masked.index(MASK.format(k + 1)) / max(1, len(masked)) for k in range(len(values))
    )
    return Masked(masked, tuple(values), prefix, suffix, where, tuple(glue), tuple(term_of))


def _restored(text: str, spans: list[tuple[int, int, str, str]]) -> str:
    """`text` with each glossary term replaced by its target (literals stay as they are)."""
    out, cursor = [], 0
    for start, end, kind, value in spans:
        if kind == TERM:
            out.append(text[cursor:start])
            out.append(_cased(value, text[start:end], "".join(out)))
            cursor = end
    return "".join(out) + text[cursor:]


TAG = re.compile(r"<[^<>]*>")


def _cased(target: str, source: str, before: str) -> str:
    """A term's target as written where it lands: capitalised where it opens the sentence and
    the source's term was (`before` is the output ahead of it)."""
    opens = not any(c.isalnum() for c in TAG.sub("", before))
    if opens and source[:1].isupper() and target[:1].islower():
        return target[:1].upper() + target[1:]
    return target


# a tag pair around words ("<b>Save</b>"): what a translation must not copy untranslated
MARKED_WORDS = re.compile(r"<([A-Za-z][\w:.-]*)[^<>]*>[^<>]*[A-Za-z][^<>]*</\1>")


def keeps_literals(source: str, translation: str) -> bool:
    """Whether `translation` holds each literal span of `source` exactly as often, and
    translated what markup encloses (`<b>Save</b>` copied whole is left untranslated)."""
    spans = {source[a:b] for a, b, _ in find_literals(source)}
    if any(translation.count(x) != source.count(x) for x in spans):
        return False
    return not any(m.group(0) in translation for m in MARKED_WORDS.finditer(source))


def _word(term: str) -> re.Pattern[str]:
    """`term` anywhere not inside a longer word, in any case."""
    return re.compile(rf"(?<!\w){re.escape(term)}(?!\w)", re.IGNORECASE)


def _used(term: str) -> re.Pattern[str]:
    """`term` as written (its first letter in either case) where a word starts, inflected or
    compounded after it ("Datei" in "Dateien" and "Dateimanager", not in "Textdatei")."""
    first = f"[{re.escape(term[:1].lower())}{re.escape(term[:1].upper())}]" if term else ""
    ending = "[^\\W\\d_]*" if term[-1:].isalpha() else ""
    return re.compile(rf"(?<!\w){first}{re.escape(term[1:])}{ending}(?!\w)")


def keeps_terms(translation: str, masked: Masked) -> bool:
    """Whether `translation` uses each glossary term of `masked` at least as often as the
    source holds it: its target as the glossary writes it (the first letter's case free)
    where a word starts, maybe inflected (a masked term is restored uninflected, so a
    translation that inflected it is the better one to keep)."""
    wanted: dict[str, int] = {}
    for k, _ in masked.terms:
        target = masked.literals[k - 1]
        wanted[target] = wanted.get(target, 0) + 1
    for target in sorted(wanted, key=len, reverse=True):  # "Dateimanager" is not "Datei" too
        found = _used(target).findall(translation)
        if len(found) < wanted[target]:
            return False
        translation = _used(target).sub(" ", translation)
    return True


def keeps(source: str, translation: str, masked: Masked) -> bool:
    """Whether a sentence's own translation may stand: it kept the literals masked in
    `masked` (`keeps_literals`) and used its glossary terms (`keeps_terms`)."""
    if (len(masked.literals) > len(masked.terms) or masked.prefix or masked.suffix) and (
        not keeps_literals(source, translation)
    ):
        return False
    return keeps_terms(translation, masked)


def mask_pair(source: str, target: str, masked: Masked) -> tuple[str, str]:
    """A retrieved pair with the request's literals masked as in the request wherever both
    sides hold one (the memory then shows the model a mask copied across), and its glossary
    terms wherever the source holds the term and the target its glossary target; other
    text kept."""
    terms = dict(masked.terms)
    for k, literal in enumerate(masked.literals, start=1):
        token = f" {MASK.format(k)} "
        if k in terms:
            on_source, on_target = _word(terms[k]), _word(literal)
            if on_source.search(source) and on_target.search(target):
                source, target = on_source.sub(token, source), on_target.sub(token, target)
        elif literal in source and literal in target:
            source = source.replace(literal, token)
            target = target.replace(literal, token)
    return " ".join(source.split()), " ".join(target.split())


def mask_training_pair(source: str, target: str) -> tuple[Masked, str] | None:
    """A training pair as the pipeline would show it to the model with its literals masked:
    `mask(source)`, and the target with each of those literals replaced by the same mask,
    spaced off a word it touches as the source's is. So a model trained on such pairs knows
    the masks and copies each once where it belongs.

    None when the pair has no literal to mask or peels markup or emoji off an end (the
    model never sees those), and when the target's literals are not exactly the source's
    (a number written otherwise, a path dropped, one added): such a pair would teach the
    model to lose or invent a mask.
    """
    masked = mask(source)
    if not masked.literals or masked.empty or masked.prefix.strip() or masked.suffix.strip():
        return None
    spans = find_literals(target)
    if sorted(target[a:b] for a, b, _ in spans) != sorted(masked.literals):
        return None
    unused: dict[str, list[int]] = {}
    for k, literal in enumerate(masked.literals, start=1):
        unused.setdefault(literal, []).append(k)
    pieces, cursor = [], 0
    for start, end, _ in spans:  # a literal written twice takes its masks in source order
        k = unused[target[start:end]].pop(0)
        before = start > 0 and target[start - 1].isalnum()
        after = end < len(target) and target[end].isalnum()
        pieces += [target[cursor:start], f"{' ' if before else ''}{MASK.format(k)}"]
        pieces.append(" " if after else "")
        cursor = end
    pieces.append(target[cursor:])
    return masked, " ".join("".join(pieces).split())


def unmask(translation: str, masked: Masked) -> str:
    """The translation of `masked` with every literal back exactly once, and the peeled
    prefix and suffix around it."""
    if masked.empty:
        return masked.prefix + masked.suffix
    out: list[str] = []
    used: set[int] = set()
    cursor = 0
    for m in MASK_OUT.finditer(translation):
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
    terms = {k for k, _ in masked.terms}
    tags = tuple("" if k in terms else x for k, x in enumerate(masked.literals, start=1))
    for k_open, k_close in tag_pairs(tags):  # a pair the model put back to front
        a, b = text.find(f"\0{k_open}\0"), text.find(f"\0{k_close}\0")
        if a > b >= 0:
            text = text.replace(f"\0{k_open}\0", "\1").replace(f"\0{k_close}\0", f"\0{k_open}\0")
            text = text.replace("\1", f"\0{k_close}\0")
    text = " ".join(text.split())
    sources = dict(masked.terms)
    for k, literal in enumerate(masked.literals, start=1):
        before, after = masked.glue[k - 1]
        token = f"\0{k}\0"
        if before:
            text = text.replace(f" {token}", token)
        if after:
            text = text.replace(f"{token} ", token)
        if k in sources and token in text:
            ahead = masked.prefix + _NUL_MASK.sub("", text[: text.index(token)])
            literal = _cased(literal, sources[k], ahead)
        text = text.replace(token, literal)
    return masked.prefix + text + masked.suffix


_NUL_MASK = re.compile(r"\0\d+\0")


_TAG_NAME = re.compile(r"<(/?)([A-Za-z][\w:.-]*)")


def tag_pairs(literals: tuple[str, ...]) -> list[tuple[int, int]]:
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
