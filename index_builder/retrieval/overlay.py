"""A store version's retriever with the domain's live edits applied (`index_builder.edits`).

Removed pairs are excluded from the version's own search (before ranking, so they cost no
neighbour slot). Added pairs are scored by the version's own method with the version's own
IDF table, ``sim = 2 sum_{t in X ∩ Y} f_t - sum_{t in X ∪ Y} f_t`` (a term the version never
saw counts as rare as its rarest, f = log |C|, as in `idf`), and merged with the version's
neighbours by score: an added pair ranks exactly where the same pair would rank had the
version's IDF table been built with it left out. IDF n-gram stores compare the reduced n-gram
sets of query and pair width by width, and the neighbour carries the query span and the pair's
n-gram that matched best. Dense n-gram stores score an added pair by the squared distance of
its reduced n-gram vectors (the version's own encoder) to the query's, as FAISS scores the
version's own; a pair is encoded once, when it is added.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from index_builder.columns import PairTexts
from index_builder.edits import AddedPair, EditState
from index_builder.retrieval.base import Neighbour, Retriever, check_search_args
from index_builder.retrieval.idf import IdfNgramRetriever, IdfSentenceRetriever, IdfTerms
from index_builder.retrieval.ngrams import ngram_spans
from index_builder.retrieval.text import tokenize


def scores_added(retriever: Retriever) -> bool:
    """Whether added pairs can be retrieved from a version searched by `retriever`."""
    return isinstance(retriever, IdfSentenceRetriever | IdfNgramRetriever) or _dense(retriever)


def _dense(retriever: Retriever) -> bool:
    """A dense n-gram version (told apart without importing FAISS where none is used)."""
    return hasattr(retriever, "search_encoded") and hasattr(retriever, "encoder")


@dataclass(frozen=True)
class _Vectors:
    """The added pairs' n-gram vectors of one width, by the dense version's own encoder."""

    vectors: np.ndarray  # (G, D) float64
    norms: np.ndarray  # (G,) squared
    owner: np.ndarray  # (G,) the added pair
    start: np.ndarray  # (G,) its first sub-word


# Encoded n-grams of added pairs by (encoder identity, pair key): an edit re-encodes only the
# pairs it adds, not every pair added before it.
DenseCache = dict[tuple[int, str], list[tuple[int, np.ndarray, int]]]


def removed_ids(pairs: PairTexts, removed: Sequence[tuple[str, str, str]]) -> frozenset[int]:
    """The pair ids of a version that hold the removed (key, source, target) pairs."""
    return frozenset(i for rows in rows_of(pairs, removed).values() for i in rows)


def rows_of(pairs: PairTexts, removed: Sequence[tuple[str, str, str]]) -> dict[str, frozenset[int]]:
    """Per removed (key, source, target) pair, the ids of the version's rows that hold it
    (empty: none); one pass over the version."""
    if not removed:
        return {}
    wanted = {(s, t): k for k, s, t in removed}
    sources = {s for s, _ in wanted}
    out: dict[str, set[int]] = {k: set() for k, _, _ in removed}
    for i in range(len(pairs)):
        s = pairs.sources[i]
        if s in sources and (key := wanted.get((s, pairs.targets[i]))) is not None:
            out[key].add(i)
    return {k: frozenset(v) for k, v in out.items()}


@dataclass(frozen=True)
class _Grams:
    """The added pairs' n-grams of one width (0: whole sentences) as a sparse term matrix."""

    weighted: sp.csr_matrix  # (G, V') f of each distinct term of each n-gram
    total: np.ndarray  # (G,) the sum of each n-gram's f
    owner: np.ndarray  # (G,) the added pair it belongs to
    start: np.ndarray  # (G,) its first token in the pair's source


class EditedRetriever:
    """`Retriever` over a version plus edits; `through` is the last edit it holds."""

    def __init__(
        self,
        base: Retriever,
        state: EditState,
        removed: frozenset[int] = frozenset(),
        cache: DenseCache | None = None,
    ) -> None:
        self.base, self.state, self.removed = base, state, removed
        self.through = state.through
        encodes_with = getattr(base, "encodes_with", None)
        if encodes_with is not None:  # a dense version: the service reuses its encodings
            self.encodes_with = encodes_with
        self.added: tuple[AddedPair, ...] = state.added if scores_added(base) else ()
        self._tokens = [tokenize(a.source) for a in self.added]
        self._widths: tuple[int, ...] = (0,)
        self._stride: int | None = None
        if isinstance(base, IdfNgramRetriever):
            self._widths = base.params.widths
            self._stride = 1 if base.params.all_positions else None
        terms: IdfTerms | None = getattr(base, "terms", None)
        self._grams: dict[int, _Grams] = {}
        self._dense: dict[int, _Vectors] = {}
        if _dense(base) and self.added:
            self._encode(base, cache if cache is not None else {})
        if terms is None or not self.added:
            return
        self._vocab, self._idf = terms.vocab, terms.idf
        self._unknown = terms.unknown_idf
        # terms the version never saw get ids after its own, all as rare as its rarest
        every = sorted({t for toks in self._tokens for t in toks})
        known = set(self._known(every))
        new = [t for t in every if t not in known]
        self._new = {t: len(terms.vocab) + i for i, t in enumerate(new)}
        self._f = np.concatenate([terms.idf, np.full(len(new), self._unknown)])
        for w in self._widths:
            rows, owner, start = [], [], []
            for p, toks in enumerate(self._tokens):
                spans = ngram_spans(len(toks), w, self._stride) if w else [(0, len(toks))]
                for a, b in spans:
                    rows.append(self._ids(toks[a:b]))
                    owner.append(p)
                    start.append(a)
            matrix = self._matrix(rows)
            weighted = matrix.multiply(self._f[None, :]).tocsr()
            total = np.asarray(weighted.sum(axis=1)).ravel()
            self._grams[w] = _Grams(weighted, total, np.asarray(owner), np.asarray(start))

    def _encode(self, base: Any, cache: DenseCache) -> None:
        """The added pairs' reduced n-gram vectors by the version's encoder (blocking: the
        model runs; pairs encoded for an earlier overlay come from `cache`)."""
        from index_builder.retrieval.encoder import encode_chunk

        widths = base.params.widths
        identity = id(base.encoder)
        todo = [a for a in self.added if (identity, a.key) not in cache]
        if todo:
            ids = base.encoder.token_ids([a.source for a in todo])
            present = [i for i, x in enumerate(ids) if x]
            for a in todo:
                cache[(identity, a.key)] = []
            if present:
                blocks = encode_chunk(base.encoder, [ids[i] for i in present], widths, False)
                for w, block in zip(widths, blocks, strict=True):
                    for v, r, a in zip(block.vectors, block.row, block.start, strict=True):
                        key = todo[present[int(r)]].key
                        cache[(identity, key)].append((w, v.astype(np.float64), int(a)))
        self._pieces = [base.encoder.token_ids([a.source])[0] for a in self.added]
        for w in widths:
            rows = [
                (p, v, a)
                for p, pair in enumerate(self.added)
                for width, v, a in cache[(identity, pair.key)]
                if width == w
            ]
            if rows:
                vectors = np.stack([v for _, v, _ in rows])
                self._dense[w] = _Vectors(
                    vectors,
                    (vectors**2).sum(axis=1),
                    np.asarray([p for p, _, _ in rows]),
                    np.asarray([a for _, _, a in rows]),
                )

    def _dense_for(
        self, q: int, ids: list[int], rows: dict[int, dict[tuple[int, int], int]], vectors: Any
    ) -> list[Neighbour]:
        """Each added pair at its nearest n-gram to one of query q's (score: minus the
        squared distance, as the version scores its own)."""
        from index_builder.retrieval.dense import SCORE_DECIMALS

        base: Any = self.base
        best: dict[int, tuple[float, tuple[int, int], int, int]] = {}
        for w, grams in self._dense.items():
            spans = ngram_spans(len(ids), w)
            if not spans or w not in rows:
                continue
            qv = np.stack([vectors[w][rows[w][(q, a)]] for a, _ in spans]).astype(np.float64)
            d = (qv**2).sum(axis=1)[:, None] + grams.norms[None, :] - 2 * qv @ grams.vectors.T
            for g in range(d.shape[1]):
                r = int(np.argmin(d[:, g]))
                score = -max(0.0, float(d[r, g]))
                p = int(grams.owner[g])
                if p not in best or score > best[p][0]:
                    best[p] = (score, spans[r], int(grams.start[g]), w)
        out = []
        for p, (score, span, start, w) in best.items():
            pair = self.added[p]
            matched = base.encoder.piece_text(self._pieces[p][start : start + w])
            score = round(score, SCORE_DECIMALS)
            out.append(Neighbour(-1, pair.source, pair.target, score, span, matched, pair.seq))
        return out

    def _known(self, tokens: Sequence[str]) -> list[str]:
        ids = self._vocab.ids(list(tokens))
        return [t for t, i in zip(tokens, ids.tolist(), strict=True) if i >= 0]

    def _ids(self, tokens: Sequence[str]) -> list[int]:
        """Distinct term ids of `tokens` (-1: a term neither the version nor an edit has)."""
        distinct = list(dict.fromkeys(tokens))
        ids = self._vocab.ids(distinct).tolist()
        return [i if i >= 0 else self._new.get(t, -1) for t, i in zip(distinct, ids, strict=True)]

    def _matrix(self, rows: list[list[int]]) -> sp.csr_matrix:
        indptr, indices = [0], []
        for ids in rows:
            indices.extend(i for i in ids if i >= 0)
            indptr.append(len(indices))
        data = np.ones(len(indices), dtype=np.float64)
        return sp.csr_matrix((data, indices, indptr), shape=(len(rows), len(self._f)))

    def _added_for(self, tokens: list[str], k: int) -> list[Neighbour]:
        """The k best added pairs that share a term with the query, each at its best score
        over the query's n-grams and its own, ``sim = 3 |X ∩ Y|_f - |X|_f - |Y|_f`` (ties: the
        wider width, then the earlier n-gram)."""
        parts = []  # per width: (scores, owners, spans' rows, grams)
        spans_of: dict[int, list[tuple[int, int]]] = {}
        for w, grams in self._grams.items():
            spans = ngram_spans(len(tokens), w) if w else [(0, len(tokens))]
            spans_of[w] = spans
            rows = [self._ids(tokens[a:b]) for a, b in spans]
            query = self._matrix(rows)
            mass = np.asarray(
                [sum(self._f[i] if i >= 0 else self._unknown for i in ids) for ids in rows]
            )
            shared = (query @ grams.weighted.T).tocoo()  # (spans, grams) where terms meet
            keep = shared.data > 0
            r, g = shared.row[keep], shared.col[keep]
            score = 3 * shared.data[keep] - mass[r] - grams.total[g]
            parts.append((score, grams.owner[g], r, g, np.full(len(g), w)))
        if not parts:
            return []
        score, owner, row, gram, width = (np.concatenate(x) for x in zip(*parts, strict=True))
        order = np.argsort(-score, kind="stable")
        _, first = np.unique(owner[order], return_index=True)  # each pair's best entry
        best = order[np.sort(first)]  # in score order
        out = []
        for i in best[np.argsort(-score[best], kind="stable")][:k]:
            p, w = int(owner[i]), int(width[i])
            pair = self.added[p]
            if w:
                start = int(self._grams[w].start[gram[i]])
                matched = " ".join(self._tokens[p][start : start + w])
                span: tuple[int, int] | None = spans_of[w][int(row[i])]
            else:
                theirs = set(self._tokens[p])
                matched = " ".join(t for t in dict.fromkeys(tokens) if t in theirs)
                span = None
            score_i = round(float(score[i]), 9)
            out.append(Neighbour(-1, pair.source, pair.target, score_i, span, matched, pair.seq))
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
        if self._dense:  # one encoding of the queries for the version and the added pairs
            base: Any = self.base
            encoded = base.query_vectors(queries, given.get("states"))
            found = base.search_encoded(encoded, k, exclude)
            extra = [self._dense_for(q, encoded[0][q], encoded[1], encoded[2])
                     for q in range(len(queries))]  # fmt: skip
        else:
            found = self.base.search(queries, k, exclude, **given)
            if not self._grams:
                return found
            extra = [self._added_for(tokenize(q), k) for q in queries]
        out = []
        for hits, added in zip(found, extra, strict=True):
            mine = {(n.source, n.target) for n in added}
            # a pair the version holds and an edit added again is served once, as the edit
            merged = [n for n in hits if (n.source, n.target) not in mine] + added
            # stable: the version's own order first among equal scores
            merged.sort(key=lambda n: -n.score)
            out.append(merged[:k])
        return out
