"""A store version's retriever with the domain's live edits applied (`index_builder.edits`).

Removed pairs are excluded from the version's own search (before ranking, so they cost no
neighbour slot). Added pairs are scored by the version's own method with the version's own
IDF table, ``sim = 2 sum_{t in X ∩ Y} f_t - sum_{t in X ∪ Y} f_t`` (a term the version never
saw counts as rare as its rarest, f = log |C|, as in `idf`), and merged with the version's
neighbours by score: an added pair ranks exactly where the same pair would rank had the
version's IDF table been built with it left out. IDF n-gram stores compare the reduced n-gram
sets of query and pair width by width, and the neighbour carries the query span and the pair's
n-gram that matched best. Dense stores take removals; added pairs need an IDF store (the
encoder's vectors of a new pair are only made by a fold).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from index_builder.columns import PairTexts
from index_builder.edits import AddedPair, EditState
from index_builder.retrieval.base import Neighbour, Retriever, check_search_args
from index_builder.retrieval.idf import IdfNgramRetriever, IdfSentenceRetriever, IdfTerms
from index_builder.retrieval.ngrams import ngram_spans
from index_builder.retrieval.text import tokenize


def scores_added(retriever: Retriever) -> bool:
    """Whether added pairs can be retrieved from a version searched by `retriever`."""
    return isinstance(retriever, IdfSentenceRetriever | IdfNgramRetriever)


def removed_ids(pairs: PairTexts, removed: Sequence[tuple[str, str, str]]) -> frozenset[int]:
    """The pair ids of a version that hold the removed (key, source, target) pairs."""
    if not removed:
        return frozenset()
    wanted = {(s, t) for _, s, t in removed}
    sources = {s for s, _ in wanted}
    out = set()
    for i in range(len(pairs)):
        s = pairs.sources[i]
        if s in sources and (s, pairs.targets[i]) in wanted:
            out.add(i)
    return frozenset(out)


@dataclass(frozen=True)
class _Gram:
    pair: int  # index into the added pairs
    width: int
    start: int
    terms: frozenset[str]


class EditedRetriever:
    """`Retriever` over a version plus edits; `through` is the last edit it holds."""

    def __init__(
        self, base: Retriever, state: EditState, removed: frozenset[int] = frozenset()
    ) -> None:
        self.base, self.state, self.removed = base, state, removed
        self.through = state.through
        encodes_with = getattr(base, "encodes_with", None)
        if encodes_with is not None:  # a dense version: the service reuses its encodings
            self.encodes_with = encodes_with
        self.added: tuple[AddedPair, ...] = state.added if scores_added(base) else ()
        self._tokens = [tokenize(a.source) for a in self.added]
        self._terms: IdfTerms | None = getattr(base, "terms", None)
        self._widths: tuple[int, ...] = ()
        grams: list[_Gram] = []
        if isinstance(base, IdfNgramRetriever):
            self._widths = base.params.widths
            stride = 1 if base.params.all_positions else None
            for p, toks in enumerate(self._tokens):
                for w in self._widths:
                    for a, b in ngram_spans(len(toks), w, stride):
                        grams.append(_Gram(p, w, a, frozenset(toks[a:b])))
        else:
            grams = [_Gram(p, 0, 0, frozenset(t)) for p, t in enumerate(self._tokens)]
        self._grams = grams
        self._by_term: dict[str, list[int]] = {}
        for g, gram in enumerate(grams):
            for t in gram.terms:
                self._by_term.setdefault(t, []).append(g)

    def _f(self, term: str) -> float:
        assert self._terms is not None
        i = int(self._terms.vocab.ids([term])[0])
        return float(self._terms.idf[i]) if i >= 0 else self._terms.unknown_idf

    def _sim(self, query: frozenset[str], item: frozenset[str], f: dict[str, float]) -> float:
        for t in item - f.keys():
            f[t] = self._f(t)
        shared = sum(f[t] for t in query & item)
        return 2 * shared - sum(f[t] for t in query | item)

    def _candidates(self, terms: Collection[str], width: int) -> set[int]:
        """Grams of `width` sharing a term with the query part (the others score lower than
        any neighbour of the version could: they share nothing)."""
        found: set[int] = set()
        for t in terms:
            found.update(g for g in self._by_term.get(t, ()) if self._grams[g].width == width)
        return found

    def _added_for(self, tokens: list[str]) -> list[Neighbour]:
        """Each added pair that shares a term with the query, at its best score."""
        f: dict[str, float] = {}
        best: dict[int, tuple[float, tuple[int, int] | None, _Gram]] = {}
        if self._widths:
            parts = [(w, (a, b)) for w in self._widths for a, b in ngram_spans(len(tokens), w)]
        else:
            parts = [(0, None)]
        for width, span in parts:
            query = frozenset(tokens[span[0] : span[1]] if span is not None else tokens)
            for t in query - f.keys():
                f[t] = self._f(t)
            for g in self._candidates(query, width):
                gram = self._grams[g]
                score = self._sim(query, gram.terms, f)
                held = best.get(gram.pair)
                if held is None or score > held[0]:
                    best[gram.pair] = (score, span, gram)
        out = []
        for p, (score, span, gram) in best.items():
            pair = self.added[p]
            if span is not None:
                matched = " ".join(self._tokens[p][gram.start : gram.start + gram.width])
            else:
                matched = " ".join(t for t in dict.fromkeys(tokens) if t in gram.terms)
            out.append(
                Neighbour(-1, pair.source, pair.target, round(score, 9), span, matched, pair.seq)
            )
        return out

    def search(
        self,
        queries: Sequence[str],
        k: int,
        exclude: Sequence[Collection[int]] | None = None,
        **given: Any,
    ) -> list[list[Neighbour]]:
        """The version's search (`given`: what it takes beyond the protocol, a dense store's
        query `states`), merged with the added pairs."""
        check_search_args(queries, k, exclude)
        if self.removed:
            exclude = [
                self.removed | set(exclude[q]) if exclude is not None else self.removed
                for q in range(len(queries))
            ]
        found = self.base.search(queries, k, exclude, **given)
        if not self.added:
            return found
        out = []
        for q, hits in zip(queries, found, strict=True):
            merged = list(hits) + self._added_for(tokenize(q))
            # stable: the version's own order first among equal scores
            merged.sort(key=lambda n: -n.score)
            out.append(merged[:k])
        return out
