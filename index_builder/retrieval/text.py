"""The token view of the sparse methods: NFKC, lowercase, regex word tokens; vocabulary ids.

Why a regex and not sacremoses: IDF retrieval needs the same term to come out the same way
wherever it occurs, and nothing else. The Moses tokenizer splits a period only at the end of a
sentence ("cell." stays one token mid-sentence in a two-sentence help string), applies English
contraction rules, and costs about 105 us a sentence against 8.5 us here (2,000 Bible lines,
measured on this machine) -- 12x, which is most of a store build. Words are runs of
letters/digits/underscore, joined across apostrophes ("don't"); every other non-space
character is a token of its own, so placeholders and punctuation ("%s", "(", "+") can match.

`TOKEN_VIEW` names this exact rule; a store records it and refuses to load under another.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

import numpy as np

from index_builder.columns import TextColumn

TOKEN_VIEW = "regex-words-lower-v1"
_TOKEN = re.compile(r"\w+(?:['\u2019]\w+)*|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Word tokens of `text`, lowercased after NFKC normalisation (full-width forms fold)."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())


class Vocabulary:
    """Token <-> id over a fixed, sorted token list; unknown tokens map to -1."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self.tokens = tokens
        self._ids = {t: i for i, t in enumerate(tokens)}
        if len(self._ids) != len(tokens):
            raise ValueError("vocabulary tokens must be distinct")

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]]) -> Vocabulary:
        """The sorted token set of tokenised `sentences`: the same corpus gives the same ids."""
        seen: set[str] = set()
        for tokens in sentences:
            seen.update(tokens)
        return cls(sorted(seen))

    def __len__(self) -> int:
        return len(self.tokens)

    def ids(self, tokens: Sequence[str]) -> np.ndarray:
        """int64 ids of `tokens`, -1 where a token is not in the vocabulary."""
        get = self._ids.get
        return np.fromiter((get(t, -1) for t in tokens), dtype=np.int64, count=len(tokens))

    def column(self) -> TextColumn:
        return TextColumn.from_strings(self.tokens)
