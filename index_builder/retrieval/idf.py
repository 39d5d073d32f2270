"""IDF retrieval (Bapna & Firat 2019, section 3): whole sentences, or reduced n-gram sets.

Both score term sets by ``sim = 2 sum_{t in X ∩ Y} f_t - sum_{t in X ∪ Y} f_t`` with
``f_t = log(|C| / n_t)`` over the store's source sentences (see `inverted` for the search).
A query term the corpus never saw has n_t = 0; we give it f = log |C| (as rare as the rarest
corpus term): it lowers every candidate's score equally, so it changes no ranking.

N-gram retrieval, per query: for each n-gram of its reduced set (widths widest first, then
left to right) take the pair owning the most similar corpus n-gram of the same width,
skipping pairs already taken; then keep the k best by score. One neighbour per reduced
n-gram at most, so short UI strings get few and long verses get many.

Corpus side: by default each corpus sentence is indexed by its reduced n-gram set too, like
the queries (half the memory and query time of indexing every position for width 4, a
quarter for width 8); `all_positions=True` indexes every n-gram. docs/retrieval-widths.md
measures both.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from tqdm import tqdm

from index_builder.columns import PairTexts
from index_builder.retrieval.base import Neighbour
from index_builder.retrieval.base import check_search_args as _check_args
from index_builder.retrieval.inverted import (
    InvertedIndex,
    QueryTerms,
    build_postings,
    concat_ranges,
)
from index_builder.retrieval.ngrams import WidthParams, ngram_spans, sorted_widths
from index_builder.retrieval.row_search import RowSearch
from index_builder.retrieval.text import Vocabulary, tokenize

# Rows of one width from which a batch is searched with `RowSearch.best1` (all rows at once);
# fewer: one `RowSearch.top` per row (docs/retrieval-benchmarks.md: 1.4x at batch 32, not at 1).
BATCH_ROWS = 64
DEFAULT_WIDTHS = (8, 4)  # docs/retrieval-widths.md: best coverage on bible and software-docs


@dataclass(frozen=True)
class IdfTerms:
    """Vocabulary and IDF of a corpus's source side; turns token lists into query rows."""

    vocab: Vocabulary
    idf: np.ndarray  # (V,) float64
    n_sentences: int

    @property
    def unknown_idf(self) -> float:
        return math.log(self.n_sentences)

    def query_terms(self, rows: Sequence[Sequence[str]]) -> QueryTerms:
        """One CSR row per token list: the IDF of its distinct known terms with f > 0."""
        indptr, indices, data = [0], [], []
        weight = np.zeros(len(rows), dtype=np.float64)
        for r, tokens in enumerate(rows):
            distinct = list(dict.fromkeys(tokens))
            ids = self.vocab.ids(distinct)
            known = ids[ids >= 0]
            f = self.idf[known]
            weight[r] = f.sum() + self.unknown_idf * int((ids < 0).sum())
            keep = f > 0
            indices.extend(known[keep].tolist())
            data.extend(f[keep].tolist())
            indptr.append(len(indices))
        matrix = sp.csr_matrix(
            (np.asarray(data, dtype=np.float64), np.asarray(indices, dtype=np.int32), indptr),
            shape=(len(rows), len(self.vocab)),
        )
        return QueryTerms(matrix, weight)


@dataclass(frozen=True)
class _Tokenised:
    """A corpus's source side as one id array with sentence offsets."""

    ids: np.ndarray  # (total tokens,) int64
    ptr: np.ndarray  # (N + 1,) int64
    terms: IdfTerms


def _tokenise_corpus(sources: Sequence[str], progress: bool) -> _Tokenised:
    token_lists = [
        tokenize(s) for s in tqdm(sources, desc="tokenising", unit=" sents", disable=not progress)
    ]
    vocab = Vocabulary.build(token_lists)
    ptr = np.zeros(len(token_lists) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in token_lists], out=ptr[1:])
    ids = vocab.ids([t for tokens in token_lists for t in tokens])
    indptr, _ = build_postings(ptr, ids, len(vocab))
    df = np.diff(indptr)  # sentences containing each term
    n = max(1, len(sources))
    idf = np.log(n / np.maximum(df, 1))
    return _Tokenised(ids, ptr, IdfTerms(vocab, idf, n))


class IdfSentenceRetriever:
    """The paper's baseline: the k pairs whose source sentences are most IDF-similar."""

    def __init__(self, terms: IdfTerms, index: InvertedIndex, pairs: PairTexts) -> None:
        if index.n_items != len(pairs):
            raise ValueError(f"index has {index.n_items} sentences, pairs {len(pairs)}")
        self.terms, self.index, self.pairs = terms, index, pairs

    @classmethod
    def build(
        cls, pairs: PairTexts, progress: bool = False, heavy_df: int | None = None
    ) -> IdfSentenceRetriever:
        tok = _tokenise_corpus(pairs.sources, progress)
        indptr, indices = build_postings(tok.ptr, tok.ids, len(tok.terms.vocab))
        owner = np.arange(len(pairs), dtype=np.int32)
        index = InvertedIndex.from_arrays(indptr, indices, owner, tok.terms.idf, heavy_df)
        return cls(tok.terms, index, pairs)

    def arrays(self) -> dict[str, np.ndarray]:
        p = self.index.postings
        return {"idf": self.terms.idf, "sentences.indptr": p.indptr, "sentences.indices": p.indices}

    def counts(self) -> dict[str, int]:
        return {"vocabulary": len(self.terms.vocab), "items": self.index.n_items}

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, np.ndarray],
        vocab: Vocabulary,
        pairs: PairTexts,
        heavy_df: int | None = None,
    ) -> IdfSentenceRetriever:
        terms = IdfTerms(vocab, np.asarray(arrays["idf"]), len(pairs))
        owner = np.arange(len(pairs), dtype=np.int32)
        index = InvertedIndex.from_arrays(
            arrays["sentences.indptr"], arrays["sentences.indices"], owner, terms.idf, heavy_df
        )
        return cls(terms, index, pairs)

    def search(
        self,
        queries: Sequence[str],
        k: int,
        exclude: Sequence[Collection[int]] | None = None,
    ) -> list[list[Neighbour]]:
        _check_args(queries, k, exclude)
        tokens = [tokenize(q) for q in queries]
        rows = self.terms.query_terms(tokens)
        search = RowSearch(self.index, rows)
        out = []
        for q, toks in enumerate(tokens):
            banned = exclude[q] if exclude is not None else ()
            found = search.top(q, k, banned)
            weight = float(rows.weight[q])
            out.append([self._neighbour(toks, item, key - weight) for item, key in found])
        return out

    def _neighbour(self, query_tokens: list[str], pair_id: int, score: float) -> Neighbour:
        source = self.pairs.sources[pair_id]
        theirs = set(tokenize(source))
        shared = [t for t in dict.fromkeys(query_tokens) if t in theirs]
        return Neighbour(
            pair_id=pair_id,
            source=source,
            target=self.pairs.targets[pair_id],
            score=round(score, 9),
            span=None,
            matched=" ".join(shared),
        )


@dataclass(frozen=True)
class IdfNgramParams(WidthParams):
    """Build parameters of an IDF n-gram store (recorded in its manifest)."""

    KIND = "idf-ngram"

    widths: tuple[int, ...] = DEFAULT_WIDTHS
    all_positions: bool = False  # index every corpus n-gram, not only the reduced set

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", sorted_widths(self.widths))


@dataclass(frozen=True)
class _NgramIndex:
    width: int
    index: InvertedIndex
    start: np.ndarray  # (G,) token position of each corpus n-gram in its sentence


@dataclass
class _Taken:
    """A neighbour candidate of the n-gram walk, in the order it was taken."""

    pair_id: int
    score: float
    span: tuple[int, int]
    width: int
    item: int


class IdfNgramRetriever:
    """N-gram retrieval: one neighbour per reduced query n-gram, de-duplicated, capped at k."""

    def __init__(
        self,
        terms: IdfTerms,
        indexes: Sequence[_NgramIndex],
        pairs: PairTexts,
        params: IdfNgramParams,
    ) -> None:
        self.terms, self.pairs, self.params = terms, pairs, params
        self.indexes = sorted(indexes, key=lambda x: -x.width)
        if [x.width for x in self.indexes] != list(params.widths):
            raise ValueError("n-gram indexes do not match the widths of the parameters")

    @classmethod
    def build(
        cls,
        pairs: PairTexts,
        params: IdfNgramParams = IdfNgramParams(),
        progress: bool = False,
        heavy_df: int | None = None,
    ) -> IdfNgramRetriever:
        tok = _tokenise_corpus(pairs.sources, progress)
        lengths = np.diff(tok.ptr)
        indexes = []
        for width in tqdm(params.widths, desc="n-gram indexes", disable=not progress):
            stride = 1 if params.all_positions else None
            owner_l, start_l, end_l = [], [], []
            for s, n_tok in enumerate(lengths.tolist()):
                for a, b in ngram_spans(n_tok, width, stride):
                    owner_l.append(s)
                    start_l.append(a)
                    end_l.append(b)
            owner = np.asarray(owner_l, dtype=np.int32)
            start = np.asarray(start_l, dtype=np.int32)
            end = np.asarray(end_l, dtype=np.int64)
            base = tok.ptr[owner]
            item_ptr = np.zeros(len(owner) + 1, dtype=np.int64)
            np.cumsum(end - start, out=item_ptr[1:])
            item_terms = tok.ids[concat_ranges(base + start, base + end)]
            indptr, indices = build_postings(item_ptr, item_terms, len(tok.terms.vocab))
            index = InvertedIndex.from_arrays(indptr, indices, owner, tok.terms.idf, heavy_df)
            indexes.append(_NgramIndex(width, index, start))
        return cls(tok.terms, indexes, pairs, params)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"idf": self.terms.idf}
        for x in self.indexes:
            p = x.index.postings
            out[f"w{x.width}.indptr"] = p.indptr
            out[f"w{x.width}.indices"] = p.indices
            out[f"w{x.width}.owner"] = x.index.owner
            out[f"w{x.width}.start"] = x.start
        return out

    def counts(self) -> dict[str, int]:
        out = {"vocabulary": len(self.terms.vocab)}
        out["items"] = sum(x.index.n_items for x in self.indexes)
        for x in self.indexes:
            out[f"items_w{x.width}"] = x.index.n_items
        return out

    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, np.ndarray],
        vocab: Vocabulary,
        pairs: PairTexts,
        params: IdfNgramParams,
        heavy_df: int | None = None,
    ) -> IdfNgramRetriever:
        terms = IdfTerms(vocab, np.asarray(arrays["idf"]), len(pairs))
        indexes = []
        for w in params.widths:
            owner = arrays[f"w{w}.owner"]
            if len(owner) and (owner.min() < 0 or owner.max() >= len(pairs)):
                raise ValueError(f"width {w}: n-gram owners outside 0..{len(pairs) - 1}")
            index = InvertedIndex.from_arrays(
                arrays[f"w{w}.indptr"], arrays[f"w{w}.indices"], owner, terms.idf, heavy_df
            )
            indexes.append(_NgramIndex(w, index, arrays[f"w{w}.start"]))
        return cls(terms, indexes, pairs, params)

    def query_spans(self, tokens: Sequence[str]) -> list[tuple[int, tuple[int, int]]]:
        """(width, span) of the query's reduced n-grams in the order they take neighbours."""
        return [(w, s) for w in self.params.widths for s in ngram_spans(len(tokens), w)]

    def search(
        self,
        queries: Sequence[str],
        k: int,
        exclude: Sequence[Collection[int]] | None = None,
    ) -> list[list[Neighbour]]:
        _check_args(queries, k, exclude)
        tokens = [tokenize(q) for q in queries]
        n = len(queries)
        taken = [set(exclude[q]) if exclude is not None else set() for q in range(n)]
        found: list[list[_Taken]] = [[] for _ in range(n)]
        for x in self.indexes:  # widest first, each width once the wider ones are settled
            walk = _WidthWalk(x, self.terms, tokens, [frozenset(t) for t in taken])
            pending = list(range(n))
            while pending:
                stale = []
                for q in pending:
                    walked = walk.walk(q, taken[q])
                    if walked is None:
                        stale.append(q)
                    else:
                        found[q] += walked
                walk.redo()
                pending = stale
        out = []
        for t in found:
            order = sorted(range(len(t)), key=lambda i: (-t[i].score, i))[:k]
            out.append([self._neighbour(t[i]) for i in order])
        return out

    def _neighbour(self, t: _Taken) -> Neighbour:
        x = next(x for x in self.indexes if x.width == t.width)
        source = self.pairs.sources[t.pair_id]
        start = int(x.start[t.item])
        matched = " ".join(tokenize(source)[start : start + t.width])
        return Neighbour(
            pair_id=t.pair_id,
            source=source,
            target=self.pairs.targets[t.pair_id],
            score=round(t.score, 9),
            span=t.span,
            matched=matched,
        )


class _WidthWalk:
    """The rows (query n-grams) of one width for a batch of queries, each with its answer
    (item, key) and the banned pairs that answer was computed under (`RowSearch.best1`).

    An answer computed under bans B is still the answer under the walk's bans T when B is
    part of T and its pair is not in T (T only takes other items away). A walk that meets a
    row failing this marks it stale and goes on with the pairs known so far; the first stale
    row of a query always gets its final bans, so each round settles at least one more row.
    """

    def __init__(
        self,
        x: _NgramIndex,
        terms: IdfTerms,
        tokens: Sequence[Sequence[str]],
        bans: Sequence[frozenset[int]],
    ) -> None:
        self.x = x
        self.spans = [ngram_spans(len(toks), x.width) for toks in tokens]
        self.first = np.cumsum([0] + [len(s) for s in self.spans])
        rows = [toks[a:b] for toks, spans in zip(tokens, self.spans, strict=True) for a, b in spans]
        query_terms = terms.query_terms(rows)
        self.weight = query_terms.weight
        self.search = RowSearch(x.index, query_terms)
        self.bans = [bans[q] for q, s in enumerate(self.spans) for _ in s]
        # Few rows: one `top` per row as the walk goes (no answer can be stale).
        self.batched = len(rows) >= BATCH_ROWS
        if self.batched:
            self.item, self.key = self.search.best1(np.arange(len(rows)), self.bans)
        self._stale: list[tuple[int, frozenset[int]]] = []

    def walk(self, q: int, taken: set[int]) -> list[_Taken] | None:
        """Query q's n-grams of this width left to right, each taking its best pair not in
        `taken` (which grows); None, with `taken` unchanged, when some answer was stale."""
        owner = self.x.index.owner
        now: set[int] = set(taken)
        found: list[_Taken] | None = []
        for j, span in enumerate(self.spans[q]):
            r = int(self.first[q]) + j
            if self.batched:
                item, key = int(self.item[r]), float(self.key[r])
            else:
                got = self.search.top(r, 1, now)
                item, key = got[0] if got else (-1, 0.0)
            pair_id = int(owner[item]) if item >= 0 else -1
            if not self.bans[r] <= now or item >= 0 and pair_id in now:
                self._stale.append((r, frozenset(now)))
                found = None
                continue
            if item >= 0:
                now.add(pair_id)
                if found is not None:
                    score = round(key - float(self.weight[r]), 9)
                    found.append(_Taken(pair_id, score, span, self.x.width, item))
        if found is not None:
            taken |= now
        return found

    def redo(self) -> None:
        """Answers the stale rows again, under the bans they were found stale with."""
        if not self._stale:
            return
        rows = np.asarray([r for r, _ in self._stale], dtype=np.int64)
        bans = [ban for _, ban in self._stale]
        self.item[rows], self.key[rows] = self.search.best1(rows, bans)
        for r, ban in self._stale:
            self.bans[r] = ban
        self._stale = []
