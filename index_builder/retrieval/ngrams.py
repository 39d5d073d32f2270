"""The reduced n-gram set of Bapna & Firat (2019): n-grams of width n with a stride of n/2.

The paper keeps the n-grams starting at (1-based) positions i with ``i mod (n/2) == 1``,
padding at the end. Our exact rule, in 0-based half-open spans over a sentence of T tokens:

- stride ``s = max(1, n // 2)`` (odd widths round down; n = 2 and n = 1 use every position,
  where the paper's formula would select none);
- starts ``0, s, 2s, ...``; an n-gram that runs past the end is cut at T (the padding adds no
  token, so it adds nothing to an IDF set either);
- stop after the first n-gram that reaches the end: a later start would give an n-gram
  contained in that one.

So a sentence shorter than n is one n-gram (the whole sentence), and the count is
``1 + ceil(max(0, T - n) / s)``: it grows with the length, about 2T/n per width.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any, ClassVar, Self


def ngram_spans(n_tokens: int, width: int, stride: int | None = None) -> list[tuple[int, int]]:
    """Spans ``(start, end)`` of the n-grams of `width`; `stride` defaults to the reduced set's.

    ``stride=1`` gives every position (used to index a corpus exhaustively).
    """
    if width < 1:
        raise ValueError(f"n-gram width must be >= 1, got {width}")
    step = max(1, width // 2) if stride is None else stride
    if step < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    spans: list[tuple[int, int]] = []
    start = 0
    while start < n_tokens:
        end = min(start + width, n_tokens)
        spans.append((start, end))
        if end == n_tokens:
            break
        start += step
    return spans


def sorted_widths(widths: Sequence[int]) -> tuple[int, ...]:
    """Distinct positive n-gram widths, widest first; ValueError naming the problem."""
    ws = tuple(widths)
    if not ws or any(not isinstance(w, int) or w < 1 for w in ws):
        raise ValueError(f"widths must be positive integers, got {widths!r}")
    if len(set(ws)) != len(ws):
        raise ValueError(f"widths must be distinct, got {widths!r}")
    return tuple(sorted(ws, reverse=True))


class WidthParams:
    """JSON round trip of an n-gram method's frozen parameter dataclass (widths as a list)."""

    KIND: ClassVar[str] = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown {cls.KIND} parameter(s): {sorted(unknown)}")
        kw = dict(d)
        if "widths" in kw:
            kw["widths"] = tuple(kw["widths"])
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["widths"] = list(self.widths)
        return d
