"""Sentence segmentation of the source: a text of several sentences is translated one sentence
at a time and the translations are joined again.

The models here drop whole sentences when a text holds several (software-docs paragraphs,
Bible verses): they end the output after the first one or two. Translated one by one, each
sentence is kept, and a memory model retrieves neighbours for each sentence of its own.
Splitting is rule-based and conservative: after `.`, `!` or `?` (and any closing quotes or
brackets), before whitespace and a capital letter, except after an abbreviation of the source
language, a single letter (an initial), a chain of them ("z.B.", "U.S.") or a number. A
language without a list here is split by the other rules only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# Per source language, words that end with a period without ending the sentence (compared
# lower-cased, without the final period). Chains of single letters ("d.h.") need no entry.
ABBREVIATIONS: dict[str, frozenset[str]] = {
    "en": frozenset(
        "e.g i.e etc vs cf approx ca dr mr mrs ms prof st no nos fig figs vol ch sec resp "
        "jan feb mar apr jun jul aug sep sept oct nov dec inc ltd co corp".split()
    ),
    "de": frozenset(
        "bzw ca etc evtl ggf inkl usw vgl zzgl sog bspw abs abschn abb bd bsp nr nrn hr fr "
        "dr prof str tel kap mio mrd jh jhs gem max min orig anm hrsg ff allg betr "
        "jan feb febr mär apr jun jul aug sep sept okt nov dez gmbh co".split()
    ),
}

# A sentence end (., ! or ? and closing quotes or brackets), whitespace, then a capital or an
# opening quote or bracket before one.
_BOUNDARY = re.compile(r"([.!?][\"'”’)\]]*)(\s+)(?=[\"'“‘(\[]?[A-ZÀ-ÖØ-Þ])")
_LAST_WORD = re.compile(r"(\S+?)[\"'”’)\]]*$")


def is_blank(text: str) -> bool:
    """A text with nothing to translate (empty or only whitespace): it is kept as a blank
    translation, in the CLI (a blank line) and the service alike, so outputs stay aligned."""
    return not text.strip()


def split_sentences(text: str, lang: str = "en") -> list[str]:
    """`text` (in language `lang`) cut into sentences, each stripped; a text of one sentence
    comes back alone.

    Joining the pieces with single spaces gives `text` back up to whitespace.
    """
    abbreviations = ABBREVIATIONS.get(lang.lower().split("-")[0], frozenset())
    pieces: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        end = m.end(1)
        if not _ends_sentence(text[start:end], abbreviations):
            continue
        pieces.append(text[start:end].strip())
        start = m.end(2)
    pieces.append(text[start:].strip())
    return [p for p in pieces if p] or [text]


def _ends_sentence(piece: str, abbreviations: frozenset[str]) -> bool:
    """Whether the period (or ! ?) that ends `piece` ends a sentence."""
    m = _LAST_WORD.search(piece)
    if m is None:
        return False
    word = m.group(1)
    if word[-1] in "!?":
        return True
    stem = word[:-1].lstrip("\"'“‘([")
    if not stem:
        return True  # a lone period
    if stem.lower() in abbreviations or len(stem) == 1 or stem.isdigit():
        return False  # "e.g.", an initial "J.", a number "1." of a list
    return not all(len(part) == 1 for part in stem.split("."))  # "U.S.", "a.m."


@dataclass(frozen=True)
class Segmented:
    """Texts cut into sentences: `segments` in order, and per text its `[start, end)` range."""

    segments: list[str]
    spans: list[tuple[int, int]]

    def join(self, outputs: Sequence[str]) -> list[str]:
        """One output per segment -> one per text, a text's pieces joined by a space."""
        if len(outputs) != len(self.segments):
            raise ValueError(f"{len(outputs)} outputs for {len(self.segments)} segments")
        return [" ".join(p for p in outputs[a:b] if p) for a, b in self.spans]

    def gather(self, per_segment: Sequence[Sequence[T]]) -> list[list[T]]:
        """One list per segment (e.g. its neighbours) -> one per text, in segment order."""
        if len(per_segment) != len(self.segments):
            raise ValueError(f"{len(per_segment)} lists for {len(self.segments)} segments")
        return [[x for part in per_segment[a:b] for x in part] for a, b in self.spans]

    def mean(self, per_segment: Sequence[float | None]) -> list[float | None]:
        """One value per segment (e.g. its mean memory gate; None: none) -> per text the
        mean of its segments' values, None when none of them has one."""
        if len(per_segment) != len(self.segments):
            raise ValueError(f"{len(per_segment)} values for {len(self.segments)} segments")
        out: list[float | None] = []
        for a, b in self.spans:
            values = [v for v in per_segment[a:b] if v is not None]
            out.append(sum(values) / len(values) if values else None)
        return out


def segment(texts: Sequence[str], split: bool = True, lang: str = "en") -> Segmented:
    """Each text's sentences (`split`; `lang` the texts' language), or each text whole (not
    `split`, one segment each)."""
    segments: list[str] = []
    spans: list[tuple[int, int]] = []
    for text in texts:
        pieces = split_sentences(text, lang) if split and text.strip() else [text]
        spans.append((len(segments), len(segments) + len(pieces)))
        segments += pieces
    return Segmented(segments, spans)
