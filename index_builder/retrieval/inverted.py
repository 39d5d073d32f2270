"""Exact IDF-similarity search over an inverted index of term sets, with safe pruning.

Items (corpus sentences, or corpus n-grams) and queries are sets of terms with IDF weights f.
With I = sum of f over the shared terms, and |X| the sum of f over a set,

    sim(q, c) = 2 I - (|q| + |c| - I) = 3 I - |q| - |c|,

so for one query the ranking key is ``3 I - |c|`` (|q| is a constant). I for every item that
shares a term with the query is one sparse product, query weights x postings; nothing loops
over the corpus in Python. An item that shares no term with positive IDF is not a candidate:
its "similarity" would only measure how short it is.

The search itself, with its pruning, is `index_builder.retrieval.row_search`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

_MAX_PADDED = 16  # items with at most this many terms get a padded (G, P) term table


@dataclass(frozen=True)
class InvertedIndex:
    """Items as term sets: postings (V, G) with sorted item ids per term, and their owners.

    `owner[g]` is the pair id of item g; items are ordered by owner, so the item order is
    also the tie-break order.
    """

    postings: sp.csr_matrix  # (V, G), data all 1.0
    idf: np.ndarray  # (V,) float64
    owner: np.ndarray  # (G,) int
    item_weight: np.ndarray  # (G,) float64: |c|, the sum of f over the item's distinct terms
    heavy_weight: np.ndarray  # (G,) float64: the sum of f over the item's heavy terms
    heavy_df: int  # terms in more than this many items are "heavy" (pruned first)
    sets: ExactSets  # items by their set of positive-IDF terms
    lists: ItemLists  # each item's terms, and each term's items by |c|

    @classmethod
    def from_arrays(
        cls,
        indptr: np.ndarray,
        indices: np.ndarray,
        owner: np.ndarray,
        idf: np.ndarray,
        heavy_df: int | None = None,
    ) -> InvertedIndex:
        """Wrap stored postings; derive |c| per item. `heavy_df` None: a size-based default."""
        # Plain arrays: slicing a memory map costs a Python call per slice, and top() slices.
        indptr, indices, owner = np.asarray(indptr), np.asarray(indices), np.asarray(owner)
        n_items = len(owner)
        _check_postings(indptr, indices, len(idf), n_items)
        data = np.ones(len(indices), dtype=np.float64)
        postings = sp.csr_matrix((data, indices, indptr), shape=(len(idf), n_items), copy=False)
        postings.has_sorted_indices = True  # written sorted by `build_postings`
        term_of_entry = np.repeat(np.arange(len(idf)), np.diff(indptr))
        item_weight = np.bincount(indices, weights=idf[term_of_entry], minlength=n_items)
        if heavy_df is None:
            heavy_df = default_heavy_df(n_items)
        sets = ExactSets.build(indices, term_of_entry, idf, n_items)
        heavy_f = np.where(np.diff(indptr) > heavy_df, idf, 0.0)
        heavy_weight = np.bincount(indices, weights=heavy_f[term_of_entry], minlength=n_items)
        lists = ItemLists.build(postings, item_weight, heavy_weight)
        return cls(postings, idf, owner, item_weight, heavy_weight, heavy_df, sets, lists)

    @property
    def n_items(self) -> int:
        return self.postings.shape[1]


@dataclass(frozen=True)
class ExactSets:
    """Items grouped by their set of positive-IDF terms, through an order-free 64-bit hash.

    An item whose positive terms are exactly the query's has the highest possible key,
    ``2 |q|`` (3I - |c| <= 2I <= 2|q|, with equality only for the same set), so when one
    exists it is the answer and no product is needed. Most query n-grams made only of
    frequent words ("and the", "of the lord") have such a twin; they are the expensive ones.
    Hash hits are verified against the postings, so a collision cannot change an answer.
    """

    term_hash: np.ndarray  # (V,) uint64; 0 for terms with f = 0
    sorted_hash: np.ndarray  # (G,) uint64, ascending
    order: np.ndarray  # (G,) items in hash order, ascending item within equal hashes
    n_terms: np.ndarray  # (G,) number of positive-IDF terms of each item

    @classmethod
    def build(
        cls, indices: np.ndarray, term_of_entry: np.ndarray, idf: np.ndarray, n_items: int
    ) -> ExactSets:
        rng = np.random.default_rng(20190602)  # fixed: hashes are rebuilt at every load
        term_hash = rng.integers(1, 2**64 - 1, size=len(idf), dtype=np.uint64, endpoint=True)
        term_hash[idf <= 0] = 0
        item_hash = np.zeros(n_items, dtype=np.uint64)
        np.add.at(item_hash, indices, term_hash[term_of_entry])  # wraps mod 2^64
        positive = idf[term_of_entry] > 0
        n_terms = np.bincount(indices[positive], minlength=n_items).astype(np.int32)
        order = np.argsort(item_hash, kind="stable")
        return cls(term_hash, item_hash[order], order, n_terms)

    def ranges(self, rows: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        """For each row (a term set), the range of `order` holding items with its hash."""
        h = np.zeros(rows.shape[0], dtype=np.uint64)
        nonempty = np.diff(rows.indptr) > 0
        if nonempty.any():
            sums = np.add.reduceat(self.term_hash[rows.indices], rows.indptr[:-1][nonempty])
            h[nonempty] = sums  # uint64 additions wrap mod 2^64, like the build
        lo = np.searchsorted(self.sorted_hash, h, side="left")
        hi = np.searchsorted(self.sorted_hash, h, side="right")
        return lo, hi


@dataclass(frozen=True)
class ItemLists:
    """The postings turned around, derived at load (0.17 s for both bible n-gram indexes).

    `table` (or `ragged`, for long items such as sentences): each item's distinct terms, so
    I of any candidate set is one gather over a few terms per item, not a binary search per
    (term, candidate). `by_weight`, `sorted_weight`, `rank_ptr`/`ranks`: each term's items
    in ascending |c| (as ranks into `by_weight`), so "the items of term t with |c| in a
    window" is a slice (see `RowSearch`).
    """

    by_weight: np.ndarray  # (G,) items in ascending |c|, ascending item within equal |c|
    sorted_weight: np.ndarray  # (G,) |c| of by_weight
    sorted_heavy: np.ndarray  # (G,) heavy weight of by_weight (bounds read in rank order)
    rank_ptr: np.ndarray  # (V + 1,)
    ranks: np.ndarray  # (entries,) each term's items as positions in by_weight, ascending
    table: np.ndarray | None  # (G, P) int32: terms ascending, padded with V
    ragged: tuple[np.ndarray, np.ndarray] | None  # (ptr, terms) CSR when there is no table

    @classmethod
    def build(
        cls, postings: sp.csr_matrix, item_weight: np.ndarray, heavy_weight: np.ndarray
    ) -> ItemLists:
        ones = np.ones(postings.nnz, dtype=np.int8)
        incidence = sp.csr_matrix((ones, postings.indices, postings.indptr), shape=postings.shape)
        items = incidence.T.tocsr()  # (G, V); a transpose is a counting sort: terms ascending
        by_weight = np.argsort(item_weight, kind="stable").astype(postings.indices.dtype)
        ranked = items[by_weight].T.tocsr()  # (V, G) over weight ranks, ascending per term
        items.sort_indices()
        ranked.sort_indices()
        counts = np.diff(items.indptr)
        table, ragged = None, (items.indptr, items.indices)
        if len(counts) and counts.max() <= _MAX_PADDED:  # n-grams; sentences can be long
            table = np.full((len(counts), counts.max()), postings.shape[0], dtype=np.int32)
            item = np.repeat(np.arange(len(counts)), counts)
            table[item, np.arange(items.nnz) - items.indptr[item]] = items.indices
            ragged = None
        return cls(
            by_weight,
            item_weight[by_weight],
            heavy_weight[by_weight],
            ranked.indptr,
            ranked.indices,
            table,
            ragged,
        )

    def within(self, terms: Sequence[int], low: float, high: float) -> np.ndarray:
        """The items of `terms` with low <= |c| <= high (an item once per term it has)."""
        lo = int(np.searchsorted(self.sorted_weight, low, side="left"))
        hi = int(np.searchsorted(self.sorted_weight, high, side="right"))
        parts = []
        for t in terms:
            ranks = self.ranks[self.rank_ptr[t] : self.rank_ptr[t + 1]]
            a, b = np.searchsorted(ranks, [lo, hi]).tolist()
            parts.append(ranks[a:b])
        if not parts:
            return np.zeros(0, dtype=self.by_weight.dtype)
        return self.by_weight[np.concatenate(parts)]

    def slices(
        self, terms: np.ndarray, low: np.ndarray, high: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per (term, low rank, high rank): the range of `ranks` holding the term's items
        with ranks in [low, high), as `within` finds them (one binary search per term)."""
        lo, hi = np.empty(len(terms), dtype=np.int64), np.empty(len(terms), dtype=np.int64)
        ptr, ranks, rank = self.rank_ptr, self.ranks, self.ranks.dtype.type
        bounds = zip(terms.tolist(), low.tolist(), high.tolist(), strict=True)
        for j, (t, a, b) in enumerate(bounds):
            first = int(ptr[t])
            a, b = np.searchsorted(ranks[first : int(ptr[t + 1])], (rank(a), rank(b))).tolist()
            lo[j], hi[j] = first + a, first + b
        return lo, hi

    def intersections(self, items: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """I per item: the sum of `weights` (dense over the vocabulary, plus a 0 at index V
        for the padding) over its terms, in ascending term order: equal sets, equal sums."""
        if not len(items):
            return np.zeros(0)
        if self.table is not None:
            # One row (cache line) per candidate; the columns added left to right, which
            # is faster than sum(axis=1) over rows this short.
            values = weights[self.table[items]]  # (m, P)
            inter = values[:, 0].copy()
            for j in range(1, values.shape[1]):
                inter += values[:, j]
            return inter
        assert self.ragged is not None
        ptr, terms = self.ragged
        starts = ptr[items]
        counts = ptr[items + 1] - starts  # >= 1: a candidate is in some posting list
        values = weights[terms[concat_ranges(starts, starts + counts)]]
        return np.add.reduceat(values, np.cumsum(counts) - counts)


def _check_postings(indptr: np.ndarray, indices: np.ndarray, n_vocab: int, n_items: int) -> None:
    """Refuse postings that would make scipy read out of bounds (a damaged or foreign store)."""
    if indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu":
        raise ValueError("postings must be integer arrays")
    if len(indptr) != n_vocab + 1 or indptr[0] != 0 or indptr[-1] != len(indices):
        raise ValueError(f"postings pointer does not fit {n_vocab} terms, {len(indices)} entries")
    if np.any(np.diff(indptr) < 0):
        raise ValueError("postings pointer decreases")
    if len(indices) and (indices.min() < 0 or indices.max() >= n_items):
        raise ValueError(f"postings name items outside 0..{n_items - 1}")
    rising = np.diff(indices.astype(np.int64)) > 0
    starts = indptr[1:-1]
    rising[starts[(starts > 0) & (starts < len(indices))] - 1] = True  # a new term's list
    if not rising.all():
        raise ValueError("postings are not sorted and distinct within a term")


def concat_ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, e) for each (s, e), vectorised."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return np.arange(total, dtype=np.int64) + offsets


def default_heavy_df(n_items: int) -> int:
    """Terms in more than ~0.5% of the items go to the pruned path (about the 100 commonest)."""
    return max(32, n_items // 200)


def build_postings(
    item_ptr: np.ndarray, item_terms: np.ndarray, n_vocab: int
) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of the postings of items given as CSR term lists (repeats allowed)."""
    n_items = len(item_ptr) - 1
    ones = np.ones(len(item_terms), dtype=np.int8)
    incidence = sp.csr_matrix((ones, item_terms, item_ptr), shape=(n_items, n_vocab))
    incidence.sum_duplicates()  # a term twice in an n-gram is still one set member
    postings = incidence.T.tocsr()
    postings.sort_indices()
    return postings.indptr.astype(np.int64), postings.indices.astype(np.int32)


@dataclass(frozen=True)
class QueryTerms:
    """Query rows (term sets) for one index: CSR (M, V) of the IDF of each row's known terms.

    `weight[r]` is |q|, which also counts unknown terms (see `IdfTerms.query_sets`).
    """

    matrix: sp.csr_matrix
    weight: np.ndarray
