"""Checks on translations that BLEU averages away: repetition loops and implausible lengths.

A loop ("Das Wetter ist heute nett heute nett heute.", "Speichern speichern") is a span of
words said again right after itself; a translation that is far shorter or longer than its
source has dropped or invented text. Both are counted per test set by `ragmt eval` so that
a decoding change that trades them for BLEU shows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "LENGTH_RATIO",
    "MAX_LOOP_WORDS",
    "check_outputs",
    "has_loop",
    "implausible_length",
    "repeated",
]

MAX_LOOP_WORDS = 6  # longest span checked for a back-to-back repeat
# Characters of the translation per character of the source outside this range: implausible.
# German runs 1.1-1.2x English's length on the test sets; a third or three times is not a
# translation of the same content.
LENGTH_RATIO = (1 / 3, 3.0)

_TOKEN = re.compile(r"\w+|[,;:/\u2013\u2014-]", re.UNICODE)
_GAPS = frozenset(",;:/\u2013\u2014-")


def _tokens(text: str) -> list[str]:
    """Words, case-folded, and the separators between them (other punctuation dropped)."""
    return [w.casefold() for w in _TOKEN.findall(text)]


def _repeats(tokens: Sequence[str], max_n: int = MAX_LOOP_WORDS) -> set[tuple[str, ...]]:
    """The spans said again at once: a word of four letters or more right after itself, or a
    span of 2..max_n words right after itself or after one separator ("die Söhne, die
    Söhne"). Spans of digits only are left out (a list of numbers may repeat), and so is a
    short word ("die die") or one word after a comma ("wird, wird"): German asks for these."""
    found = set()
    for n in range(1, max_n + 1):
        for gap in (0, 1) if n > 1 else (0,):
            for i in range(len(tokens) - 2 * n - gap + 1):
                span = tuple(tokens[i : i + n])
                if any(t in _GAPS for t in span) or all(t.isdigit() for t in span):
                    continue
                if gap and tokens[i + n] not in _GAPS:
                    continue
                if span != tuple(tokens[i + n + gap : i + 2 * n + gap]):
                    continue
                if n == 1 and len(span[0]) <= 3:
                    continue
                found.add(span)
    return found


def repeated(text: str) -> tuple[bool, bool]:
    """Whether `text` says a word again at once ("two two", of two letters or more), and whether it
    says a span of words again (`_repeats`): what decoding then lets its translation do
    ("zwei zwei", a list of names said twice)."""
    tokens = _tokens(text)
    word = any(
        a == b and len(a) > 1 and a.isalpha() for a, b in zip(tokens, tokens[1:], strict=False)
    )
    return word, any(len(s) > 1 for s in _repeats(tokens))


def has_loop(hyp: str, src: str) -> bool:
    """Whether `hyp` says a span again at once (`_repeats`, case-insensitively) while its
    source repeats none ("Speichern speichern", "heute nett heute nett"): a source that itself
    repeats ("very, very good") may be translated with a repeat."""
    return bool(_repeats(_tokens(hyp))) and not _repeats(_tokens(src))


def implausible_length(hyp: str, src: str) -> bool:
    """Whether `hyp`'s length in characters is outside `LENGTH_RATIO` times its source's;
    sources under 20 characters are not judged (a word may translate to a long compound)."""
    n = len(src.strip())
    if n < 20:
        return False
    ratio = len(hyp.strip()) / n
    return not LENGTH_RATIO[0] <= ratio <= LENGTH_RATIO[1]


def check_outputs(hyps: Sequence[str], srcs: Sequence[str]) -> dict[str, Any]:
    """Counts and shares (in percent) of loops and implausible lengths over a test set."""
    if len(hyps) != len(srcs):
        raise ValueError(f"{len(hyps)} translations for {len(srcs)} sources")
    loops = sum(has_loop(h, s) for h, s in zip(hyps, srcs, strict=True))
    lengths = sum(implausible_length(h, s) for h, s in zip(hyps, srcs, strict=True))
    total = max(1, len(hyps))
    return {
        "loops": loops,
        "loops_pct": round(100 * loops / total, 2),
        "implausible_length": lengths,
        "implausible_length_pct": round(100 * lengths / total, 2),
    }
