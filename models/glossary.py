"""A domain's terminology, enforced when decoding.

A glossary maps source terms to the target terms a team has agreed on ("file" -> "Datei",
"Save As" -> "Speichern unter"). A term in a sentence is found case-insensitively, never
inside a longer word, the longest term first and without overlaps, and is masked like a
literal (`models.literals`): the model translates around `{k}` and the mask is restored to the
target term. The sentence's own translation is kept where it already uses every target term,
so a glossary costs nothing where the model agreed with it.

Terms are plain strings, so a glossary is content-addressed: `version` hashes what it holds,
and a cached translation made with another glossary is never served for this one.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

__all__ = [
    "MAX_NOTE_CHARS",
    "MAX_TERMS",
    "MAX_TERM_CHARS",
    "MAX_TERM_WORDS",
    "Glossary",
    "GlossaryError",
    "Term",
    "term_key",
]

MAX_TERMS = 50_000
MAX_TERM_CHARS = 200
MAX_TERM_WORDS = 12  # words and punctuation marks of one term
MAX_NOTE_CHARS = 1_000

# Words and single punctuation marks: a term matches whole tokens, so never inside a word.
_TOKEN = re.compile(r"\w+|[^\w\s]")
_MASK_LIKE = re.compile(r"\{\s*\d+\s*\}")  # what the model writes for a mask


class GlossaryError(ValueError):
    """A term, file or glossary the service refuses; the message names where."""


def _tidy(text: str) -> str:
    return " ".join(text.split())


def term_key(source: str) -> str:
    """What a source term is matched and deduplicated by: its words, spaced alike, casefolded."""
    return _tidy(source).casefold()


@dataclass(frozen=True)
class Term:
    """One glossary entry: use `target` wherever the source says `source`."""

    source: str
    target: str
    note: str = ""

    def __post_init__(self) -> None:
        for name in ("source", "target", "note"):
            object.__setattr__(self, name, _tidy(getattr(self, name)))
        note = self.note
        if len(note) > MAX_NOTE_CHARS:
            object.__setattr__(self, "note", note[: MAX_NOTE_CHARS - 1] + "…")

    def check(self) -> None:
        """GlossaryError naming what is wrong: empty, too long, or unmatchable."""
        for name in ("source", "target"):
            value = getattr(self, name)
            if not value:
                raise GlossaryError(f"the {name} term is empty")
            if len(value) > MAX_TERM_CHARS:
                raise GlossaryError(
                    f"the {name} term has {len(value)} characters; at most {MAX_TERM_CHARS}"
                )
            if any(unicodedata.category(c) == "Cc" for c in value):
                raise GlossaryError(f"the {name} term holds a control character")
            if _MASK_LIKE.search(value):
                raise GlossaryError(f"the {name} term holds a mask such as {{1}}")
        if not any(c.isalnum() for c in self.source):
            raise GlossaryError(f"the source term {self.source!r} has no letter or digit")
        if len(_TOKEN.findall(self.source)) > MAX_TERM_WORDS:
            raise GlossaryError(
                f"the source term {self.source!r} has more than {MAX_TERM_WORDS} words"
            )


@dataclass(frozen=True)
class Glossary:
    """Terms of one language pair, one per source term (case and spacing aside), sorted.

    Built from any iterable of terms: a later term replaces an earlier one with the same
    source, so a merge is `Glossary(old.terms + new)`."""

    terms: tuple[Term, ...] = ()
    source_lang: str = "en"
    target_lang: str = "de"
    _index: dict[str, Term] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        unique: dict[str, Term] = {}
        for term in self.terms:
            try:
                term.check()
            except GlossaryError as e:
                raise GlossaryError(f"term {term.source!r}: {e}") from None
            unique[term_key(term.source)] = term
        if len(unique) > MAX_TERMS:
            raise GlossaryError(f"{len(unique)} terms; a glossary holds at most {MAX_TERMS}")
        index = {k: unique[k] for k in sorted(unique)}
        object.__setattr__(self, "terms", tuple(index.values()))
        object.__setattr__(self, "_index", index)

    def __len__(self) -> int:
        return len(self.terms)

    def get(self, source: str) -> Term | None:
        """The term for `source` (any case and spacing), or None."""
        return self._index.get(term_key(source))

    def merged(self, terms: Iterable[Term]) -> Glossary:
        """This glossary with `terms` added, each replacing the term of the same source."""
        return Glossary((*self.terms, *terms), self.source_lang, self.target_lang)

    def without(self, source: str) -> Glossary:
        """This glossary without the term of `source` (any case and spacing)."""
        key = term_key(source)
        kept = tuple(t for t in self.terms if term_key(t.source) != key)
        return Glossary(kept, self.source_lang, self.target_lang)

    def to_json(self) -> dict[str, object]:
        """Plain JSON: the languages and the terms, in their canonical order."""
        return {
            "source_lang": self.source_lang,
            "target_lang": self.target_lang,
            "terms": [{"source": t.source, "target": t.target, "note": t.note} for t in self.terms],
        }

    @classmethod
    def from_json(cls, data: object) -> Glossary:
        """The glossary `to_json` wrote; GlossaryError on anything else."""
        if not isinstance(data, dict) or not isinstance(data.get("terms"), list):
            raise GlossaryError("not a glossary: no list of terms")
        terms = []
        for n, t in enumerate(data["terms"], start=1):
            if not isinstance(t, dict) or not all(
                isinstance(t.get(k, ""), str) for k in ("source", "target", "note")
            ):
                raise GlossaryError(f"term {n}: not an object of strings")
            terms.append(Term(t.get("source", ""), t.get("target", ""), t.get("note", "")))
        langs = (data.get("source_lang", "en"), data.get("target_lang", "de"))
        if not all(isinstance(x, str) and x for x in langs):
            raise GlossaryError("the languages are not strings")
        return cls(tuple(terms), *langs)

    @cached_property
    def sha256(self) -> str:
        """The hash of the canonical JSON of the terms and languages."""
        blob = json.dumps(self.to_json(), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    @property
    def version(self) -> str:
        """A short content hash: equal glossaries have equal versions on every replica."""
        return self.sha256[:16]

    @cached_property
    def _starts(self) -> tuple[frozenset[str], int]:
        """The first tokens of the source terms, and the most tokens a term has."""
        tokens = [_TOKEN.findall(k) for k in self._index]
        return frozenset(t[0] for t in tokens), max((len(t) for t in tokens), default=0)

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """The glossary terms in `text`: (start, end, target term), in order. Each matches
        whole words in any case; where matches overlap the longest wins (then the first)."""
        starts, longest = self._starts
        tokens = [(m.start(), m.end(), m.group().casefold()) for m in _TOKEN.finditer(text)]
        found = []
        for i, (start, _, first) in enumerate(tokens):
            if first not in starts:
                continue
            for j in range(i, min(len(tokens), i + longest)):
                end = tokens[j][1]
                term = self._index.get(term_key(text[start:end]))
                if term is not None:
                    found.append((start, end, term.target))
        chosen: list[tuple[int, int, str]] = []
        for start, end, target in sorted(found, key=lambda f: (f[0] - f[1], f[0])):
            if all(end <= a or b <= start for a, b, _ in chosen):
                chosen.append((start, end, target))
        return sorted(chosen)
