"""Train-only extra data for `prepare(extra=True)`: Ding's glossary and Debian's catalogs.

The extra pairs are noisier than the curated sources (hundreds of translation teams, terms
without context), so each is scored cheaply, and they are only ever added to the general
train split after the splits are drawn: the fixed dev and test sets stay byte-identical.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from index_builder.corpus import Pair
from index_builder.prepare.clean import dedup_key, keep_pair

_WORD = re.compile(r"[^\W\d_]+")
_DIGITS = re.compile(r"\d+")
_LATIN_MAX = 0x24F  # Basic Latin to Latin Extended-B: every German letter


@dataclass(frozen=True)
class ExtraConfig:
    """Thresholds of the cheap pair score and of deduplication."""

    max_variants: int = 3  # distinct translations per English string in train, most common
    min_known_words: int = 3  # a language or lexical judgement needs this many words
    min_english: float = 0.5  # share of source words that are English dictionary words
    max_english_target: float = 0.5  # share of target words that are English only
    min_latin: float = 0.9  # share of target letters in Latin script


def words(text: str, min_len: int = 3) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if len(w) >= min_len]


@dataclass(frozen=True)
class Lexicon:
    """Ding's vocabulary on each side and its one-word English -> German translations."""

    english: frozenset[str]
    german: frozenset[str]
    translations: dict[str, frozenset[str]]

    @classmethod
    def from_glossary(cls, pairs: Iterable[Pair]) -> Lexicon:
        english: set[str] = set()
        german: set[str] = set()
        translations: dict[str, set[str]] = defaultdict(set)
        for p in pairs:
            en, de = words(p.source), words(p.target)
            english.update(en)
            german.update(de)
            head = p.source.lower().removeprefix("to ").strip()
            if _WORD.fullmatch(head) and len(head) >= 4:
                translations[head].update(w for w in de if len(w) >= 4)
        return cls(
            frozenset(english),
            frozenset(german),
            {w: frozenset(t) for w, t in translations.items() if t},
        )


def score_reason(
    source: str, target: str, lexicon: Lexicon | None, cfg: ExtraConfig = ExtraConfig()
) -> str | None:
    """Why a pair that `keep_pair` kept is still not a translation pair, or None.

    Cheap checks only: the same numbers on both sides, a German-looking target, and, with
    a lexicon, an English source and at least one dictionary translation of its words.
    """
    if Counter(_DIGITS.findall(source)) != Counter(_DIGITS.findall(target)):
        return "numbers"
    letters = [c for c in target if c.isalpha()]
    if sum(ord(c) <= _LATIN_MAX for c in letters) < cfg.min_latin * len(letters):
        return "target-script"
    if lexicon is None:
        return None
    src_words, tgt_words = words(source), words(target)
    if len(src_words) >= cfg.min_known_words:
        english = sum(w in lexicon.english for w in src_words)
        if english < cfg.min_english * len(src_words):
            return "source-not-english"
    if len(tgt_words) >= cfg.min_known_words:
        english_only = sum(w in lexicon.english and w not in lexicon.german for w in tgt_words)
        if english_only > cfg.max_english_target * len(tgt_words):
            return "target-english"
    known = [w for w in dict.fromkeys(words(source, 4)) if w in lexicon.translations]
    if len(known) >= cfg.min_known_words:
        low = target.lower()
        if not any(w in low or any(t in low for t in lexicon.translations[w]) for w in known):
            return "lexical-mismatch"
    return None


def filter_pairs(
    pairs: list[Pair], lexicon: Lexicon | None, cfg: ExtraConfig = ExtraConfig()
) -> tuple[list[Pair], Counter[str]]:
    """The pairs that pass `keep_pair` and `score_reason`, and the count of each drop."""
    kept, dropped = [], Counter[str]()
    for p in pairs:
        reason = keep_pair(p.source, p.target) or score_reason(p.source, p.target, lexicon, cfg)
        if reason is None:
            kept.append(p)
        else:
            dropped[reason] += 1
    return kept, dropped


def merge_into_train(
    train: list[Pair], pool: list[Pair], max_variants: int
) -> tuple[list[Pair], dict[str, int]]:
    """The pool's pairs that are new to `train`, in pool order.

    Pairs are the same when both sides are (case- and space-insensitively); an English
    string keeps at most `max_variants` translations in all, the ones most packages agree
    on first, since a one-off variant is more often a mistake than a context.
    """
    have: dict[str, set[str]] = defaultdict(set)
    for p in train:
        have[dedup_key(p.source)].add(dedup_key(p.target))
    first: dict[tuple[str, str], int] = {}
    support: Counter[tuple[str, str]] = Counter()
    by_source: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for i, p in enumerate(pool):
        key = (dedup_key(p.source), dedup_key(p.target))
        support[key] += 1
        if key not in first:
            first[key] = i
            by_source[key[0]].append(key)
    dropped = Counter({"duplicate": len(pool) - len(first)})
    chosen = []
    for src, keys in by_source.items():
        targets = have[src]
        for key in sorted(keys, key=lambda k: (-support[k], first[k])):
            if key[1] in targets:
                dropped["in-train"] += 1
            elif len(targets) >= max_variants:
                dropped["variant-cap"] += 1
            else:
                targets.add(key[1])
                chosen.append(first[key])
    return [pool[i] for i in sorted(chosen)], dict(sorted(dropped.items()))
